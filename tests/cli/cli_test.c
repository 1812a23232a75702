/* The difftx command line, run as a separate process (run_cli): usage errors,
 * info, refusal of malformed model files, score against the library's own
 * forward, train end to end, sample. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "difftx.h"
#include "test.h"
#include "kernels/kernels.h"

/* ------------------------------------------------------------ helpers */

/* Usage error: exit 2, one line naming the command and each of the strings. */
#define CHECK_USAGE(rc, cmd, s1, s2)                                                                                    \
    do {                                                                                                                \
        CHECKF((rc) == 2, "exit %d, want 2: %s", (rc), cli_out);                                                        \
        CHECKF(strncmp(cli_out, "difftx " cmd, strlen("difftx " cmd)) == 0, "no 'difftx %s' prefix: %s", cmd, cli_out); \
        CHECKF(cli_has(s1) && cli_has(s2), "want '%s' and '%s' in: %s", s1, s2, cli_out);                               \
        CHECKF(cli_one_line(), "not one line: %s", cli_out);                                                            \
    } while (0)

/* Runtime refusal: exit 1, one line "difftx CMD: ..." holding both strings. */
#define CHECK_REFUSED(rc, cmd, s1, s2)                                                                           \
    do {                                                                                                         \
        CHECKF((rc) == 1, "exit %d, want 1: %s", (rc), cli_out);                                                 \
        CHECKF(strncmp(cli_out, "difftx " cmd ": ", strlen("difftx " cmd ": ")) == 0, "no prefix: %s", cli_out); \
        CHECKF(cli_has(s1) && cli_has(s2), "want '%s' and '%s' in: %s", s1, s2, cli_out);                        \
        CHECKF(cli_one_line(), "not one line: %s", cli_out);                                                     \
    } while (0)

static dtx_config tiny_config(dtx_arch arch, int tie) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = arch == DTX_ARCH_DIFF ? 2 : 4; /* parameter-matched pair */
    c.n_kv_heads = c.n_heads;
    c.vocab_size = 16;
    c.ffn_dim = 64;
    c.max_seq_len = 16;
    c.tie_embeddings = tie;
    return c;
}

/* Writes a freshly initialised model of config c to test_path(name). */
static const char *model_file_cfg(const char *name, const dtx_config *c) { return test_model_file(name, c, 7); }

static const char *model_file(const char *name, dtx_arch arch, int tie) {
    dtx_config c = tiny_config(arch, tie);
    return model_file_cfg(name, &c);
}

static const char *text_file(const char *name, const char *text) {
    const char *path = test_path(name);
    return write_file(path, text, strlen(text)) == 0 ? path : NULL;
}

/* n tokens of the period-8 pattern 1 2 ... 8 1 2 ..., starting at first. */
static const char *pattern_file(const char *name, int n, int first) {
    size_t cap = (size_t)n * 4 + 2;
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++) k += (size_t)snprintf(s + k, cap - k, "%d ", (first - 1 + i) % 8 + 1);
    const char *path = text_file(name, s);
    free(s);
    return path;
}

/* ---------------------------------------------- safetensors surgery */

/* A model file taken apart: the JSON header and the data section. */
typedef struct {
    cJSON *hdr;
    uint8_t *data;
    size_t data_len;
} st_bytes;

static int read_bytes(const char *path, uint8_t **buf, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(len > 0 ? (size_t)len : 1);
    size_t got = *buf ? fread(*buf, 1, (size_t)len, f) : 0;
    fclose(f);
    *n = got;
    return *buf && got == (size_t)len ? 0 : -1;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int st_take_apart(const char *path, st_bytes *s) {
    uint8_t *buf;
    size_t n;
    memset(s, 0, sizeof *s);
    if (read_bytes(path, &buf, &n) != 0 || n < 8) return -1;
    uint64_t hl = le64(buf);
    if (hl > n - 8) { free(buf); return -1; }
    s->hdr = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hl);
    s->data_len = n - 8 - (size_t)hl;
    s->data = malloc(s->data_len + 1);
    if (s->data) memcpy(s->data, buf + 8 + hl, s->data_len);
    free(buf);
    return s->hdr && s->data ? 0 : -1;
}

static void st_free(st_bytes *s) {
    cJSON_Delete(s->hdr);
    free(s->data);
}

/* Raw bytes: 8-byte little-endian header length, header, data. */
static int write_st_raw(const char *path, const char *header, size_t hlen, const uint8_t *data, size_t dlen) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen && fwrite(data, 1, dlen, f) == dlen;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static const char *st_put_together(const char *name, const st_bytes *s) {
    const char *path = test_path(name);
    char *h = cJSON_PrintUnformatted(s->hdr);
    int rc = h ? write_st_raw(path, h, strlen(h), s->data, s->data_len) : -1;
    free(h);
    return rc == 0 ? path : NULL;
}

static void get_offsets(const cJSON *t, int64_t *b, int64_t *e) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    *b = (int64_t)cJSON_GetArrayItem(o, 0)->valuedouble;
    *e = (int64_t)cJSON_GetArrayItem(o, 1)->valuedouble;
}

static void set_offsets(cJSON *t, int64_t b, int64_t e) {
    cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    cJSON_SetNumberValue(cJSON_GetArrayItem(o, 0), (double)b);
    cJSON_SetNumberValue(cJSON_GetArrayItem(o, 1), (double)e);
}

static void set_shape(cJSON *t, int ndim, const int64_t *shape) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < ndim; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)shape[i]));
    cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", a);
}

/* Lays the tensors out again, contiguously in header order, after tensors
 * were added or removed; each keeps the bytes its old offsets pointed at. */
static int st_repack(st_bytes *s) {
    size_t total = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, s->hdr) {
        if (strcmp(t->string, "__metadata__") == 0) continue;
        int64_t b, e;
        get_offsets(t, &b, &e);
        total += (size_t)(e - b);
    }
    uint8_t *nd = malloc(total + 1);
    if (!nd) return -1;
    size_t pos = 0;
    cJSON_ArrayForEach(t, s->hdr) {
        if (strcmp(t->string, "__metadata__") == 0) continue;
        int64_t b, e;
        get_offsets(t, &b, &e);
        memcpy(nd + pos, s->data + b, (size_t)(e - b));
        set_offsets(t, (int64_t)pos, (int64_t)pos + (e - b));
        pos += (size_t)(e - b);
    }
    free(s->data);
    s->data = nd;
    s->data_len = total;
    return 0;
}

static cJSON *tensor(st_bytes *s, const char *name) { return cJSON_GetObjectItemCaseSensitive(s->hdr, name); }

static void set_meta(st_bytes *s, const char *key, const char *value) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(s->hdr, "__metadata__");
    cJSON_DeleteItemFromObjectCaseSensitive(m, key);
    if (value) cJSON_AddStringToObject(m, key, value);
}

/* A valid untied 2-layer file (arch as given), taken apart for editing. */
static int valid_parts(st_bytes *s, dtx_arch arch, int tie) {
    const char *p = model_file("valid.safetensors", arch, tie);
    return p ? st_take_apart(p, s) : -1;
}

/* ------------------------------------------------------------ usage */

TEST(cli_usage_unknown_command) {
    int rc = cli("frobnicate");
    CHECKF(rc == 2, "exit %d", rc);
    CHECKF(cli_has("unknown command 'frobnicate'") && cli_one_line(), "%s", cli_out);
    rc = cli("%s", "");
    CHECKF(rc == 2, "no command: exit %d", rc);
    CHECKF(cli_has("usage: difftx"), "%s", cli_out);
    rc = cli("help frobnicate");
    CHECK_USAGE(rc, "help", "frobnicate", "unknown command");
}

