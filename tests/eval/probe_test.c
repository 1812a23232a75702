/* The forward-pass probe (src/eval/probe.c): attention rows against the maps
 * the PLAIN reference attention stores, logits against a recomputation from
 * q and k, hidden states against the norms that read them, and the |value|
 * statistics against a sort. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "eval/probe.h"
#include "model/model.h"
#include "test.h"

enum { PB_B = 2, PB_T = 13, PB_MAXT = 16, PB_V = 50 };

/* DIFF dim 64 with 4 heads (d = 8) and kv heads 4 (MHA) or 2 (GQA); the
 * Transformer is its baseline (8 heads, d = 8). */
static dtx_config probe_config(dtx_arch arch, int gqa) {
    dtx_config c = dtx_config_default();
    c.dim = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = gqa ? 2 : 4;
    c.vocab_size = PB_V;
    c.ffn_dim = 96;
    c.max_seq_len = PB_MAXT;
    return arch == DTX_ARCH_DIFF ? c : dtx_config_baseline(&c);
}

/* A random model after a forward over a B x T batch whose rows differ. */
static dtx_model *probe_model(dtx_arch arch, int gqa, dtx_attn_impl impl, uint64_t seed) {
    dtx_config c = probe_config(arch, gqa);
    dtx_model *m = NULL;
    if (dtx_model_init(&m, &c, seed) != DTX_OK) return NULL;
    dtx_model_set_attention(m, impl);
    int32_t tok[PB_B * PB_T];
    uint64_t x = seed * 2654435761u + 1;
    for (int i = 0; i < PB_B * PB_T; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        tok[i] = (int32_t)((x >> 33) % PB_V);
    }
    if (dtx_model_forward(m, tok, NULL, PB_B, PB_T, NULL, NULL) != DTX_OK) {
        dtx_model_free(m);
        return NULL;
    }
    return m;
}

static const char *cfg_name(dtx_arch arch, int gqa) {
    return arch == DTX_ARCH_DIFF ? (gqa ? "diff/gqa" : "diff/mha") : (gqa ? "tf/gqa" : "tf/mha");
}

/* Stored PLAIN map entry (b, sub-head, t, s) of layer l. */
static double stored(const dtx_model *m, int64_t l, int64_t b, int64_t sub, int64_t t, int64_t s) {
    int64_t NQ = m->cfg.arch == DTX_ARCH_DIFF ? 2 * m->cfg.n_heads : m->cfg.n_heads, T = m->acts.T;
    return m->acts.layers[l].att.att[((b * NQ + sub) * T + t) * T + s];
}

/* max over s <= t of |row[s] - stored| / max(|stored|, 1e-3). */
static double row_err(const dtx_model *m, int64_t l, int64_t b, int64_t sub, int64_t t, const double *row) {
    double worst = 0;
    for (int64_t s = 0; s <= t; s++) {
        double ref = stored(m, l, b, sub, t, s), e = fabs(row[s] - ref) / fmax(fabs(ref), 1e-3);
        worst = e > worst ? e : worst;
    }
    return worst;
}

static const int64_t ROWS[] = {0, 1, 5, PB_T - 1};

/* One config: every layer, head, b and some rows of A1 (and A2) against the
 * stored maps. */
static void check_rows_vs_plain(dtx_arch arch, int gqa) {
    dtx_model *m = probe_model(arch, gqa, DTX_ATTN_PLAIN, 11);
    REQUIREF(m, "%s: model: %s", cfg_name(arch, gqa), dtx_last_error());
    REQUIRE(m->acts.layers[0].att.att != NULL);
    int diff = arch == DTX_ARCH_DIFF;
    double row[PB_T], worst = 0;
    for (int64_t l = 0; l < m->cfg.n_layers; l++)
        for (int64_t b = 0; b < PB_B; b++)
            for (int64_t h = 0; h < m->cfg.n_heads; h++)
                for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
                    int64_t t = ROWS[i];
                    REQUIRE(dtx_probe_attention_row(m, b, l, h, DTX_MAP_FIRST, t, row) == DTX_OK);
                    double e = row_err(m, l, b, diff ? 2 * h : h, t, row);
                    worst = e > worst ? e : worst;
                    if (!diff) continue;
                    REQUIRE(dtx_probe_attention_row(m, b, l, h, DTX_MAP_SECOND, t, row) == DTX_OK);
                    e = row_err(m, l, b, 2 * h + 1, t, row);
                    worst = e > worst ? e : worst;
                }
    CHECKF(worst < 1e-5, "%s: probe rows vs stored PLAIN maps: rel err %.3g", cfg_name(arch, gqa), worst);
    dtx_model_free(m);
}

