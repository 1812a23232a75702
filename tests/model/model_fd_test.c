/* Finite-difference check (double precision) of the whole model: the loss
 * with respect to samples of every parameter tensor, for both architectures,
 * MHA and GQA, tied and untied embeddings, and Table 6's variants. */
#ifndef DTX_DOUBLE
#error "model_fd_test.c is built with -DDTX_DOUBLE"
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "model/model.h"
#include "test.h"

static dtx_config small_config(dtx_arch arch, int gqa, int tied) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 24;
    c.n_layers = 2;
    c.n_heads = arch == DTX_ARCH_DIFF ? 2 : 4;       /* d = 6 */
    c.n_kv_heads = gqa == 2 ? 1 : gqa ? c.n_heads / 2 : c.n_heads; /* gqa 2: MQA */
    c.vocab_size = 19;
    c.ffn_dim = 20;
    c.max_seq_len = 9;
    c.tie_embeddings = tied;
    return c;
}

static double loss_of(dtx_model *m, const int32_t *x, const int32_t *y, int64_t B, int64_t T) {
    double loss = NAN;
    dtx_status st = dtx_model_forward(m, x, y, B, T, NULL, &loss);
    CHECK(st == DTX_OK);
    return loss;
}

/* variant: 0 the default; 1 the other subln; 2 a constant lambda_init 0.8 (DIFF);
 * 3, 4: DIFF2's λ without the sigmoid, and no λ; 5: a head width other than
 * dim / heads (4 instead of 6) and Llama 3.1's RoPE scaling (the Hugging Face
 * imports); 6, 7: a converted Transformer half phased in (transformer_mix 0.5),
 * with and without the per-head norm. */
static void fd_check_variant(dtx_arch arch, int gqa, int tied, dtx_attn_impl impl, int variant) {
    dtx_config c = small_config(arch, gqa, tied);
    if (variant == 1) c.subln = arch == DTX_ARCH_DIFF ? DTX_SUBLN_NONE : DTX_SUBLN_RMS;
    if (variant == 2) c.lambda_init_fixed = 1, c.lambda_init_value = 0.8;
    if (variant == 3) c.v2_lambda = DTX_V2_LAMBDA_LINEAR;
    if (variant == 4) c.v2_lambda = DTX_V2_LAMBDA_NONE;
    if (variant == 6 || variant == 7) c.transformer_mix = 0.5, c.head_dim = 6;
    if (variant == 7) c.subln = DTX_SUBLN_NONE;
    if (variant == 5) {
        c.head_dim = 4;
        c.rope_factor = 4, c.rope_low_freq = 1, c.rope_high_freq = 4, c.rope_orig_max_pos = 8;
    }
    dtx_model *m;
    REQUIRE(dtx_model_init(&m, &c, 7) == DTX_OK);
    dtx_model_set_attention(m, impl);
    double *p = dtx_model_params(m);
    dtx_rng rng;
    dtx_rng_seed(&rng, 11);
    /* Move norm weights and λ vectors away from their init so that every
     * path carries a distinct, non-trivial gradient. */
    for (int i = 0; i < dtx_model_num_tensors(m); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(m, i);
        if (t->ndim == 1)
            for (size_t j = 0; j < t->numel; j++) p[t->offset + j] += 0.3 * dtx_rng_normal(&rng);
    }
    enum { B = 2, T = 7 };
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)(dtx_rng_next(&rng) % (uint64_t)c.vocab_size);
        y[i] = (int32_t)(dtx_rng_next(&rng) % (uint64_t)c.vocab_size);
    }
    double l0 = loss_of(m, x, y, B, T);
    dtx_model_zero_grad(m);
    REQUIRE(dtx_model_backward(m, 1.0) == DTX_OK);
    double *g = dtx_model_grads(m);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < dtx_model_num_tensors(m); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(m, i);
        int samples = t->numel < 6 ? (int)t->numel : 6;
        for (int s = 0; s < samples; s++) {
            size_t j = t->offset + (size_t)(dtx_rng_next(&rng) % t->numel);
            double h = 1e-5, keep = p[j];
            p[j] = keep + h;
            double lp = loss_of(m, x, y, B, T);
            p[j] = keep - h;
            double lm = loss_of(m, x, y, B, T);
            p[j] = keep;
            double num = (lp - lm) / (2 * h), ana = g[j];
            double err = fabs(num - ana) / fmax(1e-7, fabs(num) + fabs(ana));
            if (err > worst) { worst = err; worst_name = t->name; }
            CHECKF(err < 1e-5, "%s variant %d %s[%zu]: analytic %.10g numeric %.10g (rel %.2e)", dtx_arch_name(arch),
                   variant, t->name, j - t->offset, ana, num, err);
        }
    }
    if (getenv("DTX_VERBOSE"))
        printf("    %s gqa=%d tied=%d: loss %.6f, worst rel err %.2e (%s)\n", dtx_arch_name(arch), gqa, tied, l0,
               worst, worst_name);
    /* The backward accumulates, and loss_scale scales: a second backward
     * with scale 0.5 adds half of the first. */
    size_t n = dtx_model_num_params(m);
    double *g1 = malloc(n * sizeof *g1);
    REQUIRE(g1);
    memcpy(g1, g, n * sizeof *g1);
    REQUIRE(loss_of(m, x, y, B, T) == l0);
    REQUIRE(dtx_model_backward(m, 0.5) == DTX_OK);
    double maxerr = 0;
    for (size_t j = 0; j < n; j++) maxerr = fmax(maxerr, fabs(g[j] - 1.5 * g1[j]));
    CHECKF(maxerr < 1e-12, "accumulated gradient off by %g", maxerr);
    free(g1);
    dtx_model_free(m);
}

