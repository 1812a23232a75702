/* Hugging Face tokenizer.json and SentencePiece tokenizer.model
 * (src/io/tokenizer_hf.c, tokenizer_spm.c): id-exact against the real
 * encoders on the fixture cases (tools/hf_tokenizer_fixtures.mjs: npm
 * tokenizers; tools/spm_fixtures.py: python3-sentencepiece) with the files
 * of scripts/fetch_hf_tokenizers.sh; the merge rules on small vocabularies
 * where they differ from tiktoken's; BOS and EOS; and a one-line refusal for
 * every malformed file. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "io/tokenizer.h"
#include "test.h"

static const char *hf_dir(const char *name) {
    static char buf[512];
    const char *root = getenv("DTX_HF_TOKENIZERS");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "data/hf-tokenizers", name);
    return buf;
}

/* A tokenizer from data/hf-tokenizers (a folder: the loader picks its file);
 * a missing folder fails the test (make test fetches it). */
static dtx_tokenizer *load_real(const char *name) {
    struct stat sb;
    if (stat(hf_dir(name), &sb) != 0) {
        test_fail_at(__FILE__, __LINE__, "%s is missing: run scripts/fetch_hf_tokenizers.sh (make test does)",
                     hf_dir(name));
        return NULL;
    }
    dtx_tokenizer *t = NULL;
    if (dtx_tokenizer_load(&t, hf_dir(name)) != DTX_OK) {
        test_fail_at(__FILE__, __LINE__, "loading %s: %s", hf_dir(name), dtx_last_error());
        return NULL;
    }
    return t;
}

