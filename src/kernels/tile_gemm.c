/* Tile products, vector exp and the flash softmax row steps (see
 * tile_gemm.h): the portable implementations, and the entry points, which
 * call the implementation of the ISA level in use through one table
 * (simd.h; simd_avx2.c, simd_avx512.c).
 *
 * Portable path: plain C loops (the compiler vectorises the inner column
 * loop) and libm exp. It is the reference the SIMD paths are tested against,
 * and the only path of the double build. */
#include "kernels/tile_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

/* ---------------------------------------------------------- portable path */

static real exp_r(real x) {
#ifdef DTX_DOUBLE
    return exp(x);
#else
    return expf(x);
#endif
}

/* C [M×N] (=|+=) A·B, one C row at a time: the inner loop over n is a plain
 * axpy the compiler vectorises. Causal limits per row (see dtx_tri). */
void dtx_tile_gemm_portable(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac,
                          const real *B, int64_t ldb, real *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag) {
    for (int64_t r = 0; r < M; r++) {
        real *c = C + r * ldc;
        int64_t ne = tri == DTX_TRI_N_HI ? tile_valid_cols(diag, r, N) : N;
        int64_t kb = tri == DTX_TRI_K_LO ? tile_clamp64(r - diag, 0, K) : 0;
        int64_t ke = tri == DTX_TRI_K_HI ? tile_clamp64(diag + r + 1, 0, K) : K;
        if (!acc) memset(c, 0, sizeof(real) * (size_t)ne);
        for (int64_t kk = kb; kk < ke; kk++) {
            real a = A[r * sar + kk * sac];
            const real *b = B + kk * ldb;
#pragma omp simd
            for (int64_t n = 0; n < ne; n++) c[n] += a * b[n];
        }
    }
}

void dtx_tile_softmax_update_portable(real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale,
                                    real *m, real *l, real *alpha) {
    for (int64_t r = 0; r < M; r++) {
        real *s = S + r * ld;
        int64_t nv = tile_valid_cols(diag, r, N);
        if (nv == 0) {
            memset(s, 0, sizeof(real) * (size_t)N);
            alpha[r] = 1;
            continue;
        }
        real mx = s[0];
        for (int64_t c = 1; c < nv; c++) mx = s[c] > mx ? s[c] : mx;
        real mn = mx * scale > m[r] ? mx * scale : m[r];
        double sum = 0;
        for (int64_t c = 0; c < nv; c++) sum += (s[c] = exp_r(s[c] * scale - mn));
        for (int64_t c = nv; c < N; c++) s[c] = 0;
        alpha[r] = exp_r(m[r] - mn); /* m = −∞ on the first tile: alpha = 0 */
        l[r] = (real)(l[r] * alpha[r] + sum);
        m[r] = mn;
    }
}

void dtx_tile_exp_rows_portable(real *P, const real *S, int64_t ld, int64_t M, int64_t N, int64_t diag,
                              real scale, const real *lse) {
    for (int64_t r = 0; r < M; r++) {
        int64_t nv = tile_valid_cols(diag, r, N);
        const real *s = S + r * ld;
        real *p = P + r * ld, b = lse[r];
        for (int64_t c = 0; c < nv; c++) p[c] = exp_r(s[c] * scale - b);
        for (int64_t c = nv; c < N; c++) p[c] = 0;
    }
}

/* ------------------------------------------------------------ dispatch */

/* Portable: 8×8 blocks so that both the reads and the writes stay within a
 * few lines. */
void dtx_tile_transpose_portable(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            int64_t r1 = tile_min64(rows, r0 + 8), c1 = tile_min64(cols, c0 + 8);
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

void dtx_tile_exp_portable(real *y, const real *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = exp_r(x[i]);
}

dtx_isa dtx_tile_isa(void) {
#if DTX_SIMD_X86
    return dtx_isa_level();
#else
    return DTX_ISA_PORTABLE;
#endif
}

static inline const dtx_simd_ops *ops(void) { return dtx_simd(); }

/* ------------------------------------------------------------ entry points */

void dtx_tile_gemm_tri(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac,
                       const real *B, int64_t ldb, real *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag) {
    if (M <= 0 || N <= 0) return;
    ops()->gemm_tri(M, N, K, A, sar, sac, B, ldb, C, ldc, acc, tri, diag);
}

void dtx_tile_gemm(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac,
                   const real *B, int64_t ldb, real *C, int64_t ldc, int acc) {
    dtx_tile_gemm_tri(M, N, K, A, sar, sac, B, ldb, C, ldc, acc, DTX_TRI_NONE, 0);
}

void dtx_tile_transpose(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols) {
    ops()->transpose(dst, ldd, src, lds, rows, cols);
}

void dtx_tile_exp(real *y, const real *x, int64_t n) { ops()->exp(y, x, n); }

void dtx_tile_softmax_update(real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale, real *m,
                             real *l, real *alpha) {
    ops()->softmax_update(S, ld, M, N, diag, scale, m, l, alpha);
}

void dtx_tile_exp_rows(real *P, const real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale,
                       const real *lse) {
    ops()->exp_rows(P, S, ld, M, N, diag, scale, lse);
}
