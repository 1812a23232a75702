/* The one-row products of decoding (rowdot.c: dtx_dot_rows, dtx_axpy_rows,
 * dtx_gemv, dtx_gemv_bf16) against double-precision loops, at every ISA level the
 * CPU has: row counts around the 8-row blocks, widths around the 8-lane
 * vectors, strided outputs and rows, and the threaded split of dtx_gemv
 * (the same bits whatever the thread count). */
#include "../test.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *randf(dtx_rng *r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)dtx_rng_normal(r);
    return x;
}

TEST(kernel_rowdot_dot_rows) {
    dtx_rng r;
    dtx_rng_seed(&r, 910);
    static const int64_t ns[] = {1, 7, 8, 9, 16, 37}, ds[] = {1, 5, 8, 13, 64, 130};
    FOR_EACH_ISA(lvl) {
        double worst = 0;
        for (int in = 0; in < 6; in++)
            for (int id = 0; id < 6; id++)
                for (int lds = 1; lds <= 3; lds += 2) {
                    int64_t n = ns[in], d = ds[id], ldk = d + 3;
                    float *x = randf(&r, (size_t)d), *k = randf(&r, (size_t)(n * ldk));
                    float *s = malloc(sizeof(float) * (size_t)(n * lds));
                    for (int64_t i = 0; i < n * lds; i++) s[i] = 12345;
                    dtx_dot_rows(s, lds, x, k, ldk, n, d, 0.125f);
                    for (int64_t t = 0; t < n; t++) {
                        double want = 0, mag = 0;
                        for (int64_t c = 0; c < d; c++) want += (double)x[c] * k[t * ldk + c], mag += fabs(x[c] * k[t * ldk + c]);
                        worst = fmax(worst, fabs(s[t * lds] - 0.125 * want) / (0.125 * mag + 1e-30));
                        for (int64_t g = 1; g < lds; g++) CHECK(s[t * lds + g] == 12345); /* gaps untouched */
                    }
                    free(x), free(k), free(s);
                }
        CHECKF(worst < 1e-6, "dot_rows (%s): relative error %.3g", dtx_isa_name(lvl), worst);
    }
}

TEST(kernel_rowdot_axpy_rows) {
    dtx_rng r;
    dtx_rng_seed(&r, 912);
    static const int64_t ns[] = {1, 5, 16}, ws[] = {1, 7, 32, 64, 100, 128};
    FOR_EACH_ISA(lvl) {
        double worst = 0;
        for (int in = 0; in < 3; in++)
            for (int iw = 0; iw < 6; iw++) {
                int64_t n = ns[in], w = ws[iw], ldv = w + 5;
                float *p = randf(&r, (size_t)n), *v = randf(&r, (size_t)(n * ldv)), *y = randf(&r, (size_t)(w + 3));
                double *want = malloc(sizeof(double) * (size_t)(w + 3));
                for (int64_t c = 0; c < w + 3; c++) {
                    want[c] = y[c];
                    for (int64_t t = 0; c < w && t < n; t++) want[c] += (double)p[t] * v[t * ldv + c];
                }
                dtx_axpy_rows(y, w, p, v, ldv, n);
                for (int64_t c = 0; c < w + 3; c++) worst = fmax(worst, fabs(y[c] - want[c]) / (1 + fabs(want[c])));
                free(p), free(v), free(y), free(want);
            }
        CHECKF(worst < 1e-6, "axpy_rows (%s): error %.3g (columns past w must be untouched)", dtx_isa_name(lvl), worst);
    }
}

TEST(kernel_rowdot_gemv_fp32_and_bf16) {
    dtx_rng r;
    dtx_rng_seed(&r, 911);
    static const int64_t shapes[][2] = {{512, 512}, {13, 3}, {1408, 77}, {64, 8200}, {9, 1}};
    int saved = omp_get_max_threads();
    FOR_EACH_ISA(lvl) {
        for (int si = 0; si < 5; si++) {
            int64_t K = shapes[si][0], N = shapes[si][1];
            float *x = randf(&r, (size_t)K), *w = randf(&r, (size_t)(N * K));
            float *o1 = malloc(sizeof(float) * (size_t)N), *o2 = malloc(sizeof(float) * (size_t)N);
            uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K));
            float *xr = malloc(sizeof(float) * (size_t)K);
            for (int64_t i = 0; i < N * K; i++) wb[i] = dtx_f32_to_bf16(w[i]);
            for (int64_t i = 0; i < K; i++) xr[i] = dtx_bf16_to_f32(dtx_f32_to_bf16(x[i]));
            double worst = 0, worst_b = 0;
            omp_set_num_threads(saved);
            dtx_gemv(o1, x, w, K, N);
            omp_set_num_threads(1);
            dtx_gemv(o2, x, w, K, N);
            CHECKF(memcmp(o1, o2, sizeof(float) * (size_t)N) == 0, "gemv %lldx%lld (%s): thread count changed bits",
                   (long long)K, (long long)N, dtx_isa_name(lvl));
            for (int64_t n = 0; n < N; n++) {
                double want = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) want += (double)x[k] * w[n * K + k], mag += fabs(x[k] * w[n * K + k]);
                worst = fmax(worst, fabs(o1[n] - want) / mag);
            }
            omp_set_num_threads(saved);
            dtx_gemv_bf16(o1, xr, wb, K, N);
            for (int64_t n = 0; n < N; n++) {
                double want = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)xr[k] * dtx_bf16_to_f32(wb[n * K + k]);
                    want += p, mag += fabs(p);
                }
                worst_b = fmax(worst_b, fabs(o1[n] - want) / mag);
            }
            CHECKF(worst < 1e-6 && worst_b < 1e-6, "gemv %lldx%lld (%s): fp32 %.3g, bf16 %.3g", (long long)K,
                   (long long)N, dtx_isa_name(lvl), worst, worst_b);
            free(x), free(w), free(o1), free(o2), free(wb), free(xr);
        }
    }
    omp_set_num_threads(saved);
}
