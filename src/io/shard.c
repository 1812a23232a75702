/* Token shards (docs/data.md, src/io/shard.h): the checked mmap reader,
 * deterministic batch sampling, and the streamed atomic writer. */
#include "io/shard.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint8_t MAGIC[8] = {'D', 'T', 'X', 'T', 'O', 'K', 'S', 0};

/* ------------------------------------------------------------ header */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

uint32_t dtx_shard_width_for(uint64_t vocab_size) { return vocab_size <= DTX_SHARD_MAX_VOCAB16 ? 2 : 4; }

void dtx_shard_header_encode(const dtx_shard_header *h, uint8_t out[DTX_SHARD_HEADER_SIZE]) {
    memcpy(out, MAGIC, 8);
    put_u32(out + 8, h->version);
    put_u32(out + 12, h->width);
    put_u64(out + 16, h->vocab_size);
    put_u64(out + 24, h->count);
    put_u64(out + 32, h->header_size);
    put_u64(out + 40, (uint64_t)h->eos_id);
    put_u64(out + 48, h->n_docs);
    put_u64(out + 56, h->reserved);
}

void dtx_shard_header_decode(const uint8_t in[DTX_SHARD_HEADER_SIZE], dtx_shard_header *h) {
    h->version = get_u32(in + 8);
    h->width = get_u32(in + 12);
    h->vocab_size = get_u64(in + 16);
    h->count = get_u64(in + 24);
    h->header_size = get_u64(in + 32);
    h->eos_id = (int64_t)get_u64(in + 40);
    h->n_docs = get_u64(in + 48);
    h->reserved = get_u64(in + 56);
}

int dtx_shard_sniff(const char *path) {
    FILE *f = dtx_fopen_read(path);
    if (!f) return -1;
    uint8_t b[8];
    size_t n = fread(b, 1, 8, f);
    int err = ferror(f);
    fclose(f);
    if (err) {
        dtx_fail(DTX_ERR_IO, "%s: read error", path);
        return -1;
    }
    return n == 8 && memcmp(b, MAGIC, 8) == 0;
}

/* ------------------------------------------------------------ reader */

struct dtx_shard {
    char *path;
    dtx_mapped file;    /* the whole file */
    const uint8_t *tok; /* file.data + header */
    int64_t count;
    int64_t vocab_size;
    int width;
    int32_t eos_id;
    int64_t n_docs;
};

static inline uint32_t tok_at(const dtx_shard *s, int64_t i) {
    const uint8_t *p = s->tok + (size_t)i * (size_t)s->width;
    if (s->width == 2) return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    return get_u32(p);
}

/* The first index in [0, n) whose id is >= vocab, or -1. Fast path: the
 * maximum over blocks (vectorises), then a search only in a failing block. */
static int64_t first_out_of_range(const uint8_t *tok, int width, int64_t n, uint64_t vocab) {
    enum { BLOCK = 1 << 16 };
    for (int64_t b0 = 0; b0 < n; b0 += BLOCK) {
        int64_t b1 = n - b0 < BLOCK ? n : b0 + BLOCK;
        uint32_t mx = 0;
        if (width == 2) {
            for (int64_t i = b0; i < b1; i++) {
                uint32_t v = (uint32_t)tok[2 * i] | (uint32_t)tok[2 * i + 1] << 8;
                mx = v > mx ? v : mx;
            }
        } else {
            for (int64_t i = b0; i < b1; i++) {
                uint32_t v = get_u32(tok + 4 * i);
                mx = v > mx ? v : mx;
            }
        }
        if (mx < vocab) continue;
        for (int64_t i = b0; i < b1; i++) {
            const uint8_t *p = tok + (size_t)i * (size_t)width;
            uint32_t v = width == 2 ? ((uint32_t)p[0] | (uint32_t)p[1] << 8) : get_u32(p);
            if (v >= vocab) return i;
        }
    }
    return -1;
}

