/* The training loop's state and step (trainer.h). */
#include "train/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "train/checkpoint.h"
#include "train/grad_sync.h"
#include "train/optim.h"

dtx_status dtx_trainer_open(dtx_trainer *t, const dtx_train_options *o, const char *tokens, const char *val_tokens,
                            int64_t vocab_size) {
    memset(t, 0, sizeof *t);
    t->o = *o;
    if (o->batch < 1 || o->seq < 1 || o->accum < 1 || o->eval_batches < 1)
        return dtx_fail(DTX_ERR_ARG, "batch %lld, seq %lld, accum %lld, eval batches %lld: each must be at least 1",
                        (long long)o->batch, (long long)o->seq, (long long)o->accum, (long long)o->eval_batches);
    dtx_status st = source_open(&t->data, tokens, vocab_size);
    if (st) return st;
    if (val_tokens && (st = source_open(&t->val, val_tokens, vocab_size))) return st;
    const token_source *short_one = t->data.count < o->seq + 1 ? &t->data
                                    : val_tokens && t->val.count < o->seq + 1 ? &t->val
                                                                               : NULL;
    if (short_one) {
        return dtx_fail(DTX_ERR_ARG, "%s (the %s tokens) holds %lld tokens; sequences of %lld need at least %lld",
                        short_one->path, short_one == &t->data ? "training" : "validation", (long long)short_one->count,
                        (long long)o->seq, (long long)o->seq + 1);
    }
    t->data_hash = source_hash(&t->data);
    if ((st = needle_mix_open(&t->needles, &o->mix, vocab_size, o->seq))) return st;
    size_t n = (size_t)o->batch * (size_t)o->seq;
    t->inputs = dtx_alloc(n, sizeof(int32_t));
    t->targets = dtx_alloc(n, sizeof(int32_t));
    t->period = dtx_alloc((size_t)o->batch, sizeof(int32_t));
    t->tok_loss = dtx_alloc(n, sizeof(double));
    if (!t->inputs || !t->targets || !t->period || !t->tok_loss)
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for a batch of %lld x %lld tokens", (long long)o->batch,
                        (long long)o->seq);
    return DTX_OK;
}

/* The optimizer of this rank: the whole one, or (ZeRO-1) its shard. */
static dtx_status make_optimizer(dtx_trainer *t, const dtx_optim_config *oc) {
    if (!t->zero1) return dtx_optimizer_init(&t->opt, t->model, oc);
    int n = dtx_comm_size(t->comm), r = dtx_comm_rank(t->comm);
    free(t->at);
    if (!(t->at = malloc(sizeof(size_t) * (size_t)(n + 1)))) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    dtx_comm_ranges(dtx_model_num_params(t->model), n, t->at);
    return dtx_optimizer_init_shard(&t->opt, t->model, oc, t->at[r], t->at[r + 1]);
}

dtx_status dtx_trainer_start(dtx_trainer *t, dtx_model *init, const dtx_config *cfg, dtx_init_scheme scheme,
                             const dtx_optim_config *oc) {
    dtx_status st;
    if (init) t->model = init;
    else if ((st = dtx_model_init_scheme(&t->model, cfg, t->o.seed, scheme))) return st;
    if ((st = make_optimizer(t, oc))) return st;
    t->init_scheme = scheme;
    /* a different stream than the weight init, same seed */
    dtx_rng_seed(&t->rng, t->o.seed ^ 0x5eedba7c4e5ULL);
    t->step = 0;
    return DTX_OK;
}

