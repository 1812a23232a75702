/* difftx eval ppl, run as a separate process on untrained tiny models saved
 * to the test's directory: a file that fits one window scores as `difftx
 * score`; a long file's sliding-window NLL equals an independent
 * computation here (each target's window worked out in closed form, the
 * library's forward, log-softmax in double); a text gives the same NLL as
 * its ids and bits per byte from its length; 16-bit attention logits are
 * close to unquantised and 4-bit ones are not; --by-position's loss by
 * context length equals one worked out here; bad flags and files give one
 * line and exit 2 (usage) or 1 (runtime). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftx.h"
#include "test.h"

/* exit rc, one line "difftx eval ppl: ..." holding s */
#define CHECK_ERR(rc_want, call, s)                                                                        \
    do {                                                                                                   \
        int rc_ = (call);                                                                                  \
        CHECKF(rc_ == (rc_want), "exit %d, want %d: %s", rc_, (rc_want), cli_out);                         \
        CHECKF(strncmp(cli_out, "difftx eval ppl: ", 17) == 0, "no prefix: %s", cli_out);                  \
        CHECKF(cli_has(s), "want '%s' in: %s", s, cli_out);                                                \
        CHECKF(cli_one_line(), "not one line: %s", cli_out);                                               \
    } while (0)

enum { SEQ = 16 };

static dtx_config tiny_config(dtx_arch arch, int64_t vocab) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = arch == DTX_ARCH_DIFF ? 2 : 4;
    c.n_kv_heads = arch == DTX_ARCH_DIFF ? 1 : 2;
    c.vocab_size = vocab;
    c.ffn_dim = 64;
    c.max_seq_len = SEQ;
    return c;
}

static const char *model_file(const char *name, dtx_arch arch, int64_t vocab) {
    dtx_config c = tiny_config(arch, vocab);
    return test_model_file(name, &c, 7);
}

/* n pseudo-random ids below vocab, as a text file of ids; ids[] gets them. */
static const char *ids_file(const char *name, int32_t *ids, int64_t n, int64_t vocab, uint64_t seed) {
    uint64_t x = seed;
    size_t cap = (size_t)n * 12 + 2, k = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (int64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
        k += (size_t)snprintf(s + k, cap - k, "%d%c", ids[i], i % 10 == 9 ? '\n' : ' ');
    }
    const char *path = test_path(name);
    int rc = write_file(path, s, k);
    free(s);
    return rc == 0 ? path : NULL;
}

/* Runs eval ppl with extra flags and --json; parses the JSON file. */
static cJSON *ppl_json(const char *model, const char *input, const char *extra) {
    const char *jp = test_path("ppl.json");
    remove(jp);
    int rc = cli("eval ppl --model '%s' %s --json '%s' %s", model, input, jp, extra);
    if (rc != 0) {
        test_fail_at(__FILE__, __LINE__, "eval ppl exited %d: %s", rc, cli_out);
        return NULL;
    }
    FILE *f = fopen(jp, "rb");
    char buf[4096] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    if (!j) test_fail_at(__FILE__, __LINE__, "bad JSON: %s", buf);
    return j;
}