/* Checks the header against the file size; DTX_OK or a one-line failure. */
static dtx_status check_header(const char *path, const uint8_t *b, uint64_t size, dtx_shard_header *h) {
    if (size < 8 || memcmp(b, MAGIC, 8) != 0)
        return dtx_fail(DTX_ERR_FORMAT, "%s: not a token shard (bad magic: the file does not start with \"DTXTOKS\\0\")",
                        path);
    if (size < DTX_SHARD_HEADER_SIZE)
        return dtx_fail(DTX_ERR_FORMAT, "%s: truncated: %" PRIu64 " bytes, shorter than the %d-byte shard header", path,
                        size, DTX_SHARD_HEADER_SIZE);
    dtx_shard_header_decode(b, h);
    if (h->version != DTX_SHARD_VERSION)
        return dtx_fail(DTX_ERR_FORMAT, "%s: shard version %" PRIu32 " at byte offset 8 (this reader knows version %d)",
                        path, h->version, DTX_SHARD_VERSION);
    if (h->width != 2 && h->width != 4)
        return dtx_fail(DTX_ERR_FORMAT, "%s: token width %" PRIu32 " at byte offset 12 (must be 2 or 4)", path, h->width);
    if (h->vocab_size == 0 || h->vocab_size > DTX_SHARD_MAX_VOCAB)
        return dtx_fail(DTX_ERR_FORMAT, "%s: vocab_size %" PRIu64 " at byte offset 16 (must be 1 to 2^31)", path,
                        h->vocab_size);
    if (h->width != dtx_shard_width_for(h->vocab_size))
        return dtx_fail(DTX_ERR_FORMAT,
                        "%s: token width %" PRIu32 " does not match vocab_size %" PRIu64
                        " (width 2 up to 65536 tokens, 4 above)",
                        path, h->width, h->vocab_size);
    if (h->header_size != DTX_SHARD_HEADER_SIZE)
        return dtx_fail(DTX_ERR_FORMAT, "%s: header size %" PRIu64 " at byte offset 32 (version 1 has %d)", path,
                        h->header_size, DTX_SHARD_HEADER_SIZE);
    if (h->eos_id < -1 || (h->eos_id >= 0 && (uint64_t)h->eos_id >= h->vocab_size))
        return dtx_fail(DTX_ERR_FORMAT, "%s: eos id %" PRId64 " at byte offset 40 is out of range for vocab_size %" PRIu64,
                        path, h->eos_id, h->vocab_size);
    if (h->reserved != 0)
        return dtx_fail(DTX_ERR_FORMAT, "%s: reserved field at byte offset 56 is not zero", path);
    uint64_t body = size - DTX_SHARD_HEADER_SIZE;
    if (h->count > body / h->width || body != h->count * h->width) {
        int over = h->count > body / h->width;
        /* The expected size, or "more than the file" when it overflows. */
        char want[64];
        if (h->count <= (UINT64_MAX - DTX_SHARD_HEADER_SIZE) / h->width)
            snprintf(want, sizeof want, "%" PRIu64, DTX_SHARD_HEADER_SIZE + h->count * h->width);
        else
            snprintf(want, sizeof want, "more than 2^64");
        return dtx_fail(DTX_ERR_FORMAT,
                        "%s: %s: the file is %" PRIu64 " bytes, the header's %" PRIu64 " tokens x %" PRIu32
                        " bytes + %d need %s",
                        path, over ? "truncated" : "trailing bytes after the last token", size, h->count, h->width,
                        DTX_SHARD_HEADER_SIZE, want);
    }
    if (h->count > (uint64_t)INT64_MAX / 4)
        return dtx_fail(DTX_ERR_FORMAT, "%s: %" PRIu64 " tokens is more than this reader handles", path, h->count);
    return DTX_OK;
}

