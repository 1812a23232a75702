/* The model object: configuration, the parameter table, one flat parameter
 * buffer with a parallel gradient buffer (same offsets), and the activations
 * of the last forward pass (kept for the backward). Internal. */
#ifndef DTX_MODEL_H
#define DTX_MODEL_H

#include "common/common.h"
#include "kernels/kernels.h"

/* Offsets (in elements) of one layer's tensors in params/grads. The λ
 * vectors are DIFF's, subln a variant's, wl (lambda_proj) DIFF2's. */
typedef struct dtx_settle dtx_settle; /* weights_memory.c */

typedef struct {
    size_t attn_norm, wq, wk, wv, wo, wl;
    size_t lq1, lk1, lq2, lk2, subln;
    size_t ffn_norm, w1, w3, w2;
} dtx_layer_offsets;

/* Activations of one layer for a batch of N = B·T rows. */
typedef struct {
    real *x_mid;   /* [N, D]  residual after attention                      */
    real *xn1;     /* [N, D]  attention_norm(x)                              */
    real *rstd1;   /* [N]                                                    */
    real *q;       /* [N, QD] after RoPE (QD = D, or 2D for DIFF2)           */
    real *k;       /* [N, KV] after RoPE                                     */
    real *v;       /* [N, KV]                                                */
    real *attn_y;  /* [N, D]  attention output before out_proj               */
    real *attn_a;  /* DIFF2: [N, 2D] the 2h heads' outputs before the pairs  */
    real *lam;     /* DIFF2 with lambda_proj: [N, h] λ logits xn1·wlᵀ        */
    dtx_attn_saved att;
    real *xn2;     /* [N, D]  ffn_norm(x_mid)                                */
    real *rstd2;   /* [N]                                                    */
    real *h1;      /* [N, F]  xn2 · w1ᵀ (gate)                               */
    real *h3;      /* [N, F]  xn2 · w3ᵀ (up)                                 */
    real *g;       /* [N, F]  silu(h1) ⊙ h3                                  */
    double lambda; /* DIFF: λ used by this forward                           */
} dtx_layer_acts;

typedef struct {
    int64_t B, T;          /* the shape these buffers were sized for      */
    dtx_attn_impl impl;    /* ... and the attention implementation        */
    int quant_bits, quant_tensor; /* ... and logit quantisation (work size) */
    dtx_precision precision;      /* ... and precision (bf16 attention needs more work) */
    unsigned pre;          /* DTX_MM_PRE_* of the last forward (emulated bf16) */
    size_t bytes;          /* size of mem                                 */
    size_t mapped;         /* mem's mapping (dtx_alloc_work), 0 for heap memory */
    real *mem;             /* one allocation holding everything below      */
    real *resid;           /* [L + 1, N, D]: block inputs, then the output */
    dtx_layer_acts *layers;
    real *xnf, *rstdf;     /* final norm [N, D], [N]                      */
    real *probs;           /* [N, V] logits, then softmax probabilities,
                              then (in the backward) dlogits              */
    /* backward scratch */
    real *dresid, *dx1, *dx2;  /* [N, D] each */
    real *dq, *dk, *dv;    /* [N, QD], [N, KV], [N, KV] */
    real *dA, *dlam;       /* DIFF2: [N, 2D], [N, h] */
    real *dh1, *dh3, *dg;  /* [N, F] each */
    int32_t *tokens, *targets; /* [N] copies of the last forward's batch */
    int has_targets;
} dtx_acts;

/* A quantised linear weight w [N, K] (kernels.h, "Quantised"): bits 8 (q
 * int8 [N, K], scale [N]) or 4 (q packed rows, scale [N, groups]); 0 for a
 * tensor kept in fp32. in_scale: W8A8's static scale of the layer's input
 * (x ≈ in_scale·xq; 0: the input stays 16-bit, bf16). */
typedef struct {
    int bits;
    int64_t N, K;
    void *q;
    float *scale;
    float in_scale;
} dtx_qweight;

