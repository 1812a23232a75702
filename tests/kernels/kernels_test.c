/* Kernels in the float build against double-precision references computed
 * here: the model must match a float64 PyTorch reference to 1e-4 relative,
 * so each kernel should stay well inside that at realistic sizes. */
#include "../test.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* max |got − want| / max |want| */
static double err_vs(const real *got, const double *want, size_t n) {
    double d = 0, m = 1e-300;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        if (!(e <= d)) d = e;
        if (fabs(want[i]) > m) m = fabs(want[i]);
    }
    return d / m;
}

TEST(kernel_f32_matmul_accuracy) {
    dtx_rng r;
    dtx_rng_seed(&r, 61);
    int64_t M = 33, K = 2048, N = 70;
    real *x = randn(&r, (size_t)(M * K), 0, 1), *w = randn(&r, (size_t)(N * K), 0, 1);
    real *out = calloc((size_t)(M * N), sizeof(real));
    double *ref = calloc((size_t)(M * N), sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) ref[i * N + j] += (double)x[i * K + k] * w[j * K + k];
    dtx_matmul_forward(out, x, w, M, K, N, DTX_PREC_FP32);
    double e = err_vs(out, ref, (size_t)(M * N));
    CHECKF(e < 1e-5, "matmul f32 error %.3g", e);
    free(x), free(w), free(out), free(ref);
}

TEST(kernel_f32_rmsnorm_crossentropy_accuracy) {
    dtx_rng r;
    dtx_rng_seed(&r, 62);
    int64_t M = 4, C = 4096, V = 32000;
    real *x = randn(&r, (size_t)(M * C), 3, 1), *w = randn(&r, (size_t)C, 1, 0.2);
    real *out = calloc((size_t)(M * C), sizeof(real)), *rstd = calloc((size_t)M, sizeof(real));
    double *ref = calloc((size_t)(M * C), sizeof(double));
    for (int64_t i = 0; i < M; i++) {
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)x[i * C + c] * x[i * C + c];
        for (int64_t c = 0; c < C; c++) ref[i * C + c] = x[i * C + c] / sqrt(ss / C + 1e-5) * w[c];
    }
    dtx_rmsnorm_forward(out, rstd, x, w, M, C, 1e-5);
    CHECK(err_vs(out, ref, (size_t)(M * C)) < 1e-6);

    real *z = randn(&r, (size_t)(M * V), 0, 4), *p = calloc((size_t)(M * V), sizeof(real));
    static const int32_t tgt[4] = {0, 123, 31999, 7};
    double want = 0;
    for (int64_t i = 0; i < M; i++) {
        double mx = -1e300, s = 0;
        for (int64_t j = 0; j < V; j++) mx = fmax(mx, z[i * V + j]);
        for (int64_t j = 0; j < V; j++) s += exp(z[i * V + j] - mx);
        want += log(s) + mx - z[i * V + tgt[i]];
    }
    want /= M;
    double got = dtx_crossentropy_forward(p, z, tgt, M, V);
    CHECKF(fabs(got - want) < 1e-9 * fabs(want), "loss %.17g vs %.17g", got, want);
    free(x), free(w), free(out), free(rstd), free(ref), free(z), free(p);
}

/* DIFF attention with GQA at T = 256 against a double evaluation of the
 * formula; λ close to 1 makes the A1 − λA2 cancellation matter. */
TEST(kernel_f32_diff_attention_accuracy) {
    dtx_rng r;
    dtx_rng_seed(&r, 63);
    int64_t B = 1, T = 256, H = 2, G = 1, d = 32, w = 2 * d;
    dtx_attn_dims a = {.run.impl = DTX_ATTN_PLAIN, .geom.B = B, .geom.T = T, .geom.n_heads = H, .geom.n_kv_heads = G, .geom.head_dim = d,
                       .arch.diff = 1, .arch.subln = 1, .arch.lambda = 0.95, .arch.lambda_init = 0.8, .arch.eps = 1e-5};
    real *q = randn(&r, (size_t)(T * 2 * H * d), 0, 1), *k = randn(&r, (size_t)(T * 2 * G * d), 0, 1);
    real *v = randn(&r, (size_t)(T * G * w), 0, 1), *gamma = randn(&r, (size_t)w, 1, 0.1);
    real *out = calloc((size_t)(T * H * w), sizeof(real));
    dtx_attn_saved s = {.att = calloc(dtx_attention_att_size(&a), sizeof(real)),
                        .o1 = calloc(dtx_attention_o_size(&a), sizeof(real)),
                        .o2 = calloc(dtx_attention_o_size(&a), sizeof(real)),
                        .rstd = calloc(dtx_attention_rstd_size(&a), sizeof(real))};
    dtx_attention_forward(&a, out, &s, q, k, v, gamma);
    double *ref = calloc((size_t)(T * H * w), sizeof(double));
    double *A = calloc((size_t)(2 * T), sizeof(double));
    for (int64_t h = 0; h < H; h++) {
        int64_t g = h / (H / G);
        for (int64_t t = 0; t < T; t++) {
            for (int64_t i = 0; i < 2; i++) {
                double mx = -1e300, sum = 0;
                for (int64_t u = 0; u <= t; u++) {
                    double z = 0;
                    for (int64_t c = 0; c < d; c++)
                        z += (double)q[t * 2 * H * d + (2 * h + i) * d + c] * k[u * 2 * G * d + (2 * g + i) * d + c];
                    A[i * T + u] = z / sqrt((double)d);
                    mx = fmax(mx, A[i * T + u]);
                }
                for (int64_t u = 0; u <= t; u++) sum += (A[i * T + u] = exp(A[i * T + u] - mx));
                for (int64_t u = 0; u <= t; u++) A[i * T + u] /= sum;
            }
            double O[64] = {0}, ms = 0;
            for (int64_t c = 0; c < w; c++) {
                for (int64_t u = 0; u <= t; u++) O[c] += (A[u] - a.arch.lambda * A[T + u]) * v[u * G * w + g * w + c];
                ms += O[c] * O[c] / w;
            }
            for (int64_t c = 0; c < w; c++)
                ref[t * H * w + h * w + c] = (1 - a.arch.lambda_init) * gamma[c] * O[c] / sqrt(ms + a.arch.eps);
        }
    }
    double e = err_vs(out, ref, (size_t)(T * H * w));
    CHECKF(e < 1e-5, "diff attention f32 error %.3g", e);
    free(q), free(k), free(v), free(gamma), free(out), free(ref), free(A);
    free(s.att), free(s.o1), free(s.o2), free(s.rstd);
}