TEST(probe_rows_match_plain_maps) {
    for (int gqa = 0; gqa < 2; gqa++) {
        check_rows_vs_plain(DTX_ARCH_DIFF, gqa);
        check_rows_vs_plain(DTX_ARCH_TRANSFORMER, gqa);
    }
}

/* DIFF: A1 − λA2 elementwise, rows summing to 1 − λ; the Transformer's DIFF
 * map is A1. */
TEST(probe_diff_map_combines_and_sums) {
    for (int gqa = 0; gqa < 2; gqa++) {
        dtx_model *m = probe_model(DTX_ARCH_DIFF, gqa, DTX_ATTN_PLAIN, 5);
        REQUIREF(m, "%s", dtx_last_error());
        double a1[PB_T], a2[PB_T], d[PB_T], worst = 0, worst_sum = 0;
        for (int64_t l = 0; l < m->cfg.n_layers; l++) {
            double lambda = dtx_probe_lambda(m, l);
            CHECK(lambda == m->acts.layers[l].lambda);
            CHECK(fabs(lambda - dtx_model_lambda(m, l)) < 1e-12);
            for (int64_t b = 0; b < PB_B; b++)
                for (int64_t h = 0; h < m->cfg.n_heads; h++)
                    for (int64_t t = 0; t < PB_T; t++) {
                        REQUIRE(!dtx_probe_attention_row(m, b, l, h, DTX_MAP_FIRST, t, a1));
                        REQUIRE(!dtx_probe_attention_row(m, b, l, h, DTX_MAP_SECOND, t, a2));
                        REQUIRE(!dtx_probe_attention_row(m, b, l, h, DTX_MAP_COMBINED, t, d));
                        double sum = 0;
                        for (int64_t s = 0; s <= t; s++) {
                            worst = fmax(worst, fabs(d[s] - (a1[s] - lambda * a2[s])));
                            sum += d[s];
                        }
                        worst_sum = fmax(worst_sum, fabs(sum - (1 - lambda)));
                    }
        }
        CHECKF(worst < 1e-14, "A1 - lambda A2: max diff %.3g", worst);
        CHECKF(worst_sum < 1e-12, "row sums vs 1 - lambda: max diff %.3g", worst_sum);
        dtx_model_free(m);
    }
    dtx_model *m = probe_model(DTX_ARCH_TRANSFORMER, 1, DTX_ATTN_PLAIN, 5);
    REQUIRE(m);
    double a1[PB_T], d[PB_T];
    REQUIRE(!dtx_probe_attention_row(m, 1, 1, 3, DTX_MAP_FIRST, PB_T - 1, a1));
    REQUIRE(!dtx_probe_attention_row(m, 1, 1, 3, DTX_MAP_COMBINED, PB_T - 1, d));
    CHECK(memcmp(a1, d, sizeof a1) == 0);
    CHECK(dtx_probe_lambda(m, 0) == 0);
    dtx_model_free(m);
}

/* Logits from q and k by hand (in double), with the head mapping written
 * out here; softmax of a logit row equals the attention row. */
static double logit_by_hand(const dtx_model *m, int64_t l, int64_t b, int64_t h, int which, int64_t t, int64_t s) {
    int64_t d = m->head_dim, T = m->acts.T, rep = m->cfg.n_heads / m->cfg.n_kv_heads;
    int diff = m->cfg.arch == DTX_ARCH_DIFF;
    int64_t qs = diff ? 2 * h + which : h, ks = diff ? 2 * (h / rep) + which : h / rep;
    const real *q = m->acts.layers[l].q + (b * T + t) * m->cfg.dim + qs * d;
    const real *k = m->acts.layers[l].k + (b * T + s) * m->kv_dim + ks * d;
    double acc = 0;
    for (int64_t i = 0; i < d; i++) acc += (double)q[i] * (double)k[i];
    return acc / sqrt((double)d);
}

