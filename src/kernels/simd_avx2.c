/* AVX2 + FMA tile kernels (simd.h), for CPUs with 16 ymm registers and
 * no AVX-512 (AMD Zen 1–3, Intel client cores since Haswell). Same contracts
 * and the same order of tiles as the AVX-512 kernels (simd_avx512.c):
 *   - the product keeps a 6 × 16 block of C in 12 ymm accumulators; per k
 *     step it loads one 16-wide row of B (2 vectors, the last one masked for
 *     ragged n) and broadcasts one element of A per row from memory, so A may
 *     be read with any strides; 12 + 2 + 1 registers;
 *   - 8×8 in-register transposes;
 *   - exp8: dtx_vexpf (vexp.h) lane for lane, so the two give the same bits,
 *     with results below FLT_MIN flushed to 0 as the AVX-512 exp16 does;
 *   - the flash softmax row steps on 8 lanes;
 *   - the one-row products of decoding: a weight's rows 8 at a time, their
 *     sums transposed into one vector (gemv, gemv_bf16, int8); the cached
 *     attention's walks row by row, each row's heads in turn (dot_heads,
 *     axpy_heads).
 * Masked stores (slow on AMD cores) only happen at ragged tile edges.
 * Compiled with target attributes (any -march); tile_gemm.c's table picks
 * these at ISA level AVX2 only. */
#include "kernels/kernels.h"
#include "kernels/simd.h"
#include "kernels/gemv_q8a8_body.h"

#include <math.h>
#include <string.h>

#if DTX_SIMD_X86
#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* Lanes [0, n) of 8, as a maskload/maskstore mask (n clamped to [0, 8]). */
static const int32_t mask_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
AVX2_INLINE __m256i lanes8(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_loadu_si256((const __m256i *)(const void *)(mask_src + 8 - n));
}

AVX2_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AVX2_INLINE float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ------------------------------------------------------------- product */

enum { MR = 6, NVMAX = 2, NB = 8 * NVMAX }; /* micro-tile: 6 rows × 2 ymm (16 columns) */

/* C[mr × 8·nv] (=|+=) A·B over K; mr, nv and rag (the last vector is
 * partial, lanes ml) are compile-time constants at every call site, so the
 * loops unroll and the accumulators stay in registers. */
AVX2_INLINE void mk_body(const int mr, const int nv, const int rag, int64_t K, const float *A, int64_t sar,
                         int64_t sac, const float *B, int64_t ldb, float *C, int64_t ldc, __m256i ml, int acc) {
    __m256 c[MR][NVMAX];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) c[i][v] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < K; kk++) {
        const float *bp = B + kk * ldb, *ap = A + kk * sac;
        __m256 b[NVMAX];
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++)
            b[v] = rag && v == nv - 1 ? _mm256_maskload_ps(bp + 8 * v, ml) : _mm256_loadu_ps(bp + 8 * v);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            __m256 a = _mm256_broadcast_ss(ap + i * sar);
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) c[i][v] = _mm256_fmadd_ps(a, b[v], c[i][v]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            float *cp = C + i * ldc + 8 * v;
            if (rag && v == nv - 1) {
                __m256 x = acc ? _mm256_add_ps(c[i][v], _mm256_maskload_ps(cp, ml)) : c[i][v];
                _mm256_maskstore_ps(cp, ml, x);
            } else {
                _mm256_storeu_ps(cp, acc ? _mm256_add_ps(c[i][v], _mm256_loadu_ps(cp)) : c[i][v]);
            }
        }
}

typedef void (*mk_fn)(int64_t K, const float *A, int64_t sar, int64_t sac, const float *B, int64_t ldb, float *C,
                      int64_t ldc, __m256i ml, int acc);

#define MK(mr, nv, rag)                                                                                   \
    AVX2_FN static void mk_##mr##_##nv##_##rag(int64_t K, const float *A, int64_t sar, int64_t sac,        \
                                               const float *B, int64_t ldb, float *C, int64_t ldc,         \
                                               __m256i ml, int acc) {                                      \
        mk_body(mr, nv, rag, K, A, sar, sac, B, ldb, C, ldc, ml, acc);                                     \
    }
