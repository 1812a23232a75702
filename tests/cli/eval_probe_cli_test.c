/* difftx eval outliers and difftx eval attn-map, run as separate processes
 * on untrained tiny models (DIFF with GQA, and its Transformer baseline) and
 * a tokenizer trained inside the test: exit codes, the JSON they write, its
 * consistency with the library's probe, and one-line errors. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "difftx.h"
#include "eval/probe.h"
#include "test.h"

enum { EP_SEQ = 24 };

static const char TEXT[] =
    "the cat sat on the mat. the dog sat on the log. a cat and a dog and a mat. "
    "on the mat the cat sat; on the log the dog sat. the end of the story, and then "
    "another story began with a cat, a dog, a log and a mat, all of them on the mat.";

static dtx_tokenizer *tok;
static const char *tok_path, *diff_path, *tf_path, *v2_path, *ids_path, *text_path;

static int save_model(dtx_arch arch, const char *name, const char **path) {
    dtx_config c = dtx_config_default();
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.vocab_size = dtx_tokenizer_vocab_size(tok);
    c.ffn_dim = 64;
    c.max_seq_len = EP_SEQ;
    if (arch != DTX_ARCH_DIFF) c = dtx_config_baseline(&c);
    if (arch == DTX_ARCH_DIFF2) c.arch = DTX_ARCH_DIFF2; /* the Transformer's 4 heads (2 KV) as output heads */
    *path = test_model_file(name, &c, arch == DTX_ARCH_DIFF ? 21 : arch == DTX_ARCH_DIFF2 ? 23 : 22);
    return *path ? 0 : -1;
}

/* Tokenizer, both models, a file of 100 token ids and a text file. */
static int setup(void) {
    if (tok) return 0;
    const char *texts[] = {TEXT};
    if (!(tok = test_tokenizer_file(texts, 1, 300, "probe.tok", &tok_path))) return -1;
    if (save_model(DTX_ARCH_DIFF, "diff.safetensors", &diff_path) ||
        save_model(DTX_ARCH_TRANSFORMER, "tf.safetensors", &tf_path) || save_model(DTX_ARCH_DIFF2, "v2.safetensors", &v2_path))
        return -1;
    char ids[1024];
    size_t o = 0;
    int64_t V = dtx_tokenizer_vocab_size(tok);
    for (int i = 0; i < 100; i++) o += (size_t)snprintf(ids + o, sizeof ids - o, "%d ", (int)((i * 37 + 5) % V));
    ids_path = test_path("ids.txt");
    text_path = test_path("text.txt");
    return write_file(ids_path, ids, o) || write_file(text_path, TEXT, strlen(TEXT)) ? -1 : 0;
}

/* ------------------------------------------------------------ outliers */

/* top1 >= top2 >= top3 >= top10 >= top100 >= median >= 0, and the "top"
 * list descending from top1. */
static void check_stats_order(const cJSON *s, const char *what) {
    REQUIREF(cJSON_IsObject(s), "%s missing", what);
    const char *keys[] = {"top1", "top2", "top3", "top10", "top100", "median"};
    double prev = INFINITY;
    for (int i = 0; i < 6; i++) {
        double v = json_num(s, keys[i]);
        CHECKF(v <= prev && v >= 0, "%s: %s = %g after %g", what, keys[i], v, prev);
        prev = v;
    }
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(s, "top");
    REQUIRE(cJSON_IsArray(top) && cJSON_GetArraySize(top) == DTX_STATS_TOPK);
    CHECK(cJSON_GetArrayItem(top, 0)->valuedouble == json_num(s, "top1"));
    CHECK(cJSON_GetArrayItem(top, 99)->valuedouble == json_num(s, "top100"));
    for (int i = 1; i < DTX_STATS_TOPK; i++)
        CHECK(cJSON_GetArrayItem(top, i)->valuedouble <= cJSON_GetArrayItem(top, i - 1)->valuedouble);
}