static void check_logits(dtx_arch arch, int gqa) {
    dtx_model *m = probe_model(arch, gqa, DTX_ATTN_FLASH, 7);
    REQUIREF(m, "%s", dtx_last_error());
    int n_maps = arch == DTX_ARCH_DIFF ? 2 : 1;
    double z[PB_T], a[PB_T], worst = 0, worst_sm = 0;
    for (int64_t l = 0; l < m->cfg.n_layers; l++)
        for (int64_t b = 0; b < PB_B; b++)
            for (int64_t h = 0; h < m->cfg.n_heads; h++)
                for (int w = 0; w < n_maps; w++)
                    for (int64_t t = 0; t < PB_T; t += 3) {
                        dtx_attn_map map = w ? DTX_MAP_SECOND : DTX_MAP_FIRST;
                        REQUIRE(!dtx_probe_logit_row(m, b, l, h, map, t, z));
                        REQUIRE(!dtx_probe_attention_row(m, b, l, h, map, t, a));
                        double mx = -INFINITY, sum = 0;
                        for (int64_t s = 0; s <= t; s++) {
                            worst = fmax(worst, fabs(z[s] - logit_by_hand(m, l, b, h, w, t, s)));
                            mx = fmax(mx, z[s]);
                        }
                        for (int64_t s = 0; s <= t; s++) sum += exp(z[s] - mx);
                        for (int64_t s = 0; s <= t; s++) worst_sm = fmax(worst_sm, fabs(exp(z[s] - mx) / sum - a[s]));
                    }
    CHECKF(worst < 1e-12, "%s: logits vs q.k/sqrt(d): %.3g", cfg_name(arch, gqa), worst);
    CHECKF(worst_sm < 1e-14, "%s: softmax(logits) vs attention row: %.3g", cfg_name(arch, gqa), worst_sm);
    dtx_model_free(m);
}

TEST(probe_logits_recomputed_from_q_k) {
    for (int gqa = 0; gqa < 2; gqa++) {
        check_logits(DTX_ARCH_DIFF, gqa);
        check_logits(DTX_ARCH_TRANSFORMER, gqa);
    }
}

/* rms_norm(x) ⊙ w in double, row by row, against a stored float result. */
static double norm_err(const real *x, const real *w, const real *ref, int64_t N, int64_t D, double eps) {
    double worst = 0;
    for (int64_t r = 0; r < N; r++) {
        double ss = 0;
        for (int64_t i = 0; i < D; i++) ss += (double)x[r * D + i] * x[r * D + i];
        double rs = 1 / sqrt(ss / D + eps);
        for (int64_t i = 0; i < D; i++)
            worst = fmax(worst, fabs(x[r * D + i] * rs * w[i] - ref[r * D + i]) / fmax(fabs(ref[r * D + i]), 1e-2));
    }
    return worst;
}

/* The hidden state of layer l is what layer l+1's attention_norm (or the
 * final norm, after the last layer) reads. */
TEST(probe_hidden_is_block_output) {
    dtx_model *m = probe_model(DTX_ARCH_DIFF, 1, DTX_ATTN_FLASH, 3);
    REQUIREF(m, "%s", dtx_last_error());
    int64_t L = m->cfg.n_layers, D = m->cfg.dim, N = PB_B * PB_T;
    for (int64_t l = 0; l < L; l++) {
        const dtx_real *h = dtx_probe_hidden(m, l);
        REQUIRE(h != NULL);
        CHECK(h == m->acts.resid + (l + 1) * N * D);
        const real *w = m->params + (l + 1 < L ? m->layers[l + 1].attn_norm : m->final_norm);
        const real *ref = l + 1 < L ? m->acts.layers[l + 1].xn1 : m->acts.xnf;
        double e = norm_err(h, w, ref, N, D, m->cfg.norm_eps);
        CHECKF(e < 1e-5, "layer %lld: norm(hidden) vs the next norm's output: %.3g", (long long)l, e);
    }
    /* dtx_probe_add_hidden pools exactly those values. */
    dtx_abs_stats a, b;
    REQUIRE(!dtx_abs_stats_init(&a));
    REQUIRE(!dtx_abs_stats_init(&b));
    CHECK(dtx_probe_add_hidden(m, &a) == DTX_OK);
    for (int64_t l = 0; l < L; l++) dtx_abs_stats_add_f(&b, dtx_probe_hidden(m, l), N * D);
    CHECK(a.count == L * N * D && a.count == b.count);
    CHECK(memcmp(a.top, b.top, sizeof a.top) == 0);
    CHECK(dtx_abs_stats_median(&a) == dtx_abs_stats_median(&b));
    dtx_abs_stats_free(&a);
    dtx_abs_stats_free(&b);
    dtx_model_free(m);
}