static cJSON *load_fixture(const char *name) {
    size_t len;
    char *json = test_slurp(fixture_path(name), &len);
    if (!json) {
        test_fail_at(__FILE__, __LINE__, "cannot read %s", fixture_path(name));
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(json, len);
    free(json);
    if (!cJSON_IsArray(cJSON_GetObjectItem(root, "cases"))) {
        test_fail_at(__FILE__, __LINE__, "%s is not {\"cases\": [...]}", name);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static uint8_t *case_bytes(const cJSON *c, int64_t *len) {
    const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItem(c, "bytes_b64"));
    if (!b64) return NULL;
    size_t bl = strlen(b64);
    uint8_t *text = malloc(bl / 4 * 3 + 1);
    *len = bl ? dtx_b64_decode(b64, bl, text) : 0;
    if (*len < 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Whether t encodes text to want; on a difference, says where. */
static int same_ids(const dtx_tokenizer *t, const uint8_t *text, int64_t len, dtx_encode_mode mode, const cJSON *want,
                    const char *what, const char *name, int32_t **ids_out, int64_t *n_out) {
    int32_t *ids = NULL;
    int64_t n = 0;
    if (dtx_tokenizer_encode(t, (const char *)text, (size_t)len, mode, &ids, &n) != DTX_OK) {
        test_fail_at(__FILE__, __LINE__, "%s, case '%s': %s", what, name, dtx_last_error());
        return 0;
    }
    int64_t nw = cJSON_GetArraySize(want), first = -1;
    for (int64_t i = 0; i < (n < nw ? n : nw) && first < 0; i++)
        if (ids[i] != (int32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble) first = i;
    int same = n == nw && first < 0;
    CHECKF(same, "%s, case '%s' (%s): %lld ids, the reference %lld, first difference at %lld", what, name,
           mode == DTX_ENCODE_SPECIAL ? "special" : "ordinary", (long long)n, (long long)nw, (long long)first);
    if (ids_out) {
        *ids_out = ids;
        *n_out = n;
    } else {
        free(ids);
    }
    return same;
}

/* ------------------------------------------------------------ the real encoders */

TEST(tok_hf_json_fixtures) {
    static const char *const names[] = {"gpt2", "gpt2-prefix", "llama3-style", "qwen2-style"};
    cJSON *root = load_fixture("tokenizer/hf_cases.json");
    REQUIRE(root);
    for (int k = 0; k < 4; k++) {
        dtx_tokenizer *t = load_real(names[k]);
        if (!t) continue;
        CHECK(strcmp(dtx_tokenizer_source(t), "huggingface") == 0);
        int n_cases = 0, n_ok = 0;
        int64_t total = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
            const cJSON *ids = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "ids"), names[k]);
            const cJSON *sp = cJSON_GetObjectItem(ids, "special"), *ord = cJSON_GetObjectItem(ids, "ordinary");
            int64_t len;
            uint8_t *text = case_bytes(c, &len);
            if (!name || !text || !cJSON_IsArray(sp)) {
                test_fail_at(__FILE__, __LINE__, "fixture case %d is malformed", n_cases);
                free(text);
                continue;
            }
            n_cases++;
            int32_t *got = NULL;
            int64_t n = 0;
            int ok = same_ids(t, text, len, DTX_ENCODE_SPECIAL, sp, names[k], name, &got, &n);
            ok &= same_ids(t, text, len, DTX_ENCODE_ORDINARY, ord ? ord : sp, names[k], name, NULL, NULL);
            /* byte-level: decoding gives the text back, added tokens as their
             * text (add_prefix_space adds a space before each piece of text) */
            char *back = NULL;
            size_t bl = 0;
            CHECKF(dtx_tokenizer_decode(t, got, n, &back, &bl) == DTX_OK &&
                       (k == 1 || (bl == (size_t)len && memcmp(back, text, bl) == 0)),
                   "%s, case '%s': decode differs", names[k], name);
            n_ok += ok;
            total += n;
            free(back);
            free(got);
            free(text);
        }
        CHECK(n_cases > 360 && n_ok == n_cases);
        printf("     %-13s %d of %d cases id-exact with Hugging Face tokenizers, both modes (%lld ids)\n", names[k],
               n_ok, n_cases, (long long)total);
        dtx_tokenizer_free(t);
    }
    cJSON_Delete(root);
}

TEST(tok_spm_fixtures) {
    cJSON *root = load_fixture("tokenizer/spm_cases.json");
    REQUIRE(root);
    dtx_tokenizer *t = load_real("llama2");
    if (!t) {
        cJSON_Delete(root);
        return;
    }
    CHECK(strcmp(dtx_tokenizer_source(t), "sentencepiece") == 0);
    CHECK(dtx_tokenizer_vocab_size(t) == 32000);
    CHECK(dtx_tokenizer_bos(t) == 1 && dtx_tokenizer_eos(t) == 2);
    CHECK(dtx_tokenizer_token_id(t, "<unk>") == 0);
    int n_cases = 0, n_ok = 0;
    int64_t total = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        const cJSON *ord = cJSON_GetObjectItem(c, "ordinary"), *sp = cJSON_GetObjectItem(c, "special");
        int64_t len;
        uint8_t *text = case_bytes(c, &len);
        if (!name || !text || !cJSON_IsArray(ord)) {
            test_fail_at(__FILE__, __LINE__, "fixture case %d is malformed", n_cases);
            free(text);
            continue;
        }
        n_cases++;
        int32_t *got = NULL;
        int64_t n = 0;
        int ok = same_ids(t, text, len, DTX_ENCODE_ORDINARY, ord, "llama2", name, &got, &n);
        ok &= same_ids(t, text, len, DTX_ENCODE_SPECIAL, sp ? sp : ord, "llama2", name, NULL, NULL);
        /* the identity normalizer keeps every byte: decoding gives the
         * dummy prefix's space and then the text */
        char *back = NULL;
        size_t bl = 0;
        int has_u2581 = memmem(text, (size_t)len, "\xe2\x96\x81", 3) != NULL; /* decodes as a space */
        CHECKF(dtx_tokenizer_decode(t, got, n, &back, &bl) == DTX_OK &&
                   (has_u2581 || len == 0 ? 1 : bl == (size_t)len + 1 && back[0] == ' ' && memcmp(back + 1, text, len) == 0),
               "llama2, case '%s': decode is not ' ' + the text", name);
        n_ok += ok;
        total += n;
        free(back);
        free(got);
        free(text);
    }
    CHECK(n_cases > 360 && n_ok == n_cases);
    printf("     llama2        %d of %d cases id-exact with SentencePiece, both modes (%lld ids)\n", n_ok, n_cases,
           (long long)total);
    dtx_tokenizer_free(t);
    cJSON_Delete(root);
}

TEST(tok_hf_bos_eos) {
    static const struct {
        const char *name, *bos, *eos;
    } want[] = {
        {"gpt2", NULL, "<|endoftext|>"},               /* no template; the conventional EOS */
        {"llama3-style", "<|begin_of_text|>", "<|eot_id|>"}, /* tokenizer_config.json */
        {"qwen2-style", NULL, "<|im_end|>"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        dtx_tokenizer *t = load_real(want[i].name);
        if (!t) continue;
        int32_t bos = want[i].bos ? dtx_tokenizer_token_id(t, want[i].bos) : -1;
        CHECKF(dtx_tokenizer_bos(t) == bos, "%s: bos %ld, want %ld", want[i].name, (long)dtx_tokenizer_bos(t), (long)bos);
        CHECKF(dtx_tokenizer_eos(t) >= 0 && dtx_tokenizer_eos(t) == dtx_tokenizer_token_id(t, want[i].eos),
               "%s: eos %ld", want[i].name, (long)dtx_tokenizer_eos(t));
        for (int k = 0; k < dtx_tokenizer_num_special(t); k++) { /* Qwen's <tool_call> is added, not special */
            int32_t id;
            const char *s = dtx_tokenizer_special(t, k, &id);
            CHECKF(dtx_tokenizer_special_is_special(t, k) == (strstr(s, "tool_call") == NULL && strcmp(s, "[[cite]]")),
                   "%s: %s", want[i].name, s);
        }
        dtx_tokenizer_free(t);
    }
}

/* ------------------------------------------------------------ small tokenizer.json files */

/* GPT-2's byte -> character map, written out independently of the reader. */
static void byte_char_utf8(int b, char out[3]) {
    static int cp[256];
    static int made;
    if (!made) {
        int k = 0;
        for (int i = 0; i < 256; i++) {
            int printable = (i >= '!' && i <= '~') || (i >= 0xa1 && i <= 0xac) || (i >= 0xae && i <= 0xff);
            cp[i] = printable ? i : 256 + k++;
        }
        made = 1;
    }
    int c = cp[b];
    if (c < 0x80) {
        out[0] = (char)c;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        out[2] = 0;
    }
}

/* Every byte (id = byte), then "ab" 256, "bc" 257, "abc" 258 (through
 * "ab" + "c" only), "xyz" 259 (no merge makes it), merges "a b", "b c",
 * "ab c"; ByteLevel without regex; one added special <|s|> 260. */
static cJSON *small_json(int ignore_merges) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) {
        char ch[3];
        byte_char_utf8(b, ch);
        cJSON_AddNumberToObject(vocab, ch, b);
    }
    cJSON_AddNumberToObject(vocab, "ab", 256);
    cJSON_AddNumberToObject(vocab, "bc", 257);
    cJSON_AddNumberToObject(vocab, "abc", 258);
    cJSON_AddNumberToObject(vocab, "xyz", 259);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddItemToArray(merges, cJSON_CreateString("a b"));
    cJSON_AddItemToArray(merges, cJSON_CreateString("b c"));
    const char *pair[2] = {"ab", "c"};
    cJSON_AddItemToArray(merges, cJSON_CreateStringArray(pair, 2));
    cJSON_AddBoolToObject(model, "ignore_merges", ignore_merges);
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
    cJSON_AddBoolToObject(pre, "use_regex", 0);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens"), *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", 260);
    cJSON_AddStringToObject(a, "content", "<|s|>");
    cJSON_AddBoolToObject(a, "special", 1);
    cJSON_AddBoolToObject(a, "normalized", 0);
    cJSON_AddItemToArray(added, a);
    return root;
}

