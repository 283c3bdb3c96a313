/* collc_cuda.cuh: running a schedule's step tables on GPUs, every rank in one process.
 *
 * A generated collc_<algorithm>.cu describes its schedule as data: for every
 * phase, its steps, and for every step one row per message (struct
 * collc_cuda_msg: sender, receiver, where it lands, its chunk runs).  This
 * header runs such tables for p "virtual ranks": rank r is a buffer on device
 * device_of_rank[r] (any number of ranks may share a device) with its own
 * stream and two events.
 *
 * Buffers.  Every rank's buffer holds the collective's whole logical element
 * space (collc's collectives.logical_count: count elements, p * count for
 * alltoall), cut into chunks exactly as collectives.element_offsets() cuts it:
 * the space is split into equal groups (alltoall: every (source, destination)
 * block; allgather and reduce-scatter: every rank's block when the count
 * divides by p; otherwise one group), and each group's chunks are as even as
 * possible, the first ones one element longer; or, with chunk weights
 * (sched->chunk_prefix), chunk j of a group of E elements starts floor(E * W_j / W)
 * into it, W_j the weights of the group's chunks before j and W all of them
 * (collectives.weighted_offset).  A call whose counts are given at run time
 * (collc_cuda_vcoll.cuh) brings the chunks' offsets instead.  Empty messages
 * are skipped.
 *
 * Steps.  Every send reads the sender's buffer as it was at the start of the
 * step; every receive lands at its end.  For each step, the host enqueues
 *
 *   1. the transfers, on the senders' streams: each first waits for the
 *      receiver's `done` event (the receiver has finished its earlier steps,
 *      so its scratch space is free and its buffer holds the start-of-step
 *      data), then copies the message's runs (cudaMemcpyAsync, or
 *      cudaMemcpyPeerAsync between devices) into the receiver's scratch
 *      space, or straight into its buffer for a "direct" message; then each
 *      sender records its `sent` event;
 *   2. the arrivals, on the receivers' streams: each waits for the `sent`
 *      event of its senders, then copies or reduces (a kernel launch, see
 *      collc_cuda_reduce.cuh) each run out of scratch into its buffer; then
 *      every rank that took part records its `done` event.
 *
 * A message is direct when its runs are copies of chunks the receiver does
 * not send in the same step (tables.py's rule, without its single-run
 * condition): no transfer of the step reads the region it overwrites.  Every
 * other message lands in scratch and is applied after the receiver's own
 * transfers of the step (stream order), which is what makes every send read
 * start-of-step data.  Each receiver's scratch messages of a step lie end to
 * end in table order (rows are sorted by receiver).  Events are reused from
 * step to step: a wait refers to the most recent record enqueued before it.
 *
 * The whole run is ordered after the work already queued on the caller's
 * stream (a `start` event) and the caller's stream waits for every rank's
 * last `done` event: the call is asynchronous for the host, like a kernel
 * launch.
 *
 * Compression points (collc_cuda_codec.cuh, collc_cuda_slots.cuh).  A run
 * of chunks travels as raw values, compressed on the wire (the sender
 * encodes each chunk into a slot of its scratch space, the payload moves,
 * and the receiver decodes it into its buffer, fused with the reduction), or
 * as the payload of a compressed slot (a local `compress` put it in the
 * rank's payload store; it is forwarded as bytes, and a receiver copies it
 * into its own store or, for hq, adds it there).  A step's local
 * compress / decompress ops run on the rank's stream before its transfers,
 * and the rank's `done` event is recorded after them, so that nothing lands
 * in its buffer before they have read it.
 *
 * Streams, events, scratch space and peer access are created at the first
 * call and kept (per rank; re-created when a rank moves to another device)
 * until collc_cuda_release().  Not thread-safe.
 */
#ifndef COLLC_CUDA_CUH
#define COLLC_CUDA_CUH

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "collc_cuda_codec.cuh"
#include "collc_cuda_reduce.cuh"

/* Return values of the API. */
enum {
    COLLC_CUDA_OK = 0,
    COLLC_CUDA_ERR_ARG = -1,   /* a bad argument */
    COLLC_CUDA_ERR_CUDA = -2,  /* a CUDA call failed (out of memory, no device, ...) */
    COLLC_CUDA_ERR_CODEC = -3, /* a codec refused a value (collc_cuda_check) */
};

enum collc_cuda_collective {
    COLLC_CUDA_COLL_ALLREDUCE,
    COLLC_CUDA_COLL_ALLGATHER,
    COLLC_CUDA_COLL_REDUCE_SCATTER,
    COLLC_CUDA_COLL_BROADCAST,
    COLLC_CUDA_COLL_REDUCE,
    COLLC_CUDA_COLL_ALLTOALL,
    COLLC_CUDA_COLL_GATHER,
    COLLC_CUDA_COLL_SCATTER,
    COLLC_CUDA_COLL_SCAN,
    COLLC_CUDA_COLL_EXSCAN,
    COLLC_CUDA_COLL_BARRIER
};

