/* collc_mpicuda.cuh: running a schedule's step tables with one MPI process per GPU.
 *
 * A generated collc_<algorithm>_mpicuda.cu holds the same tables as the
 * single-process cuda target (collc_cuda.cuh: for every phase its steps, one
 * row per message with the sender, the receiver and its chunk runs, the chunk
 * runs, the local compress / decompress ops) and one `struct
 * collc_mpicuda_sched` naming them.  This header runs them for the calling
 * process, which is rank `r` of an MPI communicator of p processes: its
 * buffer lives on the current CUDA device, and each step does what the rows
 * that name r say.
 *
 * Buffers and chunks are exactly the cuda target's (collc_cuda_layout_of):
 * every rank's buffer holds the collective's whole logical element space;
 * for counts given at run time, the chunks are cut by them
 * (collc_mpicuda_vcoll.cuh, collc_cuda_vcoll.cuh).
 *
 * Issue order: schedules without compression points run by dataflow by
 * default (collc_mpicuda_flow.cuh: each message goes when the messages it
 * depends on are done, whatever its step); COLLC_ISSUE=steps, and every
 * schedule with compression points, run step by step as follows.
 *
 * A step, on rank r (steps r takes no part in are skipped):
 *
 *   1. its local compress / decompress ops, on the rank's main stream;
 *   2. the main stream is synchronised: the buffer holds the start-of-step
 *      data, and the previous step's scratch space is free;
 *   3. the chunks r sends compressed on the wire are encoded, one after the
 *      other, on the `enc` stream, each followed by a copy of its payload's
 *      size to pinned memory and an event;
 *   4. every message of the step moves (collc_mpicuda_wire.cuh): a raw run
 *      straight from the buffer, a compressed chunk from its slot as soon as
 *      its event has fired (the next chunk is encoded meanwhile); incoming
 *      messages land in scratch space, or straight into the buffer for a
 *      "direct" one (copies of chunks r does not send in the step);
 *   5. once every message is through (so every send has read start-of-step
 *      data), the arrivals are applied on the main stream: reductions,
 *      decompressions fused with the reduction, decompress + reduce +
 *      re-compress into the payload store where the chunk is sent on next
 *      (COLLC_CUDA_REENCODE: the next send then forwards that payload as it
 *      is), payload copies and homomorphic sums into the store.
 *
 * Scratch space, per step: [ payload store ][ incoming messages ][ wire encodes ].
 *
 * Kept from call to call until collc_mpicuda_release(): four streams, events,
 * scratch, pinned staging buffers; and until the caller's communicator is
 * freed, its duplicate (MPI_ERRORS_RETURN, an attribute of it) and the
 * communicator of its ranks on this host; until the release, the IPC
 * mailboxes and flags (collc_mpicuda_ipc.cuh).  Settings, read at the first
 * call (after a release, at the next): COLLC_TRANSPORT (auto, ipc, mpi),
 * COLLC_IPC_GROUP, COLLC_CUDA_AWARE (0, 1, auto), COLLC_SEGMENT_BYTES (bytes
 * per message, default 4 MiB; these four the same on every rank: compared at
 * the first call on each communicator), COLLC_TIMEOUT (seconds without
 * progress before a call fails, default 60); read at every call: COLLC_ISSUE
 * (dataflow, steps).  Not thread-safe.
 */
#ifndef COLLC_MPICUDA_CUH
#define COLLC_MPICUDA_CUH

#include <mpi.h>

#include "collc_cuda.cuh" /* the table types, the chunk layout, the codec jobs and the reduction kernels */

enum {
    COLLC_MPICUDA_ERR_MPI = -4,    /* an MPI call failed, or a message had the wrong size */
    COLLC_MPICUDA_ERR_TIMEOUT = -5 /* no progress for COLLC_TIMEOUT seconds */
};

/* One phase's tables (the generated file's arrays). */
struct collc_mpicuda_phase {
    const char *name;
    const struct collc_cuda_step *steps;
    int nsteps;
    const struct collc_cuda_msg *msgs;
    const struct collc_cuda_run *runs;
    const struct collc_cuda_local *locals;
};

/* Dataflow issue: one message of a rank (its row of a phase's messages) and the earlier ones it waits for. */
struct collc_mpicuda_fop {
    int phase, msg;          /* phases[phase].msgs[msg] */
    int first_dep, ndeps;    /* deps[first_dep ..]: indices among the rank's messages */
};

