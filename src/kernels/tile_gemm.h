/* Tile-level building blocks of the fused flash attention (issue 3): a
 * register-blocked product C (=|+=) A·B whose A operand may be read with any
 * row/column strides (so Aᵀ costs nothing), a fast vector exp, and the
 * per-row softmax steps of the flash forward and backward.
 *
 * One implementation per ISA level sits behind each entry point (simd.h):
 * AVX-512 micro-kernels (simd_avx512.c), AVX2 + FMA ones (simd_avx2.c), both
 * in the fp32 build only, and a portable plain-C path (scalar /
 * auto-vectorised loops, libm exp) used below AVX2 and always in the double
 * build. The level is dtx_isa_level() (difftx.h: the CPU's, capped by
 * DTX_ISA or dtx_isa_set_cap), read at each call. All compute the same thing
 * in the same order of tiles; only rounding differs. Internal header: not
 * part of the public API. */
#ifndef DTX_TILE_GEMM_H
#define DTX_TILE_GEMM_H

#include "common/common.h"

/* The level whose kernels run now: dtx_isa_level() in the float build,
 * DTX_ISA_PORTABLE in the double build. */
dtx_isa dtx_tile_isa(void);

/* C [M × N] (row stride ldc) = A·B (acc = 0) or += A·B (acc = 1), where
 * A(r, kk) = A[r·sar + kk·sac] for r < M, kk < K (so a row-major A has
 * sar = lda, sac = 1 and Aᵀ of a row-major matrix has sar = 1, sac = lda)
 * and B [K × N] is row-major with row stride ldb. C must not overlap A or B. */
void dtx_tile_gemm(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac,
                   const real *B, int64_t ldb, real *C, int64_t ldc, int acc);

/* Causal tiles: what a product on a diagonal tile may skip. With diag =
 * q0 − k0 (see below), the caller promises zeros and the kernel skips them:
 *   DTX_TRI_N_HI: only C[r][c] with c ≤ diag + r are needed; the others are
 *                 unspecified on return (they may be left unwritten);
 *   DTX_TRI_K_HI: A(r, kk) = 0 for kk > diag + r (the contraction may stop);
 *   DTX_TRI_K_LO: A(r, kk) = 0 for kk < r − diag (the contraction may start
 *                 later; rows are keys and kk queries, as in Pᵀ·dO).        */
typedef enum { DTX_TRI_NONE = 0, DTX_TRI_N_HI, DTX_TRI_K_HI, DTX_TRI_K_LO } dtx_tri;
void dtx_tile_gemm_tri(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac,
                       const real *B, int64_t ldb, real *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);

/* dst[c·ldd + r] = src[r·lds + c] for r < rows, c < cols (a transpose). */
void dtx_tile_transpose(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols);

/* y [n] = exp(x) with the kernel's exp (AVX-512 and AVX2: Cody–Waite
 * reduction and a degree-7 polynomial, ~2 ulp; results below FLT_MIN flush
 * to 0; portable: libm). */
void dtx_tile_exp(real *y, const real *x, int64_t n);

/* Causal validity inside a tile: row r (query q0 + r) sees the tile's keys
 * c (key k0 + c) with c ≤ diag + r, diag = q0 − k0; the others are masked. */

/* Flash forward, one map, one key tile: S [M × N] (row stride ld) holds raw
 * scores q·k; with scaled scores z = scale·S, for every row:
 *   m_new = max(m[r], max_valid z);  alpha[r] = exp(m[r] − m_new);
 *   S[r][c] ← exp(z − m_new) (0 where masked);  l[r] = l[r]·alpha[r] + Σ_c S[r][c];
 *   m[r] = m_new.
 * A row with no valid key keeps m, l, gets alpha = 1 and an all-zero row. */
void dtx_tile_softmax_update(real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale, real *m,
                             real *l, real *alpha);

/* Flash backward recompute: P[r][c] = exp(scale·S[r][c] − lse[r]) where
 * valid, 0 where masked (P may alias S; both row stride ld). */
void dtx_tile_exp_rows(real *P, const real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale,
                       const real *lse);

#endif
