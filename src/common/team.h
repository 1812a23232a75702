/* A team of spinning threads for a decode step's short parallel work (the
 * one-row products and the attention over the KV cache).
 *
 * Why not OpenMP there: a decode step of a small model runs ~60 parallel
 * regions of 10–50 µs each, and starting and joining an OpenMP team costs
 * 3.6 µs on these 2-core VMs (libgomp, Zen 5, 2026-12-04; a barrier inside a
 * region 1.7 µs), a team whose threads spin on one word 0.8 µs (the two
 * cache-line handoffs between the cores). Everything else (training,
 * prefill, oneDNN) stays on OpenMP.
 *
 * dtx_team_run(fn, arg) runs fn(arg, id, nt) for id 0 .. nt − 1, id 0 on the
 * calling thread, and returns when all have returned; nt is the calling
 * thread's omp_get_max_threads() (so OMP_NUM_THREADS and omp_set_num_threads
 * rule both), at most the CPUs the process may run on and DTX_TEAM_MAX. It runs fn(arg, 0, 1) on the caller
 * alone instead when that is 1, inside an OpenMP region or another run's
 * task, or while another thread's run holds the team; so a task must give
 * the same result for any nt. The workers start at the first run (and again
 * in a forked child); after a run they spin for about DTX_TEAM_SPIN_S, then
 * sleep on a futex until the next. They live as long as the process: a
 * program that dlcloses the library after a decode step must not. */
#ifndef DTX_TEAM_H
#define DTX_TEAM_H

#include <stdatomic.h>
#include <stdint.h>

enum { DTX_TEAM_MAX = 64 };
#define DTX_TEAM_SPIN_S 2e-4

typedef void (*dtx_team_fn)(void *arg, int id, int nt);

void dtx_team_run(dtx_team_fn fn, void *arg);
/* Inside a task: returns when all nt threads of the run have reached it
 * (a no-op when nt is 1). Every task of a run must reach it equally often. */
void dtx_team_barrier(void);
/* The threads a run started here now would use (1 when it would run alone). */
int dtx_team_size(void);

/* A decode step's parallel work goes to the team only. OpenMP's workers
 * spin for milliseconds after each region (libgomp's default wait policy),
 * so one OpenMP region inside a step leaves three spinning threads on two
 * cores, and the team's handoffs wait for time slices: a batched step of 16
 * sequences, whose SwiGLU had crossed DTX_PAR_MIN, ran 2.5x slower. The
 * step marks itself on its thread (dtx_team_step(1) returns the previous
 * mark, to be given back at its end); inside, the elementwise kernels
 * (DTX_PAR_FOR) run on the calling thread whatever their size. */
int dtx_team_step(int on);
int dtx_team_in_step(void);

/* Work split over a run's threads with stealing: n items (n < 2^31) in nb
 * blocks, one per thread, each a contiguous run that the hardware
 * prefetchers follow. A thread takes its own block from the front, then the
 * others' from the back, so the one that finishes first does not wait while
 * the two cores' shares of the memory bandwidth move. A front take gets a
 * quarter of what is left, at least chunk and at most cap; a back take gets
 * chunk; every boundary but n is a multiple of align (a power of two). Each
 * block is [lo, hi) packed in one word, taken by compare-and-swap. Blocks
 * are set for the team size asked for; a run that came out smaller leaves
 * blocks that its threads take from the back. */
typedef struct {
    _Alignas(64) _Atomic uint64_t range;
} dtx_team_block;
void dtx_team_blocks_init(dtx_team_block *b, int nb, int64_t n, int64_t align);
/* 1 and [*lo, *hi) for thread id, or 0 when every block is empty. */
int dtx_team_take(dtx_team_block *b, int nb, int id, int64_t chunk, int64_t cap, int64_t align, int64_t *lo,
                  int64_t *hi);

#endif
