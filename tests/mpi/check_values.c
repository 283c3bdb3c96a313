/* check_values.c: checks the values MPI_Allreduce and MPI_Allreduce_c produce.
 *
 * Every rank's input is a deterministic function of (rank, element index, op),
 * so each rank computes the expected result by itself, looping over all the
 * ranks' inputs: the reference uses no MPI.  Inputs are small integers (or
 * quarters, or products of a few small factors) so that floating-point results
 * are exact whatever order the ranks are combined in, and signed integers never
 * overflow; unsigned sums and maxima also use values near the type's maximum,
 * where sums wrap around as C defines.
 *
 * Cases: every predefined datatype (C, the MPICH extensions MPI_CHAR,
 * MPIX_C_FLOAT16 and MPIX_BFLOAT16, Fortran, and the MAXLOC/MINLOC pairs) with
 * every predefined op the MPI standard allows on it, through both entry points,
 * with and without MPI_IN_PLACE, for counts 0, 1, 7 and 1000 on MPI_COMM_WORLD, a
 * duplicate of it, a communicator of the same size with the ranks reversed, a
 * smaller one, MPI_COMM_SELF and an intercommunicator (no MPI_IN_PLACE there),
 * and for count 65537 on MPI_COMM_WORLD (see run_all); plus user-defined ops on
 * MPI_INT and on derived datatypes (contiguous, and a vector whose holes must
 * stay untouched), one of them not commutative.  Besides the values, each call
 * must return MPI_SUCCESS and leave the send buffer and the element after the
 * last one unchanged.
 *
 * Each failure prints one line on stderr (the first 20 per rank):
 *   check_values: rank R: FAIL comm=world entry=MPI_Allreduce type=MPI_INT op=MPI_SUM
 *       count=7 in_place=1: element 3: got 12, expected 10
 * The tally is combined with PMPI_Allreduce (never the MPI_ entry point under
 * test, which a PMPI interposer may replace) and rank 0 prints on stdout
 *   check_values: N cases on P ranks, F failures
 * The exit status is 1 when any rank saw a failure.
 *
 * Usage: mpiexec -n P ./check_values [--quick] [--derived] [--trace]
 *   --quick: counts 0, 1, 7 and 1000 only;
 *   --derived: instead of the cases above, predefined ops on a contiguous derived datatype,
 *     on MPI_COMM_WORLD (counts 0, 1, 7, 1000): whether MPI accepts them depends on the
 *     library (MPICH refuses them), so each call must do what PMPI_Allreduce_c does:
 *     fail with the same error class, or succeed with the right values;
 *   --trace: one line on stderr per case, before the call
 */
#include <complex.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_values_types.h"

/* ---------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------- */

struct comm {
    const char *name;
    MPI_Comm comm;
    int inter;
    int id, p;      /* this process's identity in the input functions, and their p */
    int nsources;   /* whose inputs the result combines, in order */
    int sources[64];
    int large;      /* whether count 65537 runs on it (MPI_COMM_WORLD only) */
    char *own;      /* a buffer for the combined inputs */
    const char *reference; /* the combined inputs of the current case: `own`, or another comm's */
    long long cases;
    double seconds;
};

/* ---------------------------------------------------------------------------
 * Running the cases
 * ------------------------------------------------------------------------- */

static long long ncases, nfailures;
static int world_rank;
static int quick, derived, trace;

static void fail(const char *comm, const char *entry, const struct dtype *t, enum op op, long long count, int in_place,
                 const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static void fail(const char *comm, const char *entry, const struct dtype *t, enum op op, long long count, int in_place,
                 const char *fmt, ...)
{
    char what[512];
    va_list ap;
    nfailures++;
    if (nfailures > 20) return;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "check_values: rank %d: FAIL comm=%s entry=%s type=%s op=%s count=%lld in_place=%d: %s\n",
            world_rank, comm, entry, t->name, op_names[op], count, in_place, what);
    if (nfailures == 20)
        fprintf(stderr, "check_values: rank %d: (further failures are counted, not shown)\n", world_rank);
}

/* Buffers for the largest case, allocated once. */
static char *input, *sendbuf, *recvbuf, *expected, *scratch;
static size_t buffer_bytes;

static const long long all_counts[] = {0, 1, 7, 1000, 65537};
#define MAX_COUNT 65537

static char *allocate(void)
{
    char *buf;
    if (buffer_bytes == 0) {
        for (int k = 0; k < ndtypes; k++) buffer_bytes = dtypes[k].size > buffer_bytes ? dtypes[k].size : buffer_bytes;
        buffer_bytes *= MAX_COUNT + 1;
    }
    buf = malloc(buffer_bytes);
    if (buf == NULL) {
        fprintf(stderr, "check_values: out of memory\n");
        PMPI_Abort(MPI_COMM_WORLD, 2);
    }
    return buf;
}

