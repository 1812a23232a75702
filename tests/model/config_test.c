/* Configuration rules, parameter counts, λ_init, save/load round trip. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "io/safetensors.h"
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

/* A weight that is not finite (a diverged run's, a damaged file's) is refused
 * at load, the tensor and the element named; F32 and BF16 files alike. */
TEST(model_load_refuses_non_finite_weights) {
    dtx_config c = test_config(DTX_ARCH_DIFF, 32, 2, 2, 2, 50, 48, 64, 1);
    dtx_model *m, *m2 = (dtx_model *)1;
    REQUIRE(dtx_model_init(&m, &c, 3) == DTX_OK);
    const dtx_tensor_info *t = dtx_model_find(m, "layers.1.feed_forward.w2.weight");
    REQUIRE(t != NULL);
    float *w = dtx_model_params(m);
    static const struct { int bf16; float bad; const char *what; } cases[] = {
        {0, NAN, "NaN"}, {1, NAN, "NaN"}, {0, INFINITY, "an infinity"}, {1, -INFINITY, "an infinity"}};
    for (int i = 0; i < 4; i++) {
        w[t->offset + 7] = cases[i].bad;
        const char *p = test_path("nonfinite.safetensors");
        REQUIRE(dtx_model_save(m, p, cases[i].bf16) == DTX_OK);
        CHECK(dtx_model_load(&m2, p) == DTX_ERR_FORMAT && m2 == NULL);
        char want[160];
        snprintf(want, sizeof want, "tensor 'layers.1.feed_forward.w2.weight' holds %s at element 7", cases[i].what);
        CHECKF(strstr(dtx_last_error(), want) && strstr(dtx_last_error(), p), "case %d: %s", i, dtx_last_error());
    }
    w[t->offset + 7] = 0.5f; /* finite again: loads */
    REQUIRE(dtx_model_save(m, test_path("finite.safetensors"), 0) == DTX_OK);
    CHECK(dtx_model_load(&m2, test_path("finite.safetensors")) == DTX_OK);
    dtx_model_free(m2);
    dtx_model_free(m);
}

/* Table 6's variants (interop.md "Variants"): parsing, validation, the
 * parameter table, and the metadata of a saved file (variant keys written
 * only when not the default; read back to the same config). */
