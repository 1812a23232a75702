/* Cached decoding: a KV cache, a batched prefill and one-token decode
 * steps, each layer run by the training forward's own walker (block.c)
 * over the cache's buffers; this file keeps the cache.
 *
 * The cache of layer l: K [max_len, KV] and V [max_len, KV] (KV = kv_dim),
 * row p holding the post-RoPE key and the value of the token at position p,
 * written in place as tokens arrive (llama2.c style). One step over n new
 * tokens at positions pos0 .. pos0 + n − 1, per layer:
 *
 *   xn = attention_norm(x)           q = xn·wqᵀ [n, D]   (RoPE at pos0 + i)
 *   K[pos0 ..] = RoPE(xn·wkᵀ)        V[pos0 ..] = xn·wvᵀ  (straight into the cache)
 *   attention: pos0 = 0 and n > 1: the fused flash forward over the n rows
 *              (B = 1, T = n; the cache rows are exactly its k and v);
 *              otherwise row i attends over cache rows 0 .. pos0 + i
 *              (dtx_attention_decode, one query row at a time);
 *              with quantised logits (dtx_model_set_attention_quant) the
 *              same kernels quantise; TENSOR scope takes one step per map
 *              over the n rows of the call, as dtx_model_forward over T;
 *   DIFF2: q [n, 2D] (2h heads) and the attention over them into att2;
 *   att = the pairs combined with λ from xn·lambda_projᵀ [n, h]
 *   (the cache holds the h_kv KV heads only, read once per KV head);
 *   x += att·woᵀ;  x += w2(silu(w1 xn2) ⊙ w3 xn2), xn2 = ffn_norm(x).
 *
 * Then the final norm and the output projection of the LAST row only. The
 * row buffers are sized for the longest step so far (one row at init, so a
 * decode step never allocates).
 *
 * Linear layers: several rows go to dtx_matmul_forward (oneDNN); a single
 * row (every decode step) to the matrix-vector product below, which streams
 * each weight matrix once at memory speed (oneDNN's M = 1 primitive ran at a
 * third of that on the test box). With bf16 products the single-row path
 * reads a bf16 copy of the parameters that the cache keeps (half the model's
 * size again), made at the first one-row step of each sequence (len = 0
 * marks a new one), so decoding streams half the bytes: bf16 operands (the
 * row rounded to nearest even), exact products, fp32 accumulation — the
 * contract of dtx_matmul_forward with DTX_PREC_BF16. A quantised model's
 * rows go through dtx_model_linear and its single rows through the
 * quantised one-row kernels (linear.c), which read its int8 or 4-bit
 * weights directly. */
#include <stdlib.h>
#include <string.h>

#include "common/team.h"
#include "kernels/matmul_dnnl.h"
#include "model/model.h"

