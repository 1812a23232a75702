/* Model files: a difftx model is one safetensors file with the tensor names
 * and __metadata__ of interop.md. Loading checks the metadata, the config,
 * and that the file holds exactly the tensors the config implies, each with
 * the right shape; every refusal names the key or tensor. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/model.h"

static const char *const known_keys[] = {"format",  "arch",        "dim",        "n_layers",       "n_heads",
                                         "n_kv_heads", "vocab_size", "ffn_dim", "max_seq_len", "rope_theta",
                                         "norm_eps", "tie_embeddings", "subln", "lambda_init"};
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
    else return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'arch' = '%.40s' is not 'diff' or 'transformer'", path, arch);
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

static dtx_status keep_extra_meta(dtx_model *m, const dtx_st_file *f) {
    m->extra_meta_keys = calloc((size_t)f->n_meta + 1, sizeof(char *));
    m->extra_meta_values = calloc((size_t)f->n_meta + 1, sizeof(char *));
    if (!m->extra_meta_keys || !m->extra_meta_values) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < f->n_meta; i++) {
        int known = 0;
        for (int k = 0; k < N_KNOWN; k++) known |= strcmp(f->meta_keys[i], known_keys[k]) == 0;
        if (known) continue;
        char *k = strdup(f->meta_keys[i]), *v = strdup(f->meta_values[i]);
        m->extra_meta_keys[m->n_extra_meta] = k;
        m->extra_meta_values[m->n_extra_meta] = v;
        m->n_extra_meta++;
        if (!k || !v) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    return DTX_OK;
}

static dtx_status load_tensors(dtx_model *m, const dtx_st_file *f, const char *path) {
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        const dtx_st_tensor *s = dtx_st_find(f, t->name);
        if (!s)
            return dtx_fail(DTX_ERR_FORMAT, "%s: missing tensor '%s' (needed by this %s config)", path, t->name,
                            dtx_arch_name(m->cfg.arch));
        int ok = s->ndim == t->ndim;
        for (int k = 0; ok && k < t->ndim; k++) ok = s->shape[k] == t->shape[k];
        if (!ok) {
            char got[96], want[96];
            shape_str(got, sizeof got, s->ndim, s->shape);
            shape_str(want, sizeof want, t->ndim, t->shape);
            return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' has shape %s, the config needs %s", path, t->name, got,
                            want);
        }
        dtx_st_to_real(s, m->params + t->offset);
    }
    for (int i = 0; i < f->n_tensors; i++)
        if (!dtx_model_find(m, f->tensors[i].name))
            return dtx_fail(DTX_ERR_FORMAT, "%s: unexpected tensor '%s' (not part of a %s model with tie_embeddings=%s)",
                            path, f->tensors[i].name, dtx_arch_name(m->cfg.arch),
                            m->cfg.tie_embeddings ? "true" : "false");
    return DTX_OK;
}

dtx_status dtx_model_load(dtx_model **out, const char *path) {
    *out = NULL;
    dtx_st_file f;
    dtx_status st = dtx_st_open(&f, path);
    if (st) return st;
    dtx_config c;
    dtx_model *m = NULL;
    if ((st = config_from_meta(&f, path, &c))) goto done;
    if ((st = dtx_model_alloc(&m, &c))) goto done;
    if ((st = load_tensors(m, &f, path))) goto done;
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
    const char *keys[2] = {"subln", "lambda_init"};
    for (int i = 0; i < 2; i++) {
        const char *v = dtx_st_meta(f, keys[i]);
        if (!v) continue;
        dtx_status st = i == 0 ? dtx_config_set_subln(c, v) : dtx_config_set_lambda_init(c, v);
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
    default: dtx_config_lambda_init_str(c, val, cap); return c->lambda_init_fixed;
    }
    return 1;
}

dtx_status dtx_model_save(const dtx_model *m, const char *path, int bf16) {
    const dtx_config *c = &m->cfg;
    char vals[N_KNOWN][48];
    const char *keys[N_KNOWN + 64], *values[N_KNOWN + 64];
    int n = 0;
    for (int i = 0; i < DTX_CONFIG_META_KEYS; i++)
        if (dtx_config_meta(c, i, &keys[n], vals[n], sizeof vals[n])) values[n] = vals[n], n++;
    for (int i = 0; i < m->n_extra_meta && n < N_KNOWN + 64; i++) {
        keys[n] = m->extra_meta_keys[i];
        values[n] = m->extra_meta_values[i];
        n++;
    }
    dtx_st_out *ts = calloc((size_t)m->n_tensors, sizeof *ts);
    if (!ts) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *t = &m->tensors[i];
        ts[i].name = t->name;
        ts[i].ndim = t->ndim;
        ts[i].shape[0] = t->shape[0];
        ts[i].shape[1] = t->shape[1];
        ts[i].data = m->params + t->offset;
    }
    dtx_status st = dtx_st_write(path, ts, m->n_tensors, keys, values, n, bf16);
    free(ts);
    return st;
}
