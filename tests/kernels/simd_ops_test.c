/* Every per-ISA kernel (simd.h's dtx_simd_ops) against one plain double
 * reference, at every ISA level the CPU has, as one table (the way ggml's
 * test-backend-ops compares every op on every backend): an entry builds its
 * cases (shapes around the kernels' blocks and vector widths, strides,
 * ragged edges) with their reference, runs one level's table entry, and
 * says how close it must come (exact for the integer product, the
 * transpose, and every output a kernel must leave untouched). A new kernel
 * in the table is a new row here. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "kernels/kernels.h"
#include "kernels/simd.h"

enum { MAX_IN = 8 };
#define UNTOUCHED 12345.0f /* what a kernel must not write over */

typedef struct {
    void *in[MAX_IN];   /* the case's inputs (malloc'd)                               */
    int64_t d[8];       /* its sizes and settings                                    */
    float scale;
    int64_t n_out;
    float *init;        /* [n_out] the output buffer before the call (accumulators, gaps) */
    double *want, *mag; /* [n_out] the reference; mag < 0: unspecified (not compared)    */
    char what[96];      /* the case, for messages */
} op_case;

typedef struct {
    const char *name;
    int n_cases;
    void (*make)(op_case *c, int i, dtx_rng *r);
    void (*run)(const dtx_simd_ops *ops, const op_case *c, float *out);
    double tol; /* |got − want| <= tol · (mag + 1); 0: bit-exact */
} op_entry;

static float *randf(dtx_rng *r, int64_t n, double sd) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(sd * dtx_rng_normal(r));
    return x;
}

static void outputs(op_case *c, int64_t n) {
    c->n_out = n;
    c->init = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    c->want = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    c->mag = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) c->init[i] = UNTOUCHED, c->want[i] = UNTOUCHED, c->mag[i] = 0;
}

/* ------------------------------------------------------------ one-row products */

static const int64_t ROWS_N[] = {1, 7, 8, 9, 16, 37}, ROWS_D[] = {1, 5, 8, 13, 64, 130};

/* bf16 bits of v [n] (in[2] of the case), v rounded to them in place: the
 * bf16 rows' kernels meet the values the reference uses. */
static uint16_t *to_bf16_rows(float *v, int64_t n) {
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
    for (int64_t j = 0; j < n; j++) b[j] = dtx_f32_to_bf16(v[j]), v[j] = dtx_bf16_to_f32(b[j]);
    return b;
}

/* The columns of m slices of width d in rows of two slices: slice i at
 * (i % 2)·d, moved on by one value from the third on (unaligned, and two
 * query sub-heads on one key sub-head, as GQA's), in[3] of the case. */
static int64_t *slice_offsets(int64_t m, int64_t d) {
    int64_t *off = malloc(sizeof(int64_t) * (size_t)m);
    for (int64_t i = 0; i < m; i++) off[i] = (i % 2) * d + i / 2;
    return off;
}

/* s[i·lds + t] = scale · Σ_c x[i·d + c]·k[t·ldk + off[i] + c] for m = 1 or 3
 * query sub-heads; the gaps of lds = n + 2 untouched; k as fp32, or (bf16)
 * as bf16 bits */
static void make_dot_heads_any(op_case *c, int i, dtx_rng *r, int bf16) {
    int64_t n = ROWS_N[i % 6], d = ROWS_D[i / 6 % 6], m = i / 36 ? 3 : 1, lds = n + 2 * (i / 36),
            ldk = 2 * d + 3;
    float *x = randf(r, m * d, 1), *k = randf(r, n * ldk, 1);
    int64_t *off = slice_offsets(m, d);
    if (bf16) c->in[2] = to_bf16_rows(k, n * ldk);
    c->in[0] = x, c->in[1] = k, c->in[3] = off;
    c->d[0] = n, c->d[1] = d, c->d[2] = lds, c->d[3] = ldk, c->d[4] = m, c->scale = 0.125f;
    outputs(c, m * lds);
    for (int64_t q = 0; q < m; q++)
        for (int64_t t = 0; t < n; t++) {
            double s = 0, a = 0;
            for (int64_t j = 0; j < d; j++) {
                double v = (double)x[q * d + j] * k[t * ldk + off[q] + j];
                s += v, a += fabs(v);
            }
            c->want[q * lds + t] = 0.125 * s, c->mag[q * lds + t] = 0.125 * a;
        }
    snprintf(c->what, sizeof c->what, "n %lld d %lld m %lld lds %lld", (long long)n, (long long)d, (long long)m,
             (long long)lds);
}
static void make_dot_heads(op_case *c, int i, dtx_rng *r) { make_dot_heads_any(c, i, r, 0); }
static void make_dot_heads_bf16(op_case *c, int i, dtx_rng *r) { make_dot_heads_any(c, i, r, 1); }
static void run_dot_heads(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->dot_heads(out, c->d[2], c->in[0], c->d[1], c->d[4], c->in[3], c->in[1], c->d[3], c->d[0], c->scale);
}
static void run_dot_heads_bf16(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->dot_heads_bf16(out, c->d[2], c->in[0], c->d[1], c->d[4], c->in[3], c->in[2], c->d[3], c->d[0], c->scale);
}

