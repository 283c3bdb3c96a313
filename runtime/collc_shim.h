/* collc_shim.h: what the entry points of a collc library share, whatever the schedule.
 *
 * - Admission: whether a call fits the compiled schedule (communicator size,
 *   root, datatype, op, ...).  Every reason depends only on arguments that a
 *   correct MPI program passes identically on every rank, so all ranks take
 *   the same path.  An interposed MPI_* call that does not fit falls back to
 *   the PMPI_* collective; a collc_* call returns COLLC_ERR_UNSUPPORTED and
 *   collc_last_error() says why.
 * - COLLC_SHIM_LOG=1: every call prints one line on stderr, beginning
 *   "collc:", and the first fallback for each reason prints a note.
 * - COLLC_SHIM_CHECK=1: every call also runs the PMPI collective into a
 *   separate buffer, compares, and calls MPI_Abort naming the first element
 *   that differs.  Integer types, non-arithmetic ops and data movement must
 *   match exactly.  Floating-point (and complex) results of MPI_SUM and
 *   MPI_PROD may differ by rounding, since ranks are combined in another
 *   order: a component passes when |a - b| <= 4 * p * eps * max(|a|, |b|, S),
 *   where eps is the type's machine epsilon, |x| of a complex value is its
 *   largest component, S = p * (largest |input| on any rank) for MPI_SUM and
 *   S = 0 for MPI_PROD, which also allows p times the smallest normal number
 *   (underflow).  Two NaNs are equal; infinities must match.  A schedule with
 *   compression points is held to its error bound instead: |a - b| <= bound *
 *   max(1, A) (A the largest |input| on any rank; for absolute-error codecs the
 *   bound alone) plus the tolerance of the sums above.
 * - A schedule with compression points runs in an interposed MPI_* call only
 *   with COLLC_SHIM_COMPRESS=1, on MPI_FLOAT or MPI_DOUBLE with MPI_SUM (or
 *   without an op: allgather); rank 0 then notes the error bound once on
 *   stderr.  Every other call, and every call without the setting, goes to PMPI.
 *   The collc_* entry points run it on float or double with MPI_SUM, MPI_MAX or
 *   MPI_MIN (MPI_SUM where it adds homomorphic payloads).
 * - COLLC_TIMEOUT=S: a step that waits more than S seconds for its messages ends
 *   the job (collc_exec.h); unset or 0: no limit.
 * The variables are read once, at the first call.
 */
#ifndef COLLC_SHIM_H
#define COLLC_SHIM_H

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "collc_exec.h"
#include "collc_flow.h"

#ifndef COLLC_ERR_UNSUPPORTED
#define COLLC_ERR_UNSUPPORTED (-1) /* the call is outside what the library was compiled for */
#define COLLC_ERR_NOMEM (-2)       /* out of memory */
#endif

/* How an entry point reacts to a call it cannot run. */
enum collc_mode {
    COLLC_API,   /* collc_<algorithm>_*: return COLLC_ERR_UNSUPPORTED */
    COLLC_SHIM,  /* MPI_X: call PMPI_X */
    COLLC_SHIM_C /* MPI_X_c: call PMPI_X_c */
};

/* Why a call cannot run on the schedule. */
enum collc_reason {
    COLLC_FITS,
    COLLC_NOT_INITIALIZED,
    COLLC_INTERCOMM,
    COLLC_SIZE,
    COLLC_ROOT,
    COLLC_OP,
    COLLC_DATATYPE,
    COLLC_SIGNATURE,
    COLLC_COUNT,
    COLLC_COMPRESS,
    COLLC_NREASONS
};

/* The bytes of one element that carry data, as runs [at, at + len): a datatype
 * whose size is below its extent (a pair type such as MPI_DOUBLE_INT) has holes,
 * which are not part of a buffer: MPI leaves them in a receive buffer as they were. */
#define COLLC_MAX_FIELDS 8
struct collc_fields {
    int n;
    struct {
        int at, len;
    } run[COLLC_MAX_FIELDS];
};

/* One call: its arguments, and what admission learnt about them. */
struct collc_call {
    const struct collc_sched *sched;
    const char *entry; /* the entry point's name, for messages */
    enum collc_mode mode;
    MPI_Comm comm;
    MPI_Count count; /* the count argument, as the entry point names it */
    MPI_Datatype dt;
    MPI_Op op; /* MPI_OP_NULL: the collective does not reduce */
    int root;  /* -1: the collective has no root */
    MPI_Count elems; /* elements in the collective's logical space (for size limits) */
    int size, rank;
    MPI_Aint extent;
    MPI_Count type_size;
    int holes;                  /* type_size < extent: results are copied out field by field */
    struct collc_fields fields; /* when holes */
};