/* Dataflow issue's tables (collc_mpicuda_flow.cuh). */
struct collc_mpicuda_flow {
    const struct collc_mpicuda_fop *ops; /* every rank's messages in table order, rank by rank */
    const int *first;                    /* [nranks + 1]: rank r's are ops[first[r] .. first[r + 1] - 1] */
    const int *deps;
    const int *links;                    /* [nranks]: the messages a rank may have under way at once */
};

/* A compiled schedule: the cuda target's description (its `run` is NULL), the phases, and dataflow's tables. */
struct collc_mpicuda_sched {
    struct collc_cuda_sched base;
    const struct collc_mpicuda_phase *phases;
    int nphases;
    const struct collc_mpicuda_flow *flow; /* NULL: step by step only (compression points) */
};

/* What this process keeps between calls. */
struct collc_mpicuda_state {
    int ready;
    MPI_Comm comm;       /* the duplicate of the communicator of the call (its attribute) */
    int rank, size, device, aware, broken;
    int stuck;           /* a stream-ordered call did not finish: its stream may never get free */
    int captured;        /* the last call was enqueued into a CUDA graph capture */
    char why[160];       /* how the transport was chosen */
    int transport;       /* COLLC_TRANSPORT (collc_mpicuda_ipc.cuh's collc_mpicuda_transport_kind) */
    int ipc_group;       /* COLLC_IPC_GROUP: at most this many ranks of a host share IPC (0: all) */
    struct collc_mpicuda_comm *comms; /* every communicator's entry with IPC set up, for the release */
    int stream_setting;  /* COLLC_STREAM_ORDERED: 0 keeps every call host-driven */
    int memops;          /* stream memory operations: 0 not tried yet, 1 usable, -1 not */
    int (*wait32)(cudaStream_t, unsigned long long, unsigned, unsigned);  /* cuStreamWaitValue32 */
    int (*write32)(cudaStream_t, unsigned long long, unsigned, unsigned); /* cuStreamWriteValue32 */
    const struct collc_mpicuda_comm *last; /* the communicator of the last call */
    int64_t segment;     /* bytes per MPI message */
    double timeout;      /* seconds */
    cudaStream_t main, enc, d2h, h2d;
    cudaEvent_t done;
    cudaEvent_t *events;
    int nevents;
    char *scratch;
    size_t scratch_bytes;
    collc_u8 *pinned; /* 2 segments per message of a step (staged transport) */
    size_t pinned_bytes;
    collc_u64 *sizes; /* pinned: the payload sizes of a step's compressed sends */
    int nsizes;
    collc_u64 *bad; /* a codec's refusal, on the device */
    int max_blocks;
    struct collc_mpicuda_piece *pieces;
    int npieces;
    struct collc_mpicuda_link *links;
    int nlinks;
    struct collc_mpicuda_fx *fx; /* dataflow issue: the state of every message, */
    int nfx;
    int *fints; /* ... who waits for each, the free places */
    size_t nfints;
};

/* One call (or a sizing pass, which moves nothing). */
struct collc_mpicuda_ctx {
    const struct collc_mpicuda_sched *sched;
    struct collc_mpicuda_state *st;
    struct collc_cuda_ctx cu; /* layout, element size, op and payload store, for collc_cuda.cuh's helpers */
    char *buffer, *scratch;
    char *buffers[1];
    int rank, sizing;
    int step_index;
    const char *phase_name;
    struct collc_mpicuda_piece *pieces;
    struct collc_mpicuda_link *links;
    struct collc_mpicuda_ipc *ipc; /* the communicator's IPC between the ranks of this host, or NULL */
    size_t need_scratch;
    int need_pieces, need_links, need_events, need_sizes;
    int flow;                      /* by dataflow (collc_mpicuda_flow.cuh), not step by step */
    int need_places, need_fx;      /* dataflow: places, messages */
    size_t need_fints;
    int64_t place_largest;         /* dataflow: the largest raw piece of a message (bytes) */
    int64_t place_bytes;           /* dataflow: scratch per place */
    int64_t pinned_stride;         /* bytes of each pinned segment buffer (staged transport) */
    int flow_n, flow_edges, nfree; /* dataflow: messages, dependencies, free places */
};

#include "collc_mpicuda_wire.cuh"

static struct collc_mpicuda_state collc_mpicuda_kept;

