/* Multi-query associative recall episodes (src/eval/recall.c): the layout
 * (pairs, then queries repeating asked pairs), distinct keys, value and key
 * ranges, the distractors being exactly the pairs never asked, determinism
 * by seed, the training row's padding and distractor spread, and the one-line
 * refusals. */
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "eval/recall.h"
#include "test.h"

static void check_episode(const dtx_recall_episode *e, int64_t Q, int64_t D, int64_t vocab) {
    int64_t P = Q + D, K = (vocab - 1) / 2;
    REQUIRE(e->n == 2 * (P + Q) && e->pairs == P && e->queries == Q);
    for (int64_t i = 0; i < P; i++) {
        CHECKF(e->tokens[2 * i] >= 1 && e->tokens[2 * i] <= K, "key %lld: %d", (long long)i, e->tokens[2 * i]);
        CHECKF(e->tokens[2 * i + 1] > K && e->tokens[2 * i + 1] < vocab, "value %lld: %d", (long long)i,
               e->tokens[2 * i + 1]);
        for (int64_t j = 0; j < i; j++) CHECKF(e->tokens[2 * i] != e->tokens[2 * j], "keys %lld and %lld", (long long)j, (long long)i);
    }
    int64_t asked = 0;
    for (int64_t i = 0; i < P; i++) asked += e->asked[i];
    CHECKF(asked == Q, "%lld pairs asked, %lld queries", (long long)asked, (long long)Q);
    for (int64_t q = 0; q < Q; q++) {
        int64_t t = e->query_pos[q], a = e->answer_pair[q];
        CHECK(t == 2 * (P + q));
        REQUIRE(a >= 0 && a < P && e->asked[a]);
        CHECK(e->tokens[t] == e->tokens[2 * a] && e->tokens[t + 1] == e->tokens[2 * a + 1]);
        for (int64_t r = 0; r < q; r++) CHECK(e->answer_pair[r] != a); /* each pair asked once */
    }
}

TEST(recall_episode_layout) {
    static const int64_t shapes[][3] = {{1, 0, 5}, {8, 0, 64}, {8, 24, 512}, {4, 60, 129}, {16, 200, 32000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (uint64_t seed = 1; seed <= 5; seed++) {
            dtx_recall_spec sp = {.queries = shapes[s][0], .distractors = shapes[s][1], .vocab = shapes[s][2], .seed = seed};
            dtx_recall_episode e;
            REQUIREF(dtx_recall_make(&sp, &e) == DTX_OK, "%s", dtx_last_error());
            check_episode(&e, sp.queries, sp.distractors, sp.vocab);
            dtx_recall_free(&e);
        }
}

TEST(recall_episode_is_its_seed_alone) {
    dtx_recall_spec a = {.queries = 8, .distractors = 16, .vocab = 300, .seed = 7}, b = a;
    dtx_recall_episode x, y, z;
    REQUIRE(dtx_recall_make(&a, &x) == DTX_OK && dtx_recall_make(&b, &y) == DTX_OK);
    CHECK(!memcmp(x.tokens, y.tokens, (size_t)x.n * sizeof *x.tokens));
    b.seed = 8;
    REQUIRE(dtx_recall_make(&b, &z) == DTX_OK);
    CHECK(memcmp(x.tokens, z.tokens, (size_t)x.n * sizeof *x.tokens) != 0);
    /* queried pairs lie anywhere among the context's, not at its start */
    int64_t late = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        dtx_recall_episode w;
        a.seed = seed;
        REQUIRE(dtx_recall_make(&a, &w) == DTX_OK);
        for (int64_t q = 0; q < w.queries; q++) late += w.answer_pair[q] >= a.queries;
        dtx_recall_free(&w);
    }
    CHECKF(late > 40, "only %lld of 160 queries asked a pair past the first %lld", (long long)late, (long long)a.queries);
    dtx_recall_free(&x), dtx_recall_free(&y), dtx_recall_free(&z);
}

TEST(recall_training_row_pads_and_spreads_distractors) {
    int64_t Q = 4, Dmax = 10, len = 2 * (2 * Q + Dmax) + 5, vocab = 100;
    REQUIRE(dtx_recall_row_fits(Q, Dmax, len) && !dtx_recall_row_fits(Q, Dmax, 2 * (2 * Q + Dmax) - 1));
    int32_t *row = malloc((size_t)len * sizeof *row), *again = malloc((size_t)len * sizeof *row);
    int seen[11] = {0};
    for (uint64_t h = 1; h <= 400; h++) {
        dtx_recall_training_row(Q, Dmax, vocab, h, len, row);
        int64_t n = 0;
        while (n < len && row[n] != 0) n++;
        for (int64_t i = n; i < len; i++) CHECK(row[i] == 0);
        REQUIREF(n % 2 == 0 && n >= 4 * Q && n <= 2 * (2 * Q + Dmax), "episode of %lld tokens", (long long)n);
        int64_t D = n / 2 - 2 * Q;
        seen[D]++;
        /* the last Q pairs repeat context pairs, each once */
        int64_t P = Q + D;
        for (int64_t q = 0; q < Q; q++) {
            int found = 0;
            for (int64_t i = 0; i < P; i++)
                found += row[2 * (P + q)] == row[2 * i] && row[2 * (P + q) + 1] == row[2 * i + 1];
            CHECKF(found == 1, "query %lld of row %llu matches %d pairs", (long long)q, (unsigned long long)h, found);
        }
        dtx_recall_training_row(Q, Dmax, vocab, h, len, again);
        CHECK(!memcmp(row, again, (size_t)len * sizeof *row));
    }
    for (int d = 0; d <= Dmax; d++) CHECKF(seen[d] > 10, "%d distractors in %d rows of 400", d, seen[d]);
    free(row), free(again);
}

TEST(recall_refuses_what_cannot_be_built) {
    dtx_recall_spec s = {.queries = 8, .distractors = 100, .vocab = 200, .seed = 1};
    dtx_recall_episode e;
    CHECK(dtx_recall_make(&s, &e) == DTX_ERR_ARG); /* 99 keys for 108 pairs */
    CHECK(strstr(dtx_last_error(), "99 distinct keys") != NULL);
    CHECK(dtx_recall_check(0, 4, 100) == DTX_ERR_ARG && strstr(dtx_last_error(), "0 queries"));
    CHECK(dtx_recall_check(2, -1, 100) == DTX_ERR_ARG && strstr(dtx_last_error(), "-1 distractors"));
    CHECK(dtx_recall_check(1000, 1100, 1 << 20) == DTX_ERR_ARG && strstr(dtx_last_error(), "at most 2048"));
    CHECK(dtx_recall_check(8, 91, 200) == DTX_OK);
}
