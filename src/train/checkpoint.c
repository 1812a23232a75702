/* Training checkpoints: the model, the AdamW state and the batch sampler's
 * state in one safetensors file (format in checkpoint.h and
 * docs/training.md). Loading trusts nothing: every key is parsed strictly,
 * the configs are validated, and the file must hold exactly the tensors the
 * config implies, F32, with the config's shapes. */
#include "train/checkpoint.h"
#include "train/optim.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/model.h"

static const char *const SCHEDULES[] = {"cosine", "linear", "constant"};
#define MODEL_META_PREFIX "model_meta."
#define NAME_MAX_LEN 96 /* "optim.m." + a 64-byte tensor name */

int dtx_ckpt_describe(const dtx_config *c, const dtx_optim_config *o, const char **keys,
                      char (*vals)[DTX_CKPT_VALUE_MAX]) {
    int n = 0;
#define D(key, ...)                                                \
    do {                                                           \
        keys[n] = (key);                                           \
        snprintf(vals[n], DTX_CKPT_VALUE_MAX, __VA_ARGS__);        \
        n++;                                                       \
    } while (0)
    /* the model file's keys, formatted as src/io/model_io.c writes them */
    for (int i = 0; i < DTX_CONFIG_META_KEYS; i++, n++) (void)dtx_config_meta(c, i, &keys[n], vals[n], DTX_CKPT_VALUE_MAX);
    /* the optimizer */
    D("lr", "%.17g", o->lr);
    D("min_lr", "%.17g", o->min_lr);
    D("warmup_steps", "%" PRId64, o->warmup_steps);
    D("total_steps", "%" PRId64, o->total_steps);
    D("schedule", "%s", (unsigned)o->schedule < 3 ? SCHEDULES[o->schedule] : "?");
    D("beta1", "%.17g", o->beta1);
    D("beta2", "%.17g", o->beta2);
    D("eps", "%.17g", o->eps);
    D("weight_decay", "%.17g", o->weight_decay);
    D("decay_embeddings", "%s", o->decay_embeddings ? "true" : "false");
    D("clip_norm", "%.17g", o->clip_norm);
#undef D
    assert(n == DTX_CKPT_N_DESCRIBE);
    return n;
}

/* ------------------------------------------------------------------ save */

