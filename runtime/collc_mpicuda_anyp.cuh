/* collc_mpicuda_anyp.cuh: the mpi-cuda executor for any communicator size.
 *
 * A library compiled with `collc compile --target mpi-cuda -p any` carries the
 * .coll program, translated to C and built with the mpi-c runtime's evaluator
 * (collc_anyp.h) into collc_<algorithm>_program.c, instead of the tables of one
 * p.  At the first call on a communicator of p ranks, the calling rank runs the
 * program for itself (through collc_anyp_rows.h's plain rows) and this header
 * turns its messages into the rows collc_mpicuda.cuh runs: one phase, a step row
 * per step the rank takes part in, one message row per message (sender and
 * receiver, "direct" or into scratch), its chunk runs, and the dataflow tables
 * (the rank's messages in table order, what each waits for, its places).  Only
 * the calling rank's rows exist; collc_mpicuda.cuh runs only the rows that
 * name it anyway.  A sender's runs are the chunks it sends merged, a receiver's
 * are split by copy and reduce: the wire cuts pieces by contiguous elements,
 * not runs, so both ends agree (collc_mpicuda_plan_msg).
 *
 * Every rank of the communicator agrees at its first call: one
 * MPI_Iallreduce of the lowest rank that could not build its tables (a p the
 * constraints exclude, a failed assertion in the program, out of memory),
 * and an MPI_Ibcast of its reason, so that every rank returns the same error
 * instead of some waiting for messages that never come; both under the
 * watchdog (COLLC_TIMEOUT), so that a rank that never calls fails the others.
 * The agreement is kept as an attribute of the communicator (a communicator
 * that reuses a freed one's handle agrees afresh); the schedules per
 * (p, rank) for the life of the process, failures included (the program
 * fails at a p the same way every time).  Not thread-safe, as the rest of
 * the mpi-cuda runtime.
 */
#ifndef COLLC_MPICUDA_ANYP_CUH
#define COLLC_MPICUDA_ANYP_CUH

#include "collc_anyp_rows.h"
#include "collc_mpicuda.cuh"
#include "collc_mpicuda_vcoll.cuh" /* counts given at run time */

/* Consecutive steps of a rank whose messages a dataflow run may have under way at once (dataflow.SCRATCH_WINDOW). */
#define COLLC_MPICUDA_ANYP_WINDOW 8

/* One (p, rank)'s schedule, and the rows it names. */
struct collc_mpicuda_anyp_sched {
    struct collc_mpicuda_sched s;
    int p, rank;
    struct collc_mpicuda_phase phase;
    struct collc_cuda_step *steps;
    struct collc_cuda_msg *msgs;
    struct collc_cuda_run *runs;
    struct collc_mpicuda_flow flow;
    struct collc_mpicuda_fop *fops;
    int *first, *deps, *links;
    collc_u64 *prefix; /* the chunk weights' prefix sums, or NULL */
    char why[400]; /* why it could not be built ("" when it could) */
    struct collc_mpicuda_anyp_sched *next;
};

/* What a library's entry points hand the runtime: the program's rows, its name and collective, the cache. */
struct collc_mpicuda_anyp {
    collc_anyp_rows_fn rows;
    const char *algorithm;
    enum collc_cuda_collective collective;
    struct collc_mpicuda_anyp_sched *cache;
    int keyval; /* MPI_KEYVAL_INVALID until the first agreement */
};

/* Messages a rank's dataflow run may have under way at once: the most that COLLC_MPICUDA_ANYP_WINDOW consecutive
 * steps of it have, plus the most one step has (collc/backends/dataflow.py's flow_links). */
static inline int collc_mpicuda_anyp_links(const struct collc_cuda_step *steps, int nsteps)
{
    int most = 0, windowed = 0, sum = 0;
    for (int i = 0; i < nsteps; i++) {
        sum += steps[i].n;
        if (i >= COLLC_MPICUDA_ANYP_WINDOW) sum -= steps[i - COLLC_MPICUDA_ANYP_WINDOW].n;
        if (sum > windowed) windowed = sum;
        if (steps[i].n > most) most = steps[i].n;
    }
    return windowed + most;
}

