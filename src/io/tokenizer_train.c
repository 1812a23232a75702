/* Byte-level BPE training (GPT-2 style), docs/tokenizer.md "Training".
 *
 * 1. Every text is pre-tokenised with the cl100k_base pattern; identical
 *    pieces are counted in a hash table ("words" with a count).
 * 2. Each word starts as its bytes (ids 0..255 = the byte values). Pair
 *    counts (weighted by word counts) and, per pair, the list of words it
 *    occurs in are built once.
 * 3. Repeatedly the most frequent pair is merged: a max-heap of
 *    (count, left id, right id) with lazy deletion gives it; ties go to the
 *    smaller left id, then the smaller right id. Only the words that hold
 *    the pair are rewritten (left to right, non-overlapping), and only their
 *    pair counts change, so a merge costs what it touches.
 * 4. The merged pair becomes the next id; its bytes are the two tokens'
 *    bytes. Should those bytes already be a token (another pair made the
 *    same string), the words take that token and no id is spent.
 * Training stops at vocab_size - 3 ordinary tokens or when the best pair
 * occurs fewer than twice; the specials <|bos|>, <|eos|>, <|pad|> follow. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/tokenizer.h"

static const char *const SPECIALS[] = {"<|bos|>", "<|eos|>", "<|pad|>"};
enum { N_SPECIALS = 3, MIN_PAIR_COUNT = 2 };

/* ------------------------------------------------------------ piece counting */

typedef struct {
    dtx_bmap map;        /* piece bytes -> word index */
    uint8_t *arena;
    size_t arena_len, arena_cap;
    uint32_t *woff, *wlen; /* piece bytes of each word */
    int64_t *count;
    size_t n, cap;
    dtx_status st;
} piece_counter;

static int count_piece(const uint8_t *p, size_t n, void *ctx) {
    piece_counter *pc = ctx;
    int32_t w = dtx_bmap_get(&pc->map, pc->arena, p, n);
    if (w >= 0) {
        pc->count[w]++;
        return 0;
    }
    if (pc->arena_len + n > UINT32_MAX || pc->n >= INT32_MAX - 1) {
        pc->st = dtx_fail(DTX_ERR_ARG, "training text has more than 4 GiB of distinct pieces");
        return 1;
    }
    if (pc->arena_len + n > pc->arena_cap) {
        size_t cap = pc->arena_cap ? pc->arena_cap : 1 << 20;
        while (cap < pc->arena_len + n) cap *= 2;
        uint8_t *a = realloc(pc->arena, cap);
        if (!a) goto nomem;
        pc->arena = a;
        pc->arena_cap = cap;
    }
    if (pc->n == pc->cap) {
        size_t cap = pc->cap ? pc->cap * 2 : 1 << 16;
        uint32_t *o = realloc(pc->woff, cap * sizeof *o);
        if (o) pc->woff = o;
        uint32_t *l = realloc(pc->wlen, cap * sizeof *l);
        if (l) pc->wlen = l;
        int64_t *c = realloc(pc->count, cap * sizeof *c);
        if (c) pc->count = c;
        if (!o || !l || !c) goto nomem;
        pc->cap = cap;
    }
    memcpy(pc->arena + pc->arena_len, p, n);
    uint32_t off = (uint32_t)pc->arena_len;
    if (dtx_bmap_put(&pc->map, pc->arena, off, n, (int32_t)pc->n) == -2) goto nomem;
    pc->arena_len += n;
    pc->woff[pc->n] = off;
    pc->wlen[pc->n] = (uint32_t)n;
    pc->count[pc->n] = 1;
    pc->n++;
    return 0;
nomem:
    pc->st = dtx_fail(DTX_ERR_NOMEM, "out of memory counting the training pieces");
    return 1;
}

static void counter_free(piece_counter *pc) {
    dtx_bmap_free(&pc->map);
    free(pc->arena);
    free(pc->woff);
    free(pc->wlen);
    free(pc->count);
}

static dtx_status count_text(piece_counter *pc, const dtx_split *sp, const uint8_t *text, size_t len) {
    int rc = dtx_split_run(sp, text, len, count_piece, pc);
    if (rc == 0) return DTX_OK;
    return rc < 0 ? DTX_ERR_ARG : pc->st;
}

/* ------------------------------------------------------------ pair table */

