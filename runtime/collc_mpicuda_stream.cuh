/* collc_mpicuda_stream.cuh: a whole collective enqueued on the caller's stream (see collc_mpicuda.cuh).
 *
 * Included by collc_mpicuda.cuh after the kept state.  When every rank of the
 * communicator is reached by CUDA IPC (collc_mpicuda_ipc.cuh), the schedule
 * has no compression points, the driver has stream memory operations
 * (cuStreamWaitValue32 / cuStreamWriteValue32) and every rank's messages pass
 * the checks below, a call enqueues the rank's whole part of the schedule on
 * the caller's stream and returns: no host synchronisation, no thread, and
 * nothing but stream operations, so the call can be captured in a CUDA graph
 * (its waits and writes use fixed values, see the slot protocol).  The
 * host's only work before enqueueing is an MPI_Iallreduce that every rank
 * called with the same count, dtype and op (a different count would put
 * segments of other sizes into the mailboxes).
 *
 * The mailboxes are the IPC set-up's: two slots of one segment per ordered
 * pair of ranks.  Each slot has a 32-bit word in the host's shared flags,
 * 0 (empty) or 1 (full), written alternately by its two ranks:
 *
 *   sender    wait until the word is 0; copy the segment from its buffer into
 *             the slot; write 1 (a stream write orders the copy before it,
 *             like __threadfence_system)
 *   receiver  wait until the word is 1; reduce or copy the slot into its
 *             buffer (the target's kernels, straight from the mailbox); write
 *             0; write how many segments of this call it has taken from the
 *             sender (for the watchdog's message)
 *
 * Both ranks of a pair walk its segments in the same order and use the slots
 * alternately, starting from slot 0 at every call: a message's bytes are its
 * runs one after the other (the same on both ends, however each end's table
 * splits them), cut into segments of COLLC_SEGMENT_BYTES rounded down to whole
 * elements; a step's messages advance one segment at a time, the sends of
 * segment j before the receives of segment j, then j + 1.  That order is
 * the same on every rank (step, segment, sends before receives, table order),
 * and every wait is for an operation earlier in it (a send waits for the
 * pair's segment before last to be taken, which is an earlier segment or
 * step while a pair has at most two messages in a step; a receive for the
 * send of its own segment), so the first unfinished operation can always
 * finish: no deadlock.  The checks, agreed by every rank at the first call
 * (an MPI_Iallreduce): at most two messages between an ordered pair in a
 * step, and no rank receives into a chunk it sends in the same step (a later
 * segment of the send would read what an earlier receive wrote).  Schedules
 * that fail them, or COLLC_STREAM_ORDERED=0, run host-driven as before.
 *
 * Faults: collc_mpicuda_check() (and the driver after every call) waits for
 * the call under the watchdog: no change of the receivers' counts for
 * COLLC_TIMEOUT seconds fails with an error naming the ranks still awaited.
 * Waiting with cudaStreamSynchronize instead may hang when a rank died.
 */
#ifndef COLLC_MPICUDA_STREAM_CUH
#define COLLC_MPICUDA_STREAM_CUH

enum { COLLC_WAIT_VALUE_EQ = 0x1, COLLC_WRITE_VALUE_DEFAULT = 0x0 };

/* The stream word of slot `slot` of the pair src -> dst, and the pair's count of segments taken this call. */
static inline unsigned *collc_stream_word(collc_u64 *flags, const struct collc_mpicuda_ipc *ipc, int src, int dst,
                                          int slot)
{
    return (unsigned *)(collc_ipc_pair(flags, ipc, src, dst) + 4) + slot;
}

static inline unsigned *collc_stream_taken(collc_u64 *flags, const struct collc_mpicuda_ipc *ipc, int src, int dst)
{
    return (unsigned *)(collc_ipc_pair(flags, ipc, src, dst) + 5);
}

/* Whether the driver's stream memory operations work here, on the host's mapped flags (looked up and tried once
 * per kept state, on a word no pair uses: this rank's to itself). */
