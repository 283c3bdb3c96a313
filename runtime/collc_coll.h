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
 *   gather                root: work = recvbuf (sendbuf copied into block `rank`);
 *                         other ranks: collc's own p blocks, their sendbuf copied in
 *   scatter               work = collc's own p blocks (the root's sendbuf copied in);
 *                         block `rank` is then copied to recvbuf
 *   scan, exscan          work = recvbuf (sendbuf copied in), as allreduce; an exscan
 *                         leaves rank 0's recvbuf undefined, as MPI does
 *   barrier               work = collc's own p flag bytes, the rank's own set: every
 *                         flag must have arrived when the schedule ends
 *
 * A gather's block is the root's receive arguments and the others' send arguments, a scatter's the root's
 * send arguments and the others' receive arguments: MPI ignores the rest.
 *
 * Where the tables say which runs still hold the input (sched->input_copy), the
 * allreduce, reduce-scatter, reduce and allgather (of a dense send type) copy
 * nothing up front: those runs read sendbuf in place, and the output chunks no
 * receive writes are copied once the first messages are on their way
 * (collc_use_input).
 *
 * Reductions move whole elements of the datatype, holes included.  For a datatype
 * with holes (the pair types MPI_DOUBLE_INT, MPI_LONG_INT, MPI_SHORT_INT,
 * MPI_LONG_DOUBLE_INT) the work buffer is therefore always collc's own, and the
 * result reaches the caller's receive buffer field by field (collc_copy_data), so
 * that its holes stay as they were, as with any MPI collective.
 *
 * Data movement (allgather, bcast, alltoall) moves the bytes of the type signature
 * (collc_dtype.h): a rank whose datatype lies as its packed bytes uses its buffers
 * as above; any other packs its input into collc's work buffer and unpacks the
 * result, so ranks may pass different datatypes of one signature, and a send type
 * may differ from the receive type.  MPI_Reduce_scatter with equal receive counts
 * is MPI_Reduce_scatter_block.
 *
 * A call that does not fit the schedule (see collc_shim.h) goes to the PMPI
 * collective (interposed MPI_* entry points) or returns COLLC_ERR_UNSUPPORTED
 * (collc_* entry points).
 */
#ifndef COLLC_COLL_H
#define COLLC_COLL_H

#include <string.h>

#include <mpi.h>

#include "collc_check.h"
#include "collc_dtype.h"
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

/* What a reduction to every rank leaves on rank r (collc.ir.Collective.prefix): every rank's contributions
 * (allreduce), those of ranks 0 .. r (scan), of ranks 0 .. r - 1 (exscan, rank 0's result undefined). */
enum collc_reach { COLLC_ALL_RANKS, COLLC_INCLUSIVE, COLLC_EXCLUSIVE };

/* MPI_Allreduce, MPI_Scan and MPI_Exscan: one way of running them, the schedule saying which. */
static inline int collc_reduce_each(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                    const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype dt, MPI_Op op,
                                    MPI_Comm comm, enum collc_reach reach)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, count, dt, op, -1, count);
    struct collc_ctx ctx;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *ref = NULL, *work;
    double scale = 0;
    int err;
    if (collc_admit(&c) != COLLC_FITS)
        return reach == COLLC_ALL_RANKS   ? COLLC_UNFIT(mode, Allreduce, sendbuf, recvbuf, count, dt, op, comm)
               : reach == COLLC_INCLUSIVE ? COLLC_UNFIT(mode, Scan, sendbuf, recvbuf, count, dt, op, comm)
                                          : COLLC_UNFIT(mode, Exscan, sendbuf, recvbuf, count, dt, op, comm);
    if (count == 0) return MPI_SUCCESS;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, count);
        if (reach == COLLC_ALL_RANKS) COLLC_PMPI(Allreduce)(in, ref, count, dt, op, comm);
        else if (reach == COLLC_INCLUSIVE) COLLC_PMPI(Scan)(in, ref, count, dt, op, comm);
        else COLLC_PMPI(Exscan)(in, ref, count, dt, op, comm);
        scale = collc_check_scale(&c, comm, in, count);
    }
    work = c.holes ? NULL : (char *)recvbuf;
    err = collc_execute(&c, &ctx, count, work, count, &work);
    if (err == MPI_SUCCESS) {
        if (work != in) collc_take_input(&ctx, (const char *)in, (size_t)(count * c.extent));
        err = c.sched->run(&ctx);
        collc_input_copy(&ctx);
        if (err == MPI_SUCCESS) collc_copy_data(&c, (char *)recvbuf, work, count);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS && !(reach == COLLC_EXCLUSIVE && c.rank == 0))
            collc_compare(&c, recvbuf, ref, count, collc_rounded(op), scale);
        free(ref);
    }
    return err;
}

