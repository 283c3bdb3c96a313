/* mock_cudart.c: a CPU stand-in for the CUDA runtime, to test the cuda target's host driver without a GPU.
 *
 * Built as a shared library with the soname libcudart.so.13 and the runtime's
 * symbol version, it replaces libcudart in a process that loads it first
 * (RTLD_GLOBAL) and then a libcollc_<algorithm>_cuda.so built with
 * `-cudart shared`.  It implements exactly the runtime calls that
 * runtime/collc_cuda.cuh makes, and the launch path of its reduction kernels:
 *
 *   - "device memory" is host memory: cudaMalloc maps a memfd (filled with 0xAB,
 *     shareable with other processes for mock_host.c's CUDA IPC),
 *     copies are memcpy, a launch of collc_reduce_kernel<T, Op> reduces on the
 *     CPU (T and Op read from the kernel's mangled name), and the kernels of
 *     compressed schedules run through mock_codecs.cpp: a codec job item by
 *     item (collc_cuda_job_item, the function the kernel runs), a payload
 *     copy, and the scans (the apply kernel does the whole scan; the reduce
 *     and spine kernels do nothing);
 *   - streams are queues: nothing runs when it is enqueued.  mock_cuda_drain()
 *     runs every queued operation in a random order that respects only what
 *     CUDA guarantees: the order within a stream, and cudaStreamWaitEvent
 *     (which waits for the event's most recent record enqueued before the
 *     wait).  A missing dependency in the driver therefore shows up, for some
 *     seed, as a wrong result; a wait that can never be met as a deadlock;
 *   - the driver's stream memory operations (cuStreamWaitValue32 and
 *     cuStreamWriteValue32, by cudaGetDriverEntryPointByVersion; none with
 *     MOCK_CUDA_MEMOPS=0): a wait runs once its 32-bit word holds the value,
 *     which another process may write, so a drain can stop short of
 *     everything (-2) and the synchronising calls poll until their work is
 *     done;
 *   - devices are numbered 0 .. MOCK_CUDA_DEVICES-1 (default 2).  As on a GPU,
 *     an event must be recorded on a stream of its own device, and a kernel
 *     launched on a stream of the current device; violations fail the call
 *     with cudaErrorInvalidResourceHandle.
 *
 * Not thread-safe; one process, one test.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int cudaError_t;
typedef struct mock_stream *cudaStream_t;
typedef struct mock_event *cudaEvent_t;
typedef const void *cudaKernel_t;
typedef struct {
    unsigned x, y, z;
} dim3;

enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorPeerAccessAlreadyEnabled = 704,
};

/* ---------------------------------------------------------------------------
 * Streams and operations
 * ------------------------------------------------------------------------- */

enum mock_kind { MOCK_COPY, MOCK_REDUCE, MOCK_RECORD, MOCK_WAIT, MOCK_MEMSET, MOCK_JOB, MOCK_PAYLOAD, MOCK_SCAN64,
                 MOCK_SCAN32, MOCK_NOP, MOCK_SIGNAL, MOCK_WAIT_VALUE, MOCK_WRITE_VALUE };

/* mock_codecs.cpp: the codec kernels of runtime/collc_cuda_codec.cuh, on the CPU. */
size_t mock_codec_job_size(void);
void mock_codec_job(const void *job);
void mock_payload_copy(void *to, const void *from);
void mock_scan_u64(void *data, uint64_t count);
void mock_scan_u32(void *data, uint64_t count);

struct mock_op {
    enum mock_kind kind;
    void *dst;
    const void *src;
    size_t bytes;                   /* copies */
    int dtype, op;                  /* reductions: collc_cuda_dtype, collc_cuda_op */
    int64_t n;
    struct mock_stream *wait_on;    /* waits: the stream and position of the awaited record */
    long wait_until;
    void *job;                      /* codec jobs: a copy of the kernel's argument */
};

struct mock_stream {
    int device;
    struct mock_op *ops;
    long nops, cap, done; /* ops[done .. nops-1] are pending */
};

struct mock_event {
    int device;
    struct mock_stream *stream; /* of the most recent record; NULL: never recorded */
    long position;              /* the record is complete when stream->done >= position */
};