/* The same windows through the library: the counts and top-1 agree. */
static void check_against_library(const char *model, const cJSON *j, int64_t windows, int64_t W) {
    dtx_model *m = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    REQUIRE(dtx_model_load(&m, model) == DTX_OK);
    REQUIRE(dtx_tokens_read(ids_path, 0, &ids, &n) == DTX_OK);
    dtx_abs_stats lg, hs;
    REQUIRE(!dtx_abs_stats_init(&lg) && !dtx_abs_stats_init(&hs));
    for (int64_t w = 0; w < windows; w++) {
        REQUIRE(dtx_model_forward(m, ids + w * W, NULL, 1, W, NULL, NULL) == DTX_OK);
        REQUIRE(!dtx_probe_add_logits(m, &lg) && !dtx_probe_add_hidden(m, &hs));
    }
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(j, "attention_logits");
    const cJSON *jh = cJSON_GetObjectItemCaseSensitive(j, "hidden_states");
    CHECK(json_num(jl, "count") == (double)lg.count && json_num(jh, "count") == (double)hs.count);
    CHECK(fabs(json_num(jl, "top1") - lg.top[0]) <= 1e-8 * lg.top[0]);
    CHECK(fabs(json_num(jh, "median") - dtx_abs_stats_median(&hs)) <= 1e-8 * dtx_abs_stats_median(&hs));
    dtx_abs_stats_free(&lg);
    dtx_abs_stats_free(&hs);
    free(ids);
    dtx_model_free(m);
}

/* nq: the query (sub-)heads whose maps count, per layer (DIFF 2 heads x 2 maps, the Transformer 4, V2 8). */
static void check_outliers(const char *model, int64_t nq) {
    char name[32];
    snprintf(name, sizeof name, "outl_%lld.json", (long long)nq);
    const char *json = test_path(name);
    int rc = cli("eval outliers --model %s --tokens %s --window 16 --count 70 --json %s", model, ids_path, json);
    REQUIREF(rc == 0, "exit %d: %s", rc, cli_out);
    CHECK(strstr(cli_out, "Top-100") && strstr(cli_out, "attention logits") && strstr(cli_out, "hidden states"));
    cJSON *j = read_json(json);
    REQUIREF(j, "cannot parse %s", json);
    /* 70 tokens, windows of 16: 4 whole windows, 64 tokens */
    CHECK(json_num(j, "tokens") == 64 && json_num(j, "windows") == 4 && json_num(j, "window") == 16 && json_num(j, "input_tokens") == 100);
    int64_t L = 2, NQ = nq, D = 32;
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(j, "attention_logits");
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(j, "hidden_states");
    CHECKF(json_num(lg, "count") == (double)(4 * L * NQ * 16 * 17 / 2), "logits counted %g", json_num(lg, "count"));
    CHECKF(json_num(hs, "count") == (double)(4 * 16 * L * D), "hidden counted %g", json_num(hs, "count"));
    check_stats_order(lg, "attention_logits");
    check_stats_order(hs, "hidden_states");
    check_against_library(model, j, 4, 16);
    cJSON_Delete(j);
}

TEST(eval_probe_cli_outliers_json) {
    REQUIRE(setup() == 0);
    check_outliers(diff_path, 4);
    check_outliers(tf_path, 4);
    check_outliers(v2_path, 8); /* V2: both query heads of each of the 4 pairs */
}

TEST(eval_probe_cli_outliers_text) {
    REQUIRE(setup() == 0);
    const char *json = test_path("outl_text.json");
    int rc = cli("eval outliers --model %s --text %s --tokenizer %s --json %s --precision bf16", diff_path,
                 text_path, tok_path, json);
    REQUIREF(rc == 0, "exit %d: %s", rc, cli_out);
    cJSON *j = read_json(json);
    REQUIRE(j);
    double T = json_num(j, "tokens");
    CHECKF(json_num(j, "window") == EP_SEQ && T >= EP_SEQ && fmod(T, EP_SEQ) == 0, "tokens %g window %g", T,
           json_num(j, "window"));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "precision");
    CHECK(cJSON_IsString(p) && strcmp(p->valuestring, "bf16") == 0);
    cJSON_Delete(j);
}

TEST(eval_probe_cli_outliers_errors) {
    REQUIRE(setup() == 0);
    const char *P = "difftx eval outliers: ";
    CHECK(cli("eval outliers --tokens %s", ids_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s", diff_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --tokens %s --text %s --tokenizer %s", diff_path, ids_path, text_path,
              tok_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --text %s", diff_path, text_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --tokens %s --window 0", diff_path, ids_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --tokens %s --window 100", diff_path, ids_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --tokens %s --window 16 --count 8", diff_path, ids_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --tokens %s --count x", diff_path, ids_path) == 2 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --tokens %s --bogus", diff_path, ids_path) == 2 && cli_one_line_from(P));
    const char *short_ids = test_path("short.txt");
    REQUIRE(write_file(short_ids, "1 2 3 4 5", 9) == 0);
    CHECK(cli("eval outliers --model %s --tokens %s", diff_path, short_ids) == 1 && cli_one_line_from(P) &&
          strstr(cli_out, "fewer than one window"));
    const char *bad_ids = test_path("bad_ids.txt");
    REQUIRE(write_file(bad_ids, "1 2 99999", 9) == 0);
    CHECK(cli("eval outliers --model %s --tokens %s", diff_path, bad_ids) == 1 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s --tokens %s/none.txt", diff_path, test_tmpdir()) == 1 && cli_one_line_from(P));
    CHECK(cli("eval outliers --model %s/none.safetensors --tokens %s", test_tmpdir(), ids_path) == 1 && cli_one_line_from(P));
    const char *json = test_path("no/such/dir/o.json");
    CHECK(cli("eval outliers --model %s --tokens %s --window 16 --json %s", diff_path, ids_path, json) == 1 &&
          strstr(cli_out, P) && strstr(cli_out, "cannot write"));
    CHECK(access(json, F_OK) != 0);
    CHECK(cli("eval outliers --help") == 0 && strstr(cli_out, "usage: difftx eval outliers"));
}

/* ------------------------------------------------------------ attn-map */

static const cJSON *map_of(const cJSON *j, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "maps"), name);
}

