/* Multi-needle retrieval prompts (spec §6.4), for evaluation and for the
 * synthetic training documents of the reproduction recipe. Internal to the
 * library (src/eval/needle.c); used by src/eval/eval_needle.c,
 * src/eval/eval_attn_mass.c, eval_halluc.c, eval_icl.c and src/cli/train.c.
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
 * A training document (with_answer) asks about each of the R queried needles
 * in turn, each question followed by its answer: QUESTION_0 answer_0
 * QUESTION_1 answer_1 ... (R answered retrievals per document, a denser
 * signal for small models than one).
 * The haystack is natural text cut into sentence units, each encoded on its
 * own (so a prompt's tokens are the concatenation of separately encoded
 * pieces); needles go between units. The answer needle (the queried city's)
 * sits at the requested depth: the unit boundary whose token offset in the
 * haystack is nearest depth × haystack tokens (ties: the earlier one); the
 * N − 1 others at uniformly random boundaries. Needles sharing a boundary
 * keep index order, except that the answer needle goes first there when its
 * boundary is in the first half of the haystack and last otherwise, so that
 * depth 0 is the first needle after the framing and depth 1 the last one
 * before the question.
 *
 * The haystack starts at a random unit of the source and runs on through
 * consecutive units (wrapping round at the end of the source) until it fills
 * the budget; the last unit is cut at token level to fill it exactly. The
 * budget is length − (BOS + framing + needles + question(s) [+ answers]),
 * the question being the longest of the R queried ones in an eval prompt (so
 * that every query fits in length), all R with their answers in a training one.
 * Training documents (with_answer) are therefore exactly length tokens; an
 * eval prompt is length − (longest question − question 0) tokens.
 * docs/eval_needle.md describes the format and every choice for users. */
#ifndef DTX_EVAL_NEEDLE_H
#define DTX_EVAL_NEEDLE_H

#include <stddef.h>
#include <stdint.h>

#include "difftx.h"

/* Haystack text: files read once, cut into sentence units, every unit
 * pre-encoded. A unit ends after a '.', '?' or '!' that a space follows (the
 * space begins the next unit, as a word's space does in BPE), after a
 * newline, or, in text without such ends, at a space once it reaches 512
 * bytes (1024 at most, then anywhere). Read-only after open (thread-safe to
 * share). */
typedef struct dtx_needle_source dtx_needle_source;

/* paths: text files, or folders (every file below them, as every command
 * reads a folder: dtx_paths_add in src/common/common.h). The tokenizer must
 * have <|bos|> (DTX_ERR_ARG otherwise; borrowed: it must outlive the source).
 * DTX_ERR_IO / DTX_ERR_FORMAT with the path on failure; an empty haystack is
 * an error. dtx_needle_make may run on one source from several threads. */
dtx_status dtx_needle_source_open(dtx_needle_source **out, const dtx_tokenizer *tok, const char *const *paths,
                                  int n_paths);
/* The same with the paths given as one comma-separated list (the eval
 * commands' --haystack; a path with a comma in its name cannot be given). */
dtx_status dtx_needle_source_open_list(dtx_needle_source **out, const dtx_tokenizer *tok, const char *list);
void dtx_needle_source_free(dtx_needle_source *s);
int64_t dtx_needle_source_tokens(const dtx_needle_source *s); /* total haystack tokens */
int64_t dtx_needle_source_units(const dtx_needle_source *s);  /* sentence units        */

/* The fixed city list (unique names, ASCII): i in [0, dtx_needle_num_cities()). */
int dtx_needle_num_cities(void);
const char *dtx_needle_city(int i);
/* The question about a city, QUESTION above, into buf (cap >= 256). */
void dtx_needle_question_text(const char *city, char *buf, size_t cap);

/* (DTX_NEEDLE_MAX, the most needles in one prompt: difftx.h) */

typedef struct {
    int64_t length;   /* tokens of the whole prompt (with_answer: of the whole document) */
    int n_needles;    /* N, 1..DTX_NEEDLE_MAX */
    int n_queries;    /* R, 1..N: the first R needles are the queried ones  */
    double depth;     /* answer needle depth in [0, 1]; < 0: uniformly random */
    uint64_t seed;    /* everything random in the prompt follows from this   */
    int with_answer;  /* 1: a training document (R questions, each answered)  */
    /* Fields for the faithfulness documents and prompts (src/eval/halluc.h);
     * zero keeps everything above exactly as it was. */
    int city_lo;      /* needles' cities are drawn from [city_lo, number of cities) */
    const char *answer_city, *answer_number; /* needle 0's city and number when both
                         set (the city must be in the list; the number 5 digits) */
    int no_question;  /* 1: the prompt is the context alone, exactly length tokens
                         (context_end == n == length); question[] is still filled */
} dtx_needle_spec;

typedef struct {
    int32_t *tokens;  /* the prompt (malloc'd; dtx_needle_prompt_free)        */
    int64_t n;        /* == spec.length, except that an eval prompt is shorter
                         by (longest queried question − question 0) tokens   */
    int n_needles, n_queries;
    char city[DTX_NEEDLE_MAX][40];   /* needle i's city                         */
    char number[DTX_NEEDLE_MAX][8];  /* needle i's number, decimal             */
    int64_t needle_begin[DTX_NEEDLE_MAX], needle_end[DTX_NEEDLE_MAX]; /* token spans */
    /* Eval prompts end with the question about needle 0 (the answer needle,
     * at the requested depth); query q < R is asked by replacing the prompt's
     * question with question_tokens(q): tokens [0, context_end) + question q. */
    int64_t haystack_begin; /* 1 + framing tokens: where the haystack starts  */
    int64_t context_end;  /* where the question starts                      */
    int64_t answer_begin, answer_end; /* training documents: answer 0's tokens
                                         (then "\n"); 0, 0 otherwise */
    int32_t *question[DTX_NEEDLE_MAX]; /* question tokens per queried needle  */
    int64_t question_n[DTX_NEEDLE_MAX];
} dtx_needle_prompt;

/* Builds one prompt. DTX_ERR_ARG when the spec is out of range or the length
 * cannot hold the framing, the needles and the question (with a message
 * saying the minimum). Deterministic in (source, spec). */
dtx_status dtx_needle_make(const dtx_needle_source *s, const dtx_needle_spec *spec, dtx_needle_prompt *out);
/* Frees and zeroes *p; safe on a prompt whose make failed (it is zeroed). */
void dtx_needle_prompt_free(dtx_needle_prompt *p);

/* Wilson score 95% interval of k successes in n trials (z = 1.96); [0, 1]
 * for n <= 0. */
void dtx_wilson95(int64_t k, int64_t n, double *lo, double *hi);

/* A prompt's seed from the run's seed and its place in the grid: splitmix64
 * hashing of (seed, N, R, length, depth in hundredths of a percent, sample),
 * so a cell's prompts do not depend on the rest of the grid or its order. */
uint64_t dtx_needle_cell_seed(uint64_t seed, int n_needles, int n_queries, int64_t length, double depth_pct,
                              int64_t sample);

/* The scoring criterion (YOCO's multi_needle.py): 1 when the needle's number
 * occurs in the decoded text[0, len) as a substring, else 0. */
int dtx_needle_answer_correct(const char *text, size_t len, const char *number);

/* Parses a comma-separated list of finite numbers ("0,25,50") into
 * out[0, cap): returns how many, -1 when an item is empty or not a number,
 * -2 when there are more than cap. */
int dtx_eval_parse_list(const char *s, double *out, int cap);

#endif