static const char *jstr(const cJSON *j, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* ------------------------------------------------------------ one window */

TEST(eval_ppl_cli_short_file_matches_score) {
    for (int arch = 0; arch < 2; arch++) {
        const char *mp = model_file("short.safetensors", (dtx_arch)arch, 16);
        int32_t ids[SEQ];
        const char *tp = ids_file("short.txt", ids, 12, 16, 3 + (uint64_t)arch);
        REQUIRE(mp && tp);
        double loss = NAN;
        long long n = 0;
        REQUIREF(cli("score --model '%s' --tokens '%s'", mp, tp) == 0, "%s", cli_out);
        REQUIRE(sscanf(cli_out, "{\"loss\": %lf, \"tokens\": %lld}", &loss, &n) == 2);
        char tok_arg[512];
        snprintf(tok_arg, sizeof tok_arg, "--tokens '%s'", tp);
        cJSON *j = ppl_json(mp, tok_arg, "");
        REQUIRE(j);
        CHECKF(fabs(json_num(j, "nll") - loss) <= 1e-6 * loss, "ppl nll %.9g, score %.9g", json_num(j, "nll"), loss);
        CHECKF(fabs(json_num(j, "ppl") - exp(loss)) <= 1e-5 * exp(loss), "ppl %.9g", json_num(j, "ppl"));
        CHECK(json_num(j, "tokens") == 11 && n == 11 && json_num(j, "windows") == 1);
        CHECK(json_num(j, "window") == SEQ && json_num(j, "stride") == SEQ / 2);
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "bpb")));
        CHECK(json_num(j, "attn_bits") == 0 && strcmp(jstr(j, "attn_scope"), "row") == 0);
        CHECK(strcmp(jstr(j, "arch"), arch ? "transformer" : "diff") == 0 && strcmp(jstr(j, "model"), mp) == 0);
        CHECK(json_num(j, "params") > 1000);
        /* the readable lines on stdout */
        CHECKF(cli_has("tokens       11 scored") && cli_has("perplexity") && cli_has("mean NLL") && !cli_has("bits/byte"), "%s", cli_out);
        cJSON_Delete(j);
    }
}

/* ------------------------------------------------------------ sliding */

/* −log softmax(row)[target], in double. */
static double row_nll(const dtx_real *row, int64_t V, int32_t target) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, row[v]);
    for (int64_t v = 0; v < V; v++) sum += exp(row[v] - mx);
    return mx + log(sum) - row[target];
}

/* The reference: target j (1 <= j < n) belongs to the window ending at e(j):
 * W when j <= W, else W + S·ceil((j − W) / S), clamped to n − 1; the window
 * starts at max(0, e − W). Sums −log softmax at position j − b − 1. */
static double reference_nll(dtx_model *m, const int32_t *ids, int64_t n, int64_t W, int64_t S, int64_t *windows) {
    int64_t V = dtx_model_config(m)->vocab_size;
    dtx_real *logits = malloc((size_t)(W * V) * sizeof *logits);
    double total = 0;
    int64_t cur_e = -1;
    *windows = 0;
    for (int64_t j = 1; j < n && logits; j++) {
        int64_t e = j <= W ? W : W + S * ((j - W + S - 1) / S);
        if (e > n - 1) e = n - 1;
        int64_t b = e - W > 0 ? e - W : 0;
        if (e != cur_e) { /* targets come in order, so each window is run once */
            if (dtx_model_forward(m, ids + b, NULL, 1, e - b, logits, NULL) != DTX_OK) break;
            cur_e = e;
            ++*windows;
        }
        total += row_nll(logits + (j - b - 1) * V, V, ids[j]);
    }
    free(logits);
    return total / (double)(n - 1);
}

TEST(eval_ppl_cli_sliding_window_matches_reference) {
    enum { N = 203 };
    static const int64_t cases[][2] = {{0, 0}, {12, 5}, {16, 16}, {7, 1}, {10, 9}}; /* W, S; 0 = default */
    int32_t ids[N];
    for (int arch = 0; arch < 2; arch++) {
        const char *mp = model_file("long.safetensors", (dtx_arch)arch, 16);
        const char *tp = ids_file("long.txt", ids, N, 16, 11 + (uint64_t)arch);
        REQUIRE(mp && tp);
        dtx_model *m = NULL;
        REQUIRE(dtx_model_load(&m, mp) == DTX_OK);
        for (int c = 0; c < 5; c++) {
            int64_t W = cases[c][0] ? cases[c][0] : SEQ, S = cases[c][1] ? cases[c][1] : W / 2, windows = 0;
            char extra[128] = "", tok_arg[512];
            if (cases[c][0]) snprintf(extra, sizeof extra, "--window %lld --stride %lld", (long long)W, (long long)S);
            snprintf(tok_arg, sizeof tok_arg, "--tokens '%s'", tp);
            cJSON *j = ppl_json(mp, tok_arg, extra);
            REQUIRE(j);
            double ref = reference_nll(m, ids, N, W, S, &windows);
            CHECKF(fabs(json_num(j, "nll") - ref) <= 1e-6 * ref, "arch %d W %lld S %lld: cli %.9g, reference %.9g", arch,
                   (long long)W, (long long)S, json_num(j, "nll"), ref);
            CHECK(json_num(j, "tokens") == N - 1 && json_num(j, "windows") == windows);
            CHECK(json_num(j, "window") == W && json_num(j, "stride") == S);
            cJSON_Delete(j);
        }
        /* --max-tokens: the first 50 tokens only */
        char tok_arg[512];
        snprintf(tok_arg, sizeof tok_arg, "--tokens '%s'", tp);
        cJSON *j = ppl_json(mp, tok_arg, "--max-tokens 50");
        int64_t windows;
        double ref = reference_nll(m, ids, 50, SEQ, SEQ / 2, &windows);
        CHECKF(j && fabs(json_num(j, "nll") - ref) <= 1e-6 * ref && json_num(j, "tokens") == 49, "max-tokens: %.9g vs %.9g",
               j ? json_num(j, "nll") : NAN, ref);
        cJSON_Delete(j);
        dtx_model_free(m);
    }
}

