/* collc codecs: CUDA kernels, bit-exact with the numpy references in collc/codecs/.
 *
 * Header-only.  Generated CUDA code includes it; CuPy's RawModule compiles it
 * through NVRTC; a plain C++ compiler sees only the host/device functions
 * (tests/cuda/codecs_host.cpp runs them on the CPU against numpy).  The per-item
 * functions are in collc_codecs.h (plain C, shared with the mpi-c runtime, which
 * runs them on the CPU); this header adds the C++ decoders and the kernels.
 *
 * Structure: every kernel is a thin wrapper that computes its thread index and
 * calls a COLLC_HD "..._one" function doing all the work for one item (a block,
 * a group, an element).  The same functions run on the host in the test
 * harness, so the arithmetic the kernels perform is the arithmetic that is
 * compared with numpy bit for bit.
 *
 * Bit-exactness rules:
 *  - float arithmetic goes through collc_fmul / collc_fadd / collc_fdiv, which are
 *    __fmul_rn / __fadd_rn / __fdiv_rn on the device: IEEE round-to-nearest, never
 *    contracted into an FMA whatever -fmad says, never approximated; the host side
 *    is plain IEEE float arithmetic (compile host code with -ffp-contract=off);
 *  - floorf, rintf, fabsf and int <-> float conversions are exact on both sides;
 *  - do not build with --use_fast_math or -ftz=true: fwq handles subnormal inputs
 *    (nvcc's and NVRTC's defaults are -ftz=false, IEEE division);
 *  - everything else is integer arithmetic.
 *
 * Launching (all pointers are device pointers; payload buffers 4-byte aligned):
 *  - "item" kernels take one thread per item, any 1-D launch covering the items:
 *      ebq: nb + 1 items for *_sizes (item nb writes the trailing zero), nb for
 *           *_body, nb = ceil(n / 32) blocks;
 *      fwq: ceil(n / block) blocks;  hq, fp16, bf16: n elements;
 *      lossless: G + 1 groups for *_sizes, G for the others, G = ceil(n / 32).
 *  - variable-size payloads (ebq, lossless) are written in two passes: *_sizes
 *    stores each item's body size in bytes into sizes[0..items] (sizes[items] = 0),
 *    an exclusive scan turns that array into offsets in place (offsets[items] is
 *    the total body size), then *_body writes at those offsets.  The scan:
 *      tiles = ceil((items + 1) / COLLC_SCAN_TILE)
 *      collc_scan_u64_reduce<<<tiles, COLLC_SCAN_THREADS>>>(sizes, items + 1, partials)
 *      collc_scan_u64_spine<<<1, COLLC_SCAN_THREADS>>>(partials, tiles)
 *      collc_scan_u64_apply<<<tiles, COLLC_SCAN_THREADS>>>(sizes, items + 1, partials)
 *    (cupy.cumsum gives the same offsets).
 *  - refusals: kernels that can refuse a value take `unsigned long long* bad`,
 *    which the host sets to COLLC_NONE (all ones) before the launch; afterwards it
 *    holds the smallest refused index, as numpy's CodecValueError.index.
 *  - lossless decode writes deltas; an inclusive uint32 scan (collc_scan_u32_*,
 *    wrapping) turns them into the words.
 *
 * Defining COLLC_CODECS_NO_KERNELS leaves out the per-codec kernels (the scans
 * stay): the cuda executor runs the same functions through its own job kernel
 * (collc_cuda_codec.cuh).
 */
#ifndef COLLC_CODECS_CUH
#define COLLC_CODECS_CUH

#include "collc_codecs.h" /* the per-item functions, shared with the mpi-c runtime */

#if defined(__CUDACC__)
#define COLLC_HD __host__ __device__ inline
#else
#define COLLC_HD inline
#endif

/* ------------------------------------------------------------------ C++ decoders (any `put`) */

/* Stores decoded values: the `put` of the *_decode_block functions below. */
struct collc_store_f32 {
    float* out;
    COLLC_HD void operator()(collc_u64 i, float v) const { out[i] = v; }
};