static dtx_status load_json(cJSON *root, dtx_tokenizer **t) {
    char *text = cJSON_PrintUnformatted(root);
    const char *p = test_path("small.tokenizer.json");
    int w = write_file(p, text, strlen(text));
    free(text);
    *t = NULL;
    return w == 0 ? dtx_tokenizer_load(t, p) : DTX_ERR_IO;
}

static int encodes_to(const dtx_tokenizer *t, const char *text, dtx_encode_mode mode, const int32_t *want, int64_t nw) {
    int32_t *ids = NULL;
    int64_t n = 0;
    int ok = dtx_tokenizer_encode(t, text, strlen(text), mode, &ids, &n) == DTX_OK && n == nw &&
             (n == 0 || memcmp(ids, want, (size_t)n * sizeof *ids) == 0);
    free(ids);
    return ok;
}

/* The merges decide, not the vocabulary: "abc" is a token, but "a b" is
 * merged first and "ab c" makes it; "xyz" is a token no merge makes, so it
 * is spelt out, unless ignore_merges takes a whole piece that is a token. */
TEST(tok_hf_merge_rules) {
    dtx_tokenizer *t = NULL;
    cJSON *j = small_json(0);
    REQUIRE(load_json(j, &t) == DTX_OK);
    cJSON_Delete(j);
    CHECK(dtx_tokenizer_vocab_size(t) == 261);
    CHECK(encodes_to(t, "abc", DTX_ENCODE_SPECIAL, (int32_t[]){258}, 1));
    CHECK(encodes_to(t, "xyz", DTX_ENCODE_SPECIAL, (int32_t[]){'x', 'y', 'z'}, 3));
    CHECK(encodes_to(t, "bcab", DTX_ENCODE_SPECIAL, (int32_t[]){257, 256}, 2));
    CHECK(encodes_to(t, "abab", DTX_ENCODE_SPECIAL, (int32_t[]){256, 256}, 2));
    /* "a b" (rank 0) before "b c" (rank 1): abc -> ab c -> abc, never a bc */
    CHECK(encodes_to(t, "abcbc", DTX_ENCODE_SPECIAL, (int32_t[]){258, 257}, 2));
    CHECK(encodes_to(t, "x<|s|>abc", DTX_ENCODE_SPECIAL, (int32_t[]){'x', 260, 258}, 3));
    CHECK(encodes_to(t, "x<|s|>", DTX_ENCODE_ORDINARY, (int32_t[]){'x', '<', '|', 's', '|', '>'}, 6));
    dtx_tokenizer_free(t);
    j = small_json(1);
    REQUIRE(load_json(j, &t) == DTX_OK);
    cJSON_Delete(j);
    CHECK(encodes_to(t, "xyz", DTX_ENCODE_SPECIAL, (int32_t[]){259}, 1));
    dtx_tokenizer_free(t);
}

