/* bench/bench.c: `make bench` (README "Performance").
 *
 * One run, one thread count (OMP_NUM_THREADS, default: all cores):
 *   1. this machine's fp32 and bf16 FMA peak (AVX-512, every thread), and
 *      the linear layer's products by oneDNN and by the tile GEMM (gemm);
 *   2. training step (forward + backward + AdamW) and forward pass of DIFF and
 *      the parameter-matched Transformer, fp32 and bf16, on configs S and L;
 *      tokens/s, model-FLOPs utilisation, peak RSS, DIFF/baseline ratio;
 *   3. the same models in PyTorch (tools/bench_torch.py), side by side;
 *   4. attention memory at T = 1K, 4K, 16K (config S, one layer, batch 1),
 *      fused flash kernel vs the plain one: computed and measured;
 *   5. one training step at T = 16384 (config S, DIFF, batch 1): RSS and time;
 *   6. decoding (KV cache, batch 1): tokens/s against the memory-bandwidth
 *      bound (the bandwidth measured in the same run);
 *   7. the peak again (was the machine disturbed?);
 *   8. serving: difftx serve's batcher at 1-16 concurrent requests, batched
 *      against one at a time (bench/serve_bench.c).
 * Every measured configuration runs in a child process of its own (this
 * program re-executed with --serve, or python3 tools/bench_torch.py --serve),
 * so each peak RSS is that configuration's alone. The DIFF and the baseline
 * children are driven in lockstep, A B A B, one step per command; both stay
 * alive between steps unless the machine's memory cannot hold both.
 *
 * Usage (make bench builds it as build/bench/bench and runs it from the
 * repository root):
 *   bench [--quick | --tiny] [--out FILE] [--steps N] [--no-torch | --torch-full]
 *         [--torch-attn ref|fused] [--openblas DIR] [--python PATH]
 *         [--sections peak,gemm,train,torch,v2,attn,long,decode,serve] [--configs S,L]
 *     --quick   config S at batch 2, 2 timed steps, no T = 16K runs (make bench QUICK=1)
 *     --tiny    a seconds-long smoke test of the harness (meaningless numbers)
 *   bench --one S|L|S16K diff|transformer|diff2 fp32|bf16 [STEPS]
 *     one configuration in this process (for profiling by hand)
 * Internal: --serve ..., --attn-child ....                                   */
#include <errno.h>
#include <inttypes.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "difftx.h"
#include "common/common.h"
#include "kernels/kernels.h"
#include "model/model.h"

extern char **environ;

void serve_bench_run(int quick, void (*out)(const char *fmt, ...)); /* bench/serve_bench.c */

#define MAXSTEPS 16
static const char *self_exe = "/proc/self/exe";

/* A "VmHWM:" style field of /proc/self/status, in KiB (-1 if absent). */
static long proc_status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            v = strtol(line + n, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static long meminfo_kib(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            v = strtol(line + n, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static void loadavg(char *buf, size_t n) {
    double l[3] = {NAN, NAN, NAN};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3) l[0] = NAN;
        fclose(f);
    }
    snprintf(buf, n, "%.2f, %.2f, %.2f", l[0], l[1], l[2]);
}

/* Busy CPU time of the whole machine (/proc/stat: all but idle and iowait,
 * steal included), in clock ticks. */
static unsigned long long machine_busy_ticks(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    unsigned long long v[10] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 8) return 0;
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* user nice system irq softirq steal */
}

