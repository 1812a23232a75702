/* Token shards (docs/data.md): write/read round trips at both widths, the
 * streamed writer, one test per malformed-file rule (status, the file name
 * and a distinctive piece of the one-line message), dtx_tokens_read on a
 * shard, and batch sampling: determinism from a seed, bit-identical resumption
 * from a saved RNG state, windows always in range, the sequential walk. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "io/shard.h"
#include "test.h"

/* ---------------------------------------------------------------- helpers */

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    if (b && fread(b, 1, (size_t)len, fp) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(fp);
    *n = (size_t)len;
    return b;
}

/* n tokens, ids uniform in [0, vocab), from a seed. */
static int32_t *random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    int32_t *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    for (int64_t i = 0; t && i < n; i++) t[i] = (int32_t)(dtx_rng_next(&r) % (uint64_t)vocab);
    return t;
}

/* A shard whose token i is i (vocab n + 1, so width 4 past 65536). */
static dtx_shard *iota_shard(const char *name, int64_t n) {
    int32_t *t = malloc((size_t)n * sizeof *t);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)i;
    const char *p = test_path(name);
    dtx_shard *s = NULL;
    if (dtx_shard_write(p, t, n, n + 1) != DTX_OK || dtx_shard_open(&s, p, n + 1) != DTX_OK) s = NULL;
    free(t);
    return s;
}

