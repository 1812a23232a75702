/* Elementwise kernels of the block: the SwiGLU gate and the residual add. */
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>

/* σ(a) in double; 1/(1+e^−a) is stable for both signs (e^−a → inf gives 0). */
static inline double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

/* out [n] = silu(a) ⊙ b, silu(a) = a·σ(a).   a, b [n] */
void dtx_swiglu_forward(real *out, const real *a, const real *b, int64_t n) {
    assert(out && a && b && n >= 0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double x = a[i];
        out[i] = (real)(x * sigmoid(x) * b[i]);
    }
}

/* da [n] += dout ⊙ b ⊙ silu'(a), silu'(a) = σ(a)·(1 + a·(1 − σ(a)));
 * db [n] += dout ⊙ silu(a). */
void dtx_swiglu_backward(real *da, real *db, const real *dout, const real *a, const real *b, int64_t n) {
    assert(da && db && dout && a && b && n >= 0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], s = sigmoid(x), g = dout[i];
        da[i] += (real)(g * b[i] * s * (1.0 + x * (1.0 - s)));
        db[i] += (real)(g * x * s);
    }
}

/* out [n] = a + b (out may alias a or b: each element is read before it is written). */
void dtx_residual_forward(real *out, const real *a, const real *b, int64_t n) {
    assert(out && a && b && n >= 0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
