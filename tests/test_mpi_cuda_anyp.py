"""One mpi-cuda library for any communicator size (`collc compile --target mpi-cuda -p any`).

* Generated sources: the program file (the .coll program in C, built with mpicc), the .cu (nvcc), the header
  without a fixed p; refusals as for the any-p mpi-c target.
* Built with nvcc (``-cudart shared``) and run over MPI on the CPU stand-in for the CUDA runtime
  (tests/mpi_cuda_mock.py): ONE library per example, launched at several rank counts, every rank's result
  against numpy; both transports (CUDA-aware and staged), dataflow and step-by-step issue, segments small
  enough that a message takes several.  The normal suite builds the ring allreduce (run at 3, 4, 6 and 8
  ranks) and tests/data/anyp/mixed_runs_allreduce.coll, whose messages carry a reduce run and a copy run of
  adjacent chunks that the sender merges into one, and whose chunks have unequal weights (4 and 6 ranks;
  5 ranks, which its constraint excludes, is an error naming the constraint on every rank; the ring's library
  serves 1..4, 6 and 8 only, so that 5 ranks, which nothing verified, is an error on every rank too).  ``-m slow``
  adds the allgather, reduce-scatter, both Swing schedules, recursive doubling (powers of two, and any p),
  the binomial broadcast from rank 2, the pipelined ring (lanes) and the weighted striped ring at 2..9
  ranks, and bit-for-bit equality with the library compiled for one p.
* With a GPU (``-m gpu``): the ring allreduce library at 2, 3, 4 and 8 ranks on the device.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from mpi_cuda_mock import build_mock, mock_settings
from test_cli import cli
from test_mpi_c_anyp import EXAMPLES
from test_mpi_cuda import gpu  # noqa: F401  (a fixture: the visible GPU's -arch, or a skip)

import collc
from collc.backends import cuda, mpi_cuda, mpi_cuda_anyp, mpitools
from collc.collectives import element_offsets
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule

HERE = Path(__file__).resolve().parent

# Each example, the compile-time parameters, the rank counts the slow suite runs it at.
SLOW_CASES: dict[str, tuple[dict[str, int], list[int]]] = {
    "ring_allgather": ({}, [2, 3, 5, 8]),
    "ring_reduce_scatter": ({"k": 2}, [3, 4, 7]),
    "swing_bw": ({}, [2, 3, 5, 6, 7, 8]),
    "swing_lat": ({}, [3, 5, 6, 8, 9]),
    "recursive_doubling": ({}, [2, 4, 8]),
    "recursive_doubling_any": ({}, [3, 5, 6]),
    "binomial_broadcast": ({"root": 2}, [3, 4, 7]),
    "pipelined_ring_allreduce": ({"k": 2}, [3, 5]),
    "weighted_striped_ring_allreduce": ({"share": 30}, [2, 5]),
    "pairwise_alltoall": ({}, [2, 3, 5]),
}


def _nvcc() -> Path:
    try:
        return cuda.nvcc()
    except CollError as err:
        pytest.skip(str(err))


MIXED = HERE / "data" / "anyp" / "mixed_runs_allreduce.coll"


def _path(name: str) -> Path:
    return MIXED if name == MIXED.stem else EXAMPLES / f"{name}.coll"


def _build(
    name: str, params: dict[str, int], out: Path, flags: tuple[str, ...] = ("-cudart", "shared"),
    ranks: Sequence[int] = range(1, 11),
) -> Path:  # fmt: skip
    """The example's any-p mpi-cuda library and driver, built into ``out`` (serving the sizes ``ranks``, each
    verified); the driver's path."""
    alg = collc.load(_path(name))
    files, coverage = alg.compile_any_p(out, target="mpi-cuda", params=params, verify_ranks=ranks, build=False)
    assert coverage.verified and files[0].name == f"collc_{name}_program.c"
    return mpi_cuda_anyp.build(out, alg.program, flags=flags)[1]


def _schedule(name: str, params: dict[str, int], p: int) -> Schedule:
    inst = collc.load(_path(name)).instantiate(p=p, **params)
    assert inst.verify().ok
    return inst.schedule


