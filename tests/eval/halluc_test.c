/* Contextual faithfulness prompts and rows (src/eval/halluc.c) and the
 * needle spec's fields behind them: the facts, the fact rows' text, the
 * faithfulness documents' exact length and text, each evaluation prompt's
 * context and questions, and the scorers on hand-made answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "eval/halluc.h"
#include "test.h"

static dtx_tokenizer *tok;
static dtx_needle_source *src;

static int setup(void) {
    if (src) return 0;
    static const char *const w[] = {"river", "market", "winter", "harvest", "letter", "bridge", "road", "bells"};
    static char text[60000];
    size_t n = 0;
    for (int i = 0; i < 700 && n + 100 < sizeof text; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "The %s saw the %s near the %s. ", w[i % 8], w[(i / 8) % 8],
                              w[(i * 3) % 8]);
    const char *texts[] = {text, "The special magic Tokyo number is: 12345. What is the special magic number? "
                                 "List every special magic number. none"};
    const char *tok_path = NULL;
    tok = test_tokenizer_file(texts, 2, 700, "halluc_tok.txt", &tok_path);
    const char *hay = test_path("halluc_hay.txt");
    if (!tok || write_file(hay, text, n) != 0) return -1;
    return dtx_needle_source_open(&src, tok, &hay, 1) == DTX_OK ? 0 : -1;
}

static char *text_of(const int32_t *ids, int64_t n) {
    char *s = NULL;
    size_t len = 0;
    return dtx_tokenizer_decode(tok, ids, n, &s, &len) == DTX_OK ? s : NULL;
}

static int is_fact_city(const char *s, size_t len) {
    for (int i = 0; i < DTX_FACT_CITIES; i++) {
        const char *c = dtx_needle_city(i);
        if (strlen(c) == len && memcmp(c, s, len) == 0) return 1;
    }
    return 0;
}

/* Every "special magic X number" in text names a city outside the facts. */
static int no_fact_city(const char *text) {
    const char *key = "special magic ";
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        const char *b = p + strlen(key), *e = strstr(b, " number");
        if (e && !memchr(b, '\n', (size_t)(e - b)) && is_fact_city(b, (size_t)(e - b))) return 0;
    }
    return 1;
}

TEST(halluc_facts_fixed_five_digits) {
    char a[8], b[8];
    for (int i = 0; i < DTX_FACT_CITIES; i++) {
        dtx_fact_number(i, a);
        dtx_fact_number(i, b);
        CHECK(strcmp(a, b) == 0 && strlen(a) == 5 && a[0] != '0');
    }
    dtx_fact_number(0, a);
    dtx_fact_number(1, b);
    CHECK(strcmp(a, b) != 0);
    CHECK(DTX_FACT_CITIES < dtx_needle_num_cities() - DTX_NEEDLE_MAX - 1);
}

TEST(halluc_fact_row_text) {
    REQUIRE(setup() == 0);
    enum { N = 200 };
    int32_t row[N], again[N];
    REQUIRE(dtx_halluc_fact_row(tok, 5, N, row) == DTX_OK);
    REQUIRE(dtx_halluc_fact_row(tok, 5, N, again) == DTX_OK);
    CHECK(memcmp(row, again, sizeof row) == 0);
    CHECK(row[0] == dtx_tokenizer_token_id(tok, "<|bos|>"));
    char *t = text_of(row + 1, N - 1);
    REQUIRE(t);
    /* whole QA lines, each a fact city and its number */
    int lines = 0;
    for (char *p = t; (p = strstr(p, "\nWhat is the special magic ")) != NULL; p++) {
        char city[64], city2[64], num[16];
        char *nl = strchr(p + 1, '\n');
        if (!nl) break; /* the last one is cut */
        if (sscanf(p, "\nWhat is the special magic %63[^?]? The special magic %63[^\n]", city, city2) != 2) continue;
        char *e = strstr(city, " number");
        REQUIRE(e);
        *e = '\0';
        int k = -1;
        for (int i = 0; i < DTX_FACT_CITIES; i++)
            if (strcmp(city, dtx_needle_city(i)) == 0) k = i;
        CHECKF(k >= 0, "%s is no fact city", city);
        if (k < 0) continue;
        char want[96];
        dtx_fact_number(k, num);
        snprintf(want, sizeof want, "%s number is %s", city, num);
        CHECKF(strncmp(city2, want, strlen(want)) == 0, "'%s' vs '%s'", city2, want);
        lines++;
    }
    CHECKF(lines >= 4, "%d lines", lines);
    free(t);
}

