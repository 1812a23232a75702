/* The one-row products of decoding (kernels.h: dtx_dot_rows, dtx_axpy_rows,
 * dtx_gemv, dtx_gemv_bf16; the quantised dtx_gemv_q8, dtx_gemv_q4 and
 * dtx_gemv_q8a8, whose portable versions are quant_linear.c's): the portable
 * implementations and the entry points, which
 * run the ISA level's implementation (simd.h). A token's decode step is
 * memory-bound: each weight and each cached key is read once, so these
 * kernels exist to keep enough loads in flight (several rows at once,
 * independent accumulators), not to save arithmetic. */
#include <assert.h>
#include <omp.h>
#include <stdatomic.h>

#include "kernels/kernels.h"
#include "kernels/simd.h"

/* Below this many multiply-adds a product runs on one thread. */
#define GEMV_PAR_MIN ((int64_t)1 << 15)

/* The portable dot and axpy rows over rows of W, each value made real by
 * WIDEN: fp32 as it is; bf16 bits widened exactly, then the same arithmetic
 * in the same order, so rows of bf16 and their widened copies give the same
 * bits. */
#define DOT_ROWS_PORTABLE(W, WIDEN)                                                                        \
    for (int64_t t = 0; t < n; t++) {                                                                      \
        const W *kr = k + t * ldk;                                                                         \
        real acc = 0;                                                                                      \
        _Pragma("omp simd reduction(+ : acc)") for (int64_t c = 0; c < d; c++) acc += x[c] * WIDEN(kr[c]); \
        s[t * lds] = scale * acc;                                                                          \
    }
#define AXPY_ROWS_PORTABLE(W, WIDEN)                                                                       \
    for (int64_t t = 0; t < n; t++) {                                                                      \
        const W *vr = v + t * ldv;                                                                         \
        real a = p[t];                                                                                     \
        _Pragma("omp simd") for (int64_t c = 0; c < w; c++) y[c] += a * WIDEN(vr[c]);                     \
    }
#define AS_REAL(v) (v)
#define BF16_AS_REAL(v) ((real)dtx_bf16_to_f32(v))

void dtx_dot_rows_portable(real *s, int64_t lds, const real *x, const real *k, int64_t ldk, int64_t n, int64_t d,
                           real scale) {
    DOT_ROWS_PORTABLE(real, AS_REAL)
}

void dtx_axpy_rows_portable(real *y, int64_t w, const real *p, const real *v, int64_t ldv, int64_t n) {
    AXPY_ROWS_PORTABLE(real, AS_REAL)
}

void dtx_dot_rows_bf16_portable(real *s, int64_t lds, const real *x, const uint16_t *k, int64_t ldk, int64_t n,
                                int64_t d, real scale) {
    DOT_ROWS_PORTABLE(uint16_t, BF16_AS_REAL)
}

void dtx_axpy_rows_bf16_portable(real *y, int64_t w, const real *p, const uint16_t *v, int64_t ldv, int64_t n) {
    AXPY_ROWS_PORTABLE(uint16_t, BF16_AS_REAL)
}

void dtx_gemv_portable(real *out, const real *x, const real *w, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++) {
        const real *wr = w + n * K;
        real acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < K; k++) acc += x[k] * wr[k];
        out[n] = acc;
    }
}

void dtx_gemv_bf16_portable(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++) {
        const uint16_t *wr = w + n * K;
        float acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < K; k++) acc += x[k] * dtx_bf16_to_f32(wr[k]);
        out[n] = acc;
    }
}

void dtx_dot_rows(real *s, int64_t lds, const real *x, const real *k, int64_t ldk, int64_t n, int64_t d, real scale) {
    if (n > 0) dtx_simd()->dot_rows(s, lds, x, k, ldk, n, d, scale);
}

void dtx_axpy_rows(real *y, int64_t w, const real *p, const real *v, int64_t ldv, int64_t n) {
    if (n > 0 && w > 0) dtx_simd()->axpy_rows(y, w, p, v, ldv, n);
}

void dtx_dot_rows_bf16(real *s, int64_t lds, const real *x, const uint16_t *k, int64_t ldk, int64_t n, int64_t d,
                       real scale) {
    if (n > 0) dtx_simd()->dot_rows_bf16(s, lds, x, k, ldk, n, d, scale);
}

void dtx_axpy_rows_bf16(real *y, int64_t w, const real *p, const uint16_t *v, int64_t ldv, int64_t n) {
    if (n > 0 && w > 0) dtx_simd()->axpy_rows_bf16(y, w, p, v, ldv, n);
}

