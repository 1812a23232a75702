/* Kernel tests in double precision: every backward against central finite
 * differences of L = Σ out ⊙ R (R random), that backwards accumulate, and
 * forward semantics of attention checked without the backward (causality,
 * an independent naive computation, uniform A2 for q2 = 0, GQA mapping).
 * Set DTX_FD_VERBOSE=1 to print the measured errors. */
#ifndef DTX_DOUBLE
#error "kernels_fd_test.c is linked into the double-precision runner (-DDTX_DOUBLE)"
#endif

#include "../test.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define FD_H 1e-4 /* with the fourth-order stencil below */
#define FD_TOL 1e-6
#define FD_MAX_ALL 2000 /* inputs up to this size are checked on every element */
#define FD_SAMPLE 200

/* ------------------------------------------------------------- helpers */

/* Σ a ⊙ b in long double: outputs that a perturbation leaves unchanged then
 * cancel almost exactly in L(x+h) − L(x−h), which keeps the FD noise low. */
static double dot_all(const real *a, const real *b, size_t n) {
    long double s = 0;
    for (size_t i = 0; i < n; i++) s += (long double)a[i] * b[i];
    return (double)s;
}

static double max_abs(const real *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

static double max_diff(const real *a, const real *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts */
    }
    return m;
}

static int verbose(void) {
    const char *v = getenv("DTX_FD_VERBOSE");
    return v && *v && *v != '0';
}

/* ------------------------------------------------- the generic FD driver */

/* A differentiable problem: loss() runs the forward at the current inputs
 * and returns Σ out ⊙ R; backward() runs the forward and then the kernel's
 * backward, adding dL/d(input i) into g[i]. */
typedef struct {
    const char *name;
    real *x;
    size_t n;
} fd_input;

typedef struct {
    const char *name;
    double (*loss)(void *ctx);
    void (*backward)(void *ctx, real *const *g);
    void *ctx;
    int n_in;
    fd_input in[6];
} fd_problem;

/* dL/dx by the fourth-order central difference
 * (−L(x+2h) + 8L(x+h) − 8L(x−h) + L(x−2h)) / 12h: truncation O(h⁴), so
 * h can be large enough that rounding in L stays far below the tolerance. */
static double central_diff(const fd_problem *p, real *x) {
    real x0 = *x;
    double l[4], off[4] = {2, 1, -1, -2};
    for (int j = 0; j < 4; j++) {
        *x = x0 + off[j] * FD_H;
        l[j] = p->loss(p->ctx);
    }
    *x = x0;
    return (8 * (l[1] - l[2]) - (l[0] - l[3])) / (12 * FD_H);
}

/* Max over checked elements of |a − n| / max(floor, |a| + |n|), floor =
 * 1e-8 · max|a|; also the normwise ‖a − n‖ / ‖n‖ over the same elements. */
static void fd_compare(const fd_problem *p, const fd_input *in, const real *grad, dtx_rng *rng,
                       double *elem_err, double *norm_err) {
    double floor = 1e-8 * max_abs(grad, in->n) + 1e-300;
    size_t m = in->n <= FD_MAX_ALL ? in->n : FD_SAMPLE;
    double worst = 0, dd = 0, nn = 0;
    for (size_t c = 0; c < m; c++) {
        size_t i = in->n <= FD_MAX_ALL ? c : (size_t)(dtx_rng_next(rng) % in->n);
        double num = central_diff(p, in->x + i), a = grad[i];
        double den = fabs(a) + fabs(num) > floor ? fabs(a) + fabs(num) : floor;
        double e = fabs(a - num) / den;
        if (!(e <= worst)) worst = e;
        dd += (a - num) * (a - num);
        nn += num * num;
    }
    *elem_err = worst;
    *norm_err = nn > 0 ? sqrt(dd / nn) : sqrt(dd);
}

/* Analytic gradients from zeroed buffers; the same backward on pre-filled
 * buffers must add exactly those; then finite differences on every input. */
static void fd_run(const fd_problem *p, uint64_t seed) {
    dtx_rng rng;
    dtx_rng_seed(&rng, seed);
    real *g[6], *acc[6], *pre[6];
    for (int i = 0; i < p->n_in; i++) {
        g[i] = alloc_r(p->in[i].n);
        pre[i] = randn(&rng, p->in[i].n, 0, 1);
        acc[i] = dup_r(pre[i], p->in[i].n);
    }
    p->backward(p->ctx, g);
    p->backward(p->ctx, acc);
    for (int i = 0; i < p->n_in; i++) {
        size_t n = p->in[i].n;
        double worst = 0, scale = max_abs(g[i], n) + max_abs(pre[i], n);
        for (size_t j = 0; j < n; j++) {
            double e = fabs((acc[i][j] - pre[i][j]) - g[i][j]);
            worst = e > worst ? e : worst;
        }
        CHECKF(worst <= 1e-13 * scale, "%s: d%s does not accumulate (err %.3g)", p->name,
               p->in[i].name, worst);
        CHECKF(max_abs(g[i], n) > 0, "%s: d%s is all zero", p->name, p->in[i].name);
    }
    for (int i = 0; i < p->n_in; i++) {
        double ee, ne;
        fd_compare(p, &p->in[i], g[i], &rng, &ee, &ne);
        CHECKF(ee < FD_TOL && ne < FD_TOL, "%s: d%s FD error elementwise %.3g, normwise %.3g",
               p->name, p->in[i].name, ee, ne);
        if (verbose())
            printf("    %-28s d%-8s n=%-5zu fd err elem %.2e norm %.2e\n", p->name, p->in[i].name,
                   p->in[i].n, ee, ne);
    }
    for (int i = 0; i < p->n_in; i++) free(g[i]), free(acc[i]), free(pre[i]);
}

