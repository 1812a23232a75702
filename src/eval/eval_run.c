/* dtx_eval_run: the registry of the evaluations and what they share while
 * one runs (eval_run.h). */
#include "eval/eval_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

typedef struct {
    const char *name;
    eval_fn run;
    const char *summary;
} eval_entry;

static const eval_entry EVALS[] = {
    {"ppl", dtx_eval_ppl_main, "perplexity of a token file or text, sliding window past the context"},
    {"needle", dtx_eval_needle_main, "multi-needle retrieval grid (N needles, R queries, depth x length)"},
    {"attn-mass", dtx_eval_attn_mass_main, "attention on BOS / answer needle / other context / query"},
    {"outliers", dtx_eval_outliers_main, "top-k and median of |attention logits| and |hidden states|"},
    {"attn-map", dtx_eval_attn_map_main, "one prompt's attention maps for a layer and head, as JSON"},
    {"icl", dtx_eval_icl_main, "many-shot in-context classification: accuracy by shots, order robustness"},
    {"halluc", dtx_eval_halluc_main, "contextual faithfulness: contradicted facts, list every number, absent"},
    {"recall", dtx_eval_recall_main, "multi-query associative recall: accuracy and attention against distractors"},
};
enum { N_EVALS = sizeof EVALS / sizeof EVALS[0] };

int dtx_eval_count(void) { return N_EVALS; }

const char *dtx_eval_name(int i, const char **summary) {
    if (i < 0 || i >= N_EVALS) return NULL;
    if (summary) *summary = EVALS[i].summary;
    return EVALS[i].name;
}

/* ------------------------------------------------------------ the run */

typedef struct {
    FILE *report; /* open_memstream over text */
    char *text;
    size_t text_len;
    char *json;
    dtx_progress_fn progress;
    void *user;
} eval_state;

static _Thread_local eval_state *g_run;

void eval_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(g_run->report, fmt, ap);
    va_end(ap);
}

void eval_puts(const char *s) { fputs(s, g_run->report); }

void eval_progress(const char *what, int64_t done, int64_t total) {
    if (g_run->progress && total > 0) g_run->progress(g_run->user, what, done, total);
}

void eval_note(const char *what) {
    if (g_run->progress) g_run->progress(g_run->user, what, 0, 0);
}

static int vfail(int code, dtx_status st, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    dtx_fail(st, "%s", msg);
    return code;
}

int eval_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(EVAL_USAGE, DTX_ERR_USAGE, fmt, ap);
    va_end(ap);
    return rc;
}

int eval_runtime_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(EVAL_RUNTIME, DTX_ERR_ARG, fmt, ap);
    va_end(ap);
    return rc;
}

int eval_lib_error(void) {
    if (!dtx_last_error()[0]) dtx_fail(DTX_ERR_ARG, "unknown library error");
    return dtx_last_status() == DTX_ERR_USAGE ? EVAL_USAGE : EVAL_RUNTIME;
}

int eval_flags(const char *head, dtx_flag *fl, int n_fl, int argc, char **argv) {
    char cmd[64];
    snprintf(cmd, sizeof cmd, "eval %s", argv[0]);
    if (dtx_flags_want_help(argc, argv)) { /* before parsing: the usage shows the defaults */
        char *usage = dtx_flags_usage(head, fl, n_fl);
        eval_puts(usage ? usage : head);
        free(usage);
        return EVAL_HELP;
    }
    return dtx_flags_parse(cmd, fl, n_fl, argc, argv, NULL, 0, NULL) == DTX_FLAGS_OK ? EVAL_OK : EVAL_USAGE;
}

/* The note on emulated bf16, for the caller to show. */
static void note_precision(int precision) {
    const char *note = dtx_precision_note((dtx_precision)precision);
    if (note) eval_note(note);
}

int eval_model_load(dtx_model **m, const char *path, int precision) {
    if (dtx_model_open(m, path, (dtx_precision)precision) != DTX_OK) return eval_lib_error();
    note_precision(precision);
    return EVAL_OK;
}

int eval_load_model_and_tokenizer(const char *model, const char *tokenizer, int precision, dtx_model **m,
                                  dtx_tokenizer **tok) {
    if (dtx_model_open_with_tokenizer(m, tok, model, tokenizer, (dtx_precision)precision) != DTX_OK)
        return eval_lib_error();
    note_precision(precision);
    return EVAL_OK;
}

cJSON *eval_json_begin(const char *model_path, const dtx_model *m, int *ok) {
    cJSON *root = cJSON_CreateObject();
    if (!root) *ok = 0;
    jstr(root, "model", model_path, ok);
    jstr(root, "arch", dtx_arch_name(dtx_model_config(m)->arch), ok);
    jnum(root, "params", (double)dtx_model_num_params(m), ok);
    return root;
}

int eval_json(const char *path, cJSON *root, int ok, int pretty) {
    char *text = json_text(root, ok, pretty);
    if (!text) return eval_runtime_error("out of memory building the JSON");
    if (path && dtx_write_file_atomic(path, text, strlen(text)) != DTX_OK) {
        free(text);
        return eval_lib_error();
    }
    free(g_run->json);
    g_run->json = text;
    return EVAL_OK;
}

static const eval_entry *find(const char *name) {
    for (int i = 0; i < N_EVALS; i++)
        if (name && strcmp(EVALS[i].name, name) == 0) return &EVALS[i];
    return NULL;
}

dtx_status dtx_eval_run(const char *name, int argc, char **argv, dtx_progress_fn progress, void *user, char **text,
                        char **json) {
    if (text) *text = NULL;
    if (json) *json = NULL;
    if (!text || !json || argc < 0 || (argc > 0 && !argv)) return dtx_fail(DTX_ERR_ARG, "dtx_eval_run: NULL result");
    const eval_entry *e = find(name);
    if (!e) return dtx_fail(DTX_ERR_USAGE, "unknown measurement '%s' (see 'difftx eval --help')", name ? name : "");
    for (int i = 0; i < argc; i++)
        if (!argv[i]) return dtx_fail(DTX_ERR_ARG, "dtx_eval_run: argv[%d] is NULL", i);
    char **args = dtx_alloc((size_t)argc + 2, sizeof *args); /* argv[0] = the name, then the flags */
    if (!args) return DTX_ERR_NOMEM;
    args[0] = (char *)e->name;
    memcpy(args + 1, argv, (size_t)argc * sizeof *args);
    args[argc + 1] = NULL;
    eval_state st = {.progress = progress, .user = user};
    st.report = open_memstream(&st.text, &st.text_len);
    if (!st.report) {
        free(args);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for the report");
    }
    eval_state *outer = g_run; /* an evaluation run from a progress callback */
    g_run = &st;
    dtx_clear_error();
    int rc = e->run(argc + 1, args);
    if (rc == EVAL_HELP) rc = EVAL_OK; /* the usage is the report */
    g_run = outer;
    free(args);
    int closed = fclose(st.report);
    if (rc == EVAL_OK && closed != 0) rc = eval_runtime_error("out of memory for the report");
    if (rc != EVAL_OK) {
        free(st.text);
        free(st.json);
        if (!dtx_last_error()[0]) dtx_fail(DTX_ERR_ARG, "eval %s failed", e->name);
        return rc == EVAL_USAGE ? DTX_ERR_USAGE : dtx_last_status();
    }
    *text = st.text;
    *json = st.json;
    return DTX_OK;
}
