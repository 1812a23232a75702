/* difftx eval icl and difftx eval halluc, run as separate processes: the
 * JSON's arithmetic, that a point of the accuracy curve does not depend on
 * the others asked with it, and the one-line refusals. Two hand-made models
 * pin the scoring: one whose logits depend only on the current token
 * (attention and feed-forward write nothing) answers every query of an
 * episode with the same label, so with balanced queries every accuracy is
 * exactly 1/C and every margin 0; a bigram model that answers every
 * question "none" pins each faithfulness rate. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "eval/needle.h"
#include "test.h"

enum { MAX_SEQ = 256 };

static const char *icl_tok, *qa_tok, *hay, *icl_model, *icl_tf, *current_token, *short_model, *none_model, *qa_model;
static const char *icl_v2, *qa_v2, *current_token_v2;
static dtx_tokenizer *qa_t;

static dtx_config tiny(dtx_arch arch, int64_t dim, int64_t vocab, int64_t max_seq) {
    dtx_config c = dtx_config_default();
    c.arch = arch, c.dim = dim, c.n_layers = 1, c.n_heads = 2;
    c.n_kv_heads = arch == DTX_ARCH_DIFF ? 1 : 2; /* DIFF V2: 2 output heads (4 query heads) over 2 KV heads */
    c.vocab_size = vocab, c.ffn_dim = 64, c.max_seq_len = max_seq, c.tie_embeddings = 0;
    return c;
}

static dtx_real *param(dtx_model *m, const char *name, size_t *numel) {
    const dtx_tensor_info *t = dtx_model_find(m, name);
    if (!t) return NULL;
    *numel = t->numel;
    return dtx_model_params(m) + t->offset;
}

/* Attention and feed-forward zeroed: the logits depend on the current token only. */
static void silence(dtx_model *m) {
    size_t n = 0;
    dtx_real *p;
    if ((p = param(m, "layers.0.attention.out_proj.weight", &n))) memset(p, 0, n * sizeof *p);
    if ((p = param(m, "layers.0.feed_forward.w2.weight", &n))) memset(p, 0, n * sizeof *p);
}

static const char *save(dtx_model *m, const char *name) {
    const char *p = test_path(name);
    int ok = dtx_model_save(m, p, 0) == DTX_OK;
    dtx_model_free(m);
    return ok ? p : NULL;
}

/* One-hot embedding, output rows chosen so that after " " (every
 * question's last token) comes " none" and then a newline: every answer is
 * "none" (a leading space: the scorer trims it). */
static const char *none_bigram(void) {
    int64_t V = dtx_tokenizer_vocab_size(qa_t);
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (dtx_tokenizer_encode(qa_t, " none", 5, DTX_ENCODE_ORDINARY, &ids, &n_ids) != DTX_OK) return NULL;
    int32_t none = n_ids == 1 ? ids[0] : -1;
    free(ids);
    dtx_config c = tiny(DTX_ARCH_TRANSFORMER, 512, V, MAX_SEQ);
    dtx_model *m = NULL;
    if (none < 0 || V > c.dim || dtx_model_init(&m, &c, 5) != DTX_OK) return NULL;
    silence(m);
    size_t n = 0;
    dtx_real *emb = param(m, "tok_embeddings.weight", &n), *outw = param(m, "output.weight", &n);
    memset(emb, 0, n * sizeof *emb);
    memset(outw, 0, n * sizeof *outw);
    for (int64_t x = 0; x < V; x++) emb[x * c.dim + x] = 1;
    outw[(int64_t)none * c.dim + ' '] = 1;
    outw[(int64_t)'\n' * c.dim + none] = 1;
    return save(m, "none_bigram.safetensors");
}

