/* collc_mpicuda_flow.cuh: the mpi-cuda executor's dataflow issue (see collc_mpicuda.cuh).
 *
 * The default order of schedules without compression points, with the same
 * rules as the mpi-c runtime's (runtime/collc_flow.h).  The generated file
 * lists every rank's messages in table order (step by step, sends by peer,
 * then receives by peer), each with the earlier messages of the rank it waits
 * for (collc/backends/dataflow.py: a message touching a chunk waits for the
 * last earlier receive of that chunk, a receive also for the sends of it since,
 * sends of its own step included).  Each message goes as soon as those are
 * done, whatever its step:
 *
 *   send            posted when its dependencies are done; done when every
 *                   segment has left (MPI completed it)
 *   direct receive  posted into the buffer when its dependencies are done;
 *                   done when it has landed on the device
 *   other receive   posted into scratch at once; applied on the main stream
 *                   (a copy, or the target's reduction kernel) when it has
 *                   landed and its dependencies are done; done when the
 *                   kernel has run (an event)
 *
 * Only accesses to a common chunk are ordered, and in step order, so every
 * reduction into a chunk runs in the same order as step by step: the result is
 * the same, bit for bit.  Messages keep the step as their tag (modulo 32767),
 * and none is posted while one of a step 32767 or more before it is still
 * under way, so messages with the same tag never overtake each other.
 *
 * A message under way holds a *place*: the two events and the two pinned
 * segment buffers of its link (staged transport), one event for its kernel,
 * and, for a receive into scratch, room for the largest such message of the
 * rank.  A rank has flow_links[rank] places (its busiest 8 consecutive steps'
 * messages plus its busiest step's); a message of a later step than the
 * earliest unfinished one takes a place only while more than the busiest
 * step's count are free.  So the earliest unfinished step always finds its
 * places, its dependencies are done (they are in earlier steps, or are sends
 * of that step) and its tags free, on every rank: it completes, and dataflow
 * issue adds no deadlock to a schedule that is deadlock-free step by step.
 * The places are taken by the ready messages in table order each round of the
 * polling loop, and every message under way advances in the same loop
 * (collc_mpicuda_wire.cuh: MPI_Test, cudaEventQuery), under the watchdog.
 *
 * Schedules with compression points always run step by step: their local
 * compress / decompress ops, payload store and fused re-encodes are ordered
 * by the steps.  COLLC_ISSUE=steps selects step by step for the others.
 */
#ifndef COLLC_MPICUDA_FLOW_CUH
#define COLLC_MPICUDA_FLOW_CUH

enum collc_mpicuda_fstate { COLLC_MF_WAIT, COLLC_MF_ACTIVE, COLLC_MF_ARRIVED, COLLC_MF_APPLYING, COLLC_MF_DONE };

/* One message of the calling rank, while a call runs. */
struct collc_mpicuda_fx {
    int need;    /* dependencies not yet done */
    int state;   /* collc_mpicuda_fstate */
    int slot;    /* its place, -1: none */
    int scratch; /* a receive into scratch */
    int step, phase;
};

/* The place a message's receive into scratch lands in. */
static inline int64_t collc_mpicuda_place_at(const struct collc_mpicuda_ctx *ctx, int slot)
{
    return ctx->cu.store_at[ctx->sched->base.nchunks] + (int64_t)slot * ctx->place_bytes;
}

/* Applies the receive into scratch `l` (its pieces) on the main stream, then records the place's event. */
static inline int collc_mpicuda_flow_apply(struct collc_mpicuda_ctx *ctx, int i)
{
    struct collc_mpicuda_state *st = ctx->st;
    const struct collc_mpicuda_link *l = &ctx->links[i];
    const int slot = st->fx[i].slot;
    const struct collc_mpicuda_phase *ph = &ctx->sched->phases[st->fx[i].phase];
    for (int k = 0; k < l->npieces; k++) {
        const int err = collc_mpicuda_apply_piece(ctx, ph, &ctx->pieces[l->first + k]);
        if (err != COLLC_CUDA_OK) return err;
    }
    COLLC_CUDA_TRY(cudaEventRecord(st->events[3 * slot + 2], st->main));
    return COLLC_CUDA_OK;
}

/* Message i is done: its place is free, and those waiting for it that have landed are applied. */
static inline int collc_mpicuda_flow_finish(struct collc_mpicuda_ctx *ctx, int i, int *ndone)
{
    struct collc_mpicuda_fx *fx = ctx->st->fx;
    const int *succ_first = ctx->st->fints, *succ = succ_first + ctx->flow_n + 1;
    int *free_slots = (int *)succ + ctx->flow_edges;
    if (fx[i].slot >= 0) free_slots[ctx->nfree++] = fx[i].slot;
    fx[i].slot = -1;
    fx[i].state = COLLC_MF_DONE;
    ++*ndone;
    for (int k = succ_first[i]; k < succ_first[i + 1]; k++) {
        const int s = succ[k];
        if (--fx[s].need > 0 || fx[s].state != COLLC_MF_ARRIVED) continue;
        ctx->step_index = fx[s].step;
        int err = collc_mpicuda_flow_apply(ctx, s);
        if (err != COLLC_CUDA_OK) return err;
        fx[s].state = COLLC_MF_APPLYING;
    }
    return COLLC_CUDA_OK;
}

