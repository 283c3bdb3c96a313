"""Counts given at run time in the cuda and mpi-cuda libraries: ``_run_v`` (allgatherv, reduce-scatter with
unequal counts, alltoallv) on the schedule of the equal-block collective (runtime/collc_cuda_vcoll.cuh,
runtime/collc_mpicuda_vcoll.cuh).

Every result is judged here from the counts alone, with numpy: where each block lies (the counts end to end)
and what each rank must hold at the end (`assert_result`), and the chunks' cut (`cut`: each block into its k
chunks as equal as possible, the first ones one element longer), which the libraries' ``_layout_v`` must give.
The libraries run on the CPU stand-in for the CUDA runtime (tests/cuda/mock_cudart.c through
tests/cuda/mock_run.py for the cuda target; over MPI with tests/mpi_cuda_mock.py for mpi-cuda), with counts
that include zeros and blocks of unequal sizes, several dtypes, and for a reduce-scatter the ops sum and max.

The normal suite builds four cuda libraries (a ring allgather with three chunks per block, a ring
reduce-scatter with two, the pairwise alltoall, and a ring allgather with chunk weights, which must refuse
counts) and one mpi-cuda library with its driver (Bruck's allgather at 3 ranks: the three transports, and
ranks that pass different counts).  ``-m slow`` runs more algorithms at 2, 3, 4, 5 and 8 ranks, the
mpi-cuda alltoall and reduce-scatter, any-p libraries at several sizes, a compressed schedule's refusal, and
libraries whose cut was edited wrong, which these checks catch.  With a GPU (``-m gpu``), the cuda
libraries run on it through `cuda.run_library`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from mpi_cuda_mock import build_mock, mock_settings
from test_cuda import MOCK_RUN, cupy, nvcc_or_skip  # noqa: F401  (cupy: a fixture, CuPy on a GPU or a skip)

import collc
from collc.backends import cuda, local, mpi_cuda, mpi_cuda_anyp
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule

HERE = Path(__file__).resolve().parent
WEIGHTED = HERE / "cuda" / "weighted_ring_allgather.coll"
EXAMPLES = HERE.parent / "examples"

# cuda libraries: case id -> (example, parameters).  FAST ones are built by the normal suite.
CUDA_CASES: dict[str, tuple[str, dict[str, int]]] = {
    "ring_allgather_k3": ("ring_allgather", {"p": 4, "k": 3}),
    "ring_reduce_scatter_k2": ("ring_reduce_scatter", {"p": 3, "k": 2}),
    "pairwise_alltoall": ("pairwise_alltoall", {"p": 4}),
    "ring_allgather_p2": ("ring_allgather", {"p": 2}),
    "bruck_allgather": ("bruck_allgather", {"p": 5}),
    "recursive_doubling_allgather": ("recursive_doubling_allgather", {"p": 8}),
    "bine_allgather": ("bine_allgather", {"p": 4}),
    "ring_reduce_scatter_p5": ("ring_reduce_scatter", {"p": 5}),
    "pairwise_reduce_scatter": ("pairwise_reduce_scatter", {"p": 5}),
    "bine_reduce_scatter": ("bine_reduce_scatter", {"p": 8}),
    "pat_reduce_scatter": ("pat_reduce_scatter", {"p": 3}),
    "pairwise_alltoall_p2": ("pairwise_alltoall", {"p": 2}),
    "bruck_alltoall": ("bruck_alltoall", {"p": 5}),
    "bine_alltoall": ("bine_alltoall", {"p": 4}),
    "weighted_ring_allgather": (str(WEIGHTED), {"p": 3, "k": 2}),
}
FAST = ("ring_allgather_k3", "ring_reduce_scatter_k2", "pairwise_alltoall", "weighted_ring_allgather")

# (dtype, op) pairs: data movement takes any op; a reduce-scatter runs sum and max, exact and with rounding.
MOVE = [("float32", "sum"), ("int64", "sum"), ("bfloat16", "sum")]
REDUCE = [("int32", "sum"), ("float32", "max"), ("float64", "sum"), ("int64", "max")]


def _schedule(name: str, params: dict[str, int]) -> Schedule:
    inst = collc.load(name).instantiate(**params)
    assert inst.verify().ok
    return inst.schedule


def _nblocks(schedule: Schedule) -> int:
    p = schedule.nranks
    return p * p if schedule.collective is Collective.ALLTOALL else p


def count_sets(schedule: Schedule) -> list[list[int]]:
    """Counts for one call each: all zero; zeros between unequal blocks (the first of one element, fewer than a
    block's chunks where it has several); one block only; large and unequal, so that chunks are long and
    uneven."""
    n = _nblocks(schedule)
    rng = np.random.default_rng(n)
    mixed = [1] + [0 if b % 3 == 1 else int(c) for b, c in enumerate(rng.integers(1, 40, n - 1), 1)]
    large = [int(c) for c in rng.integers(500, 3000, n)]
    return [[0] * n, mixed, [0] * (n - 1) + [17], large]


def cut(counts: Sequence[int], k: int) -> list[int]:
    """The chunks' offsets from the rule alone: block b holds counts[b] elements, cut into k chunks as equal as
    possible, the first ones one element longer; the blocks end to end."""
    offsets = [0]
    for n in counts:
        for j in range(k):
            offsets.append(offsets[-1] + n // k + (1 if j < n % k else 0))
    return offsets


def assert_result(schedule: Schedule, counts: Sequence[int], inputs: np.ndarray, result: np.ndarray, op: str) -> None:
    """Every rank's result against numpy: an allgatherv leaves every rank's block in every buffer, an alltoallv
    block (s, d) of rank s in rank d's buffer, a reduce-scatter in rank r's block r the reduction of every rank's
    block r (the blocks: the counts end to end)."""
    p = schedule.nranks
    starts = np.concatenate([[0], np.cumsum(counts)])
    assert inputs.shape == result.shape == (p, starts[-1])

    def block(b: int) -> slice:
        return slice(int(starts[b]), int(starts[b + 1]))

    def same(got: np.ndarray, want: np.ndarray) -> bool:
        return bool(np.array_equal(got.view(np.uint8), want.view(np.uint8)))

    if schedule.collective is Collective.ALLGATHER:
        for r in range(p):
            for d in range(p):
                assert same(result[d, block(r)], inputs[r, block(r)]), (counts, r, d)
    elif schedule.collective is Collective.ALLTOALL:
        for s in range(p):
            for d in range(p):
                assert same(result[d, block(s * p + d)], inputs[s, block(s * p + d)]), (counts, s, d)
    else:
        ufunc = {"sum": np.add, "max": np.maximum}[op]
        for r in range(p):
            want, got = ufunc.reduce(inputs[:, block(r)], axis=0), result[r, block(r)]
            if np.issubdtype(inputs.dtype, np.integer) or op == "max":
                assert np.array_equal(got, want), (counts, r)
            else:  # the schedule sums in another order
                assert np.allclose(got, want, rtol=1e-12, atol=1e-12), (counts, r)


# --------------------------------------------------------------------------
# Builds and runs
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    name: str
    params: dict[str, int]
    schedule: Schedule
    lib: Path


class Libraries(dict[str, Built]):
    """cuda libraries built with -cudart shared (for the stand-in): the normal suite's in parallel, ahead of the
    tests; the others when a test first asks for one."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def build(self, case: str) -> Built:
        name, params = CUDA_CASES[case]
        schedule = _schedule(name, params)
        cuda.generate(schedule, self.root / case)
        return Built(name, params, schedule, cuda.build(self.root / case, schedule, flags=("-cudart", "shared")))

    def __missing__(self, case: str) -> Built:
        self[case] = self.build(case)
        return self[case]


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in libcudart.so.13 (with the host parts for MPI processes, which the cuda target leaves unused)."""
    return build_mock(tmp_path_factory.mktemp("mock"))


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Libraries:
    nvcc_or_skip()
    libs = Libraries(tmp_path_factory.mktemp("cuda_v"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        libs.update(zip(FAST, pool.map(libs.build, FAST), strict=True))
    return libs


def mock_run(mock: Path, b: Built, cases: list[dict]) -> list[dict]:
    """``cases`` on the stand-in, in a subprocess (tests/cuda/mock_run.py); one result per case."""
    args = [sys.executable, str(MOCK_RUN), str(mock / "libcudart.so.13"), str(b.lib), b.name, json.dumps(b.params)]
    proc = subprocess.run([*args, json.dumps(cases)], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _cases(schedule: Schedule, tmp: Path) -> list[dict]:
    """Every set of counts with every (dtype, op) pair, on one and on two devices, some with the caller's scratch
    space; each saves its inputs and results for `assert_result`."""
    pairs = REDUCE if schedule.collective.reduces else MOVE
    p, cases = schedule.nranks, []
    for i, (dtype, op) in enumerate(pairs):
        for j, counts in enumerate(count_sets(schedule)):
            devices = [r % 2 for r in range(p)] if (i + j) % 2 else None
            case = {"dtype": dtype, "op": op, "counts": counts, "seed": 10 * i + j, "devices": devices}
            cases.append(case | {"save": str(tmp / f"case{len(cases)}.npz"), "own_scratch": (i + j) % 3 == 0})
    return cases


def _check_cases(b: Built, mock: Path, tmp: Path) -> None:
    cases = _cases(b.schedule, tmp)
    results = mock_run(mock, b, cases)
    assert len(results) == len(cases)
    k = b.schedule.nchunks // _nblocks(b.schedule)
    for case, result in zip(cases, results, strict=True):
        assert "error" not in result, (case, result)
        assert result["wrong"] == 0 and result["layout_ok"], (case, result)
        saved = np.load(case["save"])
        assert saved["offsets"].tolist() == cut(case["counts"], k), case
        assert_result(b.schedule, case["counts"], saved["inputs"], saved["result"], case["op"])
        if case["devices"] is not None and min(case["counts"]) > 0:  # every block moves
            assert result["peer_copies"] > 0, (case, result)


# --------------------------------------------------------------------------
# The cuda target
# --------------------------------------------------------------------------


def test_cut_is_the_rule() -> None:
    """The test's own cut, on a few hand-made cases."""
    assert cut([5, 0, 2], 3) == [0, 2, 4, 5, 5, 5, 5, 6, 7, 7]
    assert cut([3, 1], 1) == [0, 3, 4]


def test_generated_entry_points(tmp_path: Path) -> None:
    """An allgather, a reduce-scatter and an alltoall get the _v entry points, other collectives not."""
    for name, has in [("ring_allgather", True), ("pairwise_alltoall", True), ("ring_reduce_scatter", True),
                      ("ring_allreduce", False)]:  # fmt: skip
        schedule = _schedule(name, {"p": 3})
        for folder, files in (("cuda", cuda.generate), ("mpi_cuda", mpi_cuda.generate)):
            out = tmp_path / folder / name
            text = "".join(f.read_text() for f in files(schedule, out) if f.suffix in (".cu", ".h"))
            assert ("_run_v(" in text) is has and ("_layout_v(" in text) is has, (name, folder)
            assert ('#include "collc_cuda_vcoll.cuh"' in text or "_mpicuda_vcoll.cuh" in text) is has


@pytest.mark.parametrize("case", [c if c in FAST else pytest.param(c, marks=pytest.mark.slow)
                                  for c in CUDA_CASES if c != "weighted_ring_allgather"])  # fmt: skip
def test_cuda_matches_numpy(libs: Libraries, mock: Path, tmp_path: Path, case: str) -> None:
    _check_cases(libs[case], mock, tmp_path)


def test_cuda_refuses_bad_counts(libs: Libraries, mock: Path) -> None:
    """A negative count, a NULL buffer with data, and counts of the wrong length are errors; all-zero counts with
    NULL buffers move nothing."""
    b = libs["ring_allgather_k3"]
    base = {"dtype": "float32", "op": "sum", "seed": 1, "devices": None}
    cases = [base | {"counts": [3, -1, 5, 1]}, base | {"counts": [0, 0, 0, 0], "null_buffers": True},
             base | {"counts": [0, 0, 1, 0], "null_buffers": True}]  # fmt: skip
    negative, empty, null = mock_run(mock, b, cases)
    assert "bad argument: counts[1] must be >= 0, got -1" in negative["error"]
    assert "error" not in empty, empty
    assert "bad argument: buffers[0] is NULL" in null["error"]
    lib = cuda.Library(b.lib, b.schedule)
    with pytest.raises(CollError, match="takes 4 counts, got 3"):
        lib.layout_v([1, 2, 3])
    assert lib.scratch_bytes_v([1, -2, 3, 4], "float32", 0) == -1


def test_cuda_refuses_chunk_weights(libs: Libraries, mock: Path) -> None:
    """A schedule whose chunks carry weights: its run_v and layout_v refuse counts, saying why."""
    b = libs["weighted_ring_allgather"]
    (result,) = mock_run(mock, b, [{"dtype": "float32", "op": "sum", "counts": [4, 0, 9], "seed": 1, "devices": None}])
    assert "bad argument: weighted_ring_allgather has chunk weights: its chunks are cut by them" in result["error"]
    with pytest.raises(CollError, match="has chunk weights"):
        cuda.Library(b.lib, b.schedule).layout_v([4, 0, 9])


@pytest.mark.slow
def test_cuda_refuses_compression_points(mock: Path, tmp_path: Path) -> None:
    """A schedule with compression points: run_v refuses counts, saying why."""
    name, params = "compressed_ring_allgather", {"p": 3}
    schedule = _schedule(name, params)
    cuda.generate(schedule, tmp_path)
    b = Built(name, params, schedule, cuda.build(tmp_path, schedule, flags=("-cudart", "shared")))
    (result,) = mock_run(mock, b, [{"dtype": "float32", "op": "sum", "counts": [4, 0, 9], "seed": 1, "devices": None}])
    assert "bad argument: compressed_ring_allgather has compression points" in result["error"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "params", "bug"), [
    ("ring_allgather", {"p": 4, "k": 3}, ("at += len;", "at += len - (len > 1);")),  # blocks that overlap
    ("ring_reduce_scatter", {"p": 3, "k": 2}, ("(j < extra ? j : extra)", "(j < extra ? j + 1 : extra)")),  # chunks
    ("bruck_alltoall", {"p": 3}, ("len = counts[b]", "len = counts[n - 1 - b]")),  # the blocks in reverse order
])  # fmt: skip
def test_a_wrong_cut_is_caught(
    mock: Path, tmp_path: Path, name: str, params: dict[str, int], bug: tuple[str, str]
) -> None:
    """A library whose cut was edited wrong (in its copy of collc_cuda_vcoll.cuh) fails these tests' checks."""
    schedule = _schedule(name, params)
    cuda.generate(schedule, tmp_path)
    header = tmp_path / "collc_cuda_vcoll.cuh"
    text = header.read_text()
    assert text.count(bug[0]) == 1
    header.write_text(text.replace(*bug))
    b = Built(name, params, schedule, cuda.build(tmp_path, schedule, flags=("-cudart", "shared")))
    with pytest.raises(AssertionError):
        _check_cases(b, mock, tmp_path)


