"""Property testing of `.coll` algorithms with pytest and hypothesis.

A new algorithm is property-tested in a few lines::

    from hypothesis import given, settings
    from collc import testing as ct

    ALG = collc.load("my_allreduce.coll")

    @settings(max_examples=30, deadline=None)
    @given(params=ct.valid_params(ALG), dtype=ct.dtypes(), op=ct.ops(), count=ct.element_counts())
    def test_my_allreduce(params, dtype, op, count):
        ct.assert_verifies(ALG, **params)
        ct.assert_runs_correctly(ALG, count=count, dtype=dtype, op=op, verify=False, **params)

Strategies: `rank_counts`, `torus_shapes`, `dtypes`, `ops`, `element_counts`,
`buffers`, `valid_params`.  Assertions: `assert_verifies`,
`assert_runs_correctly`; they raise `AssertionError` with the verifier's
message (``file:line:col``, the source line, step, rank, chunk, expected and
actual contributions), so pytest shows what went wrong and where.

See docs/testing.md for a walk-through.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

try:
    from hypothesis import assume
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    from hypothesis.strategies import SearchStrategy
except ImportError as _err:  # pragma: no cover - exercised only without the test extra
    raise ImportError(
        "collc.testing needs hypothesis, which is not installed; install the test extra "
        "(pip install 'collc[test]') or hypothesis itself (pip install hypothesis)"
    ) from _err

from collc import collectives
from collc.api import Algorithm, Instance, load
from collc.backends import local
from collc.diagnostics import CollError, Diagnostic, format_diagnostic, format_error
from collc.elaborate import constants
from collc.ir import Collective, ParamValue, Schedule
from collc.verify.check import CheckReport, Finding
from collc.verify.findings import contents_note

__all__ = [
    "DEFAULT_COUNT",
    "assert_runs_correctly",
    "assert_verifies",
    "buffers",
    "dtypes",
    "element_counts",
    "ops",
    "rank_counts",
    "torus_shapes",
    "valid_params",
]

DEFAULT_COUNT = 1000
"""Elements per rank `assert_runs_correctly` uses when no count is given (uneven chunks for most p)."""

_SHOWN_FINDINGS = 5  # findings printed in an assertion message
_CONSTRAINT = "violates the constraint"
_TRIES = 64  # candidate parameter sets `valid_params` tries per example before giving up on it
_SMALL_INT = (0, 8)  # the range of int parameters other than p and root

# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


def _powers_of_two(lo: int, hi: int) -> list[int]:
    return [1 << i for i in range(max(hi, 1).bit_length()) if lo <= 1 << i <= hi]


def rank_counts(
    min_p: int = 1, max_p: int = 64, *, pow2: bool = False, even: bool = False, odd: bool = False
) -> SearchStrategy[int]:
    """Rank counts in ``min_p .. max_p`` (inclusive): only powers of two, even or odd ones when asked."""
    if min_p < 1 or max_p < min_p:
        raise ValueError(f"rank_counts needs 1 <= min_p <= max_p, got min_p={min_p}, max_p={max_p}")
    if even and odd:
        raise ValueError("rank_counts: even and odd exclude each other")
    if pow2:
        values = [v for v in _powers_of_two(min_p, max_p) if (not even or v % 2 == 0) and (not odd or v % 2)]
        if not values:
            raise ValueError(f"rank_counts: no power of two in {min_p}..{max_p} fits (even={even}, odd={odd})")
        return st.sampled_from(values)
    if even:
        lo, hi = (min_p + 1) // 2, max_p // 2
        if lo > hi:
            raise ValueError(f"rank_counts: no even number in {min_p}..{max_p}")
        return st.integers(lo, hi).map(lambda k: 2 * k)
    if odd:
        lo, hi = min_p // 2, (max_p - 1) // 2
        if lo > hi:
            raise ValueError(f"rank_counts: no odd number in {min_p}..{max_p}")
        return st.integers(lo, hi).map(lambda k: 2 * k + 1)
    return st.integers(min_p, max_p)


def torus_shapes(
    max_dims: int = 3,
    min_side: int = 2,
    max_side: int = 8,
    *,
    even: bool = False,
    max_nodes: int = 256,
    min_dims: int = 1,
) -> SearchStrategy[tuple[int, ...]]:
    """Torus dimensions: ``min_dims .. max_dims`` sides in ``min_side .. max_side``, at most ``max_nodes`` nodes."""
    lo, hi = min_side, max_side
    if even:
        lo, hi = lo + lo % 2, hi - hi % 2
    if lo < 1 or hi < lo:
        raise ValueError(f"torus_shapes: no side fits in {min_side}..{max_side} (even={even})")
    if min_dims < 1 or max_dims < min_dims:
        raise ValueError(f"torus_shapes needs 1 <= min_dims <= max_dims, got {min_dims}, {max_dims}")
    ndims = [n for n in range(min_dims, max_dims + 1) if lo**n <= max_nodes]
    if not ndims:
        raise ValueError(f"torus_shapes: {min_dims} sides of at least {lo} exceed max_nodes={max_nodes}")
    step = 2 if even else 1

    @st.composite
    def shapes(draw: st.DrawFn) -> tuple[int, ...]:
        n = draw(st.sampled_from(ndims))
        sides: list[int] = []
        nodes = 1
        for i in range(n):
            # Leave room for the remaining sides at their minimum.
            cap = min(hi, max_nodes // (nodes * lo ** (n - i - 1)))
            side = draw(st.integers(lo // step, cap // step)) * step
            sides.append(side)
            nodes *= side
        return tuple(draw(st.permutations(sides)))

    return shapes()


def dtypes() -> SearchStrategy[str]:
    """Names of the element types the local executor supports (`collc.backends.local.DTYPES`)."""
    return st.sampled_from(tuple(local.DTYPES))


def ops() -> SearchStrategy[str]:
    """Names of the reduction ops (`collc.backends.local.OPS`)."""
    return st.sampled_from(local.OPS)


def element_counts(max_count: int = 4096, *, min_count: int = 0, multiple_of: int = 1) -> SearchStrategy[int]:
    """Element counts in ``min_count .. max_count`` that are multiples of ``multiple_of``."""
    if multiple_of < 1:
        raise ValueError(f"element_counts: multiple_of must be at least 1, got {multiple_of}")
    lo, hi = -(-max(min_count, 0) // multiple_of), max_count // multiple_of
    if lo > hi:
        raise ValueError(f"element_counts: no multiple of {multiple_of} in {min_count}..{max_count}")
    return st.integers(lo, hi).map(lambda k: k * multiple_of)


def _value(draw: st.DrawFn, value: Any) -> Any:
    return draw(value) if isinstance(value, SearchStrategy) else value


def _default_elements(dt: np.dtype) -> SearchStrategy[Any]:
    if np.issubdtype(dt, np.integer):
        return st.integers(-100, 100)
    width = 16 if dt == np.float16 else 64 if dt == np.float64 else 32
    return st.floats(-1.0, 1.0, width=width)


def buffers(
    p: int | SearchStrategy[int],
    count: int | SearchStrategy[int],
    dtype: str | SearchStrategy[str] = "float32",
    *,
    elements: SearchStrategy[Any] | None = None,
) -> SearchStrategy[np.ndarray]:
    """Arrays of shape ``(p, count)`` and type ``dtype``: one input vector per rank.

    Values default to floats in [-1, 1] or integers in -100..100; ``elements``
    overrides them.  Any argument may be a strategy.  Pass the result to
    `assert_runs_correctly` as ``inputs=`` (alltoall: ``count`` is ``p`` times
    the per-destination size, the whole send buffer).
    """

    @st.composite
    def arrays(draw: st.DrawFn) -> np.ndarray:
        nranks, n, name = _value(draw, p), _value(draw, count), _value(draw, dtype)
        dt = local.DTYPES.get(name)
        if dt is None:
            raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(local.DTYPES)}")
        values = elements if elements is not None else _default_elements(dt)
        # hypothesis cannot build bfloat16 (an ml_dtypes type) itself: draw float32 and round.
        build = np.dtype(np.float32) if name == "bfloat16" else dt
        array = draw(hnp.arrays(build, (nranks, n), elements=values))
        return array.astype(dt) if build != dt else array

    return arrays()


# --------------------------------------------------------------------------
# Valid parameters
# --------------------------------------------------------------------------


def _as_algorithm(algorithm: Algorithm | str | Path) -> Algorithm:
    """An `Algorithm` as is; a path or bundled example name loaded (load errors become AssertionError)."""
    if isinstance(algorithm, Algorithm):
        return algorithm
    try:
        return load(algorithm)
    except CollError as err:
        raise AssertionError(format_error(err, err.sources)) from err


def _verdict(algorithm: Algorithm, params: Mapping[str, ParamValue]) -> bool:
    """False when the program rejects ``params`` with a constraint; True otherwise.

    Only the parameters and global constants are evaluated (much cheaper than
    elaborating every rank).  Other errors count as accepted: the program takes
    these values, so `assert_verifies` should report what then goes wrong.
    """
    try:
        constants(algorithm.program, params)
    except CollError as err:
        return _CONSTRAINT not in err.message
    return True


def valid_params(
    algorithm: Algorithm | str | Path, max_p: int = 64, **fixed: ParamValue | SearchStrategy[Any]
) -> SearchStrategy[dict[str, ParamValue]]:
    """Parameter sets for ``algorithm`` that satisfy its own ``where`` constraints.

    Every declared parameter gets a value: ``fixed`` ones (a value or a
    strategy) as given; ``dims`` parameters from `torus_shapes` (1 to 3 sides
    of 2..8, at most ``max_p`` nodes); ``p`` from 1..``max_p``, mixing the
    counts the program accepts with its defaults, arbitrary counts, powers of
    two and the node count of a drawn torus; ``root`` from 0..p-1; other
    ``int`` parameters from 0..8.  Candidates the program rejects ("violates
    the constraint") are discarded; other program errors are left for
    `assert_verifies` to report.
    """
    alg = _as_algorithm(algorithm)
    declared = {param.name: param for param in alg.program.params}
    unknown = sorted(set(fixed) - set(declared))
    if unknown:
        raise ValueError(f"{alg.name} has no parameter {', '.join(unknown)} (its parameters: {', '.join(declared)})")
    if max_p < 1:
        raise ValueError(f"valid_params needs max_p >= 1, got {max_p}")
    plain = {k: v for k, v in fixed.items() if not isinstance(v, SearchStrategy)}
    # Candidates the program is likely to accept come first, so that even hypothesis's
    # simplest examples (every choice zero) are valid ones.
    accepted_p = list(range(1, max_p + 1))
    p_options: list[SearchStrategy[int]] = [st.integers(1, max_p), st.sampled_from(_powers_of_two(1, max_p))]
    if "p" in declared and "p" not in fixed:
        accepted_p = [p for p in range(1, max_p + 1) if _verdict(alg, {**plain, "p": p})] or accepted_p
        p_options.insert(0, st.sampled_from(accepted_p))
    # Other int parameters: first the values accepted with a few accepted p (small, middle, large).
    probes: list[dict[str, ParamValue]] = [{}]
    if "p" in declared and "p" not in plain:
        probes = [{"p": q} for q in sorted({accepted_p[0], accepted_p[len(accepted_p) // 2], accepted_p[-1]})]
    ints: dict[str, SearchStrategy[int]] = {}
    for name, param in declared.items():
        if param.type == "int" and name not in ("p", "root") and name not in fixed:
            ok = [
                v
                for v in range(_SMALL_INT[0], _SMALL_INT[1] + 1)
                if any(_verdict(alg, {**plain, **probe, name: v}) for probe in probes)
            ]
            ints[name] = st.one_of(st.sampled_from(ok), st.integers(*_SMALL_INT)) if ok else st.integers(*_SMALL_INT)
    dims_names = [name for name, param in declared.items() if param.type == "dims"]
    shapes: dict[str, SearchStrategy[tuple[int, ...]]] = {}
    side = 1 if max_p < 2 else 2
    for name in dims_names:
        if name in fixed:
            continue
        lengths = []
        for n in range(1, 4):
            if side**n <= max_p:
                probe = {**plain, name: (side,) * n, **({"p": side**n} if "p" in declared and "p" not in plain else {})}
                if _verdict(alg, probe):
                    lengths.append(n)
        options = [torus_shapes(n, side, min_dims=n, max_nodes=max_p) for n in lengths]
        shapes[name] = st.one_of(options) if options else torus_shapes(min_side=side, max_nodes=max_p)

    @st.composite
    def candidate(draw: st.DrawFn) -> dict[str, ParamValue]:
        values: dict[str, ParamValue] = {}
        nodes = 0  # of the first torus drawn
        for name in dims_names:
            shape = _value(draw, fixed[name]) if name in fixed else draw(shapes[name])
            values[name] = shape
            if not nodes and isinstance(shape, tuple):
                nodes = math.prod(shape)
        if "p" in declared:
            if "p" in fixed:
                values["p"] = _value(draw, fixed["p"])
            else:
                options = list(p_options)
                if 1 <= nodes <= max_p:  # p is likely the node count of the torus
                    options.insert(0, st.just(nodes))
                values["p"] = draw(st.one_of(options))
        p = values.get("p")
        for name in declared:
            if name in values:
                continue
            if name in fixed:
                values[name] = _value(draw, fixed[name])
            elif name == "root":
                top = p if isinstance(p, int) and p >= 1 else max_p
                values[name] = draw(st.integers(0, top - 1))
            elif name in ints:
                values[name] = draw(ints[name])
        return {name: values[name] for name in declared if name in values}

    @st.composite
    def accepted_params(draw: st.DrawFn) -> dict[str, ParamValue]:
        rejected: set[tuple[tuple[str, ParamValue], ...]] = set()
        for _ in range(_TRIES):
            params = draw(candidate())
            key = tuple(params.items())
            if key not in rejected:
                if _verdict(alg, params):
                    return params
                rejected.add(key)
        assume(False)
        raise AssertionError("unreachable")  # pragma: no cover

    return accepted_params()


# --------------------------------------------------------------------------
# Assertions
# --------------------------------------------------------------------------


def _params_text(params: Mapping[str, ParamValue] | tuple[tuple[str, ParamValue], ...]) -> str:
    items = params.items() if isinstance(params, Mapping) else params
    return " ".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in items)


def _instantiate(alg: Algorithm, params: Mapping[str, ParamValue]) -> Instance:
    """``alg.instantiate(**params)``; a program error becomes an AssertionError with file:line and caret."""
    try:
        return alg.instantiate(**params)
    except CollError as err:
        sources = {**alg.sources, **err.sources}
        head = f"{alg.name} ({alg.collective.value}) {_params_text(params)}: the program fails to elaborate"
        raise AssertionError(f"{head}\n{format_error(err, sources)}") from err


def _resolve(
    algorithm: Algorithm | Instance | str | Path, params: Mapping[str, ParamValue]
) -> tuple[Algorithm, Instance, dict[str, ParamValue]]:
    """The algorithm, its instance for ``params`` and the parameters (an `Instance` brings its own)."""
    if isinstance(algorithm, Instance):
        if params:
            raise ValueError(f"parameters {', '.join(params)} given with an Instance, which has its own")
        return algorithm.algorithm, algorithm, algorithm.schedule.param_dict
    alg = _as_algorithm(algorithm)
    return alg, _instantiate(alg, params), dict(params)


def _finding_text(finding: Finding, sources: Mapping[str, str]) -> str:
    where = [f"[{finding.code}]"]
    for label, value in (("step", finding.step), ("rank", finding.rank), ("chunk", finding.chunk)):
        if value is not None:
            where.append(f"{label} {value}")
    notes = [" ".join(where)]
    contents = contents_note(finding)
    if contents is not None:
        notes.append(contents)
    parts = [format_diagnostic(Diagnostic("error", finding.message, finding.span, tuple(notes)), sources)]
    parts.extend(format_diagnostic(Diagnostic("note", text, span), sources) for span, text in finding.related)
    return "\n".join(parts)


def _reproduce(alg: Algorithm, call: str, params: Mapping[str, ParamValue], **extra: object) -> str:
    args = [repr(alg.program.path), *(f"{k}={v!r}" for k, v in {**params, **extra}.items())]
    return f"  reproduce: collc.testing.{call}({', '.join(args)})"


def assert_verifies(algorithm: Algorithm | Instance | str | Path, **params: ParamValue) -> CheckReport:
    """Elaborate ``algorithm`` with ``params`` and verify it; AssertionError with the findings when wrong.

    ``algorithm`` is an `Algorithm`, a path to a `.coll` file, a bundled
    example name, or an `Instance` (then without ``params``: elaborating a
    large p once for several checks saves time).  Returns the `CheckReport`
    (with its statistics) when correct.
    """
    __tracebackhide__ = True
    alg, inst, params = _resolve(algorithm, params)
    return _verified(alg, inst, params)


def _verified(alg: Algorithm, inst: Instance, params: Mapping[str, ParamValue]) -> CheckReport:
    """The report of ``inst``; AssertionError listing the findings when it is wrong."""
    __tracebackhide__ = True
    report = inst.verify()
    if report.ok:
        return report
    s = inst.schedule
    total = len(report.findings) + report.omitted
    lines = [f"{s.algorithm} ({s.collective.value}) {_params_text(s.params)}: WRONG ({total} finding(s))"]
    lines += [_finding_text(f, alg.sources) for f in report.findings[:_SHOWN_FINDINGS]]
    if total > _SHOWN_FINDINGS:
        lines.append(f"  ... and {total - _SHOWN_FINDINGS} more")
    lines.append(_reproduce(alg, "assert_verifies", params))
    raise AssertionError("\n".join(lines))


def _dtype_name(dt: np.dtype) -> str:
    for name, known in local.DTYPES.items():
        if known == dt:
            return name
    raise ValueError(f"inputs have dtype {dt}, not one of {', '.join(local.DTYPES)}")


def _poison(schedule: Schedule, inputs: np.ndarray, count: int) -> np.ndarray:
    """A copy of ``inputs`` with the slots a rank does not initially hold poisoned, as `local.make_inputs` does."""
    p, nchunks = schedule.nranks, schedule.nchunks
    offsets = collectives.element_offsets(schedule.collective, p, nchunks, count, schedule.chunk_weights)
    origin = collectives.chunk_origin(schedule.collective, p, nchunks, schedule.root)
    origin = origin[np.repeat(np.arange(nchunks), np.diff(offsets))]
    out = inputs.copy()
    if (origin != collectives.EVERY).any():
        poison = local.INT_POISON if np.issubdtype(out.dtype, np.integer) else np.nan
        for r in range(p):
            out[r, (origin != collectives.EVERY) & (origin != r)] = poison
    return out


def _local_run(
    schedule: Schedule, count: int, dtype: str, op: str, seed: int, inputs: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Run on the local executor: (result, expected values, mask, input scale, seconds)."""
    lowered = local.plan(schedule, count)
    if inputs is None:
        start = local.make_inputs(schedule, count, dtype, seed, op=op)
        scale = 1.0
    else:
        if inputs.shape != lowered.shape:
            raise ValueError(f"inputs have shape {inputs.shape}, {schedule.algorithm} needs {lowered.shape}")
        start = _poison(schedule, inputs, count)
        magnitudes = np.abs(inputs.astype(np.float64))
        finite = magnitudes[np.isfinite(magnitudes)]
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
    result = start.copy()
    began = time.perf_counter()
    local.execute(lowered, result, op)
    seconds = time.perf_counter() - began
    values, mask = local.expected(schedule, start, op)
    return result, values, mask, scale, seconds


def _wrong_in(
    schedule: Schedule,
    result: np.ndarray,
    values: np.ndarray,
    mask: np.ndarray,
    dtype: str,
    op: str,
    scale: float,
    rows: slice,
    cols: slice,
) -> int:
    return local.count_wrong(
        result[rows, cols],
        values[rows, cols],
        mask[rows, cols],
        dtype,
        op,
        schedule.nranks,
        reduces=schedule.collective.reduces,
        input_scale=scale,
    )


def _show(x: Any) -> str:
    """A scalar as plain Python text (``0.25``, ``nan``, ``-7``), whatever its numpy type."""
    value = np.asarray(x)
    return str(int(value)) if np.issubdtype(value.dtype, np.integer) else repr(float(value.astype(np.float64)))


def _wrong_details(
    schedule: Schedule,
    count: int,
    dtype: str,
    op: str,
    result: np.ndarray,
    values: np.ndarray,
    mask: np.ndarray,
    scale: float,
) -> list[str]:
    """Where the wrong elements are: the ranks, then the first wrong element, its chunk and values."""
    per_rank = {
        r: n
        for r in range(schedule.nranks)
        if (n := _wrong_in(schedule, result, values, mask, dtype, op, scale, slice(r, r + 1), slice(None)))
    }
    if not per_rank:
        return []
    shown = ", ".join(f"rank {r}: {n}" for r, n in list(per_rank.items())[:8])
    more = f", ... ({len(per_rank)} ranks in all)" if len(per_rank) > 8 else ""
    lines = [f"  wrong elements per rank: {shown}{more}"]
    rank = next(iter(per_rank))
    lo, hi = 0, result.shape[1]  # the first wrong element: the shortest prefix with a wrong element
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _wrong_in(schedule, result, values, mask, dtype, op, scale, slice(rank, rank + 1), slice(0, mid)):
            hi = mid
        else:
            lo = mid
    element = lo
    offsets = collectives.element_offsets(
        schedule.collective, schedule.nranks, schedule.nchunks, count, schedule.chunk_weights
    )
    chunk = int(np.searchsorted(offsets, element, side="right")) - 1
    lines.append(
        f"  first wrong: rank {rank}, element {element} (chunk {chunk}, elements "
        f"{int(offsets[chunk])}..{int(offsets[chunk + 1]) - 1}): expected {_show(values[rank, element])}, "
        f"got {_show(result[rank, element])}"
    )
    return lines


def assert_runs_correctly(
    algorithm: Algorithm | Instance | str | Path,
    backend: str = "local",
    count: int = DEFAULT_COUNT,
    dtype: str = "float32",
    op: str = "sum",
    seed: int = 0,
    *,
    verify: bool = True,
    inputs: np.ndarray | None = None,
    **params: ParamValue,
) -> local.RunResult:
    """Run ``algorithm`` with ``params`` on ``backend`` and check every element against numpy.

    Verifies first (as `assert_verifies`) unless ``verify=False``.  ``count``
    elements per rank of random data from ``seed`` (alltoall: rounded down to a
    multiple of p), or the given ``inputs`` (shape ``(p, logical count)``, e.g.
    from `buffers`; they set count and dtype; local backend only).  Returns the
    `RunResult`; AssertionError naming the wrong ranks, the first wrong element,
    its chunk, and the expected and actual values when any element is wrong.
    """
    __tracebackhide__ = True
    alg, inst, params = _resolve(algorithm, params)
    if verify:
        _verified(alg, inst, params)
    s = inst.schedule
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, float] | None = None
    if inputs is None:
        if s.collective is Collective.ALLTOALL:
            count -= count % s.nranks
        result = inst.run(count, dtype, op, backend=backend, seed=seed)
        if result.wrong == 0:
            return result
        if backend == "local":  # run again (same seed, same data) to find the wrong elements
            out, values, mask, scale, _ = _local_run(s, count, dtype, op, seed, None)
            arrays = (out, values, mask, scale)
    else:
        if backend != "local":
            raise ValueError(f"inputs= runs on the local backend only, not {backend!r}")
        dtype = _dtype_name(inputs.dtype)
        logical = inputs.shape[1] if inputs.ndim == 2 else 0
        count = logical // s.nranks if s.collective is Collective.ALLTOALL else logical
        out, values, mask, scale, seconds = _local_run(s, count, dtype, op, seed, inputs)
        arrays = (out, values, mask, scale)
        wrong = local.count_wrong(
            out, values, mask, dtype, op, s.nranks, reduces=s.collective.reduces, input_scale=scale
        )
        result = local.RunResult(
            algorithm=s.algorithm,
            nranks=s.nranks,
            count=count,
            nbytes=count * local.DTYPES[dtype].itemsize,
            dtype=dtype,
            op=op,
            iters=1,
            time_us=seconds * 1e6,
            wrong=wrong,
        )
        if wrong == 0:
            return result
    source = "the given inputs" if inputs is not None else f"seed {seed}"
    checked = "verified first" if verify else "verification skipped"
    lines = [
        f"{s.algorithm} ({s.collective.value}) {_params_text(s.params)}: {result.wrong} wrong element(s) "
        f"on backend {backend} (count {count}, dtype {dtype}, op {op}, {source}; {checked})"
    ]
    if arrays is not None:
        lines += _wrong_details(s, count, dtype, op, *arrays)
    if inputs is None:
        extra = {"backend": backend, "count": count, "dtype": dtype, "op": op, "seed": seed, "verify": verify}
        lines.append(_reproduce(alg, "assert_runs_correctly", params, **extra))
    raise AssertionError("\n".join(lines))
