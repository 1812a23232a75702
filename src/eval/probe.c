/* Probing the last forward pass (probe.h): attention rows recomputed in
 * double from the stored post-RoPE q and k, and streamed |value| statistics
 * for the activation-outlier table (spec §6.8). */
#include "eval/probe.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "model/model.h"

/* ------------------------------------------------------------ statistics */

/* Bucket of |v| as a float: exponent and the top 10 mantissa bits, so a
 * bucket spans a relative 2^-10 of its lower edge. */
#define MANT_DROP (23 - (DTX_STATS_HIST_BITS - 8))


dtx_status dtx_abs_stats_init(dtx_abs_stats *s) {
    memset(s, 0, sizeof *s);
    s->hist = calloc((size_t)DTX_STATS_HIST_SIZE, sizeof *s->hist);
    if (!s->hist) return dtx_fail(DTX_ERR_NOMEM, "out of memory for a histogram of %lld buckets",
                                  (long long)DTX_STATS_HIST_SIZE);
    return DTX_OK;
}

void dtx_abs_stats_free(dtx_abs_stats *s) {
    free(s->hist);
    memset(s, 0, sizeof *s);
}

/* Keeps top[] sorted descending; a value equal to the current K-th is not
 * inserted (the multiset of the top K values is the same either way). */
static void top_insert(dtx_abs_stats *s, double a) {
    int64_t i = s->n_top < DTX_STATS_TOPK ? s->n_top++ : DTX_STATS_TOPK - 1;
    while (i > 0 && s->top[i - 1] < a) {
        s->top[i] = s->top[i - 1];
        i--;
    }
    s->top[i] = a;
}

static inline int top_wants(const dtx_abs_stats *s, double a) {
    return s->n_top < DTX_STATS_TOPK || a > s->top[DTX_STATS_TOPK - 1];
}

/* a = |v| >= 0, not NaN; af is a rounded to float (values beyond the float
 * range land in the +inf bucket). */
static inline void push(dtx_abs_stats *s, double a, float af) {
    s->count++;
    s->hist[dtx_f32_bits(af) >> MANT_DROP]++;
    if (top_wants(s, a)) top_insert(s, a);
}

void dtx_abs_stats_add(dtx_abs_stats *s, const double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double a = fabs(v[i]);
        if (isnan(a)) s->n_nan++;
        else push(s, a, (float)a);
    }
}

void dtx_abs_stats_add_f(dtx_abs_stats *s, const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(v[i]);
        if (isnan(a)) s->n_nan++;
        else push(s, a, a);
    }
}

void dtx_abs_stats_merge(dtx_abs_stats *dst, const dtx_abs_stats *src) {
    dst->count += src->count;
    dst->n_nan += src->n_nan;
    for (int64_t i = 0; i < src->n_top; i++)
        if (top_wants(dst, src->top[i])) top_insert(dst, src->top[i]);
    for (int64_t i = 0; i < DTX_STATS_HIST_SIZE; i++) dst->hist[i] += src->hist[i];
}

/* The midpoint of bucket i. Bucket 0 ([0, 2^-136): zero and the tiniest
 * subnormals) reports 0, the +inf bucket +inf. */
static double bucket_mid(int64_t i) {
    uint32_t lo_bits = (uint32_t)i << MANT_DROP, hi_bits = (uint32_t)(i + 1) << MANT_DROP;
    if (i == 0) return 0;
    if (lo_bits >= dtx_f32_bits(INFINITY)) return INFINITY;
    double lo = dtx_bits_f32(lo_bits);
    double hi = hi_bits >= dtx_f32_bits(INFINITY) ? (double)FLT_MAX : (double)dtx_bits_f32(hi_bits);
    return 0.5 * (lo + hi);
}

/* The bucket holding the value of 0-based rank r in ascending order. */
static int64_t bucket_of_rank(const dtx_abs_stats *s, int64_t r) {
    uint64_t seen = 0;
    for (int64_t i = 0; i < DTX_STATS_HIST_SIZE; i++) {
        seen += s->hist[i];
        if (seen > (uint64_t)r) return i;
    }
    return DTX_STATS_HIST_SIZE - 1; /* not reached while the counts agree */
}

double dtx_abs_stats_median(const dtx_abs_stats *s) {
    if (s->count == 0) return NAN;
    double lo = bucket_mid(bucket_of_rank(s, (s->count - 1) / 2));
    double hi = bucket_mid(bucket_of_rank(s, s->count / 2));
    return 0.5 * (lo + hi);
}

