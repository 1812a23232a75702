/* The reports of difftx info (difftx.h dtx_model_describe,
 * dtx_system_describe): what a model holds and how it compares with its
 * parameter-matched baseline of the other architecture; what runs the
 * numbers on this machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/json.h"
#include "kernels/kernels.h"
#include "difftx.h"

typedef struct {
    int64_t total, nonembed;
} param_count;

static param_count count_params(const dtx_config *c) {
    param_count p;
    p.total = dtx_config_num_params(c, &p.nonembed);
    return p;
}

typedef struct {
    dtx_config cfg;
    int ok;              /* 0: this config has no baseline (odd head counts) */
    char why[256];
    param_count params;
} baseline;

static baseline make_baseline(const dtx_config *c) {
    baseline b = {.cfg = dtx_config_baseline(c), .ok = 1};
    if (c->arch == DTX_ARCH_TRANSFORMER && (c->n_heads % 2 || c->n_kv_heads % 2)) {
        b.ok = 0;
        snprintf(b.why, sizeof b.why, "n_heads %lld and n_kv_heads %lld must both be even to halve them",
                 (long long)c->n_heads, (long long)c->n_kv_heads);
    } else if (dtx_config_validate(&b.cfg) != DTX_OK) {
        b.ok = 0;
        snprintf(b.why, sizeof b.why, "%s", dtx_last_error());
    } else {
        b.params = count_params(&b.cfg);
    }
    return b;
}

typedef struct {
    const char *path;
    const dtx_model *m;
    const dtx_config *c;
    param_count params;
    baseline base;
    int64_t lambda_terms; /* the λ vectors of whichever is DIFF (V2: lambda_proj) */
    int64_t query_terms;  /* V2: the query weights it has beyond its Transformer */
    int64_t subln_terms;  /* subln weights of whichever is DIFF less those of the Transformer */
    int64_t ckpt_step;    /* a checkpoint's step; -1 for a model file */
} report;

/* subln weights of a config, all layers. */
static int64_t subln_params(const dtx_config *c) {
    return dtx_config_has_subln(c) ? (c->arch == DTX_ARCH_DIFF ? 2 : 1) * dtx_config_head_dim(c) * c->n_layers : 0;
}

static report make_report(const char *path, const dtx_model *m) {
    report r = {.path = path, .m = m, .c = dtx_model_config(m), .ckpt_step = -1};
    r.params.total = (int64_t)dtx_model_num_params(m);
    r.params.nonembed = (int64_t)dtx_model_num_params_nonembed(m);
    r.base = make_baseline(r.c);
    if (r.c->arch == DTX_ARCH_DIFF2) {
        r.lambda_terms = dtx_config_has_lambda_proj(r.c) ? r.c->n_heads * r.c->dim * r.c->n_layers : 0;
        r.query_terms = r.c->dim * r.c->dim * r.c->n_layers;
        return r;
    }
    /* DIFF and its baseline share the q/k width d (dim / 2H = dim / H'). */
    int64_t d = dtx_config_head_dim(r.c->arch == DTX_ARCH_DIFF ? r.c : &r.base.cfg);
    r.lambda_terms = 4 * d * r.c->n_layers;
    const dtx_config *dc = r.c->arch == DTX_ARCH_DIFF ? r.c : &r.base.cfg, *tc = dc == r.c ? &r.base.cfg : r.c;
    r.subln_terms = subln_params(dc) - subln_params(tc);
    return r;
}

static void print_tensors_text(FILE *f, const dtx_model *m) {
    for (int i = 0; i < dtx_model_num_tensors(m); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(m, i);
        if (t->ndim == 1) fprintf(f, "  %-40s [%lld]\n", t->name, (long long)t->shape[0]);
        else fprintf(f, "  %-40s [%lld, %lld]\n", t->name, (long long)t->shape[0], (long long)t->shape[1]);
    }
}

