/* difftx eval halluc: contextual faithfulness without a judge (spec §6.7,
 * the paper's Table 4), scored exactly on needle contexts
 * (src/eval/halluc.h); docs/eval_halluc.md. Answers are greedy (the needle
 * answerer: one prefilled context, each question after it). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_run.h"
#include "common/common.h"
#include "difftx.h"
#include "eval/halluc.h"
#include "eval/needle.h"
#include "eval/needle_answer.h"


static const char USAGE[] =
    "usage: difftx eval halluc --model MODEL --tokenizer TOK --haystack PATH[,PATH...]\n"
    "                          [--needles 3] [--list-needles 2,4,6] [--samples 100]\n"
    "                          [--length L] [--max-new 8] [--seed 1] [--json OUT]\n"
    "                          [--precision fp32|bf16]\n"
    "\n"
    "Contextual faithfulness (DIFF Transformer paper, Table 4) scored exactly on needle\n"
    "contexts (docs/eval_halluc.md), each over --samples prompts, greedy answers:\n"
    "  contradict  the context gives a fact city a number other than the fact the\n"
    "              model was taught (difftx train --fact-frac); the answer is faithful\n"
    "              (the context's), prior (the fact) or fabricated; the same question\n"
    "              asked without the context tells whether the model knows the fact\n"
    "  list        'List every special magic number': precision (1 - the rate of\n"
    "              listed numbers that are not in the context) and recall\n"
    "  absent      a question about a city the context does not hold (right: 'none'),\n"
    "              and one about a city it holds (right: its number)\n"
    "Wilson 95% intervals on every rate.\n"
    "\n";

enum { MAX_LIST = 16, TEXT_CAP = 4096 };

typedef struct {
    const char *model, *tokenizer, *haystack, *list_s, *json;
    int64_t needles, samples, length, max_new;
    int length_default; /* --length not given: what the model's context holds */
    uint64_t seed;
    int precision;
    int64_t list_n[MAX_LIST];
    int n_list;
} halluc_args;

typedef struct {
    dtx_model *m;
    dtx_tokenizer *tok;
    dtx_needle_source *src;
    dtx_needle_answerer *ans;
    char *text[2];
    int64_t asked, prompts; /* progress: prompts answered of all the tasks' */
} runner;

typedef struct {
    int64_t n, faithful, prior, fabricated, knows, faithful_knows, prior_knows;
} contradict_tally;
typedef struct {
    int64_t prompts, listed, right, expected, exact;
} list_tally;
typedef struct {
    int64_t n, none_absent, present_right, none_present;
} absent_tally;

typedef struct {
    contradict_tally c;
    list_tally l[MAX_LIST];
    absent_tally a;
} tallies;

static int64_t list_max_new(int64_t n) { return 6 * n + 2; }

static uint64_t prompt_seed(const halluc_args *a, int kind, int n, int64_t sample) {
    return dtx_mix64(dtx_mix64(dtx_mix64(dtx_mix64(a->seed) ^ (uint64_t)kind) ^ (uint64_t)n) ^ (uint64_t)sample);
}

static int make_error(const halluc_args *a, dtx_status st) {
    if (st == DTX_ERR_ARG)
        return eval_usage_error("--length %lld: %s%s", (long long)a->length, dtx_last_error(),
                           a->length_default ? " (the default --length is all the model's max_seq_len leaves: its "
                                               "context is too short for these tasks; fewer --needles and "
                                               "--list-needles shorten the prompts, a model trained at a longer "
                                               "--seq fits them)" : "");
    return eval_lib_error();
}

/* ------------------------------------------------------------ tasks */

/* Sample s of a task: its prompt (n needles) and the greedy answers to its
 * questions in r->text. EVAL_OK with *p to free, or the exit code (*p freed). */
static int ask(const halluc_args *a, runner *r, dtx_halluc_kind kind, int n, int64_t s, int64_t max_new,
               dtx_halluc_prompt *p) {
    dtx_status st = dtx_halluc_make(r->src, r->tok, kind, a->length, n, prompt_seed(a, (int)kind, n, s), p);
    if (st) return make_error(a, st);
    if (dtx_needle_answer_texts(r->ans, p->tokens, p->context_end, p->question, p->question_n, p->n_questions,
                                max_new, r->text, TEXT_CAP) != DTX_OK) {
        dtx_halluc_prompt_free(p);
        return eval_lib_error();
    }
    eval_progress("halluc: prompts", ++r->asked, r->prompts);
    return EVAL_OK;
}

