/* collc_mpicuda_ipc.cuh: device-to-device messages between the ranks of one host (see collc_mpicuda_wire.cuh).
 *
 * Included by collc_mpicuda.cuh after its types.  When the transport allows
 * it (COLLC_TRANSPORT=auto, the default, or ipc), the ranks of a communicator
 * that share a host (MPI_COMM_TYPE_SHARED) move their messages to each other
 * without MPI and without the host's memory:
 *
 *   - every rank owns a *mailbox* in device memory: for each other rank of the
 *     host, two slots of one segment each.  Its CUDA IPC handle is shared once
 *     per communicator, and every rank opens its peers' mailboxes;
 *   - the host's ranks share one page of *flags* (POSIX shared memory, mapped
 *     into every process and registered with CUDA as mapped memory, so kernels
 *     write it).  For each ordered pair src -> dst: how many segments src has
 *     delivered into dst's mailbox, the size of each slot's segment, and how
 *     many of them dst has consumed;
 *   - a segment from src to dst is the n-th of that pair (n counted from the
 *     communicator's first call: both ends count the pair's segments in table
 *     order, since a link to a peer starts only after the rank's earlier links
 *     to that peer have posted all theirs).  src waits until dst has consumed
 *     segment n - 2 (its slot, n mod 2, is free), copies the segment from its
 *     buffer into that slot of dst's mailbox with cudaMemcpyAsync, and a
 *     one-thread kernel after the copy on the same stream stores the size and
 *     then the count n + 1 (a system-wide fence between them): the completion
 *     is signalled by the device, in stream order, never by a host waiting for
 *     the copy.  dst's host polls the count (a plain load of mapped memory),
 *     copies the slot to where the segment belongs (buffer or scratch, as an
 *     MPI receive would have put it), and a kernel after that copy stores the
 *     consumed count, which frees the slot for segment n + 2.
 *
 * Everything else (pieces, segments of COLLC_SEGMENT_BYTES, the dataflow and
 * step-by-step issue, the size checks and the watchdog) is the MPI path's.
 * Ranks on other hosts keep MPI (CUDA-aware or staged).  COLLC_TRANSPORT=mpi
 * turns IPC off; =ipc requires every rank of the communicator on one host.
 * COLLC_IPC_GROUP=g lets only consecutive groups of g ranks of a host use IPC
 * with each other (the others MPI), to run mixed transports on one machine.
 *
 * Kept per communicator (an attribute of its duplicate, collc_mpicuda_state.cuh):
 * the host's communicator, from the first call until the communicator is freed;
 * the mailboxes, handles and flags, until collc_mpicuda_release().  The set-up
 * uses non-blocking collectives under the watchdog, and every rank of the host
 * agrees on whether it worked: when any step fails (no IPC on this platform,
 * no shared memory), COLLC_TRANSPORT=auto falls back to MPI on every rank of
 * the host, and =ipc fails with the reason.
 */
#ifndef COLLC_MPICUDA_IPC_CUH
#define COLLC_MPICUDA_IPC_CUH

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

enum collc_mpicuda_transport_kind { COLLC_TRANSPORT_AUTO, COLLC_TRANSPORT_IPC, COLLC_TRANSPORT_MPI };

/* Per ordered pair: segments delivered, consumed, the size of slot 0's, of slot 1's (host-driven); the two slot
 * words (32 bits each), the count of segments taken this call (stream-ordered, collc_mpicuda_stream.cuh); padding. */
enum { COLLC_IPC_PAIR_WORDS = 8 };

