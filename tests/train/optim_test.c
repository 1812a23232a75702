/* Learning-rate schedule and optimizer configuration. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "train/checkpoint.h"
#include "test.h"

TEST(optim_schedule_shapes) {
    dtx_optim_config o = dtx_optim_default();
    o.lr = 1.0;
    o.min_lr = 0.1;
    o.warmup_steps = 4;
    o.total_steps = 14;
    /* warmup: (s+1)/4 */
    for (int s = 0; s < 4; s++) CHECK(fabs(dtx_lr_at(&o, s) - (s + 1) / 4.0) < 1e-12);
    /* cosine: halfway down at r = 0.5 (s = 8), floor at the last step */
    CHECK(fabs(dtx_lr_at(&o, 8) - 0.55) < 1e-12);
    CHECK(fabs(dtx_lr_at(&o, 13) - 0.1) < 1e-12);
    CHECK(fabs(dtx_lr_at(&o, 100) - 0.1) < 1e-12);
    for (int s = 4; s < 13; s++) CHECK(dtx_lr_at(&o, s + 1) < dtx_lr_at(&o, s));
    o.schedule = DTX_SCHED_LINEAR;
    CHECK(fabs(dtx_lr_at(&o, 8) - 0.55) < 1e-12);
    CHECK(fabs(dtx_lr_at(&o, 6) - (1.0 - 0.9 * 0.3)) < 1e-12);
    CHECK(fabs(dtx_lr_at(&o, 13) - 0.1) < 1e-12);
    o.schedule = DTX_SCHED_CONSTANT;
    CHECK(dtx_lr_at(&o, 10) == 1.0);
    o.warmup_steps = 0;
    CHECK(dtx_lr_at(&o, 0) == 1.0);
}

/* An extended schedule (dtx_optimizer_extend): from the step it restarts at
 * (the steps before it are the run's past, which the optimizer never asks
 * for again), a linear rise from the rate it had to the peak over
 * the warmup (at most a tenth of the new steps), then the same decay to min_lr
 * at the new last step. Extending past the end of a finished schedule, and
 * twice, and refusals. */
TEST(optim_schedule_extended) {
    dtx_config c = test_config(DTX_ARCH_DIFF, 16, 1, 1, 1, 8, 16, 16, 1);
    dtx_model *m;
    REQUIRE(dtx_model_init(&m, &c, 1) == DTX_OK);
    dtx_optim_config o = dtx_optim_default();
    o.lr = 1.0, o.min_lr = 0.1, o.warmup_steps = 4, o.total_steps = 14;
    dtx_optimizer *opt;
    REQUIRE(dtx_optimizer_init(&opt, m, &o) == DTX_OK);
    dtx_optimizer_set_steps(opt, 14); /* a finished run */
    CHECK(dtx_optimizer_extend(opt, 14) == DTX_ERR_ARG && strstr(dtx_last_error(), "past the old"));
    REQUIRE(dtx_optimizer_extend(opt, 64) == DTX_OK);
    const dtx_optim_config *e = dtx_optimizer_config(opt);
    CHECK(e->total_steps == 64 && e->restart_step == 14 && fabs(e->restart_lr - 0.1) < 1e-12);
    /* 50 new steps: warmup min(4, 5) = 4 from 0.1 to 1 */
    for (int k = 0; k < 4; k++) CHECKF(fabs(dtx_lr_at(e, 14 + k) - (0.1 + 0.9 * (k + 1) / 4.0)) < 1e-12, "k %d", k);
    /* then the cosine over the remaining 46: halfway at k + 1 − 4 = 23 */
    CHECK(fabs(dtx_lr_at(e, 14 + 26) - 0.55) < 1e-12);
    CHECK(fabs(dtx_lr_at(e, 63) - 0.1) < 1e-12);
    for (int s = 18; s < 63; s++) CHECK(dtx_lr_at(e, s + 1) < dtx_lr_at(e, s));
    /* extended again while running, at step 30: restarts from the rate step 30 had */
    dtx_optimizer_set_steps(opt, 30);
    double at30 = dtx_lr_at(e, 30);
    REQUIRE(dtx_optimizer_extend(opt, 90) == DTX_OK);
    e = dtx_optimizer_config(opt);
    CHECK(e->restart_step == 30 && e->restart_lr == at30 && e->total_steps == 90);
    CHECK(fabs(dtx_lr_at(e, 30) - (at30 + (1.0 - at30) / 4.0)) < 1e-12);
    CHECK(fabs(dtx_lr_at(e, 89) - 0.1) < 1e-12);
    /* a restart the schedule cannot hold is refused by validation */
    dtx_optim_config bad = *e;
    bad.restart_step = 90;
    CHECK(dtx_optim_validate(&bad) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "restart_step"));
    bad = *e;
    bad.restart_lr = 2.0;
    CHECK(dtx_optim_validate(&bad) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "restart_lr"));
    dtx_optimizer_free(opt);
    dtx_model_free(m);
}

TEST(optim_validate_messages) {
    dtx_optim_config o = dtx_optim_default();
    CHECK(dtx_optim_validate(&o) == DTX_OK);
    o.lr = -1;
    CHECK(dtx_optim_validate(&o) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "lr"));
    o = dtx_optim_default();
    o.warmup_steps = o.total_steps + 1;
    CHECK(dtx_optim_validate(&o) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "warmup"));
    o = dtx_optim_default();
    o.beta2 = 1.0;
    CHECK(dtx_optim_validate(&o) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "beta2"));
}

/* No weight decay on norm weights and λ vectors; on embeddings only when
 * asked: with zero gradients, one step changes exactly the decayed tensors. */
TEST(optim_decay_groups) {
    dtx_config c = dtx_config_default();
    c.dim = 16; c.n_layers = 1; c.n_heads = 2; c.n_kv_heads = 2; c.vocab_size = 10; c.ffn_dim = 16;
    c.tie_embeddings = 0;
    for (int de = 0; de < 2; de++) {
        dtx_model *m;
        REQUIRE(dtx_model_init(&m, &c, 5) == DTX_OK);
        dtx_optim_config o = dtx_optim_default();
        o.decay_embeddings = de;
        o.weight_decay = 0.5;
        o.warmup_steps = 0;
        o.schedule = DTX_SCHED_CONSTANT;
        dtx_optimizer *opt;
        REQUIRE(dtx_optimizer_init(&opt, m, &o) == DTX_OK);
        size_t n = dtx_model_num_params(m);
        float *before = malloc(n * sizeof(float));
        REQUIRE(before);
        memcpy(before, dtx_model_params(m), n * sizeof(float));
        dtx_model_zero_grad(m);
        REQUIRE(dtx_optimizer_step(opt, NULL, NULL) == DTX_OK);
        for (int i = 0; i < dtx_model_num_tensors(m); i++) {
            const dtx_tensor_info *t = dtx_model_tensor(m, i);
            int changed = memcmp(before + t->offset, dtx_model_params(m) + t->offset, t->numel * sizeof(float)) != 0;
            int want = t->ndim == 2 && (!t->is_embedding || de);
            CHECKF(changed == want, "decay_embeddings=%d: %s changed=%d", de, t->name, changed);
        }
        free(before);
        dtx_optimizer_free(opt);
        dtx_model_free(m);
    }
}
