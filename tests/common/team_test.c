/* src/common/team.c: the spinning team of the decode step. Every id of a run
 * runs once, the barrier separates phases, a nested run, a run while another
 * thread's holds the team, one thread, sleeping workers and a forked child
 * each run alone or wake as they should. On a 1-CPU machine the team is one
 * thread and the multi-thread checks are skipped. */
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/team.h"
#include "kernels/kernels.h"
#include "test.h"

typedef struct {
    _Atomic int calls[DTX_TEAM_MAX];
    _Atomic int nt_seen;
    _Atomic int phase_ok;
    int phase[DTX_TEAM_MAX];
    _Atomic int inner_alone;
} record;

static void mark(void *arg, int id, int nt) {
    record *r = arg;
    atomic_fetch_add(&r->calls[id], 1);
    atomic_store(&r->nt_seen, nt);
}

TEST(team_runs_every_id_once) {
    int nt = dtx_team_size();
    if (nt < 2) SKIP("one CPU here: the team is the calling thread");
    for (int rep = 0; rep < 1000; rep++) {
        record r = {0};
        dtx_team_run(mark, &r);
        CHECK(atomic_load(&r.nt_seen) == nt);
        for (int i = 0; i < DTX_TEAM_MAX; i++) CHECKF(atomic_load(&r.calls[i]) == (i < nt), "id %d ran %d times", i, atomic_load(&r.calls[i]));
        if (test_failed_now()) return;
    }
}

/* Three phases: each thread writes its own slot, then (after a barrier)
 * checks that every other slot holds the phase's value. */
static void phases(void *arg, int id, int nt) {
    record *r = arg;
    for (int p = 1; p <= 3; p++) {
        r->phase[id] = p;
        dtx_team_barrier();
        for (int i = 0; i < nt; i++)
            if (r->phase[i] < p) atomic_store(&r->phase_ok, 0);
        dtx_team_barrier();
    }
}

TEST(team_barrier_orders_phases) {
    if (dtx_team_size() < 2) SKIP("one CPU here: the team is the calling thread");
    for (int rep = 0; rep < 2000; rep++) {
        record r = {.phase_ok = 1};
        dtx_team_run(phases, &r);
        REQUIREF(atomic_load(&r.phase_ok), "a thread passed a barrier before the others wrote (repeat %d)", rep);
    }
}

static void inner(void *arg, int id, int nt) {
    record *r = arg;
    if (id == 0 && nt == 1) atomic_fetch_add(&r->inner_alone, 1);
}

static void outer(void *arg, int id, int nt) {
    (void)nt;
    record *r = arg;
    dtx_team_run(inner, r); /* nested: alone on this thread */
    atomic_fetch_add(&r->calls[id], 1);
}

TEST(team_nested_and_single_thread_run_alone) {
    record r = {0};
    const int nt = dtx_team_size();
    dtx_team_run(outer, &r);
    CHECK(atomic_load(&r.inner_alone) == nt);
    CHECK(dtx_team_size() == nt); /* back outside */
    /* one thread asked for: the caller alone, the barrier a no-op */
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    record s = {.phase_ok = 1};
    CHECK(dtx_team_size() == 1);
    dtx_team_run(phases, &s);
    CHECK(atomic_load(&s.phase_ok) && s.phase[0] == 3);
    dtx_team_run(mark, &s);
    CHECK(atomic_load(&s.nt_seen) == 1 && atomic_load(&s.calls[0]) == 1 && atomic_load(&s.calls[1]) == 0);
    omp_set_num_threads(saved);
    /* inside an OpenMP region: alone too */
    int alone = 1;
#pragma omp parallel num_threads(2) reduction(& : alone)
    alone &= dtx_team_size() == 1;
    CHECK(alone);
}

/* Two threads running teams at once: each run completes (one of them alone
 * while the other holds the team), every id of each run once. */
static void *runner(void *arg) {
    long *bad = arg;
    for (int rep = 0; rep < 3000; rep++) {
        record r = {0};
        dtx_team_run(mark, &r);
        int nt = atomic_load(&r.nt_seen), ok = nt >= 1;
        for (int i = 0; i < DTX_TEAM_MAX; i++) ok &= atomic_load(&r.calls[i]) == (i < nt);
        *bad += !ok;
    }
    return NULL;
}

TEST(team_concurrent_callers) {
    pthread_t t[2];
    long bad[2] = {0, 0};
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&t[i], NULL, runner, &bad[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECKF(bad[0] == 0 && bad[1] == 0, "%ld and %ld runs went wrong", bad[0], bad[1]);
}

TEST(team_wakes_sleeping_workers) {
    const int nt = dtx_team_size();
    for (int rep = 0; rep < 5; rep++) {
        usleep((useconds_t)(3 * DTX_TEAM_SPIN_S * 1e6)); /* past the spin: the workers sleep */
        record r = {0};
        dtx_team_run(mark, &r);
        for (int i = 0; i < nt; i++) CHECK(atomic_load(&r.calls[i]) == 1);
    }
}

TEST(team_runs_in_a_forked_child) {
    record r = {0};
    dtx_team_run(mark, &r); /* the parent's workers exist */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(20); /* a child whose run waited for the parent's workers would hang */
        record c = {0};
        dtx_team_run(mark, &c);
        int nt = atomic_load(&c.nt_seen), ok = nt == dtx_team_size();
        for (int i = 0; i < nt; i++) ok &= atomic_load(&c.calls[i]) == 1;
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
}

/* DTX_PAR_FOR: below DTX_PAR_MIN, or inside a decode step at any size, a
 * plain loop on the calling thread; else an OpenMP region. */
static void note_region(int *in_region, int64_t i) { in_region[i] = omp_in_parallel(); }

TEST(team_par_for_stays_off_openmp_in_a_step) {
    int in_region[4] = {0};
    DTX_PAR_FOR(DTX_PAR_MIN - 1, i, 4, note_region(in_region, i));
    for (int i = 0; i < 4; i++) CHECK(in_region[i] == 0);
    CHECK(dtx_team_step(1) == 0);
    DTX_PAR_FOR(DTX_PAR_MIN * 64, i, 4, note_region(in_region, i));
    for (int i = 0; i < 4; i++) CHECK(in_region[i] == 0);
    CHECK(dtx_team_step(0) == 1);
    if (omp_get_max_threads() < 2) SKIP("one OpenMP thread: every loop is plain");
    DTX_PAR_FOR(DTX_PAR_MIN * 64, i, 4, note_region(in_region, i));
    for (int i = 0; i < 4; i++) CHECK(in_region[i] == 1);
}
