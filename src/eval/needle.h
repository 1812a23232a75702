/* Multi-needle retrieval prompts (spec §6.4), for evaluation and for the
 * synthetic training documents of the reproduction recipe. Internal to the
 * library (src/eval/needle.c); used by src/cli/eval_needle.c,
 * src/cli/eval_attn_mass.c and src/cli/train.c.
 *
 * A prompt, in tokens:
 *   <|bos|> FRAMING HAYSTACK-with-N-needles QUESTION
 *   FRAMING  = "There is a special magic number inside a lot of irrelevant
 *               text. Find it and memorize them. I will quiz you about the
 *               magic number there.\n"
 *   needle   = " The special magic {city} number is: {n}." (n a 5-digit
 *               number, uniform in [10000, 99999]; the N cities distinct,
 *               drawn from a fixed list of unique city names)
 *   QUESTION = "\nWhat is the special magic {city} number? The special magic
 *               {city} number is " (asked about ONE needle's city)
 *   answer   = "{n}" then "\n" (training documents only).
 * The haystack is natural text cut into sentence units, each encoded on its
 * own (so a prompt's tokens are the concatenation of separately encoded
 * pieces); needles go between units. The answer needle (the queried city's)
 * sits at the requested depth: the unit boundary whose token offset in the
 * haystack is nearest depth × haystack tokens; the N − 1 distractors at
 * uniformly random boundaries. */
#ifndef DTX_EVAL_NEEDLE_H
#define DTX_EVAL_NEEDLE_H

#include <stdint.h>

#include "difftx.h"

/* Haystack text: files read once, cut into sentence units (a unit ends after
 * ". ", "? ", "! " or a newline), every unit pre-encoded. Read-only after
 * open (thread-safe to share). */
typedef struct dtx_needle_source dtx_needle_source;

/* paths: text files, or directories (their regular *.txt files, sorted by
 * name). The tokenizer must have <|bos|> (borrowed; must outlive the source).
 * DTX_ERR_IO / DTX_ERR_FORMAT with the path on failure; an empty haystack is
 * an error. */
dtx_status dtx_needle_source_open(dtx_needle_source **out, const dtx_tokenizer *tok, const char *const *paths,
                                  int n_paths);
void dtx_needle_source_free(dtx_needle_source *s);
int64_t dtx_needle_source_tokens(const dtx_needle_source *s); /* total haystack tokens */

#define DTX_NEEDLE_MAX 16 /* most needles in one prompt */

typedef struct {
    int64_t length;   /* tokens of the whole prompt (with_answer: of the whole document) */
    int n_needles;    /* N, 1..DTX_NEEDLE_MAX */
    int n_queries;    /* R, 1..N: the first R needles are the queried ones  */
    double depth;     /* answer needle depth in [0, 1]; < 0: uniformly random */
    uint64_t seed;    /* everything random in the prompt follows from this   */
    int with_answer;  /* 1: a training document (question + answer + "\n")   */
} dtx_needle_spec;

typedef struct {
    int32_t *tokens;  /* the prompt (malloc'd; dtx_needle_prompt_free)        */
    int64_t n;        /* == spec.length, except that an eval prompt may be up to
                         a few tokens shorter when units do not fill it exactly */
    int n_needles, n_queries;
    char city[DTX_NEEDLE_MAX][40];   /* needle i's city                         */
    char number[DTX_NEEDLE_MAX][8];  /* needle i's number, decimal             */
    int64_t needle_begin[DTX_NEEDLE_MAX], needle_end[DTX_NEEDLE_MAX]; /* token spans */
    /* Eval prompts end with the question about needle 0 (the answer needle,
     * at the requested depth); query q < R is asked by replacing the prompt's
     * question with question_tokens(q): tokens [0, context_end) + question q. */
    int64_t context_end;  /* where the question starts                      */
    int32_t *question[DTX_NEEDLE_MAX]; /* question tokens per queried needle  */
    int64_t question_n[DTX_NEEDLE_MAX];
} dtx_needle_prompt;

/* Builds one prompt. DTX_ERR_ARG when the spec is out of range or the length
 * cannot hold the framing, the needles and the question (with a message
 * saying the minimum). Deterministic in (source, spec). */
dtx_status dtx_needle_make(const dtx_needle_source *s, const dtx_needle_spec *spec, dtx_needle_prompt *out);
void dtx_needle_prompt_free(dtx_needle_prompt *p);

/* Wilson score 95% interval of k successes in n trials (z = 1.96). */
void dtx_wilson95(int64_t k, int64_t n, double *lo, double *hi);

#endif
