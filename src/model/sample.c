/* Autoregressive sampling without a KV cache: each new token re-runs the
 * forward over the whole sequence (the cached decoder comes with issue 4). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

/* Picks a token from one row of logits: argmax for temperature <= 0, else a
 * draw from softmax(logits / temperature). */
static int32_t pick(const real *logits, int64_t V, double temperature, dtx_rng *rng) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return (int32_t)best;
    double mx = logits[best], sum = 0;
    for (int64_t i = 0; i < V; i++) sum += exp(((double)logits[i] - mx) / temperature);
    double u = dtx_rng_uniform(rng) * sum, acc = 0;
    for (int64_t i = 0; i < V; i++) {
        acc += exp(((double)logits[i] - mx) / temperature);
        if (acc > u) return (int32_t)i;
    }
    return (int32_t)best;
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
    int64_t V = c->vocab_size;
    real *logits = dtx_alloc((size_t)((n_prompt + n_new) * V), sizeof(real));
    if (!logits) return DTX_ERR_NOMEM;
    dtx_rng rng;
    dtx_rng_seed(&rng, seed);
    dtx_status st = DTX_OK;
    for (int64_t n = n_prompt; n < n_prompt + n_new; n++) {
        if ((st = dtx_model_forward(m, out, NULL, 1, n, logits, NULL))) break;
        out[n] = pick(logits + (size_t)((n - 1) * V), V, temperature, &rng);
    }
    free(logits);
    return st;
}
