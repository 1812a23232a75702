/* The one-row products of decoding (kernels.h: dtx_dot_heads, dtx_axpy_heads,
 * dtx_gemv, dtx_gemv_bf16; the quantised dtx_gemv_q8, dtx_gemv_q4 and
 * dtx_gemv_q8a8, whose portable versions are quant_linear.c's): the portable
 * implementations and the entry points, which
 * run the ISA level's implementation (simd.h). A token's decode step is
 * memory-bound: each weight and each cached key is read once, so these
 * kernels exist to keep enough loads in flight (several rows at once,
 * independent accumulators), not to save arithmetic. */
#include <assert.h>
#include <stdatomic.h>

#include "common/team.h"
#include "kernels/kernels.h"
#include "kernels/simd.h"

/* Below this many multiply-adds a product runs on one thread. */
#define GEMV_PAR_MIN ((int64_t)1 << 15)

/* The portable walks of the cached attention over rows of W, each value
 * made real by WIDEN: fp32 as it is; bf16 bits widened exactly, then the
 * same arithmetic in the same order, so rows of bf16 and their widened
 * copies give the same bits. Rows in order, each row's slices in turn. */
#define DOT_HEADS_PORTABLE(W, WIDEN)                                                                       \
    for (int64_t t = 0; t < n; t++) {                                                                      \
        const W *kr = k + t * ldk;                                                                         \
        for (int64_t i = 0; i < m; i++) {                                                                  \
            const real *xi = x + i * d;                                                                    \
            const W *ki = kr + off[i];                                                                     \
            real acc = 0;                                                                                  \
            _Pragma("omp simd reduction(+ : acc)") for (int64_t c = 0; c < d; c++) acc += xi[c] * WIDEN(ki[c]); \
            s[i * lds + t] = scale * acc;                                                                  \
        }                                                                                                  \
    }
#define AXPY_HEADS_PORTABLE(W, WIDEN)                                                                      \
    for (int64_t t = 0; t < n; t++) {                                                                      \
        const W *vr = v + t * ldv;                                                                         \
        for (int64_t i = 0; i < m; i++) {                                                                  \
            const W *vi = vr + off[i];                                                                     \
            real a = p[i * ldp + t], *yi = y + i * w;                                                      \
            _Pragma("omp simd") for (int64_t c = 0; c < w; c++) yi[c] += a * WIDEN(vi[c]);                 \
        }                                                                                                  \
    }
#define AS_REAL(v) (v)
#define BF16_AS_REAL(v) ((real)dtx_bf16_to_f32(v))

void dtx_dot_heads_portable(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off,
                            const real *k, int64_t ldk, int64_t n, real scale) {
    DOT_HEADS_PORTABLE(real, AS_REAL)
}

void dtx_axpy_heads_portable(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off,
                             const real *v, int64_t ldv, int64_t n) {
    AXPY_HEADS_PORTABLE(real, AS_REAL)
}

void dtx_dot_heads_bf16_portable(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off,
                                 const uint16_t *k, int64_t ldk, int64_t n, real scale) {
    DOT_HEADS_PORTABLE(uint16_t, BF16_AS_REAL)
}

