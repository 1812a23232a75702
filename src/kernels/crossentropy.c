/* Softmax cross-entropy over rows of logits. Row maxima, denominators and
 * the loss are computed in double. */
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>

/* Rows are summed in this many fixed chunks, whatever the thread count, so
 * the returned loss is bitwise reproducible. */
enum { LOSS_CHUNKS = 64 };

/* One row: probs [V] = softmax(logits [V]) (may alias); returns −log p[target]. */
static double crossentropy_row(real *probs, const real *logits, int32_t target, int64_t V) {
    assert(target >= 0 && target < V);
    double mx = logits[0];
    for (int64_t j = 1; j < V; j++) mx = logits[j] > mx ? logits[j] : mx;
    double zt = logits[target], sum = 0; /* read before probs may overwrite it */
    for (int64_t j = 0; j < V; j++) {
        double e = exp((double)logits[j] - mx);
        sum += e;
        probs[j] = (real)e; /* one exp per element; normalised below */
    }
    double inv = 1.0 / sum;
    for (int64_t j = 0; j < V; j++) probs[j] = (real)(probs[j] * inv);
    return log(sum) + mx - zt;
}

/* probs [N, V], logits [N, V], targets [N]; returns the mean loss. */
double dtx_crossentropy_forward(real *probs, const real *logits, const int32_t *targets, int64_t N,
                                int64_t V) {
    assert(probs && logits && targets && N > 0 && V > 0);
    double part[LOSS_CHUNKS] = {0};
    int64_t per = (N + LOSS_CHUNKS - 1) / LOSS_CHUNKS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t ch = 0; ch < LOSS_CHUNKS; ch++) {
        int64_t i1 = (ch + 1) * per < N ? (ch + 1) * per : N;
        double acc = 0;
        for (int64_t i = ch * per; i < i1; i++)
            acc += crossentropy_row(probs + i * V, logits + i * V, targets[i], V);
        part[ch] = acc;
    }
    double loss = 0;
    for (int64_t ch = 0; ch < LOSS_CHUNKS; ch++) loss += part[ch];
    return loss / (double)N;
}

/* dlogits [N, V] += (probs − onehot(target)) · scale */
void dtx_crossentropy_backward(real *dlogits, const real *probs, const int32_t *targets, int64_t N,
                               int64_t V, double scale) {
    assert(dlogits && probs && targets && N >= 0 && V > 0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        assert(targets[i] >= 0 && targets[i] < V);
        real *d = dlogits + i * V;
        const real *p = probs + i * V;
        int64_t t = targets[i];
        for (int64_t j = 0; j < V; j++) d[j] += (real)(((double)p[j] - (j == t)) * scale);
    }
}
