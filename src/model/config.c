/* Model configuration: defaults, the parameter-matched baseline, validation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kernels/kernels.h"

dtx_config dtx_config_default(void) {
    dtx_config c = {
        .arch = DTX_ARCH_DIFF,
        .dim = 256,
        .n_layers = 4,
        .n_heads = 4,
        .n_kv_heads = 4,
        .vocab_size = 4096,
        .ffn_dim = 688, /* ~8/3 · dim, rounded to a multiple of 16 */
        .max_seq_len = 256,
        .rope_theta = 10000.0,
        .norm_eps = 1e-5,
        .tie_embeddings = 1,
    };
    return c;
}

const char *dtx_arch_name(dtx_arch a) {
    return a == DTX_ARCH_DIFF ? "diff" : a == DTX_ARCH_DIFF2 ? "diff2" : "transformer";
}

/* DIFF with H heads of q/k width d has the projections of a Transformer with
 * 2H heads of width d (spec §2.7); KV heads double likewise. V2 keeps the
 * baseline's heads, KV heads and width, and adds query and λ weights: its
 * comparison is the Transformer of the same h and h_kv (spec §8.2). */
dtx_config dtx_config_baseline(const dtx_config *c) {
    dtx_config b = *c;
    b.subln = DTX_SUBLN_DEFAULT;
    b.lambda_init_fixed = 0;
    b.lambda_init_value = 0;
    b.v2_lambda = DTX_V2_LAMBDA_SIGMOID;
    if (c->arch == DTX_ARCH_DIFF2) {
        b.arch = DTX_ARCH_TRANSFORMER;
    } else if (c->arch == DTX_ARCH_DIFF) {
        b.arch = DTX_ARCH_TRANSFORMER;
        b.n_heads = c->n_heads * 2;
        b.n_kv_heads = c->n_kv_heads * 2;
    } else {
        b.arch = DTX_ARCH_DIFF;
        b.n_heads = c->n_heads / 2;
        b.n_kv_heads = c->n_kv_heads / 2;
    }
    return b;
}

int64_t dtx_config_default_head_dim(const dtx_config *c) {
    int64_t per = c->n_heads * (c->arch == DTX_ARCH_DIFF ? 2 : 1);
    return per > 0 && c->dim % per == 0 ? c->dim / per : 0;
}

int64_t dtx_config_head_dim(const dtx_config *c) {
    if (c->head_dim) return c->head_dim;
    int64_t per = c->n_heads * (c->arch == DTX_ARCH_DIFF ? 2 : 1);
    return per > 0 ? c->dim / per : 0;
}

int64_t dtx_config_q_dim(const dtx_config *c) {
    return (c->arch == DTX_ARCH_TRANSFORMER ? 1 : 2) * c->n_heads * dtx_config_head_dim(c);
}

int64_t dtx_config_attn_dim(const dtx_config *c) {
    return (c->arch == DTX_ARCH_DIFF ? 2 : 1) * c->n_heads * dtx_config_head_dim(c);
}

/* From the tensor table of docs/format.md, computed rather than built so that
 * counting a big model's baseline allocates nothing. */
int64_t dtx_config_num_params(const dtx_config *c, int64_t *nonembed) {
    int64_t D = c->dim, F = c->ffn_dim, d = dtx_config_head_dim(c);
    int64_t kv = (c->arch == DTX_ARCH_DIFF ? 2 : 1) * c->n_kv_heads * d;
    int64_t layer = 2 * D                                              /* attention_norm, ffn_norm */
                    + dtx_config_q_dim(c) * D + D * dtx_config_attn_dim(c) /* q_proj, out_proj */
                    + 2 * kv * D                                       /* k_proj, v_proj */
                    + 3 * F * D;                                       /* w1, w3, w2 */
    if (c->arch == DTX_ARCH_DIFF) layer += 4 * d;                      /* lambda_q1..k2 */
    if (dtx_config_has_lambda_proj(c)) layer += c->n_heads * D;        /* lambda_proj */
    if (dtx_config_has_subln(c)) layer += (c->arch == DTX_ARCH_DIFF ? 2 : 1) * d; /* subln: the head's width */
    int64_t ne = c->n_layers * layer + D;                              /* + final norm */
    if (nonembed) *nonembed = ne;
    return ne + c->vocab_size * D * (c->tie_embeddings ? 1 : 2);
}

double dtx_lambda_init(int64_t layer) { return 0.8 - 0.6 * exp(-0.3 * (double)layer); }