double dtx_abs_stats_top(const dtx_abs_stats *s, int64_t k) {
    return k >= 1 && k <= s->n_top ? s->top[k - 1] : NAN;
}

/* ------------------------------------------------------------ attention rows */

/* What row t of one map reads: the query sub-head vector and the key
 * sub-head column (key s at k + s·kstride). */
typedef struct {
    const real *q, *k;
    int64_t kstride, d;
    double scale;
} row_view;

static int is_diff(const dtx_model *m) { return m->cfg.arch == DTX_ARCH_DIFF; }
/* DIFF and DIFF2 heads have two maps each (DIFF2: query heads 2h and 2h+1). */
static int two_maps(const dtx_model *m) { return m->cfg.arch != DTX_ARCH_TRANSFORMER; }

/* λ of DIFF2 head `head` at row n (= b·T + t) of the last forward. */
static double v2_lambda_at(const dtx_model *m, int64_t layer, int64_t n, int64_t head) {
    const real *lam = m->acts.layers[layer].lam;
    if (m->cfg.v2_lambda == DTX_V2_LAMBDA_NONE) return 1;
    double a = (double)lam[n * m->cfg.n_heads + head];
    return m->cfg.v2_lambda == DTX_V2_LAMBDA_LINEAR ? a : 1 / (1 + exp(-a));
}

static dtx_status need_forward(const dtx_model *m) {
    if (!m->acts.mem || m->acts.B < 1)
        return dtx_fail(DTX_ERR_ARG, "no forward pass has run on this model: there is nothing to probe");
    return DTX_OK;
}

static dtx_status check_layer(const dtx_model *m, int64_t layer) {
    if (layer < 0 || layer >= m->cfg.n_layers)
        return dtx_fail(DTX_ERR_ARG, "layer %lld is out of range [0, %lld)", (long long)layer,
                        (long long)m->cfg.n_layers);
    return DTX_OK;
}

static dtx_status check_args(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_attn_map map,
                             int64_t t) {
    dtx_status st;
    if ((st = need_forward(m)) || (st = check_layer(m, layer))) return st;
    if (b < 0 || b >= m->acts.B)
        return dtx_fail(DTX_ERR_ARG, "batch row %lld is out of range [0, %lld)", (long long)b, (long long)m->acts.B);
    if (head < 0 || head >= m->cfg.n_heads)
        return dtx_fail(DTX_ERR_ARG, "head %lld is out of range [0, %lld)", (long long)head,
                        (long long)m->cfg.n_heads);
    if (t < 0 || t >= m->acts.T)
        return dtx_fail(DTX_ERR_ARG, "query row %lld is out of range [0, %lld)", (long long)t, (long long)m->acts.T);
    if (map != DTX_MAP_FIRST && map != DTX_MAP_SECOND && map != DTX_MAP_COMBINED)
        return dtx_fail(DTX_ERR_ARG, "unknown attention map %d", (int)map);
    if (map == DTX_MAP_SECOND && !two_maps(m))
        return dtx_fail(DTX_ERR_ARG, "the Transformer has one attention map per head; A2 is DIFF's second map");
    return DTX_OK;
}

/* Sub-heads (kernels.h): DIFF head h, map w (0: A1, 1: A2) reads q sub-head
 * 2h + w and k sub-head 2g + w of its KV group g; DIFF2 head h reads query
 * head 2h + w and the pair's one KV head g; Transformer head j reads q
 * sub-head j and KV head j / (n_heads / n_kv_heads). */
static row_view view_of(const dtx_model *m, int64_t b, int64_t layer, int64_t head, int which, int64_t t) {
    const dtx_layer_acts *la = &m->acts.layers[layer];
    int64_t T = m->acts.T, d = m->head_dim, g = head / (m->cfg.n_heads / m->cfg.n_kv_heads);
    int64_t qsub = two_maps(m) ? 2 * head + which : head, ksub = is_diff(m) ? 2 * g + which : g;
    row_view v = {
        .q = la->q + (b * T + t) * dtx_config_q_dim(&m->cfg) + qsub * d,
        .k = la->k + b * T * m->kv_dim + ksub * d,
        .kstride = m->kv_dim,
        .d = d,
        .scale = 1.0 / sqrt((double)d),
    };
    return v;
}

static double logit_at(const row_view *v, int64_t s) {
    const real *k = v->k + s * v->kstride;
    double acc = 0;
    for (int64_t i = 0; i < v->d; i++) acc += (double)v->q[i] * k[i];
    return acc * v->scale;
}

