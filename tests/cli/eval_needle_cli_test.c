/* difftx eval needle and difftx eval attn-mass, run as separate processes on
 * tiny untrained models: exit codes, the JSON's shape and arithmetic, that a
 * cell's prompts do not depend on the rest of the grid, and the one-line
 * errors. A hand-built bigram model (its next token depends only on the
 * current one) checks the greedy decoding: <|bos|> and <|pad|> banned, the
 * text cut at the newline. The attention masses are recomputed here from the
 * probe for one prompt. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "eval/needle.h"
#include "eval/probe.h"
#include "test.h"

static const char FRAMING[] = "There is a special magic number inside a lot of irrelevant text. Find it and memorize "
                              "them. I will quiz you about the magic number there.\n";

static char *haystack_text(size_t *len) {
    static const char *const w[] = {"The farmer", "A river", "The old town", "Our committee", "The winter"};
    static const char *const v[] = {"watched", "remembered", "carried", "followed"};
    static const char *const o[] = {"the harvest", "the road", "a letter", "the bridge", "the market", "the bells"};
    size_t cap = 32 * 1024, n = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(t + n, cap - n, "%s %s %s.%s", w[i % 5], v[(i / 5) % 4], o[(i * 7) % 6],
                              i % 11 == 10 ? "\n" : " ");
    *len = n;
    return t;
}

static dtx_tokenizer *tok;
static const char *tok_path, *hay_path;
static dtx_model *diff1, *tf1; /* kept: the tests read their λ and recompute rows */
static const char *diff1_path, *tf1_path, *bigram_path;

enum { MAX_SEQ = 256 };

static dtx_config tiny(dtx_arch arch, int64_t dim, int64_t layers) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = dim;
    c.n_layers = layers;
    c.n_heads = 2;
    c.n_kv_heads = arch == DTX_ARCH_DIFF ? 1 : 2;
    c.vocab_size = dtx_tokenizer_vocab_size(tok);
    c.ffn_dim = 64;
    c.max_seq_len = MAX_SEQ;
    c.tie_embeddings = 0;
    return c;
}

static const char *save_model(dtx_model *m, const char *name) {
    const char *p = test_path(name);
    return dtx_model_save(m, p, 0) == DTX_OK ? p : NULL;
}

static dtx_real *param(dtx_model *m, const char *name, size_t *numel) {
    const dtx_tensor_info *t = dtx_model_find(m, name);
    if (!t) return NULL;
    if (numel) *numel = t->numel;
    return dtx_model_params(m) + t->offset;
}

/* Attention and FFN write nothing, the embedding is one-hot and the output
 * row y holds w(x -> y) at column x: logits(y | x) = w · sqrt(dim). After
 * " " (the question's last token) <|bos|> would win and '4' is second; after
 * '4' comes '2'; after '2' <|pad|> would win and '\n' is second. So the
 * decoded answer is "42" exactly when both bans and the newline stop work. */
static const char *bigram_model(void) {
    int64_t V = dtx_tokenizer_vocab_size(tok);
    dtx_config c = tiny(DTX_ARCH_TRANSFORMER, 512, 1);
    if (V > c.dim) return NULL;
    dtx_model *m = NULL;
    if (dtx_model_init(&m, &c, 5) != DTX_OK) return NULL;
    size_t n = 0;
    dtx_real *p;
    if ((p = param(m, "layers.0.attention.out_proj.weight", &n))) memset(p, 0, n * sizeof *p);
    if ((p = param(m, "layers.0.feed_forward.w2.weight", &n))) memset(p, 0, n * sizeof *p);
    dtx_real *emb = param(m, "tok_embeddings.weight", &n), *outw = param(m, "output.weight", NULL);
    const char *path = NULL;
    int32_t bos = dtx_tokenizer_token_id(tok, "<|bos|>"), pad = dtx_tokenizer_token_id(tok, "<|pad|>");
    if (emb && outw && bos >= 0 && pad >= 0) {
        memset(emb, 0, n * sizeof *emb);
        memset(outw, 0, n * sizeof *outw);
        for (int64_t x = 0; x < V; x++) emb[x * c.dim + x] = 1;
#define W(y, x, v) outw[(int64_t)(y) * c.dim + (x)] = (v)
        W(bos, ' ', 1);
        W('4', ' ', 0.5f);
        W('2', '4', 1);
        W(pad, '2', 1);
        W('\n', '2', 0.5f);
#undef W
        path = save_model(m, "bigram.safetensors");
    }
    dtx_model_free(m);
    return path;
}

