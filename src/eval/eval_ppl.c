/* difftx eval ppl: the perplexity of a token file or a text under a model,
 * with a sliding window past the context length (the Hugging Face
 * perplexity guide's strided evaluation), optionally with low-bit attention
 * logits (spec §6.9, docs/eval_quant.md).
 *
 * Windows over tokens x[0, n): every token after the first is predicted
 * exactly once. Window k feeds x[b, e) and predicts x[b+1, e] (T = e − b <=
 * W inputs). The first window ends at e = min(W, n − 1) and scores all its
 * targets; each later one ends S targets further (the last one at n − 1),
 * starts W before its end, and scores only the targets past the previous
 * end: the rest of the window is context. Per-token NLL is computed from
 * the logits in double (log-sum-exp with max subtraction).
 *
 * The scored tokens also split as Table 6's (Zoology's) slices: an AR hit is
 * a target x[j] whose bigram (x[j−1], x[j]) already occurred inside the
 * window's inputs before it (associative recall can predict it), and the
 * others are every other target.
 *
 * --by-position (the paper's Fig. 4): the windows are laid end to end
 * (stride = window), so every target of a window is scored with the tokens
 * before it in that window as its whole context; position p (1..W) is the
 * target with p tokens of context. Per position: the mean NLL over the
 * windows, and the cumulative mean (every target at positions <= p). A
 * window may start inside a document: the position counts the context the
 * model saw, not the place in the document. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_run.h"
#include "common/common.h"
#include "difftx.h"


static const char USAGE[] =
    "usage: difftx eval ppl --model MODEL (--tokens FILE | --text FILE --tokenizer TOK) [flags]\n"
    "\n"
    "Perplexity of FILE under the model, with a sliding window: the first window\n"
    "scores all its targets, each later window moves on by STRIDE tokens and scores\n"
    "only its last STRIDE targets, the rest being context; every token after the\n"
    "first is predicted once. Prints the tokens scored, the mean NLL in nats, the\n"
    "perplexity exp(NLL) and, for a text, bits per byte (total NLL / ln 2 / bytes);\n"
    "and the mean NLL on the AR hits (targets whose bigram with the token before\n"
    "already occurred in the window: associative recall, the paper's Table 6) and\n"
    "on the others.\n"
    "\n";

typedef struct {
    const char *model, *tokens, *text, *tokenizer, *json;
    int64_t window, stride, max_tokens, attn_bits;
    int precision, attn_scope, by_position;
} ppl_args;

/* The token sequence scored; bytes: of the text it encodes, -1 for ids. */
typedef struct {
    int32_t *ids;
    int64_t n, n_read, bytes;
} corpus;

typedef struct {
    double nll;                 /* total, nats */
    int64_t scored, windows, W, S;
    double nll_hit;             /* of the AR hits (see the top of the file) */
    int64_t hits;
    double *pos_nll;            /* --by-position: [W] the NLL summed at each window position, */
    int64_t *pos_n;             /*   and the targets there (NULL without it)               */
} ppl_result;

/* ------------------------------------------------------------ input */

/* Encodes the text file (ordinary tokens); keeps the first max tokens and
 * counts their bytes (ordinary tokens decode to exactly the text's bytes). */
static int read_text(const ppl_args *a, const dtx_config *c, int64_t max, corpus *out) {
    dtx_tokenizer *t = NULL;
    char *buf = NULL;
    size_t len = 0;
    if (dtx_tokenizer_load(&t, a->tokenizer) != DTX_OK) return eval_lib_error();
    int rc = EVAL_OK;
    if (dtx_read_file(a->text, &buf, &len) != DTX_OK ||
        dtx_tokenizer_encode(t, buf, len, DTX_ENCODE_ORDINARY, &out->ids, &out->n_read) != DTX_OK)
        rc = eval_lib_error();
    out->n = out->n_read < max ? out->n_read : max;
    for (int64_t i = 0; rc == EVAL_OK && i < out->n; i++) {
        size_t nb = 0;
        if (out->ids[i] >= c->vocab_size) {
            rc = eval_runtime_error("%s: token %lld has id %d, outside the model's vocab_size %lld (tokenizer %s)",
                               a->text, (long long)i, out->ids[i], (long long)c->vocab_size, a->tokenizer);
        } else {
            dtx_tokenizer_token_bytes(t, out->ids[i], &nb);
            out->bytes += (int64_t)nb;
        }
    }
    free(buf);
    dtx_tokenizer_free(t);
    return rc;
}

