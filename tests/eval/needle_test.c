/* Multi-needle prompts (src/eval/needle.c): exact lengths, needle and
 * question spans, depth placement, determinism, errors, the Wilson interval
 * and the substring scorer. A tokenizer is trained here on a generated
 * haystack of short sentences, so the unit sizes are known. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "eval/needle.h"
#include "test.h"

static const char *const SUBJ[] = {"The old miller", "A quiet river", "Every farmer in the valley", "The committee",
                                   "Our neighbour", "The long winter", "A small boat"};
static const char *const VERB[] = {"watched", "remembered", "carried", "followed the course of", "spoke about"};
static const char *const OBJ[] = {"the harvest",     "the northern road", "a letter from home", "the bridge",
                                  "the price of grain", "the evening bells", "an empty house",  "the market",
                                  "the last train",  "a field of barley", "the mountain pass"};

/* Generated prose: about 400 sentences, some ending in '?', '!' or a newline. */
static char *haystack_text(size_t *len) {
    size_t cap = 64 * 1024, n = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    for (int i = 0; i < 400; i++) {
        const char *end = i % 13 == 0 ? "?" : i % 17 == 0 ? "!" : ".";
        const char *sep = i % 9 == 8 ? "\n" : " ";
        n += (size_t)snprintf(t + n, cap - n, "%s %s %s%s%s", SUBJ[i % 7], VERB[(i / 7) % 5], OBJ[(i * 3) % 11],
                              end, sep);
    }
    *len = n;
    return t;
}

static dtx_tokenizer *tok;
static dtx_needle_source *src;
static int64_t max_unit; /* most tokens of any haystack sentence */

/* The tokenizer, the haystack file and the source, made once. */
static int setup(void) {
    if (src) return 0;
    size_t len = 0;
    char *text = haystack_text(&len);
    if (!text) return -1;
    const char *texts[] = {text, "The special magic Tokyo number is: 12345. What is the special magic number?"};
    size_t lens[] = {len, strlen(texts[1])};
    const char *path = test_path("hay.txt");
    int rc = dtx_tokenizer_train_texts(&tok, texts, lens, 2, 600) == DTX_OK && write_file(path, text, len) == 0 ? 0 : -1;
    /* Unit sizes: each sentence encoded alone, as the source does. */
    for (char *p = text; rc == 0 && *p;) {
        char *e = p;
        while (*e && !(*e == '\n' || ((*e == '.' || *e == '?' || *e == '!') && e[1] == ' '))) e++;
        if (*e) e++;
        int32_t *ids;
        int64_t n;
        if (dtx_tokenizer_encode(tok, p, (size_t)(e - p), DTX_ENCODE_ORDINARY, &ids, &n) != DTX_OK) rc = -1;
        else free(ids);
        if (n > max_unit) max_unit = n;
        p = e;
    }
    free(text);
    if (rc == 0 && dtx_needle_source_open(&src, tok, &path, 1) != DTX_OK) rc = -1;
    return rc;
}

/* The text of tokens [b, e) of p. */
static char *span_text(const dtx_needle_prompt *p, int64_t b, int64_t e) {
    char *s = NULL;
    size_t len = 0;
    if (dtx_tokenizer_decode(tok, p->tokens + b, e - b, &s, &len) != DTX_OK) return NULL;
    return s;
}

static dtx_needle_spec spec(int64_t length, int n, int r, double depth, uint64_t seed, int with_answer) {
    dtx_needle_spec s = {.length = length, .n_needles = n, .n_queries = r, .depth = depth, .seed = seed,
                         .with_answer = with_answer};
    return s;
}

TEST(needle_cities_unique) {
    int n = dtx_needle_num_cities();
    CHECK(n >= 100);
    for (int i = 0; i < n; i++) {
        const char *a = dtx_needle_city(i);
        REQUIRE(a && a[0] && strlen(a) < 40);
        for (const char *c = a; *c; c++) CHECKF((unsigned char)*c < 128, "%s is not ASCII", a);
        for (int j = 0; j < i; j++) CHECKF(strcmp(a, dtx_needle_city(j)) != 0, "%s appears twice", a);
    }
    CHECK(dtx_needle_city(n) == NULL && dtx_needle_city(-1) == NULL);
}

