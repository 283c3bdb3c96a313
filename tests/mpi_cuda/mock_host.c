/* mock_host.c: the CUDA runtime calls of the mpi-cuda executor and its driver that tests/cuda/mock_cudart.c lacks.
 *
 * Linked into the same libcudart.so.13 stand-in as mock_cudart.c.  Host code
 * waits for the GPU here: a query or a synchronisation runs every queued
 * operation (mock_cuda_drain, in a random order that CUDA's stream and event
 * rules allow), so an event is complete when asked about, unless the queued
 * work can never finish (a deadlock, reported as an error).  Pinned host
 * memory is plain host memory, and so is mapped memory (its device pointer is
 * itself).  CUDA IPC maps the memfd behind a peer's allocation (mock_cudart.c)
 * through /proc/<pid>/fd: the handle holds the pid, the fd, the offset and
 * the size.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int cudaError_t;
typedef struct mock_event *cudaEvent_t;
typedef struct mock_stream *cudaStream_t;

enum { mock_success = 0, mock_invalid_value = 1, mock_allocation = 2, mock_not_ready = 600 };

long mock_cuda_drain(unsigned seed);
int mock_cuda_alloc_of(const void *ptr, int *fd, size_t *offset, size_t *bytes);

typedef struct {
    char reserved[64];
} cudaIpcMemHandle_t;

struct mock_ipc {
    long pid;
    int fd;
    uint64_t offset, bytes;
};

/* What this process opened: the mapping's start and size, for the close. */
static struct {
    void *base;
    size_t bytes;
} opened[256];

int mock_cuda_event_done(const struct mock_event *e);
cudaError_t mock_cuda_settle_event(const struct mock_event *e);
cudaError_t mock_cuda_settle_all(void);

/* Runs what can run; then the event is complete, or not yet when queued work waits for another process. */
cudaError_t cudaEventQuery(cudaEvent_t event)
{
    if (mock_cuda_drain(0) == -1) return mock_invalid_value;
    return mock_cuda_event_done(event) ? mock_success : mock_not_ready;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) { return mock_cuda_settle_event(event); }

cudaError_t cudaDeviceSynchronize(void) { return mock_cuda_settle_all(); }

cudaError_t cudaMallocHost(void **ptr, size_t bytes)
{
    *ptr = malloc(bytes ? bytes : 1);
    if (*ptr == NULL) return mock_allocation;
    memset(*ptr, 0xCD, bytes);
    return mock_success;
}

cudaError_t cudaFreeHost(void *ptr)
{
    free(ptr);
    return mock_success;
}

cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned flags)
{
    (void)ptr, (void)bytes, (void)flags;
    return mock_success;
}

cudaError_t cudaHostUnregister(void *ptr)
{
    (void)ptr;
    return mock_success;
}

cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned flags)
{
    (void)flags;
    *device = host;
    return mock_success;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *ptr)
{
    struct mock_ipc h;
    size_t offset = 0, bytes = 0;
    int fd = -1;
    if (mock_cuda_alloc_of(ptr, &fd, &offset, &bytes) != 0) return mock_invalid_value;
    h.pid = (long)getpid();
    h.fd = fd;
    h.offset = offset;
    h.bytes = bytes;
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &h, sizeof h);
    return mock_success;
}

cudaError_t cudaIpcOpenMemHandle(void **ptr, cudaIpcMemHandle_t handle, unsigned flags)
{
    struct mock_ipc h;
    char path[64];
    void *at;
    int fd, slot = 0;
    (void)flags;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.pid == (long)getpid()) return mock_invalid_value; /* as CUDA: not in the process that made it */
    while (slot < 256 && opened[slot].base != NULL) slot++;
    if (slot == 256) return mock_allocation;
    snprintf(path, sizeof path, "/proc/%ld/fd/%d", h.pid, h.fd);
    if ((fd = open(path, O_RDWR)) < 0) return mock_invalid_value;
    at = mmap(NULL, (size_t)h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (at == MAP_FAILED) return mock_allocation;
    opened[slot].base = at;
    opened[slot].bytes = (size_t)h.bytes;
    *ptr = (char *)at + h.offset;
    return mock_success;
}

cudaError_t cudaIpcCloseMemHandle(void *ptr)
{
    for (int k = 0; k < 256; k++)
        if (opened[k].base != NULL && (char *)ptr >= (char *)opened[k].base &&
            (char *)ptr < (char *)opened[k].base + opened[k].bytes) {
            munmap(opened[k].base, opened[k].bytes);
            opened[k].base = NULL;
            return mock_success;
        }
    return mock_invalid_value;
}

/* Nothing is ever captured into a graph here. */
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, int *status)
{
    (void)stream;
    *status = 0; /* cudaStreamCaptureStatusNone */
    return mock_success;
}
