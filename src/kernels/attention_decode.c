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
 * Three passes: (1) scores s[t] = q·k_t / √d of every (sub-)head, walking the
 * cache row by row (fp32 dots, vectorised along d); (2) softmax of each map
 * with max subtraction (vectorised exp, sum in double); (3) the weighted sum
 * of the value rows, again row by row, accumulated in out (vectorised along
 * the value width). DIFF head h folds its two maps into one weight per key,
 * p1[t] − λ·p2[t], so V is read once: O = A1·v − λ·A2·v; then the per-head
 * RMSNorm over 2d and the (1 − λ_init) scale, as the full-sequence kernels.
 * Walking rows keeps the reads contiguous: one head's column of a long cache
 * is a stride of a whole row, which the prefetchers do not follow across
 * pages (the column walk ran at 7 GB/s at len 1024, config S).
 *
 * Threads: when the cache is long enough to pay for waking them, each thread
 * takes a contiguous block of heads (a contiguous slice of every row). Every
 * head is computed the same way whichever thread runs it, so the result does
 * not depend on the thread count. Nothing is allocated. */
#include "kernels/kernels.h"
#include "kernels/vexp.h"

#include <assert.h>
#include <math.h>
#include <omp.h>

/* Below this much work (len · 2 · H · d, about the multiply-adds) one thread does it all. */
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

/* p [len] = softmax(p) in place: max subtraction, vectorised exp, sum in double. */
static void softmax_inplace(real *restrict p, int64_t len) {
    real mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t t = 0; t < len; t++) mx = p[t] > mx ? p[t] : mx;
#pragma omp simd
    for (int64_t t = 0; t < len; t++) p[t] = EXP_R(p[t] - mx);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < len; t++) sum += (double)p[t];
    real inv = (real)(1.0 / sum);
#pragma omp simd
    for (int64_t t = 0; t < len; t++) p[t] *= inv;
}

/* y [w] += alpha · x [w] */
static inline void axpy(real *restrict y, real alpha, const real *restrict x, int64_t w) {
#pragma omp simd
    for (int64_t c = 0; c < w; c++) y[c] += alpha * x[c];
}

/* Heads [h0, h1) of one decode step (see the top of the file). */
static void decode_heads(const dtx_attn_dims *a, real *out, const real *q, const real *kcache, const real *vcache,
                         int64_t len, const real *subln_w, real *scratch, int64_t h0, int64_t h1) {
    const int64_t H = a->n_heads, G = a->n_kv_heads, n_rep = H / G, d = a->head_dim;
    const int64_t sub = a->diff ? 2 : 1, w = sub * d;
    const int64_t ks = sub * G * d, vs = G * w; /* cache row strides */
    const real scale = (real)(1.0 / sqrt((double)d));
    /* 1. scores, row by row of the cache: each row's keys are read once,
     *    contiguously (a walk down one head's column would stride over rows
     *    and defeat the prefetchers once the cache outgrows the caches). */
    for (int64_t t = 0; t < len; t++) {
        const real *kr = kcache + t * ks;
        for (int64_t h = h0; h < h1; h++) {
            const int64_t g = h / n_rep;
            for (int64_t j = 0; j < sub; j++) /* sub-head sub·h + j reads key sub-head sub·g + j */
                scratch[(sub * h + j) * len + t] = scale * dot_r(q + (sub * h + j) * d, kr + (sub * g + j) * d, d);
        }
    }
    /* 2. softmax of every map; DIFF folds its two maps into p1 − λ·p2 */
    const real lr = (real)a->lambda;
    for (int64_t h = h0; h < h1; h++) {
        real *p1 = scratch + sub * h * len;
        softmax_inplace(p1, len);
        if (a->diff) {
            real *p2 = p1 + len;
            softmax_inplace(p2, len);
#pragma omp simd
            for (int64_t t = 0; t < len; t++) p1[t] -= lr * p2[t];
        }
    }
    /* 3. weighted values, row by row, accumulated in out */
    for (int64_t c = h0 * w; c < h1 * w; c++) out[c] = 0;
    for (int64_t t = 0; t < len; t++) {
        const real *vr = vcache + t * vs;
        for (int64_t h = h0; h < h1; h++) axpy(out + h * w, scratch[sub * h * len + t], vr + (h / n_rep) * w, w);
    }
    if (!a->diff) return;
    /* 4. DIFF: per-head RMSNorm over 2d, γ, (1 − λ_init) */
    const double cs = 1.0 - a->lambda_init;
    for (int64_t h = h0; h < h1; h++) {
        real *o = out + h * w;
        double ss = 0;
        for (int64_t c = 0; c < w; c++) ss += (double)o[c] * (double)o[c];
        double rs = 1.0 / sqrt(ss / (double)w + a->eps);
        for (int64_t c = 0; c < w; c++) o[c] = (real)(cs * subln_w[c] * (double)o[c] * rs);
    }
}

void dtx_attention_decode(const dtx_attn_dims *a, real *out, const real *q, const real *kcache, const real *vcache,
                          int64_t len, const real *subln_w, real *scratch) {
    assert(a && out && q && kcache && vcache && scratch && len >= 1);
    assert(a->n_heads > 0 && a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0);
    assert(a->head_dim > 0 && a->head_dim <= DTX_ATTN_MAX_HEAD_DIM);
    assert(!a->diff || subln_w);
    const int64_t H = a->n_heads, work = len * 2 * H * a->head_dim;
    if (work < PAR_MIN || omp_get_max_threads() == 1 || omp_in_parallel()) {
        decode_heads(a, out, q, kcache, vcache, len, subln_w, scratch, 0, H);
        return;
    }
    /* Each thread takes a contiguous block of heads: a contiguous slice of
     * every cache row. A head's result does not depend on which thread runs it. */
#pragma omp parallel
    {
        int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t h0 = H * id / nt, h1 = H * (id + 1) / nt;
        if (h0 < h1) decode_heads(a, out, q, kcache, vcache, len, subln_w, scratch, h0, h1);
    }
}