TEST(cli_usage_unknown_flag) {
    CHECK_USAGE(cli("train --tokens t --out o --frob 3"), "train", "unknown flag '--frob'", "--help");
    CHECK_USAGE(cli("score --model=m --frob=3"), "score", "unknown flag '--frob'", "--help");
    CHECK_USAGE(cli("info -x m"), "info", "unknown flag '-x'", "--help");
    CHECK_USAGE(cli("info a b"), "info", "unexpected argument 'b'", "--help");
}

TEST(cli_usage_bad_values) {
    CHECK(cli("train --tokens t --out o --steps abc") == 2);
    CHECKF(strcmp(cli_out, "difftx train: --steps: expected a positive integer, got 'abc'\n") == 0, "%s", cli_out);
    CHECK_USAGE(cli("train --tokens t --out o --steps 12x"), "train", "--steps", "'12x'");
    CHECK_USAGE(cli("train --tokens t --out o --steps ' 12'"), "train", "--steps", "' 12'");
    CHECK_USAGE(cli("train --tokens t --out o --steps 99999999999999999999"), "train", "--steps",
                "'99999999999999999999'");
    CHECK_USAGE(cli("train --tokens t --out o --steps 0"), "train", "--steps", "positive integer");
    CHECK_USAGE(cli("train --tokens t --out o --lr -1"), "train", "--lr: expected a number > 0", "'-1'");
    CHECK_USAGE(cli("train --tokens t --out o --lr nan"), "train", "--lr", "'nan'");
    CHECK_USAGE(cli("train --tokens t --out o --lr 1e999"), "train", "--lr", "'1e999'");
    CHECK_USAGE(cli("train --tokens t --out o --lr ''"), "train", "--lr", "''");
    CHECK_USAGE(cli("train --tokens t --out o --dim 0"), "train", "--dim", "'0'");
    CHECK_USAGE(cli("train --tokens t --out o --beta2 1"), "train", "--beta2: expected a number in [0, 1)", "'1'");
    CHECK_USAGE(cli("train --tokens t --out o --schedule sqrt"), "train", "--schedule", "cosine|linear|constant");
    CHECK_USAGE(cli("train --tokens t --out o --arch mamba"), "train", "--arch", "'mamba'");
    CHECK_USAGE(cli("train --tokens t --out o --seed -1"), "train", "--seed", "'-1'");
    CHECK_USAGE(cli("train --tokens t --out o --tie=yes"), "train", "--tie", "takes no value");
    CHECK_USAGE(cli("train --tokens t --out o --warmup -5"), "train", "--warmup", "'-5'");
    CHECK_USAGE(cli("sample --model m --prompt 1 --max-tokens 1.5"), "sample", "--max-tokens", "'1.5'");
    CHECK_USAGE(cli("sample --model m --prompt 1 --max-tokens 3 --temperature -0.5"), "sample", "--temperature",
                "'-0.5'");
    CHECK_USAGE(cli("sample --model m --prompt '1 x 3' --max-tokens 3"), "sample", "--prompt", "token 1 'x'");
}

TEST(cli_usage_missing_value) {
    CHECK_USAGE(cli("score --model"), "score", "--model", "missing value");
    CHECK_USAGE(cli("score --model --tokens t"), "score", "--model", "missing value");
    CHECK_USAGE(cli("train --out o --tokens"), "train", "--tokens", "missing value");
}

TEST(cli_usage_missing_required) {
    CHECK_USAGE(cli("train --out o"), "train", "--tokens", "required");
    CHECK_USAGE(cli("train --tokens t"), "train", "--out", "required");
    CHECK_USAGE(cli("score --tokens t"), "score", "--model", "required");
    CHECK_USAGE(cli("score --model m"), "score", "--tokens", "required");
    CHECK_USAGE(cli("sample --model m --prompt 1"), "sample", "--max-tokens", "required");
    CHECK_USAGE(cli("sample --prompt 1 --max-tokens 2"), "sample", "--model", "required");
    CHECK_USAGE(cli("sample --model m --max-tokens 2"), "sample", "--prompt", "--prompt-file");
    CHECK_USAGE(cli("info"), "info", "model file", "--help");
}

TEST(cli_help) {
    const char *cmds[] = {"train", "score", "sample", "generate", "info", "quantize", "tokenizer", "prepare", "eval"};
    for (int i = 0; i < (int)(sizeof cmds / sizeof cmds[0]); i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: difftx %s", cmds[i]);
        int rc = cli("%s --help", cmds[i]);
        CHECKF(rc == 0 && cli_has(want), "%s --help: exit %d: %s", cmds[i], rc, cli_out);
        rc = cli("help %s", cmds[i]);
        CHECKF(rc == 0 && cli_has(want), "help %s: exit %d", cmds[i], rc);
    }
    /* --help wins over flags that are missing or come later. */
    CHECKF(cli("train --steps 5 --help --bogus") == 0 && cli_has("--accum"), "%s", cli_out);
    /* the top-level help lists every command and every measurement of difftx eval */
    const char *top[] = {"--help", "help", "-h"};
    const char *listed[] = {"  train ", "  score ", "  sample ", "  generate ", "  info ", "  quantize ", "  tokenizer ",
                            "  prepare ", "  eval ", "  ppl ", "  needle ", "  attn-mass ", "  outliers ", "  attn-map ",
                            "  icl ", "  halluc ", "--version"};
    for (int i = 0; i < 3; i++) {
        int rc = cli("%s", top[i]);
        CHECKF(rc == 0, "%s: exit %d: %s", top[i], rc, cli_out);
        for (int k = 0; k < (int)(sizeof listed / sizeof listed[0]); k++)
            CHECKF(cli_has(listed[k]), "%s lacks '%s': %s", top[i], listed[k], cli_out);
    }
    /* --version: one line naming difftx's version and the library's */
    char want[64];
    snprintf(want, sizeof want, "difftx %s (the library libdifftx.so.%d", dtx_version(), DTX_VERSION_MAJOR);
    int rc = cli("--version");
    CHECKF(rc == 0 && strncmp(cli_out, want, strlen(want)) == 0 && cli_one_line(), "exit %d: %s", rc, cli_out);
}

/* ------------------------------------------------------------ info */

/* Parses `difftx info --json path`; NULL (and a failed check) otherwise. */
static cJSON *info_json(const char *path) {
    int rc = cli("info --json '%s'", path);
    CHECKF(rc == 0, "info --json %s: exit %d: %s", path, rc, cli_out);
    cJSON *j = rc == 0 ? cJSON_Parse(cli_out) : NULL;
    CHECKF(rc != 0 || j, "not JSON: %s", cli_out);
    return j;
}

