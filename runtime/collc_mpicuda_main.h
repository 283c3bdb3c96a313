/* collc_mpicuda_main.h: the driver program of a generated mpi-cuda library (collc run --backend mpi-cuda).
 *
 * The generated collc_<algorithm>_mpicuda_main.cu defines COLLC_MAIN_* (the
 * library's entry points and sizes; COLLC_MAIN_NRANKS 0 for a library compiled
 * for any p, which also defines COLLC_MAIN_NCHUNKS_OF(p) and
 * COLLC_MAIN_LAYOUT_OF(p, count, offsets); COLLC_MAIN_RUN_V and
 * COLLC_MAIN_LAYOUT_V, or COLLC_MAIN_LAYOUT_V_OF(p, counts, offsets), for a
 * library with entry points for counts given at run time) and includes this
 * file.  Every rank:
 *
 *   - picks its GPU: local rank on the node (MPI_COMM_TYPE_SHARED) modulo
 *     the visible devices, so one rank per GPU when there are as many, and
 *     several ranks per GPU otherwise; no visible device is an error;
 *   - for each count (--counts), or each set of counts given at run time
 *     (--vcounts, through the library's _run_v: one set per call, its counts
 *     separated by colons): reads its input row (--inputs DIR: input<i>.bin holds
 *     every rank's logical buffer, rank by rank, in the dtype's bytes) or
 *     fills its buffer with a fixed pattern, runs --warmup and --iters calls
 *     (each from the same input, after a barrier), checks for codec
 *     refusals, writes its result (--outputs DIR: output<i>_rank<r>.bin);
 *   - rank 0 prints one JSON row per count: the per-rank mean times (avg,
 *     min, max over ranks, in us), OSU style, and once the transport used;
 *   - progress goes to --status DIR/rank<r>.json (pid, state, count, error),
 *     which the launcher reads to say which rank stopped where.
 *
 * Any error on a rank is printed, written to its status file, and ends the
 * whole job (MPI_Abort).  The barriers run under the COLLC_TIMEOUT watchdog
 * too.  --fault injects the failures the tests check: `stop:R:I` (rank R
 * stops, SIGSTOP, instead of making call I, while the others are in it),
 * `late:R:I` (rank R makes call I, then stops before waiting for it: a
 * stream-ordered call is left half done), `exit:R:I` (rank R exits instead
 * of making call I), `count:R:D` (rank R calls with D more elements; with
 * --vcounts, D more in its first count and D fewer in its last: the same
 * total, cut differently).
 */
#ifndef COLLC_MPICUDA_MAIN_H
#define COLLC_MPICUDA_MAIN_H

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <mpi.h>

#ifndef COLLC_MAIN_NCHUNKS_OF /* a library for one p */
#define COLLC_MAIN_NCHUNKS_OF(p) COLLC_MAIN_NCHUNKS
#define COLLC_MAIN_LAYOUT_OF(p, count, offsets) COLLC_MAIN_LAYOUT(count, offsets)
#endif
#if defined(COLLC_MAIN_RUN_V) && !defined(COLLC_MAIN_LAYOUT_V_OF)
#define COLLC_MAIN_LAYOUT_V_OF(p, counts, offsets) COLLC_MAIN_LAYOUT_V(counts, offsets)
#endif

enum { MAIN_MAX_COUNTS = 64 };

struct main_opts {
    long long counts[MAIN_MAX_COUNTS];
    int ncounts, dtype, op, iters, warmup;
    const char *vcounts; /* --vcounts: the sets of counts given at run time (ncounts of them), or NULL */
    const char *inputs, *outputs, *status;
    char fault;        /* 0, 's' (stop), 'l' (late stop), 'e' (exit), 'c' (count) */
    int fault_rank;
    long long fault_arg; /* the call (stop, exit) or the extra elements (count) */
};

static int main_rank, main_size;
static const char *main_status_dir;
static long long main_count = -1;

