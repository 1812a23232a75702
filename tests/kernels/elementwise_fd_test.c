/* Elementwise kernels in double precision, beyond tests/kernels/kernels_fd_test.c:
 * the in-place cross-entropy backward against finite differences of the
 * loss; the blocked, parallel RMSNorm backward against the textbook loops at
 * a size that crosses its row and column blocks; SwiGLU's backward by finite
 * differences across the whole range of a (the 1 − σ(a) rewrite for a > 0).
 * DTX_FD_VERBOSE=1 prints the measured errors. */
#ifndef DTX_DOUBLE
#error "elementwise_fd_test.c is linked into the double-precision runner (-DDTX_DOUBLE)"
#endif

#include "../test.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define FD_H 1e-4 /* with the fourth-order stencil below */
#define FD_TOL 1e-6

static int verbose(void) {
    const char *v = getenv("DTX_FD_VERBOSE");
    return v && *v && *v != '0';
}

/* dL/dx at *x by (−L(x+2h) + 8L(x+h) − 8L(x−h) + L(x−2h)) / 12h. */
static double central_diff(double (*loss)(void *), void *ctx, real *x) {
    real x0 = *x;
    double l[4], off[4] = {2, 1, -1, -2};
    for (int j = 0; j < 4; j++) {
        *x = x0 + off[j] * FD_H;
        l[j] = loss(ctx);
    }
    *x = x0;
    return (8 * (l[1] - l[2]) - (l[0] - l[3])) / (12 * FD_H);
}

