"""Soundness of the verifier's paths on gather, scatter, scan, exscan and barrier (tests/soundness_newcoll.py):

* hand-written programs, each right at small p and wrong from some p on (or at some roots): a gather whose
  parent is not rotated with the root, a gather whose chunks do not move with the root, a scatter whose
  subtree bound is off from p >= 13, a scan whose receive copies instead of reducing at one rank, a scan
  that skips a step for p > 16, a scan that counts a contribution twice, an exclusive scan whose shift reads
  the wrong rank, a barrier that stops a step early: no path may call them correct where the per-op checker
  finds them wrong;
* a small seeded campaign of each new family, with no unsound verdict and the planted faults found;
* a gather whose rank 1 sends to rank 0 instead of the root: proved at root 0, and not for every root (the
  proof for every root must oblige every op's peer to move with the root, not only the chunks).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import soundness_gen as sg
import soundness_newcoll as nc

from collc import api
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import Program
from collc.ir import ParamValue
from collc.verify import forall, sweep, vector
from collc.verify.check import check

_ROOTED = """\
algorithm {name} : {coll}
param p : int where p >= 1
param root : int = 0 where 0 <= root < p
chunks p

fn vrank(r) = (r - root) mod p
fn real(v) = (v + root) mod p
fn subtree(lo, hi) = {{x for x in 0 .. p if lo <= vrank(x) < hi}}

"""

GATHER = (
    _ROOTED
    + """\
phase gather:
  for step s in 0 .. ceil_log2(p):
    let d = 1 << s
    let v = vrank(rank)
    let up = {up}
    let mine = {mine}
    if v % (2 * d) == d:
      send mine to up
    elif v % (2 * d) == 0 and v + d < p:
      recv subtree(v + d, v + 2 * d) from real(v + d) copy
"""
)

SCATTER = (
    _ROOTED
    + """\
phase scatter:
  for step s in 0 .. ceil_log2(p):
    let d = 1 << (ceil_log2(p) - 1 - s)
    let v = vrank(rank)
    let bound = {bound}
    if v % (2 * d) == 0 and v + d < p:
      send subtree(v + d, bound) to real(v + d)
    elif v % (2 * d) == d:
      recv subtree(v, v + d) from real(v - d) copy
"""
)

SCAN = """\
algorithm {name} : {coll}
param p : int where p >= 1
chunks 1

phase scan:
  for step s in {steps}:
    let d = {dist}
    if rank + d < p:
      send 0 to rank + d
    if rank >= d:
      if {copy}:
        recv 0 from rank - d copy
      else:
        recv 0 from rank - d reduce
"""

SHIFT = """
phase shift:
  step:
    let e = {shift}
    if rank + e < p:
      send 0 to rank + e
    if rank >= e:
      recv 0 from rank - e copy
"""

BARRIER = """\
algorithm late_barrier : barrier
param p : int where p >= 1
chunks p

fn seen(r, n) = {c for c in 0 .. p if (r - c) mod p < n}

phase barrier:
  for step s in 0 .. min(ceil_log2(p), 4):
    let d = 1 << s
    send seen(rank, d) to (rank + d) mod p
    recv seen((rank - d) mod p, d) from (rank - d) mod p copy
