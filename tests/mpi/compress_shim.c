/* compress_shim.c: MPI calls through a preloaded library of a schedule with compression points.
 *
 *   mpiexec -n P ./compress_shim COLLECTIVE MODE BOUND32 BOUND64 SCALES A
 *
 * COLLECTIVE is allreduce, allgather or reduce_scatter_block: the library's.  Every
 * case calls the interposed MPI entry point (MPI_X, and MPI_X_c with MPI-4) on
 * MPI_FLOAT and MPI_DOUBLE, in place and not, at several counts, with inputs
 * uniform in [-A, A] (a deterministic function of rank, index and case), and
 * checks the result:
 *
 *   MODE pmpi   (no COLLC_SHIM_COMPRESS): bit for bit the PMPI collective's result
 *               on the same inputs;
 *   MODE bound  (COLLC_SHIM_COMPRESS=1): every element within BOUND (BOUND32 for
 *               float, BOUND64 for double; times max(1, A) when SCALES is 1) of the
 *               exact result, computed here in long double from every rank's input,
 *               plus the rounding of the sum (4 p eps (|exact| + p A)).
 *
 * In both modes the calls the compressed schedule does not take (MPI_MAX on
 * float, MPI_SUM on MPI_INT, allreduce and reduce-scatter) must give PMPI's
 * result bit for bit.  Rank 0 prints "N cases per rank, F failures" and
 * "max error float E32 double E64"; the tally uses PMPI.  Exit status 0 when
 * every case passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

static int rank, size, failures, cases;
static double worst[2];

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Input element i of rank r in case k: uniform in [-a, a]. */
static double input(int r, long long i, int k, double a)
{
    uint64_t h = mix(((uint64_t)r << 40) ^ ((uint64_t)k << 32) ^ (uint64_t)i);
    return a * (2.0 * (double)(h >> 11) / 9007199254740992.0 - 1.0);
}

static void fail(const char *what, int k, long long i, double got, double want)
{
    if (failures++ < 5)
        fprintf(stderr, "FAIL rank %d case %d %s: element %lld is %.9g, expected %.9g\n", rank, k, what, i, got, want);
}

static double get(const void *buf, int dbl, long long i)
{
    return dbl ? ((const double *)buf)[i] : ((const float *)buf)[i];
}

static void put(void *buf, int dbl, long long i, double v)
{
    if (dbl)
        ((double *)buf)[i] = v;
    else
        ((float *)buf)[i] = (float)v;
}

/* The collective under test through the MPI entry point (alternately the _c one), or through PMPI. */
static void call(const char *coll, int pmpi, int large, const void *in, void *out, long long n, MPI_Datatype dt,
                 MPI_Op op)
{
    if (strcmp(coll, "allreduce") == 0) {
        if (pmpi) PMPI_Allreduce(in, out, (int)n, dt, op, MPI_COMM_WORLD);
#if MPI_VERSION >= 4
        else if (large) MPI_Allreduce_c(in, out, n, dt, op, MPI_COMM_WORLD);
#endif
        else MPI_Allreduce(in, out, (int)n, dt, op, MPI_COMM_WORLD);
    } else if (strcmp(coll, "allgather") == 0) {
        if (pmpi) PMPI_Allgather(in, (int)n, dt, out, (int)n, dt, MPI_COMM_WORLD);
#if MPI_VERSION >= 4
        else if (large) MPI_Allgather_c(in, n, dt, out, n, dt, MPI_COMM_WORLD);
#endif
        else MPI_Allgather(in, (int)n, dt, out, (int)n, dt, MPI_COMM_WORLD);
    } else {
        if (pmpi) PMPI_Reduce_scatter_block(in, out, (int)n, dt, op, MPI_COMM_WORLD);
#if MPI_VERSION >= 4
        else if (large) MPI_Reduce_scatter_block_c(in, out, n, dt, op, MPI_COMM_WORLD);
#endif
        else MPI_Reduce_scatter_block(in, out, (int)n, dt, op, MPI_COMM_WORLD);
    }
}

