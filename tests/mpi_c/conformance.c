/* conformance.c: the cases of MPICH's collective tests (test/mpi/coll: allred*, reduce*, red_scat_block*,
 * redscat*, bcast*, allgather*, allgatherv*, alltoall*, alltoallv*, gather*, scatter*, scantst.c, exscan*,
 * barrier), rewritten: each result is checked against a solution the rank computes itself, as those tests do,
 * through the interposed MPI collective.
 *
 *   mpiexec -n P ./conformance COLLECTIVE [ROOT]
 *
 * COLLECTIVE: allreduce, reduce, reduce_scatter_block, reduce_scatter, scan, exscan, bcast, allgather,
 * allgatherv, alltoall, alltoallv, gather, scatter, barrier.  ROOT (gather): the root at which the preloaded
 * library runs its schedule (see below).
 *
 * Reductions (allred.c's matrix): every predefined op on every type category MPI defines it for (C integers
 * with MPI_AINT, MPI_OFFSET and MPI_COUNT; float and double; the C complex types; MPI_C_BOOL; MPI_BYTE; the
 * MINLOC/MAXLOC pairs), with allred.c's inputs: sums of i on every rank (solution i * P), products of i
 * (solution i^P, computed exactly and rounded once), maxima and minima of i + rank, logical and bitwise
 * constants, pairs (i + rank, rank); counts 0, 1, 10 and 100 (reduce_scatter: per rank), in place and not,
 * every root (reduce).  Scan and exscan (scantst.c, exscan.c, exscan2.c) run the same matrix against the
 * solution over ranks 0 .. r (exscan: 0 .. r - 1; rank 0's result, undefined, is not checked).
 * MPI_Reduce_scatter (redscat.c, redscat2.c, redscat3.c): equal counts at count 10 and, at every count, one of
 * two shapes of unequal counts in turn (a ramp from none on rank 0; none on ranks 1, 4, 7, ...).  Plus a
 * commutative user op (an int sum) and a non-commutative one (2x2 integer matrix products in rank order,
 * allred3.c / red3.c), for the scans and reduce-scatter's unequal counts in place and not.  The scans and
 * MPI_Reduce_scatter alternate with their _c entry points (MPI-4).  Data movement: every root (bcast), counts 0 to 100000, MPI_INT, MPI_DOUBLE, MPI_CHAR, the
 * pair MPI_DOUBLE_INT (whose holes must stay as they were), a struct type (allgather_struct.c), a zero-size
 * type with a nonzero count (bcastzerotype.c), a root sending contiguous ints to ranks that receive a vector
 * (bcast's DTP cases), in place and not.
 *
 * Gather and scatter (gather.c, gather2.c, scatter2.c, scatter3.c, scattern.c): every root, counts 0, 1, 7, 100,
 * 1009 and 4099 of the data movement types (gather_big.c's sizes are left out), in place at the root (gather:
 * MPI_IN_PLACE as its sendbuf, scatter: as its recvbuf, with count 0 and MPI_DATATYPE_NULL beside it) and not;
 * and their DTP cases, counts 0, 1, 5 and 333 of a unit of two ints: the root's blocks in one type, each rank's
 * own block (the root's send or receive block too) in another of the same signature, among MPI_INT x 2, a
 * contiguous type, a vector (a gap inside) and a resized vector (a gap after).  The other ranks pass NULL for
 * the buffer that is not theirs, with count 0 and MPI_DATATYPE_NULL in half the cases; MPI_Gather_c and
 * MPI_Scatter_c alternate with MPI_Gather and MPI_Scatter (MPI-4).  Besides the data: the receive buffers'
 * bytes outside the type map (holes, gaps, the 64 bytes after) keep their junk, and send buffers do not change.
 * MPICH 5.0.2's own MPI_Gather, at 4 ranks and more, gets blocks of the pair or the struct of about 8 KiB and
 * more wrong (its binomial algorithm aborts on a signature mismatch, its nb algorithm returns wrong data), so
 * those cases of counts above 100 run at ROOT only (none without it).
 *
 * Counts given at run time.  Allgatherv (allgatherv.c, allgatherv2.c, allgatherv3.c, allgatherv4.c): the
 * data movement types, base counts m of 0, 1, 10, 1000 and 20000 (the last: MPI_INT and the pair), counts per
 * rank a ramp from 0, none from odd ranks, random in 0 .. m, or all m; the blocks end to end in rank order, with
 * a gap before each, or backwards with gaps (displacements out of rank order); in place and not.  Alltoallv
 * (alltoallv.c, alltoallv0.c): m of 0, 1, 7, 100 and 2000, rank s sending rank d m d elements, m ((s + d) mod 3),
 * m where s + d is odd (empty blocks), m to itself only, or random counts (symmetric ones in place too); send
 * and receive blocks in those layouts.  Both alternate with their _c entry points; the receive buffer's bytes
 * outside the blocks (gaps, holes, the tail) keep their junk, the send buffer does not change.
 *
 * Barrier: one rank late in each round (5 ms, in turn), every rank late by its own amount, 200 barriers in a
 * row, on a duplicate of MPI_COMM_WORLD, on it in reverse rank order, split in halves, split by parity with the
 * ranks backwards, and on MPI_COMM_SELF; a rank that leaves a barrier before the last rank came to it (the
 * host's monotonic clock, which the ranks share) fails.
 *
 * A floating-point or complex MPI_SUM or MPI_PROD result that differs from the solution by no more than
 * rounding (4 P eps relative) is a "rounding" difference, not a failure: the standard lets an algorithm
 * combine the ranks in any order (MPICH's own allred.c fails there when its order differs from left to
 * right).  Each failure prints "FAIL ..." on stderr, each rounding difference "ROUNDING op type" (once per
 * pair and rank); rank 0 prints
 *   conformance: COLLECTIVE: C cases on P ranks, F failures, R rounding
 * with the tallies combined by PMPI_Allreduce, then
 *   conformance: COLLECTIVE: N interposed calls per rank, U of a non-commutative op
 * (barrier: "conformance: barrier: F calls on communicators of P ranks, S on smaller ones", all ranks' together).
 * Exit status 0 when no case failed.
 */
