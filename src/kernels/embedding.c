/* Token embedding lookup and its scatter-add backward. */
#include "kernels/kernels.h"

#include <assert.h>
#include <string.h>

enum { COL_BLOCK = 64 };

/* out [n, C] = table[tok[i]];  table [V, C] (ids checked by the caller). */
void dtx_embedding_forward(real *out, const int32_t *tok, const real *table, int64_t n, int64_t C) {
    assert(out && tok && table && n >= 0 && C > 0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        assert(tok[i] >= 0);
        memcpy(out + i * C, table + (int64_t)tok[i] * C, (size_t)C * sizeof(real));
    }
}

/* dtable [V, C] += scatter of dout [n, C] by tok. Repeated ids hit the same
 * row, so threads own column blocks and walk the tokens in order: race-free
 * and deterministic. */
void dtx_embedding_backward(real *dtable, const real *dout, const int32_t *tok, int64_t n, int64_t C) {
    assert(dtable && dout && tok && n >= 0 && C > 0);
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += COL_BLOCK) {
        int64_t w = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
        for (int64_t i = 0; i < n; i++) {
            real *dst = dtable + (int64_t)tok[i] * C + c0;
            const real *src = dout + i * C + c0;
            for (int64_t c = 0; c < w; c++) dst[c] += src[c];
        }
    }
}