/* --by-position: windows end to end; the NLL at position p of a window is
 * `difftx score`'s story for its first p + 1 tokens, worked out here by
 * the library's forward on each window's prefix: per position the mean
 * over windows (the last, partial window counts where it reaches), and the
 * cumulative mean; the last cumulative value is the file's mean NLL. */
TEST(eval_ppl_cli_by_position) {
    enum { W = 8, N = 2 * W + 5 }; /* windows [0, 8), [8, 16), [16, 20): 8, 8 and 4 targets */
    int32_t ids[N];
    for (int arch = 0; arch < 2; arch++) {
        const char *mp = model_file("bypos.safetensors", (dtx_arch)arch, 16);
        const char *tp = ids_file("bypos.txt", ids, N, 16, 31 + (uint64_t)arch);
        REQUIRE(mp && tp);
        dtx_model *m = NULL;
        REQUIRE(dtx_model_load(&m, mp) == DTX_OK);
        /* the reference: each target's NLL from a forward over its window's tokens up to it */
        double sum[W] = {0}, want_cum[W];
        int64_t cnt[W] = {0};
        dtx_real logits[W * 16];
        for (int64_t j = 1; j < N; j++) {
            int64_t b = (j - 1) / W * W, p = j - b; /* p tokens of context: x[b .. j) */
            REQUIRE(dtx_model_forward(m, ids + b, NULL, 1, p, logits, NULL) == DTX_OK);
            sum[p - 1] += row_nll(logits + (p - 1) * 16, 16, ids[j]), cnt[p - 1]++;
        }
        double run = 0;
        int64_t seen = 0;
        for (int p = 0; p < W; p++) run += sum[p], seen += cnt[p], want_cum[p] = run / (double)seen;
        char tok_arg[512];
        snprintf(tok_arg, sizeof tok_arg, "--tokens '%s'", tp);
        char extra[64];
        snprintf(extra, sizeof extra, "--window %d --by-position", W);
        cJSON *j = ppl_json(mp, tok_arg, extra);
        REQUIRE(j);
        CHECK(json_num(j, "stride") == W && json_num(j, "windows") == 3 && json_num(j, "tokens") == N - 1);
        const cJSON *bp = cJSON_GetObjectItemCaseSensitive(j, "by_position");
        const cJSON *pos = cJSON_GetObjectItemCaseSensitive(bp, "position"), *tok = cJSON_GetObjectItemCaseSensitive(bp, "tokens");
        const cJSON *nll = cJSON_GetObjectItemCaseSensitive(bp, "nll"), *cum = cJSON_GetObjectItemCaseSensitive(bp, "cumulative");
        REQUIREF(cJSON_GetArraySize(pos) == W && cJSON_GetArraySize(tok) == W && cJSON_GetArraySize(nll) == W &&
                     cJSON_GetArraySize(cum) == W, "arrays of %d positions", cJSON_GetArraySize(pos));
        for (int p = 0; p < W; p++) {
            double mean = sum[p] / (double)cnt[p];
            CHECK(cJSON_GetArrayItem(pos, p)->valuedouble == p + 1);
            CHECKF(cJSON_GetArrayItem(tok, p)->valuedouble == (p < 4 ? 3 : 2), "position %d: %g targets", p + 1,
                   cJSON_GetArrayItem(tok, p)->valuedouble);
            CHECKF(fabs(cJSON_GetArrayItem(nll, p)->valuedouble - mean) <= 1e-5 * mean, "arch %d position %d: %.9g vs %.9g",
                   arch, p + 1, cJSON_GetArrayItem(nll, p)->valuedouble, mean);
            CHECKF(fabs(cJSON_GetArrayItem(cum, p)->valuedouble - want_cum[p]) <= 1e-5 * want_cum[p],
                   "arch %d cumulative %d: %.9g vs %.9g", arch, p + 1, cJSON_GetArrayItem(cum, p)->valuedouble, want_cum[p]);
        }
        CHECK(fabs(cJSON_GetArrayItem(cum, W - 1)->valuedouble - json_num(j, "nll")) <= 1e-9 * json_num(j, "nll"));
        /* the readable table: positions 1, 2, 4, 8 */
        CHECKF(cli_has("by position") && cli_has("\n         1   ") && cli_has("\n         8   ") &&
                   !cli_has("\n         3   "), "%s", cli_out);
        cJSON_Delete(j);
        dtx_model_free(m);
    }
}

