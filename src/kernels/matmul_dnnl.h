/* The oneDNN side of the linear layer (matmul_dnnl.c), internal to
 * src/kernels and its tests. kernels.h has the public matmul contract; these
 * entry points do the work in the float build and tell the caller when it
 * must fall back to the reference (oneDNN failed: one warning line is printed
 * per process). */
#ifndef DTX_MATMUL_DNNL_H
#define DTX_MATMUL_DNNL_H

#include <stddef.h>
#include <stdint.h>

#include "difftx.h"

#ifndef DTX_DOUBLE
/* out [M, N] = x [M, K] · w [N, K]ᵀ. Returns 1 when done, 0 when the caller
 * must run the reference (a zero dimension, or a oneDNN failure). */
int dtx_dnnl_matmul_forward(float *out, const float *x, const float *w, int64_t M, int64_t K, int64_t N,
                            dtx_precision p, unsigned pre);

enum { DTX_DNNL_DID_DX = 1, DTX_DNNL_DID_DW = 2 };
/* dx [M, K] += dout · w ; dw [N, K] += doutᵀ · x (each optional). Returns the
 * DTX_DNNL_DID_* bits of the parts it computed; the caller runs the
 * reference for the requested parts that are missing. pre: the DTX_MM_PRE_*
 * operands already rounded to bf16 (kernels.h). */
int dtx_dnnl_matmul_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, int64_t M,
                             int64_t K, int64_t N, dtx_precision p, unsigned pre);
/* Tests: on != 0 makes every primitive creation fail (the fallback path);
 * clears the cache either way. */
void dtx_dnnl_matmul_force_failure(int on);
/* Tests: on != 0 emulates bf16 (rounded operands, fp32 primitives) even
 * where oneDNN multiplies bf16 natively; clears the cache; returns the
 * previous setting. */
int dtx_dnnl_bf16_force_emulation(int on);
#endif

/* dst[i] = bf16(src[i]): round to nearest, ties to even; NaN stays a (quiet)
 * NaN; overflow rounds to ±inf; subnormals are rounded like any value — the
 * semantics of dtx_f32_to_bf16 (src/common/common.h), vectorised. Parallel
 * with OpenMP for big arrays; call outside parallel regions. */
void dtx_bf16_convert(uint16_t *dst, const float *src, size_t n);
/* The single-threaded loop behind it. */
void dtx_bf16_convert_portable(uint16_t *dst, const float *src, size_t n);
/* dst[i] = the float value of bf16(src[i]) (same rounding; dst may be src):
 * the operands of emulated bf16 products. Parallel like dtx_bf16_convert. */
void dtx_bf16_round(float *dst, const float *src, size_t n);
void dtx_bf16_round_portable(float *dst, const float *src, size_t n);

#endif
