/* The linear layers' entry points (model.h: dtx_model_linear for several
 * rows, dtx_model_linear_row for one; the embedding rows; W8A8's rounding
 * of q and k) and the quantised weights behind them: their layout in one
 * allocation, quantising a model in place.
 *
 * Several rows (a forward, a prefill): an fp32 or bf16 model multiplies
 * with dtx_matmul_forward_pre; a quantised one runs the decode step's
 * batched one-row kernels (4-bit weights, and 8-bit ones up to
 * QBATCH_MAX_ROWS_8BIT rows: the same bits as decoding), or dequantises
 * QBLOCK_FLOATS worth of weight rows at a time into the model's scratch and
 * multiplies them with the inputs rounded the way the one-row kernels see
 * them (bf16 for a16, the int8 grid for W8A8), so a prefill and a decode
 * step compute the same products to rounding. One row (a decode step): the memory-bound
 * one-row kernels of kernels.h, on the codes, a bf16 copy or fp32. */
#include "common/profile.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul_dnnl.h"
#include "model/model.h"

/* Weight rows dequantised per block (4 MiB of floats) and input rows per block. */
#define QBLOCK_FLOATS ((int64_t)1 << 20)
#define QROWS 256

const dtx_qweight *dtx_model_qweight(const dtx_model *m, size_t off) {
    if (!m->qw) return NULL;
    int lo = 0, hi = m->n_tensors - 1; /* tensors are in offset order */
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        size_t o = m->tensors[mid].offset;
        if (o == off) return m->qw[mid].bits ? &m->qw[mid] : NULL;
        if (o < off) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

#ifndef DTX_DOUBLE
/* Rows [n0, n0 + nb) of w, dequantised into out [nb, K]. */
static void dequant_rows(const dtx_qweight *w, float *out, int64_t n0, int64_t nb) {
    const dtx_qformat *f = dtx_qformat_of(w->bits);
    f->dequantize(out, (const uint8_t *)w->q + n0 * f->row_bytes(w->K), w->scale + n0 * f->row_scales(w->K), nb,
                  w->K);
}

void dtx_model_round_inputs(dtx_wquant scheme, int fp16, float scale, float *out, const float *x, int64_t n) {
    if (scheme != DTX_WQ_W8A8 || !(scale > 0)) { /* a16; W8A8's scale 0: this input stays 16-bit */
        if (fp16) dtx_f16_round(out, x, n);
        else dtx_bf16_round_portable(out, x, (size_t)n);
        return;
    }
    float inv = 1.0f / scale;
    for (int64_t k = 0; k < n; k++) {
        float r = rintf(x[k] * inv);
        out[k] = scale * (r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
    }
}

static int64_t block_rows(int64_t K) { return K >= QBLOCK_FLOATS ? 1 : QBLOCK_FLOATS / K; }

/* The scratch the several-row products of m need: a block of weight rows,
 * a block of input rows and their product. */
static size_t qscratch_need(const dtx_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_qweight *w = &m->qw[i];
        if (!w->bits) continue;
        int64_t nb = block_rows(w->K);
        if (nb > w->N) nb = w->N;
        size_t need = (size_t)(nb * w->K + QROWS * w->K + QROWS * nb);
        if (need > n) n = need;
    }
    return n;
}

static void linear_rows_quant(const dtx_model *m, float *out, const float *x, int64_t nb, const dtx_qweight *w,
                              float *xrows);

/* Up to this many rows an 8-bit weight goes to the decode step's batched
 * one-row kernels (each block of weight rows from memory once, in L2 while
 * every input passes over it); more go through dequantised blocks and the
 * matmul. 4-bit weights always take the batched kernels. Measured (Zen 5,
 * 2 threads, 2026-12-04, prefill of n tokens, batched against dequantised
 * element by element on one thread, as it was): 110M DiffLlama shape w8a16
 * 8 tokens 24 against 76 ms, 64: 104 / 150; w4a16 8: 17 / 144, 128: 172 /
 * 255, 512: 579 / 667; 0.8B w4a16 8: 100 / 1,169, 512: 2,534 / 4,487. With
 * the dequantising vectorised over the threads the 8-bit crossover depends
 * on the shape: at 128 rows 110M w8a16 142 against 119–129 ms, 0.8B
 * 857–912 against 1,012–1,052; at 256 rows 0.8B 1,601 against 1,585; so
 * 128. The batched rows have the decode step's bits. A bf16 model's
 * weights in place are widened block by block (over the threads) and
 * multiplied at any row count: at 4 / 8 / 16 rows 135–139 / 155–158 /
 * 202–209 ms on a 0.8B BF16 file, against 151–154 / 222–234 / 421–452
 * batched. */
#define QBATCH_MAX_ROWS_8BIT 128

static void quant_rows(const dtx_model *m, float *out, const float *x, const dtx_qweight *w, int64_t M) {
    int64_t K = w->K, N = w->N, nb = block_rows(K);
    if (w->bits == 4 || (w->bits == 8 && M <= QBATCH_MAX_ROWS_8BIT)) {
        for (int64_t m0 = 0; m0 < M; m0 += QROWS) { /* the scratch holds QROWS input rows */
            int64_t mb = M - m0 < QROWS ? M - m0 : QROWS;
            linear_rows_quant(m, out + m0 * N, x + m0 * K, mb, w, m->qscratch);
        }
        return;
    }
    if (nb > N) nb = N;
    float *wb = m->qscratch, *xb = wb + nb * K, *ob = xb + QROWS * K;
    /* bf16 in place: the inputs as the model's precision sees them, and its
     * matmul (the weights are bf16 values already) */
    int in_place = w->bits == 16;
    dtx_precision prec = in_place ? m->precision : DTX_PREC_FP32;
    for (int64_t m0 = 0; m0 < M; m0 += QROWS) {
        int64_t mb = M - m0 < QROWS ? M - m0 : QROWS;
        if (!in_place) dtx_model_round_inputs(m->wquant, m->act_fp16, w->in_scale, xb, x + m0 * K, mb * K);
        else memcpy(xb, x + m0 * K, sizeof(float) * (size_t)(mb * K));
        for (int64_t n0 = 0; n0 < N; n0 += nb) {
            int64_t cols = N - n0 < nb ? N - n0 : nb;
            dequant_rows(w, wb, n0, cols);
            dtx_matmul_forward(ob, xb, wb, mb, K, cols, prec);
            for (int64_t r = 0; r < mb; r++) memcpy(out + (m0 + r) * N + n0, ob + r * cols, sizeof(float) * (size_t)cols);
        }
    }
}

static void linear_rows_quant(const dtx_model *m, float *out, const float *x, int64_t nb, const dtx_qweight *w,
                              float *xrows) {
    int64_t K = w->K, N = w->N;
    if (w->bits == 16) { /* bf16 in place: x as the model's precision sees it */
        if (m->precision == DTX_PREC_BF16) dtx_bf16_round_portable(xrows, x, (size_t)(nb * K)), x = xrows;
        dtx_gemv_bf16_batch(out, x, nb, w->q, K, N);
        return;
    }
    if (m->wquant == DTX_WQ_W8A8 && w->in_scale > 0) {
        int8_t *xq = (int8_t *)xrows; /* nb·K bytes fit in nb·K floats */
        dtx_a8_quantize(xq, x, nb * K, w->in_scale);
        dtx_gemv_q8a8_batch(out, xq, nb, w->in_scale, (const int8_t *)w->q, w->scale, K, N);
        return;
    }
    dtx_model_round_inputs(m->wquant, m->act_fp16, 0, xrows, x, nb * K);
    dtx_qformat_of(w->bits)->gemv_batch(out, xrows, nb, w->q, w->scale, K, N);
}
#endif

void dtx_model_linear(const dtx_model *m, real *out, const real *x, size_t off, int64_t M, int64_t K, int64_t N,
                      unsigned pre) {
#ifndef DTX_DOUBLE
    const dtx_qweight *w = dtx_model_qweight(m, off);
    if (w) {
        quant_rows(m, out, x, w, M);
        return;
    }
#endif
    dtx_matmul_forward_pre(out, x, m->params + off, M, K, N, m->precision, pre);
}

int64_t dtx_model_linear_row_block(const dtx_model *m) {
#ifndef DTX_DOUBLE
    return m->qw ? QROWS : 0;
#else
    (void)m;
    return 0;
#endif
}

void dtx_model_linear_rows(const dtx_model *m, real *out, const real *x, int64_t nb, size_t off, int64_t K, int64_t N,
                           const uint16_t *wbf, real *xrows) {
#ifndef DTX_DOUBLE
    const dtx_qweight *w = dtx_model_qweight(m, off);
    if (w) { /* bf16 or int8 x against the int8 / 4-bit codes */
        linear_rows_quant(m, out, x, nb, w, xrows);
        return;
    }
    if (m->precision == DTX_PREC_BF16) { /* bf16(x) · the bf16 copy of w */
        dtx_bf16_round_portable(xrows, x, (size_t)(nb * K));
        dtx_gemv_bf16_batch(out, xrows, nb, wbf + off, K, N);
        return;
    }
#else
    (void)wbf, (void)xrows;
#endif
    dtx_gemv_batch(out, x, nb, m->params + off, K, N);
}

/* Parts whose inputs are treated alike share one rounded copy (or, W8A8, one int8 copy each): a16's
 * int8 and 4-bit codes read the same bf16-rounded x. */
#ifndef DTX_DOUBLE
static int input_class(dtx_rows_kind k) { return k == DTX_ROWS_Q4 ? DTX_ROWS_Q8 : k; }
#endif

void dtx_model_linear_row_parts(const dtx_model *m, real *const *out, const real *x, const size_t *off,
                                const int64_t *N, int n, int64_t K, const uint16_t *wbf, real *xrows) {
    dtx_gemv_part p[4];
    int fused = n >= 1 && n <= 4;
    for (int i = 0; fused && i < n; i++) {
        p[i] = (dtx_gemv_part){.kind = DTX_ROWS_REAL, .out = out[i], .x = x, .w = m->params + off[i], .N = N[i]};
#ifndef DTX_DOUBLE
        const dtx_qweight *w = dtx_model_qweight(m, off[i]);
        const int w8a8 = w && w->bits != 16 && m->wquant == DTX_WQ_W8A8 && w->in_scale > 0;
        if (!w && m->precision == DTX_PREC_BF16) /* bf16(x) · the bf16 copy of w */
            p[i].kind = DTX_ROWS_BF16, p[i].x = xrows, p[i].w = wbf + off[i];
        else if (w && w->bits == 16) /* bf16 in place: x as the model's precision sees it */
            p[i].kind = DTX_ROWS_BF16, p[i].x = m->precision == DTX_PREC_BF16 ? xrows : x, p[i].w = w->q;
        else if (w8a8) /* each its own int8 input: n·K bytes fit in K floats */
            p[i].kind = DTX_ROWS_Q8A8, p[i].x = (int8_t *)xrows + i * K, p[i].xscale = w->in_scale, p[i].w = w->q,
            p[i].scale = w->scale;
        else if (w) /* a16: x rounded as the codes' kernels see it */
            p[i].kind = w->bits == 8 ? DTX_ROWS_Q8 : DTX_ROWS_Q4, p[i].x = xrows, p[i].w = w->q, p[i].scale = w->scale;
        if (w && (w->K != K || w->N != N[i] || (w->bits != 16 && w->bits != 8 && w->bits != 4))) fused = 0;
        if (i > 0 && input_class(p[i].kind) != input_class(p[0].kind)) fused = 0;
#endif
    }
    if (!fused) {
        for (int i = 0; i < n; i++) dtx_model_linear_rows(m, out[i], x, 1, off[i], K, N[i], wbf, xrows);
        return;
    }
#ifndef DTX_DOUBLE
    /* the inputs, rounded once for every part (as dtx_model_linear_rows rounds them for each) */
    if (p[0].kind == DTX_ROWS_Q8A8)
        for (int i = 0; i < n; i++) dtx_a8_quantize((int8_t *)xrows + i * K, x, K, p[i].xscale);
    else if (p[0].kind == DTX_ROWS_Q8 || p[0].kind == DTX_ROWS_Q4)
        dtx_model_round_inputs(m->wquant, m->act_fp16, 0, xrows, x, K);
    else if (p[0].kind == DTX_ROWS_BF16 && p[0].x == xrows)
        dtx_bf16_round_portable(xrows, x, (size_t)K);
#else
    (void)wbf, (void)xrows;
#endif
    dtx_gemv_parts(p, n, K);
}

static void model_embed_run(const dtx_model *m, real *out, const int32_t *tokens, int64_t n) {
    int64_t D = m->cfg.dim;
#ifndef DTX_DOUBLE
    const dtx_qweight *w = dtx_model_qweight(m, m->tok_emb);
    if (w) {
        for (int64_t i = 0; i < n; i++) dequant_rows(w, out + i * D, tokens[i], 1);
        return;
    }
#endif
    dtx_embedding_forward(out, tokens, m->params + m->tok_emb, n, D);
}

void dtx_model_embed(const dtx_model *m, real *out, const int32_t *tokens, int64_t n) {
    DTX_PROF(DTX_PROF_EMBEDDING, 0, model_embed_run(m, out, tokens, n));
}

void dtx_model_round_qk(const dtx_model *m, int64_t l, real *q, int64_t nq, real *k, int64_t nk) {
#ifndef DTX_DOUBLE
    if (m->wquant != DTX_WQ_W8A8) return;
    if (m->qk_scale[2 * l] > 0) dtx_model_round_inputs(m->wquant, 0, m->qk_scale[2 * l], q, q, nq);
    if (m->qk_scale[2 * l + 1] > 0) dtx_model_round_inputs(m->wquant, 0, m->qk_scale[2 * l + 1], k, k, nk);
#else
    (void)m, (void)l, (void)q, (void)nq, (void)k, (void)nk;
#endif
}

/* ---- the quantised weights' storage and quantising */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The memory weights in place lie in, given back (dtx_unmap_file frees a heap one). */
void dtx_model_release_wmaps(dtx_model *m) {
    for (int i = 0; i < m->n_wmaps; i++) dtx_unmap_file(&m->wmaps[i]);
    free(m->wmaps);
    m->wmaps = NULL, m->n_wmaps = 0;
}


int dtx_model_tensor_bits(const dtx_model *m, dtx_wquant scheme, int i) {
    const dtx_tensor_info *t = &m->tensors[i];
    if (t->ndim != 2 || scheme == DTX_WQ_NONE) return 0;
    return scheme == DTX_WQ_W4A16 && t->offset != m->tok_emb && t->offset != m->out_w ? 4 : 8;
}

size_t dtx_model_qweight_layout(dtx_model *m, dtx_wquant scheme, unsigned char *base) {
    size_t off = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        dtx_qweight *w = &m->qw[i];
        if (t->ndim != 2) continue;
        int64_t N = t->shape[0], K = t->shape[1];
        int bits = dtx_model_tensor_bits(m, scheme, i);
        const dtx_qformat *f = dtx_qformat_of(bits);
        size_t qb = (size_t)(N * f->row_bytes(K)), sb = sizeof(float) * (size_t)(N * f->row_scales(K));
        w->bits = bits, w->N = N, w->K = K;
        if (base) {
            w->q = base + off;
            w->scale = (float *)(void *)(base + off + align64(qb));
        }
        off += align64(qb) + align64(sb);
    }
    return off;
}

