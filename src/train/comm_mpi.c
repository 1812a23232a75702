/* The MPI plugin (mpi_plugin.h): built by the Makefile with mpicc into
 * libdifftx_mpi.so beside difftx when MPI is installed; not part of
 * libdifftx.a. All-reduces go in chunks of at most 2^30 values (MPI counts
 * are ints). */
#include <mpi.h>
#include <stdio.h>

#include "train/mpi_plugin.h"

static int init(int *rank, int *size, char *why, size_t cap) {
    int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, s, &n);
        snprintf(why, cap, "MPI_Init_thread: %s", s);
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
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

static int allreduce_f32(float *buf, size_t n) { return reduce(buf, n, MPI_FLOAT, sizeof(float)); }
static int allreduce_f64(double *buf, size_t n) { return reduce(buf, n, MPI_DOUBLE, sizeof(double)); }
static void abort_all(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
static void finalize(void) { MPI_Finalize(); }

const dtx_mpi_ops *dtx_mpi_plugin(void) {
    static const dtx_mpi_ops ops = {DTX_MPI_PLUGIN_VERSION, init, allreduce_f32, allreduce_f64, abort_all, finalize};
    return &ops;
}