enum { MAX_STREAMS = 4096, MAX_DEVICES = 16, MAX_KERNELS = 256 };

static struct mock_stream *streams[MAX_STREAMS];
static int nstreams;
static struct mock_stream *default_stream[MAX_DEVICES];
static int current_device;
static cudaError_t last_error;
static unsigned char peer_enabled[MAX_DEVICES][MAX_DEVICES];
static long executed, launches, peer_copies;

static int ndevices(void)
{
    const char *env = getenv("MOCK_CUDA_DEVICES");
    int n = env != NULL ? atoi(env) : 2;
    return n < 1 ? 1 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

static cudaError_t fail(cudaError_t err)
{
    last_error = err;
    return err;
}

static struct mock_stream *new_stream(int device)
{
    struct mock_stream *s = calloc(1, sizeof *s);
    s->device = device;
    streams[nstreams++] = s;
    return s;
}

static struct mock_stream *stream_of(cudaStream_t s)
{
    if (s != NULL) return s;
    if (default_stream[current_device] == NULL) default_stream[current_device] = new_stream(current_device);
    return default_stream[current_device];
}

static void push(struct mock_stream *s, struct mock_op op)
{
    if (s->nops == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->ops = realloc(s->ops, (size_t)s->cap * sizeof *s->ops);
    }
    s->ops[s->nops++] = op;
}

/* ---------------------------------------------------------------------------
 * The reductions, on the CPU
 * ------------------------------------------------------------------------- */

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    float f;
    if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        f = (float)man * (1.0f / 16777216.0f); /* man * 2^-24 */
        return sign ? -f : f;
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* The float16 nearest to d (ties to even), as the GPU's __hadd and __hmul round. */
static uint16_t double_to_half(double d)
{
    const uint16_t sign = signbit(d) ? 0x8000 : 0;
    double a = fabs(d), ulp, r;
    int e;
    if (isnan(d)) return 0x7e00;
    if (a == 0) return sign;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    e = e - 1 < -14 ? -14 : e - 1;
    ulp = ldexp(1.0, e - 10);
    r = nearbyint(a / ulp) * ulp; /* the default rounding mode: to nearest, ties to even */
    if (r > 65504.0) return sign | 0x7c00;
    if (r < ldexp(1.0, -14)) return sign | (uint16_t)(r / ldexp(1.0, -24)); /* subnormal */
    frexp(r, &e);
    e -= 1;
    return sign | (uint16_t)((e + 15) << 10) | (uint16_t)(r / ldexp(1.0, e - 10) - 1024);
}

static float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (f != f) return 0x7fc0;
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1)) >> 16);
}

/* a op b in double, NaN-propagating for max and min as the kernels are. */
static double apply(int op, double a, double b)
{
    switch (op) {
    case 0: return a + b;
    case 1: return a * b;
    case 2: return (a != a || a > b) ? a : b;
    default: return (a != a || a < b) ? a : b;
    }
}

static void reduce(const struct mock_op *o)
{
    for (int64_t i = 0; i < o->n; i++) {
        switch (o->dtype) {
        case 0: ((float *)o->dst)[i] = (float)apply(o->op, ((float *)o->dst)[i], ((const float *)o->src)[i]); break;
        case 1: ((double *)o->dst)[i] = apply(o->op, ((double *)o->dst)[i], ((const double *)o->src)[i]); break;
        case 2: {
            uint16_t *d = (uint16_t *)o->dst;
            d[i] = double_to_half(apply(o->op, half_to_float(d[i]), half_to_float(((const uint16_t *)o->src)[i])));
            break;
        }
        case 3: {
            uint16_t *d = (uint16_t *)o->dst;
            const uint16_t s = ((const uint16_t *)o->src)[i];
            d[i] = float_to_bf16((float)apply(o->op, bf16_to_float(d[i]), bf16_to_float(s)));
            break;
        }
        case 4: {
            int32_t *d = (int32_t *)o->dst, s = ((const int32_t *)o->src)[i];
            uint32_t a = (uint32_t)d[i], b = (uint32_t)s;
            d[i] = o->op == 0 ? (int32_t)(a + b) : o->op == 1 ? (int32_t)(a * b)
                 : o->op == 2 ? (d[i] > s ? d[i] : s) : (d[i] < s ? d[i] : s);
            break;
        }
        default: {
            int64_t *d = (int64_t *)o->dst, s = ((const int64_t *)o->src)[i];
            uint64_t a = (uint64_t)d[i], b = (uint64_t)s;
            d[i] = o->op == 0 ? (int64_t)(a + b) : o->op == 1 ? (int64_t)(a * b)
                 : o->op == 2 ? (d[i] > s ? d[i] : s) : (d[i] < s ? d[i] : s);
            break;
        }
        }
    }
}