static inline int collc_mpicuda_memops(struct collc_mpicuda_state *st, const struct collc_mpicuda_ipc *ipc)
{
    const unsigned long long word = (unsigned long long)(uintptr_t)collc_stream_word(ipc->dflags, ipc, ipc->me,
                                                                                      ipc->me, 0);
    enum cudaDriverEntryPointQueryResult found;
    if (st->memops != 0) return st->memops > 0;
    st->memops = -1;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void **)&st->wait32, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess ||
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void **)&st->write32, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (st->write32(st->main, word, 7u, COLLC_WRITE_VALUE_DEFAULT) != 0 ||
        st->wait32(st->main, word, 7u, COLLC_WAIT_VALUE_EQ) != 0 ||
        st->write32(st->main, word, 0u, COLLC_WRITE_VALUE_DEFAULT) != 0 ||
        cudaStreamSynchronize(st->main) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    st->memops = 1;
    return 1;
}

/* Whether this rank's messages pass the checks (see above); `why` says which failed. */
static inline int collc_mpicuda_stream_fits(const struct collc_mpicuda_ctx *ctx, char *why, size_t n)
{
    const struct collc_mpicuda_sched *s = ctx->sched;
    const int r = ctx->rank;
    for (int ph = 0; ph < s->nphases; ph++)
        for (int i = 0; i < s->phases[ph].nsteps; i++) {
            const struct collc_mpicuda_phase *p = &s->phases[ph];
            const struct collc_cuda_step *step = &p->steps[i];
            const struct collc_cuda_msg *m = p->msgs + step->first;
            for (int a = 0; a < step->n; a++) {
                int same = 0;
                if (m[a].src == m[a].dst || (m[a].src != r && m[a].dst != r)) continue;
                for (int b = 0; b < step->n; b++) {
                    if (m[b].src == m[b].dst) continue;
                    if (m[b].src == m[a].src && m[b].dst == m[a].dst) same++;
                    if (m[a].dst != r || m[b].src != r) continue; /* a: received here; b: sent from here */
                    for (int ka = 0; ka < m[a].nruns; ka++)
                        for (int kb = 0; kb < m[b].nruns; kb++) {
                            const struct collc_cuda_run *x = &p->runs[m[a].first_run + ka];
                            const struct collc_cuda_run *y = &p->runs[m[b].first_run + kb];
                            if (x->lo < y->hi && y->lo < x->hi) {
                                snprintf(why, n, "rank %d receives into a chunk it sends in step %d", r, step->index);
                                return 0;
                            }
                        }
                }
                if (same > 2) {
                    snprintf(why, n, "rank %d sends rank %d %d messages in step %d", m[a].src, m[a].dst, same,
                             step->index);
                    return 0;
                }
            }
        }
    return 1;
}

/* The bytes of message m (its runs one after the other). */
static inline int64_t collc_mpicuda_msg_bytes(const struct collc_mpicuda_ctx *ctx,
                                              const struct collc_mpicuda_phase *ph, const struct collc_cuda_msg *m)
{
    int64_t total = 0;
    for (int k = 0; k < m->nruns; k++) total += collc_cuda_run_bytes(&ctx->cu, &ph->runs[m->first_run + k]);
    return total;
}

/* Enqueues bytes [lo, hi) of message m between this rank's buffer and the mailbox slot `slot` holding them:
 * sending, copies into the slot; receiving, reduces or copies out of it, run by run. */
static inline int collc_mpicuda_stream_span(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                            const struct collc_cuda_msg *m, int send, int64_t lo, int64_t hi,
                                            collc_u8 *slot, cudaStream_t stream)
{
    int64_t start = 0;
    for (int k = 0; k < m->nruns && start < hi; k++) {
        const struct collc_cuda_run *r = &ph->runs[m->first_run + k];
        const int64_t bytes = collc_cuda_run_bytes(&ctx->cu, r);
        const int64_t a = lo > start ? lo : start, b = hi < start + bytes ? hi : start + bytes;
        if (a < b) {
            char *at = ctx->buffer + collc_mpicuda_elem_at(ctx, r->lo) * ctx->cu.elem_bytes + (a - start);
            collc_u8 *in = slot + (a - lo);
            cudaError_t err;
            if (send) {
                err = cudaMemcpyAsync(in, at, (size_t)(b - a), cudaMemcpyDeviceToDevice, stream);
            } else if (r->action == COLLC_CUDA_REDUCE) {
                ctx->cu.reduce(at, in, (b - a) / ctx->cu.elem_bytes, ctx->st->max_blocks, stream);
                err = cudaSuccess;
            } else {
                err = cudaMemcpyAsync(at, in, (size_t)(b - a), cudaMemcpyDeviceToDevice, stream);
            }
            const int done = collc_mpicuda_launched(ctx, err, send ? "a copy into a mailbox" : "applying a segment");
            if (done != COLLC_CUDA_OK) return done;
        }
        start += bytes;
    }
    return COLLC_CUDA_OK;
}

