/* Model files: a difftx model is one safetensors file with the tensor names
 * and __metadata__ of interop.md. Loading checks the metadata, the config,
 * and that the file holds exactly the tensors the config implies, each with
 * the right shape; every refusal names the key or tensor. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/model.h"

static const char *const known_keys[] = {"format",  "arch",        "dim",        "n_layers",       "n_heads",
                                         "n_kv_heads", "vocab_size", "ffn_dim", "max_seq_len", "rope_theta",
                                         "norm_eps", "tie_embeddings", "subln", "lambda_init", "v2_lambda",
                                         "rope_scaling", "head_dim", "transformer_mix"};
#define N_KNOWN (int)(sizeof known_keys / sizeof known_keys[0])
_Static_assert(N_KNOWN == DTX_CONFIG_META_KEYS, "dtx_config_meta covers every known key");

static dtx_status meta_int(const dtx_st_file *f, const char *path, const char *key, int64_t *out) {
    const char *s = dtx_st_meta(f, key);
    if (!s) return dtx_fail(DTX_ERR_FORMAT, "%s: missing metadata key '%s'", path, key);
    const char *q = s;
    if (*q == '\0') goto bad;
    for (; *q; q++)
        if (*q < '0' || *q > '9') goto bad;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || v < 1) goto bad;
    *out = v;
    return DTX_OK;
bad:
    return dtx_fail(DTX_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not a positive integer", path, key, s);
}

static dtx_status meta_float(const dtx_st_file *f, const char *path, const char *key, double dflt, double *out) {
    const char *s = dtx_st_meta(f, key);
    if (!s) {
        *out = dflt;
        return DTX_OK;
    }
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno)
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not a number", path, key, s);
    *out = v;
    return DTX_OK;
}

static dtx_status config_from_meta(const dtx_st_file *f, const char *path, dtx_config *c) {
    const char *fmt = dtx_st_meta(f, "format");
    if (fmt && strcmp(fmt, "difftx") != 0)
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'format' = '%.40s', expected 'difftx'", path, fmt);
    const char *arch = dtx_st_meta(f, "arch");
    if (!arch) return dtx_fail(DTX_ERR_FORMAT, "%s: missing metadata key 'arch'", path);
    if (strcmp(arch, "diff") == 0) c->arch = DTX_ARCH_DIFF;
    else if (strcmp(arch, "transformer") == 0) c->arch = DTX_ARCH_TRANSFORMER;
    else if (strcmp(arch, "diff2") == 0) c->arch = DTX_ARCH_DIFF2;
    else
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'arch' = '%.40s' is not 'diff', 'transformer' or 'diff2'", path,
                        arch);
    dtx_status st;
    if ((st = meta_int(f, path, "dim", &c->dim)) || (st = meta_int(f, path, "n_layers", &c->n_layers)) ||
        (st = meta_int(f, path, "n_heads", &c->n_heads)) || (st = meta_int(f, path, "n_kv_heads", &c->n_kv_heads)) ||
        (st = meta_int(f, path, "vocab_size", &c->vocab_size)) || (st = meta_int(f, path, "ffn_dim", &c->ffn_dim)) ||
        (st = meta_int(f, path, "max_seq_len", &c->max_seq_len)) ||
        (st = meta_float(f, path, "rope_theta", 10000.0, &c->rope_theta)) ||
        (st = meta_float(f, path, "norm_eps", 1e-5, &c->norm_eps)))
        return st;
    const char *tie = dtx_st_meta(f, "tie_embeddings");
    if (!tie) return dtx_fail(DTX_ERR_FORMAT, "%s: missing metadata key 'tie_embeddings'", path);
    if (strcmp(tie, "true") == 0) c->tie_embeddings = 1;
    else if (strcmp(tie, "false") == 0) c->tie_embeddings = 0;
    else return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'tie_embeddings' = '%.40s' is not 'true' or 'false'", path, tie);
    if ((st = dtx_config_variants_from_meta(f, path, c))) return st;
    if ((st = dtx_config_validate(c))) {
        char why[256]; /* copy: dtx_fail writes the buffer dtx_last_error() reads */
        snprintf(why, sizeof why, "%s", dtx_last_error());
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata: %s", path, why);
    }
    return DTX_OK;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Read by the loader, written by the saver from the model's state: not kept as extra metadata. */
