/* Causal attention with materialised T×T probabilities, for both the
 * Transformer and differential attention (spec §2.2–2.8 forward, §4.1
 * backward). Layouts (see kernels.h):
 *   Transformer: q [B,T,H·d], k, v [B,T,G·d], out [B,T,H·d], head j reads
 *     KV head j / (H/G); att [B,H,T,T].
 *   DIFF: q [B,T,2H·d], k [B,T,2G·d], v [B,T,G·2d], out [B,T,H·2d]; head h
 *     has q1 = sub-head 2h, q2 = 2h+1, reads k1 = 2g, k2 = 2g+1 and v = V[g],
 *     g = h / (H/G); att [B,2H,T,T] holds A1 at sub-head 2h, A2 at 2h+1.
 * Quantised logits (evaluation, a->run.quant_bits > 0, docs/eval_quant.md): every
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
    assert(a && a->geom.B >= 0 && a->geom.T >= 0 && a->geom.n_heads > 0 && a->geom.n_kv_heads > 0);
    assert(a->geom.n_heads % a->geom.n_kv_heads == 0);
    assert(a->geom.head_dim > 0 && a->geom.head_dim <= MAXD);
    geom g;
    g.B = a->geom.B, g.T = a->geom.T, g.H = a->geom.n_heads, g.G = a->geom.n_kv_heads, g.d = a->geom.head_dim;
    g.n_rep = g.H / g.G;
    int64_t sub = a->arch.diff ? 2 : 1; /* q/k sub-heads per head */
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

/* Quantised logits (a->run.quant_bits): p holds row t's logits already; quantise
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
    return a->run.impl == DTX_ATTN_FLASH ? (size_t)(a->geom.B * a->geom.T * (a->arch.diff ? 2 * a->geom.n_heads : a->geom.n_heads)) : 0;
}

size_t dtx_attention_att_size(const dtx_attn_dims *a) {
    if (a->run.impl != DTX_ATTN_PLAIN) return 0;
    int64_t nq = (a->arch.diff ? 2 : 1) * a->geom.n_heads;
    return (size_t)(a->geom.B * nq * a->geom.T * a->geom.T);
}

/* Elements of one [B, T, H·w] head-output buffer. */
static size_t head_rows_size(const dtx_attn_dims *a) {
    return (size_t)(a->geom.B * a->geom.T * a->geom.n_heads * (a->arch.diff ? 2 : 1) * a->geom.head_dim);
}

size_t dtx_attention_o_size(const dtx_attn_dims *a) {
    return dtx_attn_epilogue_is_identity(&a->arch) ? 0 : head_rows_size(a);
}

size_t dtx_attention_o2_size(const dtx_attn_dims *a) { return a->arch.diff ? head_rows_size(a) : 0; }

size_t dtx_attention_rstd_size(const dtx_attn_dims *a) {
    return a->arch.subln ? (size_t)(a->geom.B * a->geom.T * a->geom.n_heads) : 0;
}

/* ---------------------------------------------------------------- forward */

/* Row t of head h's output from its accumulators o1 (A·v or A1·v) and
 * DIFF's o2: identity epilogue: out = o1; otherwise o1 (and o2) saved, then
 * the epilogue (with rstd saved under subln). */
static void finish_row(const geom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *sv, const double *o1,
                       const double *o2, const real *gamma, int64_t b, int64_t t, int64_t h) {
    int64_t w = g->w, off = (b * g->T + t) * g->os + h * w;
    if (dtx_attn_epilogue_is_identity(&a->arch)) {
        for (int64_t c = 0; c < w; c++) out[off + c] = (real)o1[c];
        return;
    }
    real *x1 = sv->o1 + off, *x2 = o2 ? sv->o2 + off : NULL;
    for (int64_t c = 0; c < w; c++) x1[c] = (real)o1[c];
    for (int64_t c = 0; x2 && c < w; c++) x2[c] = (real)o2[c];
    double r = dtx_attn_epilogue_forward(&a->arch, out + off, x1, x2, gamma, w);
    if (a->arch.subln) sv->rstd[(b * g->T + t) * g->H + h] = (real)r;
}

/* Transformer head j of batch b: att rows and out[b, :, j·d : j·d+d]. */
static void forward_head(const geom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *sv, const real *q,
                         const real *k, const real *v, const real *gamma, const double *amax, int64_t b, int64_t j) {
    int64_t kv = j / g->n_rep, d = g->d;
    const real *kh = k + b * g->T * g->ks + kv * d, *vh = v + b * g->T * g->vs + kv * d;
    double o[MAXD];
    for (int64_t t = 0; t < g->T; t++) {
        real *p = att_row(sv, g, b, j, t);
        if (a->run.quant_bits) quant_softmax_row(p, t, g->T, amax ? amax[0] : -1, a->run.quant_bits);
        else softmax_row(p, q + (b * g->T + t) * g->qs + j * d, kh, g->ks, t, g->T, d, g->scale);
        pv_row(o, p, vh, g->vs, t, d);
        finish_row(g, a, out, sv, o, NULL, gamma, b, t, j);
    }
}