TEST(needle_source_units) {
    REQUIRE(setup() == 0);
    CHECK(dtx_needle_source_units(src) == 401); /* a sentence each, and the final space alone */
    CHECK(dtx_needle_source_tokens(src) > 400 * 5);
}

TEST(needle_training_lengths_exact) {
    REQUIRE(setup() == 0);
    const int ns[] = {1, 2, 4, 6, 16};
    for (int li = 0; li < 6; li++) {
        int64_t length = 300 + 211 * li;
        for (int ni = 0; ni < 5; ni++)
            for (uint64_t seed = 1; seed <= 12; seed++) {
                dtx_needle_spec s = spec(length, ns[ni], 1, (double)(seed % 5) / 4, seed, 1);
                if (ns[ni] == 16 && length < 600) continue; /* too short for 16 needles */
                dtx_needle_prompt p;
                REQUIREF(dtx_needle_make(src, &s, &p) == DTX_OK, "%s", dtx_last_error());
                CHECKF(p.n == length, "n %lld, length %lld", (long long)p.n, (long long)length);
                char *ans = span_text(&p, p.answer_begin, p.answer_end);
                char *tail = span_text(&p, p.answer_end, p.n);
                CHECK(ans && strcmp(ans, p.number[0]) == 0);
                CHECK(tail && strcmp(tail, "\n") == 0);
                free(ans);
                free(tail);
                dtx_needle_prompt_free(&p);
            }
    }
}

/* A training document with R > 1 asks every queried needle in turn, each
 * question followed by its own answer and a newline, and is still exactly
 * length tokens. */
TEST(needle_training_answers_every_query) {
    REQUIRE(setup() == 0);
    for (int r = 1; r <= 4; r++)
        for (uint64_t seed = 1; seed <= 6; seed++) {
            dtx_needle_spec s = spec(700, 4, r, -1, seed, 1);
            dtx_needle_prompt p;
            REQUIREF(dtx_needle_make(src, &s, &p) == DTX_OK, "%s", dtx_last_error());
            CHECK(p.n == 700);
            char *tail = span_text(&p, p.context_end, p.n), want[2048] = "";
            size_t n = 0;
            for (int q = 0; q < r; q++)
                n += (size_t)snprintf(want + n, sizeof want - n,
                                      "\nWhat is the special magic %s number? The special magic %s number is %s\n",
                                      p.city[q], p.city[q], p.number[q]);
            CHECKF(tail && strcmp(tail, want) == 0, "R %d: '%s'", r, tail ? tail : "(null)");
            free(tail);
            dtx_needle_prompt_free(&p);
        }
}

/* Everything but the haystack, checked on one prompt. */
static void check_prompt(const dtx_needle_prompt *p, const dtx_needle_spec *s) {
    CHECK(p->tokens[0] == dtx_tokenizer_token_id(tok, "<|bos|>"));
    char *fr = span_text(p, 1, p->haystack_begin);
    CHECK(fr && strcmp(fr, "There is a special magic number inside a lot of irrelevant text. Find it and memorize "
                           "them. I will quiz you about the magic number there.\n") == 0);
    free(fr);
    char want[256];
    for (int i = 0; i < s->n_needles; i++) {
        snprintf(want, sizeof want, " The special magic %s number is: %s.", p->city[i], p->number[i]);
        char *got = span_text(p, p->needle_begin[i], p->needle_end[i]);
        CHECKF(got && strcmp(got, want) == 0, "needle %d: '%s'", i, got ? got : "(null)");
        free(got);
        int num = atoi(p->number[i]);
        CHECK(strlen(p->number[i]) == 5 && num >= 10000 && num <= 99999);
        for (int j = 0; j < i; j++) CHECK(strcmp(p->city[i], p->city[j]) != 0 && strcmp(p->number[i], p->number[j]) != 0);
    }
    for (int q = 0; q < s->n_queries; q++) {
        snprintf(want, sizeof want, "\nWhat is the special magic %s number? The special magic %s number is ",
                 p->city[q], p->city[q]);
        char *got = NULL;
        size_t len;
        REQUIRE(dtx_tokenizer_decode(tok, p->question[q], p->question_n[q], &got, &len) == DTX_OK);
        CHECKF(strcmp(got, want) == 0, "question %d: '%s'", q, got);
        CHECK(p->context_end + p->question_n[q] <= s->length);
        free(got);
    }
    CHECK(p->n == p->context_end + p->question_n[0]);
    CHECK(memcmp(p->tokens + p->context_end, p->question[0], (size_t)p->question_n[0] * sizeof(int32_t)) == 0);
}