static struct {
    int read, log, check, compress, noted_bound;
    int steps; /* COLLC_ISSUE=steps: issue step by step, not by dataflow */
    double timeout;
    MPI_Count small_below; /* COLLC_SMALL_BYTES; -1 when unset */
    MPI_Count piece;       /* COLLC_PIECE_BYTES, else its default (collc_exec.h) */
    int noted[COLLC_NREASONS];
} collc_env;

static char collc_error_text[512];

static inline const char *collc_last_error(void)
{
    return collc_error_text;
}

static inline int collc_flag(const char *name)
{
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0' && strcmp(value, "0") != 0;
}

/* A byte count from the environment: digits with an optional K, M or G (powers of 1024, "KiB" accepted too);
 * -1 when unset, or (with a note) when it is not one. */
static inline MPI_Count collc_bytes_setting(const char *name)
{
    const char *value = getenv(name);
    char *end = NULL;
    long long n;
    MPI_Count scale = 1;
    if (value == NULL || value[0] == '\0') return -1;
    n = strtoll(value, &end, 10);
    if (end != value && n >= 0) {
        if (*end == 'K' || *end == 'k') scale = (MPI_Count)1 << 10;
        else if (*end == 'M' || *end == 'm') scale = (MPI_Count)1 << 20;
        else if (*end == 'G' || *end == 'g') scale = (MPI_Count)1 << 30;
        if (scale > 1) end += (end[1] == 'i' && (end[2] == 'B' || end[2] == 'b')) ? 3 : 1;
        else if (*end == 'B' || *end == 'b') end += 1;
        if (*end == '\0' && n <= (long long)(INT64_MAX / scale)) return (MPI_Count)n * scale;
    }
    fprintf(stderr, "collc: %s=%s is not a byte count like 65536 or 64KiB; ignored\n", name, value);
    return -1;
}

static inline void collc_read_env(void)
{
    if (collc_env.read) return;
    collc_env.read = 1;
    collc_env.log = collc_flag("COLLC_SHIM_LOG");
    collc_env.check = collc_flag("COLLC_SHIM_CHECK");
    collc_env.compress = collc_flag("COLLC_SHIM_COMPRESS");
    {
        const char *issue = getenv("COLLC_ISSUE");
        if (issue != NULL && issue[0] != '\0' && strcmp(issue, "steps") != 0 && strcmp(issue, "dataflow") != 0)
            fprintf(stderr, "collc: COLLC_ISSUE=%s is neither dataflow nor steps; dataflow\n", issue);
        collc_env.steps = issue != NULL && strcmp(issue, "steps") == 0;
    }
    {
        const char *timeout = getenv("COLLC_TIMEOUT");
        char *end = NULL;
        double value = timeout != NULL && timeout[0] != '\0' ? strtod(timeout, &end) : 0;
        if (timeout != NULL && timeout[0] != '\0' && (end == NULL || *end != '\0' || !(value >= 0))) {
            fprintf(stderr, "collc: COLLC_TIMEOUT=%s is not a number of seconds; no time limit\n", timeout);
            value = 0;
        }
        collc_env.timeout = value;
    }
    collc_env.small_below = collc_bytes_setting("COLLC_SMALL_BYTES");
    {
        MPI_Count piece = collc_bytes_setting("COLLC_PIECE_BYTES");
        collc_env.piece = piece >= 0 ? piece : COLLC_PIECE_BYTES;
    }
}

/* ---------------------------------------------------------------------------
 * Names
 * ------------------------------------------------------------------------- */

