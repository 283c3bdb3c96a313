/* collc_exec.h: running a schedule's step tables on one rank.
 *
 * A generated collc_<algorithm>.c describes its schedule as data: for every
 * phase, one row per message of every rank (struct collc_msg), ordered by
 * rank and step, and the chunk runs of the messages (struct collc_run).  This
 * header executes such rows for the calling rank.
 *
 * Chunks and elements.  The rank's work buffer holds its part of the
 * collective's logical element space, cut into chunks exactly as collc's
 * collectives.element_offsets() cuts it: the space is split into equal
 * groups (alltoall: every (source, destination) block; allgather and
 * reduce-scatter: every rank's block when the count divides by p; otherwise
 * one group), and each group's chunks are as even as possible, the first ones
 * one element longer; or, for a schedule with chunk weights (sched->chunk_prefix),
 * chunk j of a group of E elements starts at floor(E * W_j / W) within it, W_j
 * the weights of the group's chunks before j and W all of them
 * (collectives.weighted_offset).  Chunks may be empty; a message whose chunks are all
 * empty is skipped by both ends, which compute the same sizes.
 *
 * For alltoall the logical space is p times a rank's send buffer, of which a
 * rank only touches a few blocks: the tables then list the chunk runs the rank
 * touches ("segments"), and the work buffer holds those segments end to end.
 *
 * One step: post the receives (a "direct" receive lands in the work buffer,
 * every other one in scratch space), pack sends of several runs into scratch
 * (a one-run send leaves straight from the work buffer), post the sends, wait
 * for all, then copy or reduce the scratch receives into the work buffer.
 * Every send thus reads the buffer as it was at the start of the step, and
 * every receive lands at its end, as in the schedule's semantics.  Messages
 * are MPI_BYTE on a private duplicate of the user's communicator, tagged with
 * the step index modulo 32768.  This is the order of COLLC_ISSUE=steps; by
 * default, collc_flow.h issues each message as soon as the messages it
 * depends on are done, from the same tables.  Schedules with compression
 * points run their steps with collc_zexec.h instead.
 *
 * Pieces.  An MPI library sends a message up to some size eagerly (MPICH's
 * shared-memory path: what fits one 8 KiB queue cell) and a larger one by a
 * rendezvous, a handshake with the receiver first: at 4 ranks on a node that
 * costs MPICH as much again as the transfer, for messages from about 8 KiB to
 * about 32 KiB.  So a message between two ranks that share memory (ctx->near),
 * of ctx->piece bytes (COLLC_PIECE_BYTES; 0: never) up to less than
 * COLLC_PIECES_MAX pieces, travels as collc_pieces() messages (between hosts a
 * message goes whole: there each piece would be one more network message):
 * pieces of exactly ctx->piece bytes, then one of the rest (possibly empty),
 * with the message's tag, sent and received in order (MPI matches messages of
 * one tag between two ranks in the order they were posted).  No whole message
 * and no last piece is exactly ctx->piece bytes long, and every other piece
 * is; so when the two ends expect different sizes, the first piece where they
 * part is shorter or longer than its receive (which reports it) and no piece
 * is left waiting for one that is never sent.  Each piece is checked as it
 * arrives.
 *
 * Faults end the job with one line on stderr ("collc: ... step s: ...") and
 * MPI_Abort, never a hang or wrong data: a message of another size than the
 * schedule expects (the ranks called with different counts or datatypes), an
 * MPI error (the private communicator returns errors), or a step that waits
 * longer than COLLC_TIMEOUT seconds (when set) for its messages.
 */
#ifndef COLLC_EXEC_H
#define COLLC_EXEC_H

#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "collc_comm.h"
#include "collc_reduce.h"
#include "collc_zcodec.h"

enum collc_collective {
    COLLC_COLL_ALLREDUCE,
    COLLC_COLL_ALLGATHER,
    COLLC_COLL_REDUCE_SCATTER,
    COLLC_COLL_BROADCAST,
    COLLC_COLL_REDUCE,
    COLLC_COLL_ALLTOALL,
    COLLC_COLL_GATHER,
    COLLC_COLL_SCATTER,
    COLLC_COLL_SCAN,
    COLLC_COLL_EXSCAN,
    COLLC_COLL_BARRIER
};

