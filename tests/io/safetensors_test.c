/* Safetensors reader and writer: round trips, conversions, one test per
 * malformed-file rule (status and a distinctive piece of the message), a
 * fuzz-style robustness loop, and write failures. */
#include "../test.h"
#include "io/safetensors.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

static int is_zeroed(const dtx_st_file *f) {
    static const dtx_st_file zero;
    return memcmp(f, &zero, sizeof zero) == 0;
}

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Builds a file: 8-byte length field `len`, the header text, then `data_len`
 * bytes from data (or a 0x3c pattern when data is NULL). */
static const char *make_raw(const char *name, uint64_t len, const char *header, const void *data, size_t data_len) {
    size_t hl = strlen(header), n = 8 + hl + data_len;
    uint8_t *buf = malloc(n);
    if (!buf) return NULL;
    for (int b = 0; b < 8; b++) buf[b] = (uint8_t)(len >> (8 * b));
    memcpy(buf + 8, header, hl);
    if (data) memcpy(buf + 8 + hl, data, data_len);
    else memset(buf + 8 + hl, 0x3c, data_len);
    const char *path = test_path(name);
    int rc = write_file(path, buf, n);
    free(buf);
    return rc == 0 ? path : NULL;
}

static const char *make_file(const char *header, size_t data_len) {
    return make_raw("bad.safetensors", strlen(header), header, NULL, data_len);
}

/* Opens path and expects `want` with a message that starts with the path
 * and contains s1 and s2 (either may be NULL), and *f left zeroed. */
static void expect_fail_at(int line, const char *path, dtx_status want, const char *s1, const char *s2) {
    if (!path) { test_fail_at(__FILE__, line, "could not write the test file"); return; }
    dtx_st_file f;
    memset(&f, 0x5a, sizeof f);
    dtx_status st = dtx_st_open(&f, path);
    const char *msg = dtx_last_error();
    if (st != want) test_fail_at(__FILE__, line, "status %d, want %d (%s)", st, want, msg);
    if (strncmp(msg, path, strlen(path)) != 0) test_fail_at(__FILE__, line, "message lacks the path: %s", msg);
    if (s1 && !strstr(msg, s1)) test_fail_at(__FILE__, line, "message lacks '%s': %s", s1, msg);
    if (s2 && !strstr(msg, s2)) test_fail_at(__FILE__, line, "message lacks '%s': %s", s2, msg);
    if (strchr(msg, '\n')) test_fail_at(__FILE__, line, "message has a newline: %s", msg);
    if (!is_zeroed(&f)) test_fail_at(__FILE__, line, "struct not zeroed after failure");
    dtx_st_close(&f);
}

#define EXPECT_BAD(header, data_len, s1, s2) \
    expect_fail_at(__LINE__, make_file(header, data_len), DTX_ERR_FORMAT, s1, s2)

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && fread(buf, 1, (size_t)len, fp) != (size_t)len) { free(buf); buf = NULL; }
    fclose(fp);
    *n = (size_t)len;
    return buf;
}

/* ------------------------------------------------------------ round trips */

