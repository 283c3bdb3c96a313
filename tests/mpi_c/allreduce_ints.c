/* allreduce_ints.c: the reproduction, an MPI program that knows nothing of collc.
 *
 * Every rank sums COUNT ints (argv[1], default 1700) with MPI_Allreduce and counts the elements that differ
 * from the exact sum; rank 0 prints "allreduce_ints: p=P count=COUNT wrong=W" (W over all ranks). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, p, wrong = 0, total = 0;
    const int count = argc > 1 ? atoi(argv[1]) : 1700;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    int *in = malloc(sizeof(int) * (size_t)(count > 0 ? count : 1));
    int *out = malloc(sizeof(int) * (size_t)(count > 0 ? count : 1));
    for (int i = 0; i < count; i++) in[i] = (rank + 1) * 1000 + i;
    MPI_Allreduce(in, out, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < count; i++) /* the sum over r of (r + 1) * 1000 + i */
        wrong += out[i] != 1000 * p * (p + 1) / 2 + p * i;
    MPI_Reduce(&wrong, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("allreduce_ints: p=%d count=%d wrong=%d\n", p, count, total);
    free(in), free(out);
    MPI_Finalize();
    return 0;
}