/* One case: count n (per rank for allgather and reduce-scatter), float or double, in place or not. */
static void run_case(const char *coll, int bound_mode, const double *bound, int scales, double a, int k,
                     long long n, int dbl, int in_place, MPI_Op op, MPI_Datatype dt)
{
    const int ag = strcmp(coll, "allgather") == 0, rs = strcmp(coll, "reduce_scatter_block") == 0;
    const size_t ext = dt == MPI_INT ? sizeof(int) : dbl ? sizeof(double) : sizeof(float);
    const long long nin = ag ? n : rs ? n * size : n, nout = ag ? n * size : n;
    char *in = calloc((size_t)(nin + 1), ext), *out = calloc((size_t)(nin + nout + 1), ext);
    char *ref = calloc((size_t)(nout + 1), ext);
    const int lossy = bound_mode && op == MPI_SUM && dt != MPI_INT;
    const double tol = (dbl ? bound[1] : bound[0]) * (scales && a > 1 ? a : 1);
    const double eps = dbl ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    cases++;
    for (long long i = 0; i < nin; i++) {
        double v = input(rank, i, k, a);
        if (dt == MPI_INT)
            ((int *)in)[i] = (int)(v * 1000);
        else
            put(in, dbl, i, v);
    }
    call(coll, 1, 0, in, ref, n, dt, op);
    if (in_place) { /* MPI_IN_PLACE: the input sits in the receive buffer */
        if (ag)
            memcpy(out + (size_t)(rank * n) * ext, in, (size_t)n * ext);
        else
            memcpy(out, in, (size_t)nin * ext);
        call(coll, 0, k % 2, MPI_IN_PLACE, out, n, dt, op);
    } else {
        call(coll, 0, k % 2, in, out, n, dt, op);
    }
    for (long long i = 0; i < nout; i++) {
        if (!lossy) {
            if (memcmp(out + i * (long long)ext, ref + i * (long long)ext, ext) != 0)
                fail("differs from PMPI", k, i, dt == MPI_INT ? ((int *)out)[i] : get(out, dbl, i),
                     dt == MPI_INT ? ((int *)ref)[i] : get(ref, dbl, i));
            continue;
        }
        {
            long double exact = 0, err;
            if (ag) { /* element i is rank i / n's input i % n, as the input type holds it */
                exact = dbl ? input((int)(i / n), i % n, k, a) : (float)input((int)(i / n), i % n, k, a);
            } else {
                const long long at = rs ? (long long)rank * n + i : i;
                for (int r = 0; r < size; r++)
                    exact += dbl ? input(r, at, k, a) : (float)input(r, at, k, a);
            }
            err = fabsl((long double)get(out, dbl, i) - exact);
            if (!(err <= tol + 4.0L * size * eps * (fabsl(exact) + (long double)size * a)))
                fail("beyond the error bound", k, i, get(out, dbl, i), (double)exact);
            if ((double)err > worst[dbl]) worst[dbl] = (double)err;
        }
    }
    free(in);
    free(out);
    free(ref);
}

int main(int argc, char **argv)
{
    const long long counts[] = {0, 1, 3, 32, 1000, 4099};
    double bound[2];
    int bound_mode, scales, k = 0;
    double a;
    const char *coll;
    if (argc != 7) {
        fprintf(stderr, "usage: compress_shim COLLECTIVE pmpi|bound BOUND32 BOUND64 SCALES A\n");
        return 2;
    }
    coll = argv[1];
    bound_mode = strcmp(argv[2], "bound") == 0;
    bound[0] = atof(argv[3]);
    bound[1] = atof(argv[4]);
    scales = atoi(argv[5]);
    a = atof(argv[6]);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        for (int dbl = 0; dbl < 2; dbl++)
            for (int in_place = 0; in_place < 2; in_place++)
                run_case(coll, bound_mode, bound, scales, a, k++, counts[c], dbl, in_place, MPI_SUM,
                         dbl ? MPI_DOUBLE : MPI_FLOAT);
        if (strcmp(coll, "allgather") != 0) { /* calls the compressed schedule does not take */
            run_case(coll, bound_mode, bound, scales, a, k++, counts[c], 0, 0, MPI_MAX, MPI_FLOAT);
            run_case(coll, bound_mode, bound, scales, a, k++, counts[c], 0, 1, MPI_SUM, MPI_INT);
        } else {
            run_case(coll, bound_mode, bound, scales, a, k++, counts[c], 0, 0, MPI_SUM, MPI_INT);
        }
    }
    PMPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    PMPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%d cases per rank, %d failures\n", cases, failures);
        printf("max error float %.6g double %.6g\n", worst[0], worst[1]);
    }
    MPI_Finalize();
    return failures != 0;
}