static int64_t jint(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

static size_t params_of(const dtx_config *c) {
    dtx_model *m = NULL;
    if (dtx_model_init(&m, c, 1) != DTX_OK) return 0;
    size_t n = dtx_model_num_params(m);
    dtx_model_free(m);
    return n;
}

TEST(cli_info_text_both_archs) {
    const char *d = model_file("d.safetensors", DTX_ARCH_DIFF, 0);
    const char *t = model_file("t.safetensors", DTX_ARCH_TRANSFORMER, 1);
    REQUIRE(d && t);
    int rc = cli("info '%s'", d);
    CHECKF(rc == 0, "exit %d: %s", rc, cli_out);
    const char *want_d[] = {"arch            diff", "dim             32", "n_layers        2", "n_heads         2",
                            "n_kv_heads      2", "head_dim        8", "vocab_size      16", "ffn_dim         64",
                            "max_seq_len     16", "rope_theta      10000", "norm_eps        1e-05",
                            "tie_embeddings  false", "\nlambda ", "baseline        transformer with n_heads 4",
                            "difference      +96 = 64 lambda", "32 subln"};
    for (size_t i = 0; i < sizeof want_d / sizeof *want_d; i++) CHECKF(cli_has(want_d[i]), "no '%s' in:\n%s", want_d[i], cli_out);
    rc = cli("info --tensors '%s'", t);
    CHECKF(rc == 0, "exit %d: %s", rc, cli_out);
    const char *want_t[] = {"arch            transformer", "n_heads         4", "head_dim        8",
                            "tie_embeddings  true", "baseline        diff with n_heads 2", "difference      -96",
                            "\n  layers.1.feed_forward.w2.weight ", " [32, 64]\n"};
    for (size_t i = 0; i < sizeof want_t / sizeof *want_t; i++) CHECKF(cli_has(want_t[i]), "no '%s' in:\n%s", want_t[i], cli_out);
    CHECKF(!cli_has("\nlambda "), "a transformer has no lambda:\n%s", cli_out);
}

/* The counts info prints agree with models the library builds, for both
 * archs, MHA and GQA, tied and untied; the difference is exactly the λ
 * vectors (4d per layer) and subln (2d per layer). */
TEST(cli_info_json_counts_match_library) {
    for (int arch = 0; arch < 2; arch++)
        for (int gqa = 0; gqa < 2; gqa++)
            for (int tie = 0; tie < 2; tie++) {
                dtx_config c = tiny_config((dtx_arch)arch, tie);
                c.n_layers = 3;
                if (gqa) c.n_kv_heads = c.n_heads / 2;
                const char *p = model_file_cfg("m.safetensors", &c);
                REQUIRE(p);
                cJSON *j = info_json(p);
                REQUIRE(j);
                dtx_config b = dtx_config_baseline(&c);
                int64_t d = dtx_config_head_dim(arch == DTX_ARCH_DIFF ? &c : &b);
                int64_t sign = arch == DTX_ARCH_DIFF ? 1 : -1;
                const cJSON *base = cJSON_GetObjectItemCaseSensitive(j, "baseline");
                CHECKF(jint(j, "params") == (int64_t)params_of(&c), "arch %d gqa %d tie %d", arch, gqa, tie);
                CHECKF(jint(base, "params") == (int64_t)params_of(&b), "baseline: arch %d gqa %d tie %d: %lld vs %zu",
                       arch, gqa, tie, (long long)jint(base, "params"), params_of(&b));
                CHECK(jint(base, "n_heads") == b.n_heads && jint(base, "n_kv_heads") == b.n_kv_heads);
                CHECK(jint(j, "difference") == sign * 6 * d * c.n_layers);
                CHECK(jint(j, "difference_lambda") == 4 * d * c.n_layers);
                CHECK(jint(j, "difference_subln") == 2 * d * c.n_layers);
                CHECK(jint(j, "params") - jint(j, "params_nonembed") == c.vocab_size * c.dim * (tie ? 1 : 2));
                const cJSON *arch_s = cJSON_GetObjectItemCaseSensitive(j, "arch");
                CHECK(cJSON_IsString(arch_s) && strcmp(arch_s->valuestring, dtx_arch_name(c.arch)) == 0);
                CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "tie_embeddings")));
                CHECK(jint(j, "max_seq_len") == 16 && jint(j, "ffn_dim") == 64 && jint(j, "vocab_size") == 16);
                cJSON_Delete(j);
            }
}

TEST(cli_info_no_baseline_for_odd_heads) {
    dtx_config c = tiny_config(DTX_ARCH_TRANSFORMER, 1);
    c.n_heads = 2;
    c.n_kv_heads = 1; /* halving gives 0.5 KV heads */
    const char *p = model_file_cfg("odd.safetensors", &c);
    REQUIRE(p);
    cJSON *j = info_json(p);
    REQUIRE(j);
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "baseline")));
    cJSON_Delete(j);
    CHECK(cli("info '%s'", p) == 0 && cli_has("baseline        none"));
}

TEST(cli_info_missing_file) {
    const char *p = test_path("no-such-model.safetensors");
    CHECK_REFUSED(cli("info '%s'", p), "info", p, "No such file");
}

/* info --system: the levels as the library sees them, DTX_ISA capping
 * them, and a bad DTX_ISA refused in one line. */
TEST(cli_info_system) {
    CHECK(cli("info --system") == 0);
    char want[96];
    snprintf(want, sizeof want, "isa             %s (CPU: %s", dtx_isa_name(dtx_isa_level()), dtx_isa_name(dtx_isa_cpu()));
    CHECKF(cli_has(want), "want '%s' in: %s", want, cli_out);
    CHECK(cli_has("matmul          oneDNN ") && cli_has("bf16 matmul     ") && cli_has("bf16 attention  "));
    CHECK(cli_has(dtx_matmul_tiles_used(64, DTX_PREC_FP32) ? "fp32 matmul     forward and dx on difftx's tile GEMM"
                                                           : "fp32 matmul     oneDNN\n"));
    CHECK(cli("info --system --json") == 0);
    cJSON *j = cJSON_Parse(cli_out);
    REQUIRE(j);
    const cJSON *isa = cJSON_GetObjectItemCaseSensitive(j, "isa");
    CHECK(cJSON_IsString(isa) && !strcmp(isa->valuestring, dtx_isa_name(dtx_isa_level())));
    cJSON_Delete(j);
    /* every level at or below the CPU's can be asked for; above it, the CPU's stays */
    for (int l = DTX_ISA_PORTABLE; l <= DTX_ISA_AVX512_BF16; l++) {
        dtx_isa got = l <= (int)dtx_isa_cpu() ? (dtx_isa)l : dtx_isa_cpu();
        char cmd[64];
        snprintf(cmd, sizeof cmd, "DTX_ISA=%s %s info --system --json", dtx_isa_name((dtx_isa)l),
                 getenv("DIFFTX_BIN") ? getenv("DIFFTX_BIN") : "build/difftx");
        CHECK(run_cmd(cmd, cli_out, sizeof cli_out) == 0);
        snprintf(want, sizeof want, "\"isa\":\"%s\"", dtx_isa_name(got));
        CHECKF(cli_has(want), "DTX_ISA=%s: want %s in %s", dtx_isa_name((dtx_isa)l), want, cli_out);
        if (l < DTX_ISA_AVX512_BF16) CHECK(cli_has("\"bf16_attention\":\"emulated\""));
        /* the tile GEMM needs AVX-512 (and full-width datapaths, matmul.c) */
        if (l < DTX_ISA_AVX512) CHECK(cli_has("\"fp32_matmul\":\"oneDNN\""));
    }
    CHECK(run_cmd("DTX_ISA=avx3 ${DIFFTX_BIN:-build/difftx} info --system 2>&1", cli_out, sizeof cli_out) == 2);
    CHECKF(cli_one_line_from("difftx: DTX_ISA='avx3' is not an ISA level"), "got: %s", cli_out);
    CHECK(cli("info --system model.safetensors") == 2 && cli_one_line());
}

/* ------------------------------------------------ malformed model files */

TEST(cli_bad_file_shorter_than_8_bytes) {
    const char *p = test_path("short.safetensors");
    REQUIRE(write_file(p, "\x10\0\0\0\0", 5) == 0);
    CHECK_REFUSED(cli("info '%s'", p), "info", p, "truncated");
    CHECK(cli_has("8-byte"));
}