#define MK_ROW(mr) MK(mr, 1, 0) MK(mr, 2, 0) MK(mr, 1, 1) MK(mr, 2, 1)
MK_ROW(1) MK_ROW(2) MK_ROW(3) MK_ROW(4) MK_ROW(5) MK_ROW(6)
#define MK_PTRS(mr) {{NULL, mk_##mr##_1_0, mk_##mr##_2_0}, {NULL, mk_##mr##_1_1, mk_##mr##_2_1}}
static const mk_fn mk_table[MR + 1][2][NVMAX + 1] = {
    {{NULL}}, MK_PTRS(1), MK_PTRS(2), MK_PTRS(3), MK_PTRS(4), MK_PTRS(5), MK_PTRS(6)};

/* Column panels of 16 outer (the K × 16 panel of B stays in L1 while every
 * row block of A streams past it), row blocks of 6 inner; causal limits per
 * 6-row block, as in the AVX-512 product. */
AVX2_FN static void gemm_avx2(int64_t M, int64_t N, int64_t K, const float *A, int64_t sar, int64_t sac,
                              const float *B, int64_t ldb, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag) {
    for (int64_t j = 0; j < N; j += NB) {
        int64_t nj = tile_min64(NB, N - j);
        for (int64_t i = 0; i < M; i += MR) {
            int mr = (int)tile_min64(MR, M - i);
            int64_t n = nj, kb = 0, ke = K;
            if (tri == DTX_TRI_N_HI) n = tile_min64(nj, diag + i + mr - j); /* last row of the block */
            else if (tri == DTX_TRI_K_HI) ke = tile_clamp64(diag + i + mr, 0, K);
            else if (tri == DTX_TRI_K_LO) kb = tile_clamp64(i - diag, 0, K); /* first row of the block */
            if (n <= 0) continue;
            int nv = (int)((n + 7) / 8), rag = n % 8 != 0;
            mk_table[mr][rag][nv](ke - kb, A + i * sar + kb * sac, sar, sac, B + kb * ldb + j, ldb, C + i * ldc + j,
                                  ldc, lanes8(n - 8 * (nv - 1)), acc);
        }
    }
}

/* ----------------------------------------------------------- transpose */

/* In-register transpose of an 8×8 block. */
AVX2_INLINE void tr8(__m256 r[8]) {
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

/* Full 8×8 blocks in registers; ragged edge blocks element by element. */
AVX2_FN static void transpose_avx2(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                                   int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            int64_t nr = tile_min64(8, rows - r0), nc = tile_min64(8, cols - c0);
            if (nr < 8 || nc < 8) {
                for (int64_t c = 0; c < nc; c++)
                    for (int64_t r = 0; r < nr; r++) dst[(c0 + c) * ldd + r0 + r] = src[(r0 + r) * lds + c0 + c];
                continue;
            }
            __m256 x[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) x[i] = _mm256_loadu_ps(src + (r0 + i) * lds + c0);
            tr8(x);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + (c0 + j) * ldd + r0, x[j]);
        }
}

/* ----------------------------------------------------------------- exp */

/* dtx_vexpf (vexp.h) on 8 lanes, step for step (the same roundings, so the
 * same bits), then lanes below ln(FLT_MIN) flushed to 0 as exp16 does, so
 * no subnormal reaches the products. NaN stays NaN. */
AVX2_INLINE __m256 exp8(__m256 x) {
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 k = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
    __m256 n = _mm256_sub_ps(k, magic);
    __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_castps_si256(magic));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1), bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    y = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(88.8f), _CMP_GT_OQ));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.33654475f), _CMP_LT_OQ), y);
}

AVX2_FN static void exp_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i k = lanes8(n - i);
        _mm256_maskstore_ps(y + i, k, exp8(_mm256_maskload_ps(x + i, k)));
    }
}

/* ---------------------------------------------------- softmax row steps */

/* The valid lanes of s[c, c + 8) of a row with nv valid columns, 0 elsewhere. */
AVX2_INLINE __m256 load_valid(const float *s, int64_t c, int64_t nv) {
    return c + 8 <= nv ? _mm256_loadu_ps(s + c) : _mm256_maskload_ps(s + c, lanes8(nv - c));
}

/* p into s[c, c + 8), lanes below N only. */
AVX2_INLINE void store_row(float *s, int64_t c, int64_t N, __m256 p) {
    if (c + 8 <= N) _mm256_storeu_ps(s + c, p);
    else _mm256_maskstore_ps(s + c, lanes8(N - c), p);
}

