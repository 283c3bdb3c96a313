/* collc_cuda_slots.cuh: how collc_cuda.cuh moves compressed chunks (see the top of that file).
 *
 * Included by collc_cuda.cuh after its context and layout helpers.  Every
 * function here works on one chunk of one rank: a payload slot
 * (collc_cuda_codec.cuh) for n > 0 values; empty chunks have no slot and
 * are skipped.  Slots start at 16-byte boundaries of the scratch space:
 *
 *   [ payload store: one slot per chunk, when the schedule compresses ahead ][ step area ]
 *
 * The store holds what a rank compresses ahead: its chunks compressed by a
 * local `compress` or forwarded to it, and the reduced chunks an arrival
 * re-encodes for the next hop (COLLC_CUDA_REENCODE).  The slot of a chunk is
 * as large as the largest slot any of the schedule's codecs needs for it.  The step area holds, for each step, the
 * rank's incoming messages end to end (raw runs as values, coded chunks as
 * slots), then the slots its wire-compressed sends are encoded into.
 */
#ifndef COLLC_CUDA_SLOTS_CUH
#define COLLC_CUDA_SLOTS_CUH

/* Values in chunk c. */
static inline collc_u64 collc_cuda_chunk_elems(const struct collc_cuda_ctx *ctx, int c)
{
    return (collc_u64)(collc_cuda_chunk_offset(&ctx->layout, c + 1) - collc_cuda_chunk_offset(&ctx->layout, c));
}

static inline struct collc_cuda_slot collc_cuda_chunk_slot(const struct collc_cuda_ctx *ctx, int codec, int c)
{
    return collc_cuda_slot_of(&ctx->sched->codecs[codec], collc_cuda_chunk_elems(ctx, c));
}

/* Where the slot of chunk c (a codec's) ends when the previous piece ends at byte `at`. */
static inline int64_t collc_cuda_slot_end(const struct collc_cuda_ctx *ctx, int codec, int c, int64_t at)
{
    if (collc_cuda_chunk_elems(ctx, c) == 0) return at;
    return (int64_t)collc_cuda_align16((collc_u64)at) + (int64_t)collc_cuda_chunk_slot(ctx, codec, c).bytes;
}

/* The payload store's layout: ctx->store_at[c] for every chunk, [nchunks] its size (0 without a store). */
static inline void collc_cuda_store_layout(struct collc_cuda_ctx *ctx)
{
    const struct collc_cuda_sched *s = ctx->sched;
    int64_t at = 0;
    for (int c = 0; c < s->nchunks; c++) {
        int64_t biggest = at;
        ctx->store_at[c] = at;
        for (int k = 0; s->stores && k < s->ncodecs; k++) {
            int64_t end = collc_cuda_slot_end(ctx, k, c, at);
            biggest = end > biggest ? end : biggest;
        }
        at = biggest;
    }
    ctx->store_at[s->nchunks] = at;
}

static inline collc_u8 *collc_cuda_store(const struct collc_cuda_ctx *ctx, int rank, int c)
{
    return (collc_u8 *)ctx->scratch[rank] + ctx->store_at[c];
}

/* A codec job on chunk c of `rank` and a slot. */
static inline struct collc_cuda_job collc_cuda_chunk_job(const struct collc_cuda_ctx *ctx, int rank, int codec, int c,
                                                         collc_u8 *slot)
{
    return collc_cuda_job_of(0, &ctx->sched->codecs[codec], codec, collc_cuda_chunk_elems(ctx, c),
                             (collc_u64)collc_cuda_chunk_offset(&ctx->layout, c), (float *)collc_cuda_at(ctx, rank, c),
                             slot, ctx->state->ranks[rank].bad);
}

/* The error return of a codec launch. */
static inline int collc_cuda_check_launch(cudaError_t err, const char *what)
{
    if (err == cudaSuccess) return COLLC_CUDA_OK;
    return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorString(err),
                           cudaGetErrorName(err));
}

/* The sender's half of a message's wire compression: each WIRE chunk encoded into a slot from byte `staging`. */
static inline int collc_cuda_encode_wire(struct collc_cuda_ctx *ctx, const struct collc_cuda_msg *m,
                                         const struct collc_cuda_run *runs, int64_t staging)
{
    const struct collc_cuda_rank *s = &ctx->state->ranks[m->src];
    for (int k = 0; k < m->nruns; k++) {
        const struct collc_cuda_run *r = &runs[m->first_run + k];
        if (r->how != COLLC_CUDA_WIRE || (r->fuse & COLLC_CUDA_ENCODED)) continue;
        for (int c = r->lo; c < r->hi; c++) {
            int64_t end = collc_cuda_slot_end(ctx, r->codec, c, staging);
            int err;
            if (end == staging) continue;
            staging = (int64_t)collc_cuda_align16((collc_u64)staging);
            if ((err = collc_cuda_use_device(ctx, s->device)) != COLLC_CUDA_OK) return err;
            struct collc_cuda_job j =
                collc_cuda_chunk_job(ctx, m->src, r->codec, c, (collc_u8 *)ctx->scratch[m->src] + staging);
            err = collc_cuda_check_launch(collc_cuda_encode(j, s->max_blocks, s->stream), "compressing for the wire");
            if (err != COLLC_CUDA_OK) return err;
            staging = end;
        }
    }
    return COLLC_CUDA_OK;
}

/* Moves the payload in slot `from` (src's device) to slot `to` (dst's) on src's stream: its bytes only on one
 * device, the slot's capacity between devices. */
