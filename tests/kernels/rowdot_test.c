/* The one-row products' entry points (rowdot.c: dtx_gemv, dtx_gemv_bf16,
 * which split the rows over threads): the same bits at any thread count,
 * and the bits of the level's single-threaded kernel. The kernels themselves
 * (dot_heads, axpy_heads, gemv, gemv_bf16) at every ISA level against a
 * double reference: tests/kernels/simd_ops_test.c. */
#include "../test.h"
#include "kernels/kernels.h"
#include "kernels/simd.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *randf(dtx_rng *r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)dtx_rng_normal(r);
    return x;
}

TEST(kernel_rowdot_gemv_threads_do_not_change_bits) {
    dtx_rng r;
    dtx_rng_seed(&r, 911);
    /* 64 x 1003: many chunks and a last block of 3 rows, split over 2, 3 and
     * 5 threads (more than the cores: threads finish at different times and
     * take chunks from each other) */
    static const int64_t shapes[][2] = {{512, 512}, {13, 3}, {1408, 77}, {64, 8200}, {9, 1}, {64, 1003}};
    int saved = omp_get_max_threads();
    for (int si = 0; si < 6; si++) {
        int64_t K = shapes[si][0], N = shapes[si][1];
        float *x = randf(&r, (size_t)K), *w = randf(&r, (size_t)(N * K)), *o[3][2];
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K));
        for (int64_t i = 0; i < N * K; i++) wb[i] = dtx_f32_to_bf16(w[i]);
        for (int64_t i = 0; i < K; i++) x[i] = dtx_bf16_round_f32(x[i]);
        for (int t = 0; t < 3; t++)
            for (int b = 0; b < 2; b++) o[t][b] = malloc(sizeof(float) * (size_t)N);
        omp_set_num_threads(1);
        dtx_gemv(o[1][0], x, w, K, N);
        dtx_gemv_bf16(o[1][1], x, wb, K, N);
        dtx_simd()->gemv(o[2][0], x, w, K, N);
        dtx_simd()->gemv_bf16(o[2][1], x, wb, K, N);
        for (int nt = 2; nt <= 5; nt += nt == 2 ? 1 : 2) {
            omp_set_num_threads(nt);
            dtx_gemv(o[0][0], x, w, K, N);
            dtx_gemv_bf16(o[0][1], x, wb, K, N);
            for (int b = 0; b < 2; b++)
                CHECKF(!memcmp(o[0][b], o[1][b], sizeof(float) * (size_t)N) &&
                           !memcmp(o[1][b], o[2][b], sizeof(float) * (size_t)N),
                       "gemv%s %lldx%lld, %d threads: the thread count or the split changed bits", b ? "_bf16" : "",
                       (long long)K, (long long)N, nt);
        }
        for (int t = 0; t < 3; t++) free(o[t][0]), free(o[t][1]);
        free(x), free(w), free(wb);
    }
    omp_set_num_threads(saved);
}

/* The batched products (dtx_gemv_*_batch): every input's row of the result
 * has the bits of the one-input product, at every ISA level, for 1 to 3
 * threads, in every format (fp32, bf16, int8, 4-bit with a partial group
 * on fp32 and on bf16 inputs, int8 on both, int8 activations), including shapes that
 * split into many chunks. */
