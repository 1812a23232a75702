/* src/train/grad_sync.c over two local ranks: a bucket posted during the
 * backward is summed before grad_sync_end is called (the sums overlap the
 * pass: the proof is a sum seen complete while this thread still holds
 * ranges back), every value ends as the sum of the ranks', ZeRO-1's
 * reduce-scatter of parts leaves each rank its own range summed, and
 * without buckets nothing moves until the end. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "train/grad_sync.h"

enum { N = 1000, RANGES = 5 };

typedef struct {
    dtx_comm *comm;
    size_t bucket;
    const size_t *at;
    dtx_real g[N];
    int early; /* the first bucket was summed before the end */
    int ok;
} rank_arg;

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void *rank_main(void *p) {
    rank_arg *a = p;
    int r = dtx_comm_rank(a->comm);
    for (int i = 0; i < N; i++) a->g[i] = (dtx_real)(i + 1000 * r);
    grad_sync *s;
    if (grad_sync_open(&s, a->comm, a->bucket)) return NULL;
    grad_sync_begin(s, a->g, N, a->at);
    /* the ranges [800, 1000), [600, 800), ... as a backward reports them */
    grad_sync_ready(s, N - N / RANGES, N);
    /* the top range's sum, every rank's values added, without a later call here (up to 2 s; 0.1 s
     * without buckets, where it must not come) */
    const dtx_real want = (dtx_real)((N - 1) + (N - 1 + 1000));
    size_t top = N - 1;
    int own_top = !a->at || (a->at[r] <= top && top < a->at[r + 1]);
    for (int t = 0; t < (a->bucket ? 200 : 10) && own_top && !a->early; t++) {
        if (*(volatile dtx_real *)&a->g[top] == want) a->early = 1;
        else sleep_ms(10);
    }
    for (int k = RANGES - 2; k >= 0; k--) grad_sync_ready(s, (size_t)k * N / RANGES, (size_t)(k + 1) * N / RANGES);
    double wait = -1, sum = -1;
    a->ok = grad_sync_end(s, &wait, &sum) == DTX_OK && wait >= 0 && sum > 0;
    grad_sync_close(s);
    return NULL;
}

static void run(size_t bucket, const size_t *at, rank_arg a[2]) {
    dtx_comm *c[2];
    if (dtx_comm_local_create(2, c)) return;
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].comm = c[r], a[r].bucket = bucket, a[r].at = at;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    dtx_comm_local_free(c, 2);
}

static int summed(const dtx_real *g, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        if (g[i] != (dtx_real)(2 * i + 1000)) return 0;
    return 1;
}

TEST(grad_sync_buckets_overlap_and_sum) {
    static rank_arg a[2];
    run(N / RANGES, NULL, a);
    REQUIRE(a[0].ok && a[1].ok);
    CHECK(a[0].early && a[1].early);
    CHECK(summed(a[0].g, 0, N) && summed(a[1].g, 0, N));
}

TEST(grad_sync_zero1_parts) {
    static rank_arg a[2];
    static const size_t at[3] = {0, 432, N}; /* rank 1 owns the top bucket; the bucket [400, 600) is cut */
    run(N / RANGES, at, a);
    REQUIRE(a[0].ok && a[1].ok);
    CHECK(a[1].early);
    CHECK(summed(a[0].g, 0, 432) && summed(a[1].g, 432, N));
}

TEST(grad_sync_without_buckets_sums_at_the_end) {
    static rank_arg a[2];
    run(0, NULL, a);
    REQUIRE(a[0].ok && a[1].ok);
    CHECK(!a[0].early && !a[1].early);
    CHECK(summed(a[0].g, 0, N) && summed(a[1].g, 0, N));
}
