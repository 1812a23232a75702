#include "train/token_source.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "io/shard.h"

dtx_status source_open(token_source *s, const char *path, int64_t vocab_size) {
    memset(s, 0, sizeof *s);
    s->path = path;
    int is_shard = dtx_shard_sniff(path);
    if (is_shard < 0) return DTX_ERR_IO; /* sniff left the message */
    if (is_shard) {
        dtx_status st = dtx_shard_open(&s->shard, path, vocab_size);
        if (st) return st;
        s->count = dtx_shard_count(s->shard);
        return DTX_OK;
    }
    return dtx_tokens_read(path, vocab_size, &s->tokens, &s->count);
}

void source_close(token_source *s) {
    dtx_shard_close(s->shard);
    free(s->tokens);
    memset(s, 0, sizeof *s);
}

static void window(const token_source *s, int64_t start, int64_t T, int32_t *in, int32_t *tg) {
    if (s->shard) {
        dtx_status a = dtx_shard_read(s->shard, start, T, in), b = dtx_shard_read(s->shard, start + 1, T, tg);
        assert(a == DTX_OK && b == DTX_OK);
        (void)a;
        (void)b;
        return;
    }
    memcpy(in, s->tokens + start, (size_t)T * sizeof(int32_t));
    memcpy(tg, s->tokens + start + 1, (size_t)T * sizeof(int32_t));
}

void source_sample(const token_source *s, dtx_rng *rng, int64_t B, int64_t T, int32_t *inputs,
                   int32_t *targets) {
    assert(B > 0 && T > 0 && s->count >= T + 1);
    if (s->shard) {
        dtx_status st = dtx_shard_sample_batch(s->shard, rng, B, T, inputs, targets);
        assert(st == DTX_OK);
        (void)st;
        return;
    }
    /* dtx_shard_sample_batch's rule; dtx_rng is dtx_rng's state */
    dtx_rng g;
    memcpy(g.s, rng->s, sizeof g.s);
    uint64_t n_starts = (uint64_t)(s->count - T);
    for (int64_t r = 0; r < B; r++)
        window(s, (int64_t)(dtx_rng_next(&g) % n_starts), T, inputs + (size_t)r * (size_t)T,
               targets + (size_t)r * (size_t)T);
    memcpy(rng->s, g.s, sizeof g.s);
}

void source_sequential(const token_source *s, int64_t *pos, int64_t B, int64_t T, int32_t *inputs,
                       int32_t *targets) {
    assert(B > 0 && T > 0 && s->count >= T + 1 && *pos >= 0 && *pos < s->count);
    if (s->shard) {
        dtx_status st = dtx_shard_sequential_batch(s->shard, pos, 1, B, T, inputs, targets, NULL);
        assert(st == DTX_OK);
        (void)st;
        return;
    }
    for (int64_t r = 0; r < B; r++) {
        if (*pos > s->count - T - 1) *pos = 0;
        window(s, *pos, T, inputs + (size_t)r * (size_t)T, targets + (size_t)r * (size_t)T);
        *pos += T;
    }
}

uint64_t source_hash(const token_source *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    int32_t buf[4096];
    for (int64_t i = 0; i < s->count;) {
        int64_t n = s->count - i < 4096 ? s->count - i : 4096;
        const int32_t *p = s->tokens ? s->tokens + i : buf;
        if (s->shard) {
            dtx_status st = dtx_shard_read(s->shard, i, n, buf);
            assert(st == DTX_OK);
            (void)st;
        }
        for (int64_t j = 0; j < n; j++) {
            uint32_t v = (uint32_t)p[j];
            for (int b = 0; b < 4; b++) {
                h ^= (v >> (8 * b)) & 0xffu;
                h *= 0x100000001b3ULL;
            }
        }
        i += n;
    }
    return h;
}