TEST(cli_bad_file_cut_in_the_data) {
    const char *v = model_file("full.safetensors", DTX_ARCH_DIFF, 0);
    uint8_t *buf;
    size_t n;
    REQUIRE(v && read_bytes(v, &buf, &n) == 0);
    uint64_t hl = le64(buf);
    size_t data_kept = (n - 8 - (size_t)hl) / 2;
    /* The reader names the first tensor (in header order) that ends past the cut. */
    st_bytes s;
    REQUIRE(st_take_apart(v, &s) == 0);
    const char *first_cut = NULL;
    cJSON *t;
    cJSON_ArrayForEach(t, s.hdr) {
        if (strcmp(t->string, "__metadata__") == 0) continue;
        int64_t b, e;
        get_offsets(t, &b, &e);
        if ((size_t)e > data_kept) { first_cut = t->string; break; }
    }
    REQUIRE(first_cut);
    char want[128];
    snprintf(want, sizeof want, "tensor '%s'", first_cut);
    const char *p = test_path("cut.safetensors");
    REQUIRE(write_file(p, buf, 8 + (size_t)hl + data_kept) == 0);
    CHECK_REFUSED(cli("info '%s'", p), "info", want, "out of range");
    free(buf);
    st_free(&s);
}

TEST(cli_bad_file_header_length_past_end) {
    const char *v = model_file("full.safetensors", DTX_ARCH_DIFF, 0);
    uint8_t *buf;
    size_t n;
    REQUIRE(v && read_bytes(v, &buf, &n) == 0);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)(n - 4) >> (8 * i));
    const char *p = test_path("hl.safetensors");
    REQUIRE(write_file(p, buf, n) == 0);
    CHECK_REFUSED(cli("info '%s'", p), "info", "header length", "past the end");
    free(buf);
}

TEST(cli_bad_file_bad_json) {
    const char *h = "{\"norm.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]";
    const char *p = test_path("json.safetensors");
    uint8_t data[8] = {0};
    REQUIRE(write_st_raw(p, h, strlen(h), data, 8) == 0);
    CHECK_REFUSED(cli("info '%s'", p), "info", p, "bad JSON");
}

/* The header-level faults, one table (ggml's test-backend-ops style): each
 * row takes a valid file of its arch apart, makes one change (a function
 * for the tensor table, or up to two metadata keys set or removed), puts it
 * back together and expects `difftx info` to refuse it: exit 1, one line
 * naming the fault (s1, s2, and s3 when given). */
static int edit_out_of_range(st_bytes *s) {
    int64_t b, e;
    get_offsets(tensor(s, "norm.weight"), &b, &e);
    set_offsets(tensor(s, "norm.weight"), (int64_t)s->data_len, (int64_t)s->data_len + (e - b));
    return 0;
}
static int edit_overlap(st_bytes *s) { /* the same size ([dim] F32): ffn_norm reads attention_norm's bytes */
    int64_t b, e;
    get_offsets(tensor(s, "layers.0.attention_norm.weight"), &b, &e);
    set_offsets(tensor(s, "layers.0.ffn_norm.weight"), b, e);
    return 0;
}
static int edit_size(st_bytes *s) {
    int64_t shape[1] = {33};
    set_shape(tensor(s, "norm.weight"), 1, shape);
    return 0;
}
static int edit_dtype(st_bytes *s) {
    cJSON_ReplaceItemInObjectCaseSensitive(tensor(s, "layers.1.attention.subln.weight"), "dtype",
                                           cJSON_CreateString("F64"));
    return 0;
}
static int edit_missing(st_bytes *s) {
    cJSON_DeleteItemFromObjectCaseSensitive(s->hdr, "layers.1.attention.lambda_k2");
    return st_repack(s);
}
static int edit_tied_output(st_bytes *s) { /* output.weight in a tied model: the realistic one too many */
    cJSON *copy = cJSON_Duplicate(tensor(s, "tok_embeddings.weight"), 1);
    if (!copy) return -1;
    cJSON_AddItemToObject(s->hdr, "output.weight", copy);
    return st_repack(s);
}
static int edit_foreign_tensor(st_bytes *s) { /* a name no Transformer has */
    cJSON_AddItemToObject(s->hdr, "layers.0.attention.lambda_q1", cJSON_Duplicate(tensor(s, "norm.weight"), 1));
    return st_repack(s);
}
static int edit_transposed(st_bytes *s) { /* w1 as [in, out]: the same bytes, so only the model loader sees it */
    int64_t shape[2] = {32, 64};
    set_shape(tensor(s, "layers.0.feed_forward.w1.weight"), 2, shape);
    return 0;
}
static int edit_numeric_meta(st_bytes *s) { /* safetensors wants every metadata value to be a string */
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->hdr, "__metadata__"), "dim",
                                           cJSON_CreateNumber(32));
    return 0;
}

