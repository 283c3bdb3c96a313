"""Choosing a schedule per message size: what `collc tune` does (docs/tune.md).

`tune` takes candidate programs of one collective (by default every bundled example of it
without compression points, `default_candidates`), verifies each at the instance the topology
gives it (as `collc sim` binds it: ``p``, or a torus's ``dims``; `prepare`), simulates the ones
that pass at every size with the flow-level simulator (`collc.simulate`), and picks the
fastest at each size; adjacent sizes of one winner merge into a band (`choose_bands`, a pure
function of a table of times).  `write_library` then generates one mpi-c library that runs
each band's schedule for the calls of its sizes (`collc.backends.mpi_c_dispatch`): the
thresholds are the first size of each band but the first, in bytes of the MPI call
(`call_bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collc import api, goodput
from collc.backends import mpi_c
from collc.backends.mpi_c_dispatch import Band as LibraryBand
from collc.diagnostics import CollError
from collc.ir import Collective, ParamValue, Schedule, params_text
from collc.simulate import NetworkModel, simulate
from collc.topology import Topology

if TYPE_CHECKING:
    from collc.verify.sweep import InstanceResult

__all__ = [
    "DEFAULT_SIZES",
    "Band",
    "Candidate",
    "Skipped",
    "Tuning",
    "call_bytes",
    "choose_bands",
    "default_candidates",
    "parse_collective",
    "prepare",
    "sizes_problem",
    "table_text",
    "thresholds",
    "tune",
    "write_library",
]

DEFAULT_SIZES = "32B:256MiB"
"""The vector sizes `collc tune` simulates unless told (a doubling sweep)."""

_ALIASES = {"reduce-scatter": "reduce_scatter", "reducescatter": "reduce_scatter", "bcast": "broadcast"}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A program that verifies at the instance tuned: its name, file (as given) and parameter values."""

    name: str
    path: str
    params: Mapping[str, ParamValue]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A program left out, and why (it fails verification, its constraints refuse the instance, ...)."""

    name: str
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Band:
    """Adjacent sizes ``sizes[first..last]`` (inclusive) of one fastest program: its times there, and the program
    closest to it (the least geometric mean of time ratios; None with a single candidate) with its time over the
    winner's at each size."""

    first: int
    last: int
    program: str
    times: tuple[float, ...]
    runner_up: str | None
    ratios: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Tuning:
    """The result of `tune`: the candidates simulated (``times[k][j]``: candidate k at ``sizes[j]``, in seconds),
    those skipped, and the bands of the fastest."""

    collective: Collective
    nranks: int
    topology: str
    model: NetworkModel
    sizes: tuple[int, ...]
    candidates: tuple[Candidate, ...]
    skipped: tuple[Skipped, ...]
    times: tuple[tuple[float, ...], ...]
    bands: tuple[Band, ...]

    def candidate(self, name: str) -> Candidate:
        return next(c for c in self.candidates if c.name == name)

    def thresholds(self) -> tuple[int, ...]:
        """The library's thresholds in bytes of the MPI call (`thresholds`)."""
        return thresholds(self.bands, self.sizes, self.collective, self.nranks)


def parse_collective(text: str) -> Collective:
    """``allreduce``, ``reduce_scatter`` (or ``reduce-scatter``), ...; CollError naming the collectives."""
    key = text.strip().lower()
    key = _ALIASES.get(key, key)
    for collective in Collective:
        if collective.value == key:
            return collective
    known = ", ".join(c.value for c in Collective)
    raise CollError(f"unknown collective {text!r}; the collectives are {known}")


def default_candidates(collective: Collective) -> list[str]:
    """The bundled examples of ``collective`` without compression points (a tuned library is exact)."""
    paths = []
    for path in api.list_examples():
        alg = api.load(path)
        if alg.collective is collective and not alg.codecs:
            paths.append(path.stem)  # a bundled name (api.resolve_path)
    return paths


