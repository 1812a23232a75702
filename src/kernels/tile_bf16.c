/* bf16 tile products and packers (see tile_bf16.h).
 *
 * AVX-512 BF16 path: the same register blocking as the fp32 tile product
 * (tile_gemm.c): a 6 × 64 block of C in 24 zmm accumulators; per contraction
 * pair one 64-wide pair row of B (4 vectors of 16 words) and one broadcast
 * word of A per row, 24 vdpbf16ps, i.e. twice the multiply-adds of an fp32
 * FMA step. Packers convert 16 or 32 floats at a time (vcvtne2ps2bf16) and
 * interleave or transpose 32-bit words in registers.
 *
 * Portable path: plain loops over the rounded values in fp32. Which runs is
 * the level's table (simd.h): the AVX-512 BF16 table has these kernels, the
 * others the portable ones. */
#include "kernels/tile_bf16.h"

#include <string.h>

#include "kernels/simd.h"
#include "kernels/tile_avx512.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* A 32-bit word that may alias the bf16 arrays (two packed values). */
typedef uint32_t word_t __attribute__((may_alias));

int dtx_tile_bf16_simd(void) { return dtx_simd()->bf16_gemm_tri != dtx_bf16_gemm_tri_portable; }

/* ---------------------------------------------------------- portable path */

void dtx_bf16_pack_a_portable(dtx_bf16 *dst, int64_t ldd, const float *src, int64_t sr, int64_t sc, int64_t rows,
                            int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) dst[r * ldd + c] = dtx_f32_to_bf16(src[r * sr + c * sc]);
        if (cols & 1) dst[r * ldd + cols] = 0;
    }
}

void dtx_bf16_pack_b_portable(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    for (int64_t kk = 0; kk < rows + (rows & 1); kk++)
        for (int64_t n = 0; n < cols; n++)
            dst[(kk / 2) * 2 * ldp + 2 * n + (kk & 1)] = kk < rows ? dtx_f32_to_bf16(src[kk * lds + n]) : 0;
}

void dtx_bf16_pack_bt_portable(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                             int64_t cols) {
    for (int64_t kk = 0; kk < cols + (cols & 1); kk++)
        for (int64_t n = 0; n < rows; n++)
            dst[(kk / 2) * 2 * ldp + 2 * n + (kk & 1)] = kk < cols ? dtx_f32_to_bf16(src[n * lds + kk]) : 0;
}

/* Contraction limits of row r (pairs widened), as in tile_gemm.c's gemm_portable. */
void dtx_bf16_gemm_tri_portable(int64_t M, int64_t N, int64_t K, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B,
                                int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag) {
    if (M <= 0 || N <= 0) return;
    int64_t K2 = K + (K & 1);
    for (int64_t r = 0; r < M; r++) {
        float *c = C + r * ldc;
        int64_t ne = tri == DTX_TRI_N_HI ? clamp64(diag + r + 1, 0, N) : N;
        int64_t kb = tri == DTX_TRI_K_LO ? clamp64(r - diag, 0, K) & ~(int64_t)1 : 0;
        int64_t ke = tri == DTX_TRI_K_HI ? clamp64(diag + r + 1, 0, K) : K;
        ke = min64(ke + (ke & 1), K2);
        if (!acc) memset(c, 0, sizeof(float) * (size_t)ne);
        for (int64_t kk = kb; kk < ke; kk += 2) {
            float a0 = dtx_bf16_to_f32(A[r * lda + kk]), a1 = dtx_bf16_to_f32(A[r * lda + kk + 1]);
            const dtx_bf16 *b = B + (kk / 2) * 2 * ldp;
            for (int64_t n = 0; n < ne; n++)
                c[n] += a0 * dtx_bf16_to_f32(b[2 * n]) + a1 * dtx_bf16_to_f32(b[2 * n + 1]);
        }
    }
}

/* ----------------------------------------------------- AVX-512 BF16 path */
#if TILE_AVX512

#define BF16_TARGET AVX512_TARGET ",avx512bf16"
#define BF16_FN __attribute__((target(BF16_TARGET)))
#define BF16_INLINE static inline __attribute__((always_inline, target(BF16_TARGET)))

enum { MR = 6, NVMAX = 4, NB = 16 * NVMAX };

/* 16 floats → 16 bf16 (one ymm), masked load. */
BF16_INLINE __m256i cvt16(const float *p, __mmask16 k) {
    return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, p));
}

BF16_FN static void pack_a_rows(dtx_bf16 *dst, int64_t ldd, const float *src, int64_t sr, int64_t rows,
                                int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + r * sr;
        dtx_bf16 *d = dst + r * ldd;
        for (int64_t c = 0; c < cols; c += 16) {
            __mmask16 k = lanes(cols - c);
            _mm256_mask_storeu_epi16(d + c, k, cvt16(s + c, k));
        }
        if (cols & 1) d[cols] = 0;
    }
}