/* ---------------------------------------------------------------------------
 * Running the queues
 * ------------------------------------------------------------------------- */

/* A stream memory wait's condition on its 32-bit word (another process may write it): op 1 equal, 0 at least. */
static int value_reached(const struct mock_op *o)
{
    const uint32_t now = __atomic_load_n((const uint32_t *)o->src, __ATOMIC_ACQUIRE);
    return o->op == 1 ? now == (uint32_t)o->n : now >= (uint32_t)o->n;
}

static int runnable(const struct mock_stream *s)
{
    const struct mock_op *o;
    if (s->done == s->nops) return 0;
    o = &s->ops[s->done];
    if (o->kind == MOCK_WAIT_VALUE) return value_reached(o);
    return o->kind != MOCK_WAIT || o->wait_on->done >= o->wait_until;
}

static void execute(struct mock_stream *s)
{
    struct mock_op *o = &s->ops[s->done];
    switch (o->kind) {
    case MOCK_COPY: memmove(o->dst, o->src, o->bytes); break;
    case MOCK_REDUCE: reduce(o); break;
    case MOCK_MEMSET: memset(o->dst, o->op, o->bytes); break;
    case MOCK_JOB:
        mock_codec_job(o->job);
        free(o->job);
        break;
    case MOCK_PAYLOAD: mock_payload_copy(o->dst, o->src); break;
    case MOCK_SCAN64: mock_scan_u64(o->dst, (uint64_t)o->n); break;
    case MOCK_SCAN32: mock_scan_u32(o->dst, (uint64_t)o->n); break;
    case MOCK_WRITE_VALUE: __atomic_store_n((uint32_t *)o->dst, (uint32_t)o->n, __ATOMIC_RELEASE); break;
    case MOCK_SIGNAL: /* collc_mpicuda_signal: a size word (optional), then a count, for other processes */
        if (o->dst != NULL) __atomic_store_n((uint64_t *)o->dst, (uint64_t)o->n, __ATOMIC_RELEASE);
        __atomic_store_n((uint64_t *)o->src, (uint64_t)o->bytes, __ATOMIC_RELEASE);
        break;
    default: break;
    }
    s->done++;
    executed++;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Runs every queued operation in a random valid order; returns how many ran, -1 on a deadlock, or -2 when what
 * is left waits for a memory word (a stream memory wait: another process may still write it). */
long mock_cuda_drain(unsigned seed)
{
    static int ready[MAX_STREAMS];
    long before = executed;
    if (seed != 0) rng = 0x9e3779b97f4a7c15ull * seed;
    for (;;) {
        int n = 0, pending = 0, on_memory = 0;
        for (int i = 0; i < nstreams; i++) {
            const struct mock_stream *s = streams[i];
            pending |= s->done < s->nops;
            on_memory |= s->done < s->nops && s->ops[s->done].kind == MOCK_WAIT_VALUE;
            if (runnable(s)) ready[n++] = i;
        }
        if (n == 0) return on_memory ? -2 : pending ? -1 : executed - before;
        execute(streams[ready[next_random() % (unsigned)n]]);
    }
}

/* Runs what can run until `done` says so (polling while work waits for another process's writes, for at most
 * 120 s); cudaSuccess, or an error for a deadlock or the time limit. */
static cudaError_t settle(int (*done)(const void *), const void *what)
{
    for (int polls = 0; polls < 1200000; polls++) {
        const long r = mock_cuda_drain(0);
        if (r == -1) return fail(cudaErrorInvalidValue);
        if (r >= 0 || done(what)) return cudaSuccess;
        usleep(100);
    }
    return fail(cudaErrorInvalidValue);
}

static int stream_done(const void *what)
{
    const struct mock_stream *s = what;
    return s->done == s->nops;
}

static int event_done(const void *e)
{
    const struct mock_event *ev = e;
    return ev->stream == NULL || ev->stream->done >= ev->position;
}

static int never(const void *what)
{
    (void)what;
    return 0;
}

/* Whether an event's most recent record has run (cudaEventQuery, cudaEventSynchronize: mock_host.c). */
int mock_cuda_event_done(const struct mock_event *e) { return event_done(e); }

cudaError_t mock_cuda_settle_event(const struct mock_event *e) { return settle(event_done, e); }

cudaError_t mock_cuda_settle_all(void) { return settle(never, NULL); }

/* Kernel launches and cross-device copies so far. */
long mock_cuda_launches(void) { return launches; }
long mock_cuda_peer_copies(void) { return peer_copies; }

/* ---------------------------------------------------------------------------
 * The runtime API
 * ------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = ndevices();
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= ndevices()) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device)
{
    (void)attr;
    if (device < 0 || device >= ndevices()) return fail(cudaErrorInvalidDevice);
    *value = 2;
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    *can = device != peer;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
    (void)flags;
    if (peer_enabled[current_device][peer]) return fail(cudaErrorPeerAccessAlreadyEnabled);
    peer_enabled[current_device][peer] = 1;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

const char *cudaGetErrorString(cudaError_t err)
{
    static char text[64];
    snprintf(text, sizeof text, "mock error %d", err);
    return text;
}

const char *cudaGetErrorName(cudaError_t err)
{
    return err == cudaErrorInvalidResourceHandle ? "cudaErrorInvalidResourceHandle" : "cudaErrorMock";
}

/* Device allocations: each a memfd mapped shared, so that another process can map it (mock_host.c's IPC). */
struct mock_alloc {
    void *ptr;
    size_t bytes;
    int fd;
};
static struct mock_alloc *allocs;
static int nallocs, cap_allocs;

/* The allocation holding `ptr`: its memfd, the offset of ptr in it and its size; -1 when there is none. */
int mock_cuda_alloc_of(const void *ptr, int *fd, size_t *offset, size_t *bytes)
{
    for (int i = 0; i < nallocs; i++) {
        const char *lo = allocs[i].ptr;
        if ((const char *)ptr >= lo && (const char *)ptr < lo + allocs[i].bytes) {
            if (allocs[i].fd < 0) return -1;
            *fd = allocs[i].fd;
            *offset = (size_t)((const char *)ptr - lo);
            *bytes = allocs[i].bytes;
            return 0;
        }
    }
    return -1;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes)
{
    const size_t size = bytes ? bytes : 1;
    const int fd = memfd_create("mock-cuda", MFD_CLOEXEC);
    void *at = MAP_FAILED;
    *ptr = NULL;
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0) at = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    else if (fd < 0) /* out of descriptors: private memory, which IPC refuses */
        at = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) {
        if (fd >= 0) close(fd);
        return fail(cudaErrorMemoryAllocation);
    }
    if (nallocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 64;
        allocs = realloc(allocs, (size_t)cap_allocs * sizeof *allocs);
    }
    allocs[nallocs++] = (struct mock_alloc){at, size, fd};
    memset(at, 0xAB, size);
    *ptr = at;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    if (settle(never, NULL) != cudaSuccess) return fail(cudaErrorInvalidValue); /* cudaFree synchronizes */
    if (ptr == NULL) return cudaSuccess;
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].ptr == ptr) {
            munmap(allocs[i].ptr, allocs[i].bytes);
            if (allocs[i].fd >= 0) close(allocs[i].fd);
            allocs[i] = allocs[--nallocs];
            return cudaSuccess;
        }
    return fail(cudaErrorInvalidValue);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags)
{
    (void)flags;
    if (nstreams == MAX_STREAMS) return fail(cudaErrorMemoryAllocation);
    *stream = new_stream(current_device);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    stream->device = -1; /* kept in the list: its operations have run (cudaStreamSynchronize first) */
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    return settle(stream_done, stream_of(stream));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags)
{
    (void)flags;
    *event = calloc(1, sizeof **event);
    (*event)->device = current_device;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    free(event);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    struct mock_stream *s = stream_of(stream);
    struct mock_op op = {MOCK_RECORD, NULL, NULL, 0, 0, 0, 0, NULL, 0, NULL};
    if (s->device != event->device) return fail(cudaErrorInvalidResourceHandle);
    push(s, op);
    event->stream = s;
    event->position = s->nops;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags)
{
    struct mock_stream *s = stream_of(stream);
    struct mock_op op = {MOCK_WAIT, NULL, NULL, 0, 0, 0, 0, event->stream, event->position, NULL};
    (void)flags;
    if (event->stream != NULL) push(s, op);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, int kind, cudaStream_t stream)
{
    struct mock_op op = {MOCK_COPY, dst, src, bytes, 0, 0, 0, NULL, 0, NULL};
    (void)kind;
    push(stream_of(stream), op);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream)
{
    struct mock_op op = {MOCK_MEMSET, dst, NULL, bytes, 0, value & 0xFF, 0, NULL, 0, NULL};
    push(stream_of(stream), op);
    return cudaSuccess;
}

