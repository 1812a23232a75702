/* difftx eval icl: many-shot in-context classification (spec §6.6, the
 * paper's Fig 6 and 7) on synthetic episodes (src/eval/icl.h); accuracy
 * against the number of demonstrations and the robustness to their order.
 * docs/eval_icl.md. Each prompt's demonstrations go into a KV cache once;
 * each query is prefilled after them and the cache cut back. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_run.h"
#include "common/common.h"
#include "difftx.h"
#include "eval/icl.h"
#include "eval/needle.h"


static const char USAGE[] =
    "usage: difftx eval icl --model MODEL --tokenizer TOK [--classes 6] [--shots LIST]\n"
    "                       [--queries 200] [--episodes 3] [--orders 10] [--order-shots R]\n"
    "                       [--seed 1] [--json OUT] [--precision fp32|bf16]\n"
    "\n"
    "Many-shot in-context classification (DIFF Transformer paper, Fig 6 and 7) on\n"
    "synthetic episodes scored exactly (docs/eval_icl.md): each class is a prototype of\n"
    "8 held-out word tokens and a label word drawn afresh per episode, an example is 3\n"
    "tokens mostly from its class's prototype; a demonstration is 'x1 x2 x3 : label\\n'\n"
    "and the answer to a query 'x1 x2 x3 :' is the episode's label with the largest\n"
    "logit (constrained decoding). Demonstrations come in whole rounds, one per class.\n"
    "Prints accuracy against the number of rounds, then the order study: the same\n"
    "demonstrations in --orders random orders and in --orders orders grouped by class,\n"
    "each over the same queries, with the margin (best - worst accuracy) per episode.\n"
    "Wilson 95% intervals.\n"
    "\n";

enum { MAX_SHOTS = 32 };

typedef struct {
    const char *model, *tokenizer, *shots_s, *json;
    int64_t classes, queries, episodes, orders, order_shots;
    uint64_t seed;
    int precision;
    int64_t shots[MAX_SHOTS];
    int n_shots;
} icl_args;

typedef struct {
    dtx_model *m;
    dtx_tokenizer *tok;
    dtx_icl_vocab voc;
    dtx_kvcache *cache;
    dtx_real *logits;
    int32_t *prompt;
    int64_t max_rounds;
} runner;

/* One episode: its task, its demonstrations (max rounds x C examples, round
 * by round) and its queries. */
typedef struct {
    dtx_icl_task task;
    int32_t *demo;  /* [rounds * C][DTX_ICL_LEN]; demo i has class i % C */
    int32_t *query; /* [Q][DTX_ICL_LEN]; query q has class q % C         */
} episode;

/* ------------------------------------------------------------ episodes */

/* A seed per (run seed, classes, episode, purpose, index): an episode's
 * draws do not depend on the other flags. */
static uint64_t sub_seed(const icl_args *a, int64_t e, uint64_t purpose, int64_t index) {
    return dtx_mix64(dtx_mix64(dtx_mix64(dtx_mix64(a->seed) ^ (uint64_t)a->classes) ^ (uint64_t)e) ^ purpose) ^
           (uint64_t)index;
}

static dtx_status episode_make(const icl_args *a, const runner *r, int64_t e, episode *ep) {
    int C = (int)a->classes;
    dtx_rng rng;
    dtx_rng_seed(&rng, sub_seed(a, e, 1, 0));
    dtx_status st = dtx_icl_task_draw(&r->voc, C, 1, &rng, &ep->task);
    if (st) return st;
    ep->demo = malloc((size_t)(r->max_rounds * C) * DTX_ICL_LEN * sizeof(int32_t));
    ep->query = malloc((size_t)a->queries * DTX_ICL_LEN * sizeof(int32_t));
    if (!ep->demo || !ep->query) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < r->max_rounds * C; i++)
        dtx_icl_example(&r->voc, &ep->task, (int)(i % C), &rng, ep->demo + i * DTX_ICL_LEN);
    dtx_rng_seed(&rng, sub_seed(a, e, 2, 0));
    for (int64_t q = 0; q < a->queries; q++)
        dtx_icl_example(&r->voc, &ep->task, (int)(q % C), &rng, ep->query + q * DTX_ICL_LEN);
    return DTX_OK;
}

static void episode_free(episode *ep) {
    free(ep->demo);
    free(ep->query);
    memset(ep, 0, sizeof *ep);
}

