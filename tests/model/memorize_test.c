/* A small model memorises a short repeating sequence (loss below 0.05)
 * within seconds, for every architecture: the whole training path (forward,
 * backward, AdamW, schedule) works end to end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "test.h"

static void memorize(dtx_arch arch) {
    dtx_config c = dtx_config_default();
    c.arch = arch;
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = arch == DTX_ARCH_DIFF ? 2 : 4;
    c.n_kv_heads = c.n_heads;
    c.vocab_size = 16;
    c.ffn_dim = 64;
    c.max_seq_len = 24;
    dtx_model *m;
    REQUIRE(dtx_model_init(&m, &c, 1) == DTX_OK);
    dtx_optim_config o = dtx_optim_default();
    o.lr = 1e-2;
    o.min_lr = 1e-3;
    o.warmup_steps = 10;
    o.total_steps = 150;
    o.weight_decay = 0.0;
    dtx_optimizer *opt;
    REQUIRE(dtx_optimizer_init(&opt, m, &o) == DTX_OK);
    /* pattern of period 7 over a vocab of 16; every window of 24 tokens */
    static const int32_t pat[7] = {3, 1, 4, 1, 5, 9, 2};
    enum { B = 4, T = 24 };
    int32_t x[B * T], y[B * T];
    double loss = INFINITY;
    for (int64_t s = 0; s < o.total_steps; s++) {
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                int start = (int)((s * B + b) % 7);
                x[b * T + t] = pat[(start + t) % 7];
                y[b * T + t] = pat[(start + t + 1) % 7];
            }
        dtx_model_zero_grad(m);
        REQUIRE(dtx_model_forward(m, x, y, B, T, NULL, &loss) == DTX_OK);
        REQUIRE(dtx_model_backward(m, 1.0) == DTX_OK);
        REQUIRE(dtx_optimizer_step(opt, NULL, NULL) == DTX_OK);
    }
    /* final loss on fresh windows, no update */
    REQUIRE(dtx_model_forward(m, x, y, B, T, NULL, &loss) == DTX_OK);
    CHECKF(loss < 0.05, "%s: final loss %.4f", dtx_arch_name(arch), loss);
    dtx_optimizer_free(opt);
    dtx_model_free(m);
}

TEST(memorize_diff) { memorize(DTX_ARCH_DIFF); }
TEST(memorize_transformer) { memorize(DTX_ARCH_TRANSFORMER); }
TEST(memorize_diff2) { memorize(DTX_ARCH_DIFF2); }
