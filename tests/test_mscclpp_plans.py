"""`collc check PLAN.json`: MSCCL++ execution plans, read and checked (collc/verify/mscclpp_plans.py).

* the plans of tests/data/mscclpp (ring, packet ring, all-pairs by puts, packets and reads, threadblock groups,
  gets, reduce-scatter, alltoall and hierarchical allreduce over memory and port channels, tree, pipelines; 8 to
  64 GPUs), written by make_plans.py there, are correct in under a second each, and a mistake planted in each is
  found, of the kind expected;
* small plans and their mutants get the same verdict from the checker as from `explore` below, an independent
  brute-force search over every interleaving of the threads (two per threadblock) under sequential consistency;
* malformed and unsupported inputs are clear errors with file, line and JSON path;
* semantics the checker takes from the executor (flush counts, relaxed signals, threads between nops);
* the command line: the verdict, exit codes, --json.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from collc.cli import main
from collc.diagnostics import CollError
from collc.frontend.mscclpp_plan import parse_plan, read_plan
from collc.verify.mscclpp_plans import MscclppReport, check_plan

DATA = Path(__file__).parent / "data" / "mscclpp"
PLANS = sorted(DATA.glob("*.json"))


def _make_plans() -> ModuleType:  # a module loaded from its file
    spec = importlib.util.spec_from_file_location("make_mscclpp_plans", DATA / "make_plans.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_mscclpp_plans"] = module
    spec.loader.exec_module(module)
    return module


MAKE = _make_plans()


def _check(plan: dict) -> MscclppReport:
    return check_plan(parse_plan(json.dumps(plan, indent=1), "plan.json"))


def _ops(plan: dict, gpu: int, tb: int) -> list[dict]:
    return plan["gpus"][gpu]["threadblocks"][tb]["ops"]


def _nth(ops: list[dict], name: str, n: int = 0) -> int:
    return [k for k, op in enumerate(ops) if op["name"] == name][n]


def test_the_data_files_are_what_make_plans_writes() -> None:
    assert {p.stem for p in PLANS} == set(MAKE.PLANS)
    for path in PLANS:
        assert path.read_text() == MAKE.PLANS[path.stem](), f"{path.name}: run tests/data/mscclpp/make_plans.py"


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_each_plan_is_correct_in_under_a_second(path: Path) -> None:
    start = time.perf_counter()
    report = check_plan(read_plan(path))
    seconds = time.perf_counter() - start
    assert report.ok, [f"{f.kind}: {f.message}" for f in report.findings[:3]]
    assert seconds < 1.0, seconds


def _drop(gpu: int, tb: int, name: str, n: int = 0, pipeline: bool = False) -> Callable[[dict], None]:
    def plant(plan: dict) -> None:
        ops = _ops(plan, gpu, tb)
        if pipeline:
            ops = ops[0]["ops"]
        del ops[_nth(ops, name, n)]

    return plant


def _set(gpu: int, tb: int, k: int, **fields) -> Callable[[dict], None]:
    def plant(plan: dict) -> None:
        op = _ops(plan, gpu, tb)[k]
        for key, value in fields.items():
            if value is None:
                op.pop(key)
            else:
                op[key] = value(op) if callable(value) else value

    return plant


def _swap(gpu: int, tb: int, k: int) -> Callable[[dict], None]:
    def plant(plan: dict) -> None:
        ops = _ops(plan, gpu, tb)
        ops[k], ops[k + 1] = ops[k + 1], ops[k]

    return plant


def _both(*plants: Callable[[dict], None]) -> Callable[[dict], None]:
    def plant(plan: dict) -> None:
        for p in plants:
            p(plan)

    return plant


# One planted mistake per plan, and the kind of finding it must give.
MISTAKES = {
    "ring_allreduce_8": (_drop(3, 0, "wait", 2), "race"),  # a dropped wait: the reduce reads scratch too early
    "ring_allreduce_packets_8": (_swap(2, 0, 5), "race"),  # a nop and the send of what the reduce wrote, swapped
    "allpairs_allreduce_packets_8": (_set(4, 2, 1, dst_buff=[{"type": "i", "index": 0, "size": 1}]), "postcondition"),
    "allpairs_allreduce_read_8": (_set(5, 0, 3, name="rre", dst_buff=lambda op: op["dst_buff"][:1]), "postcondition"),
    "allgather_groups_16": (_both(_drop(3, 5, "barrier", 1), _drop(3, 6, "barrier", 1)), "race"),  # missing barrier
    "allgather_get_32": (_drop(7, 1, "nop"), "race"),  # the signal may go before the get has read
    "reducescatter_allpairs_8": (_set(2, 7, 2, name="copy", src_buff=lambda op: op["src_buff"][:1]), "postcondition"),
    "alltoall_2x8": (_set(12, 1, 0, name="put"), "deadlock"),  # put with signal made a put over a port channel
    "hierarchical_allreduce_2x8": (_set(9, 7, 4, name="pws"), "race"),  # no flush: the transfer may still read
    "hierarchical_allreduce_8x8": (_drop(40, 2, "signal"), "deadlock"),
    "tree_allreduce_16": (_swap(9, 0, 0), "race"),  # a leaf's nop moved before its put: the signal may overtake it
    "pipelined_allgather_8": (_drop(1, 3, "wait", pipeline=True), "race"),
}


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_a_planted_mistake_is_found(path: Path) -> None:
    plant, kind = MISTAKES[path.stem]
    plan = json.loads(path.read_text())
    plant(plan)
    report = _check(plan)
    kinds = {f.kind for f in report.findings}
    assert kind in kinds, (kind, [f"{f.kind}: {f.message}" for f in report.findings[:4]])


# ---- an independent explorer -------------------------------------------------------------------------------------


SIGNALS = ("signal", "rlxsignal", "wait", "rlxwait", "sem_release", "sem_acquire")
# Which operands of a packet op are packets in the scratch buffer: source k, destination 10 + k; -1: every source
# after the first, -2: every destination after the first.
PACKETS = {"ppkt": (10, -2), "rppkt": (0, 10, -2), "upkt": (0,), "cpkt": (10,), "repkt": (-1,), "respkt": (-1, -2)}


class _Beyond(Exception):
    """An access beyond a buffer."""


def explore(plan: dict, limit: int = 400_000) -> str:
    """'ok', 'deadlock' or 'wrong' for a plan of memory channels (signal, wait and their relaxed forms, put, get,
    copy, re, res, rre, rres, nop, barrier, semaphores, and the packet ops ppkt, rppkt, upkt, cpkt, repkt, respkt:
    a packet read waits until the packet is written), from every interleaving of its threads.  Each threadblock
    has two threads and each chunk two elements; in a data op each thread does one element of every chunk, either
    way round (both are explored: no mapping of elements to threads holds across ops); thread k does the k-th
    channel or semaphore of a signal-like op; a nop waits for both threads, a barrier for all threads of its
    threadblocks.
    A GPU's outputs are compared when its last thread ends, and its buffers may not be touched after that.  Wrong:
    an output not the collective's, a touch after the end, or signals left over; deadlock: a state where no thread
    can move before all are done."""
    coll, p = plan["collective"], len(plan["gpus"])
    gpus = plan["gpus"]
    threads = [(g, t, e) for g, gpu in enumerate(gpus) for t in range(len(gpu["threadblocks"])) for e in (0, 1)]
    ops = [gpus[g]["threadblocks"][t]["ops"] for g, t, _ in threads]

    def where(g: int, buf: str, c: int) -> tuple[int, str, int]:
        if plan["inplace"] and coll == "allreduce" and buf == "o":
            return (g, "i", c)
        if plan["inplace"] and coll == "allgather" and buf == "i":
            return (g, "o", g * gpus[g]["input_chunks"] + c)
        return (g, buf, c)

    cells: dict[tuple, int] = {}
    for g, gpu in enumerate(gpus):
        for buf, n in (
            ("i", "input_chunks"),
            ("o", "output_chunks"),
            ("s", "scratch_chunks"),
            ("s#", "scratch_chunks"),
        ):
            for c in range(gpu[n]):
                for e in (0, 1):
                    cells.setdefault((*where(g, buf, c), e), len(cells))
    start = [None] * len(cells)
    for g, gpu in enumerate(gpus):
        for c in range(gpu["input_chunks"]):
            for e in (0, 1):
                start[cells[(*where(g, "i", c), e)]] = ((g, c, e),)

    def chunk(g: int, t: int, ref: dict) -> tuple[int, str, int, int]:
        if "buffer_id" in ref:
            tb = gpus[g]["threadblocks"][t]
            ids = [
                i
                for r in tb["remote_buffer_refs"]
                if r["access_channel_type"] == "memory"
                for i in r["remote_buffer_ids"]
            ]
            rb = gpus[g]["remote_buffers"][ids[ref["buffer_id"]]]
            return rb["rank"], rb["type"], ref["index"], ref["size"]
        return g, ref["type"], ref["index"], ref["size"]

    def channel(g: int, t: int, k: int) -> tuple[int, int]:  # (peer, how many channels to that peer come before)
        tb = gpus[g]["threadblocks"][t]
        ids = [i for c in tb["channels"] if c["channel_type"] == "memory" for i in c["channel_ids"]]
        peers = [q for c in gpus[g]["channels"] if c["channel_type"] == "memory" for q in c["connected_to"]]
        return peers[ids[k]], peers[: ids[k]].count(peers[ids[k]])

    def want(g: int) -> dict[int, tuple]:
        out = {}
        for c in range(gpus[g]["output_chunks"]):
            for e in (0, 1):
                if coll == "allreduce":
                    v = tuple(sorted((r, c, e) for r in range(p)))
                elif coll == "allgather":
                    v = ((c // gpus[g]["input_chunks"], c % gpus[g]["input_chunks"], e),)
                else:  # reducescatter
                    v = tuple(sorted((r, g * gpus[g]["output_chunks"] + c, e) for r in range(p)))
                out[cells[(*where(g, "o", c), e)]] = v
        return out

    wants = [want(g) for g in range(p)]
    nbar = [{} for _ in threads]  # barrier id -> its positions in the thread's ops
    for x, o in enumerate(ops):
        for k, op in enumerate(o):
            if op["name"] == "barrier":
                nbar[x].setdefault(op["barrier_id"], []).append(k)

    def step(x: int, state: tuple, flip: int | None) -> tuple | None:
        """The state after thread x's next op (None: it cannot move); flip: which elements a data op gives it."""
        pcs, mem, tokens, sems, done, flips = state
        g, t, e = threads[x]
        op = ops[x][pcs[x]]
        name = op["name"]
        mem, tokens, sems, flips = list(mem), dict(tokens), dict(sems), dict(flips)
        if name == "nop" and pcs[x ^ 1] < pcs[x]:
            return None
        if name == "barrier":
            b, k = op["barrier_id"], nbar[x][op["barrier_id"]].index(pcs[x])
            group = [y for y, (g2, _, _) in enumerate(threads) if g2 == g and b in nbar[y]]
            if any(sum(q <= pcs[y] for q in nbar[y][b]) <= k for y in group):  # all at their k-th barrier b
                return None
        elif name in SIGNALS:
            ids = op.get("channel_ids") or op["semaphore_ids"]
            assert len(ids) <= 2, "two threads a threadblock"
            if e < len(ids):
                if name.startswith("sem"):
                    key = ("semaphore", g, ids[e], 0)
                    have = gpus[g]["semaphores"][ids[e]]["init_value"] + tokens.get(key, 0)
                else:
                    peer, nth = channel(g, t, ids[e])
                    key = ("channel", g, peer, nth) if "signal" in name else ("channel", peer, g, nth)
                    have = tokens.get(key, 0)
                if name in ("signal", "rlxsignal", "sem_release"):
                    tokens[key] = tokens.get(key, 0) + 1
                elif have - sems.get(key, 0) <= 0:
                    return None
                else:
                    sems[key] = sems.get(key, 0) + 1
        elif name != "nop":  # a data op: half the elements of every chunk, which half chosen per op
            flip = flips.pop((x ^ 1, pcs[x]), flip)
            if pcs[x ^ 1] <= pcs[x]:
                flips[(x, pcs[x])] = flip
            srcs = [chunk(g, t, r) for r in op["src_buff"]]
            dsts = [chunk(g, t, r) for r in op["dst_buff"]]
            if any(c[0] in done for c in srcs + dsts):
                verdicts.add("wrong")  # a GPU's buffer touched after its kernel ended
            packet = [k in PACKETS.get(name, ()) or (k > 0 and -1 in PACKETS.get(name, ())) for k in range(len(srcs))]
            packet += [
                k in PACKETS.get(name, ()) or (k > 10 and -2 in PACKETS.get(name, ()))
                for k in range(10, 10 + len(dsts))
            ]
            spots = [
                [
                    cells.get((c[0], "s#", c[2] + j, e ^ flip) if pk else (*where(c[0], c[1], c[2] + j), e ^ flip))
                    for j in range(srcs[0][3])
                ]
                for c, pk in zip(srcs + dsts, packet, strict=True)
            ]
            if any(i is None for s in spots for i in s):
                raise _Beyond
            if any(pk and mem[i] is None for s, pk in zip(spots[: len(srcs)], packet, strict=False) for i in s):
                return None  # a packet not written yet: the read spins
            for j in range(srcs[0][3]):
                got = [mem[s[j]][1] if pk else mem[s[j]] for s, pk in zip(spots, packet[: len(srcs)], strict=False)]
                if name in ("re", "res", "rre", "rres", "repkt", "respkt"):
                    got = [None if None in got else tuple(sorted(v for x2 in got for v in x2))] * len(dsts)
                elif name == "rppkt":
                    got = got * len(dsts)
                for s, v, pk in zip(spots[len(srcs) :], got, packet[len(srcs) :], strict=True):
                    mem[s[j]] = ("packet", v) if pk else v
        pcs = (*pcs[:x], pcs[x] + 1, *pcs[x + 1 :])
        if g not in done and all(pcs[y] == len(ops[y]) for y, th in enumerate(threads) if th[0] == g):
            done = done | {g}
            if any(mem[i] != v for i, v in wants[g].items()):
                verdicts.add("wrong")
        return (
            pcs,
            tuple(mem),
            tuple(sorted(tokens.items())),
            tuple(sorted(sems.items())),
            done,
            tuple(sorted(flips.items())),
        )

    idle_at = [
        [op["name"] in SIGNALS and e >= len(op.get("channel_ids") or op["semaphore_ids"]) for op in o]
        for o, (_, _, e) in zip(ops, threads, strict=True)
    ]
    data_at = [["src_buff" in op for op in o] for o in ops]
    verdicts: set[str] = set()
    seen: set = set()
    stack = [(tuple(0 for _ in threads), tuple(start), (), (), frozenset(), ())]
    try:
        while stack:
            state = stack.pop()
            if state in seen:
                continue
            seen.add(state)
            assert len(seen) < limit, "too many states"
            moved = False
            live = [x for x in range(len(threads)) if state[0][x] < len(ops[x])]
            idle = [x for x in live if idle_at[x][state[0][x]]]
            for x in idle[:1] or live:  # an op a thread has no part in commutes with everything: take it first
                data = data_at[x][state[0][x]] and not any(k == (x ^ 1, state[0][x]) for k, _ in state[5])
                for flip in (0, 1) if data else (0,):
                    nxt = step(x, state, flip)
                    if nxt is not None:
                        moved = True
                        stack.append(nxt)
            if not moved:
                if len(state[4]) < p:
                    verdicts.add("deadlock")
                elif dict(state[2]) != dict(state[3]):
                    verdicts.add("wrong")
    except _Beyond:
        return "wrong"
    return "deadlock" if "deadlock" in verdicts else "wrong" if verdicts else "ok"