static void shuffle(int64_t *v, int64_t n, dtx_rng *r) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(dtx_rng_next(r) % (uint64_t)(i + 1)), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* The order of the first `rounds` rounds' demonstrations (indices into
 * ep->demo): random, or grouped by class (the classes in a random order,
 * each class's demonstrations in round order). */
static void arrange(int64_t rounds, int C, int grouped, uint64_t seed, int64_t *order) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    int64_t n = rounds * C;
    if (!grouped) {
        for (int64_t i = 0; i < n; i++) order[i] = i;
        shuffle(order, n, &r);
        return;
    }
    int64_t cls[DTX_ICL_MAX_CLASSES];
    for (int c = 0; c < C; c++) cls[c] = c;
    shuffle(cls, C, &r);
    int64_t k = 0;
    for (int c = 0; c < C; c++)
        for (int64_t j = 0; j < rounds; j++) order[k++] = j * C + cls[c];
}

/* Correct answers to the episode's queries after the demonstrations in
 * order[0, n). */
static dtx_status score_order(runner *r, const icl_args *a, const episode *ep, const int64_t *order, int64_t n,
                              int64_t *correct) {
    int C = (int)a->classes;
    int64_t len = 0;
    r->prompt[len++] = r->voc.bos;
    for (int64_t i = 0; i < n; i++, len += DTX_ICL_DEMO)
        dtx_icl_put_demo(&r->voc, &ep->task, ep->demo + order[i] * DTX_ICL_LEN, (int)(order[i] % C), r->prompt + len);
    dtx_kvcache_reset(r->cache);
    dtx_status st = dtx_model_prefill(r->m, r->cache, r->prompt, len, NULL);
    *correct = 0;
    for (int64_t q = 0; q < a->queries && !st; q++) {
        int32_t qt[DTX_ICL_QUERY];
        dtx_icl_put_query(&r->voc, ep->query + q * DTX_ICL_LEN, qt);
        st = dtx_model_prefill(r->m, r->cache, qt, DTX_ICL_QUERY, r->logits);
        if (!st) *correct += dtx_icl_pick(&ep->task, r->logits) == (int)(q % C);
        if (!st) st = dtx_kvcache_truncate(r->cache, len);
    }
    return st;
}

/* ------------------------------------------------------------ results */

typedef struct {
    int64_t *curve;        /* [n_shots][E]: correct answers */
    int64_t *by_order[2];  /* random, grouped: [E][K] */
} results;

static double ratio(int64_t k, int64_t n) { return n > 0 ? (double)k / (double)n : 0; }

static void order_stats(const icl_args *a, const int64_t *acc, int64_t e, double *best, double *worst, double *mean,
                        double *sd) {
    double s = 0, s2 = 0;
    *best = -1, *worst = 2;
    for (int64_t k = 0; k < a->orders; k++) {
        double v = ratio(acc[e * a->orders + k], a->queries);
        s += v, s2 += v * v;
        if (v > *best) *best = v;
        if (v < *worst) *worst = v;
    }
    double K = (double)a->orders;
    *mean = s / K;
    double var = (s2 - s * s / K) / (K - 1);
    *sd = var > 0 ? sqrt(var) : 0;
}

static int run_all(const icl_args *a, runner *r, results *res) {
    int C = (int)a->classes;
    int64_t *order = malloc((size_t)(r->max_rounds * C) * sizeof *order);
    if (!order) return eval_runtime_error("out of memory");
    int64_t total = a->episodes * (a->n_shots + 2 * a->orders), done = 0;
    int rc = EVAL_OK;
    for (int64_t e = 0; e < a->episodes && rc == EVAL_OK; e++) {
        episode ep = {0};
        if (episode_make(a, r, e, &ep) != DTX_OK) rc = eval_lib_error();
        for (int s = 0; s < a->n_shots && rc == EVAL_OK; s++) {
            arrange(a->shots[s], C, 0, sub_seed(a, e, 3, a->shots[s]), order);
            if (score_order(r, a, &ep, order, a->shots[s] * C, &res->curve[s * a->episodes + e]) != DTX_OK)
                rc = eval_lib_error();
            eval_progress("icl: prompts", ++done, total);
        }
        for (int g = 0; g < 2 && rc == EVAL_OK; g++)
            for (int64_t k = 0; k < a->orders && rc == EVAL_OK; k++) {
                arrange(a->order_shots, C, g, sub_seed(a, e, 4 + (uint64_t)g, k), order);
                if (score_order(r, a, &ep, order, a->order_shots * C, &res->by_order[g][e * a->orders + k]) != DTX_OK)
                    rc = eval_lib_error();
                eval_progress("icl: prompts", ++done, total);
            }
        episode_free(&ep);
    }
    free(order);
    return rc;
}

