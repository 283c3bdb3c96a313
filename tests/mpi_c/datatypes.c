/* datatypes.c: collectives whose ranks pass different datatypes of one type signature, through the
 * interposed MPI collective, compared with the MPI library's own algorithm (PMPI) byte for byte.
 *
 *   mpiexec -n P ./datatypes COLLECTIVE [--list 1]
 *
 * MPI requires only the type signatures (the sequences of basic types) to match: a root may broadcast 8
 * contiguous MPI_INT that the other ranks receive as one MPI_Type_vector(8, 1, 2, MPI_INT), an allgather
 * may send a block as a matrix column and receive contiguous doubles, ranks may use other layouts than
 * their neighbours.  A shim that decides per rank whether to take such a call splits the ranks (some on
 * the schedule, some in PMPI) and the job hangs.
 *
 * COLLECTIVE is bcast, allgather or alltoall (data movement), or allreduce (user-defined ops, whose ranks
 * must agree on their datatypes, and predefined ops on derived datatypes, which MPICH refuses).
 *
 * Layouts of a signature of E base elements (base MPI_INT, MPI_DOUBLE, or the pair type MPI_DOUBLE_INT,
 * whose holes are not data): contiguous; one vector with a gap after each element; E elements of a type
 * resized to twice its extent; one contiguous derived type; one indexed type in reverse memory order; E
 * elements with a negative lower bound (the data before the buffer's address); and for MPI_INT, E/2
 * MPI_2INT, for MPI_DOUBLE_INT, a struct without holes.  Each case gives every rank a layout of its own
 * (shifted by its rank: the layouts differ between ranks, and between a rank's send and receive
 * arguments), or every rank the same, or rank 0 contiguous and the others one vector (the root of a bcast
 * sends 8 contiguous MPI_INT that the others receive as MPI_Type_vector(8, 1, 2, MPI_INT)) and the mirror
 * (the root sends a matrix column); counts 0, 1, 7, 8, 300 and 2500 base elements (the last above
 * collc's piece size of 8064 bytes for doubles); bcast from root 0 and from root P - 1, allgather and
 * alltoall in place and not.
 *
 * Every case runs the MPI_* entry point, then the PMPI_* one on the same input, into buffers that start
 * with the same junk: the whole span (holes, the bytes around the data, the guards) must end byte for
 * byte alike, and the send buffer unchanged.  Failures print "FAIL ..." on stderr and are tallied with
 * PMPI_Allreduce.  With --list 1, rank 0 prints each interposed call as "case K DESCRIPTION" in call
 * order, then on rank 0
 *   datatypes: COLLECTIVE: C cases on P ranks, F failures
 * Exit status 0 when all passed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define GUARD 32
#define NBASES 3
#define NLAYOUTS 7
#define MAX_PRINTED 40

static int rank, nranks, list, failures, cases, printed;
static MPI_Datatype base_types[NBASES];
static const char *base_names[NBASES] = {"int", "double", "double_int"};
static const char *layout_names[NLAYOUTS] = {"contig", "vector", "spaced", "contigdt", "reversed", "neglb", "alt"};

/* (count, datatype) holding a signature of e base elements in layout l; *free_it when the caller frees it. */
struct arg {
    MPI_Count count;
    MPI_Datatype dt;
    int derived;
};

static MPI_Datatype named(MPI_Datatype dt, const char *base, const char *layout)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%s", layout, base);
    MPI_Type_set_name(dt, name);
    MPI_Type_commit(&dt);
    return dt;
}

static struct arg layout_of(int b, int l, int e)
{
    MPI_Datatype base = base_types[b], dt;
    MPI_Aint lb, ext;
    struct arg a = {e, base, 0};
    MPI_Type_get_extent(base, &lb, &ext);
    if (e == 0 || l == 0) return a;
    a.derived = 1;
    switch (l) {
    case 1: /* one vector: a gap after every element */
        MPI_Type_vector(e, 1, 2, base, &dt);
        a.count = 1;
        break;
    case 2: /* e elements spaced twice their extent apart */
        MPI_Type_create_resized(base, 0, 2 * ext, &dt);
        break;
    case 3: /* one contiguous derived type */
        MPI_Type_contiguous(e, base, &dt);
        a.count = 1;
        break;
    case 4: { /* one indexed type, the signature's elements in reverse memory order */
        int *len = malloc(sizeof(int) * (size_t)e), *at = malloc(sizeof(int) * (size_t)e);
        for (int i = 0; i < e; i++) len[i] = 1, at[i] = e - 1 - i;
        MPI_Type_indexed(e, len, at, base, &dt);
        free(len), free(at);
        a.count = 1;
        break;
    }
    case 5: { /* the element lies before its address: lower bound -extent, extent 2 * extent */
        MPI_Datatype inner;
        MPI_Aint disp = -ext;
        int one = 1;
        MPI_Type_create_struct(1, &one, &disp, &base, &inner);
        MPI_Type_create_resized(inner, -ext, 2 * ext, &dt);
        MPI_Type_free(&inner);
        break;
    }
    default: /* MPI_INT: pairs as MPI_2INT; MPI_DOUBLE_INT: a struct without holes; MPI_DOUBLE: blocks of 2 */
        if (b == 0 && e % 2 == 0) {
            a.count = e / 2, a.dt = MPI_2INT, a.derived = 0;
            return a;
        } else if (b == 2) {
            int len[2] = {1, 1};
            MPI_Aint at[2] = {0, sizeof(double)};
            MPI_Datatype types[2] = {MPI_DOUBLE, MPI_INT}, inner;
            MPI_Type_create_struct(2, len, at, types, &inner);
            MPI_Type_create_resized(inner, 0, sizeof(double) + sizeof(int), &dt);
            MPI_Type_free(&inner);
        } else {
            if (e % 2) MPI_Type_vector(e, 1, 3, base, &dt);
            else MPI_Type_vector(e / 2, 2, 3, base, &dt);
            a.count = 1;
        }
        break;
    }
    a.dt = named(dt, base_names[b], layout_names[l]);
    return a;
}

