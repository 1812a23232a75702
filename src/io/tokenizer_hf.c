/* Hugging Face tokenizer.json: a byte-level BPE model (GPT-2, Llama 3,
 * Qwen 2 without its NFC normalizer), read as the tokenizers library reads
 * it and encoded as its Tokenizer.encode(text, add_special_tokens=False):
 *
 *   added tokens   matched whole first (tokenizer.c, encode_added)
 *   pre_tokenizer  Split patterns (behavior Isolated), then ByteLevel
 *                  (add_prefix_space, use_regex: the GPT-2 pattern), alone
 *                  or in a Sequence, each stage cutting the pieces of the
 *                  one before
 *   model          BPE: each piece's bytes as byte-level characters, then
 *                  the merges by rank (lowest first, leftmost among equal
 *                  ranks), or the whole piece when it is a token and
 *                  ignore_merges is set (Llama 3)
 *
 * What this file cannot reproduce exactly is refused with one line naming
 * the key: a normalizer, another model or pre-tokenizer type, BPE dropout,
 * subword prefixes or suffixes, added tokens with lstrip, rstrip or
 * single_word. The post-processor and the decoder do not change the ids
 * (the post-processor's leading special token is the BOS). */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"

#define MAX_STAGES 8

typedef struct {
    uint64_t key; /* 0: empty */
    int32_t rank, id;
} pair_slot;

struct dtx_hfbpe {
    pair_slot *pairs;
    size_t pair_cap, n_pairs;
    int ignore_merges;
    int n_stage;              /* split stages; the last may be ByteLevel's GPT-2 pattern */
    dtx_split *stage[MAX_STAGES];
    int prefix_at;            /* the stage before which ByteLevel adds a space, -1: none */
    char desc[160];           /* the pre-tokenizer, for difftx tokenizer info           */
};

void dtx_hfbpe_free(struct dtx_hfbpe *h) {
    if (!h) return;
    for (int i = 0; i < h->n_stage; i++) dtx_split_free(h->stage[i]);
    free(h->pairs);
    free(h);
}

const char *dtx_hf_describe_pattern(const struct dtx_tokenizer *t) { return t->hf ? t->hf->desc : ""; }
int64_t dtx_hf_num_merges(const struct dtx_tokenizer *t) { return t->hf ? (int64_t)t->hf->n_pairs : 0; }

/* ------------------------------------------------------------ the merge table */

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b | 1ULL << 63; }

static inline size_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static const pair_slot *pair_get(const struct dtx_hfbpe *h, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    size_t mask = h->pair_cap - 1;
    for (size_t i = pair_hash(k) & mask;; i = (i + 1) & mask) {
        if (h->pairs[i].key == k) return &h->pairs[i];
        if (h->pairs[i].key == 0) return NULL;
    }
}

/* A later merge of the same pair replaces the earlier (as tokenizers' map). */
static void pair_put(struct dtx_hfbpe *h, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t k = pair_key(a, b);
    size_t mask = h->pair_cap - 1;
    size_t i = pair_hash(k) & mask;
    while (h->pairs[i].key && h->pairs[i].key != k) i = (i + 1) & mask;
    if (!h->pairs[i].key) h->n_pairs++;
    h->pairs[i] = (pair_slot){k, rank, id};
}

/* ------------------------------------------------------------ encode */

typedef struct {
    int32_t rank;
    uint32_t pos;
    int32_t id;
} merge;