/* ---------------------------------------------------------------------------
 * Planning a step: its links and pieces, where they land and where they are encoded
 * ------------------------------------------------------------------------- */

static inline int64_t collc_mpicuda_elem_at(const struct collc_mpicuda_ctx *ctx, int c)
{
    return collc_cuda_chunk_offset(&ctx->cu.layout, c);
}

/* Adds message m's pieces (sizing: counts them); returns how many.  `area` is the end of the scratch used so far;
 * `largest` (when not NULL) grows to the largest raw piece.  Raw runs that follow each other in the buffer (a
 * copy run then a reduce run, or runs split by empty chunks) travel as one piece: the pieces depend only on which
 * elements the message carries, so a sender and a receiver whose tables split the same elements into different
 * runs still cut the same pieces (any-p tables, collc_mpicuda_anyp.cuh, have the sender's runs merged). */
static inline int collc_mpicuda_plan_msg(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                         const struct collc_cuda_msg *m, int send, int first, int *nready,
                                         int64_t *area, int64_t *largest)
{
    int n = 0;
    int64_t open_end = -1, open_bytes = 0; /* the element after the last piece when it is raw (else -1), its bytes */
    for (int k = 0; k < m->nruns; k++) {
        const struct collc_cuda_run *r = &ph->runs[m->first_run + k];
        if (r->how == COLLC_CUDA_VALUES) {
            const int64_t bytes = collc_cuda_run_bytes(&ctx->cu, r), lo = collc_mpicuda_elem_at(ctx, r->lo);
            const int scratch = !send && m->landing != COLLC_CUDA_DIRECT;
            struct collc_mpicuda_piece p = {COLLC_MPICUDA_RAW, m->first_run + k, r->lo, COLLC_MPICUDA_IN_BUFFER,
                                            lo * ctx->cu.elem_bytes, bytes, bytes, -1};
            if (bytes == 0) continue;
            if (scratch) { /* consecutive raw runs land one after the other */
                p.base = COLLC_MPICUDA_IN_SCRATCH;
                p.at = *area;
                *area += bytes;
            }
            if (open_end == lo) { /* the previous piece grows */
                open_bytes += bytes;
                if (!ctx->sizing) ctx->pieces[first + n - 1].bytes = ctx->pieces[first + n - 1].capacity = open_bytes;
            } else {
                open_bytes = bytes;
                if (!ctx->sizing) ctx->pieces[first + n] = p;
                n++;
            }
            if (largest != NULL && open_bytes > *largest) *largest = open_bytes;
            open_end = collc_mpicuda_elem_at(ctx, r->hi);
            continue;
        }
        open_end = -1;
        for (int c = r->lo; c < r->hi; c++) {
            struct collc_mpicuda_piece p = {COLLC_MPICUDA_SLOT, m->first_run + k, c, COLLC_MPICUDA_IN_SCRATCH, 0, -1,
                                            0, -1};
            struct collc_cuda_slot slot;
            if (collc_cuda_chunk_elems(&ctx->cu, c) == 0) continue;
            slot = collc_cuda_chunk_slot(&ctx->cu, r->codec, c);
            p.capacity = (int64_t)(COLLC_CUDA_SLOT_HEADER + slot.capacity);
            if (!send || (r->how == COLLC_CUDA_WIRE && !(r->fuse & COLLC_CUDA_ENCODED))) {
                p.at = (int64_t)collc_cuda_align16((collc_u64)*area);
                *area = p.at + (int64_t)slot.bytes;
            } else {
                p.at = ctx->cu.store_at[c]; /* a payload the store holds */
            }
            if (send) p.ready = (*nready)++;
            if (!ctx->sizing) ctx->pieces[first + n] = p;
            n++;
        }
    }
    return n;
}

/* Link i's route: IPC when the peer shares the host (with, for the order of the pair's segments, the previous
 * link to the same peer in the same direction), MPI otherwise. */
static inline void collc_mpicuda_link_route(struct collc_mpicuda_ctx *ctx, int i)
{
    struct collc_mpicuda_link *l = &ctx->links[i];
    l->prev = -1;
    l->ipc = ctx->ipc != NULL && ctx->ipc->local_of[l->peer] >= 0;
    for (int k = i - 1; l->ipc && k >= 0 && l->prev < 0; k--)
        if (ctx->links[k].peer == l->peer && ctx->links[k].send == l->send) l->prev = k;
}

