/* The parameter table: every tensor's name, shape and offset into one flat
 * buffer, in the order of interop.md; allocation, initialisation, accessors. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

typedef struct {
    dtx_model *m;
    int cap;
    size_t next;
} table_builder;

static size_t add_tensor(table_builder *tb, int64_t rows, int64_t cols, int decay, int is_emb, const char *fmt,
                         long long layer) {
    dtx_model *m = tb->m;
    assert(m->n_tensors < tb->cap);
    dtx_tensor_info *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->numel = (size_t)rows * (size_t)(cols ? cols : 1);
    t->offset = tb->next;
    t->decay = decay;
    t->is_embedding = is_emb;
    tb->next += t->numel;
    return t->offset;
}

static void build_table(dtx_model *m, table_builder *tb) {
    const dtx_config *c = &m->cfg;
    int64_t D = c->dim, KV = m->kv_dim, F = c->ffn_dim, d = m->head_dim, QD = dtx_config_q_dim(c);
    int64_t OD = dtx_config_attn_dim(c);
    int diff = c->arch == DTX_ARCH_DIFF;
    m->tok_emb = add_tensor(tb, c->vocab_size, D, 1, 1, "tok_embeddings.weight", 0);
    for (int64_t l = 0; l < c->n_layers; l++) {
        dtx_layer_offsets *o = &m->layers[l];
        long long L = (long long)l;
        o->attn_norm = add_tensor(tb, D, 0, 0, 0, "layers.%lld.attention_norm.weight", L);
        o->wq = add_tensor(tb, QD, D, 1, 0, "layers.%lld.attention.q_proj.weight", L);
        o->wk = add_tensor(tb, KV, D, 1, 0, "layers.%lld.attention.k_proj.weight", L);
        o->wv = add_tensor(tb, KV, D, 1, 0, "layers.%lld.attention.v_proj.weight", L);
        o->wo = add_tensor(tb, D, OD, 1, 0, "layers.%lld.attention.out_proj.weight", L);
        if (dtx_config_has_lambda_proj(c)) /* V2: λ logits of the h heads from the attention input */
            o->wl = add_tensor(tb, c->n_heads, D, 1, 0, "layers.%lld.attention.lambda_proj.weight", L);
        if (diff) {
            o->lq1 = add_tensor(tb, d, 0, 0, 0, "layers.%lld.attention.lambda_q1", L);
            o->lk1 = add_tensor(tb, d, 0, 0, 0, "layers.%lld.attention.lambda_k1", L);
            o->lq2 = add_tensor(tb, d, 0, 0, 0, "layers.%lld.attention.lambda_q2", L);
            o->lk2 = add_tensor(tb, d, 0, 0, 0, "layers.%lld.attention.lambda_k2", L);
        }
        if (dtx_config_has_subln(c)) /* one weight of the head's width, shared by the heads */
            o->subln = add_tensor(tb, diff ? 2 * d : d, 0, 0, 0, "layers.%lld.attention.subln.weight", L);
        o->ffn_norm = add_tensor(tb, D, 0, 0, 0, "layers.%lld.ffn_norm.weight", L);
        o->w1 = add_tensor(tb, F, D, 1, 0, "layers.%lld.feed_forward.w1.weight", L);
        o->w3 = add_tensor(tb, F, D, 1, 0, "layers.%lld.feed_forward.w3.weight", L);
        o->w2 = add_tensor(tb, D, F, 1, 0, "layers.%lld.feed_forward.w2.weight", L);
    }
    m->final_norm = add_tensor(tb, D, 0, 0, 0, "norm.weight", 0);
    m->out_w = c->tie_embeddings ? m->tok_emb : add_tensor(tb, c->vocab_size, D, 1, 1, "output.weight", 0);
    m->n_params = tb->next;
}

