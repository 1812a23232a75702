/* difftx prepare, run as a separate process: the shard holds exactly the
 * tokens that encoding the files directly gives (in the documented order,
 * with and without <|eos|> separators), usage errors exit 2 and runtime ones
 * exit 1 with one line, and `difftx score --tokens shard.bin` scores a shard
 * as it scores the same ids written as text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "test.h"

#define CHECK_FAIL(rc, want_rc, s1, s2)                                                                     \
    do {                                                                                                    \
        CHECKF((rc) == (want_rc), "exit %d, want %d: %s", (rc), (want_rc), cli_out);                        \
        CHECKF(strncmp(cli_out, "difftx prepare: ", 16) == 0, "no 'difftx prepare: ' prefix: %s", cli_out); \
        CHECKF(cli_has(s1) && cli_has(s2), "want '%s' and '%s' in: %s", s1, s2, cli_out);                   \
        CHECKF(cli_one_line(), "not one line: %s", cli_out);                                                \
    } while (0)

/* Three documents of varied text (with special-token text that must stay
 * plain), under dir as a.txt, b.txt, sub/c.txt, plus a hidden file that the
 * folder walk skips. */
static const char *const TEXTS[3] = {
    "The differential attention subtracts two softmax maps.\nNoise cancels; the signal stays.\n",
    "Fellow-Citizens of the Senate and House of Representatives: <|eos|> is plain text here. 1790, 2021.",
    "  indented\n\n\ttabs, λ = 0.8 − 0.6·exp(−0.3·l), 注意力, it's done",
};

