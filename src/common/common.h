/* Internal helpers shared by every module: failure messages, checked
 * allocation, whole-file reads, atomic writes and read-only maps, a seeded
 * RNG. Not part of the public API. */
#ifndef DTX_COMMON_H
#define DTX_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "difftx.h"

typedef dtx_real real;

/* Seconds on a monotonic clock (for intervals). */
double dtx_now_s(void);

/* Record a one-line message for dtx_last_error() and return st. */
dtx_status dtx_fail(dtx_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dtx_clear_error(void);

/* Checked, 64-byte aligned allocation; NULL (and a message) on failure or
 * on an element count whose byte size overflows. Free with free(). */
void *dtx_alloc(size_t count, size_t elem_size);
void *dtx_calloc(size_t count, size_t elem_size);
/* Zero p[0, bytes) and hand the whole pages inside it back to the system
 * (they read as zero when touched again): memory a model no longer reads. */
void dtx_release_zero(void *p, size_t bytes);

/* Reads all of f (binary) into a malloc'd, NUL-terminated buffer; name is
 * used in the failure message (DTX_ERR_IO or DTX_ERR_NOMEM). */
dtx_status dtx_read_stream(FILE *f, const char *name, char **buf, size_t *len);
/* Opens path and reads it whole, as above. */
dtx_status dtx_read_file(const char *path, char **buf, size_t *len);

/* Writes data[0, len) to path atomically: to path.tmp.PID in the same
 * folder, fsync, then rename over path, so a reader never sees half a file
 * and a failure leaves any older file in place (the temporary is removed).
 * A path that exists and is not a regular file (/dev/stdout, a FIFO,
 * /dev/null) is written in place instead: renaming over it would replace the
 * device or pipe itself. On failure DTX_ERR_IO (DTX_ERR_NOMEM) with the
 * message "PATH: what: strerror". */
dtx_status dtx_write_file_atomic(const char *path, const void *data, size_t len);

/* A whole file mapped read-only (MAP_PRIVATE). An empty file has data NULL
 * and size 0. */
typedef struct {
    void *data;
    size_t size;
} dtx_mapped;
/* Maps the regular file at path whole. Refuses anything else without
 * blocking (a FIFO is opened O_NONBLOCK, then refused). On failure
 * DTX_ERR_IO, out left empty, and one of the messages "PATH: WHAT: ERR"
 * (what: the words for a failed open, e.g. "cannot open"; NULL gives
 * "PATH: ERR"), "PATH: cannot stat: ERR", "PATH: not a regular file",
 * "PATH: too large to map", "PATH: cannot mmap: ERR". */
dtx_status dtx_map_file(const char *path, const char *what, dtx_mapped *out);
/* Unmaps m (if mapped) and empties it; safe to call twice. */
void dtx_unmap_file(dtx_mapped *m);

/* Deterministic RNG (splitmix64 seeded xoshiro256**). */
typedef struct { uint64_t s[4]; } dtx_rng;
void dtx_rng_seed(dtx_rng *r, uint64_t seed);
uint64_t dtx_rng_next(dtx_rng *r);
double dtx_rng_uniform(dtx_rng *r);   /* [0, 1) */
double dtx_rng_normal(dtx_rng *r);    /* N(0, 1), Box-Muller */
/* splitmix64's mixing of x + 0x9e3779b97f4a7c15: a 64-bit hash, for seeds
 * made from (seed, place) tuples. */
uint64_t dtx_mix64(uint64_t x);

/* The bits of a float, and back. */
static inline uint32_t dtx_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float dtx_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 bits: the top half of a float. Rounding is to nearest, ties to even;
 * a NaN stays a quiet NaN (its payload cut, never rounded into inf). Shared
 * by the safetensors reader/writer and the bf16 kernels; inline so that
 * loops over them vectorise. */
static inline float dtx_bf16_to_f32(uint16_t h) { return dtx_bits_f32((uint32_t)h << 16); }
static inline uint16_t dtx_f32_to_bf16(float f) {
    uint32_t u = dtx_f32_bits(f);
    /* Plain rounding could carry a NaN's low payload into inf (or cut it to
     * the inf pattern): keep the top bits and force the quiet bit instead. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}
/* f rounded to the nearest bf16 value, as a float (the operands of
 * emulated bf16 products). */
static inline float dtx_bf16_round_f32(float f) { return dtx_bf16_to_f32(dtx_f32_to_bf16(f)); }

#endif