dtx_status dtx_model_quantize_weights(dtx_model *m, dtx_wquant scheme, const float *const *clip,
                                      const float *in_scales, const float *qk) {
#ifdef DTX_DOUBLE
    (void)m, (void)scheme, (void)clip, (void)in_scales, (void)qk;
    return dtx_fail(DTX_ERR_ARG, "quantised models need the float build");
#else
    if (scheme != DTX_WQ_W8A16 && scheme != DTX_WQ_W8A8 && scheme != DTX_WQ_W4A16)
        return dtx_fail(DTX_ERR_ARG, "unknown weight quantisation scheme %d", (int)scheme);
    if (m->wquant != DTX_WQ_NONE)
        return dtx_fail(DTX_ERR_ARG, "the model is already quantised (%s)", dtx_wquant_name(m->wquant));
    if (scheme == DTX_WQ_W8A8 && (!in_scales || !qk))
        return dtx_fail(DTX_ERR_ARG, "w8a8 needs the static input scales of every linear layer and of q, k");
    if (scheme == DTX_WQ_W8A8)
        for (int i = 0; i < m->n_tensors; i++)
            if (m->tensors[i].ndim == 2 && (m->tensors[i].offset != m->tok_emb || m->cfg.tie_embeddings) &&
                !(in_scales[i] >= 0 && isfinite(in_scales[i])))
                return dtx_fail(DTX_ERR_ARG, "w8a8: the input scale of '%s' is %g (needs a number >= 0)",
                                m->tensors[i].name, (double)in_scales[i]);
    for (int64_t j = 0; scheme == DTX_WQ_W8A8 && j < 2 * m->cfg.n_layers; j++)
        if (!(qk[j] >= 0 && isfinite(qk[j])))
            return dtx_fail(DTX_ERR_ARG, "w8a8: q/k scale %lld is %g (needs a number >= 0)", (long long)j, (double)qk[j]);
    /* weights in place: quantised a tensor at a time from the file, each
     * widened into one buffer, its pages given back once coded */
    dtx_qweight *src = NULL;
    dtx_model_settle_stop(m); /* the weights read from where they are now */
    if (m->in_place) {
        src = m->qw;
        m->qw = NULL;
        free(m->qscratch);
        m->qscratch = NULL;
    }
    dtx_status st = dtx_model_alloc_quant(m, scheme, 0);
    if (st) {
        free(src); /* the model is unusable now; the caller frees it */
        return st;
    }
    float *tmp = NULL;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        dtx_qweight *w = &m->qw[i];
        if (!w->bits) continue;
        const float *p = m->params + t->offset;
        if (src && src[i].bits == 16) {
            if (!tmp) {
                size_t most = 0;
                for (int k = 0; k < m->n_tensors; k++)
                    if (src[k].bits == 16 && m->tensors[k].numel > most) most = m->tensors[k].numel;
                if (!(tmp = dtx_alloc(most, sizeof(float)))) {
                    free(src);
                    return dtx_fail(DTX_ERR_NOMEM, "out of memory widening the weights to quantise");
                }
            }
            dequant_rows(&src[i], tmp, 0, src[i].N);
            p = tmp;
        }
        const dtx_qformat *f = dtx_qformat_of(w->bits);
        int64_t rb = f->row_bytes(w->K), rs = f->row_scales(w->K);
        for (int64_t n = 0; n < w->N; n++) /* a clip factor per scale */
            f->quantize_row((uint8_t *)w->q + n * rb, w->scale + n * rs, p + n * w->K, w->K,
                            clip && clip[i] ? clip[i] + n * rs : NULL);
        int reads_input = t->offset != m->tok_emb || m->cfg.tie_embeddings; /* an untied embedding is a lookup */
        w->in_scale = scheme == DTX_WQ_W8A8 && reads_input ? in_scales[i] : 0;
        if (src && src[i].bits == 16) dtx_drop_pages(src[i].q, 2 * t->numel); /* coded: its bf16 is not needed */
    }
    free(tmp);
    if (src) { /* every 2-D weight is coded now: the file goes (their params were never written) */
        free(src);
        m->in_place = 0;
        dtx_model_release_wmaps(m);
        dtx_model_settle_release(m);
    } else {
        dtx_model_release_quantised_fp32(m);
    }
    if (scheme == DTX_WQ_W8A8) memcpy(m->qk_scale, qk, sizeof(float) * 2 * (size_t)m->cfg.n_layers);
    return DTX_OK;
