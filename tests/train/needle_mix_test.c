/* The training mixture (src/train/needle_mix.c): which rows are replaced,
 * that needle rows are whole documents with aligned targets, that copy rows
 * repeat their own first L tokens, that the choice is a function of (seed,
 * step, micro-batch, row) alone, and that the rates follow the fractions. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "difftx.h"
#include "test.h"
#include "eval/halluc.h"
#include "train/needle_mix.h"

enum { T = 400, B = 8 };
static int64_t VOCAB; /* what the tokenizer reached (the text is small) */

static const char *setup(const char **tok_path) {
    static char text[40000];
    size_t n = 0;
    static const char *const w[] = {"river", "market", "winter", "harvest", "letter", "bridge", "road", "bells"};
    for (int i = 0; i < 600 && n + 100 < sizeof text; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "The %s saw the %s near the %s. ", w[i % 8], w[(i / 8) % 8],
                              w[(i * 3) % 8]);
    /* made-up words, so that the tokenizer has the word tokens in-context episodes need */
    static char words[40000];
    size_t m = 0;
    for (int rep = 0; rep < 5; rep++)
        for (int i = 0; i < 800; i++)
            m += (size_t)snprintf(words + m, sizeof words - m, " %c%c%c", 'a' + i % 26, 'a' + (i / 26 + 3) % 26,
                                  'a' + (i / 26 / 26 + 5) % 26);
    const char *texts[] = {text, "The special magic Tokyo number is: 12345. What is the special magic number?",
                           words};
    dtx_tokenizer *tok = test_tokenizer_file(texts, 3, 1500, "mix_tok.txt", tok_path);
    if (!tok) return NULL;
    VOCAB = dtx_tokenizer_vocab_size(tok);
    dtx_tokenizer_free(tok);
    const char *hay = test_path("mix_hay.txt");
    return write_file(hay, text, n) == 0 ? hay : NULL;
}

static void fill(int32_t *in, int32_t *tg, uint64_t salt) {
    for (int64_t i = 0; i < B * T; i++) in[i] = (int32_t)((i * 7919 + (int64_t)salt * 31) % 500 + 1);
    for (int64_t i = 0; i < B * T; i++) tg[i] = (int32_t)((i * 13 + 5) % 500 + 1);
}

/* 1 needle document, 2 copy document (period in *L), 0 untouched, -1 broken. */
static int kind(const int32_t *in, const int32_t *tg, const int32_t *in0, const int32_t *tg0, int32_t bos,
                int64_t *Lout) {
    *Lout = 0;
    if (!memcmp(in, in0, T * sizeof *in) && !memcmp(tg, tg0, T * sizeof *tg)) return 0;
    if (in[0] == bos) {
        for (int64_t i = 0; i + 1 < T; i++)
            if (tg[i] != in[i + 1]) return -1;
        return 1;
    }
    for (int64_t L = 16; L <= T / 4; L++) {
        int ok = 1;
        for (int64_t i = 0; i < L && ok; i++) ok = in[i] >= 0 && in[i] < VOCAB;
        for (int64_t i = L; i < T && ok; i++) ok = in[i] == in[i - L];
        for (int64_t i = 0; i < T && ok; i++) ok = tg[i] == in[(i + 1) % L];
        if (ok) {
            *Lout = L;
            return 2;
        }
    }
    return -1;
}