/* A stream memory operation's result as an error of the call. */
static inline int collc_mpicuda_memop_done(const struct collc_mpicuda_ctx *ctx, int result, const char *what)
{
    if (result == 0) return COLLC_CUDA_OK;
    return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "rank %d, step %d: %s failed (CUDA driver error %d)", ctx->st->rank,
                           ctx->step_index, what, result);
}

/* One segment of a message (this rank's end of it) on `stream`: wait for the slot, move, signal. */
static inline int collc_mpicuda_stream_segment(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_phase *ph,
                                               const struct collc_cuda_msg *m, int send, int64_t lo, int64_t hi,
                                               cudaStream_t stream)
{
    struct collc_mpicuda_state *st = ctx->st;
    struct collc_mpicuda_ipc *ipc = ctx->ipc;
    const int peer = ipc->local_of[send ? m->dst : m->src];
    const int src = send ? ipc->me : peer, dst = send ? peer : ipc->me;
    unsigned *used = send ? &ipc->stream_sent[peer] : &ipc->stream_taken[peer];
    const int slot = (int)(*used & 1u);
    const unsigned long long word = (unsigned long long)(uintptr_t)collc_stream_word(ipc->dflags, ipc, src, dst, slot);
    char *box = send ? ipc->peer_box[peer] : ipc->mailbox;
    collc_u8 *at = collc_mpicuda_ipc_slot(ipc, box, src, slot);
    int err = collc_mpicuda_memop_done(ctx, st->wait32(stream, word, send ? 0u : 1u, COLLC_WAIT_VALUE_EQ),
                                       "waiting for a mailbox slot");
    if (err == COLLC_CUDA_OK) err = collc_mpicuda_stream_span(ctx, ph, m, send, lo, hi, at, stream);
    if (err == COLLC_CUDA_OK)
        err = collc_mpicuda_memop_done(ctx, st->write32(stream, word, send ? 1u : 0u, COLLC_WRITE_VALUE_DEFAULT),
                                       "signalling a mailbox slot");
    ++*used;
    if (err == COLLC_CUDA_OK && !send)
        err = collc_mpicuda_memop_done(
            ctx,
            st->write32(stream, (unsigned long long)(uintptr_t)collc_stream_taken(ipc->dflags, ipc, src, dst), *used,
                        COLLC_WRITE_VALUE_DEFAULT),
            "counting a segment");
    return err;
}

/* The segment length of a call: COLLC_SEGMENT_BYTES rounded down to whole elements. */
static inline int64_t collc_mpicuda_stream_seg(const struct collc_mpicuda_ctx *ctx)
{
    const int64_t eb = ctx->cu.elem_bytes, seg = ctx->st->segment / eb * eb;
    return seg > 0 ? seg : eb;
}