/* The rows of `r` (rank e->rank of e->p) as collc_mpicuda.cuh's tables; 0, or -1 with the reason in e->why. */
static inline int collc_mpicuda_anyp_convert(const struct collc_mpicuda_anyp *a, struct collc_mpicuda_anyp_sched *e,
                                             const struct collc_anyp_rows *r)
{
    const int n = r->nmsgs, me = e->rank;
    int nsteps = 0, most = 0;
    e->steps = (struct collc_cuda_step *)calloc((size_t)n + 1, sizeof *e->steps);
    e->msgs = (struct collc_cuda_msg *)calloc((size_t)n + 1, sizeof *e->msgs);
    e->runs = (struct collc_cuda_run *)calloc((size_t)r->nruns + 1, sizeof *e->runs);
    e->fops = (struct collc_mpicuda_fop *)calloc((size_t)n + 1, sizeof *e->fops);
    e->first = (int *)calloc((size_t)e->p + 1, sizeof *e->first);
    e->deps = (int *)calloc((size_t)r->ndeps + 1, sizeof *e->deps);
    e->links = (int *)calloc((size_t)e->p, sizeof *e->links);
    e->prefix = NULL;
    if (r->prefix != NULL && (e->prefix = (collc_u64 *)malloc(((size_t)r->nchunks + 1) * sizeof *e->prefix)) != NULL)
        for (int c = 0; c <= r->nchunks; c++) e->prefix[c] = (collc_u64)r->prefix[c];
    if ((r->prefix != NULL && e->prefix == NULL) || e->steps == NULL || e->msgs == NULL || e->runs == NULL ||
        e->fops == NULL || e->first == NULL || e->deps == NULL || e->links == NULL) {
        snprintf(e->why, sizeof e->why, "out of host memory for the tables of rank %d of %d", me, e->p);
        free(e->steps), free(e->msgs), free(e->runs), free(e->fops), free(e->first), free(e->deps), free(e->links);
        free(e->prefix);
        e->steps = NULL, e->msgs = NULL, e->runs = NULL, e->fops = NULL, e->first = NULL, e->deps = NULL;
        e->links = NULL, e->prefix = NULL;
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const struct collc_anyp_msg *m = &r->msgs[i];
        struct collc_cuda_msg *o = &e->msgs[i];
        if (nsteps == 0 || e->steps[nsteps - 1].index != m->step) {
            e->steps[nsteps].index = m->step, e->steps[nsteps].first = i;
            nsteps++;
        }
        if (++e->steps[nsteps - 1].n > most) most = e->steps[nsteps - 1].n;
        o->step = m->step;
        o->src = m->kind == COLLC_ANYP_SEND ? me : m->peer;
        o->dst = m->kind == COLLC_ANYP_SEND ? m->peer : me;
        o->landing = m->kind == COLLC_ANYP_RECV_DIRECT ? COLLC_CUDA_DIRECT : COLLC_CUDA_SCRATCH;
        o->first_run = m->first_run, o->nruns = m->nruns;
        e->fops[i].phase = 0, e->fops[i].msg = i;
        e->fops[i].first_dep = m->first_dep, e->fops[i].ndeps = m->ndeps;
    }
    for (int i = 0; i < r->nruns; i++) {
        struct collc_cuda_run *o = &e->runs[i];
        o->lo = r->runs[i].lo, o->hi = r->runs[i].hi;
        o->action = r->runs[i].reduce ? COLLC_CUDA_REDUCE : COLLC_CUDA_COPY;
        o->how = COLLC_CUDA_VALUES, o->codec = 0, o->fuse = 0;
    }
    if (r->ndeps > 0) memcpy(e->deps, r->deps, (size_t)r->ndeps * sizeof *e->deps);
    for (int k = 0; k <= e->p; k++) e->first[k] = k <= me ? 0 : n; /* only the calling rank has messages */
    e->fops[n].phase = -1, e->fops[n].msg = -1;
    e->links[me] = collc_mpicuda_anyp_links(e->steps, nsteps);
    e->phase.name = "any p";
    e->phase.steps = e->steps, e->phase.nsteps = nsteps;
    e->phase.msgs = e->msgs, e->phase.runs = e->runs, e->phase.locals = NULL;
    e->flow.ops = e->fops, e->flow.first = e->first, e->flow.deps = e->deps, e->flow.links = e->links;
    memset(&e->s, 0, sizeof e->s);
    e->s.base.algorithm = a->algorithm;
    e->s.base.collective = a->collective;
    e->s.base.nranks = e->p, e->s.base.nchunks = r->nchunks;
    e->s.base.max_step_messages = most > 0 ? most : 1;
    e->s.base.chunk_prefix = e->prefix;
    e->s.phases = &e->phase, e->s.nphases = 1;
    e->s.flow = &e->flow;
    return 0;
}