/* This rank's links and pieces in a step (receives first, then sends); returns the number of links. */
static inline int collc_mpicuda_plan_step(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                          const struct collc_cuda_step *step, int *nready)
{
    const struct collc_cuda_msg *m = ph->msgs + step->first;
    int64_t area = ctx->cu.store_at[ctx->sched->base.nchunks];
    int nlinks = 0, npieces = 0;
    *nready = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < step->n; i++) {
            const int send = pass == 1;
            int n;
            if ((send ? m[i].src : m[i].dst) != ctx->rank || m[i].src == m[i].dst) continue;
            n = collc_mpicuda_plan_msg(ctx, ph, &m[i], send, npieces, nready, &area, NULL);
            if (n == 0) continue;
            if (!ctx->sizing) {
                struct collc_mpicuda_link *l = &ctx->links[nlinks];
                memset(l, 0, sizeof *l);
                l->msg = &m[i];
                l->send = send;
                l->peer = send ? m[i].dst : m[i].src;
                l->first = npieces;
                l->npieces = n;
                collc_mpicuda_link_route(ctx, nlinks);
            }
            npieces += n;
            nlinks++;
        }
    if (ctx->sizing) {
        if ((size_t)area > ctx->need_scratch) ctx->need_scratch = (size_t)area;
        if (npieces > ctx->need_pieces) ctx->need_pieces = npieces;
        if (nlinks > ctx->need_links) ctx->need_links = nlinks;
        if (*nready > ctx->need_sizes) ctx->need_sizes = *nready;
        if (*nready + 2 * nlinks > ctx->need_events) ctx->need_events = *nready + 2 * nlinks;
    }
    return nlinks;
}

/* ---------------------------------------------------------------------------
 * GPU work of a step: local ops, wire encodes, arrivals
 * ------------------------------------------------------------------------- */

static inline collc_u8 *collc_mpicuda_store(const struct collc_mpicuda_ctx *ctx, int c)
{
    return (collc_u8 *)ctx->scratch + ctx->cu.store_at[c];
}

/* A codec job on chunk c of this rank's buffer and a slot. */
static inline struct collc_cuda_job collc_mpicuda_job(const struct collc_mpicuda_ctx *ctx, int codec, int c,
                                                      collc_u8 *slot)
{
    const int64_t at = collc_mpicuda_elem_at(ctx, c);
    return collc_cuda_job_of(0, &ctx->sched->base.codecs[codec], codec, collc_cuda_chunk_elems(&ctx->cu, c),
                             (collc_u64)at, (float *)(ctx->buffer + at * ctx->cu.elem_bytes), slot, ctx->st->bad);
}

static inline int collc_mpicuda_launched(const struct collc_mpicuda_ctx *ctx, cudaError_t err, const char *what)
{
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err == cudaSuccess) return COLLC_CUDA_OK;
    return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "rank %d, step %d: %s failed: %s (%s)", ctx->st->rank,
                           ctx->step_index, what, cudaGetErrorString(err), cudaGetErrorName(err));
}

/* This rank's local ops of a step, on the main stream. */
static inline int collc_mpicuda_locals(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                       const struct collc_cuda_step *step)
{
    const struct collc_mpicuda_state *st = ctx->st;
    for (int i = 0; i < step->nlocal; i++) {
        const struct collc_cuda_local *op = &ph->locals[step->first_local + i];
        if (op->rank != ctx->rank) continue;
        for (int c = op->lo; c < op->hi; c++) {
            struct collc_cuda_job j;
            cudaError_t err;
            int e;
            if (collc_cuda_chunk_elems(&ctx->cu, c) == 0) continue;
            j = collc_mpicuda_job(ctx, op->codec, c, collc_mpicuda_store(ctx, c));
            if (op->what == COLLC_CUDA_COMPRESS) err = collc_cuda_encode(j, st->max_blocks, st->main);
            else err = collc_cuda_decode(j, -1, st->max_blocks, st->main);
            e = collc_mpicuda_launched(ctx, err, op->what == COLLC_CUDA_COMPRESS ? "compress" : "decompress");
            if (e != COLLC_CUDA_OK) return e;
        }
    }
    return COLLC_CUDA_OK;
}

/* The step's compressed sends, on the enc stream: each chunk encoded (unless its payload is ready in the store),
 * its size copied to pinned memory, an event. */
