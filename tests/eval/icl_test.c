/* In-context classification episodes (src/eval/icl.c): the token pools, the
 * episode draw (distinct labels, disjoint prototypes, held-out features),
 * the example noise rate, the training row's layout and determinism, the
 * constrained pick and the round arithmetic. A tokenizer is trained here on
 * text of 900 made-up words, so its word tokens are known to be many. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "eval/icl.h"
#include "test.h"

static dtx_tokenizer *tok;
static dtx_icl_vocab voc;

/* Word i: two to four letters from i in base 26, so 900 words are distinct. */
static void word(int i, char *out) {
    int k = 0;
    out[k++] = (char)('a' + i % 26);
    i /= 26;
    out[k++] = (char)('a' + (i + 7) % 26);
    for (i /= 26; i > 0; i /= 26) out[k++] = (char)('a' + i % 26);
    out[k] = '\0';
}

static int setup(void) {
    if (tok) return 0;
    size_t cap = 200000, n = 0;
    char *text = malloc(cap), w[8];
    if (!text) return -1;
    for (int rep = 0; rep < 6; rep++)
        for (int i = 0; i < 900 && n + 16 < cap; i++) {
            word(i * 7 % 900, w);
            n += (size_t)snprintf(text + n, cap - n, " %s%s", w, i % 10 == 9 ? ":\n" : "");
        }
    const char *texts[] = {text};
    const char *path = NULL;
    tok = test_tokenizer_file(texts, 1, 1400, "icl_tok.txt", &path);
    free(text);
    if (!tok) return -1;
    return dtx_icl_vocab_init(&voc, tok) == DTX_OK ? 0 : -1;
}

static int in_pool(int k, int32_t id) {
    for (int64_t i = 0; i < voc.pool_n[k]; i++)
        if (voc.pool[k][i] == id) return 1;
    return 0;
}

TEST(icl_pools_are_disjoint_word_tokens) {
    REQUIREF(setup() == 0, "%s", dtx_last_error());
    for (int k = 0; k < 3; k++) {
        CHECKF(voc.pool_n[k] >= DTX_ICL_TRAIN_MAX_CLASSES * DTX_ICL_PROTO / (k ? 1 : DTX_ICL_PROTO), "pool %d: %lld",
               k, (long long)voc.pool_n[k]);
        for (int64_t i = 0; i < voc.pool_n[k]; i++) {
            size_t len = 0;
            const char *b = dtx_tokenizer_token_bytes(tok, voc.pool[k][i], &len);
            REQUIRE(b && len >= 3 && b[0] == ' ');
            for (size_t j = 1; j < len; j++) CHECK(b[j] >= 'a' && b[j] <= 'z');
            for (int o = 0; o < k; o++) CHECK(!in_pool(o, voc.pool[k][i]));
        }
    }
    /* rank % 3 splits them: the pools differ in size by at most one */
    CHECK(voc.pool_n[0] - voc.pool_n[2] <= 1 && voc.pool_n[0] >= voc.pool_n[2]);
    size_t len = 0;
    const char *b = dtx_tokenizer_token_bytes(tok, voc.sep, &len);
    CHECK(b && len == 1 && b[0] == ':');
    b = dtx_tokenizer_token_bytes(tok, voc.newline, &len);
    CHECK(b && len == 1 && b[0] == '\n');
    CHECK(voc.bos == dtx_tokenizer_token_id(tok, "<|bos|>"));
}

TEST(icl_task_labels_distinct_prototypes_disjoint) {
    REQUIRE(setup() == 0);
    for (int held = 0; held < 2; held++)
        for (uint64_t seed = 1; seed <= 20; seed++) {
            dtx_rng r;
            dtx_rng_seed(&r, seed);
            dtx_icl_task t;
            int C = 2 + (int)(seed % 15);
            REQUIRE(dtx_icl_task_draw(&voc, C, held, &r, &t) == DTX_OK);
            for (int c = 0; c < C; c++) {
                CHECK(in_pool(0, t.label[c]));
                for (int d = 0; d < c; d++) CHECK(t.label[c] != t.label[d]);
                for (int i = 0; i < DTX_ICL_PROTO; i++) {
                    CHECK(in_pool(held ? 2 : 1, t.proto[c][i]));
                    for (int d = 0; d <= c; d++)
                        for (int j = 0; j < (d == c ? i : DTX_ICL_PROTO); j++) CHECK(t.proto[c][i] != t.proto[d][j]);
                }
            }
        }
    dtx_rng r;
    dtx_rng_seed(&r, 1);
    dtx_icl_task t;
    CHECK(dtx_icl_task_draw(&voc, 0, 0, &r, &t) == DTX_ERR_ARG);
    CHECK(dtx_icl_task_draw(&voc, dtx_icl_max_classes(&voc, 1) + 1, 1, &r, &t) == DTX_ERR_ARG);
}