static const char *corpus(void) {
    static const char *dir;
    if (dir) return dir;
    const char *d = test_path("prep_corpus");
    char cmd[700], f[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/sub'", d);
    if (system(cmd) != 0) return NULL;
    static const char *const names[3] = {"a.txt", "b.txt", "sub/c.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "%s/%s", d, names[i]);
        if (write_file(f, TEXTS[i], strlen(TEXTS[i]))) return NULL;
    }
    snprintf(f, sizeof f, "%s/.hidden.txt", d);
    if (write_file(f, "skipped", 7)) return NULL;
    dir = d;
    return dir;
}

static dtx_tokenizer *shared_tok;
static void free_tok(void) { dtx_tokenizer_free(shared_tok); }

/* A tokenizer trained with the library on a repetitive text, saved. */
static dtx_tokenizer *tokenizer(const char **path) {
    static const char *p;
    dtx_tokenizer *t = shared_tok;
    if (!t) {
        size_t cap = 60000, n = 0;
        char *text = malloc(cap + 256);
        if (!text) return NULL;
        while (n < cap)
            for (int i = 0; i < 3; i++) {
                size_t l = strlen(TEXTS[i]);
                memcpy(text + n, TEXTS[i], l);
                n += l;
            }
        text[n] = '\0';
        const char *texts[1] = {text};
        t = test_tokenizer_file(texts, 1, 400, "prep.tok", &p);
        free(text);
        if (!t) return NULL;
        shared_tok = t;
        atexit(free_tok);
    }
    *path = p;
    return t;
}

/* encode(TEXTS[0]) [eos] encode(TEXTS[1]) [eos] encode(TEXTS[2]) [eos] */
static int32_t *expected(const dtx_tokenizer *t, int32_t eos, int64_t *n) {
    int32_t *all = NULL;
    *n = 0;
    for (int i = 0; i < 3; i++) {
        int32_t *ids;
        int64_t k;
        if (dtx_tokenizer_encode(t, TEXTS[i], strlen(TEXTS[i]), DTX_ENCODE_ORDINARY, &ids, &k) != DTX_OK) return NULL;
        int32_t *na = realloc(all, sizeof *all * (size_t)(*n + k + 1));
        if (!na) return NULL;
        all = na;
        memcpy(all + *n, ids, sizeof *ids * (size_t)k);
        *n += k;
        if (eos >= 0) all[(*n)++] = eos;
        free(ids);
    }
    return all;
}

static void check_shard(const char *path, const int32_t *want, int64_t n, int64_t vocab, int32_t eos, int64_t docs) {
    dtx_shard *s = NULL;
    REQUIRE(dtx_shard_open(&s, path, vocab) == DTX_OK);
    CHECKF(dtx_shard_count(s) == n, "shard holds %lld tokens, encoding gives %lld", (long long)dtx_shard_count(s),
           (long long)n);
    CHECK(dtx_shard_eos_id(s) == eos && dtx_shard_num_docs(s) == docs && dtx_shard_width(s) == 2);
    int32_t *got = malloc(sizeof *got * (size_t)(n + 1));
    REQUIRE(got);
    if (dtx_shard_count(s) == n) {
        CHECK(dtx_shard_read(s, 0, n, got) == DTX_OK);
        CHECK(memcmp(got, want, sizeof *got * (size_t)n) == 0);
    }
    free(got);
    dtx_shard_close(s);
}

TEST(prepare_cli_matches_encode) {
    const char *dir = corpus(), *tokp = NULL;
    REQUIRE(dir);
    dtx_tokenizer *t = tokenizer(&tokp);
    REQUIRE(t);
    int64_t V = dtx_tokenizer_vocab_size(t);
    int32_t eos = dtx_tokenizer_token_id(t, "<|eos|>");
    REQUIRE(eos >= 0);

    /* a folder, with <|eos|> after each document */
    int64_t n = 0;
    int32_t *want = expected(t, eos, &n);
    REQUIRE(want);
    const char *sp = test_path("prep_eos.bin");
    int rc = cli("prepare --tokenizer '%s' --input '%s' --out '%s' --append-eos", tokp, dir, sp);
    REQUIRE(rc == 0);
    char line[128];
    snprintf(line, sizeof line, "3 documents, %zu bytes -> %lld tokens", strlen(TEXTS[0]) + strlen(TEXTS[1]) + strlen(TEXTS[2]),
             (long long)n);
    CHECKF(cli_has(line) && cli_has("each ended by <|eos|>") && cli_has("MB/s") && cli_has("prep_eos.bin"), "want '%s' in: %s", line, cli_out);
    check_shard(sp, want, n, V, eos, 3);
    free(want);

    /* files given one by one, in that order, no separators */
    want = expected(t, -1, &n);
    REQUIRE(want);
    sp = test_path("prep_plain.bin");
    rc = cli("prepare --tokenizer '%s' --input='%s/a.txt' --input '%s/b.txt' --input '%s/sub' --out '%s'", tokp, dir, dir,
             dir, sp);
    REQUIRE(rc == 0);
    CHECKF(!cli_has("ended by"), "%s", cli_out);
    check_shard(sp, want, n, V, -1, 3);
    free(want);

    /* the output is replaced atomically: running again gives the same file */
    rc = cli("prepare --tokenizer '%s' --input '%s/a.txt' --input '%s/b.txt' --input '%s/sub/c.txt' --out '%s'", tokp,
             dir, dir, dir, sp);
    REQUIRE(rc == 0);
    want = expected(t, -1, &n);
    REQUIRE(want);
    check_shard(sp, want, n, V, -1, 3);
    free(want);

    /* an empty file among others is a document of no tokens (its EOS only); a corpus of nothing but empty
     * files is refused, with nothing written (tests/cli/newcomer_cli_test.c) */
    const char *e = test_path("empty.txt"), *x = test_path("x.txt");
    REQUIRE(write_file(e, "", 0) == 0 && write_file(x, TEXTS[0], strlen(TEXTS[0])) == 0);
    sp = test_path("prep_empty.bin");
    REQUIRE(cli("prepare --tokenizer '%s' --input '%s' --input '%s' --out '%s' --append-eos", tokp, e, x, sp) == 0);
    int32_t *ids;
    int64_t k;
    REQUIRE(dtx_tokenizer_encode(t, TEXTS[0], strlen(TEXTS[0]), DTX_ENCODE_ORDINARY, &ids, &k) == DTX_OK);
    int32_t *both = malloc(sizeof *both * (size_t)(k + 2));
    REQUIRE(both);
    both[0] = eos;
    memcpy(both + 1, ids, sizeof *ids * (size_t)k);
    both[k + 1] = eos;
    check_shard(sp, both, k + 2, V, eos, 2);
    free(both);
    free(ids);
}

TEST(prepare_cli_usage_errors) {
    int rc = cli("prepare --help");
    CHECKF(rc == 0 && cli_has("usage: difftx prepare") && cli_has("--append-eos"), "exit %d: %s", rc, cli_out);
    rc = cli("help prepare");
    CHECKF(rc == 0 && cli_has("usage: difftx prepare"), "exit %d: %s", rc, cli_out);
    rc = cli("--help");
    CHECKF(rc == 0 && cli_has("prepare"), "%s", cli_out);
    CHECK_FAIL(cli("prepare"), 2, "--tokenizer is required", "");
    CHECK_FAIL(cli("prepare --tokenizer t --out x.bin"), 2, "--input is required", "");
    CHECK_FAIL(cli("prepare --tokenizer t --input a.txt"), 2, "--out is required", "");
    CHECK_FAIL(cli("prepare --tokenizer t --input --out x.bin"), 2, "--input: missing value", "");
    CHECK_FAIL(cli("prepare --tokenizer t --input= --out x.bin"), 2, "--input: expected a file or a folder", "");
    CHECK_FAIL(cli("prepare --tokenizer t --input a --out x.bin --frobnicate"), 2, "unknown flag '--frobnicate'", "");
    CHECK_FAIL(cli("prepare --tokenizer t --input a --out x.bin --append-eos=yes"), 2, "--append-eos", "");
    CHECK_FAIL(cli("prepare --tokenizer t --input a stray --out x.bin"), 2, "'stray'", "");
}

TEST(prepare_cli_runtime_errors) {
    const char *dir = corpus(), *tokp = NULL;
    REQUIRE(dir);
    REQUIRE(tokenizer(&tokp));
    const char *sp = test_path("never.bin");
    CHECK_FAIL(cli("prepare --tokenizer '%s' --input '%s' --out '%s'", test_path("nope.tok"), dir, sp), 1, "nope.tok",
               "No such file");
    CHECK_FAIL(cli("prepare --tokenizer '%s' --input '%s' --out '%s'", tokp, test_path("nope.txt"), sp), 1, "nope.txt",
               "No such file");
    const char *empty = test_path("empty_dir");
    REQUIRE(mkdir(empty, 0755) == 0);
    CHECK_FAIL(cli("prepare --tokenizer '%s' --input '%s' --out '%s'", tokp, empty, sp), 1, "empty_dir",
               "no files in it");
    CHECK_FAIL(cli("prepare --tokenizer '%s' --input '%s' --out '%s'", tokp, dir, test_path("no/dir/x.bin")), 1, "x.bin",
               "No such file");
    /* a tokenizer with no end-of-text token: a rank file of the 256 bytes */
    const char *rank = test_path("bytes.tiktoken");
    FILE *f = fopen(rank, "w");
    REQUIRE(f);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 256; i++) fprintf(f, "%c%c== %d\n", b64[i >> 2], b64[(i & 3) << 4], i);
    fclose(f);
    CHECK_FAIL(cli("prepare --tokenizer '%s' --input '%s' --out '%s' --append-eos", rank, dir, sp), 1, "bytes.tiktoken",
               "no end-of-text token (<|eos|>, <|endoftext|>");
    /* without --append-eos that tokenizer works (vocab 256: width 2) */
    REQUIRE(cli("prepare --tokenizer '%s' --input '%s' --out '%s'", rank, dir, sp) == 0);
    dtx_shard *s = NULL;
    REQUIRE(dtx_shard_open(&s, sp, 256) == DTX_OK);
    CHECK(dtx_shard_count(s) == (int64_t)(strlen(TEXTS[0]) + strlen(TEXTS[1]) + strlen(TEXTS[2])));
    dtx_shard_close(s);
    /* the output inside an input folder, already there: refused, not read as text */
    char inside[700];
    snprintf(inside, sizeof inside, "%s/out.bin", dir);
    REQUIRE(write_file(inside, "x", 1) == 0);
    CHECK_FAIL(cli("prepare --tokenizer '%s' --input '%s' --out '%s'", tokp, dir, inside), 1, "out.bin",
               "is the output file");
    remove(inside);
    /* nothing half-written is left behind */
    struct stat sb;
    CHECK(stat(test_path("no/dir/x.bin"), &sb) != 0);
}

