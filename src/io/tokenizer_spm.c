/* SentencePiece tokenizer.model: a BPE model (the Llama 2 family), read and
 * encoded as sentencepiece's SentencePieceProcessor.Encode does.
 *
 * The file is a protobuf ModelProto. We read the dozen fields we need with a
 * small bounds-checked reader instead of protobuf-c: that library would need
 * code generated from sentencepiece_model.proto and a build step for it, for
 * three messages of scalars and strings; every read here is checked against
 * the end of its message, and unknown fields are skipped by wire type.
 *
 *   normalize  an "identity" normalizer only (no precompiled_charsmap):
 *              remove_extra_whitespaces, the dummy prefix "\u2581", spaces
 *              as "\u2581"; invalid UTF-8 becomes U+FFFD a byte at a time
 *   symbols    user-defined pieces matched whole (longest), else one
 *              character each
 *   merge      repeatedly the adjacent pair whose joined text is a piece
 *              with the highest score (the leftmost among equal scores);
 *              an UNUSED piece is split back into what made it
 *   ids        a symbol that is no piece becomes its UTF-8 bytes'
 *              <0xXX> pieces (byte_fallback), or <unk> (runs merged)
 *
 * Unigram, word and char models, other normalizers, and whitespace as a
 * suffix are refused naming the field. Each piece's bytes (for decode) are
 * its text with "\u2581" as a space; <0xXX> pieces are their byte; control
 * and unknown pieces are special tokens under their own text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };
#define MAX_PIECE 8000 /* sentencepiece's kMaxPieceSize */

static const char SPACE[] = "\xe2\x96\x81"; /* U+2581 */

struct dtx_spm {
    dtx_bmap map; /* piece text -> id, every piece */
    uint8_t *arena;
    size_t arena_len, arena_cap;
    float *score;
    uint8_t *type;
    int64_t n;
    int32_t unk;
    uint32_t *user_off, *user_len; /* USER_DEFINED pieces' text in arena */
    int n_user;
    int byte_fallback, add_dummy_prefix, remove_extra_ws, escape_ws;
};

void dtx_spm_free(struct dtx_spm *s) {
    if (!s) return;
    dtx_bmap_free(&s->map);
    free(s->arena);
    free(s->score);
    free(s->type);
    free(s->user_off);
    free(s->user_len);
    free(s);
}

/* ------------------------------------------------------------ protobuf */

typedef struct {
    const uint8_t *p, *end;
    const uint8_t *base; /* the file's start, for offsets in messages */
} pb;

enum { VARINT = 0, I64 = 1, LEN = 2, I32 = 5 };

