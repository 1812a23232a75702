/* Quantising a model from calibration sequences (difftx.h:
 * dtx_model_quantize; docs/quantize.md has the rules and why).
 *
 * The model runs over the sequences one at a time, each a prefill whose
 * observer (model.h, dtx_prefill_hooks) records the inputs as the layer
 * walker reaches them, so only one layer's activations are alive; each linear
 * layer's input (attention_norm output, attention output, ffn_norm output,
 * SwiGLU output, final norm output) and the attention's q, k after RoPE are
 * "inputs". Per input we keep its absolute maximum, a uniform sample of
 * SAMPLE_VALUES of its values (for the percentile and MSE ranges), a
 * uniform sample of CLIP_ROWS of its rows (for the 8-bit clipping search)
 * and each column's sum of squares over every row (for the 4-bit one).
 * Then: W8A8's static scales from the chosen method; each 8-bit weight
 * row's clipping factor from its outputs' error on the kept rows (rounded
 * the way inference rounds them), each 4-bit group's from its weights'
 * error weighted by its inputs' mean squares (dtx_q4_best_clip: per group,
 * finer than one factor per row can be); and dtx_model_quantize_weights. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul_dnnl.h"
#include "model/model.h"

#define SAMPLE_VALUES 16384
#define CLIP_ROWS 64
typedef struct {
    int64_t K;
    double amax;
    float *sample; /* [SAMPLE_VALUES] */
    int64_t n_sample;
    float *rows;   /* [CLIP_ROWS, K] */
    int64_t n_rows;
    double *m2;    /* [K] the sum of squares of each column over every row (4-bit clipping) */
} input_stats;

/* Inputs: per layer xn1, attn_y, xn2, g, q, k; then xnf. */
enum { IN_XN1, IN_ATTN, IN_XN2, IN_G, IN_Q, IN_K, IN_PER_LAYER };

static const char *const KIND_NAMES[] = {"attn_in", "attn_out", "ffn_in", "ffn_hidden", "qk", "output"};
const char *dtx_a8_kind_name(unsigned kind) {
    for (int b = 0; b < 6; b++)
        if (kind == 1u << b) return KIND_NAMES[b];
    return NULL;
}

/* The DTX_A8_* kind of stats index j (n_in inputs, the last the output projection's). */
static inline unsigned kind_of(int64_t j, int64_t n_in) { /* inline: unused in the double build */
    if (j == n_in - 1) return DTX_A8_OUTPUT;
    switch (j % IN_PER_LAYER) {
    case IN_XN1: return DTX_A8_ATTN_IN;
    case IN_ATTN: return DTX_A8_ATTN_OUT;
    case IN_XN2: return DTX_A8_FFN_IN;
    case IN_G: return DTX_A8_FFN_HIDDEN;
    default: return DTX_A8_QK;
    }
}

static const char *const METHOD_NAMES[] = {"absmax", "percentile", "mse"};
const char *dtx_calib_method_name(dtx_calib_method m) {
    return (int)m >= 0 && (int)m <= 2 ? METHOD_NAMES[m] : "unknown";
}
int dtx_calib_method_parse(const char *s, dtx_calib_method *out) {
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, METHOD_NAMES[i])) {
            *out = (dtx_calib_method)i;
            return 1;
        }
    return 0;
}

dtx_quant_options dtx_quant_options_default(dtx_wquant scheme) {
    dtx_quant_options o = {.scheme = scheme, .act_method = DTX_CALIB_ABSMAX, .percentile = 99.99, .clip_search = 1};
    return o;
}

#ifndef DTX_DOUBLE
static const float CLIPS[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f, 0.7f};
#define N_CLIPS ((int)(sizeof CLIPS / sizeof CLIPS[0]))

/* The input (index into the stats) that the weight at params offset off
 * multiplies, or -1 (an untied embedding: a lookup). */