/* Rows split over the threads: each thread owns a contiguous block (one long
 * stream that the hardware prefetchers follow) and takes it from the front,
 * a quarter of what is left at a time (at least GEMV_CHUNK rows); a thread
 * done with its own takes GEMV_CHUNK rows at a time from the back of
 * another's block. Why: the two cores of these machines do not finish equal halves at
 * the same time (their share of the memory bandwidth moves), and with a
 * static split the first to finish waited at the barrier, 5–8% of a decode
 * step. Every chunk starts at a multiple of 8 rows (the kernels' blocks) and
 * each row is computed by one thread in the same block position, so the
 * result does not depend on the thread count or on who ran which chunk.
 * Small products stay on the calling thread. */
enum { GEMV_CHUNK = 16, GEMV_MAX_THREADS = 64 };

static int worth_splitting(int64_t work, int64_t N) {
    return work >= GEMV_PAR_MIN && !omp_in_parallel() && omp_get_max_threads() > 1 && N < ((int64_t)1 << 31);
}

/* One thread's rows not yet taken, [lo, hi) packed in one word so that the
 * owner (front) and a thief (back) take chunks by compare-and-swap. */
typedef struct {
    _Alignas(64) _Atomic uint64_t range;
} row_range;

static uint64_t pack_range(int64_t lo, int64_t hi) { return (uint64_t)hi << 32 | (uint64_t)lo; }

/* Thread id's block of N rows over nt threads. */
static void block_rows(int64_t N, int id, int nt, int64_t *r0, int64_t *r1) {
    *r0 = (N * id / nt) & ~(int64_t)7;
    *r1 = id == nt - 1 ? N : (N * (id + 1) / nt) & ~(int64_t)7;
}

/* Takes a chunk from the front (back = 0) or the back of r: 1 and [*a, *b), or 0 when none is left.
 * chunk: the least rows a take gets (a multiple of 8); cap: the most a front take gets. */
static int take_chunk(row_range *r, int back, int64_t chunk, int64_t cap, int64_t *a, int64_t *b) {
    uint64_t v = atomic_load_explicit(&r->range, memory_order_relaxed), nv;
    do {
        int64_t lo = (int64_t)(v & 0xFFFFFFFFu), hi = (int64_t)(v >> 32);
        if (lo >= hi) return 0;
        if (back) {
            int64_t s = (hi - chunk) & ~(int64_t)7; /* hi may be N, not a multiple of 8 */
            *a = s > lo ? s : lo, *b = hi, nv = pack_range(lo, *a);
        } else { /* a quarter of what is left, at least a chunk: few calls, each with its own setup */
            int64_t take = ((hi - lo) / 4) & ~(int64_t)7;
            if (take < chunk) take = chunk;
            if (take > cap) take = cap;
            *a = lo, *b = lo + take < hi ? lo + take : hi, nv = pack_range(*b, hi);
        }
    } while (!atomic_compare_exchange_weak_explicit(&r->range, &v, nv, memory_order_relaxed, memory_order_relaxed));
    return 1;
}

/* CALL(r0, n) computes rows [r0, r0 + n) of an N-row product of width K
 * (WORK multiply-adds in all): on the calling thread, or over the threads
 * when worth it, in chunks of CHUNK to CAP rows (see take_chunk). The
 * blocks are set before the team starts (no barrier), for the team size
 * asked for; a team that came out smaller leaves blocks that the others
 * take. */
#define GEMV_SPLIT_CHUNKS(WORK, N, CHUNK, CAP, CALL)                                            \
    do {                                                                                        \
        if (!worth_splitting(WORK, N)) {                                                        \
            CALL(0, N);                                                                         \
            break;                                                                              \
        }                                                                                       \
        row_range rr_[GEMV_MAX_THREADS];                                                        \
        int nb_ = omp_get_max_threads() < GEMV_MAX_THREADS ? omp_get_max_threads() : GEMV_MAX_THREADS; \
        for (int t_ = 0; t_ < nb_; t_++) {                                                      \
            int64_t r0_, r1_;                                                                   \
            block_rows(N, t_, nb_, &r0_, &r1_);                                                 \
            atomic_init(&rr_[t_].range, pack_range(r0_, r1_));                                  \
        }                                                                                       \
        _Pragma("omp parallel num_threads(nb_)") {                                              \
            int id_ = omp_get_thread_num();                                                     \
            int64_t a_, b_;                                                                     \
            while (id_ < nb_ && take_chunk(&rr_[id_], 0, CHUNK, CAP, &a_, &b_)) CALL(a_, b_ - a_); \
            for (int o_ = 1; o_ <= nb_; o_++)                                                   \
                while (take_chunk(&rr_[(id_ + o_) % nb_], 1, CHUNK, CAP, &a_, &b_)) CALL(a_, b_ - a_); \
        }                                                                                       \
    } while (0)