static int setup(void) {
    if (bigram_path) return 0;
    size_t len = 0;
    char *text = haystack_text(&len);
    if (!text) return -1;
    const char *texts[] = {text, FRAMING,
                           "The special magic Paris number is: 12345. What is the special magic Paris number? "
                           "The special magic Tokyo number is 67890"};
    tok = test_tokenizer_file(texts, 3, 400, "needle.tok", &tok_path);
    hay_path = test_path("hay.txt");
    int ok = tok && write_file(hay_path, text, len) == 0;
    free(text);
    if (!ok) return -1;
    dtx_config cd = tiny(DTX_ARCH_DIFF, 32, 1), ct = tiny(DTX_ARCH_TRANSFORMER, 32, 1);
    if (dtx_model_init(&diff1, &cd, 11) != DTX_OK || dtx_model_init(&tf1, &ct, 12) != DTX_OK) return -1;
    diff1_path = save_model(diff1, "diff1.safetensors");
    tf1_path = save_model(tf1, "tf1.safetensors");
    bigram_path = bigram_model();
    return diff1_path && tf1_path && bigram_path ? 0 : -1;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* acc = k/n, inside its Wilson interval, which is the library's. */
static void check_rate(const cJSON *o, const char *acc, const char *k, const char *n, const char *lo, const char *hi) {
    double kk = json_num(o, k), nn = json_num(o, n), a = json_num(o, acc), l = json_num(o, lo), h = json_num(o, hi), wl, wh;
    CHECKF(nn > 0 && kk >= 0 && kk <= nn, "%s %g of %g", k, kk, nn);
    CHECKF(fabs(a - kk / nn) < 1e-12 && a >= 0 && a <= 1, "%s %g, %g/%g", acc, a, kk, nn);
    dtx_wilson95((int64_t)kk, (int64_t)nn, &wl, &wh);
    CHECK(fabs(l - wl) < 1e-12 && fabs(h - wh) < 1e-12 && l <= a && a <= h);
}

static void check_cell(const cJSON *c, int64_t samples) {
    double r = json_num(c, "r");
    CHECK(json_num(c, "samples") == (double)samples);
    CHECK(json_num(c, "queries") == r * (double)samples);
    check_rate(c, "acc", "correct_queries", "queries", "acc_lo", "acc_hi");
    check_rate(c, "all_acc", "all_correct", "samples", "all_lo", "all_hi");
    CHECK(json_num(c, "all_correct") <= json_num(c, "correct_queries"));
    CHECK(json_num(c, "mean_prompt_tokens") <= json_num(c, "length") && json_num(c, "mean_prompt_tokens") > 0.9 * json_num(c, "length"));
}

TEST(eval_needle_cli_json) {
    REQUIRE(setup() == 0);
    const char *js = test_path("needle.json");
    int rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 200,240 --grid 1x1,3x2 --depths 0,50,100 "
                 "--samples 3 --json %s",
                 diff1_path, tok_path, hay_path, js);
    REQUIREF(rc == 0, "rc %d: %s", rc, cli_out);
    CHECK(cli_has("Table 2") && cli_has("N=3, R=2: per-query accuracy") && cli_has("N=3, R=2: all-correct rate"));
    cJSON *root = read_json(js);
    REQUIRE(root);
    CHECK(strcmp(str(root, "arch"), "diff") == 0 && json_num(root, "samples") == 3 && json_num(root, "seed") == 1);
    CHECK(json_num(root, "params") == (double)dtx_model_num_params(diff1));
    const cJSON *cells = cJSON_GetObjectItemCaseSensitive(root, "cells");
    const cJSON *t2 = cJSON_GetObjectItemCaseSensitive(root, "table2");
    REQUIRE(cJSON_GetArraySize(cells) == 2 * 2 * 3 && cJSON_GetArraySize(t2) == 2 * 2);
    const cJSON *c;
    cJSON_ArrayForEach(c, cells) check_cell(c, 3);
    /* table2 pools its (n, r, length)'s depths. */
    const cJSON *row;
    cJSON_ArrayForEach(row, t2) {
        double k = 0, q = 0, all = 0;
        cJSON_ArrayForEach(c, cells) if (json_num(c, "n") == json_num(row, "n") && json_num(c, "length") == json_num(row, "length")) {
            k += json_num(c, "correct_queries");
            q += json_num(c, "queries");
            all += json_num(c, "all_correct");
        }
        CHECK(json_num(row, "correct_queries") == k && json_num(row, "queries") == q && json_num(row, "all_correct") == all);
        CHECK(json_num(row, "samples") == 9);
        check_rate(row, "acc", "correct_queries", "queries", "lo", "hi");
    }
    cJSON_Delete(root);
}