/* Where a message lands, what the receiver does with a run, and how the run travels. */
enum collc_cuda_landing { COLLC_CUDA_SCRATCH, COLLC_CUDA_DIRECT };
enum collc_cuda_action { COLLC_CUDA_COPY, COLLC_CUDA_REDUCE };
enum collc_cuda_how {
    COLLC_CUDA_VALUES,  /* raw values */
    COLLC_CUDA_WIRE,    /* compressed by the sender with `codec`, decompressed by the receiver */
    COLLC_CUDA_PAYLOAD  /* the sender's compressed slots, forwarded as payloads of `codec` */
};

/* Fusions of a wire-compressed run (flags). */
enum {
    COLLC_CUDA_ENCODED = 1, /* the sender's payload store holds the chunks' payloads (re-encoded on arrival) */
    COLLC_CUDA_REENCODE = 2 /* the receiver re-encodes the reduced chunks into its store for its next send */
};

/* Chunks lo .. hi-1 of a message; `codec` indexes the schedule's codecs (0 for raw values). */
struct collc_cuda_run {
    int lo, hi;
    enum collc_cuda_action action;
    enum collc_cuda_how how;
    int codec;
    int fuse; /* COLLC_CUDA_ENCODED | COLLC_CUDA_REENCODE */
};

/* A local op of one rank at the start of a step: its chunks lo .. hi-1 into its payload store, or back. */
enum collc_cuda_local_what { COLLC_CUDA_COMPRESS, COLLC_CUDA_DECOMPRESS };
struct collc_cuda_local {
    int step, rank, lo, hi;
    enum collc_cuda_local_what what;
    int codec;
};

/* One message of one step: runs[first_run .. first_run + nruns - 1] of src's buffer to dst. */
struct collc_cuda_msg {
    int step, src, dst;
    enum collc_cuda_landing landing;
    int first_run, nruns;
};

/* A step, its messages msgs[first .. first + n - 1] and its local ops locals[first_local .. + nlocal - 1]. */
struct collc_cuda_step {
    int index, first, n, first_local, nlocal;
};

struct collc_cuda_ctx;

/* A compiled schedule: what the generated file gives the runtime. */
struct collc_cuda_sched {
    const char *algorithm;
    enum collc_cuda_collective collective;
    int nranks, nchunks;
    int max_step_messages;                  /* the most messages of one step */
    int (*run)(struct collc_cuda_ctx *ctx); /* every phase, in order */
    const struct collc_cuda_codec *codecs;  /* the codecs runs and local ops name (NULL: none) */
    const char *const *codec_names;         /* their specs, for messages */
    int ncodecs;
    int stores;                             /* some local op compresses: every rank keeps a payload store */
    int adds_payloads;                      /* some reduce adds homomorphic payloads: op sum only */
    const collc_u64 *chunk_prefix;          /* [nchunks + 1]: the chunk weights' prefix sums; NULL: none */
};

/* Chunk c starts at element g * group_elems + j * base + min(j, extra),
 * with g = c / group_chunks and j = c % group_chunks. */
struct collc_cuda_layout {
    int group_chunks;
    int64_t group_elems, base;
    int extra;
    const collc_u64 *prefix; /* with weights: the schedule's chunk_prefix (collc_cuda_weighted_offset), else NULL */
    const int64_t *offsets;  /* [nchunks + 1]: the offsets given at run time (collc_cuda_vcoll.cuh), or NULL */
};

/* What is kept for each rank from call to call. */
struct collc_cuda_rank {
    int device; /* -1: nothing created yet */
    cudaStream_t stream;
    cudaEvent_t sent, done;
    char *scratch; /* owned by the library */
    size_t scratch_bytes;
    int max_blocks;  /* blocks of a reduction kernel on this rank's device */
    collc_u64 *bad;  /* a codec's refusal (collc_cuda_codec.cuh), on the device */
};

/* The library's state between calls. */
struct collc_cuda_state {
    int nranks;
    struct collc_cuda_rank *ranks;
    int ndevices;
    cudaEvent_t *start; /* [device]: orders a call after the caller's stream */
    unsigned char *peers; /* [a * ndevices + b]: peer access of a to b was tried */
};

/* One call in progress (or a sizing pass, which enqueues nothing). */
struct collc_cuda_ctx {
    const struct collc_cuda_sched *sched;
    struct collc_cuda_state *state;
    struct collc_cuda_layout layout;
    int64_t elem_bytes;
    int op;
    collc_cuda_reduce_fn reduce;
    char *const *buffers;  /* [rank] */
    char **scratch;        /* [rank] */
    size_t *scratch_need;  /* [rank]: the scratch bytes the sizing pass found */
    int sizing;
    int device;            /* the current device, to avoid redundant cudaSetDevice */
    int64_t *landing;      /* [message of the step]: its byte offset in the receiver's scratch */
    int64_t *staging;      /* [message of the step]: where the sender encodes its wire payloads */
    int64_t *area_end;     /* [rank]: the end of its step area so far (sizing the step) */
    int64_t *store_at;     /* [chunk]: its slot in a rank's payload store; [nchunks]: the store's size */
    int *sent_at, *seen_at; /* [rank]: the last step it sent in / took part in, as 1 + index */
};

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