static void roundtrip(int64_t n, int64_t vocab, int want_width) {
    int32_t *t = random_tokens(n, vocab, (uint64_t)vocab + (uint64_t)n);
    REQUIRE(t);
    if (n) t[n - 1] = (int32_t)(vocab - 1); /* the largest id */
    if (n > 1) t[0] = 0;
    const char *p = test_path("rt.bin");
    REQUIRE(dtx_shard_write(p, t, n, vocab) == DTX_OK);
    CHECK(test_no_temp_files(test_tmpdir()));
    size_t len = 0;
    uint8_t *b = slurp(p, &len);
    REQUIRE(b);
    CHECKF(len == (size_t)(64 + n * want_width), "size %zu for %lld tokens of width %d", len, (long long)n, want_width);
    CHECK(memcmp(b, "DTXTOKS\0", 8) == 0);
    dtx_shard_header h;
    dtx_shard_header_decode(b, &h);
    CHECK(h.version == 1 && h.width == (uint32_t)want_width && h.vocab_size == (uint64_t)vocab &&
          h.count == (uint64_t)n && h.header_size == 64 && h.eos_id == -1 && h.n_docs == 0 && h.reserved == 0);
    /* the tokens are little-endian */
    if (n > 1) {
        const uint8_t *q = b + 64 + (size_t)(n - 1) * want_width;
        uint32_t v = q[0] | (uint32_t)q[1] << 8 | (want_width == 4 ? (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24 : 0);
        CHECK(v == (uint32_t)(vocab - 1));
    }
    free(b);
    dtx_shard *s = NULL;
    REQUIRE(dtx_shard_open(&s, p, vocab) == DTX_OK);
    CHECK(dtx_shard_count(s) == n && dtx_shard_vocab_size(s) == vocab && dtx_shard_width(s) == want_width &&
          dtx_shard_eos_id(s) == -1 && dtx_shard_num_docs(s) == 0);
    int32_t *back = malloc((size_t)(n ? n : 1) * sizeof *back);
    REQUIRE(back);
    CHECK(dtx_shard_read(s, 0, n, back) == DTX_OK);
    CHECK(n == 0 || memcmp(back, t, (size_t)n * sizeof *t) == 0);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= dtx_shard_get(s, i) == t[i];
    CHECK(ok);
    if (n > 10) {
        CHECK(dtx_shard_read(s, 3, 5, back) == DTX_OK && memcmp(back, t + 3, 5 * sizeof *t) == 0);
        CHECK(dtx_shard_read(s, n - 2, 3, back) == DTX_ERR_ARG && strstr(dtx_last_error(), "outside"));
        CHECK(dtx_shard_read(s, -1, 1, back) == DTX_ERR_ARG);
        CHECK(dtx_shard_read(s, n, 0, back) == DTX_OK);
    }
    dtx_shard_close(s);
    /* vocab_size 0: take the header's */
    REQUIRE(dtx_shard_open(&s, p, 0) == DTX_OK);
    CHECK(dtx_shard_vocab_size(s) == vocab);
    dtx_shard_close(s);
    free(back);
    free(t);
}

TEST(shard_roundtrip_width2) {
    roundtrip(1000, 4096, 2);
    roundtrip(777, 65536, 2); /* the largest 2-byte vocabulary: id 65535 */
    roundtrip(5, 1, 2);
    roundtrip(0, 300, 2);
}

TEST(shard_roundtrip_width4) {
    roundtrip(1000, 65537, 4);
    roundtrip(3000, 100277, 4); /* cl100k_base */
    roundtrip(10, 2147483647, 4);
}

TEST(shard_writer_documents) {
    const char *p = test_path("docs.bin");
    dtx_shard_writer *w = NULL;
    REQUIRE(dtx_shard_writer_open(&w, p, 300, 298) == DTX_OK);
    int32_t a[] = {1, 2, 3}, b[] = {299, 0};
    CHECK(dtx_shard_writer_append(w, a, 3) == DTX_OK);
    CHECK(dtx_shard_writer_end_document(w) == DTX_OK);
    CHECK(dtx_shard_writer_append(w, b, 2) == DTX_OK);
    CHECK(dtx_shard_writer_end_document(w) == DTX_OK);
    CHECK(dtx_shard_writer_count(w) == 7);
    /* a bad id: refused, nothing of the call written */
    int32_t bad[] = {5, 300};
    CHECK(dtx_shard_writer_append(w, bad, 2) == DTX_ERR_ARG && strstr(dtx_last_error(), "docs.bin") &&
          strstr(dtx_last_error(), "token 8 has id 300"));
    int32_t neg[] = {-1};
    CHECK(dtx_shard_writer_append(w, neg, 1) == DTX_ERR_ARG);
    CHECK(dtx_shard_writer_count(w) == 7);
    REQUIRE(dtx_shard_writer_commit(w) == DTX_OK);
    CHECK(test_no_temp_files(test_tmpdir()));
    dtx_shard *s = NULL;
    REQUIRE(dtx_shard_open(&s, p, 300) == DTX_OK);
    int32_t want[] = {1, 2, 3, 298, 299, 0, 298}, got[7];
    CHECK(dtx_shard_count(s) == 7 && dtx_shard_read(s, 0, 7, got) == DTX_OK && memcmp(got, want, sizeof want) == 0);
    CHECK(dtx_shard_eos_id(s) == 298 && dtx_shard_num_docs(s) == 2);
    dtx_shard_close(s);

    /* abort: the target is untouched and no temporary is left */
    REQUIRE(dtx_shard_writer_open(&w, p, 300, -1) == DTX_OK);
    CHECK(dtx_shard_writer_append(w, a, 3) == DTX_OK);
    CHECK(dtx_shard_writer_end_document(w) == DTX_OK); /* no eos: counted only */
    CHECK(dtx_shard_writer_count(w) == 3);
    dtx_shard_writer_abort(w);
    CHECK(test_no_temp_files(test_tmpdir()));
    REQUIRE(dtx_shard_open(&s, p, 300) == DTX_OK);
    CHECK(dtx_shard_count(s) == 7);
    dtx_shard_close(s);

    /* bad arguments to open */
    CHECK(dtx_shard_writer_open(&w, p, 0, -1) == DTX_ERR_ARG && w == NULL && strstr(dtx_last_error(), "vocab_size 0"));
    CHECK(dtx_shard_writer_open(&w, p, 300, 300) == DTX_ERR_ARG && strstr(dtx_last_error(), "eos id 300"));
    CHECK(dtx_shard_writer_open(&w, test_path("no/such/dir/x.bin"), 300, -1) == DTX_ERR_IO &&
          strstr(dtx_last_error(), "x.bin") && strstr(dtx_last_error(), "No such file"));
    CHECK(dtx_shard_write(p, bad, 2, 300) == DTX_ERR_ARG);
    CHECK(test_no_temp_files(test_tmpdir()));
}

/* ---------------------------------------------------------------- malformed files */

/* A valid shard image of n tokens (vocab, ids i % vocab); *len its size. */
static uint8_t *image(int64_t n, int64_t vocab, size_t *len) {
    int width = vocab <= 65536 ? 2 : 4;
    *len = 64 + (size_t)n * width;
    uint8_t *b = calloc(1, *len + 64); /* room to append */
    dtx_shard_header h = {.version = 1, .width = (uint32_t)width, .vocab_size = (uint64_t)vocab, .count = (uint64_t)n,
                          .header_size = 64, .eos_id = -1};
    dtx_shard_header_encode(&h, b);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)(i % vocab);
        for (int k = 0; k < width; k++) b[64 + i * width + k] = (uint8_t)(v >> (8 * k));
    }
    return b;
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes len bytes of b to a fresh file and expects dtx_shard_open(vocab)
 * to fail with want, a message starting with the path, holding s1 and s2,
 * on one line, and *out left NULL. */
