/* Bucketed gradient sums over ranks on a thread of their own (grad_sync.h). */
#include "train/grad_sync.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"

enum { QUEUE = 256 }; /* buckets posted ahead of the thread, at most: the poster waits beyond */

struct grad_sync {
    dtx_comm *comm;
    size_t bucket;
    int threaded;
    /* the step */
    dtx_real *g;
    size_t n;
    const size_t *at;
    size_t pend_lo, pend_hi; /* final values not yet posted: [pend_lo, pend_hi) */
    double wait_s;
    /* the posted buckets not yet summed, a ring of [lo, hi) pairs: bucket i
     * (head <= i < tail) at q[2 (i % QUEUE)] and the next */
    size_t q[2 * QUEUE];
    size_t head, tail;
    double sum_s;
    dtx_status st;
    char err[512];
    int quit;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t posted, done;
};


/* One bucket's collective; records the first failure (the caller holds no lock). */
static void sum_bucket(grad_sync *s, size_t lo, size_t hi, dtx_status *st, char *err, size_t cap) {
    dtx_status r = s->at ? dtx_comm_reduce_scatter_part_real(s->comm, s->g, s->at, lo, hi)
                         : dtx_comm_allreduce_real(s->comm, s->g + lo, hi - lo);
    if (r && !*st) *st = r, snprintf(err, cap, "%s", dtx_last_error());
}

static void *worker(void *arg) {
    grad_sync *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == s->tail && !s->quit) pthread_cond_wait(&s->posted, &s->mu);
        if (s->head == s->tail) break;
        size_t lo = s->q[2 * (s->head % QUEUE)], hi = s->q[2 * (s->head % QUEUE) + 1];
        pthread_mutex_unlock(&s->mu);
        dtx_status st = DTX_OK;
        char err[512];
        double t0 = dtx_now_s();
        sum_bucket(s, lo, hi, &st, err, sizeof err);
        double dt = dtx_now_s() - t0;
        pthread_mutex_lock(&s->mu);
        s->sum_s += dt;
        if (st && !s->st) s->st = st, snprintf(s->err, sizeof s->err, "%s", err);
        s->head++;
        pthread_cond_signal(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

dtx_status grad_sync_open(grad_sync **out, dtx_comm *c, size_t bucket) {
    *out = NULL;
    grad_sync *s = calloc(1, sizeof *s);
    if (!s) return dtx_fail(DTX_ERR_NOMEM, "out of memory");
    s->comm = c, s->bucket = bucket ? bucket : SIZE_MAX;
    s->threaded = bucket && dtx_comm_size(c) > 1 && dtx_comm_threads_ok(c);
    if (s->threaded) {
        if (pthread_mutex_init(&s->mu, NULL) || pthread_cond_init(&s->posted, NULL) ||
            pthread_cond_init(&s->done, NULL) || pthread_create(&s->thread, NULL, worker, s)) {
            free(s);
            return dtx_fail(DTX_ERR_NOMEM, "cannot start the thread of the gradient's sums");
        }
    }
    *out = s;
    return DTX_OK;
}

void grad_sync_begin(grad_sync *s, dtx_real *g, size_t n, const size_t *at) {
    s->g = g, s->n = n, s->at = at;
    s->pend_lo = s->pend_hi = n;
    s->wait_s = s->sum_s = 0;
    s->st = DTX_OK;
    s->err[0] = 0;
}

/* Hands the pending range to the thread, or sums it here. */
static void post(grad_sync *s) {
    size_t lo = s->pend_lo, hi = s->pend_hi;
    if (lo == hi) return;
    s->pend_hi = lo;
    if (!s->threaded) {
        double t0 = dtx_now_s();
        sum_bucket(s, lo, hi, &s->st, s->err, sizeof s->err);
        s->wait_s += dtx_now_s() - t0, s->sum_s += dtx_now_s() - t0;
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (s->tail - s->head == QUEUE) {
        double t0 = dtx_now_s();
        while (s->tail - s->head == QUEUE) pthread_cond_wait(&s->done, &s->mu);
        s->wait_s += dtx_now_s() - t0;
    }
    s->q[2 * (s->tail % QUEUE)] = lo, s->q[2 * (s->tail % QUEUE) + 1] = hi;
    s->tail++;
    pthread_cond_signal(&s->posted);
    pthread_mutex_unlock(&s->mu);
}

/* The ranges continue downwards from what is pending (dtx_model_on_grads_ready's promise, tested in
 * tests/model/grads_ready_test.c): [lo, hi) with hi == pend_lo. */
void grad_sync_ready(void *ctx, size_t lo, size_t hi) {
    grad_sync *s = ctx;
    (void)hi;
    s->pend_lo = lo;
    if (s->pend_hi - s->pend_lo >= s->bucket) post(s);
}

dtx_status grad_sync_end(grad_sync *s, double *wait_s, double *sum_s) {
    s->pend_lo = 0; /* what was not reported yet (all of it, without the hook) */
    post(s);
    if (s->threaded) {
        double t0 = dtx_now_s();
        pthread_mutex_lock(&s->mu);
        while (s->head != s->tail) pthread_cond_wait(&s->done, &s->mu);
        pthread_mutex_unlock(&s->mu);
        s->wait_s += dtx_now_s() - t0;
    }
    *wait_s = s->wait_s, *sum_s = s->sum_s;
    return s->st ? dtx_fail(s->st, "%s", s->err) : DTX_OK;
}

void grad_sync_close(grad_sync *s) {
    if (!s) return;
    if (s->threaded) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        pthread_cond_signal(&s->posted);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->posted);
        pthread_cond_destroy(&s->done);
    }
    free(s);
}
