/* Causal attention with materialised T×T probabilities, for both the
 * Transformer and differential attention (spec §2.2–2.8 forward, §4.1
 * backward). Layouts (see kernels.h):
 *   Transformer: q [B,T,H·d], k, v [B,T,G·d], out [B,T,H·d], head j reads
 *     KV head j / (H/G); att [B,H,T,T].
 *   DIFF: q [B,T,2H·d], k [B,T,2G·d], v [B,T,G·2d], out [B,T,H·2d]; head h
 *     has q1 = sub-head 2h, q2 = 2h+1, reads k1 = 2g, k2 = 2g+1 and v = V[g],
 *     g = h / (H/G); att [B,2H,T,T] holds A1 at sub-head 2h, A2 at 2h+1.
 * Quantised logits (evaluation, a->quant_bits > 0, docs/eval_quant.md): every
 * logit row goes into att first, is quantised with dtx_quant_step/apply
 * (its own absmax, or the batch row's over all heads and rows for TENSOR
 * scope), then normalised in place; this is the reference for the row path.
 * Dot products, softmax denominators and row statistics are summed in double.
 * Per-row accumulators live on the stack (d ≤ DTX_ATTN_MAX_HEAD_DIM), so
 * nothing is allocated. Every output element is produced by one thread in a
 * fixed order, so results do not depend on the thread count. */
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>
#include <string.h>

enum { MAXD = DTX_ATTN_MAX_HEAD_DIM, MAXW = 2 * DTX_ATTN_MAX_HEAD_DIM };

/* ------------------------------------------------------------ small helpers */

