/* AVX-512 tile kernels (simd.h): a 6 × 64 register-blocked product in
 * 24 zmm accumulators (one 64-wide row of B per k step: 4 vectors, the last
 * masked for ragged n; one broadcast element of A per row, so A may be read
 * with any strides), a 16×16 in-register transpose, exp16 and the flash
 * softmax row steps. Compiled with target attributes (any -march); chosen
 * by tile_gemm.c's table only at ISA level AVX512 or above. */
#include "kernels/simd.h"

#include <math.h>
#include <string.h>

#include "kernels/gemv_q8a8_body.h"
#include "kernels/tile_avx512.h"

#if TILE_AVX512


enum { MR = 6, NVMAX = 4, NB = 16 * NVMAX }; /* micro-tile: 6 rows × 4 zmm (64 columns) */

/* The micro-kernel: C[mr × 16·nv] (=|+=) A·B over K. mr and nv are compile-
 * time constants at every call site, so the loops unroll fully and the
 * accumulators live in registers (mr·nv + nv + 1 ≤ 29 of the 32 zmm). The
 * last B vector and C vector of the block use the mask ml (ragged n). */
AVX512_INLINE void mk_body(const int mr, const int nv, int64_t K, const float *A, int64_t sar, int64_t sac,
                           const float *B, int64_t ldb, float *C, int64_t ldc, __mmask16 ml, int acc) {
    __m512 c[MR][NVMAX];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) c[i][v] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < K; kk++) {
        const float *bp = B + kk * ldb, *ap = A + kk * sac;
        __m512 b[NVMAX];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            b[v] = v == nv - 1 ? _mm512_maskz_loadu_ps(ml, bp + 16 * v) : _mm512_loadu_ps(bp + 16 * v);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_set1_ps(ap[i * sar]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) c[i][v] = _mm512_fmadd_ps(a, b[v], c[i][v]);
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

typedef void (*mk_fn)(int64_t K, const float *A, int64_t sar, int64_t sac, const float *B, int64_t ldb,
                      float *C, int64_t ldc, __mmask16 ml, int acc);

#define MK(mr, nv)                                                                                     \
    AVX512_FN static void mk_##mr##_##nv(int64_t K, const float *A, int64_t sar, int64_t sac,          \
                                         const float *B, int64_t ldb, float *C, int64_t ldc,           \
                                         __mmask16 ml, int acc) {                                      \
        mk_body(mr, nv, K, A, sar, sac, B, ldb, C, ldc, ml, acc);                                      \
    }
#define MK_ROW(mr) MK(mr, 1) MK(mr, 2) MK(mr, 3) MK(mr, 4)
MK_ROW(1) MK_ROW(2) MK_ROW(3) MK_ROW(4) MK_ROW(5) MK_ROW(6)
#define MK_PTRS(mr) {NULL, mk_##mr##_1, mk_##mr##_2, mk_##mr##_3, mk_##mr##_4}
static const mk_fn mk_table[MR + 1][NVMAX + 1] = {
    {NULL}, MK_PTRS(1), MK_PTRS(2), MK_PTRS(3), MK_PTRS(4), MK_PTRS(5), MK_PTRS(6)};

/* Column panels of 64 outer (the K × 64 panel of B stays in L1 while every
 * row block of A streams past it), row blocks of 6 inner. Causal limits are
 * applied per 6-row block (columns rounded up to whole vectors). */
AVX512_FN static void gemm_avx512(int64_t M, int64_t N, int64_t K, const float *A, int64_t sar, int64_t sac,
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
            int nv = (int)((n + 15) / 16);
            mk_table[mr][nv](ke - kb, A + i * sar + kb * sac, sar, sac, B + kb * ldb + j, ldb, C + i * ldc + j,
                             ldc, lanes(n - 16 * (nv - 1)), acc);
        }
    }
}

/* 16×16 blocks, ragged edges through masks (absent rows load as zeros). */
AVX512_FN static void transpose_avx512(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                                       int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            int64_t nr = tile_min64(16, rows - r0), nc = tile_min64(16, cols - c0);
            __mmask16 kc = lanes(nc), kr = lanes(nr);
            __m512 x[16];
            load_tr16(x, src + r0 * lds + c0, lds, nr, kc);
            for (int64_t j = 0; j < nc; j++) _mm512_mask_storeu_ps(dst + (c0 + j) * ldd + r0, kr, x[j]);
        }
}

