"""How much memory `collc run` may take, checked before anything is elaborated or allocated.

``--max-memory`` is the budget.  On the local backend (every rank in this process) it covers
the buffers of every rank and the elaborated schedule together, 4 GiB unless given; on the
MPI backends (mpi, mpi-py, mpi-c) the ranks' buffers, an input and a result each, this
machine's memory unless given (no default when ``--mpiexec-args`` may place ranks on other
hosts; `collc.backends.mpi_launch` checks the same before it starts a job).

A size whose buffers do not fit is refused at once, naming the largest that does; so is a
schedule too large to elaborate on the local backend, whose operations are counted from a
sampled elaboration (`collc.elaborate.elaborate_sampled`) before the whole schedule is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click

from collc import api
from collc.backends import local, mpi_launch
from collc.cli.common import bad_value, fail_input, parse_size
from collc.diagnostics import CollError
from collc.elaborate import constants, elaborate_sampled
from collc.ir import ParamValue

OP_BYTES = 100
"""About what one elaborated operation takes in memory (the op, its share of the step and of its chunk set)."""

SAMPLE_LIMIT = 16
"""Step loops longer than this are sampled when the local backend counts a schedule's operations."""


@dataclass(frozen=True, slots=True)
class Budget:
    """The memory a run may take, in bytes, and how a message names it."""

    limit: int
    text: str
    given: bool  # by --max-memory


def gib(n: float) -> str:
    """Bytes as people read them: 512.0 MiB, 2.00 GiB, 8.00 TiB."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n / 2**20:.1f} MiB"


def budget_of(text: str | None, backend: str, elsewhere: bool = False) -> Budget | None:
    """``--max-memory`` for ``backend`` (None where there is none: the GPU backends, whose memory is their own, and
    MPI ranks that may run on other hosts, ``elsewhere``, unless given)."""
    if backend not in ("local", *api.MPI_BACKENDS):
        if text is not None:
            raise click.UsageError(f"--max-memory applies to the local and MPI backends, not {backend}")
        return None
    if text is not None:
        limit = parse_size(text, "--max-memory")
        if limit < 1:
            raise bad_value("--max-memory", text, "must be above zero")
        return Budget(limit, f"--max-memory {text}", True)
    if backend == "local":
        limit = local.DEFAULT_MAX_BYTES
        return Budget(limit, f"the local backend's budget of {gib(limit)} (--max-memory raises it)", False)
    limit = mpi_launch.host_memory()
    if elsewhere or limit <= 0:
        return None
    return Budget(limit, f"this machine's memory, {gib(limit)} (--max-memory sets another budget)", False)


def nranks_of(alg: api.Algorithm, values: dict[str, ParamValue]) -> int:
    """The rank count of an instance, from its parameters alone (nothing is elaborated)."""
    try:
        p = constants(alg.program, values)["p"]
    except CollError as err:
        fail_input(err, alg.sources)
    assert isinstance(p, int)
    return p


def buffers_of(alg: api.Algorithm, nranks: int, nbytes: int, dtype: str, backend: str, iters: int) -> int:
    """Bytes of the buffers a run of ``nbytes`` takes: on the local backend every rank's (twice, for the copy each
    iteration but the last runs on, with ``iters`` above 1); on MPI every rank's input and result."""
    itemsize = local.DTYPES[dtype].itemsize
    each = 2 if backend != "local" or iters > 1 else 1
    return each * local.buffer_bytes(alg.collective, nranks, nbytes // itemsize, itemsize)


def check_buffers(
    alg: api.Algorithm, nranks: int, byte_sizes: list[int], dtype: str, backend: str, iters: int, budget: Budget,
    option: str, given: str, beside: int = 0, beside_text: str = "",
) -> int:  # fmt: skip
    """The bytes of the buffers of the largest size; a usage error naming ``option`` (``--size`` or ``--sizes``,
    given as ``given``) when they do not fit ``budget`` (beside ``beside`` bytes of something else, so named)."""
    itemsize = local.DTYPES[dtype].itemsize
    nbytes = max(byte_sizes)
    need = buffers_of(alg, nranks, nbytes, dtype, backend, iters)
    if need + beside <= budget.limit:
        return need
    each = 2 if backend != "local" or iters > 1 else 1
    room = max(budget.limit - beside, 0)
    largest = local.largest_count(alg.collective, nranks, itemsize, room // each) * itemsize
    held = "an input and a result, each" if backend != "local" else "each, and a copy" if each == 2 else "each"
    raise bad_value(
        option,
        given,
        f"the buffers of {nranks} ranks ({held} over the collective's whole vector of {nbytes} bytes) take "
        f"{gib(need)}{beside_text}, above {budget.text}; the largest size that fits is {largest} bytes "
        f"({gib(largest)})",
    )


def elaborate_local(
    alg: api.Algorithm, values: dict[str, ParamValue], nranks: int, buffers: int, budget: Budget,
    retry: Callable[[int, str], int],
) -> api.Instance:  # fmt: skip
    """The instance for the local backend, once its operations are known to fit ``budget`` beside the buffers
    (``buffers`` bytes; ``retry(beside, text)`` checks them again beside the schedule's memory): counted from a
    sampled elaboration, which is the schedule itself when nothing was sampled."""
    try:
        sampled, weights = elaborate_sampled(alg.program, values, SAMPLE_LIMIT)
    except CollError as err:
        fail_input(err, alg.sources)
    ops = sum(len(step.ops) * weight for step, weight in zip(sampled.steps, weights, strict=True))
    need = ops * OP_BYTES
    if need >= budget.limit:
        fail_input(
            CollError(
                f"the local backend holds every operation of the schedule in this process: {alg.name} at p={nranks} "
                f"has {ops:,} operations, about {gib(need)}, above {budget.text}; run it on MPI (--backend mpi-c), "
                "or verify it with collc check, which does not build every operation"
            )
        )
    if buffers + need > budget.limit:
        retry(need, f" beside the {ops:,} operations of the schedule (about {gib(need)})")
    if all(weight == 1 for weight in weights):
        return api.Instance(alg, sampled)
    try:
        return alg.instantiate(**values)
    except CollError as err:
        fail_input(err, alg.sources)
