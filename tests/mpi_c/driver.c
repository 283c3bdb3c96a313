/* driver.c: checks an MPI collective, element by element, against values computed here.
 *
 *   mpiexec -n P ./driver COLLECTIVE [--root R] [--quick] [--split] [--dup] [--api SYMBOL]
 *
 * COLLECTIVE is allreduce, allgather, allgatherv, reduce_scatter_block,
 * reduce_scatter, bcast, reduce, alltoall, alltoallv, gather, scatter, scan,
 * exscan or barrier (allgatherv, reduce_scatter, alltoallv: unequal counts,
 * some 0).  The driver calls the standard MPI entry points (MPI_X and, with
 * MPI-4, MPI_X_c, alternately), so that a library preloaded with LD_PRELOAD
 * is what runs.  Inputs are a deterministic function of (rank, index), small
 * integers, so that every floating-point result is exact in any order of
 * combination; the expected result of every element is folded here, rank by
 * rank.  Every receive buffer is followed by guard elements that must stay
 * untouched.
 *
 *   --quick     fewer datatypes and ops, no large counts
 *   --split     also run on the two halves of MPI_COMM_WORLD (split by rank parity)
 *   --dup       also run on a few duplicates of MPI_COMM_WORLD, freed after use
 *   --api SYM   allreduce only: also call SYM (collc_<algorithm>_allreduce, found with
 *               dlsym) and, on the halves, expect COLLC_ERR_UNSUPPORTED (-1) from it
 *
 * The failure tally uses PMPI_Allreduce, so an interposed collective cannot hide
 * its own failures.  Exit status: 0 when every case passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define GUARD 8
#define GUARD_BYTE 0x5a

enum ty { T_FLOAT, T_DOUBLE, T_LDOUBLE, T_SCHAR, T_UCHAR, T_SHORT, T_INT, T_UNSIGNED, T_LONG, T_LLONG, T_U64,
          T_INT8, T_DOUBLE_INT, T_NTYPES };

static const struct {
    const char *name;
    int is_int, is_signed;
} TYPES[T_NTYPES] = {
    [T_FLOAT] = {"MPI_FLOAT", 0, 1},   [T_DOUBLE] = {"MPI_DOUBLE", 0, 1},       [T_LDOUBLE] = {"MPI_LONG_DOUBLE", 0, 1},
    [T_SCHAR] = {"MPI_SIGNED_CHAR", 1, 1}, [T_UCHAR] = {"MPI_UNSIGNED_CHAR", 1, 0}, [T_SHORT] = {"MPI_SHORT", 1, 1},
    [T_INT] = {"MPI_INT", 1, 1},       [T_UNSIGNED] = {"MPI_UNSIGNED", 1, 0},   [T_LONG] = {"MPI_LONG", 1, 1},
    [T_LLONG] = {"MPI_LONG_LONG", 1, 1}, [T_U64] = {"MPI_UINT64_T", 1, 0},    [T_INT8] = {"MPI_INT8_T", 1, 1},
    [T_DOUBLE_INT] = {"MPI_DOUBLE_INT", 0, 1},
};

struct double_int {
    double v;
    int k;
};

static MPI_Datatype mpi_type(enum ty t)
{
    switch (t) {
    case T_FLOAT: return MPI_FLOAT;
    case T_DOUBLE: return MPI_DOUBLE;
    case T_LDOUBLE: return MPI_LONG_DOUBLE;
    case T_SCHAR: return MPI_SIGNED_CHAR;
    case T_UCHAR: return MPI_UNSIGNED_CHAR;
    case T_SHORT: return MPI_SHORT;
    case T_INT: return MPI_INT;
    case T_UNSIGNED: return MPI_UNSIGNED;
    case T_LONG: return MPI_LONG;
    case T_LLONG: return MPI_LONG_LONG;
    case T_U64: return MPI_UINT64_T;
    case T_INT8: return MPI_INT8_T;
    default: return MPI_DOUBLE_INT;
    }
}

static size_t type_size(enum ty t)
{
    switch (t) {
    case T_FLOAT: return sizeof(float);
    case T_DOUBLE: return sizeof(double);
    case T_LDOUBLE: return sizeof(long double);
    case T_SCHAR: case T_UCHAR: case T_INT8: return 1;
    case T_SHORT: return sizeof(short);
    case T_INT: case T_UNSIGNED: return sizeof(int);
    case T_LONG: return sizeof(long);
    case T_LLONG: case T_U64: return 8;
    default: return sizeof(struct double_int);
    }
}

static void put(void *buf, long long i, enum ty t, long long v)
{
    switch (t) {
    case T_FLOAT: ((float *)buf)[i] = (float)v; break;
    case T_DOUBLE: ((double *)buf)[i] = (double)v; break;
    case T_LDOUBLE: ((long double *)buf)[i] = (long double)v; break;
    case T_SCHAR: case T_INT8: ((signed char *)buf)[i] = (signed char)v; break;
    case T_UCHAR: ((unsigned char *)buf)[i] = (unsigned char)v; break;
    case T_SHORT: ((short *)buf)[i] = (short)v; break;
    case T_INT: ((int *)buf)[i] = (int)v; break;
    case T_UNSIGNED: ((unsigned *)buf)[i] = (unsigned)v; break;
    case T_LONG: ((long *)buf)[i] = (long)v; break;
    case T_LLONG: ((long long *)buf)[i] = v; break;
    case T_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    default: ((struct double_int *)buf)[i].v = (double)(v >> 8), ((struct double_int *)buf)[i].k = (int)(v & 255);
    }
}

static long long get(const void *buf, long long i, enum ty t)
{
    switch (t) {
    case T_FLOAT: return (long long)((const float *)buf)[i];
    case T_DOUBLE: return (long long)((const double *)buf)[i];
    case T_LDOUBLE: return (long long)((const long double *)buf)[i];
    case T_SCHAR: case T_INT8: return ((const signed char *)buf)[i];
    case T_UCHAR: return ((const unsigned char *)buf)[i];
    case T_SHORT: return ((const short *)buf)[i];
    case T_INT: return ((const int *)buf)[i];
    case T_UNSIGNED: return ((const unsigned *)buf)[i];
    case T_LONG: return ((const long *)buf)[i];
    case T_LLONG: return ((const long long *)buf)[i];
    case T_U64: return (long long)((const uint64_t *)buf)[i];
    default: return ((long long)((const struct double_int *)buf)[i].v << 8) | ((const struct double_int *)buf)[i].k;
    }
}

enum op { O_NONE, O_SUM, O_PROD, O_MAX, O_MIN, O_BAND, O_BOR, O_BXOR, O_LAND, O_LOR, O_MAXLOC, O_MINLOC,
          O_USER_COMM, O_USER_NONCOMM, O_NOPS };

static const char *OP_NAMES[O_NOPS] = {"copy", "MPI_SUM", "MPI_PROD", "MPI_MAX", "MPI_MIN", "MPI_BAND", "MPI_BOR",
                                       "MPI_BXOR", "MPI_LAND", "MPI_LOR", "MPI_MAXLOC", "MPI_MINLOC",
                                       "user commutative sum", "user non-commutative sum"};

static MPI_Op user_ops[2];

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

static MPI_Op mpi_op(enum op o)
{
    switch (o) {
    case O_SUM: return MPI_SUM;
    case O_PROD: return MPI_PROD;
    case O_MAX: return MPI_MAX;
    case O_MIN: return MPI_MIN;
    case O_BAND: return MPI_BAND;
    case O_BOR: return MPI_BOR;
    case O_BXOR: return MPI_BXOR;
    case O_LAND: return MPI_LAND;
    case O_LOR: return MPI_LOR;
    case O_MAXLOC: return MPI_MAXLOC;
    case O_MINLOC: return MPI_MINLOC;
    case O_USER_COMM: return user_ops[0];
    case O_USER_NONCOMM: return user_ops[1];
    default: return MPI_OP_NULL;
    }
}

/* The input of rank r at index i: small values whose every combination is exact. */
static long long value(enum op o, enum ty t, int r, long long i)
{
    int s = TYPES[t].is_signed;
    long long h = (r * 37 + i * 11) % 101;
    switch (o) {
    case O_SUM: case O_USER_COMM: case O_USER_NONCOMM: return s ? (r * 31 + i * 17) % 13 - 6 : (r * 31 + i * 17) % 13;
    case O_PROD: {
        static const long long signed_f[4] = {1, 2, -1, 1}, unsigned_f[4] = {1, 2, 3, 1};
        return (s ? signed_f : unsigned_f)[(r * 5 + i * 3) % 4];
    }
    case O_MAXLOC: case O_MINLOC: return (((r * 3 + i) % 7) << 8) | r; /* ties between ranks */
    case O_LAND: return (r * 7 + i) % 5 == 0 ? 0 : 3;
    case O_LOR: return (r + i) % 4 == 0 ? 5 : 0;
    case O_BAND: case O_BOR: case O_BXOR: return h;
    case O_MAX: case O_MIN: return s ? h - 50 : h;
    default: return t == T_DOUBLE_INT ? (((r * 3 + i) % 7) << 8) | r : (r * 29 + i * 7) % 113; /* data movement */
    }
}