double dtx_config_lambda_init(const dtx_config *c, int64_t layer) {
    double li = c->lambda_init_fixed ? c->lambda_init_value : dtx_lambda_init(layer);
    return c->transformer_mix > 0 ? (1 - c->transformer_mix) * li : li; /* a converted Transformer's phase-in */
}

int dtx_config_has_subln(const dtx_config *c) {
    return c->subln == DTX_SUBLN_DEFAULT ? c->arch == DTX_ARCH_DIFF : c->subln == DTX_SUBLN_RMS;
}

static const char *const V2_LAMBDA_NAMES[] = {"sigmoid", "linear", "none"};

dtx_status dtx_config_set_v2_lambda(dtx_config *c, const char *value) {
    for (int i = 0; i < 3; i++)
        if (strcmp(value, V2_LAMBDA_NAMES[i]) == 0) {
            c->v2_lambda = (dtx_v2_lambda)i;
            return DTX_OK;
        }
    return dtx_fail(DTX_ERR_CONFIG, "v2_lambda = '%.40s' is not 'sigmoid', 'linear' or 'none'", value);
}

const char *dtx_config_v2_lambda_name(const dtx_config *c) {
    return (unsigned)c->v2_lambda < 3 ? V2_LAMBDA_NAMES[c->v2_lambda] : "?";
}

int dtx_config_has_lambda_proj(const dtx_config *c) {
    return c->arch == DTX_ARCH_DIFF2 && c->v2_lambda != DTX_V2_LAMBDA_NONE;
}

const char *dtx_config_subln_name(const dtx_config *c) { return dtx_config_has_subln(c) ? "rms" : "none"; }

dtx_status dtx_config_set_subln(dtx_config *c, const char *value) {
    if (strcmp(value, "rms") == 0) c->subln = DTX_SUBLN_RMS;
    else if (strcmp(value, "none") == 0) c->subln = DTX_SUBLN_NONE;
    else return dtx_fail(DTX_ERR_CONFIG, "subln = '%.40s' is not 'rms' or 'none'", value);
    return DTX_OK;
}

static dtx_status check_lambda_init(double v) {
    if (!(v >= 0 && v < 1))
        return dtx_fail(DTX_ERR_CONFIG, "lambda_init = %g is outside [0, 1) (the output scale is 1 - lambda_init)", v);
    return DTX_OK;
}

dtx_status dtx_config_set_lambda_init(dtx_config *c, const char *value) {
    if (strcmp(value, "schedule") == 0) {
        c->lambda_init_fixed = 0, c->lambda_init_value = 0;
        return DTX_OK;
    }
    char *end;
    double v = strtod(value, &end);
    if (end == value || *end != '\0' || !isfinite(v))
        return dtx_fail(DTX_ERR_CONFIG, "lambda_init = '%.40s' is not 'schedule' or a decimal number", value);
    dtx_status st = check_lambda_init(v);
    if (st) return st;
    c->lambda_init_fixed = 1, c->lambda_init_value = v;
    return DTX_OK;
}

void dtx_config_lambda_init_str(const dtx_config *c, char *buf, size_t cap) {
    if (c->lambda_init_fixed) dtx_format_real(c->lambda_init_value, buf, cap);
    else snprintf(buf, cap, "schedule");
}

void dtx_config_rope_scaling_str(const dtx_config *c, char *buf, size_t cap) {
    if (!(c->rope_factor > 0)) {
        snprintf(buf, cap, "none");
        return;
    }
    char f[32], lo[32], hi[32];
    snprintf(buf, cap, "llama3 %s %s %s %lld", dtx_format_real(c->rope_factor, f, sizeof f),
             dtx_format_real(c->rope_low_freq, lo, sizeof lo), dtx_format_real(c->rope_high_freq, hi, sizeof hi),
             (long long)c->rope_orig_max_pos);
}

static dtx_status check_rope_scaling(double f, double lo, double hi, int64_t orig);

