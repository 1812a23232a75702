/* Looking inside a forward pass (spec §6.5, §6.8): attention rows and maps,
 * pre-softmax logits and hidden states, recomputed in double from what
 * dtx_model_forward keeps (post-RoPE q and k, the residual stream, λ).
 * Internal to the library (src/eval/probe.c). Every call reads the
 * activations of the model's LAST dtx_model_forward; b, layer, head and t
 * are checked against them (DTX_ERR_ARG). */
#ifndef DTX_EVAL_PROBE_H
#define DTX_EVAL_PROBE_H

#include <stdint.h>

#include "difftx.h"

typedef enum {
    DTX_PROBE_A1 = 0,   /* the Transformer's map, or DIFF's first map softmax(q1k1ᵀ/√d) */
    DTX_PROBE_A2 = 1,   /* DIFF's second map (DTX_ERR_ARG for the Transformer)        */
    DTX_PROBE_DIFF = 2, /* DIFF: A1 − λ·A2 (the combined weights); Transformer: A1   */
} dtx_probe_map;

/* Heads: DIFF heads 0..n_heads-1 (q1 = q sub-head 2h, q2 = 2h+1, KV group by
 * GQA), Transformer heads 0..n_heads-1. */

/* out[0..t] = attention weights of query row t over keys 0..t. */
dtx_status dtx_probe_attention_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_probe_map map,
                                   int64_t t, double *out);
/* out[0..t] = pre-softmax logits q·k/√d of query row t (map A1 or A2). */
dtx_status dtx_probe_logit_row(const dtx_model *m, int64_t b, int64_t layer, int64_t head, dtx_probe_map map,
                               int64_t t, double *out);
/* λ the last forward used in a DIFF layer (0 for the Transformer). */
double dtx_probe_lambda(const dtx_model *m, int64_t layer);
/* Rows and width of the last forward: *B, *T. */
void dtx_probe_shape(const dtx_model *m, int64_t *B, int64_t *T);
/* Hidden state (block output, after both residual additions) of layer l:
 * [B·T, dim] floats inside the model's activations (valid until the next
 * forward). */
const dtx_real *dtx_probe_hidden(const dtx_model *m, int64_t layer);

/* Pooled statistics of |values| (streamed: the values are not kept): count,
 * max, the top K largest (exact), and the median (exact to a relative 2^-10,
 * from a histogram over the float exponent and top mantissa bits). */
#define DTX_STATS_TOPK 100
typedef struct {
    int64_t count;
    double top[DTX_STATS_TOPK]; /* descending; top[i] valid for i < min(count, K) */
    int64_t n_top;
    uint64_t *hist;             /* histogram (owned)                          */
} dtx_abs_stats;
dtx_status dtx_abs_stats_init(dtx_abs_stats *s);
void dtx_abs_stats_free(dtx_abs_stats *s);
void dtx_abs_stats_add(dtx_abs_stats *s, const double *v, int64_t n);
void dtx_abs_stats_add_f(dtx_abs_stats *s, const float *v, int64_t n);
double dtx_abs_stats_median(const dtx_abs_stats *s);

#endif