/* The AR-hit slice, by brute force: target j of the window [b, e) is a hit
 * when its bigram (ids[j − 1], ids[j]) occurs at some s with b <= s and
 * s + 1 <= j − 1 (inside the inputs before it). */
TEST(eval_ppl_cli_ar_hit_slices) {
    enum { N = 150, V = 6 }; /* a small vocabulary: many repeated bigrams */
    int32_t ids[N];
    const char *mp = model_file("ar.safetensors", DTX_ARCH_DIFF, V);
    const char *tp = ids_file("ar.txt", ids, N, V, 21);
    REQUIRE(mp && tp);
    dtx_model *m = NULL;
    REQUIRE(dtx_model_load(&m, mp) == DTX_OK);
    const int64_t W = SEQ, S = 5;
    dtx_real *logits = malloc((size_t)(W * V) * sizeof *logits);
    REQUIRE(logits);
    double hit_nll = 0, oth_nll = 0;
    int64_t hits = 0, others = 0, cur_e = -1;
    for (int64_t j = 1; j < N; j++) {
        int64_t e = j <= W ? W : W + S * ((j - W + S - 1) / S);
        if (e > N - 1) e = N - 1;
        int64_t b = e - W > 0 ? e - W : 0;
        if (e != cur_e) {
            REQUIRE(dtx_model_forward(m, ids + b, NULL, 1, e - b, logits, NULL) == DTX_OK);
            cur_e = e;
        }
        const dtx_real *row = logits + (j - b - 1) * V;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, row[v]);
        for (int64_t v = 0; v < V; v++) sum += exp(row[v] - mx);
        double l = mx + log(sum) - row[ids[j]];
        int hit = 0;
        for (int64_t s2 = b; s2 + 1 <= j - 1 && !hit; s2++) hit = ids[s2] == ids[j - 1] && ids[s2 + 1] == ids[j];
        if (hit) hit_nll += l, hits++;
        else oth_nll += l, others++;
    }
    free(logits);
    char tok_arg[512];
    snprintf(tok_arg, sizeof tok_arg, "--tokens '%s'", tp);
    cJSON *j = ppl_json(mp, tok_arg, "--stride 5");
    REQUIRE(j);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "ar_hit"), *o = cJSON_GetObjectItemCaseSensitive(j, "others");
    CHECKF(json_num(h, "tokens") == hits && json_num(o, "tokens") == others, "hits %g/%lld, others %g/%lld",
           json_num(h, "tokens"), (long long)hits, json_num(o, "tokens"), (long long)others);
    CHECK(hits > 20 && others > 20); /* both slices are exercised */
    CHECKF(fabs(json_num(h, "nll") - hit_nll / hits) < 1e-6 && fabs(json_num(o, "nll") - oth_nll / others) < 1e-6,
           "hit nll %.9g vs %.9g, others %.9g vs %.9g", json_num(h, "nll"), hit_nll / hits, json_num(o, "nll"),
           oth_nll / others);
    CHECK(cli_has("AR hits") && cli_has("others "));
    cJSON_Delete(j);
    dtx_model_free(m);
}