TEST(kernel_rowdot_batch_equals_one_input_products) {
    dtx_rng r;
    dtx_rng_seed(&r, 77);
    static const int64_t shapes[][3] = {{512, 700, 5}, {40, 3, 2}, {2048, 90, 3}, {100, 1003, 7}, {1056, 41, 6}};
    static const dtx_isa levels[] = {DTX_ISA_PORTABLE, DTX_ISA_AVX2, DTX_ISA_AVX512, DTX_ISA_AVX512_BF16};
    int saved = omp_get_max_threads();
    for (int si = 0; si < 5; si++) { /* 1056: 33 groups of 32, a last odd one */
        int64_t K = shapes[si][0], N = shapes[si][1], nb = shapes[si][2];
        int64_t rb = dtx_q4_row_bytes(K), ng = dtx_q4_groups(K);
        float *x = randf(&r, (size_t)(nb * K)), *w = randf(&r, (size_t)(N * K)), *sc = randf(&r, (size_t)(N * ng));
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K));
        int8_t *q8 = malloc((size_t)(N * K)), *xq = malloc((size_t)(nb * K));
        uint8_t *q4 = malloc((size_t)(N * rb));
        for (int64_t i = 0; i < N * K; i++) wb[i] = dtx_f32_to_bf16(w[i]), q8[i] = (int8_t)(dtx_rng_next(&r) % 255 - 127);
        for (int64_t i = 0; i < N * rb; i++) /* codes 1 to 15 in both nibbles */
            q4[i] = (uint8_t)((1 + dtx_rng_next(&r) % 15) | (1 + dtx_rng_next(&r) % 15) << 4);
        /* xf: full fp32 inputs, so that any change in the order of the sums shows in the bits (bf16 inputs
         * times int8 codes sum exactly); xr: bf16 ones, which the vdpbf16ps kernels (bf16, 4-bit) take */
        float *xr = malloc(sizeof(float) * (size_t)(nb * K));
        for (int64_t i = 0; i < nb * K; i++) xr[i] = dtx_bf16_round_f32(x[i]), xq[i] = (int8_t)(dtx_rng_next(&r) % 255 - 127);
        float *one = malloc(sizeof(float) * (size_t)(nb * N)), *all = malloc(sizeof(float) * (size_t)(nb * N));
        for (int li = 0; li < 4; li++) {
            if (levels[li] > dtx_isa_cpu()) continue;
            dtx_isa prev = dtx_isa_set_cap(levels[li]);
            /* at AVX-512, both int8 layouts (two rows a step, or one: dtx_isa_full_width) whatever the CPU */
            for (int fw = 0; fw <= (levels[li] >= DTX_ISA_AVX512); fw++)
            for (int th = 1; th <= 3; th++) {
                dtx_isa_set_full_width(levels[li] >= DTX_ISA_AVX512 ? fw : -1);
                omp_set_num_threads(th);
                for (int kind = 0; kind < 7; kind++) { /* 6: int8 on bf16 inputs (the vdpbf16ps kernel at full width) */
                    const float *xs = kind == 1 || kind == 5 || kind == 6 ? xr : x;
                    for (int64_t b = 0; b < nb; b++) {
                        float *o = one + b * N;
                        const float *xb = xs + b * K;
                        if (kind == 0) dtx_gemv(o, xb, w, K, N);
                        if (kind == 1) dtx_gemv_bf16(o, xb, wb, K, N);
                        if (kind == 2 || kind == 6) dtx_gemv_q8(o, xb, q8, sc, K, N);
                        if (kind == 3 || kind == 5) dtx_gemv_q4(o, xb, q4, sc, K, N);
                        if (kind == 4) dtx_gemv_q8a8(o, xq + b * K, 0.01f, q8, sc, K, N);
                    }
                    if (kind == 0) dtx_gemv_batch(all, xs, nb, w, K, N);
                    if (kind == 1) dtx_gemv_bf16_batch(all, xs, nb, wb, K, N);
                    if (kind == 2 || kind == 6) dtx_gemv_q8_batch(all, xs, nb, q8, sc, K, N);
                    if (kind == 3 || kind == 5) dtx_gemv_q4_batch(all, xs, nb, q4, sc, K, N);
                    if (kind == 4) dtx_gemv_q8a8_batch(all, xq, nb, 0.01f, q8, sc, K, N);
                    CHECKF(!memcmp(one, all, sizeof(float) * (size_t)(nb * N)),
                           "%s, full width %d, kind %d, K %lld N %lld nb %lld, %d threads", dtx_isa_name(levels[li]),
                           dtx_isa_full_width(), kind, (long long)K, (long long)N, (long long)nb, th);
                }
            }
            dtx_isa_set_full_width(-1);
            dtx_isa_set_cap(prev);
        }
        free(x), free(xr), free(w), free(sc), free(wb), free(q8), free(xq), free(q4), free(one), free(all);
    }
    omp_set_num_threads(saved);
}

/* The products of one input in one pass (dtx_gemv_parts, a decode step's
 * q, k, v and λ; w1 and w3): every part's rows have the bits of its own
 * one-part product, at every ISA level, 1 to 3 threads, parts of every kind
 * in one call, row counts that are not multiples of 8 (the next part starts
 * mid-block) and a part small enough to stay on one thread alone. */