static const int64_t AXPY_N[] = {1, 5, 16}, AXPY_W[] = {1, 7, 32, 64, 100, 128};

/* y[i·w + c] += Σ_t p[i·ldp + t]·v[t·ldv + off[i] + c] for m = 1 or 3 heads,
 * c < w; the 3 values past m·w untouched */
static void make_axpy_heads_any(op_case *c, int i, dtx_rng *r, int bf16) {
    int64_t n = AXPY_N[i % 3], w = AXPY_W[i / 3 % 6], m = i / 18 ? 3 : 1, ldp = n + 2, ldv = 2 * w + 5;
    float *p = randf(r, m * ldp, 1), *v = randf(r, n * ldv, 1);
    int64_t *off = slice_offsets(m, w);
    if (bf16) c->in[2] = to_bf16_rows(v, n * ldv);
    c->in[0] = p, c->in[1] = v, c->in[3] = off;
    c->d[0] = n, c->d[1] = w, c->d[2] = ldv, c->d[3] = ldp, c->d[4] = m;
    outputs(c, m * w + 3);
    for (int64_t q = 0; q < m; q++)
        for (int64_t j = 0; j < w; j++) {
            float *y0 = c->init + q * w + j;
            *y0 = (float)dtx_rng_normal(r);
            double s = *y0, a = fabs(s);
            for (int64_t t = 0; t < n; t++) {
                double u = (double)p[q * ldp + t] * v[t * ldv + off[q] + j];
                s += u, a += fabs(u);
            }
            c->want[q * w + j] = s, c->mag[q * w + j] = a;
        }
    snprintf(c->what, sizeof c->what, "n %lld w %lld m %lld", (long long)n, (long long)w, (long long)m);
}
static void make_axpy_heads(op_case *c, int i, dtx_rng *r) { make_axpy_heads_any(c, i, r, 0); }
static void make_axpy_heads_bf16(op_case *c, int i, dtx_rng *r) { make_axpy_heads_any(c, i, r, 1); }
static void run_axpy_heads(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->axpy_heads(out, c->d[1], c->in[0], c->d[3], c->d[4], c->in[3], c->in[1], c->d[2], c->d[0]);
}
static void run_axpy_heads_bf16(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->axpy_heads_bf16(out, c->d[1], c->in[0], c->d[3], c->d[4], c->in[3], c->in[2], c->d[2], c->d[0]);
}

/* The last two: wider than the AVX-512 BF16 kernel's copy of x, and an x
 * holding a denormal (which vdpbf16ps would flush): both take the fallback. */
static const int64_t GEMV_KN[][2] = {{512, 512}, {13, 3},    {1408, 77}, {64, 8200}, {9, 1},
                                     {1, 17},    {33, 9},    {127, 64},  {16424, 3}, {100, 5}};
enum { GEMV_CASES = sizeof GEMV_KN / sizeof GEMV_KN[0] };

/* w as fp32 (bf16 = 0), or as bf16 bits with x rounded to bf16 in the even
 * cases and left fp32 in the odd ones (an fp32 model's activations on bf16
 * weights: the AVX-512 BF16 level's widening kernel, not vdpbf16ps) */
static void make_gemv_any(op_case *c, int i, dtx_rng *r, int bf16) {
    int64_t K = GEMV_KN[i][0], N = GEMV_KN[i][1];
    float *x = randf(r, K, 1), *w = randf(r, N * K, 1);
    uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * K));
    for (int64_t j = 0; j < N * K; j++) {
        wb[j] = dtx_f32_to_bf16(w[j]);
        if (bf16) w[j] = dtx_bf16_to_f32(wb[j]);
    }
    if (bf16 && i % 2 == 0)
        for (int64_t k = 0; k < K; k++) x[k] = dtx_bf16_round_f32(x[k]);
    if (i == GEMV_CASES - 1) x[K / 2] = dtx_bf16_round_f32(3e-39f);
    c->in[0] = x, c->in[1] = w, c->in[2] = wb, c->d[0] = K, c->d[1] = N;
    outputs(c, N);
    for (int64_t n = 0; n < N; n++) {
        double s = 0, m = 0;
        for (int64_t k = 0; k < K; k++) s += (double)x[k] * w[n * K + k], m += fabs((double)x[k] * w[n * K + k]);
        c->want[n] = s, c->mag[n] = m;
    }
    snprintf(c->what, sizeof c->what, "K %lld N %lld", (long long)K, (long long)N);
}
static void make_gemv(op_case *c, int i, dtx_rng *r) { make_gemv_any(c, i, r, 0); }
static void make_gemv_bf16(op_case *c, int i, dtx_rng *r) { make_gemv_any(c, i, r, 1); }
static void run_gemv(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->gemv(out, c->in[0], c->in[1], c->d[0], c->d[1]);
}
static void run_gemv_bf16(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->gemv_bf16(out, c->in[0], c->in[2], c->d[0], c->d[1]);
}

