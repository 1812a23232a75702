/* The MPI transport as a plugin: libdifftx_mpi.so (built from
 * comm_mpi.c with mpicc when MPI is installed) exports dtx_mpi_plugin(),
 * and difftx loads it only when an MPI launcher started the process
 * (comm.c: dtx_comm_mpi_open). So difftx itself links no MPI library: a
 * plain run needs no MPI runtime, never calls MPI_Init, and runs as root
 * without OpenMPI's flags; only mpirun needs them. Internal header. */
#ifndef DTX_TRAIN_MPI_PLUGIN_H
#define DTX_TRAIN_MPI_PLUGIN_H

#include <stddef.h>

#define DTX_MPI_PLUGIN_VERSION 3

typedef struct {
    int version; /* DTX_MPI_PLUGIN_VERSION */
    /* MPI_Init_thread asking for MPI_THREAD_SERIALIZED; 0 and *rank, *size,
     * *serialized (whether MPI granted it: then any one thread at a time
     * may call MPI) and *here (the ranks on this rank's machine, itself
     * included: MPI_COMM_TYPE_SHARED) set, or nonzero and why */
    int (*init)(int *rank, int *size, int *serialized, int *here, char *why, size_t cap);
    /* in-place sums over every rank; 0 on success */
    int (*allreduce_f32)(float *buf, size_t n);
    int (*allreduce_f64)(double *buf, size_t n);
    /* ranges at [size + 1] as comm.h's, the part [lo, hi) of buf; 0 on success */
    int (*reduce_scatter_f32)(float *buf, const size_t *at, size_t lo, size_t hi);
    int (*reduce_scatter_f64)(double *buf, const size_t *at, size_t lo, size_t hi);
    int (*allgather_f32)(float *buf, const size_t *at);
    int (*allgather_f64)(double *buf, const size_t *at);
    void (*abort)(int code); /* every rank stops (MPI_Abort) */
    void (*finalize)(void);
} dtx_mpi_ops;

const dtx_mpi_ops *dtx_mpi_plugin(void);

/* x within [lo, hi]: where a rank's range meets the part [lo, hi) of a
 * reduce-scatter (both sides of the plugin use it) */
static inline size_t dtx_range_clamp(size_t x, size_t lo, size_t hi) { return x < lo ? lo : x > hi ? hi : x; }

#endif
