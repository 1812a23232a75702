/* Many-shot in-context classification episodes (icl.h). */
#include "eval/icl.h"

#include <stdlib.h>
#include <string.h>

/* A word token: a space, then two or more ASCII lower-case letters. */
static int is_word(const char *b, size_t n) {
    if (n < 3 || b[0] != ' ') return 0;
    for (size_t i = 1; i < n; i++)
        if (b[i] < 'a' || b[i] > 'z') return 0;
    return 1;
}

static dtx_status one_token(const dtx_tokenizer *tok, const char *text, const char *name, int32_t *id) {
    int32_t *ids = NULL;
    int64_t n = 0;
    dtx_status st = dtx_tokenizer_encode(tok, text, strlen(text), DTX_ENCODE_ORDINARY, &ids, &n);
    if (st) return st;
    *id = n == 1 ? ids[0] : -1;
    free(ids);
    if (n != 1) return dtx_fail(DTX_ERR_ARG, "icl episodes: %s encodes to %lld tokens, not 1", name, (long long)n);
    return DTX_OK;
}

dtx_status dtx_icl_vocab_init(dtx_icl_vocab *v, const dtx_tokenizer *tok) {
    memset(v, 0, sizeof *v);
    v->bos = dtx_tokenizer_bos(tok);
    if (v->bos < 0) return dtx_fail(DTX_ERR_ARG, "icl episodes: the tokenizer has no BOS token (<|bos|>, bos_token)");
    dtx_status st = one_token(tok, ":", "':'", &v->sep);
    if (!st) st = one_token(tok, "\n", "a newline", &v->newline);
    if (st) return st;
    int64_t V = dtx_tokenizer_vocab_size(tok), rank = 0;
    for (int k = 0; k < 3; k++)
        if (!(v->pool[k] = malloc((size_t)(V / 3 + 1) * sizeof(int32_t)))) {
            dtx_icl_vocab_free(v);
            return dtx_fail(DTX_ERR_NOMEM, "icl episodes: out of memory");
        }
    for (int32_t id = 0; id < V; id++) {
        size_t n = 0;
        const char *b = dtx_tokenizer_token_bytes(tok, id, &n);
        if (!b || !is_word(b, n)) continue;
        int k = (int)(rank++ % 3);
        v->pool[k][v->pool_n[k]++] = id;
    }
    int64_t need_labels = DTX_ICL_TRAIN_MAX_CLASSES, need_feat = (int64_t)DTX_ICL_TRAIN_MAX_CLASSES * DTX_ICL_PROTO;
    if (v->pool_n[0] < need_labels || v->pool_n[1] < need_feat || v->pool_n[2] < need_feat) {
        dtx_status e = dtx_fail(DTX_ERR_ARG,
                                "icl episodes: the tokenizer has %lld word tokens (%lld labels, %lld training and "
                                "%lld held-out features); %d classes need %lld labels and %lld features in each pool",
                                (long long)rank, (long long)v->pool_n[0], (long long)v->pool_n[1],
                                (long long)v->pool_n[2], DTX_ICL_TRAIN_MAX_CLASSES, (long long)need_labels,
                                (long long)need_feat);
        dtx_icl_vocab_free(v);
        return e;
    }
    return DTX_OK;
}

void dtx_icl_vocab_free(dtx_icl_vocab *v) {
    for (int k = 0; k < 3; k++) free(v->pool[k]);
    memset(v, 0, sizeof *v);
}

int dtx_icl_max_classes(const dtx_icl_vocab *v, int held_out) {
    int64_t by_feat = v->pool_n[held_out ? 2 : 1] / DTX_ICL_PROTO, m = v->pool_n[0] < by_feat ? v->pool_n[0] : by_feat;
    return m > DTX_ICL_MAX_CLASSES ? DTX_ICL_MAX_CLASSES : (int)m;
}

static uint64_t below(dtx_rng *r, uint64_t n) { return dtx_rng_next(r) % n; }