static int read_corpus(const ppl_args *a, const dtx_config *c, corpus *out) {
    memset(out, 0, sizeof *out);
    int64_t max = a->max_tokens > 0 ? a->max_tokens : INT64_MAX;
    const char *path = a->text ? a->text : a->tokens;
    int rc;
    if (a->text) {
        rc = read_text(a, c, max, out);
    } else {
        out->bytes = -1;
        rc = dtx_tokens_read(a->tokens, c->vocab_size, &out->ids, &out->n_read) != DTX_OK ? eval_lib_error() : EVAL_OK;
        out->n = out->n_read < max ? out->n_read : max;
    }
    if (rc == EVAL_OK && out->n < 2)
        rc = eval_runtime_error("%s: %lld token%s to score; at least 2 are needed (the first is context only)", path,
                           (long long)out->n, out->n == 1 ? "" : "s");
    return rc;
}

/* ------------------------------------------------------------ scoring */

/* −log softmax(row)[target], in double. */
static double token_nll(const dtx_real *row, int64_t V, int32_t target) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    for (int64_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
    return mx + log(sum) - (double)row[target];
}

/* The bigrams seen so far in a window: an open-addressing set of
 * (a << 32 | b) + 1 keys (0: empty), cap a power of two >= 2 · entries. */
typedef struct {
    uint64_t *key;
    int64_t cap;
} bigram_set;

/* 1 when present; with insert, adds it when absent. */
static int bigram_seen(bigram_set *b, int32_t x, int32_t y, int insert) {
    uint64_t k = ((uint64_t)(uint32_t)x << 32 | (uint32_t)y) + 1;
    for (int64_t i = (int64_t)(dtx_mix64(k) & (uint64_t)(b->cap - 1));; i = (i + 1) & (b->cap - 1)) {
        if (b->key[i] == k) return 1;
        if (b->key[i] == 0) {
            if (insert) b->key[i] = k;
            return 0;
        }
    }
}

/* Runs every window (see the top of the file) and sums the NLL of the
 * targets each one scores, and of its AR hits. */
