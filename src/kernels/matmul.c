/* Linear layer without bias, nn.Linear orientation: out = x · wᵀ.
 *
 * dtx_matmul_forward/backward run oneDNN (matmul_dnnl.c) in the float build
 * and fall back to the reference here when it fails; the double build always
 * runs the reference (oneDNN has no f64 matmul).
 *
 * The reference: plain blocked loops; every output element is owned by one
 * thread and summed in a fixed order, so results do not depend on the thread
 * count. Tiles keep a few rows of each operand in L2. */
#include "common/profile.h"
#include "kernels/kernels.h"
#include "kernels/matmul_dnnl.h"
#include "kernels/matmul_tiles.h"

#include <assert.h>

enum { TILE_R = 64, TILE_C = 256 };

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Σ a[i]·b[i]; `omp simd` allows the reassociation that vectorises it. */
static inline real dot(const real *a, const real *b, int64_t n) {
    real acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* y[n] += alpha · x[n] */
static inline void axpy(real *restrict y, real alpha, const real *restrict x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

/* x [M, K], w [N, K] -> out [M, N]. Both operands are read along K, so each
 * output is a contiguous dot product; tiles of rows of x and w share L2. */
void dtx_matmul_ref_forward(real *out, const real *x, const real *w, int64_t M, int64_t K, int64_t N) {
    assert(out && x && w && M >= 0 && K >= 0 && N >= 0);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i0 = 0; i0 < M; i0 += TILE_R) {
        for (int64_t j0 = 0; j0 < N; j0 += TILE_R) {
            int64_t i1 = min64(i0 + TILE_R, M), j1 = min64(j0 + TILE_R, N);
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) out[i * N + j] = dot(x + i * K, w + j * K, K);
        }
    }
}

/* dx [M, K] += dout [M, N] · w [N, K]: tiles of dx (rows × K-columns) are
 * independent; inside, rows of w are added in j order. */
static void matmul_backward_dx(real *dx, const real *dout, const real *w, int64_t M, int64_t K,
                               int64_t N) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i0 = 0; i0 < M; i0 += TILE_R) {
        for (int64_t k0 = 0; k0 < K; k0 += TILE_C) {
            int64_t i1 = min64(i0 + TILE_R, M), kw = min64(TILE_C, K - k0);
            for (int64_t j0 = 0; j0 < N; j0 += TILE_R) {
                int64_t j1 = min64(j0 + TILE_R, N);
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1; j++)
                        axpy(dx + i * K + k0, dout[i * N + j], w + j * K + k0, kw);
            }
        }
    }
}

/* dw [N, K] += doutᵀ [N, M] · x [M, K]: tiles of dw are independent; inside,
 * rows of x are added in i order. */
static void matmul_backward_dw(real *dw, const real *dout, const real *x, int64_t M, int64_t K,
                               int64_t N) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t j0 = 0; j0 < N; j0 += TILE_R) {
        for (int64_t k0 = 0; k0 < K; k0 += TILE_C) {
            int64_t j1 = min64(j0 + TILE_R, N), kw = min64(TILE_C, K - k0);
            for (int64_t i0 = 0; i0 < M; i0 += TILE_R) {
                int64_t i1 = min64(i0 + TILE_R, M);
                for (int64_t j = j0; j < j1; j++)
                    for (int64_t i = i0; i < i1; i++)
                        axpy(dw + j * K + k0, dout[i * N + j], x + i * K + k0, kw);
            }
        }
    }
}

/* dx [M, K] += dout · w ; dw [N, K] += doutᵀ · x   (dx, dw optional) */
void dtx_matmul_ref_backward(real *dx, real *dw, const real *dout, const real *x, const real *w,
                             int64_t M, int64_t K, int64_t N) {
    assert(dout && M >= 0 && K >= 0 && N >= 0);
    if (dx) {
        assert(w);
        matmul_backward_dx(dx, dout, w, M, K, N);
    }
    if (dw) {
        assert(x);
        matmul_backward_dw(dw, dout, x, M, K, N);
    }
}

/* ------------------------------------------------------------ dispatch */