/* p with the lanes at or past nv (column c + lane) set to 0. */
AVX2_INLINE __m256 keep_valid(__m256 p, int64_t c, int64_t nv) {
    return c + 8 <= nv ? p : _mm256_and_ps(p, _mm256_castsi256_ps(lanes8(nv - c)));
}

AVX2_FN static void softmax_update_avx2(float *S, int64_t ld, int64_t M, int64_t N, int64_t diag, float scale,
                                        float *m, float *l, float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), vs = _mm256_set1_ps(scale);
    for (int64_t r = 0; r < M; r++) {
        float *s = S + r * ld;
        int64_t nv = tile_valid_cols(diag, r, N);
        if (nv == 0) {
            memset(s, 0, sizeof(float) * (size_t)N);
            alpha[r] = 1;
            continue;
        }
        __m256 mx = ninf;
        for (int64_t c = 0; c < nv; c += 8) {
            __m256 x = load_valid(s, c, nv);
            if (c + 8 > nv) x = _mm256_blendv_ps(ninf, x, _mm256_castsi256_ps(lanes8(nv - c)));
            mx = _mm256_max_ps(mx, x);
        }
        float mt = hmax8(mx) * scale, mn = mt > m[r] ? mt : m[r];
        __m256 vm = _mm256_set1_ps(mn), sum = _mm256_setzero_ps();
        for (int64_t c = 0; c < N; c += 8) { /* lanes past nv may hold garbage (DTX_TRI_N_HI) */
            __m256 p = keep_valid(exp8(_mm256_fmsub_ps(load_valid(s, c, nv), vs, vm)), c, nv);
            sum = _mm256_add_ps(sum, p);
            store_row(s, c, N, p);
        }
        alpha[r] = expf(m[r] - mn); /* m = −∞ on the first tile: alpha = 0 */
        l[r] = l[r] * alpha[r] + hsum8(sum);
        m[r] = mn;
    }
}

AVX2_FN static void exp_rows_avx2(float *P, const float *S, int64_t ld, int64_t M, int64_t N, int64_t diag,
                                  float scale, const float *lse) {
    const __m256 vs = _mm256_set1_ps(scale);
    for (int64_t r = 0; r < M; r++) {
        int64_t nv = tile_valid_cols(diag, r, N);
        const float *s = S + r * ld;
        float *p = P + r * ld;
        __m256 b = _mm256_set1_ps(lse[r]);
        for (int64_t c = 0; c < N; c += 8) {
            __m256 x = c < nv ? keep_valid(exp8(_mm256_fmsub_ps(load_valid(s, c, nv), vs, b)), c, nv)
                              : _mm256_setzero_ps();
            store_row(p, c, N, x);
        }
    }
}

/* ----------------------------------------------------- one-row products */

/* The 8 horizontal sums of a[0..7] as one vector (lane r = Σ lanes of a[r]). */
AVX2_INLINE __m256 hsum8x8(const __m256 a[8]) {
    __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
    /* s0123 lane i (i < 4): half-sum of a[i] over its low 128 bits; lane 4 + i: over its high bits */
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* Rows are loaded as floats: fp32 directly, bf16 widened (bits << 16); the
 * last partial vector of a row (n < 8 values) through a mask or a copy. */
AVX2_INLINE __m256 load_w(const float *p) { return _mm256_loadu_ps(p); }
AVX2_INLINE __m256 load_w_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AVX2_INLINE __m256 maskload_w(const float *p, __m256i m, int64_t n) {
    (void)n;
    return _mm256_maskload_ps(p, m);
}
AVX2_INLINE __m256 maskload_w_bf16(const uint16_t *p, __m256i m, int64_t n) {
    (void)m;
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)n);
    return load_w_bf16(t);
}

/* Int8 rows are read 4x faster than the hardware prefetcher brings them from
 * memory (1/4 of fp32's bytes per multiply-add): the next 8 rows (contiguous
 * in a weight) are fetched by hand, one 64-byte line per 8 columns of the 8
 * rows, which is the rate they are read at (AVX2 machine, 768 x 2048 int8
 * weight streamed from memory, one thread: about 8 -> 19 G weights/s). */
