/* The per-ISA implementations of the hand-written SIMD kernels: one table
 * of function pointers per ISA level (as ggml's type_traits_cpu), picked
 * from dtx_isa_level() at each call (tile_gemm.c holds the portable
 * implementations and the table). Families:
 *   - the flash attention's tile steps behind tile_gemm.h (product,
 *     transpose, exp, softmax rows);
 *   - the one-row products of decoding: dot_heads and axpy_heads (cached
 *     decode attention's scores and weighted values) and gemv / gemv_bf16 /
 *     gemv_q8 / gemv_q4 / gemv_q8a8 (the linear layers of a single token,
 *     fp32, bf16 and quantised weights);
 *   - the bf16 tiles of the flash attention's bf16 mode behind tile_bf16.h
 *     (packers and the pair-dot product), native at AVX-512 BF16 only.
 * A kernel has one implementation per level that has its own (the others
 * point at the one below), so a new kernel is a new field and one entry in
 * each table; tests/kernels/simd_ops_test.c checks every entry.
 * The SIMD tables exist in the float build on x86-64 only (DTX_SIMD_X86);
 * their code is compiled with target attributes, so it builds with any
 * -march and runs only when the level allows it. Internal header. */
#ifndef DTX_SIMD_H
#define DTX_SIMD_H

#include "kernels/tile_gemm.h"

#if !defined(DTX_DOUBLE) && defined(__x86_64__) && defined(__GNUC__)
#define DTX_SIMD_X86 1
#else
#define DTX_SIMD_X86 0
#endif

typedef struct {
    const char *name;
    /* tile_gemm.h's entry points, same contracts */
    void (*gemm_tri)(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac, const real *B,
                     int64_t ldb, real *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);
    void (*transpose)(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols);
    void (*exp)(real *y, const real *x, int64_t n);
    void (*softmax_update)(real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale, real *m, real *l,
                           real *alpha);
    void (*exp_rows)(real *P, const real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale,
                     const real *lse);
    /* the cached attention's walks (kernels.h: dtx_dot_heads, dtx_axpy_heads, same contracts) */
    void (*dot_heads)(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off, const real *k,
                      int64_t ldk, int64_t n, real scale);
    void (*axpy_heads)(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off, const real *v,
                       int64_t ldv, int64_t n);
    /* the same two over rows of bf16 bits (dtx_dot_heads_bf16, dtx_axpy_heads_bf16) */
    void (*dot_heads_bf16)(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off,
                           const uint16_t *k, int64_t ldk, int64_t n, real scale);
    void (*axpy_heads_bf16)(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off,
                            const uint16_t *v, int64_t ldv, int64_t n);
    /* out[r] = Σ_c x[c]·w[r·K + c] for r < N (dtx_gemv), single-threaded */
    void (*gemv)(real *out, const real *x, const real *w, int64_t K, int64_t N);
    /* the same with w in bf16 bits (dtx_gemv_bf16; x in fp32, or bf16-rounded) */
    void (*gemv_bf16)(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N);
    /* the quantised linear layers of one token (kernels.h: dtx_gemv_q8, dtx_gemv_q4, dtx_gemv_q8a8) */
    void (*gemv_q8)(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N);
    void (*gemv_q4)(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N);
    void (*gemv_q8a8)(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale, int64_t K,
                      int64_t N);
    /* tile_bf16.h's entry points, same contracts */
    void (*bf16_pack_a)(uint16_t *dst, int64_t ldd, const float *src, int64_t sr, int64_t sc, int64_t rows,
                        int64_t cols);
    void (*bf16_pack_b)(uint16_t *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols);
    void (*bf16_pack_bt)(uint16_t *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols);
    void (*bf16_gemm_tri)(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B,
                          int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);
    /* gemv_q8 for nb inputs at once (x [nb, K], out[b·ldo + r]), each weight
     * widened once for all of them, every (row, input) summed in the order
     * gemv_q8 sums it (the same bits); NULL: rowdot.c calls gemv_q8 per input */
    void (*gemv_q8_nb)(float *out, int64_t ldo, const float *x, int64_t nb, const int8_t *q, const float *scale,
                       int64_t K, int64_t N);
    /* the same for gemv_q4 (each pair of groups looked up once for several inputs) */
    void (*gemv_q4_nb)(float *out, int64_t ldo, const float *x, int64_t nb, const uint8_t *q, const float *scale,
                       int64_t K, int64_t N);
} dtx_simd_ops;

/* Every cache line of [p, p + bytes) prefetched into L1. The cached
 * attention's walks fetch the next row this way while they read this one:
 * with a score's or weighted value's arithmetic between the loads, the
 * core's window reaches about one 3 KiB row ahead, too little to keep a
 * stream from memory going (Zen 5, 2 threads: 31-43 GB/s without, 56-73
 * with, whatever the distance from 1 to 8 rows). A prefetch never faults,
 * so one past a buffer's end is harmless. */
static inline void dtx_prefetch_span(const void *p, int64_t bytes) {
    const char *c = (const char *)p;
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 3);
    __builtin_prefetch(c + bytes - 1, 0, 3);
}

#if DTX_SIMD_X86
extern const dtx_simd_ops dtx_simd_avx2;        /* simd_avx2.c   */
extern const dtx_simd_ops dtx_simd_avx512;      /* simd_avx512.c */
extern const dtx_simd_ops dtx_simd_avx512_bf16; /* simd_avx512.c: the same with tile_bf16.c's native tiles */
/* The AVX-512 BF16 tiles (tile_bf16.c). */
void dtx_bf16_pack_a_avx512bf16(uint16_t *dst, int64_t ldd, const float *src, int64_t sr, int64_t sc, int64_t rows,
                                int64_t cols);
