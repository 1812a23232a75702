/* Training checkpoints (docs/training.md): everything a training run needs to
 * continue bit-identically, in one safetensors file.
 *
 *   tensors       the model's tensors under their interop names (as in a
 *                 model file), and the AdamW moments as optim.m.<name> and
 *                 optim.v.<name>; all F32, so nothing is rounded
 *   __metadata__  the model config under the keys of a model file (format,
 *                 arch, dim, ..., tie_embeddings), checkpoint_version, step,
 *                 rng (the batch sampler's 4 state words, 16 hex digits each,
 *                 space-separated), the optimizer config (lr, min_lr,
 *                 warmup_steps, total_steps, schedule, beta1, beta2, eps,
 *                 weight_decay, decay_embeddings, clip_norm), the unknown
 *                 metadata of the model (model_meta.<key>), and whatever keys
 *                 the caller adds (difftx train: data, batch, seq, ...)
 *
 * A checkpoint is not a model file (dtx_model_load refuses its optim.*
 * tensors); difftx train writes the final model separately. Writes are atomic
 * (temporary file, fsync, rename). Not part of the public API. */
#ifndef DTX_TRAIN_CHECKPOINT_H
#define DTX_TRAIN_CHECKPOINT_H

#include "common/common.h"

#define DTX_CKPT_VERSION 1
/* The keys dtx_ckpt_describe fills. */
#define DTX_CKPT_N_DESCRIBE 29
#define DTX_CKPT_VALUE_MAX 96

/* The metadata for model config c and optimizer config o, formatted exactly
 * as a checkpoint stores it: keys[i] gets a static string, vals[i] its value.
 * Returns DTX_CKPT_N_DESCRIBE. Callers compare a run with a checkpoint by
 * these strings (numbers are written with %.17g, which round-trips). The
 * variant keys (subln, lambda_init, v2_lambda) are always written here; a checkpoint
 * written before they existed lacks them, and dtx_ckpt_meta then answers
 * their defaults. */
int dtx_ckpt_describe(const dtx_config *c, const dtx_optim_config *o, const char **keys,
                      char (*vals)[DTX_CKPT_VALUE_MAX]);

/* Writes the checkpoint of model m, optimizer opt (its config, moments and
 * step count) and sampler state rng to path, atomically. extra: n_extra
 * caller keys and values added to __metadata__ (none may repeat a key of the
 * checkpoint's own). DTX_ERR_IO with "path: what: strerror" when the file
 * cannot be written. */
dtx_status dtx_ckpt_save(const char *path, const dtx_model *m, const dtx_optimizer *opt, const dtx_rng *rng,
                         const char *const *extra_keys, const char *const *extra_values, int n_extra);

/* A loaded checkpoint. model and opt belong to it until taken (set the field
 * to NULL after taking one; dtx_ckpt_free frees what is left). */
typedef struct {
    dtx_model *model;
    dtx_optimizer *opt;   /* bound to model */
    dtx_rng rng;
    int64_t step;         /* optimizer steps done */
    int n_meta;
    char **meta_keys, **meta_values; /* every __metadata__ entry */
} dtx_ckpt;

/* Reads and checks a checkpoint: version, every metadata key it needs
 * (parsed strictly), the configs (validated), exactly the model's tensors
 * plus both moments of each, with the config's shapes, all F32. Each refusal
 * is one line naming the file and the key or tensor (DTX_ERR_IO,
 * DTX_ERR_FORMAT, DTX_ERR_NOMEM). On failure *ck is empty (safe to free). */
dtx_status dtx_ckpt_load(dtx_ckpt *ck, const char *path);
/* A metadata value, NULL when absent. */
const char *dtx_ckpt_meta(const dtx_ckpt *ck, const char *key);
void dtx_ckpt_free(dtx_ckpt *ck);

/* Optimizer state access for checkpoints (src/train/optim.c). */
const dtx_optim_config *dtx_optimizer_config(const dtx_optimizer *opt);
/* The first and second moments: flat buffers parallel to the parameters
 * (dtx_tensor_info.offset applies). */
real *dtx_optimizer_moment1(dtx_optimizer *opt);
real *dtx_optimizer_moment2(dtx_optimizer *opt);
/* Sets the number of steps done (the schedule position and bias correction). */
void dtx_optimizer_set_steps(dtx_optimizer *opt, int64_t steps);

#endif
