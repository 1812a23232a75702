/* The byte-level BPE tokenizer (docs/tokenizer.md): training, exact round
 * trips on any bytes, the file format and its refusals, special tokens, and
 * cl100k_base byte-identical to tiktoken on the fixture cases made by
 * tools/tiktoken_fixtures.mjs. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/common.h"
#include "io/tokenizer.h"
#include "test.h"

/* ------------------------------------------------------------ helpers */

/* A training text of a few hundred KB: varied sentences, code, numbers and
 * some non-Latin text, built from a seeded RNG. */
static char *corpus(uint64_t seed, size_t target, size_t *len) {
    static const char *const words[] = {
        "the", "differential", "transformer", "attention", "noise", "cancels", "softmax", "maps", "of", "and",
        "to", "in", "a", "model", "training", "tokens", "language", "we", "show", "that", "it's", "they're",
        "layer", "head", "lambda", "value", "query", "key", "sparse", "patterns", "context", "retrieval",
        "Hello", "World", "DIFF", "Transformer", "GPU", "λ", "注意力", "机制", "Привет", "мир", "naïve", "café",
    };
    static const char *const seps[] = {" ", " ", " ", " ", ", ", ". ", "\n", "  ", "\t", "; ", "!\n\n", " (", ") "};
    static const char *const code[] = {
        "for (int i = 0; i < n; i++) {\n    x[i] += y[i] * 2;\n}\n",
        "def f(x):\n    return x ** 2 + 1\n",
        "{\"key\": [1, 2, 3], \"ok\": true}\n",
    };
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    char *b = malloc(target + 256);
    size_t n = 0;
    while (n < target) {
        uint64_t k = dtx_rng_next(&r) % 100;
        const char *s;
        char num[32];
        if (k < 80) s = words[dtx_rng_next(&r) % (sizeof words / sizeof words[0])];
        else if (k < 95) s = seps[dtx_rng_next(&r) % (sizeof seps / sizeof seps[0])];
        else if (k < 98) {
            snprintf(num, sizeof num, " %llu", (unsigned long long)(dtx_rng_next(&r) % 100000));
            s = num;
        } else s = code[dtx_rng_next(&r) % 3];
        size_t l = strlen(s);
        if (n + l > target + 200) break;
        memcpy(b + n, s, l);
        n += l;
        if (k < 80) b[n++] = ' ';
    }
    b[n] = '\0';
    *len = n;
    return b;
}

static dtx_tokenizer *trained(int64_t vocab) {
    size_t len;
    char *text = corpus(1, 300000, &len);
    const char *texts[] = {text};
    dtx_tokenizer *t = NULL;
    dtx_status st = dtx_tokenizer_train_texts(&t, texts, &len, 1, vocab);
    free(text);
    if (st) fprintf(stderr, "    train: %s\n", dtx_last_error());
    return t;
}

/* encode then decode gives back the bytes exactly. */
static int round_trips(const dtx_tokenizer *t, const char *s, size_t n, dtx_encode_mode mode) {
    int32_t *ids = NULL;
    int64_t k = 0;
    if (dtx_tokenizer_encode(t, s, n, mode, &ids, &k) != DTX_OK) return 0;
    char *back = NULL;
    size_t bl = 0;
    int ok = dtx_tokenizer_decode(t, ids, k, &back, &bl) == DTX_OK && bl == n && memcmp(back, s, n) == 0;
    for (int64_t i = 0; i < k; i++) ok &= ids[i] >= 0 && ids[i] < dtx_tokenizer_vocab_size(t);
    free(ids);
    free(back);
    return ok;
}

static const char *cl100k_path(void) {
    const char *p = getenv("DTX_TIKTOKEN_RANKS");
    return p ? p : "data/tiktoken/cl100k_base.tiktoken";
}

/* The cl100k_base ranks (loaded once, kept to the end); a missing file
 * fails the calling test (make test fetches it first: scripts/fetch_tiktoken.sh). */
static dtx_tokenizer *cl100k(void) {
    static dtx_tokenizer *t;
    static int tried;
    if (!tried) {
        tried = 1;
        struct stat sb;
        if (stat(cl100k_path(), &sb) != 0) {
            test_fail_at(__FILE__, __LINE__, "%s is missing: run scripts/fetch_tiktoken.sh (make test does)", cl100k_path());
            return NULL;
        }
        if (dtx_tokenizer_load(&t, cl100k_path()) != DTX_OK) {
            test_fail_at(__FILE__, __LINE__, "loading %s: %s", cl100k_path(), dtx_last_error());
            t = NULL;
        }
    }
    return t;
}

/* ------------------------------------------------------------ base64 */

