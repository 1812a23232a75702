/* Low-bit attention logits (docs/eval_quant.md, spec §6.9): dynamic absmax
 * quantisation of z = q·k/√d inside the attention kernels.
 *
 * Kernels: the row path behind the FLASH forward against the plain reference
 * with the same quantisation (both archs, GQA, odd T, several d, 4/6/8 bits,
 * both scopes); 16 bits within the bound the step size implies; a tiny case
 * whose quantised logits are worked out by hand (rounding half away from
 * zero, the step, separate steps for z1 and z2, an all-zero row); the decode
 * row kernel against a direct implementation of the definition, including
 * rows folded into one TENSOR-scope step.
 * Model: FLASH against PLAIN with quantisation on, the API's argument checks,
 * bits 0 restoring the unquantised logits bit for bit, no backward after a
 * quantised forward, cached decoding against the full forward (ROW scope) and
 * TENSOR-scope decoding against its own definition. */
#include "../test.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUANT_TOL 1e-5 /* row path vs plain reference, same quantisation */

static int verbose(void) {
    const char *v = getenv("DTX_QUANT_VERBOSE");
    return v && *v && *v != '0';
}

static double max_abs(const real *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* ------------------------------------------------------------ a problem */

typedef struct {
    dtx_attn_dims a;
    size_t nq, nk, nv, no;
    real *q, *k, *v, *gamma;
} prob;

static prob prob_make(uint64_t seed, int diff, int64_t B, int64_t T, int64_t H, int64_t G, int64_t d, double qk_sd) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    prob p;
    memset(&p, 0, sizeof p);
    p.a = (dtx_attn_dims){.geom.B = B, .geom.T = T, .geom.n_heads = H, .geom.n_kv_heads = G, .geom.head_dim = d, .arch.diff = diff, .arch.subln = diff,
                          .arch.lambda = diff ? 0.6 : 0, .arch.lambda_init = diff ? 0.35 : 0, .arch.eps = 1e-5};
    int64_t sub = diff ? 2 : 1;
    p.nq = (size_t)(B * T * sub * H * d), p.nk = (size_t)(B * T * sub * G * d);
    p.nv = (size_t)(B * T * G * sub * d), p.no = (size_t)(B * T * H * sub * d);
    p.q = randn(&r, p.nq, 0, qk_sd), p.k = randn(&r, p.nk, 0, qk_sd), p.v = randn(&r, p.nv, 0, 1);
    p.gamma = randn(&r, (size_t)(2 * d), 1, 0.3);
    return p;
}

static void prob_free(prob *p) { free(p->q), free(p->k), free(p->v), free(p->gamma); }

/* One forward's output and what the plain kernel saves (att, o1, o2). */
typedef struct {
    real *out, *att, *o1, *o2;
} fwd;

static fwd run_fwd(const prob *p, dtx_attn_impl impl, int bits, int tensor) {
    dtx_attn_dims a = p->a;
    a.run.impl = impl, a.run.quant_bits = bits, a.run.quant_tensor = tensor;
    fwd f = {alloc_r(p->no), impl == DTX_ATTN_PLAIN ? alloc_r(dtx_attention_att_size(&a)) : NULL, alloc_r(p->no),
             alloc_r(p->no)};
    real *rstd = alloc_r((size_t)(a.geom.B * a.geom.T * a.geom.n_heads));
    float *lse = calloc(dtx_attention_lse_size(&a) + 1, sizeof(float));
    real *work = dtx_alloc(dtx_attention_workspace_size(&a) + 1, sizeof(real));
    dtx_attn_saved s = {.att = f.att, .lse = lse, .o1 = f.o1, .o2 = f.o2, .rstd = rstd, .work = work};
    dtx_attention_forward(&a, f.out, &s, p->q, p->k, p->v, p->gamma);
    free(rstd), free(lse), free(work);
    return f;
}

static void fwd_free(fwd *f) { free(f->out), free(f->att), free(f->o1), free(f->o2); }

/* ------------------------------------------------- row path vs reference */

static double worst_seen;

static void quant_vs_plain(int diff, int64_t T, int64_t H, int64_t G, int64_t d, uint64_t seed) {
    prob p = prob_make(seed, diff, 2, T, H, G, d, 1);
    fwd off = run_fwd(&p, DTX_ATTN_PLAIN, 0, 0);
    for (int bits = 4; bits <= 8; bits += 2)
        for (int tensor = 0; tensor <= 1; tensor++) {
            fwd f = run_fwd(&p, DTX_ATTN_FLASH, bits, tensor), r = run_fwd(&p, DTX_ATTN_PLAIN, bits, tensor);
            double e = rel_err(f.out, r.out, p.no, sizeof(real) == 8, 1e-30);
            CHECKF(e < QUANT_TOL, "%s T%lld H%lld G%lld d%lld %d bits %s: rel err %.3g", diff ? "diff" : "tfm",
                   (long long)T, (long long)H, (long long)G, (long long)d, bits, tensor ? "tensor" : "row", e);
            worst_seen = e > worst_seen || e != e ? e : worst_seen;
            /* and the quantisation did something (one key: softmax is 1 whatever the logit) */
            double moved = rel_err(r.out, off.out, p.no, sizeof(real) == 8, 1e-30);
            if (T > 1 && bits == 4) CHECKF(moved > 1e-3, "4 bits moved the output by only %.3g", moved);
            fwd_free(&f), fwd_free(&r);
        }
    fwd_free(&off), prob_free(&p);
}

