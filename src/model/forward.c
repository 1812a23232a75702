/* Forward and backward over the layers (llm.c style, over the flat buffers
 * of model.h): the forward is block.c's one layer walker, each block's
 * backward is here.
 *
 * Shapes: N = B·T rows, D = dim, KV = kv_dim, F = ffn_dim, V = vocab.
 *   x [N, D] --attention_norm--> xn1 --q/k/v proj--> q [N, D], k, v [N, KV]
 *   --RoPE(q, k)--> attention --> attn_y [N, D] --out_proj--> + x = x_mid
 *   DIFF2: q [N, 2D] (2h heads), one ordinary attention --> attn_a [N, 2D],
 *   lam = xn1 · lambda_projᵀ [N, h], pairs combined --> attn_y [N, D]
 *   x_mid --ffn_norm--> xn2 --w1, w3--> h1, h3 [N, F] --silu·--> g
 *   --w2--> + x_mid = next x.  Final: norm --> xnf --output--> logits [N, V]. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul_dnnl.h"
#include "model/model.h"

#define P(off) (m->params + (off))
#define G(off) (m->grads + (off))

dtx_attn_dims dtx_model_attn_dims(const dtx_model *m, int64_t B, int64_t T, int64_t layer, double lambda) {
    const dtx_config *c = &m->cfg;
    int64_t heads = c->arch == DTX_ARCH_DIFF2 ? 2 * c->n_heads : c->n_heads; /* V2: 2h ordinary heads */
    dtx_attn_dims a = {
        .geom = {.B = B, .T = T, .n_heads = heads, .n_kv_heads = c->n_kv_heads, .head_dim = m->head_dim},
        .arch = {.diff = c->arch == DTX_ARCH_DIFF, .subln = dtx_config_has_subln(c), .lambda = lambda,
                 .lambda_init = dtx_config_lambda_init(c, layer), .eps = c->norm_eps,
                 .keep = c->arch == DTX_ARCH_DIFF ? c->transformer_mix : 0},
        .run = {.impl = m->attn_impl, .quant_bits = m->attn_quant_bits,
                .quant_tensor = m->attn_quant_scope == DTX_QUANT_TENSOR, .precision = m->precision},
    };
    return a;
}

const real *dtx_model_subln(const dtx_model *m, int64_t l) {
    return dtx_config_has_subln(&m->cfg) ? P(m->layers[l].subln) : NULL;
}

dtx_status dtx_model_set_attention_quant(dtx_model *m, int bits, dtx_quant_scope scope) {
    if (bits != 0 && (bits < 2 || bits > 16))
        return dtx_fail(DTX_ERR_ARG, "attention logit bits %d: expected 0 (off) or 2 to 16", bits);
    if (scope != DTX_QUANT_ROW && scope != DTX_QUANT_TENSOR)
        return dtx_fail(DTX_ERR_ARG, "unknown attention quantisation scope %d (expected row = %d or tensor = %d)",
                        (int)scope, (int)DTX_QUANT_ROW, (int)DTX_QUANT_TENSOR);
    m->attn_quant_bits = bits;
    m->attn_quant_scope = scope;
    return DTX_OK;
}

/* Lays every activation buffer for a [B, T] batch out from `base` (or only
 * counts, when base is NULL) and returns the element count. Each buffer
 * starts on a 64-byte boundary (SIMD loads, and the flash workspace keeps
 * doubles). */
