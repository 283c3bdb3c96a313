/* check_values_types.h: the ops and datatypes of check_values.c, each with the
 * functions that fill a rank's input, fold inputs into the expected result,
 * compare two elements and print one.  Included by check_values.c only.
 */
#ifndef CHECK_VALUES_TYPES_H
#define CHECK_VALUES_TYPES_H

#include <complex.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------
 * Ops
 * ------------------------------------------------------------------------- */

enum op { SUM, PROD, MAX, MIN, LAND, LOR, LXOR, BAND, BOR, BXOR, MAXLOC, MINLOC, USER_SUM, USER_MATMUL, NOPS, COPY };

static const char *const op_names[NOPS] = {
    "MPI_SUM",  "MPI_PROD", "MPI_MAX",  "MPI_MIN",    "MPI_LAND",   "MPI_LOR",         "MPI_LXOR",
    "MPI_BAND", "MPI_BOR",  "MPI_BXOR", "MPI_MAXLOC", "MPI_MINLOC", "user op (commutative sum)",
    "user op (2x2 matrix product, not commutative)",
};

#define B(op) (1u << (op))
#define OPS_INT (B(SUM) | B(PROD) | B(MAX) | B(MIN) | B(LAND) | B(LOR) | B(LXOR) | B(BAND) | B(BOR) | B(BXOR))
#define OPS_FORTRAN_INT (B(SUM) | B(PROD) | B(MAX) | B(MIN) | B(BAND) | B(BOR) | B(BXOR))
#define OPS_FLOAT (B(SUM) | B(PROD) | B(MAX) | B(MIN))
#define OPS_COMPLEX (B(SUM) | B(PROD))
#define OPS_LOGICAL (B(LAND) | B(LOR) | B(LXOR))
#define OPS_BYTE (B(BAND) | B(BOR) | B(BXOR))
#define OPS_PAIR (B(MAXLOC) | B(MINLOC))

static MPI_Op user_ops[NOPS];

static MPI_Op mpi_op(enum op op)
{
    switch (op) {
    case SUM: return MPI_SUM;
    case PROD: return MPI_PROD;
    case MAX: return MPI_MAX;
    case MIN: return MPI_MIN;
    case LAND: return MPI_LAND;
    case LOR: return MPI_LOR;
    case LXOR: return MPI_LXOR;
    case BAND: return MPI_BAND;
    case BOR: return MPI_BOR;
    case BXOR: return MPI_BXOR;
    case MAXLOC: return MPI_MAXLOC;
    case MINLOC: return MPI_MINLOC;
    default: return user_ops[op];
    }
}

/* ---------------------------------------------------------------------------
 * Inputs: functions of (rank r, index i, op) for p ranks
 * ------------------------------------------------------------------------- */

static unsigned long long mix(int r, long long i)
{
    unsigned long long x = (unsigned long long)i * 0x9E3779B97F4A7C15ull;
    x += (unsigned long long)(r + 1) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 29);
}

/* Whether rank r's value at i is nonzero for the logical ops: all zero, all
 * nonzero, exactly one nonzero, or all but one nonzero, by i mod 4. */
static int truth(int r, long long i, int p)
{
    int who = (int)((i / 4) % p);
    switch (i % 4) {
    case 0: return 0;
    case 1: return 1;
    case 2: return r == who;
    default: return r != who;
    }
}

/* A factor for MPI_PROD: at most two ranks per element differ from 1, so a
 * product is at most 8 in magnitude (it fits in 8 bits). */
static long long factor(int r, long long i, int p, int is_signed)
{
    long long v = 1;
    if (r == (int)(i % p)) v = 2 + i % 3;
    else if (r == (int)((i / p + 1) % p)) v = 2;
    if (is_signed && (r + 2 * i) % 5 == 0) v = -v;
    return v;
}

/* The value of an integer type of `size` bytes: returned as the bits of a
 * long long, which the caller truncates to the type. */