#define NO_META NULL, NULL, NULL, NULL
TEST(cli_bad_file_refusals) {
    static const struct {
        const char *name;
        int arch, tie;
        int (*edit)(st_bytes *);
        const char *key1, *val1, *key2, *val2; /* metadata: value NULL removes the key */
        const char *s1, *s2, *s3;
    } rows[] = {
        {"offsets out of range", DTX_ARCH_DIFF, 0, edit_out_of_range, NO_META, "tensor 'norm.weight'", "out of range",
         NULL},
        {"overlapping offsets", DTX_ARCH_DIFF, 0, edit_overlap, NO_META, "'layers.0.ffn_norm.weight'", "overlap",
         "'layers.0.attention_norm.weight'"},
        {"shape against byte size", DTX_ARCH_DIFF, 0, edit_size, NO_META, "tensor 'norm.weight'", "needs 132 bytes",
         NULL},
        {"unknown dtype", DTX_ARCH_DIFF, 0, edit_dtype, NO_META, "tensor 'layers.1.attention.subln.weight'",
         "unknown dtype 'F64'", NULL},
        {"missing tensor", DTX_ARCH_DIFF, 0, edit_missing, NO_META, "missing tensor",
         "'layers.1.attention.lambda_k2'", NULL},
        {"extra tensor", DTX_ARCH_DIFF, 1, edit_tied_output, NO_META, "unexpected tensor", "'output.weight'", NULL},
        {"foreign tensor", DTX_ARCH_TRANSFORMER, 0, edit_foreign_tensor, NO_META, "unexpected tensor",
         "'layers.0.attention.lambda_q1'", NULL},
        {"transposed weight", DTX_ARCH_DIFF, 0, edit_transposed, NO_META,
         "tensor 'layers.0.feed_forward.w1.weight'", "[32, 64]", "[64, 32]"},
        {"metadata not a string", DTX_ARCH_DIFF, 0, edit_numeric_meta, NO_META, "'dim'", "not a string", NULL},
        {"missing metadata key", DTX_ARCH_DIFF, 0, NULL, "ffn_dim", NULL, NULL, NULL, "missing metadata key",
         "'ffn_dim'", NULL},
        {"heads do not divide dim", DTX_ARCH_DIFF, 0, NULL, "n_heads", "3", "n_kv_heads", "3", "n_heads = 3",
         "does not divide dim = 32", NULL},
        {"kv heads do not divide heads", DTX_ARCH_TRANSFORMER, 0, NULL, "n_kv_heads", "3", NULL, NULL,
         "n_kv_heads = 3", "does not divide n_heads = 4", NULL},
        {"fractional dim", DTX_ARCH_DIFF, 0, NULL, "dim", "32.5", NULL, NULL, "'dim' = '32.5'",
         "not a positive integer", NULL},
        {"text dim", DTX_ARCH_DIFF, 0, NULL, "dim", "abc", NULL, NULL, "'dim' = 'abc'", "not a positive integer", NULL},
        {"negative dim", DTX_ARCH_DIFF, 0, NULL, "dim", "-32", NULL, NULL, "'dim' = '-32'", "not a positive integer",
         NULL},
        {"empty dim", DTX_ARCH_DIFF, 0, NULL, "dim", "", NULL, NULL, "'dim' = ''", "not a positive integer", NULL},
        {"exponent dim", DTX_ARCH_DIFF, 0, NULL, "dim", "1e1", NULL, NULL, "'dim' = '1e1'", "not a positive integer",
         NULL},
        {"rope_theta not a number", DTX_ARCH_DIFF, 0, NULL, "rope_theta", "fast", NULL, NULL,
         "'rope_theta' = 'fast'", "not a number", NULL},
        {"unknown arch", DTX_ARCH_DIFF, 0, NULL, "arch", "mamba", NULL, NULL, "'arch' = 'mamba'",
         "'diff', 'transformer' or 'diff2'", NULL},
        {"tie_embeddings not a boolean", DTX_ARCH_DIFF, 0, NULL, "tie_embeddings", "yes", NULL, NULL,
         "'tie_embeddings' = 'yes'", "'true' or 'false'", NULL},
        /* the variant keys: a value difftx does not implement is refused naming the key, never read as the
         * default (docs/format.md "Variants") */
        {"subln group", DTX_ARCH_DIFF, 0, NULL, "subln", "group", NULL, NULL, "'subln'", "'rms' or 'none'", NULL},
        {"subln empty", DTX_ARCH_TRANSFORMER, 0, NULL, "subln", "", NULL, NULL, "'subln'", "'rms' or 'none'", NULL},
        {"lambda_init text", DTX_ARCH_DIFF, 0, NULL, "lambda_init", "fast", NULL, NULL, "'lambda_init'",
         "'schedule' or a decimal number", NULL},
        {"lambda_init past 1", DTX_ARCH_DIFF, 0, NULL, "lambda_init", "1.5", NULL, NULL, "'lambda_init'",
         "outside [0, 1)", NULL},
        {"lambda_init nan", DTX_ARCH_DIFF, 0, NULL, "lambda_init", "nan", NULL, NULL, "'lambda_init'",
         "'schedule' or a decimal number", NULL},
        {"lambda_init on a Transformer", DTX_ARCH_TRANSFORMER, 0, NULL, "lambda_init", "0.8", NULL, NULL,
         "lambda_init", "only arch diff", NULL},
        /* a valid variant whose tensors are the default's: the table is the variant's */
        {"subln none with its weight", DTX_ARCH_DIFF, 0, NULL, "subln", "none", NULL, NULL,
         "unexpected tensor 'layers.0.attention.subln.weight'", "diff", NULL},
        {"subln rms without a weight", DTX_ARCH_TRANSFORMER, 0, NULL, "subln", "rms", NULL, NULL,
         "missing tensor 'layers.0.attention.subln.weight'", "transformer", NULL},
        /* DIFF V2's λ: only on diff2, only the three forms */
        {"v2_lambda on V1", DTX_ARCH_DIFF, 0, NULL, "v2_lambda", "linear", NULL, NULL, "v2_lambda",
         "only arch diff2", NULL},
        {"v2_lambda tanh", DTX_ARCH_TRANSFORMER, 0, NULL, "v2_lambda", "tanh", NULL, NULL, "'v2_lambda'",
         "'sigmoid', 'linear' or 'none'", NULL},
        {"rope_scaling yarn", DTX_ARCH_TRANSFORMER, 0, NULL, "rope_scaling", "yarn 4", NULL, NULL, "'rope_scaling'",
         "'none' or 'llama3 FACTOR LOW HIGH ORIG'", NULL},
        {"rope_scaling factor below 1", DTX_ARCH_DIFF, 0, NULL, "rope_scaling", "llama3 0.5 1 4 32", NULL, NULL,
         "'rope_scaling'", "factor 0.5 must be at least 1", NULL},
        {"rope_scaling high below low", DTX_ARCH_DIFF, 0, NULL, "rope_scaling", "llama3 8 4 1 32", NULL, NULL,
         "'rope_scaling'", "high_freq_factor 1 above it", NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        st_bytes s;
        REQUIRE(valid_parts(&s, (dtx_arch)rows[i].arch, rows[i].tie) == 0);
        if (rows[i].edit) REQUIREF(rows[i].edit(&s) == 0, "%s: the edit failed", rows[i].name);
        if (rows[i].key1) set_meta(&s, rows[i].key1, rows[i].val1);
        if (rows[i].key2) set_meta(&s, rows[i].key2, rows[i].val2);
        const char *p = st_put_together("bad.safetensors", &s);
        REQUIRE(p);
        int rc = cli("info '%s'", p);
        CHECKF(rc == 1 && cli_one_line_from("difftx info: "), "%s: exit %d: %s", rows[i].name, rc, cli_out);
        CHECKF(cli_has(p) && cli_has(rows[i].s1) && cli_has(rows[i].s2) && (!rows[i].s3 || cli_has(rows[i].s3)),
               "%s: want '%s', '%s'%s%s in: %s", rows[i].name, rows[i].s1, rows[i].s2, rows[i].s3 ? ", " : "",
               rows[i].s3 ? rows[i].s3 : "", cli_out);
        st_free(&s);
    }
}
#undef NO_META

/* Every command that reads a model reports a bad file the same way. */
TEST(cli_bad_file_refused_by_every_command) {
    st_bytes s;
    REQUIRE(valid_parts(&s, DTX_ARCH_DIFF, 0) == 0);
    set_meta(&s, "arch", "mamba");
    const char *p = st_put_together("arch.safetensors", &s);
    const char *toks = text_file("toks.txt", "1 2 3 4 5 6 7 8 1 2 3 4 5 6 7 8 1 2");
    REQUIRE(p && toks);
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", p, toks), "score", "'arch' = 'mamba'", p);
    CHECK_REFUSED(cli("sample --model '%s' --prompt '1 2' --max-tokens 2", p), "sample", "'arch' = 'mamba'", p);
    CHECK_REFUSED(cli("train --init '%s' --tokens '%s' --out '%s' --steps 1", p, toks, test_path("o.safetensors")),
                  "train", "'arch' = 'mamba'", p);
    st_free(&s);
}

/* ------------------------------------------------------------ score */

/* The loss `score` prints for tokens, parsed from the JSON line. */
static int score_loss(const char *model, const char *tokens, double *loss, long long *n) {
    int rc = cli("score --model '%s' --tokens '%s'", model, tokens);
    if (rc != 0) return rc;
    return sscanf(cli_out, "{\"loss\": %lf, \"tokens\": %lld}", loss, n) == 2 ? 0 : -1;
}

TEST(cli_score_matches_library_forward) {
    for (int arch = 0; arch < 2; arch++) {
        const char *mp = model_file("score.safetensors", (dtx_arch)arch, 0);
        int32_t ids[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 15};
        char text[128] = "";
        for (int i = 0; i < 16; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "%d\n", ids[i]);
        const char *tp = text_file("score.txt", text);
        REQUIRE(mp && tp);
        double loss;
        long long n;
        int rc = score_loss(mp, tp, &loss, &n);
        REQUIREF(rc == 0, "score: %d: %s", rc, cli_out);
        CHECK(n == 15);
        /* exactly the JSON line, nothing else */
        CHECKF(cli_one_line() && cli_out[0] == '{' && cli_has("\"tokens\": 15}\n"), "%s", cli_out);
        cJSON *j = cJSON_Parse(cli_out);
        CHECKF(j && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "loss")), "%s", cli_out);
        cJSON_Delete(j);
        dtx_model *m = NULL;
        REQUIRE(dtx_model_load(&m, mp) == DTX_OK);
        double ref = NAN;
        REQUIRE(dtx_model_forward(m, ids, ids + 1, 1, 15, NULL, &ref) == DTX_OK);
        dtx_model_free(m);
        CHECKF(fabs(loss - ref) <= 1e-6 * fabs(ref), "arch %d: cli %.9g, library %.9g", arch, loss, ref);
    }
}