static int msg_has(const char *s) { return strstr(dtx_last_error(), s) != NULL; }

TEST(probe_rejects_bad_arguments) {
    dtx_config c = probe_config(DTX_ARCH_DIFF, 1);
    dtx_model *m = NULL;
    REQUIRE(dtx_model_init(&m, &c, 1) == DTX_OK);
    double row[PB_MAXT];
    dtx_abs_stats s;
    REQUIRE(!dtx_abs_stats_init(&s));
    CHECK(dtx_probe_attention_row(m, 0, 0, 0, DTX_MAP_FIRST, 0, row) == DTX_ERR_ARG && msg_has("no forward"));
    CHECK(dtx_probe_add_logits(m, &s) == DTX_ERR_ARG);
    CHECK(dtx_probe_add_hidden(m, &s) == DTX_ERR_ARG);
    CHECK(dtx_probe_hidden(m, 0) == NULL);
    CHECK(isnan(dtx_probe_lambda(m, 0)));
    int64_t B = -1, T = -1;
    dtx_probe_shape(m, &B, &T);
    CHECK(B == 0 && T == 0);
    dtx_model_free(m);

    m = probe_model(DTX_ARCH_DIFF, 1, DTX_ATTN_FLASH, 2);
    REQUIRE(m);
    dtx_probe_shape(m, &B, &T);
    CHECK(B == PB_B && T == PB_T);
    CHECK(dtx_probe_attention_row(m, PB_B, 0, 0, DTX_MAP_FIRST, 0, row) == DTX_ERR_ARG && msg_has("batch row"));
    CHECK(dtx_probe_attention_row(m, -1, 0, 0, DTX_MAP_FIRST, 0, row) == DTX_ERR_ARG);
    CHECK(dtx_probe_attention_row(m, 0, 2, 0, DTX_MAP_FIRST, 0, row) == DTX_ERR_ARG && msg_has("layer"));
    CHECK(dtx_probe_attention_row(m, 0, 0, 4, DTX_MAP_FIRST, 0, row) == DTX_ERR_ARG && msg_has("head"));
    CHECK(dtx_probe_attention_row(m, 0, 0, 0, DTX_MAP_FIRST, PB_T, row) == DTX_ERR_ARG && msg_has("query row"));
    CHECK(dtx_probe_attention_row(m, 0, 0, 0, DTX_MAP_FIRST, -1, row) == DTX_ERR_ARG);
    CHECK(dtx_probe_attention_row(m, 0, 0, 0, (dtx_attn_map)7, 0, row) == DTX_ERR_ARG);
    CHECK(dtx_probe_logit_row(m, 0, 0, 0, DTX_MAP_COMBINED, 0, row) == DTX_ERR_ARG);
    CHECK(dtx_probe_hidden(m, 2) == NULL && dtx_probe_hidden(m, -1) == NULL);
    CHECK(isnan(dtx_probe_lambda(m, 2)));
    dtx_model_free(m);

    m = probe_model(DTX_ARCH_TRANSFORMER, 0, DTX_ATTN_FLASH, 2);
    REQUIRE(m);
    CHECK(dtx_probe_attention_row(m, 0, 0, 7, DTX_MAP_FIRST, 0, row) == DTX_OK);
    CHECK(dtx_probe_attention_row(m, 0, 0, 8, DTX_MAP_FIRST, 0, row) == DTX_ERR_ARG);
    CHECK(dtx_probe_attention_row(m, 0, 0, 0, DTX_MAP_SECOND, 0, row) == DTX_ERR_ARG && msg_has("A2"));
    CHECK(dtx_probe_logit_row(m, 0, 0, 0, DTX_MAP_SECOND, 0, row) == DTX_ERR_ARG);
    dtx_model_free(m);
    dtx_abs_stats_free(&s);
}

/* The pooled logits equal the pool of every probe logit row (double
 * recomputation; float dot products differ by rounding), and do not depend
 * on the thread count. */
