/* The flash attention backward in double precision (the portable path, with
 * the double build's tiny tiles, 8 queries × 4 keys, so short sequences span
 * many tiles) against central finite differences of L = Σ out ⊙ R, for both
 * architectures, MHA and GQA, every input (q, k, v, and for DIFF γ and λ);
 * that it accumulates; and flash vs plain in double.
 *
 * The saved lse is float by contract; the double build's backward refines it
 * to double (attention_flash.c, refine_lse) before recomputing the maps, so
 * the gradients are exact to rounding and the plain kernel's FD tolerance
 * applies. Set DTX_FD_VERBOSE=1 to print the measured errors. */
#ifndef DTX_DOUBLE
#error "attention_flash_fd_test.c is linked into the double-precision runner (-DDTX_DOUBLE)"
#endif

#include "../test.h"
#include "kernels/attention_flash.h"
#include "kernels/kernels.h"
#include "kernels/tile_gemm.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define FD_H 1e-4        /* fourth-order stencil */
#define FD_TOL 1e-6      /* elementwise and normwise, as for the plain kernel */
#define FD_MAX_ALL 800   /* inputs up to this size are checked on every element */
#define FD_SAMPLE 300    /* else this many random elements */
#define PLAIN_TOL 1e-12  /* flash vs plain, both double */

static int verbose(void) {
    const char *v = getenv("DTX_FD_VERBOSE");
    return v && *v && *v != '0';
}

static double max_abs(const real *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* Σ a ⊙ b in long double (keeps the FD noise low). */
static double dot_all(const real *a, const real *b, size_t n) {
    long double s = 0;
    for (size_t i = 0; i < n; i++) s += (long double)a[i] * b[i];
    return (double)s;
}

/* ------------------------------------------------------------ a problem */

typedef struct {
    dtx_attn_dims a;
    size_t nq, nk, nv, no;
    real *q, *k, *v, *gamma, *out, *R;
    dtx_attn_saved s;
} fa_ctx;

static fa_ctx fa_make(uint64_t seed, dtx_attn_impl impl, int diff, int subln, int64_t B, int64_t T, int64_t H, int64_t G,
                      int64_t d, double lambda, double lambda_init) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    fa_ctx m;
    memset(&m, 0, sizeof m);
    m.a = (dtx_attn_dims){.run.impl = impl, .geom.B = B, .geom.T = T, .geom.n_heads = H, .geom.n_kv_heads = G, .geom.head_dim = d,
                          .arch.diff = diff, .arch.subln = subln, .arch.lambda = lambda, .arch.lambda_init = lambda_init, .arch.eps = 1e-5};
    int64_t sub = diff ? 2 : 1;
    m.nq = (size_t)(B * T * sub * H * d), m.nk = (size_t)(B * T * sub * G * d);
    m.nv = (size_t)(B * T * G * sub * d), m.no = (size_t)(B * T * H * sub * d);
    m.q = randn(&r, m.nq, 0, 1), m.k = randn(&r, m.nk, 0, 1), m.v = randn(&r, m.nv, 0, 1);
    m.gamma = randn(&r, (size_t)(2 * d), 1, 0.3);
    m.out = alloc_r(m.no), m.R = randn(&r, m.no, 0, 1);
    m.s.att = impl == DTX_ATTN_PLAIN ? alloc_r(dtx_attention_att_size(&m.a)) : NULL;
    m.s.lse = impl == DTX_ATTN_FLASH ? calloc(dtx_attention_lse_size(&m.a), sizeof(float)) : NULL;
    m.s.o1 = alloc_r(dtx_attention_o_size(&m.a)), m.s.o2 = alloc_r(dtx_attention_o2_size(&m.a));
    m.s.rstd = alloc_r(dtx_attention_rstd_size(&m.a));
    m.s.work = impl == DTX_ATTN_FLASH ? dtx_alloc(dtx_attention_flash_workspace_size(&m.a) + 1, sizeof(real)) : NULL;
    return m;
}

static void fa_free(fa_ctx *m) {
    free(m->q), free(m->k), free(m->v), free(m->gamma), free(m->out), free(m->R);
    free(m->s.att), free(m->s.lse), free(m->s.o1), free(m->s.o2), free(m->s.rstd), free(m->s.work);
}

static double fa_loss(fa_ctx *m) {
    dtx_attention_forward(&m->a, m->out, &m->s, m->q, m->k, m->v, m->gamma);
    return dot_all(m->out, m->R, m->no);
}

