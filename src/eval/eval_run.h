/* What the evaluations (src/eval/eval_*.c) share while one runs under
 * dtx_eval_run: the readable report they write, their JSON document, the
 * caller's progress callback, and their one-line messages. An evaluation
 * returns EVAL_OK, or EVAL_USAGE / EVAL_RUNTIME after setting the message
 * (dtx_last_error); dtx_eval_run turns these into a dtx_status. The state is
 * per thread: evaluations on two threads do not mix their reports. */
#ifndef DTX_EVAL_RUN_H
#define DTX_EVAL_RUN_H

#include <stdint.h>

#include "common/json.h"
#include "difftx.h"

/* EVAL_HELP: --help was given and its usage is the report (a success). */
enum { EVAL_OK = 0, EVAL_RUNTIME = 1, EVAL_USAGE = 2, EVAL_HELP = 3 };

/* One evaluation: argv[0] is its name, the flags follow. */
typedef int (*eval_fn)(int argc, char **argv);

/* The report: printf-like text appended to the run's readable report. */
void eval_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void eval_puts(const char *s);
/* `done` of `total` units of `what` (difftx.h dtx_progress_fn). */
void eval_progress(const char *what, int64_t done, int64_t total);
/* A one-line note for the caller to show (its progress callback, total 0). */
void eval_note(const char *what);

/* The one-line messages: set dtx_last_error and return the code. */
int eval_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int eval_runtime_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A library call failed: its message stands. */
int eval_lib_error(void);

/* dtx_flags_parse on the evaluation's flags: EVAL_OK to go on, EVAL_USAGE
 * for a bad flag, EVAL_HELP after putting the usage (head, then the table's
 * flags: dtx_flags_usage) in the report; the evaluation returns either. */
int eval_flags(const char *head, dtx_flag *fl, int n_fl, int argc, char **argv);

/* The model (a file or a checkpoint's) at precision, with the bf16 note. */
int eval_model_load(dtx_model **m, const char *path, int precision);
/* The tokenizer and the model, and the check that they were made together;
 * the caller frees both whatever is returned. */
int eval_load_model_and_tokenizer(const char *model, const char *tokenizer, int precision, dtx_model **m,
                                  dtx_tokenizer **tok);

/* A JSON document that begins as every evaluation's does: the model file,
 * its architecture and parameter count. */
cJSON *eval_json_begin(const char *model_path, const dtx_model *m, int *ok);
/* The run's JSON document: root's text (indented when pretty) becomes the
 * result, and is also written to path (atomically) when path is not NULL.
 * Deletes root. */
int eval_json(const char *path, cJSON *root, int ok, int pretty);

/* The flags of the evaluations made of needle prompts (needle, attn-mass,
 * halluc), declared once. */
#define EVAL_FLAG_BOS_TOKENIZER(p) \
    DTX_FLAG_STR("--tokenizer", p, .metavar = "PATH", .help = "tokenizer file; it must have <|bos|>", .required = 1)
#define EVAL_FLAG_HAYSTACK(p)                                                                                     \
    DTX_FLAG_STR("--haystack", p, .metavar = "LIST",                                                               \
                 .help = "held-out text: files or folders (every file in them), comma-separated", .required = 1)

/* The evaluations. */
int dtx_eval_ppl_main(int argc, char **argv);
int dtx_eval_needle_main(int argc, char **argv);
int dtx_eval_attn_mass_main(int argc, char **argv);
int dtx_eval_outliers_main(int argc, char **argv);
int dtx_eval_attn_map_main(int argc, char **argv);
int dtx_eval_icl_main(int argc, char **argv);
int dtx_eval_halluc_main(int argc, char **argv);
int dtx_eval_recall_main(int argc, char **argv);

#endif