static int score_windows(dtx_model *m, const corpus *cp, int64_t W, int64_t S, int by_position, ppl_result *r) {
    const int64_t V = dtx_model_config(m)->vocab_size, n = cp->n;
    memset(r, 0, sizeof *r);
    dtx_real *logits = malloc((size_t)(W * V) * sizeof *logits);
    bigram_set bs = {NULL, 16};
    while (bs.cap < 2 * W) bs.cap *= 2;
    bs.key = malloc((size_t)bs.cap * sizeof *bs.key);
    if (by_position) r->pos_nll = calloc((size_t)W, sizeof *r->pos_nll), r->pos_n = calloc((size_t)W, sizeof *r->pos_n);
    if (!logits || !bs.key || (by_position && (!r->pos_nll || !r->pos_n))) {
        free(logits), free(bs.key), free(r->pos_nll), free(r->pos_n);
        r->pos_nll = NULL, r->pos_n = NULL;
        return eval_runtime_error("out of memory for the logits of a %lld-token window", (long long)W);
    }
    r->W = W, r->S = S;
    int rc = EVAL_OK;
    for (int64_t done = 0; done < n - 1 && rc == EVAL_OK;) { /* done: last target scored so far */
        int64_t e = done == 0 ? W : done + S;
        if (e > n - 1) e = n - 1;
        int64_t b = by_position ? done : e - W > 0 ? e - W : 0, T = e - b; /* end to end: the last one too */
        if (dtx_model_forward(m, cp->ids + b, NULL, 1, T, logits, NULL) != DTX_OK) {
            rc = eval_lib_error();
            break;
        }
        /* position i predicts x[b + i + 1]; the new targets are done + 1 .. e. The
         * bigrams of the inputs x[b .. b + i] are in the set when target i is scored. */
        memset(bs.key, 0, (size_t)bs.cap * sizeof *bs.key);
        const int32_t *x = cp->ids + b;
        for (int64_t i = 0; i < T; i++) {
            if (i > 0) bigram_seen(&bs, x[i - 1], x[i], 1);
            if (i < done - b) continue;
            double l = token_nll(logits + i * V, V, x[i + 1]);
            r->nll += l;
            if (r->pos_nll) r->pos_nll[i] += l, r->pos_n[i]++; /* i + 1 tokens of context: position i + 1 */
            if (bigram_seen(&bs, x[i], x[i + 1], 0)) r->nll_hit += l, r->hits++;
        }
        r->scored += e - done;
        r->windows++;
        done = e;
        eval_progress("ppl: targets scored", done, n - 1);
    }
    free(logits);
    free(bs.key);
    if (rc == EVAL_OK && !isfinite(r->nll)) rc = eval_runtime_error("the NLL is not finite (%g)", r->nll);
    return rc;
}

/* ------------------------------------------------------------ output */

static double bits_per_byte(const corpus *cp, const ppl_result *r) {
    return cp->bytes > 0 ? r->nll / log(2.0) / (double)cp->bytes : NAN;
}

static void print_result(const ppl_args *a, const dtx_model *m, const corpus *cp, const ppl_result *r) {
    const dtx_config *c = dtx_model_config(m);
    double mean = r->nll / (double)r->scored;
    eval_printf("model        %s (%s, %zu params)\n", a->model, dtx_arch_name(c->arch), dtx_model_num_params(m));
    eval_printf("input        %s: %lld tokens", a->text ? a->text : a->tokens, (long long)cp->n);
    if (cp->n < cp->n_read) eval_printf(" (first %lld of %lld)", (long long)cp->n, (long long)cp->n_read);
    if (cp->bytes >= 0) eval_printf(", %lld bytes", (long long)cp->bytes);
    eval_printf("\nwindows      %lld of up to %lld tokens, stride %lld\n", (long long)r->windows, (long long)r->W,
           (long long)r->S);
    if (a->attn_bits)
        eval_printf("attention    logits quantised to %lld bits, one step per %s\n", (long long)a->attn_bits,
               a->attn_scope ? "layer and map of each window" : "query row and head");
    else eval_printf("attention    logits unquantised\n");
    eval_printf("tokens       %lld scored\n", (long long)r->scored);
    eval_printf("mean NLL     %.6f nats\n", mean);
    eval_printf("perplexity   %.4f\n", exp(mean));
    int64_t others = r->scored - r->hits;
    eval_printf("AR hits      %lld tokens, mean NLL %.6f nats\n", (long long)r->hits, r->hits ? r->nll_hit / (double)r->hits : NAN);
    eval_printf("others       %lld tokens, mean NLL %.6f nats\n", (long long)others,
           others ? (r->nll - r->nll_hit) / (double)others : NAN);
    if (cp->bytes > 0) eval_printf("bits/byte    %.6f\n", bits_per_byte(cp, r));
    if (!r->pos_nll) return;
    eval_printf("by position  (context tokens: mean NLL there, cumulative mean up to it)\n");
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < r->W; i++) {
        sum += r->pos_nll[i], cnt += r->pos_n[i];
        int64_t p = i + 1;
        if (((p & (p - 1)) == 0 || p == r->W) && r->pos_n[i])
            eval_printf("  %8lld   %.6f   %.6f  (%lld windows)\n", (long long)p, r->pos_nll[i] / (double)r->pos_n[i],
                   sum / (double)cnt, (long long)r->pos_n[i]);
    }
}

