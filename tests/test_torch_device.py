"""CUDA tensors in the collc torch backend: the mpi-cuda libraries it builds, and the layouts it gives them.

Without a GPU, the libraries are built with nvcc as for a GPU (``-cudart shared``) and run under mpiexec
on the CPU stand-in for the CUDA runtime (tests/mpi_cuda_mock.py), on CPU tensors:
tests/torchrun/device_ops.py checks every collective, dtype and op of collc.torch.device against numpy.
With a GPU, the same collectives run through ``dist.init_process_group("collc")`` on CUDA tensors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")

from mpi_cuda_mock import build_mock, mock_settings  # noqa: E402

from collc.backends import mpi_cuda  # noqa: E402  (after the importorskip)
from collc.backends.mpitools import mpi_env, mpiexec  # noqa: E402
from collc.diagnostics import CollError  # noqa: E402
from collc.torch import config, device  # noqa: E402
from collc.torch.ops import ReduceKind  # noqa: E402
from collc.torch.schedules import ScheduleError, prepare  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve().parent / "torchrun" / "device_ops.py"


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        mpi_cuda.cuda.nvcc()
    except CollError as err:
        pytest.skip(f"nvcc is needed to build mpi-cuda libraries: {err}")
    return build_mock(tmp_path_factory.mktemp("mock"))


def _run(mock: Path, cache: Path, out: Path, nranks: int, aware: str, *args: str) -> list[dict]:
    out.mkdir()
    env = mpi_env(nranks)
    env.update(mock_settings(mock, aware, COLLC_NVCC_FLAGS="-cudart shared", OMP_NUM_THREADS="1", COLLC_TIMEOUT="60"))
    command = [str(mpiexec()), "-n", str(nranks), sys.executable, str(SCRIPT), str(cache), str(out), *args]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    output = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"{' '.join(command)} failed ({proc.returncode}):\n{output}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nranks)]


def test_cuda_tensors_run_on_mpi_cuda_libraries(mock: Path, tmp_path: Path) -> None:
    """All-reduce (every dtype and op) and all-gather (own, byte-moved and bfloat16 dtypes, in place too)."""
    ranks = _run(mock, tmp_path / "cache", tmp_path / "out", 4, "ipc", "quick")
    for rank in ranks:
        assert rank["failures"] == [] and rank["cases"] == 28, rank


@pytest.mark.slow
@pytest.mark.parametrize(("nranks", "aware"), [(3, "1"), (4, "0")])
def test_every_device_collective_on_mpi_cuda_libraries(mock: Path, tmp_path: Path, nranks: int, aware: str) -> None:
    """Every collective, a compressed all-gather within its bound, staged and CUDA-aware transports."""
    ranks = _run(mock, tmp_path / "cache", tmp_path / "out", nranks, aware)
    for rank in ranks:
        assert rank["failures"] == [] and rank["cases"] == 60, rank


def test_device_reduction_support_is_explicit() -> None:
    assert device.reduce_problem(torch.float32, ReduceKind("sum")) is None
    assert device.reduce_problem(torch.bfloat16, ReduceKind("avg")) is None
    assert "int8" in (device.reduce_problem(torch.int8, ReduceKind("sum")) or "")
    assert "AVG" in (device.reduce_problem(torch.int32, ReduceKind("avg")) or "")
    assert device.movement_dtype(torch.zeros(4, dtype=torch.int8)) is torch.int32
    assert device.movement_dtype(torch.zeros(3, dtype=torch.int8)) is None
    assert device.movement_dtype(torch.zeros(3, dtype=torch.bfloat16)) is torch.bfloat16


def test_bad_cuda_settings_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLC_CUDA_ARCH", "hopper")
    with pytest.raises(ValueError, match="COLLC_CUDA_ARCH='hopper'"):
        config.current()
    monkeypatch.setenv("COLLC_CUDA_ARCH", "sm_90")
    monkeypatch.setenv("COLLC_NVCC_FLAGS", "-Xcompiler 'unclosed")
    with pytest.raises(ValueError, match="COLLC_NVCC_FLAGS"):
        config.current()
    monkeypatch.setenv("COLLC_NVCC_FLAGS", "-cudart shared")
    settings = config.current()
    assert settings.cuda_arch == "sm_90" and settings.nvcc_flags == ("-cudart", "shared")


def test_a_codec_without_cuda_kernels_is_a_schedule_error(tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match=r"zfp.*no CUDA kernels"):
        prepare("allgather", "compressed_ring_allgather", 4, codecs={"q": "zfp(rate=8)"}, cache_dir=tmp_path,
                target="mpi-cuda")  # fmt: skip
    with pytest.raises(ValueError, match="target 'cuda'"):
        prepare("allgather", "ring_allgather", 4, cache_dir=tmp_path, target="cuda")


@pytest.mark.gpu
def test_cuda_tensors_through_the_process_group(tmp_path: Path) -> None:
    """On a GPU: the ops script of the CPU tests, on CUDA tensors, against gloo (which stages through the host)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device is visible to torch")
    env = mpi_env(2)
    env.update({"COLLC_TORCH_CACHE": str(tmp_path / "cache"), "COLLC_TEST_DEVICE": "cuda"})
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               str(SCRIPT.parent / "ops_vs_gloo.py"), str(tmp_path)]  # fmt: skip
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    for r in range(2):
        rank = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert rank["wrong"] == [] and rank["stats"].get("collc all_reduce", 0) > 0, rank