static const char *const quant_keys[] = {"quant_scheme", "quant_act16"};

static dtx_status keep_extra_meta(dtx_model *m, const dtx_st_file *f) {
    m->extra_meta_keys = calloc((size_t)f->n_meta + 1, sizeof(char *));
    m->extra_meta_values = calloc((size_t)f->n_meta + 1, sizeof(char *));
    if (!m->extra_meta_keys || !m->extra_meta_values) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < f->n_meta; i++) {
        int known = 0;
        for (int k = 0; k < N_KNOWN; k++) known |= strcmp(f->meta_keys[i], known_keys[k]) == 0;
        known |= strcmp(f->meta_keys[i], quant_keys[0]) == 0 || strcmp(f->meta_keys[i], quant_keys[1]) == 0;
        if (known) continue;
        char *k = strdup(f->meta_keys[i]), *v = strdup(f->meta_values[i]);
        m->extra_meta_keys[m->n_extra_meta] = k;
        m->extra_meta_values[m->n_extra_meta] = v;
        m->n_extra_meta++;
        if (!k || !v) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    return DTX_OK;
}

/* Tensor name of f, with the shape [d0] or [d0, d1] (d1 = 0: one dim) and dtype the model needs, or a refusal
 * naming what differs. */
static dtx_status find_tensor(const dtx_st_file *f, const char *path, const char *name, const dtx_model *m,
                              int64_t d0, int64_t d1, int want_dtype, const dtx_st_tensor **out) {
    static const char *const dt_names[] = {"F32", "BF16", "F16", "I8", "U8"};
    const dtx_st_tensor *s = dtx_st_find(f, name);
    if (!s)
        return dtx_fail(DTX_ERR_FORMAT, "%s: missing tensor '%s' (needed by this %s%s%s config)", path, name,
                        dtx_arch_name(m->cfg.arch), m->wquant ? ", " : "", m->wquant ? dtx_wquant_name(m->wquant) : "");
    int64_t want[2] = {d0, d1};
    int nd = d1 ? 2 : 1, ok = s->ndim == nd;
    for (int k = 0; ok && k < nd; k++) ok = s->shape[k] == want[k];
    if (!ok) {
        char got[96], need[96];
        shape_str(got, sizeof got, s->ndim, s->shape);
        shape_str(need, sizeof need, nd, want);
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' has shape %s, the config needs %s", path, name, got, need);
    }
    int is_float = s->dtype == DTX_ST_F32 || s->dtype == DTX_ST_BF16 || s->dtype == DTX_ST_F16;
    if (want_dtype < 0 ? !is_float : (int)s->dtype != want_dtype)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' is %s, expected %s", path, name, dt_names[s->dtype],
                        want_dtype < 0 ? "F32, BF16 or F16" : dt_names[want_dtype]);
    *out = s;
    return DTX_OK;
}

/* Whether tensor i of a W8A8 model has an input scale (every 2-D weight but an untied embedding). */
static int has_input_scale(const dtx_model *m, int i) {
    return m->wquant == DTX_WQ_W8A8 && (m->tensors[i].offset != m->tok_emb || m->cfg.tie_embeddings);
}

#ifndef DTX_DOUBLE
/* A scale outside [0, inf) (NaN included), or (positive) also 0. */
static int scale_bad(float v, int positive) { return !(v >= 0 && v <= FLT_MAX && (!positive || v > 0)); }
static inline int scales_bad_in(const float *f, size_t lo, size_t hi, int positive) {
    unsigned bad = 0;
#pragma omp simd reduction(| : bad)
    for (size_t i = lo; i < hi; i++) bad |= (unsigned)scale_bad(f[i], positive);
    return bad != 0;
}
static int scales_bad(const void *v, size_t lo, size_t hi) { return scales_bad_in(v, lo, hi, 0); }
static int scales_zero(const void *v, size_t lo, size_t hi) { return scales_bad_in(v, lo, hi, 1); }