TEST(kernel_quant_row_path_matches_plain) {
    static const int64_t Ts[] = {1, 7, 33}, ds[] = {8, 16, 32}, reps[] = {1, 2, 4};
    uint64_t seed = 1000;
    for (int diff = 0; diff <= 1; diff++)
        for (int it = 0; it < 3; it++)
            for (int id = 0; id < 3; id++) {
                int64_t rep = reps[(it + id) % 3], G = rep == 4 ? 1 : 2;
                quant_vs_plain(diff, Ts[it], G * rep, G, ds[id], seed++);
            }
    if (verbose()) printf("    worst rel err %.2e\n", worst_seen);
}

/* Longer rows: the TENSOR pass over every row, and several tasks. */
TEST(kernel_quant_row_path_matches_plain_long) {
    quant_vs_plain(1, 97, 4, 2, 16, 1100);
    quant_vs_plain(0, 97, 6, 2, 16, 1101);
}

/* ------------------------------------------------------------- 16 bits */

/* The largest |z| of the problem, the bound on every step. */
static double logit_absmax(const prob *p) {
    const dtx_attn_dims *a = &p->a;
    int64_t sub = a->arch.diff ? 2 : 1, NQ = sub * a->geom.n_heads, NK = sub * a->geom.n_kv_heads, d = a->geom.head_dim;
    int64_t n_rep = a->geom.n_heads / a->geom.n_kv_heads;
    double m = 0;
    for (int64_t b = 0; b < a->geom.B; b++)
        for (int64_t i = 0; i < NQ; i++)
            for (int64_t t = 0; t < a->geom.T; t++)
                for (int64_t s = 0; s <= t; s++) {
                    const real *qt = p->q + ((b * a->geom.T + t) * NQ + i) * d;
                    const real *ks = p->k + ((b * a->geom.T + s) * NK + sub * (i / sub / n_rep) + i % sub) * d;
                    double z = 0;
                    for (int64_t c = 0; c < d; c++) z += (double)qt[c] * ks[c];
                    m = fmax(m, fabs(z / sqrt((double)d)));
                }
    return m;
}

/* With |z_q − z| <= s/2 for every logit, each log-probability moves by at
 * most s, so |Δp| <= p·(e^s − 1) and every output of A·v by at most
 * (e^s − 1)·max|v|; s <= max|z| / (2^15 − 1). Plus fp32 rounding. */
TEST(kernel_quant_16_bits_near_unquantised) {
    for (int diff = 0; diff <= 1; diff++)
        for (int tensor = 0; tensor <= 1; tensor++) {
            prob p = prob_make(1200 + (uint64_t)(2 * diff + tensor), diff, 2, 41, 4, 2, 16, 1.5);
            double step = logit_absmax(&p) / 32767.0, vmax = max_abs(p.v, p.nv);
            double bound = (expm1(step) + 2e-6) * vmax;
            fwd q = run_fwd(&p, DTX_ATTN_PLAIN, 16, tensor), o = run_fwd(&p, DTX_ATTN_PLAIN, 0, 0);
            /* DIFF: o1 = A1·v and o2 = A2·v, before the RMSNorm; else the output */
            const real *pairs[2][2] = {{diff ? q.o1 : q.out, diff ? o.o1 : o.out}, {q.o2, o.o2}};
            double worst = 0;
            int differs = 0;
            for (int j = 0; j < (diff ? 2 : 1); j++)
                for (size_t i = 0; i < p.no; i++) {
                    double e = fabs((double)pairs[j][0][i] - pairs[j][1][i]);
                    worst = fmax(worst, e);
                    differs |= e > 0;
                }
            CHECKF(worst <= bound, "%s %s: 16 bits moved A·v by %.3g > bound %.3g (step %.3g)", diff ? "diff" : "tfm",
                   tensor ? "tensor" : "row", worst, bound, step);
            CHECKF(differs, "16 bits changed nothing: not applied?");
            if (verbose()) printf("    16 bits: %.3g (bound %.3g)\n", worst, bound);
            if (!diff) { /* the row path too, with the flash kernel's own rounding on top */
                fwd qf = run_fwd(&p, DTX_ATTN_FLASH, 16, tensor), of = run_fwd(&p, DTX_ATTN_FLASH, 0, 0);
                double e = 0;
                for (size_t i = 0; i < p.no; i++) e = fmax(e, fabs((double)qf.out[i] - of.out[i]));
                CHECKF(e <= bound + 1e-5 * vmax, "row path, 16 bits: %.3g > bound %.3g", e, bound);
                fwd_free(&qf), fwd_free(&of);
            }
            fwd_free(&q), fwd_free(&o), prob_free(&p);
        }
}