struct dtx_model {
    dtx_config cfg;
    int64_t head_dim, kv_dim;
    int n_tensors;
    dtx_tensor_info *tensors;
    size_t n_params;
    real *params;
    real *grads;              /* NULL until the first backward; dtx_alloc_work (2 MiB pages) */
    size_t grads_mapped;      /* dtx_alloc_work's size for it */
    dtx_grads_ready_fn grads_ready; /* dtx_model_on_grads_ready's hook, or NULL */
    void *grads_ready_ctx;
    size_t tok_emb, final_norm, out_w; /* out_w == tok_emb when tied */
    dtx_layer_offsets *layers;
    real *rope_cos, *rope_sin; /* [max_seq_len, head_dim/2] */
    dtx_acts acts;
    dtx_precision precision;  /* of the matrix products, flash attention's too (default FP32) */
    dtx_attn_impl attn_impl;  /* FLASH by default; PLAIN is the reference  */
    int attn_quant_bits;      /* attention logits quantised to these bits; 0: off */
    dtx_quant_scope attn_quant_scope;
    /* quantised weights (DTX_WQ_NONE: every weight is in params) */
    dtx_wquant wquant;
    int act_fp16;             /* W8A16 / W4A16: inputs rounded to fp16, not bf16 */
    dtx_qweight *qw;          /* [n_tensors], parallel to tensors          */
    float *qk_scale;          /* W8A8: [n_layers, 2] static scales of q, k (0: not rounded) */
    void *qmem;               /* one allocation behind every qw's q, scale */
    size_t qmem_bytes;
    real *qscratch;           /* several-row products: dequantised weight rows, int8-rounded inputs, outputs */
    size_t qscratch_n;
    /* weights in place: a BF16 file's 2-D tensors read where they lie (qw
     * bits 16, wquant stays NONE, their params never filled); the memory
     * they lie in (a model file's mapping; a Hugging Face folder's shards
     * and the buffer of the tensors its import moved), owned here */
    int in_place;
    dtx_mapped *wmaps;
    int n_wmaps;
    /* the weights in qw on their way to memory of their own (weights_memory.c); NULL: none */
    dtx_settle *settle;
    /* metadata keys read from a file that difftx does not use: kept, and
     * written back on save (interop.md). */
    int n_extra_meta;
    char **extra_meta_keys, **extra_meta_values;
};

/* The attention call of layer l for a [B, T] batch with this λ: the
 * model's shapes, variant (subln, lambda_init) and run settings (attention
 * implementation, logit quantisation, precision). */
dtx_attn_dims dtx_model_attn_dims(const dtx_model *m, int64_t B, int64_t T, int64_t layer, double lambda);
/* Layer l's per-head norm weight, or NULL when the variant has none. */
const real *dtx_model_subln(const dtx_model *m, int64_t layer);
/* Allocates a model with the parameter table and zeroed parameters. */
dtx_status dtx_model_alloc(dtx_model **out, const dtx_config *c);
/* DTX_ERR_FORMAT naming the tensor and element when m holds a NaN or an
 * infinity (read from path): what every reader of weights checks. */
dtx_status dtx_model_check_finite(const dtx_model *m, const char *path);
/* λ of one DIFF layer from its four vectors; e1, e2 receive the exponentials. */
double dtx_model_lambda_parts(const dtx_model *m, int64_t layer, double *e1, double *e2);
dtx_status dtx_model_ensure_grads(dtx_model *m);
/* Chooses the attention implementation (tests compare the two). */
void dtx_model_set_attention(dtx_model *m, dtx_attn_impl impl);
void dtx_model_free_acts(dtx_model *m);
/* The config's interop.md metadata, pair i of DTX_CONFIG_META_KEYS:
 * *key and the value formatted into val (as model files store it, cap ≥
 * 32); returns 0 for a variant key at its default, which files omit. */
#define DTX_CONFIG_META_KEYS 18
int dtx_config_meta(const dtx_config *c, int i, const char **key, char *val, size_t cap);
/* Reads the variant keys (subln, lambda_init, v2_lambda) into c, c->arch already set:
 * defaults when absent, DTX_ERR_FORMAT naming the key for a value difftx
 * does not implement. */
struct dtx_st_file;
dtx_status dtx_config_variants_from_meta(const struct dtx_st_file *f, const char *path, dtx_config *c);
/* The quantised weight of the tensor at offset off, or NULL when the model
 * is not quantised or keeps that tensor in fp32. */
const dtx_qweight *dtx_model_qweight(const dtx_model *m, size_t off);
/* out [M, N] = x [M, K] · wᵀ, w the [N, K] weight at offset off: every
 * linear layer's forward goes through here (forward.c, generate.c). fp32 and
 * bf16 weights: dtx_matmul_forward_pre (pre: its DTX_MM_PRE_* flags).
 * Quantised ones: 4-bit weights, and 8-bit ones up to
 * QBATCH_MAX_ROWS_8BIT (linear.c) rows, through dtx_model_linear_rows (every
 * row the bits of its one-row product); more rows of an 8-bit weight
 * dequantised in blocks of rows into the model's scratch, the inputs
 * rounded to bf16 (a16) or to their int8 grid (W8A8), then the same fp32
 * product: what the one-row kernels compute, to rounding.
 * Float build only for quantised weights. */