static inline const char *collc_op_name(MPI_Op op)
{
    static const struct {
        MPI_Op op;
        const char *name;
    } *p, names[] = {
        {MPI_SUM, "MPI_SUM"},   {MPI_PROD, "MPI_PROD"},     {MPI_MAX, "MPI_MAX"},       {MPI_MIN, "MPI_MIN"},
        {MPI_LAND, "MPI_LAND"}, {MPI_LOR, "MPI_LOR"},       {MPI_LXOR, "MPI_LXOR"},     {MPI_BAND, "MPI_BAND"},
        {MPI_BOR, "MPI_BOR"},   {MPI_BXOR, "MPI_BXOR"},     {MPI_MAXLOC, "MPI_MAXLOC"}, {MPI_MINLOC, "MPI_MINLOC"},
        {MPI_REPLACE, "MPI_REPLACE"}, {MPI_NO_OP, "MPI_NO_OP"}, {MPI_OP_NULL, "MPI_OP_NULL"},
    };
    for (p = names; p < names + sizeof names / sizeof names[0]; p++)
        if (p->op == op) return p->name;
    return "user-defined op";
}

static inline void collc_type_name(MPI_Datatype dt, char *out, size_t len)
{
    char name[MPI_MAX_OBJECT_NAME] = "";
    int n = 0, ready = 0, finalized = 0;
    PMPI_Initialized(&ready);
    if (ready) PMPI_Finalized(&finalized);
    if (ready && !finalized && dt != MPI_DATATYPE_NULL) PMPI_Type_get_name(dt, name, &n);
    snprintf(out, len, "%s", n > 0 ? name : dt == MPI_DATATYPE_NULL ? "MPI_DATATYPE_NULL" : "unnamed datatype");
}

/* "MPI_Allreduce ring p=4 rank 0 count=8 MPI_FLOAT MPI_SUM root=0" */
static inline void collc_describe(const struct collc_call *c, char *out, size_t len)
{
    char type[MPI_MAX_OBJECT_NAME + 32];
    int n;
    collc_type_name(c->dt, type, sizeof type);
    n = snprintf(out, len, "%s %s p=%d rank %d count=%lld %s", c->entry, c->sched->algorithm,
                 c->sched->nranks > 0 ? c->sched->nranks : c->size, c->rank, (long long)c->count, type);
    if (n >= 0 && (size_t)n < len && c->op != MPI_OP_NULL)
        n += snprintf(out + n, len - (size_t)n, " %s", collc_op_name(c->op));
    if (n >= 0 && (size_t)n < len && c->root >= 0) snprintf(out + n, len - (size_t)n, " root=%d", c->root);
}

/* ---------------------------------------------------------------------------
 * Admission
 * ------------------------------------------------------------------------- */

/* Whether `dt` can be moved as `extent` raw bytes per element: a predefined
 * datatype (pair types such as MPI_DOUBLE_INT included: the schedule moves their
 * holes too, in collc's own buffers, and results reach the caller's buffer field
 * by field), or a derived one that is contiguous, without holes and with lower bound 0. */
static inline int collc_plain_type(MPI_Datatype dt, MPI_Count size, MPI_Aint extent, MPI_Aint lb)
{
    int ni, na, nd, combiner;
    MPI_Aint true_lb, true_extent;
    if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return 0;
    if (combiner == MPI_COMBINER_NAMED) return lb == 0 && extent > 0;
    if (PMPI_Type_get_true_extent(dt, &true_lb, &true_extent) != MPI_SUCCESS) return 0;
    return size > 0 && size == extent && lb == 0 && true_lb == 0 && true_extent == extent;
}

/* The data bytes of one element of `dt` (extent at most 256), found by packing
 * an element whose bytes are their own offsets: the packed bytes name the offsets
 * that carry data.  Returns 0 when the packed form is not such a selection of
 * bytes (a library that converts data when packing) or has too many runs. */
static inline int collc_fields_of(MPI_Datatype dt, MPI_Aint extent, MPI_Count size, struct collc_fields *f)
{
    unsigned char elem[256], packed[256], seen[256];
    int position = 0;
    f->n = 0;
    if (extent <= 0 || extent > (MPI_Aint)sizeof elem || size <= 0 || size > extent) return 0;
    for (int k = 0; k < (int)extent; k++) elem[k] = (unsigned char)k, seen[k] = 0;
    if (PMPI_Pack(elem, 1, dt, packed, (int)sizeof packed, &position, MPI_COMM_SELF) != MPI_SUCCESS ||
        position != (int)size)
        return 0;
    for (int j = 0; j < position; j++) {
        int at = packed[j];
        if (at >= (int)extent || seen[at]) return 0;
        seen[at] = 1;
        if (f->n > 0 && f->run[f->n - 1].at + f->run[f->n - 1].len == at) {
            f->run[f->n - 1].len++;
        } else {
            if (f->n == COLLC_MAX_FIELDS) return 0;
            f->run[f->n].at = at;
            f->run[f->n].len = 1;
            f->n++;
        }
    }
    return 1;
}

