/* Random training batches from one token stream: each of the B rows is a
 * window of T+1 consecutive tokens starting at a uniformly drawn position;
 * inputs are window[0..T), targets window[1..T]. */
#ifndef DTX_CLI_BATCH_H
#define DTX_CLI_BATCH_H

#include <stdint.h>

#include "common/common.h"

typedef struct {
    const int32_t *tokens; /* borrowed */
    int64_t n_tokens;
    int64_t B, T;
    dtx_rng rng;
    int32_t *inputs;  /* [B, T] */
    int32_t *targets; /* [B, T] */
} batcher;

/* Needs n_tokens >= T + 1 (asserted: the caller reports that case itself).
 * DTX_ERR_NOMEM with a message if the buffers cannot be allocated. */
dtx_status batcher_init(batcher *b, const int32_t *tokens, int64_t n_tokens, int64_t B, int64_t T, uint64_t seed);
/* Fills inputs and targets with the next B windows. */
void batcher_next(batcher *b);
void batcher_free(batcher *b);

#endif