TEST(tok_base64) {
    uint8_t in[64], dec[64];
    char enc[128];
    for (size_t n = 1; n < 40; n++) {
        for (size_t i = 0; i < n; i++) in[i] = (uint8_t)(i * 37 + n);
        dtx_b64_encode(in, n, enc);
        size_t el = dtx_b64_len(n);
        CHECK(dtx_b64_decode(enc, el, dec) == (int64_t)n && memcmp(in, dec, n) == 0);
    }
    CHECK(dtx_b64_decode("IQ==", 4, dec) == 1 && dec[0] == '!');
    CHECK(dtx_b64_decode("IR==", 4, dec) == -1); /* bits under the padding */
    CHECK(dtx_b64_decode("I===", 4, dec) == -1);
    CHECK(dtx_b64_decode("IQ=", 3, dec) == -1);
    CHECK(dtx_b64_decode("IQ=A", 4, dec) == -1);
    CHECK(dtx_b64_decode("I*==", 4, dec) == -1);
    CHECK(dtx_b64_decode("", 0, dec) == -1);
}

/* ------------------------------------------------------------ training, round trips */

TEST(tok_train_round_trip) {
    dtx_tokenizer *t = trained(1000);
    REQUIRE(t);
    CHECK(dtx_tokenizer_vocab_size(t) == 1000);
    CHECK(dtx_tokenizer_num_ordinary(t) == 997);
    CHECK(strcmp(dtx_tokenizer_source(t), "difftx") == 0);
    /* the training text, and an unseen one */
    size_t len;
    char *text = corpus(1, 300000, &len);
    CHECK(round_trips(t, text, len, DTX_ENCODE_ORDINARY));
    int32_t *ids;
    int64_t n;
    REQUIRE(dtx_tokenizer_encode(t, text, len, DTX_ENCODE_ORDINARY, &ids, &n) == DTX_OK);
    CHECKF((double)len / n > 2.5, "compression only %.2f bytes per token", (double)len / n);
    free(ids);
    free(text);
    text = corpus(99, 50000, &len);
    CHECK(round_trips(t, text, len, DTX_ENCODE_ORDINARY));
    CHECK(round_trips(t, text, len, DTX_ENCODE_SPECIAL));
    free(text);
    static const char unseen[] = "Unseen: ÆØÅ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 👨‍👩‍👧 \r\n\r\n  \t x'LL 12345678 <|eos|> <|bos";
    CHECK(round_trips(t, unseen, sizeof unseen - 1, DTX_ENCODE_ORDINARY));
    CHECK(round_trips(t, unseen, sizeof unseen - 1, DTX_ENCODE_SPECIAL));
    CHECK(round_trips(t, "", 0, DTX_ENCODE_ORDINARY));
    /* random bytes: invalid UTF-8, NULs, lone continuation bytes, truncated sequences */
    dtx_rng r;
    dtx_rng_seed(&r, 5);
    char buf[4096];
    for (int it = 0; it < 300; it++) {
        size_t n_b = (size_t)(dtx_rng_next(&r) % sizeof buf);
        int style = it % 3;
        for (size_t i = 0; i < n_b; i++) {
            uint64_t v = dtx_rng_next(&r);
            if (style == 0) buf[i] = (char)v;                                /* any byte */
            else if (style == 1) buf[i] = (char)(v % 4 ? 'a' + v % 26 : 0x80 | (v >> 8) % 64); /* text with stray bytes */
            else buf[i] = (char)("\xe4\xbd\xa0\xf0\x9f\x98 \n\0a'"[v % 11]); /* broken multibyte */
        }
        CHECKF(round_trips(t, buf, n_b, it % 2 ? DTX_ENCODE_SPECIAL : DTX_ENCODE_ORDINARY), "random bytes case %d", it);
    }
    dtx_tokenizer_free(t);
}

TEST(tok_invalid_utf8_pieces) {
    dtx_tokenizer *t = trained(600);
    REQUIRE(t);
    /* an invalid byte is a piece of its own: its byte token, between the words */
    int32_t *a, *b, *c;
    int64_t na, nb, nc;
    REQUIRE(dtx_tokenizer_encode(t, "the", 3, 0, &a, &na) == DTX_OK);
    REQUIRE(dtx_tokenizer_encode(t, " model", 6, 0, &b, &nb) == DTX_OK);
    REQUIRE(dtx_tokenizer_encode(t, "the\xff model", 10, 0, &c, &nc) == DTX_OK);
    CHECK(nc == na + 1 + nb);
    if (nc == na + 1 + nb) {
        CHECK(memcmp(c, a, (size_t)na * 4) == 0 && c[na] == 0xff && memcmp(c + na + 1, b, (size_t)nb * 4) == 0);
    }
    free(a);
    free(b);
    free(c);
    /* NULs are ordinary bytes */
    CHECK(round_trips(t, "a\0b\0\0 c", 7, DTX_ENCODE_ORDINARY));
    dtx_tokenizer_free(t);
}

