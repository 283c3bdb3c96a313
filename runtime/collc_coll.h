/* collc_coll.h: the collectives, in MPI's terms, on top of a compiled schedule.
 *
 * Each function maps MPI's buffers onto the schedule's work buffer (honouring
 * MPI_IN_PLACE), runs the schedule, and maps the result back:
 *
 *   allreduce             work = recvbuf (sendbuf copied in)
 *   allgather             work = recvbuf (sendbuf copied into block `rank`)
 *   reduce_scatter_block  work = a copy of the p-block input (sendbuf, or recvbuf in
 *                         place: its other blocks stay as they were); block `rank`
 *                         is then copied to recvbuf
 *   bcast                 work = buffer
 *   reduce                root: work = recvbuf; other ranks: their sendbuf when
 *                         the schedule never sends them anything, else a copy
 *   alltoall              work = the chunk segments the rank touches; the send
 *                         blocks are copied in, the receive blocks out
 *
 * The schedule moves whole elements, holes included.  For a datatype with holes
 * (the pair types MPI_DOUBLE_INT, MPI_LONG_INT, MPI_SHORT_INT, MPI_LONG_DOUBLE_INT)
 * the work buffer is therefore always collc's own, and the result reaches the
 * caller's receive buffer field by field (collc_copy_data), so that its holes
 * stay as they were, as with any MPI collective.
 *
 * A call that does not fit the schedule (see collc_shim.h) goes to the PMPI
 * collective (interposed MPI_* entry points) or returns COLLC_ERR_UNSUPPORTED
 * (collc_* entry points).
 */
#ifndef COLLC_COLL_H
#define COLLC_COLL_H

#include <string.h>

#include <mpi.h>

#include "collc_exec.h"
#include "collc_shim.h"

/* The PMPI collective, large-count where MPI has it (for the self-check). */
#if MPI_VERSION >= 4
#define COLLC_PMPI(name) PMPI_##name##_c
#else
#define COLLC_PMPI(name) PMPI_##name
#endif

/* What a call that does not fit becomes: an error for the collc API, else the
 * PMPI twin of the MPI entry point that was called (MPI_X_c -> PMPI_X_c). */
#if MPI_VERSION >= 4
#define COLLC_UNFIT(mode, name, ...)                                                                         \
    ((mode) == COLLC_API ? COLLC_ERR_UNSUPPORTED                                                             \
                         : (mode) == COLLC_SHIM_C ? PMPI_##name##_c(__VA_ARGS__) : PMPI_##name(__VA_ARGS__))
#else
#define COLLC_UNFIT(mode, name, ...) ((mode) == COLLC_API ? COLLC_ERR_UNSUPPORTED : PMPI_##name(__VA_ARGS__))
#endif

static inline struct collc_call collc_call_of(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                              MPI_Comm comm, MPI_Count count, MPI_Datatype dt, MPI_Op op, int root,
                                              MPI_Count elems)
{
    struct collc_call c;
    memset(&c, 0, sizeof c);
    c.sched = s;
    c.entry = entry;
    c.mode = mode;
    c.comm = comm;
    c.count = count;
    c.dt = dt;
    c.op = op;
    c.root = root;
    c.elems = elems;
    return c;
}

static inline int collc_rounded(MPI_Op op)
{
    return op == MPI_SUM || op == MPI_PROD;
}

static inline int collc_allreduce(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                  const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype dt, MPI_Op op,
                                  MPI_Comm comm)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, count, dt, op, -1, count);
    struct collc_ctx ctx;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *ref = NULL, *work;
    double scale = 0;
    int err;
    if (collc_admit(&c, 1) != COLLC_FITS)
        return COLLC_UNFIT(mode, Allreduce, sendbuf, recvbuf, count, dt, op, comm);
    if (count == 0) return MPI_SUCCESS;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, count);
        COLLC_PMPI(Allreduce)(in, ref, count, dt, op, comm);
        scale = collc_check_scale(&c, comm, in, count);
    }
    work = c.holes ? NULL : (char *)recvbuf;
    err = collc_execute(&c, &ctx, count, work, count, &work);
    if (err == MPI_SUCCESS) {
        if (work != in) memmove(work, in, (size_t)(count * c.extent));
        err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS) collc_copy_data(&c, (char *)recvbuf, work, count);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare(&c, recvbuf, ref, count, collc_rounded(op), scale);
        free(ref);
    }
    return err;
}