static double at(const cJSON *map, int t, int s) {
    return cJSON_GetArrayItem(cJSON_GetArrayItem(map, t), s)->valuedouble;
}

/* T x T, zeros above the diagonal, rows summing to want. */
static void check_map(const cJSON *map, int T, double want, const char *what) {
    REQUIREF(cJSON_IsArray(map) && cJSON_GetArraySize(map) == T, "%s: not %d rows", what, T);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        const cJSON *row = cJSON_GetArrayItem(map, t);
        REQUIREF(cJSON_IsArray(row) && cJSON_GetArraySize(row) == T, "%s: row %d", what, t);
        double sum = 0;
        for (int s = 0; s < T; s++) {
            double v = at(map, t, s);
            if (s > t) CHECKF(v == 0, "%s: [%d][%d] = %g above the diagonal", what, t, s, v);
            sum += v;
        }
        worst = fmax(worst, fabs(sum - want));
    }
    CHECKF(worst < 1e-6, "%s: row sums differ from %g by %.3g", what, want, worst);
}

/* <|bos|> + the encoded text. */
static int64_t prompt_len(const char *text) {
    int32_t *ids = NULL;
    int64_t n = 0;
    if (dtx_tokenizer_encode(tok, text, strlen(text), DTX_ENCODE_ORDINARY, &ids, &n) != DTX_OK) return -1;
    free(ids);
    return n + 1;
}

static const char PROMPT[] = "the cat sat on the mat.";

TEST(eval_probe_cli_attn_map_diff) {
    REQUIRE(setup() == 0);
    const char *json = test_path("map_diff.json");
    int rc = cli("eval attn-map --model %s --tokenizer %s --text '%s' --layer 1 --head 1 --json %s", diff_path,
                 tok_path, PROMPT, json);
    REQUIREF(rc == 0, "exit %d: %s", rc, cli_out);
    CHECK(strstr(cli_out, "lambda") && strstr(cli_out, "most attended key"));
    cJSON *j = read_json(json);
    REQUIRE(j);
    int T = (int)prompt_len(PROMPT);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "arch"), *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    CHECK(cJSON_IsString(arch) && strcmp(arch->valuestring, "diff") == 0);
    CHECK(json_num(j, "layer") == 1 && json_num(j, "head") == 1 && json_num(j, "T") == T);
    REQUIRE(cJSON_IsArray(toks) && cJSON_GetArraySize(toks) == T);
    CHECK(strcmp(cJSON_GetArrayItem(toks, 0)->valuestring, "<|bos|>") == 0);
    dtx_model *m = NULL;
    REQUIRE(dtx_model_load(&m, diff_path) == DTX_OK);
    double lambda = json_num(j, "lambda");
    CHECKF(fabs(lambda - dtx_model_lambda(m, 1)) < 1e-8, "lambda %g vs %g", lambda, dtx_model_lambda(m, 1));
    dtx_model_free(m);
    check_map(map_of(j, "a1"), T, 1.0, "a1");
    check_map(map_of(j, "a2"), T, 1.0, "a2");
    check_map(map_of(j, "diff"), T, 1.0 - lambda, "diff");
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int s = 0; s <= t; s++)
            worst = fmax(worst, fabs(at(map_of(j, "diff"), t, s) -
                                     (at(map_of(j, "a1"), t, s) - lambda * at(map_of(j, "a2"), t, s))));
    CHECKF(worst < 1e-7, "diff vs a1 - lambda a2: %.3g", worst);
    cJSON_Delete(j);
}