/* k distinct entries of pool[0, n) (partial Fisher-Yates on an index copy). */
static dtx_status draw_distinct(const int32_t *pool, int64_t n, int64_t k, dtx_rng *r, int32_t *out) {
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    if (!idx) return dtx_fail(DTX_ERR_NOMEM, "icl episodes: out of memory");
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    for (int64_t i = 0; i < k; i++) {
        int64_t j = i + (int64_t)below(r, (uint64_t)(n - i)), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
        out[i] = pool[idx[i]];
    }
    free(idx);
    return DTX_OK;
}

dtx_status dtx_icl_task_draw(const dtx_icl_vocab *v, int n_classes, int held_out, dtx_rng *r, dtx_icl_task *t) {
    memset(t, 0, sizeof *t);
    int hi = dtx_icl_max_classes(v, held_out);
    if (n_classes < 1 || n_classes > hi)
        return dtx_fail(DTX_ERR_ARG, "icl episodes: %d classes; this tokenizer's pools allow 1 to %d", n_classes, hi);
    t->n_classes = n_classes;
    t->held_out = held_out != 0;
    int32_t feat[DTX_ICL_MAX_CLASSES * DTX_ICL_PROTO];
    int k = held_out ? 2 : 1;
    dtx_status st = draw_distinct(v->pool[0], v->pool_n[0], n_classes, r, t->label);
    if (!st) st = draw_distinct(v->pool[k], v->pool_n[k], (int64_t)n_classes * DTX_ICL_PROTO, r, feat);
    if (st) return st;
    for (int c = 0; c < n_classes; c++) memcpy(t->proto[c], feat + c * DTX_ICL_PROTO, sizeof t->proto[c]);
    return DTX_OK;
}

void dtx_icl_example(const dtx_icl_vocab *v, const dtx_icl_task *t, int c, dtx_rng *r, int32_t *x) {
    int k = t->held_out ? 2 : 1;
    for (int i = 0; i < DTX_ICL_LEN; i++) {
        if (dtx_rng_uniform(r) < DTX_ICL_NOISE) x[i] = v->pool[k][below(r, (uint64_t)v->pool_n[k])];
        else x[i] = t->proto[c][below(r, DTX_ICL_PROTO)];
    }
}

void dtx_icl_put_demo(const dtx_icl_vocab *v, const dtx_icl_task *t, const int32_t *x, int c, int32_t *out) {
    memcpy(out, x, DTX_ICL_LEN * sizeof *x);
    out[DTX_ICL_LEN] = v->sep;
    out[DTX_ICL_LEN + 1] = t->label[c];
    out[DTX_ICL_LEN + 2] = v->newline;
}

void dtx_icl_put_query(const dtx_icl_vocab *v, const int32_t *x, int32_t *out) {
    memcpy(out, x, DTX_ICL_LEN * sizeof *x);
    out[DTX_ICL_LEN] = v->sep;
}

int dtx_icl_pick(const dtx_icl_task *t, const dtx_real *logits) {
    int best = 0;
    for (int c = 1; c < t->n_classes; c++)
        if (logits[t->label[c]] > logits[t->label[best]]) best = c;
    return best;
}

void dtx_icl_training_row(const dtx_icl_vocab *v, uint64_t seed, int64_t n, int32_t *out) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    int span = DTX_ICL_TRAIN_MAX_CLASSES - DTX_ICL_TRAIN_MIN_CLASSES + 1;
    int C = DTX_ICL_TRAIN_MIN_CLASSES + (int)below(&r, (uint64_t)span);
    dtx_icl_task t;
    /* cannot fail: vocab_init checked the pools for 16 classes */
    (void)dtx_icl_task_draw(v, C, 0, &r, &t);
    int64_t at = 0;
    if (n > 0) out[at++] = v->bos;
    while (at < n) {
        int32_t x[DTX_ICL_LEN], d[DTX_ICL_DEMO];
        int c = (int)below(&r, (uint64_t)C);
        dtx_icl_example(v, &t, c, &r, x);
        dtx_icl_put_demo(v, &t, x, c, d);
        for (int i = 0; i < DTX_ICL_DEMO && at < n; i++) out[at++] = d[i];
    }
}

int64_t dtx_icl_max_rounds(int n_classes, int64_t max_len) {
    if (n_classes < 1) return 0;
    int64_t room = max_len - 1 - DTX_ICL_QUERY;
    return room > 0 ? room / ((int64_t)n_classes * DTX_ICL_DEMO) : 0;
}
