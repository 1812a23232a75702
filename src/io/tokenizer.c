/* The tokenizer object: vocabulary tables, encode (added tokens, then
 * tiktoken's algorithm, or a tokenizer.json's or SentencePiece's) and
 * decode. File formats are in tokenizer_file.c, tokenizer_hf.c and
 * tokenizer_spm.c, training in tokenizer_train.c, pre-tokenisation in
 * tokenizer_split.c. */
#include "io/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define MAX_VOCAB (1 << 24)
#define NO_RANK INT32_MAX

/* ------------------------------------------------------------ byte-string table */

uint32_t dtx_bytes_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x94d049bb133111ebULL;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    uint32_t r = (uint32_t)h;
    return r ? r : 1;
}

int dtx_bmap_init(dtx_bmap *m, size_t cap_hint) {
    size_t cap = 64;
    while (cap < cap_hint * 2) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = m->slots ? cap : 0;
    m->count = 0;
    if (!m->slots) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory for a table of %zu tokens", cap_hint);
        return -1;
    }
    return 0;
}

void dtx_bmap_free(dtx_bmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static inline uint64_t key_head(const uint8_t *p, size_t n) {
    uint64_t w = 0;
    memcpy(&w, p, n < 8 ? n : 8);
    return w;
}

static inline int slot_is(const dtx_bmap_slot *s, const uint8_t *arena, uint32_t h, uint64_t head, const uint8_t *p,
                          size_t n) {
    return s->hash == h && s->len == n && s->head == head && (n <= 8 || memcmp(arena + s->off + 8, p + 8, n - 8) == 0);
}

int32_t dtx_bmap_get(const dtx_bmap *m, const uint8_t *arena, const uint8_t *p, size_t n) {
    uint32_t h = dtx_bytes_hash(p, n);
    uint64_t head = key_head(p, n);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const dtx_bmap_slot *s = &m->slots[i];
        if (s->hash == 0) return -1;
        if (slot_is(s, arena, h, head, p, n)) return s->value;
    }
}

static void bmap_insert_slot(dtx_bmap_slot *slots, size_t cap, const dtx_bmap_slot *in) {
    size_t mask = cap - 1;
    size_t i = in->hash & mask;
    while (slots[i].hash) i = (i + 1) & mask;
    slots[i] = *in;
}