dtx_status dtx_config_set_rope_scaling(dtx_config *c, const char *value) {
    if (strcmp(value, "none") == 0) {
        c->rope_factor = c->rope_low_freq = c->rope_high_freq = 0, c->rope_orig_max_pos = 0;
        return DTX_OK;
    }
    double f, lo, hi;
    long long orig;
    int used = 0;
    if (sscanf(value, "llama3 %lf %lf %lf %lld%n", &f, &lo, &hi, &orig, &used) != 4 || value[used] != '\0')
        return dtx_fail(DTX_ERR_CONFIG, "rope_scaling = '%.60s' is not 'none' or 'llama3 FACTOR LOW HIGH ORIG'", value);
    dtx_status st = check_rope_scaling(f, lo, hi, orig);
    if (st) return st;
    c->rope_factor = f, c->rope_low_freq = lo, c->rope_high_freq = hi, c->rope_orig_max_pos = orig;
    return DTX_OK;
}

void dtx_config_rope_freqs(const dtx_config *c, int64_t d, double *freq) {
    dtx_rope_freqs(freq, d, c->rope_theta);
    for (int64_t i = 0; i < d / 2; i++) {
        double f = freq[i];
        if (c->rope_factor > 0) { /* Llama 3.1: long wavelengths slowed by the factor, short ones kept */
            double w = 2 * M_PI / f, orig = (double)c->rope_orig_max_pos;
            double lo = c->rope_low_freq, hi = c->rope_high_freq;
            if (w > orig / lo) f /= c->rope_factor;
            else if (!(w < orig / hi)) {
                double s = (orig / w - lo) / (hi - lo);
                f = (1 - s) * f / c->rope_factor + s * f;
            }
        }
        freq[i] = f;
    }
}

int dtx_config_is_default_variant(const dtx_config *c) {
    return dtx_config_has_subln(c) == (c->arch == DTX_ARCH_DIFF) && !c->lambda_init_fixed &&
           c->v2_lambda == DTX_V2_LAMBDA_SIGMOID;
}

/* Limits keep every size product far from int64 overflow. */
#define MAX_DIM (1 << 16)
#define MAX_LAYERS 1024
#define MAX_VOCAB (1 << 24)
#define MAX_FFN (1 << 18)
#define MAX_SEQ (1 << 20)

static dtx_status check_rope_scaling(double f, double lo, double hi, int64_t orig) {
    if (!(f >= 1 && isfinite(f)) || !(lo > 0 && isfinite(lo)) || !(hi > lo && isfinite(hi)) || orig < 1 ||
        orig > MAX_SEQ)
        return dtx_fail(DTX_ERR_CONFIG, "rope_scaling llama3: factor %g must be at least 1, low_freq_factor %g positive, "
                        "high_freq_factor %g above it, original_max_position_embeddings %lld in [1, %d]", f, lo, hi,
                        (long long)orig, MAX_SEQ);
    return DTX_OK;
}

static dtx_status in_range(const char *key, int64_t v, int64_t hi) {
    if (v < 1 || v > hi) return dtx_fail(DTX_ERR_CONFIG, "%s = %lld is out of range [1, %lld]", key, (long long)v, (long long)hi);
    return DTX_OK;
}