void dtx_model_linear(const dtx_model *m, real *out, const real *x, size_t off, int64_t M, int64_t K, int64_t N,
                      unsigned pre);
/* The rows dtx_model_linear takes its input in, one block at a time, where
 * the model's weights are quantised or bf16 in place (each block of weight
 * rows dequantised or widened once per input block): a caller may split its
 * rows so without changing the work done; 0 where the products take every
 * row at once (fp32 weights, the double build). */
int64_t dtx_model_linear_row_block(const dtx_model *m);
/* nb rows each on its own, out [nb, N] = x [nb, K] · wᵀ, through the
 * memory-bound one-row kernels (a decode step: one row; a batched step of
 * several sequences: one per sequence, the weights read once for all, each
 * row's result the bits of its one-row product): a quantised weight's codes
 * (x rounded to bf16, or to int8 for W8A8), the bf16 copy wbf of the
 * parameters (same offsets) for bf16 products, else the fp32 weights.
 * xrows: scratch of nb·K values. */
void dtx_model_linear_rows(const dtx_model *m, real *out, const real *x, int64_t nb, size_t off, int64_t K, int64_t N,
                           const uint16_t *wbf, real *xrows);
/* The n one-row products of one input x [K] (a decode step's products that
 * read one input: dtx_block_run.linear_shared), out_i [N_i] = x · (the
 * weight at off_i)ᵀ, each the bits dtx_model_linear_rows gives it, in one
 * pass over the threads (dtx_gemv_parts) where the parts' inputs are
 * treated alike (every weight fp32, or bf16, or a16-quantised, or W8A8
 * with its own int8 input), else one after another. xrows: scratch of K
 * values. n ≤ 4. */
void dtx_model_linear_row_parts(const dtx_model *m, real *const *out, const real *x, const size_t *off,
                                const int64_t *N, int n, int64_t K, const uint16_t *wbf, real *xrows);
#ifndef DTX_DOUBLE
/* x [n] as a quantised linear layer sees its input: bf16- or (fp16 set)
 * fp16-rounded (a16), or for W8A8 on the int8 grid
 * scale·clamp(rint(x/scale), −127, 127). In place when out == x. */
void dtx_model_round_inputs(dtx_wquant scheme, int fp16, float scale, float *out, const float *x, int64_t n);
#endif
/* W8A8: q [n, n_heads·head_dim] and k [n, n_kv_heads·head_dim] of layer l
 * rounded to their int8 grids (the attention's int8 inputs), each whose
 * scale is > 0 (0: kept as it is); otherwise a no-op. */
void dtx_model_round_qk(const dtx_model *m, int64_t l, real *q, int64_t nq, real *k, int64_t nk);
/* The token embedding's rows of tokens [n] into out [n, D] (dequantised
 * when the embedding is quantised). */
void dtx_model_embed(const dtx_model *m, real *out, const int32_t *tokens, int64_t n);
/* Quantises the model's 2-D weights in place with absmax scales (per row;
 * per group for W4A16), or clipped ones where clip says: clip[i] NULL or
 * one factor in (0, 1] per row of tensor i (W8*: [N]) or per group (W4A16:
 * [N, dtx_q4_groups(K)]); clip NULL: 1 everywhere. W8A8
 * also takes in_scales [n_tensors] (the static input scale of each 2-D
 * tensor; an untied embedding's is unused) and qk [n_layers, 2]; a scale of
 * 0 keeps that input 16-bit (bf16, as W8A16). The fp32 values are zeroed. */
dtx_status dtx_model_quantize_weights(dtx_model *m, dtx_wquant scheme, const float *const *clip,
                                      const float *in_scales, const float *qk);
/* The one-allocation layout of the quantised weights of scheme for m's
 * tensors: sets every qw's bits and shape, and its q and scale from base
 * (none when base is NULL), and returns the bytes. */
size_t dtx_model_qweight_layout(dtx_model *m, dtx_wquant scheme, unsigned char *base);
/* Allocates the quantised weights of scheme (zeros) and the scratch, and
 * marks m quantised; dtx_model_free_quant undoes it (dtx_model_free calls it).
 * codes_elsewhere: no memory for the codes and scales (every qw's bits, N
 * and K set, q and scale left for a reader that points them into a file
 * mapping it hands to m with dtx_model_own_weights). */