struct dtx_kvcache {
    /* the model shape it was made for (and V2's λ form, which decides its buffers) */
    dtx_arch arch;
    dtx_v2_lambda v2_lambda;
    int64_t n_layers, dim, n_heads, n_kv_heads, head_dim, kv_dim, ffn_dim, vocab_size;
    int64_t max_len, len;
    real *k, *v;    /* [n_layers, max_len, kv_dim] each, in 2 MiB pages (dtx_alloc_huge); NULL in bf16 */
    uint16_t *k16, *v16; /* the same in bf16 bits (DTX_KV_BF16), else NULL */
    dtx_kv_type kv_type;
    size_t kv_bytes; /* the memory of each of k and v */
    real *scores;   /* dtx_attention_decode scratch for a full cache */
    size_t scores_n;
    /* row buffers for up to rows_cap rows (flash buffers when flash_cap;
     * their workspace also fits the quantised forward when quant_cap) */
    int64_t rows_cap;
    int flash_cap, quant_cap;
    int64_t ffn_rows; /* rows of h, h3: the feed-forward's block (ffn_rows_for) */
    real *mem;
    size_t mem_n;
    real *x, *xn, *q, *att, *tmp, *rstd, *h;  /* [r, D] (q [r, QD]) x5, [r], [ffn_rows, F] */
    real *att2, *lam;                         /* DIFF2: [r, 2D], [r, h] (else NULL) */
    real *h3;                                 /* [ffn_rows, F] */
    real *o1, *o2, *orstd, *work;             /* flash: the saved o1/o2/rstd, workspace */
    float *lse;
    real *xr;         /* [xr_rows, max(D, F)] the one-row products' inputs as rounded */
    int64_t xr_rows;  /* rows of xr (1, or a batched step's sequences) */
    real *kb, *vb;    /* a step's new keys and values before they are stored: a batched step's [xr_rows, KV];
                       * with a bf16 cache, any step's ([max(r, xr_rows), KV]) */
    int64_t *bpos;    /* a batched step's positions, */
    real **bk, **bv, **bscores; /* and the caches' layer rows and scratch, [xr_rows] each */
    uint16_t **bk16, **bv16;    /* the same layer rows of bf16 caches */
    int batch;        /* 1 while this cache hosts a batched step: several rows are single rows */
    uint16_t *wbf;    /* bf16 copy of the parameters (same offsets), or NULL */
    size_t wbf_n, wbf_bytes; /* its values, and its memory's bytes (dtx_alloc_huge) */
    int wbf_valid;    /* wbf holds the current sequence's copy */
    const dtx_prefill_hooks *hooks; /* an observer of the steps (model.h), or NULL */
};

void dtx_kvcache_set_hooks(dtx_kvcache *c, const dtx_prefill_hooks *h) { c->hooks = h; }

/* Lays the row buffers for r rows out from base (or only counts when base is
 * NULL); every buffer on a 64-byte boundary. Returns the element count. The
 * flash workspace also fits the quantised forward when quant. */
static size_t layout(const dtx_model *m, dtx_kvcache *c, real *base, int64_t r, int flash, int quant, int64_t xr_rows,
                     int64_t ffn_rows) {
    size_t D = (size_t)c->dim, F = (size_t)c->ffn_dim, R = (size_t)r, off = 0, XR = (size_t)xr_rows;
    size_t FR = (size_t)ffn_rows;
    size_t KB = (c->kv_type == DTX_KV_BF16 && R > XR ? R : XR) * (size_t)c->kv_dim;
    size_t QD = (size_t)dtx_config_q_dim(&m->cfg), NA = m->cfg.arch == DTX_ARCH_DIFF2 ? R * QD : 0;
    size_t NL = dtx_config_has_lambda_proj(&m->cfg) ? R * (size_t)m->cfg.n_heads : 0;
    dtx_attn_dims ad = dtx_model_generation_attn_dims(m, r, 0, 0);
    ad.run.quant_bits = quant ? 16 : 0; /* any valid bits: the size depends only on quantisation being on */
    size_t n_o = flash ? dtx_attention_o_size(&ad) : 0, n_o2 = flash ? dtx_attention_o2_size(&ad) : 0;
    size_t n_rs = flash ? dtx_attention_rstd_size(&ad) : 0;
    size_t n_work = flash ? dtx_attention_workspace_size(&ad) : 0;
    size_t n_lse = flash ? (dtx_attention_lse_size(&ad) * sizeof(float) + sizeof(real) - 1) / sizeof(real) : 0;
    real *lse = NULL;
#define CARVE(ptr, cnt)                                 \
    do {                                                \
        if (base) (ptr) = base + off;                   \
        off += ((size_t)(cnt) + 15) & ~(size_t)15;      \
    } while (0)
    CARVE(c->x, R * D);
    CARVE(c->xn, R * D);
    CARVE(c->q, R * QD);
    CARVE(c->att, R * (size_t)dtx_config_attn_dim(&m->cfg));
    CARVE(c->tmp, R * D);
    CARVE(c->rstd, R);
    CARVE(c->h, FR * F);
    CARVE(c->h3, FR * F);
    CARVE(c->xr, XR * (D > F ? D : F));
    CARVE(c->kb, KB);
    CARVE(c->vb, KB);
    CARVE(c->att2, NA);
    CARVE(c->lam, NL);
    CARVE(c->o1, n_o);
    CARVE(c->o2, n_o2);
    CARVE(c->orstd, n_rs);
    CARVE(c->work, n_work);
    CARVE(lse, n_lse);
#undef CARVE
    if (base) {
        c->lse = n_lse ? (float *)lse : NULL;
        if (!n_o) c->o1 = NULL;
        if (!n_o2) c->o2 = NULL;
        if (!n_rs) c->orstd = NULL;
        if (!n_work) c->work = NULL;
        if (!NA) c->att2 = NULL;
        if (!NL) c->lam = NULL;
    }
    return off;
}

