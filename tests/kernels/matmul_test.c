/* The oneDNN matmul (float build) against the plain reference kernel:
 *   fp32: every product within 1e-5 of the reference, relative to the
 *         largest reference element, over odd shapes, with the optional
 *         outputs left out and with accumulation into pre-filled buffers;
 *   bf16: within the rounding bound below, and not bit-identical to fp32;
 *   the primitive cache, thread safety and the f32 -> bf16 converter.
 *
 * bf16 bound (elementwise, rigorous): rounding an operand to bf16 (8
 * significant bits, round to nearest) changes it by at most u = 2^-8
 * relative, so each product a·b moves by at most (2u + u²)|a||b|; fp32
 * accumulation over R terms, in oneDNN and in the reference, adds at most
 * about R·2^-24 each. Hence for an output c = Σ_r a_r b_r (+ a pre-filled c0)
 *   |c_bf16 − c_ref| ≤ (2^-7 + 2^-16 + 2R·2^-24) · Σ_r |a_r b_r| + 2^-23 (|c0| + |c|).
 * Relative to the largest element this is about 2^-8 for random data (both
 * sides grow like √R); the max-element relative error is also checked
 * against the looser 2^-8·√R·4 (it stays near 2^-9 in practice). */
#include "../test.h"
#include "kernels/kernels.h"
#include "kernels/matmul_dnnl.h"
#include "io/safetensors.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(dtx_real) == sizeof(float), "the matmul tests are the fp32 build's: dtx_real is float");

