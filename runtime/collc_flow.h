/* collc_flow.h: running a schedule's step tables by dataflow, on one rank.
 *
 * The default issue order of schedules without compression points.  Every
 * message row lists the rank's earlier messages it waits for (collc/backends/
 * dataflow.py computes them from the verified schedule): a message touching a
 * chunk waits for the last earlier receive of that chunk, and a receive also
 * for the sends of it since (sends of its own step included, which read the
 * value from before the step).  Each message then goes as soon as those are
 * done, whatever its step:
 *
 *   send            posted when its dependencies are done (a send of several
 *                   runs is packed into scratch first); done when MPI completes it
 *   direct receive  posted into the work buffer when its dependencies are done;
 *                   done when it has arrived
 *   other receive   posted into scratch at once; applied (copied or reduced into
 *                   the work buffer) when it has arrived and its dependencies
 *                   are done; done once applied
 *
 * A message in pieces (collc_exec.h) posts all of its pieces at once and is
 * done when the last completes; each received piece is checked as it arrives.
 *
 * The rank waits with MPI_Testsome over every request in flight (yielding
 * its core while nothing completes, collc_idle) and issues what became
 * ready.  Only accesses to a common chunk are ordered, and in the order of
 * the steps, so the result is the step-by-step result bit for bit
 * (reductions into a chunk happen in the same order).  Messages keep their
 * tags (the step modulo 32768), so a message matches its receive whatever the
 * issue order; a message is not posted while one of a step 32768 or more
 * before it is still outstanding, so that two messages with the same tag never
 * overtake each other.  A message whose chunks are all empty at the call's
 * count is skipped by both ends, as step by step.
 *
 * Scratch space is a ring of flow_scratch[rank] chunks (at least twice the
 * busiest step's, collc/backends/dataflow.py), handed out first come, first
 * served in table order: a receive into scratch is posted only after every
 * earlier message needing scratch got its room, and room comes back in the
 * same order.  The earliest unfinished step always finds room, so scratch can
 * delay a rank but never deadlock the schedule.
 *
 * COLLC_ISSUE=steps selects the step-by-step order of collc_exec.h instead.
 * Schedules with compression points always run step by step (collc_zexec.h):
 * they receive with any tag (the tag is a signature of the step, the count
 * and the datatype), matched by the order of the messages between two ranks,
 * which issuing out of step order would break; and their local compress and
 * decompress ops and variable-size payload slots would need dependencies of
 * their own.
 *
 * Faults end the job as step by step (collc_step_fatal), naming the step of
 * the message concerned or, on a timeout, the step of the earliest unfinished
 * message and every message in flight.
 */
#ifndef COLLC_FLOW_H
#define COLLC_FLOW_H

#include <sched.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "collc_exec.h"
#include "collc_reduce.h"

enum collc_fop_state { COLLC_F_WAIT, COLLC_F_ACTIVE, COLLC_F_ARRIVED, COLLC_F_DONE };

/* One message of the calling rank. */
struct collc_fop {
    const struct collc_msg *m;
    const struct collc_run *runs; /* its runs */
    const int *deps;              /* m->ndeps earlier messages */
    char *buf;                    /* where it lands or leaves from */
    MPI_Count bytes;
    MPI_Count at;  /* its scratch offset, -1: none */
    int need;      /* dependencies not yet done */
    int state;     /* enum collc_fop_state */
    int scratch;   /* it needs scratch: a receive that is not direct, a send of several runs */
    int queued;    /* in the ready queue */
    int pieces;    /* messages it travels as (collc_pieces) */
    int left;      /* of them, not yet completed */
};

/* The dataflow state of one call, in the arena. */
struct collc_fstate {
    int n;                  /* messages */
    struct collc_fop *ops;  /* [n] */
    int *succ_first;        /* [n + 1]: succ[succ_first[i] ..] wait for op i */
    int *succ;
    int *ready;             /* queue of ops whose dependencies are done (not needing scratch) */
    int *stack;             /* ops to finish */
    int *sq;                /* the ops needing scratch, in table order */
    int *deferred;          /* ready ops held back by the tag window */
    MPI_Request *reqs;      /* the requests in flight (a message in pieces: one per piece) */
    int *req_op;            /* ... their ops */
    int *req_piece;         /* ... and pieces */
    int *idx;               /* MPI_Testsome's indices */
    MPI_Status *statuses;
};