/* utime + stime of a process (all its threads), in clock ticks. */
static unsigned long long pid_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    unsigned long long ut = 0, st = 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return 0;
    return ut + st;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    if (n <= 0) return NAN;
    double t[MAXSTEPS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* ===================================================================== peak */

/* The FMA peak of the ISA level in use (dtx_isa_level): independent chains
 * of the widest FMA the CPU has, each function compiled for its own ISA
 * with target attributes and called only at its level, so no instruction
 * the CPU lacks can run (no SIGILL on any x86-64 CPU). */
#define REP24(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
                 X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* 24 chains of vfmadd231ps on zmm: 16 lanes × 2 flops each. */
__attribute__((noinline, target("avx512f"))) static float fma_loop_zmm(long iters, float seed) {
    __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
#define DECL(i) __m512 c##i = _mm512_set1_ps(seed + (float)(i));
    REP24(DECL)
#undef DECL
    for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_fmadd_ps(c##i, a, b);
        REP24(STEP)
#undef STEP
        __asm__ volatile("" ::: "memory");
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
    REP24(SUM)
#undef SUM
    return _mm512_reduce_add_ps(s);
}

/* 12 chains of vfmadd231ps on ymm (16 registers; 12 chains cover two FMA
 * pipes of latency 4–5): 8 lanes × 2 flops each. */
__attribute__((noinline, target("avx2,fma"))) static float fma_loop_ymm(long iters, float seed) {
    __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
#define DECL(i) __m256 c##i = _mm256_set1_ps(seed + (float)(i));
    REP12(DECL)
#undef DECL
    for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm256_fmadd_ps(c##i, a, b);
        REP12(STEP)
#undef STEP
        __asm__ volatile("" ::: "memory");
    }
    __m256 s = _mm256_setzero_ps();
#define SUM(i) s = _mm256_add_ps(s, c##i);
    REP12(SUM)
#undef SUM
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

/* Portable (SSE2, every x86-64): 12 chains of mulps + addps on xmm, 4 lanes
 * × 2 flops per pair. */
__attribute__((noinline)) static float fma_loop_xmm(long iters, float seed) {
    __m128 a = _mm_set1_ps(0.9999999f), b = _mm_set1_ps(1e-7f);
#define DECL(i) __m128 c##i = _mm_set1_ps(seed + (float)(i));
    REP12(DECL)
#undef DECL
    for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm_add_ps(_mm_mul_ps(c##i, a), b);
        REP12(STEP)
#undef STEP
        __asm__ volatile("" ::: "memory");
    }
    __m128 s = _mm_setzero_ps();
#define SUM(i) s = _mm_add_ps(s, c##i);
    REP12(SUM)
#undef SUM
    float t[4];
    _mm_storeu_ps(t, s);
    return t[0] + t[1] + t[2] + t[3];
}

/* 24 chains of vdpbf16ps: each of the 16 fp32 lanes adds two bf16
 * products, i.e. 32 multiply-adds = 64 flops per instruction. */
__attribute__((noinline, target("avx512f,avx512bf16"))) static float bf16_loop(long iters, float seed) {
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(seed * 1e-3f));
#define DECL(i) __m512 c##i = _mm512_set1_ps((float)(i));
    REP24(DECL)
#undef DECL
    for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_dpbf16_ps(c##i, a, b);
        REP24(STEP)
#undef STEP
        __asm__ volatile("" ::: "memory");
    }
    __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
    REP24(SUM)
#undef SUM
    return _mm512_reduce_add_ps(s);
}

/* The peak loop of a precision at the ISA level in use: its flops per
 * iteration and what it runs (for the report); NULL when the level has no
 * such instruction (bf16 without AVX-512 BF16). */
typedef float (*peak_fn)(long, float);
static peak_fn peak_loop(int bf16, double *flops_per_iter, const char **what) {
    dtx_isa lvl = dtx_isa_level();
    if (bf16) {
        if (lvl < DTX_ISA_AVX512_BF16) return NULL;
        *flops_per_iter = 24 * 64.0, *what = "vdpbf16ps zmm: 64 flops";
        return bf16_loop;
    }
    if (lvl >= DTX_ISA_AVX512) {
        *flops_per_iter = 24 * 32.0, *what = "vfmadd231ps zmm: 32 flops";
        return fma_loop_zmm;
    }
    if (lvl >= DTX_ISA_AVX2) {
        *flops_per_iter = 12 * 16.0, *what = "vfmadd231ps ymm: 16 flops";
        return fma_loop_ymm;
    }
    *flops_per_iter = 12 * 8.0, *what = "mulps + addps xmm: 8 flops";
    return fma_loop_xmm;
}

static volatile float peak_sink;

typedef struct {
    double all;  /* every thread together                                  */
    double one;  /* one thread alone, times the thread count               */
    double peak; /* the higher: another tenant on one core lowers `all`    */
} peak_t;

static double measure_peak_nt(int bf16, int trials, int nt);

static peak_t measure_peak(int bf16) {
    int nt = omp_get_max_threads();
    peak_t p;
    p.all = measure_peak_nt(bf16, 20, nt);
    p.one = nt * measure_peak_nt(bf16, 10, 1);
    p.peak = p.all > p.one ? p.all : p.one;
    return p;
}

/* GFLOP/s of nt threads together: best of `trials` runs of ~0.1 s each
 * (many short runs: on a shared machine one of them usually finds it quiet). */
static double measure_peak_nt(int bf16, int trials, int nt) {
    double flops_per_iter;
    const char *what;
    peak_fn fn = peak_loop(bf16, &flops_per_iter, &what);
    if (!fn) return NAN;
    long iters = 1L << 16;
    double best = 0;
    for (int trial = -1; trial < trials;) {
        float sink = 0;
        double t0 = dtx_now_s();
#pragma omp parallel num_threads(nt) reduction(+ : sink)
        sink += fn(iters, (float)omp_get_thread_num());
        double dt = dtx_now_s() - t0;
        peak_sink = sink;
        if (dt < 0.08) { /* calibrating */
            iters *= 2;
            continue;
        }
        double g = flops_per_iter * (double)iters * nt / dt / 1e9;
        if (trial >= 0 && g > best) best = g;
        trial++;
    }
    return best;
}

/* ================================================================= configs */

typedef struct {
    const char *name;
    int64_t dim, layers, heads, ffn, vocab, T, B; /* heads: DIFF heads (baseline 2×) */
    int tie;                                      /* output projection = the embedding table */
} bcfg;

static const bcfg CFG_S = {"S", 512, 8, 4, 1408, 8192, 1024, 8, 0};
static const bcfg CFG_L = {"L", 768, 12, 6, 2048, 8192, 2048, 4, 0};
static const bcfg CFG_S16K = {"S16K", 512, 8, 4, 1408, 8192, 16384, 1, 0};
/* decoding only: llama2.c's stories110M shape (tied embeddings, 109.5M
 * parameters; the baseline's 12 heads of 64 are its layout), beside runq */
static const bcfg CFG_110M = {"110M", 768, 12, 6, 2048, 32000, 1024, 1, 1};

static int find_cfg(const char *name, bcfg *out) {
    if (!strcmp(name, "S")) *out = CFG_S;
    else if (!strcmp(name, "L")) *out = CFG_L;
    else if (!strcmp(name, "S16K")) *out = CFG_S16K;
    else return -1;
    return 0;
}

/* The config of arch (a dtx_arch: 0 DIFF, 1 its matched Transformer, 2 DIFF
 * V2 with the Transformer's heads, spec §8, so that the Transformer is V2's
 * matched baseline too). */
static dtx_config make_config(const bcfg *b, int arch) {
    dtx_config c = dtx_config_default();
    c.arch = DTX_ARCH_DIFF;
    c.dim = b->dim;
    c.n_layers = b->layers;
    c.n_heads = b->heads;
    c.n_kv_heads = b->heads; /* MHA */
    c.vocab_size = b->vocab;
    c.ffn_dim = b->ffn;
    c.max_seq_len = b->T;
    c.tie_embeddings = b->tie; /* S, L: untied, LLaMA style (the FLOPs are the same either way) */
    if (arch == DTX_ARCH_DIFF2) c.arch = DTX_ARCH_DIFF2, c.n_heads = c.n_kv_heads = 2 * b->heads;
    return arch == DTX_ARCH_TRANSFORMER ? dtx_config_baseline(&c) : c;
}

/* Model FLOPs per token (README "Performance"):
 *   forward = 2 · (every matmul weight: q, k, v, o, w1, w2, w3 of each layer
 *             and the output projection; not the embedding lookup)
 *           + per layer, causal attention with T/2 keys on average:
 *             QKᵀ 2·(T/2)·(NQ·d) = T·dim for both archs;
 *             PV  T·dim for the Transformer, 2·T·dim for DIFF (A1·V and A2·V
 *             at the value width 2d: its true, doubled cost, spec §5.1);
 *             DIFF V2: 2h query heads of d, so QKᵀ and PV 2·T·dim each, and
 *             its weights include q_proj's 2·dim rows and lambda_proj;
 *   training = 3 × forward. */
static double model_flops_fwd(const dtx_config *c, int64_t T) {
    double D = (double)c->dim, F = (double)c->ffn_dim, V = (double)c->vocab_size;
    double kv = D * (double)c->n_kv_heads / (double)c->n_heads, QD = (double)dtx_config_q_dim(c);
    double lam = dtx_config_has_lambda_proj(c) ? (double)c->n_heads * D : 0;
    double per_layer_w = QD * D + D * D + 2 * D * kv + 3 * D * F + lam;
    double w = per_layer_w * (double)c->n_layers + D * V;
    double per_td = c->arch == DTX_ARCH_DIFF ? 3.0 : c->arch == DTX_ARCH_DIFF2 ? 4.0 : 2.0;
    double attn = (double)c->n_layers * (double)T * D * per_td;
    return 2 * w + attn;
}

/* ================================================================ children */

typedef struct {
    pid_t pid;
    FILE *in, *out;
    int alive;
    long maxrss_kib;  /* from wait4 once it has exited */
    char why[160];    /* failure reason */
} child;

/* environ with `unset` removed and `set` ("K=V") entries added/overriding. */
static char **make_env(const char *const *unset, const char *const *set) {
    size_t n = 0;
    while (environ[n]) n++;
    size_t ns = 0;
    while (set && set[ns]) ns++;
    char **e = calloc(n + ns + 1, sizeof *e);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        const char *eq = strchr(environ[i], '=');
        size_t klen = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        for (size_t j = 0; unset && unset[j]; j++)
            if (strlen(unset[j]) == klen && !strncmp(unset[j], environ[i], klen)) drop = 1;
        for (size_t j = 0; j < ns; j++)
            if (!strncmp(set[j], environ[i], klen) && set[j][klen] == '=') drop = 1;
        if (!drop) e[k++] = environ[i];
    }
    for (size_t j = 0; j < ns; j++) e[k++] = (char *)set[j];
    e[k] = NULL;
    return e;
}

static int child_spawn(child *c, const char *path, char *const argv[], char *const envp[]) {
    memset(c, 0, sizeof *c);
    int to[2], from[2];
    if (pipe(to) || pipe(from)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]);
        close(to[1]);
        close(from[0]);
        close(from[1]);
        execve(path, argv, envp);
        fprintf(stderr, "bench: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    c->pid = pid;
    c->in = fdopen(to[1], "w");
    c->out = fdopen(from[0], "r");
    c->alive = 1;
    return 0;
}

static void child_reap(child *c) {
    if (c->pid <= 0) return;
    if (c->in) fclose(c->in);
    c->in = NULL;
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (wait4(c->pid, &status, 0, &ru) == c->pid) {
        c->maxrss_kib = ru.ru_maxrss;
        if (c->alive && WIFSIGNALED(status))
            snprintf(c->why, sizeof c->why, "killed by signal %d%s", WTERMSIG(status),
                     WTERMSIG(status) == SIGKILL ? " (out of memory?)" : "");
        else if (c->alive && WIFEXITED(status) && WEXITSTATUS(status) && !c->why[0])
            snprintf(c->why, sizeof c->why, "exit status %d", WEXITSTATUS(status));
    }
    if (c->out) fclose(c->out);
    c->out = NULL;
    c->pid = 0;
}

/* Reads the child's next protocol line ("ready ...", "ok ...", "err ...");
 * other lines are passed through to stderr. Returns 0 and the line, or -1. */
static int child_line(child *c, char *buf, size_t n) {
    if (!c->alive) return -1;
    while (fgets(buf, (int)n, c->out)) {
        if (!strncmp(buf, "ready", 5) || !strncmp(buf, "ok", 2)) return 0;
        if (!strncmp(buf, "err ", 4)) {
            buf[strcspn(buf, "\n")] = 0;
            snprintf(c->why, sizeof c->why, "%s", buf + 4);
            c->alive = 0;
            child_reap(c);
            return -1;
        }
        fputs(buf, stderr);
    }
    child_reap(c); /* EOF: it died; child_reap records how */
    c->alive = 0;
    if (!c->why[0]) snprintf(c->why, sizeof c->why, "exited early");
    return -1;
}

/* Sends one command ("train" or "fwd") and reads "ok SECONDS HWM_KIB". */
static int child_cmd(child *c, const char *cmd, double *secs, long *hwm) {
    if (!c->alive) return -1;
    fprintf(c->in, "%s\n", cmd);
    fflush(c->in);
    char buf[512];
    if (child_line(c, buf, sizeof buf)) return -1;
    double s = NAN;
    long h = -1;
    if (sscanf(buf, "ok %lf %ld", &s, &h) < 1) return -1;
    if (secs) *secs = s;
    if (hwm) *hwm = h;
    return 0;
}

static void child_quit(child *c) {
    if (c->alive && c->in) {
        fprintf(c->in, "quit\n");
        fflush(c->in);
    }
    c->alive = 0;
    child_reap(c);
}

/* ============================================================ run results */

typedef struct {
    int ok;
    char why[160];
    double warm;                 /* warm-up training step, s */
    double train[MAXSTEPS];
    int ntrain;
    double fwd[MAXSTEPS];
    int nfwd;
    long hwm_kib;                /* RSS high-water mark of the child */
    double other_cpu_s, timed_s; /* CPU time of everything else during the timed steps, their wall time */
    int64_t batch, micro_batch;  /* sequences per step (PyTorch may differ) */
    int64_t T;
} run_result;

static void rr_fail(run_result *r, const child *c) {
    r->ok = 0;
    snprintf(r->why, sizeof r->why, "%s", c->why[0] ? c->why : "failed");
}

typedef struct {
    const char *path;
    char *argv[40];
    char **envp;
} spawn_spec;

static int start(child *c, const spawn_spec *s, run_result *r, int64_t B, int64_t T) {
    memset(r, 0, sizeof *r);
    r->batch = B;
    r->micro_batch = B;
    r->T = T;
    if (child_spawn(c, s->path, s->argv, s->envp)) {
        snprintf(r->why, sizeof r->why, "cannot start %s", s->path);
        return -1;
    }
    char buf[512];
    if (child_line(c, buf, sizeof buf)) {
        rr_fail(r, c);
        return -1;
    }
    long mb = 0;
    if (sscanf(buf, "ready %ld", &mb) == 1 && mb > 0) r->micro_batch = mb;
    r->ok = 1;
    return 0;
}

static void step(child *c, run_result *r, const char *cmd, const char *label, int i, int n) {
    if (!r->ok) return;
    double s;
    long h;
    unsigned long long b0 = machine_busy_ticks(), p0 = pid_ticks(c->pid);
    double t0 = dtx_now_s();
    int rc = child_cmd(c, cmd, &s, &h);
    double t1 = dtx_now_s();
    unsigned long long b1 = machine_busy_ticks(), p1 = pid_ticks(c->pid);
    if (!rc && i > 0 && b0 && b1 >= b0 && p1 >= p0) {
        double other = ((double)(b1 - b0) - (double)(p1 - p0)) / (double)sysconf(_SC_CLK_TCK);
        r->other_cpu_s += other > 0 ? other : 0;
        r->timed_s += t1 - t0;
    }
    if (rc) {
        rr_fail(r, c);
        fprintf(stderr, "  %-32s %s %d: FAILED (%s)\n", label, cmd, i, r->why);
        return;
    }
    if (h > r->hwm_kib) r->hwm_kib = h;
    if (!strcmp(cmd, "train")) {
        if (i == 0) r->warm = s;
        else if (r->ntrain < MAXSTEPS) r->train[r->ntrain++] = s;
    } else if (r->nfwd < MAXSTEPS) {
        r->fwd[r->nfwd++] = s;
    }
    if (i == 0 && !strcmp(cmd, "train")) fprintf(stderr, "  %-32s train warm-up  %8.2f s\n", label, s);
    else fprintf(stderr, "  %-32s %-5s %d/%d      %8.2f s\n", label, cmd, i, n, s);
}

static void finish(child *c, run_result *r) {
    int was_ok = r->ok;
    child_quit(c);
    if (c->maxrss_kib > r->hwm_kib) r->hwm_kib = c->maxrss_kib;
    if (was_ok && c->why[0]) {
        r->ok = 0;
        snprintf(r->why, sizeof r->why, "%s", c->why);
    }
}

/* Whether another timed training step fits: fewer than nsteps so far, and
 * the steps so far plus one more of their mean stay within budget_s. A
 * failed run needs no more. */
static int wants_more(const run_result *r, int nsteps, double budget_s) {
    if (!r->ok || r->ntrain >= nsteps) return 0;
    if (r->ntrain == 0) return 1;
    double sum = 0;
    for (int i = 0; i < r->ntrain; i++) sum += r->train[i];
    return sum * (1.0 + 1.0 / r->ntrain) <= budget_s;
}

/* One child alone: warm-up, timed training steps, as many forward passes. */
static void run_one(const spawn_spec *sp, const char *label, int64_t B, int64_t T, int nsteps, double budget_s,
                    run_result *r) {
    child c;
    start(&c, sp, r, B, T);
    step(&c, r, "train", label, 0, nsteps);
    while (wants_more(r, nsteps, budget_s)) step(&c, r, "train", label, r->ntrain + 1, nsteps);
    for (int i = 1, n = r->ntrain; i <= n; i++) step(&c, r, "fwd", label, i, n);
    finish(&c, r);
}

/* Runs A and B (the DIFF and the baseline child) in lockstep: warm-up A,
 * warm-up B, then train A, train B, ... (while another round fits the budget
 * of timed training per child, at most nsteps) and as many fwd A, fwd B.
 * If the machine cannot hold both (MemAvailable after A's warm-up < 1.2 × A's
 * peak RSS + 512 MiB), A runs to the end before B starts. */
static void run_pair(const spawn_spec *sa, const spawn_spec *sb, const char *la, const char *lb, int64_t B,
                     int64_t T, int nsteps, double budget_s, run_result *ra, run_result *rb, int *sequential) {
    child ca, cb;
    memset(&cb, 0, sizeof cb);
    *sequential = 0;
    start(&ca, sa, ra, B, T);
    step(&ca, ra, "train", la, 0, nsteps);
    long avail = meminfo_kib("MemAvailable:");
    if (ra->ok && avail > 0 && avail < (long)(1.2 * (double)ra->hwm_kib) + 512 * 1024) {
        *sequential = 1;
        while (wants_more(ra, nsteps, budget_s)) step(&ca, ra, "train", la, ra->ntrain + 1, nsteps);
        for (int i = 1, n = ra->ntrain; i <= n; i++) step(&ca, ra, "fwd", la, i, n);
        finish(&ca, ra);
        run_one(sb, lb, B, T, nsteps, budget_s, rb);
        return;
    }
    start(&cb, sb, rb, B, T);
    step(&cb, rb, "train", lb, 0, nsteps);
    int n = 0;
    while ((ra->ok || rb->ok) && (!ra->ok || wants_more(ra, nsteps, budget_s)) &&
           (!rb->ok || wants_more(rb, nsteps, budget_s))) {
        n++;
        step(&ca, ra, "train", la, n, nsteps);
        step(&cb, rb, "train", lb, n, nsteps);
    }
    for (int i = 1; i <= n; i++) {
        step(&ca, ra, "fwd", la, i, n);
        step(&cb, rb, "fwd", lb, i, n);
    }
    finish(&ca, ra);
    finish(&cb, rb);
}

/* ============================================================ child: serve */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    dtx_model *m;
    dtx_optimizer *opt;
    int32_t *tok, *tgt;
    int64_t B, T;
} bmodel;

/* ARCH[] index of an arch name, or -1. */
static int arch_index(const char *name) {
    return !strcmp(name, "diff") ? 0 : !strcmp(name, "transformer") ? 1 : !strcmp(name, "diff2") ? 2 : -1;
}

static int bmodel_init(bmodel *bm, const bcfg *b, int arch, int bf16, char *err, size_t nerr) {
    memset(bm, 0, sizeof *bm);
    dtx_config c = make_config(b, arch);
    dtx_status st;
    if ((st = dtx_model_init(&bm->m, &c, 1234)) ||
        (st = dtx_model_set_precision(bm->m, bf16 ? DTX_PREC_BF16 : DTX_PREC_FP32))) {
        snprintf(err, nerr, "%s", dtx_last_error());
        return -1;
    }
    dtx_optim_config o = dtx_optim_default();
    o.lr = 1e-4;
    o.min_lr = 1e-5;
    o.total_steps = 1000000;
    if ((st = dtx_optimizer_init(&bm->opt, bm->m, &o))) {
        snprintf(err, nerr, "%s", dtx_last_error());
        return -1;
    }
    bm->B = b->B;
    bm->T = b->T;
    size_t n = (size_t)(b->B * b->T);
    bm->tok = malloc(n * sizeof(int32_t));
    bm->tgt = malloc(n * sizeof(int32_t));
    if (!bm->tok || !bm->tgt) {
        snprintf(err, nerr, "out of memory for tokens");
        return -1;
    }
    for (size_t i = 0; i < n; i++) bm->tok[i] = (int32_t)(rng_next() % (uint64_t)b->vocab);
    for (size_t i = 0; i + 1 < n; i++) bm->tgt[i] = bm->tok[i + 1];
    bm->tgt[n - 1] = (int32_t)(rng_next() % (uint64_t)b->vocab);
    return 0;
}

static int bmodel_train(bmodel *bm, double *loss, char *err, size_t nerr) {
    double gn, lr;
    dtx_model_zero_grad(bm->m);
    if (dtx_model_forward(bm->m, bm->tok, bm->tgt, bm->B, bm->T, NULL, loss) ||
        dtx_model_backward(bm->m, 1.0) || dtx_optimizer_step(bm->opt, &gn, &lr)) {
        snprintf(err, nerr, "%s", dtx_last_error());
        return -1;
    }
    return 0;
}

static int bmodel_fwd(bmodel *bm, char *err, size_t nerr) {
    if (dtx_model_forward(bm->m, bm->tok, NULL, bm->B, bm->T, NULL, NULL)) {
        snprintf(err, nerr, "%s", dtx_last_error());
        return -1;
    }
    return 0;
}

/* --serve DIM LAYERS HEADS FFN VOCAB T B ARCH PREC: one model; commands on
 * stdin ("train", "fwd", "quit"), one answer line each on stdout. */
static int serve_main(int argc, char **argv) {
    if (argc != 11) {
        printf("err --serve needs 9 arguments\n");
        return 2;
    }
    bcfg b = {"custom", atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), atoll(argv[5]),
              atoll(argv[6]), atoll(argv[7]), atoll(argv[8]), 0};
    int arch = arch_index(argv[9]), bf16 = !strcmp(argv[10], "bf16");
    char err[300];
    bmodel bm;
    if (arch < 0) {
        printf("err unknown arch %s\n", argv[9]);
        return 2;
    }
    if (bmodel_init(&bm, &b, arch, bf16, err, sizeof err)) {
        printf("err %s\n", err);
        return 1;
    }
    printf("ready %lld %zu\n", (long long)b.B, dtx_model_num_params(bm.m));
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        double t0 = dtx_now_s(), loss = NAN;
        int rc;
        if (!strncmp(line, "train", 5)) rc = bmodel_train(&bm, &loss, err, sizeof err);
        else if (!strncmp(line, "fwd", 3)) rc = bmodel_fwd(&bm, err, sizeof err);
        else break;
        double dt = dtx_now_s() - t0;
        if (rc) {
            printf("err %s\n", err);
            return 1;
        }
        if (!strncmp(line, "train", 5) && !isfinite(loss)) {
            printf("err loss is %g\n", loss);
            return 1;
        }
        printf("ok %.6f %ld %.6f\n", dt, proc_status_kib("VmHWM:"), loss);
        fflush(stdout);
    }
    return 0;
}

/* --one CFG ARCH PREC [STEPS]: in this process, for profiling by hand.
 * BENCH_TILES=1 or 0 forces the tile GEMM on or off (dtx_matmul_set_tiles),
 * for A/B runs of the engines inside a whole step. */
