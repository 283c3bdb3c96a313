/* coll_pmpi.c: a collective as interposed by a preloaded collc library against the MPI library's own
 * (its PMPI_ entry point), side by side in the same process, called from C (no Python on the timed path).
 *
 *   mpiexec -n P -genv LD_PRELOAD libcollc_X.so ./coll_pmpi COLL TOL ROUNDS BUDGET_BYTES SIZE [SIZE...]
 *
 * COLL is allreduce, allgather or reduce_scatter (MPI_Reduce_scatter_block); SIZE is the bytes of float32 of
 * the whole vector (allreduce's vector, allgather's output, reduce-scatter's input), rounded down to a
 * multiple of P elements.  For each round and size both are timed OSU-style (a barrier, then the call; the
 * mean over iterations on each rank, averaged over ranks), alternating which goes first; rank 0 prints
 *   row ROUND SIZE NATIVE_US COLLC_US WRONG MAXERR
 * With TOL = 0 the inputs are small integers, so float sums are exact in any order and the two results must
 * agree bit for bit: WRONG counts the elements that differ.  With TOL > 0 (a lossy, compressed library) the
 * inputs are uniform in [-1, 1] and WRONG counts the elements more than TOL from the MPI library's result;
 * MAXERR is the largest difference over every rank.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { ALLREDUCE, ALLGATHER, REDUCE_SCATTER };

static void call(enum coll coll, int interposed, const float *in, float *out, int n, int p)
{
    switch (coll) {
    case ALLREDUCE:
        if (interposed)
            MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
            PMPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALLGATHER:
        if (interposed)
            MPI_Allgather(in, n / p, MPI_FLOAT, out, n / p, MPI_FLOAT, MPI_COMM_WORLD);
        else
            PMPI_Allgather(in, n / p, MPI_FLOAT, out, n / p, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case REDUCE_SCATTER:
        if (interposed)
            MPI_Reduce_scatter_block(in, out, n / p, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
            PMPI_Reduce_scatter_block(in, out, n / p, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    }
}

static double timed(enum coll coll, int interposed, const float *in, float *out, int n, int p, int iters)
{
    double total = 0;
    for (int i = 0; i < iters + 3; i++) {
        double start;
        PMPI_Barrier(MPI_COMM_WORLD);
        start = MPI_Wtime();
        call(coll, interposed, in, out, n, p);
        if (i >= 3) total += MPI_Wtime() - start;
    }
    return total / iters;
}

int main(int argc, char **argv)
{
    int rank, size, rounds;
    long long budget;
    double tol;
    enum coll coll;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 6) {
        if (rank == 0) fprintf(stderr, "usage: %s COLL TOL ROUNDS BUDGET_BYTES SIZE [SIZE...]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (strcmp(argv[1], "allreduce") == 0) {
        coll = ALLREDUCE;
    } else if (strcmp(argv[1], "allgather") == 0) {
        coll = ALLGATHER;
    } else if (strcmp(argv[1], "reduce_scatter") == 0) {
        coll = REDUCE_SCATTER;
    } else {
        if (rank == 0) fprintf(stderr, "%s: unknown collective %s (allreduce, allgather, reduce_scatter)\n", argv[0], argv[1]);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    tol = atof(argv[2]);
    rounds = atoi(argv[3]);
    budget = atoll(argv[4]);
    srand(1 + (unsigned)rank);
    for (int round = 0; round < rounds; round++) {
        for (int a = 5; a < argc; a++) {
            long long bytes = atoll(argv[a]);
            int n = (int)(bytes / 4) / size * size, iters;
            int in_n = coll == ALLGATHER ? n / size : n, out_n = coll == REDUCE_SCATTER ? n / size : n;
            float *in = malloc((size_t)in_n * 4 + 4), *ref = malloc((size_t)out_n * 4 + 4);
            float *out = malloc((size_t)out_n * 4 + 4);
            double t[2], sum[2], err = 0, max_err = 0;
            long long wrong = 0, all_wrong = 0;
            iters = (int)(budget / (bytes > 0 ? bytes : 1));
            if (iters < 3) iters = 3;
            if (iters > 2000) iters = 2000;
            for (int i = 0; i < in_n; i++)
                in[i] = tol > 0 ? (float)(2.0 * rand() / RAND_MAX - 1.0) : (float)((rank * 31 + i) % 7);
            for (int k = 0; k < 2; k++) {
                int interposed = (k + round + a) % 2;
                t[interposed] = timed(coll, interposed, in, interposed ? out : ref, n, size, iters);
            }
            for (int i = 0; i < out_n; i++) {
                double d = fabs((double)out[i] - (double)ref[i]);
                if (tol > 0) {
                    wrong += !(d <= tol);
                } else {
                    wrong += memcmp(&out[i], &ref[i], 4) != 0;
                }
                if (!(d <= err)) err = d;
            }
            PMPI_Reduce(t, sum, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            PMPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
            PMPI_Reduce(&err, &max_err, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0)
                printf("row %d %lld %.3f %.3f %lld %.3g\n", round, bytes, sum[0] / size * 1e6, sum[1] / size * 1e6,
                       all_wrong, max_err);
            fflush(stdout);
            free(in);
            free(ref);
            free(out);
        }
    }
    MPI_Finalize();
    return 0;
}