/* The fp32 forward and dx products run on the tile GEMM (matmul_tiles.c)
 * where it measured faster than oneDNN (bench section gemm): CPUs with
 * full-width 512-bit datapaths (Zen 5), at ISA level AVX-512, on products of
 * at least TILES_MIN_ROWS rows (training's batch × T; decoding has its own
 * one-row kernels). Below that it packs the whole weight for few rows: a
 * prompt's prefill (Zen 5, 2026-12-04, fp32 activations, tiles against
 * oneDNN) took 31 against 15–17 ms at 64 rows and 108 against 94–103 at 512
 * on config S, 914 against 464 ms at 64 rows and 3,332 against 2,601 at 512
 * on a 0.8B BF16 file's widened blocks; at 1,024 rows the two were equal.
 * oneDNN keeps dw and bf16 (its bf16 products and its dw measured as fast
 * or faster there), and every product on CPUs where the tiles were not
 * measured faster (Zen 4, AVX2). */
enum { TILES_MIN_ROWS = 1024 };
static int tiles_mode = -1; /* dtx_matmul_set_tiles: 1 always, 0 never, -1 as above */

int dtx_matmul_set_tiles(int mode) {
    int prev = __atomic_load_n(&tiles_mode, __ATOMIC_RELAXED);
    __atomic_store_n(&tiles_mode, mode < 0 ? -1 : !!mode, __ATOMIC_RELAXED);
    return prev;
}

int dtx_matmul_tiles_used(int64_t M, dtx_precision p) {
#ifdef DTX_DOUBLE
    (void)M, (void)p;
    return 0;
#else
    int mode = __atomic_load_n(&tiles_mode, __ATOMIC_RELAXED);
    if (mode >= 0) return mode;
    return p == DTX_PREC_FP32 && M >= TILES_MIN_ROWS && dtx_isa_full_width() && dtx_isa_level() >= DTX_ISA_AVX512;
#endif
}

void dtx_matmul_forward_pre(real *out, const real *x, const real *w, int64_t M, int64_t K, int64_t N, dtx_precision p,
                            unsigned pre) {
    assert(out && x && w && M >= 0 && K >= 0 && N >= 0);
    assert(p == DTX_PREC_FP32 || p == DTX_PREC_BF16);
#ifndef DTX_DOUBLE
    if (M > 0 && N > 0 && dtx_matmul_tiles_used(M, p)) {
        dtx_matmul_tiles(out, N, M, N, K, x, K, w, K, 1, 0, p);
        return;
    }
    if (dtx_dnnl_matmul_forward(out, x, w, M, K, N, p, pre)) return;
#else
    (void)p, (void)pre;
#endif
    dtx_matmul_ref_forward(out, x, w, M, K, N);
}

static void matmul_backward_pre_run(real *dx, real *dw, const real *dout, const real *x, const real *w, int64_t M, int64_t K,
                                    int64_t N, dtx_precision p, unsigned pre) {
    assert(dout && M >= 0 && K >= 0 && N >= 0);
    assert(!dx || w);
    assert(!dw || x);
    assert(p == DTX_PREC_FP32 || p == DTX_PREC_BF16);
#ifndef DTX_DOUBLE
    if (dx && M > 0 && K > 0 && dtx_matmul_tiles_used(M, p)) {
        dtx_matmul_tiles(dx, K, M, K, N, dout, N, w, K, 0, 1, p);
        dx = NULL;
    }
    if (!dx && !dw) return;
    int did = dtx_dnnl_matmul_backward(dx, dw, dout, x, w, M, K, N, p, pre);
    if (did & DTX_DNNL_DID_DX) dx = NULL;
    if (did & DTX_DNNL_DID_DW) dw = NULL;
#else
    (void)p, (void)pre;
#endif
    if (dx || dw) dtx_matmul_ref_backward(dx, dw, dout, x, w, M, K, N);
}

void dtx_matmul_backward_pre(real *dx, real *dw, const real *dout, const real *x, const real *w, int64_t M, int64_t K,
                             int64_t N, dtx_precision p, unsigned pre) {
    DTX_PROF(DTX_PROF_MATMUL, 1, matmul_backward_pre_run(dx, dw, dout, x, w, M, K, N, p, pre));
}

void dtx_matmul_forward(real *out, const real *x, const real *w, int64_t M, int64_t K, int64_t N, dtx_precision p) {
    dtx_matmul_forward_pre(out, x, w, M, K, N, p, 0);
}

void dtx_matmul_backward(real *dx, real *dw, const real *dout, const real *x, const real *w, int64_t M, int64_t K,
                         int64_t N, dtx_precision p) {
    dtx_matmul_backward_pre(dx, dw, dout, x, w, M, K, N, p, 0);
}