/* ---------------------------------------------------------------- matmul */

typedef struct {
    int64_t M, K, N;
    real *x, *w, *out, *R;
} mm_ctx;

static double mm_loss(void *c) {
    mm_ctx *m = c;
    dtx_matmul_forward(m->out, m->x, m->w, m->M, m->K, m->N, DTX_PREC_FP32);
    return dot_all(m->out, m->R, (size_t)(m->M * m->N));
}

static void mm_backward(void *c, real *const *g) {
    mm_ctx *m = c;
    dtx_matmul_backward(g[0], g[1], m->R, m->x, m->w, m->M, m->K, m->N, DTX_PREC_FP32);
}

static mm_ctx mm_make(dtx_rng *r, int64_t M, int64_t K, int64_t N) {
    mm_ctx m = {M, K, N, randn(r, (size_t)(M * K), 0, 1), randn(r, (size_t)(N * K), 0, 1),
                alloc_r((size_t)(M * N)), randn(r, (size_t)(M * N), 0, 1)};
    return m;
}

static void mm_free(mm_ctx *m) { free(m->x), free(m->w), free(m->out), free(m->R); }

TEST(kernel_matmul_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 1);
    mm_ctx m = mm_make(&r, 5, 7, 6);
    fd_problem p = {"matmul", mm_loss, mm_backward, &m, 2,
                    {{"x", m.x, 35}, {"w", m.w, 42}}};
    fd_run(&p, 11);
    /* Optional outputs: NULL skips one side and leaves the other unchanged. */
    real *dx = alloc_r(35), *dw = alloc_r(42), *dx2 = alloc_r(35), *dw2 = alloc_r(42);
    dtx_matmul_backward(dx, dw, m.R, m.x, m.w, 5, 7, 6, DTX_PREC_FP32);
    dtx_matmul_backward(dx2, NULL, m.R, m.x, m.w, 5, 7, 6, DTX_PREC_FP32);
    dtx_matmul_backward(NULL, dw2, m.R, m.x, m.w, 5, 7, 6, DTX_PREC_FP32);
    CHECK(max_diff(dx, dx2, 35) == 0 && max_diff(dw, dw2, 42) == 0);
    free(dx), free(dw), free(dx2), free(dw2);
    mm_free(&m);
}

/* Shapes that cross the kernel's tile edges, against the textbook loops. */
TEST(kernel_matmul_tiles_match_naive) {
    dtx_rng r;
    dtx_rng_seed(&r, 2);
    int64_t M = 70, K = 300, N = 130;
    mm_ctx m = mm_make(&r, M, K, N);
    real *ref = alloc_r((size_t)(M * N)), *dx = alloc_r((size_t)(M * K)), *dw = alloc_r((size_t)(N * K));
    real *rdx = alloc_r((size_t)(M * K)), *rdw = alloc_r((size_t)(N * K));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                s += m.x[i * K + k] * m.w[j * K + k];
                rdx[i * K + k] += m.R[i * N + j] * m.w[j * K + k];
                rdw[j * K + k] += m.R[i * N + j] * m.x[i * K + k];
            }
            ref[i * N + j] = s;
        }
    dtx_matmul_forward(m.out, m.x, m.w, M, K, N, DTX_PREC_FP32);
    dtx_matmul_backward(dx, dw, m.R, m.x, m.w, M, K, N, DTX_PREC_FP32);
    CHECK(rel_err(m.out, ref, (size_t)(M * N), 1, 1e-30) < 1e-13);
    CHECK(rel_err(dx, rdx, (size_t)(M * K), 1, 1e-30) < 1e-13);
    CHECK(rel_err(dw, rdw, (size_t)(N * K), 1, 1e-30) < 1e-13);
    free(ref), free(dx), free(dw), free(rdx), free(rdw);
    mm_free(&m);
}

/* --------------------------------------------------------------- rmsnorm */

typedef struct {
    int64_t M, C;
    double eps;
    real *x, *w, *out, *rstd, *R;
} rn_ctx;

static double rn_loss(void *c) {
    rn_ctx *m = c;
    dtx_rmsnorm_forward(m->out, m->rstd, m->x, m->w, m->M, m->C, m->eps);
    return dot_all(m->out, m->R, (size_t)(m->M * m->C));
}

static void rn_backward(void *c, real *const *g) {
    rn_ctx *m = c;
    rn_loss(m);
    dtx_rmsnorm_backward(g[0], g[1], m->R, m->x, m->w, m->rstd, m->M, m->C);
}

