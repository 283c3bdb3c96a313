/* collc_comm.h: what a collc library keeps on the user's communicator, and how its ranks wait.
 *
 * Every call runs on a private duplicate of the user's communicator, made at
 * the first call and cached on it as an attribute (freed with it), together
 * with which ranks share memory with the calling one (collc_exec.h's pieces)
 * and an arena of memory reused from call to call.  A rank that waits polls
 * MPI and gives its core away when nothing completes (collc_idle).
 */
#ifndef COLLC_COMM_H
#define COLLC_COMM_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

/* ---------------------------------------------------------------------------
 * The private communicator, cached on the user's communicator
 * ------------------------------------------------------------------------- */

/* What is cached on a communicator: its duplicate, which ranks share memory with this one, and memory reused
 * across calls. */
struct collc_comm {
    MPI_Comm comm;
    unsigned char *near; /* [rank]: 1 if it shares memory with this rank (MPI_COMM_TYPE_SHARED), else 0 */
    void *arena;
    size_t arena_size;
};

static int collc_keyval = MPI_KEYVAL_INVALID;

static inline int collc_comm_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    struct collc_comm *c = (struct collc_comm *)attr;
    (void)comm;
    (void)keyval;
    (void)extra;
    PMPI_Comm_free(&c->comm);
    free(c->near);
    free(c->arena);
    free(c);
    return MPI_SUCCESS;
}

/* c->near of the duplicate c->comm (collective over it). */
static inline int collc_near_of(struct collc_comm *c)
{
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Group all = MPI_GROUP_NULL, here = MPI_GROUP_NULL;
    int size = 0, local = 0, err, *in = NULL, *out = NULL;
    err = PMPI_Comm_size(c->comm, &size);
    if (err == MPI_SUCCESS) err = PMPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (err == MPI_SUCCESS) err = PMPI_Comm_size(node, &local);
    if (err == MPI_SUCCESS) {
        c->near = (unsigned char *)calloc((size_t)size, 1);
        in = (int *)malloc(sizeof(int) * (size_t)local);
        out = (int *)malloc(sizeof(int) * (size_t)local);
        if (c->near == NULL || in == NULL || out == NULL) err = MPI_ERR_NO_MEM;
    }
    if (err == MPI_SUCCESS) err = PMPI_Comm_group(node, &here);
    if (err == MPI_SUCCESS) err = PMPI_Comm_group(c->comm, &all);
    if (err == MPI_SUCCESS) {
        for (int i = 0; i < local; i++) in[i] = i;
        err = PMPI_Group_translate_ranks(here, local, in, all, out);
    }
    if (err == MPI_SUCCESS)
        for (int i = 0; i < local; i++)
            if (out[i] >= 0 && out[i] < size) c->near[out[i]] = 1;
    free(in);
    free(out);
    if (here != MPI_GROUP_NULL) PMPI_Group_free(&here);
    if (all != MPI_GROUP_NULL) PMPI_Group_free(&all);
    if (node != MPI_COMM_NULL) PMPI_Comm_free(&node);
    return err;
}

/* Waiting.  A rank that waits polls MPI (MPI_Test*), and from the COLLC_SPIN_POLLS-th poll in a row that
 * completed nothing it gives its core away (sched_yield) after every poll.  Where ranks outnumber cores, a rank
 * that spins holds its core for a whole scheduler slice (milliseconds) while the rank it waits for cannot run:
 * MPICH's MPI_Waitsome never yields (unlike its MPI_Waitall), which made the dataflow order up to 30x slower than
 * MPICH's own collectives over TCP with 4 ranks on 2 cores.  With a core to spare, sched_yield returns at once. */
#define COLLC_SPIN_POLLS 64

/* Called after the polls-th poll in a row that completed nothing. */
static inline void collc_idle(long polls)
{
    if (polls > COLLC_SPIN_POLLS) sched_yield();
}

/* Ends the job after the caller wrote its one line on stderr; does not return.  The launcher forwards a
 * rank's output and its abort on separate channels, and may tear the job down before the line arrives:
 * a moment's pause first lets the line out. */
static inline void collc_abort_job(MPI_Comm comm)
{
    double until;
    fflush(stderr);
    until = PMPI_Wtime() + 0.3;
    while (PMPI_Wtime() < until) sched_yield();
    PMPI_Abort(comm, 1);
    _Exit(1); /* MPI_Abort may return before the job is torn down (MPICH does) */
}

/* PMPI_Comm_dup, within `timeout` seconds when it is positive (the duplication is collective: a rank that never
 * calls would leave the others waiting); `what` names the call for the message that ends the job otherwise. */
static inline int collc_dup(MPI_Comm comm, MPI_Comm *dup, double timeout, const char *what)
{
    MPI_Request req;
    double deadline;
    int done = 0, err;
    long polls = 0;
    if (timeout <= 0) return PMPI_Comm_dup(comm, dup);
    err = PMPI_Comm_idup(comm, dup, &req);
    if (err != MPI_SUCCESS) return err;
    deadline = PMPI_Wtime() + timeout;
    while (!done) {
        err = PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) return err;
        if (done) break;
        collc_idle(++polls);
        if (polls % 64 == 0) {
            if (PMPI_Wtime() > deadline) {
                fprintf(stderr, "collc: %s: no progress for %g s (COLLC_TIMEOUT) at the first call on this "
                        "communicator, which every rank makes: a rank died or stopped, or did not call the "
                        "collective with the same count\n", what, timeout);
                collc_abort_job(comm);
            }
        }
    }
    return MPI_SUCCESS;
}

/* The cache of `comm`, created (collectively: it duplicates comm) on the first call.  The duplicate returns
 * errors rather than aborting: the runtime reports them (collc_mpi_fatal). */
static inline int collc_comm_of(MPI_Comm comm, struct collc_comm **out, double timeout, const char *what)
{
    void *attr = NULL;
    int found = 0, err;
    if (collc_keyval == MPI_KEYVAL_INVALID) {
        err = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, collc_comm_delete, &collc_keyval, NULL);
        if (err != MPI_SUCCESS) return err;
    }
    err = PMPI_Comm_get_attr(comm, collc_keyval, &attr, &found);
    if (err != MPI_SUCCESS) return err;
    if (!found) {
        struct collc_comm *c = (struct collc_comm *)calloc(1, sizeof *c);
        if (c == NULL) return MPI_ERR_NO_MEM;
        err = collc_dup(comm, &c->comm, timeout, what);
        if (err == MPI_SUCCESS) err = PMPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
        if (err == MPI_SUCCESS) err = collc_near_of(c);
        if (err == MPI_SUCCESS) err = PMPI_Comm_set_attr(comm, collc_keyval, c);
        if (err != MPI_SUCCESS) {
            free(c->near);
            free(c);
            return err;
        }
        attr = c;
    }
    *out = (struct collc_comm *)attr;
    return MPI_SUCCESS;
}

/* At least `bytes` (> 0) of memory kept on the communicator for the next calls; NULL when out of memory. */
static inline void *collc_arena(struct collc_comm *c, size_t bytes)
{
    if (bytes > c->arena_size) {
        free(c->arena);
        c->arena = malloc(bytes);
        c->arena_size = c->arena == NULL ? 0 : bytes;
    }
    return c->arena;
}

#endif /* COLLC_COMM_H */