/* The collective's name in collc's terms. */
static inline const char *collc_collective_name(enum collc_collective coll)
{
    static const char *const names[] = {"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
                                        "alltoall",  "gather",    "scatter",        "scan",      "exscan",
                                        "barrier"};
    return names[coll];
}

/* Whether each rank contributes or receives its own block of nchunks / p chunks (collc.ir.Collective.rank_blocks). */
static inline int collc_rank_blocks(enum collc_collective coll)
{
    return coll == COLLC_COLL_ALLGATHER || coll == COLLC_COLL_REDUCE_SCATTER || coll == COLLC_COLL_GATHER ||
           coll == COLLC_COLL_SCATTER || coll == COLLC_COLL_BARRIER;
}

/* What a message row is. */
enum collc_kind {
    COLLC_SEND,        /* send the runs, in order, as one message */
    COLLC_RECV,        /* receive into scratch, then copy or reduce each run */
    COLLC_RECV_DIRECT  /* one copied run, received straight into the work buffer */
};

/* What a receiver does with a run. */
enum collc_action { COLLC_COPY, COLLC_REDUCE };

/* How a run's chunks travel (schedules with compression points; docs/compression.md). */
enum collc_how {
    COLLC_RAW,     /* the elements */
    COLLC_WIRE,    /* each chunk compressed by the sender, decoded by the receiver */
    COLLC_PAYLOAD  /* each chunk a compressed slot's payload, forwarded unchanged */
};

/* Chunks lo .. hi-1 of a message; codec: an index into the schedule's codecs, -1 for raw runs; fresh: the chunks
 * still hold the caller's input, read from there while ctx->input is set (a send's chunks; a reduce's destination,
 * which becomes input op received). */
struct collc_run {
    int lo, hi;
    enum collc_action action;
    enum collc_how how;
    int codec;
    int fresh;
};

/* A local op of one rank at the start of a step: compress chunks lo .. hi-1 with codec, or decompress them. */
struct collc_local {
    int step, lo, hi, codec, decompress;
};

/* One message of one rank in one global step. */
struct collc_msg {
    int step;
    enum collc_kind kind;
    int peer;
    int first_run, nruns; /* runs[first_run .. first_run + nruns - 1] */
    int first_dep, ndeps; /* the phase's deps[first_dep ..]: the rank's earlier messages this one waits for
                             (collc_flow.h; 0, 0 with compression points) */
};

/* Rows first .. first + n - 1 of a table. */
struct collc_span {
    int first, n;
};

struct collc_ctx;

/* One phase's tables, for dataflow issue (collc_flow.h). */
struct collc_flow {
    const struct collc_msg *msgs;
    const struct collc_run *runs;
    const struct collc_span *ranks; /* [rank]: its rows of msgs */
    const int *deps;                /* message numbers, counted over the rank's rows of every phase in order */
};

/* A compiled schedule: what the generated file gives the runtime. */
struct collc_sched {
    const char *algorithm;
    enum collc_collective collective;
    int nranks, nchunks;
    int root;                               /* broadcast and reduce; -1 otherwise */
    int max_messages;                       /* most messages of one rank in one step */
    const int *scratch_chunks;              /* [rank]: most chunks one step moves through scratch */
    const unsigned char *receives;          /* [rank]: whether the rank receives at all */
    const struct collc_run *segments;       /* alltoall: the chunk runs each rank touches */
    const struct collc_span *rank_segments; /* [rank]: its rows of segments; NULL: the whole space */
    int (*run)(struct collc_ctx *ctx);      /* every phase, in order */
    /* Dataflow issue (NULL / 0 with compression points, which run step by step): */
    const struct collc_flow *flow; /* [phase] */
    int nflow;
    const int *flow_ops;     /* [rank]: its messages over every phase */
    const int *flow_scratch; /* [rank]: chunks of scratch space its dataflow run uses */
    /* Compression points (NULL / 0 without): */
    const struct collc_codec *codecs;
    int ncodecs;
    int adds_payloads;                               /* some reduce adds homomorphic payloads: op sum only */
    double error_bound, error_bound64;               /* the verifier's worst-case bounds for inputs |x| <= 1:
                                                        float32 and float64 data */
    int bound_scales;                                /* the bound grows with |x| (relative codecs, casts) */
    MPI_Count (*zscratch)(const struct collc_ctx *ctx); /* scratch bytes of the rank's busiest step */
    /* A schedule for smaller calls (NULL: none): calls whose count times type size is below small_below bytes
       run it instead, or the one its own .small names when they are below that one's threshold too (a chain of
       bands, collc tune; COLLC_SMALL_BYTES and COLLC_BAND_BYTES override the thresholds, collc_shim.h). */
    const struct collc_sched *small;
    MPI_Count small_below;
    /* The same algorithm at other rank counts (none: nsizes 0): a call runs the one of its communicator's size. */
    const struct collc_sched *const *sizes;
    int nsizes;
    /* Why the ranks' floating-point sums and products may differ in their last bits (their trees of pairwise
       combinations differ: collc.backends.order); NULL: every rank gets the same bits. */
    const char *mixed_orders;
    const char *sizes_text; /* every rank count of the library, for messages */
    /* Any other rank count (NULL: none): the schedule of the calling rank of `comm`, of size p, built at its first
       call from the program (collc_anyp.h), or NULL with the reason in `why`. */
    const struct collc_sched *(*for_size)(MPI_Comm comm, int p, int rank, char *why, size_t len);
    const collc_u64 *chunk_prefix; /* [nchunks + 1]: prefix sums of the chunk weights (at most 2^32); NULL: none */
    /* Tables whose fresh runs read the caller's input (allreduce, reduce-scatter, reduce, allgather; NULL: none,
       the input is copied to the work buffer first): the output chunks no receive writes, copied from the input. */
    const struct collc_run *input_copy;
    const struct collc_span *rank_input_copy; /* [rank]: its rows of input_copy */
};