/* Seeds follow from the cell's values: one depth alone, or another grid
 * order, gives that cell's prompts again (the example names its first
 * prompt's city and number, and what the model answered). */
TEST(eval_needle_cli_cells_independent) {
    REQUIRE(setup() == 0);
    const char *a = test_path("grid-a.json"), *b = test_path("grid-b.json");
    int rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 220 --grid 1x1,2x2 --depths 0,50 "
                 "--samples 2 --json %s",
                 diff1_path, tok_path, hay_path, a);
    REQUIREF(rc == 0, "%s", cli_out);
    rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 220 --grid 2x2 --depths 50 --samples 2 "
             "--json %s",
             diff1_path, tok_path, hay_path, b);
    REQUIREF(rc == 0, "%s", cli_out);
    cJSON *ja = read_json(a), *jb = read_json(b);
    REQUIRE(ja && jb);
    const cJSON *cb = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(jb, "cells"), 0), *c, *match = NULL;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(ja, "cells")) if (json_num(c, "n") == 2 && json_num(c, "depth") == 50)
        match = c;
    REQUIRE(cb && match);
    const cJSON *ea = cJSON_GetObjectItemCaseSensitive(match, "example");
    const cJSON *eb = cJSON_GetObjectItemCaseSensitive(cb, "example");
    CHECK(strcmp(str(ea, "city"), str(eb, "city")) == 0 && strcmp(str(ea, "number"), str(eb, "number")) == 0);
    CHECK(strcmp(str(ea, "output"), str(eb, "output")) == 0);
    CHECK(strlen(str(ea, "number")) == 5);
    CHECK(json_num(match, "correct_queries") == json_num(cb, "correct_queries"));
    /* Another seed, other prompts. */
    rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 220 --grid 2x2 --depths 50 --samples 2 "
             "--seed 2 --json %s",
             diff1_path, tok_path, hay_path, b);
    REQUIRE(rc == 0);
    cJSON_Delete(jb);
    REQUIRE((jb = read_json(b)));
    eb = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(jb, "cells"), 0),
                                          "example");
    CHECK(strcmp(str(ea, "number"), str(eb, "number")) != 0);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

TEST(eval_needle_cli_greedy_decoding) {
    REQUIRE(setup() == 0);
    const char *js = test_path("bigram.json");
    int rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 200 --grid 1x1,2x2 --depths 0,100 "
                 "--samples 2 --json %s",
                 bigram_path, tok_path, hay_path, js);
    REQUIREF(rc == 0, "%s", cli_out);
    cJSON *root = read_json(js);
    REQUIRE(root);
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cells")) {
        const char *o = str(cJSON_GetObjectItemCaseSensitive(c, "example"), "output");
        CHECKF(strcmp(o, "42") == 0, "output '%s'", o);
        CHECK(json_num(c, "correct_queries") == 0); /* "42" holds no 5-digit number */
        n++;
    }
    CHECK(n == 4);
    cJSON_Delete(root);
}

