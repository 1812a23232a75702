/* Hugging Face checkpoint folders (src/io/hf.c) against tools/hf_reference.py,
 * an independent PyTorch implementation written from transformers' Llama and
 * DiffLlama modeling code, in HF's own layout: the logits of every committed
 * case (MHA, GQA, MQA; F32, BF16, F16; one file and shards; tied and untied)
 * to 1e-4; export then import is the identity; the export of an import is
 * HF's own tensors again; every refusal names its key or tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/safetensors.h"
#include "model/model.h"
#include "test.h"

#define TOL 1e-4

static const struct {
    const char *name;
    dtx_arch arch;
    int64_t n_heads, n_kv_heads; /* difftx's */
    int kv_even;                 /* HF's KV heads map one to one (else they are copied) */
} CASES[] = {
    {"diffllama_mha", DTX_ARCH_DIFF, 2, 2, 1},
    {"diffllama_gqa_bf16_sharded", DTX_ARCH_DIFF, 4, 1, 1},
    {"diffllama_mqa_f16", DTX_ARCH_DIFF, 2, 2, 0},
    {"llama_gqa_untied", DTX_ARCH_TRANSFORMER, 4, 2, 1},
    {"llama_mha_tied_bf16_sharded", DTX_ARCH_TRANSFORMER, 4, 4, 1},
    {"llama_mqa", DTX_ARCH_TRANSFORMER, 4, 1, 1},
    {"llama_rope_llama3", DTX_ARCH_TRANSFORMER, 4, 2, 1},
    {"diffllama_rope_parameters_llama3", DTX_ARCH_DIFF, 2, 1, 1},
    {"llama_head_dim_16", DTX_ARCH_TRANSFORMER, 4, 2, 1},
    {"diffllama_head_dim_4", DTX_ARCH_DIFF, 2, 1, 1},
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };

static const char *case_dir(const char *name) {
    char p[128];
    snprintf(p, sizeof p, "hf/%s", name);
    return fixture_path(p);
}

/* The logits of m on the case's tokens against the reference's: max |a - b| / max |b|. */
static double logits_err(dtx_model *m, const char *name) {
    char p[160];
    snprintf(p, sizeof p, "hf/%s/expect.safetensors", name);
    dtx_st_file ex;
    if (dtx_st_open(&ex, fixture_path(p)) != DTX_OK) return INFINITY;
    const dtx_st_tensor *tk = dtx_st_find(&ex, "tokens"), *lg = dtx_st_find(&ex, "logits");
    double err = INFINITY;
    if (tk && lg && tk->ndim == 2) {
        int64_t B = tk->shape[0], T = tk->shape[1], V = dtx_model_config(m)->vocab_size;
        dtx_real *tf = alloc_r((size_t)(B * T)), *want = alloc_r((size_t)lg->numel), *got = alloc_r((size_t)(B * T * V));
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * T));
        dtx_st_to_real(tk, tf);
        dtx_st_to_real(lg, want);
        for (int64_t i = 0; i < B * T; i++) tok[i] = (int32_t)tf[i];
        if (lg->numel == B * T * V && dtx_model_forward(m, tok, NULL, B, T, got, NULL) == DTX_OK)
            err = rel_err(got, want, (size_t)lg->numel, sizeof(dtx_real) == 8, 0);
        free(tf), free(want), free(got), free(tok);
    }
    dtx_st_close(&ex);
    return err;
}

/* (BF16 weights are read in place: widened first, to compare them all) */
static int same_params(dtx_model *a, dtx_model *b) {
    return dtx_model_num_params(a) == dtx_model_num_params(b) &&
           memcmp(dtx_model_params(a), dtx_model_params(b), sizeof(dtx_real) * dtx_model_num_params(a)) == 0;
}

TEST(hf_import_matches_the_reference) {
    for (int i = 0; i < N_CASES; i++) {
        dtx_model *m = NULL;
        REQUIREF(dtx_hf_import(&m, case_dir(CASES[i].name)) == DTX_OK, "%s: %s", CASES[i].name, dtx_last_error());
        const dtx_config *c = dtx_model_config(m);
        CHECKF(c->arch == CASES[i].arch && c->n_heads == CASES[i].n_heads && c->n_kv_heads == CASES[i].n_kv_heads,
               "%s: arch %d heads %lld kv %lld", CASES[i].name, (int)c->arch, (long long)c->n_heads,
               (long long)c->n_kv_heads);
        double e = logits_err(m, CASES[i].name);
        CHECKF(e < TOL, "%s: logits %.3g from the reference's", CASES[i].name, e);
        dtx_model_free(m);
        /* every command's reader takes the folder too */
        REQUIRE(dtx_model_open(&m, case_dir(CASES[i].name), DTX_PREC_FP32) == DTX_OK);
        dtx_model_free(m);
    }
}