static void check_pool(dtx_arch arch, int gqa) {
    dtx_model *m = probe_model(arch, gqa, DTX_ATTN_FLASH, 9);
    REQUIRE(m);
    dtx_abs_stats fast, slow, one;
    REQUIRE(!dtx_abs_stats_init(&fast) && !dtx_abs_stats_init(&slow) && !dtx_abs_stats_init(&one));
    REQUIRE(dtx_probe_add_logits(m, &fast) == DTX_OK);
    int n_maps = arch == DTX_ARCH_DIFF ? 2 : 1;
    double z[PB_T];
    for (int64_t l = 0; l < m->cfg.n_layers; l++)
        for (int64_t b = 0; b < PB_B; b++)
            for (int64_t h = 0; h < m->cfg.n_heads; h++)
                for (int w = 0; w < n_maps; w++)
                    for (int64_t t = 0; t < PB_T; t++) {
                        REQUIRE(!dtx_probe_logit_row(m, b, l, h, w ? DTX_MAP_SECOND : DTX_MAP_FIRST, t, z));
                        dtx_abs_stats_add(&slow, z, t + 1);
                    }
    int64_t want = m->cfg.n_layers * PB_B * m->cfg.n_heads * n_maps * PB_T * (PB_T + 1) / 2;
    CHECKF(fast.count == want && slow.count == want, "%s: counts %lld, %lld, want %lld", cfg_name(arch, gqa),
           (long long)fast.count, (long long)slow.count, (long long)want);
    double worst = 0;
    for (int i = 0; i < DTX_STATS_TOPK; i++) worst = fmax(worst, fabs(fast.top[i] - slow.top[i]) / slow.top[0]);
    CHECKF(worst < 1e-5, "%s: top-100 of the pool vs probe rows: %.3g", cfg_name(arch, gqa), worst);
    double mf = dtx_abs_stats_median(&fast), ms = dtx_abs_stats_median(&slow);
    CHECKF(fabs(mf - ms) <= ms * 0x1p-10, "%s: median %.9g vs %.9g", cfg_name(arch, gqa), mf, ms);
#ifdef _OPENMP
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    REQUIRE(dtx_probe_add_logits(m, &one) == DTX_OK);
    omp_set_num_threads(nt);
    CHECK(one.count == fast.count && memcmp(one.top, fast.top, sizeof one.top) == 0);
    CHECK(memcmp(one.hist, fast.hist, (size_t)DTX_STATS_HIST_SIZE * sizeof *one.hist) == 0);
#endif
    dtx_abs_stats_free(&fast);
    dtx_abs_stats_free(&slow);
    dtx_abs_stats_free(&one);
    dtx_model_free(m);
}

TEST(probe_logit_pool_matches_rows) {
    for (int gqa = 0; gqa < 2; gqa++) {
        check_pool(DTX_ARCH_DIFF, gqa);
        check_pool(DTX_ARCH_TRANSFORMER, gqa);
    }
}

/* ------------------------------------------------------------ statistics */

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* |v| sorted descending into sorted[]; values with zeros, negatives, ties
 * and a spread of magnitudes. */
static void random_values(double *v, double *sorted, int64_t n, uint64_t seed) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        double u = dtx_rng_uniform(&r);
        v[i] = u < 0.1 ? 0.0 : (u < 0.2 ? -3.5 : dtx_rng_normal(&r) * exp(4 * dtx_rng_normal(&r)));
        v[i] = (float)v[i]; /* exact in both variants */
        sorted[i] = fabs(v[i]);
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_desc);
}

static void check_against_sort(const dtx_abs_stats *s, const double *sorted, int64_t n, const char *what) {
    CHECKF(s->count == n, "%s: count %lld of %lld", what, (long long)s->count, (long long)n);
    int64_t k = n < DTX_STATS_TOPK ? n : DTX_STATS_TOPK;
    CHECKF(s->n_top == k, "%s: n_top %lld, want %lld", what, (long long)s->n_top, (long long)k);
    for (int64_t i = 0; i < k; i++) CHECKF(s->top[i] == sorted[i], "%s: top[%lld]", what, (long long)i);
    for (int64_t i = 1; i <= k; i++) CHECK(dtx_abs_stats_top(s, i) == sorted[i - 1]);
    CHECK(isnan(dtx_abs_stats_top(s, k + 1)) && isnan(dtx_abs_stats_top(s, 0)));
    /* ascending ranks (n-1)/2 and n/2 are descending ranks n/2 and (n-1)/2 */
    double want = 0.5 * (sorted[n / 2] + sorted[(n - 1) / 2]), got = dtx_abs_stats_median(s);
    CHECKF(fabs(got - want) <= want * 0x1p-10, "%s: median %.9g, sorted %.9g", what, got, want);
}

