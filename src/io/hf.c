/* Hugging Face checkpoint folders in and out (difftx.h "Hugging Face
 * checkpoints", docs/huggingface.md): DiffLlamaForCausalLM <-> diff,
 * LlamaForCausalLM <-> transformer, the same function on both sides.
 *
 * What differs between the two layouts, per HF's modeling files:
 * - RoPE: HF rotates the pair (i, i + D/2) of each D-wide head (rotate_half),
 *   difftx the pair (2i, 2i + 1): q and k rows are permuted within each head
 *   (difftx row 2i <- HF row i, 2i + 1 <- HF row i + D/2), frequencies equal.
 * - DiffLlama's H query heads are H/2 output heads: head j's two maps are
 *   query heads j and j + H/2, its value [v_j ; v_{j+H/2}] (each through its
 *   KV head); difftx's head j holds [q1 ; q2] in one 2D slot, and its KV
 *   group [k1 ; k2] and [v1 ; v2]. With kv even, difftx group g is HF KV
 *   heads g and g + kv/2 (the heads j and j + H/2 read); otherwise every
 *   difftx head gets a group of its own, the HF heads copied (exact, larger).
 * - A Llama is a difftx transformer of the same heads and KV heads (difftx's
 *   transformer heads are dim / n_heads wide, as Llama's).
 * - DiffLlama's per-head RMSNorm has no weight: difftx's subln is 1 on
 *   import, and folded into o_proj's columns on export.
 * - λ: one scalar per layer from four D-vectors, λ_init from the 0-based
 *   layer index: as difftx's schedule. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/common.h"
#include "common/json.h"
#include "io/safetensors.h"
#include "model/model.h"

/* ---------------------------------------------------------------- config */

typedef struct {
    int diff;
    int64_t hidden, ffn, layers, H, kv, D, vocab, max_pos;
    double eps, theta;
    int tied;
    double rope_factor, rope_low, rope_high; /* rope_type llama3 (factor 0: none) */
    int64_t rope_orig;
} hf_config;

static dtx_status cfg_int(const cJSON *root, const char *path, const char *key, int64_t dflt, int64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x || cJSON_IsNull(x)) {
        *v = dflt;
        return DTX_OK;
    }
    double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    if (!(d >= 1 && d <= (double)INT32_MAX) || d != floor(d))
        return dtx_fail(DTX_ERR_FORMAT, "%s: %s is not a positive integer", path, key);
    *v = (int64_t)d;
    return DTX_OK;
}

static dtx_status cfg_real(const cJSON *root, const char *path, const char *key, double dflt, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x || cJSON_IsNull(x)) {
        *v = dflt;
        return DTX_OK;
    }
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || !isfinite(x->valuedouble))
        return dtx_fail(DTX_ERR_FORMAT, "%s: %s is not a positive number", path, key);
    *v = x->valuedouble;
    return DTX_OK;
}

/* A boolean key that must be false (or absent) for difftx to compute the same. */
static dtx_status cfg_false(const cJSON *root, const char *path, const char *key, const char *why) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x || cJSON_IsNull(x) || cJSON_IsFalse(x)) return DTX_OK;
    if (!cJSON_IsTrue(x)) return dtx_fail(DTX_ERR_FORMAT, "%s: %s is not true or false", path, key);
    return dtx_fail(DTX_ERR_CONFIG, "%s: %s is true: %s", path, key, why);
}

static const char *cfg_str(const cJSON *root, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* rope_theta and the rope type, where each version of transformers puts
 * them: default, or llama3 with its four parameters (all required, as
 * transformers requires them). */
static dtx_status cfg_rope(const cJSON *root, const char *path, hf_config *h) {
    double *theta = &h->theta;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    const char *where = params && !cJSON_IsNull(params) ? "rope_parameters" : "rope_scaling";
    const cJSON *d = params && !cJSON_IsNull(params) ? params : scaling;
    dtx_status st = cfg_real(root, path, "rope_theta", 10000.0, theta);
    if (st || !d || cJSON_IsNull(d)) return st;
    if (!cJSON_IsObject(d)) return dtx_fail(DTX_ERR_FORMAT, "%s: %s is not an object", path, where);
    if ((st = cfg_real(d, path, "rope_theta", *theta, theta))) return st;
    const char *type = cfg_str(d, "rope_type") ? cfg_str(d, "rope_type") : cfg_str(d, "type");
    if (type && strcmp(type, "llama3") == 0) {
        static const char *const need[4] = {"factor", "low_freq_factor", "high_freq_factor",
                                            "original_max_position_embeddings"};
        for (int i = 0; i < 4; i++)
            if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(d, need[i])))
                return dtx_fail(DTX_ERR_FORMAT, "%s: %s.rope_type \"llama3\" needs a number %s.%s", path, where, where,
                                need[i]);
        if ((st = cfg_real(d, path, "factor", 0, &h->rope_factor)) ||
            (st = cfg_real(d, path, "low_freq_factor", 0, &h->rope_low)) ||
            (st = cfg_real(d, path, "high_freq_factor", 0, &h->rope_high)) ||
            (st = cfg_int(d, path, "original_max_position_embeddings", 0, &h->rope_orig)))
            return st;
        return DTX_OK;
    }
    if (type && strcmp(type, "default") != 0)
        return dtx_fail(DTX_ERR_CONFIG, "%s: %s.rope_type \"%s\" is not supported (difftx computes the default RoPE)",
                        path, where, dtx_show(type).s);
    return DTX_OK;
}

