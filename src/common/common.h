/* Internal helpers shared by every module: failure messages, checked
 * allocation, a seeded RNG. Not part of the public API. */
#ifndef DTX_COMMON_H
#define DTX_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "difftx.h"

typedef dtx_real real;

/* Record a one-line message for dtx_last_error() and return st. */
dtx_status dtx_fail(dtx_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dtx_clear_error(void);

/* Checked, 64-byte aligned allocation; NULL (and a message) on failure or
 * on an element count whose byte size overflows. Free with free(). */
void *dtx_alloc(size_t count, size_t elem_size);
void *dtx_calloc(size_t count, size_t elem_size);

/* Reads all of f (binary) into a malloc'd, NUL-terminated buffer; name is
 * used in the failure message (DTX_ERR_IO or DTX_ERR_NOMEM). */
dtx_status dtx_read_stream(FILE *f, const char *name, char **buf, size_t *len);
/* Opens path and reads it whole, as above. */
dtx_status dtx_read_file(const char *path, char **buf, size_t *len);

/* Deterministic RNG (splitmix64 seeded xoshiro256**). */
typedef struct { uint64_t s[4]; } dtx_rng;
void dtx_rng_seed(dtx_rng *r, uint64_t seed);
uint64_t dtx_rng_next(dtx_rng *r);
double dtx_rng_uniform(dtx_rng *r);   /* [0, 1) */
double dtx_rng_normal(dtx_rng *r);    /* N(0, 1), Box-Muller */

#endif
