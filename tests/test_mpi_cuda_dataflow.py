"""Dataflow issue in the mpi-cuda target: the dependency tables it is given, and runs that would catch a wrong one.

* The flow tables of the generated .cu (read back out of the file, through the phases' message tables they
  point into) are held to the brute force of tests/test_mpi_dataflow.py: per rank, the messages from the IR,
  and the order the schedule's semantics requires (the transitive closure of the listed dependencies).
* Runs on the CPU stand-in for the CUDA runtime (tests/mpi_cuda_mock.py), both transports (CUDA-aware and
  staged through pinned buffers), segments small enough that a run takes several: every rank's result against
  numpy, and bit for bit against the same library run step by step (``COLLC_ISSUE=steps``).  The normal suite
  builds one library (the pipelined ring with lanes, p=4); ``-m slow`` builds the ring, Swing, the pipelined
  ring and a hierarchical allreduce at 3, 4 and 6 ranks, and a library with a dependency deleted, which
  computes wrong results by dataflow (right ones step by step) and fails the brute-force check.
* With a GPU (``-m gpu``): the same comparison on the device.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from mpi_cuda_mock import build_mock, mock_settings
from test_mpi_dataflow import Msg, check_listed

import collc
from collc.backends import cuda, dataflow, mpi_cuda, tables
from collc.diagnostics import CollError
from collc.ir import Schedule

HERE = Path(__file__).resolve().parent
COUNTS = [0, 1, 37, 1000, 4099]  # empty chunks, uneven chunks, runs of several segments


def _schedule(name: str, params: dict[str, int]) -> Schedule:
    inst = collc.load(name).instantiate(**params)
    assert inst.verify().ok
    return inst.schedule


# --------------------------------------------------------------------------
# The flow tables of a generated .cu, against the brute force
# --------------------------------------------------------------------------


def _array(text: str, name: str) -> str:
    m = re.search(rf"{re.escape(name)}\[[^\]]*\] = \{{(?:\n(.*?)\n| (.*?) )\}};", text, re.S)
    assert m, name
    return re.sub(r"/\*.*?\*/", "", m.group(1) or m.group(2))


def flow_messages(source: str, nranks: int) -> list[list[tuple[Msg, tuple[int, ...]]]]:
    """Per rank, its messages as the flow tables list them (through the phases' message and run tables), with
    their dependencies."""
    phases = [
        None if steps == "NULL" else steps
        for steps in re.findall(r'\{ "[^"]*", (\w+?)(?:_steps)?, \d+,', _array(source, "mpicuda_phase phases"))
    ]
    tables: list[tuple[list[tuple[int, ...]], list[tuple[int, int]]] | None] = []
    for ident in phases:
        if ident is None:
            tables.append(None)
            continue
        msgs = re.findall(r"\{ (\d+), (\d+), (\d+), COLLC_CUDA_\w+,\s+(\d+), (\d+) \}", _array(source, f"{ident}_msgs"))
        runs = re.findall(r"\{ (\d+), (\d+), COLLC_CUDA_", _array(source, f"{ident}_runs"))
        tables.append(([tuple(map(int, m)) for m in msgs], [(int(lo), int(hi)) for lo, hi in runs]))
    ops = [tuple(map(int, r)) for r in re.findall(r"\{ (-?\d+), (-?\d+), (\d+), (\d+) \}", _array(source, "flow_ops"))]
    first = [int(x) for x in re.findall(r"\d+", _array(source, "flow_first"))]
    deps = [int(x) for x in re.findall(r"-?\d+", _array(source, "flow_deps"))]
    assert ops[-1][:2] == (-1, -1) and deps[-1] == -1 and len(first) == nranks + 1 and first[-1] == len(ops) - 1
    per_rank: list[list[tuple[Msg, tuple[int, ...]]]] = []
    for rank in range(nranks):
        listed = []
        for phase, row, first_dep, ndeps in ops[first[rank] : first[rank + 1]]:
            table = tables[phase]
            assert table is not None
            step, src, dst, first_run, nruns = table[0][row]
            assert rank in (src, dst) and src != dst
            bits = 0
            for lo, hi in table[1][first_run : first_run + nruns]:
                bits |= ((1 << (hi - lo)) - 1) << lo
            msg = (step, src == rank, dst if src == rank else src, bits)
            listed.append((msg, tuple(deps[first_dep : first_dep + ndeps])))
        per_rank.append(listed)
    return per_rank


def check_flow_tables(schedule: Schedule, source: str) -> list[str]:
    """What is wrong with the flow tables of ``source`` against the brute force (empty: nothing)."""
    return check_listed(schedule, flow_messages(source, schedule.nranks))


TABLE_CASES = [
    ("ring_allreduce", {"p": 4}),
    ("pipelined_ring_allreduce", {"p": 6, "k": 2}),
    ("swing_bw", {"p": 6}),
    ("rabenseifner", {"p": 8}),
    ("bruck_allgather", {"p": 5}),
    ("binomial_reduce", {"p": 5, "root": 1}),
    ("pairwise_alltoall", {"p": 4}),
    ("hier_allreduce_ring", {"nodes": 3, "local": 2}),
    ("hier_allreduce_swing", {"nodes": 2, "local": 2}),
]


@pytest.mark.parametrize(("name", "params"), TABLE_CASES)
def test_flow_tables_match_brute_force(name: str, params: dict[str, int], tmp_path: Path) -> None:
    schedule = _schedule(name, params)
    mpi_cuda.generate(schedule, tmp_path)
    assert check_flow_tables(schedule, (tmp_path / mpi_cuda.source_names(schedule)[0]).read_text()) == []


def test_places_leave_room_for_the_busiest_step() -> None:
    """A rank's places (flow_links): at least twice its busiest step's messages (one share kept for the earliest
    unfinished step), at most the window's worth plus one."""
    for name, params in (("swing_bw", {"p": 8}), ("pipelined_ring_allreduce", {"p": 4}), ("bruck_allgather", {"p": 5})):
        t = tables.from_schedule(_schedule(name, params))
        for steps in t.ranks:
            counts = [len(rs.sends) + len(rs.recvs) for rs in steps]
            assert 2 * max(counts) <= dataflow.flow_links(steps) <= (dataflow.SCRATCH_WINDOW + 1) * max(counts)
            assert dataflow.flow_links(steps, window=1) == 2 * max(counts)


def test_compressed_schedules_run_step_by_step(tmp_path: Path) -> None:
    schedule = collc.load("compressed_ring_allreduce").instantiate(p=4).schedule
    mpi_cuda.generate(schedule, tmp_path)
    text = (tmp_path / mpi_cuda.source_names(schedule)[0]).read_text()
    assert "flow_ops" not in text and "NULL, /* compression points: step by step only */" in text


def _without_send_dependencies(source: str) -> str:
    """``source`` with the dependencies of every send of the first phase deleted: a send no longer waits for the
    receive that reduced into its chunk."""
    return re.sub(r"\{ 0, (\d+), (\d+), [1-9]\d* \}, /\* (#\d+ step \d+: to)", r"{ 0, \1, \2, 0 }, /* \3", source)


# --------------------------------------------------------------------------
# Runs on the CPU stand-in for CUDA
# --------------------------------------------------------------------------


def _nvcc() -> None:
    try:
        cuda.nvcc()
    except CollError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mock(tmp_path_factory.mktemp("mock"))


def _build(name: str, params: dict[str, int], out: Path, edit=None) -> tuple[Schedule, Path]:
    _nvcc()
    schedule = _schedule(name, params)
    mpi_cuda.generate(schedule, out)
    if edit is not None:
        source = out / mpi_cuda.source_names(schedule)[0]
        source.write_text(edit(source.read_text()))
    _, driver = mpi_cuda.build(out, schedule, flags=("-cudart", "shared"))
    return schedule, driver


def _run(
    mock: Path, schedule: Schedule, driver: Path, workdir: Path, issue: str, aware: str, dtype: str = "float32"
) -> tuple[list, list[bytes]]:
    """The rows of a run and every rank's result, as bytes (per count)."""
    env = mock_settings(mock, aware, COLLC_ISSUE=issue, COLLC_SEGMENT_BYTES="256")
    rows = mpi_cuda.run_built(schedule, driver, COUNTS, dtype, "sum", 1, workdir=workdir, env=env, timeout=60, seed=7)
    io = workdir / "io"
    results = [(io / f"output{i}_rank{r}.bin").read_bytes() for i in range(len(COUNTS)) for r in range(schedule.nranks)]
    return rows, results


def _same_as_steps(mock: Path, schedule: Schedule, driver: Path, tmp: Path, aware: str, dtype: str) -> None:
    flow_rows, flow = _run(mock, schedule, driver, tmp / f"flow{aware}", "dataflow", aware, dtype)
    step_rows, steps = _run(mock, schedule, driver, tmp / f"steps{aware}", "steps", aware, dtype)
    assert [r.wrong for r in flow_rows] == [0] * len(COUNTS), flow_rows
    assert [r.wrong for r in step_rows] == [0] * len(COUNTS), step_rows
    assert flow == steps
    assert any(np.frombuffer(b, dtype=np.uint8).any() for b in flow)  # something was written


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Schedule, Path]:
    """The pipelined ring with lanes at p=4, built once for the normal suite."""
    return _build("pipelined_ring_allreduce", {"p": 4, "k": 2}, tmp_path_factory.mktemp("lanes"))