TEST(needle_eval_prompt_spans) {
    REQUIRE(setup() == 0);
    for (uint64_t seed = 1; seed <= 30; seed++) {
        int n = 1 + (int)(seed % 8), r = 1 + (int)(seed % (uint64_t)n);
        dtx_needle_spec s = spec(400 + 37 * (int64_t)seed, n, r, -1, seed, 0);
        dtx_needle_prompt p;
        REQUIREF(dtx_needle_make(src, &s, &p) == DTX_OK, "%s", dtx_last_error());
        CHECK(p.n <= s.length && p.answer_begin == 0 && p.answer_end == 0);
        int64_t longest = 0;
        for (int q = 0; q < r; q++) longest = p.question_n[q] > longest ? p.question_n[q] : longest;
        CHECK(p.context_end + longest == s.length); /* the budget is filled exactly */
        check_prompt(&p, &s);
        dtx_needle_prompt_free(&p);
    }
}

/* The answer needle's token offset in the haystack (needles removed), and
 * the haystack's size. */
static void haystack_offset(const dtx_needle_prompt *p, int64_t *off, int64_t *H) {
    int64_t before = 0, all = 0;
    for (int i = 0; i < p->n_needles; i++) {
        all += p->needle_end[i] - p->needle_begin[i];
        if (i && p->needle_end[i] <= p->needle_begin[0]) before += p->needle_end[i] - p->needle_begin[i];
    }
    *off = p->needle_begin[0] - p->haystack_begin - before;
    *H = p->context_end - p->haystack_begin - all;
}

TEST(needle_answer_at_depth) {
    REQUIRE(setup() == 0);
    REQUIRE(max_unit > 3);
    const double depths[] = {0, 0.25, 0.5, 0.75, 1};
    for (int di = 0; di < 5; di++)
        for (uint64_t seed = 1; seed <= 20; seed++) {
            int n = 1 + (int)(seed % 6);
            dtx_needle_spec s = spec(900, n, n > 1 ? 2 : 1, depths[di], seed * 7919, 0);
            dtx_needle_prompt p;
            REQUIREF(dtx_needle_make(src, &s, &p) == DTX_OK, "%s", dtx_last_error());
            int64_t off, H;
            haystack_offset(&p, &off, &H);
            double want = depths[di] * (double)H;
            CHECKF(fabs((double)off - want) <= (double)max_unit, "depth %g: offset %lld of %lld", depths[di],
                   (long long)off, (long long)H);
            int64_t first = INT64_MAX, last = -1;
            for (int i = 0; i < n; i++) {
                first = p.needle_begin[i] < first ? p.needle_begin[i] : first;
                last = p.needle_begin[i] > last ? p.needle_begin[i] : last;
            }
            if (di == 0) CHECK(p.needle_begin[0] == p.haystack_begin && first == p.needle_begin[0]);
            if (di == 4) CHECK(p.needle_end[0] == p.context_end && last == p.needle_begin[0]);
            dtx_needle_prompt_free(&p);
        }
}

/* Distractors are spread: over many prompts they land at many boundaries;
 * numbers spread over [10000, 99999]. */
