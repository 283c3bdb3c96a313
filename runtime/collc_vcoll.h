/* collc_vcoll.h: the collectives whose counts are given at run time (MPI_Allgatherv, MPI_Reduce_scatter with
 * unequal receive counts) on the schedule of their equal-block collective.
 *
 * A schedule is verified on chunks, whatever their sizes: every chunk ends where the collective needs it,
 * with the contributions it needs, for any number of elements in each.  So an allgather's schedule is an
 * allgatherv's, and a reduce-scatter's is a reduce-scatter's with any receive counts, once the chunks are cut
 * by the call's counts: rank r's block (chunks r*k .. r*k + k - 1) holds counts[r] elements, cut into k chunks
 * as equal as possible (the first ones one element longer), blocks end to end in rank order (collc_vblocks).
 * Every rank computes the same cut, since MPI gives every rank the same counts.
 *
 * An alltoall's blocks are cut the same way, block (src, dst) holding what src sends to dst: MPI_Alltoallv gives
 * each rank only its own row and column of that matrix, so the ranks first gather every row (one
 * PMPI_Allgather of p counts), as a schedule may route blocks through other ranks.
 *
 * Calls go to PMPI (interposed entry points) or return COLLC_ERR_UNSUPPORTED (collc_* entry points) where the
 * schedule has chunk weights of its own or compression points, besides every reason of collc_check_call.
 * Equal counts in rank order are the equal-block collective itself (collc_allgather, collc_rsb; an alltoallv
 * always takes the gathered path).
 * COLLC_SHIM_CHECK covers those; calls with unequal counts are not compared with PMPI.
 */
#ifndef COLLC_VCOLL_H
#define COLLC_VCOLL_H

#include <stdlib.h>

#include <mpi.h>

#include "collc_coll.h"

/* The size of `comm` where it can be asked (an initialised intracommunicator), else 0. */
static inline int collc_size_or_none(MPI_Comm comm)
{
    int size = 0;
    if (!collc_askable(comm) || PMPI_Comm_size(comm, &size) != MPI_SUCCESS) return 0;
    return size;
}

/* counts[i] of an int or an MPI_Count array (the _c entry points). */
static inline MPI_Count collc_count_at(const int *counts, const MPI_Count *counts_c, int i)
{
    return counts_c != NULL ? counts_c[i] : counts[i];
}

/* displs[i] of an int or an MPI_Aint array. */
static inline MPI_Aint collc_displ_at(const int *displs, const MPI_Aint *displs_c, int i)
{
    return displs_c != NULL ? displs_c[i] : displs[i];
}

/* The chunks' offsets in work elements, [p * k + 1] (malloc'd; NULL when out of memory): rank r's block holds
 * counts[r] * per work elements, cut into k chunks as equal as possible. */
static inline MPI_Count *collc_vblocks(int p, int k, const int *counts, const MPI_Count *counts_c, MPI_Count per)
{
    MPI_Count *off = (MPI_Count *)malloc(((size_t)p * (size_t)k + 1) * sizeof(MPI_Count)), at = 0;
    if (off == NULL) return NULL;
    for (int r = 0; r < p; r++) {
        MPI_Count len = collc_count_at(counts, counts_c, r) * per, base = len / k, extra = len % k;
        for (int j = 0; j < k; j++) off[r * k + j] = at + j * base + (j < extra ? j : extra);
        at += len;
    }
    off[p * k] = at;
    return off;
}

/* The int64_t counts and displacements of a _f entry point (one per rank of comm) as the MPI_Count and MPI_Aint
 * arrays of the C API: malloc'd into *counts_c and *displs_c (NULL for a NULL array, and both NULL where comm's
 * size cannot be asked: the call then returns COLLC_ERR_UNSUPPORTED).  Returns 0 or COLLC_ERR_NOMEM. */
static inline int collc_f_arrays(MPI_Comm comm, const int64_t *counts, const int64_t *displs, MPI_Count **counts_c,
    MPI_Aint **displs_c)
{
    const int p = collc_size_or_none(comm);
    *counts_c = NULL, *displs_c = NULL;
    if (p == 0) return 0;
    if (counts != NULL) *counts_c = (MPI_Count *)malloc(sizeof(MPI_Count) * (size_t)p);
    if (displs != NULL) *displs_c = (MPI_Aint *)malloc(sizeof(MPI_Aint) * (size_t)p);
    if ((counts != NULL && *counts_c == NULL) || (displs != NULL && *displs_c == NULL)) {
        free(*counts_c), free(*displs_c);
        *counts_c = NULL, *displs_c = NULL;
        return COLLC_ERR_NOMEM;
    }
    for (int i = 0; i < p; i++) {
        if (counts != NULL) (*counts_c)[i] = (MPI_Count)counts[i];
        if (displs != NULL) (*displs_c)[i] = (MPI_Aint)displs[i];
    }
    return 0;
}