static int run_contradict(const halluc_args *a, runner *r, contradict_tally *t) {
    int32_t bos = dtx_tokenizer_bos(r->tok);
    for (int64_t s = 0; s < a->samples; s++) {
        dtx_halluc_prompt p;
        int rc = ask(a, r, DTX_HALLUC_CONTRADICT, (int)a->needles, s, a->max_new, &p);
        if (rc != EVAL_OK) return rc;
        /* the same question without the context: does the model know the fact? */
        dtx_status st = dtx_needle_answer_texts(r->ans, &bos, 1, p.question, p.question_n, 1, a->max_new, r->text + 1,
                                                TEXT_CAP);
        if (st) {
            dtx_halluc_prompt_free(&p);
            return eval_lib_error();
        }
        dtx_halluc_outcome o = dtx_halluc_classify(r->text[0], strlen(r->text[0]), p.answer[0], p.prior);
        int knows = dtx_needle_answer_correct(r->text[1], strlen(r->text[1]), p.prior);
        t->n++;
        t->faithful += o == DTX_FAITHFUL, t->prior += o == DTX_PRIOR, t->fabricated += o == DTX_FABRICATED;
        t->knows += knows;
        t->faithful_knows += knows && o == DTX_FAITHFUL, t->prior_knows += knows && o == DTX_PRIOR;
        dtx_halluc_prompt_free(&p);
    }
    return EVAL_OK;
}

static int run_list(const halluc_args *a, runner *r, int n, list_tally *t) {
    for (int64_t s = 0; s < a->samples; s++) {
        dtx_halluc_prompt p;
        int rc = ask(a, r, DTX_HALLUC_LIST, n, s, list_max_new(n), &p);
        if (rc != EVAL_OK) return rc;
        int64_t listed, right;
        dtx_halluc_list_score(r->text[0], strlen(r->text[0]), (const char(*)[8])p.number, p.n_needles, &listed, &right);
        t->prompts++;
        t->listed += listed, t->right += right, t->expected += p.n_needles;
        t->exact += listed == p.n_needles && right == p.n_needles;
        dtx_halluc_prompt_free(&p);
    }
    return EVAL_OK;
}

static int run_absent(const halluc_args *a, runner *r, absent_tally *t) {
    for (int64_t s = 0; s < a->samples; s++) {
        dtx_halluc_prompt p;
        int rc = ask(a, r, DTX_HALLUC_ABSENT, (int)a->needles, s, a->max_new, &p);
        if (rc != EVAL_OK) return rc;
        t->n++;
        t->none_absent += dtx_halluc_is_none(r->text[0], strlen(r->text[0]));
        t->present_right += dtx_needle_answer_correct(r->text[1], strlen(r->text[1]), p.answer[1]);
        t->none_present += dtx_halluc_is_none(r->text[1], strlen(r->text[1]));
        dtx_halluc_prompt_free(&p);
    }
    return EVAL_OK;
}

/* ------------------------------------------------------------ reporting */

static double ratio(int64_t k, int64_t n) { return n > 0 ? (double)k / (double)n : 0; }

static void print_rate(const char *name, int64_t k, int64_t n) {
    double lo, hi;
    dtx_wilson95(k, n, &lo, &hi);
    eval_printf("  %-38s %6.3f  [%.3f, %.3f]  (%lld of %lld)\n", name, ratio(k, n), lo, hi, (long long)k, (long long)n);
}

static void print_report(const halluc_args *a, const runner *r, const tallies *t) {
    const dtx_config *c = dtx_model_config(r->m);
    eval_printf("contextual faithfulness: %s (%s, %zu parameters), %lld samples per task, length %lld, seed %llu, greedy\n",
           a->model, dtx_arch_name(c->arch), dtx_model_num_params(r->m), (long long)a->samples, (long long)a->length,
           (unsigned long long)a->seed);
    eval_printf("\ncontradict (%lld needles; a fact city's number changed in the context), Wilson 95%% intervals:\n",
           (long long)a->needles);
    print_rate("faithful (the context's number)", t->c.faithful, t->c.n);
    print_rate("prior (the taught fact)", t->c.prior, t->c.n);
    print_rate("fabricated (neither)", t->c.fabricated, t->c.n);
    print_rate("knows the fact without the context", t->c.knows, t->c.n);
    print_rate("faithful, where it knows the fact", t->c.faithful_knows, t->c.knows);
    eval_printf("\nlist every special magic number:\n");
    eval_printf("  needles  precision  interval          recall  interval          exact\n");
    for (int i = 0; i < a->n_list; i++) {
        const list_tally *l = &t->l[i];
        double plo, phi, rlo, rhi;
        dtx_wilson95(l->right, l->listed, &plo, &phi);
        dtx_wilson95(l->right, l->expected, &rlo, &rhi);
        eval_printf("  %7lld  %9.3f  [%.3f, %.3f]  %6.3f  [%.3f, %.3f]  %5.3f\n", (long long)a->list_n[i],
               ratio(l->right, l->listed),
               plo, phi, ratio(l->right, l->expected), rlo, rhi, ratio(l->exact, l->prompts));
    }
    eval_printf("\nabsent (%lld needles):\n", (long long)a->needles);
    print_rate("'none' to an absent city (right)", t->a.none_absent, t->a.n);
    print_rate("number of a present city (right)", t->a.present_right, t->a.n);
    print_rate("'none' to a present city (wrong)", t->a.none_present, t->a.n);
}