static char collc_cuda_message[512];

static inline int collc_cuda_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(collc_cuda_message, sizeof collc_cuda_message, fmt, ap);
    va_end(ap);
    return code;
}

/* Returns COLLC_CUDA_ERR_CUDA from the calling function when `call` fails, naming it. */
#define COLLC_CUDA_TRY(call)                                                                                  \
    do {                                                                                                      \
        cudaError_t collc_err_ = (call);                                                                      \
        if (collc_err_ != cudaSuccess)                                                                        \
            return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "%s failed: %s (%s)", #call,                          \
                                   cudaGetErrorString(collc_err_), cudaGetErrorName(collc_err_));             \
    } while (0)

/* ---------------------------------------------------------------------------
 * Element layout
 * ------------------------------------------------------------------------- */

/* collectives.logical_count: alltoall's space holds every rank's send buffer. */
static inline int64_t collc_cuda_logical_count(enum collc_cuda_collective coll, int p, int64_t count)
{
    return coll == COLLC_CUDA_COLL_ALLTOALL ? count * p : count;
}

/* collectives.element_groups and chunk_offsets, for a collective of `count` elements. */
static inline struct collc_cuda_layout collc_cuda_layout_of(const struct collc_cuda_sched *s, int64_t count)
{
    struct collc_cuda_layout l;
    int groups = 1;
    if (s->collective == COLLC_CUDA_COLL_ALLTOALL)
        groups = s->nranks * s->nranks;
    else if ((s->collective == COLLC_CUDA_COLL_ALLGATHER || s->collective == COLLC_CUDA_COLL_REDUCE_SCATTER ||
              s->collective == COLLC_CUDA_COLL_GATHER || s->collective == COLLC_CUDA_COLL_SCATTER ||
              s->collective == COLLC_CUDA_COLL_BARRIER) &&
             count % s->nranks == 0)
        groups = s->nranks;
    l.group_chunks = s->nchunks / groups;
    l.group_elems = collc_cuda_logical_count(s->collective, s->nranks, count) / groups;
    l.base = l.group_elems / l.group_chunks;
    l.extra = (int)(l.group_elems % l.group_chunks);
    l.prefix = s->chunk_prefix;
    l.offsets = NULL;
    return l;
}

/* floor(elems * before / weight), exactly, for weight <= 2^32 and before <= weight (collectives.weighted_offset). */
static inline int64_t collc_cuda_weighted_offset(int64_t elems, collc_u64 before, collc_u64 weight)
{
    collc_u64 q = (collc_u64)elems / weight, r = (collc_u64)elems % weight;
    return (int64_t)(q * before + r * before / weight);
}

/* Element offset of chunk c (c == nchunks gives the total). */
static inline int64_t collc_cuda_chunk_offset(const struct collc_cuda_layout *l, int c)
{
    int g = c / l->group_chunks, j = c % l->group_chunks;
    if (l->offsets != NULL) return l->offsets[c];
    if (l->prefix != NULL && j > 0) { /* a group's first chunk (c == nchunks too) starts the group: no weights read */
        const collc_u64 *w = l->prefix + (int64_t)g * l->group_chunks;
        return (int64_t)g * l->group_elems + collc_cuda_weighted_offset(l->group_elems, w[j] - w[0],
                                                                         w[l->group_chunks] - w[0]);
    }
    return (int64_t)g * l->group_elems + (int64_t)j * l->base + (j < l->extra ? j : l->extra);
}

static inline int64_t collc_cuda_run_bytes(const struct collc_cuda_ctx *ctx, const struct collc_cuda_run *r)
{
    return (collc_cuda_chunk_offset(&ctx->layout, r->hi) - collc_cuda_chunk_offset(&ctx->layout, r->lo)) *
           ctx->elem_bytes;
}

static inline int64_t collc_cuda_msg_bytes(const struct collc_cuda_ctx *ctx, const struct collc_cuda_msg *m,
                                           const struct collc_cuda_run *runs)
{
    int64_t total = 0;
    for (int k = 0; k < m->nruns; k++)
        total += collc_cuda_run_bytes(ctx, &runs[m->first_run + k]);
    return total;
}

/* Where chunk c starts in a rank's buffer. */
static inline char *collc_cuda_at(const struct collc_cuda_ctx *ctx, int rank, int c)
{
    return ctx->buffers[rank] + collc_cuda_chunk_offset(&ctx->layout, c) * ctx->elem_bytes;
}

static inline int collc_cuda_use_device(struct collc_cuda_ctx *ctx, int device)
{
    if (ctx->device != device) {
        COLLC_CUDA_TRY(cudaSetDevice(device));
        ctx->device = device;
    }
    return COLLC_CUDA_OK;
}