/* ------------------------------------------------------------ text */

TEST(eval_ppl_cli_text_bits_per_byte) {
    static const char TEXT[] =
        "the cat sat on the mat. the dog sat on the log. a cat and a dog and a mat.\n"
        "on the mat the cat sat; on the log the dog sat. the end of the story. <|eos|>\n";
    const char *texts[] = {TEXT}, *tkp = NULL, *txp = test_path("ppl.txt");
    dtx_tokenizer *tok = test_tokenizer_file(texts, 1, 280, "ppl.tok", &tkp);
    REQUIRE(tok && write_file(txp, TEXT, strlen(TEXT)) == 0);
    int32_t *ids = NULL;
    int64_t n = 0;
    REQUIRE(dtx_tokenizer_encode(tok, TEXT, strlen(TEXT), DTX_ENCODE_ORDINARY, &ids, &n) == DTX_OK && n > SEQ);
    /* the same ids as a file: the same NLL */
    char *s = malloc((size_t)n * 8 + 1);
    REQUIRE(s);
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) k += (size_t)sprintf(s + k, "%d ", ids[i]);
    const char *ip = test_path("ppl_ids.txt");
    REQUIRE(write_file(ip, s, k) == 0);
    free(s);
    const char *mp = model_file("text.safetensors", DTX_ARCH_DIFF, dtx_tokenizer_vocab_size(tok));
    REQUIRE(mp);
    char arg[1024];
    snprintf(arg, sizeof arg, "--text '%s' --tokenizer '%s'", txp, tkp);
    cJSON *jt = ppl_json(mp, arg, "");
    CHECKF(cli_has("bits/byte"), "%s", cli_out);
    snprintf(arg, sizeof arg, "--tokens '%s'", ip);
    cJSON *ji = ppl_json(mp, arg, "");
    REQUIRE(jt && ji);
    double nll = json_num(jt, "nll"), bpb = json_num(jt, "bpb");
    CHECK(json_num(jt, "tokens") == n - 1);
    CHECKF(fabs(nll - json_num(ji, "nll")) <= 1e-9 * nll, "text %.12g vs ids %.12g", nll, json_num(ji, "nll"));
    double want = nll * (double)(n - 1) / log(2.0) / (double)strlen(TEXT);
    CHECKF(fabs(bpb - want) <= 1e-9 * want, "bpb %.12g, want %.12g", bpb, want);
    /* "<|eos|>" in the text is text: ordinary tokens only */
    for (int64_t i = 0; i < n; i++) CHECK(ids[i] < dtx_tokenizer_num_ordinary(tok));
    cJSON_Delete(jt), cJSON_Delete(ji);
    /* a tokenizer larger than the model's vocabulary */
    const char *small = model_file("small.safetensors", DTX_ARCH_DIFF, 16);
    REQUIRE(small);
    CHECK_ERR(1, cli("eval ppl --model '%s' --text '%s' --tokenizer '%s'", small, txp, tkp), "vocab_size 16");
    free(ids);
    dtx_tokenizer_free(tok);
}

/* ------------------------------------------------------------ quantised */