static void logits_into(const row_view *v, int64_t t, double *out) {
    for (int64_t s = 0; s <= t; s++) out[s] = logit_at(v, s);
}

static void softmax_inplace(double *z, int64_t n) {
    double mx = -INFINITY, sum = 0;
    for (int64_t s = 0; s < n; s++) mx = z[s] > mx ? z[s] : mx;
    for (int64_t s = 0; s < n; s++) sum += (z[s] = exp(z[s] - mx));
    for (int64_t s = 0; s < n; s++) z[s] /= sum;
}

/* out[s] -= lambda · softmax(logits of v)[s], without a second buffer: the
 * logits are recomputed (a row is short and this keeps the probe
 * allocation-free). */
static void subtract_map(const row_view *v, int64_t t, double lambda, double *out) {
    double mx = -INFINITY, sum = 0;
    for (int64_t s = 0; s <= t; s++) {
        double z = logit_at(v, s);
        mx = z > mx ? z : mx;
    }
    for (int64_t s = 0; s <= t; s++) sum += exp(logit_at(v, s) - mx);
    for (int64_t s = 0; s <= t; s++) out[s] -= lambda * exp(logit_at(v, s) - mx) / sum;
}

dtx_status dtx_probe_logit_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_attn_map map,
                               int64_t t, double *out) {
    dtx_status st = check_args(m, b, layer, head, map, t);
    if (st) return st;
    if (map == DTX_MAP_COMBINED)
        return dtx_fail(DTX_ERR_ARG, "logits exist per map (A1 or A2); A1 − λA2 has none of its own");
    row_view v = view_of(m, b, layer, head, map == DTX_MAP_SECOND, t);
    logits_into(&v, t, out);
    return DTX_OK;
}

dtx_status dtx_probe_attention_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_attn_map map,
                                   int64_t t, double *out) {
    dtx_status st = check_args(m, b, layer, head, map, t);
    if (st) return st;
    row_view v = view_of(m, b, layer, head, map == DTX_MAP_SECOND, t);
    logits_into(&v, t, out);
    softmax_inplace(out, t + 1);
    if (map == DTX_MAP_COMBINED && two_maps(m)) {
        row_view v2 = view_of(m, b, layer, head, 1, t);
        double lambda = is_diff(m) ? m->acts.layers[layer].lambda : v2_lambda_at(m, layer, b * m->acts.T + t, head);
        subtract_map(&v2, t, lambda, out);
    }
    return DTX_OK;
}

dtx_status dtx_model_attention_map(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_attn_map which,
                                   double *out) {
    dtx_status st = check_args(m, b, layer, head, which, 0);
    if (st) return st;
    const int64_t T = m->acts.T;
    for (int64_t t = 0; t < T; t++) {
        double *row = out + t * T;
        if ((st = dtx_probe_attention_row(m, b, layer, head, which, t, row))) return st;
        memset(row + t + 1, 0, sizeof(double) * (size_t)(T - 1 - t));
    }
    return DTX_OK;
}

double dtx_probe_lambda_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, int64_t t) {
    if (check_args(m, b, layer, head, DTX_MAP_COMBINED, t)) return NAN;
    if (m->cfg.arch == DTX_ARCH_DIFF2) return v2_lambda_at(m, layer, b * m->acts.T + t, head);
    return is_diff(m) ? m->acts.layers[layer].lambda : 0.0;
}

double dtx_probe_lambda(const dtx_model *m, int64_t layer) {
    if (need_forward(m) || check_layer(m, layer)) return NAN;
    if (m->cfg.arch != DTX_ARCH_DIFF2) return is_diff(m) ? m->acts.layers[layer].lambda : 0.0;
    int64_t N = m->acts.B * m->acts.T, h = m->cfg.n_heads;
    double sum = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < h; i++) sum += v2_lambda_at(m, layer, n, i);
    return sum / (double)(N * h);
}

void dtx_probe_shape(const dtx_model *m, int64_t *B, int64_t *T) {
    int have = m->acts.mem != NULL;
    *B = have ? m->acts.B : 0;
    *T = have ? m->acts.T : 0;
}

const dtx_real *dtx_probe_hidden(const dtx_model *m, int64_t layer) {
    if (need_forward(m) || check_layer(m, layer)) return NULL;
    int64_t N = m->acts.B * m->acts.T;
    return m->acts.resid + (layer + 1) * N * m->cfg.dim;
}

