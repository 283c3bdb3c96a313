/* collc_reduce.h: the reduction step of the collc MPI executors.
 *
 * collc_reduce() computes dst[i] = src[i] op dst[i] for n elements.  The common
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

#include <mpi.h>

/* dst[i] = dst[i] op src[i]; dst and src never overlap. */
typedef void (*collc_kernel)(void *restrict dst, const void *restrict src, size_t n);

/* Sum and product in a wider unsigned type W (wrap-around, no undefined overflow). */
#define COLLC_ARITH_LOOP(name, T, W, OP)                                                 \
    static inline void name(void *restrict dst, const void *restrict src, size_t n)     \
    {                                                                                   \
        T *restrict a = (T *)dst;                                                       \
        const T *restrict b = (const T *)src;                                           \
        for (size_t i = 0; i < n; i++)                                                  \
            a[i] = (T)((W)a[i] OP (W)b[i]);                                             \
    }

/* Maximum (CMP is >) or minimum (CMP is <) of integers. */
#define COLLC_INT_SELECT_LOOP(name, T, CMP)                                              \
    static inline void name(void *restrict dst, const void *restrict src, size_t n)     \
    {                                                                                   \
        T *restrict a = (T *)dst;                                                       \
        const T *restrict b = (const T *)src;                                           \
        for (size_t i = 0; i < n; i++)                                                  \
            a[i] = b[i] CMP a[i] ? b[i] : a[i];                                         \
    }

/* Maximum or minimum of floating-point values; y != y holds for a NaN only. */
#define COLLC_FLOAT_SELECT_LOOP(name, T, CMP)                                            \
    static inline void name(void *restrict dst, const void *restrict src, size_t n)     \
    {                                                                                   \
        T *restrict a = (T *)dst;                                                       \
        const T *restrict b = (const T *)src;                                           \
        for (size_t i = 0; i < n; i++) {                                                \
            T x = a[i], y = b[i];                                                       \
            a[i] = (y CMP x || y != y) ? y : x;                                         \
        }                                                                               \
    }

#define COLLC_INT_KERNELS(sfx, T, W)                                                     \
    COLLC_ARITH_LOOP(collc_sum_##sfx, T, W, +)                                           \
    COLLC_ARITH_LOOP(collc_prod_##sfx, T, W, *)                                          \
    COLLC_INT_SELECT_LOOP(collc_max_##sfx, T, >)                                         \
    COLLC_INT_SELECT_LOOP(collc_min_##sfx, T, <)

#define COLLC_FLOAT_KERNELS(sfx, T)                                                      \
    COLLC_ARITH_LOOP(collc_sum_##sfx, T, T, +)                                           \
    COLLC_ARITH_LOOP(collc_prod_##sfx, T, T, *)                                          \
    COLLC_FLOAT_SELECT_LOOP(collc_max_##sfx, T, >)                                       \
    COLLC_FLOAT_SELECT_LOOP(collc_min_##sfx, T, <)

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

/* The inline loop for (dt, op), or NULL when PMPI_Reduce_local must do it. */
static inline collc_kernel collc_kernel_for(MPI_Datatype dt, MPI_Op op)
{
    static const collc_kernel table[COLLC_ELEM_COUNT][4] = {
        [COLLC_ELEM_I8] = {collc_sum_i8, collc_prod_i8, collc_max_i8, collc_min_i8},
        [COLLC_ELEM_U8] = {collc_sum_u8, collc_prod_u8, collc_max_u8, collc_min_u8},
        [COLLC_ELEM_I16] = {collc_sum_i16, collc_prod_i16, collc_max_i16, collc_min_i16},
        [COLLC_ELEM_U16] = {collc_sum_u16, collc_prod_u16, collc_max_u16, collc_min_u16},
        [COLLC_ELEM_I32] = {collc_sum_i32, collc_prod_i32, collc_max_i32, collc_min_i32},
        [COLLC_ELEM_U32] = {collc_sum_u32, collc_prod_u32, collc_max_u32, collc_min_u32},
        [COLLC_ELEM_I64] = {collc_sum_i64, collc_prod_i64, collc_max_i64, collc_min_i64},
        [COLLC_ELEM_U64] = {collc_sum_u64, collc_prod_u64, collc_max_u64, collc_min_u64},
        [COLLC_ELEM_F32] = {collc_sum_f32, collc_prod_f32, collc_max_f32, collc_min_f32},
        [COLLC_ELEM_F64] = {collc_sum_f64, collc_prod_f64, collc_max_f64, collc_min_f64},
    };
    int k;
    if (op == MPI_SUM) k = 0;
    else if (op == MPI_PROD) k = 1;
    else if (op == MPI_MAX) k = 2;
    else if (op == MPI_MIN) k = 3;
    else return NULL;
    return table[collc_elem_of(dt)][k];
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

#endif /* COLLC_REDUCE_H */