static inline int mless(const merge *a, const merge *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

DTX_DEFINE_HEAP(mheap, merge, mless)

/* tokenizers' Word::merge_all: a min-heap of (rank, position); an entry is
 * stale when its symbol is gone or the pair there no longer merges into
 * the entry's token. */
static dtx_status bpe_word(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out) {
    const struct dtx_hfbpe *h = t->hf;
    if (n == 0) return DTX_OK;
    dtx_status st = dtx_idbuf_reserve(out, 1);
    if (st) return st;
    if (h->ignore_merges || n == 1) {
        int32_t whole = n == 1 ? t->byte_id[p[0]] : dtx_bmap_get(&t->map, t->arena, p, n);
        if (whole >= 0) {
            out->ids[out->n++] = whole;
            return DTX_OK;
        }
    }
    if (n >= UINT32_MAX / 4) return dtx_fail(DTX_ERR_ARG, "a piece of %zu bytes is too long to encode", n);
    size_t hcap = 3 * n;
    uint8_t *mem = dtx_idbuf_scratch(out, hcap * sizeof(merge) + n * 3 * sizeof(int32_t) + n);
    if (!mem) return DTX_ERR_NOMEM;
    merge *heap = (merge *)mem;
    int32_t *c = (int32_t *)(mem + hcap * sizeof(merge)), *prev = c + n, *next = prev + n;
    uint8_t *alive = (uint8_t *)(next + n);
    for (size_t i = 0; i < n; i++) {
        c[i] = t->byte_id[p[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        alive[i] = 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        const pair_slot *m = pair_get(h, c[i], c[i + 1]);
        if (m) mheap_push(heap, &hn, (merge){m->rank, (uint32_t)i, m->id});
    }
    while (hn) {
        merge top = mheap_pop(heap, &hn);
        uint32_t s = top.pos;
        if (!alive[s] || next[s] < 0) continue;
        int32_t r = next[s];
        const pair_slot *m = pair_get(h, c[s], c[r]);
        if (!m || m->id != top.id) continue;
        c[s] = top.id;
        alive[r] = 0;
        next[s] = next[r];
        if (next[r] >= 0) prev[next[r]] = (int32_t)s;
        if (prev[s] >= 0 && (m = pair_get(h, c[prev[s]], c[s])))
            mheap_push(heap, &hn, (merge){m->rank, (uint32_t)prev[s], m->id});
        if (next[s] >= 0 && (m = pair_get(h, c[s], c[next[s]]))) mheap_push(heap, &hn, (merge){m->rank, s, m->id});
    }
    int64_t count = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) count++;
    if ((st = dtx_idbuf_reserve(out, count))) return st;
    for (int32_t i = 0; i >= 0; i = next[i]) out->ids[out->n++] = c[i];
    return DTX_OK;
}

typedef struct {
    const struct dtx_tokenizer *t;
    int stage;
    dtx_idbuf *out;
    dtx_status st;
} chain;

static dtx_status run_stage(const struct dtx_tokenizer *t, int stage, const uint8_t *p, size_t n, dtx_idbuf *out);

static int next_stage(const uint8_t *p, size_t n, void *ctx) {
    chain *c = ctx;
    c->st = run_stage(c->t, c->stage + 1, p, n, c->out);
    return c->st != DTX_OK;
}

/* Stage `stage` on a piece: its split, or past the last, the merges. */
static dtx_status split_or_merge(const struct dtx_tokenizer *t, int stage, const uint8_t *p, size_t n,
                                 dtx_idbuf *out) {
    const struct dtx_hfbpe *h = t->hf;
    if (stage == h->n_stage) return bpe_word(t, p, n, out);
    chain c = {t, stage, out, DTX_OK};
    int rc = dtx_split_run(h->stage[stage], p, n, next_stage, &c);
    return rc == 0 ? DTX_OK : rc < 0 ? DTX_ERR_ARG : c.st;
}

static dtx_status run_stage(const struct dtx_tokenizer *t, int stage, const uint8_t *p, size_t n, dtx_idbuf *out) {
    if (stage != t->hf->prefix_at || n == 0 || p[0] == ' ') return split_or_merge(t, stage, p, n, out);
    uint8_t *q = malloc(n + 1); /* ByteLevel's add_prefix_space */
    if (!q) return dtx_fail(DTX_ERR_NOMEM, "out of memory for a piece of %zu bytes", n + 1);
    q[0] = ' ';
    memcpy(q + 1, p, n);
    dtx_status st = split_or_merge(t, stage, q, n + 1, out);
    free(q);
    return st;
}

dtx_status dtx_hf_encode_text(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out) {
    return n ? run_stage(t, 0, p, n, out) : DTX_OK;
}

/* ------------------------------------------------------------ reading */

/* GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for
 * themselves, the other 68 for U+0100 onward, in byte order. */
static void byte_chars(uint32_t cp_of[256]) {
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        cp_of[b] = self ? (uint32_t)b : 0x100u + (uint32_t)k++;
    }
}

typedef struct {
    const char *path;
    int16_t byte_of[0x144]; /* code point -> byte, -1: none */
    uint8_t *tmp;           /* room for the longest string's bytes */
    size_t tmp_cap;
    int64_t vocab_count;    /* entries of model.vocab */
} reader;

/* A byte-level token's text -> its bytes in r->tmp; -1 (and the code
 * point in *bad, or -1 for bad UTF-8) when it is not byte-level. */
static int64_t decode_token(reader *r, const char *s, int32_t *bad) {
    size_t n = strlen(s), o = 0;
    if (n > r->tmp_cap) {
        uint8_t *p = realloc(r->tmp, n);
        if (!p) return -2;
        r->tmp = p;
        r->tmp_cap = n;
    }
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t len = dtx_utf8_char((const uint8_t *)s + i, n - i, &cp);
        if (!len || cp >= 0x144 || r->byte_of[cp] < 0) {
            *bad = len ? (int32_t)cp : -1;
            return -1;
        }
        i += len;
        r->tmp[o++] = (uint8_t)r->byte_of[cp];
    }
    return (int64_t)o;
}