/* The JSON object in the file at path (config.json, the index). */
static dtx_status read_object(const char *path, cJSON **out) {
    char *text = NULL;
    size_t len = 0;
    dtx_status st = dtx_read_file(path, &text, &len);
    if (st) return st;
    *out = cJSON_ParseWithLength(text, len);
    free(text);
    if (cJSON_IsObject(*out)) return DTX_OK;
    cJSON_Delete(*out);
    *out = NULL;
    return dtx_fail(DTX_ERR_FORMAT, "%s: not a JSON object", path);
}

static dtx_status parse_config(const char *dir, hf_config *h) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = NULL;
    dtx_status st = read_object(path, &root);
    if (st) return st;
    memset(h, 0, sizeof *h);
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const char *arch = cJSON_IsArray(archs) ? (cJSON_IsString(cJSON_GetArrayItem(archs, 0))
                                                   ? cJSON_GetArrayItem(archs, 0)->valuestring : NULL)
                                            : NULL;
    const char *type = cfg_str(root, "model_type");
    if (arch ? strcmp(arch, "DiffLlamaForCausalLM") == 0 : type && strcmp(type, "diffllama") == 0) h->diff = 1;
    else if (!(arch ? strcmp(arch, "LlamaForCausalLM") == 0 : type && strcmp(type, "llama") == 0)) {
        st = dtx_fail(DTX_ERR_CONFIG, "%s: architectures \"%s\" is not DiffLlamaForCausalLM or LlamaForCausalLM",
                      path, dtx_show(arch ? arch : type ? type : "(none)").s);
        goto done;
    }
    const char *act = cfg_str(root, "hidden_act");
    int64_t head_dim = 0;
    double partial = 1;
    /* transformers' defaults where a key is absent */
    if ((st = cfg_int(root, path, "hidden_size", h->diff ? 2048 : 4096, &h->hidden)) ||
        (st = cfg_int(root, path, "intermediate_size", h->diff ? 8192 : 11008, &h->ffn)) ||
        (st = cfg_int(root, path, "num_hidden_layers", h->diff ? 16 : 32, &h->layers)) ||
        (st = cfg_int(root, path, "num_attention_heads", 32, &h->H)) ||
        (st = cfg_int(root, path, "num_key_value_heads", h->H, &h->kv)) ||
        (st = cfg_int(root, path, "vocab_size", 32000, &h->vocab)) ||
        (st = cfg_int(root, path, "max_position_embeddings", 2048, &h->max_pos)) ||
        (st = cfg_int(root, path, "head_dim", 0, &head_dim)) ||
        (st = cfg_real(root, path, "rms_norm_eps", h->diff ? 1e-5 : 1e-6, &h->eps)) ||
        (st = cfg_real(root, path, "partial_rotary_factor", 1, &partial)) || (st = cfg_rope(root, path, h)) ||
        (st = cfg_false(root, path, "attention_bias", "difftx's projections have no bias")) ||
        (st = cfg_false(root, path, "mlp_bias", "difftx's feed-forward has no bias")))
        goto done;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie) && !cJSON_IsNull(tie)) {
        st = dtx_fail(DTX_ERR_FORMAT, "%s: tie_word_embeddings is not true or false", path);
        goto done;
    }
    h->tied = cJSON_IsTrue(tie);
    if (act && strcmp(act, "silu") != 0)
        st = dtx_fail(DTX_ERR_CONFIG, "%s: hidden_act \"%s\" is not silu (difftx's feed-forward is SwiGLU)", path,
                      dtx_show(act).s);
    else if (partial != 1)
        st = dtx_fail(DTX_ERR_CONFIG, "%s: partial_rotary_factor %g: difftx rotates whole heads", path, partial);
    else if (!head_dim && h->hidden % h->H)
        st = dtx_fail(DTX_ERR_CONFIG, "%s: hidden_size %lld does not divide into num_attention_heads %lld", path,
                      (long long)h->hidden, (long long)h->H);
    else if (h->diff && h->H % 2)
        st = dtx_fail(DTX_ERR_CONFIG, "%s: num_attention_heads %lld is odd: DiffLlama pairs its heads", path,
                      (long long)h->H);
    else if (h->H % h->kv)
        st = dtx_fail(DTX_ERR_CONFIG, "%s: num_key_value_heads %lld does not divide num_attention_heads %lld",
                      path, (long long)h->kv, (long long)h->H);
    h->D = head_dim ? head_dim : h->hidden / h->H;
    if (!st && h->D % 2)
        st = dtx_fail(DTX_ERR_CONFIG, "%s: the head width %lld is odd: RoPE rotates pairs", path, (long long)h->D);
done:
    cJSON_Delete(root);
    return st;
}

/* difftx's n_kv_heads for an HF model. A diff model's groups hold two KV
 * heads of width D: with kv even, group g is HF's g and g + kv/2 (what the
 * heads j and j + H/2 of the group read); otherwise every difftx head gets
 * a group of its own, HF's heads copied (exact, larger). */
static int64_t difftx_kv(const hf_config *h) {
    if (!h->diff) return h->kv;
    return h->kv % 2 == 0 ? h->kv / 2 : h->H / 2;
}

/* The HF query head behind difftx's q sub-head s, and the HF KV head behind
 * difftx's k/v sub-head t, for a difftx config of Hd heads and G KV heads
 * (groups) and an HF model of kv KV heads. */
static int64_t hf_q_head(int diff, int64_t Hd, int64_t s) { return diff ? s / 2 + (s % 2) * Hd : s; }

static int64_t hf_kv_head(int diff, int64_t Hd, int64_t G, int64_t kv, int64_t t) {
    if (!diff) return t;
    /* the first head of group t/2, and its half: the HF query head it stands for, then that one's KV head */
    int64_t q = hf_q_head(1, Hd, 2 * ((t / 2) * (Hd / G)) + t % 2);
    return q * kv / (2 * Hd);
}