static void expect_bad_at(int line, const uint8_t *b, size_t len, int64_t vocab, dtx_status want, const char *s1,
                          const char *s2) {
    static int k;
    char name[32];
    snprintf(name, sizeof name, "bad%d.bin", k++);
    const char *p = test_path(name);
    if (write_file(p, b, len)) {
        test_fail_at(__FILE__, line, "could not write %s", p);
        return;
    }
    dtx_shard *s = (dtx_shard *)&k; /* must come back NULL */
    dtx_status st = dtx_shard_open(&s, p, vocab);
    const char *msg = dtx_last_error();
    if (st != want) test_fail_at(__FILE__, line, "status %d, want %d (%s)", st, want, msg);
    if (strncmp(msg, p, strlen(p)) != 0) test_fail_at(__FILE__, line, "message lacks the path: %s", msg);
    if (s1 && !strstr(msg, s1)) test_fail_at(__FILE__, line, "message lacks '%s': %s", s1, msg);
    if (s2 && !strstr(msg, s2)) test_fail_at(__FILE__, line, "message lacks '%s': %s", s2, msg);
    if (strchr(msg, '\n')) test_fail_at(__FILE__, line, "message has a newline: %s", msg);
    if (s) test_fail_at(__FILE__, line, "*out not NULL after a failure");
    if (st == DTX_OK) dtx_shard_close(s);
    /* dtx_tokens_read refuses it the same way, when it has the magic (other
     * files are read as text) */
    if (len < 8 || memcmp(b, "DTXTOKS\0", 8) != 0) return;
    int32_t *t = (int32_t *)&k;
    int64_t n = -1;
    st = dtx_tokens_read(p, vocab, &t, &n);
    if (st != want || !strstr(dtx_last_error(), s1 ? s1 : ""))
        test_fail_at(__FILE__, line, "dtx_tokens_read: status %d: %s", st, dtx_last_error());
    if (t || n != 0) test_fail_at(__FILE__, line, "dtx_tokens_read left output after a failure");
}
#define EXPECT_BAD(b, len, vocab, want, s1, s2) expect_bad_at(__LINE__, b, len, vocab, want, s1, s2)

