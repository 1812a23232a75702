/* The fast elementwise kernels (RMSNorm, RoPE, SwiGLU, residual, embedding,
 * cross-entropy) in the float build against straightforward double loops
 * written here, on shapes like the model's (rows of 512–8192, widths that are
 * not multiples of the vector length, enough elements to take the parallel
 * paths); the vectorised exp's accuracy; bit-identical results for 1, 2 and
 * 3 threads. DTX_EW_VERBOSE=1 prints the measured errors. */
#include "../test.h"
#include "kernels/kernels.h"
#include "kernels/vexp.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

static double *zeros_d(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static int verbose(void) {
    const char *v = getenv("DTX_EW_VERBOSE");
    return v && *v && *v != '0';
}

/* Checks err < tol, naming what; DTX_EW_VERBOSE=1 prints every error. */
#define CHECK_ERR(err, tol, ...)                                                   \
    do {                                                                           \
        double e_ = (err);                                                         \
        char what_[96];                                                            \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                \
        if (verbose()) printf("    %-40s error %.3g (tolerance %.1g)\n", what_, e_, (double)(tol)); \
        CHECKF(e_ < (tol), "%s: error %.3g (tolerance %.1g)", what_, e_, (double)(tol)); \
    } while (0)

/* max |got − want| / max |want|: a tensor-wise relative error. */
static double err_vs(const real *got, const double *want, size_t n) {
    double d = 0, m = 1e-300;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        if (!(e <= d)) d = e; /* NaN counts */
        if (fabs(want[i]) > m) m = fabs(want[i]);
    }
    return d / m;
}

/* max over i of |got − want| / max(|want|, floor): elementwise. */
static double err_elem(const real *got, const double *want, size_t n, double floor) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs(want[i]) > floor ? fabs(want[i]) : floor;
        double e = fabs(got[i] - want[i]) / den;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* ------------------------------------------------------------ dtx_vexpf */

__attribute__((noinline)) static void vexp_loop(float *restrict y, const float *restrict x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = dtx_vexpf(x[i]);
}

/* Called through a pointer so it stays a scalar call. */
static float vexp_scalar(float x) { return dtx_vexpf(x); }
static float (*volatile vexp_scalar_p)(float) = vexp_scalar;

TEST(kernel_ew_vexpf_accuracy) {
    /* 2²² evenly spaced points over [−87, 88] plus a dense walk around 0. */
    enum { N = 1 << 22 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    REQUIRE(x && y);
    double worst = 0, wx = 0, bias = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < N; i++)
            x[i] = pass == 0 ? -87.0f + 175.0f * (float)((double)i / (N - 1)) : -0.75f + 1.5f * (float)i / N;
        vexp_loop(y, x, N);
        for (int64_t i = 0; i < N; i++) {
            double e = exp((double)x[i]), r = (y[i] - e) / e;
            bias += r;
            if (!(fabs(r) <= worst)) worst = fabs(r), wx = x[i];
        }
    }
    CHECK_ERR(worst, 1e-7, "dtx_vexpf max relative error (x = %.7g)", wx);
    CHECK_ERR(fabs(bias / (2.0 * N)), 1e-8, "dtx_vexpf mean relative error (bias)");
    /* Scalar and vector code give the same bits. */
    for (int64_t i = 0; i < 4096; i++) {
        float s = vexp_scalar_p(x[i * 97]);
        CHECK(memcmp(&s, &y[i * 97], sizeof s) == 0);
    }
    /* Special values and the ends of the range. */
    static const float sp[] = {-INFINITY, -1e30f, -110.0f, -104.5f, INFINITY, 1e30f, 89.0f, 88.73f};
    static const float want[] = {0, 0, 0, 0, INFINITY, INFINITY, INFINITY, INFINITY};
    float in[16], out[16];
    for (int i = 0; i < 8; i++) in[i] = sp[i];
    in[8] = NAN, in[9] = 0.0f, in[10] = -0.0f, in[11] = 1.0f, in[12] = 88.72f, in[13] = -87.0f;
    in[14] = -100.0f, in[15] = -103.9f;
    vexp_loop(out, in, 16);
    for (int i = 0; i < 8; i++) CHECKF(out[i] == want[i], "exp(%g) = %g", (double)sp[i], (double)out[i]);
    CHECK(isnan(out[8]) && out[9] == 1.0f && out[10] == 1.0f);
    CHECK(fabs(out[11] - M_E) < 2e-7 && isfinite(out[12]) && out[13] > 0);
    /* Subnormal results: absolute error within a few of the smallest subnormal. */
    for (int i = 14; i < 16; i++)
        CHECKF(fabs(out[i] - exp((double)in[i])) <= 2 * 1.4013e-45, "exp(%g) = %g", (double)in[i], (double)out[i]);
    free(x), free(y);
}

