/* difftx eval: the paper's measurements on any model file. The
 * measurements live in the library (dtx_eval_run, src/eval/eval_*.c); this
 * command passes the flags on, shows progress on a terminal, prints the
 * report and turns a failure into the one-line message and exit code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"

/* The measurements, one line each (difftx --help lists them too). */
void cli_eval_list(FILE *out, const char *indent) {
    const char *summary;
    for (int i = 0; i < dtx_eval_count(); i++) {
        const char *name = dtx_eval_name(i, &summary);
        fprintf(out, "%s%-10s %s\n", indent, name, summary);
    }
}

static void usage(FILE *out) {
    fputs("usage: difftx eval <measurement> [flags]\n"
          "\n"
          "Measurements of the DIFF Transformer paper (Ye et al., ICLR 2025), on any\n"
          "difftx model file. Each prints a readable table and writes JSON with --json.\n"
          "\n",
          out);
    cli_eval_list(out, "  ");
    fputs("\n'difftx eval <measurement> --help' describes its flags.\n", out);
}

/* Progress as one line rewritten in place, on a terminal only; notes always. */
static void progress(void *user, const char *what, int64_t done, int64_t total) {
    int tty = *(const int *)user;
    if (total == 0) {
        cli_note(what);
        return;
    }
    if (!tty) return;
    fprintf(stderr, "\r%s %lld/%lld", what, (long long)done, (long long)total);
    if (done == total) fputc('\n', stderr);
}

int cmd_eval(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return finish_stdout("eval");
    }
    int known = 0;
    for (int i = 0; i < dtx_eval_count(); i++) known |= strcmp(dtx_eval_name(i, NULL), argv[1]) == 0;
    if (!known) return usage_error("eval", "unknown measurement '%s' (see 'difftx eval --help')", argv[1]);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "eval %s", argv[1]);
    int tty = isatty(STDERR_FILENO);
    char *text = NULL, *json = NULL;
    dtx_status st = dtx_eval_run(argv[1], argc - 2, argv + 2, progress, &tty, &text, &json);
    free(json);
    if (st == DTX_ERR_USAGE) return usage_error(cmd, "%s", dtx_last_error());
    if (st) return lib_error(cmd);
    fputs(text, stdout);
    free(text);
    return finish_stdout(cmd);
}