TEST(tok_train_deterministic) {
    dtx_tokenizer *t1 = trained(800), *t2 = trained(800);
    REQUIRE(t1 && t2);
    const char *p1 = test_path("det1.tok"), *p2 = test_path("det2.tok");
    REQUIRE(dtx_tokenizer_save(t1, p1) == DTX_OK && dtx_tokenizer_save(t2, p2) == DTX_OK);
    size_t l1, l2;
    char *f1 = test_slurp(p1, &l1), *f2 = test_slurp(p2, &l2);
    REQUIRE(f1 && f2);
    CHECK(l1 == l2 && memcmp(f1, f2, l1) == 0);
    /* the same text from a file, and from a folder of split files in name order, trains the same */
    size_t len;
    char *text = corpus(1, 300000, &len);
    const char *dir = test_path("corpus_dir");
    mkdir(dir, 0777);
    char path[600];
    snprintf(path, sizeof path, "%s/whole.txt", dir);
    REQUIRE(write_file(path, text, len) == 0);
    snprintf(path, sizeof path, "%s/.hidden", dir);
    REQUIRE(write_file(path, "hidden hidden hidden hidden", 27) == 0);
    const char *in[] = {dir};
    dtx_tokenizer *t3 = NULL;
    REQUIRE(dtx_tokenizer_train(&t3, in, 1, 800) == DTX_OK);
    const char *p3 = test_path("det3.tok");
    REQUIRE(dtx_tokenizer_save(t3, p3) == DTX_OK);
    size_t l3;
    char *f3 = test_slurp(p3, &l3);
    CHECK(f3 && l3 == l1 && memcmp(f3, f1, l1) == 0);
    free(text);
    free(f1);
    free(f2);
    free(f3);
    dtx_tokenizer_free(t1);
    dtx_tokenizer_free(t2);
    dtx_tokenizer_free(t3);
    const char *missing[] = {test_path("no-such-file")};
    dtx_tokenizer *t4 = NULL;
    CHECK(dtx_tokenizer_train(&t4, missing, 1, 800) == DTX_ERR_IO && strstr(dtx_last_error(), "no-such-file"));
}

TEST(tok_vocab_size_and_specials) {
    dtx_tokenizer *t = trained(700);
    REQUIRE(t);
    CHECK(dtx_tokenizer_vocab_size(t) == 700);
    CHECK(dtx_tokenizer_num_special(t) == 3);
    CHECK(dtx_tokenizer_token_id(t, "<|bos|>") == 697);
    CHECK(dtx_tokenizer_token_id(t, "<|eos|>") == 698);
    CHECK(dtx_tokenizer_token_id(t, "<|pad|>") == 699);
    CHECK(dtx_tokenizer_token_id(t, "<|endoftext|>") == -1);
    int32_t id;
    CHECK(strcmp(dtx_tokenizer_special(t, 1, &id), "<|eos|>") == 0 && id == 698);
    CHECK(dtx_tokenizer_special(t, 3, &id) == NULL);
    /* byte tokens are ids 0..255 */
    for (int b = 0; b < 256; b++) {
        size_t n;
        const char *p = dtx_tokenizer_token_bytes(t, b, &n);
        CHECK(p && n == 1 && (uint8_t)p[0] == b);
    }
    static const char s[] = "x<|eos|><|bos|>y <|pad|>";
    int32_t *ids;
    int64_t n;
    REQUIRE(dtx_tokenizer_encode(t, s, sizeof s - 1, DTX_ENCODE_SPECIAL, &ids, &n) == DTX_OK);
    int seen = 0;
    for (int64_t i = 0; i < n; i++) seen += ids[i] >= 697;
    CHECK(seen == 3 && ids[1] == 698 && ids[2] == 697 && ids[n - 1] == 699);
    free(ids);
    REQUIRE(dtx_tokenizer_encode(t, s, sizeof s - 1, DTX_ENCODE_ORDINARY, &ids, &n) == DTX_OK);
    for (int64_t i = 0; i < n; i++) CHECK(ids[i] < 697);
    free(ids);
    CHECK(round_trips(t, s, sizeof s - 1, DTX_ENCODE_SPECIAL));
    int32_t eos = 698;
    char *text;
    size_t len;
    REQUIRE(dtx_tokenizer_decode(t, &eos, 1, &text, &len) == DTX_OK);
    CHECK(len == 7 && strcmp(text, "<|eos|>") == 0);
    free(text);
    int32_t bad[] = {5, 700};
    CHECK(dtx_tokenizer_decode(t, bad, 2, &text, &len) == DTX_ERR_ARG && strstr(dtx_last_error(), "700") && !text);
    bad[1] = -1;
    CHECK(dtx_tokenizer_decode(t, bad, 2, &text, &len) == DTX_ERR_ARG);
    dtx_tokenizer_free(t);

    /* a tiny corpus runs out of pairs: fewer tokens, specials right after */
    const char *tiny[] = {"abab abab abab xyz"};
    size_t tl = strlen(tiny[0]);
    REQUIRE(dtx_tokenizer_train_texts(&t, tiny, &tl, 1, 4096) == DTX_OK);
    int64_t v = dtx_tokenizer_vocab_size(t);
    CHECKF(v > 259 && v < 270, "vocab %lld", (long long)v);
    CHECK(dtx_tokenizer_token_id(t, "<|pad|>") == v - 1);
    CHECK(round_trips(t, tiny[0], tl, DTX_ENCODE_ORDINARY));
    dtx_tokenizer_free(t);
    CHECK(dtx_tokenizer_train_texts(&t, tiny, &tl, 1, 258) == DTX_ERR_ARG && strstr(dtx_last_error(), "259"));
    /* the smallest vocabulary: bytes and specials only */
    REQUIRE(dtx_tokenizer_train_texts(&t, tiny, &tl, 1, 259) == DTX_OK);
    CHECK(dtx_tokenizer_vocab_size(t) == 259 && dtx_tokenizer_token_id(t, "<|bos|>") == 256);
    CHECK(round_trips(t, tiny[0], tl, DTX_ENCODE_ORDINARY));
    dtx_tokenizer_free(t);
}