dtx_status dtx_model_alloc_quant(dtx_model *m, dtx_wquant scheme, int codes_elsewhere);
void dtx_model_free_quant(dtx_model *m);
/* What a prefill shows an observer (calibrate.c records the inputs of every
 * quantised product with it, one layer's activations alive at a time):
 * linear_input, the input rows x [M, K] of the weight at params offset
 * w_off before each product; layer_qk, after layer l, its q [n, q_dim] and
 * k [n, kv_dim] after RoPE; final, the residual rows x [n, dim] after the
 * last layer. Any of them may be NULL. */
typedef struct {
    void *ctx;
    void (*linear_input)(void *ctx, size_t w_off, const real *x, int64_t M, int64_t K);
    void (*layer_qk)(void *ctx, int64_t l, const real *q, const real *k, int64_t n);
    void (*final)(void *ctx, const real *x, int64_t n);
} dtx_prefill_hooks;
/* Every later step of c shows itself to h (NULL: to nobody). */
void dtx_kvcache_set_hooks(dtx_kvcache *c, const dtx_prefill_hooks *h);

/* The bits tensor i is stored with under scheme: 0 (not quantised: 1-D),
 * 8, or 4 (W4A16's layer weights; its embedding and output stay 8-bit). */
int dtx_model_tensor_bits(const dtx_model *m, dtx_wquant scheme, int i);
/* Zero the fp32 parameters of every quantised tensor and give their memory
 * back: a quantised model keeps only the codes and scales resident. */
void dtx_model_release_quantised_fp32(dtx_model *m);
/* Makes m read its 2-D weights in place: data[i] the bf16 values of tensor
 * i (NULL for 1-D tensors, which stay in params), owned by the caller until
 * dtx_model_materialize or dtx_model_free (the readers hand the memory to
 * m with dtx_model_own_weights). The fp32 params of those tensors stay
 * untouched. */
dtx_status dtx_model_use_in_place(dtx_model *m, const uint16_t *const *data);
/* m owns *mem from now on (unmapped or freed with its weights in place);
 * *mem is emptied. */
dtx_status dtx_model_own_weights(dtx_model *m, dtx_mapped *mem);
/* Starts moving every weight m holds outside params (qw: bf16 in place,
 * codes, scales) into one anonymous allocation in 2 MiB pages, each tensor
 * 64-byte aligned, on a thread of its own; the memory they lay in is given
 * back as they move (weights_memory.c says why: decode reads them faster
 * there). Nothing to do without qw, or with DTX_WEIGHTS_MAPPED=1 in the
 * environment. On failure m is as before. */
dtx_status dtx_model_settle_weights(dtx_model *m);
int dtx_weights_mapped_asked(void);
/* On the model's own thread, at the start of each layer (dtx_block_forward,
 * which every forward, prefill and decode step runs; no kernel is running):
 * the tensors copied so far read from their new place. The copy itself
 * begins with the first decode step after the model's first step. */
void dtx_model_settle_poll(dtx_model *m);
/* Begins the copy if it has not begun, and waits for it to end: every
 * weight in its new memory, the old memory given back (tests, and a caller
 * about to time decoding). */
void dtx_model_settle_wait(dtx_model *m);
/* The copy stopped where it is (before the weights are replaced: quantising
 * in place); every weight stays readable, where it is now. */
void dtx_model_settle_stop(dtx_model *m);
/* Stopped, and its memory freed: only once no qw points into it. */
void dtx_model_settle_release(dtx_model *m);
/* Tests only: a copy started from now on stops after this many bytes (in
 * whole 4 MiB windows; SIZE_MAX: all), and while dtx_settle_test_hold is set
 * no tensor switches to its copy (a test reads the old place between the
 * copy and the switch). */
extern size_t dtx_settle_test_copy_limit;
extern int dtx_settle_test_hold;
/* Unmaps or frees the memory m was given with dtx_model_own_weights. */
void dtx_model_release_wmaps(dtx_model *m);
/* DTX_WEIGHTS_COPY=1 in the environment: the readers copy into fp32 instead
 * of keeping weights in place (a comparison; what difftx did before). */
int dtx_weights_copy_asked(void);
/* DTX_ERR_FORMAT "WHERE: tensor 'NAME' holds NaN at element K: ..." for the
 * first bf16 value of v [n] that is not finite, else DTX_OK: the check
 * every reader of weights makes, for weights kept in bf16. */
dtx_status dtx_bf16_check_finite(const uint16_t *v, size_t n, const char *where, const char *name);
/* Tensor i's fp32 values: in params, or for a weight in place its rows
 * widened into *tmp (malloc'd here when NULL, the caller frees it). NULL
 * after dtx_fail when out of memory. */
#ifndef DTX_DOUBLE
const float *dtx_model_weight_f32(const dtx_model *m, int i, float **tmp);
#endif