dtx_status dtx_ckpt_save(const char *path, const dtx_model *m, const dtx_optimizer *opt, const dtx_rng *rng,
                         const char *const *extra_keys, const char *const *extra_values, int n_extra) {
    dtx_optimizer *o = (dtx_optimizer *)opt; /* read only: the accessors are not const */
    size_t lo, hi = dtx_optimizer_shard(opt, &lo);
    if (lo != 0 || hi != m->n_params)
        return dtx_fail(DTX_ERR_ARG, "%s: a checkpoint holds the whole optimizer, not a shard [%zu, %zu)", path, lo, hi);
    const char *dkeys[DTX_CKPT_N_DESCRIBE];
    char dvals[DTX_CKPT_N_DESCRIBE][DTX_CKPT_VALUE_MAX];
    int nd = dtx_ckpt_describe(&m->cfg, dtx_optimizer_config(opt), dkeys, dvals);
    char version[16], step[32], rngs[80];
    snprintf(version, sizeof version, "%d", DTX_CKPT_VERSION);
    snprintf(step, sizeof step, "%" PRId64, dtx_optimizer_steps_done(opt));
    snprintf(rngs, sizeof rngs, "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64, rng->s[0], rng->s[1],
             rng->s[2], rng->s[3]);

    const dtx_optim_config *oc = dtx_optimizer_config(opt);
    char rstep[32], rlr[40]; /* an extended schedule's restart (absent: none; not compared on resume) */
    snprintf(rstep, sizeof rstep, "%" PRId64, oc->restart_step);
    snprintf(rlr, sizeof rlr, "%.17g", oc->restart_lr);
    int restart = oc->restart_step > 0;
    int n_meta = nd + 3 + 2 * restart + m->n_extra_meta + n_extra, nt = 3 * m->n_tensors;
    const char **keys = calloc((size_t)n_meta, sizeof *keys), **values = calloc((size_t)n_meta, sizeof *values);
    char **owned = calloc((size_t)m->n_extra_meta + 1, sizeof *owned);
    dtx_st_out *ts = calloc((size_t)nt, sizeof *ts);
    char (*names)[NAME_MAX_LEN] = calloc((size_t)nt, sizeof *names);
    dtx_status st = DTX_OK;
    if (!keys || !values || !owned || !ts || !names) {
        st = dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    int k = 0;
    for (int i = 0; i < nd; i++) {
        /* rope_scaling, head_dim, transformer_mix, newer than the format: written where a model file writes them (not
         * at their default, which dtx_ckpt_meta gives back), so a default model's checkpoint is as before */
        char unused[DTX_CKPT_VALUE_MAX];
        const char *key;
        if (i < DTX_CONFIG_META_KEYS &&
            (!strcmp(dkeys[i], "rope_scaling") || !strcmp(dkeys[i], "head_dim") || !strcmp(dkeys[i], "transformer_mix")) &&
            !dtx_config_meta(&m->cfg, i, &key, unused, sizeof unused))
            continue;
        keys[k] = dkeys[i], values[k++] = dvals[i];
    }
    keys[k] = "checkpoint_version", values[k++] = version;
    keys[k] = "step", values[k++] = step;
    keys[k] = "rng", values[k++] = rngs;
    if (restart) {
        keys[k] = "restart_step", values[k++] = rstep;
        keys[k] = "restart_lr", values[k++] = rlr;
    }
    for (int i = 0; i < m->n_extra_meta; i++, k++) {
        size_t len = strlen(MODEL_META_PREFIX) + strlen(m->extra_meta_keys[i]) + 1;
        owned[i] = malloc(len);
        if (!owned[i]) {
            st = dtx_fail(DTX_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        snprintf(owned[i], len, "%s%s", MODEL_META_PREFIX, m->extra_meta_keys[i]);
        keys[k] = owned[i];
        values[k] = m->extra_meta_values[i];
    }
    for (int i = 0; i < n_extra; i++, k++) {
        for (int j = 0; j < k; j++)
            if (strcmp(keys[j], extra_keys[i]) == 0) {
                st = dtx_fail(DTX_ERR_ARG, "%s: metadata key '%s' is given twice", path, extra_keys[i]);
                goto done;
            }
        keys[k] = extra_keys[i];
        values[k] = extra_values[i];
    }
    const real *moments[3] = {m->params, dtx_optimizer_moment1(o), dtx_optimizer_moment2(o)};
    static const char *const prefix[3] = {"", "optim.m.", "optim.v."};
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < m->n_tensors; i++) {
            const dtx_tensor_info *t = &m->tensors[i];
            dtx_st_out *s = &ts[w * m->n_tensors + i];
            char *name = names[w * m->n_tensors + i];
            snprintf(name, NAME_MAX_LEN, "%s%s", prefix[w], t->name);
            s->name = name;
            s->ndim = t->ndim;
            s->shape[0] = t->shape[0];
            s->shape[1] = t->shape[1];
            s->data = moments[w] + t->offset;
        }
    st = dtx_st_write(path, ts, nt, keys, values, k, 0);
done:
    if (owned)
        for (int i = 0; i < m->n_extra_meta; i++) free(owned[i]);
    free(owned);
    free(keys);
    free(values);
    free(ts);
    free(names);
    return st;
}

/* ------------------------------------------------------------------ load */

static const char *need(const dtx_st_file *f, const char *path, const char *key, dtx_status *st) {
    const char *s = dtx_st_meta(f, key);
    if (!s) *st = dtx_fail(DTX_ERR_FORMAT, "%s: missing metadata key '%s'", path, key);
    return s;
}

/* A decimal integer in [lo, hi], nothing else. */
static dtx_status meta_i64(const dtx_st_file *f, const char *path, const char *key, int64_t lo, int64_t hi,
                           int64_t *out) {
    dtx_status st = DTX_OK;
    const char *s = need(f, path, key, &st);
    if (!s) return st;
    const char *q = s;
    if (*q == '-') q++;
    if (*q == '\0') goto bad;
    for (; *q; q++)
        if (*q < '0' || *q > '9') goto bad;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno || v < lo || v > hi) goto bad;
    *out = v;
    return DTX_OK;
bad:
    return dtx_fail(DTX_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not an integer in [%" PRId64 ", %" PRId64 "]",
                    path, key, s, lo, hi);
}

static dtx_status meta_f64(const dtx_st_file *f, const char *path, const char *key, double *out) {
    dtx_status st = DTX_OK;
    const char *s = need(f, path, key, &st);
    if (!s) return st;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno || s[0] == ' ')
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not a number", path, key, s);
    *out = v;
    return DTX_OK;
}