"""

UNMOVED = "{x for x in 0 .. p if v <= x < v + d}"  # the chunks of relative ranks taken as real ranks
_GOOD_SCAN = {"steps": "0 .. ceil_log2(p)", "dist": "1 << s", "copy": "false"}

FAULTS: dict[str, str] = {
    "gather_parent_not_rotated": GATHER.format(name="g1", coll="gather", up="real(v - d) if p < 13 else v - d",
                                               mine="subtree(v, v + d)"),
    "gather_chunks_not_moved": GATHER.format(name="g2", coll="gather", up="real(v - d)",
                                             mine="subtree(v, v + d) if p < 13 else " + UNMOVED),
    "scatter_subtree_bound": SCATTER.format(name="s1", coll="scatter", bound="v + 2 * d + (1 if p >= 13 else 0)"),
    "scan_copy_at_one_rank": SCAN.format(name="c1", coll="scan", **{**_GOOD_SCAN, "copy": "rank == 21 and p > 12"}),
    "scan_missing_step": SCAN.format(name="c2", coll="scan", **{**_GOOD_SCAN, "steps": "0 .. min(ceil_log2(p), 4)"}),
    "scan_counted_twice": SCAN.format(name="c3", coll="scan",
                                      **{**_GOOD_SCAN, "dist": "max(1, (1 << s) - 1) if p > 12 else 1 << s"}),
    "exscan_shift_wrong_rank": SCAN.format(name="e1", coll="exscan", **_GOOD_SCAN)
    + SHIFT.format(shift="2 if p >= 13 else 1"),
    "barrier_stops_early": BARRIER,
}  # fmt: skip

SMALL = (1, 2, 3, 5, 8, 11)
LARGE = (13, 20, 24, 33)


def _program(text: str, tmp_path: Path) -> Program:
    path = tmp_path / "prog.coll"
    path.write_text(text)
    return api.parse(text, str(path)).program


def _instances(program: Program, ps: tuple[int, ...]) -> list[dict[str, ParamValue]]:
    rooted = any(param.name == "root" for param in program.params)
    out: list[dict[str, ParamValue]] = []
    for p in ps:
        out += [{"p": p, "root": r} for r in sorted({0, 1, p // 2, p - 1} & set(range(p)))] if rooted else [{"p": p}]
    return out


def _truth(program: Program, params: dict[str, ParamValue]) -> bool:
    try:
        return check(elaborate(program, params), fast=False).ok
    except CollError:
        return False


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_planted_fault_is_not_called_correct(name: str, tmp_path: Path) -> None:
    program = _program(FAULTS[name], tmp_path)
    assert all(_truth(program, params) for params in _instances(program, SMALL)), "the fault must hide at small p"
    truth = {tuple(sorted(params.items())): (params, _truth(program, params)) for params in _instances(program, LARGE)}
    assert not all(ok for _, ok in truth.values()), "the fault must show at some larger p"
    model = vector.prepare(program, {})
    if model is not None:
        for params, ok in truth.values():
            got = vector.check_model(program, model, params)
            assert ok or got is None or not got[1].ok, f"check_model says {params} is correct; per-op: wrong"
    result = sweep.sweep(program, [params for params, _ in truth.values()], jobs=1, keep_going=True)
    for r in result.results:
        _, ok = truth[tuple(sorted(r.params.items()))]
        assert (r.status == "ok") == ok, f"the sweep at {r.params}: {r.status}, the per-op checker: {ok}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAULTS))
def test_planted_fault_is_not_proved(name: str, tmp_path: Path) -> None:
    program = _program(FAULTS[name], tmp_path)
    allp = forall.check_all_p(program, {}, bound=8, solver_seconds=5)
    wrong = [params for params in _instances(program, LARGE) if not _truth(program, params)]
    at_base = [params for params in wrong if params.get("root", 0) == 0]
    assert allp.status != "proved" or (not allp.every and not at_base), f"{allp.status} {allp.every}: {wrong}"


FAST = sg.Options(small=2, mid=3, big=0, max_p=40, bound=6, solver_seconds=3, allp_every=2, path_timeout=30,
                  allp_timeout=40, planted=0.7)  # fmt: skip


@pytest.mark.parametrize("family", ["gather", "scatter", "scan", "barrier"])
def test_family_campaign_finds_no_unsound_verdict(family: str) -> None:
    results = [nc.run_program(index, 3, replace(FAST, family=family)) for index in range(4)]
    assert not any(r.skipped for r in results), [r.skipped for r in results]
    truths = [t.status for r in results for t in r.truths]
    assert truths.count("ok") >= 10, "the unplanted programs must be correct at most instances"
    assert truths.count("wrong") + truths.count("error") >= 2, "the planted faults must show"
    bad = [(r.index, c) for r in results for c in r.unsound()]
    assert not bad, "unsound verdicts:\n" + "\n".join(
        f"program {i} {c.path} p={c.label}: {c.claim} where the per-op checker says {c.truth}" for i, c in bad
    )


def test_generators_parse_and_unplanted_programs_are_correct(tmp_path: Path) -> None:
    names: set[str] = set()
    for family in ("gather", "scatter", "scan", "barrier"):
        options = sg.Options(family=family, planted=0.0)
        for index in range(6):
            prog = nc.make_program(5, index, options)
            assert prog == nc.make_program(5, index, options) and prog.plan is None
            folder = tmp_path / f"{family}{index}"
            folder.mkdir()
            program = sg.load(prog, folder)
            names.add(prog.name)
            for p in (1, 2, 5, 7, 12):
                params: dict[str, ParamValue] = {**dict(prog.fixed), "p": p}
                if prog.p_kind == "rooted":
                    params["root"] = (index * 3 + 1) % p
                assert check(elaborate(program, params), fast=False).ok, f"{prog.name} at {params}:\n{prog.text}"
    assert len(names) >= 6, names


# Found by `benchmarks/soundness.py --family gather --programs 40 --seed 31` (programs 16 and 20): a linear gather
# whose rank 1 sends to rank 0 instead of the root.  At root 0 that is the root, so the proof at the base root
# holds; at any other root it is wrong (p=3, root=2: rank 1 sends chunk 1 to rank 0, which does not receive it),
# yet the proof for every root (`collc.verify.roots`) takes it as the base root's schedule rotated.
PEER_NOT_ROTATED_AT_ONE_RANK = """\
algorithm v_inline : gather
param p : int where p >= 1
param root : int = 0 where 0 <= root < p
chunks p

fn real(v) = (v + root) mod p

phase gather:
  for step t in 1 .. p:
    let w = real(t)
    if rank == w:
      send w to (0 if rank == 1 else root)
    if rank == root:
      recv w from w copy
"""


def test_peer_not_rotated_at_one_rank_is_not_proved_for_every_root(tmp_path: Path) -> None:
    program = _program(PEER_NOT_ROTATED_AT_ONE_RANK, tmp_path)
    assert not _truth(program, {"p": 3, "root": 2})
    allp = forall.check_all_p(program, {}, bound=8, solver_seconds=5)
    assert allp.status != "proved" or not allp.every, allp.every