/* Chunk c starts at element g * group_elems + j * base + min(j, extra), g = c / group_chunks, j = c % group_chunks;
 * with weights (prefix != NULL), at g * group_elems + collc_weighted_offset(group_elems, ...). */
struct collc_layout {
    int group_chunks;
    MPI_Count group_elems, base;
    int extra;
    const collc_u64 *prefix; /* the schedule's chunk_prefix, or NULL */
    MPI_Count max_chunk;     /* with weights: the most elements of a chunk */
    const MPI_Count *offsets; /* [nchunks + 1]: every chunk's offset, given at run time (collc_vcoll.h); or NULL */
};

/* What one receive expects: a piece of `piece` bytes of a message of `whole` (the same when it goes whole). */
struct collc_expect {
    MPI_Count piece, whole;
};

/* One call in progress on one rank. */
struct collc_ctx {
    const struct collc_sched *sched;
    MPI_Count *wire; /* bytes this call has put on the wire so far (the entry point's counter) */
    const char *entry; /* the entry point, for messages */
    MPI_Comm comm;     /* the private duplicate */
    int rank;
    MPI_Datatype dt;
    MPI_Op op;
    MPI_Aint extent;     /* bytes per element */
    collc_kernel kernel; /* NULL: PMPI_Reduce_local */
    collc_kernel3 kernel3; /* NULL: a copy, then kernel */
    struct collc_layout layout;
    char *work;
    const char *input; /* the caller's input, for fresh runs (NULL: read work): chunk c at collc_input_at */
    MPI_Aint input_shift; /* bytes: the input starts at this offset of the work buffer's layout */
    int input_pending;    /* sched->input_copy not yet done (collc_input_copy) */
    char *scratch;
    int flow;            /* issue by dataflow (collc_flow.h), not step by step */
    struct collc_fstate *fs; /* its state, in the arena */
    MPI_Request *reqs;
    MPI_Status *statuses;
    int *req_peer;  /* the peer of each request */
    char **landing; /* where each receive of a step landed */
    struct collc_expect *expect; /* [request]: what each receive of a step expects (collc_run_step) */
    MPI_Count piece;             /* bytes of a piece of a message (collc_pieces); 0: messages go whole */
    const unsigned char *near;   /* [rank]: it shares memory with this rank (collc_comm); NULL: all do */
    double timeout; /* seconds a step may wait for its messages; 0: no limit */
    MPI_Count count; /* the call's vector, in elements (collc_layout_of's count) */
    const struct collc_run *segs; /* this rank's segments (alltoall), else NULL */
    int nsegs;
    MPI_Count *seg_base; /* element offset of each segment in the work buffer */
    /* compression points (collc_zexec.h) */
    char *slots;        /* the payload of each compressed chunk, slot_cap bytes per chunk */
    MPI_Count slot_cap;
    MPI_Count *zsize; /* [chunk]: its payload's size, -1 while it is raw */
    float *zf32;      /* a chunk's values in float32 */
    char *zvals;      /* a chunk's decoded values */
    collc_u8 *zpay;   /* one aligned payload */
};