/* One of n choices: *out gets its index. */
static dtx_status meta_choice(const dtx_st_file *f, const char *path, const char *key, const char *const *choices,
                              int n, int *out) {
    dtx_status st = DTX_OK;
    const char *s = need(f, path, key, &st);
    if (!s) return st;
    for (int i = 0; i < n; i++)
        if (strcmp(s, choices[i]) == 0) {
            *out = i;
            return DTX_OK;
        }
    char list[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", i ? (i + 1 == n ? " or " : ", ") : "",
                 choices[i]);
    return dtx_fail(DTX_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not %s", path, key, s, list);
}

static dtx_status parse_configs(const dtx_st_file *f, const char *path, dtx_config *c, dtx_optim_config *o) {
    static const char *const arch[] = {"diff", "transformer", "diff2"}, *const boolean[] = {"false", "true"};
    const int64_t BIG = INT64_MAX;
    dtx_status st;
    const char *fmt = dtx_st_meta(f, "format");
    if (fmt && strcmp(fmt, "difftx") != 0)
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'format' = '%.40s', expected 'difftx'", path, fmt);
    int a = 0, tie = 0, sched = 0, decay = 0;
    if ((st = meta_choice(f, path, "arch", arch, 3, &a)) || (st = meta_i64(f, path, "dim", 1, BIG, &c->dim)) ||
        (st = meta_i64(f, path, "n_layers", 1, BIG, &c->n_layers)) ||
        (st = meta_i64(f, path, "n_heads", 1, BIG, &c->n_heads)) ||
        (st = meta_i64(f, path, "n_kv_heads", 1, BIG, &c->n_kv_heads)) ||
        (st = meta_i64(f, path, "vocab_size", 1, BIG, &c->vocab_size)) ||
        (st = meta_i64(f, path, "ffn_dim", 1, BIG, &c->ffn_dim)) ||
        (st = meta_i64(f, path, "max_seq_len", 1, BIG, &c->max_seq_len)) ||
        (st = meta_f64(f, path, "rope_theta", &c->rope_theta)) || (st = meta_f64(f, path, "norm_eps", &c->norm_eps)) ||
        (st = meta_choice(f, path, "tie_embeddings", boolean, 2, &tie)) || (st = meta_f64(f, path, "lr", &o->lr)) ||
        (st = meta_f64(f, path, "min_lr", &o->min_lr)) ||
        (st = meta_i64(f, path, "warmup_steps", 0, BIG, &o->warmup_steps)) ||
        (st = meta_i64(f, path, "total_steps", 1, BIG, &o->total_steps)) ||
        (st = meta_choice(f, path, "schedule", SCHEDULES, 3, &sched)) ||
        (st = meta_f64(f, path, "beta1", &o->beta1)) || (st = meta_f64(f, path, "beta2", &o->beta2)) ||
        (st = meta_f64(f, path, "eps", &o->eps)) || (st = meta_f64(f, path, "weight_decay", &o->weight_decay)) ||
        (st = meta_choice(f, path, "decay_embeddings", boolean, 2, &decay)) ||
        (st = meta_f64(f, path, "clip_norm", &o->clip_norm)))
        return st;
    o->restart_step = 0, o->restart_lr = 0; /* absent: the schedule was never extended */
    if (dtx_st_meta(f, "restart_step") &&
        ((st = meta_i64(f, path, "restart_step", 1, BIG, &o->restart_step)) ||
         (st = meta_f64(f, path, "restart_lr", &o->restart_lr))))
        return st;
    c->arch = (dtx_arch)a;
    c->tie_embeddings = tie;
    if ((st = dtx_config_variants_from_meta(f, path, c))) return st;
    o->schedule = (dtx_schedule)sched;
    o->decay_embeddings = decay;
    char why[256]; /* copy: dtx_fail writes the buffer dtx_last_error() reads */
    if (dtx_config_validate(c) != DTX_OK || dtx_optim_validate(o) != DTX_OK) {
        snprintf(why, sizeof why, "%s", dtx_last_error());
        return dtx_fail(DTX_ERR_FORMAT, "%s: metadata: %s", path, why);
    }
    return DTX_OK;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

/* Four words of 16 lower-case hex digits separated by single spaces; not all
 * zero (xoshiro256** never leaves the all-zero state, nor reaches it). */
static dtx_status parse_rng(const dtx_st_file *f, const char *path, dtx_rng *r) {
    dtx_status st = DTX_OK;
    const char *s = need(f, path, "rng", &st);
    if (!s) return st;
    const char *p = s;
    uint64_t any = 0;
    for (int w = 0; w < 4; w++) {
        uint64_t v = 0;
        for (int i = 0; i < 16; i++, p++) {
            int h = hexval(*p);
            if (h < 0) goto bad;
            v = v << 4 | (uint64_t)h;
        }
        if (*p != (w < 3 ? ' ' : '\0')) goto bad;
        if (w < 3) p++;
        r->s[w] = v;
        any |= v;
    }
    if (!any) goto bad;
    return DTX_OK;
bad:
    return dtx_fail(DTX_ERR_FORMAT, "%s: metadata 'rng' = '%.80s' is not 4 non-zero 16-digit hex words", path, s);
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static dtx_status load_tensor(const dtx_st_file *f, const char *path, const dtx_model *m, const dtx_tensor_info *t,
                              const char *name, real *dst) {
    const dtx_st_tensor *s = dtx_st_find(f, name);
    if (!s)
        return dtx_fail(DTX_ERR_FORMAT, "%s: missing tensor '%s' (needed by this %s config)", path, name,
                        dtx_arch_name(m->cfg.arch));
    if (s->dtype != DTX_ST_F32)
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' is not F32 (a checkpoint stores every tensor exactly)", path,
                        name);
    int ok = s->ndim == t->ndim;
    for (int k = 0; ok && k < t->ndim; k++) ok = s->shape[k] == t->shape[k];
    if (!ok) {
        char got[96], want[96];
        shape_str(got, sizeof got, s->ndim, s->shape);
        shape_str(want, sizeof want, t->ndim, t->shape);
        return dtx_fail(DTX_ERR_FORMAT, "%s: tensor '%s' has shape %s, the config needs %s", path, name, got, want);
    }
    dtx_st_to_real(s, dst);
    return DTX_OK;
}

/* Is name one of the checkpoint's tensors for model m? */
static int expected_tensor(const dtx_model *m, const char *name) {
    if (strncmp(name, "optim.m.", 8) == 0 || strncmp(name, "optim.v.", 8) == 0) name += 8;
    return dtx_model_find(m, name) != NULL;
}

static dtx_status load_state(dtx_ckpt *ck, const dtx_st_file *f, const char *path) {
    dtx_model *m = ck->model;
    real *dst[3] = {m->params, dtx_optimizer_moment1(ck->opt), dtx_optimizer_moment2(ck->opt)};
    static const char *const prefix[3] = {"", "optim.m.", "optim.v."};
    dtx_status st;
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < m->n_tensors; i++) {
            const dtx_tensor_info *t = &m->tensors[i];
            char name[NAME_MAX_LEN];
            snprintf(name, sizeof name, "%s%s", prefix[w], t->name);
            if ((st = load_tensor(f, path, m, t, name, dst[w] + t->offset))) return st;
        }
    for (int i = 0; i < f->n_tensors; i++)
        if (!expected_tensor(m, f->tensors[i].name))
            return dtx_fail(DTX_ERR_FORMAT,
                            "%s: unexpected tensor '%.80s' (not part of a checkpoint of a %s model with "
                            "tie_embeddings=%s)",
                            path, f->tensors[i].name, dtx_arch_name(m->cfg.arch),
                            m->cfg.tie_embeddings ? "true" : "false");
    return DTX_OK;
}

/* Copies every metadata entry into ck, and the model_meta.* ones back into
 * the model's extra metadata (written again when the model is saved). */
static dtx_status copy_meta(dtx_ckpt *ck, const dtx_st_file *f) {
    dtx_model *m = ck->model;
    size_t n = (size_t)f->n_meta + 1;
    ck->meta_keys = calloc(n, sizeof(char *));
    ck->meta_values = calloc(n, sizeof(char *));
    m->extra_meta_keys = calloc(n, sizeof(char *));
    m->extra_meta_values = calloc(n, sizeof(char *));
    if (!ck->meta_keys || !ck->meta_values || !m->extra_meta_keys || !m->extra_meta_values)
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < f->n_meta; i++) {
        char *k = strdup(f->meta_keys[i]), *v = strdup(f->meta_values[i]);
        ck->meta_keys[ck->n_meta] = k;
        ck->meta_values[ck->n_meta] = v;
        ck->n_meta++;
        if (!k || !v) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
        size_t plen = strlen(MODEL_META_PREFIX);
        if (strncmp(k, MODEL_META_PREFIX, plen) != 0) continue;
        char *mk = strdup(k + plen), *mv = strdup(v);
        m->extra_meta_keys[m->n_extra_meta] = mk;
        m->extra_meta_values[m->n_extra_meta] = mv;
        m->n_extra_meta++;
        if (!mk || !mv) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    return DTX_OK;
}

dtx_status dtx_ckpt_load(dtx_ckpt *ck, const char *path) {
    memset(ck, 0, sizeof *ck);
    dtx_st_file f;
    dtx_status st = dtx_st_open(&f, path);
    if (st) return st;
    const char *ver = dtx_st_meta(&f, "checkpoint_version");
    dtx_config c;
    dtx_optim_config o;
    char want[16];
    snprintf(want, sizeof want, "%d", DTX_CKPT_VERSION);
    if (!ver)
        st = dtx_fail(DTX_ERR_FORMAT, "%s: not a checkpoint (no metadata key 'checkpoint_version'; a model file?)",
                      path);
    else if (strcmp(ver, want) != 0)
        st = dtx_fail(DTX_ERR_FORMAT, "%s: checkpoint_version '%.20s' (this reader knows %d)", path, ver,
                      DTX_CKPT_VERSION);
    if (!st) st = parse_configs(&f, path, &c, &o);
    if (!st) st = meta_i64(&f, path, "step", 0, o.total_steps, &ck->step);
    if (!st) st = parse_rng(&f, path, &ck->rng);
    if (!st) st = dtx_model_alloc(&ck->model, &c);
    if (!st) st = dtx_optimizer_init(&ck->opt, ck->model, &o);
    if (!st) st = load_state(ck, &f, path);
    if (!st) st = copy_meta(ck, &f);
    if (!st) dtx_optimizer_set_steps(ck->opt, ck->step);
    dtx_st_close(&f);
    if (st) {
        /* keep the message: freeing does not touch it */
        dtx_ckpt_free(ck);
    }
    return st;
}

const char *dtx_ckpt_meta(const dtx_ckpt *ck, const char *key) {
    for (int i = 0; i < ck->n_meta; i++)
        if (strcmp(ck->meta_keys[i], key) == 0) return ck->meta_values[i];
    /* a variant key absent: the default (the checkpoint predates the key) */
    if (ck->model && strcmp(key, "subln") == 0) return dtx_config_subln_name(&ck->model->cfg);
    if (ck->model && strcmp(key, "lambda_init") == 0) return "schedule";
    if (ck->model && strcmp(key, "v2_lambda") == 0) return "sigmoid";
    if (ck->model && strcmp(key, "rope_scaling") == 0) return "none";
    if (ck->model && strcmp(key, "transformer_mix") == 0) return "0";
    if (ck->model && strcmp(key, "head_dim") == 0) { /* the arch's own, as dtx_config_meta writes it */
        static _Thread_local char hd[24];
        snprintf(hd, sizeof hd, "%lld", (long long)dtx_config_head_dim(&ck->model->cfg));
        return hd;
    }
    return NULL;
}

void dtx_ckpt_free(dtx_ckpt *ck) {
    dtx_optimizer_free(ck->opt);
    dtx_model_free(ck->model);
    for (int i = 0; i < ck->n_meta; i++) {
        free(ck->meta_keys[i]);
        free(ck->meta_values[i]);
    }
    free(ck->meta_keys);
    free(ck->meta_values);
    memset(ck, 0, sizeof *ck);
}
