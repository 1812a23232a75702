#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"

#define MAX_TESTS 1024
static struct { const char *name; test_fn fn; } tests[MAX_TESTS];
static int n_tests;
static int cur_failed;
static int cur_skipped;
static char skip_why[256];

void test_register(const char *name, test_fn fn) {
    if (n_tests == MAX_TESTS) { fprintf(stderr, "too many tests\n"); exit(2); }
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

void test_fail_at(const char *file, int line, const char *fmt, ...) {
    cur_failed++;
    if (cur_failed > 10) return; /* keep the log readable */
    fprintf(stderr, "    %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int test_failed_now(void) { return cur_failed; }

void test_skip(const char *fmt, ...) {
    cur_skipped = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(skip_why, sizeof skip_why, fmt, ap);
    va_end(ap);
}

static int cmp(const void *a, const void *b) {
    const char *x = ((const char *const *)a)[0], *y = ((const char *const *)b)[0];
    return strcmp(x, y);
}

/* usage: test_fXX [substring ...]: runs the tests whose name contains one of them */
int main(int argc, char **argv) {
    qsort(tests, (size_t)n_tests, sizeof tests[0], cmp);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < n_tests; i++) {
        int want = argc < 2;
        for (int a = 1; a < argc; a++) want |= strstr(tests[i].name, argv[a]) != NULL;
        if (!want) continue;
        double t0 = dtx_now_s();
        cur_failed = 0, cur_skipped = 0;
        tests[i].fn();
        double ms = (dtx_now_s() - t0) * 1e3;
        if (cur_failed) { failed++; printf("FAIL %s (%d checks failed)\n", tests[i].name, cur_failed); }
        else if (cur_skipped) { skipped++; printf("skip %s: %s\n", tests[i].name, skip_why); }
        else { passed++; printf("ok   %s (%.0f ms)\n", tests[i].name, ms); }
        fflush(stdout);
    }
    if (skipped) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
