/* collc_mpicuda_vcoll.cuh: counts given at run time (allgatherv, reduce_scatter with unequal counts, alltoallv)
 * with one MPI process per GPU.
 *
 * The chunks are cut by the call's counts as collc_cuda_vcoll.cuh says (rank r's block holds counts[r] elements;
 * an alltoall's block (src, dst) counts[src * p + dst]), and the call then runs as one with equal counts
 * (collc_mpicuda_execute_at, with the offsets in the layout).  Every rank must pass the same counts, as MPI
 * requires of its collectives.  Counts that differ between ranks would cut the chunks differently on each, and
 * a message could then have the size its receiver expects while carrying other elements, so before anything
 * moves the ranks compare their counts, dtype and op (one MPI_Iallreduce under the COLLC_TIMEOUT watchdog, also
 * when every count is 0): any difference fails every rank with COLLC_MPICUDA_ERR_MPI, naming the first count
 * that differs.
 */
#ifndef COLLC_MPICUDA_VCOLL_CUH
#define COLLC_MPICUDA_VCOLL_CUH

#include "collc_cuda_vcoll.cuh"
#include "collc_mpicuda.cuh"

/* Every rank called with the same n counts, dtype and op: an MPI_Iallreduce (MAX) of each value and its negation,
 * under the watchdog; 0, or the error set. */
static inline int collc_mpicuda_agree_counts(struct collc_mpicuda_state *st, const int64_t *counts, int n, int dtype,
                                             int op)
{
    const int m = n + 2;
    long long *mine = (long long *)malloc(4 * (size_t)m * sizeof *mine), *all;
    MPI_Request req;
    int err, differ = -1;
    if (mine == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
    all = mine + 2 * m;
    for (int i = 0; i < m; i++) {
        const long long v = i < n ? (long long)counts[i] : i == n ? dtype : op;
        mine[i] = v;
        mine[m + i] = -v;
    }
    err = collc_mpicuda_ipc_wait(st, MPI_Iallreduce(mine, all, 2 * m, MPI_LONG_LONG, MPI_MAX, st->comm, &req), &req,
                                 "comparing the counts, dtype and op of the ranks");
    for (int i = 0; err == COLLC_CUDA_OK && differ < 0 && i < m; i++)
        if (all[i] != -all[m + i]) differ = i;
    if (differ >= 0 && differ < n)
        err = collc_cuda_fail(COLLC_MPICUDA_ERR_MPI,
                              "rank %d: the ranks called with different counts (counts[%d]: %lld .. %lld): every "
                              "rank must pass the same counts",
                              st->rank, differ, -all[m + differ], all[differ]);
    else if (differ >= n)
        err = collc_cuda_fail(COLLC_MPICUDA_ERR_MPI,
                              "rank %d: the ranks called with different dtypes or ops: do all ranks call with the "
                              "same counts and dtype?",
                              st->rank);
    free(mine);
    return err;
}

/* The collective on this rank's `buffer` with counts given at run time; see the generated header. */
static inline int collc_mpicuda_execute_v(const struct collc_mpicuda_sched *s, void *buffer, const int64_t *counts,
                                          int dtype, int op, MPI_Comm comm, void *stream)
{
    struct collc_mpicuda_state *st = &collc_mpicuda_kept;
    int64_t *offsets;
    int rank = 0, err;
    if ((err = collc_mpicuda_comm_check(s, comm, &rank)) != COLLC_CUDA_OK) return err;
    if ((offsets = collc_cuda_vblocks_new(&s->base, counts, &err)) == NULL) {
        char why[sizeof collc_cuda_message];
        snprintf(why, sizeof why, "%s", collc_cuda_message);
        return collc_cuda_fail(err, "rank %d: %s", rank, why);
    }
    if ((err = collc_cuda_check_type(&s->base, dtype, op)) == COLLC_CUDA_OK &&
        (err = collc_mpicuda_prepare(st, comm)) == COLLC_CUDA_OK &&
        (err = collc_mpicuda_agree_counts(st, counts, collc_cuda_vcount_n(&s->base), dtype, op)) == COLLC_CUDA_OK)
        err = collc_mpicuda_execute_at(s, buffer, offsets[s->base.nchunks], offsets, dtype, op, comm, stream);
    free(offsets);
    return err;
}

/* The scratch bytes `rank` needs for a call with `counts` of `dtype`; -1 for bad arguments. */
static inline int64_t collc_mpicuda_scratch_bytes_v(const struct collc_mpicuda_sched *s, const int64_t *counts,
                                                    int dtype, int rank)
{
    int err;
    int64_t need, *offsets = collc_cuda_vblocks_new(&s->base, counts, &err);
    if (offsets == NULL) return -1;
    need = collc_mpicuda_scratch_bytes_at(s, offsets[s->base.nchunks], offsets, dtype, rank);
    free(offsets);
    return need;
}

#endif /* COLLC_MPICUDA_VCOLL_CUH */