#define NO_PREFETCH(kr, c) ((void)0)
#define PREFETCH_NEXT_8_ROWS(kr, c) _mm_prefetch((const char *)(const void *)((kr) + 8 * ldk) + 8 * (c), _MM_HINT_T0)
/* bf16 rows (half fp32's bytes per multiply-add) outrun the prefetcher too:
 * two lines per 8 columns of the 8 rows (Zen 5, 512 x 65536 bf16 weight, 2
 * threads: 26 -> 44 GB/s, as fast as fp32 rows stream without help). */
#define PREFETCH_NEXT_8_ROWS_BF16(kr, c)                                                                  \
    (_mm_prefetch((const char *)(const void *)((kr) + 8 * ldk) + 16 * (c), _MM_HINT_T0),                  \
     _mm_prefetch((const char *)(const void *)((kr) + 8 * ldk) + 16 * (c) + 64, _MM_HINT_T0))

/* s[t·lds] = scale · x·row_t for t < n, rows d wide with stride ldk: 8 rows
 * at a time (8 independent accumulators: enough loads in flight to stream
 * from memory), their sums transposed into one vector; the rest one by one.
 * PREFETCH(kr, c) runs once per 8 columns of the 8 rows at kr. */
#define DOT_ROWS_BODY(W, LOAD, MASKLOAD, PREFETCH)                                                    \
    int64_t t = 0;                                                                                    \
    __m256i mt = lanes8(d % 8);                                                                       \
    for (; t + 8 <= n; t += 8) {                                                                      \
        __m256 acc[8];                                                                                \
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();             \
        const W *kr = k + t * ldk;                                                                    \
        int64_t c = 0;                                                                                \
        for (; c + 8 <= d; c += 8) {                                                                  \
            __m256 xv = _mm256_loadu_ps(x + c);                                                       \
            PREFETCH(kr, c);                                                                          \
            _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)                                       \
                acc[r] = _mm256_fmadd_ps(xv, LOAD(kr + r * ldk + c), acc[r]);                         \
        }                                                                                             \
        if (c < d) {                                                                                  \
            __m256 xv = _mm256_maskload_ps(x + c, mt);                                                \
            for (int r = 0; r < 8; r++)                                                               \
                acc[r] = _mm256_fmadd_ps(xv, MASKLOAD(kr + r * ldk + c, mt, d - c), acc[r]);          \
        }                                                                                             \
        __m256 v = _mm256_mul_ps(hsum8x8(acc), _mm256_set1_ps(scale));                                \
        if (lds == 1) {                                                                               \
            _mm256_storeu_ps(s + t, v);                                                               \
        } else {                                                                                      \
            float o[8];                                                                               \
            _mm256_storeu_ps(o, v);                                                                   \
            for (int r = 0; r < 8; r++) s[(t + r) * lds] = o[r];                                      \
        }                                                                                             \
    }                                                                                                 \
    for (; t < n; t++) {                                                                              \
        const W *kr = k + t * ldk;                                                                    \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                                    \
        int64_t c = 0;                                                                                \
        for (; c + 16 <= d; c += 16) {                                                                \
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), LOAD(kr + c), a0);                           \
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), LOAD(kr + c + 8), a1);                   \
        }                                                                                             \
        for (; c + 8 <= d; c += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), LOAD(kr + c), a0);    \
        if (c < d) a1 = _mm256_fmadd_ps(_mm256_maskload_ps(x + c, mt), MASKLOAD(kr + c, mt, d - c), a1); \
        s[t * lds] = scale * hsum8(_mm256_add_ps(a0, a1));                                            \
    }

AVX2_FN static void dot_rows_f32(float *s, int64_t lds, const float *x, const float *k, int64_t ldk, int64_t n,
                                  int64_t d, float scale) {
    DOT_ROWS_BODY(float, load_w, maskload_w, NO_PREFETCH)
}

/* The cached attention's walks (kernels.h: dtx_dot_heads, dtx_axpy_heads):
 * the rows in order, each row's slices in turn, so the cache is read as one
 * stream, and the next row prefetched into L1 while this one is read
 * (dtx_prefetch_span). Why not a block of rows one head's slice at a time
 * (8 rows in 8 accumulators, as DOT_ROWS_BODY): each slice of a row is then
 * a short stream of its own, 16 of them side by side, which the hardware
 * prefetchers do not follow (Zen 5, 2 threads, 12 layers of 800 cached
 * rows of 3 KiB between 6 MB weight streams: 35-38 GB/s, against 56-62 for
 * the rows in order with the prefetch; without it 31-43). A score is a dot
 * of d values in two accumulators, then their lanes summed; a weighted
 * value is y loaded, one FMA per row, stored (the rows added in order: the
 * same bits whatever the width). W, LOAD and MASKLOAD as DOT_ROWS_BODY's. */