typedef struct {
    const char *what;
    void (*edit)(cJSON *root);
    dtx_status st;
    const char *want;
} json_case;

#define EDIT(name, body) static void name(cJSON *r) { body; }
static cJSON *model_of(cJSON *r) { return cJSON_GetObjectItem(r, "model"); }
static cJSON *first_added(cJSON *r) { return cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 0); }
EDIT(e_array, cJSON_DeleteItemFromObjectCaseSensitive(r, "model"); cJSON_AddItemToObject(r, "model", cJSON_CreateArray()))
EDIT(e_no_model, cJSON_DeleteItemFromObjectCaseSensitive(r, "model"))
EDIT(e_wordpiece, cJSON_ReplaceItemInObjectCaseSensitive(model_of(r), "type", cJSON_CreateString("WordPiece")))
EDIT(e_dropout, cJSON_AddNumberToObject(model_of(r), "dropout", 0.1))
EDIT(e_prefix, cJSON_AddStringToObject(model_of(r), "continuing_subword_prefix", "##"))
EDIT(e_vocab_array, cJSON_ReplaceItemInObjectCaseSensitive(model_of(r), "vocab", cJSON_CreateArray()))
EDIT(e_vocab_id, cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(model_of(r), "vocab"), "ab", cJSON_CreateNumber(1.5)))
EDIT(e_vocab_neg, cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(model_of(r), "vocab"), "ab", cJSON_CreateNumber(-1)))
EDIT(e_vocab_dup_id, cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(model_of(r), "vocab"), "ab", cJSON_CreateNumber(7)))
EDIT(e_vocab_char, cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(r), "vocab"), "\xe4\xb8\xad", 280))
EDIT(e_vocab_byte, cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(model_of(r), "vocab"), "a"))
EDIT(e_merges_obj, cJSON_ReplaceItemInObjectCaseSensitive(model_of(r), "merges", cJSON_CreateObject()))
EDIT(e_merge_one, cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 0, cJSON_CreateString("ab")))
EDIT(e_merge_three, cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 0, cJSON_CreateString("a b c")))
EDIT(e_merge_unknown, cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 1, cJSON_CreateString("q zz")))
EDIT(e_merge_joined, cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 1, cJSON_CreateString("c a")))
EDIT(e_merge_number, cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 1, cJSON_CreateNumber(3)))
EDIT(e_normalizer, cJSON_ReplaceItemInObjectCaseSensitive(r, "normalizer", cJSON_Parse("{\"type\": \"NFC\"}")))
EDIT(e_no_pre, cJSON_DeleteItemFromObjectCaseSensitive(r, "pre_tokenizer"))
EDIT(e_metaspace, cJSON_ReplaceItemInObjectCaseSensitive(r, "pre_tokenizer", cJSON_Parse("{\"type\": \"Metaspace\"}")))
EDIT(e_split_only, cJSON_ReplaceItemInObjectCaseSensitive(r, "pre_tokenizer", cJSON_Parse(
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Isolated\"}]}")))
EDIT(e_split_removed, cJSON_ReplaceItemInObjectCaseSensitive(r, "pre_tokenizer", cJSON_Parse(
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Removed\"},"
    "{\"type\":\"ByteLevel\"}]}")))