static int pb_varint(pb *b, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return -1;
        uint8_t c = *b->p++;
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The next field: its number, wire type and, for LEN, the bytes; for
 * VARINT and I32, the value. 1 at the end, -1 when malformed. */
typedef struct {
    uint32_t num;
    int wire;
    uint64_t v;
    const uint8_t *data;
    size_t len;
} field;

static int pb_next(pb *b, field *f) {
    if (b->p >= b->end) return 1;
    uint64_t tag;
    if (pb_varint(b, &tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX) return -1;
    f->num = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    switch (f->wire) {
    case VARINT: return pb_varint(b, &f->v);
    case I64:
        if (b->end - b->p < 8) return -1;
        b->p += 8;
        return 0;
    case I32:
        if (b->end - b->p < 4) return -1;
        f->v = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 | (uint64_t)b->p[3] << 24;
        b->p += 4;
        return 0;
    case LEN: {
        uint64_t n;
        if (pb_varint(b, &n) || n > (uint64_t)(b->end - b->p)) return -1;
        f->data = b->p;
        f->len = (size_t)n;
        b->p += n;
        return 0;
    }
    default: return -1; /* groups (3, 4) and the reserved 6, 7 */
    }
}

static dtx_status malformed(const char *path, const pb *b, const char *what) {
    return dtx_fail(DTX_ERR_FORMAT, "%s: byte %lld: %s: not a SentencePiece model", path, (long long)(b->p - b->base),
                    what);
}

/* A first field that is a piece (1, LEN) starting with its text (1, LEN),
 * however long the file turns out to be: a truncated model is still told
 * apart from a text file, and refused as a model. */
int dtx_spm_sniff(const uint8_t *buf, size_t len) {
    pb b = {buf, buf + len, buf};
    uint64_t tag, n;
    return pb_varint(&b, &tag) == 0 && tag == (1 << 3 | LEN) && pb_varint(&b, &n) == 0 && n >= 2 && b.p < b.end &&
           *b.p == 0x0a;
}

/* ------------------------------------------------------------ reading */

typedef struct {
    const char *path;
    int64_t model_type; /* 1 unigram (the default), 2 BPE */
    int64_t bos, eos, unk_id;
    int treat_ws_as_suffix;
    const uint8_t *charsmap;
    size_t charsmap_len;
    const uint8_t *name;
    size_t name_len;
} spec;

static dtx_status read_trainer(const char *path, const uint8_t *p, size_t n, const uint8_t *base, struct dtx_spm *s,
                               spec *sp) {
    pb b = {p, p + n, base};
    field f;
    int rc;
    while ((rc = pb_next(&b, &f)) == 0) {
        if (f.wire != VARINT) continue;
        int64_t v = (int64_t)f.v; /* int32 fields: negatives are 10-byte varints */
        switch (f.num) {
        case 3: sp->model_type = v; break;
        case 24: sp->treat_ws_as_suffix = v != 0; break;
        case 35: s->byte_fallback = v != 0; break;
        case 40: sp->unk_id = v; break;
        case 41: sp->bos = v; break;
        case 42: sp->eos = v; break;
        default: break;
        }
    }
    return rc < 0 ? malformed(path, &b, "trainer_spec") : DTX_OK;
}

static dtx_status read_normalizer(const char *path, const uint8_t *p, size_t n, const uint8_t *base,
                                  struct dtx_spm *s, spec *sp) {
    pb b = {p, p + n, base};
    field f;
    int rc;
    while ((rc = pb_next(&b, &f)) == 0) {
        if (f.num == 1 && f.wire == LEN) sp->name = f.data, sp->name_len = f.len;
        else if (f.num == 2 && f.wire == LEN) sp->charsmap = f.data, sp->charsmap_len = f.len;
        else if (f.wire == VARINT && f.num == 3) s->add_dummy_prefix = f.v != 0;
        else if (f.wire == VARINT && f.num == 4) s->remove_extra_ws = f.v != 0;
        else if (f.wire == VARINT && f.num == 5) s->escape_ws = f.v != 0;
    }
    return rc < 0 ? malformed(path, &b, "normalizer_spec") : DTX_OK;
}

/* One SentencePiece message: its text, score and type. */
static dtx_status read_piece(const char *path, const uint8_t *p, size_t n, const uint8_t *base, int64_t i,
                             const uint8_t **text, size_t *len, float *score, int *type) {
    pb b = {p, p + n, base};
    field f;
    int rc;
    *text = NULL;
    *len = 0;
    *score = 0;
    *type = NORMAL;
    while ((rc = pb_next(&b, &f)) == 0) {
        if (f.num == 1 && f.wire == LEN) *text = f.data, *len = f.len;
        else if (f.num == 2 && f.wire == I32) {
            uint32_t u = (uint32_t)f.v;
            memcpy(score, &u, 4);
        } else if (f.num == 3 && f.wire == VARINT) {
            if (f.v < NORMAL || f.v > BYTE)
                return dtx_fail(DTX_ERR_FORMAT, "%s: piece %lld: unknown type %llu", path, (long long)i,
                                (unsigned long long)f.v);
            *type = (int)f.v;
        }
    }
    if (rc < 0) return malformed(path, &b, "a piece");
    if (*len == 0) return dtx_fail(DTX_ERR_FORMAT, "%s: piece %lld is empty", path, (long long)i);
    if (*len >= MAX_PIECE) return dtx_fail(DTX_ERR_FORMAT, "%s: piece %lld is %zu bytes long", path, (long long)i, *len);
    if (memchr(*text, '\0', *len)) return dtx_fail(DTX_ERR_FORMAT, "%s: piece %lld holds a NUL byte", path, (long long)i);
    if (!isfinite(*score)) return dtx_fail(DTX_ERR_FORMAT, "%s: piece %lld: its score is not finite", path, (long long)i);
    return DTX_OK;
}

/* "<0xAB>" -> 0xAB, else -1. */
static int byte_piece(const uint8_t *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    const char *h = memchr(hex, s[3], 16), *l = memchr(hex, s[4], 16);
    return h && l && s[3] && s[4] ? (int)((h - hex) * 16 + (l - hex)) : -1;
}

static dtx_status add_piece(struct dtx_tokenizer *t, struct dtx_spm *s, int64_t id, const uint8_t *text, size_t len,
                            int type, const char *path) {
    /* the piece text -> id table */
    if (s->arena_len + len > s->arena_cap) {
        size_t cap = s->arena_cap ? s->arena_cap : 4096;
        while (cap < s->arena_len + len) cap *= 2;
        uint8_t *a = realloc(s->arena, cap);
        if (!a) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
        s->arena = a;
        s->arena_cap = cap;
    }
    if (s->arena_len + len > UINT32_MAX) return dtx_fail(DTX_ERR_FORMAT, "%s: pieces exceed 4 GiB", path);
    memcpy(s->arena + s->arena_len, text, len);
    int32_t prev = dtx_bmap_put(&s->map, s->arena, (uint32_t)s->arena_len, len, (int32_t)id);
    if (prev == -2) return DTX_ERR_NOMEM;
    if (prev >= 0)
        return dtx_fail(DTX_ERR_FORMAT, "%s: piece %lld '%s' is already defined (piece %ld)", path, (long long)id,
                        dtx_show_n((const char *)text, len).s, (long)prev);
    s->arena_len += len;
    /* its bytes for decode */
    dtx_status st;
    if (type == BYTE) {
        int b = byte_piece(text, len);
        if (!s->byte_fallback)
            return dtx_fail(DTX_ERR_FORMAT, "%s: byte piece %lld '%s' although byte_fallback is false", path,
                            (long long)id, dtx_show_n((const char *)text, len).s);
        if (b < 0)
            return dtx_fail(DTX_ERR_FORMAT, "%s: byte piece %lld '%s' is not <0xXX>", path, (long long)id,
                            dtx_show_n((const char *)text, len).s);
        uint8_t byte = (uint8_t)b;
        if ((st = dtx_tok_set(t, id, &byte, 1, 1, 0))) return st;
        t->byte_id[b] = (int32_t)id;
        return DTX_OK;
    }
    if (type == CONTROL || type == UNKNOWN) {
        if ((st = dtx_tok_set(t, id, text, len, 2, 0))) return st;
        return dtx_tok_add_matched(t, text, len, id, 1, 0);
    }
    uint8_t *dec = malloc(len);
    if (!dec) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        if (s->escape_ws && i + 3 <= len && memcmp(text + i, SPACE, 3) == 0) {
            dec[o++] = ' ';
            i += 3;
        } else {
            dec[o++] = text[i++];
        }
    }
    st = dtx_tok_set(t, id, dec, o, 1, 0);
    free(dec);
    return st;
}

dtx_status dtx_spm_parse(struct dtx_tokenizer *t, const char *path, const uint8_t *buf, size_t len) {
    t->source = DTX_TOKSRC_SPM;
    struct dtx_spm *s = t->spm = calloc(1, sizeof *s);
    if (!s) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    s->add_dummy_prefix = s->remove_extra_ws = s->escape_ws = 1; /* the proto's defaults */
    spec sp = {.path = path, .model_type = 1, .bos = 1, .eos = 2, .unk_id = 0};
    /* first pass: the specs (they decide how pieces read) and the count */
    pb b = {buf, buf + len, buf};
    field f;
    int rc;
    int64_t n = 0;
    dtx_status st = DTX_OK;
    while (!st && (rc = pb_next(&b, &f)) == 0) {
        if (f.wire != LEN) continue;
        if (f.num == 1) n++;
        else if (f.num == 2) st = read_trainer(path, f.data, f.len, buf, s, &sp);
        else if (f.num == 3) st = read_normalizer(path, f.data, f.len, buf, s, &sp);
    }
    if (st) return st;
    if (rc < 0) return malformed(path, &b, "the model");
    if (n == 0) return dtx_fail(DTX_ERR_FORMAT, "%s: no pieces: not a SentencePiece model", path);
    if (sp.model_type != 2)
        return dtx_fail(DTX_ERR_CONFIG, "%s: trainer_spec.model_type %lld is not supported (difftx reads BPE models, 2)",
                        path, (long long)sp.model_type);
    if (sp.charsmap_len)
        return dtx_fail(DTX_ERR_CONFIG, "%s: normalizer_spec '%s' has a precompiled_charsmap: difftx reads the identity "
                        "normalizer only", path, dtx_show_n((const char *)sp.name, sp.name_len).s);
    if (sp.treat_ws_as_suffix)
        return dtx_fail(DTX_ERR_CONFIG, "%s: trainer_spec.treat_whitespace_as_suffix is true (not supported)", path);
    if (!(s->score = malloc((size_t)n * sizeof *s->score)) || !(s->type = malloc((size_t)n)) ||
        !(s->user_off = malloc((size_t)n * sizeof *s->user_off)) ||
        !(s->user_len = malloc((size_t)n * sizeof *s->user_len)) || dtx_bmap_init(&s->map, (size_t)n) != 0)
        return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory for %lld pieces", path, (long long)n);
    s->n = n;
    s->unk = -1;
    b = (pb){buf, buf + len, buf};
    int64_t id = 0;
    while (!st && pb_next(&b, &f) == 0) {
        if (f.wire != LEN || f.num != 1) continue;
        const uint8_t *text;
        size_t tl;
        int type;
        if ((st = read_piece(path, f.data, f.len, buf, id, &text, &tl, &s->score[id], &type))) break;
        s->type[id] = (uint8_t)type;
        if (type == UNKNOWN) {
            if (s->unk >= 0) st = dtx_fail(DTX_ERR_FORMAT, "%s: piece %lld: a second unknown piece", path, (long long)id);
            s->unk = (int32_t)id;
        }
        uint32_t off = (uint32_t)s->arena_len;
        if (!st) st = add_piece(t, s, id, text, tl, type, path);
        if (!st && type == USER_DEFINED) {
            s->user_off[s->n_user] = off;
            s->user_len[s->n_user++] = (uint32_t)tl;
        }
        id++;
    }
    if (st) {
        if (st != DTX_ERR_NOMEM && strncmp(dtx_last_error(), path, strlen(path)) != 0) {
            char msg[320];
            snprintf(msg, sizeof msg, "%s", dtx_last_error());
            return dtx_fail(st, "%s: %s", path, msg);
        }
        return st;
    }
    if (s->unk < 0) return dtx_fail(DTX_ERR_FORMAT, "%s: no unknown piece (<unk>)", path);
    if (s->byte_fallback)
        for (int c = 0; c < 256; c++)
            if (t->byte_id[c] < 0)
                return dtx_fail(DTX_ERR_FORMAT, "%s: byte_fallback is true but there is no piece <0x%02X>", path, c);
    t->bos = sp.bos >= 0 && sp.bos < n && s->type[sp.bos] == CONTROL ? (int32_t)sp.bos : -1;
    t->eos = sp.eos >= 0 && sp.eos < n && s->type[sp.eos] == CONTROL ? (int32_t)sp.eos : -1;
    return DTX_OK;
}

/* ------------------------------------------------------------ encode */

/* sentencepiece's Normalizer::Normalize with the identity rule; out has
 * room for 3 * n + 3 bytes. Returns the normalized length. */
static size_t normalize(const struct dtx_spm *s, const uint8_t *p, size_t n, uint8_t *out) {
    static const uint8_t FFFD[3] = {0xef, 0xbf, 0xbd};
    size_t i = 0, o = 0;
    if (s->remove_extra_ws)
        while (i < n && p[i] == ' ') i++;
    if (i == n) return 0;
    const uint8_t *ws = s->escape_ws ? (const uint8_t *)SPACE : (const uint8_t *)" ";
    size_t wl = s->escape_ws ? 3 : 1;
    if (s->add_dummy_prefix) memcpy(out + o, ws, wl), o += wl;
    int prev_space = s->remove_extra_ws;
    while (i < n) {
        uint32_t cp; /* (sentencepiece's DecodeUTF8 rule) */
        size_t cl = dtx_utf8_char(p + i, n - i, &cp);
        const uint8_t *c = cl ? p + i : FFFD;
        size_t k = cl ? cl : 3;
        i += cl ? cl : 1;
        if (prev_space && k == 1 && c[0] == ' ') continue; /* an extra space */
        if (k == 1 && c[0] == ' ') memcpy(out + o, ws, wl), o += wl;
        else memcpy(out + o, c, k), o += k;
        prev_space = s->remove_extra_ws && k == 1 && c[0] == ' ';
    }
    if (s->remove_extra_ws)
        while (o >= wl && memcmp(out + o - wl, ws, wl) == 0) o -= wl;
    return o;
}

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size;
} agenda_item;