/* s's values, which lie in dst, each finite and at least 0 (strictly above 0 when positive): whole blocks
 * over the threads, then the first bad element of the first bad block. */
static dtx_status check_scales(const dtx_st_tensor *s, const char *path, const float *dst, int positive) {
    enum { BLOCK = 1 << 16 };
    const size_t n = (size_t)s->numel, b = dtx_first_bad_block(dst, n, BLOCK, positive ? scales_zero : scales_bad);
    for (size_t i = b == SIZE_MAX ? n : b * BLOCK; i < n; i++)
        if (scale_bad(dst[i], positive))
            return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' element %lld is %g (a scale must be finite and %s)", path,
                            s->name, (long long)i, (double)dst[i], positive ? "positive" : "at least 0");
    return DTX_OK;
}

/* F32 values of s into dst, checked as check_scales does. */
static dtx_status load_scales(const dtx_st_tensor *s, const char *path, float *dst, int positive) {
    dtx_st_to_real(s, dst);
    return check_scales(s, path, dst, positive);
}

/* Tensor i's codes and scales: copied into the model's memory, or with
 * in_place pointed at where they lie in f's mapping (which m then keeps). */
static dtx_status load_quantised(dtx_model *m, const dtx_st_file *f, const char *path, int i, int in_place) {
    const dtx_tensor_info *t = &m->tensors[i];
    dtx_qweight *w = &m->qw[i];
    char name[sizeof t->name + 16];
    const dtx_st_tensor *s = NULL;
    dtx_status st;
    const dtx_qformat *qf = dtx_qformat_of(w->bits);
    int64_t rb = qf->row_bytes(w->K), ns = qf->scales_2d ? qf->row_scales(w->K) : 0;
    if ((st = find_tensor(f, path, t->name, m, w->N, rb, qf->signed_codes ? DTX_ST_I8 : DTX_ST_U8, &s))) return st;
    if (in_place) w->q = (void *)(uintptr_t)s->data;
    else memcpy(w->q, s->data, s->nbytes);
    int64_t bad = qf->bad_code ? qf->bad_code(s->data, s->nbytes) : -1;
    if (!in_place && !f->file.heap) dtx_drop_pages(s->data, s->nbytes); /* copied: the file's pages are not held too */
    if (bad >= 0)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' byte %lld %s", path, t->name, (long long)bad,
                        qf->bad_code_words);
    snprintf(name, sizeof name, "%s.scale", t->name);
    if ((st = find_tensor(f, path, name, m, w->N, ns, DTX_ST_F32, &s))) return st;
    if (in_place) w->scale = (float *)(uintptr_t)s->data; /* 4-byte aligned: quant_in_place_possible */
    if ((st = in_place ? check_scales(s, path, w->scale, 0) : load_scales(s, path, w->scale, 0))) return st;
    if (!in_place && !f->file.heap) dtx_drop_pages(s->data, s->nbytes);
    if (has_input_scale(m, i)) {
        snprintf(name, sizeof name, "%s.input_scale", t->name);
        if ((st = find_tensor(f, path, name, m, 1, 0, DTX_ST_F32, &s)) || (st = load_scales(s, path, &w->in_scale, 0)))
            return st;
    }
    return DTX_OK;
}
#endif

/* Whether a tensor of the file belongs to m: a table tensor or, for a quantised model, a weight's scale,
 * input scale or a layer's qk_scale. */
