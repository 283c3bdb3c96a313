/* collc_check.h: COLLC_SHIM_CHECK=1, every interposed call checked against the PMPI collective.
 *
 * The call also runs the PMPI collective into a separate buffer, and the results are compared; the first
 * element that differs ends the job (collc_fatal) naming it.  The rule for floating-point sums and products,
 * and for schedules with compression points, is in collc_shim.h.  Data movement is compared byte for byte, as
 * packed bytes (the signature's), whatever each rank's datatype.
 */
#ifndef COLLC_CHECK_H
#define COLLC_CHECK_H

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "collc_shim.h"
/* ---------------------------------------------------------------------------
 * COLLC_SHIM_CHECK
 * ------------------------------------------------------------------------- */

/* Floating-point view of a datatype for the comparison: its component type
 * (0 none, 1 float, 2 double, 3 long double) and components per element. */
struct collc_fview {
    int kind, parts;
};

static inline struct collc_fview collc_fview_of(MPI_Datatype dt, MPI_Count size)
{
    struct collc_fview v = {0, 1};
    if (dt == MPI_FLOAT) v.kind = 1;
    else if (dt == MPI_DOUBLE) v.kind = 2;
    else if (dt == MPI_LONG_DOUBLE) v.kind = 3;
    else if (dt == MPI_C_FLOAT_COMPLEX || dt == MPI_CXX_FLOAT_COMPLEX) v.kind = 1, v.parts = 2;
    else if (dt == MPI_C_DOUBLE_COMPLEX || dt == MPI_CXX_DOUBLE_COMPLEX) v.kind = 2, v.parts = 2;
    else if (dt == MPI_C_LONG_DOUBLE_COMPLEX || dt == MPI_CXX_LONG_DOUBLE_COMPLEX) v.kind = 3, v.parts = 2;
    else if (dt == MPI_REAL || dt == MPI_REAL4 || dt == MPI_REAL8 || dt == MPI_DOUBLE_PRECISION)
        v.kind = size == 4 ? 1 : size == 8 ? 2 : 0;
    else if (dt == MPI_COMPLEX || dt == MPI_DOUBLE_COMPLEX)
        v.kind = size == 8 ? 1 : size == 16 ? 2 : 0, v.parts = 2;
    return v;
}

static inline long double collc_fget(const char *buf, int kind, MPI_Count i)
{
    switch (kind) {
    case 1: { float x; memcpy(&x, buf + i * (MPI_Count)sizeof x, sizeof x); return x; }
    case 2: { double x; memcpy(&x, buf + i * (MPI_Count)sizeof x, sizeof x); return x; }
    default: { long double x; memcpy(&x, buf + i * (MPI_Count)sizeof x, sizeof x); return x; }
    }
}

static inline long double collc_feps(int kind)
{
    return kind == 1 ? FLT_EPSILON : kind == 2 ? DBL_EPSILON : LDBL_EPSILON;
}

static inline long double collc_ftiny(int kind)
{
    return kind == 1 ? FLT_MIN : kind == 2 ? DBL_MIN : LDBL_MIN;
}

/* The largest |component| among n elements of `buf` (0 when the type is not floating-point). */
static inline double collc_input_scale(const void *buf, MPI_Count n, MPI_Datatype dt, MPI_Count size)
{
    struct collc_fview v = collc_fview_of(dt, size);
    long double m = 0;
    if (v.kind == 0) return 0;
    for (MPI_Count i = 0; i < n * v.parts; i++) {
        long double x = fabsl(collc_fget((const char *)buf, v.kind, i));
        if (x > m) m = x;
    }
    return (double)m;
}

/* Packs n elements to their significant bytes (no padding); returns malloc'ed memory. */
static inline char *collc_packed(const struct collc_call *c, const void *buf, MPI_Count n, MPI_Count *len)
{
    MPI_Count position = 0;
    char *out = (char *)malloc((size_t)(n * c->usize) + 1);
    if (out == NULL) collc_fatal(c, "COLLC_SHIM_CHECK: out of memory");
#if MPI_VERSION >= 4
    PMPI_Pack_c(buf, n, c->unit, out, n * c->usize, &position, MPI_COMM_SELF);
#else
    {
        int at = 0;
        PMPI_Pack(buf, (int)n, c->unit, out, (int)(n * c->usize), &at, MPI_COMM_SELF);
        position = at;
    }
#endif
    *len = position;
    return out;
}

/* Compares n elements of our result `got` with PMPI's `ref`; aborts on the first difference.
 * `rounded`: the elements are floating-point MPI_SUM or MPI_PROD results; scale: S of the rule above. */