static void release(struct arg *a)
{
    if (a->derived) MPI_Type_free(&a->dt);
}

/* A buffer for n elements of dt: its whole span with guards, filled with junk. */
struct buf {
    char *base, *at;
    size_t bytes;
};

static struct buf buffer_for(MPI_Count n, MPI_Datatype dt, unsigned junk)
{
    MPI_Aint lb, ext, tlb, text;
    struct buf b;
    MPI_Type_get_extent(dt, &lb, &ext);
    MPI_Type_get_true_extent(dt, &tlb, &text);
    {
        MPI_Aint lo = tlb, hi = n > 0 ? (MPI_Aint)(n - 1) * ext + tlb + text : 0;
        if (hi < lo) hi = lo;
        b.bytes = (size_t)(hi - lo) + 2 * GUARD;
        b.base = malloc(b.bytes);
        b.at = b.base + GUARD - lo;
    }
    for (size_t i = 0; i < b.bytes; i++) b.base[i] = (char)(junk * 131u + i * 7u + (i >> 7));
    return b;
}

/* Writes the packed bytes of a signature (seeded) into n elements of dt at b. */
static void fill(struct buf *b, MPI_Count n, MPI_Datatype dt, unsigned seed)
{
    int size, pos = 0;
    char *packed;
    MPI_Type_size(dt, &size);
    packed = malloc((size_t)size * (size_t)n + 1);
    for (MPI_Count i = 0; i < size * n; i++) packed[i] = (char)(seed * 29u + (unsigned)i * 13u + (unsigned)(i >> 8));
    MPI_Unpack(packed, size * (int)n, &pos, b->at, (int)n, dt, MPI_COMM_SELF);
    free(packed);
}

