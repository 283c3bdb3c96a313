"""Helpers of the tests that run C programs through every bundled library's PMPI shim
(tests/test_shim_datatypes.py, tests/test_mpich_coll.py): which examples serve a collective and with
which parameters at p ranks, building their one-p and any-p libraries (once per session), building a C
driver, running ``mpiexec`` with the library preloaded, and reading the shim's log
(``COLLC_SHIM_LOG=1``) rank by rank."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import collc
from collc.backends import mpi_c, mpi_c_anyp
from collc.backends.mpitools import mpi_env, mpicc, mpiexec
from collc.diagnostics import CollError
from collc.ir import Collective, ParamValue

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
TIMEOUT = 300
ANY_P_RANKS = range(1, 9)  # the sizes an any-p library here is verified for


@functools.cache
def _load(path: Path) -> collc.Algorithm:
    return collc.load(path)


@dataclass(frozen=True)
class Example:
    path: Path
    name: str
    collective: Collective

    def params_at(self, p: int) -> dict[str, ParamValue] | None:
        """The first parameters of p ranks the example's constraints allow (torus: two dimensions first;
        hierarchy: several nodes of several ranks first), or None."""
        return _params_at(self.path, p)


@functools.cache
def _params_at(path: Path, p: int) -> dict[str, ParamValue] | None:
    alg = _load(path)
    names = set(alg.param_names)
    if "dims" in names:
        tried: list[dict[str, ParamValue]] = [{"dims": (a, p // a)} for a in range(2, p) if p % a == 0 and a <= p // a]
        tried.append({"dims": (p,)})
    elif {"nodes", "local"} <= names:
        tried = [{"nodes": n, "local": p // n} for n in range(2, p) if p % n == 0]
        tried += [{"nodes": 1, "local": p}]
    else:
        tried = [{"p": p}]
    for params in tried:
        try:
            alg.instantiate(**params)
        except CollError as err:
            if "violates the constraint" in err.message:
                continue
            raise
        return params
    return None


def examples(*collectives: Collective, compressed: bool = False) -> list[Example]:
    """The bundled examples of these collectives (not examples/lib); with compression points only if asked."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.coll")):
        if path.parent.name == "lib":
            continue
        alg = _load(path)
        if alg.collective in collectives and (compressed or path.parent.name != "compression"):
            found.append(Example(path, alg.name, alg.collective))
    return found


def any_p_refusal(example: Example) -> str | None:
    """Why ``compile -p any`` refuses the example (its construct and line), or None."""
    try:
        mpi_c_anyp.check_supported(_load(example.path).program, {})
    except CollError as err:
        return err.message
    return None


class Libraries:
    """Each library built once, in a folder of its own: one-p (``params``) or any-p (``params`` None)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[tuple[str, str, bool], Path] = {}
        self.lock = threading.Lock()

    def get(self, example: Example, params: Mapping[str, ParamValue] | None, *, exact: bool = False) -> Path:
        key = (example.name, repr(sorted(params.items())) if params is not None else "any", exact)
        with self.lock:
            if key in self.built:
                return self.built[key]
            out = self.root / f"{example.name}-{len(self.built)}"
            alg = _load(example.path)
            if params is None:
                alg.compile_any_p(out, verify_ranks=ANY_P_RANKS, jobs=1)
                lib = mpi_c_anyp.library_path(out, alg.program)
            else:
                inst = alg.instantiate(**params)
                assert inst.verify().ok
                mpi_c.generate(inst.schedule, out, exact=exact)
                lib = mpi_c.build(out, inst.schedule)
            assert lib.is_file(), lib
            self.built[key] = lib
            return lib


def build_driver(source: Path, out_dir: Path) -> Path:
    """A C driver of tests/mpi_c built with the MPI's mpicc, warnings as errors."""
    exe = out_dir / source.stem
    cmd = [str(mpicc()), "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(source), "-lm"]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return exe


@dataclass(frozen=True)
class Run:
    command: str
    returncode: int
    stdout: str
    stderr: str

    def tail(self, lines: int = 30) -> str:
        """The command, its status and what the drivers said: their FAIL lines when there are any."""
        fails = [line for line in self.stderr.splitlines() if line.startswith("FAIL")]
        other = [line for line in (self.stdout + self.stderr).splitlines() if not line.startswith(("collc:", "case "))]
        return f"$ {self.command}\nexit status {self.returncode}\n" + "\n".join((fails or other)[:lines])


def mpirun(
    nranks: int,
    args: Sequence[str | Path],
    *,
    preload: Path | None,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> Run:
    """``mpiexec -n nranks ARGS``, the library preloaded into the ranks only, stdin closed; a job that outlives
    ``timeout`` is killed and fails the test."""
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith(("COLLC_SHIM_", "COLLC_T"))}
    full_env = mpi_env(nranks, base)
    full_env.update(env or {})
    command = [str(mpiexec()), "-n", str(nranks)]
    if preload is not None:
        command += ["-genv", "LD_PRELOAD", str(preload)]
    command += [str(a) for a in args]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout} s\n" + Run(" ".join(command), -9, out, err).tail())
    return Run(" ".join(command), proc.returncode, out, err)


# One interposed call in the log: "collc: ENTRY ALGORITHM p=P rank R count=N TYPE [OP] [root=R]", then
# " -> PMPI fallback (REASON)" when it went to the MPI library.
LOGGED = re.compile(r"^collc: (MPI_\w+) (\S+) p=(\d+) rank (\d+) (.*?)(?: -> PMPI fallback \((.*)\))?$", re.M)


@dataclass(frozen=True)
class Call:
    entry: str
    algorithm: str
    nranks: int
    text: str
    fallback: str | None  # the reason, or None: the call ran on the schedule


def calls_by_rank(stderr: str) -> dict[int, list[Call]]:
    """Each rank's interposed calls, in the order it made them."""
    calls: dict[int, list[Call]] = {}
    for entry, alg, p, rank, text, reason in LOGGED.findall(stderr):
        calls.setdefault(int(rank), []).append(Call(entry, alg, int(p), text, reason or None))
    return calls


def assert_ranks_agree(stderr: str, nranks: int) -> list[tuple[bool, set[str]]]:
    """Every rank logged the same number of calls, and the k-th call ran on the schedule on every rank or went to
    PMPI on every rank; returns, per call, (ran, the fallback reasons)."""
    calls = calls_by_rank(stderr)
    assert sorted(calls) == list(range(nranks)), f"ranks that logged calls: {sorted(calls)}"
    lengths = {r: len(c) for r, c in calls.items()}
    assert len(set(lengths.values())) == 1, f"calls logged per rank: {lengths}"
    outcome = []
    for k in range(lengths[0]):
        this = [calls[r][k] for r in range(nranks)]
        ran = {c.fallback is None for c in this}
        assert len(ran) == 1, f"call {k} split the ranks: " + "; ".join(
            f"rank {r}: {c.entry} {c.text} -> {c.fallback or 'schedule'}" for r, c in enumerate(this)
        )
        outcome.append((ran.pop(), {c.fallback for c in this if c.fallback}))
    return outcome
