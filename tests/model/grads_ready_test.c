/* dtx_model_on_grads_ready: the ranges the backward reports come in
 * descending order, are contiguous, cover every parameter, and each holds
 * its final gradient when reported (nothing later in the pass writes it):
 * the promise a data-parallel trainer relies on to start each range's sum
 * over ranks while the backward goes on. Both archs, tied and untied. */
#include <stdlib.h>
#include <string.h>

#include "test.h"

enum { MAX_RANGES = 64 };

typedef struct {
    const dtx_model *m;
    dtx_real *snap; /* each reported range's values at the time of the report */
    size_t lo[MAX_RANGES], hi[MAX_RANGES];
    int n;
} recorder;

static void record(void *ctx, size_t lo, size_t hi) {
    recorder *r = ctx;
    if (r->n < MAX_RANGES) r->lo[r->n] = lo, r->hi[r->n] = hi;
    r->n++;
    memcpy(r->snap + lo, dtx_model_grads((dtx_model *)r->m) + lo, sizeof(dtx_real) * (hi - lo));
}

static void grads_ready(dtx_arch arch, int tie) {
    dtx_config c = test_config(arch, 32, 3, arch == DTX_ARCH_DIFF ? 2 : 4, arch == DTX_ARCH_DIFF ? 1 : 2, 24, 48,
                               16, tie);
    dtx_model *m;
    REQUIRE(dtx_model_init(&m, &c, 7) == DTX_OK);
    size_t n = dtx_model_num_params(m);
    recorder r = {.m = m, .snap = calloc(n, sizeof(dtx_real))};
    REQUIRE(r.snap);
    enum { B = 2, T = 12 };
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (i * 7 + 3) % 24, y[i] = (i * 5 + 1) % 24;
    double loss;
    dtx_model_on_grads_ready(m, record, &r);
    for (int pass = 0; pass < 2; pass++) { /* the second accumulates onto the first: reported again */
        r.n = 0;
        REQUIRE(dtx_model_forward(m, x, y, B, T, NULL, &loss) == DTX_OK);
        REQUIRE(dtx_model_backward(m, 0.5) == DTX_OK);
        REQUIREF(r.n == c.n_layers + 2, "%d ranges for %lld layers", r.n, (long long)c.n_layers);
        CHECK(r.hi[0] == n);
        for (int i = 1; i < r.n; i++) CHECKF(r.hi[i] == r.lo[i - 1], "range %d ends at %zu, not %zu", i, r.hi[i], r.lo[i - 1]);
        CHECK(r.lo[r.n - 1] == 0);
        /* every value as it was reported is the value the pass ended with (bit for bit) */
        CHECK(memcmp(r.snap, dtx_model_grads(m), sizeof(dtx_real) * n) == 0);
    }
    /* the snapshot is not trivially equal: the gradient is not all zeros */
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += r.snap[i] != 0;
    CHECK(nonzero > n / 2);
    dtx_model_on_grads_ready(m, NULL, NULL);
    r.n = 0;
    REQUIRE(dtx_model_forward(m, x, y, B, T, NULL, &loss) == DTX_OK);
    REQUIRE(dtx_model_backward(m, 1.0) == DTX_OK);
    CHECK(r.n == 0);
    free(r.snap);
    dtx_model_free(m);
}

TEST(grads_ready_ranges_diff_untied) { grads_ready(DTX_ARCH_DIFF, 0); }
TEST(grads_ready_ranges_diff_tied) { grads_ready(DTX_ARCH_DIFF, 1); }
TEST(grads_ready_ranges_transformer_untied) { grads_ready(DTX_ARCH_TRANSFORMER, 0); }
TEST(grads_ready_ranges_transformer_tied) { grads_ready(DTX_ARCH_TRANSFORMER, 1); }
