/* difftx tokenizer, run as a separate process: train, encode, decode and info,
 * exact round trips of arbitrary bytes through files and pipes, and the
 * one-line refusals with exit 2 (usage) or 1 (runtime). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "test.h"

#define CHECK_FAIL(rc, want_rc, prefix, s1, s2)                                                           \
    do {                                                                                                  \
        CHECKF((rc) == (want_rc), "exit %d, want %d: %s", (rc), (want_rc), cli_out);                      \
        CHECKF(strncmp(cli_out, prefix, strlen(prefix)) == 0, "no '%s' prefix: %s", prefix, cli_out);     \
        CHECKF(cli_has(s1) && cli_has(s2), "want '%s' and '%s' in: %s", s1, s2, cli_out);                 \
        CHECKF(cli_one_line(), "not one line: %s", cli_out);                                              \
    } while (0)

/* A small corpus in a folder, and a tokenizer trained on it by the CLI. */
static const char *tok_file(void) {
    static const char *path;
    if (path) return path;
    const char *dir = test_path("cli_corpus");
    char cmd[700], f[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) return NULL;
    dtx_rng r;
    dtx_rng_seed(&r, 9);
    static const char *const w[] = {"the", " model", " attention", " differential", ",", ".", "\n", " noise",
                                    " cancel", "s", " λ", " 注意", " 123", " it's", "  "};
    size_t cap = 200000, n = 0;
    char *text = malloc(cap + 32);
    while (n < cap) {
        const char *s = w[dtx_rng_next(&r) % (sizeof w / sizeof w[0])];
        size_t l = strlen(s);
        memcpy(text + n, s, l);
        n += l;
    }
    snprintf(f, sizeof f, "%s/a.txt", dir);
    int ok = write_file(f, text, n / 2) == 0;
    snprintf(f, sizeof f, "%s/b.txt", dir);
    ok &= write_file(f, text + n / 2, n - n / 2) == 0;
    free(text);
    if (!ok) return NULL;
    const char *tok = test_path("cli.tok");
    if (cli("tokenizer train --input '%s' --vocab-size 300 --out '%s'", dir, tok) != 0) {
        fprintf(stderr, "    train failed: %s\n", cli_out);
        return NULL;
    }
    path = tok;
    return path;
}

TEST(tokcli_usage_errors) {
    int rc = cli("tokenizer");
    CHECKF(rc == 2 && cli_has("usage: difftx tokenizer"), "exit %d: %s", rc, cli_out);
    CHECK_FAIL(cli("tokenizer frobnicate"), 2, "difftx tokenizer: ", "unknown subcommand 'frobnicate'", "train");
    CHECK_FAIL(cli("tokenizer train --out x.tok"), 2, "difftx tokenizer train: ", "--input is required", "");
    CHECK_FAIL(cli("tokenizer train --input a.txt"), 2, "difftx tokenizer train: ", "--out is required", "");
    CHECK_FAIL(cli("tokenizer train --input a.txt --out x --vocab-size 100"), 2, "difftx tokenizer train: ",
               "--vocab-size", "'100'");
    CHECK_FAIL(cli("tokenizer train --input --out x"), 2, "difftx tokenizer train: ", "--input: missing value", "");
    CHECK_FAIL(cli("tokenizer train --input a --out x --bogus"), 2, "difftx tokenizer train: ", "unknown flag '--bogus'", "");
    CHECK_FAIL(cli("tokenizer encode --text hi"), 2, "difftx tokenizer encode: ", "--tokenizer is required", "");
    CHECK_FAIL(cli("tokenizer encode --tokenizer t --text a --input b"), 2, "difftx tokenizer encode: ", "--text and --input", "");
    CHECK_FAIL(cli("tokenizer decode --tokenizer t --ids '1 x2'"), 2, "difftx tokenizer decode: ", "--ids: token 1 'x2'", "");
    CHECK_FAIL(cli("tokenizer info"), 2, "difftx tokenizer info: ", "expected a tokenizer file", "");
    for (const char *const *s = (const char *const[]){"train", "encode", "decode", "info", NULL}; *s; s++) {
        rc = cli("tokenizer %s --help", *s);
        CHECKF(rc == 0 && cli_has("usage: difftx tokenizer") && cli_has(*s), "%s --help: exit %d: %s", *s, rc, cli_out);
    }
    rc = cli("help tokenizer");
    CHECKF(rc == 0 && cli_has("usage: difftx tokenizer"), "exit %d: %s", rc, cli_out);
    rc = cli("--help");
    CHECK(rc == 0 && cli_has("tokenizer"));
}

TEST(tokcli_runtime_errors) {
    CHECK_FAIL(cli("tokenizer train --input '%s' --out x.tok", test_path("nope.txt")), 1, "difftx tokenizer train: ",
               "nope.txt", "No such file");
    const char *bad = test_path("bad.tok");
    REQUIRE(write_file(bad, "difftx-tokenizer 1\npattern cl100k_base\nvocab_size x\n", 52) == 0);
    CHECK_FAIL(cli("tokenizer info '%s'", bad), 1, "difftx tokenizer info: ", "bad.tok:3:", "vocab_size");
    CHECK_FAIL(cli("tokenizer encode --tokenizer '%s' --text hi", bad), 1, "difftx tokenizer encode: ", "bad.tok:3:", "");
    const char *tok = tok_file();
    REQUIRE(tok);
    CHECK_FAIL(cli("tokenizer decode --tokenizer '%s' --ids '1 2 300'", tok), 1, "difftx tokenizer decode: ", "id 300",
               "no token");
    const char *ids = test_path("bad.ids");
    REQUIRE(write_file(ids, "1 2\n3 -4\n", 9) == 0);
    CHECK_FAIL(cli("tokenizer decode --tokenizer '%s' --input '%s'", tok, ids), 1, "difftx tokenizer decode: ", "bad.ids",
               "token 3 '-4'");
    CHECK_FAIL(cli("tokenizer encode --tokenizer '%s' --input '%s'", tok, test_path("missing.txt")), 1,
               "difftx tokenizer encode: ", "missing.txt", "");
}