/* Messages of the calling rank over every phase, and their dependencies. */
static inline void collc_flow_counts(const struct collc_sched *s, int rank, int *n, int *edges)
{
    *n = s->flow_ops[rank];
    *edges = 0;
    for (int p = 0; p < s->nflow; p++) {
        struct collc_span rows = s->flow[p].ranks[rank];
        for (int i = rows.first; i < rows.first + rows.n; i++) *edges += s->flow[p].msgs[i].ndeps;
    }
}

static inline size_t collc_flow_round(size_t bytes)
{
    return (bytes + 63) & ~(size_t)63;
}

/* Ints of the dataflow state of n messages with e dependencies: succ_first, succ, ready, stack, sq, deferred, and
 * per request (at most `most` per message) req_op, req_piece, idx. */
static inline size_t collc_flow_ints(int n, int e, int most)
{
    return (size_t)(n + 1) + (size_t)e + 4 * (size_t)n + 3 * (size_t)n * (size_t)most;
}

/* Arena bytes of the dataflow state (collc_shim.h's collc_begin) with messages in pieces of `piece` bytes, scratch
 * ring excluded. */
static inline size_t collc_flow_bytes(const struct collc_sched *s, int rank, MPI_Count piece)
{
    int n, e;
    size_t nreqs;
    collc_flow_counts(s, rank, &n, &e);
    nreqs = (size_t)n * (size_t)collc_pieces_most(piece);
    return collc_flow_round(sizeof(struct collc_fstate)) + collc_flow_round((size_t)n * sizeof(struct collc_fop))
         + collc_flow_round(collc_flow_ints(n, e, collc_pieces_most(piece)) * sizeof(int)) + collc_flow_round(nreqs * sizeof(MPI_Request))
         + collc_flow_round(nreqs * sizeof(MPI_Status));
}

/* Lays the dataflow state out at `mem` (collc_flow_bytes of it). */
static inline struct collc_fstate *collc_flow_layout(const struct collc_sched *s, int rank, MPI_Count piece, char *mem)
{
    struct collc_fstate *fs = (struct collc_fstate *)mem;
    int n, e, *ints;
    size_t at = collc_flow_round(sizeof *fs), nreqs;
    collc_flow_counts(s, rank, &n, &e);
    fs->n = n;
    fs->ops = (struct collc_fop *)(mem + at);
    at += collc_flow_round((size_t)n * sizeof(struct collc_fop));
    ints = (int *)(mem + at);
    fs->succ_first = ints;
    fs->succ = ints + n + 1;
    fs->ready = fs->succ + e;
    fs->stack = fs->ready + n;
    fs->sq = fs->stack + n;
    fs->deferred = fs->sq + n;
    nreqs = (size_t)n * (size_t)collc_pieces_most(piece);
    fs->req_op = fs->deferred + n;
    fs->req_piece = fs->req_op + nreqs;
    fs->idx = fs->req_piece + nreqs;
    at += collc_flow_round(collc_flow_ints(n, e, collc_pieces_most(piece)) * sizeof(int));
    fs->reqs = (MPI_Request *)(mem + at);
    at += collc_flow_round(nreqs * sizeof(MPI_Request));
    fs->statuses = (MPI_Status *)(mem + at);
    return fs;
}

/* The scratch ring: allocations in table order, released in any order, reclaimed in table order. */
struct collc_ring {
    MPI_Count cap, head;
    int first, next; /* sq[first .. next - 1]: the ops holding room, oldest first */
};