static int one_main(int argc, char **argv) {
    const char *tiles = getenv("BENCH_TILES");
    if (tiles && *tiles) dtx_matmul_set_tiles(atoi(tiles));
    bcfg b;
    if (argc < 5 || find_cfg(argv[2], &b) || arch_index(argv[3]) < 0) {
        fprintf(stderr, "usage: bench --one S|L|S16K diff|transformer|diff2 fp32|bf16 [STEPS]\n");
        return 2;
    }
    int arch = arch_index(argv[3]), bf16 = !strcmp(argv[4], "bf16");
    int n = argc > 5 ? atoi(argv[5]) : 3;
    char err[300];
    bmodel bm;
    if (bmodel_init(&bm, &b, arch, bf16, err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    dtx_config c = make_config(&b, arch);
    double fl = model_flops_fwd(&c, b.T) * (double)(b.B * b.T);
    for (int i = 0; i <= n; i++) {
        double t0 = dtx_now_s(), loss;
        if (bmodel_train(&bm, &loss, err, sizeof err)) {
            fprintf(stderr, "bench: %s\n", err);
            return 1;
        }
        double dt = dtx_now_s() - t0;
        printf("train %d: %.3f s  %.0f tok/s  %.1f GFLOP/s  loss %.4f\n", i, dt, (double)(b.B * b.T) / dt,
               3 * fl / dt / 1e9, loss);
        fflush(stdout);
    }
    for (int i = 0; i < n; i++) {
        double t0 = dtx_now_s();
        if (bmodel_fwd(&bm, err, sizeof err)) {
            fprintf(stderr, "bench: %s\n", err);
            return 1;
        }
        double dt = dtx_now_s() - t0;
        printf("fwd   %d: %.3f s  %.0f tok/s  %.1f GFLOP/s\n", i, dt, (double)(b.B * b.T) / dt, fl / dt / 1e9);
        fflush(stdout);
    }
    printf("VmHWM %.2f GiB\n", (double)proc_status_kib("VmHWM:") / (1 << 20));
    return 0;
}

/* ======================================================= attention memory */

/* Config S's attention for one layer, batch 1. */
static dtx_attn_dims attn_dims_S(int64_t T, int diff, dtx_attn_impl impl) {
    dtx_attn_dims a = {.run.impl = impl, .geom.B = 1, .geom.T = T, .geom.n_heads = diff ? CFG_S.heads : 2 * CFG_S.heads,
                       .geom.n_kv_heads = diff ? CFG_S.heads : 2 * CFG_S.heads,
                       .geom.head_dim = CFG_S.dim / (2 * CFG_S.heads), .arch.diff = diff, .arch.subln = diff, .arch.lambda = 0.5,
                       .arch.lambda_init = 0.2, .arch.eps = 1e-5};
    return a;
}

/* Bytes the forward keeps for the backward. */
static double attn_saved_bytes(const dtx_attn_dims *a) {
    return (double)(dtx_attention_att_size(a) + dtx_attention_o_size(a) + dtx_attention_o2_size(a) +
                    dtx_attention_rstd_size(a)) *
               sizeof(real) +
           (double)dtx_attention_lse_size(a) * sizeof(float);
}

/* Bytes of scratch the kernel needs besides (the flash workspace). */
static double attn_scratch_bytes(const dtx_attn_dims *a) {
    return (double)dtx_attention_flash_workspace_size(a) * sizeof(real);
}

/* The inputs and outputs of one attention call: q, k, v, out, dout, dq, dk, dv. */
static double attn_io_bytes(const dtx_attn_dims *a) {
    double N = (double)(a->geom.B * a->geom.T), D = (double)CFG_S.dim;
    return 8 * N * D * sizeof(real);
}

static real *touch_alloc(size_t n, int fill) {
    real *p = malloc(n * sizeof(real) + 64);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) p[i] = fill ? (real)((double)(rng_next() >> 11) * 0x1.0p-53 - 0.5) : 0;
    return p;
}

/* --attn-child T plain|flash diff|transformer: allocates, says "ready 1",
 * waits for "go", runs one forward + backward and answers "ok SECONDS
 * HWM_KIB RSS_BEFORE_KIB". (Waiting for "go" matters: a child that ran and
 * exited before the parent wrote "go" made that write raise SIGPIPE.) */
static int attn_child_main(int argc, char **argv) {
    if (argc != 5) {
        printf("err --attn-child needs 3 arguments\n");
        return 2;
    }
    int64_t T = atoll(argv[2]);
    dtx_attn_impl impl = !strcmp(argv[3], "flash") ? DTX_ATTN_FLASH : DTX_ATTN_PLAIN;
    int diff = !strcmp(argv[4], "diff");
    dtx_attn_dims a = attn_dims_S(T, diff, impl);
    size_t N = (size_t)T, D = (size_t)CFG_S.dim, d = (size_t)a.geom.head_dim;
    real *q = touch_alloc(N * D, 1), *k = touch_alloc(N * D, 1), *v = touch_alloc(N * D, 1);
    real *out = touch_alloc(N * D, 0), *dout = touch_alloc(N * D, 1);
    real *dq = touch_alloc(N * D, 0), *dk = touch_alloc(N * D, 0), *dv = touch_alloc(N * D, 0);
    real *gamma = touch_alloc(2 * d, 1), *dgamma = touch_alloc(2 * d, 0);
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv || !gamma || !dgamma) {
        printf("err out of memory for the inputs\n");
        return 1;
    }
    long before = proc_status_kib("VmRSS:");
    dtx_attn_saved s = {0};
    size_t na = dtx_attention_att_size(&a), nl = dtx_attention_lse_size(&a);
    size_t no = dtx_attention_o_size(&a), no2 = dtx_attention_o2_size(&a), nr = dtx_attention_rstd_size(&a);
    size_t nw = dtx_attention_flash_workspace_size(&a);
    /* allocated, not touched: the kernels' own writes decide what becomes resident */
    if ((na && !(s.att = malloc(na * sizeof(real)))) || (nl && !(s.lse = malloc(nl * sizeof(float)))) ||
        (no && !(s.o1 = malloc(no * sizeof(real)))) || (no2 && !(s.o2 = malloc(no2 * sizeof(real)))) ||
        (nr && !(s.rstd = malloc(nr * sizeof(real)))) ||
        (nw && !(s.work = aligned_alloc(64, (nw * sizeof(real) + 63) / 64 * 64)))) {
        printf("err out of memory for the saved buffers\n");
        return 1;
    }
    printf("ready 1\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin) || strncmp(line, "go", 2)) return 1;
    double dl = 0, t0 = dtx_now_s();
    dtx_attention_forward(&a, out, &s, q, k, v, diff ? gamma : NULL);
    dtx_attention_backward(&a, dq, dk, dv, diff ? dgamma : NULL, &dl, dout, out, &s, q, k, v, diff ? gamma : NULL);
    double dt = dtx_now_s() - t0;
    printf("ok %.6f %ld %ld\n", dt, proc_status_kib("VmHWM:"), before);
    fflush(stdout);
    return 0;
}

/* ================================================================= report */

/* A growing string. */
typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

static void sb_vout(strbuf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = 2 * (b->cap + (size_t)n + 1024);
        char *p = realloc(b->s, cap);
        if (!p) return;
        b->s = p;
        b->cap = cap;
    }
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

static void sb_out(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_out(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vout(b, fmt, ap);
    va_end(ap);
}

static strbuf md; /* the markdown report */

/* Appends to the report and prints the same to stdout. */
static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
    size_t before = md.len;
    va_list ap;
    va_start(ap, fmt);
    sb_vout(&md, fmt, ap);
    va_end(ap);
    if (md.s) fputs(md.s + before, stdout);
    fflush(stdout);
}

static const char *fmt_gib(char *buf, double kib) {
    if (!(kib > 0)) snprintf(buf, 32, "–");
    else snprintf(buf, 32, "%.2f GiB", kib / (1024.0 * 1024.0));
    return buf;
}

static const char *fmt_bytes(char *buf, double b) {
    if (b == 0) snprintf(buf, 32, "0");
    else if (b >= 1024.0 * 1024 * 1024) snprintf(buf, 32, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, 32, "%.1f MiB", b / (1024.0 * 1024));
    else snprintf(buf, 32, "%.0f KiB", b / 1024.0);
    return buf;
}

/* tokens/s of a result's median (train or fwd); NAN when not available. */
static double tps(const run_result *r, int train) {
    if (!r->ok) return NAN;
    double m = train ? median(r->train, r->ntrain) : median(r->fwd, r->nfwd);
    return (double)(r->batch * r->T) / m;
}

/* tokens/s of the fastest timed training step (interference only slows). */
static double tps_best(const run_result *r) {
    if (!r->ok || r->ntrain < 1) return NAN;
    double m = r->train[0];
    for (int i = 1; i < r->ntrain; i++)
        if (r->train[i] < m) m = r->train[i];
    return (double)(r->batch * r->T) / m;
}

/* ============================================================= main driver */

typedef struct {
    bcfg c;
    run_result ours[2][2];   /* [prec][arch: 0 diff, 1 transformer] */
    run_result torch[2][2];
    run_result v2[2][2];     /* [prec][0 diff2, 1 transformer]: V2 in lockstep with its matched baseline */
    int seq_ours[2], seq_torch[2], seq_v2[2];
    int have_ours, have_torch, have_v2;
    int64_t torch_batch, torch_micro;
    size_t nparams[3];       /* [arch] */
} cfg_results;

static const char *ARCH[3] = {"diff", "transformer", "diff2"};
static double max_mfu; /* the largest MFU printed: above 1 means a disturbed peak measurement */

static double note_mfu(double m) {
    if (m > max_mfu) max_mfu = m;
    return 100 * m;
}
static const char *PREC[2] = {"fp32", "bf16"};
/* What ran: the kernels' ISA level and oneDNN's, and whether bf16 is native
 * (AVX-512 BF16 tiles and oneDNN bf16 matmuls) or emulated. Set in main. */
static int bf16_native;
static char isa_col[64];
static const char *prec_col(int p) { return p == 0 ? "fp32" : bf16_native ? "bf16" : "bf16 (emulated)"; }

/* The rows of one lockstep pair of difftx children (res[prec][0], [1]: names[0]
 * against names[1], model FLOPs per token fl[]), fp32 then bf16, with
 * names[0]'s tokens/s over names[1]'s (column `ratio` train / fwd). */
static void pair_table(run_result res[2][2], const char *const names[2], const double fl[2], const int seq[2],
                       double pk32, double pk16, const char *ratio) {
    out("| impl | ISA | arch | prec | train tok/s | (best step) | train MFU | fwd tok/s | fwd MFU | peak RSS | n | "
        "other load | %s train | %s fwd |\n", ratio, ratio);
    out("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int p = 0; p < 2; p++) {
        double pk = p ? pk16 : pk32;
        for (int a = 0; a < 2; a++) {
            run_result *r = &res[p][a];
            char g[32];
            if (!r->ok) {
                out("| difftx | %s | %s | %s | failed: %s | | | | | %s | | | | |\n", isa_col, names[a], prec_col(p), r->why,
                    fmt_gib(g, (double)r->hwm_kib));
                continue;
            }
            double tt_ = tps(r, 1), tf = tps(r, 0);
            char ratio_t[32] = "", ratio_f[32] = "";
            if (a == 1 && res[p][0].ok) {
                snprintf(ratio_t, sizeof ratio_t, "%.3f", tps(&res[p][0], 1) / tt_);
                snprintf(ratio_f, sizeof ratio_f, "%.3f", tps(&res[p][0], 0) / tf);
            }
            out("| difftx | %s | %s | %s | %.0f | (%.0f) | %.1f%% | %.0f | %.1f%% | %s | %d%s | %.2f | %s | %s |\n", isa_col,
                names[a], prec_col(p), tt_, tps_best(r), note_mfu(3 * fl[a] * tt_ / (pk * 1e9)), tf,
                note_mfu(fl[a] * tf / (pk * 1e9)), fmt_gib(g, (double)r->hwm_kib), r->ntrain, seq[p] ? " (seq.)" : "",
                r->timed_s > 0 ? r->other_cpu_s / r->timed_s : NAN, ratio_t, ratio_f);
        }
    }
    out("\n");
}

static void serve_spec(spawn_spec *s, char store[][32], const bcfg *b, int arch, int prec, char **envp) {
    s->path = self_exe;
    s->envp = envp;
    int64_t v[7] = {b->dim, b->layers, b->heads, b->ffn, b->vocab, b->T, b->B};
    int k = 0;
    s->argv[k++] = "bench";
    s->argv[k++] = "--serve";
    for (int i = 0; i < 7; i++) {
        snprintf(store[i], 32, "%lld", (long long)v[i]);
        s->argv[k++] = store[i];
    }
    s->argv[k++] = (char *)ARCH[arch];
    s->argv[k++] = (char *)PREC[prec];
    s->argv[k] = NULL;
}

static void torch_spec(spawn_spec *s, char store[][32], const bcfg *b, int64_t batch, int64_t micro, int arch,
                       int prec, int threads, const char *python, const char *script, const char *attn,
                       char **envp) {
    s->path = python;
    s->envp = envp;
    int k = 0;
    s->argv[k++] = (char *)python;
    s->argv[k++] = (char *)script;
    s->argv[k++] = "--serve";
    const char *keys[] = {"--dim", "--layers", "--heads", "--ffn", "--vocab", "--seq", "--batch", "--micro-batch",
                          "--threads"};
    int64_t heads = arch == 0 ? b->heads : 2 * b->heads;
    int64_t v[] = {b->dim, b->layers, heads, b->ffn, b->vocab, b->T, batch, micro, threads};
    for (int i = 0; i < 9; i++) {
        snprintf(store[i], 32, "%lld", (long long)v[i]);
        s->argv[k++] = (char *)keys[i];
        s->argv[k++] = store[i];
    }
    s->argv[k++] = "--arch";
    s->argv[k++] = (char *)ARCH[arch];
    s->argv[k++] = "--prec";
    s->argv[k++] = (char *)PREC[prec];
    s->argv[k++] = "--attn";
    s->argv[k++] = (char *)attn;
    s->argv[k] = NULL;
}

/* ================================================================= decode */

/* Sums of a[0, n) (n a multiple of 64) with 8 independent vector
 * accumulators, so that a pass is bound by memory, not by add latency. */
__attribute__((target("avx2"))) static float sum_ymm(const float *a, size_t n) {
    __m256 c[8];
    for (int j = 0; j < 8; j++) c[j] = _mm256_setzero_ps();
    for (size_t i = 0; i < n; i += 64)
        for (int j = 0; j < 8; j++) c[j] = _mm256_add_ps(c[j], _mm256_loadu_ps(a + i + 8 * (size_t)j));
    for (int j = 1; j < 8; j++) c[0] = _mm256_add_ps(c[0], c[j]);
    float t[8];
    _mm256_storeu_ps(t, c[0]);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
static float sum_xmm(const float *a, size_t n) {
    __m128 c[8];
    for (int j = 0; j < 8; j++) c[j] = _mm_setzero_ps();
    for (size_t i = 0; i < n; i += 32)
        for (int j = 0; j < 8; j++) c[j] = _mm_add_ps(c[j], _mm_loadu_ps(a + i + 4 * (size_t)j));
    for (int j = 1; j < 8; j++) c[0] = _mm_add_ps(c[0], c[j]);
    float t[4];
    _mm_storeu_ps(t, c[0]);
    return t[0] + t[1] + t[2] + t[3];
}

/* Memory read bandwidth of every thread together, GB/s: the best of
 * `passes` passes, each over an array of 2^lg floats (far beyond the
 * caches) that no other pass reads, every thread summing its own contiguous
 * part (ymm where the level has AVX2, else SSE2). The arrays are written
 * first, in the order they are then read, so each has had the others' bytes
 * through the caches since. Why not one array read again: on Zen 5 (AMD
 * family 1Ah, 2026-12-04) reading one 256 MiB array a second and third time
 * measured 74-91 GB/s where reading 256 MiB not recently read measured
 * 70-78 (the L3 and the page-walk caches keep part of an array read
 * moments before); a decode step reads weights that a whole model's bytes
 * have passed through the caches since, so the bound is the second. */
static double measure_read_bw(int lg, int passes) {
    size_t n = (size_t)1 << lg;
    /* in 2 MiB pages, as difftx keeps the weights a decode step reads (weights_memory.c): 4 KiB pages
     * read about a fifth slower here, and the bound is what memory delivers at best */
    size_t mapped = 0;
    float *a = dtx_alloc_huge(n * (size_t)passes * sizeof(float), &mapped);
    if (!a) return NAN;
    float (*sum)(const float *, size_t) = dtx_isa_level() >= DTX_ISA_AVX2 ? sum_ymm : sum_xmm;
    double best = 0;
    for (int pass = -1; pass < passes; pass++) { /* pass −1 first-touches the pages on their threads */
        double t0 = dtx_now_s(), tot = 0;
        const float *ap = a + n * (size_t)(pass < 0 ? 0 : pass);
#pragma omp parallel reduction(+ : tot)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            size_t chunk = n / (size_t)nt / 64 * 64, i0 = (size_t)id * chunk;
            if (pass < 0) {
                for (int q = 0; q < passes; q++) {
                    for (size_t i = i0; i < i0 + chunk; i++) a[n * (size_t)q + i] = (float)(i & 7);
#pragma omp barrier
                }
            } else
                tot += sum(ap + i0, chunk);
        }
        double dt = dtx_now_s() - t0;
        peak_sink = (float)tot;
        if (pass >= 0 && (double)n * 4 / dt / 1e9 > best) best = (double)n * 4 / dt / 1e9;
    }
    dtx_free_lazy_zero(a, mapped, 1);
    return best;
}

/* Each timed round's bandwidth: the mean of the measurements just before and
 * just after it (bw holds rounds + 1 measurements, round r between bw[r] and
 * bw[r + 1]; the machine's bandwidth moves with its other tenants within
 * seconds). The first `rounds` entries are replaced. */
static void bw_around_rounds(double *bw, int rounds) {
    for (int r = 0; r < rounds; r++) bw[r] = (bw[r] + bw[r + 1]) / 2;
}

typedef struct {
    int ok;
    char why[160];
    double tok_s;       /* decode tokens per second (median of the rounds)      */
    double bytes_tok;   /* bytes every decode step must read (weights + cache)  */
    double bw, frac;    /* medians of the rounds: the bandwidth around a round
                         * (the mean of the measurements just before and just
                         * after it), and the fraction of its bound reached   */
    double tok_gbs;     /* median of the rounds' tokens/s per GB/s of that bandwidth */
    double mem_mb;      /* resident memory the model and its cache added, MB    */
    int64_t ctx0, n;    /* context length at the first decode step, steps timed */
} decode_result;

/* The weights a decode step reads: fp32, bf16 (the bf16 copy), and the
 * three quantised schemes (calibrated on a few sequences of the model's
 * own random ids: the speed does not depend on the values). */
enum { DEC_FP32, DEC_BF16, DEC_W8A16, DEC_W8A8, DEC_W4A16, N_DEC };
static const char *const DEC_NAME[N_DEC] = {"fp32", "bf16", "w8a16", "w8a8", "w4a16"};

/* Decoding speed of config b (DIFF or baseline) with weights prec (DEC_*):
 * a prefill of ctx tokens, then n decode steps, timed; 5 rounds, the median.
 * The bound: every weight and every cached key and value row, once per step,
 * at their stored size (fp32 4 bytes, the bf16 copy 2, quantised: the codes
 * and scales), but of an untied embedding table only the one row looked up.
 * Memory: the growth of the process's resident set from before the model
 * exists to after its first prefill (weights in every form it keeps, cache,
 * scratch). */
/* The model of a decoding row: config b's arch with weights prec (DEC_*),
 * room for max_seq positions; toks [max(ctx, 256)] filled with the ids its
 * prompts and calibration use. *step_weight_bytes: what one decode step
 * reads of its weights (every weight as stored; of an untied embedding table
 * only the row looked up). NULL and why on a failure. */
static dtx_model *decode_model(const bcfg *b, int arch, int prec, int64_t max_seq, int32_t *toks, int64_t ctx,
                               double *step_weight_bytes, char *why, size_t cap) {
    dtx_config c = make_config(b, arch);
    int64_t ncal = 4, lcal = 64; /* calibration: 4 sequences of 64 ids */
    c.max_seq_len = max_seq > lcal ? max_seq : lcal;
    dtx_model *m = NULL;
    if (dtx_model_init(&m, &c, 1) || dtx_model_set_precision(m, prec == DEC_BF16 ? DTX_PREC_BF16 : DTX_PREC_FP32)) {
        snprintf(why, cap, "%s", dtx_last_error());
        dtx_model_free(m);
        return NULL;
    }
    for (int64_t i = 0; i < ncal * lcal || i < ctx; i++) toks[i] = (int32_t)((i * 7919) % c.vocab_size);
    double emb_row = 4.0 * (double)c.dim; /* bytes of one embedding row as stored */
    if (prec >= DEC_W8A16) {
        static const dtx_wquant scheme[N_DEC] = {0, 0, DTX_WQ_W8A16, DTX_WQ_W8A8, DTX_WQ_W4A16};
        dtx_quant_options o = dtx_quant_options_default(scheme[prec]);
        o.clip_search = 0;
        if (dtx_model_quantize(m, &o, toks, ncal, lcal, NULL)) {
            snprintf(why, cap, "%s", dtx_last_error());
            dtx_model_free(m);
            return NULL;
        }
        emb_row = (double)c.dim + 4; /* the embedding is int8 in every scheme */
    }
    double weight_bytes = prec == DEC_BF16 ? 2.0 * (double)dtx_model_num_params(m) : (double)dtx_model_weight_bytes(m);
    if (prec == DEC_BF16) emb_row = 2.0 * (double)c.dim;
    *step_weight_bytes = weight_bytes - (c.tie_embeddings ? 0 : (double)(c.vocab_size - 1) * emb_row);
    return m;
}

/* Bytes of keys and values one sequence's decode steps read on average over
 * n steps after a prompt of ctx (fp32 cache). */
static double decode_cache_bytes(const bcfg *b, int arch, int64_t ctx, int64_t n) {
    dtx_config c = make_config(b, arch);
    int64_t kv_dim = c.dim * c.n_kv_heads / c.n_heads;
    return 4.0 * (double)c.n_layers * 2 * (double)kv_dim * ((double)ctx + (double)(n + 1) / 2);
}

static decode_result decode_bench(const bcfg *b, int arch, int prec, int64_t ctx, int64_t n) {
    decode_result r;
    memset(&r, 0, sizeof r);
    dtx_config c = make_config(b, arch);
    dtx_model *m = NULL;
    dtx_kvcache *kv = NULL;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(256 > ctx ? 256 : ctx));
    float *logits = malloc(sizeof(float) * (size_t)c.vocab_size);
    long rss0 = proc_status_kib("VmRSS:");
    double wbytes = 0;
    if (!toks || !logits) {
        snprintf(r.why, sizeof r.why, "out of memory");
        goto done;
    }
    if (!(m = decode_model(b, arch, prec, ctx + n, toks, ctx, &wbytes, r.why, sizeof r.why))) goto done;
    if (dtx_kvcache_init(&kv, m, ctx + n)) {
        snprintf(r.why, sizeof r.why, "%s", dtx_last_error());
        goto done;
    }
    r.bytes_tok = wbytes + decode_cache_bytes(b, arch, ctx, n);
    /* 5 rounds between bandwidth measurements (the machine's bandwidth moves
     * with its other tenants, within seconds): each round's bound is the mean
     * of the measurements just before and just after it; the medians */
    enum { ROUNDS = 5 };
    double t[ROUNDS], bw[ROUNDS + 1], fr[ROUNDS], tg[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        dtx_kvcache_reset(kv);
        if (dtx_model_prefill(m, kv, toks, ctx, logits)) {
            snprintf(r.why, sizeof r.why, "%s", dtx_last_error());
            goto done;
        }
        if (round == 0) r.mem_mb = (double)(proc_status_kib("VmRSS:") - rss0) * 1024 / 1e6;
        bw[round] = measure_read_bw(26, 3); /* 256 MiB */
        double t0 = dtx_now_s();
        for (int64_t i = 0; i < n; i++)
            if (dtx_model_decode(m, kv, (int32_t)((i * 31) % c.vocab_size), logits)) {
                snprintf(r.why, sizeof r.why, "%s", dtx_last_error());
                goto done;
            }
        t[round] = dtx_now_s() - t0;
    }
    bw[ROUNDS] = measure_read_bw(26, 3);
    bw_around_rounds(bw, ROUNDS);
    for (int round = 0; round < ROUNDS; round++) {
        tg[round] = (double)n / t[round] / bw[round];
        fr[round] = tg[round] * r.bytes_tok / 1e9;
    }
    r.ok = 1, r.ctx0 = ctx, r.n = n;
    r.tok_s = (double)n / median(t, ROUNDS), r.bw = median(bw, ROUNDS), r.frac = median(fr, ROUNDS),
    r.tok_gbs = median(tg, ROUNDS);
done:
    dtx_kvcache_free(kv);
    dtx_model_free(m);
    free(toks), free(logits);
    return r;
}