EDIT(e_split_bad_regex, cJSON_ReplaceItemInObjectCaseSensitive(r, "pre_tokenizer", cJSON_Parse(
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"},"
    "{\"type\":\"ByteLevel\"}]}")))
EDIT(e_split_class_S, cJSON_ReplaceItemInObjectCaseSensitive(r, "pre_tokenizer", cJSON_Parse(
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\\\Sa]+\"},\"behavior\":\"Isolated\"},"
    "{\"type\":\"ByteLevel\"}]}")))
EDIT(e_after_bl, cJSON_ReplaceItemInObjectCaseSensitive(r, "pre_tokenizer", cJSON_Parse(
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
    "\"behavior\":\"Isolated\"}]}")))
EDIT(e_added_lstrip, cJSON_AddBoolToObject(first_added(r), "lstrip", 1))
EDIT(e_added_no_id, cJSON_DeleteItemFromObjectCaseSensitive(first_added(r), "id"))
EDIT(e_added_empty, cJSON_ReplaceItemInObjectCaseSensitive(first_added(r), "content", cJSON_CreateString("")))
EDIT(e_added_special_str, cJSON_ReplaceItemInObjectCaseSensitive(first_added(r), "special", cJSON_CreateString("yes")))
EDIT(e_added_id, cJSON_ReplaceItemInObjectCaseSensitive(first_added(r), "id", cJSON_CreateNumber(300)))
EDIT(e_added_dup, cJSON_AddItemToArray(cJSON_GetObjectItem(r, "added_tokens"), cJSON_Duplicate(first_added(r), 1)))