/* Widths around the 32-value groups, the AVX-512 q4 kernel's blocks of 4
 * and 8 groups (440: 8 + 4 + 2 groups) and the 8/32-lane vectors, row
 * counts around the 4- and 8-row blocks, and rows wider than the AVX2 q4
 * kernel's laid-out copy of x (16384). */
static const int64_t Q_K[] = {1, 7, 16, 31, 32, 33, 64, 100, 344, 440, 16424}, Q_N[] = {1, 3, 4, 5, 8, 9, 17};
enum { Q_CASES = 10 * 7 + 1 };
static void q_shape(int i, int64_t *K, int64_t *N) {
    if (i == Q_CASES - 1) *K = Q_K[10], *N = 5;
    else *K = Q_K[i / 7], *N = Q_N[i % 7];
}

/* q8 and q4 weights against their dequantised values in double; x as
 * w8a16 and w4a16 give it (bf16-rounded) in two cases of three, one of
 * them with a denormal; fp32 in the third (--act16 fp16's x is not bf16):
 * AVX-512 BF16's 4-bit kernel runs only on the first kind. */
static void make_gemv_q(op_case *c, int i, dtx_rng *r, int bits) {
    int64_t K, N;
    q_shape(i, &K, &N);
    float *w = randf(r, N * K, 0.5), *x = randf(r, K, 1), *deq = malloc(sizeof(float) * (size_t)(N * K));
    if (i % 3 != 2)
        for (int64_t k = 0; k < K; k++) x[k] = dtx_bf16_round_f32(x[k]);
    if (i % 3 == 1) x[K - 1] = dtx_bf16_round_f32(-3e-39f);
    int64_t ng = dtx_q4_groups(K), rb = dtx_q4_row_bytes(K);
    void *q = malloc(bits == 8 ? (size_t)(N * K) : (size_t)(N * rb));
    float *s = malloc(sizeof(float) * (size_t)(bits == 8 ? N : N * ng));
    for (int64_t n = 0; n < N; n++) {
        if (bits == 8) s[n] = dtx_q8_quantize_row((int8_t *)q + n * K, w + n * K, K, 0);
        else dtx_q4_quantize_row((uint8_t *)q + n * rb, s + n * ng, w + n * K, K, 1.0f);
    }
    if (bits == 8) dtx_q8_dequantize(deq, q, s, N, K);
    else dtx_q4_dequantize(deq, q, s, N, K);
    c->in[0] = x, c->in[1] = q, c->in[2] = s, c->in[3] = deq, c->in[4] = w, c->d[0] = K, c->d[1] = N;
    outputs(c, N);
    for (int64_t n = 0; n < N; n++) {
        double sum = 0, m = 0;
        for (int64_t k = 0; k < K; k++) sum += (double)x[k] * deq[n * K + k], m += fabs((double)x[k] * deq[n * K + k]);
        c->want[n] = sum, c->mag[n] = m;
    }
    snprintf(c->what, sizeof c->what, "K %lld N %lld", (long long)K, (long long)N);
}
static void make_gemv_q8(op_case *c, int i, dtx_rng *r) { make_gemv_q(c, i, r, 8); }
static void make_gemv_q4(op_case *c, int i, dtx_rng *r) { make_gemv_q(c, i, r, 4); }
static void run_gemv_q8(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->gemv_q8(out, c->in[0], c->in[1], c->in[2], c->d[0], c->d[1]);
}
static void run_gemv_q4(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->gemv_q4(out, c->in[0], c->in[1], c->in[2], c->d[0], c->d[1]);
}

