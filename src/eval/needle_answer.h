/* Greedy answers to needle questions: what `difftx eval needle` scores, and
 * what `eval attn-mass` splits its rows by (a model that retrieves, or not).
 * Each prompt's context goes into a KV cache once; each question is
 * prefilled after it, answered greedily, and the cache cut back. */
#ifndef DTX_EVAL_NEEDLE_ANSWER_H
#define DTX_EVAL_NEEDLE_ANSWER_H

#include "difftx.h"
#include "eval/needle.h"

typedef struct dtx_needle_answerer dtx_needle_answerer;

/* m and tok are borrowed (they must outlive the answerer); max_len: the
 * longest prompt to come; max_new: tokens generated per answer (>= 1).
 * DTX_ERR_ARG when the tokenizer has more tokens than the model. */
dtx_status dtx_needle_answerer_init(dtx_needle_answerer **out, dtx_model *m, const dtx_tokenizer *tok,
                                    int64_t max_len, int64_t max_new);
void dtx_needle_answerer_free(dtx_needle_answerer *r);

/* Answers each of p's queries: greedy, with <|bos|> and <|pad|> banned
 * (YOCO bans them: a model can put much probability on starting over), ties
 * to the lowest id, stopping at <|eos|> or the first newline (the text is
 * cut there). right[q] (p->n_queries entries) is 1 when query q's text holds
 * p->number[q] (dtx_needle_answer_correct). text0 (cap0 bytes, may be NULL)
 * receives query 0's text. */
dtx_status dtx_needle_answer_prompt(dtx_needle_answerer *r, const dtx_needle_prompt *p, int *right, char *text0,
                                    size_t cap0);

/* The same greedy answers to any questions asked one at a time after a
 * context: text[q] (cap bytes each) receives question q's text, cut at its
 * first newline; max_new (1 .. the answerer's) bounds each answer. The
 * context plus the longest question must fit the answerer's max_len. */
dtx_status dtx_needle_answer_texts(dtx_needle_answerer *r, const int32_t *context, int64_t context_n,
                                   int32_t *const *question, const int64_t *question_n, int n_questions,
                                   int64_t max_new, char *const *text, size_t cap);

#endif
