"""The mpi-c target as a drop-in MPI library: unmodified MPI programs run with
``LD_PRELOAD=libcollc_<algorithm>.so`` and get the same values as with plain MPI.

Two independent judges:

- ``tests/mpi/check_values.c`` computes every rank's expected result locally (no
  MPI) for every predefined datatype and op, with and without ``MPI_IN_PLACE``,
  through ``MPI_Allreduce`` and ``MPI_Allreduce_c``, on several communicators;
- mpi4py's own collective tests, from its sdist (mpi4py calls
  ``MPI_Allreduce_c``), run with ``COLLC_SHIM_CHECK=1`` as a further guard.

Each judge is first shown to pass on plain MPI and to fail when the preloaded
library computes a wrong allreduce (a small stand-in interposer with a planted
bug), so that a green run through the generated libraries means something.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from collc.backends.mpitools import mpi_env, mpicc, mpiexec

P = 4
ALGORITHMS = ("ring_allreduce", "swing_bw")
# the ring in the normal suite, Swing with -m slow (its library is checked through the shim op matrix too)
ALGORITHM_PARAMS = [pytest.param(a, marks=() if a == "ring_allreduce" else pytest.mark.slow) for a in ALGORITHMS]
CHECK_VALUES = Path(__file__).resolve().parent / "mpi" / "check_values.c"

# mpi4py's test modules for the blocking buffer collectives (the regex also
# selects test_cco_buf_inter): Allreduce on COMM_SELF, COMM_WORLD, duplicates,
# with MPI_IN_PLACE, and on intercommunicators, for the array and numpy types.
MPI4PY_MODULES = ("-i", "test_cco_buf")
MPI4PY_MIN_TESTS = 80

# check_values --derived takes about a second; a library that deadlocks on it fails at this limit.
DERIVED_TIMEOUT = 30

# An interposer that runs PMPI_Allreduce_c on all elements but the last, which keeps
# the caller's own input: the off-by-one a chunking bug produces.
PLANTED_BUG_SHIM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int allreduce(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype dt, MPI_Op op,
                     MPI_Comm comm, const char *entry)
{
    MPI_Count lb, extent;
    if (getenv("COLLC_SHIM_LOG")) fprintf(stderr, "collc: %s planted-bug count=%lld\n", entry, (long long)count);
    if (count == 0) return PMPI_Allreduce_c(sendbuf, recvbuf, count, dt, op, comm);
    PMPI_Type_get_extent_c(dt, &lb, &extent);
    if (sendbuf != MPI_IN_PLACE)
        memcpy((char *)recvbuf + (count - 1) * extent, (const char *)sendbuf + (count - 1) * extent, extent);
    return PMPI_Allreduce_c(sendbuf, recvbuf, count - 1, dt, op, comm);
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype d, MPI_Op o, MPI_Comm c)
{
    return allreduce(s, r, n, d, o, c, "MPI_Allreduce");
}

int MPI_Allreduce_c(const void *s, void *r, MPI_Count n, MPI_Datatype d, MPI_Op o, MPI_Comm c)
{
    return allreduce(s, r, n, d, o, c, "MPI_Allreduce_c");
}
"""


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    command: str
    returncode: int
    stdout: str
    stderr: str

    def tail(self, lines: int = 40) -> str:
        text = (self.stdout + self.stderr).splitlines()
        return f"$ {self.command}\nexit status {self.returncode}\n" + "\n".join(text[-lines:])


def mpirun(
    args: Sequence[str | Path],
    *,
    preload: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> Run:
    """``mpiexec -n P ARGS`` with stdin closed, the oversubscription settings and a timeout.

    ``preload`` goes to the ranks only (``-genv LD_PRELOAD``); LD_PRELOAD and
    COLLC_SHIM_* from the calling environment are dropped.
    """
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("COLLC_SHIM_")}
    full_env = mpi_env(P, base)
    full_env.update(env or {})
    command = [str(mpiexec()), "-n", str(P)]
    if preload is not None:
        command += ["-genv", "LD_PRELOAD", str(preload)]
    command += [str(a) for a in args]
    shown = " ".join(f"{k}={v}" for k, v in (env or {}).items()) + " " + " ".join(command)
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout} s\n" + Run(shown.strip(), -9, out, err).tail())
    return Run(shown.strip(), proc.returncode, out, err)


