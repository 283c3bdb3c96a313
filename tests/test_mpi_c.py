"""The ``mpi-c`` target: generated C, builds of every example, and runs under ``mpiexec``.

Golden files: ``tests/golden/mpi_c/<algorithm>_p<p>.c`` and ``.h`` hold the
generated sources of ring_allreduce, swing_bw and compressed_ring_allreduce at
p=4, compared textually.
After a deliberate change to the templates or the runtime, regenerate them with

    COLLC_REGEN_GOLDEN=1 pytest tests/test_mpi_c.py -k golden

and review the diff.

The runs use ``tests/mpi_c/driver.c``, a plain MPI program that checks every
element of a collective against values it computes itself, with the library
under test preloaded (``LD_PRELOAD``), as a user would deploy it; and
``tests/mpi_c/ctypes_allreduce.py`` for the Fortran-handle entry point and
mpi4py.  Ranks outnumber the cores here, so every run gets
`mpitools.mpi_env` (MPICH yields the CPU instead of busy-polling), stdin from
/dev/null, and a timeout.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from golden_files import assert_golden

import collc
from collc import collectives
from collc.backends import mpi_c, mpitools
from collc.diagnostics import CollError
from collc.ir import Action, Collective, OpKind, Schedule
from collc.verify.compression import analyse

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "mpi_c"
DRIVER = HERE / "mpi_c" / "driver.c"
CTYPES_SCRIPT = HERE / "mpi_c" / "ctypes_allreduce.py"
EXAMPLES = HERE.parent / "examples"
TIMEOUT = 120

# Every bundled example, at a small p: (case id, example, parameters).
CASES: list[tuple[str, str, dict[str, int]]] = [  # every example without compression, hierarchical/ too
    ("ring_allreduce", "ring_allreduce", {"p": 4}),
    ("ring_allreduce_k3", "ring_allreduce", {"p": 4, "k": 3}),
    ("swing_bw", "swing_bw", {"p": 4}),
    ("swing_lat", "swing_lat", {"p": 4}),
    ("swing_bw_pow2", "swing_bw_pow2", {"p": 4}),
    ("rabenseifner", "rabenseifner", {"p": 4}),
    ("recursive_doubling", "recursive_doubling", {"p": 4}),
    ("recursive_doubling_any", "recursive_doubling_any", {"p": 3}),
    ("ring_allgather_k3", "ring_allgather", {"p": 4, "k": 3}),
    ("bruck_allgather", "bruck_allgather", {"p": 4}),
    ("ring_reduce_scatter", "ring_reduce_scatter", {"p": 4}),
    ("pairwise_reduce_scatter", "pairwise_reduce_scatter", {"p": 5}),
    ("direct_allgather", "direct_allgather", {"p": 3}),
    ("recursive_doubling_allgather", "recursive_doubling_allgather", {"p": 4}),
    ("binomial_broadcast", "binomial_broadcast", {"p": 4, "root": 1}),
    ("binomial_reduce", "binomial_reduce", {"p": 4, "root": 2}),
    ("pairwise_alltoall", "pairwise_alltoall", {"p": 4}),
    ("bruck_alltoall", "bruck_alltoall", {"p": 5}),
    ("scatter_allgather_broadcast", "scatter_allgather_broadcast", {"p": 6, "root": 4}),
    ("double_binary_tree_allreduce", "double_binary_tree_allreduce", {"p": 7}),
    ("pipelined_ring_allreduce", "pipelined_ring_allreduce", {"p": 4, "k": 2}),
    ("striped_ring_allreduce", "striped_ring_allreduce", {"p": 4}),
    ("weighted_striped_ring_allreduce", "weighted_striped_ring_allreduce", {"p": 4, "share": 70}),
    ("hier_allreduce_swing", "hier_allreduce_swing", {"nodes": 2, "local": 2}),
    ("hier_allreduce_ring", "hier_allreduce_ring", {"nodes": 3, "local": 2}),
    ("hier_allgather", "hier_allgather", {"nodes": 2, "local": 3}),
    ("node_aware_allgather", "node_aware_allgather", {"nodes": 3, "local": 2}),
    ("node_aware_reduce_scatter", "node_aware_reduce_scatter", {"nodes": 2, "local": 3}),
    ("binomial_gather", "binomial_gather", {"p": 5, "root": 3}),
    ("binomial_scatter", "binomial_scatter", {"p": 6, "root": 2}),
    ("hillis_steele_scan", "hillis_steele_scan", {"p": 5}),
    ("hillis_steele_exscan", "hillis_steele_exscan", {"p": 6}),
    ("dissemination_barrier", "dissemination_barrier", {"p": 5}),
    ("trivance_allreduce", "trivance_allreduce", {"p": 9}),
    ("trivance_bw_allreduce", "trivance_bw_allreduce", {"p": 9}),
    ("pat_allgather", "pat_allgather", {"p": 5}),
    ("pat_reduce_scatter", "pat_reduce_scatter", {"p": 6}),
    ("ibing_allreduce", "ibing_allreduce", {"p": 5}),
    ("bine_allreduce", "bine_allreduce", {"p": 8}),
    ("bine_allgather", "bine_allgather", {"p": 4}),
    ("bine_reduce_scatter", "bine_reduce_scatter", {"p": 8}),
    ("bine_alltoall", "bine_alltoall", {"p": 4}),
    ("bine_broadcast", "bine_broadcast", {"p": 6, "root": 5}),
    ("bine_reduce", "bine_reduce", {"p": 7, "root": 2}),
    ("bine_gather", "bine_gather", {"p": 6, "root": 4}),
    ("bine_scatter", "bine_scatter", {"p": 6, "root": 1}),
]

DRIVER_NAMES = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reduce_scatter": "reduce_scatter_block",
    "broadcast": "bcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "gather": "gather",
    "scatter": "scatter",
    "scan": "scan",
    "exscan": "exscan",
    "barrier": "barrier",
}


@dataclasses.dataclass(frozen=True)
class Built:
    schedule: Schedule
    lib: Path


def _schedule(name: str, params: dict[str, int]) -> Schedule:
    inst = collc.load(name).instantiate(**params)
    assert inst.verify().ok
    return inst.schedule


def _tools() -> tuple[Path, Path]:
    try:
        return mpitools.mpicc(), mpitools.mpiexec()
    except CollError as err:
        pytest.skip(str(err))


def _compile_driver(out: Path, *flags: str) -> Path:
    mpicc, _ = _tools()
    cmd = [str(mpicc), "-O1", "-g", "-Wall", "-Wextra", "-Werror", *flags, "-o", str(out), str(DRIVER)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=TIMEOUT)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """Every case generated and built, in parallel; plus one build through the generated Makefile."""
    _tools()
    root = tmp_path_factory.mktemp("mpi_c")
    jobs: dict[str, tuple[Schedule, Path]] = {}
    for case, name, params in CASES:
        schedule = _schedule(name, params)
        mpi_c.generate(schedule, root / case)
        jobs[case] = (schedule, root / case)
    make_dir = root / "make"
    mpi_c.generate(jobs["ring_allreduce"][0], make_dir)
    env = {**os.environ, "MPICC": str(mpitools.mpicc())}
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        futures = {case: pool.submit(mpi_c.build, d, s) for case, (s, d) in jobs.items()}
        make = pool.submit(subprocess.run, ["make", "-C", str(make_dir)], env=env, capture_output=True, text=True)
        libs = {case: Built(jobs[case][0], f.result()) for case, f in futures.items()}
        made = make.result()
    assert made.returncode == 0, made.stdout + made.stderr
    assert (make_dir / "libcollc_ring_allreduce.so").is_file()
    return libs


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile_driver(tmp_path_factory.mktemp("driver") / "driver")


def mpirun(
    nranks: int,
    command: list[str],
    *,
    preload: str = "",
    env: dict[str, str] | None = None,
    timeout: int = TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n nranks command`` with LD_PRELOAD set for the ranks only (not for mpiexec)."""
    _, mpiexec = _tools()
    full_env = mpitools.mpi_env(nranks, {**os.environ, **(env or {})})
    full_env.pop("LD_PRELOAD", None)
    args = [str(mpiexec), "-n", str(nranks)]
    if preload:
        args += ["-genv", "LD_PRELOAD", preload]
    return subprocess.run(
        args + command,
        env=full_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_driver(driver: Path, b: Built, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    coll = DRIVER_NAMES[b.schedule.collective.value]
    extra = ["--root", str(b.schedule.root)] if b.schedule.root is not None else []
    nranks = kw.pop("nranks", b.schedule.nranks)
    return mpirun(nranks, [str(driver), coll, *extra, *args], preload=kw.pop("preload", str(b.lib)), **kw)


def assert_passed(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert re.search(r"cases per rank, 0 failures", proc.stdout), proc.stdout


# --------------------------------------------------------------------------
# Generated text
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ring_allreduce", "swing_bw", "compressed_ring_allreduce"])
def test_golden(name: str, tmp_path: Path) -> None:
    schedule = _schedule(name, {"p": 4})
    bounds = None
    if schedule.compresses():  # the verifier's, for |x| <= 1
        b32, b64 = (analyse(schedule, input_bound=1.0, dtype=dt).stats.error_bound for dt in ("float32", "float64"))
        bounds = (b32, b64)
    mpi_c.generate(schedule, tmp_path, error_bound=bounds)
    c_name, h_name = mpi_c.source_names(schedule)
    for generated, suffix in ((c_name, ".c"), (h_name, ".h")):
        assert_golden(tmp_path / generated, GOLDEN / f"{name}_p4{suffix}")


def test_generated_files(tmp_path: Path) -> None:
    schedule = _schedule("binomial_reduce", {"p": 5, "root": 3})
    files = mpi_c.generate(schedule, tmp_path / "out")
    names = {f.name for f in files}
    assert {"collc_binomial_reduce.c", "collc_binomial_reduce.h", "Makefile", "collc_mpi.h"} <= names
    text = (tmp_path / "out" / "collc_binomial_reduce.c").read_text()
    assert "binomial_reduce.coll:" in text and str(EXAMPLES) not in text
    assert "int MPI_Reduce(" in text and "int MPI_Reduce_c(" in text and "MPI_Allreduce(" not in text
    assert "static int phase_reduce(struct collc_ctx *ctx)" in text
    assert ".root = 3," in text


def test_every_example_is_covered() -> None:
    found = {p.stem for folder in (EXAMPLES, EXAMPLES / "hierarchical") for p in folder.glob("*.coll")}
    assert {name for _, name, _ in CASES} == found


def test_build_errors(tmp_path: Path) -> None:
    _tools()
    schedule = _schedule("ring_allreduce", {"p": 2})
    with pytest.raises(CollError, match="generate the sources first"):
        mpi_c.build(tmp_path / "nothing", schedule)
    mpi_c.generate(schedule, tmp_path / "src")
    with pytest.raises(CollError, match=r"no_such_header\.h") as err:
        mpi_c.build(tmp_path / "src", schedule, cflags=["-include", "no_such_header.h"])
    assert "mpicc failed" in err.value.message


def test_collc_cflags_reach_the_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Warnings do not stop a user's build; COLLC_CFLAGS adds flags to it (the suite's -Werror among them)."""
    assert "-Werror" not in mpi_c.CFLAGS
    assert mpi_c.extra_cflags({"COLLC_CFLAGS": "-Werror  -DX='a b'"}) == ("-Werror", "-DX=a b")
    with pytest.raises(CollError, match=r"COLLC_CFLAGS=.*quotation"):
        mpi_c.extra_cflags({"COLLC_CFLAGS": "-DX='a"})
    _tools()
    schedule = _schedule("ring_allreduce", {"p": 2})
    mpi_c.generate(schedule, tmp_path)
    monkeypatch.setenv("COLLC_CFLAGS", "-include no_such_header_from_the_environment.h")
    with pytest.raises(CollError, match=r"no_such_header_from_the_environment\.h"):
        mpi_c.build(tmp_path, schedule)


# --------------------------------------------------------------------------
# Builds
# --------------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c, _, _ in CASES])
def test_builds_and_exports(built: dict[str, Built], case: str) -> None:
    b = built[case]
    assert b.lib.is_file()
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(b.lib)], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in symbols.stdout.splitlines() if line.strip()}
    mpi_name = mpi_c.MPI_NAMES[b.schedule.collective]
    # MPI_Barrier has no large-count twin: it has no count
    twins = {mpi_name} if b.schedule.collective is Collective.BARRIER else {mpi_name, f"{mpi_name}_c"}
    api = f"collc_{b.schedule.algorithm}_{mpi_c.API_NAMES[b.schedule.collective]}"
    assert {*twins, api, f"{api}_f", f"collc_{b.schedule.algorithm}_last_error"} <= names
    also = {n + c for n in mpi_c.MPI_ALSO.get(b.schedule.collective, ()) for c in ("", "_c")}
    assert {n for n in names if n.startswith("MPI_")} == {*twins, *also}


@pytest.mark.parametrize("case", [c for c, _, _ in CASES])
def test_layout_matches_python(built: dict[str, Built], case: str) -> None:
    """collc_<alg>_layout cuts chunks exactly as collectives.element_offsets."""
    b = built[case]
    s = b.schedule
    lib = ctypes.CDLL(str(b.lib))
    layout = getattr(lib, f"collc_{s.algorithm}_layout")
    layout.argtypes = [ctypes.c_int64, ctypes.c_void_p]
    p = s.nranks
    counts = [0, 1, 2, 3, 5, 7, 8, 12, 13, 100, 1001, 4096, 100003, 2**33 + 5]
    for count in counts:
        if s.collective.value == "alltoall":
            count *= p
        out = np.zeros(s.nchunks + 1, dtype=np.int64)
        assert layout(count, out.ctypes.data) == s.nchunks
        want = collectives.element_offsets(s.collective, p, s.nchunks, count, s.chunk_weights)
        np.testing.assert_array_equal(out, want, err_msg=f"{case} count={count}")


# --------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------


def test_allreduce_ring_full(built: dict[str, Built], driver: Path) -> None:
    """Every datatype and op, in place or not, all counts; split and duplicated communicators; the C API."""
    b = built["ring_allreduce"]
    api = "collc_ring_allreduce_allreduce"
    proc = run_driver(driver, b, "--split", "--dup", "--api", api, env={"COLLC_SHIM_LOG": "1"})
    assert_passed(proc)
    lines = proc.stderr.splitlines()
    assert lines and all(line.startswith("collc: ") for line in lines), proc.stderr[:2000]
    ran = [line for line in lines if "->" not in line and "note:" not in line]
    pattern = r"collc: (MPI_Allreduce|MPI_Allreduce_c|collc_ring_allreduce_allreduce) ring_allreduce p=4 rank \d "
    assert all(re.match(pattern + r"count=\d+ \S+ (MPI_\w+|user-defined op)$", line) for line in ran), ran[:5]
    assert any("MPI_Allreduce_c " in line for line in ran) and any(f"{api} " in line for line in ran)
    fallbacks = {m.group(1) for line in lines if (m := re.search(r"-> PMPI fallback \((.*)\)$", line))}
    assert fallbacks == {"communicator of size 2, compiled for p=4", "the reduction op is not commutative"}
    assert any(re.search(rf"{api} .* -> error \(communicator of size 2", line) for line in lines)
    notes = [line for line in lines if line.startswith("collc: note:")]
    assert len(notes) == 4 * 2, notes  # one per reason per rank


@pytest.mark.parametrize("case", ["swing_bw", "ring_allreduce_k3"])
def test_allreduce_full(built: dict[str, Built], driver: Path, case: str) -> None:
    assert_passed(run_driver(driver, built[case], "--split", "--dup"))


@pytest.mark.parametrize(
    "case",
    ["swing_lat", "rabenseifner", "recursive_doubling", "recursive_doubling_any", "double_binary_tree_allreduce",
     "trivance_allreduce", "trivance_bw_allreduce", "ibing_allreduce", "bine_allreduce"],
)  # fmt: skip
def test_allreduce_quick(built: dict[str, Built], driver: Path, case: str) -> None:
    assert_passed(run_driver(driver, built[case], "--quick"))


@pytest.mark.parametrize(
    "case",
    ["ring_allgather_k3", "bruck_allgather", "ring_reduce_scatter", "binomial_broadcast", "binomial_reduce",
     "pairwise_alltoall", "bruck_alltoall", "scatter_allgather_broadcast", "binomial_gather", "binomial_scatter",
     "hillis_steele_scan", "hillis_steele_exscan", "dissemination_barrier", "pat_allgather", "pat_reduce_scatter",
     "bine_allgather", "bine_reduce_scatter", "bine_alltoall", "bine_broadcast", "bine_reduce", "bine_gather",
     "bine_scatter"],
)  # fmt: skip
def test_other_collectives(built: dict[str, Built], driver: Path, case: str) -> None:
    proc = run_driver(driver, built[case], "--split", "--dup", env={"COLLC_SHIM_LOG": "1"})
    assert_passed(proc)
    mpi_name = mpi_c.MPI_NAMES[built[case].schedule.collective]
    ran = [line for line in proc.stderr.splitlines() if line.startswith(f"collc: {mpi_name}") and "->" not in line]
    assert len(ran) > 100


@pytest.mark.parametrize(
    ("case", "mode"),
    [("ring_allgather_k3", "allgatherv"), ("bruck_allgather", "allgatherv"), ("bine_allgather", "allgatherv"),
     ("ring_reduce_scatter", "reduce_scatter"), ("pat_reduce_scatter", "reduce_scatter"),
     ("bine_reduce_scatter", "reduce_scatter"), ("pairwise_alltoall", "alltoallv"), ("bruck_alltoall", "alltoallv"),
     ("bine_alltoall", "alltoallv")],
)  # fmt: skip
def test_counts_given_at_run_time(built: dict[str, Built], driver: Path, case: str, mode: str) -> None:
    """MPI_Allgatherv, MPI_Reduce_scatter and MPI_Alltoallv with unequal counts (some 0) and gaps between the
    blocks run on the schedule of the equal-block collective, its chunks cut by the counts, every element
    checked."""
    b = built[case]
    proc = mpirun(b.schedule.nranks, [str(driver), mode, "--split", "--dup"], preload=str(b.lib),
                  env={"COLLC_SHIM_LOG": "1"})  # fmt: skip
    assert_passed(proc)
    name = {"allgatherv": "MPI_Allgatherv", "reduce_scatter": "MPI_Reduce_scatter", "alltoallv": "MPI_Alltoallv"}[mode]
    calls = [line for line in proc.stderr.splitlines() if line.startswith(f"collc: {name}")]
    ran = [line for line in calls if "->" not in line]
    assert len(ran) > 50, calls[:5]
    assert all("PMPI fallback" not in line or "communicator of size" in line or "not commutative" in line
               for line in calls), [line for line in calls if "->" in line][:5]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "mode", "bug"),
    [("ring_allgather", "allgatherv", ("at += len;", "at += len - (len > 1);")),  # blocks that overlap
     ("ring_reduce_scatter", "reduce_scatter",  # the block of the next chunk copied out
      ("(char *)recvbuf, work + off[c.rank * k]", "(char *)recvbuf, work + off[c.rank * k + (c.rank > 0)]")),
     ("bruck_alltoall", "alltoallv", ("at += blen;", "at += blen - (blen > 1);"))],
)  # fmt: skip
def test_counts_given_at_run_time_catch_a_planted_bug(
    driver: Path, tmp_path: Path, name: str, mode: str, bug: tuple[str, str]
) -> None:
    """A library whose cut of the blocks into chunks is wrong (collc_vblocks, edited in its copy of the runtime)
    fails the driver's check of the counts-given-at-run-time calls."""
    schedule = _schedule(name, {"p": 4} if mode == "alltoallv" else {"p": 4, "k": 3})
    mpi_c.generate(schedule, tmp_path)
    header = tmp_path / "collc_vcoll.h"
    text = header.read_text()
    assert text.count(bug[0]) == 1
    header.write_text(text.replace(*bug))
    lib = mpi_c.build(tmp_path, schedule)
    proc = mpirun(4, [str(driver), mode], preload=str(lib))
    assert proc.returncode != 0 and f"FAIL {mode} " in proc.stdout + proc.stderr, proc.stdout + proc.stderr[-2000:]


def test_size_mismatch_falls_back(built: dict[str, Built], driver: Path) -> None:
    """A library compiled for p=4 on 2 ranks: correct results through PMPI, one note per rank."""
    proc = run_driver(driver, built["ring_allreduce"], "--quick", nranks=2, env={"COLLC_SHIM_LOG": "1"})
    assert_passed(proc)
    lines = proc.stderr.splitlines()
    fallbacks = [line for line in lines if line.endswith("-> PMPI fallback (communicator of size 2, compiled for p=4)")]
    assert len(fallbacks) > 50
    notes = [line for line in lines if line.startswith("collc: note:")]
    assert len(notes) == 2 and all("communicator of size 2" in n for n in notes), notes


def test_asan(tmp_path: Path) -> None:
    """The swing_bw library and the driver built with AddressSanitizer, the full allreduce matrix."""
    mpicc, _ = _tools()
    schedule = _schedule("swing_bw", {"p": 4})
    mpi_c.generate(schedule, tmp_path / "lib")
    lib = mpi_c.build(tmp_path / "lib", schedule, sanitize=True)
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True, check=True)
    assert "__asan_report" in undefined.stdout
    driver = _compile_driver(tmp_path / "driver", "-fsanitize=address", "-fno-omit-frame-pointer")
    libasan = subprocess.run([str(mpicc), "-print-file-name=libasan.so"], capture_output=True, text=True, check=True)
    # The ASan runtime must come first: neither mpiexec nor the MPI library is instrumented.
    preload = f"{libasan.stdout.strip()} {lib}"
    env = {"ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1"}
    proc = run_driver(driver, Built(schedule, lib), "--dup", preload=preload, env=env)
    assert "AddressSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert_passed(proc)


def test_check_mode_passes(built: dict[str, Built], driver: Path) -> None:
    proc = run_driver(driver, built["swing_bw"], env={"COLLC_SHIM_CHECK": "1"})
    assert_passed(proc)
    assert "COLLC_SHIM_CHECK" not in proc.stderr


def _broken_ring(tmp_path: Path) -> Built:
    """ring_allreduce with one reduce turned into a copy after verification: a wrong library."""
    schedule = _schedule("ring_allreduce", {"p": 4})
    step = schedule.steps[0]
    ops = list(step.ops)
    i = next(i for i, op in enumerate(ops) if op.kind is OpKind.RECV and op.action is Action.REDUCE)
    ops[i] = dataclasses.replace(ops[i], action=Action.COPY)
    steps = (dataclasses.replace(step, ops=tuple(ops)), *schedule.steps[1:])
    broken = dataclasses.replace(schedule, steps=steps)
    mpi_c.generate(broken, tmp_path)
    return Built(broken, mpi_c.build(tmp_path, broken))


def test_check_mode_aborts_on_a_broken_library(tmp_path: Path, driver: Path) -> None:
    b = _broken_ring(tmp_path)
    plain = run_driver(driver, b, "--quick")
    assert plain.returncode != 0 and "FAIL allreduce" in plain.stderr  # the driver sees the damage
    checked = run_driver(driver, b, "--quick", env={"COLLC_SHIM_CHECK": "1"})
    assert checked.returncode != 0
    assert re.search(
        r"collc: MPI_Allreduce(_c)? ring_allreduce p=4 rank \d: COLLC_SHIM_CHECK: element \d+ differs from PMPI",
        checked.stderr,
    ), checked.stderr[-2000:]
    assert "FAIL allreduce" not in checked.stderr  # the check fired before the driver looked


def test_fortran_handles_and_mpi4py(built: dict[str, Built]) -> None:
    """collc_<alg>_allreduce_f through ctypes, and mpi4py's Allreduce reaching MPI_Allreduce_c, checked."""
    b = built["swing_bw"]
    env = {"COLLC_SHIM_LOG": "1", "COLLC_SHIM_CHECK": "1"}
    proc = mpirun(4, [sys.executable, str(CTYPES_SCRIPT), str(b.lib), "swing_bw"], preload=str(b.lib), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.strip() == "ok"
    entries = {line.split()[1] for line in proc.stderr.splitlines() if line.startswith("collc: ")}
    assert entries == {"MPI_Allreduce_c", "collc_swing_bw_allreduce_f"}
