/* conformance_counts.h: the cases of tests/mpi_c/conformance.c for the counts given at run time (allgatherv,
 * alltoallv) and for barriers; included by it, after the helpers they use. */

/* ---------------------------------------------------------------------------
 * Counts given at run time (allgatherv.c, allgatherv2.c, allgatherv3.c, allgatherv4.c, alltoallv.c,
 * alltoallv0.c, the unequal counts of redscat2.c and redscat3.c: see run_reductions)
 * ------------------------------------------------------------------------- */

/* The bytes of `bytes` at buf outside nb blocks of dt (block b: n[b] elements at element at[b]) that are no longer
 * JUNK: gaps between the blocks, holes inside them, the tail. */
static long outside_blocks(const char *buf, MPI_Aint bytes, MPI_Datatype dt, int nb, const MPI_Aint *at,
                           const MPI_Count *n)
{
    const MPI_Aint ext = extent_of(dt);
    const int size = size_of(dt);
    char *mask = calloc((size_t)bytes + 1, 1);
    long changed = 0;
    for (int b = 0; b < nb; b++) {
        char *ones = malloc((size_t)size * (size_t)n[b] + 1);
        int pos = 0;
        memset(ones, 1, (size_t)size * (size_t)n[b] + 1);
        if (n[b] > 0 && size > 0) MPI_Unpack(ones, size * (int)n[b], &pos, mask + at[b] * ext, (int)n[b], dt, MPI_COMM_SELF);
        free(ones);
    }
    for (MPI_Aint i = 0; i < bytes; i++) changed += !mask[i] && (unsigned char)buf[i] != JUNK;
    free(mask);
    return changed;
}

/* A small hash of (a, b, m) in 0 .. m: counts that look random and are the same on every rank. */
static int mixed(int a, int b, int m)
{
    unsigned h = (unsigned)a * 2654435761u ^ (unsigned)(b + 17) * 40503u ^ (unsigned)m * 2246822519u;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    return (int)(h % (unsigned)(m + 1));
}

/* Where the blocks lie, in elements: layout 0 end to end in rank order, 1 with a gap of r + 1 elements before
 * block r, 2 backwards (block P - 1 first) with a gap of 2 before each.  Returns the elements spanned. */
static MPI_Aint lay_out(int layout, const MPI_Count *n, MPI_Aint *at)
{
    MPI_Aint end = 0;
    for (int k = 0; k < P; k++) {
        const int r = layout == 2 ? P - 1 - k : k;
        end += layout == 0 ? 0 : layout == 1 ? r + 1 : 2;
        at[r] = end, end += n[r];
    }
    return end;
}

#if MPI_VERSION >= 4
#define LARGE_V 1
#else
#define LARGE_V 0
#endif

/* Counts of an allgatherv: 0 a ramp (rank r: m r / (P - 1), rank 0 none), 1 none from every odd rank and m + r from
 * the others (allgatherv3.c), 2 random counts in 0 .. m (allgatherv4.c), 3 m from every rank (MPI_Allgather's, but
 * in layouts 1 and 2). */
static const char *const v_patterns[] = {"ramp", "odd ranks none", "random", "equal"};

static void allgatherv_case(MPI_Datatype dt, const char *name, int m, int pattern, int layout, int in_place)
{
    const MPI_Aint ext = extent_of(dt);
    MPI_Count n[64];
    MPI_Aint at[64];
    int ni[64], ai[64];
    char what[160], *recv, *send, *keep;
    MPI_Aint span, bytes;
    int err, bad = 0;
    long changed;
    for (int r = 0; r < P; r++)
        n[r] = pattern == 0 ? (MPI_Count)m * r / (P > 1 ? P - 1 : 1) : pattern == 1 ? (r % 2 ? 0 : m + r)
               : pattern == 2 ? mixed(r, 1, m) : m;
    span = lay_out(layout, n, at), bytes = span * ext;
    for (int r = 0; r < P; r++) ni[r] = (int)n[r], ai[r] = (int)at[r];
    snprintf(what, sizeof what, "allgatherv %s count %d (%s counts, layout %d) in_place %d", name, m,
             v_patterns[pattern], layout, in_place);
    recv = malloc((size_t)bytes + TAIL), send = malloc((size_t)(n[rank] * ext) + TAIL);
    memset(recv, JUNK, (size_t)bytes + TAIL), memset(send, JUNK, (size_t)(n[rank] * ext) + TAIL);
    fill_or_check(in_place ? recv + at[rank] * ext : send, (int)n[rank], dt, rank, 0, 0);
    keep = malloc((size_t)(n[rank] * ext) + TAIL);
    memcpy(keep, send, (size_t)(n[rank] * ext) + TAIL);
    cases++;
    calls++;
    if (LARGE_V && calls % 2) {
#if MPI_VERSION >= 4
        err = MPI_Allgatherv_c(in_place ? MPI_IN_PLACE : send, n[rank], dt, recv, n, at, dt, MPI_COMM_WORLD);
#endif
    } else {
        err = MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, ni[rank], dt, recv, ni, ai, dt, MPI_COMM_WORLD);
    }
    if (err != MPI_SUCCESS) {
        fail_case(what, "error", err);
    } else {
        for (int r = 0; r < P; r++) bad |= fill_or_check(recv + at[r] * ext, (int)n[r], dt, r, 0, 1) << (r % 8);
        if (bad) fail_case(what, "wrong data in the blocks of ranks (a bit per rank mod 8)", bad);
        if ((changed = outside_blocks(recv, bytes + TAIL, dt, P, at, n)) != 0)
            fail_case(what, "wrote the receive buffer outside the blocks (gaps, holes or past the end)", changed);
        if (memcmp(keep, send, (size_t)(n[rank] * ext) + TAIL) != 0) fail_case(what, "changed the send buffer", 0);
    }
    free(recv), free(send), free(keep);
}