int32_t dtx_bmap_put(dtx_bmap *m, const uint8_t *arena, uint32_t off, size_t n, int32_t value) {
    const uint8_t *p = arena + off;
    uint32_t h = dtx_bytes_hash(p, n);
    uint64_t head = key_head(p, n);
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    for (;; i = (i + 1) & mask) {
        const dtx_bmap_slot *s = &m->slots[i];
        if (s->hash == 0) break;
        if (slot_is(s, arena, h, head, p, n)) return s->value;
    }
    if ((m->count + 1) * 2 > m->cap) { /* keep the load at most 1/2 */
        size_t ncap = m->cap * 2;
        dtx_bmap_slot *ns = calloc(ncap, sizeof *ns);
        if (!ns) {
            dtx_fail(DTX_ERR_NOMEM, "out of memory growing a table to %zu entries", ncap);
            return -2;
        }
        for (size_t j = 0; j < m->cap; j++)
            if (m->slots[j].hash) bmap_insert_slot(ns, ncap, &m->slots[j]);
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    dtx_bmap_slot s = {.head = head, .hash = h, .value = value, .len = (uint32_t)n, .off = off};
    bmap_insert_slot(m->slots, m->cap, &s);
    m->count++;
    return -1;
}

/* ------------------------------------------------------------ UTF-8 */

size_t dtx_utf8_char(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1fu : len == 3 ? c & 0x0fu : c & 0x07u;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[k] & 0x3fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (len > 1 && (v < min_cp[len] || v > 0x10ffff || (v >= 0xd800 && v < 0xe000))) return 0;
    *cp = v;
    return len;
}

/* ------------------------------------------------------------ building */

dtx_status dtx_tok_new(struct dtx_tokenizer **out, int64_t vocab_cap, size_t arena_hint) {
    *out = NULL;
    struct dtx_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return dtx_fail(DTX_ERR_NOMEM, "out of memory for a tokenizer");
    if (vocab_cap < 256) vocab_cap = 256;
    if (vocab_cap > MAX_VOCAB) vocab_cap = MAX_VOCAB;
    if (arena_hint < 1024) arena_hint = 1024;
    t->off = calloc((size_t)vocab_cap, sizeof *t->off);
    t->len = calloc((size_t)vocab_cap, sizeof *t->len);
    t->kind = calloc((size_t)vocab_cap, 1);
    t->arena = malloc(arena_hint);
    t->arena_cap = arena_hint;
    t->vocab_size = 0;
    if (!t->off || !t->len || !t->kind || !t->arena || dtx_bmap_init(&t->map, (size_t)vocab_cap) != 0) {
        dtx_tokenizer_free(t);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for a tokenizer of %lld tokens", (long long)vocab_cap);
    }
    t->n_ranks = 0;
    t->arena_len = 0;
    t->vocab_cap = vocab_cap;
    t->bos = t->eos = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    *out = t;
    return DTX_OK;
}

static dtx_status grow_ids(struct dtx_tokenizer *t, int64_t id) {
    if (id < t->vocab_cap) return DTX_OK;
    int64_t cap = t->vocab_cap;
    while (cap <= id) cap *= 2;
    if (cap > MAX_VOCAB) cap = MAX_VOCAB;
    uint32_t *o = realloc(t->off, (size_t)cap * sizeof *o);
    if (o) t->off = o;
    uint32_t *l = realloc(t->len, (size_t)cap * sizeof *l);
    if (l) t->len = l;
    uint8_t *k = realloc(t->kind, (size_t)cap);
    if (k) t->kind = k;
    if (!o || !l || !k) return dtx_fail(DTX_ERR_NOMEM, "out of memory for %lld token ids", (long long)cap);
    memset(t->kind + t->vocab_cap, 0, (size_t)(cap - t->vocab_cap));
    t->vocab_cap = cap;
    return DTX_OK;
}

static dtx_status arena_append(struct dtx_tokenizer *t, const uint8_t *p, size_t n, uint32_t *off) {
    if (t->arena_len + n > UINT32_MAX) return dtx_fail(DTX_ERR_FORMAT, "token bytes exceed 4 GiB in all");
    if (t->arena_len + n > t->arena_cap) {
        size_t cap = t->arena_cap;
        while (cap < t->arena_len + n) cap *= 2;
        uint8_t *a = realloc(t->arena, cap);
        if (!a) return dtx_fail(DTX_ERR_NOMEM, "out of memory for %zu bytes of tokens", cap);
        t->arena = a;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, p, n);
    *off = (uint32_t)t->arena_len;
    t->arena_len += n;
    return DTX_OK;
}

static dtx_status check_id(struct dtx_tokenizer *t, int64_t id) {
    if (id < 0 || id >= MAX_VOCAB)
        return dtx_fail(DTX_ERR_FORMAT, "token id %lld out of range [0, %d)", (long long)id, MAX_VOCAB);
    dtx_status st = grow_ids(t, id);
    if (st) return st;
    if (t->kind[id]) return dtx_fail(DTX_ERR_FORMAT, "duplicate token id %lld", (long long)id);
    return DTX_OK;
}

dtx_status dtx_tok_set(struct dtx_tokenizer *t, int64_t id, const uint8_t *bytes, size_t n, int kind, int replace) {
    if (n == 0) return dtx_fail(DTX_ERR_FORMAT, "token %lld is empty", (long long)id);
    if (n > UINT32_MAX / 2) return dtx_fail(DTX_ERR_FORMAT, "token %lld is too long", (long long)id);
    dtx_status st;
    int again = replace && id >= 0 && id < t->vocab_size && t->kind[id];
    if (!again && (st = check_id(t, id))) return st;
    uint32_t off = 0;
    if ((st = arena_append(t, bytes, n, &off))) return st;
    if (again && t->kind[id] == 1) t->n_ranks--;
    t->off[id] = off;
    t->len[id] = (uint32_t)n;
    t->kind[id] = (uint8_t)kind;
    if (kind == 1) t->n_ranks++;
    if (id + 1 > t->vocab_size) t->vocab_size = id + 1;
    return DTX_OK;
}

dtx_status dtx_tok_add(struct dtx_tokenizer *t, const uint8_t *bytes, size_t n, int64_t id) {
    dtx_status st = dtx_tok_set(t, id, bytes, n, 1, 0);
    if (st) return st;
    int32_t prev = dtx_bmap_put(&t->map, t->arena, t->off[id], n, (int32_t)id);
    if (prev == -2) return DTX_ERR_NOMEM;
    if (prev >= 0) {
        t->arena_len -= n;
        t->kind[id] = 0;
        t->n_ranks--;
        return dtx_fail(DTX_ERR_FORMAT, "token %lld has the same bytes as token %lld", (long long)id, (long long)prev);
    }
    if (n == 1) t->byte_id[bytes[0]] = (int32_t)id;
    return DTX_OK;
}

dtx_status dtx_tok_add_matched(struct dtx_tokenizer *t, const uint8_t *bytes, size_t n, int64_t id, int special,
                               int normalized) {
    if (n == 0 || memchr(bytes, '\0', n))
        return dtx_fail(DTX_ERR_FORMAT, "added token %lld must be 1 or more bytes without NUL", (long long)id);
    for (int i = 0; i < t->n_special; i++)
        if (t->special[i].len == n && memcmp(t->special[i].name, bytes, n) == 0)
            return dtx_fail(DTX_ERR_FORMAT, "token %lld has the same text as token %ld", (long long)id,
                            (long)t->special[i].id);
    if (t->n_special == t->cap_special) {
        int cap = t->cap_special ? 2 * t->cap_special : 16;
        dtx_special *s = realloc(t->special, (size_t)cap * sizeof *s);
        if (!s) return dtx_fail(DTX_ERR_NOMEM, "out of memory for %d added tokens", cap);
        t->special = s;
        t->cap_special = cap;
    }
    char *name = malloc(n + 1);
    if (!name) return dtx_fail(DTX_ERR_NOMEM, "out of memory for an added token");
    memcpy(name, bytes, n);
    name[n] = '\0';
    t->special[t->n_special++] =
        (dtx_special){.name = name, .len = n, .id = (int32_t)id, .special = (uint8_t)!!special,
                      .normalized = (uint8_t)!!normalized};
    return DTX_OK;
}

dtx_status dtx_tok_add_special(struct dtx_tokenizer *t, const char *name, int64_t id) {
    size_t n = strlen(name);
    if (n == 0 || n > DTX_TOK_SPECIAL_MAXLEN)
        return dtx_fail(DTX_ERR_FORMAT, "special token '%.64s' must be 1 to %d bytes", name, DTX_TOK_SPECIAL_MAXLEN);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e)
            return dtx_fail(DTX_ERR_FORMAT, "special token '%.64s' must be printable ASCII without spaces", name);
    if (t->n_special == DTX_TOK_MAX_SPECIAL)
        return dtx_fail(DTX_ERR_FORMAT, "more than %d special tokens", DTX_TOK_MAX_SPECIAL);
    for (int i = 0; i < t->n_special; i++)
        if (strcmp(t->special[i].name, name) == 0) return dtx_fail(DTX_ERR_FORMAT, "duplicate special token %s", name);
    dtx_status st = dtx_tok_set(t, id, (const uint8_t *)name, n, 2, 0);
    return st ? st : dtx_tok_add_matched(t, (const uint8_t *)name, n, id, 1, 0);
}

