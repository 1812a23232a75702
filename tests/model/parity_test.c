/* PyTorch parity: the committed fixtures (tools/make_fixtures.py, computed in
 * float64 by an independent PyTorch reference) against this fp32 build:
 * logits, loss, every gradient, and the parameters after 3 AdamW steps with
 * warmup, cosine decay, clipping and weight decay; for both architectures,
 * MHA and GQA, tied and untied. Tolerance 1e-4 relative per tensor
 * (max |a - b| / max |b|). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/model.h"
#include "test.h"

#define TOL 1e-4

typedef struct {
    dtx_st_file ex;
    dtx_model *m;
    int32_t *x, *y;
    int64_t B, T;
} fixture;

static float *tensor_f32(const dtx_st_file *f, const char *name, size_t expect_numel) {
    const dtx_st_tensor *t = dtx_st_find(f, name);
    if (!t) { test_fail_at(__FILE__, __LINE__, "fixture lacks tensor '%s'", name); return NULL; }
    if (expect_numel && (size_t)t->numel != expect_numel) {
        test_fail_at(__FILE__, __LINE__, "fixture tensor '%s' has %lld values, expected %zu", name,
                     (long long)t->numel, expect_numel);
        return NULL;
    }
    float *out = malloc((size_t)t->numel * sizeof(float));
    if (out) dtx_st_to_real(t, out);
    return out;
}

static double meta_num(const dtx_st_file *f, const char *key) {
    const char *s = dtx_st_meta(f, key);
    if (!s) { test_fail_at(__FILE__, __LINE__, "fixture lacks metadata '%s'", key); return NAN; }
    return strtod(s, NULL);
}

static int fixture_open(fixture *fx, const char *name) {
    memset(fx, 0, sizeof *fx);
    char path[256];
    snprintf(path, sizeof path, "%s.model.safetensors", name);
    if (dtx_model_load(&fx->m, fixture_path(path)) != DTX_OK) {
        test_fail_at(__FILE__, __LINE__, "load %s: %s", path, dtx_last_error());
        return 0;
    }
    snprintf(path, sizeof path, "%s.expect.safetensors", name);
    if (dtx_st_open(&fx->ex, fixture_path(path)) != DTX_OK) {
        test_fail_at(__FILE__, __LINE__, "open %s: %s", path, dtx_last_error());
        return 0;
    }
    const dtx_st_tensor *tok = dtx_st_find(&fx->ex, "tokens");
    if (!tok || tok->ndim != 2) { test_fail_at(__FILE__, __LINE__, "fixture tokens missing"); return 0; }
    fx->B = tok->shape[0];
    fx->T = tok->shape[1] - 1;
    float *t = tensor_f32(&fx->ex, "tokens", 0);
    fx->x = malloc((size_t)(fx->B * fx->T) * sizeof(int32_t));
    fx->y = malloc((size_t)(fx->B * fx->T) * sizeof(int32_t));
    if (!t || !fx->x || !fx->y) return 0;
    for (int64_t b = 0; b < fx->B; b++)
        for (int64_t i = 0; i < fx->T; i++) {
            fx->x[b * fx->T + i] = (int32_t)t[b * (fx->T + 1) + i];
            fx->y[b * fx->T + i] = (int32_t)t[b * (fx->T + 1) + i + 1];
        }
    free(t);
    return 1;
}

static void fixture_close(fixture *fx) {
    dtx_st_close(&fx->ex);
    dtx_model_free(fx->m);
    free(fx->x);
    free(fx->y);
}

/* Compares every parameter-shaped tensor "<prefix><name>" against buf, by
 * max |a - b| / max |b|, or normwise (||a - b|| / ||b||) when `normwise`. */
static void compare_all(fixture *fx, const char *prefix, const float *buf, const char *what, int normwise) {
    for (int i = 0; i < dtx_model_num_tensors(fx->m); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(fx->m, i);
        char name[128];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        float *ref = tensor_f32(&fx->ex, name, t->numel);
        if (!ref) continue;
        double e = normwise ? rel_err_norm_f(buf + t->offset, ref, t->numel) : rel_err_f(buf + t->offset, ref, t->numel);
        CHECKF(e < TOL, "%s of %s: rel err %.3g", what, t->name, e);
        if (getenv("DTX_VERBOSE")) printf("    %-45s %s rel err %.2e\n", t->name, what, e);
        free(ref);
    }
}