static size_t layout_acts(const dtx_model *m, dtx_acts *a, real *base, int64_t B, int64_t T) {
    const dtx_config *c = &m->cfg;
    size_t N = (size_t)(B * T), D = (size_t)c->dim, KV = (size_t)m->kv_dim, F = (size_t)c->ffn_dim;
    size_t V = (size_t)c->vocab_size, L = (size_t)c->n_layers, QD = (size_t)dtx_config_q_dim(c);
    size_t OD = (size_t)dtx_config_attn_dim(c), DO = OD > D ? OD : D; /* the attention output's width; the larger */
    size_t NA = c->arch == DTX_ARCH_DIFF2 ? N * QD : 0, NL = dtx_config_has_lambda_proj(c) ? N * (size_t)c->n_heads : 0;
    dtx_attn_dims ad = dtx_model_attn_dims(m, B, T, 0, 0);
    size_t n_att = dtx_attention_att_size(&ad), n_o = dtx_attention_o_size(&ad), n_o2 = dtx_attention_o2_size(&ad);
    size_t n_rs = dtx_attention_rstd_size(&ad), n_work = dtx_attention_workspace_size(&ad);
    size_t n_lse = (dtx_attention_lse_size(&ad) * sizeof(float) + sizeof(real) - 1) / sizeof(real);
    size_t off = 0;
    dtx_layer_acts dummy;
#define CARVE(ptr, n)                                                   \
    do {                                                                \
        real *at_ = base ? base + off : NULL;                           \
        if (base) (ptr) = at_;                                          \
        off += ((size_t)(n) + 15) & ~(size_t)15;                        \
    } while (0)
    real *resid = NULL, *work = NULL;
    CARVE(resid, (L + 1) * N * D);
    CARVE(work, n_work);
    if (base) {
        a->resid = resid;
    }
    for (size_t l = 0; l < L; l++) {
        dtx_layer_acts *la = base ? &a->layers[l] : &dummy;
        real *lse = NULL;
        CARVE(la->x_mid, N * D);
        CARVE(la->xn1, N * D);
        CARVE(la->rstd1, N);
        CARVE(la->q, N * QD);
        CARVE(la->k, N * KV);
        CARVE(la->v, N * KV);
        CARVE(la->attn_y, N * OD);
        CARVE(la->attn_a, NA);
        CARVE(la->lam, NL);
        CARVE(la->att.att, n_att);
        CARVE(lse, n_lse);
        CARVE(la->att.o1, n_o);
        CARVE(la->att.o2, n_o2);
        CARVE(la->att.rstd, n_rs);
        CARVE(la->xn2, N * D);
        CARVE(la->rstd2, N);
        CARVE(la->h1, N * F);
        CARVE(la->h3, N * F);
        CARVE(la->g, N * F);
        if (base) {
            la->att.lse = n_lse ? (float *)lse : NULL;
            la->att.work = n_work ? work : NULL; /* scratch shared by the layers */
            if (!n_att) la->att.att = NULL;
            if (!n_o) la->att.o1 = NULL;
            if (!n_o2) la->att.o2 = NULL;
            if (!n_rs) la->att.rstd = NULL;
            if (!NA) la->attn_a = NULL;
            if (!NL) la->lam = NULL;
        }
    }
    CARVE(a->xnf, N * D);
    CARVE(a->rstdf, N);
    CARVE(a->probs, N * V);
    CARVE(a->dresid, N * D);
    CARVE(a->dx1, N * DO); /* out_proj's input gradient too */
    CARVE(a->dx2, N * D);
    CARVE(a->dq, N * QD);
    CARVE(a->dk, N * KV);
    CARVE(a->dv, N * KV);
    CARVE(a->dh1, N * F);
    CARVE(a->dh3, N * F);
    CARVE(a->dg, N * F);
    CARVE(a->dA, NA);
    CARVE(a->dlam, NL);
    if (base && !NA) a->dA = NULL;
    if (base && !NL) a->dlam = NULL;
#undef CARVE
    return off;
}

void dtx_model_free_acts(dtx_model *m) {
    dtx_acts *a = &m->acts;
    dtx_free_work(a->mem, a->mapped);
    free(a->layers);
    free(a->tokens);
    free(a->targets);
    memset(a, 0, sizeof *a);
}

/* Allocates the activations for a [B, T] batch in one block; reuses the
 * previous block when the shape, attention implementation, logit
 * quantisation and precision (which size the attention workspace) are
 * unchanged. */