#define GEMV_SPLIT(K, N, CALL) GEMV_SPLIT_CHUNKS((K) * (N), N, GEMV_CHUNK, INT32_MAX, CALL)

/* The batched products (kernels.h, "Several inputs against one weight"):
 * the rows in chunks of about BATCH_CHUNK_BYTES of weights (in L2 while the
 * nb inputs pass over them, so the weights come from memory once), each
 * input against a chunk by the one-input kernel, so every result has the
 * bits of the one-input product. One input is the one-input product, with
 * its own chunking (tuned for a single stream). */
enum { BATCH_CHUNK_BYTES = 96 * 1024 };
static int64_t batch_chunk(int64_t row_bytes) {
    int64_t c = (BATCH_CHUNK_BYTES / (row_bytes > 0 ? row_bytes : 1)) & ~(int64_t)7;
    return c < GEMV_CHUNK ? GEMV_CHUNK : c;
}
#define GEMV_SPLIT_BATCH(K, N, NB, ROW_BYTES, CALL)                                             \
    do {                                                                                        \
        int64_t ch_ = batch_chunk(ROW_BYTES);                                                   \
        GEMV_SPLIT_CHUNKS((K) * (N) * (NB), N, ch_, ch_, CALL);                                 \
    } while (0)

void dtx_gemv(real *out, const real *x, const real *w, int64_t K, int64_t N) {
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n) o->gemv(out + (r0), x, w + (r0) * K, K, n)
    GEMV_SPLIT(K, N, ROWS);
#undef ROWS
}

#ifndef DTX_DOUBLE
void dtx_gemv_bf16(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N) {
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n) o->gemv_bf16(out + (r0), x, w + (r0) * K, K, n)
    GEMV_SPLIT(K, N, ROWS);
#undef ROWS
}
#endif

void dtx_gemv_q8(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N) {
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n) o->gemv_q8(out + (r0), x, q + (r0) * K, scale + (r0), K, n)
    GEMV_SPLIT(K, N, ROWS);
#undef ROWS
}

void dtx_gemv_q4(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N) {
    const dtx_simd_ops *o = dtx_simd();
    int64_t rb = dtx_q4_row_bytes(K), ng = dtx_q4_groups(K);
#define ROWS(r0, n) o->gemv_q4(out + (r0), x, q + (r0) * rb, scale + (r0) * ng, K, n)
    GEMV_SPLIT(K, N, ROWS);
#undef ROWS
}

void dtx_gemv_q8a8(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale, int64_t K,
                   int64_t N) {
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n) o->gemv_q8a8(out + (r0), xq, xscale, q + (r0) * K, scale + (r0), K, n)
    GEMV_SPLIT(K, N, ROWS);
#undef ROWS
}

/* ---- several one-row products, one pass over the threads */

/* Rows [r0, r0 + n) of part p: the call its one-part product makes for them. */
static void part_rows(const dtx_simd_ops *o, const dtx_gemv_part *p, int64_t K, int64_t r0, int64_t n) {
    switch (p->kind) {
    case DTX_ROWS_REAL: o->gemv(p->out + r0, p->x, (const real *)p->w + r0 * K, K, n); break;
#ifndef DTX_DOUBLE /* the bf16 and quantised kernels are float's */
    case DTX_ROWS_BF16: o->gemv_bf16(p->out + r0, p->x, (const uint16_t *)p->w + r0 * K, K, n); break;
    case DTX_ROWS_Q8: o->gemv_q8(p->out + r0, p->x, (const int8_t *)p->w + r0 * K, p->scale + r0, K, n); break;
    case DTX_ROWS_Q4:
        o->gemv_q4(p->out + r0, p->x, (const uint8_t *)p->w + r0 * dtx_q4_row_bytes(K),
                   p->scale + r0 * dtx_q4_groups(K), K, n);
        break;
    case DTX_ROWS_Q8A8:
        o->gemv_q8a8(p->out + r0, p->x, p->xscale, (const int8_t *)p->w + r0 * K, p->scale + r0, K, n);
        break;
#endif
    default: break;
    }
}

enum { GEMV_MAX_PARTS = 8 };

/* The parts' rows in one index space, part i from start[i] (a multiple of
 * 8: every chunk then begins where the kernels' 8-row blocks of that part
 * begin, as in the part's own product), the gaps between parts empty. */
