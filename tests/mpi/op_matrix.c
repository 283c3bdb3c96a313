/* op_matrix.c: every predefined reduction op on every datatype MPI defines it for,
 * through the interposed MPI collective, compared with the MPI library's own algorithm.
 *
 *   mpiexec -n P ./op_matrix COLLECTIVE [--op NAME] [--type NAME] [--counts N,N,...] [--seed S] [--list 1]
 *                                       [--root R]
 *
 * COLLECTIVE is allreduce, reduce_scatter_block, scan, exscan (op x datatype matrix), or
 * allgather, gather or scatter (every datatype, no op; gather and scatter from
 * root R, 0 unless --root says).  Each case (op, datatype, count, in place or not)
 * calls the MPI_* entry point (MPI_X and MPI_X_c alternately: a library preloaded
 * with LD_PRELOAD runs it) and then the PMPI_* collective on the same input, and
 * compares the results element by element (an exscan's rank 0, whose result MPI
 * leaves undefined, compares none: its receive buffer may change, its holes and
 * the elements after it may not).  In place is the root's alone for
 * gather (MPI_IN_PLACE as its sendbuf, its block already in recvbuf) and scatter
 * (as its recvbuf: its result is its block of sendbuf, which must not change);
 * the other ranks' receive buffer of a gather and send buffer of a scatter are
 * not theirs, and must not change either.  The ops and datatypes are those of
 * the MPI standard's table of predefined reductions (MPI-4.1, section 6.9.2)
 * for C: C integers, MPI_AINT/MPI_OFFSET/MPI_COUNT, floating point, MPI_C_BOOL,
 * the C complex types, MPI_BYTE, and the MINLOC/MAXLOC pair types.
 *
 * Inputs are small integers chosen per op so that every order of combination
 * gives the same value (sums of -7..7, products of +-1 with at most a few
 * factors 2 or 1+i), so floating-point results are compared for equality (==:
 * +0 equals -0); integer, boolean and byte results byte for byte; pair results
 * by value and index (padding bytes are not data).  MINLOC/MAXLOC values have
 * many ties with different indices, so the lower index must win.  Logical ops
 * see nonzero values other than 1.  Every receive buffer starts as junk and is
 * followed by guard elements that must stay untouched; so must the holes of the
 * pair types (the bytes between or after value and index: not part of the
 * buffer, MPI leaves them as they were); a send buffer must not change.
 * Failures are tallied with PMPI_Allreduce, so a broken interposed collective
 * cannot hide its own failures.
 *
 * Counts: 0, 1, p - 1, 3p + 2 and 100 elements for allreduce, scan and exscan; 0, 1, 2, 5 and 13
 * per rank (per block) for the others (--counts replaces them); each in place and not.
 *
 * Output: one "FAIL ..." line per failing case and rank (the first two of each op
 * and datatype, 400 at most), on stderr; with --list 1, rank 0 prints every case as
 *   case ENTRY TYPE OP COUNT
 * (TYPE as MPI names it, OP "-" for allgather, gather and scatter); then, on rank 0,
 *   op_matrix: COLLECTIVE: C cases, I interposed calls per rank, on P ranks, F failures
 * where I counts the calls with a nonzero count.  Exit status 0 when all passed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define GUARD 4
#define MAX_PRINTED 400 /* FAIL lines of one rank */
#define MAX_PER_PAIR 2  /* FAIL lines of one rank for one (op, datatype) */

/* The large-count entry points, where the library has them (MPI-4). */
#if MPI_VERSION >= 4
#define LARGE_COUNT 1
#define ALLREDUCE_C MPI_Allreduce_c
#define ALLGATHER_C MPI_Allgather_c
#define REDUCE_SCATTER_BLOCK_C MPI_Reduce_scatter_block_c
#define GATHER_C MPI_Gather_c
#define SCATTER_C MPI_Scatter_c
#define SCAN_C MPI_Scan_c
#define EXSCAN_C MPI_Exscan_c
#else
#define LARGE_COUNT 0
#define ALLREDUCE_C(s, r, n, t, o, c) MPI_Allreduce(s, r, (int)(n), t, o, c)
#define ALLGATHER_C(s, n, t, r, m, u, c) MPI_Allgather(s, (int)(n), t, r, (int)(m), u, c)
#define REDUCE_SCATTER_BLOCK_C(s, r, n, t, o, c) MPI_Reduce_scatter_block(s, r, (int)(n), t, o, c)
#define GATHER_C(s, n, t, r, m, u, root, c) MPI_Gather(s, (int)(n), t, r, (int)(m), u, root, c)
#define SCATTER_C(s, n, t, r, m, u, root, c) MPI_Scatter(s, (int)(n), t, r, (int)(m), u, root, c)
#define SCAN_C(s, r, n, t, o, c) MPI_Scan(s, r, (int)(n), t, o, c)
#define EXSCAN_C(s, r, n, t, o, c) MPI_Exscan(s, r, (int)(n), t, o, c)
#endif