typedef struct {
    int32_t a, b;
    int64_t count;
    int32_t *where; /* words that held the pair when it appeared there (may be stale, repeated) */
    int32_t n_where, cap_where;
    int64_t stamp;  /* merge step of the last push to the "grew" list */
} pair;

typedef struct {
    uint64_t *keys;  /* (a << 32 | b) + 1; 0 empty */
    int32_t *vals;
    size_t cap, count;
    pair *pairs;
    size_t n, pcap;
} pair_table;

static inline uint64_t pkey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

static inline size_t phash(uint64_t k, size_t mask) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & mask;
}

static int32_t pt_find(const pair_table *pt, int32_t a, int32_t b) {
    uint64_t k = pkey(a, b);
    size_t mask = pt->cap - 1;
    for (size_t i = phash(k, mask);; i = (i + 1) & mask) {
        if (pt->keys[i] == k) return pt->vals[i];
        if (pt->keys[i] == 0) return -1;
    }
}

/* The pair's index, created with count 0 when new; -1 on out of memory. */
static int32_t pt_get(pair_table *pt, int32_t a, int32_t b) {
    uint64_t k = pkey(a, b);
    size_t mask = pt->cap - 1;
    size_t i = phash(k, mask);
    for (; pt->keys[i]; i = (i + 1) & mask)
        if (pt->keys[i] == k) return pt->vals[i];
    if (pt->n == pt->pcap) {
        size_t cap = pt->pcap ? pt->pcap * 2 : 1 << 16;
        pair *np = realloc(pt->pairs, cap * sizeof *np);
        if (!np) return -1;
        pt->pairs = np;
        pt->pcap = cap;
    }
    if ((pt->count + 1) * 2 > pt->cap) {
        size_t ncap = pt->cap * 2;
        uint64_t *nk = calloc(ncap, sizeof *nk);
        int32_t *nv = malloc(ncap * sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t j = 0; j < pt->cap; j++) {
            if (!pt->keys[j]) continue;
            size_t q = phash(pt->keys[j], ncap - 1);
            while (nk[q]) q = (q + 1) & (ncap - 1);
            nk[q] = pt->keys[j];
            nv[q] = pt->vals[j];
        }
        free(pt->keys);
        free(pt->vals);
        pt->keys = nk;
        pt->vals = nv;
        pt->cap = ncap;
        mask = ncap - 1;
        for (i = phash(k, mask); pt->keys[i]; i = (i + 1) & mask) {}
    }
    int32_t idx = (int32_t)pt->n++;
    pt->pairs[idx] = (pair){.a = a, .b = b, .stamp = -1};
    pt->keys[i] = k;
    pt->vals[i] = idx;
    pt->count++;
    return idx;
}

static int pt_init(pair_table *pt) {
    memset(pt, 0, sizeof *pt);
    pt->cap = 1 << 17;
    pt->keys = calloc(pt->cap, sizeof *pt->keys);
    pt->vals = malloc(pt->cap * sizeof *pt->vals);
    return pt->keys && pt->vals ? 0 : -1;
}

static void pt_free(pair_table *pt) {
    for (size_t i = 0; i < pt->n; i++) free(pt->pairs[i].where);
    free(pt->pairs);
    free(pt->keys);
    free(pt->vals);
}

static int add_where(pair *p, int32_t w) {
    if (p->n_where && p->where[p->n_where - 1] == w) return 0;
    if (p->n_where == p->cap_where) {
        int32_t cap = p->cap_where ? p->cap_where * 2 : 4;
        int32_t *nw = realloc(p->where, (size_t)cap * sizeof *nw);
        if (!nw) return -1;
        p->where = nw;
        p->cap_where = cap;
    }
    p->where[p->n_where++] = w;
    return 0;
}

/* ------------------------------------------------------------ heap */

typedef struct {
    int64_t count;
    int32_t a, b;
} hitem;

/* x before y: more frequent, then smaller left id, then smaller right id. */
static inline int hbefore(const hitem *x, const hitem *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

typedef struct {
    hitem *h;
    size_t n, cap;
} heap;

static int heap_push(heap *hp, hitem e) {
    if (hp->n == hp->cap) {
        size_t cap = hp->cap ? hp->cap * 2 : 1 << 16;
        hitem *nh = realloc(hp->h, cap * sizeof *nh);
        if (!nh) return -1;
        hp->h = nh;
        hp->cap = cap;
    }
    size_t i = hp->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!hbefore(&e, &hp->h[up])) break;
        hp->h[i] = hp->h[up];
        i = up;
    }
    hp->h[i] = e;
    return 0;
}