TEST(kernel_rmsnorm_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 3);
    int64_t M = 4, C = 70; /* C crosses the dw column block */
    size_t n = (size_t)(M * C);
    rn_ctx m = {M, C, 1e-5, randn(&r, n, 0.3, 1), randn(&r, (size_t)C, 1, 0.3), alloc_r(n),
                alloc_r((size_t)M), randn(&r, n, 0, 1)};
    fd_problem p = {"rmsnorm", rn_loss, rn_backward, &m, 2, {{"x", m.x, n}, {"w", m.w, (size_t)C}}};
    fd_run(&p, 12);
    rn_loss(&m);
    for (int64_t i = 0; i < M; i++) {
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += m.x[i * C + c] * m.x[i * C + c];
        double rs = 1 / sqrt(ss / C + m.eps);
        CHECK(fabs(m.rstd[i] - rs) < 1e-14 * rs);
        CHECK(fabs(m.out[i * C + 5] - m.x[i * C + 5] * rs * m.w[5]) < 1e-14);
    }
    /* dw optional */
    real *dx = alloc_r(n), *dx2 = alloc_r(n), *dw = alloc_r((size_t)C);
    dtx_rmsnorm_backward(dx, dw, m.R, m.x, m.w, m.rstd, M, C);
    dtx_rmsnorm_backward(dx2, NULL, m.R, m.x, m.w, m.rstd, M, C);
    CHECK(max_diff(dx, dx2, n) == 0);
    free(dx), free(dx2), free(dw);
    free(m.x), free(m.w), free(m.out), free(m.rstd), free(m.R);
}

/* ------------------------------------------------------------------ rope */

typedef struct {
    int64_t B, T, pos0, n_sub, d;
    real *cos_t, *sin_t, *x, *work, *R;
} rope_ctx;

static double rope_loss(void *c) {
    rope_ctx *m = c;
    size_t n = (size_t)(m->B * m->T * m->n_sub * m->d);
    memcpy(m->work, m->x, n * sizeof(real));
    dtx_rope_forward(m->work, m->cos_t, m->sin_t, m->B, m->T, m->pos0, m->n_sub, m->d);
    return dot_all(m->work, m->R, n);
}

/* The kernel rotates a gradient in place; adding it makes the accumulating form. */
static void rope_backward_acc(void *c, real *const *g) {
    rope_ctx *m = c;
    size_t n = (size_t)(m->B * m->T * m->n_sub * m->d);
    memcpy(m->work, m->R, n * sizeof(real));
    dtx_rope_backward(m->work, m->cos_t, m->sin_t, m->B, m->T, m->pos0, m->n_sub, m->d);
    for (size_t i = 0; i < n; i++) g[0][i] += m->work[i];
}

TEST(kernel_rope) {
    dtx_rng r;
    dtx_rng_seed(&r, 4);
    int64_t B = 2, T = 5, pos0 = 3, n_sub = 3, d = 8, max_pos = 8;
    size_t n = (size_t)(B * T * n_sub * d);
    double theta = 10000;
    rope_ctx m = {B, T, pos0, n_sub, d, alloc_r((size_t)(max_pos * d / 2)), alloc_r((size_t)(max_pos * d / 2)),
                  randn(&r, n, 0, 1), alloc_r(n), randn(&r, n, 0, 1)};
    test_rope_table(m.cos_t, m.sin_t, max_pos, d, theta);
    for (int64_t p = 0; p < max_pos; p++)
        for (int64_t i = 0; i < d / 2; i++) {
            double ang = p * pow(theta, -2.0 * i / d);
            CHECK(fabs(m.cos_t[p * d / 2 + i] - cos(ang)) < 1e-15);
            CHECK(fabs(m.sin_t[p * d / 2 + i] - sin(ang)) < 1e-15);
        }
    /* Explicit formula for one pair: token t = 2 (position 5), sub-head 1, i = 1. */
    real *y = dup_r(m.x, n);
    dtx_rope_forward(y, m.cos_t, m.sin_t, B, T, pos0, n_sub, d);
    {
        int64_t b = 1, t = 2, j = 1, i = 1, base = (b * T + t) * n_sub * d + j * d;
        double ang = (pos0 + t) * pow(theta, -2.0 * i / d), x0 = m.x[base + 2 * i], x1 = m.x[base + 2 * i + 1];
        CHECK(fabs(y[base + 2 * i] - (x0 * cos(ang) - x1 * sin(ang))) < 1e-14);
        CHECK(fabs(y[base + 2 * i + 1] - (x1 * cos(ang) + x0 * sin(ang))) < 1e-14);
        /* position 0 is the identity */
        CHECK(m.cos_t[0] == 1 && m.sin_t[0] == 0);
    }
    /* Orthogonal: norms kept, and backward ∘ forward = identity. */
    CHECK(fabs(dot_all(y, y, n) - dot_all(m.x, m.x, n)) < 1e-12 * dot_all(m.x, m.x, n));
    dtx_rope_backward(y, m.cos_t, m.sin_t, B, T, pos0, n_sub, d);
    CHECK(max_diff(y, m.x, n) < 1e-14);
    fd_problem p = {"rope", rope_loss, rope_backward_acc, &m, 1, {{"x", m.x, n}}};
    fd_run(&p, 13);
    free(y), free(m.cos_t), free(m.sin_t), free(m.x), free(m.work), free(m.R);
}

/* ---------------------------------------------------- swiglu and residual */

typedef struct {
    int64_t n;
    real *a, *b, *out, *R;
} sw_ctx;

static double sw_loss(void *c) {
    sw_ctx *m = c;
    dtx_swiglu_forward(m->out, m->a, m->b, m->n);
    return dot_all(m->out, m->R, (size_t)m->n);
}

static void sw_backward(void *c, real *const *g) {
    sw_ctx *m = c;
    dtx_swiglu_backward(g[0], g[1], m->R, m->a, m->b, m->n);
}

