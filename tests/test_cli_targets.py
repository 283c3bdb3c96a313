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


def test_compile_with_compression(tmp_path: Path) -> None:
    """Every target compiles a compressed schedule; a codec without kernels is refused (zfp: cuda and mpi-c)."""
    examples = Path(__file__).resolve().parent.parent / "examples" / "compression"
    src = str(examples / "compressed_ring_allgather.coll")
    base = ["compile", src, "-p", "4", "--no-build"]
    out = CliRunner().invoke(main, [*base, "--target", "cuda", "-o", str(tmp_path / "cuda")])
    assert out.exit_code == 0, out.output
    text = (tmp_path / "cuda" / "collc_compressed_ring_allgather.cu").read_text()
    assert "COLLC_CUDA_PAYLOAD" in text and '"ebq(eb=0.001)"' in text
    for target in ("mpi-py", "mpi-c"):
        out = CliRunner().invoke(main, [*base, "--target", target, "-o", str(tmp_path / target)])
        assert out.exit_code == 0, out.output
    assert "COLLC_PAYLOAD" in (tmp_path / "mpi-c" / "collc_compressed_ring_allgather.c").read_text()
    out = CliRunner().invoke(main, [*base, "--target", "cuda", "--codec", "q=zfp(rate=8)", "-o", str(tmp_path / "z")])
    assert out.exit_code == 2 and "has no CUDA kernels" in out.output, out.output
    out = CliRunner().invoke(main, [*base, "--target", "mpi-c", "--codec", "q=zfp(rate=8)", "-o", str(tmp_path / "zc")])
    assert out.exit_code == 2 and "has no C implementation" in out.output, out.output


@pytest.mark.skipif(_gpu_available(), reason="a GPU is present: the run itself is tested in test_cuda.py")
def test_run_cuda_without_a_gpu_is_a_clear_error() -> None:
    out = CliRunner().invoke(main, ["run", "swing_bw", "-p", "4", "--backend", "cuda", "--size", "4K"])
    assert out.exit_code == 2
    assert "needs a GPU" in out.output


def test_compile_exact_hands_order_sensitive_sums_to_mpi(tmp_path: Path) -> None:
    """``--exact`` (mpi-c): the library is built to send floating-point MPI_SUM and MPI_PROD to the MPI library;
    other targets refuse the option."""
    runner = CliRunner()
    ring = str(Path(__file__).resolve().parent.parent / "examples" / "ring_allreduce.coll")
    plain = runner.invoke(
        main, ["compile", ring, "-p", "4", "--target", "mpi-c", "--no-build", "-o", str(tmp_path / "a")]
    )
    exact = runner.invoke(
        main, ["compile", ring, "-p", "4", "--target", "mpi-c", "--no-build", "--exact", "-o", str(tmp_path / "b")]
    )
    assert plain.exit_code == 0 and exact.exit_code == 0, (plain.output, exact.output)
    marker = "COLLC_DEFAULT_EXACT"
    assert marker not in (tmp_path / "a" / "collc_ring_allreduce.c").read_text()
    assert marker in (tmp_path / "b" / "collc_ring_allreduce.c").read_text()
    anyp = runner.invoke(
        main, ["compile", ring, "-p", "any", "--verify-ranks", "1..4", "--target", "mpi-c", "--no-build", "--exact",
               "-o", str(tmp_path / "c")],
    )  # fmt: skip
    assert anyp.exit_code == 0, anyp.output
    assert marker in next((tmp_path / "c").glob("collc_*.c")).read_text()
    other = runner.invoke(main, ["compile", ring, "-p", "4", "--target", "cuda", "--exact", "-o", str(tmp_path / "d")])
    assert other.exit_code == 2 and "--exact applies to the mpi-c target only" in other.output
