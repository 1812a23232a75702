/* Multi-query associative recall (MQAR: Arora et al., "Zoology", 2023): the
 * synthetic analogue of the paper's multi-needle retrieval (Tables 2 and 3),
 * a task small models of both architectures learn on two cores, with the
 * number of distractors under control. What `difftx eval recall` measures
 * and what `difftx train --recall-frac` mixes into training;
 * docs/eval_recall.md describes it for users.
 *
 * Token ids, no tokenizer: id 0 pads, keys are ids [1, 1 + K) and values ids
 * [1 + K, vocab) with K = (vocab − 1) / 2. An episode has P = Q + D pairs
 * and then Q queries:
 *     k_1 v_1  k_2 v_2  …  k_P v_P   k_a1 v_a1  …  k_aQ v_aQ
 * the P keys distinct, each value drawn independently, the Q pairs asked
 * distinct and in random order, and the D pairs never asked (at random
 * places among the P) the distractors. The position of a query's key is the
 * one whose next-token prediction is the answer: the value its key had in
 * the context. A training row is one episode with D uniform in
 * [0, max_distractors], padded with id 0 to the row's length. */
#ifndef DTX_EVAL_RECALL_H
#define DTX_EVAL_RECALL_H

#include <stdint.h>

#include "difftx.h"

enum { DTX_RECALL_MAX_PAIRS = 2048 };

typedef struct {
    int64_t queries;     /* Q >= 1                                  */
    int64_t distractors; /* D >= 0 pairs never asked                */
    int64_t vocab;       /* the model's: keys and values come from it */
    uint64_t seed;
} dtx_recall_spec;

typedef struct {
    int32_t *tokens;      /* [n], n = 2·(P + Q)                             */
    int64_t n, pairs, queries;
    int64_t *query_pos;   /* [Q] the position of each query's key            */
    int64_t *answer_pair; /* [Q] the pair it asks: k at 2·i, v at 2·i + 1     */
    uint8_t *asked;       /* [P] 1 for a pair some query asks                */
} dtx_recall_episode;

/* One line (DTX_ERR_ARG) when the vocabulary cannot hold P distinct keys
 * and a value range, or Q < 1, D < 0, P > DTX_RECALL_MAX_PAIRS. */
dtx_status dtx_recall_check(int64_t queries, int64_t distractors, int64_t vocab);
dtx_status dtx_recall_make(const dtx_recall_spec *s, dtx_recall_episode *e);
void dtx_recall_free(dtx_recall_episode *e);
/* The id a position's target should be for an answer: e->tokens[pos + 1]. */

/* A training row of len tokens (len >= 2·(2·queries + max_distractors),
 * checked by the caller with dtx_recall_row_fits): an episode of hash h with
 * D uniform in [0, max_distractors], then id 0; returns D (the queries' keys
 * are then at 2·(queries + D + q)). No allocation. */
int dtx_recall_row_fits(int64_t queries, int64_t max_distractors, int64_t len);
int64_t dtx_recall_training_row(int64_t queries, int64_t max_distractors, int64_t vocab, uint64_t h, int64_t len,
                                int32_t *row);

#endif