/* higher score first, then the leftmost */
static inline int abefore(const agenda_item *a, const agenda_item *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

DTX_DEFINE_HEAP(aheap, agenda_item, abefore)

typedef struct {
    uint32_t start, len; /* the symbol's bytes in the normalized text; len 0: merged away */
    int32_t prev, next;
    uint8_t freeze;
} symbol;

/* A merged UNUSED piece and the two it was made of (sentencepiece's
 * rev_merge; the last merge of the same text wins, as its map). */
typedef struct {
    uint32_t start, len, left_len;
} unmerge;

typedef struct {
    const struct dtx_tokenizer *t;
    const struct dtx_spm *s;
    const uint8_t *text;
    symbol *sym;
    agenda_item *heap;
    size_t hn;
    unmerge *rev;
    size_t n_rev, cap_rev;
    dtx_idbuf *out;
    int last_unk;
} enc;

static int32_t piece_id(const struct dtx_spm *s, const uint8_t *p, size_t n) {
    return dtx_bmap_get(&s->map, s->arena, p, n);
}

static int mergeable(int type) { return type == NORMAL || type == USER_DEFINED || type == UNUSED; }

static dtx_status maybe_add_pair(enc *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0 || e->sym[l].freeze || e->sym[r].freeze) return DTX_OK;
    uint32_t size = e->sym[l].len + e->sym[r].len;
    int32_t id = piece_id(e->s, e->text + e->sym[l].start, size);
    if (id < 0 || !mergeable(e->s->type[id])) return DTX_OK;
    aheap_push(e->heap, &e->hn, (agenda_item){e->s->score[id], l, r, size});
    if (e->s->type[id] == UNUSED) {
        if (e->n_rev == e->cap_rev) {
            size_t cap = e->cap_rev ? 2 * e->cap_rev : 16;
            unmerge *u = realloc(e->rev, cap * sizeof *u);
            if (!u) return dtx_fail(DTX_ERR_NOMEM, "out of memory encoding");
            e->rev = u;
            e->cap_rev = cap;
        }
        e->rev[e->n_rev++] = (unmerge){e->sym[l].start, size, e->sym[l].len};
    }
    return DTX_OK;
}

