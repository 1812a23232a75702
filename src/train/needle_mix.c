/* Synthetic needle documents in training batches (needle_mix.h). */
#include <string.h>

#include "train/needle_mix.h"
#include "common/common.h"

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

dtx_status needle_mix_open(needle_mix *x, double frac, double copy_frac, int64_t max_needles,
                           const char *tokenizer, const char *text, int64_t vocab_size, int64_t T) {
    memset(x, 0, sizeof *x);
    x->frac = frac;
    x->copy_frac = copy_frac;
    x->vocab = vocab_size;
    x->max_needles = max_needles;
    if (frac <= 0) return DTX_OK;
    dtx_status st = dtx_tokenizer_load(&x->tok, tokenizer);
    if (st) return st;
    if (dtx_tokenizer_vocab_size(x->tok) != vocab_size)
        return dtx_fail(DTX_ERR_ARG, "--needle-tokenizer %s has %lld tokens, the model %lld", tokenizer,
                        (long long)dtx_tokenizer_vocab_size(x->tok), (long long)vocab_size);
    const char *paths[1] = {text};
    if ((st = dtx_needle_source_open(&x->src, x->tok, paths, 1))) return st;
    /* The longest document must fit: make one now rather than fail mid-run. */
    dtx_needle_spec spec = {.length = T + 1, .n_needles = (int)max_needles, .n_queries = (int)max_needles, .depth = 0.5,
                            .seed = 1, .with_answer = 1};
    dtx_needle_prompt p;
    if ((st = dtx_needle_make(x->src, &spec, &p))) return st;
    dtx_needle_prompt_free(&p);
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
        h = splitmix64(h);
        in[i] = (int32_t)(h % (uint64_t)vocab);
    }
    for (int64_t i = L; i < T; i++) in[i] = in[i - L];
    for (int64_t i = 0; i < T; i++) tg[i] = in[(i + 1) % L]; /* the sequence is w[j mod L] */
}

void needle_mix_close(needle_mix *x) {
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

dtx_status needle_mix_apply(needle_mix *x, uint64_t seed, int64_t step, int64_t micro, int64_t B, int64_t T,
                            int32_t *inputs, int32_t *targets, int32_t *period) {
    if (period) memset(period, 0, (size_t)B * sizeof *period);
    if (x->frac <= 0 && x->copy_frac <= 0) return DTX_OK;
    for (int64_t r = 0; r < B; r++) {
        uint64_t h = splitmix64(splitmix64(splitmix64(seed ^ 0x6e65656431ULL) ^ (uint64_t)step) ^
                                ((uint64_t)micro << 32 | (uint64_t)r));
        double u = (double)(h >> 11) * 0x1p-53;
        uint64_t h2 = splitmix64(h);
        if (u >= x->frac) {
            if (u < x->frac + x->copy_frac) {
                repeat_row(inputs + r * T, targets + r * T, T, x->vocab, h2);
                if (period) period[r] = (int32_t)copy_period(T, h2);
                x->copies++;
            }
            continue;
        }
        int n = 1 + (int)(h2 % (uint64_t)x->max_needles);
        dtx_needle_spec spec = {.length = T + 1, .n_needles = n, .n_queries = n /* every needle asked */, .depth = -1,
                                .seed = splitmix64(h2), .with_answer = 1};
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