/* -------------------------------------------------------------- rmsnorm */

static void rmsnorm_forward_case(dtx_rng *r, int64_t M, int64_t C, double mean) {
    size_t n = (size_t)(M * C);
    real *x = randn(r, n, mean, 1), *w = randn(r, (size_t)C, 1, 0.3);
    real *out = calloc(n, sizeof(real)), *rstd = calloc((size_t)M, sizeof(real));
    double *ref = zeros_d(n), *rref = zeros_d((size_t)M);
    for (int64_t i = 0; i < M; i++) {
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)x[i * C + c] * x[i * C + c];
        rref[i] = 1 / sqrt(ss / C + 1e-5);
        for (int64_t c = 0; c < C; c++) ref[i * C + c] = x[i * C + c] * rref[i] * w[c];
    }
    dtx_rmsnorm_forward(out, rstd, x, w, M, C, 1e-5);
    CHECK_ERR(err_elem(out, ref, n, 1e-3), 1e-6, "rmsnorm out %lldx%lld", (long long)M, (long long)C);
    CHECK_ERR(err_elem(rstd, rref, (size_t)M, 0), 1e-6, "rmsnorm rstd %lldx%lld", (long long)M, (long long)C);
    free(x), free(w), free(out), free(rstd), free(ref), free(rref);
}

TEST(kernel_ew_rmsnorm_forward) {
    dtx_rng r;
    dtx_rng_seed(&r, 701);
    rmsnorm_forward_case(&r, 257, 1408, 0.3);
    rmsnorm_forward_case(&r, 130, 8192, 3);
    rmsnorm_forward_case(&r, 3, 13, 0); /* serial path, tail only */
}

/* dx, dw accumulate onto random contents; the reference is the textbook
 * formula in double on the same float inputs. */
static void rmsnorm_backward_case(dtx_rng *r, int64_t M, int64_t C) {
    size_t n = (size_t)(M * C);
    real *x = randn(r, n, 0.2, 1), *w = randn(r, (size_t)C, 1, 0.3), *g = randn(r, n, 0, 1);
    real *out = calloc(n, sizeof(real)), *rstd = calloc((size_t)M, sizeof(real));
    dtx_rmsnorm_forward(out, rstd, x, w, M, C, 1e-5);
    real *dx = randn(r, n, 0, 0.1), *dw = randn(r, (size_t)C, 0, 1), *dx2 = dup_r(dx, n);
    double *rdx = zeros_d(n), *rdw = zeros_d((size_t)C);
    for (size_t i = 0; i < n; i++) rdx[i] = dx[i];
    for (int64_t c = 0; c < C; c++) rdw[c] = dw[c];
    for (int64_t i = 0; i < M; i++) {
        double rs = rstd[i], m = 0;
        for (int64_t c = 0; c < C; c++) m += (double)g[i * C + c] * w[c] * x[i * C + c] * rs;
        m /= C;
        for (int64_t c = 0; c < C; c++) {
            double xh = x[i * C + c] * rs;
            rdx[i * C + c] += rs * ((double)g[i * C + c] * w[c] - xh * m);
            rdw[c] += (double)g[i * C + c] * xh;
        }
    }
    dtx_rmsnorm_backward(dx, dw, g, x, w, rstd, M, C);
    CHECK_ERR(err_vs(dx, rdx, n), 1e-6, "rmsnorm dx %lldx%lld", (long long)M, (long long)C);
    CHECK_ERR(err_vs(dw, rdw, (size_t)C), 1e-6, "rmsnorm dw %lldx%lld", (long long)M, (long long)C);
    dtx_rmsnorm_backward(dx2, NULL, g, x, w, rstd, M, C); /* dw optional, dx unchanged by it */
    CHECK(memcmp(dx, dx2, n * sizeof(real)) == 0);
    free(x), free(w), free(g), free(out), free(rstd), free(dx), free(dw), free(dx2), free(rdx), free(rdw);
}