static inline __attribute__((always_inline)) double dotd(const real *a, const real *b, int64_t n) {
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

/* Geometry shared by forward and backward. */
typedef struct {
    int64_t B, T, H, G, n_rep, d;
    int64_t NQ;          /* q sub-heads (= att heads) */
    int64_t qs, ks, vs;  /* row strides of q, k, v */
    int64_t os;          /* row stride of out (and of o1, o2) */
    int64_t w;           /* value / output width of one head: d or 2d */
    double scale;        /* 1/√d */
} geom;

static geom make_geom(const dtx_attn_dims *a) {
    assert(a && a->B >= 0 && a->T >= 0 && a->n_heads > 0 && a->n_kv_heads > 0);
    assert(a->n_heads % a->n_kv_heads == 0);
    assert(a->head_dim > 0 && a->head_dim <= MAXD);
    geom g;
    g.B = a->B, g.T = a->T, g.H = a->n_heads, g.G = a->n_kv_heads, g.d = a->head_dim;
    g.n_rep = g.H / g.G;
    int64_t sub = a->diff ? 2 : 1; /* q/k sub-heads per head */
    g.NQ = sub * g.H;
    g.qs = sub * g.H * g.d;
    g.ks = sub * g.G * g.d;
    g.w = sub * g.d;
    g.vs = g.G * g.w;
    g.os = g.H * g.w;
    g.scale = 1.0 / sqrt((double)g.d);
    return g;
}

/* Logit row t of one map: p[s] = scale·q_t·k_s for s ≤ t (p[s > t] untouched);
 * qt [d] the query, k the key sub-head's first row (row stride ks). */
static void logits_row(real *p, const real *qt, const real *k, int64_t ks, int64_t t, int64_t d, double scale) {
    for (int64_t s = 0; s <= t; s++) p[s] = (real)(scale * dotd(qt, k + s * ks, d));
}

/* In place: logits p[0..t] -> probabilities, p[s] = 0 for t < s < T. */
static void normalise_row(real *p, int64_t t, int64_t T) {
    double mx = -INFINITY;
    for (int64_t s = 0; s <= t; s++)
        if (p[s] > mx) mx = p[s];
    double sum = 0;
    for (int64_t s = 0; s <= t; s++) {
        double e = exp((double)p[s] - mx);
        sum += e;
        p[s] = (real)e;
    }
    double inv = 1.0 / sum;
    for (int64_t s = 0; s <= t; s++) p[s] = (real)(p[s] * inv);
    for (int64_t s = t + 1; s < T; s++) p[s] = 0;
}

/* Probability row t of one map: p [T] (p[s] = 0 for s > t). */
static void softmax_row(real *p, const real *qt, const real *k, int64_t ks, int64_t t, int64_t T,
                        int64_t d, double scale) {
    logits_row(p, qt, k, ks, t, d, scale);
    normalise_row(p, t, T);
}

static double row_absmax(const real *p, int64_t t) {
    double m = 0;
    for (int64_t s = 0; s <= t; s++) m = fmax(m, fabs((double)p[s]));
    return m;
}

/* Quantised logits (a->quant_bits): p holds row t's logits already; quantise
 * them with the step of absmax (the row's own when absmax < 0), then softmax. */
static void quant_softmax_row(real *p, int64_t t, int64_t T, double absmax, int bits) {
    double step = dtx_quant_step(absmax < 0 ? row_absmax(p, t) : absmax, bits);
    for (int64_t s = 0; s <= t; s++) p[s] = dtx_quant_apply(p[s], step);
    normalise_row(p, t, T);
}

/* o [w] = Σ_{s ≤ t} p[s] · v[s, 0..w)  (v row stride vs) */
static void pv_row(double *o, const real *p, const real *v, int64_t vs, int64_t t, int64_t w) {
    for (int64_t c = 0; c < w; c++) o[c] = 0;
    for (int64_t s = 0; s <= t; s++) {
        double ps = p[s];
        const real *vr = v + s * vs;
#pragma omp simd
        for (int64_t c = 0; c < w; c++) o[c] += ps * vr[c];
    }
}

static real *att_row(const dtx_attn_saved *sv, const geom *g, int64_t b, int64_t sub, int64_t t) {
    return sv->att + ((b * g->NQ + sub) * g->T + t) * g->T;
}

/* ------------------------------------------------------------------ sizes */

size_t dtx_attention_lse_size(const dtx_attn_dims *a) {
    return a->impl == DTX_ATTN_FLASH ? (size_t)(a->B * a->T * (a->diff ? 2 * a->n_heads : a->n_heads)) : 0;
}

size_t dtx_attention_att_size(const dtx_attn_dims *a) {
    if (a->impl != DTX_ATTN_PLAIN) return 0;
    int64_t nq = (a->diff ? 2 : 1) * a->n_heads;
    return (size_t)(a->B * nq * a->T * a->T);
}

size_t dtx_attention_o_size(const dtx_attn_dims *a) {
    return a->diff ? (size_t)(a->B * a->T * a->n_heads * 2 * a->head_dim) : 0;
}

size_t dtx_attention_rstd_size(const dtx_attn_dims *a) {
    return a->diff ? (size_t)(a->B * a->T * a->n_heads) : 0;
}

/* ---------------------------------------------------------------- forward */

/* Transformer head j of batch b: att rows and out[b, :, j·d : j·d+d]. */
static void forward_head(const geom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *sv, const real *q,
                         const real *k, const real *v, const double *amax, int64_t b, int64_t j) {
    int64_t kv = j / g->n_rep, d = g->d;
    const real *kh = k + b * g->T * g->ks + kv * d, *vh = v + b * g->T * g->vs + kv * d;
    double o[MAXD];
    for (int64_t t = 0; t < g->T; t++) {
        real *p = att_row(sv, g, b, j, t);
        if (a->quant_bits) quant_softmax_row(p, t, g->T, amax ? amax[0] : -1, a->quant_bits);
        else softmax_row(p, q + (b * g->T + t) * g->qs + j * d, kh, g->ks, t, g->T, d, g->scale);
        pv_row(o, p, vh, g->vs, t, d);
        real *ot = out + (b * g->T + t) * g->os + j * d;
        for (int64_t c = 0; c < d; c++) ot[c] = (real)o[c];
    }
}

/* DIFF head h of batch b: both maps, o1 = A1·v, o2 = A2·v, O = o1 − λ·o2,
 * rstd = 1/rms(O) over 2d, out = (1 − λ_init)·γ ⊙ O · rstd. */
static void forward_diff_head(const geom *g, const dtx_attn_dims *a, real *out,
                              const dtx_attn_saved *sv, const real *q, const real *k, const real *v,
                              const real *gamma, const double *amax, int64_t b, int64_t h) {
    int64_t kv = h / g->n_rep, d = g->d, w = g->w, T = g->T;
    const real *k1 = k + b * T * g->ks + 2 * kv * d, *k2 = k1 + d;
    const real *vh = v + b * T * g->vs + kv * w;
    double lam = a->lambda, cs = 1.0 - a->lambda_init;
    double o1[MAXW], o2[MAXW];
    for (int64_t t = 0; t < T; t++) {
        const real *q1 = q + (b * T + t) * g->qs + 2 * h * d, *q2 = q1 + d;
        real *p1 = att_row(sv, g, b, 2 * h, t), *p2 = att_row(sv, g, b, 2 * h + 1, t);
        if (a->quant_bits) { /* z1 and z2 each with their own step */
            quant_softmax_row(p1, t, T, amax ? amax[0] : -1, a->quant_bits);
            quant_softmax_row(p2, t, T, amax ? amax[1] : -1, a->quant_bits);
        } else {
            softmax_row(p1, q1, k1, g->ks, t, T, d, g->scale);
            softmax_row(p2, q2, k2, g->ks, t, T, d, g->scale);
        }
        pv_row(o1, p1, vh, g->vs, t, w);
        pv_row(o2, p2, vh, g->vs, t, w);
        int64_t off = (b * T + t) * g->os + h * w;
        double ss = 0;
        for (int64_t c = 0; c < w; c++) {
            sv->o1[off + c] = (real)o1[c];
            sv->o2[off + c] = (real)o2[c];
            double oc = o1[c] - lam * o2[c]; /* fused subtraction in double (spec §4.3) */
            ss += oc * oc;
        }
        double rs = 1.0 / sqrt(ss / (double)w + a->eps);
        sv->rstd[(b * T + t) * g->H + h] = (real)rs;
        for (int64_t c = 0; c < w; c++) out[off + c] = (real)(cs * gamma[c] * (o1[c] - lam * o2[c]) * rs);
    }
}

/* Quantised logits, batch row b: every logit row of every sub-head into att
 * first (so that TENSOR scope can take its maximum over all of them), then
 * each head quantises, normalises and reads V as the unquantised path. */
static void plain_quant_forward_batch(const geom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *s,
                                      const real *q, const real *k, const real *v, const real *gamma, int64_t b) {
    int64_t sub = a->diff ? 2 : 1, T = g->T, d = g->d;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < g->NQ; i++) {
        /* sub-head i = sub·h + j reads key sub-head sub·(h / n_rep) + j */
        int64_t ksub = sub * (i / sub / g->n_rep) + i % sub;
        for (int64_t t = 0; t < T; t++)
            logits_row(att_row(s, g, b, i, t), q + (b * T + t) * g->qs + i * d, k + b * T * g->ks + ksub * d, g->ks,
                       t, d, g->scale);
    }
    double amax[2] = {0, 0};
    if (a->quant_tensor) {
        for (int64_t i = 0; i < g->NQ; i++)
            for (int64_t t = 0; t < T; t++) amax[i % sub] = fmax(amax[i % sub], row_absmax(att_row(s, g, b, i, t), t));
    }
    const double *am = a->quant_tensor ? amax : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < g->H; h++) {
        if (a->diff) forward_diff_head(g, a, out, s, q, k, v, gamma, am, b, h);
        else forward_head(g, a, out, s, q, k, v, am, b, h);
    }
}