TEST(cli_score_length_limits) {
    const char *mp = model_file("score.safetensors", DTX_ARCH_DIFF, 1);
    REQUIRE(mp);
    const char *one = pattern_file("one.txt", 1, 1);
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", mp, one), "score", "holds 1 token;", "2 to max_seq_len = 16");
    const char *none = text_file("none.txt", " \n");
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", mp, none), "score", "holds 0 tokens", "max_seq_len");
    const char *two = pattern_file("two.txt", 2, 1);
    double loss;
    long long n;
    CHECK(score_loss(mp, two, &loss, &n) == 0 && n == 1);
    const char *max = pattern_file("max.txt", 16, 1);
    CHECK(score_loss(mp, max, &loss, &n) == 0 && n == 15);
    const char *over = pattern_file("over.txt", 17, 1);
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", mp, over), "score", "holds 17 tokens", "max_seq_len = 16");
}

TEST(cli_score_bad_tokens) {
    const char *mp = model_file("score.safetensors", DTX_ARCH_DIFF, 1);
    const char *big = text_file("big.txt", "1 2 3 16 4");
    const char *word = text_file("word.txt", "1 2 three 4");
    const char *neg = text_file("neg.txt", "1 -2 3");
    REQUIRE(mp && big && word && neg);
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", mp, big), "score", "token 3 has id 16", "vocab_size 16");
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", mp, word), "score", "token 2 'three'", "not a non-negative");
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", mp, neg), "score", "token 1 '-2'", "not a non-negative");
    CHECK_REFUSED(cli("score --model '%s' --tokens '%s'", mp, test_path("absent.txt")), "score", "absent.txt",
                  "No such file");
}

/* ------------------------------------------------------------ train */

static const char *TINY = "--dim 32 --layers 2 --heads 2 --vocab 16 --ffn 64 --seq 16";

static double final_loss(void) {
    const char *p = strstr(cli_out, "final loss ");
    return p ? strtod(p + strlen("final loss "), NULL) : NAN;
}

/* One model trained on the period-8 pattern, shared by the tests below. */
static const char *trained_model(void) {
    static char path[512];
    if (path[0]) return path;
    const char *toks = pattern_file("pattern.txt", 600, 1);
    const char *mp = test_path("trained.safetensors");
    if (!toks) return NULL;
    int rc = cli("train %s --tokens '%s' --out '%s' --steps 200 --batch 8 --lr 3e-3 --log-every 50", TINY, toks, mp);
    CHECKF(rc == 0, "train: exit %d: %s", rc, cli_out);
    CHECKF(final_loss() < 0.5, "final loss %g:\n%s", final_loss(), cli_out);
    if (rc != 0) return NULL;
    snprintf(path, sizeof path, "%s", mp);
    return path;
}

TEST(cli_train_learns_a_repeating_sequence) {
    const char *mp = trained_model();
    REQUIRE(mp);
    CHECK(cli("info '%s'", mp) == 0 && cli_has("arch            diff") && cli_has("max_seq_len     16"));
    /* the score of an unseen stretch of the pattern agrees */
    const char *tp = pattern_file("tail.txt", 16, 5);
    double loss;
    long long n;
    CHECK(score_loss(mp, tp, &loss, &n) == 0 && n == 15 && loss < 0.5);
}

TEST(cli_train_log_lines) {
    const char *toks = pattern_file("pattern.txt", 100, 1);
    const char *mp = test_path("log.safetensors");
    REQUIRE(toks);
    int rc = cli("train %s --arch transformer --heads 4 --tokens '%s' --out '%s' --steps 7 --log-every 3 --batch 2",
                 "--dim 32 --layers 1 --vocab 16 --ffn 64 --seq 8", toks, mp);
    REQUIRE(rc == 0);
    /* steps 3, 6 and the last */
    CHECKF(cli_has("step 3/7  loss ") && cli_has("step 6/7  loss ") && cli_has("step 7/7  loss ") && !cli_has("step 1/7"), "%s", cli_out);
    CHECKF(cli_has("  lr ") && cli_has("  gnorm ") && cli_has(" tok/s  eta "), "%s", cli_out);
    CHECK(cli_has("saved ") && cli_has(mp));
    CHECK(cli("info '%s'", mp) == 0 && cli_has("arch            transformer"));
}

/* With the same seed, 2 micro-batches of 4 windows draw the same windows as
 * one batch of 8, so accumulation must give the same model. */
TEST(cli_train_accum_matches_bigger_batch) {
    const char *toks = pattern_file("pattern.txt", 300, 1);
    const char *a = test_path("accum.safetensors"), *b = test_path("batch.safetensors");
    REQUIRE(toks);
    int rc = cli("train %s --tokens '%s' --out '%s' --steps 5 --batch 4 --accum 2 --seed 3", TINY, toks, a);
    CHECKF(rc == 0 && cli_has("= 128 tokens/step"), "accum: %d: %s", rc, cli_out);
    rc = cli("train %s --tokens '%s' --out '%s' --steps 5 --batch 8 --seed 3", TINY, toks, b);
    CHECKF(rc == 0, "batch: %d: %s", rc, cli_out);
    dtx_model *ma = NULL, *mb = NULL;
    REQUIRE(dtx_model_load(&ma, a) == DTX_OK);
    REQUIRE(dtx_model_load(&mb, b) == DTX_OK);
    REQUIRE(dtx_model_num_params(ma) == dtx_model_num_params(mb));
    double e = rel_err(dtx_model_params(ma), dtx_model_params(mb), dtx_model_num_params(ma), 0, 1e-6);
    CHECKF(e < 1e-4, "accum 2 x 4 vs batch 8: rel err %g", e);
    dtx_model_free(ma);
    dtx_model_free(mb);
}

TEST(cli_train_init_continues) {
    const char *mp = trained_model();
    REQUIRE(mp);
    const char *toks = pattern_file("pattern.txt", 200, 3);
    const char *next = test_path("continued.safetensors");
    int rc = cli("train --init '%s' --tokens '%s' --out '%s' --steps 3 --lr 1e-4 --log-every 1 --bf16", mp, toks, next);
    REQUIRE(rc == 0);
    /* A fresh model starts near ln 16 = 2.77; the continued one is already low. */
    const char *p = strstr(cli_out, "step 1/3  loss ");
    REQUIRE(p);
    double first = strtod(p + strlen("step 1/3  loss "), NULL);
    CHECKF(first < 0.5, "first loss %g:\n%s", first, cli_out);
    CHECK(cli_has("from ") && cli_has("max_seq 16"));
    CHECK(cli("info '%s'", next) == 0 && cli_has("dim             32"));
    /* config flags cannot override the file */
    CHECK_USAGE(cli("train --init '%s' --tokens '%s' --out '%s' --dim 64", mp, toks, next), "train", "--dim",
                "--init");
    CHECK_USAGE(cli("train --init '%s' --tokens '%s' --out '%s' --no-tie", mp, toks, next), "train", "--no-tie",
                "--init");
    CHECK_USAGE(cli("train --init '%s' --tokens '%s' --out '%s' --seq 32", mp, toks, next), "train", "--seq",
                "max_seq_len 16");
}