static inline int collc_allgather(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                  const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                                  MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    struct collc_call c =
        collc_call_of(s, entry, mode, comm, recvcount, recvtype, MPI_OP_NULL, -1, recvcount * s->nranks);
    struct collc_ctx ctx;
    const int same = sendbuf == MPI_IN_PLACE || (sendcount == recvcount && sendtype == recvtype);
    char *ref = NULL, *mine, *work;
    int err;
    if (collc_admit(&c, same) != COLLC_FITS)
        return COLLC_UNFIT(mode, Allgather, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    if (recvcount == 0) return MPI_SUCCESS;
    mine = (char *)recvbuf + c.rank * recvcount * c.extent;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, recvcount * c.size);
        COLLC_PMPI(Allgather)(sendbuf == MPI_IN_PLACE ? mine : sendbuf, recvcount, recvtype, ref, recvcount,
                              recvtype, comm);
    }
    work = c.holes ? NULL : (char *)recvbuf;
    err = collc_execute(&c, &ctx, recvcount * c.size, work, recvcount * c.size, &work);
    if (err == MPI_SUCCESS) {
        const void *from = sendbuf == MPI_IN_PLACE ? mine : sendbuf;
        char *to = work + c.rank * recvcount * c.extent;
        if (to != from) memmove(to, from, (size_t)(recvcount * c.extent));
        err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS) collc_copy_data(&c, (char *)recvbuf, work, recvcount * c.size);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare(&c, recvbuf, ref, recvcount * c.size, 0, 0);
        free(ref);
    }
    return err;
}

static inline int collc_reduce_scatter_block(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                             const void *sendbuf, void *recvbuf, MPI_Count recvcount,
                                             MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, recvcount, dt, op, -1, recvcount * s->nranks);
    struct collc_ctx ctx;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *ref = NULL, *work = NULL;
    double scale = 0;
    int err;
    if (collc_admit(&c, 1) != COLLC_FITS)
        return COLLC_UNFIT(mode, Reduce_scatter_block, sendbuf, recvbuf, recvcount, dt, op, comm);
    if (recvcount == 0) return MPI_SUCCESS;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, recvcount);
        COLLC_PMPI(Reduce_scatter_block)(in, ref, recvcount, dt, op, comm);
        scale = collc_check_scale(&c, comm, in, recvcount * c.size);
    }
    /* A separate work buffer even in place: MPI leaves recvbuf's other blocks as they were. */
    err = collc_execute(&c, &ctx, recvcount * c.size, NULL, recvcount * c.size, &work);
    if (err == MPI_SUCCESS) {
        const size_t block = (size_t)(recvcount * c.extent);
        memcpy(work, in, block * (size_t)c.size);
        err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS) collc_copy_data(&c, (char *)recvbuf, work + c.rank * block, recvcount);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare(&c, recvbuf, ref, recvcount, collc_rounded(op), scale);
        free(ref);
    }
    return err;
}