static void print_report(const icl_args *a, const runner *r, const results *res) {
    const dtx_config *c = dtx_model_config(r->m);
    int C = (int)a->classes;
    eval_printf("in-context classification: %s (%s, %zu parameters), %d classes, %lld episodes x %lld queries, seed "
           "%llu\n",
           a->model, dtx_arch_name(c->arch), dtx_model_num_params(r->m), C, (long long)a->episodes,
           (long long)a->queries, (unsigned long long)a->seed);
    eval_printf("\nAccuracy against demonstrations (random order), Wilson 95%% intervals (chance %.3f):\n", 1.0 / C);
    eval_printf("  rounds  demos  prompt tokens  accuracy  interval\n");
    for (int s = 0; s < a->n_shots; s++) {
        int64_t k = 0, n = a->episodes * a->queries;
        for (int64_t e = 0; e < a->episodes; e++) k += res->curve[s * a->episodes + e];
        double lo, hi;
        dtx_wilson95(k, n, &lo, &hi);
        eval_printf("  %6lld %6lld %14lld  %8.3f  [%.3f, %.3f]\n", (long long)a->shots[s], (long long)(a->shots[s] * C),
               (long long)(1 + a->shots[s] * C * DTX_ICL_DEMO + DTX_ICL_QUERY), ratio(k, n), lo, hi);
    }
    eval_printf("\nOrder study: %lld rounds (%lld demonstrations), %lld orders of each kind, %lld queries each:\n",
           (long long)a->order_shots, (long long)(a->order_shots * C), (long long)a->orders, (long long)a->queries);
    eval_printf("  episode  kind     mean acc  best   worst  margin  sd\n");
    for (int g = 0; g < 2; g++) {
        double margin_sum = 0;
        for (int64_t e = 0; e < a->episodes; e++) {
            double best, worst, mean, sd;
            order_stats(a, res->by_order[g], e, &best, &worst, &mean, &sd);
            margin_sum += best - worst;
            eval_printf("  %7lld  %-7s  %8.3f  %5.3f  %5.3f  %6.3f  %.3f\n", (long long)e, g ? "grouped" : "random", mean,
                   best, worst, best - worst, sd);
        }
        eval_printf("  mean margin, %s orders: %.3f\n", g ? "grouped" : "random", margin_sum / (double)a->episodes);
    }
}

static void json_orders(cJSON *o, const icl_args *a, const int64_t *acc, int *ok) {
    cJSON *eps = jadd(o, "episodes", cJSON_CreateArray(), ok);
    double margin_sum = 0, sd_sum = 0;
    int64_t k_all = 0;
    for (int64_t e = 0; e < a->episodes && *ok; e++) {
        double best, worst, mean, sd;
        order_stats(a, acc, e, &best, &worst, &mean, &sd);
        margin_sum += best - worst, sd_sum += sd;
        cJSON *x = jadd(eps, NULL, cJSON_CreateObject(), ok);
        cJSON *accs = jadd(x, "acc", cJSON_CreateArray(), ok), *cor = jadd(x, "correct", cJSON_CreateArray(), ok);
        for (int64_t k = 0; k < a->orders; k++) {
            jadd(accs, NULL, cJSON_CreateNumber(ratio(acc[e * a->orders + k], a->queries)), ok);
            jadd(cor, NULL, cJSON_CreateNumber((double)acc[e * a->orders + k]), ok);
            k_all += acc[e * a->orders + k];
        }
        jnum(x, "mean", mean, ok);
        jnum(x, "best", best, ok);
        jnum(x, "worst", worst, ok);
        jnum(x, "margin", best - worst, ok);
        jnum(x, "sd", sd, ok);
    }
    int64_t n_all = a->episodes * a->orders * a->queries;
    double lo, hi;
    dtx_wilson95(k_all, n_all, &lo, &hi);
    jnum(o, "margin_mean", margin_sum / (double)a->episodes, ok);
    jnum(o, "sd_mean", sd_sum / (double)a->episodes, ok);
    jnum(o, "acc", ratio(k_all, n_all), ok);
    jnum(o, "acc_lo", lo, ok);
    jnum(o, "acc_hi", hi, ok);
}