/* The schedule of (p, rank), built on first use: check e->why ("" when it is usable); NULL only without memory. */
static inline struct collc_mpicuda_anyp_sched *collc_mpicuda_anyp_get(struct collc_mpicuda_anyp *a, int p, int rank)
{
    struct collc_mpicuda_anyp_sched *e;
    struct collc_anyp_rows rows;
    for (e = a->cache; e != NULL; e = e->next)
        if (e->p == p && e->rank == rank) return e;
    e = (struct collc_mpicuda_anyp_sched *)calloc(1, sizeof *e);
    if (e == NULL) return NULL;
    e->p = p, e->rank = rank;
    if (p < 1 || rank < 0 || rank >= p)
        snprintf(e->why, sizeof e->why, "rank %d of %d ranks: no such rank", rank, p);
    else if (a->rows(p, rank, &rows, e->why, sizeof e->why) != 0) {
        if (e->why[0] == '\0') snprintf(e->why, sizeof e->why, "the tables of p=%d could not be built", p);
    } else {
        if (collc_mpicuda_anyp_convert(a, e, &rows) == 0) e->why[0] = '\0';
        collc_anyp_rows_free(&rows);
    }
    e->next = a->cache;
    a->cache = e;
    return e;
}

/* The schedule of `rank` alone (no agreement: for sizes and layouts), or NULL with the error set. */
static inline const struct collc_mpicuda_sched *collc_mpicuda_anyp_local(struct collc_mpicuda_anyp *a, int p,
                                                                         int rank)
{
    struct collc_mpicuda_anyp_sched *e = collc_mpicuda_anyp_get(a, p, rank);
    if (e == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_CUDA, "out of host memory"), nullptr;
    if (e->why[0] != '\0') return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s, p=%d: %s", a->algorithm, p, e->why), nullptr;
    return &e->s;
}

/* What every rank of a communicator agreed on at its first call: its schedule, or why there is none. */
struct collc_mpicuda_anyp_agreed {
    const struct collc_mpicuda_sched *s;
    char why[480];
};

/* The agreement of a rank that ran out of memory for its own: a failure, kept (never freed). */
static struct collc_mpicuda_anyp_agreed collc_mpicuda_anyp_no_memory = {NULL, "out of host memory"};

static inline int collc_mpicuda_anyp_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    (void)comm, (void)keyval, (void)extra;
    if (attr != &collc_mpicuda_anyp_no_memory) free(attr);
    return MPI_SUCCESS;
}

/* One non-blocking collective of the agreement on `comm`, under the watchdog (COLLC_TIMEOUT): a rank that never
 * calls fails the others instead of hanging them; the library is then broken until released. */
static inline int collc_mpicuda_anyp_wait(int code, MPI_Request *req, int rank, const char *what)
{
    const double timeout = collc_mpicuda_env_number("COLLC_TIMEOUT", 60.0, 1e-3);
    if (timeout < 0) return COLLC_CUDA_ERR_ARG;
    if (code != MPI_SUCCESS) return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "rank %d: %s failed", rank, what);
    return collc_mpicuda_wait_request(req, timeout, rank, what, &collc_mpicuda_kept.broken);
}

/* *out: the schedule for the calling rank of `comm` (the same reason on every rank when there is none); 0, or the
 * error code with the error set. */
static inline int collc_mpicuda_anyp_for(struct collc_mpicuda_anyp *a, MPI_Comm comm,
                                         const struct collc_mpicuda_sched **out)
{
    struct collc_mpicuda_anyp_agreed *agreed = NULL;
    int p = 0, rank = 0, found = 0, err;
    if (comm == MPI_COMM_NULL) return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "the communicator is MPI_COMM_NULL");
    if (collc_mpicuda_kept.broken)
        return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "an earlier call failed in the middle of a step; release the "
                               "library before calling it again");
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &rank);
    if (a->keyval == MPI_KEYVAL_INVALID &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, collc_mpicuda_anyp_delete, &a->keyval, NULL) != MPI_SUCCESS)
        return collc_cuda_fail(COLLC_MPICUDA_ERR_MPI, "MPI_Comm_create_keyval failed");
    MPI_Comm_get_attr(comm, a->keyval, &agreed, &found);
    if (!found || agreed == NULL) {
        struct collc_mpicuda_anyp_sched *e = collc_mpicuda_anyp_get(a, p, rank);
        char text[400];
        MPI_Request req;
        int failed = e == NULL || e->why[0] != '\0' ? rank : p; /* the lowest rank that failed */
        err = collc_mpicuda_anyp_wait(MPI_Iallreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MIN, comm, &req), &req,
                                      rank, "agreeing on the schedule of this communicator's size");
        if (err != COLLC_CUDA_OK) return err;
        if (failed < p) {
            snprintf(text, sizeof text, "%s", e == NULL ? "out of host memory" : e->why);
            err = collc_mpicuda_anyp_wait(MPI_Ibcast(text, (int)sizeof text, MPI_CHAR, failed, comm, &req), &req, rank,
                                          "sharing why a rank has no schedule");
            if (err != COLLC_CUDA_OK) return err;
            text[sizeof text - 1] = '\0';
        }
        agreed = (struct collc_mpicuda_anyp_agreed *)calloc(1, sizeof *agreed);
        if (agreed == NULL) {
            agreed = &collc_mpicuda_anyp_no_memory;
        } else if (failed < p) {
            snprintf(agreed->why, sizeof agreed->why, "%s, p=%d, rank %d: %s", a->algorithm, p, failed, text);
        } else {
            agreed->s = &e->s;
        }
        MPI_Comm_set_attr(comm, a->keyval, agreed);
    }
    if (agreed->s == NULL) return collc_cuda_fail(COLLC_CUDA_ERR_ARG, "%s", agreed->why);
    *out = agreed->s;
    return COLLC_CUDA_OK;
}