static hitem heap_pop(heap *hp) {
    hitem top = hp->h[0], last = hp->h[--hp->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= hp->n) break;
        if (c + 1 < hp->n && hbefore(&hp->h[c + 1], &hp->h[c])) c++;
        if (!hbefore(&hp->h[c], &last)) break;
        hp->h[i] = hp->h[c];
        i = c;
    }
    hp->h[i] = last;
    return top;
}

/* ------------------------------------------------------------ the trainer */

typedef struct {
    int32_t *sym;     /* all words' symbols, word w at sym + start[w], len[w] of them */
    size_t *start;
    uint32_t *len;
    int64_t *count;
    int64_t *stamp;   /* last merge step that rewrote the word */
    size_t n;
    pair_table pt;
    heap hp;
    int32_t *grew;    /* pairs whose count grew in this step */
    size_t n_grew, cap_grew;
} trainer;

static void trainer_free(trainer *tr) {
    free(tr->sym);
    free(tr->start);
    free(tr->len);
    free(tr->count);
    free(tr->stamp);
    free(tr->grew);
    pt_free(&tr->pt);
    free(tr->hp.h);
}

/* Adds delta x the word's count to each of its adjacent pairs. With
 * track != 0 (adding back after a rewrite), pairs holding sym c also get
 * the word in their lists and are noted as grown. */
static int word_pairs(trainer *tr, int32_t w, int sign, int track, int32_t c, int64_t step) {
    const int32_t *s = tr->sym + tr->start[w];
    int64_t d = sign * tr->count[w];
    for (uint32_t i = 0; i + 1 < tr->len[w]; i++) {
        int32_t pi = pt_get(&tr->pt, s[i], s[i + 1]);
        if (pi < 0) return -1;
        pair *p = &tr->pt.pairs[pi];
        p->count += d;
        if (track && (s[i] == c || s[i + 1] == c)) {
            if (add_where(p, w)) return -1;
            if (p->stamp != step) {
                p->stamp = step;
                if (tr->n_grew == tr->cap_grew) {
                    size_t cap = tr->cap_grew ? tr->cap_grew * 2 : 1024;
                    int32_t *ng = realloc(tr->grew, cap * sizeof *ng);
                    if (!ng) return -1;
                    tr->grew = ng;
                    tr->cap_grew = cap;
                }
                tr->grew[tr->n_grew++] = pi;
            }
        }
    }
    return 0;
}

/* Replaces every (a, b) in word w by c, left to right. Returns whether the
 * word held the pair. */
static int rewrite(trainer *tr, int32_t w, int32_t a, int32_t b, int32_t c) {
    int32_t *s = tr->sym + tr->start[w];
    uint32_t n = tr->len[w], o = 0;
    int hit = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            s[o++] = c;
            i++;
            hit = 1;
        } else {
            s[o++] = s[i];
        }
    }
    tr->len[w] = o;
    return hit;
}

static int holds(const trainer *tr, int32_t w, int32_t a, int32_t b) {
    const int32_t *s = tr->sym + tr->start[w];
    for (uint32_t i = 0; i + 1 < tr->len[w]; i++)
        if (s[i] == a && s[i + 1] == b) return 1;
    return 0;
}

static dtx_status nomem(void) { return dtx_fail(DTX_ERR_NOMEM, "out of memory during BPE training"); }