/* ------------------------------------------------------------ one layer (block.c) */

/* How a layer runs: where its keys come from, its rows and positions, its
 * linear layers. One walker (dtx_block_forward) serves the training forward
 * (forward.c), a prefill and a decode step (generate.c). */
typedef enum {
    DTX_BLOCK_OWN_KEYS, /* the attention reads the block's own k, v (a batch; a prefill from position 0) */
    DTX_BLOCK_CACHE,    /* row i attends over the cache's rows 0 .. pos0 + i (decode steps) */
    DTX_BLOCK_BATCH,    /* row i is the next token of a sequence of its own (a batched decode step):
                         * at position row_pos[i], its key and value appended to that sequence's
                         * cache (row_k[i], row_v[i]), attending over its rows 0 .. row_pos[i] */
} dtx_block_keys;
/* out [M, N] = x [M, K] · (the weight at off) [N, K]ᵀ; px: the inputs are
 * bf16-rounded already (forward.c's emulated bf16), for dtx_model_linear. */
typedef void (*dtx_block_linear)(const dtx_model *m, void *ctx, real *out, const real *x, size_t off, int64_t M,
                                 int64_t K, int64_t N, unsigned px);
/* The n products of one input x [M, K]: out_i [M, N_i] = x · (the weight at off_i)ᵀ, as n calls of the run's
 * linear would compute them (a layer's q, k, v, λ projections; its w1 and w3). */
typedef void (*dtx_block_linear_shared)(const dtx_model *m, void *ctx, real *const *out, const real *x,
                                        const size_t *off, const int64_t *N, int n, int64_t M, int64_t K,
                                        unsigned px);
typedef struct {
    int64_t B, T, pos0;        /* B·T rows at positions pos0 .. pos0 + T − 1 of each sequence */
    unsigned px;               /* the products' inputs pre-rounded to bf16 (DTX_MM_PRE_X) or 0 */
    int generation;            /* flash attention in fp32 whatever the model's precision (difftx.h) */
    dtx_block_keys mode;
    const real *k_cache, *v_cache; /* DTX_BLOCK_CACHE: the layer's cache, rows 0 .. pos0 + n − 1 filled */
    int kv_bf16;               /* the cache keeps bf16 bits (dtx_kv_type): k16, v16 (OWN_KEYS, CACHE; its rows
                                * pos0 .. written by the block) or row_k16, row_v16 (BATCH) instead of the above */
    uint16_t *k16, *v16;
    uint16_t *const *row_k16, *const *row_v16;
    real *scores;              /* DTX_BLOCK_CACHE: dtx_attention_decode scratch */
    const int64_t *row_pos;    /* DTX_BLOCK_BATCH: per row (B rows, T = 1) its position, */
    real *const *row_k, *const *row_v; /* its sequence's layer cache, */
    real *const *row_scores;   /* and dtx_attention_decode scratch for that cache */
    real *scratch;             /* [B·T, D] */
    int64_t ffn_rows;          /* the feed-forward in blocks of this many rows (h1, h3 and g hold one block,
                                * not B·T rows: a long prompt's largest buffers), or 0: all rows at once */
    dtx_block_linear linear;
    dtx_block_linear_shared linear_shared; /* or NULL: linear once per product */
    void *ctx;
} dtx_block_run;
/* Generation's attention (a prefill, decode steps: B = 1): flash, or the
 * row kernel over the cache, in fp32 whatever the model's precision (difftx.h). */
dtx_attn_dims dtx_model_generation_attn_dims(const dtx_model *m, int64_t T, int64_t layer, double lambda);
/* x [n] rounded to bf16 in place when pre (DTX_MM_PRE_* flags) is set:
 * emulated bf16 rounds each product's operands once, where they are made. */
void dtx_bf16_round_if(unsigned pre, real *x, size_t n);
/* x [B·T, D] -> out: one layer, its tensors in la (block.c's header says
 * which may alias). */
void dtx_block_forward(dtx_model *m, int64_t l, const dtx_block_run *r, dtx_layer_acts *la, const real *x,
                       real *out);
/* logits [rows, V] = output(norm(x [rows, D])), xn and rstd keeping the normed rows. */
void dtx_block_head(dtx_model *m, const dtx_block_run *r, real *logits, real *xn, real *rstd, const real *x,
                    int64_t rows);

/* Bytes held by the activations of the last forward (0 before any). */
size_t dtx_model_activation_bytes(const dtx_model *m);

/* Tests: 0 makes emulated bf16 round every operand inside each product
 * instead of once where it is made (forward.c); the results must not
 * change. */
void dtx_model_test_preround(int on);

#endif
