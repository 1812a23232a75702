/* The training loop's state and its step, in the library: the model, the
 * optimizer, the token streams, the sampler and the needle mixture, and one
 * optimizer step over `accum` micro-batches (difftx train is a client: it
 * keeps the flags, the progress display, the logs, the signals and the
 * checkpoint files' names and cadence). Resuming is exact: the state after
 * step s is the model, the optimizer's moments and step count, and the
 * sampler's generator, all of which a checkpoint holds (checkpoint.h); the
 * needle mixture depends on (seed, step, micro-batch, row) alone. */
#ifndef DTX_TRAIN_TRAINER_H
#define DTX_TRAIN_TRAINER_H

#include <signal.h>
#include <stdint.h>

#include "difftx.h"
#include "train/checkpoint.h"
#include "train/comm.h"
#include "train/needle_mix.h"
#include "train/token_source.h"

/* (the options: difftx.h's dtx_train_options) */

typedef struct {
    double loss;      /* the mean over the micro-batches */
    double grad_norm; /* before clipping                 */
    double lr;        /* the rate this step used         */
    copy_score copy;  /* the copy rows' losses           */
    double comm_s;    /* seconds the step waited for sums over ranks (gradient, losses, parameters), 0 on one rank */
    double grad_sum_s; /* seconds the gradient's sums took, overlapped with the backward or not */
} dtx_step_stats;

/* difftx.h's opaque dtx_trainer */
struct dtx_trainer {
    dtx_train_options o;
    dtx_model *model;
    dtx_optimizer *opt;
    token_source data, val; /* val.count == 0: no validation stream */
    dtx_rng rng;
    uint64_t data_hash;
    needle_mix needles;
    int64_t step;           /* optimizer steps done */
    /* the ranks of a data-parallel run (NULL: one): each samples the same
     * global batch and keeps its own rows (batch / size of them); gradients,
     * losses and the stop are summed over ranks, so every rank takes the same
     * step, and the number of ranks changes the arithmetic's order only */
    dtx_comm *comm;
    /* ZeRO-1: each rank keeps the AdamW moments of its own range of the
     * parameters (at[rank] .. at[rank + 1]) and updates only those; the
     * gradient is reduce-scattered, the parameters all-gathered */
    int zero1;
    size_t *at;             /* [ranks + 1] with zero1 */
    struct grad_sync *sync; /* the gradient's sums, with more than one rank */
    int32_t *inputs, *targets, *period; /* [batch, seq], [batch, seq], [batch] */
    double *tok_loss;                   /* [batch, seq] per-position losses (the induction score) */
    /* the public API's (difftx.h): its copies of the token files' paths, the
     * options' init scheme and the last step's loss, which its checkpoints keep */
    char *own_paths[2];
    dtx_init_scheme init_scheme; /* a fresh run's, as its checkpoints record it */
    double last_loss;            /* the last step's loss (a resumed run: the checkpoint's) */
    dtx_step_stats last;         /* the last step's statistics (the run log's line) */
    dtx_train_info began;        /* how the run began (dtx_trainer_info's start_* and ckpt_*) */
};

/* Opens the training tokens (and val_tokens, NULL for none), checks every id
 * against vocab_size, loads the needle mixture and allocates the batch
 * buffers. Each stream must hold at least seq + 1 tokens (the message names
 * the one that does not). The stop flag is o->stop: polled between
 * micro-batches and evaluation batches, nonzero abandons the step (or the
 * evaluation), leaving the state as it was before it. No model yet. dtx_trainer_close after a failure too. */
dtx_status dtx_trainer_open(dtx_trainer *t, const dtx_train_options *o, const char *tokens, const char *val_tokens,
                            int64_t vocab_size);
/* A fresh run: init (taken; NULL: a new model of cfg from the seed and
 * scheme), a new optimizer, the sampler seeded from the seed (a stream other
 * than the weights'), step 0. */
dtx_status dtx_trainer_start(dtx_trainer *t, dtx_model *init, const dtx_config *cfg, dtx_init_scheme scheme,
                             const dtx_optim_config *oc);