static dtx_status build_words(trainer *tr, const piece_counter *pc) {
    size_t total = 0;
    for (size_t w = 0; w < pc->n; w++) total += pc->wlen[w];
    tr->n = pc->n;
    tr->sym = malloc((total ? total : 1) * sizeof *tr->sym);
    tr->start = malloc((pc->n ? pc->n : 1) * sizeof *tr->start);
    tr->len = malloc((pc->n ? pc->n : 1) * sizeof *tr->len);
    tr->count = malloc((pc->n ? pc->n : 1) * sizeof *tr->count);
    tr->stamp = malloc((pc->n ? pc->n : 1) * sizeof *tr->stamp);
    if (!tr->sym || !tr->start || !tr->len || !tr->count || !tr->stamp || pt_init(&tr->pt)) return nomem();
    size_t o = 0;
    for (size_t w = 0; w < pc->n; w++) {
        tr->start[w] = o;
        tr->len[w] = pc->wlen[w];
        tr->count[w] = pc->count[w];
        tr->stamp[w] = -1;
        const uint8_t *p = pc->arena + pc->woff[w];
        for (uint32_t i = 0; i < pc->wlen[w]; i++) tr->sym[o++] = p[i];
    }
    for (size_t w = 0; w < tr->n; w++) {
        const int32_t *s = tr->sym + tr->start[w];
        for (uint32_t i = 0; i + 1 < tr->len[w]; i++) {
            int32_t pi = pt_get(&tr->pt, s[i], s[i + 1]);
            if (pi < 0 || add_where(&tr->pt.pairs[pi], (int32_t)w)) return nomem();
            tr->pt.pairs[pi].count += tr->count[w];
        }
    }
    for (size_t i = 0; i < tr->pt.n; i++) {
        const pair *p = &tr->pt.pairs[i];
        if (heap_push(&tr->hp, (hitem){p->count, p->a, p->b})) return nomem();
    }
    return DTX_OK;
}

/* The next pair to merge, or -1 when none occurs MIN_PAIR_COUNT times. */
static int32_t best_pair(trainer *tr) {
    while (tr->hp.n) {
        hitem e = heap_pop(&tr->hp);
        int32_t pi = pt_find(&tr->pt, e.a, e.b);
        if (pi < 0) continue;
        int64_t now = tr->pt.pairs[pi].count;
        if (now == e.count) return e.count >= MIN_PAIR_COUNT ? pi : -1;
        /* stale: counts only fall between pushes, so the real count is lower */
        if (now > 0 && heap_push(&tr->hp, (hitem){now, e.a, e.b})) return -2;
    }
    return -1;
}

static dtx_status merge_pair(trainer *tr, struct dtx_tokenizer *t, int32_t pi, int64_t step, uint8_t **cat,
                             size_t *cat_cap) {
    int32_t a = tr->pt.pairs[pi].a, b = tr->pt.pairs[pi].b;
    size_t la = t->len[a], lb = t->len[b];
    if (la + lb > *cat_cap) {
        size_t cap = (la + lb) * 2;
        uint8_t *nc = realloc(*cat, cap);
        if (!nc) return nomem();
        *cat = nc;
        *cat_cap = cap;
    }
    memcpy(*cat, t->arena + t->off[a], la);
    memcpy(*cat + la, t->arena + t->off[b], lb);
    int32_t c = dtx_bmap_get(&t->map, t->arena, *cat, la + lb);
    if (c < 0) {
        c = (int32_t)t->n_ranks;
        dtx_status st = dtx_tok_add(t, *cat, la + lb, c);
        if (st) return st;
    }
    tr->n_grew = 0;
    /* The list may grow while we walk it (never for this pair: (a, b)
     * cannot reappear next to the new token), so index, not pointer. */
    for (int32_t k = 0; k < tr->pt.pairs[pi].n_where; k++) {
        int32_t w = tr->pt.pairs[pi].where[k];
        if (tr->stamp[w] == step || !holds(tr, w, a, b)) continue;
        tr->stamp[w] = step;
        if (word_pairs(tr, w, -1, 0, c, step)) return nomem();
        rewrite(tr, w, a, b, c);
        if (word_pairs(tr, w, +1, 1, c, step)) return nomem();
    }
    pair *p = &tr->pt.pairs[pi];
    free(p->where);
    p->where = NULL;
    p->n_where = p->cap_where = 0;
    for (size_t i = 0; i < tr->n_grew; i++) {
        const pair *q = &tr->pt.pairs[tr->grew[i]];
        if (q->count > 0 && heap_push(&tr->hp, (hitem){q->count, q->a, q->b})) return nomem();
    }
    return DTX_OK;
}