dtx_status dtx_shard_open(dtx_shard **out, const char *path, int64_t vocab_size) {
    assert(out && path);
    *out = NULL;
    dtx_mapped file;
    dtx_status st = dtx_map_file(path, NULL, &file);
    if (st) return st;
    /* An empty file has no mapping: check_header looks at no byte of it. */
    const uint8_t *map = file.data;
    dtx_shard_header h;
    st = check_header(path, map, file.size, &h);
    if (st == DTX_OK && vocab_size > 0 && (uint64_t)vocab_size != h.vocab_size)
        st = dtx_fail(DTX_ERR_ARG,
                      "%s: the shard's vocab_size is %" PRIu64 ", expected %" PRId64
                      " (was it prepared with another tokenizer?)",
                      path, h.vocab_size, vocab_size);
    const uint8_t *tok = st ? NULL : map + DTX_SHARD_HEADER_SIZE;
    int64_t bad = (st || (h.width == 2 && h.vocab_size >= DTX_SHARD_MAX_VOCAB16))
                      ? -1
                      : first_out_of_range(tok, (int)h.width, (int64_t)h.count, h.vocab_size);
    if (bad >= 0) {
        const uint8_t *p = tok + (size_t)bad * h.width;
        uint32_t v = h.width == 2 ? ((uint32_t)p[0] | (uint32_t)p[1] << 8) : get_u32(p);
        st = dtx_fail(DTX_ERR_FORMAT,
                      "%s: token %" PRId64 " (byte offset %" PRIu64 ") has id %" PRIu32
                      ", out of range for vocab_size %" PRIu64,
                      path, bad, (uint64_t)DTX_SHARD_HEADER_SIZE + (uint64_t)bad * h.width, v, h.vocab_size);
    }
    dtx_shard *s = st ? NULL : calloc(1, sizeof *s);
    char *pc = s ? strdup(path) : NULL;
    if (!st && (!s || !pc)) st = dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    if (st) {
        free(s);
        free(pc);
        dtx_unmap_file(&file);
        return st;
    }
    s->path = pc;
    s->file = file;
    s->tok = tok;
    s->count = (int64_t)h.count;
    s->vocab_size = (int64_t)h.vocab_size;
    s->width = (int)h.width;
    s->eos_id = (int32_t)h.eos_id;
    s->n_docs = h.n_docs > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)h.n_docs;
    *out = s;
    return DTX_OK;
}

void dtx_shard_close(dtx_shard *s) {
    if (!s) return;
    dtx_unmap_file(&s->file);
    free(s->path);
    free(s);
}

int64_t dtx_shard_count(const dtx_shard *s) { return s->count; }
int64_t dtx_shard_vocab_size(const dtx_shard *s) { return s->vocab_size; }
int dtx_shard_width(const dtx_shard *s) { return s->width; }
int32_t dtx_shard_eos_id(const dtx_shard *s) { return s->eos_id; }
int64_t dtx_shard_num_docs(const dtx_shard *s) { return s->n_docs; }

int32_t dtx_shard_get(const dtx_shard *s, int64_t i) {
    assert(s && i >= 0 && i < s->count);
    return (int32_t)tok_at(s, i);
}

/* dst[0, n) = tokens [start, start + n); the range is the caller's to check. */
static void copy_out(const dtx_shard *s, int64_t start, int64_t n, int32_t *dst) {
    const uint8_t *p = s->tok + (size_t)start * (size_t)s->width;
    if (s->width == 2)
        for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)get_u32(p + 4 * i);
}

dtx_status dtx_shard_read(const dtx_shard *s, int64_t start, int64_t n, int32_t *dst) {
    assert(s);
    if (start < 0 || n < 0 || start > s->count || n > s->count - start)
        return dtx_fail(DTX_ERR_ARG, "%s: tokens [%" PRId64 ", %" PRId64 " + %" PRId64 ") are outside the shard's %" PRId64,
                        s->path, start, start, n, s->count);
    if (n) {
        assert(dst);
        copy_out(s, start, n, dst);
    }
    return DTX_OK;
}

/* ------------------------------------------------------------ sampling */

static dtx_status check_window(const dtx_shard *s, int64_t B, int64_t T, const char *what) {
    if (B < 1 || T < 1)
        return dtx_fail(DTX_ERR_ARG, "%s: %s batch of %" PRId64 " x %" PRId64 " (both must be at least 1)", s->path,
                        what, B, T);
    if (s->count < 2 || T > s->count - 1)
        return dtx_fail(DTX_ERR_ARG,
                        "%s: holds %" PRId64 " tokens, fewer than the %" PRId64 " + 1 of one window of length %" PRId64,
                        s->path, s->count, T, T);
    if ((uint64_t)B > SIZE_MAX / sizeof(int32_t) / (uint64_t)T)
        return dtx_fail(DTX_ERR_ARG, "%s: batch %" PRId64 " x %" PRId64 " overflows", s->path, B, T);
    return DTX_OK;
}