TEST(halluc_training_doc_exact_and_true) {
    REQUIRE(setup() == 0);
    for (uint64_t seed = 1; seed <= 40; seed++) {
        enum { N = 420 };
        int32_t row[N];
        REQUIREF(dtx_halluc_training_doc(src, tok, seed, N, 6, row) == DTX_OK, "%s", dtx_last_error());
        char *t = text_of(row, N);
        REQUIRE(t);
        CHECK(no_fact_city(t));
        char *list = strstr(t, "\nList every special magic number. The special magic numbers are ");
        REQUIRE(list);
        /* the listed numbers are the needles' in context order */
        char expect[256] = "";
        const char *key = " number is: ";
        for (const char *p = strstr(t, key); p && p < list; p = strstr(p + 1, key)) {
            size_t k = strlen(expect);
            snprintf(expect + k, sizeof expect - k, "%s%.5s", k ? ", " : "", p + strlen(key));
        }
        const char *ans = list + strlen("\nList every special magic number. The special magic numbers are ");
        CHECKF(strncmp(ans, expect, strlen(expect)) == 0 && ans[strlen(expect)] == '\n', "'%.60s' vs '%s'", ans,
               expect);
        /* each question: "none" exactly when its city is not in the context */
        int questions = 0;
        for (char *q = strstr(ans, "\nWhat is the special magic "); q;
             q = strstr(q + 1, "\nWhat is the special magic ")) {
            char city[64], answer[16];
            if (sscanf(q, "\nWhat is the special magic %63[^?]", city) != 1) continue;
            *strstr(city, " number") = '\0';
            char *is = strstr(q, " number is ");
            REQUIRE(is && sscanf(is + 11, "%15[^\n]", answer) == 1);
            char needle[128];
            snprintf(needle, sizeof needle, "The special magic %s number is: ", city);
            char *in_ctx = strstr(t, needle);
            if (in_ctx && in_ctx < list) CHECK(strncmp(answer, in_ctx + strlen(needle), 5) == 0);
            else CHECKF(strcmp(answer, "none") == 0, "%s: '%s'", city, answer);
            questions++;
        }
        CHECK(questions == 2);
        free(t);
    }
}

TEST(halluc_eval_prompts) {
    REQUIRE(setup() == 0);
    for (uint64_t seed = 1; seed <= 10; seed++)
        for (int kind = 0; kind <= DTX_HALLUC_ABSENT; kind++) {
            dtx_halluc_prompt p;
            REQUIREF(dtx_halluc_make(src, tok, (dtx_halluc_kind)kind, 300, 3, seed, &p) == DTX_OK, "%s",
                     dtx_last_error());
            CHECK(p.n <= 300 && p.context_end + p.question_n[0] == p.n);
            CHECK(memcmp(p.tokens + p.context_end, p.question[0], (size_t)p.question_n[0] * sizeof(int32_t)) == 0);
            for (int q = 0; q < p.n_questions; q++) CHECK(p.context_end + p.question_n[q] <= 300);
            char *ctx = text_of(p.tokens, p.context_end), *q0 = text_of(p.question[0], p.question_n[0]);
            REQUIRE(ctx && q0);
            char needle[128];
            snprintf(needle, sizeof needle, "The special magic %s number is: ", p.city);
            switch (kind) {
            case DTX_HALLUC_CONTRADICT: {
                CHECK(is_fact_city(p.city, strlen(p.city)));
                char *at = strstr(ctx, needle);
                REQUIRE(at);
                CHECK(strncmp(at + strlen(needle), p.answer[0], 5) == 0);
                CHECK(strcmp(p.answer[0], p.prior) != 0 && strlen(p.prior) == 5);
                CHECK(strstr(q0, p.city) != NULL);
                break;
            }
            case DTX_HALLUC_LIST:
                CHECK(p.n_needles == 3 && strstr(q0, "List every special magic number") != NULL);
                for (int i = 0; i < 3; i++) CHECK(strstr(ctx, p.number[i]) != NULL);
                break;
            default: {
                CHECK(p.n_questions == 2 && strstr(ctx, needle) == NULL && strcmp(p.answer[0], "none") == 0);
                char *q1 = text_of(p.question[1], p.question_n[1]);
                REQUIRE(q1);
                char city1[64];
                REQUIRE(sscanf(q1, "\nWhat is the special magic %63[^?]", city1) == 1);
                *strstr(city1, " number") = '\0';
                snprintf(needle, sizeof needle, "The special magic %s number is: %s", city1, p.answer[1]);
                CHECK(strstr(ctx, needle) != NULL);
                free(q1);
            }
            }
            if (kind != DTX_HALLUC_CONTRADICT) CHECK(no_fact_city(ctx));
            free(ctx);
            free(q0);
            dtx_halluc_prompt p2;
            REQUIRE(dtx_halluc_make(src, tok, (dtx_halluc_kind)kind, 300, 3, seed, &p2) == DTX_OK);
            CHECK(p2.n == p.n && memcmp(p2.tokens, p.tokens, (size_t)p.n * sizeof(int32_t)) == 0);
            dtx_halluc_prompt_free(&p2);
            dtx_halluc_prompt_free(&p);
        }
    dtx_halluc_prompt p;
    CHECK(dtx_halluc_make(src, tok, DTX_HALLUC_LIST, 30, 3, 1, &p) == DTX_ERR_ARG); /* too short */
    CHECK(p.tokens == NULL);
}

