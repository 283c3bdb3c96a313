"""The ``local`` executor: every rank's buffer in one numpy array, in one process.

This is the reference semantics of a `Schedule`: in a step every send reads the
sender's buffer as it was at the start of the step, and every receive lands at
its end (a ``copy`` overwrites the chunks, a ``reduce`` combines the incoming
data into them with the reduction op).  A receive of rank ``r`` from ``q`` for
chunks ``C`` takes chunks ``C`` of ``q``'s buffer as it was at the start of the
step.  The data moves receive by receive, but sends are not ignored: before
anything runs, `check_matching` checks that in every step the chunks each rank
sends to each peer are exactly those the peer receives from it (one message per
(step, sender, receiver), as the MPI executors' step tables have it), and
raises `MismatchError` when they differ, as an MPI run would fail with a
message of the wrong size or one that never arrives.  So a run of an
unverified schedule (``collc run --no-check``) is an independent witness.

Each rank holds one buffer over the whole logical element space of the
collective (`collectives.logical_count`), cut into chunks by
`collectives.element_offsets` (chunks may be uneven or empty).

`expected` computes the result straight from the collective's definition
(`collectives.chunk_origin` / `chunk_dest`), never from the schedule, and
`count_wrong` compares: exactly for integers, max/min and copies, and within a
rounding bound for floating-point sum and prod.

A schedule with compression points runs with its codecs
(`collc.backends.local_codecs.execute`) and is judged by the verifier's error
bounds, which the caller passes (`judge_error_bounds`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from collc import collectives
from collc.backends import local_codecs
from collc.backends.local_plan import (
    OPS,
    MismatchError,
    Plan,
    ProgressFn,
    Region,
    Transfer,
    check_layout,
    check_matching,
    execute,
    logical_of,
    plan,
    ufunc_of,
)
from collc.collectives import EVERY
from collc.ir import Collective, Schedule

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DTYPES",
    "OPS",
    "MismatchError",
    "Plan",
    "Region",
    "RunResult",
    "Transfer",
    "buffer_bytes",
    "check_matching",
    "count_wrong",
    "counts_offsets",
    "execute",
    "expected",
    "judge_error_bounds",
    "largest_count",
    "make_inputs",
    "plan",
    "rounding_allowance",
    "run",
]

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}

DEFAULT_MAX_BYTES: int = 4 << 30
"""Default budget for the buffers of all ranks together (4 GiB)."""

INT_POISON: int = -123456789
"""What a slot holds before a rank has received it (NaN for floating-point dtypes)."""


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


def _dtype(dtype: str) -> np.dtype:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}") from None


def _ufunc(op: str) -> np.ufunc:
    return ufunc_of(op)


def _is_float(dt: np.dtype) -> bool:
    return not np.issubdtype(dt, np.integer)


_check_layout = check_layout
_logical = logical_of


def buffer_bytes(collective: Collective, nranks: int, count: int, itemsize: int) -> int:
    """Bytes of the buffers of all ranks together for a ``count``-element collective: each rank holds the
    collective's whole logical element space (`collectives.logical_count`)."""
    return nranks * collectives.logical_count(collective, nranks, count) * itemsize


def largest_count(collective: Collective, nranks: int, itemsize: int, max_bytes: int) -> int:
    """The largest count whose buffers (`buffer_bytes`) fit in ``max_bytes`` (whole blocks for an alltoall)."""
    per_count = max(1, nranks * collectives.logical_count(collective, nranks, 1) * itemsize)
    largest = max_bytes // per_count
    if collective is Collective.ALLTOALL:
        largest -= largest % nranks
    return largest


def _check_budget(schedule: Schedule, count: int, itemsize: int, max_bytes: int) -> None:
    _logical(schedule, count)
    need = buffer_bytes(schedule.collective, schedule.nranks, count, itemsize)
    if need > max_bytes:
        largest = largest_count(schedule.collective, schedule.nranks, itemsize, max_bytes)
        raise ValueError(
            f"{schedule.algorithm}: count={count} needs {need / 2**30:.2f} GiB of buffers across "
            f"{schedule.nranks} ranks, above the budget of {max_bytes / 2**30:.2f} GiB; "
            f"use a smaller count (at most {largest} elements of {itemsize} bytes) or raise max_bytes"
        )