/* ------------------------------------------------------------ by hand */

/* T = 3, one head, d = 4 (1/√d = 1/2), keys k_s = e_s, values v_s = e_s: the
 * logit of row t, key s is q_t[s]/2 and row t of the output is its
 * probability row. Logits: row 0 [0.7], row 1 [2, −0.5], row 2 [3, 2.5, −0.5].
 *   3 bits (±3 levels), ROW: row 1 step 2/3: [3, −0.75] → [3, −1]·(2/3);
 *     row 2 step 1: [3, 2.5, −0.5] → [3, 3, −1] (halves away from zero).
 *   3 bits, TENSOR: step 3/3 = 1 everywhere: row 1 [2, −1], row 2 [3, 3, −1].
 *   2 bits (±1 level), ROW: row 1 step 2: [1, −0.25] → [2, 0]; row 2 step 3:
 *     [1, 0.83, −0.17] → [3, 3, 0].
 *   2 bits, TENSOR: step 3: row 1 [0.67, −0.17] → [3, 0]; row 2 [3, 3, 0]. */
static const double hand_z[3][3] = {{0.7, 0, 0}, {2, -0.5, 0}, {3, 2.5, -0.5}};

/* expected quantised logits [case][row][key]; case = 2·(bits − 2) + tensor */
static const double hand_zq[4][3][3] = {
    {{0.7, 0, 0}, {2, 0, 0}, {3, 3, 0}},          /* 2 bits, ROW    */
    {{0.7, 0, 0}, {3, 0, 0}, {3, 3, 0}},          /* 2 bits, TENSOR */
    {{0.7, 0, 0}, {2, -2.0 / 3, 0}, {3, 3, -1}},  /* 3 bits, ROW    */
    {{1, 0, 0}, {2, -1, 0}, {3, 3, -1}},          /* 3 bits, TENSOR */
};

/* softmax of z[0..t] in double */
static void softmax_d(double *p, const double *z, int64_t t, double mult) {
    double mx = -INFINITY, sum = 0;
    for (int64_t s = 0; s <= t; s++) mx = fmax(mx, mult * z[s]);
    for (int64_t s = 0; s <= t; s++) sum += p[s] = exp(mult * z[s] - mx);
    for (int64_t s = 0; s <= t; s++) p[s] /= sum;
}

/* q rows giving logits z (×mult), keys and values e_s: B = 1, T = 3, H = G = 1, d = 4. */
static prob hand_prob(int diff, double mult2) {
    prob p = prob_make(1, diff, 1, 3, 1, 1, 4, 0);
    int64_t sub = diff ? 2 : 1, w = sub * 4;
    memset(p.q, 0, p.nq * sizeof(real)), memset(p.k, 0, p.nk * sizeof(real)), memset(p.v, 0, p.nv * sizeof(real));
    for (int64_t t = 0; t < 3; t++) {
        for (int64_t j = 0; j < sub; j++) {
            for (int64_t s = 0; s <= t; s++) p.q[(t * sub + j) * 4 + s] = (real)(2 * hand_z[t][s] * (j ? mult2 : 1));
            p.k[(t * sub + j) * 4 + t] = 1;
        }
        p.v[t * w + t] = 1;
    }
    for (int64_t c = 0; c < 2 * 4; c++) p.gamma[c] = 1;
    p.a.arch.lambda = 0.5, p.a.arch.lambda_init = 0.2;
    return p;
}

TEST(kernel_quant_hand_computed_transformer) {
    prob p = hand_prob(0, 1);
    for (int bits = 2; bits <= 3; bits++)
        for (int tensor = 0; tensor <= 1; tensor++) {
            const double(*zq)[3] = hand_zq[2 * (bits - 2) + tensor];
            fwd r = run_fwd(&p, DTX_ATTN_PLAIN, bits, tensor), f = run_fwd(&p, DTX_ATTN_FLASH, bits, tensor);
            for (int64_t t = 0; t < 3; t++) {
                double pe[3];
                softmax_d(pe, zq[t], t, 1);
                for (int64_t s = 0; s < 3; s++) {
                    double want = s <= t ? pe[s] : 0;
                    CHECKF(fabs(r.att[t * 3 + s] - want) < 1e-6 && fabs(r.out[t * 4 + s] - want) < 1e-6,
                           "%d bits %s row %lld key %lld: plain p %.7f out %.7f, want %.7f", bits,
                           tensor ? "tensor" : "row", (long long)t, (long long)s, r.att[t * 3 + s], r.out[t * 4 + s],
                           want);
                    CHECKF(fabs(f.out[t * 4 + s] - want) < 1e-6, "%d bits %s row %lld key %lld: row path %.7f, want %.7f",
                           bits, tensor ? "tensor" : "row", (long long)t, (long long)s, f.out[t * 4 + s], want);
                }
            }
            fwd_free(&r), fwd_free(&f);
        }
    prob_free(&p);
}