static int write_json(const ppl_args *a, const dtx_model *m, const corpus *cp, const ppl_result *r) {
    double mean = r->nll / (double)r->scored;
    int ok = 1;
    cJSON *root = eval_json_begin(a->model, m, &ok);
    jnum(root, "tokens", (double)r->scored, &ok);
    jnum(root, "windows", (double)r->windows, &ok);
    jnum(root, "window", (double)r->W, &ok);
    jnum(root, "stride", (double)r->S, &ok);
    jnum(root, "nll", mean, &ok);
    jnum(root, "ppl", exp(mean), &ok);
    if (cp->bytes > 0) jnum(root, "bpb", bits_per_byte(cp, r), &ok);
    else if (!cJSON_AddNullToObject(root, "bpb")) ok = 0;
    jnum(root, "attn_bits", (double)a->attn_bits, &ok);
    jstr(root, "attn_scope", a->attn_scope ? "tensor" : "row", &ok);
    int64_t others = r->scored - r->hits;
    cJSON *hit = jadd(root, "ar_hit", cJSON_CreateObject(), &ok), *oth = jadd(root, "others", cJSON_CreateObject(), &ok);
    jnum(hit, "tokens", (double)r->hits, &ok);
    jnum(oth, "tokens", (double)others, &ok);
    if (r->hits) jnum(hit, "nll", r->nll_hit / (double)r->hits, &ok);
    else if (!cJSON_AddNullToObject(hit, "nll")) ok = 0;
    if (others) jnum(oth, "nll", (r->nll - r->nll_hit) / (double)others, &ok);
    else if (!cJSON_AddNullToObject(oth, "nll")) ok = 0;
    if (r->pos_nll) { /* parallel arrays over the positions that scored a target */
        cJSON *bp = jadd(root, "by_position", cJSON_CreateObject(), &ok);
        cJSON *pos = jadd(bp, "position", cJSON_CreateArray(), &ok), *cnt = jadd(bp, "tokens", cJSON_CreateArray(), &ok);
        cJSON *at = jadd(bp, "nll", cJSON_CreateArray(), &ok), *cum = jadd(bp, "cumulative", cJSON_CreateArray(), &ok);
        double sum = 0;
        int64_t total = 0;
        for (int64_t i = 0; ok && i < r->W && r->pos_n[i]; i++) {
            sum += r->pos_nll[i], total += r->pos_n[i];
            ok = cJSON_AddItemToArray(pos, cJSON_CreateNumber((double)(i + 1))) &&
                 cJSON_AddItemToArray(cnt, cJSON_CreateNumber((double)r->pos_n[i])) &&
                 cJSON_AddItemToArray(at, cJSON_CreateNumber(r->pos_nll[i] / (double)r->pos_n[i])) &&
                 cJSON_AddItemToArray(cum, cJSON_CreateNumber(sum / (double)total));
        }
    }
    return eval_json(a->json, root, ok, 0);
}

/* ------------------------------------------------------------ setup */