static dtx_status not_byte_level(const reader *r, const char *where, const char *s, int32_t bad) {
    if (bad < 0) return dtx_fail(DTX_ERR_FORMAT, "%s: %s: the token '%s' is not UTF-8", r->path, where, dtx_show(s).s);
    return dtx_fail(DTX_ERR_FORMAT,
                    "%s: %s: the token '%s' holds U+%04X, which stands for no byte: not a byte-level BPE vocabulary",
                    r->path, where, dtx_show(s).s, (unsigned)bad);
}

static const cJSON *item(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }
static int absent(const cJSON *x) { return !x || cJSON_IsNull(x); }

/* An integer id in [0, 2^24). */
static int get_id(const cJSON *x, int64_t *id) {
    if (!cJSON_IsNumber(x)) return -1;
    double d = x->valuedouble;
    if (!(d >= 0 && d < (1 << 24)) || d != floor(d)) return -1;
    *id = (int64_t)d;
    return 0;
}

/* A boolean key: *v (dflt when absent); -1 when it is not a boolean. */
static int get_bool(const cJSON *o, const char *key, int dflt, int *v) {
    const cJSON *x = item(o, key);
    if (absent(x)) *v = dflt;
    else if (cJSON_IsBool(x)) *v = cJSON_IsTrue(x);
    else return -1;
    return 0;
}

static dtx_status read_vocab(struct dtx_tokenizer *t, reader *r, const cJSON *vocab) {
    if (!cJSON_IsObject(vocab)) return dtx_fail(DTX_ERR_FORMAT, "%s: model.vocab is not an object", r->path);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int64_t id;
        if (get_id(e, &id))
            return dtx_fail(DTX_ERR_FORMAT, "%s: model.vocab: the id of '%s' is not an integer in [0, 2^24)", r->path,
                            dtx_show(e->string).s);
        int32_t bad;
        int64_t nb = decode_token(r, e->string, &bad);
        if (nb == -2) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", r->path);
        if (nb < 0) return not_byte_level(r, "model.vocab", e->string, bad);
        dtx_status st = dtx_tok_add(t, r->tmp, (size_t)nb, id);
        r->vocab_count++;
        if (st == DTX_ERR_NOMEM) return st;
        if (st) {
            char msg[320];
            snprintf(msg, sizeof msg, "%s", dtx_last_error());
            return dtx_fail(st, "%s: model.vocab: '%s': %s", r->path, dtx_show(e->string).s, msg);
        }
    }
    return DTX_OK;
}

