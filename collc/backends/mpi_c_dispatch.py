"""Libraries of several schedules chosen by message size (the ``mpi-c`` target).

A library's main schedule may have smaller *bands*: schedules of the same collective, p and
root for calls whose count times type size is below a threshold.  With one band (``collc
compile --small``) the second schedule is ``collc_<algorithm>_small.c``; with N - 1 bands
(``collc tune``), the files are ``collc_<algorithm>_band<k>.c``, band 0 the smallest calls.
Each schedule of the library points to the band just below it (``.small`` and its threshold
``.small_below`` in ``struct collc_sched``), so that the runtime walks the chain from the
main schedule down while the call is below the next threshold (``runtime/collc_shim.h``):
band k runs the calls of ``bands[k - 1].below <= B < bands[k].below`` bytes, the main
schedule those of at least the last threshold.  ``COLLC_BAND_BYTES=T1,...`` (one threshold per
band, ascending) and ``COLLC_SMALL_BYTES=T`` (the lowest threshold) override them at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collc.backends.csource import Sources, c_ident
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule

__all__ = ["Band", "band_stem", "bands_of", "check_bands", "small_problem", "small_source", "table_lines"]


@dataclass(frozen=True, slots=True)
class Band:
    """A schedule of a library for smaller calls: those of fewer than ``below`` bytes (count times type size, as
    the MPI call gives them) that no smaller band takes."""

    schedule: Schedule
    below: int


def small_source(schedule: Schedule) -> str:
    """The C file of the small-message schedule in ``schedule``'s library (one band)."""
    return f"collc_{c_ident(schedule.algorithm)}_small.c"


def band_stem(stem: str, k: int, nbands: int) -> str:
    """The file stem of band ``k`` of ``nbands`` in the library part ``stem`` (``collc_<algorithm>``)."""
    return f"{stem}_small" if nbands == 1 else f"{stem}_band{k}"


def small_problem(schedule: Schedule, small: Schedule) -> str | None:
    """Why ``small`` cannot be the small-message schedule of ``schedule``'s library, or None."""
    if small.collective is not schedule.collective:
        got, want = small.collective.value, schedule.collective.value
        return f"the small-message schedule {small.algorithm} is {got}, not {want}"
    if schedule.collective is Collective.ALLTOALL:
        return "alltoall libraries take no small-message schedule"
    if small.nranks != schedule.nranks:
        return f"the small-message schedule {small.algorithm} is for p={small.nranks}, not p={schedule.nranks}"
    if small.root != schedule.root:
        return f"the small-message schedule {small.algorithm} has root {small.root}, not {schedule.root}"
    if small.codecs:
        return f"the small-message schedule {small.algorithm} has compression points (it must be exact)"
    if small.algorithm == schedule.algorithm:
        return f"the small-message schedule is {schedule.algorithm} itself"
    return None


def bands_of(small: Schedule | None, small_below: int, bands: Sequence[Band]) -> tuple[Band, ...]:
    """The bands of a library from `generate`'s arguments: ``small`` below ``small_below`` bytes (one band), or
    ``bands``; CollError for both at once."""
    if small is not None and bands:
        raise CollError("a library takes a small-message schedule or bands of schedules, not both")
    return (Band(small, small_below),) if small is not None else tuple(bands)


def check_bands(schedule: Schedule, bands: Sequence[Band]) -> None:
    """CollError unless ``bands`` can run below ``schedule`` in one library: each of its collective, p and root,
    exact, with thresholds ascending from at least 0 bytes, and no two neighbours of one algorithm."""
    below = -1
    for k, band in enumerate(bands):
        if band.below < 0:
            raise CollError(f"the small-message threshold must be at least 0 bytes, got {band.below}")
        if band.below <= below:
            raise CollError(f"the band thresholds must ascend: {band.below} bytes after {below}")
        below = band.below
        problem = small_problem(schedule, band.schedule)
        if problem is not None and len(bands) > 1 and problem.endswith(" itself"):
            problem = None  # another band of the main algorithm is fine where a band in between parts them
        if problem is not None:
            raise CollError(problem, band.schedule.span)
        upper = bands[k + 1].schedule if k + 1 < len(bands) else schedule
        if len(bands) > 1 and upper.algorithm == band.schedule.algorithm:
            raise CollError(
                f"bands {k} and {k + 1} both run {band.schedule.algorithm}: one band holds them (drop the threshold "
                f"at {band.below} bytes)",
                band.schedule.span,
            )


def table_lines(stem: str, schedule: Schedule, bands: Sequence[Band]) -> tuple[str, ...]:
    """The band table of the main file's header: a row per schedule, smallest calls first: the bytes ``B`` it runs,
    its symbol and the .coll file it came from."""
    rows: list[tuple[str, str, str]] = []
    low = 0
    for k, band in enumerate(bands):
        bytes_text = f"B < {band.below}" if low == 0 else f"{low} <= B < {band.below}"
        symbol = f"{band_stem(stem, k, len(bands))}_schedule"
        rows.append((bytes_text, symbol, _label(band.schedule)))
        low = band.below
    rows.append((f"B >= {low}", "schedule (this file)", _label(schedule)))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return tuple(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}" for a, b, c in rows)


def _label(schedule: Schedule) -> str:
    return Sources(schedule.source).label(schedule.source)