dtx_status dtx_trainer_resume(dtx_trainer *t, dtx_model *model, dtx_optimizer *opt, const dtx_rng *rng,
                              int64_t step) {
    t->model = model;
    t->rng = *rng;
    t->step = step;
    if (!t->zero1) {
        t->opt = opt;
        return DTX_OK;
    }
    dtx_status st = make_optimizer(t, dtx_optimizer_config(opt));
    if (!st) { /* this rank's range of the whole optimizer's moments */
        size_t lo, hi = dtx_optimizer_shard(t->opt, &lo);
        memcpy(dtx_optimizer_moment1(t->opt), dtx_optimizer_moment1(opt) + lo, sizeof(dtx_real) * (hi - lo));
        memcpy(dtx_optimizer_moment2(t->opt), dtx_optimizer_moment2(opt) + lo, sizeof(dtx_real) * (hi - lo));
        dtx_optimizer_set_steps(t->opt, dtx_optimizer_steps_done(opt));
    }
    dtx_optimizer_free(opt);
    return st;
}

dtx_status dtx_trainer_checkpoint(dtx_trainer *t, const char *path, const char *const *keys,
                                  const char *const *values, int n) {
    int rank0 = dtx_comm_rank(t->comm) == 0;
    if (!t->zero1) return rank0 ? dtx_ckpt_save(path, t->model, t->opt, &t->rng, keys, values, n) : DTX_OK;
    /* the shards put together on every rank, in a whole optimizer for the file */
    dtx_optimizer *full = NULL;
    dtx_status st = dtx_optimizer_init(&full, t->model, dtx_optimizer_config(t->opt));
    if (st) return st;
    size_t lo, hi = dtx_optimizer_shard(t->opt, &lo);
    dtx_real *m1 = dtx_optimizer_moment1(full), *m2 = dtx_optimizer_moment2(full);
    memcpy(m1 + lo, dtx_optimizer_moment1(t->opt), sizeof(dtx_real) * (hi - lo));
    memcpy(m2 + lo, dtx_optimizer_moment2(t->opt), sizeof(dtx_real) * (hi - lo));
    dtx_optimizer_set_steps(full, dtx_optimizer_steps_done(t->opt));
    if (!(st = dtx_comm_allgather_real(t->comm, m1, t->at)) && !(st = dtx_comm_allgather_real(t->comm, m2, t->at)) &&
        rank0)
        st = dtx_ckpt_save(path, t->model, full, &t->rng, keys, values, n);
    dtx_optimizer_free(full);
    return st;
}

void dtx_trainer_close(dtx_trainer *t) {
    source_close(&t->data);
    source_close(&t->val);
    needle_mix_close(&t->needles);
    dtx_optimizer_free(t->opt);
    dtx_model_free(t->model);
    free(t->inputs);
    free(t->targets);
    free(t->period);
    free(t->tok_loss);
    free(t->at);
    grad_sync_close(t->sync);
    free(t->own_paths[0]);
    free(t->own_paths[1]);
    memset(t, 0, sizeof *t);
}

dtx_status dtx_trainer_set_comm(dtx_trainer *t, dtx_comm *comm, int zero1, size_t grad_bucket) {
    int n = dtx_comm_size(comm);
    if (t->o.batch % n)
        return dtx_fail(DTX_ERR_USAGE, "batch %lld does not divide over %d ranks (each takes the same share of every "
                        "batch)", (long long)t->o.batch, n);
    if (t->opt) return dtx_fail(DTX_ERR_ARG, "the ranks are set before the model and optimizer");
    t->comm = comm;
    t->zero1 = zero1 && n > 1;
    grad_sync_close(t->sync);
    t->sync = NULL;
    return n > 1 ? grad_sync_open(&t->sync, comm, grad_bucket) : DTX_OK;
}

/* Whether any rank has been asked to stop: every rank answers the same, so
 * all of them abandon the step (or none does). */

static int stopping(dtx_trainer *t) {
    double s = t->o.stop && *t->o.stop;
    if (dtx_comm_size(t->comm) > 1 && dtx_comm_allreduce_f64(t->comm, &s, 1)) return 1;
    return s > 0;
}

int dtx_trainer_should_stop(dtx_trainer *t) { return stopping(t); }

/* The forward and backward passes of step `step` (1-based) over accum
 * micro-batches; *loss their mean over every row of every rank. Each rank
 * samples the whole global batch (the sampler and the mixture stay those of
 * one rank) and runs its own rows; its gradient, scaled by 1/(accum·ranks),
 * is summed over ranks afterwards. A stop between micro-batches abandons the
 * step: the sampler goes back to where it began, and the weights, moments
 * and step count are untouched. */