TEST(shard_malformed) {
    size_t len;
    uint8_t *b = image(100, 4096, &len);
    REQUIRE(b);
    /* the image itself is fine */
    const char *good = test_path("good.bin");
    REQUIRE(write_file(good, b, len) == 0);
    dtx_shard *s = NULL;
    REQUIRE(dtx_shard_open(&s, good, 4096) == DTX_OK);
    dtx_shard_close(s);

    uint8_t *c = malloc(len + 64);
    REQUIRE(c);
#define FRESH() memcpy(c, b, len + 64)
    FRESH();
    c[0] = 'X';
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "not a token shard", "bad magic");
    FRESH();
    c[7] = ' '; /* "DTXTOKS " */
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "bad magic", NULL);
    EXPECT_BAD(c, 0, 4096, DTX_ERR_FORMAT, "not a token shard", NULL);             /* empty file */
    EXPECT_BAD(b, 5, 4096, DTX_ERR_FORMAT, "not a token shard", NULL);             /* shorter than the magic */
    EXPECT_BAD(b, 40, 4096, DTX_ERR_FORMAT, "truncated: 40 bytes", "64-byte");     /* a cut header */
    FRESH();
    put32(c + 8, 2);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "shard version 2", "byte offset 8");
    FRESH();
    put32(c + 8, 0);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "shard version 0", NULL);
    FRESH();
    put32(c + 12, 3);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "token width 3", "2 or 4");
    FRESH();
    put32(c + 12, 4); /* 4 bytes for a 2-byte vocabulary (the size would even fit: 64 + 50 x 4) */
    put64(c + 24, 50);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "token width 4 does not match vocab_size 4096", NULL);
    FRESH();
    put64(c + 16, 0);
    EXPECT_BAD(c, len, 0, DTX_ERR_FORMAT, "vocab_size 0", "byte offset 16");
    FRESH();
    put64(c + 16, 70000); /* width 2 with a 4-byte vocabulary */
    EXPECT_BAD(c, len, 0, DTX_ERR_FORMAT, "token width 2 does not match vocab_size 70000", NULL);
    FRESH();
    put64(c + 32, 72);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "header size 72", "byte offset 32");
    FRESH();
    put64(c + 40, 4096);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "eos id 4096", "byte offset 40");
    FRESH();
    put64(c + 40, (uint64_t)-2);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "eos id -2", NULL);
    FRESH();
    put64(c + 56, 1);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "reserved field", "byte offset 56");
    /* sizes */
    EXPECT_BAD(b, len - 1, 4096, DTX_ERR_FORMAT, "truncated: the file is 263 bytes", "100 tokens x 2 bytes + 64 need 264");
    EXPECT_BAD(b, len - 2, 4096, DTX_ERR_FORMAT, "truncated", "need 264");
    EXPECT_BAD(b, 64, 4096, DTX_ERR_FORMAT, "truncated: the file is 64 bytes", NULL); /* header only */
    EXPECT_BAD(b, len + 1, 4096, DTX_ERR_FORMAT, "trailing bytes after the last token", "265 bytes");
    EXPECT_BAD(b, len + 2, 4096, DTX_ERR_FORMAT, "trailing bytes", NULL); /* one token too many */
    FRESH();
    put64(c + 24, UINT64_MAX / 2 + 5); /* count x width overflows */
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "truncated", "more than 2^64");
    FRESH();
    put64(c + 24, 0);
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "trailing bytes", "0 tokens");
    /* ids */
    FRESH();
    c[64 + 2 * 37] = 0x00;
    c[64 + 2 * 37 + 1] = 0x10; /* 4096 */
    EXPECT_BAD(c, len, 4096, DTX_ERR_FORMAT, "token 37 (byte offset 138) has id 4096", "vocab_size 4096");
    FRESH();
    c[64 + 2 * 99] = 0xff;
    c[64 + 2 * 99 + 1] = 0xff; /* the last token */
    EXPECT_BAD(c, len, 0, DTX_ERR_FORMAT, "token 99 (byte offset 262) has id 65535", NULL);
    /* the caller's vocabulary */
    EXPECT_BAD(b, len, 300, DTX_ERR_ARG, "vocab_size is 4096, expected 300", "another tokenizer");
    free(b);
    free(c);

    /* width 4: an id past the vocabulary in a later block of the scan */
    b = image(200000, 100277, &len);
    REQUIRE(b);
    put32(b + 64 + 4 * 150001, 100277);
    EXPECT_BAD(b, len, 100277, DTX_ERR_FORMAT, "token 150001 (byte offset 600068) has id 100277", NULL);
    put32(b + 64 + 4 * 150001, 0x80000000u); /* would be negative as int32 */
    EXPECT_BAD(b, len, 100277, DTX_ERR_FORMAT, "token 150001", "id 2147483648");
    free(b);

    /* not a file */
    s = (dtx_shard *)good;
    CHECK(dtx_shard_open(&s, test_path("missing.bin"), 0) == DTX_ERR_IO && s == NULL &&
          strstr(dtx_last_error(), "missing.bin: No such file"));
    CHECK(dtx_shard_open(&s, test_tmpdir(), 0) == DTX_ERR_IO && strstr(dtx_last_error(), "not a regular file"));
}