static void print_text(FILE *f, const report *r, int tensors) {
    const dtx_config *c = r->c;
    char b1[32], b2[32];
    int diff = c->arch == DTX_ARCH_DIFF;
    fprintf(f, "file            %s\n", r->path);
    if (r->ckpt_step >= 0) fprintf(f, "checkpoint      step %lld (the model below and its AdamW moments)\n", (long long)r->ckpt_step);
    fprintf(f, "arch            %s\n", dtx_arch_name(c->arch));
    fprintf(f, "dim             %lld\n", (long long)c->dim);
    fprintf(f, "n_layers        %lld\n", (long long)c->n_layers);
    fprintf(f, "n_heads         %lld%s\n", (long long)c->n_heads,
           diff                          ? "  (differential heads, each two softmax maps)"
           : c->arch == DTX_ARCH_DIFF2 ? "  (output heads, each a pair of the 2h query heads on one KV head)"
                                        : "");
    fprintf(f, "n_kv_heads      %lld\n", (long long)c->n_kv_heads);
    fprintf(f, "head_dim        %lld\n", (long long)dtx_config_head_dim(c));
    fprintf(f, "vocab_size      %lld\n", (long long)c->vocab_size);
    fprintf(f, "ffn_dim         %lld\n", (long long)c->ffn_dim);
    fprintf(f, "max_seq_len     %lld\n", (long long)c->max_seq_len);
    fprintf(f, "rope_theta      %s\n", dtx_format_real(c->rope_theta, b1, sizeof b1));
    if (c->rope_factor > 0) {
        char rs[128];
        dtx_config_rope_scaling_str(c, rs, sizeof rs);
        fprintf(f, "rope_scaling    %s  (factor, low and high frequency factors, original context)\n", rs);
    }
    if (c->transformer_mix > 0)
        fprintf(f, "transformer_mix %s  (a converted Transformer's form, phased out by train --diff-warmup)\n",
                dtx_format_real(c->transformer_mix, b1, sizeof b1));
    fprintf(f, "norm_eps        %s\n", dtx_format_real(c->norm_eps, b2, sizeof b2));
    fprintf(f, "tie_embeddings  %s\n", c->tie_embeddings ? "true" : "false");
    char li[40];
    dtx_config_lambda_init_str(c, li, sizeof li);
    fprintf(f, "subln           %s%s\n", dtx_config_subln_name(c), dtx_config_is_default_variant(c) ? "" : "  (a Table 6 variant)");
    if (diff) fprintf(f, "lambda_init     %s\n", li);
    if (c->arch == DTX_ARCH_DIFF2)
        fprintf(f, "v2_lambda       %s  (%s)\n", dtx_config_v2_lambda_name(c),
               c->v2_lambda == DTX_V2_LAMBDA_SIGMOID  ? "per token and head: sigmoid(x lambda_proj^T)"
               : c->v2_lambda == DTX_V2_LAMBDA_LINEAR ? "x lambda_proj^T without the sigmoid, an ablation"
                                                      : "1: no lambda_proj, an ablation");
    if (diff) {
        fprintf(f, "lambda         ");
        for (int64_t l = 0; l < c->n_layers; l++) fprintf(f, " %.4f", dtx_model_lambda(r->m, l));
        fprintf(f, "  (per layer)\n");
    }
    fprintf(f, "params          %lld  (non-embedding %lld)\n", (long long)r->params.total, (long long)r->params.nonembed);
    dtx_wquant wq = dtx_model_wquant(r->m);
    if (wq != DTX_WQ_NONE) {
        fprintf(f, "quantised       %s%s: %.3f MB of weights in memory, %.3f MB in fp32\n", dtx_wquant_name(wq),
               dtx_model_act_fp16(r->m) ? " (fp16 activations)" : "", (double)dtx_model_weight_bytes(r->m) / 1e6,
               (double)r->params.total * 4 / 1e6);
        const char *cal = dtx_model_meta(r->m, "quant_calib");
        if (cal) fprintf(f, "calibration     %s\n", cal);
    }
    if (!r->base.ok) {
        fprintf(f, "baseline        none: %s\n", r->base.why);
    } else {
        const dtx_config *b = &r->base.cfg;
        fprintf(f, "baseline        %s with n_heads %lld, n_kv_heads %lld: %lld params  (non-embedding %lld)\n",
               dtx_arch_name(b->arch), (long long)b->n_heads, (long long)b->n_kv_heads, (long long)r->base.params.total,
               (long long)r->base.params.nonembed);
        int64_t d = r->lambda_terms / 4 / c->n_layers;
        if (c->arch == DTX_ARCH_DIFF2)
            fprintf(f, "difference      %+lld = %lld query (h %lld x head_dim %lld x dim %lld x %lld layers: the second "
                   "query head of each pair) + %lld lambda_proj (h %lld x dim %lld x %lld layers). Matched here means "
                   "V2's own comparison (spec 8.2): the Transformer with the same heads, KV heads and head width, so "
                   "the same KV cache and out_proj; V2 adds query and lambda weights instead of halving heads\n",
                   (long long)(r->params.total - r->base.params.total), (long long)r->query_terms,
                   (long long)c->n_heads, (long long)dtx_config_head_dim(c), (long long)c->dim, (long long)c->n_layers,
                   (long long)r->lambda_terms, (long long)c->n_heads, (long long)c->dim, (long long)c->n_layers);
        else if (r->subln_terms == 2 * d * c->n_layers)
            fprintf(f, "difference      %+lld = %s%lld lambda (4 x head_dim %lld x %lld layers) + %lld subln (2 x %lld x %lld "
                   "layers)%s\n",
                   (long long)(r->params.total - r->base.params.total), diff ? "" : "-(", (long long)r->lambda_terms,
                   (long long)d, (long long)c->n_layers, (long long)r->subln_terms, (long long)d,
                   (long long)c->n_layers, diff ? ", which only DIFF has" : "), which only the DIFF baseline has");
        else
            fprintf(f, "difference      %+lld = %s%lld lambda (4 x head_dim %lld x %lld layers) %+lld subln (the DIFF side's "
                   "per-head norm weights less the Transformer side's)%s\n",
                   (long long)(r->params.total - r->base.params.total), diff ? "" : "-(", (long long)r->lambda_terms,
                   (long long)d, (long long)c->n_layers, (long long)r->subln_terms, diff ? "" : ")");
    }
    if (tensors) {
        fprintf(f, "tensors         %d\n", dtx_model_num_tensors(r->m));
        print_tensors_text(f, r->m);
    }
}

