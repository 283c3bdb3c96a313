/* allreduce_pmpi.c: MPI_Allreduce as interposed by a preloaded collc library against the MPI library's
 * own PMPI_Allreduce, side by side in the same process, called from C (no Python on the timed path).
 *
 *   mpiexec -n P -genv LD_PRELOAD libcollc_X.so ./allreduce_pmpi ROUNDS BUDGET_BYTES SIZE [SIZE...]
 *
 * For each round and size (bytes of float32), both are timed OSU-style (a barrier, then the call; the mean
 * over iterations on each rank, averaged over ranks), alternating which goes first; rank 0 prints
 *   row ROUND SIZE NATIVE_US COLLC_US WRONG
 * WRONG counts elements where the two results differ: inputs are small integers, so float sums are exact
 * in any order and must agree bit for bit.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double timed(int interposed, const float *in, float *out, int n, int iters)
{
    double total = 0;
    for (int i = 0; i < iters + 5; i++) {
        double start;
        PMPI_Barrier(MPI_COMM_WORLD);
        start = MPI_Wtime();
        if (interposed)
            MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
            PMPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (i >= 5) total += MPI_Wtime() - start;
    }
    return total / iters;
}

int main(int argc, char **argv)
{
    int rank, size, rounds;
    long long budget;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: %s ROUNDS BUDGET_BYTES SIZE [SIZE...]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    rounds = atoi(argv[1]);
    budget = atoll(argv[2]);
    for (int round = 0; round < rounds; round++) {
        for (int a = 3; a < argc; a++) {
            long long bytes = atoll(argv[a]);
            int n = (int)(bytes / 4), iters;
            float *in = malloc((size_t)n * 4 + 4), *ref = malloc((size_t)n * 4 + 4), *out = malloc((size_t)n * 4 + 4);
            double t[2], sum[2];
            long long wrong = 0, all_wrong = 0;
            iters = (int)(budget / (bytes > 0 ? bytes : 1));
            if (iters < 5) iters = 5;
            if (iters > 2000) iters = 2000;
            for (int i = 0; i < n; i++) in[i] = (float)((rank * 31 + i) % 7);
            for (int k = 0; k < 2; k++) {
                int interposed = (k + round + a) % 2;
                t[interposed] = timed(interposed, in, interposed ? out : ref, n, iters);
            }
            for (int i = 0; i < n; i++) wrong += memcmp(&out[i], &ref[i], 4) != 0;
            PMPI_Reduce(t, sum, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            PMPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0)
                printf("row %d %lld %.3f %.3f %lld\n", round, bytes, sum[0] / size * 1e6, sum[1] / size * 1e6, all_wrong);
            fflush(stdout);
            free(in);
            free(ref);
            free(out);
        }
    }
    MPI_Finalize();
    return 0;
}