static dtx_status ensure_acts(dtx_model *m, int64_t B, int64_t T) {
    dtx_acts *a = &m->acts;
    int qt = m->attn_quant_scope == DTX_QUANT_TENSOR;
    if (a->mem && a->B == B && a->T == T && a->impl == m->attn_impl && a->quant_bits == m->attn_quant_bits &&
        a->quant_tensor == qt && a->precision == m->precision)
        return DTX_OK;
    dtx_model_free_acts(m);
    size_t N = (size_t)(B * T), L = (size_t)m->cfg.n_layers;
    dtx_acts probe;
    memset(&probe, 0, sizeof probe);
    size_t total = layout_acts(m, &probe, NULL, B, T);
    /* 2 MiB pages: a training step walks gigabytes of activations, and with
     * 4 KiB pages the first step took a million page faults (5–6 s of a
     * 10 s first step at config S) and every product more TLB misses */
    a->mem = total <= SIZE_MAX / sizeof(real) ? dtx_alloc_work(total * sizeof(real), &a->mapped) : NULL;
    a->layers = calloc(L, sizeof *a->layers);
    a->tokens = malloc(N * sizeof(int32_t));
    a->targets = malloc(N * sizeof(int32_t));
    if (!a->mem || !a->layers || !a->tokens || !a->targets) {
        dtx_model_free_acts(m);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for activations of a %lld x %lld batch (%zu values)",
                        (long long)B, (long long)T, total);
    }
    layout_acts(m, a, a->mem, B, T);
    a->B = B;
    a->T = T;
    a->impl = m->attn_impl;
    a->quant_bits = m->attn_quant_bits;
    a->quant_tensor = qt;
    a->precision = m->precision;
    a->bytes = total * sizeof(real);
    return DTX_OK;
}

/* ------------------------------------------------------------ emulated bf16 */

/* Where bf16 is emulated (no native bf16 matmul), the tensors that only feed
 * matrix products are rounded to bf16 once, where they are made, and the
 * products are told so (DTX_MM_PRE_*), instead of each product rounding its
 * own copy: xn1 feeds three products and their three weight gradients. The
 * forward's xn1, xn2, g, xnf and the backward's dq, dk, dv, dh1, dh3 and
 * dlogits have no other reader (the norms' and SwiGLU's backward read their
 * inputs), so the values every product sees are the native mode's. */
static int preround_enabled = 1;
void dtx_model_test_preround(int on) { preround_enabled = on; }

/* The flags of a forward (kept in acts->pre, so that its backward treats
 * the same tensors as rounded whatever happens in between). */
static unsigned pre_for_forward(const dtx_model *m) {
#ifndef DTX_DOUBLE
    if (preround_enabled && m->precision == DTX_PREC_BF16 && !dtx_matmul_bf16_native())
        return DTX_MM_PRE_X | DTX_MM_PRE_DOUT;
#endif
    (void)m;
    return 0;
}
static unsigned pre_rounded(const dtx_model *m) { return m->acts.pre; }

/* The training forward's linear layers: every product through dtx_model_linear. */
static void batch_linear(const dtx_model *m, void *ctx, real *out, const real *x, size_t off, int64_t M, int64_t K,
                         int64_t N, unsigned px) {
    (void)ctx;
    dtx_model_linear(m, out, x, off, M, K, N, px);
}

/* ------------------------------------------------------------ attention block */

/* dx_mid [N, D] (gradient at x_mid) -> dx (+=): through the attention path;
 * the residual path is the caller's (dx and dx_mid are the same buffer). */
