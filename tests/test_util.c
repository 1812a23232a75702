#include "test.h"

#include <cjson/cJSON.h>
#include "kernels/kernels.h"
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
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

char *test_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n < 0 ? NULL : malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = '\0';
        if (len) *len = (size_t)n;
    }
    return b;
}

int test_no_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; (e = readdir(d));) found |= strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return !found;
}

int run_cmd(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    if (cap) out[0] = '\0';
    int c;
    while ((c = fgetc(p)) != EOF)
        if (n + 1 < cap) { out[n++] = (char)c; out[n] = '\0'; }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs the difftx binary with args and then the shell redirection redir. */
static int run_bin(const char *args, const char *redir, char *out, size_t cap) {
    const char *bin = getenv("DIFFTX_BIN");
    if (!bin) bin = "build/difftx";
    size_t len = strlen(bin) + strlen(args) + strlen(redir) + 8;
    char *cmd = malloc(len);
    if (!cmd) return -1;
    snprintf(cmd, len, "%s %s %s", bin, args, redir);
    int rc = run_cmd(cmd, out, cap);
    free(cmd);
    return rc;
}

int run_cli(const char *args, char *out, size_t cap) { return run_bin(args, "2>&1", out, cap); }

char cli_out[1 << 17];
char cli_err[1 << 14];

int cli_split(const char *fmt, ...) {
    char args[8192], redir[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *err = test_path("cli.stderr");
    snprintf(redir, sizeof redir, "2>'%s'", err);
    int rc = run_bin(args, redir, cli_out, sizeof cli_out);
    char *e = test_slurp(err, NULL);
    snprintf(cli_err, sizeof cli_err, "%s", e ? e : "");
    free(e);
    return rc;
}

static dtx_isa isa_saved;
dtx_isa test_isa_top(void) {
    dtx_isa prev = dtx_isa_set_cap(DTX_ISA_AVX512_BF16), top = dtx_isa_level();
    dtx_isa_set_cap(prev);
    return top;
}
dtx_isa test_isa_first(void) {
    isa_saved = dtx_isa_set_cap(DTX_ISA_PORTABLE);
    return DTX_ISA_PORTABLE;
}
int test_isa_more(dtx_isa lvl) {
    if (lvl <= test_isa_top()) return 1;
    dtx_isa_set_cap(isa_saved);
    return 0;
}
dtx_isa test_isa_next(dtx_isa lvl) {
    lvl = (dtx_isa)(lvl + 1);
    if (lvl <= DTX_ISA_AVX512_BF16) dtx_isa_set_cap(lvl);
    return lvl;
}

int cli(const char *fmt, ...) {
    char args[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return run_cli(args, cli_out, sizeof cli_out);
}

int cli_has(const char *s) { return strstr(cli_out, s) != NULL; }

int cli_one_line(void) {
    const char *nl = strchr(cli_out, '\n');
    return nl && nl[1] == '\0';
}

int cli_one_line_from(const char *prefix) {
    return strncmp(cli_out, prefix, strlen(prefix)) == 0 && cli_one_line();
}

dtx_config test_config(dtx_arch arch, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
                       int64_t ffn, int64_t max_seq, int tie) {
    dtx_config c = dtx_config_default();
    c.arch = arch, c.dim = dim, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv_heads;
    c.vocab_size = vocab, c.ffn_dim = ffn, c.max_seq_len = max_seq, c.tie_embeddings = tie;
    return c;
}

const char *test_model_file(const char *name, const dtx_config *c, uint64_t seed) {
    const char *path = test_path(name);
    dtx_model *m = NULL;
    if (dtx_model_init(&m, c, seed) != DTX_OK) return NULL;
    dtx_status st = dtx_model_save(m, path, 0);
    dtx_model_free(m);
    return st == DTX_OK ? path : NULL;
}

dtx_tokenizer *test_tokenizer_file(const char *const *texts, int n_texts, int64_t vocab, const char *name,
                                   const char **path) {
    size_t *lens = malloc((size_t)(n_texts > 0 ? n_texts : 1) * sizeof *lens);
    if (!lens) return NULL;
    for (int i = 0; i < n_texts; i++) lens[i] = strlen(texts[i]);
    dtx_tokenizer *t = NULL;
    dtx_status st = dtx_tokenizer_train_texts(&t, texts, lens, n_texts, vocab);
    free(lens);
    if (st != DTX_OK) return NULL;
    *path = test_path(name);
    if (dtx_tokenizer_save(t, *path) != DTX_OK) {
        dtx_tokenizer_free(t);
        return NULL;
    }
    return t;
}

cJSON *read_json(const char *path) {
    char *buf = test_slurp(path, NULL);
    if (!buf) return NULL;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

double json_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

const char *fixture_path(const char *name) {
    char *p = paths[path_i++ % N_PATHS];
    const char *dir = getenv("DTX_FIXTURES");
    snprintf(p, 512, "%s/%s", dir ? dir : "tests/fixtures", name);
    return p;
}

/* Both files exist and hold the same bytes. */
int same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

dtx_real *alloc_r(size_t n) { return calloc(n ? n : 1, sizeof(dtx_real)); }

dtx_real *randn(dtx_rng *r, size_t n, double mean, double sd) {
    dtx_real *x = alloc_r(n);
    for (size_t i = 0; x && i < n; i++) x[i] = (dtx_real)(mean + sd * dtx_rng_normal(r));
    return x;
}

dtx_real *dup_r(const dtx_real *x, size_t n) {
    dtx_real *y = alloc_r(n);
    if (y && n) memcpy(y, x, n * sizeof *y);
    return y;
}

void test_rope_table(dtx_real *cos_t, dtx_real *sin_t, int64_t max_pos, int64_t d, double theta) {
    double *f = malloc(sizeof(double) * (size_t)(d / 2 + 1));
    if (!f) abort();
    dtx_rope_freqs(f, d, theta);
    dtx_rope_table(cos_t, sin_t, max_pos, d, f);
    free(f);
}
