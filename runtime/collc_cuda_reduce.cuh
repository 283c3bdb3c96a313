/* collc_cuda_reduce.cuh: the reduction kernels of the collc cuda target.
 *
 * collc_cuda_reducer(dtype, op) gives the host function that launches
 * dst[i] = dst[i] op src[i] for n elements on a stream: one grid-stride kernel
 * per (element type, op), instantiated from one template for every pair of
 *
 *   element types  float32, float64, float16 (__half), bfloat16 (__nv_bfloat16),
 *                  int32, int64
 *   ops            sum, prod, max, min
 *
 * The kernels move 16 bytes per load and store (4 floats, 8 halves, ...) from
 * the first 16-byte-aligned element of dst on, when src is aligned the same
 * way; the elements before and after, and every element of a misaligned pair,
 * are reduced one by one.  Chunks start at any element, so both cases occur.
 *
 * Integer sums and products wrap around (computed in unsigned arithmetic), as
 * numpy's do.  Max and min propagate a NaN from either side, as numpy's
 * maximum and minimum do.  Half-precision sums and products round once per
 * operation, in the element type.
 *
 * The same for every schedule: generated files include it, they do not copy it.
 */
#ifndef COLLC_CUDA_REDUCE_CUH
#define COLLC_CUDA_REDUCE_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* Element types and ops, numbered as the generated API takes them (collc.backends.cuda.DTYPES and OPS). */
enum collc_cuda_dtype {
    COLLC_CUDA_FLOAT32,
    COLLC_CUDA_FLOAT64,
    COLLC_CUDA_FLOAT16,
    COLLC_CUDA_BFLOAT16,
    COLLC_CUDA_INT32,
    COLLC_CUDA_INT64,
    COLLC_CUDA_NDTYPES
};

enum collc_cuda_op { COLLC_CUDA_SUM, COLLC_CUDA_PROD, COLLC_CUDA_MAX, COLLC_CUDA_MIN, COLLC_CUDA_NOPS };

/* Bytes per element of each collc_cuda_dtype. */
static const int collc_cuda_dtype_size[COLLC_CUDA_NDTYPES] = {4, 8, 2, 2, 4, 8};

enum { COLLC_CUDA_THREADS = 256 /* threads per block of every kernel */ };

/* ---------------------------------------------------------------------------
 * Element arithmetic
 * ------------------------------------------------------------------------- */

/* Everything below the kernel wrapper is __host__ __device__: tests/cuda/reduce_host.cu runs it on the CPU. */
#define COLLC_CUDA_HD __host__ __device__ __forceinline__

COLLC_CUDA_HD bool collc_isnan(float x) { return x != x; }
COLLC_CUDA_HD bool collc_isnan(double x) { return x != x; }
COLLC_CUDA_HD bool collc_isnan(__half x) { return __hisnan(x); }
COLLC_CUDA_HD bool collc_isnan(__nv_bfloat16 x) { return __hisnan(x); }
COLLC_CUDA_HD bool collc_isnan(int32_t) { return false; }
COLLC_CUDA_HD bool collc_isnan(int64_t) { return false; }

/* a + b and a * b in the element type; integers wrap around. */
template <typename T> struct collc_arith {
    COLLC_CUDA_HD static T add(T a, T b) { return a + b; }
    COLLC_CUDA_HD static T mul(T a, T b) { return a * b; }
};

template <typename T, typename U> struct collc_wrapping {
    COLLC_CUDA_HD static T add(T a, T b) { return (T)((U)a + (U)b); }
    COLLC_CUDA_HD static T mul(T a, T b) { return (T)((U)a * (U)b); }
};

template <> struct collc_arith<int32_t> : collc_wrapping<int32_t, uint32_t> {};
template <> struct collc_arith<int64_t> : collc_wrapping<int64_t, uint64_t> {};

struct collc_op_sum {
    template <typename T> COLLC_CUDA_HD static T apply(T a, T b) { return collc_arith<T>::add(a, b); }
};

struct collc_op_prod {
    template <typename T> COLLC_CUDA_HD static T apply(T a, T b) { return collc_arith<T>::mul(a, b); }
};

struct collc_op_max {
    template <typename T> COLLC_CUDA_HD static T apply(T a, T b)
    {
        return (collc_isnan(a) || a > b) ? a : b;
    }
};

struct collc_op_min {
    template <typename T> COLLC_CUDA_HD static T apply(T a, T b)
    {
        return (collc_isnan(a) || a < b) ? a : b;
    }
};

