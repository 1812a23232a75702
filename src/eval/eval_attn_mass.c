/* difftx eval attn-mass: where the position that predicts the answer looks
 * (spec §6.5, the paper's Table 3 and Fig 1); docs/eval_needle.md. Needle
 * prompts from src/eval/needle.c; attention rows recomputed by
 * src/eval/probe.c from one forward pass per prompt. */
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
#include "eval/probe.h"


static const char USAGE[] =
    "usage: difftx eval attn-mass --model MODEL --tokenizer TOK --haystack PATH[,PATH...]\n"
    "                             [--length L] [--needles N] [--depths 0,25,50,75,100]\n"
    "                             [--samples 20] [--seed 1] [--max-new 8] [--json OUT]\n"
    "                             [--precision fp32|bf16]\n"
    "\n"
    "Attention allocation (DIFF Transformer paper, Table 3): for needle prompts (the\n"
    "ones of 'difftx eval needle' with R = 1), the attention row of the last prompt\n"
    "position, the one that predicts the first answer token, split into four\n"
    "segments: BOS, the answer needle, the rest of the context (framing, haystack,\n"
    "other needles: the 'noise') and the query. Per answer depth and layer the raw\n"
    "masses are summed over heads and samples and divided by that layer's total;\n"
    "the shares printed are the mean over layers (so every layer counts alike; for\n"
    "DIFF each layer's rows sum to 1 - lambda). For DIFF the map is the combined\n"
    "A1 - lambda*A2 and, beside it, A1 alone (a distribution); A2 is in the JSON.\n"
    "Each prompt is also answered greedily (as 'difftx eval needle' does), and the\n"
    "shares are given again over the prompts the model retrieves and those it misses.\n"
    "\n";

enum { MAX_DEPTHS = 64, N_SEG = 4, N_MAPS = 3 };
enum { SEG_BOS, SEG_ANSWER, SEG_CONTEXT, SEG_QUERY };
static const char *const SEG_NAME[N_SEG] = {"bos", "answer", "context", "query"};
/* Indexed like dtx_attn_map: A1, A2, DIFF (the combined map). */
static const char *const MAP_KEY[N_MAPS] = {"a1", "a2", "combined"};

typedef struct {
    const char *model, *tokenizer, *haystack, *depths_s, *json;
    int64_t length, needles, samples, max_new;
    uint64_t seed;
    int precision;
    double depths[MAX_DEPTHS];
    int n_depths;
} mass_args;

/* The prompts of one depth: all of them, those the model answers right,
 * those it misses. */
enum { GROUP_ALL, GROUP_RETRIEVED, GROUP_MISSED, N_GROUPS };
static const char *const GROUP_KEY[N_GROUPS] = {"all", "retrieved", "missed"};

/* One depth and group, per map and layer: the raw segment sums
 * layer[(map · n_layers + l) · N_SEG + segment], then (at N_MAPS · n_layers
 * · N_SEG) the sums of each row's shares (its segment sums over its total
 * absolute weight, see row_shares). */
typedef struct {
    double *layer;
    int64_t n_layers;
    int64_t rows;    /* attention rows summed: layers × heads × prompts */
    int64_t prompts, tokens;
} mass;

static int64_t mass_len(int64_t n_layers) { return 2 * N_MAPS * n_layers * N_SEG; }
static double *layer_sums(const mass *x, int mp, int64_t l) { return x->layer + (mp * x->n_layers + l) * N_SEG; }
static double *share_sums(const mass *x, int mp, int64_t l) {
    return x->layer + ((N_MAPS + mp) * x->n_layers + l) * N_SEG;
}

/* The four segments' masses of one row over keys 0..t; returns the row's
 * total absolute weight Σ|w| (1 for a softmax row; for DIFF's combined
 * A1 − λ·A2, whose weights sum to 1 − λ and can be negative, at least that). */
