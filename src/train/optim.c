/* AdamW with decoupled weight decay, global gradient-norm clipping and a
 * warmup + decay learning-rate schedule. The update follows PyTorch's AdamW
 * exactly (bias corrections, eps added to sqrt(v)/sqrt(bc2)); the clip follows
 * torch.nn.utils.clip_grad_norm_ (scale by min(1, clip / (norm + 1e-6))).
 * Moments m and v are parallel flat buffers with the parameters' offsets;
 * a shard's (optim.h: ZeRO-1) cover only its range of them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/profile.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/optim.h"

struct dtx_optimizer {
    dtx_model *m;
    dtx_optim_config cfg;
    real *mom;       /* [hi - lo] first moment  */
    real *vel;       /* [hi - lo] second moment */
    size_t mapped;   /* dtx_alloc_work's size for mom (both moments) */
    size_t lo, hi;   /* the parameters it updates: all, or a shard's range */
    int64_t step;    /* steps done */
};

dtx_optim_config dtx_optim_default(void) {
    dtx_optim_config o = {
        .lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 0, .total_steps = 1000, .schedule = DTX_SCHED_COSINE,
        .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .decay_embeddings = 0, .clip_norm = 1.0,
    };
    return o;
}

dtx_status dtx_optim_validate(const dtx_optim_config *o) {
    if (!(o->lr > 0) || !isfinite(o->lr)) return dtx_fail(DTX_ERR_CONFIG, "lr = %g must be positive", o->lr);
    if (!(o->min_lr >= 0) || o->min_lr > o->lr)
        return dtx_fail(DTX_ERR_CONFIG, "min_lr = %g must be in [0, lr = %g]", o->min_lr, o->lr);
    if (o->total_steps < 1) return dtx_fail(DTX_ERR_CONFIG, "total_steps = %lld must be at least 1", (long long)o->total_steps);
    if (o->warmup_steps < 0 || o->warmup_steps > o->total_steps)
        return dtx_fail(DTX_ERR_CONFIG, "warmup_steps = %lld must be in [0, total_steps = %lld]",
                        (long long)o->warmup_steps, (long long)o->total_steps);
    if (o->schedule != DTX_SCHED_COSINE && o->schedule != DTX_SCHED_LINEAR && o->schedule != DTX_SCHED_CONSTANT)
        return dtx_fail(DTX_ERR_CONFIG, "unknown schedule %d", (int)o->schedule);
    if (!(o->beta1 >= 0 && o->beta1 < 1)) return dtx_fail(DTX_ERR_CONFIG, "beta1 = %g must be in [0, 1)", o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1)) return dtx_fail(DTX_ERR_CONFIG, "beta2 = %g must be in [0, 1)", o->beta2);
    if (!(o->eps > 0)) return dtx_fail(DTX_ERR_CONFIG, "eps = %g must be positive", o->eps);
    if (!(o->weight_decay >= 0)) return dtx_fail(DTX_ERR_CONFIG, "weight_decay = %g must be >= 0", o->weight_decay);
    if (isnan(o->clip_norm)) return dtx_fail(DTX_ERR_CONFIG, "clip_norm is NaN");
    if (o->restart_step < 0 || (o->restart_step > 0 && o->restart_step >= o->total_steps))
        return dtx_fail(DTX_ERR_CONFIG, "restart_step = %lld must be 0 (none) or in [1, total_steps = %lld)",
                        (long long)o->restart_step, (long long)o->total_steps);
    if (o->restart_step > 0 && !(o->restart_lr >= 0 && o->restart_lr <= o->lr))
        return dtx_fail(DTX_ERR_CONFIG, "restart_lr = %g must be in [0, lr = %g]", o->restart_lr, o->lr);
    return DTX_OK;
}

/* The decay after a warmup of w steps, at step k of a schedule of len steps:
 * from lr at k = w − 1 to exactly min_lr at the last step (len − 1). */