#define DOT_HEADS_BODY(W, LOAD, MASKLOAD)                                                                    \
    const __m256i mt = lanes8(d % 8);                                                                        \
    for (int64_t t = 0; t < n; t++) {                                                                        \
        const W *kr = k + t * ldk;                                                                           \
        for (int64_t i = 0; i < m; i++) {                                                                    \
            const float *xi = x + i * d;                                                                     \
            const W *ki = kr + off[i];                                                                       \
            dtx_prefetch_span(ki + ldk, d * (int64_t)sizeof(W));                                                 \
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                                       \
            int64_t c = 0;                                                                                   \
            for (; c + 16 <= d; c += 16) {                                                                   \
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xi + c), LOAD(ki + c), a0);                             \
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xi + c + 8), LOAD(ki + c + 8), a1);                     \
            }                                                                                                \
            if (c + 8 <= d) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xi + c), LOAD(ki + c), a0), c += 8;         \
            if (c < d) a1 = _mm256_fmadd_ps(_mm256_maskload_ps(xi + c, mt), MASKLOAD(ki + c, mt, d - c), a1); \
            s[i * lds + t] = scale * hsum8(_mm256_add_ps(a0, a1));                                           \
        }                                                                                                    \
    }
#define AXPY_HEADS_BODY(W, LOAD, MASKLOAD)                                                                   \
    const __m256i mt = lanes8(w % 8);                                                                        \
    for (int64_t t = 0; t < n; t++) {                                                                        \
        const W *vr = v + t * ldv;                                                                           \
        for (int64_t i = 0; i < m; i++) {                                                                    \
            const W *vi = vr + off[i];                                                                       \
            dtx_prefetch_span(vi + ldv, w * (int64_t)sizeof(W));                                                 \
            float *yi = y + i * w;                                                                           \
            const __m256 pt = _mm256_broadcast_ss(p + i * ldp + t);                                          \
            int64_t c = 0;                                                                                   \
            for (; c + 8 <= w; c += 8) _mm256_storeu_ps(yi + c, _mm256_fmadd_ps(pt, LOAD(vi + c), _mm256_loadu_ps(yi + c))); \
            if (c < w)                                                                                       \
                _mm256_maskstore_ps(yi + c, mt,                                                              \
                                    _mm256_fmadd_ps(pt, MASKLOAD(vi + c, mt, w - c), _mm256_maskload_ps(yi + c, mt))); \
        }                                                                                                    \
    }

AVX2_FN void dtx_dot_heads_avx2(float *s, int64_t lds, const float *x, int64_t d, int64_t m, const int64_t *off,
                                const float *k, int64_t ldk, int64_t n, float scale) {
    DOT_HEADS_BODY(float, load_w, maskload_w)
}

AVX2_FN void dtx_axpy_heads_avx2(float *y, int64_t w, const float *p, int64_t ldp, int64_t m, const int64_t *off,
                                 const float *v, int64_t ldv, int64_t n) {
    AXPY_HEADS_BODY(float, load_w, maskload_w)
}

/* The two over rows of bf16 bits (a bf16 KV cache): each value widened
 * exactly where it is loaded, the rest as over fp32 rows, so the same bits. */
AVX2_FN void dtx_dot_heads_bf16_avx2(float *s, int64_t lds, const float *x, int64_t d, int64_t m, const int64_t *off,
                                     const uint16_t *k, int64_t ldk, int64_t n, float scale) {
    DOT_HEADS_BODY(uint16_t, load_w_bf16, maskload_w_bf16)
}

AVX2_FN void dtx_axpy_heads_bf16_avx2(float *y, int64_t w, const float *p, int64_t ldp, int64_t m,
                                      const int64_t *off, const uint16_t *v, int64_t ldv, int64_t n) {
    AXPY_HEADS_BODY(uint16_t, load_w_bf16, maskload_w_bf16)
}

/* A linear layer of one token is the same kernel: x against the weight
 * rows, scale 1 (exact). */
AVX2_FN void dtx_gemv_avx2(float *out, const float *x, const float *w, int64_t K, int64_t N) {
    dot_rows_f32(out, 1, x, w, K, N, K, 1.0f);
}