def _check_counts_budget(schedule: Schedule, offsets: np.ndarray, itemsize: int, max_bytes: int) -> None:
    need = schedule.nranks * int(offsets[-1]) * itemsize
    if need > max_bytes:
        raise ValueError(
            f"{schedule.algorithm}: the counts add up to {int(offsets[-1])} elements, whose buffers across "
            f"{schedule.nranks} ranks need {need / 2**30:.2f} GiB, above the budget of {max_bytes / 2**30:.2f} GiB"
        )


def counts_offsets(schedule: Schedule, counts: Sequence[int]) -> np.ndarray:
    """The chunks' element offsets of a call of ``schedule`` whose counts are given at run time
    (`collectives.counts_offsets`); ValueError, naming the schedule, when they cannot cut it: wrong length or
    sign, another collective, or a schedule with chunk weights or compression points (whose chunks are cut
    otherwise)."""
    if schedule.chunk_weights is not None:
        raise ValueError(f"{schedule.algorithm}: its chunk weights cut its chunks; counts given per rank cannot")
    if schedule.compresses():
        raise ValueError(f"{schedule.algorithm} has compression points: counts given per rank are not supported")
    try:
        return collectives.counts_offsets(schedule.collective, schedule.nranks, schedule.nchunks, counts)
    except ValueError as err:
        raise ValueError(f"{schedule.algorithm}: {err}") from None


# --------------------------------------------------------------------------
# Inputs and the reference result
# --------------------------------------------------------------------------


