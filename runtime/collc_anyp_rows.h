/* collc_anyp_rows.h: one rank's step tables computed by an any-p library's program, as plain rows.
 *
 * The mpi-cuda target compiled for any p (`collc compile --target mpi-cuda -p any`) keeps the program in
 * a C file built with the mpi-c runtime (collc_anyp.h evaluates it); the .cu side, built by nvcc, reads
 * the calling rank's tables through this C interface only (collc_mpicuda_anyp.cuh) and turns them into
 * the rows collc_mpicuda.cuh runs.
 *
 * Messages are in table order: step by step (the program's step counter, equal on every rank), each
 * step's sends by peer, then its receives by peer.  A send's runs are the chunks it sends, merged into
 * ascending runs; a receive's are split by what happens to them (copy or reduce).  deps[first_dep ..
 * first_dep + ndeps - 1] are the earlier messages of the rank that a message waits for under dataflow
 * issue (collc/backends/dataflow.py), by index.
 */
#ifndef COLLC_ANYP_ROWS_H
#define COLLC_ANYP_ROWS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

enum collc_anyp_kind { COLLC_ANYP_SEND, COLLC_ANYP_RECV, COLLC_ANYP_RECV_DIRECT };

struct collc_anyp_msg {
    int step, kind, peer; /* kind: collc_anyp_kind */
    int first_run, nruns;
    int first_dep, ndeps;
};

struct collc_anyp_run {
    int lo, hi, reduce; /* chunks lo .. hi-1; reduce: 1, copy: 0 */
};

struct collc_anyp_rows {
    int nchunks, root; /* root: -1 for a collective without one */
    int nmsgs, nruns, ndeps;
    struct collc_anyp_msg *msgs;
    struct collc_anyp_run *runs;
    int *deps;
    uint64_t *prefix; /* [nchunks + 1]: prefix sums of the chunk weights; NULL: none (equal chunks) */
};

/* What a program file exports: the tables of `rank` of p ranks into out (0), or -1 with the reason in why. */
typedef int (*collc_anyp_rows_fn)(int p, int rank, struct collc_anyp_rows *out, char *why, size_t len);

static inline void collc_anyp_rows_free(struct collc_anyp_rows *r)
{
    free(r->msgs), free(r->runs), free(r->deps), free(r->prefix);
    r->msgs = NULL, r->runs = NULL, r->deps = NULL, r->prefix = NULL;
}

#endif /* COLLC_ANYP_ROWS_H */