/* The feed-forward's rows of a step (dtx_block_run.ffn_rows; h and h3 hold
 * that many): where the products take their input in blocks of rows anyway
 * (dtx_model_linear_row_block: quantised or bf16 weights, each block of
 * weight rows dequantised or widened once per input block), the
 * feed-forward runs block by block, so its h1 and h3 ([rows, ffn_dim] each,
 * a long prompt's largest buffers) hold one block, for the same work. At
 * 128 rows it measured 6-27% slower (the weights widened or dequantised
 * twice as often; fp32's oneDNN products at M = 128 against 512); at 256
 * it cut 11 MiB of the 0.8B DIFF shape's 512-token prefill (README). An
 * observer of the products' inputs (calibration) sees every row at once. */
static int64_t ffn_rows_for(const dtx_model *m, const dtx_kvcache *c, int64_t r) {
    int64_t b = dtx_model_linear_row_block(m);
    return (c->hooks && c->hooks->linear_input) || b <= 0 || r < b ? r : b;
}

/* Row buffers for r rows (and the flash buffers when flash, sized for the
 * quantised forward when the model quantises the logits), the one-row
 * products' inputs for xr_rows rows. */
static dtx_status ensure_rows(const dtx_model *m, dtx_kvcache *c, int64_t r, int flash, int64_t xr_rows) {
    int quant = flash && m->attn_quant_bits;
    int64_t fr = ffn_rows_for(m, c, r);
    if (c->mem && r <= c->rows_cap && (!flash || c->flash_cap) && (!quant || c->quant_cap) &&
        xr_rows <= c->xr_rows && fr <= c->ffn_rows)
        return DTX_OK;
    if (fr < c->ffn_rows) fr = c->ffn_rows;
    if (r < c->rows_cap) r = c->rows_cap;
    if (xr_rows < c->xr_rows) xr_rows = c->xr_rows;
    flash = flash || c->flash_cap;
    quant = flash && (quant || c->quant_cap);
    size_t n = layout(m, c, NULL, r, flash, quant, xr_rows, fr);
    real *mem = dtx_alloc(n, sizeof(real));
    if (!mem)
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for the generation buffers of %lld rows (%zu values)",
                        (long long)r, n);
    if (xr_rows > c->xr_rows) { /* a batched step's per-sequence pointers */
        int64_t *pos = realloc(c->bpos, sizeof *pos * (size_t)xr_rows);
        if (pos) c->bpos = pos;
        real **p[3] = {NULL, NULL, NULL}, ***at[3] = {&c->bk, &c->bv, &c->bscores};
        uint16_t **p16[2] = {NULL, NULL}, ***at16[2] = {&c->bk16, &c->bv16};
        int ok = pos != NULL;
        for (int i = 0; i < 3 && ok; i++)
            if ((p[i] = realloc(*at[i], sizeof(real *) * (size_t)xr_rows))) *at[i] = p[i];
            else ok = 0;
        for (int i = 0; i < 2 && ok; i++)
            if ((p16[i] = realloc(*at16[i], sizeof(uint16_t *) * (size_t)xr_rows))) *at16[i] = p16[i];
            else ok = 0;
        if (!ok) {
            free(mem);
            return dtx_fail(DTX_ERR_NOMEM, "out of memory for a batched step of %lld sequences", (long long)xr_rows);
        }
    }
    free(c->mem);
    c->mem = mem;
    c->mem_n = n;
    c->rows_cap = r;
    c->flash_cap = flash;
    c->quant_cap = quant;
    c->xr_rows = xr_rows;
    c->ffn_rows = fr;
    layout(m, c, mem, r, flash, quant, xr_rows, fr);
    return DTX_OK;
}