static void run_allgatherv(void)
{
    static const int v_counts[] = {0, 1, 10, 1000, 20000};
    MPI_Datatype dts[8];
    const char *names[8];
    const int nt = move_types(dts, names);
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < (int)(sizeof v_counts / sizeof *v_counts); c++)
            for (int pattern = 0; pattern < 4; pattern++)
                for (int layout = 0; layout < 3; layout++)
                    for (int in_place = 0; in_place < 2; in_place++) {
                        if (v_counts[c] > 1000 && t != 0 && t != 3) continue; /* large: MPI_INT and the pair */
                        allgatherv_case(dts[t], names[t], v_counts[c], pattern, layout, in_place);
                    }
}

/* What rank s sends rank d in an alltoallv: 0 m d (alltoallv.c: rank s sends d elements to rank d), 1 m ((s + d)
 * mod 3), 2 m where s + d is odd and none elsewhere (alltoallv0.c's empty blocks), 3 m to itself only, 4 random in
 * 0 .. m, 5 random and symmetric.  Patterns 1, 2, 3 and 5 are symmetric (what s sends d, d sends s): those
 * run in place too. */
static const char *const a_patterns[] = {"d m", "(s + d) mod 3", "odd s + d", "self", "random", "symmetric random"};

static MPI_Count a_count(int pattern, int s, int d, int m)
{
    switch (pattern) {
    case 0: return (MPI_Count)m * d;
    case 1: return (MPI_Count)m * ((s + d) % 3);
    case 2: return (s + d) % 2 ? m : 0;
    case 3: return s == d ? m : 0;
    case 4: return mixed(s * 64 + d, 2, m);
    default: return mixed((s < d ? s : d) * 64 + (s < d ? d : s), 3, m);
    }
}

static void alltoallv_case(MPI_Datatype dt, const char *name, int m, int pattern, int layout, int in_place)
{
    const MPI_Aint ext = extent_of(dt);
    MPI_Count sc[64], rc[64];
    MPI_Aint sd[64], rd[64];
    int sci[64], rci[64], sdi[64], rdi[64];
    char what[160], *recv, *send, *keep;
    MPI_Aint sbytes, rbytes;
    int err, bad = 0;
    long changed;
    for (int q = 0; q < P; q++) sc[q] = a_count(pattern, rank, q, m), rc[q] = a_count(pattern, q, rank, m);
    sbytes = lay_out(layout, sc, sd) * ext, rbytes = lay_out(layout == 0 ? 0 : 3 - layout, rc, rd) * ext;
    for (int q = 0; q < P; q++) sci[q] = (int)sc[q], rci[q] = (int)rc[q], sdi[q] = (int)sd[q], rdi[q] = (int)rd[q];
    snprintf(what, sizeof what, "alltoallv %s count %d (%s counts, layout %d) in_place %d", name, m,
             a_patterns[pattern], layout, in_place);
    recv = malloc((size_t)rbytes + TAIL), send = malloc((size_t)sbytes + TAIL);
    memset(recv, JUNK, (size_t)rbytes + TAIL), memset(send, JUNK, (size_t)sbytes + TAIL);
    for (int q = 0; q < P; q++) /* the block for rank q: this rank's, block q */
        if (in_place) fill_or_check(recv + rd[q] * ext, (int)rc[q], dt, rank, q, 0);
        else fill_or_check(send + sd[q] * ext, (int)sc[q], dt, rank, q, 0);
    keep = malloc((size_t)sbytes + TAIL);
    memcpy(keep, send, (size_t)sbytes + TAIL);
    cases++;
    calls++;
    if (LARGE_V && calls % 2) {
#if MPI_VERSION >= 4
        err = MPI_Alltoallv_c(in_place ? MPI_IN_PLACE : send, sc, sd, dt, recv, rc, rd, dt, MPI_COMM_WORLD);
#endif
    } else {
        err = MPI_Alltoallv(in_place ? MPI_IN_PLACE : send, sci, sdi, dt, recv, rci, rdi, dt, MPI_COMM_WORLD);
    }
    if (err != MPI_SUCCESS) {
        fail_case(what, "error", err);
    } else {
        for (int q = 0; q < P; q++) bad |= fill_or_check(recv + rd[q] * ext, (int)rc[q], dt, q, rank, 1) << (q % 8);
        if (bad) fail_case(what, "wrong data in the blocks from ranks (a bit per rank mod 8)", bad);
        if ((changed = outside_blocks(recv, rbytes + TAIL, dt, P, rd, rc)) != 0)
            fail_case(what, "wrote the receive buffer outside the blocks (gaps, holes or past the end)", changed);
        if (memcmp(keep, send, (size_t)sbytes + TAIL) != 0) fail_case(what, "changed the send buffer", 0);
    }
    free(recv), free(send), free(keep);
}