/* Forward then backward, adding into g = {dq, dk, dv, then dγ (subln), then dλ (DIFF)}. */
static void fa_backward(fa_ctx *m, real *const *g) {
    fa_loss(m);
    int sl = m->a.arch.subln;
    dtx_attention_backward(&m->a, g[0], g[1], g[2], sl ? g[3] : NULL, m->a.arch.diff ? g[3 + sl] : NULL, m->R, m->out,
                           &m->s, m->q, m->k, m->v, m->gamma);
}

/* dL/dx by (−L(x+2h) + 8L(x+h) − 8L(x−h) + L(x−2h)) / 12h. */
static double central_diff(fa_ctx *m, real *x) {
    real x0 = *x;
    double l[4], off[4] = {2, 1, -1, -2};
    for (int j = 0; j < 4; j++) {
        *x = x0 + off[j] * FD_H;
        l[j] = fa_loss(m);
    }
    *x = x0;
    return (8 * (l[1] - l[2]) - (l[0] - l[3])) / (12 * FD_H);
}

/* ------------------------------------------------------------ the check */

static void flash_fd_variant(int diff, int subln, int64_t T, int64_t H, int64_t G, int64_t d, double lam,
                             double lam_init, uint64_t seed) {
    fa_ctx m = fa_make(seed, DTX_ATTN_FLASH, diff, subln, 2, T, H, G, d, lam, lam_init);
    char name[80];
    snprintf(name, sizeof name, "flash %s%s T%lld H%lld G%lld d%lld", diff ? "diff" : "tfm",
             subln == diff ? "" : subln ? " +subln" : " -subln", (long long)T, (long long)H, (long long)G,
             (long long)d);
    const char *in_names[5] = {"q", "k", "v"};
    real *in_x[5] = {m.q, m.k, m.v};
    size_t in_n[5] = {m.nq, m.nk, m.nv};
    int n_in = 3;
    if (subln) in_names[n_in] = "subln_w", in_x[n_in] = m.gamma, in_n[n_in++] = (size_t)((diff ? 2 : 1) * d);
    if (diff) in_names[n_in] = "lambda", in_x[n_in] = &m.a.arch.lambda, in_n[n_in++] = 1;
    dtx_rng rng;
    dtx_rng_seed(&rng, seed + 1000);
    real *g[5], *acc[5], *pre[5];
    for (int i = 0; i < n_in; i++) {
        g[i] = alloc_r(in_n[i]);
        pre[i] = randn(&rng, in_n[i], 0, 1);
        acc[i] = alloc_r(in_n[i]);
        memcpy(acc[i], pre[i], in_n[i] * sizeof(real));
    }
    fa_backward(&m, g);
    fa_backward(&m, acc);
    for (int i = 0; i < n_in; i++) {
        double worst = 0, scale = max_abs(g[i], in_n[i]) + max_abs(pre[i], in_n[i]);
        for (size_t j = 0; j < in_n[i]; j++) worst = fmax(worst, fabs((acc[i][j] - pre[i][j]) - g[i][j]));
        CHECKF(worst <= 1e-13 * scale, "%s: d%s does not accumulate (err %.3g)", name, in_names[i], worst);
        CHECKF(max_abs(g[i], in_n[i]) > 0, "%s: d%s is all zero", name, in_names[i]);
    }
    /* every input; every element of the small ones, a random sample of the
     * others. The thousands of tiny forwards run on one thread: on a loaded
     * machine each OpenMP barrier can wait a scheduler tick (the analytic
     * gradients above ran on all threads, and results do not depend on it). */
    int nth = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int i = 0; i < n_in; i++) {
        double floor = 1e-8 * max_abs(g[i], in_n[i]) + 1e-300, worst = 0, dd = 0, nn = 0;
        size_t n_check = in_n[i] <= FD_MAX_ALL ? in_n[i] : FD_SAMPLE;
        for (size_t c = 0; c < n_check; c++) {
            size_t j = in_n[i] <= FD_MAX_ALL ? c : (size_t)(dtx_rng_next(&rng) % in_n[i]);
            double num = central_diff(&m, in_x[i] + j), an = g[i][j];
            double den = fmax(fabs(an) + fabs(num), floor);
            worst = fmax(worst, fabs(an - num) / den);
            dd += (an - num) * (an - num), nn += num * num;
        }
        double norm = nn > 0 ? sqrt(dd / nn) : sqrt(dd);
        CHECKF(worst < FD_TOL && norm < FD_TOL, "%s: d%s FD error elementwise %.3g, normwise %.3g", name,
               in_names[i], worst, norm);
        if (verbose())
            printf("    %-30s d%-8s n=%-5zu fd err elem %.2e norm %.2e\n", name, in_names[i], in_n[i], worst, norm);
    }
    omp_set_num_threads(nth);
    for (int i = 0; i < n_in; i++) free(g[i]), free(acc[i]), free(pre[i]);
    fa_free(&m);
}