/* dst = src for n elements of call c, leaving the holes of dst's elements as they were. */
static inline void collc_copy_data(const struct collc_call *c, char *dst, const char *src, MPI_Count n)
{
    if (dst == src || n == 0) return;
    if (!c->holes) {
        memmove(dst, src, (size_t)(n * c->extent));
        return;
    }
    for (MPI_Count e = 0; e < n; e++)
        for (int k = 0; k < c->fields.n; k++) {
            MPI_Count at = e * c->extent + c->fields.run[k].at;
            memmove(dst + at, src + at, (size_t)c->fields.run[k].len);
        }
}

/* Whether `op` is one of MPI's predefined reduction ops. */
static inline int collc_predefined_op(MPI_Op op)
{
    return op == MPI_SUM || op == MPI_PROD || op == MPI_MAX || op == MPI_MIN || op == MPI_LAND || op == MPI_LOR ||
           op == MPI_LXOR || op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR || op == MPI_MAXLOC ||
           op == MPI_MINLOC;
}

/* Whether MPI defines predefined op `op` on named datatype `dt`, found by a
 * one-element trial reduction with errors returned rather than raised: a
 * combination MPI rejects must go to PMPI on every rank, before the schedule
 * starts, rather than fail in the middle of it on the ranks that reduce. */
static inline int collc_op_defined(MPI_Datatype dt, MPI_Op op, MPI_Aint extent)
{
    unsigned char in[64], inout[64];
    MPI_Errhandler saved;
    int err;
    if (extent <= 0 || extent > (MPI_Aint)sizeof in) return 1;
    memset(in, 0, sizeof in);
    memset(inout, 0, sizeof inout);
    PMPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved);
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    err = PMPI_Reduce_local(in, inout, 1, dt, op);
    PMPI_Comm_set_errhandler(MPI_COMM_WORLD, saved);
    PMPI_Errhandler_free(&saved);
    return err == MPI_SUCCESS;
}

static inline enum collc_reason collc_reason_set(enum collc_reason why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(collc_error_text, sizeof collc_error_text, fmt, ap);
    va_end(ap);
    return why;
}