/* The conventional names of our format's and tiktoken's BOS and EOS. */
static int32_t find_special(const struct dtx_tokenizer *t, const char *const *names) {
    for (; *names; names++) {
        int32_t id = dtx_tokenizer_token_id(t, *names);
        if (id >= 0) return id;
    }
    return -1;
}

dtx_status dtx_tok_finish(struct dtx_tokenizer *t) {
    /* SentencePiece without byte fallback emits <unk> for what it cannot
     * spell; every other kind needs every byte. */
    if (t->source != DTX_TOKSRC_SPM)
        for (int b = 0; b < 256; b++)
            if (t->byte_id[b] < 0)
                return dtx_fail(DTX_ERR_FORMAT, "no token for the single byte 0x%02x, so some text could not be encoded",
                                b);
    if (t->source == DTX_TOKSRC_DIFFTX || t->source == DTX_TOKSRC_TIKTOKEN) {
        static const char *const bos[] = {"<|bos|>", NULL};
        static const char *const eos[] = {"<|eos|>", "<|endoftext|>", NULL};
        t->bos = find_special(t, bos);
        t->eos = find_special(t, eos);
        if (!t->split) return dtx_split_new(&t->split);
    }
    return DTX_OK;
}

void dtx_tokenizer_free(dtx_tokenizer *t) {
    if (!t) return;
    free(t->off);
    free(t->len);
    free(t->kind);
    free(t->arena);
    dtx_bmap_free(&t->map);
    dtx_split_free(t->split);
    for (int i = 0; i < t->n_special; i++) free(t->special[i].name);
    free(t->special);
    dtx_hfbpe_free(t->hf);
    dtx_spm_free(t->spm);
    free(t);
}

