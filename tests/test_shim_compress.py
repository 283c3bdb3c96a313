"""The PMPI shim of a schedule with compression points (``LD_PRELOAD=libcollc_<algorithm>.so``).

Without ``COLLC_SHIM_COMPRESS`` every call goes to PMPI: results bit for bit the MPI
library's.  With ``COLLC_SHIM_COMPRESS=1`` the float and double sums (and allgathers)
run the compressed schedule: every element within the verifier's error bound of the
exact result, computed by ``tests/mpi/compress_shim.c`` from every rank's input in
long double; other ops and datatypes still go to PMPI, bit for bit.  Rank 0 notes the
bound on stderr once.  ``COLLC_SHIM_LOG=1`` shows which calls ran where.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import collc
from collc.backends import mpi_c
from collc.backends.mpitools import mpi_env, mpicc, mpiexec
from collc.diagnostics import CollError
from collc.verify.compression import analyse

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "mpi" / "compress_shim.c"
TIMEOUT = 300
DRIVER_NAMES = {"allreduce": "allreduce", "allgather": "allgather", "reduce_scatter": "reduce_scatter_block"}
# (case, example, codec override, input magnitude A)
LIBRARIES = (
    ("allreduce", "compressed_ring_allreduce", None, 1.0),
    ("allgather", "compressed_ring_allgather", None, 1.0),
    ("reduce_scatter", "compressed_ring_reduce_scatter", None, 1.0),
    ("allreduce_bf16", "compressed_ring_allreduce", "bf16", 50.0),
)


@dataclass(frozen=True)
class Lib:
    path: Path
    collective: str
    algorithm: str
    bounds: tuple[float, float]
    scales: bool
    a: float


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Lib]]:
    try:
        cc, _ = mpicc(), mpiexec()
    except CollError as err:
        pytest.skip(str(err))
    root = tmp_path_factory.mktemp("shim_compress")
    program = root / "compress_shim"
    subprocess.run([str(cc), "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(program), str(PROGRAM), "-lm"],
                   check=True, capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    libs = {}
    for case, name, codec, a in LIBRARIES:
        alg = collc.load(name)
        if codec is not None:
            alg = alg.with_codecs({"q": codec})
        inst = alg.instantiate(p=4)
        files = inst.compile("mpi-c", root / case)
        s = inst.schedule
        bounds = tuple(analyse(s, input_bound=1.0, dtype=dt).stats.error_bound for dt in ("float32", "float64"))
        scales = codec == "bf16"
        libs[case] = Lib(files[-1], DRIVER_NAMES[s.collective.value], s.algorithm, bounds, scales, a)  # type: ignore[arg-type]
    return program, libs


def run(
    program: Path, lib: Lib, mode: str, env: dict[str, str], bound_factor: float = 1.0
) -> subprocess.CompletedProcess[str]:
    full = mpi_env(4, {**os.environ, **env})
    full.pop("LD_PRELOAD", None)
    b32, b64 = (b * bound_factor for b in lib.bounds)
    args = [str(mpiexec()), "-n", "4", "-genv", "LD_PRELOAD", str(lib.path), str(program), lib.collective, mode,
            repr(b32), repr(b64), str(int(lib.scales)), repr(lib.a)]  # fmt: skip
    return subprocess.run(args, env=full, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT)


def tally(proc: subprocess.CompletedProcess[str]) -> tuple[int, int, float, float]:
    cases = re.search(r"(\d+) cases per rank, (\d+) failures", proc.stdout)
    errors = re.search(r"max error float (\S+) double (\S+)", proc.stdout)
    assert cases and errors, proc.stdout + proc.stderr[-3000:]
    return int(cases[1]), int(cases[2]), float(errors[1]), float(errors[2])


@pytest.mark.parametrize("case", [c for c, *_ in LIBRARIES])
def test_without_the_setting_every_call_is_pmpis(built: tuple[Path, dict[str, Lib]], case: str) -> None:
    program, libs = built
    lib = libs[case]
    proc = run(program, lib, "pmpi", {"COLLC_SHIM_LOG": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    ran, failed, _, _ = tally(proc)
    assert ran >= 30 and failed == 0
    calls = [line for line in proc.stderr.splitlines() if line.startswith("collc: MPI_")]
    assert calls and all("-> PMPI fallback" in line for line in calls), calls[:3]
    assert any("COLLC_SHIM_COMPRESS=1 runs it" in line for line in calls)
    assert "with compression (" not in proc.stderr  # no bound note: nothing ran compressed


@pytest.mark.parametrize("case", [c for c, *_ in LIBRARIES])
def test_with_the_setting_float_sums_are_within_the_bound(built: tuple[Path, dict[str, Lib]], case: str) -> None:
    program, libs = built
    lib = libs[case]
    proc = run(program, lib, "bound", {"COLLC_SHIM_COMPRESS": "1", "COLLC_SHIM_LOG": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    ran, failed, err32, err64 = tally(proc)
    assert ran >= 30 and failed == 0
    assert 0 < err32 <= lib.bounds[0] * max(1.0, lib.a) and 0 < err64  # compressed: lossy, within the bound
    lines = proc.stderr.splitlines()
    ran_here = [line for line in lines if line.startswith("collc: MPI_") and "->" not in line]
    assert {re.search(r"count=\d+ (MPI_\w+)", line)[1] for line in ran_here} == {"MPI_FLOAT", "MPI_DOUBLE"}  # type: ignore[index]
    fallbacks = {m[1] for line in lines if (m := re.search(r"-> PMPI fallback \((.*)\)$", line))}
    assert fallbacks and all("compression points" in f for f in fallbacks), fallbacks
    notes = [line for line in lines if line.startswith("collc: note: MPI_")]
    assert len(notes) == 1, notes  # once, from rank 0
    assert f"runs {lib.algorithm} with compression" in notes[0]
    assert f"worst-case error bound {lib.bounds[0]:.3g}" in notes[0]


def test_a_bound_too_small_is_caught(built: tuple[Path, dict[str, Lib]]) -> None:
    """The check can fail: held to a hundredth of the verifier's bound, the compressed sums fail it."""
    program, libs = built
    proc = run(program, libs["allreduce"], "bound", {"COLLC_SHIM_COMPRESS": "1"}, bound_factor=0.01)
    assert proc.returncode != 0
    assert tally(proc)[1] > 0 and "beyond the error bound" in proc.stderr


def test_check_mode_uses_the_bound(built: tuple[Path, dict[str, Lib]]) -> None:
    """COLLC_SHIM_CHECK=1 with compression holds each call to the bound (and checks the counts agree)."""
    program, libs = built
    proc = run(program, libs["reduce_scatter"], "bound", {"COLLC_SHIM_COMPRESS": "1", "COLLC_SHIM_CHECK": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "COLLC_SHIM_CHECK" not in proc.stderr
    assert tally(proc)[1] == 0


def test_the_api_reports_the_bound(built: tuple[Path, dict[str, Lib]]) -> None:
    import ctypes

    _, libs = built
    lib = libs["allreduce"]
    handle = ctypes.CDLL(str(lib.path))
    fn = getattr(handle, f"collc_{lib.algorithm}_error_bound")
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_int]
    assert (fn(0), fn(1)) == lib.bounds
    assert mpi_c.C_CODECS.keys() == {"ebq", "fwq", "hq", "fp16", "bf16", "lossless"}