/* Why call `c` cannot run on the schedule (COLLC_FITS when it can); fills in size, rank, extent. */
static inline enum collc_reason collc_check_call(struct collc_call *c)
{
    const struct collc_sched *s = c->sched;
    int flag = 0, finalized = 0, inter = 0;
    MPI_Aint lb = 0;
    c->size = c->rank = -1;
    PMPI_Initialized(&flag);
    if (flag) PMPI_Finalized(&finalized);
    if (!flag || finalized) return collc_reason_set(COLLC_NOT_INITIALIZED, "MPI is not initialised");
    if (c->comm == MPI_COMM_NULL) return collc_reason_set(COLLC_INTERCOMM, "the communicator is MPI_COMM_NULL");
    if (PMPI_Comm_test_inter(c->comm, &inter) != MPI_SUCCESS || inter)
        return collc_reason_set(COLLC_INTERCOMM, "an intercommunicator");
    PMPI_Comm_size(c->comm, &c->size);
    PMPI_Comm_rank(c->comm, &c->rank);
    if (c->size != s->nranks) { /* another rank count of the library, if it has one */
        int i = 0;
        while (i < s->nsizes && s->sizes[i]->nranks != c->size) i++;
        if (i == s->nsizes && s->for_size != NULL) { /* built at run time for this size */
            char why[448];
            const struct collc_sched *t = s->for_size(c->comm, c->size, c->rank, why, sizeof why);
            if (t == NULL) return collc_reason_set(COLLC_SIZE, "%s", why);
            c->sched = s = t;
        } else if (i == s->nsizes && s->nsizes > 0)
            return collc_reason_set(COLLC_SIZE, "communicator of size %d, compiled for p = %s", c->size,
                                    s->sizes_text);
        else if (i == s->nsizes)
            return collc_reason_set(COLLC_SIZE, "communicator of size %d, compiled for p=%d", c->size, s->nranks);
        else
            c->sched = s = s->sizes[i];
    }
    /* the logical space at this communicator's size (collc_call_of counted the library's first size) */
    if (s->collective == COLLC_COLL_ALLGATHER || s->collective == COLLC_COLL_REDUCE_SCATTER)
        c->elems = c->count * c->size;
    else if (s->collective == COLLC_COLL_ALLTOALL)
        c->elems = c->count * c->size * c->size;
    if (c->root >= 0 && c->root != s->root)
        return collc_reason_set(COLLC_ROOT, "root %d, compiled for root=%d", c->root, s->root);
    if (c->op != MPI_OP_NULL) {
        int commutes = 0;
        if (PMPI_Op_commutative(c->op, &commutes) != MPI_SUCCESS || !commutes || c->op == MPI_REPLACE ||
            c->op == MPI_NO_OP)
            return collc_reason_set(COLLC_OP, "the reduction op is not commutative");
    }
    if (c->count < 0) return collc_reason_set(COLLC_COUNT, "a negative count");
    if (c->dt == MPI_DATATYPE_NULL) return collc_reason_set(COLLC_DATATYPE, "datatype MPI_DATATYPE_NULL");
#if MPI_VERSION >= 4
    PMPI_Type_size_c(c->dt, &c->type_size);
#else
    PMPI_Type_size_x(c->dt, &c->type_size);
#endif
    if (s->small != NULL) { /* a small call runs the small-message schedule */
        MPI_Count below = collc_env.small_below >= 0 ? collc_env.small_below : s->small_below;
        if (c->count * c->type_size < below) c->sched = s = s->small;
    }
    PMPI_Type_get_extent(c->dt, &lb, &c->extent);
    if (!collc_plain_type(c->dt, c->type_size, c->extent, lb))
        return collc_reason_set(COLLC_DATATYPE, "datatype with holes or a nonzero lower bound");
    c->holes = c->type_size < c->extent;
    if (c->holes && !collc_fields_of(c->dt, c->extent, c->type_size, &c->fields))
        return collc_reason_set(COLLC_DATATYPE, "a predefined datatype whose data bytes cannot be found");
    if (c->op != MPI_OP_NULL && collc_predefined_op(c->op)) {
        int ni, na, nd, combiner = MPI_COMBINER_NAMED;
        PMPI_Type_get_envelope(c->dt, &ni, &na, &nd, &combiner);
        if (combiner != MPI_COMBINER_NAMED)
            return collc_reason_set(COLLC_OP, "a predefined op on a derived datatype (MPI defines none)");
        if (collc_kernel_for(c->dt, c->op) == NULL && !collc_op_defined(c->dt, c->op, c->extent))
            return collc_reason_set(COLLC_OP, "the op is not defined on this datatype");
    }
#if MPI_VERSION < 4
    if (c->elems * c->extent > INT_MAX)
        return collc_reason_set(COLLC_COUNT, "message sizes above INT_MAX need an MPI-4 library");
#endif
    if (s->ncodecs > 0) {
        const int shim = c->mode != COLLC_API;
        if (shim && !collc_env.compress)
            return collc_reason_set(COLLC_COMPRESS, "the schedule has compression points: COLLC_SHIM_COMPRESS=1 "
                                                    "runs it (error bound %.3g for inputs |x| <= 1)",
                                    s->error_bound);
        if (c->dt != MPI_FLOAT && c->dt != MPI_DOUBLE)
            return collc_reason_set(COLLC_COMPRESS, "compression points: MPI_FLOAT or MPI_DOUBLE data only");
        if (c->op != MPI_OP_NULL && c->op != MPI_SUM &&
            (shim || s->adds_payloads || (c->op != MPI_MAX && c->op != MPI_MIN)))
            return collc_reason_set(COLLC_COMPRESS, "compression points: the op must be MPI_SUM%s",
                                    shim || s->adds_payloads ? "" : ", MPI_MAX or MPI_MIN");
    }
    return COLLC_FITS;
}

/* Rank 0 notes a compressed schedule's error bound on stderr, the first time one runs. */
static inline void collc_note_bound(const struct collc_call *c)
{
    const struct collc_sched *s = c->sched;
    const double bound = c->extent == 8 ? s->error_bound64 : s->error_bound;
    char codecs[256] = "";
    size_t used = 0;
    if (s->ncodecs == 0 || c->mode == COLLC_API || collc_env.noted_bound || c->rank != 0) return;
    collc_env.noted_bound = 1;
    for (int i = 0; i < s->ncodecs && used < sizeof codecs; i++)
        used += (size_t)snprintf(codecs + used, sizeof codecs - used, "%s%s", i ? ", " : "", s->codecs[i].spec);
    if (s->bound_scales)
        fprintf(stderr, "collc: note: %s runs %s with compression (%s): worst-case error bound %.3g for inputs "
                "|x| <= 1, %.3g * A for |x| <= A > 1\n", c->entry, s->algorithm, codecs, bound, bound);
    else
        fprintf(stderr, "collc: note: %s runs %s with compression (%s): worst-case error bound %.3g\n", c->entry,
                s->algorithm, codecs, bound);
}