static int parse_args(ppl_args *a, int argc, char **argv) {
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a->model),
        DTX_FLAG_STR("--tokens", &a->tokens, .metavar = "FILE",
                     .help = "whitespace-separated token ids, or a token shard"),
        DTX_FLAG_STR("--text", &a->text, .metavar = "FILE",
                     .help = "a text, encoded with --tokenizer (ordinary tokens only: special-token text stays text)"),
        DTX_FLAG_STR("--tokenizer", &a->tokenizer, .metavar = "TOK", .help = "tokenizer file for --text"),
        DTX_FLAG_INT("--window", &a->window, 1, INT64_MAX, .metavar = "W",
                     .help = "tokens per forward pass (default max_seq_len)"),
        DTX_FLAG_INT("--stride", &a->stride, 1, INT64_MAX, .metavar = "S",
                     .help = "targets scored per window after the first (1..W; default W/2)"),
        DTX_FLAG_INT("--max-tokens", &a->max_tokens, 1, INT64_MAX, .metavar = "N",
                     .help = "use only the first N tokens (default all)"),
        DTX_FLAG_PRECISION(&a->precision),
        DTX_FLAG_ATTN_BITS(&a->attn_bits),
        DTX_FLAG_ATTN_SCOPE(&a->attn_scope),
        DTX_FLAG_BOOL("--by-position", &a->by_position, 1,
                      .help = "the loss against the context length (the paper's Fig. 4): windows laid end to end (no "
                              "--stride), the mean NLL of the targets at each position and the cumulative mean up to it "
                              "(printed at positions 1, 2, 4, ..., W; every one in the JSON)"),
        DTX_FLAG_STR("--json", &a->json, .metavar = "OUT", .help = "also write the result as JSON (atomically)"),
    };
    int flags_rc = eval_flags(USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv);
    if (flags_rc != EVAL_OK) return flags_rc; /* a bad flag, or --help */
    if (!a->tokens == !a->text) return eval_usage_error("give exactly one of --tokens FILE and --text FILE");
    if (a->text && !a->tokenizer) return eval_usage_error("--text needs --tokenizer");
    if (a->tokens && a->tokenizer) return eval_usage_error("--tokenizer goes with --text, not with --tokens");
    if (a->attn_bits == 1) return eval_usage_error("--attn-bits: expected 0 (off) or 2 to 16, got '1'");
    if (a->by_position && a->stride)
        return eval_usage_error("--by-position lays the windows end to end (stride = window): --stride does not apply");
    if (a->window && a->stride > a->window)
        return eval_usage_error("--stride %lld exceeds --window %lld", (long long)a->stride, (long long)a->window);
    return EVAL_OK;
}

/* The window and stride for this model (defaults: max_seq_len, W/2). */
static int resolve_window(ppl_args *a, const dtx_config *c) {
    if (a->window > c->max_seq_len)
        return eval_runtime_error("--window %lld exceeds the model's max_seq_len %lld", (long long)a->window,
                             (long long)c->max_seq_len);
    if (!a->window) a->window = c->max_seq_len;
    if (a->stride > a->window)
        return eval_runtime_error("--stride %lld exceeds the window, the model's max_seq_len %lld",
                             (long long)a->stride, (long long)a->window);
    if (!a->stride) a->stride = a->by_position ? a->window : a->window / 2 > 0 ? a->window / 2 : 1;
    return EVAL_OK;
}

static int run(ppl_args *a, dtx_model *m) {
    const dtx_config *c = dtx_model_config(m);
    int rc = resolve_window(a, c);
    if (rc) return rc;
    if (dtx_model_set_attention_quant(m, (int)a->attn_bits, (dtx_quant_scope)a->attn_scope) != DTX_OK)
        return eval_lib_error();
    corpus cp;
    ppl_result r;
    memset(&r, 0, sizeof r);
    rc = read_corpus(a, c, &cp);
    if (rc == EVAL_OK) rc = score_windows(m, &cp, a->window, a->stride, a->by_position, &r);
    /* the JSON first: a failure to write it is then the only line printed */
    if (rc == EVAL_OK) rc = write_json(a, m, &cp, &r);
    if (rc == EVAL_OK) print_result(a, m, &cp, &r);
    free(r.pos_nll), free(r.pos_n);
    free(cp.ids);
    return rc;
}

int dtx_eval_ppl_main(int argc, char **argv) {
    ppl_args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc;
    dtx_model *m = NULL;
    if (eval_model_load(&m, a.model, a.precision) != DTX_OK) return eval_lib_error();
    rc = run(&a, m);
    dtx_model_free(m);
    return rc == EVAL_OK ? EVAL_OK : rc;
}