static float *nan_f(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

static const int64_t SIZES[] = {1, 3, 17, 64, 130, 257};
enum { N_SIZES = sizeof SIZES / sizeof SIZES[0] };

/* One shape's operands, with pre-filled gradient buffers. */
typedef struct {
    int64_t M, K, N;
    float *x, *w, *dout, *dx0, *dw0;
} mm_case;

static mm_case mm_make(dtx_rng *r, int64_t M, int64_t K, int64_t N) {
    mm_case c = {M, K, N, randn(r, (size_t)(M * K), 0, 1), randn(r, (size_t)(N * K), 0, 1), randn(r, (size_t)(M * N), 0, 1),
                 randn(r, (size_t)(M * K), 0, 1), randn(r, (size_t)(N * K), 0, 1)};
    return c;
}

static void mm_free(mm_case *c) { free(c->x), free(c->w), free(c->dout), free(c->dx0), free(c->dw0); }

/* ------------------------------------------------------------------ fp32 */

/* Forward (into NaN-filled out: it must be overwritten), dx only, dw only,
 * both, each accumulating into the pre-filled buffers. */
static void check_fp32(const mm_case *c) {
    int64_t M = c->M, K = c->K, N = c->N;
    size_t nmn = (size_t)(M * N), nmk = (size_t)(M * K), nnk = (size_t)(N * K);
    const double tol = 1e-5;
    float *out = nan_f(nmn), *ref = nan_f(nmn);
    dtx_matmul_ref_forward(ref, c->x, c->w, M, K, N);
    dtx_matmul_forward(out, c->x, c->w, M, K, N, DTX_PREC_FP32);
    double e = rel_err_f(out, ref, nmn);
    CHECKF(e <= tol, "fwd %lldx%lldx%lld: rel err %.3g", (long long)M, (long long)K, (long long)N, e);

    float *rdx = dup_r(c->dx0, nmk), *rdw = dup_r(c->dw0, nnk);
    dtx_matmul_ref_backward(rdx, rdw, c->dout, c->x, c->w, M, K, N);
    /* dx only (x and dw may be NULL), dw only (w and dx may be NULL), both */
    float *dx = dup_r(c->dx0, nmk), *dw = dup_r(c->dw0, nnk);
    dtx_matmul_backward(dx, NULL, c->dout, NULL, c->w, M, K, N, DTX_PREC_FP32);
    dtx_matmul_backward(NULL, dw, c->dout, c->x, NULL, M, K, N, DTX_PREC_FP32);
    double ex = rel_err_f(dx, rdx, nmk), ew = rel_err_f(dw, rdw, nnk);
    CHECKF(ex <= tol && ew <= tol, "bwd alone %lldx%lldx%lld: dx %.3g dw %.3g", (long long)M, (long long)K,
           (long long)N, ex, ew);
    memcpy(dx, c->dx0, nmk * sizeof(float));
    memcpy(dw, c->dw0, nnk * sizeof(float));
    dtx_matmul_backward(dx, dw, c->dout, c->x, c->w, M, K, N, DTX_PREC_FP32);
    ex = rel_err_f(dx, rdx, nmk), ew = rel_err_f(dw, rdw, nnk);
    CHECKF(ex <= tol && ew <= tol, "bwd both %lldx%lldx%lld: dx %.3g dw %.3g", (long long)M, (long long)K,
           (long long)N, ex, ew);
    free(out), free(ref), free(rdx), free(rdw), free(dx), free(dw);
}

TEST(kernel_matmul_dnnl_fp32_matches_ref) {
    dtx_rng r;
    dtx_rng_seed(&r, 301);
    for (int a = 0; a < N_SIZES; a++)
        for (int b = 0; b < N_SIZES; b++)
            for (int d = 0; d < N_SIZES; d++) {
                mm_case c = mm_make(&r, SIZES[a], SIZES[b], SIZES[d]);
                check_fp32(&c);
                mm_free(&c);
                if (test_failed_now() > 10) return;
            }
}

/* Accumulation really adds: two backward calls give twice the gradient. */
TEST(kernel_matmul_dnnl_accumulates) {
    dtx_rng r;
    dtx_rng_seed(&r, 302);
    int64_t M = 64, K = 130, N = 17;
    mm_case c = mm_make(&r, M, K, N);
    float *dx = calloc((size_t)(M * K), sizeof(float)), *dw = calloc((size_t)(N * K), sizeof(float));
    float *dx1 = calloc((size_t)(M * K), sizeof(float)), *dw1 = calloc((size_t)(N * K), sizeof(float));
    dtx_matmul_backward(dx1, dw1, c.dout, c.x, c.w, M, K, N, DTX_PREC_FP32);
    dtx_matmul_backward(dx, dw, c.dout, c.x, c.w, M, K, N, DTX_PREC_FP32);
    dtx_matmul_backward(dx, dw, c.dout, c.x, c.w, M, K, N, DTX_PREC_FP32);
    for (int64_t i = 0; i < M * K; i++) dx1[i] *= 2;
    for (int64_t i = 0; i < N * K; i++) dw1[i] *= 2;
    CHECK(rel_err_f(dx, dx1, (size_t)(M * K)) < 1e-6);
    CHECK(rel_err_f(dw, dw1, (size_t)(N * K)) < 1e-6);
    free(dx), free(dw), free(dx1), free(dw1);
    mm_free(&c);
}

/* ------------------------------------------------------------------ bf16 */

/* |got − ref| against the bound in the header, elementwise. a [R] strided
 * by sa, b [R] strided by sb: the abs-sum Σ|a_r b_r| of one output. */
static double abs_dot(const float *a, int64_t sa, const float *b, int64_t sb, int64_t R) {
    double s = 0;
    for (int64_t r = 0; r < R; r++) s += fabs((double)a[r * sa] * b[r * sb]);
    return s;
}

static double bf16_tol(double absdot, int64_t R, double c0, double c) {
    return (0x1p-7 + 0x1p-16 + 2.0 * (double)R * 0x1p-24) * absdot + 0x1p-23 * (fabs(c0) + fabs(c));
}

/* Returns the number of elements outside the bound; *maxrel = max-element
 * relative error. out/ref [rows, cols]; element (i, j) has abs-sum f(i, j). */
typedef struct {
    const float *a, *b;
    int64_t a_row, a_step, b_row, b_step, R;
} absdot_spec;

static int64_t count_outside(const float *got, const float *ref, const float *c0, int64_t rows, int64_t cols,
                             absdot_spec s, double *maxrel) {
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            size_t k = (size_t)(i * cols + j);
            double ad = abs_dot(s.a + i * s.a_row, s.a_step, s.b + j * s.b_row, s.b_step, s.R);
            double tol = bf16_tol(ad, s.R, c0 ? c0[k] : 0, ref[k]);
            if (!(fabs((double)got[k] - ref[k]) <= tol)) bad++;
        }
    *maxrel = rel_err_f(got, ref, (size_t)(rows * cols));
    return bad;
}