/* A(r, c) = src[c·sc + r]: 16×16 blocks of src (rows c) transposed in
 * registers, each result row converted and stored. */
BF16_FN static void pack_a_trans(dtx_bf16 *dst, int64_t ldd, const float *src, int64_t sc, int64_t rows,
                                 int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            int64_t nr = min64(16, rows - r0), nc = min64(16, cols - c0);
            __mmask16 kr = lanes(nr), kc = lanes(nc);
            __m512 x[16];
            load_tr16(x, src + c0 * sc + r0, sc, nc, kr);
            for (int64_t j = 0; j < nr; j++)
                _mm256_mask_storeu_epi16(dst + (r0 + j) * ldd + c0, kc, (__m256i)_mm512_cvtneps_pbh(x[j]));
        }
    if (cols & 1)
        for (int64_t r = 0; r < rows; r++) dst[r * ldd + cols] = 0;
}

/* Pair rows: rows 2u and 2u+1 converted together (low and high halves of
 * one vector), then interleaved word by word. */
BF16_FN static void pack_b_avx(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                               int64_t cols) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                         6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t kk = 0; kk < rows; kk += 2) {
        const float *s0 = src + kk * lds, *s1 = s0 + lds;
        int has1 = kk + 1 < rows;
        dtx_bf16 *d = dst + (kk / 2) * 2 * ldp;
        for (int64_t n = 0; n < cols; n += 16) {
            __mmask16 k = lanes(cols - n);
            __m512 x0 = _mm512_maskz_loadu_ps(k, s0 + n);
            __m512 x1 = has1 ? _mm512_maskz_loadu_ps(k, s1 + n) : _mm512_setzero_ps();
            __m512i y = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
            _mm512_mask_storeu_epi32(d + 2 * n, k, y);
        }
    }
}

/* src rows n: 32 floats (16 pairs) each converted to one vector of 16 words;
 * 16 rows of words transposed in registers, word row j = pair j. */
BF16_FN static void pack_bt_avx(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                                int64_t cols) {
    int64_t npair = (cols + 1) / 2;
    for (int64_t n0 = 0; n0 < rows; n0 += 16)
        for (int64_t p0 = 0; p0 < npair; p0 += 16) {
            int64_t nn = min64(16, rows - n0), np = min64(16, npair - p0), c0 = 2 * p0;
            __mmask16 klo = lanes(cols - c0), khi = lanes(cols - c0 - 16);
            __m512 x[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                if (i < nn) {
                    const float *s = src + (n0 + i) * lds + c0;
                    __m512 lo = _mm512_maskz_loadu_ps(klo, s), hi = _mm512_maskz_loadu_ps(khi, s + 16);
                    x[i] = (__m512)_mm512_cvtne2ps_pbh(hi, lo);
                } else x[i] = _mm512_setzero_ps();
            }
            tr16(x);
            __mmask16 kn = lanes(nn);
            for (int64_t j = 0; j < np; j++) _mm512_mask_storeu_ps((word_t *)dst + (p0 + j) * ldp + n0, kn, x[j]);
        }
}

/* The micro-kernel: C[mr × 16·nv] (=|+=) A·B over KP pairs. */
BF16_INLINE void bmk_body(const int mr, const int nv, int64_t KP, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B,
                          int64_t ldp, float *C, int64_t ldc, __mmask16 ml, int acc) {
    __m512 c[MR][NVMAX];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) c[i][v] = _mm512_setzero_ps();
    const word_t *a0 = (const word_t *)A, *b0 = (const word_t *)B;
    int64_t lw = lda / 2;
    for (int64_t kp = 0; kp < KP; kp++) {
        const word_t *bp = b0 + kp * ldp, *ap = a0 + kp;
        __m512i b[NVMAX];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            b[v] = v == nv - 1 ? _mm512_maskz_loadu_epi32(ml, bp + 16 * v) : _mm512_loadu_si512(bp + 16 * v);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            __m512i a = _mm512_set1_epi32((int)ap[i * lw]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) c[i][v] = _mm512_dpbf16_ps(c[i][v], (__m512bh)a, (__m512bh)b[v]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            float *cp = C + i * ldc + 16 * v;
            __mmask16 k = v == nv - 1 ? ml : (__mmask16)0xFFFF;
            __m512 x = acc ? _mm512_add_ps(c[i][v], _mm512_maskz_loadu_ps(k, cp)) : c[i][v];
            _mm512_mask_storeu_ps(cp, k, x);
        }
}

typedef void (*bmk_fn)(int64_t KP, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B, int64_t ldp, float *C,
                       int64_t ldc, __mmask16 ml, int acc);

