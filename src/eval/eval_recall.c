/* difftx eval recall: multi-query associative recall (src/eval/recall.h) —
 * accuracy and where each query looks, against the number of distractor
 * pairs; the synthetic analogue of the paper's Tables 2 and 3.
 * docs/eval_recall.md. Episodes of one distractor count have one length,
 * so they run as a batch through one forward; attention rows are
 * recomputed by src/eval/probe.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "difftx.h"
#include "eval/eval_run.h"
#include "eval/needle.h" /* dtx_wilson95 */
#include "eval/probe.h"
#include "eval/recall.h"

static const char USAGE[] =
    "usage: difftx eval recall --model MODEL [--queries 8] [--distractors 0,8,24]\n"
    "                          [--episodes 200] [--seed 1] [--json OUT] [--precision fp32|bf16]\n"
    "\n"
    "Multi-query associative recall (docs/eval_recall.md): episodes of token ids, P\n"
    "key-value pairs and then Q queries (a key of the context, whose value is the\n"
    "answer), the P - Q pairs never asked being the distractors. Per distractor count:\n"
    "accuracy (the argmax of the next-token logits at a query's key is its value;\n"
    "Wilson 95% intervals), and the attention row of that position split into the\n"
    "answer pair (its key and value), the distractor pairs, the other pairs asked, and\n"
    "the queries so far. Each row's segments are divided by the row's total absolute\n"
    "weight and averaged over heads, queries and episodes per layer, then over layers\n"
    "(every layer alike); for DIFF the combined map A1 - lambda*A2 and A1 alone (A2 in\n"
    "the JSON), also over the answers the model gets right and those it misses.\n"
    "\n";

enum { MAX_COUNTS = 32, N_SEG = 4, N_MAPS = 3, BATCH = 16 };
#define LOGITS_BUDGET ((size_t)1 << 28) /* bytes of logits one batch may hold: fewer episodes where they are long */
enum { SEG_ANSWER, SEG_DISTRACTORS, SEG_OTHER, SEG_QUERIES };
static const char *const SEG_NAME[N_SEG] = {"answer", "distractors", "other_pairs", "queries"};
static const char *const MAP_KEY[N_MAPS] = {"a1", "a2", "combined"};
enum { GROUP_ALL, GROUP_RIGHT, GROUP_WRONG, N_GROUPS };
static const char *const GROUP_KEY[N_GROUPS] = {"all", "answered", "missed"};

typedef struct {
    const char *model, *counts_s, *json;
    int64_t queries, episodes;
    uint64_t seed;
    int precision;
    int64_t counts[MAX_COUNTS];
    int n_counts;
} recall_args;

/* One distractor count and group: per map and layer, the sums of the rows'
 * shares (segment over the row's total absolute weight) and the rows. */
typedef struct {
    double *share; /* [N_MAPS][L][N_SEG] */
    int64_t rows_per_layer, answers;
} shares;

typedef struct {
    int64_t right, n;          /* answers right of n                    */
    shares g[N_GROUPS];
    double lambda_sum;         /* mean λ over layers, summed per episode */
} count_result;

static double *share_at(const shares *s, int64_t L, int mp, int64_t l) { return s->share + (mp * L + l) * N_SEG; }

/* The four segments of query row t of episode e over keys 0..t into seg;
 * returns the row's total absolute weight. */
static double segment_masses(const double *row, const dtx_recall_episode *e, int64_t q, double seg[N_SEG]) {
    int64_t t = e->query_pos[q], ans = e->answer_pair[q];
    double abs_all = 0;
    for (int s = 0; s < N_SEG; s++) seg[s] = 0;
    for (int64_t j = 0; j <= t; j++) {
        abs_all += fabs(row[j]);
        int64_t pair = j / 2;
        int s = j >= 2 * e->pairs ? SEG_QUERIES : pair == ans ? SEG_ANSWER : e->asked[pair] ? SEG_OTHER : SEG_DISTRACTORS;
        seg[s] += row[j];
    }
    return abs_all;
}