TEST(eval_probe_cli_attn_map_transformer) {
    REQUIRE(setup() == 0);
    const char *json = test_path("map_tf.json"), *prompt = test_path("prompt.txt");
    REQUIRE(write_file(prompt, PROMPT, strlen(PROMPT)) == 0);
    int rc = cli("eval attn-map --model %s --tokenizer %s --prompt-file %s --head 3 --json %s", tf_path, tok_path,
                 prompt, json);
    REQUIREF(rc == 0, "exit %d: %s", rc, cli_out);
    cJSON *j = read_json(json);
    REQUIRE(j);
    int T = (int)prompt_len(PROMPT);
    CHECK(json_num(j, "T") == T && json_num(j, "head") == 3 && json_num(j, "layer") == 0);
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "lambda")));
    check_map(map_of(j, "a1"), T, 1.0, "a1");
    CHECK(map_of(j, "a2") == NULL && map_of(j, "diff") == NULL);
    cJSON_Delete(j);
}

/* A prompt longer than max_seq_len is cut to it (from the start). */
TEST(eval_probe_cli_attn_map_cuts_long_prompt) {
    REQUIRE(setup() == 0);
    const char *json = test_path("map_long.json");
    REQUIRE(prompt_len(TEXT) > EP_SEQ);
    int rc = cli("eval attn-map --model %s --tokenizer %s --prompt-file %s --json %s", diff_path, tok_path,
                 text_path, json);
    REQUIREF(rc == 0, "exit %d: %s", rc, cli_out);
    CHECK(strstr(cli_out, "cut to max_seq_len") != NULL);
    cJSON *j = read_json(json);
    REQUIRE(j);
    CHECK(json_num(j, "T") == EP_SEQ && json_num(j, "prompt_tokens") == (double)prompt_len(TEXT));
    check_map(map_of(j, "a1"), EP_SEQ, 1.0, "a1");
    cJSON_Delete(j);
}

TEST(eval_probe_cli_attn_map_errors) {
    REQUIRE(setup() == 0);
    const char *P = "difftx eval attn-map: ", *json = test_path("map_err.json");
    const char *base = "eval attn-map --model %s --tokenizer %s --text cat";
    char fmt[256];
#define ERR(extra, code)                                                                         \
    do {                                                                                         \
        snprintf(fmt, sizeof fmt, "%s %s", base, extra);                                         \
        int rc_ = cli(fmt, diff_path, tok_path, json);                                           \
        CHECKF(rc_ == (code) && cli_one_line_from(P), "'%s': exit %d: %s", extra, rc_, cli_out); \
    } while (0)
    ERR("--json %s --head 2", 2);  /* DIFF has 2 heads */
    ERR("--json %s --layer 2", 2); /* and 2 layers */
    ERR("--json %s --head -1", 2);
    ERR("--json %s --prompt-file x", 2);
    ERR("--json %s --precision fp64", 2);
#undef ERR
    /* no --json: the summary alone (a library caller gets the maps as the result) */
    CHECK(cli("eval attn-map --model %s --tokenizer %s --text cat", diff_path, tok_path) == 0 &&
          strstr(cli_out, "most attended key") && !strstr(cli_out, "wrote"));
    CHECK(cli("eval attn-map --model %s --tokenizer %s --json %s", diff_path, tok_path, json) == 2 && cli_one_line_from(P));
    CHECK(cli("eval attn-map --tokenizer %s --text a --json %s", tok_path, json) == 2 && cli_one_line_from(P));
    CHECK(cli("eval attn-map --model %s --text a --json %s", diff_path, json) == 2 && cli_one_line_from(P));
    CHECK(cli("eval attn-map --model %s/none --tokenizer %s --text a --json %s", test_tmpdir(), tok_path, json) == 1 &&
          cli_one_line_from(P));
    CHECK(cli("eval attn-map --model %s --tokenizer %s/none --text a --json %s", diff_path, test_tmpdir(), json) == 1 &&
          cli_one_line_from(P));
    CHECK(cli("eval attn-map --model %s --tokenizer %s --prompt-file %s/none --json %s", diff_path, tok_path,
              test_tmpdir(), json) == 1 && cli_one_line_from(P));
    CHECK(cli("eval attn-map --model %s --tokenizer %s --text a --json %s/no/dir/m.json", diff_path, tok_path,
              test_tmpdir()) == 1 && strstr(cli_out, "cannot write"));
    CHECK(access(json, F_OK) != 0);
}

/* tools/plot_eval.py draws DIFF beside its baseline (when matplotlib is
 * there and the test runs from the repository root). */