static int setup(void) {
    if (qa_model) return 0;
    static char words[60000], text[40000];
    size_t m = 0, n = 0;
    for (int rep = 0; rep < 5; rep++)
        for (int i = 0; i < 800; i++)
            m += (size_t)snprintf(words + m, sizeof words - m, " %c%c%c%s", 'a' + i % 26, 'a' + (i / 26 + 3) % 26,
                                  'a' + (i / 26 / 26 + 5) % 26, i % 9 == 8 ? ":\n" : "");
    static const char *const w[] = {"The farmer", "A river", "The old town", "Our committee", "The winter"};
    static const char *const o[] = {"the harvest", "the road", "a letter", "the bridge", "the market", "the bells"};
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s saw %s.%s", w[i % 5], o[(i * 7) % 6],
                              i % 11 == 10 ? "\n" : " ");
    const char *t1[] = {words};
    dtx_tokenizer *it = test_tokenizer_file(t1, 1, 1500, "icl.tok", &icl_tok);
    const char *t2[] = {text, "There is a special magic number inside a lot of irrelevant text. What is the special "
                              "magic Paris number? The special magic Paris number is: 12345. List every special magic "
                              "number. The special magic numbers are none none none none none none"};
    qa_t = test_tokenizer_file(t2, 2, 400, "qa.tok", &qa_tok);
    hay = test_path("claims_hay.txt");
    if (!it || !qa_t || write_file(hay, text, n) != 0) return -1;
    int64_t V = dtx_tokenizer_vocab_size(it);
    dtx_tokenizer_free(it);
    dtx_model *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;
    dtx_config cd = tiny(DTX_ARCH_DIFF, 32, V, MAX_SEQ), ct = tiny(DTX_ARCH_TRANSFORMER, 32, V, MAX_SEQ);
    dtx_config cs = tiny(DTX_ARCH_DIFF, 32, V, 32),
               cq = tiny(DTX_ARCH_DIFF, 32, dtx_tokenizer_vocab_size(qa_t), MAX_SEQ);
    if (dtx_model_init(&a, &cd, 1) || dtx_model_init(&b, &ct, 2) || dtx_model_init(&c, &ct, 3) ||
        dtx_model_init(&d, &cs, 4) || dtx_model_init(&e, &cq, 5))
        return -1;
    silence(c);
    icl_model = save(a, "icl_diff.safetensors");
    icl_tf = save(b, "icl_tf.safetensors");
    current_token = save(c, "current_token.safetensors");
    short_model = save(d, "short.safetensors");
    qa_model = save(e, "qa_diff.safetensors");
    none_model = none_bigram();
    /* DIFF V2 (attention its own kernel path: 2h query heads, λ per token) */
    dtx_model *f = NULL, *g = NULL, *h = NULL;
    dtx_config c2 = tiny(DTX_ARCH_DIFF2, 32, V, MAX_SEQ), cq2 = tiny(DTX_ARCH_DIFF2, 32, dtx_tokenizer_vocab_size(qa_t), MAX_SEQ);
    if (dtx_model_init(&f, &c2, 6) || dtx_model_init(&g, &c2, 7) || dtx_model_init(&h, &cq2, 8)) return -1;
    silence(g);
    icl_v2 = save(f, "icl_v2.safetensors");
    current_token_v2 = save(g, "current_token_v2.safetensors");
    qa_v2 = save(h, "qa_v2.safetensors");
    return icl_model && icl_tf && current_token && short_model && qa_model && none_model && icl_v2 &&
                   current_token_v2 && qa_v2
               ? 0
               : -1;
}

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* Runs `difftx eval ARGS --json <test_path(name)>` and reads its report; NULL
 * (the failure recorded, with the command's output) when it fails. */
__attribute__((format(printf, 2, 3))) static cJSON *eval_json(const char *name, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *js = test_path(name);
    int rc = cli("eval %s --json %s", args, js);
    if (rc != 0) {
        test_fail_at(__FILE__, __LINE__, "eval %s: rc %d: %s", args, rc, cli_out);
        return NULL;
    }
    cJSON *a = read_json(js);
    if (!a) test_fail_at(__FILE__, __LINE__, "eval %s: no JSON report in %s", args, js);
    return a;
}

/* rate = k / n inside the library's Wilson interval. */
static void check_rate(const cJSON *r, double want_n) {
    double k = json_num(r, "k"), n = json_num(r, "n"), lo, hi;
    CHECKF(want_n < 0 || n == want_n, "n %g, expected %g", n, want_n);
    CHECK(k >= 0 && k <= n && fabs(json_num(r, "rate") - (n > 0 ? k / n : 0)) < 1e-12);
    dtx_wilson95((int64_t)k, (int64_t)n, &lo, &hi);
    CHECK(fabs(json_num(r, "lo") - lo) < 1e-12 && fabs(json_num(r, "hi") - hi) < 1e-12);
}

/* ------------------------------------------------------------ icl */

/* The curve's and the order study's numbers against their own parts. */
static void check_icl_json(const cJSON *root, int C, int Q, int E, int K) {
    const cJSON *p;
    CHECK(json_num(root, "classes") == C && json_num(root, "max_rounds") == (MAX_SEQ - 1 - 4) / (C * 6));
    cJSON_ArrayForEach(p, item(root, "curve")) {
        double k = json_num(p, "correct"), n = json_num(p, "n"), sum = 0, lo, hi;
        CHECK(n == (double)E * Q && json_num(p, "demos") == json_num(p, "rounds") * C);
        CHECK(fabs(json_num(p, "acc") - k / n) < 1e-12);
        dtx_wilson95((int64_t)k, (int64_t)n, &lo, &hi);
        CHECK(fabs(json_num(p, "lo") - lo) < 1e-12 && fabs(json_num(p, "hi") - hi) < 1e-12);
        const cJSON *x;
        cJSON_ArrayForEach(x, item(p, "correct_per_episode")) sum += x->valuedouble;
        CHECK(sum == k && cJSON_GetArraySize(item(p, "correct_per_episode")) == E);
    }
    const char *kinds[] = {"random", "grouped"};
    for (int g = 0; g < 2; g++) {
        const cJSON *o = item(item(root, "order"), kinds[g]), *ep;
        REQUIRE(o);
        double margins = 0;
        CHECK(cJSON_GetArraySize(item(o, "episodes")) == E);
        cJSON_ArrayForEach(ep, item(o, "episodes")) {
            double best = -1, worst = 2, s = 0;
            const cJSON *acc = item(ep, "acc"), *cor = item(ep, "correct");
            REQUIRE(cJSON_GetArraySize(acc) == K && cJSON_GetArraySize(cor) == K);
            for (int k = 0; k < K; k++) {
                double v = cJSON_GetArrayItem(acc, k)->valuedouble;
                CHECK(fabs(v - cJSON_GetArrayItem(cor, k)->valuedouble / Q) < 1e-12);
                best = v > best ? v : best, worst = v < worst ? v : worst, s += v;
            }
            CHECK(json_num(ep, "best") == best && json_num(ep, "worst") == worst);
            CHECK(fabs(json_num(ep, "margin") - (best - worst)) < 1e-12 && fabs(json_num(ep, "mean") - s / K) < 1e-12);
            margins += best - worst;
        }
        CHECK(fabs(json_num(o, "margin_mean") - margins / E) < 1e-12);
    }
}

TEST(eval_icl_cli_json_and_independent_points) {
    REQUIRE(setup() == 0);
    cJSON *a = eval_json("icl.json", "icl --model %s --tokenizer %s --classes 4 --queries 8 --episodes 2 --orders 3 "
                         "--shots 1,2", icl_model, icl_tok);
    REQUIRE(a);
    CHECK(cli_has("Order study: 10 rounds (40 demonstrations)"));
    check_icl_json(a, 4, 8, 2, 3);
    /* rounds 2 asked alone: the same answers as with rounds 1 beside it, and the same order study */
    cJSON *b = eval_json("icl2.json", "icl --model %s --tokenizer %s --classes 4 --queries 8 --episodes 2 --orders 3 "
                         "--shots 2", icl_model, icl_tok);
    REQUIRE(b);
    char *pa = cJSON_PrintUnformatted(item(cJSON_GetArrayItem(item(a, "curve"), 1), "correct_per_episode"));
    char *pb = cJSON_PrintUnformatted(item(cJSON_GetArrayItem(item(b, "curve"), 0), "correct_per_episode"));
    char *oa = cJSON_PrintUnformatted(item(a, "order")), *ob = cJSON_PrintUnformatted(item(b, "order"));
    CHECK(pa && pb && strcmp(pa, pb) == 0);
    CHECK(oa && ob && strcmp(oa, ob) == 0);
    free(pa), free(pb), free(oa), free(ob);
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* the default curve: 1, 2, 4, 8 and the most that fit (10) */
    a = eval_json("icl.json", "icl --model %s --tokenizer %s --classes 4 --queries 4 --episodes 1 --orders 2", icl_tf,
                  icl_tok);
    REQUIRE(a && cJSON_GetArraySize(item(a, "curve")) == 5);
    CHECK(json_num(cJSON_GetArrayItem(item(a, "curve"), 4), "rounds") == 10);
    check_icl_json(a, 4, 4, 1, 2);
    cJSON_Delete(a);
}

/* A model whose attention and feed-forward are silenced answers from the
 * current token alone: at chance exactly, whatever the demonstrations' order. */
static void check_at_chance(const char *model) {
    cJSON *a = eval_json("icl_ct.json", "icl --model %s --tokenizer %s --classes 5 --queries 20 --episodes 2 --orders 4 "
                         "--shots 1,3", model, icl_tok);
    REQUIRE(a);
    const cJSON *p;
    cJSON_ArrayForEach(p, item(a, "curve")) CHECKF(json_num(p, "acc") == 0.2, "acc %g", json_num(p, "acc"));
    CHECK(json_num(item(item(a, "order"), "random"), "margin_mean") == 0);
    CHECK(json_num(item(item(a, "order"), "grouped"), "margin_mean") == 0);
    CHECK(json_num(item(item(a, "order"), "grouped"), "acc") == 0.2);
    cJSON_Delete(a);
}

TEST(eval_icl_cli_current_token_model_is_at_chance_exactly) {
    REQUIRE(setup() == 0);
    check_at_chance(current_token);
    check_at_chance(current_token_v2); /* DIFF V2 */
}

/* DIFF V2: the report's arithmetic. */
TEST(eval_icl_cli_diff2) {
    REQUIRE(setup() == 0);
    cJSON *a = eval_json("icl_v2.json", "icl --model %s --tokenizer %s --classes 4 --queries 8 --episodes 2 --orders 3 "
                         "--shots 1,2", icl_v2, icl_tok);
    REQUIRE(a);
    check_icl_json(a, 4, 8, 2, 3);
    cJSON_Delete(a);
}

TEST(eval_icl_cli_refusals) {
    REQUIRE(setup() == 0);
    const char *P = "difftx eval icl: ";
    char base[1024];
    snprintf(base, sizeof base, "eval icl --model %s --tokenizer %s --queries 2 --episodes 1", icl_model, icl_tok);
    struct {
        const char *extra, *want;
        int rc;
    } cases[] = {
        {"--classes 4 --shots 11", "holds 10 rounds", 2},
        {"--classes 4 --order-shots 11", "holds 10 rounds", 2},
        {"--shots 0", "--shots", 2},
        {"--shots 1,1", "repeats", 2},
        {"--shots 1,x", "--shots", 2},
        {"--classes 1", "--classes", 2},
        {"--classes 65", "--classes", 2},
        {"--orders 1", "--orders", 2},
        {"--queries 0", "--queries", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli("%s %s", base, cases[i].extra);
        CHECKF(rc == cases[i].rc && cli_one_line_from(P) && cli_has(cases[i].want), "%s: rc %d: %s", cases[i].extra,
               rc, cli_out);
    }
    /* a context too short for one round of 6 classes (1 + 36 + 4 > 32) */
    int rc = cli("eval icl --model %s --tokenizer %s --classes 6", short_model, icl_tok);
    CHECKF(rc == 2 && cli_one_line_from(P) && cli_has("max_seq_len 32"), "rc %d: %s", rc, cli_out);
    /* a tokenizer without the word tokens episodes are made of */
    rc = cli("eval icl --model %s --tokenizer %s", qa_model, qa_tok);
    CHECKF(rc == 2 && cli_one_line_from(P) && cli_has("word tokens"), "rc %d: %s", rc, cli_out);
    rc = cli("eval icl --model %s --tokenizer %s", test_path("missing.safetensors"), icl_tok);
    CHECKF(rc == 1 && cli_one_line_from(P), "rc %d: %s", rc, cli_out);
    CHECK(cli("eval icl --tokenizer %s", icl_tok) == 2 && cli_has("--model is required"));
    CHECK(cli("eval icl --help") == 0 && cli_has("usage: difftx eval icl"));
}

/* ------------------------------------------------------------ halluc */

/* The report's rates against their own counts, for one model. */
static void check_halluc_arithmetic(const char *model) {
    cJSON *a = eval_json("halluc.json", "halluc --model %s --tokenizer %s --haystack %s --samples 3 --list-needles 1,3",
                         model, qa_tok, hay);
    REQUIRE(a);
    const cJSON *c = item(a, "contradict"), *ab = item(a, "absent"), *l;
    CHECK(json_num(a, "length") == MAX_SEQ - (6 * 3 + 2));
    check_rate(item(c, "faithful"), 3), check_rate(item(c, "prior"), 3), check_rate(item(c, "fabricated"), 3);
    check_rate(item(c, "knows"), 3);
    CHECK(json_num(item(c, "faithful"), "k") + json_num(item(c, "prior"), "k") + json_num(item(c, "fabricated"), "k") == 3);
    check_rate(item(c, "faithful_given_knows"), json_num(item(c, "knows"), "k"));
    double right = 0, listed = 0, expected = 0;
    cJSON_ArrayForEach(l, item(a, "list")) {
        int n = (int)json_num(l, "needles");
        check_rate(item(l, "recall"), 3.0 * n);
        check_rate(item(l, "precision"), -1);
        check_rate(item(l, "exact"), 3);
        CHECK(json_num(item(l, "precision"), "k") == json_num(item(l, "recall"), "k"));
        right += json_num(item(l, "recall"), "k"), expected += 3.0 * n, listed += json_num(item(l, "precision"), "n");
    }
    CHECK(json_num(item(item(a, "list_pooled"), "recall"), "k") == right);
    check_rate(item(item(a, "list_pooled"), "recall"), expected);
    check_rate(item(item(a, "list_pooled"), "precision"), listed);
    check_rate(item(ab, "none_absent"), 3), check_rate(item(ab, "present_right"), 3), check_rate(item(ab, "none_present"), 3);
    cJSON_Delete(a);
}

TEST(eval_halluc_cli_json_arithmetic) {
    REQUIRE(setup() == 0);
    check_halluc_arithmetic(qa_model);
    check_halluc_arithmetic(qa_v2); /* DIFF V2 */
}

TEST(eval_halluc_cli_a_model_that_always_says_none) {
    REQUIRE(setup() == 0);
    cJSON *a = eval_json("halluc_none.json", "halluc --model %s --tokenizer %s --haystack %s --samples 4 "
                         "--list-needles 1,2", none_model, qa_tok, hay);
    REQUIRE(a);
    const cJSON *c = item(a, "contradict"), *ab = item(a, "absent"), *l;
    /* "none" holds no number: never faithful, never the prior, does not know the fact */
    CHECK(json_num(item(c, "fabricated"), "k") == 4 && json_num(item(c, "knows"), "k") == 0);
    /* right to every absent city, wrong to every present one */
    CHECK(json_num(item(ab, "none_absent"), "k") == 4 && json_num(item(ab, "none_present"), "k") == 4);
    CHECK(json_num(item(ab, "present_right"), "k") == 0);
    /* lists nothing: precision of no items, recall 0 */
    cJSON_ArrayForEach(l, item(a, "list")) {
        CHECK(json_num(item(l, "precision"), "n") == 0 && json_num(item(l, "recall"), "k") == 0);
    }
    cJSON_Delete(a);
}

TEST(eval_halluc_cli_refusals) {
    REQUIRE(setup() == 0);
    const char *P = "difftx eval halluc: ";
    char base[1024];
    snprintf(base, sizeof base, "eval halluc --model %s --tokenizer %s --haystack %s --samples 1", qa_model, qa_tok, hay);
    struct {
        const char *extra, *want;
        int rc;
    } cases[] = {
        {"--length 250", "holds prompts of at most 218", 2},
        {"--length 40", "--length 40", 2},
        {"--list-needles 17", "--list-needles", 2},
        {"--list-needles 2,2", "repeats", 2},
        {"--needles 0", "--needles", 2},
        {"--max-new 0", "--max-new", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli("%s %s", base, cases[i].extra);
        CHECKF(rc == cases[i].rc && cli_one_line_from(P) && cli_has(cases[i].want), "%s: rc %d: %s", cases[i].extra,
               rc, cli_out);
    }
    const char *empty = test_path("claims_empty.txt");
    REQUIRE(write_file(empty, "", 0) == 0);
    int rc = cli("eval halluc --model %s --tokenizer %s --haystack %s", qa_model, qa_tok, empty);
    CHECKF(rc == 2 && cli_one_line_from(P) && cli_has("no text"), "rc %d: %s", rc, cli_out);
    rc = cli("eval halluc --model %s --tokenizer %s --haystack %s", qa_model, qa_tok, test_path("missing.txt"));
    CHECKF(rc == 1 && cli_one_line_from(P), "rc %d: %s", rc, cli_out);
    CHECK(cli("eval halluc --model %s --tokenizer %s", qa_model, qa_tok) == 2 && cli_has("--haystack is required"));
    CHECK(cli("eval halluc --help") == 0 && cli_has("usage: difftx eval halluc"));
}