/* DIFF with z2 = 10·z1: each map has its own step, so z2_q = 10·z1_q and A2
 * = softmax(10·z1_q); one step shared by both maps (that of z2) would round
 * most of z1 to 0. The output is RMSNorm((A1 − λA2)·v)·(1 − λ_init). */
TEST(kernel_quant_hand_computed_diff_separate_steps) {
    prob p = hand_prob(1, 10);
    for (int bits = 2; bits <= 3; bits++)
        for (int tensor = 0; tensor <= 1; tensor++) {
            const double(*zq)[3] = hand_zq[2 * (bits - 2) + tensor];
            fwd r = run_fwd(&p, DTX_ATTN_PLAIN, bits, tensor), f = run_fwd(&p, DTX_ATTN_FLASH, bits, tensor);
            for (int64_t t = 0; t < 3; t++) {
                double p1[3], p2[3], O[8] = {0}, ss = 0;
                softmax_d(p1, zq[t], t, 1);
                softmax_d(p2, zq[t], t, 10);
                for (int64_t s = 0; s <= t; s++) {
                    CHECKF(fabs(r.att[(0 * 3 + t) * 3 + s] - p1[s]) < 1e-6, "A1[%lld][%lld] %.7f want %.7f",
                           (long long)t, (long long)s, r.att[t * 3 + s], p1[s]);
                    CHECKF(fabs(r.att[(1 * 3 + t) * 3 + s] - p2[s]) < 1e-6, "A2[%lld][%lld] %.7f want %.7f",
                           (long long)t, (long long)s, r.att[(3 + t) * 3 + s], p2[s]);
                    O[s] = p1[s] - 0.5 * p2[s];
                }
                for (int c = 0; c < 8; c++) ss += O[c] * O[c];
                double rs = 1 / sqrt(ss / 8 + 1e-5);
                for (int c = 0; c < 8; c++) {
                    double want = 0.8 * O[c] * rs;
                    CHECKF(fabs(r.out[t * 8 + c] - want) < 1e-5 && fabs(f.out[t * 8 + c] - want) < 1e-5,
                           "%d bits %s row %lld ch %d: plain %.7f row path %.7f want %.7f", bits,
                           tensor ? "tensor" : "row", (long long)t, c, r.out[t * 8 + c], f.out[t * 8 + c], want);
                }
            }
            fwd_free(&r), fwd_free(&f);
        }
    prob_free(&p);
}

/* All logits 0: the step is 0, z_q = 0, the maps uniform (no 0/0). */
TEST(kernel_quant_zero_logits) {
    prob p = hand_prob(0, 1);
    memset(p.q, 0, p.nq * sizeof(real));
    for (int tensor = 0; tensor <= 1; tensor++) {
        fwd r = run_fwd(&p, DTX_ATTN_PLAIN, 4, tensor), f = run_fwd(&p, DTX_ATTN_FLASH, 4, tensor);
        for (int64_t t = 0; t < 3; t++)
            for (int64_t s = 0; s <= t; s++) {
                double want = 1.0 / (double)(t + 1);
                CHECKF(fabs(r.out[t * 4 + s] - want) < 1e-6 && fabs(f.out[t * 4 + s] - want) < 1e-6,
                       "row %lld key %lld: %g / %g, want %g", (long long)t, (long long)s, r.out[t * 4 + s],
                       f.out[t * 4 + s], want);
            }
        fwd_free(&r), fwd_free(&f);
    }
    prob_free(&p);
}

/* ------------------------------------------------------- the row kernel */

/* The logit of query sub-head i against cached row t, as the kernels take
 * it: a double dot rounded to real once. */
static double naive_z(const dtx_attn_dims *a, const real *q, const real *kc, int64_t i, int64_t t) {
    int64_t d = a->geom.head_dim, sub = a->arch.diff ? 2 : 1, n_rep = a->geom.n_heads / a->geom.n_kv_heads;
    const real *qh = q + i * d, *kh = kc + t * sub * a->geom.n_kv_heads * d + (sub * (i / sub / n_rep) + i % sub) * d;
    double acc = 0;
    for (int64_t c = 0; c < d; c++) acc += (double)qh[c] * kh[c];
    return (double)(real)(acc / sqrt((double)d));
}

/* amax[j] = max(amax[j], max |z| of map j over all heads and len keys). */
static void naive_absmax(const dtx_attn_dims *a, double *amax, const real *q, const real *kc, int64_t len) {
    int64_t sub = a->arch.diff ? 2 : 1;
    for (int64_t i = 0; i < sub * a->geom.n_heads; i++)
        for (int64_t t = 0; t < len; t++) amax[i % sub] = fmax(amax[i % sub], fabs(naive_z(a, q, kc, i, t)));
}