static dtx_status emit(enc *e, int32_t id) {
    dtx_status st = dtx_idbuf_reserve(e->out, 1);
    if (!st) e->out->ids[e->out->n++] = id;
    return st;
}

/* The ids of one final symbol: resegmented while it is an UNUSED piece,
 * then its id, its bytes (byte fallback) or <unk>. */
static dtx_status output(enc *e, uint32_t start, uint32_t len, int depth) {
    const struct dtx_spm *s = e->s;
    const uint8_t *p = e->text + start;
    int32_t id = piece_id(s, p, len);
    if (id >= 0 && s->type[id] == UNUSED && depth < MAX_PIECE) {
        for (size_t k = e->n_rev; k-- > 0;) {
            const unmerge *u = &e->rev[k];
            if (u->len == len && memcmp(e->text + u->start, p, len) == 0) {
                dtx_status st = output(e, u->start, u->left_len, depth + 1);
                return st ? st : output(e, u->start + u->left_len, u->len - u->left_len, depth + 1);
            }
        }
    }
    if (id < 0) id = s->unk;
    if (id == s->unk && s->byte_fallback) {
        for (uint32_t k = 0; k < len; k++) {
            dtx_status st = emit(e, e->t->byte_id[p[k]]);
            if (st) return st;
        }
        e->last_unk = 0;
        return DTX_OK;
    }
    if (id == s->unk && e->last_unk) return DTX_OK; /* a run of unknowns is one <unk> */
    e->last_unk = id == s->unk;
    return emit(e, id);
}