TEST(kernel_swiglu_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 5);
    int64_t n = 41;
    sw_ctx m = {n, randn(&r, (size_t)n, 0, 3), randn(&r, (size_t)n, 0, 1), alloc_r((size_t)n),
                randn(&r, (size_t)n, 0, 1)};
    m.a[0] = -40, m.a[1] = 40, m.a[2] = 0; /* saturated ends stay finite */
    fd_problem p = {"swiglu", sw_loss, sw_backward, &m, 2, {{"a", m.a, (size_t)n}, {"b", m.b, (size_t)n}}};
    fd_run(&p, 14);
    sw_loss(&m);
    CHECK(fabs(m.out[1] - 40 * m.b[1]) < 1e-12 && fabs(m.out[0]) < 1e-15 && m.out[2] == 0);
    CHECK(fabs(m.out[5] - m.a[5] / (1 + exp(-m.a[5])) * m.b[5]) < 1e-14);
    free(m.a), free(m.b), free(m.out), free(m.R);
}

TEST(kernel_residual) {
    real a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, out[5];
    dtx_residual_forward(out, a, b, 5);
    CHECK(out[0] == 11 && out[4] == 55);
    dtx_residual_forward(a, a, b, 5); /* aliasing */
    CHECK(a[0] == 11 && a[4] == 55);
    dtx_residual_forward(b, a, b, 5);
    CHECK(b[0] == 21 && b[4] == 105);
}

/* ------------------------------------------------------------- embedding */

typedef struct {
    int64_t n, C;
    const int32_t *tok;
    real *table, *out, *R;
} emb_ctx;

static double emb_loss(void *c) {
    emb_ctx *m = c;
    dtx_embedding_forward(m->out, m->tok, m->table, m->n, m->C);
    return dot_all(m->out, m->R, (size_t)(m->n * m->C));
}

static void emb_backward(void *c, real *const *g) {
    emb_ctx *m = c;
    dtx_embedding_backward(g[0], m->R, m->tok, m->n, m->C);
}

TEST(kernel_embedding_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 6);
    static const int32_t tok[10] = {0, 2, 2, 5, 0, 3, 2, 5, 5, 1};
    int64_t V = 7, C = 70, n = 10; /* id 4 and 6 unused: their gradient rows stay 0 */
    emb_ctx m = {n, C, tok, randn(&r, (size_t)(V * C), 0, 1), alloc_r((size_t)(n * C)),
                 randn(&r, (size_t)(n * C), 0, 1)};
    emb_loss(&m);
    CHECK(m.out[3 * C + 7] == m.table[5 * C + 7]);
    fd_problem p = {"embedding", emb_loss, emb_backward, &m, 1, {{"table", m.table, (size_t)(V * C)}}};
    fd_run(&p, 15);
    real *g = alloc_r((size_t)(V * C));
    dtx_embedding_backward(g, m.R, tok, n, C);
    CHECK(g[4 * C + 3] == 0 && g[6 * C + 69] == 0);
    double s = m.R[3 * C + 9] + m.R[7 * C + 9] + m.R[8 * C + 9];
    CHECK(fabs(g[5 * C + 9] - s) < 1e-15);
    free(g), free(m.table), free(m.out), free(m.R);
}

/* --------------------------------------------------------- cross-entropy */

typedef struct {
    int64_t N, V;
    const int32_t *tgt;
    real *logits, *probs;
} ce_ctx;

static double ce_loss(void *c) {
    ce_ctx *m = c;
    return dtx_crossentropy_forward(m->probs, m->logits, m->tgt, m->N, m->V);
}

static void ce_backward(void *c, real *const *g) {
    ce_ctx *m = c;
    ce_loss(m);
    dtx_crossentropy_backward(g[0], m->probs, m->tgt, m->N, m->V, 1.0 / (double)dtx_crossentropy_count(m->tgt, m->N));
}

TEST(kernel_crossentropy_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 7);
    static const int32_t tgt[5] = {3, 0, 6, 3, 1};
    int64_t N = 5, V = 7;
    size_t n = (size_t)(N * V);
    ce_ctx m = {N, V, tgt, randn(&r, n, 0, 2), alloc_r(n)};
    fd_problem p = {"crossentropy", ce_loss, ce_backward, &m, 1, {{"logits", m.logits, n}}};
    fd_run(&p, 16);
    /* The loss, term by term, and the probabilities. */
    double got = ce_loss(&m), want = 0;
    for (int64_t i = 0; i < N; i++) {
        double z = 0;
        for (int64_t j = 0; j < V; j++) z += exp(m.logits[i * V + j]);
        want += log(z) - m.logits[i * V + tgt[i]];
        CHECK(fabs(m.probs[i * V + 2] - exp(m.logits[i * V + 2]) / z) < 1e-14);
    }
    CHECK(fabs(got - want / N) < 1e-14);
    /* probs may alias logits */
    real *alias = dup_r(m.logits, n);
    double l2 = dtx_crossentropy_forward(alias, alias, tgt, N, V);
    CHECK(l2 == got && max_diff(alias, m.probs, n) == 0);
    free(alias), free(m.logits), free(m.probs);
}

/* Ignored targets (DTX_TARGET_IGNORE): the loss is the mean over the others,
 * its gradient (finite differences) zero on the ignored rows, and the
 * in-place backward zeroes them. */
