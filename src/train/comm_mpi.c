/* The MPI plugin (mpi_plugin.h): built by the Makefile with mpicc into
 * libdifftx_mpi.so beside difftx when MPI is installed; not part of
 * libdifftx.a. All-reduces go in chunks of at most 2^30 values (MPI counts
 * are ints). */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/mpi_plugin.h"

static int init(int *rank, int *size, int *serialized, int *here, char *why, size_t cap) {
    int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, s, &n);
        snprintf(why, cap, "MPI_Init_thread: %s", s);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    *serialized = provided >= MPI_THREAD_SERIALIZED;
    MPI_Comm node;
    *here = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, here);
        MPI_Comm_free(&node);
    }
    return 0;
}

static int reduce(void *buf, size_t n, MPI_Datatype t, size_t elem) {
    const size_t CHUNK = (size_t)1 << 30;
    for (size_t i = 0; i < n; i += CHUNK) {
        int c = (int)(n - i < CHUNK ? n - i : CHUNK);
        if (MPI_Allreduce(MPI_IN_PLACE, (char *)buf + i * elem, c, t, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            return 1;
    }
    return 0;
}

/* MPI counts and displacements of the ranges at within [lo, hi) (one int
 * per rank, displacements from lo); 0 when a count does not fit an int */
static int counts(const size_t *at, size_t lo, size_t hi, int *cnt, int *disp) {
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int r = 0; r < size; r++) {
        size_t a = dtx_range_clamp(at[r], lo, hi), b = dtx_range_clamp(at[r + 1], lo, hi);
        if (b - a > (size_t)INT_MAX || a - lo > (size_t)INT_MAX) return 0;
        cnt[r] = (int)(b - a), disp[r] = (int)(a - lo);
    }
    return 1;
}

static int reduce_scatter(void *buf, const size_t *at, size_t lo, size_t hi, MPI_Datatype t, size_t elem) {
    int size, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *part = (char *)buf + lo * elem;
    int *cnt = malloc(sizeof(int) * 2 * (size_t)size), ok = cnt && counts(at, lo, hi, cnt, cnt + size);
    /* in place, the rank's sum lands at the start of the part: moved to its range */
    ok = ok && MPI_Reduce_scatter(MPI_IN_PLACE, part, cnt, t, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
    if (ok) memmove(part + (size_t)cnt[size + rank] * elem, part, (size_t)cnt[rank] * elem);
    free(cnt);
    return !ok;
}

static int allgather(void *buf, const size_t *at, MPI_Datatype t) {
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *cnt = malloc(sizeof(int) * 2 * (size_t)size), ok = cnt && counts(at, 0, at[size], cnt, cnt + size);
    ok = ok && MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, cnt + size, t, MPI_COMM_WORLD) == MPI_SUCCESS;
    free(cnt);
    return !ok;
}

static int reduce_scatter_f32(float *buf, const size_t *at, size_t lo, size_t hi) {
    return reduce_scatter(buf, at, lo, hi, MPI_FLOAT, sizeof(float));
}
static int reduce_scatter_f64(double *buf, const size_t *at, size_t lo, size_t hi) {
    return reduce_scatter(buf, at, lo, hi, MPI_DOUBLE, sizeof(double));
}
static int allgather_f32(float *buf, const size_t *at) { return allgather(buf, at, MPI_FLOAT); }
static int allgather_f64(double *buf, const size_t *at) { return allgather(buf, at, MPI_DOUBLE); }

static int allreduce_f32(float *buf, size_t n) { return reduce(buf, n, MPI_FLOAT, sizeof(float)); }
static int allreduce_f64(double *buf, size_t n) { return reduce(buf, n, MPI_DOUBLE, sizeof(double)); }
static void abort_all(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
static void finalize(void) { MPI_Finalize(); }

const dtx_mpi_ops *dtx_mpi_plugin(void) {
    static const dtx_mpi_ops ops = {DTX_MPI_PLUGIN_VERSION, init,          allreduce_f32, allreduce_f64,
                                    reduce_scatter_f32,     reduce_scatter_f64, allgather_f32, allgather_f64,
                                    abort_all,              finalize};
    return &ops;
}
