/* Synthetic needle documents in training batches (needle_mix.h). */
#include <stdlib.h>
#include <string.h>

#include "train/needle_mix.h"
#include "common/common.h"
#include "eval/halluc.h"
#include "eval/recall.h"

dtx_status needle_mix_open(needle_mix *x, const dtx_train_mix *o, int64_t vocab_size, int64_t T) {
    memset(x, 0, sizeof *x);
    x->o = *o;
    x->vocab = vocab_size;
    const double frac[6] = {o->needle_frac, o->copy_frac, o->icl_frac, o->halluc_frac, o->fact_frac, o->recall_frac};
    static const char *const name[6] = {"needle_frac", "copy_frac", "icl_frac", "halluc_frac", "fact_frac",
                                        "recall_frac"};
    double sum = 0;
    for (int i = 0; i < 6; i++) {
        if (!(frac[i] >= 0 && frac[i] <= 1))
            return dtx_fail(DTX_ERR_USAGE, "the mixture's %s is %g, not a share in [0, 1]", name[i], frac[i]);
        sum += frac[i];
    }
    if (sum > 1 + 1e-12) return dtx_fail(DTX_ERR_USAGE, "the mixture's shares add up to %g, more than 1", sum);
    if (o->recall_frac > 0) {
        if (dtx_recall_check(o->recall_queries, o->recall_distractors, vocab_size))
            return dtx_fail(DTX_ERR_USAGE, "%s", dtx_last_error());
        if (!dtx_recall_row_fits(o->recall_queries, o->recall_distractors, T + 1))
            return dtx_fail(DTX_ERR_USAGE,
                            "a recall episode of %lld queries and %lld distractors has %lld tokens, more than a row's "
                            "%lld (--seq + 1)",
                            (long long)o->recall_queries, (long long)o->recall_distractors,
                            (long long)(2 * (2 * o->recall_queries + o->recall_distractors)), (long long)(T + 1));
    }
    int need_tok = o->needle_frac > 0 || o->icl_frac > 0 || o->halluc_frac > 0 || o->fact_frac > 0;
    int need_text = o->needle_frac > 0 || o->halluc_frac > 0;
    if (need_text && (o->needle_max < 1 || o->needle_max > DTX_NEEDLE_MAX))
        return dtx_fail(DTX_ERR_USAGE, "the mixture's needle_max is %lld, not in [1, %d]", (long long)o->needle_max,
                        DTX_NEEDLE_MAX);
    if (!need_tok) return DTX_OK;
    if (!o->tokenizer || (need_text && !o->text)) {
        const char *share = o->needle_frac > 0   ? "needle_frac"
                            : o->halluc_frac > 0 ? "halluc_frac"
                            : o->icl_frac > 0    ? "icl_frac"
                                                 : "fact_frac";
        return dtx_fail(DTX_ERR_USAGE, "the mixture's %s needs a tokenizer%s (difftx train: --needle-tokenizer%s)",
                        share, need_text ? " and a haystack text" : "", need_text ? ", --needle-text" : "");
    }
    dtx_status st = dtx_tokenizer_load(&x->tok, o->tokenizer);
    if (st) return st;
    if (dtx_tokenizer_vocab_size(x->tok) != vocab_size)
        return dtx_fail(DTX_ERR_ARG, "--needle-tokenizer %s has %lld tokens, the model %lld", o->tokenizer,
                        (long long)dtx_tokenizer_vocab_size(x->tok), (long long)vocab_size);
    if (o->icl_frac > 0 && (st = dtx_icl_vocab_init(&x->icl, x->tok))) return st;
    if (!need_text) return DTX_OK;
    const char *paths[1] = {o->text};
    if ((st = dtx_needle_source_open(&x->src, x->tok, paths, 1))) return st;
    /* The longest document must fit: make one now rather than fail mid-run. */
    int n = (int)o->needle_max;
    dtx_needle_spec spec = {.length = T + 1, .n_needles = n, .n_queries = n, .depth = 0.5, .seed = 1, .with_answer = 1,
                            .city_lo = o->fact_frac > 0 ? DTX_FACT_CITIES : 0};
    dtx_needle_prompt p;
    if (o->needle_frac > 0) {
        if ((st = dtx_needle_make(x->src, &spec, &p))) return st;
        dtx_needle_prompt_free(&p);
    }
    if (o->halluc_frac > 0) {
        int32_t *row = malloc((size_t)(T + 1) * sizeof *row);
        if (!row) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
        st = DTX_OK;
        for (uint64_t seed = 1; seed <= 64 && !st; seed++) /* a few, to meet the longest number of needles */
            st = dtx_halluc_training_doc(x->src, x->tok, seed, T + 1, n, row);
        free(row);
        if (st) return st;
    }
    return DTX_OK;
}

/* A copy document: L random token ids (16 <= L <= T/4) repeated until the
 * row is full, so that every token after the first L is predictable only by
 * looking back L tokens. This is the plain induction that retrieval builds
 * on; small models learn it from prose or needle documents alone far too
 * slowly (docs/reproduce.md), and random ids leave no other way to lower
 * the loss. */
static int64_t copy_period(int64_t T, uint64_t h);
static void repeat_row(int32_t *in, int32_t *tg, int64_t T, int64_t vocab, uint64_t h) {
    int64_t L = copy_period(T, h);
    for (int64_t i = 0; i < L; i++) {
        h = dtx_mix64(h);
        in[i] = (int32_t)(h % (uint64_t)vocab);
    }
    for (int64_t i = L; i < T; i++) in[i] = in[i - L];
    for (int64_t i = 0; i < T; i++) tg[i] = in[(i + 1) % L]; /* the sequence is w[j mod L] */
}