static double decay(const dtx_optim_config *o, int64_t k, int64_t w, int64_t len) {
    if (o->schedule == DTX_SCHED_CONSTANT || len <= w) return o->lr;
    double r = (double)(k + 1 - w) / (double)(len - w);
    if (r > 1) r = 1;
    if (o->schedule == DTX_SCHED_LINEAR) return o->lr - (o->lr - o->min_lr) * r;
    return o->min_lr + 0.5 * (o->lr - o->min_lr) * (1.0 + cos(M_PI * r));
}

/* Linear warmup to the peak at step warmup-1, then decay so that the last
 * step (total-1) runs at exactly min_lr; after a restart (an extended
 * schedule: difftx.h) the same again over the new steps, warming up from
 * restart_lr. */
double dtx_lr_at(const dtx_optim_config *o, int64_t s) {
    if (o->restart_step > 0 && s >= o->restart_step) {
        int64_t k = s - o->restart_step, len = o->total_steps - o->restart_step;
        int64_t w = o->warmup_steps < len / 10 ? o->warmup_steps : len / 10;
        if (k < w) return o->restart_lr + (o->lr - o->restart_lr) * (double)(k + 1) / (double)w;
        return decay(o, k, w, len);
    }
    if (s < o->warmup_steps) return o->lr * (double)(s + 1) / (double)o->warmup_steps;
    return decay(o, s, o->warmup_steps, o->total_steps);
}

dtx_status dtx_optimizer_extend(dtx_optimizer *opt, int64_t total_steps) {
    dtx_optim_config o = opt->cfg;
    if (total_steps <= o.total_steps)
        return dtx_fail(DTX_ERR_ARG, "extending a schedule of %lld steps to %lld: the new end must lie past the old",
                        (long long)o.total_steps, (long long)total_steps);
    if (opt->step < 1 || opt->step >= total_steps)
        return dtx_fail(DTX_ERR_ARG, "extending a schedule at step %lld to %lld steps: nothing to restart",
                        (long long)opt->step, (long long)total_steps);
    o.restart_lr = dtx_lr_at(&opt->cfg, opt->step < opt->cfg.total_steps ? opt->step : opt->cfg.total_steps - 1);
    o.restart_step = opt->step;
    o.total_steps = total_steps;
    dtx_status st = dtx_optim_validate(&o);
    if (st == DTX_OK) opt->cfg = o;
    return st;
}

dtx_status dtx_optimizer_init(dtx_optimizer **out, dtx_model *m, const dtx_optim_config *o) {
    return dtx_optimizer_init_shard(out, m, o, 0, m->n_params);
}

dtx_status dtx_optimizer_init_shard(dtx_optimizer **out, dtx_model *m, const dtx_optim_config *o, size_t lo,
                                    size_t hi) {
    *out = NULL;
    dtx_status st = dtx_optim_validate(o);
    if (st) return st;
    if (lo > hi || hi > m->n_params)
        return dtx_fail(DTX_ERR_ARG, "optimizer shard [%zu, %zu) of %zu parameters", lo, hi, m->n_params);
    if (dtx_model_ensure_grads(m)) return dtx_fail(DTX_ERR_NOMEM, "out of memory allocating gradients");
    dtx_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    opt->m = m;
    opt->cfg = *o;
    opt->lo = lo, opt->hi = hi;
    /* one allocation for both moments, zeroed, in 2 MiB pages (read and written whole every step) */
    opt->mom = dtx_alloc_work((2 * (hi - lo) + 1) * sizeof(real), &opt->mapped);
    if (!opt->mom) {
        free(opt);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for optimizer state (%zu parameters)", hi - lo);
    }
    opt->vel = opt->mom + (hi - lo);
    *out = opt;
    return DTX_OK;
}

void dtx_optimizer_free(dtx_optimizer *opt) {
    if (!opt) return;
    dtx_free_work(opt->mom, opt->mapped);
    free(opt);
}

int64_t dtx_optimizer_steps_done(const dtx_optimizer *opt) { return opt->step; }