static inline int collc_mpicuda_encodes(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                        int nlinks)
{
    struct collc_mpicuda_state *st = ctx->st;
    for (int i = 0; i < nlinks; i++) {
        const struct collc_mpicuda_link *l = &ctx->links[i];
        for (int k = 0; l->send && k < l->npieces; k++) {
            const struct collc_mpicuda_piece *p = &ctx->pieces[l->first + k];
            const struct collc_cuda_run *r = &ph->runs[p->run];
            collc_u8 *slot = collc_mpicuda_piece_at(ctx, p);
            if (p->kind != COLLC_MPICUDA_SLOT) continue;
            if (r->how == COLLC_CUDA_WIRE && !(r->fuse & COLLC_CUDA_ENCODED)) {
                cudaError_t err = collc_cuda_encode(collc_mpicuda_job(ctx, r->codec, p->chunk, slot), st->max_blocks,
                                                    st->enc);
                int e = collc_mpicuda_launched(ctx, err, "compressing for the wire");
                if (e != COLLC_CUDA_OK) return e;
            }
            COLLC_CUDA_TRY(cudaMemcpyAsync(&st->sizes[p->ready], slot, sizeof *st->sizes, cudaMemcpyDeviceToHost,
                                           st->enc));
            COLLC_CUDA_TRY(cudaEventRecord(st->events[p->ready], st->enc));
        }
    }
    return COLLC_CUDA_OK;
}

/* A compressed chunk that landed in `slot`: into the buffer (decoded, reduced, re-encoded) or into the store. */
static inline int collc_mpicuda_arrive_slot(struct collc_mpicuda_ctx *ctx, const struct collc_cuda_run *r, int c,
                                            collc_u8 *slot)
{
    const struct collc_mpicuda_state *st = ctx->st;
    const struct collc_cuda_job j = collc_mpicuda_job(ctx, r->codec, c, slot);
    collc_u8 *store = collc_mpicuda_store(ctx, c);
    if (r->how == COLLC_CUDA_WIRE && (r->fuse & COLLC_CUDA_REENCODE))
        return collc_mpicuda_launched(
            ctx, collc_cuda_reduce_encode(j, store, ctx->cu.op, st->max_blocks, st->main),
            "decompressing, reducing and compressing");
    if (r->how == COLLC_CUDA_WIRE) {
        const int op = r->action == COLLC_CUDA_REDUCE ? ctx->cu.op : -1;
        return collc_mpicuda_launched(ctx, collc_cuda_decode(j, op, st->max_blocks, st->main),
                                      op < 0 ? "decompressing" : "decompressing and reducing");
    }
    if (r->action == COLLC_CUDA_COPY)
        return collc_mpicuda_launched(ctx,
                                      collc_cuda_forward(store, slot, &ctx->sched->base.codecs[r->codec],
                                                         collc_cuda_chunk_elems(&ctx->cu, c), st->max_blocks,
                                                         st->main),
                                      "a payload copy");
    return collc_mpicuda_launched(
        ctx, collc_cuda_add_payloads(collc_mpicuda_job(ctx, r->codec, c, store), slot, st->max_blocks, st->main),
        "adding payloads");
}

/* Copies or reduces received piece `p` (raw, in scratch) into the buffer on the main stream: each of the runs it
 * covers (from its first, until its bytes are used up) by the run's action. */
static inline int collc_mpicuda_apply_piece(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                            const struct collc_mpicuda_piece *p)
{
    struct collc_mpicuda_state *st = ctx->st;
    int64_t done = 0;
    for (int k = p->run; done < p->bytes; k++) {
        const struct collc_cuda_run *r = &ph->runs[k];
        const int64_t bytes = collc_cuda_run_bytes(&ctx->cu, r);
        char *at = ctx->buffer + collc_mpicuda_elem_at(ctx, r->lo) * ctx->cu.elem_bytes;
        int err;
        if (bytes == 0) continue;
        if (r->action == COLLC_CUDA_REDUCE) {
            ctx->cu.reduce(at, ctx->scratch + p->at + done, bytes / ctx->cu.elem_bytes, st->max_blocks, st->main);
            err = collc_mpicuda_launched(ctx, cudaSuccess, "a reduction");
        } else {
            err = collc_mpicuda_launched(ctx,
                                         cudaMemcpyAsync(at, ctx->scratch + p->at + done, (size_t)bytes,
                                                         cudaMemcpyDeviceToDevice, st->main),
                                         "a copy");
        }
        if (err != COLLC_CUDA_OK) return err;
        done += bytes;
    }
    return COLLC_CUDA_OK;
}