void needle_mix_close(needle_mix *x) {
    dtx_icl_vocab_free(&x->icl);
    dtx_needle_source_free(x->src);
    dtx_tokenizer_free(x->tok);
    memset(x, 0, sizeof *x);
}

/* The period repeat_row gives a row of hash h (the same draw). */
static int64_t copy_period(int64_t T, uint64_t h) {
    int64_t hi = T / 4 > 16 ? T / 4 : 16, L = 16 + (int64_t)(h % (uint64_t)(hi - 16 + 1));
    return L > T ? T : L;
}

void copy_score_add(copy_score *c, const double *loss, const int32_t *period, int64_t B, int64_t T) {
    for (int64_t r = 0; r < B; r++) {
        int64_t L = period[r];
        if (L <= 0) continue;
        c->rows++;
        for (int64_t t = 0; t < T; t++) {
            if (t < L) c->first += loss[r * T + t], c->n_first++;
            else c->repeat += loss[r * T + t], c->n_repeat++;
        }
    }
}

/* A row of the later shares (icl, faithfulness, facts, recall): T + 1
 * tokens, split into inputs and targets. */
static dtx_status other_row(needle_mix *x, int which, uint64_t h, int64_t T, int32_t *in, int32_t *tg) {
    int32_t *row = malloc((size_t)(T + 1) * sizeof *row);
    if (!row) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    dtx_status st = DTX_OK;
    if (which == 0) {
        dtx_icl_training_row(&x->icl, h, T + 1, row);
        x->icl_rows++;
    } else if (which == 1) {
        st = dtx_halluc_training_doc(x->src, x->tok, h, T + 1, (int)x->o.needle_max, row);
        x->halluc_rows++;
    } else if (which == 2) {
        st = dtx_halluc_fact_row(x->tok, h, T + 1, row);
        x->fact_rows++;
    } else {
        int64_t Q = x->o.recall_queries, D = dtx_recall_training_row(Q, x->o.recall_distractors, x->vocab, h, T + 1, row);
        memcpy(in, row, (size_t)T * sizeof *row);
        memcpy(tg, row + 1, (size_t)T * sizeof *row);
        if (!x->o.recall_all_targets) { /* only the answers graded: the target after each query's key */
            for (int64_t i = 0; i < T; i++) tg[i] = DTX_TARGET_IGNORE;
            for (int64_t q = 0; q < Q; q++) tg[2 * (Q + D + q)] = row[2 * (Q + D + q) + 1];
        }
        x->recall_rows++;
        free(row);
        return DTX_OK;
    }
    if (!st) {
        memcpy(in, row, (size_t)T * sizeof *row);
        memcpy(tg, row + 1, (size_t)T * sizeof *row);
    }
    free(row);
    return st;
}

dtx_status needle_mix_apply(needle_mix *x, uint64_t seed, int64_t step, int64_t micro, int64_t B, int64_t T,
                            int32_t *inputs, int32_t *targets, int32_t *period) {
    if (period) memset(period, 0, (size_t)B * sizeof *period);
    if (x->o.needle_frac <= 0 && x->o.copy_frac <= 0 && x->o.icl_frac <= 0 && x->o.halluc_frac <= 0 &&
        x->o.fact_frac <= 0 && x->o.recall_frac <= 0)
        return DTX_OK;
    for (int64_t r = 0; r < B; r++) {
        uint64_t h = dtx_mix64(dtx_mix64(dtx_mix64(seed ^ 0x6e65656431ULL) ^ (uint64_t)step) ^
                                ((uint64_t)micro << 32 | (uint64_t)r));
        double u = (double)(h >> 11) * 0x1p-53;
        uint64_t h2 = dtx_mix64(h);
        if (u >= x->o.needle_frac) {
            double edge = x->o.needle_frac + x->o.copy_frac;
            if (u < edge) {
                repeat_row(inputs + r * T, targets + r * T, T, x->vocab, h2);
                if (period) period[r] = (int32_t)copy_period(T, h2);
                x->copies++;
                continue;
            }
            const double share[4] = {x->o.icl_frac, x->o.halluc_frac, x->o.fact_frac, x->o.recall_frac};
            for (int k = 0; k < 4; k++) {
                if (share[k] > 0 && u < edge + share[k]) {
                    dtx_status st = other_row(x, k, dtx_mix64(h2), T, inputs + r * T, targets + r * T);
                    if (st) return st;
                    break;
                }
                edge += share[k];
            }
            continue;
        }
        int n = 1 + (int)(h2 % (uint64_t)x->o.needle_max);
        dtx_needle_spec spec = {.length = T + 1, .n_needles = n, .n_queries = n /* every needle asked */, .depth = -1,
                                .seed = dtx_mix64(h2), .with_answer = 1,
                                .city_lo = x->o.fact_frac > 0 ? DTX_FACT_CITIES : 0};
        dtx_needle_prompt p;
        dtx_status st = dtx_needle_make(x->src, &spec, &p);
        if (st) return st;
        if (p.n != T + 1) {
            dtx_needle_prompt_free(&p);
            return dtx_fail(DTX_ERR_ARG, "a needle document has %lld tokens, not %lld", (long long)p.n,
                            (long long)(T + 1));
        }
        memcpy(inputs + r * T, p.tokens, (size_t)T * sizeof(int32_t));
        memcpy(targets + r * T, p.tokens + 1, (size_t)T * sizeof(int32_t));
        dtx_needle_prompt_free(&p);
        x->documents++;
    }
    return DTX_OK;
}
