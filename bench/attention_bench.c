/* Timing harness for the attention kernels (not a test): config S of issue 3,
 * B = 8, T = 1024, DIFF with 4 heads of d = 64 (values 128) against a
 * Transformer with 8 heads of d = 64, flash and plain, forward and
 * forward + backward. Prints medians of interleaved runs (DIFF, Transformer,
 * DIFF, ...) and GFLOP/s, plus the machine's fp32 FMA peak measured in the
 * same run (the box is shared, so compare figures of one run only).
 *
 * Build (after `make build/libdifftx.a`):
 *   cc -O2 -march=native -fopenmp -Iinclude -Isrc bench/attention_bench.c \
 *      build/libdifftx.a -o build/attention_bench -fopenmp -ldnnl -lcjson -lm
 * Run: build/attention_bench [reps] [T] [--plain]; env BQ, BK override the
 * flash tile sizes; PREC=bf16 runs the native bf16 mode (bf16 products,
 * fp32 softmax: attention_flash.c) instead of fp32.
 *
 * FLOPs counted (causal, so T²/2 score pairs per map):
 *   forward: QKᵀ T²/2·d·2 per q sub-head + PV T²/2·(value width)·2 per map;
 *   backward, nominal: 2.5 × forward (the usual flash accounting); the
 *   executed count is also printed: per map S and dS·K, dSᵀ·Q (3 × T²/2·d·2)
 *   plus dO·Vᵀ and Pᵀ·dO (2 × T²/2·w·2) per head, where DIFF shares the last
 *   two between its maps. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "kernels/attention_flash.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Wall time, or with env CPUTIME=1 the process CPU time (for tuning on a
 * shared machine with OMP_NUM_THREADS=1: time-sharing then does not count). */