#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

enum cat { INT, FLT, CPLX, BOOL, BYTE, PAIR };
struct type {
    MPI_Datatype dt;
    const char *name;
    enum cat cat;
    int is_signed;
};
struct op {
    MPI_Op op;
    const char *name;
};
/* The MINLOC/MAXLOC pairs (their holes are not data). */
struct long_int { long a; int b; };
struct short_int { short a; int b; };
struct float_int { float a; int b; };
struct double_int { double a; int b; };

#define PUT_PAIR(S, T, p, v, w)                                                                                  \
    do {                                                                                                       \
        struct S x_ = {(T)(v), (w)};                                                                           \
        memcpy((p) + offsetof(struct S, a), &x_.a, sizeof x_.a), memcpy((p) + offsetof(struct S, b), &x_.b, sizeof x_.b); \
    } while (0)
#define GET_PAIR(S, p, v, w)                                                                                     \
    do {                                                                                                       \
        struct S x_;                                                                                           \
        memcpy(&x_.a, (p) + offsetof(struct S, a), sizeof x_.a), memcpy(&x_.b, (p) + offsetof(struct S, b), sizeof x_.b); \
        (v) = x_.a, (w) = x_.b;                                                                                \
    } while (0)

static int rank, P, failures, rounding, cases, noted[64][16];
static int calls, noncommutative; /* interposed calls made by this rank; those of a non-commutative op */
static int library_root = -1; /* gather: the root the library runs on its schedule (argument 2) */
static struct type types[32];
static int ntypes;
static const struct op ops[] = {{MPI_SUM, "MPI_SUM"},   {MPI_PROD, "MPI_PROD"}, {MPI_MAX, "MPI_MAX"},
                                {MPI_MIN, "MPI_MIN"},   {MPI_LAND, "MPI_LAND"}, {MPI_LOR, "MPI_LOR"},
                                {MPI_LXOR, "MPI_LXOR"}, {MPI_BAND, "MPI_BAND"}, {MPI_BOR, "MPI_BOR"},
                                {MPI_BXOR, "MPI_BXOR"}, {MPI_MAXLOC, "MPI_MAXLOC"}, {MPI_MINLOC, "MPI_MINLOC"}};
#define NOPS (int)(sizeof ops / sizeof ops[0])
static const int counts[] = {0, 1, 10, 100};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

static void add(MPI_Datatype dt, const char *name, enum cat cat, int is_signed)
{
    types[ntypes++] = (struct type){dt, name, cat, is_signed};
}

static int defined(const struct type *t, int op)
{
    switch (t->cat) {
    case INT: return op <= 9;
    case FLT: return op <= 3;
    case CPLX: return op <= 1;
    case BOOL: return op >= 4 && op <= 6;
    case BYTE: return op >= 7 && op <= 9;
    default: return op >= 10;
    }
}

static MPI_Aint extent_of(MPI_Datatype dt)
{
    MPI_Aint lb, ext;
    MPI_Type_get_extent(dt, &lb, &ext);
    return ext;
}

static int size_of(MPI_Datatype dt)
{
    int size;
    MPI_Type_size(dt, &size);
    return size;
}

/* Writes value v (an integer; pairs: value v and index w) as one element of t at p. */
static void set(const struct type *t, char *p, long long v, int w)
{
    const int size = size_of(t->dt);
    switch (t->cat) {
    case INT:
    case BYTE:
    case BOOL: {
        int8_t a = (int8_t)v;
        int16_t b = (int16_t)v;
        int32_t c = (int32_t)v;
        int64_t d = (int64_t)v;
        if (t->cat == BOOL) a = v != 0;
        if (size == 1) memcpy(p, &a, 1);
        else if (size == 2) memcpy(p, &b, 2);
        else if (size == 4) memcpy(p, &c, 4);
        else memcpy(p, &d, 8);
        break;
    }
    case FLT:
        if (size == 4) { float x = (float)v; memcpy(p, &x, 4); }
        else { double x = (double)v; memcpy(p, &x, 8); }
        break;
    case CPLX:
        if (size == 8) { float complex x = (float)v; memcpy(p, &x, 8); }
        else { double complex x = (double)v; memcpy(p, &x, 16); }
        break;
    case PAIR:
        if (t->dt == MPI_2INT) { int x[2] = {(int)v, w}; memcpy(p, x, sizeof x); }
        else if (t->dt == MPI_LONG_INT) PUT_PAIR(long_int, long, p, v, w);
        else if (t->dt == MPI_SHORT_INT) PUT_PAIR(short_int, short, p, v, w);
        else if (t->dt == MPI_FLOAT_INT) PUT_PAIR(float_int, float, p, v, w);
        else PUT_PAIR(double_int, double, p, v, w);
        break;
    }
}

/* The components of element p of t as long doubles (pairs: value, index), for comparisons and messages. */
static int get(const struct type *t, const char *p, long double out[2])
{
    const int size = size_of(t->dt);
    out[1] = 0;
    switch (t->cat) {
    case FLT:
        if (size == 4) { float x; memcpy(&x, p, 4); out[0] = x; }
        else { double x; memcpy(&x, p, 8); out[0] = x; }
        return 1;
    case CPLX:
        if (size == 8) { float x[2]; memcpy(x, p, 8); out[0] = x[0], out[1] = x[1]; }
        else { double x[2]; memcpy(x, p, 16); out[0] = x[0], out[1] = x[1]; }
        return 2;
    case PAIR: {
        long double v;
        int w;
        if (t->dt == MPI_2INT) { int x[2]; memcpy(x, p, 8); v = x[0], w = x[1]; }
        else if (t->dt == MPI_LONG_INT) GET_PAIR(long_int, p, v, w);
        else if (t->dt == MPI_SHORT_INT) GET_PAIR(short_int, p, v, w);
        else if (t->dt == MPI_FLOAT_INT) GET_PAIR(float_int, p, v, w);
        else GET_PAIR(double_int, p, v, w);
        out[0] = v, out[1] = w;
        return 2;
    }
    default: {
        unsigned long long u = 0;
        memcpy(&u, p, (size_t)size);
        out[0] = (long double)u;
        return 1;
    }
    }
}