TEST(train_needle_mix_rows_and_rates) {
    const char *tok_path = NULL, *hay = setup(&tok_path);
    REQUIRE(hay && tok_path);
    needle_mix x;
    REQUIREF(
        needle_mix_open(&x,
                        &(dtx_train_mix){
                            .needle_frac = 0.5, .copy_frac = 0.25, .needle_max = 3, .tokenizer = tok_path, .text = hay},
                        VOCAB, T) == DTX_OK,
        "%s", dtx_last_error());
    int32_t bos = dtx_tokenizer_token_id(x.tok, "<|bos|>");
    REQUIRE(bos >= 0);
    static int32_t in[B * T], tg[B * T], in0[B * T], tg0[B * T], again[B * T], period[B];
    int64_t counts[3] = {0, 0, 0};
    for (int64_t step = 1; step <= 60; step++) {
        fill(in0, tg0, (uint64_t)step);
        memcpy(in, in0, sizeof in);
        memcpy(tg, tg0, sizeof tg);
        REQUIREF(needle_mix_apply(&x, 7, step, 0, B, T, in, tg, period) == DTX_OK, "%s", dtx_last_error());
        for (int r = 0; r < B; r++) {
            int64_t L;
            int k = kind(in + r * T, tg + r * T, in0 + r * T, tg0 + r * T, bos, &L);
            REQUIREF(k >= 0, "step %lld row %d is neither a document, a copy nor untouched", (long long)step, r);
            CHECKF(period[r] == L, "step %lld row %d: period %d, the row repeats every %lld", (long long)step, r,
                   period[r], (long long)L);
            counts[k]++;
        }
        /* a function of (seed, step, micro, row) alone */
        memcpy(again, in0, sizeof again);
        static int32_t tg2[B * T];
        memcpy(tg2, tg0, sizeof tg2);
        REQUIRE(needle_mix_apply(&x, 7, step, 0, B, T, again, tg2, NULL) == DTX_OK);
        CHECK(!memcmp(again, in, sizeof in) && !memcmp(tg2, tg, sizeof tg));
    }
    /* 480 rows: the expected 240 / 120 / 120 with a wide margin */
    CHECKF(counts[1] > 180 && counts[1] < 300, "needle rows %lld of 480", (long long)counts[1]);
    CHECKF(counts[2] > 75 && counts[2] < 170, "copy rows %lld of 480", (long long)counts[2]);
    CHECKF(counts[0] > 75 && counts[0] < 170, "untouched rows %lld of 480", (long long)counts[0]);
    /* another seed chooses differently */
    fill(in0, tg0, 1);
    memcpy(in, in0, sizeof in);
    memcpy(tg, tg0, sizeof tg);
    memcpy(again, in0, sizeof again);
    static int32_t tg3[B * T];
    memcpy(tg3, tg0, sizeof tg3);
    REQUIRE(needle_mix_apply(&x, 7, 1, 0, B, T, in, tg, NULL) == DTX_OK);
    REQUIRE(needle_mix_apply(&x, 8, 1, 0, B, T, again, tg3, NULL) == DTX_OK);
    CHECK(memcmp(again, in, sizeof in) != 0);
    needle_mix_close(&x);
}

/* The later shares (in-context episodes, faithfulness documents, fact rows)
 * take rows only from those the needle and copy shares leave alone, so a run
 * that adds them keeps every needle and copy row as it was; with fact rows,
 * needle documents leave out the fact cities. */
TEST(train_needle_mix_later_shares) {
    const char *tok_path = NULL, *hay = setup(&tok_path);
    REQUIRE(hay && tok_path);
    needle_mix a, b, c;
    dtx_train_mix o = {.needle_frac = 0.3, .copy_frac = 0.2, .needle_max = 3, .tokenizer = tok_path, .text = hay};
    REQUIREF(needle_mix_open(&a, &o, VOCAB, T) == DTX_OK, "%s", dtx_last_error());
    o.icl_frac = 0.25, o.halluc_frac = 0.25;
    REQUIREF(needle_mix_open(&b, &o, VOCAB, T) == DTX_OK, "%s", dtx_last_error());
    o.icl_frac = 0.2, o.halluc_frac = 0.2, o.fact_frac = 0.1;
    REQUIREF(needle_mix_open(&c, &o, VOCAB, T) == DTX_OK, "%s", dtx_last_error());
    int32_t bos = dtx_tokenizer_token_id(a.tok, "<|bos|>"), sep = b.icl.sep;
    static int32_t in[3][B * T], tg[3][B * T], in0[B * T], tg0[B * T];
    int64_t untouched = 0, kept = 0, episodes = 0;
    for (int64_t step = 1; step <= 50; step++) {
        fill(in0, tg0, (uint64_t)step);
        needle_mix *x[3] = {&a, &b, &c};
        for (int k = 0; k < 3; k++) {
            memcpy(in[k], in0, sizeof in0);
            memcpy(tg[k], tg0, sizeof tg0);
            REQUIREF(needle_mix_apply(x[k], 5, step, 0, B, T, in[k], tg[k], NULL) == DTX_OK, "%s", dtx_last_error());
        }
        for (int r = 0; r < B; r++) {
            const int32_t *ra = in[0] + r * T, *rb = in[1] + r * T;
            int was_left = !memcmp(ra, in0 + r * T, T * sizeof *ra);
            if (!was_left) { /* a needle or copy row: the same with the later shares */
                CHECK(!memcmp(ra, rb, T * sizeof *ra) && !memcmp(tg[0] + r * T, tg[1] + r * T, T * sizeof *ra));
                kept++;
                continue;
            }
            untouched += !memcmp(rb, in0 + r * T, T * sizeof *rb);
            if (!memcmp(rb, in0 + r * T, T * sizeof *rb)) continue;
            CHECK(rb[0] == bos); /* an episode or a faithfulness document, targets aligned */
            for (int64_t i = 0; i + 1 < T; i++) CHECK(tg[1][r * T + i] == rb[i + 1]);
            int episode = 1; /* an episode row: the separator every DTX_ICL_DEMO tokens */
            for (int64_t i = 1 + DTX_ICL_LEN; i < T && episode; i += DTX_ICL_DEMO) episode = rb[i] == sep;
            episodes += episode;
        }
        /* with fact rows, no needle document names a fact city */
        for (int r = 0; r < B; r++) {
            char *t = NULL;
            size_t len = 0;
            REQUIRE(dtx_tokenizer_decode(c.tok, in[2] + r * T, T, &t, &len) == DTX_OK);
            if (strstr(t, "There is a special magic number"))
                for (int i = 0; i < DTX_FACT_CITIES; i++) {
                    char needle[96];
                    snprintf(needle, sizeof needle, "special magic %s number is:", dtx_needle_city(i));
                    CHECKF(!strstr(t, needle), "step %lld row %d holds fact city %s", (long long)step, r,
                           dtx_needle_city(i));
                }
            free(t);
        }
    }
    /* 400 rows: 200 needle or copy rows kept; of the other 200, half episodes, half documents, none left */
    CHECKF(kept > 150 && kept < 250, "%lld", (long long)kept);
    CHECKF(untouched == 0, "%lld rows left with the shares summing to 1", (long long)untouched);
    CHECKF(b.icl_rows > 60 && b.halluc_rows > 60 && b.icl_rows + b.halluc_rows == 400 - kept, "%lld %lld",
           (long long)b.icl_rows, (long long)b.halluc_rows);
    CHECKF(c.fact_rows > 15 && c.fact_rows < 75, "%lld fact rows of 400", (long long)c.fact_rows);
    CHECKF(episodes == b.icl_rows, "%lld rows look like episodes, %lld were made", (long long)episodes,
           (long long)b.icl_rows);
    needle_mix_close(&a);
    needle_mix_close(&b);
    needle_mix_close(&c);
    /* the shares may not add up to more than 1 */
    o.needle_frac = 0.6, o.copy_frac = 0.3, o.icl_frac = 0.2, o.halluc_frac = 0, o.fact_frac = 0;
    CHECK(needle_mix_open(&a, &o, VOCAB, T) == DTX_ERR_USAGE);
    needle_mix_close(&a);
}