/* Room for op `i` (bytes > 0) at the ring's head; 0 when there is none yet. */
static inline int collc_ring_take(struct collc_ctx *ctx, struct collc_ring *ring, int i)
{
    struct collc_fstate *fs = ctx->fs;
    struct collc_fop *op = &fs->ops[i];
    MPI_Count tail, b = op->bytes, at;
    while (ring->first < ring->next && fs->ops[fs->sq[ring->first]].at < 0) ring->first++;
    if (ring->first == ring->next) ring->head = 0; /* empty */
    tail = ring->first < ring->next ? fs->ops[fs->sq[ring->first]].at : 0;
    if (ring->first == ring->next || ring->head > tail) { /* free: [head, cap) and [0, tail) */
        if (ring->head + b <= ring->cap) at = ring->head;
        else if (b <= tail) at = 0;
        else return 0;
    } else { /* wrapped: free [head, tail) */
        if (ring->head + b <= tail) at = ring->head;
        else return 0;
    }
    op->at = at;
    op->buf = ctx->scratch + at;
    ring->head = at + b;
    ring->next++;
    return 1;
}

/* Whether op i may be posted: no outstanding message of a step 32768 or more before (same tag). */
static inline int collc_flow_window(const struct collc_fstate *fs, int low, int i)
{
    return low >= fs->n || fs->ops[i].m->step - fs->ops[low].m->step < 32768;
}

/* Posts op i (its dependencies are done, its scratch, if any, taken): one request per piece. */
static inline void collc_flow_post(struct collc_ctx *ctx, int i, int *nactive)
{
    struct collc_fstate *fs = ctx->fs;
    struct collc_fop *op = &fs->ops[i];
    const struct collc_msg *m = op->m;
    const int tag = m->step % 32768;
    int err = MPI_SUCCESS;
    if (m->kind == COLLC_SEND) {
        if (op->scratch) { /* pack the runs */
            char *to = op->buf;
            for (int k = 0; k < m->nruns; k++) {
                MPI_Count len = collc_runs_elems(ctx, &op->runs[k], 1) * ctx->extent;
                if (len > 0) memcpy(to, collc_run_src(ctx, &op->runs[k]), (size_t)len);
                to += len;
            }
        }
        *ctx->wire += op->bytes;
    }
    for (int j = 0; j < op->pieces && err == MPI_SUCCESS; j++) {
        char *at = op->buf + (MPI_Count)j * ctx->piece;
        MPI_Count len = collc_piece_len(ctx, op->bytes, op->pieces, j);
        if (m->kind == COLLC_SEND)
            err = collc_isend(at, len, m->peer, tag, ctx->comm, &fs->reqs[*nactive]);
        else
            err = collc_irecv(at, len, m->peer, tag, ctx->comm, &fs->reqs[*nactive]);
        fs->req_op[*nactive] = i;
        fs->req_piece[*nactive] = j;
        ++*nactive;
    }
    if (err != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        PMPI_Error_string(err, text, &len);
        collc_step_fatal(ctx, m->step, "MPI error on the message %s rank %d: %s", m->kind == COLLC_SEND ? "to" : "from",
                         m->peer, text);
    }
    op->left = op->pieces;
    op->state = COLLC_F_ACTIVE;
}

/* Copies or reduces the scratch receive op i into the work buffer. */
static inline int collc_flow_apply(struct collc_ctx *ctx, const struct collc_fop *op)
{
    const char *from = op->buf;
    for (int k = 0; k < op->m->nruns; k++) {
        const struct collc_run *r = &op->runs[k];
        MPI_Count elems = collc_runs_elems(ctx, r, 1);
        char *at = ctx->work + collc_chunk_pos(ctx, r->lo) * ctx->extent;
        if (elems == 0) continue;
        if (r->action == COLLC_REDUCE) {
            int err = collc_reduce_run(ctx, r, at, from, elems);
            if (err != MPI_SUCCESS) return err;
        } else {
            memcpy(at, from, (size_t)(elems * ctx->extent));
        }
        from += elems * ctx->extent;
    }
    return MPI_SUCCESS;
}