dtx_status dtx_kvcache_init(dtx_kvcache **out, const dtx_model *m, int64_t max_len) {
    return dtx_kvcache_init_type(out, m, max_len, DTX_KV_FP32);
}

dtx_status dtx_kvcache_init_type(dtx_kvcache **out, const dtx_model *m, int64_t max_len, dtx_kv_type type) {
    *out = NULL;
    const dtx_config *cfg = &m->cfg;
    if (type != DTX_KV_FP32 && type != DTX_KV_BF16)
        return dtx_fail(DTX_ERR_ARG, "unknown KV cache type %d (fp32 %d, bf16 %d)", (int)type, (int)DTX_KV_FP32,
                        (int)DTX_KV_BF16);
    if (max_len <= 0) max_len = cfg->max_seq_len;
    if (max_len > cfg->max_seq_len)
        return dtx_fail(DTX_ERR_ARG, "KV cache length %lld exceeds the model's max_seq_len %lld", (long long)max_len,
                        (long long)cfg->max_seq_len);
    dtx_kvcache *c = calloc(1, sizeof *c);
    if (!c) return dtx_fail(DTX_ERR_NOMEM, "out of memory for a KV cache");
    c->arch = cfg->arch;
    c->v2_lambda = cfg->v2_lambda;
    c->n_layers = cfg->n_layers;
    c->dim = cfg->dim;
    c->n_heads = cfg->n_heads;
    c->n_kv_heads = cfg->n_kv_heads;
    c->head_dim = m->head_dim;
    c->kv_dim = m->kv_dim;
    c->ffn_dim = cfg->ffn_dim;
    c->vocab_size = cfg->vocab_size;
    c->max_len = max_len;
    c->kv_type = type;
    size_t kv_n = (size_t)(c->n_layers * max_len * c->kv_dim), elem = type == DTX_KV_BF16 ? sizeof(uint16_t) : sizeof(real);
    dtx_attn_dims ad = dtx_model_generation_attn_dims(m, 1, 0, 0);
    c->scores_n = dtx_attention_decode_scratch_size(&ad, max_len);
    /* Every decode step reads each layer's cached rows whole: in 2 MiB pages, as the weights, a walk over
     * them takes no TLB miss per 4 KiB and the prefetchers run on past page ends (Zen 5, a 110M DIFF w4a16
     * file at 512-812 cached positions: 4.04-4.20 ms a token against 4.37-4.47 in 4 KiB pages) */
    void *k = kv_n <= SIZE_MAX / 2 / elem ? dtx_alloc_huge(kv_n * elem, &c->kv_bytes) : NULL;
    void *v = k ? dtx_alloc_huge(kv_n * elem, &c->kv_bytes) : NULL;
    if (type == DTX_KV_BF16) c->k16 = k, c->v16 = v;
    else c->k = k, c->v = v;
    c->scores = v ? dtx_alloc(c->scores_n, sizeof(real)) : NULL;
    if (!c->scores) {
        dtx_kvcache_free(c);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for a KV cache of %lld positions (%zu bytes)",
                        (long long)max_len, 2 * kv_n * elem);
    }
    dtx_status st = ensure_rows(m, c, 1, 0, 1);
    if (st) {
        dtx_kvcache_free(c);
        return st;
    }
    *out = c;
    return DTX_OK;
}