TEST(kernel_ew_rmsnorm_backward) {
    dtx_rng r;
    dtx_rng_seed(&r, 702);
    rmsnorm_backward_case(&r, 257, 1408); /* several row blocks, a partial column block */
    rmsnorm_backward_case(&r, 8192, 512); /* config S: 64 row blocks */
    rmsnorm_backward_case(&r, 130, 8192);
    rmsnorm_backward_case(&r, 5, 70); /* serial path */
}

/* ----------------------------------------------------------------- rope */

TEST(kernel_ew_rope) {
    dtx_rng r;
    dtx_rng_seed(&r, 703);
    int64_t B = 2, T = 300, pos0 = 5, n_sub = 8, d = 64, half = d / 2, max_pos = 320, C = n_sub * d;
    size_t n = (size_t)(B * T * C);
    real *ct = calloc((size_t)(max_pos * half), sizeof(real)), *st = calloc((size_t)(max_pos * half), sizeof(real));
    test_rope_table(ct, st, max_pos, d, 10000);
    real *x = randn(&r, n, 0, 1), *y = dup_r(x, n), *z = dup_r(x, n);
    double *fwd = zeros_d(n), *bwd = zeros_d(n);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < n_sub; j++)
                for (int64_t i = 0; i < half; i++) {
                    int64_t o = (b * T + t) * C + j * d + 2 * i, p = (pos0 + t) * half + i;
                    double x0 = x[o], x1 = x[o + 1], c = ct[p], s = st[p];
                    fwd[o] = x0 * c - x1 * s, fwd[o + 1] = x1 * c + x0 * s;
                    bwd[o] = x0 * c + x1 * s, bwd[o + 1] = x1 * c - x0 * s;
                }
    dtx_rope_forward(y, ct, st, B, T, pos0, n_sub, d);
    dtx_rope_backward(z, ct, st, B, T, pos0, n_sub, d);
    CHECK_ERR(err_vs(y, fwd, n), 1e-6, "rope forward");
    CHECK_ERR(err_vs(z, bwd, n), 1e-6, "rope backward");
    /* A head width that is not a multiple of the vector length, serial path. */
    int64_t d2 = 6, n2 = 1 * 3 * 2 * d2;
    real *a = randn(&r, (size_t)n2, 0, 1), *a0 = dup_r(a, (size_t)n2);
    real *ct2 = calloc(8 * 3, sizeof(real)), *st2 = calloc(8 * 3, sizeof(real));
    test_rope_table(ct2, st2, 8, d2, 10000);
    dtx_rope_forward(a, ct2, st2, 1, 3, 4, 2, d2);
    {
        int64_t t = 2, j = 1, i = 2, o = t * 2 * d2 + j * d2 + 2 * i, p = (4 + t) * 3 + i;
        CHECK(fabs(a[o] - ((double)a0[o] * ct2[p] - (double)a0[o + 1] * st2[p])) < 1e-6);
    }
    dtx_rope_backward(a, ct2, st2, 1, 3, 4, 2, d2);
    for (int64_t i = 0; i < n2; i++) CHECK(fabs(a[i] - a0[i]) < 1e-6);
    free(ct), free(st), free(x), free(y), free(z), free(fwd), free(bwd), free(a), free(a0), free(ct2), free(st2);
}

