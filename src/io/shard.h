/* Token shards (docs/data.md): the header layout, shared by src/io/shard.c,
 * src/io/tokens.c and the tests. Not part of the public API (include/difftx.h
 * has the "data" section).
 *
 *   offset size field
 *        0    8 magic "DTXTOKS\0"
 *        8    4 version (u32) = 1
 *       12    4 width (u32): bytes per token, 2 when vocab_size <= 65536, else 4
 *       16    8 vocab_size (u64), 1 .. 2^31
 *       24    8 count (u64): tokens after the header
 *       32    8 header_size (u64) = 64
 *       40    8 eos_id (i64): the document separator, -1 when none
 *       48    8 n_docs (u64): documents written, 0 when not recorded
 *       56    8 reserved (u64) = 0
 *       64      count tokens, each `width` bytes little-endian
 *
 * Every field is little-endian. */
#ifndef DTX_IO_SHARD_H
#define DTX_IO_SHARD_H

#include <stdint.h>

#include "common/common.h"

/* Largest vocabulary whose ids fit in 2 bytes, and the largest a shard holds
 * (ids are int32). */
#define DTX_SHARD_MAX_VOCAB16 65536ull
#define DTX_SHARD_MAX_VOCAB 2147483648ull

typedef struct {
    uint32_t version;
    uint32_t width;
    uint64_t vocab_size;
    uint64_t count;
    uint64_t header_size;
    int64_t eos_id;
    uint64_t n_docs;
    uint64_t reserved;
} dtx_shard_header;

/* The width the writer uses for a vocabulary: 2 or 4. */
uint32_t dtx_shard_width_for(uint64_t vocab_size);
/* Writes the magic and the fields into out[0, 64). */
void dtx_shard_header_encode(const dtx_shard_header *h, uint8_t out[DTX_SHARD_HEADER_SIZE]);
/* Reads the fields of in[0, 64) (the magic is not checked). */
void dtx_shard_header_decode(const uint8_t in[DTX_SHARD_HEADER_SIZE], dtx_shard_header *h);
/* 1 when the file at path starts with the shard magic, 0 when it does not
 * (or is shorter), -1 (with dtx_fail) when it cannot be opened or read. */
int dtx_shard_sniff(const char *path);

#endif
