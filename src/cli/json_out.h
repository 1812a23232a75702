/* The difftx command's JSON output: documents built with common/json.h,
 * written to a file or stdout with the command's one-line messages. */
#ifndef DTX_CLI_JSON_OUT_H
#define DTX_CLI_JSON_OUT_H

#include "common/json.h"

/* Prints root (indented when pretty) with a final newline to path through
 * dtx_write_file_atomic, and deletes root. Returns EXIT_OK, or an exit code
 * after the one-line message "difftx <cmd>: ...". */
int json_write_report(const char *cmd, const char *path, cJSON *root, int ok, int pretty);
/* The same on stdout, as one line. */
int json_print(const char *cmd, cJSON *root, int ok);

#endif
