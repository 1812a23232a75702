/* Token embedding lookup and its scatter-add backward. */
#include "common/profile.h"
#include "kernels/kernels.h"

#include <assert.h>
#include <omp.h>
#include <string.h>

/* Column ranges of the backward are whole 64-byte lines (16 floats). */
enum { COL_ALIGN = 16 };

static void embedding_row(real *out, int32_t tok, const real *table, int64_t C) {
    assert(tok >= 0);
    memcpy(out, table + (int64_t)tok * C, (size_t)C * sizeof(real));
}

/* out [n, C] = table[tok[i]];  table [V, C] (ids checked by the caller). */
void dtx_embedding_forward(real *out, const int32_t *tok, const real *table, int64_t n, int64_t C) {
    assert(out && tok && table && n >= 0 && C > 0);
    DTX_PAR_FOR(n * C, i, n, embedding_row(out + i * C, tok[i], table, C));
}

/* dtable [·, c0:c1) += dout [n, c0:c1) scattered by tok, tokens in order. */
static void embedding_backward_cols(real *dtable, const real *dout, const int32_t *tok, int64_t n, int64_t C,
                                    int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; i++) {
        real *restrict dst = dtable + (int64_t)tok[i] * C;
        const real *restrict src = dout + i * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
    }
}

/* dtable [V, C] += scatter of dout [n, C] by tok. Repeated ids hit the same
 * row, so each thread owns one contiguous column range and walks the tokens
 * in order: race-free, and every element's sum has the token order whatever
 * the number of threads (the bits do not depend on the split). */
static void embedding_backward_run(real *dtable, const real *dout, const int32_t *tok, int64_t n, int64_t C) {
    assert(dtable && dout && tok && n >= 0 && C > 0);
#pragma omp parallel if (n * C >= DTX_PAR_MIN)
    {
        int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t lines = (C + COL_ALIGN - 1) / COL_ALIGN;
        int64_t c0 = lines * id / nt * COL_ALIGN, c1 = lines * (id + 1) / nt * COL_ALIGN;
        c1 = c1 < C ? c1 : C;
        if (c0 < c1) embedding_backward_cols(dtable, dout, tok, n, C, c0, c1);
    }
}

void dtx_embedding_backward(real *dtable, const real *dout, const int32_t *tok, int64_t n, int64_t C) {
    DTX_PROF(DTX_PROF_EMBEDDING, 1, embedding_backward_run(dtable, dout, tok, n, C));
}