TEST(tok_hf_malformed_json) {
    json_case cases[] = {
        {"model not an object", e_array, DTX_ERR_FORMAT, "no \"model\" object"},
        {"no model", e_no_model, DTX_ERR_FORMAT, "no \"model\" object"},
        {"wordpiece", e_wordpiece, DTX_ERR_CONFIG, "model.type WordPiece is not supported"},
        {"dropout", e_dropout, DTX_ERR_CONFIG, "model.dropout"},
        {"subword prefix", e_prefix, DTX_ERR_CONFIG, "model.continuing_subword_prefix"},
        {"vocab array", e_vocab_array, DTX_ERR_FORMAT, "model.vocab is not an object"},
        {"vocab id fraction", e_vocab_id, DTX_ERR_FORMAT, "model.vocab: the id of 'ab'"},
        {"vocab id negative", e_vocab_neg, DTX_ERR_FORMAT, "model.vocab: the id of 'ab'"},
        {"vocab id taken", e_vocab_dup_id, DTX_ERR_FORMAT, "duplicate token id 7"},
        {"vocab not byte-level", e_vocab_char, DTX_ERR_FORMAT, "U+4E2D"},
        {"vocab missing byte", e_vocab_byte, DTX_ERR_FORMAT, "no token for the byte 0x61"},
        {"merges object", e_merges_obj, DTX_ERR_FORMAT, "model.merges is not an array"},
        {"merge one side", e_merge_one, DTX_ERR_FORMAT, "model.merges[0] is neither"},
        {"merge three sides", e_merge_three, DTX_ERR_FORMAT, "model.merges[0] is neither"},
        {"merge unknown side", e_merge_unknown, DTX_ERR_FORMAT, "model.merges[1]: 'zz' is not in model.vocab"},
        {"merge joined unknown", e_merge_joined, DTX_ERR_FORMAT, "model.merges[1]: 'c' + 'a'"},
        {"merge a number", e_merge_number, DTX_ERR_FORMAT, "model.merges[1] is neither"},
        {"normalizer", e_normalizer, DTX_ERR_CONFIG, "normalizer NFC is not supported"},
        {"no pre_tokenizer", e_no_pre, DTX_ERR_CONFIG, "pre_tokenizer is null"},
        {"metaspace", e_metaspace, DTX_ERR_CONFIG, "pre_tokenizer type Metaspace is not supported"},
        {"split without bytelevel", e_split_only, DTX_ERR_CONFIG, "pre_tokenizer has no ByteLevel"},
        {"split removed", e_split_removed, DTX_ERR_CONFIG, "pretokenizers[0].behavior Removed"},
        {"split bad regex", e_split_bad_regex, DTX_ERR_FORMAT, "does not compile"},
        {"split \\S in class", e_split_class_S, DTX_ERR_FORMAT, "\\S inside a class"},
        {"split after bytelevel", e_after_bl, DTX_ERR_CONFIG, "pretokenizers[1] (Split) comes after ByteLevel"},
        {"added lstrip", e_added_lstrip, DTX_ERR_CONFIG, "added_tokens[0] ('<|s|>'): lstrip is not false"},
        {"added no id", e_added_no_id, DTX_ERR_FORMAT, "added_tokens[0] needs an id"},
        {"added empty", e_added_empty, DTX_ERR_FORMAT, "added_tokens[0] needs an id"},
        {"added special not bool", e_added_special_str, DTX_ERR_FORMAT, "added_tokens[0]: special or normalized"},
        {"added twice", e_added_dup, DTX_ERR_FORMAT, "added_tokens[1] ('<|s|>') repeats the text of token 260"},
        {"added id out of order", e_added_id, DTX_ERR_FORMAT, "added_tokens[0] ('<|s|>') has id 300, but tokenizers gives it 260"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *j = small_json(0);
        cases[i].edit(j);
        dtx_tokenizer *t = NULL;
        dtx_status st = load_json(j, &t);
        cJSON_Delete(j);
        const char *msg = dtx_last_error();
        CHECKF(st == cases[i].st && !t, "%s: status %d (%s)", cases[i].what, (int)st, msg);
        CHECKF(strstr(msg, cases[i].want) != NULL, "%s: want '%s' in: %s", cases[i].what, cases[i].want, msg);
        CHECKF(strstr(msg, "small.tokenizer.json") != NULL, "%s: no file name in: %s", cases[i].what, msg);
        CHECKF(!strchr(msg, '\n'), "%s: message is not one line: %s", cases[i].what, msg);
        dtx_tokenizer_free(t);
    }
    /* not JSON at all, and JSON that is not an object */
    static const char *const texts[] = {"{\"model\": ", "{ nope }", "{\"model\": {\"vocab\": {\"a\": 1}}"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        const char *p = test_path("bad.tokenizer.json");
        REQUIRE(write_file(p, texts[i], strlen(texts[i])) == 0);
        dtx_tokenizer *t = NULL;
        CHECKF(dtx_tokenizer_load(&t, p) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "not a JSON object"),
               "text %zu: %s", i, dtx_last_error());
        dtx_tokenizer_free(t);
    }
    /* a tokenizer_config.json beside it that is not JSON */
    cJSON *j = small_json(0);
    REQUIRE(write_file(test_path("tokenizer_config.json"), "[1,", 3) == 0);
    dtx_tokenizer *t = NULL;
    CHECK(load_json(j, &t) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "tokenizer_config.json: not a JSON object"));
    remove(test_path("tokenizer_config.json"));
    cJSON_Delete(j);
    /* HF and SentencePiece tokenizers cannot be written in difftx's format */
    j = small_json(0);
    REQUIRE(load_json(j, &t) == DTX_OK);
    cJSON_Delete(j);
    CHECK(dtx_tokenizer_save(t, test_path("out.tok")) == DTX_ERR_ARG && strstr(dtx_last_error(), "huggingface"));
    dtx_tokenizer_free(t);
    /* a folder without either file */
    CHECK(dtx_tokenizer_load(&t, test_tmpdir()) == DTX_ERR_IO &&
          strstr(dtx_last_error(), "a folder without tokenizer.json or tokenizer.model"));
}

/* ------------------------------------------------------------ small tokenizer.model files */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} pbuf;

static void put(pbuf *p, const void *d, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = realloc(p->b, p->cap);
    }
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static void put_varint(pbuf *p, uint64_t v) {
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        put(p, &c, 1);
    } while (v);
}
static void put_len(pbuf *p, int field, const void *d, size_t n) {
    put_varint(p, (uint64_t)field << 3 | 2);
    put_varint(p, n);
    put(p, d, n);
}
static void put_int(pbuf *p, int field, int64_t v) {
    put_varint(p, (uint64_t)field << 3);
    put_varint(p, (uint64_t)v);
}
static void put_piece(pbuf *m, const char *text, float score, int type) {
    pbuf sp = {0};
    put_len(&sp, 1, text, strlen(text));
    uint32_t u;
    memcpy(&u, &score, 4);
    put_varint(&sp, 2 << 3 | 5);
    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    put(&sp, le, 4);
    if (type != 1) put_int(&sp, 3, type);
    put_len(m, 1, sp.b, sp.n);
    free(sp.b);
}