def _element_origin_dest(
    schedule: Schedule, count: int, offsets: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``origin`` and ``dest`` of the chunk each logical element belongs to (``offsets``: the chunks' element
    offsets when counts are given at run time, else those of ``count``)."""
    p, nchunks = schedule.nranks, schedule.nchunks
    if offsets is None:
        offsets = collectives.element_offsets(schedule.collective, p, nchunks, count, schedule.chunk_weights)
    chunk_of = np.repeat(np.arange(nchunks, dtype=np.int64), np.diff(offsets))
    origin = collectives.chunk_origin(schedule.collective, p, nchunks, schedule.root)
    dest = collectives.chunk_dest(schedule.collective, p, nchunks, schedule.root)
    return origin[chunk_of], dest[chunk_of]


def _holds(who: np.ndarray, nranks: int) -> np.ndarray:
    """(nranks, logical) mask: rank r is in ``who`` (EVERY or r) for each element."""
    if (who == EVERY).all():
        return np.broadcast_to(np.True_, (nranks, who.size))
    ranks = np.arange(nranks, dtype=np.int64)[:, None]
    return (who[None, :] == EVERY) | (who[None, :] == ranks)


def make_inputs(
    schedule: Schedule,
    count: int,
    dtype: str,
    seed: int = 0,
    *,
    op: str = "sum",
    max_bytes: int = DEFAULT_MAX_BYTES,
    offsets: np.ndarray | None = None,
) -> np.ndarray:
    """Random initial buffers, shape ``(nranks, logical_count)``, distinct per rank.

    ``offsets``: the chunks' element offsets of a call whose counts are given at run time
    (`collectives.counts_offsets`); they replace ``count``, the logical space being ``offsets[-1]`` long.

    Floating point: uniform in [-1, 1] (sum, max, min) or a random sign times
    uniform in [0.5, 1.5] (prod).  Integers: -100..100 (sum), -10**6..10**6
    (max, min), and ±1 or 2 (prod, with few enough 2s that products rarely wrap).
    Slots a rank does not initially hold are poisoned: NaN, or `INT_POISON`.
    """
    dt = _dtype(dtype)
    _ufunc(op)
    _check_layout(schedule)
    p = schedule.nranks
    if offsets is None:
        _check_budget(schedule, count, dt.itemsize, max_bytes)
        shape = (p, _logical(schedule, count))
    else:
        _check_counts_budget(schedule, offsets, dt.itemsize, max_bytes)
        shape = (p, int(offsets[-1]))
    rng = np.random.default_rng(seed)
    if _is_float(dt):
        work = np.float64 if dt == np.float64 else np.float32
        values = rng.random(shape, dtype=work)
        if op == "prod":
            values += 0.5
            values *= rng.choice(np.array([-1, 1], dtype=work), size=shape)
        else:
            values *= 2
            values -= 1
        buffers = values.astype(dt, copy=False)
        poison: float | int = np.nan
    else:
        if op == "prod":
            two = min(0.5, 8.0 / p)
            choice = np.array([-1, 1, 2], dtype=dt)
            buffers = rng.choice(choice, size=shape, p=[(1 - two) / 2, (1 - two) / 2, two])
        else:
            bound = 100 if op == "sum" else 10**6
            buffers = rng.integers(-bound, bound, size=shape, dtype=dt, endpoint=True)
        poison = INT_POISON
    origin, _ = _element_origin_dest(schedule, count, offsets)
    if not (origin == EVERY).all():
        for r in range(p):
            buffers[r, (origin != EVERY) & (origin != r)] = poison
    return buffers


def expected(
    schedule: Schedule, inputs: np.ndarray, op: str, offsets: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The collective's result computed from its definition, and the mask of elements that must match.

    Returns ``(values, mask)``, both of shape ``(nranks, logical)``.  ``values``
    is a read-only broadcast view (every rank's required element has the same
    value), float64 for floating-point inputs and the input dtype for integers;
    ``mask[r, e]`` is True when rank r must hold element e at the end (also
    read-only: a broadcast view when every rank must hold every element).  ``offsets``: the chunks' element
    offsets when counts are given at run time (`collectives.counts_offsets`).
    """
    ufunc = _ufunc(op)
    _check_layout(schedule)
    p = schedule.nranks
    if inputs.ndim != 2 or inputs.shape[0] != p:
        raise ValueError(f"inputs have shape {inputs.shape}, expected ({p}, logical)")
    logical = inputs.shape[1]
    count = logical // p if schedule.collective is Collective.ALLTOALL else logical
    if offsets is None:
        _logical(schedule, count)
    elif int(offsets[-1]) != logical:
        raise ValueError(f"inputs have {logical} elements per rank, the counts {int(offsets[-1])}")
    origin, dest = _element_origin_dest(schedule, count, offsets)
    floating = _is_float(inputs.dtype)
    out_dtype = np.dtype(np.float64) if floating else inputs.dtype
    values = np.zeros(logical, dtype=out_dtype)
    every = origin == EVERY
    if every.any():
        if floating and op in ("sum", "prod"):
            reduced = ufunc.reduce(inputs, axis=0, dtype=np.float64)
        else:
            reduced = ufunc.reduce(inputs, axis=0).astype(out_dtype)
        values[every] = reduced[every]
    single = np.flatnonzero(~every)
    if single.size:
        values[single] = inputs[origin[single], single].astype(out_dtype)
    prefix = schedule.collective.prefix
    if prefix is not None:  # a scan: rank r's result reduces ranks 0 .. r + prefix - 1 (exscan: rank 0 none)
        return _scan_expected(ufunc, inputs, out_dtype, floating and op in ("sum", "prod"), prefix)
    return np.broadcast_to(values, (p, logical)), _holds(dest, p)


def _scan_expected(
    ufunc: np.ufunc, inputs: np.ndarray, out_dtype: np.dtype, wide: bool, prefix: int
) -> tuple[np.ndarray, np.ndarray]:
    """`expected` of a scan (prefix 1) or an exscan (prefix 0, whose rank 0 must hold nothing)."""
    p, logical = inputs.shape
    inclusive = ufunc.accumulate(inputs.astype(np.float64) if wide else inputs, axis=0).astype(out_dtype)
    mask = np.ones((p, logical), dtype=bool)
    if prefix:
        return inclusive, mask
    values = np.zeros((p, logical), dtype=out_dtype)
    values[1:] = inclusive[:-1]
    mask[0] = False
    return values, mask


def _gamma(n: int, eps: float) -> float:
    """Higham's gamma_n = n*u / (1 - n*u), u = eps/2: the relative bound of n roundings."""
    nu = n * eps / 2
    return nu / (1 - nu) if nu < 1 else float("inf")


def count_wrong(
    result: np.ndarray,
    expected: np.ndarray,
    mask: np.ndarray,
    dtype: str,
    op: str,
    nranks: int,
    *,
    reduces: bool = True,
    input_scale: float = 1.0,
) -> int:
    """How many masked elements of ``result`` differ from ``expected``.

    Exact for integers, for max/min, and when ``reduces`` is False (copies only).
    For floating-point sum and prod, any order of the ``nranks - 1`` operations
    must pass: with ``g = gamma_n(dtype) + gamma_n(float64)`` (gamma_n = n*u/(1-n*u),
    u = eps/2), ``|r - e| <= g * (|e| + nranks * input_scale)`` for sum (the
    recursive-summation bound with every input of magnitude at most
    ``input_scale``) and ``|r - e| <= g * |e| + nranks * tiny`` for prod (tiny:
    the smallest normal number, for underflow).  A NaN expected value never
    counts as right; equal infinities do.
    """
    dt = _dtype(dtype)
    _ufunc(op)
    if not (result.shape == expected.shape == mask.shape):
        raise ValueError(f"shapes differ: result {result.shape}, expected {expected.shape}, mask {mask.shape}")
    floating = _is_float(dt)
    exact = not floating or not reduces or op in ("max", "min")
    g = atol = 0.0
    if not exact:
        info = ml_dtypes.finfo(dt)
        g = _gamma(nranks, float(info.eps)) + _gamma(nranks, float(np.finfo(np.float64).eps))
        atol = g * nranks * input_scale if op == "sum" else nranks * float(info.tiny)
    wrong = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for r in range(result.shape[0]):
            m = mask[r]
            n = int(np.count_nonzero(m))
            if n == 0:
                continue
            whole = n == m.size
            res = result[r] if whole else result[r][m]
            exp = expected[r] if whole else expected[r][m]
            if floating:
                res, exp = res.astype(np.float64), exp.astype(np.float64, copy=False)
            ok = res == exp
            if not exact:
                diff = res - exp
                np.abs(diff, out=diff)
                bound = np.abs(exp)
                bound *= g
                bound += atol
                ok |= diff <= bound
            wrong += n - int(np.count_nonzero(ok))
    return wrong


def rounding_allowance(dtype: str, op: str, nranks: int) -> float:
    """``g`` of the compressed schedules' judge: an element of a sum may be off by ``g * (|exact| + nranks)``
    beyond its error bound (the reduction order's rounding; `count_wrong`); 0 for max and min."""
    if op != "sum":
        return 0.0
    info = ml_dtypes.finfo(_dtype(dtype))
    return _gamma(nranks, float(info.eps)) + _gamma(nranks, float(np.finfo(np.float64).eps))


def judge_error_bounds(
    schedule: Schedule,
    result: np.ndarray,
    inputs: np.ndarray,
    op: str,
    count: int,
    bounds: np.ndarray,
) -> tuple[int, float, float]:
    """(wrong elements, the largest absolute error, the largest bound) of a schedule with compression points.

    Over the elements that must match, against the exact float64 reduction
    (`expected`): ``bounds[r, c]`` is the error bound of slot (r, c), given by
    the caller (the verifier's); an element is wrong when its error exceeds its
    slot's bound plus the rounding allowance of `count_wrong`.
    """
    p, n = schedule.nranks, schedule.nchunks
    values, mask = expected(schedule, inputs, op)
    offsets = collectives.element_offsets(schedule.collective, p, n, count, schedule.chunk_weights)
    chunk_of = np.repeat(np.arange(n), np.diff(offsets))
    g = rounding_allowance(result.dtype.name, op, p)
    wrong, worst, bound_max = 0, 0.0, 0.0
    for r in range(p):
        m = np.asarray(mask[r])
        if not m.any():
            continue
        exp = values[r][m]
        err = np.abs(result[r][m].astype(np.float64) - exp)
        err[np.isnan(err)] = np.inf
        allowed = bounds[r][chunk_of[m]] + g * (np.abs(exp) + p)
        wrong += int(np.count_nonzero(~(err <= allowed)))
        worst = max(worst, float(err.max()))
        bound_max = max(bound_max, float(bounds[r][chunk_of[m]].max()))
    return wrong, worst, bound_max


# --------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunResult:
    algorithm: str
    nranks: int
    count: int
    nbytes: int  # count * itemsize: the size a user names
    dtype: str
    op: str
    iters: int
    time_us: float  # mean over iters of execute() alone
    wrong: int  # count_wrong of the last iteration
    max_abs_error: float | None = None  # compression points: the largest error against the float64 reduction
    error_bound: float | None = None  # compression points: the largest verified error bound of an output


def run(
    schedule: Schedule,
    count: int,
    dtype: str = "float32",
    op: str = "sum",
    seed: int = 0,
    iters: int = 1,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    error_bounds: np.ndarray | None = None,
    checked: bool = False,
    on_progress: ProgressFn | None = None,
    counts: Sequence[int] | None = None,
) -> RunResult:
    """Execute ``schedule`` on random inputs ``iters`` times and check the last result.

    ``counts``: counts given at run time (an allgatherv's receive counts, a reduce-scatter's with unequal
    receive counts, an alltoallv's p*p send counts, `collectives.counts_offsets`), which replace ``count``; the
    result's ``count`` is then the elements of the logical space (per rank, on average, for an alltoall).

    A schedule with compression points runs with its codecs (`collc.backends.local_codecs`)
    and is judged by ``error_bounds``, the verifier's bound per (rank, chunk) slot
    (`collc.verify.compression.analyse`, for inputs of magnitude at most 1).

    The buffers take `buffer_bytes` (at most ``max_bytes``), twice that with ``iters`` above 1
    (the last iteration runs on the inputs themselves, the others on copies).  ``checked``: the
    caller has run `check_matching` already.  ``on_progress(done, total)``, when given, counts
    the steps planned and then the steps run (over all iterations).
    """
    dt = _dtype(dtype)
    _ufunc(op)
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters}")
    _check_layout(schedule)
    offsets = None
    if counts is not None:
        offsets = counts_offsets(schedule, counts)
        _check_counts_budget(schedule, offsets, dt.itemsize, max_bytes)
        count = collectives.counts_count(schedule.collective, counts)
    else:
        _check_budget(schedule, count, dt.itemsize, max_bytes)
    if schedule.compresses():
        if error_bounds is None:
            raise ValueError(
                f"{schedule.algorithm} has compression points: its result is judged by the verifier's error bounds "
                "(collc.verify.compression.analyse); pass error_bounds"
            )
        _logical(schedule, count)
        return _run_compressed(schedule, count, dtype, op, seed, iters, error_bounds, max_bytes=max_bytes)
    nsteps = len(schedule.steps)
    units = nsteps + 1 + iters * nsteps  # the steps planned, the inputs and their reference, the steps run

    def report(done: int, _: int = 0) -> None:
        if on_progress is not None:
            on_progress(done, units)

    lowered = plan(
        schedule, count, checked=checked, on_progress=report if on_progress is not None else None, offsets=offsets
    )
    inputs = make_inputs(schedule, count, dtype, seed, op=op, max_bytes=max_bytes, offsets=offsets)
    values, mask = expected(schedule, inputs, op, offsets)  # before the last iteration overwrites the inputs
    units = nsteps + 1 + iters * len(lowered.moves)
    report(nsteps + 1)
    total = 0.0
    buffers = inputs
    for i in range(iters):
        last = i == iters - 1
        buffers = inputs if last else inputs.copy()
        ran = nsteps + 1 + i * len(lowered.moves)

        def executed(done: int, _: int, ran: int = ran) -> None:
            report(ran + done)

        start = time.perf_counter()
        execute(lowered, buffers, op, on_progress=executed if on_progress is not None else None)
        total += time.perf_counter() - start
        if not last:
            del buffers
    wrong = count_wrong(buffers, values, mask, dtype, op, schedule.nranks, reduces=schedule.collective.reduces)
    return RunResult(
        algorithm=schedule.algorithm,
        nranks=schedule.nranks,
        count=count,
        nbytes=count * dt.itemsize,
        dtype=dtype,
        op=op,
        iters=iters,
        time_us=total / iters * 1e6,
        wrong=wrong,
    )