static void attention_block_backward(dtx_model *m, int64_t l, const real *x, real *dx) {
    const dtx_config *c = &m->cfg;
    const dtx_layer_offsets *o = &m->layers[l];
    dtx_layer_acts *la = &m->acts.layers[l];
    dtx_acts *a = &m->acts;
    int64_t B = a->B, T = a->T, N = B * T, D = c->dim, KV = m->kv_dim, d = m->head_dim;
    int64_t QD = dtx_config_q_dim(c);
    int diff = c->arch == DTX_ARCH_DIFF, v2 = c->arch == DTX_ARCH_DIFF2;
    real *dattn = a->dx1, *dxn = a->dx2;
    const int64_t OD = dtx_config_attn_dim(c);
    memset(dattn, 0, (size_t)(N * OD) * sizeof(real));
    dtx_matmul_backward(dattn, G(o->wo), dx, la->attn_y, P(o->wo), N, OD, D, m->precision);
    if (v2) { /* the pairs' backward: dattn over the 2h heads, and the λ logits' gradient */
        dtx_diff2_combine_backward(a->dA, a->dlam, dattn, la->attn_a, la->lam, N, c->n_heads, d, c->v2_lambda);
        dattn = a->dA;
    }
    memset(a->dq, 0, (size_t)(N * QD) * sizeof(real));
    memset(a->dk, 0, (size_t)(N * KV) * sizeof(real));
    memset(a->dv, 0, (size_t)(N * KV) * sizeof(real));
    double dlambda = 0;
    dtx_attn_dims ad = dtx_model_attn_dims(m, B, T, l, la->lambda);
    const real *gamma = dtx_model_subln(m, l);
    dtx_attention_backward(&ad, a->dq, a->dk, a->dv, gamma ? G(o->subln) : NULL, &dlambda, dattn, v2 ? la->attn_a : la->attn_y, &la->att, la->q, la->k, la->v, gamma);
    if (diff) {
        /* λ = exp(q1·k1) − exp(q2·k2) + λ_init */
        double e1, e2;
        dtx_model_lambda_parts(m, l, &e1, &e2);
        for (int64_t i = 0; i < d; i++) {
            G(o->lq1)[i] += (real)(dlambda * e1 * P(o->lk1)[i]);
            G(o->lk1)[i] += (real)(dlambda * e1 * P(o->lq1)[i]);
            G(o->lq2)[i] -= (real)(dlambda * e2 * P(o->lk2)[i]);
            G(o->lk2)[i] -= (real)(dlambda * e2 * P(o->lq2)[i]);
        }
    }
    dtx_rope_backward(a->dq, m->rope_cos, m->rope_sin, B, T, 0, QD / d, d);
    dtx_rope_backward(a->dk, m->rope_cos, m->rope_sin, B, T, 0, KV / d, d);
    unsigned pre = pre_rounded(m);
    dtx_bf16_round_if(pre, a->dq, (size_t)(N * QD));
    dtx_bf16_round_if(pre, a->dk, (size_t)(N * KV));
    dtx_bf16_round_if(pre, a->dv, (size_t)(N * KV));
    memset(dxn, 0, (size_t)(N * D) * sizeof(real));
    if (la->lam) {
        dtx_bf16_round_if(pre, a->dlam, (size_t)(N * c->n_heads));
        dtx_matmul_backward_pre(dxn, G(o->wl), a->dlam, la->xn1, P(o->wl), N, D, c->n_heads, m->precision, pre);
    }
    dtx_matmul_backward_pre(dxn, G(o->wq), a->dq, la->xn1, P(o->wq), N, D, QD, m->precision, pre);
    dtx_matmul_backward_pre(dxn, G(o->wk), a->dk, la->xn1, P(o->wk), N, D, KV, m->precision, pre);
    dtx_matmul_backward_pre(dxn, G(o->wv), a->dv, la->xn1, P(o->wv), N, D, KV, m->precision, pre);
    dtx_rmsnorm_backward(dx, G(o->attn_norm), dxn, x, P(o->attn_norm), la->rstd1, N, D);
}

/* ------------------------------------------------------------ feed-forward block */

/* dx [N, D]: gradient at the block output on entry, at x_mid on exit (+=). */
static void ffn_block_backward(dtx_model *m, int64_t l, real *dx) {
    const dtx_config *c = &m->cfg;
    const dtx_layer_offsets *o = &m->layers[l];
    dtx_layer_acts *la = &m->acts.layers[l];
    dtx_acts *a = &m->acts;
    int64_t N = a->B * a->T, D = c->dim, F = c->ffn_dim;
    size_t nf = (size_t)(N * F) * sizeof(real);
    memset(a->dg, 0, nf);
    unsigned pre = pre_rounded(m);
    dtx_matmul_backward_pre(a->dg, G(o->w2), dx, la->g, P(o->w2), N, F, D, m->precision, pre & DTX_MM_PRE_X);
    memset(a->dh1, 0, nf);
    memset(a->dh3, 0, nf);
    dtx_swiglu_backward_r(a->dh1, a->dh3, a->dg, la->h1, la->h3, N * F, pre != 0);
    memset(a->dx2, 0, (size_t)(N * D) * sizeof(real));
    dtx_matmul_backward_pre(a->dx2, G(o->w1), a->dh1, la->xn2, P(o->w1), N, D, F, m->precision, pre);
    dtx_matmul_backward_pre(a->dx2, G(o->w3), a->dh3, la->xn2, P(o->w3), N, D, F, m->precision, pre);
    dtx_rmsnorm_backward(dx, G(o->ffn_norm), a->dx2, la->x_mid, P(o->ffn_norm), la->rstd2, N, D);
}