TEST(eval_probe_cli_plot_attn_map) {
    REQUIRE(setup() == 0);
    if (access("tools/plot_eval.py", R_OK) != 0 ||
        system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
        SKIP("needs tools/plot_eval.py and python3-matplotlib");
    const char *a = test_path("plot_diff.json"), *b = test_path("plot_tf.json"), *png = test_path("maps.png");
    REQUIRE(cli("eval attn-map --model %s --tokenizer %s --text '%s' --json %s", diff_path, tok_path, PROMPT, a) == 0);
    REQUIRE(cli("eval attn-map --model %s --tokenizer %s --text '%s' --json %s", tf_path, tok_path, PROMPT, b) == 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/plot_eval.py attn-map %s %s --out %s >/dev/null 2>&1", a, b, png);
    CHECK(system(cmd) == 0);
    char *buf = NULL;
    size_t len = 0;
    REQUIRE(dtx_read_file(png, &buf, &len) == DTX_OK);
    CHECK(len > 1000 && memcmp(buf, "\x89PNG", 4) == 0);
    free(buf);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/plot_eval.py attn-map %s/none.json %s >/dev/null 2>&1",
             test_tmpdir(), png);
    CHECK(WEXITSTATUS(system(cmd)) == 1);
}

/* DIFF V2: each head has two maps (its pair of query heads) and the combined
 * map uses each row's own λ, which the JSON lists (lambda_rows) and the
 * library agrees with: diff[t] = a1[t] − λ_t·a2[t], each row summing to
 * 1 − λ_t, λ_t in (0, 1), and `lambda` their mean over the layer's heads. */
TEST(eval_probe_cli_attn_map_diff2) {
    REQUIRE(setup() == 0);
    const char *json = test_path("map_v2.json");
    int rc = cli("eval attn-map --model %s --tokenizer %s --text '%s' --layer 1 --head 3 --json %s", v2_path, tok_path,
                 PROMPT, json);
    REQUIREF(rc == 0, "exit %d: %s", rc, cli_out);
    CHECK(strstr(cli_out, "diff2, layer 1, head 3") && strstr(cli_out, "(A1 - lambda*A2)"));
    cJSON *j = read_json(json);
    REQUIRE(j);
    int T = (int)prompt_len(PROMPT);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "lambda_rows");
    REQUIRE(cJSON_IsArray(rows) && cJSON_GetArraySize(rows) == T);
    check_map(map_of(j, "a1"), T, 1.0, "a1");
    check_map(map_of(j, "a2"), T, 1.0, "a2");
    double worst = 0, lo = 1, hi = 0;
    for (int t = 0; t < T; t++) {
        double l = cJSON_GetArrayItem(rows, t)->valuedouble, sum = 0;
        lo = fmin(lo, l), hi = fmax(hi, l);
        for (int s = 0; s <= t; s++) {
            double d = at(map_of(j, "diff"), t, s);
            worst = fmax(worst, fabs(d - (at(map_of(j, "a1"), t, s) - l * at(map_of(j, "a2"), t, s))));
            sum += d;
        }
        worst = fmax(worst, fabs(sum - (1 - l)));
    }
    CHECKF(worst < 1e-7 && lo > 0 && hi < 1 && hi > lo, "diff vs a1 - lambda_t a2: %.3g, lambda in [%g, %g]", worst, lo,
           hi);
    /* the layer's mean over the prompt's rows and heads, from the library's own forward */
    dtx_model *m = NULL;
    REQUIRE(dtx_model_load(&m, v2_path) == DTX_OK);
    int32_t *ids = NULL;
    int64_t n = 0;
    REQUIRE(dtx_tokenizer_encode(tok, PROMPT, strlen(PROMPT), DTX_ENCODE_ORDINARY, &ids, &n) == DTX_OK);
    int32_t *x = malloc((size_t)(n + 1) * sizeof *x);
    REQUIRE(x);
    x[0] = dtx_tokenizer_token_id(tok, "<|bos|>");
    memcpy(x + 1, ids, (size_t)n * sizeof *x);
    REQUIRE(dtx_model_forward(m, x, NULL, 1, n + 1, NULL, NULL) == DTX_OK);
    double mean = 0;
    for (int h = 0; h < 4; h++)
        for (int t = 0; t < T; t++) mean += dtx_probe_lambda_row(m, 0, 1, h, t) / (4.0 * T);
    CHECKF(fabs(mean - json_num(j, "lambda")) < 1e-8 && fabs(mean - dtx_probe_lambda(m, 1)) < 1e-12, "%g vs %g", mean,
           json_num(j, "lambda"));
    CHECK(fabs(dtx_probe_lambda_row(m, 0, 1, 3, T - 1) - cJSON_GetArrayItem(rows, T - 1)->valuedouble) < 1e-8);
    free(ids), free(x);
    dtx_model_free(m);
    cJSON_Delete(j);
}
