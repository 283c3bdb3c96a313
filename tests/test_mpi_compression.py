"""Compressed schedules on real MPI processes: the mpi-py and mpi-c targets.

Every example of ``examples/compression/`` runs under ``mpiexec`` at 4 ranks and at
another rank count, and every codec the language offers runs through the ring
allreduce (the homomorphic example with ``hq``).  Each run is held to three
references computed here, independently of the executor under test:

* the exact float64 reduction of every rank's input: every element within its
  slot's verified error bound (the worker's judge), the largest error reported;
* the numpy executor (`local_codecs.execute`) on the same inputs: every output
  element bit for bit, and the bytes each rank sends (compressed payloads at their
  size, raw chunks whole), which must equal the executor's count of what it put on
  the wire;
* for the static-size codecs and the collective-level allgather, a closed form of
  those bytes.

Ranks outnumber the cores here: every job gets `mpitools.mpi_env` and a timeout.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import collc
from collc import collectives
from collc.backends import local_codecs, mpi_c, mpi_launch, mpi_worker, mpitools
from collc.cli import main
from collc.codecs import parse_codec
from collc.collectives import EVERY
from collc.diagnostics import CollError
from collc.ir import Schedule
from collc.verify.compression import analyse

EXAMPLES = (
    "compressed_ring_allgather",
    "compressed_ring_allgather_p2p",
    "compressed_ring_reduce_scatter",
    "compressed_ring_allreduce",
    "homomorphic_allreduce",
    "compressed_swing_bw",
    "compressed_direct_allreduce",
    "compressed_direct_reduce_scatter",
)
BACKENDS = ("mpi-py", "mpi-c")
# mpi-c in the normal suite and mpi-py with -m slow, for the tests that compare the two targets on one thing
BACKEND_PARAMS = [pytest.param(b, marks=() if b == "mpi-c" else pytest.mark.slow) for b in BACKENDS]
OTHER_P = {"compressed_swing_bw": 6}  # the second rank count of each example (3 where the example allows it)
CODECS = (
    "ebq(eb=0.01)",
    "fwq(bits=4, block=64)",
    "fwq(bits=8, block=32)",
    "hq(eb=1e-3)",
    "fp16",
    "bf16",
    "lossless",
    "zfp(rate=8)",
)
TIMEOUT = 120


def _mpi() -> None:
    try:
        mpitools.mpiexec()
        mpitools.mpicc()
    except CollError as err:
        pytest.skip(str(err))


def schedule_of(name: str, p: int, codec: str | None = None) -> Schedule:
    alg = collc.load(name)
    if codec is not None:
        alg = alg.with_codecs({"q": codec})
    inst = alg.instantiate(p=p)
    assert inst.verify().ok
    return inst.schedule


def worker_spec(schedule: Schedule, dtype: str, seed: int) -> dict[str, object]:
    return {
        "collective": schedule.collective.value,
        "nranks": schedule.nranks,
        "nchunks": schedule.nchunks,
        "root": schedule.root,
        "dtype": dtype,
        "op": "sum",
        "seed": seed,
    }


def reference(schedule: Schedule, count: int, dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The worker's inputs of every rank, the numpy executor's results on them, and the bytes it sends."""
    spec = worker_spec(schedule, dtype, seed)
    origin, _ = mpi_worker._layout(spec, count)
    inputs = np.stack([mpi_worker.input_row(spec, count, r, origin) for r in range(schedule.nranks)])
    result = inputs.copy()
    wire = np.zeros(schedule.nranks, dtype=np.int64)
    offsets = collectives.element_offsets(schedule.collective, schedule.nranks, schedule.nchunks, count)
    local_codecs.execute(schedule, result, "sum", offsets, wire)
    return inputs, result, int(wire.sum())


def run(
    schedule: Schedule,
    backend: str,
    counts: list[int],
    tmp_path: Path,
    *,
    dtype: str = "float32",
    seed: int = 0,
    bounds: np.ndarray | None = None,
) -> list[mpi_launch.MpiRow]:
    _mpi()
    if bounds is None:
        bounds = analyse(schedule, input_bound=1.0, dtype=dtype).bound
    dump = tmp_path / "dump"
    dump.mkdir(exist_ok=True)
    worst = tuple(analyse(schedule, input_bound=1.0, dtype=dt).stats.error_bound for dt in ("float32", "float64"))
    return mpi_launch.run(
        schedule, counts, kinds=(backend,), dtype=dtype, seed=seed, timeout=TIMEOUT, workdir=tmp_path / "job",
        error_bounds=bounds, dump_dir=dump, c_error_bound=worst,  # type: ignore[arg-type]
    )  # fmt: skip


