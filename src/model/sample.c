/* Sampling: the token sampler (temperature, top-k, top-p) and dtx_sample,
 * autoregressive continuation on the KV cache (generate.c).
 *
 * The sampler, for temperature T > 0: e_i = exp((logit_i − max) / T) in
 * double, Z = Σ e_i. Without truncation, u = U[0,1)·Z and the draw walks the
 * ids in order until the running sum exceeds u. With truncation the
 * candidates are ordered by probability (ties by id): top-k keeps the first k,
 * top-p then the shortest prefix whose mass reaches top_p of what is left;
 * the draw walks that prefix. Only as many candidates as needed are ordered:
 * top-k selects k with a heap; top-p alone selects 64, 256, ... until their
 * mass reaches top_p (a full sort only for a near-uniform distribution). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

dtx_sampler dtx_sampler_default(void) {
    dtx_sampler s = {.temperature = 0.8, .top_k = 0, .top_p = 1.0, .seed = 1};
    return s;
}

dtx_status dtx_sampler_validate(const dtx_sampler *s) {
    if (isnan(s->temperature)) return dtx_fail(DTX_ERR_ARG, "sampler temperature is NaN");
    if (s->top_k < 0) return dtx_fail(DTX_ERR_ARG, "sampler top_k %lld is negative", (long long)s->top_k);
    if (!(s->top_p > 0 && s->top_p <= 1))
        return dtx_fail(DTX_ERR_ARG, "sampler top_p %g is outside (0, 1]", s->top_p);
    return DTX_OK;
}

typedef struct {
    double p;
    int32_t id;
} cand;

/* a ranks before b: more probable, or as probable with a lower id. */
static inline int before(cand a, cand b) { return a.p > b.p || (a.p == b.p && a.id < b.id); }

/* Min-heap on rank (root = the candidate ranked last). */
static void sift_down(cand *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(h[w], h[l])) w = l;
        if (r < n && before(h[w], h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The first m (≤ V) candidates in rank order into out [m]: a heap of the m
 * best, then heap-sorted. */
static void select_top(cand *out, const double *e, int64_t V, int64_t m) {
    for (int64_t i = 0; i < m; i++) out[i] = (cand){e[i], (int32_t)i};
    for (int64_t i = m / 2 - 1; i >= 0; i--) sift_down(out, m, i);
    for (int64_t i = m; i < V; i++) {
        cand c = {e[i], (int32_t)i};
        if (before(c, out[0])) {
            out[0] = c;
            sift_down(out, m, 0);
        }
    }
    for (int64_t n = m - 1; n > 0; n--) { /* the last-ranked goes to the end */
        cand t = out[0];
        out[0] = out[n];
        out[n] = t;
        sift_down(out, n, 0);
    }
}

static int32_t argmax(const real *logits, int64_t V) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

dtx_status dtx_sample_logits(const dtx_sampler *s, dtx_rng *rng, const dtx_real *logits, int64_t V,
                             int32_t *token) {
    if (V < 1) return dtx_fail(DTX_ERR_ARG, "cannot sample from %lld logits", (long long)V);
    int32_t best = argmax(logits, V);
    double T = s->temperature;
    if (!(T > 0)) {
        *token = best;
        return DTX_OK;
    }
    double mx = logits[best];
    int64_t k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    if (k == V && !(s->top_p < 1)) {
        /* No truncation: the ids in order. */
        double sum = 0;
        for (int64_t i = 0; i < V; i++) sum += exp(((double)logits[i] - mx) / T);
        double u = dtx_rng_uniform(rng) * sum, acc = 0;
        for (int64_t i = 0; i < V; i++) {
            acc += exp(((double)logits[i] - mx) / T);
            if (acc > u) {
                *token = (int32_t)i;
                return DTX_OK;
            }
        }
        *token = best;
        return DTX_OK;
    }
    double *e = malloc((size_t)V * sizeof *e);
    cand *c = malloc((size_t)k * sizeof *c);
    if (!e || !c) {
        free(e);
        free(c);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for top-k/top-p sampling over %lld tokens", (long long)V);
    }
    double z = 0;
    for (int64_t i = 0; i < V; i++) z += e[i] = exp(((double)logits[i] - mx) / T);
    /* m candidates in rank order; mass = their total (the top-k mass when m = k). */
    int64_t m = k;
    if (k == V) m = V < 64 ? V : 64; /* top-p alone: grow until the nucleus fits */
    int64_t keep;
    double mass;
    for (;;) {
        select_top(c, e, V, m);
        mass = 0;
        for (int64_t i = 0; i < m; i++) mass += c[i].p;
        double total = k < V ? mass : z; /* what top_p is a fraction of */
        keep = m;
        if (s->top_p < 1) {
            double target = s->top_p * total, acc = 0;
            for (int64_t i = 0; i < m; i++) {
                acc += c[i].p;
                if (acc >= target) {
                    keep = i + 1;
                    mass = acc;
                    break;
                }
            }
            if (keep == m && acc < target && m < k) { /* the nucleus is longer: select more */
                m = m * 4 < k ? m * 4 : k;
                continue;
            }
            if (keep == m) mass = acc;
        }
        break;
    }
    double u = dtx_rng_uniform(rng) * mass, acc = 0;
    int32_t id = c[keep - 1].id;
    for (int64_t i = 0; i < keep; i++) {
        acc += c[i].p;
        if (acc > u) {
            id = c[i].id;
            break;
        }
    }
    free(e);
    free(c);
    *token = id;
    return DTX_OK;
}

dtx_status dtx_sample(dtx_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n_new, double temperature,
                      uint64_t seed, int32_t *out) {
    const dtx_config *c = &m->cfg;
    if (n_prompt < 1) return dtx_fail(DTX_ERR_ARG, "the prompt needs at least one token");
    if (n_new < 0) return dtx_fail(DTX_ERR_ARG, "number of new tokens %lld is negative", (long long)n_new);
    if (n_prompt + n_new > c->max_seq_len)
        return dtx_fail(DTX_ERR_ARG, "prompt (%lld) + new tokens (%lld) exceed max_seq_len %lld", (long long)n_prompt,
                        (long long)n_new, (long long)c->max_seq_len);
    memcpy(out, prompt, (size_t)n_prompt * sizeof(int32_t));
    if (n_new == 0) return DTX_OK;
    dtx_sampler s = {.temperature = temperature, .top_k = 0, .top_p = 1, .seed = seed};
    dtx_rng rng;
    dtx_rng_seed(&rng, seed);
    dtx_kvcache *cache = NULL;
    real *logits = dtx_alloc((size_t)c->vocab_size, sizeof(real));
    if (!logits) return DTX_ERR_NOMEM;
    /* The last new token is never fed back, so n_prompt + n_new − 1 positions. */
    dtx_status st = dtx_kvcache_init(&cache, m, n_prompt + n_new - 1);
    if (!st) st = dtx_model_prefill(m, cache, prompt, n_prompt, logits);
    for (int64_t n = n_prompt; !st && n < n_prompt + n_new; n++) {
        if (n > n_prompt) st = dtx_model_decode(m, cache, out[n - 1], logits);
        if (!st) st = dtx_sample_logits(&s, &rng, logits, c->vocab_size, &out[n]);
    }
    dtx_kvcache_free(cache);
    free(logits);
    return st;
}