/* ------------------------------------------------------------ pooled statistics */

static void add_reals(dtx_abs_stats *s, const real *v, int64_t n) {
#ifdef DTX_DOUBLE
    dtx_abs_stats_add(s, v, n);
#else
    dtx_abs_stats_add_f(s, v, n);
#endif
}

/* |logits| of every causal entry of one sub-head's map into s; row is
 * scratch of T values. The dot products stay in the working precision: the
 * pool holds ~10^8 values and doubles would buy nothing at 2^-11 buckets. */
static void add_subhead_logits(const dtx_model *m, int64_t layer, int64_t b, int64_t qsub, dtx_abs_stats *st,
                               real *row) {
    const dtx_layer_acts *la = &m->acts.layers[layer];
    int64_t T = m->acts.T, d = m->head_dim, D = dtx_config_q_dim(&m->cfg), KV = m->kv_dim;
    int64_t group = m->cfg.n_heads / m->cfg.n_kv_heads;
    int64_t ksub = is_diff(m)                    ? 2 * ((qsub / 2) / group) + qsub % 2
                   : m->cfg.arch == DTX_ARCH_DIFF2 ? (qsub / 2) / group
                                                  : qsub / group;
    real scale = (real)(1.0 / sqrt((double)d));
    const real *K = la->k + b * T * KV + ksub * d;
    for (int64_t t = 0; t < T; t++) {
        const real *q = la->q + (b * T + t) * D + qsub * d;
        for (int64_t s = 0; s <= t; s++) {
            const real *k = K + s * KV;
            real acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < d; i++) acc += q[i] * k[i];
            row[s] = acc * scale;
        }
        add_reals(st, row, t + 1);
    }
}

/* Per-thread statistics (thread 0 writes into the caller's) and rows. */
typedef struct {
    int n;
    dtx_abs_stats *st;
    real *rows;
} thread_parts;

static void parts_free(thread_parts *p) {
    for (int i = 1; i < p->n; i++) dtx_abs_stats_free(&p->st[i]);
    free(p->st);
    free(p->rows);
}

static dtx_status parts_init(thread_parts *p, int n, int64_t T, dtx_abs_stats *s) {
    p->n = n;
    p->st = calloc((size_t)n, sizeof *p->st);
    p->rows = malloc((size_t)(n * T) * sizeof *p->rows);
    if (!p->st || !p->rows) {
        free(p->st);
        free(p->rows);
        p->n = 0;
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for per-thread logit statistics");
    }
    p->st[0] = *s;
    for (int i = 1; i < n; i++) {
        if (dtx_abs_stats_init(&p->st[i]) == DTX_OK) continue;
        p->n = i; /* free what exists; st[0] is the caller's */
        parts_free(p);
        return DTX_ERR_NOMEM;
    }
    return DTX_OK;
}

dtx_status dtx_probe_add_logits(const dtx_model *m, dtx_abs_stats *s) {
    dtx_status st = need_forward(m);
    if (st) return st;
    int64_t L = m->cfg.n_layers, B = m->acts.B, T = m->acts.T;
    int64_t NQ = two_maps(m) ? 2 * m->cfg.n_heads : m->cfg.n_heads, n_tasks = L * B * NQ;
    int n_threads = 1;
#ifdef _OPENMP
    n_threads = omp_get_max_threads();
#endif
    thread_parts p;
    if ((st = parts_init(&p, n_threads, T, s))) return st;
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int64_t task = 0; task < n_tasks; task++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        int64_t qsub = task % NQ, b = (task / NQ) % B, layer = task / (NQ * B);
        add_subhead_logits(m, layer, b, qsub, &p.st[tid], p.rows + tid * T);
    }
    /* Exact merges (integer counts, a top-K multiset): the thread that ran
     * a task changes nothing in the result. */
    for (int i = 1; i < p.n; i++) dtx_abs_stats_merge(&p.st[0], &p.st[i]);
    *s = p.st[0];
    p.st[0].hist = NULL;
    parts_free(&p);
    return DTX_OK;
}

dtx_status dtx_probe_add_hidden(const dtx_model *m, dtx_abs_stats *s) {
    dtx_status st = need_forward(m);
    if (st) return st;
    int64_t N = m->acts.B * m->acts.T;
    for (int64_t l = 0; l < m->cfg.n_layers; l++) add_reals(s, dtx_probe_hidden(m, l), N * m->cfg.dim);
    return DTX_OK;
}
