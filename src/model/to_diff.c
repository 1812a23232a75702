/* A trained Transformer as a DIFF model that computes the same function
 * (difftx.h dtx_model_to_diff, docs/huggingface.md "A Llama into DIFF").
 *
 * Each of the H heads of width d becomes a DIFF head of q/k width d (so the
 * model keeps its head count: head_dim d, twice the attention weights of
 * the parameter-matched DIFF): q1 = the head's query, q2 = 0 (its map is the
 * uniform causal average); k1 = the KV head's key, k2 = a copy; the value
 * [v1 ; v2] = [the KV head's value ; a copy]; out_proj's columns of v1 are
 * the Transformer's, those of v2 zero. The model is a standard DIFF model
 * (per-head norm of weight one, the λ_init schedule) at transformer_mix 1,
 * where λ_init counts for nothing and each head outputs O itself; the four
 * λ vectors are two random pairs with λq1 = λq2, λk1 = λk2, so that
 * λ = exp(λq1·λk1) − exp(λq2·λk2) + 0 is exactly 0: the head outputs
 * [A1·v1 ; A1·v2], and out_proj reads A1·v1 alone — the Transformer's head.
 * Training with --diff-warmup N lowers transformer_mix to 0 over N steps,
 * phasing in the norm and the λ_init schedule (difftx.h dtx_config).
 *
 * Why not every new weight zero (the simplest silence): zero pairs are
 * saddles gradient descent never leaves. With q2 = 0 and k2 = 0 neither
 * gets a gradient; with λ's vectors zero, λ gets none; with v2 = 0 and its
 * out_proj columns 0, neither moves. Here λ's gradient is A2·v − A1·v's
 * projection (nonzero), q2's is λ times k2's (nonzero once λ moves), and
 * v2's columns of out_proj see A1·v2 ≠ 0. */
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "model/model.h"

dtx_status dtx_model_to_diff(dtx_model **out, const dtx_model *t, uint64_t seed) {
    *out = NULL;
    dtx_status mst = dtx_model_materialize((dtx_model *)(uintptr_t)t); /* reads params */
    if (mst) return mst;
    const dtx_config *tc = dtx_model_config(t);
    if (tc->arch != DTX_ARCH_TRANSFORMER)
        return dtx_fail(DTX_ERR_CONFIG, "the model is arch %s: only a Transformer is turned into a DIFF model",
                        dtx_arch_name(tc->arch));
    if (dtx_config_has_subln(tc))
        return dtx_fail(DTX_ERR_CONFIG, "a Transformer with subln rms normalises each d-wide head; a DIFF head "
                        "normalises 2d: no DIFF model computes the same");
    if (dtx_model_wquant(t) != DTX_WQ_NONE)
        return dtx_fail(DTX_ERR_CONFIG, "a quantised model (%s): convert the model it came from",
                        dtx_wquant_name(dtx_model_wquant(t)));
    const int64_t d = t->head_dim, H = tc->n_heads, G = tc->n_kv_heads, D = tc->dim;
    dtx_config c = *tc;
    c.arch = DTX_ARCH_DIFF;
    c.head_dim = d;
    c.subln = DTX_SUBLN_DEFAULT, c.lambda_init_fixed = 0, c.lambda_init_value = 0; /* DIFF's own */
    c.transformer_mix = 1;
    dtx_status st = dtx_config_validate(&c);
    if (st) return st;
    dtx_model *m = NULL;
    if ((st = dtx_model_alloc(&m, &c))) return st;
    const real *tp = t->params;
    real *p = m->params;
    /* everything outside the attention: the same tensors */
    static const char *const same[] = {"attention_norm.weight", "ffn_norm.weight", "feed_forward.w1.weight",
                                       "feed_forward.w3.weight", "feed_forward.w2.weight"};
    char a[96];
    const char *whole[] = {"tok_embeddings.weight", "norm.weight", "output.weight"};
    for (int i = 0; i < 3; i++) {
        const dtx_tensor_info *x = dtx_model_find(t, whole[i]), *y = dtx_model_find(m, whole[i]);
        if (x && y) memcpy(p + y->offset, tp + x->offset, sizeof(real) * x->numel);
    }
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    for (int64_t l = 0; l < c.n_layers; l++) {
        for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
            snprintf(a, sizeof a, "layers.%lld.%s", (long long)l, same[i]);
            memcpy(p + dtx_model_find(m, a)->offset, tp + dtx_model_find(t, a)->offset,
                   sizeof(real) * dtx_model_find(t, a)->numel);
        }
        const dtx_layer_offsets *to = &t->layers[l], *mo = &m->layers[l];
        for (int64_t h = 0; h < H; h++) { /* q: [q1 ; q2 = 0] per head */
            memcpy(p + mo->wq + (2 * h) * d * D, tp + to->wq + h * d * D, sizeof(real) * (size_t)(d * D));
            memset(p + mo->wq + (2 * h + 1) * d * D, 0, sizeof(real) * (size_t)(d * D));
        }
        for (int64_t g = 0; g < G; g++) /* k: [k1 ; k1], v: [v1 ; v1] per KV head */
            for (int s = 0; s < 2; s++) {
                memcpy(p + mo->wk + (2 * g + s) * d * D, tp + to->wk + g * d * D, sizeof(real) * (size_t)(d * D));
                memcpy(p + mo->wv + (2 * g + s) * d * D, tp + to->wv + g * d * D, sizeof(real) * (size_t)(d * D));
            }
        const int64_t K = 2 * H * d, TK = H * d; /* out_proj: the Transformer's columns for v1, zero for v2 */
        for (int64_t row = 0; row < D; row++)
            for (int64_t h = 0; h < H; h++) {
                memcpy(p + mo->wo + row * K + 2 * h * d, tp + to->wo + row * TK + h * d, sizeof(real) * (size_t)d);
                memset(p + mo->wo + row * K + 2 * h * d + d, 0, sizeof(real) * (size_t)d);
            }
        for (int64_t i = 0; i < d; i++) { /* λ = exp(u·w) − exp(u·w) + 0 = 0, with a gradient */
            real u = (real)(0.1 * dtx_rng_normal(&r)), w = (real)(0.1 * dtx_rng_normal(&r));
            p[mo->lq1 + i] = p[mo->lq2 + i] = u;
            p[mo->lk1 + i] = p[mo->lk2 + i] = w;
        }
        for (int64_t i = 0; i < 2 * d; i++) p[mo->subln + i] = 1; /* the norm's weight, as a fresh DIFF's */
    }
    *out = m;
    return DTX_OK;
}

dtx_status dtx_model_set_transformer_mix(dtx_model *m, double tau) {
    if (m->cfg.arch != DTX_ARCH_DIFF || !(tau >= 0 && tau <= 1))
        return dtx_fail(DTX_ERR_ARG, "transformer_mix %g: a DIFF model's is in [0, 1] (this is a %s)", tau,
                        dtx_arch_name(m->cfg.arch));
    m->cfg.transformer_mix = tau;
    return DTX_OK;
}
