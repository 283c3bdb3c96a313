/* collc_mpicuda_state.cuh: what the mpi-cuda executor keeps from call to call (see collc_mpicuda.cuh).
 *
 * Included by collc_mpicuda.cuh.  Per device, created at the first call on it,
 * re-created when the device changes, freed by collc_mpicuda_release_all():
 * the transport and settings read from the environment, four streams, events,
 * scratch space, pinned staging buffers and the per-step arrays.  Per user
 * communicator: its duplicate (its errors return), kept as an attribute of
 * the communicator and freed with it, so that every rank of a communicator
 * uses the same duplicate whatever other communicators each rank used in
 * between, and a communicator that reuses a freed one's handle gets its own.
 * The duplicate is made with MPI_Comm_idup and the settings are compared
 * across its ranks with MPI_Iallreduce, both under the watchdog, so that a
 * rank that never calls fails the others instead of hanging them.  With the
 * duplicate, the communicator of its ranks on this host; with IPC, the
 * mailboxes and flags of collc_mpicuda_ipc.cuh (freed by the release too).
 */
#ifndef COLLC_MPICUDA_STATE_CUH
#define COLLC_MPICUDA_STATE_CUH

/* What the library keeps of a user communicator (its attribute). */
struct collc_mpicuda_comm {
    MPI_Comm dup;                  /* its duplicate, errors returned */
    MPI_Comm node;                 /* the duplicate's ranks on this host (the IPC group), MPI_COMM_NULL: not yet */
    int tried;                     /* IPC set up (or found impossible) since the last release */
    struct collc_mpicuda_ipc *ipc; /* NULL: every peer over MPI */
    int peers;                     /* ranks of the communicator reached by IPC */
    char why[160];                 /* why not IPC, when the transport is auto */
    int stream;                    /* stream-ordered calls (collc_mpicuda_stream.cuh): 1, 0, -1 not decided yet */
    char stream_why[160];          /* why not */
    cudaEvent_t done;              /* stream-ordered: the end of the last call on it (not in a graph capture) */
    struct collc_mpicuda_comm *next, **at; /* the kept state's list of entries with IPC tried */
};

/* Waits for `event` under the watchdog (`timeout` seconds); 0, or -1 when it did not fire. */
static inline int collc_mpicuda_event_wait(cudaEvent_t event, double timeout)
{
    const double start = MPI_Wtime();
    for (;;) {
        const cudaError_t err = cudaEventQuery(event);
        if (err == cudaSuccess) return 0;
        cudaGetLastError();
        if (err != cudaErrorNotReady || MPI_Wtime() - start > timeout) return -1;
        sched_yield();
    }
}

/* Frees a communicator's IPC (collectively over its host's ranks); the next call sets it up again. */
static inline void collc_mpicuda_comm_unlink(struct collc_mpicuda_comm *c)
{
    struct collc_mpicuda_state *st = &collc_mpicuda_kept;
    if (c->at != NULL) {
        *c->at = c->next;
        if (c->next != NULL) c->next->at = c->at;
    }
    c->next = NULL;
    c->at = NULL;
    if (c->ipc != NULL && st->ready) { /* nothing queued may still write the flags or read the mailboxes */
        if (st->d2h != NULL) cudaStreamSynchronize(st->d2h);
        if (st->h2d != NULL) cudaStreamSynchronize(st->h2d);
        if (c->done != NULL && collc_mpicuda_event_wait(c->done, st->timeout) != 0) st->broken = st->stuck = 1;
    }
    if (c->done != NULL && !st->stuck) cudaEventDestroy(c->done);
    c->done = NULL;
    if (collc_mpicuda_ipc_free(c->ipc, st->broken ? MPI_COMM_NULL : c->node, st->ready ? st->timeout : 60.0,
                               st->rank))
        st->broken = 1;
    c->ipc = NULL;
    c->tried = 0;
    c->peers = 0;
    c->stream = -1;
}

