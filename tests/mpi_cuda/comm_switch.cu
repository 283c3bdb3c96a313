/* comm_switch.cu: one any-p mpi-cuda library (ring_allreduce) called on several communicators in one job.
 *
 * Built by tests/test_mpi_cuda_anyp.py with nvcc against the library, run on 4 ranks on the CPU stand-in for
 * CUDA.  In order: MPI_COMM_WORLD (4 ranks); a communicator of ranks 0 and 1 only (ranks 2 and 3 skip it);
 * the world again (every rank must use the world's duplicate, whichever communicator it used last); a split
 * of the world, freed after its call; a communicator of ranks 0..2 in reverse order (it may get the freed
 * one's handle: it must get its own duplicate and schedule); the world once more; the world after a release
 * (which frees the IPC mailboxes: the call sets them up again).  Each call sums int32
 * vectors whose total is known in closed form; every rank prints "<label> rank <r> of <n>: <wrong> wrong"
 * (or the library's error) and the program exits 1 when anything was wrong.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>
#include <mpi.h>

#include "collc_ring_allreduce_mpicuda.h"

enum { N = 1000 };

static int check(MPI_Comm comm, const char *label)
{
    int rank = 0, size = 0, wrong = 0, err;
    int host[N];
    int *dev = NULL;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int i = 0; i < N; i++) host[i] = (rank + 1) * (i % 7 + 1);
    if (cudaMalloc((void **)&dev, sizeof host) != cudaSuccess) return printf("%s: cudaMalloc failed\n", label), 1;
    cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
    err = collc_ring_allreduce_mpicuda_run(dev, N, 4 /* int32 */, 0 /* sum */, comm, NULL);
    if (err != 0) {
        printf("%s rank %d of %d: error %d: %s\n", label, rank, size, err, collc_ring_allreduce_mpicuda_last_error());
        return 1;
    }
    cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
    cudaFree(dev);
    for (int i = 0; i < N; i++) wrong += host[i] != size * (size + 1) / 2 * (i % 7 + 1);
    printf("%s rank %d of %d: %d wrong\n", label, rank, size, wrong);
    fflush(stdout);
    return wrong != 0;
}

int main(int argc, char **argv)
{
    int rank = 0, bad = 0;
    MPI_Comm pair, split, reversed;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    cudaSetDevice(0);
    bad |= check(MPI_COMM_WORLD, "world");
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
    if (pair != MPI_COMM_NULL) bad |= check(pair, "pair");
    bad |= check(MPI_COMM_WORLD, "world again");
    MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &split);
    bad |= check(split, "split");
    MPI_Comm_free(&split);
    MPI_Comm_split(MPI_COMM_WORLD, rank < 3 ? 0 : MPI_UNDEFINED, -rank, &reversed);
    if (reversed != MPI_COMM_NULL) bad |= check(reversed, "reversed");
    bad |= check(MPI_COMM_WORLD, "world last");
    collc_ring_allreduce_mpicuda_release();
    bad |= check(MPI_COMM_WORLD, "after release");
    if (rank == 0) printf("transport: %s\n", collc_ring_allreduce_mpicuda_transport());
    collc_ring_allreduce_mpicuda_release();
    MPI_Finalize();
    return bad;
}