static int expected_tensor(const dtx_model *m, const char *name) {
    if (dtx_model_find(m, name)) return 1;
    if (!m->wquant) return 0;
    for (int i = 0; i < m->n_tensors; i++) {
        size_t n = strlen(m->tensors[i].name);
        if (m->tensors[i].ndim != 2 || strncmp(name, m->tensors[i].name, n) != 0) continue;
        if (strcmp(name + n, ".scale") == 0 || (has_input_scale(m, i) && strcmp(name + n, ".input_scale") == 0))
            return 1;
    }
    long long l;
    int used = 0;
    return m->wquant == DTX_WQ_W8A8 && sscanf(name, "layers.%lld.attention.qk_scale%n", &l, &used) == 1 &&
           name[used] == '\0' && l >= 0 && l < m->cfg.n_layers;
}

dtx_status dtx_model_set_meta(dtx_model *m, const char *key, const char *value) {
    if (!key || !*key || !value) return dtx_fail(DTX_ERR_ARG, "metadata needs a key and a value");
    for (int k = 0; k < N_KNOWN; k++)
        if (!strcmp(key, known_keys[k]))
            return dtx_fail(DTX_ERR_ARG, "metadata '%s' is the model's own (set it through its config)", key);
    if (!strcmp(key, quant_keys[0]) || !strcmp(key, quant_keys[1]))
        return dtx_fail(DTX_ERR_ARG, "metadata '%s' is the model's own (set by quantising it)", key);
    char *v = strdup(value);
    if (!v) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_extra_meta; i++)
        if (!strcmp(m->extra_meta_keys[i], key)) {
            free(m->extra_meta_values[i]);
            m->extra_meta_values[i] = v;
            return DTX_OK;
        }
    char **nk = realloc(m->extra_meta_keys, sizeof *nk * (size_t)(m->n_extra_meta + 2));
    if (nk) m->extra_meta_keys = nk;
    char **nv = nk ? realloc(m->extra_meta_values, sizeof *nv * (size_t)(m->n_extra_meta + 2)) : NULL;
    if (nv) m->extra_meta_values = nv;
    char *k = nv ? strdup(key) : NULL;
    if (!k) {
        free(v);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    m->extra_meta_keys[m->n_extra_meta] = k;
    m->extra_meta_values[m->n_extra_meta] = v;
    m->n_extra_meta++;
    return DTX_OK;
}

const char *dtx_model_meta(const dtx_model *m, const char *key) {
    for (int i = 0; key && i < m->n_extra_meta; i++)
        if (!strcmp(m->extra_meta_keys[i], key)) return m->extra_meta_values[i];
    return NULL;
}

/* A model with a NaN or an infinity in its weights (a diverged run saved
 * anyway, a damaged file) would run and print nonsense: refused at load,
 * naming the tensor and the element. */
static dtx_status check_finite(const char *path, const dtx_tensor_info *t, const real *v) {
    for (size_t k = 0; k < t->numel; k++)
        if (!isfinite(v[k]))
            return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' holds %s at element %zu: not a usable model (a "
                            "diverged run's weights?)", path, t->name, isnan(v[k]) ? "NaN" : "an infinity", k);
    return DTX_OK;
}

dtx_status dtx_model_check_finite(const dtx_model *m, const char *path) {
    dtx_status st = DTX_OK;
    for (int i = 0; i < m->n_tensors && !st; i++) /* (a weight held elsewhere was checked where it was read) */
        if (!(m->qw && m->qw[i].bits)) st = check_finite(path, &m->tensors[i], m->params + m->tensors[i].offset);
    return st;
}

#ifndef DTX_DOUBLE
/* Whether every 2-D weight of the file is BF16 at an even address: a
 * model it can read in place (unless fp32 copies are asked for). */
static int in_place_possible(const dtx_model *m, const dtx_st_file *f) {
    if (dtx_weights_copy_asked()) return 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_st_tensor *s = m->tensors[i].ndim == 2 ? dtx_st_find(f, m->tensors[i].name) : NULL;
        if (m->tensors[i].ndim == 2 && (!s || s->dtype != DTX_ST_BF16 || ((uintptr_t)s->data & 1))) return 0;
    }
    return 1;
}