dtx_status dtx_spm_encode_text(const struct dtx_tokenizer *t, const uint8_t *p, size_t n, dtx_idbuf *out) {
    const struct dtx_spm *s = t->spm;
    if (n == 0) return DTX_OK;
    if (n > (UINT32_MAX - 8) / 3) return dtx_fail(DTX_ERR_ARG, "a text of %zu bytes is too long to encode", n);
    size_t cap = 3 * n + 3;
    uint8_t *text = malloc(cap);
    symbol *sym = malloc(cap * sizeof *sym);
    agenda_item *heap = malloc(3 * cap * sizeof *heap);
    enc e = {.t = t, .s = s, .text = text, .sym = sym, .heap = heap, .out = out};
    dtx_status st = text && sym && heap ? DTX_OK : dtx_fail(DTX_ERR_NOMEM, "out of memory encoding %zu bytes", n);
    size_t m = st ? 0 : normalize(s, p, n, text), ns = 0;
    /* symbols: a user-defined piece (the longest there), else a character */
    for (size_t i = 0; !st && i < m;) {
        size_t best = 0;
        for (int k = 0; k < s->n_user; k++) {
            size_t ul = s->user_len[k];
            if (ul <= m - i && ul > best && memcmp(s->arena + s->user_off[k], text + i, ul) == 0) best = ul;
        }
        size_t l = best;
        if (!l) {
            uint8_t c = text[i];
            l = c < 0xc0 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
            if (l > m - i) l = m - i;
        }
        sym[ns] = (symbol){(uint32_t)i, (uint32_t)l, (int32_t)ns - 1, i + l < m ? (int32_t)ns + 1 : -1, (uint8_t)!!best};
        ns++;
        i += l;
    }
    for (size_t i = 1; !st && i < ns; i++) st = maybe_add_pair(&e, (int32_t)i - 1, (int32_t)i);
    while (!st && e.hn) {
        agenda_item top = aheap_pop(heap, &e.hn);
        symbol *L = &sym[top.left], *R = &sym[top.right];
        if (!L->len || !R->len || L->len + R->len != top.size) continue; /* stale */
        L->len += R->len;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = top.left;
        R->len = 0;
        st = maybe_add_pair(&e, L->prev, top.left);
        if (!st) st = maybe_add_pair(&e, top.left, L->next);
    }
    for (int32_t i = ns ? 0 : -1; !st && i >= 0; i = sym[i].next) st = output(&e, sym[i].start, sym[i].len, 0);
    free(text);
    free(sym);
    free(heap);
    free(e.rev);
    return st;
}