TEST(tok_save_load_identity) {
    dtx_tokenizer *t = trained(900);
    REQUIRE(t);
    const char *p1 = test_path("id1.tok"), *p2 = test_path("id2.tok");
    REQUIRE(dtx_tokenizer_save(t, p1) == DTX_OK);
    dtx_tokenizer *u = NULL;
    REQUIRE(dtx_tokenizer_load(&u, p1) == DTX_OK);
    REQUIRE(dtx_tokenizer_save(u, p2) == DTX_OK);
    size_t l1, l2;
    char *f1 = test_slurp(p1, &l1), *f2 = test_slurp(p2, &l2);
    CHECK(f1 && f2 && l1 == l2 && memcmp(f1, f2, l1) == 0);
    static const char head[] =
        "difftx-tokenizer 1\npattern cl100k_base\nvocab_size 900\nordinary 897\nspecial 3\n"
        "<|bos|> 897\n<|eos|> 898\n<|pad|> 899\nAA== 0\nAQ== 1\n";
    CHECK(f1 && strncmp(f1, head, sizeof head - 1) == 0);
    free(f1);
    free(f2);
    CHECK(dtx_tokenizer_vocab_size(u) == 900 && dtx_tokenizer_token_id(u, "<|eos|>") == 898);
    for (int32_t id = 0; id < 900; id++) {
        size_t a, b;
        const char *x = dtx_tokenizer_token_bytes(t, id, &a), *y = dtx_tokenizer_token_bytes(u, id, &b);
        CHECK(x && y && a == b && memcmp(x, y, a) == 0);
    }
    size_t len;
    char *text = corpus(7, 20000, &len);
    int32_t *i1, *i2;
    int64_t n1, n2;
    REQUIRE(dtx_tokenizer_encode(t, text, len, DTX_ENCODE_SPECIAL, &i1, &n1) == DTX_OK);
    REQUIRE(dtx_tokenizer_encode(u, text, len, DTX_ENCODE_SPECIAL, &i2, &n2) == DTX_OK);
    CHECK(n1 == n2 && memcmp(i1, i2, (size_t)n1 * 4) == 0);
    free(i1);
    free(i2);
    free(text);
    CHECK(dtx_tokenizer_save(t, "/nonexistent-dir/x.tok") == DTX_ERR_IO && strstr(dtx_last_error(), "/nonexistent-dir/x.tok"));
    dtx_tokenizer_free(t);
    dtx_tokenizer_free(u);
}

/* ------------------------------------------------------------ malformed files */

/* A valid file of our format: 256 byte tokens, one merge "ab" (rank 256),
 * specials at 257, 258. */
static char *valid_file(void) {
    size_t cap = 16384, n = 0;
    char *b = malloc(cap);
    n += (size_t)snprintf(b + n, cap - n,
                          "difftx-tokenizer 1\npattern cl100k_base\nvocab_size 259\nordinary 257\nspecial 2\n"
                          "<|bos|> 257\n<|eos|> 258\n");
    for (int i = 0; i < 256; i++) {
        uint8_t byte = (uint8_t)i;
        char e[8];
        dtx_b64_encode(&byte, 1, e);
        n += (size_t)snprintf(b + n, cap - n, "%.4s %d\n", e, i);
    }
    n += (size_t)snprintf(b + n, cap - n, "YWI= 256\n");
    return b;
}