static int add_episode(dtx_model *m, int64_t b, const dtx_recall_episode *e, const dtx_real *logits, double *row,
                       count_result *r) {
    const dtx_config *c = dtx_model_config(m);
    int64_t L = c->n_layers, V = c->vocab_size;
    int n_maps = c->arch != DTX_ARCH_TRANSFORMER ? N_MAPS : 1;
    for (int64_t q = 0; q < e->queries; q++) {
        int64_t t = e->query_pos[q];
        const dtx_real *z = logits + (b * e->n + t) * V;
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (z[v] > z[best]) best = v;
        int right = best == e->tokens[t + 1];
        r->right += right, r->n++;
        shares *gs[2] = {&r->g[GROUP_ALL], &r->g[right ? GROUP_RIGHT : GROUP_WRONG]};
        for (int k = 0; k < 2; k++) gs[k]->answers++, gs[k]->rows_per_layer += c->n_heads;
        for (int64_t l = 0; l < L; l++)
            for (int64_t h = 0; h < c->n_heads; h++)
                for (int mp = 0; mp < n_maps; mp++) {
                    if (dtx_probe_attention_row(m, b, l, h, (dtx_attn_map)mp, t, row) != DTX_OK) return eval_lib_error();
                    double seg[N_SEG], abs_all = segment_masses(row, e, q, seg);
                    for (int k = 0; k < 2; k++)
                        for (int s = 0; s < N_SEG; s++) {
                            double sh = abs_all > 0 ? seg[s] / abs_all : 0;
                            share_at(gs[k], L, mp, l)[s] += sh;
                            /* the Transformer's one map is both "a1" and "combined" */
                            if (n_maps == 1) share_at(gs[k], L, DTX_MAP_COMBINED, l)[s] += sh;
                        }
                }
    }
    double lam = 0;
    for (int64_t l = 0; l < L; l++) lam += dtx_probe_lambda(m, l);
    r->lambda_sum += lam / (double)L;
    return EVAL_OK;
}

/* Every count's episodes, BATCH at a time through one forward (fewer where
 * their logits would pass LOGITS_BUDGET: long episodes of a large vocabulary). */
static int run_counts(const recall_args *a, dtx_model *m, count_result *res) {
    const dtx_config *c = dtx_model_config(m);
    int64_t L = c->n_layers, longest = 2 * (2 * a->queries + a->counts[0]);
    for (int i = 1; i < a->n_counts; i++)
        if (2 * (2 * a->queries + a->counts[i]) > longest) longest = 2 * (2 * a->queries + a->counts[i]);
    size_t per_episode = (size_t)longest * (size_t)c->vocab_size * sizeof(dtx_real);
    int64_t batch = per_episode * BATCH <= LOGITS_BUDGET ? BATCH : (int64_t)(LOGITS_BUDGET / per_episode);
    if (batch < 1) batch = 1;
    int32_t *tokens = malloc((size_t)(batch * longest) * sizeof *tokens);
    dtx_real *logits = malloc((size_t)batch * per_episode);
    double *row = malloc((size_t)longest * sizeof *row);
    dtx_recall_episode *eps = calloc((size_t)batch, sizeof *eps);
    if (!tokens || !logits || !row || !eps) {
        free(tokens), free(logits), free(row), free(eps);
        return eval_runtime_error("out of memory");
    }
    int rc = EVAL_OK;
    int64_t total = a->n_counts * a->episodes, done = 0;
    for (int i = 0; i < a->n_counts && rc == EVAL_OK; i++) {
        for (int g = 0; g < N_GROUPS; g++)
            if (!(res[i].g[g].share = calloc((size_t)(N_MAPS * L * N_SEG), sizeof(double))))
                rc = eval_runtime_error("out of memory");
        for (int64_t e0 = 0; e0 < a->episodes && rc == EVAL_OK; e0 += batch) {
            int64_t nb = a->episodes - e0 < batch ? a->episodes - e0 : batch, n = 0;
            for (int64_t b = 0; b < nb && rc == EVAL_OK; b++) {
                /* an episode's draws depend on the seed, its count and its index alone */
                dtx_recall_spec s = {.queries = a->queries, .distractors = a->counts[i], .vocab = c->vocab_size,
                                     .seed = dtx_mix64(dtx_mix64(dtx_mix64(a->seed) ^ (uint64_t)a->counts[i]) ^
                                                       (uint64_t)(e0 + b))};
                if (dtx_recall_make(&s, &eps[b]) != DTX_OK) rc = eval_lib_error();
                else memcpy(tokens + b * eps[b].n, eps[b].tokens, (size_t)eps[b].n * sizeof *tokens), n = eps[b].n;
            }
            if (rc == EVAL_OK && dtx_model_forward(m, tokens, NULL, nb, n, logits, NULL) != DTX_OK) rc = eval_lib_error();
            for (int64_t b = 0; b < nb && rc == EVAL_OK; b++) rc = add_episode(m, b, &eps[b], logits, row, &res[i]);
            for (int64_t b = 0; b < nb; b++) dtx_recall_free(&eps[b]);
            done += nb;
            if (rc == EVAL_OK) eval_progress("recall: episodes", done, total);
        }
    }
    free(tokens), free(logits), free(row), free(eps);
    return rc;
}