TEST(probe_stats_match_sort) {
    static const int64_t sizes[] = {1, 2, 37, 100, 101, 1000, 20001};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int64_t n = sizes[i];
        double *v = malloc((size_t)n * sizeof *v), *sorted = malloc((size_t)n * sizeof *v);
        float *vf = malloc((size_t)n * sizeof *vf);
        REQUIRE(v && sorted && vf);
        random_values(v, sorted, n, 100 + (uint64_t)n);
        for (int64_t j = 0; j < n; j++) vf[j] = (float)v[j];
        dtx_abs_stats a, f, m;
        REQUIRE(!dtx_abs_stats_init(&a) && !dtx_abs_stats_init(&f) && !dtx_abs_stats_init(&m));
        dtx_abs_stats_add(&a, v, n);
        dtx_abs_stats_add_f(&f, vf, n);
        /* merged halves are the same as one pass */
        dtx_abs_stats half;
        REQUIRE(!dtx_abs_stats_init(&half));
        dtx_abs_stats_add(&m, v, n / 2);
        dtx_abs_stats_add(&half, v + n / 2, n - n / 2);
        dtx_abs_stats_merge(&m, &half);
        char what[64];
        snprintf(what, sizeof what, "n=%lld double", (long long)n);
        check_against_sort(&a, sorted, n, what);
        snprintf(what, sizeof what, "n=%lld float", (long long)n);
        check_against_sort(&f, sorted, n, what);
        snprintf(what, sizeof what, "n=%lld merged", (long long)n);
        check_against_sort(&m, sorted, n, what);
        CHECK(memcmp(a.hist, m.hist, (size_t)DTX_STATS_HIST_SIZE * sizeof *a.hist) == 0);
        dtx_abs_stats_free(&a);
        dtx_abs_stats_free(&f);
        dtx_abs_stats_free(&m);
        dtx_abs_stats_free(&half);
        free(v);
        free(sorted);
        free(vf);
    }
}

/* The median's precision is the bucket's: values spread over one bucket's
 * relative width 2^-10 give a median within 2^-11 of the truth. */
TEST(probe_stats_median_precision) {
    dtx_abs_stats s;
    REQUIRE(!dtx_abs_stats_init(&s));
    double worst = 0;
    for (int k = 0; k < 400; k++) {
        double x = 0.37 * pow(1.0047, k); /* spans many buckets, not on edges */
        s.count = 0;
        s.n_top = 0;
        memset(s.hist, 0, (size_t)DTX_STATS_HIST_SIZE * sizeof *s.hist);
        double v[3] = {x * 0.5, -x, x * 2};
        dtx_abs_stats_add(&s, v, 3);
        worst = fmax(worst, fabs(dtx_abs_stats_median(&s) - x) / x);
    }
    CHECKF(worst <= 0x1p-11 * (1 + 1e-6), "median relative error %.3g > 2^-11", worst);
    CHECKF(worst > 0x1p-14, "median relative error %.3g: suspiciously exact for a histogram", worst);
    dtx_abs_stats_free(&s);
}