static int input_at(const dtx_model *m, size_t off) {
    if (off == m->out_w) return (int)(IN_PER_LAYER * m->cfg.n_layers); /* the output (the tied embedding too) */
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        const dtx_layer_offsets *o = &m->layers[l];
        int base = (int)(l * IN_PER_LAYER);
        if (off == o->wq || off == o->wk || off == o->wv) return base + IN_XN1;
        if (dtx_config_has_lambda_proj(&m->cfg) && off == o->wl) return base + IN_XN1; /* DIFF2's λ logits */
        if (off == o->wo) return base + IN_ATTN;
        if (off == o->w1 || off == o->w3) return base + IN_XN2;
        if (off == o->w2) return base + IN_G;
    }
    return -1;
}
static int input_of(const dtx_model *m, int i) { return input_at(m, m->tensors[i].offset); }

/* Adds the sample's share of one sequence's N rows of input j: values and rows drawn uniformly, so that
 * after the last sequence each sample holds (up to) its capacity, proportionally from every sequence. */
static void record(input_stats *s, const float *x, int64_t N, int64_t K, int64_t done, int64_t total, dtx_rng *r) {
    for (int64_t i = 0; i < N * K; i++) s->amax = fmax(s->amax, fabs((double)x[i]));
    for (int64_t i = 0; i < N; i++)
        for (int64_t k = 0; k < K; k++) s->m2[k] += (double)x[i * K + k] * x[i * K + k];
    int64_t want_v = SAMPLE_VALUES * done / total, want_r = CLIP_ROWS * done / total;
    for (; s->n_sample < want_v; s->n_sample++) s->sample[s->n_sample] = x[dtx_rng_next(r) % (uint64_t)(N * K)];
    for (; s->n_rows < want_r; s->n_rows++)
        memcpy(s->rows + s->n_rows * K, x + (int64_t)(dtx_rng_next(r) % (uint64_t)N) * K, sizeof(float) * (size_t)K);
}

/* The calibration's observer of a prefill (model.h, dtx_prefill_hooks):
 * each input recorded once per sequence, where the prefill shows it, so
 * that only one layer's activations are alive at a time. */
typedef struct {
    const dtx_model *m;
    input_stats *in;
    int64_t *seen;   /* [n_in] the sequence an input was last recorded in */
    int64_t seq, n_seq;
    dtx_rng *rng;
    real *xnf, *rstd; /* [len, dim], [len]: the final norm's rows */
} calib_run;

static void record_once(calib_run *r, int j, const real *x, int64_t n, int64_t K) {
    if (j < 0 || r->seen[j] == r->seq) return; /* q, k, v share their input: once */
    r->seen[j] = r->seq;
    r->in[j].K = K;
    record(&r->in[j], x, n, K, r->seq + 1, r->n_seq, r->rng);
}
static void on_linear_input(void *ctx, size_t off, const real *x, int64_t M, int64_t K) {
    calib_run *r = ctx;
    if (off != r->m->out_w) record_once(r, input_at(r->m, off), x, M, K); /* the head sees the last row only */
}
static void on_layer_qk(void *ctx, int64_t l, const real *q, const real *k, int64_t n) {
    calib_run *r = ctx;
    record_once(r, (int)(l * IN_PER_LAYER + IN_Q), q, n, dtx_config_q_dim(&r->m->cfg));
    record_once(r, (int)(l * IN_PER_LAYER + IN_K), k, n, r->m->kv_dim);
}
static void on_final(void *ctx, const real *x, int64_t n) { /* every row's input of the output projection */
    calib_run *r = ctx;
    const dtx_config *c = &r->m->cfg;
    dtx_rmsnorm_forward(r->xnf, r->rstd, x, r->m->params + r->m->final_norm, n, c->dim, c->norm_eps);
    record_once(r, (int)(IN_PER_LAYER * c->n_layers), r->xnf, n, c->dim);
}

static int cmp_abs(const void *a, const void *b) {
    float x = fabsf(*(const float *)a), y = fabsf(*(const float *)b);
    return (x > y) - (x < y);
}