/* Synchronous: everything queued runs first. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, int kind)
{
    (void)kind;
    /* after the work queued on the legacy default stream; the non-blocking streams need not end */
    if (settle(stream_done, stream_of(NULL)) != cudaSuccess) return fail(cudaErrorInvalidValue);
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device, size_t bytes,
                                cudaStream_t stream)
{
    struct mock_op op = {MOCK_COPY, dst, src, bytes, 0, 0, 0, NULL, 0, NULL};
    if (dst_device == src_device) return fail(cudaErrorInvalidValue);
    peer_copies++;
    push(stream_of(stream), op);
    return cudaSuccess;
}

/* ---------------------------------------------------------------------------
 * What nvcc's launch stubs call
 * ------------------------------------------------------------------------- */

static struct {
    const void *host;
    const char *name;
} kernels[MAX_KERNELS];
static int nkernels;
static dim3 config_grid, config_block;
static size_t config_shared;
static cudaStream_t config_stream;

void **__cudaRegisterFatBinary(void *fat)
{
    static void *handle;
    handle = fat;
    return &handle;
}

void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

void __cudaRegisterFunction(void **handle, const char *host, char *device_fun, const char *device_name, int limit,
                            void *tid, void *bid, void *bdim, void *gdim, int *wsize)
{
    (void)handle, (void)device_name, (void)limit, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
    if (nkernels < MAX_KERNELS) {
        kernels[nkernels].host = host;
        kernels[nkernels].name = device_fun;
        nkernels++;
    }
}

cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *host)
{
    *kernel = host;
    return cudaSuccess;
}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, cudaStream_t stream)
{
    config_grid = grid;
    config_block = block;
    config_shared = shared;
    config_stream = stream;
    return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, void *stream)
{
    *grid = config_grid;
    *block = config_block;
    *shared = config_shared;
    *(cudaStream_t *)stream = config_stream;
    return cudaSuccess;
}

/* collc_reduce_kernel<T, Op>'s element type and op, from its mangled name; -1 when it is not one. */
static int kernel_of(const void *host, int *op)
{
    static const char prefix[] = "_Z19collc_reduce_kernelI";
    static const char *const types[] = {"f", "d", "6__half", "13__nv_bfloat16", "i", "l"}; /* collc_cuda_dtype order */
    static const char *const ops[] = {"collc_op_sum", "collc_op_prod", "collc_op_max", "collc_op_min"};
    for (int k = 0; k < nkernels; k++) {
        const char *name = kernels[k].name, *type = name + sizeof prefix - 1;
        if (kernels[k].host != host) continue;
        if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
        for (int o = 0; o < 4; o++)
            if (strstr(type, ops[o]) != NULL) *op = o;
        for (int t = 0; t < 6; t++)
            if (strncmp(type, types[t], strlen(types[t])) == 0) return t;
        return -1;
    }
    return -1;
}

/* The registered name of a kernel's host stub; NULL when it was not registered. */
static const char *name_of(const void *host)
{
    for (int k = 0; k < nkernels; k++)
        if (kernels[k].host == host) return kernels[k].name;
    return NULL;
}

