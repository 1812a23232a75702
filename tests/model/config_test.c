/* Configuration rules, parameter counts, λ_init, save/load round trip. */
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "test.h"

TEST(config_lambda_init_values) {
    /* spec §2.5 table, l 1-based there, 0-based here */
    static const double want[] = {0.2000, 0.3555, 0.4707, 0.5561, 0.6193, 0.6661, 0.7008, 0.7265, 0.7456, 0.7597};
    for (int l = 0; l < 10; l++) CHECKF(fabs(dtx_lambda_init(l) - want[l]) < 5e-5, "layer %d: %.5f", l, dtx_lambda_init(l));
}

TEST(config_validate_messages) {
    dtx_config c = dtx_config_default();
    CHECK(dtx_config_validate(&c) == DTX_OK);
    c.n_heads = 3;
    CHECK(dtx_config_validate(&c) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "n_heads"));
    c = dtx_config_default();
    c.n_kv_heads = 3;
    CHECK(dtx_config_validate(&c) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "n_kv_heads"));
    c = dtx_config_default();
    c.dim = 0;
    CHECK(dtx_config_validate(&c) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "dim"));
    c = dtx_config_default();
    c.dim = 4 * 2 * 3; /* d = 3: odd, RoPE needs pairs */
    CHECK(dtx_config_validate(&c) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "even"));
    c = dtx_config_default();
    c.norm_eps = 0;
    CHECK(dtx_config_validate(&c) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "norm_eps"));
}

/* DIFF (H, G) and the Transformer (2H, 2G) differ by exactly the λ vectors
 * (4d) and the subln weight (2d) per layer (spec §2.7). */
TEST(config_baseline_parameter_parity) {
    dtx_config c = dtx_config_default();
    c.dim = 64;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.n_layers = 3;
    dtx_config b = dtx_config_baseline(&c);
    CHECK(b.arch == DTX_ARCH_TRANSFORMER && b.n_heads == 8 && b.n_kv_heads == 4);
    CHECK(dtx_config_head_dim(&c) == dtx_config_head_dim(&b));
    dtx_model *md, *mt;
    REQUIRE(dtx_model_init(&md, &c, 1) == DTX_OK);
    REQUIRE(dtx_model_init(&mt, &b, 1) == DTX_OK);
    int64_t d = dtx_config_head_dim(&c);
    CHECK(dtx_model_num_params(md) - dtx_model_num_params(mt) == (size_t)(c.n_layers * 6 * d));
    dtx_config back = dtx_config_baseline(&b);
    CHECK(back.arch == DTX_ARCH_DIFF && back.n_heads == c.n_heads && back.n_kv_heads == c.n_kv_heads);
    dtx_model_free(md);
    dtx_model_free(mt);
}

/* Save F32 -> load gives identical weights; BF16 within bf16 rounding;
 * an unknown metadata key survives the round trip. */
TEST(model_save_load_roundtrip) {
    dtx_config c = dtx_config_default();
    c.dim = 32;
    c.n_layers = 2;
    c.vocab_size = 50;
    c.ffn_dim = 48;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.tie_embeddings = 0;
    dtx_model *m, *m2, *m3;
    REQUIRE(dtx_model_init(&m, &c, 3) == DTX_OK);
    const char *p32 = test_path("rt32.safetensors"), *p16 = test_path("rt16.safetensors");
    REQUIRE(dtx_model_save(m, p32, 0) == DTX_OK);
    REQUIRE(dtx_model_save(m, p16, 1) == DTX_OK);
    REQUIRE(dtx_model_load(&m2, p32) == DTX_OK);
    REQUIRE(dtx_model_load(&m3, p16) == DTX_OK);
    size_t n = dtx_model_num_params(m);
    CHECK(dtx_model_num_params(m2) == n && dtx_model_num_params(m3) == n);
    CHECK(memcmp(dtx_model_params(m), dtx_model_params(m2), n * sizeof(float)) == 0);
    const dtx_config *c1 = dtx_model_config(m), *c2 = dtx_model_config(m2);
    CHECK(c1->arch == c2->arch && c1->dim == c2->dim && c1->n_layers == c2->n_layers && c1->n_heads == c2->n_heads &&
          c1->n_kv_heads == c2->n_kv_heads && c1->vocab_size == c2->vocab_size && c1->ffn_dim == c2->ffn_dim &&
          c1->max_seq_len == c2->max_seq_len && c1->rope_theta == c2->rope_theta && c1->norm_eps == c2->norm_eps &&
          c1->tie_embeddings == c2->tie_embeddings);
    const float *a = dtx_model_params(m), *b16 = dtx_model_params(m3);
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b16[i]) / fmax(fabs(a[i]), 1e-30));
    CHECKF(worst <= 1.0 / 256, "bf16 relative error %g", worst);
    dtx_model_free(m);
    dtx_model_free(m2);
    dtx_model_free(m3);
}