void dtx_kvcache_free(dtx_kvcache *c) {
    if (!c) return;
    dtx_free_lazy_zero(c->k, c->kv_bytes, 1);
    dtx_free_lazy_zero(c->v, c->kv_bytes, 1);
    dtx_free_lazy_zero(c->k16, c->kv_bytes, 1);
    dtx_free_lazy_zero(c->v16, c->kv_bytes, 1);
    free(c->scores);
    free(c->mem);
    dtx_free_lazy_zero(c->wbf, c->wbf_bytes, 1);
    free(c->bpos);
    free(c->bk);
    free(c->bv);
    free(c->bscores);
    free(c->bk16);
    free(c->bv16);
    free(c);
}

void dtx_kvcache_reset(dtx_kvcache *c) { c->len = 0; }
dtx_status dtx_kvcache_truncate(dtx_kvcache *c, int64_t len) {
    if (len < 0 || len > c->len)
        return dtx_fail(DTX_ERR_ARG, "cannot truncate a KV cache of %lld tokens to %lld", (long long)c->len,
                        (long long)len);
    c->len = len; /* rows past len are overwritten by the next append */
    return DTX_OK;
}
int64_t dtx_kvcache_len(const dtx_kvcache *c) { return c->len; }
int64_t dtx_kvcache_max_len(const dtx_kvcache *c) { return c->max_len; }

size_t dtx_kvcache_bytes(const dtx_kvcache *c) {
    return 2 * (size_t)(c->n_layers * c->max_len * c->kv_dim) * (c->kv_type == DTX_KV_BF16 ? sizeof(uint16_t) : sizeof(real));
}
dtx_kv_type dtx_kvcache_type(const dtx_kvcache *c) { return c->kv_type; }

size_t dtx_kvcache_scratch_bytes(const dtx_kvcache *c) {
    return (c->scores_n + c->mem_n) * sizeof(real) + c->wbf_n * sizeof(uint16_t);
}

/* ------------------------------------------------------------ one-row linear */

#ifndef DTX_DOUBLE
/* The bf16 copy of the parameters for this sequence. */
static dtx_status ensure_bf16(const dtx_model *m, dtx_kvcache *c) {
    if (c->wbf_valid) return DTX_OK;
    if (!c->wbf) {
        c->wbf = dtx_alloc_huge(m->n_params * sizeof(uint16_t), &c->wbf_bytes); /* streamed every step: 2 MiB pages */
        if (!c->wbf)
            return dtx_fail(DTX_ERR_NOMEM, "out of memory for the bf16 copy of %zu parameters", m->n_params);
        c->wbf_n = m->n_params;
    }
    const float *p = m->params;
    uint16_t *q = c->wbf;
    int64_t n = (int64_t)m->n_params;
    dtx_bf16_convert(q, p, (size_t)n);
    c->wbf_valid = 1;
    return DTX_OK;
}
#endif

/* out [M, N] = x [M, K] · (parameter at off) [N, K]ᵀ: several rows of one
 * sequence and single rows (one per sequence in a batched step) through
 * linear.c's two entry points (px is 0 here: generation never pre-rounds;
 * the one-row path reads the bf16 copy instead). */
static void cache_linear(const dtx_model *m, void *ctx, real *out, const real *x, size_t off, int64_t M, int64_t K,
                         int64_t N, unsigned px) {
    const dtx_kvcache *c = ctx;
    (void)px;
    if (c->hooks && c->hooks->linear_input && !c->batch) c->hooks->linear_input(c->hooks->ctx, off, x, M, K);
    if (M > 1 && !c->batch) dtx_model_linear(m, out, x, off, M, K, N, 0);
    else dtx_model_linear_rows(m, out, x, M, off, K, N, c->wbf, c->xr);
}

/* The products of one input: a decode step's single row in one pass over the
 * threads (dtx_model_linear_row_parts), anything else one by one as above
 * (and one by one where an observer sees each product's input). */
