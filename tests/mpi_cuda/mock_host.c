/* mock_host.c: the CUDA runtime calls of the mpi-cuda executor and its driver that tests/cuda/mock_cudart.c lacks.
 *
 * Linked into the same libcudart.so.13 stand-in as mock_cudart.c.  Host code
 * waits for the GPU here: a query or a synchronisation runs every queued
 * operation (mock_cuda_drain, in a random order that CUDA's stream and event
 * rules allow), so an event is complete when asked about, unless the queued
 * work can never finish (a deadlock, reported as an error).  Pinned host
 * memory is plain host memory.
 */
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
typedef struct mock_event *cudaEvent_t;
typedef struct mock_stream *cudaStream_t;

enum { mock_success = 0, mock_invalid_value = 1, mock_allocation = 2 };

long mock_cuda_drain(unsigned seed);

static cudaError_t drained(void)
{
    return mock_cuda_drain(0) < 0 ? mock_invalid_value : mock_success;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    (void)event;
    return drained();
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    (void)event;
    return drained();
}

cudaError_t cudaDeviceSynchronize(void) { return drained(); }

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
