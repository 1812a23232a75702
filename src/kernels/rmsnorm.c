/* RMSNorm over rows: out = x · rstd ⊙ w with rstd = 1/sqrt(mean(x²) + eps).
 * Row statistics are summed in double even in the float build (vectorised:
 * the floats are widened lane by lane), so a row of thousands of elements
 * loses nothing to the summation; the elementwise parts are in `real`.
 * Loops are vectorised by `omp simd` rather than restrict, so the forward's
 * out may be x (each row is read, then written, by one thread). The
 * backward's dx must not overlap dout or x (asserted): dx accumulates, so an
 * alias would be a wrong result, and the dw pass of another thread reads
 * dout and x rows while dx rows are written (no barrier between the passes). */
#include "common/profile.h"
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>

/* dw is summed over column blocks of this width (one double accumulator per
 * column, kept in registers/L1 while a block of rows streams past). */
enum { COL_BLOCK = 64 };
/* The backward walks rows in blocks of about this many elements: the rows
 * the dx pass just read are still in cache when the dw pass reads them. */
#define ROW_BLOCK_ELEMS ((int64_t)1 << 16)

/* Σ x² over one row, in double. */
static double row_sumsq(const real *restrict x, int64_t C) {
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; c++) ss += (double)x[c] * (double)x[c];
    return ss;
}

/* out [C] = x · r ⊙ w for one row. */
static void row_scale(real *out, const real *x, const real *w, real r, int64_t C) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++) out[c] = x[c] * r * w[c];
}

/* One row: *rstd and out [C] from x [C]. */
static void rmsnorm_row(real *out, real *rstd, const real *x, const real *w, int64_t C, double eps) {
    double r = 1.0 / sqrt(row_sumsq(x, C) / (double)C + eps);
    *rstd = (real)r;
    row_scale(out, x, w, (real)r, C);
}

/* out [M, C], rstd [M], x [M, C], w [C] */
static void rmsnorm_forward_run(real *out, real *rstd, const real *x, const real *w, int64_t M, int64_t C,
                                double eps) {
    assert(out && rstd && x && w && M >= 0 && C > 0);
    DTX_PAR_FOR(M * C, i, M, rmsnorm_row(out + i * C, rstd + i, x + i * C, w, C, eps));
}

void dtx_rmsnorm_forward(real *out, real *rstd, const real *x, const real *w, int64_t M, int64_t C,
                         double eps) {
    DTX_PROF(DTX_PROF_NORM, 0, rmsnorm_forward_run(out, rstd, x, w, M, C, eps));
}

/* Σ g ⊙ w ⊙ x over one row, in double. */
static double row_gwx(const real *restrict g, const real *restrict w, const real *restrict x, int64_t C) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++) s += (double)g[c] * (double)w[c] * (double)x[c];
    return s;
}

/* One row of dx [C] += r·g⊙w − x·(r²·mean(g⊙w⊙x)): the textbook
 * rstd · (g⊙w − x̂ · mean(g⊙w⊙x̂)) with x̂ = x·rstd, regrouped so the pass
 * over the row is two products per element. */
static void rmsnorm_backward_row(real *dx, const real *g, const real *x, const real *w, double r, int64_t C) {
    double m = row_gwx(g, w, x, C) / (double)C;
    real a = (real)r, k = (real)(r * r * r * m);
#pragma omp simd
    for (int64_t c = 0; c < C; c++) dx[c] += a * g[c] * w[c] - x[c] * k;
}

/* dw [c0, c0+n) += Σ_{i0 ≤ i < i1} g ⊙ x · rstd[i], rows in order, so each
 * column's sum has one fixed order whatever the thread count. g·x is one
 * rounding in `real`; the scaling and the sum are in double. */
static void rmsnorm_backward_dw_block(real *dw, const real *dout, const real *x, const real *rstd,
                                      int64_t C, int64_t c0, int64_t n, int64_t i0, int64_t i1) {
    double acc[COL_BLOCK] = {0};
    for (int64_t i = i0; i < i1; i++) {
        const real *restrict xi = x + i * C + c0, *restrict gi = dout + i * C + c0;
        double r = rstd[i];
#pragma omp simd
        for (int64_t c = 0; c < n; c++) acc[c] += (double)(gi[c] * xi[c]) * r;
    }
    for (int64_t c = 0; c < n; c++) dw[c0 + c] += (real)acc[c];
}

/* dx [M, C] += ..., dw [C] += Σ_rows dout ⊙ x·rstd  (dw optional)
 * With dw, rows go by blocks: threads split the block's rows for dx, then its
 * column blocks for dw while those rows are still in cache. No barrier is
 * needed between the two (dw reads only inputs); a static schedule gives a
 * thread the same column blocks in every row block (OpenMP guarantees it for
 * loops of equal trip count in one parallel region), so dw's updates never
 * race and each column is summed in row order. */
static void rmsnorm_backward_run(real *dx, real *dw, const real *dout, const real *x, const real *w,
                                 const real *rstd, int64_t M, int64_t C) {
    assert(dx && dout && x && w && rstd && M >= 0 && C > 0);
    assert(!dtx_overlaps(dx, dout, (size_t)(M * C) * sizeof(real)) && !dtx_overlaps(dx, x, (size_t)(M * C) * sizeof(real)));
    if (!dw) {
        DTX_PAR_FOR(M * C, i, M, rmsnorm_backward_row(dx + i * C, dout + i * C, x + i * C, w, rstd[i], C));
        return;
    }
    int64_t rb = ROW_BLOCK_ELEMS / C > 1 ? ROW_BLOCK_ELEMS / C : 1;
    int64_t ncb = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel if (M * C >= DTX_PAR_MIN)
    for (int64_t i0 = 0; i0 < M; i0 += rb) {
        int64_t i1 = i0 + rb < M ? i0 + rb : M;
#pragma omp for schedule(static) nowait
        for (int64_t i = i0; i < i1; i++)
            rmsnorm_backward_row(dx + i * C, dout + i * C, x + i * C, w, rstd[i], C);
#pragma omp for schedule(static) nowait
        for (int64_t cb = 0; cb < ncb; cb++) {
            int64_t c0 = cb * COL_BLOCK, n = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
            rmsnorm_backward_dw_block(dw, dout, x, rstd, C, c0, n, i0, i1);
        }
    }
}

void dtx_rmsnorm_backward(real *dx, real *dw, const real *dout, const real *x, const real *w,
                          const real *rstd, int64_t M, int64_t C) {
    DTX_PROF(DTX_PROF_NORM, 1, rmsnorm_backward_run(dx, dw, dout, x, w, rstd, M, C));
}