static void cache_linear_shared(const dtx_model *m, void *ctx, real *const *out, const real *x, const size_t *off,
                                const int64_t *N, int n, int64_t M, int64_t K, unsigned px) {
    const dtx_kvcache *c = ctx;
    if (M == 1 && !c->batch && !(c->hooks && c->hooks->linear_input)) {
        dtx_model_linear_row_parts(m, out, x, off, N, n, K, c->wbf, c->xr);
        return;
    }
    for (int i = 0; i < n; i++) cache_linear(m, ctx, out[i], x, off[i], M, K, N[i], px);
}

/* The cache was made for a model of this shape. */
static dtx_status check_shape(const dtx_model *m, const dtx_kvcache *c) {
    const dtx_config *cfg = &m->cfg;
    if (c->arch != cfg->arch || c->v2_lambda != cfg->v2_lambda || c->n_layers != cfg->n_layers || c->dim != cfg->dim || c->n_heads != cfg->n_heads ||
        c->n_kv_heads != cfg->n_kv_heads || c->head_dim != m->head_dim || c->ffn_dim != cfg->ffn_dim ||
        c->vocab_size != cfg->vocab_size ||
        c->max_len > cfg->max_seq_len)
        return dtx_fail(DTX_ERR_ARG, "the KV cache was made for a model of another shape");
    return DTX_OK;
}

const char *dtx_kv_type_name(dtx_kv_type t) { return t == DTX_KV_BF16 ? "bf16" : t == DTX_KV_FP32 ? "fp32" : "unknown"; }

dtx_kv_type dtx_kv_type_for(const dtx_model *m) {
    if (!m || m->attn_quant_bits) return DTX_KV_FP32;
    return m->wquant != DTX_WQ_NONE || m->in_place ? DTX_KV_BF16 : DTX_KV_FP32;
}

dtx_status dtx_kv_type_parse(const char *s, dtx_kv_type *out) {
    if (s && !strcmp(s, "fp32")) *out = DTX_KV_FP32;
    else if (s && !strcmp(s, "bf16")) *out = DTX_KV_BF16;
    else return dtx_fail(DTX_ERR_ARG, "unknown KV cache type '%s' (fp32 or bf16)", s ? s : "(null)");
    return DTX_OK;
}

/* A bf16 cache's rows meet only the row kernels of plain logits. */
static dtx_status check_kv_type(const dtx_model *m, const dtx_kvcache *c, const char *what) {
    if (c->kv_type == DTX_KV_BF16 && m->attn_quant_bits)
        return dtx_fail(DTX_ERR_ARG,
                        "%s: a bf16 KV cache cannot run quantised attention logits (%d bits); use an fp32 cache",
                        what, m->attn_quant_bits);
    return DTX_OK;
}

/* Appends tokens [n] at positions c->len ..; logits of the last (optional). */
static dtx_status step(dtx_model *m, dtx_kvcache *c, const int32_t *tokens, int64_t n, real *logits) {
    const dtx_config *cfg = &m->cfg;
    dtx_status st;
    if ((st = check_shape(m, c))) return st;
    if (n < 1) return dtx_fail(DTX_ERR_ARG, "prefill needs at least one token, got %lld", (long long)n);
    if (n > c->max_len - c->len)
        return dtx_fail(DTX_ERR_ARG,
                        "KV cache full: %lld cached + %lld new tokens exceed its %lld positions (max_seq_len %lld)",
                        (long long)c->len, (long long)n, (long long)c->max_len, (long long)cfg->max_seq_len);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab_size)
            return dtx_fail(DTX_ERR_ARG, "token id %lld at position %lld is out of range [0, %lld)",
                            (long long)tokens[i], (long long)(c->len + i), (long long)cfg->vocab_size);
    if ((st = check_kv_type(m, c, n == 1 ? "decode" : "prefill"))) return st;
    const int64_t pos0 = c->len, D = cfg->dim, KV = m->kv_dim, L = cfg->n_layers;
    const int64_t ML = c->max_len;
    const int flash = pos0 == 0 && n > 1;
    if ((st = ensure_rows(m, c, n, flash, 1))) return st;
    if (pos0 == 0) c->wbf_valid = 0; /* a new sequence: the weights may have changed */