/* int8 × int8: the exact integer sum, scaled (the extremes ±127 in the first rows) */
static void make_gemv_q8a8(op_case *c, int i, dtx_rng *r) {
    int64_t K, N;
    q_shape(i, &K, &N);
    int8_t *q = malloc((size_t)(N * K)), *xq = malloc((size_t)K);
    float *s = malloc(sizeof(float) * (size_t)N);
    for (int64_t j = 0; j < N * K; j++)
        q[j] = (int8_t)(j < 2 * K ? (j % 2 ? 127 : -127) : (int)(dtx_rng_next(r) % 255) - 127);
    for (int64_t k = 0; k < K; k++) xq[k] = (int8_t)(k % 3 == 0 ? -127 : (int)(dtx_rng_next(r) % 255) - 127);
    for (int64_t n = 0; n < N; n++) s[n] = (float)(0.01 + 0.001 * (double)n);
    c->in[0] = xq, c->in[1] = q, c->in[2] = s, c->d[0] = K, c->d[1] = N, c->scale = 0.05f;
    outputs(c, N);
    for (int64_t n = 0; n < N; n++) {
        int64_t acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (int64_t)xq[k] * q[n * K + k];
        c->want[n] = 0.05f * s[n] * (float)acc; /* the kernels' own rounding of the scaling */
    }
    snprintf(c->what, sizeof c->what, "K %lld N %lld", (long long)K, (long long)N);
}
static void run_gemv_q8a8(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->gemv_q8a8(out, c->in[0], c->scale, c->in[1], c->in[2], c->d[0], c->d[1]);
}

/* ------------------------------------------------------------ the flash attention's tiles */

/* C (=|+=) A·B with strided and transposed A, ragged M and N (every tile
 * shape), then the causal shortcuts (N_HI, K_HI, K_LO) at diagonals above,
 * on and below the tile; columns past N untouched. */
static const int64_t GEMM_MNK[][3] = {{64, 64, 64}, {13, 77, 9}, {1, 1, 1}, {6, 16, 130}, {65, 129, 33}, {5, 3, 0}};
static const int64_t DIAGS[] = {-70, -20, -3, 0, 5, 40, 200};
enum { GEMM_PLAIN = 6 * 4, GEMM_CASES = GEMM_PLAIN + 3 * 7 };

static void make_gemm(op_case *c, int i, dtx_rng *r) {
    int64_t M, N, K, tri = DTX_TRI_NONE, diag = 0, trans = 0, acc;
    if (i < GEMM_PLAIN) {
        M = GEMM_MNK[i / 4][0], N = GEMM_MNK[i / 4][1], K = GEMM_MNK[i / 4][2], trans = i % 2, acc = i / 2 % 2;
    } else {
        int j = i - GEMM_PLAIN;
        M = 45, N = 70, K = 67, tri = DTX_TRI_N_HI + j / 7, diag = DIAGS[j % 7], acc = j % 2;
    }
    int64_t lda = (trans ? M : K) + 3, ldb = N + 5, ldc = N + 2;
    float *A = randf(r, (trans ? K : M) * lda + 1, 1), *B = randf(r, K * ldb + 1, 1);
    for (int64_t a = 0; a < M; a++) /* the zeros the causal forms promise */
        for (int64_t kk = 0; kk < K; kk++)
            if ((tri == DTX_TRI_K_HI && kk > diag + a) || (tri == DTX_TRI_K_LO && kk < a - diag)) A[a * lda + kk] = 0;
    c->in[0] = A, c->in[1] = B;
    c->d[0] = M, c->d[1] = N, c->d[2] = K, c->d[3] = lda, c->d[4] = ldb, c->d[5] = ldc, c->d[6] = trans | acc << 1;
    c->d[7] = tri << 16 | (diag + 1000);
    outputs(c, M * ldc);
    for (int64_t a = 0; a < M; a++)
        for (int64_t j = 0; j < ldc; j++) {
            int64_t o = a * ldc + j;
            c->init[o] = (float)dtx_rng_normal(r);
            double s = (acc || j >= N) ? c->init[o] : 0, m = fabs(s);
            for (int64_t kk = 0; j < N && kk < K; kk++) {
                double p = (double)(trans ? A[kk * lda + a] : A[a * lda + kk]) * B[kk * ldb + j];
                s += p, m += fabs(p);
            }
            c->want[o] = s, c->mag[o] = j < N ? m : 0;
            if (tri == DTX_TRI_N_HI && j < N && j > diag + a) c->mag[o] = -1; /* unspecified */
        }
    snprintf(c->what, sizeof c->what, "%lldx%lldx%lld trans %lld acc %lld tri %lld diag %lld", (long long)M,
             (long long)N, (long long)K, (long long)trans, (long long)acc, (long long)tri, (long long)diag);
}
static void run_gemm(const dtx_simd_ops *o, const op_case *c, float *out) {
    int64_t trans = c->d[6] & 1, lda = c->d[3];
    o->gemm_tri(c->d[0], c->d[1], c->d[2], c->in[0], trans ? 1 : lda, trans ? lda : 1, c->in[1], c->d[4], out,
                c->d[5], (int)(c->d[6] >> 1), (dtx_tri)(c->d[7] >> 16), (c->d[7] & 0xffff) - 1000);
}

static const int64_t TR_RC[][2] = {{16, 16}, {1, 1}, {37, 5}, {100, 64}, {3, 50}};