static double segment_masses(const double *row, const dtx_needle_prompt *p, int64_t t, double seg[N_SEG]) {
    double all = 0, answer = 0, query = 0, abs_all = 0;
    for (int64_t j = 0; j <= t; j++) all += row[j], abs_all += fabs(row[j]);
    for (int64_t j = p->needle_begin[0]; j < p->needle_end[0]; j++) answer += row[j];
    for (int64_t j = p->context_end; j <= t; j++) query += row[j];
    seg[SEG_BOS] = row[0];
    seg[SEG_ANSWER] = answer;
    seg[SEG_QUERY] = query;
    seg[SEG_CONTEXT] = all - row[0] - answer - query;
    return abs_all;
}

/* One prompt's rows (every layer and head, every map the arch has) into
 * tmp [mass_len] (overwritten): raw sums, then sums of the rows' shares. */
static dtx_status prompt_masses(dtx_model *m, const dtx_needle_prompt *p, double *row, double *tmp) {
    const dtx_config *c = dtx_model_config(m);
    dtx_status st = dtx_model_forward(m, p->tokens, NULL, 1, p->n, NULL, NULL);
    int64_t t = p->n - 1, L = c->n_layers;
    int n_maps = c->arch != DTX_ARCH_TRANSFORMER ? N_MAPS : 1;
    memset(tmp, 0, (size_t)mass_len(L) * sizeof *tmp);
    double *share = tmp + N_MAPS * L * N_SEG;
    for (int64_t l = 0; l < L && !st; l++)
        for (int64_t h = 0; h < c->n_heads && !st; h++)
            for (int mp = 0; mp < n_maps && !st; mp++) {
                if ((st = dtx_probe_attention_row(m, 0, l, h, (dtx_attn_map)mp, t, row))) break;
                double seg[N_SEG], abs_all = segment_masses(row, p, t, seg);
                for (int s = 0; s < N_SEG; s++) {
                    double sh = abs_all > 0 ? seg[s] / abs_all : 0;
                    tmp[(mp * L + l) * N_SEG + s] += seg[s];
                    share[(mp * L + l) * N_SEG + s] += sh;
                    /* the Transformer's one map is both "a1" and "combined" */
                    if (n_maps == 1) {
                        tmp[(DTX_MAP_COMBINED * L + l) * N_SEG + s] += seg[s];
                        share[(DTX_MAP_COMBINED * L + l) * N_SEG + s] += sh;
                    }
                }
            }
    return st;
}

static void mass_add(mass *x, const double *tmp, const dtx_config *c, int64_t tokens) {
    for (int64_t i = 0; i < mass_len(x->n_layers); i++) x->layer[i] += tmp[i];
    x->rows += c->n_layers * c->n_heads;
    x->prompts++;
    x->tokens += tokens;
}

static dtx_needle_spec mass_spec(const mass_args *a, int d, int64_t sample) {
    dtx_needle_spec s = {
        .length = a->length,
        .n_needles = (int)a->needles,
        .n_queries = 1,
        .depth = a->depths[d] / 100,
        .seed = dtx_needle_cell_seed(a->seed, (int)a->needles, 1, a->length, a->depths[d], sample),
        .with_answer = 0,
    };
    return s;
}

/* acc [(n_depths + 1) · N_GROUPS]: depth d's groups at d · N_GROUPS, every
 * depth pooled at n_depths · N_GROUPS. */
static mass *acc_at(mass *acc, int d, int g) { return &acc[d * N_GROUPS + g]; }