/* ------------------------------------------------------ swiglu, residual */

static double sigmoid_d(double a) { return 1 / (1 + exp(-a)); }

TEST(kernel_ew_swiglu) {
    dtx_rng r;
    dtx_rng_seed(&r, 704);
    int64_t n = 257 * 1408;
    real *a = randn(&r, (size_t)n, 0, 4), *b = randn(&r, (size_t)n, 0, 1), *g = randn(&r, (size_t)n, 0, 1);
    /* saturated and large-|a| ends, where 1 − σ(a) would cancel */
    static const real ends[] = {-200, -90, -40, -15, -5, 0, 5, 12, 15, 20, 30, 40, 90, 200};
    for (int i = 0; i < (int)(sizeof ends / sizeof ends[0]); i++) a[1000 + i] = ends[i], a[n - 1 - i] = ends[i];
    real *out = calloc((size_t)n, sizeof(real)), *da = calloc((size_t)n, sizeof(real)), *db = calloc((size_t)n, sizeof(real));
    double *ro = zeros_d((size_t)n), *rda = zeros_d((size_t)n), *rdb = zeros_d((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], s = sigmoid_d(x);
        ro[i] = x * s * b[i];
        rda[i] = (double)g[i] * b[i] * s * (1 + x * sigmoid_d(-x));
        rdb[i] = (double)g[i] * x * s;
    }
    dtx_swiglu_forward(out, a, b, n);
    dtx_swiglu_backward(da, db, g, a, b, n); /* from zero: the increments themselves */
    /* out, db elementwise, floored at 1e-3 (the values are O(1)) */
    CHECK_ERR(err_elem(out, ro, (size_t)n, 1e-3), 1e-6, "swiglu out (elementwise)");
    /* silu' has a root near a = −1.28 where 1 + a·(1 − σ) cancels in any float
     * evaluation, so da is held to the tensor-wise measure. */
    CHECK_ERR(err_vs(da, rda, (size_t)n), 1e-6, "swiglu da");
    CHECK_ERR(err_elem(db, rdb, (size_t)n, 1e-3), 1e-6, "swiglu db (elementwise)");
    CHECK(out[1000] == 0 && out[n - 1] == 0 && da[1000] == 0 && db[1000] == 0);
    /* Accumulating onto random contents adds exactly those increments. */
    real *da2 = randn(&r, (size_t)n, 0, 1), *db2 = randn(&r, (size_t)n, 0, 1);
    real *da0 = dup_r(da2, (size_t)n), *db0 = dup_r(db2, (size_t)n);
    dtx_swiglu_backward(da2, db2, g, a, b, n);
    int same = 1;
    for (int64_t i = 0; i < n; i++) same &= da2[i] == da0[i] + da[i] && db2[i] == db0[i] + db[i];
    CHECK(same);
    /* The bf16-rounding variants: the same values, rounded (bit for bit as dtx_bf16_round afterwards). */
    real *o3 = calloc((size_t)n, sizeof(real)), *da3 = dup_r(da0, (size_t)n), *db3 = dup_r(db0, (size_t)n);
    real *da4 = dup_r(da0, (size_t)n), *db4 = dup_r(db0, (size_t)n);
    dtx_swiglu_forward_r(o3, a, b, n, 1);
    dtx_swiglu_backward_r(da3, db3, g, a, b, n, 1);
    dtx_swiglu_backward(da4, db4, g, a, b, n);
    int same_r = 1, rounded = 1;
    for (int64_t i = 0; i < n; i++) {
        real ro3 = dtx_bf16_to_f32(dtx_f32_to_bf16(out[i]));
        real rd3 = dtx_bf16_to_f32(dtx_f32_to_bf16(da4[i])), rb3 = dtx_bf16_to_f32(dtx_f32_to_bf16(db4[i]));
        same_r &= o3[i] == ro3 && da3[i] == rd3 && db3[i] == rb3;
        rounded &= (dtx_f32_bits(o3[i]) & 0xffffu) == 0;
    }
    CHECK(same_r && rounded);
    free(o3), free(da3), free(db3), free(da4), free(db4);
    free(da2), free(db2), free(da0), free(db0);
    free(a), free(b), free(g), free(out), free(da), free(db), free(ro), free(rda), free(rdb);
}

