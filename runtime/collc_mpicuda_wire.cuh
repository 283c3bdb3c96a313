/* collc_mpicuda_wire.cuh: how the mpi-cuda executor moves one step's messages over MPI (see collc_mpicuda.cuh).
 *
 * Included by collc_mpicuda.cuh after its types.  A message of the tables
 * (one row: sender, receiver, chunk runs) is a `link` on each of its two
 * ranks, cut into the same `pieces` on both ends:
 *
 *   - a run of raw values is one RAW piece of known size;
 *   - every chunk of a compressed run (on the wire, or a forwarded payload)
 *     is one SLOT piece: the slot's 16-byte header, which holds the payload's
 *     size, then the payload itself; only those bytes travel (compressed
 *     size on the wire).  The sender learns the size from the header once
 *     the encode is done (an 8-byte copy to pinned memory and an event); the
 *     receiver from the first segment it receives.
 *
 * Each piece travels as MPI messages of at most `segment` bytes (environment
 * COLLC_SEGMENT_BYTES, the same on every rank), tag = step, in order.  A
 * link keeps at most two segments in flight: with a CUDA-aware MPI they are
 * sent from and received into device memory directly; otherwise each has a
 * pinned host buffer (double buffering: the copy of segment k+1 between
 * device and host overlaps the MPI transfer of segment k).  Every link of a
 * step advances independently in one polling loop (MPI_Test, cudaEventQuery),
 * so no order of the peers' progress can deadlock, and the sender's loop
 * sends chunk k while the GPU still encodes chunk k+1.  A peer on the same
 * host gets the same segments by CUDA IPC instead (collc_mpicuda_ipc.cuh:
 * device-to-device copies into its mailbox, signalled by the device), in the
 * same loop.
 *
 * Watchdog: when nothing advances for `timeout` seconds (COLLC_TIMEOUT), the
 * step fails with an error that names the peers still awaited; a message of
 * another size than the schedule says (ranks called with different counts)
 * fails the step at once.  The communicator returns MPI errors (it is a
 * duplicate with MPI_ERRORS_RETURN), so they are reported, not fatal.
 */
#ifndef COLLC_MPICUDA_WIRE_CUH
#define COLLC_MPICUDA_WIRE_CUH

#include <sched.h>

enum collc_mpicuda_piece_kind { COLLC_MPICUDA_RAW, COLLC_MPICUDA_SLOT };
enum collc_mpicuda_base { COLLC_MPICUDA_IN_BUFFER, COLLC_MPICUDA_IN_SCRATCH };

/* What travels of one run (RAW) or one compressed chunk (SLOT). */
struct collc_mpicuda_piece {
    int kind;             /* collc_mpicuda_piece_kind */
    int run, chunk;       /* the run (index into the phase's runs) and, for SLOT, the chunk */
    int base;             /* collc_mpicuda_base: where `at` is counted from */
    int64_t at;           /* byte offset of the piece's first byte */
    int64_t bytes;        /* on the wire; -1 while a SLOT's size is unknown */
    int64_t capacity;     /* SLOT: header + the largest payload */
    int ready;            /* sending a SLOT: its event (encoded, size copied) and size word; -1 otherwise */
};

enum collc_mpicuda_seg_state { COLLC_SEG_FREE, COLLC_SEG_COPY, COLLC_SEG_MPI, COLLC_SEG_LAND, COLLC_SEG_IPC_OUT,
                               COLLC_SEG_IPC_WAIT };

/* One segment in flight: its request, its pinned buffer (staged transport) and where it belongs. */
struct collc_mpicuda_seg {
    int state;      /* collc_mpicuda_seg_state */
    unsigned seq;   /* its place in the link's stream of segments */
    int piece;      /* index into ctx->pieces */
    int64_t off;    /* bytes of the piece before it */
    int64_t bytes;  /* posted size (a SLOT's first segment: its largest possible size) */
    int event;      /* the copy's event (staged transport, IPC) */
    collc_u8 *host; /* its pinned buffer (staged transport) */
    collc_u64 pair; /* IPC: its place in the sequence of segments between the two ranks */
    MPI_Request req;
};