/* max_i |g_i − fd_i| / max(|g_i| + |fd_i|, 1e-8·max|g|) over all n inputs. */
static double fd_error(double (*loss)(void *), void *ctx, real *x, const real *g, size_t n) {
    double gmax = 0, worst = 0;
    for (size_t i = 0; i < n; i++) gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
    for (size_t i = 0; i < n; i++) {
        double num = central_diff(loss, ctx, x + i), den = fabs(g[i]) + fabs(num);
        den = den > 1e-8 * gmax ? den : 1e-8 * gmax + 1e-300;
        double e = fabs(g[i] - num) / den;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* ------------------------------------------ in-place cross-entropy backward */

typedef struct {
    int64_t N, V;
    const int32_t *tgt;
    real *logits, *probs;
} ce_ctx;

static double ce_loss(void *c) {
    ce_ctx *m = c;
    return dtx_crossentropy_forward(m->probs, m->logits, m->tgt, m->N, m->V);
}

TEST(kernel_ew_crossentropy_inplace_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 801);
    static const int32_t tgt[6] = {3, 0, 6, 3, 1, 10};
    int64_t N = 6, V = 11; /* small probabilities would drown in the FD noise of the loss */
    size_t n = (size_t)(N * V);
    ce_ctx m = {N, V, tgt, randn(&r, n, 0, 1), calloc(n, sizeof(real))};
    ce_loss(&m);
    /* The mean loss: scale = 1/N. probs turn into the gradient. */
    real *g = malloc(n * sizeof(real)), *acc = calloc(n, sizeof(real));
    memcpy(g, m.probs, n * sizeof(real));
    dtx_crossentropy_backward_inplace(g, tgt, N, V, 1.0 / (double)N);
    dtx_crossentropy_backward(acc, m.probs, tgt, N, V, 1.0 / (double)N);
    CHECK(memcmp(g, acc, n * sizeof(real)) == 0); /* = the accumulating form from zero */
    double e = fd_error(ce_loss, &m, m.logits, g, n);
    if (verbose()) printf("    crossentropy in place   dlogits n=%-5zu fd err elem %.2e\n", n, e);
    CHECKF(e < FD_TOL, "in-place crossentropy backward: FD error %.3g", e);
    /* Each row of the gradient sums to 0 (times the scale) and the loss scale
     * multiplies through. */
    for (int64_t i = 0; i < N; i++) {
        double s = 0;
        for (int64_t j = 0; j < V; j++) s += g[i * V + j];
        CHECK(fabs(s) < 1e-15);
    }
    ce_loss(&m); /* the FD left probs at a perturbed point */
    memcpy(acc, m.probs, n * sizeof(real));
    dtx_crossentropy_backward_inplace(acc, tgt, N, V, 512.0 / (double)N);
    for (size_t i = 0; i < n; i++) CHECK(acc[i] == g[i] * 512.0);
    free(g), free(acc), free(m.logits), free(m.probs);
}

/* ------------------------------- RMSNorm backward: blocks, threads, naive */

/* At M·C above the parallel threshold, with several row blocks and a partial
 * column block, dx and dw equal the plain double loops, and 1, 2, 3 threads
 * give the same bits. */
TEST(kernel_ew_rmsnorm_blocked_matches_naive) {
    dtx_rng r;
    dtx_rng_seed(&r, 802);
    int64_t M = 1100, C = 130;
    size_t n = (size_t)(M * C);
    real *x = randn(&r, n, 0.3, 1), *w = randn(&r, (size_t)C, 1, 0.3), *g = randn(&r, n, 0, 1);
    real *out = calloc(n, sizeof(real)), *rstd = calloc((size_t)M, sizeof(real));
    dtx_rmsnorm_forward(out, rstd, x, w, M, C, 1e-5);
    real *pre = randn(&r, n, 0, 1), *prew = randn(&r, (size_t)C, 0, 1);
    real *rdx = malloc(n * sizeof(real)), *rdw = malloc((size_t)C * sizeof(real));
    memcpy(rdx, pre, n * sizeof(real));
    memcpy(rdw, prew, (size_t)C * sizeof(real));
    double *dwsum = calloc((size_t)C, sizeof(double));
    for (int64_t i = 0; i < M; i++) {
        double rs = rstd[i], mm = 0;
        for (int64_t c = 0; c < C; c++) mm += g[i * C + c] * w[c] * x[i * C + c] * rs;
        mm /= C;
        for (int64_t c = 0; c < C; c++) {
            rdx[i * C + c] += rs * (g[i * C + c] * w[c] - x[i * C + c] * rs * mm);
            dwsum[c] += g[i * C + c] * x[i * C + c] * rs;
        }
    }
    for (int64_t c = 0; c < C; c++) rdw[c] += dwsum[c];
    int saved = omp_get_max_threads();
    real *dx[3], *dw[3];
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        dx[t] = malloc(n * sizeof(real)), dw[t] = malloc((size_t)C * sizeof(real));
        memcpy(dx[t], pre, n * sizeof(real));
        memcpy(dw[t], prew, (size_t)C * sizeof(real));
        dtx_rmsnorm_backward(dx[t], dw[t], g, x, w, rstd, M, C);
    }
    omp_set_num_threads(saved);
    double ex = rel_err(dx[0], rdx, n, 1, 1e-30), ew = rel_err(dw[0], rdw, (size_t)C, 1, 1e-30);
    if (verbose()) printf("    rmsnorm blocked %lldx%lld  dx err %.2e dw err %.2e\n", (long long)M, (long long)C, ex, ew);
    CHECKF(ex < 1e-13 && ew < 1e-13, "rmsnorm blocked backward: dx %.3g, dw %.3g", ex, ew);
    for (int t = 1; t < 3; t++)
        CHECK(memcmp(dx[0], dx[t], n * sizeof(real)) == 0 && memcmp(dw[0], dw[t], (size_t)C * sizeof(real)) == 0);
    for (int t = 0; t < 3; t++) free(dx[t]), free(dw[t]);
    free(x), free(w), free(g), free(out), free(rstd), free(pre), free(prew), free(rdx), free(rdw), free(dwsum);
}

/* ------------------------------------------- SwiGLU over the range of a */

typedef struct {
    int64_t n;
    real *a, *b, *out, *R, *out0;
} sw_ctx;

/* Σ (out − out0) ⊙ R with out0 the unperturbed output: the same derivative
 * as Σ out ⊙ R, but a tiny change (silu(−30) ≈ −3e-12) is not lost in the
 * rounding of a loss of size ~100. */