/* Decodes block b, handing each value to put(index, value). */
template <typename Put>
COLLC_HD void collc_ebq_decode_block(const collc_u8* payload, collc_u64 n, float step, const collc_u64* offsets,
                                     collc_u64 b, Put put) {
    collc_u64 nb = collc_div_up(n, 32);
    collc_i32 q[32];
    collc_ebq_unpack((const collc_u32*)(payload + collc_align4(nb) + offsets[b]), payload[b], q);
    for (int j = 0; j < 32; ++j) {
        collc_u64 i = b * 32 + j;
        if (i < n) put(i, collc_grid_dequantize(q[j], step));
    }
}

COLLC_HD void collc_ebq_decode_body_one(const collc_u8* payload, collc_u64 n, float step, const collc_u64* offsets,
                                        float* out, collc_u64 b) {
    collc_ebq_decode_block(payload, n, step, offsets, b, collc_store_f32{out});
}

/* Decodes block b, handing each value to put(index, value). */
template <typename Put>
COLLC_HD void collc_fwq_decode_block(const collc_u8* in, collc_u64 n, int bits, int block, collc_u64 b, Put put) {
    const collc_u64 base = b * (collc_u64)block;
    float scale;
    collc_fwq_reader r = collc_fwq_open(in, bits, block, b, &scale);
    for (int j = 0; j < block; ++j) {
        collc_i32 q = collc_fwq_next(&r);
        if (base + j < n) put(base + j, collc_fmul((float)q, scale));
    }
}

COLLC_HD void collc_fwq_decode_one(const collc_u8* in, collc_u64 n, int bits, int block, float* out, collc_u64 b) {
    collc_fwq_decode_block(in, n, bits, block, b, collc_store_f32{out});
}

/* ------------------------------------------------------------------ kernels */

#define COLLC_SCAN_THREADS 256
#define COLLC_SCAN_ITEMS 16
#define COLLC_SCAN_TILE (COLLC_SCAN_THREADS * COLLC_SCAN_ITEMS)

#if defined(__CUDACC__)

__device__ inline collc_u64 collc_thread_index() { return (collc_u64)blockIdx.x * blockDim.x + threadIdx.x; }

__device__ inline void collc_note_bad(collc_u64* bad, collc_u64 index) {
    if (index != COLLC_NONE) atomicMin(bad, index);
}

/* Exclusive scan over the CTA (blockDim.x == COLLC_SCAN_THREADS); *total gets the CTA's sum. */
template <typename T>
__device__ T collc_cta_exclusive_scan(T v, T* total) {
    __shared__ T buf[COLLC_SCAN_THREADS];
    const unsigned t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (unsigned off = 1; off < COLLC_SCAN_THREADS; off <<= 1) {
        T add = t >= off ? buf[t - off] : (T)0;
        __syncthreads();
        buf[t] += add;
        __syncthreads();
    }
    T inclusive = buf[t];
    *total = buf[COLLC_SCAN_THREADS - 1];
    __syncthreads();
    return inclusive - v;
}

template <typename T>
__device__ void collc_scan_reduce_tile(const T* data, collc_u64 count, T* partials) {
    const collc_u64 first = (collc_u64)blockIdx.x * COLLC_SCAN_TILE + (collc_u64)threadIdx.x * COLLC_SCAN_ITEMS;
    T s = 0;
    for (int k = 0; k < COLLC_SCAN_ITEMS; ++k)
        if (first + k < count) s += data[first + k];
    T total;
    collc_cta_exclusive_scan<T>(s, &total);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/* One CTA: exclusive scan of the tile sums, in place. */
template <typename T>
__device__ void collc_scan_spine_tiles(T* partials, collc_u64 ntiles) {
    T carry = 0;
    for (collc_u64 base = 0; base < ntiles; base += COLLC_SCAN_TILE) {
        const collc_u64 first = base + (collc_u64)threadIdx.x * COLLC_SCAN_ITEMS;
        T vals[COLLC_SCAN_ITEMS];
        T s = 0;
        for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
            vals[k] = first + k < ntiles ? partials[first + k] : (T)0;
            s += vals[k];
        }
        T total;
        T prefix = collc_cta_exclusive_scan<T>(s, &total) + carry;
        for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
            if (first + k < ntiles) partials[first + k] = prefix;
            prefix += vals[k];
        }
        carry += total;
    }
}