static void json_rate(cJSON *o, const char *key, int64_t k, int64_t n, int *ok) {
    double lo, hi;
    dtx_wilson95(k, n, &lo, &hi);
    cJSON *x = jadd(o, key, cJSON_CreateObject(), ok);
    jnum(x, "k", (double)k, ok);
    jnum(x, "n", (double)n, ok);
    jnum(x, "rate", ratio(k, n), ok);
    jnum(x, "lo", lo, ok);
    jnum(x, "hi", hi, ok);
}

static int write_json(const halluc_args *a, const runner *r, const tallies *t) {
    int ok = 1;
    cJSON *root = eval_json_begin(a->model, r->m, &ok);
    jstr(root, "tokenizer", a->tokenizer, &ok);
    jstr(root, "haystack", a->haystack, &ok);
    jnum(root, "samples", (double)a->samples, &ok);
    jnum(root, "length", (double)a->length, &ok);
    jnum(root, "needles", (double)a->needles, &ok);
    jnum(root, "max_new", (double)a->max_new, &ok);
    jnum(root, "seed", (double)a->seed, &ok);
    jstr(root, "precision", dtx_precision_name(dtx_model_precision(r->m)), &ok);
    cJSON *co = jadd(root, "contradict", cJSON_CreateObject(), &ok);
    json_rate(co, "faithful", t->c.faithful, t->c.n, &ok);
    json_rate(co, "prior", t->c.prior, t->c.n, &ok);
    json_rate(co, "fabricated", t->c.fabricated, t->c.n, &ok);
    json_rate(co, "knows", t->c.knows, t->c.n, &ok);
    json_rate(co, "faithful_given_knows", t->c.faithful_knows, t->c.knows, &ok);
    json_rate(co, "prior_given_knows", t->c.prior_knows, t->c.knows, &ok);
    cJSON *li = jadd(root, "list", cJSON_CreateArray(), &ok);
    int64_t listed = 0, right = 0, expected = 0;
    for (int i = 0; i < a->n_list && ok; i++) {
        const list_tally *l = &t->l[i];
        cJSON *o = jadd(li, NULL, cJSON_CreateObject(), &ok);
        jnum(o, "needles", a->list_n[i], &ok);
        json_rate(o, "precision", l->right, l->listed, &ok);
        json_rate(o, "recall", l->right, l->expected, &ok);
        json_rate(o, "exact", l->exact, l->prompts, &ok);
        listed += l->listed, right += l->right, expected += l->expected;
    }
    cJSON *lp = jadd(root, "list_pooled", cJSON_CreateObject(), &ok);
    json_rate(lp, "precision", right, listed, &ok);
    json_rate(lp, "recall", right, expected, &ok);
    cJSON *ab = jadd(root, "absent", cJSON_CreateObject(), &ok);
    json_rate(ab, "none_absent", t->a.none_absent, t->a.n, &ok);
    json_rate(ab, "present_right", t->a.present_right, t->a.n, &ok);
    json_rate(ab, "none_present", t->a.none_present, t->a.n, &ok);
    return eval_json(a->json, root, ok, 1);
}

/* ------------------------------------------------------------ setup */

static int parse_list(halluc_args *a) {
    a->n_list = dtx_flags_int_list("--list-needles", a->list_s, 1, DTX_NEEDLE_MAX, a->list_n, MAX_LIST);
    return a->n_list < 0 ? EVAL_USAGE : EVAL_OK;
}