/* The id of a merge's side, by its text; -1 after dtx_fail. */
static int32_t merge_side(struct dtx_tokenizer *t, reader *r, int64_t i, const char *s, size_t n) {
    char buf[1024];
    if (n == 0 || n >= sizeof buf) {
        dtx_fail(DTX_ERR_FORMAT, "%s: model.merges[%lld]: a side is empty or longer than %zu bytes", r->path,
                 (long long)i, sizeof buf - 1);
        return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    int32_t bad;
    int64_t nb = decode_token(r, buf, &bad);
    if (nb == -2) {
        dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", r->path);
        return -1;
    }
    char where[64];
    snprintf(where, sizeof where, "model.merges[%lld]", (long long)i);
    if (nb < 0) {
        not_byte_level(r, where, buf, bad);
        return -1;
    }
    int32_t id = dtx_bmap_get(&t->map, t->arena, r->tmp, (size_t)nb);
    if (id < 0) dtx_fail(DTX_ERR_FORMAT, "%s: %s: '%s' is not in model.vocab", r->path, where, dtx_show(buf).s);
    return id;
}

static dtx_status read_merges(struct dtx_tokenizer *t, reader *r, const cJSON *merges) {
    struct dtx_hfbpe *h = t->hf;
    if (!cJSON_IsArray(merges)) return dtx_fail(DTX_ERR_FORMAT, "%s: model.merges is not an array", r->path);
    int64_t n = cJSON_GetArraySize(merges);
    size_t cap = 64;
    while (cap < (size_t)n * 2 + 2) cap *= 2;
    if (!(h->pairs = calloc(cap, sizeof *h->pairs))) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", r->path);
    h->pair_cap = cap;
    int64_t i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(m)) { /* "A B" */
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = m->valuestring, la = (size_t)(sp - a);
                b = sp + 1, lb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) { /* ["A", "B"] */
            a = m->child->valuestring, la = strlen(a);
            b = m->child->next->valuestring, lb = strlen(b);
        }
        if (!a)
            return dtx_fail(DTX_ERR_FORMAT, "%s: model.merges[%lld] is neither \"A B\" nor [\"A\", \"B\"]", r->path,
                            (long long)i);
        int32_t ia = merge_side(t, r, i, a, la), ib = ia < 0 ? -1 : merge_side(t, r, i, b, lb);
        if (ia < 0 || ib < 0) return dtx_last_status();
        /* the merged token: both sides' bytes */
        uint8_t cat[2048];
        size_t na = t->len[ia], nb = t->len[ib];
        if (na + nb > sizeof cat)
            return dtx_fail(DTX_ERR_FORMAT, "%s: model.merges[%lld]: the merged token is too long", r->path, (long long)i);
        memcpy(cat, t->arena + t->off[ia], na);
        memcpy(cat + na, t->arena + t->off[ib], nb);
        int32_t id = dtx_bmap_get(&t->map, t->arena, cat, na + nb);
        if (id < 0)
            return dtx_fail(DTX_ERR_FORMAT, "%s: model.merges[%lld]: '%s' + '%s' (the two sides joined) is not in "
                            "model.vocab", r->path, (long long)i, dtx_show_n(a, la).s, dtx_show_n(b, lb).s);
        pair_put(h, ia, ib, (int32_t)i, id);
        i++;
    }
    return DTX_OK;
}

