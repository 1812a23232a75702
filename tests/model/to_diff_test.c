/* A Transformer turned into a DIFF model (src/model/to_diff.c): the same
 * logits before any step (MHA, GQA, tied, untied, an imported Llama), λ
 * exactly 0, the head count kept; training then moves λ and the second
 * maps' queries (no weight is stuck on a saddle); the model survives its
 * file; what has no DIFF form is refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "test.h"

static double logits_gap(dtx_model *a, dtx_model *b, const int32_t *tok, int64_t T) {
    size_t n = (size_t)(T * dtx_model_config(a)->vocab_size);
    dtx_real *x = alloc_r(n), *y = alloc_r(n);
    double e = INFINITY;
    if (dtx_model_forward(a, tok, NULL, 1, T, x, NULL) == DTX_OK && dtx_model_forward(b, tok, NULL, 1, T, y, NULL) == DTX_OK)
        e = rel_err(y, x, n, sizeof(dtx_real) == 8, 0);
    free(x), free(y);
    return e;
}

TEST(to_diff_computes_the_transformer) {
    static const struct {
        int64_t heads, kv;
        int tie;
    } cases[] = {{4, 4, 1}, {4, 2, 0}, {4, 1, 1}, {2, 2, 0}};
    int32_t tok[12];
    for (int i = 0; i < 12; i++) tok[i] = (int32_t)((i * 7 + 3) % 61);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dtx_config c = test_config(DTX_ARCH_TRANSFORMER, 32, 2, cases[i].heads, cases[i].kv, 61, 48, 16, cases[i].tie);
        dtx_model *t = NULL, *m = NULL;
        REQUIRE(dtx_model_init(&t, &c, 3 + i) == DTX_OK);
        REQUIREF(dtx_model_to_diff(&m, t, 5) == DTX_OK, "%s", dtx_last_error());
        const dtx_config *mc = dtx_model_config(m);
        CHECK(mc->arch == DTX_ARCH_DIFF && mc->n_heads == c.n_heads && mc->n_kv_heads == c.n_kv_heads &&
              dtx_config_head_dim(mc) == t->head_dim && dtx_config_has_subln(mc) && !mc->lambda_init_fixed &&
              mc->transformer_mix == 1);
        for (int64_t l = 0; l < mc->n_layers; l++) CHECKF(dtx_model_lambda(m, l) == 0, "layer %lld: lambda %g", (long long)l, dtx_model_lambda(m, l));
        double e = logits_gap(t, m, tok, 12);
        CHECKF(e < 1e-5, "case %zu: logits %.3g from the Transformer's", i, e);
        CHECK((int64_t)dtx_model_num_params(m) == dtx_config_num_params(mc, NULL));
        /* its own file: the variant, the head width and the weights come back */
        const char *p = test_path("to_diff.safetensors");
        dtx_model *back = NULL;
        REQUIRE(dtx_model_save(m, p, 0) == DTX_OK && dtx_model_load(&back, p) == DTX_OK);
        CHECK(logits_gap(m, back, tok, 12) == 0);
        dtx_model_free(back), dtx_model_free(t), dtx_model_free(m);
    }
    /* an imported Llama (GQA) */
    dtx_model *t = NULL, *m = NULL;
    REQUIRE(dtx_model_open(&t, fixture_path("hf/llama_gqa_untied"), DTX_PREC_FP32) == DTX_OK);
    REQUIRE(dtx_model_to_diff(&m, t, 1) == DTX_OK);
    double e = logits_gap(t, m, tok, 12);
    CHECKF(e < 1e-5, "Llama: logits %.3g from the original's", e);
    dtx_model_free(t), dtx_model_free(m);
}

/* Training from the converted model: λ leaves 0, the second maps' queries
 * leave 0, the v2 columns of out_proj leave 0, and the loss stays finite;
 * with diff_warmup 8, transformer_mix is 1 − step/8 before each step and 0
 * (a standard DIFF model) from step 8. */
TEST(to_diff_trains_out_of_its_start) {
    dtx_config c = test_config(DTX_ARCH_TRANSFORMER, 32, 2, 4, 2, 61, 48, 16, 1);
    dtx_model *t = NULL, *m = NULL;
    REQUIRE(dtx_model_init(&t, &c, 9) == DTX_OK && dtx_model_to_diff(&m, t, 2) == DTX_OK);
    dtx_model_free(t);
    const char *ids = test_path("to_diff_ids.txt");
    char buf[8000];
    size_t k = 0;
    for (int i = 0; i < 1500; i++) k += (size_t)snprintf(buf + k, sizeof buf - k, "%d ", (i * 7 + i / 13) % 61);
    REQUIRE(write_file(ids, buf, k) == 0);
    dtx_train_options o = dtx_train_options_default();
    o.batch = 4, o.seq = 16, o.diff_warmup = 8;
    dtx_optim_config oc = dtx_optim_default();
    oc.lr = 3e-3, oc.warmup_steps = 2, oc.total_steps = 20;
    dtx_trainer *tr = NULL;
    REQUIREF(dtx_trainer_init(&tr, &o, ids, NULL, NULL, m, &oc) == DTX_OK, "%s", dtx_last_error());
    dtx_train_stats st;
    for (int s = 0; s < 20; s++) {
        REQUIRE(dtx_trainer_update(tr, &st) == DTX_OK && isfinite(st.loss));
        double want = s < 8 ? 1.0 - s / 8.0 : 0;
        CHECKF(dtx_model_config(dtx_trainer_model(tr))->transformer_mix == want, "step %d: transformer_mix %g, want %g",
               s + 1, dtx_model_config(dtx_trainer_model(tr))->transformer_mix, want);
    }
    dtx_model *trained = dtx_trainer_model(tr);
    const dtx_layer_offsets *lo = &trained->layers[0];
    double q2 = 0, o2 = 0;
    const int64_t d = trained->head_dim, D = 32, K = 2 * 4 * d;
    for (int64_t i = 0; i < d * D; i++) q2 += fabs((double)trained->params[lo->wq + d * D + i]); /* head 0's q2 */
    for (int64_t r = 0; r < D; r++)
        for (int64_t j = 0; j < d; j++) o2 += fabs((double)trained->params[lo->wo + r * K + d + j]);
    CHECKF(dtx_model_lambda(trained, 0) != 0 && dtx_model_lambda(trained, 1) != 0, "lambda %g, %g",
           dtx_model_lambda(trained, 0), dtx_model_lambda(trained, 1));
    CHECKF(q2 > 0 && o2 > 0, "second query %g, v2's out_proj columns %g: still zero", q2, o2);
    dtx_trainer_free(tr);
}

TEST(to_diff_refusals) {
    dtx_model *t = NULL, *m = NULL;
    dtx_config c = test_config(DTX_ARCH_DIFF, 32, 1, 2, 2, 61, 48, 16, 1);
    REQUIRE(dtx_model_init(&t, &c, 1) == DTX_OK);
    CHECK(dtx_model_to_diff(&m, t, 1) == DTX_ERR_CONFIG && !m && strstr(dtx_last_error(), "only a Transformer"));
    dtx_model_free(t);
    c = test_config(DTX_ARCH_TRANSFORMER, 32, 1, 4, 4, 61, 48, 16, 1);
    c.subln = DTX_SUBLN_RMS;
    REQUIRE(dtx_model_init(&t, &c, 1) == DTX_OK);
    CHECK(dtx_model_to_diff(&m, t, 1) == DTX_ERR_CONFIG && !m && strstr(dtx_last_error(), "subln rms"));
    dtx_model_free(t);
}
