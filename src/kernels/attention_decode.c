/* Attention of ONE query row over a KV cache (cached decoding, issue 4), for
 * both the Transformer and differential attention. The math is that of one
 * row of dtx_attention_forward (kernels.h): the query at position len − 1
 * attends to every cached key 0..len−1 (causality is the cache length).
 *
 * Layouts (the cache of one layer, rows written in place by the caller):
 *   q       [NQ·d]          one row, after RoPE
 *   kcache  [len, NK·d]     rows of post-RoPE keys (row stride NK·d)
 *   vcache  [len, G·w]      rows of values (row stride G·w; w = 2d DIFF, d)
 *   out     [H·w]           = [NQ·d] for both architectures
 *   scratch [NQ·len]        scores / probabilities of every (sub-)head
 *
 * Per (sub-)head: scores s[t] = q·k_t / √d (fp32 dot, vectorised along d),
 * softmax with max subtraction (vectorised exp, sum in double), then the
 * weighted sum of the value rows (vectorised along the value width). DIFF
 * head h folds its two maps into one weight per key, p1[t] − λ·p2[t], so V is
 * read once: O = Σ_t (p1[t] − λ p2[t]) v_t = A1·v − λ·A2·v; then the per-head
 * RMSNorm over 2d and the (1 − λ_init) scale, as the full-sequence kernels.
 *
 * Threads: heads are split over OpenMP threads when len · NQ · d is large
 * enough to pay for waking them. Each head is computed by one thread in a
 * fixed order, so the result does not depend on the thread count. Nothing is
 * allocated; per-head accumulators live on the stack (d ≤ MAX_HEAD_DIM). */
#include "kernels/kernels.h"
#include "kernels/vexp.h"

#include <assert.h>
#include <math.h>

enum { MAXW = 2 * DTX_ATTN_MAX_HEAD_DIM };

/* Below this much work (len · NQ · d multiply-adds) one thread does it all. */
#define PAR_MIN ((int64_t)1 << 16)

#ifdef DTX_DOUBLE
#define EXP_R(x) exp(x)
#else
#define EXP_R(x) dtx_vexpf(x)
#endif

size_t dtx_attention_decode_scratch_size(const dtx_attn_dims *a, int64_t len) {
    return (size_t)((a->diff ? 2 : 1) * a->n_heads * (len > 0 ? len : 0));
}

static inline real dot_r(const real *restrict a, const real *restrict b, int64_t n) {
    real acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* p [len] = softmax(scale · q·k_t) over the cached keys k (row stride ks). */
static void softmax_scores(real *restrict p, const real *restrict q, const real *restrict k, int64_t ks,
                           int64_t len, int64_t d, real scale) {
    real mx = -INFINITY;
    for (int64_t t = 0; t < len; t++) {
        real s = scale * dot_r(q, k + t * ks, d);
        p[t] = s;
        mx = s > mx ? s : mx;
    }
#pragma omp simd
    for (int64_t t = 0; t < len; t++) p[t] = EXP_R(p[t] - mx);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < len; t++) sum += (double)p[t];
    real inv = (real)(1.0 / sum);
#pragma omp simd
    for (int64_t t = 0; t < len; t++) p[t] *= inv;
}

/* o [w] = Σ_t p[t] · v_t  (v row stride vs) */
static void weighted_values(real *restrict o, const real *restrict p, const real *restrict v, int64_t vs,
                            int64_t len, int64_t w) {
    for (int64_t c = 0; c < w; c++) o[c] = 0;
    for (int64_t t = 0; t < len; t++) {
        real pt = p[t];
        const real *restrict vr = v + t * vs;
#pragma omp simd
        for (int64_t c = 0; c < w; c++) o[c] += pt * vr[c];
    }
}

void dtx_attention_decode(const dtx_attn_dims *a, real *out, const real *q, const real *kcache, const real *vcache,
                          int64_t len, const real *subln_w, real *scratch) {
    assert(a && out && q && kcache && vcache && scratch && len >= 1);
    assert(a->n_heads > 0 && a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0);
    assert(a->head_dim > 0 && a->head_dim <= DTX_ATTN_MAX_HEAD_DIM);
    assert(!a->diff || subln_w);
    const int64_t H = a->n_heads, G = a->n_kv_heads, n_rep = H / G, d = a->head_dim;
    const int64_t sub = a->diff ? 2 : 1, NQ = sub * H, w = sub * d;
    const int64_t ks = sub * G * d, vs = G * w; /* cache row strides */
    const real scale = (real)(1.0 / sqrt((double)d));
    const double lam = a->lambda, cs = 1.0 - a->lambda_init;
#pragma omp parallel for schedule(static) if (len * NQ * d >= PAR_MIN)
    for (int64_t h = 0; h < H; h++) {
        const int64_t g = h / n_rep;
        real o[MAXW];
        if (!a->diff) {
            real *p = scratch + h * len;
            softmax_scores(p, q + h * d, kcache + g * d, ks, len, d, scale);
            weighted_values(o, p, vcache + g * d, vs, len, d);
            for (int64_t c = 0; c < d; c++) out[h * d + c] = o[c];
            continue;
        }
        /* DIFF head h: q1 = sub-head 2h, q2 = 2h+1; k1 = 2g, k2 = 2g+1; v = V[g]. */
        real *p1 = scratch + 2 * h * len, *p2 = p1 + len;
        const real *q1 = q + 2 * h * d, *q2 = q1 + d;
        const real *k1 = kcache + 2 * g * d, *k2 = k1 + d;
        softmax_scores(p1, q1, k1, ks, len, d, scale);
        softmax_scores(p2, q2, k2, ks, len, d, scale);
        const real lr = (real)lam;
#pragma omp simd
        for (int64_t t = 0; t < len; t++) p1[t] -= lr * p2[t];
        weighted_values(o, p1, vcache + g * w, vs, len, w);
        double ss = 0;
        for (int64_t c = 0; c < w; c++) ss += (double)o[c] * (double)o[c];
        double rs = 1.0 / sqrt(ss / (double)w + a->eps);
        for (int64_t c = 0; c < w; c++) out[h * w + c] = (real)(cs * subln_w[c] * (double)o[c] * rs);
    }
}