/* Rank r's input element i for op k, and the solution (allred.c's tests). */
static void input(int k, int r, int i, long long *v, int *w)
{
    *w = r;
    switch (k) {
    case 0: case 1: *v = i; break;                     /* sum, prod: i */
    case 2: case 3: *v = i + r; break;                 /* max, min */
    case 4: *v = (r & 1) || i % 3 == 0; break;         /* land: mixed, or all true */
    case 5: *v = (r & 1) && i % 2; break;              /* lor */
    case 6: *v = r == 1 || (i % 4 == 0); break;        /* lxor */
    case 7: *v = r == P - 1 ? i : -1; break;           /* band: ~0 but on the last rank */
    case 8: *v = r & 3; break;                         /* bor */
    case 9: *v = (r == 1) * 0xf0 + (i % 2 ? -1 : 0); break; /* bxor */
    default: *v = i + r, *w = r; break;                /* maxloc, minloc: value i + r at index r */
    }
}

/* The solution of op k for element i over the inputs of ranks 0 .. nr - 1 (nr: P, or a scan's prefix). */
static void solution(int k, int i, int nr, long long *v, int *w)
{
    long long x, y;
    int a, b;
    *w = 0;
    switch (k) {
    case 0: *v = (long long)i * nr; break;
    case 1: *v = 1; for (int r = 0; r < nr; r++) *v *= i; break;
    case 2: case 3: *v = k == 2 ? i + nr - 1 : i; break;
    case 10: *v = i + nr - 1, *w = nr - 1; break;
    case 11: *v = i, *w = 0; break;
    default:
        input(k, 0, i, &x, &a);
        for (int r = 1; r < nr; r++) {
            input(k, r, i, &y, &b);
            if (k == 4) x = x && y;
            else if (k == 5) x = x || y;
            else if (k == 6) x = !x != !y;
            else if (k == 7) x &= y;
            else if (k == 8) x |= y;
            else x ^= y;
        }
        *v = x;
    }
}

static void note_rounding(int t, int k)
{
    rounding++;
    if (!noted[t][k]++) fprintf(stderr, "ROUNDING %s %s\n", ops[k].name, types[t].name);
}

/* Compares n elements of got with the solution of op k for type t over ranks 0 .. nr - 1 (elements offset
 * `first` of the vector). */
static void check(const char *what, int t, int k, const char *got, int n, int first, int nr)
{
    const struct type *ty = &types[t];
    const MPI_Aint ext = extent_of(ty->dt);
    char *want = calloc(1, (size_t)ext);
    for (int i = 0; i < n; i++) {
        long long v;
        int w, m;
        long double a[2], b[2];
        solution(k, first + i, nr, &v, &w);
        set(ty, want, v, w);
        m = get(ty, got + i * ext, a);
        get(ty, want, b);
        for (int j = 0; j < m; j++) {
            long double tol = 4 * P * (size_of(ty->dt) / (ty->cat == CPLX ? 2 : 1) == 4 ? FLT_EPSILON : DBL_EPSILON);
            if (a[j] == b[j]) continue;
            if ((ty->cat == FLT || ty->cat == CPLX) && k <= 1 && fabsl(a[j] - b[j]) <= tol * fabsl(b[j])) {
                note_rounding(t, k);
                continue;
            }
            failures++;
            fprintf(stderr, "conformance: rank %d: FAIL %s %s %s element %d: got %.17Lg, expected %.17Lg\n", rank,
                    what, ops[k].name, ty->name, first + i, a[j], b[j]);
            free(want);
            return;
        }
    }
    free(want);
}

static void fail(const char *fmt, const char *a, int b)
{
    failures++;
    fprintf(stderr, "conformance: rank %d: FAIL ", rank);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
}

/* ---------------------------------------------------------------------------
 * Reductions
 * ------------------------------------------------------------------------- */

/* Receive counts of a reduce-scatter (shape 0: n on every rank; 1: a ramp from 0 on rank 0 to n on the last;
 * 2: 0 on ranks 1, 4, 7, ..., n + r on the others, as redscat2.c and redscat3.c vary them). */
static const char *const shapes[] = {"equal", "ramp", "zeros"};

static void shape_counts(int shape, int n, int *rc)
{
    for (int r = 0; r < P; r++)
        rc[r] = shape == 0 ? n : shape == 1 ? (int)((long long)n * r / (P > 1 ? P - 1 : 1)) : r % 3 == 1 ? 0 : n + r;
}

/* The ranks whose inputs rank `me` receives the reduction of: P, or a scan's prefix (exscan: 0 on rank 0, whose
 * result MPI leaves undefined). */
static int ranks_reduced(const char *coll, int me)
{
    if (strcmp(coll, "scan") == 0) return me + 1;
    if (strcmp(coll, "exscan") == 0) return me;
    return P;
}

#if MPI_VERSION >= 4
#define SCAN_C MPI_Scan_c
#define EXSCAN_C MPI_Exscan_c
#else
#define SCAN_C(s, r, n, t, o, c) MPI_Scan(s, r, (int)(n), t, o, c)
#define EXSCAN_C(s, r, n, t, o, c) MPI_Exscan(s, r, (int)(n), t, o, c)
#endif