/* The codec kernels (extern "C": their names are plain); 0 when `name` is not one. */
static int codec_kernel(const char *name, void **args, struct mock_op *op)
{
    if (strcmp(name, "collc_cuda_job_kernel") == 0) {
        op->kind = MOCK_JOB;
        op->job = malloc(mock_codec_job_size());
        memcpy(op->job, args[0], mock_codec_job_size());
    } else if (strcmp(name, "collc_cuda_payload_copy") == 0) {
        op->kind = MOCK_PAYLOAD;
        op->dst = *(void **)args[0];
        op->src = *(const void **)args[1];
    } else if (strcmp(name, "collc_scan_u64_apply") == 0 || strcmp(name, "collc_scan_u32_apply") == 0) {
        op->kind = name[12] == '6' ? MOCK_SCAN64 : MOCK_SCAN32;
        op->dst = *(void **)args[0];
        op->n = (int64_t) * (const uint64_t *)args[1];
    } else if (strncmp(name, "collc_scan_u", 12) == 0) {
        op->kind = MOCK_NOP; /* reduce, spine: the apply kernel scans */
    } else if (strcmp(name, "collc_mpicuda_signal") == 0) {
        op->kind = MOCK_SIGNAL;
        op->dst = *(void **)args[0];
        op->n = (int64_t) * (const uint64_t *)args[1];
        op->src = *(const void **)args[2];
        op->bytes = (size_t) * (const uint64_t *)args[3];
    } else {
        return 0;
    }
    return 1;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args, size_t shared,
                               cudaStream_t stream)
{
    struct mock_stream *s = stream_of(stream);
    struct mock_op op = {MOCK_REDUCE, NULL, NULL, 0, 0, 0, 0, NULL, 0, NULL};
    const char *name = name_of(kernel);
    (void)shared;
    if (grid.x < 1 || block.x < 1 || name == NULL) return fail(cudaErrorInvalidValue);
    if (s->device != current_device) return fail(cudaErrorInvalidResourceHandle);
    if (!codec_kernel(name, args, &op)) {
        op.dtype = kernel_of(kernel, &op.op);
        if (op.dtype < 0) return fail(cudaErrorInvalidValue);
        op.dst = *(void **)args[0];
        op.src = *(const void **)args[1];
        op.n = *(const int64_t *)args[2];
    }
    launches++;
    push(s, op);
    return cudaSuccess;
}

/* ---------------------------------------------------------------------------
 * Stream memory operations (the driver's cuStreamWaitValue32 / cuStreamWriteValue32, by entry point)
 * ------------------------------------------------------------------------- */

static int mock_wait_value32(cudaStream_t stream, unsigned long long addr, unsigned value, unsigned flags)
{
    struct mock_op op = {MOCK_WAIT_VALUE, NULL, (const void *)(uintptr_t)addr, 0, 0, (int)(flags & 1u), value,
                         NULL, 0, NULL};
    if (flags > 1u) return 1; /* only GEQ and EQ */
    push(stream_of(stream), op);
    return 0;
}

static int mock_write_value32(cudaStream_t stream, unsigned long long addr, unsigned value, unsigned flags)
{
    struct mock_op op = {MOCK_WRITE_VALUE, (void *)(uintptr_t)addr, NULL, 0, 0, 0, value, NULL, 0, NULL};
    if (flags != 0) return 1;
    push(stream_of(stream), op);
    return 0;
}

/* MOCK_CUDA_MEMOPS=0: a driver without them. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags, int *status)
{
    const char *env = getenv("MOCK_CUDA_MEMOPS");
    (void)version, (void)flags;
    *fn = NULL;
    if (env == NULL || strcmp(env, "0") != 0) {
        if (strcmp(symbol, "cuStreamWaitValue32") == 0) *fn = (void *)mock_wait_value32;
        if (strcmp(symbol, "cuStreamWriteValue32") == 0) *fn = (void *)mock_write_value32;
    }
    if (status != NULL) *status = *fn != NULL ? 0 : 1; /* cudaDriverEntryPointSuccess, ...SymbolNotFound */
    return cudaSuccess;
}