static int open_runner(halluc_args *a, runner *r) {
    int rc = eval_load_model_and_tokenizer(a->model, a->tokenizer, a->precision, &r->m, &r->tok);
    if (rc != EVAL_OK) return rc;
    const dtx_config *c = dtx_model_config(r->m);
    int64_t most = a->max_new;
    for (int i = 0; i < a->n_list; i++) most = list_max_new(a->list_n[i]) > most ? list_max_new(a->list_n[i]) : most;
    if (!a->length) a->length = c->max_seq_len - most, a->length_default = 1;
    if (a->length < 1 || a->length + most > c->max_seq_len)
        return eval_usage_error(
                           "--length %lld: with answers of up to %lld tokens the model's max_seq_len %lld holds "
                           "prompts of at most %lld",
                           (long long)a->length, (long long)most, (long long)c->max_seq_len,
                           (long long)(c->max_seq_len - most));
    /* a haystack that cannot be read is the machine's trouble (exit 1); one that holds no text, the flag's */
    dtx_status st = dtx_needle_source_open_list(&r->src, r->tok, a->haystack);
    if (st == DTX_ERR_IO || st == DTX_ERR_NOMEM) return eval_lib_error();
    if (st) return eval_usage_error("%s", dtx_last_error());
    if (dtx_needle_answerer_init(&r->ans, r->m, r->tok, a->length, most) != DTX_OK) return eval_lib_error();
    r->text[0] = malloc(TEXT_CAP);
    r->text[1] = malloc(TEXT_CAP);
    if (!r->text[0] || !r->text[1]) return eval_runtime_error("out of memory");
    return EVAL_OK;
}

static void close_runner(runner *r) {
    free(r->text[0]);
    free(r->text[1]);
    dtx_needle_answerer_free(r->ans);
    dtx_needle_source_free(r->src);
    dtx_model_free(r->m);
    dtx_tokenizer_free(r->tok);
}

static int parse_args(halluc_args *a, int argc, char **argv) {
    dtx_flag fl[] = {
        DTX_FLAG_MODEL(&a->model),
        EVAL_FLAG_BOS_TOKENIZER(&a->tokenizer),
        EVAL_FLAG_HAYSTACK(&a->haystack),
        DTX_FLAG_INT("--needles", &a->needles, 1, DTX_NEEDLE_MAX, .metavar = "N",
                     .help = "needles in contradict and absent contexts, 1..16 (default 3)"),
        DTX_FLAG_STR("--list-needles", &a->list_s, .metavar = "L",
                     .help = "needle counts of the list task, each 1..16 (default 2,4,6)"),
        DTX_FLAG_INT("--samples", &a->samples, 1, 1000000, .metavar = "S",
                     .help = "prompts per task and needle count (default 100)"),
        DTX_FLAG_INT("--length", &a->length, 1, INT32_MAX, .metavar = "L",
                     .help = "prompt length in tokens (default: what the model's context leaves after the longest list "
                             "answer, 6 tokens a number)"),
        DTX_FLAG_INT("--max-new", &a->max_new, 1, 1024, .metavar = "M",
                     .help = "most tokens of a question's answer (default 8)"),
        DTX_FLAG_SEED("--seed", &a->seed, .metavar = "S", .help = "seed of every prompt (default 1)"),
        DTX_FLAG_STR("--json", &a->json, .metavar = "OUT", .help = "also write every count and rate as JSON"),
        DTX_FLAG_PRECISION(&a->precision),
    };
    int flags_rc = eval_flags(USAGE, fl, (int)(sizeof fl / sizeof fl[0]), argc, argv);
    if (flags_rc != EVAL_OK) return flags_rc; /* a bad flag, or --help */
    return parse_list(a);
}

int dtx_eval_halluc_main(int argc, char **argv) {
    halluc_args a = {.needles = 3, .samples = 100, .max_new = 8, .seed = 1, .list_s = "2,4,6"};
    int rc = parse_args(&a, argc, argv);
    if (rc != EVAL_OK) return rc;
    runner r = {0};
    tallies t;
    memset(&t, 0, sizeof t);
    rc = open_runner(&a, &r);
    r.prompts = a.samples * (2 + a.n_list); /* contradicted, each list size, absent */
    if (rc == EVAL_OK) rc = run_contradict(&a, &r, &t.c);
    for (int i = 0; i < a.n_list && rc == EVAL_OK; i++) rc = run_list(&a, &r, (int)a.list_n[i], &t.l[i]);
    if (rc == EVAL_OK) rc = run_absent(&a, &r, &t.a);
    if (rc == EVAL_OK) print_report(&a, &r, &t);
    if (rc == EVAL_OK) rc = write_json(&a, &r, &t);
    close_runner(&r);
    return rc;
}
