/* The spinning team (team.h). One run at a time: a run publishes its task
 * (fn, arg, nt) and bumps the generation word; each worker, spinning on that
 * word (or asleep on it as a futex), runs its share when id < nt and counts
 * itself done; the caller runs share 0 and waits for the count. Every worker
 * acknowledges every run, so none can read a later run's task for an earlier
 * generation. */
#include "common/team.h"

#include "common/common.h"

#include <limits.h>
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct {
    pthread_mutex_t lock; /* starting workers */
    int workers;          /* started and running: ids 1 .. workers */
    dtx_team_fn fn;       /* the current run's task */
    void *arg;
    int nt;
    _Alignas(64) _Atomic uint32_t gen; /* bumped to start a run; the sleepers' futex word */
    _Alignas(64) _Atomic int done;     /* workers through the current run */
    _Alignas(64) _Atomic int sleepers; /* workers asleep on gen (or about to be) */
    _Alignas(64) _Atomic int bar_count;
    _Atomic uint32_t bar_gen;
    _Alignas(64) atomic_flag busy; /* a run holds the team */
} T = {.lock = PTHREAD_MUTEX_INITIALIZER, .busy = ATOMIC_FLAG_INIT};

/* The nt of the run whose task this thread is running (1 when it runs alone), 0 outside any. */
static _Thread_local int tl_nt;
/* This thread is in a decode step (dtx_team_step). */
static _Thread_local int tl_step;

int dtx_team_step(int on) {
    const int prev = tl_step;
    tl_step = on != 0;
    return prev;
}

int dtx_team_in_step(void) { return tl_step; }

static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val) {
    return syscall(SYS_futex, (uint32_t *)w, op, val, NULL, NULL, 0);
}

/* Sleeps until gen moves past seen. The count goes up before gen is checked
 * again and the run bumps gen before it reads the count (both sequentially
 * consistent), so either the run sees a sleeper and wakes it, or the worker
 * sees the new generation; FUTEX_WAIT itself returns at once if gen moved. */
static void sleep_past(uint32_t seen) {
    atomic_fetch_add(&T.sleepers, 1);
    while (atomic_load(&T.gen) == seen) futex(&T.gen, FUTEX_WAIT_PRIVATE, seen);
    atomic_fetch_sub(&T.sleepers, 1);
}

/* arg: the worker's id and the generation when it was started (no run was
 * in flight then), packed. */
static void *worker(void *arg) {
    const uintptr_t a = (uintptr_t)arg;
    const int id = (int)(a & 0xFF);
    uint32_t seen = (uint32_t)(a >> 8);
    for (;;) {
        uint32_t g;
        unsigned spins = 0;
        double since = 0;
        while ((g = atomic_load_explicit(&T.gen, memory_order_acquire)) == seen) {
            spin_pause();
            if (++spins % 256) continue;
            double now = dtx_now_s();
            if (since == 0) since = now;
            else if (now - since > DTX_TEAM_SPIN_S) sleep_past(seen), since = 0;
        }
        seen = g;
        const int nt = T.nt;
        if (id < nt) {
            tl_nt = nt;
            T.fn(T.arg, id, nt);
            tl_nt = 0;
        }
        atomic_fetch_add_explicit(&T.done, 1, memory_order_release);
    }
    return NULL;
}

/* A forked child has none of the parent's workers, and a run the parent had
 * in flight on another thread never ends there (nor a start of workers: the
 * lock is made anew). */
static void after_fork_child(void) {
    pthread_mutex_init(&T.lock, NULL);
    T.workers = 0;
    atomic_store(&T.sleepers, 0);
    atomic_store(&T.done, 0);
    atomic_store(&T.bar_count, 0);
    atomic_flag_clear(&T.busy);
    tl_nt = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

/* At least n workers, started with every signal blocked (signals go to the
 * program's own threads). Called holding busy: no run is in flight. Returns
 * the workers running (fewer than n if a thread could not be started). */
static int ensure_workers(int n) {
    if (T.workers >= n) return T.workers;
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&T.lock);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    const uintptr_t gen = atomic_load(&T.gen);
    while (T.workers < n) {
        pthread_t th;
        if (pthread_create(&th, &at, worker, (void *)(gen << 8 | (uintptr_t)(T.workers + 1)))) break;
        T.workers++;
    }
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_unlock(&T.lock);
    return T.workers;
}

/* The CPUs this process may run on (at the first call): spinning threads
 * beyond them would wait for one another's time slices (OMP_NUM_THREADS=2
 * under `taskset -c 0` made every handoff a scheduler tick). */