static double now(void) {
    static int cpu = -1;
    if (cpu < 0) cpu = getenv("CPUTIME") && atoi(getenv("CPUTIME")) != 0;
    return cpu ? dtx_cpu_s() : dtx_now_s();
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* fp32 FMA peak on all threads: 24 independent zmm accumulators per thread. */
__attribute__((target("avx512f"))) static double fma_peak(void) {
#if defined(__x86_64__)
    long iters = 20000000;
    double t0 = now();
#pragma omp parallel
    {
        __m512 acc[24], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
        for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
#pragma GCC unroll 24
            for (int i = 0; i < 24; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
        float s = 0;
        for (int i = 0; i < 24; i++) s += _mm512_reduce_add_ps(acc[i]);
        if (s == 12345.678f) printf("!");
    }
    double t = now() - t0;
    return (double)iters * 24 * 32 * omp_get_max_threads() / t / 1e9;
#else
    return 0;
#endif
}

typedef struct {
    dtx_attn_dims a;
    size_t nq, nk, nv, no;
    real *q, *k, *v, *gamma, *out, *dout, *dq, *dk, *dv, *dg;
    dtx_attn_saved s;
    double dl;
} problem;

static real *randn(dtx_rng *r, size_t n) {
    real *x = dtx_alloc(n ? n : 1, sizeof(real));
    for (size_t i = 0; i < n; i++) x[i] = (real)dtx_rng_normal(r);
    return x;
}

static problem make(dtx_attn_impl impl, int diff, int64_t B, int64_t T, int64_t H, int64_t d) {
    dtx_rng r;
    dtx_rng_seed(&r, 1);
    problem p;
    memset(&p, 0, sizeof p);
    const char *prec = getenv("PREC");
    p.a = (dtx_attn_dims){.run.impl = impl, .run.precision = prec && !strcmp(prec, "bf16") ? DTX_PREC_BF16 : DTX_PREC_FP32, .geom.B = B, .geom.T = T, .geom.n_heads = H, .geom.n_kv_heads = H, .geom.head_dim = d,
                          .arch.diff = diff, .arch.subln = diff, .arch.lambda = 0.6, .arch.lambda_init = 0.5, .arch.eps = 1e-5};
    int64_t sub = diff ? 2 : 1;
    p.nq = (size_t)(B * T * sub * H * d), p.nk = p.nq, p.nv = p.nq, p.no = p.nq;
    p.q = randn(&r, p.nq), p.k = randn(&r, p.nk), p.v = randn(&r, p.nv), p.gamma = randn(&r, (size_t)(2 * d));
    p.dout = randn(&r, p.no);
    p.out = dtx_calloc(p.no, sizeof(real));
    p.dq = dtx_calloc(p.nq, sizeof(real)), p.dk = dtx_calloc(p.nk, sizeof(real));
    p.dv = dtx_calloc(p.nv, sizeof(real)), p.dg = dtx_calloc((size_t)(2 * d), sizeof(real));
    size_t na = dtx_attention_att_size(&p.a), nl = dtx_attention_lse_size(&p.a), no = dtx_attention_o_size(&p.a);
    size_t nr = dtx_attention_rstd_size(&p.a), nw = dtx_attention_flash_workspace_size(&p.a);
    p.s.att = na ? dtx_calloc(na, sizeof(real)) : NULL;
    p.s.lse = nl ? dtx_calloc(nl, sizeof(float)) : NULL;
    p.s.o1 = no ? dtx_calloc(no, sizeof(real)) : NULL;
    p.s.o2 = no ? dtx_calloc(no, sizeof(real)) : NULL;
    p.s.rstd = nr ? dtx_calloc(nr, sizeof(real)) : NULL;
    p.s.work = nw ? dtx_calloc(nw, sizeof(real)) : NULL;
    return p;
}

static void release(problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->gamma), free(p->dout), free(p->out);
    free(p->dq), free(p->dk), free(p->dv), free(p->dg);
    free(p->s.att), free(p->s.lse), free(p->s.o1), free(p->s.o2), free(p->s.rstd), free(p->s.work);
}

static double time_fwd(problem *p) {
    double t0 = now();
    dtx_attention_forward(&p->a, p->out, &p->s, p->q, p->k, p->v, p->gamma);
    return now() - t0;
}

static double time_fwd_bwd(problem *p) {
    double t0 = now();
    dtx_attention_forward(&p->a, p->out, &p->s, p->q, p->k, p->v, p->gamma);
    dtx_attention_backward(&p->a, p->dq, p->dk, p->dv, p->a.arch.diff ? p->dg : NULL, p->a.arch.diff ? &p->dl : NULL,
                           p->dout, p->out, &p->s, p->q, p->k, p->v, p->gamma);
    return now() - t0;
}

/* Causal forward FLOPs and executed backward FLOPs (see the header). */
static void flops(const dtx_attn_dims *a, double *fwd, double *bwd_exec) {
    double T2 = (double)a->geom.T * (double)a->geom.T / 2, d = (double)a->geom.head_dim, B = (double)a->geom.B, H = (double)a->geom.n_heads;
    if (a->arch.diff) {
        *fwd = B * H * (2 * T2 * d * 2 + 2 * T2 * 2 * d * 2);
        *bwd_exec = B * H * (2 * 3 * T2 * d * 2 + 2 * T2 * 2 * d * 2);
    } else {
        *fwd = B * H * (T2 * d * 2 + T2 * d * 2);
        *bwd_exec = B * H * (3 * T2 * d * 2 + 2 * T2 * d * 2);
    }
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    int64_t T = argc > 2 ? atoll(argv[2]) : 1024, B = 8, d = 64;
    int plain = argc > 3 && strcmp(argv[3], "--plain") == 0;
    if (getenv("BQ") && getenv("BK")) dtx_flash_set_tiles(atoll(getenv("BQ")), atoll(getenv("BK")));
    printf("threads %d, B %lld, T %lld, d %lld; fp32 FMA peak now %.0f GFLOP/s (all threads)\n",
           omp_get_max_threads(), (long long)B, (long long)T, (long long)d, fma_peak());
    for (int impl = DTX_ATTN_FLASH; impl >= (plain ? DTX_ATTN_PLAIN : DTX_ATTN_FLASH); impl--) {
        problem pd = make((dtx_attn_impl)impl, 1, B, T, 4, d), pt = make((dtx_attn_impl)impl, 0, B, T, 8, d);
        int n = impl == DTX_ATTN_PLAIN ? 2 : reps;
        double *tf[2], *tb[2];
        for (int i = 0; i < 2; i++) tf[i] = calloc((size_t)n, sizeof(double)), tb[i] = calloc((size_t)n, sizeof(double));
        time_fwd_bwd(&pd), time_fwd_bwd(&pt); /* warm up */
        for (int r = 0; r < n; r++) {
            tf[0][r] = time_fwd(&pd), tf[1][r] = time_fwd(&pt);
            tb[0][r] = time_fwd_bwd(&pd), tb[1][r] = time_fwd_bwd(&pt);
        }
        double mf[2], mb[2];
        for (int i = 0; i < 2; i++) {
            problem *p = i ? &pt : &pd;
            double ff, fb;
            flops(&p->a, &ff, &fb);
            mf[i] = median(tf[i], n), mb[i] = median(tb[i], n);
            printf("%-5s %-11s fwd %8.2f ms %6.1f GFLOP/s | fwd+bwd %8.2f ms, nominal (3.5x fwd) %6.1f GFLOP/s, "
                   "executed %6.1f GFLOP/s\n",
                   impl == DTX_ATTN_FLASH ? "flash" : "plain", i ? "transformer" : "diff", 1e3 * mf[i],
                   ff / mf[i] / 1e9, 1e3 * mb[i], 3.5 * ff / mb[i] / 1e9, (ff + fb) / mb[i] / 1e9);
        }
        printf("%-5s diff / transformer time: fwd %.3f, fwd+bwd %.3f\n", impl == DTX_ATTN_FLASH ? "flash" : "plain",
               mf[0] / mf[1], mb[0] / mb[1]);
        for (int i = 0; i < 2; i++) free(tf[i]), free(tb[i]);
        release(&pd), release(&pt);
    }
    return 0;
}