@pytest.mark.parametrize(("aware", "dtype"), [("1", "float32"), ("0", "float64"), ("ipc-host", "float32"),
                                            ("ipc", "float64")])  # fmt: skip
def test_pipelined_ring_by_dataflow_matches_numpy_and_steps(
    mock: Path, lanes: tuple[Schedule, Path], tmp_path: Path, aware: str, dtype: str
) -> None:
    schedule, driver = lanes
    _same_as_steps(mock, schedule, driver, tmp_path, aware, dtype)


def test_an_unknown_issue_order_is_an_error(mock: Path, lanes: tuple[Schedule, Path], tmp_path: Path) -> None:
    schedule, driver = lanes
    env = mock_settings(mock, "0", COLLC_ISSUE="eager")
    with pytest.raises(CollError, match="COLLC_ISSUE=eager: expected dataflow or steps"):
        mpi_cuda.run_built(schedule, driver, [100], workdir=tmp_path, env=env, timeout=60)


SLOW_RUNS = [
    ("ring_allreduce", {"p": 3}),
    ("ring_allreduce", {"p": 6}),
    ("swing_bw", {"p": 4}),
    ("swing_bw", {"p": 6}),
    ("pipelined_ring_allreduce", {"p": 3}),
    ("pipelined_ring_allreduce", {"p": 6, "k": 3}),
    ("hier_allreduce_ring", {"nodes": 3, "local": 2}),
    ("hier_allreduce_swing", {"nodes": 2, "local": 2}),
]


