/* difftx eval needle: multi-needle retrieval (spec §6.4, the paper's Table 2
 * and Fig 5) on any model file; docs/eval_needle.md. Prompts come from
 * src/eval/needle.c; each queried city is a greedy continuation of one
 * prefilled context (dtx_kvcache_truncate back to it between queries). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_run.h"
#include "common/common.h"
#include "difftx.h"
#include "eval/needle.h"
#include "eval/needle_answer.h"


static const char USAGE[] =
    "usage: difftx eval needle --model MODEL --tokenizer TOK --haystack PATH[,PATH...]\n"
    "                          [--lengths L1,L2,...] [--grid 1x1,2x2,4x2,6x2]\n"
    "                          [--depths 0,25,50,75,100] [--samples 50] [--seed 1]\n"
    "                          [--max-new 8] [--json OUT] [--precision fp32|bf16]\n"
    "                          [--attn-bits B] [--attn-scope row|tensor]\n"
    "\n"
    "Multi-needle retrieval (DIFF Transformer paper, Table 2 and Fig 5). Each prompt\n"
    "is <|bos|>, a framing sentence, held-out text (the haystack) with N needles\n"
    "\"The special magic {city} number is: {n}.\" (distinct cities, 5-digit numbers),\n"
    "then a question about one city. Needle 0 (the answer) sits at the given depth,\n"
    "the others at random places. For R > 1 the R queried cities are asked one at a\n"
    "time after the same context. Decoding is greedy; an answer is right when the\n"
    "number occurs in the generated text (up to its first newline). Prints per-query\n"
    "accuracy and all-correct rate (all R right) with Wilson 95% intervals, per\n"
    "(N, R, length) averaged over depths, and per depth and length.\n"
    "\n";

enum { MAX_LIST = 64 };

typedef struct {
    int n, r;
} nr_pair;

typedef struct {
    const char *model, *tokenizer, *haystack, *lengths_s, *grid_s, *depths_s, *json;
    int64_t samples, max_new, attn_bits;
    uint64_t seed;
    int precision, attn_scope;
    int64_t lengths[MAX_LIST];
    int n_lengths;
    int length_default; /* --lengths not given: what the model's context holds */
    nr_pair grid[MAX_LIST];
    int n_grid;
    double depths[MAX_LIST];
    int n_depths;
} needle_args;

/* One cell's counts (queries = samples × R), and what the model said to its
 * first prompt's first question, for the JSON. */
typedef struct {
    int64_t samples, correct, queries, all_correct, tokens;
    char city[40], number[8], output[160];
} tally;

typedef struct {
    dtx_model *m;
    dtx_tokenizer *tok;
    dtx_needle_source *src;
    dtx_needle_answerer *ans;
} runner;

/* ------------------------------------------------------------ flag values */

static int has_duplicate_f(const double *v, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (v[i] == v[j]) return 1;
    return 0;
}

static int parse_lengths(needle_args *a) {
    a->n_lengths = dtx_flags_int_list("--lengths", a->lengths_s, 1, INT32_MAX, a->lengths, MAX_LIST);
    return a->n_lengths < 0 ? EVAL_USAGE : EVAL_OK;
}

static int parse_depths(needle_args *a) {
    int n = dtx_eval_parse_list(a->depths_s, a->depths, MAX_LIST);
    if (n < 0)
        return eval_usage_error("--depths: expected comma-separated percentages (at most %d), got '%s'", MAX_LIST,
                           a->depths_s);
    for (int i = 0; i < n; i++)
        if (a->depths[i] < 0 || a->depths[i] > 100)
            return eval_usage_error("--depths: expected percentages in [0, 100], got '%s'", a->depths_s);
    if (has_duplicate_f(a->depths, n)) return eval_usage_error("--depths: '%s' repeats a depth", a->depths_s);
    a->n_depths = n;
    return EVAL_OK;
}