static void json_count(cJSON *o, const char *key, const param_count *p, int *ok) {
    char k2[64];
    snprintf(k2, sizeof k2, "%s_nonembed", key);
    jint(o, key, p->total, ok);
    jint(o, k2, p->nonembed, ok);
}

static void json_tensors(cJSON *root, const dtx_model *m, int *ok) {
    cJSON *arr = jadd(root, "tensors", cJSON_CreateArray(), ok);
    for (int i = 0; arr && i < dtx_model_num_tensors(m); i++) {
        const dtx_tensor_info *t = dtx_model_tensor(m, i);
        cJSON *o = jadd(arr, NULL, cJSON_CreateObject(), ok);
        if (!o) continue;
        jstr(o, "name", t->name, ok);
        cJSON *shape = jadd(o, "shape", cJSON_CreateArray(), ok);
        for (int d = 0; shape && d < t->ndim && d < 2; d++) jadd(shape, NULL, cJSON_CreateNumber((double)t->shape[d]), ok);
    }
}

static char *print_json(const report *r, int tensors) {
    const dtx_config *c = r->c;
    int ok = 1;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    jstr(root, "file", r->path, &ok);
    if (r->ckpt_step >= 0) jint(root, "checkpoint_step", r->ckpt_step, &ok);
    jstr(root, "arch", dtx_arch_name(c->arch), &ok);
    jint(root, "dim", c->dim, &ok);
    jint(root, "n_layers", c->n_layers, &ok);
    jint(root, "n_heads", c->n_heads, &ok);
    jint(root, "n_kv_heads", c->n_kv_heads, &ok);
    jint(root, "head_dim", dtx_config_head_dim(c), &ok);
    jint(root, "vocab_size", c->vocab_size, &ok);
    jint(root, "ffn_dim", c->ffn_dim, &ok);
    jint(root, "max_seq_len", c->max_seq_len, &ok);
    jnum(root, "rope_theta", c->rope_theta, &ok);
    char rs[128];
    dtx_config_rope_scaling_str(c, rs, sizeof rs);
    jstr(root, "rope_scaling", rs, &ok);
    if (c->arch == DTX_ARCH_DIFF) jnum(root, "transformer_mix", c->transformer_mix, &ok);
    jnum(root, "norm_eps", c->norm_eps, &ok);
    jbool(root, "tie_embeddings", c->tie_embeddings, &ok);
    jstr(root, "subln", dtx_config_subln_name(c), &ok);
    if (c->arch == DTX_ARCH_DIFF) {
        char li[40];
        dtx_config_lambda_init_str(c, li, sizeof li);
        if (c->lambda_init_fixed) jnum(root, "lambda_init", strtod(li, NULL), &ok);
        else jstr(root, "lambda_init", li, &ok);
        double *lam = malloc((size_t)c->n_layers * sizeof *lam);
        for (int64_t l = 0; lam && l < c->n_layers; l++) lam[l] = dtx_model_lambda(r->m, l);
        jadd(root, "lambda", lam ? jnum_array(lam, c->n_layers, 17) : NULL, &ok);
        free(lam);
    }
    if (c->arch == DTX_ARCH_DIFF2) jstr(root, "v2_lambda", dtx_config_v2_lambda_name(c), &ok);
    json_count(root, "params", &r->params, &ok);
    jstr(root, "quant_scheme", dtx_wquant_name(dtx_model_wquant(r->m)), &ok);
    jint(root, "weight_bytes", (int64_t)dtx_model_weight_bytes(r->m), &ok);
    if (dtx_model_wquant(r->m) == DTX_WQ_W8A8) jnull(root, "quant_act16", &ok);
    else if (dtx_model_wquant(r->m) != DTX_WQ_NONE) jstr(root, "quant_act16", dtx_model_act_fp16(r->m) ? "fp16" : "bf16", &ok);
    if (dtx_model_meta(r->m, "quant_calib")) jstr(root, "quant_calib", dtx_model_meta(r->m, "quant_calib"), &ok);
    if (!r->base.ok) {
        jnull(root, "baseline", &ok);
        jstr(root, "baseline_error", r->base.why, &ok);
    } else {
        const dtx_config *b = &r->base.cfg;
        cJSON *bo = jadd(root, "baseline", cJSON_CreateObject(), &ok);
        if (bo) {
            jstr(bo, "arch", dtx_arch_name(b->arch), &ok);
            jint(bo, "n_heads", b->n_heads, &ok);
            jint(bo, "n_kv_heads", b->n_kv_heads, &ok);
            jint(bo, "head_dim", dtx_config_head_dim(b), &ok);
            jstr(bo, "subln", dtx_config_subln_name(b), &ok);
            json_count(bo, "params", &r->base.params, &ok);
        }
        jint(root, "difference", r->params.total - r->base.params.total, &ok);
        jint(root, "difference_lambda", r->lambda_terms, &ok);
        jint(root, "difference_subln", r->subln_terms, &ok);
        if (c->arch == DTX_ARCH_DIFF2) jint(root, "difference_query", r->query_terms, &ok);
    }
    if (tensors) json_tensors(root, r->m, &ok);
    return json_text(root, ok, 0);
}