/* out [B, T, NQ·d] (overwritten); s->att always, s->o1/o2/rstd for DIFF. */
void dtx_attention_plain_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s,
                           const real *q, const real *k, const real *v, const real *subln_w) {
    geom g = make_geom(a);
    assert(out && s && s->att && q && k && v);
    assert(!a->diff || (s->o1 && s->o2 && s->rstd && subln_w));
    assert(a->quant_bits == 0 || (a->quant_bits >= 2 && a->quant_bits <= 16));
    if (a->quant_bits) {
        for (int64_t b = 0; b < g.B; b++) plain_quant_forward_batch(&g, a, out, s, q, k, v, subln_w, b);
        return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < g.B; b++) {
        for (int64_t h = 0; h < g.H; h++) {
            if (a->diff) forward_diff_head(&g, a, out, s, q, k, v, subln_w, NULL, b, h);
            else forward_head(&g, a, out, s, q, k, v, NULL, b, h);
        }
    }
}

/* --------------------------------------------------------------- backward */

/* One KV sub-head's key and value rows and their gradients (same strides). */
typedef struct {
    const real *k, *v;
    real *dk, *dv;
} kv_ptrs;

/* Query row t of one softmax branch whose upstream gradient is alpha·dO
 * (dO w wide) and D = rowsum(alpha·dO ⊙ o_branch) (the FlashAttention D):
 *   dA[s] = alpha·dO·v[s];  dZ[s] = p[s]·(dA[s] − D);
 *   dq_t += scale·Σ dZ[s]·k[s] (into the double accumulator dqt);
 *   dk[s] += scale·dZ[s]·q_t;  dv[s] += alpha·p[s]·dO.
 * k/dk share row stride ks, v/dv share vs. */
