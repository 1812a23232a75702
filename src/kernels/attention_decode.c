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
 * cache's rows in order, each row's sub-heads in turn (dtx_dot_heads: one
 * stream through the keys); (2) softmax of each map with max subtraction
 * (vectorised exp, sum in double); (3) the weighted sum of the value rows,
 * again row by row, accumulated in out in row order (dtx_axpy_heads). DIFF head h
 * folds its two maps into one weight per key, p1[t] − λ·p2[t], so V is read
 * once: O = A1·v − λ·A2·v; then the per-head
 * RMSNorm over 2d and the (1 − λ_init) scale, as the full-sequence kernels.
 * Walking rows keeps the reads contiguous: one head's column of a long cache
 * is a stride of a whole row, which the prefetchers do not follow across
 * pages (the column walk ran at 7 GB/s at len 1024, config S).
 *
 * Quantised logits (evaluation, docs/eval_quant.md): the scores are then the
 * plain reference's (double dots rounded to real), quantised in scratch
 * before the softmax with the step of their own map (ROW scope) or of the
 * given per-map absmax (TENSOR scope), so the row kernel and the reference
 * see the same logits and round them alike. dtx_attention_quant_forward runs
 * a whole [B, T] forward through this row kernel, one query row at a time.
 *
 * Threads (the decode step's spinning team, common/team.h): a long cache's
 * rows in chunks (chunked_task: whole rows per thread, the chunks fixed by
 * the length alone; each thread takes its own contiguous block of chunks,
 * then the others' left over), a shorter one's heads in contiguous blocks
 * (heads_task), when the work pays for the handoff. Either way a result
 * does not depend on the thread count.
 * Nothing is allocated. */
#include "common/profile.h"
#include "common/team.h"
#include "kernels/kernels.h"
#include "kernels/vexp.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <omp.h>

/* Below this much work (len · 2 · H · d, about the multiply-adds) one thread does it all. */
#define PAR_MIN ((int64_t)1 << 16)

#ifdef DTX_DOUBLE
#define EXP_R(x) exp(x)
#else
#define EXP_R(x) dtx_vexpf(x)
#endif

/* A long cache is walked in chunks of whole rows, the threads taking
 * chunks: each chunk's scores, its maxima and sums, its weighted values,
 * then the chunks combined in their order. Why not the heads over the
 * threads: each thread then reads a slice of every row, which the hardware
 * prefetchers do not follow (Zen 5, 2026-12-04: two threads reading the two
 * halves of every 3 KiB row of 66 MB streamed 11 GB/s, the two halves of
 * the rows 55 GB/s). The chunks are a function of len alone (at most
 * MAX_CHUNKS of a multiple of BLOCK_ROWS rows, at least CHUNK_MIN_ROWS), so the
 * sums do not depend on the thread count. */
/* Chunks are whole multiples of BLOCK_ROWS rows. */
enum { BLOCK_ROWS = 16 };

enum { CHUNK_MIN_ROWS = 64, MAX_CHUNKS = 32 };

/* From a layer's keys of 256 KiB and two chunks' rows: the heads' split
 * (each thread a slice of every row, one region, no barrier) below. Since
 * the walks read the rows as one stream with the next row prefetched, the
 * chunks measure faster from there (Zen 5, 2026-12-05, alternated runs of
 * 300 steps from 28 to 328 cached rows: the 110M w4a16 file's attention
 * 0.12 s against 0.15-0.16 with a 1 MiB threshold, the 0.8B w4a16 file's
 * 0.18 against 0.22-0.24; at 512 to 812 rows the heads' split took twice
 * the chunks' time). Fewer than two chunks would leave a thread idle. */
enum { CHUNKED_MIN_BYTES = 256 << 10 };
static int decode_chunked(const dtx_attn_dims *a, int64_t len) {
    const int64_t ks = (a->arch.diff ? 2 : 1) * a->geom.n_kv_heads * a->geom.head_dim;
    return !a->run.quant_bits && len >= 2 * CHUNK_MIN_ROWS && len * ks * (int64_t)sizeof(real) >= CHUNKED_MIN_BYTES;
}

static void chunking(int64_t len, int64_t *n, int64_t *per) {
    int64_t c = (len + CHUNK_MIN_ROWS - 1) / CHUNK_MIN_ROWS;
    if (c > MAX_CHUNKS) c = MAX_CHUNKS;
    int64_t p = ((len + c - 1) / c + BLOCK_ROWS - 1) / BLOCK_ROWS * BLOCK_ROWS;
    *n = (len + p - 1) / p, *per = p;
}

/* Scratch past the scores of a chunked walk: each chunk's sums [n, maps]
 * (doubles), maxima [n, maps] and weighted values [n, H·w], in reals. */
static int64_t chunk_scratch(const dtx_attn_dims *a, int64_t len) {
    if (!decode_chunked(a, len)) return 0;
    int64_t n, per, maps = (a->arch.diff ? 2 : 1) * a->geom.n_heads, w = (a->arch.diff ? 2 : 1) * a->geom.head_dim;
    chunking(len, &n, &per);
    return 1 + n * maps * (int64_t)(sizeof(double) / sizeof(real)) + n * maps + n * a->geom.n_heads * w;
}

size_t dtx_attention_decode_scratch_size(const dtx_attn_dims *a, int64_t len) {
    int64_t l = len > 0 ? len : 0;
    return (size_t)((a->arch.diff ? 2 : 1) * a->geom.n_heads * l + chunk_scratch(a, l));
}

/* Exactly the plain reference's dot (attention.c): float products are exact
 * in double, so only the summation order may differ, far below one float ulp. */
static inline double dot_d(const real *a, const real *b, int64_t n) {
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

/* The quantised path's logit: as the reference computes it. */
static inline real quant_score(const real *qh, const real *kh, int64_t d, double scale) {
    return (real)(scale * dot_d(qh, kh, d));
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

/* In place: p [len] = dtx_quant_apply(p, step of absmax), absmax < 0 meaning
 * p's own. */
static void quantise_map(real *p, int64_t len, double absmax, int bits) {
    if (absmax < 0) {
        absmax = 0;
        for (int64_t t = 0; t < len; t++) absmax = fmax(absmax, fabs((double)p[t]));
    }
    double step = dtx_quant_step(absmax, bits);
    for (int64_t t = 0; t < len; t++) p[t] = dtx_quant_apply(p[t], step);
}

/* One layer's cached rows: keys and values in real, or in bf16 bits (a bf16
 * KV cache); the row kernels read either with the same arithmetic. */
typedef struct {
    const void *k, *v;
    int bf16;
} cache_rows;

/* Sub-heads per walk over the rows (their key columns on the stack); more
 * walk the rows again. */
enum { HEADS_PER_WALK = 64 };

/* Scores of cache rows [t0, t1) for the sub-heads of heads [h0, h1): map j
 * of head h at S + (sub·(h − h0) + j)·len. */
static void score_rows(const dtx_attn_dims *a, real *S, int64_t len, const real *q, const cache_rows *kv, int64_t t0,
                       int64_t t1, int64_t h0, int64_t h1) {
    const int64_t n_rep = a->geom.n_heads / a->geom.n_kv_heads, d = a->geom.head_dim, sub = a->arch.diff ? 2 : 1;
    const int64_t ks = sub * a->geom.n_kv_heads * d, m_all = sub * (h1 - h0);
    const real scale = (real)(1.0 / sqrt((double)d));
    int64_t off[HEADS_PER_WALK];
    for (int64_t i0 = 0; i0 < m_all; i0 += HEADS_PER_WALK) {
        const int64_t m = m_all - i0 < HEADS_PER_WALK ? m_all - i0 : HEADS_PER_WALK;
        for (int64_t i = 0; i < m; i++) { /* sub-head sub·h + j reads key sub-head sub·g + j */
            const int64_t qi = sub * h0 + i0 + i, h = qi / sub, j = qi % sub;
            off[i] = (sub * (h / n_rep) + j) * d;
        }
        real *s = S + i0 * len + t0;
        const real *x = q + (sub * h0 + i0) * d;
        if (kv->bf16) dtx_dot_heads_bf16(s, len, x, d, m, off, (const uint16_t *)kv->k + t0 * ks, ks, t1 - t0, scale);
        else dtx_dot_heads(s, len, x, d, m, off, (const real *)kv->k + t0 * ks, ks, t1 - t0, scale);
    }
}

/* y + h·w += Σ_t p_h[t]·v_t over cache rows [t0, t1), heads [h0, h1); p_h
 * (the combined map) at S + sub·(h − h0)·len. */
static void weigh_rows(const dtx_attn_dims *a, real *y, const real *S, int64_t len, const cache_rows *kv, int64_t t0,
                       int64_t t1, int64_t h0, int64_t h1) {
    const int64_t n_rep = a->geom.n_heads / a->geom.n_kv_heads, sub = a->arch.diff ? 2 : 1;
    const int64_t w = sub * a->geom.head_dim, vs = a->geom.n_kv_heads * w, m_all = h1 - h0;
    int64_t off[HEADS_PER_WALK];
    for (int64_t i0 = 0; i0 < m_all; i0 += HEADS_PER_WALK) {
        const int64_t m = m_all - i0 < HEADS_PER_WALK ? m_all - i0 : HEADS_PER_WALK;
        for (int64_t i = 0; i < m; i++) off[i] = ((h0 + i0 + i) / n_rep) * w;
        const real *p = S + sub * i0 * len + t0;
        real *yh = y + (h0 + i0) * w;
        if (kv->bf16)
            dtx_axpy_heads_bf16(yh, w, p, sub * len, m, off, (const uint16_t *)kv->v + t0 * vs, vs, t1 - t0);
        else dtx_axpy_heads(yh, w, p, sub * len, m, off, (const real *)kv->v + t0 * vs, vs, t1 - t0);
    }
}

/* Heads [h0, h1) of one decode step (see the top of the file); scratch holds
 * their maps from its start: map j of head h at (sub·(h − h0) + j)·len.
 * amax: TENSOR scope's per-map absmax (quantised rows only), else NULL. */
static void decode_heads(const dtx_attn_dims *a, real *out, const real *q, const cache_rows *kv, int64_t len,
                         const real *subln_w, real *scratch, int64_t h0, int64_t h1, const double *amax) {
    const int64_t H = a->geom.n_heads, G = a->geom.n_kv_heads, n_rep = H / G, d = a->geom.head_dim;
    const int64_t sub = a->arch.diff ? 2 : 1, w = sub * d;
    const int64_t ks = sub * G * d; /* the key rows' stride */
    const double scale_d = 1.0 / sqrt((double)d);
    const int qb = a->run.quant_bits;
    /* 1. scores, row by row of the cache: each row's keys are read once,
     *    contiguously (a walk down one head's column would stride over rows
     *    and defeat the prefetchers once the cache outgrows the caches). */
    if (qb) { /* fp32 rows only (dtx_attention_decode_bf16 refuses quantised logits) */
        const real *kcache = kv->k;
        for (int64_t t = 0; t < len; t++) {
            const real *kr = kcache + t * ks;
            for (int64_t h = h0; h < h1; h++)
                for (int64_t j = 0; j < sub; j++) /* sub-head sub·h + j reads key sub-head sub·g + j */
                    scratch[(sub * (h - h0) + j) * len + t] =
                        quant_score(q + (sub * h + j) * d, kr + (sub * (h / n_rep) + j) * d, d, scale_d);
        }
    } else
        score_rows(a, scratch, len, q, kv, 0, len, h0, h1);
    /* 2. softmax of every map (quantised first when asked); DIFF folds its
     *    two maps into p1 − λ·p2 */
    const real lr = (real)a->arch.lambda;
    for (int64_t h = h0; h < h1; h++) {
        real *p1 = scratch + sub * (h - h0) * len;
        for (int64_t j = 0; qb && j < sub; j++) quantise_map(p1 + j * len, len, amax ? amax[j] : -1, qb);
        softmax_inplace(p1, len);
        if (a->arch.diff) {
            real *p2 = p1 + len;
            softmax_inplace(p2, len);
#pragma omp simd
            for (int64_t t = 0; t < len; t++) p1[t] -= lr * p2[t];
        }
    }
    /* 3. weighted values, row by row, accumulated in out */
    for (int64_t c = h0 * w; c < h1 * w; c++) out[c] = 0;
    weigh_rows(a, out, scratch, len, kv, 0, len, h0, h1);
    /* 4. each head's epilogue (DIFF: per-head RMSNorm over 2d, γ, (1 − λ_init)),
     *    in place: the maps were combined before V, so O is already o1 */
    if (dtx_attn_epilogue_is_identity(&a->arch)) return;
    for (int64_t h = h0; h < h1; h++) dtx_attn_epilogue_forward(&a->arch, out + h * w, out + h * w, NULL, subln_w, w);
}

/* A long cache's step (see chunking): every head, the rows in chunks over
 * the threads; the same arithmetic per key as decode_heads (score_rows,
 * exp against the map's max, the sum in double, DIFF's maps
 * folded per key before V), the weighted values summed per chunk, then over
 * the chunks in order: four phases, the team's barrier between each. */
typedef struct {
    const dtx_attn_dims *a;
    real *out;
    const real *q;
    const cache_rows *kv;
    int64_t len;
    const real *subln_w;
    real *scratch;
    const double *absmax; /* decode_heads' (the heads' split only) */
    dtx_team_block left[2][DTX_TEAM_MAX]; /* the chunked walk's phases 1 and 3: each thread's chunks not yet taken */
    int n_blocks; /* the threads' blocks set in left (a team that came out smaller leaves some to the others) */
} decode_job;

/* [*lo, *hi): thread id's contiguous share of n items over nt threads. */
static void share(int64_t n, int id, int nt, int64_t *lo, int64_t *hi) {
    *lo = n * id / nt, *hi = n * (id + 1) / nt;
}

/* A chunk of phase ph (0 or 1) for thread id, one at a time (dtx_team_take:
 * its own block from the front, then the others' from the back); -1 when
 * none is left. Why not fixed shares: the first thread done waited at the
 * barrier (9% of a config S 4-bit decode step at 1,000 cached rows). Why
 * not the chunks in turn: 6% slower (the prefetchers restart at every
 * chunk). A chunk's results have their own place (its scores, maxima, sums,
 * weighted values), so who computed it changes nothing. */
static int64_t take_chunk_of(decode_job *j, int ph, int id) {
    int64_t lo, hi;
    return dtx_team_take(j->left[ph], j->n_blocks, id, 1, 1, 1, &lo, &hi) ? lo : -1;
}

static void chunked_task(void *arg, int id, int nt) {
    decode_job *j = arg;
    const dtx_attn_dims *a = j->a;
    const cache_rows *kv = j->kv;
    const int64_t len = j->len, H = a->geom.n_heads, sub = a->arch.diff ? 2 : 1, w = sub * a->geom.head_dim;
    const int64_t maps = sub * H, HW = H * w;
    const real lr = (real)a->arch.lambda;
    int64_t nc, per, c0, c1, h0, h1;
    chunking(len, &nc, &per);
    share(nc, id, nt, &c0, &c1);
    real *S = j->scratch; /* [maps, len] */
    int64_t at = maps * len;
    at += at % (int64_t)(sizeof(double) / sizeof(real)); /* the doubles aligned */
    double *csum = (double *)(void *)(j->scratch + at);  /* [nc, maps] */
    real *cmax = (real *)(void *)(csum + nc * maps);     /* [nc, maps] */
    real *part = cmax + nc * maps;                       /* [nc, H·w] */
    /* 1. scores, the chunk's rows in order against every sub-head; each chunk's maxima */
    for (int64_t c; (c = take_chunk_of(j, 0, id)) >= 0;) {
        const int64_t t0 = c * per, t1 = t0 + per < len ? t0 + per : len;
        score_rows(a, S, len, j->q, kv, t0, t1, 0, H);
        for (int64_t m = 0; m < maps; m++) {
            const real *p = S + m * len;
            real mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int64_t t = t0; t < t1; t++) mx = p[t] > mx ? p[t] : mx;
            cmax[c * maps + m] = mx;
        }
    }
    dtx_team_barrier();
    /* 2. exp against each map's max over all chunks; each chunk's sums */
    for (int64_t c = c0; c < c1; c++) {
        const int64_t t0 = c * per, t1 = t0 + per < len ? t0 + per : len;
        for (int64_t m = 0; m < maps; m++) { /* every chunk takes the maps' maxima itself: no barrier more */
            real mx = -INFINITY;
            for (int64_t cc = 0; cc < nc; cc++) mx = cmax[cc * maps + m] > mx ? cmax[cc * maps + m] : mx;
            real *p = S + m * len;
            double sum = 0;
#pragma omp simd
            for (int64_t t = t0; t < t1; t++) p[t] = EXP_R(p[t] - mx);
#pragma omp simd reduction(+ : sum)
            for (int64_t t = t0; t < t1; t++) sum += (double)p[t];
            csum[c * maps + m] = sum;
        }
    }
    dtx_team_barrier();
    /* 3. probabilities (DIFF: p1 − λ·p2), each chunk's weighted values */
    for (int64_t c; (c = take_chunk_of(j, 1, id)) >= 0;) {
        const int64_t t0 = c * per, t1 = t0 + per < len ? t0 + per : len;
        for (int64_t m = 0; m < maps; m++) {
            double sum = 0;
            for (int64_t cc = 0; cc < nc; cc++) sum += csum[cc * maps + m];
            real inv = (real)(1.0 / sum), *p = S + m * len;
#pragma omp simd
            for (int64_t t = t0; t < t1; t++) p[t] *= inv;
        }
        if (sub == 2)
            for (int64_t h = 0; h < H; h++) {
                real *p1 = S + 2 * h * len, *p2 = p1 + len;
#pragma omp simd
                for (int64_t t = t0; t < t1; t++) p1[t] -= lr * p2[t];
            }
        real *pc = part + c * HW;
        for (int64_t i = 0; i < HW; i++) pc[i] = 0;
        weigh_rows(a, pc, S, len, kv, t0, t1, 0, H);
    }
    dtx_team_barrier();
    /* 4. the chunks in order, then each head's epilogue */
    share(H, id, nt, &h0, &h1);
    const int identity = dtx_attn_epilogue_is_identity(&a->arch);
    for (int64_t h = h0; h < h1; h++) {
        for (int64_t i = h * w; i < (h + 1) * w; i++) {
            real acc = part[i];
            for (int64_t c = 1; c < nc; c++) acc += part[c * HW + i];
            j->out[i] = acc;
        }
        if (!identity) dtx_attn_epilogue_forward(&a->arch, j->out + h * w, j->out + h * w, NULL, j->subln_w, w);
    }
}

/* Each thread a contiguous block of heads: a contiguous slice of every cache
 * row. A head's result does not depend on which thread runs it. */
static void heads_task(void *arg, int id, int nt) {
    const decode_job *j = arg;
    const int64_t H = j->a->geom.n_heads, sub = j->a->arch.diff ? 2 : 1;
    int64_t h0, h1;
    share(H, id, nt, &h0, &h1);
    if (h0 < h1)
        decode_heads(j->a, j->out, j->q, j->kv, j->len, j->subln_w, j->scratch + sub * h0 * j->len, h0, h1, j->absmax);
}

static void check_dims(const dtx_attn_dims *a) {
    assert(a->geom.n_heads > 0 && a->geom.n_kv_heads > 0 && a->geom.n_heads % a->geom.n_kv_heads == 0);
    assert(a->geom.head_dim > 0 && a->geom.head_dim <= DTX_ATTN_MAX_HEAD_DIM);
    assert(a->run.quant_bits == 0 || (a->run.quant_bits >= 2 && a->run.quant_bits <= 16));
}

static void attention_decode_absmax_run(const dtx_attn_dims *a, double *absmax, const real *q, const real *kcache,
                                        int64_t len) {
    assert(a && absmax && q && kcache && len >= 1);
    check_dims(a);
    const int64_t H = a->geom.n_heads, n_rep = H / a->geom.n_kv_heads, d = a->geom.head_dim, sub = a->arch.diff ? 2 : 1;
    const int64_t ks = sub * a->geom.n_kv_heads * d;
    const double scale = 1.0 / sqrt((double)d);
    double m0 = absmax[0], m1 = a->arch.diff ? absmax[1] : 0;
    /* max is exact, so the threads' partial maxima combine to the same value */
#pragma omp parallel for schedule(static) reduction(max : m0, m1) if (len * 2 * H * d >= PAR_MIN && !omp_in_parallel())
    for (int64_t t = 0; t < len; t++) {
        const real *kr = kcache + t * ks;
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < sub; j++) {
                double z = fabs((double)quant_score(q + (sub * h + j) * d, kr + (sub * (h / n_rep) + j) * d, d, scale));
                if (j == 0) m0 = z > m0 ? z : m0;
                else m1 = z > m1 ? z : m1;
            }
    }
    absmax[0] = m0;
    if (a->arch.diff) absmax[1] = m1;
}

void dtx_attention_decode_absmax(const dtx_attn_dims *a, double *absmax, const real *q, const real *kcache,
                                 int64_t len) {
    DTX_PROF(DTX_PROF_ATTENTION, 0, attention_decode_absmax_run(a, absmax, q, kcache, len));
}

static void attention_decode_rows_run(const dtx_attn_dims *a, real *out, const real *q, const cache_rows *kv,
                                      int64_t len, const real *subln_w, real *scratch, const double *absmax) {
    assert(a && out && q && kv->k && kv->v && scratch && len >= 1);
    check_dims(a);
    assert(!a->arch.subln || subln_w);
    assert(!kv->bf16 || !a->run.quant_bits);
    double own[2] = {0, 0};
    if (!a->run.quant_bits || !a->run.quant_tensor) absmax = NULL;
    else if (!absmax) { /* this row alone is the tensor */
        attention_decode_absmax_run(a, own, q, kv->k, len); /* counted in this call's profile */
        absmax = own;
    }
    decode_job j = {.a = a, .out = out, .q = q, .kv = kv, .len = len, .subln_w = subln_w, .scratch = scratch, .absmax = absmax};
    if (decode_chunked(a, len)) { /* any team size, one alone included: the chunks are len's */
        int64_t nc, per;
        chunking(len, &nc, &per);
        j.n_blocks = dtx_team_size();
        dtx_team_blocks_init(j.left[0], j.n_blocks, nc, 1);
        dtx_team_blocks_init(j.left[1], j.n_blocks, nc, 1);
        dtx_team_run(chunked_task, &j);
        return;
    }
    const int64_t work = len * 2 * a->geom.n_heads * a->geom.head_dim;
    if (work < PAR_MIN) heads_task(&j, 0, 1);
    else dtx_team_run(heads_task, &j); /* a team of one runs it here */
}

void dtx_attention_decode_with_absmax(const dtx_attn_dims *a, real *out, const real *q, const real *kcache,
                                      const real *vcache, int64_t len, const real *subln_w, real *scratch,
                                      const double *absmax) {
    const cache_rows kv = {kcache, vcache, 0};
    DTX_PROF(DTX_PROF_ATTENTION, 0, attention_decode_rows_run(a, out, q, &kv, len, subln_w, scratch, absmax));
}

void dtx_attention_decode(const dtx_attn_dims *a, real *out, const real *q, const real *kcache, const real *vcache,
                          int64_t len, const real *subln_w, real *scratch) {
    dtx_attention_decode_with_absmax(a, out, q, kcache, vcache, len, subln_w, scratch, NULL);
}

void dtx_attention_decode_bf16(const dtx_attn_dims *a, real *out, const real *q, const uint16_t *kcache,
                               const uint16_t *vcache, int64_t len, const real *subln_w, real *scratch) {
    const cache_rows kv = {kcache, vcache, 1};
    DTX_PROF(DTX_PROF_ATTENTION, 0, attention_decode_rows_run(a, out, q, &kv, len, subln_w, scratch, NULL));
}

/* ------------------------------------------------- quantised full forward */

static inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* Elements of real holding n doubles. */
static inline int64_t doubles_as_reals(int64_t n) {
    return (n * (int64_t)sizeof(double) + (int64_t)sizeof(real) - 1) / (int64_t)sizeof(real);
}

size_t dtx_attention_quant_workspace_size(const dtx_attn_dims *a) {
    if (a->run.impl != DTX_ATTN_FLASH || !a->run.quant_bits) return 0;
    int64_t nq = (a->arch.diff ? 2 : 1) * a->geom.n_heads;
    return (size_t)(round16(a->geom.B * nq * a->geom.T) + round16(doubles_as_reals(a->geom.B * a->geom.T * 2)));
}

/* Every row's per-map absmax over all heads: rowmax [B·T, 2]. */
static void quant_row_maxima(const dtx_attn_dims *a, double *rowmax, const real *q, const real *k) {
    const int64_t B = a->geom.B, T = a->geom.T, sub = a->arch.diff ? 2 : 1;
    const int64_t qs = sub * a->geom.n_heads * a->geom.head_dim, ks = sub * a->geom.n_kv_heads * a->geom.head_dim;
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            double *m = rowmax + (b * T + t) * 2;
            m[0] = m[1] = 0;
            attention_decode_absmax_run(a, m, q + (b * T + t) * qs, k + b * T * ks, t + 1);
        }
}

void dtx_attention_quant_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s, const real *q,
                                 const real *k, const real *v, const real *subln_w) {
    assert(a && out && s && s->work && q && k && v && a->run.quant_bits);
    check_dims(a);
    assert(!a->arch.subln || subln_w);
    const int64_t B = a->geom.B, T = a->geom.T, H = a->geom.n_heads, sub = a->arch.diff ? 2 : 1, d = a->geom.head_dim;
    const int64_t qs = sub * H * d, ks = sub * a->geom.n_kv_heads * d, vs = a->geom.n_kv_heads * sub * d, os = H * sub * d;
    real *scores = s->work;
    double *rowmax = (double *)(s->work + round16(B * sub * H * T));
    if (a->run.quant_tensor) quant_row_maxima(a, rowmax, q, k);
    /* One task per (batch, head): its rows in order, over a private slice of
     * scores long enough for the last row. */
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            double amax[2] = {0, 0};
            for (int64_t t = 0; a->run.quant_tensor && t < T; t++)
                for (int j = 0; j < 2; j++) amax[j] = fmax(amax[j], rowmax[(b * T + t) * 2 + j]);
            real *sc = scores + (b * H + h) * sub * T;
            const cache_rows kv = {k + b * T * ks, v + b * T * vs, 0};
            for (int64_t t = 0; t < T; t++)
                decode_heads(a, out + (b * T + t) * os, q + (b * T + t) * qs, &kv, t + 1, subln_w, sc, h, h + 1,
                             a->run.quant_tensor ? amax : NULL);
        }
}