/* ---------------------------------------------------------------------------
 * The kernel
 * ------------------------------------------------------------------------- */

/* 16 bytes of elements, loaded and stored at once. */
template <typename T> struct alignas(16) collc_vec16 {
    T v[16 / sizeof(T)];
};

/* dst[i] = dst[i] op src[i] for the i < n that thread `first` of a grid of `stride` threads handles:
 * first, first + stride, ... of each part (head, 16-byte vectors, tail).  dst and src do not overlap. */
template <typename T, typename Op>
COLLC_CUDA_HD void collc_reduce_range(T *__restrict__ dst, const T *__restrict__ src, int64_t n, int64_t first,
                                      int64_t stride)
{
    constexpr int W = 16 / sizeof(T);
    /* Elements before dst's first 16-byte boundary; all of them when src cannot follow it. */
    int64_t head = (int64_t)((16 - ((uintptr_t)dst & 15)) & 15) / (int64_t)sizeof(T);
    if (head > n || ((uintptr_t)(src + head) & 15) != 0) head = n;
    const int64_t nvec = (n - head) / W;
    collc_vec16<T> *dv = reinterpret_cast<collc_vec16<T> *>(dst + head);
    const collc_vec16<T> *sv = reinterpret_cast<const collc_vec16<T> *>(src + head);

    for (int64_t i = first; i < head; i += stride)
        dst[i] = Op::apply(dst[i], src[i]);
    for (int64_t i = first; i < nvec; i += stride) {
        collc_vec16<T> a = dv[i];
        const collc_vec16<T> b = sv[i];
#pragma unroll
        for (int k = 0; k < W; k++)
            a.v[k] = Op::apply(a.v[k], b.v[k]);
        dv[i] = a;
    }
    for (int64_t i = head + nvec * W + first; i < n; i += stride)
        dst[i] = Op::apply(dst[i], src[i]);
}

/* dst[i] = dst[i] op src[i] for i < n, grid-stride. */
template <typename T, typename Op>
__global__ void __launch_bounds__(COLLC_CUDA_THREADS)
    collc_reduce_kernel(T *__restrict__ dst, const T *__restrict__ src, int64_t n)
{
    collc_reduce_range<T, Op>(dst, src, n, (int64_t)blockIdx.x * blockDim.x + threadIdx.x,
                              (int64_t)gridDim.x * blockDim.x);
}

/* ---------------------------------------------------------------------------
 * Launching
 * ------------------------------------------------------------------------- */

/* Launches dst op= src (n elements, n > 0) on `stream`, with at most max_blocks blocks. */
typedef void (*collc_cuda_reduce_fn)(void *dst, const void *src, int64_t n, int max_blocks, cudaStream_t stream);

template <typename T, typename Op>
static void collc_cuda_launch_reduce(void *dst, const void *src, int64_t n, int max_blocks, cudaStream_t stream)
{
    const int64_t vectors = n / (16 / (int64_t)sizeof(T)) + 1;
    const int64_t wanted = (vectors + COLLC_CUDA_THREADS - 1) / COLLC_CUDA_THREADS;
    const int blocks = (int)(wanted < max_blocks ? wanted : max_blocks);
    collc_reduce_kernel<T, Op><<<blocks, COLLC_CUDA_THREADS, 0, stream>>>((T *)dst, (const T *)src, n);
}

#define COLLC_CUDA_REDUCERS_OF(T)                                                                      \
    {                                                                                                  \
        collc_cuda_launch_reduce<T, collc_op_sum>, collc_cuda_launch_reduce<T, collc_op_prod>,         \
            collc_cuda_launch_reduce<T, collc_op_max>, collc_cuda_launch_reduce<T, collc_op_min>       \
    }

/* [dtype][op], in the order of the enums above. */
static const collc_cuda_reduce_fn collc_cuda_reducers[COLLC_CUDA_NDTYPES][COLLC_CUDA_NOPS] = {
    COLLC_CUDA_REDUCERS_OF(float),  COLLC_CUDA_REDUCERS_OF(double),  COLLC_CUDA_REDUCERS_OF(__half),
    COLLC_CUDA_REDUCERS_OF(__nv_bfloat16), COLLC_CUDA_REDUCERS_OF(int32_t), COLLC_CUDA_REDUCERS_OF(int64_t),
};

#undef COLLC_CUDA_REDUCERS_OF

#endif /* COLLC_CUDA_REDUCE_CUH */