AVX2_FN void dtx_gemv_bf16_avx2(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N) {
    float *s = out, scale = 1.0f;
    const uint16_t *k = w;
    int64_t lds = 1, ldk = K, n = N, d = K;
    DOT_ROWS_BODY(uint16_t, load_w_bf16, maskload_w_bf16, PREFETCH_NEXT_8_ROWS_BF16)
}

/* ------------------------------------------- quantised one-row products */

/* Q8 rows are the same kernel as fp32 ones, the int8 values widened to
 * floats (exact), then each row's scale (kernels.h, "Quantised"). */
AVX2_INLINE __m256 load_w_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
AVX2_INLINE __m256 maskload_w_i8(const int8_t *p, __m256i m, int64_t n) {
    (void)m;
    int8_t t[8] = {0};
    memcpy(t, p, (size_t)n);
    return load_w_i8(t);
}

AVX2_FN static void dot_rows_i8(float *s, int64_t lds, const float *x, const int8_t *k, int64_t ldk, int64_t n,
                                int64_t d, float scale) {
    DOT_ROWS_BODY(int8_t, load_w_i8, maskload_w_i8, PREFETCH_NEXT_8_ROWS)
}

AVX2_FN void dtx_gemv_q8_avx2(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N) {
    dot_rows_i8(out, 1, x, q, K, N, K, 1.0f);
    for (int64_t r = 0; r < N; r++) out[r] *= scale[r];
}

/* Q4: a group's 16 bytes give 32 values (low nibbles the first 16, high the
 * last), widened to floats and multiplied with x, the group's sum scaled
 * into the row's accumulator; four rows at a time share the loads of x. A
 * partial last group reads x from a zero-padded copy (its padding codes are
 * 0 too), so every group takes the same path. */
AVX2_INLINE __m256 q4_group(const uint8_t *b, const float *xg, __m256 acc, float scale) {
    const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)b);
    __m128i lo = _mm_sub_epi8(_mm_and_si128(v, low4), eight);
    __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), low4), eight);
    __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xg), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
    __m256 u = _mm256_mul_ps(_mm256_loadu_ps(xg + 8), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
    t = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 16), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), t);
    u = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 24), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), u);
    return _mm256_fmadd_ps(_mm256_add_ps(t, u), _mm256_set1_ps(scale), acc);
}

/* The fast path (K <= Q4_XMAX): x is laid out once per call in the order the
 * codes come out of a 32-byte load of two groups seen as 8 dwords (lane i:
 * group i/4, bytes 4(i%4) .. 4(i%4)+3; nibble j of a dword: element
 * 4(i%4) + j/2 + 16(j%2) of its group), so that each nibble is one shift
 * and one mask away from a float, with no byte shuffles; the codes' offset 8
 * comes off through the per-lane sums of x. */
#define Q4_XMAX 16384
AVX2_FN static void q4_rows_perm(float *out, const float *xp, const float *xs, const uint8_t *q, const float *scale,
                                 int64_t ng, int64_t rb, int64_t N) {
    const __m256i mask = _mm256_set1_epi32(0x0F);
    const __m256 eight = _mm256_set1_ps(8.0f);
    const int64_t pairs = ng / 2, odd = ng % 2;
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *r = q + n * rb;
        const float *sc = scale + n * ng;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t p = 0; p <= pairs - 1 + odd; p++) {
            __m256i v = p < pairs ? _mm256_loadu_si256((const __m256i *)(const void *)(r + 32 * p))
                                  : _mm256_inserti128_si256(_mm256_setzero_si256(),
                                                            _mm_loadu_si128((const __m128i *)(const void *)(r + 32 * p)), 0);
            const float *x8 = xp + 64 * p;
            __m256 t0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, mask)), _mm256_loadu_ps(x8));
            __m256 t1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 4), mask)),
                                      _mm256_loadu_ps(x8 + 8));
            t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8), mask)),
                                 _mm256_loadu_ps(x8 + 16), t0);
            t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 12), mask)),
                                 _mm256_loadu_ps(x8 + 24), t1);
            t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 16), mask)),
                                 _mm256_loadu_ps(x8 + 32), t0);
            t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 20), mask)),
                                 _mm256_loadu_ps(x8 + 40), t1);
            t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 24), mask)),
                                 _mm256_loadu_ps(x8 + 48), t0);
            t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 28)), _mm256_loadu_ps(x8 + 56), t1);
            __m256 t = _mm256_fnmadd_ps(eight, _mm256_loadu_ps(xs + 8 * p), _mm256_add_ps(t0, t1));
            __m256 s2 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(sc[2 * p])),
                                             _mm_set1_ps(p < pairs ? sc[2 * p + 1] : 0.0f), 1);
            acc = _mm256_fmadd_ps(t, s2, acc);
        }
        out[n] = hsum8(acc);
    }
}

