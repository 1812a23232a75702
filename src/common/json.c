/* The library's JSON builder (json.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/common.h"

/* v in the shortest form that reads back as the same double (cJSON's own
 * printing allows a relative error of one epsilon). */
static void put_num(FILE *f, double v, int digits) {
    char buf[40];
    if (!isfinite(v)) fputs("null", f);
    else if (digits >= 17) fputs(dtx_format_real(v, buf, sizeof buf), f);
    else fprintf(f, "%.*g", digits, v);
}

void jnum(cJSON *o, const char *key, double v, int *ok) {
    char buf[40];
    if (!(isfinite(v) ? cJSON_AddRawToObject(o, key, dtx_format_real(v, buf, sizeof buf)) : cJSON_AddNullToObject(o, key)))
        *ok = 0;
}

void jint(cJSON *o, const char *key, int64_t v, int *ok) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    if (!cJSON_AddRawToObject(o, key, buf)) *ok = 0;
}

void jstr(cJSON *o, const char *key, const char *v, int *ok) {
    if (!cJSON_AddStringToObject(o, key, v)) *ok = 0;
}

void jbool(cJSON *o, const char *key, int v, int *ok) {
    if (!cJSON_AddBoolToObject(o, key, v)) *ok = 0;
}

void jnull(cJSON *o, const char *key, int *ok) {
    if (!cJSON_AddNullToObject(o, key)) *ok = 0;
}

cJSON *jnum_array(const double *v, int64_t n, int digits) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) {
        if (i) fputc(',', f);
        put_num(f, v[i], digits);
    }
    fputc(']', f);
    int bad = ferror(f);
    bad |= fclose(f) != 0; /* closing sets text and len */
    cJSON *raw = bad ? NULL : cJSON_CreateRaw(text);
    free(text);
    return raw;
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

char *json_text(cJSON *root, int ok, int pretty) {
    char *text = ok && root ? (pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root)) : NULL;
    cJSON_Delete(root);
    char *full = text ? realloc(text, strlen(text) + 2) : NULL;
    if (!full) {
        free(text);
        return NULL;
    }
    size_t n = strlen(full);
    full[n] = '\n', full[n + 1] = '\0';
    return full;
}