void dtx_axpy_heads_bf16_portable(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off,
                                  const uint16_t *v, int64_t ldv, int64_t n) {
    AXPY_HEADS_PORTABLE(uint16_t, BF16_AS_REAL)
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

void dtx_dot_heads(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off, const real *k,
                   int64_t ldk, int64_t n, real scale) {
    if (n > 0 && m > 0 && d > 0) dtx_simd()->dot_heads(s, lds, x, d, m, off, k, ldk, n, scale);
}

void dtx_axpy_heads(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off, const real *v,
                    int64_t ldv, int64_t n) {
    if (n > 0 && m > 0 && w > 0) dtx_simd()->axpy_heads(y, w, p, ldp, m, off, v, ldv, n);
}

void dtx_dot_heads_bf16(real *s, int64_t lds, const real *x, int64_t d, int64_t m, const int64_t *off,
                        const uint16_t *k, int64_t ldk, int64_t n, real scale) {
    if (n > 0 && m > 0 && d > 0) dtx_simd()->dot_heads_bf16(s, lds, x, d, m, off, k, ldk, n, scale);
}

void dtx_axpy_heads_bf16(real *y, int64_t w, const real *p, int64_t ldp, int64_t m, const int64_t *off,
                         const uint16_t *v, int64_t ldv, int64_t n) {
    if (n > 0 && m > 0 && w > 0) dtx_simd()->axpy_heads_bf16(y, w, p, ldp, m, off, v, ldv, n);
}

/* ---- the products over the threads
 *
 * Every product, one or several parts, one input or several, is a list of
 * rows split over the threads (dtx_team_run: a spinning team, team.h; an
 * OpenMP region costs more than streaming a 768 × 768 4-bit weight). Each
 * thread owns a contiguous block (one long stream that the hardware
 * prefetchers follow) and takes it from the front, a quarter of what is left
 * at a time (at least `chunk` rows, at most `cap`); a thread done with its
 * own takes `chunk` rows at a time from the back of another's block. Why:
 * the two cores of these machines do not finish equal halves at the same
 * time (their share of the memory bandwidth moves), and with a static split
 * the first to finish waited, 5–8% of a decode step. Every chunk starts at
 * a multiple of 8 rows (the kernels' blocks) and each row is computed by one
 * thread in the same block position, so the result does not depend on the
 * thread count or on who ran which chunk. Small products stay on the
 * calling thread. */
enum { GEMV_CHUNK = 16, GEMV_MAX_PARTS = 8 };

/* Rows [r0, r0 + n) of part p for nb inputs (x [nb, K], out [nb, N]): the
 * calls its one-part product makes for them. */
static void part_rows(const dtx_simd_ops *o, const dtx_gemv_part *p, int64_t K, int64_t nb, int64_t r0, int64_t n) {
    const int64_t N = p->N;
    switch (p->kind) {
    case DTX_ROWS_REAL:
        for (int64_t b = 0; b < nb; b++)
            o->gemv((real *)p->out + b * N + r0, (const real *)p->x + b * K, (const real *)p->w + r0 * K, K, n);
        break;
    case DTX_ROWS_BF16:
        for (int64_t b = 0; b < nb; b++)
            o->gemv_bf16((float *)p->out + b * N + r0, (const float *)p->x + b * K, (const uint16_t *)p->w + r0 * K,
                         K, n);
        break;
    case DTX_ROWS_Q8: {
        const int8_t *q = (const int8_t *)p->w + r0 * K;
        if (nb > 1 && o->gemv_q8_nb) o->gemv_q8_nb((float *)p->out + r0, N, p->x, nb, q, p->scale + r0, K, n);
        else
            for (int64_t b = 0; b < nb; b++)
                o->gemv_q8((float *)p->out + b * N + r0, (const float *)p->x + b * K, q, p->scale + r0, K, n);
        break;
    }
    case DTX_ROWS_Q4: {
        const uint8_t *q = (const uint8_t *)p->w + r0 * dtx_q4_row_bytes(K);
        const float *sc = p->scale + r0 * dtx_q4_groups(K);
        if (nb > 1 && o->gemv_q4_nb) o->gemv_q4_nb((float *)p->out + r0, N, p->x, nb, q, sc, K, n);
        else
            for (int64_t b = 0; b < nb; b++)
                o->gemv_q4((float *)p->out + b * N + r0, (const float *)p->x + b * K, q, sc, K, n);
        break;
    }
    case DTX_ROWS_Q8A8:
        for (int64_t b = 0; b < nb; b++)
            o->gemv_q8a8((float *)p->out + b * N + r0, (const int8_t *)p->x + b * K, p->xscale,
                         (const int8_t *)p->w + r0 * K, p->scale + r0, K, n);
        break;
    default: break;
    }
}

/* The parts' rows in one index space, part i from start[i] (a multiple of
 * 8: every chunk then begins where the kernels' 8-row blocks of that part
 * begin, as in the part's own product), the gaps between parts empty. */
typedef struct {
    const dtx_simd_ops *o;
    const dtx_gemv_part *parts;
    int n_parts;
    int64_t K, nb;
    int64_t start[GEMV_MAX_PARTS + 1];
    int64_t chunk, cap; /* dtx_team_take's */
    int n_blocks;
    dtx_team_block rr[DTX_TEAM_MAX]; /* dtx_team_size() is at most this */
} split_job;

/* Rows [r0, r0 + n) of the index space. */
static void job_rows(const split_job *j, int64_t r0, int64_t n) {
    for (int i = 0; i < j->n_parts; i++) {
        const int64_t s = j->start[i], lo = r0 > s ? r0 : s;
        const int64_t hi = r0 + n < s + j->parts[i].N ? r0 + n : s + j->parts[i].N;
        if (lo < hi) part_rows(j->o, &j->parts[i], j->K, j->nb, lo - s, hi - lo);
    }
}

/* One thread's share: its own block from the front, then the others' from the back. */
static void split_task(void *arg, int id, int nt) {
    split_job *j = arg;
    int64_t a, b;
    (void)nt;
    while (dtx_team_take(j->rr, j->n_blocks, id, j->chunk, j->cap, 8, &a, &b)) job_rows(j, a, b - a);
}

/* The parts (each K wide) for nb inputs, over the threads when the work
 * (multiply-adds) is worth it. The blocks are set before the team starts,
 * for the team size asked for; a team that came out smaller (another
 * thread's run held it) leaves blocks that the others take. */
static void split_products(const dtx_gemv_part *parts, int n_parts, int64_t K, int64_t nb, int64_t chunk, int64_t cap) {
    assert(n_parts >= 0 && n_parts <= GEMV_MAX_PARTS);
    split_job j = {.o = dtx_simd(), .parts = parts, .n_parts = n_parts, .K = K, .nb = nb, .chunk = chunk, .cap = cap};
    for (int i = 0; i < n_parts; i++) j.start[i + 1] = j.start[i] + (parts[i].N + 7) / 8 * 8;
    const int64_t R = n_parts ? j.start[n_parts - 1] + parts[n_parts - 1].N : 0;
    if (R <= 0) return;
    const int nt = dtx_team_size();
    if (K * R * nb < GEMV_PAR_MIN || nt <= 1 || R >= ((int64_t)1 << 31)) {
        job_rows(&j, 0, R);
        return;
    }
    j.n_blocks = nt;
    dtx_team_blocks_init(j.rr, nt, R, 8); /* every chunk starts at a multiple of 8 rows */
    dtx_team_run(split_task, &j);
}

/* One product of one input, chunked for a single stream. */
static void one_product(dtx_gemv_part p, int64_t K) { split_products(&p, 1, K, 1, GEMV_CHUNK, INT32_MAX); }

void dtx_gemv_parts(const dtx_gemv_part *parts, int n_parts, int64_t K) {
    split_products(parts, n_parts, K, 1, GEMV_CHUNK, INT32_MAX);
}

void dtx_gemv(real *out, const real *x, const real *w, int64_t K, int64_t N) {
    one_product((dtx_gemv_part){.kind = DTX_ROWS_REAL, .out = out, .x = x, .w = w, .N = N}, K);
}

#ifndef DTX_DOUBLE
void dtx_gemv_bf16(float *out, const float *x, const uint16_t *w, int64_t K, int64_t N) {
    one_product((dtx_gemv_part){.kind = DTX_ROWS_BF16, .out = out, .x = x, .w = w, .N = N}, K);
}
#endif

void dtx_gemv_q8(float *out, const float *x, const int8_t *q, const float *scale, int64_t K, int64_t N) {
    one_product((dtx_gemv_part){.kind = DTX_ROWS_Q8, .out = out, .x = x, .w = q, .scale = scale, .N = N}, K);
}

void dtx_gemv_q4(float *out, const float *x, const uint8_t *q, const float *scale, int64_t K, int64_t N) {
    one_product((dtx_gemv_part){.kind = DTX_ROWS_Q4, .out = out, .x = x, .w = q, .scale = scale, .N = N}, K);
}

void dtx_gemv_q8a8(float *out, const int8_t *xq, float xscale, const int8_t *q, const float *scale, int64_t K,
                   int64_t N) {
    one_product(
        (dtx_gemv_part){.kind = DTX_ROWS_Q8A8, .out = out, .x = xq, .xscale = xscale, .w = q, .scale = scale, .N = N},
        K);
}

/* ---- several inputs against one weight
 *
 * The rows in chunks of about BATCH_CHUNK_BYTES of weights (in L2 while the
 * nb inputs pass over them, so the weights come from memory once), each
 * input against a chunk by the one-input kernel (or its nb form, the same
 * bits), so every result has the bits of the one-input product. One input
 * is the one-input product, with its own chunking (tuned for a single
 * stream). */
enum { BATCH_CHUNK_BYTES = 96 * 1024 };

static void batch_product(dtx_gemv_part p, int64_t K, int64_t nb, int64_t row_bytes) {
    if (nb == 1) return one_product(p, K);
    int64_t c = (BATCH_CHUNK_BYTES / (row_bytes > 0 ? row_bytes : 1)) & ~(int64_t)7;
    if (c < GEMV_CHUNK) c = GEMV_CHUNK;
    split_products(&p, 1, K, nb, c, c);
}

void dtx_gemv_batch(real *out, const real *x, int64_t nb, const real *w, int64_t K, int64_t N) {
    batch_product((dtx_gemv_part){.kind = DTX_ROWS_REAL, .out = out, .x = x, .w = w, .N = N}, K, nb,
                  K * (int64_t)sizeof(real));
}

#ifndef DTX_DOUBLE
void dtx_gemv_bf16_batch(float *out, const float *x, int64_t nb, const uint16_t *w, int64_t K, int64_t N) {
    batch_product((dtx_gemv_part){.kind = DTX_ROWS_BF16, .out = out, .x = x, .w = w, .N = N}, K, nb, 2 * K);
}
#endif

void dtx_gemv_q8_batch(float *out, const float *x, int64_t nb, const int8_t *q, const float *scale, int64_t K,
                       int64_t N) {
    batch_product((dtx_gemv_part){.kind = DTX_ROWS_Q8, .out = out, .x = x, .w = q, .scale = scale, .N = N}, K, nb, K);
}

void dtx_gemv_q4_batch(float *out, const float *x, int64_t nb, const uint8_t *q, const float *scale, int64_t K,
                       int64_t N) {
    batch_product((dtx_gemv_part){.kind = DTX_ROWS_Q4, .out = out, .x = x, .w = q, .scale = scale, .N = N}, K, nb,
                  dtx_q4_row_bytes(K));
}

void dtx_gemv_q8a8_batch(float *out, const int8_t *xq, int64_t nb, float xscale, const int8_t *q,
                         const float *scale, int64_t K, int64_t N) {
    batch_product(
        (dtx_gemv_part){.kind = DTX_ROWS_Q8A8, .out = out, .x = xq, .xscale = xscale, .w = q, .scale = scale, .N = N},
        K, nb, K);
}