TEST(st_roundtrip_f32) {
    real a[6] = {1.5f, -2.25f, 0.0f, 3.0e-39f, 65504.0f, -1e30f};
    real b[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
    real s[1] = {42.0f};
    dtx_st_out out[] = {
        {.name = "z.weight", .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "a", .ndim = 1, .shape = {5}, .data = b},
        {.name = "scalar", .ndim = 0, .shape = {0}, .data = s},
        {.name = "empty", .ndim = 2, .shape = {0, 4}, .data = NULL},
    };
    const char *keys[] = {"format", "we\"ird\\key", "dim"};
    const char *vals[] = {"difftx", "line\nnext\ttab", "64"};
    const char *path = test_path("rt32.safetensors");
    REQUIRE(dtx_st_write(path, out, 4, keys, vals, 3, 0) == DTX_OK);
    CHECK(test_no_temp_files(test_tmpdir()));

    size_t n;
    uint8_t *raw = read_all(path, &n);
    REQUIRE(raw);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)raw[i] << (8 * i);
    CHECK(hl % 8 == 0);                       /* data 8-byte aligned */
    CHECK(memcmp(raw + 8, "{\"__metadata__\":", 16) == 0); /* metadata first */
    CHECK(n == 8 + hl + (6 + 5 + 1) * 4);     /* no holes */
    free(raw);

    dtx_st_file f;
    REQUIRE(dtx_st_open(&f, path) == DTX_OK);
    REQUIRE(f.n_tensors == 4);
    const char *order[] = {"z.weight", "a", "scalar", "empty"};
    for (int i = 0; i < 4; i++) {
        CHECK(strcmp(f.tensors[i].name, order[i]) == 0);
        CHECK(f.tensors[i].dtype == DTX_ST_F32);
        CHECK(f.tensors[i].ndim == out[i].ndim);
        for (int d = 0; d < out[i].ndim; d++) CHECK(f.tensors[i].shape[d] == out[i].shape[d]);
    }
    CHECK(f.tensors[2].numel == 1 && f.tensors[3].numel == 0 && f.tensors[3].nbytes == 0);
    CHECK(((uintptr_t)f.tensors[0].data - (uintptr_t)f.file.data) % 8 == 0);
    real got[6];
    dtx_st_to_real(dtx_st_find(&f, "z.weight"), got);
    CHECK(memcmp(got, a, sizeof a) == 0);
    dtx_st_to_real(dtx_st_find(&f, "a"), got);
    CHECK(memcmp(got, b, sizeof b) == 0);
    dtx_st_to_real(dtx_st_find(&f, "scalar"), got);
    CHECK(got[0] == 42.0f);
    CHECK(f.n_meta == 3);
    CHECK(dtx_st_meta(&f, "format") && strcmp(dtx_st_meta(&f, "format"), "difftx") == 0);
    CHECK(dtx_st_meta(&f, "we\"ird\\key") && strcmp(dtx_st_meta(&f, "we\"ird\\key"), "line\nnext\ttab") == 0);
    CHECK(strcmp(f.meta_keys[2], "dim") == 0 && strcmp(f.meta_values[2], "64") == 0);
    CHECK(dtx_st_meta(&f, "absent") == NULL);
    CHECK(dtx_st_find(&f, "absent") == NULL);
    dtx_st_close(&f);
    CHECK(is_zeroed(&f));
}

TEST(st_roundtrip_bf16) {
    real v[8] = {1.0f, -2.0f, 0.0f, 3.140625f, 1.00390625f /* tie: to 1.0 */, 0.1f, -1e-40f, 3e38f};
    dtx_st_out out[] = {{.name = "w", .ndim = 2, .shape = {2, 4}, .data = v}, {.name = "b", .ndim = 1, .shape = {1}, .data = v + 3}};
    const char *keys[] = {"k"};
    const char *vals[] = {"v"};
    const char *path = test_path("rt16.safetensors");
    REQUIRE(dtx_st_write(path, out, 2, keys, vals, 1, 1) == DTX_OK);
    dtx_st_file f;
    REQUIRE(dtx_st_open(&f, path) == DTX_OK);
    REQUIRE(f.n_tensors == 2);
    CHECK(strcmp(f.tensors[0].name, "w") == 0 && strcmp(f.tensors[1].name, "b") == 0);
    CHECK(f.tensors[0].dtype == DTX_ST_BF16 && f.tensors[0].nbytes == 16);
    CHECK(f.tensors[0].ndim == 2 && f.tensors[0].shape[0] == 2 && f.tensors[0].shape[1] == 4);
    real got[8];
    dtx_st_to_real(&f.tensors[0], got);
    for (int i = 0; i < 8; i++) {
        float want = dtx_bf16_to_f32(dtx_f32_to_bf16((float)v[i]));
        CHECKF(got[i] == want, "i=%d got %g want %g", i, (double)got[i], (double)want);
    }
    CHECK(got[0] == 1.0f && got[1] == -2.0f && got[3] == 3.140625f && got[4] == 1.0f);
    CHECK(fabsf((float)got[5] - 0.1f) < 1e-3f);
    dtx_st_to_real(&f.tensors[1], got);
    CHECK(got[0] == 3.140625f);
    CHECK(strcmp(dtx_st_meta(&f, "k"), "v") == 0);
    dtx_st_close(&f);
}