#include "collc_cuda_slots.cuh"

/* ---------------------------------------------------------------------------
 * One message
 * ------------------------------------------------------------------------- */

/* Where message m's pieces end from byte `at` of a scratch space: the receiver's (raw runs as values, coded
 * chunks as slots), or, with `staging`, the sender's (the slots its wire-compressed chunks are encoded into). */
static inline int64_t collc_cuda_msg_end(const struct collc_cuda_ctx *ctx, const struct collc_cuda_msg *m,
                                         const struct collc_cuda_run *runs, int64_t at, int staging)
{
    for (int k = 0; k < m->nruns; k++) {
        const struct collc_cuda_run *r = &runs[m->first_run + k];
        if (r->how == COLLC_CUDA_VALUES) {
            if (!staging) at += collc_cuda_run_bytes(ctx, r);
            continue;
        }
        if (staging && (r->how != COLLC_CUDA_WIRE || (r->fuse & COLLC_CUDA_ENCODED))) continue;
        for (int c = r->lo; c < r->hi; c++)
            at = collc_cuda_slot_end(ctx, r->codec, c, at);
    }
    return at;
}

/* Copies `bytes` from rank src's device to rank dst's on src's stream. */
static inline int collc_cuda_copy(struct collc_cuda_ctx *ctx, int src, int dst, char *to, const char *from,
                                  int64_t bytes)
{
    const struct collc_cuda_rank *s = &ctx->state->ranks[src], *d = &ctx->state->ranks[dst];
    if (s->device == d->device)
        COLLC_CUDA_TRY(cudaMemcpyAsync(to, from, (size_t)bytes, cudaMemcpyDeviceToDevice, s->stream));
    else
        COLLC_CUDA_TRY(cudaMemcpyPeerAsync(to, d->device, from, s->device, (size_t)bytes, s->stream));
    return COLLC_CUDA_OK;
}

/* Moves message m, once the receiver has finished its earlier steps, on the sender's stream (wire payloads are
 * encoded first: they only read the sender's buffer). */
static inline int collc_cuda_transfer(struct collc_cuda_ctx *ctx, const struct collc_cuda_msg *m,
                                      const struct collc_cuda_run *runs, int64_t landing, int64_t staging)
{
    const struct collc_cuda_rank *d = &ctx->state->ranks[m->dst];
    int err = collc_cuda_encode_wire(ctx, m, runs, staging);
    if (err != COLLC_CUDA_OK) return err;
    COLLC_CUDA_TRY(cudaStreamWaitEvent(ctx->state->ranks[m->src].stream, d->done, 0));
    for (int k = 0; k < m->nruns; k++) {
        const struct collc_cuda_run *r = &runs[m->first_run + k];
        if (r->how == COLLC_CUDA_VALUES) {
            const int64_t bytes = collc_cuda_run_bytes(ctx, r);
            char *to = m->landing == COLLC_CUDA_DIRECT ? collc_cuda_at(ctx, m->dst, r->lo)
                                                       : ctx->scratch[m->dst] + landing;
            if (bytes > 0 && (err = collc_cuda_copy(ctx, m->src, m->dst, to, collc_cuda_at(ctx, m->src, r->lo),
                                                    bytes)) != COLLC_CUDA_OK)
                return err;
            landing += bytes;
            continue;
        }
        for (int c = r->lo; c < r->hi; c++) {
            const int64_t end = collc_cuda_slot_end(ctx, r->codec, c, landing);
            const collc_u8 *from;
            if (end == landing) continue;
            if (r->how == COLLC_CUDA_WIRE && !(r->fuse & COLLC_CUDA_ENCODED)) {
                staging = (int64_t)collc_cuda_align16((collc_u64)staging);
                from = (const collc_u8 *)ctx->scratch[m->src] + staging;
                staging += (int64_t)collc_cuda_chunk_slot(ctx, r->codec, c).bytes;
            } else {
                from = collc_cuda_store(ctx, m->src, c);
            }
            landing = (int64_t)collc_cuda_align16((collc_u64)landing);
            err = collc_cuda_send_slot(ctx, m->src, m->dst, (collc_u8 *)ctx->scratch[m->dst] + landing, from,
                                       r->codec, c);
            if (err != COLLC_CUDA_OK) return err;
            landing = end;
        }
    }
    return COLLC_CUDA_OK;
}

