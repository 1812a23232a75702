/* Ranks and the all-reduce (comm.h): one rank, or local ranks (threads). */
#include "train/comm.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "train/mpi_plugin.h"

typedef struct {
    int size;
    pthread_barrier_t barrier;
    const void *volatile *slot; /* [size] each rank's buffer during a reduction */
} local_group;

struct dtx_comm {
    int rank, size;
    local_group *group;     /* local ranks */
    const dtx_mpi_ops *mpi; /* MPI ranks */
    int serialized;         /* MPI granted MPI_THREAD_SERIALIZED */
    int here;               /* the ranks on this machine (every one for local ranks) */
    void *plugin;           /* its dlopen handle */
};

int dtx_comm_rank(const dtx_comm *c) { return c ? c->rank : 0; }
int dtx_comm_size(const dtx_comm *c) { return c ? c->size : 1; }

/* Local ranks: publish the buffer, wait for all, sum every rank's values
 * [lo, lo + n) in rank order into a private copy, wait until all have read,
 * then write it back. */
#define LOCAL_SUM(T, lo, n)                                                                                   \
    local_group *g = c->group;                                                                                \
    T *sum = malloc(sizeof(T) * ((n) ? (n) : 1));                                                             \
    int ok = sum != NULL;                                                                                     \
    g->slot[c->rank] = ok ? (const void *)buf : NULL;                                                         \
    pthread_barrier_wait(&g->barrier);                                                                        \
    for (int r = 0; r < g->size; r++) ok &= g->slot[r] != NULL;                                               \
    if (ok) {                                                                                                 \
        memcpy(sum, (const T *)g->slot[0] + (lo), sizeof(T) * (n));                                           \
        for (int r = 1; r < g->size; r++) {                                                                   \
            const T *b = (const T *)g->slot[r] + (lo);                                                        \
            for (size_t i = 0; i < (n); i++) sum[i] += b[i];                                                  \
        }                                                                                                     \
    }                                                                                                         \
    pthread_barrier_wait(&g->barrier);                                                                        \
    if (ok) memcpy(buf + (lo), sum, sizeof(T) * (n));                                                         \
    free(sum);                                                                                                \
    return ok ? DTX_OK : dtx_fail(DTX_ERR_NOMEM, "a sum over ranks of %zu values: out of memory on a rank", (size_t)(n));

/* The plugin's operation on dtx_real values */
#ifdef DTX_DOUBLE
#define REAL_OP(name) name##_f64
#else
#define REAL_OP(name) name##_f32
#endif

static dtx_status mpi_failed(const dtx_comm *c, size_t n) {
    return dtx_fail(DTX_ERR_IO, "rank %d: the all-reduce of %zu values failed", c->rank, n);
}

dtx_status dtx_comm_allreduce_real(dtx_comm *c, dtx_real *buf, size_t n) {
    if (!c || c->size == 1) return DTX_OK;
    if (c->mpi) return c->mpi->REAL_OP(allreduce)(buf, n) ? mpi_failed(c, n) : DTX_OK;
    LOCAL_SUM(dtx_real, 0, n)
}

dtx_status dtx_comm_allreduce_f64(dtx_comm *c, double *buf, size_t n) {
    if (!c || c->size == 1) return DTX_OK;
    if (c->mpi) return c->mpi->allreduce_f64(buf, n) ? mpi_failed(c, n) : DTX_OK;
    LOCAL_SUM(double, 0, n)
}

void dtx_comm_ranges(size_t n, int size, size_t *at) {
    at[0] = 0;
    for (int r = 1; r < size; r++) {
        size_t a = n / 16 * (size_t)r / (size_t)size * 16;
        at[r] = a < at[r - 1] ? at[r - 1] : a;
    }
    at[size] = n;
}