/* What a communicator's IPC set-up made (NULL fields: not made). */
struct collc_mpicuda_ipc {
    int nlocal, me;           /* ranks of the IPC group on this host, and this rank's index among them */
    int *local_of;            /* [comm size]: a rank's index in the group, -1 when it is reached over MPI */
    int64_t slot_bytes;       /* bytes of one mailbox slot */
    char *mailbox;            /* this rank's: [nlocal senders][2 slots] (device) */
    char **peer_box;          /* [nlocal]: the peers' mailboxes, opened (NULL for this rank) */
    collc_u64 *flags;         /* the host's flags: [src][dst][COLLC_IPC_PAIR_WORDS], mapped here */
    collc_u64 *dflags;        /* the same, as the device sees it */
    size_t flag_bytes;
    int registered;           /* flags registered with CUDA */
    collc_u64 *sent, *taken;  /* [nlocal]: segments sent to, received from each peer so far */
    collc_u64 *landed;        /* [nlocal]: the next segment from each peer to land (they land in order) */
    int *ranks;               /* [nlocal]: a group index's rank in the communicator */
    unsigned *stream_sent, *stream_taken, *stream_expect; /* [nlocal]: stream-ordered segments of a call */
    struct collc_mpicuda_ipc *next; /* every set-up of the process, for the release */
};

/* The flags of the pair src -> dst (indices in the group). */
static inline collc_u64 *collc_ipc_pair(collc_u64 *flags, const struct collc_mpicuda_ipc *ipc, int src, int dst)
{
    return flags + ((size_t)src * (size_t)ipc->nlocal + (size_t)dst) * COLLC_IPC_PAIR_WORDS;
}

/* Stores `size` into *size_word (when not NULL), then `count` into *count_word, visible to every process. */
extern "C" __global__ void collc_mpicuda_signal(collc_u64 *size_word, collc_u64 size, collc_u64 *count_word,
                                                collc_u64 count)
{
    if (size_word != NULL) *(volatile collc_u64 *)size_word = size;
    __threadfence_system();
    *(volatile collc_u64 *)count_word = count;
    __threadfence_system();
}

/* Waits for a non-blocking collective of the setup on rank `rank`, under the watchdog (`timeout` seconds);
 * a timeout sets *broken (MPI may still complete the request). */