static int run_depths(const mass_args *a, dtx_model *m, const dtx_tokenizer *tok, const dtx_needle_source *src,
                      mass *acc) {
    const dtx_config *c = dtx_model_config(m);
    double *row = malloc((size_t)a->length * sizeof *row);
    double *tmp = malloc((size_t)mass_len(c->n_layers) * sizeof *tmp);
    dtx_needle_answerer *ans = NULL;
    if (!row || !tmp) {
        free(row), free(tmp);
        return eval_runtime_error("out of memory");
    }
    int rc = EVAL_OK;
    if (dtx_needle_answerer_init(&ans, m, tok, a->length, a->max_new) != DTX_OK) rc = eval_lib_error();
    int64_t total = a->n_depths * a->samples, done = 0;
    for (int d = 0; d < a->n_depths && rc == EVAL_OK; d++)
        for (int64_t s = 0; s < a->samples && rc == EVAL_OK; s++) {
            dtx_needle_spec spec = mass_spec(a, d, s);
            dtx_needle_prompt p;
            int right = 0;
            dtx_status st = dtx_needle_make(src, &spec, &p);
            if (st == DTX_ERR_ARG) rc = eval_usage_error("--length %lld: %s", (long long)a->length, dtx_last_error());
            else if (st) rc = eval_lib_error();
            else if (prompt_masses(m, &p, row, tmp) != DTX_OK ||
                     dtx_needle_answer_prompt(ans, &p, &right, NULL, 0) != DTX_OK)
                rc = eval_lib_error();
            if (rc == EVAL_OK) {
                int g = right ? GROUP_RETRIEVED : GROUP_MISSED;
                mass_add(acc_at(acc, d, GROUP_ALL), tmp, c, p.n);
                mass_add(acc_at(acc, d, g), tmp, c, p.n);
                mass_add(acc_at(acc, a->n_depths, GROUP_ALL), tmp, c, p.n);
                mass_add(acc_at(acc, a->n_depths, g), tmp, c, p.n);
            }
            if (!st) dtx_needle_prompt_free(&p);
            done++;
            if (rc == EVAL_OK) eval_progress("attn-mass: prompts", done, total);
        }
    dtx_needle_answerer_free(ans);
    free(row), free(tmp);
    return rc;
}

/* ------------------------------------------------------------ reporting */

/* seg / total of the four; zeros when the total is zero. */
static void normalised(const double *sum, double out[N_SEG]) {
    double tot = 0;
    for (int s = 0; s < N_SEG; s++) tot += sum[s];
    for (int s = 0; s < N_SEG; s++) out[s] = tot != 0 ? sum[s] / tot : 0;
}

/* The statistic printed: each row's segment sums over the row's total
 * absolute weight (bounded by ±1; a softmax row's plain shares), averaged
 * over the layer's rows, then over the layers: every row and every layer
 * counts alike, whatever its 1 − λ. (Dividing by a layer's signed total
 * instead explodes where 1 − λ is near 0.) */
static void layer_shares(const mass *x, int mp, double out[N_SEG]) {
    for (int s = 0; s < N_SEG; s++) out[s] = 0;
    int64_t per_layer = x->n_layers ? x->rows / x->n_layers : 0;
    if (!per_layer) return;
    for (int64_t l = 0; l < x->n_layers; l++)
        for (int s = 0; s < N_SEG; s++) out[s] += share_sums(x, mp, l)[s] / (double)per_layer / (double)x->n_layers;
}

/* The sums over every layer (the pooled statistic, and the mean per row). */
static void total_sums(const mass *x, int mp, double out[N_SEG]) {
    for (int s = 0; s < N_SEG; s++) out[s] = 0;
    for (int64_t l = 0; l < x->n_layers; l++)
        for (int s = 0; s < N_SEG; s++) out[s] += layer_sums(x, mp, l)[s];
}

static void print_row(const char *label, const mass *x, int mp) {
    double v[N_SEG], sum[N_SEG], tot = 0;
    if (!x->prompts) {
        eval_printf(" %-16s  (no prompts)\n", label);
        return;
    }
    layer_shares(x, mp, v);
    total_sums(x, mp, sum);
    for (int s = 0; s < N_SEG; s++) tot += sum[s];
    eval_printf(" %-16s  %6.3f  %14.3f  %6.3f  %6.3f  %13.3f  %7lld\n", label, v[SEG_ANSWER], v[SEG_CONTEXT], v[SEG_BOS],
           v[SEG_QUERY], x->rows ? tot / (double)x->rows : 0, (long long)x->prompts);
}