enum coll { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, GATHER, SCATTER, SCAN, EXSCAN, NCOLLS };
#define WHOLE(coll) ((coll) == ALLREDUCE || (coll) == SCAN || (coll) == EXSCAN) /* one vector of count */
#define NO_OP(coll) ((coll) == ALLGATHER || (coll) == GATHER || (coll) == SCATTER)

enum op { SUM, PROD, MIN, MAX, LAND, LOR, LXOR, BAND, BOR, BXOR, MINLOC, MAXLOC, NOPS };

static const char *const OP_NAMES[NOPS] = {"MPI_SUM",  "MPI_PROD", "MPI_MIN", "MPI_MAX",  "MPI_LAND",   "MPI_LOR",
                                           "MPI_LXOR", "MPI_BAND", "MPI_BOR", "MPI_BXOR", "MPI_MINLOC", "MPI_MAXLOC"};

static MPI_Op mpi_op(enum op op)
{
    const MPI_Op ops[NOPS] = {MPI_SUM,  MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND,   MPI_LOR,
                              MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC};
    return ops[op];
}

#define B(op) (1u << (op))
#define OPS_ARITH (B(SUM) | B(PROD) | B(MIN) | B(MAX))
#define OPS_LOGICAL (B(LAND) | B(LOR) | B(LXOR))
#define OPS_BITWISE (B(BAND) | B(BOR) | B(BXOR))
#define OPS_C_INTEGER (OPS_ARITH | OPS_LOGICAL | OPS_BITWISE)
#define OPS_MULTI_LANGUAGE (OPS_ARITH | OPS_BITWISE)
#define OPS_FLOAT OPS_ARITH
#define OPS_COMPLEX (B(SUM) | B(PROD))
#define OPS_PAIR (B(MINLOC) | B(MAXLOC))

/* How the bytes of an element are written, read and compared. */
enum kind { K_INT, K_BOOL, K_FLOAT, K_DOUBLE, K_LDOUBLE, K_CFLOAT, K_CDOUBLE, K_CLDOUBLE };

struct dtype {
    const char *name;
    MPI_Datatype type;
    unsigned ops;
    enum kind kind;   /* of the element, or of a pair's value */
    size_t size;      /* bytes of the element, or of a pair's value */
    int pair;         /* a MINLOC/MAXLOC pair: value at 0, int index at index_at */
    size_t index_at;  /* pairs: offset of the index */
    size_t extent;    /* sizeof the C type: must be MPI's extent */
};

#define PAIR_TYPE(NAME, HANDLE, VT, KIND)                                                          \
    {                                                                                               \
        struct pair_layout { VT v; int i; };                                                        \
        add(NAME, HANDLE, OPS_PAIR, KIND, sizeof(VT), 1, offsetof(struct pair_layout, i),           \
            sizeof(struct pair_layout));                                                            \
    }

static struct dtype types[64];
static int ntypes;

static void add(const char *name, MPI_Datatype type, unsigned ops, enum kind kind, size_t size, int pair,
                size_t index_at, size_t extent)
{
    struct dtype *t = &types[ntypes++];
    t->name = name;
    t->type = type;
    t->ops = ops;
    t->kind = kind;
    t->size = size;
    t->pair = pair;
    t->index_at = index_at;
    t->extent = extent;
}