/* Finishes op i and whatever that lets finish (arrived receives whose last dependency it was); queues the ops
 * that became ready.  Returns MPI_SUCCESS or a reduction's error. */
static inline int collc_flow_finish(struct collc_ctx *ctx, int i, int *ndone, int *rq_tail)
{
    struct collc_fstate *fs = ctx->fs;
    int top = 0;
    fs->stack[top++] = i;
    while (top > 0) {
        int j = fs->stack[--top];
        fs->ops[j].state = COLLC_F_DONE;
        fs->ops[j].at = -1; /* its scratch, if any, is free */
        ++*ndone;
        for (int k = fs->succ_first[j]; k < fs->succ_first[j + 1]; k++) {
            int s = fs->succ[k];
            struct collc_fop *op = &fs->ops[s];
            if (--op->need > 0) continue;
            if (op->state == COLLC_F_ARRIVED) {
                int err = collc_flow_apply(ctx, op);
                if (err != MPI_SUCCESS) return err;
                fs->stack[top++] = s;
            } else if (op->state == COLLC_F_WAIT && !op->scratch && !op->queued && op->bytes > 0) {
                op->queued = 1;
                fs->ready[(*rq_tail)++] = s;
            }
        }
    }
    return MPI_SUCCESS;
}

/* Ends the job: no request completed for ctx->timeout seconds. */
static inline void collc_flow_timeout(struct collc_ctx *ctx, int low, int nactive)
{
    struct collc_fstate *fs = ctx->fs;
    char peers[512] = "";
    size_t used = 0;
    for (int a = 0; a < nactive && used + 24 < sizeof peers; a++) {
        const struct collc_msg *m = fs->ops[fs->req_op[a]].m;
        used += (size_t)snprintf(peers + used, sizeof peers - used, "%s%s %d", used ? ", " : "",
                                 m->kind == COLLC_SEND ? "to" : "from", m->peer);
    }
    collc_step_fatal(ctx, low < fs->n ? fs->ops[low].m->step : -1,
                     "no progress for %g s (COLLC_TIMEOUT) on the messages %s: a rank died or stopped, or did not "
                     "call the collective with the same count",
                     ctx->timeout, peers);
}

/* Waits until at least one of the nactive requests completes: their positions in fs->idx, the count returned. */
static inline int collc_flow_wait(struct collc_ctx *ctx, int low, int nactive)
{
    struct collc_fstate *fs = ctx->fs;
    int outcount = 0, err;
    /* MPICH reports an error of MPI_Waitsome or MPI_Testsome (a truncated message: a rank called with another
     * count) to the handler of MPI_COMM_WORLD, which would end the job without saying why: errors are returned
     * here while the rank waits, and said below. */
    MPI_Errhandler saved;
    PMPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved);
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* MPI_Testsome polled, not MPI_Waitsome: MPICH's MPI_Waitsome never yields the core (collc_idle). */
    {
        double deadline = ctx->timeout > 0 ? PMPI_Wtime() + ctx->timeout : 0;
        long polls = 0;
        for (;;) {
            err = PMPI_Testsome(nactive, fs->reqs, &outcount, fs->idx, fs->statuses);
            if (err != MPI_SUCCESS || outcount != 0) break; /* completions, or MPI_UNDEFINED: none active */
            collc_idle(++polls);
            if (ctx->timeout > 0 && polls % 64 == 0 && PMPI_Wtime() > deadline) collc_flow_timeout(ctx, low, nactive);
        }
    }
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, saved);
    PMPI_Errhandler_free(&saved);
    if (err == MPI_ERR_IN_STATUS) {
        for (int k = 0; k < outcount; k++) {
            int e = fs->statuses[k].MPI_ERROR;
            if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) {
                const struct collc_msg *m = fs->ops[fs->req_op[fs->idx[k]]].m;
                char text[MPI_MAX_ERROR_STRING] = "";
                int len = 0;
                PMPI_Error_string(e, text, &len);
                collc_step_fatal(ctx, m->step, "MPI error on the message %s rank %d: %s%s",
                                 m->kind == COLLC_SEND ? "to" : "from", m->peer, text,
                                 m->kind != COLLC_SEND ? " (a message larger than the schedule expects: the ranks "
                                                         "called the collective with different counts or datatypes)"
                                                       : "");
            }
        }
    }
    if (err != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        PMPI_Error_string(err, text, &len);
        collc_step_fatal(ctx, low < fs->n ? fs->ops[low].m->step : -1, "MPI error: %s", text);
    }
    if (outcount == MPI_UNDEFINED) outcount = 0;
    return outcount;
}