static void print_map(const mass_args *a, const mass *acc, int mp, const char *title) {
    eval_printf("%s\n  depth             answer  noise(context)     BOS   query  mean row mass  prompts\n", title);
    char label[48];
    for (int d = 0; d < a->n_depths; d++) {
        snprintf(label, sizeof label, "%g%%", a->depths[d]);
        print_row(label, acc_at((mass *)acc, d, GROUP_ALL), mp);
    }
    print_row("all", acc_at((mass *)acc, a->n_depths, GROUP_ALL), mp);
    print_row("all, retrieved", acc_at((mass *)acc, a->n_depths, GROUP_RETRIEVED), mp);
    print_row("all, missed", acc_at((mass *)acc, a->n_depths, GROUP_MISSED), mp);
}

static void print_report(const mass_args *a, const dtx_model *m, const mass *acc) {
    const dtx_config *c = dtx_model_config(m);
    int diff = c->arch != DTX_ARCH_TRANSFORMER; /* two maps a head (DIFF, DIFF2) */
    const mass *all = acc_at((mass *)acc, a->n_depths, GROUP_ALL);
    eval_printf("attention allocation: %s (%s, %zu parameters), length %lld, %lld needle%s, %lld samples per depth, "
           "seed %llu; retrieved %lld of %lld prompts\n",
           a->model, dtx_arch_name(c->arch), dtx_model_num_params(m), (long long)a->length, (long long)a->needles,
           a->needles == 1 ? "" : "s", (long long)a->samples, (unsigned long long)a->seed,
           (long long)acc_at((mass *)acc, a->n_depths, GROUP_RETRIEVED)->prompts, (long long)all->prompts);
    eval_printf("Attention of the last prompt position; each row's four segment sums over its total absolute weight,\n"
           "averaged over %lld heads and the prompts per layer, then over the %lld layers (the paper's Table 3;\n"
           "noise = all other context).\n\n",
           (long long)c->n_heads, (long long)c->n_layers);
    print_map(a, acc, DTX_MAP_COMBINED, diff ? "Map: A1 - lambda*A2 (combined)" : "Map: softmax");
    if (diff) {
        eval_printf("\n");
        print_map(a, acc, DTX_MAP_FIRST, "Map: A1 alone (the first softmax)");
    }
}

/* {"layer_normalized", "normalized" (pooled over layers), "mean" (per row)} of one map. */
static void json_map(cJSON *o, const char *key, const mass *x, int mp, int *ok) {
    cJSON *mo = jadd(o, key, cJSON_CreateObject(), ok);
    cJSON *ln = jadd(mo, "layer_normalized", cJSON_CreateObject(), ok);
    cJSON *nz = jadd(mo, "normalized", cJSON_CreateObject(), ok), *mean = jadd(mo, "mean", cJSON_CreateObject(), ok);
    double sh[N_SEG], sum[N_SEG], v[N_SEG];
    layer_shares(x, mp, sh);
    total_sums(x, mp, sum);
    normalised(sum, v);
    for (int s = 0; s < N_SEG; s++) {
        jnum(ln, SEG_NAME[s], sh[s], ok);
        jnum(nz, SEG_NAME[s], v[s], ok);
        jnum(mean, SEG_NAME[s], x->rows ? sum[s] / (double)x->rows : 0, ok);
    }
    cJSON *layers = jadd(mo, "layers", cJSON_CreateArray(), ok);
    int64_t per_layer = x->n_layers ? x->rows / x->n_layers : 0;
    for (int64_t l = 0; l < x->n_layers; l++) {
        cJSON *lo = jadd(layers, NULL, cJSON_CreateObject(), ok);
        jnum(lo, "layer", (double)l, ok);
        for (int s = 0; s < N_SEG; s++)
            jnum(lo, SEG_NAME[s], per_layer ? share_sums(x, mp, l)[s] / (double)per_layer : 0, ok);
    }
}