TEST(probe_stats_edge_cases) {
    dtx_abs_stats s;
    REQUIRE(!dtx_abs_stats_init(&s));
    CHECK(s.count == 0 && isnan(dtx_abs_stats_median(&s)) && isnan(dtx_abs_stats_top(&s, 1)));
    double zeros[5] = {0, -0.0, 0, 0, 0};
    dtx_abs_stats_add(&s, zeros, 5);
    CHECK(s.count == 5 && dtx_abs_stats_median(&s) == 0 && s.top[0] == 0 && s.n_top == 5);
    double odd[4] = {NAN, INFINITY, -INFINITY, 1e300};
    dtx_abs_stats_add(&s, odd, 4);
    CHECK(s.n_nan == 1 && s.count == 8);
    CHECK(s.top[0] == INFINITY && s.top[1] == INFINITY && s.top[2] == 1e300 && s.top[3] == 0);
    CHECK(dtx_abs_stats_median(&s) == 0); /* ranks 3 and 4 of 5 zeros, 3 huge */
    float f[3] = {-2.0f, NAN, 0.5f};
    dtx_abs_stats_add_f(&s, f, 3);
    CHECK(s.n_nan == 2 && s.count == 10);
    /* ascending: 0 x5, 0.5, 2, 1e300, inf, inf: ranks 4 and 5 are 0 and 0.5 */
    double med = dtx_abs_stats_median(&s);
    CHECKF(fabs(med - 0.25) <= 0.25 * 0x1p-10, "median %.9g", med);
    dtx_abs_stats_free(&s);
    CHECK(s.hist == NULL);
    dtx_abs_stats_free(&s); /* twice is harmless */
}

/* The public whole map (dtx_model_attention_map): row t is the probe's row t
 * over keys 0..t, zeros above the diagonal, for every arch and map; its
 * refusals name what is wrong. */
TEST(probe_public_attention_map_is_the_rows) {
    static const dtx_arch archs[3] = {DTX_ARCH_DIFF, DTX_ARCH_TRANSFORMER, DTX_ARCH_DIFF2};
    for (int a = 0; a < 3; a++) {
        dtx_config c = probe_config(DTX_ARCH_DIFF, 1);
        if (archs[a] == DTX_ARCH_TRANSFORMER) c = dtx_config_baseline(&c);
        if (archs[a] == DTX_ARCH_DIFF2) c.arch = DTX_ARCH_DIFF2;
        dtx_model *m = NULL;
        REQUIREF(dtx_model_init(&m, &c, 9) == DTX_OK, "%s", dtx_last_error());
        double *map = malloc(sizeof(double) * PB_T * PB_T), row[PB_T];
        CHECK(dtx_model_attention_map(m, 0, 0, 0, DTX_MAP_FIRST, map) == DTX_ERR_ARG); /* no forward yet */
        int32_t tok[PB_B * PB_T];
        for (int i = 0; i < PB_B * PB_T; i++) tok[i] = (int32_t)((i * 11 + 3) % PB_V);
        REQUIRE(dtx_model_forward(m, tok, NULL, PB_B, PB_T, NULL, NULL) == DTX_OK);
        int bad = 0;
        for (int w = 0; w < 3; w++) {
            dtx_attn_map which = w == 0 ? DTX_MAP_FIRST : w == 1 ? DTX_MAP_COMBINED : DTX_MAP_SECOND;
            if (which == DTX_MAP_SECOND && archs[a] == DTX_ARCH_TRANSFORMER) {
                CHECK(dtx_model_attention_map(m, 1, 1, 0, which, map) == DTX_ERR_ARG);
                continue;
            }
            REQUIREF(dtx_model_attention_map(m, 1, 1, c.n_heads - 1, which, map) == DTX_OK, "%s", dtx_last_error());
            for (int64_t t = 0; t < PB_T; t++) {
                REQUIRE(dtx_probe_attention_row(m, 1, 1, c.n_heads - 1, which, t, row) == DTX_OK);
                for (int64_t s = 0; s < PB_T; s++) bad += map[t * PB_T + s] != (s <= t ? row[s] : 0.0);
            }
        }
        CHECKF(bad == 0, "%s: %d entries differ from the probe's rows", dtx_arch_name(archs[a]), bad);
        CHECK(dtx_model_attention_map(m, PB_B, 0, 0, DTX_MAP_FIRST, map) == DTX_ERR_ARG &&
              strstr(dtx_last_error(), "batch row"));
        CHECK(dtx_model_attention_map(m, 0, 2, 0, DTX_MAP_FIRST, map) == DTX_ERR_ARG);
        CHECK(dtx_model_attention_map(m, 0, 0, c.n_heads, DTX_MAP_FIRST, map) == DTX_ERR_ARG &&
              strstr(dtx_last_error(), "head"));
        CHECK(dtx_model_attention_map(m, 0, 0, 0, (dtx_attn_map)7, map) == DTX_ERR_ARG);
        free(map);
        dtx_model_free(m);
    }
}
