/* collc_reduce.h: the reduction step of the collc MPI executors.
 *
 * collc_reduce() computes dst[i] = dst[i] op src[i] for n elements, and
 * collc_reduce3() dst[i] = a[i] op b[i] (the same, with dst's operand read
 * from a, so that a reduce into a copy of the caller's input needs no copy
 * first: collc/backends/dataflow.py's input_reads).  The common
 * predefined datatypes (float, double, and the 8-, 16-, 32- and 64-bit integers
 * under all their C names) with MPI_SUM, MPI_PROD, MPI_MAX and MPI_MIN run inline
 * loops that the compiler vectorises; every other (datatype, op) pair goes
 * through PMPI_Reduce_local.
 *
 * Integer sums and products wrap around (they are computed in unsigned
 * arithmetic, which C defines), as MPI implementations do.  MAX and MIN of
 * floating-point values propagate NaN from either side, so that the result
 * does not depend on the order in which ranks are combined.
 */
#ifndef COLLC_REDUCE_H
#define COLLC_REDUCE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <mpi.h>

/* dst[i] = dst[i] op src[i]; dst and src never overlap. */
typedef void (*collc_kernel)(void *restrict dst, const void *restrict src, size_t n);

/* dst[i] = a[i] op b[i]; none of the three overlap. */
typedef void (*collc_kernel3)(void *restrict dst, const void *restrict a, const void *restrict b, size_t n);

/* One element of each op: x op y on T.  Sums and products in a wider unsigned type W (wrap-around, no
 * undefined overflow); maximum and minimum of floating-point values propagate a NaN from either side (y != y
 * holds for a NaN only). */
#define COLLC_E_SUM(T, W, x, y) ((T)((W)(x) + (W)(y)))
#define COLLC_E_PROD(T, W, x, y) ((T)((W)(x) * (W)(y)))
#define COLLC_E_MAX(T, W, x, y) ((y) > (x) ? (y) : (x))
#define COLLC_E_MIN(T, W, x, y) ((y) < (x) ? (y) : (x))
#define COLLC_E_FMAX(T, W, x, y) ((y) > (x) || (y) != (y) ? (y) : (x))
#define COLLC_E_FMIN(T, W, x, y) ((y) < (x) || (y) != (y) ? (y) : (x))

/* The two loops of op E on T: name (dst = dst op src) and name##3 (dst = a op b). */
#define COLLC_LOOPS(name, T, W, E)                                                                          \
    static inline void name(void *restrict dst, const void *restrict src, size_t n)                        \
    {                                                                                                      \
        T *restrict a = (T *)dst;                                                                          \
        const T *restrict b = (const T *)src;                                                              \
        for (size_t i = 0; i < n; i++) {                                                                   \
            T x = a[i], y = b[i];                                                                          \
            a[i] = E(T, W, x, y);                                                                          \
        }                                                                                                  \
    }                                                                                                      \
    static inline void name##3(void *restrict dst, const void *restrict u, const void *restrict v, size_t n) \
    {                                                                                                      \
        T *restrict d = (T *)dst;                                                                          \
        const T *restrict a = (const T *)u, *restrict b = (const T *)v;                                    \
        for (size_t i = 0; i < n; i++) {                                                                   \
            T x = a[i], y = b[i];                                                                          \
            d[i] = E(T, W, x, y);                                                                          \
        }                                                                                                  \
    }

