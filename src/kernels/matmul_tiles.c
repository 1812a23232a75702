/* The linear layer's forward and dx products on difftx's own tile kernels: a
 * blocked GEMM (Goto's loop order) around the register-blocked micro-kernels
 * of the flash attention (dtx_tile_gemm: 6 rows × 64 columns of fp32
 * accumulators; dtx_bf16_gemm_tri: the same with vdpbf16ps).
 *
 * Why: on a Zen 5 (two full-width 512-bit FMAs a cycle) oneDNN 2.6's fp32
 * matmul reaches 68–87% of the peak on the training shapes, these kernels
 * 81–93% in the forward and dx products (bench section gemm measures both
 * side by side). oneDNN keeps the dw product (a transposed A: packing it
 * measured slower), bf16 (as fast or faster on config L's shapes) and the
 * machines where the tiles were not measured faster: matmul.c,
 * dtx_matmul_tiles_used, decides.
 *
 * C [M, N] (=|+=) A·B with A(i, k) = A[i·lda + k] (rows of A contiguous) and
 * B(k, n) either row-major (B[k·ldb + n]) or transposed (B[n·ldb + k]):
 *   the contraction in slices of at most KC_MAX (as few, as even, as
 *   possible: a slice of the whole of K keeps C's tile in registers from the
 *   first k to the last); for each block of NC columns and each slice:
 *     the threads pack the slice's B block into panels of 64 columns (fp32:
 *     [kc][64] rows, the micro-kernel's B; bf16: pair-packed, rounding as it
 *     packs, so no separate rounding pass reads the operand), then
 *     each thread takes whole blocks of MB rows of C and runs every panel
 *     over them (bf16: the block's rows of A packed once, on its stack).
 * Each element of C is summed by one thread, its slices in order: results
 * do not depend on the thread count.
 *
 * No allocation: the packed B block lives in this module's static buffers,
 * guarded by a mutex (calls are serialised, as oneDNN's are: each call
 * already uses every thread). Float build only. */
#include "kernels/matmul_tiles.h"

#include <pthread.h>
#include <string.h>

#include "kernels/tile_bf16.h"
#include "kernels/tile_gemm.h"

#ifndef DTX_DOUBLE

/* Blocking, from a sweep on a Zen 5 (KC 128–1024 × NC 64–512 × MB 6–96 on
 * the config S and L shapes, M = 8192 tokens): the whole contraction up to
 * 1024 in one slice, then a packed B block of about 1.5 MiB or less (NC 512
 * up to kc 768, else 256), 24 rows a task. Within 1–2% of the best of the
 * sweep on every shape measured. */
enum { NR = 64, KC_MAX = 1024, MB = 24, B_FLOATS = 768 * 512 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) float bpack[B_FLOATS];
static _Alignas(64) dtx_bf16 bpack16[B_FLOATS];

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Panel j of the fp32 block: B(k0 + k, n0 + c) at dst[k·64 + c] for k < kc, c < nw. */
static void pack_panel_f32(float *dst, const float *B, int64_t ldb, int trans, int64_t k0, int64_t kc, int64_t n0,
                           int64_t nw) {
    if (trans) dtx_tile_transpose(dst, NR, B + n0 * ldb + k0, ldb, nw, kc);
    else
        for (int64_t k = 0; k < kc; k++) memcpy(dst + k * NR, B + (k0 + k) * ldb + n0, sizeof(float) * (size_t)nw);
}

/* The same in bf16, pair-packed with 64 words per pair row (an odd kc gets a zero pad row). */
static void pack_panel_bf16(dtx_bf16 *dst, const float *B, int64_t ldb, int trans, int64_t k0, int64_t kc, int64_t n0,
                            int64_t nw) {
    if (trans) dtx_bf16_pack_bt(dst, NR, B + n0 * ldb + k0, ldb, nw, kc);
    else dtx_bf16_pack_b(dst, NR, B + k0 * ldb + n0, ldb, kc, nw);
}

static void gemm_blocked(float *C, int64_t ldc, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, int trans, int acc, int bf16) {
    const int64_t slices = (K + KC_MAX - 1) / KC_MAX;
    const int64_t kc_max = ((K + slices - 1) / slices + 1) & ~(int64_t)1; /* even: bf16 pairs never split */
    const int64_t NC = kc_max <= 768 ? 512 : 256, row_blocks = (M + MB - 1) / MB;
    /* a small product is not worth a team's barriers (two per block and slice) */
    const int team = (double)M * (double)N * (double)K >= (double)(1 << 21) && row_blocks > 1;
#pragma omp parallel if (team)
    {
        _Alignas(64) dtx_bf16 apack[MB * KC_MAX]; /* bf16: this thread's rows of A, rounded */
        for (int64_t n0 = 0; n0 < N; n0 += NC) {
            const int64_t nc = min64(NC, N - n0), panels = (nc + NR - 1) / NR;
            for (int64_t k0 = 0; k0 < K; k0 += kc_max) {
                const int64_t kc = min64(kc_max, K - k0), kp = (kc + 1) & ~(int64_t)1;
#pragma omp for schedule(static)
                for (int64_t j = 0; j < panels; j++) {
                    int64_t nw = min64(NR, nc - j * NR);
                    if (bf16) pack_panel_bf16(bpack16 + j * kp * NR, B, ldb, trans, k0, kc, n0 + j * NR, nw);
                    else pack_panel_f32(bpack + j * kc * NR, B, ldb, trans, k0, kc, n0 + j * NR, nw);
                }
                const int c_acc = acc || k0 > 0;
#pragma omp for schedule(static)
                for (int64_t b = 0; b < row_blocks; b++) {
                    const int64_t i0 = b * MB, mb = min64(MB, M - i0);
                    const float *a = A + i0 * lda + k0;
                    if (bf16) dtx_bf16_pack_a(apack, kp, a, lda, 1, mb, kc);
                    for (int64_t j = 0; j < panels; j++) {
                        int64_t nw = min64(NR, nc - j * NR);
                        float *c = C + i0 * ldc + n0 + j * NR;
                        if (bf16)
                            dtx_bf16_gemm_tri(mb, nw, kp, apack, kp, bpack16 + j * kp * NR, NR, c, ldc, c_acc,
                                              DTX_TRI_NONE, 0);
                        else dtx_tile_gemm(mb, nw, kc, a, lda, 1, bpack + j * kc * NR, NR, c, ldc, c_acc);
                    }
                }
            }
        }
    }
}

void dtx_matmul_tiles(float *C, int64_t ldc, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, int trans_b, int acc, dtx_precision p) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!acc)
            for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
    pthread_mutex_lock(&lock);
    gemm_blocked(C, ldc, M, N, K, A, lda, B, ldb, trans_b, acc, p == DTX_PREC_BF16);
    pthread_mutex_unlock(&lock);
}

#endif