/* Gives message i a place and arms its link. */
static inline void collc_mpicuda_flow_take(struct collc_mpicuda_ctx *ctx, int i)
{
    struct collc_mpicuda_state *st = ctx->st;
    struct collc_mpicuda_fx *fx = &st->fx[i];
    struct collc_mpicuda_link *l = &ctx->links[i];
    int *free_slots = st->fints + ctx->flow_n + 1 + ctx->flow_edges;
    const int slot = free_slots[--ctx->nfree];
    fx->slot = slot;
    fx->state = COLLC_MF_ACTIVE;
    for (int k = 0; k < 2; k++) {
        l->seg[k].state = COLLC_SEG_FREE;
        l->seg[k].event = 3 * slot + k;
        l->seg[k].host = st->aware ? NULL : st->pinned + (size_t)(2 * slot + k) * (size_t)ctx->pinned_stride;
    }
    if (fx->scratch) {
        const int64_t base = collc_mpicuda_place_at(ctx, slot);
        for (int k = 0; k < l->npieces; k++) ctx->pieces[l->first + k].at += base;
    }
}

/* The watchdog's error: nothing moved for COLLC_TIMEOUT seconds. */
static inline int collc_mpicuda_flow_timeout(struct collc_mpicuda_ctx *ctx, int low)
{
    const struct collc_mpicuda_fx *fx = ctx->st->fx;
    char peers[256];
    size_t used = 0;
    peers[0] = '\0';
    for (int i = low; i < ctx->flow_n && used + 40 < sizeof peers; i++)
        if (fx[i].state == COLLC_MF_ACTIVE)
            used += (size_t)snprintf(peers + used, sizeof peers - used, "%s%s rank %d (step %d)", used ? "," : "",
                                     ctx->links[i].send ? " sending to" : " receiving from", ctx->links[i].peer,
                                     fx[i].step);
    return collc_cuda_fail(COLLC_MPICUDA_ERR_TIMEOUT,
                           "rank %d, step %d (by dataflow): no progress for %g s (COLLC_TIMEOUT), still%s: a rank "
                           "died, stopped, or called with another count",
                           ctx->st->rank, low < ctx->flow_n ? fx[low].step : -1, ctx->st->timeout, peers);
}

