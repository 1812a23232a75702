/* Many-shot in-context classification episodes (spec §6.6, the paper's
 * Fig 6 and 7), synthetic and scored exactly: what `difftx eval icl`
 * measures and what `difftx train --icl-frac` mixes into training.
 * docs/eval_icl.md describes the task for users.
 *
 * Tokens, not text: an episode is built from token ids of the tokenizer's
 * word tokens (a space and two or more ASCII lower-case letters, " the"),
 * split by their rank among those tokens (sorted by id) into three pools:
 * rank % 3 == 0 label words, 1 training features, 2 held-out features.
 *
 * An episode has C classes. Class c has a label word (distinct, drawn
 * afresh per episode from the label pool, so the mapping can be read only
 * from the context) and a prototype: DTX_ICL_PROTO distinct feature tokens
 * (disjoint between the episode's classes). An example of class c is
 * DTX_ICL_LEN tokens, each one of c's prototype tokens (uniformly) with
 * probability 1 − DTX_ICL_NOISE, otherwise any token of the feature pool.
 * Training episodes draw features from the training pool, evaluation
 * episodes from the held-out one, so that the classes seen at test time
 * were never seen in training.
 *   demonstration = x_1 .. x_LEN ":" label "\n"     (DTX_ICL_DEMO tokens)
 *   query         = x_1 .. x_LEN ":"                (DTX_ICL_QUERY tokens)
 *   prompt        = <|bos|> demonstration* query
 * The answer is read by constrained decoding: the argmax of the next-token
 * logits over the episode's C label tokens only (ties: the lower class). */
#ifndef DTX_EVAL_ICL_H
#define DTX_EVAL_ICL_H

#include <stdint.h>

#include "common/common.h"
#include "difftx.h"

enum {
    DTX_ICL_PROTO = 8,       /* prototype tokens per class                 */
    DTX_ICL_LEN = 3,         /* tokens per example                         */
    DTX_ICL_DEMO = DTX_ICL_LEN + 3,
    DTX_ICL_QUERY = DTX_ICL_LEN + 1,
    DTX_ICL_MAX_CLASSES = 64,
    DTX_ICL_TRAIN_MIN_CLASSES = 2, /* training episodes: C uniform in [2, 16] */
    DTX_ICL_TRAIN_MAX_CLASSES = 16,
};
#define DTX_ICL_NOISE 0.25 /* chance that an example's token is noise */

typedef struct {
    int32_t bos, sep, newline;
    int32_t *pool[3]; /* 0 labels, 1 training features, 2 held-out features */
    int64_t pool_n[3];
} dtx_icl_vocab;

/* The pools of tok. DTX_ERR_ARG when the tokenizer lacks <|bos|>, when ":"
 * or "\n" is not one token, or when a pool is too small for
 * DTX_ICL_TRAIN_MAX_CLASSES classes (the message gives the sizes). */
dtx_status dtx_icl_vocab_init(dtx_icl_vocab *v, const dtx_tokenizer *tok);
void dtx_icl_vocab_free(dtx_icl_vocab *v);
/* The most classes an episode over feature pool 1 or 2 can have. */
int dtx_icl_max_classes(const dtx_icl_vocab *v, int held_out);

typedef struct {
    int n_classes;
    int held_out; /* 1: features from the held-out pool */
    int32_t label[DTX_ICL_MAX_CLASSES];
    int32_t proto[DTX_ICL_MAX_CLASSES][DTX_ICL_PROTO];
} dtx_icl_task;

/* Draws an episode's labels and prototypes. DTX_ERR_ARG when n_classes is
 * outside [1, dtx_icl_max_classes]. */
dtx_status dtx_icl_task_draw(const dtx_icl_vocab *v, int n_classes, int held_out, dtx_rng *r, dtx_icl_task *t);
/* One example of class c: DTX_ICL_LEN tokens into x. */
void dtx_icl_example(const dtx_icl_vocab *v, const dtx_icl_task *t, int c, dtx_rng *r, int32_t *x);
/* Writes a demonstration (example x of class c, DTX_ICL_DEMO tokens) or a
 * query (DTX_ICL_QUERY tokens) at out. */
void dtx_icl_put_demo(const dtx_icl_vocab *v, const dtx_icl_task *t, const int32_t *x, int c, int32_t *out);
void dtx_icl_put_query(const dtx_icl_vocab *v, const int32_t *x, int32_t *out);
/* The class of the largest logit among t's labels (ties: the lower class). */
int dtx_icl_pick(const dtx_icl_task *t, const dtx_real *logits);

/* A training row of exactly n tokens, deterministic in seed: <|bos|> then
 * demonstrations of an episode over the training features with C uniform
 * in [2, 16] and each demonstration's class uniform, cut at n. */
void dtx_icl_training_row(const dtx_icl_vocab *v, uint64_t seed, int64_t n, int32_t *out);

/* Demonstrations of r whole rounds (one example per class each) fit with
 * the query in max_len tokens: the most rounds, 0 when not even one. */
int64_t dtx_icl_max_rounds(int n_classes, int64_t max_len);

#endif