TEST(st_f16_by_hand) {
    static const uint16_t h[9] = {0x3c00, 0xc000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x8000};
    uint8_t data[18];
    for (int i = 0; i < 9; i++) { data[2 * i] = (uint8_t)h[i]; data[2 * i + 1] = (uint8_t)(h[i] >> 8); }
    const char *hdr = "{\"h\":{\"dtype\":\"F16\",\"shape\":[3,3],\"data_offsets\":[0,18]}}";
    const char *path = make_raw("f16.safetensors", strlen(hdr), hdr, data, sizeof data);
    REQUIRE(path);
    dtx_st_file f;
    REQUIRE(dtx_st_open(&f, path) == DTX_OK);
    REQUIRE(f.n_tensors == 1 && f.tensors[0].dtype == DTX_ST_F16 && f.tensors[0].numel == 9);
    real g[9];
    dtx_st_to_real(&f.tensors[0], g);
    CHECK(g[0] == 1.0f && g[1] == -2.0f);
    CHECK(g[2] == ldexpf(1.0f, -24));
    CHECK(g[3] == 1023.0f * ldexpf(1.0f, -24));
    CHECK(g[4] == 65504.0f);
    CHECK(isinf(g[5]) && g[5] > 0 && isinf(g[6]) && g[6] < 0);
    CHECK(isnan(g[7]));
    CHECK(g[8] == 0.0f && signbit(g[8]));
    dtx_st_close(&f);
}

/* A foreign writer need not pad the header: F32 data at an odd address. */
TEST(st_unaligned_f32) {
    float v[3] = {1.25f, -7.5f, 1e-3f};
    const char *hdr = "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}"; /* odd length */
    REQUIRE(strlen(hdr) % 2 == 1);
    uint8_t data[12];
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++) data[4 * i + b] = (uint8_t)(f2u(v[i]) >> (8 * b));
    const char *path = make_raw("odd.safetensors", strlen(hdr), hdr, data, sizeof data);
    REQUIRE(path);
    dtx_st_file f;
    REQUIRE(dtx_st_open(&f, path) == DTX_OK);
    CHECK((uintptr_t)f.tensors[0].data % 2 == 1);
    real g[3];
    dtx_st_to_real(&f.tensors[0], g);
    CHECK(g[0] == 1.25f && g[1] == -7.5f && g[2] == 1e-3f);
    dtx_st_close(&f);
}

TEST(st_empty_header_and_whitespace_ok) {
    dtx_st_file f;
    const char *p = make_file("{}", 0);
    REQUIRE(p);
    CHECK(dtx_st_open(&f, p) == DTX_OK && f.n_tensors == 0 && f.n_meta == 0);
    dtx_st_close(&f);
    p = make_file("  {\"__metadata__\":{}, \"t\":{\"data_offsets\":[0,4],\"shape\":[],\"dtype\":\"BF16\"}}    ", 4);
    REQUIRE(p);
    CHECK(dtx_st_open(&f, p) == DTX_ERR_FORMAT); /* shape [] is 1 element: 2 bytes, not 4 */
    CHECK(strstr(dtx_last_error(), "needs 2 bytes but data_offsets give 4"));
    p = make_file("  {\"__metadata__\":{}, \"t\":{\"data_offsets\":[0,2],\"shape\":[],\"dtype\":\"BF16\"}}    ", 2);
    REQUIRE(p);
    CHECK(dtx_st_open(&f, p) == DTX_OK && f.n_tensors == 1 && f.tensors[0].ndim == 0);
    dtx_st_close(&f);
}

/* ------------------------------------------------------------ conversions */