/* --max-seq and --rope-theta with --init extend the context: the same
 * weights (a step at a vanishing lr moves none of them measurably) in a
 * model of the new length and base, which then trains at the longer --seq. */
TEST(cli_train_init_extends_the_context) {
    const char *mp = trained_model();
    REQUIRE(mp);
    const char *toks = pattern_file("pattern_long.txt", 400, 3);
    const char *next = test_path("extended.safetensors");
    int rc = cli("train --init '%s' --tokens '%s' --out '%s' --max-seq 32 --rope-theta 40000 --seq 32 --steps 1 "
                 "--lr 1e-12 --wd 0",
                 mp, toks, next);
    REQUIREF(rc == 0, "%s", cli_out);
    CHECK(cli_has("max_seq 32"));
    dtx_model *a = NULL, *b = NULL;
    REQUIRE(dtx_model_load(&a, mp) == DTX_OK);
    REQUIRE(dtx_model_load(&b, next) == DTX_OK);
    CHECK(dtx_model_config(b)->max_seq_len == 32 && dtx_model_config(b)->rope_theta == 40000);
    CHECK(dtx_model_config(a)->max_seq_len == 16 && dtx_model_config(b)->dim == dtx_model_config(a)->dim);
    REQUIRE(dtx_model_num_params(a) == dtx_model_num_params(b));
    double e = rel_err(dtx_model_params(a), dtx_model_params(b), dtx_model_num_params(a), 0, 1e-6);
    CHECKF(e < 1e-6, "weights moved: rel err %g", e);
    dtx_model_free(a);
    dtx_model_free(b);
    CHECK_USAGE(cli("train --init '%s' --tokens '%s' --out '%s' --max-seq 8 --seq 16", mp, toks, next), "train",
                "--seq", "max_seq_len 8");
    /* an extended run resumes only at the same length, and says which flag differs */
    const char *ext = test_path("extended_ckpt.safetensors");
    REQUIRE(cli("train --init '%s' --tokens '%s' --out '%s' --max-seq 32 --seq 32 --steps 4 --ckpt-every 2 "
                "--stop-after 2",
                mp, toks, ext) == 0);
    CHECK_USAGE(cli("train --init '%s' --tokens '%s' --out '%s' --max-seq 48 --seq 32 --steps 4 --resume", mp, toks,
                    ext),
                "train", "--init/--max-seq differs", "max_seq_len = 48 in this run, 32");
    CHECK(cli("train --init '%s' --tokens '%s' --out '%s' --max-seq 32 --seq 32 --steps 4 --resume", mp, toks, ext) == 0);
}

TEST(cli_train_refuses_bad_setups) {
    const char *toks = pattern_file("short.txt", 16, 1);
    const char *o = test_path("never.safetensors");
    REQUIRE(toks);
    /* seq 16 needs 17 tokens */
    CHECK_REFUSED(cli("train %s --tokens '%s' --out '%s' --steps 2", TINY, toks, o), "train", "holds 16 tokens",
                  "at least 17");
    CHECK(access(o, F_OK) != 0);
    const char *big = text_file("big.txt", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20");
    CHECK_REFUSED(cli("train %s --tokens '%s' --out '%s' --steps 2", TINY, big, o), "train", "token 15 has id 16",
                  "vocab_size 16");
    /* config and optimizer validation messages come from the library */
    CHECK_USAGE(cli("train %s --heads 3 --tokens '%s' --out '%s'", TINY, toks, o), "train", "n_heads = 3",
                "does not divide");
    CHECK_USAGE(cli("train %s --kv-heads 3 --tokens '%s' --out '%s'", TINY, toks, o), "train", "n_kv_heads = 3",
                "does not divide");
    CHECK_USAGE(cli("train %s --max-seq 8 --tokens '%s' --out '%s'", TINY, toks, o), "train", "--seq",
                "max_seq_len 8");
    CHECK_USAGE(cli("train %s --lr 1e-3 --min-lr 1e-2 --tokens '%s' --out '%s'", TINY, toks, o), "train", "min_lr",
                "lr");
    CHECK_USAGE(cli("train %s --steps 5 --warmup 6 --tokens '%s' --out '%s'", TINY, toks, o), "train", "warmup",
                "total_steps = 5");
    CHECK_REFUSED(cli("train %s --tokens '%s' --out /no/such/dir/m.safetensors", TINY, toks), "train",
                  "/no/such/dir", "cannot write");
    CHECK(access(o, F_OK) != 0);
}

/* --subln and --lambda-init make Table 6's variants: the file says so in
 * its metadata and tensor table, info reports it, and bad values, a λ_init
 * for the Transformer or a variant flag with --init are refused. */
TEST(cli_train_variants) {
    const char *toks = pattern_file("variants.txt", 400, 1);
    REQUIRE(toks);
    const char *dn = test_path("dnone.safetensors"), *tr = test_path("trms.safetensors");
    int rc = cli("train %s --subln none --lambda-init 0.8 --tokens '%s' --out '%s' --steps 3", TINY, toks, dn);
    CHECKF(rc == 0 && cli_has("model diff (subln none, lambda_init 0.8)"), "%d: %s", rc, cli_out);
    rc = cli("info --tensors '%s'", dn);
    CHECKF(rc == 0 && cli_has("subln           none  (a Table 6 variant)") && cli_has("lambda_init     0.8") &&
               !cli_has("subln.weight"),
           "%d: %s", rc, cli_out);
    rc = cli("info --json '%s'", dn);
    CHECKF(rc == 0 && cli_has("\"subln\":\"none\"") && cli_has("\"lambda_init\":0.8"), "%d: %s", rc, cli_out);
    rc = cli("train %s --arch transformer --heads 4 --subln rms --tokens '%s' --out '%s' --steps 3", TINY, toks, tr);
    CHECKF(rc == 0 && cli_has("model transformer (subln rms)"), "%d: %s", rc, cli_out);
    rc = cli("info --tensors '%s'", tr);
    char line[80]; /* one weight of the head's width d = 32 / 4 */
    snprintf(line, sizeof line, "%-40s [8]", "layers.1.attention.subln.weight");
    CHECKF(rc == 0 && cli_has("subln           rms  (a Table 6 variant)") && cli_has(line), "%d: %s", rc, cli_out);
    /* the variant survives --init (the file fixes it) and scoring reads it */
    const char *next = test_path("dnone2.safetensors");
    rc = cli("train --init '%s' --tokens '%s' --out '%s' --steps 2", dn, toks, next);
    CHECKF(rc == 0 && cli_has("model diff (subln none, lambda_init 0.8)"), "%d: %s", rc, cli_out);
    const char *o = test_path("never.safetensors");
    CHECK_USAGE(cli("train %s --subln group --tokens '%s' --out '%s'", TINY, toks, o), "train", "--subln", "rms|none");
    CHECK_USAGE(cli("train %s --lambda-init 1 --tokens '%s' --out '%s'", TINY, toks, o), "train", "--lambda-init",
                "got '1'");
    CHECK_USAGE(cli("train %s --lambda-init sched --tokens '%s' --out '%s'", TINY, toks, o), "train", "--lambda-init",
                "'schedule' or a number");
    CHECK_USAGE(cli("train %s --arch transformer --heads 4 --lambda-init 0.5 --tokens '%s' --out '%s'", TINY, toks, o),
                "train", "lambda_init = 0.5", "only arch diff");
    CHECK_USAGE(cli("train --init '%s' --subln rms --tokens '%s' --out '%s'", dn, toks, o), "train", "--subln",
                "--init");
    CHECK_USAGE(cli("train --init '%s' --init-scheme gpt2 --tokens '%s' --out '%s'", dn, toks, o), "train",
                "--init-scheme", "--init");
    CHECK_USAGE(cli("train %s --init-scheme xavier --tokens '%s' --out '%s'", TINY, toks, o), "train", "--init-scheme",
                "torch|gpt2");
    CHECK(access(o, F_OK) != 0);
}

/* ------------------------------------------------------------ sample */

TEST(cli_sample_greedy_continues_the_pattern) {
    const char *mp = trained_model();
    REQUIRE(mp);
    int rc = cli("sample --model '%s' --prompt '3 4 5' --max-tokens 10", mp);
    CHECKF(rc == 0, "exit %d: %s", rc, cli_out);
    CHECKF(strcmp(cli_out, "3 4 5 6 7 8 1 2 3 4 5 6 7\n") == 0, "%s", cli_out);
    const char *pf = text_file("prompt.txt", "8\n1\n");
    REQUIRE(pf);
    rc = cli("sample --model '%s' --prompt-file '%s' --max-tokens 4 --temperature 0", mp, pf);
    CHECKF(rc == 0 && strcmp(cli_out, "8 1 2 3 4 5\n") == 0, "%d: %s", rc, cli_out);
}

TEST(cli_sample_with_temperature) {
    const char *mp = model_file("fresh.safetensors", DTX_ARCH_TRANSFORMER, 0);
    REQUIRE(mp);
    int rc = cli("sample --model '%s' --prompt '1' --max-tokens 12 --temperature 1.5 --seed 9", mp);
    REQUIRE(rc == 0);
    static char first[sizeof cli_out];
    memcpy(first, cli_out, sizeof cli_out);
    /* 13 ids, all in the vocabulary */
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(cli_out, " \n", &save); w; w = strtok_r(NULL, " \n", &save), n++) {
        long v = strtol(w, NULL, 10);
        CHECKF(v >= 0 && v < 16, "id %s", w);
    }
    CHECK(n == 13);
    /* same seed, same text */
    CHECK(cli("sample --model '%s' --prompt '1' --max-tokens 12 --temperature 1.5 --seed 9", mp) == 0);
    CHECK(strcmp(cli_out, first) == 0);
}