#define COLLC_UNFIT_V(mode, name, ...)                                                                       \
    ((mode) == COLLC_API ? COLLC_ERR_UNSUPPORTED : collc_pmpi_##name(__VA_ARGS__))

static inline int collc_pmpi_allgatherv(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                                        void *recvbuf, const int *rc, const MPI_Count *rc_c, const int *displs,
                                        const MPI_Aint *displs_c, MPI_Datatype recvtype, MPI_Comm comm)
{
#if MPI_VERSION >= 4
    if (rc_c != NULL) return PMPI_Allgatherv_c(sendbuf, sendcount, sendtype, recvbuf, rc_c, displs_c, recvtype, comm);
#else
    (void)rc_c, (void)displs_c;
#endif
    return PMPI_Allgatherv(sendbuf, (int)sendcount, sendtype, recvbuf, rc, displs, recvtype, comm);
}

/* MPI_Allgatherv (rc and displs: int arrays; rc_c and displs_c: the _c entry point's). */
static inline int collc_allgatherv(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                   const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                                   const int *rc, const MPI_Count *rc_c, const int *displs, const MPI_Aint *displs_c,
                                   MPI_Datatype recvtype, MPI_Comm comm)
{
    const int p = collc_size_or_none(comm), in_place = sendbuf == MPI_IN_PLACE;
    MPI_Count total = 0, first = p > 0 ? collc_count_at(rc, rc_c, 0) : 0, *off;
    struct collc_call c;
    struct collc_ctx ctx;
    char *work = NULL;
    int equal = 1, err, k;
    if (p == 0) return COLLC_UNFIT_V(mode, allgatherv, sendbuf, sendcount, sendtype, recvbuf, rc, rc_c, displs,
                                     displs_c, recvtype, comm);
    for (int i = 0; i < p; i++) {
        total += collc_count_at(rc, rc_c, i);
        equal &= collc_count_at(rc, rc_c, i) == first && collc_displ_at(displs, displs_c, i) == i * first;
    }
    if (equal) /* MPI_Allgather's layout */
        return collc_allgather(s, entry, mode, sendbuf, sendcount, sendtype, recvbuf, first, recvtype, comm);
    c = collc_call_of(s, entry, mode, comm, total, recvtype, MPI_OP_NULL, -1, total);
    if (collc_admit_as(&c, 1) != COLLC_FITS)
        return COLLC_UNFIT_V(mode, allgatherv, sendbuf, sendcount, sendtype, recvbuf, rc, rc_c, displs, displs_c,
                             recvtype, comm);
    if (!in_place) collc_same_bytes(&c, sendcount, sendtype, collc_count_at(rc, rc_c, c.rank) * c.type_size);
    k = c.sched->nchunks / p;
    off = collc_vblocks(p, k, rc, rc_c, c.type_size / c.usize);
    if (off == NULL) collc_fatal(&c, "out of memory");
    c.offsets = off;
    err = collc_execute(&c, &ctx, c.n, NULL, off[p * k], &work);
    if (err == MPI_SUCCESS) {
        const MPI_Count mine = collc_count_at(rc, rc_c, c.rank);
        char *to = work + off[c.rank * k] * c.extent;
        if (in_place)
            err = collc_pack((char *)recvbuf + collc_displ_at(displs, displs_c, c.rank) * c.dt_extent, mine, recvtype,
                             c.dense, to, mine * c.type_size);
        else
            err = collc_pack(sendbuf, sendcount, sendtype, collc_dense(sendtype), to, mine * c.type_size);
        if (err == MPI_SUCCESS) err = c.sched->run(&ctx);
        for (int r = 0; r < p && err == MPI_SUCCESS; r++) {
            const MPI_Count n = collc_count_at(rc, rc_c, r);
            err = collc_unpack(work + off[r * k] * c.extent, n * c.type_size,
                               (char *)recvbuf + collc_displ_at(displs, displs_c, r) * c.dt_extent, n, recvtype,
                               c.dense);
        }
    }
    free(off);
    return err;
}

/* MPI_Reduce_scatter with unequal receive counts (collc_reduce_scatter takes equal ones). */
static inline int collc_reduce_scatter_v(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                         const void *sendbuf, void *recvbuf, const int *counts,
                                         const MPI_Count *counts_c, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                                         int p, int *unfit)
{
    MPI_Count total = 0, *off;
    struct collc_call c;
    struct collc_ctx ctx;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *work = NULL;
    int err, k;
    for (int i = 0; i < p; i++) total += collc_count_at(counts, counts_c, i);
    c = collc_call_of(s, entry, mode, comm, total, dt, op, -1, total);
    *unfit = collc_admit_as(&c, 1) != COLLC_FITS;
    if (*unfit) return COLLC_ERR_UNSUPPORTED;
    if (total == 0) return MPI_SUCCESS;
    k = c.sched->nchunks / p;
    off = collc_vblocks(p, k, counts, counts_c, 1);
    if (off == NULL) collc_fatal(&c, "out of memory");
    c.offsets = off;
    /* a separate work buffer even in place: MPI leaves the rest of recvbuf as it was */
    err = collc_execute(&c, &ctx, total, NULL, total, &work);
    if (err == MPI_SUCCESS) {
        collc_take_input(&ctx, (const char *)in, (size_t)(total * c.extent));
        err = c.sched->run(&ctx);
        collc_input_copy(&ctx);
        if (err == MPI_SUCCESS)
            collc_copy_data(&c, (char *)recvbuf, work + off[c.rank * k] * c.extent,
                            collc_count_at(counts, counts_c, c.rank));
    }
    free(off);
    return err;
}

/* MPI_Reduce_scatter (recvcounts: int, or MPI_Count for the _c entry point): with every receive count equal it is
 * MPI_Reduce_scatter_block (recvcounts is the same on every rank, so all ranks decide alike), with other counts
 * the schedule's chunks cut by them (collc_reduce_scatter_v); calls that do not fit go to PMPI. */
static inline int collc_reduce_scatter(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                       const void *sendbuf, void *recvbuf, const int *counts,
                                       const MPI_Count *counts_c, MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    const int size = collc_size_or_none(comm);
    int unfit = 1, err = MPI_SUCCESS;
    if (size > 0) {
        const MPI_Count count = collc_count_at(counts, counts_c, 0);
        int equal = 1;
        for (int i = 1; i < size; i++) equal &= collc_count_at(counts, counts_c, i) == count;
        if (equal)
            err = collc_rsb(s, entry, mode, sendbuf, recvbuf, count, dt, op, comm, &unfit);
        else
            err = collc_reduce_scatter_v(s, entry, mode, sendbuf, recvbuf, counts, counts_c, dt, op, comm, size,
                                         &unfit);
    }
    if (!unfit) return err;
    if (mode == COLLC_API) return COLLC_ERR_UNSUPPORTED;
#if MPI_VERSION >= 4
    if (counts_c != NULL) return PMPI_Reduce_scatter_c(sendbuf, recvbuf, counts_c, dt, op, comm);
#endif
    return PMPI_Reduce_scatter(sendbuf, recvbuf, counts, dt, op, comm);
}

static inline int collc_pmpi_alltoallv(const void *sendbuf, const int *sc, const MPI_Count *sc_c, const int *sd,
                                       const MPI_Aint *sd_c, MPI_Datatype sendtype, void *recvbuf, const int *rc,
                                       const MPI_Count *rc_c, const int *rd, const MPI_Aint *rd_c,
                                       MPI_Datatype recvtype, MPI_Comm comm)
{
#if MPI_VERSION >= 4
    if (sc_c != NULL) return PMPI_Alltoallv_c(sendbuf, sc_c, sd_c, sendtype, recvbuf, rc_c, rd_c, recvtype, comm);
#else
    (void)sc_c, (void)sd_c, (void)rc_c, (void)rd_c;
#endif
    return PMPI_Alltoallv(sendbuf, sc, sd, sendtype, recvbuf, rc, rd, recvtype, comm);
}

/* MPI_Alltoallv (sc, sd, rc, rd: the send and receive counts and displacements, int arrays, or the _c entry
 * point's). */
static inline int collc_alltoallv(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                  const void *sendbuf, const int *sc, const MPI_Count *sc_c, const int *sd,
                                  const MPI_Aint *sd_c, MPI_Datatype sendtype, void *recvbuf, const int *rc,
                                  const MPI_Count *rc_c, const int *rd, const MPI_Aint *rd_c, MPI_Datatype recvtype,
                                  MPI_Comm comm)
{
    const int p = collc_size_or_none(comm), in_place = sendbuf == MPI_IN_PLACE;
    const MPI_Datatype intype = in_place ? recvtype : sendtype;
    const void *in = in_place ? recvbuf : sendbuf;
    long long *row, *matrix;
    MPI_Count total = 0, *off, work_elems = 0, in_size, out_size;
    MPI_Aint lb, in_extent, out_extent;
    struct collc_call c;
    struct collc_ctx ctx;
    char *work = NULL;
    int err = MPI_SUCCESS, k, rank;
    if (p == 0 || intype == MPI_DATATYPE_NULL)
        return COLLC_UNFIT_V(mode, alltoallv, sendbuf, sc, sc_c, sd, sd_c, sendtype, recvbuf, rc, rc_c, rd, rd_c,
                             recvtype, comm);
    PMPI_Comm_rank(comm, &rank);
    if (recvtype == MPI_DATATYPE_NULL)
        return COLLC_UNFIT_V(mode, alltoallv, sendbuf, sc, sc_c, sd, sd_c, sendtype, recvbuf, rc, rc_c, rd, rd_c,
                             recvtype, comm);
    in_size = collc_type_size(intype), out_size = collc_type_size(recvtype);
    PMPI_Type_get_extent(intype, &lb, &in_extent);
    PMPI_Type_get_extent(recvtype, &lb, &out_extent);
    row = (long long *)malloc(sizeof(long long) * (size_t)p);
    matrix = (long long *)malloc(sizeof(long long) * (size_t)p * (size_t)p);
    if (row == NULL || matrix == NULL) {
        free(row), free(matrix);
        return COLLC_UNFIT_V(mode, alltoallv, sendbuf, sc, sc_c, sd, sd_c, sendtype, recvbuf, rc, rc_c, rd, rd_c,
                             recvtype, comm);
    }
    for (int d = 0; d < p; d++) /* bytes this rank sends each rank */
        row[d] = (long long)((in_place ? collc_count_at(rc, rc_c, d) : collc_count_at(sc, sc_c, d)) * in_size);
    PMPI_Allgather(row, p, MPI_LONG_LONG, matrix, p, MPI_LONG_LONG, comm); /* matrix[src * p + dst] */
    for (int i = 0; i < p * p; i++) total += matrix[i];
    c = collc_call_of(s, entry, mode, comm, total, MPI_BYTE, MPI_OP_NULL, -1, total);
    if (collc_admit_as(&c, 1) != COLLC_FITS) {
        free(row), free(matrix);
        return COLLC_UNFIT_V(mode, alltoallv, sendbuf, sc, sc_c, sd, sd_c, sendtype, recvbuf, rc, rc_c, rd, rd_c,
                             recvtype, comm);
    }
    k = c.sched->nchunks / (p * p);
    off = (MPI_Count *)malloc(((size_t)p * (size_t)p * (size_t)k + 1) * sizeof(MPI_Count));
    if (off == NULL) collc_fatal(&c, "out of memory");
    { /* block b = src * p + dst, cut into k chunks */
        MPI_Count at = 0;
        for (int b = 0; b < p * p; b++) {
            MPI_Count blen = matrix[b], base = blen / k, extra = blen % k;
            for (int j = 0; j < k; j++) off[b * k + j] = at + j * base + (j < extra ? j : extra);
            at += blen;
        }
        off[p * p * k] = at;
    }
    for (int src = 0; src < p; src++) /* what this rank receives must be what was sent to it */
        if ((long long)(collc_count_at(rc, rc_c, src) * out_size) != matrix[src * p + rank])
            collc_fatal(&c, "rank %d sends %lld bytes to rank %d, which expects %lld: MPI requires the type "
                        "signatures to match", src, matrix[src * p + rank], rank,
                        (long long)(collc_count_at(rc, rc_c, src) * out_size));
    c.offsets = off;
    {
        const struct collc_run *seg = c.sched->segments + c.sched->rank_segments[rank].first;
        for (int i = 0; i < c.sched->rank_segments[rank].n; i++) work_elems += off[seg[i].hi] - off[seg[i].lo];
    }
    err = collc_execute(&c, &ctx, total, NULL, work_elems, &work);
    if (err == MPI_SUCCESS) { /* every send block in before the run, every receive block out after it */
        for (int d = 0; d < p && err == MPI_SUCCESS; d++) {
            const MPI_Count n = in_place ? collc_count_at(rc, rc_c, d) : collc_count_at(sc, sc_c, d);
            const MPI_Aint at = in_place ? collc_displ_at(rd, rd_c, d) : collc_displ_at(sd, sd_c, d);
            err = collc_pack((const char *)in + at * in_extent, n, intype, collc_dense(intype),
                             work + collc_chunk_pos(&ctx, (rank * p + d) * k) * c.extent, n * in_size);
        }
        if (err == MPI_SUCCESS) err = c.sched->run(&ctx);
        for (int src = 0; src < p && err == MPI_SUCCESS; src++) {
            const MPI_Count n = collc_count_at(rc, rc_c, src);
            err = collc_unpack(work + collc_chunk_pos(&ctx, (src * p + rank) * k) * c.extent, n * out_size,
                               (char *)recvbuf + collc_displ_at(rd, rd_c, src) * out_extent, n, recvtype,
                               collc_dense(recvtype));
        }
    }
    free(off), free(row), free(matrix);
    return err;
}

#endif /* COLLC_VCOLL_H */