/* Applies message m on the receiver's stream, once its sender's transfers of the step are done. */
static inline int collc_cuda_arrive(struct collc_cuda_ctx *ctx, const struct collc_cuda_msg *m,
                                    const struct collc_cuda_run *runs, int64_t landing)
{
    const struct collc_cuda_rank *d = &ctx->state->ranks[m->dst];
    COLLC_CUDA_TRY(cudaStreamWaitEvent(d->stream, ctx->state->ranks[m->src].sent, 0));
    if (m->landing == COLLC_CUDA_DIRECT) return COLLC_CUDA_OK;
    for (int k = 0; k < m->nruns; k++) {
        const struct collc_cuda_run *r = &runs[m->first_run + k];
        int err;
        if (r->how != COLLC_CUDA_VALUES) {
            for (int c = r->lo; c < r->hi; c++) {
                const int64_t end = collc_cuda_slot_end(ctx, r->codec, c, landing);
                if (end == landing) continue;
                landing = (int64_t)collc_cuda_align16((collc_u64)landing);
                err = collc_cuda_receive_slot(ctx, m->dst, r, c, (collc_u8 *)ctx->scratch[m->dst] + landing);
                if (err != COLLC_CUDA_OK) return err;
                landing = end;
            }
            continue;
        }
        const int64_t bytes = collc_cuda_run_bytes(ctx, r);
        const char *from = ctx->scratch[m->dst] + landing;
        char *at = collc_cuda_at(ctx, m->dst, r->lo);
        landing += bytes;
        if (bytes == 0) continue;
        if (r->action == COLLC_CUDA_REDUCE) {
            if ((err = collc_cuda_use_device(ctx, d->device)) != COLLC_CUDA_OK) return err;
            ctx->reduce(at, from, bytes / ctx->elem_bytes, d->max_blocks, d->stream);
            COLLC_CUDA_TRY(cudaGetLastError());
        } else {
            COLLC_CUDA_TRY(cudaMemcpyAsync(at, from, (size_t)bytes, cudaMemcpyDeviceToDevice, d->stream));
        }
    }
    return COLLC_CUDA_OK;
}

/* ---------------------------------------------------------------------------
 * Steps and phases
 * ------------------------------------------------------------------------- */

/* Where every message of a step lands and where its sender encodes its wire payloads: after each rank's payload
 * store, its incoming messages end to end (rows are sorted by receiver), then its own wire payloads. */
static inline void collc_cuda_step_layout(struct collc_cuda_ctx *ctx, const struct collc_cuda_step *step,
                                          const struct collc_cuda_msg *m, const struct collc_cuda_run *runs)
{
    const int64_t base = ctx->store_at[ctx->sched->nchunks];
    for (int i = 0; i < step->n; i++)
        ctx->area_end[m[i].dst] = ctx->area_end[m[i].src] = base;
    for (int i = 0; i < step->n; i++) {
        int64_t *end = &ctx->area_end[m[i].dst];
        ctx->landing[i] = *end;
        if (m[i].landing == COLLC_CUDA_SCRATCH) *end = collc_cuda_msg_end(ctx, &m[i], runs, *end, 0);
    }
    for (int i = 0; i < step->n; i++) {
        int64_t *end = &ctx->area_end[m[i].src];
        ctx->staging[i] = *end;
        *end = collc_cuda_msg_end(ctx, &m[i], runs, *end, 1);
    }
    for (int i = 0; ctx->sizing && i < step->n; i++) {
        const int ranks[2] = {m[i].src, m[i].dst};
        for (int k = 0; k < 2; k++)
            if ((size_t)ctx->area_end[ranks[k]] > ctx->scratch_need[ranks[k]])
                ctx->scratch_need[ranks[k]] = (size_t)ctx->area_end[ranks[k]];
    }
}

/* A step's local ops, on their ranks' streams; each such rank then records `done` (rows are sorted by rank). */
static inline int collc_cuda_run_locals(struct collc_cuda_ctx *ctx, const struct collc_cuda_local *ops, int n,
                                        int stamp)
{
    for (int i = 0; i < n; i++) {
        const struct collc_cuda_rank *rank = &ctx->state->ranks[ops[i].rank];
        int err = collc_cuda_local_op(ctx, &ops[i]);
        if (err != COLLC_CUDA_OK) return err;
        ctx->seen_at[ops[i].rank] = stamp;
        if (i + 1 == n || ops[i + 1].rank != ops[i].rank) COLLC_CUDA_TRY(cudaEventRecord(rank->done, rank->stream));
    }
    return COLLC_CUDA_OK;
}

