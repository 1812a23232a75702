/* difftx eval outliers: the activation-outlier statistics of the paper's
 * Table 5 (spec §6.8, docs/eval_probe.md): top-1/2/3/10/100 and the median
 * of |attention logits| (every causal entry of every head's map, both maps
 * for DIFF) and of |hidden states| (every layer's block output), pooled over
 * consecutive windows of a token file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_run.h"
#include "common/common.h"
#include "difftx.h"
#include "eval/probe.h"


static const char USAGE[] =
    "usage: difftx eval outliers --model MODEL.safetensors (--tokens FILE | --text FILE --tokenizer TOK)\n"
    "                            [--count N] [--window W] [--json OUT] [--precision fp32|bf16]\n"
    "\n"
    "Activation outliers (the paper's Table 5): the largest and the median absolute\n"
    "values of the attention logits q.k/sqrt(d) before the softmax (every causal entry\n"
    "of every head's map in every layer; both maps q1k1 and q2k2 for DIFF) and of the\n"
    "hidden states (every value of every layer's block output, after both residual\n"
    "additions). The input is cut into consecutive, non-overlapping windows of W\n"
    "tokens, each run alone (batch 1); the first floor(N / W) whole windows are used.\n"
    "Prints Top-1, Top-2, Top-3, Top-10, Top-100 (exact) and the median (to a\n"
    "relative 2^-11) of both.\n"
    "\n";

typedef struct {
    const char *model, *tokens, *text, *tokenizer, *json;
    int64_t count, window;
    int precision;
} outl_args;

typedef struct {
    int64_t n_input, windows, window, used;
    double seconds;
    dtx_abs_stats logits, hidden;
} outl_result;

static const int TOPS[] = {1, 2, 3, 10, 100};
enum { N_TOPS = sizeof TOPS / sizeof TOPS[0] };

/* ------------------------------------------------------------ input */

static int read_text_tokens(const outl_args *a, const dtx_config *c, int32_t **ids, int64_t *n) {
    dtx_tokenizer *t = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = EVAL_OK;
    if (dtx_tokenizer_load(&t, a->tokenizer) != DTX_OK) return eval_lib_error();
    if (dtx_tokenizer_vocab_size(t) > c->vocab_size)
        rc = eval_runtime_error("the tokenizer %s has %lld tokens, more than the model's vocab_size %lld",
                           a->tokenizer, (long long)dtx_tokenizer_vocab_size(t), (long long)c->vocab_size);
    if (rc == EVAL_OK && dtx_read_file(a->text, &buf, &len) != DTX_OK) rc = eval_lib_error();
    if (rc == EVAL_OK && dtx_tokenizer_encode(t, buf, len, DTX_ENCODE_ORDINARY, ids, n) != DTX_OK)
        rc = eval_lib_error();
    free(buf);
    dtx_tokenizer_free(t);
    return rc;
}

static int read_input(const outl_args *a, const dtx_config *c, int32_t **ids, int64_t *n) {
    if (a->tokens) return dtx_tokens_read(a->tokens, c->vocab_size, ids, n) == DTX_OK ? EVAL_OK : eval_lib_error();
    return read_text_tokens(a, c, ids, n);
}

/* ------------------------------------------------------------ measurement */


static int measure(dtx_model *m, const int32_t *ids, outl_result *r) {
    double t0 = dtx_now_s();
    for (int64_t w = 0; w < r->windows; w++) {
        if (dtx_model_forward(m, ids + w * r->window, NULL, 1, r->window, NULL, NULL) != DTX_OK ||
            dtx_probe_add_logits(m, &r->logits) != DTX_OK || dtx_probe_add_hidden(m, &r->hidden) != DTX_OK)
            return eval_lib_error();
        eval_progress("outliers: windows", w + 1, r->windows);
    }
    r->seconds = dtx_now_s() - t0;
    return EVAL_OK;
}

/* ------------------------------------------------------------ output */