/* Whether a quantised file's codes and scales can be read where they lie:
 * the file mapped (not read into memory), every 2-D weight's scales F32 at a
 * 4-byte aligned address (codes are bytes: any address), fp32 copies not
 * asked for. A tensor missing or of the wrong type: the copying reader
 * names it. */
static int quant_in_place_possible(const dtx_model *m, dtx_wquant wq, const dtx_st_file *f) {
    if (wq == DTX_WQ_NONE || f->file.heap || dtx_weights_copy_asked()) return 0;
    for (int i = 0; i < m->n_tensors; i++) {
        char name[sizeof m->tensors[i].name + 16];
        snprintf(name, sizeof name, "%s.scale", m->tensors[i].name);
        const dtx_st_tensor *s = m->tensors[i].ndim == 2 ? dtx_st_find(f, name) : NULL;
        if (m->tensors[i].ndim == 2 && (!s || s->dtype != DTX_ST_F32 || ((uintptr_t)s->data & 3))) return 0;
    }
    return 1;
}

/* The 2-D weights where they lie in f's mapping, which moves into m. */
static dtx_status load_in_place(dtx_model *m, dtx_st_file *f, const char *path) {
    const uint16_t **data = calloc((size_t)m->n_tensors, sizeof *data);
    if (!data) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    dtx_status st = DTX_OK;
    for (int i = 0; i < m->n_tensors && !st; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        const dtx_st_tensor *s = NULL;
        if (t->ndim != 2) continue;
        if ((st = find_tensor(f, path, t->name, m, t->shape[0], t->shape[1], DTX_ST_BF16, &s))) break;
        data[i] = (const uint16_t *)(const void *)s->data;
        st = dtx_bf16_check_finite(data[i], t->numel, path, t->name);
    }
    if (!st) st = dtx_model_use_in_place(m, data);
    free(data);
    return st ? st : dtx_model_own_weights(m, &f->file); /* the weights' memory now belongs to m */
}
#endif

/* Every tensor of f into m (a quantised weight's codes and scales left in
 * f's mapping with quant_in_place). */
static dtx_status load_tensors(dtx_model *m, const dtx_st_file *f, const char *path, int quant_in_place) {
    dtx_status st;
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        const dtx_st_tensor *s = NULL;
#ifndef DTX_DOUBLE
        if (m->in_place && m->qw[i].bits == 16) continue;
        if (m->qw && m->qw[i].bits) {
            if ((st = load_quantised(m, f, path, i, quant_in_place))) return st;
            continue;
        }
#endif
        if ((st = find_tensor(f, path, t->name, m, t->shape[0], t->ndim == 2 ? t->shape[1] : 0, -1, &s))) return st;
        dtx_st_to_real(s, m->params + t->offset);
        if (!f->file.heap) dtx_drop_pages(s->data, s->nbytes); /* copied: its file pages are not held too */
        if ((st = check_finite(path, t, m->params + t->offset))) return st;
    }
#ifndef DTX_DOUBLE
    for (int64_t l = 0; m->wquant == DTX_WQ_W8A8 && l < m->cfg.n_layers; l++) {
        char name[64];
        const dtx_st_tensor *s = NULL;
        snprintf(name, sizeof name, "layers.%lld.attention.qk_scale", (long long)l);
        if ((st = find_tensor(f, path, name, m, 2, 0, DTX_ST_F32, &s)) || (st = load_scales(s, path, m->qk_scale + 2 * l, 0)))
            return st;
    }
#endif
    for (int i = 0; i < f->n_tensors; i++)
        if (!expected_tensor(m, f->tensors[i].name))
            return dtx_fail(DTX_ERR_FORMAT, "%s: unexpected tensor '%s' (not part of a %s model with tie_embeddings=%s%s%s)",
                            path, f->tensors[i].name, dtx_arch_name(m->cfg.arch),
                            m->cfg.tie_embeddings ? "true" : "false", m->wquant ? ", " : "",
                            m->wquant ? dtx_wquant_name(m->wquant) : "");
    return DTX_OK;
}