/* Bytes the calling rank sent in its last call (compressed payloads at their size). */
static MPI_Count collc_wire_last;

/* ---------------------------------------------------------------------------
 * Element layout
 * ------------------------------------------------------------------------- */

/* The logical element count of a call whose vector has `count` elements (collc's
 * collectives.logical_count): alltoall's space holds every rank's send buffer. */
static inline MPI_Count collc_logical_count(enum collc_collective coll, int p, MPI_Count count)
{
    return coll == COLLC_COLL_ALLTOALL ? count * p : count;
}

/* collectives.element_groups and chunk_offsets, for a vector of `count` elements. */
static inline struct collc_layout collc_layout_of(enum collc_collective coll, int p, int nchunks, MPI_Count count)
{
    struct collc_layout l;
    int groups = 1;
    if (coll == COLLC_COLL_ALLTOALL)
        groups = p * p;
    else if (collc_rank_blocks(coll) && count % p == 0)
        groups = p;
    l.group_chunks = nchunks / groups;
    l.group_elems = collc_logical_count(coll, p, count) / groups;
    l.base = l.group_elems / l.group_chunks;
    l.extra = (int)(l.group_elems % l.group_chunks);
    l.prefix = NULL;
    l.offsets = NULL;
    l.max_chunk = l.base + (l.extra > 0);
    return l;
}

/* floor(elems * before / weight), exactly, for weight <= 2^32 and before <= weight: with elems = q * weight + r,
 * q * before <= elems and r * before < 2^64 (collectives.weighted_offset). */
static inline MPI_Count collc_weighted_offset(MPI_Count elems, collc_u64 before, collc_u64 weight)
{
    collc_u64 q = (collc_u64)elems / weight, r = (collc_u64)elems % weight;
    return (MPI_Count)(q * before + r * before / weight);
}

/* Logical element offset of chunk c (c == nchunks gives the total). */
static inline MPI_Count collc_chunk_offset(const struct collc_layout *l, int c)
{
    int g = c / l->group_chunks, j = c % l->group_chunks;
    if (l->offsets != NULL) return l->offsets[c];
    if (l->prefix != NULL && j > 0) { /* a group's first chunk (c == nchunks too) starts the group: no weights read */
        const collc_u64 *w = l->prefix + (MPI_Count)g * l->group_chunks;
        return (MPI_Count)g * l->group_elems + collc_weighted_offset(l->group_elems, w[j] - w[0], w[l->group_chunks] - w[0]);
    }
    return (MPI_Count)g * l->group_elems + (MPI_Count)j * l->base + (j < l->extra ? j : l->extra);
}

/* The layout of schedule s for a vector of `count` elements: collc_layout_of, with the schedule's chunk weights. */
static inline struct collc_layout collc_sched_layout(const struct collc_sched *s, MPI_Count count)
{
    struct collc_layout l = collc_layout_of(s->collective, s->nranks, s->nchunks, count);
    if (s->chunk_prefix != NULL) {
        MPI_Count at = 0, next;
        l.prefix = s->chunk_prefix;
        l.max_chunk = 0;
        for (int c = 0; c < s->nchunks; c++, at = next) {
            next = collc_chunk_offset(&l, c + 1);
            if (next - at > l.max_chunk) l.max_chunk = next - at;
        }
    }
    return l;
}

/* The most elements one chunk holds. */
static inline MPI_Count collc_max_chunk(const struct collc_layout *l)
{
    return l->max_chunk;
}