/* One group's maps: rows, prompts, and each map of the arch. */
static void json_group(cJSON *o, const dtx_config *c, const mass *x, int *ok) {
    jnum(o, "rows", (double)x->rows, ok);
    jnum(o, "prompts", (double)x->prompts, ok);
    int n_maps = c->arch != DTX_ARCH_TRANSFORMER ? N_MAPS : 1;
    json_map(o, MAP_KEY[DTX_MAP_COMBINED], x, DTX_MAP_COMBINED, ok);
    for (int mp = 0; mp < n_maps && mp != DTX_MAP_COMBINED; mp++) json_map(o, MAP_KEY[mp], x, mp, ok);
}

static void json_depth(cJSON *arr, const dtx_config *c, double depth, const mass *groups, int *ok) {
    cJSON *o = jadd(arr, NULL, cJSON_CreateObject(), ok);
    if (depth >= 0) jnum(o, "depth", depth, ok);
    jnum(o, "n_retrieved", (double)groups[GROUP_RETRIEVED].prompts, ok);
    json_group(o, c, &groups[GROUP_ALL], ok);
    for (int g = GROUP_RETRIEVED; g < N_GROUPS; g++)
        json_group(jadd(o, GROUP_KEY[g], cJSON_CreateObject(), ok), c, &groups[g], ok);
}

static int write_json(const mass_args *a, const dtx_model *m, const mass *acc) {
    const dtx_config *c = dtx_model_config(m);
    int ok = 1;
    cJSON *root = eval_json_begin(a->model, m, &ok);
    jstr(root, "haystack", a->haystack, &ok);
    jnum(root, "length", (double)a->length, &ok);
    jnum(root, "needles", (double)a->needles, &ok);
    jnum(root, "samples", (double)a->samples, &ok);
    jnum(root, "seed", (double)a->seed, &ok);
    jnum(root, "max_new", (double)a->max_new, &ok);
    jstr(root, "precision", dtx_precision_name(dtx_model_precision(m)), &ok);
    jstr(root, "statistic", "layer_normalized: each row's segment sums over its total absolute weight, averaged "
         "over each layer's rows, then over the layers (layers: the per-layer means); normalized: the raw sums "
         "pooled over layers, then divided by their total", &ok);
    cJSON *arr = jadd(root, "depths", cJSON_CreateArray(), &ok);
    for (int d = 0; d < a->n_depths; d++) json_depth(arr, c, a->depths[d], acc_at((mass *)acc, d, 0), &ok);
    cJSON *allo = jadd(root, "all_depths", cJSON_CreateArray(), &ok);
    json_depth(allo, c, -1, acc_at((mass *)acc, a->n_depths, 0), &ok);
    return eval_json(a->json, root, ok, 1);
}

/* ------------------------------------------------------------ setup */