/* DIFF V2's pair combination against double loops, with saturated λ logits
 * (σ → 0 and 1, where the naive 1/(1 + e^−l) would still be exact but the
 * derivative σ(1 − σ) must underflow to 0, not NaN), at a row count that
 * crosses the threads' threshold; then the ablations' λ = l and λ = 1. */
TEST(kernel_ew_diff2_combine) {
    dtx_rng r;
    dtx_rng_seed(&r, 712);
    int64_t N = 97, h = 3, d = 20;
    size_t na = (size_t)(N * 2 * h * d), no = (size_t)(N * h * d), nl = (size_t)(N * h);
    real *A = randn(&r, na, 0, 1), *l = randn(&r, nl, 0, 3), *g = randn(&r, no, 0, 1);
    static const real ends[] = {-800, -90, -30, 0, 30, 90, 800};
    for (int i = 0; i < 7; i++) l[5 + i] = ends[i];
    real *out = calloc(no, sizeof(real)), *dA = calloc(na, sizeof(real)), *dl = calloc(nl, sizeof(real));
    double *ro = zeros_d(no), *rdA = zeros_d(na), *rdl = zeros_d(nl);
    for (int mode = DTX_V2_LAMBDA_SIGMOID; mode <= DTX_V2_LAMBDA_NONE; mode++) {
    for (int64_t t = 0; t < N; t++)
        for (int64_t i = 0; i < h; i++) {
            double x = l[t * h + i], sg = x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)), dot = 0;
            double s = mode == DTX_V2_LAMBDA_SIGMOID ? sg : mode == DTX_V2_LAMBDA_LINEAR ? x : 1;
            double slope = mode == DTX_V2_LAMBDA_SIGMOID ? sg * (1 - sg) : mode == DTX_V2_LAMBDA_LINEAR ? 1 : 0;
            for (int64_t c = 0; c < d; c++) {
                double a1 = A[(t * 2 * h + 2 * i) * d + c], a2 = A[(t * 2 * h + 2 * i + 1) * d + c];
                double gg = g[(t * h + i) * d + c];
                ro[(t * h + i) * d + c] = a1 - s * a2;
                rdA[(t * 2 * h + 2 * i) * d + c] = gg;
                rdA[(t * 2 * h + 2 * i + 1) * d + c] = -s * gg;
                dot += gg * a2;
            }
            rdl[t * h + i] = -slope * dot;
        }
    const char *name = mode == DTX_V2_LAMBDA_SIGMOID ? "sigmoid" : mode == DTX_V2_LAMBDA_LINEAR ? "linear" : "none";
    for (size_t i = 0; i < nl; i++) dl[i] = 12345; /* NONE must leave dl alone */
    dtx_diff2_combine_forward(out, A, mode == DTX_V2_LAMBDA_NONE ? NULL : l, N, h, d,
                              (dtx_v2_lambda)mode);
    dtx_diff2_combine_backward(dA, mode == DTX_V2_LAMBDA_NONE ? NULL : dl, g, A,
                               mode == DTX_V2_LAMBDA_NONE ? NULL : l, N, h, d, (dtx_v2_lambda)mode);
    /* a1 − λ·a2 cancels where the two heads agree: held tensor-wise */
    CHECKF(err_vs(out, ro, no) < 1e-6, "diff2 combine out (%s) %.3g", name, err_vs(out, ro, no));
    CHECKF(err_elem(dA, rdA, na, 1e-3) < 1e-6, "diff2 combine dA (%s) %.3g", name, err_elem(dA, rdA, na, 1e-3));
    if (mode == DTX_V2_LAMBDA_NONE) {
        int kept = 1;
        for (size_t i = 0; i < nl; i++) kept &= dl[i] == 12345;
        CHECK(kept);
        continue;
    }
    CHECKF(err_vs(dl, rdl, nl) < 1e-6, "diff2 combine dlambda (%s) %.3g", name, err_vs(dl, rdl, nl));
    if (mode == DTX_V2_LAMBDA_LINEAR) continue;
    int finite = 1;
    for (size_t i = 0; i < nl; i++) finite &= isfinite(dl[i]);
    CHECK(finite && dl[5] == 0 && dl[11] == 0); /* saturated: no gradient, and no NaN */
    /* σ(−800) = 0: the pair is its first head; σ(800) = 1: the difference */
    for (int64_t c = 0; c < d; c++) {
        CHECK(out[(1 * h + 2) * d + c] == A[(1 * 2 * h + 4) * d + c]);
        CHECK(out[(3 * h + 2) * d + c] == A[(3 * 2 * h + 4) * d + c] - A[(3 * 2 * h + 5) * d + c]);
    }
    }
    free(A), free(l), free(g), free(out), free(dA), free(dl), free(ro), free(rdA), free(rdl);
}