/* Every received message of the step, applied on the main stream. */
static inline int collc_mpicuda_arrivals(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                         int nlinks)
{
    for (int i = 0; i < nlinks; i++) {
        const struct collc_mpicuda_link *l = &ctx->links[i];
        if (l->send || l->msg->landing == COLLC_CUDA_DIRECT) continue;
        for (int k = 0; k < l->npieces; k++) {
            const struct collc_mpicuda_piece *p = &ctx->pieces[l->first + k];
            const int err = p->kind == COLLC_MPICUDA_SLOT
                                ? collc_mpicuda_arrive_slot(ctx, &ph->runs[p->run], p->chunk,
                                                            collc_mpicuda_piece_at(ctx, p))
                                : collc_mpicuda_apply_piece(ctx, ph, p);
            if (err != COLLC_CUDA_OK) return err;
        }
    }
    return COLLC_CUDA_OK;
}

/* ---------------------------------------------------------------------------
 * Steps
 * ------------------------------------------------------------------------- */

/* Whether this rank takes part in the step (a message or a local op). */
static inline int collc_mpicuda_takes_part(const struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                           const struct collc_cuda_step *step)
{
    for (int i = 0; i < step->n; i++) {
        const struct collc_cuda_msg *m = &ph->msgs[step->first + i];
        if (m->src == ctx->rank || m->dst == ctx->rank) return 1;
    }
    for (int i = 0; i < step->nlocal; i++)
        if (ph->locals[step->first_local + i].rank == ctx->rank) return 1;
    return 0;
}

/* The segments of each link: their events and, through the host, their pinned buffers. */
static inline void collc_mpicuda_arm_links(struct collc_mpicuda_ctx *ctx, int nlinks, int nready)
{
    struct collc_mpicuda_state *st = ctx->st;
    for (int i = 0; i < nlinks; i++)
        for (int k = 0; k < 2; k++) {
            struct collc_mpicuda_seg *s = &ctx->links[i].seg[k];
            s->state = COLLC_SEG_FREE;
            s->event = nready + 2 * i + k;
            s->host = st->aware ? NULL : st->pinned + (size_t)(2 * i + k) * (size_t)st->segment;
        }
}

static inline int collc_mpicuda_run_step(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                         const struct collc_cuda_step *step)
{
    struct collc_mpicuda_state *st = ctx->st;
    int nlinks, nready = 0, err;
    if (!collc_mpicuda_takes_part(ctx, ph, step)) return COLLC_CUDA_OK;
    ctx->step_index = step->index;
    ctx->phase_name = ph->name;
    nlinks = collc_mpicuda_plan_step(ctx, ph, step, &nready);
    if (ctx->sizing) return COLLC_CUDA_OK;
    if ((err = collc_mpicuda_locals(ctx, ph, step)) != COLLC_CUDA_OK) return err;
    if (nlinks == 0) return COLLC_CUDA_OK;
    COLLC_CUDA_TRY(cudaStreamSynchronize(st->main));
    collc_mpicuda_arm_links(ctx, nlinks, nready);
    if ((err = collc_mpicuda_encodes(ctx, ph, nlinks)) != COLLC_CUDA_OK) return err;
    if ((err = collc_mpicuda_exchange(ctx, nlinks)) != COLLC_CUDA_OK) return err;
    return collc_mpicuda_arrivals(ctx, ph, nlinks);
}

#include "collc_mpicuda_flow.cuh"

/* The whole schedule for the calling rank: by dataflow, or step by step (COLLC_ISSUE=steps, compression points). */
static inline int collc_mpicuda_run_all(struct collc_mpicuda_ctx *ctx)
{
    const struct collc_mpicuda_sched *s = ctx->sched;
    if (ctx->flow) return collc_mpicuda_run_flow(ctx);
    for (int ph = 0; ph < s->nphases; ph++)
        for (int i = 0; i < s->phases[ph].nsteps; i++) {
            int err = collc_mpicuda_run_step(ctx, &s->phases[ph], &s->phases[ph].steps[i]);
            if (err != COLLC_CUDA_OK) return err;
        }
    return COLLC_CUDA_OK;
}

/* ---------------------------------------------------------------------------
 * Calls
 * ------------------------------------------------------------------------- */

