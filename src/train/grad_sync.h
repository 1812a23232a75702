/* The gradient's sum over ranks in buckets, each started as soon as the
 * backward pass has finished writing it (dtx_model_on_grads_ready), on a
 * thread of its own: the sums of the last layers run while the backward of
 * the first ones still computes (the buckets of llm.c and PyTorch's DDP).
 * The ranges arrive in descending order and contiguous; a bucket is posted
 * once it holds at least `bucket` values, the rest at the end. Every rank
 * posts the same buckets in the same order (the boundaries depend on the
 * model's layout and the bucket size alone), so the collectives match.
 * Where the transport allows no second thread (dtx_comm_threads_ok) a
 * bucket is summed when posted, on the caller's thread. Internal header. */
#ifndef DTX_TRAIN_GRAD_SYNC_H
#define DTX_TRAIN_GRAD_SYNC_H

#include <stddef.h>

#include "difftx.h"
#include "train/comm.h"

typedef struct grad_sync grad_sync;

/* bucket: values per bucket; 0 sums the whole gradient at the end, in one
 * collective after the backward (no overlap). */
dtx_status grad_sync_open(grad_sync **out, dtx_comm *c, size_t bucket);
/* A step's sums of g [n]: all-reduced (at NULL), or reduce-scattered over
 * the ranges at (ZeRO-1; at [ranks + 1], borrowed until grad_sync_end). */
void grad_sync_begin(grad_sync *s, dtx_real *g, size_t n, const size_t *at);
/* g [lo, hi) is final (a dtx_grads_ready_fn; ctx is the grad_sync). */
void grad_sync_ready(void *ctx, size_t lo, size_t hi);
/* Posts what is left and waits for every bucket: the first failure, after
 * every bucket ran (the ranks stay in step). *wait_s: the seconds this
 * thread waited for sums (here, and in grad_sync_ready when unthreaded);
 * *sum_s: the seconds the sums took, wherever they ran. */
dtx_status grad_sync_end(grad_sync *s, double *wait_s, double *sum_s);
void grad_sync_close(grad_sync *s);

#endif