static unsigned long long int_value(enum op op, int is_signed, size_t size, int r, long long i, int p)
{
    unsigned long long top = size >= 8 ? ~0ull : (1ull << (8 * size)) - 1;
    long long v;
    switch (op) {
    case SUM:
    case USER_SUM:
        if (is_signed) return (unsigned long long)((r * 7 + i * 3) % 11 - 5);
        v = (r * 7 + i * 3) % 11;
        return i % 4 == 3 ? top - (unsigned long long)v : (unsigned long long)v; /* sums wrap around */
    case PROD: return (unsigned long long)factor(r, i, p, is_signed);
    case MAX:
    case MIN:
        v = (r * 37 + i * 11) % 101;
        if (is_signed) return (unsigned long long)(v - 50);
        return (r + i) % 3 == 0 ? top - (unsigned long long)v : (unsigned long long)v;
    case LAND:
    case LOR:
    case LXOR:
        if (!truth(r, i, p)) return 0;
        v = r % 3 + 1;
        return (unsigned long long)(is_signed && r % 2 ? -v : v);
    case USER_MATMUL: return mix(r, i) & 7;
    default: return mix(r, i);
    }
}

/* The value of a floating-point type (and the real part of a complex one): exact in binary. */
static double float_value(enum op op, int r, long long i, int p)
{
    switch (op) {
    case SUM: return (double)((r * 7 + i * 3) % 11 - 5) / 4;
    case PROD: return (double)factor(r, i, p, 1);
    default: return (double)((r * 37 + i * 11) % 101 - 50) / 4;
    }
}

/* Complex values: sums of small integers, products of 1, i, 1+i, 2, -1, 1-i (exact). */
static void complex_value(enum op op, int r, long long i, int p, double *re, double *im)
{
    static const double factors[6][2] = {{1, 0}, {0, 1}, {1, 1}, {2, 0}, {-1, 0}, {1, -1}};
    if (op == SUM) {
        *re = (double)((r * 7 + i * 3) % 11 - 5);
        *im = (double)((r * 5 + i * 2) % 7 - 3);
        return;
    }
    *re = 1, *im = 0;
    if (r == (int)(i % p)) *re = factors[(i / p) % 6][0], *im = factors[(i / p) % 6][1];
    else if (r == (int)((i / p + 1) % p)) *re = factors[(i + 1) % 6][0], *im = factors[(i + 1) % 6][1];
}

/* Pair values for MAXLOC and MINLOC: many ties, so the smallest index must win. */
static int pair_value(int r, long long i) { return (int)((r * 5 + i) % 3) - 1; }
static int pair_index(int r, long long i) { return (int)((r * 3 + i) % 7); }

/* ---------------------------------------------------------------------------
 * Datatypes
 * ------------------------------------------------------------------------- */

struct dtype {
    const char *name;
    MPI_Datatype type;
    size_t size; /* bytes per element in our buffers: sizeof the C type, which must be MPI's extent */
    unsigned ops;
    /* buf[0..n) = rank r's input */
    void (*fill)(void *buf, enum op op, int r, int p, long long n);
    /* acc[0..n) = acc op in (COPY: acc = in) */
    void (*fold)(void *acc, const void *in, enum op op, long long n);
    /* whether element i of a and b are equal (the bytes that carry data only) */
    int (*same)(const void *a, const void *b, long long i);
    /* element i of buf, as text */
    void (*show)(const void *buf, long long i, char *out, size_t len);
    int pmpi_decides; /* a derived datatype with predefined ops: run with --derived only */
};