/* <unk> <s> </s>, the 256 byte pieces, then "\u2581", "a", "b", "c",
 * "ab" (-1), "bc" (-0.5), "abc" (-2), "\u2581a" (-3); BPE, byte fallback,
 * identity normalizer with a dummy prefix, extra whitespace kept. */
typedef struct {
    int model_type, byte_fallback, n_bytes, charsmap, extra_piece_type;
    const char *extra_piece;
} spm_spec;

static pbuf small_spm(spm_spec s) {
    pbuf m = {0};
    put_piece(&m, "<unk>", 0, 2);
    put_piece(&m, "<s>", 0, 3);
    put_piece(&m, "</s>", 0, 3);
    for (int b = 0; b < s.n_bytes; b++) {
        char name[16];
        snprintf(name, sizeof name, "<0x%02X>", b);
        put_piece(&m, name, 0, 6);
    }
    static const struct {
        const char *t;
        float score;
    } normal[] = {{"\xe2\x96\x81", 0}, {"a", 0}, {"b", 0}, {"c", 0}, {"ab", -1}, {"bc", -0.5f}, {"abc", -2},
                  {"\xe2\x96\x81" "a", -3}};
    for (size_t i = 0; i < sizeof normal / sizeof *normal; i++) put_piece(&m, normal[i].t, normal[i].score, 1);
    if (s.extra_piece) put_piece(&m, s.extra_piece, -9, s.extra_piece_type);
    pbuf tr = {0};
    put_int(&tr, 3, s.model_type);
    put_int(&tr, 35, s.byte_fallback);
    put_len(&m, 2, tr.b, tr.n);
    pbuf nm = {0};
    put_len(&nm, 1, "identity", 8);
    if (s.charsmap) put_len(&nm, 2, "\x01\x02\x03\x04\x05", 5);
    put_int(&nm, 4, 0);
    put_len(&m, 3, nm.b, nm.n);
    free(tr.b);
    free(nm.b);
    return m;
}

static dtx_status load_spm(const void *d, size_t n, dtx_tokenizer **t) {
    const char *p = test_path("small.model");
    *t = NULL;
    return write_file(p, d, n) == 0 ? dtx_tokenizer_load(t, p) : DTX_ERR_IO;
}

#define SPM_OK ((spm_spec){.model_type = 2, .byte_fallback = 1, .n_bytes = 256})

/* Merges by score, of any two symbols whose text is a piece: "bc" (-0.5)
 * before "ab" (-1) before "\u2581a" (-3), and "abc" from a + bc; unknown
 * characters fall back to their bytes; the dummy prefix and spaces become
 * U+2581. */
TEST(tok_spm_merge_rules) {
    pbuf m = small_spm(SPM_OK);
    dtx_tokenizer *t = NULL;
    REQUIRE(load_spm(m.b, m.n, &t) == DTX_OK);
    free(m.b);
    const int32_t U = 259, A = 260, B = 261, C = 262, AB = 263, BC = 264, ABC = 265, UA = 266;
    CHECK(dtx_tokenizer_vocab_size(t) == 267);
    CHECK(encodes_to(t, "abc", DTX_ENCODE_ORDINARY, (int32_t[]){U, ABC}, 2));
    CHECK(encodes_to(t, "ab", DTX_ENCODE_ORDINARY, (int32_t[]){U, AB}, 2));
    CHECK(encodes_to(t, "b ab", DTX_ENCODE_ORDINARY, (int32_t[]){U, B, U, AB}, 4));
    CHECK(encodes_to(t, "bbc", DTX_ENCODE_ORDINARY, (int32_t[]){U, B, BC}, 3));
    CHECK(encodes_to(t, "ac", DTX_ENCODE_ORDINARY, (int32_t[]){UA, C}, 2));
    (void)A;
    CHECK(encodes_to(t, "cab", DTX_ENCODE_ORDINARY, (int32_t[]){U, C, AB}, 3));
    /* "z" is no piece: its byte, 3 + 0x7a */
    CHECK(encodes_to(t, "az", DTX_ENCODE_ORDINARY, (int32_t[]){UA, 3 + 'z'}, 2));
    /* control pieces are text, or tokens in special mode (each side on its own, with its dummy prefix) */
    CHECK(encodes_to(t, "<s>a", DTX_ENCODE_SPECIAL, (int32_t[]){1, UA}, 2));
    CHECK(dtx_tokenizer_bos(t) == 1 && dtx_tokenizer_eos(t) == 2);
    /* invalid UTF-8 becomes U+FFFD, spelt in bytes */
    CHECK(encodes_to(t, "\xff", DTX_ENCODE_ORDINARY, (int32_t[]){U, 3 + 0xef, 3 + 0xbf, 3 + 0xbd}, 4));
    CHECK(encodes_to(t, "", DTX_ENCODE_ORDINARY, NULL, 0));
    dtx_tokenizer_free(t);
}