TEST(icl_example_noise_rate) {
    REQUIRE(setup() == 0);
    dtx_rng r;
    dtx_rng_seed(&r, 3);
    dtx_icl_task t;
    REQUIRE(dtx_icl_task_draw(&voc, 6, 1, &r, &t) == DTX_OK);
    int64_t from_proto = 0, total = 0;
    for (int k = 0; k < 4000; k++) {
        int32_t x[DTX_ICL_LEN];
        int c = k % 6;
        dtx_icl_example(&voc, &t, c, &r, x);
        for (int i = 0; i < DTX_ICL_LEN; i++) {
            int p = 0;
            for (int j = 0; j < DTX_ICL_PROTO; j++) p |= x[i] == t.proto[c][j];
            CHECK(p || in_pool(2, x[i]));
            from_proto += p;
            total++;
        }
    }
    /* 1 - noise, plus the noise that lands on the class's own prototype */
    double expect = 1 - DTX_ICL_NOISE + DTX_ICL_NOISE * DTX_ICL_PROTO / (double)voc.pool_n[2];
    double got = (double)from_proto / (double)total, sd = sqrt(expect * (1 - expect) / (double)total);
    CHECKF(fabs(got - expect) < 5 * sd, "prototype share %.4f, expected %.4f", got, expect);
}

TEST(icl_training_row_layout_and_determinism) {
    REQUIRE(setup() == 0);
    enum { N = 301 };
    int32_t a[N], b[N], c[N];
    for (uint64_t seed = 1; seed <= 30; seed++) {
        dtx_icl_training_row(&voc, seed, N, a);
        dtx_icl_training_row(&voc, seed, N, b);
        dtx_icl_training_row(&voc, seed + 1000, N, c);
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK(memcmp(a, c, sizeof a) != 0);
        CHECK(a[0] == voc.bos);
        int32_t labels[DTX_ICL_TRAIN_MAX_CLASSES + 1];
        int n_labels = 0;
        for (int64_t i = 1; i < N; i++) {
            int64_t k = (i - 1) % DTX_ICL_DEMO;
            if (k < DTX_ICL_LEN) CHECK(in_pool(1, a[i]));
            else if (k == DTX_ICL_LEN) CHECK(a[i] == voc.sep);
            else if (k == DTX_ICL_LEN + 2) CHECK(a[i] == voc.newline);
            else {
                CHECK(in_pool(0, a[i]));
                int known = 0;
                for (int j = 0; j < n_labels; j++) known |= labels[j] == a[i];
                if (!known && n_labels <= DTX_ICL_TRAIN_MAX_CLASSES) labels[n_labels++] = a[i];
            }
        }
        CHECKF(n_labels <= DTX_ICL_TRAIN_MAX_CLASSES, "%d labels", n_labels);
    }
}

TEST(icl_constrained_pick) {
    dtx_icl_task t = {.n_classes = 3, .label = {5, 2, 7}};
    dtx_real logits[10] = {0, 0, 1.0f, 0, 0, 0.5f, 0, 1.0f, 9.0f, 0};
    /* id 8 has the largest logit but is no label; labels 2 and 7 tie: the lower class (1) */
    CHECK(dtx_icl_pick(&t, logits) == 1);
    logits[7] = 1.5f;
    CHECK(dtx_icl_pick(&t, logits) == 2);
    logits[5] = 3.0f;
    CHECK(dtx_icl_pick(&t, logits) == 0);
    int32_t x[DTX_ICL_LEN] = {11, 12, 13}, d[DTX_ICL_DEMO], q[DTX_ICL_QUERY];
    dtx_icl_vocab v = {.sep = 40, .newline = 41};
    dtx_icl_put_demo(&v, &t, x, 2, d);
    dtx_icl_put_query(&v, x, q);
    const int32_t want_d[DTX_ICL_DEMO] = {11, 12, 13, 40, 7, 41}, want_q[DTX_ICL_QUERY] = {11, 12, 13, 40};
    CHECK(memcmp(d, want_d, sizeof d) == 0 && memcmp(q, want_q, sizeof q) == 0);
}

TEST(icl_rounds_fit) {
    /* 1 BOS + r x 6 classes x 6 tokens + a 4-token query */
    CHECK(dtx_icl_max_rounds(6, 512) == 14);    /* 1 + 504 + 4 = 509 */
    CHECK(dtx_icl_max_rounds(6, 41) == 1);      /* exactly 1 + 36 + 4 */
    CHECK(dtx_icl_max_rounds(6, 40) == 0);
    CHECK(dtx_icl_max_rounds(16, 512) == 5);
    CHECK(dtx_icl_max_rounds(0, 512) == 0);
}

TEST(icl_vocab_refuses_a_tokenizer_without_words) {
    const char *texts[] = {"1234 5678: 90\n12 34 56: 78\n"};
    const char *path = NULL;
    dtx_tokenizer *t = test_tokenizer_file(texts, 1, 300, "icl_small_tok.txt", &path);
    REQUIRE(t);
    dtx_icl_vocab v;
    CHECK(dtx_icl_vocab_init(&v, t) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "word tokens") != NULL, "%s", dtx_last_error());
    dtx_tokenizer_free(t);
}