static double sw_loss(void *c) {
    sw_ctx *m = c;
    dtx_swiglu_forward(m->out, m->a, m->b, m->n);
    long double s = 0;
    for (int64_t i = 0; i < m->n; i++) s += ((long double)m->out[i] - m->out0[i]) * m->R[i];
    return (double)s;
}

TEST(kernel_ew_swiglu_range_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 803);
    int64_t n = 81; /* a = −30, −29.25, …, 30 */
    sw_ctx m = {n, calloc((size_t)n, sizeof(real)), randn(&r, (size_t)n, 0, 1), calloc((size_t)n, sizeof(real)),
                randn(&r, (size_t)n, 0, 1), calloc((size_t)n, sizeof(real))};
    for (int64_t i = 0; i < n; i++) m.a[i] = -30 + 0.75 * (double)i;
    dtx_swiglu_forward(m.out0, m.a, m.b, n);
    real *da = calloc((size_t)n, sizeof(real)), *db = calloc((size_t)n, sizeof(real));
    dtx_swiglu_backward(da, db, m.R, m.a, m.b, n);
    double ea = fd_error(sw_loss, &m, m.a, da, (size_t)n), eb = fd_error(sw_loss, &m, m.b, db, (size_t)n);
    if (verbose()) printf("    swiglu a in [-30, 30]   da fd err %.2e  db fd err %.2e\n", ea, eb);
    CHECKF(ea < FD_TOL && eb < FD_TOL, "swiglu backward over a in [-30, 30]: FD da %.3g, db %.3g", ea, eb);
    /* silu'(a) itself against its closed form, to double precision. */
    for (int64_t i = 0; i < n; i++) {
        double x = m.a[i], s = 1 / (1 + exp(-x)), want = m.R[i] * m.b[i] * s * (1 + x * (1 - s));
        CHECK(fabs(da[i] - want) <= 1e-14 * (fabs(want) + fabs(m.R[i] * m.b[i])));
    }
    free(m.a), free(m.b), free(m.out), free(m.R), free(m.out0), free(da), free(db);
}

/* ------------------------------------------ DIFF V2's pair combination */

typedef struct {
    int64_t N, h, d;
    real *A, *l, *R, *out;
    dtx_v2_lambda mode;
} d2_ctx;

/* L = Σ R ⊙ combine(A, l). */
static double d2_loss(void *p) {
    d2_ctx *m = p;
    size_t n = (size_t)(m->N * m->h * m->d);
    dtx_diff2_combine_forward(m->out, m->A, m->l, m->N, m->h, m->d, m->mode);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)m->R[i] * m->out[i];
    return s;
}

TEST(kernel_ew_diff2_combine_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 804);
    d2_ctx m = {5, 3, 4, NULL, NULL, NULL, NULL, DTX_V2_LAMBDA_SIGMOID};
    size_t na = (size_t)(m.N * 2 * m.h * m.d), no = (size_t)(m.N * m.h * m.d), nl = (size_t)(m.N * m.h);
    m.A = randn(&r, na, 0, 1), m.l = randn(&r, nl, 0, 2), m.R = randn(&r, no, 0, 1);
    m.out = calloc(no, sizeof(real));
    real *dA = calloc(na, sizeof(real)), *dl = calloc(nl, sizeof(real));
    for (int mode = DTX_V2_LAMBDA_SIGMOID; mode <= DTX_V2_LAMBDA_NONE; mode++) {
        m.mode = (dtx_v2_lambda)mode;
        dtx_diff2_combine_backward(dA, dl, m.R, m.A, m.l, m.N, m.h, m.d, m.mode);
        double eA = fd_error(d2_loss, &m, m.A, dA, na);
        double el = mode == DTX_V2_LAMBDA_NONE ? 0 : fd_error(d2_loss, &m, m.l, dl, nl);
        if (verbose()) printf("    diff2 combine (%d)  dA fd err %.2e  dlambda fd err %.2e\n", mode, eA, el);
        CHECKF(eA < FD_TOL && el < FD_TOL, "diff2 combine backward (mode %d): FD dA %.3g, dlambda %.3g", mode, eA,
               el);
    }
    free(m.A), free(m.l), free(m.R), free(m.out), free(dA), free(dl);
}