static inline int collc_allreduce(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                  const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype dt, MPI_Op op,
                                  MPI_Comm comm)
{
    return collc_reduce_each(s, entry, mode, sendbuf, recvbuf, count, dt, op, comm, COLLC_ALL_RANKS);
}

/* MPI requires the send signature of an allgather or alltoall block to match the receive one: the same
 * bytes.  A call that breaks this is erroneous; it ends the job, since the other ranks run the schedule. */
static inline void collc_same_bytes(const struct collc_call *c, MPI_Count sendcount, MPI_Datatype sendtype,
                                    MPI_Count block)
{
    MPI_Count bytes = sendtype == MPI_DATATYPE_NULL ? -1 : sendcount * collc_type_size(sendtype);
    if (bytes != block)
        collc_fatal(c, "the send arguments hold %lld bytes per block and the receive arguments %lld: MPI requires "
                    "their type signatures to match", (long long)bytes, (long long)block);
}

/* COLLC_SHIM_CHECK of data movement: n elements of c's datatype at `buf`, packed, against PMPI's `units`
 * work elements at `ref`. */
static inline void collc_compare_moved(const struct collc_call *c, const void *buf, MPI_Count n, const char *ref,
                                       MPI_Count units)
{
    char *got = (char *)malloc((size_t)(units * c->usize) + 1);
    if (got == NULL) collc_fatal(c, "COLLC_SHIM_CHECK: out of memory");
    if (collc_pack(buf, n, c->dt, c->dense, got, units * c->usize) != MPI_SUCCESS)
        collc_fatal(c, "COLLC_SHIM_CHECK: MPI_Pack of the result failed");
    collc_compare(c, got, ref, units, 0, 0);
    free(got);
}

static inline int collc_allgather(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                  const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                                  MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    struct collc_call c =
        collc_call_of(s, entry, mode, comm, recvcount, recvtype, MPI_OP_NULL, -1, recvcount * s->nranks);
    struct collc_ctx ctx;
    const int in_place = sendbuf == MPI_IN_PLACE;
    char *ref = NULL, *mine, *work;
    MPI_Count block;
    int err;
    if (collc_admit(&c) != COLLC_FITS)
        return COLLC_UNFIT(mode, Allgather, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    block = c.n * c.usize; /* bytes of one rank's block */
    if (!in_place) collc_same_bytes(&c, sendcount, sendtype, block);
    if (c.n == 0) return MPI_SUCCESS;
    mine = (char *)recvbuf + c.rank * recvcount * c.dt_extent;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, c.n * c.size);
        COLLC_PMPI(Allgather)(in_place ? mine : sendbuf, in_place ? recvcount : sendcount,
                              in_place ? recvtype : sendtype, ref, c.n, c.unit, comm);
    }
    work = c.dense ? (char *)recvbuf : NULL;
    err = collc_execute(&c, &ctx, c.n * c.size, work, c.n * c.size, &work);
    if (err == MPI_SUCCESS) {
        char *to = work + c.rank * block;
        if (in_place) err = collc_pack(mine, recvcount, recvtype, c.dense, to, block);
        else if (c.sched->input_copy != NULL && collc_dense(sendtype))
            collc_use_input(&ctx, (const char *)sendbuf, (MPI_Aint)(c.rank * block)); /* sends read sendbuf */
        else err = collc_pack(sendbuf, sendcount, sendtype, collc_dense(sendtype), to, block);
        if (err == MPI_SUCCESS) err = c.sched->run(&ctx);
        collc_input_copy(&ctx);
        if (err == MPI_SUCCESS) err = collc_unpack(work, block * c.size, recvbuf, recvcount * c.size, recvtype, c.dense);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare_moved(&c, recvbuf, recvcount * c.size, ref, c.n * c.size);
        free(ref);
    }
    return err;
}