static dtx_status read_model(struct dtx_tokenizer *t, reader *r, const cJSON *model) {
    if (!cJSON_IsObject(model)) return dtx_fail(DTX_ERR_FORMAT, "%s: no \"model\" object", r->path);
    const cJSON *type = item(model, "type");
    if (!absent(type) && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0))
        return dtx_fail(DTX_ERR_CONFIG, "%s: model.type %s is not supported (difftx reads BPE models)", r->path,
                        cJSON_IsString(type) ? dtx_show(type->valuestring).s : "(not a string)");
    const cJSON *x = item(model, "dropout");
    if (!absent(x) && !(cJSON_IsNumber(x) && x->valuedouble == 0))
        return dtx_fail(DTX_ERR_CONFIG, "%s: model.dropout is set: BPE-dropout encodes at random", r->path);
    static const char *const empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        x = item(model, empty_keys[k]);
        if (!absent(x) && !(cJSON_IsString(x) && x->valuestring[0] == '\0'))
            return dtx_fail(DTX_ERR_CONFIG, "%s: model.%s is set: not a byte-level BPE model", r->path, empty_keys[k]);
    }
    int im;
    if (get_bool(model, "ignore_merges", 0, &im))
        return dtx_fail(DTX_ERR_FORMAT, "%s: model.ignore_merges is not true or false", r->path);
    t->hf->ignore_merges = im;
    dtx_status st = read_vocab(t, r, item(model, "vocab"));
    if (st) return st;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            uint32_t cp_of[256];
            byte_chars(cp_of);
            return dtx_fail(DTX_ERR_FORMAT, "%s: model.vocab has no token for the byte 0x%02x (U+%04X): not a byte-level "
                            "BPE vocabulary", r->path, b, (unsigned)cp_of[b]);
        }
    return read_merges(t, r, item(model, "merges"));
}

/* A Split's pattern: {"Regex": "..."} or {"String": "..."} (a literal). */
static dtx_status add_split(struct dtx_hfbpe *h, reader *r, const cJSON *sp, const char *where) {
    const cJSON *beh = item(sp, "behavior"), *inv = item(sp, "invert"), *pat = item(sp, "pattern");
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
        return dtx_fail(DTX_ERR_CONFIG, "%s: %s.behavior %s is not supported (difftx splits Isolated)", r->path, where,
                        cJSON_IsString(beh) ? dtx_show(beh->valuestring).s : "(missing)");
    if (!absent(inv) && !cJSON_IsFalse(inv))
        return dtx_fail(DTX_ERR_CONFIG, "%s: %s.invert is not false", r->path, where);
    const cJSON *re = cJSON_IsObject(pat) ? item(pat, "Regex") : NULL, *lit = cJSON_IsObject(pat) ? item(pat, "String") : NULL;
    if (!cJSON_IsString(re) && !cJSON_IsString(lit))
        return dtx_fail(DTX_ERR_FORMAT, "%s: %s.pattern is neither {\"Regex\": ...} nor {\"String\": ...}", r->path, where);
    if (h->n_stage == MAX_STAGES)
        return dtx_fail(DTX_ERR_CONFIG, "%s: %s: more than %d split stages", r->path, where, MAX_STAGES);
    dtx_status st;
    if (cJSON_IsString(re)) {
        st = dtx_split_compile(&h->stage[h->n_stage], re->valuestring, strlen(re->valuestring));
    } else { /* a literal: every character quoted */
        size_t n = strlen(lit->valuestring);
        if (n == 0) return dtx_fail(DTX_ERR_FORMAT, "%s: %s.pattern.String is empty", r->path, where);
        char *q = malloc(n + 5);
        if (!q) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", r->path);
        snprintf(q, n + 5, "\\Q%s\\E", lit->valuestring);
        st = strstr(lit->valuestring, "\\E") ? dtx_fail(DTX_ERR_CONFIG, "%s: %s.pattern.String holds \\E", r->path, where)
                                             : dtx_split_compile(&h->stage[h->n_stage], q, n + 4);
        free(q);
    }
    if (st) {
        char msg[320];
        snprintf(msg, sizeof msg, "%s", dtx_last_error());
        return dtx_fail(st, "%s: %s: %s", r->path, where, msg);
    }
    h->n_stage++;
    return DTX_OK;
}

