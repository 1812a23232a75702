/* Quantised weights and activations (quant_linear.c): the round trips, the
 * layout, the rounding, and the threaded split of the one-row products (the
 * same bits whatever the thread count). The products themselves at every
 * ISA level: tests/kernels/simd_ops_test.c. */
#include "../test.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *randf(dtx_rng *r, size_t n, double sd) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(sd * dtx_rng_normal(r));
    return x;
}

static const int64_t KS[] = {1, 7, 16, 31, 32, 33, 64, 100, 344};
#define NK ((int)(sizeof KS / sizeof KS[0]))

TEST(kernel_quant_linear_q8_round_trip) {
    dtx_rng r;
    dtx_rng_seed(&r, 1301);
    int64_t K = 100;
    float *w = randf(&r, (size_t)K, 1.0), *back = malloc(sizeof(float) * (size_t)K);
    int8_t *q = malloc((size_t)K);
    float amax = 0;
    for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(w[k]));
    float s = dtx_q8_quantize_row(q, w, K, 0);
    CHECK(s == amax / 127.0f);
    dtx_q8_dequantize(back, q, &s, 1, K);
    int hit_max = 0;
    for (int64_t k = 0; k < K; k++) {
        CHECKF(fabsf(back[k] - w[k]) <= 0.5f * s * 1.0001f, "q8 element %lld: %g -> %g (scale %g)", (long long)k,
               w[k], back[k], s);
        hit_max |= q[k] == 127 || q[k] == -127;
    }
    CHECK(hit_max); /* the absmax element gets the full range */
    /* a clipping bound: values past it saturate at ±127 */
    float sc = dtx_q8_quantize_row(q, w, K, 0.5f * amax);
    CHECK(sc == 0.5f * amax / 127.0f);
    for (int64_t k = 0; k < K; k++)
        if (fabsf(w[k]) > 0.51f * amax) CHECK(q[k] == (w[k] > 0 ? 127 : -127));
    /* a row of zeros */
    memset(w, 0, sizeof(float) * (size_t)K);
    memset(q, 5, (size_t)K);
    CHECK(dtx_q8_quantize_row(q, w, K, 0) == 0);
    for (int64_t k = 0; k < K; k++) CHECK(q[k] == 0);
    free(w), free(back), free(q);
}

TEST(kernel_quant_linear_q4_round_trip_and_layout) {
    dtx_rng r;
    dtx_rng_seed(&r, 1302);
    for (int ik = 0; ik < NK; ik++) {
        int64_t K = KS[ik], ng = dtx_q4_groups(K), rb = dtx_q4_row_bytes(K);
        CHECK(rb == ng * 16);
        float *w = randf(&r, (size_t)K, 2.0), *back = malloc(sizeof(float) * (size_t)K);
        uint8_t *q = malloc((size_t)rb);
        float *s = malloc(sizeof(float) * (size_t)ng);
        dtx_q4_quantize_row(q, s, w, K, 1.0f);
        dtx_q4_dequantize(back, q, s, 1, K);
        for (int64_t g = 0; g < ng; g++) {
            float amax = 0;
            for (int64_t k = g * 32; k < K && k < g * 32 + 32; k++) amax = fmaxf(amax, fabsf(w[k]));
            CHECKF(s[g] == amax / 7.0f, "K %lld group %lld: scale %g, absmax %g", (long long)K, (long long)g, s[g],
                   amax);
        }
        for (int64_t k = 0; k < K; k++) {
            float sg = s[k / 32];
            CHECKF(fabsf(back[k] - w[k]) <= 0.5f * sg * 1.0001f, "q4 K %lld element %lld: %g -> %g", (long long)K,
                   (long long)k, w[k], back[k]);
            /* the documented layout: byte k%16 of the group, low nibble for the first 16 */
            uint8_t b = q[k / 32 * 16 + k % 16];
            int v = (k % 32 < 16 ? b & 15 : b >> 4) - 8;
            CHECK(v == dtx_q4_get(q, k) && v >= -7 && v <= 7);
        }
        for (int64_t k = K; k < ng * 32; k++) CHECKF(dtx_q4_get(q, k) == 0, "padding past K %lld", (long long)K);
        free(w), free(back), free(q), free(s);
    }
    /* clipping shrinks the scale and saturates at ±7 */
    float w[32], s;
    uint8_t q[16];
    for (int k = 0; k < 32; k++) w[k] = (float)(k - 16) / 16.0f;
    dtx_q4_quantize_row(q, &s, w, 32, 0.5f);
    CHECK(s == 1.0f * 0.5f / 7.0f);
    CHECK(dtx_q4_get(q, 0) == -7 && dtx_q4_get(q, 31) == 7);
}