TEST(needle_distractors_random) {
    REQUIRE(setup() == 0);
    int64_t lo = INT64_MAX, hi = -1;
    int nlo = 99999, nhi = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        dtx_needle_spec s = spec(1000, 6, 2, 0.5, seed, 0);
        dtx_needle_prompt p;
        REQUIRE(dtx_needle_make(src, &s, &p) == DTX_OK);
        for (int i = 1; i < 6; i++) {
            int64_t rel = p.needle_begin[i] - p.haystack_begin;
            lo = rel < lo ? rel : lo;
            hi = rel > hi ? rel : hi;
        }
        for (int i = 0; i < 6; i++) {
            int v = atoi(p.number[i]);
            nlo = v < nlo ? v : nlo;
            nhi = v > nhi ? v : nhi;
        }
        dtx_needle_prompt_free(&p);
    }
    CHECK(lo < 100 && hi > 700);
    CHECK(nlo < 15000 && nhi > 95000);
}

/* With few boundaries, distractors often share the answer's: depth 0 must
 * still put the answer first and depth 1 last. */
TEST(needle_shared_boundary_order) {
    REQUIRE(setup() == 0);
    const char *path = test_path("long-units.txt");
    const char text[] = "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda. ";
    REQUIRE(write_file(path, text, strlen(text)) == 0);
    dtx_needle_source *s = NULL;
    REQUIRE(dtx_needle_source_open(&s, tok, &path, 1) == DTX_OK);
    int shared = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        double depth = (double)(seed % 2);
        dtx_needle_spec sp = spec(330, 6, 1, depth, seed, 0);
        dtx_needle_prompt p;
        REQUIREF(dtx_needle_make(s, &sp, &p) == DTX_OK, "%s", dtx_last_error());
        for (int i = 1; i < 6; i++) {
            int at_edge = depth == 0 ? p.needle_begin[i] == p.needle_end[0] || p.needle_end[i] == p.needle_begin[0]
                                     : p.needle_end[i] == p.needle_begin[0] || p.needle_begin[i] == p.needle_end[0];
            shared += at_edge;
            CHECK(depth == 0 ? p.needle_begin[i] > p.needle_begin[0] : p.needle_begin[i] < p.needle_begin[0]);
        }
        dtx_needle_prompt_free(&p);
    }
    CHECK(shared > 5); /* the case was exercised */
    dtx_needle_source_free(s);
}

TEST(needle_deterministic) {
    REQUIRE(setup() == 0);
    dtx_needle_spec s = spec(700, 4, 2, 0.25, 99, 0);
    dtx_needle_prompt a, b, c;
    REQUIRE(dtx_needle_make(src, &s, &a) == DTX_OK);
    REQUIRE(dtx_needle_make(src, &s, &b) == DTX_OK);
    s.seed = 100;
    REQUIRE(dtx_needle_make(src, &s, &c) == DTX_OK);
    CHECK(a.n == b.n && memcmp(a.tokens, b.tokens, (size_t)a.n * sizeof *a.tokens) == 0);
    CHECK(strcmp(a.city[0], b.city[0]) == 0 && strcmp(a.number[3], b.number[3]) == 0);
    CHECK(a.n != c.n || memcmp(a.tokens, c.tokens, (size_t)a.n * sizeof *a.tokens) != 0);
    CHECK(strcmp(a.number[0], c.number[0]) != 0 || strcmp(a.city[0], c.city[0]) != 0);
    dtx_needle_prompt_free(&a);
    dtx_needle_prompt_free(&b);
    dtx_needle_prompt_free(&c);
    CHECK(a.tokens == NULL); /* free clears */
}

