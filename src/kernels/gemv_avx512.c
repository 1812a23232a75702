/* The one-row products of decoding at AVX-512 (simd.h: gemv, gemv_bf16
 * (weights widened) and gemv_q8 at both AVX-512 levels; gemv_bf16 by
 * vdpbf16ps and gemv_q4 at AVX-512 BF16).
 *
 * Why not AVX2's kernels, which reach the bandwidth bound on Zen 3: on Zen 4
 * (2 cores, one 2048 × 5632 weight of the 0.8B model streamed from memory,
 * the bandwidth probe 23–45 GB/s over the runs) they reach 17–20 GB/s in
 * bf16, int8 and 4-bit, against 28–40 in fp32. The cause is memory-level
 * parallelism, not arithmetic: eight rows read side by side are eight short
 * streams, and once a row's bytes need more work than fp32's (a widening,
 * a lookup) the core stops running far enough ahead. What reaches the probe
 * (measured in the same runs, 85–100% of it): one row at a time (two for
 * int8, sharing the loads of x), each a long contiguous stream, and the
 * cheapest arithmetic per byte:
 *   - fp32, and bf16 weights with fp32 activations: one row, the bf16
 *     widened in zmm (exact), no software prefetch (one stream per thread
 *     is what the hardware prefetchers follow best; side by side over a
 *     0.8B model's products, 16 layers, in rounds: 1.17x AVX2's kernel in
 *     fp32, 1.38x in bf16 with fp32 x);
 *   - bf16: vdpbf16ps, 32 products per instruction, x converted to bf16
 *     once per call (exact: the contract has x bf16-rounded already), one
 *     row, no prefetch (1.07–1.31x two rows with an L2 prefetch, the more
 *     the higher the machine's bandwidth at the time);
 *   - int8 (w8a16): the codes widened to fp32 in zmm (exact), two rows at
 *     a time sharing the loads of x, with a software prefetch into L2 8 KiB
 *     ahead (into L1 it is slower than none; 4 KiB ahead or one row is
 *     0.9x; none is 0.8x). That is Zen 4, whose 512-bit loads take both of
 *     its 256-bit load ports, so sharing x's loads pays. On Zen 5 (AMD
 *     family 1Ah: two full-width 512-bit loads and FMAs a cycle;
 *     dtx_isa_full_width) two rows at a time stream 40–44 GB/s on 2 cores
 *     and one row at a time in four accumulators (two leave the FMA's
 *     latency in the way at this rate) 58–62, against a probe of 67–76
 *     GB/s reading memory not recently read (alternated runs over 48
 *     products of 2048 × 5632, 2026-12-04); two rows in four accumulators
 *     each stay at 38–40, so the two streams, not the arithmetic, are what
 *     loses there. With x exactly bf16 (w8a16) at the BF16 level, Zen 5
 *     packs the codes to bf16 and multiplies by vdpbf16ps (q8_rows_dp);
 *   - 4-bit (w4a16): 64 bytes (four groups) loaded as they lie, each of the
 *     four nibbles of every 16-bit word looked up as a bf16 value (code − 8
 *     is exact in bf16) by vpermw straight from the word shifted by 0, 4,
 *     8, 12 (no widening, no masking: a 32-entry table that repeats every
 *     16), x laid out once per call in the matching order, vdpbf16ps, each
 *     group's scale applied to its 4 lanes of partial sums, an L2 prefetch
 *     8 KiB ahead. Arithmetic-bound from cache: on Zen 5 (2026-12-04, one
 *     core, 512 × 2048 from L2, alternated runs) 52–54 GB/s against 41–42
 *     for the earlier kernel (below); streamed on 2 threads, no faster:
 *     alternated runs over 40–48 weights of 2048 × 5632 gave 47–61 GB/s
 *     against 44–62 as the machine's bandwidth moved, and a standalone
 *     program over 300 MB 48–50 for both. It pays where a model's weights
 *     are partly in the caches (a 110M w4a16 file's decode: 4 of 5
 *     alternated pairs ahead by 0.5–5%, one behind by 10%).
 * vdpbf16ps flushes denormal inputs to zero, and takes x as bf16: where x is
 * not exactly bf16 (w4a16 with --act16 fp16; an fp32 model on bf16
 * weights) or holds a denormal, or K is past the stack copy of x
 * (GEMV_XMAX), the widening kernel (4-bit: AVX2's) runs instead, so every
 * result is what the contract says. A prefetch past the end of a weight is
 * harmless (prefetches never fault). Sums are in a different order from the
 * other levels' (tests/kernels/simd_ops_test.c bounds the difference).
 *
 * Tried and not kept (same runs, streamed on 2 threads / from cache on 1):
 * int8 bytes moved into dwords by vpermb, then a shift and vcvtdq2ps
 * (28 / 20 GB/s, against 31 / 25 for vpmovsxbd) or a magic-number float
 * and a subtraction (25 / 17); 4-bit codes looked up with two vpshufb
 * tables (the bf16 values' low and high bytes) and unpacked into words
 * (27 / 18, against 30 / 20 for vpermw; on Zen 5, one core over 2048 ×
 * 2048 from L3, 41–43 against 35–39 for that vpermw kernel and 44–48 for
 * today's); the earlier 4-bit
 * kernel: 32 bytes (a pair of groups) widened to words by vpmovzxbw, the
 * low nibbles masked and the high ones shifted, two vpermw lookups (Zen 4:
 * 22 GB/s on one core from L2; Zen 5 figures above); 4-bit codes made bf16 without a
 * shuffle, 0x4180 | code << 3 = 16 + code, and 24·Σx taken off each
 * group (1.18x from cache, 26 against 22 GB/s, but the bias cancels six
 * times the result's magnitude: 2e-5 relative differences, against exact
 * products now); int8 codes as 16·h + l (h the high nibble, signed; l the
 * low one), both exact bf16 values looked up by vpermw from the loaded
 * words as gemv_q4 does, four vdpbf16ps per 64 codes: 54–55 GB/s from L2
 * on one Zen 5 core against 42, but streamed on 2 threads 30–34 against
 * 52–54 for the widening kernel (a standalone program over 300 MB, with
 * and without software prefetch at 1–16 KiB, into L1 or L2; the 4-bit
 * lookup kernel streams as fast as the widening one did, 48–50). */