template <typename T, bool Inclusive>
__device__ void collc_scan_apply_tile(T* data, collc_u64 count, const T* partials) {
    const collc_u64 first = (collc_u64)blockIdx.x * COLLC_SCAN_TILE + (collc_u64)threadIdx.x * COLLC_SCAN_ITEMS;
    T vals[COLLC_SCAN_ITEMS];
    T s = 0;
    for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
        vals[k] = first + k < count ? data[first + k] : (T)0;
        s += vals[k];
    }
    T total;
    T prefix = collc_cta_exclusive_scan<T>(s, &total) + partials[blockIdx.x];
    for (int k = 0; k < COLLC_SCAN_ITEMS; ++k) {
        if (Inclusive) prefix += vals[k];
        if (first + k < count) data[first + k] = prefix;
        if (!Inclusive) prefix += vals[k];
    }
}

extern "C" {

/* Scans (launch with COLLC_SCAN_THREADS threads per CTA; see the top of this file). */
__global__ void collc_scan_u64_reduce(const collc_u64* data, collc_u64 count, collc_u64* partials) {
    collc_scan_reduce_tile<collc_u64>(data, count, partials);
}
__global__ void collc_scan_u64_spine(collc_u64* partials, collc_u64 ntiles) {
    collc_scan_spine_tiles<collc_u64>(partials, ntiles);
}
__global__ void collc_scan_u64_apply(collc_u64* data, collc_u64 count, const collc_u64* partials) {
    collc_scan_apply_tile<collc_u64, false>(data, count, partials);
}
__global__ void collc_scan_u32_reduce(const collc_u32* data, collc_u64 count, collc_u32* partials) {
    collc_scan_reduce_tile<collc_u32>(data, count, partials);
}
__global__ void collc_scan_u32_spine(collc_u32* partials, collc_u64 ntiles) {
    collc_scan_spine_tiles<collc_u32>(partials, ntiles);
}
/* Inclusive, wrapping mod 2**32: lossless deltas -> words. */
__global__ void collc_scan_u32_apply(collc_u32* data, collc_u64 count, const collc_u32* partials) {
    collc_scan_apply_tile<collc_u32, true>(data, count, partials);
}

#if !defined(COLLC_CODECS_NO_KERNELS)
/* ebq */
__global__ void collc_ebq_encode_sizes(const float* x, collc_u64 n, float inv2eb, collc_u8* payload, collc_u64* sizes,
                                       collc_u64* bad) {
    collc_u64 b = collc_thread_index();
    if (b <= collc_div_up(n, 32)) collc_note_bad(bad, collc_ebq_encode_sizes_one(x, n, inv2eb, payload, sizes, b));
}
__global__ void collc_ebq_encode_body(const float* x, collc_u64 n, float inv2eb, collc_u8* payload,
                                      const collc_u64* offsets) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, 32)) collc_ebq_encode_body_one(x, n, inv2eb, payload, offsets, b);
}
__global__ void collc_ebq_decode_sizes(const collc_u8* payload, collc_u64 n, collc_u64* sizes) {
    collc_u64 b = collc_thread_index();
    if (b <= collc_div_up(n, 32)) collc_ebq_decode_sizes_one(payload, n, sizes, b);
}
__global__ void collc_ebq_decode_body(const collc_u8* payload, collc_u64 n, float step, const collc_u64* offsets,
                                      float* out) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, 32)) collc_ebq_decode_body_one(payload, n, step, offsets, out, b);
}
/* Fused decompress + sum + compress: out = ebq(decode(in) + local).  in_offsets come from
 * collc_ebq_decode_sizes + scan on `in`; out_sizes is scanned between the two launches. */