def _verdict(report: MscclppReport) -> str:
    kinds = {f.kind for f in report.findings}
    return "deadlock" if "deadlock" in kinds else "wrong" if kinds else "ok"


# Small plans for the search, and which of their mutants it runs by default (every k-th; all with -m slow).
SMALL = {
    "tree 3": (lambda: MAKE.tree_allreduce(3, 1), 1),
    "reads 2": (lambda: MAKE.allpairs_allreduce_read(2), 1),
    "reduce-scatter 2": (lambda: MAKE.reducescatter_allpairs(2), 1),
    "gets 3": (lambda: MAKE.allgather_get(3, 2), 3),
    "ring 2": (lambda: MAKE.ring_allreduce(2), 5),
    "packets 2": (lambda: MAKE.allpairs_allreduce_packets(2), 1),
    "packet ring 2": (lambda: MAKE.ring_allreduce_packets(2), 1),
}


def _mutants(plan: dict) -> list[dict]:
    """Every op dropped, every pair of neighbouring ops swapped, every first destination index moved by one."""
    out = []
    places = [(g, t) for g, gpu in enumerate(plan["gpus"]) for t in range(len(gpu["threadblocks"]))]
    for g, t in places:
        for k in range(len(_ops(plan, g, t))):
            for how in ("drop", "swap", "index"):
                m = json.loads(json.dumps(plan))
                ops = _ops(m, g, t)
                if how == "drop":
                    del ops[k]
                elif how == "swap" and k + 1 < len(ops):
                    ops[k], ops[k + 1] = ops[k + 1], ops[k]
                elif how == "index" and ops[k].get("dst_buff"):
                    ops[k]["dst_buff"][0]["index"] = (ops[k]["dst_buff"][0]["index"] + 1) % 2
                else:
                    continue
                out.append(m)
    return out


