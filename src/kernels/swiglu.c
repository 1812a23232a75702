/* Elementwise kernels of the block: the SwiGLU gate and the residual add.
 * Each is one vectorised pass (`omp simd`, not restrict: an output may alias
 * an input at the same index); σ uses dtx_vexpf in the float build (libm exp
 * in the double build), and the threads split the range only when it is
 * large enough to pay for waking them. Every element is computed the same way
 * whichever thread or lane handles it, so results do not depend on the
 * thread count. */
#include "common/profile.h"
#include "kernels/kernels.h"
#include "kernels/vexp.h"

#include <assert.h>
#include <math.h>

/* Elements per parallel chunk: whole cache lines, many vector iterations. */
enum { CHUNK = 4096 };
static inline int64_t n_chunks(int64_t n) { return (n + CHUNK - 1) / CHUNK; }
static inline int64_t chunk_len(int64_t n, int64_t c) { return n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK; }

#ifdef DTX_DOUBLE
#define EXP_R(x) exp(x)
#else
#define EXP_R(x) dtx_vexpf(x)
#endif

/* x as a bf16 value (round_bf16 variants; the float build only). */
static inline real rnd(real x) {
#ifdef DTX_DOUBLE
    return x;
#else
    return dtx_bf16_round_f32(x);
#endif
}

/* σ(a) = 1/(1 + e^−a): stable for both signs (e^−a → inf gives 0). */
static inline real sigmoid_r(real a) { return (real)1 / ((real)1 + EXP_R(-a)); }

/* out [n] = silu(a) ⊙ b on one chunk (rounded to bf16 when round). */
static void swiglu_fwd_chunk(real *out, const real *a, const real *b, int64_t n, int round) {
    if (round) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) out[i] = rnd(a[i] * sigmoid_r(a[i]) * b[i]);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * sigmoid_r(a[i]) * b[i];
}

static void swiglu_forward_r_run(real *out, const real *a, const real *b, int64_t n, int round_bf16) {
    assert(out && a && b && n >= 0);
    DTX_PAR_FOR(n, c, n_chunks(n),
                swiglu_fwd_chunk(out + c * CHUNK, a + c * CHUNK, b + c * CHUNK, chunk_len(n, c), round_bf16));
}

void dtx_swiglu_forward_r(real *out, const real *a, const real *b, int64_t n, int round_bf16) {
    DTX_PROF(DTX_PROF_SWIGLU, 0, swiglu_forward_r_run(out, a, b, n, round_bf16));
}

/* out [n] = silu(a) ⊙ b, silu(a) = a·σ(a).   a, b [n] */
void dtx_swiglu_forward(real *out, const real *a, const real *b, int64_t n) { dtx_swiglu_forward_r(out, a, b, n, 0); }

/* The backward on one chunk; see dtx_swiglu_backward. */
static void swiglu_bwd_chunk(real *da, real *db, const real *dout, const real *a, const real *b, int64_t n, int round) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        real x = a[i], e = EXP_R(-x), s = (real)1 / ((real)1 + e), gs = dout[i] * s;
        /* 1 − σ(x) = e·σ(x) for x ≥ 0 (e ≤ 1): 1 − s would cancel when s ≈ 1 */
        real oms = x < 0 ? (real)1 - s : e * s;
        da[i] += gs * b[i] * ((real)1 + x * oms);
        db[i] += gs * x;
    }
    if (round) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) da[i] = rnd(da[i]), db[i] = rnd(db[i]);
    }
}

/* da [n] += dout ⊙ b ⊙ silu'(a), silu'(a) = σ(a)·(1 + a·(1 − σ(a)));
 * db [n] += dout ⊙ silu(a). */
static void swiglu_backward_r_run(real *da, real *db, const real *dout, const real *a, const real *b, int64_t n,
                                  int round_bf16) {
    assert(da && db && dout && a && b && n >= 0);
    DTX_PAR_FOR(n, c, n_chunks(n),
                swiglu_bwd_chunk(da + c * CHUNK, db + c * CHUNK, dout + c * CHUNK, a + c * CHUNK, b + c * CHUNK,
                                 chunk_len(n, c), round_bf16));
}

void dtx_swiglu_backward_r(real *da, real *db, const real *dout, const real *a, const real *b, int64_t n,
                           int round_bf16) {
    DTX_PROF(DTX_PROF_SWIGLU, 1, swiglu_backward_r_run(da, db, dout, a, b, n, round_bf16));
}

void dtx_swiglu_backward(real *da, real *db, const real *dout, const real *a, const real *b, int64_t n) {
    dtx_swiglu_backward_r(da, db, dout, a, b, n, 0);
}

/* out [n] = a + b (out may alias a or b: each element is read before it is
 * written, and a vector iteration reads all its lanes before storing). */
static void residual_chunk(real *o, const real *x, const real *y, int64_t m) {
#pragma omp simd
    for (int64_t i = 0; i < m; i++) o[i] = x[i] + y[i];
}

static void residual_forward_run(real *out, const real *a, const real *b, int64_t n) {
    assert(out && a && b && n >= 0);
    DTX_PAR_FOR(n, c, n_chunks(n), residual_chunk(out + c * CHUNK, a + c * CHUNK, b + c * CHUNK, chunk_len(n, c)));
}

void dtx_residual_forward(real *out, const real *a, const real *b, int64_t n) {
    DTX_PROF(DTX_PROF_RESIDUAL, 0, residual_forward_run(out, a, b, n));
}