/* The reduce-scatter of a block of recvcount elements; *unfit set when the call does not fit. */
static inline int collc_rsb(const struct collc_sched *s, const char *entry, enum collc_mode mode, const void *sendbuf,
                            void *recvbuf, MPI_Count recvcount, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, int *unfit)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, recvcount, dt, op, -1, recvcount * s->nranks);
    struct collc_ctx ctx;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *ref = NULL, *work = NULL;
    double scale = 0;
    int err;
    *unfit = collc_admit(&c) != COLLC_FITS;
    if (*unfit) return COLLC_ERR_UNSUPPORTED;
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
        collc_take_input(&ctx, (const char *)in, block * (size_t)c.size);
        err = c.sched->run(&ctx);
        collc_input_copy(&ctx);
        if (err == MPI_SUCCESS) collc_copy_data(&c, (char *)recvbuf, work + c.rank * block, recvcount);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare(&c, recvbuf, ref, recvcount, collc_rounded(op), scale);
        free(ref);
    }
    return err;
}

static inline int collc_reduce_scatter_block(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                             const void *sendbuf, void *recvbuf, MPI_Count recvcount,
                                             MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    int unfit = 0, err = collc_rsb(s, entry, mode, sendbuf, recvbuf, recvcount, dt, op, comm, &unfit);
    return unfit ? COLLC_UNFIT(mode, Reduce_scatter_block, sendbuf, recvbuf, recvcount, dt, op, comm) : err;
}

static inline int collc_bcast(const struct collc_sched *s, const char *entry, enum collc_mode mode, void *buffer,
                              MPI_Count count, MPI_Datatype dt, int root, MPI_Comm comm)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, count, dt, MPI_OP_NULL, root, count);
    struct collc_ctx ctx;
    char *ref = NULL, *work;
    MPI_Count bytes;
    int err;
    if (collc_admit(&c) != COLLC_FITS)
        return COLLC_UNFIT(mode, Bcast, buffer, count, dt, root, comm);
    if (c.n == 0) return MPI_SUCCESS;
    bytes = c.n * c.usize;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, c.n);
        if (c.rank == root) collc_pack(buffer, count, dt, c.dense, ref, bytes);
        COLLC_PMPI(Bcast)(ref, c.n, c.unit, root, comm);
    }
    work = c.dense ? (char *)buffer : NULL;
    err = collc_execute(&c, &ctx, c.n, work, c.n, &work);
    if (err == MPI_SUCCESS) {
        if (c.rank == root) err = collc_pack(buffer, count, dt, c.dense, work, bytes);
        if (err == MPI_SUCCESS) err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS && c.rank != root) err = collc_unpack(work, bytes, buffer, count, dt, c.dense);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare_moved(&c, buffer, count, ref, c.n);
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
    if (collc_admit(&c) != COLLC_FITS)
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
        if (work != in) collc_take_input(&ctx, (const char *)in, (size_t)(count * c.extent));
        err = c.sched->run(&ctx);
        collc_input_copy(&ctx);
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
    const int in_place = sendbuf == MPI_IN_PLACE;
    const void *in = in_place ? recvbuf : sendbuf;
    const MPI_Count incount = in_place ? recvcount : sendcount;
    const MPI_Datatype intype = in_place ? recvtype : sendtype;
    char *ref = NULL, *work = NULL;
    MPI_Count block;
    int err, p, k;
    if (collc_admit(&c) != COLLC_FITS)
        return COLLC_UNFIT(mode, Alltoall, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    /* the schedule admitted for this communicator: the library's, one of its other sizes, or one built for it */
    s = c.sched, p = s->nranks, k = s->nchunks / (p * p);
    block = c.n * c.usize; /* bytes of one block */
    if (!in_place) collc_same_bytes(&c, sendcount, sendtype, block);
    if (c.n == 0) return MPI_SUCCESS;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, c.n * p);
        COLLC_PMPI(Alltoall)(in, incount, intype, ref, c.n, c.unit, comm);
    }
    err = collc_execute(&c, &ctx, c.n * p, NULL, collc_segments_elems(s, c.rank, c.n * p), &work);
    if (err == MPI_SUCCESS) {
        /* The rank's send blocks are chunks (rank*p + dst)*k + j: one contiguous run. */
        err = collc_pack(in, incount * p, intype, in_place ? c.dense : collc_dense(intype),
                         work + collc_chunk_pos(&ctx, c.rank * p * k) * c.extent, block * p);
        if (err == MPI_SUCCESS) err = c.sched->run(&ctx);
        for (int src = 0; src < p && err == MPI_SUCCESS; src++)
            err = collc_unpack(work + collc_chunk_pos(&ctx, (src * p + c.rank) * k) * c.extent, block,
                               (char *)recvbuf + src * recvcount * c.dt_extent, recvcount, recvtype, c.dense);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS) collc_compare_moved(&c, recvbuf, recvcount * p, ref, c.n * p);
        free(ref);
    }
    return err;
}