static long long combine(enum op o, long long a, long long b)
{
    switch (o) {
    case O_SUM: case O_USER_COMM: case O_USER_NONCOMM: return a + b;
    case O_PROD: return a * b;
    case O_MAX: return a > b ? a : b;
    case O_MIN: return a < b ? a : b;
    case O_BAND: return a & b;
    case O_BOR: return a | b;
    case O_BXOR: return a ^ b;
    case O_LAND: return (a != 0) && (b != 0);
    case O_LOR: return (a != 0) || (b != 0);
    case O_MAXLOC: case O_MINLOC: {
        long long va = a >> 8, vb = b >> 8;
        if (va == vb) return (a & 255) < (b & 255) ? a : b;
        return (o == O_MAXLOC) == (va > vb) ? a : b;
    }
    default: return b;
    }
}

/* The expected value after the ranks' inputs at index i are reduced (wrapped to the type, as it stores). */
static long long reduced(enum op o, enum ty t, int p, long long i)
{
    long long acc = value(o, t, 0, i);
    char tmp[32];
    for (int r = 1; r < p; r++) acc = combine(o, acc, value(o, t, r, i));
    put(tmp, 0, t, acc);
    return get(tmp, 0, t);
}

/* ---------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------- */

static char *alloc(long long elems, enum ty t)
{
    size_t bytes = (size_t)(elems + GUARD) * type_size(t);
    char *buf = malloc(bytes);
    memset(buf, GUARD_BYTE, bytes);
    return buf;
}