/* Frees everything kept; the next call starts afresh. */
static inline void collc_mpicuda_release_all(void)
{
    struct collc_mpicuda_state *st = &collc_mpicuda_kept;
    if (!st->ready) return;
    while (st->comms != NULL) collc_mpicuda_comm_unlink(st->comms);
    if (st->stuck) { /* a stream-ordered call never finished: freeing would wait for it forever; all kept */
        memset(st, 0, sizeof *st);
        return;
    }
    cudaStream_t streams[4] = {st->main, st->enc, st->d2h, st->h2d};
    for (int k = 0; k < 4; k++)
        if (streams[k] != NULL) {
            cudaStreamSynchronize(streams[k]);
            cudaStreamDestroy(streams[k]);
        }
    for (int k = 0; k < st->nevents; k++)
        cudaEventDestroy(st->events[k]);
    if (st->done != NULL) cudaEventDestroy(st->done);
    cudaFree(st->scratch);
    cudaFree(st->bad);
    if (st->pinned != NULL) cudaFreeHost(st->pinned);
    if (st->sizes != NULL) cudaFreeHost(st->sizes);
    free(st->events);
    free(st->pieces);
    free(st->links);
    free(st->fx);
    free(st->fints);
    memset(st, 0, sizeof *st); /* the duplicates stay: they belong to their communicators' attributes */
}

/* The settings from the environment: COLLC_TIMEOUT, COLLC_SEGMENT_BYTES, COLLC_CUDA_AWARE. */
static inline int collc_mpicuda_settings(struct collc_mpicuda_state *st)
{
    const double timeout = collc_mpicuda_env_number("COLLC_TIMEOUT", 60.0, 1e-3);
    const double segment = collc_mpicuda_env_number("COLLC_SEGMENT_BYTES", 4194304.0, 64.0);
    const double group = collc_mpicuda_env_number("COLLC_IPC_GROUP", 0.0, 1.0);
    const char *ordered = getenv("COLLC_STREAM_ORDERED");
    if (timeout < 0 || segment < 0 || group < 0) return COLLC_CUDA_ERR_ARG;
    if (segment > 1073741824.0)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "COLLC_SEGMENT_BYTES=%.0f: at most 1 GiB", segment);
    if (group != (double)(int)group)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "COLLC_IPC_GROUP=%g: expected a whole number >= 1", group);
    st->timeout = timeout;
    st->segment = (int64_t)segment;
    st->ipc_group = (int)group;
    if (ordered != NULL && *ordered != '\0' && strcmp(ordered, "0") != 0 && strcmp(ordered, "1") != 0)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "COLLC_STREAM_ORDERED=%s: expected 0 or 1", ordered);
    st->stream_setting = ordered == NULL || *ordered == '\0' || ordered[0] == '1';
    if ((st->transport = collc_mpicuda_transport_setting()) < 0) return COLLC_CUDA_ERR_ARG;
    st->aware = collc_mpicuda_detect_aware(st->why, sizeof st->why);
    return st->aware < 0 ? COLLC_CUDA_ERR_ARG : COLLC_CUDA_OK;
}