TEST(config_variants) {
    dtx_config c = dtx_config_default();
    CHECK(dtx_config_has_subln(&c) && strcmp(dtx_config_subln_name(&c), "rms") == 0);
    CHECK(dtx_config_is_default_variant(&c));
    CHECK(dtx_config_set_subln(&c, "none") == DTX_OK && !dtx_config_has_subln(&c));
    CHECK(dtx_config_set_subln(&c, "group") == DTX_ERR_CONFIG && strstr(dtx_last_error(), "'group'"));
    CHECK(dtx_config_set_lambda_init(&c, "0.5") == DTX_OK && c.lambda_init_fixed && c.lambda_init_value == 0.5);
    CHECK(dtx_config_lambda_init(&c, 0) == 0.5 && dtx_config_lambda_init(&c, 7) == 0.5);
    static const char *const bad[] = {"abc", "1", "-0.1", "0.5x", "", "inf", "nan"};
    for (int i = 0; i < 7; i++)
        CHECKF(dtx_config_set_lambda_init(&c, bad[i]) == DTX_ERR_CONFIG, "lambda_init '%s' accepted", bad[i]);
    CHECK(c.lambda_init_value == 0.5); /* a refused value changes nothing */
    char buf[40];
    dtx_config_lambda_init_str(&c, buf, sizeof buf);
    CHECK(strcmp(buf, "0.5") == 0);
    CHECK(dtx_config_validate(&c) == DTX_OK && !dtx_config_is_default_variant(&c));
    dtx_config b = dtx_config_baseline(&c); /* the matched baseline is the default Transformer */
    CHECK(b.arch == DTX_ARCH_TRANSFORMER && !dtx_config_has_subln(&b) && !b.lambda_init_fixed);
    b.lambda_init_fixed = 1, b.lambda_init_value = 0.5;
    CHECK(dtx_config_validate(&b) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "only arch diff"));
    CHECK(dtx_config_set_lambda_init(&b, "schedule") == DTX_OK && !b.lambda_init_fixed);
    CHECK(dtx_config_set_subln(&b, "rms") == DTX_OK && dtx_config_has_subln(&b));
    /* the tensor table: DIFF − subln loses 2d per layer, the Transformer + subln gains d */
    dtx_config base = dtx_config_default();
    base.dim = 32, base.n_layers = 2, base.vocab_size = 40, base.ffn_dim = 48, base.n_heads = 2, base.n_kv_heads = 1;
    int64_t d = dtx_config_head_dim(&base);
    dtx_config dn = base, td = dtx_config_baseline(&base), tr = td;
    dtx_config_set_subln(&dn, "none");
    dtx_config_set_lambda_init(&dn, "0.8");
    dtx_config_set_subln(&tr, "rms");
    dtx_model *m0, *m1, *m2, *m3;
    REQUIRE(dtx_model_init(&m0, &base, 1) == DTX_OK && dtx_model_init(&m1, &dn, 1) == DTX_OK);
    REQUIRE(dtx_model_init(&m2, &td, 1) == DTX_OK && dtx_model_init(&m3, &tr, 1) == DTX_OK);
    CHECK(dtx_model_num_params(m0) - dtx_model_num_params(m1) == (size_t)(2 * d * base.n_layers));
    CHECK(dtx_model_num_params(m3) - dtx_model_num_params(m2) == (size_t)(d * base.n_layers));
    CHECK(dtx_model_find(m1, "layers.0.attention.subln.weight") == NULL);
    const dtx_tensor_info *t = dtx_model_find(m3, "layers.1.attention.subln.weight");
    CHECK(t && t->ndim == 1 && t->shape[0] == d && !t->decay);
    dtx_model *ms[4] = {m0, m1, m2, m3};
    const char *want_subln[4] = {NULL, "none", NULL, "rms"}, *want_li[4] = {NULL, "0.8", NULL, NULL};
    for (int i = 0; i < 4; i++) {
        const char *p = test_path("variant.safetensors");
        REQUIRE(dtx_model_save(ms[i], p, 0) == DTX_OK);
        dtx_st_file f;
        REQUIRE(dtx_st_open(&f, p) == DTX_OK);
        const char *s1 = dtx_st_meta(&f, "subln"), *s2 = dtx_st_meta(&f, "lambda_init");
        CHECKF(want_subln[i] ? s1 && strcmp(s1, want_subln[i]) == 0 : s1 == NULL, "model %d: subln '%s'", i,
               s1 ? s1 : "(absent)");
        CHECKF(want_li[i] ? s2 && strcmp(s2, want_li[i]) == 0 : s2 == NULL, "model %d: lambda_init '%s'", i,
               s2 ? s2 : "(absent)");
        dtx_st_close(&f);
        dtx_model *back;
        REQUIRE(dtx_model_load(&back, p) == DTX_OK);
        const dtx_config *x = dtx_model_config(back), *y = dtx_model_config(ms[i]);
        CHECK(dtx_config_has_subln(x) == dtx_config_has_subln(y) && x->lambda_init_fixed == y->lambda_init_fixed &&
              x->lambda_init_value == y->lambda_init_value);
        CHECK(dtx_model_num_params(back) == dtx_model_num_params(ms[i]));
        dtx_model_free(back);
    }
    for (int i = 0; i < 4; i++) dtx_model_free(ms[i]);
}

/* The GPT-2 initialisation: N(0, 0.02²) linear weights and embeddings, the
 * residual projections scaled by 1/sqrt(2L), λ vectors and norms as the
 * default; the default scheme is dtx_model_init bit for bit. */
TEST(model_init_schemes) {
    dtx_config c = dtx_config_default();
    c.dim = 64, c.n_layers = 3, c.vocab_size = 300, c.ffn_dim = 128, c.n_heads = 2, c.n_kv_heads = 2;
    c.tie_embeddings = 0;
    dtx_model *a, *b, *g;
    REQUIRE(dtx_model_init(&a, &c, 5) == DTX_OK && dtx_model_init_scheme(&b, &c, 5, DTX_INIT_TORCH) == DTX_OK);
    REQUIRE(dtx_model_init_scheme(&g, &c, 5, DTX_INIT_GPT2) == DTX_OK);
    CHECK(memcmp(dtx_model_params(a), dtx_model_params(b), dtx_model_num_params(a) * sizeof(float)) == 0);
    for (int i = 0; i < dtx_model_num_tensors(g); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(g, i);
        const float *p = dtx_model_params(g) + t->offset;
        double ss = 0, mean = 0;
        for (size_t j = 0; j < t->numel; j++) ss += (double)p[j] * p[j], mean += p[j];
        double sd = sqrt(ss / (double)t->numel);
        mean /= (double)t->numel;
        if (strstr(t->name, ".lambda_"))
            CHECKF(sd > 0.05 && sd < 0.2, "%s sd %.4f", t->name, sd);
        else if (t->ndim == 1)
            CHECKF(sd == 1 && mean == 1, "%s is not all ones", t->name);
        else {
            int resid = strstr(t->name, ".out_proj.") || strstr(t->name, ".w2.");
            double want = resid ? 0.02 / sqrt(6.0) : 0.02;
            CHECKF(fabs(sd / want - 1) < 0.05 && fabs(mean) < 0.1 * want, "%s sd %.5f (want %.5f) mean %.5f", t->name,
                   sd, want, mean);
        }
    }
    CHECK(strcmp(dtx_init_scheme_name(DTX_INIT_GPT2), "gpt2") == 0);
    dtx_model *x = NULL;
    CHECK(dtx_model_init_scheme(&x, &c, 5, (dtx_init_scheme)7) == DTX_ERR_ARG && x == NULL);
    dtx_model_free(a), dtx_model_free(b), dtx_model_free(g);
}

