#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

double rel_err(const void *a, const void *b, size_t n, int is_double, double floor) {
    double maxdiff = 0, maxref = floor;
    for (size_t i = 0; i < n; i++) {
        double x = is_double ? ((const double *)a)[i] : ((const float *)a)[i];
        double y = is_double ? ((const double *)b)[i] : ((const float *)b)[i];
        double d = fabs(x - y);
        if (!(d <= maxdiff)) maxdiff = d; /* NaN propagates as a failure */
        if (fabs(y) > maxref) maxref = fabs(y);
    }
    return maxdiff / maxref;
}

double rel_err_f(const float *a, const float *b, size_t n) { return rel_err(a, b, n, 0, 1e-30); }

double rel_err_norm_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static char tmpdir[256];

static void rm_tmpdir(void) {
    if (!tmpdir[0] || getenv("DTX_KEEP_TMP")) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

const char *test_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/difftx-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) { perror("mkdtemp"); exit(2); }
        atexit(rm_tmpdir);
    }
    return tmpdir;
}

#define N_PATHS 64
static char paths[N_PATHS][512];
static int path_i;

const char *test_path(const char *name) {
    char *p = paths[path_i++ % N_PATHS];
    snprintf(p, 512, "%s/%s", test_tmpdir(), name);
    return p;
}

int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

int run_cli(const char *args, char *out, size_t cap) {
    const char *bin = getenv("DIFFTX_BIN");
    if (!bin) bin = "build/difftx";
    size_t len = strlen(bin) + strlen(args) + 32;
    char *cmd = malloc(len);
    if (!cmd) return -1;
    snprintf(cmd, len, "%s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return -1;
    size_t n = 0;
    if (cap) out[0] = '\0';
    int c;
    while ((c = fgetc(p)) != EOF)
        if (n + 1 < cap) { out[n++] = (char)c; out[n] = '\0'; }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *fixture_path(const char *name) {
    char *p = paths[path_i++ % N_PATHS];
    const char *dir = getenv("DTX_FIXTURES");
    snprintf(p, 512, "%s/%s", dir ? dir : "tests/fixtures", name);
    return p;
}