/* "NxR" with 1 <= R <= N <= DTX_NEEDLE_MAX. */
static int parse_pair(const char *s, size_t len, nr_pair *out) {
    char item[32];
    if (len == 0 || len >= sizeof item) return -1;
    memcpy(item, s, len);
    item[len] = '\0';
    char *x = strchr(item, 'x');
    if (!x) return -1;
    *x = '\0';
    int64_t n, r;
    if (dtx_parse_i64(item, &n) || dtx_parse_i64(x + 1, &r)) return -1;
    if (n < 1 || n > DTX_NEEDLE_MAX || r < 1 || r > n) return -1;
    out->n = (int)n;
    out->r = (int)r;
    return 0;
}

static int parse_grid(needle_args *a) {
    int n = 0;
    for (const char *p = a->grid_s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == MAX_LIST || parse_pair(p, len, &a->grid[n]) != 0)
            return eval_usage_error("--grid: expected NxR pairs with 1 <= R <= N <= %d, comma-separated, got '%s'",
                               DTX_NEEDLE_MAX, a->grid_s);
        for (int j = 0; j < n; j++)
            if (a->grid[j].n == a->grid[n].n && a->grid[j].r == a->grid[n].r)
                return eval_usage_error("--grid: '%s' repeats a pair", a->grid_s);
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    a->n_grid = n;
    return EVAL_OK;
}

/* --lengths against the model; the default fills the context. */
static int check_lengths(needle_args *a, const dtx_config *c) {
    if (!a->lengths_s) {
        if (c->max_seq_len - a->max_new < 1)
            return eval_usage_error("--max-new %lld leaves no room for a prompt in max_seq_len %lld",
                               (long long)a->max_new, (long long)c->max_seq_len);
        a->lengths[0] = c->max_seq_len - a->max_new;
        a->n_lengths = 1;
        a->length_default = 1;
    }
    for (int i = 0; i < a->n_lengths; i++)
        if (a->lengths[i] + a->max_new > c->max_seq_len)
            return eval_usage_error(
                               "--lengths: %lld + --max-new %lld is more than the model's max_seq_len %lld (the "
                               "longest prompt is %lld tokens)",
                               (long long)a->lengths[i], (long long)a->max_new, (long long)c->max_seq_len,
                               (long long)(c->max_seq_len - a->max_new));
    return EVAL_OK;
}

/* ------------------------------------------------------------ scoring */

/* Scores one prompt's R queries into t. */
static dtx_status score_prompt(runner *r, const dtx_needle_prompt *p, tally *t) {
    int first = t->samples == 0, ok[DTX_NEEDLE_MAX], right = 0;
    char text[sizeof t->output];
    dtx_status st = dtx_needle_answer_prompt(r->ans, p, ok, text, sizeof text);
    if (st) return st;
    for (int q = 0; q < p->n_queries; q++) right += ok[q];
    if (first) {
        snprintf(t->city, sizeof t->city, "%s", p->city[0]);
        snprintf(t->number, sizeof t->number, "%s", p->number[0]);
        snprintf(t->output, sizeof t->output, "%s", text);
    }
    t->samples++;
    t->queries += p->n_queries;
    t->correct += right;
    t->all_correct += right == p->n_queries;
    t->tokens += p->n;
    return DTX_OK;
}

static dtx_needle_spec cell_spec(const needle_args *a, int g, int l, int d, int64_t sample) {
    dtx_needle_spec s = {
        .length = a->lengths[l],
        .n_needles = a->grid[g].n,
        .n_queries = a->grid[g].r,
        .depth = a->depths[d] / 100,
        .seed = dtx_needle_cell_seed(a->seed, a->grid[g].n, a->grid[g].r, a->lengths[l], a->depths[d], sample),
        .with_answer = 0,
    };
    return s;
}

/* A prompt that cannot be made is the flags' fault (a length too short). */
static int make_error(const needle_args *a, int l, dtx_status st) {
    if (st == DTX_ERR_ARG)
        return eval_usage_error("--lengths %lld: %s%s", (long long)a->lengths[l], dtx_last_error(),
                           a->length_default ? " (the default --lengths is all the model's max_seq_len leaves: its "
                                               "context is too short for this task; a model trained at a longer "
                                               "--seq fits it)" : "");
    return eval_lib_error();
}