def assert_matches_reference(
    schedule: Schedule, row: mpi_launch.MpiRow, tmp_path: Path, dtype: str = "float32", seed: int = 0
) -> None:
    """Within the bounds, bit for bit the numpy executor's result, and its wire bytes."""
    assert row.wrong == 0, row
    assert row.max_abs_error is not None and row.error_bound is not None
    assert row.max_abs_error <= row.error_bound * (1 + 1e-6) + schedule.nranks * 2e-7  # plus the sum's rounding
    _, want, wire = reference(schedule, row.count, dtype, seed)
    assert row.wire_bytes == wire, (row.wire_bytes, wire)
    spec = worker_spec(schedule, dtype, seed)
    _, dest = mpi_worker._layout(spec, row.count)
    for r in range(schedule.nranks):
        got = np.load(tmp_path / "dump" / f"rank{r}_count{row.count}.npy")
        mask = (dest == EVERY) | (dest == r)
        assert np.array_equal(got[mask].view(np.uint8), want[r][mask].view(np.uint8)), f"rank {r} differs"


def counts_for(schedule: Schedule) -> list[int]:
    p = schedule.nranks
    if schedule.collective.value in ("allgather", "reduce_scatter"):
        return [p * 5, p * 1001]
    return [2, p * 5 + 3, p * 1001 + 1]


# --------------------------------------------------------------------------
# Every example, both targets, two rank counts
# --------------------------------------------------------------------------


FAST_AT_4 = {("mpi-py", "compressed_ring_allreduce"), ("mpi-py", "homomorphic_allreduce")}  # the rest of mpi-py: slow
FAST_OTHER = {("mpi-c", "compressed_swing_bw"), ("mpi-c", "homomorphic_allreduce")}  # the rest are slow on mpi-c
# at 4 ranks: every mpi-c example but those FAST_OTHER runs at their other rank count (those with -m slow)


@pytest.mark.parametrize(
    ("backend", "name"),
    [pytest.param(b, n, marks=() if (b == "mpi-c" and (b, n) not in FAST_OTHER) or (b, n) in FAST_AT_4
                  else pytest.mark.slow)
     for b in BACKENDS for n in EXAMPLES],
)  # fmt: skip
def test_every_example_at_4_ranks(backend: str, name: str, tmp_path: Path) -> None:
    schedule = schedule_of(name, 4)
    rows = run(schedule, backend, counts_for(schedule), tmp_path)
    bound = collc.load(name).instantiate(p=4).verify().compression
    assert bound is not None
    for row in rows:
        assert_matches_reference(schedule, row, tmp_path)
        assert row.error_bound == pytest.approx(bound.error_bound)


@pytest.mark.parametrize(
    ("backend", "name"),
    [pytest.param(b, n, marks=() if b == "mpi-py" or (b, n) in FAST_OTHER else pytest.mark.slow)
     for b in BACKENDS for n in EXAMPLES],
)  # fmt: skip
def test_every_example_at_another_rank_count(backend: str, name: str, tmp_path: Path) -> None:
    schedule = schedule_of(name, OTHER_P.get(name, 3))
    for row in run(schedule, backend, counts_for(schedule), tmp_path, seed=7):
        assert_matches_reference(schedule, row, tmp_path, seed=7)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_float64_data(backend: str, tmp_path: Path) -> None:
    schedule = schedule_of("compressed_ring_allreduce", 4, "lossless")
    for row in run(schedule, backend, [4 * 300 + 1], tmp_path, dtype="float64", seed=3):
        assert_matches_reference(schedule, row, tmp_path, dtype="float64", seed=3)
    schedule = schedule_of("compressed_swing_bw", 4)
    for row in run(schedule, backend, [4 * 300 + 1], tmp_path, dtype="float64", seed=3):
        assert_matches_reference(schedule, row, tmp_path, dtype="float64", seed=3)


# --------------------------------------------------------------------------
# Every codec
# --------------------------------------------------------------------------


FAST_CODECS = {("mpi-c", "fwq(bits=4, block=64)"), ("mpi-c", "bf16"), ("mpi-c", "lossless"), ("mpi-py", "zfp(rate=8)")}