static inline int collc_mpicuda_wait_request(MPI_Request *req, double timeout, int rank, const char *what,
                                             int *broken)
{
    const double start = MPI_Wtime();
    for (;;) {
        int flag = 0, code = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (code != MPI_SUCCESS) {
            char text[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(code, text, &len);
            return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: %s failed: %s", rank, what, text);
        }
        if (flag) return COLLC_CUDA_OK;
        if (MPI_Wtime() - start > timeout) {
            *broken = 1;
            return collc_cuda_fail(COLLC_MPICUDA_ERR_TIMEOUT,
                                   "rank %d: %s: not every rank answered within %g s (COLLC_TIMEOUT): a rank died, "
                                   "stopped, or does not call the collective",
                                   rank, what, timeout);
        }
        sched_yield();
    }
}

static inline int collc_mpicuda_wait_setup(struct collc_mpicuda_state *st, MPI_Request *req, const char *what)
{
    return collc_mpicuda_wait_request(req, st->timeout, st->rank, what, &st->broken);
}

/* Waits for a non-blocking collective of the set-up (`code`: what starting it returned), under the watchdog. */
static inline int collc_mpicuda_ipc_wait(struct collc_mpicuda_state *st, int code, MPI_Request *req,
                                         const char *what)
{
    if (code != MPI_SUCCESS) return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: %s failed", st->rank, what);
    return collc_mpicuda_wait_setup(st, req, what);
}

static inline collc_u64 collc_ipc_load(const collc_u64 *word)
{
    return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

/* COLLC_TRANSPORT: the kind, or < 0 (an error set). */
static inline int collc_mpicuda_transport_setting(void)
{
    const char *env = getenv("COLLC_TRANSPORT");
    if (env == NULL || *env == '\0' || strcmp(env, "auto") == 0) return COLLC_TRANSPORT_AUTO;
    if (strcmp(env, "ipc") == 0) return COLLC_TRANSPORT_IPC;
    if (strcmp(env, "mpi") == 0) return COLLC_TRANSPORT_MPI;
    return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "COLLC_TRANSPORT=%s: expected auto, ipc or mpi", env);
}

/* Frees what a set-up made (the struct too), collectively over `node`: every rank closes its peers' mailboxes,
 * then, after a barrier under the watchdog (CUDA requires the importers to close before the owner frees), frees
 * its own.  With MPI_COMM_NULL (after a failure, when the peers cannot be asked, or work may still be queued)
 * the mailbox and the flags stay.  1 when the barrier timed out (it may still be pending on `node`). */
static inline int collc_mpicuda_ipc_free(struct collc_mpicuda_ipc *ipc, MPI_Comm node, double timeout, int rank)
{
    int late = 0;
    if (ipc == NULL) return 0;
    for (int k = 0; ipc->peer_box != NULL && k < ipc->nlocal; k++)
        if (ipc->peer_box[k] != NULL) cudaIpcCloseMemHandle(ipc->peer_box[k]);
    if (node == MPI_COMM_NULL) { /* the peers cannot be asked, or queued work may still use them: kept */
        ipc->mailbox = NULL;
        ipc->registered = 0;
        ipc->flags = NULL;
    } else {
        MPI_Request req;
        int broken = 0;
        if (MPI_Ibarrier(node, &req) != MPI_SUCCESS ||
            collc_mpicuda_wait_request(&req, timeout, rank, "closing the IPC mailboxes", &broken) != COLLC_CUDA_OK) {
            ipc->mailbox = NULL;
            late = 1; /* the barrier may still be pending on the host's communicator */
        }
    }
    if (ipc->mailbox != NULL) cudaFree(ipc->mailbox);
    if (ipc->registered) cudaHostUnregister(ipc->flags);
    if (ipc->flags != NULL) munmap(ipc->flags, ipc->flag_bytes);
    free(ipc->local_of);
    free(ipc->peer_box);
    free(ipc->sent);
    free(ipc->taken);
    free(ipc->landed);
    free(ipc->ranks);
    free(ipc->stream_sent);
    free(ipc->stream_taken);
    free(ipc->stream_expect);
    free(ipc);
    return late;
}

/* The shared memory `name`, opened with `how` (created: sized), mapped; NULL with `why` set when it fails. */
static inline collc_u64 *collc_mpicuda_ipc_map(const char *name, int how, size_t bytes, char *why, size_t n)
{
    const int fd = shm_open(name, how, 0600);
    void *at = MAP_FAILED;
    if (fd >= 0 && (!(how & O_CREAT) || ftruncate(fd, (off_t)bytes) == 0))
        at = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (at == MAP_FAILED) snprintf(why, n, "shared memory %s: %s", name, strerror(errno));
    if (fd >= 0) close(fd);
    return at == MAP_FAILED ? NULL : (collc_u64 *)at;
}

/* This rank's part of the set-up; a reason in `why` when it failed (the others are told by the caller). */
static inline int collc_mpicuda_ipc_mine(struct collc_mpicuda_ipc *ipc, int64_t segment, char *why, size_t n)
{
    cudaError_t err;
    ipc->slot_bytes = (segment + 255) & ~(int64_t)255;
    ipc->peer_box = (char **)calloc((size_t)ipc->nlocal, sizeof *ipc->peer_box);
    ipc->sent = (collc_u64 *)calloc((size_t)ipc->nlocal, sizeof *ipc->sent);
    ipc->taken = (collc_u64 *)calloc((size_t)ipc->nlocal, sizeof *ipc->taken);
    ipc->landed = (collc_u64 *)calloc((size_t)ipc->nlocal, sizeof *ipc->landed);
    ipc->ranks = (int *)calloc((size_t)ipc->nlocal, sizeof *ipc->ranks);
    ipc->stream_sent = (unsigned *)calloc((size_t)ipc->nlocal, sizeof *ipc->stream_sent);
    ipc->stream_taken = (unsigned *)calloc((size_t)ipc->nlocal, sizeof *ipc->stream_taken);
    ipc->stream_expect = (unsigned *)calloc((size_t)ipc->nlocal, sizeof *ipc->stream_expect);
    if (ipc->peer_box == NULL || ipc->sent == NULL || ipc->taken == NULL || ipc->landed == NULL || ipc->ranks == NULL ||
        ipc->stream_sent == NULL || ipc->stream_taken == NULL || ipc->stream_expect == NULL) {
        snprintf(why, n, "out of host memory");
        return -1;
    }
    err = cudaMalloc((void **)&ipc->mailbox, (size_t)ipc->nlocal * 2 * (size_t)ipc->slot_bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        ipc->mailbox = NULL;
        snprintf(why, n, "allocating the mailbox (%lld bytes) failed: %s",
                 (long long)ipc->nlocal * 2 * ipc->slot_bytes, cudaGetErrorString(err));
        return -1;
    }
    return 0;
}

/* The set-up on the host's communicator `node` (the IPC group: ranks of one host, at most COLLC_IPC_GROUP of
 * them), collective over it; `comm` the communicator of the calls.  NULL with `why` set when the group will not
 * use IPC (agreed by all of it), or with an error set (*err) for a failure of MPI or the watchdog. */
static inline struct collc_mpicuda_ipc *collc_mpicuda_ipc_setup(struct collc_mpicuda_state *st, MPI_Comm comm,
                                                                MPI_Comm node, char *why, size_t n, int *err)
{
    struct collc_mpicuda_ipc *ipc = (struct collc_mpicuda_ipc *)calloc(1, sizeof *ipc);
    cudaIpcMemHandle_t mine, *all = NULL;
    char name[64] = "";
    int ok, ranks_failed = 0, size = 0;
    MPI_Group gnode, gcomm;
    MPI_Request req;
    *err = COLLC_CUDA_OK;
    why[0] = '\0';
    MPI_Comm_size(node, &ipc->nlocal);
    MPI_Comm_rank(node, &ipc->me);
    MPI_Comm_size(comm, &size);
    ok = collc_mpicuda_ipc_mine(ipc, st->segment, why, n) == 0;
    if (ok) {
        if (cudaIpcGetMemHandle(&mine, ipc->mailbox) != cudaSuccess) {
            cudaGetLastError();
            snprintf(why, n, "cudaIpcGetMemHandle failed (no CUDA IPC on this platform)");
            ok = 0;
        }
    }
    /* the mailboxes' handles, and whether every rank made its mailbox */
    all = (cudaIpcMemHandle_t *)calloc((size_t)ipc->nlocal, sizeof *all);
    if (all == NULL) ok = 0;
    ranks_failed = !ok;
    *err = collc_mpicuda_ipc_wait(st, MPI_Iallreduce(MPI_IN_PLACE, &ranks_failed, 1, MPI_INT, MPI_MAX, node, &req),
                                  &req, "agreeing on the IPC set-up");
    if (*err != COLLC_CUDA_OK || ranks_failed) goto fail;
    *err = collc_mpicuda_ipc_wait(st, MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, node,
                                                     &req),
                                  &req, "sharing the IPC handles");
    if (*err != COLLC_CUDA_OK) goto fail;
    /* the flags: made by the group's first rank, opened by the others */
    ipc->flag_bytes = ((size_t)ipc->nlocal * (size_t)ipc->nlocal * COLLC_IPC_PAIR_WORDS * sizeof(collc_u64) + 4095) &
                      ~(size_t)4095;
    if (ipc->me == 0) { /* made, sized and zeroed before anyone else opens it */
        static unsigned made;
        snprintf(name, sizeof name, "/collc-ipc-%ld-%u", (long)getpid(), made++);
        ipc->flags = collc_mpicuda_ipc_map(name, O_RDWR | O_CREAT | O_EXCL, ipc->flag_bytes, why, n);
        if (ipc->flags != NULL) memset(ipc->flags, 0, ipc->flag_bytes);
        else name[0] = '\0';
    }
    *err = collc_mpicuda_ipc_wait(st, MPI_Ibcast(name, sizeof name, MPI_CHAR, 0, node, &req), &req,
                                  "sharing the IPC flags' name");
    if (*err != COLLC_CUDA_OK) goto fail;
    if (ipc->me != 0 && name[0] == '\0') snprintf(why, n, "the host's first rank could not make shared memory");
    else if (ipc->me != 0) ipc->flags = collc_mpicuda_ipc_map(name, O_RDWR, ipc->flag_bytes, why, n);
    if (ipc->flags != NULL) {
        if (cudaHostRegister(ipc->flags, ipc->flag_bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
            cudaSuccess) {
            cudaGetLastError();
            snprintf(why, n, "cudaHostRegister of the IPC flags failed");
        } else {
            ipc->registered = 1;
            if (cudaHostGetDevicePointer((void **)&ipc->dflags, ipc->flags, 0) != cudaSuccess) {
                cudaGetLastError();
                snprintf(why, n, "the IPC flags have no device address (cudaHostGetDevicePointer failed)");
            }
        }
    }
    for (int k = 0; why[0] == '\0' && k < ipc->nlocal; k++) {
        if (k == ipc->me) continue;
        if (cudaIpcOpenMemHandle((void **)&ipc->peer_box[k], all[k], cudaIpcMemLazyEnablePeerAccess) !=
            cudaSuccess) {
            cudaGetLastError();
            ipc->peer_box[k] = NULL;
            snprintf(why, n, "cudaIpcOpenMemHandle of local rank %d's mailbox failed", k);
            break;
        }
    }
    ranks_failed = why[0] != '\0';
    /* every rank has opened the flags once this reduction completes; then the name goes */
    *err = collc_mpicuda_ipc_wait(st, MPI_Iallreduce(MPI_IN_PLACE, &ranks_failed, 1, MPI_INT, MPI_MAX, node, &req),
                                  &req, "agreeing on the IPC set-up");
    if (ipc->me == 0) shm_unlink(name);
    name[0] = '\0';
    if (*err != COLLC_CUDA_OK || ranks_failed) goto fail;
    /* every rank of comm: its index in the group, or -1 */
    ipc->local_of = (int *)malloc((size_t)size * sizeof *ipc->local_of);
    if (ipc->local_of == NULL) {
        *err = collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        goto fail;
    }
    {
        int *index = (int *)malloc((size_t)size * sizeof *index);
        if (index == NULL) {
            *err = collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
            goto fail;
        }
        for (int r = 0; r < size; r++) index[r] = r;
        MPI_Comm_group(comm, &gcomm);
        MPI_Comm_group(node, &gnode);
        MPI_Group_translate_ranks(gcomm, size, index, gnode, ipc->local_of);
        MPI_Group_free(&gcomm);
        MPI_Group_free(&gnode);
        free(index);
        for (int r = 0; r < size; r++) {
            if (ipc->local_of[r] == MPI_UNDEFINED) ipc->local_of[r] = -1;
            else ipc->ranks[ipc->local_of[r]] = r;
        }
    }
    free(all);
    return ipc;
fail:
    if (ipc->me == 0 && name[0] != '\0') shm_unlink(name);
    if (why[0] == '\0' && *err == COLLC_CUDA_OK) snprintf(why, n, "another rank of this host could not set IPC up");
    free(all);
    collc_mpicuda_ipc_free(ipc, *err == COLLC_CUDA_OK ? node : MPI_COMM_NULL, st->timeout, st->rank);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Segments over IPC (the link's segment machinery is collc_mpicuda_wire.cuh's)
 * ------------------------------------------------------------------------- */

/* Whether a link may post a segment now: its earlier links to the same peer (same direction) have posted all of
 * theirs, and, sending, the slot of the pair's next segment has been consumed. */
static inline int collc_mpicuda_ipc_may_post(const struct collc_mpicuda_ctx *ctx,
                                             const struct collc_mpicuda_link *l)
{
    const struct collc_mpicuda_ipc *ipc = ctx->ipc;
    if (l->prev >= 0) {
        const struct collc_mpicuda_link *p = &ctx->links[l->prev];
        if (p->piece != p->npieces || p->sizing) return 0;
    }
    if (!l->send) return 1;
    {
        const int peer = ipc->local_of[l->peer];
        const collc_u64 consumed = collc_ipc_load(collc_ipc_pair(ipc->flags, ipc, ipc->me, peer) + 1);
        return ipc->sent[peer] < consumed + 2;
    }
}

/* The mailbox slot of the pair src -> dst's segment `seq`, in the mailbox `box` of dst. */
static inline collc_u8 *collc_mpicuda_ipc_slot(const struct collc_mpicuda_ipc *ipc, char *box, int src,
                                               collc_u64 seq)
{
    return (collc_u8 *)box + ((size_t)src * 2 + (size_t)(seq & 1)) * (size_t)ipc->slot_bytes;
}

/* Sends segment s (its piece, offset and size set) into the peer's mailbox. */
static inline int collc_mpicuda_ipc_send(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_link *l,
                                         struct collc_mpicuda_seg *s, const collc_u8 *from)
{
    struct collc_mpicuda_state *st = ctx->st;
    const struct collc_mpicuda_ipc *ipc = ctx->ipc;
    const int peer = ipc->local_of[l->peer];
    const collc_u64 seq = ipc->sent[peer]++;
    collc_u64 *pair = collc_ipc_pair(ipc->dflags, ipc, ipc->me, peer);
    s->pair = seq;
    COLLC_CUDA_TRY(cudaMemcpyAsync(collc_mpicuda_ipc_slot(ipc, ipc->peer_box[peer], ipc->me, seq), from,
                                   (size_t)s->bytes, cudaMemcpyDeviceToDevice, st->d2h));
    collc_mpicuda_signal<<<1, 1, 0, st->d2h>>>(pair + 2 + (seq & 1), (collc_u64)s->bytes, pair, seq + 1);
    COLLC_CUDA_TRY(cudaGetLastError());
    COLLC_CUDA_TRY(cudaEventRecord(st->events[s->event], st->d2h));
    s->state = COLLC_SEG_IPC_OUT;
    return COLLC_CUDA_OK;
}

/* Receiving segment s: its place in the pair's sequence. */
static inline void collc_mpicuda_ipc_expect(struct collc_mpicuda_ctx *ctx, struct collc_mpicuda_link *l,
                                            struct collc_mpicuda_seg *s)
{
    const struct collc_mpicuda_ipc *ipc = ctx->ipc;
    s->pair = ipc->taken[ipc->local_of[l->peer]]++;
    s->state = COLLC_SEG_IPC_WAIT;
}

/* A received segment s: its size as the sender stored it (-1: not delivered yet, or an earlier segment of the pair
 * has not landed: they land in order, so that the consumed count only grows) and its slot. */
static inline int64_t collc_mpicuda_ipc_arrived(const struct collc_mpicuda_ctx *ctx,
                                                const struct collc_mpicuda_link *l,
                                                const struct collc_mpicuda_seg *s, collc_u8 **slot)
{
    const struct collc_mpicuda_ipc *ipc = ctx->ipc;
    const int peer = ipc->local_of[l->peer];
    const collc_u64 *pair = collc_ipc_pair(ipc->flags, ipc, peer, ipc->me);
    if (s->pair != ipc->landed[peer] || collc_ipc_load(pair) < s->pair + 1) return -1;
    *slot = collc_mpicuda_ipc_slot(ipc, ipc->mailbox, peer, s->pair);
    return (int64_t)collc_ipc_load(pair + 2 + (s->pair & 1));
}

/* Copies a received segment from its slot to `to` on the h2d stream, then frees the slot (a kernel after the
 * copy); the segment's event follows. */
static inline int collc_mpicuda_ipc_land(struct collc_mpicuda_ctx *ctx, const struct collc_mpicuda_link *l,
                                         struct collc_mpicuda_seg *s, collc_u8 *to, const collc_u8 *slot)
{
    struct collc_mpicuda_state *st = ctx->st;
    struct collc_mpicuda_ipc *ipc = ctx->ipc;
    collc_u64 *pair = collc_ipc_pair(ipc->dflags, ipc, ipc->local_of[l->peer], ipc->me);
    ipc->landed[ipc->local_of[l->peer]]++;
    COLLC_CUDA_TRY(cudaMemcpyAsync(to, slot, (size_t)s->bytes, cudaMemcpyDeviceToDevice, st->h2d));
    collc_mpicuda_signal<<<1, 1, 0, st->h2d>>>(NULL, 0, pair + 1, s->pair + 1);
    COLLC_CUDA_TRY(cudaGetLastError());
    COLLC_CUDA_TRY(cudaEventRecord(st->events[s->event], st->h2d));
    s->state = COLLC_SEG_LAND;
    return COLLC_CUDA_OK;
}

#endif /* COLLC_MPICUDA_IPC_CUH */