/* A message of the step, seen from this rank. */
struct collc_mpicuda_link {
    const struct collc_cuda_msg *msg;
    int send, peer;
    int first, npieces;     /* ctx->pieces[first .. first + npieces - 1] */
    int piece;              /* the next piece to post segments of */
    int64_t posted;         /* bytes of that piece posted so far */
    int sizing;             /* receiving: a SLOT's first segment is out, the piece's size unknown */
    unsigned next_seq;      /* the next segment's seq */
    unsigned next_mpi;      /* sending through the host: the next seq to hand to MPI */
    int ipc;                /* the peer is reached by IPC (collc_mpicuda_ipc.cuh), not MPI */
    int prev;               /* IPC: the rank's previous link with the same peer and direction, or -1 */
    struct collc_mpicuda_seg seg[2];
};

#include "collc_mpicuda_ipc.cuh" /* messages between the ranks of one host, device to device */

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

/* COLLC_MPICUDA_ERR_MPI with MPI's text for `code`. */
static inline int collc_mpicuda_mpi_fail(const struct collc_mpicuda_ctx *ctx, int code, const char *what, int peer)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", code);
    return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d, step %d: %s with rank %d failed: %s", ctx->st->rank,
                           ctx->step_index, what, peer, text);
}

static inline int collc_mpicuda_size_fail(const struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_link *l,
                                          int64_t got, int64_t want)
{
    return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI,
                           "rank %d, step %d: a message from rank %d has %lld bytes where the schedule expects %lld: "
                           "do all ranks call with the same count and dtype?",
                           ctx->st->rank, ctx->step_index, l->peer, (long long)got, (long long)want);
}

/* ---------------------------------------------------------------------------
 * Posting segments
 * ------------------------------------------------------------------------- */

static inline collc_u8 *collc_mpicuda_piece_at(const struct collc_mpicuda_ctx *ctx,
                                               const struct collc_mpicuda_piece *p)
{
    return (collc_u8 *)(p->base == COLLC_MPICUDA_IN_BUFFER ? ctx->buffer : ctx->scratch) + p->at;
}

/* A link's tag: its step (MPI_TAG_UB is at least 32767). */
static inline int collc_mpicuda_tag(const struct collc_mpicuda_link *l)
{
    return l->msg->step % 32767;
}

/* Whether the event at `index` has completed: 1, 0, or an error (< 0). */
static inline int collc_mpicuda_event_done(struct collc_mpicuda_ctx *ctx, int index)
{
    cudaError_t err = cudaEventQuery(ctx->st->events[index]);
    if (err == cudaSuccess) return 1;
    if (err == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: clear it */
        return 0;
    }
    return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "rank %d, step %d: waiting for the GPU failed: %s (%s)",
                           ctx->st->rank, ctx->step_index, cudaGetErrorString(err), cudaGetErrorName(err));
}

/* Hands segment s of a sending link to MPI. */
static inline int collc_mpicuda_isend(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_link *l,
                                      struct collc_mpicuda_seg *s)
{
    const void *from = ctx->st->aware ? (const void *)(collc_mpicuda_piece_at(ctx, &ctx->pieces[s->piece]) + s->off)
                                      : (const void *)s->host;
    int code = MPI_Isend(from, (int)s->bytes, MPI_BYTE, l->peer, collc_mpicuda_tag(l), ctx->st->comm, &s->req);
    if (code != MPI_SUCCESS) return collc_mpicuda_mpi_fail(ctx, code, "sending", l->peer);
    s->state = COLLC_SEG_MPI;
    l->next_mpi++;
    return COLLC_CUDA_OK;
}