static void branch_row_backward(const geom *g, const real *p, double alpha, const real *dO, double D,
                                const real *qt, double *dqt, kv_ptrs kv, int64_t t) {
    int64_t d = g->d, w = g->w;
    for (int64_t s = 0; s <= t; s++) {
        if (p[s] == 0) continue; /* underflowed probability: every term below is 0 */
        double dz = (double)p[s] * (alpha * dotd(dO, kv.v + s * g->vs, w) - D) * g->scale;
        const real *ks = kv.k + s * g->ks;
        real *dks = kv.dk + s * g->ks, *dvs = kv.dv + s * g->vs;
#pragma omp simd
        for (int64_t c = 0; c < d; c++) {
            dqt[c] += dz * ks[c];
            dks[c] += (real)(dz * qt[c]);
        }
        real pa = (real)(alpha * p[s]);
#pragma omp simd
        for (int64_t c = 0; c < w; c++) dvs[c] += pa * dO[c];
    }
}

static void add_row(real *dst, const double *src, int64_t n) {
    for (int64_t c = 0; c < n; c++) dst[c] += (real)src[c];
}

/* Transformer heads of KV group kv in batch b: dq of those heads, dk and dv
 * of the group (the group's heads are visited in order, so no races). */
static void backward_group(const geom *g, real *dq, real *dk, real *dv, const real *dout,
                           const dtx_attn_saved *sv, const real *q, const real *k, const real *v,
                           int64_t b, int64_t kv) {
    int64_t d = g->d, T = g->T;
    kv_ptrs p = {k + b * T * g->ks + kv * d, v + b * T * g->vs + kv * d,
                 dk + b * T * g->ks + kv * d, dv + b * T * g->vs + kv * d};
    double o[MAXD], dqt[MAXD];
    for (int64_t j = kv * g->n_rep; j < (kv + 1) * g->n_rep; j++) {
        for (int64_t t = 0; t < T; t++) {
            const real *pr = att_row(sv, g, b, j, t);
            const real *dO = dout + (b * T + t) * g->os + j * d;
            /* D = dO·o with o = A·v recomputed (the output is not saved). */
            pv_row(o, pr, p.v, g->vs, t, d);
            double D = 0;
            for (int64_t c = 0; c < d; c++) D += dO[c] * o[c];
            memset(dqt, 0, sizeof(double) * (size_t)d);
            int64_t qoff = (b * T + t) * g->qs + j * d;
            branch_row_backward(g, pr, 1.0, dO, D, q + qoff, dqt, p, t);
            add_row(dq + qoff, dqt, d);
        }
    }
}

/* DIFF heads of KV group kv in batch b (spec §4.1 steps 2–4). Adds dq, dk,
 * dv directly; the shared γ and λ gradients go to dg [2d] and *dl, which the
 * caller combines across groups in a fixed order. */