static void flash_fd_case(int diff, int64_t T, int64_t H, int64_t G, int64_t d, double lam, double lam_init,
                          uint64_t seed) {
    flash_fd_variant(diff, diff, T, H, G, d, lam, lam_init, seed);
}

/* Table 6's variants through the flash kernel: DIFF without the per-head
 * norm, the Transformer with one. */
TEST(kernel_flash_fd_variants) {
    flash_fd_variant(1, 0, 21, 2, 2, 4, 0.37, 0.2, 35);  /* DIFF − subln, MHA */
    flash_fd_variant(1, 0, 13, 4, 2, 8, 0.9, 0.5, 36);   /* DIFF − subln, GQA */
    flash_fd_variant(0, 1, 21, 2, 2, 4, 0, 0, 25);       /* Transformer + subln, MHA */
    flash_fd_variant(0, 1, 19, 4, 2, 8, 0, 0, 26);       /* Transformer + subln, GQA */
}

TEST(kernel_flash_fd_transformer) {
    REQUIRE(dtx_tile_isa() == DTX_ISA_PORTABLE); /* the double build always takes the portable path */
    flash_fd_case(0, 21, 2, 2, 4, 0, 0, 21); /* MHA, 3 query × 6 key tiles */
    flash_fd_case(0, 19, 4, 2, 8, 0, 0, 22); /* GQA n_rep 2 */
    flash_fd_case(0, 13, 3, 1, 4, 0, 0, 23); /* MQA n_rep 3 */
}

TEST(kernel_flash_fd_diff) {
    flash_fd_case(1, 21, 2, 2, 4, 0.37, 0.2, 31);     /* MHA */
    flash_fd_case(1, 19, 4, 2, 8, 0.9, 0.7456, 32);   /* GQA n_rep 2 */
    flash_fd_case(1, 13, 2, 1, 4, -0.2, 0.5561, 33);  /* n_kv 1, negative λ */
    flash_fd_case(1, 11, 3, 3, 4, 1.2, 0.7597, 34);   /* λ > 1 */
}

/* Query tiles smaller than key tiles (the default has them larger). */
TEST(kernel_flash_fd_other_tiles) {
    dtx_flash_set_tiles(3, 5);
    flash_fd_case(1, 17, 2, 1, 4, 0.6, 0.3, 41);
    flash_fd_case(0, 17, 2, 1, 4, 0, 0, 42);
    dtx_flash_set_tiles(0, 0);
}

/* Flash and plain in double agree to rounding, forward and backward. */
TEST(kernel_flash_fd_matches_plain) {
    for (int variant = 0; variant < 4; variant++) { /* diff, subln: each default, then the other */
        int diff = variant % 2, subln = variant < 2 ? diff : !diff, sl = subln;
        fa_ctx f = fa_make(50 + (uint64_t)variant, DTX_ATTN_FLASH, diff, subln, 2, 37, 4, 2, 8, 0.7, 0.5);
        fa_ctx p = fa_make(50 + (uint64_t)variant, DTX_ATTN_PLAIN, diff, subln, 2, 37, 4, 2, 8, 0.7, 0.5);
        size_t n[5] = {f.nq, f.nk, f.nv, sl ? (size_t)((diff ? 2 : 1) * 8) : 1, 1};
        real *gf[5], *gp[5];
        for (int i = 0; i < 5; i++) gf[i] = alloc_r(n[i]), gp[i] = alloc_r(n[i]);
        fa_backward(&f, gf);
        fa_backward(&p, gp);
        double e = rel_err(f.out, p.out, f.no, 1, 1e-300);
        CHECKF(e < 1e-13, "diff %d subln %d forward rel err %.3g", diff, sl, e);
        for (int i = 0; i < 3 + sl + diff; i++) {
            e = rel_err(gf[i], gp[i], n[i], 1, 1e-300);
            CHECKF(e < PLAIN_TOL, "diff %d subln %d grad %d rel err %.3g", diff, sl, i, e);
            if (verbose()) printf("    flash vs plain diff %d subln %d grad %d rel err %.2e\n", diff, sl, i, e);
        }
        for (int i = 0; i < 5; i++) free(gf[i]), free(gp[i]);
        fa_free(&f), fa_free(&p);
    }
}