/* The file's quant_scheme (absent: not quantised) and quant_act16 (absent: bf16); refusals name the key. */
static dtx_status quant_from_meta(const dtx_st_file *f, const char *path, dtx_wquant *out, int *fp16) {
    *out = DTX_WQ_NONE;
    *fp16 = 0;
    const char *v = dtx_st_meta(f, "quant_scheme"), *a = dtx_st_meta(f, "quant_act16");
    if (a && strcmp(a, "bf16") && strcmp(a, "fp16"))
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'quant_act16' = '%.40s' is not bf16 or fp16", path, a);
    *fp16 = a && !strcmp(a, "fp16");
    if (*fp16 && (!v || !strcmp(v, "w8a8")))
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'quant_act16' = 'fp16' needs quant_scheme w8a16 or w4a16%s%s%s",
                        path, v ? " (it is '" : "", v ? v : "", v ? "')" : "");
    if (!v) return DTX_OK;
    if (!dtx_wquant_parse(v, out))
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'quant_scheme' = '%.40s' is not w8a16, w8a8 or w4a16", path, v);
#ifdef DTX_DOUBLE
    return dtx_fail(DTX_ERR_FORMAT, "%s: a quantised model (%s) needs the float build", path, v);
#else
    return DTX_OK;
#endif
}

dtx_status dtx_model_load(dtx_model **out, const char *path) {
    *out = NULL;
    dtx_st_file f;
    dtx_status st = dtx_st_open(&f, path);
    if (st) return st;
    dtx_config c;
    dtx_model *m = NULL;
    dtx_wquant wq;
    int fp16;
    if ((st = config_from_meta(&f, path, &c))) goto done;
    if ((st = quant_from_meta(&f, path, &wq, &fp16))) goto done;
    if ((st = dtx_model_alloc(&m, &c))) goto done;
#ifndef DTX_DOUBLE
    /* a quantised file's codes and scales, like a BF16 file's weights, are read where they lie */
    int quant_in_place = quant_in_place_possible(m, wq, &f);
#else
    int quant_in_place = 0;
#endif
    if (wq != DTX_WQ_NONE && (st = dtx_model_alloc_quant(m, wq, quant_in_place))) goto done;
    if (!f.file.heap) dtx_prefault(f.file.data, f.file.size, 0); /* the header is sound: all of it is read now */
    if (m->qmem) dtx_prefault(m->qmem, m->qmem_bytes, 1);         /* and the codes' memory written whole */
    m->act_fp16 = fp16; /* (the quantised weights' params are fresh lazily zeroed pages: nothing to release) */
#ifndef DTX_DOUBLE
    /* a BF16 file's weights are used where they lie: no fp32 copy */
    if (wq == DTX_WQ_NONE && in_place_possible(m, &f) && (st = load_in_place(m, &f, path))) goto done;
#endif
    /* an fp32 copy writes every parameter: in 2 MiB pages (a decode step streams them: weights_memory.c) */
    if (wq == DTX_WQ_NONE && !m->in_place) dtx_advise_huge(m->params, m->n_params * sizeof(real));
    if ((st = load_tensors(m, &f, path, quant_in_place))) goto done;
    if (quant_in_place && (st = dtx_model_own_weights(m, &f.file))) goto done; /* m keeps the codes' mapping */
    if ((st = keep_extra_meta(m, &f))) goto done;
done:
    dtx_st_close(&f);
    if (st) dtx_model_free(m);
    else *out = m;
    return st;
}

/* interop.md "Variants": absent keys are the defaults; a value difftx does
 * not implement is refused, naming the key (read as the default, the file
 * would compute something else silently). */