static dtx_step_result forward_backward(dtx_trainer *t, int64_t step, double *loss, copy_score *cs, double *comm_s,
                                        double *grad_sum_s) {
    const dtx_train_options *o = &t->o;
    const int ranks = dtx_comm_size(t->comm);
    const int64_t b = o->batch / ranks, r0 = b * dtx_comm_rank(t->comm);
    const int64_t T = o->seq;
    dtx_rng at_start = t->rng;
    memset(cs, 0, sizeof *cs);
    dtx_model_zero_grad(t->model);
    double sum = 0;
    for (int64_t k = 0; k < o->accum; k++) {
        if (k > 0 && stopping(t)) {
            t->rng = at_start;
            return DTX_STEP_INTERRUPTED;
        }
        source_sample(&t->data, &t->rng, o->batch, T, t->inputs, t->targets);
        if (needle_mix_apply(&t->needles, o->seed, step, k, o->batch, T, t->inputs, t->targets, t->period))
            return DTX_STEP_ERROR;
        const int32_t *in = t->inputs + r0 * T, *tg = t->targets + r0 * T, *period = t->period + r0;
        double l;
        int copies = 0;
        for (int64_t r = 0; r < b; r++) copies |= period[r] > 0;
        if (dtx_model_forward(t->model, in, tg, b, T, NULL, &l) ||
            (copies && dtx_model_token_losses(t->model, t->tok_loss)))
            return DTX_STEP_ERROR;
        /* the last micro-batch's backward leaves each layer's gradient final: its sum over ranks starts then */
        int last = ranks > 1 && k == o->accum - 1;
        if (last) {
            dtx_real *g = dtx_model_grads(t->model);
            if (!g) return DTX_STEP_ERROR;
            grad_sync_begin(t->sync, g, dtx_model_num_params(t->model), t->zero1 ? t->at : NULL);
            dtx_model_on_grads_ready(t->model, grad_sync_ready, t->sync);
        }
        dtx_status st = dtx_model_backward(t->model, 1.0 / (double)(o->accum * ranks));
        dtx_model_on_grads_ready(t->model, NULL, NULL);
        /* a rank that fails here leaves the others waiting in a sum: its caller stops them all (dtx_comm_abort) */
        if (st) return DTX_STEP_ERROR;
        if (last) {
            double wait;
            if (grad_sync_end(t->sync, &wait, grad_sum_s)) return DTX_STEP_ERROR;
            *comm_s += wait;
        }
        sum += l;
        if (copies) copy_score_add(cs, t->tok_loss, period, b, T);
    }
    if (ranks > 1) {
        double v[6] = {sum, cs->first, cs->repeat, (double)cs->n_first, (double)cs->n_repeat, (double)cs->rows};
        double t0 = dtx_now_s();
        if (dtx_comm_allreduce_f64(t->comm, v, 6)) return DTX_STEP_ERROR;
        *comm_s += dtx_now_s() - t0;
        sum = v[0] / ranks, cs->first = v[1], cs->repeat = v[2];
        cs->n_first = (int64_t)v[3], cs->n_repeat = (int64_t)v[4], cs->rows = (int64_t)v[5];
    }
    *loss = sum / (double)o->accum;
    return DTX_STEP_DONE;
}

