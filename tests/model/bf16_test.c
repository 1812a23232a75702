/* bf16 matrix products in training: the same small model, from the same
 * initial weights and on the same batches, trained in fp32 and in bf16
 * (bf16 operands, fp32 accumulation, fp32 master weights and AdamW state)
 * ends within 2% relative of the fp32 loss — and is not the fp32 run. Data:
 * a repeating pattern with 15% of the tokens replaced by random ones, so the
 * loss settles well above zero (the noise's entropy) instead of vanishing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kernels/matmul_dnnl.h"
#include "model/model.h"
#include "test.h"

enum { B = 4, T = 32, STEPS = 150, STREAM = 4096 };

typedef struct {
    double first_loss, train_tail, eval_loss;
    float *params;
    size_t n_params;
} run_result;

static void make_stream(int32_t *s, int64_t n, int64_t vocab) {
    static const int32_t pat[11] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
    dtx_rng r;
    dtx_rng_seed(&r, 77);
    for (int64_t i = 0; i < n; i++)
        s[i] = dtx_rng_uniform(&r) < 0.15 ? (int32_t)(dtx_rng_next(&r) % (uint64_t)vocab) : pat[i % 11];
}

static void batch_at(const int32_t *s, int64_t step, int32_t *x, int32_t *y) {
    for (int b = 0; b < B; b++) {
        int64_t start = (step * 613 + b * 997) % (STREAM - T - 1);
        for (int t = 0; t < T; t++) {
            x[b * T + t] = s[start + t];
            y[b * T + t] = s[start + t + 1];
        }
    }
}

static int train(dtx_arch arch, dtx_precision p, run_result *res) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 64;
    c.n_layers = 2;
    c.n_heads = arch == DTX_ARCH_DIFF ? 2 : 4;
    c.n_kv_heads = c.n_heads;
    c.vocab_size = 16;
    c.ffn_dim = 128;
    c.max_seq_len = T;
    dtx_model *m;
    if (dtx_model_init(&m, &c, 5) != DTX_OK) return -1;
    if (dtx_model_precision(m) != DTX_PREC_FP32 || dtx_model_set_precision(m, p) != DTX_OK ||
        dtx_model_precision(m) != p) {
        dtx_model_free(m);
        return -1;
    }
    dtx_optim_config o = dtx_optim_default();
    o.lr = 3e-3;
    o.min_lr = 3e-4;
    o.warmup_steps = 10;
    o.total_steps = STEPS;
    dtx_optimizer *opt;
    if (dtx_optimizer_init(&opt, m, &o) != DTX_OK) {
        dtx_model_free(m);
        return -1;
    }
    int32_t *s = malloc(STREAM * sizeof(int32_t));
    make_stream(s, STREAM, c.vocab_size);
    int32_t x[B * T], y[B * T];
    double loss = NAN, tail = 0;
    int rc = 0;
    for (int64_t step = 0; step < STEPS && rc == 0; step++) {
        batch_at(s, step, x, y);
        dtx_model_zero_grad(m);
        if (dtx_model_forward(m, x, y, B, T, NULL, &loss) || dtx_model_backward(m, 1.0) ||
            dtx_optimizer_step(opt, NULL, NULL))
            rc = -1;
        if (step == 0) res->first_loss = loss;
        if (step >= STEPS - 10) tail += loss / 10;
    }
    res->train_tail = tail;
    /* held-out windows (steps past the run) */
    double ev = 0;
    for (int64_t k = 0; k < 8 && rc == 0; k++) {
        batch_at(s, STEPS + 1000 + k, x, y);
        if (dtx_model_forward(m, x, y, B, T, NULL, &loss)) rc = -1;
        ev += loss / 8;
    }
    res->eval_loss = ev;
    res->n_params = dtx_model_num_params(m);
    res->params = malloc(res->n_params * sizeof(float));
    memcpy(res->params, dtx_model_params(m), res->n_params * sizeof(float));
    free(s);
    dtx_optimizer_free(opt);
    dtx_model_free(m);
    return rc;
}

static void compare(dtx_arch arch) {
    run_result f = {0}, h = {0};
    REQUIRE(train(arch, DTX_PREC_FP32, &f) == 0);
    REQUIRE(train(arch, DTX_PREC_BF16, &h) == 0);
    const char *a = dtx_arch_name(arch);
    /* learned something, but not everything (noise floor) */
    CHECKF(f.eval_loss < 0.7 * f.first_loss && f.eval_loss > 0.2, "%s fp32: loss %.4f -> %.4f", a, f.first_loss,
           f.eval_loss);
    double rel_eval = fabs(h.eval_loss - f.eval_loss) / f.eval_loss;
    double rel_tail = fabs(h.train_tail - f.train_tail) / f.train_tail;
    CHECKF(rel_eval < 0.02 && rel_tail < 0.02, "%s: fp32 %.4f / %.4f vs bf16 %.4f / %.4f (eval / last-10 train)", a,
           f.eval_loss, f.train_tail, h.eval_loss, h.train_tail);
    /* the bf16 products really ran: different first loss, different weights */
    CHECKF(h.first_loss != f.first_loss, "%s: first loss identical (%.9g)", a, f.first_loss);
    CHECK(f.n_params == h.n_params && memcmp(f.params, h.params, f.n_params * sizeof(float)) != 0);
    if (getenv("DTX_TEST_VERBOSE"))
        printf("    %s: first %.5f / %.5f  tail %.5f / %.5f  eval %.5f / %.5f (fp32 / bf16)\n", a, f.first_loss,
               h.first_loss, f.train_tail, h.train_tail, f.eval_loss, h.eval_loss);
    free(f.params), free(h.params);
}