/* dst[c·ldd + r] = src[r·lds + c]; the rest of dst untouched */
static void make_transpose(op_case *c, int i, dtx_rng *r) {
    int64_t R = TR_RC[i][0], C = TR_RC[i][1], lds = C + 7, ldd = R + 9;
    float *src = randf(r, R * lds, 1);
    c->in[0] = src, c->d[0] = R, c->d[1] = C, c->d[2] = lds, c->d[3] = ldd;
    outputs(c, C * ldd);
    for (int64_t j = 0; j < C; j++)
        for (int64_t a = 0; a < R; a++) c->want[j * ldd + a] = src[a * lds + j];
    snprintf(c->what, sizeof c->what, "%lldx%lld", (long long)R, (long long)C);
}
static void run_transpose(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->transpose(out, c->d[3], c->in[0], c->d[2], c->d[0], c->d[1]);
}

/* exp over [-88, 0] (relative 3e-7), below FLT_MIN (absolute FLT_MIN), the
 * specials (-inf, -1000, NaN, 0) and ragged tails */
static void make_exp(op_case *c, int i, dtx_rng *r) {
    int64_t n = i == 0 ? 1 << 18 : i == 1 ? 5 : 37;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < n; j++) x[j] = (float)(-88.0 * (double)j / (double)(n - 1));
    if (i == 0) x[0] = 0, x[1] = -1e-8f, x[2] = -FLT_MIN;
    if (i == 1) x[0] = -INFINITY, x[1] = -1000, x[2] = -90, x[3] = 0, x[4] = -1;
    if (i == 2)
        for (int64_t j = 0; j < n; j++) x[j] = (float)(-5 * fabs(dtx_rng_normal(r)));
    c->in[0] = x, c->d[0] = n;
    outputs(c, n);
    for (int64_t j = 0; j < n; j++) {
        double e = exp((double)x[j]);
        c->want[j] = e < FLT_MIN ? 0 : e; /* flushed */
        c->mag[j] = e < FLT_MIN ? FLT_MIN / 3e-7 : e; /* tol 3e-7 relative; FLT_MIN absolute below it */
    }
    snprintf(c->what, sizeof c->what, "n %lld", (long long)n);
}
static void run_exp(const dtx_simd_ops *o, const op_case *c, float *out) { o->exp(out, c->in[0], c->d[0]); }

/* The flash forward's row step (tile_gemm.h): S, m, l, alpha after the
 * update, for tiles above, on and below the diagonal and a fully masked row. */
static const int64_t SM_MN[][2] = {{16, 16}, {7, 33}, {64, 64}, {1, 5}, {40, 9}};
static void make_softmax_update(op_case *c, int i, dtx_rng *r) {
    int64_t M = SM_MN[i % 5][0], N = SM_MN[i % 5][1], ld = N + 3, diag = DIAGS[i / 5 % 7] / 4;
    float scale = 0.3f;
    float *S = randf(r, M * ld, 3), *m0 = malloc(sizeof(float) * (size_t)M), *l0 = malloc(sizeof(float) * (size_t)M);
    for (int64_t a = 0; a < M; a++)
        m0[a] = a % 3 == 0 ? -INFINITY : (float)dtx_rng_normal(r), l0[a] = a % 3 == 0 ? 0 : (float)(1 + fabs(dtx_rng_normal(r)));
    c->in[0] = S, c->in[1] = m0, c->in[2] = l0, c->d[0] = M, c->d[1] = N, c->d[2] = ld, c->d[3] = diag + 1000;
    c->scale = scale;
    outputs(c, M * ld + 3 * M); /* S, then m, l, alpha */
    for (int64_t j = 0; j < M * ld; j++) c->init[j] = S[j];
    for (int64_t a = 0; a < M; a++) c->init[M * ld + a] = m0[a], c->init[M * ld + M + a] = l0[a];
    for (int64_t a = 0; a < M; a++) {
        int64_t valid = tile_valid_cols(diag, a, N);
        double mx = m0[a];
        for (int64_t j = 0; j < valid; j++) mx = fmax(mx, (double)scale * S[a * ld + j]);
        double alpha = valid ? exp((double)m0[a] - mx) : 1, l = valid ? (double)l0[a] * alpha : l0[a];
        if (m0[a] == -INFINITY && valid) alpha = 0, l = 0;
        for (int64_t j = 0; j < ld; j++) {
            double e = j < N ? (j < valid ? exp((double)scale * S[a * ld + j] - mx) : 0) : S[a * ld + j];
            if (j < valid) l += e;
            c->want[a * ld + j] = e, c->mag[a * ld + j] = j < N ? 1 : 0;
        }
        c->want[M * ld + a] = valid ? mx : m0[a], c->mag[M * ld + a] = 1 + fabs(valid ? mx : 0);
        c->want[M * ld + M + a] = l, c->mag[M * ld + M + a] = 1 + l;
        c->want[M * ld + 2 * M + a] = alpha, c->mag[M * ld + 2 * M + a] = 1;
    }
    snprintf(c->what, sizeof c->what, "%lldx%lld diag %lld", (long long)M, (long long)N, (long long)diag);
}
static void run_softmax_update(const dtx_simd_ops *o, const op_case *c, float *out) {
    int64_t M = c->d[0], ld = c->d[2];
    o->softmax_update(out, ld, M, c->d[1], c->d[3] - 1000, c->scale, out + M * ld, out + M * ld + M,
                      out + M * ld + 2 * M);
}