/* Batched decoding (dtx_model_decode_batch, as difftx serve steps its
 * requests): s sequences, each with its own cache after a prompt of ctx
 * tokens, then n steps that each decode one token of every sequence. The
 * bound at the batch's arithmetic: a step reads the weights once for all s
 * and every sequence's keys and values, so s tokens take (weights + s ×
 * cache) bytes. 3 rounds between bandwidth measurements, medians. */
typedef struct {
    int ok;
    char why[160];
    double tok_s;      /* aggregate tokens per second (all sequences)           */
    double bytes_step; /* bytes a batched step must read                        */
    double bw, frac;   /* the bandwidth around a round; the fraction of its bound */
} batch_result;

static batch_result decode_batch_bench(const bcfg *b, int arch, int prec, int64_t ctx, int64_t n, int streams) {
    enum { ROUNDS = 3, MAX_STREAMS = 16 };
    batch_result r;
    memset(&r, 0, sizeof r);
    dtx_config c = make_config(b, arch);
    dtx_kvcache *kv[MAX_STREAMS] = {0};
    int32_t tok[MAX_STREAMS], *toks = malloc(sizeof(int32_t) * (size_t)(256 > ctx ? 256 : ctx));
    float *logits = malloc(sizeof(float) * (size_t)c.vocab_size * MAX_STREAMS);
    double wbytes = 0, t[ROUNDS], bw[ROUNDS + 1], fr[ROUNDS];
    dtx_model *m = NULL;
    if (streams < 1 || streams > MAX_STREAMS || !toks || !logits) {
        snprintf(r.why, sizeof r.why, "bad stream count or out of memory");
        goto done;
    }
    if (!(m = decode_model(b, arch, prec, ctx + n, toks, ctx, &wbytes, r.why, sizeof r.why))) goto done;
    for (int i = 0; i < streams; i++)
        if (dtx_kvcache_init(&kv[i], m, ctx + n)) {
            snprintf(r.why, sizeof r.why, "%s", dtx_last_error());
            goto done;
        }
    r.bytes_step = wbytes + streams * decode_cache_bytes(b, arch, ctx, n);
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < streams; i++) {
            dtx_kvcache_reset(kv[i]);
            if (dtx_model_prefill(m, kv[i], toks, ctx, logits)) {
                snprintf(r.why, sizeof r.why, "%s", dtx_last_error());
                goto done;
            }
        }
        bw[round] = measure_read_bw(26, 3);
        double t0 = dtx_now_s();
        for (int64_t k = 0; k < n; k++) {
            for (int i = 0; i < streams; i++) tok[i] = (int32_t)(((k + 1) * 31 + i * 17) % c.vocab_size);
            if (dtx_model_decode_batch(m, kv, tok, streams, logits)) {
                snprintf(r.why, sizeof r.why, "%s", dtx_last_error());
                goto done;
            }
        }
        t[round] = dtx_now_s() - t0;
    }
    bw[ROUNDS] = measure_read_bw(26, 3);
    bw_around_rounds(bw, ROUNDS);
    for (int round = 0; round < ROUNDS; round++)
        fr[round] = (double)n / t[round] * r.bytes_step / (bw[round] * 1e9); /* steps/s ÷ bound steps/s */
    r.ok = 1, r.tok_s = (double)(n * streams) / median(t, ROUNDS), r.bw = median(bw, ROUNDS), r.frac = median(fr, ROUNDS);
done:
    for (int i = 0; i < MAX_STREAMS; i++) dtx_kvcache_free(kv[i]);
    dtx_model_free(m);
    free(toks), free(logits);
    return r;
}

/* llama2.c's run (fp32) and runq (int8) at the stories110M shape, through
 * bench/runq.sh: `rounds` runs of n tokens of each program, each run
 * between two bandwidth measurements as difftx's rounds are; per program the
 * median tokens/s and the median tokens/s per GB/s of the bandwidth around
 * its run (tok_gbs), so that difftx and llama2.c compare at equal bandwidth
 * too. NAN and the reason in why when it could not run. */
static void llama2c_bench(int n, int rounds, double tok[2], double tok_gbs[2], char *why, size_t cap) {
    static const char *const prog[2] = {"run", "runq"};
    double v[2][16], g[2][16];
    tok[0] = tok[1] = tok_gbs[0] = tok_gbs[1] = NAN;
    why[0] = 0;
    if (rounds > 16) rounds = 16;
    for (int r = 0; r < rounds; r++)
        for (int p = 0; p < 2; p++) {
            char cmd[256], line[256], name[16];
            snprintf(cmd, sizeof cmd, "bench/runq.sh build/llama2c %d 1 %s 2>build/llama2c.err", n, prog[p]);
            double bw0 = measure_read_bw(26, 3), x = NAN;
            FILE *f = popen(cmd, "r");
            if (!f) {
                snprintf(why, cap, "could not start bench/runq.sh");
                return;
            }
            while (fgets(line, sizeof line, f))
                if (sscanf(line, "%15s %lf", name, &x) == 2 && strcmp(name, prog[p])) x = NAN;
            int rc = pclose(f);
            double bw1 = measure_read_bw(26, 3);
            if (rc != 0 || isnan(x)) {
                FILE *e = fopen("build/llama2c.err", "r");
                char msg[256] = "";
                if (e) {
                    while (fgets(line, sizeof line, e)) snprintf(msg, sizeof msg, "%s", line); /* the last line */
                    fclose(e);
                }
                msg[strcspn(msg, "\n")] = 0;
                snprintf(why, cap, "bench/runq.sh: %.200s", msg[0] ? msg : "no tokens/s line");
                return;
            }
            v[p][r] = x, g[p][r] = x / ((bw0 + bw1) / 2);
        }
    for (int p = 0; p < 2; p++) tok[p] = median(v[p], rounds), tok_gbs[p] = median(g[p], rounds);
}

/* ---- model files (--models): real-size checkpoints as a user runs them,
 * each in a child process of its own, so that its peak resident memory is
 * its own: open (weights in place: a BF16 file, a Hugging Face folder, or a
 * quantised file), the first token's logits, a prefill of FILE_CTX tokens,
 * then FILE_N decode steps after it. */
enum { FILE_CTX = 512, FILE_N = 16, FILE_ROUNDS = 5 };

typedef struct {
    int ok;
    char why[200];
    double file_gb, params_b, weights_gb, load_s, first_s, prefill_tok_s, rss_gb;
    double decode_tok_s, bytes_tok, bw, frac; /* medians of the rounds (bytes_tok: the middle round's) */
    double bw_lo, bw_hi;                       /* the bandwidth's spread over the rounds */
    char weights[16];
    char kv[8]; /* the KV cache's type ("fp32", "bf16") */
} file_result;

/* --model-child PATH [auto|fp32|bf16]: prints "ok" and the numbers, or "err
 * MESSAGE"; the KV cache in the type given, auto by default (what the
 * commands take: dtx_kv_type_for). */