static int guard_ok(const char *buf, long long elems, enum ty t)
{
    const char *g = buf + elems * (long long)type_size(t);
    for (size_t i = 0; i < GUARD * type_size(t); i++)
        if (g[i] != GUARD_BYTE) return 0;
    return 1;
}

static int g_failures, g_cases, g_variant;
static const char *g_coll, *g_api_name;
static int (*g_api)(const void *, void *, MPI_Count, MPI_Datatype, MPI_Op, MPI_Comm);

static void fail(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace, const char *fmt, ...)
{
    int rank;
    va_list ap;
    MPI_Comm_rank(comm, &rank);
    if (g_failures++ < 10) {
        fprintf(stderr, "FAIL %s %s %s count=%lld inplace=%d variant=%d rank %d: ", g_coll, TYPES[t].name,
                OP_NAMES[o], count, inplace, g_variant, rank);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
}

/* Checks buf[0 .. n-1] against want_expr (a function of i), and the guard after `len` elements. */
#define CHECK_ELEMENTS(buf, n, len, want_expr)                                                             \
    do {                                                                                                   \
        for (long long i = 0; i < (n); i++) {                                                              \
            long long want = (want_expr), got = get((buf), i, t);                                          \
            if (got != want) {                                                                             \
                fail(comm, t, o, count, inplace, "element %lld = %lld, expected %lld", i, got, want);      \
                break;                                                                                     \
            }                                                                                              \
        }                                                                                                  \
        if (!guard_ok((buf), (len), t)) fail(comm, t, o, count, inplace, "wrote past element %lld", (len)); \
    } while (0)

/* ---------------------------------------------------------------------------
 * One case per collective
 * ------------------------------------------------------------------------- */

static int call_allreduce(const void *s, void *r, long long n, MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
#if MPI_VERSION >= 4
    if (g_variant == 1) return MPI_Allreduce_c(s, r, n, dt, op, comm);
#endif
    if (g_variant == 2) return g_api(s, r, n, dt, op, comm);
    return MPI_Allreduce(s, r, (int)n, dt, op, comm);
}

static void case_allreduce(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err;
    char *send = alloc(count, t), *recv = alloc(count, t);
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    for (long long i = 0; i < count; i++) put(inplace ? recv : send, i, t, value(o, t, rank, i));
    err = call_allreduce(inplace ? MPI_IN_PLACE : send, recv, count, mpi_type(t), mpi_op(o), comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else
        CHECK_ELEMENTS(recv, count, count, reduced(o, t, p, i));
    free(send);
    free(recv);
}

static void case_allgather(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err;
    char *send = alloc(count, t), *recv;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    recv = alloc(count * p, t);
    for (long long i = 0; i < count; i++) put(inplace ? recv : send, (inplace ? rank * count : 0) + i, t,
                                              value(o, t, rank, i));
#if MPI_VERSION >= 4
    if (g_variant == 1)
        err = MPI_Allgather_c(inplace ? MPI_IN_PLACE : send, count, mpi_type(t), recv, count, mpi_type(t), comm);
    else
#endif
        err = MPI_Allgather(inplace ? MPI_IN_PLACE : send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t),
                            comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else
        CHECK_ELEMENTS(recv, count * p, count * p, value(o, t, (int)(i / count), i % count));
    free(send);
    free(recv);
}

/* Receive counts that differ between ranks, some of them 0 (count 0: all 0). */
static long long v_count(long long count, int r)
{
    return count == 0 ? 0 : (count + 7 * r) % (count + 2);
}

/* MPI_Allgatherv with unequal counts and a gap of one element before each block (displs not in rank order's
 * packed layout); the gaps must stay as they were. */
static void case_allgatherv(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err;
    long long total = 0;
    char *send, *recv;
    int *counts, *displs;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    counts = (int *)malloc(sizeof(int) * (size_t)p);
    displs = (int *)malloc(sizeof(int) * (size_t)p);
    for (int r = 0; r < p; r++) counts[r] = (int)v_count(count, r), displs[r] = (int)(total + r + 1),
                                total += counts[r];
    total += p + 1;
    send = alloc(counts[rank], t);
    recv = alloc(total, t);
    for (long long i = 0; i < total; i++) put(recv, i, t, -1);
    for (long long i = 0; i < counts[rank]; i++) put(inplace ? recv : send, (inplace ? displs[rank] : 0) + i, t,
                                                     value(o, t, rank, i));
    err = MPI_Allgatherv(inplace ? MPI_IN_PLACE : send, counts[rank], mpi_type(t), recv, counts, displs,
                         mpi_type(t), comm);
    if (err != MPI_SUCCESS) {
        fail(comm, t, o, count, inplace, "returned %d", err);
    } else {
        long long at = 0, gap, got;
        char tmp[32];
        put(tmp, 0, t, -1), gap = get(tmp, 0, t); /* -1 as the type holds it */
        for (int r = 0; r < p; r++) { /* the gap, then block r */
            if (get(recv, at, t) != gap) fail(comm, t, o, count, inplace, "gap element %lld written", at);
            at = displs[r];
            for (long long i = 0; i < counts[r]; i++, at++)
                if ((got = get(recv, at, t)) != value(o, t, r, i)) {
                    fail(comm, t, o, count, inplace, "element %lld of rank %d's block = %lld, expected %lld", i, r,
                         got, value(o, t, r, i));
                    break;
                }
        }
        if (!guard_ok(recv, total, t)) fail(comm, t, o, count, inplace, "wrote past element %lld", total);
    }
    free(counts);
    free(displs);
    free(send);
    free(recv);
}

/* MPI_Alltoallv: rank s sends rank d v_count(count, 3s + d) elements, value(s, d * count + i); the blocks lie
 * with gaps, in the order of the ranks sent to (received from) backwards; the gaps must stay as they were. */
static void case_alltoallv(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err, *sc, *sd, *rc, *rd;
    long long stotal = 0, rtotal = 0, gap;
    char *send, *recv, tmp[32];
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    sc = (int *)malloc(sizeof(int) * 4 * (size_t)p), sd = sc + p, rc = sc + 2 * p, rd = sc + 3 * p;
    for (int q = p - 1; q >= 0; q--) {
        sc[q] = (int)v_count(count, 3 * rank + q), sd[q] = (int)(stotal + 1), stotal += sc[q] + 1;
        /* MPI_IN_PLACE: the send blocks are the receive blocks, so what q sends this rank is what it gets */
        rc[q] = (int)(inplace ? v_count(count, 4 * (rank + q)) % 5 : v_count(count, 3 * q + rank));
        rd[q] = (int)(rtotal + 2), rtotal += rc[q] + 2;
    }
    send = alloc(stotal, t);
    recv = alloc(rtotal, t);
    put(tmp, 0, t, -1), gap = get(tmp, 0, t);
    for (long long i = 0; i < rtotal; i++) put(recv, i, t, -1);
    for (int q = 0; q < p; q++)
        for (long long i = 0; i < (inplace ? rc[q] : sc[q]); i++)
            put(inplace ? recv : send, (inplace ? rd[q] : sd[q]) + i, t, value(o, t, rank, q * count + i));
    err = MPI_Alltoallv(inplace ? MPI_IN_PLACE : send, sc, sd, mpi_type(t), recv, rc, rd, mpi_type(t), comm);
    if (err != MPI_SUCCESS) {
        fail(comm, t, o, count, inplace, "returned %d", err);
    } else {
        long long at = 0;
        for (int q = p - 1; q >= 0; q--) {
            if (get(recv, at, t) != gap) fail(comm, t, o, count, inplace, "gap element %lld written", at);
            at = rd[q];
            for (long long i = 0; i < rc[q]; i++, at++)
                if (get(recv, at, t) != value(o, t, q, rank * count + i)) {
                    fail(comm, t, o, count, inplace, "element %lld of rank %d's block = %lld, expected %lld", i, q,
                         get(recv, at, t), value(o, t, q, rank * count + i));
                    break;
                }
        }
        if (!guard_ok(recv, rtotal, t)) fail(comm, t, o, count, inplace, "wrote past element %lld", rtotal);
    }
    free(sc);
    free(send);
    free(recv);
}

/* MPI_Reduce_scatter with unequal receive counts, some 0. */
static void case_reduce_scatter(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err;
    long long total = 0, first = 0;
    char *send, *recv;
    int *counts;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    counts = (int *)malloc(sizeof(int) * (size_t)p);
    for (int r = 0; r < p; r++) {
        counts[r] = (int)v_count(count, r);
        if (r < rank) first += counts[r];
        total += counts[r];
    }
    send = alloc(total, t);
    recv = alloc(inplace ? total : counts[rank], t);
    for (long long i = 0; i < total; i++) put(inplace ? recv : send, i, t, value(o, t, rank, i));
    err = MPI_Reduce_scatter(inplace ? MPI_IN_PLACE : send, recv, counts, mpi_type(t), mpi_op(o), comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else
        CHECK_ELEMENTS(recv, counts[rank], inplace ? total : counts[rank], reduced(o, t, p, first + i));
    free(counts);
    free(send);
    free(recv);
}

static void case_reduce_scatter_block(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err;
    char *send, *recv;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    send = alloc(count * p, t);
    recv = alloc(inplace ? count * p : count, t);
    for (long long i = 0; i < count * p; i++) put(inplace ? recv : send, i, t, value(o, t, rank, i));
#if MPI_VERSION >= 4
    if (g_variant == 1)
        err = MPI_Reduce_scatter_block_c(inplace ? MPI_IN_PLACE : send, recv, count, mpi_type(t), mpi_op(o), comm);
    else
#endif
        err = MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(t), mpi_op(o), comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else
        CHECK_ELEMENTS(recv, count, inplace ? count * p : count, reduced(o, t, p, rank * count + i));
    for (long long i = count; inplace && i < count * p; i++) /* the other blocks stay as they were */
        if (get(recv, i, t) != value(o, t, rank, i)) {
            fail(comm, t, o, count, inplace, "in-place input element %lld changed", i);
            break;
        }
    free(send);
    free(recv);
}

static int g_root;

/* The root on `comm`: the one asked for, or the last rank of a smaller communicator. */
static int root_of(MPI_Comm comm)
{
    int p;
    MPI_Comm_size(comm, &p);
    return g_root < p ? g_root : p - 1;
}

static void case_bcast(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int rank, err, root = root_of(comm);
    char *buf = alloc(count, t);
    MPI_Comm_rank(comm, &rank);
    for (long long i = 0; i < count; i++) put(buf, i, t, rank == root ? value(o, t, root, i) : -1);
#if MPI_VERSION >= 4
    if (g_variant == 1)
        err = MPI_Bcast_c(buf, count, mpi_type(t), root, comm);
    else
#endif
        err = MPI_Bcast(buf, (int)count, mpi_type(t), root, comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else
        CHECK_ELEMENTS(buf, count, count, value(o, t, root, i));
    free(buf);
}

static void case_reduce(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err, root = root_of(comm);
    char *send = alloc(count, t), *recv = alloc(count, t);
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    inplace = inplace && rank == root; /* MPI_IN_PLACE is for the root only */
    for (long long i = 0; i < count; i++) put(inplace ? recv : send, i, t, value(o, t, rank, i));
#if MPI_VERSION >= 4
    if (g_variant == 1)
        err = MPI_Reduce_c(inplace ? MPI_IN_PLACE : send, recv, count, mpi_type(t), mpi_op(o), root, comm);
    else
#endif
        err = MPI_Reduce(inplace ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(t), mpi_op(o), root, comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else if (rank == root)
        CHECK_ELEMENTS(recv, count, count, reduced(o, t, p, i));
    free(send);
    free(recv);
}

static void case_alltoall(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err;
    char *send, *recv;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    send = alloc(count * p, t);
    recv = alloc(count * p, t);
    /* Block d of rank r: value(r, d * count + i). */
    for (long long i = 0; i < count * p; i++) put(inplace ? recv : send, i, t, value(o, t, rank, i));
#if MPI_VERSION >= 4
    if (g_variant == 1)
        err = MPI_Alltoall_c(inplace ? MPI_IN_PLACE : send, count, mpi_type(t), recv, count, mpi_type(t), comm);
    else
#endif
        err = MPI_Alltoall(inplace ? MPI_IN_PLACE : send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t),
                           comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else
        CHECK_ELEMENTS(recv, count * p, count * p, value(o, t, (int)(i / count), rank * count + i % count));
    free(send);
    free(recv);
}

static void case_gather(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err, root = root_of(comm);
    char *send = alloc(count, t), *recv;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    inplace = inplace && rank == root; /* MPI_IN_PLACE is for the root only */
    recv = alloc(count * p, t);
    for (long long i = 0; i < count; i++) put(inplace ? recv : send, (inplace ? rank * count : 0) + i, t,
                                              value(o, t, rank, i));
#if MPI_VERSION >= 4
    if (g_variant == 1)
        err = MPI_Gather_c(inplace ? MPI_IN_PLACE : send, count, mpi_type(t), recv, count, mpi_type(t), root, comm);
    else
#endif
        err = MPI_Gather(inplace ? MPI_IN_PLACE : send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t), root,
                         comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else if (rank == root)
        CHECK_ELEMENTS(recv, count * p, count * p, value(o, t, (int)(i / count), i % count));
    free(send);
    free(recv);
}

static void case_scatter(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err, root = root_of(comm);
    char *send, *recv = alloc(count, t);
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    inplace = inplace && rank == root; /* MPI_IN_PLACE is for the root only */
    send = alloc(count * p, t);
    for (long long i = 0; i < count * p; i++) put(send, i, t, rank == root ? value(o, t, (int)(i / count), i % count)
                                                                          : -1);
#if MPI_VERSION >= 4
    if (g_variant == 1)
        err = MPI_Scatter_c(send, count, mpi_type(t), inplace ? MPI_IN_PLACE : recv, count, mpi_type(t), root, comm);
    else
#endif
        err = MPI_Scatter(send, (int)count, mpi_type(t), inplace ? MPI_IN_PLACE : recv, (int)count, mpi_type(t), root,
                          comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else if (inplace) /* the root's block stays in sendbuf, and so does every block */
        CHECK_ELEMENTS(send, count * p, count * p, value(o, t, (int)(i / count), i % count));
    else
        CHECK_ELEMENTS(recv, count, count, value(o, t, rank, i));
    free(send);
    free(recv);
}

/* MPI_Scan (exclusive 0) or MPI_Exscan (exclusive 1): rank r's result folds ranks 0 .. r (or r - 1). */
static void scan_case(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace, int exclusive)
{
    int rank, err;
    char *send = alloc(count, t), *recv = alloc(count, t);
    MPI_Comm_rank(comm, &rank);
    for (long long i = 0; i < count; i++) put(inplace ? recv : send, i, t, value(o, t, rank, i));
    if (exclusive) {
#if MPI_VERSION >= 4
        if (g_variant == 1)
            err = MPI_Exscan_c(inplace ? MPI_IN_PLACE : send, recv, count, mpi_type(t), mpi_op(o), comm);
        else
#endif
            err = MPI_Exscan(inplace ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(t), mpi_op(o), comm);
    } else {
#if MPI_VERSION >= 4
        if (g_variant == 1)
            err = MPI_Scan_c(inplace ? MPI_IN_PLACE : send, recv, count, mpi_type(t), mpi_op(o), comm);
        else
#endif
            err = MPI_Scan(inplace ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(t), mpi_op(o), comm);
    }
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else if (!exclusive || rank > 0) /* an exscan's rank 0 receives nothing defined */
        CHECK_ELEMENTS(recv, count, count, reduced(o, t, rank + 1 - exclusive, i));
    free(send);
    free(recv);
}

static void case_scan(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    scan_case(comm, t, o, count, inplace, 0);
}

static void case_exscan(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    scan_case(comm, t, o, count, inplace, 1);
}

/* MPI_Barrier: one rank (a different one each case) comes 20 ms late; no rank may leave before it came.  The
 * ranks share one clock on one host. */
static void case_barrier(MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    int p, rank, err;
    double came, left, last = 0;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    PMPI_Barrier(comm);
    if (rank == (int)(g_cases % p)) {
        double until = MPI_Wtime() + 0.02;
        while (MPI_Wtime() < until) {}
    }
    came = MPI_Wtime();
    err = MPI_Barrier(comm);
    left = MPI_Wtime();
    PMPI_Allreduce(&came, &last, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (err != MPI_SUCCESS)
        fail(comm, t, o, count, inplace, "returned %d", err);
    else if (left < last)
        fail(comm, t, o, count, inplace, "left the barrier %.6f s before the last rank came to it", last - left);
}

/* ---------------------------------------------------------------------------
 * The matrix
 * ------------------------------------------------------------------------- */

typedef void (*case_fn)(MPI_Comm, enum ty, enum op, long long, int);

static void run_case(case_fn fn, MPI_Comm comm, enum ty t, enum op o, long long count, int inplace)
{
    g_variant = (g_cases / 2) % (g_api != NULL ? 3 : 2); /* both in-place settings for each entry point */
    g_cases++;
    fn(comm, t, o, count, inplace);
}

static void run_matrix(case_fn fn, int reduces, MPI_Comm comm, int quick)
{
    static const long long counts[] = {0, 1, 3, 1000};
    static const enum ty all_types[] = {T_FLOAT, T_DOUBLE, T_LDOUBLE, T_SCHAR, T_UCHAR, T_SHORT, T_INT,
                                        T_UNSIGNED, T_LONG, T_LLONG, T_U64, T_INT8};
    static const enum ty quick_types[] = {T_FLOAT, T_INT, T_UCHAR};
    static const enum op int_ops[] = {O_SUM, O_PROD, O_MAX, O_MIN, O_BAND, O_BOR, O_BXOR, O_LAND, O_LOR};
    const enum ty *types = quick ? quick_types : all_types;
    int ntypes = quick ? 3 : (int)(sizeof all_types / sizeof all_types[0]);
    int nops = reduces ? (quick ? 2 : (int)(sizeof int_ops / sizeof int_ops[0])) : 1;
    for (int ti = 0; ti < ntypes; ti++)
        for (int oi = 0; oi < nops; oi++) {
            enum op o = reduces ? int_ops[oi] : O_NONE;
            if (!TYPES[types[ti]].is_int && o >= O_BAND) continue;
            for (unsigned ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                for (int inplace = 0; inplace < 2; inplace++)
                    run_case(fn, comm, types[ti], o, counts[ci], inplace);
        }
    if (fn == case_barrier) return; /* no data: its cases are the runs above */
    if (reduces) {
        for (int inplace = 0; inplace < 2; inplace++) {
            run_case(fn, comm, T_DOUBLE_INT, O_MAXLOC, 1000, inplace);
            run_case(fn, comm, T_DOUBLE_INT, O_MINLOC, 3, inplace);
            run_case(fn, comm, T_INT, O_USER_COMM, 1000, inplace);
            run_case(fn, comm, T_INT, O_USER_NONCOMM, 1000, inplace);
        }
    } else {
        run_case(fn, comm, T_DOUBLE_INT, O_NONE, 1000, 0);
    }
    if (!quick) { /* large and uneven */
        static const enum ty big[] = {T_FLOAT, T_DOUBLE, T_INT, T_LDOUBLE};
        long long n = fn == case_allreduce || fn == case_bcast || fn == case_reduce ? 100003 : 25001;
        for (int k = 0; k < 4; k++)
            for (int inplace = 0; inplace < 2; inplace++)
                run_case(fn, comm, big[k], reduces ? O_SUM : O_NONE, n, inplace);
        if (reduces) run_case(fn, comm, T_UCHAR, O_MAX, n, 1);
    }
}

int main(int argc, char **argv)
{
    int rank, size, quick = 0, split = 0, dup = 0, total = 0;
    case_fn fn;
    int reduces;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) {
        fprintf(stderr, "usage: driver COLLECTIVE [--root R] [--quick] [--split] [--dup] [--api SYMBOL]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    g_coll = argv[1];
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--root") && i + 1 < argc) g_root = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--split")) split = 1;
        else if (!strcmp(argv[i], "--dup")) dup = 1;
        else if (!strcmp(argv[i], "--api") && i + 1 < argc) {
            g_api_name = argv[++i];
            *(void **)&g_api = dlsym(RTLD_DEFAULT, g_api_name);
            if (g_api == NULL) {
                fprintf(stderr, "driver: no symbol %s\n", argv[i]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        } else {
            fprintf(stderr, "driver: unknown argument %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Op_create(user_sum, 1, &user_ops[0]);
    MPI_Op_create(user_sum, 0, &user_ops[1]);
    reduces = 1;
    if (!strcmp(g_coll, "allreduce")) fn = case_allreduce;
    else if (!strcmp(g_coll, "allgather")) fn = case_allgather, reduces = 0;
    else if (!strcmp(g_coll, "reduce_scatter_block")) fn = case_reduce_scatter_block;
    else if (!strcmp(g_coll, "bcast")) fn = case_bcast, reduces = 0;
    else if (!strcmp(g_coll, "reduce")) fn = case_reduce;
    else if (!strcmp(g_coll, "alltoall")) fn = case_alltoall, reduces = 0;
    else if (!strcmp(g_coll, "allgatherv")) fn = case_allgatherv, reduces = 0;
    else if (!strcmp(g_coll, "reduce_scatter")) fn = case_reduce_scatter;
    else if (!strcmp(g_coll, "alltoallv")) fn = case_alltoallv, reduces = 0;
    else if (!strcmp(g_coll, "gather")) fn = case_gather, reduces = 0;
    else if (!strcmp(g_coll, "scatter")) fn = case_scatter, reduces = 0;
    else if (!strcmp(g_coll, "scan")) fn = case_scan;
    else if (!strcmp(g_coll, "exscan")) fn = case_exscan;
    else if (!strcmp(g_coll, "barrier")) fn = case_barrier, reduces = 0;
    else {
        fprintf(stderr, "driver: unknown collective %s\n", g_coll);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }

    run_matrix(fn, reduces, MPI_COMM_WORLD, quick);
    if (split) {
        MPI_Comm half;
        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
        if (g_api != NULL) { /* outside what was compiled: an error, not a fallback */
            int x = 1, y = 0, err = g_api(&x, &y, 1, MPI_INT, MPI_SUM, half);
            const char *(*last_error)(void) = NULL;
            char name[256];
            snprintf(name, sizeof name, "%.*s_last_error", (int)(strlen(g_api_name) - strlen("_allreduce")),
                     g_api_name);
            *(void **)&last_error = dlsym(RTLD_DEFAULT, name);
            if (err != -1 || last_error == NULL || last_error()[0] == '\0') {
                fprintf(stderr, "FAIL api on a split communicator: returned %d\n", err);
                g_failures++;
            }
        }
        g_api = NULL; /* the rest on the halves: interposed entry points only */
        run_matrix(fn, reduces, half, 1);
        MPI_Comm_free(&half);
    }
    if (dup) {
        for (int k = 0; k < 3; k++) {
            MPI_Comm d;
            MPI_Comm_dup(MPI_COMM_WORLD, &d);
            run_matrix(fn, reduces, d, 1);
            MPI_Comm_free(&d);
        }
    }
    MPI_Op_free(&user_ops[0]);
    MPI_Op_free(&user_ops[1]);
    PMPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("driver: %s on %d ranks: %d cases per rank, %d failures\n", g_coll, size, g_cases, total);
    MPI_Finalize();
    return total != 0;
}
