"""The ``mpi-cuda`` target: generated sources, nvcc builds, runs over MPI on a CPU stand-in for CUDA, and on a GPU.

Golden files: ``tests/golden/mpi_cuda/<algorithm>_p4_mpicuda.cu`` and ``.h``
hold the generated sources of ring_allreduce and ring_allgather (with the
entry points for counts given at run time) at p=4.  After a
deliberate change to the templates, regenerate them with

    COLLC_REGEN_GOLDEN=1 pytest tests/test_mpi_cuda.py -k golden

and review the diff.

Without a GPU (CI), the library and its driver are built with nvcc (mpicxx,
MPICH's wrapper, as the host compiler) and ``-cudart shared``, then run under
``mpiexec`` against ``tests/cuda/mock_cudart.c`` plus
``tests/mpi_cuda/mock_host.c``, a CPU stand-in for the CUDA runtime whose
"device memory" is host memory: both transports run for real over MPI
(``COLLC_CUDA_AWARE=1`` hands the buffers to MPI directly, ``0`` stages them
through "pinned" buffers), and every rank's result is compared with numpy.
The normal suite builds two examples (one compressed); ``-m slow`` builds
and runs every example.  With a GPU (``-m gpu``), 2 to 8 ranks share it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from golden_files import assert_golden
from mpi_cuda_mock import build_mock, mock_settings
from test_cuda import ir_facts, source_tables

import collc
from collc.backends import cuda, mpi_cuda, mpitools
from collc.cli import main
from collc.diagnostics import CollError
from collc.ir import Collective, Schedule
from collc.verify.compression import analyse

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "mpi_cuda"
RUNTIME = HERE.parent / "runtime"
EXAMPLES = HERE.parent / "examples"

# The normal suite's builds: (case id, example, parameters, codec overrides).  The compressed one
# fuses decompress + reduce + compress on arrival and forwards the re-encoded payload.
FAST: list[tuple[str, str, dict[str, int], dict[str, str]]] = [
    ("ring_allreduce", "ring_allreduce", {"p": 4}, {}),
    ("compressed_ring_allreduce", "compressed_ring_allreduce", {"p": 4, "k": 2}, {}),
]

# Every example, at a small p (-m slow).
EVERY: list[tuple[str, str, dict[str, int], dict[str, str]]] = [
    ("ring_allreduce_k3", "ring_allreduce", {"p": 5, "k": 3}, {}),
    ("swing_bw", "swing_bw", {"p": 6}, {}),
    ("swing_lat", "swing_lat", {"p": 4}, {}),
    ("swing_bw_pow2", "swing_bw_pow2", {"p": 4}, {}),
    ("rabenseifner", "rabenseifner", {"p": 6}, {}),
    ("recursive_doubling", "recursive_doubling", {"p": 4}, {}),
    ("recursive_doubling_any", "recursive_doubling_any", {"p": 3}, {}),
    ("ring_allgather_k3", "ring_allgather", {"p": 4, "k": 3}, {}),
    ("bruck_allgather", "bruck_allgather", {"p": 5}, {}),
    ("ring_reduce_scatter", "ring_reduce_scatter", {"p": 4}, {}),
    ("binomial_broadcast", "binomial_broadcast", {"p": 5, "root": 1}, {}),
    ("binomial_reduce", "binomial_reduce", {"p": 4, "root": 2}, {}),
    ("pairwise_alltoall", "pairwise_alltoall", {"p": 4}, {}),
    ("bruck_alltoall", "bruck_alltoall", {"p": 5}, {}),
    ("scatter_allgather_broadcast", "scatter_allgather_broadcast", {"p": 6, "root": 4}, {}),
    ("double_binary_tree_allreduce", "double_binary_tree_allreduce", {"p": 7}, {}),
    ("pairwise_reduce_scatter", "pairwise_reduce_scatter", {"p": 5}, {}),
    ("direct_allgather", "direct_allgather", {"p": 3}, {}),
    ("recursive_doubling_allgather", "recursive_doubling_allgather", {"p": 4}, {}),
    ("c_ring_allreduce_fwq", "compressed_ring_allreduce", {"p": 5}, {"q": "fwq(bits=8, block=64)"}),
    ("c_ring_allgather", "compressed_ring_allgather", {"p": 4}, {}),
    ("c_ring_allgather_p2p_fp16", "compressed_ring_allgather_p2p", {"p": 3}, {"q": "fp16"}),
    ("c_ring_reduce_scatter_lossless", "compressed_ring_reduce_scatter", {"p": 3}, {"q": "lossless"}),
    ("c_swing_bw", "compressed_swing_bw", {"p": 6}, {}),
    ("c_homomorphic_allreduce", "homomorphic_allreduce", {"p": 4}, {}),
    ("c_direct_allreduce", "compressed_direct_allreduce", {"p": 4}, {}),
    ("pipelined_ring_allreduce", "pipelined_ring_allreduce", {"p": 4, "k": 2}, {}),
    ("striped_ring_allreduce", "striped_ring_allreduce", {"p": 4}, {}),
    ("weighted_striped_ring_allreduce", "weighted_striped_ring_allreduce", {"p": 4, "share": 70}, {}),
    ("hier_allreduce_swing", "hier_allreduce_swing", {"nodes": 2, "local": 2}, {}),
    ("hier_allreduce_ring", "hier_allreduce_ring", {"nodes": 3, "local": 2}, {}),
    ("hier_allgather", "hier_allgather", {"nodes": 2, "local": 3}, {}),
    ("node_aware_allgather", "node_aware_allgather", {"nodes": 3, "local": 2}, {}),
    ("node_aware_reduce_scatter", "node_aware_reduce_scatter", {"nodes": 2, "local": 3}, {}),
    ("c_direct_reduce_scatter", "compressed_direct_reduce_scatter", {"p": 5}, {}),
    ("binomial_gather", "binomial_gather", {"p": 5, "root": 3}, {}),
    ("binomial_scatter", "binomial_scatter", {"p": 6, "root": 2}, {}),
    ("hillis_steele_scan", "hillis_steele_scan", {"p": 5}, {}),
    ("hillis_steele_exscan", "hillis_steele_exscan", {"p": 6}, {}),
    ("dissemination_barrier", "dissemination_barrier", {"p": 5}, {}),
    ("trivance_allreduce", "trivance_allreduce", {"p": 9}, {}),
    ("trivance_bw_allreduce", "trivance_bw_allreduce", {"p": 9}, {}),
    ("pat_allgather", "pat_allgather", {"p": 5}, {}),
    ("pat_reduce_scatter", "pat_reduce_scatter", {"p": 6}, {}),
    ("ibing_allreduce", "ibing_allreduce", {"p": 5}, {}),
    ("bine_allreduce", "bine_allreduce", {"p": 8}, {}),
    ("bine_allgather", "bine_allgather", {"p": 4}, {}),
    ("bine_reduce_scatter", "bine_reduce_scatter", {"p": 8}, {}),
    ("bine_alltoall", "bine_alltoall", {"p": 4}, {}),
    ("bine_broadcast", "bine_broadcast", {"p": 6, "root": 5}, {}),
    ("bine_reduce", "bine_reduce", {"p": 7, "root": 2}, {}),
    ("bine_gather", "bine_gather", {"p": 6, "root": 4}, {}),
    ("bine_scatter", "bine_scatter", {"p": 6, "root": 1}, {}),
]


def _schedule(name: str, params: dict[str, int], codecs: dict[str, str] | None = None) -> Schedule:
    inst = collc.load(name).with_codecs(codecs or {}).instantiate(**params)
    assert inst.verify().ok
    return inst.schedule


def _counts(schedule: Schedule) -> list[int]:
    """Sizes that leave chunks empty, uneven and several segments long; whole blocks where MPI's API needs them."""
    p = schedule.nranks
    counts = [0, 1, 37, 1000, 4099]
    if schedule.collective in (Collective.ALLGATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL):
        counts = sorted({c - c % p for c in counts})
    return counts