#include <string.h>

#include "common/common.h"
#include "kernels/kernels.h"
#include "kernels/simd.h"
#include "kernels/tile_avx512.h"

#if TILE_AVX512

#define BF16_TARGET AVX512_TARGET ",avx512bf16"
#define BF16_FN __attribute__((target(BF16_TARGET)))
#define BF16_INLINE static inline __attribute__((always_inline, target(BF16_TARGET)))

enum {
    GEMV_XMAX = 16384,     /* the widest x copied to the stack (32 KiB of bf16) */
    PREFETCH_AHEAD = 8192, /* bytes ahead of a row stream, into L2 */
};

#define PREFETCH_L2(p) _mm_prefetch((const char *)(const void *)(p) + PREFETCH_AHEAD, _MM_HINT_T1)

/* Lanes [0, n) of a 32-lane mask (n clamped to [0, 32]). */
AVX512_INLINE __mmask32 lanes32(int64_t n) {
    return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1);
}

/* x [K] as bf16 bits into xb, zero up to the next multiple of 128
 * (XB_PAD); with q4_order, in gemv_q4's order (q4_quad): each block of 128
 * values, four groups of 32, as four runs of 32 words A, B, C, D where
 * word 8g + t of A holds value 32g + 2t, of B 32g + 2t + 16, of C
 * 32g + 2t + 1 and of D 32g + 2t + 17. 1 when every x[k] is exactly a bf16
 * value and none is denormal. */