TEST(kernel_rowdot_parts_equal_one_part_products) {
    dtx_rng r;
    dtx_rng_seed(&r, 4242);
    static const dtx_isa levels[] = {DTX_ISA_PORTABLE, DTX_ISA_AVX2, DTX_ISA_AVX512, DTX_ISA_AVX512_BF16};
    static const int64_t Ks[] = {512, 1056, 40};
    static const int64_t Ns[7] = {700, 3, 1003, 41, 90, 8, 129};
    int saved = omp_get_max_threads();
    for (int ki = 0; ki < 3; ki++) {
        int64_t K = Ks[ki], rb = dtx_q4_row_bytes(K), ng = dtx_q4_groups(K), tot = 0;
        for (int i = 0; i < 7; i++) tot += Ns[i];
        float *x = randf(&r, (size_t)K), *xr = malloc(sizeof(float) * (size_t)K), *w = randf(&r, (size_t)(tot * K));
        float *sc = randf(&r, (size_t)(tot * ng));
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(tot * K));
        int8_t *q8 = malloc((size_t)(tot * K)), *xq = malloc((size_t)K);
        uint8_t *q4 = malloc((size_t)(tot * rb));
        for (int64_t i = 0; i < tot * K; i++) wb[i] = dtx_f32_to_bf16(w[i]), q8[i] = (int8_t)(dtx_rng_next(&r) % 255 - 127);
        for (int64_t i = 0; i < tot * rb; i++) q4[i] = (uint8_t)((1 + dtx_rng_next(&r) % 15) | (1 + dtx_rng_next(&r) % 15) << 4);
        for (int64_t i = 0; i < K; i++) xr[i] = dtx_bf16_round_f32(x[i]), xq[i] = (int8_t)(dtx_rng_next(&r) % 255 - 127);
        float *one = malloc(sizeof(float) * (size_t)tot), *all = malloc(sizeof(float) * (size_t)tot);
        /* part i: kind (REAL, BF16, Q8 on fp32 x, Q4 on bf16 x, Q8A8, Q8 on bf16 x, Q4 on fp32 x), its own rows */
        static const dtx_rows_kind kinds[7] = {DTX_ROWS_REAL, DTX_ROWS_BF16, DTX_ROWS_Q8, DTX_ROWS_Q4,
                                               DTX_ROWS_Q8A8, DTX_ROWS_Q8, DTX_ROWS_Q4};
        dtx_gemv_part parts[7];
        for (int li = 0; li < 4; li++) {
            if (levels[li] > dtx_isa_cpu()) continue;
            dtx_isa prev = dtx_isa_set_cap(levels[li]);
            for (int th = 1; th <= 3; th++) {
                omp_set_num_threads(th);
                int64_t r0 = 0;
                for (int i = 0; i < 7; i++) {
                    int64_t N = Ns[i];
                    const float *xs = i == 1 || i == 3 || i == 5 ? xr : x;
                    float *o = one + r0;
                    parts[i] = (dtx_gemv_part){.kind = kinds[i], .out = all + r0, .x = xs, .N = N};
                    switch (kinds[i]) {
                    case DTX_ROWS_REAL: dtx_gemv(o, xs, w + r0 * K, K, N), parts[i].w = w + r0 * K; break;
                    case DTX_ROWS_BF16: dtx_gemv_bf16(o, xs, wb + r0 * K, K, N), parts[i].w = wb + r0 * K; break;
                    case DTX_ROWS_Q8:
                        dtx_gemv_q8(o, xs, q8 + r0 * K, sc + r0, K, N), parts[i].w = q8 + r0 * K, parts[i].scale = sc + r0;
                        break;
                    case DTX_ROWS_Q4:
                        dtx_gemv_q4(o, xs, q4 + r0 * rb, sc + r0 * ng, K, N);
                        parts[i].w = q4 + r0 * rb, parts[i].scale = sc + r0 * ng;
                        break;
                    case DTX_ROWS_Q8A8:
                        dtx_gemv_q8a8(o, xq, 0.02f, q8 + r0 * K, sc + r0, K, N);
                        parts[i].x = xq, parts[i].xscale = 0.02f, parts[i].w = q8 + r0 * K, parts[i].scale = sc + r0;
                        break;
                    }
                    r0 += N;
                }
                for (int64_t i = 0; i < tot; i++) all[i] = NAN;
                dtx_gemv_parts(parts, 7, K);
                for (int i = 0, at = 0; i < 7; at += (int)Ns[i], i++)
                    CHECKF(!memcmp(one + at, all + at, sizeof(float) * (size_t)Ns[i]),
                           "%s, K %lld, %d threads: part %d (kind %d, %lld rows) differs from its own product",
                           dtx_isa_name(levels[li]), (long long)K, th, i, (int)kinds[i], (long long)Ns[i]);
                /* one part alone, and the first two (a layer's w1 and w3) */
                for (int64_t i = 0; i < tot; i++) all[i] = NAN;
                dtx_gemv_parts(parts, 2, K);
                CHECKF(!memcmp(one, all, sizeof(float) * (size_t)(Ns[0] + Ns[1])), "%s, K %lld, %d threads: two parts",
                       dtx_isa_name(levels[li]), (long long)K, th);
            }
            dtx_isa_set_cap(prev);
        }
        free(x), free(xr), free(w), free(sc), free(wb), free(q8), free(xq), free(q4), free(one), free(all);
    }
    omp_set_num_threads(saved);
}