static void print_row(const char *name, const dtx_abs_stats *s) {
    eval_printf("%-18s", name);
    for (int i = 0; i < N_TOPS; i++) {
        double v = dtx_abs_stats_top(s, TOPS[i]);
        if (isnan(v)) eval_printf(" %10s", "-");
        else eval_printf(" %10.5g", v);
    }
    eval_printf(" %10.5g\n", dtx_abs_stats_median(s));
}

static void print_report(const dtx_model *m, const outl_args *a, const outl_result *r) {
    const dtx_config *c = dtx_model_config(m);
    int diff = c->arch != DTX_ARCH_TRANSFORMER; /* two maps a head (DIFF, DIFF2) */
    eval_printf("model %s: %s, %lld layers, %lld heads (%lld KV), %s products\n", a->model, dtx_arch_name(c->arch),
           (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
           dtx_precision_name((dtx_precision)a->precision));
    eval_printf("tokens %lld in %lld windows of %lld (input %lld tokens, --count %lld), %.2f s\n", (long long)r->used,
           (long long)r->windows, (long long)r->window, (long long)r->n_input, (long long)a->count, r->seconds);
    eval_printf("attention logits counted %lld (%s, causal entries), hidden values counted %lld\n",
           (long long)r->logits.count, diff ? "both maps of every head and layer" : "every head and layer",
           (long long)r->hidden.count);
    if (r->logits.n_nan || r->hidden.n_nan)
        eval_printf("NaN values skipped: %lld logits, %lld hidden\n", (long long)r->logits.n_nan,
               (long long)r->hidden.n_nan);
    eval_printf("\n%-18s %10s %10s %10s %10s %10s %10s\n", "activation", "Top-1", "Top-2", "Top-3", "Top-10", "Top-100",
           "Median");
    print_row("attention logits", &r->logits);
    print_row("hidden states", &r->hidden);
}

/* One activation's numbers: count, NaNs, Top-k (null when fewer values than
 * k), median, and the largest values themselves. */
static void json_stats(cJSON *root, const char *name, const dtx_abs_stats *s, int *ok) {
    cJSON *o = jadd(root, name, cJSON_CreateObject(), ok);
    if (!o) return;
    jint(o, "count", s->count, ok);
    jint(o, "nan", s->n_nan, ok);
    for (int i = 0; i < N_TOPS; i++) {
        char key[16];
        snprintf(key, sizeof key, "top%d", TOPS[i]);
        jnum(o, key, dtx_abs_stats_top(s, TOPS[i]), ok);
    }
    jnum(o, "median", dtx_abs_stats_median(s), ok);
    jadd(o, "top", jnum_array(s->top, s->n_top, 17), ok);
}

/* The --json file (written atomically; in place when PATH is /dev/stdout or a FIFO). */
static int write_json(const char *path, const dtx_model *m, const outl_args *a, const outl_result *r) {
    int ok = 1;
    cJSON *root = cJSON_CreateObject();
    if (!root) ok = 0;
    else {
        jstr(root, "model", a->model, &ok);
        jstr(root, "arch", dtx_arch_name(dtx_model_config(m)->arch), &ok);
        jstr(root, "precision", dtx_precision_name((dtx_precision)a->precision), &ok);
        jint(root, "tokens", r->used, &ok);
        jint(root, "window", r->window, &ok);
        jint(root, "windows", r->windows, &ok);
        jint(root, "input_tokens", r->n_input, &ok);
        jnum(root, "seconds", r->seconds, &ok);
        json_stats(root, "attention_logits", &r->logits, &ok);
        json_stats(root, "hidden_states", &r->hidden, &ok);
    }
    return eval_json(path, root, ok, 1);
}

/* ------------------------------------------------------------ command */

static int check_args(const outl_args *a) {
    if (!a->tokens && !a->text) return eval_usage_error("give the input: --tokens FILE or --text FILE");
    if (a->tokens && a->text) return eval_usage_error("--tokens and --text exclude each other");
    if (a->text && !a->tokenizer) return eval_usage_error("--text needs --tokenizer");
    if (a->tokens && a->tokenizer) return eval_usage_error("--tokenizer goes with --text, not --tokens");
    return EVAL_OK;
}

/* Windows of the input: whole windows only, at most --count tokens. */
static int plan(const outl_args *a, const dtx_config *c, int64_t n, outl_result *r) {
    r->window = a->window ? a->window : c->max_seq_len;
    if (r->window > c->max_seq_len)
        return eval_usage_error("--window %lld exceeds the model's max_seq_len %lld", (long long)r->window,
                           (long long)c->max_seq_len);
    const char *in = a->tokens ? a->tokens : a->text;
    if (n < r->window)
        return eval_runtime_error("%s holds %lld tokens, fewer than one window of %lld", in, (long long)n,
                             (long long)r->window);
    if (a->count < r->window)
        return eval_usage_error("--count %lld is less than one window of %lld tokens", (long long)a->count,
                           (long long)r->window);
    r->n_input = n;
    r->windows = (n < a->count ? n : a->count) / r->window;
    r->used = r->windows * r->window;
    return EVAL_OK;
}

static int run(dtx_model *m, const outl_args *a) {
    const dtx_config *c = dtx_model_config(m);
    int32_t *ids = NULL;
    int64_t n = 0;
    outl_result r;
    memset(&r, 0, sizeof r);
    int rc = read_input(a, c, &ids, &n);
    if (rc == EVAL_OK) rc = plan(a, c, n, &r);
    if (rc == EVAL_OK && (dtx_abs_stats_init(&r.logits) != DTX_OK || dtx_abs_stats_init(&r.hidden) != DTX_OK))
        rc = eval_lib_error();
    if (rc == EVAL_OK) rc = measure(m, ids, &r);
    if (rc == EVAL_OK) print_report(m, a, &r);
    if (rc == EVAL_OK) rc = write_json(a->json, m, a, &r);
    if (rc == EVAL_OK && a->json) eval_printf("\nwrote %s\n", a->json);
    dtx_abs_stats_free(&r.logits);
    dtx_abs_stats_free(&r.hidden);
    free(ids);
    return rc;
}

int dtx_eval_outliers_main(int argc, char **argv) {
    outl_args a = {.count = 65536};
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a.model),
        DTX_FLAG_STR("--tokens", &a.tokens, .metavar = "FILE",
                     .help = "token ids (whitespace-separated) or a token shard"),
        DTX_FLAG_STR("--text", &a.text, .metavar = "FILE",
                     .help = "a text file, encoded with --tokenizer (no <|bos|> added)"),
        DTX_FLAG_STR("--tokenizer", &a.tokenizer, .metavar = "PATH", .help = "tokenizer file for --text"),
        DTX_FLAG_INT("--count", &a.count, 1, (int64_t)1 << 40, .metavar = "N",
                     .help = "tokens to use (default 65536; fewer if the input is shorter)"),
        DTX_FLAG_INT("--window", &a.window, 1, (int64_t)1 << 30, .metavar = "W",
                     .help = "tokens per forward pass (default: the model's max_seq_len)"),
        DTX_FLAG_STR("--json", &a.json, .metavar = "OUT", .help = "also write the numbers as JSON (atomically)"),
        DTX_FLAG_PRECISION(&a.precision),
    };
    int flags_rc = eval_flags(USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv);
    if (flags_rc != EVAL_OK) return flags_rc; /* a bad flag, or --help */
    int rc = check_args(&a);
    if (rc != EVAL_OK) return rc;
    dtx_model *m = NULL;
    if (eval_model_load(&m, a.model, a.precision) != DTX_OK) return eval_lib_error();
    rc = run(m, &a);
    dtx_model_free(m);
    return rc == EVAL_OK ? EVAL_OK : rc;
}