/* The rank's whole part of the schedule, enqueued on `stream` (see above). */
static inline int collc_mpicuda_run_stream(struct collc_mpicuda_ctx *ctx, cudaStream_t stream)
{
    const struct collc_mpicuda_sched *s = ctx->sched;
    struct collc_mpicuda_ipc *ipc = ctx->ipc;
    const int r = ctx->rank;
    const int64_t seg = collc_mpicuda_stream_seg(ctx);
    int err = COLLC_CUDA_OK;
    for (int k = 0; k < ipc->nlocal; k++) {
        ipc->stream_sent[k] = ipc->stream_taken[k] = 0;
        if (k == ipc->me) continue;
        err = collc_mpicuda_memop_done(
            ctx,
            ctx->st->write32(stream, (unsigned long long)(uintptr_t)collc_stream_taken(ipc->dflags, ipc, k, ipc->me),
                             0u, COLLC_WRITE_VALUE_DEFAULT),
            "resetting a count");
        if (err != COLLC_CUDA_OK) return err;
    }
    for (int ph = 0; ph < s->nphases; ph++)
        for (int i = 0; i < s->phases[ph].nsteps; i++) {
            const struct collc_mpicuda_phase *p = &s->phases[ph];
            const struct collc_cuda_step *step = &p->steps[i];
            const struct collc_cuda_msg *m = p->msgs + step->first;
            int64_t longest = 0;
            ctx->step_index = step->index;
            for (int a = 0; a < step->n; a++) {
                if ((m[a].src != r && m[a].dst != r) || m[a].src == m[a].dst) continue;
                const int64_t bytes = collc_mpicuda_msg_bytes(ctx, p, &m[a]);
                if (bytes > longest) longest = bytes;
            }
            for (int64_t lo = 0; lo < longest; lo += seg)
                for (int pass = 0; pass < 2; pass++) /* sends of this segment, then receives */
                    for (int a = 0; a < step->n; a++) {
                        const int send = pass == 0;
                        int64_t bytes;
                        if ((send ? m[a].src : m[a].dst) != r || m[a].src == m[a].dst) continue;
                        if (lo >= (bytes = collc_mpicuda_msg_bytes(ctx, p, &m[a]))) continue;
                        err = collc_mpicuda_stream_segment(ctx, p, &m[a], send, lo, lo + seg < bytes ? lo + seg : bytes,
                                                           stream);
                        if (err != COLLC_CUDA_OK) return err;
                    }
        }
    for (int k = 0; k < ipc->nlocal; k++) ipc->stream_expect[k] = ipc->stream_taken[k];
    return COLLC_CUDA_OK;
}

/* Every rank called with the same count, dtype and op (an MPI_Iallreduce under the watchdog). */
static inline int collc_mpicuda_stream_agree(struct collc_mpicuda_state *st, int64_t count, int dtype, int op)
{
    long long mine[6] = {count, -count, dtype, -dtype, op, -op}, all[6];
    MPI_Request req;
    int err = collc_mpicuda_ipc_wait(st, MPI_Iallreduce(mine, all, 6, MPI_LONG_LONG, MPI_MAX, st->comm, &req), &req,
                                     "comparing the count, dtype and op of the ranks");
    if (err != COLLC_CUDA_OK) return err;
    if (all[0] != -all[1])
        return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI,
                               "rank %d: the ranks called with different counts (%lld .. %lld): do all ranks call "
                               "with the same count and dtype?",
                               st->rank, -all[1], all[0]);
    if (all[2] != -all[3] || all[4] != -all[5])
        return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI,
                               "rank %d: the ranks called with different dtypes or ops: do all ranks call with the "
                               "same count and dtype?",
                               st->rank);
    return COLLC_CUDA_OK;
}

/* A stream-ordered call on `stream`: the counts compared, then after the communicator's previous call (outside a
 * capture: calls on one communicator from two streams would share its slots), the rank's part, then the end of
 * the call recorded (outside a capture; within one, the graph's own launches order the calls and the caller
 * waits for its stream). */
static inline int collc_mpicuda_stream_call(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_comm *c,
                                            cudaStream_t stream, int64_t count, int dtype, int op)
{
    struct collc_mpicuda_state *st = ctx->st;
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    int err = collc_mpicuda_stream_agree(st, count, dtype, op);
    if (err != COLLC_CUDA_OK) return err;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) cudaGetLastError();
    st->captured = capture != cudaStreamCaptureStatusNone;
    if (!st->captured && c->done != NULL) err = collc_mpicuda_launched(ctx, cudaStreamWaitEvent(stream, c->done, 0),
                                                                         "ordering after the previous call");
    if (err == COLLC_CUDA_OK) err = collc_mpicuda_run_stream(ctx, stream);
    if (err == COLLC_CUDA_OK && !st->captured) {
        if (c->done == NULL)
            err = collc_mpicuda_launched(ctx, cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming),
                                         "creating an event");
        if (err == COLLC_CUDA_OK)
            err = collc_mpicuda_launched(ctx, cudaEventRecord(c->done, stream), "recording the end of the call");
        if (err == COLLC_CUDA_OK)
            err = collc_mpicuda_launched(ctx, cudaEventRecord(st->done, stream), "recording the end of the call");
    }
    if (err != COLLC_CUDA_OK) st->broken = 1; /* part of the call may be enqueued */
    return err;
}

