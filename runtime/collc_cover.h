/* collc_cover.h: the communicator sizes an any-p library serves.
 *
 * `collc compile -p any` checks the schedule at compile time over a range of
 * sizes (--verify-ranks, 1..64 unless told otherwise), or proves it for every
 * p (--verify-ranks all); the generated library records what was covered as
 * sorted runs of sizes (struct collc_cover, data only) and serves exactly
 * those.  A size in them that the program's constraints exclude is refused by
 * the program itself, with its constraint; a size outside them is refused
 * here, before any table is built: the mpi-c library sends the call to PMPI
 * with the reason (COLLC_SHIM_LOG=1 shows it), the mpi-cuda library fails it.
 * The decision depends on p only, so every rank of a communicator takes it
 * alike, without exchanging anything.
 */
#ifndef COLLC_COVER_H
#define COLLC_COVER_H

#include <stddef.h>
#include <stdio.h>

/* The sizes a library serves: runs lo..hi (both included), ascending and disjoint. */
struct collc_cover {
    int nruns;
    const int *runs;  /* [2 * nruns]: lo0, hi0, lo1, hi1, ... */
    const char *text; /* the same sizes as the compiler printed them, e.g. "1..64" */
    int proved;       /* 1: the runs are the all-p proof's (--verify-ranks all); 0: verified one p at a time */
};

/* Whether p is one of the sizes of c (binary search over its runs). */
static inline int collc_cover_has(const struct collc_cover *c, int p)
{
    int lo = 0, hi = c == NULL ? -1 : c->nruns - 1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        if (p < c->runs[2 * mid])
            hi = mid - 1;
        else if (p > c->runs[2 * mid + 1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* 1 when c covers p; else 0, with the reason (and how to cover p) in why. */
static inline int collc_cover_check(const struct collc_cover *c, int p, char *why, size_t len)
{
    if (collc_cover_has(c, p)) return 1;
    if (c == NULL)
        snprintf(why, len, "p=%d: the library records no sizes it serves", p);
    else if (c->proved)
        snprintf(why, len, "p=%d is beyond the sizes the all-p proof covers (%s)", p, c->text);
    else
        snprintf(why, len,
                 "p=%d is outside the sizes verified at compile time (%s); recompile with --verify-ranks 1..%d, or "
                 "--verify-ranks all to prove every p",
                 p, c->text, p);
    return 0;
}

#endif /* COLLC_COVER_H */
