/* Decode speed of two builds of the library, side by side in one process:
 *
 *   build/bench/ab A/libdifftx.so B/libdifftx.so MODEL [--ctx N] [--steps N] [--rounds N] [--streams S]
 *
 * Both builds open MODEL (each its own weights and KV cache); then rounds
 * alternate between them (A then B, B then A, ...), each a prefill of ctx
 * tokens and `steps` timed decode steps (with --streams S > 1, S sequences
 * each with its own cache, every step a batched step of all S,
 * dtx_model_decode_batch, as `difftx serve` steps its requests). Why: these shared machines' memory
 * bandwidth moves by 2x within minutes, so two builds timed in turn minutes
 * apart (or in separate processes) differ by more than most changes do;
 * rounds a fraction of a second apart, paired, see the same machine. Prints
 * each build's median milliseconds a token, B's speed-up over A per pair
 * (median and quartiles) and how many pairs B won. Two copies of one build
 * give 1.00 within a few percent (the noise floor of a run). Each build has
 * its own threads (its spinning team, OpenMP's shared), and a build's idle
 * spinners can hold a core for up to a fraction of a millisecond after its
 * round: rounds of many steps keep that small.
 *
 * Build: make build/bench/ab (a client of the public header through dlopen). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "difftx.h"

enum { MAX_STREAMS = 64 };

typedef struct {
    const char *path;
    void *so;
    dtx_status (*load)(dtx_model **, const char *);
    const char *(*last_error)(void);
    const dtx_config *(*config)(const dtx_model *);
    dtx_status (*kv_init)(dtx_kvcache **, const dtx_model *, int64_t);
    void (*kv_reset)(dtx_kvcache *);
    dtx_status (*prefill)(dtx_model *, dtx_kvcache *, const int32_t *, int64_t, dtx_real *);
    dtx_status (*decode)(dtx_model *, dtx_kvcache *, int32_t, dtx_real *);
    dtx_status (*decode_batch)(dtx_model *, dtx_kvcache *const *, const int32_t *, int64_t, dtx_real *);
    dtx_model *m;
    dtx_kvcache *kv[MAX_STREAMS];
} build;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what, const char *why) {
    fprintf(stderr, "ab: %s: %s\n", what, why);
    return 0;
}

#define SYM(field, name)                                                        \
    do {                                                                        \
        *(void **)&b->field = dlsym(b->so, name);                               \
        if (!b->field) return fail(b->path, "no symbol " name " (not libdifftx?)"); \
    } while (0)

static int open_build(build *b, const char *model, int64_t len, int streams) {
    b->so = dlopen(b->path, RTLD_NOW | RTLD_LOCAL);
    if (!b->so) return fail(b->path, dlerror());
    SYM(load, "dtx_model_load");
    SYM(last_error, "dtx_last_error");
    SYM(config, "dtx_model_config");
    SYM(kv_init, "dtx_kvcache_init");
    SYM(kv_reset, "dtx_kvcache_reset");
    SYM(prefill, "dtx_model_prefill");
    SYM(decode, "dtx_model_decode");
    SYM(decode_batch, "dtx_model_decode_batch");
    if (b->load(&b->m, model) != DTX_OK) return fail(b->path, b->last_error());
    for (int i = 0; i < streams; i++)
        if (b->kv_init(&b->kv[i], b->m, len) != DTX_OK) return fail(b->path, b->last_error());
    return 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long arg_long(const char *flag, const char *v, long lo, long hi) {
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || n < lo || n > hi) {
        fprintf(stderr, "ab: %s wants an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v ? v : "");
        exit(2);
    }
    return n;
}

/* One round of build b: a fresh prefill of ctx tokens into each of the
 * streams' caches, then `steps` timed decode steps (batched over the
 * streams when there are several); milliseconds a step, or -1 on an error
 * (printed). */