/* The flash backward's recompute P = exp(scale·S − lse), 0 where masked. */
static void make_exp_rows(op_case *c, int i, dtx_rng *r) {
    int64_t M = SM_MN[i % 5][0], N = SM_MN[i % 5][1], ld = N + 3, diag = DIAGS[i / 5 % 7] / 4;
    float scale = 0.3f, *S = randf(r, M * ld, 3), *lse = randf(r, M, 1);
    for (int64_t a = 0; a < M; a++) lse[a] = 4 + fabsf(lse[a]);
    c->in[0] = S, c->in[1] = lse, c->d[0] = M, c->d[1] = N, c->d[2] = ld, c->d[3] = diag + 1000, c->scale = scale;
    outputs(c, M * ld);
    for (int64_t a = 0; a < M; a++)
        for (int64_t j = 0; j < ld; j++) {
            int64_t valid = tile_valid_cols(diag, a, N);
            c->init[a * ld + j] = UNTOUCHED;
            c->want[a * ld + j] = j < N ? (j < valid ? exp((double)scale * S[a * ld + j] - lse[a]) : 0) : UNTOUCHED;
            c->mag[a * ld + j] = j < N ? 1 : 0;
        }
    snprintf(c->what, sizeof c->what, "%lldx%lld diag %lld", (long long)M, (long long)N, (long long)diag);
}
static void run_exp_rows(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->exp_rows(out, c->in[0], c->d[2], c->d[0], c->d[1], c->d[3] - 1000, c->scale, c->in[1]);
}

/* ------------------------------------------------------------ the flash attention's bf16 tiles */

/* bf16 outputs compared as their bit patterns (exact), through the float
 * buffer: a 16-bit value is a float exactly. */
static uint16_t *bits_in(const float *out, int64_t n) {
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) b[i] = (uint16_t)out[i];
    return b;
}
static void bits_out(float *out, uint16_t *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = b[i];
    free(b);
}

static const int64_t PA_RC[][2] = {{1, 1}, {5, 7}, {16, 16}, {33, 70}, {100, 31}};

/* A operand: dst[r·ldd + c] = bf16(src[r·sr + c·sc]), a zero pad column for
 * an odd width; rows of src, its transpose, and other strides */
static void make_bf16_pack_a(op_case *c, int i, dtx_rng *r) {
    int64_t R = PA_RC[i / 3][0], C = PA_RC[i / 3][1], mode = i % 3, ld = 2 * R + 2 * C + 6;
    int64_t sr = mode == 0 ? ld : mode == 1 ? 1 : 2, sc = mode == 0 ? 1 : ld, ldd = C + (C & 1) + 4;
    float *src = randf(r, ld * ld, 1);
    c->in[0] = src, c->d[0] = R, c->d[1] = C, c->d[2] = sr, c->d[3] = sc, c->d[4] = ldd;
    outputs(c, R * ldd);
    for (int64_t a = 0; a < R; a++)
        for (int64_t j = 0; j < ldd; j++)
            c->want[a * ldd + j] = j < C ? dtx_f32_to_bf16(src[a * sr + j * sc]) : j == C && (C & 1) ? 0 : UNTOUCHED;
    snprintf(c->what, sizeof c->what, "%lldx%lld mode %lld", (long long)R, (long long)C, (long long)mode);
}
static void run_bf16_pack_a(const dtx_simd_ops *o, const op_case *c, float *out) {
    uint16_t *b = bits_in(out, c->n_out);
    o->bf16_pack_a(b, c->d[4], c->in[0], c->d[2], c->d[3], c->d[0], c->d[1]);
    bits_out(out, b, c->n_out);
}

static const int64_t PB_KN[][2] = {{1, 1}, {2, 16}, {7, 5}, {64, 64}, {33, 70}, {100, 17}};

/* B operand, pair-packed: B(kk, n) at [(kk/2)·2·ldp + 2n + kk%2], a zero pad
 * row for an odd K, the words past N untouched; of src [K × N] (pack_b) or
 * of srcᵀ with src [N × K] (pack_bt) */