dtx_status dtx_config_validate(const dtx_config *c) {
    dtx_status st;
    if (c->arch != DTX_ARCH_DIFF && c->arch != DTX_ARCH_TRANSFORMER && c->arch != DTX_ARCH_DIFF2)
        return dtx_fail(DTX_ERR_CONFIG, "arch %d is not diff, transformer or diff2", (int)c->arch);
    if ((st = in_range("dim", c->dim, MAX_DIM)) || (st = in_range("n_layers", c->n_layers, MAX_LAYERS)) ||
        (st = in_range("n_heads", c->n_heads, MAX_DIM)) || (st = in_range("n_kv_heads", c->n_kv_heads, MAX_DIM)) ||
        (st = in_range("vocab_size", c->vocab_size, MAX_VOCAB)) || (st = in_range("ffn_dim", c->ffn_dim, MAX_FFN)) ||
        (st = in_range("max_seq_len", c->max_seq_len, MAX_SEQ)))
        return st;
    int64_t sub = c->arch == DTX_ARCH_DIFF ? 2 * c->n_heads : c->n_heads;
    if (c->head_dim < 0 || c->head_dim > MAX_DIM)
        return dtx_fail(DTX_ERR_CONFIG, "head_dim = %lld is out of range [0 (the default), %d]", (long long)c->head_dim,
                        MAX_DIM);
    if (!c->head_dim && c->dim % sub)
        return dtx_fail(DTX_ERR_CONFIG, "n_heads = %lld does not divide dim = %lld%s", (long long)c->n_heads,
                        (long long)c->dim, c->arch == DTX_ARCH_DIFF ? " into 2·n_heads sub-heads" : "");
    if (c->n_heads % c->n_kv_heads)
        return dtx_fail(DTX_ERR_CONFIG, "n_kv_heads = %lld does not divide n_heads = %lld", (long long)c->n_kv_heads,
                        (long long)c->n_heads);
    int64_t hd = dtx_config_head_dim(c);
    if (hd % 2)
        return dtx_fail(DTX_ERR_CONFIG, "head_dim = %lld must be even for rotary embeddings (dim %lld, n_heads %lld)",
                        (long long)hd, (long long)c->dim, (long long)c->n_heads);
    if (hd > DTX_ATTN_MAX_HEAD_DIM)
        return dtx_fail(DTX_ERR_CONFIG, "head_dim = %lld exceeds the attention kernel's limit of %d (dim %lld, n_heads %lld)",
                        (long long)hd, DTX_ATTN_MAX_HEAD_DIM, (long long)c->dim, (long long)c->n_heads);
    if (c->n_heads * hd > MAX_DIM)
        return dtx_fail(DTX_ERR_CONFIG, "n_heads x head_dim = %lld exceeds %d", (long long)(c->n_heads * hd), MAX_DIM);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return dtx_fail(DTX_ERR_CONFIG, "rope_theta = %g must be a positive number", c->rope_theta);
    if (c->rope_factor != 0 &&
        (st = check_rope_scaling(c->rope_factor, c->rope_low_freq, c->rope_high_freq, c->rope_orig_max_pos)))
        return st;
    if (c->rope_factor == 0 && (c->rope_low_freq != 0 || c->rope_high_freq != 0 || c->rope_orig_max_pos != 0))
        return dtx_fail(DTX_ERR_CONFIG, "rope_low_freq, rope_high_freq and rope_orig_max_pos are set without a "
                        "rope_factor");
    if (!(c->norm_eps > 0) || !(c->norm_eps < 1))
        return dtx_fail(DTX_ERR_CONFIG, "norm_eps = %g must be in (0, 1)", c->norm_eps);
    if (c->tie_embeddings != 0 && c->tie_embeddings != 1)
        return dtx_fail(DTX_ERR_CONFIG, "tie_embeddings must be 0 or 1");
    if (c->subln != DTX_SUBLN_DEFAULT && c->subln != DTX_SUBLN_RMS && c->subln != DTX_SUBLN_NONE)
        return dtx_fail(DTX_ERR_CONFIG, "subln %d is not default, rms or none", (int)c->subln);
    if (c->lambda_init_fixed != 0 && c->lambda_init_fixed != 1)
        return dtx_fail(DTX_ERR_CONFIG, "lambda_init_fixed must be 0 or 1");
    if (c->lambda_init_fixed && c->arch != DTX_ARCH_DIFF)
        return dtx_fail(DTX_ERR_CONFIG, "lambda_init = %g: only arch diff has a lambda_init (this is a %s)",
                        c->lambda_init_value, dtx_arch_name(c->arch));
    if (c->lambda_init_fixed && (st = check_lambda_init(c->lambda_init_value))) return st;
    if (!(c->transformer_mix >= 0 && c->transformer_mix <= 1))
        return dtx_fail(DTX_ERR_CONFIG, "transformer_mix = %g is outside [0, 1]", c->transformer_mix);
    if (c->transformer_mix > 0 && c->arch != DTX_ARCH_DIFF)
        return dtx_fail(DTX_ERR_CONFIG, "transformer_mix = %g: only arch diff phases a converted Transformer in (this "
                        "is a %s)", c->transformer_mix, dtx_arch_name(c->arch));
    if (c->arch == DTX_ARCH_DIFF2 && c->subln == DTX_SUBLN_RMS)
        return dtx_fail(DTX_ERR_CONFIG, "subln = rms: arch diff2 has no per-head norm (spec §8.2)");
    if ((unsigned)c->v2_lambda > DTX_V2_LAMBDA_NONE)
        return dtx_fail(DTX_ERR_CONFIG, "v2_lambda %d is not sigmoid, linear or none", (int)c->v2_lambda);
    if (c->v2_lambda != DTX_V2_LAMBDA_SIGMOID && c->arch != DTX_ARCH_DIFF2)
        return dtx_fail(DTX_ERR_CONFIG, "v2_lambda = %s: only arch diff2 has a per-token lambda (this is a %s)",
                        dtx_config_v2_lambda_name(c), dtx_arch_name(c->arch));
    return DTX_OK;
}