/* Posts the next segment of a link into the free segment s; 1 when posted, 0 when there is nothing to post yet. */
static inline int collc_mpicuda_post(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_link *l,
                                     struct collc_mpicuda_seg *s)
{
    struct collc_mpicuda_piece *p;
    struct collc_mpicuda_state *st = ctx->st;
    int64_t want;
    if (l->piece == l->npieces || l->sizing) return 0;
    if (l->ipc && !collc_mpicuda_ipc_may_post(ctx, l)) return 0;
    p = &ctx->pieces[l->first + l->piece];
    if (l->send && p->bytes < 0) { /* a SLOT: its size is known once it is encoded */
        int done = collc_mpicuda_event_done(ctx, p->ready);
        if (done <= 0) return done;
        p->bytes = (int64_t)(COLLC_CUDA_SLOT_HEADER + st->sizes[p->ready]);
        if (p->bytes > p->capacity)
            return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "rank %d, step %d: chunk %d's payload has %lld bytes, more "
                                   "than its slot holds (%lld)", st->rank, ctx->step_index, p->chunk,
                                   (long long)p->bytes, (long long)p->capacity);
    }
    if (p->bytes < 0) { /* receiving a SLOT: its first segment, as large as it may be */
        want = p->capacity < st->segment ? p->capacity : st->segment;
        l->sizing = 1;
    } else {
        want = p->bytes - l->posted < st->segment ? p->bytes - l->posted : st->segment;
    }
    s->seq = l->next_seq++;
    s->piece = l->first + l->piece;
    s->off = l->posted;
    s->bytes = want;
    l->posted += want;
    if (p->bytes >= 0 && l->posted == p->bytes) {
        l->piece++;
        l->posted = 0;
    }
    if (l->send) {
        if (l->ipc) {
            int err = collc_mpicuda_ipc_send(ctx, l, s, collc_mpicuda_piece_at(ctx, p) + s->off);
            return err == COLLC_CUDA_OK ? 1 : err;
        }
        if (st->aware) {
            int err = collc_mpicuda_isend(ctx, l, s);
            return err == COLLC_CUDA_OK ? 1 : err;
        }
        COLLC_CUDA_TRY(cudaMemcpyAsync(s->host, collc_mpicuda_piece_at(ctx, p) + s->off, (size_t)s->bytes,
                                       cudaMemcpyDeviceToHost, st->d2h));
        COLLC_CUDA_TRY(cudaEventRecord(st->events[s->event], st->d2h));
        s->state = COLLC_SEG_COPY;
        return 1;
    }
    if (l->ipc) {
        collc_mpicuda_ipc_expect(ctx, l, s);
        return 1;
    }
    void *to = st->aware ? (void *)(collc_mpicuda_piece_at(ctx, p) + s->off) : (void *)s->host;
    int code = MPI_Irecv(to, (int)s->bytes, MPI_BYTE, l->peer, collc_mpicuda_tag(l), st->comm, &s->req);
    if (code != MPI_SUCCESS) return collc_mpicuda_mpi_fail(ctx, code, "receiving", l->peer);
    s->state = COLLC_SEG_MPI;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Completing segments
 * ------------------------------------------------------------------------- */

/* A received segment s of `got` bytes: its size checked (a SLOT's first segment gives the piece's size), then,
 * through the host, copied to the device; over IPC, copied from its mailbox `slot` (NULL: it came over MPI). */
static inline int collc_mpicuda_arrived(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_link *l,
                                        struct collc_mpicuda_seg *s, int64_t got, const collc_u8 *slot)
{
    struct collc_mpicuda_state *st = ctx->st;
    struct collc_mpicuda_piece *p = &ctx->pieces[s->piece];
    collc_u8 *dev = collc_mpicuda_piece_at(ctx, p) + s->off;
    if (p->bytes < 0) { /* the first segment of a SLOT: the header says how long the piece is */
        collc_u64 size = 0;
        if (got < (int64_t)COLLC_CUDA_SLOT_HEADER) return collc_mpicuda_size_fail(ctx, l, got, p->capacity);
        if (slot != NULL) COLLC_CUDA_TRY(cudaMemcpy(&size, slot, sizeof size, cudaMemcpyDeviceToHost));
        else if (st->aware) COLLC_CUDA_TRY(cudaMemcpy(&size, dev, sizeof size, cudaMemcpyDeviceToHost));
        else memcpy(&size, s->host, sizeof size);
        if (size > (collc_u64)(p->capacity - (int64_t)COLLC_CUDA_SLOT_HEADER))
            return collc_mpicuda_size_fail(ctx, l, (int64_t)(COLLC_CUDA_SLOT_HEADER + size), p->capacity);
        p->bytes = (int64_t)(COLLC_CUDA_SLOT_HEADER + size);
        s->bytes = p->bytes < st->segment ? p->bytes : st->segment;
        l->sizing = 0;
        l->posted = s->bytes;
        if (l->posted == p->bytes) {
            l->piece++;
            l->posted = 0;
        }
    }
    if (got != s->bytes) return collc_mpicuda_size_fail(ctx, l, got, s->bytes);
    if (slot != NULL) return collc_mpicuda_ipc_land(ctx, l, s, dev, slot);
    if (st->aware) {
        s->state = COLLC_SEG_FREE;
        return COLLC_CUDA_OK;
    }
    COLLC_CUDA_TRY(cudaMemcpyAsync(dev, s->host, (size_t)got, cudaMemcpyHostToDevice, st->h2d));
    COLLC_CUDA_TRY(cudaEventRecord(st->events[s->event], st->h2d));
    s->state = COLLC_SEG_LAND;
    return COLLC_CUDA_OK;
}