/* COLLC_ISSUE: 1 for steps, 0 for dataflow (or unset), < 0 (an error set) for anything else. */
static inline int collc_mpicuda_issue_steps(void)
{
    const char *env = getenv("COLLC_ISSUE");
    if (env == NULL || *env == '\0' || strcmp(env, "dataflow") == 0) return 0;
    if (strcmp(env, "steps") == 0) return 1;
    return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "COLLC_ISSUE=%s: expected dataflow or steps", env);
}

/* A context for `count` elements on `rank`, sized (what the rank's steps need).  `offsets`: the chunks' offsets of
 * a call whose counts are given at run time (`count` their total; collc_mpicuda_vcoll.cuh), or NULL. */
static inline int collc_mpicuda_ctx_init(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_sched *s,
                                         int64_t count, const int64_t *offsets, int dtype, int op, int rank)
{
    int err;
    memset(ctx, 0, sizeof *ctx);
    err = offsets != NULL ? collc_cuda_check_type(&s->base, dtype, op)
                          : collc_cuda_check_args(&s->base, count, dtype, op);
    if (err != COLLC_CUDA_OK) return err;
    ctx->sched = s;
    ctx->rank = rank;
    ctx->cu.sched = &s->base;
    ctx->cu.layout = collc_cuda_layout_of(&s->base, count);
    ctx->cu.layout.offsets = offsets;
    ctx->cu.elem_bytes = collc_cuda_dtype_size[dtype];
    ctx->cu.op = op;
    ctx->cu.reduce = collc_cuda_reducers[dtype][op];
    ctx->cu.buffers = ctx->buffers;
    ctx->cu.store_at = (int64_t *)calloc((size_t)s->base.nchunks + 1, sizeof *ctx->cu.store_at);
    if (ctx->cu.store_at == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
    collc_cuda_store_layout(&ctx->cu);
    ctx->need_scratch = (size_t)ctx->cu.store_at[s->base.nchunks];
    if ((err = collc_mpicuda_issue_steps()) < 0) return err;
    ctx->flow = s->flow != NULL && !err;
    ctx->sizing = 1;
    err = collc_mpicuda_run_all(ctx);
    ctx->sizing = 0;
    return err;
}

static inline void collc_mpicuda_ctx_free(struct collc_mpicuda_ctx *ctx)
{
    free(ctx->cu.store_at);
}

#include "collc_mpicuda_state.cuh" /* the kept state: communicator, streams, events, scratch, pinned buffers */
#include "collc_mpicuda_stream.cuh" /* a whole call enqueued on the caller's stream */

/* The communicator's rank in *rank; 0, or COLLC_CUDA_ERR_ARG when it is not one of p ranks for schedule s. */
static inline int collc_mpicuda_comm_check(const struct collc_mpicuda_sched *s, MPI_Comm comm, int *rank)
{
    int size = 0;
    if (comm == MPI_COMM_NULL) return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "the communicator is MPI_COMM_NULL");
    MPI_Comm_rank(comm, rank);
    MPI_Comm_size(comm, &size);
    if (size != s->base.nranks)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "rank %d: the communicator has %d ranks, %s was compiled for p=%d",
                               *rank, size, s->base.algorithm, s->base.nranks);
    return COLLC_CUDA_OK;
}

/* The whole collective on this rank's `buffer` (current device); see the generated header for the contract.
 * `offsets`: the chunks' offsets of a call whose counts are given at run time, `count` their total, the counts
 * compared across the ranks already (collc_mpicuda_vcoll.cuh); NULL: count's own cut. */