/* valid_file with the line that starts with `from` (first occurrence, whole
 * line) replaced by `to` (which may hold several lines or be ""). */
static char *edit(const char *from, const char *to) {
    char *v = valid_file();
    char *at = strstr(v, from);
    if (!at) return v;
    char *eol = strchr(at, '\n');
    size_t head = (size_t)(at - v), tail = strlen(eol + 1);
    char *r = malloc(head + strlen(to) + tail + 2);
    memcpy(r, v, head);
    r[head] = '\0';
    strcat(r, to);
    if (to[0]) strcat(r, "\n");
    strcat(r, eol + 1);
    free(v);
    return r;
}

typedef struct {
    const char *what;
    char *content;        /* the file (malloc'd); NULL: filled in below */
    const char *want;     /* in the message */
    const char *want_loc; /* ":LINE:" or NULL */
} bad_case;

TEST(tok_malformed_files) {
    /* the base file loads */
    char *v = valid_file();
    const char *p = test_path("valid.tok");
    REQUIRE(write_file(p, v, strlen(v)) == 0);
    dtx_tokenizer *t = NULL;
    REQUIRE(dtx_tokenizer_load(&t, p) == DTX_OK);
    CHECK(dtx_tokenizer_vocab_size(t) == 259);
    int32_t *ids;
    int64_t n;
    REQUIRE(dtx_tokenizer_encode(t, "abab", 4, 0, &ids, &n) == DTX_OK);
    CHECK(n == 2 && ids[0] == 256 && ids[1] == 256);
    free(ids);
    dtx_tokenizer_free(t);
    size_t vl = strlen(v);
    char *no_nl = strndup(v, vl - 1);
    char *crlf = edit("vocab_size", "vocab_size 259\r");
    char *trunc_line = strndup(v, vl - 7); /* the last line cut to "YW" */

    bad_case cases[] = {
        {"empty file", strdup(""), "empty file", NULL},
        {"garbage", strdup("hello\n"), "neither a difftx tokenizer", ":1:"},
        {"misspelt magic", edit("difftx-tokenizer", "difftx-tokenizr 1"), "neither a difftx tokenizer", ":1:"},
        {"binary", strdup("\x7f" "ELF\x02\x01 x\n"), "neither a difftx tokenizer", ":1:"},
        {"version", edit("difftx-tokenizer", "difftx-tokenizer 2"), "unsupported version '2'", ":1:"},
        {"pattern", edit("pattern", "pattern gpt2"), "unknown pattern 'gpt2'", ":2:"},
        {"no pattern", edit("pattern", "vocab_size 259"), "expected 'pattern NAME'", ":2:"},
        {"vocab not a number", edit("vocab_size", "vocab_size 25x"), "vocab_size: expected a non-negative integer", ":3:"},
        {"vocab negative", edit("vocab_size", "vocab_size -1"), "vocab_size: expected", ":3:"},
        {"vocab leading zero", edit("vocab_size", "vocab_size 0259"), "vocab_size: expected", ":3:"},
        {"vocab mismatch", edit("vocab_size", "vocab_size 300"), "vocab_size 300, but the largest id is 258", ":3:"},
        {"missing key", edit("ordinary", "special 2"), "expected 'ordinary N'", ":4:"},
        {"few ordinary", edit("ordinary", "ordinary 100"), "at least the 256 byte tokens", ":4:"},
        {"ordinary over vocab", edit("ordinary", "ordinary 400"), "more than vocab_size", ":4:"},
        {"too many specials", edit("special 2", "special 65"), "at most 64 special tokens", ":5:"},
        {"special no id", edit("<|bos|>", "<|bos|>"), "expected a special token 'NAME ID'", ":6:"},
        {"special bad id", edit("<|bos|>", "<|bos|> x"), "expected a special token 'NAME ID'", ":6:"},
        {"special space name", edit("<|bos|>", " 257"), "expected a special token", ":6:"},
        {"special nonprintable", edit("<|bos|>", "<|b\x01s|> 257"), "printable ASCII", ":6:"},
        {"special duplicate name", edit("<|eos|>", "<|bos|> 258"), "duplicate special token <|bos|>", ":7:"},
        {"special id taken", edit("<|eos|>", "<|eos|> 257"), "duplicate token id 257", ":7:"},
        {"special id too big", edit("<|eos|>", "<|eos|> 999999999"), "out of range", ":7:"},
        {"rank line no space", edit("AA== 0", "AA==0"), "expected 'BASE64 RANK'", ":8:"},
        {"bad base64", edit("AA== 0", "A*== 0"), "not canonical base64", ":8:"},
        {"non-canonical base64", edit("AA== 0", "AB== 0"), "not canonical base64", ":8:"},
        {"empty token", edit("AA== 0", " 0"), "not canonical base64", ":8:"},
        {"bad rank", edit("AA== 0", "AA== zero"), "expected a rank", ":8:"},
        {"rank with sign", edit("AA== 0", "AA== +0"), "expected a rank", ":8:"},
        {"extra field", edit("AA== 0", "AA== 0 1"), "expected a rank", ":8:"},
        {"ranks not increasing", edit("AQ== 1", "AQ== 0"), "rank 0 after rank 0: ranks must increase", ":9:"},
        {"duplicate bytes", edit("AQ== 1", "AA== 1"), "token 1 has the same bytes as token 0", ":9:"},
        {"rank collides special", edit("YWI= 256", "YWI= 257"), "duplicate token id 257", ":264:"},
        {"missing byte", edit("QQ== 65", "QUI= 65"), "no token for the single byte 0x41", NULL},
        {"truncated", edit("YWI= 256", ""), "the file ends after 256 of 257 ordinary tokens", ":263:"},
        {"truncated line", trunc_line, "expected 'BASE64 RANK'", ":264:"},
        {"no final newline", no_nl, "no newline at the end", ":264:"},
        {"trailing content", NULL, "unexpected content after the 257 ordinary tokens", ":265:"},
        {"carriage return", crlf, "carriage return", ":3:"},
        {"tiktoken no rank", strdup("IQ== 0\nIg==\n"), "expected 'BASE64 RANK'", ":2:"},
        {"tiktoken empty line", strdup("IQ== 0\n\nIg== 1\n"), "empty line", ":2:"},
        {"tiktoken duplicate rank", strdup("IQ== 0\nIg== 0\n"), "duplicate token id 0", ":2:"},
        {"tiktoken missing bytes", strdup("IQ== 0\nIg== 1\n"), "no token for the single byte 0x00", NULL},
        {"tiktoken bad base64", strdup("IQ== 0\nI g== 1\n"), "not canonical base64", ":2:"},
    };
    size_t nc = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < nc; i++) {
        if (strcmp(cases[i].what, "trailing content")) continue;
        /* the valid file plus one more line */
        cases[i].content = malloc(vl + 16);
        strcpy(cases[i].content, v);
        strcat(cases[i].content, "YmM= 300\n");
    }
    for (size_t i = 0; i < nc; i++) {
        bad_case *c = &cases[i];
        const char *path = test_path("bad.tok");
        REQUIRE(c->content && write_file(path, c->content, strlen(c->content)) == 0);
        dtx_tokenizer *bt = NULL;
        dtx_status st = dtx_tokenizer_load(&bt, path);
        const char *msg = dtx_last_error();
        CHECKF(st == DTX_ERR_FORMAT, "%s: status %d (%s)", c->what, (int)st, msg);
        CHECKF(bt == NULL, "%s: tokenizer returned", c->what);
        CHECKF(strstr(msg, c->want) != NULL, "%s: want '%s' in: %s", c->what, c->want, msg);
        CHECKF(strstr(msg, "bad.tok") != NULL, "%s: no file name in: %s", c->what, msg);
        CHECKF(!c->want_loc || strstr(msg, c->want_loc), "%s: want line '%s' in: %s", c->what, c->want_loc, msg);
        CHECKF(!strchr(msg, '\n'), "%s: message is not one line: %s", c->what, msg);
        if (bt) dtx_tokenizer_free(bt);
        free(c->content);
    }
    free(v);
    dtx_tokenizer *bt = NULL;
    CHECK(dtx_tokenizer_load(&bt, test_path("missing.tok")) == DTX_ERR_IO && strstr(dtx_last_error(), "missing.tok"));
    CHECK(dtx_tokenizer_load(&bt, test_tmpdir()) == DTX_ERR_IO &&
          strstr(dtx_last_error(), "a folder without tokenizer.json or tokenizer.model"));
}