AVX2_FN void dtx_gemv_q4_avx2(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N) {
    const int64_t G = DTX_Q4_GROUP, ng = dtx_q4_groups(K), rb = dtx_q4_row_bytes(K);
    if (ng * G <= Q4_XMAX) {
        float xp[Q4_XMAX + 64], xs[Q4_XMAX / 8 + 8]; /* x in the codes' order, zero past K; per-lane sums */
        int64_t np = (ng + 1) / 2;
        for (int64_t p = 0; p < np; p++)
            for (int i = 0; i < 8; i++) {
                float sum = 0;
                for (int j = 0; j < 8; j++) {
                    int64_t e = p * 64 + (i / 4) * 32 + 4 * (i % 4) + j / 2 + 16 * (j % 2);
                    float v = e < K ? x[e] : 0.0f;
                    xp[64 * p + 8 * j + i] = v;
                    sum += v;
                }
                xs[8 * p + i] = sum;
            }
        q4_rows_perm(out, xp, xs, q, scale, ng, rb, N);
        return;
    }
    const int64_t half = G / 2, full = K / G; /* K past Q4_XMAX: one group at a time */
    float xt[DTX_Q4_GROUP] = {0}; /* the partial last group of x, zero-padded */
    if (full < ng) memcpy(xt, x + full * G, sizeof(float) * (size_t)(K - full * G));
    int64_t n = 0;
    for (; n + 4 <= N; n += 4) {
        const uint8_t *r = q + n * rb;
        const float *sc = scale + n * ng;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t g = 0; g < ng; g++) {
            const float *xg = g < full ? x + g * G : xt;
            a0 = q4_group(r + g * half, xg, a0, sc[g]);
            a1 = q4_group(r + rb + g * half, xg, a1, sc[ng + g]);
            a2 = q4_group(r + 2 * rb + g * half, xg, a2, sc[2 * ng + g]);
            a3 = q4_group(r + 3 * rb + g * half, xg, a3, sc[3 * ng + g]);
        }
        out[n] = hsum8(a0), out[n + 1] = hsum8(a1), out[n + 2] = hsum8(a2), out[n + 3] = hsum8(a3);
    }
    for (; n < N; n++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t g = 0; g < ng; g++) acc = q4_group(q + n * rb + g * half, g < full ? x + g * G : xt, acc, scale[n * ng + g]);
        out[n] = hsum8(acc);
    }
}

/* Q8 × int8 activations: 32 products at a time as unsigned |x| × (w with
 * x's sign) pairs summed to int16 (maddubs: 2·127² fits), then to int32
 * (gemv_q8a8_body.h: the row loop shared with AVX-512 VNNI). */
AVX2_INLINE __m256i dot32_i8(__m256i acc, __m256i ax, __m256i xv, const int8_t *w) {
    __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)w);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv)),
                                                   _mm256_set1_epi16(1)));
}

AVX2_FN void dtx_gemv_q8a8_avx2(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale,
                                int64_t K, int64_t N) {
    GEMV_Q8A8_BODY(dot32_i8)
}

const dtx_simd_ops dtx_simd_avx2 = {"avx2",           gemm_avx2,          transpose_avx2,     exp_avx2,
                                    softmax_update_avx2, exp_rows_avx2,  dtx_dot_heads_avx2,  dtx_axpy_heads_avx2,
                                    dtx_dot_heads_bf16_avx2, dtx_axpy_heads_bf16_avx2,
                                    dtx_gemv_avx2,    dtx_gemv_bf16_avx2, dtx_gemv_q8_avx2,   dtx_gemv_q4_avx2,
                                    dtx_gemv_q8a8_avx2, DTX_BF16_PORTABLE, NULL, NULL /* the one-input kernels per input */};

#endif /* DTX_SIMD_X86 */