TEST(needle_bad_specs) {
    REQUIRE(setup() == 0);
    dtx_needle_prompt p;
    dtx_needle_spec bad[] = {
        spec(500, 0, 1, 0, 1, 0),  spec(500, DTX_NEEDLE_MAX + 1, 1, 0, 1, 0), spec(500, 2, 3, 0, 1, 0),
        spec(500, 2, 0, 0, 1, 0),  spec(500, 1, 1, 1.5, 1, 0),                spec(500, 1, 1, NAN, 1, 0),
        spec(0, 1, 1, 0, 1, 0),    spec(500, 1, 1, 0, 1, 2),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECKF(dtx_needle_make(src, &bad[i], &p) == DTX_ERR_ARG, "spec %zu accepted", i);
        CHECK(p.tokens == NULL);
    }
    /* Too short: the message names the minimum, and that minimum works. */
    dtx_needle_spec s = spec(20, 2, 2, 0.5, 5, 1);
    CHECK(dtx_needle_make(src, &s, &p) == DTX_ERR_ARG);
    const char *msg = strstr(dtx_last_error(), "at least ");
    REQUIREF(msg, "%s", dtx_last_error());
    s.length = atoll(msg + strlen("at least "));
    CHECK(s.length > 40);
    REQUIREF(dtx_needle_make(src, &s, &p) == DTX_OK, "%s", dtx_last_error());
    CHECK(p.n == s.length && p.context_end == p.haystack_begin + (p.needle_end[0] - p.needle_begin[0]) +
                                                 (p.needle_end[1] - p.needle_begin[1]));
    dtx_needle_prompt_free(&p);
    s.length--;
    CHECK(dtx_needle_make(src, &s, &p) == DTX_ERR_ARG);
}

TEST(needle_source_errors) {
    REQUIRE(setup() == 0);
    dtx_needle_source *s = (dtx_needle_source *)1;
    const char *missing = test_path("no-such-file.txt");
    CHECK(dtx_needle_source_open(&s, tok, &missing, 1) == DTX_ERR_IO && s == NULL);
    CHECK(strstr(dtx_last_error(), "no-such-file.txt") != NULL);
    const char *empty = test_path("empty.txt");
    REQUIRE(write_file(empty, "", 0) == 0);
    CHECK(dtx_needle_source_open(&s, tok, &empty, 1) == DTX_ERR_FORMAT && s == NULL);
    /* A folder without files. */
    const char *dir = test_tmpdir();
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/needle-empty-dir", dir);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", sub);
    REQUIRE(system(cmd) == 0);
    const char *subp = sub;
    CHECK(dtx_needle_source_open(&s, tok, &subp, 1) == DTX_ERR_IO);
    CHECK(dtx_needle_source_open(&s, tok, &subp, 0) == DTX_ERR_ARG);
}

/* A folder: its files (dtx_paths_add), sorted by name; hidden ones ignored. */
TEST(needle_source_folder) {
    REQUIRE(setup() == 0);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/needle-dir", test_tmpdir());
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    REQUIRE(system(cmd) == 0);
    char p1[1100], p2[1100], p3[1100];
    snprintf(p1, sizeof p1, "%s/b.txt", dir);
    snprintf(p2, sizeof p2, "%s/a.txt", dir);
    snprintf(p3, sizeof p3, "%s/.c.txt", dir);
    REQUIRE(write_file(p1, "Second file. Two units.", 23) == 0);
    REQUIRE(write_file(p2, "First file.\n", 12) == 0);
    REQUIRE(write_file(p3, "ignored. ignored. ignored.", 26) == 0);
    dtx_needle_source *s = NULL;
    const char *d = dir;
    REQUIREF(dtx_needle_source_open(&s, tok, &d, 1) == DTX_OK, "%s", dtx_last_error());
    CHECK(dtx_needle_source_units(s) == 3);
    /* A prompt whose haystack is exactly the source from unit 0 shows the order:
     * try seeds until the haystack starts at "First". */
    int seen = 0;
    for (uint64_t seed = 1; seed < 50 && !seen; seed++) {
        dtx_needle_spec sp = spec(200, 1, 1, 0, seed, 0);
        dtx_needle_prompt p;
        REQUIRE(dtx_needle_make(s, &sp, &p) == DTX_OK);
        char *text = span_text(&p, p.needle_end[0], p.context_end);
        if (text && strncmp(text, "First file.\nSecond file. Two units.First file.", 46) == 0) seen = 1;
        free(text);
        dtx_needle_prompt_free(&p);
    }
    CHECK(seen);
    dtx_needle_source_free(s);
}