static inline int collc_bcast(const struct collc_sched *s, const char *entry, enum collc_mode mode, void *buffer,
                              MPI_Count count, MPI_Datatype dt, int root, MPI_Comm comm)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, count, dt, MPI_OP_NULL, root, count);
    struct collc_ctx ctx;
    char *ref = NULL, *work;
    int err;
    if (collc_admit(&c, 1) != COLLC_FITS)
        return COLLC_UNFIT(mode, Bcast, buffer, count, dt, root, comm);
    if (count == 0) return MPI_SUCCESS;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, count);
        if (c.rank == root) memcpy(ref, buffer, (size_t)(count * c.extent));
        COLLC_PMPI(Bcast)(ref, count, dt, root, comm);
    }
    work = c.holes ? NULL : (char *)buffer;
    err = collc_execute(&c, &ctx, count, work, count, &work);
    if (err == MPI_SUCCESS) {
        if (c.rank == root && work != buffer) memcpy(work, buffer, (size_t)(count * c.extent));
        err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS && c.rank != root) collc_copy_data(&c, (char *)buffer, work, count);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare(&c, buffer, ref, count, 0, 0);
        free(ref);
    }
    return err;
}

static inline int collc_reduce_to_root(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                       const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype dt,
                                       MPI_Op op, int root, MPI_Comm comm)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, count, dt, op, root, count);
    struct collc_ctx ctx;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *ref = NULL, *work = NULL;
    double scale = 0;
    int err;
    if (collc_admit(&c, 1) != COLLC_FITS)
        return COLLC_UNFIT(mode, Reduce, sendbuf, recvbuf, count, dt, op, root, comm);
    if (count == 0) return MPI_SUCCESS;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, count);
        COLLC_PMPI(Reduce)(in, ref, count, dt, op, root, comm);
        scale = collc_check_scale(&c, comm, in, count);
    }
    if (c.rank == root)
        work = c.holes ? NULL : (char *)recvbuf;
    else if (!c.sched->receives[c.rank])
        work = (char *)in; /* only read: the rank sends and never receives */
    err = collc_execute(&c, &ctx, count, work, count, &work);
    if (err == MPI_SUCCESS) {
        if (work != in) memmove(work, in, (size_t)(count * c.extent));
        err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS && c.rank == root) collc_copy_data(&c, (char *)recvbuf, work, count);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS && c.rank == root) collc_compare(&c, recvbuf, ref, count, collc_rounded(op), scale);
        free(ref);
    }
    return err;
}

static inline int collc_alltoall(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                 const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                                 MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, recvcount, recvtype, MPI_OP_NULL, -1,
                                        recvcount * s->nranks * s->nranks);
    struct collc_ctx ctx;
    const int same = sendbuf == MPI_IN_PLACE || (sendcount == recvcount && sendtype == recvtype);
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *ref = NULL, *work = NULL;
    int err, p, k;
    if (collc_admit(&c, same) != COLLC_FITS)
        return COLLC_UNFIT(mode, Alltoall, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    if (recvcount == 0) return MPI_SUCCESS;
    /* the schedule admitted for this communicator: the library's, one of its other sizes, or one built for it */
    s = c.sched, p = s->nranks, k = s->nchunks / (p * p);
    if (collc_env.check) {
        ref = collc_check_buffer(&c, recvcount * p);
        COLLC_PMPI(Alltoall)(in, recvcount, recvtype, ref, recvcount, recvtype, comm);
    }
    err = collc_execute(&c, &ctx, recvcount * p, NULL, collc_segments_elems(s, c.rank, recvcount * p), &work);
    if (err == MPI_SUCCESS) {
        const size_t block = (size_t)(recvcount * c.extent);
        /* The rank's send blocks are chunks (rank*p + dst)*k + j: one contiguous run. */
        memcpy(work + collc_chunk_pos(&ctx, c.rank * p * k) * c.extent, in, block * (size_t)p);
        err = c.sched->run(&ctx);
        for (int src = 0; src < p && err == MPI_SUCCESS; src++)
            collc_copy_data(&c, (char *)recvbuf + src * block,
                            work + collc_chunk_pos(&ctx, (src * p + c.rank) * k) * c.extent, recvcount);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare(&c, recvbuf, ref, recvcount * p, 0, 0);
        free(ref);
    }
    return err;
}

#endif /* COLLC_COLL_H */