enum { XB_PAD = 128 };
BF16_INLINE int x_to_bf16(uint16_t *xb, const float *x, int64_t K, int q4_order) {
    /* 16 values' words, the even ones first, then the odd ones */
    const __m256i evens_odds = _mm256_set_epi16(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    __mmask16 bad = 0;
    for (int64_t c = 0; c < (K + XB_PAD - 1) / XB_PAD * XB_PAD; c += 16) {
        __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(lanes(K - c), x + c));
        bad |= _mm512_test_epi32_mask(u, _mm512_set1_epi32(0xFFFF));
        bad |= _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000)) &
               _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7FFFFFFF));
        __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
        if (!q4_order) {
            _mm256_storeu_si256((__m256i *)(void *)(xb + c), h);
            continue;
        }
        h = _mm256_permutexvar_epi16(evens_odds, h);
        uint16_t *at = xb + c / 128 * 128 + c % 128 / 32 * 8 + (c % 32 ? 32 : 0); /* A, or B for 16..31 */
        _mm_storeu_si128((__m128i *)(void *)at, _mm256_castsi256_si128(h));
        _mm_storeu_si128((__m128i *)(void *)(at + 64), _mm256_extracti128_si256(h, 1)); /* C or D */
    }
    return bad == 0;
}

AVX512_INLINE __m512bh as_bh(__m512i v) { return (__m512bh)v; }


/* ------------------------------------------------------------------ fp32 */

/* out = x·w for the one fp32 row at w: 32 columns a step in two
 * accumulators, the rest in masked steps of 16; no prefetch. */
AVX512_INLINE float f32_row(const float *x, const float *w, int64_t K) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= K; c += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), _mm512_loadu_ps(w + c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16), _mm512_loadu_ps(w + c + 16), a1);
    }
    for (; c < K; c += 16) {
        __mmask16 m = lanes(K - c);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + c), _mm512_maskz_loadu_ps(m, w + c), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

AVX512_FN void dtx_gemv_avx512(float *out, const float *x, const float *w, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++) out[n] = f32_row(x, w + n * K, K);
}

/* ------------------------------------------------------------------ bf16 */

/* out = x·w for the one row at w, 64 columns a step in two accumulators,
 * the last at most 63 in masked steps of 32 (xb is zero there). No
 * software prefetch: one bf16 stream per thread is what the hardware
 * prefetchers follow best (see the top of the file). */
BF16_INLINE float bf16_row(const uint16_t *xb, const uint16_t *w, int64_t K) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 64 <= K; c += 64) {
        a0 = _mm512_dpbf16_ps(a0, as_bh(_mm512_loadu_si512(xb + c)), as_bh(_mm512_loadu_si512(w + c)));
        a1 = _mm512_dpbf16_ps(a1, as_bh(_mm512_loadu_si512(xb + c + 32)), as_bh(_mm512_loadu_si512(w + c + 32)));
    }
    for (; c < K; c += 32)
        a0 = _mm512_dpbf16_ps(a0, as_bh(_mm512_loadu_si512(xb + c)), as_bh(_mm512_maskz_loadu_epi16(lanes32(K - c), w + c)));
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* out = x·w for the one row at w with x in fp32: the bf16 weights widened
 * to fp32 (exact) and fused multiply-adds, 32 columns a step in two
 * accumulators, the rest in masked steps of 16. No prefetch (as bf16_row). */
AVX512_INLINE float bf16_row_f32x(const float *x, const uint16_t *w, int64_t K) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= K; c += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), widen_bf16(_mm256_loadu_si256((const __m256i *)(const void *)(w + c))), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16),
                             widen_bf16(_mm256_loadu_si256((const __m256i *)(const void *)(w + c + 16))), a1);
    }
    for (; c < K; c += 16) {
        __mmask16 m = lanes(K - c);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + c), widen_bf16(_mm256_maskz_loadu_epi16(m, w + c)), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* Both AVX-512 levels' bf16 product for any x: widened weights. */
AVX512_FN void dtx_gemv_bf16_avx512(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++) out[n] = bf16_row_f32x(x, w + n * K, K);
}

BF16_FN static void gemv_bf16_dp(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N) {
    uint16_t xb[GEMV_XMAX + XB_PAD];
    if (K > GEMV_XMAX || !x_to_bf16(xb, x, K, 0)) {
        dtx_gemv_bf16_avx512(out, x, w, K, N);
        return;
    }
    for (int64_t n = 0; n < N; n++) out[n] = bf16_row(xb, w + n * K, K);
}

/* ------------------------------------------------------------------ int8 */

AVX512_INLINE __m512 widen_i8(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }

