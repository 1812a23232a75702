/* The linear layer's products on difftx's own tile kernels (matmul_tiles.c),
 * internal to the kernels. Float build only. */
#ifndef DTX_MATMUL_TILES_H
#define DTX_MATMUL_TILES_H

#include <stdint.h>

#include "difftx.h"

#ifndef DTX_DOUBLE
/* C [M, N] (row stride ldc) = A·B (acc = 0) or += A·B (acc = 1), where
 * A(i, k) = A[i·lda + k] (row-major), and B(k, n) = B[k·ldb + n]
 * (trans_b = 0) or B[n·ldb + k] (trans_b = 1). p = DTX_PREC_BF16 rounds A
 * and B to bf16 (nearest even) as it packs them and sums in fp32, as the
 * bf16 matmuls do. Uses every OpenMP thread; call outside parallel regions.
 * Thread-safe (serialised). Results do not depend on the thread count. */
void dtx_matmul_tiles(float *C, int64_t ldc, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, int trans_b, int acc, dtx_precision p);
#endif

#endif