static void parity_forward_backward_impl(const char *name, dtx_attn_impl impl) {
    fixture fx;
    if (!fixture_open(&fx, name)) { fixture_close(&fx); return; }
    dtx_model_set_attention(fx.m, impl);
    const dtx_config *c = dtx_model_config(fx.m);
    size_t nlog = (size_t)(fx.B * fx.T * c->vocab_size);
    float *logits = malloc(nlog * sizeof(float));
    float *ref_logits = tensor_f32(&fx.ex, "logits", nlog), *ref_loss = tensor_f32(&fx.ex, "loss", 1);
    double loss = NAN;
    REQUIRE(logits && ref_logits && ref_loss);
    REQUIRE(dtx_model_forward(fx.m, fx.x, fx.y, fx.B, fx.T, logits, &loss) == DTX_OK);
    double e = rel_err_f(logits, ref_logits, nlog);
    CHECKF(e < TOL, "logits rel err %.3g", e);
    CHECKF(fabs(loss - ref_loss[0]) < TOL * fabs(ref_loss[0]), "loss %.8f vs %.8f", loss, ref_loss[0]);
    /* the per-position losses average to the loss (and each is −log of the softmax at its target) */
    double *tl = malloc((size_t)(fx.B * fx.T) * sizeof *tl), mean = 0;
    REQUIRE(tl && dtx_model_token_losses(fx.m, tl) == DTX_OK);
    for (int64_t i = 0; i < fx.B * fx.T; i++) mean += tl[i] / (double)(fx.B * fx.T);
    CHECKF(fabs(mean - loss) < 1e-6 * loss, "token losses average %.8f, loss %.8f", mean, loss);
    dtx_model_zero_grad(fx.m);
    REQUIRE(dtx_model_backward(fx.m, 1.0) == DTX_OK);
    CHECK(dtx_model_token_losses(fx.m, tl) == DTX_ERR_ARG); /* the backward consumed the probabilities */
    free(tl);
    compare_all(&fx, "grad.", dtx_model_grads(fx.m), "gradient", 0);
    free(logits);
    free(ref_logits);
    free(ref_loss);
    fixture_close(&fx);
}

static void parity_forward_backward(const char *name) { parity_forward_backward_impl(name, DTX_ATTN_FLASH); }

/* The plain materialised attention (the reference kernel) matches too. */
TEST(parity_plain_attention_diff_gqa_untied) { parity_forward_backward_impl("diff_gqa_untied", DTX_ATTN_PLAIN); }
TEST(parity_plain_attention_tf_gqa_tied) { parity_forward_backward_impl("tf_gqa_tied", DTX_ATTN_PLAIN); }

static dtx_optim_config fixture_optim(const dtx_st_file *ex) {
    dtx_optim_config o = dtx_optim_default();
    o.lr = meta_num(ex, "lr");
    o.min_lr = meta_num(ex, "min_lr");
    o.warmup_steps = (int64_t)meta_num(ex, "warmup_steps");
    o.total_steps = (int64_t)meta_num(ex, "total_steps");
    const char *s = dtx_st_meta(ex, "schedule");
    o.schedule = s && strcmp(s, "linear") == 0 ? DTX_SCHED_LINEAR
                 : s && strcmp(s, "constant") == 0 ? DTX_SCHED_CONSTANT : DTX_SCHED_COSINE;
    o.beta1 = meta_num(ex, "beta1");
    o.beta2 = meta_num(ex, "beta2");
    o.eps = meta_num(ex, "eps");
    o.weight_decay = meta_num(ex, "weight_decay");
    const char *de = dtx_st_meta(ex, "decay_embeddings");
    o.decay_embeddings = de && strcmp(de, "true") == 0;
    o.clip_norm = meta_num(ex, "clip_norm");
    return o;
}

/* 3 AdamW steps on the fixture batch; `accum` micro-batches per step (the
 * batch split by rows) must give the same result as one full batch. */