/* out[b·ldo + r] = scale[r] · x_b·q_r for the R (1 or 2) rows at q and the
 * B (1 to 4) inputs x [B, K]: 64 columns a step in A (2 or 4) accumulators
 * per (row, input), the rest in masked steps of 16 into the first; each
 * step's codes widened once for every input (a batched decode step is then
 * bound by the weights' bytes, not by widening them once per sequence), and
 * each accumulator takes the same multiply-adds in the same order whatever
 * B is, so an input's bits do not depend on the others. */
AVX512_INLINE void q8_rows_nb(const int R, const int A, const int B, float *out, int64_t ldo, const float *x,
                              const int8_t *q, const float *scale, int64_t K) {
    __m512 a[4][2][4];
#pragma GCC unroll 4
    for (int b = 0; b < B; b++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int k = 0; k < A; k++) a[b][r][k] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 64 <= K; c += 64) {
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) PREFETCH_L2(q + r * K + c);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512 w[2];
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) w[r] = widen_i8(_mm_loadu_si128((const __m128i *)(const void *)(q + r * K + c + 16 * j)));
#pragma GCC unroll 4
            for (int b = 0; b < B; b++) {
                __m512 xv = _mm512_loadu_ps(x + b * K + c + 16 * j);
#pragma GCC unroll 2
                for (int r = 0; r < R; r++) a[b][r][j % A] = _mm512_fmadd_ps(xv, w[r], a[b][r][j % A]);
            }
        }
    }
    for (; c < K; c += 16) {
        __mmask16 m = lanes(K - c);
        __m512 w[2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) w[r] = widen_i8(_mm_maskz_loadu_epi8(m, q + r * K + c));
#pragma GCC unroll 4
        for (int b = 0; b < B; b++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + b * K + c);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) a[b][r][0] = _mm512_fmadd_ps(xv, w[r], a[b][r][0]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < B; b++)
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            __m512 t = _mm512_add_ps(a[b][r][0], a[b][r][1]);
            if (A == 4) t = _mm512_add_ps(t, _mm512_add_ps(a[b][r][2], a[b][r][3]));
            out[b * ldo + r] = scale[r] * _mm512_reduce_add_ps(t);
        }
}

/* The rows of q [N, K] for nb inputs (out[b·ldo + n]), the inputs four at a
 * time: where 512-bit loads are split in halves (dtx_isa_full_width() 0:
 * Zen 4), two rows at a time sharing the loads of x, two accumulators each;
 * at full width (Zen 5), one row at a time in four accumulators (see the top
 * of the file). One input is gemv_q8; every input gets its bits. */
#define Q8_ROWS(R, A, B)                                                                                         \
    do {                                                                                                         \
        int64_t n = 0;                                                                                           \
        for (; n + R <= N; n += R) q8_rows_nb(R, A, B, out + b0 * ldo + n, ldo, xb, q + n * K, scale + n, K);    \
        for (; n < N; n++) q8_rows_nb(1, A, B, out + b0 * ldo + n, ldo, xb, q + n * K, scale + n, K);            \
    } while (0)
#define Q8_NB_CASE(B)                                                                                            \
    case B:                                                                                                      \
        if (one_row) Q8_ROWS(1, 4, B);                                                                           \
        else Q8_ROWS(2, 2, B);                                                                                   \
        break;
AVX512_FN void dtx_gemv_q8_nb_avx512(float *out, int64_t ldo, const float *x, int64_t nb, const int8_t *q,
                                     const float *scale, int64_t K, int64_t N) {
    const int one_row = dtx_isa_full_width();
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
        const float *xb = x + b0 * K;
        switch (nb - b0 < 4 ? nb - b0 : 4) {
            Q8_NB_CASE(1)
            Q8_NB_CASE(2)
            Q8_NB_CASE(3)
            Q8_NB_CASE(4)
        }
    }
}
#undef Q8_NB_CASE
#undef Q8_ROWS

AVX512_FN void dtx_gemv_q8_avx512(float *out, const float *x, const int8_t *q, const float *scale, int64_t K,
                                  int64_t N) {
    dtx_gemv_q8_nb_avx512(out, 1, x, 1, q, scale, K, N);
}

/* ----------------------------------------------------------------- 4-bit */

