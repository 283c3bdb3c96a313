/* collc_cuda_vcoll.cuh: the collectives whose counts are given at run time (allgatherv, reduce_scatter with
 * unequal counts, alltoallv) on the schedule of their equal-block collective, for the cuda and mpi-cuda targets.
 *
 * A schedule is verified on chunks, whatever their sizes: every chunk ends where the collective needs it, with the
 * contributions it needs, for any number of elements in each.  So an allgather's schedule is an allgatherv's, a
 * reduce-scatter's one with any receive counts, and an alltoall's an alltoallv's, once the chunks are cut by the
 * call's counts (the cut of runtime/collc_vcoll.h's collc_vblocks and of collc.collectives.counts_offsets):
 *
 *   allgather, reduce-scatter  p counts: rank r's block (chunks r*k .. r*k + k - 1, k = nchunks / p) holds
 *                              counts[r] elements;
 *   alltoall                   p * p counts: block (src, dst) (chunks (src*p + dst)*k' .., k' = nchunks / p^2)
 *                              holds counts[src * p + dst] elements, what src sends dst;
 *
 * each block cut into its chunks as equal as possible (the first ones one element longer), blocks end to end in
 * order (rank order; for an alltoall src, then dst).  The logical element space is the sum of the counts.
 *
 * Schedules with chunk weights of their own or with compression points are refused (COLLC_CUDA_ERR_ARG): their
 * chunks are cut otherwise, or their codecs work on the equal cut.  The layout of a call (struct
 * collc_cuda_layout) then carries the offsets, and everything else runs as for equal counts.
 */
#ifndef COLLC_CUDA_VCOLL_CUH
#define COLLC_CUDA_VCOLL_CUH

#include "collc_cuda.cuh"

/* The counts a call of schedule s takes: p, or p * p for an alltoall. */
static inline int collc_cuda_vcount_n(const struct collc_cuda_sched *s)
{
    return s->collective == COLLC_CUDA_COLL_ALLTOALL ? s->nranks * s->nranks : s->nranks;
}

/* 0 when schedule s runs with counts given at run time, else COLLC_CUDA_ERR_ARG saying why not. */
static inline int collc_cuda_vcount_fits(const struct collc_cuda_sched *s)
{
    if (s->collective != COLLC_CUDA_COLL_ALLGATHER && s->collective != COLLC_CUDA_COLL_REDUCE_SCATTER &&
        s->collective != COLLC_CUDA_COLL_ALLTOALL)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s: counts given at run time cut the blocks of an allgather, a "
                               "reduce-scatter or an alltoall, not this collective", s->algorithm);
    if (s->chunk_prefix != NULL)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s has chunk weights: its chunks are cut by them, not by counts "
                               "given at run time; call the equal-count entry point", s->algorithm);
    if (s->ncodecs > 0)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s has compression points: counts given at run time are not "
                               "supported for it; call the equal-count entry point", s->algorithm);
    if (s->nchunks % collc_cuda_vcount_n(s) != 0)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s: %d chunks do not cut into %d blocks", s->algorithm, s->nchunks,
                               collc_cuda_vcount_n(s));
    return COLLC_CUDA_OK;
}

/* Fills offsets[0 .. nchunks] with the chunks' element offsets for `counts` (see the top of this file); 0, or
 * COLLC_CUDA_ERR_ARG (the schedule does not fit, a count is negative, or their sum overflows). */
static inline int collc_cuda_vblocks(const struct collc_cuda_sched *s, const int64_t *counts, int64_t *offsets)
{
    const int n = collc_cuda_vcount_n(s);
    int64_t at = 0;
    int err = collc_cuda_vcount_fits(s), k;
    if (err != COLLC_CUDA_OK) return err;
    if (counts == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "counts is NULL (%d counts expected)", n);
    k = s->nchunks / n;
    for (int b = 0; b < n; b++) {
        const int64_t len = counts[b], base = len / k, extra = len % k;
        if (len < 0)
            return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "counts[%d] must be >= 0, got %lld", b, (long long)len);
        if (len > INT64_MAX - at)
            return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "the counts add up to more than %lld elements",
                                   (long long)INT64_MAX);
        for (int j = 0; j < k; j++) offsets[b * k + j] = at + j * base + (j < extra ? j : extra);
        at += len;
    }
    offsets[s->nchunks] = at;
    return COLLC_CUDA_OK;
}

/* The chunks' offsets for `counts`, malloc'd ([nchunks + 1]); NULL with the error in *err. */
static inline int64_t *collc_cuda_vblocks_new(const struct collc_cuda_sched *s, const int64_t *counts, int *err)
{
    int64_t *offsets = (int64_t *)malloc(((size_t)s->nchunks + 1) * sizeof *offsets);
    if (offsets == NULL) {
        *err = collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        return NULL;
    }
    if ((*err = collc_cuda_vblocks(s, counts, offsets)) != COLLC_CUDA_OK) {
        free(offsets);
        return NULL;
    }
    return offsets;
}

/* The whole collective with counts given at run time; see the generated header for the contract. */
static inline int collc_cuda_execute_v(const struct collc_cuda_sched *s, void *const *buffers, const int64_t *counts,
                                       int dtype, int op, const int *device_of_rank, void *const *scratch,
                                       void *stream)
{
    int err;
    int64_t *offsets = collc_cuda_vblocks_new(s, counts, &err);
    if (offsets == NULL) return err;
    err = collc_cuda_execute_at(s, buffers, offsets[s->nchunks], offsets, dtype, op, device_of_rank, scratch,
                                stream);
    free(offsets);
    return err;
}

/* The scratch bytes rank `rank` needs for a call with `counts` of `dtype`; -1 for bad arguments. */
static inline int64_t collc_cuda_scratch_bytes_v(const struct collc_cuda_sched *s, const int64_t *counts, int dtype,
                                                 int rank)
{
    int err;
    int64_t need, *offsets = collc_cuda_vblocks_new(s, counts, &err);
    if (offsets == NULL) return -1;
    need = collc_cuda_scratch_bytes_at(s, offsets[s->nchunks], offsets, dtype, rank);
    free(offsets);
    return need;
}

/* The element offset of every chunk for `counts`, offsets[0 .. nchunks]; returns nchunks, or COLLC_CUDA_ERR_ARG. */
static inline int collc_cuda_chunk_offsets_v(const struct collc_cuda_sched *s, const int64_t *counts,
                                             int64_t *offsets)
{
    const int err = collc_cuda_vblocks(s, counts, offsets);
    return err != COLLC_CUDA_OK ? err : s->nchunks;
}

#endif /* COLLC_CUDA_VCOLL_CUH */