/* Runs one step: local ops, every rank's transfers, then every rank's arrivals (see the top of this file). */
static inline int collc_cuda_run_step(struct collc_cuda_ctx *ctx, const struct collc_cuda_step *step,
                                      const struct collc_cuda_msg *msgs, const struct collc_cuda_run *runs,
                                      const struct collc_cuda_local *locals)
{
    const struct collc_cuda_msg *m = msgs + step->first;
    const int stamp = step->index + 1;
    int err;

    collc_cuda_step_layout(ctx, step, m, runs);
    if (ctx->sizing) return COLLC_CUDA_OK;

    /* 0. Local ops, at the start of the step. */
    if ((err = collc_cuda_run_locals(ctx, locals + step->first_local, step->nlocal, stamp)) != COLLC_CUDA_OK)
        return err;

    /* 1. Transfers, on the senders' streams. */
    for (int i = 0; i < step->n; i++) {
        if (collc_cuda_msg_bytes(ctx, &m[i], runs) == 0) continue;
        err = collc_cuda_transfer(ctx, &m[i], runs, ctx->landing[i], ctx->staging[i]);
        if (err != COLLC_CUDA_OK) return err;
        ctx->sent_at[m[i].src] = ctx->seen_at[m[i].src] = ctx->seen_at[m[i].dst] = stamp;
    }
    for (int r = 0; r < ctx->sched->nranks; r++) {
        const struct collc_cuda_rank *rank = &ctx->state->ranks[r];
        if (ctx->sent_at[r] == stamp) COLLC_CUDA_TRY(cudaEventRecord(rank->sent, rank->stream));
    }

    /* 2. Arrivals, on the receivers' streams. */
    for (int i = 0; i < step->n; i++) {
        if (collc_cuda_msg_bytes(ctx, &m[i], runs) == 0) continue;
        if ((err = collc_cuda_arrive(ctx, &m[i], runs, ctx->landing[i])) != COLLC_CUDA_OK) return err;
    }
    for (int r = 0; r < ctx->sched->nranks; r++) {
        const struct collc_cuda_rank *rank = &ctx->state->ranks[r];
        if (ctx->seen_at[r] == stamp) COLLC_CUDA_TRY(cudaEventRecord(rank->done, rank->stream));
    }
    return COLLC_CUDA_OK;
}

/* Runs steps[0 .. nsteps-1] of a phase, in order. */
static inline int collc_cuda_run_phase(struct collc_cuda_ctx *ctx, const struct collc_cuda_step *steps, int nsteps,
                                       const struct collc_cuda_msg *msgs, const struct collc_cuda_run *runs,
                                       const struct collc_cuda_local *locals)
{
    for (int i = 0; i < nsteps; i++) {
        int err = collc_cuda_run_step(ctx, &steps[i], msgs, runs, locals);
        if (err != COLLC_CUDA_OK) return err;
    }
    return COLLC_CUDA_OK;
}

#include "collc_cuda_state.cuh" /* streams, events and scratch space, kept from call to call */

/* ---------------------------------------------------------------------------
 * Entry points (the generated file wraps them in its extern "C" API)
 * ------------------------------------------------------------------------- */

/* The dtype and op, and what the schedule's codecs take. */
static inline int collc_cuda_check_type(const struct collc_cuda_sched *s, int dtype, int op)
{
    if (dtype < 0 || dtype >= COLLC_CUDA_NDTYPES)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "unknown dtype %d (0 .. %d)", dtype, COLLC_CUDA_NDTYPES - 1);
    if (op < 0 || op >= COLLC_CUDA_NOPS)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "unknown op %d (0 .. %d)", op, COLLC_CUDA_NOPS - 1);
    if (s->ncodecs > 0 && (dtype != COLLC_CUDA_FLOAT32 || op == COLLC_CUDA_PROD))
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG,
                               "%s compresses: it runs on float32 data (dtype 0) with the ops sum, max and min, "
                               "got dtype %d, op %d",
                               s->algorithm, dtype, op);
    if (s->adds_payloads && op != COLLC_CUDA_SUM)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s adds hq payloads: it runs with the op sum (0) only, got %d",
                               s->algorithm, op);
    return COLLC_CUDA_OK;
}

static inline int collc_cuda_check_args(const struct collc_cuda_sched *s, int64_t count, int dtype, int op)
{
    if (count < 0) return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "count must be >= 0, got %lld", (long long)count);
    if (s->collective == COLLC_CUDA_COLL_ALLTOALL && count % s->nranks != 0)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "alltoall needs a count divisible by p=%d, got %lld", s->nranks,
                               (long long)count);
    return collc_cuda_check_type(s, dtype, op);
}

/* A context for `count` elements of `dtype`; ctx->landing has room for the largest step.  `offsets`: the chunks'
 * offsets of a call whose counts are given at run time (collc_cuda_vcoll.cuh; `count` is their total), or NULL. */
static inline int collc_cuda_ctx_init(struct collc_cuda_ctx *ctx, const struct collc_cuda_sched *s, int64_t count,
                                      const int64_t *offsets, int dtype, int op)
{
    int err = offsets != NULL ? collc_cuda_check_type(s, dtype, op) : collc_cuda_check_args(s, count, dtype, op);
    memset(ctx, 0, sizeof *ctx);
    if (err != COLLC_CUDA_OK) return err;
    ctx->sched = s;
    ctx->layout = collc_cuda_layout_of(s, count);
    ctx->layout.offsets = offsets;
    ctx->elem_bytes = collc_cuda_dtype_size[dtype];
    ctx->op = op;
    ctx->reduce = collc_cuda_reducers[dtype][op];
    ctx->device = -1;
    ctx->landing = (int64_t *)calloc((size_t)s->max_step_messages + 1, sizeof *ctx->landing);
    ctx->staging = (int64_t *)calloc((size_t)s->max_step_messages + 1, sizeof *ctx->staging);
    ctx->area_end = (int64_t *)calloc((size_t)s->nranks, sizeof *ctx->area_end);
    ctx->store_at = (int64_t *)calloc((size_t)s->nchunks + 1, sizeof *ctx->store_at);
    ctx->scratch_need = (size_t *)calloc((size_t)s->nranks, sizeof *ctx->scratch_need);
    ctx->scratch = (char **)calloc((size_t)s->nranks, sizeof *ctx->scratch);
    ctx->sent_at = (int *)calloc((size_t)s->nranks, sizeof *ctx->sent_at);
    ctx->seen_at = (int *)calloc((size_t)s->nranks, sizeof *ctx->seen_at);
    if (!ctx->landing || !ctx->staging || !ctx->area_end || !ctx->store_at || !ctx->scratch_need || !ctx->scratch ||
        !ctx->sent_at || !ctx->seen_at)
        return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
    collc_cuda_store_layout(ctx);
    return COLLC_CUDA_OK;
}