static void check_bf16(const mm_case *c) {
    int64_t M = c->M, K = c->K, N = c->N;
    size_t nmn = (size_t)(M * N), nmk = (size_t)(M * K), nnk = (size_t)(N * K);
    float *out = nan_f(nmn), *ref = nan_f(nmn);
    dtx_matmul_ref_forward(ref, c->x, c->w, M, K, N);
    dtx_matmul_forward(out, c->x, c->w, M, K, N, DTX_PREC_BF16);
    double rel;
    /* out[i, j] = Σ_k x[i, k] w[j, k] */
    absdot_spec sf = {c->x, c->w, K, 1, K, 1, K};
    int64_t bad = count_outside(out, ref, NULL, M, N, sf, &rel);
    CHECKF(bad == 0 && rel <= 0x1p-8 * sqrt((double)K) * 4, "bf16 fwd %lldx%lldx%lld: %lld outside, rel %.3g",
           (long long)M, (long long)K, (long long)N, (long long)bad, rel);

    float *rdx = dup_r(c->dx0, nmk), *rdw = dup_r(c->dw0, nnk);
    dtx_matmul_ref_backward(rdx, rdw, c->dout, c->x, c->w, M, K, N);
    float *dx = dup_r(c->dx0, nmk), *dw = dup_r(c->dw0, nnk);
    dtx_matmul_backward(dx, dw, c->dout, c->x, c->w, M, K, N, DTX_PREC_BF16);
    /* dx[i, k] = Σ_j dout[i, j] w[j, k]; dw[j, k] = Σ_i dout[i, j] x[i, k] */
    absdot_spec sx = {c->dout, c->w, N, 1, 1, K, N};
    bad = count_outside(dx, rdx, c->dx0, M, K, sx, &rel);
    CHECKF(bad == 0 && rel <= 0x1p-8 * sqrt((double)N) * 4, "bf16 dx %lldx%lldx%lld: %lld outside, rel %.3g",
           (long long)M, (long long)K, (long long)N, (long long)bad, rel);
    absdot_spec sw = {c->dout, c->x, 1, N, 1, K, M};
    bad = count_outside(dw, rdw, c->dw0, N, K, sw, &rel);
    CHECKF(bad == 0 && rel <= 0x1p-8 * sqrt((double)M) * 4, "bf16 dw %lldx%lldx%lld: %lld outside, rel %.3g",
           (long long)M, (long long)K, (long long)N, (long long)bad, rel);
    /* one side alone */
    memcpy(dx, c->dx0, nmk * sizeof(float));
    memcpy(dw, c->dw0, nnk * sizeof(float));
    dtx_matmul_backward(dx, NULL, c->dout, NULL, c->w, M, K, N, DTX_PREC_BF16);
    dtx_matmul_backward(NULL, dw, c->dout, c->x, NULL, M, K, N, DTX_PREC_BF16);
    CHECK(count_outside(dx, rdx, c->dx0, M, K, sx, &rel) == 0);
    CHECK(count_outside(dw, rdw, c->dw0, N, K, sw, &rel) == 0);
    free(out), free(ref), free(rdx), free(rdw), free(dx), free(dw);
}

/* Both bf16 paths: oneDNN's native one where this CPU has it (else the
 * emulation again), then the emulation (bf16-rounded operands on the fp32
 * primitive), forced. */