/* MPI_Reduce_scatter with counts rc (MPI_Reduce_scatter_c on every other call, MPI-4). */
static int reduce_scatter(const void *send, void *out, const int *rc, MPI_Datatype dt, MPI_Op op)
{
#if MPI_VERSION >= 4
    if (calls % 2) {
        MPI_Count *c = malloc(sizeof(MPI_Count) * (size_t)P);
        int err;
        for (int r = 0; r < P; r++) c[r] = rc[r];
        err = MPI_Reduce_scatter_c(send, out, c, dt, op, MPI_COMM_WORLD);
        free(c);
        return err;
    }
#endif
    return MPI_Reduce_scatter(send, out, rc, dt, op, MPI_COMM_WORLD);
}

/* A scan (exclusive 0) or exscan (1); MPI_Scan_c or MPI_Exscan_c on every other call (MPI-4). */
static int scan(int exclusive, const void *send, void *out, int n, MPI_Datatype dt, MPI_Op op)
{
    if (calls % 2) return exclusive ? EXSCAN_C(send, out, n, dt, op, MPI_COMM_WORLD)
                                    : SCAN_C(send, out, n, dt, op, MPI_COMM_WORLD);
    return exclusive ? MPI_Exscan(send, out, n, dt, op, MPI_COMM_WORLD)
                     : MPI_Scan(send, out, n, dt, op, MPI_COMM_WORLD);
}

static void run_reductions(const char *coll)
{
    const int all = strcmp(coll, "allreduce") == 0, red = strcmp(coll, "reduce") == 0;
    const int rsb = strcmp(coll, "reduce_scatter_block") == 0, rs = strcmp(coll, "reduce_scatter") == 0;
    const int sc = strcmp(coll, "scan") == 0, ex = strcmp(coll, "exscan") == 0;
    const int nr = ranks_reduced(coll, rank), whole = all || red || sc || ex; /* one vector, not P blocks */
    int *rcounts = malloc(sizeof(int) * (size_t)P);
    for (int t = 0; t < ntypes; t++)
        for (int k = 0; k < NOPS; k++) {
            if (!defined(&types[t], k)) continue;
            for (int c = 0; c < NCOUNTS; c++)
                for (int shape = 0; shape < (rs ? 3 : 1); shape++)
                    for (int in_place = 0; in_place < 2; in_place++)
                        for (int root = 0; root < (red ? P : 1); root++) {
                            const MPI_Aint ext = extent_of(types[t].dt);
                            const int n = counts[c];
                            int total = whole ? n : 0, mine = n;
                            char *in, *out, what[128];
                            int err = MPI_SUCCESS;
                            /* reduce_scatter: equal counts at count 10 (reduce_scatter_block has the others), one
                             * shape of unequal counts at every count, in turn */
                            if (rs && (shape == 0 ? c != 2 : shape != (n == 0 ? 2 : 1 + (t + k + c) % 2))) continue;
                            if (rs || rsb) { /* P blocks: rank r's holds rc[r] elements, element j input j */
                                shape_counts(shape, n, rcounts);
                                for (int r = 0; r < P; r++) total += rcounts[r];
                                mine = rcounts[rank];
                            }
                            in = calloc((size_t)total + 1, (size_t)ext), out = calloc((size_t)total + 1, (size_t)ext);
                            if (rs && shape > 0)
                                snprintf(what, sizeof what, "%s count %d (%s counts) in_place %d root %d", coll, n,
                                         shapes[shape], in_place, root);
                            else
                                snprintf(what, sizeof what, "%s count %d in_place %d root %d", coll, n, in_place,
                                         root);
                            for (int i = 0, r = 0, j = 0; i < total; i++, j++) {
                                long long v;
                                int w;
                                while (!whole && j >= rcounts[r]) r++, j = 0; /* element j of block r */
                                input(k, rank, whole ? i : j, &v, &w);
                                set(&types[t], (in_place && (!red || rank == root) ? out : in) + i * ext, v, w);
                            }
                            cases++;
                            calls++;
                            {
                                const void *send = in_place && (!red || rank == root) ? MPI_IN_PLACE : in;
                                if (all) err = MPI_Allreduce(send, out, n, types[t].dt, ops[k].op, MPI_COMM_WORLD);
                                else if (red)
                                    err = MPI_Reduce(send, out, n, types[t].dt, ops[k].op, root, MPI_COMM_WORLD);
                                else if (rsb)
                                    err = MPI_Reduce_scatter_block(send, out, n, types[t].dt, ops[k].op,
                                                                   MPI_COMM_WORLD);
                                else if (rs) err = reduce_scatter(send, out, rcounts, types[t].dt, ops[k].op);
                                else err = scan(ex, send, out, n, types[t].dt, ops[k].op);
                            }
                            if (err != MPI_SUCCESS) fail("%s: error %d", what, err);
                            else if ((!red || rank == root) && nr > 0) check(what, t, k, out, mine, 0, nr);
                            free(in), free(out);
                        }
        }
    free(rcounts);
}

/* A commutative int sum, and 2x2 integer matrices multiplied in rank order (not commutative). */
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int e = 0; e < *len; e++) {
        int *a = (int *)in + 4 * e, *b = (int *)inout + 4 * e, c[4];
        c[0] = a[0] * b[0] + a[1] * b[2], c[1] = a[0] * b[1] + a[1] * b[3];
        c[2] = a[2] * b[0] + a[3] * b[2], c[3] = a[2] * b[1] + a[3] * b[3];
        memcpy(b, c, sizeof c);
    }
}

/* Rank r's matrix [[1, r], [0, 2]]: the product in rank order is [[1, t], [0, 2^P]], t_r = 2 t_(r-1) + r; in
 * another order t differs. */
static void matrix_of(int r, int m[4])
{
    m[0] = 1, m[1] = r, m[2] = 0, m[3] = 2;
}

/* The corner t of the product of ranks 0 .. nr - 1's matrices, in rank order. */
static long long corner(int nr)
{
    long long t = 0;
    for (int r = 1; r < nr; r++) t = 2 * t + r;
    return t;
}

