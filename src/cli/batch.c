#include "cli/batch.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

dtx_status batcher_init(batcher *b, const int32_t *tokens, int64_t n_tokens, int64_t B, int64_t T, uint64_t seed) {
    assert(B > 0 && T > 0 && n_tokens >= T + 1);
    memset(b, 0, sizeof *b);
    b->tokens = tokens;
    b->n_tokens = n_tokens;
    b->B = B;
    b->T = T;
    dtx_rng_seed(&b->rng, seed);
    if ((uint64_t)B > SIZE_MAX / (uint64_t)T) return dtx_fail(DTX_ERR_NOMEM, "batch %lld x %lld overflows", (long long)B, (long long)T);
    size_t n = (size_t)B * (size_t)T;
    b->inputs = dtx_alloc(n, sizeof(int32_t));
    b->targets = dtx_alloc(n, sizeof(int32_t));
    if (!b->inputs || !b->targets) {
        batcher_free(b);
        return DTX_ERR_NOMEM; /* dtx_alloc left the message */
    }
    return DTX_OK;
}

void batcher_next(batcher *b) {
    /* n_tokens - T valid starts: the last window ends at the last token. */
    uint64_t n_starts = (uint64_t)(b->n_tokens - b->T);
    size_t T = (size_t)b->T;
    for (int64_t r = 0; r < b->B; r++) {
        /* Modulo bias is at most n_starts / 2^64: negligible. */
        const int32_t *w = b->tokens + dtx_rng_next(&b->rng) % n_starts;
        memcpy(b->inputs + (size_t)r * T, w, T * sizeof(int32_t));
        memcpy(b->targets + (size_t)r * T, w + 1, T * sizeof(int32_t));
    }
}

void batcher_free(batcher *b) {
    free(b->inputs);
    free(b->targets);
    b->inputs = b->targets = NULL;
}