/* Runs every phase of the schedule for the calling rank, by dataflow. */
static inline int collc_run_flow(struct collc_ctx *ctx)
{
    const struct collc_sched *s = ctx->sched;
    struct collc_fstate *fs = ctx->fs;
    struct collc_ring ring;
    const int n = fs->n;
    int nsq = 0, ndone = 0, nactive = 0, rq_head = 0, rq_tail = 0, ndeferred = 0, low = 0, err;

    /* The calling rank's messages, in table order, and who waits for each. */
    for (int p = 0, i = 0; p < s->nflow; p++) {
        const struct collc_flow *f = &s->flow[p];
        struct collc_span rows = f->ranks[ctx->rank];
        for (int r = rows.first; r < rows.first + rows.n; r++, i++) {
            struct collc_fop *op = &fs->ops[i];
            const struct collc_msg *m = &f->msgs[r];
            op->m = m;
            op->runs = f->runs + m->first_run;
            op->deps = f->deps + m->first_dep;
            op->bytes = collc_runs_elems(ctx, op->runs, m->nruns) * ctx->extent;
            op->at = -1;
            op->need = m->ndeps;
            op->state = COLLC_F_WAIT;
            op->queued = 0;
            op->pieces = collc_pieces(ctx, op->bytes, m->peer);
            op->left = 0;
            op->scratch = m->kind == COLLC_RECV || (m->kind == COLLC_SEND && m->nruns > 1);
            if (m->kind == COLLC_RECV || op->scratch) op->buf = NULL;
            else if (m->kind == COLLC_SEND) op->buf = (char *)collc_run_src(ctx, &op->runs[0]); /* only read */
            else op->buf = ctx->work + collc_chunk_pos(ctx, op->runs[0].lo) * ctx->extent;
        }
    }
    for (int i = 0; i <= n; i++) fs->succ_first[i] = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < fs->ops[i].m->ndeps; k++) fs->succ_first[fs->ops[i].deps[k] + 1]++;
    for (int i = 0; i < n; i++) fs->succ_first[i + 1] += fs->succ_first[i];
    for (int i = 0; i < n; i++) fs->stack[i] = fs->succ_first[i]; /* fill positions */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < fs->ops[i].m->ndeps; k++) {
            int d = fs->ops[i].deps[k];
            fs->succ[fs->stack[d]++] = i;
        }
    for (int i = 0; i < n; i++)
        if (fs->ops[i].scratch && fs->ops[i].bytes > 0) fs->sq[nsq++] = i;
    /* Empty messages: both ends skip them.  Only their own (empty) chunks order them, so they are done at once. */
    for (int i = 0; i < n; i++)
        if (fs->ops[i].bytes == 0 && fs->ops[i].state == COLLC_F_WAIT) {
            err = collc_flow_finish(ctx, i, &ndone, &rq_tail);
            if (err != MPI_SUCCESS) return err;
        }
    for (int i = 0; i < n; i++) {
        struct collc_fop *op = &fs->ops[i];
        if (op->state == COLLC_F_WAIT && op->need == 0 && !op->scratch && !op->queued && op->bytes > 0) {
            op->queued = 1;
            fs->ready[rq_tail++] = i;
        }
    }
    ring.cap = (MPI_Count)s->flow_scratch[ctx->rank] * collc_max_chunk(&ctx->layout) * ctx->extent;
    ring.head = 0;
    ring.first = ring.next = 0;

    while (ndone < n) {
        int outcount;
        while (low < n && fs->ops[low].state == COLLC_F_DONE) low++;
        /* Ready messages needing no scratch, then the next ones needing scratch, in table order. */
        if (ndeferred > 0) {
            int kept = 0;
            for (int k = 0; k < ndeferred; k++) {
                if (collc_flow_window(fs, low, fs->deferred[k])) collc_flow_post(ctx, fs->deferred[k], &nactive);
                else fs->deferred[kept++] = fs->deferred[k];
            }
            ndeferred = kept;
        }
        while (rq_head < rq_tail) {
            int i = fs->ready[rq_head++];
            if (fs->ops[i].state != COLLC_F_WAIT) continue;
            if (collc_flow_window(fs, low, i)) collc_flow_post(ctx, i, &nactive);
            else fs->deferred[ndeferred++] = i;
        }
        while (ring.next < nsq) {
            int i = fs->sq[ring.next];
            if (fs->ops[i].need > 0 && fs->ops[i].m->kind == COLLC_SEND) break;
            if (!collc_flow_window(fs, low, i) || !collc_ring_take(ctx, &ring, i)) break;
            collc_flow_post(ctx, i, &nactive);
        }
        if (nactive == 0)
            collc_step_fatal(ctx, low < n ? fs->ops[low].m->step : -1,
                             "dataflow issue has nothing in flight and %d of %d messages left (inconsistent tables)",
                             n - ndone, n);
        collc_input_copy(ctx); /* while the first messages travel */
        outcount = collc_flow_wait(ctx, low, nactive);
        for (int k = 0; k < outcount; k++) {
            int i = fs->req_op[fs->idx[k]];
            struct collc_fop *op = &fs->ops[i];
            if (op->m->kind != COLLC_SEND) { /* each piece checked as it arrives */
                MPI_Count got = collc_received(&fs->statuses[k]);
                MPI_Count want = collc_piece_len(ctx, op->bytes, op->pieces, fs->req_piece[fs->idx[k]]);
                if (got != want && op->pieces == 1)
                    collc_step_fatal(ctx, op->m->step,
                                     "received %lld bytes from rank %d, the schedule expects %lld: the ranks called "
                                     "the collective with different counts or datatypes",
                                     (long long)got, op->m->peer, (long long)op->bytes);
                if (got != want)
                    collc_step_fatal(ctx, op->m->step,
                                     "received a piece of %lld bytes from rank %d, the schedule expects %lld (of a "
                                     "message of %lld bytes in pieces of %lld): the ranks called the collective with "
                                     "different counts or datatypes, or with different COLLC_PIECE_BYTES",
                                     (long long)got, op->m->peer, (long long)want, (long long)op->bytes,
                                     (long long)ctx->piece);
            }
            if (--op->left > 0) continue;
            if (op->m->kind == COLLC_SEND) {
                err = collc_flow_finish(ctx, i, &ndone, &rq_tail);
            } else {
                err = MPI_SUCCESS;
                if (op->m->kind == COLLC_RECV_DIRECT) {
                    err = collc_flow_finish(ctx, i, &ndone, &rq_tail);
                } else if (op->need > 0) {
                    op->state = COLLC_F_ARRIVED;
                } else {
                    err = collc_flow_apply(ctx, op);
                    if (err == MPI_SUCCESS) err = collc_flow_finish(ctx, i, &ndone, &rq_tail);
                }
            }
            if (err != MPI_SUCCESS) return err;
        }
        /* Drop the completed requests (MPI set them to MPI_REQUEST_NULL), keeping the others in order. */
        {
            int kept = 0;
            for (int a = 0; a < nactive; a++)
                if (fs->reqs[a] != MPI_REQUEST_NULL) {
                    fs->reqs[kept] = fs->reqs[a];
                    fs->req_op[kept] = fs->req_op[a];
                    fs->req_piece[kept] = fs->req_piece[a];
                    kept++;
                }
            nactive = kept;
        }
    }
    return MPI_SUCCESS;
}

#endif /* COLLC_FLOW_H */