def _differential(name: str, every: int) -> set[str]:
    plan = json.loads(SMALL[name][0]())
    assert explore(plan) == "ok" and _check(plan).ok
    disagree, verdicts = [], set()
    for m in _mutants(plan)[::every]:
        try:
            report = _check(m)
        except CollError:
            continue  # the reader refuses it (an index out of range)
        ours, theirs = _verdict(report), explore(m)
        verdicts.add(theirs)
        if ours != theirs:
            disagree.append((ours, theirs, [f.message for f in report.findings[:2]]))
    assert not disagree, disagree[:3]
    return verdicts


@pytest.mark.parametrize("name", SMALL)
def test_the_checker_agrees_with_a_search_of_every_interleaving(name: str) -> None:
    assert _differential(name, SMALL[name][1]) >= {"wrong"}


@pytest.mark.slow
def test_the_checker_agrees_with_the_search_on_every_mutant() -> None:
    verdicts = set()
    for name in SMALL:
        verdicts |= _differential(name, 1)
    assert verdicts == {"ok", "wrong", "deadlock"}


# ---- malformed and unsupported plans -----------------------------------------------------------------------------


def _tiny() -> dict:
    return json.loads(MAKE.tree_allreduce(3, 1))


def _edit(change: Callable[[dict], object]) -> str:
    plan = _tiny()
    change(plan)
    return json.dumps(plan, indent=1)