static int write_json(const icl_args *a, const runner *r, const results *res) {
    int ok = 1, C = (int)a->classes;
    cJSON *root = eval_json_begin(a->model, r->m, &ok);
    jstr(root, "tokenizer", a->tokenizer, &ok);
    jnum(root, "classes", C, &ok);
    jnum(root, "queries", (double)a->queries, &ok);
    jnum(root, "episodes", (double)a->episodes, &ok);
    jnum(root, "orders", (double)a->orders, &ok);
    jnum(root, "seed", (double)a->seed, &ok);
    jnum(root, "max_rounds", (double)r->max_rounds, &ok);
    jnum(root, "chance", 1.0 / C, &ok);
    jstr(root, "precision", dtx_precision_name(dtx_model_precision(r->m)), &ok);
    jstr(root, "criterion", "the argmax of the next-token logits over the episode's label tokens is the query's label",
         &ok);
    cJSON *curve = jadd(root, "curve", cJSON_CreateArray(), &ok);
    for (int s = 0; s < a->n_shots && ok; s++) {
        int64_t k = 0, n = a->episodes * a->queries;
        cJSON *pe = cJSON_CreateArray();
        for (int64_t e = 0; e < a->episodes; e++) {
            k += res->curve[s * a->episodes + e];
            if (pe) cJSON_AddItemToArray(pe, cJSON_CreateNumber((double)res->curve[s * a->episodes + e]));
        }
        double lo, hi;
        dtx_wilson95(k, n, &lo, &hi);
        cJSON *o = jadd(curve, NULL, cJSON_CreateObject(), &ok);
        jnum(o, "rounds", (double)a->shots[s], &ok);
        jnum(o, "demos", (double)(a->shots[s] * C), &ok);
        jnum(o, "correct", (double)k, &ok);
        jnum(o, "n", (double)n, &ok);
        jnum(o, "acc", ratio(k, n), &ok);
        jnum(o, "lo", lo, &ok);
        jnum(o, "hi", hi, &ok);
        jadd(o, "correct_per_episode", pe, &ok);
    }
    cJSON *ord = jadd(root, "order", cJSON_CreateObject(), &ok);
    jnum(ord, "rounds", (double)a->order_shots, &ok);
    jnum(ord, "demos", (double)(a->order_shots * C), &ok);
    json_orders(jadd(ord, "random", cJSON_CreateObject(), &ok), a, res->by_order[0], &ok);
    json_orders(jadd(ord, "grouped", cJSON_CreateObject(), &ok), a, res->by_order[1], &ok);
    return eval_json(a->json, root, ok, 1);
}

/* ------------------------------------------------------------ setup */

static int parse_shots(icl_args *a) {
    a->n_shots = dtx_flags_int_list("--shots", a->shots_s, 1, 1000000, a->shots, MAX_SHOTS);
    return a->n_shots < 0 ? EVAL_USAGE : EVAL_OK;
}

/* The flags against the model's context and the tokenizer's pools. */
static int check_fit(icl_args *a, runner *r) {
    const dtx_config *c = dtx_model_config(r->m);
    int hi = dtx_icl_max_classes(&r->voc, 1);
    if (a->classes > hi)
        return eval_usage_error("--classes %lld: the tokenizer's word pools hold at most %d classes",
                           (long long)a->classes, hi);
    r->max_rounds = dtx_icl_max_rounds((int)a->classes, c->max_seq_len);
    int64_t round = a->classes * DTX_ICL_DEMO;
    if (r->max_rounds < 1)
        return eval_usage_error(
                           "--classes %lld: one round of demonstrations and a query take %lld tokens, more than the "
                           "model's max_seq_len %lld",
                           (long long)a->classes, (long long)(1 + round + DTX_ICL_QUERY), (long long)c->max_seq_len);
    if (!a->shots_s) {
        int n = 0;
        for (int64_t s = 1; s < r->max_rounds && n < MAX_SHOTS - 1; s *= 2) a->shots[n++] = s;
        a->shots[n++] = r->max_rounds;
        a->n_shots = n;
    }
    for (int i = 0; i < a->n_shots; i++)
        if (a->shots[i] > r->max_rounds)
            return eval_usage_error(
                               "--shots %lld: %lld rounds of %lld classes take %lld tokens; the model's max_seq_len "
                               "%lld holds %lld rounds",
                               (long long)a->shots[i], (long long)a->shots[i], (long long)a->classes,
                               (long long)(1 + a->shots[i] * round + DTX_ICL_QUERY), (long long)c->max_seq_len,
                               (long long)r->max_rounds);
    if (!a->order_shots) a->order_shots = r->max_rounds;
    if (a->order_shots > r->max_rounds)
        return eval_usage_error("--order-shots %lld: the model's max_seq_len %lld holds %lld rounds of %lld classes",
                           (long long)a->order_shots, (long long)c->max_seq_len, (long long)r->max_rounds,
                           (long long)a->classes);
    return EVAL_OK;
}