/* A model of Llama 3.1's RoPE scaling keeps it in difftx's own file
 * (metadata rope_scaling), and computes the same there. */
TEST(hf_rope_scaling_survives_the_model_file) {
    dtx_model *m = NULL, *back = NULL;
    REQUIRE(dtx_hf_import(&m, case_dir("llama_rope_llama3")) == DTX_OK);
    const char *p = test_path("llama3.safetensors");
    REQUIRE(dtx_model_save(m, p, 0) == DTX_OK && dtx_model_load(&back, p) == DTX_OK);
    const dtx_config *c = dtx_model_config(back);
    CHECK(c->rope_factor == 8 && c->rope_low_freq == 1 && c->rope_high_freq == 4 && c->rope_orig_max_pos == 32);
    double e = logits_err(back, "llama_rope_llama3");
    CHECKF(e < TOL, "logits %.3g after the model file", e);
    char s[128];
    dtx_config_rope_scaling_str(c, s, sizeof s);
    CHECK(strcmp(s, "llama3 8 1 4 32") == 0);
    dtx_model_free(m), dtx_model_free(back);
}

/* Export then import gives the same parameters (F32 and BF16 of bf16
 * values, one file and shards); the export of an import whose KV heads map
 * one to one is HF's own tensors, exactly. */
TEST(hf_export_round_trips) {
    for (int i = 0; i < N_CASES; i++) {
        dtx_model *m = NULL, *back = NULL;
        REQUIRE(dtx_hf_import(&m, case_dir(CASES[i].name)) == DTX_OK);
        char d[64];
        snprintf(d, sizeof d, "hf_out_%d", i);
        const char *dir = test_path(d);
        int bf16 = strstr(CASES[i].name, "bf16") != NULL;
        int64_t shard = i % 2 ? 20000 : 0;
        REQUIREF(dtx_hf_export(m, dir, bf16, shard) == DTX_OK, "%s: %s", CASES[i].name, dtx_last_error());
        char p[600];
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        struct stat sb;
        CHECKF((stat(p, &sb) == 0) == (shard > 0), "%s: index %s", CASES[i].name, shard ? "missing" : "written");
        REQUIREF(dtx_hf_import(&back, dir) == DTX_OK, "%s: %s", CASES[i].name, dtx_last_error());
        CHECKF(same_params(m, back), "%s: export then import changed the parameters", CASES[i].name);
        if (CASES[i].kv_even && !shard && !bf16) {
            dtx_st_file a, b;
            snprintf(p, sizeof p, "hf/%s/model.safetensors", CASES[i].name);
            REQUIRE(dtx_st_open(&a, fixture_path(p)) == DTX_OK);
            snprintf(p, sizeof p, "%s/model.safetensors", dir);
            REQUIRE(dtx_st_open(&b, p) == DTX_OK);
            CHECKF(a.n_tensors == b.n_tensors, "%s: %d tensors, HF's file %d", CASES[i].name, b.n_tensors, a.n_tensors);
            for (int k = 0; k < a.n_tensors; k++) {
                const dtx_st_tensor *x = &a.tensors[k], *y = dtx_st_find(&b, x->name);
                CHECKF(y && y->nbytes == x->nbytes && memcmp(x->data, y->data, x->nbytes) == 0, "%s: tensor %s differs",
                       CASES[i].name, x->name);
            }
            CHECK(dtx_st_meta(&b, "format") && strcmp(dtx_st_meta(&b, "format"), "pt") == 0);
            dtx_st_close(&a), dtx_st_close(&b);
        }
        dtx_model_free(m), dtx_model_free(back);
    }
}

/* A difftx model with its own per-head norm weight: folded into o_proj, the
 * same logits; what HF cannot express is refused in one line. */