/* ---------------------------------------------------------------- token files */

TEST(shard_tokens_read) {
    int32_t *t = random_tokens(5000, 4096, 3);
    REQUIRE(t);
    const char *p = test_path("interop.bin");
    REQUIRE(dtx_shard_write(p, t, 5000, 4096) == DTX_OK);
    int32_t *back = NULL;
    int64_t n = 0;
    REQUIRE(dtx_tokens_read(p, 4096, &back, &n) == DTX_OK);
    CHECK(n == 5000 && memcmp(back, t, sizeof *t * 5000) == 0);
    free(back);
    REQUIRE(dtx_tokens_read(p, 0, &back, &n) == DTX_OK); /* no vocabulary given */
    CHECK(n == 5000);
    free(back);
    back = NULL;
    CHECK(dtx_tokens_read(p, 8192, &back, &n) == DTX_ERR_ARG && back == NULL &&
          strstr(dtx_last_error(), "interop.bin: the shard's vocab_size is 4096, expected 8192"));
    /* an empty shard reads as no tokens */
    REQUIRE(dtx_shard_write(p, t, 0, 4096) == DTX_OK);
    REQUIRE(dtx_tokens_read(p, 4096, &back, &n) == DTX_OK);
    CHECK(n == 0);
    free(back);
    /* text that merely starts like the magic is still text (and refused as such) */
    const char *q = test_path("text.txt");
    REQUIRE(write_file(q, "DTXTOKS 1 2", 11) == 0);
    CHECK(dtx_tokens_read(q, 10, &back, &n) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "'DTXTOKS'"));
    REQUIRE(write_file(q, "1 2 3\n", 6) == 0);
    REQUIRE(dtx_tokens_read(q, 10, &back, &n) == DTX_OK);
    CHECK(n == 3 && back[2] == 3);
    free(back);
    free(t);
}

/* ---------------------------------------------------------------- sampling */

TEST(shard_sample_deterministic) {
    int32_t *t = random_tokens(20000, 4096, 11);
    REQUIRE(t);
    const char *p = test_path("sample.bin");
    REQUIRE(dtx_shard_write(p, t, 20000, 4096) == DTX_OK);
    dtx_shard *s = NULL;
    REQUIRE(dtx_shard_open(&s, p, 4096) == DTX_OK);
    enum { B = 4, T = 33, STEPS = 10 };
    static int32_t in1[STEPS][B * T], tg1[STEPS][B * T], in2[B * T], tg2[B * T];
    dtx_rng r1, r2, saved;
    dtx_rng_seed(&r1, 1234);
    for (int k = 0; k < STEPS; k++) {
        if (k == 6) saved = r1; /* a checkpoint: the state is a plain value */
        REQUIRE(dtx_shard_sample_batch(s, &r1, B, T, in1[k], tg1[k]) == DTX_OK);
    }
    /* the same seed gives the same batches */
    dtx_rng_seed(&r2, 1234);
    int same = 1;
    for (int k = 0; k < STEPS; k++) {
        REQUIRE(dtx_shard_sample_batch(s, &r2, B, T, in2, tg2) == DTX_OK);
        same &= memcmp(in2, in1[k], sizeof in2) == 0 && memcmp(tg2, tg1[k], sizeof tg2) == 0;
    }
    CHECK(same);
    CHECK(memcmp(&r1, &r2, sizeof r1) == 0);
    /* resuming from the saved state continues identically */
    r2 = saved;
    same = 1;
    for (int k = 6; k < STEPS; k++) {
        REQUIRE(dtx_shard_sample_batch(s, &r2, B, T, in2, tg2) == DTX_OK);
        same &= memcmp(in2, in1[k], sizeof in2) == 0 && memcmp(tg2, tg1[k], sizeof tg2) == 0;
    }
    CHECK(same);
    /* another seed, other batches */
    dtx_rng_seed(&r2, 1235);
    REQUIRE(dtx_shard_sample_batch(s, &r2, B, T, in2, tg2) == DTX_OK);
    CHECK(memcmp(in2, in1[0], sizeof in2) != 0);
    /* the rule: row r starts at next() mod (count - T), with dtx_rng's stream
     * (the same as difftx train's token-file batcher) */
    dtx_rng g;
    dtx_rng_seed(&g, 1234);
    int rule = 1;
    for (int r = 0; r < B; r++) {
        int64_t start = (int64_t)(dtx_rng_next(&g) % (20000 - T));
        rule &= memcmp(in1[0] + r * T, t + start, T * sizeof *t) == 0 &&
                memcmp(tg1[0] + r * T, t + start + 1, T * sizeof *t) == 0;
    }
    CHECK(rule);
    dtx_shard_close(s);
    free(t);
}