static int model_child_main(int argc, char **argv) {
    if (argc != 3 && argc != 4) return printf("err --model-child needs a path (and a KV cache type)\n"), 2;
    const char *path = argv[2];
    dtx_kv_type kvt = DTX_KV_FP32;
    const int kv_auto = argc == 3 || !strcmp(argv[3], "auto");
    if (!kv_auto && dtx_kv_type_parse(argv[3], &kvt)) return printf("err %s\n", dtx_last_error()), 2;
    /* the bandwidth first, then the peak RSS reset (writing 5 to clear_refs, Linux 4.0 on): the probe's
     * arrays (3 x 256 MiB) must not count in the model's peak below */
    double bw = measure_read_bw(26, 3);
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    if (!cr || fputs("5", cr) < 0 || fclose(cr)) return printf("err could not reset the peak RSS (/proc/self/clear_refs)\n"), 1;
    double t0 = dtx_now_s();
    dtx_model *m = NULL;
    dtx_kvcache *kv = NULL;
    if (dtx_model_open(&m, path, DTX_PREC_BF16)) return printf("err %s\n", dtx_last_error()), 1;
    double t_load = dtx_now_s() - t0;
    if (kv_auto) kvt = dtx_kv_type_for(m);
    const dtx_config *c = dtx_model_config(m);
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    int32_t *toks = malloc(sizeof(int32_t) * FILE_CTX);
    if (!logits || !toks || dtx_kvcache_init_type(&kv, m, FILE_CTX + FILE_ROUNDS * FILE_N + 1, kvt))
        return printf("err %s\n", dtx_last_error()), 1;
    for (int i = 0; i < FILE_CTX; i++) toks[i] = (int32_t)((i * 7919 + 1) % c->vocab_size);
    if (dtx_model_prefill(m, kv, toks, 1, logits)) return printf("err %s\n", dtx_last_error()), 1;
    double t_first = dtx_now_s() - t0;
    double best_prefill = 1e30;
    for (int round = 0; round < 2; round++) { /* the better of two: the first may still fault pages in */
        dtx_kvcache_reset(kv);
        double p0 = dtx_now_s();
        if (dtx_model_prefill(m, kv, toks, FILE_CTX, logits)) return printf("err %s\n", dtx_last_error()), 1;
        double dt = dtx_now_s() - p0;
        if (dt < best_prefill) best_prefill = dt;
    }
    /* FILE_ROUNDS rounds of FILE_N steps between bandwidth measurements (the
     * first one the measurement above; the machine's bandwidth moves with its
     * other tenants): each round's bound is the mean of the measurements just
     * before and after it. The peak RSS is read after the first round, before
     * another probe's array could count in it. The first decode step begins the
     * weights' copy into 2 MiB pages (weights_memory.c), which runs beside the
     * first round as it would in use, and is waited for after it: the other
     * rounds time the settled weights. */
    double tps[FILE_ROUNDS], bws[FILE_ROUNDS + 1], fracs[FILE_ROUNDS], bytes_mid = 0;
    long hwm = 0;
    for (int round = 0; round < FILE_ROUNDS; round++) {
        if (round == 1) {
            dtx_model_settle_wait(m);
            hwm = proc_status_kib("VmHWM:");
        }
        bws[round] = round == 0 ? bw : measure_read_bw(26, 3);
        double d0 = dtx_now_s();
        for (int i = 0; i < FILE_N; i++)
            if (dtx_model_decode(m, kv, (int32_t)(((round * FILE_N + i) * 31) % c->vocab_size), logits))
                return printf("err %s\n", dtx_last_error()), 1;
        tps[round] = FILE_N / (dtx_now_s() - d0);
    }
    bws[FILE_ROUNDS] = measure_read_bw(26, 3);
    bw_around_rounds(bws, FILE_ROUNDS);
    /* the bytes a step reads: the weights as held (of an untied embedding one row), and the cache */
    double wbytes = (double)dtx_model_weight_bytes(m);
    const char *wname = dtx_model_wquant(m) != DTX_WQ_NONE ? dtx_wquant_name(dtx_model_wquant(m))
                        : dtx_model_weights_in_place(m) ? "bf16" : "fp32";
    if (!c->tie_embeddings) {
        double row = dtx_model_wquant(m) != DTX_WQ_NONE ? (double)c->dim + 4
                     : dtx_model_weights_in_place(m) ? 2.0 * (double)c->dim : 4.0 * (double)c->dim;
        wbytes -= (double)(c->vocab_size - 1) * row;
    }
    double per_pos = (double)dtx_kvcache_bytes(kv) / (FILE_CTX + FILE_ROUNDS * FILE_N + 1); /* keys and values */
    for (int round = 0; round < FILE_ROUNDS; round++) {
        double bytes = wbytes + per_pos * (FILE_CTX + round * FILE_N + (FILE_N + 1) / 2.0);
        fracs[round] = tps[round] * bytes / (bws[round] * 1e9);
        if (round == FILE_ROUNDS / 2) bytes_mid = bytes;
    }
    qsort(bws, FILE_ROUNDS, sizeof *bws, cmp_double); /* sorted for the spread: bws[0] .. bws[FILE_ROUNDS - 1] */
    printf("ok %s %.4f %.4f %.4f %.4f %.4f %.4f %.1f %.3f %ld %.6e %.4f %.4f %.4f %s\n", wname, t_load, t_first,
           FILE_CTX / best_prefill, median(tps, FILE_ROUNDS), bytes_mid, median(bws, FILE_ROUNDS),
           (double)dtx_model_num_params(m) / 1e9, (double)dtx_model_weight_bytes(m) / 1e9, hwm, wbytes,
           median(fracs, FILE_ROUNDS), bws[0], bws[FILE_ROUNDS - 1], dtx_kv_type_name(kvt));
    return 0;
}

/* The model file or folder's bytes on disk. */
static double path_gb(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return NAN;
    if (!S_ISDIR(st.st_mode)) return (double)st.st_size / 1e9;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "du -sb '%s' 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    double b = NAN;
    if (p && fscanf(p, "%lf", &b) != 1) b = NAN;
    if (p) pclose(p);
    return b / 1e9;
}

