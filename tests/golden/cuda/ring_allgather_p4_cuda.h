/* collc_ring_allgather_cuda.h: the ring_allgather allgather for p=4 on GPUs, compiled by collc.
 *
 * Source: ring_allgather.coll (p=4, k=1), 4 chunks.
 *
 * All 4 ranks run in the calling process ("virtual ranks"): rank r is
 * the device buffer buffers[r] on device device_of_rank[r].  Any number of
 * ranks may share a device; between devices, messages are peer copies.
 *
 * Buffers are in collc's logical element space (docs/ir-json.md): each holds
 * count elements (4 * count for an alltoall, whose space holds every
 * rank's send buffer), the chunks cut as collc.collectives.element_offsets
 * cuts them (collc_ring_allgather_cuda_layout gives the offsets).
 * Allgather: rank r's buffer starts with its block (the other blocks are not
 * read) and every buffer ends with every block.
 * Elements outside what the collective defines may be overwritten.
 *
 * dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16, 4 int32, 5 int64.
 * op:    0 sum, 1 prod, 2 max, 3 min (read by reducing collectives only, but
 *        checked always).
 *
 * collc_ring_allgather_cuda_run(buffers, count, dtype, op, device_of_rank, scratch, stream)
 *     runs the collective.  device_of_rank: 4 device numbers, or NULL
 *     for the current device.  scratch: 4 device pointers, rank r's on
 *     its device with collc_ring_allgather_cuda_scratch_bytes(count, dtype, r) bytes
 *     (may be NULL where that is 0), or NULL: the library allocates and keeps
 *     its own.  stream: a cudaStream_t of the current device (NULL: the legacy
 *     default stream).  The run starts after the work queued on `stream` and
 *     `stream` waits for its end: like a kernel launch, the call returns
 *     before the GPUs finish, and errors of the GPU work itself appear at the
 *     next synchronisation.
 *     Returns 0, or
 *       -1  a bad argument (count, dtype, op, a NULL buffer, a device number)
 *       -2  a CUDA call failed (no device, out of memory, ...)
 *     with collc_ring_allgather_cuda_last_error() saying what happened.
 *
 * collc_ring_allgather_cuda_run_v(buffers, counts, dtype, op, device_of_rank, scratch, stream)
 *     the same collective with counts given at run time, on the same
 *     schedule (its chunks hold any number of elements):
 *     counts: p counts >= 0, counts[r] the elements of rank r's block.  Every
 *     buffer holds their sum: the blocks end to end in rank order, each cut
 *     into its nchunks / p chunks as equal as possible, the first ones one
 *     element longer (collc_ring_allgather_cuda_layout_v(counts, offsets)
 *     gives the offsets).
 *     Rank r's buffer starts with its block; every buffer ends with every
 *     block (an allgatherv).
 *     Schedules with chunk weights or compression points refuse it (-1):
 *     their chunks are cut otherwise.
 *     scratch: as above, with collc_ring_allgather_cuda_scratch_bytes_v(counts,
 *     dtype, r) bytes, or NULL.  Returns as _run does; -1 also for a NULL or
 *     negative count.
 *
 * collc_ring_allgather_cuda_check()
 *     waits for the last run; returns 0, -2, or -3 when a codec refused a
 *     value (not finite, or beyond its range; last_error names the rank and
 *     element).  Always 0 for a schedule without compression points.
 *
 * Streams, events and scratch space are created at the first call and kept
 * until collc_ring_allgather_cuda_release().  Not thread-safe: calls must not run
 * concurrently in several threads.
 */
#ifndef COLLC_RING_ALLGATHER_CUDA_H
#define COLLC_RING_ALLGATHER_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLLC_RING_ALLGATHER_CUDA_NRANKS 4
#define COLLC_RING_ALLGATHER_CUDA_NCHUNKS 4

int collc_ring_allgather_cuda_run(void *const *buffers, int64_t count, int dtype, int op,
    const int *device_of_rank, void *const *scratch, void *stream);

/* The scratch bytes rank `rank` needs for count elements of dtype; -1 for bad arguments. */
int64_t collc_ring_allgather_cuda_scratch_bytes(int64_t count, int dtype, int rank);

/* The element offset of every chunk, offsets[0 .. 4], for count elements;
 * returns the number of chunks, or -1 for a bad count. */
int collc_ring_allgather_cuda_layout(int64_t count, int64_t *offsets);

int collc_ring_allgather_cuda_run_v(void *const *buffers, const int64_t *counts, int dtype, int op,
    const int *device_of_rank, void *const *scratch, void *stream);

/* The scratch bytes rank `rank` needs for a run_v with these counts of dtype; -1 for bad arguments. */
int64_t collc_ring_allgather_cuda_scratch_bytes_v(const int64_t *counts, int dtype, int rank);

/* The element offset of every chunk, offsets[0 .. 4], for these counts (see run_v);
 * returns the number of chunks, or -1 for bad counts or a schedule that refuses them. */
int collc_ring_allgather_cuda_layout_v(const int64_t *counts, int64_t *offsets);

/* Waits for the last run; -3 when a codec refused a value in it (see above). */
int collc_ring_allgather_cuda_check(void);

/* Waits for the kept streams, then frees them, their events and the scratch space. */
void collc_ring_allgather_cuda_release(void);

/* What the last failing call ran into. */
const char *collc_ring_allgather_cuda_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* COLLC_RING_ALLGATHER_CUDA_H */
