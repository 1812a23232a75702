/* Safetensors reading and writing, with nothing trusted: every length,
 * offset, shape and dtype is checked before any byte is touched.
 * Format: 8-byte little-endian header length N, N bytes of JSON, then the
 * data; each tensor's data_offsets are [begin, end) relative to the end of
 * the header. See ../shared/spec/interop.md. */
#ifndef DTX_SAFETENSORS_H
#define DTX_SAFETENSORS_H

#include "common/common.h"

/* I8 and U8: the bytes of quantised weights (docs/quantize.md). */
typedef enum { DTX_ST_F32 = 0, DTX_ST_BF16 = 1, DTX_ST_F16 = 2, DTX_ST_I8 = 3, DTX_ST_U8 = 4 } dtx_st_dtype;

#define DTX_ST_MAX_DIMS 8

typedef struct {
    char *name;
    dtx_st_dtype dtype;
    int ndim;
    int64_t shape[DTX_ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data;  /* into the mapped file */
    size_t nbytes;
} dtx_st_tensor;

typedef struct dtx_st_file {
    dtx_mapped file;      /* the whole file, read-only (common.h: dtx_map_file) */
    int n_tensors;
    dtx_st_tensor *tensors;
    int n_meta;
    char **meta_keys;     /* __metadata__, all string values */
    char **meta_values;
} dtx_st_file;

/* Maps and validates the whole file. On failure returns DTX_ERR_IO or
 * DTX_ERR_FORMAT with a message naming the file and the tensor or key, and
 * leaves *f closed (safe to dtx_st_close). */
dtx_status dtx_st_open(dtx_st_file *f, const char *path);
void dtx_st_close(dtx_st_file *f);
const dtx_st_tensor *dtx_st_find(const dtx_st_file *f, const char *name);
const char *dtx_st_meta(const dtx_st_file *f, const char *key); /* NULL if absent */
/* Converts any stored dtype to real; dst holds t->numel elements. */
void dtx_st_to_real(const dtx_st_tensor *t, real *dst);
/* Rows first .. first + count of a tensor (a row: numel / shape[0] values;
 * a vector's rows are its elements), into dst. */
void dtx_st_rows_to_real(const dtx_st_tensor *t, int64_t first, int64_t count, real *dst);

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[DTX_ST_MAX_DIMS];
    const real *data;     /* numel = prod(shape) elements */
    /* instead of data: bytes of dtype raw_dtype, written as they are (I8,
     * U8) or from floats (F32), whatever dtx_st_write's bf16 says */
    const void *raw;
    dtx_st_dtype raw_dtype;
} dtx_st_out;

/* Writes atomically (temporary file in the same folder, fsync, rename).
 * meta: n_meta key/value pairs written under __metadata__. bf16 != 0 stores
 * BF16 (round to nearest even), otherwise F32 (the raw tensors: their own). */
dtx_status dtx_st_write(const char *path, const dtx_st_out *tensors, int n_tensors,
                        const char *const *meta_keys, const char *const *meta_values, int n_meta,
                        int bf16);

/* Scalar conversions used by the reader and writer (bf16: common.h). */
float dtx_f16_to_f32(uint16_t h);

#endif