TEST(model_bf16_training_matches_fp32_diff) { compare(DTX_ARCH_DIFF); }
TEST(model_bf16_training_matches_fp32_transformer) { compare(DTX_ARCH_TRANSFORMER); }
TEST(model_bf16_training_matches_fp32_diff2) { compare(DTX_ARCH_DIFF2); }

TEST(model_precision_set_get) {
    dtx_config c = dtx_config_default();
    c.dim = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 2, c.vocab_size = 8, c.ffn_dim = 16, c.max_seq_len = 4;
    dtx_model *m;
    REQUIRE(dtx_model_init(&m, &c, 1) == DTX_OK);
    CHECK(dtx_model_precision(m) == DTX_PREC_FP32);
    CHECK(dtx_model_set_precision(m, DTX_PREC_BF16) == DTX_OK && dtx_model_precision(m) == DTX_PREC_BF16);
    CHECK(dtx_model_set_precision(m, (dtx_precision)7) == DTX_ERR_ARG);
    CHECK(strstr(dtx_last_error(), "precision") != NULL);
    CHECK(dtx_model_precision(m) == DTX_PREC_BF16); /* unchanged by the refused value */
    CHECK(strcmp(dtx_precision_name(DTX_PREC_FP32), "fp32") == 0);
    CHECK(strcmp(dtx_precision_name(DTX_PREC_BF16), "bf16") == 0);
    dtx_model_free(m);
}

/* Emulated bf16 rounds the activations that only feed products once, where
 * they are made (forward.c); every product must then see exactly the values
 * it would round itself: loss and gradients bit-identical to rounding inside
 * each product. Run on the emulated path whatever the CPU has. */
TEST(model_bf16_emulated_preround_is_exact) {
    for (int arch = 0; arch < 3; arch++) { /* DIFF, Transformer, DIFF2: the dtx_arch values */
        dtx_config c = dtx_config_default();
        c.arch = (dtx_arch)arch;
        c.dim = 64, c.n_layers = 2, c.n_heads = arch ? 4 : 2, c.n_kv_heads = arch ? 2 : 1, c.vocab_size = 97;
        c.ffn_dim = 160, c.max_seq_len = 32, c.tie_embeddings = 0;
        dtx_model *m;
        REQUIRE(dtx_model_init(&m, &c, 5) == DTX_OK && dtx_model_set_precision(m, DTX_PREC_BF16) == DTX_OK);
        int32_t x[2 * 32], y[2 * 32];
        for (int i = 0; i < 64; i++) x[i] = (i * 7) % 97, y[i] = (i * 11 + 3) % 97;
        int prev = dtx_dnnl_bf16_force_emulation(1);
        double loss[2];
        float *g[2];
        size_t n = dtx_model_num_params(m);
        for (int on = 0; on < 2; on++) {
            dtx_model_test_preround(on);
            dtx_model_zero_grad(m);
            REQUIRE(dtx_model_forward(m, x, y, 2, 32, NULL, &loss[on]) == DTX_OK);
            REQUIRE(dtx_model_backward(m, 1.0) == DTX_OK);
            g[on] = malloc(n * sizeof(float));
            memcpy(g[on], dtx_model_grads(m), n * sizeof(float));
        }
        dtx_model_test_preround(1);
        dtx_dnnl_bf16_force_emulation(prev);
        CHECKF(loss[0] == loss[1], "%s: loss %.9g vs %.9g", dtx_arch_name(c.arch), loss[0], loss[1]);
        CHECKF(memcmp(g[0], g[1], n * sizeof(float)) == 0, "%s: gradients differ", dtx_arch_name(c.arch));
        free(g[0]), free(g[1]);
        dtx_model_free(m);
    }
}

/* A backward in another precision than its forward is refused. */
TEST(model_backward_refuses_a_precision_change) {
    dtx_config c = dtx_config_default();
    c.dim = 32, c.n_layers = 1, c.n_heads = 1, c.n_kv_heads = 1, c.vocab_size = 50, c.ffn_dim = 64, c.max_seq_len = 8;
    dtx_model *m;
    REQUIRE(dtx_model_init(&m, &c, 1) == DTX_OK);
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    REQUIRE(dtx_model_forward(m, x, x, 1, 8, NULL, NULL) == DTX_OK);
    REQUIRE(dtx_model_set_precision(m, DTX_PREC_BF16) == DTX_OK);
    CHECK(dtx_model_backward(m, 1.0) == DTX_ERR_ARG && strstr(dtx_last_error(), "precision"));
    dtx_model_free(m);
}