/* difftx's row r of a D-wide RoPE'd head is HF's row rope_row(r) of it. */
static int64_t rope_row(int64_t r, int64_t D) { return r % 2 == 0 ? r / 2 : r / 2 + D / 2; }

/* ---------------------------------------------------------------- tensors */

typedef struct {
    int n_files;
    dtx_st_file *files;
    char **names;      /* the files' names in the folder */
    const char *dir;
} hf_files;

static void files_close(hf_files *f) {
    for (int i = 0; i < f->n_files; i++) {
        dtx_st_close(&f->files[i]);
        free(f->names[i]);
    }
    free(f->files);
    free(f->names);
    memset(f, 0, sizeof *f);
}

static dtx_status files_add(hf_files *f, const char *name) {
    for (int i = 0; i < f->n_files; i++)
        if (strcmp(f->names[i], name) == 0) return DTX_OK;
    int plain = *name && strlen(name) <= 255 && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
    for (const char *c = name; plain && *c; c++) plain = *c != '/' && (unsigned char)*c >= 0x20 && *c != 0x7f;
    if (!plain)
        return dtx_fail(DTX_ERR_FORMAT, "%s/model.safetensors.index.json: shard \"%s\" is not a file name in the "
                        "folder", f->dir, dtx_show(name).s);
    dtx_st_file *files = realloc(f->files, sizeof *files * (size_t)(f->n_files + 1));
    char **names = files ? realloc(f->names, sizeof *names * (size_t)(f->n_files + 1)) : NULL;
    if (files) f->files = files;
    if (names) f->names = names;
    if (!files || !names || !(f->names[f->n_files] = strdup(name))) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    memset(&f->files[f->n_files], 0, sizeof f->files[0]);
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    f->n_files++;
    return dtx_st_open(&f->files[f->n_files - 1], path);
}

/* The tensor named name, in whichever file holds it (NULL: none). */
static const dtx_st_tensor *files_find(const hf_files *f, const char *name, int *which) {
    for (int i = 0; i < f->n_files; i++) {
        const dtx_st_tensor *t = dtx_st_find(&f->files[i], name);
        if (t) {
            if (which) *which = i;
            return t;
        }
    }
    return NULL;
}

/* model.safetensors, else the index and every shard it names; every shard's
 * tensors must be the index's, in the shard it names. */
static dtx_status files_open(hf_files *f, const char *dir) {
    memset(f, 0, sizeof *f);
    f->dir = dir;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0) return files_add(f, "model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0)
        return dtx_fail(DTX_ERR_IO, "%s: holds neither model.safetensors nor model.safetensors.index.json", dir);
    cJSON *root = NULL;
    dtx_status st = read_object(path, &root);
    if (st) return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map) || !map->child) {
        cJSON_Delete(root);
        return dtx_fail(DTX_ERR_FORMAT, "%s: no weight_map object naming the shards", path);
    }
    for (const cJSON *e = map->child; e && !st; e = e->next) {
        if (!cJSON_IsString(e) || !e->string) {
            st = dtx_fail(DTX_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a file name", path,
                          dtx_show(e->string ? e->string : "").s);
            break;
        }
        if ((st = files_add(f, e->valuestring))) break;
        int which = -1;
        if (!files_find(f, e->string, &which) || strcmp(f->names[which], e->valuestring) != 0)
            st = dtx_fail(DTX_ERR_FORMAT, "%s: tensor %s is mapped to %s, which does not hold it", path,
                          dtx_show(e->string).s, dtx_show(e->valuestring).s);
    }
    for (int i = 0; i < f->n_files && !st; i++)
        for (int k = 0; k < f->files[i].n_tensors && !st; k++) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(map, f->files[i].tensors[k].name);
            if (!e) st = dtx_fail(DTX_ERR_FORMAT, "%s/%s: tensor %s is not in the index", dir, f->names[i],
                                  dtx_show(f->files[i].tensors[k].name).s);
        }
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------- import */

/* The import runs twice: first with m NULL, checking every tensor's
 * presence and shape before anything the config's sizes could make large is
 * allocated; then with the model, copying. */
typedef struct {
    const hf_files *f;
    const hf_config *h;
    const dtx_config *c; /* difftx's */
    dtx_model *m;        /* NULL: check only */
    /* BF16 weights stay bf16 (float build), never widened: a 2-D tensor read
     * as BF16 whose rows difftx keeps in HF's order is used where it lies in
     * its shard's mapping (which the model then keeps); one whose rows move
     * (q and k: RoPE's pairs; DiffLlama's regrouped heads) is copied, rows
     * permuted, to its place in wbf (one buffer, the tensors in table order).
     * The model reads them in place (model.h), holding no fp32 copy: opening
     * a folder costs the moved tensors' bytes, not the model's. */
    uint16_t *wbf;
    const uint16_t **in_place; /* [n_tensors]: the tensor's bf16, or NULL */
    char *keep;                /* [n_files]: a tensor is used in place in this shard's mapping */
} importer;

/* Whether the BF16 tensor src stays bf16 (in place); then the index of
 * difftx tensor dst. */
static int bf16_kept(const importer *im, const char *dst, const dtx_st_tensor *src, int *index) {
#ifndef DTX_DOUBLE
    if (!im->wbf || src->dtype != DTX_ST_BF16 || src->ndim != 2) return 0;
    *index = (int)(dtx_model_find(im->m, dst) - dtx_model_tensor(im->m, 0));
    return 1;
#else
    (void)im, (void)dst, (void)src, (void)index;
    return 0;
#endif
}