TEST(shard_sample_in_range) {
    /* token i is i: a window shows where it starts */
    const int64_t n = 70000; /* width 4 */
    dtx_shard *s = iota_shard("iota.bin", n);
    REQUIRE(s);
    CHECK(dtx_shard_width(s) == 4);
    enum { B = 16 };
    int64_t Ts[] = {1, 7, 512, 69999};
    int32_t *in = malloc(sizeof *in * B * 69999), *tg = malloc(sizeof *tg * B * 69999);
    REQUIRE(in && tg);
    dtx_rng r;
    dtx_rng_seed(&r, 5);
    int64_t lo = n, hi = -1;
    for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
        int64_t T = Ts[k];
        for (int rep = 0; rep < (T < 1000 ? 200 : 2); rep++) {
            REQUIRE(dtx_shard_sample_batch(s, &r, B, T, in, tg) == DTX_OK);
            int ok = 1;
            for (int b = 0; b < B; b++) {
                const int32_t *x = in + (size_t)b * T, *y = tg + (size_t)b * T;
                int64_t start = x[0];
                ok &= start >= 0 && start + T < n;
                for (int64_t i = 0; i < T && ok; i++) ok &= x[i] == start + i && y[i] == start + i + 1;
                if (T == 1) {
                    lo = start < lo ? start : lo;
                    hi = start > hi ? start : hi;
                }
            }
            CHECKF(ok, "T = %lld: a window out of range or not contiguous", (long long)T);
        }
    }
    /* with T = 1, 3200 draws reach near both ends of [0, n - 2] */
    CHECKF(lo < 500 && hi > n - 500, "starts in [%lld, %lld]", (long long)lo, (long long)hi);
    /* T = n - 1: exactly one window */
    REQUIRE(dtx_shard_sample_batch(s, &r, 2, n - 1, in, tg) == DTX_OK);
    CHECK(in[0] == 0 && tg[n - 2] == n - 1 && in[n - 1] == 0);
    /* too long, or bad sizes */
    CHECK(dtx_shard_sample_batch(s, &r, 1, n, in, tg) == DTX_ERR_ARG && strstr(dtx_last_error(), "iota.bin") &&
          strstr(dtx_last_error(), "holds 70000 tokens"));
    CHECK(dtx_shard_sample_batch(s, &r, 0, 4, in, tg) == DTX_ERR_ARG);
    CHECK(dtx_shard_sample_batch(s, &r, 4, 0, in, tg) == DTX_ERR_ARG);
    dtx_shard_close(s);
    /* an empty shard samples nothing */
    int32_t none = 0;
    const char *p = test_path("empty.bin");
    REQUIRE(dtx_shard_write(p, &none, 0, 10) == DTX_OK);
    REQUIRE(dtx_shard_open(&s, p, 10) == DTX_OK);
    CHECK(dtx_shard_count(s) == 0);
    CHECK(dtx_shard_sample_batch(s, &r, 1, 1, in, tg) == DTX_ERR_ARG && strstr(dtx_last_error(), "holds 0 tokens"));
    int64_t pos = 0;
    CHECK(dtx_shard_sequential_batch(s, &pos, 0, 1, 1, in, tg, NULL) == DTX_ERR_ARG);
    dtx_shard_close(s);
    free(in);
    free(tg);
}