/* ------------------------------------------------------------ reporting */

/* A group's shares of map mp, averaged over its rows per layer, then over layers. */
static void mean_shares(const shares *s, int64_t L, int mp, double out[N_SEG]) {
    for (int k = 0; k < N_SEG; k++) out[k] = 0;
    if (!s->rows_per_layer) return;
    for (int64_t l = 0; l < L; l++)
        for (int k = 0; k < N_SEG; k++) out[k] += share_at(s, L, mp, l)[k] / (double)s->rows_per_layer / (double)L;
}

static double ratio(int64_t k, int64_t n) { return n ? (double)k / (double)n : NAN; }

static void print_report(const recall_args *a, const dtx_model *m, const count_result *res) {
    const dtx_config *c = dtx_model_config(m);
    int64_t L = c->n_layers;
    int diff = c->arch != DTX_ARCH_TRANSFORMER;
    eval_printf("associative recall: %s (%s, %zu parameters), %lld queries, %lld episodes per count, seed %llu\n",
                a->model, dtx_arch_name(c->arch), dtx_model_num_params(m), (long long)a->queries,
                (long long)a->episodes, (unsigned long long)a->seed);
    eval_printf("\n  distractors  accuracy  interval          answer  distractors  per distractor  other  queries%s\n",
                diff ? "   (map: A1 - lambda*A2; A1 alone below)" : "");
    for (int i = 0; i < a->n_counts; i++) {
        const count_result *r = &res[i];
        double lo, hi, sh[N_SEG];
        dtx_wilson95(r->right, r->n, &lo, &hi);
        for (int pass = 0; pass < (diff ? 2 : 1); pass++) {
            mean_shares(&r->g[GROUP_ALL], L, pass ? DTX_MAP_FIRST : DTX_MAP_COMBINED, sh);
            if (!pass)
                eval_printf("  %11lld  %8.3f  [%.3f, %.3f]  ", (long long)a->counts[i], ratio(r->right, r->n), lo, hi);
            else eval_printf("  %11s  %8s  %14s  ", "", "A1", "");
            eval_printf("%6.3f  %11.3f  %14.4f  %5.3f  %7.3f\n", sh[SEG_ANSWER], sh[SEG_DISTRACTORS],
                        a->counts[i] ? sh[SEG_DISTRACTORS] / (double)a->counts[i] : 0.0, sh[SEG_OTHER],
                        sh[SEG_QUERIES]);
        }
    }
}

static void json_shares(cJSON *o, const shares *s, int64_t L, int64_t count, int *ok) {
    jnum(o, "answers", (double)s->answers, ok);
    for (int mp = 0; mp < N_MAPS && *ok; mp++) {
        cJSON *mo = jadd(o, MAP_KEY[mp], cJSON_CreateObject(), ok);
        double sh[N_SEG];
        mean_shares(s, L, mp, sh);
        for (int k = 0; k < N_SEG; k++) jnum(mo, SEG_NAME[k], s->rows_per_layer ? sh[k] : NAN, ok);
        jnum(mo, "per_distractor", count && s->rows_per_layer ? sh[SEG_DISTRACTORS] / (double)count : NAN, ok);
        cJSON *layers = jadd(mo, "layers", cJSON_CreateArray(), ok);
        for (int64_t l = 0; l < L && *ok; l++) {
            cJSON *lo = jadd(layers, NULL, cJSON_CreateObject(), ok);
            for (int k = 0; k < N_SEG; k++)
                jnum(lo, SEG_NAME[k], s->rows_per_layer ? share_at(s, L, mp, l)[k] / (double)s->rows_per_layer : NAN, ok);
        }
    }
}