#endif
}

dtx_status dtx_model_alloc_quant(dtx_model *m, dtx_wquant scheme, int codes_elsewhere) {
#ifdef DTX_DOUBLE
    (void)m, (void)scheme, (void)codes_elsewhere;
    return dtx_fail(DTX_ERR_ARG, "quantised models need the float build");
#else
    m->qw = calloc((size_t)m->n_tensors, sizeof *m->qw);
    m->qk_scale = calloc(2 * (size_t)m->cfg.n_layers, sizeof(float));
    if (!m->qw || !m->qk_scale) return dtx_fail(DTX_ERR_NOMEM, "out of memory for the quantised weights");
    size_t bytes = dtx_model_qweight_layout(m, scheme, NULL); /* every qw's bits and shape */
    if (!codes_elsewhere) {
        /* zeroed (the padding too), resident once written, in 2 MiB pages (weights_memory.c) */
        m->qmem = dtx_alloc_huge(bytes, &m->qmem_bytes);
        if (!m->qmem) return dtx_fail(DTX_ERR_NOMEM, "out of memory for %zu bytes of quantised weights", bytes);
        dtx_model_qweight_layout(m, scheme, m->qmem);
    }
    m->qscratch_n = qscratch_need(m);
    m->qscratch = dtx_alloc(m->qscratch_n, sizeof(real));
    if (!m->qscratch) return dtx_fail(DTX_ERR_NOMEM, "out of memory for the quantised products' scratch");
    m->wquant = scheme;
    return DTX_OK;
#endif
}