/* Every length and pair must hold a prompt: checked on each cell's first
 * sample before any model time is spent. */
static int precheck(const needle_args *a, const dtx_needle_source *src) {
    for (int g = 0; g < a->n_grid; g++)
        for (int l = 0; l < a->n_lengths; l++)
            for (int d = 0; d < a->n_depths; d++) {
                dtx_needle_spec s = cell_spec(a, g, l, d, 0);
                dtx_needle_prompt p;
                dtx_status st = dtx_needle_make(src, &s, &p);
                if (st) return make_error(a, l, st);
                dtx_needle_prompt_free(&p);
            }
    return EVAL_OK;
}

static void progress(int64_t done, int64_t total, const nr_pair *g, int64_t length) {
    char what[96];
    snprintf(what, sizeof what, "needle: N=%d R=%d length %lld: prompts", g->n, g->r, (long long)length);
    eval_progress(what, done, total);
}

static int run_grid(const needle_args *a, runner *r, tally *cells) {
    int64_t total = (int64_t)a->n_grid * a->n_lengths * a->n_depths * a->samples, done = 0;
    for (int g = 0; g < a->n_grid; g++)
        for (int l = 0; l < a->n_lengths; l++)
            for (int d = 0; d < a->n_depths; d++) {
                tally *t = &cells[((int64_t)g * a->n_lengths + l) * a->n_depths + d];
                for (int64_t s = 0; s < a->samples; s++) {
                    dtx_needle_spec spec = cell_spec(a, g, l, d, s);
                    dtx_needle_prompt p;
                    dtx_status st = dtx_needle_make(r->src, &spec, &p);
                    if (st) return make_error(a, l, st);
                    st = score_prompt(r, &p, t);
                    dtx_needle_prompt_free(&p);
                    if (st) return eval_lib_error();
                    progress(++done, total, &a->grid[g], a->lengths[l]);
                }
            }
    return EVAL_OK;
}

/* ------------------------------------------------------------ reporting */

static tally pooled(const needle_args *a, const tally *cells, int g, int l) {
    tally s = {0};
    for (int d = 0; d < a->n_depths; d++) {
        const tally *t = &cells[((int64_t)g * a->n_lengths + l) * a->n_depths + d];
        s.samples += t->samples;
        s.correct += t->correct;
        s.queries += t->queries;
        s.all_correct += t->all_correct;
        s.tokens += t->tokens;
    }
    return s;
}

static double ratio(int64_t k, int64_t n) { return n > 0 ? (double)k / (double)n : 0; }

static void print_table2(const needle_args *a, const tally *cells) {
    eval_printf("\nAccuracy averaged over the answer depths (the paper's Table 2), Wilson 95%% intervals:\n");
    eval_printf("  N  R  length  per-query  interval          all-correct  interval\n");
    for (int g = 0; g < a->n_grid; g++)
        for (int l = 0; l < a->n_lengths; l++) {
            tally s = pooled(a, cells, g, l);
            double lo, hi, alo, ahi;
            dtx_wilson95(s.correct, s.queries, &lo, &hi);
            dtx_wilson95(s.all_correct, s.samples, &alo, &ahi);
            eval_printf(" %2d %2d %7lld  %9.3f  [%.3f, %.3f]  %11.3f  [%.3f, %.3f]\n", a->grid[g].n, a->grid[g].r,
                   (long long)a->lengths[l], ratio(s.correct, s.queries), lo, hi, ratio(s.all_correct, s.samples),
                   alo, ahi);
        }
}

/* One (N, R)'s depth × length grid of per-query (all = 0) or all-correct rates. */
static void print_heatmap(const needle_args *a, const tally *cells, int g, int all) {
    eval_printf("\nN=%d, R=%d: %s by answer depth (rows) and length (columns):\n  depth", a->grid[g].n, a->grid[g].r,
           all ? "all-correct rate" : "per-query accuracy");
    for (int l = 0; l < a->n_lengths; l++) eval_printf(" %8lld", (long long)a->lengths[l]);
    for (int d = 0; d <= a->n_depths; d++) {
        if (d < a->n_depths) eval_printf("\n %5g%%", a->depths[d]);
        else eval_printf("\n    avg");
        for (int l = 0; l < a->n_lengths; l++) {
            tally t = d < a->n_depths ? cells[((int64_t)g * a->n_lengths + l) * a->n_depths + d] : pooled(a, cells, g, l);
            eval_printf(" %8.3f", all ? ratio(t.all_correct, t.samples) : ratio(t.correct, t.queries));
        }
    }
    eval_puts("\n");
}