TEST(shard_sequential) {
    const int64_t n = 1000;
    dtx_shard *s = iota_shard("seq.bin", n);
    REQUIRE(s);
    enum { B = 3, T = 64 };
    int32_t in[B * T], tg[B * T];
    /* stop mode: every target 1 .. (n-1) - (n-1) mod T exactly once, in order */
    int64_t pos = 0, rows = -1, next_target = 1, batches = 0;
    int ok = 1;
    for (;;) {
        REQUIRE(dtx_shard_sequential_batch(s, &pos, 0, B, T, in, tg, &rows) == DTX_OK);
        for (int64_t r = 0; r < rows; r++)
            for (int i = 0; i < T; i++) {
                ok &= tg[r * T + i] == next_target && in[r * T + i] == next_target - 1;
                next_target++;
            }
        batches++;
        if (rows < B) break;
    }
    CHECK(ok);
    int64_t full = (n - 1) / T; /* 15 windows */
    CHECKF(next_target - 1 == full * T, "covered %lld targets, want %lld", (long long)(next_target - 1),
           (long long)(full * T));
    CHECK(batches == full / B + 1 && rows == full % B);
    CHECK(pos == full * T);
    /* once past the end, stop mode keeps returning 0 rows */
    REQUIRE(dtx_shard_sequential_batch(s, &pos, 0, B, T, in, tg, &rows) == DTX_OK);
    CHECK(rows == 0 && pos == full * T);
    /* wrap mode: always B rows, restarting at 0 */
    pos = 14 * T;
    REQUIRE(dtx_shard_sequential_batch(s, &pos, 1, B, T, in, tg, &rows) == DTX_OK);
    CHECK(rows == B && in[0] == 14 * T && in[T] == 0 && in[2 * T] == T && tg[2 * T + T - 1] == 2 * T);
    CHECK(pos == 2 * T);
    /* an exact fit: n - 1 a multiple of T covers every target */
    dtx_shard_close(s);
    s = iota_shard("seq2.bin", 4 * T + 1);
    REQUIRE(s);
    pos = 0;
    REQUIRE(dtx_shard_sequential_batch(s, &pos, 0, B, T, in, tg, &rows) == DTX_OK);
    CHECK(rows == 3);
    REQUIRE(dtx_shard_sequential_batch(s, &pos, 0, B, T, in, tg, &rows) == DTX_OK);
    CHECK(rows == 1 && tg[T - 1] == 4 * T);
    /* bad positions */
    pos = -1;
    CHECK(dtx_shard_sequential_batch(s, &pos, 0, B, T, in, tg, &rows) == DTX_ERR_ARG && strstr(dtx_last_error(), "position -1"));
    pos = 4 * T + 1;
    CHECK(dtx_shard_sequential_batch(s, &pos, 1, B, T, in, tg, &rows) == DTX_ERR_ARG);
    dtx_shard_close(s);
}

/* Several threads sampling one open shard see what one thread sees. */
TEST(shard_sample_threads) {
    dtx_shard *s = iota_shard("thr.bin", 5000);
    REQUIRE(s);
    enum { B = 8, T = 16, N = 8 };
    static int32_t want[N][B * T], got[N][B * T], tg[N][B * T];
    for (int k = 0; k < N; k++) {
        dtx_rng r;
        dtx_rng_seed(&r, (uint64_t)k);
        REQUIRE(dtx_shard_sample_batch(s, &r, B, T, want[k], tg[k]) == DTX_OK);
    }
    int fails = 0;
#pragma omp parallel for reduction(+ : fails)
    for (int k = 0; k < N; k++) {
        dtx_rng r;
        dtx_rng_seed(&r, (uint64_t)k);
        fails += dtx_shard_sample_batch(s, &r, B, T, got[k], tg[k]) != DTX_OK;
    }
    CHECK(fails == 0 && memcmp(got, want, sizeof got) == 0);
    dtx_shard_close(s);
}