def _nvcc() -> Path:
    try:
        return cuda.nvcc()
    except CollError as err:
        pytest.skip(str(err))


def _bounds(schedule: Schedule, dtype: str = "float32") -> np.ndarray | None:
    return analyse(schedule, input_bound=1.0, dtype=dtype).bound if schedule.compresses() else None


@dataclass(frozen=True)
class Built:
    schedule: Schedule
    out: Path
    driver: Path


def _build_all(cases: list[tuple[str, str, dict[str, int], dict[str, str]]], root: Path) -> dict[str, Built]:
    """Every case generated and built with nvcc -cudart shared (for the mock runtime), two at a time."""
    _nvcc()
    jobs = {}
    for case, name, params, codecs in cases:
        schedule = _schedule(name, params, codecs)
        mpi_cuda.generate(schedule, root / case)
        jobs[case] = schedule
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            case: pool.submit(mpi_cuda.build, root / case, s, flags=("-cudart", "shared")) for case, s in jobs.items()
        }
        return {case: Built(jobs[case], root / case, f.result()[1]) for case, f in futures.items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    start = time.monotonic()
    libs = _build_all(FAST, tmp_path_factory.mktemp("mpicuda"))
    print(f"nvcc: {len(libs)} libraries and drivers in {time.monotonic() - start:.0f} s")
    return libs


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding tests/cuda/mock_cudart.c + tests/mpi_cuda/mock_host.c as libcudart.so.13."""
    return build_mock(tmp_path_factory.mktemp("mock"))


def mock_run(mock: Path, b: Built, tmp: Path, aware: str, dtype: str = "float32", op: str = "sum", **kw) -> list:
    env = mock_settings(mock, aware, **kw.pop("env", {}))
    bounds = _bounds(b.schedule, dtype)
    return mpi_cuda.run_built(
        b.schedule, b.driver, kw.pop("counts", _counts(b.schedule)), dtype, op, 2, workdir=tmp, env=env,
        error_bounds=bounds, timeout=60, **kw,
    )  # fmt: skip


# --------------------------------------------------------------------------
# Generated text
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ring_allreduce", "ring_allgather"])
def test_golden(name: str, tmp_path: Path) -> None:
    schedule = _schedule(name, {"p": 4})
    mpi_cuda.generate(schedule, tmp_path)
    cu_name, h_name, _ = mpi_cuda.source_names(schedule)
    assert_golden(tmp_path / cu_name, GOLDEN / f"{name}_p4_mpicuda.cu")
    assert_golden(tmp_path / h_name, GOLDEN / f"{name}_p4_mpicuda.h")


def test_generated_files(tmp_path: Path) -> None:
    schedule = _schedule("binomial_reduce", {"p": 5, "root": 3})
    files = mpi_cuda.generate(schedule, tmp_path / "out")
    names = {f.name for f in files}
    generated = {"collc_binomial_reduce_mpicuda.cu", "collc_binomial_reduce_mpicuda.h"}
    assert names == {*generated, "collc_binomial_reduce_mpicuda_main.cu", "Makefile", *mpi_cuda.RUNTIME_HEADERS}
    text = (tmp_path / "out" / "collc_binomial_reduce_mpicuda.cu").read_text()
    assert "binomial_reduce.coll:" in text and str(EXAMPLES) not in text
    assert 'extern "C" int collc_binomial_reduce_mpicuda_run(void *buffer, int64_t count' in text
    assert "COLLC_CUDA_COLL_REDUCE," in text and "COLLC_CUDA_NO_CODECS" in text
    header = (tmp_path / "out" / "collc_binomial_reduce_mpicuda.h").read_text()
    assert "#define COLLC_BINOMIAL_REDUCE_MPICUDA_ROOT 3" in header
    makefile = (tmp_path / "out" / "Makefile").read_text()
    assert "-ccbin $(MPICXX)" in makefile and "-lcollc_binomial_reduce_mpicuda" in makefile


_TABLE = re.compile(r"static const struct collc_cuda_(?:run|msg|step|local|codec) \w+\[\] = \{\n.*?\n\};", re.S)


@pytest.mark.parametrize(
    ("name", "params", "codecs"),
    [
        ("swing_bw", {"p": 6}, {}),
        ("binomial_reduce", {"p": 5, "root": 3}, {}),
        ("compressed_swing_bw", {"p": 6}, {}),
        ("compressed_ring_allreduce", {"p": 5, "k": 2}, {}),
        ("compressed_ring_allgather_p2p", {"p": 4}, {"q": "lossless"}),
    ],
)
def test_tables_are_the_verified_schedule(name: str, params: dict, codecs: dict, tmp_path: Path) -> None:
    """The embedded tables move exactly the IR's ops, and are the cuda target's tables, byte for byte."""
    schedule = _schedule(name, params, codecs)
    mpi_cuda.generate(schedule, tmp_path / "mpi_cuda")
    cuda.generate(schedule, tmp_path / "cuda")
    text = (tmp_path / "mpi_cuda" / mpi_cuda.source_names(schedule)[0]).read_text()
    assert source_tables(text).facts == ir_facts(schedule)
    single = (tmp_path / "cuda" / cuda.source_names(schedule)[0]).read_text()
    assert _TABLE.findall(text) == _TABLE.findall(single) != []
    if schedule.compresses():
        assert "COLLC_CUDA_WIRE" in text or "COLLC_CUDA_PAYLOAD" in text


def test_fused_recompression_is_in_the_tables(tmp_path: Path) -> None:
    """A compressed ring's reduce-scatter reduces a compressed chunk and sends it on: fused on arrival."""
    schedule = _schedule("compressed_ring_allreduce", {"p": 4})
    mpi_cuda.generate(schedule, tmp_path)
    text = (tmp_path / mpi_cuda.source_names(schedule)[0]).read_text()
    assert "COLLC_CUDA_REENCODE" in text and "COLLC_CUDA_ENCODED" in text


def test_codec_without_kernels_is_refused(tmp_path: Path) -> None:
    schedule = collc.load("compressed_ring_allgather").with_codecs({"q": "zfp(rate=8)"}).instantiate(p=3).schedule
    with pytest.raises(CollError, match="has no CUDA kernels"):
        mpi_cuda.generate(schedule, tmp_path / "zfp")


# --------------------------------------------------------------------------
# Command line and API
# --------------------------------------------------------------------------


def test_nccl_transport_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CollError, match="no NCCL transport"):
        mpi_cuda.check_transport("nccl")
    inst = collc.load("ring_allreduce").instantiate(p=4)
    with pytest.raises(CollError, match="no NCCL transport"):
        inst.run_mpi_cuda([16], transport="nccl")
    for args in (["run", "ring_allreduce", "-p", "4", "--backend", "mpi-cuda", "--transport", "nccl"],
                 ["compile", "ring_allreduce", "-p", "4", "--target", "mpi-cuda", "--transport", "nccl",
                  "-o", str(tmp_path)]):  # fmt: skip
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 2 and "no NCCL transport" in out.output, out.output
    out = CliRunner().invoke(main, ["run", "ring_allreduce", "-p", "4", "--backend", "mpi", "--transport", "nccl"])
    assert out.exit_code == 2 and "applies to the mpi-cuda target only" in out.output, out.output