/* ------------------------------------------------------------ whole model */

static dtx_status check_tokens(const dtx_model *m, const int32_t *t, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= m->cfg.vocab_size)
            return dtx_fail(DTX_ERR_ARG, "%s id %lld at position %lld is out of range [0, %lld)", what,
                            (long long)t[i], (long long)i, (long long)m->cfg.vocab_size);
    return DTX_OK;
}

dtx_status dtx_model_forward(dtx_model *m, const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T,
                             dtx_real *logits, double *loss) {
    const dtx_config *c = &m->cfg;
    if (B < 1 || T < 1)
        return dtx_fail(DTX_ERR_ARG, "batch %lld x %lld: both must be at least 1", (long long)B, (long long)T);
    if (T > c->max_seq_len)
        return dtx_fail(DTX_ERR_ARG, "sequence length %lld exceeds max_seq_len %lld", (long long)T,
                        (long long)c->max_seq_len);
    dtx_status st;
    if ((st = check_tokens(m, tokens, B * T, "token"))) return st;
    if (targets) /* DTX_TARGET_IGNORE leaves a position out of the loss */
        for (int64_t i = 0; i < B * T; i++)
            if (targets[i] != DTX_TARGET_IGNORE && (targets[i] < 0 || targets[i] >= c->vocab_size))
                return dtx_fail(DTX_ERR_ARG, "target id %lld at position %lld is out of range [0, %lld) (or %d: ignored)",
                                (long long)targets[i], (long long)i, (long long)c->vocab_size, DTX_TARGET_IGNORE);
    if ((st = ensure_acts(m, B, T))) return st;
    dtx_acts *a = &m->acts;
    int64_t N = B * T, D = c->dim, V = c->vocab_size, L = c->n_layers;
    memcpy(a->tokens, tokens, (size_t)N * sizeof(int32_t));
    a->has_targets = targets != NULL;
    a->pre = pre_for_forward(m);
    if (targets) memcpy(a->targets, targets, (size_t)N * sizeof(int32_t));

    dtx_model_embed(m, a->resid, tokens, N);
    dtx_block_run run = {.B = B, .T = T, .px = pre_rounded(m) & DTX_MM_PRE_X, .mode = DTX_BLOCK_OWN_KEYS,
                         .scratch = a->dx1, .linear = batch_linear};
    for (int64_t l = 0; l < L; l++) {
        real *x = a->resid + (size_t)(l * N * D);
        dtx_block_forward(m, l, &run, &a->layers[l], x, x + (size_t)(N * D));
    }
    dtx_block_head(m, &run, a->probs, a->xnf, a->rstdf, a->resid + (size_t)(L * N * D), N);
    if (logits) memcpy(logits, a->probs, (size_t)(N * V) * sizeof(real));
    if (targets) {
        double l = dtx_crossentropy_forward(a->probs, a->probs, a->targets, N, V);
        if (loss) *loss = l;
    }
    return DTX_OK;
}

dtx_status dtx_model_token_losses(const dtx_model *m, double *out) {
    const dtx_acts *a = &m->acts;
    if (!a->mem || !a->has_targets)
        return dtx_fail(DTX_ERR_ARG, "token losses need a forward pass with targets, before its backward");
    int64_t N = a->B * a->T, V = m->cfg.vocab_size;
    for (int64_t i = 0; i < N; i++) {
        if (a->targets[i] == DTX_TARGET_IGNORE) {
            out[i] = 0;
            continue;
        }
        double p = a->probs[i * V + a->targets[i]];
        out[i] = -log(p > FLT_MIN ? p : FLT_MIN);
    }
    return DTX_OK;
}