/* The static int8 scale of an input by the method (>0 whenever anything was nonzero). */
static float act_scale(input_stats *s, const dtx_quant_options *o) {
    double amax = s->amax > 0 ? s->amax : 1e-8, range = amax;
    if (o->act_method == DTX_CALIB_PERCENTILE && s->n_sample > 0) {
        qsort(s->sample, (size_t)s->n_sample, sizeof(float), cmp_abs);
        int64_t k = (int64_t)ceil(o->percentile / 100.0 * (double)s->n_sample) - 1;
        k = k < 0 ? 0 : k >= s->n_sample ? s->n_sample - 1 : k;
        range = fabs(s->sample[k]) > 0 ? fabs(s->sample[k]) : amax;
    } else if (o->act_method == DTX_CALIB_MSE && s->n_sample > 0) {
        double best = INFINITY;
        for (int g = 1; g <= 40; g++) { /* 2.5% .. 100% of the absolute maximum */
            double r = amax * g / 40.0, step = r / 127.0, err = 0;
            for (int64_t i = 0; i < s->n_sample; i++) {
                double v = s->sample[i], q = rint(v / step);
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                err += (v - q * step) * (v - q * step);
            }
            if (err < best) best = err, range = r;
        }
    }
    return (float)(range / 127.0);
}

/* Row w [K] quantised to 8 bits with clip c (as dtx_model_quantize_weights does) and dequantised into out [K]. */
static void fake_quant_row(float *out, const float *w, int64_t K, float c, int8_t *q8) {
    float amax = 0;
    for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(w[k]));
    float s = dtx_q8_quantize_row(q8, w, K, amax * c);
    dtx_q8_dequantize(out, q8, &s, 1, K);
}

/* Each 8-bit row's clipping factor for tensor i: the one of CLIPS whose outputs on the rows X [R, K] are
 * closest (squared error) to the fp32 weight's. clip [N] receives them; *sum adds them up. */
static dtx_status search_clip(const dtx_model *m, int i, const float *X, int64_t R, float *clip, double *sum) {
    const dtx_tensor_info *t = &m->tensors[i];
    int64_t N = t->shape[0], K = t->shape[1];
    float *tmp = NULL; /* a weight in place, widened */
    const float *W = dtx_model_weight_f32(m, i, &tmp);
    if (!W) return dtx_last_status();
    float *Y = dtx_alloc((size_t)(R * N), sizeof(float)), *Yc = dtx_alloc((size_t)(R * N), sizeof(float));
    float *Wc = dtx_alloc((size_t)(N * K), sizeof(float));
    double *best = dtx_alloc((size_t)N, sizeof(double));
    int8_t *q8 = dtx_alloc((size_t)K, 1);
    dtx_status st = DTX_OK;
    if (!Y || !Yc || !Wc || !best || !q8) {
        st = dtx_fail(DTX_ERR_NOMEM, "out of memory searching the clipping of '%s'", t->name);
        goto done;
    }
    dtx_matmul_forward(Y, X, W, R, K, N, DTX_PREC_FP32);
    for (int ci = 0; ci < N_CLIPS; ci++) {
        for (int64_t n = 0; n < N; n++) fake_quant_row(Wc + n * K, W + n * K, K, CLIPS[ci], q8);
        dtx_matmul_forward(Yc, X, Wc, R, K, N, DTX_PREC_FP32);
        for (int64_t n = 0; n < N; n++) {
            double e = 0;
            for (int64_t r = 0; r < R; r++) e += (double)(Y[r * N + n] - Yc[r * N + n]) * (Y[r * N + n] - Yc[r * N + n]);
            if (ci == 0 || e < best[n]) best[n] = e, clip[n] = CLIPS[ci];
        }
    }
    for (int64_t n = 0; n < N; n++) *sum += clip[n];
done:
    free(Y), free(Yc), free(Wc), free(best), free(q8), free(tmp);
    return st;
}
#endif