dtx_status dtx_shard_sample_batch(const dtx_shard *s, dtx_rng *rng, int64_t B, int64_t T, int32_t *inputs,
                                  int32_t *targets) {
    assert(s && rng);
    dtx_status st = check_window(s, B, T, "random");
    if (st) return st;
    assert(inputs && targets);
    /* count - T starts: the last window ends at the last token. The same
     * rule as the token-file batcher of difftx train (src/train/token_source.c), so a
     * shard and a text file of the same tokens give the same batches. Modulo
     * bias is at most n_starts / 2^64: negligible. */
    uint64_t n_starts = (uint64_t)(s->count - T);
    for (int64_t r = 0; r < B; r++) {
        int64_t start = (int64_t)(dtx_rng_next(rng) % n_starts);
        copy_out(s, start, T, inputs + (size_t)r * (size_t)T);
        copy_out(s, start + 1, T, targets + (size_t)r * (size_t)T);
    }
    return DTX_OK;
}

dtx_status dtx_shard_sequential_batch(const dtx_shard *s, int64_t *pos, int wrap, int64_t B, int64_t T,
                                      int32_t *inputs, int32_t *targets, int64_t *rows) {
    assert(s && pos);
    if (rows) *rows = 0;
    dtx_status st = check_window(s, B, T, "sequential");
    if (st) return st;
    if (*pos < 0 || *pos >= s->count)
        return dtx_fail(DTX_ERR_ARG, "%s: position %" PRId64 " is outside the shard's %" PRId64 " tokens", s->path, *pos,
                        s->count);
    assert(inputs && targets);
    int64_t r = 0;
    for (; r < B; r++) {
        if (*pos > s->count - T - 1) {
            if (!wrap) break;
            *pos = 0;
        }
        copy_out(s, *pos, T, inputs + (size_t)r * (size_t)T);
        copy_out(s, *pos + 1, T, targets + (size_t)r * (size_t)T);
        *pos += T;
    }
    if (rows) *rows = r;
    return DTX_OK;
}

/* ------------------------------------------------------------ writer */

struct dtx_shard_writer {
    dtx_atomic_file f; /* f.path: the shard's path */
    uint64_t vocab_size;
    uint32_t width;
    int32_t eos_id;
    int64_t count, n_docs;
    int failed; /* a write failed: commit refuses */
    uint8_t buf[1 << 16];
};

dtx_status dtx_shard_writer_open(dtx_shard_writer **out, const char *path, int64_t vocab_size, int32_t eos_id) {
    assert(out && path);
    *out = NULL;
    if (vocab_size < 1 || (uint64_t)vocab_size > DTX_SHARD_MAX_VOCAB)
        return dtx_fail(DTX_ERR_ARG, "%s: vocab_size %" PRId64 " (a shard holds 1 to 2^31)", path, vocab_size);
    if (eos_id < -1 || eos_id >= vocab_size)
        return dtx_fail(DTX_ERR_ARG, "%s: eos id %ld is out of range for vocab_size %" PRId64, path, (long)eos_id,
                        vocab_size);
    dtx_shard_writer *w = calloc(1, sizeof *w);
    if (!w) return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
    w->vocab_size = (uint64_t)vocab_size;
    w->width = dtx_shard_width_for((uint64_t)vocab_size);
    w->eos_id = eos_id;
    dtx_status st = dtx_atomic_open(&w->f, path);
    if (st) {
        free(w);
        return st;
    }
    uint8_t zero[DTX_SHARD_HEADER_SIZE] = {0}; /* the real header comes at commit */
    if (fwrite(zero, 1, sizeof zero, w->f.fp) != sizeof zero) {
        int e = errno;
        st = dtx_fail(DTX_ERR_IO, "%s: cannot write: %s", path, strerror(e ? e : EIO));
        dtx_shard_writer_abort(w);
        return st;
    }
    *out = w;
    return DTX_OK;
}