/* DIFF head h of batch b: both maps, o1 = A1·v, o2 = A2·v, then the epilogue
 * of O = o1 − λ·o2. */
static void forward_diff_head(const geom *g, const dtx_attn_dims *a, real *out,
                              const dtx_attn_saved *sv, const real *q, const real *k, const real *v,
                              const real *gamma, const double *amax, int64_t b, int64_t h) {
    int64_t kv = h / g->n_rep, d = g->d, w = g->w, T = g->T;
    const real *k1 = k + b * T * g->ks + 2 * kv * d, *k2 = k1 + d;
    const real *vh = v + b * T * g->vs + kv * w;
    double o1[MAXW], o2[MAXW];
    for (int64_t t = 0; t < T; t++) {
        const real *q1 = q + (b * T + t) * g->qs + 2 * h * d, *q2 = q1 + d;
        real *p1 = att_row(sv, g, b, 2 * h, t), *p2 = att_row(sv, g, b, 2 * h + 1, t);
        if (a->run.quant_bits) { /* z1 and z2 each with their own step */
            quant_softmax_row(p1, t, T, amax ? amax[0] : -1, a->run.quant_bits);
            quant_softmax_row(p2, t, T, amax ? amax[1] : -1, a->run.quant_bits);
        } else {
            softmax_row(p1, q1, k1, g->ks, t, T, d, g->scale);
            softmax_row(p2, q2, k2, g->ks, t, T, d, g->scale);
        }
        pv_row(o1, p1, vh, g->vs, t, w);
        pv_row(o2, p2, vh, g->vs, t, w);
        finish_row(g, a, out, sv, o1, o2, gamma, b, t, h);
    }
}

/* Quantised logits, batch row b: every logit row of every sub-head into att
 * first (so that TENSOR scope can take its maximum over all of them), then
 * each head quantises, normalises and reads V as the unquantised path. */
static void plain_quant_forward_batch(const geom *g, const dtx_attn_dims *a, real *out, const dtx_attn_saved *s,
                                      const real *q, const real *k, const real *v, const real *gamma, int64_t b) {
    int64_t sub = a->arch.diff ? 2 : 1, T = g->T, d = g->d;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < g->NQ; i++) {
        /* sub-head i = sub·h + j reads key sub-head sub·(h / n_rep) + j */
        int64_t ksub = sub * (i / sub / g->n_rep) + i % sub;
        for (int64_t t = 0; t < T; t++)
            logits_row(att_row(s, g, b, i, t), q + (b * T + t) * g->qs + i * d, k + b * T * g->ks + ksub * d, g->ks,
                       t, d, g->scale);
    }
    double amax[2] = {0, 0};
    if (a->run.quant_tensor) {
        for (int64_t i = 0; i < g->NQ; i++)
            for (int64_t t = 0; t < T; t++) amax[i % sub] = fmax(amax[i % sub], row_absmax(att_row(s, g, b, i, t), t));
    }
    const double *am = a->run.quant_tensor ? amax : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < g->H; h++) {
        if (a->arch.diff) forward_diff_head(g, a, out, s, q, k, v, gamma, am, b, h);
        else forward_head(g, a, out, s, q, k, v, gamma, am, b, h);
    }
}