/* fp16 rounding against the half values themselves (dtx_f16_to_f32, the
 * loader's decoder): every finite half is kept, midpoints between
 * neighbours go to the even one, points just off them to the nearer; the
 * range's edges and the specials. */
TEST(kernel_quant_linear_f16_round_is_ieee_nearest_even) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) { /* the positive finite halves and their upper neighbours */
        float a = dtx_f16_to_f32((uint16_t)h), b = dtx_f16_to_f32((uint16_t)(h + 1));
        float mid = a + (b - a) / 2; /* exact in float */
        float even = (h & 1) ? b : a;
        bad += dtx_f16_round_f32(a) != a || dtx_f16_round_f32(-a) != -a;
        if (h + 1 < 0x7c00) {
            bad += dtx_f16_round_f32(mid) != even || dtx_f16_round_f32(-mid) != -even;
            bad += dtx_f16_round_f32(nextafterf(mid, 0)) != a || dtx_f16_round_f32(nextafterf(mid, INFINITY)) != b;
        }
    }
    CHECKF(bad == 0, "%d halves or midpoints rounded wrongly", bad);
    CHECK(dtx_f16_round_f32(65504.0f) == 65504.0f && dtx_f16_round_f32(65519.99f) == 65504.0f);
    CHECK(isinf(dtx_f16_round_f32(65520.0f)) && dtx_f16_round_f32(-1e9f) == -INFINITY);
    CHECK(dtx_f16_round_f32(ldexpf(1, -25)) == 0 && dtx_f16_round_f32(ldexpf(1.0001f, -25)) == ldexpf(1, -24));
    CHECK(isnan(dtx_f16_round_f32(NAN)) && dtx_f16_round_f32(INFINITY) == INFINITY);
    float x[3] = {1.0f + ldexpf(1, -11), 3.14159f, -2.0f}, y[3];
    dtx_f16_round(y, x, 3);
    CHECK(y[0] == 1.0f && y[1] == 3.140625f && y[2] == -2.0f);
}

/* The weighted error of group w [kg] quantised with clip c. */
static double q4_group_error(const float *w, int64_t kg, const double *m2, float c) {
    uint8_t q[16];
    float s, v[32];
    dtx_q4_quantize_row(q, &s, w, kg, c);
    dtx_q4_dequantize(v, q, &s, 1, kg);
    double e = 0;
    for (int64_t k = 0; k < kg; k++) e += (m2 ? m2[k] : 1.0) * ((double)w[k] - v[k]) * ((double)w[k] - v[k]);
    return e;
}

/* The 4-bit clipping search: one large weight among small ones is clipped
 * when every input matters alike (the small ones get a finer grid), kept
 * when its input dominates the mean squares; never worse than absmax, and
 * a partial group works the same. */
TEST(kernel_quant_linear_q4_best_clip_weighs_the_inputs) {
    float w[32];
    dtx_rng r;
    dtx_rng_seed(&r, 5);
    for (int k = 0; k < 32; k++) w[k] = 0.1f * (2.0f * (float)dtx_rng_uniform(&r) - 1.0f);
    w[7] = 1.0f;
    double flat[32], loud[32];
    for (int k = 0; k < 32; k++) flat[k] = 1.0, loud[k] = k == 7 ? 1e6 : 1.0;
    for (int64_t kg = 32; kg >= 20; kg -= 12) {
        float c = dtx_q4_best_clip(w, kg, flat);
        CHECKF(c < 1.0f && c >= 0.5f, "kg %lld: clip %g", (long long)kg, (double)c);
        CHECK(q4_group_error(w, kg, flat, c) < q4_group_error(w, kg, flat, 1.0f));
        CHECK(dtx_q4_best_clip(w, kg, NULL) == c); /* NULL: all 1 */
        CHECK(dtx_q4_best_clip(w, kg, loud) == 1.0f);
        for (int i = 0; i <= 20; i++) /* the minimum of the grid */
            CHECK(q4_group_error(w, kg, flat, c) <= q4_group_error(w, kg, flat, 1.0f - 0.025f * (float)i));
    }
}

TEST(kernel_quant_linear_a8_rounds_to_even_and_saturates) {
    float x[6] = {2.5f, 3.5f, -2.5f, 1000.0f, -1000.0f, 0.49f};
    int8_t q[6];
    dtx_a8_quantize(q, x, 6, 1.0f);
    CHECK(q[0] == 2 && q[1] == 4 && q[2] == -2);
    CHECK(q[3] == 127 && q[4] == -127);
    CHECK(q[5] == 0);
}