def _run_compressed(
    schedule: Schedule,
    count: int,
    dtype: str,
    op: str,
    seed: int,
    iters: int,
    bounds: np.ndarray,
    *,
    max_bytes: int,
) -> RunResult:
    """`run` for a schedule with compression points: its codecs run (`local_codecs.execute`) and its result is
    judged by ``bounds``, the verifier's per-slot error bounds (`judge_error_bounds`)."""
    local_codecs.check_args(schedule, dtype, op)
    check_matching(schedule)
    if bounds.shape != (schedule.nranks, schedule.nchunks):
        raise ValueError(f"error bounds of shape {bounds.shape}, expected {(schedule.nranks, schedule.nchunks)}")
    inputs = make_inputs(schedule, count, dtype, seed, op=op, max_bytes=max_bytes)
    offsets = collectives.element_offsets(
        schedule.collective, schedule.nranks, schedule.nchunks, count, schedule.chunk_weights
    )
    total = 0.0
    buffers = inputs
    for _ in range(iters):
        buffers = inputs.copy()
        start = time.perf_counter()
        local_codecs.execute(schedule, buffers, op, offsets)
        total += time.perf_counter() - start
    wrong, worst, bound = judge_error_bounds(schedule, buffers, inputs, op, count, bounds)
    return RunResult(
        algorithm=schedule.algorithm,
        nranks=schedule.nranks,
        count=count,
        nbytes=count * DTYPES[dtype].itemsize,
        dtype=dtype,
        op=op,
        iters=iters,
        time_us=total / iters * 1e6,
        wrong=wrong,
        max_abs_error=worst,
        error_bound=bound,
    )