/* exp(x) for 16 lanes, after Cephes expf: n = round(x·log2 e), r = x − n·ln 2
 * in two parts (exact for |n| < 2^8), e^r ≈ 1 + r + r²·p(r) with p of degree
 * 5 on |r| ≤ ln2/2, then scalef by 2^n. Lanes below ln(FLT_MIN) (and −∞)
 * give 0, so no denormals reach the products; NaN stays NaN, as in exp8 and
 * dtx_vexpf, so a NaN score is never hidden as a zero probability (the
 * unordered compare keeps NaN lanes, and min returns its second operand,
 * x, when x is NaN). */
AVX512_INLINE __m512 exp16(__m512 x) {
    __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654475f), _CMP_NLT_UQ);
    x = _mm512_min_ps(_mm512_set1_ps(88.37626266f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500E-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(ok, y, n);
}

AVX512_FN static void exp_avx512(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, k, exp16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

AVX512_FN static void softmax_update_avx512(float *S, int64_t ld, int64_t M, int64_t N, int64_t diag,
                                            float scale, float *m, float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale);
    for (int64_t r = 0; r < M; r++) {
        float *s = S + r * ld;
        int64_t nv = tile_valid_cols(diag, r, N);
        if (nv == 0) {
            memset(s, 0, sizeof(float) * (size_t)N);
            alpha[r] = 1;
            continue;
        }
        __m512 mx = ninf;
        for (int64_t c = 0; c < nv; c += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, lanes(nv - c), s + c));
        float mt = _mm512_reduce_max_ps(mx) * scale, mn = mt > m[r] ? mt : m[r];
        __m512 vm = _mm512_set1_ps(mn), sum = _mm512_setzero_ps();
        for (int64_t c = 0; c < N; c += 16) {
            __mmask16 kn = lanes(N - c), kv = lanes(nv - c); /* masked lanes may hold garbage (DTX_TRI_N_HI) */
            __m512 p = exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(kv, s + c), vs, vm));
            p = _mm512_maskz_mov_ps(kv, p);
            sum = _mm512_add_ps(sum, p);
            _mm512_mask_storeu_ps(s + c, kn, p);
        }
        alpha[r] = expf(m[r] - mn); /* m = −∞ on the first tile: alpha = 0 */
        l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(sum);
        m[r] = mn;
    }
}

AVX512_FN static void exp_rows_avx512(float *P, const float *S, int64_t ld, int64_t M, int64_t N,
                                      int64_t diag, float scale, const float *lse) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t r = 0; r < M; r++) {
        int64_t nv = tile_valid_cols(diag, r, N);
        const float *s = S + r * ld;
        float *p = P + r * ld;
        __m512 b = _mm512_set1_ps(lse[r]);
        for (int64_t c = 0; c < N; c += 16) {
            __mmask16 kn = lanes(N - c), kv = lanes(nv - c);
            __m512 x = kv ? exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(kv, s + c), vs, b)) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(p + c, kn, _mm512_maskz_mov_ps(kv, x));
        }
    }
}



/* Q8 × int8 activations with AVX-512 VNNI (vpdpbusd on ymm, AVX512VL):
 * the AVX2 kernel's |x| × (w with x's sign) pairs, four products summed
 * into each int32 lane in one instruction instead of maddubs, madd and add
 * (no int16 step: nothing saturates, the sums are the same exact int32s);
 * the row loop is AVX2's (gemv_q8a8_body.h). */
#define VNNI_FN __attribute__((target("avx512vnni,avx512vl,avx2,fma")))
VNNI_FN static __m256i dot32_vnni(__m256i acc, __m256i ax, __m256i xv, const int8_t *w) {
    __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)w);
    return _mm256_dpbusd_epi32(acc, ax, _mm256_sign_epi8(wv, xv));
}
VNNI_FN static void gemv_q8a8_vnni(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale,
                                   int64_t K, int64_t N) {
    GEMV_Q8A8_BODY(dot32_vnni)
}

/* The same products where 512-bit loads are full width (dtx_isa_full_width:
 * Zen 5), one row at a time as a single stream (four rows side by side are
 * four short streams, which the hardware prefetchers there follow worse;
 * gemv_avx512.c has the measurements for int8 × fp32): |x| and x's signs
 * once per call, then per 64 weights one load, a masked negation where x is
 * negative and one vpdpbusd on zmm, two accumulators, the tail by a masked
 * load (zero weights add nothing), an L2 prefetch 8 KiB ahead. The sums are
 * the same exact int32s. Wider x than the stack copy: the ymm kernel. */