static void parity_steps(const char *name, int accum) {
    fixture fx;
    if (!fixture_open(&fx, name)) { fixture_close(&fx); return; }
    dtx_optim_config o = fixture_optim(&fx.ex);
    int steps = (int)meta_num(&fx.ex, "steps");
    float *ref_norm = tensor_f32(&fx.ex, "grad_norm", (size_t)steps), *ref_lr = tensor_f32(&fx.ex, "lr", (size_t)steps);
    float *ref_loss = tensor_f32(&fx.ex, "train_loss", (size_t)steps);
    REQUIRE(ref_norm && ref_lr && ref_loss);
    REQUIRE(fx.B % accum == 0);
    dtx_optimizer *opt;
    REQUIRE(dtx_optimizer_init(&opt, fx.m, &o) == DTX_OK);
    int64_t mb = fx.B / accum;
    int clipped = 0;
    for (int s = 0; s < steps; s++) {
        dtx_model_zero_grad(fx.m);
        double total = 0;
        for (int a = 0; a < accum; a++) {
            double loss;
            size_t off = (size_t)(a * mb * fx.T);
            REQUIRE(dtx_model_forward(fx.m, fx.x + off, fx.y + off, mb, fx.T, NULL, &loss) == DTX_OK);
            REQUIRE(dtx_model_backward(fx.m, 1.0 / accum) == DTX_OK);
            total += loss / accum;
        }
        double norm, lr;
        REQUIRE(dtx_optimizer_step(opt, &norm, &lr) == DTX_OK);
        CHECKF(fabs(total - ref_loss[s]) < TOL * fabs(ref_loss[s]), "step %d loss %.8f vs %.8f", s, total, ref_loss[s]);
        CHECKF(fabs(norm - ref_norm[s]) < TOL * ref_norm[s], "step %d grad norm %.8f vs %.8f", s, norm, ref_norm[s]);
        CHECKF(fabs(lr - ref_lr[s]) < 1e-6 * ref_lr[s], "step %d lr %.8g vs %.8g", s, lr, ref_lr[s]);
        clipped |= ref_norm[s] > o.clip_norm;
    }
    CHECKF(clipped, "the fixture must exercise clipping (clip %g)", o.clip_norm);
    /* Normwise here: Adam scales each element's step by 1/sqrt(v), so an
     * element whose true gradient is ~1e-4 of its tensor's largest carries
     * the fp32 rounding of that gradient into a full-size step. A max-element
     * metric would measure fp32 noise, not correctness; a wrong decay, bias
     * correction, clip or lr moves the norm by far more than 1e-4. */
    compare_all(&fx, "after.", dtx_model_params(fx.m), "parameter after steps", 1);
    dtx_optimizer_free(opt);
    free(ref_norm);
    free(ref_lr);
    free(ref_loss);
    fixture_close(&fx);
}

#define PARITY(name)                                                  \
    TEST(parity_##name) { parity_forward_backward(#name); }          \
    TEST(parity_adamw_##name) { parity_steps(#name, 1); }            \
    TEST(parity_adamw_accum_##name) { parity_steps(#name, 2); }

PARITY(diff_mha_tied)
PARITY(diff_mha_untied)
PARITY(diff_gqa_tied)
PARITY(diff_gqa_untied)
PARITY(tf_mha_tied)
PARITY(tf_mha_untied)
PARITY(tf_gqa_tied)
PARITY(tf_gqa_untied)
/* Table 6's variants (interop.md "Variants"): DIFF without the per-head
 * norm, the Transformer with one, DIFF with a constant λ_init. */
PARITY(diff_gqa_untied_nosubln)
PARITY(diff_mha_tied_nosubln)
PARITY(tf_gqa_tied_subln)
PARITY(tf_mha_untied_subln)
PARITY(diff_mha_tied_li08)
PARITY(diff_gqa_untied_li05)
TEST(parity_plain_attention_diff_gqa_untied_nosubln) {
    parity_forward_backward_impl("diff_gqa_untied_nosubln", DTX_ATTN_PLAIN);
}
TEST(parity_plain_attention_tf_gqa_tied_subln) { parity_forward_backward_impl("tf_gqa_tied_subln", DTX_ATTN_PLAIN); }
/* DIFF V2 (interop.md "DIFF V2"), MHA and GQA, tied and untied, and spec
 * §8.3's ablations (λ without the sigmoid, no λ). */
PARITY(d2_mha_tied)
PARITY(d2_mha_untied)
PARITY(d2_gqa_tied)
PARITY(d2_gqa_untied)
PARITY(d2_gqa_untied_linear)
PARITY(d2_mha_tied_nolambda)
TEST(parity_plain_attention_d2_gqa_untied) { parity_forward_backward_impl("d2_gqa_untied", DTX_ATTN_PLAIN); }
/* What Hugging Face imports bring: a head width of its own (wider and
 * narrower than dim / heads) and Llama 3.1's RoPE scaling. */
PARITY(diff_gqa_untied_hd12_llama3)
PARITY(tf_gqa_tied_hd6_llama3)
PARITY(d2_gqa_untied_hd4)
TEST(parity_plain_attention_diff_gqa_untied_hd12_llama3) {
    parity_forward_backward_impl("diff_gqa_untied_hd12_llama3", DTX_ATTN_PLAIN);
}