/* The induction score's split: a copy row's positions before L are
 * "first", the rest "repeat"; other rows do not count. */
TEST(train_copy_score_split) {
    enum { BB = 3, TT = 40 };
    double loss[BB * TT];
    for (int i = 0; i < BB * TT; i++) loss[i] = i % TT < 20 ? 5.0 : 1.0;
    int32_t period[BB] = {20, 0, 25};
    copy_score c = {0};
    copy_score_add(&c, loss, period, BB, TT);
    CHECK(c.rows == 2 && c.n_first == 45 && c.n_repeat == 35);
    /* row 0: 20 x 5 first, 20 x 1 repeat; row 2: 20 x 5 + 5 x 1 first, 15 x 1 repeat */
    CHECK(fabs(c.first - (100 + 105)) < 1e-12 && fabs(c.repeat - 35) < 1e-12);
}

TEST(train_needle_mix_errors) {
    const char *tok_path = NULL, *hay = setup(&tok_path);
    REQUIRE(hay && tok_path);
    needle_mix x;
    CHECK(needle_mix_open(&x,
                          &(dtx_train_mix){
                              .needle_frac = 0.5, .copy_frac = 0, .needle_max = 3, .tokenizer = tok_path, .text = hay},
                          VOCAB + 1, T) != DTX_OK);
    CHECKF(strstr(dtx_last_error(), "tokens"), "%s", dtx_last_error());
    needle_mix_close(&x);
    CHECK(needle_mix_open(&x,
                          &(dtx_train_mix){
                              .needle_frac = 0.5, .copy_frac = 0, .needle_max = 3, .tokenizer = tok_path, .text = hay},
                          VOCAB, 40) != DTX_OK); /* too short a document */
    CHECKF(strstr(dtx_last_error(), "too short"), "%s", dtx_last_error());
    needle_mix_close(&x);
    CHECK(needle_mix_open(&x,
                          &(dtx_train_mix){.needle_frac = 0.5,
                                             .copy_frac = 0,
                                             .needle_max = 3,
                                             .tokenizer = test_path("missing.txt"),
                                             .text = hay},
                          VOCAB, T) != DTX_OK);
    needle_mix_close(&x);
    /* off: nothing opened, rows untouched */
    REQUIRE(needle_mix_open(
                &x,
                &(dtx_train_mix){.needle_frac = 0, .copy_frac = 0, .needle_max = 3, .tokenizer = NULL, .text = NULL},
                VOCAB, T) == DTX_OK);
    static int32_t in[B * T], tg[B * T], in0[B * T];
    fill(in, tg, 3);
    memcpy(in0, in, sizeof in);
    CHECK(needle_mix_apply(&x, 1, 1, 0, B, T, in, tg, NULL) == DTX_OK && !memcmp(in, in0, sizeof in));
    needle_mix_close(&x);
}