def call_bytes(collective: Collective, nranks: int, size: int) -> int:
    """The bytes of the MPI call (count times type size) whose vector, as `collc.simulate` sizes it, is ``size``
    bytes: the same for allreduce, broadcast and reduce, a rank's block (rounded up) where the MPI count is one
    (allgather, reduce-scatter, gather, scatter, alltoall)."""
    per_rank = collective.rank_blocks or collective is Collective.ALLTOALL
    return -(-size // nranks) if per_rank else size


def sizes_problem(collective: Collective, nranks: int, sizes: Sequence[int], itemsize: int) -> str | None:
    """Why the simulator cannot take ``sizes`` (vectors of ``itemsize``-byte elements), or None."""
    if not sizes:
        return "no sizes"
    step = itemsize * (nranks if collective is Collective.ALLTOALL else 1)
    for size in sizes:
        if size % step:
            what = f"{itemsize}-byte elements" + (f", {nranks} blocks" if step != itemsize else "")
            return f"{size} B is not a whole number of {what} (sizes are multiples of {step} B here)"
    return None


def prepare(
    paths: Sequence[str],
    collective: Collective,
    topology: Topology,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[tuple[Candidate, ...], tuple[Skipped, ...]]:
    """Load every program, give it the topology's instance (`collc.goodput.bind`) and verify it there (as
    `collc check` does); the ones that pass, and the others with the reason.  A file that does not load is a
    CollError."""
    from collc.verify.sweep import check_instance, symbolic_for

    kept: list[Candidate] = []
    skipped: list[Skipped] = []
    names: dict[str, str] = {}
    for done, path in enumerate(paths, 1):
        alg = api.load(path)
        reason = _refusal(alg, collective, names)
        values: dict[str, ParamValue] = {}
        if reason is None:
            try:
                _, values = goodput.bind(path, topology, {})
            except CollError as err:
                reason = err.message.removeprefix(f"{path}: ")
        if reason is None:
            result = check_instance(alg.program, values, symbolic=symbolic_for(alg.program, [values], "step"))
            reason = _failure(alg, values, result)
        if reason is None:
            kept.append(Candidate(alg.name, path, values))
            names[alg.name] = path
        else:
            skipped.append(Skipped(alg.name, path, reason))
        if on_progress is not None:
            on_progress(done, len(paths))
    return tuple(kept), tuple(skipped)


def _refusal(alg: api.Algorithm, collective: Collective, names: Mapping[str, str]) -> str | None:
    if alg.collective is not collective:
        return f"it is {alg.collective.value}, not {collective.value}"
    if alg.codecs:
        return "it has compression points (a tuned library holds exact schedules)"
    if alg.name in names:
        return f"{names[alg.name]} has the same name"
    return None


def _failure(alg: api.Algorithm, values: Mapping[str, ParamValue], result: InstanceResult) -> str | None:
    """Why the `check_instance` result does not let the program be a candidate, or None."""
    where = params_text(dict(values))
    if result.status == "ok":
        return None
    if result.status == "skipped":  # a constraint refuses the instance: its own words
        try:
            alg.instantiate(**values)
        except CollError as err:
            return err.message
        return f"its constraints refuse {where}"
    report, deadlock, error = result.report, result.deadlock, result.error
    if error is not None:
        return error.message
    if report is not None and report.findings:
        first = report.findings[0]
        return f"fails verification at {where}: {len(report.findings)} finding(s), the first at {first.span}: " + (
            first.message
        )
    if deadlock is not None and not deadlock.ok:
        return f"fails verification at {where}: {deadlock.message}"
    return f"fails verification at {where}"


def choose_bands(names: Sequence[str], times: Sequence[Sequence[float]]) -> tuple[Band, ...]:
    """The fastest of ``names`` at each size (``times[k][j]``: program k at size j; the first listed wins a
    tie), adjacent sizes of one winner merged into a band."""
    if not names or len(times) != len(names):
        raise ValueError("choose_bands: one row of times per program, and at least one program")
    count = len(times[0])
    if any(len(row) != count for row in times) or count == 0:
        raise ValueError("choose_bands: every program needs a time at every size, and there must be a size")
    winners = [min(range(len(names)), key=lambda k, j=j: (times[k][j], k)) for j in range(count)]
    bands: list[Band] = []
    start = 0
    for j in range(1, count + 1):
        if j == count or winners[j] != winners[start]:
            bands.append(_band(names, times, winners[start], start, j - 1))
            start = j
    return tuple(bands)


def _band(names: Sequence[str], times: Sequence[Sequence[float]], k: int, first: int, last: int) -> Band:
    span = range(first, last + 1)
    own = tuple(float(times[k][j]) for j in span)
    best: tuple[float, int] | None = None
    for other in range(len(names)):
        if other == k:
            continue
        score = sum(math.log(_ratio(times[other][j], times[k][j])) for j in span) / len(span)
        if best is None or score < best[0]:
            best = (score, other)
    if best is None:
        return Band(first, last, names[k], own, None, ())
    ratios = tuple(_ratio(times[best[1]][j], times[k][j]) for j in span)
    return Band(first, last, names[k], own, names[best[1]], ratios)


def _ratio(slower: float, faster: float) -> float:
    return slower / faster if faster > 0 else (1.0 if slower <= 0 else math.inf)


def thresholds(bands: Sequence[Band], sizes: Sequence[int], collective: Collective, nranks: int) -> tuple[int, ...]:
    """The bytes of the MPI call (`call_bytes`) below which each band but the last runs: the first size of the
    next band."""
    return tuple(call_bytes(collective, nranks, sizes[band.first]) for band in bands[1:])


def tune(
    collective: Collective,
    paths: Sequence[str],
    topology: Topology,
    sizes: Sequence[int],
    model: NetworkModel,
    *,
    exact: bool = False,
    on_verify: Callable[[int, int], None] | None = None,
    on_simulate: Callable[[int, int], None] | None = None,
) -> Tuning:
    """Verify the programs at ``paths`` on ``topology`` (`prepare`), simulate the ones that pass at every size
    (long step loops sampled unless ``exact``, as `collc sim` does) and choose the bands of the fastest.  A
    CollError when none passes or a size does not fit (`sizes_problem`)."""
    problem = sizes_problem(collective, topology.nodes, sizes, model.itemsize)
    if problem is not None:
        raise CollError(f"sizes: {problem}")
    candidates, skipped = prepare(paths, collective, topology, on_verify)
    if not candidates:
        why = "; ".join(f"{s.name}: {s.reason}" for s in skipped) or "no programs"
        raise CollError(f"no candidate {collective.value} program verifies on {topology.spec} ({why})")
    times: list[tuple[float, ...]] = []
    for k, cand in enumerate(candidates):
        schedule, weights = goodput.schedule_for(cand.path, topology, {}, exact or model.execution == "dataflow")
        try:
            sim = simulate(schedule, topology, list(sizes), model, weights=weights)
        except ValueError as err:
            raise CollError(f"{cand.path}: {err}") from None
        times.append(tuple(row.time_s for row in sim.rows))
        if on_simulate is not None:
            on_simulate(k + 1, len(candidates))
    bands = choose_bands([c.name for c in candidates], times)
    return Tuning(
        collective, topology.nodes, topology.spec, model, tuple(sizes), candidates, skipped, tuple(times), bands
    )


def _size(n: int) -> str:
    return goodput.size_text(n)


def _span(values: Sequence[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}..{hi:{fmt}}"


def _calls(low: int | None, high: int | None) -> str:
    """The calls of a band: B, the bytes of the MPI call, from ``low`` (None: 0) below ``high`` (None: any)."""
    if high is None:
        return "all" if low is None else f"B >= {_size(low)}"
    return f"B < {_size(high)}" if low is None else f"{_size(low)} <= B < {_size(high)}"


def table_text(result: Tuning) -> str:
    """The bands, a line each: the sizes simulated, the calls the library runs on it (B: bytes of the MPI call),
    the program and its time, the runner-up and its time over the winner's."""
    limits = result.thresholds()
    rows = [("sizes", "calls", "program", "time (us)", "runner-up", "ratio")]
    for k, band in enumerate(result.bands):
        sizes = _size(result.sizes[band.first])
        if band.last > band.first:
            sizes += f"..{_size(result.sizes[band.last])}"
        calls = _calls(limits[k - 1] if k > 0 else None, limits[k] if k < len(limits) else None)
        micros = [t * 1e6 for t in band.times]
        ratio = _span(band.ratios, ".2f") + "x" if band.ratios else "-"
        rows.append((sizes, calls, band.program, _span(micros, ".4g"), band.runner_up or "-", ratio))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for n, row in enumerate(rows):
        cells = "  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        lines.append(("# " if n == 0 else "  ") + cells)
    return "\n".join(lines)


def _chain(schedules: Sequence[Schedule], limits: Sequence[int]) -> list[tuple[Schedule, int]]:
    """Each band's schedule and the bytes below which it runs (-1 for the last): a band no call reaches (its
    threshold that of the band before, as rounding a rank's block can make it) is dropped, and neighbours of one
    program are merged."""
    chain: list[tuple[Schedule, int]] = []
    for schedule, below in zip(schedules, [*limits, -1], strict=True):
        if chain and below != -1 and below <= chain[-1][1]:
            continue
        if chain and chain[-1][0].algorithm == schedule.algorithm:
            chain[-1] = (schedule, below)
        else:
            chain.append((schedule, below))
    return chain


def write_library(result: Tuning, out_dir: str | Path, *, build: bool = True) -> list[Path]:
    """One mpi-c library of the bands' programs (`collc.backends.mpi_c.generate`): each elaborated in full at its
    instance, band k running the calls below the k-th threshold, the last band's program the others; built
    with mpicc unless ``build`` is false.  The files written."""
    out = Path(out_dir)
    schedules: list[Schedule] = []
    for band in result.bands:
        cand = result.candidate(band.program)
        schedules.append(api.load(cand.path).instantiate(**cand.params).schedule)
    chain = _chain(schedules, result.thresholds())
    if len(chain) > 1 and result.collective is Collective.ALLTOALL:
        names = ", ".join(schedule.algorithm for schedule, _ in chain)
        raise CollError(
            f"an alltoall library holds one schedule, and the bands choose {names}: compile one of them with "
            "collc compile, or tune with --candidates naming one"
        )
    main = chain[-1][0]
    bands = [LibraryBand(schedule, below) for schedule, below in chain[:-1]]
    files = mpi_c.generate(main, out, bands=bands)
    if build:
        files.append(mpi_c.build(out, main))
    return files
