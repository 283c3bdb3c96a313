/* Every rank of an MPI_Allreduce must get the same bits, also of a floating-point sum, whose last bits depend
 * on the order in which the ranks' values are combined.  For every placement of a large value and its negation
 * among ranks that hold a small one (the sum then depends on which partial sums absorb the small values), the
 * ranks allreduce float and double vectors and rank 0 compares every rank's result with its own, bit for bit.
 * Prints "same bits" and exits 0, or prints the first placements that differ and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 8

static int check(const void *mine, size_t size, int rank, int nranks, int a, int b, const char *what)
{
    unsigned char *all = NULL;
    int differ = 0;
    if (rank == 0) all = malloc(size * (size_t)nranks);
    MPI_Gather(mine, (int)size, MPI_BYTE, all, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 1; r < nranks; r++)
            if (memcmp(all, all + size * (size_t)r, size) != 0) {
                printf("%s: large values at ranks %d and %d: rank %d's sum differs from rank 0's\n", what, a, b, r);
                differ = 1;
                break;
            }
        free(all);
    }
    MPI_Bcast(&differ, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return differ;
}

int main(int argc, char **argv)
{
    int rank, nranks, errors = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int a = 0; a < nranks; a++)
        for (int b = a + 1; b < nranks; b++) {
            float f[N];
            double d[N];
            for (int i = 0; i < N; i++) {
                f[i] = rank == a ? 1e6f : rank == b ? -1e6f : 1e-2f;
                d[i] = rank == a ? 1e17 : rank == b ? -1e17 : 1.0;
            }
            MPI_Allreduce(MPI_IN_PLACE, f, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            MPI_Allreduce(MPI_IN_PLACE, d, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            errors += check(f, sizeof f, rank, nranks, a, b, "float");
            errors += check(d, sizeof d, rank, nranks, a, b, "double");
        }
    if (rank == 0 && errors == 0) printf("same bits\n");
    MPI_Finalize();
    return errors != 0;
}