static dtx_status add_byte_level(struct dtx_hfbpe *h, reader *r, const cJSON *bl, const char *where) {
    int prefix, regex;
    if (get_bool(bl, "add_prefix_space", 0, &prefix) || get_bool(bl, "use_regex", 1, &regex))
        return dtx_fail(DTX_ERR_FORMAT, "%s: %s: add_prefix_space or use_regex is not true or false", r->path, where);
    h->prefix_at = prefix ? h->n_stage : -1;
    if (!regex) return DTX_OK;
    if (h->n_stage == MAX_STAGES)
        return dtx_fail(DTX_ERR_CONFIG, "%s: %s: more than %d split stages", r->path, where, MAX_STAGES);
    dtx_status st = dtx_split_compile(&h->stage[h->n_stage], DTX_PATTERN_GPT2, strlen(DTX_PATTERN_GPT2));
    if (st) return st;
    h->n_stage++;
    return DTX_OK;
}

static const char *type_of(const cJSON *o) {
    const cJSON *ty = item(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static dtx_status read_pre_tokenizer(struct dtx_hfbpe *h, reader *r, const cJSON *pre) {
    h->prefix_at = -1;
    if (absent(pre))
        return dtx_fail(DTX_ERR_CONFIG, "%s: pre_tokenizer is null: difftx reads byte-level BPE (a ByteLevel pre_tokenizer)",
                        r->path);
    const char *ty = type_of(pre);
    const cJSON *list = NULL;
    if (ty && strcmp(ty, "Sequence") == 0) {
        list = item(pre, "pretokenizers");
        if (!cJSON_IsArray(list))
            return dtx_fail(DTX_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers is not an array", r->path);
    }
    int n = list ? cJSON_GetArraySize(list) : 1, have_bl = 0;
    char *d = h->desc;
    size_t dl = sizeof h->desc, o = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *p = list ? cJSON_GetArrayItem(list, i) : pre;
        char where[64];
        if (list) snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%d]", i);
        else snprintf(where, sizeof where, "pre_tokenizer");
        const char *pt = cJSON_IsObject(p) ? type_of(p) : NULL;
        if (!pt) return dtx_fail(DTX_ERR_FORMAT, "%s: %s has no type", r->path, where);
        if (have_bl)
            return dtx_fail(DTX_ERR_CONFIG, "%s: %s (%s) comes after ByteLevel: not supported", r->path, where,
                            dtx_show(pt).s);
        dtx_status st;
        if (strcmp(pt, "Split") == 0) {
            if ((st = add_split(h, r, p, where))) return st;
            o += (size_t)snprintf(d + o, o < dl ? dl - o : 0, "%sSplit", o ? " + " : "");
        } else if (strcmp(pt, "ByteLevel") == 0) {
            int before = h->n_stage;
            if ((st = add_byte_level(h, r, p, where))) return st;
            have_bl = 1;
            o += (size_t)snprintf(d + o, o < dl ? dl - o : 0, "%sByteLevel%s%s", o ? " + " : "",
                                  h->n_stage > before ? " (GPT-2 pattern)" : "", h->prefix_at >= 0 ? " with a prefix space" : "");
        } else {
            return dtx_fail(DTX_ERR_CONFIG, "%s: %s type %s is not supported (difftx reads Split and ByteLevel)", r->path,
                            where, dtx_show(pt).s);
        }
        if (o >= dl) o = dl - 1;
    }
    if (!have_bl)
        return dtx_fail(DTX_ERR_CONFIG, "%s: pre_tokenizer has no ByteLevel: difftx reads byte-level BPE", r->path);
    return DTX_OK;
}

/* The id tokenizers gives an added token as it loads the file (the file's
 * id is only checked there): the vocabulary's id of the same text, else one
 * past the largest added id, or the vocabulary's size for the first. */
static int64_t tokenizers_id(struct dtx_tokenizer *t, reader *r, const char *content, int64_t max_added) {
    int32_t bad;
    int64_t nb = decode_token(r, content, &bad);
    if (nb == -2) return -2;
    int32_t in_vocab = nb > 0 ? dtx_bmap_get(&t->map, t->arena, r->tmp, (size_t)nb) : -1;
    if (in_vocab >= 0) return in_vocab;
    return max_added >= r->vocab_count ? max_added + 1 : r->vocab_count;
}

static dtx_status read_added(struct dtx_tokenizer *t, reader *r, const cJSON *added) {
    if (absent(added)) return DTX_OK;
    if (!cJSON_IsArray(added)) return dtx_fail(DTX_ERR_FORMAT, "%s: added_tokens is not an array", r->path);
    int i = 0;
    int64_t max_added = -1;
    const cJSON *a;
    cJSON_ArrayForEach(a, added) {
        int64_t id;
        const cJSON *content = cJSON_IsObject(a) ? item(a, "content") : NULL;
        if (!content || get_id(item(a, "id"), &id) || !cJSON_IsString(content) || !content->valuestring[0])
            return dtx_fail(DTX_ERR_FORMAT, "%s: added_tokens[%d] needs an id in [0, 2^24) and a non-empty content",
                            r->path, i);
        int special, normalized;
        if (get_bool(a, "special", 0, &special) || get_bool(a, "normalized", !special, &normalized))
            return dtx_fail(DTX_ERR_FORMAT, "%s: added_tokens[%d]: special or normalized is not true or false", r->path, i);
        static const char *const unsupported[] = {"single_word", "lstrip", "rstrip"};
        for (int k = 0; k < 3; k++) {
            int v;
            if (get_bool(a, unsupported[k], 0, &v) || v)
                return dtx_fail(DTX_ERR_CONFIG, "%s: added_tokens[%d] ('%s'): %s is not false (not supported)", r->path,
                                i, dtx_show(content->valuestring).s, unsupported[k]);
        }
        int32_t twin = dtx_tokenizer_token_id(t, content->valuestring);
        if (twin >= 0)
            return dtx_fail(DTX_ERR_FORMAT, "%s: added_tokens[%d] ('%s') repeats the text of token %ld", r->path, i,
                            dtx_show(content->valuestring).s, (long)twin);
        int64_t given = tokenizers_id(t, r, content->valuestring, max_added);
        if (given == -2) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", r->path);
        if (given != id)
            return dtx_fail(DTX_ERR_FORMAT, "%s: added_tokens[%d] ('%s') has id %lld, but tokenizers gives it %lld "
                            "(the vocabulary's id of its text, else the next after the vocabulary and the added tokens "
                            "before it)", r->path, i, dtx_show(content->valuestring).s, (long long)id, (long long)given);
        if (id > max_added) max_added = id;
        const uint8_t *s = (const uint8_t *)content->valuestring;
        size_t n = strlen(content->valuestring);
        dtx_status st = dtx_tok_set(t, id, s, n, special ? 2 : 1, 1);
        if (!st) st = dtx_tok_add_matched(t, s, n, id, special, normalized);
        if (st == DTX_ERR_NOMEM) return st;
        if (st) {
            char msg[320];
            snprintf(msg, sizeof msg, "%s", dtx_last_error());
            return dtx_fail(st, "%s: added_tokens[%d]: %s", r->path, i, msg);
        }
        i++;
    }
    return DTX_OK;
}

/* The post-processor's leading special token (TemplateProcessing's
 * "single": [{"SpecialToken": {"id": "<|begin_of_text|>"}}, ...]), alone or
 * in a Sequence: the BOS that add_special_tokens=True would put first. */
static const char *template_bos(const cJSON *pp) {
    if (!cJSON_IsObject(pp)) return NULL;
    const char *ty = type_of(pp);
    if (ty && strcmp(ty, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, item(pp, "processors")) {
            const char *b = template_bos(e);
            if (b) return b;
        }
        return NULL;
    }
    if (!ty || strcmp(ty, "TemplateProcessing") != 0) return NULL;
    const cJSON *single = item(pp, "single");
    const cJSON *first = cJSON_IsArray(single) ? single->child : NULL;
    const cJSON *st = first ? item(first, "SpecialToken") : NULL;
    const cJSON *id = st ? item(st, "id") : NULL;
    return cJSON_IsString(id) ? id->valuestring : NULL;
}

/* bos_token / eos_token of tokenizer_config.json: a string or
 * {"content": ...}. */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *x = cfg ? item(cfg, key) : NULL;
    if (cJSON_IsObject(x)) x = item(x, "content");
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static dtx_status bos_eos(struct dtx_tokenizer *t, reader *r, const cJSON *root) {
    char *copy = strdup(r->path);
    if (!copy) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    char cfg_path[4200];
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dirname(copy));
    free(copy);
    cJSON *cfg = NULL;
    FILE *f = fopen(cfg_path, "rb");
    if (f) {
        fclose(f);
        char *text = NULL;
        size_t len = 0;
        dtx_status st = dtx_read_file(cfg_path, &text, &len);
        if (st) return st;
        cfg = cJSON_ParseWithLength(text, len);
        free(text);
        if (!cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            return dtx_fail(DTX_ERR_FORMAT, "%s: not a JSON object", cfg_path);
        }
    }
    const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
    if (!bos) bos = template_bos(item(root, "post_processor"));
    t->bos = bos ? dtx_tokenizer_token_id(t, bos) : -1;
    t->eos = eos ? dtx_tokenizer_token_id(t, eos) : -1;
    static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|im_end|>", "<|eos|>"};
    for (size_t k = 0; !eos && t->eos < 0 && k < sizeof eos_names / sizeof *eos_names; k++)
        t->eos = dtx_tokenizer_token_id(t, eos_names[k]);
    cJSON_Delete(cfg);
    return DTX_OK;
}