/* ------------------------------------------------------------ the merge */

/* tiktoken's quadratic loop and the heap give the same ids on any piece. */
TEST(tok_merge_methods_agree) {
    dtx_tokenizer *t = trained(1500);
    REQUIRE(t);
    dtx_rng r;
    dtx_rng_seed(&r, 11);
    dtx_idbuf a = {0}, b = {0};
    uint8_t piece[600];
    static const char alpha[] = "aaaabbbcdeht ehtnoi";
    for (int it = 0; it < 2000; it++) {
        size_t n = 1 + dtx_rng_next(&r) % (it < 1000 ? 20 : sizeof piece);
        for (size_t i = 0; i < n; i++)
            piece[i] = it % 4 == 0 ? (uint8_t)dtx_rng_next(&r) : (uint8_t)alpha[dtx_rng_next(&r) % (sizeof alpha - 1)];
        a.n = b.n = 0;
        dtx_tok_merge_method = 1;
        REQUIRE(dtx_tok_encode_piece(t, piece, n, &a) == DTX_OK);
        dtx_tok_merge_method = 2;
        REQUIRE(dtx_tok_encode_piece(t, piece, n, &b) == DTX_OK);
        CHECKF(a.n == b.n && memcmp(a.ids, b.ids, (size_t)a.n * 4) == 0, "piece %d of %zu bytes", it, n);
    }
    dtx_tok_merge_method = 0;
    dtx_idbuf_free(&a);
    dtx_idbuf_free(&b);
    dtx_tokenizer_free(t);
}