@pytest.mark.slow
def test_every_run_by_dataflow_matches_numpy_and_steps(mock: Path, tmp_path: Path) -> None:
    for k, (name, params) in enumerate(SLOW_RUNS):
        case = tmp_path / f"{name}_{k}"
        schedule, driver = _build(name, params, case / "build")
        for aware, dtype in (("1", "float32"), ("0", "int32")):
            _same_as_steps(mock, schedule, driver, case, aware, dtype)


@pytest.mark.slow
def test_a_missing_dependency_gives_wrong_data_and_is_caught(mock: Path, tmp_path: Path) -> None:
    schedule, driver = _build("ring_allreduce", {"p": 4}, tmp_path / "build", _without_send_dependencies)
    source = (tmp_path / "build" / mpi_cuda.source_names(schedule)[0]).read_text()
    problems = check_flow_tables(schedule, source)
    assert problems and all("missing" in p for p in problems), problems
    for aware in ("1", "0"):
        rows, _ = _run(mock, schedule, driver, tmp_path / f"flow{aware}", "dataflow", aware)
        assert any(r.wrong > 0 for r in rows), rows
        rows, _ = _run(mock, schedule, driver, tmp_path / f"steps{aware}", "steps", aware)
        assert all(r.wrong == 0 for r in rows), rows


# --------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "params"), [("pipelined_ring_allreduce", {"p": 4}), ("swing_bw", {"p": 8})])
def test_gpu_dataflow_matches_numpy_and_steps(tmp_path: Path, name: str, params: dict[str, int]) -> None:
    try:
        _, arch = mpi_cuda.visible_gpus()
    except CollError as err:
        pytest.skip(str(err))
    schedule = _schedule(name, params)
    mpi_cuda.generate(schedule, tmp_path / "build", arch=arch)
    _, driver = mpi_cuda.build(tmp_path / "build", schedule, arch=arch)
    counts = [*COUNTS, 1 << 20]
    results = {}
    for issue in ("dataflow", "steps"):
        workdir = tmp_path / issue
        env = {"COLLC_ISSUE": issue, "COLLC_SEGMENT_BYTES": "65536"}
        rows = mpi_cuda.run_built(schedule, driver, counts, "float32", "sum", 3, workdir=workdir, env=env, timeout=120)
        assert all(r.wrong == 0 for r in rows), rows
        io = workdir / "io"
        results[issue] = [(io / f"output{i}_rank{r}.bin").read_bytes() for i in range(len(counts))
                          for r in range(schedule.nranks)]  # fmt: skip
    assert results["dataflow"] == results["steps"]