static int parse_args(mass_args *a, int argc, char **argv) {
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a->model),
        EVAL_FLAG_BOS_TOKENIZER(&a->tokenizer),
        EVAL_FLAG_HAYSTACK(&a->haystack),
        DTX_FLAG_INT("--length", &a->length, 1, INT32_MAX, .metavar = "L",
                     .help = "prompt length in tokens (default max_seq_len - 8)"),
        DTX_FLAG_INT("--needles", &a->needles, 1, DTX_NEEDLE_MAX, .metavar = "N",
                     .help = "needles per prompt, 1..16 (default 1)"),
        DTX_FLAG_STR("--depths", &a->depths_s, .metavar = "LIST",
                     .help = "answer depths in percent, 0..100 (default 0,25,50,75,100)"),
        DTX_FLAG_INT("--samples", &a->samples, 1, 1000000, .metavar = "S", .help = "prompts per depth (default 20)"),
        DTX_FLAG_SEED("--seed", &a->seed, .metavar = "S",
                      .help = "seed of every prompt, hashed with its depth (default 1)"),
        DTX_FLAG_STR("--json", &a->json, .metavar = "OUT", .help = "also write every depth's masses as JSON"),
        DTX_FLAG_PRECISION(&a->precision),
        DTX_FLAG_INT("--max-new", &a->max_new, 1, 1024, .metavar = "M",
                     .help = "tokens generated per answer (default 8)"),
    };
    int flags_rc = eval_flags(USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv);
    if (flags_rc != EVAL_OK) return flags_rc; /* a bad flag, or --help */
    int n = dtx_eval_parse_list(a->depths_s, a->depths, MAX_DEPTHS);
    if (n < 0)
        return eval_usage_error("--depths: expected comma-separated percentages (at most %d), got '%s'", MAX_DEPTHS,
                           a->depths_s);
    for (int i = 0; i < n; i++) {
        if (a->depths[i] < 0 || a->depths[i] > 100)
            return eval_usage_error("--depths: expected percentages in [0, 100], got '%s'", a->depths_s);
        for (int j = 0; j < i; j++)
            if (a->depths[j] == a->depths[i]) return eval_usage_error("--depths: '%s' repeats a depth", a->depths_s);
    }
    a->n_depths = n;
    return EVAL_OK;
}

/* Loads everything and settles --length; EVAL_OK or the exit code. */
static int open_all(mass_args *a, dtx_tokenizer **tok, dtx_model **m, dtx_needle_source **src) {
    int rc = eval_load_model_and_tokenizer(a->model, a->tokenizer, a->precision, m, tok);
    if (rc != EVAL_OK) return rc;
    const dtx_config *c = dtx_model_config(*m);
    if (a->length == 0) a->length = c->max_seq_len > 8 ? c->max_seq_len - 8 : c->max_seq_len;
    if (a->length > c->max_seq_len)
        return eval_usage_error("--length %lld is more than the model's max_seq_len %lld", (long long)a->length,
                           (long long)c->max_seq_len);
    if (dtx_needle_source_open_list(src, *tok, a->haystack) != DTX_OK) return eval_lib_error();
    return EVAL_OK;
}

int dtx_eval_attn_mass_main(int argc, char **argv) {
    mass_args a = {.needles = 1, .samples = 20, .seed = 1, .max_new = 8, .depths_s = "0,25,50,75,100"};
    int rc = parse_args(&a, argc, argv);
    if (rc != EVAL_OK) return rc;
    dtx_tokenizer *tok = NULL;
    dtx_model *m = NULL;
    dtx_needle_source *src = NULL;
    mass acc[(MAX_DEPTHS + 1) * N_GROUPS];
    memset(acc, 0, sizeof acc);
    rc = open_all(&a, &tok, &m, &src);
    int n_acc = (a.n_depths + 1) * N_GROUPS;
    for (int i = 0; i < n_acc && rc == EVAL_OK; i++) {
        acc[i].n_layers = dtx_model_config(m)->n_layers;
        if (!(acc[i].layer = calloc((size_t)mass_len(acc[i].n_layers), sizeof(double))))
            rc = eval_runtime_error("out of memory");
    }
    if (rc == EVAL_OK && a.length + a.max_new - 1 > dtx_model_config(m)->max_seq_len)
        rc = eval_usage_error("--length %lld + --max-new %lld is more than the model's max_seq_len %lld + 1",
                         (long long)a.length, (long long)a.max_new, (long long)dtx_model_config(m)->max_seq_len);
    if (rc == EVAL_OK) rc = run_depths(&a, m, tok, src, acc);
    if (rc == EVAL_OK) print_report(&a, m, acc);
    if (rc == EVAL_OK) rc = write_json(&a, m, acc);
    for (int i = 0; i < n_acc; i++) free(acc[i].layer);
    dtx_needle_source_free(src);
    dtx_model_free(m);
    dtx_tokenizer_free(tok);
    return rc;
}