dtx_status dtx_comm_reduce_scatter_part_real(dtx_comm *c, dtx_real *buf, const size_t *at, size_t lo, size_t hi) {
    if (!c || c->size == 1) return DTX_OK;
    if (c->mpi) return c->mpi->REAL_OP(reduce_scatter)(buf, at, lo, hi) ? mpi_failed(c, hi - lo) : DTX_OK;
    size_t a = dtx_range_clamp(at[c->rank], lo, hi), n = dtx_range_clamp(at[c->rank + 1], lo, hi) - a;
    LOCAL_SUM(dtx_real, a, n)
}

dtx_status dtx_comm_reduce_scatter_real(dtx_comm *c, dtx_real *buf, const size_t *at) {
    return dtx_comm_reduce_scatter_part_real(c, buf, at, 0, at[dtx_comm_size(c)]);
}

int dtx_comm_threads_ok(const dtx_comm *c) { return !c || !c->mpi || c->serialized; }

int dtx_comm_one_machine(const dtx_comm *c) { return !c || !c->mpi || c->here == c->size; }

dtx_status dtx_comm_allgather_real(dtx_comm *c, dtx_real *buf, const size_t *at) {
    if (!c || c->size == 1) return DTX_OK;
    if (c->mpi) return c->mpi->REAL_OP(allgather)(buf, at) ? mpi_failed(c, at[c->size]) : DTX_OK;
    local_group *g = c->group;
    g->slot[c->rank] = buf;
    pthread_barrier_wait(&g->barrier);
    /* each rank writes the others' ranges of its own buffer and reads their own ranges of theirs: no overlap */
    for (int r = 0; r < g->size; r++)
        if (r != c->rank)
            memcpy(buf + at[r], (const dtx_real *)g->slot[r] + at[r], sizeof(dtx_real) * (at[r + 1] - at[r]));
    pthread_barrier_wait(&g->barrier);
    return DTX_OK;
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

/* ---- MPI ranks, through the plugin */

int dtx_comm_launched_by_mpi(void) {
    static const char *const VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        if (getenv(VARS[i])) return 1;
    return 0;
}

dtx_status dtx_comm_mpi_open(dtx_comm **out) {
    *out = NULL;
    char path[PATH_MAX + 32];
    const char *env = getenv("DTX_MPI_PLUGIN");
    if (env && *env) snprintf(path, sizeof path, "%s", env);
    else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return dtx_fail(DTX_ERR_IO, "cannot find the running executable to load the MPI plugin beside it");
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(path, sizeof path, "%s/libdifftx_mpi.so", exe);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return dtx_fail(DTX_ERR_IO, "launched by an MPI launcher, but the MPI plugin %s does not load (%s): build "
                        "difftx with MPI installed (scripts/setup.sh installs it)", path, dlerror());
    const dtx_mpi_ops *(*get)(void) = (const dtx_mpi_ops *(*)(void))dlsym(h, "dtx_mpi_plugin");
    const dtx_mpi_ops *ops = get ? get() : NULL;
    if (!ops || ops->version != DTX_MPI_PLUGIN_VERSION) {
        dlclose(h);
        return dtx_fail(DTX_ERR_IO, "%s is not a difftx MPI plugin of version %d (rebuild difftx)", path,
                        DTX_MPI_PLUGIN_VERSION);
    }
    dtx_comm *c = calloc(1, sizeof *c);
    char why[512] = "";
    if (!c || ops->init(&c->rank, &c->size, &c->serialized, &c->here, why, sizeof why)) {
        free(c);
        return dtx_fail(DTX_ERR_IO, "MPI did not start: %s", c ? why : "out of memory");
    }
    c->mpi = ops, c->plugin = h;
    *out = c;
    return DTX_OK;
}

void dtx_comm_abort(dtx_comm *c, int code) {
    fflush(stdout), fflush(stderr);
    if (c && c->mpi) c->mpi->abort(code);
    exit(code);
}

void dtx_comm_mpi_close(dtx_comm *c) {
    if (!c || !c->mpi) return;
    c->mpi->finalize();
    free(c); /* the plugin stays loaded: MPI's libraries may still run at exit */
}
