/* Greedy answers to needle questions (needle_answer.h). */
#include "eval/needle_answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

struct dtx_needle_answerer {
    dtx_model *m;
    const dtx_tokenizer *tok;
    dtx_kvcache *cache;
    dtx_real *logits;
    int64_t v_pick, max_new; /* greedy picks among ids < min(model vocab, tokenizer vocab) */
    int32_t eos, bos, pad;
    char *text; /* one query's decoded text */
    size_t text_len, text_cap;
};

dtx_status dtx_needle_answerer_init(dtx_needle_answerer **out, dtx_model *m, const dtx_tokenizer *tok,
                                    int64_t max_len, int64_t max_new) {
    *out = NULL;
    const dtx_config *c = dtx_model_config(m);
    int64_t vt = dtx_tokenizer_vocab_size(tok);
    if (vt > c->vocab_size)
        return dtx_fail(DTX_ERR_ARG, "the tokenizer has %lld tokens, more than the model's vocab_size %lld",
                        (long long)vt, (long long)c->vocab_size);
    if (max_new < 1) return dtx_fail(DTX_ERR_ARG, "answers need at least 1 new token, got %lld", (long long)max_new);
    dtx_needle_answerer *r = calloc(1, sizeof *r);
    if (!r) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    r->m = m, r->tok = tok, r->max_new = max_new;
    r->v_pick = vt < c->vocab_size ? vt : c->vocab_size;
    r->bos = dtx_tokenizer_bos(tok);
    r->pad = dtx_tokenizer_token_id(tok, "<|pad|>");
    r->eos = dtx_tokenizer_eos(tok);
    r->logits = malloc((size_t)c->vocab_size * sizeof *r->logits);
    if (!r->logits) {
        dtx_needle_answerer_free(r);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    /* the prompt (<= max_len) + max_new − 1 fed-back tokens */
    dtx_status st = dtx_kvcache_init(&r->cache, m, max_len + max_new - 1);
    if (st) {
        dtx_needle_answerer_free(r);
        return st;
    }
    *out = r;
    return DTX_OK;
}

void dtx_needle_answerer_free(dtx_needle_answerer *r) {
    if (!r) return;
    dtx_kvcache_free(r->cache);
    free(r->logits);
    free(r->text);
    free(r);
}

static int text_append(dtx_needle_answerer *r, const char *s, size_t n) {
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = (r->text_len + n + 1) * 2;
        char *t = realloc(r->text, cap);
        if (!t) return -1;
        r->text = t;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    return 0;
}

static int32_t pick(const dtx_needle_answerer *r) {
    int32_t best = -1;
    for (int64_t i = 0; i < r->v_pick; i++) {
        if (i == r->bos || i == r->pad) continue;
        if (best < 0 || r->logits[i] > r->logits[best]) best = (int32_t)i;
    }
    return best;
}

/* Decodes up to max_new tokens after the cached context + question into
 * r->text; r->logits holds the question's last logits on entry. */
static dtx_status answer(dtx_needle_answerer *r, int64_t max_new) {
    r->text_len = 0;
    if (text_append(r, "", 0)) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int64_t step = 0; step < max_new; step++) {
        int32_t tok = pick(r);
        if (tok < 0 || tok == r->eos) break;
        char *s = NULL;
        size_t n = 0;
        dtx_status st = dtx_tokenizer_decode(r->tok, &tok, 1, &s, &n);
        if (st) return st;
        int bad = text_append(r, s, n);
        free(s);
        if (bad) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
        char *nl = memchr(r->text, '\n', r->text_len);
        if (nl) {
            r->text_len = (size_t)(nl - r->text);
            r->text[r->text_len] = '\0';
            break;
        }
        if (step + 1 < max_new && (st = dtx_model_decode(r->m, r->cache, tok, r->logits))) return st;
    }
    return DTX_OK;
}

/* Question q after the cached context (context_n tokens): its greedy answer
 * in r->text, then the cache cut back to the context. */
static dtx_status ask(dtx_needle_answerer *r, const int32_t *question, int64_t question_n, int64_t context_n,
                      int64_t max_new) {
    dtx_status st = dtx_model_prefill(r->m, r->cache, question, question_n, r->logits);
    if (!st) st = answer(r, max_new);
    if (!st) st = dtx_kvcache_truncate(r->cache, context_n);
    return st;
}

dtx_status dtx_needle_answer_texts(dtx_needle_answerer *r, const int32_t *context, int64_t context_n,
                                   int32_t *const *question, const int64_t *question_n, int n_questions,
                                   int64_t max_new, char *const *text, size_t cap) {
    if (max_new < 1 || max_new > r->max_new)
        return dtx_fail(DTX_ERR_ARG, "answers of %lld tokens; this answerer makes 1 to %lld", (long long)max_new,
                        (long long)r->max_new);
    dtx_kvcache_reset(r->cache);
    dtx_status st = dtx_model_prefill(r->m, r->cache, context, context_n, NULL);
    for (int q = 0; q < n_questions && !st; q++)
        if (!(st = ask(r, question[q], question_n[q], context_n, max_new)) && cap)
            snprintf(text[q], cap, "%s", r->text);
    return st;
}

dtx_status dtx_needle_answer_prompt(dtx_needle_answerer *r, const dtx_needle_prompt *p, int *right, char *text0,
                                    size_t cap0) {
    dtx_kvcache_reset(r->cache);
    dtx_status st = dtx_model_prefill(r->m, r->cache, p->tokens, p->context_end, NULL);
    for (int q = 0; q < p->n_queries && !st; q++) {
        if ((st = ask(r, p->question[q], p->question_n[q], p->context_end, r->max_new))) break;
        right[q] = dtx_needle_answer_correct(r->text, r->text_len, p->number[q]);
        if (q == 0 && text0 && cap0) snprintf(text0, cap0, "%s", r->text);
    }
    return st;
}