TEST(st_bf16_conversion_edges) {
    CHECK(dtx_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(dtx_f32_to_bf16(-1.0f) == 0xbf80);
    CHECK(dtx_f32_to_bf16(u2f(0x3f808000)) == 0x3f80); /* tie, even below */
    CHECK(dtx_f32_to_bf16(u2f(0x3f818000)) == 0x3f82); /* tie, even above */
    CHECK(dtx_f32_to_bf16(u2f(0x3f808001)) == 0x3f81); /* just past the tie */
    CHECK(dtx_f32_to_bf16(u2f(0x3f807fff)) == 0x3f80); /* just below the tie */
    CHECK(dtx_f32_to_bf16(u2f(0xbf818000)) == 0xbf82); /* negative tie */
    CHECK(dtx_f32_to_bf16(u2f(0x00000001)) == 0x0000); /* smallest subnormal rounds to 0 */
    CHECK(dtx_f32_to_bf16(u2f(0x00018000)) == 0x0002); /* subnormal tie to even */
    CHECK(dtx_f32_to_bf16(u2f(0x00010000)) == 0x0001); /* exact subnormal */
    CHECK(dtx_f32_to_bf16(u2f(0x007fffff)) == 0x0080); /* largest subnormal rounds up to normal */
    CHECK(dtx_f32_to_bf16(u2f(0x7f7fffff)) == 0x7f80); /* FLT_MAX rounds to inf */
    CHECK(dtx_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(dtx_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(dtx_f32_to_bf16(-0.0f) == 0x8000);
    /* NaNs stay NaN, including one whose payload lives in the low bits */
    uint32_t nans[] = {0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0x7f80ffff};
    for (int i = 0; i < 5; i++) CHECKF(isnan(dtx_bf16_to_f32(dtx_f32_to_bf16(u2f(nans[i])))), "nan %08x", nans[i]);
    CHECK(f2u(dtx_bf16_to_f32(0x3f81)) == 0x3f810000);
    CHECK(isinf(dtx_bf16_to_f32(0xff80)) && dtx_bf16_to_f32(0xff80) < 0);
    /* every bf16 survives bf16 -> f32 -> bf16 */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float v = dtx_bf16_to_f32((uint16_t)h);
        if (isnan(v)) continue;
        if (dtx_f32_to_bf16(v) != h) { CHECKF(0, "bf16 %04x does not round-trip", h); break; }
    }
}

TEST(st_f16_conversion_edges) {
    CHECK(dtx_f16_to_f32(0x0000) == 0.0f && !signbit(dtx_f16_to_f32(0x0000)));
    CHECK(dtx_f16_to_f32(0x8000) == 0.0f && signbit(dtx_f16_to_f32(0x8000)));
    CHECK(dtx_f16_to_f32(0x0001) == ldexpf(1, -24));   /* smallest subnormal */
    CHECK(dtx_f16_to_f32(0x8001) == -ldexpf(1, -24));
    CHECK(dtx_f16_to_f32(0x0200) == ldexpf(1, -15));   /* mid subnormal */
    CHECK(dtx_f16_to_f32(0x03ff) == ldexpf(1023, -24)); /* largest subnormal */
    CHECK(dtx_f16_to_f32(0x0400) == ldexpf(1, -14));   /* smallest normal */
    CHECK(dtx_f16_to_f32(0x3c00) == 1.0f);
    CHECK(dtx_f16_to_f32(0x3c01) == 1.0f + ldexpf(1, -10));
    CHECK(dtx_f16_to_f32(0x3555) == 0x1.554p-2f);
    CHECK(dtx_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(dtx_f16_to_f32(0x7c00) == INFINITY);
    CHECK(dtx_f16_to_f32(0xfc00) == -INFINITY);
    CHECK(isnan(dtx_f16_to_f32(0x7c01)) && isnan(dtx_f16_to_f32(0x7e00)) && isnan(dtx_f16_to_f32(0xfe00)));
    /* against the arithmetic definition for every finite half */
    for (uint32_t h = 0; h < 0x10000; h++) {
        int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) continue;
        double want = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
        if (h & 0x8000) want = -want;
        if ((double)dtx_f16_to_f32((uint16_t)h) != want) { CHECKF(0, "f16 %04x", h); break; }
    }
}

/* ------------------------------------------------------- malformed files */

TEST(st_bad_open_missing_file) {
    expect_fail_at(__LINE__, test_path("does-not-exist.safetensors"), DTX_ERR_IO, "cannot open", "No such file");
}

TEST(st_bad_not_regular_file) {
    expect_fail_at(__LINE__, test_tmpdir(), DTX_ERR_IO, "not a regular file", NULL);
}

TEST(st_bad_empty_file) {
    /* zero bytes: nothing to mmap */
    const char *p = test_path("zero.safetensors");
    REQUIRE(write_file(p, "", 0) == 0);
    expect_fail_at(__LINE__, p, DTX_ERR_FORMAT, "truncated: 0 bytes", "shorter than the 8-byte header length");
}

TEST(st_bad_truncated_short) {
    const char *p = test_path("short.safetensors");
    REQUIRE(write_file(p, "\x02\0\0\0\0", 5) == 0);
    expect_fail_at(__LINE__, p, DTX_ERR_FORMAT, "truncated: 5 bytes", "shorter than the 8-byte header length");
}

/* A text file where a model belongs: said so, not read as an absurd header length. */
TEST(st_text_file_is_not_safetensors) {
    static const char text[] = "256\n<s> 0\nhello world, a tokenizer or a list of token ids\n";
    const char *p = test_path("text.safetensors");
    CHECK(write_file(p, text, sizeof text - 1) == 0);
    expect_fail_at(__LINE__, p, DTX_ERR_FORMAT, "not a safetensors file: it starts with text (\"256?<s> \")", NULL);
}

TEST(st_bad_header_past_end) {
    expect_fail_at(__LINE__, make_raw("past.safetensors", 100, "{}", NULL, 0), DTX_ERR_FORMAT,
                   "header length 100 past the end of the file (10 bytes)", NULL);
    expect_fail_at(__LINE__, make_raw("past2.safetensors", UINT64_MAX, "{}", NULL, 0), DTX_ERR_FORMAT,
                   "header length 18446744073709551615 past the end", NULL);
}

TEST(st_bad_header_absurdly_large) {
    /* a sparse file just over the limit: costs no disk and no reading */
    const char *p = make_raw("huge.safetensors", (100u << 20) + 8, "{}", NULL, 0);
    REQUIRE(p);
    REQUIRE(truncate(p, 8 + (100 << 20) + 16) == 0);
    expect_fail_at(__LINE__, p, DTX_ERR_FORMAT, "absurdly large", "limit 100 MiB");
    REQUIRE(truncate(p, 0) == 0);
}

TEST(st_bad_json_syntax) {
    EXPECT_BAD("", 0, "bad JSON header", NULL); /* header length 0 */
    EXPECT_BAD("{\"a\": {\"dtype\": \"F32\",", 0, "bad JSON header", "syntax error");
    EXPECT_BAD("{} trailing", 0, "bad JSON header", "syntax error");
}

TEST(st_bad_json_not_object) {
    EXPECT_BAD("[1, 2]", 0, "bad JSON header", "not a JSON object");
    EXPECT_BAD("\"str\"", 0, "not a JSON object", NULL);
}

TEST(st_bad_json_nul_byte) {
    const char hdr[] = "{}\0{\"x\":1}";
    const char *p = test_path("nul.safetensors");
    uint8_t buf[8 + sizeof hdr - 1];
    for (int b = 0; b < 8; b++) buf[b] = (uint8_t)((sizeof hdr - 1) >> (8 * b));
    memcpy(buf + 8, hdr, sizeof hdr - 1);
    REQUIRE(write_file(p, buf, sizeof buf) == 0);
    expect_fail_at(__LINE__, p, DTX_ERR_FORMAT, "bad JSON header", "NUL byte at header byte 2");
}

TEST(st_bad_entry_not_object) {
    EXPECT_BAD("{\"layers.0.w\": [1, 2]}", 0, "tensor 'layers.0.w'", "not a JSON object");
}

TEST(st_bad_missing_dtype) {
    EXPECT_BAD("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 't'", "missing \"dtype\"");
}

TEST(st_bad_missing_shape) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 't'", "missing \"shape\"");
}

