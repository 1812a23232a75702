/* The epilogue of every attention head, forward and backward, written once
 * for the plain, flash and decode kernels (kernels.h, dtx_attn_arch):
 * combine the maps (DIFF: O = o1 − λ·o2), the optional per-head RMSNorm
 * with its shared weight γ, and the output scale s. Row statistics in
 * double, as the official code computes its norms in fp32 over bf16
 * activations; stores round once. */
#include "kernels/kernels.h"

double dtx_attn_out_scale(const dtx_attn_arch *ar) { return ar->diff ? 1.0 - ar->lambda_init : 1.0; }

int dtx_attn_epilogue_is_identity(const dtx_attn_arch *ar) { return !ar->diff && !ar->subln; }

/* A converted Transformer's phase-in (ar->keep = τ > 0): y = τ·O + (1 − τ)·(s·γ ⊙ O·r), and its
 * backward dO = τ·dY + (1 − τ)·(the norm's backward of dY), dγ scaled by 1 − τ. Apart so that the
 * usual epilogue below stays as it was, bit for bit. */
static double mixed_forward(const dtx_attn_arch *ar, real *y, const real *o1, const real *x2, double lam,
                            const real *gamma, int64_t w) {
    const double s = dtx_attn_out_scale(ar), tau = ar->keep, u = 1 - tau;
    double ss = 0;
    for (int64_t c = 0; c < w; c++) {
        double oc = (double)o1[c] - lam * x2[c];
        ss += oc * oc;
    }
    const double r = ar->subln ? 1.0 / sqrt(ss / (double)w + ar->eps) : 1.0;
    for (int64_t c = 0; c < w; c++) {
        double oc = (double)o1[c] - lam * x2[c];
        y[c] = (real)(tau * oc + u * s * (ar->subln ? gamma[c] * oc * r : oc));
    }
    return r;
}

static void mixed_backward(const dtx_attn_arch *ar, real *dO, double *dgamma, const real *dY, const real *o1,
                           const real *x2, double lam, const real *gamma, double rstd, int64_t w) {
    const double s = dtx_attn_out_scale(ar), tau = ar->keep, u = 1 - tau;
    if (!ar->subln) {
        for (int64_t c = 0; c < w; c++) dO[c] = (real)((tau + u * s) * dY[c]);
        return;
    }
    double m = 0;
    for (int64_t c = 0; c < w; c++) m += s * gamma[c] * dY[c] * (((double)o1[c] - lam * x2[c]) * rstd);
    m /= (double)w;
    for (int64_t c = 0; c < w; c++) {
        double xh = ((double)o1[c] - lam * x2[c]) * rstd;
        if (dgamma) dgamma[c] += u * s * dY[c] * xh;
        dO[c] = (real)(tau * dY[c] + u * rstd * (s * gamma[c] * dY[c] - xh * m));
    }
}

double dtx_attn_epilogue_forward(const dtx_attn_arch *ar, real *y, const real *o1, const real *o2,
                                 const real *gamma, int64_t w) {
    /* no second map: O = o1 − 0·o1 = o1 (exactly, for finite o1) */
    const double lam = o2 ? ar->lambda : 0, s = dtx_attn_out_scale(ar);
    const real *x2 = o2 ? o2 : o1;
    if (ar->keep > 0) return mixed_forward(ar, y, o1, x2, lam, gamma, w);
    if (!ar->subln) {
#pragma omp simd
        for (int64_t c = 0; c < w; c++) y[c] = (real)(s * ((double)o1[c] - lam * x2[c]));
        return 1.0;
    }
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < w; c++) {
        double oc = (double)o1[c] - lam * x2[c]; /* the fused subtraction in double (spec §4.3) */
        ss += oc * oc;
    }
    const double r = 1.0 / sqrt(ss / (double)w + ar->eps);
#pragma omp simd
    for (int64_t c = 0; c < w; c++) y[c] = (real)(s * gamma[c] * ((double)o1[c] - lam * x2[c]) * r);
    return r;
}

static inline real operand(real x, int round_bf16) {
#ifndef DTX_DOUBLE
    if (round_bf16) return dtx_bf16_round_f32(x);
#endif
    (void)round_bf16;
    return x;
}

dtx_attn_epi_terms dtx_attn_epilogue_backward(const dtx_attn_arch *ar, real *dO, double *dgamma, const real *dY,
                                              const real *o1, const real *o2, const real *gamma, double rstd,
                                              int64_t w, int round_bf16) {
    const double lam = o2 ? ar->lambda : 0, s = dtx_attn_out_scale(ar);
    const real *x2 = o2 ? o2 : o1;
    if (ar->keep > 0) {
        mixed_backward(ar, dO, dgamma, dY, o1, x2, lam, gamma, rstd, w);
    } else if (!ar->subln) {
#pragma omp simd
        for (int64_t c = 0; c < w; c++) dO[c] = (real)(s * dY[c]);
    } else {
        /* x̂ = O·r; dx̂ = s·γ ⊙ dY; dγ += s·dY ⊙ x̂; dO = r·(dx̂ − x̂·mean(dx̂ ⊙ x̂)) */
        double m = 0;
#pragma omp simd reduction(+ : m)
        for (int64_t c = 0; c < w; c++) m += s * gamma[c] * dY[c] * (((double)o1[c] - lam * x2[c]) * rstd);
        m /= (double)w;
        if (dgamma)
            for (int64_t c = 0; c < w; c++) dgamma[c] += s * dY[c] * (((double)o1[c] - lam * x2[c]) * rstd);
#pragma omp simd
        for (int64_t c = 0; c < w; c++) {
            double xh = ((double)o1[c] - lam * x2[c]) * rstd;
            dO[c] = (real)(rstd * (s * gamma[c] * dY[c] - xh * m));
        }
    }
    dtx_attn_epi_terms t = {0, 0, 0};
    double d1 = 0, d2 = 0, sl = 0;
#pragma omp simd reduction(+ : d1, d2, sl)
    for (int64_t c = 0; c < w; c++) {
        real op = operand(dO[c], round_bf16);
        d1 += op * (double)o1[c];
        d2 += op * (double)x2[c];
        sl += dO[c] * (double)x2[c];
    }
    t.d1 = d1;
    if (o2) t.d2 = d2, t.dl = -sl;
    return t;
}