def test_compile_writes_the_sources(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["compile", "ring_allreduce", "-p", "4", "--target", "mpi-cuda", "-o",
                                    str(tmp_path), "--no-build"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert str(tmp_path / "collc_ring_allreduce_mpicuda.cu") in out.output.split()
    assert (tmp_path / "collc_ring_allreduce_mpicuda_main.cu").is_file()


def _gpu_visible() -> bool:
    try:
        mpi_cuda.visible_gpus()
    except CollError:
        return False
    return True


def test_no_gpu_is_a_clear_error() -> None:
    if _gpu_visible():
        pytest.skip("a GPU is visible")
    out = CliRunner().invoke(main, ["run", "ring_allreduce", "-p", "4", "--backend", "mpi-cuda"])
    assert out.exit_code == 2, out.output
    assert out.output.startswith("error: no CUDA device is visible"), out.output
    assert "Traceback" not in out.output


def test_driver_without_a_device_says_so(built: dict[str, Built], tmp_path: Path) -> None:
    """The driver itself, on the real CUDA runtime of a machine without a GPU: a clear error from every rank."""
    if _gpu_visible():
        pytest.skip("a GPU is visible")
    b = built["ring_allreduce"]
    with pytest.raises(CollError) as info:
        mpi_cuda.run_built(b.schedule, b.driver, [16], workdir=tmp_path, timeout=60, env={"LD_LIBRARY_PATH": ""})
    assert "no CUDA device is visible to this process (cudaGetDeviceCount:" in str(info.value)


def test_benchmark_without_a_gpu_says_so() -> None:
    if _gpu_visible():
        pytest.skip("a GPU is visible")
    script = HERE.parent / "benchmarks" / "mpi_cuda.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("no GPU: nothing measured (no CUDA device is visible"), proc.stdout


# --------------------------------------------------------------------------
# Builds, and runs over MPI on the CPU stand-in for the CUDA runtime
# --------------------------------------------------------------------------


def test_driver_help(built: dict[str, Built], mock: Path) -> None:
    b = built["ring_allreduce"]
    env = mpitools.mpi_env(1, {**os.environ, **mock_settings(mock, "0")})
    proc = subprocess.run([str(mpitools.mpiexec()), "-n", "1", str(b.driver), "--help"], capture_output=True,
                          text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0 and "runs ring_allreduce (p=4)" in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("case", "aware", "dtype", "op", "segment"),
    [
        ("ring_allreduce", "1", "float32", "sum", "4194304"),
        ("ring_allreduce", "0", "int64", "prod", "256"),
        ("ring_allreduce", "0", "bfloat16", "max", "4194304"),
        ("compressed_ring_allreduce", "0", "float32", "sum", "200"),
        ("compressed_ring_allreduce", "1", "float32", "min", "4194304"),
        ("ring_allreduce", "ipc", "float32", "sum", "4194304"),
        ("ring_allreduce", "ipc", "int64", "max", "256"),
        ("ring_allreduce", "ipc", "float16", "sum", "100"),
        ("ring_allreduce", "ipc-host", "float32", "sum", "4194304"),
        ("ring_allreduce", "ipc-host", "int64", "max", "256"),
        ("compressed_ring_allreduce", "ipc", "float32", "sum", "200"),
        ("compressed_ring_allreduce", "ipc", "float32", "max", "4194304"),
    ],
)
def test_runs_on_mock_runtime(
    built: dict[str, Built], mock: Path, tmp_path: Path, case: str, aware: str, dtype: str, op: str, segment: str
) -> None:
    """Every rank's result is numpy's (compressed: bit for bit the numpy executor's, within the verified bound),
    through MPI with device pointers or staged, in one segment or many."""
    b = built[case]
    rows = mock_run(mock, b, tmp_path, aware, dtype, op, env={"COLLC_SEGMENT_BYTES": segment})
    assert [r.count for r in rows] == _counts(b.schedule)
    for row in rows:
        assert row.wrong == 0, row
        if b.schedule.compresses() and row.count >= 4 * b.schedule.nchunks:
            assert 0 < row.max_abs_error <= row.error_bound, row
    how = {"1": "CUDA-aware MPI", "0": "staged through pinned host buffers"}.get(aware, "CUDA IPC with the 3 other")
    assert rows[-1].transport.startswith(how) and f"segments of {segment} bytes" in rows[-1].transport
    if aware.startswith("ipc"):  # stream-ordered unless turned off, or with compression points
        ordered = aware == "ipc" and not b.schedule.compresses()
        assert ("stream-ordered (enqueued on the caller's stream)" in rows[-1].transport) == ordered, rows[-1]


@pytest.mark.parametrize(("case", "issue"), [("ring_allreduce", "dataflow"), ("ring_allreduce", "steps"),
                                             ("compressed_ring_allreduce", "steps")])  # fmt: skip
def test_ipc_on_the_host_and_mpi_between_hosts(
    built: dict[str, Built], mock: Path, tmp_path: Path, case: str, issue: str
) -> None:
    """COLLC_IPC_GROUP=2 stands for two hosts of 2 ranks: IPC inside each pair, MPI (staged) between them, in one
    schedule; every rank's result right."""
    b = built[case]
    env = {"COLLC_TRANSPORT": "auto", "COLLC_IPC_GROUP": "2", "COLLC_ISSUE": issue, "COLLC_SEGMENT_BYTES": "256"}
    rows = mock_run(mock, b, tmp_path, "0", env=env)
    assert all(r.wrong == 0 for r in rows), rows
    assert rows[-1].transport.startswith(
        "CUDA IPC with 1 of the other ranks (this host), staged through pinned "
        "host buffers, double-buffered with the 2 others"
    ), rows[-1].transport


def test_without_stream_memory_operations_calls_are_host_driven(
    built: dict[str, Built], mock: Path, tmp_path: Path
) -> None:
    """A driver without cuStreamWaitValue32: IPC host-driven, and the transport line says why."""
    rows = mock_run(mock, built["ring_allreduce"], tmp_path, "ipc", env={"MOCK_CUDA_MEMOPS": "0"})
    assert all(r.wrong == 0 for r in rows), rows
    assert rows[-1].transport.endswith("host-driven: no stream memory operations in this driver"), rows[-1]


@pytest.mark.parametrize(
    ("aware", "fault", "said"),
    [
        ("0", "stop:1:1", "no progress for 2 s (COLLC_TIMEOUT)"),
        # stream-ordered: the count's agreement at the start of the call waits for it
        ("ipc", "stop:1:1", "comparing the count, dtype and op of the ranks: not every rank answered within 2 s"),
        # stream-ordered, rank 1 enqueued its part and stopped before its GPU work ran (on the stand-in, its host
        # runs it): each other rank's wait for the call names the ring predecessor it still receives from (below)
        ("ipc", "late:1:1", "(stream-ordered): no progress for 2 s (COLLC_TIMEOUT), still receiving from rank "),
    ],
)
def test_stopped_rank_ends_every_rank(
    built: dict[str, Built], mock: Path, tmp_path: Path, aware: str, fault: str, said: str
) -> None:
    """A rank that stops in the middle of the job: the others' watchdog ends the job with an error naming it."""
    b = built["ring_allreduce"]
    start = time.monotonic()
    with pytest.raises(CollError) as info:
        mock_run(mock, b, tmp_path, aware, counts=[1000], fault=fault, warmup=1, env={"COLLC_TIMEOUT": "2"})
    text = str(info.value)
    assert said in text and "a rank died, stopped" in text, text
    if fault.startswith("late"):  # which rank times out first is a race; each names its own ring predecessor
        waits = re.findall(r"rank (\d) \(stream-ordered\): no progress .*? still receiving from rank (\d) \(", text)
        assert waits and all(int(q) == (int(r) - 1) % 4 and r != "1" for r, q in waits), text
    assert time.monotonic() - start < 50


def test_dead_rank_ends_the_job(built: dict[str, Built], mock: Path, tmp_path: Path) -> None:
    b = built["ring_allreduce"]
    with pytest.raises(CollError, match="the MPI job failed"):
        mock_run(mock, b, tmp_path, "1", counts=[1000], fault="exit:2:0", env={"COLLC_TIMEOUT": "2"})


@pytest.mark.parametrize(
    ("extra", "aware", "ordered"), [(8, "0", "1"), (-4, "1", "1"), (8, "ipc", "0"), (-4, "ipc", "0"), (8, "ipc", "1")]
)
def test_mismatched_count_is_an_error(
    built: dict[str, Built], mock: Path, tmp_path: Path, extra: int, aware: str, ordered: str
) -> None:
    """One rank calls with another count: the size of a message gives it away (no timeout needed).

    The receiver of a longer message than expected (MPI_ERR_TRUNCATE) or of a
    shorter one says so, whichever fails first ends the job; over IPC host-driven, the sender's size word. A
    stream-ordered call compares the counts before it enqueues anything."""
    b = built["ring_allreduce"]
    with pytest.raises(CollError) as info:
        mock_run(mock, b, tmp_path, aware, counts=[1000], fault=f"count:1:{extra}",
                 env={"COLLC_TIMEOUT": "20", "COLLC_STREAM_ORDERED": ordered})  # fmt: skip
    text = str(info.value)
    assert "do all ranks call with the same count and dtype?" in text, text
    if aware == "ipc" and ordered == "1":
        assert "the ranks called with different counts (1000 .. 1008)" in text, text
    else:
        assert re.search(r"a message from rank \d (is longer than the|has) \d+ bytes", text), text


@pytest.mark.parametrize(
    ("aware", "env", "why"),
    [
        ("0", {"COLLC_SEGMENT_BYTES": "lots"}, "COLLC_SEGMENT_BYTES=lots: expected a number >= 64"),
        ("0", {"COLLC_SEGMENT_BYTES": "4294967296"}, "at most 1 GiB"),
        ("0", {"COLLC_CUDA_AWARE": "yes"}, "COLLC_CUDA_AWARE=yes: expected 0, 1 or auto"),
        ("0", {"COLLC_TIMEOUT": "-1"}, "COLLC_TIMEOUT=-1: expected a number"),
        ("ipc", {"COLLC_STREAM_ORDERED": "yes"}, "COLLC_STREAM_ORDERED=yes: expected 0 or 1"),
        ("ipc", {"COLLC_TRANSPORT": "nvlink"}, "COLLC_TRANSPORT=nvlink: expected auto, ipc or mpi"),
        ("ipc", {"COLLC_TRANSPORT": "ipc", "COLLC_IPC_GROUP": "2"},
         "COLLC_TRANSPORT=ipc, but only 2 of the 4 ranks share this host (COLLC_IPC_GROUP): use COLLC_TRANSPORT=auto"),
        ("ipc", {"COLLC_IPC_GROUP": "1.5"}, "COLLC_IPC_GROUP=1.5: expected a whole number >= 1"),
        ("ipc", {"COLLC_IPC_GROUP": "0"}, "COLLC_IPC_GROUP=0: expected a number >= 1"),
    ],
)  # fmt: skip
def test_bad_settings_are_errors(
    built: dict[str, Built], mock: Path, tmp_path: Path, aware: str, env: dict[str, str], why: str
) -> None:
    b = built["ring_allreduce"]
    with pytest.raises(CollError) as info:
        mpi_cuda.run_built(b.schedule, b.driver, [100], workdir=tmp_path, timeout=60,
                           env=mock_settings(mock, aware, **env))  # fmt: skip
    assert why in str(info.value)


@pytest.mark.slow
def test_every_example_builds_and_runs_on_mock(mock: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every example (compressed or not) compiles and links with nvcc against MPICH, and runs right over MPI and
    over CUDA IPC (stream-ordered where its steps allow, else host-driven)."""
    libs = _build_all(EVERY, tmp_path_factory.mktemp("mpicuda_all"))
    for i, (case, b) in enumerate(libs.items()):
        dtype, op = ("float32", "sum") if b.schedule.compresses() else [("float64", "min"), ("int32", "sum")][i % 2]
        for aware in (str(i % 2), "ipc"):
            rows = mock_run(mock, b, tmp_path_factory.mktemp(case), aware, dtype, op,
                            env={"COLLC_SEGMENT_BYTES": "512"})  # fmt: skip
            assert all(r.wrong == 0 for r in rows), (case, aware, rows)
            if aware == "ipc":
                assert re.search(r"; (stream-ordered|host-driven: \w)", rows[-1].transport), rows[-1].transport


def test_every_example_is_covered() -> None:
    folders = (EXAMPLES, EXAMPLES / "compression", EXAMPLES / "hierarchical")
    found = {p.stem for folder in folders for p in folder.glob("*.coll")}
    assert found == {name for _, name, _, _ in EVERY + FAST}


@pytest.mark.slow
def test_codec_refusal_is_reported(mock: Path, tmp_path: Path) -> None:
    """A value the codec cannot encode (|x| <= 1 is beyond ebq(eb=1e-5)'s grid) fails the run, naming it."""
    schedule = collc.load("compressed_ring_allgather").with_codecs({"q": "ebq(eb=1e-5)"}).instantiate(p=3).schedule
    mpi_cuda.generate(schedule, tmp_path / "build")
    _, driver = mpi_cuda.build(tmp_path / "build", schedule, flags=("-cudart", "shared"))
    b = Built(schedule, tmp_path / "build", driver)
    with pytest.raises(CollError, match=r"ebq\(eb=1e-5\) cannot encode the value"):
        mock_run(mock, b, tmp_path / "run", "0", counts=[300])


# --------------------------------------------------------------------------
# On a GPU: 2 to 8 ranks sharing it
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu() -> Iterator[str]:
    try:
        _, arch = mpi_cuda.visible_gpus()
    except CollError as err:
        pytest.skip(str(err))
    yield arch


GPU_CASES = [
    ("ring_allreduce", {"p": 2}, {}),
    ("ring_allreduce", {"p": 8}, {}),
    ("swing_bw", {"p": 8}, {}),
    ("pairwise_alltoall", {"p": 4}, {}),
    ("compressed_ring_allreduce", {"p": 4, "k": 2}, {}),
    ("compressed_swing_bw", {"p": 8}, {}),
    ("homomorphic_allreduce", {"p": 4}, {}),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "params", "codecs"), GPU_CASES)
def test_gpu_matches_numpy(gpu: str, tmp_path: Path, name: str, params: dict, codecs: dict) -> None:
    schedule = _schedule(name, params, codecs)
    if schedule.compresses():  # float32, with max where the codecs allow it (homomorphic payloads: sum alone)
        dtypes = [("float32", op) for op in ("sum", "max") if op in cuda.compressed_ops(schedule)]
    else:
        dtypes = [("float32", "sum"), ("bfloat16", "max")]
    out = tmp_path / "build"
    mpi_cuda.generate(schedule, out, arch=gpu)
    _, driver = mpi_cuda.build(out, schedule, arch=gpu)
    # CUDA IPC (stream-ordered where the schedule allows), IPC host-driven, and MPI staged through the host
    for transport in ({}, {"COLLC_STREAM_ORDERED": "0"}, {"COLLC_TRANSPORT": "mpi"}):
        for dtype, op in dtypes:
            rows = mpi_cuda.run_built(schedule, driver, [*_counts(schedule), 1 << 20], dtype, op, 3,
                                      workdir=tmp_path / dtype, error_bounds=_bounds(schedule, dtype),
                                      env={"COLLC_SEGMENT_BYTES": "65536", **transport})  # fmt: skip
            assert all(r.wrong == 0 for r in rows), (transport, rows)
            if not transport:
                assert rows[-1].transport.startswith("CUDA IPC"), rows[-1]


@pytest.mark.gpu
def test_gpu_faults(gpu: str, tmp_path: Path) -> None:
    schedule = _schedule("ring_allreduce", {"p": 4})
    out = tmp_path / "build"
    mpi_cuda.generate(schedule, out, arch=gpu)
    _, driver = mpi_cuda.build(out, schedule, arch=gpu)
    env = {"COLLC_TIMEOUT": "3"}
    # a stream-ordered call finds the stopped rank when the ranks compare their counts, a host-driven one mid-call
    with pytest.raises(CollError, match=r"no progress for 3 s|not every rank answered within 3 s"):
        mpi_cuda.run_built(schedule, driver, [4096], workdir=tmp_path / "a", env=env, timeout=60, fault="stop:1:1")
    with pytest.raises(CollError, match="no progress for 3 s"):
        mpi_cuda.run_built(schedule, driver, [4096], workdir=tmp_path / "c", env={**env, "COLLC_STREAM_ORDERED": "0"},
                           timeout=60, fault="stop:1:1")  # fmt: skip
    with pytest.raises(CollError, match="do all ranks call with the same count"):
        mpi_cuda.run_built(schedule, driver, [4096], workdir=tmp_path / "b", env=env, timeout=60, fault="count:1:8")