static const char *const main_dtypes[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64"};
static const int main_dtype_bytes[] = {4, 8, 2, 2, 4, 8};
static const char *const main_ops[] = {"sum", "prod", "max", "min"};

/* `text` as a JSON string body (quotes, backslashes and control characters escaped). */
static void main_json_text(FILE *f, const char *text)
{
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
}

/* Rewrites this rank's status file atomically. */
static void main_status(const char *state, const char *error)
{
    char path[4096], tmp[4112];
    FILE *f;
    if (main_status_dir == NULL) return;
    snprintf(path, sizeof path, "%s/rank%d.json", main_status_dir, main_rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if ((f = fopen(tmp, "w")) == NULL) return;
    fprintf(f, "{\"rank\": %d, \"pid\": %ld, \"state\": \"%s\", \"impl\": \"mpi-cuda\", \"count\": %lld", main_rank,
            (long)getpid(), state, main_count);
    if (error != NULL) {
        fprintf(f, ", \"error\": \"");
        main_json_text(f, error);
        fprintf(f, "\"");
    }
    fprintf(f, "}\n");
    fclose(f);
    rename(tmp, path);
}

/* Reports an error on this rank and ends the job. */
static void main_fail(const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    main_status("error", text);
    fprintf(stderr, "collc: rank %d: %s\n", main_rank, text);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void main_usage(const char *program)
{
    char p[16];
    if (COLLC_MAIN_NRANKS > 0) snprintf(p, sizeof p, "%d", COLLC_MAIN_NRANKS);
    else snprintf(p, sizeof p, "P");
#ifdef COLLC_MAIN_RUN_V
    const char *vcounts = "       [--vcounts N:N:...,N:N:...]  (counts given at run time, one set of counts per "
                          "call, instead of --counts)\n";
#else
    const char *vcounts = "";
#endif
    if (main_rank == 0)
        fprintf(stderr,
                "usage: mpiexec -n %s %s [--counts N,N,...] [--dtype float32|float64|float16|bfloat16|int32|int64]\n"
                "       [--op sum|prod|max|min] [--iters N] [--warmup N] [--inputs DIR] [--outputs DIR]\n"
                "       [--status DIR] [--fault stop:RANK:CALL|late:RANK:CALL|exit:RANK:CALL|count:RANK:EXTRA]\n"
                "%s"
                "runs %s (p=%s) on this job's GPUs; rank 0 prints one JSON row per count.\n",
                p, program, vcounts, COLLC_MAIN_ALGORITHM, COLLC_MAIN_NRANKS > 0 ? p : "any");
}

static int main_index(const char *const *names, int n, const char *value)
{
    for (int k = 0; k < n; k++)
        if (strcmp(names[k], value) == 0) return k;
    return -1;
}

/* The command line; exits with status 2 on a bad one. */
static void main_parse(int argc, char **argv, struct main_opts *o)
{
    memset(o, 0, sizeof *o);
    o->counts[0] = 1 << 20;
    o->ncounts = 1;
    o->iters = 1;
    for (int i = 1; i < argc; i++) {
        const char *key = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = value == NULL;
        if (strcmp(key, "--help") == 0 || strcmp(key, "-h") == 0) {
            main_usage(argv[0]);
            MPI_Finalize();
            exit(0);
        } else if (bad) {
        } else if (strcmp(key, "--counts") == 0) {
            char *end = (char *)value;
            o->ncounts = 0;
            while (!bad && *end) {
                const char *start = end;
                long long c = strtoll(start, &end, 10);
                bad = end == start || c < 0 || o->ncounts == MAIN_MAX_COUNTS || (*end != ',' && *end != '\0');
                if (!bad) o->counts[o->ncounts++] = c;
                if (*end == ',') end++;
            }
            bad |= o->ncounts == 0;
            o->vcounts = NULL;
#ifdef COLLC_MAIN_RUN_V
        } else if (strcmp(key, "--vcounts") == 0) {
            char *end = (char *)value;
            o->vcounts = value;
            o->ncounts = 1;
            while (!bad && *end) { /* counts >= 0, separated by ':' within a set and by ',' between sets */
                const char *start = end;
                bad = strtoll(start, &end, 10) < 0 || end == start || (*end != ':' && *end != ',' && *end != '\0');
                if (!bad && *end == ',') bad = ++o->ncounts > MAIN_MAX_COUNTS;
                if (*end == ':' || *end == ',') end++;
            }
            bad |= *value == '\0' || value[strlen(value) - 1] == ':' || value[strlen(value) - 1] == ',';
#endif
        } else if (strcmp(key, "--dtype") == 0) {
            bad = (o->dtype = main_index(main_dtypes, 6, value)) < 0;
        } else if (strcmp(key, "--op") == 0) {
            bad = (o->op = main_index(main_ops, 4, value)) < 0;
        } else if (strcmp(key, "--iters") == 0) {
            bad = (o->iters = atoi(value)) < 1;
        } else if (strcmp(key, "--warmup") == 0) {
            o->warmup = atoi(value);
            bad = o->warmup < 0 || (o->warmup == 0 && strcmp(value, "0") != 0);
        } else if (strcmp(key, "--inputs") == 0) {
            o->inputs = value;
        } else if (strcmp(key, "--outputs") == 0) {
            o->outputs = value;
        } else if (strcmp(key, "--status") == 0) {
            o->status = value;
        } else if (strcmp(key, "--fault") == 0) {
            char kind[8] = "";
            bad = sscanf(value, "%7[a-z]:%d:%lld", kind, &o->fault_rank, &o->fault_arg) != 3;
            o->fault = strcmp(kind, "stop") == 0 ? 's' : strcmp(kind, "exit") == 0 ? 'e'
                     : strcmp(kind, "late") == 0 ? 'l' : strcmp(kind, "count") == 0 ? 'c' : 0;
            bad |= o->fault == 0;
        } else {
            bad = 1;
        }
        if (bad) {
            if (main_rank == 0) fprintf(stderr, "%s: bad option %s %s\n", argv[0], key, value ? value : "");
            main_usage(argv[0]);
            MPI_Finalize();
            exit(2);
        }
        i++;
    }
}

/* MPI_Barrier under the COLLC_TIMEOUT watchdog: a rank that stopped or died ends the job, not hangs it. */
static void main_barrier(void)
{
    const char *env = getenv("COLLC_TIMEOUT");
    const double timeout = env != NULL && atof(env) > 0 ? atof(env) : 60.0, start = MPI_Wtime();
    MPI_Request req;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        if (MPI_Wtime() - start > timeout)
            main_fail("the barrier before a call: not every rank arrived within %g s (COLLC_TIMEOUT): a rank died "
                      "or stopped", timeout);
        sched_yield();
    }
}

/* The device of this rank: its rank on the node modulo the visible devices. */
static int main_pick_device(void)
{
    int ndevices = 0, local = 0, device;
    MPI_Comm node;
    cudaError_t err = cudaGetDeviceCount(&ndevices);
    if (err != cudaSuccess || ndevices == 0)
        main_fail("no CUDA device is visible to this process (cudaGetDeviceCount: %s)",
                  err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    device = local % ndevices;
    if ((err = cudaSetDevice(device)) != cudaSuccess)
        main_fail("cudaSetDevice(%d) failed: %s", device, cudaGetErrorString(err));
    return ndevices;
}

#define MAIN_CUDA(call)                                                                                       \
    do {                                                                                                      \
        cudaError_t main_err_ = (call);                                                                       \
        if (main_err_ != cudaSuccess) main_fail("%s failed: %s", #call, cudaGetErrorString(main_err_));       \
    } while (0)

/* This rank's input for count index i: its row of the inputs file, or a pattern. */
static void main_read_input(const struct main_opts *o, int i, char *host, long long bytes)
{
    char path[4096];
    FILE *f;
    if (o->inputs == NULL) {
        for (long long k = 0; k < bytes; k++)
            host[k] = (char)((k * 7 + main_rank) % 61); /* small values of every dtype */
        return;
    }
    snprintf(path, sizeof path, "%s/input%d.bin", o->inputs, i);
    if ((f = fopen(path, "rb")) == NULL) main_fail("cannot open %s: %s", path, strerror(errno));
    if (fseeko(f, (off_t)bytes * main_rank, SEEK_SET) != 0 || fread(host, 1, (size_t)bytes, f) != (size_t)bytes)
        main_fail("%s holds no %lld-byte row for rank %d", path, bytes, main_rank);
    fclose(f);
}

static void main_write_output(const struct main_opts *o, int i, const char *host, long long bytes)
{
    char path[4096];
    FILE *f;
    if (o->outputs == NULL) return;
    snprintf(path, sizeof path, "%s/output%d_rank%d.bin", o->outputs, i, main_rank);
    if ((f = fopen(path, "wb")) == NULL || fwrite(host, 1, (size_t)bytes, f) != (size_t)bytes)
        main_fail("cannot write %s: %s", path, strerror(errno));
    fclose(f);
}

/* The injected fault of call `call`, if it is this rank's: before the call, or with `late`, after it. */
static void main_fault(const struct main_opts *o, int call, int late)
{
    if (o->fault == 0 || o->fault == 'c' || (o->fault == 'l') != late || o->fault_rank != main_rank ||
        o->fault_arg != call)
        return;
    main_status("running", NULL);
    if (o->fault == 's' || o->fault == 'l') raise(SIGSTOP);
    else _exit(3);
}

/* Set i of --vcounts (malloc'd, *n counts), with this rank's injected fault: D elements moved from its last count
 * to its first. */
static int64_t *main_vcounts(const struct main_opts *o, int i, int *n)
{
    char *at = (char *)o->vcounts;
    int64_t *counts;
    for (int k = 0; k < i; k++) at = strchr(at, ',') + 1;
    *n = 1;
    for (const char *c = at; *c != '\0' && *c != ','; c++) *n += *c == ':';
    if ((counts = (int64_t *)malloc((size_t)*n * sizeof *counts)) == NULL) main_fail("out of host memory");
    for (int k = 0; k < *n; k++) counts[k] = strtoll(at, &at, 10), at++; /* the separator */
    if (o->fault == 'c' && o->fault_rank == main_rank) {
        if (counts[*n - 1] < o->fault_arg) main_fail("--fault count:%d:%lld needs a last count >= %lld", main_rank,
                                                     o->fault_arg, o->fault_arg);
        counts[0] += o->fault_arg;
        counts[*n - 1] -= o->fault_arg;
    }
    return counts;
}

/* The chunks' offsets of a call with `count` elements, or with counts given at run time (vcounts: not NULL). */
static int main_layout(long long count, const int64_t *vcounts, int64_t *offsets)
{
#ifdef COLLC_MAIN_RUN_V
    if (vcounts != NULL) return COLLC_MAIN_LAYOUT_V_OF(main_size, vcounts, offsets);
#endif
    (void)vcounts;
    return COLLC_MAIN_LAYOUT_OF(main_size, count, offsets);
}

/* One call with `count` elements, or with counts given at run time (vcounts: not NULL). */
static int main_run(void *work, long long count, const int64_t *vcounts, const struct main_opts *o,
                    cudaStream_t stream)
{
#ifdef COLLC_MAIN_RUN_V
    if (vcounts != NULL) return COLLC_MAIN_RUN_V(work, vcounts, o->dtype, o->op, MPI_COMM_WORLD, stream);
#endif
    (void)vcounts;
    return COLLC_MAIN_RUN(work, count, o->dtype, o->op, MPI_COMM_WORLD, stream);
}

/* One count (or set of counts): the calls, the check, the output; rank 0 prints the row. */
static void main_one(const struct main_opts *o, int i, cudaStream_t stream)
{
    const int nchunks = COLLC_MAIN_NCHUNKS_OF(main_size);
    int64_t *offsets, *vcounts = NULL;
    long long count = o->counts[i], logical, bytes;
    double total = 0, mine, stats[3], all[3];
    char *host, *pristine, *work;
    int nv = 0;
    if (o->vcounts != NULL) {
        vcounts = main_vcounts(o, i, &nv);
        count = 0;
        for (int k = 0; k < nv; k++) count += vcounts[k];
    } else if (o->fault == 'c' && o->fault_rank == main_rank) {
        count += o->fault_arg;
    }
    main_count = o->vcounts != NULL ? count : o->counts[i];
    main_status("running", NULL);
    if (nchunks < 1) main_fail("%s", COLLC_MAIN_LAST_ERROR());
    if ((offsets = (int64_t *)malloc(((size_t)nchunks + 1) * sizeof *offsets)) == NULL) main_fail("out of host memory");
    if (main_layout(count, vcounts, offsets) < 0) main_fail("%s", COLLC_MAIN_LAST_ERROR());
    logical = (long long)offsets[nchunks];
    free(offsets);
    bytes = logical * main_dtype_bytes[o->dtype];
    if ((host = (char *)malloc((size_t)bytes + 1)) == NULL) main_fail("out of host memory (%lld bytes)", bytes);
    main_read_input(o, i, host, bytes);
    MAIN_CUDA(cudaMalloc((void **)&pristine, (size_t)bytes + 1));
    MAIN_CUDA(cudaMalloc((void **)&work, (size_t)bytes + 1));
    MAIN_CUDA(cudaMemcpy(pristine, host, (size_t)bytes, cudaMemcpyHostToDevice));
    for (int call = 0; call < o->warmup + o->iters; call++) {
        double start;
        MAIN_CUDA(cudaMemcpyAsync(work, pristine, (size_t)bytes, cudaMemcpyDeviceToDevice, stream));
        MAIN_CUDA(cudaStreamSynchronize(stream));
        main_barrier();
        main_fault(o, call, 0); /* after the barrier: the other ranks are in the collective */
        start = MPI_Wtime();
        if (main_run(work, count, vcounts, o, stream) != 0) main_fail("%s", COLLC_MAIN_LAST_ERROR());
        main_fault(o, call, 1);
        if (COLLC_MAIN_CHECK() != 0) main_fail("%s", COLLC_MAIN_LAST_ERROR()); /* the call's end, watched */
        if (call >= o->warmup) total += MPI_Wtime() - start;
    }
    if (COLLC_MAIN_CHECK() != 0) main_fail("%s", COLLC_MAIN_LAST_ERROR());
    MAIN_CUDA(cudaMemcpy(host, work, (size_t)bytes, cudaMemcpyDeviceToHost));
    main_write_output(o, i, host, bytes);
    MAIN_CUDA(cudaFree(pristine));
    MAIN_CUDA(cudaFree(work));
    free(host);
    free(vcounts);
    mine = total / o->iters * 1e6;
    stats[0] = mine;
    stats[1] = -mine;
    stats[2] = mine;
    MPI_Reduce(stats, all, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&stats[2], &all[2], 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (main_rank != 0) return;
    printf("{\"impl\": \"mpi-cuda\", \"count\": %lld, \"size_bytes\": %lld, \"avg_us\": %.3f, \"min_us\": %.3f, "
           "\"max_us\": %.3f, \"iters\": %d, \"wrong\": -1}\n",
           main_count, main_count * main_dtype_bytes[o->dtype], all[2] / main_size, -all[1], all[0], o->iters);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    struct main_opts o;
    cudaStream_t stream;
    int ndevices;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &main_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &main_size);
    main_parse(argc, argv, &o);
    main_status_dir = o.status;
    main_status("starting", NULL);
    if (COLLC_MAIN_NRANKS > 0 && main_size != COLLC_MAIN_NRANKS)
        main_fail("launched on %d ranks, %s was compiled for p=%d", main_size, COLLC_MAIN_ALGORITHM,
                  COLLC_MAIN_NRANKS);
    ndevices = main_pick_device();
    MAIN_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int i = 0; i < o.ncounts; i++)
        main_one(&o, i, stream);
    if (main_rank == 0) { /* how the messages travelled (chosen at the first call with data) */
        printf("{\"mpicuda\": {\"transport\": \"");
        main_json_text(stdout, COLLC_MAIN_TRANSPORT());
        printf("\", \"devices\": %d}}\n", ndevices);
        fflush(stdout);
    }
    COLLC_MAIN_RELEASE();
    MAIN_CUDA(cudaStreamDestroy(stream));
    main_status("done", NULL);
    MPI_Finalize();
    return 0;
}

#endif /* COLLC_MPICUDA_MAIN_H */
