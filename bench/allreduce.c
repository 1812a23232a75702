/* The all-reduce that data-parallel training does (difftx train under
 * mpirun: the gradient, fp32, in place): time and bandwidth by size, on
 * whatever links the ranks (loopback / shared memory on one machine).
 *
 *   mpirun -np 2 build/bench/allreduce [MAX_MB]        (make bench-mpi)
 *
 * Per size: the best of 5 in-place MPI_Allreduce calls (after one warm-up),
 * the algorithm bandwidth (bytes / time) and the bus bandwidth
 * (2 (N - 1) / N · bytes / time, what a ring moves per rank: the number to
 * compare with a link's speed). Rank 0 prints a Markdown table. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max_mb = argc > 1 ? atol(argv[1]) : 256;
    if (max_mb < 1) max_mb = 1;
    size_t max_n = (size_t)max_mb << 18; /* floats */
    float *buf = malloc(sizeof(float) * max_n);
    if (!buf) {
        fprintf(stderr, "allreduce: out of memory for %ld MB\n", max_mb);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < max_n; i++) buf[i] = (float)(i % 7);
    if (rank == 0) {
        printf("| MB | ranks | best of 5 | algorithm GB/s | bus GB/s |\n|---:|---:|---:|---:|---:|\n");
        fflush(stdout);
    }
    for (size_t n = (size_t)1 << 18; n <= max_n; n *= 4) {
        double best = 1e30;
        for (int rep = -1; rep < 5; rep++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double dt = MPI_Wtime() - t0;
            MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank's */
            if (rep >= 0 && dt < best) best = dt;
        }
        double bytes = 4.0 * (double)n;
        if (rank == 0)
            printf("| %.0f | %d | %.2f ms | %.2f | %.2f |\n", bytes / (1 << 20), size, 1e3 * best, bytes / best / 1e9,
                   2.0 * (size - 1) / size * bytes / best / 1e9);
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