dtx_status dtx_model_alloc(dtx_model **out, const dtx_config *c) {
    *out = NULL;
    dtx_status st = dtx_config_validate(c);
    if (st) return st;
    dtx_model *m = calloc(1, sizeof *m);
    if (!m) return dtx_fail(DTX_ERR_NOMEM, "out of memory allocating a model");
    m->cfg = *c;
    m->attn_impl = DTX_ATTN_FLASH;
    m->head_dim = dtx_config_head_dim(c);
    m->kv_dim = (c->arch == DTX_ARCH_DIFF ? 2 : 1) * c->n_kv_heads * m->head_dim;
    int cap = (int)(2 + 14 * c->n_layers + 2);
    m->tensors = calloc((size_t)cap, sizeof *m->tensors);
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->tensors || !m->layers) goto nomem;
    table_builder tb = {m, cap, 0};
    build_table(m, &tb);
    m->params = dtx_alloc_lazy_zero(m->n_params, sizeof(real));
    int64_t half = m->head_dim / 2;
    m->rope_cos = dtx_alloc((size_t)(c->max_seq_len * half), sizeof(real));
    m->rope_sin = dtx_alloc((size_t)(c->max_seq_len * half), sizeof(real));
    if (!m->params || !m->rope_cos || !m->rope_sin) goto nomem;
    double *freq = malloc(sizeof(double) * (size_t)half);
    if (!freq) goto nomem;
    dtx_config_rope_freqs(c, m->head_dim, freq);
    dtx_rope_table(m->rope_cos, m->rope_sin, c->max_seq_len, m->head_dim, freq);
    free(freq);
    *out = m;
    return DTX_OK;
nomem:;
    size_t n = m->n_params;
    dtx_model_free(m);
    return dtx_fail(DTX_ERR_NOMEM, "out of memory allocating a model of %zu parameters", n);
}

/* Initialisation (README "Initialisation"). DTX_INIT_TORCH: linear weights
 * as PyTorch's nn.Linear default U(-1/sqrt(in), 1/sqrt(in)); embeddings and
 * an untied output N(0, dim^-1/2) (YOCO, spec §3.1). DTX_INIT_GPT2 (GPT-2 /
 * nanoGPT): every linear weight, embedding and untied output N(0, 0.02²),
 * the projections into the residual stream (out_proj, w2) N(0, (0.02 /
 * sqrt(2L))²). Both: λ vectors N(0, 0.1²) (official code), every norm
 * weight 1. One RNG stream, tensors in table order. */
dtx_status dtx_model_init_scheme(dtx_model **out, const dtx_config *c, uint64_t seed, dtx_init_scheme scheme) {
    if (scheme != DTX_INIT_TORCH && scheme != DTX_INIT_GPT2)
        return dtx_fail(DTX_ERR_ARG, "unknown initialisation scheme %d", (int)scheme);
    dtx_status st = dtx_model_alloc(out, c);
    /* every parameter is written next: in 2 MiB pages (a decode step streams them: weights_memory.c) */
    if (!st) dtx_advise_huge((*out)->params, (*out)->n_params * sizeof(real));
    if (st) return st;
    dtx_model *m = *out;
    dtx_rng rng;
    dtx_rng_seed(&rng, seed);
    double gpt2_resid = 0.02 / sqrt(2.0 * (double)c->n_layers);
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        real *p = m->params + t->offset;
        int is_lambda = strstr(t->name, ".lambda_") != NULL;
        int resid = strstr(t->name, ".out_proj.") != NULL || strstr(t->name, ".w2.") != NULL;
        if (is_lambda) {
            for (size_t j = 0; j < t->numel; j++) p[j] = (real)(0.1 * dtx_rng_normal(&rng));
        } else if (scheme == DTX_INIT_GPT2 && (t->ndim == 2 || t->is_embedding)) {
            double std = resid ? gpt2_resid : 0.02;
            for (size_t j = 0; j < t->numel; j++) p[j] = (real)(std * dtx_rng_normal(&rng));
        } else if (t->is_embedding) {
            double std = 1.0 / sqrt((double)c->dim);
            for (size_t j = 0; j < t->numel; j++) p[j] = (real)(std * dtx_rng_normal(&rng));
        } else if (t->ndim == 2) {
            double bound = 1.0 / sqrt((double)t->shape[1]);
            for (size_t j = 0; j < t->numel; j++) p[j] = (real)(bound * (2.0 * dtx_rng_uniform(&rng) - 1.0));
        } else {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1;
        }
    }
    return DTX_OK;
}

dtx_status dtx_model_init(dtx_model **out, const dtx_config *c, uint64_t seed) {
    return dtx_model_init_scheme(out, c, seed, DTX_INIT_TORCH);
}