static inline void collc_compare(const struct collc_call *c, const void *got, const void *ref, MPI_Count n,
                                 int rounded, double scale)
{
    struct collc_fview v = collc_fview_of(c->unit, c->usize);
    long double zbound = 0; /* compression points: the error bound, scaled to the inputs */
    if (c->sched->ncodecs > 0) {
        double a = c->op == MPI_SUM ? scale / c->size : collc_input_scale(ref, n, c->unit, c->usize);
        zbound = (c->extent == 8 ? c->sched->error_bound64 : c->sched->error_bound) *
                 (c->sched->bound_scales && a > 1 ? a : 1);
    }
    if (v.kind != 0) {
        long double eps = collc_feps(v.kind), p = c->size;
        for (MPI_Count i = 0; i < n; i++) {
            long double mag = 0;
            for (int k = 0; k < v.parts; k++) {
                long double a = fabsl(collc_fget((const char *)got, v.kind, i * v.parts + k));
                long double b = fabsl(collc_fget((const char *)ref, v.kind, i * v.parts + k));
                mag = fmaxl(mag, fmaxl(a, b));
            }
            for (int k = 0; k < v.parts; k++) {
                long double a = collc_fget((const char *)got, v.kind, i * v.parts + k);
                long double b = collc_fget((const char *)ref, v.kind, i * v.parts + k);
                long double tol = 0;
                if (a == b || (a != a && b != b)) continue;
                if ((rounded || zbound > 0) && isfinite(a) && isfinite(b)) {
                    tol = rounded ? 4 * p * eps * fmaxl(mag, (long double)scale) : 0;
                    if (rounded && c->op == MPI_PROD) tol += p * collc_ftiny(v.kind);
                    tol += zbound;
                    if (fabsl(a - b) <= tol) continue;
                }
                collc_fatal(c, "COLLC_SHIM_CHECK: element %lld%s differs from PMPI: %.21Lg (collc) != %.21Lg (PMPI), "
                            "tolerance %.3Lg", (long long)i, k ? " (imaginary part)" : "", a, b, tol);
                return;
            }
        }
        return;
    }
    {
        MPI_Count la, lb;
        char *a = collc_packed(c, got, n, &la), *b = collc_packed(c, ref, n, &lb);
        for (MPI_Count i = 0; i < la && i < lb; i++) {
            if (a[i] != b[i]) {
                MPI_Count e = c->usize > 0 ? i / c->usize : 0;
                enum collc_elem k = collc_elem_of(c->unit);
                if (k >= COLLC_ELEM_I8 && k <= COLLC_ELEM_U64 && c->usize > 0 && c->usize <= 8) {
                    long long x = 0, y = 0;
                    int is_signed = k == COLLC_ELEM_I8 || k == COLLC_ELEM_I16 || k == COLLC_ELEM_I32 ||
                                    k == COLLC_ELEM_I64;
                    size_t width = (size_t)c->usize & 15u; /* 1..8, as tested: bounded for the compiler too */
                    memcpy(&x, a + e * c->usize, width);
                    memcpy(&y, b + e * c->usize, width);
                    if (is_signed && c->usize < 8) { /* sign-extend */
                        int shift = (int)(64 - 8 * c->usize);
                        x = (long long)((unsigned long long)x << shift) >> shift;
                        y = (long long)((unsigned long long)y << shift) >> shift;
                    }
                    collc_fatal(c, "COLLC_SHIM_CHECK: element %lld differs from PMPI: %lld (collc) != %lld (PMPI)",
                                (long long)e, x, y);
                } else {
                    collc_fatal(c, "COLLC_SHIM_CHECK: element %lld differs from PMPI (byte %lld of the element)",
                                (long long)e, (long long)(i - e * c->usize));
                }
            }
        }
        free(a);
        free(b);
    }
}

/* S of the rule above: p times the largest |input| on any rank, for floating-point MPI_SUM; else 0. */
static inline double collc_check_scale(const struct collc_call *c, MPI_Comm comm, const void *input, MPI_Count n)
{
    double m = 0;
    if (c->op != MPI_SUM) return 0;
    m = collc_input_scale(input, n, c->unit, c->usize);
    PMPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, comm);
    return m * c->size;
}

/* A buffer for PMPI's reference result, once every rank is known to have passed the same count. */
static inline char *collc_check_buffer(const struct collc_call *c, MPI_Count elems)
{
    long long range[2] = {(long long)c->n, -(long long)c->n}; /* work elements: the signature's */
    char *buf;
    PMPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG_LONG, MPI_MAX, c->comm);
    if (range[0] != -range[1])
        collc_fatal(c, "COLLC_SHIM_CHECK: the ranks called with different signatures (from %lld to %lld %s)",
                    -range[1], range[0], c->unit == MPI_BYTE ? "bytes" : "elements");
    buf = (char *)malloc((size_t)(elems * c->extent) + 1);
    if (buf == NULL) collc_fatal(c, "COLLC_SHIM_CHECK: out of memory");
    return buf;
}

#endif /* COLLC_CHECK_H */