static void run_alltoallv(void)
{
    static const int v_counts[] = {0, 1, 7, 100, 2000};
    MPI_Datatype dts[8];
    const char *names[8];
    const int nt = move_types(dts, names);
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < (int)(sizeof v_counts / sizeof *v_counts); c++)
            for (int pattern = 0; pattern < 6; pattern++)
                for (int layout = 0; layout < 3; layout++)
                    for (int in_place = 0; in_place < 2; in_place++) {
                        const int symmetric = pattern != 0 && pattern != 4;
                        if (in_place && !symmetric) continue;
                        if (v_counts[c] > 100 && t != 0 && t != 3) continue; /* large: MPI_INT and the pair */
                        if (v_counts[c] == 0 && pattern > 0) continue;           /* every block empty: once */
                        alltoallv_case(dts[t], names[t], v_counts[c], pattern, layout, in_place);
                    }
}

/* ---------------------------------------------------------------------------
 * Barrier: no rank leaves before every rank has come (the ranks share one host's clock)
 * ------------------------------------------------------------------------- */

static int barrier_calls[2]; /* calls on communicators of P ranks, of other sizes */

/* The host's monotonic clock, which every rank of one host shares, in seconds. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void spin(double seconds)
{
    const double until = now() + seconds;
    while (now() < until) {}
}

/* `rounds` barriers in a row on comm; in round k the ranks late(k) spin `late` seconds first.  Afterwards each
 * rank's leaving time of each round is compared with the last arrival of the round. */
static void barriers(MPI_Comm comm, const char *name, int rounds, double late, int stagger)
{
    int size, me, err = MPI_SUCCESS;
    double *came = malloc(sizeof(double) * (size_t)rounds), *left = malloc(sizeof(double) * (size_t)rounds);
    double *last = malloc(sizeof(double) * (size_t)rounds);
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &me);
    PMPI_Barrier(comm);
    for (int k = 0; k < rounds && err == MPI_SUCCESS; k++) {
        /* one rank late in each round, in turn; with stagger, every rank late by its own amount */
        if (stagger) spin(late * ((me + k) % size) / size);
        else if (me == (k * 5 + 1) % size) spin(late);
        came[k] = now();
        err = MPI_Barrier(comm);
        left[k] = now();
        cases++;
        barrier_calls[size != P]++;
    }
    if (err != MPI_SUCCESS) fail_case(name, "error", err);
    PMPI_Allreduce(came, last, rounds, MPI_DOUBLE, MPI_MAX, comm);
    for (int k = 0; k < rounds && err == MPI_SUCCESS; k++)
        if (left[k] < last[k]) {
            char what[160];
            snprintf(what, sizeof what, "barrier %s round %d: left %.6f s before the last rank came", name, k,
                     last[k] - left[k]);
            fail_case(what, "left early (microseconds)", (long)((last[k] - left[k]) * 1e6));
            break;
        }
    free(came), free(left), free(last);
}

static void run_barriers(void)
{
    MPI_Comm dup, reversed, halves, parity;
    barriers(MPI_COMM_WORLD, "world, one rank late", 3 * P, 0.005, 0);
    barriers(MPI_COMM_WORLD, "world, every rank late by its own amount", 2 * P, 0.005, 1);
    barriers(MPI_COMM_WORLD, "world, many in a row", 200, 0.0002, 0);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    barriers(dup, "a duplicate of world", 2 * P, 0.003, 0);
    MPI_Comm_split(MPI_COMM_WORLD, 0, P - rank, &reversed); /* P ranks, in the opposite order */
    barriers(reversed, "world in reverse rank order", 2 * P, 0.003, 1);
    MPI_Comm_split(MPI_COMM_WORLD, rank < P / 2, rank, &halves);
    barriers(halves, "split in halves", 20, 0.003, 0);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &parity);
    barriers(parity, "split by parity, ranks backwards", 20, 0.003, 1);
    barriers(MPI_COMM_SELF, "MPI_COMM_SELF", 5, 0, 0);
    barriers(MPI_COMM_WORLD, "world again", 2 * P, 0.003, 0);
    MPI_Comm_free(&dup), MPI_Comm_free(&reversed), MPI_Comm_free(&halves), MPI_Comm_free(&parity);
}