dtx_status dtx_config_variants_from_meta(const dtx_st_file *f, const char *path, dtx_config *c) {
    c->subln = DTX_SUBLN_DEFAULT;
    c->lambda_init_fixed = 0, c->lambda_init_value = 0;
    c->v2_lambda = DTX_V2_LAMBDA_SIGMOID;
    c->rope_factor = c->rope_low_freq = c->rope_high_freq = 0, c->rope_orig_max_pos = 0;
    c->head_dim = 0;
    c->transformer_mix = 0;
    const char *tm = dtx_st_meta(f, "transformer_mix");
    if (tm) {
        char *end;
        double v = strtod(tm, &end);
        if (end == tm || *end || !(v >= 0 && v <= 1))
            return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'transformer_mix' = '%s' is not a number in [0, 1]", path,
                            dtx_show(tm).s);
        c->transformer_mix = v;
    }
    const char *hd = dtx_st_meta(f, "head_dim");
    if (hd) {
        char *end;
        errno = 0;
        long long v = strtoll(hd, &end, 10);
        if (end == hd || *end || errno || v < 2 || v > 65536)
            return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'head_dim' = '%s' is not an integer in [2, 65536]", path,
                            dtx_show(hd).s);
        c->head_dim = v == dtx_config_default_head_dim(c) ? 0 : v; /* the arch's own: the default */
    }
    const char *keys[4] = {"subln", "lambda_init", "v2_lambda", "rope_scaling"};
    for (int i = 0; i < 4; i++) {
        const char *v = dtx_st_meta(f, keys[i]);
        if (!v) continue;
        dtx_status st = i == 0   ? dtx_config_set_subln(c, v)
                        : i == 1 ? dtx_config_set_lambda_init(c, v)
                        : i == 2 ? dtx_config_set_v2_lambda(c, v)
                                 : dtx_config_set_rope_scaling(c, v);
        if (st) {
            char why[256];
            snprintf(why, sizeof why, "%s", dtx_last_error());
            return dtx_fail(DTX_ERR_FORMAT, "%s: metadata '%s': %s", path, keys[i], why);
        }
    }
    return DTX_OK;
}

int dtx_config_meta(const dtx_config *c, int i, const char **key, char *val, size_t cap) {
    *key = known_keys[i];
    switch (i) {
    case 0: snprintf(val, cap, "difftx"); break;
    case 1: snprintf(val, cap, "%s", dtx_arch_name(c->arch)); break;
    case 2: snprintf(val, cap, "%" PRId64, c->dim); break;
    case 3: snprintf(val, cap, "%" PRId64, c->n_layers); break;
    case 4: snprintf(val, cap, "%" PRId64, c->n_heads); break;
    case 5: snprintf(val, cap, "%" PRId64, c->n_kv_heads); break;
    case 6: snprintf(val, cap, "%" PRId64, c->vocab_size); break;
    case 7: snprintf(val, cap, "%" PRId64, c->ffn_dim); break;
    case 8: snprintf(val, cap, "%" PRId64, c->max_seq_len); break;
    case 9: snprintf(val, cap, "%.17g", c->rope_theta); break;
    case 10: snprintf(val, cap, "%.17g", c->norm_eps); break;
    case 11: snprintf(val, cap, "%s", c->tie_embeddings ? "true" : "false"); break;
    /* the variant keys are written only when not the default, so that a
     * default model's file is what it was before they existed */
    case 12: snprintf(val, cap, "%s", dtx_config_subln_name(c)); return dtx_config_has_subln(c) != (c->arch == DTX_ARCH_DIFF);
    case 13: dtx_config_lambda_init_str(c, val, cap); return c->lambda_init_fixed;
    case 14: snprintf(val, cap, "%s", dtx_config_v2_lambda_name(c)); return c->v2_lambda != DTX_V2_LAMBDA_SIGMOID;
    case 15: dtx_config_rope_scaling_str(c, val, cap); return c->rope_factor > 0;
    case 16: /* written where it is not the arch's own dim / heads */
        snprintf(val, cap, "%" PRId64, dtx_config_head_dim(c));
        return c->head_dim != 0 && c->head_dim != dtx_config_default_head_dim(c);
    default: dtx_format_real(c->transformer_mix, val, cap); return c->transformer_mix > 0;
    }
    return 1;
}

