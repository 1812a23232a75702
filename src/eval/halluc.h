/* Contextual faithfulness without a judge (spec §6.7, the paper's Table 4),
 * scored exactly: what `difftx eval halluc` measures and what `difftx train
 * --halluc-frac / --fact-frac` mixes into training. Built on the needle
 * prompts (needle.h); docs/eval_halluc.md describes it for users.
 *
 * Facts. The first DTX_FACT_CITIES cities of the needle list are fact
 * cities; each has a fixed 5-digit number (dtx_fact_number: a hash of the
 * city's index, the same for every model), taught closed-book by fact rows:
 *   <|bos|> Q(city) number "\n" Q(city') number' "\n" ...  (cut at the row's end)
 * with Q(city) = "\nWhat is the special magic {city} number? The special
 * magic {city} number is " (the needle question). Needle and faithfulness
 * documents of a run that teaches facts never hold a fact city, so a model
 * sees a fact city's number only as the fact.
 *
 * A faithfulness document (training): a needle context (framing, training
 * haystack, 1..max non-fact needles at random places), then
 *   "\nList every special magic number. The special magic numbers are "
 *   n_1 ", " n_2 ... "\n"        (the numbers in the order of the context)
 * then two questions Q(city) answer "\n", each about an absent city (a
 * non-fact city not in the context, answer "none") with probability 1/2,
 * else about a needle of the context (answer its number).
 *
 * Evaluation prompts (held-out haystack), each a context and up to two
 * questions asked one at a time after it:
 *   CONTRADICT  needle 0 is a fact city whose context number differs from
 *               its fact; the question asks it. The answer is faithful (the
 *               context's number), prior (the fact) or fabricated (neither).
 *   LIST        the list question; precision and recall of the numbers.
 *   ABSENT      question 0 about an absent city (right: "none"), question 1
 *               about needle 0 (right: its number), the control. */
#ifndef DTX_EVAL_HALLUC_H
#define DTX_EVAL_HALLUC_H

#include <stddef.h>
#include <stdint.h>

#include "difftx.h"
#include "eval/needle.h"

enum { DTX_FACT_CITIES = 24 };

/* Fact city i's number (i < DTX_FACT_CITIES), decimal into out[8]. */
void dtx_fact_number(int i, char *out);

typedef enum { DTX_HALLUC_CONTRADICT, DTX_HALLUC_LIST, DTX_HALLUC_ABSENT } dtx_halluc_kind;

typedef struct {
    int32_t *tokens; /* context then question 0 (malloc'd)                  */
    int64_t n, context_end;
    int n_questions; /* 1, or 2 for ABSENT                                  */
    int32_t *question[2];
    int64_t question_n[2];
    char answer[2][8]; /* the right answer per question: a number, or "none" */
    char prior[8];     /* CONTRADICT: the fact's number (asked closed-book, <|bos|>
                          and question 0, it tells whether the model knows it) */
    char city[40];     /* question 0's city                                  */
    int n_needles;     /* LIST: the numbers that should be listed            */
    char number[DTX_NEEDLE_MAX][8];
} dtx_halluc_prompt;

/* A prompt of at most length tokens (the context fills what the longest
 * question leaves) with n_needles
 * needles, deterministic in (source, kind, length, n_needles, seed).
 * DTX_ERR_ARG when it cannot fit, with the needle prompt's message. */
dtx_status dtx_halluc_make(const dtx_needle_source *src, const dtx_tokenizer *tok, dtx_halluc_kind kind,
                           int64_t length, int n_needles, uint64_t seed, dtx_halluc_prompt *out);
void dtx_halluc_prompt_free(dtx_halluc_prompt *p);

/* Training rows of exactly n tokens, deterministic in seed. */
dtx_status dtx_halluc_fact_row(const dtx_tokenizer *tok, uint64_t seed, int64_t n, int32_t *out);
dtx_status dtx_halluc_training_doc(const dtx_needle_source *src, const dtx_tokenizer *tok, uint64_t seed,
                                   int64_t n, int max_needles, int32_t *out);

/* Scoring, on the greedy answer text cut at its first newline. */
typedef enum { DTX_FAITHFUL, DTX_PRIOR, DTX_FABRICATED } dtx_halluc_outcome;
/* Faithful when the context's number occurs in text (the needle criterion),
 * else prior when the fact's does, else fabricated. */
dtx_halluc_outcome dtx_halluc_classify(const char *text, size_t len, const char *context_number,
                                       const char *prior);
/* 1 when text, spaces trimmed at both ends, is exactly "none". */
int dtx_halluc_is_none(const char *text, size_t len);
/* The numbers of a list answer: every maximal run of digits in text is one
 * listed item; *listed counts them, *right counts the distinct expected
 * numbers among them (a number listed twice is right once), so precision =
 * right / listed and recall = right / n. */
void dtx_halluc_list_score(const char *text, size_t len, const char (*numbers)[8], int n, int64_t *listed,
                           int64_t *right);

#endif
