/* Building and writing the --json reports of the difftx eval commands with
 * cJSON. The builders remember a failed allocation in *ok, so a report is
 * assembled without a check per call and written (or refused) once. */
#ifndef DTX_CLI_JSON_OUT_H
#define DTX_CLI_JSON_OUT_H

#include <cjson/cJSON.h>

void jnum(cJSON *o, const char *key, double v, int *ok);
void jstr(cJSON *o, const char *key, const char *v, int *ok);
/* Adds child to an object under key, or to an array when key is NULL; the
 * child, or NULL (child freed, *ok = 0) when that fails. */
cJSON *jadd(cJSON *parent, const char *key, cJSON *child, int *ok);
/* Prints root (indented when pretty) with a final newline to path through
 * dtx_write_file_atomic, and deletes root. Returns EXIT_OK, or an exit code
 * after the one-line message "difftx <cmd>: ...". */
int json_write_report(const char *cmd, const char *path, cJSON *root, int ok, int pretty);

#endif