/* DIFF V2 (interop.md "DIFF V2"): head width dim / h, q_proj [2·dim, dim],
 * lambda_proj [h, dim] unless v2_lambda is none; its baseline is the
 * Transformer of the same heads; no subln, no lambda_init, and v2_lambda
 * on another arch are refused naming the key. */
TEST(config_diff2) {
    dtx_config c = dtx_config_default();
    c.arch = DTX_ARCH_DIFF2, c.dim = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 40;
    c.ffn_dim = 48;
    CHECK(dtx_config_validate(&c) == DTX_OK && dtx_config_head_dim(&c) == 8 && dtx_config_q_dim(&c) == 64);
    CHECK(strcmp(dtx_arch_name(c.arch), "diff2") == 0 && !dtx_config_has_subln(&c) && dtx_config_is_default_variant(&c));
    CHECK(dtx_config_has_lambda_proj(&c) && strcmp(dtx_config_v2_lambda_name(&c), "sigmoid") == 0);
    dtx_config b = dtx_config_baseline(&c);
    CHECK(b.arch == DTX_ARCH_TRANSFORMER && b.n_heads == 4 && b.n_kv_heads == 2 && dtx_config_head_dim(&b) == 8);
    dtx_model *m, *mb;
    REQUIRE(dtx_model_init(&m, &c, 1) == DTX_OK && dtx_model_init(&mb, &b, 1) == DTX_OK);
    const dtx_tensor_info *q = dtx_model_find(m, "layers.1.attention.q_proj.weight");
    const dtx_tensor_info *l = dtx_model_find(m, "layers.1.attention.lambda_proj.weight");
    CHECK(q && q->shape[0] == 64 && q->shape[1] == 32 && l && l->shape[0] == 4 && l->shape[1] == 32 && l->decay);
    CHECK(!dtx_model_find(m, "layers.0.attention.subln.weight") && !dtx_model_find(m, "layers.0.attention.lambda_q1"));
    CHECK(dtx_model_num_params(m) - dtx_model_num_params(mb) == (size_t)((32 * 32 + 4 * 32) * 2));
    dtx_model_free(m), dtx_model_free(mb);
    dtx_config n = c;
    CHECK(dtx_config_set_v2_lambda(&n, "none") == DTX_OK && !dtx_config_has_lambda_proj(&n));
    CHECK(!dtx_config_is_default_variant(&n));
    REQUIRE(dtx_model_init(&m, &n, 1) == DTX_OK);
    CHECK(!dtx_model_find(m, "layers.0.attention.lambda_proj.weight"));
    dtx_model_free(m);
    CHECK(dtx_config_set_v2_lambda(&n, "tanh") == DTX_ERR_CONFIG && strstr(dtx_last_error(), "'tanh'"));
    CHECK(n.v2_lambda == DTX_V2_LAMBDA_NONE); /* a refused value changes nothing */
    dtx_config r = c;
    r.subln = DTX_SUBLN_RMS;
    CHECK(dtx_config_validate(&r) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "diff2"));
    r = c, r.lambda_init_fixed = 1, r.lambda_init_value = 0.5;
    CHECK(dtx_config_validate(&r) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "only arch diff"));
    r = c, r.n_kv_heads = 3;
    CHECK(dtx_config_validate(&r) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "n_kv_heads"));
    r = dtx_config_default(), r.v2_lambda = DTX_V2_LAMBDA_LINEAR;
    CHECK(dtx_config_validate(&r) == DTX_ERR_CONFIG && strstr(dtx_last_error(), "only arch diff2"));
}