/* ------------------------------------------------------------ encode */

void dtx_idbuf_free(dtx_idbuf *b) {
    free(b->ids);
    free(b->scratch);
    memset(b, 0, sizeof *b);
}

dtx_status dtx_idbuf_reserve(dtx_idbuf *b, int64_t extra) {
    if (b->n + extra <= b->cap) return DTX_OK;
    int64_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    int32_t *ids = realloc(b->ids, (size_t)cap * sizeof *ids);
    if (!ids) return dtx_fail(DTX_ERR_NOMEM, "out of memory for %lld token ids", (long long)cap);
    b->ids = ids;
    b->cap = cap;
    return DTX_OK;
}

dtx_status dtx_idbuf_append(dtx_idbuf *b, const int32_t *ids, int64_t n) {
    dtx_status st = dtx_idbuf_reserve(b, n);
    if (st) return st;
    memcpy(b->ids + b->n, ids, (size_t)n * sizeof *ids);
    b->n += n;
    return DTX_OK;
}

void *dtx_idbuf_scratch(dtx_idbuf *b, size_t bytes) {
    if (bytes > b->scratch_cap) {
        void *p = realloc(b->scratch, bytes);
        if (!p) {
            dtx_fail(DTX_ERR_NOMEM, "out of memory for a piece of %zu bytes", bytes);
            return NULL;
        }
        b->scratch = p;
        b->scratch_cap = bytes;
    }
    return b->scratch;
}

static inline int32_t rank_of(const struct dtx_tokenizer *t, const uint8_t *p, size_t a, size_t b) {
    int32_t r = dtx_bmap_get(&t->map, t->arena, p + a, b - a);
    return r < 0 ? NO_RANK : r;
}

/* tiktoken's _byte_pair_merge, literally: parts[i] = (start, rank of the pair
 * starting at part i); merge the leftmost lowest-ranked pair until none has
 * a rank. O(n^2) per piece, used for short pieces. */
typedef struct {
    uint32_t start;
    int32_t rank;
} part;