static void print_report(const needle_args *a, const dtx_model *m, const tally *cells) {
    const dtx_config *c = dtx_model_config(m);
    eval_printf("needle retrieval: %s (%s, %zu parameters), %lld samples per cell, seed %llu, greedy, at most %lld new "
           "tokens\n",
           a->model, dtx_arch_name(c->arch), dtx_model_num_params(m), (long long)a->samples,
           (unsigned long long)a->seed, (long long)a->max_new);
    if (a->attn_bits)
        eval_printf("attention logits quantised to %lld bits, one step per %s\n", (long long)a->attn_bits,
               a->attn_scope ? "layer and map per call" : "query row and head");
    print_table2(a, cells);
    for (int g = 0; g < a->n_grid; g++) {
        print_heatmap(a, cells, g, 0);
        if (a->grid[g].r > 1) print_heatmap(a, cells, g, 1);
    }
}

/* text as valid UTF-8 (an invalid or cut byte becomes U+FFFD), so that the
 * JSON stays parseable whatever the model generated; out holds 3 × the input. */
static void utf8_clean(const char *text, char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0;
    while (*s) {
        int n = *s < 0x80 ? 1 : *s >= 0xC2 && *s < 0xE0 ? 2 : *s >= 0xE0 && *s < 0xF0 ? 3 : *s >= 0xF0 && *s < 0xF5 ? 4 : 0;
        int ok = n > 0;
        for (int i = 1; i < n && ok; i++) ok = (s[i] & 0xC0) == 0x80;
        /* no overlong forms, surrogates or code points past U+10FFFF */
        if (ok && n >= 3)
            ok = !(s[0] == 0xE0 && s[1] < 0xA0) && !(s[0] == 0xED && s[1] >= 0xA0) && !(s[0] == 0xF0 && s[1] < 0x90) &&
                 !(s[0] == 0xF4 && s[1] >= 0x90);
        if (ok) {
            memcpy(out + o, s, (size_t)n);
            o += (size_t)n;
            s += n;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            s++;
        }
    }
    out[o] = '\0';
}

static void json_example(cJSON *o, const tally *t, int *ok) {
    char clean[3 * sizeof t->output];
    utf8_clean(t->output, clean);
    cJSON *ex = jadd(o, "example", cJSON_CreateObject(), ok);
    jstr(ex, "city", t->city, ok);
    jstr(ex, "number", t->number, ok);
    jstr(ex, "output", clean, ok);
}

/* The counts and rates of one cell or pooled row. */
static void json_tally(cJSON *o, const tally *t, const char *lo_key, const char *hi_key, int *ok) {
    double lo, hi, alo, ahi;
    dtx_wilson95(t->correct, t->queries, &lo, &hi);
    dtx_wilson95(t->all_correct, t->samples, &alo, &ahi);
    jnum(o, "samples", (double)t->samples, ok);
    jnum(o, "correct_queries", (double)t->correct, ok);
    jnum(o, "queries", (double)t->queries, ok);
    jnum(o, "all_correct", (double)t->all_correct, ok);
    jnum(o, "acc", ratio(t->correct, t->queries), ok);
    jnum(o, lo_key, lo, ok);
    jnum(o, hi_key, hi, ok);
    jnum(o, "all_acc", ratio(t->all_correct, t->samples), ok);
    jnum(o, "all_lo", alo, ok);
    jnum(o, "all_hi", ahi, ok);
    jnum(o, "mean_prompt_tokens", ratio(t->tokens, t->samples), ok);
}