static double grad_norm(const real *g, size_t n) {
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

static void adamw_tensor(real *p, const real *g, real *mo, real *ve, size_t n, double lr, double wd, double b1,
                         double b2, double eps, double step_size, double bc2_sqrt, double gscale) {
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * gscale;
        double pi = (double)p[i] * (1.0 - lr * wd);
        double mi = b1 * mo[i] + (1.0 - b1) * gi;
        double vi = b2 * ve[i] + (1.0 - b2) * gi * gi;
        mo[i] = (real)mi;
        ve[i] = (real)vi;
        p[i] = (real)(pi - step_size * mi / (sqrt(vi) / bc2_sqrt + eps));
    }
}

static dtx_status optimizer_step(dtx_optimizer *opt, double norm, double *grad_norm_out, double *lr_used);

dtx_status dtx_optimizer_step(dtx_optimizer *opt, double *grad_norm_out, double *lr_used) {
    if (opt->lo != 0 || opt->hi != opt->m->n_params)
        return dtx_fail(DTX_ERR_ARG, "a shard's optimizer steps with the global gradient norm (dtx_optimizer_step_norm)");
    dtx_status st = DTX_OK;
    DTX_PROF(DTX_PROF_OPTIMIZER, 1, st = optimizer_step(opt, grad_norm(opt->m->grads, opt->m->n_params), grad_norm_out, lr_used));
    return st;
}

dtx_status dtx_optimizer_step_norm(dtx_optimizer *opt, double norm, double *grad_norm_out, double *lr_used) {
    dtx_status st = DTX_OK;
    DTX_PROF(DTX_PROF_OPTIMIZER, 1, st = optimizer_step(opt, norm, grad_norm_out, lr_used));
    return st;
}

double dtx_optimizer_shard_grad_sq(const dtx_optimizer *opt) {
    double n = grad_norm(opt->m->grads + opt->lo, opt->hi - opt->lo);
    return n * n;
}

size_t dtx_optimizer_shard(const dtx_optimizer *opt, size_t *lo) {
    *lo = opt->lo;
    return opt->hi;
}

static dtx_status optimizer_step(dtx_optimizer *opt, double norm, double *grad_norm_out, double *lr_used) {
    dtx_model *m = opt->m;
    const dtx_optim_config *o = &opt->cfg;
    if (!isfinite(norm)) return dtx_fail(DTX_ERR_ARG, "gradient norm is %g at step %lld", norm, (long long)opt->step);
    double gscale = 1.0;
    if (o->clip_norm > 0) {
        double coef = o->clip_norm / (norm + 1e-6);
        if (coef < 1.0) gscale = coef;
    }
    double lr = dtx_lr_at(o, opt->step);
    int64_t t = opt->step + 1;
    double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    double step_size = lr / bc1, bc2_sqrt = sqrt(bc2);
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < m->n_tensors; i++) {
        const dtx_tensor_info *ti = &m->tensors[i];
        int decay = ti->decay && (!ti->is_embedding || o->decay_embeddings);
        size_t a = ti->offset > opt->lo ? ti->offset : opt->lo; /* the tensor's part of [lo, hi) */
        size_t b = ti->offset + ti->numel < opt->hi ? ti->offset + ti->numel : opt->hi;
        if (a >= b) continue;
        adamw_tensor(m->params + a, m->grads + a, opt->mom + (a - opt->lo), opt->vel + (a - opt->lo), b - a, lr,
                     decay ? o->weight_decay : 0.0, o->beta1, o->beta2, o->eps, step_size, bc2_sqrt, gscale);
    }
    opt->step++;
    if (grad_norm_out) *grad_norm_out = norm;
    if (lr_used) *lr_used = lr;
    return DTX_OK;
}

/* ------------------------------------------------- checkpoint accessors
 * Declared in src/train/checkpoint.h: a checkpoint saves and restores the
 * optimizer's whole state, which is its config, both moments and the step. */

const dtx_optim_config *dtx_optimizer_config(const dtx_optimizer *opt) { return &opt->cfg; }
real *dtx_optimizer_moment1(dtx_optimizer *opt) { return opt->mom; }
real *dtx_optimizer_moment2(dtx_optimizer *opt) { return opt->vel; }
void dtx_optimizer_set_steps(dtx_optimizer *opt, int64_t steps) { opt->step = steps; }