/* Four groups (64 bytes at b, `groups` of them real: 4, or 1–3 at a row's
 * end, the rest read as zeros) into acc[i] for each of the B inputs xp[i]
 * (bf16 in x_to_bf16's q4 order): the 32 words at b looked up as bf16
 * (code − 8) by vpermw four times, on the words as they are and shifted
 * right by 4, 8 and 12 (a 32-entry table repeating every 16, so each
 * lookup reads one nibble whatever lies above it): A, B, C, D, each 128-bit
 * lane one group's; A·xA + C·xC and B·xB + D·xD by vdpbf16ps in two chains,
 * added, lanes 4g–4g+3 scaled by group g's scale (0 past the last group).
 * Each input's accumulator takes the same operations in the same order
 * whatever B is. */
BF16_INLINE void q4_quad(const int B, __m512 *acc, const uint8_t *b, const float *s, const uint16_t *const *xp,
                         __m512i lut, int groups) {
    const __m512i quarters = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512i v = groups == 4 ? _mm512_loadu_si512(b)
                            : _mm512_maskz_loadu_epi8(((__mmask64)1 << (16 * groups)) - 1, b);
    __m512bh wa = as_bh(_mm512_permutexvar_epi16(v, lut));
    __m512bh wb = as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), lut));
    __m512bh wc = as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 8), lut));
    __m512bh wd = as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 12), lut));
    /* the scales as they lie (a file's scales are read in place) */
    __m128 s4 = groups == 4 ? _mm_loadu_ps(s) : _mm_maskz_loadu_ps((__mmask8)((1u << groups) - 1), s);
    __m512 sv = _mm512_permutexvar_ps(quarters, _mm512_castps128_ps512(s4));
#pragma GCC unroll 4
    for (int i = 0; i < B; i++) {
        __m512 d0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), as_bh(_mm512_loadu_si512(xp[i])), wa);
        __m512 d1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), as_bh(_mm512_loadu_si512(xp[i] + 32)), wb);
        d0 = _mm512_dpbf16_ps(d0, as_bh(_mm512_loadu_si512(xp[i] + 64)), wc);
        d1 = _mm512_dpbf16_ps(d1, as_bh(_mm512_loadu_si512(xp[i] + 96)), wd);
        acc[i] = _mm512_fmadd_ps(_mm512_add_ps(d0, d1), sv, acc[i]);
    }
}

/* out[i·ldo + n] = x_i·row n for the B (1 to 4) inputs xp[i] (bf16, in
 * gemv_q4's order, x_to_bf16) and the N rows at q: each row in two
 * accumulators per input, blocks of four groups alternating between them,
 * an L2 prefetch 8 KiB ahead. */
BF16_INLINE void q4_rows_nb(const int B, float *out, int64_t ldo, const uint16_t *const *xp, const uint8_t *q,
                            const float *scale, int64_t K, int64_t N) {
    uint16_t table[32];
    for (int i = 0; i < 32; i++) table[i] = dtx_f32_to_bf16((float)(i % 16 - 8));
    const __m512i lut = _mm512_loadu_si512(table);
    const int64_t ng = dtx_q4_groups(K), rb = dtx_q4_row_bytes(K);
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *r = q + n * rb;
        const float *s = scale + n * ng;
        __m512 a0[4], a1[4];
        const uint16_t *xq[4];
#pragma GCC unroll 4
        for (int i = 0; i < B; i++) a0[i] = a1[i] = _mm512_setzero_ps();
        int64_t g = 0;
        for (; g + 8 <= ng; g += 8) {
            PREFETCH_L2(r + 16 * g);
            PREFETCH_L2(r + 16 * g + 64);
#pragma GCC unroll 4
            for (int i = 0; i < B; i++) xq[i] = xp[i] + 32 * g;
            q4_quad(B, a0, r + 16 * g, s + g, xq, lut, 4);
#pragma GCC unroll 4
            for (int i = 0; i < B; i++) xq[i] += 128;
            q4_quad(B, a1, r + 16 * g + 64, s + g + 4, xq, lut, 4);
        }
#pragma GCC unroll 4
        for (int i = 0; i < B; i++) xq[i] = xp[i] + 32 * g;
        if (g + 4 <= ng) {
            q4_quad(B, a0, r + 16 * g, s + g, xq, lut, 4), g += 4;
#pragma GCC unroll 4
            for (int i = 0; i < B; i++) xq[i] += 128;
        }
        if (g < ng) q4_quad(B, a1, r + 16 * g, s + g, xq, lut, (int)(ng - g));
#pragma GCC unroll 4
        for (int i = 0; i < B; i++) out[i * ldo + n] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i], a1[i]));
    }
}

