/* A shard of the optimizer (ZeRO-1): the AdamW moments and the update of
 * one contiguous range [lo, hi) of the flat parameters, for the rank that
 * owns it; the ranks together update every parameter once. The step takes
 * the global gradient norm (the shards' squared norms summed over ranks),
 * so that clipping is that of the whole gradient. dtx_optimizer_init is the
 * shard [0, n_params). Internal header. */
#ifndef DTX_TRAIN_OPTIM_H
#define DTX_TRAIN_OPTIM_H

#include <stddef.h>

#include "difftx.h"

dtx_status dtx_optimizer_init_shard(dtx_optimizer **out, dtx_model *m, const dtx_optim_config *o, size_t lo,
                                    size_t hi);
/* hi, and *lo: the range it updates; its moments are [hi - lo] (moment1/2). */
size_t dtx_optimizer_shard(const dtx_optimizer *opt, size_t *lo);
/* The squared norm of the model's gradient over the shard's range. */
double dtx_optimizer_shard_grad_sq(const dtx_optimizer *opt);
/* The step with the whole gradient's norm given: the shard's parameters
 * updated, clipped by that norm. Fails (nothing updated) when it is not
 * finite. dtx_optimizer_step refuses a shard (its own norm would be the
 * shard's). */
dtx_status dtx_optimizer_step_norm(dtx_optimizer *opt, double norm, double *grad_norm_out, double *lr_used);

#endif