TEST(kernel_ew_residual) {
    dtx_rng r;
    dtx_rng_seed(&r, 705);
    int64_t n = 130 * 769;
    real *a = randn(&r, (size_t)n, 0, 1), *b = randn(&r, (size_t)n, 0, 1), *out = calloc((size_t)n, sizeof(real));
    dtx_residual_forward(out, a, b, n);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= out[i] == a[i] + b[i];
    CHECK(ok);
    dtx_residual_forward(a, a, b, n); /* out aliases a */
    CHECK(memcmp(a, out, (size_t)n * sizeof(real)) == 0);
    free(a), free(b), free(out);
}

/* ------------------------------------------------------------ embedding */

TEST(kernel_ew_embedding) {
    dtx_rng r;
    dtx_rng_seed(&r, 706);
    int64_t n = 4096, V = 300, C = 520; /* ids repeat ~14×; C is not a multiple of 16 */
    int32_t *tok = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)(dtx_rng_next(&r) % (uint64_t)(V - 1)); /* id V−1 unused */
    real *table = randn(&r, (size_t)(V * C), 0, 1), *out = calloc((size_t)(n * C), sizeof(real));
    real *dout = randn(&r, (size_t)(n * C), 0, 1), *dt = randn(&r, (size_t)(V * C), 0, 1);
    real *naive = dup_r(dt, (size_t)(V * C));
    dtx_embedding_forward(out, tok, table, n, C);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= memcmp(out + i * C, table + tok[i] * C, (size_t)C * sizeof(real)) == 0;
    CHECK(ok);
    /* Backward: the float sums in token order, exactly, and close to double. */
    double *ref = zeros_d((size_t)(V * C));
    for (int64_t i = 0; i < V * C; i++) ref[i] = dt[i];
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < C; c++) {
            naive[tok[i] * C + c] += dout[i * C + c];
            ref[tok[i] * C + c] += dout[i * C + c];
        }
    real *last = dup_r(dt + (V - 1) * C, (size_t)C);
    dtx_embedding_backward(dt, dout, tok, n, C);
    CHECK(memcmp(dt, naive, (size_t)(V * C) * sizeof(real)) == 0);
    CHECK_ERR(err_vs(dt, ref, (size_t)(V * C)), 1e-6, "embedding backward");
    CHECK(memcmp(dt + (V - 1) * C, last, (size_t)C * sizeof(real)) == 0);
    free(tok), free(table), free(out), free(dout), free(dt), free(naive), free(ref), free(last);
}