def _counts(schedule: Schedule) -> list[int]:
    """Empty chunks, uneven chunks, messages of several segments; whole blocks where the collective needs them."""
    p = schedule.nranks
    counts = [0, 1, 37, 1000, 4099]
    if schedule.collective in (Collective.ALLGATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL):
        counts = sorted({c - c % p for c in counts})
    return counts


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mock(tmp_path_factory.mktemp("mock"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two libraries of the normal suite, built two at a time."""
    _nvcc()
    root = tmp_path_factory.mktemp("anyp_cuda")
    ranks = {"ring_allreduce": (1, 2, 3, 4, 6, 8), MIXED.stem: range(1, 11)}  # the ring: not 5 (below)
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = {name: pool.submit(_build, name, {}, root / name, ranks=ranks[name]) for name in ranks}
        return {name: job.result() for name, job in jobs.items()}


def _run(
    mock: Path, driver: Path, schedule: Schedule, tmp: Path, aware: str, issue: str, segment: str, dtype: str, op: str
) -> list[mpi_cuda.MpiCudaRow]:
    env = mock_settings(mock, aware, COLLC_ISSUE=issue, COLLC_SEGMENT_BYTES=segment)
    return mpi_cuda.run_built(schedule, driver, _counts(schedule), dtype, op, 2, workdir=tmp, env=env, timeout=60)


# --------------------------------------------------------------------------
# Generated sources and refusals
# --------------------------------------------------------------------------


def test_generated_sources(tmp_path: Path) -> None:
    alg = collc.load(EXAMPLES / "ring_allreduce.coll")
    files, coverage = alg.compile_any_p(tmp_path, target="mpi-cuda", params={"k": 2}, verify_up_to=5, build=False)
    assert coverage.runs == ((1, 5),) and coverage.verified == (1, 2, 3, 4, 5)
    names = {f.name for f in files}
    assert {"collc_ring_allreduce_program.c", "collc_ring_allreduce_mpicuda.cu", "collc_ring_allreduce_mpicuda.h",
            "collc_ring_allreduce_mpicuda_main.cu", "Makefile", "collc_mpicuda_anyp.cuh", "collc_anyp.h",
            "collc_anyp_rows.h"} <= names  # fmt: skip
    program = (tmp_path / "collc_ring_allreduce_program.c").read_text()
    assert "static void phase_reduce_scatter(struct collc_av *X)" in program and "k=2, given at compile time" in program
    assert "int collc_ring_allreduce_anyp_rows(int p, int rank" in program
    header = (tmp_path / "collc_ring_allreduce_mpicuda.h").read_text()
    assert "int collc_ring_allreduce_mpicuda_nchunks(int p);" in header and "MPICUDA_NRANKS" not in header
    assert "p = 1..5, each verified at compile time" in (tmp_path / "collc_ring_allreduce_mpicuda.cu").read_text()


def test_what_any_p_does_not_support_is_refused(tmp_path: Path) -> None:
    alg = collc.load(EXAMPLES / "compression" / "compressed_ring_allreduce.coll")
    with pytest.raises(CollError, match=r"any-p compilation .* does not support compression points") as err:
        alg.compile_any_p(tmp_path, target="mpi-cuda", build=False)
    assert err.value.span is not None and err.value.span.line > 0
    with pytest.raises(CollError, match="mpi-c and mpi-cuda targets, not cuda"):
        collc.load(EXAMPLES / "ring_allreduce.coll").compile_any_p(tmp_path, target="cuda", build=False)


def test_a_folder_of_the_other_kind_is_refused(tmp_path: Path) -> None:
    """The any-p and the one-p libraries share file names: each build refuses the other's sources, clearly."""
    alg = collc.load(EXAMPLES / "ring_allreduce.coll")
    schedule = alg.instantiate(p=4).schedule
    mpi_cuda.generate(schedule, tmp_path / "one")
    with pytest.raises(CollError, match="holds no any-p mpi-cuda sources of ring_allreduce"):
        mpi_cuda_anyp.build(tmp_path / "one", alg.program)
    alg.compile_any_p(tmp_path / "any", target="mpi-cuda", verify_up_to=2, build=False)
    with pytest.raises(CollError, match=r"was generated for any p: build it with mpi_cuda_anyp\.build"):
        mpi_cuda.build(tmp_path / "any", schedule)
    mpi_cuda.generate(schedule, tmp_path / "any")  # one p's sources over the any-p ones
    with pytest.raises(CollError, match=r"was generated for one p: build it with collc\.backends\.mpi_cuda\.build"):
        mpi_cuda_anyp.build(tmp_path / "any", alg.program)


def test_cli_compiles_for_any_p(tmp_path: Path) -> None:
    res = cli("compile", EXAMPLES / "swing_bw.coll", "-p", "any", "--target", "mpi-cuda", "--no-build",
              "-o", tmp_path / "a")  # fmt: skip
    assert res.code == 0, res.text
    assert (
        "swing_bw: one library for any p: it serves p = 1..64, each verified at compile time (the constraints "
        "allow 2..64 of them); a communicator of another size fails, with the reason" in res.stderr
    )
    assert (tmp_path / "a" / "collc_swing_bw_mpicuda.cu").is_file()


def test_make_builds_the_generated_folder(tmp_path: Path) -> None:
    """The Makefile alone (mpicc for the program, nvcc for the library and the driver), as a user would run it."""
    _nvcc()
    collc.load(EXAMPLES / "swing_lat.coll").compile_any_p(tmp_path, target="mpi-cuda", verify_up_to=3, build=False)
    bindir = str(mpitools.mpiexec().parent)
    env = {**os.environ, "PATH": f"{bindir}:{cuda.nvcc().parent}:{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["make", "-j2", "EXTRA_NVCCFLAGS=-cudart shared"], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for built_file in ("libcollc_swing_lat_mpicuda.so", "collc_swing_lat_mpicuda_run"):
        assert (tmp_path / built_file).is_file()


# --------------------------------------------------------------------------
# One library, several rank counts, on the CPU stand-in for CUDA
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "aware", "issue", "segment", "dtype", "op"),
    [
        (3, "0", "dataflow", "256", "float32", "sum"),
        (4, "1", "steps", "4194304", "int64", "prod"),
        (6, "1", "dataflow", "512", "float64", "min"),
        (8, "0", "steps", "256", "bfloat16", "max"),
        (6, "ipc", "dataflow", "256", "float32", "sum"),
        (8, "ipc", "steps", "512", "int64", "max"),
        (4, "ipc-host", "dataflow", "256", "float64", "sum"),
        (3, "ipc-host", "steps", "4194304", "int64", "min"),
    ],
)
def test_one_ring_library_at_several_sizes(
    built: dict[str, Path], mock: Path, tmp_path: Path, p: int, aware: str, issue: str, segment: str, dtype: str,
    op: str,
) -> None:  # fmt: skip
    schedule = _schedule("ring_allreduce", {}, p)
    rows = _run(mock, built["ring_allreduce"], schedule, tmp_path, aware, issue, segment, dtype, op)
    assert [r.count for r in rows] == _counts(schedule)
    assert all(r.wrong == 0 for r in rows), rows
    mpi = {"1": "CUDA-aware MPI", "0": "staged through pinned host buffers"}
    how = mpi.get(aware, f"CUDA IPC with the {p - 1} other")
    assert rows[-1].transport.startswith(how)


@pytest.mark.parametrize(("p", "aware", "issue"), [(4, "0", "dataflow"), (6, "1", "steps")])
def test_mixed_runs_travel_as_one_piece(
    built: dict[str, Path], mock: Path, tmp_path: Path, p: int, aware: str, issue: str
) -> None:
    """The sender's one run of two chunks is the receiver's reduce run and copy run: the same piece on the wire."""
    schedule = _schedule(MIXED.stem, {}, p)
    rows = _run(mock, built[MIXED.stem], schedule, tmp_path, aware, issue, "256", "float32", "sum")
    assert all(r.wrong == 0 for r in rows), rows


def test_the_layout_follows_the_chunk_weights(built: dict[str, Path], mock: Path) -> None:
    """The library's chunk offsets at several p and counts are collc's (weights 1, 2, 3, 1, ...), through its
    ``_layout(p, count, offsets)``; and ``_nchunks`` and ``_scratch_bytes`` answer for any p they serve, and refuse
    a p the constraints exclude or compile time did not verify."""
    ctypes.CDLL(str(mock / "libcudart.so.13"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(built[MIXED.stem].parent / f"libcollc_{MIXED.stem}_mpicuda.so"))
    layout, nchunks = lib.collc_mixed_runs_allreduce_mpicuda_layout, lib.collc_mixed_runs_allreduce_mpicuda_nchunks
    layout.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
    scratch = lib.collc_mixed_runs_allreduce_mpicuda_scratch_bytes
    scratch.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    scratch.restype = ctypes.c_int64
    for p in (2, 4, 10):
        schedule = _schedule(MIXED.stem, {}, p)
        assert nchunks(p) == schedule.nchunks == 2 * p
        for count in (0, 5, 1000, 4099):
            offsets = (ctypes.c_int64 * (2 * p + 1))()
            assert layout(p, count, offsets) == 2 * p
            want = element_offsets(schedule.collective, p, schedule.nchunks, count, schedule.chunk_weights)
            assert list(offsets) == [int(x) for x in want], (p, count)
        assert scratch(4099, 0, p, p - 1) > 0
    assert nchunks(5) == -1 and layout(5, 100, (ctypes.c_int64 * 11)()) == -1
    last_error = lib.collc_mixed_runs_allreduce_mpicuda_last_error
    last_error.restype = ctypes.c_char_p
    assert nchunks(12) == -1 and scratch(4099, 0, 12, 0) == -1  # beyond the sizes verified (1..10)
    assert "p=12 is outside the sizes verified at compile time (1..10)" in last_error().decode()


def test_an_excluded_size_is_an_error_on_every_rank(built: dict[str, Path], mock: Path, tmp_path: Path) -> None:
    """p = 5 for a schedule that needs an even p: a clear error naming the constraint and where it is."""
    schedule = _schedule("ring_allreduce", {}, 5)  # inputs for 5 ranks
    with pytest.raises(CollError) as info:
        _run(mock, built[MIXED.stem], schedule, tmp_path, "0", "dataflow", "256", "float32", "sum")
    text = str(info.value)
    assert "mixed_runs_allreduce, p=5: " in text and "p=5 violates the constraint" in text, text
    assert "mixed_runs_allreduce.coll:7:32: p=5 violates the constraint p % 2 == 0" in text, text


def test_a_size_not_verified_is_an_error_on_every_rank(built: dict[str, Path], mock: Path, tmp_path: Path) -> None:
    """The ring's library serves the sizes verified at compile time (1..4, 6, 8): at 5 ranks, which the program
    allows but nothing verified, every rank's call fails with the reason instead of running unverified."""
    schedule = _schedule("ring_allreduce", {}, 5)
    with pytest.raises(CollError) as info:
        _run(mock, built["ring_allreduce"], schedule, tmp_path, "0", "dataflow", "256", "float32", "sum")
    text = str(info.value)
    assert (
        "ring_allreduce, p=5: p=5 is outside the sizes verified at compile time (1..4, 6, 8); recompile "
        "with --verify-ranks 1..5, or --verify-ranks all to prove every p" in text
    ), text


def test_driver_help_says_any_p(built: dict[str, Path], mock: Path) -> None:
    env = mpitools.mpi_env(1, {**os.environ, "LD_LIBRARY_PATH": str(mock), "MOCK_CUDA_DEVICES": "2"})
    proc = subprocess.run([str(mpitools.mpiexec()), "-n", "1", str(built["ring_allreduce"]), "--help"],
                          capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0 and "runs ring_allreduce (p=any)" in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("aware", ["0", "ipc"])
def test_several_communicators_in_one_job(built: dict[str, Path], mock: Path, tmp_path: Path, aware: str) -> None:
    """tests/mpi_cuda/comm_switch.cu: the world, a pair of ranks (the others skip it), the world again, a freed
    split and a reversed communicator of 3 that may get its handle, the world, the world after a release: every
    call right on every rank, staged through the host and over CUDA IPC (each communicator its own mailboxes)."""
    lib_dir = built["ring_allreduce"].parent
    exe = tmp_path / "comm_switch"
    command = [str(cuda.nvcc()), "-O3", "-ccbin", str(mpi_cuda.mpicxx()), "-cudart", "shared", "-I", str(lib_dir),
               "-o", str(exe), str(HERE / "mpi_cuda" / "comm_switch.cu"), "-L", str(lib_dir),
               "-lcollc_ring_allreduce_mpicuda", "-Xlinker", f"-rpath,{lib_dir}"]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {**os.environ, **mock_settings(mock, aware, COLLC_TIMEOUT="10")}
    proc = subprocess.run([str(mpitools.mpiexec()), "-n", "4", str(exe)], capture_output=True, text=True,
                          env=mpitools.mpi_env(4, env), timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    lines = sorted(line for line in proc.stdout.splitlines() if " rank " in line)
    expected = (
        [
            (label, r, n)
            for label, n in (("world", 4), ("world again", 4), ("split", 4), ("world last", 4), ("after release", 4))
            for r in range(n)
        ]
        + [("pair", r, 2) for r in range(2)]
        + [("reversed", r, 3) for r in range(3)]
    )
    assert lines == sorted(f"{label} rank {r} of {n}: 0 wrong" for label, r, n in expected), proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    how = "CUDA IPC with the 3 other ranks" if aware == "ipc" else "staged through pinned host buffers"
    assert f"transport: {how}" in proc.stdout, proc.stdout


def test_a_rank_that_never_calls_fails_the_agreement(built: dict[str, Path], mock: Path, tmp_path: Path) -> None:
    """Rank 1 stops before its first call: the others' agreement on the schedule times out with a clear error."""
    schedule = _schedule("ring_allreduce", {}, 3)
    env = mock_settings(mock, "0", COLLC_TIMEOUT="2")
    with pytest.raises(CollError) as info:
        mpi_cuda.run_built(schedule, built["ring_allreduce"], [1000], workdir=tmp_path, env=env, timeout=60,
                           fault="stop:1:0", warmup=0)  # fmt: skip
    text = str(info.value)
    assert "agreeing on the schedule of this communicator's size: not every rank answered within 2 s" in text, text


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_CASES))
def test_every_supported_example_at_several_sizes(mock: Path, tmp_path: Path, name: str) -> None:
    _nvcc()
    params, sizes = SLOW_CASES[name]
    driver = _build(name, params, tmp_path / "build")
    for i, p in enumerate(sizes):
        schedule = _schedule(name, params, p)
        dtype, op = [("float32", "sum"), ("int32", "max"), ("float64", "prod")][i % 3]
        rows = _run(mock, driver, schedule, tmp_path / f"p{p}", str(i % 2), ("dataflow", "steps")[i // 2 % 2],
                    "256", dtype, op)  # fmt: skip
        assert all(r.wrong == 0 for r in rows), (name, p, rows)


@pytest.mark.slow
def test_bit_for_bit_the_library_of_one_p(mock: Path, tmp_path: Path) -> None:
    """Float sums reduce in the same order as the library compiled for p = 6 (its tables come from Python)."""
    _nvcc()
    driver = _build("swing_bw", {}, tmp_path / "any")
    schedule = _schedule("swing_bw", {}, 6)
    mpi_cuda.generate(schedule, tmp_path / "fixed")
    _, fixed = mpi_cuda.build(tmp_path / "fixed", schedule, flags=("-cudart", "shared"))
    outputs = []
    for which, exe in (("any", driver), ("fixed", fixed)):
        _run(mock, exe, schedule, tmp_path / f"run_{which}", "0", "dataflow", "256", "float32", "sum")
        io = tmp_path / f"run_{which}" / "io"
        outputs.append([np.fromfile(io / f"output3_rank{r}.bin", dtype=np.float32) for r in range(6)])
    for a, b in zip(*outputs, strict=True):
        assert a.tobytes() == b.tobytes()


# --------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_one_library_at_several_sizes(gpu: str, tmp_path: Path) -> None:  # noqa: F811
    alg = collc.load(EXAMPLES / "ring_allreduce.coll")
    alg.compile_any_p(tmp_path / "build", target="mpi-cuda", verify_up_to=4, build=False)
    _, driver = mpi_cuda_anyp.build(tmp_path / "build", alg.program, arch=gpu)
    for p in (2, 3, 4, 8):
        schedule = _schedule("ring_allreduce", {}, p)
        for dtype, op in (("float32", "sum"), ("bfloat16", "max")):
            rows = mpi_cuda.run_built(schedule, driver, [*_counts(schedule), 1 << 20], dtype, op, 3,
                                      workdir=tmp_path / f"p{p}{dtype}", env={"COLLC_SEGMENT_BYTES": "65536"},
                                      timeout=120)  # fmt: skip
            assert all(r.wrong == 0 for r in rows), (p, rows)