void dtx_bf16_pack_b_avx512bf16(uint16_t *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                                int64_t cols);
void dtx_bf16_pack_bt_avx512bf16(uint16_t *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                                 int64_t cols);
void dtx_bf16_gemm_tri_avx512bf16(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B,
                                  int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);
/* The AVX2 one-row products (AVX2 + FMA only). */
void dtx_dot_heads_avx2(float *s, int64_t lds, const float *x, int64_t d, int64_t m, const int64_t *off,
                        const float *k, int64_t ldk, int64_t n, float scale);
void dtx_axpy_heads_avx2(float *y, int64_t w, const float *p, int64_t ldp, int64_t m, const int64_t *off,
                         const float *v, int64_t ldv, int64_t n);
void dtx_dot_heads_bf16_avx2(float *s, int64_t lds, const float *x, int64_t d, int64_t m, const int64_t *off,
                             const uint16_t *k, int64_t ldk, int64_t n, float scale);
void dtx_axpy_heads_bf16_avx2(float *y, int64_t w, const float *p, int64_t ldp, int64_t m, const int64_t *off,
                              const uint16_t *v, int64_t ldv, int64_t n);
void dtx_gemv_avx2(float *out, const float *x, const float *w, int64_t K, int64_t N);
void dtx_gemv_bf16_avx2(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N);
/* The AVX2 quantised products, shared by both tables. */
void dtx_gemv_q8_avx2(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N);
void dtx_gemv_q4_avx2(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N);
void dtx_gemv_q8a8_avx2(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale, int64_t K,
                        int64_t N);
/* The AVX-512 one-row products (gemv_avx512.c): fp32, and int8 and bf16
 * weights widened, at both AVX-512 levels; bf16 by vdpbf16ps and 4-bit at
 * AVX-512 BF16. */
void dtx_gemv_avx512(float *out, const float *x, const float *w, int64_t K, int64_t N);
void dtx_gemv_q8_avx512(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N);
void dtx_gemv_q8_nb_avx512(float *out, int64_t ldo, const float *x, int64_t nb, const int8_t *q, const float *scale,
                           int64_t K, int64_t N);
void dtx_gemv_q4_nb_avx512bf16(float *out, int64_t ldo, const float *x, int64_t nb, const uint8_t *q,
                               const float *scale, int64_t K, int64_t N);
void dtx_gemv_bf16_avx512(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N);
void dtx_gemv_bf16_avx512bf16(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N);
void dtx_gemv_q4_avx512bf16(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N);
void dtx_gemv_q8_avx512bf16(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N);
void dtx_gemv_q8_nb_avx512bf16(float *out, int64_t ldo, const float *x, int64_t nb, const int8_t *q,
                               const float *scale, int64_t K, int64_t N);
#endif

/* The portable implementations (tile_gemm.c, rowdot.c): the reference the
 * SIMD ones are tested against, and the double build's only path. */
void dtx_tile_gemm_portable(int64_t M, int64_t N, int64_t K, const real *A, int64_t sar, int64_t sac, const real *B,
                            int64_t ldb, real *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);
void dtx_tile_transpose_portable(real *dst, int64_t ldd, const real *src, int64_t lds, int64_t rows, int64_t cols);
void dtx_tile_exp_portable(real *y, const real *x, int64_t n);
void dtx_tile_softmax_update_portable(real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale, real *m,
                                      real *l, real *alpha);
void dtx_tile_exp_rows_portable(real *P, const real *S, int64_t ld, int64_t M, int64_t N, int64_t diag, real scale,
                                const real *lse);
void dtx_dot_heads_portable(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off,
                            const real *k, int64_t ldk, int64_t n, real scale);
void dtx_axpy_heads_portable(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off,
                             const real *v, int64_t ldv, int64_t n);
void dtx_dot_heads_bf16_portable(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off,
                                 const uint16_t *k, int64_t ldk, int64_t n, real scale);
void dtx_axpy_heads_bf16_portable(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off,
                                  const uint16_t *v, int64_t ldv, int64_t n);
void dtx_gemv_portable(real *out, const real *x, const real *w, int64_t K, int64_t N);
void dtx_gemv_bf16_portable(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N);
void dtx_gemv_q8_portable(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N);
void dtx_gemv_q4_portable(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N);
void dtx_gemv_q8a8_portable(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale,
                            int64_t K, int64_t N);
void dtx_bf16_pack_a_portable(uint16_t *dst, int64_t ldd, const float *src, int64_t sr, int64_t sc, int64_t rows,
                              int64_t cols);
void dtx_bf16_pack_b_portable(uint16_t *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows, int64_t cols);
void dtx_bf16_pack_bt_portable(uint16_t *dst, int64_t ldp, const float *src, int64_t lds, int64_t rows,
                               int64_t cols);
void dtx_bf16_gemm_tri_portable(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint16_t *B,
                                int64_t ldp, float *C, int64_t ldc, int acc, dtx_tri tri, int64_t diag);
/* The portable bf16 tiles, for the tables' initialisers (all four at once). */
#define DTX_BF16_PORTABLE \
    dtx_bf16_pack_a_portable, dtx_bf16_pack_b_portable, dtx_bf16_pack_bt_portable, dtx_bf16_gemm_tri_portable

/* The implementation a level runs (tests compare them directly). */
const dtx_simd_ops *dtx_simd_for(dtx_isa lvl);
/* The one of the level in use now. */
const dtx_simd_ops *dtx_simd(void);

/* Shared index arithmetic of the tile kernels. */
static inline int64_t tile_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t tile_clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }
/* Number of valid keys of row r in a tile of width N (causal, see tile_gemm.h). */
static inline int64_t tile_valid_cols(int64_t diag, int64_t r, int64_t N) { return tile_clamp64(diag + r + 1, 0, N); }

#endif