/* -------------------------------------------------------- cross-entropy */

/* probs and the loss against double; probs aliasing logits gives the same. */
TEST(kernel_ew_crossentropy_forward) {
    dtx_rng r;
    dtx_rng_seed(&r, 707);
    int64_t N = 130, V = 8192;
    size_t n = (size_t)(N * V);
    real *z = randn(&r, n, 0, 4), *p = calloc(n, sizeof(real));
    int32_t *tgt = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) tgt[i] = (int32_t)(dtx_rng_next(&r) % (uint64_t)V);
    for (int64_t j = 0; j < V; j++) z[V + j] = 1000 + (real)(j % 7); /* huge logits */
    for (int64_t j = 0; j < V; j++) z[2 * V + j] = -INFINITY;          /* masked-out entries */
    z[2 * V + 5] = 1, z[2 * V + 6] = 2, tgt[2] = 6;
    z[3 * V + 77] = 60, tgt[3] = 77; /* one dominant logit: exp underflows elsewhere */
    double *ref = zeros_d(n), want = 0;
    for (int64_t i = 0; i < N; i++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < V; j++) mx = fmax(mx, z[i * V + j]);
        for (int64_t j = 0; j < V; j++) s += exp(z[i * V + j] - mx);
        for (int64_t j = 0; j < V; j++) ref[i * V + j] = exp(z[i * V + j] - mx) / s;
        want += log(s) + mx - z[i * V + tgt[i]];
    }
    want /= N;
    double got = dtx_crossentropy_forward(p, z, tgt, N, V);
    CHECK_ERR(fabs(got - want) / fabs(want), 1e-9, "crossentropy loss (relative)");
    CHECK_ERR(err_vs(p, ref, n), 1e-6, "crossentropy probs");
    /* Each probability, however small: z − max is rounded to float (as in
     * any float softmax), which costs |z − max|·2⁻²⁴ relative, ≤ 2e-6 here. */
    CHECK_ERR(err_elem(p, ref, n, 1e-30), 5e-6, "crossentropy probs (elementwise)");
    CHECK(p[2 * V + 0] == 0 && p[2 * V + 6] > 0.7);
    real *alias = dup_r(z, n);
    double l2 = dtx_crossentropy_forward(alias, alias, tgt, N, V);
    CHECK(l2 == got && memcmp(alias, p, n * sizeof(real)) == 0);
    free(z), free(p), free(tgt), free(ref), free(alias);
}

/* The accumulating backward against double, and the in-place one equals it
 * into a zeroed buffer, bit for bit. */
TEST(kernel_ew_crossentropy_backward) {
    dtx_rng r;
    dtx_rng_seed(&r, 708);
    int64_t N = 130, V = 8192;
    size_t n = (size_t)(N * V);
    real *z = randn(&r, n, 0, 3), *p = calloc(n, sizeof(real)), *d = randn(&r, n, 0, 1e-5);
    int32_t *tgt = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) tgt[i] = (int32_t)(dtx_rng_next(&r) % (uint64_t)V);
    dtx_crossentropy_forward(p, z, tgt, N, V);
    double scale = 0.75 / (double)N, *ref = zeros_d(n);
    for (size_t i = 0; i < n; i++) ref[i] = d[i] + (double)p[i] * scale;
    for (int64_t i = 0; i < N; i++) ref[i * V + tgt[i]] -= scale;
    dtx_crossentropy_backward(d, p, tgt, N, V, scale);
    CHECK_ERR(err_vs(d, ref, n), 1e-6, "crossentropy backward");
    real *zero = calloc(n, sizeof(real)), *inpl = dup_r(p, n);
    dtx_crossentropy_backward(zero, p, tgt, N, V, scale);
    dtx_crossentropy_backward_inplace(inpl, tgt, N, V, scale);
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= inpl[i] == zero[i];
    CHECK(same);
    /* and it is (p − onehot)·scale to one float rounding */
    double worst = 0;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < V; j++) {
            double want = ((double)p[i * V + j] - (j == tgt[i])) * scale, got = inpl[i * V + j];
            double e = fabs(got - want) / (fabs(want) > 1e-30 ? fabs(want) : 1e-30);
            worst = e > worst ? e : worst;
        }
    CHECK_ERR(worst, FLT_EPSILON / 2 * 1.0001, "in-place backward vs (p - onehot)*scale");
    free(z), free(p), free(d), free(tgt), free(ref), free(zero), free(inpl);
}