/* Where chunk c starts in the work buffer, in elements. */
static inline MPI_Count collc_chunk_pos(const struct collc_ctx *ctx, int c)
{
    MPI_Count off = collc_chunk_offset(&ctx->layout, c);
    int lo = 0, hi = ctx->nsegs - 1;
    if (ctx->segs == NULL) return off;
    while (lo < hi) { /* the last segment starting at or before c */
        int mid = (lo + hi + 1) / 2;
        if (ctx->segs[mid].lo <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return ctx->seg_base[lo] + off - collc_chunk_offset(&ctx->layout, ctx->segs[lo].lo);
}

/* Elements in runs[0 .. n-1]. */
static inline MPI_Count collc_runs_elems(const struct collc_ctx *ctx, const struct collc_run *runs, int n)
{
    MPI_Count total = 0;
    for (int i = 0; i < n; i++)
        total += collc_chunk_offset(&ctx->layout, runs[i].hi) - collc_chunk_offset(&ctx->layout, runs[i].lo);
    return total;
}

/* ---------------------------------------------------------------------------
 * Pieces
 * ------------------------------------------------------------------------- */

/* The default piece size: below the 8192-byte shared-memory queue cell of MPICH less its header, so that a piece
 * goes eagerly there; a multiple of 64. */
#define COLLC_PIECE_BYTES 8064
/* Messages of COLLC_PIECES_MAX pieces' bytes or more go whole: past there a rendezvous costs less than the pieces. */
#define COLLC_PIECES_MAX 4

/* The most pieces of one message, with pieces of `piece` bytes (0: none). */
static inline int collc_pieces_most(MPI_Count piece)
{
    return piece > 0 ? COLLC_PIECES_MAX : 1;
}

/* How many messages carry one of `bytes` to or from `peer`: 1 unless it is in [piece, COLLC_PIECES_MAX * piece)
 * and peer shares memory with this rank.  Pieces fit MPICH's shared-memory cells; between hosts each is one more
 * network message: over TCP, 64 KiB collectives (16 KiB messages) ran 1.6-2.2x slower in pieces than whole. */
static inline int collc_pieces(const struct collc_ctx *ctx, MPI_Count bytes, int peer)
{
    if (ctx->piece <= 0 || bytes < ctx->piece || bytes / COLLC_PIECES_MAX >= ctx->piece) return 1;
    if (ctx->near != NULL && !ctx->near[peer]) return 1;
    return (int)(bytes / ctx->piece) + 1;
}

/* Bytes of piece j of the n pieces of a message of `bytes` (it starts at j * ctx->piece). */
static inline MPI_Count collc_piece_len(const struct collc_ctx *ctx, MPI_Count bytes, int n, int j)
{
    if (n == 1) return bytes;
    return j < n - 1 ? ctx->piece : bytes - (MPI_Count)(n - 1) * ctx->piece;
}

/* ---------------------------------------------------------------------------
 * Faults
 * ------------------------------------------------------------------------- */

/* Ends the job after a fault in step `step`: one line on stderr, then MPI_Abort.  Does not return. */
static inline void collc_step_fatal(const struct collc_ctx *ctx, int step, const char *fmt, ...)
{
    char text[1024];
    int n = snprintf(text, sizeof text, "collc: %s %s p=%d rank %d step %d: ", ctx->entry, ctx->sched->algorithm,
                     ctx->sched->nranks, ctx->rank, step);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof text) vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", text); /* one write, so that ranks do not interleave */
    collc_abort_job(ctx->comm);
}

static inline void collc_mpi_fatal(const struct collc_ctx *ctx, int step, int err, int req, int nrecv)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    PMPI_Error_string(err, text, &len);
    if (req < 0)
        collc_step_fatal(ctx, step, "MPI error: %s", text);
    collc_step_fatal(ctx, step, "MPI error on the message %s rank %d: %s%s", req < nrecv ? "from" : "to",
                     ctx->req_peer[req], text,
                     req < nrecv ? " (a message larger than the schedule expects: the ranks called the collective "
                                   "with different counts or datatypes)" : "");
}

/* Bytes that arrived with a receive's status. */
static inline MPI_Count collc_received(const MPI_Status *status)
{
    MPI_Count got = 0;
#if MPI_VERSION >= 4
    PMPI_Get_count_c(status, MPI_BYTE, &got);
#else
    int n = 0;
    PMPI_Get_count(status, MPI_BYTE, &n);
    got = n;
#endif
    return got;
}

/* Ends the job unless receive `i` of a step brought `expected` bytes. */
static inline void collc_check_received(const struct collc_ctx *ctx, int step, int i, MPI_Count expected)
{
    MPI_Count got = collc_received(&ctx->statuses[i]);
    if (got != expected)
        collc_step_fatal(ctx, step,
                         "received %lld bytes from rank %d, the schedule expects %lld: the ranks called the collective "
                         "with different counts or datatypes",
                         (long long)got, ctx->req_peer[i], (long long)expected);
}