/* Very long pieces (half a megabyte of one letter, of spaces, ...) encode
 * in time (the heap merge) and round-trip. */
TEST(tok_long_pieces) {
    dtx_tokenizer *t = trained(800);
    REQUIRE(t);
    size_t n = 1 << 19;
    char *s = malloc(n);
    const char fills[] = {'a', ' ', '7', '\n', '!'};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(s, fills[f], n);
        CHECKF(round_trips(t, s, n, DTX_ENCODE_ORDINARY), "512 KiB of 0x%02x", fills[f]);
    }
    free(s);
    dtx_tokenizer_free(t);
}

/* ------------------------------------------------------------ cl100k_base */

/* Encodes every fixture case with t; returns the number that match tiktoken. */
static int check_fixtures(const dtx_tokenizer *t, int *n_cases, int64_t *total_ids) {
    size_t len;
    char *json = test_slurp(fixture_path("tokenizer/cl100k_cases.json"), &len);
    if (!json) {
        test_fail_at(__FILE__, __LINE__, "cannot read %s", fixture_path("tokenizer/cl100k_cases.json"));
        return 0;
    }
    cJSON *root = cJSON_ParseWithLength(json, len);
    free(json);
    cJSON *cases = root ? cJSON_GetObjectItem(root, "cases") : NULL;
    if (!cJSON_IsArray(cases)) {
        test_fail_at(__FILE__, __LINE__, "the fixture is not {\"cases\": [...]}");
        cJSON_Delete(root);
        return 0;
    }
    int n_ok = 0;
    *n_cases = 0;
    *total_ids = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        (*n_cases)++;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItem(c, "bytes_b64"));
        cJSON *want = cJSON_GetObjectItem(c, "ids");
        int special = cJSON_IsTrue(cJSON_GetObjectItem(c, "special"));
        if (!name || !b64 || !cJSON_IsArray(want)) {
            test_fail_at(__FILE__, __LINE__, "fixture case %d is malformed", *n_cases);
            continue;
        }
        size_t bl = strlen(b64);
        uint8_t *text = malloc(bl / 4 * 3 + 1);
        int64_t tl = bl ? dtx_b64_decode(b64, bl, text) : 0;
        int32_t *ids = NULL;
        int64_t n = 0;
        if (tl < 0 || dtx_tokenizer_encode(t, (const char *)text, (size_t)tl,
                                           special ? DTX_ENCODE_SPECIAL : DTX_ENCODE_ORDINARY, &ids, &n) != DTX_OK) {
            test_fail_at(__FILE__, __LINE__, "case '%s': %s", name, tl < 0 ? "bad base64" : dtx_last_error());
            free(text);
            continue;
        }
        int64_t nw = cJSON_GetArraySize(want);
        int same = n == nw;
        int64_t first_diff = -1;
        for (int64_t i = 0; i < (n < nw ? n : nw); i++) {
            if (ids[i] != (int32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble) {
                same = 0;
                if (first_diff < 0) first_diff = i;
            }
        }
        CHECKF(same, "case '%s': %lld ids, tiktoken %lld, first difference at %lld", name, (long long)n, (long long)nw,
               (long long)first_diff);
        char *back = NULL;
        size_t blen = 0;
        CHECKF(dtx_tokenizer_decode(t, ids, n, &back, &blen) == DTX_OK && blen == (size_t)tl &&
                   memcmp(back, text, blen) == 0,
               "case '%s': decode differs", name);
        n_ok += same;
        *total_ids += n;
        free(back);
        free(ids);
        free(text);
    }
    cJSON_Delete(root);
    return n_ok;
}

TEST(tok_cl100k_fixtures) {
    dtx_tokenizer *t = cl100k();
    REQUIRE(t);
    CHECK(strcmp(dtx_tokenizer_source(t), "tiktoken") == 0);
    CHECK(dtx_tokenizer_vocab_size(t) == 100277);
    CHECK(dtx_tokenizer_num_ordinary(t) == 100256);
    CHECK(dtx_tokenizer_token_id(t, "<|endoftext|>") == 100257);
    CHECK(dtx_tokenizer_token_id(t, "<|endofprompt|>") == 100276);
    int n_cases;
    int64_t total;
    int n_ok = check_fixtures(t, &n_cases, &total);
    CHECK(n_cases > 300 && n_ok == n_cases);
    printf("     cl100k_base: %d of %d tiktoken cases byte-identical (%lld ids)\n", n_ok, n_cases, (long long)total);
}