#define VNNI512_FN __attribute__((target("avx512vnni,avx512f,avx512bw,avx512vl,avx2,fma")))
enum { Q8A8_XMAX = 16384 };
VNNI512_FN static void gemv_q8a8_vnni_row(float *out, const int8_t *xq, float xscale, const int8_t *q,
                                          const float *scale, int64_t K, int64_t N) {
    if (K > Q8A8_XMAX) {
        gemv_q8a8_vnni(out, xq, xscale, q, scale, K, N);
        return;
    }
    uint8_t ax[Q8A8_XMAX];
    __mmask64 neg[Q8A8_XMAX / 64];
    const int64_t nc = (K + 63) / 64;
    for (int64_t c = 0; c < nc; c++) {
        int64_t left = K - 64 * c;
        __mmask64 m = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512i xv = _mm512_maskz_loadu_epi8(m, xq + 64 * c);
        neg[c] = _mm512_movepi8_mask(xv);
        _mm512_storeu_si512(ax + 64 * c, _mm512_abs_epi8(xv));
    }
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t n = 0; n < N; n++) {
        const int8_t *r = q + n * K;
        __m512i a0 = zero, a1 = zero;
        int64_t c = 0;
        for (; c + 2 <= nc && 64 * (c + 2) <= K; c += 2) {
            _mm_prefetch((const char *)(const void *)(r + 64 * c) + 8192, _MM_HINT_T1); /* both lines */
            _mm_prefetch((const char *)(const void *)(r + 64 * c) + 8192 + 64, _MM_HINT_T1);
            __m512i w0 = _mm512_loadu_si512(r + 64 * c), w1 = _mm512_loadu_si512(r + 64 * c + 64);
            a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512(ax + 64 * c), _mm512_mask_sub_epi8(w0, neg[c], zero, w0));
            a1 = _mm512_dpbusd_epi32(a1, _mm512_loadu_si512(ax + 64 * c + 64),
                                     _mm512_mask_sub_epi8(w1, neg[c + 1], zero, w1));
        }
        for (; c < nc; c++) {
            int64_t left = K - 64 * c;
            __mmask64 m = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
            __m512i w = _mm512_maskz_loadu_epi8(m, r + 64 * c);
            a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512(ax + 64 * c), _mm512_mask_sub_epi8(w, neg[c], zero, w));
        }
        out[n] = xscale * scale[n] * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1));
    }
}

/* The AVX-512 level's int8 product: VNNI's where the CPU has it (not every
 * AVX-512 CPU does: Skylake-X lacks it), one row at a time at full width,
 * else AVX2's. */
static void gemv_q8a8_avx512(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale,
                             int64_t K, int64_t N) {
    if (dtx_isa_cpu_has_vnni() && dtx_isa_full_width()) gemv_q8a8_vnni_row(out, xq, xscale, q, scale, K, N);
    else if (dtx_isa_cpu_has_vnni()) gemv_q8a8_vnni(out, xq, xscale, q, scale, K, N);
    else dtx_gemv_q8a8_avx2(out, xq, xscale, q, scale, K, N);
}

/* The cached attention's walks at full width (kernels.h: dtx_dot_heads,
 * dtx_axpy_heads; simd_avx2.c says why the rows go in order): a score in two
 * zmm accumulators over d, the last vector masked, the lanes summed
 * (_mm512_reduce_add_ps); a weighted value y loaded, one FMA per row,
 * stored; the next row prefetched (dtx_prefetch_span). Over fp32 rows they
 * stream as fast as AVX2's (Zen 5, 2 threads, 12 layers of 800 cached rows
 * of 3 KiB between 6 MB weight streams: keys 60-62 against 58-62 GB/s);
 * over bf16 rows, where the arithmetic per byte doubles, the weighted
 * values 54 against 48-50 GB/s (the keys 36 either way: one sum of lanes
 * per row and sub-head is what they cost). bf16 rows widened exactly as
 * loaded: the same bits as fp32 ones. */
AVX512_INLINE __m512 load16_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
AVX512_INLINE __m512 load16_bf16(const uint16_t *p, __mmask16 m) {
    return widen_bf16(_mm256_maskz_loadu_epi16(m, p));
}
#define DOT_HEADS_512(W, LOAD)                                                                                \
    const __mmask16 mt = lanes(d % 16), all = (__mmask16)0xFFFF;                                              \
    for (int64_t t = 0; t < n; t++) {                                                                         \
        const W *kr = k + t * ldk;                                                                            \
        for (int64_t i = 0; i < m; i++) {                                                                     \
            const float *xi = x + i * d;                                                                      \
            const W *ki = kr + off[i];                                                                        \
            dtx_prefetch_span(ki + ldk, d * (int64_t)sizeof(W));                                                  \
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();                                        \
            int64_t c = 0;                                                                                    \
            for (; c + 32 <= d; c += 32) {                                                                    \
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xi + c), LOAD(ki + c, all), a0);                         \
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xi + c + 16), LOAD(ki + c + 16, all), a1);               \
            }                                                                                                 \
            if (c + 16 <= d) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xi + c), LOAD(ki + c, all), a0), c += 16;   \
            if (c < d) a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mt, xi + c), LOAD(ki + c, mt), a1);         \
            s[i * lds + t] = scale * _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));                             \
        }                                                                                                     \
    }
