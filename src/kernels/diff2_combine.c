/* DIFF V2's head pairs (spec §8.1, interop.md "DIFF V2"): one ordinary
 * attention over 2h query heads, then output head i = a_{2i} − σ(λ_i)·a_{2i+1}
 * with λ one value per token and head. The pair's combination is this
 * kernel, outside the attention kernels, so that every attention path
 * (plain, flash, cached decode, bf16, quantised logits) serves V2 unchanged.
 * Rows are independent; the threads split them when there are enough
 * (DTX_PAR_FOR). */
#include "common/profile.h"
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>

/* σ(a) in double: stable for both signs. */
static inline double sigmoid_d(double a) {
    if (a >= 0) return 1 / (1 + exp(-a));
    double e = exp(a);
    return e / (1 + e);
}

/* λ of one token and head from its logit a, and dλ/da. */
static inline double lambda_of(dtx_v2_lambda mode, const real *l, int64_t i, double *slope) {
    if (mode == DTX_V2_LAMBDA_NONE) return *slope = 0, 1.0;
    double a = (double)l[i];
    if (mode == DTX_V2_LAMBDA_LINEAR) return *slope = 1, a;
    double s = sigmoid_d(a);
    *slope = s * (1 - s);
    return s;
}

/* Row t of the forward. */
static void combine_row(real *out, const real *A, const real *l, int64_t t, int64_t h, int64_t d, dtx_v2_lambda mode) {
    for (int64_t i = 0; i < h; i++) {
        const real *a1 = A + (t * 2 * h + 2 * i) * d, *a2 = a1 + d;
        double slope;
        real s = (real)lambda_of(mode, l, t * h + i, &slope), *o = out + (t * h + i) * d;
#pragma omp simd
        for (int64_t c = 0; c < d; c++) o[c] = a1[c] - s * a2[c];
    }
}

static void diff2_combine_forward_run(real *out, const real *A, const real *l, int64_t N, int64_t h, int64_t d,
                                      dtx_v2_lambda mode) {
    assert(out && A && (l || mode == DTX_V2_LAMBDA_NONE) && N >= 0 && h > 0 && d > 0);
    DTX_PAR_FOR(N * 2 * h * d, t, N, combine_row(out, A, l, t, h, d, mode));
}

void dtx_diff2_combine_forward(real *out, const real *A, const real *l, int64_t N, int64_t h, int64_t d,
                               dtx_v2_lambda mode) {
    DTX_PROF(DTX_PROF_ATTENTION, 0, diff2_combine_forward_run(out, A, l, N, h, d, mode));
}

/* Row t of the backward. */
static void combine_backward_row(real *dA, real *dl, const real *dout, const real *A, const real *l, int64_t t,
                                 int64_t h, int64_t d, dtx_v2_lambda mode) {
    for (int64_t i = 0; i < h; i++) {
        const real *a2 = A + (t * 2 * h + 2 * i + 1) * d, *g = dout + (t * h + i) * d;
        real *d1 = dA + (t * 2 * h + 2 * i) * d, *d2 = d1 + d;
        double slope, s = lambda_of(mode, l, t * h + i, &slope), dot = 0;
        for (int64_t c = 0; c < d; c++) {
            d1[c] = g[c];
            d2[c] = (real)(-s * (double)g[c]);
            dot += (double)g[c] * (double)a2[c];
        }
        if (mode != DTX_V2_LAMBDA_NONE) dl[t * h + i] = (real)(-slope * dot);
    }
}

static void diff2_combine_backward_run(real *dA, real *dl, const real *dout, const real *A, const real *l, int64_t N,
                                       int64_t h, int64_t d, dtx_v2_lambda mode) {
    assert(dA && dout && A && (mode == DTX_V2_LAMBDA_NONE || (dl && l)) && N >= 0 && h > 0 && d > 0);
    DTX_PAR_FOR(N * 2 * h * d, t, N, combine_backward_row(dA, dl, dout, A, l, t, h, d, mode));
}

void dtx_diff2_combine_backward(real *dA, real *dl, const real *dout, const real *A, const real *l, int64_t N,
                                int64_t h, int64_t d, dtx_v2_lambda mode) {
    DTX_PROF(DTX_PROF_ATTENTION, 1, diff2_combine_backward_run(dA, dl, dout, A, l, N, h, d, mode));
}
