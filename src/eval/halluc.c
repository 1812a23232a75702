/* Contextual faithfulness prompts, training rows and scoring (halluc.h). */
#include "eval/halluc.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "io/tokenizer.h"

static const char LIST_QUESTION[] = "\nList every special magic number. The special magic numbers are ";

void dtx_fact_number(int i, char *out) {
    snprintf(out, 8, "%d", 10000 + (int)(dtx_mix64(0x66616374ull ^ (uint64_t)i) % 90000u));
}

/* ------------------------------------------------------------ token lists */

static dtx_status tv_text(dtx_idbuf *t, const dtx_tokenizer *tok, const char *text) {
    int32_t *ids = NULL;
    int64_t n = 0;
    dtx_status st = dtx_tokenizer_encode(tok, text, strlen(text), DTX_ENCODE_ORDINARY, &ids, &n);
    if (!st) st = dtx_idbuf_append(t, ids, n);
    free(ids);
    return st;
}

static dtx_status tv_question(dtx_idbuf *t, const dtx_tokenizer *tok, const char *city) {
    char q[256];
    dtx_needle_question_text(city, q, sizeof q);
    return tv_text(t, tok, q);
}

/* ------------------------------------------------------------ contexts */

/* A city of [DTX_FACT_CITIES, N) that is none of p's needles. */
static const char *absent_city(dtx_rng *r, const dtx_needle_prompt *p) {
    int lo = DTX_FACT_CITIES, n = dtx_needle_num_cities() - lo;
    for (;;) {
        const char *c = dtx_needle_city(lo + (int)(dtx_rng_next(r) % (uint64_t)n));
        int used = 0;
        for (int i = 0; i < p->n_needles; i++) used |= strcmp(p->city[i], c) == 0;
        if (!used) return c;
    }
}

