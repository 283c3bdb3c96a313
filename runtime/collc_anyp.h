/* collc_anyp.h: step tables computed at run time, for any communicator size.
 *
 * A library compiled with `collc compile --target mpi-c -p any` carries the
 * .coll program itself, translated to C functions (one per phase, procedure
 * and function), instead of the tables of one p.  At the first call on a
 * communicator of p ranks, the calling rank runs those functions for itself
 * (rank = its rank, p = the communicator's size): the program's ops become
 * the same per-rank message tables collc builds in Python
 * (collc/backends/tables.py), with what each message waits for
 * (collc/backends/dataflow.py), and the runtime runs them as it runs
 * precomputed tables: by dataflow (collc_flow.h), or step by step
 * (collc_exec.h) with COLLC_ISSUE=steps.
 *
 * This header holds what the generated code needs:
 *
 * - values (`cv`): 64-bit ints with the language's checks (overflow is an
 *   error; // and % floor towards minus infinity, mod is never negative),
 *   bools, sets of non-negative ints as sorted lists of disjoint runs, ranges,
 *   tuples; operators, comparisons, builtins and iteration on them;
 * - an evaluation context (`struct collc_av`): the instance's globals, an
 *   arena the values live in, the memos of the functions, the rank's step
 *   counter and its ops; an error (a failed assertion, a peer out of range, a
 *   constraint p does not meet) ends the evaluation with a message naming the
 *   .coll file, line and column (longjmp back to collc_av_run);
 * - the table builder: the rank's ops, step by step, become one message per
 *   (step, peer) with its chunks merged into ascending runs, receives tagged
 *   copy or reduce, "direct" receives, and the scratch space a step needs;
 *   then each message's dependencies and the dataflow run's scratch space;
 * - the sizes the library serves (collc_cover.h): a communicator of another
 *   size goes to PMPI with the reason, before any table is built;
 * - the cache of built schedules, per (p, rank), and the agreement on a
 *   communicator's first call: every rank of it learns whether all ranks could
 *   build their tables (one PMPI_Allreduce, and a PMPI_Bcast of the reason when
 *   one could not), so that a failure sends every rank to PMPI alike.
 *
 * Thread safety: the cache and the agreement are guarded by one mutex per
 * library; under MPI_THREAD_MULTIPLE two threads may not run collectives on
 * the same communicator at once anyway (MPI forbids it), and calls on different
 * communicators serialise only while a schedule is being built.
 *
 * Step numbers are the program's own step counter: they are equal on every
 * rank (the language counts every rank's steps alike), but steps in which no
 * rank does anything are not removed as the Python tables remove them, so they
 * may differ from the verified schedule's numbering by such gaps (the order is
 * the same).
 */
#ifndef COLLC_ANYP_H
#define COLLC_ANYP_H

#include <limits.h>
#include <pthread.h>

#include "collc_anyp_rows.h"
#include "collc_avalue.h"
#include "collc_cover.h"

/* ---------------------------------------------------------------------------
 * Names, functions and their memos
 * ------------------------------------------------------------------------- */

/* A local of a phase or procedure: an error until it is assigned. */
static inline cv collc_av_local(struct collc_av *X, cv v, const char *name, int64_t at)
{
    if (v.kind == CV_UNSET) collc_av_fail(X, at, "'%s' is used before it is assigned", name);
    return v;
}

/* A global constant or parameter: an error until it is evaluated. */
static inline cv collc_av_global(struct collc_av *X, int k, int64_t at)
{
    if (X->glob[k].kind == CV_UNSET)
        collc_av_fail(X, at, "'%s' is used before its definition is evaluated", X->glob_names[k]);
    return X->glob[k];
}

static inline uint64_t cv_hash(cv v)
{
    uint64_t h = (uint64_t)v.kind * 0x9e3779b97f4a7c15ull;
    if (v.kind == CV_SET) {
        const struct cv_run *r = (const struct cv_run *)v.ptr;
        for (int64_t i = 0; i < v.a; i++) h = (h ^ (uint64_t)r[i].lo ^ ((uint64_t)r[i].hi << 32)) * 0x100000001b3ull;
    } else if (v.kind == CV_TUPLE) {
        for (int64_t i = 0; i < v.a; i++) h = (h ^ cv_hash(((const cv *)v.ptr)[i])) * 0x100000001b3ull;
    } else {
        h ^= (uint64_t)v.a * 0xff51afd7ed558ccdull ^ (uint64_t)v.b * 0xc4ceb9fe1a85ec53ull ^ (uint64_t)v.c;
    }
    return h ^ (h >> 29);
}

static inline int cv_same(cv a, cv b)
{
    if (a.kind != b.kind) return 0;
    if (a.kind == CV_SET) return cv_set_equal(a, b);
    if (a.kind == CV_TUPLE) {
        if (a.a != b.a) return 0;
        for (int64_t i = 0; i < a.a; i++)
            if (!cv_same(((const cv *)a.ptr)[i], ((const cv *)b.ptr)[i])) return 0;
        return 1;
    }
    return a.a == b.a && a.b == b.b && a.c == b.c;
}

static inline uint64_t collc_av_args_hash(int n, const cv *args)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ cv_hash(args[i])) * 0x100000001b3ull;
    return h | 1; /* 0 marks an empty slot */
}