TEST(eval_ppl_cli_attention_bits) {
    enum { N = 120 };
    int32_t ids[N];
    for (int arch = 0; arch < 2; arch++) {
        const char *mp = model_file("quant.safetensors", (dtx_arch)arch, 16);
        const char *tp = ids_file("quant.txt", ids, N, 16, 21 + (uint64_t)arch);
        REQUIRE(mp && tp);
        char arg[512];
        snprintf(arg, sizeof arg, "--tokens '%s'", tp);
        cJSON *j0 = ppl_json(mp, arg, ""), *j16 = ppl_json(mp, arg, "--attn-bits 16");
        cJSON *j4 = ppl_json(mp, arg, "--attn-bits 4"), *j4t = ppl_json(mp, arg, "--attn-bits 4 --attn-scope tensor");
        CHECKF(cli_has("quantised to 4 bits"), "%s", cli_out);
        REQUIRE(j0 && j16 && j4 && j4t);
        double n0 = json_num(j0, "nll"), d16 = fabs(json_num(j16, "nll") - n0), d4 = fabs(json_num(j4, "nll") - n0);
        double d4t = fabs(json_num(j4t, "nll") - n0);
        if (getenv("DTX_QUANT_VERBOSE")) printf("    arch %d: 16 bits %.3g, 4 bits %.3g / %.3g\n", arch, d16, d4, d4t);
        /* untrained: logits of |z| <~ 1, so the 16-bit step is ~3e-5 and moves
         * the NLL by ~1e-7 of itself; the 4-bit step (~0.15) by ~1e-4 */
        CHECKF(d16 <= 5e-6 * n0, "arch %d: 16 bits moved the NLL by %.3g", arch, d16);
        CHECKF(d4 > 2e-5 * n0 && d4t > 2e-5 * n0, "arch %d: 4 bits moved the NLL by only %.3g / %.3g", arch, d4, d4t);
        CHECK(json_num(j4, "attn_bits") == 4 && strcmp(jstr(j4, "attn_scope"), "row") == 0);
        CHECK(strcmp(jstr(j4t, "attn_scope"), "tensor") == 0);
        CHECK(json_num(j4, "tokens") == N - 1);
        cJSON_Delete(j0), cJSON_Delete(j16), cJSON_Delete(j4), cJSON_Delete(j4t);
    }
}

/* ------------------------------------------------------------ errors */

TEST(eval_ppl_cli_bad_flags_and_files) {
    const char *mp = model_file("bad.safetensors", DTX_ARCH_DIFF, 16);
    int32_t ids[40];
    const char *tp = ids_file("bad.txt", ids, 40, 16, 5);
    const char *one = test_path("one.txt"), *big = test_path("big.txt");
    REQUIRE(mp && tp && write_file(one, "3\n", 2) == 0 && write_file(big, "1 2 16 3", 8) == 0);
    /* usage: exit 2 */
    CHECK_ERR(2, cli("eval ppl --tokens '%s'", tp), "--model is required");
    CHECK_ERR(2, cli("eval ppl --model '%s'", mp), "exactly one of --tokens");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --text '%s'", mp, tp, tp), "exactly one of --tokens");
    CHECK_ERR(2, cli("eval ppl --model '%s' --text '%s'", mp, tp), "--text needs --tokenizer");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --tokenizer x", mp, tp), "--tokenizer goes with --text");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --attn-bits 1", mp, tp), "--attn-bits");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --attn-bits 17", mp, tp), "--attn-bits");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --attn-scope head", mp, tp), "row|tensor");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --window 0", mp, tp), "--window");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --window 8 --stride 9", mp, tp), "exceeds --window 8");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --stride 2x", mp, tp), "--stride");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --by-position --stride 4", mp, tp), "end to end");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --max-tokens 0", mp, tp), "--max-tokens");
    CHECK_ERR(2, cli("eval ppl --model '%s' --tokens '%s' --bogus 1", mp, tp), "unknown flag");
    /* runtime: exit 1 */
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s'", test_path("absent.safetensors"), tp), "absent");
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s'", mp, test_path("absent.txt")), "absent.txt");
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s'", mp, one), "at least 2");
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s' --max-tokens 1", mp, tp), "at least 2");
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s'", mp, big), "16");
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s' --window 17", mp, tp), "max_seq_len 16");
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s' --stride 17", mp, tp), "max_seq_len 16");
    CHECK_ERR(1, cli("eval ppl --model '%s' --tokens '%s' --json '%s'", mp, tp, test_path("no/such/dir.json")),
              "dir.json");
    /* and the help */
    CHECK(cli("eval ppl --help") == 0 && cli_has("--attn-scope") && cli_has("--stride"));
}