static dtx_status merge_simple(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out) {
    part *parts = dtx_idbuf_scratch(out, (n + 1) * sizeof *parts);
    if (!parts) return DTX_ERR_NOMEM;
    size_t m = n + 1;
    for (size_t i = 0; i + 1 < n; i++) parts[i] = (part){(uint32_t)i, rank_of(t, p, i, i + 2)};
    parts[n - 1] = (part){(uint32_t)(n - 1), NO_RANK};
    parts[n] = (part){(uint32_t)n, NO_RANK};
    for (;;) {
        int32_t best = NO_RANK;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (parts[i].rank < best) best = parts[i].rank, bi = i;
        if (best == NO_RANK) break;
        if (bi > 0) parts[bi - 1].rank = bi + 2 < m ? rank_of(t, p, parts[bi - 1].start, parts[bi + 2].start) : NO_RANK;
        parts[bi].rank = bi + 3 < m ? rank_of(t, p, parts[bi].start, parts[bi + 3].start) : NO_RANK;
        memmove(&parts[bi + 1], &parts[bi + 2], (m - bi - 2) * sizeof *parts);
        m--;
    }
    dtx_status st = dtx_idbuf_reserve(out, (int64_t)m - 1);
    if (st) return st;
    for (size_t i = 0; i + 1 < m; i++) out->ids[out->n++] = rank_of(t, p, parts[i].start, parts[i + 1].start);
    return DTX_OK;
}

/* The same merge order with a heap keyed (rank, start) and a linked list of
 * parts: O(n log n), for long pieces (a megabyte of one letter). A part is
 * named by its start offset, which never changes; nxt[s] is its end. */
typedef struct {
    int32_t rank;
    uint32_t start, end; /* the pair's span, to recognise stale entries */
} hentry;

static inline int hless(const hentry *a, const hentry *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->start < b->start);
}

DTX_DEFINE_HEAP(hheap, hentry, hless)

static dtx_status merge_heap(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out) {
    if (n >= UINT32_MAX / 4) return dtx_fail(DTX_ERR_ARG, "a piece of %zu bytes is too long to encode", n);
    size_t hcap = 3 * n;
    size_t bytes = hcap * sizeof(hentry) + (n + 1) * 2 * sizeof(uint32_t) + (n + 1);
    uint8_t *mem = dtx_idbuf_scratch(out, bytes);
    if (!mem) return DTX_ERR_NOMEM;
    hentry *h = (hentry *)mem;
    uint32_t *nxt = (uint32_t *)(mem + hcap * sizeof(hentry));
    uint32_t *prv = nxt + (n + 1);
    uint8_t *alive = (uint8_t *)(prv + (n + 1));
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        nxt[i] = (uint32_t)(i + 1);
        prv[i] = (uint32_t)(i - 1); /* UINT32_MAX for the first */
        alive[i] = 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = rank_of(t, p, i, i + 2);
        if (r != NO_RANK) hheap_push(h, &hn, (hentry){r, (uint32_t)i, (uint32_t)(i + 2)});
    }
    while (hn) {
        hentry e = hheap_pop(h, &hn);
        uint32_t s = e.start;
        if (!alive[s] || nxt[s] >= n || nxt[nxt[s]] != e.end) continue; /* stale */
        uint32_t r = nxt[s];
        alive[r] = 0;
        nxt[s] = nxt[r];
        if (nxt[r] < n) prv[nxt[r]] = s;
        if (s > 0) {
            uint32_t q = prv[s];
            int32_t rk = rank_of(t, p, q, nxt[s]);
            if (rk != NO_RANK) hheap_push(h, &hn, (hentry){rk, q, nxt[s]});
        }
        if (nxt[s] < n) {
            int32_t rk = rank_of(t, p, s, nxt[nxt[s]]);
            if (rk != NO_RANK) hheap_push(h, &hn, (hentry){rk, s, nxt[nxt[s]]});
        }
    }
    int64_t count = 0;
    for (size_t s = 0; s < n; s = nxt[s]) count++;
    dtx_status st = dtx_idbuf_reserve(out, count);
    if (st) return st;
    for (size_t s = 0; s < n; s = nxt[s]) out->ids[out->n++] = rank_of(t, p, s, nxt[s]);
    return DTX_OK;
}

