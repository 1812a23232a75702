/* The int8 × int8 row products of one token (gemv_q8a8), written once for
 * the AVX2 kernel and the AVX-512 VNNI one, which differ only in the step
 * that adds 32 products into eight int32 lanes:
 *   DOT(acc, ax, xv, w): acc + the sums of |x| × (w with x's sign), w the
 *   32 int8 weights at w, ax = |xv| (unsigned), four products per lane.
 * Four rows share each |x| vector, and the next four rows are fetched by
 * hand as these are read; the tail past a multiple of 32 is scalar. The
 * sums are exact int32s, so every DOT gives the same bits. Expanded inside
 * a function compiled for AVX2 (or more): out, xq, xscale, q, scale, K, N
 * as in dtx_gemv_q8a8. Internal header of src/kernels. */
#ifndef DTX_KERNELS_GEMV_Q8A8_BODY_H
#define DTX_KERNELS_GEMV_Q8A8_BODY_H

#include <immintrin.h>
#include <stdint.h>

static inline __attribute__((always_inline, target("avx2"))) int32_t q8a8_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

#define GEMV_Q8A8_BODY(DOT)                                                                                   \
    const int64_t K32 = K & ~(int64_t)31;                                                                     \
    int64_t n = 0;                                                                                            \
    for (; n + 4 <= N; n += 4) {                                                                              \
        const int8_t *r = q + n * K;                                                                          \
        const char *next = (const char *)(const void *)(r + 4 * K);                                           \
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;                                       \
        for (int64_t k = 0; k < K32; k += 32) {                                                               \
            _mm_prefetch(next + 4 * k, _MM_HINT_T0);                                                          \
            _mm_prefetch(next + 4 * k + 64, _MM_HINT_T0);                                                     \
            __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xq + k));                         \
            __m256i ax = _mm256_sign_epi8(xv, xv);                                                            \
            a0 = DOT(a0, ax, xv, r + k);                                                                      \
            a1 = DOT(a1, ax, xv, r + K + k);                                                                  \
            a2 = DOT(a2, ax, xv, r + 2 * K + k);                                                              \
            a3 = DOT(a3, ax, xv, r + 3 * K + k);                                                              \
        }                                                                                                     \
        int32_t t[4] = {q8a8_hsum_i32(a0), q8a8_hsum_i32(a1), q8a8_hsum_i32(a2), q8a8_hsum_i32(a3)};          \
        for (int j = 0; j < 4; j++) {                                                                         \
            for (int64_t k = K32; k < K; k++) t[j] += (int32_t)xq[k] * (int32_t)r[j * K + k];                 \
            out[n + j] = xscale * scale[n + j] * (float)t[j];                                                 \
        }                                                                                                     \
    }                                                                                                         \
    for (; n < N; n++) {                                                                                      \
        const int8_t *r = q + n * K;                                                                          \
        __m256i a = _mm256_setzero_si256();                                                                   \
        for (int64_t k = 0; k < K32; k += 32) {                                                               \
            __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xq + k));                         \
            a = DOT(a, _mm256_sign_epi8(xv, xv), xv, r + k);                                                  \
        }                                                                                                     \
        int32_t t = q8a8_hsum_i32(a);                                                                         \
        for (int64_t k = K32; k < K; k++) t += (int32_t)xq[k] * (int32_t)r[k];                                \
        out[n] = xscale * scale[n] * (float)t;                                                                \
    }

#endif