/* Advances segment s; 1 when it moved on, 0 when it waits, < 0 on an error. */
static inline int collc_mpicuda_advance_seg(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_link *l,
                                            struct collc_mpicuda_seg *s)
{
    int flag = 0, code, done, err;
    MPI_Status status;
    switch (s->state) {
    case COLLC_SEG_COPY: /* sending through the host: on to MPI once copied, in order */
        if (s->seq != l->next_mpi || (done = collc_mpicuda_event_done(ctx, s->event)) == 0) return 0;
        if (done < 0) return done;
        return (err = collc_mpicuda_isend(ctx, l, s)) == COLLC_CUDA_OK ? 1 : err;
    case COLLC_SEG_MPI:
        code = MPI_Test(&s->req, &flag, &status);
        if (code != MPI_SUCCESS) {
            int cls = code;
            MPI_Error_class(code, &cls);
            if (!l->send && cls == MPI_ERR_TRUNCATE) /* longer than the schedule says */
                return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI,
                                       "rank %d, step %d: a message from rank %d is longer than the %lld bytes the "
                                       "schedule expects: do all ranks call with the same count and dtype?",
                                       ctx->st->rank, ctx->step_index, l->peer, (long long)s->bytes);
            return collc_mpicuda_mpi_fail(ctx, code, l->send ? "sending" : "receiving", l->peer);
        }
        if (!flag) return 0;
        if (l->send) {
            s->state = COLLC_SEG_FREE;
            return 1;
        }
        {
            int got = 0;
            MPI_Get_count(&status, MPI_BYTE, &got);
            return (err = collc_mpicuda_arrived(ctx, l, s, got, NULL)) == COLLC_CUDA_OK ? 1 : err;
        }
    case COLLC_SEG_IPC_WAIT: { /* over IPC: once the sender's count says it is in the mailbox */
        collc_u8 *slot = NULL;
        const int64_t got = collc_mpicuda_ipc_arrived(ctx, l, s, &slot);
        if (got < 0) return 0;
        return (err = collc_mpicuda_arrived(ctx, l, s, got, slot)) == COLLC_CUDA_OK ? 1 : err;
    }
    case COLLC_SEG_IPC_OUT: /* sent over IPC: free once copied out (the buffer may change again) */
    case COLLC_SEG_LAND: /* received through the host or IPC: free once copied into place */
        if ((done = collc_mpicuda_event_done(ctx, s->event)) <= 0) return done;
        s->state = COLLC_SEG_FREE;
        return 1;
    default:
        return 0;
    }
}

/* Advances a link: its segments in flight in order, then new ones; 1 when anything moved, < 0 on an error. */
static inline int collc_mpicuda_advance(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_link *l)
{
    int moved = 0;
    for (int round = 0; round < 2; round++) {
        const int first = l->seg[1].state != COLLC_SEG_FREE && l->seg[1].seq < l->seg[0].seq ? 1 : 0;
        for (int k = 0; k < 2; k++) {
            struct collc_mpicuda_seg *s = &l->seg[(first + k) % 2];
            int got = collc_mpicuda_advance_seg(ctx, l, s);
            if (got < 0) return got;
            moved |= got;
        }
        for (int k = 0; k < 2; k++) {
            struct collc_mpicuda_seg *s = &l->seg[k];
            int got;
            if (s->state != COLLC_SEG_FREE) continue;
            if ((got = collc_mpicuda_post(ctx, l, s)) < 0) return got;
            moved |= got;
        }
    }
    return moved;
}

static inline int collc_mpicuda_link_done(const struct collc_mpicuda_link *l)
{
    return l->piece == l->npieces && !l->sizing && l->seg[0].state == COLLC_SEG_FREE &&
           l->seg[1].state == COLLC_SEG_FREE;
}