/* Admission and logging of call `c`; `same_signature` is 0 when the send and
 * receive types or counts differ.  Returns COLLC_FITS or the reason. */
static inline enum collc_reason collc_admit(struct collc_call *c, int same_signature)
{
    enum collc_reason why;
    char what[MPI_MAX_OBJECT_NAME + 256];
    collc_read_env();
    why = collc_check_call(c);
    if (why == COLLC_FITS && !same_signature)
        why = collc_reason_set(COLLC_SIGNATURE, "send and receive counts or datatypes differ");
    if (why == COLLC_FITS) collc_note_bound(c);
    if (!collc_env.log) return why;
    collc_describe(c, what, sizeof what);
    if (why == COLLC_FITS) {
        fprintf(stderr, "collc: %s\n", what);
    } else {
        const char *outcome = c->mode != COLLC_API ? "PMPI fallback" : "error";
        fprintf(stderr, "collc: %s -> %s (%s)\n", what, outcome, collc_error_text);
        if (!collc_env.noted[why]) {
            collc_env.noted[why] = 1;
            fprintf(stderr, "collc: note: %s: %s; calls like this %s (noted once)\n", c->sched->algorithm,
                    collc_error_text, c->mode != COLLC_API ? "fall back to PMPI" : "return an error");
        }
    }
    return why;
}

/* Aborts the job after an error that leaves the ranks out of step; does not return. */
static inline void collc_fatal(const struct collc_call *c, const char *fmt, ...)
{
    char text[1024];
    int n = snprintf(text, sizeof text, "collc: %s %s p=%d rank %d: ", c->entry, c->sched->algorithm,
                     c->sched->nranks, c->rank);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof text) vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", text); /* one write, so that ranks do not interleave */
    collc_abort_job(c->comm);
}

/* Sets up `ctx` for running the schedule on `work` (NULL: a work buffer of
 * `work_elems` elements from the arena).  Returns MPI_SUCCESS or an error. */
