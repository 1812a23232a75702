/* The quantised weight formats, one row each (kernels.h "dtx_qformat"). */
#include <math.h>

#include "kernels/kernels.h"

/* Q8: one scale per row, amax · clip / 127. */
static int64_t q8_row_bytes(int64_t K) { return K; }
static int64_t q8_row_scales(int64_t K) { return (void)K, 1; }
static void q8_quantize_row(void *q, float *scale, const float *w, int64_t K, const float *clip) {
    float amax = 0;
    for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(w[k]));
    scale[0] = dtx_q8_quantize_row(q, w, K, amax * (clip ? clip[0] : 1.0f));
}
static void q8_dequantize(float *w, const void *q, const float *scale, int64_t N, int64_t K) {
    dtx_q8_dequantize(w, q, scale, N, K);
}
static void q8_gemv(float *out, const float *x, const void *q, const float *scale, int64_t K, int64_t N) {
    dtx_gemv_q8(out, x, q, scale, K, N);
}
static void q8_gemv_batch(float *out, const float *x, int64_t nb, const void *q, const float *scale, int64_t K,
                          int64_t N) {
    dtx_gemv_q8_batch(out, x, nb, q, scale, K, N);
}

/* Q4: a scale per group of DTX_Q4_GROUP, each with its own clip factor. */
static void q4_quantize_row(void *q, float *scale, const float *w, int64_t K, const float *clip) {
    for (int64_t g = 0; g < dtx_q4_groups(K); g++) {
        int64_t k0 = g * DTX_Q4_GROUP, kg = K - k0 < DTX_Q4_GROUP ? K - k0 : DTX_Q4_GROUP;
        dtx_q4_quantize_row((uint8_t *)q + g * (DTX_Q4_GROUP / 2), scale + g, w + k0, kg, clip ? clip[g] : 1.0f);
    }
}
static void q4_dequantize(float *w, const void *q, const float *scale, int64_t N, int64_t K) {
    dtx_q4_dequantize(w, q, scale, N, K);
}
/* nibbles hold q + 8 with q in [-7, 7]: 0 is not a code */
static int q4_byte_bad(uint8_t b) { return ((b & 15) == 0) | ((b >> 4) == 0); }
static int q4_block_bad(const void *v, size_t lo, size_t hi) {
    const uint8_t *q = v;
    unsigned bad = 0;
#pragma omp simd reduction(| : bad)
    for (size_t j = lo; j < hi; j++) bad |= (unsigned)q4_byte_bad(q[j]);
    return bad != 0;
}
static int64_t q4_bad_code(const uint8_t *q, size_t n) {
    enum { BLOCK = 1 << 16 };
    size_t b = dtx_first_bad_block(q, n, BLOCK, q4_block_bad);
    for (size_t j = b == SIZE_MAX ? n : b * BLOCK; j < n; j++)
        if (q4_byte_bad(q[j])) return (int64_t)j;
    return -1;
}
static void q4_gemv(float *out, const float *x, const void *q, const float *scale, int64_t K, int64_t N) {
    dtx_gemv_q4(out, x, q, scale, K, N);
}
static void q4_gemv_batch(float *out, const float *x, int64_t nb, const void *q, const float *scale, int64_t K,
                          int64_t N) {
    dtx_gemv_q4_batch(out, x, nb, q, scale, K, N);
}

/* BF16: a model's own bf16 weights used where they lie (a mapped BF16
 * file: model_io.c), 16-bit "codes" without scales. The one-row product
 * multiplies x as given (fp32, or bf16-rounded by the caller). */
static int64_t bf16_row_bytes(int64_t K) { return 2 * K; }
static int64_t bf16_row_scales(int64_t K) { return (void)K, 0; }
static void bf16_quantize_row(void *q, float *scale, const float *w, int64_t K, const float *clip) {
    (void)scale, (void)clip;
    uint16_t *o = q;
    for (int64_t k = 0; k < K; k++) o[k] = dtx_f32_to_bf16(w[k]);
}
static void bf16_widen_row(float *restrict w, const uint16_t *restrict b, int64_t K) {
#pragma omp simd
    for (int64_t k = 0; k < K; k++) w[k] = dtx_bf16_to_f32(b[k]);
}
/* Row by row over the threads (DTX_PAR_FOR), as the 8- and 4-bit formats'. */
static void bf16_dequantize(float *w, const void *q, const float *scale, int64_t N, int64_t K) {
    (void)scale;
    const uint16_t *b = q;
    DTX_PAR_FOR(N * K, n, N, bf16_widen_row(w + n * K, b + n * K, K));
}
static void bf16_gemv(float *out, const float *x, const void *q, const float *scale, int64_t K, int64_t N) {
    (void)scale;
#ifndef DTX_DOUBLE
    dtx_gemv_bf16(out, x, q, K, N);
#else
    (void)out, (void)x, (void)q, (void)K, (void)N; /* the double build keeps no weights in place */
#endif
}
static void bf16_gemv_batch(float *out, const float *x, int64_t nb, const void *q, const float *scale, int64_t K,
                            int64_t N) {
    (void)scale;
#ifndef DTX_DOUBLE
    dtx_gemv_bf16_batch(out, x, nb, q, K, N);
#else
    (void)out, (void)x, (void)nb, (void)q, (void)K, (void)N;
#endif
}

static const dtx_qformat FORMATS[] = {
    {8, "q8", 1, 0, q8_row_bytes, q8_row_scales, q8_quantize_row, q8_dequantize, NULL, NULL, q8_gemv, q8_gemv_batch},
    {4, "q4", 0, 1, dtx_q4_row_bytes, dtx_q4_groups, q4_quantize_row, q4_dequantize, q4_bad_code,
     "holds the 4-bit code 0 (codes are 1 to 15)", q4_gemv, q4_gemv_batch},
    {16, "bf16", 0, 0, bf16_row_bytes, bf16_row_scales, bf16_quantize_row, bf16_dequantize, NULL, NULL, bf16_gemv, bf16_gemv_batch},
};

const dtx_qformat *dtx_qformat_of(int bits) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (FORMATS[i].bits == bits) return &FORMATS[i];
    return NULL;
}
