/* collc_ring_allgather_mpicuda.h: the ring_allgather allgather for p=4, one MPI process per GPU, compiled by collc.
 *
 * Source: ring_allgather.coll (p=4, k=1), 4 chunks.
 *
 * Every rank of a communicator of 4 processes calls
 * collc_ring_allgather_mpicuda_run with its own device buffer (on the current
 * CUDA device); several ranks may share a GPU.  Messages between the ranks of
 * one host travel by CUDA IPC, device to device; between hosts over MPI:
 * device pointers go to MPI directly when it is CUDA-aware, otherwise they are
 * staged through pinned host buffers (docs/mpi-cuda.md).
 *
 * Buffers are in collc's logical element space (docs/ir-json.md): each holds
 * count elements (4 * count for an alltoall, whose space holds every
 * rank's send buffer), the chunks cut as collc.collectives.element_offsets
 * cuts them (collc_ring_allgather_mpicuda_layout gives the offsets).
 * Allgather: rank r's buffer starts with its block (the other blocks are not
 * read) and every buffer ends with every block.
 * Elements outside what the collective defines may be overwritten.
 *
 * dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16, 4 int32, 5 int64.
 * op:    0 sum, 1 prod, 2 max, 3 min (read by reducing collectives only, but
 *        checked always).
 *
 * collc_ring_allgather_mpicuda_run(buffer, count, dtype, op, comm, stream)
 *     runs the collective on this rank's part.  comm: 4 processes, all
 *     calling with the same count, dtype and op.  stream: a cudaStream_t
 *     (NULL: the legacy default stream).  When every rank shares the host
 *     and the schedule has no compression points, the whole call is enqueued
 *     on `stream` and returns at once (stream-ordered: the result is ready
 *     when `stream` gets there; it can be captured in a CUDA graph after a
 *     first call outside the capture); otherwise the call waits for the work
 *     queued on `stream`, returns once every message of this rank has moved,
 *     and `stream` waits for the last kernels (reductions of the final step).
 *     collc_..._mpicuda_check() waits for the last call under the watchdog
 *     (a plain cudaStreamSynchronize may wait forever for a dead rank).
 *     Returns 0, or
 *       -1  a bad argument (count, dtype, op, buffer, the communicator's size, a setting)
 *       -2  a CUDA call failed (no device, out of memory, ...)
 *       -4  an MPI call failed, or a message had another size than the schedule
 *           says (ranks called with different counts)
 *       -5  nothing moved for COLLC_TIMEOUT seconds (a rank died or stopped)
 *     with collc_ring_allgather_mpicuda_last_error() saying what happened.  After -4 or
 *     -5, MPI may still hold this call's buffers: end the job (MPI_Abort).
 * collc_ring_allgather_mpicuda_run_f: the same with a Fortran communicator handle
 *     (MPI_Comm_c2f; mpi4py's comm.py2f()), for callers through ctypes.
 *
 * collc_ring_allgather_mpicuda_run_v(buffer, counts, dtype, op, comm, stream)
 *     the same collective with counts given at run time, on the same
 *     schedule (its chunks hold any number of elements):
 *     counts: p counts >= 0, counts[r] the elements of rank r's block.  Every
 *     buffer holds their sum: the blocks end to end in rank order, each cut
 *     into its nchunks / p chunks as equal as possible, the first ones one
 *     element longer (collc_ring_allgather_mpicuda_layout_v(counts, offsets)
 *     gives the offsets).
 *     Rank r's buffer starts with its block; every buffer ends with every
 *     block (an allgatherv).
 *     Schedules with chunk weights or compression points refuse it (-1):
 *     their chunks are cut otherwise.
 *     Every rank must pass the same counts: before anything moves, the
 *     ranks compare them (one MPI_Iallreduce, also when all are 0), and
 *     counts, dtypes or ops that differ fail every rank with -4.  Returns
 *     as _run does; -1 also for a NULL or negative count.
 * collc_ring_allgather_mpicuda_run_v_f: the same with a Fortran communicator handle.
 *
 * collc_ring_allgather_mpicuda_check()
 *     waits for the last run; returns 0, -2, or -3 when a codec refused a
 *     value (not finite, or beyond its range; last_error names the element).
 *
 * Environment, read at the first call on a communicator:
 *     COLLC_TRANSPORT      auto (default): CUDA IPC with the ranks of this
 *                          host, MPI with the others; ipc: every rank on
 *                          this host; mpi: MPI with every rank
 *     COLLC_CUDA_AWARE     1: MPI takes device pointers; 0: stage through
 *                          pinned host memory; auto (default): ask MPI
 *                          (MPIX_Query_cuda_support, where it has it)
 *     COLLC_SEGMENT_BYTES  bytes per message and IPC mailbox slot (default
 *                          4194304; the same on every rank)
 *     COLLC_TIMEOUT        seconds without progress before a call fails
 *                          (default 60)
 *
 * The communicator's duplicate, streams, events, scratch space, pinned
 * buffers and IPC mailboxes are created at the first call and kept until
 * collc_ring_allgather_mpicuda_release().  Not thread-safe.
 */
#ifndef COLLC_RING_ALLGATHER_MPICUDA_H
#define COLLC_RING_ALLGATHER_MPICUDA_H

#include <stdint.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLLC_RING_ALLGATHER_MPICUDA_NRANKS 4
#define COLLC_RING_ALLGATHER_MPICUDA_NCHUNKS 4

int collc_ring_allgather_mpicuda_run(void *buffer, int64_t count, int dtype, int op, MPI_Comm comm, void *stream);

int collc_ring_allgather_mpicuda_run_f(void *buffer, int64_t count, int dtype, int op, MPI_Fint comm, void *stream);

/* The device scratch bytes `rank` needs for count elements of dtype; -1 for bad arguments. */
int64_t collc_ring_allgather_mpicuda_scratch_bytes(int64_t count, int dtype, int rank);

/* The element offset of every chunk, offsets[0 .. 4], for count elements;
 * returns the number of chunks, or -1 for a bad count. */
int collc_ring_allgather_mpicuda_layout(int64_t count, int64_t *offsets);

int collc_ring_allgather_mpicuda_run_v(void *buffer, const int64_t *counts, int dtype, int op,
    MPI_Comm comm, void *stream);

int collc_ring_allgather_mpicuda_run_v_f(void *buffer, const int64_t *counts, int dtype, int op, MPI_Fint comm,
    void *stream);

/* The device scratch bytes `rank` needs for a run_v with these counts of dtype; -1 for bad arguments. */
int64_t collc_ring_allgather_mpicuda_scratch_bytes_v(const int64_t *counts, int dtype, int rank);

/* The element offset of every chunk, offsets[0 .. 4], for these counts (see run_v);
 * returns the number of chunks, or -1 for bad counts or a schedule that refuses them. */
int collc_ring_allgather_mpicuda_layout_v(const int64_t *counts, int64_t *offsets);

/* Waits for the last run; -3 when a codec refused a value in it (see above). */
int collc_ring_allgather_mpicuda_check(void);

/* Waits for the kept streams, then frees them and everything else kept (call before MPI_Finalize). */
void collc_ring_allgather_mpicuda_release(void);

/* How messages travel (CUDA IPC, CUDA-aware MPI or staged, and why), once a call has chosen it. */
const char *collc_ring_allgather_mpicuda_transport(void);

/* What the last failing call ran into. */
const char *collc_ring_allgather_mpicuda_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* COLLC_RING_ALLGATHER_MPICUDA_H */
