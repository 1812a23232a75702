/* The difftx command's JSON output (json_out.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"
#include "cli/json_out.h"

int json_write_report(const char *cmd, const char *path, cJSON *root, int ok, int pretty) {
    char *text = json_text(root, ok, pretty);
    if (!text) return runtime_error(cmd, "--json %s: out of memory building the JSON", path);
    dtx_status st = dtx_write_file_atomic(path, text, strlen(text));
    free(text);
    return st ? lib_error(cmd) : EXIT_OK;
}

int json_print(const char *cmd, cJSON *root, int ok) {
    char *text = json_text(root, ok, 0);
    if (!text) return runtime_error(cmd, "out of memory building the JSON");
    fputs(text, stdout);
    free(text);
    return finish_stdout(cmd);
}