dtx_step_result dtx_trainer_step(dtx_trainer *t, dtx_step_stats *s) {
    s->loss = s->grad_norm = s->lr = NAN;
    s->comm_s = s->grad_sum_s = 0;
    if (!t->model || !t->opt) {
        dtx_fail(DTX_ERR_ARG, "the trainer has no model: start or resume it first");
        return DTX_STEP_ERROR;
    }
    int64_t step = t->step + 1;
    if (t->o.debug_oom_at == step && dtx_comm_rank(t->comm) == dtx_comm_size(t->comm) - 1) {
        dtx_fail(DTX_ERR_NOMEM, "out of memory at step %lld (the --debug-oom-at test hook)", (long long)step);
        return DTX_STEP_ERROR;
    }
    const dtx_config *mc = dtx_model_config(t->model);
    if (t->o.diff_warmup > 0 && mc->arch == DTX_ARCH_DIFF) { /* the DIFF form phased in (dtx_train_options) */
        double tau = 1.0 - (double)t->step / (double)t->o.diff_warmup;
        if (tau < mc->transformer_mix) dtx_model_set_transformer_mix(t->model, tau > 0 ? tau : 0);
    }
    dtx_step_result r = forward_backward(t, step, &s->loss, &s->copy, &s->comm_s, &s->grad_sum_s);
    if (r != DTX_STEP_DONE) return r;
    if (t->o.debug_nan_at == step) s->loss = NAN;
    if (!isfinite(s->loss)) return DTX_STEP_LOSS_NONFINITE;
    /* its only failure: a gradient norm that is not finite (nothing is updated then) */
    if (!t->zero1) {
        if (dtx_optimizer_step(t->opt, &s->grad_norm, &s->lr)) return DTX_STEP_GRAD_NONFINITE;
    } else { /* each rank's shard, clipped by the whole gradient's norm; then every rank gets every update */
        double sq = dtx_optimizer_shard_grad_sq(t->opt), t0 = dtx_now_s();
        if (dtx_comm_allreduce_f64(t->comm, &sq, 1)) return DTX_STEP_ERROR;
        s->comm_s += dtx_now_s() - t0;
        if (dtx_optimizer_step_norm(t->opt, sqrt(sq), &s->grad_norm, &s->lr)) return DTX_STEP_GRAD_NONFINITE;
        t0 = dtx_now_s();
        if (dtx_comm_allgather_real(t->comm, dtx_model_params(t->model), t->at)) return DTX_STEP_ERROR;
        s->comm_s += dtx_now_s() - t0;
    }
    t->step = step;
    t->last = *s;
    t->last_loss = s->loss;
    return DTX_STEP_DONE;
}

dtx_step_result dtx_trainer_evaluate(dtx_trainer *t, double *val) {
    *val = NAN;
    if (!t->model || !t->val.count) {
        dtx_fail(DTX_ERR_ARG, "%s", t->model ? "no validation tokens" : "the trainer has no model");
        return DTX_STEP_ERROR;
    }
    const dtx_train_options *o = &t->o;
    const int ranks = dtx_comm_size(t->comm);
    const int64_t b = o->batch / ranks, r0 = b * dtx_comm_rank(t->comm);
    int64_t pos = 0;
    double sum = 0;
    for (int64_t k = 0; k < o->eval_batches; k++) {
        if (stopping(t)) return DTX_STEP_INTERRUPTED;
        source_sequential(&t->val, &pos, o->batch, o->seq, t->inputs, t->targets);
        double l;
        if (dtx_model_forward(t->model, t->inputs + r0 * o->seq, t->targets + r0 * o->seq, b, o->seq, NULL, &l))
            return DTX_STEP_ERROR;
        sum += l;
    }
    if (dtx_comm_allreduce_f64(t->comm, &sum, 1)) return DTX_STEP_ERROR;
    *val = sum / ranks / (double)o->eval_batches;
    return DTX_STEP_DONE;
}

/* ---------------------------------------------------------------------------
 * The public trainer (difftx.h): what difftx train and Python's train()
 * drive. Its checkpoints carry the keys a resume compares, so that either
 * continues the other's run. */

/* difftx train's default --needle-max: its value is part of the checkpoint's "needles" key */
#define DEFAULT_NEEDLE_MAX 6

dtx_train_options dtx_train_options_default(void) {
    return (dtx_train_options){.batch = 8, .seq = 128, .accum = 1, .eval_batches = 10, .seed = 1,
                               .init_scheme = DTX_INIT_TORCH, .precision = DTX_PREC_FP32,
                               .mix = {.needle_max = DEFAULT_NEEDLE_MAX, .recall_queries = 8, .recall_distractors = 24},
                               .grad_bucket_mb = -1};
}