TEST(eval_needle_cli_errors) {
    REQUIRE(setup() == 0);
    const char *P = "difftx eval needle: ";
    char base[2048];
    snprintf(base, sizeof base, "eval needle --model %s --tokenizer %s --haystack %s --samples 1", diff1_path, tok_path,
             hay_path);
    struct {
        const char *extra, *want;
        int rc;
    } cases[] = {
        {"--grid 3x4", "--grid", 2},        {"--grid 2x", "--grid", 2},
        {"--grid 17x1", "--grid", 2},       {"--grid 1x1,1x1", "repeats", 2},
        {"--depths 101", "--depths", 2},    {"--depths 0,,50", "--depths", 2},
        {"--depths nan", "--depths", 2},    {"--lengths 0", "--lengths", 2},
        {"--lengths 1.5", "--lengths", 2},  {"--lengths 250", "max_seq_len 256", 2},
        {"--lengths 30", "too short", 2},   {"--samples 0", "--samples", 2},
        {"--max-new 0", "--max-new", 2},    {"--attn-bits 1", "--attn-bits", 2},
        {"--attn-bits 17", "--attn-bits", 2}, {"--attn-scope col", "--attn-scope", 2},
        {"--bogus 1", "unknown flag", 2},   {"--precision fp16", "--precision", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli("%s %s", base, cases[i].extra);
        CHECKF(rc == cases[i].rc && cli_one_line_from(P) && cli_has(cases[i].want), "%s: rc %d: %s", cases[i].extra, rc, cli_out);
    }
    CHECK(cli("eval needle --tokenizer %s --haystack %s", tok_path, hay_path) == 2 && cli_has("--model is required"));
    CHECK(cli("eval needle --model %s --haystack %s", diff1_path, hay_path) == 2 && cli_has("--tokenizer is required"));
    CHECK(cli("eval needle --model %s --tokenizer %s", diff1_path, tok_path) == 2 && cli_has("--haystack is required"));
    CHECK(cli("eval needle --help") == 0 && cli_has("usage: difftx eval needle"));
}

/* Files that are missing or not what they claim: one line, exit 1, no crash. */
TEST(eval_needle_cli_bad_files) {
    REQUIRE(setup() == 0);
    const char *P = "difftx eval needle: ";
    const char *garbage = test_path("garbage.bin"), *empty = test_path("empty.txt");
    REQUIRE(write_file(garbage, "\x01\x02garbage\xff\n", 11) == 0 && write_file(empty, "", 0) == 0);
    const char *missing = test_path("missing");
    const char *cmds[][3] = {
        {missing, tok_path, hay_path}, {garbage, tok_path, hay_path}, {diff1_path, missing, hay_path},
        {diff1_path, garbage, hay_path}, {diff1_path, tok_path, missing}, {diff1_path, tok_path, empty},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        int rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 200 --samples 1", cmds[i][0],
                     cmds[i][1], cmds[i][2]);
        CHECKF(rc == 1 && cli_one_line_from(P), "case %zu: rc %d: %s", i, rc, cli_out);
    }
    /* A JSON path that cannot be written. */
    int rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 200 --grid 1x1 --depths 50 "
                 "--samples 1 --json %s/no-dir/x.json",
                 diff1_path, tok_path, hay_path, test_tmpdir());
    CHECKF(rc == 1 && cli_has("no-dir"), "rc %d: %s", rc, cli_out);
}

/* ------------------------------------------------------------ attn-mass */

static const cJSON *depth_entry(const cJSON *root, double depth) {
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "depths")) if (json_num(d, "depth") == depth) return d;
    return NULL;
}

static void seg4(const cJSON *d, const char *map, const char *kind, double v[4]) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, map), kind);
    const char *k[4] = {"bos", "answer", "context", "query"};
    for (int i = 0; i < 4; i++) v[i] = json_num(o, k[i]);
}