def _op0(plan: dict) -> dict:
    return plan["gpus"][0]["threadblocks"][0]["ops"][0]  # gpu 0 (the root) waits for its children first


def _pipeline(plan: dict) -> None:
    ops = plan["gpus"][1]["threadblocks"][0]["ops"]
    ops[:] = [{"name": "pipeline", "iter_context": {"unit_size": 1024, "num_chunks": 1}, "ops": ops[:1]}, *ops[1:]]


MALFORMED = [
    ("not json", "{", "bad.json:1: not valid JSON"),
    ("a list", "[]", "an MSCCL++ execution plan is a JSON object"),
    ("no gpus", _edit(lambda p: p.pop("gpus")), "has no 'gpus'"),
    ("inplace", _edit(lambda p: p.update(inplace="yes")), "'inplace' should be true or false"),
    ("collective", _edit(lambda p: p.update(collective="broadcast")), "collective 'broadcast': collc checks allreduce"),
    ("gpu order", _edit(lambda p: p["gpus"][1].update(id=2)), "gpu id 2 at position 1"),
    ("tb order", _edit(lambda p: p["gpus"][1]["threadblocks"][0].update(id=1)), "threadblock id 1 at position 0"),
    ("unknown op", _edit(lambda p: _op0(p).update(name="send")), "gpus[0].threadblocks[0].ops[0]: op 'send' is not"),
    ("op channel", _edit(lambda p: _op0(p).update(channel_ids=[0, 5])), "channel_ids has 5, but threadblock 0 has 2"),
    (
        "tb channel",
        _edit(lambda p: p["gpus"][0]["threadblocks"][0]["channels"][0].update(channel_ids=[9])),
        "memory channel 9: gpu 0 has 2",
    ),
    (
        "buffer id",
        _edit(lambda p: p["gpus"][1]["threadblocks"][0]["ops"][0]["dst_buff"][0].update(buffer_id=7)),
        "buffer_id 7, but threadblock 0 refers to 1 remote buffer(s)",
    ),
    (
        "local for remote",
        _edit(
            lambda p: p["gpus"][1]["threadblocks"][0]["ops"][0].update(dst_buff=[{"type": "s", "index": 0, "size": 1}])
        ),
        "is a peer's buffer: it needs buffer_id",
    ),
    ("self", _edit(lambda p: p["gpus"][0]["channels"][0].update(connected_to=[0, 2])), "connected_to 0 is not another"),
    (
        "index type",
        _edit(lambda p: p["gpus"][1]["threadblocks"][0]["ops"][0]["src_buff"][0].update(index="0")),
        "'index' should be an integer",
    ),
    (
        "size 0",
        _edit(lambda p: p["gpus"][1]["threadblocks"][0]["ops"][0]["src_buff"][0].update(size=0)),
        "'size' is 0, below 1",
    ),
    ("no channel type", _edit(lambda p: _op0(p).pop("channel_type")), "op 'wait' over a 'none' channel"),
    ("semaphore", _edit(lambda p: _op0(p).update(name="sem_acquire", semaphore_ids=[3])), "semaphore 3: gpu 0 has 0"),
    (
        "switch channel",
        _edit(
            lambda p: p["gpus"][0]["channels"].append({"channel_type": "switch", "buffer_type": "s", "rank_groups": []})
        ),
        "switch (NVLS) channels",
    ),
    ("multimem", _edit(lambda p: _op0(p).update(name="glres")), "op 'glres': switch (NVLS) multimem ops"),
    (
        "two waiters",
        _edit(
            lambda p: p["gpus"][0]["threadblocks"].append(
                {"id": 1, "ops": [_op0(p)], "channels": p["gpus"][0]["threadblocks"][0]["channels"]}
            )
        ),
        "threadblocks 0 and 1 both wait on gpu 0's memory channel",
    ),
    (
        "packets in output",
        _edit(
            lambda p: _op0(p).update(
                name="cpkt",
                src_buff=[{"type": "i", "index": 0, "size": 1}],
                dst_buff=[{"type": "o", "index": 0, "size": 1}],
            )
        ),
        "packets in gpu 0's o buffer",
    ),
    ("reuse", _edit(lambda p: p.update(reuse_resources=True)), "reuse_resources with a scratch buffer"),
    ("nested pipeline", _edit(lambda p: (_pipeline(p), _pipeline(p))), "a pipeline inside a pipeline"),
    (
        "pipeline sizes",
        _edit(
            lambda p: (
                _pipeline(p),
                p["gpus"][1]["threadblocks"][0]["ops"][0].update(iter_context={"unit_size": 1, "num_chunks": 2}),
            )
        ),
        "moves other sizes",
    ),
]


