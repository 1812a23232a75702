/* One layer of the model, for every way it runs: the one description of the
 * block (llm.c's gpt2_forward reads as this list of calls), shared by the
 * training forward over a [B, T] batch (forward.c), a prefill and a
 * one-token decode step into a KV cache (generate.c). Only where the
 * tensors live and how the attention reads its keys differ, and a
 * dtx_block_run says which:
 *
 *   xn1 = attention_norm(x)
 *   q, k, v (, DIFF2's λ logits) = xn1 · w{q,k,v,l}ᵀ    RoPE(q, k) at pos0 ..
 *   attention over the block's own k, v (a batch, a prefill from position 0)
 *     or over the cache's rows 0 .. pos0 + i for each row i (decode steps)
 *     or, rows of several sequences (a batched decode step), each row over
 *     its own sequence's cache, at its own position
 *   DIFF2: the 2h heads combined in pairs with λ
 *   x_mid = x + attn_y · woᵀ
 *   xn2 = ffn_norm(x_mid);  h1, h3 = xn2 · w{1,3}ᵀ;  g = silu(h1) ⊙ h3
 *   out = x_mid + g · w2ᵀ      (a long prompt: in blocks of rows, dtx_block_run.ffn_rows)
 *
 * Decoding points x_mid and out at x (in place) and g at h1; training keeps
 * every tensor for its backward (forward.c). After the last layer,
 * dtx_block_head: the final norm and the output projection, over every row
 * (training) or the last one (generation). */
#include <string.h>

#include "common/profile.h"
#include "kernels/matmul_dnnl.h"
#include "model/model.h"

#define P(off) (m->params + (off))

void dtx_bf16_round_if(unsigned pre, real *x, size_t n) {
#ifndef DTX_DOUBLE
    if (pre) DTX_PROF(DTX_PROF_ROUND, 0, dtx_bf16_round(x, x, n));
#else
    (void)pre, (void)x, (void)n;
#endif
}

/* out [M, N] = x [M, K] times the weight at off, the run's way (timed). */
static void linear(const dtx_model *m, const dtx_block_run *r, real *out, const real *x, size_t off, int64_t M,
                   int64_t K, int64_t N, unsigned pre) {
    DTX_PROF(DTX_PROF_MATMUL, 0, r->linear(m, r->ctx, out, x, off, M, K, N, pre));
}

/* The n products of one input (timed as one): through the run's
 * linear_shared where it has one (a decode step: one pass over the
 * threads), else one by one. */
static void linear_shared(const dtx_model *m, const dtx_block_run *r, real *const *out, const real *x,
                          const size_t *off, const int64_t *N, int n, int64_t M, int64_t K, unsigned pre) {
    if (r->linear_shared) {
        DTX_PROF(DTX_PROF_MATMUL, 0, r->linear_shared(m, r->ctx, out, x, off, N, n, M, K, pre));
        return;
    }
    for (int i = 0; i < n; i++) linear(m, r, out[i], x, off[i], M, K, N[i], pre);
}

/* la->attn_y (or DIFF2's la->attn_a) from q, k, v: over the block's own keys,
 * or row by row over the cache (TENSOR scope: this call's rows, all heads,
 * are the tensor, as a forward over T), or each row over its own sequence's
 * cache (TENSOR scope: each row alone, as its own decode step). */