TEST(halluc_scorers_on_hand_made_answers) {
    CHECK(dtx_halluc_classify("12345", 5, "12345", "67890") == DTX_FAITHFUL);
    CHECK(dtx_halluc_classify(" 67890.", 7, "12345", "67890") == DTX_PRIOR);
    CHECK(dtx_halluc_classify("11111", 5, "12345", "67890") == DTX_FABRICATED);
    CHECK(dtx_halluc_classify("", 0, "12345", "67890") == DTX_FABRICATED);
    CHECK(dtx_halluc_classify("67890 12345", 11, "12345", "67890") == DTX_FAITHFUL); /* the context's wins */
    CHECK(dtx_halluc_is_none("none", 4) && dtx_halluc_is_none("  none ", 7));
    CHECK(!dtx_halluc_is_none("none.", 5) && !dtx_halluc_is_none("nonexistent", 11) && !dtx_halluc_is_none("", 0));
    CHECK(!dtx_halluc_is_none("12345", 5));
    const char nums[3][8] = {"12345", "23456", "34567"};
    int64_t listed, right;
    dtx_halluc_list_score("12345, 23456, 34567", 19, nums, 3, &listed, &right);
    CHECK(listed == 3 && right == 3);
    dtx_halluc_list_score("12345, 99999", 12, nums, 3, &listed, &right); /* one made up, one missed */
    CHECK(listed == 2 && right == 1);
    dtx_halluc_list_score("12345, 12345, 123456", 20, nums, 3, &listed, &right); /* a repeat; a longer run */
    CHECK(listed == 3 && right == 1);
    dtx_halluc_list_score("none", 4, nums, 3, &listed, &right);
    CHECK(listed == 0 && right == 0);
}

TEST(needle_spec_answer_city_and_city_lo) {
    REQUIRE(setup() == 0);
    dtx_needle_spec s = {.length = 300, .n_needles = 4, .n_queries = 1, .depth = -1, .seed = 9,
                         .city_lo = DTX_FACT_CITIES, .answer_city = "Tokyo", .answer_number = "54321"};
    dtx_needle_prompt p;
    REQUIREF(dtx_needle_make(src, &s, &p) == DTX_OK, "%s", dtx_last_error());
    CHECK(strcmp(p.city[0], "Tokyo") == 0 && strcmp(p.number[0], "54321") == 0);
    for (int i = 1; i < 4; i++) {
        CHECK(!is_fact_city(p.city[i], strlen(p.city[i])));
        CHECK(strcmp(p.number[i], "54321") != 0);
    }
    CHECK(p.n == 300); /* an eval prompt of one query: exactly length */
    dtx_needle_prompt_free(&p);
    s.no_question = 1;
    REQUIRE(dtx_needle_make(src, &s, &p) == DTX_OK);
    CHECK(p.n == 300 && p.context_end == 300 && p.question_n[0] > 0);
    dtx_needle_prompt_free(&p);
    s.answer_number = "5432";
    CHECK(dtx_needle_make(src, &s, &p) == DTX_ERR_ARG);
    s.answer_number = "54321", s.answer_city = "Atlantis";
    CHECK(dtx_needle_make(src, &s, &p) == DTX_ERR_ARG);
    s.answer_city = NULL;
    CHECK(dtx_needle_make(src, &s, &p) == DTX_ERR_ARG); /* one without the other */
    s.answer_number = NULL, s.city_lo = dtx_needle_num_cities() - 3;
    CHECK(dtx_needle_make(src, &s, &p) == DTX_ERR_ARG); /* 3 cities left for 4 needles */
    s.city_lo = 0, s.with_answer = 1;
    CHECK(dtx_needle_make(src, &s, &p) == DTX_ERR_ARG); /* no_question with an answer */
}