void dtx_model_release_quantised_fp32(dtx_model *m) {
    for (int i = 0; m->qw && i < m->n_tensors; i++)
        if (m->qw[i].bits) dtx_release_zero(m->params + m->tensors[i].offset, sizeof(real) * m->tensors[i].numel);
}

void dtx_model_free_quant(dtx_model *m) {
    dtx_model_settle_release(m); /* first: its thread reads the memory freed below */
    free(m->qw);
    free(m->qk_scale);
    dtx_free_lazy_zero(m->qmem, m->qmem_bytes, 1);
    m->qmem_bytes = 0;
    free(m->qscratch);
    m->qw = NULL, m->qk_scale = NULL, m->qmem = NULL, m->qscratch = NULL;
    m->wquant = DTX_WQ_NONE;
    m->in_place = 0;
    dtx_model_release_wmaps(m);
}

size_t dtx_model_weight_bytes(const dtx_model *m) {
    size_t n = m->n_params, held = 0; /* fp32 params; the bytes of weights held otherwise (codes and scales, bf16) */
    for (int i = 0; m->qw && i < m->n_tensors; i++) {
        const dtx_qweight *w = &m->qw[i];
        if (!w->bits) continue;
        n -= m->tensors[i].numel;
        const dtx_qformat *f = dtx_qformat_of(w->bits);
        held += (size_t)(w->N * f->row_bytes(w->K)) + sizeof(float) * (size_t)(w->N * f->row_scales(w->K));
    }
    return n * sizeof(float) + held;
}