dtx_status dtx_shard_writer_append(dtx_shard_writer *w, const int32_t *tokens, int64_t n) {
    assert(w && n >= 0 && (n == 0 || tokens));
    if (w->failed) return dtx_fail(DTX_ERR_IO, "%s: an earlier write failed", w->f.path);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint64_t)tokens[i] >= w->vocab_size)
            return dtx_fail(DTX_ERR_ARG, "%s: token %" PRId64 " has id %ld, out of range for vocab_size %" PRIu64,
                            w->f.path, w->count + i, (long)tokens[i], w->vocab_size);
    size_t per = sizeof w->buf / w->width;
    for (int64_t i = 0; i < n;) {
        size_t k = n - i < (int64_t)per ? (size_t)(n - i) : per;
        uint8_t *p = w->buf;
        if (w->width == 2)
            for (size_t j = 0; j < k; j++, p += 2) {
                uint32_t v = (uint32_t)tokens[i + (int64_t)j];
                p[0] = (uint8_t)v;
                p[1] = (uint8_t)(v >> 8);
            }
        else
            for (size_t j = 0; j < k; j++, p += 4) put_u32(p, (uint32_t)tokens[i + (int64_t)j]);
        size_t bytes = k * w->width;
        if (fwrite(w->buf, 1, bytes, w->f.fp) != bytes) {
            int e = errno;
            w->failed = 1;
            return dtx_fail(DTX_ERR_IO, "%s: cannot write: %s", w->f.path, strerror(e ? e : EIO));
        }
        i += (int64_t)k;
    }
    w->count += n;
    return DTX_OK;
}

dtx_status dtx_shard_writer_end_document(dtx_shard_writer *w) {
    assert(w);
    if (w->eos_id >= 0) {
        dtx_status st = dtx_shard_writer_append(w, &w->eos_id, 1);
        if (st) return st;
    }
    w->n_docs++;
    return DTX_OK;
}

int64_t dtx_shard_writer_count(const dtx_shard_writer *w) { return w->count; }

void dtx_shard_writer_abort(dtx_shard_writer *w) {
    if (!w) return;
    dtx_atomic_abort(&w->f);
    free(w);
}

dtx_status dtx_shard_writer_commit(dtx_shard_writer *w) {
    assert(w);
    if (w->failed) {
        dtx_status st = dtx_fail(DTX_ERR_IO, "%s: an earlier write failed; nothing was written", w->f.path);
        dtx_shard_writer_abort(w);
        return st;
    }
    dtx_shard_header h = {.version = DTX_SHARD_VERSION,
                          .width = w->width,
                          .vocab_size = w->vocab_size,
                          .count = (uint64_t)w->count,
                          .header_size = DTX_SHARD_HEADER_SIZE,
                          .eos_id = w->eos_id,
                          .n_docs = (uint64_t)w->n_docs,
                          .reserved = 0};
    uint8_t hb[DTX_SHARD_HEADER_SIZE];
    dtx_shard_header_encode(&h, hb);
    int e = 0; /* the header last, over the zeros written at open */
    if (fflush(w->f.fp) != 0 || fseek(w->f.fp, 0, SEEK_SET) != 0 || fwrite(hb, 1, sizeof hb, w->f.fp) != sizeof hb)
        e = errno ? errno : EIO;
    dtx_status st = dtx_atomic_commit(&w->f, e);
    free(w);
    return st;
}

dtx_status dtx_shard_write(const char *path, const int32_t *tokens, int64_t n, int64_t vocab_size) {
    dtx_shard_writer *w = NULL;
    dtx_status st = dtx_shard_writer_open(&w, path, vocab_size, -1);
    if (st) return st;
    if ((st = dtx_shard_writer_append(w, tokens, n))) {
        dtx_shard_writer_abort(w);
        return st;
    }
    return dtx_shard_writer_commit(w);
}
