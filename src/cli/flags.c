/* The difftx command's messages, and its flags through the library's parser. */
#include "cli/flags.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"

static int g_rank, g_ranks = 1, g_hold;
static char g_held[2048];

void cli_set_rank(int rank, int size) { g_rank = rank, g_ranks = size; }

void cli_hold_messages(int hold) {
    g_hold = hold;
    if (hold) g_held[0] = 0;
}

void cli_print_held(void) {
    if (g_held[0]) fputs(g_held, stderr);
    g_held[0] = 0;
}

static void vmessage(const char *cmd, const char *fmt, va_list ap) {
    if (g_hold) { /* the first message only: the cause */
        if (g_held[0]) return;
        int n = g_ranks > 1 ? snprintf(g_held, sizeof g_held, "difftx %s (rank %d of %d): ", cmd, g_rank, g_ranks)
                            : snprintf(g_held, sizeof g_held, "difftx %s: ", cmd);
        if (n > 0 && (size_t)n < sizeof g_held - 2) {
            vsnprintf(g_held + n, sizeof g_held - (size_t)n - 1, fmt, ap);
            strcat(g_held, "\n");
        }
        return;
    }
    if (g_ranks > 1) fprintf(stderr, "difftx %s (rank %d of %d): ", cmd, g_rank, g_ranks);
    else fprintf(stderr, "difftx %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage(cmd, fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

int runtime_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage(cmd, fmt, ap);
    va_end(ap);
    return EXIT_RUNTIME;
}

int lib_error(const char *cmd) {
    const char *msg = dtx_last_error();
    return runtime_error(cmd, "%s", msg && msg[0] ? msg : "unknown library error");
}

int finish_stdout(const char *cmd) {
    if (fflush(stdout) != 0 || ferror(stdout)) return runtime_error(cmd, "error writing to stdout");
    return EXIT_OK;
}

int flags_parse(const char *cmd, const char *head, flag *fl, int n_fl, int argc, char **argv, const char **pos,
                int max_pos, int *n_pos) {
    if (dtx_flags_want_help(argc, argv)) { /* before parsing: the usage shows the defaults */
        char *usage = dtx_flags_usage(head, fl, n_fl);
        fputs(usage ? usage : head, stdout);
        free(usage);
        return FLAGS_HELP;
    }
    int r = dtx_flags_parse(cmd, fl, n_fl, argc, argv, pos, max_pos, n_pos);
    if (r == DTX_FLAGS_ERROR) usage_error(cmd, "%s", dtx_last_error());
    return r;
}

flag *flags_get(flag *fl, int n_fl, const char *name) {
    flag *f = dtx_flags_get(fl, n_fl, name);
    assert(f);
    return f;
}