TEST(kernel_crossentropy_ignored_targets_fd) {
    dtx_rng r;
    dtx_rng_seed(&r, 8);
    static const int32_t tgt[6] = {3, DTX_TARGET_IGNORE, 6, DTX_TARGET_IGNORE, 1, 0};
    int64_t N = 6, V = 7;
    size_t n = (size_t)(N * V);
    CHECK(dtx_crossentropy_count(tgt, N) == 4);
    ce_ctx m = {N, V, tgt, randn(&r, n, 0, 2), alloc_r(n)};
    fd_problem p = {"crossentropy ignored", ce_loss, ce_backward, &m, 1, {{"logits", m.logits, n}}};
    fd_run(&p, 16);
    double got = ce_loss(&m), want = 0;
    for (int64_t i = 0; i < N; i++) {
        double z = 0;
        for (int64_t j = 0; j < V; j++) z += exp(m.logits[i * V + j]);
        if (tgt[i] >= 0) want += log(z) - m.logits[i * V + tgt[i]];
        CHECK(fabs(m.probs[i * V + 4] - exp(m.logits[i * V + 4]) / z) < 1e-14); /* every row's softmax */
    }
    CHECK(fabs(got - want / 4) < 1e-14);
    real *d = alloc_r(n), *inp = dup_r(m.probs, n);
    for (size_t i = 0; i < n; i++) d[i] = 7;
    dtx_crossentropy_backward(d, m.probs, tgt, N, V, 0.25);
    dtx_crossentropy_backward_inplace(inp, tgt, N, V, 0.25);
    for (int64_t j = 0; j < V; j++) {
        CHECK(d[1 * V + j] == 7 && d[3 * V + j] == 7); /* nothing added */
        CHECK(inp[1 * V + j] == 0 && inp[3 * V + j] == 0 && fabs(inp[0 * V + j] - (d[0 * V + j] - 7)) < 1e-12);
    }
    static const int32_t none[2] = {DTX_TARGET_IGNORE, DTX_TARGET_IGNORE};
    CHECK(dtx_crossentropy_forward(m.probs, m.logits, none, 2, V) == 0);
    free(d), free(inp), free(m.logits), free(m.probs);
}

TEST(kernel_crossentropy_values) {
    int64_t N = 3, V = 50;
    static const int32_t tgt[3] = {0, 17, 49};
    real *z = alloc_r((size_t)(N * V)), *p = alloc_r((size_t)(N * V));
    CHECK(fabs(dtx_crossentropy_forward(p, z, tgt, N, V) - log((double)V)) < 1e-14);
    CHECK(fabs(p[17] - 1.0 / V) < 1e-16);
    /* Huge logits: the max is subtracted, so nothing overflows. */
    for (int64_t i = 0; i < N * V; i++) z[i] = 1000.0 + (double)(i % 7);
    double l = dtx_crossentropy_forward(p, z, tgt, N, V);
    CHECK(isfinite(l) && l > 0);
    for (int64_t i = 0; i < N * V; i++) CHECK(isfinite(p[i]));
    /* backward with a loss scale */
    real *d = alloc_r((size_t)(N * V));
    dtx_crossentropy_backward(d, p, tgt, N, V, 0.5);
    CHECK(fabs(d[1 * V + 17] - (p[1 * V + 17] - 1) * 0.5) < 1e-16 && fabs(d[3] - p[3] * 0.5) < 1e-16);
    free(z), free(p), free(d);
}

/* ------------------------------------------------------------- attention */

typedef struct {
    dtx_attn_dims a;
    size_t nq, nk, nv, no;
    real *q, *k, *v, *gamma, *out, *R;
    dtx_attn_saved s;
} at_ctx;

/* subln: the per-head norm (DIFF's default 1, the Transformer's 0). */
static at_ctx at_make(dtx_rng *r, int diff, int subln, int64_t B, int64_t T, int64_t H, int64_t G, int64_t d,
                      double lambda, double lambda_init) {
    at_ctx m;
    memset(&m, 0, sizeof m);
    m.a = (dtx_attn_dims){.run.impl = DTX_ATTN_PLAIN, .geom.B = B, .geom.T = T, .geom.n_heads = H, .geom.n_kv_heads = G, .geom.head_dim = d,
                          .arch.diff = diff, .arch.subln = subln, .arch.lambda = lambda, .arch.lambda_init = lambda_init, .arch.eps = 1e-5};
    int64_t sub = diff ? 2 : 1;
    m.nq = (size_t)(B * T * sub * H * d);
    m.nk = (size_t)(B * T * sub * G * d);
    m.nv = (size_t)(B * T * G * sub * d);
    m.no = (size_t)(B * T * H * sub * d);
    m.q = randn(r, m.nq, 0, 1);
    m.k = randn(r, m.nk, 0, 1);
    m.v = randn(r, m.nv, 0, 1);
    m.gamma = randn(r, (size_t)(2 * d), 1, 0.3);
    m.out = alloc_r(m.no);
    m.R = randn(r, m.no, 0, 1);
    m.s.att = alloc_r(dtx_attention_att_size(&m.a));
    m.s.o1 = alloc_r(dtx_attention_o_size(&m.a));
    m.s.o2 = alloc_r(dtx_attention_o2_size(&m.a));
    m.s.rstd = alloc_r(dtx_attention_rstd_size(&m.a));
    return m;
}