/* ---------------------------------------------------------- determinism */

/* Every kernel at parallel sizes gives the same bits for 1, 2 and 3 threads. */
TEST(kernel_ew_thread_count_invariant) {
    dtx_rng r;
    dtx_rng_seed(&r, 709);
    int saved = omp_get_max_threads();
    int64_t M = 300, C = 520, F = 1408, V = 2000, d = 40, nsub = C / d;
    size_t nc = (size_t)(M * C), nf = (size_t)(M * F), nv = (size_t)(M * V);
    real *x = randn(&r, nc, 0.1, 1), *w = randn(&r, (size_t)C, 1, 0.2), *g = randn(&r, nc, 0, 1);
    real *a = randn(&r, nf, 0, 3), *b = randn(&r, nf, 0, 1), *gf = randn(&r, nf, 0, 1);
    real *z = randn(&r, nv, 0, 3), *ct = calloc((size_t)(M * d / 2), sizeof(real));
    real *st = calloc((size_t)(M * d / 2), sizeof(real));
    test_rope_table(ct, st, M, d, 10000);
    int32_t *tok = malloc((size_t)M * sizeof(int32_t));
    for (int64_t i = 0; i < M; i++) tok[i] = (int32_t)(dtx_rng_next(&r) % 50); /* many repeats */
    enum { NB = 12 };
    size_t sz[NB] = {nc, (size_t)M, nc, (size_t)C, nc, nc, nf, nf, nf, (size_t)(50 * C), nv, nv};
    real *res[3][NB];
    double loss[3];
    for (int run = 0; run < 3; run++) {
        omp_set_num_threads(run + 1);
        for (int k = 0; k < NB; k++) res[run][k] = calloc(sz[k], sizeof(real));
        real **o = res[run];
        dtx_rmsnorm_forward(o[0], o[1], x, w, M, C, 1e-5);
        dtx_rmsnorm_backward(o[2], o[3], g, x, w, o[1], M, C);
        memcpy(o[4], x, nc * sizeof(real));
        dtx_rope_forward(o[4], ct, st, 1, M, 0, nsub, d);
        memcpy(o[5], g, nc * sizeof(real));
        dtx_rope_backward(o[5], ct, st, 1, M, 0, nsub, d);
        dtx_swiglu_forward(o[6], a, b, (int64_t)nf);
        dtx_swiglu_backward(o[7], o[8], gf, a, b, (int64_t)nf);
        dtx_embedding_backward(o[9], g, tok, M, C);
        loss[run] = dtx_crossentropy_forward(o[10], z, tok, M, V);
        memcpy(o[11], o[10], nv * sizeof(real));
        dtx_crossentropy_backward_inplace(o[11], tok, M, V, 1.0 / (double)M);
    }
    omp_set_num_threads(saved);
    for (int run = 1; run < 3; run++) {
        for (int k = 0; k < NB; k++)
            CHECKF(memcmp(res[0][k], res[run][k], sz[k] * sizeof(real)) == 0, "buffer %d differs with %d threads", k,
                   run + 1);
        CHECK(loss[run] == loss[0]);
    }
    for (int run = 0; run < 3; run++)
        for (int k = 0; k < NB; k++) free(res[run][k]);
    free(x), free(w), free(g), free(a), free(b), free(gf), free(z), free(ct), free(st), free(tok);
}