static void grads_ready(dtx_model *m, size_t lo, size_t hi) {
    if (m->grads_ready && hi > lo) m->grads_ready(m->grads_ready_ctx, lo, hi);
}

dtx_status dtx_model_backward(dtx_model *m, double loss_scale) {
    dtx_acts *a = &m->acts;
    if (!a->mem || !a->has_targets)
        return dtx_fail(DTX_ERR_ARG, "backward needs a forward pass with targets first");
    if (m->wquant != DTX_WQ_NONE)
        return dtx_fail(DTX_ERR_ARG, "backward on a quantised model (%s): quantised models are for inference",
                        dtx_wquant_name(m->wquant));
    if (a->quant_bits) /* round() has no useful gradient; the kernels assert this */
        return dtx_fail(DTX_ERR_ARG, "backward after a forward with quantised attention logits (%d bits): "
                        "quantisation is for evaluation only", a->quant_bits);
    if (a->precision != m->precision)
        return dtx_fail(DTX_ERR_ARG, "backward in %s after a forward in %s: set the precision before the forward",
                        dtx_precision_name(m->precision), dtx_precision_name(a->precision));
    /* weights read in place by the forward: the same values, widened, for the gradients and the update */
    dtx_status mst = dtx_model_materialize(m);
    if (mst) return mst;
    if (dtx_model_ensure_grads(m)) return dtx_fail(DTX_ERR_NOMEM, "out of memory allocating gradients");
    const dtx_config *c = &m->cfg;
    int64_t N = a->B * a->T, D = c->dim, V = c->vocab_size, L = c->n_layers;
    /* The logits buffer holds the softmax probabilities; turn them into
     * dlogits in place, so the N×V logits exist once. The forward's
     * activations stay valid, but another backward needs another forward. */
    real *dlogits = a->probs;
    int64_t counted = dtx_crossentropy_count(a->targets, N); /* the loss is the mean over these */
    dtx_crossentropy_backward_inplace(dlogits, a->targets, N, V, counted ? loss_scale / (double)counted : 0);
    a->has_targets = 0;
    memset(a->dx1, 0, (size_t)(N * D) * sizeof(real));
    unsigned pre = pre_rounded(m);
    dtx_bf16_round_if(pre, dlogits, (size_t)(N * V));
    dtx_matmul_backward_pre(a->dx1, G(m->out_w), dlogits, a->xnf, P(m->out_w), N, D, V, m->precision, pre);
    memset(a->dresid, 0, (size_t)(N * D) * sizeof(real));
    real *xL = a->resid + (size_t)(L * N * D);
    dtx_rmsnorm_backward(a->dresid, G(m->final_norm), a->dx1, xL, P(m->final_norm), a->rstdf, N, D);
    /* the table's order (params.c): embedding, layers 0..L-1, final norm, output; each range below is
     * final once the blocks that write it are done (a tied output's gradient is the embedding's) */
    grads_ready(m, m->final_norm, m->n_params);
    for (int64_t l = L - 1; l >= 0; l--) {
        /* dresid: gradient at the block output; the residual paths are identities,
         * so each sub-block's backward adds its branch into the same buffer. */
        ffn_block_backward(m, l, a->dresid);
        attention_block_backward(m, l, a->resid + (size_t)(l * N * D), a->dresid);
        grads_ready(m, m->layers[l].attn_norm, l + 1 < L ? m->layers[l + 1].attn_norm : m->final_norm);
    }
    dtx_embedding_backward(G(m->tok_emb), a->dresid, a->tokens, N, D);
    grads_ready(m, 0, m->layers[0].attn_norm);
    return DTX_OK;
}

void dtx_model_on_grads_ready(dtx_model *m, dtx_grads_ready_fn fn, void *ctx) {
    m->grads_ready = fn, m->grads_ready_ctx = ctx;
}