static inline int collc_begin(struct collc_call *c, struct collc_ctx *ctx, MPI_Count count, char *work,
                              MPI_Count work_elems)
{
    const struct collc_sched *s = c->sched;
    struct collc_comm *cache;
    size_t nreqs, reqs_bytes, base_bytes, scratch_bytes, zbytes = 0, flow_bytes = 0, work_bytes, at;
    MPI_Count chunk;
    char *arena;
    char what[MPI_MAX_OBJECT_NAME + 256] = "";
    int err;
    collc_read_env();
    if (collc_env.timeout > 0) collc_describe(c, what, sizeof what);
    err = collc_comm_of(c->comm, &cache, collc_env.timeout, what);
    if (err != MPI_SUCCESS) return err;
    memset(ctx, 0, sizeof *ctx);
    ctx->sched = s;
    ctx->entry = c->entry;
    ctx->comm = cache->comm;
    ctx->rank = c->rank;
    ctx->dt = c->dt;
    ctx->op = c->op;
    ctx->extent = c->extent;
    ctx->timeout = collc_env.timeout;
    ctx->piece = s->ncodecs > 0 ? 0 : collc_env.piece; /* compression points: messages go whole (collc_zexec.h) */
    ctx->count = count;
    ctx->kernel = c->op != MPI_OP_NULL ? collc_kernel_for(c->dt, c->op) : NULL;
    ctx->layout = collc_sched_layout(s, count);
    if (s->rank_segments != NULL) {
        ctx->segs = s->segments + s->rank_segments[c->rank].first;
        ctx->nsegs = s->rank_segments[c->rank].n;
    }
    collc_wire_last = 0;
    ctx->wire = &collc_wire_last;
    chunk = collc_max_chunk(&ctx->layout);
    /* Arena: requests, statuses, peers, landings, expected sizes | segment bases | scratch | compression | work,
       64-byte aligned.  A message may take collc_pieces_most() requests. */
    nreqs = (size_t)s->max_messages * (size_t)collc_pieces_most(ctx->piece);
    reqs_bytes = nreqs * (sizeof(MPI_Request) + sizeof(MPI_Status) + sizeof(int) + sizeof(char *)
                          + sizeof(struct collc_expect));
    reqs_bytes = (reqs_bytes + 64 * 5 + 63) & ~(size_t)63;
    base_bytes = ((size_t)ctx->nsegs * sizeof(MPI_Count) + 63) & ~(size_t)63;
    if (s->ncodecs > 0) {
        scratch_bytes = (size_t)s->zscratch(ctx);
        for (int i = 0; i < s->ncodecs; i++) {
            MPI_Count most = (MPI_Count)collc_zmax_bytes(&s->codecs[i], (collc_u64)chunk, ctx->extent == 8 ? 2 : 1);
            if (most > ctx->slot_cap) ctx->slot_cap = most;
        }
        ctx->slot_cap = (ctx->slot_cap + 63) & ~(MPI_Count)63;
        /* slots | sizes | float32 values | decoded values | one payload */
        zbytes = (size_t)(s->nchunks * ctx->slot_cap) + (((size_t)s->nchunks * sizeof(MPI_Count) + 63) & ~(size_t)63);
        zbytes += (((size_t)chunk * 4 + 63) & ~(size_t)63) + (((size_t)(chunk * c->extent) + 63) & ~(size_t)63);
        zbytes += (size_t)ctx->slot_cap;
    } else if (s->flow != NULL && !collc_env.steps) {
        ctx->flow = 1;
        scratch_bytes = (size_t)(s->flow_scratch[c->rank] * chunk * c->extent);
        flow_bytes = collc_flow_bytes(s, c->rank, ctx->piece);
    } else {
        scratch_bytes = (size_t)(s->scratch_chunks[c->rank] * chunk * c->extent);
    }
    scratch_bytes = (scratch_bytes + 63) & ~(size_t)63;
    work_bytes = work == NULL ? (size_t)(work_elems * c->extent) : 0;
    arena = (char *)collc_arena(cache, reqs_bytes + base_bytes + scratch_bytes + zbytes + flow_bytes + work_bytes);
    if (arena == NULL) return COLLC_ERR_NOMEM;
    at = 0;
    ctx->reqs = (MPI_Request *)(arena + at);
    at += (nreqs * sizeof(MPI_Request) + 63) & ~(size_t)63;
    ctx->statuses = (MPI_Status *)(arena + at);
    at += (nreqs * sizeof(MPI_Status) + 63) & ~(size_t)63;
    ctx->req_peer = (int *)(arena + at);
    at += (nreqs * sizeof(int) + 63) & ~(size_t)63;
    ctx->landing = (char **)(arena + at);
    at += (nreqs * sizeof(char *) + 63) & ~(size_t)63;
    ctx->expect = (struct collc_expect *)(arena + at);
    ctx->seg_base = (MPI_Count *)(arena + reqs_bytes);
    ctx->scratch = arena + reqs_bytes + base_bytes;
    at = reqs_bytes + base_bytes + scratch_bytes;
    if (s->ncodecs > 0) {
        ctx->slots = arena + at;
        at += (size_t)(s->nchunks * ctx->slot_cap);
        ctx->zsize = (MPI_Count *)(arena + at);
        at += ((size_t)s->nchunks * sizeof(MPI_Count) + 63) & ~(size_t)63;
        ctx->zf32 = (float *)(arena + at);
        at += ((size_t)chunk * 4 + 63) & ~(size_t)63;
        ctx->zvals = arena + at;
        at += ((size_t)(chunk * c->extent) + 63) & ~(size_t)63;
        ctx->zpay = (collc_u8 *)(arena + at);
        at += (size_t)ctx->slot_cap;
        for (int i = 0; i < s->nchunks; i++) ctx->zsize[i] = -1;
    }
    if (ctx->flow) {
        ctx->fs = collc_flow_layout(s, c->rank, ctx->piece, arena + at);
        at += flow_bytes;
    }
    ctx->work = work != NULL ? work : arena + at;
    for (MPI_Count i = 0, pos = 0; i < ctx->nsegs; i++) {
        ctx->seg_base[i] = pos;
        pos += collc_chunk_offset(&ctx->layout, ctx->segs[i].hi) - collc_chunk_offset(&ctx->layout, ctx->segs[i].lo);
    }
    return MPI_SUCCESS;
}