int dtx_weights_copy_asked(void) {
    const char *copy = getenv("DTX_WEIGHTS_COPY");
    return copy && strcmp(copy, "1") == 0;
}

static int bf16_not_finite(const void *p, size_t lo, size_t hi) {
    const uint16_t *v = p;
    unsigned bad = 0;
#pragma omp simd reduction(| : bad)
    for (size_t k = lo; k < hi; k++) bad |= (v[k] & 0x7f80u) == 0x7f80u; /* an exponent of all ones */
    return bad != 0;
}

dtx_status dtx_bf16_check_finite(const uint16_t *v, size_t n, const char *where, const char *name) {
    enum { BLOCK = 1 << 16 };
    const size_t first = dtx_first_bad_block(v, n, BLOCK, bf16_not_finite);
    for (size_t k = first == SIZE_MAX ? n : first * BLOCK; k < n; k++)
        if ((v[k] & 0x7f80) == 0x7f80)
            return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' holds %s at element %zu: not a usable model (a "
                            "diverged run's weights?)", where, name, (v[k] & 0x7f) ? "NaN" : "an infinity", k);
    return DTX_OK;
}

#ifndef DTX_DOUBLE
static const float NO_SCALE[1]; /* bf16 in place has no scales; a pointer all the same */
#endif

