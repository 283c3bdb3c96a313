/* collc_shim.h: what the entry points of a collc library share, whatever the schedule.
 *
 * - Admission: whether a call fits the compiled schedule (communicator size,
 *   root, datatype, op, ...).  Every reason depends only on what a correct MPI
 *   program gives every rank alike, so all ranks take the same path: the
 *   communicator's size, the root, the op, and of the datatype only its type
 *   signature (collc_dtype.h).  Ranks may pass different datatypes of one
 *   signature: data movement runs on the signature's bytes, packing a layout
 *   that is not its packed bytes into collc's work buffer; a predefined op on a
 *   derived datatype, which MPI does not define, goes to the MPI library (which
 *   refuses it); a user-defined op runs on the schedule when the ranks agree
 *   (one PMPI_Allreduce per call) that each passed a predefined or dense
 *   datatype of the same extent, size and count, else to PMPI on every rank.
 *   An interposed MPI_* call that does not fit falls back to
 *   the PMPI_* collective; a collc_* call returns COLLC_ERR_UNSUPPORTED and
 *   collc_last_error() says why.
 * - COLLC_SHIM_EXACT=1 (or a library compiled with COLLC_DEFAULT_EXACT 1; =0
 *   overrides it): floating-point MPI_SUM and MPI_PROD, whose last bits depend on
 *   the order in which ranks are combined, go to PMPI on every rank, so that
 *   results are the MPI library's bit for bit.  Without the setting, a
 *   schedule whose ranks combine in different orders (struct collc_sched's
 *   mixed_orders, e.g. latency-optimal Swing from 8 ranks) hands them to PMPI
 *   too, since its ranks' results would differ in the last bits from each
 *   other; COLLC_SHIM_EXACT=0 runs it anyway.
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

#include "collc_dtype.h"
#include "collc_exec.h"
#include "collc_flow.h"

#ifndef COLLC_DEFAULT_EXACT
#define COLLC_DEFAULT_EXACT 0 /* COLLC_SHIM_EXACT when unset */
#endif

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
    COLLC_COUNT,
    COLLC_COMPRESS,
    COLLC_EXACT,
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
    MPI_Datatype dt;   /* the datatype argument (allgather, alltoall: the receive type) */
    MPI_Op op; /* MPI_OP_NULL: the collective does not reduce */
    int root;  /* -1: the collective has no root */
    MPI_Count elems; /* work elements in the collective's logical space (for size limits) */
    int size, rank;
    MPI_Count type_size;  /* of dt */
    MPI_Aint dt_extent;   /* of dt: the stride of its elements in the caller's buffers */
    /* The schedule's elements ("work elements"): what admission chose from the signature. */
    MPI_Datatype unit;    /* reductions: dt; data movement: MPI_BYTE (compression points: MPI_FLOAT or MPI_DOUBLE) */
    MPI_Aint extent;      /* bytes per work element */
    MPI_Count usize;      /* data bytes per work element (below extent: holes) */
    MPI_Count n;          /* work elements per `count` elements of dt */
    int dense;            /* dt's elements lie as their packed bytes (data movement): buffers are used as they are */
    int holes;                  /* usize < extent: results are copied out field by field */
    struct collc_fields fields; /* when holes */
    const MPI_Count *offsets;   /* the chunks' offsets in work elements, given by the call (collc_vcoll.h), or NULL */
};

#define COLLC_MAX_BANDS 32 /* the most thresholds COLLC_BAND_BYTES lists */

