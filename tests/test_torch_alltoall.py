"""All-to-all and the collectives with counts given at run time on the collc torch backend (collc/torch/alltoall.py).

In this process: the alltoall setting, the entry points with counts given at run time that the libraries
export, which schedules can run such counts, and the errors that name disagreeing counts.  Then real runs
under torchrun (tests/torchrun/alltoall_ranks.py): all_to_all_single with and without split sizes (zeros
included), all_to_all of lists, all_gather and reduce_scatter of uneven lists, each checked against the
values every rank computes itself and against gloo where gloo takes the call; the routes the calls took
(the group's stats: collc, not gloo); planted faults (split sizes or lists that disagree between ranks)
ending in an error on every rank; and the C API with MPI's own handles.  3 ranks in the default suite, 2 to
5 (with more dtypes, Bruck's alltoall and a compressed schedule) under ``-m slow``.
"""

from __future__ import annotations

import ctypes
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")
pytest.importorskip("mpi4py", reason="the collc backend runs its libraries over MPI (mpi4py)")

from test_torch_collectives import torchrun  # noqa: E402

import collc.torch  # noqa: E402  (after the importorskip)
from collc.torch import alltoall, config, schedules  # noqa: E402
from collc.torch.plan import CollcError  # noqa: E402
from collc.torch.schedules import ScheduleError, prepare  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RANKS = Path(__file__).resolve().parent / "torchrun" / "alltoall_ranks.py"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("collc-torch-alltoall-cache")


# --------------------------------------------------------------------------
# In this process
# --------------------------------------------------------------------------


def test_alltoall_has_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    config.reset()
    assert config.current().schedule("alltoall") == "pairwise_alltoall" == config.DEFAULTS["alltoall"]
    monkeypatch.setenv("COLLC_ALLTOALL", "bruck_alltoall")
    assert config.current().schedule("alltoall") == "bruck_alltoall"
    assert collc.torch.configure(alltoall="gloo").schedule("alltoall") == config.GLOO
    config.reset()
    with pytest.raises(ValueError, match=r"alltoall must name a \.coll file"):
        collc.torch.configure(alltoall="")


def test_libraries_export_the_entry_points_with_counts(cache: Path) -> None:
    """The three libraries the runs use (compiled here first, then found in the cache by the ranks)."""
    for collective, source, name in (("alltoall", "pairwise_alltoall", "alltoallv"),
                                     ("allgather", "ring_allgather", "allgatherv"),
                                     ("reduce_scatter", "ring_reduce_scatter", "reduce_scatter")):  # fmt: skip
        compiled = prepare(collective, source, 3, cache_dir=cache)
        assert compiled.counts and not compiled.weighted and not compiled.compressed
        lib = ctypes.CDLL(str(compiled.library))
        for symbol in (f"collc_{source}_{name}", f"collc_{source}_{name}_f"):
            assert hasattr(lib, symbol), f"{compiled.library} lacks {symbol}"
    with pytest.raises(ScheduleError, match=r"pairwise_alltoall\.coll implements alltoall, not allgather"):
        prepare("allgather", "pairwise_alltoall", 3, cache_dir=cache)


def test_counts_given_at_run_time_need_chunks_of_no_fixed_size(cache: Path) -> None:
    compiled = prepare("alltoall", "pairwise_alltoall", 3, cache_dir=cache)
    assert compiled.counts
    assert not replace(compiled, weighted=True).counts  # chunk weights of its own
    assert not replace(compiled, codecs=("ebq(eb=0.001)",)).counts  # compression points