/* One call; `input` holds this rank's input and c->reference the combined inputs (count + 1 elements each). */
static void run_case(struct comm *c, const struct dtype *t, enum op op, int use_c, long long count, int in_place)
{
    const char *entry = use_c ? "MPI_Allreduce_c" : "MPI_Allreduce";
    size_t bytes = (size_t)(count + 1) * t->size; /* one more element: a guard that must stay untouched */
    char got_text[160], exp_text[160];
    int err;
    c->cases++;
    if (trace) {
        fprintf(stderr, "check_values: rank %d: comm=%s entry=%s type=%s op=%s count=%lld in_place=%d\n", world_rank,
                c->name, entry, t->name, op_names[op], count, in_place);
    }
    memcpy(sendbuf, input, bytes);
    if (in_place) memcpy(recvbuf, input, bytes);
    else memset(recvbuf, 0x5A, bytes);
    /* The expected result: what recvbuf holds now, with the data replaced by the combined inputs. */
    memcpy(expected, recvbuf, bytes);
    t->fold(expected, c->reference, COPY, count);

    const void *send = in_place ? MPI_IN_PLACE : sendbuf;
    int pmpi_err = MPI_SUCCESS;
    if (t->pmpi_decides) { /* what the MPI library itself does with the call */
        memcpy(scratch, input, bytes);
        pmpi_err = PMPI_Allreduce_c(in_place ? MPI_IN_PLACE : input, scratch, (MPI_Count)count, t->type, mpi_op(op),
                                    c->comm);
    }
    if (use_c) err = MPI_Allreduce_c(send, recvbuf, (MPI_Count)count, t->type, mpi_op(op), c->comm);
    else err = MPI_Allreduce(send, recvbuf, (int)count, t->type, mpi_op(op), c->comm);
    if (pmpi_err != MPI_SUCCESS) {
        int pmpi_class = 0, err_class = 0;
        PMPI_Error_class(pmpi_err, &pmpi_class);
        if (err != MPI_SUCCESS) PMPI_Error_class(err, &err_class);
        if (err == MPI_SUCCESS || err_class != pmpi_class)
            fail(c->name, entry, t, op, count, in_place,
                 "returned %d (error class %d), PMPI_Allreduce_c error class %d", err, err_class, pmpi_class);
        return;
    }

    if (err != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        PMPI_Error_string(err, text, &len);
        fail(c->name, entry, t, op, count, in_place, "returned error %d: %s", err, text);
        return;
    }
    long long i;
    for (i = 0; i < count && t->same(recvbuf, expected, i); i++) {
    }
    if (i < count) {
        long long wrong = 0;
        for (long long j = i; j < count; j++) wrong += !t->same(recvbuf, expected, j);
        t->show(recvbuf, i, got_text, sizeof got_text);
        t->show(expected, i, exp_text, sizeof exp_text);
        fail(c->name, entry, t, op, count, in_place, "element %lld: got %s, expected %s (%lld of %lld elements wrong)",
             i, got_text, exp_text, wrong, count);
    } else if (memcmp(recvbuf + count * t->size, expected + count * t->size, t->size) != 0) {
        fail(c->name, entry, t, op, count, in_place, "the receive buffer was written past its %lld elements", count);
    } else if (!in_place && memcmp(sendbuf, input, bytes) != 0) {
        fail(c->name, entry, t, op, count, in_place, "the send buffer was modified");
    }
}

/* Sets c->reference to the combined inputs of its sources, computed once for the comms that share them. */
static void combine(struct comm *comms, int k, const struct dtype *t, enum op op, long long count)
{
    struct comm *c = &comms[k];
    size_t bytes = (size_t)(count + 1) * t->size;
    for (int j = 0; j < k; j++) {
        if (comms[j].reference != NULL && comms[j].p == c->p && comms[j].nsources == c->nsources &&
            memcmp(comms[j].sources, c->sources, (size_t)c->nsources * sizeof(int)) == 0) {
            c->reference = comms[j].reference;
            return;
        }
    }
    memset(c->own, 0, bytes);
    for (int s = 0; s < c->nsources; s++) {
        memset(scratch, 0xA5, bytes);
        t->fill(scratch, op, c->sources[s], c->p, count);
        t->fold(c->own, scratch, s == 0 ? COPY : op, count);
    }
    c->reference = c->own;
}

/* Counts 0, 1, 7 and 1000: every op of every datatype, through both entry points, with and without
 * MPI_IN_PLACE, on every communicator.  Count 65537 (the costly one, on 2 cores), on MPI_COMM_WORLD
 * only: every datatype once, with one of its ops in turn, through MPI_Allreduce without
 * MPI_IN_PLACE and MPI_Allreduce_c with it in turn. */