__global__ void collc_ebq_reduce_sizes(const collc_u8* in, const collc_u64* in_offsets, const float* local,
                                       collc_u64 n, float step, float inv2eb, collc_u8* out, collc_u64* out_sizes,
                                       collc_u64* bad) {
    collc_u64 b = collc_thread_index();
    if (b <= collc_div_up(n, 32))
        collc_note_bad(bad, collc_ebq_reduce_sizes_one(in, in_offsets, local, n, step, inv2eb, out, out_sizes, b));
}
__global__ void collc_ebq_reduce_body(const collc_u8* in, const collc_u64* in_offsets, const float* local,
                                      collc_u64 n, float step, float inv2eb, collc_u8* out,
                                      const collc_u64* out_offsets, float* sum_out) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, 32))
        collc_ebq_reduce_body_one(in, in_offsets, local, n, step, inv2eb, out, out_offsets, sum_out, b);
}

/* fwq */
__global__ void collc_fwq_encode(const float* x, collc_u64 n, int bits, int block, collc_u8* out, collc_u64* bad) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, (collc_u64)block)) collc_note_bad(bad, collc_fwq_encode_one(x, n, bits, block, out, b));
}
__global__ void collc_fwq_decode(const collc_u8* in, collc_u64 n, int bits, int block, float* out) {
    collc_u64 b = collc_thread_index();
    if (b < collc_div_up(n, (collc_u64)block)) collc_fwq_decode_one(in, n, bits, block, out, b);
}

/* hq */
__global__ void collc_hq_encode(const float* x, collc_u64 n, float inv2eb, collc_i32* out, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_hq_encode_one(x, inv2eb, out, i));
}
__global__ void collc_hq_decode(const collc_i32* in, collc_u64 n, float step, float* out) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_hq_decode_one(in, step, out, i);
}
__global__ void collc_hq_add(const collc_i32* a, const collc_i32* b, collc_i32* out, collc_u64 n, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_hq_add_one(a, b, out, i));
}

/* casts */
__global__ void collc_fp16_encode(const float* x, collc_u64 n, collc_u16* out, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_fp16_encode_one(x, out, i));
}
__global__ void collc_fp16_decode(const collc_u16* in, collc_u64 n, float* out) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_fp16_decode_one(in, out, i);
}
__global__ void collc_bf16_encode(const float* x, collc_u64 n, collc_u16* out, collc_u64* bad) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_note_bad(bad, collc_bf16_encode_one(x, out, i));
}
__global__ void collc_bf16_decode(const collc_u16* in, collc_u64 n, float* out) {
    collc_u64 i = collc_thread_index();
    if (i < n) collc_bf16_decode_one(in, out, i);
}

/* lossless (float32: one word per value) */
__global__ void collc_lossless_encode_sizes(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
                                            collc_u64* sizes) {
    collc_u64 g = collc_thread_index();
    if (g <= collc_div_up(nwords, 32)) collc_lossless_encode_sizes_one(w, nwords, payload, sizes, g);
}
__global__ void collc_lossless_encode_body(const collc_u32* w, collc_u64 nwords, collc_u8* payload,
                                           const collc_u64* offsets) {
    collc_u64 g = collc_thread_index();
    if (g < collc_div_up(nwords, 32)) collc_lossless_encode_body_one(w, nwords, payload, offsets, g);
}
__global__ void collc_lossless_decode_sizes(const collc_u8* payload, collc_u64 nwords, collc_u64* sizes) {
    collc_u64 g = collc_thread_index();
    if (g <= collc_div_up(nwords, 32)) collc_lossless_decode_sizes_one(payload, nwords, sizes, g);
}
__global__ void collc_lossless_decode_deltas(const collc_u8* payload, collc_u64 nwords, const collc_u64* offsets,
                                             collc_u32* deltas) {
    collc_u64 g = collc_thread_index();
    if (g < collc_div_up(nwords, 32)) collc_lossless_decode_deltas_one(payload, nwords, offsets, deltas, g);
}

#endif /* COLLC_CODECS_NO_KERNELS */

} /* extern "C" */

#endif /* __CUDACC__ */
#endif /* COLLC_CODECS_CUH */