dtx_status dtx_model_quantize(dtx_model *m, const dtx_quant_options *o, const int32_t *tokens, int64_t n_seq,
                              int64_t len, dtx_quant_summary *summary) {
#ifdef DTX_DOUBLE
    (void)m, (void)o, (void)tokens, (void)n_seq, (void)len, (void)summary;
    return dtx_fail(DTX_ERR_ARG, "quantised models need the float build");
#else
    if (m->wquant != DTX_WQ_NONE)
        return dtx_fail(DTX_ERR_ARG, "the model is already quantised (%s)", dtx_wquant_name(m->wquant));
    /* weights in place stay there: the calibration's forwards read them, the
     * search widens one tensor at a time, and dtx_model_quantize_weights
     * codes them a tensor at a time (the quantisation streams) */
    if (o->scheme != DTX_WQ_W8A16 && o->scheme != DTX_WQ_W8A8 && o->scheme != DTX_WQ_W4A16)
        return dtx_fail(DTX_ERR_ARG, "unknown weight quantisation scheme %d", (int)o->scheme);
    if ((int)o->act_method < 0 || (int)o->act_method > 2)
        return dtx_fail(DTX_ERR_ARG, "unknown calibration method %d", (int)o->act_method);
    if (o->act_fp16 && o->scheme == DTX_WQ_W8A8)
        return dtx_fail(DTX_ERR_ARG, "fp16 activations are for w8a16 and w4a16 (w8a8's are int8)");
    if (o->act_fp16 != 0 && o->act_fp16 != 1) return dtx_fail(DTX_ERR_ARG, "act_fp16 must be 0 or 1");
    if (o->a16_inputs && (o->scheme != DTX_WQ_W8A8 || (o->a16_inputs & ~(unsigned)DTX_A8_ALL)))
        return dtx_fail(DTX_ERR_ARG, "a16_inputs = %u: a set of DTX_A8_* kinds, for w8a8", o->a16_inputs);
    if (o->act_method == DTX_CALIB_PERCENTILE && !(o->percentile > 50 && o->percentile <= 100))
        return dtx_fail(DTX_ERR_ARG, "calibration percentile %g: expected a value in (50, 100]", o->percentile);
    if (n_seq < 1) return dtx_fail(DTX_ERR_ARG, "calibration needs at least one sequence");
    if (len < 1 || len > m->cfg.max_seq_len)
        return dtx_fail(DTX_ERR_ARG, "calibration length %lld: expected 1 to max_seq_len %lld", (long long)len,
                        (long long)m->cfg.max_seq_len);
    const int64_t L = m->cfg.n_layers, n_in = IN_PER_LAYER * L + 1;
    /* the widest input of any kind: the residual's, the feed-forward's, the attention's output, q (k is narrower) */
    const int64_t widths[4] = {m->cfg.dim, m->cfg.ffn_dim, dtx_config_attn_dim(&m->cfg), dtx_config_q_dim(&m->cfg)};
    int64_t wide = 0;
    for (int i = 0; i < 4; i++) wide = widths[i] > wide ? widths[i] : wide;
    input_stats *in = calloc((size_t)n_in, sizeof *in);
    float *in_scales = calloc((size_t)m->n_tensors, sizeof(float)), *qk = calloc(2 * (size_t)L, sizeof(float));
    float **clip = calloc((size_t)m->n_tensors, sizeof *clip);
    dtx_status st = DTX_OK;
    if (!in || !in_scales || !qk || !clip) goto nomem;
    for (int64_t j = 0; j < n_in; j++) {
        in[j].sample = dtx_alloc(SAMPLE_VALUES, sizeof(float));
        in[j].rows = dtx_alloc((size_t)(CLIP_ROWS * wide), sizeof(float));
        in[j].m2 = dtx_calloc((size_t)wide, sizeof(double));
        if (!in[j].sample || !in[j].rows || !in[j].m2) goto nomem;
    }
    /* the forward passes, each sequence a prefill that shows its inputs as it goes (one layer's
     * activations alive at a time); the attention and matmul settings as they are, but logits unquantised */
    int bits = m->attn_quant_bits;
    m->attn_quant_bits = 0;
    dtx_rng rng;
    dtx_rng_seed(&rng, 20261201);
    calib_run run = {.m = m, .in = in, .n_seq = n_seq, .rng = &rng};
    dtx_kvcache *kv = NULL;
    run.seen = malloc(sizeof *run.seen * (size_t)n_in);
    run.xnf = dtx_alloc((size_t)(len * m->cfg.dim), sizeof(real));
    run.rstd = dtx_alloc((size_t)len, sizeof(real));
    if (!run.seen || !run.xnf || !run.rstd) st = dtx_fail(DTX_ERR_NOMEM, "out of memory for the calibration");
    if (!st) st = dtx_kvcache_init(&kv, m, len);
    dtx_prefill_hooks hooks = {.ctx = &run, .linear_input = on_linear_input, .layer_qk = on_layer_qk,
                               .final = on_final};
    if (!st) dtx_kvcache_set_hooks(kv, &hooks);
    for (int64_t j = 0; run.seen && j < n_in; j++) run.seen[j] = -1;
    for (int64_t s = 0; s < n_seq && !st; s++) {
        run.seq = s;
        dtx_kvcache_reset(kv);
        st = dtx_model_prefill(m, kv, tokens + s * len, len, NULL);
    }
    dtx_kvcache_free(kv);
    free(run.seen), free(run.xnf), free(run.rstd);
    m->attn_quant_bits = bits;
    if (st) goto done;
    /* W8A8's static scales */
    double act_clip = 0;
    int n_act = 0;
    float *scale_of = calloc((size_t)n_in, sizeof(float));
    if (!scale_of) goto nomem;
    for (int64_t j = 0; j < n_in; j++) {
        if (o->a16_inputs & kind_of(j, n_in)) continue; /* kept 16-bit: scale 0 */
        scale_of[j] = act_scale(&in[j], o);
        act_clip += scale_of[j] * 127.0 / (in[j].amax > 0 ? in[j].amax : 1e-8), n_act++;
    }
    for (int64_t l = 0; l < L; l++)
        qk[2 * l] = scale_of[l * IN_PER_LAYER + IN_Q], qk[2 * l + 1] = scale_of[l * IN_PER_LAYER + IN_K];
    /* each weight's input scale and rows' clipping */
    double clip_sum = 0;
    int64_t clip_n = 0;
    for (int i = 0; i < m->n_tensors && !st; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        if (t->ndim != 2) continue;
        int j = input_of(m, i);
        if (j < 0) continue; /* an untied embedding: absmax rows */
        in_scales[i] = scale_of[j];
        if (!o->clip_search) continue;
        int64_t N = t->shape[0], K = t->shape[1], ng = dtx_q4_groups(K);
        int four = dtx_model_tensor_bits(m, o->scheme, i) == 4;
        clip[i] = dtx_alloc((size_t)(four ? N * ng : N), sizeof(float));
        if (!clip[i]) {
            free(scale_of);
            goto nomem;
        }
        if (four) { /* each group's factor, weighted by its inputs' mean squares */
            float *tmp = NULL; /* a weight in place, widened */
            const float *W = dtx_model_weight_f32(m, i, &tmp);
            if (!W) {
                free(scale_of);
                goto nomem;
            }
            for (int64_t n = 0; n < N; n++)
                for (int64_t g = 0; g < ng; g++) {
                    int64_t k0 = g * DTX_Q4_GROUP;
                    clip[i][n * ng + g] = dtx_q4_best_clip(W + n * K + k0, K - k0, in[j].m2 + k0);
                    clip_sum += clip[i][n * ng + g];
                }
            free(tmp);
            clip_n += N * ng;
            continue;
        }
        int64_t R = in[j].n_rows;
        /* rounded in place: the tensors that share an input round it again to the same values */
        dtx_model_round_inputs(o->scheme, o->act_fp16, scale_of[j], in[j].rows, in[j].rows, R * K);
        st = search_clip(m, i, in[j].rows, R, clip[i], &clip_sum);
        clip_n += N;
    }
    free(scale_of);
    if (!st) st = dtx_model_quantize_weights(m, o->scheme, (const float *const *)clip, in_scales, qk);
    if (!st) m->act_fp16 = o->act_fp16;
    if (!st && summary) {
        summary->rows = n_seq * len;
        summary->mean_clip = clip_n ? clip_sum / (double)clip_n : 1.0;
        summary->act_clip = o->scheme == DTX_WQ_W8A8 && n_act ? act_clip / n_act : 1.0;
    }
    goto done;
nomem:
    st = dtx_fail(DTX_ERR_NOMEM, "out of memory for the calibration statistics");
done:
    for (int64_t j = 0; in && j < n_in; j++) free(in[j].sample), free(in[j].rows), free(in[j].m2);
    for (int i = 0; clip && i < m->n_tensors; i++) free(clip[i]);
    free(in), free(in_scales), free(qk), free(clip);
    return st;
#endif
}