static void run_user_ops(const char *coll)
{
    const int all = strcmp(coll, "allreduce") == 0, red = strcmp(coll, "reduce") == 0;
    const int rs = strcmp(coll, "reduce_scatter") == 0, rsb = strcmp(coll, "reduce_scatter_block") == 0;
    const int sc = strcmp(coll, "scan") == 0, ex = strcmp(coll, "exscan") == 0, whole = all || red || sc || ex;
    const int nr = ranks_reduced(coll, rank);
    MPI_Datatype mat;
    MPI_Op sum, mul;
    if (!whole && !rs && !rsb) return;
    MPI_Type_contiguous(4, MPI_INT, &mat);
    MPI_Type_commit(&mat);
    MPI_Op_create(user_sum, 1, &sum);
    MPI_Op_create(matmul, 0, &mul);
    for (int c = 0; c < NCOUNTS; c++)
        for (int shape = 0; shape < (rs ? 3 : 1); shape++)
            for (int non = 0; non < 2; non++)
                for (int in_place = 0; in_place < (sc || ex || rs ? 2 : 1); in_place++) {
                    const int n = counts[c];
                    int *rc = malloc(sizeof(int) * (size_t)P), total = whole ? n : 0, first = 0;
                    int *in, *out, err;
                    char what[128];
                    if (rs && shape == 1 && n == 0) continue;
                    shape_counts(shape, n, rc);
                    for (int r = 0; !whole && r < P; r++) total += rc[r], first += r < rank ? rc[r] : 0;
                    in = calloc((size_t)total * 4 + 4, sizeof(int)), out = calloc((size_t)total * 4 + 4, sizeof(int));
                    snprintf(what, sizeof what, "%s user op (non-commutative: %d) count %d%s%s in_place %d", coll, non,
                             n, shape ? ", counts " : "", shape ? shapes[shape] : "", in_place);
                    for (int i = 0; i < total; i++) {
                        int *at = (in_place ? out : in) + (non ? 4 * i : i);
                        if (non) matrix_of(rank, at);
                        else *at = i + rank;
                    }
                    cases++;
                    calls++;
                    noncommutative += non;
                    {
                        const void *send = in_place ? MPI_IN_PLACE : in;
                        const MPI_Datatype dt = non ? mat : MPI_INT;
                        const MPI_Op op = non ? mul : sum;
                        if (all) err = MPI_Allreduce(send, out, n, dt, op, MPI_COMM_WORLD);
                        else if (red) err = MPI_Reduce(send, out, n, dt, op, 0, MPI_COMM_WORLD);
                        else if (rs) err = reduce_scatter(send, out, rc, dt, op);
                        else if (rsb) err = MPI_Reduce_scatter_block(send, out, n, dt, op, MPI_COMM_WORLD);
                        else err = scan(ex, send, out, n, dt, op);
                    }
                    if (err != MPI_SUCCESS) fail("%s: error %d", what, err);
                    else if ((!red || rank == 0) && nr > 0)
                        for (int i = 0; i < (whole ? n : rc[rank]); i++) {
                            const int at = first + i; /* its index in the whole vector */
                            const long long want = non ? corner(nr) : (long long)at * nr + (long long)nr * (nr - 1) / 2;
                            if ((non ? out[4 * i + 1] : out[i]) != want ||
                                (non && (out[4 * i] != 1 || out[4 * i + 2] != 0 || out[4 * i + 3] != 1 << nr))) {
                                fail("%s: wrong element %d", what, i);
                                break;
                            }
                        }
                    free(in), free(out), free(rc);
                }
    MPI_Op_free(&sum), MPI_Op_free(&mul);
    MPI_Type_free(&mat);
}

/* ---------------------------------------------------------------------------
 * Data movement
 * ------------------------------------------------------------------------- */

static unsigned char pattern(int r, long i)
{
    return (unsigned char)(r * 37 + i * 11 + (i >> 8) + 1);
}

/* The data types of the data movement cases; the pair's holes and the struct's gap keep their junk. */
static int move_types(MPI_Datatype *out, const char **names)
{
    static int made;
    static MPI_Datatype st, zero;
    if (!made) {
        int len[3] = {1, 2, 1};
        MPI_Aint at[3] = {0, 8, 24};
        MPI_Datatype ts[3] = {MPI_CHAR, MPI_INT, MPI_DOUBLE};
        MPI_Type_create_struct(3, len, at, ts, &st);
        MPI_Type_commit(&st);
        MPI_Type_contiguous(0, MPI_INT, &zero);
        MPI_Type_commit(&zero);
        made = 1;
    }
    out[0] = MPI_INT, out[1] = MPI_DOUBLE, out[2] = MPI_CHAR, out[3] = MPI_DOUBLE_INT, out[4] = st, out[5] = zero;
    names[0] = "MPI_INT", names[1] = "MPI_DOUBLE", names[2] = "MPI_CHAR", names[3] = "MPI_DOUBLE_INT";
    names[4] = "struct", names[5] = "zero-size";
    return 6;
}

/* Writes rank r's signature bytes (block b) into n elements of dt at buf; or checks them. */
static int fill_or_check(void *buf, int n, MPI_Datatype dt, int r, int b, int check_only)
{
    const int size = size_of(dt);
    char *packed = malloc((size_t)size * (size_t)n + 1);
    int pos = 0, bad = 0;
    if (check_only) MPI_Pack(buf, n, dt, packed, size * n, &pos, MPI_COMM_SELF);
    for (long i = 0; i < (long)size * n; i++) {
        if (check_only) bad |= (unsigned char)packed[i] != pattern(r, i + (long)b * 977);
        else packed[i] = (char)pattern(r, i + (long)b * 977);
    }
    if (!check_only) MPI_Unpack(packed, size * n, &pos, buf, n, dt, MPI_COMM_SELF);
    free(packed);
    return bad;
}