/* Decides, at the first call on the communicator since a release, whether it runs stream-ordered (every rank
 * agrees: an MPI_Iallreduce); `c->stream` 1 or 0, with the reason in c->stream_why. */
static inline int collc_mpicuda_stream_decide(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_comm *c)
{
    struct collc_mpicuda_state *st = ctx->st;
    char why[160] = "";
    MPI_Request req;
    int ok = 1, err;
    if (c->stream >= 0) return COLLC_CUDA_OK;
    if (c->ipc == NULL || c->peers != st->size - 1) snprintf(why, sizeof why, "not every rank is reached by IPC");
    else if (st->stream_setting == 0) snprintf(why, sizeof why, "COLLC_STREAM_ORDERED=0");
    else if (ctx->sched->base.ncodecs > 0) snprintf(why, sizeof why, "compression points run host-driven");
    else if (!collc_mpicuda_memops(st, c->ipc)) snprintf(why, sizeof why, "no stream memory operations in this driver");
    else collc_mpicuda_stream_fits(ctx, why, sizeof why);
    ok = why[0] == '\0';
    err = collc_mpicuda_ipc_wait(st, MPI_Iallreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, st->comm, &req), &req,
                                 "agreeing on stream-ordered execution");
    if (err != COLLC_CUDA_OK) return err;
    if (!ok && why[0] == '\0') snprintf(why, sizeof why, "another rank cannot");
    snprintf(c->stream_why, sizeof c->stream_why, "%s", why);
    c->stream = ok;
    return COLLC_CUDA_OK;
}

/* Waits for the last stream-ordered call under the watchdog: an error naming the ranks still awaited when the
 * receivers' counts stop changing for COLLC_TIMEOUT seconds. */
static inline int collc_mpicuda_stream_wait(struct collc_mpicuda_state *st)
{
    const struct collc_mpicuda_comm *c = st->last;
    const struct collc_mpicuda_ipc *ipc = c != NULL ? c->ipc : NULL;
    double last = MPI_Wtime();
    unsigned long long seen = ~0ull;
    for (;;) {
        unsigned long long now = 0;
        cudaError_t err = cudaEventQuery(st->done);
        if (err == cudaSuccess) return COLLC_CUDA_OK;
        if (err != cudaErrorNotReady)
            return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "rank %d: waiting for the GPU failed: %s (%s)", st->rank,
                                   cudaGetErrorString(err), cudaGetErrorName(err));
        cudaGetLastError();
        for (int k = 0; ipc != NULL && k < ipc->nlocal; k++)
            if (k != ipc->me) now = now * 1000003ull + __atomic_load_n(collc_stream_taken(ipc->flags, ipc, k, ipc->me),
                                                                       __ATOMIC_ACQUIRE);
        if (now != seen) {
            seen = now;
            last = MPI_Wtime();
        } else if (MPI_Wtime() - last > st->timeout) {
            char peers[256];
            size_t used = 0;
            peers[0] = '\0';
            for (int k = 0; ipc != NULL && k < ipc->nlocal && used + 48 < sizeof peers; k++) {
                unsigned got;
                if (k == ipc->me) continue;
                got = __atomic_load_n(collc_stream_taken(ipc->flags, ipc, k, ipc->me), __ATOMIC_ACQUIRE);
                if (got < ipc->stream_expect[k])
                    used += (size_t)snprintf(peers + used, sizeof peers - used, "%s rank %d (%u of %u segments)",
                                             used ? "," : "", ipc->ranks[k], got,
                                             ipc->stream_expect[k]);
            }
            st->broken = st->stuck = 1;
            return collc_cuda_fail(COLLC_MPICUDA_ERR_TIMEOUT,
                                   "rank %d (stream-ordered): no progress for %g s (COLLC_TIMEOUT), still receiving "
                                   "from%s: a rank died, stopped, or called with another count",
                                   st->rank, st->timeout, used ? peers : " its peers (its sends are not taken)");
        }
        sched_yield();
    }
}

#endif /* COLLC_MPICUDA_STREAM_CUH */