dtx_status dtx_hf_tokenizer_parse(struct dtx_tokenizer *t, const char *path, const char *buf, size_t len) {
    t->source = DTX_TOKSRC_HF;
    if (!(t->hf = calloc(1, sizeof *t->hf))) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    cJSON *root = cJSON_ParseWithLength(buf, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dtx_fail(DTX_ERR_FORMAT, "%s: not a JSON object (a tokenizer.json is one)", path);
    }
    reader r = {.path = path};
    for (int i = 0; i < 0x144; i++) r.byte_of[i] = -1;
    uint32_t cp_of[256];
    byte_chars(cp_of);
    for (int b = 0; b < 256; b++) r.byte_of[cp_of[b]] = (int16_t)b;
    dtx_status st = DTX_OK;
    const cJSON *norm = item(root, "normalizer");
    if (!absent(norm)) {
        const char *ty = cJSON_IsObject(norm) ? type_of(norm) : NULL;
        const cJSON *list = ty && strcmp(ty, "Sequence") == 0 ? item(norm, "normalizers") : NULL;
        if (!(cJSON_IsArray(list) && cJSON_GetArraySize(list) == 0))
            st = dtx_fail(DTX_ERR_CONFIG,
                          "%s: normalizer %s is not supported (difftx reads tokenizers without a normalizer: GPT-2, "
                          "Llama 3)", path, ty ? dtx_show(ty).s : "(no type)");
    }
    if (!st) st = read_model(t, &r, item(root, "model"));
    if (!st) st = read_pre_tokenizer(t->hf, &r, item(root, "pre_tokenizer"));
    if (!st) st = read_added(t, &r, item(root, "added_tokens"));
    if (!st) st = bos_eos(t, &r, root);
    free(r.tmp);
    cJSON_Delete(root);
    return st;
}