static struct {
    int read, log, check, compress, exact, exact_set, noted_bound;
    int steps; /* COLLC_ISSUE=steps: issue step by step, not by dataflow */
    double timeout;
    MPI_Count small_below; /* COLLC_SMALL_BYTES; -1 when unset */
    MPI_Count bands[COLLC_MAX_BANDS]; /* COLLC_BAND_BYTES: the thresholds, ascending */
    int nbands, noted_bands;          /* how many (0: unset or ignored); whether a mismatch was noted */
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

/* A byte count: digits with an optional K, M or G (powers of 1024, "KiB" accepted too) up to `stop` (a character
 * that ends it, or '\0'); -1 when it is not one.  *rest is set past it. */
static inline MPI_Count collc_bytes_text(const char *value, char stop, const char **rest)
{
    char *end = NULL;
    long long n;
    MPI_Count scale = 1;
    n = strtoll(value, &end, 10);
    if (end != value && n >= 0) {
        if (*end == 'K' || *end == 'k') scale = (MPI_Count)1 << 10;
        else if (*end == 'M' || *end == 'm') scale = (MPI_Count)1 << 20;
        else if (*end == 'G' || *end == 'g') scale = (MPI_Count)1 << 30;
        if (scale > 1) end += (end[1] == 'i' && (end[2] == 'B' || end[2] == 'b')) ? 3 : 1;
        else if (*end == 'B' || *end == 'b') end += 1;
        *rest = end;
        if ((*end == '\0' || *end == stop) && n <= (long long)(INT64_MAX / scale)) return (MPI_Count)n * scale;
    }
    return -1;
}

/* A byte count from the environment (collc_bytes_text); -1 when unset, or (with a note) when it is not one. */
static inline MPI_Count collc_bytes_setting(const char *name)
{
    const char *value = getenv(name), *rest = NULL;
    MPI_Count bytes;
    if (value == NULL || value[0] == '\0') return -1;
    bytes = collc_bytes_text(value, '\0', &rest);
    if (bytes >= 0) return bytes;
    fprintf(stderr, "collc: %s=%s is not a byte count like 65536 or 64KiB; ignored\n", name, value);
    return -1;
}

/* COLLC_BAND_BYTES=T1,T2,...: byte counts, ascending, into collc_env.bands; a list that is not one is noted and
 * ignored (nbands 0). */
static inline void collc_read_bands(void)
{
    const char *value = getenv("COLLC_BAND_BYTES"), *at = value, *rest = NULL;
    int n = 0;
    if (value == NULL || value[0] == '\0') return;
    for (;;) {
        MPI_Count bytes = collc_bytes_text(at, ',', &rest);
        if (bytes < 0 || n == COLLC_MAX_BANDS || (n > 0 && bytes <= collc_env.bands[n - 1])) {
            fprintf(stderr, "collc: COLLC_BAND_BYTES=%s is not a list of at most %d ascending byte counts like "
                            "4KiB,1MiB; ignored\n", value, COLLC_MAX_BANDS);
            collc_env.nbands = 0;
            return;
        }
        collc_env.bands[n++] = bytes;
        collc_env.nbands = n;
        if (*rest == '\0') return;
        at = rest + 1;
    }
}

/* The threshold of link `depth` (0: the main schedule's) of a chain of `links` bands below the main schedule:
 * calls of fewer bytes go down it.  COLLC_BAND_BYTES's entry when it lists one per link, else COLLC_SMALL_BYTES
 * for the last link (the smallest band's), else the compiled one. */
static inline MPI_Count collc_band_below(const struct collc_sched *s, int links, int depth)
{
    if (collc_env.nbands == links) return collc_env.bands[links - 1 - depth];
    if (collc_env.nbands > 0 && !collc_env.noted_bands) {
        collc_env.noted_bands = 1;
        fprintf(stderr, "collc: COLLC_BAND_BYTES lists %d thresholds, the library has %d; ignored\n",
                collc_env.nbands, links);
    }
    if (collc_env.small_below >= 0 && depth == links - 1) return collc_env.small_below;
    return s->small_below;
}

static inline void collc_read_env(void)
{
    if (collc_env.read) return;
    collc_env.read = 1;
    collc_env.log = collc_flag("COLLC_SHIM_LOG");
    collc_env.check = collc_flag("COLLC_SHIM_CHECK");
    collc_env.compress = collc_flag("COLLC_SHIM_COMPRESS");
    collc_env.exact_set = getenv("COLLC_SHIM_EXACT") != NULL && getenv("COLLC_SHIM_EXACT")[0] != '\0';
    collc_env.exact = collc_env.exact_set ? collc_flag("COLLC_SHIM_EXACT") : COLLC_DEFAULT_EXACT;
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
    collc_read_bands();
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

/* Whether `dt` is a predefined floating-point or complex type, whose sums and products round. */
static inline int collc_float_type(MPI_Datatype dt)
{
    const MPI_Datatype floats[] = {
        MPI_FLOAT, MPI_DOUBLE, MPI_LONG_DOUBLE, MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX,
        MPI_C_LONG_DOUBLE_COMPLEX, MPI_CXX_FLOAT_COMPLEX, MPI_CXX_DOUBLE_COMPLEX, MPI_CXX_LONG_DOUBLE_COMPLEX,
        MPI_REAL, MPI_DOUBLE_PRECISION, MPI_COMPLEX, MPI_DOUBLE_COMPLEX, MPI_REAL4, MPI_REAL8, MPI_REAL16,
        MPI_COMPLEX8, MPI_COMPLEX16, MPI_COMPLEX32,
#ifdef MPIX_C_FLOAT16
        MPIX_C_FLOAT16,
#endif
#ifdef MPIX_BFLOAT16
        MPIX_BFLOAT16,
#endif
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (dt == floats[i] && dt != MPI_DATATYPE_NULL) return 1;
    return 0;
}

/* Whether every rank of the call found its datatype usable and of the same extent, size and count: the
 * agreement of a user-defined op, whose function sees each rank's datatype (one PMPI_Allreduce). */
static inline int collc_agree(const struct collc_call *c, int usable)
{
    long long v[7] = {!usable, (long long)c->extent, -(long long)c->extent, (long long)c->usize,
                      -(long long)c->usize, (long long)c->count, -(long long)c->count};
    if (PMPI_Allreduce(MPI_IN_PLACE, v, 7, MPI_LONG_LONG, MPI_MAX, c->comm) != MPI_SUCCESS) return 0;
    return v[0] == 0 && v[1] == -v[2] && v[3] == -v[4] && v[5] == -v[6];
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
    c->type_size = collc_type_size(c->dt);
    if (s->small != NULL) { /* a small call runs a smaller band's schedule: bytes of the signature */
        const MPI_Count bytes = c->count * c->type_size;
        int links = 0, depth = 0;
        for (const struct collc_sched *t = s; t->small != NULL; t = t->small) links++;
        while (s->small != NULL && bytes < collc_band_below(s, links, depth)) c->sched = s = s->small, depth++;
    }
    PMPI_Type_get_extent(c->dt, &lb, &c->dt_extent);
    if (c->op == MPI_OP_NULL) { /* data movement: the signature's bytes, whatever the layout */
        MPI_Datatype leaf = MPI_DATATYPE_NULL;
        c->unit = MPI_BYTE, c->extent = 1, c->usize = 1;
        if (s->ncodecs > 0 && collc_leaf_scan(c->dt, &leaf, 0) && (leaf == MPI_FLOAT || leaf == MPI_DOUBLE))
            c->unit = leaf, c->usize = collc_type_size(leaf), c->extent = (MPI_Aint)c->usize;
        c->n = c->count * c->type_size / c->usize;
        c->dense = collc_dense(c->dt);
    } else { /* a reduction: elements of the datatype itself */
        const int named = collc_combiner(c->dt) == MPI_COMBINER_NAMED;
        int usable = named || collc_dense(c->dt);
        c->unit = c->dt, c->extent = c->dt_extent, c->usize = c->type_size, c->n = c->count, c->dense = 1;
        c->holes = c->usize < c->extent;
        if (c->holes && !collc_fields_of(c->dt, c->extent, c->type_size, &c->fields)) usable = 0;
        if (collc_predefined_op(c->op)) { /* MPI defines these on predefined datatypes only */
            if (!named)
                return collc_reason_set(COLLC_OP, "a predefined op on a derived datatype (MPI defines none: "
                                                  "the MPI library takes or refuses the call)");
            if (!usable)
                return collc_reason_set(COLLC_DATATYPE, "a predefined datatype whose data bytes cannot be found");
            if (collc_kernel_for(c->dt, c->op) == NULL && !collc_op_defined(c->dt, c->op, c->extent))
                return collc_reason_set(COLLC_OP, "the op is not defined on this datatype");
            if (collc_env.exact && (c->op == MPI_SUM || c->op == MPI_PROD) && collc_float_type(c->dt))
                return collc_reason_set(COLLC_EXACT, "COLLC_SHIM_EXACT: a floating-point %s, whose rounding "
                                        "depends on the order of the ranks", collc_op_name(c->op));
            if (s->mixed_orders != NULL && !collc_env.exact_set && (c->op == MPI_SUM || c->op == MPI_PROD) &&
                collc_float_type(c->dt))
                return collc_reason_set(COLLC_EXACT, "a floating-point %s: %s (COLLC_SHIM_EXACT=0 runs it anyway)",
                                        collc_op_name(c->op), s->mixed_orders);
        } else if (!collc_agree(c, usable)) { /* a user-defined op: the ranks agree on their datatypes */
            return collc_reason_set(COLLC_DATATYPE, "a user-defined op on datatypes that are not predefined or "
                                    "dense on every rank, or not of one extent, size and count");
        }
    }
    /* the logical space at this communicator's size, in work elements */
    c->elems = c->n;
    if (collc_rank_blocks(s->collective))
        c->elems = c->n * c->size;
    else if (s->collective == COLLC_COLL_ALLTOALL)
        c->elems = c->n * c->size * c->size;
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
        if (c->unit != MPI_FLOAT && c->unit != MPI_DOUBLE)
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

/* Admission and logging of call `c`.  Returns COLLC_FITS or the reason.  With `counts` (counts given at run
 * time, collc_vcoll.h), a schedule with chunk weights of its own or compression points does not fit. */
static inline enum collc_reason collc_admit_as(struct collc_call *c, int counts)
{
    enum collc_reason why;
    char what[MPI_MAX_OBJECT_NAME + 256];
    collc_read_env();
    why = collc_check_call(c);
    if (why == COLLC_FITS && counts && c->sched->chunk_prefix != NULL)
        why = collc_reason_set(COLLC_COUNT, "counts given at run time, and the schedule has chunk weights of its own");
    else if (why == COLLC_FITS && counts && c->sched->ncodecs > 0)
        why = collc_reason_set(COLLC_COMPRESS, "counts given at run time, and the schedule has compression points");
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

static inline enum collc_reason collc_admit(struct collc_call *c)
{
    return collc_admit_as(c, 0);
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
    ctx->dt = c->unit;
    ctx->op = c->op;
    ctx->extent = c->extent;
    ctx->timeout = collc_env.timeout;
    ctx->piece = s->ncodecs > 0 ? 0 : collc_env.piece; /* compression points: messages go whole (collc_zexec.h) */
    ctx->near = cache->near;
    ctx->count = count;
    ctx->kernel = c->op != MPI_OP_NULL ? collc_kernel_for(c->unit, c->op) : NULL;
    ctx->kernel3 = c->op != MPI_OP_NULL ? collc_kernel3_for(c->unit, c->op) : NULL;
    ctx->layout = collc_sched_layout(s, count);
    if (c->offsets != NULL) { /* counts given at run time: the chunks as they cut them */
        ctx->layout.offsets = c->offsets;
        ctx->layout.max_chunk = 0;
        for (int i = 0; i < s->nchunks; i++)
            if (c->offsets[i + 1] - c->offsets[i] > ctx->layout.max_chunk)
                ctx->layout.max_chunk = c->offsets[i + 1] - c->offsets[i];
    }
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

#endif /* COLLC_SHIM_H */