/* Where the BF16 tensor src goes when it is kept as bf16 and its rows move
 * (difftx tensor dst's place in im->wbf, recorded as in place), or NULL:
 * it goes to params. */
static uint16_t *bf16_place(importer *im, const char *dst, const dtx_st_tensor *src) {
    int i;
    if (!bf16_kept(im, dst, src, &i)) return NULL;
    size_t at = 0;
    for (int k = 0; k < i; k++)
        if (im->m->tensors[k].ndim == 2) at += im->m->tensors[k].numel;
    im->in_place[i] = im->wbf + at;
    dtx_prefault(im->wbf + at, im->m->tensors[i].numel * sizeof *im->wbf, 1); /* written whole next */
    return im->wbf + at;
}

/* Whether the BF16 tensor src (in shard `which`), kept as bf16 with its
 * rows where they are, is used where it lies (recorded as in place, the
 * shard kept mapped); else its bytes are copied. */
static int bf16_in_file(importer *im, const char *dst, const dtx_st_tensor *src, int which) {
    int i;
    if (!bf16_kept(im, dst, src, &i) || ((uintptr_t)src->data & 1)) return 0;
    im->in_place[i] = (const uint16_t *)(const void *)src->data;
    im->keep[which] = 1;
    return 1;
}

/* After tensor dst is written: a bf16 one checked for NaN and infinities
 * (params' are checked with the model), and src's file pages given back
 * unless the model reads them where they are. */
static dtx_status finish_tensor(importer *im, const char *dst, const uint16_t *bf, const dtx_st_tensor *src,
                                int in_file) {
    if (!in_file) dtx_drop_pages(src->data, src->nbytes);
    const dtx_tensor_info *t = dtx_model_find(im->m, dst);
    return bf ? dtx_bf16_check_finite(bf, t->numel, im->f->dir, t->name) : DTX_OK;
}

/* The HF tensor name, checked for shape [rows, cols] (cols 0: a vector);
 * *which: the shard it is in. */
static dtx_status hf_tensor(const hf_files *f, const char *name, int64_t rows, int64_t cols,
                            const dtx_st_tensor **out, int *which_out) {
    int which = 0;
    const dtx_st_tensor *t = files_find(f, name, &which);
    if (!t) return dtx_fail(DTX_ERR_FORMAT, "%s: tensor %s is missing", f->dir, name);
    int ok = cols ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols : t->ndim == 1 && t->shape[0] == rows;
    if (!ok || t->dtype > DTX_ST_F16) {
        char want[64];
        if (cols) snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)cols);
        else snprintf(want, sizeof want, "[%lld]", (long long)rows);
        return dtx_fail(DTX_ERR_FORMAT, "%s/%s: tensor %s is not a float tensor of shape %s (config.json's)", f->dir,
                        f->names[which], name, want);
    }
    *out = t;
    if (which_out) *which_out = which;
    return DTX_OK;
}

/* dst (the difftx tensor name) := the HF tensor, whole. */
static dtx_status copy_whole(importer *im, const char *dst, const char *src, int64_t rows, int64_t cols) {
    const dtx_st_tensor *t;
    int which;
    dtx_status st = hf_tensor(im->f, src, rows, cols, &t, &which);
    if (st || !im->m) return st;
    if (bf16_in_file(im, dst, t, which))
        return finish_tensor(im, dst, (const uint16_t *)(const void *)t->data, t, 1);
    uint16_t *bf = bf16_place(im, dst, t);
    if (bf) memcpy(bf, t->data, t->nbytes); /* BF16 kept as it is: no widening */
    else dtx_st_rows_to_real(t, 0, rows, im->m->params + dtx_model_find(im->m, dst)->offset);
    return finish_tensor(im, dst, bf, t, 0);
}

/* The HF head difftx's query (is_q) or key/value sub-head s stands for. */
static int64_t hf_head_of(const importer *im, int is_q, int64_t s) {
    const dtx_config *c = im->c;
    return is_q ? hf_q_head(im->h->diff, c->n_heads, s)
                : hf_kv_head(im->h->diff, c->n_heads, c->n_kv_heads, im->h->kv, s);
}

/* A projection of D-wide heads: difftx sub-head s (of n) := HF head hf_head_of(s), its rows RoPE-permuted. */
static dtx_status copy_heads(importer *im, const char *dst, const char *src, int64_t hf_heads, int64_t n, int rope,
                             int is_q) {
    const hf_config *h = im->h;
    const dtx_st_tensor *t;
    int which;
    dtx_status st = hf_tensor(im->f, src, hf_heads * h->D, h->hidden, &t, &which);
    if (st || !im->m) return st;
    int moved = rope || n != hf_heads;
    for (int64_t s = 0; s < n && !moved; s++) moved = hf_head_of(im, is_q, s) != s;
    if (!moved && bf16_in_file(im, dst, t, which)) /* a Llama's v: used where it lies */
        return finish_tensor(im, dst, (const uint16_t *)(const void *)t->data, t, 1);
    real *out = im->m->params + dtx_model_find(im->m, dst)->offset;
    uint16_t *bf = bf16_place(im, dst, t); /* BF16 kept as it is: rows moved, not widened */
    for (int64_t s = 0; s < n; s++) {
        int64_t hh = hf_head_of(im, is_q, s);
        for (int64_t r = 0; r < h->D; r++) {
            int64_t from = hh * h->D + (rope ? rope_row(r, h->D) : r), to = s * h->D + r;
            if (bf) memcpy(bf + to * h->hidden, t->data + (size_t)from * (size_t)h->hidden * 2, (size_t)h->hidden * 2);
            else dtx_st_rows_to_real(t, from, 1, out + to * h->hidden);
        }
    }
    return finish_tensor(im, dst, bf, t, 0);
}