static int open_runner(icl_args *a, runner *r) {
    int rc = eval_load_model_and_tokenizer(a->model, a->tokenizer, a->precision, &r->m, &r->tok);
    if (rc != EVAL_OK) return rc;
    const dtx_config *c = dtx_model_config(r->m);
    if (dtx_icl_vocab_init(&r->voc, r->tok) != DTX_OK)
        return eval_usage_error("%s: %s", a->tokenizer, dtx_last_error());
    if ((rc = check_fit(a, r)) != EVAL_OK) return rc;
    int64_t longest = 1 + r->max_rounds * a->classes * DTX_ICL_DEMO + DTX_ICL_QUERY;
    if (dtx_kvcache_init(&r->cache, r->m, longest) != DTX_OK) return eval_lib_error();
    r->logits = malloc((size_t)c->vocab_size * sizeof *r->logits);
    r->prompt = malloc((size_t)longest * sizeof *r->prompt);
    if (!r->logits || !r->prompt) return eval_runtime_error("out of memory");
    return EVAL_OK;
}

static void close_runner(runner *r) {
    free(r->prompt);
    free(r->logits);
    dtx_kvcache_free(r->cache);
    dtx_icl_vocab_free(&r->voc);
    dtx_model_free(r->m);
    dtx_tokenizer_free(r->tok);
}

static int parse_args(icl_args *a, int argc, char **argv) {
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a->model),
        DTX_FLAG_STR("--tokenizer", &a->tokenizer, .metavar = "PATH",
                     .help = "the tokenizer the model was trained with; it needs <|bos|>, ':' and a newline as single "
                             "tokens, and word tokens", .required = 1),
        DTX_FLAG_INT("--classes", &a->classes, 2, DTX_ICL_MAX_CLASSES, .metavar = "C",
                     .help = "classes per episode, 2..64 (default 6, as TREC)"),
        DTX_FLAG_STR("--shots", &a->shots_s, .metavar = "LIST",
                     .help = "rounds of demonstrations, comma-separated (default 1, 2, 4, ... doubling, and the most that "
                             "fit the model's context)"),
        DTX_FLAG_INT("--queries", &a->queries, 1, 1000000, .metavar = "Q",
                     .help = "queries per episode (default 200), the same at every point"),
        DTX_FLAG_INT("--episodes", &a->episodes, 1, 10000, .metavar = "E",
                     .help = "episodes, each its own classes and labels (default 3)"),
        DTX_FLAG_INT("--orders", &a->orders, 2, 1000, .metavar = "K",
                     .help = "orders of each kind in the order study, 2..1000 (default 10)"),
        DTX_FLAG_INT("--order-shots", &a->order_shots, 1, 1000000, .metavar = "R",
                     .help = "rounds in the order study (default: the most that fit)"),
        DTX_FLAG_SEED("--seed", &a->seed, .metavar = "S", .help = "seed of every episode (default 1)"),
        DTX_FLAG_STR("--json", &a->json, .metavar = "OUT", .help = "also write every number as JSON"),
        DTX_FLAG_PRECISION(&a->precision),
    };
    int flags_rc = eval_flags(USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv);
    if (flags_rc != EVAL_OK) return flags_rc; /* a bad flag, or --help */
    return a->shots_s ? parse_shots(a) : EVAL_OK;
}

int dtx_eval_icl_main(int argc, char **argv) {
    icl_args a = {.classes = 6, .queries = 200, .episodes = 3, .orders = 10, .seed = 1};
    int rc = parse_args(&a, argc, argv);
    if (rc != EVAL_OK) return rc;
    runner r = {0};
    results res = {0};
    rc = open_runner(&a, &r);
    if (rc == EVAL_OK) {
        res.curve = calloc((size_t)(a.n_shots * a.episodes), sizeof *res.curve);
        for (int g = 0; g < 2; g++) res.by_order[g] = calloc((size_t)(a.episodes * a.orders), sizeof(int64_t));
        if (!res.curve || !res.by_order[0] || !res.by_order[1]) rc = eval_runtime_error("out of memory");
    }
    if (rc == EVAL_OK) rc = run_all(&a, &r, &res);
    if (rc == EVAL_OK) print_report(&a, &r, &res);
    if (rc == EVAL_OK) rc = write_json(&a, &r, &res);
    free(res.curve);
    free(res.by_order[0]);
    free(res.by_order[1]);
    close_runner(&r);
    return rc;
}