TEST(st_bad_missing_offsets) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 't'", "missing \"data_offsets\"");
}

TEST(st_bad_unexpected_or_repeated_key) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, "tensor 't'",
               "unexpected key 'extra'");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "\"dtype\" appears twice");
}

TEST(st_bad_wrong_types) {
    EXPECT_BAD("{\"t\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "\"dtype\" is not a string");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "\"shape\" is not an array");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "shape[0] is not a number");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}", 4, "tensor 't'",
               "\"data_offsets\" is not an array of 2 integers");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, "tensor 't'",
               "\"data_offsets\" is not an array of 2 integers");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,null]}}", 4, "tensor 't'",
               "data_offsets[1] is not a number");
}

TEST(st_bad_negative_dim) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "shape[1] = -1 is negative");
}

TEST(st_bad_fractional_dim) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "shape[0] = 1.5 is not an integer");
}

TEST(st_bad_negative_offset) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "tensor 't'",
               "data_offsets[0] = -4 is negative");
}

TEST(st_bad_huge_number) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, "tensor 't'", "too large");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,9007199254740993]}}", 4, "tensor 't'",
               "too large");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e999]}}", 4, "tensor 't'",
               "not an integer");
}

/* cJSON reads these as exact integers; the format wants integer literals. */
TEST(st_bad_integer_spelling) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "number '1.0' is not a plain integer");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4e0]}}", 4, "tensor 't'",
               "number '4e0' is not a plain integer");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"t\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[4,8]}}",
               8, "tensor 't'", "number '01'");
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0, "tensor 't'", "number '-0'");
}

