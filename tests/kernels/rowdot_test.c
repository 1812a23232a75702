/* The one-row products' entry points (rowdot.c: dtx_gemv, dtx_gemv_bf16,
 * which split the rows over threads): the same bits at any thread count,
 * and the bits of the level's single-threaded kernel. The kernels themselves
 * (dot_rows, axpy_rows, gemv, gemv_bf16) at every ISA level against a
 * double reference: tests/kernels/simd_ops_test.c. */
#include "../test.h"
#include "kernels/kernels.h"
#include "kernels/simd.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *randf(dtx_rng *r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)dtx_rng_normal(r);
    return x;
}

TEST(kernel_rowdot_gemv_threads_do_not_change_bits) {
    dtx_rng r;
    dtx_rng_seed(&r, 911);
    /* 64 x 1003: many chunks and a last block of 3 rows, split over 2, 3 and
     * 5 threads (more than the cores: threads finish at different times and
     * take chunks from each other) */
    static const int64_t shapes[][2] = {{512, 512}, {13, 3}, {1408, 77}, {64, 8200}, {9, 1}, {64, 1003}};
    int saved = omp_get_max_threads();
    for (int si = 0; si < 6; si++) {
        int64_t K = shapes[si][0], N = shapes[si][1];
        float *x = randf(&r, (size_t)K), *w = randf(&r, (size_t)(N * K)), *o[3][2];
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K));
        for (int64_t i = 0; i < N * K; i++) wb[i] = dtx_f32_to_bf16(w[i]);
        for (int64_t i = 0; i < K; i++) x[i] = dtx_bf16_round_f32(x[i]);
        for (int t = 0; t < 3; t++)
            for (int b = 0; b < 2; b++) o[t][b] = malloc(sizeof(float) * (size_t)N);
        omp_set_num_threads(1);
        dtx_gemv(o[1][0], x, w, K, N);
        dtx_gemv_bf16(o[1][1], x, wb, K, N);
        dtx_simd()->gemv(o[2][0], x, w, K, N);
        dtx_simd()->gemv_bf16(o[2][1], x, wb, K, N);
        for (int nt = 2; nt <= 5; nt += nt == 2 ? 1 : 2) {
            omp_set_num_threads(nt);
            dtx_gemv(o[0][0], x, w, K, N);
            dtx_gemv_bf16(o[0][1], x, wb, K, N);
            for (int b = 0; b < 2; b++)
                CHECKF(!memcmp(o[0][b], o[1][b], sizeof(float) * (size_t)N) &&
                           !memcmp(o[1][b], o[2][b], sizeof(float) * (size_t)N),
                       "gemv%s %lldx%lld, %d threads: the thread count or the split changed bits", b ? "_bf16" : "",
                       (long long)K, (long long)N, nt);
        }
        for (int t = 0; t < 3; t++) free(o[t][0]), free(o[t][1]);
        free(x), free(w), free(wb);
    }
    omp_set_num_threads(saved);
}