static void make_bf16_pack(op_case *c, int i, dtx_rng *r, int trans) {
    int64_t K = PB_KN[i][0], N = PB_KN[i][1], lds = (trans ? K : N) + 3, ldp = N + 5;
    float *src = randf(r, (trans ? N : K) * lds, 1);
    int64_t sk = trans ? 1 : lds, sn = trans ? lds : 1;
    c->in[0] = src, c->d[0] = K, c->d[1] = N, c->d[2] = lds, c->d[3] = ldp;
    outputs(c, ((K + 1) / 2) * 2 * ldp);
    for (int64_t kk = 0; kk < K + (K & 1); kk++)
        for (int64_t n = 0; n < N; n++)
            c->want[(kk / 2) * 2 * ldp + 2 * n + (kk & 1)] = kk < K ? dtx_f32_to_bf16(src[kk * sk + n * sn]) : 0;
    snprintf(c->what, sizeof c->what, "K %lld N %lld", (long long)K, (long long)N);
}
static void make_bf16_pack_b(op_case *c, int i, dtx_rng *r) { make_bf16_pack(c, i, r, 0); }
static void make_bf16_pack_bt(op_case *c, int i, dtx_rng *r) { make_bf16_pack(c, i, r, 1); }
static void run_bf16_pack_b(const dtx_simd_ops *o, const op_case *c, float *out) {
    uint16_t *b = bits_in(out, c->n_out);
    o->bf16_pack_b(b, c->d[3], c->in[0], c->d[2], c->d[0], c->d[1]);
    bits_out(out, b, c->n_out);
}
static void run_bf16_pack_bt(const dtx_simd_ops *o, const op_case *c, float *out) {
    uint16_t *b = bits_in(out, c->n_out);
    o->bf16_pack_bt(b, c->d[3], c->in[0], c->d[2], c->d[1], c->d[0]);
    bits_out(out, b, c->n_out);
}

/* The pair-dot product (every tri mode, odd K, ragged M and N, acc) against
 * double loops over the bf16-rounded operands: only fp32 accumulation error
 * is left. The operands are packed by the portable packers. */
static const int64_t BG_MNK[][3] = {{64, 64, 64}, {13, 77, 9}, {1, 1, 1}, {6, 16, 130}, {45, 70, 67}, {5, 3, 0}};
static const int64_t BG_DIAGS[] = {-20, -3, 0, 5, 40};
enum { BG_PER_SHAPE = 1 + 3 * 5 };
static void make_bf16_gemm(op_case *c, int i, dtx_rng *r) {
    int si = i / BG_PER_SHAPE, j = i % BG_PER_SHAPE;
    int64_t M = BG_MNK[si][0], N = BG_MNK[si][1], K = BG_MNK[si][2];
    int64_t tri = j == 0 ? DTX_TRI_NONE : DTX_TRI_N_HI + (j - 1) / 5, diag = j == 0 ? 0 : BG_DIAGS[(j - 1) % 5];
    int64_t K2 = K + (K & 1), lda = K2 + 2, ldp = N + 3, ldc = N + 2, acc = (si + j) % 2;
    float *Af = randf(r, M * K + 1, 1), *Bf = randf(r, K * N + 1, 1);
    for (int64_t a = 0; a < M; a++) /* the zeros the caller promises */
        for (int64_t kk = 0; kk < K; kk++)
            if ((tri == DTX_TRI_K_HI && kk > diag + a) || (tri == DTX_TRI_K_LO && kk < a - diag)) Af[a * K + kk] = 0;
    uint16_t *A = malloc(sizeof(uint16_t) * (size_t)(M * lda + 1));
    uint16_t *B = malloc(sizeof(uint16_t) * (size_t)((K2 / 2) * 2 * ldp + 1));
    dtx_bf16_pack_a_portable(A, lda, Af, K, 1, M, K);
    dtx_bf16_pack_b_portable(B, ldp, Bf, N, K, N);
    c->in[0] = A, c->in[1] = B, c->in[2] = Af, c->in[3] = Bf;
    c->d[0] = M, c->d[1] = N, c->d[2] = K, c->d[3] = lda, c->d[4] = ldp, c->d[5] = ldc, c->d[6] = acc;
    c->d[7] = tri << 16 | (diag + 1000);
    outputs(c, M * ldc);
    for (int64_t a = 0; a < M; a++)
        for (int64_t col = 0; col < ldc; col++) {
            int64_t o = a * ldc + col;
            c->init[o] = (float)dtx_rng_normal(r);
            double s = (acc || col >= N) ? c->init[o] : 0, m = fabs(s);
            for (int64_t kk = 0; col < N && kk < K; kk++) {
                double p = (double)dtx_bf16_round_f32(Af[a * K + kk]) * dtx_bf16_round_f32(Bf[kk * N + col]);
                s += p, m += fabs(p);
            }
            c->want[o] = s, c->mag[o] = col < N ? m : 0;
            if (tri == DTX_TRI_N_HI && col < N && col > diag + a) c->mag[o] = -1; /* unspecified */
        }
    snprintf(c->what, sizeof c->what, "%lldx%lldx%lld tri %lld diag %lld acc %lld", (long long)M, (long long)N,
             (long long)K, (long long)tri, (long long)diag, (long long)acc);
}
static void run_bf16_gemm(const dtx_simd_ops *o, const op_case *c, float *out) {
    o->bf16_gemm_tri(c->d[0], c->d[1], c->d[2], c->in[0], c->d[3], c->in[1], c->d[4], out, c->d[5], (int)c->d[6],
                     (dtx_tri)(c->d[7] >> 16), (c->d[7] & 0xffff) - 1000);
}