/* Plans every message of the calling rank (sizing: what the call needs); otherwise runs them by dataflow. */
static inline int collc_mpicuda_run_flow(struct collc_mpicuda_ctx *ctx)
{
    const struct collc_mpicuda_sched *s = ctx->sched;
    const struct collc_mpicuda_flow *f = s->flow;
    const int r = ctx->rank, n = f->first[r + 1] - f->first[r];
    const struct collc_mpicuda_fop *rows = f->ops + f->first[r];
    int npieces = 0, edges = 0, busiest = 0, places, ndone = 0, low = 0, err = COLLC_CUDA_OK;
    int64_t largest = 0, scratch = 0;
    double last;

    /* Every message's pieces, its scratch (counted from its place) and the busiest step's count. */
    for (int i = 0, run = 0, prev = -1; i < n; i++) {
        const struct collc_mpicuda_phase *ph = &s->phases[rows[i].phase];
        const struct collc_cuda_msg *m = &ph->msgs[rows[i].msg];
        const int send = m->src == r;
        int64_t area = 0;
        int nready = 0, k;
        run = m->step == prev ? run + 1 : 1;
        prev = m->step;
        if (run > busiest) busiest = run;
        edges += rows[i].ndeps;
        k = collc_mpicuda_plan_msg(ctx, ph, m, send, npieces, &nready, &area, &largest);
        if (area > scratch) scratch = area;
        if (!ctx->sizing) {
            struct collc_mpicuda_link *l = &ctx->links[i];
            struct collc_mpicuda_fx *fx = &ctx->st->fx[i];
            memset(l, 0, sizeof *l);
            l->msg = m;
            l->send = send;
            l->peer = send ? m->dst : m->src;
            l->first = npieces;
            l->npieces = k;
            collc_mpicuda_link_route(ctx, i);
            fx->need = rows[i].ndeps;
            fx->state = COLLC_MF_WAIT;
            fx->slot = -1;
            fx->scratch = !send && m->landing != COLLC_CUDA_DIRECT;
            fx->step = m->step;
            fx->phase = rows[i].phase;
        }
        npieces += k;
    }
    places = f->links[r] < busiest ? busiest : f->links[r];
    if (places > n) places = n;
    ctx->place_bytes = (int64_t)collc_cuda_align16((collc_u64)scratch);
    if (ctx->sizing) {
        const size_t need = (size_t)collc_mpicuda_place_at(ctx, places);
        if (need > ctx->need_scratch) ctx->need_scratch = need;
        if (npieces > ctx->need_pieces) ctx->need_pieces = npieces;
        if (n > ctx->need_links) ctx->need_links = n;
        if (3 * places > ctx->need_events) ctx->need_events = 3 * places;
        ctx->need_places = places;
        ctx->place_largest = largest;
        ctx->need_fx = n;
        ctx->need_fints = (size_t)(n + 1) + (size_t)edges + (size_t)places;
        return COLLC_CUDA_OK;
    }

    /* Who waits for each message (succ), and the free places. */
    {
        int *succ_first = ctx->st->fints, *succ = succ_first + n + 1, *free_slots = succ + edges;
        ctx->flow_n = n;
        ctx->flow_edges = edges;
        for (int i = 0; i <= n; i++) succ_first[i] = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < rows[i].ndeps; k++) succ_first[f->deps[rows[i].first_dep + k] + 1]++;
        for (int i = 0; i < n; i++) succ_first[i + 1] += succ_first[i];
        for (int k = 0; k < edges; k++) succ[k] = -1;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < rows[i].ndeps; k++) {
                const int d = f->deps[rows[i].first_dep + k];
                int at = succ_first[d];
                while (at < succ_first[d + 1] && succ[at] >= 0) at++; /* the next free entry of d's list */
                succ[at] = i;
            }
        for (int k = 0; k < places; k++) free_slots[k] = places - 1 - k;
        ctx->nfree = places;
    }
    COLLC_CUDA_TRY(cudaStreamSynchronize(ctx->st->main)); /* nothing of an earlier call still runs */
    /* Empty messages (no bytes at this count): both ends skip them, and only their own empty chunks order them. */
    for (int i = 0; i < n && err == COLLC_CUDA_OK; i++)
        if (ctx->links[i].npieces == 0) err = collc_mpicuda_flow_finish(ctx, i, &ndone);

    last = MPI_Wtime();
    while (ndone < n && err == COLLC_CUDA_OK) {
        struct collc_mpicuda_fx *fx = ctx->st->fx;
        int moved = 0;
        while (low < n && fx[low].state == COLLC_MF_DONE) low++;
        /* Places for the ready messages, in table order. */
        for (int i = low; i < n && ctx->nfree > 0; i++) {
            if (fx[i].state != COLLC_MF_WAIT || (!fx[i].scratch && fx[i].need > 0)) continue;
            if (fx[i].step - fx[low].step >= 32767) break; /* its tag is still in use */
            if (fx[i].step != fx[low].step && ctx->nfree <= busiest) break;
            collc_mpicuda_flow_take(ctx, i);
            moved = 1;
        }
        /* Every message under way advances. */
        for (int i = low; i < n; i++) {
            struct collc_mpicuda_link *l = &ctx->links[i];
            int got;
            ctx->step_index = fx[i].step;
            if (fx[i].state == COLLC_MF_APPLYING) {
                if ((got = collc_mpicuda_event_done(ctx, 3 * fx[i].slot + 2)) < 0) err = got;
                else if (got) err = collc_mpicuda_flow_finish(ctx, i, &ndone);
                if (err != COLLC_CUDA_OK) break;
                moved |= got;
                continue;
            }
            if (fx[i].state != COLLC_MF_ACTIVE) continue;
            if ((got = collc_mpicuda_advance(ctx, l)) < 0) {
                err = got;
                break;
            }
            moved |= got;
            if (!collc_mpicuda_link_done(l)) continue;
            moved = 1;
            if (!fx[i].scratch) {
                err = collc_mpicuda_flow_finish(ctx, i, &ndone);
            } else if (fx[i].need > 0) {
                fx[i].state = COLLC_MF_ARRIVED;
                err = COLLC_CUDA_OK;
            } else {
                err = collc_mpicuda_flow_apply(ctx, i);
                fx[i].state = COLLC_MF_APPLYING;
            }
            if (err != COLLC_CUDA_OK) break;
        }
        if (err != COLLC_CUDA_OK) break;
        if (moved) {
            last = MPI_Wtime();
            continue;
        }
        if (MPI_Wtime() - last > ctx->st->timeout) err = collc_mpicuda_flow_timeout(ctx, low);
        else sched_yield();
    }
    if (err != COLLC_CUDA_OK) collc_mpicuda_abandon(ctx, n); /* what is still posted: cancelled, or left to MPI */
    return err;
}

#endif /* COLLC_MPICUDA_FLOW_CUH */