static double round_ms(build *b, const int32_t *prompt, int64_t ctx, int steps, int streams, int32_t vocab,
                       dtx_real *logits) {
    for (int i = 0; i < streams; i++) {
        b->kv_reset(b->kv[i]);
        if (b->prefill(b->m, b->kv[i], prompt, ctx, logits) != DTX_OK) return fail(b->path, b->last_error()), -1;
    }
    int32_t tok[MAX_STREAMS];
    double t0 = now_s();
    for (int k = 0; k < steps; k++) {
        for (int i = 0; i < streams; i++) tok[i] = (int32_t)(((int64_t)k * 31 + i * 17 + 7) % vocab);
        dtx_status st = streams == 1 ? b->decode(b->m, b->kv[0], tok[0], logits)
                                     : b->decode_batch(b->m, b->kv, tok, streams, logits);
        if (st != DTX_OK) return fail(b->path, b->last_error()), -1;
    }
    return 1e3 * (now_s() - t0) / steps;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: ab A.so B.so MODEL [--ctx N] [--steps N] [--rounds N] [--streams S]\n");
        return 2;
    }
    long ctx = 8, steps = 100, rounds = 16, streams = 1;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--ctx")) ctx = arg_long("--ctx", i + 1 < argc ? argv[++i] : NULL, 1, 1 << 20);
        else if (!strcmp(argv[i], "--steps")) steps = arg_long("--steps", i + 1 < argc ? argv[++i] : NULL, 1, 1 << 20);
        else if (!strcmp(argv[i], "--rounds")) rounds = arg_long("--rounds", i + 1 < argc ? argv[++i] : NULL, 2, 10000);
        else if (!strcmp(argv[i], "--streams"))
            streams = arg_long("--streams", i + 1 < argc ? argv[++i] : NULL, 1, MAX_STREAMS);
        else {
            fprintf(stderr, "ab: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    build b[2] = {{.path = argv[1]}, {.path = argv[2]}};
    for (int i = 0; i < 2; i++)
        if (!open_build(&b[i], argv[3], ctx + steps, (int)streams)) return 1;
    const int32_t vocab = (int32_t)b[0].config(b[0].m)->vocab_size;
    int32_t *prompt = malloc(sizeof *prompt * (size_t)ctx);
    dtx_real *logits = malloc(sizeof *logits * (size_t)vocab * (size_t)streams);
    double *ms[2] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds)};
    double *speedup = malloc(sizeof(double) * (size_t)rounds);
    if (!prompt || !logits || !ms[0] || !ms[1] || !speedup) return fail("ab", "out of memory"), 1;
    for (long i = 0; i < ctx; i++) prompt[i] = (int32_t)((i * 7919 + 1) % vocab);
    int wins = 0;
    for (long r = -1; r < rounds; r++) /* round -1 warms both up, untimed */
        for (int k = 0; k < 2; k++) {
            const int w = (r & 1) ? 1 - k : k; /* A first in even rounds, B first in odd ones */
            double t = round_ms(&b[w], prompt, ctx, (int)steps, (int)streams, vocab, logits);
            if (t < 0) return 1;
            if (r >= 0) ms[w][r] = t;
        }
    for (long r = 0; r < rounds; r++) speedup[r] = ms[0][r] / ms[1][r], wins += ms[1][r] < ms[0][r];
    for (int i = 0; i < 2; i++) qsort(ms[i], (size_t)rounds, sizeof(double), cmp_double);
    qsort(speedup, (size_t)rounds, sizeof(double), cmp_double);
    printf("%s: ctx %ld, %ld steps a round (%ld stream%s), %ld rounds alternated\n", argv[3], ctx, steps, streams,
           streams > 1 ? "s, batched" : "", rounds);
    printf("A %.3f ms/step (median; best %.3f)  B %.3f ms/step (best %.3f)\n", ms[0][rounds / 2], ms[0][0],
           ms[1][rounds / 2], ms[1][0]);
    printf("B's speed-up over A: median %.3f, quartiles %.3f .. %.3f; B faster in %d of %ld pairs\n",
           speedup[rounds / 2], speedup[rounds / 4], speedup[3 * rounds / 4], wins, rounds);
    return 0;
}