# --------------------------------------------------------------------------
# The mpi-cuda target
# --------------------------------------------------------------------------

MPI_CASES: dict[str, tuple[str, dict[str, int]]] = {
    "bruck_allgather": ("bruck_allgather", {"p": 3}),
    "ring_reduce_scatter": ("ring_reduce_scatter", {"p": 4, "k": 2}),
    "bruck_alltoall": ("bruck_alltoall", {"p": 3}),
}


@dataclass(frozen=True)
class Driver:
    schedule: Schedule
    driver: Path


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Driver]:
    """mpi-cuda libraries and their drivers, built with -cudart shared when a test first asks for one."""
    nvcc_or_skip()
    root = tmp_path_factory.mktemp("mpicuda_v")

    class Drivers(dict[str, Driver]):
        def __missing__(self, case: str) -> Driver:
            schedule = _schedule(*MPI_CASES[case])
            mpi_cuda.generate(schedule, root / case)
            self[case] = Driver(schedule, mpi_cuda.build(root / case, schedule, flags=("-cudart", "shared"))[1])
            return self[case]

    return Drivers()


def mpi_run(
    mock: Path, schedule: Schedule, driver: Path, tmp: Path, aware: str, counts: list[list[int]], dtype: str, op: str,
    **kw: str,
) -> list[mpi_cuda.MpiCudaRow]:  # fmt: skip
    """One job of the driver with counts given at run time; every rank's result judged by `assert_result`."""
    env = mock_settings(mock, aware, COLLC_SEGMENT_BYTES="256")
    rows = mpi_cuda.run_built(schedule, driver, counts, dtype, op, 2, workdir=tmp, env=env, timeout=60, **kw)
    assert [r.wrong for r in rows] == [0] * len(counts), rows
    dt = local.DTYPES[dtype]
    p = schedule.nranks
    for i, vcounts in enumerate(counts):
        inputs = np.fromfile(tmp / "io" / f"input{i}.bin", dtype=dt).reshape(p, -1)
        result = np.stack([np.fromfile(tmp / "io" / f"output{i}_rank{r}.bin", dtype=dt) for r in range(p)])
        assert_result(schedule, vcounts, inputs, result, op)
    return rows