/* Values per bucket of the gradient's sums: by default only where ranks sit
 * on other machines (on one machine the sums are a memory copy, and a thread
 * summing beside the ranks' own threads slows them more than the overlap
 * saves: bench/results-mpi.md). */
static size_t grad_bucket(const dtx_train_options *o) {
    if (dtx_comm_size(o->comm) < 2) return 0;
    double mb = o->grad_bucket_mb >= 0 ? o->grad_bucket_mb : dtx_comm_one_machine(o->comm) ? 0 : 4;
    size_t n = (size_t)(mb * (1 << 20) / sizeof(dtx_real));
    return mb > 0 && n == 0 ? 1 : n;
}

static dtx_status public_open(dtx_trainer **out, const dtx_train_options *o, const char *tokens,
                              const char *val_tokens, const dtx_config *c) {
    *out = NULL;
    if (!tokens) return dtx_fail(DTX_ERR_ARG, "no training tokens given");
    if (o->seq > c->max_seq_len)
        return dtx_fail(DTX_ERR_USAGE, "seq %lld is longer than the model's max_seq_len %lld", (long long)o->seq,
                        (long long)c->max_seq_len);
    if ((unsigned)o->init_scheme > DTX_INIT_GPT2)
        return dtx_fail(DTX_ERR_ARG, "init_scheme %d is not a dtx_init_scheme", (int)o->init_scheme);
    if ((unsigned)o->precision > DTX_PREC_BF16)
        return dtx_fail(DTX_ERR_ARG, "precision %d is not a dtx_precision", (int)o->precision);
    if (o->grad_bucket_mb > (1 << 20)) return dtx_fail(DTX_ERR_USAGE, "grad_bucket_mb %g is too large", o->grad_bucket_mb);
    if (o->diff_warmup < 0) return dtx_fail(DTX_ERR_USAGE, "diff_warmup %lld is negative", (long long)o->diff_warmup);
    dtx_trainer *t = calloc(1, sizeof *t);
    char *paths[2] = {strdup(tokens), val_tokens ? strdup(val_tokens) : NULL};
    if (!t || !paths[0] || (val_tokens && !paths[1])) {
        free(t), free(paths[0]), free(paths[1]);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    }
    dtx_train_options to = *o;
    const dtx_train_mix *x = &o->mix;
    if (x->needle_frac == 0 && x->copy_frac == 0 && x->icl_frac == 0 && x->halluc_frac == 0 && x->fact_frac == 0 &&
        x->recall_frac == 0)
        to.mix.needle_max = DEFAULT_NEEDLE_MAX; /* no mixture: its size of document changes nothing */
    dtx_status st = dtx_trainer_open(t, &to, paths[0], paths[1], c->vocab_size);
    t->own_paths[0] = paths[0], t->own_paths[1] = paths[1]; /* after open, which clears the struct */
    t->init_scheme = o->init_scheme;
    t->last_loss = NAN;
    t->began = (dtx_train_info){.start_loss = NAN, .grad_bucket = (int64_t)grad_bucket(o)};
    if (!st) st = dtx_trainer_set_comm(t, o->comm, o->zero1, grad_bucket(o));
    if (st) {
        dtx_trainer_close(t);
        free(t);
        return st;
    }
    *out = t;
    return DTX_OK;
}

dtx_status dtx_trainer_init(dtx_trainer **out, const dtx_train_options *o, const char *tokens,
                            const char *val_tokens, const dtx_config *c, dtx_model *model,
                            const dtx_optim_config *oc) {
    *out = NULL;
    dtx_status st;
    if (!model && (st = dtx_config_validate(c))) return st;
    const dtx_config *mc = model ? dtx_model_config(model) : c;
    if ((st = dtx_optim_validate(oc)) || (st = public_open(out, o, tokens, val_tokens, mc))) {
        dtx_model_free(model);
        return st;
    }
    dtx_trainer *t = *out;
    if ((st = dtx_trainer_start(t, model, c, o->init_scheme, oc))) {
        if (model && t->model != model) dtx_model_free(model); /* not yet the trainer's */
    } else {
        st = dtx_model_set_precision(t->model, o->precision);
    }
    if (st) {
        dtx_trainer_free(t);
        *out = NULL;
    }
    return st;
}