static file_result file_bench(const char *self, const char *path, const char *kv_cache) {
    file_result r;
    memset(&r, 0, sizeof r);
    r.file_gb = path_gb(path);
    char cmd[4300], line[512];
    /* from the page cache, as the target says: read the files once first */
    snprintf(cmd, sizeof cmd, "cat '%s' '%s'/* > /dev/null 2>&1", path, path);
    if (system(cmd) == -1) { /* the measurement says how warm it was */ }
    snprintf(cmd, sizeof cmd, "'%s' --model-child '%s' %s 2>&1", self, path, kv_cache);
    FILE *p = popen(cmd, "r");
    if (!p) return snprintf(r.why, sizeof r.why, "could not start a child"), r;
    long hwm = 0;
    double wb = 0, rd[12];
    while (fgets(line, sizeof line, p)) {
        if (!strncmp(line, "err ", 4)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(r.why, sizeof r.why, "%.190s", line + 4);
        } else if (sscanf(line, "ok %15s %lf %lf %lf %lf %lf %lf %lf %lf %ld %lf %lf %lf %lf %7s", r.weights, &rd[0],
                          &rd[1], &rd[2], &rd[3], &rd[4], &rd[5], &rd[6], &rd[7], &hwm, &wb, &rd[8], &rd[9],
                          &rd[10], r.kv) == 15) {
            r.ok = 1;
            r.load_s = rd[0], r.first_s = rd[1], r.prefill_tok_s = rd[2], r.decode_tok_s = rd[3], r.bytes_tok = rd[4];
            r.bw = rd[5], r.params_b = rd[6], r.weights_gb = rd[7], r.rss_gb = (double)hwm * 1024 / 1e9;
            r.frac = rd[8], r.bw_lo = rd[9], r.bw_hi = rd[10];
        }
    }
    int rc = pclose(p);
    if (r.ok && rc != 0) r.ok = 0, snprintf(r.why, sizeof r.why, "the child exited with %d", rc);
    if (!r.ok && !r.why[0]) snprintf(r.why, sizeof r.why, "no result line");
    return r;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* ---- the linear layer's products: oneDNN against the tile GEMM */

/* What decides which engine runs each product (src/kernels/matmul.c): every
 * product of the configs' linear layers (M = B·T tokens; the q/k/v/o, FFN
 * and output shapes), fp32 and (where native) bf16, by oneDNN and by the tile
 * GEMM, A B A B, each call on operands evicted from the caches first (a
 * model's activations come from memory), the median of 5. dx and dw
 * accumulate, as in the backward. */
static void gemm_section(const bcfg *cfgs, int ncfg, double peak32, double peak16, int bf16) {
    enum { REPS = 5 };
    out("## The linear layer's products: oneDNN against the tile GEMM\n\n");
    out("Every distinct product of the configs' linear layers (M = batch × T tokens, x [M, K], w [N, K]: forward "
        "x·wᵀ, dx += dout·w, dw += doutᵀ·x), by oneDNN and by difftx's tile GEMM (src/kernels/matmul_tiles.c), "
        "interleaved, each call on operands evicted from the caches (64 MiB written in between), the median of %d; "
        "%% of the measured peak of its precision. *Used*: the engine that runs that product by default on this "
        "machine (src/kernels/matmul.c: the tiles for fp32 forward and dx where 512-bit datapaths are at full "
        "width, oneDNN otherwise; dw always oneDNN: the tiles with a transposed A measured slower).\n\n", REPS);
    out("| config | K | N | product | prec | oneDNN GFLOP/s | of peak | tiles GFLOP/s | of peak | tiles ÷ oneDNN | used |\n");
    out("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---|\n");
    size_t junk_n = (size_t)64 << 20;
    unsigned char *junk = malloc(junk_n);
    for (int ci = 0; ci < ncfg && junk; ci++) {
        const bcfg *b = &cfgs[ci];
        int64_t M = b->B * b->T, shapes[4][2] = {{b->dim, b->dim}, {b->dim, b->ffn}, {b->ffn, b->dim}, {b->dim, b->vocab}};
        for (int si = 0; si < 4; si++) {
            int64_t K = shapes[si][0], N = shapes[si][1];
            float *x = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
            float *o = malloc(sizeof(float) * (size_t)(M * N)), *dx = malloc(sizeof(float) * (size_t)(M * K));
            float *dw = malloc(sizeof(float) * (size_t)(N * K));
            if (!x || !w || !o || !dx || !dw) {
                free(x), free(w), free(o), free(dx), free(dw);
                out("| %s | %" PRId64 " | %" PRId64 " | | | out of memory | | | | | |\n", b->name, K, N);
                continue;
            }
            for (int64_t i = 0; i < M * K; i++) x[i] = (float)((i * 7) % 97) * 0.01f - 0.48f, dx[i] = 0;
            for (int64_t i = 0; i < N * K; i++) w[i] = (float)((i * 5) % 89) * 0.01f - 0.44f, dw[i] = 0;
            for (int64_t i = 0; i < M * N; i++) o[i] = (float)((i * 3) % 83) * 0.01f - 0.41f;
            const char *names[3] = {"forward", "dx", "dw"};
            for (int prec = 0; prec < 1 + bf16; prec++) {
                dtx_precision pr = prec ? DTX_PREC_BF16 : DTX_PREC_FP32;
                int used = dtx_matmul_tiles_used(M, pr);
                for (int prod = 0; prod < 3; prod++) {
                    double t[2][REPS];
                    /* dw: oneDNN only (matmul.c; the tiles with a transposed A measured slower) */
                    const int engines = prod == 2 ? 1 : 2;
                    for (int r = 0; r < REPS; r++)
                        for (int e = 0; e < engines; e++) {
                            for (size_t i = 0; i < junk_n; i += 64) junk[i] = (unsigned char)(junk[i] + 1);
                            int prev = dtx_matmul_set_tiles(e);
                            double t0 = dtx_now_s();
                            if (prod == 0) dtx_matmul_forward(o, x, w, M, K, N, pr);
                            else if (prod == 1) dtx_matmul_backward(dx, NULL, o, NULL, w, M, K, N, pr);
                            else dtx_matmul_backward(NULL, dw, o, x, NULL, M, K, N, pr);
                            t[e][r] = dtx_now_s() - t0;
                            dtx_matmul_set_tiles(prev);
                        }
                    double fl = 2.0 * (double)M * (double)K * (double)N, pk = prec ? peak16 : peak32;
                    double g0 = fl / median(t[0], REPS) / 1e9;
                    out("| %s | %" PRId64 " | %" PRId64 " | %s | %s | %.0f | %.0f%% |", b->name, K, N, names[prod],
                        prec ? "bf16" : "fp32", g0, 100 * g0 / pk);
                    if (engines == 2) {
                        double g1 = fl / median(t[1], REPS) / 1e9;
                        out(" %.0f | %.0f%% | %.2f | %s |\n", g1, 100 * g1 / pk, g1 / g0, used ? "tiles" : "oneDNN");
                    } else {
                        out(" – | | | oneDNN |\n");
                    }
                }
            }
            free(x), free(w), free(o), free(dx), free(dw);
        }
    }
    free(junk);
    out("\n");
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench [--quick | --tiny] [--out FILE] [--steps N] [--no-torch | --torch-full]\n"
            "             [--torch-attn ref|fused]\n"
            "             [--openblas DIR] [--python PATH]\n"
            "             [--sections peak,gemm,train,torch,v2,attn,long,decode,serve] [--configs S,L]\n"
            "             [--models PATH,PATH,...]   (model files measured in the decode section)\n"
            "             [--kv-cache auto|fp32|bf16] (their KV cache; default auto, as the commands)\n"
            "       bench --one S|L|S16K diff|transformer fp32|bf16 [STEPS]\n");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--serve")) return serve_main(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "--attn-child")) return attn_child_main(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "--one")) return one_main(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "--model-child")) return model_child_main(argc, argv);
    /* A child that dies must not take the bench with it: writing to its pipe
     * then fails with EPIPE (and the row says how it died) instead of
     * killing this process. */
    signal(SIGPIPE, SIG_IGN);

    int quick = 0, tiny = 0, steps = 3, no_torch = 0, torch_full = 0;
    const char *outfile = "bench/results.md", *sections = "peak,gemm,train,torch,v2,attn,long,decode,serve";
    const char *python = "/usr/bin/python3", *script = "tools/bench_torch.py", *torch_attn = "fused";
    const char *openblas_dir = "build/openblas", *configs = "S,L", *models = NULL, *kv_cache = "auto";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--tiny")) tiny = quick = 1;
        else if (!strcmp(argv[i], "--no-torch")) no_torch = 1;
        else if (!strcmp(argv[i], "--torch-full")) torch_full = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outfile = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sections") && i + 1 < argc) sections = argv[++i];
        else if (!strcmp(argv[i], "--configs") && i + 1 < argc) configs = argv[++i];
        else if (!strcmp(argv[i], "--python") && i + 1 < argc) python = argv[++i];
        else if (!strcmp(argv[i], "--torch-attn") && i + 1 < argc) torch_attn = argv[++i];
        else if (!strcmp(argv[i], "--openblas") && i + 1 < argc) openblas_dir = argv[++i];
        else if (!strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(argv[i], "--kv-cache") && i + 1 < argc) kv_cache = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    dtx_kv_type kv_type;
    if (strcmp(kv_cache, "auto") && dtx_kv_type_parse(kv_cache, &kv_type)) { /* before any work: every child would fail on it */
        fprintf(stderr, "bench: --kv-cache: %s\n", dtx_last_error());
        return 2;
    }
    if (steps < 1) steps = 1;
    if (steps > MAXSTEPS - 1) steps = MAXSTEPS - 1;
    if (quick && steps > 2) steps = 2;
    int do_peak = !!strstr(sections, "peak"), do_train = !!strstr(sections, "train");
    int do_torch = !!strstr(sections, "torch") && !no_torch, do_attn = !!strstr(sections, "attn");
    int do_long = !!strstr(sections, "long") && !quick;
    int do_decode = !!strstr(sections, "decode"), do_v2 = !!strstr(sections, "v2");
    int do_serve = !!strstr(sections, "serve"), do_gemm = !!strstr(sections, "gemm");
    /* seconds of timed steps per (config, precision, arch); steps are cut to fit */
    double budget = quick ? 60 : 150;
    int threads = omp_get_max_threads();
    double t_start = dtx_now_s();

    /* children: same thread count; PyTorch with its fastest settings */
    char omp_n[32];
    snprintf(omp_n, sizeof omp_n, "OMP_NUM_THREADS=%d", threads);
    const char *our_set[] = {omp_n, NULL};
    char **our_env = make_env(NULL, our_set);
    char local_blas[512];
    snprintf(local_blas, sizeof local_blas, "%s/usr/lib/x86_64-linux-gnu/openblas-pthread", openblas_dir);
    const char *blas_dirs[] = {"/usr/lib/x86_64-linux-gnu/openblas-pthread", local_blas, NULL};
    const char *blas = NULL;
    for (int i = 0; blas_dirs[i]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/libblas.so.3", blas_dirs[i]);
        if (file_exists(p)) {
            blas = blas_dirs[i];
            break;
        }
    }
    static char ld_path[600];
    if (blas) {
        char abs[512];
        if (blas[0] != '/' && getcwd(abs, sizeof abs)) snprintf(ld_path, sizeof ld_path, "LD_LIBRARY_PATH=%s/%s", abs, blas);
        else snprintf(ld_path, sizeof ld_path, "LD_LIBRARY_PATH=%s", blas);
    }
    const char *torch_unset[] = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", NULL};
    const char *torch_set[] = {"OMP_WAIT_POLICY=PASSIVE", omp_n, blas ? ld_path : NULL, NULL};
    char **torch_env = make_env(torch_unset, torch_set);
    if (do_torch && (!file_exists(python) || !file_exists(script))) {
        fprintf(stderr, "bench: %s or %s missing: skipping PyTorch\n", python, script);
        do_torch = 0;
    }

    /* ---- header */
    char date[64];
    time_t tt = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&tt));
    char cpu[128] = "unknown CPU", vendor[32] = "";
    int family = -1, model = -1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f) && line[0] != '\n') { /* the first CPU's block */
            char *p = strchr(line, ':');
            if (!p) continue;
            if (!strncmp(line, "model name", 10)) {
                snprintf(cpu, sizeof cpu, "%s", p + 2);
                cpu[strcspn(cpu, "\n")] = 0;
            } else if (!strncmp(line, "vendor_id", 9)) {
                snprintf(vendor, sizeof vendor, "%s", p + 2);
                vendor[strcspn(vendor, "\n")] = 0;
            } else if (!strncmp(line, "cpu family", 10)) family = atoi(p + 1);
            else if (!strncmp(line, "model\t", 6) || !strncmp(line, "model :", 7)) model = atoi(p + 1);
        }
        fclose(f);
    }
    /* The machine kind every number of this run belongs to (the machines here differ: Zen 3 with AVX2
     * only, Zen 4 with AVX-512 split in 256-bit halves, Zen 5 with it at full width). Family 19h is Zen 3
     * and Zen 4; AVX-512 tells them apart. */
    const char *kind = "";
    if (!strcmp(vendor, "AuthenticAMD"))
        kind = family == 0x17 ? "Zen 1/2" : family == 0x19 ? (dtx_isa_cpu() >= DTX_ISA_AVX512 ? "Zen 4" : "Zen 3")
               : family == 0x1A ? "Zen 5" : "";
    char machine_kind[96];
    snprintf(machine_kind, sizeof machine_kind, "%s%s%s (family %Xh model %Xh)", vendor[0] ? vendor : "CPU",
             kind[0] ? " " : "", kind, family < 0 ? 0 : family, model < 0 ? 0 : model);
    char cmdline[512] = "";
    for (int i = 0; i < argc; i++) {
        strncat(cmdline, i ? " " : "", sizeof cmdline - strlen(cmdline) - 1);
        strncat(cmdline, argv[i], sizeof cmdline - strlen(cmdline) - 1);
    }
    out("# difftx benchmark%s\n\n", quick ? " (QUICK)" : "");
    out("- date: %s\n- command: `%s`\n- machine: %s, %s, %ld online CPUs, %.1f GiB memory\n", date, cmdline, cpu,
        machine_kind, sysconf(_SC_NPROCESSORS_ONLN), (double)meminfo_kib("MemTotal:") / (1 << 20));
    out("- threads: %d (OpenMP, every measurement including PyTorch)\n", threads);
    char load0[64];
    loadavg(load0, sizeof load0);
    out("- load average at the start (1, 5, 15 min): %s\n", load0);

    bf16_native = dtx_isa_level() >= DTX_ISA_AVX512_BF16 && dtx_matmul_bf16_native();
    snprintf(isa_col, sizeof isa_col, "%s%s%s, oneDNN %s", dtx_isa_name(dtx_isa_level()), kind[0] ? " on " : "", kind,
             dtx_matmul_isa_name());
    out("- ISA: kernels %s (CPU %s%s), oneDNN %s; bf16 %s\n", dtx_isa_name(dtx_isa_level()),
        dtx_isa_name(dtx_isa_cpu()), dtx_isa_level() < dtx_isa_cpu() ? ", capped by DTX_ISA" : "",
        dtx_matmul_isa_name(), bf16_native ? "native" : "emulated (bf16-rounded operands, fp32 products)");
    if (dtx_isa_level() >= DTX_ISA_AVX512)
        out("- 512-bit datapaths %s (dtx_isa_full_width): the int8 one-row product reads %s\n",
            dtx_isa_full_width() ? "at full width" : "split in 256-bit halves or unknown",
            dtx_isa_full_width() ? "one row at a time" : "two rows at a time");

    /* ---- 1. peak */
    peak_t p32s = {NAN, NAN, NAN}, p16s = {NAN, NAN, NAN}, p32e = p32s, p16e = p16s;
    if (do_peak) {
        fprintf(stderr, "measuring the FMA peak...\n");
        p32s = measure_peak(0);
        p16s = measure_peak(1);
        double fpi;
        const char *w32 = "", *w16 = "";
        peak_loop(0, &fpi, &w32);
        if (peak_loop(1, &fpi, &w16)) {
            out("- measured peak at the start: fp32 %.1f GFLOP/s (%s), bf16 %.1f GFLOP/s (%s); %d threads together "
                "%.1f and %.1f, one thread alone × %d: %.1f and %.1f (the higher counts: another tenant on one core "
                "lowers the first)\n",
                p32s.peak, w32, p16s.peak, w16, threads, p32s.all, p16s.all, threads, p32s.one, p16s.one);
        } else {
            out("- measured peak at the start: fp32 %.1f GFLOP/s (%s); %d threads together %.1f, one thread alone "
                "× %d: %.1f (the higher counts: another tenant on one core lowers the first); bf16 peak: n/a (no "
                "native bf16 at ISA %s: the bf16 rows are emulated, bf16-rounded operands on the fp32 kernels, and "
                "their MFU is against the fp32 peak)\n",
                p32s.peak, w32, threads, p32s.all, threads, p32s.one, dtx_isa_name(dtx_isa_level()));
        }
    }
    out("\n");

    /* ---- 2, 3. training and forward, ours and PyTorch */
    bcfg cfgs[2];
    int ncfg = 0;
    if (tiny) { /* a harness smoke test: seconds, meaningless numbers */
        cfgs[0] = (bcfg){"tiny", 128, 2, 2, 352, 512, 128, 2, 0};
        ncfg = 1;
    } else if (quick) {
        cfgs[0] = CFG_S;
        cfgs[0].B = 2;
        ncfg = 1;
    } else {
        if (strstr(configs, "S")) cfgs[ncfg++] = CFG_S;
        if (strstr(configs, "L")) cfgs[ncfg++] = CFG_L;
    }
    if (do_gemm) {
        fprintf(stderr, "measuring the linear layer's products...\n");
        gemm_section(cfgs, ncfg, p32s.peak, bf16_native ? p16s.peak : p32s.peak, bf16_native);
    }
    cfg_results *res = calloc((size_t)ncfg, sizeof *res);
    for (int ci = 0; ci < ncfg && (do_train || do_torch || do_v2); ci++) {
        cfg_results *R = &res[ci];
        R->c = cfgs[ci];
        const bcfg *b = &R->c;
        for (int a = 0; a < 3; a++) {
            dtx_config c = make_config(b, a);
            dtx_model *m;
            if (!dtx_model_init(&m, &c, 1)) {
                R->nparams[a] = dtx_model_num_params(m);
                dtx_model_free(m);
            }
        }
        if (do_v2) { /* DIFF V2 in lockstep with the Transformer, its matched baseline (spec §8.2) */
            R->have_v2 = 1;
            for (int p = 0; p < 2; p++) {
                spawn_spec sa, sb;
                char st_a[8][32], st_b[8][32], la[64], lb[64];
                serve_spec(&sa, st_a, b, DTX_ARCH_DIFF2, p, our_env);
                serve_spec(&sb, st_b, b, DTX_ARCH_TRANSFORMER, p, our_env);
                snprintf(la, sizeof la, "difftx %s diff2 %s", b->name, PREC[p]);
                snprintf(lb, sizeof lb, "difftx %s transformer %s (V2's pair)", b->name, PREC[p]);
                run_pair(&sa, &sb, la, lb, b->B, b->T, steps, budget, &R->v2[p][0], &R->v2[p][1], &R->seq_v2[p]);
            }
        }
        if (do_train) {
            R->have_ours = 1;
            for (int p = 0; p < 2; p++) {
                spawn_spec sa, sb;
                char st_a[8][32], st_b[8][32], la[64], lb[64];
                serve_spec(&sa, st_a, b, 0, p, our_env);
                serve_spec(&sb, st_b, b, 1, p, our_env);
                snprintf(la, sizeof la, "difftx %s diff %s", b->name, PREC[p]);
                snprintf(lb, sizeof lb, "difftx %s transformer %s", b->name, PREC[p]);
                run_pair(&sa, &sb, la, lb, b->B, b->T, steps, budget, &R->ours[p][0], &R->ours[p][1],
                         &R->seq_ours[p]);
            }
        }
        if (do_torch) {
            R->have_torch = 1;
            /* PyTorch runs fewer sequences per step to fit the time budget
             * (tokens/s is per token); config L's materialised attention needs
             * micro-batches of one sequence to fit in memory. */
            int64_t tb = quick || torch_full ? b->B : (!strcmp(b->name, "S") ? 2 : 1);
            int64_t tm = !strcmp(b->name, "L") ? 1 : tb;
            R->torch_batch = tb;
            R->torch_micro = tm;
            for (int p = 0; p < 2; p++) {
                if (p == 1 && !bf16_native) { /* PyTorch 1.13 emulates bf16 about 30× slower than its fp32 */
                    for (int a = 0; a < 2; a++)
                        snprintf(R->torch[p][a].why, sizeof R->torch[p][a].why,
                                 "not run: no native bf16 at ISA %s", dtx_isa_name(dtx_isa_level()));
                    continue;
                }
                spawn_spec sa, sb;
                char st_a[10][32], st_b[10][32], la[64], lb[64];
                torch_spec(&sa, st_a, b, tb, tm, 0, p, threads, python, script, torch_attn, torch_env);
                torch_spec(&sb, st_b, b, tb, tm, 1, p, threads, python, script, torch_attn, torch_env);
                snprintf(la, sizeof la, "torch %s diff %s", b->name, PREC[p]);
                snprintf(lb, sizeof lb, "torch %s transformer %s", b->name, PREC[p]);
                run_pair(&sa, &sb, la, lb, tb, b->T, steps, budget, &R->torch[p][0], &R->torch[p][1],
                         &R->seq_torch[p]);
            }
        }
    }

    /* ---- 4. attention memory (printed later) */
    strbuf attn_sb = {0};
    if (do_attn) {
        sb_out(&attn_sb, "## Attention memory (config S attention, one layer, batch 1)\n\n");
        sb_out(&attn_sb, "Computed from the size functions of src/kernels/kernels.h: what the forward keeps for the backward "
            "(plain: the T×T maps; flash: the per-row log-sum-exp; DIFF also o1, o2 and rstd) and the scratch "
            "(flash: dtx_attention_flash_workspace_size; plain: none). Measured: the RSS high-water mark of a "
            "child process that runs one forward + backward, minus its RSS once the inputs and outputs (q, k, v, "
            "out, dout, dq, dk, dv: 8·T·dim floats, %.0f KiB per token) were allocated and touched.\n\n",
            8.0 * (double)CFG_S.dim * sizeof(real) / 1024);
        sb_out(&attn_sb, "| T | arch | impl | saved for backward | scratch | total (computed) | measured | fwd+bwd time |\n");
        sb_out(&attn_sb, "|---:|---|---|---:|---:|---:|---:|---:|\n");
        int64_t Ts[3] = {1024, 4096, 16384};
        long total_kib = meminfo_kib("MemTotal:");
        for (int ti = 0; ti < 3; ti++) {
            for (int a = 0; a < 2; a++) {
                for (int im = 0; im < 2; im++) {
                    dtx_attn_impl impl = im ? DTX_ATTN_FLASH : DTX_ATTN_PLAIN;
                    dtx_attn_dims ad = attn_dims_S(Ts[ti], a == 0, impl);
                    double saved = attn_saved_bytes(&ad), scratch = attn_scratch_bytes(&ad);
                    double bytes = saved + scratch;
                    char cs[32], cw[32], cb[32], mb[200], tb[32] = "–";
                    snprintf(mb, sizeof mb, "–");
                    int run = 1;
                    const char *why = NULL;
                    if (bytes + attn_io_bytes(&ad) > 0.5 * 1024.0 * (double)total_kib) run = 0, why = "not run (memory)";
                    else if (impl == DTX_ATTN_PLAIN && Ts[ti] > 4096) run = 0, why = "not run";
                    else if (quick && (Ts[ti] > 4096 || (impl == DTX_ATTN_PLAIN && Ts[ti] > 1024)))
                        run = 0, why = "not run (QUICK)";
                    if (run) {
                        char sT[32];
                        snprintf(sT, sizeof sT, "%lld", (long long)Ts[ti]);
                        spawn_spec s = {self_exe, {"bench", "--attn-child", sT, im ? "flash" : "plain",
                                                   (char *)ARCH[a], NULL}, our_env};
                        child c;
                        run_result r;
                        if (!start(&c, &s, &r, 1, Ts[ti])) {
                            fprintf(c.in, "go\n");
                            fflush(c.in);
                            char buf[256];
                            double sec;
                            long hwm, before;
                            if (!child_line(&c, buf, sizeof buf) &&
                                sscanf(buf, "ok %lf %ld %ld", &sec, &hwm, &before) == 3) {
                                fmt_bytes(mb, 1024.0 * (double)(hwm - before));
                                snprintf(tb, sizeof tb, "%.2f s", sec);
                            } else {
                                snprintf(mb, sizeof mb, "failed: %s", c.why);
                            }
                            child_quit(&c);
                        } else {
                            snprintf(mb, sizeof mb, "failed: %s", r.why);
                        }
                        fprintf(stderr, "  attention T=%lld %s %s: %s %s\n", (long long)Ts[ti], ARCH[a],
                                im ? "flash" : "plain", mb, tb);
                    } else {
                        snprintf(mb, sizeof mb, "%s", why);
                    }
                    sb_out(&attn_sb, "| %lld | %s | %s | %s | %s | %s | %s | %s |\n", (long long)Ts[ti], ARCH[a],
                        im ? "flash" : "plain", fmt_bytes(cs, saved), fmt_bytes(cw, scratch), fmt_bytes(cb, bytes), mb,
                        tb);
                }
            }
        }
        sb_out(&attn_sb, "\n");
    }

    /* ---- 5. long context */
    run_result rlong;
    memset(&rlong, 0, sizeof rlong);
    int have_long = 0;
    if (do_long) {
        have_long = 1;
        spawn_spec s;
        char st[8][32];
        serve_spec(&s, st, &CFG_S16K, 0, 0, our_env);
        child c;
        if (!start(&c, &s, &rlong, 1, CFG_S16K.T)) {
            step(&c, &rlong, "train", "difftx S T=16384 diff fp32", 0, 1);
            /* a second (timed) step when the first took under 90 s */
            if (rlong.ok && rlong.warm < 90) step(&c, &rlong, "train", "difftx S T=16384 diff fp32", 1, 1);
            finish(&c, &rlong);
        }
    }

    /* ---- 6. decoding: config S and the 110M shape (QUICK: S), the three archs,
     * every weight format; llama2.c's run and runq at the 110M shape */
    double bw = NAN;
    bcfg dcfgs[2];
    int ndec = 0;
    if (!tiny) dcfgs[ndec++] = CFG_S;
    if (!quick) dcfgs[ndec++] = CFG_110M;
    /* a short prompt, then a context growing to 256, as llama2.c's -n 256 */
    int64_t dec_ctx = 8, dec_n = quick ? 56 : 248;
    decode_result dec[2][N_DEC][3]; /* [config][weights][arch] */
    memset(dec, 0, sizeof dec);
    /* batched decoding: 110M DIFF, these weights, these stream counts */
    static const int BATCH_W[] = {DEC_FP32, DEC_W8A16, DEC_W4A16}, BATCH_S[] = {1, 4, 8, 16};
    enum { N_BW = sizeof BATCH_W / sizeof BATCH_W[0], N_BS = sizeof BATCH_S / sizeof BATCH_S[0] };
    batch_result bat[N_BW][N_BS];
    int have_batch = 0;
    double l2c[2] = {NAN, NAN}, l2c_gbs[2] = {NAN, NAN}; /* llama2.c's run and runq: tokens/s, and per GB/s */
    char l2c_why[256] = "not run (QUICK)";
    enum { MAX_FILES = 16 };
    file_result files[MAX_FILES];
    char file_names[MAX_FILES][1024];
    int nfiles = 0;
    if (do_decode && models) {
        char self[4096];
        ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
        self[sl > 0 ? sl : 0] = 0;
        char *list = strdup(models);
        for (char *s = strtok(list, ","); s && nfiles < MAX_FILES; s = strtok(NULL, ",")) {
            snprintf(file_names[nfiles], sizeof file_names[0], "%s", s);
            fprintf(stderr, "  model file %s...\n", s);
            files[nfiles] = file_bench(self, s, kv_cache);
            file_result *fr = &files[nfiles];
            if (fr->ok)
                fprintf(stderr, "    %s: peak RSS %.2f GB (file %.2f GB), first token %.2f s, prefill %.1f tok/s, "
                        "decode %.2f tok/s (%.0f%% of the bound)\n", fr->weights, fr->rss_gb, fr->file_gb, fr->first_s,
                        fr->prefill_tok_s, fr->decode_tok_s, 100 * fr->frac);
            else
                fprintf(stderr, "    failed: %s\n", fr->why);
            nfiles++;
        }
        free(list);
    }
    if (do_decode && ndec) {
        fprintf(stderr, "measuring the memory bandwidth and decoding...\n");
        bw = measure_read_bw(26, 5);
        for (int ci = 0; ci < ndec; ci++)
            for (int p = 0; p < N_DEC; p++)
                for (int a = 0; a < 3; a++) {
                    double t0 = dtx_now_s();
                    dec[ci][p][a] = decode_bench(&dcfgs[ci], a, p, dec_ctx, dec_n);
                    fprintf(stderr, "  decode %s %s %s: %.1f tokens/s (%.0f s)\n", dcfgs[ci].name, ARCH[a], DEC_NAME[p],
                            dec[ci][p][a].tok_s, dtx_now_s() - t0);
                }
        if (!quick) {
            for (int w = 0; w < N_BW; w++)
                for (int k = 0; k < N_BS; k++) {
                    bat[w][k] = decode_batch_bench(&CFG_110M, 0, BATCH_W[w], dec_ctx, 32, BATCH_S[k]);
                    fprintf(stderr, "  batched decode 110M diff %s x %d: %.1f tokens/s\n", DEC_NAME[BATCH_W[w]],
                            BATCH_S[k], bat[w][k].tok_s);
                }
            have_batch = 1;
            fprintf(stderr, "  llama2.c run and runq (bench/runq.sh)...\n");
            llama2c_bench((int)(dec_ctx + dec_n), 3, l2c, l2c_gbs, l2c_why, sizeof l2c_why);
            fprintf(stderr, "  llama2.c: run %.1f, runq %.1f tokens/s%s%s\n", l2c[0], l2c[1], l2c_why[0] ? ": " : "",
                    l2c_why);
        }
    }

    /* ---- 7. the peak again; MFU is against the higher of the two measurements */
    if (do_peak) {
        p32e = measure_peak(0);
        p16e = measure_peak(1);
    }
    double pk32 = fmax(p32s.peak, p32e.peak), pk16 = fmax(p16s.peak, p16e.peak);
    if (!bf16_native) pk16 = pk32; /* emulated bf16 runs on the fp32 FMAs */

    /* ---- tables */
    if (do_train || do_torch) {
        out("## Training and forward throughput\n\n");
        out("Model FLOPs per token, forward = 2 × (all matmul weights: q, k, v, o, w1, w2, w3 per layer, and the "
            "output projection; not the embedding lookup) + per layer causal attention with T/2 keys on "
            "average: QKᵀ T·dim, PV T·dim (Transformer) or 2·T·dim (DIFF: A1·V and A2·V at value width 2d). "
            "Training = 3 × forward. MFU = model FLOP/s (median step) ÷ the measured peak of the precision used "
            "(fp32 peak for fp32, bf16 peak for native bf16, the fp32 peak for emulated bf16; the higher of the "
            "start and end measurements: fp32 %.1f, bf16 %.1f GFLOP/s). ISA: the kernels' level and oneDNN's "
            "(DTX_ISA caps both); bf16 is *emulated* (bf16-rounded operands on the fp32 kernels) where the CPU "
            "has no native bf16. tokens/s and MFU are from the median of the timed "
            "steps (n) after one warm-up step; DIFF and baseline steps are interleaved. Peak RSS: the "
            "high-water mark of the child process that ran that configuration (training and forward). "
            "Other load: the CPU time of everything else on the machine (other tenants, the idle partner child, "
            "hypervisor steal) during that row's timed steps, in cores; near 0 the row is clean, near %d it ran "
            "on a shared machine and its times are inflated. MHA, untied embeddings.\n\n",
            pk32, pk16, threads);
        for (int ci = 0; ci < ncfg; ci++) {
            cfg_results *R = &res[ci];
            const bcfg *b = &R->c;
            dtx_config cd = make_config(b, 0), cb = make_config(b, 1);
            out("### Config %s%s: dim %lld, %lld layers, %lld DIFF heads / %lld baseline heads (d = %lld), FFN %lld, "
                "vocab %lld, T %lld, batch %lld\n\n",
                b->name, tiny ? " (TINY harness test)" : quick ? " (QUICK: batch 2)" : "", (long long)b->dim, (long long)b->layers,
                (long long)b->heads, (long long)(2 * b->heads), (long long)(b->dim / (2 * b->heads)),
                (long long)b->ffn, (long long)b->vocab, (long long)b->T, (long long)b->B);
            double fd = model_flops_fwd(&cd, b->T), fb = model_flops_fwd(&cb, b->T);
            out("Parameters: DIFF %zu, Transformer %zu. Model FLOPs per token (forward): DIFF %.1f M, "
                "Transformer %.1f M; per training step (%lld tokens): DIFF %.2f TFLOP, Transformer %.2f TFLOP.\n\n",
                R->nparams[0], R->nparams[1], fd / 1e6, fb / 1e6, (long long)(b->B * b->T),
                3 * fd * (double)(b->B * b->T) / 1e12, 3 * fb * (double)(b->B * b->T) / 1e12);
            if (R->have_ours) {
                const char *names[2] = {ARCH[0], ARCH[1]};
                pair_table(R->ours, names, (double[2]){fd, fb}, R->seq_ours, pk32, pk16, "DIFF/base");
            }
            if (R->have_v2) {
                dtx_config cv = make_config(b, DTX_ARCH_DIFF2);
                double fv = model_flops_fwd(&cv, b->T);
                out("DIFF V2 (`diff2`, spec §8: %lld heads of d = %lld, %lld query heads, per-token λ) in lockstep with "
                    "its matched Transformer (the same %lld heads and KV heads; a run of its own beside the rows "
                    "above): %zu parameters, %.1f M FLOPs per token forward (QKᵀ and PV over 2h heads: 4·T·dim per "
                    "layer).\n\n",
                    (long long)cv.n_heads, (long long)dtx_config_head_dim(&cv), (long long)(2 * cv.n_heads),
                    (long long)cv.n_heads, R->nparams[DTX_ARCH_DIFF2], fv / 1e6);
                const char *names[2] = {ARCH[DTX_ARCH_DIFF2], ARCH[DTX_ARCH_TRANSFORMER]};
                pair_table(R->v2, names, (double[2]){fv, fb}, R->seq_v2, pk32, pk16, "V2/base");
            }
            if (R->have_torch) {
                out("PyTorch %s (tools/bench_torch.py, attention `%s`, %s): batch %lld sequences per step%s.\n\n",
                    "1.13", torch_attn, blas ? "OpenBLAS (pthreads) for fp32 matmuls" :
                    "**the system's reference BLAS** (OpenBLAS not found: see bench/openblas.sh)",
                    (long long)R->torch_batch,
                    R->torch_batch < b->B ? " (fewer than ours, to fit the time budget; tokens/s is per token; "
                                            "`--torch-full` runs the full batch)" : "");
                out("| impl | ISA | arch | prec | train tok/s | (best step) | train MFU | fwd tok/s | fwd MFU | peak RSS | n | other load | difftx/torch train | difftx/torch fwd |\n");
                out("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
                for (int p = 0; p < 2; p++) {
                    double pk = p ? pk16 : pk32;
                    for (int a = 0; a < 2; a++) {
                        run_result *r = &R->torch[p][a];
                        double fl = a == 0 ? fd : fb;
                        char g[32];
                        if (!r->ok) {
                            out("| torch | PyTorch's | %s | %s | %s | | | | | %s | | | | |\n", ARCH[a], PREC[p], r->why,
                                fmt_gib(g, (double)r->hwm_kib));
                            continue;
                        }
                        double tt_ = tps(r, 1), tf = tps(r, 0);
                        char rt[32] = "–", rf[32] = "–";
                        if (R->have_ours && R->ours[p][a].ok) {
                            snprintf(rt, sizeof rt, "%.2f", tps(&R->ours[p][a], 1) / tt_);
                            snprintf(rf, sizeof rf, "%.2f", tps(&R->ours[p][a], 0) / tf);
                        }
                        char mbs[48] = "";
                        if (r->micro_batch < r->batch)
                            snprintf(mbs, sizeof mbs, " (micro-batch %lld)", (long long)r->micro_batch);
                        out("| torch | PyTorch's | %s | %s | %.0f | (%.0f) | %.1f%% | %.0f | %.1f%% | %s | %d%s%s | %.2f | %s | %s |\n",
                            ARCH[a], PREC[p], tt_, tps_best(r), note_mfu(3 * fl * tt_ / (pk * 1e9)), tf, note_mfu(fl * tf / (pk * 1e9)),
                            fmt_gib(g, (double)r->hwm_kib), r->ntrain, R->seq_torch[p] ? " (seq.)" : "", mbs,
                            r->timed_s > 0 ? r->other_cpu_s / r->timed_s : NAN, rt,
                            rf);
                    }
                }
                out("\n");
            }
        }
    }

    if (max_mfu > 1)
        out("**An MFU above 100%% means the peak measurements (start and end) both caught the machine busy: "
            "the MFU figures of this run are too high.**\n\n");
    if (attn_sb.s) out("%s", attn_sb.s);

    if (do_long) {
        out("## Long context: one training step at T = 16384 (config S, DIFF, fp32, batch 1)\n\n");
        dtx_config cd = make_config(&CFG_S16K, 0);
        double fl = 3 * model_flops_fwd(&cd, CFG_S16K.T) * (double)CFG_S16K.T;
        char g[32];
        if (rlong.ok) {
            double t = rlong.ntrain ? rlong.train[0] : rlong.warm;
            out("| peak RSS | step time | tokens/s | MFU | fits in 12 GiB |\n|---:|---:|---:|---:|---|\n");
            out("| %s | %.1f s%s | %.0f | %.1f%% | %s |\n\n", fmt_gib(g, (double)rlong.hwm_kib), t,
                rlong.ntrain ? "" : " (first step)", (double)CFG_S16K.T / t, 100 * fl / t / (pk32 * 1e9),
                rlong.hwm_kib <= 12L * 1024 * 1024 ? "yes" : "**no**");
        } else {
            out("failed: %s (peak RSS %s)\n\n", rlong.why, fmt_gib(g, (double)rlong.hwm_kib));
        }
    }

    if (do_decode && (ndec || nfiles)) {
        if (ndec) {
            out("## Decoding (KV cache, batch 1, a prompt of %" PRId64 " tokens, then %" PRId64 " decode steps)\n\n", dec_ctx,
                dec_n);
            out("Configs: S, and 110M: llama2.c's stories110M shape (dim 768, 12 layers, ffn 2048, vocab 32000, tied "
                "embeddings; DIFF 6 heads, the Transformer 12 heads of 64 as llama2.c). Memory read bandwidth measured in "
                "this run: %.1f GB/s at the start of the section (every thread summing 256 MiB in 2 MiB pages, as difftx "
                "keeps the weights a decode step reads; the best of 5 passes, each over "
                "memory no other pass reads, as a decode step reads weights a whole model's bytes have passed through the "
                "caches since), and again (the best of 3 such passes) before and after each of the 5 timed rounds of every "
                "row, because this shared machine's bandwidth moves with its other tenants, within seconds. Bound = the bandwidth around a round "
                "(the mean of the measurements just before and just after it) ÷ the bytes each decode step must read: every weight as stored (4 bytes each in fp32; 2 in bf16, which decodes from a bf16 copy of the "
                "weights; quantised (docs/quantize.md): the int8 or 4-bit codes and their fp32 scales), of an untied "
                "embedding table only the row looked up, and the cached keys and values (fp32) at the step's length. "
                "tokens/s, bandwidth and the fraction of the bound are medians over the rounds; × fp32 is the tokens/s "
                "over fp32's of the same config and arch; memory is the resident memory the model, its cache and scratch "
                "added to the process. ISA: %s.\n\n",
                bw, isa_col);
            out("| config | arch | weights | tokens/s | × fp32 | memory MB | MB per token | bandwidth | bound tokens/s | of "
                "bound |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
            for (int ci = 0; ci < ndec; ci++)
                for (int p = 0; p < N_DEC; p++)
                    for (int a = 0; a < 3; a++) {
                        decode_result *d = &dec[ci][p][a], *f32 = &dec[ci][DEC_FP32][a];
                        if (!d->ok) {
                            out("| %s | %s | %s | failed: %s | | | | | | |\n", dcfgs[ci].name, ARCH[a], DEC_NAME[p], d->why);
                            continue;
                        }
                        out("| %s | %s | %s | %.1f | %.2f | %.0f | %.1f | %.1f GB/s | %.1f | %.0f%% |\n", dcfgs[ci].name,
                            ARCH[a], DEC_NAME[p], d->tok_s, f32->ok ? d->tok_s / f32->tok_s : NAN, d->mem_mb,
                            d->bytes_tok / 1e6, d->bw, d->bw * 1e9 / d->bytes_tok, 100 * d->frac);
                    }
            out("\n");
        }
        if (have_batch) {
            out("Batched decoding (`dtx_model_decode_batch`, the step `difftx serve` runs for its active requests): "
                "110M DIFF, s sequences each with its own cache after the same %" PRId64 "-token prompt, then 32 "
                "steps that each decode one token of every sequence; 3 rounds between bandwidth measurements, "
                "medians. Bound at the batch's arithmetic: a step reads the weights once for all s sequences and "
                "each sequence's keys and values, so s tokens take weights + s × cache bytes; tokens/s are all "
                "sequences together.\n\n", dec_ctx);
            out("| weights | sequences | tokens/s | × one sequence | MB per step | bandwidth | bound tokens/s | of bound "
                "|\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
            for (int w = 0; w < N_BW; w++)
                for (int k = 0; k < N_BS; k++) {
                    batch_result *r = &bat[w][k];
                    if (!r->ok) {
                        out("| %s | %d | failed: %s | | | | | |\n", DEC_NAME[BATCH_W[w]], BATCH_S[k], r->why);
                        continue;
                    }
                    out("| %s | %d | %.1f | %.2f | %.1f | %.1f GB/s | %.1f | %.0f%% |\n", DEC_NAME[BATCH_W[w]], BATCH_S[k],
                        r->tok_s, bat[w][0].ok ? r->tok_s / bat[w][0].tok_s : NAN, r->bytes_step / 1e6, r->bw,
                        BATCH_S[k] * r->bw * 1e9 / r->bytes_step, 100 * r->frac);
                }
            out("\n");
        }
        if (nfiles) {
            out("Model files (`--models`), each in a process of its own, read from the page cache: opened as every "
                "command opens one (`dtx_model_open`: a BF16 file or Hugging Face folder's weights used in place, a "
                "quantised file's codes, moved by a thread of its own into 2 MiB pages beside the decode steps), the first token's logits, a prefill of %d tokens (the better of two), then "
                "%d rounds of %d decode steps after it (the move, begun by the first decode step, waited for after the first round), each round between two measurements of the memory "
                "bandwidth (each the best of 3 passes over 256 MiB in 2 MiB pages that no other pass reads). Peak RSS is the process's own "
                "(VmHWM, reset after the first bandwidth measurement and read after the first round, before a second "
                "bandwidth array could count in it), the weights' bytes what the model holds; each round's bound "
                "is the bandwidth around it (the mean of the measurements just before and after it) ÷ the bytes a step reads (the weights as held, of an "
                "untied embedding one row, the KV cache at its length: %s%s). Decode tokens/s, the bandwidth and the "
                "fraction of the bound are medians over the rounds (each its own median: the fraction is not the "
                "ratio of the other two), the bandwidth's range beside it; the bound tokens/s is the median "
                "bandwidth's.\n\n",
                FILE_CTX, FILE_ROUNDS, FILE_N, kv_cache,
                !strcmp(kv_cache, "auto") ? ", the commands' default: bf16 for bf16 or quantised weights, fp32 for fp32 "
                                            "ones; each row's weights column names it"
                                          : "");
            out("| model | weights | params | file GB | peak RSS GB | ÷ file | open s | first token s | prefill %d tok/s | "
                "decode tok/s | bandwidth | bound tok/s | of bound |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
                "---:|---:|---:|\n", FILE_CTX);
            for (int i = 0; i < nfiles; i++) {
                file_result *fr = &files[i];
                const char *base = strrchr(file_names[i], '/');
                base = base && base[1] ? base + 1 : file_names[i];
                if (!fr->ok) {
                    out("| %s | failed: %s | | | | | | | | | | | |\n", base, fr->why);
                    continue;
                }
                double bound = fr->bw * 1e9 / fr->bytes_tok;
                out("| %s | %s, %s KV | %.2fB | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f | %.1f GB/s (%.1f–%.1f) | "
                    "%.2f | %.0f%% |\n",
                    base, fr->weights, fr->kv, fr->params_b, fr->file_gb, fr->rss_gb, fr->rss_gb / fr->file_gb, fr->load_s,
                    fr->first_s, fr->prefill_tok_s, fr->decode_tok_s, fr->bw, fr->bw_lo, fr->bw_hi, bound,
                    100 * fr->frac);
            }
            out("\n");
        }
        if (!quick) {
            out("llama2.c at the same shape, same run (bench/runq.sh: its Makefile's `runomp` flags, %d threads, a "
                "random model exported by its export.py, `-t 0 -n %" PRId64 "`, 3 runs of each program, each "
                "between two bandwidth measurements as difftx's rounds are; its own \"achieved tok/s\"; runq: int8 "
                "weights and activations in groups of 64): ",
                threads, dec_ctx + dec_n);
            if (l2c_why[0]) out("not measured: %s.\n\n", l2c_why);
            else {
                out("run (fp32) %.1f tokens/s (%.2f per GB/s), runq %.1f tokens/s (%.2f per GB/s), medians. Each "
                    "ratio below is difftx's over llama2.c's, first in tokens/s, then in tokens/s per GB/s of the "
                    "bandwidth measured around each one's runs (the comparison at equal bandwidth: this machine's "
                    "moves between 25 and 55 GB/s within a run, so the first can favour whichever ran at the "
                    "better moment; the targets use the second).\n\n"
                    "| 110M | DIFF | Transformer | DIFF, equal bandwidth | Transformer, equal bandwidth |\n"
                    "|---|---:|---:|---:|---:|\n",
                    l2c[0], l2c_gbs[0], l2c[1], l2c_gbs[1]);
                for (int p = 0; p <= N_DEC; p++) { /* every format against runq, then fp32 against run */
                    int q = p == N_DEC ? DEC_FP32 : p, l = p == N_DEC ? 0 : 1;
                    decode_result *d0 = &dec[1][q][0], *d1 = &dec[1][q][1];
                    out("| %s ÷ %s | %.2f× | %.2f× | %.2f× | %.2f× |\n", DEC_NAME[q], l ? "runq" : "run",
                        d0->ok ? d0->tok_s / l2c[l] : NAN, d1->ok ? d1->tok_s / l2c[l] : NAN,
                        d0->ok ? d0->tok_gbs / l2c_gbs[l] : NAN, d1->ok ? d1->tok_gbs / l2c_gbs[l] : NAN);
                }
                out("\n");
            }
        }
    }

    /* ---- 8. serving: difftx serve's batcher, batched against one at a time (bench/serve_bench.c) */
    if (do_serve && !tiny) {
        fprintf(stderr, "serving: batched and one at a time...\n");
        serve_bench_run(quick, out);
    }

    /* ---- peak again, targets */
    if (ncfg && (do_train || do_torch || do_v2 || have_long || do_decode)) {
        out("## Targets (issue)\n\n| target | measured | met |\n|---|---|---|\n");
        for (int ci = 0; ci < ncfg; ci++) {
            cfg_results *R = &res[ci];
            const char *n = R->c.name;
            for (int a = 0; a < 2 && R->have_ours && R->have_torch; a++) {
                double o = tps(&R->ours[0][a], 1), t = tps(&R->torch[0][a], 1);
                out("| %s %s fp32 training ≥ 2× PyTorch | %.2f× | %s |\n", n, ARCH[a], o / t,
                    isnan(o / t) ? "–" : o / t >= 2 ? "yes" : "**no**");
            }
            for (int a = 0; a < 2 && R->have_ours; a++) {
                double r = tps(&R->ours[1][a], 1) / tps(&R->ours[0][a], 1);
                double want = bf16_native ? 1.8 : 1.0; /* emulated bf16 can at best match fp32 */
                out("| %s %s bf16 (%s) training ≥ %.1f× our fp32 | %.2f× | %s |\n", n, ARCH[a],
                    bf16_native ? "native" : "emulated", want, r, isnan(r) ? "–" : r >= want ? "yes" : "**no**");
            }
            for (int a = 0; a < 2 && R->have_ours; a++) {
                dtx_config c = make_config(&R->c, a);
                double mfu = 3 * model_flops_fwd(&c, R->c.T) * tps(&R->ours[0][a], 1) / (pk32 * 1e9);
                /* issue 35: 70% where the cores run two full-width 512-bit FMAs a cycle (Zen 5), 85% elsewhere */
                double want = dtx_isa_full_width() ? 0.70 : 0.85;
                out("| %s %s fp32 training MFU ≥ %.0f%% (%s%s) | %.1f%% | %s |\n", n, ARCH[a], 100 * want,
                    dtx_isa_name(dtx_isa_level()), dtx_isa_full_width() ? ", 512-bit at full width" : "", 100 * mfu,
                    isnan(mfu) ? "–" : mfu >= want ? "yes" : "**no**");
            }
            for (int p = 0; p < 2 && R->have_ours; p++) {
                double r = tps(&R->ours[p][0], 1) / tps(&R->ours[p][1], 1);
                out("| %s %s DIFF ≥ 0.95× baseline training throughput | %.3f× | %s |\n", n, PREC[p], r,
                    isnan(r) ? "–" : r >= 0.95 ? "yes" : "**no**");
            }
            for (int p = 0; p < 2 && R->have_v2; p++) {
                double r = tps(&R->v2[p][0], 1) / tps(&R->v2[p][1], 1);
                out("| %s %s DIFF V2 ≥ 0.9× baseline training throughput | %.3f× | %s |\n", n, PREC[p], r,
                    isnan(r) ? "–" : r >= 0.9 ? "yes" : "**no**");
            }
        }
        if (have_long) {
            char g[32];
            out("| T = 16384 training (S, DIFF, batch 1) fits in 12 GiB | %s | %s |\n",
                rlong.ok ? fmt_gib(g, (double)rlong.hwm_kib) : rlong.why,
                !rlong.ok ? "**no**" : rlong.hwm_kib <= 12L * 1024 * 1024 ? "yes" : "**no**");
        }
        for (int ci = 0; ci < ndec && do_decode; ci++)
            for (int p = 0; p < 2; p++) {
                decode_result *v = &dec[ci][p][DTX_ARCH_DIFF2], *t = &dec[ci][p][DTX_ARCH_TRANSFORMER];
                double r = v->ok && t->ok ? v->tok_s / t->tok_s : NAN;
                out("| %s %s DIFF V2 decode ≥ 0.95× the baseline's tokens/s | %.3f× | %s |\n", dcfgs[ci].name,
                    DEC_NAME[p], r, isnan(r) ? "–" : r >= 0.95 ? "yes" : "**no**");
            }
        for (int ci = 0; ci < ndec && do_decode; ci++)
            for (int a = 0; a < 3; a++) {
                decode_result *d = &dec[ci][0][a];
                double frac = d->ok ? d->frac : NAN;
                out("| %s %s fp32 decode ≥ 85%% of the memory-bandwidth bound | %.0f%% | %s |\n", dcfgs[ci].name, ARCH[a],
                    100 * frac, isnan(frac) ? "–" : frac >= 0.85 ? "yes" : "**no**");
            }
        /* quantised decoding at 110M: a quarter (int8) or about a sixth (4-bit) of fp32's bytes */
        for (int ci = 0; ci < ndec && do_decode; ci++) {
            if (dcfgs[ci].vocab != CFG_110M.vocab) continue;
            static const int qp[3] = {DEC_W8A16, DEC_W8A8, DEC_W4A16};
            for (int j = 0; j < 3; j++)
                for (int a = 0; a < 2; a++) {
                    decode_result *d = &dec[ci][qp[j]][a], *f0 = &dec[ci][DEC_FP32][a];
                    double want = qp[j] == DEC_W4A16 ? 4.5 : 3.0, x = d->ok && f0->ok ? d->tok_s / f0->tok_s : NAN;
                    out("| 110M %s %s decode ≥ %.1f× fp32 tokens/s | %.2f× | %s |\n", ARCH[a], DEC_NAME[qp[j]], want, x,
                        isnan(x) ? "–" : x >= want ? "yes" : "**no**");
                }
            for (int j = -1; j < 2; j++) { /* fp32 against run, int8 against runq: at its own head layout, equal bandwidth */
                decode_result *d = &dec[ci][j < 0 ? DEC_FP32 : qp[j]][1];
                double x = d->ok ? d->tok_gbs / l2c_gbs[j < 0 ? 0 : 1] : NAN, want = j < 0 ? 1.05 : 1.5;
                out("| 110M Transformer %s decode ≥ %.2f× llama2.c %s (equal bandwidth) | %.2f× | %s |\n",
                    DEC_NAME[j < 0 ? DEC_FP32 : qp[j]], want, j < 0 ? "run" : "runq", x,
                    isnan(x) ? "–" : x >= want ? "yes" : "**no**");
            }
        }
        if (quick)
            out("\n(%s: the targets are judged on `make bench`.)\n",
                tiny ? "TINY harness test" : "QUICK: config S at batch 2 only");
        out("\n");
    }
    if (do_peak && bf16_native)
        out("Measured peak at the end: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (threads together %.1f, %.1f; one "
            "thread × %d %.1f, %.1f). At the start: %.1f, %.1f. A large difference means the machine was "
            "disturbed.\n\n",
            p32e.peak, p16e.peak, p32e.all, p16e.all, threads, p32e.one, p16e.one, p32s.peak, p16s.peak);
    else if (do_peak)
        out("Measured peak at the end: fp32 %.1f GFLOP/s (threads together %.1f; one thread × %d %.1f); bf16 n/a. At "
            "the start: %.1f. A large difference means the machine was disturbed.\n\n",
            p32e.peak, p32e.all, threads, p32e.one, p32s.peak);
    char load1[64];
    loadavg(load1, sizeof load1);
    out("Load average at the end (1, 5, 15 min): %s (this run itself keeps about %d busy).\n\n", load1, threads);
    out("Total benchmark time: %.1f min.\n", (dtx_now_s() - t_start) / 60);

    FILE *fo = fopen(outfile, "w");
    if (!fo || fwrite(md.s, 1, md.len, fo) != md.len || fclose(fo)) {
        fprintf(stderr, "bench: cannot write %s\n", outfile);
        return 1;
    }
    fprintf(stderr, "wrote %s\n", outfile);
    return 0;
}