/* After a failure: cancels the receives still posted and lets the sends finish on their own. */
static inline void collc_mpicuda_abandon(struct collc_mpicuda_ctx *ctx, int nlinks)
{
    for (int i = 0; i < nlinks; i++)
        for (int k = 0; k < 2; k++) {
            struct collc_mpicuda_seg *s = &ctx->links[i].seg[k];
            if (s->state == COLLC_SEG_MPI && s->req != MPI_REQUEST_NULL) {
                if (!ctx->links[i].send) MPI_Cancel(&s->req);
                MPI_Request_free(&s->req);
            }
            s->state = COLLC_SEG_FREE;
        }
    ctx->st->broken = 1; /* pinned buffers may still be read by MPI: kept until release */
}

/* Moves every link of the step to completion, or fails (an MPI error, a wrong size, or the watchdog). */
static inline int collc_mpicuda_exchange(struct collc_mpicuda_ctx *ctx, int nlinks)
{
    double last = MPI_Wtime();
    for (;;) {
        int moved = 0, pending = 0;
        for (int i = 0; i < nlinks; i++) {
            struct collc_mpicuda_link *l = &ctx->links[i];
            int got;
            if (collc_mpicuda_link_done(l)) continue;
            if ((got = collc_mpicuda_advance(ctx, l)) < 0) {
                collc_mpicuda_abandon(ctx, nlinks);
                return got;
            }
            moved |= got;
            pending |= !collc_mpicuda_link_done(l);
        }
        if (!pending) return COLLC_CUDA_OK;
        if (moved) {
            last = MPI_Wtime();
            continue;
        }
        if (MPI_Wtime() - last > ctx->st->timeout) {
            char peers[256];
            size_t used = 0;
            peers[0] = '\0';
            for (int i = 0; i < nlinks && used + 32 < sizeof peers; i++)
                if (!collc_mpicuda_link_done(&ctx->links[i]))
                    used += (size_t)snprintf(peers + used, sizeof peers - used, "%s%s rank %d", used ? "," : "",
                                             ctx->links[i].send ? " sending to" : " receiving from",
                                             ctx->links[i].peer);
            collc_mpicuda_abandon(ctx, nlinks);
            return collc_cuda_fail(COLLC_MPICUDA_ERR_TIMEOUT,
                                   "rank %d, step %d (phase %s): no progress for %g s (COLLC_TIMEOUT), still%s: "
                                   "a rank died, stopped, or called with another count",
                                   ctx->st->rank, ctx->step_index, ctx->phase_name, ctx->st->timeout, peers);
        }
        sched_yield();
    }
}

/* ---------------------------------------------------------------------------
 * The transport: CUDA-aware MPI or pinned host buffers
 * ------------------------------------------------------------------------- */

#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif
#endif

/* Whether MPI takes device pointers: COLLC_CUDA_AWARE=0/1 decides; otherwise MPIX_Query_cuda_support where the
 * MPI has it.  `why` says which; < 0 for a bad setting. */
static inline int collc_mpicuda_detect_aware(char *why, size_t n)
{
    const char *env = getenv("COLLC_CUDA_AWARE");
    if (env != NULL && *env != '\0' && strcmp(env, "auto") != 0) {
        if (strcmp(env, "0") != 0 && strcmp(env, "1") != 0)
            return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "COLLC_CUDA_AWARE=%s: expected 0, 1 or auto", env);
        snprintf(why, n, "COLLC_CUDA_AWARE=%s", env);
        return env[0] == '1';
    }
#if (defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT) || defined(MPIX_GPU_SUPPORT_CUDA)
    {
        const int yes = MPIX_Query_cuda_support();
        snprintf(why, n, "MPIX_Query_cuda_support() = %d", yes);
        return yes != 0;
    }
#else
    snprintf(why, n, "this MPI has no MPIX_Query_cuda_support");
    return 0;
#endif
}

/* A positive number from the environment, or `fallback`; < 0 (an error set) for a bad value. */
static inline double collc_mpicuda_env_number(const char *name, double fallback, double least)
{
    const char *env = getenv(name);
    char *end = NULL;
    double value;
    if (env == NULL || *env == '\0') return fallback;
    value = strtod(env, &end);
    if (end == env || *end != '\0' || !(value >= least))
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s=%s: expected a number >= %g", name, env, least);
    return value;
}

#endif /* COLLC_MPICUDA_WIRE_CUH */