TEST(tokcli_train_info) {
    const char *tok = tok_file();
    REQUIRE(tok);
    int rc = cli("tokenizer info '%s'", tok);
    CHECKF(rc == 0 && cli_has("vocab_size  300") && cli_has("<|eos|>          298") && cli_has("source      difftx"), "%s", cli_out);
    rc = cli("tokenizer info --json '%s'", tok);
    REQUIRE(rc == 0);
    cJSON *j = cJSON_Parse(cli_out);
    REQUIRE(j);
    CHECK(cJSON_GetObjectItem(j, "vocab_size")->valuedouble == 300);
    CHECK(cJSON_GetObjectItem(j, "ordinary")->valuedouble == 297);
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "special"), "<|pad|>")->valuedouble == 299);
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "source")), "difftx") == 0);
    cJSON_Delete(j);
    /* the same corpus trains the same file again (two inputs = the folder's two files) */
    const char *tok2 = test_path("cli2.tok");
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/a.txt", test_path("cli_corpus"));
    snprintf(b, sizeof b, "%s/b.txt", test_path("cli_corpus"));
    rc = cli("tokenizer train --input '%s' --input='%s' --vocab-size 300 --out '%s'", a, b, tok2);
    CHECKF(rc == 0 && cli_has("trained 300 tokens") && cli_has("saved"), "exit %d: %s", rc, cli_out);
    size_t l1, l2;
    char *f1 = test_slurp(tok, &l1), *f2 = test_slurp(tok2, &l2);
    CHECK(f1 && f2 && l1 == l2 && memcmp(f1, f2, l1) == 0);
    free(f1);
    free(f2);
}

TEST(tokcli_round_trip) {
    const char *tok = tok_file();
    REQUIRE(tok);
    /* arbitrary bytes: NULs, invalid UTF-8, CRLF, specials as text */
    dtx_rng r;
    dtx_rng_seed(&r, 21);
    size_t n = 20000;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = dtx_rng_next(&r);
        data[i] = v % 3 ? "the model\r\n<|eos|> λ"[v % 22] : (char)(v >> 8);
    }
    const char *in = test_path("bytes.bin"), *ids = test_path("bytes.ids"), *back = test_path("bytes.back");
    REQUIRE(write_file(in, data, n) == 0);
    int rc = cli("tokenizer encode --tokenizer '%s' --input '%s' > '%s'", tok, in, ids);
    CHECKF(rc == 0, "encode: exit %d: %s", rc, cli_out);
    rc = cli("tokenizer decode --tokenizer '%s' < '%s' > '%s'", tok, ids, back);
    CHECKF(rc == 0, "decode: exit %d: %s", rc, cli_out);
    size_t bl;
    char *got = test_slurp(back, &bl);
    CHECK(got && bl == n && memcmp(got, data, n) == 0);
    free(got);
    /* the ids file is a token file the library reads */
    int32_t *t;
    int64_t nt;
    CHECK(dtx_tokens_read(ids, 300, &t, &nt) == DTX_OK && nt > 0);
    free(t);
    free(data);
    /* --text, stdin, --special */
    rc = cli("tokenizer encode --tokenizer '%s' --text 'the model<|eos|>' --special", tok);
    CHECKF(rc == 0 && cli_one_line() && cli_has(" 298\n"), "exit %d: %s", rc, cli_out);
    rc = cli("tokenizer encode --tokenizer '%s' --text 'the model<|eos|>'", tok);
    CHECKF(rc == 0 && !cli_has(" 298\n"), "exit %d: %s", rc, cli_out);
    rc = cli("tokenizer encode --tokenizer '%s' --text ''", tok);
    CHECKF(rc == 0 && strcmp(cli_out, "\n") == 0, "exit %d: '%s'", rc, cli_out);
    rc = cli("tokenizer decode --tokenizer '%s' --ids '297 298 299'", tok);
    CHECKF(rc == 0 && strcmp(cli_out, "<|bos|><|eos|><|pad|>") == 0, "exit %d: %s", rc, cli_out);
    rc = cli("tokenizer encode --tokenizer '%s' --text 'the noise' | %s tokenizer decode --tokenizer '%s'", tok,
             getenv("DIFFTX_BIN") ? getenv("DIFFTX_BIN") : "build/difftx", tok);
    CHECKF(rc == 0 && strcmp(cli_out, "the noise") == 0, "exit %d: %s", rc, cli_out);
}

TEST(tokcli_cl100k) {
    const char *ranks = getenv("DTX_TIKTOKEN_RANKS") ? getenv("DTX_TIKTOKEN_RANKS") : "data/tiktoken/cl100k_base.tiktoken";
    int rc = cli("tokenizer encode --tokenizer '%s' --text 'hello world'", ranks);
    CHECKF(rc == 0 && strcmp(cli_out, "15339 1917\n") == 0, "exit %d: %s (make test fetches %s)", rc, cli_out, ranks);
    rc = cli("tokenizer encode --tokenizer '%s' --special --text 'hi<|endoftext|>x'", ranks);
    CHECKF(rc == 0 && strcmp(cli_out, "6151 100257 87\n") == 0, "exit %d: %s", rc, cli_out);
    rc = cli("tokenizer info '%s'", ranks);
    CHECKF(rc == 0 && cli_has("source      tiktoken") && cli_has("vocab_size  100277") && cli_has("<|endofprompt|>  100276"), "%s", cli_out);
}