dtx_status dtx_model_own_weights(dtx_model *m, dtx_mapped *mem) {
    dtx_mapped *w = realloc(m->wmaps, sizeof *w * (size_t)(m->n_wmaps + 1));
    if (!w) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    m->wmaps = w;
    m->wmaps[m->n_wmaps++] = *mem;
    *mem = (dtx_mapped){0};
    return DTX_OK;
}

dtx_status dtx_model_use_in_place(dtx_model *m, const uint16_t *const *data) {
#ifdef DTX_DOUBLE
    (void)m, (void)data;
    return dtx_fail(DTX_ERR_ARG, "weights in place need the float build");
#else
    if (m->qw) return dtx_fail(DTX_ERR_ARG, "the model's weights are quantised or in place already");
    if (!(m->qw = calloc((size_t)m->n_tensors, sizeof *m->qw))) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_tensors; i++)
        if (data[i] && m->tensors[i].ndim == 2)
            m->qw[i] = (dtx_qweight){.bits = 16, .N = m->tensors[i].shape[0], .K = m->tensors[i].shape[1],
                                     .q = (void *)(uintptr_t)data[i], .scale = (float *)(uintptr_t)NO_SCALE};
    m->qscratch_n = qscratch_need(m);
    if (!(m->qscratch = dtx_alloc(m->qscratch_n, sizeof(real)))) {
        dtx_model_free_quant(m);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for the products' scratch");
    }
    m->in_place = 1;
    return DTX_OK;