/* Ends the job unless receive `i` of a step brought what `e` says. */
static inline void collc_check_piece(const struct collc_ctx *ctx, int step, int i, const struct collc_expect *e)
{
    MPI_Count got;
    if (e->piece == e->whole) {
        collc_check_received(ctx, step, i, e->piece);
        return;
    }
    got = collc_received(&ctx->statuses[i]);
    if (got != e->piece)
        collc_step_fatal(ctx, step,
                         "received a piece of %lld bytes from rank %d, the schedule expects %lld (of a message of %lld "
                         "bytes in pieces of %lld): the ranks called the collective with different counts or "
                         "datatypes, or with different COLLC_PIECE_BYTES",
                         (long long)got, ctx->req_peer[i], (long long)e->piece, (long long)e->whole,
                         (long long)ctx->piece);
}

/* Waits for the step's nreq requests (the first nrecv are its receives) within ctx->timeout; ends the job on an
 * MPI error or when the time runs out, naming the peers still waited for.  With `expect`, each receive is checked
 * as it completes to have brought what expect[i] says (collc_check_piece), so that one short piece ends the job
 * even while a later one is still awaited; without a time limit the requests are then waited for one by one, in
 * the order posted: MPICH reports an error of MPI_Waitall or MPI_Waitsome (a truncated message) to the handler
 * of MPI_COMM_WORLD, which ends the job without saying why, and one of MPI_Wait to the private communicator's. */
static inline void collc_wait(struct collc_ctx *ctx, int step, int nreq, int nrecv,
                              const struct collc_expect *expect)
{
    double deadline;
    int left = nreq;
    long polls = 0;
    if (nreq == 0) return;
    if (ctx->timeout <= 0 && expect == NULL) { /* errors returned while waiting, as in collc_flow_wait */
        MPI_Errhandler saved;
        PMPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved);
        PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int err = PMPI_Waitall(nreq, ctx->reqs, ctx->statuses);
        PMPI_Comm_set_errhandler(MPI_COMM_WORLD, saved);
        PMPI_Errhandler_free(&saved);
        if (err == MPI_ERR_IN_STATUS) {
            for (int i = 0; i < nreq; i++)
                if (ctx->statuses[i].MPI_ERROR != MPI_SUCCESS && ctx->statuses[i].MPI_ERROR != MPI_ERR_PENDING)
                    collc_mpi_fatal(ctx, step, ctx->statuses[i].MPI_ERROR, i, nrecv);
        }
        if (err != MPI_SUCCESS) collc_mpi_fatal(ctx, step, err, -1, nrecv);
        return;
    }
    if (ctx->timeout <= 0) { /* expect != NULL: one request at a time, in the order posted (receives first) */
        for (int i = 0; i < nreq; i++) {
            int err = PMPI_Wait(&ctx->reqs[i], &ctx->statuses[i]);
            if (err != MPI_SUCCESS) collc_mpi_fatal(ctx, step, err, i, nrecv);
            if (i < nrecv) collc_check_piece(ctx, step, i, &expect[i]);
        }
        return;
    }
    deadline = PMPI_Wtime() + ctx->timeout;
    while (left > 0) {
        for (int i = 0; i < nreq; i++) {
            int flag = 0, err;
            if (ctx->reqs[i] == MPI_REQUEST_NULL) continue;
            err = PMPI_Test(&ctx->reqs[i], &flag, &ctx->statuses[i]);
            if (err != MPI_SUCCESS) collc_mpi_fatal(ctx, step, err, i, nrecv);
            if (flag) {
                left--;
                if (expect != NULL && i < nrecv) collc_check_piece(ctx, step, i, &expect[i]);
            }
        }
        if (left == 0) break;
        collc_idle(++polls);
        if (polls % 64 == 0) {
            if (PMPI_Wtime() > deadline) {
                char peers[512] = "";
                size_t used = 0;
                for (int i = 0; i < nreq && used + 16 < sizeof peers; i++)
                    if (ctx->reqs[i] != MPI_REQUEST_NULL)
                        used += (size_t)snprintf(peers + used, sizeof peers - used, "%s%s %d", used ? ", " : "",
                                                 i < nrecv ? "from" : "to", ctx->req_peer[i]);
                collc_step_fatal(ctx, step,
                                 "no progress for %g s (COLLC_TIMEOUT) on the messages %s: a rank died or stopped, "
                                 "or did not call the collective with the same count",
                                 ctx->timeout, peers);
            }
        }
    }
}