#define AXPY_HEADS_512(W, LOAD)                                                                               \
    const __mmask16 mt = lanes(w % 16), all = (__mmask16)0xFFFF;                                              \
    for (int64_t t = 0; t < n; t++) {                                                                         \
        const W *vr = v + t * ldv;                                                                            \
        for (int64_t i = 0; i < m; i++) {                                                                     \
            const W *vi = vr + off[i];                                                                        \
            dtx_prefetch_span(vi + ldv, w * (int64_t)sizeof(W));                                                  \
            float *yi = y + i * w;                                                                            \
            const __m512 pt = _mm512_set1_ps(p[i * ldp + t]);                                                 \
            int64_t c = 0;                                                                                    \
            for (; c + 16 <= w; c += 16)                                                                      \
                _mm512_storeu_ps(yi + c, _mm512_fmadd_ps(pt, LOAD(vi + c, all), _mm512_loadu_ps(yi + c)));    \
            if (c < w)                                                                                        \
                _mm512_mask_storeu_ps(yi + c, mt,                                                             \
                                      _mm512_fmadd_ps(pt, LOAD(vi + c, mt), _mm512_maskz_loadu_ps(mt, yi + c))); \
        }                                                                                                     \
    }

AVX512_FN static void dot_heads_avx512(float *s, int64_t lds, const float *x, int64_t d, int64_t m,
                                       const int64_t *off, const float *k, int64_t ldk, int64_t n, float scale) {
    DOT_HEADS_512(float, load16_f32)
}
AVX512_FN static void axpy_heads_avx512(float *y, int64_t w, const float *p, int64_t ldp, int64_t m,
                                        const int64_t *off, const float *v, int64_t ldv, int64_t n) {
    AXPY_HEADS_512(float, load16_f32)
}
AVX512_FN static void dot_heads_bf16_avx512(float *s, int64_t lds, const float *x, int64_t d, int64_t m,
                                            const int64_t *off, const uint16_t *k, int64_t ldk, int64_t n,
                                            float scale) {
    DOT_HEADS_512(uint16_t, load16_bf16)
}
AVX512_FN static void axpy_heads_bf16_avx512(float *y, int64_t w, const float *p, int64_t ldp, int64_t m,
                                             const int64_t *off, const uint16_t *v, int64_t ldv, int64_t n) {
    AXPY_HEADS_512(uint16_t, load16_bf16)
}

/* The tile kernels of both AVX-512 tables, then the one-row products:
 * the decode attention's walks (over fp32 or bf16 cache rows), fp32's, int8's and bf16's AVX-512's,
 * and bf16 (by vdpbf16ps), 4-bit and at full width int8 × bf16 x get their own kernels where
 * the CPU has AVX-512 BF16 (gemv_avx512.c says why). */
#define AVX512_TILES gemm_avx512, transpose_avx512, exp_avx512, softmax_update_avx512, exp_rows_avx512
#define AVX512_ROWS(gemv_bf16, gemv_q8, gemv_q4)                                                            \
    dot_heads_avx512, axpy_heads_avx512, dot_heads_bf16_avx512, axpy_heads_bf16_avx512, dtx_gemv_avx512, gemv_bf16, gemv_q8, gemv_q4, gemv_q8a8_avx512

const dtx_simd_ops dtx_simd_avx512 = {"avx512", AVX512_TILES,
                                      AVX512_ROWS(dtx_gemv_bf16_avx512, dtx_gemv_q8_avx512, dtx_gemv_q4_avx2),
                                      DTX_BF16_PORTABLE, dtx_gemv_q8_nb_avx512, NULL /* 4-bit: AVX2's kernel per input */};
const dtx_simd_ops dtx_simd_avx512_bf16 = {"avx512bf16", AVX512_TILES,
                                           AVX512_ROWS(dtx_gemv_bf16_avx512bf16, dtx_gemv_q8_avx512bf16,
                                                       dtx_gemv_q4_avx512bf16),
                                           dtx_bf16_pack_a_avx512bf16,
                                           dtx_bf16_pack_b_avx512bf16, dtx_bf16_pack_bt_avx512bf16,
                                           dtx_bf16_gemm_tri_avx512bf16, dtx_gemv_q8_nb_avx512bf16,
                                           dtx_gemv_q4_nb_avx512bf16};

#endif /* TILE_AVX512 */
