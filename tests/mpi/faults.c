/* faults.c: one rank misbehaves around an MPI_Allreduce that a preloaded collc library runs.
 *
 *   mpiexec -n P ./faults MODE COUNT
 *
 * Every rank calls MPI_Allreduce(MPI_FLOAT, MPI_SUM) on COUNT elements, three times,
 * except rank 1, which in MODE
 *   ok      behaves;
 *   exit    exits (status 3) before the first call, without MPI_Finalize;
 *   stop    sleeps for a minute instead of calling (a rank that hangs elsewhere);
 *   count   passes COUNT + 8 elements;
 *   short   passes COUNT - 8 elements;
 *   zero    passes 0 elements (returns at once and goes on to MPI_Finalize);
 *   nan     puts a NaN into its input.
 * Rank 0 prints "done" after the calls.  The test expects every fault to end every
 * rank with an error, within the time the test allows, never a hang.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

int main(int argc, char **argv)
{
    int rank;
    long count;
    const char *mode;
    float *in, *out;
    if (argc != 3) {
        fprintf(stderr, "usage: faults MODE COUNT\n");
        return 2;
    }
    mode = argv[1];
    count = atol(argv[2]);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    in = calloc((size_t)count + 16, sizeof *in);
    out = calloc((size_t)count + 16, sizeof *out);
    for (long i = 0; i < count + 16; i++) in[i] = (float)((i * 7 + rank * 3) % 11) / 11.0f - 0.5f;
    if (rank == 1) {
        if (strcmp(mode, "exit") == 0) exit(3);
        if (strcmp(mode, "stop") == 0) sleep(60);
        if (strcmp(mode, "count") == 0) count += 8;
        if (strcmp(mode, "short") == 0) count -= 8;
        if (strcmp(mode, "zero") == 0) count = 0;
        if (strcmp(mode, "nan") == 0) in[count / 2] = NAN;
    }
    for (int k = 0; k < 3; k++) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("done\n");
    MPI_Finalize();
    return 0;
}