int dtx_tok_merge_method = 0; /* tests: 0 automatic, 1 always simple, 2 always heap */

dtx_status dtx_tok_encode_piece(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out) {
    if (n == 0) return DTX_OK;
    dtx_status st = dtx_idbuf_reserve(out, 1);
    if (st) return st;
    if (n == 1) {
        out->ids[out->n++] = t->byte_id[p[0]];
        return DTX_OK;
    }
    int32_t whole = dtx_bmap_get(&t->map, t->arena, p, n);
    if (whole >= 0) {
        out->ids[out->n++] = whole;
        return DTX_OK;
    }
    int heap = dtx_tok_merge_method ? dtx_tok_merge_method == 2 : n > 96;
    return heap ? merge_heap(t, p, n, out) : merge_simple(t, p, n, out);
}

typedef struct {
    const struct dtx_tokenizer *t;
    dtx_idbuf *buf;
    dtx_status st;
} enc_ctx;

static int on_piece(const uint8_t *p, size_t n, void *ctx) {
    enc_ctx *c = ctx;
    c->st = dtx_tok_encode_piece(c->t, p, n, c->buf);
    return c->st != DTX_OK;
}

/* Text with no added token in it: split, then each piece merged. */
static dtx_status encode_text(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *buf) {
    if (n == 0) return DTX_OK;
    if (t->hf) return dtx_hf_encode_text(t, p, n, buf);
    if (t->spm) return dtx_spm_encode_text(t, p, n, buf);
    enc_ctx c = {t, buf, DTX_OK};
    int rc = dtx_split_run(t->split, p, n, on_piece, &c);
    return rc == 0 ? DTX_OK : rc < 0 ? DTX_ERR_ARG : c.st;
}

/* Tokens matched as a whole before anything else (Hugging Face's
 * AddedVocabulary): pass 0 finds the added tokens with normalized = 0 in the
 * text, leftmost first and the longest there (aho-corasick's LeftmostLongest,
 * also tiktoken's allowed_special="all"); pass 1 finds the normalized ones
 * in what pass 0 left between its matches; what is left then is text.
 * Specials take part only in DTX_ENCODE_SPECIAL mode. next_at[k] caches
 * where token k next occurs in the current segment (SIZE_MAX: not searched
 * yet; len: nowhere); the passes use disjoint k. */
typedef struct {
    const struct dtx_tokenizer *t;
    dtx_encode_mode mode;
    size_t *next_at;
    dtx_idbuf *buf;
} added_ctx;

static int takes_part(const added_ctx *c, const dtx_special *s, int pass) {
    return s->normalized == pass && (!s->special || c->mode == DTX_ENCODE_SPECIAL);
}

static dtx_status encode_added(added_ctx *c, const uint8_t *text, size_t len, int pass) {
    const struct dtx_tokenizer *t = c->t;
    if (pass == 2) return encode_text(t, text, len, c->buf);
    for (int k = 0; k < t->n_special; k++)
        if (takes_part(c, &t->special[k], pass)) c->next_at[k] = SIZE_MAX;
    size_t pos = 0;
    for (;;) {
        const dtx_special *best = NULL;
        size_t best_at = len;
        for (int k = 0; k < t->n_special; k++) {
            const dtx_special *s = &t->special[k];
            if (!takes_part(c, s, pass)) continue;
            size_t a = c->next_at[k];
            if (a == SIZE_MAX || a < pos) {
                const uint8_t *f = pos < len ? memmem(text + pos, len - pos, s->name, s->len) : NULL;
                a = c->next_at[k] = f ? (size_t)(f - text) : len;
            }
            if (a == len) continue;
            if (a < best_at || (a == best_at && s->len > best->len)) best = s, best_at = a;
        }
        dtx_status st = encode_added(c, text + pos, best_at - pos, pass + 1);
        if (st || !best) return st;
        if ((st = dtx_idbuf_reserve(c->buf, 1))) return st;
        c->buf->ids[c->buf->n++] = best->id;
        pos = best_at + best->len;
    }
}