static void run_moves(const char *coll)
{
    static const int move_counts[] = {0, 1, 10, 1000, 100000};
    MPI_Datatype dts[8];
    const char *names[8];
    const int nt = move_types(dts, names), bc = strcmp(coll, "bcast") == 0, ag = strcmp(coll, "allgather") == 0;
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < 5; c++)
            for (int v = 0; v < (bc ? P : 2); v++) { /* bcast: every root; else in place or not */
                const int n = bc || ag ? move_counts[c] : move_counts[c] / (c == 4 ? P * 10 : 1);
                const MPI_Aint ext = extent_of(dts[t]);
                const int blocks = bc ? 1 : P;
                char *buf = malloc((size_t)(ext * n * blocks) + 64), *send = malloc((size_t)(ext * n * blocks) + 64);
                char what[128];
                int err, bad = 0;
                memset(buf, 0x5a, (size_t)(ext * n * blocks) + 64);
                snprintf(what, sizeof what, "%s %s count %d %s %d", coll, names[t], n, bc ? "root" : "in_place", v);
                cases++;
                calls++;
                if (bc) {
                    if (rank == v) fill_or_check(buf, n, dts[t], v, 0, 0);
                    err = MPI_Bcast(buf, n, dts[t], v, MPI_COMM_WORLD);
                    bad = err == MPI_SUCCESS && fill_or_check(buf, n, dts[t], v, 0, 1);
                } else {
                    for (int b = 0; b < blocks; b++) /* the send blocks (alltoall: one per destination) */
                        fill_or_check((v ? buf : send) + (ag ? (v ? rank : 0) : b) * n * ext, n, dts[t], rank,
                                      ag ? 0 : b, 0);
                    if (ag) err = MPI_Allgather(v ? MPI_IN_PLACE : send, n, dts[t], buf, n, dts[t], MPI_COMM_WORLD);
                    else err = MPI_Alltoall(v ? MPI_IN_PLACE : send, n, dts[t], buf, n, dts[t], MPI_COMM_WORLD);
                    for (int b = 0; err == MPI_SUCCESS && b < blocks; b++)
                        bad |= fill_or_check(buf + b * n * ext, n, dts[t], b, ag ? 0 : rank, 1);
                }
                if (err != MPI_SUCCESS) fail("%s: error %d", what, err);
                else if (bad) fail("%s: wrong data (%d)", what, bad);
                for (MPI_Aint i = ext * n * blocks; i < ext * n * blocks + 64; i++)
                    if ((unsigned char)buf[i] != 0x5a) {
                        fail("%s: wrote past the buffer (%d)", what, (int)i);
                        break;
                    }
                if (t == 3) /* MPI_DOUBLE_INT: the holes (bytes 12..15 of each element) keep their junk */
                    for (long e = 0; e < (long)n * blocks; e++)
                        if ((unsigned char)buf[e * ext + 12] != 0x5a) {
                            fail("%s: wrote a hole (%d)", what, (int)e);
                            break;
                        }
                free(buf), free(send);
            }
    if (bc) /* a root sending contiguous ints to ranks that receive one vector (every root) */
        for (int root = 0; root < P; root++) {
            MPI_Datatype vec;
            int data[16], err, bad = 0;
            MPI_Type_vector(8, 1, 2, MPI_INT, &vec);
            MPI_Type_commit(&vec);
            for (int i = 0; i < 16; i++) data[i] = rank == root && i < 8 ? 100 + i : -1;
            cases++;
            calls++;
            err = rank == root ? MPI_Bcast(data, 8, MPI_INT, root, MPI_COMM_WORLD)
                               : MPI_Bcast(data, 1, vec, root, MPI_COMM_WORLD);
            for (int i = 0; rank != root && i < 16; i++) bad |= data[i] != (i % 2 ? -1 : 100 + i / 2);
            if (err != MPI_SUCCESS || bad) fail("%s contiguous to vector, root %d: wrong data", coll, root);
            MPI_Type_free(&vec);
        }
}

/* ---------------------------------------------------------------------------
 * Gather and scatter (gather.c, gather2.c, scatter2.c, scatter3.c, scattern.c and their DTP cases)
 * ------------------------------------------------------------------------- */

#define JUNK 0x5a
#define TAIL 64 /* junk bytes after each buffer, which must stay junk */

/* One way of laying out a block: `per` elements of dt per unit of the case's count. */
struct view {
    MPI_Datatype dt;
    int per;
    const char *name;
};

/* The bytes of `bytes` at buf that lie outside n elements of dt (holes, gaps, the tail) and are no longer JUNK. */
static long outside_changed(const char *buf, MPI_Aint bytes, int n, MPI_Datatype dt)
{
    const int size = size_of(dt);
    char *ones = malloc((size_t)size * (size_t)n + 1), *mask = calloc((size_t)bytes + 1, 1);
    int pos = 0;
    long changed = 0;
    memset(ones, 1, (size_t)size * (size_t)n + 1);
    if (n > 0 && size > 0) MPI_Unpack(ones, size * n, &pos, mask, n, dt, MPI_COMM_SELF);
    for (MPI_Aint i = 0; i < bytes; i++) changed += !mask[i] && (unsigned char)buf[i] != JUNK;
    free(ones), free(mask);
    return changed;
}

static void fail_case(const char *what, const char *how, long detail)
{
    failures++;
    fprintf(stderr, "conformance: rank %d: FAIL %s: %s (%ld)\n", rank, what, how, detail);
}

#if MPI_VERSION >= 4
#define GATHER_C MPI_Gather_c
#define SCATTER_C MPI_Scatter_c
#else
#define GATHER_C(s, n, t, r, m, u, root, c) MPI_Gather(s, (int)(n), t, r, (int)(m), u, root, c)
#define SCATTER_C(s, n, t, r, m, u, root, c) MPI_Scatter(s, (int)(n), t, r, (int)(m), u, root, c)
#endif

