/* collc_cuda_state.cuh: what the cuda executor keeps from call to call (see collc_cuda.cuh).
 *
 * Included by collc_cuda.cuh.  Per rank: its device, stream, `sent` and
 * `done` events, library-owned scratch space and the device word where codecs
 * note a refusal; per device: the `start` event that orders a call after the
 * caller's stream; and which peer accesses were tried.  Created at the first
 * call, re-created when a rank moves to another device, freed by
 * collc_cuda_release_all().
 */
#ifndef COLLC_CUDA_STATE_CUH
#define COLLC_CUDA_STATE_CUH

static struct collc_cuda_state collc_cuda_kept;

/* Destroys what rank r holds (waiting for its stream first). */
static inline void collc_cuda_drop_rank(struct collc_cuda_rank *r)
{
    if (r->device < 0) return;
    cudaSetDevice(r->device);
    cudaStreamSynchronize(r->stream);
    cudaStreamDestroy(r->stream);
    cudaEventDestroy(r->sent);
    cudaEventDestroy(r->done);
    cudaFree(r->scratch);
    cudaFree(r->bad);
    memset(r, 0, sizeof *r);
    r->device = -1;
}

/* Frees everything the library keeps; the next call starts afresh. */
static inline void collc_cuda_release_all(void)
{
    struct collc_cuda_state *st = &collc_cuda_kept;
    int device = 0;
    if (st->ranks == NULL) return;
    cudaGetDevice(&device);
    for (int r = 0; r < st->nranks; r++)
        collc_cuda_drop_rank(&st->ranks[r]);
    for (int d = 0; d < st->ndevices; d++)
        if (st->start[d] != NULL) cudaEventDestroy(st->start[d]);
    free(st->ranks);
    free(st->start);
    free(st->peers);
    memset(st, 0, sizeof *st);
    cudaSetDevice(device);
}

/* Rank r's stream and events on `device`. */
static inline int collc_cuda_place_rank(struct collc_cuda_rank *r, int device)
{
    int sms = 0;
    collc_cuda_drop_rank(r);
    COLLC_CUDA_TRY(cudaSetDevice(device));
    r->device = device;
    COLLC_CUDA_TRY(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    COLLC_CUDA_TRY(cudaEventCreateWithFlags(&r->sent, cudaEventDisableTiming));
    COLLC_CUDA_TRY(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    COLLC_CUDA_TRY(cudaMalloc((void **)&r->bad, sizeof *r->bad));
    COLLC_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    r->max_blocks = 4 * (sms > 0 ? sms : 1);
    return COLLC_CUDA_OK;
}

/* Lets device a read and write device b's memory directly, where the hardware allows it. */
static inline int collc_cuda_enable_peer(struct collc_cuda_state *st, int a, int b)
{
    int can = 0;
    cudaError_t err;
    if (a == b || st->peers[a * st->ndevices + b]) return COLLC_CUDA_OK;
    st->peers[a * st->ndevices + b] = 1;
    COLLC_CUDA_TRY(cudaDeviceCanAccessPeer(&can, a, b));
    if (!can) return COLLC_CUDA_OK; /* cudaMemcpyPeerAsync then stages through the host */
    COLLC_CUDA_TRY(cudaSetDevice(a));
    err = cudaDeviceEnablePeerAccess(b, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError(); /* enabled by someone else: fine */
    else COLLC_CUDA_TRY(err);
    return COLLC_CUDA_OK;
}

/* The kept state for p ranks placed on device_of_rank (NULL: every rank on `device`). */
static inline int collc_cuda_prepare(struct collc_cuda_state *st, int p, const int *device_of_rank, int device)
{
    int ndevices = 0, err;
    COLLC_CUDA_TRY(cudaGetDeviceCount(&ndevices));
    if (st->ranks == NULL) {
        st->nranks = p;
        st->ndevices = ndevices;
        st->ranks = (struct collc_cuda_rank *)calloc((size_t)p, sizeof *st->ranks);
        st->start = (cudaEvent_t *)calloc((size_t)ndevices, sizeof *st->start);
        st->peers = (unsigned char *)calloc((size_t)ndevices * (size_t)ndevices, 1);
        if (st->ranks == NULL || st->start == NULL || st->peers == NULL) {
            free(st->ranks);
            free(st->start);
            free(st->peers);
            memset(st, 0, sizeof *st);
            return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory");
        }
        for (int r = 0; r < p; r++)
            st->ranks[r].device = -1;
    }
    for (int r = 0; r < p; r++) {
        int want = device_of_rank != NULL ? device_of_rank[r] : device;
        if (want < 0 || want >= ndevices)
            return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "device_of_rank[%d] = %d: there are %d device(s)", r, want,
                                   ndevices);
        if (st->ranks[r].device != want && (err = collc_cuda_place_rank(&st->ranks[r], want)) != COLLC_CUDA_OK)
            return err;
    }
    for (int a = 0; a < p; a++)
        for (int b = 0; b < p; b++)
            if ((err = collc_cuda_enable_peer(st, st->ranks[a].device, st->ranks[b].device)) != COLLC_CUDA_OK)
                return err;
    if (st->start[device] == NULL) {
        COLLC_CUDA_TRY(cudaSetDevice(device));
        COLLC_CUDA_TRY(cudaEventCreateWithFlags(&st->start[device], cudaEventDisableTiming));
    }
    return COLLC_CUDA_OK;
}

#endif /* COLLC_CUDA_STATE_CUH */