static dtx_status import_layer(importer *im, int64_t L) {
    const hf_config *h = im->h;
    const dtx_config *c = im->c;
    char s[160], d[160];
#define HF(x) (snprintf(s, sizeof s, "model.layers.%lld.%s", (long long)L, x), s)
#define DT(x) (snprintf(d, sizeof d, "layers.%lld.%s", (long long)L, x), d)
    int64_t nq = (h->diff ? 2 : 1) * c->n_heads, nkv = (h->diff ? 2 : 1) * c->n_kv_heads;
    dtx_status st;
    if ((st = copy_whole(im, DT("attention_norm.weight"), HF("input_layernorm.weight"), h->hidden, 0)) ||
        (st = copy_heads(im, DT("attention.q_proj.weight"), HF("self_attn.q_proj.weight"), h->H, nq, 1, 1)) ||
        (st = copy_heads(im, DT("attention.k_proj.weight"), HF("self_attn.k_proj.weight"), h->kv, nkv, 1, 0)) ||
        (st = copy_heads(im, DT("attention.v_proj.weight"), HF("self_attn.v_proj.weight"), h->kv, nkv, 0, 0)) ||
        (st = copy_whole(im, DT("attention.out_proj.weight"), HF("self_attn.o_proj.weight"), h->hidden, h->H * h->D)) ||
        (st = copy_whole(im, DT("ffn_norm.weight"), HF("post_attention_layernorm.weight"), h->hidden, 0)) ||
        (st = copy_whole(im, DT("feed_forward.w1.weight"), HF("mlp.gate_proj.weight"), h->ffn, h->hidden)) ||
        (st = copy_whole(im, DT("feed_forward.w3.weight"), HF("mlp.up_proj.weight"), h->ffn, h->hidden)) ||
        (st = copy_whole(im, DT("feed_forward.w2.weight"), HF("mlp.down_proj.weight"), h->hidden, h->ffn)))
        return st;
    if (!h->diff) return DTX_OK;
    static const char *const lam[4] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"};
    for (int i = 0; i < 4; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "attention.%s", lam[i]);
        snprintf(b, sizeof b, "self_attn.%s", lam[i]);
        if ((st = copy_whole(im, DT(a), HF(b), h->D, 0))) return st;
    }
    const dtx_tensor_info *sub = im->m ? dtx_model_find(im->m, DT("attention.subln.weight")) : NULL;
    for (size_t i = 0; sub && i < sub->numel; i++) im->m->params[sub->offset + i] = 1; /* HF's norm has no weight */
#undef HF
#undef DT
    return DTX_OK;
}