char *dtx_system_describe(int json) {
    dtx_isa cpu = dtx_isa_cpu(), lvl = dtx_isa_level();
    const char *cap = getenv("DTX_ISA");
    int attn_native = lvl >= DTX_ISA_AVX512_BF16, mm_native = dtx_matmul_bf16_native();
    const char *kern = lvl >= DTX_ISA_AVX512 ? "avx512" : lvl >= DTX_ISA_AVX2 ? "avx2" : "portable";
    int tiles = dtx_matmul_tiles_used(64, DTX_PREC_FP32); /* the training and prefill products */
    if (json) {
        int ok = 1;
        cJSON *root = cJSON_CreateObject();
        if (!root) ok = 0;
        else {
            jstr(root, "isa_cpu", dtx_isa_name(cpu), &ok);
            jstr(root, "isa", dtx_isa_name(lvl), &ok);
            if (cap && *cap) jstr(root, "dtx_isa", cap, &ok);
            else jnull(root, "dtx_isa", &ok);
            jbool(root, "avx512_vnni", dtx_isa_cpu_has_vnni(), &ok);
            jstr(root, "tile_kernels", kern, &ok);
            jstr(root, "matmul", dtx_matmul_library(), &ok);
            jstr(root, "matmul_isa", dtx_matmul_isa_name(), &ok);
            jstr(root, "fp32_matmul", tiles ? "tiles forward and dx, oneDNN dw" : "oneDNN", &ok);
            jstr(root, "bf16_matmul", mm_native ? "native" : "emulated", &ok);
            jstr(root, "bf16_attention", attn_native ? "native" : "emulated", &ok);
        }
        return json_text(root, ok, 0);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "isa             %s (CPU: %s%s%s%s)\n", dtx_isa_name(lvl), dtx_isa_name(cpu), cap && *cap ? "; DTX_ISA=" : "",
           cap && *cap ? cap : "", lvl < cpu ? ", capped" : "");
    fprintf(f, "avx512 vnni     %s (%s)\n", dtx_isa_cpu_has_vnni() ? "yes" : "no",
           !dtx_isa_cpu_has_vnni()  ? "w8a8's one-row product runs the AVX2 kernel"
           : lvl >= DTX_ISA_AVX512 ? "w8a8's one-row product uses it"
                                   : "unused below ISA avx512");
    fprintf(f, "tile kernels    %s (flash attention products, exp, softmax rows)\n", kern);
    fprintf(f, "matmul          %s, ISA %s\n", dtx_matmul_library(), dtx_matmul_isa_name());
    fprintf(f, "fp32 matmul     %s\n", tiles ? "forward and dx on difftx's tile GEMM (512-bit datapaths at full width), dw on oneDNN"
                                             : "oneDNN");
    fprintf(f, "bf16 matmul     %s\n", mm_native ? "native (oneDNN bf16 primitives)"
                                              : "emulated (bf16-rounded operands on fp32 primitives)");
    fprintf(f, "bf16 attention  %s\n", attn_native ? "native (AVX-512 BF16 tiles)"
                                                : "emulated (bf16-rounded operands on the fp32 tiles)");
    return fclose(f) == 0 ? buf : (free(buf), NULL);
}

char *dtx_model_describe(const dtx_model *m, const char *path, int64_t ckpt_step, int tensors, int json) {
    report r = make_report(path, m);
    r.ckpt_step = ckpt_step;
    if (json) return print_json(&r, tensors);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    print_text(f, &r, tensors);
    return fclose(f) == 0 ? buf : (free(buf), NULL);
}