#define INT_TYPE(sfx, T, SIGNED)                                                                           \
    static void fill_##sfx(void *buf, enum op op, int r, int p, long long n)                              \
    {                                                                                                     \
        T *b = (T *)buf;                                                                                  \
        for (long long i = 0; i < n; i++) b[i] = (T)int_value(op, SIGNED, sizeof(T), r, i, p);            \
    }                                                                                                     \
    static void fold_##sfx(void *acc, const void *in, enum op op, long long n)                            \
    {                                                                                                     \
        T *a = (T *)acc;                                                                                  \
        const T *x = (const T *)in;                                                                       \
        for (long long i = 0; i < n; i++) {                                                               \
            switch (op) {                                                                                 \
            case COPY: a[i] = x[i]; break;                                                                \
            case SUM:                                                                                     \
            case USER_SUM: a[i] = (T)((unsigned long long)a[i] + (unsigned long long)x[i]); break;        \
            case PROD: a[i] = (T)(a[i] * x[i]); break;                                                    \
            case MAX: a[i] = x[i] > a[i] ? x[i] : a[i]; break;                                            \
            case MIN: a[i] = x[i] < a[i] ? x[i] : a[i]; break;                                            \
            case LAND: a[i] = (T)(a[i] && x[i]); break;                                                   \
            case LOR: a[i] = (T)(a[i] || x[i]); break;                                                    \
            case LXOR: a[i] = (T)(!a[i] != !x[i]); break;                                                 \
            case BAND: a[i] = (T)(a[i] & x[i]); break;                                                    \
            case BOR: a[i] = (T)(a[i] | x[i]); break;                                                     \
            case BXOR: a[i] = (T)(a[i] ^ x[i]); break;                                                    \
            default: abort();                                                                             \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    static int same_##sfx(const void *a, const void *b, long long i)                                      \
    {                                                                                                     \
        return ((const T *)a)[i] == ((const T *)b)[i];                                                    \
    }                                                                                                     \
    static void show_##sfx(const void *buf, long long i, char *out, size_t len)                           \
    {                                                                                                     \
        T v = ((const T *)buf)[i];                                                                        \
        if (SIGNED) snprintf(out, len, "%lld", (long long)v);                                             \
        else snprintf(out, len, "%llu", (unsigned long long)v);                                           \
    }

INT_TYPE(char, char, 1)
INT_TYPE(schar, signed char, 1)
INT_TYPE(uchar, unsigned char, 0)
INT_TYPE(short, short, 1)
INT_TYPE(ushort, unsigned short, 0)
INT_TYPE(int, int, 1)
INT_TYPE(uint, unsigned, 0)
INT_TYPE(long, long, 1)
INT_TYPE(ulong, unsigned long, 0)
INT_TYPE(llong, long long, 1)
INT_TYPE(ullong, unsigned long long, 0)
INT_TYPE(i8, int8_t, 1)
INT_TYPE(i16, int16_t, 1)
INT_TYPE(i32, int32_t, 1)
INT_TYPE(i64, int64_t, 1)
INT_TYPE(u8, uint8_t, 0)
INT_TYPE(u16, uint16_t, 0)
INT_TYPE(u32, uint32_t, 0)
INT_TYPE(u64, uint64_t, 0)
INT_TYPE(aint, MPI_Aint, 1)
INT_TYPE(offset, MPI_Offset, 1)
INT_TYPE(count, MPI_Count, 1)

/* C _Bool (and C++ bool, MPI_CXX_BOOL, the same in memory here) and Fortran LOGICAL (0 or 1 in an int). */
#define LOGICAL_TYPE(sfx, T)                                                                               \
    static void fill_##sfx(void *buf, enum op op, int r, int p, long long n)                              \
    {                                                                                                     \
        (void)op;                                                                                         \
        for (long long i = 0; i < n; i++) ((T *)buf)[i] = (T)truth(r, i, p);                              \
    }                                                                                                     \
    static void fold_##sfx(void *acc, const void *in, enum op op, long long n)                            \
    {                                                                                                     \
        T *a = (T *)acc;                                                                                  \
        const T *x = (const T *)in;                                                                       \
        for (long long i = 0; i < n; i++) {                                                               \
            switch (op) {                                                                                 \
            case COPY: a[i] = x[i]; break;                                                                \
            case LAND: a[i] = (T)(a[i] && x[i]); break;                                                   \
            case LOR: a[i] = (T)(a[i] || x[i]); break;                                                    \
            case LXOR: a[i] = (T)(!a[i] != !x[i]); break;                                                 \
            default: abort();                                                                             \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    static int same_##sfx(const void *a, const void *b, long long i)                                      \
    {                                                                                                     \
        return ((const T *)a)[i] == ((const T *)b)[i];                                                    \
    }                                                                                                     \
    static void show_##sfx(const void *buf, long long i, char *out, size_t len)                           \
    {                                                                                                     \
        snprintf(out, len, "%d", (int)((const T *)buf)[i]);                                               \
    }

LOGICAL_TYPE(bool, bool)
LOGICAL_TYPE(flogical, int)

#define FLOAT_TYPE(sfx, T)                                                                                 \
    static void fill_##sfx(void *buf, enum op op, int r, int p, long long n)                              \
    {                                                                                                     \
        for (long long i = 0; i < n; i++) ((T *)buf)[i] = (T)float_value(op, r, i, p);                    \
    }                                                                                                     \
    static void fold_##sfx(void *acc, const void *in, enum op op, long long n)                            \
    {                                                                                                     \
        T *a = (T *)acc;                                                                                  \
        const T *x = (const T *)in;                                                                       \
        for (long long i = 0; i < n; i++) {                                                               \
            switch (op) {                                                                                 \
            case COPY: a[i] = x[i]; break;                                                                \
            case SUM: a[i] = a[i] + x[i]; break;                                                          \
            case PROD: a[i] = a[i] * x[i]; break;                                                         \
            case MAX: a[i] = x[i] > a[i] ? x[i] : a[i]; break;                                            \
            case MIN: a[i] = x[i] < a[i] ? x[i] : a[i]; break;                                            \
            default: abort();                                                                             \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    static int same_##sfx(const void *a, const void *b, long long i)                                      \
    {                                                                                                     \
        return ((const T *)a)[i] == ((const T *)b)[i];                                                    \
    }                                                                                                     \
    static void show_##sfx(const void *buf, long long i, char *out, size_t len)                           \
    {                                                                                                     \
        snprintf(out, len, "%.21Lg", (long double)((const T *)buf)[i]);                                   \
    }

FLOAT_TYPE(float, float)
FLOAT_TYPE(double, double)
FLOAT_TYPE(ldouble, long double)
#ifdef __FLT16_MAX__
#define HAVE_FLOAT16 1
FLOAT_TYPE(f16, _Float16)
#endif

/* bfloat16, stored as the upper 16 bits of a float (our values are exact in it). */
static float bf16_get(const void *buf, long long i)
{
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static void bf16_put(void *buf, long long i, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16);
}
static void fill_bf16(void *buf, enum op op, int r, int p, long long n)
{
    for (long long i = 0; i < n; i++) bf16_put(buf, i, (float)float_value(op, r, i, p));
}
static void fold_bf16(void *acc, const void *in, enum op op, long long n)
{
    for (long long i = 0; i < n; i++) {
        float a = bf16_get(acc, i), x = bf16_get(in, i);
        switch (op) {
        case COPY: a = x; break;
        case SUM: a = a + x; break;
        case PROD: a = a * x; break;
        case MAX: a = x > a ? x : a; break;
        case MIN: a = x < a ? x : a; break;
        default: abort();
        }
        bf16_put(acc, i, a);
    }
}
static int same_bf16(const void *a, const void *b, long long i) { return bf16_get(a, i) == bf16_get(b, i); }
static void show_bf16(const void *buf, long long i, char *out, size_t len)
{
    snprintf(out, len, "%.9g", bf16_get(buf, i));
}

#define COMPLEX_TYPE(sfx, T, R)                                                                            \
    static void fill_##sfx(void *buf, enum op op, int r, int p, long long n)                              \
    {                                                                                                     \
        for (long long i = 0; i < n; i++) {                                                               \
            double re, im;                                                                                \
            complex_value(op, r, i, p, &re, &im);                                                         \
            ((R *)buf)[2 * i] = (R)re;                                                                    \
            ((R *)buf)[2 * i + 1] = (R)im;                                                                \
        }                                                                                                 \
    }                                                                                                     \
    static void fold_##sfx(void *acc, const void *in, enum op op, long long n)                            \
    {                                                                                                     \
        R *a = (R *)acc;                                                                                  \
        const R *x = (const R *)in;                                                                       \
        for (long long i = 0; i < n; i++) {                                                               \
            R ar = a[2 * i], ai = a[2 * i + 1], xr = x[2 * i], xi = x[2 * i + 1];                         \
            switch (op) {                                                                                 \
            case COPY: ar = xr, ai = xi; break;                                                           \
            case SUM: ar = ar + xr, ai = ai + xi; break;                                                  \
            case PROD: {                                                                                  \
                R re = ar * xr - ai * xi, im = ar * xi + ai * xr;                                         \
                ar = re, ai = im;                                                                         \
                break;                                                                                    \
            }                                                                                             \
            default: abort();                                                                             \
            }                                                                                             \
            a[2 * i] = ar, a[2 * i + 1] = ai;                                                             \
        }                                                                                                 \
    }                                                                                                     \
    static int same_##sfx(const void *a, const void *b, long long i)                                      \
    {                                                                                                     \
        const R *x = (const R *)a, *y = (const R *)b;                                                     \
        return x[2 * i] == y[2 * i] && x[2 * i + 1] == y[2 * i + 1];                                      \
    }                                                                                                     \
    static void show_##sfx(const void *buf, long long i, char *out, size_t len)                           \
    {                                                                                                     \
        const R *x = (const R *)buf;                                                                      \
        snprintf(out, len, "(%.21Lg, %.21Lg)", (long double)x[2 * i], (long double)x[2 * i + 1]);         \
    }                                                                                                     \
    typedef char check_size_##sfx[sizeof(T) == 2 * sizeof(R) ? 1 : -1];

COMPLEX_TYPE(cfloat, float _Complex, float)
COMPLEX_TYPE(cdouble, double _Complex, double)
COMPLEX_TYPE(cldouble, long double _Complex, long double)

/* The pair types of MAXLOC and MINLOC: {value; int index} with C struct layout. */
#define PAIR_TYPE(sfx, V, I)                                                                               \
    struct pair_##sfx {                                                                                   \
        V v;                                                                                              \
        I k;                                                                                              \
    };                                                                                                    \
    static void fill_##sfx(void *buf, enum op op, int r, int p, long long n)                              \
    {                                                                                                     \
        struct pair_##sfx *b = (struct pair_##sfx *)buf;                                                  \
        (void)op, (void)p;                                                                                \
        for (long long i = 0; i < n; i++) {                                                               \
            b[i].v = (V)pair_value(r, i);                                                                 \
            b[i].k = (I)pair_index(r, i);                                                                 \
        }                                                                                                 \
    }                                                                                                     \
    static void fold_##sfx(void *acc, const void *in, enum op op, long long n)                            \
    {                                                                                                     \
        struct pair_##sfx *a = (struct pair_##sfx *)acc;                                                  \
        const struct pair_##sfx *x = (const struct pair_##sfx *)in;                                       \
        for (long long i = 0; i < n; i++) {                                                               \
            int better = op == MAXLOC ? x[i].v > a[i].v : x[i].v < a[i].v;                                \
            if (op == COPY || better) a[i].v = x[i].v, a[i].k = x[i].k;                                   \
            else if (x[i].v == a[i].v && x[i].k < a[i].k) a[i].k = x[i].k;                                \
        }                                                                                                 \
    }                                                                                                     \
    static int same_##sfx(const void *a, const void *b, long long i)                                      \
    {                                                                                                     \
        const struct pair_##sfx *x = (const struct pair_##sfx *)a, *y = (const struct pair_##sfx *)b;     \
        return x[i].v == y[i].v && x[i].k == y[i].k;                                                      \
    }                                                                                                     \
    static void show_##sfx(const void *buf, long long i, char *out, size_t len)                           \
    {                                                                                                     \
        const struct pair_##sfx *x = (const struct pair_##sfx *)buf;                                      \
        snprintf(out, len, "(%.21Lg, %lld)", (long double)x[i].v, (long long)x[i].k);                     \
    }

PAIR_TYPE(float_int, float, int)
PAIR_TYPE(double_int, double, int)
PAIR_TYPE(long_int, long, int)
PAIR_TYPE(two_int, int, int)
PAIR_TYPE(short_int, short, int)
PAIR_TYPE(ldouble_int, long double, int)
PAIR_TYPE(two_float, float, float)    /* MPI_2REAL */
PAIR_TYPE(two_double, double, double) /* MPI_2DOUBLE_PRECISION */

/* Three ints moved as one element of a contiguous derived datatype. */
static void fill_int3(void *buf, enum op op, int r, int p, long long n) { fill_int(buf, op, r, p, 3 * n); }
static void fold_int3(void *acc, const void *in, enum op op, long long n) { fold_int(acc, in, op, 3 * n); }
static int same_int3(const void *a, const void *b, long long i)
{
    return same_int(a, b, 3 * i) && same_int(a, b, 3 * i + 1) && same_int(a, b, 3 * i + 2);
}
static void show_int3(const void *buf, long long i, char *out, size_t len)
{
    const int *x = (const int *)buf + 3 * i;
    snprintf(out, len, "{%d, %d, %d}", x[0], x[1], x[2]);
}

/* A vector type {int, hole, int}: the reduction touches ints 0 and 2 only; the
 * hole keeps what the receive buffer held. */
#define HOLE 0x5EED
static void fill_holes(void *buf, enum op op, int r, int p, long long n)
{
    int *b = (int *)buf;
    for (long long i = 0; i < n; i++) {
        b[3 * i] = (int)int_value(op, 1, sizeof(int), r, 2 * i, p);
        b[3 * i + 1] = HOLE + r;
        b[3 * i + 2] = (int)int_value(op, 1, sizeof(int), r, 2 * i + 1, p);
    }
}
static void fold_holes(void *acc, const void *in, enum op op, long long n)
{
    int *a = (int *)acc;
    const int *x = (const int *)in;
    for (long long i = 0; i < n; i++) {
        fold_int(a + 3 * i, x + 3 * i, op, 1);
        fold_int(a + 3 * i + 2, x + 3 * i + 2, op, 1);
    }
}

/* 2x2 matrices of unsigned ints (mod 2^32), multiplied in rank order: associative, not commutative. */
static void fill_mat(void *buf, enum op op, int r, int p, long long n) { fill_uint(buf, op, r, p, 4 * n); }
static void matmul(unsigned *a, const unsigned *x) /* a = x * a (x comes from lower ranks) */
{
    unsigned c0 = x[0] * a[0] + x[1] * a[2], c1 = x[0] * a[1] + x[1] * a[3];
    unsigned c2 = x[2] * a[0] + x[3] * a[2], c3 = x[2] * a[1] + x[3] * a[3];
    a[0] = c0, a[1] = c1, a[2] = c2, a[3] = c3;
}
static void fold_mat(void *acc, const void *in, enum op op, long long n)
{
    unsigned *a = (unsigned *)acc;
    const unsigned *x = (const unsigned *)in;
    for (long long i = 0; i < n; i++) {
        if (op == COPY) {
            memcpy(a + 4 * i, x + 4 * i, 4 * sizeof(unsigned));
        } else { /* acc holds the product of the lower ranks: acc = acc * in */
            unsigned t[4];
            memcpy(t, x + 4 * i, sizeof t);
            matmul(t, a + 4 * i);
            memcpy(a + 4 * i, t, sizeof t);
        }
    }
}
static int same_mat(const void *a, const void *b, long long i)
{
    return memcmp((const unsigned *)a + 4 * i, (const unsigned *)b + 4 * i, 4 * sizeof(unsigned)) == 0;
}
static void show_mat(const void *buf, long long i, char *out, size_t len)
{
    const unsigned *x = (const unsigned *)buf + 4 * i;
    snprintf(out, len, "[[%u, %u], [%u, %u]]", x[0], x[1], x[2], x[3]);
}

/* The user-defined ops, as MPI_User_function. */
static MPI_Datatype holes_type;
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int size = 0;
    if (*dt == holes_type) {
        fold_holes(inout, in, USER_SUM, *len);
        return;
    }
    PMPI_Type_size(*dt, &size); /* MPI_INT or 3 x MPI_INT */
    fold_int(inout, in, USER_SUM, (long long)*len * (size / (int)sizeof(int)));
}
static void user_matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++) matmul((unsigned *)inout + 4 * i, (const unsigned *)in + 4 * i);
}

#define TYPE(name, mpi, sfx, ctype, ops) \
    {name, mpi, sizeof(ctype), ops, fill_##sfx, fold_##sfx, same_##sfx, show_##sfx, 0}

static struct dtype dtypes[64];
static int ndtypes;

static void add(struct dtype t)
{
    if (t.type == MPI_DATATYPE_NULL) return;
    if (ndtypes == (int)(sizeof dtypes / sizeof dtypes[0])) abort();
    dtypes[ndtypes++] = t;
}

static void setup_types(void)
{
    MPI_Datatype int3, holes, mat;
#ifdef MPICH_VERSION
    add((struct dtype)TYPE("MPI_CHAR", MPI_CHAR, char, char, OPS_INT)); /* an MPICH extension */
#endif
    add((struct dtype)TYPE("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, schar, signed char, OPS_INT));
    add((struct dtype)TYPE("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, uchar, unsigned char, OPS_INT));
    add((struct dtype)TYPE("MPI_BYTE", MPI_BYTE, uchar, unsigned char, OPS_BYTE));
    add((struct dtype)TYPE("MPI_SHORT", MPI_SHORT, short, short, OPS_INT));
    add((struct dtype)TYPE("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, ushort, unsigned short, OPS_INT));
    add((struct dtype)TYPE("MPI_INT", MPI_INT, int, int, OPS_INT));
    add((struct dtype)TYPE("MPI_UNSIGNED", MPI_UNSIGNED, uint, unsigned, OPS_INT));
    add((struct dtype)TYPE("MPI_LONG", MPI_LONG, long, long, OPS_INT));
    add((struct dtype)TYPE("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, ulong, unsigned long, OPS_INT));
    add((struct dtype)TYPE("MPI_LONG_LONG", MPI_LONG_LONG, llong, long long, OPS_INT));
    add((struct dtype)TYPE("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, ullong, unsigned long long, OPS_INT));
    add((struct dtype)TYPE("MPI_INT8_T", MPI_INT8_T, i8, int8_t, OPS_INT));
    add((struct dtype)TYPE("MPI_INT16_T", MPI_INT16_T, i16, int16_t, OPS_INT));
    add((struct dtype)TYPE("MPI_INT32_T", MPI_INT32_T, i32, int32_t, OPS_INT));
    add((struct dtype)TYPE("MPI_INT64_T", MPI_INT64_T, i64, int64_t, OPS_INT));
    add((struct dtype)TYPE("MPI_UINT8_T", MPI_UINT8_T, u8, uint8_t, OPS_INT));
    add((struct dtype)TYPE("MPI_UINT16_T", MPI_UINT16_T, u16, uint16_t, OPS_INT));
    add((struct dtype)TYPE("MPI_UINT32_T", MPI_UINT32_T, u32, uint32_t, OPS_INT));
    add((struct dtype)TYPE("MPI_UINT64_T", MPI_UINT64_T, u64, uint64_t, OPS_INT));
    add((struct dtype)TYPE("MPI_AINT", MPI_AINT, aint, MPI_Aint, OPS_INT));
    add((struct dtype)TYPE("MPI_OFFSET", MPI_OFFSET, offset, MPI_Offset, OPS_INT));
    add((struct dtype)TYPE("MPI_COUNT", MPI_COUNT, count, MPI_Count, OPS_INT));
    add((struct dtype)TYPE("MPI_C_BOOL", MPI_C_BOOL, bool, bool, OPS_LOGICAL));
    add((struct dtype)TYPE("MPI_CXX_BOOL", MPI_CXX_BOOL, bool, bool, OPS_LOGICAL));
    add((struct dtype)TYPE("MPI_FLOAT", MPI_FLOAT, float, float, OPS_FLOAT));
    add((struct dtype)TYPE("MPI_DOUBLE", MPI_DOUBLE, double, double, OPS_FLOAT));
    add((struct dtype)TYPE("MPI_LONG_DOUBLE", MPI_LONG_DOUBLE, ldouble, long double, OPS_FLOAT));
#if defined(MPIX_C_FLOAT16) && defined(HAVE_FLOAT16)
    add((struct dtype)TYPE("MPIX_C_FLOAT16", MPIX_C_FLOAT16, f16, _Float16, OPS_FLOAT));
#endif
#ifdef MPIX_BFLOAT16 /* MPICH 5.0 reduces bfloat16 with MPI_SUM only (other ops fail an assertion) */
    add((struct dtype)TYPE("MPIX_BFLOAT16", MPIX_BFLOAT16, bf16, uint16_t, B(SUM)));
#endif
    add((struct dtype)TYPE("MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, cfloat, float _Complex, OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, cdouble, double _Complex, OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_C_LONG_DOUBLE_COMPLEX", MPI_C_LONG_DOUBLE_COMPLEX, cldouble, long double _Complex,
                        OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_CXX_FLOAT_COMPLEX", MPI_CXX_FLOAT_COMPLEX, cfloat, float _Complex, OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_CXX_DOUBLE_COMPLEX", MPI_CXX_DOUBLE_COMPLEX, cdouble, double _Complex, OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_CXX_LONG_DOUBLE_COMPLEX", MPI_CXX_LONG_DOUBLE_COMPLEX, cldouble, long double _Complex,
                        OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_FLOAT_INT", MPI_FLOAT_INT, float_int, struct pair_float_int, OPS_PAIR));
    add((struct dtype)TYPE("MPI_DOUBLE_INT", MPI_DOUBLE_INT, double_int, struct pair_double_int, OPS_PAIR));
    add((struct dtype)TYPE("MPI_LONG_INT", MPI_LONG_INT, long_int, struct pair_long_int, OPS_PAIR));
    add((struct dtype)TYPE("MPI_2INT", MPI_2INT, two_int, struct pair_two_int, OPS_PAIR));
    add((struct dtype)TYPE("MPI_SHORT_INT", MPI_SHORT_INT, short_int, struct pair_short_int, OPS_PAIR));
    add((struct dtype)TYPE("MPI_LONG_DOUBLE_INT", MPI_LONG_DOUBLE_INT, ldouble_int, struct pair_ldouble_int, OPS_PAIR));
    /* Fortran types, in the C layout gfortran uses (check_type_extents drops those of another size). */
    add((struct dtype)TYPE("MPI_INTEGER", MPI_INTEGER, int, int, OPS_FORTRAN_INT));
    add((struct dtype)TYPE("MPI_REAL", MPI_REAL, float, float, OPS_FLOAT));
    add((struct dtype)TYPE("MPI_DOUBLE_PRECISION", MPI_DOUBLE_PRECISION, double, double, OPS_FLOAT));
    add((struct dtype)TYPE("MPI_COMPLEX", MPI_COMPLEX, cfloat, float _Complex, OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_DOUBLE_COMPLEX", MPI_DOUBLE_COMPLEX, cdouble, double _Complex, OPS_COMPLEX));
    add((struct dtype)TYPE("MPI_LOGICAL", MPI_LOGICAL, flogical, int, OPS_LOGICAL));
    add((struct dtype)TYPE("MPI_2INTEGER", MPI_2INTEGER, two_int, struct pair_two_int, OPS_PAIR));
    add((struct dtype)TYPE("MPI_2REAL", MPI_2REAL, two_float, struct pair_two_float, OPS_PAIR));
    add((struct dtype)TYPE("MPI_2DOUBLE_PRECISION", MPI_2DOUBLE_PRECISION, two_double, struct pair_two_double,
                        OPS_PAIR));
    /* Derived datatypes (MPICH reduces them with user-defined ops only), and user-defined ops. */
    MPI_Type_contiguous(3, MPI_INT, &int3);
    MPI_Type_commit(&int3);
    add((struct dtype){"contiguous 3 x MPI_INT", int3, 3 * sizeof(int), B(USER_SUM), fill_int3, fold_int3,
                       same_int3, show_int3, 0});
    add((struct dtype){"contiguous 3 x MPI_INT", int3, 3 * sizeof(int), B(SUM) | B(MAX), fill_int3, fold_int3,
                       same_int3, show_int3, 1});
    MPI_Type_vector(2, 1, 2, MPI_INT, &holes);
    MPI_Type_commit(&holes);
    holes_type = holes;
    add((struct dtype){"vector {int, hole, int}", holes, 3 * sizeof(int), B(USER_SUM), fill_holes, fold_holes,
                       same_int3, show_int3, 0});
    MPI_Type_contiguous(4, MPI_UNSIGNED, &mat);
    MPI_Type_commit(&mat);
    add((struct dtype){"contiguous 2x2 MPI_UNSIGNED", mat, 4 * sizeof(unsigned), B(USER_MATMUL), fill_mat, fold_mat,
                       same_mat, show_mat, 0});
    add((struct dtype)TYPE("MPI_INT", MPI_INT, int, int, B(USER_SUM)));
    MPI_Op_create(user_sum, 1, &user_ops[USER_SUM]);
    MPI_Op_create(user_matmul, 0, &user_ops[USER_MATMUL]);
}

#endif /* CHECK_VALUES_TYPES_H */