TEST(hf_export_folds_the_head_norm_and_refuses_the_rest) {
    dtx_config c = test_config(DTX_ARCH_DIFF, 32, 2, 2, 1, 61, 48, 16, 0);
    dtx_model *m = NULL, *back = NULL;
    REQUIRE(dtx_model_init(&m, &c, 5) == DTX_OK);
    dtx_rng r;
    dtx_rng_seed(&r, 9);
    for (int64_t L = 0; L < c.n_layers; L++) {
        char n[64];
        snprintf(n, sizeof n, "layers.%lld.attention.subln.weight", (long long)L);
        const dtx_tensor_info *t = dtx_model_find(m, n);
        for (size_t k = 0; k < t->numel; k++) dtx_model_params(m)[t->offset + k] = (dtx_real)(0.5 + dtx_rng_uniform(&r));
    }
    const char *dir = test_path("hf_fold");
    REQUIRE(dtx_hf_export(m, dir, 0, 0) == DTX_OK && dtx_hf_import(&back, dir) == DTX_OK);
    int32_t tok[10] = {1, 5, 9, 3, 60, 2, 7, 7, 0, 33};
    size_t n = 10 * 61;
    dtx_real *a = alloc_r(n), *b = alloc_r(n);
    REQUIRE(dtx_model_forward(m, tok, NULL, 1, 10, a, NULL) == DTX_OK &&
            dtx_model_forward(back, tok, NULL, 1, 10, b, NULL) == DTX_OK);
    double e = rel_err(b, a, n, sizeof(dtx_real) == 8, 0);
    CHECKF(e < 1e-5, "logits %.3g after the fold", e);
    free(a), free(b);
    dtx_model_free(back), dtx_model_free(m);
    static const struct {
        dtx_arch arch;
        int subln_none, fixed_lambda;
        const char *says;
    } NO[] = {{DTX_ARCH_DIFF2, 0, 0, "arch diff2 (DIFF V2) has no Hugging Face class"},
              {DTX_ARCH_DIFF, 1, 0, "subln none: DiffLlama always normalises"},
              {DTX_ARCH_DIFF, 0, 1, "lambda_init 0.5: DiffLlama's lambda_init follows the layer schedule"},
              {DTX_ARCH_TRANSFORMER, 0, 0, "subln rms: Llama has no per-head norm"}};
    for (size_t i = 0; i < sizeof NO / sizeof *NO; i++) {
        dtx_config k = test_config(NO[i].arch, 32, 2, 2, 2, 61, 48, 16, 0);
        if (NO[i].subln_none) k.subln = DTX_SUBLN_NONE;
        if (NO[i].arch == DTX_ARCH_TRANSFORMER) k.subln = DTX_SUBLN_RMS;
        if (NO[i].fixed_lambda) k.lambda_init_fixed = 1, k.lambda_init_value = 0.5;
        REQUIRE(dtx_model_init(&m, &k, 1) == DTX_OK);
        CHECKF(dtx_hf_export(m, test_path("hf_no"), 0, 0) == DTX_ERR_CONFIG && strstr(dtx_last_error(), NO[i].says),
               "%zu: %s", i, dtx_last_error());
        dtx_model_free(m);
    }
}

/* ---- refusals: a copy of a fixture with one thing changed ---- */

static char *copy_case(const char *name, const char *as) {
    const char *dir = test_path(as);
    mkdir(dir, 0777);
    static const char *const files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char src[600], dst[600];
        snprintf(src, sizeof src, "%s/%s", case_dir(name), files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        size_t len = 0;
        char *b = test_slurp(src, &len);
        if (b) write_file(dst, b, len);
        free(b);
    }
    return (char *)dir;
}

/* Rewrites dir/file, replacing the first `from` by `to`. */
static int edit(const char *dir, const char *file, const char *from, const char *to) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    size_t len = 0;
    char *b = test_slurp(p, &len);
    char *at = b ? strstr(b, from) : NULL;
    if (!at) {
        free(b);
        return 0;
    }
    size_t pre = (size_t)(at - b), fl = strlen(from), tl = strlen(to);
    char *o = malloc(len - fl + tl + 1);
    memcpy(o, b, pre);
    memcpy(o + pre, to, tl);
    memcpy(o + pre + tl, at + fl, len - pre - fl);
    int ok = write_file(p, o, len - fl + tl) == 0;
    free(b), free(o);
    return ok;
}

