/* Softmax cross-entropy over rows of logits.
 * Per row: a pass for the max, one that writes e = exp(z − max), one that
 * sums e, one that scales by 1/sum. A row (V ≤ a few ×10⁴ floats) stays in
 * L1/L2 between the passes, so memory sees one read of the logits and one
 * write of the probabilities. The exps are dtx_vexpf (vectorised, relative
 * error ≤ 8.5e-8) in the float build and libm exp in the double build; the denominators and
 * the loss are summed in double, which keeps the loss within ~1e-10 relative
 * of a double evaluation. */
#include "common/profile.h"
#include "kernels/kernels.h"
#include "kernels/vexp.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Rows are summed in this many fixed chunks, whatever the thread count, so
 * the returned loss is bitwise reproducible. */
enum { LOSS_CHUNKS = 64 };

#ifdef DTX_DOUBLE
#define EXP_R(x) exp(x)
#else
#define EXP_R(x) dtx_vexpf(x)
#endif

/* max over z [V] (order-free, so vectorised freely) */
static real row_max(const real *z, int64_t V) {
    real mx = z[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 1; j < V; j++) mx = z[j] > mx ? z[j] : mx;
    return mx;
}

/* e [V] = exp(z − mx) (e may alias z). */
static void row_exp(real *e, const real *z, real mx, int64_t V) {
#pragma omp simd
    for (int64_t j = 0; j < V; j++) e[j] = EXP_R(z[j] - mx);
}

/* Σ e [V] in double. A loop of its own: widening dtx_vexpf's result in the
 * exp loop stops gcc from if-converting it (a conversion that "could trap"
 * under -ftrapping-math), and the row is still in L1/L2 here. */
static double row_sum(const real *e, int64_t V) {
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; j++) sum += (double)e[j];
    return sum;
}

/* One row: probs [V] = softmax(logits [V]) (may alias); returns −log p[target]
 * (0 for an ignored target, DTX_TARGET_IGNORE). */
static double crossentropy_row(real *probs, const real *logits, int32_t target, int64_t V) {
    assert(target == DTX_TARGET_IGNORE || (target >= 0 && target < V));
    real mx = row_max(logits, V);
    double zt = target >= 0 ? logits[target] : 0; /* read before probs may overwrite it */
    row_exp(probs, logits, mx, V);
    double sum = row_sum(probs, V);
    real inv = (real)(1.0 / sum);
#pragma omp simd
    for (int64_t j = 0; j < V; j++) probs[j] *= inv;
    return target >= 0 ? log(sum) + (double)mx - zt : 0;
}

int64_t dtx_crossentropy_count(const int32_t *targets, int64_t N) {
    int64_t n = 0;
    for (int64_t i = 0; i < N; i++) n += targets[i] != DTX_TARGET_IGNORE;
    return n;
}

/* probs [N, V], logits [N, V], targets [N]; returns the mean loss. */
static double crossentropy_forward_run(real *probs, const real *logits, const int32_t *targets, int64_t N,
                                       int64_t V) {
    assert(probs && logits && targets && N > 0 && V > 0);
    double part[LOSS_CHUNKS] = {0};
    int64_t per = (N + LOSS_CHUNKS - 1) / LOSS_CHUNKS;
#pragma omp parallel for schedule(dynamic, 1) if (N * V >= DTX_PAR_MIN)
    for (int64_t ch = 0; ch < LOSS_CHUNKS; ch++) {
        int64_t i1 = (ch + 1) * per < N ? (ch + 1) * per : N;
        double acc = 0;
        for (int64_t i = ch * per; i < i1; i++)
            acc += crossentropy_row(probs + i * V, logits + i * V, targets[i], V);
        part[ch] = acc;
    }
    double loss = 0;
    for (int64_t ch = 0; ch < LOSS_CHUNKS; ch++) loss += part[ch];
    int64_t counted = dtx_crossentropy_count(targets, N);
    return counted ? loss / (double)counted : 0;
}

double dtx_crossentropy_forward(real *probs, const real *logits, const int32_t *targets, int64_t N,
                                int64_t V) {
    double r_ = 0;
    DTX_PROF(DTX_PROF_LOSS, 0, r_ = crossentropy_forward_run(probs, logits, targets, N, V));
    return r_;
}

/* d [V] += p · scale, rounded once from double (as the reference did). */
static void row_add_scaled(real *restrict d, const real *restrict p, double scale, int64_t V) {
#pragma omp simd
    for (int64_t j = 0; j < V; j++) d[j] += (real)((double)p[j] * scale);
}

/* dlogits [N, V] += (probs − onehot(target)) · scale */
void dtx_crossentropy_backward(real *dlogits, const real *probs, const int32_t *targets, int64_t N,
                               int64_t V, double scale) {
    assert(dlogits && probs && targets && N >= 0 && V > 0);
#pragma omp parallel for schedule(static) if (N * V >= DTX_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        int64_t t = targets[i];
        if (t == DTX_TARGET_IGNORE) continue;
        assert(t >= 0 && t < V);
        real *d = dlogits + i * V;
        const real *p = probs + i * V;
        real dt = d[t]; /* the target column is redone with the onehot below */
        row_add_scaled(d, p, scale, V);
        d[t] = dt + (real)(((double)p[t] - 1.0) * scale);
    }
}

/* probs [N, V] -> dlogits = (probs − onehot(target)) · scale, in place: the
 * same values as zeroing a buffer and calling dtx_crossentropy_backward. */
static void crossentropy_backward_inplace_run(real *probs, const int32_t *targets, int64_t N, int64_t V,
                                              double scale) {
    assert(probs && targets && N >= 0 && V > 0);
#pragma omp parallel for schedule(static) if (N * V >= DTX_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        int64_t t = targets[i];
        real *p = probs + i * V;
        if (t == DTX_TARGET_IGNORE) {
            memset(p, 0, (size_t)V * sizeof *p);
            continue;
        }
        assert(t >= 0 && t < V);
        double pt = p[t];
#pragma omp simd
        for (int64_t j = 0; j < V; j++) p[j] = (real)((double)p[j] * scale);
        p[t] = (real)((pt - 1.0) * scale);
    }
}

void dtx_crossentropy_backward_inplace(real *probs, const int32_t *targets, int64_t N, int64_t V,
                                       double scale) {
    DTX_PROF(DTX_PROF_LOSS, 1, crossentropy_backward_inplace_run(probs, targets, N, V, scale));
}
