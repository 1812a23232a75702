/* Synthetic needle documents mixed into training batches (difftx train
 * --needle-frac; the reproduction recipe, docs/eval_needle.md). A row of a
 * batch is replaced, with probability frac, by a multi-needle document of
 * exactly T + 1 tokens (src/eval/needle.h, with the answer) whose haystack is
 * the --needle-text files: training text, never the held-out text the needle
 * evaluation uses. Which rows, and each document, follow from a hash of
 * (seed, step, micro-batch, row) alone: no state, so a resumed run and an
 * uninterrupted one see the same documents, and two runs with the same seed
 * (DIFF and its baseline) see the same ones. The rows not replaced keep the
 * sampler's windows, and the sampler advances as without the mixture.
 * With copy_frac, a further share of the rows become copy documents (L
 * random ids repeated), which teach the plain induction that retrieval
 * builds on; docs/reproduce.md says why the recipe uses them. Further
 * shares become in-context classification episodes (icl_frac,
 * src/eval/icl.h), faithfulness documents (halluc_frac) and closed-book fact
 * rows (fact_frac, src/eval/halluc.h) and associative recall episodes
 * (recall_frac, src/eval/recall.h); with fact rows, needle documents
 * leave out the fact cities. The shares are taken in that order from one
 * uniform draw per row, so adding a share after the others leaves the rows
 * of the earlier ones as they were. */
#ifndef DTX_TRAIN_NEEDLE_MIX_H
#define DTX_TRAIN_NEEDLE_MIX_H

#include <stdint.h>

#include "difftx.h"
#include "eval/icl.h"
#include "eval/needle.h"

/* (the shares and files: difftx.h's dtx_train_mix) */

typedef struct {
    dtx_train_mix o;       /* as opened (the paths only read at open)  */
    int64_t vocab;           /* copy documents draw ids from [0, vocab) */
    dtx_tokenizer *tok;
    dtx_needle_source *src;
    dtx_icl_vocab icl;
    int64_t documents, copies, icl_rows, halluc_rows, fact_rows, recall_rows; /* rows made so in this process */
} needle_mix;

/* Loads the tokenizer and the haystack text where a share needs them.
 * Fails (library message) when a file cannot be read, when the tokenizer's
 * vocabulary is not vocab_size, when the shares add up to more than 1, or
 * when T + 1 tokens cannot hold a document. */
dtx_status needle_mix_open(needle_mix *x, const dtx_train_mix *o, int64_t vocab_size, int64_t T);
void needle_mix_close(needle_mix *x);
/* Replaces the chosen rows of inputs/targets [B, T] in place. period [B]
 * (optional): each row's copy period L, 0 for a row that is not a copy
 * document. */
dtx_status needle_mix_apply(needle_mix *x, uint64_t seed, int64_t step, int64_t micro, int64_t B, int64_t T,
                            int32_t *inputs, int32_t *targets, int32_t *period);

/* The induction score's sums over copy rows: a copy row's positions t < L
 * predict the L random ids (first), t >= L tokens the model has seen L
 * back (repeat). Induction is first − repeat in nats: 0 without it, up to
 * ln V − (the repeat's loss) with it. */
typedef struct {
    double first, repeat;     /* summed per-position losses */
    int64_t n_first, n_repeat;
    int64_t rows;
} copy_score;
/* Adds the rows of loss [B, T] (per-position losses) whose period is > 0. */
void copy_score_add(copy_score *c, const double *loss, const int32_t *period, int64_t B, int64_t T);

#endif