TEST(st_bad_too_many_dims) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "tensor 't'",
               "more than 8 dims");
}

TEST(st_bad_unknown_dtype) {
    EXPECT_BAD("{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
               "tensor 'x': unknown dtype 'I64'", "supported: F32, BF16, F16, I8, U8");
}

TEST(st_bad_begin_after_end) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "tensor 't'",
               "[4, 0] have begin > end");
}

TEST(st_bad_offsets_out_of_range) {
    EXPECT_BAD("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "tensor 't'",
               "offsets out of range");
}

TEST(st_bad_size_mismatch) {
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20, "tensor 'w'",
               "shape [2, 3] needs 24 bytes but data_offsets give 20");
}

TEST(st_bad_shape_overflow) {
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
               "tensor 'w'", "overflows");
    EXPECT_BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387,1000],\"data_offsets\":[0,4]}}", 4,
               "tensor 'w'", "byte size of shape [4611686018427387, 1000] overflows");
}

TEST(st_bad_overlap) {
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
               24, "tensors 'a' and 'b' overlap", "[0, 16] and [8, 24]");
    /* the same data twice; listed in reverse order in the header */
    EXPECT_BAD("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
               16, "tensors 'a' and 'b' overlap", NULL);
}

TEST(st_bad_hole) {
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
               20, "bytes [8, 12) between tensors 'a' and 'b'", "belong to no tensor");
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
               "bytes [0, 4) before tensor 'a'", NULL);
}

TEST(st_bad_unused_tail) {
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
               "unused bytes [8, 12) at the end of the data section", NULL);
    EXPECT_BAD("{}", 3, "unused bytes [0, 3)", NULL);
}

TEST(st_bad_duplicate_name) {
    EXPECT_BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "duplicate tensor name 'a'", NULL);
    EXPECT_BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key '__metadata__'", NULL);
}

TEST(st_bad_metadata_not_object) {
    EXPECT_BAD("{\"__metadata__\":[\"a\"]}", 0, "__metadata__ is not a JSON object", NULL);
    EXPECT_BAD("{\"__metadata__\":null}", 0, "__metadata__ is not a JSON object", NULL);
}