/* One gather or scatter of n units from or to `root`: the root's blocks in view `at_root`, each rank's own block
 * (the root's too, when not in place) in view `own`.  Ranks other than the root pass their insignificant
 * arguments as NULL buffers, and on every other case as count 0 and MPI_DATATYPE_NULL. */
static void rooted_case(int gather, struct view at_root, struct view own, int n, int root, int in_place)
{
    const MPI_Aint rext = extent_of(at_root.dt), oext = extent_of(own.dt);
    const int rn = n * at_root.per, on = n * own.per, me = rank == root;
    const MPI_Aint rbytes = rext * rn * P, obytes = oext * on;
    char *blocks = me ? malloc((size_t)rbytes + TAIL) : NULL, *mine = malloc((size_t)obytes + TAIL);
    char *keep = NULL, what[160];
    const int large = cases % 2, nulls = cases % 4 >= 2;
    int err, bad = 0;
    snprintf(what, sizeof what, "%s %s%s%s count %d root %d in_place %d", gather ? "gather" : "scatter",
             at_root.name, strcmp(at_root.name, own.name) ? " to " : "", strcmp(at_root.name, own.name) ? own.name : "",
             n, root, in_place);
    cases++;
    calls++;
    if (me) memset(blocks, JUNK, (size_t)rbytes + TAIL);
    memset(mine, JUNK, (size_t)obytes + TAIL);
    if (gather) {
        fill_or_check(mine, on, own.dt, rank, 0, 0);
        if (me && in_place) fill_or_check(blocks + root * rn * rext, rn, at_root.dt, rank, 0, 0);
    } else if (me) {
        for (int r = 0; r < P; r++) fill_or_check(blocks + r * rn * rext, rn, at_root.dt, r, root + 1, 0);
    }
    if (gather ? !me || !in_place : me) { /* the send buffer must not change */
        const MPI_Aint bytes = gather ? obytes : rbytes;
        keep = malloc((size_t)bytes + TAIL);
        memcpy(keep, gather ? mine : blocks, (size_t)bytes + TAIL);
    }
    {
        const MPI_Datatype none = MPI_DATATYPE_NULL;
        const int skip_count = nulls ? 0 : gather ? rn : on;
        const MPI_Datatype skip_type = nulls ? none : gather ? at_root.dt : own.dt;
        if (gather) {
            const void *send = me && in_place ? MPI_IN_PLACE : mine;
            const int scount = me && in_place ? 0 : on;
            const MPI_Datatype stype = me && in_place ? none : own.dt;
            void *recv = me ? blocks : NULL;
            const int rcount = me ? rn : skip_count;
            const MPI_Datatype rtype = me ? at_root.dt : skip_type;
            err = large ? GATHER_C(send, scount, stype, recv, rcount, rtype, root, MPI_COMM_WORLD)
                        : MPI_Gather(send, scount, stype, recv, rcount, rtype, root, MPI_COMM_WORLD);
        } else {
            const void *send = me ? blocks : NULL;
            const int scount = me ? rn : skip_count;
            const MPI_Datatype stype = me ? at_root.dt : skip_type;
            void *recv = me && in_place ? MPI_IN_PLACE : mine;
            const int rcount = me && in_place ? 0 : on;
            const MPI_Datatype rtype = me && in_place ? none : own.dt;
            err = large ? SCATTER_C(send, scount, stype, recv, rcount, rtype, root, MPI_COMM_WORLD)
                        : MPI_Scatter(send, scount, stype, recv, rcount, rtype, root, MPI_COMM_WORLD);
        }
    }
    if (err != MPI_SUCCESS) {
        fail_case(what, "error", err);
    } else {
        long changed;
        if (gather && me)
            for (int r = 0; r < P; r++) bad |= fill_or_check(blocks + r * rn * rext, rn, at_root.dt, r, 0, 1) << 1;
        if (!gather && !(me && in_place)) bad |= fill_or_check(mine, on, own.dt, rank, root + 1, 1);
        if (bad) fail_case(what, "wrong data", bad);
        if (gather && me && (changed = outside_changed(blocks, rbytes + TAIL, rn * P, at_root.dt)) != 0)
            fail_case(what, "wrote the receive buffer outside its type map (holes, gaps or past the end)", changed);
        if (!gather && !(me && in_place) && (changed = outside_changed(mine, obytes + TAIL, on, own.dt)) != 0)
            fail_case(what, "wrote the receive buffer outside its type map (holes, gaps or past the end)", changed);
        if (keep != NULL && memcmp(keep, gather ? mine : blocks, (size_t)(gather ? obytes : rbytes) + TAIL) != 0)
            fail_case(what, "changed the send buffer", 0);
    }
    free(blocks), free(mine), free(keep);
}