def test_the_digest_holds_the_generation_of_the_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library compiled before the entry points with counts existed is never taken from the cache."""
    build = schedules.Build("mpi-c")
    before = schedules._digest({"a.coll": "text"}, {"p": 3}, (), build)
    monkeypatch.setattr(schedules, "MPI_C_ENTRY_POINTS", schedules.MPI_C_ENTRY_POINTS - 1)
    assert schedules._digest({"a.coll": "text"}, {"p": 3}, (), build) != before


def test_split_sizes_become_element_counts() -> None:
    t = torch.empty(6, 4)
    assert alltoall._split_counts([], t, 3, "input", "x") == [8, 8, 8]
    assert alltoall._split_counts([0, 5, 1], t, 3, "input", "x") == [0, 20, 4]
    with pytest.raises(CollcError, match=r"first dimension \(6\) is not a multiple of the group size 4"):
        alltoall._split_counts([], t, 4, "output", "x")
    with pytest.raises(CollcError, match=re.escape("split sizes [1, 2, 4] add up to 7, and the input's first")):
        alltoall._split_counts([1, 2, 4], t, 3, "input", "x")
    with pytest.raises(CollcError, match=r"one per rank \(3\), none negative"):
        alltoall._split_counts([7, -1, 0], t, 3, "input", "x")


def test_disagreeing_counts_name_both_ranks() -> None:
    p = 3
    send = np.array([[1, 2, 0], [4, 0, 1], [2, 2, 2]])
    table = np.hstack([send, send.T])  # row r: what r sends, then what r expects from each rank
    assert alltoall._a2a_problem("a2a", p, table) is None
    table[1, p + 0] = 3  # rank 1 expects 3 elements from rank 0, which sends it 2
    table[2, p + 1] = 0  # rank 2 expects nothing from rank 1, which sends it 1
    text = alltoall._a2a_problem("a2a", p, table) or ""
    assert text.startswith("collc: a2a: the ranks' split sizes disagree: rank 0 sends 2 elements to rank 1, "
                           "which expects 3; rank 1 sends 1 element to rank 2, which expects 0; ")  # fmt: skip
    lists = np.array([[1, 2, 3], [1, 2, 3], [1, 5, 3]])
    assert alltoall._list_problem("ag", "all_gather", lists[:2, :2]) is None
    text = alltoall._list_problem("ag", "all_gather", lists) or ""
    assert "rank 1 sends 2 elements, and rank 2's list has 5 for it" in text
    text = alltoall._list_problem("rs", "reduce_scatter", lists) or ""
    assert "rank 1 receives 2 elements, and rank 2's list has 5 for it" in text


# --------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------


def _check_run(out: Path, p: int, full: bool) -> None:
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(p)]
    for r, rank in enumerate(ranks):
        assert rank["wrong"] == [], rank["wrong"]
        assert rank["cases"] >= 70
        assert rank["warnings"] == []  # nothing went to gloo unasked
        stats = rank["stats"]  # the routes: every call on collc
        assert set(stats) == {"collc all_to_all", "collc all_to_all_v", "collc all_gather_v",
                              "collc reduce_scatter_v"}, stats  # fmt: skip
        assert stats["collc all_to_all_v"] >= 12 and stats["collc all_gather_v"] >= 6
        assert stats["collc reduce_scatter_v"] >= 6
        gloo_stats = {"gloo all_to_all_v": 1, "gloo reduce_scatter_v": 1} if full else {"gloo all_to_all_v": 1}
        assert rank["gloo_stats"] == gloo_stats  # the "gloo" setting; full: the compressed schedule
        if full:
            (note,) = rank["compressed_warning"]
            assert "reduce_scatter with counts given at run time on compressed_ring_reduce_scatter" in note
        assert rank["c_api"] == ["collc_pairwise_alltoall_alltoallv", "collc_ring_allgather_allgatherv",
                                 "collc_ring_reduce_scatter_reduce_scatter"]  # fmt: skip
        assert r != 0 or rank["alone"] == {"local all_to_all": 2, "local all_gather": 1}
        errors = rank["errors"]
        assert all(rank["healthy"].values()), rank["healthy"]
        assert not [case for case, text in errors.items() if text == "no error"], errors
        assert "the ranks' split sizes disagree: rank 0 sends 12 elements to rank 1, which expects 8" in errors[
            "splits disagree"]  # fmt: skip
        assert "some ranks passed split sizes (or lists of tensors) and others none" in errors[
            "split sizes on one rank only"]  # fmt: skip
        bad = errors["bad splits on rank 1"]
        if r == 1:
            assert f"the input split sizes {[2] * (p - 1) + [5]} add up to {2 * p + 3}" in bad
        else:
            assert "rank 1 refused the call (see the error there); no data was exchanged" in bad
        assert "the ranks' all_gather lists disagree: rank 0 sends 1 element, and rank 1's list has 3 for it" in (
            errors["all_gather lists disagree"])  # fmt: skip
        assert (f"the ranks' reduce_scatter lists disagree: rank {p - 1} receives {p + 1} elements, and rank 0's "
                "list has 1 for it") in errors["reduce_scatter lists disagree"]  # fmt: skip


def test_alltoall_and_uneven_lists_on_three_ranks(cache: Path, tmp_path: Path) -> None:
    torchrun(3, RANKS, str(tmp_path), cache=cache)
    _check_run(tmp_path, 3, full=False)


@pytest.mark.slow
@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_alltoall_and_uneven_lists_full(p: int, cache: Path, tmp_path: Path) -> None:
    torchrun(p, RANKS, str(tmp_path), "full", cache=cache)
    _check_run(tmp_path, p, full=True)
