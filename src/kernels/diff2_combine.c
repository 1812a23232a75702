/* DIFF V2's head pairs (spec §8.1, interop.md "DIFF V2"): one ordinary
 * attention over 2h query heads, then output head i = a_{2i} − σ(λ_i)·a_{2i+1}
 * with λ one value per token and head. The pair's combination is this
 * kernel, outside the attention kernels, so that every attention path
 * (plain, flash, cached decode, bf16, quantised logits) serves V2 unchanged.
 * Rows are independent; the threads split them when there are enough. */
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>

#define PAR_MIN_ROWS 64

/* σ(a) in double: stable for both signs. */
static inline double sigmoid_d(double a) {
    if (a >= 0) return 1 / (1 + exp(-a));
    double e = exp(a);
    return e / (1 + e);
}

void dtx_diff2_combine_forward(real *out, const real *A, const real *l, int64_t N, int64_t h, int64_t d) {
    assert(out && A && l && N >= 0 && h > 0 && d > 0);
#pragma omp parallel for schedule(static) if (N >= PAR_MIN_ROWS)
    for (int64_t t = 0; t < N; t++)
        for (int64_t i = 0; i < h; i++) {
            const real *a1 = A + (t * 2 * h + 2 * i) * d, *a2 = a1 + d;
            real s = (real)sigmoid_d((double)l[t * h + i]), *o = out + (t * h + i) * d;
#pragma omp simd
            for (int64_t c = 0; c < d; c++) o[c] = a1[c] - s * a2[c];
        }
}

void dtx_diff2_combine_backward(real *dA, real *dl, const real *dout, const real *A, const real *l, int64_t N,
                                int64_t h, int64_t d) {
    assert(dA && dl && dout && A && l && N >= 0 && h > 0 && d > 0);
#pragma omp parallel for schedule(static) if (N >= PAR_MIN_ROWS)
    for (int64_t t = 0; t < N; t++)
        for (int64_t i = 0; i < h; i++) {
            const real *a2 = A + (t * 2 * h + 2 * i + 1) * d, *g = dout + (t * h + i) * d;
            real *d1 = dA + (t * 2 * h + 2 * i) * d, *d2 = d1 + d;
            double s = sigmoid_d((double)l[t * h + i]), dot = 0;
            for (int64_t c = 0; c < d; c++) {
                d1[c] = g[c];
                d2[c] = (real)(-s * (double)g[c]);
                dot += (double)g[c] * (double)a2[c];
            }
            dl[t * h + i] = (real)(-s * (1 - s) * dot);
        }
}