/* The PCRE2 interpreter (no JIT) cuts the same pieces, long ones included. */
TEST(tok_cl100k_no_jit) {
    REQUIRE(cl100k());
    dtx_split_no_jit = 1;
    dtx_tokenizer *t = NULL;
    dtx_status st = dtx_tokenizer_load(&t, cl100k_path());
    dtx_split_no_jit = 0;
    REQUIRE(st == DTX_OK);
    int n_cases;
    int64_t total;
    CHECK(check_fixtures(t, &n_cases, &total) == n_cases);
    size_t n = 1 << 18;
    char *s = malloc(n);
    const char fills[] = {'a', ' ', '\n', '!'};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(s, fills[f], n);
        int32_t *a, *b;
        int64_t na, nb;
        REQUIRE(dtx_tokenizer_encode(t, s, n, 0, &a, &na) == DTX_OK);
        REQUIRE(dtx_tokenizer_encode(cl100k(), s, n, 0, &b, &nb) == DTX_OK);
        CHECKF(na == nb && memcmp(a, b, (size_t)na * 4) == 0, "256 KiB of 0x%02x", fills[f]);
        free(a);
        free(b);
    }
    free(s);
    /* invalid UTF-8: the same gaps */
    dtx_rng r;
    dtx_rng_seed(&r, 17);
    char buf[1024];
    for (int it = 0; it < 100; it++) {
        size_t nb = (size_t)(dtx_rng_next(&r) % sizeof buf);
        for (size_t i = 0; i < nb; i++) {
            uint64_t v = dtx_rng_next(&r);
            buf[i] = (char)(v % 3 ? "ab \n\xe4\xbd\xa0\xff'9"[v % 10] : (char)(v >> 8));
        }
        int32_t *a, *b;
        int64_t na, nb2;
        REQUIRE(dtx_tokenizer_encode(t, buf, nb, 0, &a, &na) == DTX_OK);
        REQUIRE(dtx_tokenizer_encode(cl100k(), buf, nb, 0, &b, &nb2) == DTX_OK);
        CHECKF(na == nb2 && memcmp(a, b, (size_t)na * 4) == 0, "random bytes %d", it);
        free(a);
        free(b);
    }
    dtx_tokenizer_free(t);
}

TEST(tok_cl100k_save_load) {
    dtx_tokenizer *t = cl100k();
    REQUIRE(t);
    const char *p = test_path("cl100k.tok");
    REQUIRE(dtx_tokenizer_save(t, p) == DTX_OK);
    dtx_tokenizer *u = NULL;
    REQUIRE(dtx_tokenizer_load(&u, p) == DTX_OK);
    CHECK(dtx_tokenizer_vocab_size(u) == 100277 && dtx_tokenizer_num_ordinary(u) == 100256);
    CHECK(dtx_tokenizer_token_id(u, "<|fim_suffix|>") == 100260);
    static const char s[] = "Hello, world! <|endoftext|> 12345 \r\n  ünïcödé 😀";
    int32_t *i1, *i2;
    int64_t n1, n2;
    REQUIRE(dtx_tokenizer_encode(t, s, sizeof s - 1, DTX_ENCODE_SPECIAL, &i1, &n1) == DTX_OK);
    REQUIRE(dtx_tokenizer_encode(u, s, sizeof s - 1, DTX_ENCODE_SPECIAL, &i2, &n2) == DTX_OK);
    CHECK(n1 == n2 && memcmp(i1, i2, (size_t)n1 * 4) == 0);
    free(i1);
    free(i2);
    /* ids with no token (cl100k's holes) are refused */
    int32_t hole = 100256;
    char *text;
    size_t len;
    CHECK(dtx_tokenizer_decode(u, &hole, 1, &text, &len) == DTX_ERR_ARG && strstr(dtx_last_error(), "100256"));
    hole = 100270;
    CHECK(dtx_tokenizer_decode(t, &hole, 1, &text, &len) == DTX_ERR_ARG);
    dtx_tokenizer_free(u);
    /* random bytes round-trip through cl100k too */
    dtx_rng r;
    dtx_rng_seed(&r, 3);
    char buf[2048];
    for (int it = 0; it < 100; it++) {
        size_t n = (size_t)(dtx_rng_next(&r) % sizeof buf);
        for (size_t i = 0; i < n; i++) buf[i] = (char)dtx_rng_next(&r);
        CHECK(round_trips(t, buf, n, DTX_ENCODE_ORDINARY));
    }
}
