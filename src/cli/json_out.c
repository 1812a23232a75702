/* --json reports of the eval commands (json_out.h). */
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"
#include "cli/json_out.h"
#include "common/common.h"

void jnum(cJSON *o, const char *key, double v, int *ok) {
    if (!cJSON_AddNumberToObject(o, key, v)) *ok = 0;
}

void jstr(cJSON *o, const char *key, const char *v, int *ok) {
    if (!cJSON_AddStringToObject(o, key, v)) *ok = 0;
}

cJSON *jadd(cJSON *parent, const char *key, cJSON *child, int *ok) {
    if (!child) *ok = 0;
    else if (key ? !cJSON_AddItemToObject(parent, key, child) : !cJSON_AddItemToArray(parent, child)) {
        cJSON_Delete(child);
        *ok = 0;
        return NULL;
    }
    return child;
}

int json_write_report(const char *cmd, const char *path, cJSON *root, int ok, int pretty) {
    char *text = ok && root ? (pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root)) : NULL;
    cJSON_Delete(root);
    char *full = text ? realloc(text, strlen(text) + 2) : NULL;
    if (!full) {
        free(text);
        return runtime_error(cmd, "--json %s: out of memory building the JSON", path);
    }
    size_t n = strlen(full);
    full[n] = '\n', full[n + 1] = '\0';
    dtx_status st = dtx_write_file_atomic(path, full, n + 1);
    free(full);
    return st ? lib_error(cmd) : EXIT_OK;
}
