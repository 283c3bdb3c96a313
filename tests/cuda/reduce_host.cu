/* reduce_host.cu: the reduction kernels' code (collc_reduce_range, runtime/collc_cuda_reduce.cuh) on the CPU.
 *
 *   reduce_host DTYPE OP N IN OUT
 *
 * IN holds a then b, N elements each, of collc_cuda_dtype DTYPE; OUT receives
 * a op b (collc_cuda_op OP) as one thread computes it from 16-byte-aligned
 * arrays.  Before that, every other way the kernels may meet the data must
 * give the same bytes: a and b at other offsets from a 16-byte boundary
 * (aligned alike or not, so the vector path and the element-by-element path
 * both run), grids of 1 to 256 threads, and prefixes of the arrays; the
 * program exits 1 naming the first that differs.  tests/test_cuda.py compares
 * OUT with numpy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collc_cuda_reduce.cuh"

template <typename T, typename Op>
static void reduce_as(char *a, const char *b, int64_t n, int64_t threads)
{
    for (int64_t t = 0; t < threads; t++)
        collc_reduce_range<T, Op>((T *)a, (const T *)b, n, t, threads);
}

template <typename T>
static void reduce_op(int op, char *a, const char *b, int64_t n, int64_t threads)
{
    switch (op) {
    case COLLC_CUDA_SUM: reduce_as<T, collc_op_sum>(a, b, n, threads); break;
    case COLLC_CUDA_PROD: reduce_as<T, collc_op_prod>(a, b, n, threads); break;
    case COLLC_CUDA_MAX: reduce_as<T, collc_op_max>(a, b, n, threads); break;
    default: reduce_as<T, collc_op_min>(a, b, n, threads); break;
    }
}

static void reduce(int dtype, int op, char *a, const char *b, int64_t n, int64_t threads)
{
    switch (dtype) {
    case COLLC_CUDA_FLOAT32: reduce_op<float>(op, a, b, n, threads); break;
    case COLLC_CUDA_FLOAT64: reduce_op<double>(op, a, b, n, threads); break;
    case COLLC_CUDA_FLOAT16: reduce_op<__half>(op, a, b, n, threads); break;
    case COLLC_CUDA_BFLOAT16: reduce_op<__nv_bfloat16>(op, a, b, n, threads); break;
    case COLLC_CUDA_INT32: reduce_op<int32_t>(op, a, b, n, threads); break;
    default: reduce_op<int64_t>(op, a, b, n, threads); break;
    }
}

/* a op b for the first n elements, with a at a_off and b at b_off elements past a 16-byte boundary. */
static char *compute(int dtype, int op, const char *a, const char *b, int64_t n, int a_off, int b_off,
                     int64_t threads)
{
    const size_t size = (size_t)collc_cuda_dtype_size[dtype], bytes = (size_t)n * size;
    const size_t room = (bytes + 16 * size + 15) / 16 * 16; /* room for the offset, a multiple of 16 */
    char *abuf = (char *)aligned_alloc(16, room), *bbuf = (char *)aligned_alloc(16, room);
    char *out = (char *)malloc(bytes + 1);
    memcpy(abuf + a_off * size, a, bytes);
    memcpy(bbuf + b_off * size, b, bytes);
    reduce(dtype, op, abuf + a_off * size, bbuf + b_off * size, n, threads);
    memcpy(out, abuf + a_off * size, bytes);
    free(abuf);
    free(bbuf);
    return out;
}

int main(int argc, char **argv)
{
    static const int offsets[][2] = {{0, 0}, {1, 1}, {1, 0}, {0, 3}, {5, 2}, {7, 7}};
    static const int64_t threads[] = {1, 3, 64, 256};
    int dtype, op;
    int64_t n;
    size_t size;
    char *in, *ref;
    FILE *f;
    if (argc != 6) {
        fprintf(stderr, "usage: reduce_host DTYPE OP N IN OUT\n");
        return 2;
    }
    dtype = atoi(argv[1]);
    op = atoi(argv[2]);
    n = atoll(argv[3]);
    size = (size_t)collc_cuda_dtype_size[dtype];
    in = (char *)malloc(2 * (size_t)n * size + 1);
    if ((f = fopen(argv[4], "rb")) == NULL || fread(in, size, 2 * (size_t)n, f) != 2 * (size_t)n) {
        fprintf(stderr, "cannot read %lld pairs from %s\n", (long long)n, argv[4]);
        return 2;
    }
    fclose(f);
    ref = compute(dtype, op, in, in + n * size, n, 0, 0, 1);
    for (const int *off : offsets) {
        for (int64_t t : threads) {
            for (int64_t m : {(int64_t)0, (int64_t)1, (int64_t)5, (int64_t)17, n}) {
                char *got = compute(dtype, op, in, in + n * size, m < n ? m : n, off[0], off[1], t);
                if (memcmp(got, ref, (size_t)(m < n ? m : n) * size) != 0) {
                    fprintf(stderr, "offsets %d/%d, %lld threads, %lld elements: differs from one aligned thread\n",
                            off[0], off[1], (long long)t, (long long)m);
                    return 1;
                }
                free(got);
            }
        }
    }
    if ((f = fopen(argv[5], "wb")) == NULL || fwrite(ref, size, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot write %s\n", argv[5]);
        return 2;
    }
    fclose(f);
    return 0;
}