static void run_rooted(const char *coll)
{
    static const int rooted_counts[] = {0, 1, 7, 100, 1009, 4099}; /* 0, 1 and primes */
    static const int dtp_counts[] = {0, 1, 5, 333};
    const int gather = strcmp(coll, "gather") == 0;
    MPI_Datatype dts[8], pair2, vec2;
    const char *names[8];
    const int nt = move_types(dts, names);
    struct view ints, contig, vec, resized;
    /* One unit: two ints; as MPI_INT x 2, a contiguous type of two, a vector of two (stride 3: a gap of two ints
     * inside, an extent of four), and that vector resized to an extent of five (a gap after it too). */
    MPI_Type_contiguous(2, MPI_INT, &pair2);
    MPI_Type_vector(2, 1, 3, MPI_INT, &vec2);
    MPI_Type_commit(&pair2), MPI_Type_commit(&vec2);
    ints = (struct view){MPI_INT, 2, "MPI_INT"}, contig = (struct view){pair2, 1, "contiguous"};
    vec = (struct view){vec2, 1, "vector"};
    {
        MPI_Datatype r;
        MPI_Type_create_resized(vec2, 0, 5 * (MPI_Aint)sizeof(int), &r);
        MPI_Type_commit(&r);
        resized = (struct view){r, 1, "resized vector"};
    }
    for (int t = 0; t < nt; t++) /* one datatype on every rank */
        for (int c = 0; c < (int)(sizeof rooted_counts / sizeof *rooted_counts); c++)
            for (int root = 0; root < P; root++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    struct view v = {dts[t], 1, names[t]};
                    /* MPICH's own gather of the pair's or the struct's holes (see the header): the library's root */
                    if (gather && (t == 3 || t == 4) && rooted_counts[c] > 100 && root != library_root) continue;
                    rooted_case(gather, v, v, rooted_counts[c], root, in_place);
                }
    { /* the root's blocks in one datatype, every rank's own block in another of the same type signature */
        const struct view pairs[][2] = {{contig, ints}, {vec, ints}, {ints, vec}, {resized, contig}, {vec, resized}};
        for (int k = 0; k < (int)(sizeof pairs / sizeof *pairs); k++)
            for (int c = 0; c < (int)(sizeof dtp_counts / sizeof *dtp_counts); c++)
                for (int root = 0; root < P; root++)
                    for (int in_place = 0; in_place < 2; in_place++)
                        rooted_case(gather, pairs[k][0], pairs[k][1], dtp_counts[c], root, in_place);
    }
    MPI_Type_free(&pair2), MPI_Type_free(&vec2), MPI_Type_free(&resized.dt);
}

#include "conformance_counts.h" /* allgatherv, alltoallv, barriers */

int main(int argc, char **argv)
{
    const char *coll = argc > 1 ? argv[1] : "";
    int totals[3], mine[3];
    if (argc > 2) library_root = atoi(argv[2]);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    add(MPI_INT, "MPI_INT", INT, 1), add(MPI_LONG, "MPI_LONG", INT, 1), add(MPI_SHORT, "MPI_SHORT", INT, 1);
    add(MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT", INT, 0), add(MPI_UNSIGNED, "MPI_UNSIGNED", INT, 0);
    add(MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", INT, 0), add(MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", INT, 0);
    add(MPI_INT8_T, "MPI_INT8_T", INT, 1), add(MPI_INT16_T, "MPI_INT16_T", INT, 1);
    add(MPI_INT32_T, "MPI_INT32_T", INT, 1), add(MPI_INT64_T, "MPI_INT64_T", INT, 1);
    add(MPI_UINT8_T, "MPI_UINT8_T", INT, 0), add(MPI_UINT16_T, "MPI_UINT16_T", INT, 0);
    add(MPI_UINT32_T, "MPI_UINT32_T", INT, 0), add(MPI_UINT64_T, "MPI_UINT64_T", INT, 0);
    add(MPI_AINT, "MPI_AINT", INT, 1), add(MPI_OFFSET, "MPI_OFFSET", INT, 1), add(MPI_COUNT, "MPI_COUNT", INT, 1);
    add(MPI_FLOAT, "MPI_FLOAT", FLT, 1), add(MPI_DOUBLE, "MPI_DOUBLE", FLT, 1);
    add(MPI_C_FLOAT_COMPLEX, "MPI_C_FLOAT_COMPLEX", CPLX, 1);
    add(MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX", CPLX, 1);
    add(MPI_C_BOOL, "MPI_C_BOOL", BOOL, 0), add(MPI_BYTE, "MPI_BYTE", BYTE, 0);
    add(MPI_2INT, "MPI_2INT", PAIR, 1), add(MPI_LONG_INT, "MPI_LONG_INT", PAIR, 1);
    add(MPI_SHORT_INT, "MPI_SHORT_INT", PAIR, 1), add(MPI_FLOAT_INT, "MPI_FLOAT_INT", PAIR, 1);
    add(MPI_DOUBLE_INT, "MPI_DOUBLE_INT", PAIR, 1);
    if (strcmp(coll, "allreduce") == 0 || strcmp(coll, "reduce") == 0 || strcmp(coll, "reduce_scatter_block") == 0 ||
        strcmp(coll, "reduce_scatter") == 0 || strcmp(coll, "scan") == 0 || strcmp(coll, "exscan") == 0) {
        run_reductions(coll);
        run_user_ops(coll);
    } else if (strcmp(coll, "allgatherv") == 0) {
        run_allgatherv();
    } else if (strcmp(coll, "alltoallv") == 0) {
        run_alltoallv();
    } else if (strcmp(coll, "barrier") == 0) {
        run_barriers();
    } else if (strcmp(coll, "bcast") == 0 || strcmp(coll, "allgather") == 0 || strcmp(coll, "alltoall") == 0) {
        run_moves(coll);
    } else if (strcmp(coll, "gather") == 0 || strcmp(coll, "scatter") == 0) {
        run_rooted(coll);
    } else {
        if (rank == 0) fprintf(stderr, "usage: conformance COLLECTIVE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    mine[0] = cases, mine[1] = failures, mine[2] = rounding;
    PMPI_Allreduce(mine, totals, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("conformance: %s: %d cases on %d ranks, %d failures, %d rounding\n", coll, totals[0] / P, P, totals[1],
               totals[2]);
    if (strcmp(coll, "barrier") == 0) { /* the calls of all ranks, on communicators of P ranks and of others */
        PMPI_Allreduce(MPI_IN_PLACE, barrier_calls, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            printf("conformance: barrier: %d calls on communicators of %d ranks, %d on smaller ones\n",
                   barrier_calls[0], P, barrier_calls[1]);
    } else if (rank == 0) {
        printf("conformance: %s: %d interposed calls per rank, %d of a non-commutative op\n", coll, calls,
               noncommutative);
    }
    MPI_Finalize();
    return totals[1] != 0;
}
