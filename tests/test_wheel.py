"""The built wheel: its contents, and `collc` working from a fresh environment.

The wheel is installed into a virtual environment outside the checkout.  Its
dependencies resolve without a download from the environment that runs the
tests: a ``.pth`` file lists that environment's site-packages folders (whether
it is a virtual environment or the system's), so that what the test extras
installed is what the wheel sees.  A folder named in a ``.pth`` file is put on
``sys.path`` without running the ``.pth`` files inside it, so an editable
install of collc there stays out of sight; the tests still make sure that the
environment really imports the wheel.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TIMEOUT = 300

REQUIRED_IN_WHEEL = (
    "collc/_data/grammar/coll.lark",
    "collc/_data/grammar/prelude.coll",
    "collc/_data/examples/swing_bw.coll",
)


def _env() -> dict[str, str]:
    """The environment for commands run in the venv: nothing that points back at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    env["NO_COLOR"] = "1"
    return env


def _run(args: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def build_wheel(source: Path, outdir: Path) -> subprocess.CompletedProcess[str]:
    """Build a wheel of ``source`` without downloading anything when the backend is installed."""
    have_backend = importlib.util.find_spec("hatchling") is not None
    if importlib.util.find_spec("build") is not None:
        cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir)]
        if have_backend:
            cmd.append("--no-isolation")
    else:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(outdir)]
        if have_backend:
            cmd.append("--no-build-isolation")
        cmd.append(".")
    return _run([*cmd], cwd=source)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    outdir = tmp_path_factory.mktemp("wheelhouse")
    _ok(build_wheel(REPO, outdir))
    (whl,) = outdir.glob("collc-*.whl")
    return whl


def _dependency_folders() -> list[str]:
    """The site-packages folders of the environment running the tests, where collc's dependencies are."""
    folders = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return list(dict.fromkeys(str(Path(f).resolve()) for f in folders if Path(f).is_dir()))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    root = tmp_path_factory.mktemp("venv") / "env"
    assert not root.resolve().is_relative_to(REPO)
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", root], cwd=root.parent))
    python = root / "bin" / "python"
    where = _ok(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root.parent))
    (Path(where.strip()) / "collc-test-dependencies.pth").write_text(
        "".join(f"{folder}\n" for folder in _dependency_folders())
    )
    if _run([python, "-m", "pip", "--version"], cwd=root.parent).returncode != 0:
        _ok(_run([python, "-m", "ensurepip", "--default-pip"], cwd=root.parent))
    _ok(
        _run(
            [python, "-m", "pip", "install", "--force-reinstall", "--no-deps", "--no-index", wheel],
            cwd=root.parent,
        )
    )
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working directory outside the checkout, where `examples/` etc. do not exist."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    assert not cwd.resolve().is_relative_to(REPO)
    return cwd


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = zf.read(entry_points).decode()
    for name in REQUIRED_IN_WHEEL:
        assert name in names, name
    for path in [*EXAMPLES.glob("*.coll"), *EXAMPLES.glob("lib/*.coll"), *EXAMPLES.glob("compression/*.coll")]:
        assert f"collc/_data/examples/{path.relative_to(EXAMPLES).as_posix()}" in names, path
    for module in ("collc/__init__.py", "collc/cli/__init__.py", "collc/api.py", "collc/resources.py"):
        assert module in names, module
    assert not any(n.startswith(("tests/", "examples/", "grammar/")) for n in names)
    assert "collc = collc.cli:main" in scripts


def test_venv_imports_the_wheel(venv: Path, outside: Path) -> None:
    code = (
        "import collc, collc.cli, collc.resources as r; "
        "print(collc.__file__); print(collc.cli.__file__); "
        "print(r.data_dir('grammar')); print(r.data_dir('examples'))"
    )
    paths = [Path(line) for line in _ok(_run([venv / "bin" / "python", "-c", code], cwd=outside)).splitlines()]
    assert len(paths) == 4
    for path in paths:
        assert path.resolve().is_relative_to(venv.resolve()), path
        assert not path.resolve().is_relative_to(REPO), path
    assert paths[2].name == "grammar" and paths[2].parent.name == "_data"
    assert (venv / "bin" / "collc").is_file()


def test_check_bundled_example(venv: Path, outside: Path) -> None:
    out = _ok(_run([venv / "bin" / "collc", "check", "swing_bw", "-p", "8"], cwd=outside))
    assert "swing_bw" in out and ": correct" in out


def test_run_bundled_example(venv: Path, outside: Path) -> None:
    out = _ok(_run([venv / "bin" / "collc", "run", "ring_allreduce", "-p", "4", "--size", "4K"], cwd=outside))
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(rows) == 1
    assert rows[0][0] == "4096" and rows[0][-1] == "0"


def test_check_a_copied_example_with_include(venv: Path, outside: Path) -> None:
    work = outside / "mine"
    (work / "lib").mkdir(parents=True)
    shutil.copy(EXAMPLES / "ring_allreduce.coll", work / "ring_allreduce.coll")
    shutil.copy(EXAMPLES / "lib" / "ring.coll", work / "lib" / "ring.coll")
    assert 'include "lib/ring.coll"' in (work / "ring_allreduce.coll").read_text()
    out = _ok(_run([venv / "bin" / "collc", "check", "mine/ring_allreduce.coll", "-p", "6"], cwd=outside))
    assert "ring_allreduce" in out and ": correct" in out


def test_examples_listed(venv: Path, outside: Path) -> None:
    out = _ok(_run([venv / "bin" / "collc", "examples"], cwd=outside))
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    compression = sorted(p.stem for p in EXAMPLES.glob("compression/*.coll"))
    torus = sorted(p.stem for p in EXAMPLES.glob("torus/*.coll"))
    hierarchical = sorted(p.stem for p in EXAMPLES.glob("hierarchical/*.coll"))
    assert listed == sorted(p.stem for p in EXAMPLES.glob("*.coll")) + compression + torus + hierarchical


def test_sim_of_a_bundled_torus_program_with_a_plot(venv: Path, outside: Path) -> None:
    """The torus programs, their library and the prelude ship in the wheel; matplotlib is installed with it."""
    cmd = [venv / "bin" / "collc", "sim", "swing_bw_torus", "--topology", "torus:4x4", "--sizes", "1KiB:4KiB"]
    out = _ok(_run([*cmd, "--plot", "g.png"], cwd=outside))
    assert "swing_bw_torus" in out and "4KiB" in out
    assert (outside / "g.png").stat().st_size > 10_000


def _tracked_files() -> list[str] | None:
    """What a clean checkout holds once the working tree is committed (None outside git)."""
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        return None
    return [name for name in proc.stdout.split("\0") if name]


def test_wheel_builds_from_a_clean_checkout(tmp_path: Path) -> None:
    files = _tracked_files()
    if files is None:
        pytest.skip("not a git checkout")
    clean = tmp_path / "clean"
    for name in files:
        source = REPO / name
        if source.is_file():
            target = clean / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    outdir = tmp_path / "dist"
    proc = build_wheel(clean, outdir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = outdir.glob("collc-*.whl")
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
    for name in REQUIRED_IN_WHEEL:
        assert name in names, name
