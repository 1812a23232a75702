/* Ranks and the all-reduce (comm.h): one rank, or local ranks (threads). */
#include "train/comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

typedef struct {
    int size;
    pthread_barrier_t barrier;
    const void *volatile *slot; /* [size] each rank's buffer during a reduction */
} local_group;

struct dtx_comm {
    int rank, size;
    local_group *group;
};

int dtx_comm_rank(const dtx_comm *c) { return c ? c->rank : 0; }
int dtx_comm_size(const dtx_comm *c) { return c ? c->size : 1; }

/* Local ranks: publish the buffer, wait for all, sum every rank's in rank
 * order into a private copy, wait until all have read, then write it back. */
#define LOCAL_ALLREDUCE(T)                                                                                    \
    T *sum = malloc(sizeof(T) * (n ? n : 1));                                                                 \
    int ok = sum != NULL;                                                                                     \
    g->slot[c->rank] = ok ? (const void *)buf : NULL;                                                         \
    pthread_barrier_wait(&g->barrier);                                                                        \
    for (int r = 0; r < g->size; r++) ok &= g->slot[r] != NULL;                                               \
    if (ok) {                                                                                                 \
        memcpy(sum, (const T *)g->slot[0], sizeof(T) * n);                                                    \
        for (int r = 1; r < g->size; r++) {                                                                   \
            const T *b = (const T *)g->slot[r];                                                               \
            for (size_t i = 0; i < n; i++) sum[i] += b[i];                                                    \
        }                                                                                                     \
    }                                                                                                         \
    pthread_barrier_wait(&g->barrier);                                                                        \
    if (ok) memcpy(buf, sum, sizeof(T) * n);                                                                  \
    free(sum);                                                                                                \
    return ok ? DTX_OK : dtx_fail(DTX_ERR_NOMEM, "all-reduce of %zu values: out of memory on a rank", n);

dtx_status dtx_comm_allreduce_real(dtx_comm *c, dtx_real *buf, size_t n) {
    if (!c || c->size == 1) return DTX_OK;
    local_group *g = c->group;
    LOCAL_ALLREDUCE(dtx_real)
}

dtx_status dtx_comm_allreduce_f64(dtx_comm *c, double *buf, size_t n) {
    if (!c || c->size == 1) return DTX_OK;
    local_group *g = c->group;
    LOCAL_ALLREDUCE(double)
}

dtx_status dtx_comm_local_create(int size, dtx_comm **out) {
    if (size < 1) return dtx_fail(DTX_ERR_ARG, "a group of %d ranks", size);
    local_group *g = calloc(1, sizeof *g);
    dtx_comm *c = calloc((size_t)size, sizeof *c);
    const void **slot = calloc((size_t)size, sizeof *slot);
    if (!g || !c || !slot || pthread_barrier_init(&g->barrier, NULL, (unsigned)size) != 0) {
        free(g), free(c), free(slot);
        return dtx_fail(DTX_ERR_NOMEM, "out of memory for %d local ranks", size);
    }
    g->size = size;
    g->slot = (const void *volatile *)slot;
    for (int r = 0; r < size; r++) {
        c[r].rank = r, c[r].size = size, c[r].group = g;
        out[r] = &c[r];
    }
    return DTX_OK;
}

void dtx_comm_local_free(dtx_comm **ranks, int size) {
    if (size < 1 || !ranks[0]) return;
    local_group *g = ranks[0]->group;
    pthread_barrier_destroy(&g->barrier);
    free((void *)g->slot);
    free(g);
    free(ranks[0]); /* the array of every rank's communicator */
    for (int r = 0; r < size; r++) ranks[r] = NULL;
}