@pytest.mark.parametrize(("case", "aware", "dtype", "op"), [
    ("bruck_allgather", "ipc", "float32", "sum"),  # stream-ordered
    ("bruck_allgather", "1", "int64", "sum"),
    ("bruck_allgather", "0", "float16", "sum"),
    pytest.param("ring_reduce_scatter", "ipc-host", "float64", "sum", marks=pytest.mark.slow),
    pytest.param("ring_reduce_scatter", "1", "int32", "max", marks=pytest.mark.slow),
    pytest.param("bruck_alltoall", "ipc", "int32", "sum", marks=pytest.mark.slow),
    pytest.param("bruck_alltoall", "0", "float32", "sum", marks=pytest.mark.slow),
])  # fmt: skip
def test_mpi_cuda_matches_numpy(
    drivers: dict[str, Driver], mock: Path, tmp_path: Path, case: str, aware: str, dtype: str, op: str
) -> None:
    """The three transports (IPC stream-ordered and host-driven, CUDA-aware MPI, staged), segments of 256 bytes."""
    d = drivers[case]
    rows = mpi_run(mock, d.schedule, d.driver, tmp_path, aware, count_sets(d.schedule), dtype, op)
    assert ("stream-ordered" in rows[0].transport) is (aware == "ipc"), rows[0].transport