static inline void collc_cuda_ctx_free(struct collc_cuda_ctx *ctx)
{
    free(ctx->landing);
    free(ctx->staging);
    free(ctx->area_end);
    free(ctx->store_at);
    free(ctx->scratch_need);
    free(ctx->scratch);
    free(ctx->sent_at);
    free(ctx->seen_at);
}

/* The scratch bytes each rank needs for `count` elements of `dtype`: the sizing pass. */
static inline int collc_cuda_size_scratch(struct collc_cuda_ctx *ctx)
{
    int err;
    ctx->sizing = 1;
    for (int r = 0; r < ctx->sched->nranks; r++) /* the payload store, whether or not the rank communicates */
        ctx->scratch_need[r] = (size_t)ctx->store_at[ctx->sched->nchunks];
    err = ctx->sched->run(ctx);
    ctx->sizing = 0;
    return err;
}

/* Library-owned scratch space for every rank, grown to what this call needs. */
static inline int collc_cuda_own_scratch(struct collc_cuda_ctx *ctx)
{
    for (int r = 0; r < ctx->sched->nranks; r++) {
        struct collc_cuda_rank *rank = &ctx->state->ranks[r];
        if (ctx->scratch_need[r] > rank->scratch_bytes) {
            COLLC_CUDA_TRY(cudaSetDevice(rank->device));
            COLLC_CUDA_TRY(cudaFree(rank->scratch)); /* waits for the work that used it */
            rank->scratch = NULL;
            rank->scratch_bytes = 0;
            COLLC_CUDA_TRY(cudaMalloc((void **)&rank->scratch, ctx->scratch_need[r]));
            rank->scratch_bytes = ctx->scratch_need[r];
        }
        ctx->scratch[r] = rank->scratch;
    }
    return COLLC_CUDA_OK;
}

/* Orders every rank's stream after the caller's stream: the start of the run. */
static inline int collc_cuda_begin(struct collc_cuda_ctx *ctx, int device, cudaStream_t caller)
{
    struct collc_cuda_state *st = ctx->state;
    COLLC_CUDA_TRY(cudaSetDevice(device));
    ctx->device = device;
    COLLC_CUDA_TRY(cudaEventRecord(st->start[device], caller));
    for (int r = 0; r < ctx->sched->nranks; r++) {
        COLLC_CUDA_TRY(cudaStreamWaitEvent(st->ranks[r].stream, st->start[device], 0));
        if (ctx->sched->ncodecs > 0) /* no refusal yet */
            COLLC_CUDA_TRY(cudaMemsetAsync(st->ranks[r].bad, 0xFF, sizeof *st->ranks[r].bad, st->ranks[r].stream));
        COLLC_CUDA_TRY(cudaEventRecord(st->ranks[r].done, st->ranks[r].stream));
    }
    return COLLC_CUDA_OK;
}

/* Makes the caller's stream wait for every rank's last step (after an error too, so that nothing is left behind). */
static inline int collc_cuda_end(struct collc_cuda_ctx *ctx, cudaStream_t caller, int failed)
{
    struct collc_cuda_state *st = ctx->state;
    for (int r = 0; r < ctx->sched->nranks; r++) {
        if (failed) cudaEventRecord(st->ranks[r].done, st->ranks[r].stream);
        COLLC_CUDA_TRY(cudaStreamWaitEvent(caller, st->ranks[r].done, 0));
    }
    return COLLC_CUDA_OK;
}

/* Checks the caller's pointers against what the sizing pass found. */
static inline int collc_cuda_check_pointers(const struct collc_cuda_ctx *ctx, void *const *buffers,
                                            void *const *scratch)
{
    if (buffers == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "buffers is NULL");
    for (int r = 0; r < ctx->sched->nranks; r++) {
        if (buffers[r] == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "buffers[%d] is NULL", r);
        if (scratch != NULL && scratch[r] == NULL && ctx->scratch_need[r] > 0)
            return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "scratch[%d] is NULL, rank %d needs %zu bytes", r, r,
                                   ctx->scratch_need[r]);
    }
    return COLLC_CUDA_OK;
}

