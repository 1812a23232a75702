/* A minimal test framework: TEST(name) registers a function; CHECK records a
 * failure (with file:line) and lets the test go on; REQUIRE ends the test.
 * tests/test_main.c runs every registered test and prints
 * "N passed, N failed". A test fails when any check in it failed. */
#ifndef DTX_TEST_H
#define DTX_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#include "difftx.h"

struct cJSON;

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int test_failed_now(void);
/* Marks the running test skipped (it cannot run on this CPU or machine),
 * with the reason printed beside it; a test that also failed a check counts
 * as failed. */
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TEST(name)                                                              \
    static void name(void);                                                     \
    __attribute__((constructor)) static void register_##name(void) {            \
        test_register(#name, name);                                             \
    }                                                                           \
    static void name(void)

#define CHECK(cond) do { if (!(cond)) test_fail_at(__FILE__, __LINE__, "%s", #cond); } while (0)
#define CHECKF(cond, ...) do { if (!(cond)) test_fail_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define REQUIRE(cond) do { if (!(cond)) { test_fail_at(__FILE__, __LINE__, "%s", #cond); return; } } while (0)
#define REQUIREF(cond, ...) do { if (!(cond)) { test_fail_at(__FILE__, __LINE__, __VA_ARGS__); return; } } while (0)
/* Ends the test as skipped: SKIP("no AVX-512 on this CPU"). */
#define SKIP(...) do { test_skip(__VA_ARGS__); return; } while (0)

/* ---- ISA levels (every kernel test runs once per level the CPU has) ---- */

/* Runs body once for every ISA level from portable to the CPU's, with the
 * kernels capped at that level (dtx_isa_set_cap), as `lvl`; restores the
 * cap afterwards. */
#define FOR_EACH_ISA(lvl) for (dtx_isa lvl = test_isa_first(); test_isa_more(lvl); lvl = test_isa_next(lvl))
dtx_isa test_isa_first(void);
/* The highest level the kernels may use here: the CPU's, under DTX_ISA. */
dtx_isa test_isa_top(void);
int test_isa_more(dtx_isa lvl);
dtx_isa test_isa_next(dtx_isa lvl);
/* Skips the test unless level lvl can run here (the CPU has it and DTX_ISA
 * allows it). */
#define REQUIRE_ISA(lvl)                                                                            \
    do {                                                                                            \
        if (test_isa_top() < (lvl))                                                                 \
            SKIP("needs ISA %s; this CPU has %s%s", dtx_isa_name(lvl), dtx_isa_name(dtx_isa_cpu()),  \
                 dtx_isa_level() < dtx_isa_cpu() ? " (capped by DTX_ISA)" : "");                     \
    } while (0)

/* ---- helpers (tests/test_util.c) ---- */

/* Arrays of dtx_real (float, or double in the finite-difference build),
 * calloc'd (free with free; n = 0 gives one element): zeros, mean + sd·N(0,1)
 * draws from r, a copy. */
dtx_real *alloc_r(size_t n);
dtx_real *randn(dtx_rng *r, size_t n, double mean, double sd);
dtx_real *dup_r(const dtx_real *x, size_t n);
/* max |a-b| / max(max|b|, floor): a tensor-wise relative error. */
double rel_err(const void *a, const void *b, size_t n, int is_double, double floor);
double rel_err_f(const float *a, const float *b, size_t n);
/* ||a - b||₂ / ||b||₂: a normwise relative error. */
double rel_err_norm_f(const float *a, const float *b, size_t n);
/* A fresh temporary directory for this test (removed at exit). */
const char *test_tmpdir(void);
/* path = tmpdir/name; returns a static-per-call malloc'd string (freed at exit). */
const char *test_path(const char *name);
int write_file(const char *path, const void *data, size_t n);
/* The whole file as a malloc'd, NUL-terminated buffer (its length in *len
 * when len is not NULL); NULL when it cannot be read. */
char *test_slurp(const char *path, size_t *len);
/* 1 when no "<name>.tmp.<pid>" (an atomic write's temporary) is left in
 * dir, 0 when one is or dir cannot be read. */
int test_no_temp_files(const char *dir);
/* RoPE tables [max_pos, d/2] of the plain frequencies θ^(−2i/d). */
void test_rope_table(dtx_real *cos_t, dtx_real *sin_t, int64_t max_pos, int64_t d, double theta);
/* Path of a committed fixture under tests/fixtures. */
const char *fixture_path(const char *name);

/* Runs the shell command line cmd (popen); captures what it writes to its
 * stdout into out (NUL-terminated, truncated to cap) and returns the exit
 * status (-1 when it did not exit normally). */
int run_cmd(const char *cmd, char *out, size_t cap);
/* Runs the difftx binary (env DIFFTX_BIN, default build/difftx) with args
 * (a shell-quoted string); captures stderr+stdout into out (truncated to
 * cap) and returns the exit status (-1 when it did not exit normally). */
int run_cli(const char *args, char *out, size_t cap);

/* ---- the CLI tests' helpers (tests/cli): one output buffer, shared ---- */

/* What the last cli() printed, stderr and stdout together (cli_split:
 * stdout only, stderr in cli_err). */
extern char cli_out[1 << 17];
extern char cli_err[1 << 14];
/* Runs difftx with printf-formatted arguments (run_cli); the output lands in
 * cli_out. Returns the exit status. */
int cli(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* As cli(), but stdout goes to cli_out and stderr to cli_err. */
int cli_split(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* s occurs in cli_out. */
int cli_has(const char *s);
/* cli_out is one line: exactly one '\n', at its end (a one-line message). */
int cli_one_line(void);
/* ... and that line starts with prefix ("difftx eval ppl: "). */
int cli_one_line_from(const char *prefix);

/* The default config with these fields set (the variant keys at their defaults). */
dtx_config test_config(dtx_arch arch, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
                       int64_t ffn, int64_t max_seq, int tie);
/* Initialises a model of config c from seed, writes it (fp32) to
 * test_path(name) and frees it. The path, or NULL on failure. */
const char *test_model_file(const char *name, const dtx_config *c, uint64_t seed);
/* Trains a tokenizer of vocab tokens on the n_texts NUL-terminated texts
 * (dtx_tokenizer_train_texts) and saves it to test_path(name), returned in
 * *path. The tokenizer (dtx_tokenizer_free), or NULL on failure. */
dtx_tokenizer *test_tokenizer_file(const char *const *texts, int n_texts, int64_t vocab, const char *name,
                                   const char **path);
/* Files a and b both exist and hold the same bytes. */
int same_bytes(const char *a, const char *b);
/* The JSON file at path, parsed whole (cJSON_Delete), or NULL. */
struct cJSON *read_json(const char *path);
/* o's number member key, NaN when it is missing or not a number. */
double json_num(const struct cJSON *o, const char *key);

#endif