/* ---------------------------------------------------------------------------
 * The library's entry points
 * ------------------------------------------------------------------------- */

/* The collective on the calling rank's buffer, with the schedule of comm's size (see the generated header). */
static inline int collc_mpicuda_anyp_run(struct collc_mpicuda_anyp *a, void *buffer, int64_t count, int dtype,
                                         int op, MPI_Comm comm, void *stream)
{
    const struct collc_mpicuda_sched *s = NULL;
    const int err = collc_mpicuda_anyp_for(a, comm, &s);
    return err != COLLC_CUDA_OK ? err : collc_mpicuda_execute(s, buffer, count, dtype, op, comm, stream);
}

/* The collective with counts given at run time (allgather, reduce-scatter: comm's size p of them; alltoall: p * p),
 * with the schedule of comm's size (see the generated header). */
static inline int collc_mpicuda_anyp_run_v(struct collc_mpicuda_anyp *a, void *buffer, const int64_t *counts,
                                           int dtype, int op, MPI_Comm comm, void *stream)
{
    const struct collc_mpicuda_sched *s = NULL;
    const int err = collc_mpicuda_anyp_for(a, comm, &s);
    return err != COLLC_CUDA_OK ? err : collc_mpicuda_execute_v(s, buffer, counts, dtype, op, comm, stream);
}

/* The number of chunks of p ranks' schedule, or -1 (the error set). */
static inline int collc_mpicuda_anyp_nchunks(struct collc_mpicuda_anyp *a, int p)
{
    const struct collc_mpicuda_sched *s = collc_mpicuda_anyp_local(a, p, 0);
    return s == NULL ? -1 : s->base.nchunks;
}

/* The element offset of every chunk of p ranks' schedule for count elements; the number of chunks, or -1. */
static inline int collc_mpicuda_anyp_layout(struct collc_mpicuda_anyp *a, int p, int64_t count, int64_t *offsets)
{
    const struct collc_mpicuda_sched *s = collc_mpicuda_anyp_local(a, p, 0);
    return s == NULL ? -1 : collc_cuda_chunk_offsets(&s->base, count, offsets);
}

/* The element offset of every chunk of p ranks' schedule for counts given at run time; the number of chunks, or
 * -1. */
static inline int collc_mpicuda_anyp_layout_v(struct collc_mpicuda_anyp *a, int p, const int64_t *counts,
                                              int64_t *offsets)
{
    const struct collc_mpicuda_sched *s = collc_mpicuda_anyp_local(a, p, 0);
    return s == NULL ? -1 : collc_cuda_chunk_offsets_v(&s->base, counts, offsets);
}

/* The device scratch bytes `rank` of p ranks needs for count elements of dtype; -1 for bad arguments. */
static inline int64_t collc_mpicuda_anyp_scratch_bytes(struct collc_mpicuda_anyp *a, int64_t count, int dtype, int p,
                                                       int rank)
{
    const struct collc_mpicuda_sched *s = collc_mpicuda_anyp_local(a, p, rank);
    return s == NULL ? -1 : collc_mpicuda_scratch_bytes(s, count, dtype, rank);
}

/* The device scratch bytes `rank` of p ranks needs for counts given at run time; -1 for bad arguments. */
static inline int64_t collc_mpicuda_anyp_scratch_bytes_v(struct collc_mpicuda_anyp *a, const int64_t *counts,
                                                         int dtype, int p, int rank)
{
    const struct collc_mpicuda_sched *s = collc_mpicuda_anyp_local(a, p, rank);
    return s == NULL ? -1 : collc_mpicuda_scratch_bytes_v(s, counts, dtype, rank);
}

/* Waits for the last call (0, or -2): any-p libraries have no codecs to report on. */
static inline int collc_mpicuda_anyp_check(void)
{
    struct collc_mpicuda_sched none;
    memset(&none, 0, sizeof none);
    return collc_mpicuda_check(&none);
}

#endif /* COLLC_MPICUDA_ANYP_CUH */