void dtx_gemv_parts(const dtx_gemv_part *parts, int n_parts, int64_t K) {
    assert(n_parts >= 0 && n_parts <= GEMV_MAX_PARTS);
    const dtx_simd_ops *o = dtx_simd();
    int64_t start[GEMV_MAX_PARTS + 1];
    start[0] = 0;
    for (int i = 0; i < n_parts; i++) start[i + 1] = start[i] + (parts[i].N + 7) / 8 * 8;
    const int64_t R = n_parts ? start[n_parts - 1] + parts[n_parts - 1].N : 0;
#define ROWS(r0, n)                                                                             \
    for (int i_ = 0; i_ < n_parts; i_++) {                                                      \
        int64_t lo_ = (r0) > start[i_] ? (r0) : start[i_];                                      \
        int64_t hi_ = (r0) + (n) < start[i_] + parts[i_].N ? (r0) + (n) : start[i_] + parts[i_].N; \
        if (lo_ < hi_) part_rows(o, &parts[i_], K, lo_ - start[i_], hi_ - lo_);                 \
    }
    if (R > 0) GEMV_SPLIT(K, R, ROWS);
#undef ROWS
}

/* ---- several inputs against one weight */

void dtx_gemv_batch(real *out, const real *x, int64_t nb, const real *w, int64_t K, int64_t N) {
    if (nb == 1) return dtx_gemv(out, x, w, K, N);
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n)                                                                             \
    for (int64_t b = 0; b < nb; b++) o->gemv(out + b * N + (r0), x + b * K, w + (r0) * K, K, n)
    GEMV_SPLIT_BATCH(K, N, nb, K * (int64_t)sizeof(real), ROWS);
#undef ROWS
}

#ifndef DTX_DOUBLE
void dtx_gemv_bf16_batch(float *out, const float *x, int64_t nb, const uint16_t *w, int64_t K, int64_t N) {
    if (nb == 1) return dtx_gemv_bf16(out, x, w, K, N);
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n)                                                                             \
    for (int64_t b = 0; b < nb; b++) o->gemv_bf16(out + b * N + (r0), x + b * K, w + (r0) * K, K, n)
    GEMV_SPLIT_BATCH(K, N, nb, 2 * K, ROWS);
#undef ROWS
}
#endif

void dtx_gemv_q8_batch(float *out, const float *x, int64_t nb, const int8_t *q, const float *scale, int64_t K,
                       int64_t N) {
    if (nb == 1) return dtx_gemv_q8(out, x, q, scale, K, N);
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n)                                                                             \
    if (o->gemv_q8_nb) o->gemv_q8_nb(out + (r0), N, x, nb, q + (r0) * K, scale + (r0), K, n);       \
    else                                                                                        \
        for (int64_t b = 0; b < nb; b++) o->gemv_q8(out + b * N + (r0), x + b * K, q + (r0) * K, scale + (r0), K, n)
    GEMV_SPLIT_BATCH(K, N, nb, K, ROWS);
#undef ROWS
}

void dtx_gemv_q4_batch(float *out, const float *x, int64_t nb, const uint8_t *q, const float *scale, int64_t K,
                       int64_t N) {
    if (nb == 1) return dtx_gemv_q4(out, x, q, scale, K, N);
    const dtx_simd_ops *o = dtx_simd();
    int64_t rb = dtx_q4_row_bytes(K), ng = dtx_q4_groups(K);
#define ROWS(r0, n)                                                                             \
    if (o->gemv_q4_nb) o->gemv_q4_nb(out + (r0), N, x, nb, q + (r0) * rb, scale + (r0) * ng, K, n); \
    else                                                                                        \
        for (int64_t b = 0; b < nb; b++)                                                        \
            o->gemv_q4(out + b * N + (r0), x + b * K, q + (r0) * rb, scale + (r0) * ng, K, n)
    GEMV_SPLIT_BATCH(K, N, nb, rb, ROWS);
#undef ROWS
}

void dtx_gemv_q8a8_batch(float *out, const int8_t *xq, int64_t nb, float xscale, const int8_t *q,
                         const float *scale, int64_t K, int64_t N) {
    if (nb == 1) return dtx_gemv_q8a8(out, xq, xscale, q, scale, K, N);
    const dtx_simd_ops *o = dtx_simd();
#define ROWS(r0, n)                                                                             \
    for (int64_t b = 0; b < nb; b++)                                                            \
        o->gemv_q8a8(out + b * N + (r0), xq + b * K, xscale, q + (r0) * K, scale + (r0), K, n)
    GEMV_SPLIT_BATCH(K, N, nb, K, ROWS);
#undef ROWS
}
