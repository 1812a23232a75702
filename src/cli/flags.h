/* A small table-driven flag parser shared by the difftx commands.
 *
 * Each command declares an array of `flag`s; flags_parse walks argv once,
 * checks every value completely (no trailing garbage, no overflow, range)
 * and stores it. Usage errors print ONE line on stderr,
 *     difftx <cmd>: --flag: expected ..., got 'value'
 * and the command exits with EXIT_USAGE. Runtime failures exit EXIT_RUNTIME. */
#ifndef DTX_CLI_FLAGS_H
#define DTX_CLI_FLAGS_H

#include <stdint.h>

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

typedef enum {
    FL_BOOL,   /* no value; stores set_to into *(int *)dst                      */
    FL_I64,    /* int64_t in [imin, imax]                                        */
    FL_U64,    /* uint64_t, any non-negative integer (seeds)                     */
    FL_F64,    /* finite double in [dmin, dmax], dmin exclusive when dmin_open   */
    FL_STR,    /* const char * (non-empty)                                       */
    FL_CHOICE, /* index into the '|'-separated choices, stored as int            */
} fl_kind;

typedef struct {
    const char *name; /* "--steps" */
    fl_kind kind;
    void *dst;
    int64_t imin, imax;
    double dmin, dmax;
    int dmin_open, dmax_open;
    const char *choices;
    int set_to;
    int seen; /* set by flags_parse: the flag was given */
} flag;

#define FLAG_BOOL(n, p, v) {.name = (n), .kind = FL_BOOL, .dst = (p), .set_to = (v)}
#define FLAG_INT(n, p, lo, hi) {.name = (n), .kind = FL_I64, .dst = (p), .imin = (lo), .imax = (hi)}
#define FLAG_SEED(n, p) {.name = (n), .kind = FL_U64, .dst = (p)}
/* open_lo: the lower bound itself is not allowed (e.g. lr > 0). */
#define FLAG_REAL(n, p, lo, open_lo, hi, open_hi) \
    {.name = (n), .kind = FL_F64, .dst = (p), .dmin = (lo), .dmin_open = (open_lo), .dmax = (hi), .dmax_open = (open_hi)}
#define FLAG_STR(n, p) {.name = (n), .kind = FL_STR, .dst = (p)}
#define FLAG_CHOICE(n, p, ch) {.name = (n), .kind = FL_CHOICE, .dst = (p), .choices = (ch)}

enum { FLAGS_OK = 0, FLAGS_HELP = 1, FLAGS_ERROR = 2 };

/* Parses argv[1..argc) (argv[0] is the command name). `--flag value` and
 * `--flag=value` are accepted; `--help`/`-h` prints usage to stdout and
 * returns FLAGS_HELP. Arguments that do not start with '-' go to pos (at
 * most max_pos of them; more is a usage error). Returns FLAGS_ERROR after
 * printing the one-line message. */
int flags_parse(const char *cmd, const char *usage, flag *fl, int n_fl, int argc, char **argv,
                const char **pos, int max_pos, int *n_pos);

/* The entry named name (asserts that it exists). */
flag *flags_get(flag *fl, int n_fl, const char *name);

/* Strict number parsing: the whole string, no leading space, no overflow.
 * Return 0 on success. */
int parse_i64(const char *s, int64_t *out);
/* A comma-separated list of distinct integers in [lo, hi], at most cap of
 * them, into out: the count, or -1 after the one-line usage error that names
 * name ("difftx <cmd>: --name: ...": not integers in range, too many, or a
 * value repeated). */
int flags_int_list(const char *cmd, const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out, int cap);
int parse_f64(const char *s, double *out);

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