static void at_free(at_ctx *m) {
    free(m->q), free(m->k), free(m->v), free(m->gamma), free(m->out), free(m->R);
    free(m->s.att), free(m->s.o1), free(m->s.o2), free(m->s.rstd);
}

static void at_forward(at_ctx *m) { dtx_attention_forward(&m->a, m->out, &m->s, m->q, m->k, m->v, m->gamma); }

static double at_loss(void *c) {
    at_ctx *m = c;
    at_forward(m);
    return dot_all(m->out, m->R, m->no);
}

static void at_backward(void *c, real *const *g) {
    at_ctx *m = c;
    at_forward(m);
    /* g = {dq, dk, dv, then dγ (subln), then dλ (DIFF)} */
    int sl = m->a.arch.subln;
    dtx_attention_backward(&m->a, g[0], g[1], g[2], sl ? g[3] : NULL, m->a.arch.diff ? g[3 + sl] : NULL, m->R, m->out,
                           &m->s, m->q, m->k, m->v, m->gamma);
}

static void attention_fd_variant(int diff, int subln, int64_t T, int64_t H, int64_t G, int64_t d, double lam,
                                 double lam_init, uint64_t seed) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    at_ctx m = at_make(&r, diff, subln, 2, T, H, G, d, lam, lam_init);
    char name[64];
    snprintf(name, sizeof name, "attn %s%s T%lld H%lld G%lld d%lld", diff ? "diff" : "tfm",
             subln == diff ? "" : subln ? " +subln" : " -subln", (long long)T, (long long)H, (long long)G,
             (long long)d);
    fd_problem p = {name, at_loss, at_backward, &m, 3, {{"q", m.q, m.nq}, {"k", m.k, m.nk}, {"v", m.v, m.nv}}};
    if (subln) p.in[p.n_in++] = (fd_input){"subln_w", m.gamma, (size_t)((diff ? 2 : 1) * d)};
    if (diff) p.in[p.n_in++] = (fd_input){"lambda", &m.a.arch.lambda, 1};
    fd_run(&p, seed + 100);
    at_free(&m);
}

static void attention_fd_case(int diff, int64_t T, int64_t H, int64_t G, int64_t d, double lam, double lam_init,
                              uint64_t seed) {
    attention_fd_variant(diff, diff, T, H, G, d, lam, lam_init, seed);
}

TEST(kernel_attention_transformer_fd) {
    attention_fd_case(0, 5, 2, 2, 4, 0, 0, 21);  /* MHA */
    attention_fd_case(0, 7, 4, 2, 8, 0, 0, 22);  /* GQA n_rep 2 */
    attention_fd_case(0, 5, 6, 2, 4, 0, 0, 23);  /* GQA n_rep 3 */
    attention_fd_case(0, 7, 3, 1, 8, 0, 0, 24);  /* MQA */
}

TEST(kernel_attention_diff_fd) {
    attention_fd_case(1, 7, 2, 2, 4, 0.37, 0.2, 31);     /* MHA */
    attention_fd_case(1, 5, 4, 2, 8, 0.9, 0.7456, 32);   /* GQA n_rep 2 */
    attention_fd_case(1, 5, 2, 1, 4, -0.2, 0.5561, 33);  /* n_kv 1, negative λ */
    attention_fd_case(1, 7, 3, 3, 8, 1.2, 0.7597, 34);   /* MHA, λ > 1 */
}

/* Table 6's variants: DIFF without the per-head norm (the scale stays), the
 * Transformer with one (no scale). */
TEST(kernel_attention_variants_fd) {
    attention_fd_variant(1, 0, 7, 2, 2, 4, 0.37, 0.2, 35);  /* DIFF − subln, MHA */
    attention_fd_variant(1, 0, 5, 4, 2, 8, 0.9, 0.8, 36);   /* DIFF − subln, GQA, λ_init 0.8 */
    attention_fd_variant(0, 1, 5, 2, 2, 4, 0, 0, 25);       /* Transformer + subln, MHA */
    attention_fd_variant(0, 1, 7, 4, 2, 8, 0, 0, 26);       /* Transformer + subln, GQA */
}

/* Written independently of the kernel: per (b, h, t) the two score rows, the
 * combined matrix (A1 − λA2) applied to v, then the RMSNorm of the formula. */
static void naive_attention(const at_ctx *m, real *out) {
    const dtx_attn_dims *a = &m->a;
    int64_t B = a->geom.B, T = a->geom.T, H = a->geom.n_heads, G = a->geom.n_kv_heads, d = a->geom.head_dim;
    int64_t br = a->arch.diff ? 2 : 1, vw = br * d; /* branches per head, value width */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / (H / G);
            for (int64_t t = 0; t < T; t++) {
                double A[2][64] = {{0}}, O[64] = {0};
                for (int64_t i = 0; i < br; i++) {
                    double z[64], mx = -1e300, sum = 0;
                    for (int64_t s = 0; s <= t; s++) {
                        z[s] = 0;
                        for (int64_t c = 0; c < d; c++)
                            z[s] += m->q[(b * T + t) * br * H * d + (br * h + i) * d + c] *
                                    m->k[(b * T + s) * br * G * d + (br * g + i) * d + c];
                        z[s] /= sqrt((double)d);
                        mx = fmax(mx, z[s]);
                    }
                    for (int64_t s = 0; s <= t; s++) sum += exp(z[s] - mx);
                    for (int64_t s = 0; s <= t; s++) A[i][s] = exp(z[s] - mx) / sum;
                }
                double lam = a->arch.diff ? a->arch.lambda : 0;
                for (int64_t c = 0; c < vw; c++)
                    for (int64_t s = 0; s <= t; s++)
                        O[c] += (A[0][s] - lam * A[1][s]) * m->v[(b * T + s) * G * vw + g * vw + c];
                double ms = 0, sc = a->arch.diff ? 1 - a->arch.lambda_init : 1; /* scale: DIFF only */
                for (int64_t c = 0; c < vw; c++) ms += O[c] * O[c] / vw;
                for (int64_t c = 0; c < vw; c++) {
                    double y = a->arch.subln ? sc * m->gamma[c] * O[c] / sqrt(ms + a->arch.eps) : sc * O[c];
                    out[(b * T + t) * H * vw + h * vw + c] = y;
                }
            }
        }
}

