/* Quantised linear weights and int8 activations (kernels.h, "Quantised
 * linear weights"): quantising, dequantising, and the portable one-row
 * products that the SIMD ones are tested against (their entry points,
 * which pick the ISA level's, are rowdot.c's). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/simd.h"

/* rint: to nearest, ties to even (the rounding mode the SIMD conversions use) */
static int8_t sat_i8(float v, int lim) {
    float r = rintf(v);
    return (int8_t)(r > (float)lim ? lim : r < (float)-lim ? -lim : (int)r);
}

float dtx_q8_quantize_row(int8_t *q, const float *w, int64_t K, float amax) {
    if (!(amax > 0)) {
        amax = 0;
        for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(w[k]));
    }
    float scale = amax / 127.0f;
    if (!(scale > 0)) {
        memset(q, 0, (size_t)K);
        return 0;
    }
    for (int64_t k = 0; k < K; k++) q[k] = sat_i8(w[k] / scale, 127);
    return scale;
}

/* Dequantising: one row at a time (restrict pointers and the row's scale
 * in a register, so the loop vectorises), the rows over the threads when
 * there are enough (DTX_PAR_FOR): a prefill of an int8 model dequantises
 * every weight, and element by element on one thread that was most of a
 * short prompt's time. */
static void q8_dequantize_row(float *restrict w, const int8_t *restrict q, float s, int64_t K) {
#pragma omp simd
    for (int64_t k = 0; k < K; k++) w[k] = s * (float)q[k];
}

void dtx_q8_dequantize(float *w, const int8_t *q, const float *scale, int64_t N, int64_t K) {
    DTX_PAR_FOR(N * K, n, N, q8_dequantize_row(w + n * K, q + n * K, scale[n], K));
}

void dtx_q4_quantize_row(uint8_t *q, float *scale, const float *w, int64_t K, float clip) {
    const int64_t G = DTX_Q4_GROUP, half = G / 2;
    for (int64_t g = 0; g < dtx_q4_groups(K); g++) {
        int64_t k0 = g * G, k1 = k0 + G < K ? k0 + G : K;
        float amax = 0;
        for (int64_t k = k0; k < k1; k++) amax = fmaxf(amax, fabsf(w[k]));
        float s = amax * clip / 7.0f;
        scale[g] = s > 0 ? s : 0;
        uint8_t *b = q + g * half;
        memset(b, 0x88, (size_t)half); /* q = 0 in both nibbles */
        if (!(s > 0)) continue;
        for (int64_t k = k0; k < k1; k++) {
            int j = (int)((k - k0) % half), hi = (k - k0) >= half;
            uint8_t v = (uint8_t)(sat_i8(w[k] / s, 7) + 8);
            b[j] = hi ? (uint8_t)((b[j] & 0x0F) | (v << 4)) : (uint8_t)((b[j] & 0xF0) | v);
        }
    }
}

/* One row, a group at a time: byte j holds element j (low nibble) and
 * j + 16 (high); a partial last group writes only its elements below K. */
static void q4_dequantize_row(float *restrict w, const uint8_t *restrict q, const float *restrict scale, int64_t K) {
    const int64_t G = DTX_Q4_GROUP, half = G / 2;
    for (int64_t g = 0; g * G < K; g++) {
        const float s = scale[g];
        const uint8_t *b = q + g * half;
        float *o = w + g * G;
        if (K - g * G >= G) {
#pragma omp simd
            for (int64_t j = 0; j < half; j++) {
                o[j] = s * (float)((b[j] & 15) - 8);
                o[j + half] = s * (float)((b[j] >> 4) - 8);
            }
        } else {
            for (int64_t j = 0; j < K - g * G; j++) o[j] = s * (float)dtx_q4_get(q, g * G + j);
        }
    }
}

void dtx_q4_dequantize(float *w, const uint8_t *q, const float *scale, int64_t N, int64_t K) {
    const int64_t rb = dtx_q4_row_bytes(K), ng = dtx_q4_groups(K);
    DTX_PAR_FOR(N * K, n, N, q4_dequantize_row(w + n * K, q + n * rb, scale + n * ng, K));
}

float dtx_f16_round_f32(float f) {
    float a = fabsf(f);
    if (!(a < 65520.0f)) return isnan(f) ? f : copysignf(INFINITY, f); /* 65520 and up round to infinity */
    if (a < 0x1p-14f) return rintf(f * 0x1p24f) * 0x1p-24f;              /* subnormal: multiples of 2^-24 */
    int e;
    frexpf(a, &e);                                                       /* a in [2^(e-1), 2^e) */
    return ldexpf(rintf(ldexpf(f, 11 - e)), e - 11);                     /* 11 significant bits */
}

void dtx_f16_round(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = dtx_f16_round_f32(x[i]);
}

float dtx_q4_best_clip(const float *w, int64_t kg, const double *m2) {
    uint8_t q[DTX_Q4_GROUP / 2];
    float s, v[DTX_Q4_GROUP], best_c = 1.0f;
    double best = INFINITY;
    if (kg > DTX_Q4_GROUP) kg = DTX_Q4_GROUP;
    for (int i = 0; i <= 20; i++) {
        float c = 1.0f - 0.025f * (float)i;
        dtx_q4_quantize_row(q, &s, w, kg, c);
        dtx_q4_dequantize(v, q, &s, 1, kg);
        double e = 0;
        for (int64_t k = 0; k < kg; k++) e += (m2 ? m2[k] : 1.0) * ((double)w[k] - v[k]) * ((double)w[k] - v[k]);
        if (e < best) best = e, best_c = c;
    }
    return best_c;
}

void dtx_a8_quantize(int8_t *xq, const float *x, int64_t K, float xscale) {
    float inv = 1.0f / xscale;
    for (int64_t k = 0; k < K; k++) xq[k] = sat_i8(x[k] * inv, 127);
}

/* ---- the portable products */

void dtx_gemv_q8_portable(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++) {
        const int8_t *r = q + n * K;
        float acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < K; k++) acc += x[k] * (float)r[k];
        out[n] = scale[n] * acc;
    }
}

void dtx_gemv_q4_portable(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N) {
    const int64_t G = DTX_Q4_GROUP, half = G / 2, ng = dtx_q4_groups(K), rb = dtx_q4_row_bytes(K);
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *r = q + n * rb;
        float acc = 0;
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *b = r + g * half;
            const float *xg = x + g * G;
            int64_t len = K - g * G < G ? K - g * G : G;
            float s = 0;
            for (int64_t j = 0; j < half && j < len; j++) s += xg[j] * (float)((b[j] & 15) - 8);
            for (int64_t j = half; j < len; j++) s += xg[j] * (float)((b[j - half] >> 4) - 8);
            acc += scale[n * ng + g] * s;
        }
        out[n] = acc;
    }
}

void dtx_gemv_q8a8_portable(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale,
                            int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++) {
        const int8_t *r = q + n * K;
        int32_t acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < K; k++) acc += (int32_t)xq[k] * (int32_t)r[k];
        out[n] = xscale * scale[n] * (float)acc;
    }
}