/* Creates the kept state on `device` (st->ready is set: a failure leaves what to free). */
static inline int collc_mpicuda_create(struct collc_mpicuda_state *st, int device)
{
    int sms = 0, err;
    st->ready = 1;
    st->device = device;
    st->comm = MPI_COMM_NULL;
    if ((err = collc_mpicuda_settings(st)) != COLLC_CUDA_OK) return err;
    COLLC_CUDA_TRY(cudaStreamCreateWithFlags(&st->main, cudaStreamNonBlocking));
    COLLC_CUDA_TRY(cudaStreamCreateWithFlags(&st->enc, cudaStreamNonBlocking));
    COLLC_CUDA_TRY(cudaStreamCreateWithFlags(&st->d2h, cudaStreamNonBlocking));
    COLLC_CUDA_TRY(cudaStreamCreateWithFlags(&st->h2d, cudaStreamNonBlocking));
    COLLC_CUDA_TRY(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
    COLLC_CUDA_TRY(cudaMalloc((void **)&st->bad, sizeof *st->bad));
    COLLC_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    st->max_blocks = 4 * (sms > 0 ? sms : 1);
    return COLLC_CUDA_OK;
}

/* The keyval of the user communicators' duplicates (MPI_KEYVAL_INVALID until the first). */
static int collc_mpicuda_dup_keyval = MPI_KEYVAL_INVALID;

static inline int collc_mpicuda_dup_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    struct collc_mpicuda_comm *c = (struct collc_mpicuda_comm *)attr;
    int finalized = 0;
    (void)comm, (void)keyval, (void)extra;
    if (collc_mpicuda_kept.last == c) collc_mpicuda_kept.last = NULL;
    collc_mpicuda_comm_unlink(c);
    MPI_Finalized(&finalized);
    if (!finalized && c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
    if (!finalized && c->dup != MPI_COMM_NULL) MPI_Comm_free(&c->dup);
    free(c);
    return MPI_SUCCESS;
}

/* st->comm and st->last: the duplicate of `comm` and its entry, from its attribute, or made now (collectively,
 * under the watchdog) with the settings compared across its ranks and the host's communicator split off. */
static inline int collc_mpicuda_dup_of(struct collc_mpicuda_state *st, MPI_Comm comm)
{
    struct collc_mpicuda_comm *c = NULL;
    MPI_Comm made = MPI_COMM_NULL, node = MPI_COMM_NULL;
    long long mine[6], all[6];
    MPI_Request req;
    int found = 0, err = COLLC_CUDA_OK;
    MPI_Comm_rank(comm, &st->rank);
    MPI_Comm_size(comm, &st->size);
    if (collc_mpicuda_dup_keyval == MPI_KEYVAL_INVALID &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, collc_mpicuda_dup_delete, &collc_mpicuda_dup_keyval, NULL) !=
            MPI_SUCCESS)
        return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: MPI_Comm_create_keyval failed", st->rank);
    MPI_Comm_get_attr(comm, collc_mpicuda_dup_keyval, &c, &found);
    if (found && c != NULL) {
        st->comm = c->dup;
        st->last = c;
        return COLLC_CUDA_OK;
    }
    if (MPI_Comm_idup(comm, &made, &req) != MPI_SUCCESS)
        return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: MPI_Comm_idup failed", st->rank);
    if ((err = collc_mpicuda_wait_setup(st, &req, "duplicating the communicator")) != COLLC_CUDA_OK) return err;
    MPI_Comm_set_errhandler(made, MPI_ERRORS_RETURN);
    mine[0] = st->segment;
    mine[1] = -st->segment;
    mine[2] = st->transport;
    mine[3] = -st->transport;
    mine[4] = st->ipc_group;
    mine[5] = -st->ipc_group;
    if (MPI_Iallreduce(mine, all, 6, MPI_LONG_LONG, MPI_MAX, made, &req) != MPI_SUCCESS)
        err = collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: MPI_Iallreduce failed", st->rank);
    else if ((err = collc_mpicuda_wait_setup(st, &req, "comparing the settings of the ranks")) != COLLC_CUDA_OK)
        return err; /* broken: MPI may still use `made` */
    else if (all[0] != -all[1])
        err = collc_cuda_fail(COLLC_CUDA_ERR_ARG,
                              "rank %d: COLLC_SEGMENT_BYTES differs between ranks (%lld .. %lld): set it the same "
                              "on every rank",
                              st->rank, -all[1], all[0]);
    else if (all[2] != -all[3] || all[4] != -all[5])
        err = collc_cuda_fail(COLLC_CUDA_ERR_ARG,
                              "rank %d: COLLC_TRANSPORT or COLLC_IPC_GROUP differs between ranks: set them the same "
                              "on every rank",
                              st->rank);
    else if ((c = (struct collc_mpicuda_comm *)calloc(1, sizeof *c)) == NULL)
        err = collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
    /* the ranks of this host (every rank is in the call: the reduction completed), then its IPC groups */
    if (err == COLLC_CUDA_OK && MPI_Comm_split_type(made, MPI_COMM_TYPE_SHARED, st->rank, MPI_INFO_NULL, &node) !=
                                    MPI_SUCCESS)
        err = collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: MPI_Comm_split_type failed", st->rank);
    if (err == COLLC_CUDA_OK && st->ipc_group > 0) {
        MPI_Comm group = MPI_COMM_NULL;
        int at = 0;
        MPI_Comm_rank(node, &at);
        if (MPI_Comm_split(node, at / st->ipc_group, at, &group) != MPI_SUCCESS)
            err = collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: MPI_Comm_split failed", st->rank);
        MPI_Comm_free(&node);
        node = group;
    }
    if (err != COLLC_CUDA_OK) {
        if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
        MPI_Comm_free(&made);
        free(c);
        return err;
    }
    c->dup = made;
    c->node = node;
    c->stream = -1;
    MPI_Comm_set_attr(comm, collc_mpicuda_dup_keyval, c);
    st->comm = made;
    st->last = c;
    return COLLC_CUDA_OK;
}

