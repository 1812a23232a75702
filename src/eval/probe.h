/* Looking inside a forward pass (spec §6.5, §6.8): attention rows and maps,
 * pre-softmax logits and hidden states, recomputed in double from what
 * dtx_model_forward keeps (post-RoPE q and k, the residual stream, λ).
 * Internal to the library (src/eval/probe.c). Every call reads the
 * activations of the model's LAST dtx_model_forward; b, layer, head and t
 * are checked against them (DTX_ERR_ARG, with a message). Nothing here
 * writes to the model, so several threads may probe one model at once
 * (while no forward runs). */
#ifndef DTX_EVAL_PROBE_H
#define DTX_EVAL_PROBE_H

#include <stdint.h>

#include "difftx.h"

/* The maps (dtx_attn_map, difftx.h): FIRST, SECOND, COMBINED. */

/* Heads: DIFF heads 0..n_heads-1 (q1 = q sub-head 2h, q2 = 2h+1, KV group by
 * GQA), DIFF2 heads 0..n_heads-1 (A1, A2: query heads 2h and 2h+1, their one
 * KV head; DTX_MAP_COMBINED = A1 − λ_t·A2 with the row's own λ), Transformer
 * heads 0..n_heads-1. */

/* out[0..t] = attention weights of query row t over keys 0..t: logits
 * q·k/√d in double, softmax with max subtraction. */
dtx_status dtx_probe_attention_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_attn_map map,
                                   int64_t t, double *out);
/* out[0..t] = pre-softmax logits q·k/√d of query row t (map A1 or A2;
 * DTX_MAP_COMBINED is DTX_ERR_ARG: it has no logits of its own). */
dtx_status dtx_probe_logit_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_attn_map map,
                               int64_t t, double *out);
/* λ the last forward used in a DIFF layer (0 for the Transformer; for DIFF2,
 * whose λ is per token and head, the mean over every row and head of the
 * last forward; DTX_MAP_COMBINED rows use each row's own; NaN, with a message,
 * when no forward has run or the layer is out of range). */
double dtx_probe_lambda(const dtx_model *m, int64_t layer);
/* λ of one head's query row t (DTX_MAP_COMBINED's): DIFF2's own per token,
 * DIFF's layer λ, 0 for the Transformer; NaN, with a message, for an index
 * out of range or before any forward. */
double dtx_probe_lambda_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, int64_t t);
/* Rows and width of the last forward: *B, *T (both 0 before any forward). */
void dtx_probe_shape(const dtx_model *m, int64_t *B, int64_t *T);
/* Hidden state (block output, after both residual additions) of layer l:
 * [B·T, dim] values inside the model's activations (valid until the next
 * forward); NULL, with a message, when no forward has run or l is out of
 * range. */
const dtx_real *dtx_probe_hidden(const dtx_model *m, int64_t layer);

/* Pooled statistics of |values| (streamed: the values are not kept): count,
 * the top K largest (exact), and the median (to a relative 2^-11, from a
 * histogram over the float exponent and top 10 mantissa bits: the median is
 * the midpoint of its bucket). NaNs are counted apart (n_nan) and left out of
 * everything else. */
#define DTX_STATS_TOPK 100
#define DTX_STATS_HIST_BITS 18 /* 8 exponent + 10 mantissa bits of the float */
#define DTX_STATS_HIST_SIZE ((int64_t)1 << DTX_STATS_HIST_BITS)
typedef struct {
    int64_t count;              /* values counted (NaNs excluded)              */
    int64_t n_nan;              /* NaNs seen                                   */
    double top[DTX_STATS_TOPK]; /* descending; top[i] valid for i < n_top     */
    int64_t n_top;              /* min(count, K)                               */
    uint64_t *hist;             /* DTX_STATS_HIST_SIZE buckets (owned)         */
} dtx_abs_stats;
dtx_status dtx_abs_stats_init(dtx_abs_stats *s);
void dtx_abs_stats_free(dtx_abs_stats *s);
void dtx_abs_stats_add(dtx_abs_stats *s, const double *v, int64_t n);
void dtx_abs_stats_add_f(dtx_abs_stats *s, const float *v, int64_t n);
/* dst += src (the same as having added src's values to dst). Exact, so the
 * result does not depend on the order of merges. */
void dtx_abs_stats_merge(dtx_abs_stats *dst, const dtx_abs_stats *src);
/* The median of the |values| (the mean of the two middle ones for an even
 * count), NaN when count is 0. */
double dtx_abs_stats_median(const dtx_abs_stats *s);
/* The k-th largest |value| (1-based, k <= K), NaN when fewer were counted. */
double dtx_abs_stats_top(const dtx_abs_stats *s, int64_t k);

/* Adds |q·k/√d| of every causal entry (key s <= query t) of every batch row,
 * layer, head and map (both maps for DIFF) of the last forward to s: the
 * pool of Table 5's attention logits. Dot products in the working precision
 * (float), OpenMP over (layer, row, sub-head) with per-thread statistics
 * merged exactly, so the result does not depend on the thread count.
 * DTX_ERR_ARG when no forward has run, DTX_ERR_NOMEM. */
dtx_status dtx_probe_add_logits(const dtx_model *m, dtx_abs_stats *s);
/* Adds |x| of every value of every layer's block output of the last forward
 * (L·B·T·dim values; the embeddings, resid[0], are not a block output). */
dtx_status dtx_probe_add_hidden(const dtx_model *m, dtx_abs_stats *s);

#endif
