/* The token stream difftx train reads: a token shard (mapped, docs/data.md)
 * or a text file of ids (read into memory). Both are sampled by the one rule
 * of dtx_shard_sample_batch: row r is the window of T + 1 tokens starting at
 * next(rng) mod (count - T), inputs its first T tokens, targets its last T;
 * and read in order by the rule of dtx_shard_sequential_batch with wrap. So a
 * shard and a text file of the same ids give the same batches. */
#ifndef DTX_TRAIN_TOKEN_SOURCE_H
#define DTX_TRAIN_TOKEN_SOURCE_H

#include <stdint.h>

#include "difftx.h"

typedef struct {
    const char *path;    /* borrowed */
    dtx_shard *shard;    /* a shard ...                 */
    int32_t *tokens;     /* ... or the ids of a text file */
    int64_t count;
} token_source;

/* Opens path (a shard when it starts with the shard magic) and checks every
 * id against vocab_size. Fails with the library's message. */
dtx_status source_open(token_source *s, const char *path, int64_t vocab_size);
void source_close(token_source *s);
/* B random windows; advances rng by exactly B draws. Needs count >= T + 1. */
void source_sample(const token_source *s, dtx_rng *rng, int64_t B, int64_t T, int32_t *inputs,
                   int32_t *targets);
/* B windows in order from *pos (advanced by T per row), restarting at 0 when
 * the next window does not fit. Needs count >= T + 1 and 0 <= *pos < count. */
void source_sequential(const token_source *s, int64_t *pos, int64_t B, int64_t T, int32_t *inputs,
                       int32_t *targets);
/* A 64-bit FNV-1a hash of the ids (as 4-byte little-endian values): the
 * checkpoint's record of which data a run trained on. */
uint64_t source_hash(const token_source *s);

#endif