static void json_cells(cJSON *root, const needle_args *a, const tally *cells, int *ok) {
    cJSON *arr = jadd(root, "cells", cJSON_CreateArray(), ok), *t2 = jadd(root, "table2", cJSON_CreateArray(), ok);
    for (int g = 0; g < a->n_grid && *ok; g++)
        for (int l = 0; l < a->n_lengths && *ok; l++) {
            for (int d = 0; d < a->n_depths && *ok; d++) {
                cJSON *o = jadd(arr, NULL, cJSON_CreateObject(), ok);
                jnum(o, "n", a->grid[g].n, ok);
                jnum(o, "r", a->grid[g].r, ok);
                jnum(o, "length", (double)a->lengths[l], ok);
                jnum(o, "depth", a->depths[d], ok);
                const tally *t = &cells[((int64_t)g * a->n_lengths + l) * a->n_depths + d];
                json_tally(o, t, "acc_lo", "acc_hi", ok);
                json_example(o, t, ok);
            }
            tally s = pooled(a, cells, g, l);
            cJSON *o = jadd(t2, NULL, cJSON_CreateObject(), ok);
            jnum(o, "n", a->grid[g].n, ok);
            jnum(o, "r", a->grid[g].r, ok);
            jnum(o, "length", (double)a->lengths[l], ok);
            json_tally(o, &s, "lo", "hi", ok);
        }
}

static cJSON *json_report(const needle_args *a, const dtx_model *m, const dtx_needle_source *src, const tally *cells,
                          int *ok) {
    cJSON *root = eval_json_begin(a->model, m, ok);
    jstr(root, "tokenizer", a->tokenizer, ok);
    jstr(root, "haystack", a->haystack, ok);
    jnum(root, "haystack_tokens", (double)dtx_needle_source_tokens(src), ok);
    jnum(root, "seed", (double)a->seed, ok);
    jnum(root, "samples", (double)a->samples, ok);
    jnum(root, "max_new", (double)a->max_new, ok);
    jstr(root, "precision", dtx_precision_name(dtx_model_precision(m)), ok);
    jnum(root, "attn_bits", (double)a->attn_bits, ok);
    jstr(root, "attn_scope", a->attn_scope ? "tensor" : "row", ok);
    jstr(root, "criterion", "the needle's number occurs in the greedy output up to its first newline", ok);
    cJSON *len = jadd(root, "lengths", cJSON_CreateArray(), ok), *dep = jadd(root, "depths", cJSON_CreateArray(), ok);
    cJSON *grid = jadd(root, "grid", cJSON_CreateArray(), ok);
    for (int l = 0; l < a->n_lengths; l++) jadd(len, NULL, cJSON_CreateNumber((double)a->lengths[l]), ok);
    for (int d = 0; d < a->n_depths; d++) jadd(dep, NULL, cJSON_CreateNumber(a->depths[d]), ok);
    for (int g = 0; g < a->n_grid; g++) {
        cJSON *o = jadd(grid, NULL, cJSON_CreateObject(), ok);
        jnum(o, "n", a->grid[g].n, ok);
        jnum(o, "r", a->grid[g].r, ok);
    }
    json_cells(root, a, cells, ok);
    return root;
}

static int write_json(const needle_args *a, const dtx_model *m, const dtx_needle_source *src, const tally *cells) {
    int ok = 1;
    cJSON *root = json_report(a, m, src, cells, &ok);
    return eval_json(a->json, root, ok, 1);
}

/* ------------------------------------------------------------ setup */

static int open_runner(const needle_args *a, runner *r) {
    int rc = eval_load_model_and_tokenizer(a->model, a->tokenizer, a->precision, &r->m, &r->tok);
    if (rc != EVAL_OK) return rc;
    if (dtx_model_set_attention_quant(r->m, (int)a->attn_bits, (dtx_quant_scope)a->attn_scope) != DTX_OK)
        return eval_lib_error();
    if (dtx_needle_source_open_list(&r->src, r->tok, a->haystack) != DTX_OK) return eval_lib_error();
    return EVAL_OK;
}