TEST(eval_attn_mass_cli_json) {
    REQUIRE(setup() == 0);
    const char *js = test_path("mass-diff.json");
    int rc = cli("eval attn-mass --model %s --tokenizer %s --haystack %s --length 220 --needles 3 --samples 2 "
                 "--json %s",
                 diff1_path, tok_path, hay_path, js);
    REQUIREF(rc == 0, "%s", cli_out);
    CHECK(cli_has("answer") && cli_has("noise(context)") && cli_has("BOS") && cli_has("query"));
    cJSON *root = read_json(js);
    REQUIRE(root);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "depths")) == 5);
    double lambda = dtx_model_lambda(diff1, 0);
    for (int di = 0; di <= 4; di++) {
        const cJSON *d = depth_entry(root, 25.0 * di);
        REQUIRE(d);
        CHECK(json_num(d, "rows") == 2 * 2); /* 1 layer × 2 heads × 2 samples */
        double nz[4], mean[4], a1[4], a2[4], s = 0, s1 = 0, s2 = 0, sm = 0;
        seg4(d, "combined", "normalized", nz);
        seg4(d, "combined", "mean", mean);
        seg4(d, "a1", "mean", a1);
        seg4(d, "a2", "mean", a2);
        for (int i = 0; i < 4; i++) {
            s += nz[i];
            s1 += a1[i];
            s2 += a2[i];
            sm += mean[i];
            /* one layer: the combined map is exactly A1 − λ·A2 */
            CHECKF(fabs(mean[i] - (a1[i] - lambda * a2[i])) < 1e-9, "segment %d: %g vs %g", i, mean[i],
                   a1[i] - lambda * a2[i]);
            CHECK(a1[i] >= 0 && a2[i] >= 0);
        }
        CHECK(fabs(s - 1) < 1e-9 && fabs(s1 - 1) < 1e-9 && fabs(s2 - 1) < 1e-9);
        CHECK(fabs(sm - (1 - lambda)) < 1e-9); /* rows of A1 − λA2 sum to 1 − λ */
        for (int i = 0; i < 4; i++) CHECK(fabs(nz[i] - mean[i] / sm) < 1e-9);
    }
    cJSON_Delete(root);
}

static double seg_of(const cJSON *d, const char *group, const char *map, const char *kind, const char *seg) {
    const cJSON *g = group ? cJSON_GetObjectItemCaseSensitive(d, group) : d;
    return json_num(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(g, map), kind), seg);
}

/* The printed statistic normalises each layer on its own and then averages
 * the layers (every layer counts alike, whatever its 1 − λ); the prompts
 * split into retrieved and missed, whose sums make up the whole; the count
 * retrieved is what eval needle scores on the same prompts. */