/* ---------------------------------------------------------------------------
 * Steps
 * ------------------------------------------------------------------------- */

static inline int collc_isend(const void *buf, MPI_Count bytes, int peer, int tag, MPI_Comm comm, MPI_Request *req)
{
#if MPI_VERSION >= 4
    return PMPI_Isend_c(buf, bytes, MPI_BYTE, peer, tag, comm, req);
#else
    return PMPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, comm, req);
#endif
}

static inline int collc_irecv(void *buf, MPI_Count bytes, int peer, int tag, MPI_Comm comm, MPI_Request *req)
{
#if MPI_VERSION >= 4
    return PMPI_Irecv_c(buf, bytes, MPI_BYTE, peer, tag, comm, req);
#else
    return PMPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, comm, req);
#endif
}

/* The caller's input at chunk c (ctx->input set). */
static inline const char *collc_input_at(const struct collc_ctx *ctx, int c)
{
    return ctx->input + (collc_chunk_pos(ctx, c) * ctx->extent - ctx->input_shift);
}

/* Where a send's run r leaves from: the caller's input while its chunks are fresh, else the work buffer. */
static inline const char *collc_run_src(const struct collc_ctx *ctx, const struct collc_run *r)
{
    if (r->fresh && ctx->input != NULL) return collc_input_at(ctx, r->lo);
    return ctx->work + collc_chunk_pos(ctx, r->lo) * ctx->extent;
}

/* Reduces the received `from` into run r at `at` in the work buffer: work op received, where a fresh run's work
 * value is still the caller's input. */
static inline int collc_reduce_run(const struct collc_ctx *ctx, const struct collc_run *r, char *at, const char *from,
                                   MPI_Count elems)
{
    if (r->fresh && ctx->input != NULL)
        return collc_reduce3(ctx->kernel, ctx->kernel3, at, collc_input_at(ctx, r->lo), from, elems, ctx->dt, ctx->op,
                             ctx->extent);
    return collc_reduce(ctx->kernel, at, from, elems, ctx->dt, ctx->op, ctx->extent);
}

/* Lets fresh runs read the caller's input, which starts at byte `shift` of the work buffer's layout (the rank's
 * block of an allgather; 0 otherwise), in place of copying it to the work buffer first.  The rank's output chunks
 * that no receive writes (sched->input_copy) are copied by collc_input_copy, once the first messages are posted:
 * nothing reads them from the work buffer, and no receive writes them. */
static inline void collc_use_input(struct collc_ctx *ctx, const char *input, MPI_Aint shift)
{
    ctx->input = input;
    ctx->input_shift = shift;
    ctx->input_pending = ctx->sched->rank_input_copy[ctx->rank].n > 0;
}

/* The start of a call whose `bytes` of input are not its work buffer: fresh runs read them in place where the
 * tables allow (collc_use_input), else they are copied to the work buffer. */
static inline void collc_take_input(struct collc_ctx *ctx, const char *input, size_t bytes)
{
    if (ctx->sched->input_copy != NULL) collc_use_input(ctx, input, 0);
    else memmove(ctx->work, input, bytes);
}

/* The copies of collc_use_input, if not yet done. */
static inline void collc_input_copy(struct collc_ctx *ctx)
{
    const struct collc_sched *s = ctx->sched;
    struct collc_span rows = s->rank_input_copy[ctx->rank];
    if (!ctx->input_pending) return;
    ctx->input_pending = 0;
    for (int i = rows.first; i < rows.first + rows.n; i++) {
        MPI_Count len = collc_runs_elems(ctx, &s->input_copy[i], 1) * ctx->extent;
        if (len > 0)
            memcpy(ctx->work + collc_chunk_pos(ctx, s->input_copy[i].lo) * ctx->extent,
                   collc_input_at(ctx, s->input_copy[i].lo), (size_t)len);
    }
}

