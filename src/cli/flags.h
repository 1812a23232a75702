/* A small table-driven flag parser shared by the difftx commands.
 *
 * Each command declares an array of `flag`s; flags_parse walks argv once,
 * checks every value completely (no trailing garbage, no overflow, range)
 * and stores it (dtx_flags_parse). Usage errors print ONE line on stderr,
 *     difftx <cmd>: --flag: expected ..., got 'value'
 * and the command exits with EXIT_USAGE. Runtime failures exit EXIT_RUNTIME. */
#ifndef DTX_CLI_FLAGS_H
#define DTX_CLI_FLAGS_H

#include <stdint.h>

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

#include "difftx.h"

/* The library's flag table (difftx.h "flags"), under the command's names. */
typedef dtx_flag flag;
#define FLAG_BOOL DTX_FLAG_BOOL
#define FLAG_INT DTX_FLAG_INT
#define FLAG_SEED DTX_FLAG_SEED
#define FLAG_REAL DTX_FLAG_REAL
#define FLAG_STR DTX_FLAG_STR
#define FLAG_CHOICE DTX_FLAG_CHOICE
#define FLAG_TEXT DTX_FLAG_TEXT
/* The flags of the tokenizer commands and prepare, declared once. --input
 * repeats, so it is taken out of argv before the table parses the rest
 * (its line in the usage is text). */
#define FLAG_TOKENIZER_FILE(p) \
    FLAG_STR("--tokenizer", p, .metavar = "FILE", .help = "a tokenizer: ours, tiktoken, tokenizer.json, tokenizer.model or an HF folder", .required = 1)
#define FLAG_INPUTS_TEXT FLAG_TEXT("  --input PATH          a text file or a folder; repeat for more [required]\n")

enum { FLAGS_OK = DTX_FLAGS_OK, FLAGS_HELP = DTX_FLAGS_HELP, FLAGS_ERROR = DTX_FLAGS_ERROR };

/* Parses argv[1..argc) (argv[0] is the command name). `--flag value` and
 * `--flag=value` are accepted; `--help`/`-h` prints the usage (head, then
 * the table's flags: dtx_flags_usage) to stdout and returns FLAGS_HELP. Arguments that do not start with '-' go to pos (at
 * most max_pos of them; more is a usage error). Returns FLAGS_ERROR after
 * printing the one-line message. */
int flags_parse(const char *cmd, const char *head, flag *fl, int n_fl, int argc, char **argv,
                const char **pos, int max_pos, int *n_pos);

/* The entry named name (asserts that it exists). */
flag *flags_get(flag *fl, int n_fl, const char *name);

/* One-line messages "difftx <cmd>: ..." on stderr; return the exit code. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int runtime_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* runtime_error with the library's dtx_last_error(). */
int lib_error(const char *cmd);
/* Under mpirun: every message names the rank that prints it. */
void cli_set_rank(int rank, int size);
/* While held, the first message is kept instead of printed (a rank other
 * than 0 during setup: what fails on every rank alike is said once, by
 * rank 0); cli_print_held prints it. */
void cli_hold_messages(int hold);
void cli_print_held(void);
/* Flushes stdout; a failed write (full disk, closed pipe) becomes a runtime error. */
int finish_stdout(const char *cmd);

#endif