/* The AVX-512 int8 products in both of their layouts (dtx_isa_full_width:
 * int8 × fp32 two rows a step or one in four accumulators, and at the BF16
 * level with bf16 x by vdpbf16ps; int8 × int8 four ymm rows or one zmm
 * row), whatever this CPU would pick: int8 × fp32 and int8 × bf16 against a
 * double reference, int8 × int8 (exact int32 sums) bit for bit
 * against the portable kernel, |x| = 128 and codes −127..127 included;
 * shapes with a masked tail, odd row counts and rows that are not 64-byte
 * aligned. */
TEST(kernel_rowdot_q8_layouts_match_reference) {
    if (dtx_isa_cpu() < DTX_ISA_AVX512) SKIP("the CPU has no AVX-512");
    dtx_rng r;
    dtx_rng_seed(&r, 5150);
    static const int64_t shapes[][2] = {{2048, 37}, {100, 5}, {16, 3}, {1000, 64}, {7, 2}, {200, 9}};
    for (int si = 0; si < 6; si++) {
        int64_t K = shapes[si][0], N = shapes[si][1];
        float *x = randf(&r, (size_t)K), *sc = randf(&r, (size_t)N), *o = malloc(sizeof(float) * (size_t)N);
        float *xr = malloc(sizeof(float) * (size_t)K);
        for (int64_t i = 0; i < K; i++) xr[i] = dtx_bf16_round_f32(x[i]);
        int8_t *q = malloc((size_t)(N * K)), *xq = malloc((size_t)K);
        float *o8 = malloc(sizeof(float) * (size_t)N), *ref8 = malloc(sizeof(float) * (size_t)N);
        for (int64_t i = 0; i < N * K; i++) q[i] = (int8_t)(dtx_rng_next(&r) % 255 - 127);
        for (int64_t i = 0; i < K; i++) xq[i] = (int8_t)(dtx_rng_next(&r) % 256 - 128);
        dtx_simd_for(DTX_ISA_PORTABLE)->gemv_q8a8(ref8, xq, 0.01f, q, sc, K, N);
        for (int fw = 0; fw < 2; fw++) {
            dtx_isa_set_full_width(fw);
            dtx_simd_for(DTX_ISA_AVX512)->gemv_q8a8(o8, xq, 0.01f, q, sc, K, N);
            CHECKF(!memcmp(o8, ref8, sizeof(float) * (size_t)N), "gemv_q8a8, full width %d, K %lld N %lld: not the portable bits",
                   fw, (long long)K, (long long)N);
            /* fp32 x (the fp32 kernels), then bf16 x at the BF16 level (at full width the vdpbf16ps kernel) */
            for (int lv = 0; lv < 2; lv++) {
                if (lv && dtx_isa_cpu() < DTX_ISA_AVX512_BF16) continue;
                dtx_simd_for(lv ? DTX_ISA_AVX512_BF16 : DTX_ISA_AVX512)->gemv_q8(o, lv ? xr : x, q, sc, K, N);
                const float *xv = lv ? xr : x;
                for (int64_t n = 0; n < N; n++) {
                    double ref = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++)
                        ref += (double)xv[k] * q[n * K + k], mag += fabs((double)xv[k] * q[n * K + k]);
                    ref *= sc[n], mag *= fabs(sc[n]);
                    CHECKF(fabs(o[n] - ref) <= 1e-6 * mag + 1e-30, "%s x, full width %d, K %lld N %lld row %lld: %g against %g",
                           lv ? "bf16" : "fp32", fw, (long long)K, (long long)N, (long long)n, (double)o[n], ref);
                }
            }
        }
        dtx_isa_set_full_width(-1);
        free(x), free(xr), free(sc), free(o), free(q), free(xq), free(o8), free(ref8);
    }
}