#define COLLC_INT_KERNELS(sfx, T, W)                                                     \
    COLLC_LOOPS(collc_sum_##sfx, T, W, COLLC_E_SUM)                                      \
    COLLC_LOOPS(collc_prod_##sfx, T, W, COLLC_E_PROD)                                    \
    COLLC_LOOPS(collc_max_##sfx, T, W, COLLC_E_MAX)                                      \
    COLLC_LOOPS(collc_min_##sfx, T, W, COLLC_E_MIN)

#define COLLC_FLOAT_KERNELS(sfx, T)                                                      \
    COLLC_LOOPS(collc_sum_##sfx, T, T, COLLC_E_SUM)                                      \
    COLLC_LOOPS(collc_prod_##sfx, T, T, COLLC_E_PROD)                                    \
    COLLC_LOOPS(collc_max_##sfx, T, T, COLLC_E_FMAX)                                     \
    COLLC_LOOPS(collc_min_##sfx, T, T, COLLC_E_FMIN)

COLLC_INT_KERNELS(i8, int8_t, unsigned)
COLLC_INT_KERNELS(u8, uint8_t, unsigned)
COLLC_INT_KERNELS(i16, int16_t, unsigned)
COLLC_INT_KERNELS(u16, uint16_t, unsigned)
COLLC_INT_KERNELS(i32, int32_t, uint32_t)
COLLC_INT_KERNELS(u32, uint32_t, uint32_t)
COLLC_INT_KERNELS(i64, int64_t, uint64_t)
COLLC_INT_KERNELS(u64, uint64_t, uint64_t)
COLLC_FLOAT_KERNELS(f32, float)
COLLC_FLOAT_KERNELS(f64, double)

/* The element types with inline loops. */
enum collc_elem {
    COLLC_ELEM_NONE,
    COLLC_ELEM_I8, COLLC_ELEM_U8, COLLC_ELEM_I16, COLLC_ELEM_U16,
    COLLC_ELEM_I32, COLLC_ELEM_U32, COLLC_ELEM_I64, COLLC_ELEM_U64,
    COLLC_ELEM_F32, COLLC_ELEM_F64,
    COLLC_ELEM_COUNT
};

/* The fixed-width element type of a C integer type of `size` bytes. */
static inline enum collc_elem collc_int_elem(size_t size, int is_signed)
{
    switch (size) {
    case 1: return is_signed ? COLLC_ELEM_I8 : COLLC_ELEM_U8;
    case 2: return is_signed ? COLLC_ELEM_I16 : COLLC_ELEM_U16;
    case 4: return is_signed ? COLLC_ELEM_I32 : COLLC_ELEM_U32;
    case 8: return is_signed ? COLLC_ELEM_I64 : COLLC_ELEM_U64;
    default: return COLLC_ELEM_NONE;
    }
}

/* Which inline loops serve `dt`; COLLC_ELEM_NONE for every other datatype.
 * (MPI handles need not be constant expressions, hence the if-chain.) */
static inline enum collc_elem collc_elem_of(MPI_Datatype dt)
{
    if (dt == MPI_FLOAT) return COLLC_ELEM_F32;
    if (dt == MPI_DOUBLE) return COLLC_ELEM_F64;
    if (dt == MPI_INT8_T) return COLLC_ELEM_I8;
    if (dt == MPI_UINT8_T) return COLLC_ELEM_U8;
    if (dt == MPI_INT16_T) return COLLC_ELEM_I16;
    if (dt == MPI_UINT16_T) return COLLC_ELEM_U16;
    if (dt == MPI_INT32_T) return COLLC_ELEM_I32;
    if (dt == MPI_UINT32_T) return COLLC_ELEM_U32;
    if (dt == MPI_INT64_T) return COLLC_ELEM_I64;
    if (dt == MPI_UINT64_T) return COLLC_ELEM_U64;
    if (dt == MPI_SIGNED_CHAR) return collc_int_elem(sizeof(signed char), 1);
    if (dt == MPI_UNSIGNED_CHAR) return collc_int_elem(sizeof(unsigned char), 0);
    if (dt == MPI_SHORT) return collc_int_elem(sizeof(short), 1);
    if (dt == MPI_UNSIGNED_SHORT) return collc_int_elem(sizeof(unsigned short), 0);
    if (dt == MPI_INT) return collc_int_elem(sizeof(int), 1);
    if (dt == MPI_UNSIGNED) return collc_int_elem(sizeof(unsigned), 0);
    if (dt == MPI_LONG) return collc_int_elem(sizeof(long), 1);
    if (dt == MPI_UNSIGNED_LONG) return collc_int_elem(sizeof(unsigned long), 0);
    if (dt == MPI_LONG_LONG) return collc_int_elem(sizeof(long long), 1);
    if (dt == MPI_UNSIGNED_LONG_LONG) return collc_int_elem(sizeof(unsigned long long), 0);
    return COLLC_ELEM_NONE;
}

/* The column of the kernel tables for op, -1 for an op without inline loops. */
static inline int collc_op_column(MPI_Op op)
{
    if (op == MPI_SUM) return 0;
    if (op == MPI_PROD) return 1;
    if (op == MPI_MAX) return 2;
    if (op == MPI_MIN) return 3;
    return -1;
}

#define COLLC_KERNEL_ROW(elem, sfx, x) \
    [elem] = {collc_sum_##sfx##x, collc_prod_##sfx##x, collc_max_##sfx##x, collc_min_##sfx##x}
#define COLLC_KERNEL_TABLE(x)                                                                          \
    {                                                                                                  \
        COLLC_KERNEL_ROW(COLLC_ELEM_I8, i8, x), COLLC_KERNEL_ROW(COLLC_ELEM_U8, u8, x),                \
        COLLC_KERNEL_ROW(COLLC_ELEM_I16, i16, x), COLLC_KERNEL_ROW(COLLC_ELEM_U16, u16, x),            \
        COLLC_KERNEL_ROW(COLLC_ELEM_I32, i32, x), COLLC_KERNEL_ROW(COLLC_ELEM_U32, u32, x),            \
        COLLC_KERNEL_ROW(COLLC_ELEM_I64, i64, x), COLLC_KERNEL_ROW(COLLC_ELEM_U64, u64, x),            \
        COLLC_KERNEL_ROW(COLLC_ELEM_F32, f32, x), COLLC_KERNEL_ROW(COLLC_ELEM_F64, f64, x),            \
    }

/* The inline loop for (dt, op), or NULL when PMPI_Reduce_local must do it. */
static inline collc_kernel collc_kernel_for(MPI_Datatype dt, MPI_Op op)
{
    static const collc_kernel table[COLLC_ELEM_COUNT][4] = COLLC_KERNEL_TABLE();
    int k = collc_op_column(op);
    return k < 0 ? NULL : table[collc_elem_of(dt)][k];
}

/* The three-operand inline loop for (dt, op), or NULL. */
static inline collc_kernel3 collc_kernel3_for(MPI_Datatype dt, MPI_Op op)
{
    static const collc_kernel3 table[COLLC_ELEM_COUNT][4] = COLLC_KERNEL_TABLE(3);
    int k = collc_op_column(op);
    return k < 0 ? NULL : table[collc_elem_of(dt)][k];
}

/* dst = src op dst through MPI, for any (datatype, op) MPI accepts. */
static inline int collc_reduce_local(const void *src, void *dst, MPI_Count n, MPI_Datatype dt, MPI_Op op,
                                     MPI_Aint extent)
{
#if MPI_VERSION >= 4
    (void)extent;
    return PMPI_Reduce_local_c(src, dst, n, dt, op);
#else
    while (n > 0) {
        int piece = n > INT_MAX ? INT_MAX : (int)n;
        int err = PMPI_Reduce_local(src, dst, piece, dt, op);
        if (err != MPI_SUCCESS) return err;
        src = (const char *)src + (MPI_Aint)piece * extent;
        dst = (char *)dst + (MPI_Aint)piece * extent;
        n -= piece;
    }
    return MPI_SUCCESS;
#endif
}

/* dst[i] = dst[i] op src[i] for n elements of `extent` bytes. */
static inline int collc_reduce(collc_kernel kernel, void *dst, const void *src, MPI_Count n, MPI_Datatype dt,
                               MPI_Op op, MPI_Aint extent)
{
    if (n == 0) return MPI_SUCCESS;
    if (kernel != NULL) {
        kernel(dst, src, (size_t)n);
        return MPI_SUCCESS;
    }
    return collc_reduce_local(src, dst, n, dt, op, extent);
}

/* dst[i] = a[i] op b[i] for n elements: what collc_reduce(dst, b) gives when dst holds a copy of a, without the
 * copy.  dst is either a itself or disjoint from a and b. */
static inline int collc_reduce3(collc_kernel kernel, collc_kernel3 kernel3, void *dst, const void *a, const void *b,
                                MPI_Count n, MPI_Datatype dt, MPI_Op op, MPI_Aint extent)
{
    if (n == 0) return MPI_SUCCESS;
    if (dst == a) return collc_reduce(kernel, dst, b, n, dt, op, extent);
    if (kernel3 != NULL) {
        kernel3(dst, a, b, (size_t)n);
        return MPI_SUCCESS;
    }
    memcpy(dst, a, (size_t)(n * extent));
    return collc_reduce(kernel, dst, b, n, dt, op, extent);
}

#endif /* COLLC_REDUCE_H */