#ifndef DTX_DOUBLE
    /* the one-row products (decode steps, a prefill's logits) read the bf16 copy */
    if (m->precision == DTX_PREC_BF16 && !m->qw && (n == 1 || logits) && (st = ensure_bf16(m, c))) return st;
#endif

    dtx_model_embed(m, c->x, tokens, n);
    /* one layer is block.c's walker over the cache's row buffers: x_mid and the output in place in x, the
     * gate in place in h, k and v straight into the cache's rows pos0 .. */
    dtx_layer_acts la = {.x_mid = c->x, .xn1 = c->xn, .rstd1 = c->rstd, .q = c->q, .attn_y = c->att,
                         .attn_a = c->att2, .lam = c->lam, .xn2 = c->xn, .rstd2 = c->rstd, .h1 = c->h, .h3 = c->h3,
                         .g = c->h,
                         .att = {.att = NULL, .lse = c->lse, .o1 = c->o1, .o2 = c->o2, .rstd = c->orstd,
                                 .work = c->work}};
    const int bf16 = c->kv_type == DTX_KV_BF16;
    dtx_block_run run = {.B = 1, .T = n, .pos0 = pos0, .generation = 1,
                         .mode = flash ? DTX_BLOCK_OWN_KEYS : DTX_BLOCK_CACHE, .scores = c->scores,
                         .scratch = c->tmp, .ffn_rows = c->ffn_rows, .linear = cache_linear,
                         .linear_shared = cache_linear_shared, .ctx = c,
                         .kv_bf16 = bf16};
    for (int64_t l = 0; l < L; l++) {
        const size_t at = (size_t)(l * ML * KV);
        if (bf16) { /* k and v made in the staging rows, stored rounded by the block */
            la.k = c->kb, la.v = c->vb;
            run.k16 = c->k16 + at, run.v16 = c->v16 + at;
        } else {
            real *kc = c->k + at, *vc = c->v + at;
            la.k = kc + (size_t)(pos0 * KV);
            la.v = vc + (size_t)(pos0 * KV);
            run.k_cache = kc;
            run.v_cache = vc;
        }
        dtx_block_forward(m, l, &run, &la, c->x, c->x);
        if (c->hooks && c->hooks->layer_qk) c->hooks->layer_qk(c->hooks->ctx, l, la.q, la.k, n);
    }
    if (c->hooks && c->hooks->final) c->hooks->final(c->hooks->ctx, c->x, n);
    c->len += n;
    if (logits) dtx_block_head(m, &run, logits, c->xn, c->rstd, c->x + (n - 1) * D, 1);
    return DTX_OK;
}

/* One-row steps run their parallel work on the spinning team alone (common/team.h). */
static dtx_status step_marked(dtx_model *m, dtx_kvcache *c, const int32_t *tokens, int64_t n, real *logits) {
    const int prev = dtx_team_step(n == 1);
    dtx_status st = step(m, c, tokens, n, logits);
    dtx_team_step(prev);
    return st;
}

dtx_status dtx_model_prefill(dtx_model *m, dtx_kvcache *c, const int32_t *tokens, int64_t n, dtx_real *logits_last) {
    return step_marked(m, c, tokens, n, logits_last);
}

dtx_status dtx_model_decode(dtx_model *m, dtx_kvcache *c, int32_t token, dtx_real *logits) {
    if (c->len >= c->max_len)
        return dtx_fail(DTX_ERR_ARG, "KV cache full: all %lld positions are used (max_seq_len %lld)",
                        (long long)c->max_len, (long long)m->cfg.max_seq_len);
    return step_marked(m, c, &token, 1, logits);
}