static void backward_diff_group(const geom *g, const dtx_attn_dims *a, real *dq, real *dk, real *dv,
                                double *dg, double *dl, const real *dout, const dtx_attn_saved *sv,
                                const real *q, const real *k, const real *v, const real *gamma,
                                int64_t b, int64_t kv) {
    int64_t d = g->d, w = g->w, T = g->T;
    double lam = a->lambda, cs = 1.0 - a->lambda_init;
    int64_t koff = b * T * g->ks + 2 * kv * d, voff = b * T * g->vs + kv * w;
    kv_ptrs p1 = {k + koff, v + voff, dk + koff, dv + voff};
    kv_ptrs p2 = {k + koff + d, v + voff, dk + koff + d, dv + voff};
    real dO[MAXW];
    double dq1[MAXD], dq2[MAXD];
    for (int64_t h = kv * g->n_rep; h < (kv + 1) * g->n_rep; h++) {
        for (int64_t t = 0; t < T; t++) {
            int64_t off = (b * T + t) * g->os + h * w;
            const real *o1 = sv->o1 + off, *o2 = sv->o2 + off, *dY = dout + off;
            double rs = sv->rstd[(b * T + t) * g->H + h];
            /* RMSNorm backward: x̂ = O·rstd, dx̂ = c·γ ⊙ dY, dO = rstd·(dx̂ − x̂·mean(dx̂ ⊙ x̂)). */
            double m = 0;
            for (int64_t c = 0; c < w; c++) {
                double xh = (o1[c] - lam * o2[c]) * rs;
                m += cs * gamma[c] * dY[c] * xh;
                dg[c] += cs * dY[c] * xh;
            }
            m /= (double)w;
            double D1 = 0, S2 = 0;
            for (int64_t c = 0; c < w; c++) {
                double xh = (o1[c] - lam * o2[c]) * rs;
                dO[c] = (real)(rs * (cs * gamma[c] * dY[c] - xh * m));
                D1 += dO[c] * (double)o1[c];
                S2 += dO[c] * (double)o2[c];
            }
            /* Branch split: dO1 = dO, dO2 = −λ·dO; dλ = −Σ dO ⊙ o2. */
            *dl -= S2;
            int64_t qoff = (b * T + t) * g->qs + 2 * h * d;
            memset(dq1, 0, sizeof(double) * (size_t)d);
            memset(dq2, 0, sizeof(double) * (size_t)d);
            branch_row_backward(g, att_row(sv, g, b, 2 * h, t), 1.0, dO, D1, q + qoff, dq1, p1, t);
            branch_row_backward(g, att_row(sv, g, b, 2 * h + 1, t), -lam, dO, -lam * S2, q + qoff + d,
                                dq2, p2, t);
            add_row(dq + qoff, dq1, d);
            add_row(dq + qoff + d, dq2, d);
        }
    }
}

static void backward_transformer(const geom *g, real *dq, real *dk, real *dv, const real *dout,
                                 const dtx_attn_saved *s, const real *q, const real *k, const real *v) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t kv = 0; kv < g->G; kv++) backward_group(g, dq, dk, dv, dout, s, q, k, v, b, kv);
}

/* One task per (batch, KV group). The γ and λ partial sums are combined in
 * task order (`ordered`), so they are deterministic for any thread count;
 * schedule(static, 1) keeps the ordered section from serialising the work. */
static void backward_diff(const geom *g, const dtx_attn_dims *a, real *dq, real *dk, real *dv,
                          real *dsubln_w, double *dlambda, const real *dout, const dtx_attn_saved *s,
                          const real *q, const real *k, const real *v, const real *gamma) {
    double dg_tot[MAXW] = {0}, dl_tot = 0;
    int64_t ntask = g->B * g->G;
#pragma omp parallel for schedule(static, 1) ordered
    for (int64_t task = 0; task < ntask; task++) {
        double dg[MAXW] = {0}, dl = 0;
        backward_diff_group(g, a, dq, dk, dv, dg, &dl, dout, s, q, k, v, gamma, task / g->G,
                            task % g->G);
#pragma omp ordered
        {
            for (int64_t c = 0; c < g->w; c++) dg_tot[c] += dg[c];
            dl_tot += dl;
        }
    }
    if (dsubln_w)
        for (int64_t c = 0; c < g->w; c++) dsubln_w[c] += (real)dg_tot[c];
    if (dlambda) *dlambda += dl_tot;
}

/* dq, dk, dv (+=) with the shapes of q, k, v; DIFF also dsubln_w [2d] and
 * *dlambda (+=; either may be NULL to skip it). */
void dtx_attention_plain_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w,
                            double *dlambda, const real *dout, const real *out, const dtx_attn_saved *s,
                            const real *q, const real *k, const real *v, const real *subln_w) {
    geom g = make_geom(a);
    assert(dq && dk && dv && dout && s && s->att && q && k && v);
    assert(a->quant_bits == 0); /* quantised logits are for evaluation: no gradient through round() */
    if (a->diff) {
        assert(s->o1 && s->o2 && s->rstd && subln_w);
        backward_diff(&g, a, dq, dk, dv, dsubln_w, dlambda, dout, s, q, k, v, subln_w);
    } else {
        backward_transformer(&g, dq, dk, dv, dout, s, q, k, v);
    }
}