static inline int collc_mpicuda_execute_at(const struct collc_mpicuda_sched *s, void *buffer, int64_t count,
                                           const int64_t *offsets, int dtype, int op, MPI_Comm comm, void *stream)
{
    struct collc_mpicuda_ctx ctx;
    struct collc_mpicuda_state *st = &collc_mpicuda_kept;
    int rank = 0, err;
    if ((err = collc_mpicuda_comm_check(s, comm, &rank)) != COLLC_CUDA_OK) return err;
    if ((err = collc_mpicuda_ctx_init(&ctx, s, count, offsets, dtype, op, rank)) != COLLC_CUDA_OK || count == 0)
        goto out;
    if (buffer == NULL) {
        err = collc_cuda_fail(COLLC_CUDA_ERR_ARG, "rank %d: buffer is NULL", rank);
        goto out;
    }
    if ((err = collc_mpicuda_prepare(st, comm)) != COLLC_CUDA_OK) goto out;
    ctx.st = st;
    ctx.buffer = ctx.buffers[0] = (char *)buffer;
    ctx.ipc = st->last->ipc;
    if ((err = collc_mpicuda_stream_decide(&ctx, (struct collc_mpicuda_comm *)st->last)) != COLLC_CUDA_OK) goto out;
    if (st->last->stream) { /* enqueued on the caller's stream, nothing allocated: the host does not wait */
        err = collc_mpicuda_stream_call(&ctx, (struct collc_mpicuda_comm *)st->last, (cudaStream_t)stream, count,
                                        dtype, op);
        goto out;
    }
    if ((err = collc_mpicuda_reserve(st, &ctx)) != COLLC_CUDA_OK) goto out;
    ctx.scratch = st->scratch;
    ctx.pieces = st->pieces;
    ctx.links = st->links;
    ctx.pinned_stride = collc_mpicuda_pinned_stride(st, &ctx);
    if ((err = collc_mpicuda_begin(st, (cudaStream_t)stream, s->base.ncodecs > 0)) != COLLC_CUDA_OK) goto out;
    err = collc_mpicuda_run_all(&ctx);
    if (cudaEventRecord(st->done, st->main) == cudaSuccess) cudaStreamWaitEvent((cudaStream_t)stream, st->done, 0);
out:
    collc_mpicuda_ctx_free(&ctx);
    return err;
}

/* The whole collective on this rank's `buffer`, its chunks cut from `count`. */
static inline int collc_mpicuda_execute(const struct collc_mpicuda_sched *s, void *buffer, int64_t count, int dtype,
                                        int op, MPI_Comm comm, void *stream)
{
    return collc_mpicuda_execute_at(s, buffer, count, NULL, dtype, op, comm, stream);
}

/* The scratch bytes `rank` needs for `count` elements of `dtype` (`offsets`: as for collc_mpicuda_ctx_init); -1
 * for bad arguments. */
static inline int64_t collc_mpicuda_scratch_bytes_at(const struct collc_mpicuda_sched *s, int64_t count,
                                                     const int64_t *offsets, int dtype, int rank)
{
    struct collc_mpicuda_ctx ctx;
    int64_t need = -1;
    memset(&ctx, 0, sizeof ctx); /* freed below, also when `rank` is out of range */
    if (rank >= 0 && rank < s->base.nranks &&
        collc_mpicuda_ctx_init(&ctx, s, count, offsets, dtype, COLLC_CUDA_SUM, rank) == COLLC_CUDA_OK)
        need = (int64_t)ctx.need_scratch;
    collc_mpicuda_ctx_free(&ctx);
    return need;
}

/* The scratch bytes `rank` needs for `count` elements of `dtype`; -1 for bad arguments. */
static inline int64_t collc_mpicuda_scratch_bytes(const struct collc_mpicuda_sched *s, int64_t count, int dtype,
                                                  int rank)
{
    return collc_mpicuda_scratch_bytes_at(s, count, NULL, dtype, rank);
}

/* Waits for the last call and reports a value a codec refused in it (COLLC_CUDA_ERR_CODEC), or 0. */
static inline int collc_mpicuda_check(const struct collc_mpicuda_sched *s)
{
    struct collc_mpicuda_state *st = &collc_mpicuda_kept;
    collc_u64 bad = COLLC_NONE;
    if (!st->ready) return COLLC_CUDA_OK;
    if (st->last != NULL && st->last->stream > 0) return st->captured ? COLLC_CUDA_OK : collc_mpicuda_stream_wait(st);
    COLLC_CUDA_TRY(cudaStreamSynchronize(st->main));
    if (s->base.ncodecs == 0) return COLLC_CUDA_OK;
    COLLC_CUDA_TRY(cudaMemcpy(&bad, st->bad, sizeof bad, cudaMemcpyDeviceToHost));
    if (bad == COLLC_NONE) return COLLC_CUDA_OK;
    const int codec = (int)(bad & 0xFF);
    return collc_cuda_fail(COLLC_CUDA_ERR_CODEC,
                           "rank %d, element %llu: %s cannot encode the value there (not finite, or beyond the "
                           "codec's range), or an hq sum left int32",
                           st->rank, (unsigned long long)(bad >> 8),
                           codec < s->base.ncodecs ? s->base.codec_names[codec] : "?");
}

#endif /* COLLC_MPICUDA_CUH */