static void fail(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *what, const char *fmt, ...)
{
    va_list ap;
    failures++;
    if (printed++ >= MAX_PRINTED) return;
    fprintf(stderr, "datatypes: rank %d: FAIL %s: ", rank, what);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

static void same(const char *what, const char *role, const struct buf *got, const struct buf *want)
{
    for (size_t i = 0; i < got->bytes; i++)
        if (got->base[i] != want->base[i]) {
            fail(what, "%s byte %zd of the span differs from PMPI's", role, (ptrdiff_t)i - GUARD);
            return;
        }
}

static void announce(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void announce(const char *fmt, ...)
{
    va_list ap;
    cases++;
    if (!list || rank != 0) return;
    printf("case %d ", cases - 1);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

static const int counts[] = {0, 1, 7, 8, 300, 2500};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

/* The layout of rank r in a case of shift s (side 0: the receive or bcast buffer, 1: the send buffer): every
 * rank the same (s < NLAYOUTS), rank-dependent (s < 2 NLAYOUTS), or the cases: rank 0 contiguous and
 * the others a vector (s = 2 NLAYOUTS), and the mirror (s = 2 NLAYOUTS + 1), the send layout the other one. */
#define NSHIFTS (2 * NLAYOUTS + 2)
static int layout_at(int s, int r, int side)
{
    if (s >= 2 * NLAYOUTS) return ((r == 0) == (s == 2 * NLAYOUTS)) == (side == 0) ? 0 : 1;
    return s < NLAYOUTS ? s : (s - NLAYOUTS + r + side) % NLAYOUTS;
}

static void run_bcast(void)
{
    for (int b = 0; b < NBASES; b++)
        for (int s = 0; s < NSHIFTS; s++)
            for (int k = 0; k < NCOUNTS; k++)
                for (int rt = 0; rt < 2; rt++) {
                    const int root = rt ? nranks - 1 : 0, e = counts[k];
                    struct arg a = layout_of(b, layout_at(s, rank, 0), e);
                    struct buf x = buffer_for(a.count, a.dt, 1), y = buffer_for(a.count, a.dt, 1);
                    char what[160];
                    snprintf(what, sizeof what, "bcast %s shift %d count %d root %d (this rank: %lld of %s)",
                             base_names[b], s, e, root, (long long)a.count, layout_names[layout_at(s, rank, 0)]);
                    announce("bcast %s shift=%d count=%d root=%d", base_names[b], s, e, root);
                    if (rank == root) fill(&x, a.count, a.dt, 7u + (unsigned)k), fill(&y, a.count, a.dt, 7u + (unsigned)k);
                    MPI_Bcast(x.at, (int)a.count, a.dt, root, MPI_COMM_WORLD);
                    PMPI_Bcast(y.at, (int)a.count, a.dt, root, MPI_COMM_WORLD);
                    same(what, "the buffer", &x, &y);
                    free(x.base), free(y.base);
                    release(&a);
                }
}

/* allgather (all = 0) or alltoall (all = 1): rank-dependent send and receive layouts. */
static void run_gather(int all)
{
    const char *name = all ? "alltoall" : "allgather";
    for (int b = 0; b < NBASES; b++)
        for (int s = 0; s < NSHIFTS; s++)
            for (int k = 0; k < NCOUNTS; k++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    const int e = all && counts[k] > 300 ? counts[k] / nranks : counts[k], blocks = nranks;
                    struct arg ra = layout_of(b, layout_at(s, rank, 0), e);
                    struct arg sa = layout_of(b, layout_at(s, rank, 1), e);
                    struct buf x, y, sx, sy;
                    char what[200];
                    x = buffer_for(ra.count * blocks, ra.dt, 3);
                    y = buffer_for(ra.count * blocks, ra.dt, 3);
                    sx = buffer_for(sa.count * (all ? blocks : 1), sa.dt, 5);
                    sy = buffer_for(sa.count * (all ? blocks : 1), sa.dt, 5);
                    snprintf(what, sizeof what, "%s %s shift %d count %d in_place %d (send %s, receive %s)", name,
                             base_names[b], s, e, in_place, layout_names[layout_at(s, rank, 1)],
                             layout_names[layout_at(s, rank, 0)]);
                    announce("%s %s shift=%d count=%d in_place=%d", name, base_names[b], s, e, in_place);
                    if (in_place) {
                        fill(&x, ra.count * blocks, ra.dt, 11u + (unsigned)rank);
                        fill(&y, ra.count * blocks, ra.dt, 11u + (unsigned)rank);
                    } else {
                        fill(&sx, sa.count * (all ? blocks : 1), sa.dt, 11u + (unsigned)rank);
                        fill(&sy, sa.count * (all ? blocks : 1), sa.dt, 11u + (unsigned)rank);
                    }
                    if (all) {
                        MPI_Alltoall(in_place ? MPI_IN_PLACE : sx.at, (int)sa.count, sa.dt, x.at, (int)ra.count, ra.dt,
                                     MPI_COMM_WORLD);
                        PMPI_Alltoall(in_place ? MPI_IN_PLACE : sy.at, (int)sa.count, sa.dt, y.at, (int)ra.count,
                                      ra.dt, MPI_COMM_WORLD);
                    } else {
                        MPI_Allgather(in_place ? MPI_IN_PLACE : sx.at, (int)sa.count, sa.dt, x.at, (int)ra.count,
                                      ra.dt, MPI_COMM_WORLD);
                        PMPI_Allgather(in_place ? MPI_IN_PLACE : sy.at, (int)sa.count, sa.dt, y.at, (int)ra.count,
                                       ra.dt, MPI_COMM_WORLD);
                    }
                    same(what, "the receive buffer", &x, &y);
                    same(what, "the send buffer", &sx, &sy);
                    free(x.base), free(y.base), free(sx.base), free(sy.base);
                    release(&ra), release(&sa);
                }
}

/* A commutative user op summing ints, whatever datatype of ints it is given. */
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int size, pos = 0, n;
    int *a, *b;
    MPI_Type_size(*dt, &size);
    n = *len * size / (int)sizeof(int);
    a = malloc(sizeof(int) * (size_t)n + 1), b = malloc(sizeof(int) * (size_t)n + 1);
    MPI_Pack(in, *len, *dt, a, n * (int)sizeof(int), &pos, MPI_COMM_SELF);
    pos = 0;
    MPI_Pack(inout, *len, *dt, b, n * (int)sizeof(int), &pos, MPI_COMM_SELF);
    for (int i = 0; i < n; i++) b[i] += a[i];
    pos = 0;
    MPI_Unpack(b, n * (int)sizeof(int), &pos, inout, *len, *dt, MPI_COMM_SELF);
    free(a), free(b);
}

/* The sums of every rank's input (fill with seed 17 + rank) of e ints, written into n elements of dt at b. */
static void expect_sums(struct buf *b, MPI_Count n, MPI_Datatype dt, int e)
{
    int *sum = calloc((size_t)e + 1, sizeof(int)), pos = 0;
    for (int r = 0; r < nranks; r++)
        for (int i = 0; i < e; i++) {
            unsigned char bytes[sizeof(int)];
            unsigned v;
            for (int j = 0; j < (int)sizeof(int); j++) {
                const unsigned at = (unsigned)(i * (int)sizeof(int) + j);
                bytes[j] = (unsigned char)((17u + (unsigned)r) * 29u + at * 13u + (at >> 8));
            }
            memcpy(&v, bytes, sizeof v);
            sum[i] = (int)((unsigned)sum[i] + v);
        }
    MPI_Unpack(sum, e * (int)sizeof(int), &pos, b->at, (int)n, dt, MPI_COMM_SELF);
    free(sum);
}

/* allreduce with a user-defined op on every layout of ints (the shim agrees, on every rank, on the schedule
 * or PMPI), and MPI_SUM on them (MPICH refuses a derived datatype).  MPI requires one datatype on every
 * rank of a reduction (with rank-dependent ones MPICH 5.0's own allreduce computes wrong sums, or hangs),
 * and MPICH gets user ops on a datatype with a negative lower bound wrong: neither is run. */
static void run_allreduce(void)
{
    MPI_Op op;
    MPI_Op_create(user_sum, 1, &op);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int l = 0; l < NLAYOUTS; l++)
        for (int k = 0; k < NCOUNTS; k++)
            for (int predefined = 0; predefined < 2; predefined++) {
                const int e = counts[k];
                struct arg a;
                struct buf x, y, sx, sy;
                MPI_Op o = predefined ? MPI_SUM : op;
                int ex, ey;
                char what[160];
                if (l == 5) continue;
                a = layout_of(0, l, e);
                x = buffer_for(a.count, a.dt, 3), y = buffer_for(a.count, a.dt, 3);
                sx = buffer_for(a.count, a.dt, 5), sy = buffer_for(a.count, a.dt, 5);
                snprintf(what, sizeof what, "allreduce %s %s count %d", predefined ? "MPI_SUM" : "user op",
                         layout_names[l], e);
                announce("allreduce %s shift=%d count=%d", predefined ? "MPI_SUM" : "user", l, e);
                fill(&sx, a.count, a.dt, 17u + (unsigned)rank), fill(&sy, a.count, a.dt, 17u + (unsigned)rank);
                ex = MPI_Allreduce(sx.at, x.at, (int)a.count, a.dt, o, MPI_COMM_WORLD);
                ey = PMPI_Allreduce(sy.at, y.at, (int)a.count, a.dt, o, MPI_COMM_WORLD);
                if ((ex == MPI_SUCCESS) != (ey == MPI_SUCCESS))
                    fail(what, "returned %d, PMPI %d", ex, ey);
                if (ex == MPI_SUCCESS) { /* the exact sums, unpacked into the junk */
                    struct buf z = buffer_for(a.count, a.dt, 3);
                    expect_sums(&z, a.count, a.dt, e);
                    same(what, "the receive buffer", &x, &z);
                    if (getenv("DATATYPES_PMPI")) same(what, "PMPI's receive buffer", &y, &z);
                    free(z.base);
                } else { /* MPI refused the call: so must the shim, and leave the buffer as PMPI does */
                    same(what, "the receive buffer", &x, &y);
                }
                same(what, "the send buffer", &sx, &sy);
                free(x.base), free(y.base), free(sx.base), free(sy.base);
                release(&a);
            }
    MPI_Op_free(&op);
}

int main(int argc, char **argv)
{
    const char *coll = argc > 1 ? argv[1] : "";
    int total = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int a = 2; a + 1 < argc; a += 2)
        if (strcmp(argv[a], "--list") == 0) list = atoi(argv[a + 1]);
    base_types[0] = MPI_INT, base_types[1] = MPI_DOUBLE, base_types[2] = MPI_DOUBLE_INT;
    if (strcmp(coll, "bcast") == 0) run_bcast();
    else if (strcmp(coll, "allgather") == 0) run_gather(0);
    else if (strcmp(coll, "alltoall") == 0) run_gather(1);
    else if (strcmp(coll, "allreduce") == 0) run_allreduce();
    else {
        if (rank == 0) fprintf(stderr, "usage: datatypes bcast|allgather|alltoall|allreduce [--list 1]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    PMPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("datatypes: %s: %d cases on %d ranks, %d failures\n", coll, cases, nranks, total);
    MPI_Finalize();
    return total != 0;
}