TEST(kernel_quant_linear_gemv_threads_do_not_change_bits) {
    dtx_rng r;
    dtx_rng_seed(&r, 1305);
    int64_t K = 344, N = 1003, rb = dtx_q4_row_bytes(K), ng = dtx_q4_groups(K);
    float *w = randf(&r, (size_t)(N * K), 0.5), *x = randf(&r, (size_t)K, 1.0);
    int8_t *q8 = malloc((size_t)(N * K)), *xq = malloc((size_t)K);
    uint8_t *q4 = malloc((size_t)(N * rb));
    float *s8 = malloc(sizeof(float) * (size_t)N), *s4 = malloc(sizeof(float) * (size_t)(N * ng));
    for (int64_t n = 0; n < N; n++) {
        s8[n] = dtx_q8_quantize_row(q8 + n * K, w + n * K, K, 0);
        dtx_q4_quantize_row(q4 + n * rb, s4 + n * ng, w + n * K, K, 1.0f);
    }
    dtx_a8_quantize(xq, x, K, 0.02f);
    float *o[2][3];
    int nt = omp_get_max_threads();
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t == 0 ? 1 : 3);
        for (int j = 0; j < 3; j++) o[t][j] = malloc(sizeof(float) * (size_t)N);
        dtx_gemv_q8(o[t][0], x, q8, s8, K, N);
        dtx_gemv_q4(o[t][1], x, q4, s4, K, N);
        dtx_gemv_q8a8(o[t][2], xq, 0.02f, q8, s8, K, N);
    }
    omp_set_num_threads(nt);
    for (int j = 0; j < 3; j++) {
        CHECKF(memcmp(o[0][j], o[1][j], sizeof(float) * (size_t)N) == 0, "product %d: thread count changed bits", j);
        free(o[0][j]), free(o[1][j]);
    }
    free(w), free(x), free(q8), free(xq), free(q4), free(s8), free(s4);
}


/* Dequantising many rows (over the threads) gives exactly scale · code for
 * every element, by the codes' own definition (dtx_q4_get), a partial last
 * 4-bit group included. */
TEST(kernel_quant_dequantize_is_scale_times_code) {
    enum { N = 700, K = 100 }; /* N·K past DTX_PAR_MIN: the threaded path */
    dtx_rng r;
    dtx_rng_seed(&r, 1311);
    const int64_t rb = dtx_q4_row_bytes(K), ng = dtx_q4_groups(K);
    uint8_t *q4 = malloc((size_t)(N * rb));
    int8_t *q8 = malloc((size_t)(N * K));
    float *s4 = malloc(sizeof(float) * (size_t)(N * ng)), *s8 = malloc(sizeof(float) * N);
    float *out = malloc(sizeof(float) * (size_t)(N * K));
    REQUIRE(q4 && q8 && s4 && s8 && out);
    for (int64_t i = 0; i < N * rb; i++) q4[i] = (uint8_t)(dtx_rng_next(&r) & 0xFF);
    for (int64_t i = 0; i < N * K; i++) q8[i] = (int8_t)(dtx_rng_next(&r) % 255 - 127);
    for (int64_t i = 0; i < N * ng; i++) s4[i] = (float)(0.01 + dtx_rng_uniform(&r));
    for (int64_t i = 0; i < N; i++) s8[i] = (float)(0.01 + dtx_rng_uniform(&r));
    int bad4 = 0, bad8 = 0;
    dtx_q4_dequantize(out, q4, s4, N, K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            bad4 += out[n * K + k] != s4[n * ng + k / DTX_Q4_GROUP] * (float)dtx_q4_get(q4 + n * rb, k);
    dtx_q8_dequantize(out, q8, s8, N, K);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) bad8 += out[n * K + k] != s8[n] * (float)q8[n * K + k];
    CHECKF(bad4 == 0 && bad8 == 0, "%d 4-bit and %d int8 values differ from scale · code", bad4, bad8);
    free(q4), free(q8), free(s4), free(s8), free(out);
}

/* Every weight format's row (dtx_qformat): a row quantised and dequantised
 * lands within half a step of each weight (the step its scale gives), a
 * clip factor below 1 saturates the largest weights, the product is the one
 * of the dequantised rows, and the sizes are the layout's. A new format is
 * a new entry of the list below. */
