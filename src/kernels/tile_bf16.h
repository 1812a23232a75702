/* bf16 tile products for the flash attention's bf16 mode (issue 3): bf16
 * operands, fp32 accumulation and fp32 results, as the bf16 matmuls do.
 *
 * The products use AVX-512 BF16's pair dot product (vdpbf16ps: each fp32
 * lane gains a0·b0 + a1·b1), so both operands come in bf16 layouts that keep
 * the two elements of a contraction pair (kk, kk+1) in one 32-bit word:
 *   A operand ("rows"): plain row-major bf16, A(r, kk) = A[r·lda + kk], with
 *     an even row stride; a pair is then two neighbours of a row.
 *   B operand ("pair-packed"): rows kk and kk+1 interleaved, B(kk, n) =
 *     Bp[(kk/2)·2·ldp + 2n + (kk mod 2)], ldp ≥ N words per pair row.
 * An odd contraction length K is padded to K + 1: the packers below write a
 * zero column (A) or a zero row (B) there, which the products read.
 *
 * Rounding to bf16 is round-to-nearest-even (dtx_f32_to_bf16, common.h;
 * the AVX-512 BF16 conversions also flush denormal inputs, which never
 * matter here: exp already flushes below FLT_MIN). The AVX-512 BF16 path runs
 * at ISA level DTX_ISA_AVX512_BF16 (dtx_isa_level()); a portable path
 * (plain C, fp32 arithmetic on the rounded values) computes the same values
 * up to the order of fp32 additions. Float build only: the double build
 * never takes the bf16 mode. Internal header. */
#ifndef DTX_TILE_BF16_H
#define DTX_TILE_BF16_H

#include "common/common.h"
#include "kernels/tile_gemm.h"

typedef uint16_t dtx_bf16;

/* 1 when the level's table (simd.h) has native bf16 tiles (the float
 * build at ISA level DTX_ISA_AVX512_BF16). */
int dtx_tile_bf16_simd(void);

/* A operand: dst[r·ldd + c] = bf16(src[r·sr + c·sc]) for r < rows, c < cols,
 * and dst[r·ldd + cols] = 0 when cols is odd. ldd must be even. The common
 * cases are fast: sc = 1 (rows of src) and sr = 1 (a transpose). */
void dtx_bf16_pack_a(dtx_bf16 *dst, int64_t ldd, const float *src, int64_t sr, int64_t sc, int64_t rows,
                     int64_t cols);

/* B operand of src: B(kk, n) = src[kk·lds + n] for kk < rows, n < cols,
 * pair-packed with ldp words per pair row; an odd rows gets a zero pad row. */
void dtx_bf16_pack_b(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols);

/* B operand of srcᵀ: B(kk, n) = src[n·lds + kk] for kk < cols, n < rows
 * (so the product contracts over src's columns), pair-packed with ldp words
 * per pair row; an odd cols gets a zero pad row. */
void dtx_bf16_pack_bt(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols);

/* C [M × N] (row stride ldc) = A·B (acc = 0) or += A·B (acc = 1), A and B in
 * the layouts above (A 4-byte aligned, lda even; B at a pair-row boundary).
 * tri, diag: the causal shortcuts of dtx_tile_gemm_tri. The contraction
 * limits they give widen to whole pairs, which only reads entries of A the
 * caller promises are zero (or the zero pad). */
void dtx_bf16_gemm_tri(int64_t M, int64_t N, int64_t K, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B,
                       int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);

#endif