void dtx_trainer_run_meta(const dtx_trainer *t, dtx_run_meta *m) {
    int n = 0;
    const dtx_train_mix *x = &t->o.mix;
#define K(key, ...) \
    (m->keys[n] = (key), m->values[n] = m->vals[n], snprintf(m->vals[n++], DTX_RUN_META_VALUE_MAX, __VA_ARGS__))
    K("batch", "%lld", (long long)t->o.batch);
    K("seq", "%lld", (long long)t->o.seq);
    K("accum", "%lld", (long long)t->o.accum);
    K("seed", "%llu", (unsigned long long)t->o.seed);
    K("precision", "%s", t->model ? dtx_precision_name(dtx_model_precision(t->model)) : "fp32");
    K("data_tokens", "%lld", (long long)t->data.count);
    K("data_hash", "%016" PRIx64, t->data_hash);
    if (x->recall_frac > 0) /* older checkpoints: the shares before it, in their form */
        K("needles", "%.17g/%.17g/%lld/%.17g/%.17g/%.17g/recall %.17g/%lld/%lld/%s", x->needle_frac, x->copy_frac,
          (long long)x->needle_max, x->icl_frac, x->halluc_frac, x->fact_frac, x->recall_frac,
          (long long)x->recall_queries, (long long)x->recall_distractors, x->recall_all_targets ? "all" : "answers");
    else if (x->icl_frac > 0 || x->halluc_frac > 0 || x->fact_frac > 0) /* older checkpoints: the first three */
        K("needles", "%.17g/%.17g/%lld/%.17g/%.17g/%.17g", x->needle_frac, x->copy_frac, (long long)x->needle_max,
          x->icl_frac, x->halluc_frac, x->fact_frac);
    else
        K("needles", "%.17g/%.17g/%lld", x->needle_frac, x->copy_frac, (long long)x->needle_max);
    K("init_scheme", "%s", dtx_init_scheme_name(t->init_scheme));
    K("diff_warmup", "%lld", (long long)t->o.diff_warmup);
    /* informational: not compared */
    K("data_path", "%s", t->data.path ? t->data.path : "");
    K("loss", "%.17g", t->last_loss);
    K("threads", "%d", omp_get_max_threads());
#undef K
}

dtx_status dtx_trainer_compare(const dtx_trainer *t, const dtx_ckpt *ck, const dtx_config *cfg,
                               const dtx_optim_config *oc, dtx_precision prec, const char **key, const char **here,
                               const char **there) {
    static _Thread_local dtx_run_meta run;          /* large: not for the stack */
    static _Thread_local char dvals[DTX_CKPT_N_DESCRIBE][DTX_CKPT_VALUE_MAX];
    const char *keys[DTX_CKPT_N_DESCRIBE + DTX_RUN_META_COMPARED], *values[DTX_CKPT_N_DESCRIBE + DTX_RUN_META_COMPARED];
    int n = dtx_ckpt_describe(cfg, oc, keys, dvals);
    for (int i = 0; i < n; i++) values[i] = dvals[i];
    dtx_trainer_run_meta(t, &run);
    for (int i = 0; i < DTX_RUN_META_COMPARED; i++, n++) {
        keys[n] = run.keys[i], values[n] = run.values[i];
        if (strcmp(keys[n], "precision") == 0) values[n] = dtx_precision_name(prec); /* there may be no model yet */
    }
    for (int i = 0; i < n; i++) {
        const char *theirs = dtx_ckpt_meta(ck, keys[i]);
        if (!theirs && strcmp(keys[i], "init_scheme") == 0) theirs = "torch"; /* written before the option existed */
        if (!theirs && strcmp(keys[i], "diff_warmup") == 0) theirs = "0";
        *key = keys[i], *here = values[i], *there = theirs;
        if (!theirs) return dtx_fail(DTX_ERR_FORMAT, "missing metadata key '%s'", keys[i]);
        if (strcmp(theirs, values[i]) == 0) continue;
        if (strcmp(keys[i], "total_steps") == 0 && oc->total_steps > strtoll(theirs, NULL, 10)) continue;
        /* state, not a setting: --diff-warmup lowers it step by step (the resumed model carries its own) */
        if (strcmp(keys[i], "transformer_mix") == 0) continue;
        return dtx_fail(DTX_ERR_ARG, "%s is %s in the checkpoint and %s here", keys[i], theirs, values[i]);
    }
    *key = *here = *there = NULL;
    return DTX_OK;
}

