"""gather, scatter and barrier on the collc torch.distributed backend (collc/torch/rooted.py).

In this process: the settings of the three collectives, their schedules compiled for a group, and the block
layouts the library writes in place.  Then real runs of 2 to 6 processes under torchrun
(tests/torchrun/rooted_vs_reference.py): every root, dtypes from bool to complex64, results compared bit for
bit with the values each rank computes itself, bad input, the gloo setting and the barrier.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")
pytest.importorskip("mpi4py", reason="the collc backend runs its libraries over MPI (mpi4py)")

import collc.torch  # noqa: E402  (after the importorskip)
from collc.backends.mpitools import mpi_env  # noqa: E402
from collc.torch import config, ops  # noqa: E402
from collc.torch.schedules import ScheduleError, prepare  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "torchrun"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("collc-torch-rooted-cache")


def torchrun(n: int, script: Path, *args: str, cache: Path, timeout: float = 600) -> None:
    """Run ``script ARGS`` on ``n`` ranks under torchrun (MPI for the collc libraries), with collc's settings
    cleared but its torch cache; the run must succeed."""
    env = mpi_env(n)
    env.update({"COLLC_TORCH_CACHE": str(cache), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    for key in list(env):
        if key.startswith("COLLC_") and key not in ("COLLC_TORCH_CACHE", "COLLC_MPIEXEC", "COLLC_MPICC"):
            del env[key]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", str(script),
               *args]  # fmt: skip
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(command)} failed ({proc.returncode}):\n{output[-6000:]}"


# --------------------------------------------------------------------------
# In this process
# --------------------------------------------------------------------------


def test_gather_scatter_and_barrier_have_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    config.reset()
    s = config.current()
    assert (s.schedule("gather"), s.schedule("scatter"), s.schedule("barrier")) == (
        "binomial_gather", "binomial_scatter", "dissemination_barrier")  # fmt: skip
    monkeypatch.setenv("COLLC_GATHER", "bine_gather")
    monkeypatch.setenv("COLLC_BARRIER", "gloo")
    assert config.current().schedule("gather") == "bine_gather" and config.current().schedule("barrier") == "gloo"
    s = collc.torch.configure(gather="binomial_gather", scatter="gloo")
    assert (s.schedule("gather"), s.schedule("scatter"), s.schedule("barrier")) == (
        "binomial_gather", "gloo", "gloo")  # fmt: skip
    config.reset()
    with pytest.raises(ValueError, match=r"barrier must name a \.coll file"):
        collc.torch.configure(barrier="")


def test_torch_has_no_scan_so_none_is_offered() -> None:
    assert "scan" not in config.COLLECTIVES and "exscan" not in config.COLLECTIVES
    with pytest.raises(TypeError):
        collc.torch.configure(scan="hillis_steele_scan")  # type: ignore[call-arg]


def test_rooted_schedules_compile_for_their_default_root(cache: Path) -> None:
    gather = prepare("gather", "binomial_gather", 5, cache_dir=cache)
    scatter = prepare("scatter", "binomial_scatter", 5, cache_dir=cache)
    barrier = prepare("barrier", "dissemination_barrier", 5, cache_dir=cache)
    assert (gather.root, scatter.root, barrier.root) == (0, 0, None)
    assert all(c.library.is_file() and not c.compressed for c in (gather, scatter, barrier))
    assert prepare("gather", str(SCRIPTS / "gather_root1.coll"), 3, cache_dir=cache).root == 1
    with pytest.raises(ScheduleError, match=r"binomial_gather\.coll implements gather, not scatter"):
        prepare("scatter", "binomial_gather", 4, cache_dir=cache)
    with pytest.raises(ScheduleError, match=r"dissemination_barrier\.coll implements barrier, not allgather"):
        prepare("allgather", "dissemination_barrier", 4, cache_dir=cache)


def test_consecutive_blocks_are_one_buffer() -> None:
    buf = torch.arange(12, dtype=torch.float32)
    flat = ops._blocks(list(buf.chunk(4)))
    assert flat is not None and flat.data_ptr() == buf.data_ptr() and torch.equal(flat, buf)
    assert ops._blocks(list(buf.view(4, 3).unbind(0))) is not None  # rows of a matrix
    assert ops._blocks(list(reversed(buf.chunk(4)))) is None  # out of order
    assert ops._blocks([torch.zeros(3) for _ in range(4)]) is None  # separate tensors
    assert ops._blocks([buf[0:3], buf[3:6].view(torch.int32)]) is None  # another dtype


# --------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------

EXTRA = {  # gather:scatter pairs run after the defaults, at some sizes
    p: [f"{SCRIPTS / 'gather_root1.coll'}:{SCRIPTS / 'scatter_root1.coll'}", "bine_gather:bine_scatter"] for p in (3, 5)
}


@pytest.mark.parametrize("p", [3, *(pytest.param(p, marks=pytest.mark.slow) for p in (2, 4, 5, 6))])
def test_gather_scatter_and_barrier_equal_the_reference(p: int, cache: Path, tmp_path: Path) -> None:
    torchrun(p, SCRIPTS / "rooted_vs_reference.py", str(tmp_path), *EXTRA.get(p, []), cache=cache)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(p)]
    for r, rank in enumerate(ranks):
        assert rank["wrong"] == [], rank["wrong"]
        assert rank["cases"] >= 2 * 11 * 3 * 3 * p  # both collectives, every dtype, shape, layout and root
        assert rank["warnings"] == []  # nothing went to gloo unasked
        stats = rank["stats"]
        assert stats["collc gather"] > 30 * p and stats["collc scatter"] > 30 * p and stats["collc barrier"] == 3
        assert stats["gloo gather"] == stats["gloo scatter"] == stats["gloo barrier"] == 1  # the gloo setting
        assert rank["barrier"] == [True, True, True]
        assert r not in (0, p - 1) or rank["sub_stats"] == {"collc gather": 2, "collc scatter": 2}
        errors = rank["errors"]
        assert all(rank["healthy"].values()), rank["healthy"]
        assert not [case for case, text in errors.items() if text == "no error"], errors
        assert "the ranks disagree on the element count (rank 0: 4, rank 1: 5" in errors["sizes differ"]
        assert "implements allgather, not scatter" in errors["schedule of another collective"]
        gather_list = "every output tensor must have the input's 4 elements and dtype float32"
        scatter_list = "every input tensor must have the output's 4 elements and dtype float32"
        refused = r"rank {} refused the call \(see the error there\); no data was exchanged"
        assert errors["uneven gather list"].endswith(gather_list) if r == 0 else re.search(
            refused.format(0), errors["uneven gather list"])  # fmt: skip
        assert errors["uneven scatter list"].endswith(scatter_list) if r == p - 1 else re.search(
            refused.format(p - 1), errors["uneven scatter list"])  # fmt: skip
        assert f"gather needs one output list of {p} tensors" in errors["short gather list"] if r == 0 else re.search(
            refused.format(0), errors["short gather list"])  # fmt: skip