/* The definition, directly: one query row q over len cached rows; the
 * logits as the kernels take them (double dots rounded to real once), then
 * quantised with the step of amax[j] (TENSOR) or of each sub-head's own row
 * (amax NULL), softmax, A1·v − λ·A2·v, RMSNorm and scale (DIFF). */
static void naive_row(const dtx_attn_dims *a, double *out, const real *q, const real *kc, const real *vc, int64_t len,
                      const real *gamma, const double *amax) {
    int64_t H = a->geom.n_heads, n_rep = H / a->geom.n_kv_heads, sub = a->arch.diff ? 2 : 1, w = sub * a->geom.head_dim;
    int64_t vs = a->geom.n_kv_heads * w;
    double *z = malloc((size_t)len * sizeof *z), *p = malloc((size_t)(2 * len) * sizeof *p);
    for (int64_t h = 0; h < H; h++) {
        for (int64_t j = 0; j < sub; j++) {
            double m = 0;
            for (int64_t t = 0; t < len; t++) {
                z[t] = naive_z(a, q, kc, sub * h + j, t);
                m = fmax(m, fabs(z[t]));
            }
            double step = (amax ? amax[j] : m) / (double)((1 << (a->run.quant_bits - 1)) - 1);
            for (int64_t t = 0; t < len; t++) z[t] = step > 0 ? (double)(real)(round(z[t] / step) * step) : 0;
            softmax_d(p + j * len, z, len - 1, 1);
        }
        double ss = 0;
        for (int64_t c = 0; c < w; c++) {
            double o = 0;
            for (int64_t t = 0; t < len; t++)
                o += (p[t] - (a->arch.diff ? a->arch.lambda * p[len + t] : 0)) * vc[t * vs + (h / n_rep) * w + c];
            out[h * w + c] = o;
            ss += o * o;
        }
        if (!a->arch.diff) continue;
        double rs = 1 / sqrt(ss / (double)w + a->arch.eps);
        for (int64_t c = 0; c < w; c++) out[h * w + c] *= (1 - a->arch.lambda_init) * gamma[c] * rs;
    }
    free(z), free(p);
}

/* The row kernel (ROW and TENSOR, bits 4 and 8) against naive_row; TENSOR
 * also with three rows folded into one step. len 600 takes the threaded path. */
static void decode_case(int diff, int64_t H, int64_t G, int64_t d, int64_t len, uint64_t seed) {
    prob p = prob_make(seed, diff, 1, len, H, G, d, 1); /* q: len rows; the last three are queries */
    dtx_attn_dims a = p.a;
    int64_t sub = diff ? 2 : 1, nqr = sub * H * d, w = sub * d, no = H * w;
    real *scratch = alloc_r(dtx_attention_decode_scratch_size(&a, len)), *out = alloc_r((size_t)no);
    double *want = calloc((size_t)no, sizeof *want);
    for (int bits = 4; bits <= 8; bits += 4)
        for (int tensor = 0; tensor <= 1; tensor++) {
            a.run.quant_bits = bits, a.run.quant_tensor = tensor;
            int64_t nrows = tensor && len >= 3 ? 3 : 1;
            double amax[2] = {0, 0}, amax_n[2] = {0, 0};
            for (int64_t r = 0; r < nrows; r++) {
                dtx_attention_decode_absmax(&a, amax, p.q + (len - nrows + r) * nqr, p.k, len - nrows + r + 1);
                naive_absmax(&a, amax_n, p.q + (len - nrows + r) * nqr, p.k, len - nrows + r + 1);
            }
            for (int j = 0; j < sub; j++)
                CHECKF(fabs(amax[j] - amax_n[j]) <= 1e-6 * amax_n[j], "absmax %d: %.9g, want %.9g", j, amax[j],
                       amax_n[j]);
            for (int64_t r = 0; r < nrows; r++) {
                int64_t n = len - nrows + r + 1;
                const real *qr = p.q + (n - 1) * nqr;
                if (nrows == 1) dtx_attention_decode(&a, out, qr, p.k, p.v, n, p.gamma, scratch);
                else dtx_attention_decode_with_absmax(&a, out, qr, p.k, p.v, n, p.gamma, scratch, amax);
                /* one row alone: TENSOR's step is the row's over all heads */
                naive_row(&a, want, qr, p.k, p.v, n, p.gamma, tensor ? amax_n : NULL);
                double e = 0, ref = 1e-30;
                for (int64_t c = 0; c < no; c++) e = fmax(e, fabs(out[c] - want[c])), ref = fmax(ref, fabs(want[c]));
                CHECKF(e / ref < QUANT_TOL, "%s H%lld G%lld d%lld len %lld %d bits %s row %lld: rel err %.3g",
                       diff ? "diff" : "tfm", (long long)H, (long long)G, (long long)d, (long long)n, bits,
                       tensor ? "tensor" : "row", (long long)r, e / ref);
            }
        }
    free(scratch), free(out), free(want), prob_free(&p);
}