static void fd_check_impl(dtx_arch arch, int gqa, int tied, dtx_attn_impl impl) {
    fd_check_variant(arch, gqa, tied, impl, 0);
}

/* The model's default attention is the fused flash kernel. */
static void fd_check(dtx_arch arch, int gqa, int tied) { fd_check_impl(arch, gqa, tied, DTX_ATTN_FLASH); }

TEST(model_fd_plain_attention_diff_gqa) { fd_check_impl(DTX_ARCH_DIFF, 1, 0, DTX_ATTN_PLAIN); }
TEST(model_fd_plain_attention_transformer_gqa) { fd_check_impl(DTX_ARCH_TRANSFORMER, 1, 1, DTX_ATTN_PLAIN); }
TEST(model_fd_diff_mha_tied) { fd_check(DTX_ARCH_DIFF, 0, 1); }
TEST(model_fd_diff_mha_untied) { fd_check(DTX_ARCH_DIFF, 0, 0); }
TEST(model_fd_diff_gqa_tied) { fd_check(DTX_ARCH_DIFF, 1, 1); }
TEST(model_fd_diff_gqa_untied) { fd_check(DTX_ARCH_DIFF, 1, 0); }
TEST(model_fd_transformer_mha_tied) { fd_check(DTX_ARCH_TRANSFORMER, 0, 1); }
TEST(model_fd_transformer_mha_untied) { fd_check(DTX_ARCH_TRANSFORMER, 0, 0); }
TEST(model_fd_transformer_gqa_tied) { fd_check(DTX_ARCH_TRANSFORMER, 1, 1); }
TEST(model_fd_transformer_gqa_untied) { fd_check(DTX_ARCH_TRANSFORMER, 1, 0); }
/* Table 6's variants, flash and plain attention. */
TEST(model_fd_diff_no_subln) {
    fd_check_variant(DTX_ARCH_DIFF, 1, 0, DTX_ATTN_FLASH, 1);
    fd_check_variant(DTX_ARCH_DIFF, 0, 1, DTX_ATTN_PLAIN, 1);
}
TEST(model_fd_transformer_subln) {
    fd_check_variant(DTX_ARCH_TRANSFORMER, 1, 1, DTX_ATTN_FLASH, 1);
    fd_check_variant(DTX_ARCH_TRANSFORMER, 0, 0, DTX_ATTN_PLAIN, 1);
}
TEST(model_fd_diff_lambda_init_fixed) { fd_check_variant(DTX_ARCH_DIFF, 1, 1, DTX_ATTN_FLASH, 2); }
/* A converted Transformer's phase-in, flash and plain attention. */
TEST(model_fd_transformer_mix) {
    fd_check_variant(DTX_ARCH_DIFF, 1, 0, DTX_ATTN_FLASH, 6);
    fd_check_variant(DTX_ARCH_DIFF, 0, 1, DTX_ATTN_PLAIN, 6);
    fd_check_variant(DTX_ARCH_DIFF, 1, 1, DTX_ATTN_FLASH, 7);
}
/* The Hugging Face imports' head width and RoPE scaling, every arch, flash and plain attention. */
TEST(model_fd_head_dim_and_rope_scaling) {
    fd_check_variant(DTX_ARCH_DIFF, 1, 0, DTX_ATTN_FLASH, 5);
    fd_check_variant(DTX_ARCH_DIFF, 0, 1, DTX_ATTN_PLAIN, 5);
    fd_check_variant(DTX_ARCH_TRANSFORMER, 1, 1, DTX_ATTN_FLASH, 5);
    fd_check_variant(DTX_ARCH_TRANSFORMER, 0, 0, DTX_ATTN_PLAIN, 5);
    fd_check_variant(DTX_ARCH_DIFF2, 1, 0, DTX_ATTN_FLASH, 5);
}
/* DIFF V2: 2h query heads (d = 6 with 4 heads), λ per token from lambda_proj. */
TEST(model_fd_diff2_mha_tied) { fd_check(DTX_ARCH_DIFF2, 0, 1); }
TEST(model_fd_diff2_gqa_untied) { fd_check(DTX_ARCH_DIFF2, 1, 0); }
TEST(model_fd_plain_attention_diff2_gqa) { fd_check_impl(DTX_ARCH_DIFF2, 1, 1, DTX_ATTN_PLAIN); }
TEST(model_fd_diff2_mqa) { /* one KV head under all 8 query heads */
    fd_check(DTX_ARCH_DIFF2, 2, 0);
    fd_check_impl(DTX_ARCH_DIFF2, 2, 1, DTX_ATTN_PLAIN);
}
TEST(model_fd_diff2_lambda_ablations) {
    fd_check_variant(DTX_ARCH_DIFF2, 1, 0, DTX_ATTN_FLASH, 3);
    fd_check_variant(DTX_ARCH_DIFF2, 0, 1, DTX_ATTN_FLASH, 4);
}