/* Elements in the work buffer of an alltoall rank: its segments end to end. */
static inline MPI_Count collc_segments_elems(const struct collc_sched *s, int rank, MPI_Count count)
{
    struct collc_layout l = collc_sched_layout(s, count);
    const struct collc_run *seg = s->segments + s->rank_segments[rank].first;
    MPI_Count total = 0;
    for (int i = 0; i < s->rank_segments[rank].n; i++)
        total += collc_chunk_offset(&l, seg[i].hi) - collc_chunk_offset(&l, seg[i].lo);
    return total;
}

/* Runs the schedule, turning an out-of-memory into an abort for interposed calls. */
static inline int collc_execute(struct collc_call *c, struct collc_ctx *ctx, MPI_Count count, char *work,
                                MPI_Count work_elems, char **work_out)
{
    int err = collc_begin(c, ctx, count, work, work_elems);
    if (err == COLLC_ERR_NOMEM) {
        if (c->mode != COLLC_API) collc_fatal(c, "out of memory");
        snprintf(collc_error_text, sizeof collc_error_text, "out of memory");
        return err;
    }
    if (err != MPI_SUCCESS) return err;
    if (work_out != NULL) *work_out = ctx->work;
    return MPI_SUCCESS;
}

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
    char *out = (char *)malloc((size_t)(n * c->type_size) + 1);
    if (out == NULL) collc_fatal(c, "COLLC_SHIM_CHECK: out of memory");
#if MPI_VERSION >= 4
    PMPI_Pack_c(buf, n, c->dt, out, n * c->type_size, &position, MPI_COMM_SELF);
#else
    {
        int at = 0;
        PMPI_Pack(buf, (int)n, c->dt, out, (int)(n * c->type_size), &at, MPI_COMM_SELF);
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
    struct collc_fview v = collc_fview_of(c->dt, c->type_size);
    long double zbound = 0; /* compression points: the error bound, scaled to the inputs */
    if (c->sched->ncodecs > 0) {
        double a = c->op == MPI_SUM ? scale / c->size : collc_input_scale(ref, n, c->dt, c->type_size);
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
                MPI_Count e = c->type_size > 0 ? i / c->type_size : 0;
                enum collc_elem k = collc_elem_of(c->dt);
                if (k >= COLLC_ELEM_I8 && k <= COLLC_ELEM_U64 && c->type_size > 0 && c->type_size <= 8) {
                    long long x = 0, y = 0;
                    int is_signed = k == COLLC_ELEM_I8 || k == COLLC_ELEM_I16 || k == COLLC_ELEM_I32 ||
                                    k == COLLC_ELEM_I64;
                    size_t width = (size_t)c->type_size & 15u; /* 1..8, as tested: bounded for the compiler too */
                    memcpy(&x, a + e * c->type_size, width);
                    memcpy(&y, b + e * c->type_size, width);
                    if (is_signed && c->type_size < 8) { /* sign-extend */
                        int shift = (int)(64 - 8 * c->type_size);
                        x = (long long)((unsigned long long)x << shift) >> shift;
                        y = (long long)((unsigned long long)y << shift) >> shift;
                    }
                    collc_fatal(c, "COLLC_SHIM_CHECK: element %lld differs from PMPI: %lld (collc) != %lld (PMPI)",
                                (long long)e, x, y);
                } else {
                    collc_fatal(c, "COLLC_SHIM_CHECK: element %lld differs from PMPI (byte %lld of the element)",
                                (long long)e, (long long)(i - e * c->type_size));
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
    m = collc_input_scale(input, n, c->dt, c->type_size);
    PMPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, comm);
    return m * c->size;
}

/* A buffer for PMPI's reference result, once every rank is known to have passed the same count. */
static inline char *collc_check_buffer(const struct collc_call *c, MPI_Count elems)
{
    long long range[2] = {(long long)c->count, -(long long)c->count};
    char *buf;
    PMPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG_LONG, MPI_MAX, c->comm);
    if (range[0] != -range[1])
        collc_fatal(c, "COLLC_SHIM_CHECK: the ranks called with different counts (from %lld to %lld)", -range[1],
                    range[0]);
    buf = (char *)malloc((size_t)(elems * c->extent) + 1);
    if (buf == NULL) collc_fatal(c, "COLLC_SHIM_CHECK: out of memory");
    return buf;
}

#endif /* COLLC_SHIM_H */