dtx_status dtx_model_decode_batch(dtx_model *m, dtx_kvcache *const *caches, const int32_t *tokens, int64_t n,
                                  dtx_real *logits) {
    const dtx_config *cfg = &m->cfg;
    dtx_status st;
    if (n < 1) return dtx_fail(DTX_ERR_ARG, "a batched decode step needs at least one sequence, got %lld", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const dtx_kvcache *ci = caches[i];
        if (!ci) return dtx_fail(DTX_ERR_ARG, "batched decode: sequence %lld has no KV cache", (long long)i);
        if ((st = check_shape(m, ci))) return st;
        if (ci->len >= ci->max_len)
            return dtx_fail(DTX_ERR_ARG, "batched decode: the KV cache of sequence %lld is full (%lld positions)",
                            (long long)i, (long long)ci->max_len);
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab_size)
            return dtx_fail(DTX_ERR_ARG, "batched decode: token id %lld of sequence %lld is out of range [0, %lld)",
                            (long long)tokens[i], (long long)i, (long long)cfg->vocab_size);
        for (int64_t j = 0; j < i; j++)
            if (caches[j] == ci)
                return dtx_fail(DTX_ERR_ARG, "batched decode: sequences %lld and %lld share one KV cache",
                                (long long)j, (long long)i);
        if (ci->kv_type != caches[0]->kv_type)
            return dtx_fail(DTX_ERR_ARG, "batched decode: sequence %lld's KV cache is %s, sequence 0's %s",
                            (long long)i, dtx_kv_type_name(ci->kv_type), dtx_kv_type_name(caches[0]->kv_type));
    }
    dtx_kvcache *c = caches[0]; /* hosts the step's row buffers */
    if ((st = check_kv_type(m, c, "batched decode"))) return st;
    const int64_t D = cfg->dim, KV = m->kv_dim, L = cfg->n_layers;
    if ((st = ensure_rows(m, c, n, 0, n))) return st;
    if (c->len == 0) c->wbf_valid = 0; /* as step(): a new sequence, the weights may have changed */
#ifndef DTX_DOUBLE
    if (m->precision == DTX_PREC_BF16 && !m->qw && (st = ensure_bf16(m, c))) return st;
#endif
    for (int64_t i = 0; i < n; i++) c->bpos[i] = caches[i]->len, c->bscores[i] = caches[i]->scores;
    dtx_model_embed(m, c->x, tokens, n);
    dtx_layer_acts la = {.x_mid = c->x, .xn1 = c->xn, .rstd1 = c->rstd, .q = c->q, .k = c->kb, .v = c->vb,
                         .attn_y = c->att, .attn_a = c->att2, .lam = c->lam, .xn2 = c->xn, .rstd2 = c->rstd,
                         .h1 = c->h, .h3 = c->h3, .g = c->h};
    dtx_block_run run = {.B = n, .T = 1, .generation = 1, .mode = DTX_BLOCK_BATCH, .row_pos = c->bpos,
                         .row_k = c->bk, .row_v = c->bv, .row_scores = c->bscores, .scratch = c->tmp,
                         .ffn_rows = c->ffn_rows,
                         .linear = cache_linear, .ctx = c, .kv_bf16 = c->kv_type == DTX_KV_BF16,
                         .row_k16 = c->bk16, .row_v16 = c->bv16};
    c->batch = 1;
    const int prev_step = dtx_team_step(1);
    for (int64_t l = 0; l < L; l++) {
        for (int64_t i = 0; i < n; i++) {
            size_t at = (size_t)(l * caches[i]->max_len * KV);
            if (run.kv_bf16) c->bk16[i] = caches[i]->k16 + at, c->bv16[i] = caches[i]->v16 + at;
            else c->bk[i] = caches[i]->k + at, c->bv[i] = caches[i]->v + at;
        }
        dtx_block_forward(m, l, &run, &la, c->x, c->x);
    }
    if (logits) dtx_block_head(m, &run, logits, c->xn, c->rstd, c->x, n);
    dtx_team_step(prev_step);
    c->batch = 0;
    for (int64_t i = 0; i < n; i++) caches[i]->len++;
    (void)D;
    return DTX_OK;
}