TEST(st_bad_metadata_value) {
    EXPECT_BAD("{\"__metadata__\":{\"format\":\"difftx\",\"dim\":64}}", 0, "__metadata__ key 'dim'", "not a string");
    EXPECT_BAD("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "__metadata__ key 'k' appears twice", NULL);
}

TEST(st_bad_name_shown_on_one_line) {
    expect_fail_at(__LINE__, make_file("{\"a\\nb\":5}", 0), DTX_ERR_FORMAT, "tensor 'a?b'", NULL);
}

/* ------------------------------------------------------------- robustness */

#ifndef ST_FUZZ_ITERS /* -DST_FUZZ_ITERS=200000 for a longer run by hand */
#define ST_FUZZ_ITERS 2000
#endif

/* A successful open must hand out only tensors inside the mapping whose
 * sizes agree; converting them touches every byte (ASan checks dst). */
static void check_opened(const dtx_st_file *f) {
    const uint8_t *lo = f->file.data, *hi = lo + f->file.size;
    for (int i = 0; i < f->n_tensors; i++) {
        const dtx_st_tensor *t = &f->tensors[i];
        static const size_t es[] = {4, 2, 2};
        REQUIRE(t->data >= lo + 8 && t->data <= hi && t->nbytes <= (size_t)(hi - t->data));
        REQUIRE(t->nbytes == (size_t)t->numel * es[t->dtype]);
        real *dst = malloc((size_t)t->numel * sizeof(real) + 1);
        REQUIRE(dst);
        dtx_st_to_real(t, dst);
        free(dst);
    }
}

static void open_any(const char *path, const uint8_t *buf, size_t n, int *ok, int *bad) {
    REQUIRE(write_file(path, buf, n) == 0);
    dtx_st_file f;
    dtx_status st = dtx_st_open(&f, path);
    if (st == DTX_OK) {
        check_opened(&f);
        (*ok)++;
    } else {
        const char *msg = dtx_last_error();
        CHECKF(st == DTX_ERR_FORMAT, "status %d: %s", st, msg);
        CHECK(strncmp(msg, path, strlen(path)) == 0 && !strchr(msg, '\n'));
        CHECK(is_zeroed(&f));
        (*bad)++;
    }
    dtx_st_close(&f);
}

TEST(st_robust_truncation_and_bitflips) {
    real v[12];
    for (int i = 0; i < 12; i++) v[i] = (real)i - 5.5f;
    dtx_st_out out[] = {{.name = "tok_embeddings.weight", .ndim = 2, .shape = {3, 2}, .data = v}, {.name = "norm.weight", .ndim = 1, .shape = {4}, .data = v + 6},
                        {.name = "s", .ndim = 0, .shape = {0}, .data = v + 10}, {.name = "e", .ndim = 1, .shape = {0}, .data = NULL}};
    const char *keys[] = {"format", "dim"};
    const char *vals[] = {"difftx", "2"};
    const char *src = test_path("fuzz-src.safetensors"), *path = test_path("fuzz.safetensors");
    REQUIRE(dtx_st_write(src, out, 4, keys, vals, 2, 0) == DTX_OK);
    size_t n;
    uint8_t *good = read_all(src, &n), *buf = malloc(n);
    REQUIRE(good && buf);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)good[i] << (8 * i);

    int ok = 0, bad = 0;
    for (size_t len = 0; len <= n && !test_failed_now(); len++) open_any(path, good, len, &ok, &bad);
    CHECK(ok == 1 && bad == (int)n); /* only the whole file is valid */

    dtx_rng rng;
    dtx_rng_seed(&rng, 1234);
    for (int it = 0; it < ST_FUZZ_ITERS && !test_failed_now(); it++) {
        memcpy(buf, good, n);
        int flips = 1 + (int)(dtx_rng_next(&rng) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(dtx_rng_next(&rng) % (8 + hl)); /* length field and header */
            buf[at] ^= (uint8_t)(1 + dtx_rng_next(&rng) % 255);
        }
        size_t len = (it % 4 == 0) ? (size_t)(dtx_rng_next(&rng) % (n + 1)) : n;
        open_any(path, buf, len, &ok, &bad);
    }
    CHECK(bad > ST_FUZZ_ITERS / 2); /* most corruptions must be caught */
    free(good);
    free(buf);
}

/* ------------------------------------------------------------------ writer */