static void attention(const dtx_block_run *r, const dtx_attn_dims *ad, dtx_layer_acts *la, const real *subln,
                      int64_t qd) {
    real *out = la->attn_a ? la->attn_a : la->attn_y;
    if (r->mode == DTX_BLOCK_OWN_KEYS) {
        dtx_attention_forward(ad, out, &la->att, la->q, la->k, la->v, subln);
        return;
    }
    int64_t n = r->B * r->T;
    if (r->kv_bf16) { /* no quantised logits here (generate.c refuses them with a bf16 cache) */
        for (int64_t i = 0; i < n; i++) {
            const int batch = r->mode == DTX_BLOCK_BATCH;
            dtx_attention_decode_bf16(ad, out + i * qd, la->q + i * qd, batch ? r->row_k16[i] : r->k16,
                                      batch ? r->row_v16[i] : r->v16, batch ? r->row_pos[i] + 1 : r->pos0 + i + 1,
                                      subln, batch ? r->row_scores[i] : r->scores);
        }
        return;
    }
    if (r->mode == DTX_BLOCK_BATCH) {
        for (int64_t i = 0; i < n; i++) {
            double amax[2] = {0, 0};
            if (ad->run.quant_bits && ad->run.quant_tensor)
                dtx_attention_decode_absmax(ad, amax, la->q + i * qd, r->row_k[i], r->row_pos[i] + 1);
            dtx_attention_decode_with_absmax(ad, out + i * qd, la->q + i * qd, r->row_k[i], r->row_v[i],
                                             r->row_pos[i] + 1, subln, r->row_scores[i], amax);
        }
        return;
    }
    double amax[2] = {0, 0};
    for (int64_t i = 0; ad->run.quant_bits && ad->run.quant_tensor && i < n; i++)
        dtx_attention_decode_absmax(ad, amax, la->q + i * qd, r->k_cache, r->pos0 + i + 1);
    for (int64_t i = 0; i < n; i++)
        dtx_attention_decode_with_absmax(ad, out + i * qd, la->q + i * qd, r->k_cache, r->v_cache, r->pos0 + i + 1,
                                         subln, r->scores, amax);
}

/* A bf16 KV cache (dtx_kv_type): the block's new keys and values rounded to
 * bf16 (nearest even) in place and their bits stored at their rows (BATCH:
 * each row's own sequence and position; else rows pos0 ..), so every
 * attention, over the block's own keys or the cache, reads what the cache
 * keeps. */
static void store_bf16_kv(const dtx_block_run *r, dtx_layer_acts *la, int64_t N, int64_t KV) {
    for (int64_t i = 0; i < N; i++) {
        const int batch = r->mode == DTX_BLOCK_BATCH;
        const int64_t at = (batch ? r->row_pos[i] : r->pos0 + i) * KV;
        uint16_t *kd = (batch ? r->row_k16[i] : r->k16) + at, *vd = (batch ? r->row_v16[i] : r->v16) + at;
        real *k = la->k + i * KV, *v = la->v + i * KV;
        for (int64_t c = 0; c < KV; c++) {
            kd[c] = dtx_f32_to_bf16((float)k[c]), k[c] = (real)dtx_bf16_to_f32(kd[c]);
            vd[c] = dtx_f32_to_bf16((float)v[c]), v[c] = (real)dtx_bf16_to_f32(vd[c]);
        }
    }
}

dtx_attn_dims dtx_model_generation_attn_dims(const dtx_model *m, int64_t T, int64_t layer, double lambda) {
    dtx_attn_dims a = dtx_model_attn_dims(m, 1, T, layer, lambda);
    a.run.impl = DTX_ATTN_FLASH;
    a.run.precision = DTX_PREC_FP32;
    return a;
}