@pytest.mark.parametrize(("text", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_or_unsupported_plans_are_clear_errors(text: str, message: str) -> None:
    with pytest.raises(CollError, match=re.escape(message)) as info:
        parse_plan(text, "bad.json")
    assert re.match(r"bad\.json:\d+: ", str(info.value)), str(info.value)


# ---- semantics taken from the executor -----------------------------------------------------------------------------


def _port_allgather(flush: list[dict] | None) -> dict:
    """Two GPUs over port channels: put the input into the peer's output, signal, (flush), wait."""
    prog = MAKE.Prog("port allgather", "allgather", 2, 1, 2, inplace=False)
    a, b = prog.pair("port", 0, 1)
    for r, ch in ((0, a), (1, b)):
        prog.copy(r, 1, ("i", 0, 1), ("o", r, 1))
        prog.put(0, [(ch, ("i", 0, 1), ("o", r, 1))])
        prog.sync("signal", 0, [ch])
        if flush is not None:
            prog.add(r, 0, {"name": "flush", "channel_ids": [0], "channel_type": "port", "dst_buff": flush})
        prog.sync("wait", 0, [ch])
    return json.loads(prog.json())


def test_a_flush_flushes_as_many_channels_as_it_has_dst_buff_entries() -> None:
    """handleFlush flushes op.nOutputs channels: the flush the DSL writes (no dst_buff) flushes none, so the
    transfer may still read the input when the kernel ends."""
    assert _check(_port_allgather([{"buffer_id": 0, "index": 0, "size": 1}])).ok
    for flush in (None, []):
        report = _check(_port_allgather(flush))
        assert [f.kind for f in report.findings] == ["race", "race"], report.findings  # on both GPUs
        assert (
            "the transfer of gpu 0, threadblock 0, op 0 (put) over port channel 0 reads gpu 0's i[0], and "
            "nothing orders that before gpu 0's kernel ends" in report.findings[0].message
        )


def test_a_relaxed_signal_orders_no_data() -> None:
    plan = json.loads(MAKE.tree_allreduce(3, 1))
    leaf = _ops(plan, 1, 0)
    leaf[_nth(leaf, "signal")]["name"] = "rlxsignal"
    report = _check(plan)
    assert {f.kind for f in report.findings} == {"race"}, report.findings
    assert "only packets or relaxed signals order them" in report.findings[0].message
    assert explore(plan) == "ok"  # under sequential consistency it would work


def test_threads_that_run_ahead_of_a_blocked_wait_make_a_deadlock_uncertain() -> None:
    """gpu 0 waits on thread 0 and signals on thread 1 with no nop between; gpu 1 waits for that signal first.
    Thread 1 of gpu 0 runs on and signals, so it completes; collc, running ops in order, says so in the report."""
    prog = MAKE.Prog("ahead", "allreduce", 2, 1, 1)
    a0, b0 = prog.pair("memory", 0, 1)
    a1, b1 = prog.pair("memory", 0, 1)
    prog.sync("wait", 0, [a0])
    prog.sync("signal", 0, [a0, a1])
    prog.sync("wait", 0, [b1])
    prog.sync("signal", 0, [b0, b1])
    prog.sync("wait", 0, [a1])
    prog.sync("wait", 0, [b0])
    plan = json.loads(prog.json())
    for gpu in plan["gpus"]:
        gpu["threadblocks"][0]["ops"].insert(0, {"name": "rlxsignal", "channel_ids": [], "channel_type": "memory"})
    report = _check(plan)
    assert report.findings[0].kind == "deadlock", report.findings
    assert "unless its other threads, which run on to op 2 (signal) before the next nop, unblock it" in (
        report.findings[0].message
    )


# ---- the command line ----------------------------------------------------------------------------------------------


def test_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    good = DATA / "ring_allreduce_8.json"
    out = runner.invoke(main, ["check", str(good)])
    assert out.exit_code == 0 and ": correct (in place" in out.output, out.output
    plan = json.loads(good.read_text())
    MISTAKES["ring_allreduce_8"][0](plan)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(plan, indent=1))
    out = runner.invoke(main, ["check", str(broken)])
    assert out.exit_code == 1 and "WRONG" in out.output, out.output
    pattern = (
        rf"error\[race\] {re.escape(str(broken))}:(\d+) \((gpus\[3\]\.threadblocks\[0\]\.ops\[\d+\])\): gpu 3's s\["
    )
    found = re.search(pattern, out.output)
    assert found, out.output
    assert read_plan(broken).line(found[2]) == int(found[1])
    out = runner.invoke(main, ["check", str(broken), "--json"])
    data = json.loads(out.output)
    assert out.exit_code == 1 and data["status"] == "wrong" and data["format"] == "mscclpp"
    assert data["findings"][0]["kind"] == "race" and data["findings"][0]["path"].startswith("gpus[3]")
    out = runner.invoke(main, ["check", str(DATA / "pipelined_allgather_8.json"), "--json"])
    data = json.loads(out.output)
    assert (
        out.exit_code == 0
        and data["ok"]
        and data["pipeline_iterations"] == [1, 3]
        and data["modes"] == ["out of place"]
    )
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x",\n "collective": "allreduce",\n "gpus": [}\n')
    out = runner.invoke(main, ["check", str(bad)])
    assert out.exit_code == 2 and f"{bad}:3: not valid JSON" in out.output, out.output
    out = runner.invoke(main, ["check", str(bad), "--json"])
    assert out.exit_code == 2 and json.loads(out.output)["status"] == "error"
    out = runner.invoke(main, ["check", str(good), "-p", "8"])
    assert out.exit_code == 2, out.output