TEST(prepare_cli_score_shard) {
    const char *tokp = NULL;
    dtx_tokenizer *t = tokenizer(&tokp);
    REQUIRE(t);
    int64_t V = dtx_tokenizer_vocab_size(t);
    /* a short text -> a shard, and the same ids as a text token file */
    const char *txt = test_path("short.txt");
    static const char S[] = "The differential attention subtracts two maps.";
    REQUIRE(write_file(txt, S, strlen(S)) == 0);
    const char *sp = test_path("short.bin");
    REQUIRE(cli("prepare --tokenizer '%s' --input '%s' --out '%s' --append-eos", tokp, txt, sp) == 0);
    int32_t *ids = NULL;
    int64_t n = 0;
    REQUIRE(dtx_tokens_read(sp, V, &ids, &n) == DTX_OK);
    REQUIRE(n >= 2 && n <= 32);
    const char *ip = test_path("short.ids");
    FILE *f = fopen(ip, "w");
    REQUIRE(f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%d ", ids[i]);
    fclose(f);
    free(ids);
    /* a tiny model with the tokenizer's vocabulary */
    dtx_config c = dtx_config_default();
    c.dim = 32;
    c.n_layers = 1;
    c.n_heads = 2;
    c.n_kv_heads = 2;
    c.vocab_size = V;
    c.ffn_dim = 64;
    c.max_seq_len = 32;
    dtx_model *m = NULL;
    REQUIRE(dtx_model_init(&m, &c, 3) == DTX_OK);
    const char *mp = test_path("prep_model.safetensors");
    REQUIRE(dtx_model_save(m, mp, 0) == DTX_OK);
    dtx_model_free(m);
    int rc = cli("score --model '%s' --tokens '%s'", mp, ip);
    REQUIRE(rc == 0);
    static char from_text[sizeof cli_out];
    memcpy(from_text, cli_out, sizeof cli_out);
    rc = cli("score --model '%s' --tokens '%s'", mp, sp);
    CHECKF(rc == 0 && strcmp(cli_out, from_text) == 0, "shard: exit %d: %s; text: %s", rc, cli_out, from_text);
    char want[64];
    snprintf(want, sizeof want, "\"tokens\": %lld}", (long long)(n - 1));
    CHECKF(cli_has(want), "%s", cli_out);
    /* a shard of another vocabulary is refused, naming the file */
    c.vocab_size = V + 1;
    REQUIRE(dtx_model_init(&m, &c, 3) == DTX_OK);
    const char *mp2 = test_path("prep_model2.safetensors");
    REQUIRE(dtx_model_save(m, mp2, 0) == DTX_OK);
    dtx_model_free(m);
    rc = cli("score --model '%s' --tokens '%s'", mp2, sp);
    CHECKF(rc == 1 && cli_has("short.bin") && cli_has("vocab_size is") && cli_one_line(), "exit %d: %s", rc, cli_out);
}