static int cpus_allowed(void) {
    static _Atomic int n;
    int v = atomic_load_explicit(&n, memory_order_relaxed);
    if (v) return v;
    cpu_set_t set;
    v = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : DTX_TEAM_MAX;
    if (v < 1) v = 1;
    atomic_store_explicit(&n, v, memory_order_relaxed);
    return v;
}

int dtx_team_size(void) {
    if (tl_nt || omp_in_parallel()) return 1;
    int nt = omp_get_max_threads(), cpus = cpus_allowed();
    if (nt > cpus) nt = cpus;
    return nt < 1 ? 1 : nt > DTX_TEAM_MAX ? DTX_TEAM_MAX : nt;
}

static void run_alone(dtx_team_fn fn, void *arg) {
    const int saved = tl_nt;
    tl_nt = 1;
    fn(arg, 0, 1);
    tl_nt = saved;
}

void dtx_team_run(dtx_team_fn fn, void *arg) {
    int nt = dtx_team_size();
    if (nt <= 1 || atomic_flag_test_and_set_explicit(&T.busy, memory_order_acquire)) {
        run_alone(fn, arg);
        return;
    }
    const int w = ensure_workers(nt - 1);
    if (w + 1 < nt) nt = w + 1;
    if (nt <= 1) {
        atomic_flag_clear_explicit(&T.busy, memory_order_release);
        run_alone(fn, arg);
        return;
    }
    T.fn = fn, T.arg = arg, T.nt = nt;
    atomic_store_explicit(&T.done, 0, memory_order_relaxed);
    atomic_fetch_add(&T.gen, 1); /* publishes the task (sequentially consistent: see sleep_past) */
    if (atomic_load(&T.sleepers)) futex(&T.gen, FUTEX_WAKE_PRIVATE, INT_MAX);
    tl_nt = nt;
    fn(arg, 0, nt);
    tl_nt = 0;
    while (atomic_load_explicit(&T.done, memory_order_acquire) < w) spin_pause();
    atomic_flag_clear_explicit(&T.busy, memory_order_release);
}

void dtx_team_barrier(void) {
    const int nt = tl_nt;
    if (nt <= 1) return;
    const uint32_t g = atomic_load_explicit(&T.bar_gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&T.bar_count, 1, memory_order_acq_rel) == nt - 1) {
        atomic_store_explicit(&T.bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&T.bar_gen, 1, memory_order_release);
    } else {
        while (atomic_load_explicit(&T.bar_gen, memory_order_acquire) == g) spin_pause();
    }
}

/* ------------------------------------------------------------ stealing */

static uint64_t pack_range(int64_t lo, int64_t hi) { return (uint64_t)hi << 32 | (uint64_t)lo; }

void dtx_team_blocks_init(dtx_team_block *b, int nb, int64_t n, int64_t align) {
    for (int t = 0; t < nb; t++) {
        const int64_t lo = (n * t / nb) & ~(align - 1), hi = t == nb - 1 ? n : (n * (t + 1) / nb) & ~(align - 1);
        atomic_init(&b[t].range, pack_range(lo, hi));
    }
}

/* A chunk from the front (back = 0) or the back of r: 1 and [*a, *b), or 0 when it is empty. */
static int take_from(dtx_team_block *r, int back, int64_t chunk, int64_t cap, int64_t align, int64_t *a, int64_t *b) {
    uint64_t v = atomic_load_explicit(&r->range, memory_order_relaxed), nv;
    do {
        const int64_t lo = (int64_t)(v & 0xFFFFFFFFu), hi = (int64_t)(v >> 32);
        if (lo >= hi) return 0;
        if (back) {
            const int64_t s = (hi - chunk) & ~(align - 1); /* hi may be n, not a multiple of align */
            *a = s > lo ? s : lo, *b = hi, nv = pack_range(lo, *a);
        } else { /* a quarter of what is left, at least a chunk: few takes, each with its own setup */
            int64_t take = ((hi - lo) / 4) & ~(align - 1);
            if (take < chunk) take = chunk;
            if (take > cap) take = cap;
            *a = lo, *b = lo + take < hi ? lo + take : hi, nv = pack_range(*b, hi);
        }
    } while (!atomic_compare_exchange_weak_explicit(&r->range, &v, nv, memory_order_relaxed, memory_order_relaxed));
    return 1;
}

int dtx_team_take(dtx_team_block *b, int nb, int id, int64_t chunk, int64_t cap, int64_t align, int64_t *lo,
                  int64_t *hi) {
    if (id < nb && take_from(&b[id], 0, chunk, cap, align, lo, hi)) return 1;
    for (int o = 1; o <= nb; o++)
        if (take_from(&b[(id + o) % nb], 1, chunk, cap, align, lo, hi)) return 1;
    return 0;
}