static int open_cache(const needle_args *a, runner *r) {
    int64_t longest = 0;
    for (int l = 0; l < a->n_lengths; l++) longest = a->lengths[l] > longest ? a->lengths[l] : longest;
    if (dtx_needle_answerer_init(&r->ans, r->m, r->tok, longest, a->max_new) != DTX_OK) return eval_lib_error();
    return EVAL_OK;
}

static void close_runner(runner *r) {
    dtx_needle_answerer_free(r->ans);
    dtx_needle_source_free(r->src);
    dtx_model_free(r->m);
    dtx_tokenizer_free(r->tok);
}

static int parse_args(needle_args *a, int argc, char **argv) {
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a->model),
        EVAL_FLAG_BOS_TOKENIZER(&a->tokenizer),
        EVAL_FLAG_HAYSTACK(&a->haystack),
        DTX_FLAG_STR("--lengths", &a->lengths_s, .metavar = "LIST",
                     .help = "prompt lengths in tokens (default: max_seq_len - max-new); each plus --max-new must fit in "
                             "max_seq_len"),
        DTX_FLAG_STR("--grid", &a->grid_s, .metavar = "LIST",
                     .help = "NxR pairs, 1 <= R <= N <= 16 (default 1x1,2x2,4x2,6x2)"),
        DTX_FLAG_STR("--depths", &a->depths_s, .metavar = "LIST",
                     .help = "answer depths in percent, 0..100 (default 0,25,50,75,100)"),
        DTX_FLAG_INT("--samples", &a->samples, 1, 1000000, .metavar = "S",
                     .help = "prompts per (N, R, length, depth) cell (default 50)"),
        DTX_FLAG_SEED("--seed", &a->seed, .metavar = "S",
                      .help = "seed of every prompt, hashed with its cell (default 1)"),
        DTX_FLAG_INT("--max-new", &a->max_new, 1, 1024, .metavar = "M",
                     .help = "most tokens generated per query (default 8)"),
        DTX_FLAG_STR("--json", &a->json, .metavar = "OUT",
                     .help = "also write every cell and the Table 2 rows as JSON"),
        DTX_FLAG_PRECISION(&a->precision),
        DTX_FLAG_ATTN_BITS(&a->attn_bits),
        DTX_FLAG_ATTN_SCOPE(&a->attn_scope),
    };
    int n_fl = (int)(sizeof fl / sizeof fl[0]);
    int flags_rc = eval_flags(USAGE, fl, n_fl, argc, argv);
    if (flags_rc != EVAL_OK) return flags_rc; /* a bad flag, or --help */
    if (a->attn_bits == 1) return eval_usage_error("--attn-bits: expected 0 (off) or 2 to 16, got '1'");
    int rc = EVAL_OK;
    if (a->lengths_s) rc = parse_lengths(a);
    if (rc == EVAL_OK) rc = parse_grid(a);
    if (rc == EVAL_OK) rc = parse_depths(a);
    return rc;
}

int dtx_eval_needle_main(int argc, char **argv) {
    needle_args a = {.samples = 50, .seed = 1, .max_new = 8, .grid_s = "1x1,2x2,4x2,6x2",
                     .depths_s = "0,25,50,75,100"};
    int rc = parse_args(&a, argc, argv);
    if (rc != EVAL_OK) return rc;
    runner r = {0};
    tally *cells = NULL;
    rc = open_runner(&a, &r);
    if (rc == EVAL_OK) rc = check_lengths(&a, dtx_model_config(r.m));
    if (rc == EVAL_OK) rc = precheck(&a, r.src);
    if (rc == EVAL_OK) rc = open_cache(&a, &r);
    if (rc == EVAL_OK && !(cells = calloc((size_t)a.n_grid * (size_t)a.n_lengths * (size_t)a.n_depths, sizeof *cells)))
        rc = eval_runtime_error("out of memory");
    if (rc == EVAL_OK) rc = run_grid(&a, &r, cells);
    if (rc == EVAL_OK) print_report(&a, r.m, cells);
    if (rc == EVAL_OK) rc = write_json(&a, r.m, r.src, cells);
    free(cells);
    close_runner(&r);
    return rc;
}