const char *dtx_init_scheme_name(dtx_init_scheme s) {
    return s == DTX_INIT_GPT2 ? "gpt2" : s == DTX_INIT_TORCH ? "torch" : "?";
}

void dtx_model_free(dtx_model *m) {
    if (!m) return;
    dtx_model_free_acts(m);
    dtx_model_free_quant(m);
    for (int i = 0; i < m->n_extra_meta; i++) {
        free(m->extra_meta_keys[i]);
        free(m->extra_meta_values[i]);
    }
    free(m->extra_meta_keys);
    free(m->extra_meta_values);
    free(m->tensors);
    free(m->layers);
    dtx_free_lazy_zero(m->params, m->n_params, sizeof(real));
    dtx_free_work(m->grads, m->grads_mapped);
    free(m->rope_cos);
    free(m->rope_sin);
    free(m);
}

dtx_status dtx_model_ensure_grads(dtx_model *m) {
    if (m->grads) return DTX_OK;
    dtx_status st = dtx_model_materialize(m); /* training reads and writes the fp32 weights */
    if (st) return st;
    /* zeroed, and in 2 MiB pages: written whole every step */
    if (m->n_params > SIZE_MAX / sizeof(real)) return DTX_ERR_NOMEM;
    m->grads = dtx_alloc_work(m->n_params * sizeof(real), &m->grads_mapped);
    return m->grads ? DTX_OK : DTX_ERR_NOMEM;
}

void dtx_model_zero_grad(dtx_model *m) {
    if (m->grads) memset(m->grads, 0, m->n_params * sizeof(real));
}

const dtx_config *dtx_model_config(const dtx_model *m) { return &m->cfg; }
size_t dtx_model_num_params(const dtx_model *m) { return m->n_params; }

size_t dtx_model_num_params_nonembed(const dtx_model *m) {
    size_t n = m->n_params;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].is_embedding) n -= m->tensors[i].numel;
    return n;
}

int dtx_model_num_tensors(const dtx_model *m) { return m->n_tensors; }

const dtx_tensor_info *dtx_model_tensor(const dtx_model *m, int i) {
    assert(i >= 0 && i < m->n_tensors);
    return &m->tensors[i];
}

const dtx_tensor_info *dtx_model_find(const dtx_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

dtx_real *dtx_model_params(dtx_model *m) { return dtx_model_materialize(m) ? NULL : m->params; }

dtx_real *dtx_model_grads(dtx_model *m) {
    if (dtx_model_ensure_grads(m)) return NULL;
    return m->grads;
}

dtx_status dtx_model_set_precision(dtx_model *m, dtx_precision p) {
    if (p != DTX_PREC_FP32 && p != DTX_PREC_BF16)
        return dtx_fail(DTX_ERR_ARG, "unknown matmul precision %d (expected fp32 = %d or bf16 = %d)", (int)p,
                        (int)DTX_PREC_FP32, (int)DTX_PREC_BF16);
    m->precision = p;
    return DTX_OK;
}

dtx_precision dtx_model_precision(const dtx_model *m) { return m->precision; }

void dtx_model_set_attention(dtx_model *m, dtx_attn_impl impl) { m->attn_impl = impl; }

size_t dtx_model_activation_bytes(const dtx_model *m) { return m->acts.bytes; }

const char *dtx_precision_name(dtx_precision p) {
    switch (p) {
    case DTX_PREC_FP32: return "fp32";
    case DTX_PREC_BF16: return "bf16";
    }
    return "unknown";
}

double dtx_model_lambda_parts(const dtx_model *m, int64_t layer, double *e1, double *e2) {
    const dtx_layer_offsets *o = &m->layers[layer];
    const real *p = m->params;
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < m->head_dim; i++) {
        s1 += (double)p[o->lq1 + i] * p[o->lk1 + i];
        s2 += (double)p[o->lq2 + i] * p[o->lk2 + i];
    }
    *e1 = exp(s1);
    *e2 = exp(s2);
    return *e1 - *e2 + dtx_config_lambda_init(&m->cfg, layer);
}

double dtx_model_lambda(const dtx_model *m, int64_t layer) {
    if (m->cfg.arch != DTX_ARCH_DIFF || layer < 0 || layer >= m->cfg.n_layers) return 0;
    double e1, e2;
    return dtx_model_lambda_parts(m, layer, &e1, &e2);
}
