/* The per-ISA implementations behind the tile entry points of tile_gemm.h:
 * one table of function pointers per ISA level (as ggml's type_traits_cpu),
 * picked by tile_gemm.c from dtx_isa_level() at each call. The SIMD tables
 * exist in the float build on x86-64 only (TILE_SIMD); their code is
 * compiled with target attributes, so it builds with any -march and runs
 * only when the level allows it. Internal header. */
#ifndef DTX_TILE_OPS_H
#define DTX_TILE_OPS_H

#include "kernels/tile_gemm.h"

#if !defined(DTX_DOUBLE) && defined(__x86_64__) && defined(__GNUC__)
#define TILE_SIMD 1
#else
#define TILE_SIMD 0
#endif

typedef struct {
    const char *name;
    void (*gemm_tri)(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac, const real *B,
                     int64_t ldb, real *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);
    void (*transpose)(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols);
    void (*exp)(real *y, const real *x, int64_t n);
    void (*softmax_update)(real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale, real *m, real *l,
                           real *alpha);
    void (*exp_rows)(real *P, const real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale,
                     const real *lse);
} dtx_tile_ops;

#if TILE_SIMD
extern const dtx_tile_ops dtx_tile_ops_avx2;   /* tile_avx2.c   */
extern const dtx_tile_ops dtx_tile_ops_avx512; /* tile_avx512.c */
#endif

/* The implementation a level runs (tests compare them directly). */
const dtx_tile_ops *dtx_tile_ops_for(dtx_isa lvl);

/* Shared index arithmetic of the tile kernels. */
static inline int64_t tile_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t tile_clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }
/* Number of valid keys of row r in a tile of width N (causal, see tile_gemm.h). */
static inline int64_t tile_valid_cols(int64_t diag, int64_t r, int64_t N) { return tile_clamp64(diag + r + 1, 0, N); }

#endif