TEST(kernel_quant_decode_row_matches_definition) {
    uint64_t seed = 1300;
    for (int diff = 0; diff <= 1; diff++) {
        decode_case(diff, 1, 1, 8, 1, seed++);
        decode_case(diff, 4, 2, 8, 5, seed++);
        decode_case(diff, 4, 1, 16, 37, seed++);
        decode_case(diff, 2, 2, 32, 20, seed++);
        decode_case(diff, 8, 2, 16, 600, seed++); /* threads over heads */
    }
}

/* ---------------------------------------------------------------- model */

enum { VOCAB = 61, MAXLEN = 32 };

static dtx_model *make_model(dtx_arch arch, int64_t n_heads, int64_t n_kv, int64_t layers, uint64_t seed) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 64;
    c.n_layers = layers;
    c.n_heads = n_heads;
    c.n_kv_heads = n_kv;
    c.vocab_size = VOCAB;
    c.ffn_dim = 96;
    c.max_seq_len = MAXLEN;
    c.tie_embeddings = 0;
    dtx_model *m = NULL;
    if (dtx_model_init(&m, &c, seed) != DTX_OK) return NULL;
    /* larger q/k projections: logits of a few units, as in a trained model */
    real *p = dtx_model_params(m);
    for (int64_t l = 0; l < layers; l++)
        for (int pass = 0; pass < 2; pass++) {
            size_t off = pass ? m->layers[l].wk : m->layers[l].wq;
            size_t n = (size_t)((pass ? m->kv_dim : c.dim) * c.dim);
            for (size_t i = 0; i < n; i++) p[off + i] *= 3;
        }
    return m;
}

static void random_tokens(int32_t *t, int64_t n, uint64_t seed) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(dtx_rng_next(&r) % VOCAB);
}

/* Layer 1's q and k are the same products in both implementations, so one
 * layer compares the two attention paths alone (after it, rounding
 * differences could move a logit across a rounding boundary). */
TEST(model_quant_flash_matches_plain) {
    enum { B = 2, T = 19 };
    int32_t tok[B * T];
    random_tokens(tok, B * T, 3);
    real *lf = malloc(sizeof(real) * B * T * VOCAB), *lp = malloc(sizeof(real) * B * T * VOCAB);
    REQUIRE(lf && lp);
    for (int arch = 0; arch < 2; arch++)
        for (int gqa = 0; gqa <= 1; gqa++) {
            int64_t H = arch == DTX_ARCH_DIFF ? 4 : 8;
            dtx_model *m = make_model((dtx_arch)arch, H, gqa ? H / 4 : H, 1, 20 + (uint64_t)(2 * arch + gqa));
            REQUIRE(m);
            for (int bits = 4; bits <= 8; bits += 4)
                for (int sc = 0; sc <= 1; sc++) {
                    CHECK(dtx_model_set_attention_quant(m, bits, (dtx_quant_scope)sc) == DTX_OK);
                    dtx_model_set_attention(m, DTX_ATTN_FLASH);
                    CHECK(dtx_model_forward(m, tok, NULL, B, T, lf, NULL) == DTX_OK);
                    dtx_model_set_attention(m, DTX_ATTN_PLAIN);
                    CHECK(dtx_model_forward(m, tok, NULL, B, T, lp, NULL) == DTX_OK);
                    double e = rel_err_f(lf, lp, (size_t)(B * T * VOCAB));
                    CHECKF(e < QUANT_TOL, "%s %s %d bits scope %d: rel err %.3g", arch ? "tfm" : "diff",
                           gqa ? "gqa" : "mha", bits, sc, e);
                }
            dtx_model_free(m);
        }
    free(lf), free(lp);
}