static void run_all(struct comm *comms, int ncomms)
{
    int ncounts = quick ? 4 : 5;
    for (int k = 0; k < ndtypes; k++) {
        const struct dtype *t = &dtypes[k];
        int nops = 0, large_op = -1;
        if (t->pmpi_decides != derived) continue;
        for (int op = 0; op < NOPS; op++) nops += (t->ops & B(op)) != 0;
        for (int op = 0, seen = 0; op < NOPS; op++) {
            if ((t->ops & B(op)) && seen++ == k % nops) large_op = op;
        }
        for (int op = 0; op < NOPS; op++) {
            if (!(t->ops & B(op))) continue;
            for (int n = 0; n < ncounts; n++) {
                long long count = all_counts[n];
                int large = count == MAX_COUNT;
                if (large && op != large_op) continue;
                for (int j = 0; j < ncomms; j++) comms[j].reference = NULL;
                for (int j = 0; j < ncomms; j++) {
                    struct comm *c = &comms[j];
                    double start = MPI_Wtime();
                    if (large && !c->large) continue;
                    combine(comms, j, t, (enum op)op, count);
                    memset(input, 0xA5, (size_t)(count + 1) * t->size);
                    t->fill(input, (enum op)op, c->id, c->p, count);
                    for (int use_c = 0; use_c < 2; use_c++) {
                        for (int in_place = 0; in_place < (c->inter ? 1 : 2); in_place++) {
                            if (large && (use_c != k % 2 || in_place != k % 2)) continue;
                            run_case(c, t, (enum op)op, use_c, count, in_place);
                        }
                    }
                    c->seconds += MPI_Wtime() - start;
                }
            }
        }
    }
}

/* An intracommunicator: the result combines every member's input, in rank order. */
static void intra(struct comm *c, const char *name, MPI_Comm comm)
{
    c->name = name;
    c->comm = comm;
    c->inter = 0;
    MPI_Comm_rank(comm, &c->id);
    MPI_Comm_size(comm, &c->p);
    c->nsources = c->p;
    for (int r = 0; r < c->p; r++) c->sources[r] = r;
}

/* Drops the types whose extent is not the size of our C type (a Fortran type of another size, say). */
static void check_type_extents(void)
{
    int kept = 0;
    for (int k = 0; k < ndtypes; k++) {
        MPI_Aint lb = 0, extent = -1;
        if (PMPI_Type_get_extent(dtypes[k].type, &lb, &extent) != MPI_SUCCESS || lb != 0 ||
            extent != (MPI_Aint)dtypes[k].size) {
            if (world_rank == 0)
                printf("check_values: skipping %s: its extent is %lld bytes, the C type has %zu\n", dtypes[k].name,
                       (long long)extent, dtypes[k].size);
            continue;
        }
        dtypes[kept++] = dtypes[k];
    }
    ndtypes = kept;
}

int main(int argc, char **argv)
{
    int size;
    struct comm comms[8] = {0};
    int ncomms = 0;
    MPI_Comm dup, reversed, part, half, inter;
    long long local[2], total[2];

    MPI_Init(&argc, &argv);
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--quick") == 0) quick = 1;
        if (strcmp(argv[a], "--derived") == 0) derived = quick = 1;
        if (strcmp(argv[a], "--trace") == 0) trace = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 64) {
        if (world_rank == 0) fprintf(stderr, "check_values: at most 64 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    setup_types();
    check_type_extents();
    input = allocate(), sendbuf = allocate(), recvbuf = allocate(), expected = allocate(), scratch = allocate();

    intra(&comms[ncomms++], "world", MPI_COMM_WORLD);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    intra(&comms[ncomms++], "dup(world)", dup);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - world_rank, &reversed);
    intra(&comms[ncomms++], "world with ranks reversed", reversed);
    MPI_Comm_split(MPI_COMM_WORLD, world_rank < size - 1, world_rank, &part); /* sizes p-1 and 1 */
    intra(&comms[ncomms++], world_rank < size - 1 ? "first p-1 ranks" : "last rank alone", part);
    intra(&comms[ncomms++], "self", MPI_COMM_SELF);
    if (size >= 2) { /* two halves, each receiving the reduction of the other's inputs */
        int low = world_rank < size / 2, h = size / 2;
        struct comm *c = &comms[ncomms++];
        MPI_Comm_split(MPI_COMM_WORLD, low, world_rank, &half);
        MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, low ? h : 0, 7, &inter);
        c->name = "intercomm";
        c->comm = inter;
        c->inter = 1;
        c->id = world_rank;
        c->p = size;
        c->nsources = 0;
        for (int r = low ? h : 0; r < (low ? size : h); r++) c->sources[c->nsources++] = r;
    }
    for (int k = 0; k < ncomms; k++) {
        MPI_Comm_set_errhandler(comms[k].comm, MPI_ERRORS_RETURN);
        comms[k].large = k == 0;
        comms[k].own = allocate();
    }
    if (derived) ncomms = 1; /* MPI_COMM_WORLD */
    run_all(comms, ncomms);
    for (int k = 0; k < ncomms; k++) {
        ncases += comms[k].cases;
        if (world_rank == 0)
            printf("check_values: %s: %lld cases in %.2f s\n", comms[k].name, comms[k].cases, comms[k].seconds);
    }

    local[0] = ncases, local[1] = nfailures;
    PMPI_Allreduce(local, total, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (world_rank == 0) {
        printf("check_values: %lld cases on %d ranks, %lld failures\n", total[0], size, total[1]);
        fflush(stdout);
    }
    MPI_Finalize();
    return total[1] != 0;
}