void dtx_block_forward(dtx_model *m, int64_t l, const dtx_block_run *r, dtx_layer_acts *la, const real *x,
                       real *out) {
    dtx_model_settle_poll(m); /* the weights copied so far read from their new memory (weights_memory.c) */
    const dtx_config *c = &m->cfg;
    const dtx_layer_offsets *o = &m->layers[l];
    const int64_t B = r->B, T = r->T, N = B * T, D = c->dim, KV = m->kv_dim, F = c->ffn_dim, d = m->head_dim;
    const int64_t QD = dtx_config_q_dim(c);
    const unsigned px = r->px;
    const real *subln = dtx_model_subln(m, l);
    /* attention */
    dtx_rmsnorm_forward(la->xn1, la->rstd1, x, P(o->attn_norm), N, D, c->norm_eps);
    dtx_bf16_round_if(px, la->xn1, (size_t)(N * D));
    {
        real *const qkv[4] = {la->q, la->k, la->v, la->lam};
        const size_t qkv_off[4] = {o->wq, o->wk, o->wv, o->wl};
        const int64_t qkv_n[4] = {QD, KV, KV, c->n_heads};
        linear_shared(m, r, qkv, la->xn1, qkv_off, qkv_n, la->lam ? 4 : 3, N, D, px);
    }
    if (r->mode == DTX_BLOCK_BATCH) { /* every row at its own position, into its own cache */
        for (int64_t i = 0; i < N; i++) {
            dtx_rope_forward(la->q + i * QD, m->rope_cos, m->rope_sin, 1, 1, r->row_pos[i], QD / d, d);
            dtx_rope_forward(la->k + i * KV, m->rope_cos, m->rope_sin, 1, 1, r->row_pos[i], KV / d, d);
        }
        dtx_model_round_qk(m, l, la->q, N * QD, la->k, N * KV);
        for (int64_t i = 0; i < N && !r->kv_bf16; i++) {
            memcpy(r->row_k[i] + r->row_pos[i] * KV, la->k + i * KV, sizeof(real) * (size_t)KV);
            memcpy(r->row_v[i] + r->row_pos[i] * KV, la->v + i * KV, sizeof(real) * (size_t)KV);
        }
    } else {
        dtx_rope_forward(la->q, m->rope_cos, m->rope_sin, B, T, r->pos0, QD / d, d);
        dtx_rope_forward(la->k, m->rope_cos, m->rope_sin, B, T, r->pos0, KV / d, d);
        dtx_model_round_qk(m, l, la->q, N * QD, la->k, N * KV);
    }
    if (r->kv_bf16) store_bf16_kv(r, la, N, KV);
    la->lambda = dtx_model_lambda(m, l);
    dtx_attn_dims ad = r->generation ? dtx_model_generation_attn_dims(m, T, l, la->lambda)
                                     : dtx_model_attn_dims(m, B, T, l, la->lambda);
    attention(r, &ad, la, subln, QD);
    if (la->attn_a)
        dtx_diff2_combine_forward(la->attn_y, la->attn_a, la->lam, N, c->n_heads, d, c->v2_lambda);
    linear(m, r, r->scratch, la->attn_y, o->wo, N, dtx_config_attn_dim(c), D, 0);
    dtx_residual_forward(la->x_mid, x, r->scratch, N * D);
    /* feed-forward */
    dtx_rmsnorm_forward(la->xn2, la->rstd2, la->x_mid, P(o->ffn_norm), N, D, c->norm_eps);
    dtx_bf16_round_if(px, la->xn2, (size_t)(N * D));
    /* rows [i0, i0 + n) at a time where r->ffn_rows asks (h1, h3, g then hold one block at their start);
     * otherwise one block, i0 = 0 */
    const int64_t fr = r->ffn_rows > 0 && r->ffn_rows < N ? r->ffn_rows : N;
    for (int64_t i0 = 0; i0 < N; i0 += fr) {
        const int64_t n = N - i0 < fr ? N - i0 : fr;
        real *const h13[2] = {la->h1, la->h3};
        const size_t h13_off[2] = {o->w1, o->w3};
        const int64_t h13_n[2] = {F, F};
        linear_shared(m, r, h13, la->xn2 + i0 * D, h13_off, h13_n, 2, n, D, px);
        dtx_swiglu_forward_r(la->g, la->h1, la->h3, n * F, px != 0);
        linear(m, r, r->scratch + i0 * D, la->g, o->w2, n, F, D, px);
    }
    dtx_residual_forward(out, la->x_mid, r->scratch, N * D);
}

void dtx_block_head(dtx_model *m, const dtx_block_run *r, real *logits, real *xn, real *rstd, const real *x,
                    int64_t rows) {
    const dtx_config *c = &m->cfg;
    dtx_rmsnorm_forward(xn, rstd, x, P(m->final_norm), rows, c->dim, c->norm_eps);
    dtx_bf16_round_if(r->px, xn, (size_t)(rows * c->dim));
    linear(m, r, logits, xn, m->out_w, rows, c->dim, c->vocab_size, r->px);
}