/* Whether `comm` is an intracommunicator that can be asked its rank and size (MPI initialised, not finalised):
 * where not, collc_check_call names the reason. */
static inline int collc_askable(MPI_Comm comm)
{
    int ready = 0, finalized = 0, inter = 1;
    PMPI_Initialized(&ready);
    if (ready) PMPI_Finalized(&finalized);
    return ready && !finalized && comm != MPI_COMM_NULL && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS &&
           !inter;
}

/* The calling rank in `comm`, or -1 where it cannot be asked. */
static inline int collc_rank_or_none(MPI_Comm comm)
{
    int rank = -1;
    if (collc_askable(comm)) PMPI_Comm_rank(comm, &rank);
    return rank;
}

/* The root's other arguments must hold as many bytes as a block (MPI: the same type signature). */
static inline void collc_root_bytes(const struct collc_call *c, MPI_Count count, MPI_Datatype dt, MPI_Count block,
                                    const char *which)
{
    MPI_Count bytes = dt == MPI_DATATYPE_NULL ? -1 : count * collc_type_size(dt);
    if (bytes != block)
        collc_fatal(c, "the root's %s arguments hold %lld bytes per block and the blocks %lld: MPI requires their "
                    "type signatures to match", which, (long long)bytes, (long long)block);
}

static inline int collc_gather(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                               const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                               MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    const int at_root = collc_rank_or_none(comm) == root;
    const int in_place = sendbuf == MPI_IN_PLACE;
    struct collc_call c = collc_call_of(s, entry, mode, comm, at_root ? recvcount : sendcount,
                                        at_root ? recvtype : sendtype, MPI_OP_NULL, root,
                                        (at_root ? recvcount : sendcount) * s->nranks);
    struct collc_ctx ctx;
    char *ref = NULL, *mine = NULL, *work;
    MPI_Count block;
    int err;
    if (collc_admit(&c) != COLLC_FITS)
        return COLLC_UNFIT(mode, Gather, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    if (in_place && !at_root) collc_fatal(&c, "MPI_IN_PLACE as the send buffer of a rank that is not the root");
    block = c.n * c.usize; /* bytes of one rank's block */
    if (at_root && !in_place) collc_root_bytes(&c, sendcount, sendtype, block, "send");
    if (c.n == 0) return MPI_SUCCESS;
    if (at_root) mine = (char *)recvbuf + c.rank * recvcount * c.dt_extent;
    if (collc_env.check) {
        ref = collc_check_buffer(&c, c.n * c.size);
        COLLC_PMPI(Gather)(in_place ? mine : sendbuf, in_place ? recvcount : sendcount,
                           in_place ? recvtype : sendtype, ref, c.n, c.unit, root, comm);
    }
    work = at_root && c.dense ? (char *)recvbuf : NULL;
    err = collc_execute(&c, &ctx, c.n * c.size, work, c.n * c.size, &work);
    if (err == MPI_SUCCESS) {
        char *to = work + c.rank * block;
        if (in_place) err = collc_pack(mine, recvcount, recvtype, c.dense, to, block);
        else err = collc_pack(sendbuf, sendcount, sendtype, collc_dense(sendtype), to, block);
        if (err == MPI_SUCCESS) err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS && at_root)
            err = collc_unpack(work, block * c.size, recvbuf, recvcount * c.size, recvtype, c.dense);
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS && at_root) collc_compare_moved(&c, recvbuf, recvcount * c.size, ref, c.n * c.size);
        free(ref);
    }
    return err;
}