/* Runs one step of the calling rank: its messages msgs[0 .. n-1], whose chunk runs are in `runs`. */
static inline int collc_run_step(struct collc_ctx *ctx, const struct collc_msg *msgs, int n,
                                 const struct collc_run *runs)
{
    const MPI_Aint ext = ctx->extent;
    const int step = msgs[0].step, tag = step % 32768;
    char *scratch = ctx->scratch;
    int nreq = 0, nrecv, err = MPI_SUCCESS;

    /* Receives first, so that every send finds its receive posted; a message in pieces gets one per piece. */
    for (int i = 0; i < n && err == MPI_SUCCESS; i++) {
        const struct collc_msg *m = &msgs[i];
        MPI_Count bytes = collc_runs_elems(ctx, runs + m->first_run, m->nruns) * ext;
        char *at;
        int pieces = collc_pieces(ctx, bytes, m->peer);
        if (m->kind == COLLC_SEND || bytes == 0) continue;
        if (m->kind == COLLC_RECV_DIRECT) {
            at = ctx->work + collc_chunk_pos(ctx, runs[m->first_run].lo) * ext;
        } else {
            at = scratch;
            scratch += bytes;
        }
        for (int j = 0; j < pieces && err == MPI_SUCCESS; j++) {
            MPI_Count len = collc_piece_len(ctx, bytes, pieces, j);
            ctx->req_peer[nreq] = m->peer;
            ctx->expect[nreq].piece = len;
            ctx->expect[nreq].whole = bytes;
            err = collc_irecv(at + (MPI_Count)j * ctx->piece, len, m->peer, tag, ctx->comm, &ctx->reqs[nreq++]);
        }
    }
    nrecv = nreq;
    for (int i = 0; i < n && err == MPI_SUCCESS; i++) {
        const struct collc_msg *m = &msgs[i];
        const struct collc_run *r = runs + m->first_run;
        MPI_Count bytes = collc_runs_elems(ctx, r, m->nruns) * ext;
        const char *from;
        int pieces = collc_pieces(ctx, bytes, m->peer);
        if (m->kind != COLLC_SEND || bytes == 0) continue;
        if (m->nruns == 1) {
            from = collc_run_src(ctx, r);
        } else { /* pack the runs */
            char *to = scratch;
            for (int k = 0; k < m->nruns; k++) {
                MPI_Count len = collc_runs_elems(ctx, &r[k], 1) * ext;
                if (len > 0) memcpy(to, collc_run_src(ctx, &r[k]), (size_t)len);
                to += len;
            }
            from = scratch;
            scratch = to;
        }
        for (int j = 0; j < pieces && err == MPI_SUCCESS; j++) {
            ctx->req_peer[nreq] = m->peer;
            err = collc_isend(from + (MPI_Count)j * ctx->piece, collc_piece_len(ctx, bytes, pieces, j), m->peer, tag,
                              ctx->comm, &ctx->reqs[nreq++]);
        }
        *ctx->wire += bytes;
    }
    if (err != MPI_SUCCESS) collc_mpi_fatal(ctx, step, err, -1, nrecv);
    collc_input_copy(ctx); /* while the messages travel */
    /* Every receive brought what the schedule says: each piece checked as it arrives. */
    collc_wait(ctx, step, nreq, nrecv, ctx->expect);

    /* Apply what arrived in scratch, in the order it was posted. */
    scratch = ctx->scratch;
    for (int i = 0; i < n; i++) {
        const struct collc_msg *m = &msgs[i];
        if (m->kind != COLLC_RECV) continue;
        for (int k = 0; k < m->nruns; k++) {
            const struct collc_run *r = &runs[m->first_run + k];
            MPI_Count elems = collc_runs_elems(ctx, r, 1);
            char *at = ctx->work + collc_chunk_pos(ctx, r->lo) * ext;
            if (elems == 0) continue;
            if (r->action == COLLC_REDUCE) {
                err = collc_reduce_run(ctx, r, at, scratch, elems);
                if (err != MPI_SUCCESS) return err;
            } else {
                memcpy(at, scratch, (size_t)(elems * ext));
            }
            scratch += elems * ext;
        }
    }
    return MPI_SUCCESS;
}

/* Runs the calling rank's rows of one phase (msgs[rows.first ..]), step by step. */
static inline int collc_run_phase(struct collc_ctx *ctx, const struct collc_msg *msgs, const struct collc_run *runs,
                                  struct collc_span rows)
{
    int i = rows.first, end = rows.first + rows.n;
    while (i < end) {
        int j = i + 1, err;
        while (j < end && msgs[j].step == msgs[i].step) j++;
        err = collc_run_step(ctx, msgs + i, j - i, runs);
        if (err != MPI_SUCCESS) return err;
        i = j;
    }
    return MPI_SUCCESS;
}

#endif /* COLLC_EXEC_H */