def _codec_cases() -> list[object]:
    """Every codec on both targets (zfp on mpi-py only); a few in the quick runs, the rest marked slow: the C codecs'
    bytes are checked against numpy on their own in tests/test_c_codecs.py."""
    cases = []
    for backend in BACKENDS:
        for spec in CODECS:
            if backend == "mpi-c" and spec.startswith("zfp"):
                continue  # refused by mpi-c: test_mpi_c_refuses_zfp
            marks = () if (backend, spec) in FAST_CODECS else pytest.mark.slow
            cases.append(pytest.param(backend, "compressed_ring_allreduce", spec, marks=marks))
        cases.append(pytest.param(backend, "homomorphic_allreduce", "hq(eb=0.25)", marks=pytest.mark.slow))
    return cases


@pytest.mark.parametrize(("backend", "name", "spec"), _codec_cases())
def test_every_codec(backend: str, name: str, spec: str, tmp_path: Path) -> None:
    schedule = schedule_of(name, 3, spec)
    for row in run(schedule, backend, [3 * 700 + 2], tmp_path, seed=11):
        assert_matches_reference(schedule, row, tmp_path, seed=11)
        if parse_codec(spec).error_model == "fixed_rate":
            assert row.error_bound == float("inf")


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_wire_bytes_in_closed_form(backend: str, tmp_path: Path) -> None:
    """Static-size codecs: every message's size follows from the chunk sizes alone; the collective-level
    allgather with ebq sends each rank's compressed block p - 1 times (idempotence: the p2p ring too)."""
    p, count = 4, 4 * 999 + 2
    schedule = schedule_of("compressed_ring_reduce_scatter", p, "fp16")
    (row,) = run(schedule, backend, [count - 2], tmp_path)
    assert row.wire_bytes == p * (p - 1) * 2 * ((count - 2) // p)  # every hop one fp16 block
    schedule = schedule_of("compressed_ring_allreduce", p, "fwq(bits=8, block=32)")
    (row,) = run(schedule, backend, [count], tmp_path)
    fwq = parse_codec("fwq(bits=8, block=32)")
    sizes = np.diff(collectives.element_offsets(schedule.collective, p, p, count))
    # each block: p - 1 hops of the reduce-scatter, p - 1 of the allgather
    assert row.wire_bytes == sum(2 * (p - 1) * fwq.max_compressed_bytes(int(n)) for n in sizes)
    ebq = parse_codec("ebq(eb=1e-3)")
    for name in ("compressed_ring_allgather", "compressed_ring_allgather_p2p"):
        schedule = schedule_of(name, p)
        (row,) = run(schedule, backend, [p * 1000], tmp_path, seed=5)
        inputs, _, _ = reference(schedule, p * 1000, "float32", 5)
        blocks = [ebq.compress(inputs[r, r * 1000 : (r + 1) * 1000]).size for r in range(p)]
        assert row.wire_bytes == (p - 1) * sum(blocks)
        assert row.wire_bytes < (p - 1) * p * 4000 * 0.6  # compressed: well under the raw bytes


# --------------------------------------------------------------------------
# Errors over the bound are failures
# --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_error_over_the_bound_is_counted_wrong(backend: str, tmp_path: Path) -> None:
    schedule = schedule_of("compressed_ring_reduce_scatter", 4)
    bounds = analyse(schedule, input_bound=1.0, dtype="float32").bound
    (row,) = run(schedule, backend, [4 * 500], tmp_path, bounds=bounds / 100)
    assert row.wrong > 0 and row.max_abs_error is not None and row.max_abs_error > row.error_bound


def test_cli_run_reports_error_and_bound_on_both_targets() -> None:
    _mpi()
    for backend in BACKENDS:
        result = CliRunner().invoke(
            main, ["run", "compressed_ring_allreduce", "-p", "4", "--size", "16K", "--backend", backend, "--json"]
        )
        assert result.exit_code == 0, result.output
        (row,) = json.loads(result.output)["rows"]
        assert row["wrong"] == 0 and 0 < row["max_abs_error"] <= row["error_bound"] == pytest.approx(4e-3)
        assert 0 < row["wire_bytes"] < 4 * 2 * 3 * 1024 * 4  # below the raw ring's bytes
        text = CliRunner().invoke(main, ["run", "compressed_ring_allgather", "-p", "3", "--size", "3K",
                                         "--backend", backend])  # fmt: skip
        assert text.exit_code == 0 and "all results within the verified error bound" in text.output
        assert "max|err|" in text.output


def test_compressed_runs_need_floats_and_sum_max_min() -> None:
    inst = collc.load("compressed_ring_allreduce").instantiate(p=4)
    with pytest.raises(CollError, match="float32 or float64"):
        inst.run_mpi([16], "int32", "sum", backend="mpi-c")
    with pytest.raises(CollError, match="not prod"):
        inst.run_mpi([16], "float32", "prod", backend="mpi-py")
    with pytest.raises(CollError, match="op sum"):
        collc.load("homomorphic_allreduce").instantiate(p=4).run_mpi([16], "float32", "max")


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_max_and_min(backend: str) -> None:
    _mpi()
    inst = collc.load("compressed_ring_allreduce").instantiate(p=3)
    for op in ("max", "min"):
        (row,) = inst.run_mpi([3 * 100], "float32", op, backend=backend, timeout=TIMEOUT)
        assert row.wrong == 0 and row.max_abs_error is not None and row.max_abs_error <= 3e-3


def test_mpi_c_refuses_zfp(tmp_path: Path) -> None:
    schedule = schedule_of("compressed_ring_allgather_p2p", 3, "zfp(rate=8)")
    with pytest.raises(CollError, match=r"the codec zfp\(rate=8\) has no C implementation") as err:
        mpi_c.generate(schedule, tmp_path / "zfp")
    assert "mpi-py" in err.value.message
    span = err.value.span
    assert span is not None and Path(span.file).name == "compressed_ring_allgather_p2p.coll" and span.line == 15
    assert not (tmp_path / "zfp").exists()
    result = CliRunner().invoke(main, ["run", "compressed_ring_allgather_p2p", "-p", "3", "--backend", "mpi-c",
                                       "--codec", "q=zfp(rate=8)"])  # fmt: skip
    assert result.exit_code == 2
    assert "compressed_ring_allgather_p2p.coll:15:5: error: the codec zfp(rate=8) has no C implementation" in (
        result.output
    )
    assert "compress q" in result.output  # the source line, with a caret


# --------------------------------------------------------------------------
# The generated tables are the verified schedule
# --------------------------------------------------------------------------


def _ir_facts(schedule: Schedule) -> set[tuple[object, ...]]:
    """(step, kind, rank, peer, chunk, action or codec) of every op: sends with their wire codec, receives with
    their action, local ops with theirs."""
    facts: set[tuple[object, ...]] = set()
    for step in schedule.steps:
        for op in step.ops:
            for c in op.chunks.ids().tolist():
                if op.kind.local:
                    facts.add((step.index, op.kind.value, op.rank, op.rank, c, op.codec))
                elif op.kind.value == "send":
                    facts.add((step.index, "send", op.rank, op.peer, c, op.codec))
                else:
                    facts.add((step.index, "recv", op.peer, op.rank, c, op.action.value))  # type: ignore[union-attr]
    return facts


@pytest.mark.parametrize("name", EXAMPLES)
def test_mpi_py_tables_are_the_verified_schedule(name: str, tmp_path: Path) -> None:
    import ast

    inst = collc.load(name).instantiate(p=5 if name != "compressed_swing_bw" else 6)
    (path,) = inst.compile("mpi-py", tmp_path)
    tree = ast.parse(path.read_text())
    values = {}
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        values.update((t.id, node.value) for t in targets if isinstance(t, ast.Name))  # type: ignore[attr-defined]
    steps = ast.literal_eval(values["STEPS"])
    specs = ast.literal_eval(values["CODECS"].args[0].generators[0].iter)  # type: ignore[attr-defined]
    facts: set[tuple[object, ...]] = set()
    payloads: set[tuple[int, int, int, int]] = set()
    for rank, rows in enumerate(steps):
        for step, sends, recvs, local in rows:
            for lo, hi, codec, decompress in local:
                kind, spec = ("decompress", None) if decompress else ("compress", specs[codec])
                facts.update((step, kind, rank, rank, c, spec) for c in range(lo, hi))
            for peer, runs in sends:
                for lo, hi, _red, codec, payload in runs:
                    for c in range(lo, hi):
                        facts.add((step, "send", rank, peer, c, specs[codec] if codec >= 0 and not payload else None))
                        if payload:
                            payloads.add((step, rank, peer, c))
            for peer, runs, _direct in recvs:
                for lo, hi, red, _codec, _payload in runs:
                    facts.update((step, "recv", peer, rank, c, "reduce" if red else "copy") for c in range(lo, hi))
    assert facts == _ir_facts(inst.schedule)
    # compressed on the wire only (no slot forwarded as a payload): per hop, or once straight to the owner
    wire_only = {"compressed_ring_allgather_p2p", "compressed_ring_reduce_scatter", "compressed_direct_reduce_scatter"}
    assert bool(payloads) == (name not in wire_only)
