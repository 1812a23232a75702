/* Token files: whitespace-separated non-negative decimal ids (interop.md),
 * or a binary token shard (docs/data.md), told apart by the shard magic. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "io/shard.h"
#include "io/tokenizer.h"


/* A shard, checked by dtx_shard_open (its vocab_size must equal vocab_size
 * when that is > 0), copied out as int32. */
static dtx_status read_shard(const char *path, int64_t vocab_size, int32_t **out, int64_t *n_out) {
    dtx_shard *s = NULL;
    dtx_status st = dtx_shard_open(&s, path, vocab_size);
    if (st) return st;
    int64_t n = dtx_shard_count(s);
    int32_t *toks = dtx_alloc(n ? (size_t)n : 1, sizeof(int32_t));
    if (!toks) {
        dtx_shard_close(s);
        return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory for %lld tokens", path, (long long)n);
    }
    st = dtx_shard_read(s, 0, n, toks);
    dtx_shard_close(s);
    if (st) {
        free(toks);
        return st;
    }
    *out = toks;
    *n_out = n;
    return DTX_OK;
}

dtx_status dtx_tokens_read(const char *path, int64_t vocab_size, int32_t **out, int64_t *n_out) {
    *out = NULL;
    *n_out = 0;
    int is_shard = dtx_shard_sniff(path);
    if (is_shard < 0) return DTX_ERR_IO; /* dtx_shard_sniff left the message */
    if (is_shard) return read_shard(path, vocab_size, out, n_out);
    char *buf = NULL;
    size_t len = 0;
    dtx_status st = dtx_read_file(path, &buf, &len);
    if (st) return st;
    /* at most one token per two bytes, plus one */
    size_t cap = len / 2 + 1;
    int32_t *toks = dtx_alloc(cap, sizeof(int32_t));
    if (!toks) {
        free(buf);
        return dtx_fail(DTX_ERR_NOMEM, "%s: out of memory for %zu tokens", path, cap);
    }
    int64_t n = 0;
    size_t i = 0;
    int64_t line = 1;
    while (i < len) {
        unsigned char ch = (unsigned char)buf[i];
        if (ch == '\n') line++;
        if (isspace(ch)) { i++; continue; }
        size_t start = i;
        while (i < len && !isspace((unsigned char)buf[i])) i++;
        int ok = i - start <= 10;
        long long v = 0;
        for (size_t j = start; ok && j < i; j++) {
            if (buf[j] < '0' || buf[j] > '9') ok = 0;
            else v = v * 10 + (buf[j] - '0');
        }
        if (!ok || v > INT32_MAX) {
            st = dtx_fail(DTX_ERR_FORMAT, "%s:%lld: token %lld '%.*s' is not a non-negative integer id", path,
                          (long long)line, (long long)n, (int)(i - start > 20 ? 20 : i - start), buf + start);
            break;
        }
        if (vocab_size > 0 && v >= vocab_size) {
            st = dtx_fail(DTX_ERR_ARG, "%s:%lld: token %lld has id %lld, out of range for vocab_size %lld", path,
                          (long long)line, (long long)n, v, (long long)vocab_size);
            break;
        }
        toks[n++] = (int32_t)v;
    }
    free(buf);
    if (st) {
        free(toks);
        return st;
    }
    *out = toks;
    *n_out = n;
    return DTX_OK;
}

/* One file of dtx_tokens_gather: tokens, or text encoded with tok. */
static dtx_status gather_one(const char *path, const dtx_tokenizer *tok, int64_t vocab, dtx_idbuf *b) {
    int32_t *ids = NULL;
    int64_t n = 0;
    dtx_status st;
    if (tok) {
        char *buf = NULL;
        size_t len = 0;
        st = dtx_read_file(path, &buf, &len);
        if (!st) st = dtx_tokenizer_encode(tok, buf, len, DTX_ENCODE_ORDINARY, &ids, &n);
        for (int64_t i = 0; !st && i < n; i++)
            if (ids[i] >= vocab)
                st = dtx_fail(DTX_ERR_ARG, "%s: token %lld has id %d, outside the model's vocab_size %lld", path,
                              (long long)i, ids[i], (long long)vocab);
        free(buf);
    } else {
        st = dtx_tokens_read(path, vocab, &ids, &n);
    }
    if (!st && dtx_idbuf_append(b, ids, n) != DTX_OK)
        st = dtx_fail(DTX_ERR_NOMEM, "out of memory for %lld tokens", (long long)(b->n + n));
    free(ids);
    return st;
}

dtx_status dtx_tokens_gather(const char *path, const dtx_tokenizer *tok, int64_t vocab_size, int32_t **out,
                             int64_t *n, int *n_files) {
    *out = NULL;
    *n = 0;
    *n_files = 0;
    dtx_paths files = {0};
    dtx_idbuf b = {0};
    dtx_status st = dtx_paths_add(&files, path);
    if (!st && files.n == 0) st = dtx_fail(DTX_ERR_IO, "%s: the folder holds no files", path);
    for (size_t i = 0; !st && i < files.n; i++) st = gather_one(files.v[i], tok, vocab_size, &b);
    *n_files = (int)files.n;
    dtx_paths_free(&files);
    if (!st) {
        *out = b.ids ? b.ids : malloc(sizeof(int32_t));
        *n = b.n;
        b.ids = NULL;
        if (!*out) st = dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    dtx_idbuf_free(&b);
    return st;
}
