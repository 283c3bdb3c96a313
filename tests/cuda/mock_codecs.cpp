// mock_codecs.cpp: the codec kernels of runtime/collc_cuda_codec.cuh on the CPU, for mock_cudart.c.
//
// A codec job runs item by item through collc_cuda_job_item, the function the
// job kernel runs on the GPU; a payload copy copies the slot's size word and
// payload; the scans are sequential (exclusive for u64 offsets, inclusive and
// wrapping for lossless words).  Build with -ffp-contract=off, as the codec
// host harness is (codecs_host.cpp).
#include <collc_cuda_codec.cuh>

#include <cstddef>
#include <cstdint>
#include <cstring>

extern "C" {

size_t mock_codec_job_size(void) { return sizeof(struct collc_cuda_job); }

void mock_codec_job(const void* job) {
    const struct collc_cuda_job* j = static_cast<const struct collc_cuda_job*>(job);
    for (collc_u64 i = 0; i < j->items; ++i) collc_cuda_job_item(j, i);
}

void mock_payload_copy(void* to, const void* from) {
    collc_u64 size;
    std::memcpy(&size, from, sizeof size);
    std::memmove(to, from, COLLC_CUDA_SLOT_HEADER + size);
}

void mock_scan_u64(void* data, uint64_t count) {
    collc_u64* d = static_cast<collc_u64*>(data);
    collc_u64 sum = 0;
    for (uint64_t i = 0; i < count; ++i) {
        const collc_u64 v = d[i];
        d[i] = sum;
        sum += v;
    }
}

void mock_scan_u32(void* data, uint64_t count) {
    collc_u32* d = static_cast<collc_u32*>(data);
    collc_u32 sum = 0;
    for (uint64_t i = 0; i < count; ++i) d[i] = sum += d[i];
}

}  // extern "C"
