/* RMSNorm over rows: out = x · rstd ⊙ w with rstd = 1/sqrt(mean(x²) + eps).
 * Row statistics are summed in double even in the float build. */
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>

enum { COL_BLOCK = 64 };

/* out [M, C], rstd [M], x [M, C], w [C] */
void dtx_rmsnorm_forward(real *out, real *rstd, const real *x, const real *w, int64_t M, int64_t C,
                         double eps) {
    assert(out && rstd && x && w && M >= 0 && C > 0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++) {
        const real *xi = x + i * C;
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)xi[c] * xi[c];
        double r = 1.0 / sqrt(ss / (double)C + eps);
        rstd[i] = (real)r;
        real *oi = out + i * C;
        for (int64_t c = 0; c < C; c++) oi[c] = (real)(xi[c] * r * w[c]);
    }
}

/* dx [M, C] += rstd · (g − x̂ · mean(g ⊙ x̂)) with g = dout ⊙ w, x̂ = x · rstd. */
static void rmsnorm_backward_dx(real *dx, const real *dout, const real *x, const real *w,
                                const real *rstd, int64_t M, int64_t C) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++) {
        const real *xi = x + i * C, *gi = dout + i * C;
        double r = rstd[i], m = 0;
        for (int64_t c = 0; c < C; c++) m += (double)gi[c] * w[c] * xi[c];
        m *= r / (double)C; /* mean(g ⊙ x̂) */
        real *dxi = dx + i * C;
        for (int64_t c = 0; c < C; c++) dxi[c] += (real)(r * ((double)gi[c] * w[c] - xi[c] * r * m));
    }
}

/* dw [C] += Σ_rows dout ⊙ x · rstd. Threads own column blocks and sum the
 * rows in order, so the result is race-free and deterministic. */
static void rmsnorm_backward_dw(real *dw, const real *dout, const real *x, const real *rstd,
                                int64_t M, int64_t C) {
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += COL_BLOCK) {
        int64_t n = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
        double acc[COL_BLOCK] = {0};
        for (int64_t i = 0; i < M; i++) {
            const real *xi = x + i * C + c0, *gi = dout + i * C + c0;
            double r = rstd[i];
            for (int64_t c = 0; c < n; c++) acc[c] += (double)gi[c] * xi[c] * r;
        }
        for (int64_t c = 0; c < n; c++) dw[c0 + c] += (real)acc[c];
    }
}

/* dx [M, C] += ..., dw [C] += Σ_rows dout ⊙ x·rstd  (dw optional) */
void dtx_rmsnorm_backward(real *dx, real *dw, const real *dout, const real *x, const real *w,
                          const real *rstd, int64_t M, int64_t C) {
    assert(dx && dout && x && w && rstd && M >= 0 && C > 0);
    rmsnorm_backward_dx(dx, dout, x, w, rstd, M, C);
    if (dw) rmsnorm_backward_dw(dw, dout, x, rstd, M, C);
}
