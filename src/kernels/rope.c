/* Rotary position embedding, interleaved pairs (2i, 2i+1) of every d-wide
 * sub-head, angle p·θ^(−2i/d) with p the absolute position.
 * The tables keep their [max_pos, d/2] layout: with restrict pointers gcc
 * vectorises the pair loop itself (even/odd lanes split and merged with
 * permutes), and the kernel is memory-bound, so duplicated [max_pos, d]
 * tables would only add table traffic. */
#include "common/profile.h"
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>


void dtx_rope_freqs(double *freq, int64_t d, double theta) {
    for (int64_t i = 0; i < d / 2; i++) freq[i] = pow(theta, -2.0 * (double)i / (double)d);
}

/* cos_t, sin_t [max_pos, d/2] of the frequencies freq [d/2]; computed in
 * double, then stored. */
void dtx_rope_table(real *cos_t, real *sin_t, int64_t max_pos, int64_t d, const double *freq) {
    assert(cos_t && sin_t && max_pos >= 0 && d > 0 && d % 2 == 0 && freq);
    int64_t half = d / 2;
    for (int64_t p = 0; p < max_pos; p++) {
        for (int64_t i = 0; i < half; i++) {
            double ang = (double)p * freq[i];
            cos_t[p * half + i] = (real)cos(ang);
            sin_t[p * half + i] = (real)sin(ang);
        }
    }
}

/* One position: every d-wide sub-head of row [n_sub·d] rotated by the
 * angles (c, s) [d/2]; pairs (2i, 2i+1) in place. */
static void rope_row(real *restrict row, const real *restrict c, const real *restrict s, int64_t n_sub,
                     int64_t d, real sign) {
    int64_t half = d / 2;
    for (int64_t j = 0; j < n_sub; j++) {
        real *restrict h = row + j * d;
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
            real x0 = h[2 * i], x1 = h[2 * i + 1], ci = c[i], si = sign * s[i];
            h[2 * i] = x0 * ci - x1 * si;
            h[2 * i + 1] = x1 * ci + x0 * si;
        }
    }
}

/* x [B, T, n_sub·d] in place; sign = +1 rotates by the angle, −1 by its
 * negative (the transpose, since the rotation is orthogonal). */
static void rope_apply(real *x, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                       int64_t pos0, int64_t n_sub, int64_t d, real sign) {
    assert(x && cos_t && sin_t && d % 2 == 0 && pos0 >= 0);
    int64_t half = d / 2, C = n_sub * d;
    DTX_PAR_FOR(B * T * C, r, B * T, /* row r: position pos0 + r % T */
                rope_row(x + r * C, cos_t + (pos0 + r % T) * half, sin_t + (pos0 + r % T) * half, n_sub, d, sign));
}

/* In place: x = R(p) x.   x [B, T, n_sub·d] */
static void rope_forward_run(real *x, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                             int64_t pos0, int64_t n_sub, int64_t d) {
    rope_apply(x, cos_t, sin_t, B, T, pos0, n_sub, d, (real)1);
}

void dtx_rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                      int64_t pos0, int64_t n_sub, int64_t d) {
    DTX_PROF(DTX_PROF_ROPE, 0, rope_forward_run(x, cos_t, sin_t, B, T, pos0, n_sub, d));
}

/* In place on a gradient: dx = R(p)ᵀ dx.   dx [B, T, n_sub·d] */
static void rope_backward_run(real *dx, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                              int64_t pos0, int64_t n_sub, int64_t d) {
    rope_apply(dx, cos_t, sin_t, B, T, pos0, n_sub, d, (real)-1);
}

void dtx_rope_backward(real *dx, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                       int64_t pos0, int64_t n_sub, int64_t d) {
    DTX_PROF(DTX_PROF_ROPE, 1, rope_backward_run(dx, cos_t, sin_t, B, T, pos0, n_sub, d));
}
