/* collc_ring_allreduce.h: the ring_allreduce allreduce for p=4, compiled by collc.
 *
 * Source: ring_allreduce.coll (p=4, k=1), 4 chunks.
 *
 * Entry points:
 *   collc_ring_allreduce_allreduce()
 *       the collective, with MPI's handles;
 *   collc_ring_allreduce_allreduce_f()
 *       the same with Fortran handles (MPI_Fint, as mpi4py's .py2f() gives) and a
 *       64-bit count, for ctypes callers; a NULL sendbuf means MPI_IN_PLACE;
 *   MPI_Allreduce(), MPI_Allreduce_c()
 *       MPI's own entry points (the _c one with MPI-4), so that
 *       LD_PRELOAD=libcollc_ring_allreduce.so runs unmodified MPI programs on this schedule.
 *
 * The collective has MPI's semantics, MPI_IN_PLACE included
 * (MPI_Allreduce): count is the length of the vector.
 * Calls must come from a communicator of exactly 4 ranks (not an
 * intercommunicator), with a datatype that is predefined or contiguous without
 * holes and with lower bound 0, and a commutative op (every predefined one, or a user op
 * declared commutative); every rank must pass the same count and datatype.
 * Any count works, 0 included.
 *
 * Return values: MPI_SUCCESS; an MPI error code from the communication; or
 *   COLLC_ERR_UNSUPPORTED  the call is outside what the library was compiled for
 *                          (collc_ring_allreduce_last_error() says why); the MPI_* entry
 *                          points call the PMPI_* collective instead
 *   COLLC_ERR_NOMEM        out of memory (the MPI_* entry points abort instead)
 *
 * Environment, read at the first call:
 *   COLLC_SHIM_LOG=1    one line on stderr per call, beginning "collc:", and a
 *                       note the first time each reason makes a call fall back
 *   COLLC_SHIM_CHECK=1  also run the PMPI collective and MPI_Abort on the first
 *                       element that differs (the rule is in collc_shim.h)
 *   COLLC_SHIM_COMPRESS=1  run a schedule with compression points in the MPI_*
 *                       calls (rank 0 notes the error bound on stderr once)
 *   COLLC_TIMEOUT=S     end the job when a step waits more than S seconds for
 *                       its messages (a rank died, stopped or called otherwise)
 *
 * The first call on a communicator duplicates it (collectively); the duplicate
 * and reusable memory stay cached on the communicator until it is freed.
 * Not thread-safe: calls must not run concurrently in several threads.
 */
#ifndef COLLC_RING_ALLREDUCE_H
#define COLLC_RING_ALLREDUCE_H

#include <stdint.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLLC_RING_ALLREDUCE_NRANKS 4
#define COLLC_RING_ALLREDUCE_NCHUNKS 4

#ifndef COLLC_ERR_UNSUPPORTED
#define COLLC_ERR_UNSUPPORTED (-1) /* the call is outside what the library was compiled for */
#define COLLC_ERR_NOMEM (-2)       /* out of memory */
#endif

int collc_ring_allreduce_allreduce(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
    MPI_Op op, MPI_Comm comm);
int collc_ring_allreduce_allreduce_f(const void *sendbuf, void *recvbuf, int64_t count, MPI_Fint datatype,
    MPI_Fint op, MPI_Fint comm);

/* Why the last call returned COLLC_ERR_UNSUPPORTED or fell back to PMPI. */
const char *collc_ring_allreduce_last_error(void);

/* The bytes the calling rank sent in its last call (compressed payloads at their size). */
int64_t collc_ring_allreduce_wire_bytes(void);

/* The worst-case error of an output element for inputs |x| <= 1 (float32 data, or float64 data when
 * float64 is nonzero): the verifier's bound; 0 without compression points. */
double collc_ring_allreduce_error_bound(int float64);

/* The element offset of every chunk, offsets[0 .. 4], for a vector of `count`
 * elements in collc's terms (allgather: the gathered output; alltoall: a whole
 * send buffer).  Returns the number of chunks, or COLLC_ERR_UNSUPPORTED. */
int collc_ring_allreduce_layout(int64_t count, int64_t *offsets);

#ifdef __cplusplus
}
#endif

#endif /* COLLC_RING_ALLREDUCE_H */
