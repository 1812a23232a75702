/* Multi-query associative recall episodes (recall.h). */
#include <stdlib.h>
#include <string.h>

#include "eval/recall.h"
#include "common/common.h"

enum { MAX_KEYS = 65536 }; /* keys are drawn from at most this many ids (a bitmap on the stack) */

static int64_t key_count(int64_t vocab) {
    int64_t k = (vocab - 1) / 2;
    return k < MAX_KEYS ? k : MAX_KEYS;
}

dtx_status dtx_recall_check(int64_t queries, int64_t distractors, int64_t vocab) {
    if (queries < 1) return dtx_fail(DTX_ERR_ARG, "recall: %lld queries, at least 1 needed", (long long)queries);
    if (distractors < 0)
        return dtx_fail(DTX_ERR_ARG, "recall: %lld distractors, not a count", (long long)distractors);
    int64_t pairs = queries + distractors;
    if (pairs > DTX_RECALL_MAX_PAIRS)
        return dtx_fail(DTX_ERR_ARG, "recall: %lld pairs (queries + distractors), at most %d", (long long)pairs,
                        DTX_RECALL_MAX_PAIRS);
    if (key_count(vocab) < pairs)
        return dtx_fail(DTX_ERR_ARG,
                        "recall: a vocabulary of %lld ids holds %lld distinct keys, fewer than the %lld pairs",
                        (long long)vocab, (long long)key_count(vocab), (long long)pairs);
    return DTX_OK;
}

static uint64_t next(uint64_t *h) { return *h = dtx_mix64(*h); }

/* The episode of (Q, D, h) into tokens [2·(P + Q)]; where given, the
 * queries' key positions and pairs and the asked flags. idx [P] is scratch. */
static void fill_episode(int64_t Q, int64_t D, int64_t vocab, uint64_t h, int32_t *tokens, int64_t *query_pos,
                         int64_t *answer_pair, uint8_t *asked, int32_t *idx) {
    int64_t P = Q + D, K = key_count(vocab), nv = vocab - 1 - K;
    uint64_t used[MAX_KEYS / 64];
    memset(used, 0, (size_t)((K + 63) / 64) * sizeof used[0]);
    /* P distinct keys (Floyd's sampling), then shuffled: Floyd's order is not uniform */
    for (int64_t j = K - P, i = 0; j < K; j++, i++) {
        int64_t t = (int64_t)(next(&h) % (uint64_t)(j + 1));
        if (used[t / 64] >> (t % 64) & 1) t = j;
        used[t / 64] |= (uint64_t)1 << (t % 64);
        tokens[2 * i] = (int32_t)(1 + t);
    }
    for (int64_t i = P - 1; i > 0; i--) {
        int64_t j = (int64_t)(next(&h) % (uint64_t)(i + 1));
        int32_t t = tokens[2 * i];
        tokens[2 * i] = tokens[2 * j], tokens[2 * j] = t;
    }
    for (int64_t i = 0; i < P; i++) tokens[2 * i + 1] = (int32_t)(1 + K + (int64_t)(next(&h) % (uint64_t)nv));
    /* the pairs asked: the first Q of a shuffle of 0..P-1, in that order */
    for (int64_t i = 0; i < P; i++) idx[i] = (int32_t)i;
    for (int64_t i = 0; i < Q; i++) {
        int64_t j = i + (int64_t)(next(&h) % (uint64_t)(P - i));
        int32_t t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    if (asked) memset(asked, 0, (size_t)P);
    for (int64_t q = 0; q < Q; q++) {
        int64_t pos = 2 * (P + q), pair = idx[q];
        tokens[pos] = tokens[2 * pair];
        tokens[pos + 1] = tokens[2 * pair + 1];
        if (query_pos) query_pos[q] = pos;
        if (answer_pair) answer_pair[q] = pair;
        if (asked) asked[pair] = 1;
    }
}

dtx_status dtx_recall_make(const dtx_recall_spec *s, dtx_recall_episode *e) {
    memset(e, 0, sizeof *e);
    dtx_status st = dtx_recall_check(s->queries, s->distractors, s->vocab);
    if (st) return st;
    int64_t P = s->queries + s->distractors, Q = s->queries;
    e->n = 2 * (P + Q), e->pairs = P, e->queries = Q;
    e->tokens = malloc((size_t)e->n * sizeof *e->tokens);
    e->query_pos = malloc((size_t)Q * sizeof *e->query_pos);
    e->answer_pair = malloc((size_t)Q * sizeof *e->answer_pair);
    e->asked = malloc((size_t)P);
    int32_t *idx = malloc((size_t)P * sizeof *idx);
    if (!e->tokens || !e->query_pos || !e->answer_pair || !e->asked || !idx) {
        free(idx);
        dtx_recall_free(e);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    fill_episode(Q, s->distractors, s->vocab, dtx_mix64(s->seed ^ 0x7265636131ULL), e->tokens, e->query_pos,
                 e->answer_pair, e->asked, idx);
    free(idx);
    return DTX_OK;
}

void dtx_recall_free(dtx_recall_episode *e) {
    free(e->tokens), free(e->query_pos), free(e->answer_pair), free(e->asked);
    memset(e, 0, sizeof *e);
}

int dtx_recall_row_fits(int64_t queries, int64_t max_distractors, int64_t len) {
    return 2 * (2 * queries + max_distractors) <= len;
}

int64_t dtx_recall_training_row(int64_t queries, int64_t max_distractors, int64_t vocab, uint64_t h, int64_t len,
                                int32_t *row) {
    int32_t idx[DTX_RECALL_MAX_PAIRS];
    int64_t D = (int64_t)(dtx_mix64(h) % (uint64_t)(max_distractors + 1)), n = 2 * (2 * queries + D);
    fill_episode(queries, D, vocab, dtx_mix64(h ^ 0x726f77ULL), row, NULL, NULL, NULL, idx);
    for (int64_t i = n; i < len; i++) row[i] = 0;
    return D;
}