TEST(eval_attn_mass_cli_layers_and_groups) {
    REQUIRE(setup() == 0);
    dtx_config c2 = tiny(DTX_ARCH_DIFF, 32, 2);
    dtx_model *m2 = NULL;
    REQUIRE(dtx_model_init(&m2, &c2, 13) == DTX_OK);
    const char *p2 = save_model(m2, "diff2.safetensors"), *js = test_path("mass2.json"), *nj = test_path("n2.json");
    dtx_model_free(m2);
    REQUIRE(p2);
    int rc = cli("eval attn-mass --model %s --tokenizer %s --haystack %s --length 200 --needles 2 --depths 0,50 "
                 "--samples 3 --json %s",
                 p2, tok_path, hay_path, js);
    REQUIREF(rc == 0, "%s", cli_out);
    CHECK(cli_has("Map: A1 - lambda*A2 (combined)") && cli_has("Map: A1 alone") && cli_has("all, retrieved") &&
          cli_has("all, missed"));
    rc = cli("eval needle --model %s --tokenizer %s --haystack %s --lengths 200 --grid 2x1 --depths 0,50 --samples 3 "
             "--json %s",
             p2, tok_path, hay_path, nj);
    REQUIREF(rc == 0, "%s", cli_out);
    cJSON *root = read_json(js), *nroot = read_json(nj);
    REQUIRE(root && nroot);
    static const char *const segs[4] = {"bos", "answer", "context", "query"}, *const maps[3] = {"combined", "a1", "a2"};
    for (int di = 0; di < 2; di++) {
        const cJSON *d = depth_entry(root, 50.0 * di);
        REQUIRE(d);
        for (int mi = 0; mi < 3; mi++) {
            const cJSON *layers =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, maps[mi]), "layers");
            REQUIRE(cJSON_GetArraySize(layers) == 2);
            for (int si = 0; si < 4; si++) {
                double mean = 0;
                for (int l = 0; l < 2; l++) mean += json_num(cJSON_GetArrayItem(layers, l), segs[si]) / 2;
                double got = seg_of(d, NULL, maps[mi], "layer_normalized", segs[si]);
                CHECKF(fabs(got - mean) < 1e-12, "depth %d %s %s: %g, mean of layers %g", 50 * di, maps[mi],
                       segs[si], got, mean);
                /* a softmax map's rows sum to 1: their shares are the pooled normalised masses */
                if (mi > 0)
                    CHECKF(fabs(got - seg_of(d, NULL, maps[mi], "normalized", segs[si])) < 1e-9, "%s %s: %g vs %g",
                           maps[mi], segs[si], got, seg_of(d, NULL, maps[mi], "normalized", segs[si]));
                CHECKF(fabs(got) <= 1 + 1e-12, "%s %s share %g outside [-1, 1]", maps[mi], segs[si], got);
                /* the groups' sums make up the whole (mean · rows adds) */
                double whole = seg_of(d, NULL, maps[mi], "mean", segs[si]) * json_num(d, "rows"), parts = 0;
                for (int g = 0; g < 2; g++) {
                    const char *gk = g ? "missed" : "retrieved";
                    const cJSON *go = cJSON_GetObjectItemCaseSensitive(d, gk);
                    parts += seg_of(d, gk, maps[mi], "mean", segs[si]) * json_num(go, "rows");
                }
                CHECKF(fabs(whole - parts) < 1e-9, "depth %d %s %s: %g vs %g", 50 * di, maps[mi], segs[si], whole,
                       parts);
            }
        }
        double n_ret = json_num(cJSON_GetObjectItemCaseSensitive(d, "retrieved"), "prompts");
        double n_mis = json_num(cJSON_GetObjectItemCaseSensitive(d, "missed"), "prompts");
        CHECK(n_ret + n_mis == 3 && json_num(d, "n_retrieved") == n_ret);
        const cJSON *cell;
        double needle_right = -1;
        cJSON_ArrayForEach(cell, cJSON_GetObjectItemCaseSensitive(nroot, "cells")) if (json_num(cell, "depth") == 50.0 * di)
            needle_right = json_num(cell, "correct_queries");
        CHECKF(needle_right == n_ret, "depth %d: eval needle %g right, attn-mass %g retrieved", 50 * di, needle_right,
               n_ret);
    }
    cJSON_Delete(root);
    cJSON_Delete(nroot);
}

/* The masses of one prompt, recomputed from the probe here. */
TEST(eval_attn_mass_cli_matches_probe) {
    REQUIRE(setup() == 0);
    const char *js = test_path("mass-tf.json");
    int64_t L = 200;
    int rc = cli("eval attn-mass --model %s --tokenizer %s --haystack %s --length %lld --needles 2 --depths 50 "
                 "--samples 1 --seed 7 --json %s",
                 tf1_path, tok_path, hay_path, (long long)L, js);
    REQUIREF(rc == 0, "%s", cli_out);
    cJSON *root = read_json(js);
    REQUIRE(root);
    const cJSON *d = depth_entry(root, 50);
    REQUIRE(d);
    double got[4], a1[4];
    seg4(d, "combined", "mean", got);
    seg4(d, "a1", "mean", a1);

    dtx_needle_source *src = NULL;
    REQUIRE(dtx_needle_source_open(&src, tok, &hay_path, 1) == DTX_OK);
    dtx_needle_spec sp = {.length = L, .n_needles = 2, .n_queries = 1, .depth = 0.5,
                          .seed = dtx_needle_cell_seed(7, 2, 1, L, 50, 0)};
    dtx_needle_prompt p;
    REQUIRE(dtx_needle_make(src, &sp, &p) == DTX_OK);
    REQUIRE(dtx_model_forward(tf1, p.tokens, NULL, 1, p.n, NULL, NULL) == DTX_OK);
    double want[4] = {0}, row[MAX_SEQ];
    int64_t t = p.n - 1;
    for (int h = 0; h < 2; h++) {
        REQUIRE(dtx_probe_attention_row(tf1, 0, 0, h, DTX_MAP_FIRST, t, row) == DTX_OK);
        for (int64_t j = 0; j <= t; j++) {
            int seg = j == 0 ? 0 : (j >= p.needle_begin[0] && j < p.needle_end[0]) ? 1 : j >= p.context_end ? 3 : 2;
            want[seg] += row[j] / 2;
        }
    }
    for (int i = 0; i < 4; i++) {
        CHECKF(fabs(got[i] - want[i]) < 1e-9, "segment %d: %g, want %g", i, got[i], want[i]);
        CHECK(fabs(a1[i] - got[i]) < 1e-12); /* the Transformer's one map */
    }
    CHECK(cJSON_GetObjectItemCaseSensitive(d, "a2") == NULL);
    dtx_needle_prompt_free(&p);
    dtx_needle_source_free(src);
    cJSON_Delete(root);
}