TEST(kernel_quant_linear_formats_round_trip_and_multiply) {
    static const int bits[] = {8, 4};
    dtx_rng r;
    dtx_rng_seed(&r, 1310);
    for (size_t b = 0; b < sizeof bits / sizeof bits[0]; b++) {
        const dtx_qformat *f = dtx_qformat_of(bits[b]);
        REQUIRE(f && f->bits == bits[b]);
        for (int64_t K = 1; K <= 100; K += 33) {
            int64_t N = 5, rb = f->row_bytes(K), rs = f->row_scales(K);
            float *w = randf(&r, (size_t)(N * K), 1.0), *x = randf(&r, (size_t)K, 1.0);
            float *deq = malloc(sizeof(float) * (size_t)(N * K)), *s = malloc(sizeof(float) * (size_t)(N * rs));
            float *clip = malloc(sizeof(float) * (size_t)rs), out[5];
            uint8_t *q = malloc((size_t)(N * rb));
            for (int64_t g = 0; g < rs; g++) clip[g] = 0.5f;
            f->quantize_row(q, s, w, K, NULL);
            for (int64_t n = 1; n < N; n++) f->quantize_row(q + n * rb, s + n * rs, w + n * K, K, n == 4 ? clip : NULL);
            f->dequantize(deq, q, s, N, K);
            int far = 0;
            for (int64_t n = 0; n < 4; n++) { /* the row's largest step: the format's scales cover the row somehow */
                float step = 0;
                for (int64_t g = 0; g < rs; g++) step = fmaxf(step, s[n * rs + g]);
                for (int64_t k = 0; k < K; k++) far += fabsf(deq[n * K + k] - w[n * K + k]) > 0.5001f * step;
            }
            CHECKF(far == 0, "%s K %lld: %d weights farther than half a step", f->name, (long long)K, far);
            float row_max = 0, deq_max = 0; /* clip 0.5: the largest weight saturates at half the absmax or so */
            for (int64_t k = 0; k < K; k++)
                row_max = fmaxf(row_max, fabsf(w[4 * K + k])), deq_max = fmaxf(deq_max, fabsf(deq[4 * K + k]));
            CHECKF(K < 2 || deq_max < 0.75f * row_max, "%s K %lld: clip 0.5 kept %g of %g", f->name, (long long)K,
                   deq_max, row_max);
            f->gemv(out, x, q, s, K, N);
            double want[5], mag[5];
            for (int64_t n = 0; n < N; n++) {
                want[n] = mag[n] = 0;
                for (int64_t k = 0; k < K; k++)
                    want[n] += (double)x[k] * deq[n * K + k], mag[n] += fabs((double)x[k] * deq[n * K + k]);
                CHECKF(fabs(out[n] - want[n]) <= 1e-6 * (mag[n] + 1e-30), "%s K %lld row %lld: product %g, want %g",
                       f->name, (long long)K, (long long)n, out[n], want[n]);
            }
            CHECK(!f->bad_code || f->bad_code(q, (size_t)(N * rb)) == -1); /* what it writes is valid */
            free(w), free(x), free(deq), free(s), free(clip), free(q);
        }
    }
    uint8_t bad[3] = {0x11, 0x80, 0x11};
    CHECK(dtx_qformat_of(4)->bad_code(bad, 3) == 1 && dtx_qformat_of(8)->bad_code == NULL);
    /* a big tensor, checked in blocks over the threads: the first bad byte, a low or a high nibble 0 */
    enum { BIG = 3 << 20 };
    uint8_t *big = malloc(BIG);
    REQUIRE(big);
    memset(big, 0x88, BIG);
    CHECK(dtx_qformat_of(4)->bad_code(big, BIG) == -1);
    big[BIG - 1] = 0x08, big[2000001] = 0x80;
    CHECK(dtx_qformat_of(4)->bad_code(big, BIG) == 2000001);
    big[70000] = 0x08;
    CHECK(dtx_qformat_of(4)->bad_code(big, BIG) == 70000);
    free(big);
    CHECK(dtx_qformat_of(0) == NULL && dtx_qformat_of(2) == NULL);
}

/* The bf16 row (weights in place): codes are the weights rounded to bf16
 * (nearest even), no scales, and the product is x · those values in fp32,
 * x as given (not rounded). */
TEST(kernel_quant_linear_bf16_row_is_the_weights_in_bf16) {
    const dtx_qformat *f = dtx_qformat_of(16);
    REQUIRE(f && f->row_scales(77) == 0 && f->row_bytes(77) == 154 && f->bad_code == NULL);
    dtx_rng r;
    dtx_rng_seed(&r, 1616);
    enum { N = 7, K = 77 };
    float *w = randf(&r, N * K, 1.0), *x = randf(&r, K, 1.0), deq[N * K], out[N], scale = 0;
    uint16_t q[N * K];
    for (int n = 0; n < N; n++) f->quantize_row(q + n * K, &scale, w + n * K, K, NULL);
    f->dequantize(deq, q, &scale, N, K);
    for (int i = 0; i < N * K; i++) CHECK(deq[i] == dtx_bf16_round_f32(w[i]));
    f->gemv(out, x, q, &scale, K, N);
    for (int n = 0; n < N; n++) {
        double want = 0, mag = 0;
        for (int k = 0; k < K; k++) want += (double)x[k] * deq[n * K + k], mag += fabs((double)x[k] * deq[n * K + k]);
        CHECKF(fabs(out[n] - want) <= 1e-6 * mag, "row %d: %g, want %g", n, out[n], want);
    }
    free(w), free(x);
}