dtx_status dtx_tokenizer_encode(const dtx_tokenizer *t, const char *text, size_t len, dtx_encode_mode mode,
                                int32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    if (!text && len) return dtx_fail(DTX_ERR_ARG, "encode: NULL text of length %zu", len);
    if (mode != DTX_ENCODE_ORDINARY && mode != DTX_ENCODE_SPECIAL)
        return dtx_fail(DTX_ERR_ARG, "encode: unknown mode %d", (int)mode);
    dtx_idbuf buf = {0};
    dtx_status st = dtx_idbuf_reserve(&buf, (int64_t)(len / 4 + 16));
    size_t *next_at = NULL;
    if (st == DTX_OK && t->n_special > 0 && !(next_at = malloc((size_t)t->n_special * sizeof *next_at)))
        st = dtx_fail(DTX_ERR_NOMEM, "encode: out of memory");
    if (st == DTX_OK) {
        added_ctx c = {t, mode, next_at, &buf};
        st = encode_added(&c, (const uint8_t *)text, len, 0);
    }
    free(next_at);
    free(buf.scratch);
    if (st) {
        free(buf.ids);
        return st;
    }
    *ids = buf.ids;
    *n = buf.n;
    return DTX_OK;
}

/* ------------------------------------------------------------ decode, queries */

dtx_status dtx_tokenizer_decode(const dtx_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    if (n < 0 || (n && !ids)) return dtx_fail(DTX_ERR_ARG, "decode: bad id list (n = %lld)", (long long)n);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size || !t->kind[id])
            return dtx_fail(DTX_ERR_ARG, "decode: token %lld has id %ld, which is no token of this vocabulary (size %lld)",
                            (long long)i, (long)id, (long long)t->vocab_size);
        total += t->len[id];
    }
    char *out = malloc(total + 1);
    if (!out) return dtx_fail(DTX_ERR_NOMEM, "decode: out of memory for %zu bytes", total + 1);
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        memcpy(out + o, t->arena + t->off[ids[i]], t->len[ids[i]]);
        o += t->len[ids[i]];
    }
    out[o] = '\0';
    *text = out;
    *len = o;
    return DTX_OK;
}

int64_t dtx_tokenizer_vocab_size(const dtx_tokenizer *t) { return t->vocab_size; }
int64_t dtx_tokenizer_num_ordinary(const dtx_tokenizer *t) { return t->n_ranks; }
int dtx_tokenizer_num_special(const dtx_tokenizer *t) { return t->n_special; }

const char *dtx_tokenizer_special(const dtx_tokenizer *t, int i, int32_t *id) {
    if (i < 0 || i >= t->n_special) return NULL;
    if (id) *id = t->special[i].id;
    return t->special[i].name;
}

int dtx_tokenizer_special_is_special(const dtx_tokenizer *t, int i) {
    return i >= 0 && i < t->n_special && t->special[i].special;
}

int32_t dtx_tokenizer_bos(const dtx_tokenizer *t) { return t->bos; }
int32_t dtx_tokenizer_eos(const dtx_tokenizer *t) { return t->eos; }

int32_t dtx_tokenizer_token_id(const dtx_tokenizer *t, const char *special) {
    for (int i = 0; i < t->n_special; i++)
        if (strcmp(t->special[i].name, special) == 0) return t->special[i].id;
    return -1;
}

const char *dtx_tokenizer_token_bytes(const dtx_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size || !t->kind[id]) return NULL;
    *len = t->len[id];
    return (const char *)t->arena + t->off[id];
}

const char *dtx_tokenizer_source(const dtx_tokenizer *t) {
    switch (t->source) {
    case DTX_TOKSRC_TIKTOKEN: return "tiktoken";
    case DTX_TOKSRC_HF: return "huggingface";
    case DTX_TOKSRC_SPM: return "sentencepiece";
    default: return "difftx";
    }
}