dtx_status dtx_trainer_save(dtx_trainer *t, const char *path) {
    if (!t->model) return dtx_fail(DTX_ERR_ARG, "the trainer's model was taken: nothing to save");
    dtx_run_meta *m = malloc(sizeof *m);
    if (!m) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    dtx_trainer_run_meta(t, m);
    dtx_status st = dtx_trainer_checkpoint(t, path, m->keys, m->values, DTX_RUN_META_KEYS);
    free(m);
    return st;
}

/* The setting the last resume of this thread refused (dtx_trainer_mismatch). */
static _Thread_local struct {
    int set;
    char key[64], here[DTX_RUN_META_VALUE_MAX], there[DTX_RUN_META_VALUE_MAX];
} mismatch;

void dtx_trainer_mismatch(const char **key, const char **here, const char **there) {
    *key = mismatch.set ? mismatch.key : NULL;
    *here = mismatch.set ? mismatch.here : NULL;
    *there = mismatch.set ? mismatch.there : NULL;
}

dtx_status dtx_trainer_init_checkpoint(dtx_trainer **out, const dtx_train_options *o, const char *tokens,
                                       const char *val_tokens, const char *checkpoint, const dtx_config *c,
                                       const dtx_optim_config *oc) {
    *out = NULL;
    mismatch.set = 0;
    dtx_ckpt ck;
    dtx_status st = dtx_ckpt_load(&ck, checkpoint);
    if (st) return st;
    const dtx_config *cfg = c ? c : dtx_model_config(ck.model);
    if ((st = public_open(out, o, tokens, val_tokens, cfg))) goto done;
    dtx_trainer *t = *out;
    const char *key, *here, *there;
    dtx_optim_config mine = oc ? *oc : *dtx_optimizer_config(ck.opt); /* NULL: whatever the checkpoint holds */
    st = dtx_trainer_compare(t, &ck, cfg, &mine, o->precision, &key, &here, &there);
    if (st == DTX_ERR_FORMAT) {
        st = dtx_fail(DTX_ERR_FORMAT, "%s: missing metadata key '%s'", checkpoint, key);
        goto done;
    }
    if (st) {
        mismatch.set = 1;
        snprintf(mismatch.key, sizeof mismatch.key, "%s", key);
        snprintf(mismatch.here, sizeof mismatch.here, "%s", here);
        snprintf(mismatch.there, sizeof mismatch.there, "%s", there);
        int data = strcmp(key, "data_tokens") == 0 || strcmp(key, "data_hash") == 0;
        st = dtx_fail(DTX_ERR_USAGE, "%s: %s is %s in the checkpoint and %s here; a resumed run uses the same %s",
                      checkpoint, key, there, here, data ? "training tokens" : "settings");
        goto done;
    }
    if ((st = dtx_model_set_precision(ck.model, o->precision))) goto done;
    const char *loss = dtx_ckpt_meta(&ck, "loss"), *threads = dtx_ckpt_meta(&ck, "threads");
    t->last_loss = t->began.start_loss = loss ? strtod(loss, NULL) : NAN;
    t->began.ckpt_threads = threads ? atoi(threads) : 0;
    t->began.start_step = ck.step;
    int64_t was = dtx_optimizer_config(ck.opt)->total_steps;
    if (oc && oc->total_steps > was) { /* docs/training.md "Extending a run" */
        if ((st = dtx_optimizer_extend(ck.opt, oc->total_steps))) goto done;
        t->began.extended_from = was;
        t->began.restart_lr = dtx_optimizer_config(ck.opt)->restart_lr;
    }
    st = dtx_trainer_resume(t, ck.model, ck.opt, &ck.rng, ck.step);
    ck.model = NULL, ck.opt = NULL; /* taken */
done:
    dtx_ckpt_free(&ck);
    if (st && *out) {
        dtx_trainer_free(*out);
        *out = NULL;
    }
    return st;
}