/* The memoised value of function `fn` at `args`, or NULL. */
static inline const cv *collc_av_memo_get(struct collc_av *X, int fn, int n, const cv *args)
{
    struct collc_av_memo *m = &X->memos[fn];
    uint64_t h = collc_av_args_hash(n, args);
    if (m->cap == 0) return NULL;
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        const struct collc_av_entry *e = &m->slots[i];
        int same = e->hash == h;
        if (e->hash == 0) return NULL;
        for (int k = 0; k < n && same; k++) same = cv_same(e->args[k], args[k]);
        if (same) return &e->value;
    }
}

static inline cv collc_av_memo_put(struct collc_av *X, int fn, int n, const cv *args, cv value)
{
    struct collc_av_memo *m = &X->memos[fn];
    uint64_t h = collc_av_args_hash(n, args);
    cv *kept;
    if (2 * (m->n + 1) > m->cap) { /* grow to keep the table at most half full */
        size_t cap = m->cap ? 2 * m->cap : 64;
        struct collc_av_entry *slots = (struct collc_av_entry *)calloc(cap, sizeof *slots);
        if (slots == NULL) collc_av_fail(X, -1, "out of memory");
        for (size_t i = 0; i < m->cap; i++) {
            size_t j;
            if (m->slots[i].hash == 0) continue;
            for (j = m->slots[i].hash & (cap - 1); slots[j].hash != 0; j = (j + 1) & (cap - 1)) {}
            slots[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = slots, m->cap = cap;
    }
    kept = (cv *)collc_av_alloc(X, (size_t)(n + 1) * sizeof(cv));
    memcpy(kept, args, (size_t)n * sizeof(cv));
    {
        size_t j;
        for (j = h & (m->cap - 1); m->slots[j].hash != 0; j = (j + 1) & (m->cap - 1)) {}
        m->slots[j].hash = h, m->slots[j].args = kept, m->slots[j].value = value;
    }
    m->n++;
    return value;
}

static inline void collc_av_enter(struct collc_av *X, const char *name, int64_t at)
{
    if (X->depth >= COLLC_AV_MAX_DEPTH)
        collc_av_fail(X, at, "recursion deeper than %d calls in %s()", COLLC_AV_MAX_DEPTH, name);
    X->depth++;
}

static inline void collc_av_leave(struct collc_av *X) { X->depth--; }

/* ---------------------------------------------------------------------------
 * Steps and ops
 * ------------------------------------------------------------------------- */

static inline void collc_av_open_step(struct collc_av *X, int64_t at)
{
    if (X->in_step >= 0)
        collc_av_fail(X, at, "a step cannot contain another step (the enclosing step starts at line %d)",
                      (int)((X->in_step >> 16) & 0xffffff));
    if (X->counter >= COLLC_AV_MAX_STEPS)
        collc_av_fail(X, at, "rank %d reaches step %d in the step at line %d, beyond the limit of %d steps (2^20); "
                      "is a step loop's bound wrong?", X->rank, X->counter, (int)((at >> 16) & 0xffffff),
                      COLLC_AV_MAX_STEPS);
    X->in_step = at;
}

/* The lanes a program may name: 0 .. COLLC_AV_MAX_LANE - 1 (collc.elaborate.groups.MAX_LANE). */
#define COLLC_AV_MAX_LANE (1 << 20)

/* `lane J:` opens lane J in the open step, with the elaborator's checks.  Lanes say which steps may overlap,
 * which the verifier proves harmless; the tables do not depend on them (dataflow orders what touches a chunk). */
static inline void collc_av_enter_lane(struct collc_av *X, cv lane, int64_t at)
{
    if (X->in_step < 0)
        collc_av_fail(X, at, "a lane is part of a step: put it inside a 'step:' block or a 'for step' loop");
    if (X->lane >= 0) collc_av_fail(X, at, "lanes do not nest (lane %lld is open)", (long long)X->lane);
    if (lane.kind != CV_INT) collc_av_fail(X, at, "a lane is an int in 0..%d, got %s", COLLC_AV_MAX_LANE - 1,
                                          cv_a_type(lane));
    if (lane.a < 0 || lane.a >= COLLC_AV_MAX_LANE)
        collc_av_fail(X, at, "a lane is an int in 0..%d, got %lld", COLLC_AV_MAX_LANE - 1, (long long)lane.a);
    X->lane = lane.a;
}

static inline void collc_av_leave_lane(struct collc_av *X) { X->lane = -1; }

static inline void collc_av_close_step(struct collc_av *X)
{
    X->in_step = -1;
    X->counter++;
}

/* A send (kind 0) or a receive (1 copy, 2 reduce) of `chunks` with `peer` in the open step (or a step of its own). */
static inline void collc_av_emit(struct collc_av *X, int kind, cv peer, cv chunks, int64_t at, int64_t peer_at)
{
    cv s;
    const struct cv_run *r;
    int64_t where = peer_at >= 0 ? peer_at : at;
    if (peer.kind != CV_INT) collc_av_fail(X, where, "a peer must be an int rank, not %s", cv_a_type(peer));
    if (peer.a < 0 || peer.a >= X->p)
        collc_av_fail(X, where, "peer %lld is out of range 0..%d (at rank %d)", (long long)peer.a, X->p - 1, X->rank);
    if (peer.a == X->rank) collc_av_fail(X, where, "rank %d names itself as its peer", X->rank);
    s = cv_as_set(X, chunks, "the chunks", at);
    r = (const struct cv_run *)s.ptr;
    if (s.a > 0 && r[s.a - 1].hi > X->nchunks)
        collc_av_fail(X, at, "chunk %d is out of range 0..%d (at rank %d, %s %s %lld)", r[s.a - 1].hi - 1,
                      X->nchunks - 1, X->rank, kind ? "recv" : "send", kind ? "from" : "to", (long long)peer.a);
    if (s.a == 0) {
        if (X->in_step < 0) collc_av_open_step(X, at), collc_av_close_step(X);
        return;
    }
    {
        int own = X->in_step < 0;
        struct collc_av_op *op;
        if (own) collc_av_open_step(X, at);
        X->ops = (struct collc_av_op *)collc_av_grow(X, X->ops, &X->capops, X->nops + 1, sizeof *X->ops);
        X->opruns = (struct cv_run *)collc_av_grow(X, X->opruns, &X->capopruns, X->nopruns + s.a, sizeof *r);
        op = &X->ops[X->nops++];
        op->step = X->counter, op->kind = kind, op->peer = (int)peer.a, op->first = X->nopruns, op->n = s.a;
        memcpy(X->opruns + X->nopruns, r, (size_t)s.a * sizeof *r);
        X->nopruns += s.a;
        if (own) collc_av_close_step(X);
    }
}

/* ---------------------------------------------------------------------------
 * From ops to message tables
 * ------------------------------------------------------------------------- */

/* One rank's tables: the rows collc_exec.h runs. */
struct collc_av_tables {
    struct collc_msg *msgs;
    int64_t nmsgs, capmsgs;
    struct collc_run *runs;
    int64_t nruns, capruns;
    int max_messages;  /* most messages in one step */
    int64_t scratch;   /* most chunks one step moves through scratch */
    int receives;      /* whether the rank receives at all */
    /* Dataflow issue (collc_flow.h), from collc_av_flow_of: what each message waits for, msgs[i].first_dep ..
       into deps, and the chunks of scratch space the run uses (collc/backends/dataflow.py's flow_scratch). */
    int *deps;
    int64_t ndeps, capdeps;
    int64_t flow_scratch;
    collc_u64 *prefix; /* [nchunks + 1]: the chunk weights' prefix sums (a copy of the instance's); NULL: none */
};

static inline void collc_av_tables_free(struct collc_av_tables *t)
{
    free(t->msgs), free(t->runs), free(t->deps), free(t->prefix);
    memset(t, 0, sizeof *t);
}

static inline int collc_av_run_order(const void *a, const void *b)
{
    const struct collc_run *x = (const struct collc_run *)a, *y = (const struct collc_run *)b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Alltoall: the chunk runs rank `rank` of p touches, the segments its work buffer holds end to end
 * (collc_exec.h; mpi_c._segments for a library of one p): the chunks it holds at the start (its send buffer,
 * source = rank), those it must hold at the end (destination = rank) and every run of its messages, sorted and
 * merged where they meet.  NULL when out of memory; *nsegs is their number. */
static inline struct collc_run *collc_av_segments(const struct collc_av_tables *t, int p, int rank, int nchunks,
                                                  int *nsegs)
{
    const int k = nchunks / p / p; /* chunk (source * p + destination) * k + j; nchunks % (p * p) == 0 */
    const int64_t most = t->nruns + (int64_t)p + 1;
    struct collc_run *r = (struct collc_run *)calloc((size_t)most, sizeof *r);
    int64_t m = 0, out = 0;
    *nsegs = 0;
    if (r == NULL) return NULL;
    r[m].lo = rank * p * k, r[m].hi = (rank + 1) * p * k, m++;
    for (int s = 0; s < p; s++) r[m].lo = (s * p + rank) * k, r[m].hi = (s * p + rank + 1) * k, m++;
    for (int64_t i = 0; i < t->nruns; i++) r[m].lo = t->runs[i].lo, r[m].hi = t->runs[i].hi, m++;
    qsort(r, (size_t)m, sizeof *r, collc_av_run_order);
    for (int64_t i = 0; i < m; i++) {
        if (out > 0 && r[i].lo <= r[out - 1].hi) {
            if (r[i].hi > r[out - 1].hi) r[out - 1].hi = r[i].hi;
        } else {
            r[out++] = r[i];
        }
    }
    *nsegs = (int)out;
    return r;
}

/* The debug dump's line "prefix" and the chunk weights' prefix sums, appended to *text (size *size, used bytes);
 * returns the bytes used after it. */
static inline int64_t collc_av_dump_prefix(struct collc_av *X, char **text, int64_t *size, int64_t used)
{
    *text = (char *)collc_av_grow(X, *text, size, used + 32 + 21 * ((int64_t)X->nchunks + 1), 1);
    used += snprintf(*text + used, (size_t)(*size - used), "prefix");
    for (int c = 0; c <= X->nchunks; c++)
        used += snprintf(*text + used, (size_t)(*size - used), " %llu", (unsigned long long)X->prefix[c]);
    (*text)[used++] = '\n';
    return used;
}

/* The debug dump's line "rank segments lo-hi ..." of an alltoall rank, appended to *text (size *size, used
 * bytes); returns the bytes used after it. */
static inline int64_t collc_av_dump_segments(struct collc_av *X, const struct collc_av_tables *t, int rank,
                                             char **text, int64_t *size, int64_t used)
{
    int n = 0;
    struct collc_run *segs;
    /* room for every run the segments could hold first: collc_av_grow does not return when out of memory */
    *text = (char *)collc_av_grow(X, *text, size, used + 32 + 24 * (t->nruns + (int64_t)X->p + 1), 1);
    segs = collc_av_segments(t, X->p, rank, X->nchunks, &n);
    if (segs == NULL) collc_av_fail(X, -1, "out of memory for the segments");
    used += snprintf(*text + used, (size_t)(*size - used), "%d segments", rank);
    for (int i = 0; i < n; i++) used += snprintf(*text + used, (size_t)(*size - used), " %d-%d", segs[i].lo, segs[i].hi);
    (*text)[used++] = '\n';
    free(segs);
    return used;
}

/* The union of the runs of ops[i] for i in idx[0 .. n-1] whose kind is in `kinds` (a bit mask). */
static inline cv collc_av_union_ops(struct collc_av *X, const int64_t *idx, int64_t n, int kinds)
{
    cv u = cv_interval(X, 0, 0);
    for (int64_t i = 0; i < n; i++) {
        const struct collc_av_op *op = &X->ops[idx[i]];
        cv s = {CV_SET, op->n, 0, 0, X->opruns + op->first};
        if (!((kinds >> op->kind) & 1)) continue;
        for (int64_t k = 0; k < op->n; k++) s.b += X->opruns[op->first + k].hi - X->opruns[op->first + k].lo;
        u = cv_combine(X, u, s, CV_OR);
    }
    return u;
}

static inline void collc_av_add_msg(struct collc_av *X, struct collc_av_tables *t, int step, enum collc_kind kind,
                                    int peer, cv copy, cv reduce)
{
    struct collc_msg *m;
    const struct cv_run *c = (const struct cv_run *)copy.ptr, *r = (const struct cv_run *)reduce.ptr;
    int64_t i = 0, j = 0;
    t->msgs = (struct collc_msg *)collc_av_grow(X, t->msgs, &t->capmsgs, t->nmsgs + 1, sizeof *t->msgs);
    t->runs = (struct collc_run *)collc_av_grow(X, t->runs, &t->capruns, t->nruns + copy.a + reduce.a,
                                                sizeof *t->runs);
    m = &t->msgs[t->nmsgs++];
    memset(m, 0, sizeof *m);
    m->step = step, m->kind = kind, m->peer = peer, m->first_run = (int)t->nruns;
    while (i < copy.a || j < reduce.a) { /* disjoint: ascending by lo */
        int take_copy = j >= reduce.a || (i < copy.a && c[i].lo < r[j].lo);
        const struct cv_run *x = take_copy ? &c[i++] : &r[j++];
        struct collc_run *out = &t->runs[t->nruns++];
        out->lo = x->lo, out->hi = x->hi, out->action = take_copy ? COLLC_COPY : COLLC_REDUCE;
        out->how = COLLC_RAW, out->codec = -1, out->fresh = 0; /* its input is copied to the work buffer first */
    }
    m->nruns = (int)(t->nruns - m->first_run);
}

/* Sorts the op indices idx[0 .. n-1] by peer, in program order for equal peers (insertion: steps have few ops). */
static inline void collc_av_by_peer(int64_t *idx, int64_t n, const struct collc_av_op *ops)
{
    for (int64_t i = 1; i < n; i++) {
        int64_t x = idx[i], j = i;
        while (j > 0 && ops[idx[j - 1]].peer > ops[x].peer) idx[j] = idx[j - 1], j--;
        idx[j] = x;
    }
}

/* The tables of the rank's ops (X->ops, in step order): per step its sends by peer, then its receives by peer. */
static inline void collc_av_tables_of(struct collc_av *X, struct collc_av_tables *t)
{
    int64_t *idx = (int64_t *)collc_av_alloc(X, (size_t)(X->nops + 1) * sizeof *idx);
    memset(t, 0, sizeof *t);
    if (X->prefix != NULL) {
        t->prefix = (collc_u64 *)malloc(((size_t)X->nchunks + 1) * sizeof *t->prefix);
        if (t->prefix == NULL) collc_av_fail(X, -1, "out of memory for the chunk weights");
        memcpy(t->prefix, X->prefix, ((size_t)X->nchunks + 1) * sizeof *t->prefix);
    }
    for (int64_t a = 0; a < X->nops;) {
        int64_t b = a, first_msg = t->nmsgs, scratch = 0;
        cv sent;
        while (b < X->nops && X->ops[b].step == X->ops[a].step) b++;
        for (int64_t i = a; i < b; i++) idx[i - a] = i;
        collc_av_by_peer(idx, b - a, X->ops);
        sent = collc_av_union_ops(X, idx, b - a, 1);
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t i = 0; i < b - a;) {
                int64_t j = i;
                int peer = X->ops[idx[i]].peer;
                while (j < b - a && X->ops[idx[j]].peer == peer) j++;
                if (pass == 0) {
                    cv s = collc_av_union_ops(X, idx + i, j - i, 1);
                    if (s.a > 0) {
                        collc_av_add_msg(X, t, X->ops[a].step, COLLC_SEND, peer, s, cv_interval(X, 0, 0));
                        if (s.a > 1) scratch += s.b;
                    }
                } else {
                    cv red = collc_av_union_ops(X, idx + i, j - i, 4);
                    cv copy = cv_combine(X, collc_av_union_ops(X, idx + i, j - i, 2), red, CV_SUB);
                    if (copy.a + red.a > 0) {
                        int direct = red.a == 0 && copy.a == 1 && !cv_set_meets(sent, copy);
                        collc_av_add_msg(X, t, X->ops[a].step, direct ? COLLC_RECV_DIRECT : COLLC_RECV, peer, copy,
                                         red);
                        if (!direct) scratch += copy.b + red.b;
                        t->receives = 1;
                    }
                }
                i = j;
            }
        }
        if (t->nmsgs - first_msg > t->max_messages) t->max_messages = (int)(t->nmsgs - first_msg);
        if (scratch > t->scratch) t->scratch = scratch;
        a = b;
    }
}

/* Consecutive steps of a rank whose scratch space a dataflow run may hold at once (dataflow.SCRATCH_WINDOW). */
#define COLLC_AV_SCRATCH_WINDOW 8

/* Message i waits for message d (once: mark[d] == i once it does). */
static inline void collc_av_dep(struct collc_av *X, struct collc_av_tables *t, int *mark, int i, int d)
{
    if (mark[d] == i) return;
    mark[d] = i;
    t->deps = (int *)collc_av_grow(X, t->deps, &t->capdeps, t->ndeps + 1, sizeof(int));
    t->deps[t->ndeps++] = d;
}

/* The dependencies of the rank's messages (t, in table order) for dataflow issue, as collc/backends/dataflow.py's
 * rank_ops computes them: a message waits for the last earlier receive of each of its chunks, and a receive also
 * for every send of them since; each list ascending, without repeats.  Then the scratch its dataflow run uses: the
 * most that COLLC_AV_SCRATCH_WINDOW consecutive steps of the rank move through scratch, plus the most one does. */
static inline void collc_av_flow_of(struct collc_av *X, struct collc_av_tables *t)
{
    struct node {
        int op, next;
    } *nodes;
    int64_t nsent = 0, nnodes = 0, most = 0, windowed = 0, nsteps = 0;
    int *writer = (int *)collc_av_alloc(X, (size_t)(X->nchunks + 1) * sizeof(int));
    int *head = (int *)collc_av_alloc(X, (size_t)(X->nchunks + 1) * sizeof(int));
    int *mark = (int *)collc_av_alloc(X, (size_t)(t->nmsgs + 1) * sizeof(int));
    int64_t *need = (int64_t *)collc_av_alloc(X, (size_t)(t->nmsgs + 1) * sizeof(int64_t));
    for (int c = 0; c < X->nchunks; c++) writer[c] = -1, head[c] = -1;
    for (int64_t i = 0; i < t->nmsgs; i++) {
        mark[i] = -1;
        if (t->msgs[i].kind == COLLC_SEND)
            for (int k = 0; k < t->msgs[i].nruns; k++)
                nsent += t->runs[t->msgs[i].first_run + k].hi - t->runs[t->msgs[i].first_run + k].lo;
    }
    nodes = (struct node *)collc_av_alloc(X, (size_t)(nsent + 1) * sizeof *nodes);
    t->ndeps = 0;
    t->deps = (int *)collc_av_grow(X, t->deps, &t->capdeps, 1, sizeof(int)); /* never NULL */
    for (int i = 0; i < (int)t->nmsgs; i++) {
        struct collc_msg *m = &t->msgs[i];
        const int send = m->kind == COLLC_SEND;
        int64_t first = t->ndeps;
        for (int k = 0; k < m->nruns; k++) {
            const struct collc_run *r = &t->runs[m->first_run + k];
            for (int c = r->lo; c < r->hi; c++) {
                if (writer[c] >= 0) collc_av_dep(X, t, mark, i, writer[c]);
                if (send) {
                    nodes[nnodes].op = i, nodes[nnodes].next = head[c];
                    head[c] = (int)nnodes++;
                } else {
                    for (int n = head[c]; n >= 0; n = nodes[n].next) collc_av_dep(X, t, mark, i, nodes[n].op);
                    head[c] = -1;
                    writer[c] = i;
                }
            }
        }
        for (int64_t a = first + 1; a < t->ndeps; a++) { /* ascending (insertion: the lists are short) */
            int x = t->deps[a];
            int64_t b = a;
            while (b > first && t->deps[b - 1] > x) t->deps[b] = t->deps[b - 1], b--;
            t->deps[b] = x;
        }
        m->first_dep = (int)first, m->ndeps = (int)(t->ndeps - first);
    }
    /* Scratch per step of the rank (as the table builder counts it), then the window. */
    for (int64_t a = 0; a < t->nmsgs;) {
        int64_t b = a, chunks = 0;
        while (b < t->nmsgs && t->msgs[b].step == t->msgs[a].step) b++;
        for (int64_t i = a; i < b; i++) {
            const struct collc_msg *m = &t->msgs[i];
            if (m->kind == COLLC_RECV_DIRECT || (m->kind == COLLC_SEND && m->nruns < 2)) continue;
            for (int k = 0; k < m->nruns; k++) chunks += t->runs[m->first_run + k].hi - t->runs[m->first_run + k].lo;
        }
        need[nsteps++] = chunks;
        if (chunks > most) most = chunks;
        a = b;
    }
    for (int64_t a = 0, sum = 0; a < nsteps; a++) {
        sum += need[a];
        if (a >= COLLC_AV_SCRATCH_WINDOW) sum -= need[a - COLLC_AV_SCRATCH_WINDOW];
        if (sum > windowed) windowed = sum;
    }
    t->flow_scratch = nsteps > 0 ? windowed + most : 0;
}

/* ---------------------------------------------------------------------------
 * An instance: the program's globals for one p, and each rank's run
 * ------------------------------------------------------------------------- */

static inline void collc_av_init(struct collc_av *X, int p, int nglob, const char *const *glob_names, int nmemos,
                                 const char *const *files)
{
    memset(X, 0, sizeof *X);
    X->p = p, X->files = files, X->nglob = nglob, X->glob_names = glob_names, X->nmemos = nmemos;
    X->glob = (cv *)calloc((size_t)nglob + 1, sizeof(cv));
    X->memos = (struct collc_av_memo *)calloc((size_t)nmemos + 1, sizeof *X->memos);
    X->in_step = -1, X->lane = -1;
    X->iterations_left = COLLC_AV_MAX_ITERATION;
    if (X->glob == NULL || X->memos == NULL) snprintf(X->error, sizeof X->error, "out of memory");
}

static inline void collc_av_free(struct collc_av *X)
{
    while (X->blocks != NULL) {
        struct collc_av_block *next = X->blocks->next;
        free(X->blocks);
        X->blocks = next;
    }
    for (int i = 0; i < X->nmemos && X->memos != NULL; i++) free(X->memos[i].slots);
    free(X->memos);
    free(X->glob);
    free(X->ops);
    free(X->opruns);
    free(X->prefix);
    X->memos = NULL, X->glob = NULL, X->ops = NULL, X->opruns = NULL, X->prefix = NULL;
}

/* The checks of an instance after its globals: p and the number of chunks (collc_av_check_root: the root). */
static inline void collc_av_check_instance(struct collc_av *X, enum collc_collective coll, cv nchunks,
                                           int64_t chunks_at)
{
    int64_t n = cv_as_int(X, nchunks, "the number of chunks", chunks_at);
    if (n < 1 || n > COLLC_AV_MAX_CHUNKS)
        collc_av_fail(X, chunks_at, "the number of chunks (%lld) must be in 1..%d", (long long)n, COLLC_AV_MAX_CHUNKS);
    if ((int64_t)X->p * n > COLLC_AV_MAX_SLOTS)
        collc_av_fail(X, chunks_at, "%d ranks x %lld chunks make %lld (rank, chunk) slots, beyond the limit of %lld",
                      X->p, (long long)n, (long long)(X->p * n), (long long)COLLC_AV_MAX_SLOTS);
    if (collc_rank_blocks(coll) && n % X->p)
        collc_av_fail(X, chunks_at, "%s needs a number of chunks divisible by p (each rank owns nchunks/p chunks); got "
                      "nchunks=%lld, p=%d", collc_collective_name(coll), (long long)n, X->p);
    if (coll == COLLC_COLL_ALLTOALL && n % ((int64_t)X->p * X->p))
        collc_av_fail(X, chunks_at, "alltoall needs a number of chunks divisible by p*p (chunk (src*p + dst)*k + j); "
                      "got nchunks=%lld, p=%d", (long long)n, X->p);
    X->nchunks = (int)n;
    X->root = -1;
}

/* The root's check, after the chunk weights (the elaborator's order). */
static inline void collc_av_check_root(struct collc_av *X, enum collc_collective coll, cv root, int64_t root_at)
{
    if (coll != COLLC_COLL_BROADCAST && coll != COLLC_COLL_REDUCE && coll != COLLC_COLL_GATHER &&
        coll != COLLC_COLL_SCATTER)
        return;
    if (root.kind != CV_INT || root.a < 0 || root.a >= X->p)
        collc_av_fail(X, root_at, "root=%lld must be a rank in 0..%d", (long long)root.a, X->p - 1);
    X->root = (int)root.a;
}

/* The most the chunk weights may add up to (collc.collectives.MAX_TOTAL_WEIGHT). */
#define COLLC_AV_MAX_TOTAL_WEIGHT (UINT64_C(1) << 32)

/* Chunk c's weight (`chunks N weight(c) = EXPR`), with the elaborator's checks, into the prefix sums. */
static inline void collc_av_chunk_weight(struct collc_av *X, int c, cv value, int64_t at)
{
    if (X->prefix == NULL) {
        X->prefix = (collc_u64 *)calloc((size_t)X->nchunks + 1, sizeof *X->prefix);
        if (X->prefix == NULL) collc_av_fail(X, at, "out of memory for the chunk weights");
    }
    if (value.kind == CV_BOOL)
        collc_av_fail(X, at, "the weight of chunk %d must be an int, not a bool (%s)", c, value.a ? "true" : "false");
    if (value.kind != CV_INT) /* (the elaborator shows the value too) */
        collc_av_fail(X, at, "the weight of chunk %d must be an int, not %s", c, cv_a_type(value));
    if (value.a < 1)
        collc_av_fail(X, at, "the weight of chunk %d is %lld; a chunk's weight must be an int >= 1", c,
                      (long long)value.a);
    if ((collc_u64)value.a > COLLC_AV_MAX_TOTAL_WEIGHT - X->prefix[c])
        collc_av_fail(X, at, "the chunk weights add up to more than 2^32 (chunk %d brings the sum to %llu): use "
                      "smaller weights (they are relative sizes)", c,
                      (unsigned long long)X->prefix[c] + (unsigned long long)value.a);
    X->prefix[c + 1] = X->prefix[c] + (collc_u64)value.a;
}

/* Ready X for running `rank`'s phases (the memos stay: functions see no rank). */
static inline void collc_av_begin_rank(struct collc_av *X, int rank)
{
    X->rank = rank, X->counter = 0, X->in_step = -1, X->lane = -1, X->nops = 0, X->nopruns = 0, X->depth = 0;
    X->iterations_left = COLLC_AV_MAX_ITERATION;
}

/* The builder of a program's tables (a generated `build`). */
typedef int (*collc_av_build_fn)(int p, int rank, struct collc_av_tables *t, int *nchunks, int *root, char *why,
                                 size_t len);

/* The tables `build` makes for `rank` of p ranks, as plain rows (collc_anyp_rows.h): 0, or -1 with the reason (a p
 * outside `cover` among them). */
static inline int collc_av_rows(collc_av_build_fn build, const struct collc_cover *cover, int p, int rank,
                                struct collc_anyp_rows *out, char *why, size_t len)
{
    struct collc_av_tables t;
    int nchunks = 0, root = -1;
    memset(out, 0, sizeof *out);
    if (!collc_cover_check(cover, p, why, len)) return -1; /* a size the library does not serve */
    if (build(p, rank, &t, &nchunks, &root, why, len) != 0) return -1;
    out->msgs = (struct collc_anyp_msg *)calloc((size_t)t.nmsgs + 1, sizeof *out->msgs);
    out->runs = (struct collc_anyp_run *)calloc((size_t)t.nruns + 1, sizeof *out->runs);
    out->deps = (int *)calloc((size_t)t.ndeps + 1, sizeof *out->deps);
    if (out->msgs == NULL || out->runs == NULL || out->deps == NULL || t.nmsgs > INT_MAX || t.nruns > INT_MAX ||
        t.ndeps > INT_MAX) {
        snprintf(why, len, "out of memory for the tables of rank %d of %d", rank, p);
        collc_anyp_rows_free(out);
        collc_av_tables_free(&t);
        return -1;
    }
    out->nchunks = nchunks, out->root = root;
    out->nmsgs = (int)t.nmsgs, out->nruns = (int)t.nruns, out->ndeps = (int)t.ndeps;
    for (int64_t i = 0; i < t.nmsgs; i++) {
        const struct collc_msg *m = &t.msgs[i];
        struct collc_anyp_msg *o = &out->msgs[i];
        o->step = m->step, o->peer = m->peer, o->first_run = m->first_run, o->nruns = m->nruns;
        o->kind = m->kind == COLLC_SEND ? COLLC_ANYP_SEND
                  : m->kind == COLLC_RECV_DIRECT ? COLLC_ANYP_RECV_DIRECT : COLLC_ANYP_RECV;
        o->first_dep = m->first_dep, o->ndeps = m->ndeps;
    }
    for (int64_t i = 0; i < t.nruns; i++) {
        out->runs[i].lo = t.runs[i].lo, out->runs[i].hi = t.runs[i].hi;
        out->runs[i].reduce = t.runs[i].action == COLLC_REDUCE;
    }
    if (t.ndeps > 0) memcpy(out->deps, t.deps, (size_t)t.ndeps * sizeof *out->deps);
    out->prefix = (uint64_t *)t.prefix; /* handed over (collc_u64 and uint64_t are both 64-bit unsigned) */
    t.prefix = NULL;
    collc_av_tables_free(&t);
    return 0;
}

/* ---------------------------------------------------------------------------
 * The schedules of a library, per (p, rank), and the agreement on a communicator
 * ------------------------------------------------------------------------- */

/* A schedule built at run time for one (p, rank): a struct collc_sched and the rows it runs. */
struct collc_anyp_sched {
    struct collc_sched s; /* first: ctx->sched points here */
    int p, rank;
    struct collc_av_tables t;
    int *scratch_chunks;       /* [p]: only `rank`'s entry is set */
    unsigned char *receives;   /* [p]: likewise */
    struct collc_flow flow;    /* dataflow issue: the rank's rows as one phase */
    struct collc_span *spans;  /* [p]: the flow's rows per rank (only `rank`'s) */
    int *flow_ops;             /* [p]: likewise */
    int *flow_scratch;         /* [p]: likewise */
    struct collc_run *segments;            /* alltoall: the rank's segments (collc_av_segments), else NULL */
    struct collc_span *spans_of_segments;  /* alltoall: [p], the rank's row of them (only `rank`'s) */
    char why[400];             /* why it could not be built ("" when it could) */
    struct collc_anyp_sched *next;
};

static inline int collc_anyp_run(struct collc_ctx *ctx)
{
    const struct collc_anyp_sched *a = (const struct collc_anyp_sched *)(const void *)ctx->sched;
    struct collc_span rows;
    rows.first = 0, rows.n = (int)a->t.nmsgs;
    return collc_run_phase(ctx, a->t.msgs, a->t.runs, rows);
}

/* What a library's any-p part gives the runtime: its cache, its lock, and the function that builds its tables. */
struct collc_anyp {
    pthread_mutex_t lock;
    struct collc_anyp_sched *cache;
    int keyval; /* MPI_KEYVAL_INVALID until the first agreement */
    /* Evaluates the program for `rank` of `p` ranks into `t`; 0, or -1 with the reason in `why`. */
    int (*build)(int p, int rank, struct collc_av_tables *t, int *nchunks, int *root, char *why, size_t len);
    const struct collc_sched *base; /* the library's schedule: algorithm, collective, root */
    const struct collc_cover *cover; /* the sizes it serves (collc_cover.h) */
    const struct collc_cover *agree; /* the sizes whose ranks get the same bits of a floating-point sum (NULL: all) */
    const char *mixed;               /* why not, at the other sizes (collc_sched's mixed_orders) */
};

/* The schedule of (p, rank), built on first use (under a->lock). */
static inline struct collc_anyp_sched *collc_anyp_get(struct collc_anyp *a, int p, int rank)
{
    struct collc_anyp_sched *e;
    int nchunks = 0, root = -1;
    for (e = a->cache; e != NULL; e = e->next)
        if (e->p == p && e->rank == rank) return e;
    e = (struct collc_anyp_sched *)calloc(1, sizeof *e);
    if (e == NULL) return NULL;
    e->p = p, e->rank = rank;
    e->scratch_chunks = (int *)calloc((size_t)p, sizeof(int));
    e->receives = (unsigned char *)calloc((size_t)p, 1);
    e->spans = (struct collc_span *)calloc((size_t)p, sizeof *e->spans);
    e->flow_ops = (int *)calloc((size_t)p, sizeof(int));
    e->flow_scratch = (int *)calloc((size_t)p, sizeof(int));
    if (e->scratch_chunks == NULL || e->receives == NULL || e->spans == NULL || e->flow_ops == NULL ||
        e->flow_scratch == NULL) {
        snprintf(e->why, sizeof e->why, "out of memory");
    } else if (a->build(p, rank, &e->t, &nchunks, &root, e->why, sizeof e->why) == 0) {
        e->why[0] = '\0';
        e->s = *a->base;
        e->s.nranks = p, e->s.nchunks = nchunks, e->s.root = root;
        e->s.chunk_prefix = e->t.prefix;
        e->s.max_messages = e->t.max_messages > 0 ? e->t.max_messages : 1;
        e->scratch_chunks[rank] = (int)e->t.scratch;
        e->receives[rank] = (unsigned char)e->t.receives;
        e->s.scratch_chunks = e->scratch_chunks;
        e->s.receives = e->receives;
        e->s.run = collc_anyp_run;
        e->s.for_size = NULL;
        e->s.mixed_orders = a->agree == NULL || collc_cover_has(a->agree, p) ? NULL : a->mixed;
        /* Dataflow issue (collc_flow.h), as for a library with precomputed tables. */
        e->spans[rank].first = 0, e->spans[rank].n = (int)e->t.nmsgs;
        e->flow.msgs = e->t.msgs, e->flow.runs = e->t.runs, e->flow.ranks = e->spans, e->flow.deps = e->t.deps;
        e->flow_ops[rank] = (int)e->t.nmsgs;
        e->flow_scratch[rank] = (int)e->t.flow_scratch;
        e->s.flow = &e->flow, e->s.nflow = 1;
        e->s.flow_ops = e->flow_ops, e->s.flow_scratch = e->flow_scratch;
        if (a->base->collective == COLLC_COLL_ALLTOALL) { /* the rank's segments; only its row is set */
            e->spans_of_segments = (struct collc_span *)calloc((size_t)p, sizeof *e->spans_of_segments);
            if (e->spans_of_segments != NULL)
                e->segments = collc_av_segments(&e->t, p, rank, nchunks, &e->spans_of_segments[rank].n);
            if (e->segments == NULL) snprintf(e->why, sizeof e->why, "out of memory for the segments of rank %d", rank);
            e->s.segments = e->segments, e->s.rank_segments = e->spans_of_segments;
        }
    } else if (e->why[0] == '\0') {
        snprintf(e->why, sizeof e->why, "the tables could not be built");
    }
    e->next = a->cache;
    a->cache = e;
    return e;
}

/* What every rank of a communicator agreed on at its first call: the schedule, or why there is none. */
struct collc_anyp_agreed {
    const struct collc_sched *s;
    char why[440];
};

static inline int collc_anyp_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    (void)comm, (void)keyval, (void)extra;
    free(attr);
    return MPI_SUCCESS;
}