TEST(tok_spm_malformed) {
    static const struct {
        const char *what;
        spm_spec s;
        dtx_status st;
        const char *want;
    } cases[] = {
        {"unigram", {.model_type = 1, .byte_fallback = 1, .n_bytes = 256}, DTX_ERR_CONFIG, "model_type 1 is not supported"},
        {"charsmap", {.model_type = 2, .byte_fallback = 1, .n_bytes = 256, .charsmap = 1}, DTX_ERR_CONFIG,
         "precompiled_charsmap"},
        {"bytes without fallback", {.model_type = 2, .byte_fallback = 0, .n_bytes = 256}, DTX_ERR_FORMAT,
         "byte piece 3 '<0x00>' although byte_fallback is false"},
        {"missing byte", {.model_type = 2, .byte_fallback = 1, .n_bytes = 255}, DTX_ERR_FORMAT, "no piece <0xFF>"},
        {"duplicate piece", {.model_type = 2, .byte_fallback = 1, .n_bytes = 256, .extra_piece = "ab", .extra_piece_type = 1},
         DTX_ERR_FORMAT, "'ab' is already defined"},
        {"second unk", {.model_type = 2, .byte_fallback = 1, .n_bytes = 256, .extra_piece = "<u2>", .extra_piece_type = 2},
         DTX_ERR_FORMAT, "a second unknown piece"},
        {"bad byte piece", {.model_type = 2, .byte_fallback = 1, .n_bytes = 256, .extra_piece = "<0xZZ>", .extra_piece_type = 6},
         DTX_ERR_FORMAT, "is not <0xXX>"},
        {"bad type", {.model_type = 2, .byte_fallback = 1, .n_bytes = 256, .extra_piece = "q", .extra_piece_type = 9},
         DTX_ERR_FORMAT, "unknown type 9"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pbuf m = small_spm(cases[i].s);
        dtx_tokenizer *t = NULL;
        dtx_status st = load_spm(m.b, m.n, &t);
        free(m.b);
        const char *msg = dtx_last_error();
        CHECKF(st == cases[i].st && !t, "%s: status %d (%s)", cases[i].what, (int)st, msg);
        CHECKF(strstr(msg, cases[i].want) != NULL, "%s: want '%s' in: %s", cases[i].what, cases[i].want, msg);
        CHECKF(strstr(msg, "small.model") && !strchr(msg, '\n'), "%s: %s", cases[i].what, msg);
        dtx_tokenizer_free(t);
    }
    /* wire-level damage: truncated anywhere, a length past the end, a group */
    pbuf m = small_spm(SPM_OK);
    int refused = 0, n_cut = 0;
    for (size_t cut = 1; cut < m.n; cut += 97, n_cut++) {
        dtx_tokenizer *t = NULL;
        dtx_status st = load_spm(m.b, cut, &t);
        refused += st != DTX_OK;
        CHECKF(st == DTX_OK || (strstr(dtx_last_error(), "small.model") && !strchr(dtx_last_error(), '\n')), "cut %zu: %s",
               cut, dtx_last_error());
        dtx_tokenizer_free(t);
    }
    CHECKF(refused == n_cut, "%d of %d truncations refused", refused, n_cut);
    static const uint8_t past_end[] = {0x0a, 0x05, 0x0a, 0x7f, 'x'};
    static const uint8_t group[] = {0x0a, 0x03, 0x0a, 0x01, 'x', 0x13};
    static const uint8_t no_pieces[] = {0x12, 0x02, 0x18, 0x02};
    dtx_tokenizer *t = NULL;
    CHECK(load_spm(past_end, sizeof past_end, &t) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "not a SentencePiece model"));
    CHECK(load_spm(group, sizeof group, &t) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "byte 6"));
    /* a protobuf whose first field is no piece is not recognised as one */
    CHECK(load_spm(no_pieces, sizeof no_pieces, &t) == DTX_ERR_FORMAT);
    free(m.b);
}