#endif
}

dtx_status dtx_model_materialize(dtx_model *m) {
    if (!m->in_place) return DTX_OK;
#ifndef DTX_DOUBLE
    for (int i = 0; i < m->n_tensors; i++)
        if (m->qw[i].bits == 16) dequant_rows(&m->qw[i], m->params + m->tensors[i].offset, 0, m->qw[i].N);
#endif
    dtx_model_free_quant(m); /* unmaps the file */
    return DTX_OK;
}

int dtx_model_weights_in_place(const dtx_model *m) { return m->in_place; }

#ifndef DTX_DOUBLE
const float *dtx_model_weight_f32(const dtx_model *m, int i, float **tmp) {
    const dtx_tensor_info *t = &m->tensors[i];
    if (m->in_place && m->qw[i].bits == 16) {
        if (!*tmp && !(*tmp = dtx_alloc(t->numel, sizeof(float)))) {
            dtx_fail(DTX_ERR_NOMEM, "out of memory widening '%s'", t->name);
            return NULL;
        }
        dequant_rows(&m->qw[i], *tmp, 0, m->qw[i].N);
        return *tmp;
    }
    return m->params + t->offset;
}
#endif


static const char *const WQ_NAMES[] = {"none", "w8a16", "w8a8", "w4a16"};

dtx_wquant dtx_model_wquant(const dtx_model *m) { return m->wquant; }
int dtx_model_act_fp16(const dtx_model *m) { return m->wquant != DTX_WQ_W8A8 && m->wquant != DTX_WQ_NONE && m->act_fp16; }
const char *dtx_wquant_name(dtx_wquant q) { return (int)q >= 0 && (int)q <= 3 ? WQ_NAMES[q] : "unknown"; }
int dtx_wquant_parse(const char *s, dtx_wquant *out) {
    for (int i = 1; i <= 3; i++)
        if (s && !strcmp(s, WQ_NAMES[i])) {
            *out = (dtx_wquant)i;
            return 1;
        }
    return 0;
}