@pytest.mark.parametrize("aware", ["1", "ipc"])
def test_mpi_cuda_different_counts_fail_every_rank(
    drivers: dict[str, Driver], mock: Path, tmp_path: Path, aware: str
) -> None:
    """Rank 1 moves two elements from its last count to its first (the same total, cut otherwise): the ranks fail
    with the counts named, before anything moves (the first to fail ends the job: not every rank reports)."""
    d = drivers["bruck_allgather"]
    env = mock_settings(mock, aware)
    with pytest.raises(CollError) as err:
        mpi_cuda.run_built(d.schedule, d.driver, [[3, 0, 5]], "float32", "sum", 1, workdir=tmp_path, env=env,
                           timeout=60, fault="count:1:2")  # fmt: skip
    text = str(err.value)
    assert "the ranks called with different counts (counts[0]: 3 .. 5): every rank must pass the same counts" in text
    assert "where the schedule expects" not in text and "no progress" not in text, text  # not once data moved


def test_mpi_cuda_runner_refuses_mixed_counts(tmp_path: Path) -> None:
    schedule = _schedule(*MPI_CASES["bruck_allgather"])
    with pytest.raises(CollError, match="cannot be mixed"):
        mpi_cuda.run_built(schedule, tmp_path / "driver", [[1, 2, 3], 6], "float32", "sum", 1, workdir=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "params", "sizes"), [
    ("ring_allgather", {"k": 2}, [2, 3, 5]),
    ("ring_reduce_scatter", {}, [3, 4]),
    ("pairwise_alltoall", {}, [2, 3]),
])  # fmt: skip
def test_mpi_cuda_any_p(mock: Path, tmp_path: Path, name: str, params: dict[str, int], sizes: list[int]) -> None:
    """One any-p library at several communicator sizes, counts given at run time."""
    nvcc_or_skip()
    alg = collc.load(EXAMPLES / f"{name}.coll")
    alg.compile_any_p(tmp_path / "lib", target="mpi-cuda", params=params, verify_ranks=sizes, build=False)
    driver = mpi_cuda_anyp.build(tmp_path / "lib", alg.program, flags=("-cudart", "shared"))[1]
    for p in sizes:
        schedule = _schedule(name, {"p": p, **params})
        op = "max" if schedule.collective.reduces else "sum"
        mpi_run(mock, schedule, driver, tmp_path / f"p{p}", "1" if p % 2 else "ipc", count_sets(schedule), "int32", op)


# --------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_matches_numpy(cupy: ModuleType, tmp_path: Path) -> None:  # noqa: F811
    for case in ("ring_allgather_k3", "ring_reduce_scatter_k2", "pairwise_alltoall"):
        name, params = CUDA_CASES[case]
        schedule = _schedule(name, params)
        cuda.generate(schedule, tmp_path / case)
        lib = cuda.Library(cuda.build(tmp_path / case, schedule, arch=cuda.gpu_arch(0)), schedule)
        for dtype, op in REDUCE if schedule.collective.reduces else MOVE:
            rows = cuda.run_library(lib, count_sets(schedule), dtype, op, iters=2, seed=3)
            assert [r.wrong for r in rows] == [0] * len(rows), (case, dtype, op, rows)
        lib.release()