void dtx_trainer_free(dtx_trainer *t) {
    if (!t) return;
    dtx_trainer_close(t);
    free(t);
}

dtx_status dtx_trainer_update(dtx_trainer *t, dtx_train_stats *s) {
    dtx_clear_error();
    dtx_step_stats st;
    dtx_step_result r = dtx_trainer_step(t, &st);
    if (s) *s = (dtx_train_stats){.step = t->step, .loss = st.loss, .grad_norm = st.grad_norm, .lr = st.lr};
    switch (r) {
    case DTX_STEP_DONE: t->last_loss = st.loss; return DTX_OK;
    case DTX_STEP_LOSS_NONFINITE:
        return dtx_fail(DTX_ERR_NUMERIC, "step %lld: the loss is not finite (%g); nothing was updated",
                        (long long)t->step + 1, st.loss);
    case DTX_STEP_GRAD_NONFINITE:
        return dtx_fail(DTX_ERR_NUMERIC, "step %lld: the gradient is not finite; nothing was updated",
                        (long long)t->step + 1);
    case DTX_STEP_INTERRUPTED:
        return dtx_fail(DTX_ERR_STOPPED, "stopped during step %lld: nothing changed", (long long)t->step + 1);
    case DTX_STEP_ERROR: break;
    }
    dtx_status last = dtx_last_status();
    return last != DTX_OK ? last : dtx_fail(DTX_ERR_ARG, "the step failed");
}

dtx_status dtx_trainer_eval(dtx_trainer *t, double *val_loss) {
    dtx_clear_error();
    dtx_step_result r = dtx_trainer_evaluate(t, val_loss);
    if (r == DTX_STEP_DONE) return DTX_OK;
    if (r == DTX_STEP_INTERRUPTED) return dtx_fail(DTX_ERR_STOPPED, "stopped during the validation");
    dtx_status last = dtx_last_status();
    return last != DTX_OK ? last : dtx_fail(DTX_ERR_ARG, "the evaluation failed");
}

int64_t dtx_trainer_steps_done(const dtx_trainer *t) { return t->step; }

dtx_model *dtx_trainer_model(dtx_trainer *t) { return t->model; }

dtx_model *dtx_trainer_take_model(dtx_trainer *t) {
    dtx_model *m = t->model;
    if (t->opt) { /* the optimizer is bound to the model: it goes with it */
        dtx_optimizer_free(t->opt);
        t->opt = NULL;
    }
    t->model = NULL;
    return m;
}

void dtx_trainer_info(const dtx_trainer *t, dtx_train_info *i) {
    *i = t->began;
    i->data_tokens = t->data.count;
    i->val_tokens = t->val.count;
    i->rank = dtx_comm_rank(t->comm);
    i->ranks = dtx_comm_size(t->comm);
    i->last_loss = t->last_loss;
    const needle_mix *x = &t->needles;
    i->needle_docs = x->documents, i->copy_docs = x->copies;
    i->icl_rows = x->icl_rows, i->halluc_rows = x->halluc_rows, i->fact_rows = x->fact_rows;
    i->recall_rows = x->recall_rows;
}