/* The schedule for the calling rank of `comm` (size p), or NULL with the reason in why: a size outside a->cover
 * gets NULL at once, on every rank; otherwise the first call on a communicator builds (or finds) the rank's tables and agrees with the other ranks, which all get NULL and the
 * reason of the lowest rank that failed when one did. */
static inline const struct collc_sched *collc_anyp_for(struct collc_anyp *a, MPI_Comm comm, int p, int rank,
                                                       char *why, size_t len)
{
    struct collc_anyp_agreed *agreed = NULL;
    struct collc_anyp_sched *e;
    int found = 0, failed;
    if (!collc_cover_check(a->cover, p, why, len)) return NULL; /* the same on every rank: it depends on p only */
    pthread_mutex_lock(&a->lock);
    if (a->keyval == MPI_KEYVAL_INVALID)
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, collc_anyp_delete, &a->keyval, NULL);
    PMPI_Comm_get_attr(comm, a->keyval, &agreed, &found);
    if (found && agreed != NULL) {
        pthread_mutex_unlock(&a->lock);
    } else { /* the lock guards the cache only: the agreement runs without it */
        e = collc_anyp_get(a, p, rank);
        pthread_mutex_unlock(&a->lock);
        agreed = (struct collc_anyp_agreed *)calloc(1, sizeof *agreed);
        failed = e == NULL || agreed == NULL || e->why[0] != '\0' ? rank : p; /* the lowest rank that failed */
        PMPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MIN, comm);
        if (failed < p) {
            char text[400];
            snprintf(text, sizeof text, "%s", e == NULL || agreed == NULL ? "out of memory" : e->why);
            PMPI_Bcast(text, (int)sizeof text, MPI_CHAR, failed, comm);
            text[sizeof text - 1] = '\0';
            if (agreed == NULL) {
                snprintf(why, len, "%s", text);
                return NULL;
            }
            snprintf(agreed->why, sizeof agreed->why, "%s", text);
        } else {
            agreed->s = &e->s;
        }
        PMPI_Comm_set_attr(comm, a->keyval, agreed);
    }
    if (agreed->s == NULL) snprintf(why, len, "%s", agreed->why);
    return agreed->s;
}

#endif /* COLLC_ANYP_H */
