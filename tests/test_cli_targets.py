"""`collc compile --target cuda` and `collc run --backend cuda` reach the CUDA generator from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from collc.cli import main


def _gpu_available() -> bool:
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:  # a missing driver raises CUDA errors of several kinds
        return False


def test_compile_cuda_writes_the_sources(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["compile", "ring_allreduce", "-p", "4", "--target", "cuda", "-o", str(tmp_path),
                                    "--no-build"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert str(tmp_path / "collc_ring_allreduce.cu") in out.output.split()
    text = (tmp_path / "collc_ring_allreduce.cu").read_text()
    assert "ring.coll:" in text  # the .coll lines travel into the generated code


def test_compile_cuda_refuses_a_schedule_with_compression(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parent.parent / "examples" / "compression"
    src = examples / "compressed_ring_allgather.coll"
    out = CliRunner().invoke(main, ["compile", str(src), "-p", "4", "--target", "cuda", "-o", str(tmp_path / "x"),
                                    "--no-build"])  # fmt: skip
    assert out.exit_code == 2
    assert "compression" in out.output


@pytest.mark.skipif(_gpu_available(), reason="a GPU is present: the run itself is tested in test_cuda.py")
def test_run_cuda_without_a_gpu_is_a_clear_error() -> None:
    out = CliRunner().invoke(main, ["run", "swing_bw", "-p", "4", "--backend", "cuda", "--size", "4K"])
    assert out.exit_code == 2
    assert "needs a GPU" in out.output