BF16_FN static void gemv_q4_dp(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K,
                               int64_t N) {
    uint16_t xb[GEMV_XMAX + XB_PAD];
    if (K > GEMV_XMAX || !x_to_bf16(xb, x, K, 1)) {
        dtx_gemv_q4_avx2(out, x, q, scale, K, N);
        return;
    }
    const uint16_t *xp[1] = {xb};
    q4_rows_nb(1, out, 1, xp, q, scale, K, N);
}

/* gemv_q4_dp for nb inputs (out[b·ldo + n]), four at a time, each pair of
 * groups looked up once for all of them (the same bits as one input alone).
 * Where an input is not bf16-exact (or K is past the stack copies), every
 * input goes through gemv_q4_dp, as it would alone. */
enum { Q4_NB = 4 };
BF16_FN static void gemv_q4_nb_dp(float *out, int64_t ldo, const float *x, int64_t nb, const uint8_t *q,
                                  const float *scale, int64_t K, int64_t N) {
    uint16_t xb[Q4_NB][GEMV_XMAX + XB_PAD];
    const uint16_t *xp[Q4_NB] = {xb[0], xb[1], xb[2], xb[3]};
    for (int64_t b0 = 0; b0 < nb; b0 += Q4_NB) {
        const int B = nb - b0 < Q4_NB ? (int)(nb - b0) : Q4_NB;
        int exact = K <= GEMV_XMAX;
        for (int b = 0; b < B && exact; b++) exact = x_to_bf16(xb[b], x + (b0 + b) * K, K, 1);
        float *o = out + b0 * ldo;
        if (!exact)
            for (int b = 0; b < B; b++) gemv_q4_dp(o + b * ldo, x + (b0 + b) * K, q, scale, K, N);
        else if (B == 1) q4_rows_nb(1, o, ldo, xp, q, scale, K, N);
        else if (B == 2) q4_rows_nb(2, o, ldo, xp, q, scale, K, N);
        else if (B == 3) q4_rows_nb(3, o, ldo, xp, q, scale, K, N);
        else q4_rows_nb(4, o, ldo, xp, q, scale, K, N);
    }
}

/* int8 × bf16 x at full width (Zen 5): the codes widened to fp32, packed
 * in pairs to bf16 (exact: |code| ≤ 127 has 8 significant bits) and
 * multiplied by vdpbf16ps, 32 products an instruction against 16 per FMA,
 * x read once as bf16 (half the bytes of fp32), an L2 prefetch 8 KiB ahead.
 * One row at a time, for up to Q8_NB inputs sharing each row's widening.
 * Side by side over a 0.8B model's products from 2 MiB pages (2 threads,
 * 2026-12-04): 49 GB/s against 46 for the fp32 kernel of one row and four
 * accumulators, and a plain sum's 51 in the same runs. */