/* Every tensor of the files is one the import read, or one HF itself ignores. */
static dtx_status check_all_known(const importer *im) {
    const hf_config *h = im->h;
    for (int i = 0; i < im->f->n_files; i++)
        for (int k = 0; k < im->f->files[i].n_tensors; k++) {
            const char *n = im->f->files[i].tensors[k].name;
            long long L = -1;
            char rest[128] = "";
            int known = strcmp(n, "model.embed_tokens.weight") == 0 || strcmp(n, "model.norm.weight") == 0 ||
                        strcmp(n, "lm_head.weight") == 0; /* with tied embeddings HF ignores it too */
            if (!known && sscanf(n, "model.layers.%lld.%127s", &L, rest) == 2 && L >= 0 && L < h->layers) {
                static const char *const names[] = {
                    "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
                    "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                    "self_attn.rotary_emb.inv_freq" /* a buffer older files kept */};
                for (size_t j = 0; j < sizeof names / sizeof *names; j++) known |= strcmp(rest, names[j]) == 0;
                if (h->diff)
                    known |= strcmp(rest, "self_attn.lambda_q1") == 0 || strcmp(rest, "self_attn.lambda_k1") == 0 ||
                             strcmp(rest, "self_attn.lambda_q2") == 0 || strcmp(rest, "self_attn.lambda_k2") == 0;
                char want[160];
                snprintf(want, sizeof want, "model.layers.%lld.%s", L, rest);
                known &= strcmp(want, n) == 0; /* no leading zeros or signs */
            }
            if (!known)
                return dtx_fail(DTX_ERR_FORMAT, "%s/%s: tensor %s is not part of a %s", im->f->dir,
                                im->f->names[i], dtx_show(n).s, h->diff ? "DiffLlamaForCausalLM" : "LlamaForCausalLM");
        }
    return DTX_OK;
}

static dtx_status import_all(importer *im) {
    const hf_config *h = im->h;
    dtx_status st = copy_whole(im, "tok_embeddings.weight", "model.embed_tokens.weight", h->vocab, h->hidden);
    for (int64_t L = 0; L < h->layers && !st; L++) st = import_layer(im, L);
    if (!st) st = copy_whole(im, "norm.weight", "model.norm.weight", h->hidden, 0);
    if (!st && !h->tied) st = copy_whole(im, "output.weight", "lm_head.weight", h->vocab, h->hidden);
    return st;
}

int dtx_is_hf_dir(const char *path) {
    struct stat sb;
    char p[4200];
    if (!path || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
    snprintf(p, sizeof p, "%s/config.json", path);
    return access(p, F_OK) == 0;
}

dtx_status dtx_hf_import(dtx_model **out, const char *dir) {
    *out = NULL;
    if (!dtx_is_hf_dir(dir)) return dtx_fail(DTX_ERR_IO, "%s: not a folder holding config.json", dir);
    hf_config h;
    dtx_status st = parse_config(dir, &h);
    if (st) return st;
    dtx_config c = dtx_config_default();
    c.arch = h.diff ? DTX_ARCH_DIFF : DTX_ARCH_TRANSFORMER;
    c.dim = h.hidden, c.n_layers = h.layers, c.n_heads = h.diff ? h.H / 2 : h.H, c.n_kv_heads = difftx_kv(&h);
    c.vocab_size = h.vocab, c.ffn_dim = h.ffn, c.max_seq_len = h.max_pos;
    c.rope_theta = h.theta, c.norm_eps = h.eps, c.tie_embeddings = h.tied;
    c.subln = h.diff ? DTX_SUBLN_RMS : DTX_SUBLN_NONE;
    c.rope_factor = h.rope_factor, c.rope_low_freq = h.rope_low, c.rope_high_freq = h.rope_high;
    c.rope_orig_max_pos = h.rope_orig;
    c.head_dim = h.D; /* explicit: the model file says so only where it is not hidden / heads */
    if ((st = dtx_config_validate(&c))) {
        char why[512];
        snprintf(why, sizeof why, "%s", dtx_last_error()); /* dtx_fail writes where dtx_last_error points */
        return dtx_fail(st, "%s/config.json: %s", dir, why);
    }
    hf_files f;
    if ((st = files_open(&f, dir))) {
        files_close(&f);
        return st;
    }
    dtx_model *m = NULL;
    importer im = {.f = &f, .h = &h, .c = &c};
    if (!(st = check_all_known(&im)) && !(st = import_all(&im)) && !(st = dtx_model_alloc(&m, &c))) {
        im.m = m;
        for (int i = 0; i < f.n_files; i++) /* every tensor checked: all of the shards is read now */
            if (!f.files[i].file.heap) dtx_prefault(f.files[i].file.data, f.files[i].file.size, 0);
#ifndef DTX_DOUBLE
        size_t n2 = 0;
        for (int i = 0; i < m->n_tensors; i++) n2 += m->tensors[i].ndim == 2 ? m->tensors[i].numel : 0;
        if (!dtx_weights_copy_asked()) { /* malloc'd, not zeroed: pages cost memory once written */
            im.wbf = malloc(n2 * sizeof *im.wbf);
            im.in_place = calloc((size_t)m->n_tensors, sizeof *im.in_place);
            im.keep = calloc((size_t)f.n_files, 1);
            if (!im.wbf || !im.in_place || !im.keep) st = dtx_fail(DTX_ERR_NOMEM, "out of memory for the bf16 weights");
        }
#endif
        if (!st) st = import_all(&im);
#ifndef DTX_DOUBLE
        int any = 0;
        for (int i = 0; im.in_place && i < m->n_tensors; i++) any |= im.in_place[i] != NULL;
        if (!st && any && !(st = dtx_model_use_in_place(m, im.in_place))) { /* m owns the memory from now on */
            dtx_mapped moved = {.data = im.wbf, .size = n2 * sizeof *im.wbf, .heap = 1};
            im.wbf = NULL;
            st = dtx_model_own_weights(m, &moved);
            for (int i = 0; i < f.n_files && !st; i++)
                if (im.keep[i]) st = dtx_model_own_weights(m, &f.files[i].file);
            free(moved.data);
        }
        free(im.wbf);
        free((void *)im.in_place);
        free(im.keep);
#endif
    }
    files_close(&f);
    if (!st) st = dtx_model_check_finite(m, dir);
    if (st) {
        dtx_model_free(m);
        return st;
    }
    *out = m;
    return DTX_OK;
}

/* ---------------------------------------------------------------- export */

static dtx_status export_check(const dtx_model *m) {
    const dtx_config *c = dtx_model_config(m);
    if (dtx_model_wquant(m) != DTX_WQ_NONE)
        return dtx_fail(DTX_ERR_CONFIG, "a quantised model (%s) has no Hugging Face form: export the model it came from",
                        dtx_wquant_name(dtx_model_wquant(m)));
    if (c->arch == DTX_ARCH_DIFF2)
        return dtx_fail(DTX_ERR_CONFIG, "arch diff2 (DIFF V2) has no Hugging Face class: DiffLlama is DIFF V1");
    if (c->arch == DTX_ARCH_DIFF && !dtx_config_has_subln(c))
        return dtx_fail(DTX_ERR_CONFIG, "subln none: DiffLlama always normalises each head's output");
    if (c->arch == DTX_ARCH_DIFF && c->lambda_init_fixed)
        return dtx_fail(DTX_ERR_CONFIG, "lambda_init %g: DiffLlama's lambda_init follows the layer schedule "
                        "0.8 - 0.6 exp(-0.3 l)", c->lambda_init_value);
    if (c->arch == DTX_ARCH_TRANSFORMER && dtx_config_has_subln(c))
        return dtx_fail(DTX_ERR_CONFIG, "subln rms: Llama has no per-head norm");
    return DTX_OK;
}

typedef enum { OUT_WHOLE, OUT_Q, OUT_K, OUT_V, OUT_O } out_kind;

typedef struct {
    char name[96];     /* HF's */
    char src[96];      /* difftx's */
    const dtx_tensor_info *t; /* difftx's tensor: HF's has its shape (the layouts differ in order only) */
    out_kind kind;
} out_tensor;

/* HF's tensors of m, in the order HF writes them. Returns the count (at most cap). */
static int export_plan(const dtx_model *m, out_tensor *o, int cap) {
    const dtx_config *c = dtx_model_config(m);
    const int diff = c->arch == DTX_ARCH_DIFF;
    int n = 0;
#define ADD(hf, dt, kind_)                                                                       \
    do {                                                                                         \
        if (n < cap) {                                                                           \
            o[n] = (out_tensor){.kind = (kind_), .t = dtx_model_find(m, dt)};                    \
            snprintf(o[n].name, sizeof o[n].name, "%s", hf);                                     \
            snprintf(o[n].src, sizeof o[n].src, "%s", dt);                                       \
        }                                                                                        \
        n++;                                                                                     \
    } while (0)
    ADD("model.embed_tokens.weight", "tok_embeddings.weight", OUT_WHOLE);
    for (int64_t L = 0; L < c->n_layers; L++) {
        char a[96], b[96];
        static const struct {
            const char *hf, *dt;
            int diff_only;
            out_kind kind;
        } T[] = {{"input_layernorm.weight", "attention_norm.weight", 0, OUT_WHOLE},
                 {"self_attn.q_proj.weight", "attention.q_proj.weight", 0, OUT_Q},
                 {"self_attn.k_proj.weight", "attention.k_proj.weight", 0, OUT_K},
                 {"self_attn.v_proj.weight", "attention.v_proj.weight", 0, OUT_V},
                 {"self_attn.o_proj.weight", "attention.out_proj.weight", 0, OUT_O},
                 {"self_attn.lambda_q1", "attention.lambda_q1", 1, OUT_WHOLE},
                 {"self_attn.lambda_k1", "attention.lambda_k1", 1, OUT_WHOLE},
                 {"self_attn.lambda_q2", "attention.lambda_q2", 1, OUT_WHOLE},
                 {"self_attn.lambda_k2", "attention.lambda_k2", 1, OUT_WHOLE},
                 {"post_attention_layernorm.weight", "ffn_norm.weight", 0, OUT_WHOLE},
                 {"mlp.gate_proj.weight", "feed_forward.w1.weight", 0, OUT_WHOLE},
                 {"mlp.up_proj.weight", "feed_forward.w3.weight", 0, OUT_WHOLE},
                 {"mlp.down_proj.weight", "feed_forward.w2.weight", 0, OUT_WHOLE}};
        for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
            if (T[i].diff_only && !diff) continue;
            snprintf(a, sizeof a, "model.layers.%lld.%s", (long long)L, T[i].hf);
            snprintf(b, sizeof b, "layers.%lld.%s", (long long)L, T[i].dt);
            ADD(a, b, T[i].kind);
        }
    }
    ADD("model.norm.weight", "norm.weight", OUT_WHOLE);
    if (!c->tie_embeddings) ADD("lm_head.weight", "output.weight", OUT_WHOLE);
#undef ADD
    return n;
}

/* dst := HF's tensor o from m (the inverse of the import's permutations). */
static void export_fill(const dtx_model *m, const out_tensor *o, real *dst) {
    const dtx_config *c = dtx_model_config(m);
    const int diff = c->arch == DTX_ARCH_DIFF;
    const dtx_tensor_info *t = o->t;
    const real *src = m->params + t->offset;
    const int64_t D = m->head_dim, dim = c->dim, sub = diff ? 2 : 1;
    if (o->kind == OUT_WHOLE) {
        memcpy(dst, src, sizeof(real) * t->numel);
        return;
    }
    if (o->kind == OUT_O) { /* DiffLlama's head norm has no weight: difftx's goes into o_proj's columns */
        const real *w = diff ? dtx_model_subln(m, atoll(o->src + strlen("layers."))) : NULL;
        const int64_t K = dtx_config_attn_dim(c);
        for (int64_t r = 0; r < dim; r++)
            for (int64_t k = 0; k < K; k++) dst[r * K + k] = src[r * K + k] * (w ? w[k % (2 * D)] : 1);
        return;
    }
    int64_t n = (o->kind == OUT_Q ? c->n_heads : c->n_kv_heads) * sub;
    for (int64_t s = 0; s < n; s++) {
        int64_t hh = o->kind == OUT_Q ? hf_q_head(diff, c->n_heads, s)
                                      : hf_kv_head(diff, c->n_heads, c->n_kv_heads, sub * c->n_kv_heads, s);
        for (int64_t r = 0; r < D; r++) {
            int64_t hr = o->kind == OUT_V ? r : rope_row(r, D);
            memcpy(dst + (hh * D + hr) * dim, src + (s * D + r) * dim, sizeof(real) * dim);
        }
    }
}

static dtx_status export_config(const dtx_model *m, const char *dir, int bf16) {
    const dtx_config *c = dtx_model_config(m);
    const int diff = c->arch == DTX_ARCH_DIFF;
    int ok = 1;
    cJSON *root = cJSON_CreateObject(), *archs = cJSON_CreateArray();
    if (!root || !archs) ok = 0;
    if (archs) cJSON_AddItemToArray(archs, cJSON_CreateString(diff ? "DiffLlamaForCausalLM" : "LlamaForCausalLM"));
    if (root) {
        jadd(root, "architectures", archs, &ok);
        jstr(root, "model_type", diff ? "diffllama" : "llama", &ok);
        jint(root, "hidden_size", c->dim, &ok);
        jint(root, "intermediate_size", c->ffn_dim, &ok);
        jint(root, "num_hidden_layers", c->n_layers, &ok);
        jint(root, "num_attention_heads", (diff ? 2 : 1) * c->n_heads, &ok);
        jint(root, "num_key_value_heads", (diff ? 2 : 1) * c->n_kv_heads, &ok);
        jint(root, "head_dim", m->head_dim, &ok);
        jint(root, "vocab_size", c->vocab_size, &ok);
        jint(root, "max_position_embeddings", c->max_seq_len, &ok);
        jnum(root, "rms_norm_eps", c->norm_eps, &ok);
        jnum(root, "rope_theta", c->rope_theta, &ok);
        if (c->rope_factor > 0) {
            cJSON *rs = jadd(root, "rope_scaling", cJSON_CreateObject(), &ok);
            if (rs) {
                jstr(rs, "rope_type", "llama3", &ok);
                jnum(rs, "factor", c->rope_factor, &ok);
                jnum(rs, "low_freq_factor", c->rope_low_freq, &ok);
                jnum(rs, "high_freq_factor", c->rope_high_freq, &ok);
                jint(rs, "original_max_position_embeddings", c->rope_orig_max_pos, &ok);
            }
        } else {
            jnull(root, "rope_scaling", &ok);
        }
        jbool(root, "tie_word_embeddings", c->tie_embeddings, &ok);
        jstr(root, "hidden_act", "silu", &ok);
        jbool(root, "attention_bias", 0, &ok);
        jnum(root, "attention_dropout", 0, &ok);
        if (diff) jnum(root, "lambda_std_dev", 0.1, &ok);
        else {
            jbool(root, "mlp_bias", 0, &ok);
            jint(root, "pretraining_tp", 1, &ok);
        }
        jnum(root, "initializer_range", 0.02, &ok);
        jbool(root, "use_cache", 1, &ok);
        jstr(root, "torch_dtype", bf16 ? "bfloat16" : "float32", &ok);
    } else {
        cJSON_Delete(archs);
    }
    char *text = json_text(root, ok, 1);
    if (!text) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    dtx_status st = dtx_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

/* Writes tensors [lo, hi) of the plan to dir/name. */
static dtx_status export_shard(const dtx_model *m, const out_tensor *o, int lo, int hi, const char *dir,
                               const char *name, int bf16) {
    dtx_st_out *outs = calloc((size_t)(hi - lo), sizeof *outs);
    real **bufs = calloc((size_t)(hi - lo), sizeof *bufs);
    dtx_status st = outs && bufs ? DTX_OK : dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int i = lo; i < hi && !st; i++) {
        int64_t numel = (int64_t)o[i].t->numel;
        if (!(bufs[i - lo] = malloc(sizeof(real) * (size_t)numel))) {
            st = dtx_fail(DTX_ERR_NOMEM, "out of memory for tensor %s", o[i].name);
            break;
        }
        export_fill(m, &o[i], bufs[i - lo]);
        outs[i - lo] = (dtx_st_out){.name = o[i].name, .ndim = o[i].t->ndim, .data = bufs[i - lo]};
        outs[i - lo].shape[0] = o[i].t->shape[0], outs[i - lo].shape[1] = o[i].t->shape[1];
    }
    if (!st) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        const char *k[1] = {"format"}, *v[1] = {"pt"};
        st = dtx_st_write(path, outs, hi - lo, k, v, 1, bf16);
    }
    for (int i = 0; bufs && i < hi - lo; i++) free(bufs[i]);
    free(bufs);
    free(outs);
    return st;
}