def build(command: list[str]) -> None:
    proc = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"$ {' '.join(command)}\n{proc.stdout}{proc.stderr}"


def interposed(stderr: str, entry: str, name: str) -> int:
    """How many ``collc:`` log lines report a call of ``entry`` that ``name`` ran itself (not a PMPI fallback)."""
    word = re.compile(rf"\b{re.escape(entry)}\b")
    count = 0
    for line in stderr.splitlines():
        at = line.find("collc: ")
        if at < 0:
            continue
        line = line[at:]
        if word.search(line) and name in line and "fallback" not in line and "note:" not in line:
            count += 1
    return count


TALLY = re.compile(r"check_values: (\d+) cases on (\d+) ranks, (\d+) failures")


def tally(run: Run) -> tuple[int, int]:
    """(cases, failures) from check_values' summary line."""
    found = TALLY.search(run.stdout)
    assert found is not None, "check_values printed no summary\n" + run.tail()
    assert int(found.group(2)) == P
    return int(found.group(1)), int(found.group(3))


# mpiexec merges the ranks' output, at times in the middle of a line: no ^ anchors.
RAN = re.compile(r"Ran (\d+) tests? in")
NOT_OK = re.compile(r"\b(FAIL|ERROR): test|FAILED \(")


def mpi4py_outcome(run: Run) -> tuple[list[int], bool]:
    """The number of tests each rank ran, and whether all passed (exit status 0, no failure reported)."""
    text = run.stdout + run.stderr
    ran = [int(n) for n in RAN.findall(text)]
    return ran, run.returncode == 0 and NOT_OK.search(text) is None


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def check_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("check_values") / "check_values"
    build([str(mpicc()), "-O2", "-Wall", "-Wextra", "-o", str(exe), str(CHECK_VALUES)])
    return exe


@pytest.fixture(scope="module")
def planted_bug(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in interposer of MPI_Allreduce and MPI_Allreduce_c whose results are wrong."""
    folder = tmp_path_factory.mktemp("planted_bug")
    source = folder / "planted_bug.c"
    source.write_text(PLANTED_BUG_SHIM, encoding="utf-8")
    lib = folder / "libplanted_bug.so"
    build([str(mpicc()), "-shared", "-fPIC", "-O2", "-o", str(lib), str(source)])
    return lib


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``generated(name)``: ``collc compile NAME -p 4 --target mpi-c -o DIR`` (once per name), the library built."""
    from click.testing import CliRunner

    from collc.cli import main

    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            out = tmp_path_factory.mktemp(f"mpi-c-{name}")
            args = ["compile", name, "-p", str(P), "--target", "mpi-c", "-o", str(out)]
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, f"$ collc {' '.join(args)}\nexit status {result.exit_code}\n{result.output}"
            lib = out / f"libcollc_{name}.so"
            assert lib.is_file(), f"collc compile wrote no {lib.name}: {sorted(p.name for p in out.iterdir())}"
            built[name] = lib
        return built[name]

    return get


def _sdist_folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("mpi4py-sdist"))
    return tmp_path_factory.mktemp("mpi4py-sdist")


@pytest.fixture(scope="session")
def mpi4py_tests(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``test/`` folder of the sdist of the installed mpi4py (downloaded once into pytest's cache)."""
    version = importlib.metadata.version("mpi4py")
    folder = _sdist_folder(request, tmp_path_factory)
    sdist = folder / f"mpi4py-{version}.tar.gz"
    if not sdist.is_file():
        # --no-binary mpi4py, not :all: (which would also build mpi4py's build requirements from source).
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "mpi4py"]
        command += [f"mpi4py=={version}", "-d", str(folder)]
        try:
            proc = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, check=False
            )
            output = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            output = "timed out after 600 s"
        if not sdist.is_file():
            pytest.fail(
                f"cannot get mpi4py {version}'s sdist (its test suite) from PyPI; these tests need network "
                f"access once (the sdist is then kept in {folder}).\n$ {' '.join(command)}\n{output[-3000:]}",
                pytrace=False,
            )
    root = tmp_path_factory.mktemp("mpi4py-src")
    prefix = f"mpi4py-{version}/test/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:  # Python without extraction filters
            tar.extractall(root, members=members)
    tests = root / prefix
    assert (tests / "main.py").is_file(), f"{sdist} has no {prefix}main.py"
    return tests