TEST(cli_sample_refuses_bad_prompts) {
    const char *mp = model_file("fresh.safetensors", DTX_ARCH_DIFF, 1);
    REQUIRE(mp);
    CHECK_USAGE(cli("sample --model '%s' --prompt '1 2 99' --max-tokens 2", mp), "sample", "token 2 has id 99",
                "vocab_size 16");
    CHECK_USAGE(cli("sample --model '%s' --prompt '1 -2' --max-tokens 2", mp), "sample", "token 1 '-2'",
                "not a non-negative integer id");
    CHECK_USAGE(cli("sample --model '%s' --prompt '  ' --max-tokens 2", mp), "sample", "--prompt",
                "at least one token id");
    CHECK_USAGE(cli("sample --model '%s' --prompt '1 2 3' --max-tokens 14", mp), "sample", "--max-tokens",
                "max_seq_len 16");
    CHECK(cli("sample --model '%s' --prompt '1 2 3' --max-tokens 13", mp) == 0);
    CHECK_USAGE(cli("sample --model '%s' --prompt 1 --prompt-file f --max-tokens 2", mp), "sample", "--prompt",
                "exactly one");
    const char *pf = text_file("bad-prompt.txt", "1 2 16");
    REQUIRE(pf);
    CHECK_REFUSED(cli("sample --model '%s' --prompt-file '%s' --max-tokens 2", mp, pf), "sample",
                  "token 2 has id 16", "bad-prompt.txt");
}

/* --lr alone keeps the default floor's ratio: a peak below the default
 * --min-lr is accepted and decays to a tenth of itself (not refused). */
TEST(cli_train_small_lr_scales_min_lr) {
    const char *toks = pattern_file("pattern.txt", 100, 1);
    const char *mp = test_path("small-lr.safetensors");
    REQUIRE(toks);
    dtx_optim_config d = dtx_optim_default();
    int rc = cli("train --dim 32 --layers 1 --heads 2 --vocab 16 --ffn 32 --seq 8 --batch 2 --steps 2 "
                 "--log-every 1 --schedule linear --lr %g --tokens '%s' --out '%s'", d.min_lr / 10, toks, mp);
    CHECKF(rc == 0, "exit %d: %s", rc, cli_out);
    const char *p = strstr(cli_out, "step 2/2");
    char lr[32] = "";
    CHECKF(p && sscanf(p, "step 2/2  loss %*f  lr %31s", lr) == 1, "%s", cli_out);
    char want_lr[32];
    snprintf(want_lr, sizeof want_lr, "%.2e", d.min_lr / 10 * (d.min_lr / d.lr));
    CHECKF(strcmp(lr, want_lr) == 0, "last lr %s, want %s", lr, want_lr);
}

/* DIFF V2: info prints the parameter difference to its Transformer (the
 * same heads and KV heads) as the second query head of each pair plus
 * lambda_proj, and says what matched means; the JSON carries both parts,
 * which agree with the models the library builds; the ablation without λ
 * has no lambda_proj. */
TEST(cli_info_diff2_difference) {
    for (int gqa = 0; gqa < 2; gqa++)
        for (int mode = DTX_V2_LAMBDA_SIGMOID; mode <= DTX_V2_LAMBDA_NONE; mode++) {
            dtx_config c = tiny_config(DTX_ARCH_TRANSFORMER, gqa);
            c.arch = DTX_ARCH_DIFF2;
            c.n_layers = 3;
            c.v2_lambda = (dtx_v2_lambda)mode;
            if (gqa) c.n_kv_heads = c.n_heads / 2;
            const char *p = model_file_cfg("v2.safetensors", &c);
            REQUIRE(p);
            cJSON *j = info_json(p);
            REQUIRE(j);
            dtx_config b = dtx_config_baseline(&c);
            CHECK(b.arch == DTX_ARCH_TRANSFORMER && b.n_heads == c.n_heads && b.n_kv_heads == c.n_kv_heads);
            const cJSON *base = cJSON_GetObjectItemCaseSensitive(j, "baseline");
            int64_t lam = mode == DTX_V2_LAMBDA_NONE ? 0 : c.n_heads * c.dim * c.n_layers;
            CHECKF(jint(j, "params") == (int64_t)params_of(&c), "gqa %d mode %d", gqa, mode);
            CHECK(jint(base, "params") == (int64_t)params_of(&b));
            CHECK(jint(j, "difference_query") == c.dim * c.dim * c.n_layers);
            CHECK(jint(j, "difference_lambda") == lam);
            CHECK(jint(j, "difference") == c.dim * c.dim * c.n_layers + lam);
            CHECK(jint(j, "difference") == (int64_t)params_of(&c) - (int64_t)params_of(&b));
            const cJSON *v2l = cJSON_GetObjectItemCaseSensitive(j, "v2_lambda");
            CHECK(cJSON_IsString(v2l) && strcmp(v2l->valuestring, dtx_config_v2_lambda_name(&c)) == 0);
            cJSON_Delete(j);
            int rc = cli("info '%s'", p);
            CHECKF(rc == 0 && cli_has("arch            diff2") && cli_has("query head of each pair") &&
                       cli_has("Matched here means") && cli_has("v2_lambda       "),
                   "exit %d: %s", rc, cli_out);
        }
}