dtx_status dtx_hf_export(const dtx_model *m, const char *dir, int bf16, int64_t max_shard_bytes) {
    /* weights in place are widened first (the writer reads params) */
    dtx_status st = dtx_model_materialize((dtx_model *)(uintptr_t)m);
    if (!st) st = export_check(m);
    if (st) return st;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return dtx_fail(DTX_ERR_IO, "%s: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return dtx_fail(DTX_ERR_USAGE, "%s: not a folder", dir);
    int n = export_plan(m, NULL, 0);
    out_tensor *o = calloc((size_t)n, sizeof *o);
    int *first = calloc((size_t)n + 1, sizeof *first); /* shard s: tensors first[s] .. first[s + 1] */
    if (!o || !first) {
        free(o), free(first);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    export_plan(m, o, n);
    int shards = 0;
    int64_t bytes = 0, total = 0;
    for (int i = 0; i < n; i++) {
        int64_t b = (int64_t)o[i].t->numel * (bf16 ? 2 : 4);
        if (i == 0 || (max_shard_bytes > 0 && bytes > 0 && bytes + b > max_shard_bytes)) first[shards++] = i, bytes = 0;
        bytes += b, total += b;
    }
    first[shards] = n;
    char path[4400], name[64];
    if (shards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        unlink(path); /* a stale index beside the file would name other shards */
        st = export_shard(m, o, 0, n, dir, "model.safetensors", bf16);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        unlink(path); /* HF reads a single file before an index */
        int ok = 1;
        cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *map = cJSON_CreateObject();
        if (!root || !meta || !map) ok = 0;
        for (int s = 0; s < shards && !st; s++) {
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
            st = export_shard(m, o, first[s], first[s + 1], dir, name, bf16);
            for (int i = first[s]; i < first[s + 1] && map; i++) jstr(map, o[i].name, name, &ok);
        }
        if (meta) jint(meta, "total_size", total, &ok);
        if (root) jadd(root, "metadata", meta, &ok), jadd(root, "weight_map", map, &ok);
        else cJSON_Delete(meta), cJSON_Delete(map);
        char *text = json_text(root, ok, 1);
        if (!st && !text) st = dtx_fail(DTX_ERR_NOMEM, "out of memory");
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (!st) st = dtx_write_file_atomic(path, text, strlen(text));
        free(text);
    }
    if (!st) st = export_config(m, dir, bf16);
    free(o);
    free(first);
    return st;
}