#define FOR_EACH_BF16_PATH(emul)                                                                          \
    for (int emul = 0, emul##_prev_ = dtx_dnnl_bf16_force_emulation(0);                                   \
         emul < 2 || (dtx_dnnl_bf16_force_emulation(emul##_prev_), 0); emul++, dtx_dnnl_bf16_force_emulation(emul))

TEST(kernel_matmul_dnnl_bf16_within_rounding_bound) {
    dtx_rng r;
    dtx_rng_seed(&r, 303);
    FOR_EACH_BF16_PATH(emul) {
        /* every size on every axis, without the full cube (the bound is O(MNK)) */
        for (int a = 0; a < N_SIZES; a++)
            for (int b = 0; b < N_SIZES; b++) {
                int d = (a + 2 * b) % N_SIZES;
                mm_case c = mm_make(&r, SIZES[a], SIZES[b], SIZES[d]);
                check_bf16(&c);
                mm_free(&c);
            }
        CHECKF(!test_failed_now(), "%s bf16 path", emul ? "emulated" : dtx_matmul_bf16_native() ? "native" : "emulated");
    }
}

/* Where oneDNN multiplies bf16 natively, its products and the emulation's
 * agree to the order of fp32 sums: the same bf16 products, summed in fp32. */
TEST(kernel_matmul_dnnl_bf16_native_matches_emulated) {
    if (!dtx_matmul_bf16_native()) SKIP("oneDNN has no bf16 matmul here (ISA %s)", dtx_matmul_isa_name());
    dtx_rng r;
    dtx_rng_seed(&r, 306);
    int64_t M = 64, K = 130, N = 257; /* the shape of kernel_matmul_dnnl_bf16_is_not_fp32 */
    mm_case c = mm_make(&r, M, K, N);
    size_t nmn = (size_t)(M * N);
    float *nat = nan_f(nmn), *emu = nan_f(nmn);
    dtx_matmul_forward(nat, c.x, c.w, M, K, N, DTX_PREC_BF16);
    int prev = dtx_dnnl_bf16_force_emulation(1);
    CHECK(!dtx_matmul_bf16_native());
    dtx_matmul_forward(emu, c.x, c.w, M, K, N, DTX_PREC_BF16);
    dtx_dnnl_bf16_force_emulation(prev);
    double e = rel_err_f(emu, nat, nmn);
    CHECKF(e < 1e-5, "native vs emulated bf16: %.3g", e);
    free(nat), free(emu);
    mm_free(&c);
}

/* The bf16 path really ran: results differ from fp32 (and from the
 * reference), yet agree with a product of bf16-rounded operands in fp32;
 * on both paths. */
TEST(kernel_matmul_dnnl_bf16_is_not_fp32) {
    FOR_EACH_BF16_PATH(emul) {
        dtx_rng r;
        dtx_rng_seed(&r, 304);
        int64_t M = 64, K = 130, N = 257;
        mm_case c = mm_make(&r, M, K, N);
        size_t nmn = (size_t)(M * N), nmk = (size_t)(M * K), nnk = (size_t)(N * K);
        float *f32 = nan_f(nmn), *b16 = nan_f(nmn), *emu = nan_f(nmn);
        dtx_matmul_forward(f32, c.x, c.w, M, K, N, DTX_PREC_FP32);
        dtx_matmul_forward(b16, c.x, c.w, M, K, N, DTX_PREC_BF16);
        CHECK(memcmp(f32, b16, nmn * sizeof(float)) != 0);
        /* emulate: round the operands, multiply in fp32 */
        float *xr = malloc(nmk * sizeof(float)), *wr = malloc(nnk * sizeof(float));
        for (size_t i = 0; i < nmk; i++) xr[i] = dtx_bf16_to_f32(dtx_f32_to_bf16(c.x[i]));
        for (size_t i = 0; i < nnk; i++) wr[i] = dtx_bf16_to_f32(dtx_f32_to_bf16(c.w[i]));
        dtx_matmul_ref_forward(emu, xr, wr, M, K, N);
        double e_emu = rel_err_f(b16, emu, nmn), e_f32 = rel_err_f(b16, f32, nmn);
        CHECKF(e_emu < 1e-5, "bf16 vs rounded-operand fp32 product: %.3g", e_emu);
        CHECKF(e_f32 > 1e-4, "bf16 vs fp32: %.3g (too close: did the bf16 path run?)", e_f32);
        free(f32), free(b16), free(emu), free(xr), free(wr);
        mm_free(&c);
    }
}

/* ------------------------------------------------------------------ tiles */

/* The tile GEMM (matmul_tiles.c) behind dtx_matmul_forward/backward, forced
 * on at every ISA level (whatever this CPU would choose), and forced off:
 * the same checks as above on the cube of sizes, plus shapes past its
 * blocks: a contraction of more than one slice (K or N > 1024, odd, so the
 * bf16 pad row is read), more than one block of columns (> 512), row counts
 * that are not a multiple of its 24-row tasks. */
static const int64_t TILE_SHAPES[][3] = {{50, 1100, 600}, {25, 2049, 70}, {7, 777, 1030}, {130, 64, 1025}};

static void check_tiles_engine(int tiles, dtx_isa lvl) {
    int prev = dtx_matmul_set_tiles(tiles);
    /* the bf16 tiles differ only between the portable level and AVX-512 BF16 (the levels between use the portable ones) */
    const int bf16 = lvl == DTX_ISA_PORTABLE || lvl == DTX_ISA_AVX512_BF16;
    CHECK(dtx_matmul_tiles_used(64, DTX_PREC_FP32) == tiles && dtx_matmul_tiles_used(64, DTX_PREC_BF16) == tiles);
    dtx_rng r;
    dtx_rng_seed(&r, 310 + (uint64_t)lvl);
    for (int a = 0; a < N_SIZES; a++)
        for (int b = 0; b < N_SIZES; b++) {
            mm_case c = mm_make(&r, SIZES[a], SIZES[b], SIZES[(a + 2 * b) % N_SIZES]);
            check_fp32(&c);
            if (bf16) check_bf16(&c);
            mm_free(&c);
        }
    for (size_t i = 0; i < sizeof TILE_SHAPES / sizeof TILE_SHAPES[0]; i++) {
        mm_case c = mm_make(&r, TILE_SHAPES[i][0], TILE_SHAPES[i][1], TILE_SHAPES[i][2]);
        check_fp32(&c);
        if (bf16 && c.M * c.K * c.N < 10000000) check_bf16(&c); /* the elementwise bound costs O(MKN) in double */
        mm_free(&c);
    }
    dtx_matmul_set_tiles(prev);
    CHECKF(!test_failed_now(), "tiles %s at ISA %s", tiles ? "on" : "off", dtx_isa_name(lvl));
}

TEST(kernel_matmul_tiles_match_ref_at_every_level) {
    FOR_EACH_ISA(lvl) check_tiles_engine(1, lvl);
    check_tiles_engine(0, test_isa_top()); /* oneDNN (the tests above cover it at this level) */
}

/* Every element is summed by one thread in a fixed order: the same bits
 * with 1 and 2 threads; the forward overwrites (NaN-filled out), dx adds. */
TEST(kernel_matmul_tiles_thread_count_independent) {
    int prev = dtx_matmul_set_tiles(1);
    dtx_rng r;
    dtx_rng_seed(&r, 320);
    int64_t M = 97, K = 1100, N = 600;
    mm_case c = mm_make(&r, M, K, N);
    size_t nmn = (size_t)(M * N), nmk = (size_t)(M * K);
    for (int p = 0; p < 2; p++) {
        dtx_precision prec = p ? DTX_PREC_BF16 : DTX_PREC_FP32;
        float *o1 = nan_f(nmn), *o2 = nan_f(nmn), *d1 = dup_r(c.dx0, nmk), *d2 = dup_r(c.dx0, nmk);
        int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        dtx_matmul_forward(o1, c.x, c.w, M, K, N, prec);
        dtx_matmul_backward(d1, NULL, c.dout, NULL, c.w, M, K, N, prec);
        omp_set_num_threads(2);
        dtx_matmul_forward(o2, c.x, c.w, M, K, N, prec);
        dtx_matmul_backward(d2, NULL, c.dout, NULL, c.w, M, K, N, prec);
        omp_set_num_threads(nt);
        CHECKF(!memcmp(o1, o2, nmn * sizeof(float)) && !memcmp(d1, d2, nmk * sizeof(float)), "%s",
               p ? "bf16" : "fp32");
        free(o1), free(o2), free(d1), free(d2);
    }
    mm_free(&c);
    dtx_matmul_set_tiles(prev);
}

/* ------------------------------------------------------------------ cache */

TEST(kernel_matmul_primitive_cache) {
    dtx_rng r;
    dtx_rng_seed(&r, 305);
    int64_t M = 29, K = 31, N = 37; /* a shape no other test uses */
    mm_case c = mm_make(&r, M, K, N);
    float *out = nan_f((size_t)(M * N));
    size_t n0 = dtx_matmul_primitives_created();
    dtx_matmul_forward(out, c.x, c.w, M, K, N, DTX_PREC_FP32);
    size_t n1 = dtx_matmul_primitives_created();
    CHECKF(n1 == n0 + 1, "first forward created %zu primitives", n1 - n0);
    for (int i = 0; i < 5; i++) dtx_matmul_forward(out, c.x, c.w, M, K, N, DTX_PREC_FP32);
    CHECKF(dtx_matmul_primitives_created() == n1, "repeated forward created more primitives");
    dtx_matmul_forward(out, c.x, c.w, M, K, N, DTX_PREC_BF16); /* another precision: another primitive */
    CHECK(dtx_matmul_primitives_created() == n1 + 1);
    dtx_matmul_backward(c.dx0, c.dw0, c.dout, c.x, c.w, M, K, N, DTX_PREC_FP32); /* dx and dw */
    CHECK(dtx_matmul_primitives_created() == n1 + 3);
    dtx_matmul_backward(c.dx0, c.dw0, c.dout, c.x, c.w, M, K, N, DTX_PREC_FP32);
    dtx_matmul_backward(c.dx0, NULL, c.dout, c.x, c.w, M, K, N, DTX_PREC_FP32);
    CHECK(dtx_matmul_primitives_created() == n1 + 3);
    /* another thread count: another primitive (oneDNN plans for it) */
    int saved = omp_get_max_threads();
    omp_set_num_threads(saved + 1);
    dtx_matmul_forward(out, c.x, c.w, M, K, N, DTX_PREC_FP32);
    omp_set_num_threads(saved);
    CHECK(dtx_matmul_primitives_created() == n1 + 4);
    /* clearing empties the cache; results are unchanged afterwards */
    float *before = dup_r(out, (size_t)(M * N));
    dtx_matmul_cache_clear();
    dtx_matmul_forward(out, c.x, c.w, M, K, N, DTX_PREC_FP32);
    CHECK(dtx_matmul_primitives_created() == n1 + 5);
    CHECK(memcmp(out, before, (size_t)(M * N) * sizeof(float)) == 0);
    free(out), free(before);
    mm_free(&c);
}

/* When oneDNN fails the reference runs instead (one warning line on stderr,
 * once per process), so results are the reference's, bit for bit. */
TEST(kernel_matmul_dnnl_failure_falls_back) {
    dtx_rng r;
    dtx_rng_seed(&r, 308);
    int64_t M = 17, K = 64, N = 3;
    mm_case c = mm_make(&r, M, K, N);
    size_t nmn = (size_t)(M * N), nmk = (size_t)(M * K), nnk = (size_t)(N * K);
    float *out = nan_f(nmn), *ref = nan_f(nmn);
    float *dx = dup_r(c.dx0, nmk), *dw = dup_r(c.dw0, nnk), *rdx = dup_r(c.dx0, nmk), *rdw = dup_r(c.dw0, nnk);
    dtx_matmul_ref_forward(ref, c.x, c.w, M, K, N);
    dtx_matmul_ref_backward(rdx, rdw, c.dout, c.x, c.w, M, K, N);
    fprintf(stderr, "    (a oneDNN failure is forced next: a warning line is expected)\n");
    dtx_dnnl_matmul_force_failure(1);
    size_t n0 = dtx_matmul_primitives_created();
    for (int p = 0; p < 2; p++) {
        dtx_precision prec = p ? DTX_PREC_BF16 : DTX_PREC_FP32;
        dtx_matmul_forward(out, c.x, c.w, M, K, N, prec);
        CHECK(memcmp(out, ref, nmn * sizeof(float)) == 0);
        memcpy(dx, c.dx0, nmk * sizeof(float));
        memcpy(dw, c.dw0, nnk * sizeof(float));
        dtx_matmul_backward(dx, dw, c.dout, c.x, c.w, M, K, N, prec);
        CHECK(memcmp(dx, rdx, nmk * sizeof(float)) == 0 && memcmp(dw, rdw, nnk * sizeof(float)) == 0);
    }
    CHECK(dtx_matmul_primitives_created() == n0);
    dtx_dnnl_matmul_force_failure(0);
    dtx_matmul_forward(out, c.x, c.w, M, K, N, DTX_PREC_FP32); /* oneDNN again */
    CHECK(dtx_matmul_primitives_created() == n0 + 1);
    CHECK(rel_err_f(out, ref, nmn) < 1e-5);
    free(out), free(ref), free(dx), free(dw), free(rdx), free(rdw);
    mm_free(&c);
}

/* Zero-sized dimensions: nothing to multiply; forward with K = 0 is zeros. */
TEST(kernel_matmul_empty_dims) {
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 2, 3, 4}, out[4] = {NAN, NAN, NAN, NAN}, g[4] = {5, 5, 5, 5};
    dtx_matmul_forward(out, x, w, 2, 0, 2, DTX_PREC_FP32);
    for (int i = 0; i < 4; i++) CHECK(out[i] == 0);
    dtx_matmul_backward(g, g, x, x, w, 0, 2, 2, DTX_PREC_BF16);
    dtx_matmul_backward(g, g, x, x, w, 2, 2, 0, DTX_PREC_FP32);
    for (int i = 0; i < 4; i++) CHECK(g[i] == 5);
}

/* ------------------------------------------------------------------ threads */

typedef struct {
    mm_case c;
    dtx_precision p;
    int ok;
} thread_job;

static void *thread_run(void *arg) {
    thread_job *j = arg;
    const mm_case *c = &j->c;
    size_t nmn = (size_t)(c->M * c->N);
    float *out = nan_f(nmn), *first = nan_f(nmn);
    j->ok = 1;
    for (int it = 0; it < 20; it++) {
        dtx_matmul_forward(out, c->x, c->w, c->M, c->K, c->N, j->p);
        if (it == 0) memcpy(first, out, nmn * sizeof(float));
        else if (memcmp(out, first, nmn * sizeof(float)) != 0) j->ok = 0;
    }
    float *ref = nan_f(nmn);
    dtx_matmul_ref_forward(ref, c->x, c->w, c->M, c->K, c->N);
    if (!(rel_err_f(first, ref, nmn) < (j->p == DTX_PREC_BF16 ? 0.02 : 1e-5))) j->ok = 0;
    free(out), free(first), free(ref);
    return NULL;
}

/* Calls from several threads at once (different shapes and precisions
 * sharing the cache and the bf16 scratch) give each caller its own result. */
TEST(kernel_matmul_dnnl_thread_safe) {
    dtx_rng r;
    dtx_rng_seed(&r, 306);
    enum { NT = 4 };
    thread_job jobs[NT];
    pthread_t th[NT];
    for (int t = 0; t < NT; t++) {
        jobs[t].c = mm_make(&r, 40 + 7 * t, 64 + 13 * t, 50 + 3 * t);
        jobs[t].p = t % 2 ? DTX_PREC_BF16 : DTX_PREC_FP32;
    }
    for (int t = 0; t < NT; t++) REQUIRE(pthread_create(&th[t], NULL, thread_run, &jobs[t]) == 0);
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) {
        CHECKF(jobs[t].ok, "thread %d (%s) got a wrong or unstable result", t, dtx_precision_name(jobs[t].p));
        mm_free(&jobs[t].c);
    }
}

/* ------------------------------------------------------------------ f32 -> bf16 */

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

TEST(kernel_matmul_bf16_convert) {
    dtx_rng r;
    dtx_rng_seed(&r, 307);
    enum { N = 4099 }; /* not a multiple of the vector width: tails too */
    float *src = malloc(N * sizeof(float));
    static const uint32_t special[] = {
        0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f807fffu, /* ties to even (down, up), above, below half */
        0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, /* ±inf, ±0 */
        0x7f7fffffu, 0xff7fffffu,                           /* max float: rounds to ±inf */
        0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fbfffffu, /* NaNs: quiet, signalling, payloads */
    };
    enum { NS = sizeof special / sizeof special[0] };
    for (int i = 0; i < N; i++) src[i] = (float)(dtx_rng_normal(&r) * exp(8 * dtx_rng_normal(&r)));
    for (int i = 0; i < NS; i++) src[100 * i + 7] = from_bits(special[i]);
    uint16_t *got = malloc(N * sizeof(uint16_t)), *port = malloc(N * sizeof(uint16_t));
    src[0] = 1e-40f, src[1] = -3e-39f; /* subnormals round like any value */
    dtx_bf16_convert(got, src, N);
    dtx_bf16_convert_portable(port, src, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t want = dtx_f32_to_bf16(src[i]);
        bad += got[i] != want || port[i] != want;
    }
    CHECKF(bad == 0, "%d values differ from dtx_f32_to_bf16", bad);
    /* the emulation's rounding to float: the same values widened (NaN stays NaN) */
    float *rf = malloc(N * sizeof(float)), *rp = malloc(N * sizeof(float));
    dtx_bf16_round(rf, src, N);
    dtx_bf16_round_portable(rp, src, N);
    int bad_r = 0;
    for (int i = 0; i < N; i++) {
        float want = dtx_bf16_to_f32(dtx_f32_to_bf16(src[i]));
        bad_r += isnan(want) ? !(isnan(rf[i]) && isnan(rp[i]))
                             : memcmp(&rf[i], &want, 4) != 0 || memcmp(&rp[i], &want, 4) != 0;
    }
    CHECKF(bad_r == 0, "%d rounded floats differ from bf16(x) widened", bad_r);
    free(rf), free(rp);
    /* a big array goes through the parallel path */
    size_t big = (size_t)5 << 19; /* 2.5 chunks */
    float *bs = malloc(big * sizeof(float));
    uint16_t *bg = malloc(big * sizeof(uint16_t));
    for (size_t i = 0; i < big; i++) bs[i] = (float)dtx_rng_normal(&r);
    dtx_bf16_convert(bg, bs, big);
    size_t bad_big = 0;
    for (size_t i = 0; i < big; i++) bad_big += bg[i] != dtx_f32_to_bf16(bs[i]);
    CHECKF(bad_big == 0, "%zu of %zu differ", bad_big, big);
    float *bf = malloc(big * sizeof(float));
    dtx_bf16_round(bf, bs, big);
    bad_big = 0;
    for (size_t i = 0; i < big; i++) bad_big += bf[i] != dtx_bf16_to_f32(dtx_f32_to_bf16(bs[i]));
    CHECKF(bad_big == 0, "round: %zu of %zu differ", bad_big, big);
    free(bf);
    free(src), free(got), free(port), free(bs), free(bg);
}