/* Needle indices in the order they appear in the context. */
static void context_order(const dtx_needle_prompt *p, int *order) {
    for (int i = 0; i < p->n_needles; i++) order[i] = i;
    for (int i = 1; i < p->n_needles; i++)
        for (int j = i; j > 0 && p->needle_begin[order[j]] < p->needle_begin[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

/* What follows a context, made twice: on a first context of the full length,
 * to learn how long it is, then on the context that leaves it room (the
 * needles are drawn before the haystack, whatever the length, so both hold
 * the same needles; their places differ). The tail's random choices restart
 * from tail_seed, and its length must not depend on the places: pieces are
 * encoded one by one. */
typedef dtx_status (*tail_fn)(const dtx_needle_prompt *ctx, const dtx_tokenizer *tok, dtx_rng *r, void *arg,
                              dtx_idbuf *tail);

static dtx_status fitted_context(const dtx_needle_source *src, const dtx_tokenizer *tok, dtx_needle_spec spec,
                                 int64_t total, tail_fn fn, void *arg, uint64_t tail_seed, dtx_needle_prompt *ctx,
                                 dtx_idbuf *tail) {
    spec.no_question = 1;
    spec.with_answer = 0;
    spec.length = total;
    dtx_needle_prompt probe;
    dtx_status st = dtx_needle_make(src, &spec, &probe);
    if (st) return st;
    dtx_rng r;
    dtx_rng_seed(&r, tail_seed);
    st = fn(&probe, tok, &r, arg, tail);
    dtx_needle_prompt_free(&probe);
    if (st) return st;
    int64_t room = tail->n;
    spec.length = total - room;
    if (spec.length < 1)
        return dtx_fail(DTX_ERR_ARG, "faithfulness prompt: length %lld cannot hold its questions (%lld tokens)",
                        (long long)total, (long long)room);
    if ((st = dtx_needle_make(src, &spec, ctx))) return st;
    tail->n = 0;
    dtx_rng_seed(&r, tail_seed);
    st = fn(ctx, tok, &r, arg, tail);
    if (!st && tail->n != room)
        st = dtx_fail(DTX_ERR_ARG, "faithfulness prompt: the questions took %lld tokens, then %lld",
                      (long long)room, (long long)tail->n);
    if (st) dtx_needle_prompt_free(ctx);
    return st;
}

/* ------------------------------------------------------------ training rows */

dtx_status dtx_halluc_fact_row(const dtx_tokenizer *tok, uint64_t seed, int64_t n, int32_t *out) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    int32_t bos = dtx_tokenizer_bos(tok);
    if (bos < 0) return dtx_fail(DTX_ERR_ARG, "fact rows: the tokenizer has no <|bos|>");
    dtx_idbuf t = {0};
    dtx_status st = dtx_idbuf_append(&t, &bos, 1);
    while (!st && t.n < n) {
        int i = (int)(dtx_rng_next(&r) % DTX_FACT_CITIES);
        char num[8];
        dtx_fact_number(i, num);
        st = tv_question(&t, tok, dtx_needle_city(i));
        if (!st) st = tv_text(&t, tok, num);
        if (!st) st = tv_text(&t, tok, "\n");
    }
    if (!st) memcpy(out, t.ids, (size_t)n * sizeof *out);
    dtx_idbuf_free(&t);
    return st;
}

static dtx_status list_answer(const dtx_needle_prompt *ctx, const dtx_tokenizer *tok, dtx_idbuf *tail) {
    int order[DTX_NEEDLE_MAX];
    context_order(ctx, order);
    dtx_status st = DTX_OK;
    for (int i = 0; i < ctx->n_needles && !st; i++) {
        if (i) st = tv_text(tail, tok, ", ");
        if (!st) st = tv_text(tail, tok, ctx->number[order[i]]);
    }
    return st ? st : tv_text(tail, tok, "\n");
}

static dtx_status training_tail(const dtx_needle_prompt *ctx, const dtx_tokenizer *tok, dtx_rng *r, void *arg,
                                dtx_idbuf *tail) {
    (void)arg;
    dtx_status st = tv_text(tail, tok, LIST_QUESTION);
    if (!st) st = list_answer(ctx, tok, tail);
    for (int q = 0; q < 2 && !st; q++) {
        int absent = dtx_rng_next(r) & 1;
        int i = (int)(dtx_rng_next(r) % (uint64_t)ctx->n_needles);
        st = tv_question(tail, tok, absent ? absent_city(r, ctx) : ctx->city[i]);
        if (!st) st = tv_text(tail, tok, absent ? "none" : ctx->number[i]);
        if (!st) st = tv_text(tail, tok, "\n");
    }
    return st;
}

dtx_status dtx_halluc_training_doc(const dtx_needle_source *src, const dtx_tokenizer *tok, uint64_t seed,
                                   int64_t n, int max_needles, int32_t *out) {
    if (max_needles < 1 || max_needles > DTX_NEEDLE_MAX)
        return dtx_fail(DTX_ERR_ARG, "faithfulness documents: %d needles; must be 1 to %d", max_needles,
                        DTX_NEEDLE_MAX);
    uint64_t h = dtx_mix64(seed ^ 0x68616c6cull);
    dtx_needle_spec spec = {.n_needles = 1 + (int)(h % (uint64_t)max_needles), .n_queries = 1, .depth = -1,
                            .seed = dtx_mix64(h), .city_lo = DTX_FACT_CITIES};
    dtx_needle_prompt ctx;
    dtx_idbuf tail = {0};
    dtx_status st = fitted_context(src, tok, spec, n, training_tail, NULL, dtx_mix64(h ^ 1), &ctx, &tail);
    if (!st) {
        memcpy(out, ctx.tokens, (size_t)ctx.n * sizeof *out);
        memcpy(out + ctx.n, tail.ids, (size_t)tail.n * sizeof *out);
        dtx_needle_prompt_free(&ctx);
    }
    dtx_idbuf_free(&tail);
    return st;
}

/* ------------------------------------------------------------ evaluation prompts */

typedef struct {
    dtx_halluc_kind kind;
    dtx_halluc_prompt *p;
} eval_arg;

/* The questions of an eval prompt into tail (then split into p->question). */
static dtx_status eval_tail(const dtx_needle_prompt *ctx, const dtx_tokenizer *tok, dtx_rng *r, void *arg,
                            dtx_idbuf *tail) {
    eval_arg *e = arg;
    dtx_halluc_prompt *p = e->p;
    dtx_idbuf q[2] = {{0}, {0}};
    dtx_status st = DTX_OK;
    p->n_questions = 1;
    switch (e->kind) {
    case DTX_HALLUC_LIST:
        st = tv_text(&q[0], tok, LIST_QUESTION);
        p->n_needles = ctx->n_needles;
        for (int i = 0; i < ctx->n_needles; i++) memcpy(p->number[i], ctx->number[i], sizeof p->number[i]);
        snprintf(p->answer[0], sizeof p->answer[0], "list");
        break;
    case DTX_HALLUC_ABSENT: {
        const char *c = absent_city(r, ctx);
        snprintf(p->city, sizeof p->city, "%s", c);
        snprintf(p->answer[0], sizeof p->answer[0], "none");
        snprintf(p->answer[1], sizeof p->answer[1], "%s", ctx->number[0]);
        st = tv_question(&q[0], tok, c);
        if (!st) st = tv_question(&q[1], tok, ctx->city[0]);
        p->n_questions = 2;
        break;
    }
    default: /* CONTRADICT */
        snprintf(p->city, sizeof p->city, "%s", ctx->city[0]);
        snprintf(p->answer[0], sizeof p->answer[0], "%s", ctx->number[0]);
        st = tv_question(&q[0], tok, ctx->city[0]);
        break;
    }
    /* the context leaves room for the longer question */
    int longer = p->n_questions == 2 && q[1].n > q[0].n;
    if (!st) st = dtx_idbuf_append(tail, q[longer].ids, q[longer].n);
    for (int k = 0; k < p->n_questions && !st; k++) {
        free(p->question[k]); /* the first context's (fitted_context) */
        p->question[k] = q[k].ids, p->question_n[k] = q[k].n;
        q[k].ids = NULL;
    }
    dtx_idbuf_free(&q[0]);
    dtx_idbuf_free(&q[1]);
    return st;
}

void dtx_halluc_prompt_free(dtx_halluc_prompt *p) {
    if (!p) return;
    free(p->tokens);
    free(p->question[0]);
    free(p->question[1]);
    memset(p, 0, sizeof *p);
}

dtx_status dtx_halluc_make(const dtx_needle_source *src, const dtx_tokenizer *tok, dtx_halluc_kind kind,
                           int64_t length, int n_needles, uint64_t seed, dtx_halluc_prompt *out) {
    memset(out, 0, sizeof *out);
    if (kind < DTX_HALLUC_CONTRADICT || kind > DTX_HALLUC_ABSENT)
        return dtx_fail(DTX_ERR_ARG, "faithfulness prompt: unknown kind %d", (int)kind);
    dtx_rng r;
    dtx_rng_seed(&r, dtx_mix64(seed ^ 0x6576616cull ^ (uint64_t)kind << 56));
    int fact = (int)(dtx_rng_next(&r) % DTX_FACT_CITIES);
    dtx_fact_number(fact, out->prior);
    dtx_needle_spec spec = {.n_needles = n_needles, .n_queries = 1, .depth = -1, .seed = dtx_rng_next(&r),
                            .city_lo = DTX_FACT_CITIES};
    char number[8];
    if (kind == DTX_HALLUC_CONTRADICT) {
        int v;
        do v = 10000 + (int)(dtx_rng_next(&r) % 90000u);
        while (v == atoi(out->prior));
        snprintf(number, sizeof number, "%d", v);
        spec.answer_city = dtx_needle_city(fact);
        spec.answer_number = number;
    } else {
        out->prior[0] = '\0';
    }
    eval_arg e = {kind, out};
    dtx_needle_prompt ctx;
    dtx_idbuf tail = {0};
    dtx_status st = fitted_context(src, tok, spec, length, eval_tail, &e, dtx_rng_next(&r), &ctx, &tail);
    dtx_idbuf_free(&tail);
    if (st) {
        char prior[8];
        memcpy(prior, out->prior, sizeof prior);
        dtx_halluc_prompt_free(out);
        memcpy(out->prior, prior, sizeof prior);
        return st;
    }
    /* The first call's questions were built on the same needles; the prompt
     * is the second call's context and question 0. */
    dtx_idbuf t = {0};
    st = dtx_idbuf_append(&t, ctx.tokens, ctx.n);
    if (!st) st = dtx_idbuf_append(&t, out->question[0], out->question_n[0]);
    out->context_end = ctx.n;
    dtx_needle_prompt_free(&ctx);
    if (st) {
        dtx_idbuf_free(&t);
        dtx_halluc_prompt_free(out);
        return st;
    }
    out->tokens = t.ids, out->n = t.n;
    t.ids = NULL;
    dtx_idbuf_free(&t);
    return DTX_OK;
}

/* ------------------------------------------------------------ scoring */

dtx_halluc_outcome dtx_halluc_classify(const char *text, size_t len, const char *context_number,
                                       const char *prior) {
    if (dtx_needle_answer_correct(text, len, context_number)) return DTX_FAITHFUL;
    if (prior && *prior && dtx_needle_answer_correct(text, len, prior)) return DTX_PRIOR;
    return DTX_FABRICATED;
}

int dtx_halluc_is_none(const char *text, size_t len) {
    size_t b = 0, e = len;
    while (b < e && isspace((unsigned char)text[b])) b++;
    while (e > b && isspace((unsigned char)text[e - 1])) e--;
    return e - b == 4 && memcmp(text + b, "none", 4) == 0;
}

void dtx_halluc_list_score(const char *text, size_t len, const char (*numbers)[8], int n, int64_t *listed,
                           int64_t *right) {
    int seen[DTX_NEEDLE_MAX] = {0};
    *listed = *right = 0;
    for (size_t i = 0; i < len;) {
        if (!isdigit((unsigned char)text[i])) {
            i++;
            continue;
        }
        size_t b = i;
        while (i < len && isdigit((unsigned char)text[i])) i++;
        (*listed)++;
        for (int k = 0; k < n && k < DTX_NEEDLE_MAX; k++)
            if (!seen[k] && strlen(numbers[k]) == i - b && memcmp(numbers[k], text + b, i - b) == 0) {
                seen[k] = 1;
                (*right)++;
                break;
            }
    }
}