/* The IPC of st->last, set up at its first call since a release (collectively over the ranks of the host). */
static inline int collc_mpicuda_ipc_of(struct collc_mpicuda_state *st)
{
    struct collc_mpicuda_comm *c = (struct collc_mpicuda_comm *)st->last;
    int nlocal = 1, err = COLLC_CUDA_OK;
    if (c->tried) return COLLC_CUDA_OK;
    MPI_Comm_size(c->node, &nlocal);
    c->why[0] = '\0';
    if (st->transport == COLLC_TRANSPORT_MPI) {
        snprintf(c->why, sizeof c->why, "COLLC_TRANSPORT=mpi");
    } else if (st->transport == COLLC_TRANSPORT_IPC && nlocal < st->size) {
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG,
                               "rank %d: COLLC_TRANSPORT=ipc, but only %d of the %d ranks share this host%s: use "
                               "COLLC_TRANSPORT=auto (IPC on the host, MPI between hosts)",
                               st->rank, nlocal, st->size, st->ipc_group > 0 ? " (COLLC_IPC_GROUP)" : "");
    } else if (nlocal == 1) {
        snprintf(c->why, sizeof c->why, "no other rank on this host");
    } else {
        c->ipc = collc_mpicuda_ipc_setup(st, c->dup, c->node, c->why, sizeof c->why, &err);
        if (err != COLLC_CUDA_OK) return err;
        if (c->ipc == NULL && st->transport == COLLC_TRANSPORT_IPC)
            return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "rank %d: COLLC_TRANSPORT=ipc: %s", st->rank, c->why);
    }
    c->peers = c->ipc != NULL ? c->ipc->nlocal - 1 : 0;
    c->tried = 1;
    c->next = st->comms;
    if (c->next != NULL) c->next->at = &c->next;
    c->at = &st->comms;
    st->comms = c;
    return COLLC_CUDA_OK;
}

/* The kept state for the current device, st->comm the duplicate of `comm`, and its IPC. */
static inline int collc_mpicuda_prepare(struct collc_mpicuda_state *st, MPI_Comm comm)
{
    int device = 0, err;
    cudaError_t cerr = cudaGetDevice(&device);
    if (cerr != cudaSuccess) {
        cudaGetLastError();
        return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "no usable CUDA device: %s (%s)", cudaGetErrorString(cerr),
                               cudaGetErrorName(cerr));
    }
    if (st->broken)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG,
                               "rank %d: an earlier call failed in the middle of a step; release the library "
                               "before calling it again",
                               st->rank);
    if (!st->ready || st->device != device) {
        collc_mpicuda_release_all();
        if ((err = collc_mpicuda_create(st, device)) != COLLC_CUDA_OK) {
            collc_mpicuda_release_all();
            return err;
        }
    }
    err = collc_mpicuda_dup_of(st, comm);
    if (err == COLLC_CUDA_OK) err = collc_mpicuda_ipc_of(st);
    if (err != COLLC_CUDA_OK && !st->broken) st->comm = MPI_COMM_NULL;
    return err;
}

/* Bytes of each pinned segment buffer: a segment, or by dataflow no more than a message's largest raw piece. */
static inline int64_t collc_mpicuda_pinned_stride(const struct collc_mpicuda_state *st,
                                                  const struct collc_mpicuda_ctx *ctx)
{
    const int64_t run = (ctx->place_largest + 63) & ~(int64_t)63;
    return ctx->flow && run < st->segment ? (run > 0 ? run : 64) : st->segment;
}