/* A tokenizer without <|bos|>: a tiktoken rank file of the 256 bytes. */
TEST(needle_source_needs_bos) {
    REQUIRE(setup() == 0);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *buf = malloc(256 * 16);
    REQUIRE(buf);
    size_t n = 0;
    for (int i = 0; i < 256; i++)
        n += (size_t)sprintf(buf + n, "%c%c== %d\n", b64[i >> 2], b64[(i & 3) << 4], i);
    const char *path = test_path("bytes.tiktoken");
    REQUIRE(write_file(path, buf, n) == 0);
    free(buf);
    dtx_tokenizer *t = NULL;
    REQUIREF(dtx_tokenizer_load(&t, path) == DTX_OK, "%s", dtx_last_error());
    dtx_needle_source *s = NULL;
    const char *hay = test_path("hay.txt");
    CHECK(dtx_needle_source_open(&s, t, &hay, 1) == DTX_ERR_ARG && s == NULL);
    CHECK(strstr(dtx_last_error(), "<|bos|>") != NULL);
    dtx_tokenizer_free(t);
}

TEST(needle_wilson) {
    double lo, hi;
    dtx_wilson95(0, 50, &lo, &hi);
    CHECK(lo == 0 && fabs(hi - 0.0714) < 1e-4);
    dtx_wilson95(25, 50, &lo, &hi);
    CHECK(fabs(lo - 0.3664) < 1e-4 && fabs(hi - 0.6336) < 1e-4);
    dtx_wilson95(50, 50, &lo, &hi);
    CHECK(fabs(lo - 0.9286) < 1e-4 && hi == 1);
    dtx_wilson95(45, 50, &lo, &hi);
    CHECK(fabs(lo - 0.7864) < 1e-4 && fabs(hi - 0.9565) < 1e-4);
    dtx_wilson95(0, 0, &lo, &hi);
    CHECK(lo == 0 && hi == 1);
}

TEST(needle_scorer) {
    const char *t = "12345\n";
    CHECK(dtx_needle_answer_correct(t, 5, "12345"));
    CHECK(dtx_needle_answer_correct("x 12345.", 8, "12345"));
    CHECK(dtx_needle_answer_correct("123456", 6, "12345")); /* a substring counts (YOCO) */
    CHECK(!dtx_needle_answer_correct("1234", 4, "12345"));
    CHECK(!dtx_needle_answer_correct("12 345", 6, "12345"));
    CHECK(!dtx_needle_answer_correct("12345", 4, "12345")); /* only len bytes are read */
    CHECK(!dtx_needle_answer_correct("", 0, "12345"));
    CHECK(!dtx_needle_answer_correct("abc", 3, ""));
}

TEST(needle_cell_seed) {
    uint64_t a = dtx_needle_cell_seed(1, 2, 2, 4096, 50, 7);
    CHECK(a == dtx_needle_cell_seed(1, 2, 2, 4096, 50, 7));
    CHECK(a != dtx_needle_cell_seed(2, 2, 2, 4096, 50, 7));
    CHECK(a != dtx_needle_cell_seed(1, 4, 2, 4096, 50, 7));
    CHECK(a != dtx_needle_cell_seed(1, 2, 1, 4096, 50, 7));
    CHECK(a != dtx_needle_cell_seed(1, 2, 2, 2048, 50, 7));
    CHECK(a != dtx_needle_cell_seed(1, 2, 2, 4096, 25, 7));
    CHECK(a != dtx_needle_cell_seed(1, 2, 2, 4096, 50, 8));
    CHECK(dtx_needle_cell_seed(1, 2, 2, 4096, 0, 7) != dtx_needle_cell_seed(1, 2, 2, 4096, 0.01, 7));
}

TEST(needle_parse_list) {
    double v[4];
    CHECK(dtx_eval_parse_list("0,25,50", v, 4) == 3 && v[0] == 0 && v[1] == 25 && v[2] == 50);
    CHECK(dtx_eval_parse_list("12.5", v, 4) == 1 && v[0] == 12.5);
    CHECK(dtx_eval_parse_list("1,2,3,4,5", v, 4) == -2);
    const char *bad[] = {"", ",", "1,", ",1", "1,,2", "a", "1x", " 1", "1 ", "nan", "inf", "1e999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(dtx_eval_parse_list(bad[i], v, 4) == -1, "'%s' accepted", bad[i]);
}