static void add_types(void)
{
#define INT_TYPE(NAME, HANDLE, T, OPS) add(NAME, HANDLE, OPS, K_INT, sizeof(T), 0, 0, sizeof(T))
    INT_TYPE("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, signed char, OPS_C_INTEGER);
    INT_TYPE("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, unsigned char, OPS_C_INTEGER);
    INT_TYPE("MPI_SHORT", MPI_SHORT, short, OPS_C_INTEGER);
    INT_TYPE("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, unsigned short, OPS_C_INTEGER);
    INT_TYPE("MPI_INT", MPI_INT, int, OPS_C_INTEGER);
    INT_TYPE("MPI_UNSIGNED", MPI_UNSIGNED, unsigned, OPS_C_INTEGER);
    INT_TYPE("MPI_LONG", MPI_LONG, long, OPS_C_INTEGER);
    INT_TYPE("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, unsigned long, OPS_C_INTEGER);
    INT_TYPE("MPI_LONG_LONG_INT", MPI_LONG_LONG_INT, long long, OPS_C_INTEGER);
    INT_TYPE("MPI_LONG_LONG", MPI_LONG_LONG, long long, OPS_C_INTEGER);
    INT_TYPE("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, unsigned long long, OPS_C_INTEGER);
    INT_TYPE("MPI_INT8_T", MPI_INT8_T, int8_t, OPS_C_INTEGER);
    INT_TYPE("MPI_INT16_T", MPI_INT16_T, int16_t, OPS_C_INTEGER);
    INT_TYPE("MPI_INT32_T", MPI_INT32_T, int32_t, OPS_C_INTEGER);
    INT_TYPE("MPI_INT64_T", MPI_INT64_T, int64_t, OPS_C_INTEGER);
    INT_TYPE("MPI_UINT8_T", MPI_UINT8_T, uint8_t, OPS_C_INTEGER);
    INT_TYPE("MPI_UINT16_T", MPI_UINT16_T, uint16_t, OPS_C_INTEGER);
    INT_TYPE("MPI_UINT32_T", MPI_UINT32_T, uint32_t, OPS_C_INTEGER);
    INT_TYPE("MPI_UINT64_T", MPI_UINT64_T, uint64_t, OPS_C_INTEGER);
    INT_TYPE("MPI_AINT", MPI_AINT, MPI_Aint, OPS_MULTI_LANGUAGE);
    INT_TYPE("MPI_OFFSET", MPI_OFFSET, MPI_Offset, OPS_MULTI_LANGUAGE);
    INT_TYPE("MPI_COUNT", MPI_COUNT, MPI_Count, OPS_MULTI_LANGUAGE);
    INT_TYPE("MPI_BYTE", MPI_BYTE, unsigned char, OPS_BITWISE);
    INT_TYPE("MPI_CHAR", MPI_CHAR, char, 0); /* no op: allgather only */
#undef INT_TYPE
    add("MPI_C_BOOL", MPI_C_BOOL, OPS_LOGICAL, K_BOOL, sizeof(_Bool), 0, 0, sizeof(_Bool));
    add("MPI_FLOAT", MPI_FLOAT, OPS_FLOAT, K_FLOAT, sizeof(float), 0, 0, sizeof(float));
    add("MPI_DOUBLE", MPI_DOUBLE, OPS_FLOAT, K_DOUBLE, sizeof(double), 0, 0, sizeof(double));
    add("MPI_LONG_DOUBLE", MPI_LONG_DOUBLE, OPS_FLOAT, K_LDOUBLE, sizeof(long double), 0, 0, sizeof(long double));
    add("MPI_C_COMPLEX", MPI_C_COMPLEX, OPS_COMPLEX, K_CFLOAT, 2 * sizeof(float), 0, 0, 2 * sizeof(float));
    add("MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, OPS_COMPLEX, K_CFLOAT, 2 * sizeof(float), 0, 0,
        2 * sizeof(float));
    add("MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, OPS_COMPLEX, K_CDOUBLE, 2 * sizeof(double), 0, 0,
        2 * sizeof(double));
    add("MPI_C_LONG_DOUBLE_COMPLEX", MPI_C_LONG_DOUBLE_COMPLEX, OPS_COMPLEX, K_CLDOUBLE, 2 * sizeof(long double), 0,
        0, 2 * sizeof(long double));
    PAIR_TYPE("MPI_FLOAT_INT", MPI_FLOAT_INT, float, K_FLOAT);
    PAIR_TYPE("MPI_DOUBLE_INT", MPI_DOUBLE_INT, double, K_DOUBLE);
    PAIR_TYPE("MPI_LONG_INT", MPI_LONG_INT, long, K_INT);
    PAIR_TYPE("MPI_2INT", MPI_2INT, int, K_INT);
    PAIR_TYPE("MPI_SHORT_INT", MPI_SHORT_INT, short, K_INT);
    PAIR_TYPE("MPI_LONG_DOUBLE_INT", MPI_LONG_DOUBLE_INT, long double, K_LDOUBLE);
}

/* ---------------------------------------------------------------------------
 * Values
 * ------------------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element e of rank r's input in case c: a value v, and w (imaginary part, or a pair's index). */
static void input_value(enum op op, int kind_is_complex, int r, long long e, uint64_t c, long long *v, long long *w)
{
    uint64_t h = mix(c * 0x100000001b3ull ^ mix((uint64_t)r * 7919u + 1) ^ mix((uint64_t)e + 0x51ed27));
    *w = 0;
    switch (op) {
    case SUM:
        *v = (long long)(h % 15) - 7;
        *w = (long long)((h >> 8) % 15) - 7;
        break;
    case PROD: /* a unit (+-1, or +-i for complex), times 2 (or 1+i) on at most ceil(p/4) ranks */
        if (kind_is_complex) {
            static const int units[4][2] = {{1, 0}, {0, 1}, {-1, 0}, {0, -1}};
            int u = (int)(h % 4);
            *v = units[u][0], *w = units[u][1];
            if ((r + e) % 4 == 0) {
                long long a = *v, b = *w;
                *v = a - b, *w = a + b;
            }
        } else {
            *v = (h >> 3) & 1 ? -1 : 1;
            if ((r + e) % 4 == 0) *v *= 2;
        }
        break;
    case MIN:
    case MAX: *v = (long long)(h % 41) - 20; break;
    case LAND:
    case LOR:
    case LXOR: /* all nonzero, mostly zero, or mixed; nonzero values other than 1 */
        if (e % 3 == 0) *v = 1 + (long long)(h % 3);
        else if (e % 3 == 1) *v = h % 8 == 0 ? 2 : 0;
        else *v = (long long)(h % 4);
        break;
    case BAND: *v = (long long)(h | mix(h) | mix(h ^ 1)); break;
    case BOR: *v = (long long)(h & mix(h) & mix(h ^ 1)); break;
    case BXOR: *v = (long long)h; break;
    case MINLOC:
    case MAXLOC: /* values -3..3: many ties; indices -1000..1000 */
        *v = (long long)(h % 7) - 3;
        *w = (long long)((h >> 16) % 2001) - 1000;
        break;
    default: *v = 0;
    }
}

static void put_int(char *at, size_t size, long long v)
{
    uint64_t u = (uint64_t)v;
    switch (size) {
    case 1: { uint8_t x = (uint8_t)u; memcpy(at, &x, 1); break; }
    case 2: { uint16_t x = (uint16_t)u; memcpy(at, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)u; memcpy(at, &x, 4); break; }
    default: memcpy(at, &u, 8); break;
    }
}

/* Writes (v, w) as one element of t at `at` (its padding keeps what was there). */
static void put(const struct dtype *t, char *at, long long v, long long w)
{
    switch (t->kind) {
    case K_INT: put_int(at, t->size, v); break;
    case K_BOOL: { _Bool b = v != 0; memcpy(at, &b, sizeof b); break; }
    case K_FLOAT: { float x = (float)v; memcpy(at, &x, sizeof x); break; }
    case K_DOUBLE: { double x = (double)v; memcpy(at, &x, sizeof x); break; }
    case K_LDOUBLE: { long double x = (long double)v; memcpy(at, &x, sizeof x); break; }
    case K_CFLOAT: { float x[2] = {(float)v, (float)w}; memcpy(at, x, sizeof x); break; }
    case K_CDOUBLE: { double x[2] = {(double)v, (double)w}; memcpy(at, x, sizeof x); break; }
    case K_CLDOUBLE: { long double x[2] = {(long double)v, (long double)w}; memcpy(at, x, sizeof x); break; }
    }
    if (t->pair) {
        int i = (int)w;
        memcpy(at + t->index_at, &i, sizeof i);
    }
}

static long double get_float(const char *at, enum kind kind, int part)
{
    switch (kind) {
    case K_FLOAT: case K_CFLOAT: { float x; memcpy(&x, at + part * sizeof x, sizeof x); return x; }
    case K_DOUBLE: case K_CDOUBLE: { double x; memcpy(&x, at + part * sizeof x, sizeof x); return x; }
    default: { long double x; memcpy(&x, at + part * sizeof x, sizeof x); return x; }
    }
}

/* Whether elements a and b are equal in the bytes that carry data. */
static int same(const struct dtype *t, const char *a, const char *b)
{
    int parts = t->kind == K_CFLOAT || t->kind == K_CDOUBLE || t->kind == K_CLDOUBLE ? 2 : 1;
    if (t->pair && memcmp(a + t->index_at, b + t->index_at, sizeof(int)) != 0) return 0;
    if (t->kind == K_INT || t->kind == K_BOOL) return memcmp(a, b, t->size) == 0;
    for (int k = 0; k < parts; k++)
        if (get_float(a, t->kind, k) != get_float(b, t->kind, k)) return 0;
    return 1;
}

static void show(const struct dtype *t, const char *at, char *out, size_t len)
{
    int n;
    if (t->kind == K_INT || t->kind == K_BOOL) {
        uint64_t u = 0;
        memcpy(&u, at, t->size); /* little-endian hosts: the low bytes */
        n = snprintf(out, len, "0x%llx", (unsigned long long)u);
    } else if (t->kind == K_CFLOAT || t->kind == K_CDOUBLE || t->kind == K_CLDOUBLE) {
        n = snprintf(out, len, "%Lg%+Lgi", get_float(at, t->kind, 0), get_float(at, t->kind, 1));
    } else {
        n = snprintf(out, len, "%Lg", get_float(at, t->kind, 0));
    }
    if (t->pair && n >= 0 && (size_t)n < len) {
        int i;
        memcpy(&i, at + t->index_at, sizeof i);
        snprintf(out + n, len - (size_t)n, " index %d", i);
    }
}

/* ---------------------------------------------------------------------------
 * Cases
 * ------------------------------------------------------------------------- */

struct tally {
    long long cases, calls, failures;
};

static int rank, nranks, root;
static int printed, printed_pair, list_cases;
static const char *pair_op;
static const struct dtype *pair_type;

static void fail(const char *coll, const char *entry, const char *op, const struct dtype *t, long long count,
                 int in_place, const char *what)
{
    if (op != pair_op || t != pair_type) pair_op = op, pair_type = t, printed_pair = 0;
    if (printed_pair++ < MAX_PER_PAIR && printed++ < MAX_PRINTED)
        fprintf(stderr, "FAIL coll=%s entry=%s op=%s type=%s count=%lld in_place=%d rank=%d: %s\n", coll, entry, op,
                t->name, count, in_place, rank, what);
}

/* Fills n elements of rank r's input at buf, for case c. */
static void fill(const struct dtype *t, enum op op, char *buf, long long n, int r, uint64_t c)
{
    int cplx = t->kind == K_CFLOAT || t->kind == K_CDOUBLE || t->kind == K_CLDOUBLE;
    for (long long e = 0; e < n; e++) {
        long long v, w;
        input_value(op, cplx, r, e, c, &v, &w);
        put(t, buf + e * (long long)t->extent, v, w);
    }
}

/* Compares got[0..n) with want[0..n); describes the first difference in `what`. Returns the number wrong. */
static long long compare(const struct dtype *t, const char *got, const char *want, long long n, char *what,
                         size_t len)
{
    long long wrong = 0;
    for (long long e = 0; e < n; e++) {
        const char *a = got + e * (long long)t->extent, *b = want + e * (long long)t->extent;
        if (same(t, a, b)) continue;
        if (wrong++ == 0) {
            char x[96], y[96];
            show(t, a, x, sizeof x);
            show(t, b, y, sizeof y);
            snprintf(what, len, "element %lld: got %s, PMPI gives %s", e, x, y);
        }
    }
    return wrong;
}

/* Whether byte b of an element of t lies in a hole of the datatype (between or after a pair's fields). */
static int in_hole(const struct dtype *t, size_t b)
{
    if (!t->pair) return 0;
    return !(b < t->size || (b >= t->index_at && b < t->index_at + sizeof(int)));
}

/* How many hole bytes of n elements differ between buffers a and b. */
static long long holes_changed(const struct dtype *t, const char *a, const char *b, long long n)
{
    long long changed = 0;
    if (!t->pair) return 0;
    for (long long e = 0; e < n; e++)
        for (size_t k = 0; k < t->extent; k++) {
            size_t at = (size_t)e * t->extent + k;
            changed += in_hole(t, k) && a[at] != b[at];
        }
    return changed;
}

/* Runs one case; returns whether it passed on this rank. */
static int run_case(enum coll coll, const struct dtype *t, enum op op, long long count, int in_place, int large,
                    uint64_t c, struct tally *tl)
{
    static const char *const COLL_NAMES[NCOLLS] = {"allreduce", "allgather", "reduce_scatter_block", "gather",
                                                   "scatter",   "scan",      "exscan"};
    static const char *const ENTRIES[NCOLLS][2] = {{"MPI_Allreduce", "MPI_Allreduce_c"},
                                                   {"MPI_Allgather", "MPI_Allgather_c"},
                                                   {"MPI_Reduce_scatter_block", "MPI_Reduce_scatter_block_c"},
                                                   {"MPI_Gather", "MPI_Gather_c"},
                                                   {"MPI_Scatter", "MPI_Scatter_c"},
                                                   {"MPI_Scan", "MPI_Scan_c"},
                                                   {"MPI_Exscan", "MPI_Exscan_c"}};
    const char *entry = ENTRIES[coll][large], *opname = NO_OP(coll) ? "none" : OP_NAMES[op];
    const char *cname = COLL_NAMES[coll];
    const long long ext = (long long)t->extent, p = nranks;
    const int rooted = coll == GATHER || coll == SCATTER, me = rank == root;
    /* In place: every rank, or a gather's or scatter's root alone. */
    const int here_in_place = in_place && (!rooted || me);
    /* Input elements on this rank (a scatter's blocks: the root's; the other ranks' must not change), result
     * elements, and the elements of every buffer (guards included). */
    const long long in_n = coll == REDUCE_SCATTER || coll == SCATTER ? count * p : count;
    const long long out_n = coll == ALLGATHER || coll == GATHER ? count * p : count;
    const long long buf_n = (in_n > out_n ? in_n : out_n) + GUARD;
    /* The result this rank checks: none on a gather's other ranks, nor at a scatter's root in place, nor at an
     * exscan's rank 0 (undefined). */
    const long long result_n =
        (coll == GATHER && !me) || (coll == SCATTER && here_in_place) || (coll == EXSCAN && rank == 0) ? 0 : out_n;
    /* The receive buffer's elements that the call may write: the result (a reduce-scatter in place: the input; an
     * exscan's rank 0: its undefined result). */
    const long long written = coll == REDUCE_SCATTER && in_place ? in_n : coll == EXSCAN ? out_n : result_n;
    const size_t bytes = (size_t)(buf_n * ext) + 1;
    char *in = malloc(bytes), *keep = malloc(bytes), *got = malloc(bytes), *before = malloc(bytes);
    char *want = malloc(bytes), *want0 = malloc(bytes), what[512] = "";
    MPI_Op mop = NO_OP(coll) ? MPI_OP_NULL : mpi_op(op);
    int err = MPI_SUCCESS, ref_err, ok = 1;
    long long wrong;
    if (!in || !keep || !got || !before || !want || !want0) {
        fprintf(stderr, "op_matrix: out of memory\n");
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Holes and guards: junk that differs between buffers and ranks. */
    memset(in, 0xa5 ^ rank, bytes);
    memset(got, 0x5a ^ rank, bytes);
    memset(want, 0x3c, bytes);
    memset(want0, 0x3c, bytes);
    if (NO_OP(coll)) {
        fill(t, MIN, in, in_n, rank, c); /* any values: the op only picks the inputs */
        if (here_in_place && coll != SCATTER) memcpy(got + rank * count * ext, in, (size_t)(count * ext));
    } else {
        fill(t, op, in, in_n, rank, c);
        if (in_place) memcpy(got, in, (size_t)(in_n * ext));
    }
    memcpy(keep, in, bytes);
    memcpy(before, got, bytes);

    const void *send = here_in_place && coll != SCATTER ? MPI_IN_PLACE : in;
    void *recv = here_in_place && coll == SCATTER ? MPI_IN_PLACE : got;
    if (count > 0) tl->calls++;
    if (list_cases && rank == 0) {
        char name[MPI_MAX_OBJECT_NAME] = "";
        int len = 0;
        PMPI_Type_get_name(t->type, name, &len);
        printf("case %s %s %s %lld\n", entry, name, NO_OP(coll) ? "-" : opname, count);
    }
    switch (coll) {
    case ALLREDUCE:
        err = large ? ALLREDUCE_C(send, got, count, t->type, mop, MPI_COMM_WORLD)
                    : MPI_Allreduce(send, got, (int)count, t->type, mop, MPI_COMM_WORLD);
        ref_err = PMPI_Allreduce(in, want, (int)count, t->type, mop, MPI_COMM_WORLD);
        break;
    case ALLGATHER:
        err = large ? ALLGATHER_C(send, count, t->type, got, count, t->type, MPI_COMM_WORLD)
                    : MPI_Allgather(send, (int)count, t->type, got, (int)count, t->type, MPI_COMM_WORLD);
        ref_err = PMPI_Allgather(in, (int)count, t->type, want, (int)count, t->type, MPI_COMM_WORLD);
        break;
    case GATHER:
        err = large ? GATHER_C(send, count, t->type, got, count, t->type, root, MPI_COMM_WORLD)
                    : MPI_Gather(send, (int)count, t->type, got, (int)count, t->type, root, MPI_COMM_WORLD);
        ref_err = PMPI_Gather(in, (int)count, t->type, want, (int)count, t->type, root, MPI_COMM_WORLD);
        break;
    case SCATTER:
        err = large ? SCATTER_C(in, count, t->type, recv, count, t->type, root, MPI_COMM_WORLD)
                    : MPI_Scatter(in, (int)count, t->type, recv, (int)count, t->type, root, MPI_COMM_WORLD);
        ref_err = PMPI_Scatter(in, (int)count, t->type, want, (int)count, t->type, root, MPI_COMM_WORLD);
        break;
    case SCAN:
        err = large ? SCAN_C(send, got, count, t->type, mop, MPI_COMM_WORLD)
                    : MPI_Scan(send, got, (int)count, t->type, mop, MPI_COMM_WORLD);
        ref_err = PMPI_Scan(in, want, (int)count, t->type, mop, MPI_COMM_WORLD);
        break;
    case EXSCAN:
        err = large ? EXSCAN_C(send, got, count, t->type, mop, MPI_COMM_WORLD)
                    : MPI_Exscan(send, got, (int)count, t->type, mop, MPI_COMM_WORLD);
        ref_err = PMPI_Exscan(in, want, (int)count, t->type, mop, MPI_COMM_WORLD);
        break;
    default:
        err = large ? REDUCE_SCATTER_BLOCK_C(send, got, count, t->type, mop, MPI_COMM_WORLD)
                    : MPI_Reduce_scatter_block(send, got, (int)count, t->type, mop, MPI_COMM_WORLD);
        ref_err = PMPI_Reduce_scatter_block(in, want, (int)count, t->type, mop, MPI_COMM_WORLD);
        break;
    }
    tl->cases++;
    if (err != MPI_SUCCESS || ref_err != MPI_SUCCESS) {
        snprintf(what, sizeof what, "error %d from %s, %d from PMPI", err, entry, ref_err);
        fail(cname, entry, opname, t, count, in_place, what);
        ok = 0;
    } else {
        wrong = compare(t, got, want, result_n, what, sizeof what);
        if (wrong > 0) {
            size_t n = strlen(what);
            snprintf(what + n, sizeof what - n, " (%lld of %lld elements wrong)", wrong, result_n);
            fail(cname, entry, opname, t, count, in_place, what);
            ok = 0;
        }
        /* A datatype's holes are not part of the buffer: MPI leaves them as they were. */
        wrong = holes_changed(t, got, before, written);
        if (wrong > 0) {
            snprintf(what, sizeof what, "changed %lld bytes in the holes between or after the fields of the "
                     "receive buffer's pairs (PMPI changed %lld)", wrong, holes_changed(t, want, want0, result_n));
            fail(cname, entry, opname, t, count, in_place, what);
            ok = 0;
        }
        if (memcmp(got + written * ext, before + written * ext, (size_t)((buf_n - written) * ext)) != 0) {
            fail(cname, entry, opname, t, count, in_place,
                 rooted && result_n == 0 ? "wrote a receive buffer that is not this rank's"
                                         : "wrote past the end of the receive buffer");
            ok = 0;
        }
        if (memcmp(in, keep, bytes) != 0) { /* in place, no call sees it */
            fail(cname, entry, opname, t, count, in_place, "changed the send buffer");
            ok = 0;
        }
    }
    free(in);
    free(keep);
    free(got);
    free(before);
    free(want);
    free(want0);
    return ok;
}

static int parse_counts(const char *text, long long *counts, int max)
{
    int n = 0;
    char *end;
    while (*text != '\0' && n < max) {
        counts[n++] = strtoll(text, &end, 10);
        if (end == text || counts[n - 1] < 0) return -1;
        text = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv)
{
    enum coll coll;
    const char *only_op = NULL, *only_type = NULL;
    long long counts[32];
    int ncounts = 0;
    uint64_t seed = 1;
    struct tally tl = {0, 0, 0};
    long long failures = 0;

    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &nranks);
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    coll = NCOLLS;
    if (argc >= 2) {
        const char *const names[NCOLLS] = {"allreduce", "allgather", "reduce_scatter_block", "gather", "scatter",
                                           "scan",      "exscan"};
        for (int i = 0; i < NCOLLS; i++)
            if (!strcmp(argv[1], names[i])) coll = (enum coll)i;
    }
    if (coll == NCOLLS) {
        if (rank == 0)
            fprintf(stderr, "usage: op_matrix allreduce|allgather|reduce_scatter_block|gather|scatter|scan|exscan "
                    "[options]\n");
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--op")) only_op = argv[i + 1];
        else if (!strcmp(argv[i], "--type")) only_type = argv[i + 1];
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--counts")) ncounts = parse_counts(argv[i + 1], counts, 32);
        else if (!strcmp(argv[i], "--list")) list_cases = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--root") && (root = atoi(argv[i + 1])) >= 0 && root < nranks) continue;
        else ncounts = -1;
        if (ncounts < 0) {
            if (rank == 0) fprintf(stderr, "op_matrix: bad option %s %s\n", argv[i], argv[i + 1]);
            PMPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (ncounts == 0) { /* 0, 1, counts that do not divide by p, and one of 100 */
        const long long p = nranks;
        const long long allreduce[] = {0, 1, p - 1, 3 * p + 2, 100};
        const long long block[] = {0, 1, 2, 5, 13};
        const long long *from = WHOLE(coll) ? allreduce : block;
        int n = WHOLE(coll) ? (int)(sizeof allreduce / sizeof *allreduce) : (int)(sizeof block / sizeof *block);
        for (int i = 0; i < n; i++) {
            int dup = 0;
            for (int j = 0; j < ncounts; j++) dup |= counts[j] == from[i];
            if (!dup) counts[ncounts++] = from[i];
        }
    }

    add_types();
    for (int i = 0; i < ntypes; i++) { /* our C layout must be MPI's */
        MPI_Aint lb, extent;
        PMPI_Type_get_extent(types[i].type, &lb, &extent);
        if (lb != 0 || (size_t)extent != types[i].extent) {
            fprintf(stderr, "op_matrix: %s has lower bound %ld and extent %ld; its C type has size %zu\n",
                    types[i].name, (long)lb, (long)extent, types[i].extent);
            PMPI_Abort(MPI_COMM_WORLD, 2);
        }
    }

    uint64_t c = seed * 1000003u;
    for (int ti = 0; ti < ntypes; ti++) {
        const struct dtype *t = &types[ti];
        if (only_type && strcmp(only_type, t->name)) continue;
        for (int o = 0; o < NOPS; o++) {
            if (NO_OP(coll) ? o > 0 : !(t->ops & B(o))) continue;
            if (!NO_OP(coll) && only_op && strcmp(only_op, OP_NAMES[o])) continue;
            for (int k = 0; k < ncounts; k++)
                for (int in_place = 0; in_place < 2; in_place++, c++)
                    if (!run_case(coll, t, (enum op)o, counts[k], in_place, LARGE_COUNT && c % 2, c, &tl))
                        tl.failures++;
        }
    }
    PMPI_Allreduce(&tl.failures, &failures, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("op_matrix: %s: %lld cases, %lld interposed calls per rank, on %d ranks, %lld failures\n", argv[1],
               tl.cases, tl.calls, nranks, failures);
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