TEST(model_quant_api_and_bits_off) {
    enum { T = 24 };
    dtx_model *m = make_model(DTX_ARCH_DIFF, 4, 2, 2, 31);
    REQUIRE(m);
    static const int bad[] = {-1, 1, 17, 32, 1000};
    for (int i = 0; i < 5; i++) {
        CHECK(dtx_model_set_attention_quant(m, bad[i], DTX_QUANT_ROW) == DTX_ERR_ARG);
        CHECKF(strstr(dtx_last_error(), "bits"), "%s", dtx_last_error());
    }
    CHECK(dtx_model_set_attention_quant(m, 8, (dtx_quant_scope)2) == DTX_ERR_ARG);
    CHECK(m->attn_quant_bits == 0); /* refused calls change nothing */
    int32_t tok[T], tgt[T];
    random_tokens(tok, T, 4);
    random_tokens(tgt, T, 5);
    size_t n = (size_t)(T * VOCAB);
    real *l0 = malloc(n * sizeof(real)), *l1 = malloc(n * sizeof(real));
    REQUIRE(l0 && l1);
    double loss0 = 0, loss1 = 0;
    CHECK(dtx_model_forward(m, tok, tgt, 1, T, l0, &loss0) == DTX_OK);
    for (int bits = 2; bits <= 16; bits++) CHECK(dtx_model_set_attention_quant(m, bits, DTX_QUANT_TENSOR) == DTX_OK);
    CHECK(dtx_model_set_attention_quant(m, 4, DTX_QUANT_ROW) == DTX_OK);
    CHECK(dtx_model_forward(m, tok, tgt, 1, T, l1, &loss1) == DTX_OK);
    CHECKF(rel_err_f(l1, l0, n) > 1e-3, "4 bits changed the logits by only %.3g", rel_err_f(l1, l0, n));
    /* training never quantises: no backward after a quantised forward */
    CHECK(dtx_model_backward(m, 1.0) == DTX_ERR_ARG);
    CHECKF(strstr(dtx_last_error(), "quantised"), "%s", dtx_last_error());
    CHECK(dtx_model_set_attention_quant(m, 0, DTX_QUANT_ROW) == DTX_OK);
    CHECK(dtx_model_forward(m, tok, tgt, 1, T, l1, &loss1) == DTX_OK);
    CHECKF(memcmp(l0, l1, n * sizeof(real)) == 0 && loss0 == loss1, "bits 0 is not the unquantised model");
    CHECK(dtx_model_backward(m, 1.0) == DTX_OK);
    free(l0), free(l1);
    dtx_model_free(m);
}

/* Logits of every step: prefill n0 tokens, then decode one at a time. */
static int cached_logits(dtx_model *m, const int32_t *seq, int64_t n0, int64_t n, real *out) {
    dtx_kvcache *c = NULL;
    if (dtx_kvcache_init(&c, m, 0) != DTX_OK) return -1;
    int rc = 0;
    for (int64_t i = n0; i <= n && !rc; i++) {
        real *o = out + (i - 1) * VOCAB;
        rc = i == n0 ? dtx_model_prefill(m, c, seq, n0, o) != DTX_OK : dtx_model_decode(m, c, seq[i - 1], o) != DTX_OK;
    }
    dtx_kvcache_free(c);
    return rc ? -1 : 0;
}

/* Every weight matrix but the embeddings and the output gets one non-zero
 * per row, ±1 (±2 in q_proj and k_proj, for logits of a few units): every
 * product of the layers is then exact in any summation order, so the
 * one-row products of decoding and the batched ones of the forward give
 * the same q and k bit for bit. Without this, a logit within rounding
 * (~1e-7) of a rounding boundary of the quantiser may round one way in the
 * forward and the other in decoding, which moves that step's logits by
 * about one quantisation step: a real but not a wrong difference. */
static void sparsify(dtx_model *m, uint64_t seed) {
    dtx_rng r;
    dtx_rng_seed(&r, seed);
    real *p = dtx_model_params(m);
    for (int i = 0; i < dtx_model_num_tensors(m); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(m, i);
        if (t->ndim != 2 || t->is_embedding) continue;
        real mag = strstr(t->name, "q_proj") || strstr(t->name, "k_proj") ? 2 : 1;
        for (int64_t row = 0; row < t->shape[0]; row++) {
            real *w = p + t->offset + (size_t)(row * t->shape[1]);
            memset(w, 0, (size_t)t->shape[1] * sizeof(real));
            w[dtx_rng_next(&r) % (uint64_t)t->shape[1]] = dtx_rng_next(&r) & 1 ? mag : -mag;
        }
    }
}

/* ROW scope is causal row by row, so each decoded row (prefill of 5, then
 * steps) equals the full forward's row, for both architectures, MHA and
 * GQA, 4, 6 and 8 bits; and the quantisation did change the logits. */