TEST(eval_attn_mass_cli_errors) {
    REQUIRE(setup() == 0);
    const char *P = "difftx eval attn-mass: ";
    char base[2048];
    snprintf(base, sizeof base, "eval attn-mass --model %s --tokenizer %s --haystack %s --samples 1", tf1_path,
             tok_path, hay_path);
    struct {
        const char *extra, *want;
        int rc;
    } cases[] = {
        {"--length 257", "max_seq_len 256", 2}, {"--length 30", "too short", 2}, {"--needles 17", "--needles", 2},
        {"--depths -5", "--depths", 2},         {"--depths 5,5", "repeats", 2},  {"--samples x", "--samples", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli("%s %s", base, cases[i].extra);
        CHECKF(rc == cases[i].rc && cli_one_line_from(P) && cli_has(cases[i].want), "%s: rc %d: %s", cases[i].extra, rc, cli_out);
    }
    const char *missing = test_path("missing");
    CHECK(cli("eval attn-mass --model %s --tokenizer %s --haystack %s", missing, tok_path, hay_path) == 1 &&
          cli_one_line_from(P));
    CHECK(cli("eval attn-mass --model %s --tokenizer %s --haystack %s", tf1_path, tok_path, missing) == 1 &&
          cli_one_line_from(P));
    CHECK(cli("eval attn-mass --help") == 0 && cli_has("usage: difftx eval attn-mass"));
}

/* --attn-bits reaches the model: recorded, and 2-bit logits change what a
 * random model says somewhere in the grid. */
TEST(eval_needle_cli_attn_quant) {
    REQUIRE(setup() == 0);
    const char *a = test_path("q-off.json"), *b = test_path("q-2.json");
    const char *fmt = "eval needle --model %s --tokenizer %s --haystack %s --lengths 200 --grid 1x1,2x2 "
                      "--depths 0,25,50,75,100 --samples 1 --max-new 4 --json %s %s";
    REQUIRE(cli(fmt, diff1_path, tok_path, hay_path, a, "") == 0);
    int rc = cli(fmt, diff1_path, tok_path, hay_path, b, "--attn-bits 2 --attn-scope tensor");
    REQUIREF(rc == 0, "%s", cli_out);
    CHECK(cli_has("quantised to 2 bits"));
    cJSON *ja = read_json(a), *jb = read_json(b);
    REQUIRE(ja && jb);
    CHECK(json_num(ja, "attn_bits") == 0 && json_num(jb, "attn_bits") == 2 && strcmp(str(jb, "attn_scope"), "tensor") == 0);
    int differ = 0;
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(ja, "cells")->child;
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(jb, "cells")->child;
    for (; ca && cb; ca = ca->next, cb = cb->next)
        differ += strcmp(str(cJSON_GetObjectItemCaseSensitive(ca, "example"), "output"),
                         str(cJSON_GetObjectItemCaseSensitive(cb, "example"), "output")) != 0;
    CHECK(differ > 0);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}