static inline int collc_scatter(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                                const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                                MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    const int at_root = collc_rank_or_none(comm) == root;
    const int in_place = recvbuf == MPI_IN_PLACE;
    struct collc_call c = collc_call_of(s, entry, mode, comm, at_root ? sendcount : recvcount,
                                        at_root ? sendtype : recvtype, MPI_OP_NULL, root,
                                        (at_root ? sendcount : recvcount) * s->nranks);
    struct collc_ctx ctx;
    char *ref = NULL, *work = NULL;
    MPI_Count block;
    int err;
    if (collc_admit(&c) != COLLC_FITS)
        return COLLC_UNFIT(mode, Scatter, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    if (in_place && !at_root) collc_fatal(&c, "MPI_IN_PLACE as the receive buffer of a rank that is not the root");
    block = c.n * c.usize; /* bytes of one rank's block */
    if (at_root && !in_place) collc_root_bytes(&c, recvcount, recvtype, block, "receive");
    if (c.n == 0) return MPI_SUCCESS;
    if (collc_env.check) { /* collc_check_buffer on every rank (it agrees on the signature with PMPI_Allreduce) */
        ref = collc_check_buffer(&c, c.n);
        if (!in_place) COLLC_PMPI(Scatter)(sendbuf, sendcount, sendtype, ref, c.n, c.unit, root, comm);
        else /* the root in place: its block stays where it is */
            COLLC_PMPI(Scatter)(sendbuf, sendcount, sendtype, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, comm);
    }
    err = collc_execute(&c, &ctx, c.n * c.size, NULL, c.n * c.size, &work);
    if (err == MPI_SUCCESS) {
        if (at_root) err = collc_pack(sendbuf, sendcount * c.size, sendtype, c.dense, work, block * c.size);
        if (err == MPI_SUCCESS) err = c.sched->run(&ctx);
        if (err == MPI_SUCCESS && !in_place)
            err = collc_unpack(work + c.rank * block, block, recvbuf, recvcount, recvtype, collc_dense(recvtype));
    }
    if (ref != NULL) {
        if (err == MPI_SUCCESS && !in_place) { /* the result is in the receive datatype, also at the root */
            struct collc_call rc = c;
            rc.dt = recvtype, rc.dense = collc_dense(recvtype);
            collc_compare_moved(&rc, recvbuf, recvcount, ref, c.n);
        }
        free(ref);
    }
    return err;
}

/* MPI_Scan (exclusive 0) and MPI_Exscan (exclusive 1). */
static inline int collc_scan(const struct collc_sched *s, const char *entry, enum collc_mode mode,
                             const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype dt, MPI_Op op,
                             MPI_Comm comm, int exclusive)
{
    return collc_reduce_each(s, entry, mode, sendbuf, recvbuf, count, dt, op, comm,
                             exclusive ? COLLC_EXCLUSIVE : COLLC_INCLUSIVE);
}

static inline int collc_barrier(const struct collc_sched *s, const char *entry, enum collc_mode mode, MPI_Comm comm)
{
    struct collc_call c = collc_call_of(s, entry, mode, comm, 1, MPI_BYTE, MPI_OP_NULL, -1, s->nranks);
    struct collc_ctx ctx;
    char *work = NULL;
    int err;
    if (collc_admit(&c) != COLLC_FITS) return mode == COLLC_API ? COLLC_ERR_UNSUPPORTED : PMPI_Barrier(comm);
    err = collc_execute(&c, &ctx, c.size, NULL, c.size, &work);
    if (err == MPI_SUCCESS) {
        memset(work, 0, (size_t)c.size);
        work[c.rank] = 1;
        err = c.sched->run(&ctx);
        for (int r = 0; r < c.size && err == MPI_SUCCESS; r++)
            if (work[r] != 1) collc_fatal(&c, "the barrier ended without the flag of rank %d", r);
    }
    return err;
}

#endif /* COLLC_COLL_H */
