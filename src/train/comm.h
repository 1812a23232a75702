/* The ranks of a data-parallel run and the collectives training needs:
 * in-place sums over every rank (all-reduce, and ZeRO-1's reduce-scatter
 * and all-gather). A NULL communicator is one
 * rank, and every call on it returns at once. "local" ranks are threads of
 * one process sharing memory (each rank's trainer on its own thread): the
 * transport the tests use to check that the number of ranks changes nothing
 * but the speed, on any machine. Sums are taken in rank order, so every
 * rank holds the same bits afterwards. Every rank must make the same calls
 * in the same order (a collective waits for all). */
#ifndef DTX_TRAIN_COMM_H
#define DTX_TRAIN_COMM_H

#include <stddef.h>

#include "difftx.h"

/* (dtx_comm, its rank and size, the MPI kind's opening, closing and abort,
 * and the sum of doubles are public: difftx.h "training".) */

/* buf [n] := the sum of every rank's buf [n], in rank order. */
dtx_status dtx_comm_allreduce_real(dtx_comm *c, dtx_real *buf, size_t n);

/* Ranges: rank r owns [at[r], at[r + 1]) of an n-value buffer (at[0] = 0,
 * at[size] = n). Reduce-scatter: rank r's range of buf := the sum over
 * every rank of that range (the rest of buf is left undefined). All-gather:
 * every rank's buf := each rank's own range, put together. */
dtx_status dtx_comm_reduce_scatter_real(dtx_comm *c, dtx_real *buf, const size_t *at);
dtx_status dtx_comm_allgather_real(dtx_comm *c, dtx_real *buf, const size_t *at);
/* The reduce-scatter of the part [lo, hi) of buf alone: rank r's range
 * within it := the sum over every rank (the rest of the part undefined). */
dtx_status dtx_comm_reduce_scatter_part_real(dtx_comm *c, dtx_real *buf, const size_t *at, size_t lo, size_t hi);
/* Whether the collectives may run on another thread than the one that
 * opened the communicator (one thread at a time): local ranks always, MPI
 * where it granted MPI_THREAD_SERIALIZED. */
int dtx_comm_threads_ok(const dtx_comm *c);
/* Whether every rank runs on this machine (local ranks; MPI ranks that
 * share memory, MPI_COMM_TYPE_SHARED). */
int dtx_comm_one_machine(const dtx_comm *c);
/* The ranges for n values over size ranks: as equal as can be, multiples
 * of 16 values but the last (at [size + 1]). */
void dtx_comm_ranges(size_t n, int size, size_t *at);

/* size communicators of one group of local ranks: out[r] is rank r's,
 * for its thread. Freed together. */
dtx_status dtx_comm_local_create(int size, dtx_comm **out);
void dtx_comm_local_free(dtx_comm **ranks, int size);

#endif