/* The ranks, whether the optimizer is sharded (ZeRO-1), and the buckets
 * of the gradient's sums (grad_bucket values each, started while the
 * backward still runs: grad_sync.h; 0: one sum after the backward), before
 * dtx_trainer_start or _resume: DTX_ERR_ARG when batch does not divide by
 * their number. */
dtx_status dtx_trainer_set_comm(dtx_trainer *t, dtx_comm *comm, int zero1, size_t grad_bucket);
/* Writes the checkpoint of the state (checkpoint.h: the whole optimizer;
 * with ZeRO-1 its shards gathered first) to path on rank 0: a collective
 * (every rank calls it; path is ignored on the others). */
dtx_status dtx_trainer_checkpoint(dtx_trainer *t, const char *path, const char *const *keys,
                                  const char *const *values, int n);
/* A resumed run: the state after `step` steps (model and the whole
 * optimizer taken; with ZeRO-1 the rank keeps its shard of it). */
dtx_status dtx_trainer_resume(dtx_trainer *t, dtx_model *model, dtx_optimizer *opt, const dtx_rng *rng,
                              int64_t step);
void dtx_trainer_close(dtx_trainer *t);

/* The run's settings a checkpoint records beside the model and the
 * optimizer (keys[i], values[i], DTX_RUN_META_KEYS of them): the first
 * DTX_RUN_META_COMPARED must match on resume (batch, seq, accum, seed,
 * precision, data_tokens, data_hash, needles, init_scheme, diff_warmup), the rest are
 * informational (data_path, loss, threads). */
enum { DTX_RUN_META_KEYS = 13, DTX_RUN_META_COMPARED = 10, DTX_RUN_META_VALUE_MAX = 4200 /* a path */ };
typedef struct {
    const char *keys[DTX_RUN_META_KEYS];
    const char *values[DTX_RUN_META_KEYS];
    char vals[DTX_RUN_META_KEYS][DTX_RUN_META_VALUE_MAX];
} dtx_run_meta;
/* Fills *m (large: not for the stack) from t. */
void dtx_trainer_run_meta(const dtx_trainer *t, dtx_run_meta *m);
/* The one check of a resume: the first setting in which this run (t's
 * options and data, the config cfg, the optimizer oc, the precision prec)
 * differs from the checkpoint ck's, in the checkpoint's key order (model,
 * optimizer, run): DTX_OK when none; DTX_ERR_ARG with *key and the two
 * values (this run's in here, the checkpoint's in there); DTX_ERR_FORMAT
 * with *key when ck lacks the key. A larger total_steps is no difference
 * (the run is extended); a checkpoint older than init_scheme was torch's. */
dtx_status dtx_trainer_compare(const dtx_trainer *t, const dtx_ckpt *ck, const dtx_config *cfg,
                               const dtx_optim_config *oc, dtx_precision prec, const char **key, const char **here,
                               const char **there);

typedef enum {
    DTX_STEP_DONE = 0,        /* the weights updated; step advanced           */
    DTX_STEP_INTERRUPTED,     /* *stop: nothing changed (the sampler rewound) */
    DTX_STEP_LOSS_NONFINITE,  /* nothing updated                              */
    DTX_STEP_GRAD_NONFINITE,  /* nothing updated                              */
    DTX_STEP_ERROR            /* dtx_last_error() says what                   */
} dtx_step_result;


/* One optimizer step: accum micro-batches of batch rows sampled, the needle
 * mixture applied, forward and backward (gradients averaged), then AdamW. */
dtx_step_result dtx_trainer_step(dtx_trainer *t, dtx_step_stats *s);
/* The validation loss: the mean over eval_batches batches read in order from
 * the start of the validation tokens (wrapping): the same for the same
 * weights. Touches neither the sampler nor the weights. DTX_STEP_DONE,
 * DTX_STEP_INTERRUPTED or DTX_STEP_ERROR (also with no validation stream). */
dtx_step_result dtx_trainer_evaluate(dtx_trainer *t, double *val);

#endif