def run_mpi4py(tests: Path, args: Sequence[str], **kwargs) -> Run:
    return mpirun([sys.executable, tests / "main.py", *args], cwd=tests, timeout=600, **kwargs)


# --------------------------------------------------------------------------
# check_values
# --------------------------------------------------------------------------


def test_check_values_passes_on_plain_mpi(check_values: Path) -> None:
    run = mpirun([check_values])
    cases, failures = tally(run)
    assert run.returncode == 0 and failures == 0, run.tail()
    assert cases > 50_000
    assert "collc:" not in run.stderr
    run = mpirun([check_values, "--derived"], timeout=DERIVED_TIMEOUT)
    cases, failures = tally(run)
    assert run.returncode == 0 and failures == 0 and cases > 0, run.tail()


def test_check_values_catches_a_wrong_interposed_allreduce(check_values: Path, planted_bug: Path) -> None:
    run = mpirun([check_values, "--quick"], preload=planted_bug)
    cases, failures = tally(run)
    assert run.returncode != 0, run.tail()
    assert failures > cases // 4, run.tail()
    failure = re.compile(r"FAIL comm=.+ entry=MPI_Allreduce(_c)? type=.+ count=\d+ in_place=[01]: element \d+: got ")
    assert failure.search(run.stderr), run.tail()


@pytest.mark.parametrize("name", ALGORITHM_PARAMS)
def test_check_values_through_generated_library(
    check_values: Path, generated: Callable[[str], Path], name: str
) -> None:
    lib = generated(name)
    run = mpirun([check_values], preload=lib, env={"COLLC_SHIM_LOG": "1"})
    cases, failures = tally(run)
    assert run.returncode == 0 and failures == 0, run.tail()
    assert cases > 50_000
    for entry in ("MPI_Allreduce", "MPI_Allreduce_c"):
        assert interposed(run.stderr, entry, name) > 1000, f"no {entry} call ran on {lib.name}\n" + run.tail()


@pytest.mark.parametrize("name", ALGORITHMS)
def test_predefined_op_on_derived_datatype_does_what_pmpi_does(
    check_values: Path, generated: Callable[[str], Path], name: str
) -> None:
    """A contiguous derived datatype with MPI_SUM or MPI_MAX: MPICH refuses the call (MPI_ERR_OP) on
    every rank, and an interposed call must too (or fall back to PMPI), not run part of its schedule."""
    run = mpirun([check_values, "--derived", "--trace"], preload=generated(name), timeout=DERIVED_TIMEOUT)
    cases, failures = tally(run)
    assert run.returncode == 0 and failures == 0 and cases > 0, run.tail()


# --------------------------------------------------------------------------
# mpi4py's test suite
# --------------------------------------------------------------------------


def test_mpi4py_suite_catches_a_wrong_interposed_allreduce(mpi4py_tests: Path, planted_bug: Path) -> None:
    run = run_mpi4py(mpi4py_tests, [*MPI4PY_MODULES, "-k", "Allreduce"], preload=planted_bug,
                     env={"COLLC_SHIM_LOG": "1"})  # fmt: skip
    assert interposed(run.stderr, "MPI_Allreduce_c", "planted-bug") > 0, run.tail()
    ran, ok = mpi4py_outcome(run)
    assert ran and min(ran) > 0, run.tail()
    assert run.returncode != 0 and not ok, run.tail()
    assert "FAIL: testAllreduce" in run.stdout + run.stderr, run.tail()


@pytest.mark.parametrize("name", ALGORITHM_PARAMS)
def test_mpi4py_suite_through_generated_library(
    mpi4py_tests: Path, generated: Callable[[str], Path], name: str
) -> None:
    lib = generated(name)
    run = run_mpi4py(mpi4py_tests, list(MPI4PY_MODULES), preload=lib,
                     env={"COLLC_SHIM_LOG": "1", "COLLC_SHIM_CHECK": "1"})  # fmt: skip
    ran, ok = mpi4py_outcome(run)
    assert run.returncode == 0 and ok, run.tail()
    assert len(ran) == P and min(ran) >= MPI4PY_MIN_TESTS, run.tail()
    # mpi4py 4 reaches MPI through the large-count entry point only.
    assert interposed(run.stderr, "MPI_Allreduce_c", name) > 0, f"no call ran on {lib.name}\n" + run.tail()