static inline int collc_cuda_send_slot(struct collc_cuda_ctx *ctx, int src, int dst, collc_u8 *to,
                                       const collc_u8 *from, int codec, int c)
{
    const struct collc_cuda_rank *s = &ctx->state->ranks[src], *d = &ctx->state->ranks[dst];
    const struct collc_cuda_codec *cd = &ctx->sched->codecs[codec];
    const collc_u64 n = collc_cuda_chunk_elems(ctx, c);
    int err;
    if (s->device != d->device) {
        const size_t bytes = (size_t)(COLLC_CUDA_SLOT_HEADER + collc_cuda_slot_of(cd, n).capacity);
        COLLC_CUDA_TRY(cudaMemcpyPeerAsync(to, d->device, from, s->device, bytes, s->stream));
        return COLLC_CUDA_OK;
    }
    if ((err = collc_cuda_use_device(ctx, s->device)) != COLLC_CUDA_OK) return err;
    return collc_cuda_check_launch(collc_cuda_forward(to, from, cd, n, s->max_blocks, s->stream), "a payload copy");
}

/* The receiver's half: the payload of chunk c in `slot` (its scratch) into its buffer or its store. */
static inline int collc_cuda_receive_slot(struct collc_cuda_ctx *ctx, int dst, const struct collc_cuda_run *r, int c,
                                          collc_u8 *slot)
{
    const struct collc_cuda_rank *d = &ctx->state->ranks[dst];
    cudaError_t err;
    int e = collc_cuda_use_device(ctx, d->device);
    if (e != COLLC_CUDA_OK) return e;
    if (r->how == COLLC_CUDA_WIRE && (r->fuse & COLLC_CUDA_REENCODE)) {
        err = collc_cuda_reduce_encode(collc_cuda_chunk_job(ctx, dst, r->codec, c, slot), collc_cuda_store(ctx, dst, c),
                                       ctx->op, d->max_blocks, d->stream);
        return collc_cuda_check_launch(err, "decompressing, reducing and compressing");
    }
    if (r->how == COLLC_CUDA_WIRE) {
        const int op = r->action == COLLC_CUDA_REDUCE ? ctx->op : -1;
        err = collc_cuda_decode(collc_cuda_chunk_job(ctx, dst, r->codec, c, slot), op, d->max_blocks, d->stream);
        return collc_cuda_check_launch(err, op < 0 ? "decompressing" : "decompressing and reducing");
    }
    collc_u8 *store = collc_cuda_store(ctx, dst, c);
    if (r->action == COLLC_CUDA_COPY) {
        err = collc_cuda_forward(store, slot, &ctx->sched->codecs[r->codec], collc_cuda_chunk_elems(ctx, c),
                                 d->max_blocks, d->stream);
        return collc_cuda_check_launch(err, "a payload copy");
    }
    err = collc_cuda_add_payloads(collc_cuda_chunk_job(ctx, dst, r->codec, c, store), slot, d->max_blocks, d->stream);
    return collc_cuda_check_launch(err, "adding payloads");
}

/* A local op: chunks lo .. hi-1 of its rank into the rank's payload store (compress), or back (decompress). */
static inline int collc_cuda_local_op(struct collc_cuda_ctx *ctx, const struct collc_cuda_local *op)
{
    const struct collc_cuda_rank *rank = &ctx->state->ranks[op->rank];
    int e = collc_cuda_use_device(ctx, rank->device);
    if (e != COLLC_CUDA_OK) return e;
    for (int c = op->lo; c < op->hi; c++) {
        struct collc_cuda_job j;
        cudaError_t err;
        if (collc_cuda_chunk_elems(ctx, c) == 0) continue;
        j = collc_cuda_chunk_job(ctx, op->rank, op->codec, c, collc_cuda_store(ctx, op->rank, c));
        if (op->what == COLLC_CUDA_COMPRESS) err = collc_cuda_encode(j, rank->max_blocks, rank->stream);
        else err = collc_cuda_decode(j, -1, rank->max_blocks, rank->stream);
        if ((e = collc_cuda_check_launch(err, op->what == COLLC_CUDA_COMPRESS ? "compress" : "decompress")) != 0)
            return e;
    }
    return COLLC_CUDA_OK;
}

/* Waits for every rank's work and reports the first value a codec refused, if any (COLLC_CUDA_ERR_CODEC). */
static inline int collc_cuda_check_codecs(const struct collc_cuda_sched *s, struct collc_cuda_state *st)
{
    int device = 0, err = COLLC_CUDA_OK;
    if (st->ranks == NULL || s->ncodecs == 0) return COLLC_CUDA_OK;
    COLLC_CUDA_TRY(cudaGetDevice(&device));
    for (int r = 0; r < s->nranks && err == COLLC_CUDA_OK; r++) {
        const struct collc_cuda_rank *rank = &st->ranks[r];
        collc_u64 bad = COLLC_NONE;
        if (rank->device < 0) continue;
        COLLC_CUDA_TRY(cudaSetDevice(rank->device));
        COLLC_CUDA_TRY(cudaStreamSynchronize(rank->stream));
        COLLC_CUDA_TRY(cudaMemcpy(&bad, rank->bad, sizeof bad, cudaMemcpyDeviceToHost));
        if (bad != COLLC_NONE) {
            const int codec = (int)(bad & 0xFF);
            err = collc_cuda_fail(COLLC_CUDA_ERR_CODEC,
                                  "rank %d, element %llu: %s cannot encode the value there (not finite, or beyond "
                                  "the codec's range), or an hq sum left int32",
                                  r, (unsigned long long)(bad >> 8), codec < s->ncodecs ? s->codec_names[codec] : "?");
        }
    }
    COLLC_CUDA_TRY(cudaSetDevice(device));
    return err;
}

#endif /* COLLC_CUDA_SLOTS_CUH */
