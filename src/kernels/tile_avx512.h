/* AVX-512 helpers shared by the tile kernels (tile_gemm.c, tile_bf16.c).
 * TILE_AVX512 is 1 in the float build on x86-64 with GCC-compatible
 * compilers; the functions are compiled with target attributes, so the code
 * builds with any -march and runs only after a CPU check
 * (dtx_isa_level, through tile_gemm.c's table and dtx_tile_bf16_simd).
 * Internal header. */
#ifndef DTX_TILE_AVX512_H
#define DTX_TILE_AVX512_H

#include <stdint.h>

#if !defined(DTX_DOUBLE) && defined(__x86_64__) && defined(__GNUC__)
#define TILE_AVX512 1
#include <immintrin.h>
#else
#define TILE_AVX512 0
#endif

#if TILE_AVX512
#define AVX512_TARGET "avx512f,avx512dq,avx512bw,avx512vl,fma"
#define AVX512_FN __attribute__((target(AVX512_TARGET)))
#define AVX512_INLINE static inline __attribute__((always_inline, target(AVX512_TARGET)))

/* Lanes [0, n) of a 16-lane mask (n clamped to [0, 16]). */
AVX512_INLINE __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* 16 bf16 values as fp32 (exact: the bits moved up by 16). */
AVX512_INLINE __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

/* In-register transpose of a 16×16 block: unpack pairs of rows (ps), then
 * pairs of pairs (pd), which leaves 4×4 blocks transposed inside each
 * 128-bit lane; two rounds of lane shuffles move the lanes into place. */
AVX512_INLINE void tr16(__m512 r[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4j + i]: lane L holds column 4L + j of rows 4i .. 4i+3 */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[0 + i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 + i] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[8 + i] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[12 + i] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[4 * j], u[4 * j + 1], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[4 * j], u[4 * j + 1], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[4 * j + 2], u[4 * j + 3], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(u[4 * j + 2], u[4 * j + 3], 0xEE);
        r[0 + j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

/* x[j] = column j of a block of up to 16 rows × 16 columns of src (row
 * stride lds): rows [0, nr) loaded with the column mask kc, the others 0,
 * then transposed in registers. */
AVX512_INLINE void load_tr16(__m512 x[16], const float *src, int64_t lds, int64_t nr, __mmask16 kc) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) x[i] = i < nr ? _mm512_maskz_loadu_ps(kc, src + i * lds) : _mm512_setzero_ps();
    tr16(x);
}
#endif /* TILE_AVX512 */

#endif