TEST(kernel_attention_matches_naive) {
    dtx_rng r;
    dtx_rng_seed(&r, 41);
    for (int variant = 0; variant < 4; variant++) { /* diff, subln: each default, then the other */
        int diff = variant % 2, subln = variant < 2 ? diff : !diff;
        at_ctx m = at_make(&r, diff, subln, 2, 7, 6, 2, 8, 0.55, 0.3); /* GQA, n_rep 3 */
        real *ref = alloc_r(m.no);
        at_forward(&m);
        naive_attention(&m, ref);
        CHECKF(rel_err(m.out, ref, m.no, 1, 1e-30) < 1e-13, "diff=%d subln=%d: %.3g", diff, subln,
               rel_err(m.out, ref, m.no, 1, 1e-30));
        /* att rows: probabilities over s ≤ t, exact zeros above the diagonal */
        int64_t T = m.a.geom.T, rows = (int64_t)dtx_attention_att_size(&m.a) / T;
        for (int64_t row = 0; row < rows; row++) {
            int64_t t = row % T;
            double sum = 0;
            for (int64_t s = 0; s < T; s++) {
                real p = m.s.att[row * T + s];
                if (s > t) {
                    CHECK(p == 0);
                } else {
                    CHECK(p > 0);
                    sum += p;
                }
            }
            CHECK(fabs(sum - 1) < 1e-14);
        }
        free(ref);
        at_free(&m);
    }
}

/* Changing q, k, v at positions > t0 leaves every output row ≤ t0 unchanged. */
TEST(kernel_attention_causal) {
    dtx_rng r;
    dtx_rng_seed(&r, 42);
    for (int diff = 0; diff <= 1; diff++) {
        at_ctx m = at_make(&r, diff, diff, 2, 7, 4, 2, 4, 0.6, 0.2);
        int64_t T = m.a.geom.T, t0 = 3, ow = (int64_t)m.no / (m.a.geom.B * T);
        at_forward(&m);
        real *before = dup_r(m.out, m.no);
        real *xs[3] = {m.q, m.k, m.v};
        size_t ns[3] = {m.nq, m.nk, m.nv};
        for (int i = 0; i < 3; i++) {
            int64_t w = (int64_t)ns[i] / (m.a.geom.B * T);
            for (int64_t b = 0; b < m.a.geom.B; b++)
                for (int64_t t = t0 + 1; t < T; t++)
                    for (int64_t c = 0; c < w; c++) xs[i][(b * T + t) * w + c] += dtx_rng_normal(&r);
        }
        at_forward(&m);
        int changed_late = 0;
        for (int64_t b = 0; b < m.a.geom.B; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t c = 0; c < ow; c++) {
                    int64_t i = (b * T + t) * ow + c;
                    if (t <= t0) CHECK(m.out[i] == before[i]);
                    else changed_late |= m.out[i] != before[i];
                }
        CHECK(changed_late);
        free(before);
        at_free(&m);
    }
}

/* With q2 = 0 every score of branch 2 is 0, so A2 is uniform over s ≤ t. */
TEST(kernel_attention_diff_q2_zero_uniform) {
    dtx_rng r;
    dtx_rng_seed(&r, 43);
    at_ctx m = at_make(&r, 1, 1, 2, 5, 4, 2, 4, 0.8, 0.2);
    int64_t B = m.a.geom.B, T = m.a.geom.T, H = m.a.geom.n_heads, d = m.a.geom.head_dim;
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t c = 0; c < d; c++) m.q[bt * 2 * H * d + (2 * h + 1) * d + c] = 0;
    at_forward(&m);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const real *a2 = m.s.att + ((b * 2 * H + 2 * h + 1) * T + t) * T;
                const real *a1 = m.s.att + ((b * 2 * H + 2 * h) * T + t) * T;
                for (int64_t s = 0; s < T; s++) CHECK(fabs(a2[s] - (s <= t ? 1.0 / (t + 1) : 0)) < 1e-15);
                if (t > 0) CHECK(fabs(a1[0] - 1.0 / (t + 1)) > 1e-6); /* branch 1 is not */
            }
    /* o2 is then the running mean of v */
    int64_t g = 1, h = 3, t = 4, b = 1, c = 5;
    double mean = 0;
    for (int64_t s = 0; s <= t; s++) mean += m.v[(b * T + s) * 2 * 2 * d + g * 2 * d + c] / (t + 1);
    CHECK(fabs(m.s.o2[(b * T + t) * H * 2 * d + h * 2 * d + c] - mean) < 1e-14);
    at_free(&m);
}