TEST(hf_import_refusals_name_the_key_or_tensor) {
    static const struct {
        const char *base, *file, *from, *to, *says;
        dtx_status st;
    } ROWS[] = {
        {"llama_gqa_untied", "config.json", "\"attention_bias\": false", "\"attention_bias\": true",
         "attention_bias is true: difftx's projections have no bias", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias is true",
         DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"rope_scaling\": null",
         "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}",
         "rope_scaling.rope_type \"llama3\" needs a number rope_scaling.low_freq_factor", DTX_ERR_FORMAT},
        {"llama_rope_llama3", "config.json", "\"factor\": 8.0", "\"factor\": 0.5",
         "rope_scaling llama3: factor 0.5 must be at least 1", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\"}",
         "rope_scaling.rope_type \"linear\"", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"rope_scaling\": null",
         "\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"yarn\"}", "rope_parameters.rope_type \"yarn\"",
         DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
         "hidden_act \"gelu\" is not silu", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"LlamaForCausalLM\"", "\"MistralForCausalLM\"",
         "architectures \"MistralForCausalLM\" is not", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"hidden_size\": 32", "\"hidden_size\": 32, \"head_dim\": 16",
         "tensor model.layers.0.self_attn.q_proj.weight is not a float tensor of shape [64, 32]", DTX_ERR_FORMAT},
        {"llama_gqa_untied", "config.json", "\"hidden_size\": 32", "\"hidden_size\": 32, \"head_dim\": 7",
         "the head width 7 is odd: RoPE rotates pairs", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"num_attention_heads\": 4", "\"num_attention_heads\": 3",
         "hidden_size 32 does not divide into num_attention_heads 3", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3",
         "num_key_value_heads 3 does not divide num_attention_heads 4", DTX_ERR_CONFIG},
        {"llama_gqa_untied", "config.json", "\"hidden_size\": 32", "\"hidden_size\": \"32\"",
         "hidden_size is not a positive integer", DTX_ERR_FORMAT},
        {"llama_gqa_untied", "config.json", "{", "[", "not a JSON object", DTX_ERR_FORMAT},
        {"llama_gqa_untied", "config.json", "\"vocab_size\": 61", "\"vocab_size\": 62",
         "tensor model.embed_tokens.weight is not a float tensor of shape [62, 32]", DTX_ERR_FORMAT},
        {"llama_gqa_untied", "config.json", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3",
         "tensor model.layers.2.input_layernorm.weight is missing", DTX_ERR_FORMAT},
        {"llama_gqa_untied", "config.json", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1",
         "tensor model.layers.1.input_layernorm.weight is not part of a LlamaForCausalLM", DTX_ERR_FORMAT},
        {"llama_mha_tied_bf16_sharded", "model.safetensors.index.json",
         "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"",
         "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"",
         "tensor model.norm.weight is mapped to model-00001-of-00002.safetensors, which does not hold it",
         DTX_ERR_FORMAT},
        {"llama_mha_tied_bf16_sharded", "model.safetensors.index.json",
         ".safetensors\",\n    \"model.norm.weight\": \"model-00002-of-00002.safetensors\"", ".safetensors\"",
         "tensor model.norm.weight is not in the index", DTX_ERR_FORMAT},
        {"llama_mha_tied_bf16_sharded", "model.safetensors.index.json",
         "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"",
         "\"model.norm.weight\": \"../model-00002-of-00002.safetensors\"", "is not a file name in the folder",
         DTX_ERR_FORMAT},
        {"llama_mha_tied_bf16_sharded", "model.safetensors.index.json", "\"weight_map\"", "\"weights\"",
         "no weight_map object naming the shards", DTX_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof ROWS / sizeof *ROWS; i++) {
        char as[32];
        snprintf(as, sizeof as, "hf_bad_%zu", i);
        char *dir = copy_case(ROWS[i].base, as);
        REQUIREF(edit(dir, ROWS[i].file, ROWS[i].from, ROWS[i].to), "row %zu: %s lacks %s", i, ROWS[i].file,
                 ROWS[i].from);
        dtx_model *m = NULL;
        dtx_status st = dtx_hf_import(&m, dir);
        CHECKF(st == ROWS[i].st && !m && strstr(dtx_last_error(), ROWS[i].says) && !strchr(dtx_last_error(), '\n'),
               "row %zu: status %d: %s", i, (int)st, dtx_last_error());
        dtx_model_free(m);
    }
    /* no tensor files; a shard the index names is absent; a NaN weight */
    dtx_model *m = NULL;
    char *dir = copy_case("llama_gqa_untied", "hf_bad_nofiles");
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    remove(p);
    CHECK(dtx_hf_import(&m, dir) == DTX_ERR_IO && strstr(dtx_last_error(), "holds neither model.safetensors"));
    dir = copy_case("llama_mha_tied_bf16_sharded", "hf_bad_noshard");
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    remove(p);
    CHECK(dtx_hf_import(&m, dir) == DTX_ERR_IO && strstr(dtx_last_error(), "model-00002-of-00002.safetensors"));
    CHECK(dtx_hf_import(&m, test_path("hf_none")) == DTX_ERR_IO && strstr(dtx_last_error(), "config.json"));
    REQUIRE(dtx_hf_import(&m, case_dir("llama_gqa_untied")) == DTX_OK);
    dtx_model_params(m)[dtx_model_find(m, "norm.weight")->offset + 3] = NAN;
    dir = (char *)test_path("hf_nan");
    REQUIRE(dtx_hf_export(m, dir, 0, 0) == DTX_OK);
    dtx_model_free(m);
    m = NULL;
    CHECK(dtx_hf_import(&m, dir) == DTX_ERR_FORMAT && strstr(dtx_last_error(), "tensor 'norm.weight' holds NaN"));
}

/* A BF16 folder is imported as bf16 weights in place (no fp32 copy); an F32
 * or F16 one into fp32; DTX_WEIGHTS_COPY=1 asks for fp32 and gives the same
 * logits. */
/* Which of the memories m owns for its weights p lies in (the import's
 * buffer of moved tensors first, then the shards it reads in place), or -1. */
static int weights_memory(const dtx_model *m, const void *p) {
    for (int i = 0; i < m->n_wmaps; i++) {
        const char *b = m->wmaps[i].data;
        if ((const char *)p >= b && (const char *)p < b + m->wmaps[i].size) return i;
    }
    return -1;
}

TEST(hf_bf16_folders_import_in_place) {
    for (int i = 0; i < N_CASES; i++) {
        /* the BF16 folders (diffllama_head_dim_4's files are BF16 too) */
        int bf16 = strstr(CASES[i].name, "bf16") != NULL || strcmp(CASES[i].name, "diffllama_head_dim_4") == 0;
        dtx_model *m = NULL, *c = NULL;
        REQUIRE(dtx_hf_import(&m, case_dir(CASES[i].name)) == DTX_OK);
        CHECKF(dtx_model_weights_in_place(m) == bf16, "%s: in place %d", CASES[i].name, dtx_model_weights_in_place(m));
        if (bf16) { /* rows kept in HF's order are read in the shard's mapping; q's, RoPE-permuted, in a buffer */
            int w1 = (int)(dtx_model_find(m, "layers.0.feed_forward.w1.weight") - dtx_model_tensor(m, 0));
            int q = (int)(dtx_model_find(m, "layers.0.attention.q_proj.weight") - dtx_model_tensor(m, 0));
            CHECKF(weights_memory(m, m->qw[w1].q) >= 1 && weights_memory(m, m->qw[q].q) == 0,
                   "%s: w1 in memory %d, q in %d of %d", CASES[i].name, weights_memory(m, m->qw[w1].q),
                   weights_memory(m, m->qw[q].q), m->n_wmaps);
        }
        if (bf16) {
            setenv("DTX_WEIGHTS_COPY", "1", 1);
            REQUIRE(dtx_hf_import(&c, case_dir(CASES[i].name)) == DTX_OK);
            unsetenv("DTX_WEIGHTS_COPY");
            CHECK(!dtx_model_weights_in_place(c) && dtx_model_weight_bytes(m) < dtx_model_weight_bytes(c));
            double e1 = logits_err(m, CASES[i].name), e2 = logits_err(c, CASES[i].name);
            CHECKF(e1 < TOL && fabs(e1 - e2) < 1e-6, "%s: logits %.3g in place, %.3g copied", CASES[i].name, e1, e2);
        }
        dtx_model_free(m);
        dtx_model_free(c);
    }
}