static dtx_status train_counted(dtx_tokenizer **out, const piece_counter *pc, int64_t vocab_size) {
    struct dtx_tokenizer *t = NULL;
    dtx_status st = dtx_tok_new(&t, vocab_size, (size_t)vocab_size * 8);
    if (st) return st;
    t->source = DTX_TOKSRC_DIFFTX;
    for (int b = 0; b < 256 && st == DTX_OK; b++) {
        uint8_t byte = (uint8_t)b;
        st = dtx_tok_add(t, &byte, 1, b);
    }
    trainer tr = {0};
    if (st == DTX_OK) st = build_words(&tr, pc);
    uint8_t *cat = NULL;
    size_t cat_cap = 0;
    int64_t target = vocab_size - N_SPECIALS;
    for (int64_t step = 0; st == DTX_OK && t->n_ranks < target; step++) {
        int32_t pi = best_pair(&tr);
        if (pi == -2) st = nomem();
        if (pi < 0) break;
        st = merge_pair(&tr, t, pi, step, &cat, &cat_cap);
    }
    free(cat);
    trainer_free(&tr);
    for (int i = 0; i < N_SPECIALS && st == DTX_OK; i++) st = dtx_tok_add_special(t, SPECIALS[i], t->n_ranks + i);
    if (st == DTX_OK) st = dtx_tok_finish(t);
    if (st) {
        dtx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DTX_OK;
}

static dtx_status check_vocab(int64_t vocab_size) {
    if (vocab_size < 256 + N_SPECIALS || vocab_size > (1 << 24))
        return dtx_fail(DTX_ERR_ARG, "vocab_size %lld: must be in [%d, %d] (256 byte tokens + merges + %d specials)",
                        (long long)vocab_size, 256 + N_SPECIALS, 1 << 24, N_SPECIALS);
    return DTX_OK;
}

static dtx_status counter_new(piece_counter *pc, dtx_split **sp) {
    memset(pc, 0, sizeof *pc);
    *sp = NULL;
    if (dtx_bmap_init(&pc->map, 1 << 16)) return DTX_ERR_NOMEM;
    return dtx_split_new(sp);
}

dtx_status dtx_tokenizer_train_texts(dtx_tokenizer **out, const char *const *texts, const size_t *lens, int n_texts,
                                     int64_t vocab_size) {
    *out = NULL;
    dtx_status st = check_vocab(vocab_size);
    if (st) return st;
    if (n_texts < 0 || (n_texts && (!texts || !lens))) return dtx_fail(DTX_ERR_ARG, "train: bad text list");
    piece_counter pc;
    dtx_split *sp;
    st = counter_new(&pc, &sp);
    for (int i = 0; i < n_texts && st == DTX_OK; i++) {
        if (!texts[i] && lens[i]) st = dtx_fail(DTX_ERR_ARG, "train: text %d is NULL", i);
        else st = count_text(&pc, sp, (const uint8_t *)texts[i], lens[i]);
    }
    if (st == DTX_OK && pc.n == 0) /* a byte-level tokenizer learnt from nothing: surely not what was meant */
        st = dtx_fail(DTX_ERR_ARG, "train: no text to learn from (%d text%s, all empty)", n_texts, n_texts == 1 ? "" : "s");
    if (st == DTX_OK) st = train_counted(out, &pc, vocab_size);
    dtx_split_free(sp);
    counter_free(&pc);
    return st;
}

/* ------------------------------------------------------------ files */

static dtx_status count_file(piece_counter *pc, const dtx_split *sp, const char *path) {
    FILE *f = dtx_fopen_read(path);
    if (!f) return DTX_ERR_IO;
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory reading the file", path);
    dtx_status st = err ? dtx_fail(DTX_ERR_IO, "%s: read error", path) : count_text(pc, sp, buf, n);
    free(buf);
    return st;
}

dtx_status dtx_tokenizer_train(dtx_tokenizer **out, const char *const *paths, int n_paths, int64_t vocab_size) {
    *out = NULL;
    dtx_status st = check_vocab(vocab_size);
    if (st) return st;
    if (n_paths <= 0 || !paths) return dtx_fail(DTX_ERR_ARG, "train: no input files");
    piece_counter pc;
    dtx_split *sp;
    st = counter_new(&pc, &sp);
    dtx_paths files = {0};
    for (int i = 0; i < n_paths && st == DTX_OK; i++) st = dtx_paths_add(&files, paths[i]);
    for (size_t i = 0; i < files.n && st == DTX_OK; i++) st = count_file(&pc, sp, files.v[i]);
    if (st == DTX_OK && pc.n == 0)
        st = dtx_fail(DTX_ERR_FORMAT, "%s%s: no text to learn from (%zu file%s, all empty)", paths[0],
                      n_paths > 1 ? " ..." : "", files.n, files.n == 1 ? "" : "s");
    dtx_paths_free(&files);
    if (st == DTX_OK) st = train_counted(out, &pc, vocab_size);
    dtx_split_free(sp);
    counter_free(&pc);
    return st;
}
