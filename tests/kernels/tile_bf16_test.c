/* The bf16 tile products and packers (tile_bf16.c) on their own: every
 * packer against its index formula (pads included), the product against
 * double-precision loops over the same bf16-rounded operands (so only fp32
 * accumulation error is left), the causal shortcuts, and the AVX-512 BF16
 * path against the portable one. */
#include "../test.h"
#include "kernels/tile_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *randf(dtx_rng *r, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)dtx_rng_normal(r);
    return x;
}

static float rb(float x) { return dtx_bf16_to_f32(dtx_f32_to_bf16(x)); }

/* The two bf16 paths: portable, and AVX-512 BF16 where the CPU has it (the
 * levels between run the portable bf16 code again, so they are left out). */
static const char *path_name(void) { return dtx_tile_bf16_simd() ? "avx512bf16" : "portable"; }
static int bf16_path_level(dtx_isa lvl) { return lvl == DTX_ISA_PORTABLE || lvl == DTX_ISA_AVX512_BF16; }

TEST(tile_bf16_pack_a) {
    dtx_rng r;
    dtx_rng_seed(&r, 40);
    static const int64_t shapes[][2] = {{1, 1}, {5, 7}, {16, 16}, {33, 70}, {100, 31}};
    FOR_EACH_ISA(lvl) {
        if (!bf16_path_level(lvl)) continue;
        for (int si = 0; si < 5; si++)
            for (int mode = 0; mode < 3; mode++) { /* rows, transposed, other strides */
                int64_t R = shapes[si][0], C = shapes[si][1], ld = 2 * R + 2 * C + 6;
                int64_t sr = mode == 0 ? ld : mode == 1 ? 1 : 2, sc = mode == 0 ? 1 : mode == 1 ? ld : ld;
                float *src = randf(&r, (size_t)(ld * ld));
                int64_t ldd = C + (C & 1) + 4;
                dtx_bf16 *dst = malloc(sizeof(dtx_bf16) * (size_t)(R * ldd));
                for (int64_t i = 0; i < R * ldd; i++) dst[i] = 0x7777; /* sentinel */
                dtx_bf16_pack_a(dst, ldd, src, sr, sc, R, C);
                int bad = 0;
                for (int64_t i = 0; i < R; i++)
                    for (int64_t c = 0; c < ldd; c++) {
                        dtx_bf16 want = c < C ? dtx_f32_to_bf16(src[i * sr + c * sc]) : c == C && (C & 1) ? 0 : 0x7777;
                        bad += dst[i * ldd + c] != want;
                    }
                CHECKF(bad == 0, "pack_a %lldx%lld mode %d %s: %d wrong", (long long)R, (long long)C, mode,
                       path_name(), bad);
                free(src), free(dst);
            }
    }
}

/* B(kk, n) at dst[(kk/2)·2·ldp + 2n + kk%2]; the pad row of an odd K is 0. */
static int check_pairs(const dtx_bf16 *dst, int64_t ldp, int64_t K, int64_t N, const float *src, int64_t sk,
                       int64_t sn) {
    int bad = 0;
    for (int64_t kk = 0; kk < K + (K & 1); kk++)
        for (int64_t n = 0; n < N; n++) {
            dtx_bf16 want = kk < K ? dtx_f32_to_bf16(src[kk * sk + n * sn]) : 0;
            bad += dst[(kk / 2) * 2 * ldp + 2 * n + (kk & 1)] != want;
        }
    for (int64_t kk = 0; kk < K + (K & 1); kk++) /* words beyond N untouched */
        for (int64_t n = N; n < ldp; n++) bad += dst[(kk / 2) * 2 * ldp + 2 * n + (kk & 1)] != 0x7777;
    return bad;
}

TEST(tile_bf16_pack_b) {
    dtx_rng r;
    dtx_rng_seed(&r, 41);
    static const int64_t shapes[][2] = {{1, 1}, {2, 16}, {7, 5}, {64, 64}, {33, 70}, {100, 17}};
    FOR_EACH_ISA(lvl) {
        if (!bf16_path_level(lvl)) continue;
        for (int si = 0; si < 6; si++)
            for (int trans = 0; trans <= 1; trans++) {
                /* not transposed: src [K × N]; transposed: src [N × K] */
                int64_t K = shapes[si][0], N = shapes[si][1], lds = (trans ? K : N) + 3, ldp = N + 5;
                float *src = randf(&r, (size_t)((trans ? N : K) * lds));
                size_t n = (size_t)(((K + 1) / 2) * 2 * ldp);
                dtx_bf16 *dst = malloc(sizeof(dtx_bf16) * n);
                for (size_t i = 0; i < n; i++) dst[i] = 0x7777;
                if (trans) dtx_bf16_pack_bt(dst, ldp, src, lds, N, K);
                else dtx_bf16_pack_b(dst, ldp, src, lds, K, N);
                int bad = check_pairs(dst, ldp, K, N, src, trans ? 1 : lds, trans ? lds : 1);
                CHECKF(bad == 0, "pack_b%s K%lld N%lld %s: %d wrong", trans ? "t" : "", (long long)K, (long long)N,
                       path_name(), bad);
                free(src), free(dst);
            }
    }
}