dtx_status dtx_model_save(const dtx_model *m, const char *path, int bf16) {
    /* weights in place are widened first: the writer reads params (logically
     * const: the same values, held another way) */
    dtx_status mst = dtx_model_materialize((dtx_model *)(uintptr_t)m);
    if (mst) return mst;
    const dtx_config *c = &m->cfg;
    char vals[N_KNOWN][96];
    const char *keys[N_KNOWN + 66], *values[N_KNOWN + 66]; /* + quant_scheme, quant_act16 */
    int n = 0;
    for (int i = 0; i < DTX_CONFIG_META_KEYS; i++)
        if (dtx_config_meta(c, i, &keys[n], vals[n], sizeof vals[n])) values[n] = vals[n], n++;
    for (int i = 0; i < m->n_extra_meta && n < N_KNOWN + 64; i++) {
        keys[n] = m->extra_meta_keys[i];
        values[n] = m->extra_meta_values[i];
        n++;
    }
    if (m->wquant) keys[n] = quant_keys[0], values[n] = dtx_wquant_name(m->wquant), n++;
    if (dtx_model_act_fp16(m)) keys[n] = quant_keys[1], values[n] = "fp16", n++;
    /* a quantised weight is three tensors (the codes, their scales, W8A8's input scale), plus qk_scale per layer */
    int cap = 3 * m->n_tensors + (int)m->cfg.n_layers, nt = 0;
    dtx_st_out *ts = calloc((size_t)cap, sizeof *ts);
    char (*names)[sizeof m->tensors[0].name + 16] = calloc((size_t)cap, sizeof *names);
    if (!ts || !names) {
        free(ts), free(names);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        const dtx_qweight *w = m->qw && m->qw[i].bits ? &m->qw[i] : NULL;
        dtx_st_out *o = &ts[nt++];
        o->name = t->name;
        o->ndim = t->ndim;
        o->shape[0] = t->shape[0];
        o->shape[1] = t->shape[1];
        o->data = m->params + t->offset;
        if (!w) continue;
        const dtx_qformat *qf = dtx_qformat_of(w->bits);
        o->shape[1] = qf->row_bytes(w->K), o->raw = w->q, o->raw_dtype = qf->signed_codes ? DTX_ST_I8 : DTX_ST_U8;
        o = &ts[nt];
        snprintf(names[nt++], sizeof names[0], "%s.scale", t->name);
        o->name = names[nt - 1], o->raw = w->scale, o->raw_dtype = DTX_ST_F32;
        o->ndim = qf->scales_2d ? 2 : 1, o->shape[0] = w->N, o->shape[1] = qf->scales_2d ? qf->row_scales(w->K) : 0;
        if (m->wquant == DTX_WQ_W8A8 && (t->offset != m->tok_emb || m->cfg.tie_embeddings)) {
            o = &ts[nt];
            snprintf(names[nt++], sizeof names[0], "%s.input_scale", t->name);
            o->name = names[nt - 1], o->raw = &w->in_scale, o->raw_dtype = DTX_ST_F32, o->ndim = 1, o->shape[0] = 1;
        }
    }
    for (int64_t l = 0; m->wquant == DTX_WQ_W8A8 && l < m->cfg.n_layers; l++) {
        dtx_st_out *o = &ts[nt];
        snprintf(names[nt++], sizeof names[0], "layers.%lld.attention.qk_scale", (long long)l);
        o->name = names[nt - 1], o->raw = m->qk_scale + 2 * l, o->raw_dtype = DTX_ST_F32, o->ndim = 1, o->shape[0] = 2;
    }
    dtx_status st = dtx_st_write(path, ts, nt, keys, values, n, bf16);
    free(ts);
    free(names);
    return st;
}