/* out [B, T, NQ·d] (overwritten); s->att always, s->o1/o2/rstd for DIFF. */
void dtx_attention_plain_forward(const dtx_attn_dims *a, real *out, const dtx_attn_saved *s,
                           const real *q, const real *k, const real *v, const real *subln_w) {
    geom g = make_geom(a);
    assert(out && s && s->att && q && k && v);
    assert(dtx_attn_epilogue_is_identity(&a->arch) || s->o1);
    assert(!a->arch.diff || s->o2);
    assert(!a->arch.subln || (s->rstd && subln_w));
    assert(a->run.quant_bits == 0 || (a->run.quant_bits >= 2 && a->run.quant_bits <= 16));
    if (a->run.quant_bits) {
        for (int64_t b = 0; b < g.B; b++) plain_quant_forward_batch(&g, a, out, s, q, k, v, subln_w, b);
        return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < g.B; b++) {
        for (int64_t h = 0; h < g.H; h++) {
            if (a->arch.diff) forward_diff_head(&g, a, out, s, q, k, v, subln_w, NULL, b, h);
            else forward_head(&g, a, out, s, q, k, v, subln_w, NULL, b, h);
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
 * of the group (the group's heads are visited in order, so no races); the
 * γ gradient (subln) goes to dg [d]. */
static void backward_group(const geom *g, const dtx_attn_dims *a, real *dq, real *dk, real *dv, double *dg,
                           const real *dout, const dtx_attn_saved *sv, const real *q, const real *k, const real *v,
                           const real *gamma, int64_t b, int64_t kv) {
    int64_t d = g->d, T = g->T;
    int ident = dtx_attn_epilogue_is_identity(&a->arch);
    kv_ptrs p = {k + b * T * g->ks + kv * d, v + b * T * g->vs + kv * d,
                 dk + b * T * g->ks + kv * d, dv + b * T * g->vs + kv * d};
    double o[MAXD], dqt[MAXD];
    real dOb[MAXD];
    for (int64_t j = kv * g->n_rep; j < (kv + 1) * g->n_rep; j++) {
        for (int64_t t = 0; t < T; t++) {
            const real *pr = att_row(sv, g, b, j, t);
            int64_t off = (b * T + t) * g->os + j * d;
            const real *dO = dout + off;
            double D = 0;
            if (ident) { /* D = dO·o with o = A·v recomputed (the output is not saved) */
                pv_row(o, pr, p.v, g->vs, t, d);
                for (int64_t c = 0; c < d; c++) D += dO[c] * o[c];
            } else {
                double r = a->arch.subln ? sv->rstd[(b * T + t) * g->H + j] : 1.0;
                D = dtx_attn_epilogue_backward(&a->arch, dOb, dg, dO, sv->o1 + off, NULL, gamma, r, d, 0).d1;
                dO = dOb;
            }
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
    double lam = a->arch.lambda;
    int64_t koff = b * T * g->ks + 2 * kv * d, voff = b * T * g->vs + kv * w;
    kv_ptrs p1 = {k + koff, v + voff, dk + koff, dv + voff};
    kv_ptrs p2 = {k + koff + d, v + voff, dk + koff + d, dv + voff};
    real dO[MAXW];
    double dq1[MAXD], dq2[MAXD];
    for (int64_t h = kv * g->n_rep; h < (kv + 1) * g->n_rep; h++) {
        for (int64_t t = 0; t < T; t++) {
            int64_t off = (b * T + t) * g->os + h * w;
            double r = a->arch.subln ? sv->rstd[(b * T + t) * g->H + h] : 1.0;
            dtx_attn_epi_terms e =
                dtx_attn_epilogue_backward(&a->arch, dO, dg, dout + off, sv->o1 + off, sv->o2 + off, gamma, r, w, 0);
            /* Branch split: dO1 = dO, dO2 = −λ·dO; dλ = −Σ dO ⊙ o2. */
            *dl += e.dl;
            int64_t qoff = (b * T + t) * g->qs + 2 * h * d;
            memset(dq1, 0, sizeof(double) * (size_t)d);
            memset(dq2, 0, sizeof(double) * (size_t)d);
            branch_row_backward(g, att_row(sv, g, b, 2 * h, t), 1.0, dO, e.d1, q + qoff, dq1, p1, t);
            branch_row_backward(g, att_row(sv, g, b, 2 * h + 1, t), -lam, dO, -lam * e.d2, q + qoff + d,
                                dq2, p2, t);
            add_row(dq + qoff, dq1, d);
            add_row(dq + qoff + d, dq2, d);
        }
    }
}

/* One task per (batch, KV group). The γ and λ partial sums are combined in
 * task order (`ordered`), so they are deterministic for any thread count;
 * schedule(static, 1) keeps the ordered section from serialising the work. */
static void backward_all(const geom *g, const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w,
                         double *dlambda, const real *dout, const dtx_attn_saved *s, const real *q, const real *k,
                         const real *v, const real *gamma) {
    double dg_tot[MAXW] = {0}, dl_tot = 0;
    int64_t ntask = g->B * g->G;
#pragma omp parallel for schedule(static, 1) ordered
    for (int64_t task = 0; task < ntask; task++) {
        double dg[MAXW] = {0}, dl = 0;
        int64_t b = task / g->G, kv = task % g->G;
        if (a->arch.diff) backward_diff_group(g, a, dq, dk, dv, dg, &dl, dout, s, q, k, v, gamma, b, kv);
        else backward_group(g, a, dq, dk, dv, dg, dout, s, q, k, v, gamma, b, kv);
#pragma omp ordered
        {
            for (int64_t c = 0; c < g->w; c++) dg_tot[c] += dg[c];
            dl_tot += dl;
        }
    }
    if (dsubln_w && a->arch.subln)
        for (int64_t c = 0; c < g->w; c++) dsubln_w[c] += (real)dg_tot[c];
    if (dlambda && a->arch.diff) *dlambda += dl_tot;
}

/* dq, dk, dv (+=) with the shapes of q, k, v; subln also dsubln_w [w], DIFF
 * *dlambda (+=; either may be NULL to skip it). */
void dtx_attention_plain_backward(const dtx_attn_dims *a, real *dq, real *dk, real *dv, real *dsubln_w,
                            double *dlambda, const real *dout, const real *out, const dtx_attn_saved *s,
                            const real *q, const real *k, const real *v, const real *subln_w) {
    geom g = make_geom(a);
    assert(dq && dk && dv && dout && s && s->att && q && k && v);
    assert(a->run.quant_bits == 0); /* quantised logits are for evaluation: no gradient through round() */
    assert(dtx_attn_epilogue_is_identity(&a->arch) || s->o1);
    assert(!a->arch.diff || s->o2);
    assert(!a->arch.subln || (s->rstd && subln_w));
    backward_all(&g, a, dq, dk, dv, dsubln_w, dlambda, dout, s, q, k, v, subln_w);
}
