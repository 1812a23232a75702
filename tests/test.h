/* A minimal test framework: TEST(name) registers a function; CHECK records a
 * failure (with file:line) and lets the test go on; REQUIRE ends the test.
 * tests/test_main.c runs every registered test and prints
 * "N passed, N failed". A test fails when any check in it failed. */
#ifndef DTX_TEST_H
#define DTX_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int test_failed_now(void);

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

/* ---- helpers (tests/test_util.c) ---- */

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
/* Runs the difftx binary (env DIFFTX_BIN, default build/difftx) with args
 * (a shell-quoted string); captures stderr+stdout into out (truncated to
 * cap) and returns the exit status (-1 when it did not exit normally). */
int run_cli(const char *args, char *out, size_t cap);
/* Path of a committed fixture under tests/fixtures. */
const char *fixture_path(const char *name);

#endif