/* ------------------------------------------------------------ the table and its one loop */

static const op_entry OPS[] = {
    {"dot_heads", 72, make_dot_heads, run_dot_heads, 1e-6},
    {"axpy_heads", 36, make_axpy_heads, run_axpy_heads, 1e-6},
    {"dot_heads_bf16", 72, make_dot_heads_bf16, run_dot_heads_bf16, 1e-6},
    {"axpy_heads_bf16", 36, make_axpy_heads_bf16, run_axpy_heads_bf16, 1e-6},
    {"gemv", GEMV_CASES, make_gemv, run_gemv, 1e-6},
    {"gemv_bf16", GEMV_CASES, make_gemv_bf16, run_gemv_bf16, 1e-6},
    {"gemv_q8", Q_CASES, make_gemv_q8, run_gemv_q8, 1e-6},
    {"gemv_q4", Q_CASES, make_gemv_q4, run_gemv_q4, 1e-6},
    {"gemv_q8a8", Q_CASES, make_gemv_q8a8, run_gemv_q8a8, 0},
    {"gemm_tri", GEMM_CASES, make_gemm, run_gemm, 1e-5},
    {"transpose", 5, make_transpose, run_transpose, 0},
    {"exp", 3, make_exp, run_exp, 3e-7},
    {"softmax_update", 35, make_softmax_update, run_softmax_update, 2e-6},
    {"exp_rows", 35, make_exp_rows, run_exp_rows, 2e-6},
    {"bf16_pack_a", 15, make_bf16_pack_a, run_bf16_pack_a, 0},
    {"bf16_pack_b", 6, make_bf16_pack_b, run_bf16_pack_b, 0},
    {"bf16_pack_bt", 6, make_bf16_pack_bt, run_bf16_pack_bt, 0},
    {"bf16_gemm_tri", 6 * BG_PER_SHAPE, make_bf16_gemm, run_bf16_gemm, 1e-5},
};

static void case_free(op_case *c) {
    for (int k = 0; k < MAX_IN; k++) free(c->in[k]);
    free(c->init), free(c->want), free(c->mag);
    memset(c, 0, sizeof *c);
}

/* The worst error of out against the case's reference (inf for a wrong
 * untouched, exact or special value). */
static double case_error(const op_case *c, const float *out, double tol) {
    double worst = 0;
    for (int64_t j = 0; j < c->n_out; j++) {
        double want = c->want[j], got = out[j], mag = c->mag[j];
        if (mag < 0 || (isnan(want) && isnan(got)) || got == want) continue;
        if (mag == 0 || tol == 0 || isnan(got) || isinf(want)) return INFINITY;
        worst = fmax(worst, fabs(got - want) / (mag + (mag < 1 ? 1 : 0)) / tol);
    }
    return worst; /* <= 1: within the tolerance */
}

TEST(simd_ops_every_level_against_the_reference) {
    int levels = 0;
    for (size_t e = 0; e < sizeof OPS / sizeof OPS[0]; e++) {
        const op_entry *op = &OPS[e];
        dtx_rng r;
        dtx_rng_seed(&r, 4000 + e);
        for (int i = 0; i < op->n_cases; i++) {
            op_case c = {0};
            op->make(&c, i, &r);
            float *out = malloc(sizeof(float) * (size_t)(c.n_out > 0 ? c.n_out : 1));
            FOR_EACH_ISA(lvl) {
                /* a level without kernels of its own runs the one below's: once is enough */
                if (lvl > DTX_ISA_PORTABLE && dtx_simd_for(lvl) == dtx_simd_for((dtx_isa)(lvl - 1))) continue;
                levels += e == 0 && i == 0;
                memcpy(out, c.init, sizeof(float) * (size_t)c.n_out);
                op->run(dtx_simd_for(lvl), &c, out);
                double err = case_error(&c, out, op->tol);
                CHECKF(err <= 1, "%s (%s) %s: error %.3g of the tolerance %.3g", op->name, dtx_simd_for(lvl)->name,
                       c.what, err, op->tol);
            }
            free(out);
            case_free(&c);
        }
    }
    CHECK(levels >= 1);
}