TEST(generate_quant_decode_matches_forward_row) {
    int32_t seq[MAXLEN];
    random_tokens(seq, MAXLEN, 9);
    size_t n = (size_t)(MAXLEN * VOCAB);
    real *full = malloc(n * sizeof(real)), *cached = calloc(n, sizeof(real)), *off = malloc(n * sizeof(real));
    REQUIRE(full && cached && off);
    for (int arch = 0; arch < 2; arch++)
        for (int gqa = 0; gqa <= 1; gqa++)
            for (int bits = 4; bits <= 8; bits += 2) {
                int64_t H = arch == DTX_ARCH_DIFF ? 4 : 8, n0 = 5;
                dtx_model *m = make_model((dtx_arch)arch, H, gqa ? H / 4 : H, 2, 40 + (uint64_t)(2 * arch + gqa));
                REQUIRE(m);
                sparsify(m, 70 + (uint64_t)(2 * arch + gqa));
                CHECK(dtx_model_forward(m, seq, NULL, 1, MAXLEN, off, NULL) == DTX_OK);
                CHECK(dtx_model_set_attention_quant(m, bits, DTX_QUANT_ROW) == DTX_OK);
                CHECK(dtx_model_forward(m, seq, NULL, 1, MAXLEN, full, NULL) == DTX_OK);
                CHECKF(cached_logits(m, seq, n0, MAXLEN, cached) == 0, "decode: %s", dtx_last_error());
                double worst = 0, effect = 0;
                for (int64_t i = n0 - 1; i < MAXLEN; i++) {
                    const real *c = cached + i * VOCAB, *f = full + i * VOCAB;
                    worst = fmax(worst, rel_err_f(c, f, VOCAB));
                    effect = fmax(effect, rel_err_f(f, off + i * VOCAB, VOCAB));
                }
                CHECKF(worst < QUANT_TOL, "%s %s %d bits: cached vs full %.3g", arch ? "tfm" : "diff",
                       gqa ? "gqa" : "mha", bits, worst);
                CHECKF(effect > 1e-3, "%s %s %d bits: the quantisation moved the logits by only %.3g",
                       arch ? "tfm" : "diff", gqa ? "gqa" : "mha", bits, effect);
                if (verbose()) printf("    %s %s %d bits: %.2e (quantisation %.2e)\n", arch ? "tfm" : "diff",
                                      gqa ? "gqa" : "mha", bits, worst, effect);
                dtx_model_free(m);
            }
    free(full), free(cached), free(off);
}

/* TENSOR scope in cached decoding: the tensor is the call's rows. A prefill
 * on an empty cache is the forward over those rows, so its logits are the
 * forward's last row; a decode step's tensor is its one row over all heads,
 * which with one head (one map per branch) is ROW scope exactly; and a
 * prefill chunk after earlier tokens shares one step over its rows (so it
 * differs from ROW). */
TEST(generate_quant_tensor_scope) {
    int32_t seq[MAXLEN];
    random_tokens(seq, MAXLEN, 12);
    size_t n = (size_t)(MAXLEN * VOCAB);
    real *full = malloc(n * sizeof(real)), *a = calloc(n, sizeof(real)), *b = calloc(n, sizeof(real));
    REQUIRE(full && a && b);
    for (int arch = 0; arch < 2; arch++) {
        /* prefill == forward, several heads */
        dtx_model *m = make_model((dtx_arch)arch, arch == DTX_ARCH_DIFF ? 4 : 8, 2, 2, 50 + (uint64_t)arch);
        REQUIRE(m);
        CHECK(dtx_model_set_attention_quant(m, 6, DTX_QUANT_TENSOR) == DTX_OK);
        CHECK(dtx_model_forward(m, seq, NULL, 1, 20, full, NULL) == DTX_OK);
        CHECK(cached_logits(m, seq, 20, 20, a) == 0);
        double e = rel_err_f(a + 19 * VOCAB, full + 19 * VOCAB, VOCAB);
        CHECKF(e < QUANT_TOL, "%s: tensor prefill vs forward %.3g", arch ? "tfm" : "diff", e);
        dtx_model_free(m);
        /* one head: single-row TENSOR steps are ROW steps, bit for bit */
        m = make_model((dtx_arch)arch, 1, 1, 2, 60 + (uint64_t)arch);
        REQUIRE(m);
        CHECK(dtx_model_set_attention_quant(m, 4, DTX_QUANT_TENSOR) == DTX_OK);
        CHECK(cached_logits(m, seq, 1, MAXLEN, a) == 0);
        CHECK(dtx_model_set_attention_quant(m, 4, DTX_QUANT_ROW) == DTX_OK);
        CHECK(cached_logits(m, seq, 1, MAXLEN, b) == 0);
        CHECKF(memcmp(a, b, n * sizeof(real)) == 0, "%s: one head, tensor steps differ from row steps",
               arch ? "tfm" : "diff");
        /* a chunk of 12 rows after 8 tokens: one step over the 12 rows */
        dtx_kvcache *c = NULL;
        REQUIRE(dtx_kvcache_init(&c, m, 0) == DTX_OK);
        real ta[VOCAB], tr[VOCAB];
        CHECK(dtx_model_prefill(m, c, seq, 8, NULL) == DTX_OK);
        CHECK(dtx_model_prefill(m, c, seq + 8, 12, tr) == DTX_OK);
        CHECK(dtx_model_set_attention_quant(m, 4, DTX_QUANT_TENSOR) == DTX_OK);
        CHECK(dtx_kvcache_truncate(c, 8) == DTX_OK);
        CHECK(dtx_model_prefill(m, c, seq + 8, 12, ta) == DTX_OK);
        CHECKF(rel_err_f(ta, tr, VOCAB) > 1e-4, "%s: a tensor chunk equals row scope (%.3g)", arch ? "tfm" : "diff",
               rel_err_f(ta, tr, VOCAB));
        dtx_kvcache_free(c);
        dtx_model_free(m);
    }
    free(full), free(a), free(b);
}