/* n_kv_heads = 1 (every head reads KV head 0) equals MHA with k and v copied
 * into every group; the GQA dk, dv are the sums over the copies. */
static void gqa_mapping_case(int diff) {
    dtx_rng r;
    dtx_rng_seed(&r, 44 + diff);
    int64_t B = 2, T = 5, H = 3, d = 4, sub = diff ? 2 : 1, kw = sub * d;
    at_ctx one = at_make(&r, diff, diff, B, T, H, 1, d, 0.4, 0.3);
    at_ctx all = at_make(&r, diff, diff, B, T, H, H, d, 0.4, 0.3);
    memcpy(all.q, one.q, one.nq * sizeof(real));
    memcpy(all.gamma, one.gamma, (size_t)(2 * d) * sizeof(real));
    memcpy(all.R, one.R, one.no * sizeof(real));
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t g = 0; g < H; g++) {
            memcpy(all.k + (bt * H + g) * kw, one.k + bt * kw, (size_t)kw * sizeof(real));
            memcpy(all.v + (bt * H + g) * kw, one.v + bt * kw, (size_t)kw * sizeof(real));
        }
    at_forward(&one);
    at_forward(&all);
    CHECK(max_diff(one.out, all.out, one.no) == 0);
    real *dq1 = alloc_r(one.nq), *dk1 = alloc_r(one.nk), *dv1 = alloc_r(one.nv);
    real *dq2 = alloc_r(all.nq), *dk2 = alloc_r(all.nk), *dv2 = alloc_r(all.nv);
    real dg1[8] = {0}, dg2[8] = {0};
    double dl1 = 0, dl2 = 0;
    dtx_attention_backward(&one.a, dq1, dk1, dv1, dg1, &dl1, one.R, one.out, &one.s, one.q, one.k, one.v, one.gamma);
    dtx_attention_backward(&all.a, dq2, dk2, dv2, dg2, &dl2, all.R, all.out, &all.s, all.q, all.k, all.v, all.gamma);
    CHECK(max_diff(dq1, dq2, one.nq) < 1e-14);
    real *sk = alloc_r(one.nk), *svv = alloc_r(one.nv);
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t g = 0; g < H; g++)
            for (int64_t c = 0; c < kw; c++) {
                sk[bt * kw + c] += dk2[(bt * H + g) * kw + c];
                svv[bt * kw + c] += dv2[(bt * H + g) * kw + c];
            }
    CHECK(max_diff(dk1, sk, one.nk) < 1e-13 && max_diff(dv1, svv, one.nv) < 1e-13);
    if (diff) CHECK(max_diff(dg1, dg2, 8) < 1e-13 && fabs(dl1 - dl2) < 1e-13);
    free(dq1), free(dk1), free(dv1), free(dq2), free(dk2), free(dv2), free(sk), free(svv);
    at_free(&one);
    at_free(&all);
}

TEST(kernel_attention_gqa_mapping) {
    gqa_mapping_case(0);
    gqa_mapping_case(1);
}

/* ------------------------------------------------------- determinism */

/* Every kernel sums in a fixed order, so 1 and 3 threads give the same bits. */
TEST(kernel_thread_count_invariant) {
    dtx_rng r;
    dtx_rng_seed(&r, 51);
    int saved = omp_get_max_threads();
    at_ctx m = at_make(&r, 1, 1, 3, 9, 4, 2, 8, 0.7, 0.3);
    mm_ctx mm = mm_make(&r, 90, 70, 80);
    real *res[2][6];
    double dl[2], ce[2];
    real *logits = randn(&r, 90 * 80, 0, 1), *probs = alloc_r(90 * 80);
    int32_t tgt[90];
    for (int i = 0; i < 90; i++) tgt[i] = i % 80;
    for (int run = 0; run < 2; run++) {
        omp_set_num_threads(run ? 3 : 1);
        res[run][0] = alloc_r(m.nq), res[run][1] = alloc_r(m.nk), res[run][2] = alloc_r(m.nv);
        res[run][3] = alloc_r(8 * 2), res[run][4] = alloc_r(mm.M * mm.K), res[run][5] = alloc_r(mm.N * mm.K);
        dl[run] = 0;
        at_forward(&m);
        dtx_attention_backward(&m.a, res[run][0], res[run][1], res[run][2], res[run][3], &dl[run], m.R,
                               m.out, &m.s, m.q, m.k, m.v, m.gamma);
        dtx_matmul_backward(res[run][4], res[run][5], mm.R, mm.x, mm.w, mm.M, mm.K, mm.N, DTX_PREC_FP32);
        ce[run] = dtx_crossentropy_forward(probs, logits, tgt, 90, 80);
    }
    omp_set_num_threads(saved);
    size_t n[6] = {m.nq, m.nk, m.nv, 16, (size_t)(mm.M * mm.K), (size_t)(mm.N * mm.K)};
    for (int i = 0; i < 6; i++) {
        CHECKF(memcmp(res[0][i], res[1][i], n[i] * sizeof(real)) == 0, "buffer %d differs", i);
        free(res[0][i]), free(res[1][i]);
    }
    CHECK(dl[0] == dl[1] && ce[0] == ce[1]);
    free(logits), free(probs);
    mm_free(&mm);
    at_free(&m);
}