#define BMK(mr, nv)                                                                                       \
    BF16_FN static void bmk_##mr##_##nv(int64_t KP, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B,    \
                                        int64_t ldp, float *C, int64_t ldc, __mmask16 ml, int acc) {      \
        bmk_body(mr, nv, KP, A, lda, B, ldp, C, ldc, ml, acc);                                            \
    }
#define BMK_ROW(mr) BMK(mr, 1) BMK(mr, 2) BMK(mr, 3) BMK(mr, 4)
BMK_ROW(1) BMK_ROW(2) BMK_ROW(3) BMK_ROW(4) BMK_ROW(5) BMK_ROW(6)
#define BMK_PTRS(mr) {NULL, bmk_##mr##_1, bmk_##mr##_2, bmk_##mr##_3, bmk_##mr##_4}
static const bmk_fn bmk_table[MR + 1][NVMAX + 1] = {
    {NULL}, BMK_PTRS(1), BMK_PTRS(2), BMK_PTRS(3), BMK_PTRS(4), BMK_PTRS(5), BMK_PTRS(6)};

/* Column panels of 64 outer, row blocks of 6 inner, causal limits per block
 * (as gemm_avx512 in tile_gemm.c), contraction limits widened to pairs. */
BF16_FN static void gemm_avx(int64_t M, int64_t N, int64_t K, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B,
                             int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag) {
    int64_t K2 = K + (K & 1);
    for (int64_t j = 0; j < N; j += NB) {
        int64_t nj = min64(NB, N - j);
        for (int64_t i = 0; i < M; i += MR) {
            int mr = (int)min64(MR, M - i);
            int64_t n = nj, kb = 0, ke = K;
            if (tri == DTX_TRI_N_HI) n = min64(nj, diag + i + mr - j);
            else if (tri == DTX_TRI_K_HI) ke = clamp64(diag + i + mr, 0, K);
            else if (tri == DTX_TRI_K_LO) kb = clamp64(i - diag, 0, K) & ~(int64_t)1;
            ke = min64(ke + (ke & 1), K2);
            if (n <= 0) continue;
            int nv = (int)((n + 15) / 16);
            bmk_table[mr][nv]((ke - kb) / 2, A + i * lda + kb, lda, B + (kb / 2) * 2 * ldp + 2 * j, ldp,
                              C + i * ldc + j, ldc, lanes(n - 16 * (nv - 1)), acc);
        }
    }
}

#endif /* TILE_AVX512 */

/* ------------------------------------------------------------ the AVX-512 BF16 table's entries */
#if TILE_AVX512

void dtx_bf16_pack_a_avx512bf16(dtx_bf16 *dst, int64_t ldd, const float *src, int64_t sr, int64_t sc, int64_t rows,
                                int64_t cols) {
    if (sc == 1) pack_a_rows(dst, ldd, src, sr, rows, cols);
    else if (sr == 1) pack_a_trans(dst, ldd, src, sc, rows, cols);
    else dtx_bf16_pack_a_portable(dst, ldd, src, sr, sc, rows, cols);
}

void dtx_bf16_pack_b_avx512bf16(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                                int64_t cols) {
    pack_b_avx(dst, ldp, src, lds, rows, cols);
}

void dtx_bf16_pack_bt_avx512bf16(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                                 int64_t cols) {
    pack_bt_avx(dst, ldp, src, lds, rows, cols);
}

void dtx_bf16_gemm_tri_avx512bf16(int64_t M, int64_t N, int64_t K, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B,
                                  int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag) {
    if (M > 0 && N > 0) gemm_avx(M, N, K, A, lda, B, ldp, C, ldc, acc, tri, diag);
}

#endif /* TILE_AVX512 */

/* ------------------------------------------------------------ entry points: the level's table (simd.h) */

void dtx_bf16_pack_a(dtx_bf16 *dst, int64_t ldd, const float *src, int64_t sr, int64_t sc, int64_t rows,
                     int64_t cols) {
    dtx_simd()->bf16_pack_a(dst, ldd, src, sr, sc, rows, cols);
}

void dtx_bf16_pack_b(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    dtx_simd()->bf16_pack_b(dst, ldp, src, lds, rows, cols);
}

void dtx_bf16_pack_bt(dtx_bf16 *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    dtx_simd()->bf16_pack_bt(dst, ldp, src, lds, rows, cols);
}

void dtx_bf16_gemm_tri(int64_t M, int64_t N, int64_t K, const dtx_bf16 *A, int64_t lda, const dtx_bf16 *B,
                       int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag) {
    dtx_simd()->bf16_gemm_tri(M, N, K, A, lda, B, ldp, C, ldc, acc, tri, diag);
}
