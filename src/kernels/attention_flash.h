/* Internal knobs of the fused flash attention (attention_flash.c), for the
 * tests and the benchmark; not part of the public API.
 *
 * Tiling: queries in tiles of BQ rows, keys in tiles of BK. The defaults are
 * tuned for AVX-512 in the float build; the double build (finite-difference
 * tests) uses tiny tiles so that short sequences already span many tiles and
 * exercise every edge (ragged tiles, tiles with fully masked rows).
 * Stack scratch per task is 4·BQ·BK elements, so BQ·BK is capped. */
#ifndef DTX_ATTENTION_FLASH_H
#define DTX_ATTENTION_FLASH_H

#include "common/common.h"

#ifdef DTX_DOUBLE
#define DTX_FLASH_BQ 8
#define DTX_FLASH_BK 4
#else
#define DTX_FLASH_BQ 128
#define DTX_FLASH_BK 64
#endif
#define DTX_FLASH_MAX_BQ 256
#define DTX_FLASH_MAX_TILE (64 * 128) /* BQ·BK limit */

/* Override the tile sizes (both > 0, bq ≤ DTX_FLASH_MAX_BQ, bq·bk ≤
 * DTX_FLASH_MAX_TILE); (0, 0) restores the defaults. Not thread-safe: call it
 * between kernel calls. Results depend on the tiling only through rounding.
 * The bf16 mode rounds odd sizes down to even (1 up to 2): its operand pairs
 * must not straddle a tile edge. */
void dtx_flash_set_tiles(int64_t bq, int64_t bk);

#endif