/* The whole collective; see the generated header for the contract.  `offsets`: as for collc_cuda_ctx_init. */
static inline int collc_cuda_execute_at(const struct collc_cuda_sched *s, void *const *buffers, int64_t count,
                                        const int64_t *offsets, int dtype, int op, const int *device_of_rank,
                                        void *const *scratch, void *stream)
{
    struct collc_cuda_ctx ctx;
    cudaStream_t caller = (cudaStream_t)stream;
    cudaError_t cuda_err;
    int device = 0, err, started = 0;
    if ((err = collc_cuda_ctx_init(&ctx, s, count, offsets, dtype, op)) != COLLC_CUDA_OK) goto out;
    /* count 0 moves nothing: its buffers may be NULL (an empty array's pointer often is) */
    if ((err = collc_cuda_size_scratch(&ctx)) != COLLC_CUDA_OK || count == 0) goto out;
    if ((err = collc_cuda_check_pointers(&ctx, buffers, scratch)) != COLLC_CUDA_OK) goto out;
    ctx.buffers = (char *const *)buffers;
    if ((cuda_err = cudaGetDevice(&device)) != cudaSuccess) {
        err = collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "no usable CUDA device: %s", cudaGetErrorString(cuda_err));
        cudaGetLastError(); /* clear it */
        goto out;
    }
    ctx.state = &collc_cuda_kept;
    if ((err = collc_cuda_prepare(ctx.state, s->nranks, device_of_rank, device)) != COLLC_CUDA_OK) goto restore;
    if (scratch != NULL)
        memcpy(ctx.scratch, scratch, (size_t)s->nranks * sizeof *ctx.scratch);
    else if ((err = collc_cuda_own_scratch(&ctx)) != COLLC_CUDA_OK)
        goto restore;
    if ((err = collc_cuda_begin(&ctx, device, caller)) != COLLC_CUDA_OK) goto restore;
    started = 1;
    err = s->run(&ctx);
restore:
    if (started) {
        int end = collc_cuda_end(&ctx, caller, err != COLLC_CUDA_OK);
        if (err == COLLC_CUDA_OK) err = end;
    }
    cudaSetDevice(device);
out:
    collc_cuda_ctx_free(&ctx);
    return err;
}

/* The whole collective, its chunks cut from `count`. */
static inline int collc_cuda_execute(const struct collc_cuda_sched *s, void *const *buffers, int64_t count,
                                     int dtype, int op, const int *device_of_rank, void *const *scratch,
                                     void *stream)
{
    return collc_cuda_execute_at(s, buffers, count, NULL, dtype, op, device_of_rank, scratch, stream);
}

/* The scratch bytes rank `rank` needs for a call with `count` elements of `dtype` (`offsets`: as for
 * collc_cuda_ctx_init); -1 for bad arguments. */
static inline int64_t collc_cuda_scratch_bytes_at(const struct collc_cuda_sched *s, int64_t count,
                                                  const int64_t *offsets, int dtype, int rank)
{
    struct collc_cuda_ctx ctx;
    int64_t need = -1;
    if (collc_cuda_ctx_init(&ctx, s, count, offsets, dtype, COLLC_CUDA_SUM) == COLLC_CUDA_OK && rank >= 0 &&
        rank < s->nranks && collc_cuda_size_scratch(&ctx) == COLLC_CUDA_OK)
        need = (int64_t)ctx.scratch_need[rank];
    collc_cuda_ctx_free(&ctx);
    return need;
}

/* The scratch bytes rank `rank` needs for a call with `count` elements of `dtype`; -1 for bad arguments. */
static inline int64_t collc_cuda_scratch_bytes(const struct collc_cuda_sched *s, int64_t count, int dtype, int rank)
{
    return collc_cuda_scratch_bytes_at(s, count, NULL, dtype, rank);
}

/* The element offset of every chunk, offsets[0 .. nchunks]; returns nchunks, or COLLC_CUDA_ERR_ARG. */
static inline int collc_cuda_chunk_offsets(const struct collc_cuda_sched *s, int64_t count, int64_t *offsets)
{
    struct collc_cuda_layout layout;
    int err = collc_cuda_check_args(s, count, 0, 0);
    if (err != COLLC_CUDA_OK) return err;
    layout = collc_cuda_layout_of(s, count);
    for (int c = 0; c <= s->nchunks; c++)
        offsets[c] = collc_cuda_chunk_offset(&layout, c);
    return s->nchunks;
}

/* Waits for the last run and reports a value a codec refused in it (COLLC_CUDA_ERR_CODEC), or 0. */
static inline int collc_cuda_check(const struct collc_cuda_sched *s)
{
    return collc_cuda_check_codecs(s, &collc_cuda_kept);
}

static inline const char *collc_cuda_last_error(void)
{
    return collc_cuda_message;
}

#endif /* COLLC_CUDA_CUH */