/* The product (all tri modes, odd K, ragged M and N, acc) against double
 * loops over the rounded operands. */
TEST(tile_bf16_gemm) {
    dtx_rng r;
    dtx_rng_seed(&r, 42);
    static const int64_t shapes[][3] = {{64, 64, 64}, {13, 77, 9}, {1, 1, 1}, {6, 16, 130}, {45, 70, 67}, {5, 3, 0}};
    static const int64_t diags[] = {-20, -3, 0, 5, 40};
    FOR_EACH_ISA(lvl) {
        if (!bf16_path_level(lvl)) continue;
        for (int si = 0; si < 6; si++)
            for (int tri = DTX_TRI_NONE; tri <= DTX_TRI_K_LO; tri++)
                for (int di = 0; di < (tri == DTX_TRI_NONE ? 1 : 5); di++) {
                    int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], diag = diags[di];
                    int64_t K2 = K + (K & 1), lda = K2 + 2, ldp = N + 3, ldc = N + 2;
                    int acc = (si + di) % 2;
                    float *Af = randf(&r, (size_t)(M * K + 1)), *Bf = randf(&r, (size_t)(K * N + 1));
                    for (int64_t i = 0; i < M; i++) /* the zeros the caller promises */
                        for (int64_t kk = 0; kk < K; kk++)
                            if ((tri == DTX_TRI_K_HI && kk > diag + i) || (tri == DTX_TRI_K_LO && kk < i - diag))
                                Af[i * K + kk] = 0;
                    dtx_bf16 *A = malloc(sizeof(dtx_bf16) * (size_t)(M * lda + 1));
                    dtx_bf16 *B = malloc(sizeof(dtx_bf16) * (size_t)((K2 / 2) * 2 * ldp + 1));
                    dtx_bf16_pack_a(A, lda, Af, K, 1, M, K);
                    dtx_bf16_pack_b(B, ldp, Bf, N, K, N);
                    float *C = randf(&r, (size_t)(M * ldc)), *C0 = malloc(sizeof(float) * (size_t)(M * ldc));
                    memcpy(C0, C, sizeof(float) * (size_t)(M * ldc));
                    dtx_bf16_gemm_tri(M, N, K, A, lda, B, ldp, C, ldc, acc, (dtx_tri)tri, diag);
                    double worst = 0;
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < ldc; j++) {
                            if (j >= N) { /* beyond N: untouched */
                                worst = fmax(worst, fabs(C[i * ldc + j] - C0[i * ldc + j]));
                                continue;
                            }
                            if (tri == DTX_TRI_N_HI && j > diag + i) continue; /* unspecified */
                            double s = acc ? C0[i * ldc + j] : 0;
                            for (int64_t kk = 0; kk < K; kk++) s += (double)rb(Af[i * K + kk]) * rb(Bf[kk * N + j]);
                            worst = fmax(worst, fabs(C[i * ldc + j] - s) / (1 + fabs(s)));
                        }
                    CHECKF(worst < 1e-5, "bf16 gemm %lldx%lldx%lld tri %d diag %lld acc %d %s: err %.3g",
                           (long long)M, (long long)N, (long long)K, tri, (long long)diag, acc, path_name(), worst);
                    free(Af), free(Bf), free(A), free(B), free(C), free(C0);
                }
    }
}

/* The rounding the packers share: ties to even, NaN kept quiet. */
TEST(tile_bf16_rounding) {
    CHECK(dtx_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(rb(1.0f + 1.0f / 256) == 1.0f);            /* tie: to even (down) */
    CHECK(rb(1.0f + 3.0f / 256) == 1.0f + 4.0f / 256); /* tie: to even (up) */
    CHECK(isnan(rb(NAN)) && isinf(rb(INFINITY)));
}

/* The native packer rounds as the portable one (ties included). */
TEST(tile_bf16_native_rounds_as_portable) {
    REQUIRE_ISA(DTX_ISA_AVX512_BF16);
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = 1.0f + (float)i / 512;
    dtx_bf16 a[32], b[32];
    dtx_isa prev = dtx_isa_set_cap(DTX_ISA_AVX512_BF16);
    CHECK(dtx_tile_bf16_simd());
    dtx_bf16_pack_a(a, 32, x, 32, 1, 1, 32);
    dtx_isa_set_cap(DTX_ISA_PORTABLE);
    dtx_bf16_pack_a(b, 32, x, 32, 1, 1, 32);
    dtx_isa_set_cap(prev);
    CHECK(memcmp(a, b, sizeof a) == 0);
}