TEST(st_write_missing_dir) {
    real v[2] = {1, 2};
    dtx_st_out out[] = {{.name = "a", .ndim = 1, .shape = {2}, .data = v}};
    const char *path = test_path("no/such/dir/m.safetensors");
    CHECK(dtx_st_write(path, out, 1, NULL, NULL, 0, 0) == DTX_ERR_IO);
    const char *msg = dtx_last_error();
    CHECKF(strncmp(msg, path, strlen(path)) == 0 && strstr(msg, "No such file or directory"), "%s", msg);
    CHECK(test_no_temp_files(test_tmpdir()));
    CHECK(access(path, F_OK) != 0);
}

TEST(st_write_over_directory_fails_cleanly) {
    const char *path = test_path("a-dir.safetensors");
    REQUIRE(mkdir(path, 0755) == 0);
    real v[2] = {1, 2};
    dtx_st_out out[] = {{.name = "a", .ndim = 1, .shape = {2}, .data = v}};
    CHECK(dtx_st_write(path, out, 1, NULL, NULL, 0, 0) == DTX_ERR_IO);
    CHECKF(strstr(dtx_last_error(), path) && strstr(dtx_last_error(), "cannot write"), "%s", dtx_last_error());
    CHECK(test_no_temp_files(test_tmpdir()));
    rmdir(path);
}

/* A full disk seen through the file size limit: the write fails with EFBIG
 * (SIGXFSZ ignored), the old file stays, and no temporary file is left. */
TEST(st_write_disk_full_keeps_old_file) {
    real small[2] = {7, 8};
    dtx_st_out old[] = {{.name = "old", .ndim = 1, .shape = {2}, .data = small}};
    const char *path = test_path("keep.safetensors");
    REQUIRE(dtx_st_write(path, old, 1, NULL, NULL, 0, 0) == DTX_OK);

    size_t nbig = 1 << 16;
    real *big = calloc(nbig, sizeof(real));
    REQUIRE(big);
    dtx_st_out out[] = {{.name = "big", .ndim = 1, .shape = {(int64_t)nbig}, .data = big}};
    struct rlimit saved, lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = saved;
    lim.rlim_cur = 4096;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    dtx_status st = dtx_st_write(path, out, 1, NULL, NULL, 0, 0);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, prev);
    free(big);

    CHECK(st == DTX_ERR_IO);
    CHECKF(strncmp(dtx_last_error(), path, strlen(path)) == 0 && strstr(dtx_last_error(), "too large"), "%s",
           dtx_last_error());
    CHECK(test_no_temp_files(test_tmpdir()));
    dtx_st_file f;
    REQUIRE(dtx_st_open(&f, path) == DTX_OK);
    CHECK(f.n_tensors == 1 && strcmp(f.tensors[0].name, "old") == 0);
    dtx_st_close(&f);
}

TEST(st_write_rejects_bad_args) {
    real v[2] = {1, 2};
    dtx_st_out dup[] = {{.name = "a", .ndim = 1, .shape = {2}, .data = v}, {.name = "a", .ndim = 1, .shape = {2}, .data = v}};
    const char *path = test_path("args.safetensors");
    CHECK(dtx_st_write(path, dup, 2, NULL, NULL, 0, 0) == DTX_ERR_ARG);
    CHECK(strstr(dtx_last_error(), "duplicate tensor name 'a'"));
    dtx_st_out meta[] = {{.name = "__metadata__", .ndim = 1, .shape = {2}, .data = v}};
    CHECK(dtx_st_write(path, meta, 1, NULL, NULL, 0, 0) == DTX_ERR_ARG);
    dtx_st_out neg[] = {{.name = "n", .ndim = 1, .shape = {-2}, .data = v}};
    CHECK(dtx_st_write(path, neg, 1, NULL, NULL, 0, 0) == DTX_ERR_ARG);
    dtx_st_out many[] = {{.name = "m", .ndim = 9, .shape = {1}, .data = v}};
    CHECK(dtx_st_write(path, many, 1, NULL, NULL, 0, 0) == DTX_ERR_ARG);
    CHECK(access(path, F_OK) != 0);
    CHECK(test_no_temp_files(test_tmpdir()));
}

TEST(st_close_is_safe) {
    dtx_st_file f;
    memset(&f, 0, sizeof f);
    dtx_st_close(&f);
    dtx_st_close(&f);
    CHECK(is_zeroed(&f));
}