/* Grows what the kept state holds to what a call needs. */
static inline int collc_mpicuda_reserve(struct collc_mpicuda_state *st, const struct collc_mpicuda_ctx *ctx)
{
    const size_t places = (size_t)(ctx->flow ? ctx->need_places : ctx->need_links);
    const size_t pinned = st->aware ? 0 : places * 2 * (size_t)collc_mpicuda_pinned_stride(st, ctx);
    if (ctx->need_scratch > st->scratch_bytes) {
        COLLC_CUDA_TRY(cudaFree(st->scratch)); /* waits for the work that used it */
        st->scratch = NULL;
        st->scratch_bytes = 0;
        COLLC_CUDA_TRY(cudaMalloc((void **)&st->scratch, ctx->need_scratch));
        st->scratch_bytes = ctx->need_scratch;
    }
    if (pinned > st->pinned_bytes) {
        if (st->pinned != NULL) COLLC_CUDA_TRY(cudaFreeHost(st->pinned));
        st->pinned = NULL;
        st->pinned_bytes = 0;
        COLLC_CUDA_TRY(cudaMallocHost((void **)&st->pinned, pinned));
        st->pinned_bytes = pinned;
    }
    if (ctx->need_sizes > st->nsizes) {
        if (st->sizes != NULL) COLLC_CUDA_TRY(cudaFreeHost(st->sizes));
        st->sizes = NULL;
        st->nsizes = 0;
        COLLC_CUDA_TRY(cudaMallocHost((void **)&st->sizes, (size_t)ctx->need_sizes * sizeof *st->sizes));
        st->nsizes = ctx->need_sizes;
    }
    if (ctx->need_events > st->nevents) {
        cudaEvent_t *events = (cudaEvent_t *)realloc(st->events, (size_t)ctx->need_events * sizeof *events);
        if (events == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        st->events = events;
        for (; st->nevents < ctx->need_events; st->nevents++)
            COLLC_CUDA_TRY(cudaEventCreateWithFlags(&st->events[st->nevents], cudaEventDisableTiming));
    }
    if (ctx->need_pieces > st->npieces) {
        void *grown = realloc(st->pieces, (size_t)ctx->need_pieces * sizeof *st->pieces);
        if (grown == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        st->pieces = (struct collc_mpicuda_piece *)grown;
        st->npieces = ctx->need_pieces;
    }
    if (ctx->need_fx > st->nfx) {
        void *grown = realloc(st->fx, (size_t)ctx->need_fx * sizeof *st->fx);
        if (grown == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        st->fx = (struct collc_mpicuda_fx *)grown;
        st->nfx = ctx->need_fx;
    }
    if (ctx->need_fints > st->nfints) {
        void *grown = realloc(st->fints, ctx->need_fints * sizeof *st->fints);
        if (grown == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        st->fints = (int *)grown;
        st->nfints = ctx->need_fints;
    }
    if (ctx->need_links > st->nlinks) {
        void *grown = realloc(st->links, (size_t)ctx->need_links * sizeof *st->links);
        if (grown == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        st->links = (struct collc_mpicuda_link *)grown;
        st->nlinks = ctx->need_links;
    }
    return COLLC_CUDA_OK;
}

/* The start of a call: the caller's work on the buffer is done (MPI may read it), no codec refusal yet. */
static inline int collc_mpicuda_begin(struct collc_mpicuda_state *st, cudaStream_t caller, int codecs)
{
    COLLC_CUDA_TRY(cudaStreamSynchronize(caller));
    if (codecs) COLLC_CUDA_TRY(cudaMemsetAsync(st->bad, 0xFF, sizeof *st->bad, st->main));
    return COLLC_CUDA_OK;
}

/* How messages travel, once a call has chosen it (for the last call's communicator). */
static inline const char *collc_mpicuda_transport(void)
{
    static char text[640];
    const struct collc_mpicuda_state *st = &collc_mpicuda_kept;
    const struct collc_mpicuda_comm *c = st->last;
    const char *mpi = st->aware ? "CUDA-aware MPI, device pointers" : "staged through pinned host buffers, "
                                                                      "double-buffered";
    if (!st->ready || c == NULL) return "not chosen yet: no call so far";
    if (c->peers == 0)
        snprintf(text, sizeof text, "%s (%s; no IPC: %s), segments of %lld bytes", mpi, st->why, c->why,
                 (long long)st->segment);
    else if (c->peers == st->size - 1)
        snprintf(text, sizeof text, "CUDA IPC with the %d other ranks of this host (device-to-device copies into "
                 "their mailboxes, flags in mapped shared memory), segments of %lld bytes; %s%s", c->peers,
                 (long long)st->segment, c->stream > 0 ? "stream-ordered (enqueued on the caller's stream)"
                                                       : "host-driven: ", c->stream > 0 ? "" : c->stream_why);
    else
        snprintf(text, sizeof text, "CUDA IPC with %d of the other ranks (this host), %s with the %d others (%s), "
                 "segments of %lld bytes", c->peers, mpi, st->size - 1 - c->peers, st->why, (long long)st->segment);
    return text;
}

#endif /* COLLC_MPICUDA_STATE_CUH */