enum { Q8_NB = 4 };
BF16_INLINE __m512bh i8_to_bf16(const int8_t *p) { /* plain loads: they fold into vpmovsxbd */
    return _mm512_cvtne2ps_pbh(widen_i8(_mm_loadu_si128((const __m128i *)(const void *)(p + 16))),
                               widen_i8(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
BF16_INLINE __m512bh i8_to_bf16_masked(const int8_t *p, __mmask16 lo, __mmask16 hi) {
    return _mm512_cvtne2ps_pbh(widen_i8(_mm_maskz_loadu_epi8(hi, p + 16)), widen_i8(_mm_maskz_loadu_epi8(lo, p)));
}
BF16_INLINE void q8_rows_dp(const int B, float *out, int64_t ldo, const uint16_t *const *xb, const int8_t *q,
                            const float *scale, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++) {
        const int8_t *w = q + n * K;
        __m512 a[Q8_NB][2];
#pragma GCC unroll 4
        for (int b = 0; b < B; b++) a[b][0] = a[b][1] = _mm512_setzero_ps();
        int64_t c = 0;
        for (; c + 64 <= K; c += 64) {
            PREFETCH_L2(w + c);
            __m512bh w0 = i8_to_bf16(w + c), w1 = i8_to_bf16(w + c + 32);
#pragma GCC unroll 4
            for (int b = 0; b < B; b++) {
                a[b][0] = _mm512_dpbf16_ps(a[b][0], as_bh(_mm512_loadu_si512(xb[b] + c)), w0);
                a[b][1] = _mm512_dpbf16_ps(a[b][1], as_bh(_mm512_loadu_si512(xb[b] + c + 32)), w1);
            }
        }
        for (; c < K; c += 32) { /* x is zero to the next multiple of 64: masked codes meet zeros */
            __m512bh w0 = i8_to_bf16_masked(w + c, lanes(K - c), lanes(K - c - 16));
#pragma GCC unroll 4
            for (int b = 0; b < B; b++) a[b][0] = _mm512_dpbf16_ps(a[b][0], as_bh(_mm512_loadu_si512(xb[b] + c)), w0);
        }
#pragma GCC unroll 4
        for (int b = 0; b < B; b++) out[b * ldo + n] = scale[n] * _mm512_reduce_add_ps(_mm512_add_ps(a[b][0], a[b][1]));
    }
}

/* int8 × fp32 x at the BF16 level: the vdpbf16ps kernel above at full width
 * where every x of a block of inputs is exactly bf16 (as w8a16's are; not
 * with --act16 fp16) and not denormal, the fp32 kernels otherwise. */
BF16_FN static void gemv_q8_nb_dp(float *out, int64_t ldo, const float *x, int64_t nb, const int8_t *q,
                                  const float *scale, int64_t K, int64_t N) {
    if (!dtx_isa_full_width() || K > GEMV_XMAX) {
        dtx_gemv_q8_nb_avx512(out, ldo, x, nb, q, scale, K, N);
        return;
    }
    uint16_t xb[Q8_NB][GEMV_XMAX + XB_PAD];
    const uint16_t *xp[Q8_NB] = {xb[0], xb[1], xb[2], xb[3]};
    for (int64_t b0 = 0; b0 < nb; b0 += Q8_NB) {
        const int B = nb - b0 < Q8_NB ? (int)(nb - b0) : Q8_NB;
        int exact = 1;
        for (int b = 0; b < B && exact; b++) exact = x_to_bf16(xb[b], x + (b0 + b) * K, K, 0);
        float *o = out + b0 * ldo;
        if (!exact) dtx_gemv_q8_nb_avx512(o, ldo, x + b0 * K, B, q, scale, K, N);
        else if (B == 1) q8_rows_dp(1, o, ldo, xp, q, scale, K, N);
        else if (B == 2) q8_rows_dp(2, o, ldo, xp, q, scale, K, N);
        else if (B == 3) q8_rows_dp(3, o, ldo, xp, q, scale, K, N);
        else q8_rows_dp(4, o, ldo, xp, q, scale, K, N);
    }
}

/* The AVX-512 BF16 level's own: where the CPU lacks none of it. */
void dtx_gemv_bf16_avx512bf16(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N) {
    gemv_bf16_dp(out, x, w, K, N);
}
void dtx_gemv_q4_avx512bf16(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N) {
    gemv_q4_dp(out, x, q, scale, K, N);
}
void dtx_gemv_q4_nb_avx512bf16(float *out, int64_t ldo, const float *x, int64_t nb, const uint8_t *q,
                               const float *scale, int64_t K, int64_t N) {
    gemv_q4_nb_dp(out, ldo, x, nb, q, scale, K, N);
}
void dtx_gemv_q8_avx512bf16(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N) {
    gemv_q8_nb_dp(out, 1, x, 1, q, scale, K, N);
}
void dtx_gemv_q8_nb_avx512bf16(float *out, int64_t ldo, const float *x, int64_t nb, const int8_t *q,
                               const float *scale, int64_t K, int64_t N) {
    gemv_q8_nb_dp(out, ldo, x, nb, q, scale, K, N);
}

#endif /* TILE_AVX512 */