static int write_json(const recall_args *a, const dtx_model *m, const count_result *res) {
    int ok = 1;
    const dtx_config *c = dtx_model_config(m);
    cJSON *root = eval_json_begin(a->model, m, &ok);
    jnum(root, "queries", (double)a->queries, &ok);
    jnum(root, "episodes", (double)a->episodes, &ok);
    jnum(root, "seed", (double)a->seed, &ok);
    jstr(root, "precision", dtx_precision_name(dtx_model_precision(m)), &ok);
    jstr(root, "criterion", "the argmax of the next-token logits at a query's key is the value it had in the context",
         &ok);
    jstr(root, "shares", "each row's segment sums over its total absolute weight, averaged over heads, queries and "
                         "episodes per layer, then over layers", &ok);
    cJSON *arr = jadd(root, "counts", cJSON_CreateArray(), &ok);
    for (int i = 0; i < a->n_counts && ok; i++) {
        const count_result *r = &res[i];
        double lo, hi;
        dtx_wilson95(r->right, r->n, &lo, &hi);
        cJSON *o = jadd(arr, NULL, cJSON_CreateObject(), &ok);
        jnum(o, "distractors", (double)a->counts[i], &ok);
        jnum(o, "pairs", (double)(a->counts[i] + a->queries), &ok);
        jnum(o, "tokens", (double)(2 * (2 * a->queries + a->counts[i])), &ok);
        jnum(o, "right", (double)r->right, &ok);
        jnum(o, "n", (double)r->n, &ok);
        jnum(o, "acc", ratio(r->right, r->n), &ok);
        jnum(o, "lo", lo, &ok);
        jnum(o, "hi", hi, &ok);
        jnum(o, "lambda_mean", c->arch != DTX_ARCH_TRANSFORMER ? r->lambda_sum / (double)a->episodes : 0.0, &ok);
        for (int g = 0; g < N_GROUPS && ok; g++)
            json_shares(jadd(o, GROUP_KEY[g], cJSON_CreateObject(), &ok), &r->g[g], c->n_layers, a->counts[i], &ok);
    }
    return eval_json(a->json, root, ok, 1);
}

/* ------------------------------------------------------------ setup */

static int parse_args(recall_args *a, int argc, char **argv) {
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a->model),
        DTX_FLAG_INT("--queries", &a->queries, 1, 1024, .metavar = "Q",
                     .help = "queries per episode (default 8, as difftx train --recall-queries)"),
        DTX_FLAG_STR("--distractors", &a->counts_s, .metavar = "LIST",
                     .help = "distractor counts, comma-separated (default 0,8,24)"),
        DTX_FLAG_INT("--episodes", &a->episodes, 1, 1000000, .metavar = "E",
                     .help = "episodes per distractor count (default 200)"),
        DTX_FLAG_SEED("--seed", &a->seed, .metavar = "S", .help = "seed of every episode (default 1)"),
        DTX_FLAG_STR("--json", &a->json, .metavar = "OUT", .help = "also write every number as JSON"),
        DTX_FLAG_PRECISION(&a->precision),
    };
    int rc = eval_flags(USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv);
    if (rc != EVAL_OK) return rc;
    a->n_counts = dtx_flags_int_list("--distractors", a->counts_s ? a->counts_s : "0,8,24", 0,
                                     DTX_RECALL_MAX_PAIRS - 1, a->counts, MAX_COUNTS);
    return a->n_counts < 0 ? EVAL_USAGE : EVAL_OK;
}

/* Every count against the model's vocabulary and context, before any work. */
static int check_fit(const recall_args *a, const dtx_model *m) {
    const dtx_config *c = dtx_model_config(m);
    for (int i = 0; i < a->n_counts; i++) {
        if (dtx_recall_check(a->queries, a->counts[i], c->vocab_size) != DTX_OK)
            return eval_usage_error("--distractors %lld: %s", (long long)a->counts[i], dtx_last_error());
        int64_t n = 2 * (2 * a->queries + a->counts[i]);
        if (n > c->max_seq_len)
            return eval_usage_error("--distractors %lld: an episode of %lld queries has %lld tokens, more than the "
                                    "model's max_seq_len %lld",
                                    (long long)a->counts[i], (long long)a->queries, (long long)n,
                                    (long long)c->max_seq_len);
    }
    return EVAL_OK;
}

int dtx_eval_recall_main(int argc, char **argv) {
    recall_args a = {.queries = 8, .episodes = 200, .seed = 1};
    int rc = parse_args(&a, argc, argv);
    if (rc != EVAL_OK) return rc;
    dtx_model *m = NULL;
    count_result res[MAX_COUNTS];
    memset(res, 0, sizeof res);
    rc = eval_model_load(&m, a.model, a.precision);
    if (rc == EVAL_OK) rc = check_fit(&a, m);
    if (rc == EVAL_OK) rc = run_counts(&a, m, res);
    if (rc == EVAL_OK) print_report(&a, m, res);
    if (rc == EVAL_OK) rc = write_json(&a, m, res);
    for (int i = 0; i < MAX_COUNTS; i++)
        for (int g = 0; g < N_GROUPS; g++) free(res[i].g[g].share);
    dtx_model_free(m);
    return rc;
}
