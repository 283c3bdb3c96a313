"""`collc export`: MSCCL-IR XML checked by an independent simulator (tests/msccl_sim.py), and the IR JSON.

The simulator re-reads the XML with the standard library, runs every
threadblock with its dependencies and the connections' FIFOs, in several
random interleavings, in place and out of place, flags data races with vector
clocks, and checks the collective's postcondition on the output buffers.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from collc import api
from collc.backends import msccl
from collc.diagnostics import CollError
from collc.ir import (
    UNKNOWN_SPAN,
    Action,
    ChunkSet,
    Collective,
    Op,
    OpKind,
    Schedule,
    Step,
    make_op,
    schedule_from_json,
    schedule_to_json,
)
from collc.verify.check import check

sys.path.insert(0, str(Path(__file__).parent))

import msccl_sim
from golden_files import assert_golden
from test_cli import EXAMPLES, EXIT_INPUT, EXIT_OK, EXIT_WRONG, RING, assert_no_traceback, cli, mutate, write

GOLDEN = Path(__file__).parent / "golden" / "msccl"


def export(tmp_path: Path, program: Path | str, *args: str) -> str:
    out = tmp_path / "out.xml"
    result = cli("export", program, *args, "-o", out)
    assert result.code == EXIT_OK, result.text
    assert result.stdout.startswith(f"wrote {out}:"), result.stdout
    return out.read_text()


# --------------------------------------------------------------------------
# Ring and Swing-bw allreduce for p = 2..16
# --------------------------------------------------------------------------


@pytest.mark.parametrize("p", range(2, 17))
@pytest.mark.parametrize("name", ["ring_allreduce", "swing_bw"])
def test_allreduce_xml_passes_the_simulator(tmp_path: Path, name: str, p: int) -> None:
    prog = msccl_sim.simulate(export(tmp_path, EXAMPLES / f"{name}.coll", "-p", str(p)))
    assert prog.ngpus == p and prog.coll == "allreduce"
    assert prog.attrs["inplace"] == "1" and prog.attrs["outofplace"] == "1"


OTHER_EXPORTS: list[tuple[str, tuple[str, ...]]] = [
    ("ring_allgather.coll", ("-p", "6")),
    ("bruck_allgather.coll", ("-p", "7")),
    ("ring_reduce_scatter.coll", ("-p", "5")),
    ("pairwise_alltoall.coll", ("-p", "5")),
    ("recursive_doubling_any.coll", ("-p", "12")),
    ("rabenseifner.coll", ("-p", "8")),
    ("swing_lat.coll", ("-p", "10")),
    ("torus/swing_bw_torus.coll", ("--dims", "4x4")),
    ("torus/swing_bw_torus.coll", ("--dims", "2x4")),
    ("torus/bucket_torus.coll", ("--dims", "3x4")),
    ("pipelined_ring_allreduce.coll", ("-p", "5", "--param", "k=2")),
    ("striped_ring_allreduce.coll", ("-p", "4")),
    ("hierarchical/hier_allreduce_swing.coll", ("--param", "nodes=2", "--param", "local=3")),
    ("hierarchical/hier_allreduce_ring.coll", ("--param", "nodes=3", "--param", "local=2")),
    ("hierarchical/hier_allgather.coll", ("--param", "nodes=2", "--param", "local=3")),
]
"""Programs of every collective and shape that tests export (tests/test_plans.py reads them back too)."""


@pytest.mark.parametrize(("program", "args"), OTHER_EXPORTS)
def test_other_collectives_pass_the_simulator(tmp_path: Path, program: str, args: tuple[str, ...]) -> None:
    prog = msccl_sim.simulate(export(tmp_path, EXAMPLES / program, *args), seeds=2)
    assert prog.attrs["outofplace"] == "1"
    assert prog.attrs["inplace"] == ("0" if prog.coll == "alltoall" else "1")


def test_alltoall_needs_more_channels_than_one(tmp_path: Path) -> None:
    # 39 peers each way: more threadblocks than one channel may hold (32 per direction).
    prog = msccl_sim.simulate(export(tmp_path, EXAMPLES / "pairwise_alltoall.coll", "-p", "40"), seeds=1)
    assert int(prog.attrs["nchannels"]) >= 2
    for gpu in prog.gpus:
        for chan in {tb.chan for tb in gpu.tbs}:
            assert sum(tb.send >= 0 and tb.chan == chan for tb in gpu.tbs) <= 32


# --------------------------------------------------------------------------
# Fusion, layout and format
# --------------------------------------------------------------------------


def _types(prog: msccl_sim.Program) -> dict[str, int]:
    counts: dict[str, int] = {}
    for gpu in prog.gpus:
        for tb in gpu.tbs:
            for st in tb.steps:
                counts[st.type] = counts.get(st.type, 0) + 1
    return counts


@pytest.mark.parametrize("p", [3, 4, 7])
def test_ring_allreduce_is_fused_as_a_hand_written_ring(tmp_path: Path, p: int) -> None:
    """Per rank, the classic fused ring: s, p-2 x rrs, rrcs, p-2 x rcs, r on one threadblock."""
    prog = msccl_sim.parse(export(tmp_path, EXAMPLES / "ring_allreduce.coll", "-p", str(p)))
    assert _types(prog) == {"s": p, "rrs": p * (p - 2), "rrcs": p, "rcs": p * (p - 2), "r": p}
    for gpu in prog.gpus:
        (tb,) = gpu.tbs
        assert (tb.send, tb.recv) == ((gpu.id + 1) % p, (gpu.id - 1) % p)
        assert [st.type for st in tb.steps] == ["s", *["rrs"] * (p - 2), "rrcs", *["rcs"] * (p - 2), "r"]
        assert gpu.s == 0


def test_swing_uses_one_threadblock_per_peer(tmp_path: Path) -> None:
    p = 16
    prog = msccl_sim.parse(export(tmp_path, EXAMPLES / "swing_bw.coll", "-p", str(p)))
    for gpu in prog.gpus:
        peers = sorted(tb.send for tb in gpu.tbs)
        # Swing's peers: rank + rho(s) on even ranks, rank - rho(s) on odd ones, rho = 1, -1, 3, -5, ...
        rho = [1, -1, 3, -5]
        sign = 1 if gpu.id % 2 == 0 else -1
        assert peers == sorted((gpu.id + sign * r) % p for r in rho)
        assert sorted(tb.recv for tb in gpu.tbs) == peers


def test_allgather_layout_copies_the_own_block(tmp_path: Path) -> None:
    p = 4
    prog = msccl_sim.parse(export(tmp_path, EXAMPLES / "ring_allgather.coll", "-p", str(p)))
    assert int(prog.attrs["nchunksperloop"]) == p
    for gpu in prog.gpus:
        assert (gpu.i, gpu.o, gpu.s) == (1, p, 0)
        copies = [st for tb in gpu.tbs for st in tb.steps if st.type == "cpy"]
        assert [(c.srcbuf, c.srcoff, c.dstbuf, c.dstoff, c.cnt) for c in copies] == [("i", 0, "o", gpu.id, 1)]


def test_scratch_holds_only_what_a_step_stores(tmp_path: Path) -> None:
    """A ring reduce-scatter forwards its partial sums without storing them (rrs): no scratch, and
    the input buffer is never written."""
    p = 5
    prog = msccl_sim.simulate(export(tmp_path, EXAMPLES / "ring_reduce_scatter.coll", "-p", str(p)))
    for gpu in prog.gpus:
        assert (gpu.i, gpu.o, gpu.s) == (p, 1, 0)
        assert {st.dstbuf for tb in gpu.tbs for st in tb.steps if st.type in ("r", "rrc", "rrcs", "rcs")} <= {"o"}


def test_the_text_suits_the_runtimes_minimal_parsers(tmp_path: Path) -> None:
    text = export(tmp_path, EXAMPLES / "swing_bw.coll", "-p", "8")
    assert text.startswith("<algo "), "no XML declaration: the MSCCL parsers cannot read one"
    assert "\t" not in text
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("<!--"):
            assert stripped.startswith("<!-- ") and stripped.endswith(" -->") and "--" not in stripped[4:-3]
        elif stripped.startswith("<step"):
            assert re.fullmatch(r'<step( \w+="[^"]*"){10}/>', stripped), stripped
        else:
            assert re.fullmatch(r'</?\w+( \w+="[^"]*")*>', stripped), stripped
    algo = re.match(r"<algo ([^>]*)>", text)
    assert algo is not None
    keys = re.findall(r'(\w+)="', algo.group(1))
    assert keys == ["name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                    "minBytes", "maxBytes"]  # fmt: skip
    assert 'minBytes="0"' in text and f'maxBytes="{1 << 40}"' in text


def test_comments_carry_the_coll_lines(tmp_path: Path) -> None:
    """Each step's comment names the line of its own op: sends the send line, receives the recv line."""
    text = export(tmp_path, EXAMPLES / "ring_allreduce.coll", "-p", "4")
    lib = (EXAMPLES / "lib" / "ring.coll").read_text().splitlines()
    found = re.findall(r"ring\.coll:(\d+): (send|receive)", text)
    assert len(found) == 4 * 7  # per rank: the first send, then 2(p - 1) = 6 receives (fused with later sends)
    for n, what in found:
        assert lib[int(n) - 1].lstrip().startswith("send" if what == "send" else "recv"), lib[int(n) - 1]


def test_options_reach_the_algo_element(tmp_path: Path) -> None:
    text = export(tmp_path, EXAMPLES / "ring_allreduce.coll", "-p", "4", "--proto", "LL128",
                  "--min-bytes", "1KiB", "--max-bytes", "64MiB")  # fmt: skip
    assert 'proto="LL128"' in text and 'minBytes="1024"' in text and f'maxBytes="{64 << 20}"' in text


def test_ring_xml_golden(tmp_path: Path) -> None:
    export(tmp_path, EXAMPLES / "ring_allreduce.coll", "-p", "4")
    assert_golden(tmp_path / "out.xml", GOLDEN / "ring_allreduce_p4.xml")


def test_long_exchanges_get_receive_only_threadblocks() -> None:
    """Bruck on 16 ranks exchanges 7 chunks with rank r + 8 both ways: more than a Simple connection buffers
    (2 chunks), so that peer is received on a threadblock of its own; with LL (8 chunks) it shares one."""
    schedule = api.load(EXAMPLES / "bruck_allgather.coll").instantiate(p=16).schedule
    simple, ll = msccl.lower(schedule), msccl.lower(schedule, proto="LL")
    for gs, gl in zip(simple.gpus, ll.gpus, strict=True):
        assert len(gs.threadblocks) == len(gl.threadblocks) + 1
        peer = (gs.id + 8) % 16
        assert [(tb.send, tb.recv) for tb in gs.threadblocks if peer in (tb.send, tb.recv)] == [(peer, -1), (-1, peer)]
        assert [(tb.send, tb.recv) for tb in gl.threadblocks if peer in (tb.send, tb.recv)] == [(peer, peer)]
    msccl_sim.simulate(msccl.to_xml(simple), seeds=2)


EXCHANGE = """algorithm vector_exchange : allreduce
param p : int where p >= 1 and is_pow2(p)
param k : int where k >= 1
chunks k

phase allreduce:
  for step s in 0 .. log2(p):
    exchange with rank ^ (1 << s): send 0 .. k; recv 0 .. k reduce
"""


@pytest.mark.parametrize("k", [2, 5])
def test_long_receives_into_chunks_being_sent_land_in_scratch(k: int) -> None:
    """Recursive doubling of a k-chunk vector in place: each rank receives into the chunks it sends in the same
    step.  When k exceeds what a connection buffers, the receive goes to a receive-only threadblock and must not
    wait for the send: it lands in scratch, and a cpy on the local threadblock puts it in place after the send."""
    schedule = api.parse(EXCHANGE, "vector_exchange.coll").instantiate(p=8, k=k).schedule
    algo = msccl.lower(schedule)
    text = msccl.to_xml(algo)
    msccl_sim.simulate(text, seeds=3)
    if k <= 2:  # fits: received in place (and fused with the next step's send), no scratch
        assert all(g.s_chunks == 0 for g in algo.gpus) and "into scratch" not in text
        return
    for g in algo.gpus:
        receivers = [tb for tb in g.threadblocks if tb.send < 0 <= tb.recv]
        assert len(receivers) == 3 and g.s_chunks == k
        assert [(st.type, st.dstbuf, st.cnt) for tb in receivers for st in tb.steps] == [("rrc", "s", k)] * 3
        (local,) = [tb for tb in g.threadblocks if tb.send < 0 and tb.recv < 0]
        assert [(st.srcbuf, st.dstbuf) for st in local.steps if st.type == "cpy"] == [("s", "o")] * 3
    assert "into scratch" in text and "from scratch into place" in text


def test_landing_xml_golden(tmp_path: Path) -> None:
    """The vector exchange of 3 chunks on 4 ranks with Simple: a send threadblock and a receive-only one per peer,
    receives landing in scratch, and the local threadblock copying them into place after the sends."""
    export(tmp_path, write(tmp_path, "vector_exchange.coll", EXCHANGE), "-p", "4", "--param", "k=3")
    assert_golden(tmp_path / "out.xml", GOLDEN / "vector_exchange_p4_k3.xml")


def test_many_dependencies_become_nops() -> None:
    """Bruck's rotations read chunks several threadblocks wrote: nops carry the extra dependencies."""
    inst = api.load(EXAMPLES / "bruck_allgather.coll").instantiate(p=6)
    algo = msccl.lower(inst.schedule)
    assert algo.count("nop") > 0
    msccl_sim.simulate(msccl.to_xml(algo), seeds=4)


# --------------------------------------------------------------------------
# The simulator can fail
# --------------------------------------------------------------------------


def _first_step(text: str, pattern: str) -> tuple[int, str]:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "<step" in line and re.search(pattern, line):
            return i, line
    raise AssertionError(f"no step matches {pattern}")


def _replace_line(text: str, i: int, new: str) -> str:
    lines = text.splitlines()
    lines[i] = new
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("pattern", "old", "new", "complaint"),
    [
        (r'depid="[0-9]', r'depid="\d+" deps="\d+"', 'depid="-1" deps="-1"', "race|reads|holds"),
        (r'type="rrcs"', 'type="rrcs"', 'type="rrs"', "holds|reads"),
        (r'type="rrc"', 'type="rrc"', 'type="r"', "holds"),
        (r'type="s"', r'srcoff="(\d+)"', 'srcoff="0"', "holds|race"),
        (r'type="s"', r'cnt="(\d+)"', 'cnt="3"', "message has|outside|race"),
    ],
)
def test_the_simulator_catches_broken_xml(tmp_path: Path, pattern: str, old: str, new: str, complaint: str) -> None:
    text = export(tmp_path, EXAMPLES / "swing_bw.coll", "-p", "8")
    i, line = _first_step(text, pattern)
    broken = _replace_line(text, i, re.sub(old, new, line, count=1))
    assert broken != text
    with pytest.raises(msccl_sim.XmlError, match=complaint):
        msccl_sim.simulate(broken, seeds=4)


def test_the_simulator_catches_a_deadlock(tmp_path: Path) -> None:
    """Every rank of a ring receiving before its first send: everyone waits."""
    lines = export(tmp_path, EXAMPLES / "ring_allreduce.coll", "-p", "3").splitlines()
    steps = [i for i, line in enumerate(lines) if "<step " in line]
    for a, b in itertools.pairwise(steps):
        if 's="0"' in lines[a] and 's="1"' in lines[b]:
            body_a, body_b = lines[a].split('s="0" ', 1)[1], lines[b].split('s="1" ', 1)[1]
            lines[a] = lines[a].split('s="0" ')[0] + 's="0" ' + body_b
            lines[b] = lines[b].split('s="1" ')[0] + 's="1" ' + body_a
    with pytest.raises(msccl_sim.XmlError, match="deadlock"):
        msccl_sim.simulate("\n".join(lines) + "\n", seeds=1)


def test_the_simulator_checks_hasdep(tmp_path: Path) -> None:
    text = export(tmp_path, EXAMPLES / "bruck_allgather.coll", "-p", "6")
    i, line = _first_step(text, 'hasdep="1"')
    with pytest.raises(msccl_sim.XmlError, match="hasdep=0"):
        msccl_sim.parse(_replace_line(text, i, line.replace('hasdep="1"', 'hasdep="0"')))


# --------------------------------------------------------------------------
# JSON, errors and limits
# --------------------------------------------------------------------------


def test_json_format_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "ir.json"
    result = cli("export", EXAMPLES / "swing_bw.coll", "-p", "6", "--format", "json", "-o", out)
    assert result.code == EXIT_OK, result.text
    data = json.loads(out.read_text())
    inst = api.load(EXAMPLES / "swing_bw.coll").instantiate(p=6)
    assert schedule_to_json(schedule_from_json(data)) == schedule_to_json(inst.schedule)
    assert data["nranks"] == 6 and data["collective"] == "allreduce"


def test_stdout_by_default() -> None:
    result = cli("export", EXAMPLES / "ring_allreduce.coll", "-p", "3")
    assert result.code == EXIT_OK
    msccl_sim.simulate(result.stdout)


@pytest.mark.parametrize(
    ("program", "args", "message"),
    [
        ("binomial_broadcast.coll", ("-p", "4"), "MSCCL-IR export supports allreduce"),
        ("compression/compressed_ring_allreduce.coll", ("-p", "4"), "compression points"),
        ("ring_allreduce.coll", ("-p", "4", "--max-bytes", "lots"), "--max-bytes"),
        (
            "ring_allreduce.coll",
            ("-p", "4", "--min-bytes", "2MiB", "--max-bytes", "1MiB"),
            "'--max-bytes': '1MiB' is below",
        ),
        ("ring_allreduce.coll", ("-p", "4", "--proto", "LL64"), "--proto"),
        ("ring_allreduce.coll", ("-p", "4", "-o", "/nonexistent/dir/x.xml"), "cannot write"),
        ("ring_allreduce.coll", ("-p", "2..8"), "collc export takes one rank count"),
        ("ring_allreduce.coll", ("-p", "4", "--format", "json", "--max-bytes", "lots"), "--max-bytes"),
        ("ring_allreduce.coll", ("-p", "4", "--max-bytes", str(1 << 64)), "above the largest size MSCCL-IR takes"),
    ],
)
def test_bad_input_is_a_clear_error(program: str, args: tuple[str, ...], message: str) -> None:
    result = cli("export", EXAMPLES / program, *args)
    assert result.code == EXIT_INPUT, result.text
    assert message in result.text
    assert_no_traceback(result)


def test_a_wrong_schedule_is_not_exported(tmp_path: Path) -> None:
    path = write(tmp_path, "wrong.coll", mutate(RING, 9, ") reduce", ") copy"))
    out = tmp_path / "never.xml"
    result = cli("export", path, "-p", "4", "-o", out)
    assert result.code == EXIT_WRONG, result.text
    assert "WRONG" in result.text and not out.exists()


def test_runtime_limits_are_enforced(tmp_path: Path) -> None:
    inst = api.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=8)
    with pytest.raises(CollError, match="at most 10, nops included"):
        msccl.lower(inst.schedule, limits=msccl.Limits(steps_per_threadblock=10))
    small = msccl.lower(inst.schedule, limits=msccl.Limits(count=1))
    assert max(st.cnt for g in small.gpus for tb in g.threadblocks for st in tb.steps) == 1
    # A ring on 33 ranks has 65 steps per threadblock: beyond RCCL's 64, within microsoft/msccl's 256.
    refused = cli("export", EXAMPLES / "ring_allreduce.coll", "-p", "33")
    assert refused.code == EXIT_INPUT and "at most 64" in refused.text and "--max-steps 256" in refused.text
    assert_no_traceback(refused)
    msccl_sim.simulate(export(tmp_path, EXAMPLES / "ring_allreduce.coll", "-p", "33", "--max-steps", "256"),
                       seeds=1, max_steps=256)  # fmt: skip


def _chain(p: int) -> Schedule:
    """An allgather in which rank 0 relays chunk s from rank s to rank s+1: its threadblocks are linked
    into one group through their connections, which must share a channel.  Rank 0 then hands out the rest
    two chunks at a time, within what a Simple connection buffers (a longer message would go to a
    receive-only threadblock, which splits the group)."""
    events = [(s, 0, s + 1, [s]) for s in range(p - 1)] + [(s, s + 1, 0, [s + 1]) for s in range(p - 1)]
    for j in range(1, p):
        rest = [c for c in range(p) if c not in (j, j - 1)]
        events += [(p - 1 + i // 2, 0, j, rest[i : i + 2]) for i in range(0, len(rest), 2)]
    steps = []
    for s in range(1 + max(e[0] for e in events)):
        ops = []
        for step, a, b, chunks in events:
            if step == s and chunks:
                ops.append(make_op(a, OpKind.SEND, b, ChunkSet.of(chunks), None, UNKNOWN_SPAN))
                ops.append(make_op(b, OpKind.RECV, a, ChunkSet.of(chunks), Action.COPY, UNKNOWN_SPAN))
        steps.append(Step(s, "chain", tuple(ops)))
    return Schedule("chain", Collective.ALLGATHER, (("p", p),), p, p, None, tuple(steps), "<chain>", UNKNOWN_SPAN)


def test_channel_groups_beyond_the_limit_are_refused() -> None:
    small = _chain(20)
    assert check(small).ok
    msccl_sim.simulate(msccl.to_xml(msccl.lower(small)), seeds=1)
    big = _chain(35)
    assert check(big).ok
    with pytest.raises(CollError, match="must share one channel"):
        msccl.lower(big)


def test_comments_stay_comments(tmp_path: Path) -> None:
    odd = tmp_path / "ring---x.coll"
    odd.write_text(RING)
    text = export(tmp_path, odd, "-p", "3")
    assert "ring- - -x.coll" in text
    msccl_sim.simulate(text)  # ElementTree rejects "--" inside a comment


def test_count_limit_splits_transfers() -> None:
    # A ring with 8 chunks per block; a limit of 3 chunks per step cuts each block in 3 + 3 + 2.
    inst = api.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=4, k=8)
    algo = msccl.lower(inst.schedule, limits=msccl.Limits(count=3))
    assert max(st.cnt for g in algo.gpus for tb in g.threadblocks for st in tb.steps) <= 3
    msccl_sim.simulate(msccl.to_xml(algo))


# --------------------------------------------------------------------------
# Random correct schedules: trees of random shape and timing, chunk by chunk
# --------------------------------------------------------------------------


def _tree(rng: np.random.Generator, p: int, root: int) -> dict[int, list[int]]:
    """A random spanning tree of ranks 0..p-1 rooted at ``root``: parent -> children."""
    order = [root, *[r for r in rng.permutation(p).tolist() if r != root]]
    children: dict[int, list[int]] = {r: [] for r in range(p)}
    for i in range(1, p):
        children[order[int(rng.integers(0, i))]].append(order[i])
    return children


Event = tuple[int, int, int, tuple[int, ...], Action]  # (step, src, dst, chunks, action)


def random_schedule(rng: np.random.Generator, collective: Collective, p: int, k: int) -> Schedule:
    """A correct schedule built group of chunks by group: a reduction up a random tree, a broadcast
    down one, or a random path, with random waits; groups overlap in time, so one step mixes them."""
    nchunks = {Collective.ALLTOALL: p * p * k, Collective.ALLREDUCE: k}.get(collective, p * k)
    events: list[Event] = []
    for chunks in _groups(rng, collective, k, nchunks):
        _route(rng, collective, p, k, chunks, events)
    nsteps = 1 + max((e[0] for e in events), default=0)
    steps = []
    for s in range(nsteps):
        ops: list[Op] = []
        for step, src, dst, chunks, action in events:
            if step == s:
                ops.append(make_op(src, OpKind.SEND, dst, ChunkSet.of(chunks), None, UNKNOWN_SPAN))
                ops.append(make_op(dst, OpKind.RECV, src, ChunkSet.of(chunks), action, UNKNOWN_SPAN))
        steps.append(Step(s, "random", tuple(ops)))
    return Schedule("random", collective, (("p", p),), p, nchunks, None, tuple(steps), "<random>", UNKNOWN_SPAN)


def _groups(rng: np.random.Generator, collective: Collective, k: int, nchunks: int) -> list[tuple[int, ...]]:
    """Chunks that travel together: random groups of one to three chunks with the same origin and
    destination, so that messages hold several chunks, contiguous or not."""
    by_owner: dict[int, list[int]] = {}
    for c in range(nchunks):
        by_owner.setdefault(0 if collective is Collective.ALLREDUCE else c // k, []).append(c)
    groups = []
    for members in by_owner.values():
        order = rng.permutation(members).tolist()
        while order:
            size = int(rng.integers(1, 4))
            groups.append(tuple(sorted(order[:size])))
            order = order[size:]
    return groups


def _route(
    rng: np.random.Generator, collective: Collective, p: int, k: int, chunks: tuple[int, ...], events: list[Event]
) -> None:
    """The events that move one group of chunks."""

    def up(children: dict[int, list[int]], v: int) -> int:
        """Reduce into v; the first step at which v holds its subtree's sum."""
        ready = 0
        for child in children[v]:
            sent = up(children, child) + int(rng.integers(0, 2))
            events.append((sent, child, v, chunks, Action.REDUCE))
            ready = max(ready, sent + 1)
        return ready

    def down(children: dict[int, list[int]], v: int, ready: int) -> None:
        for child in children[v]:
            sent = ready + int(rng.integers(0, 2))
            events.append((sent, v, child, chunks, Action.COPY))
            down(children, child, sent + 1)

    owner = chunks[0] // k
    if collective is Collective.ALLREDUCE:
        root = int(rng.integers(0, p))
        down(_tree(rng, p, root), root, up(_tree(rng, p, root), root))
    elif collective is Collective.REDUCE_SCATTER:
        up(_tree(rng, p, owner), owner)
    elif collective is Collective.ALLGATHER:
        down(_tree(rng, p, owner), owner, 0)
    else:  # alltoall: chunk (src*p + dst)*k + j along a random path from src to dst
        src, dst = divmod(owner, p)
        if src != dst:
            middle = [r for r in rng.permutation(p).tolist() if r not in (src, dst)][: int(rng.integers(0, 3))]
            step = int(rng.integers(0, 2))
            for a, b in itertools.pairwise([src, *middle, dst]):
                events.append((step, a, b, chunks, Action.COPY))
                step += 1 + int(rng.integers(0, 2))


@pytest.mark.parametrize("collective", [c for c in msccl.COLL_NAMES])
@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_pass_the_simulator(collective: Collective, seed: int) -> None:
    rng = np.random.default_rng(seed * 10 + list(msccl.COLL_NAMES).index(collective))
    p = int(rng.integers(2, 9))
    k = int(rng.integers(1, 5))
    schedule = random_schedule(rng, collective, p, k)
    report = check(schedule)
    assert report.ok, report.findings[0].message  # the generator's own contract
    algo = msccl.lower(schedule)
    msccl_sim.simulate(msccl.to_xml(algo), seeds=3)


def test_python_api(tmp_path: Path) -> None:
    inst = api.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=5)
    text = inst.to_msccl_xml(proto="LL")
    assert 'proto="LL"' in text
    msccl_sim.simulate(text)
    wrong = api.parse(mutate(RING, 9, ") reduce", ") copy"), "wrong.coll").instantiate(p=4)
    with pytest.raises(CollError, match="fails verification"):
        wrong.to_msccl_xml()


def test_the_simulator_bounds_connections() -> None:
    """Two ranks that each send three chunks before receiving any: fine with unbounded connections,
    a deadlock when a connection holds two messages, as NCCL's buffers do."""
    tbs = []
    for g in range(2):
        peer = 1 - g
        sends = [f'<step s="{j}" type="s" srcbuf="i" srcoff="{j}" dstbuf="i" dstoff="{j}" cnt="1" depid="-1" '
                 f'deps="-1" hasdep="0"/>' for j in range(3)]  # fmt: skip
        recvs = [f'<step s="{3 + j}" type="r" srcbuf="o" srcoff="{3 * peer + j}" dstbuf="o" dstoff="{3 * peer + j}" '
                 f'cnt="1" depid="-1" deps="-1" hasdep="0"/>' for j in range(3)]  # fmt: skip
        copy = (f'<step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="{3 * g}" cnt="3" depid="-1" '
                f'deps="-1" hasdep="0"/>')  # fmt: skip
        tbs.append(
            f'<gpu id="{g}" i_chunks="3" o_chunks="6" s_chunks="0">\n<tb id="0" send="{peer}" recv="{peer}" chan="0">\n'
            + "\n".join(sends + recvs)
            + f'\n</tb>\n<tb id="1" send="-1" recv="-1" chan="0">\n{copy}\n</tb>\n</gpu>'
        )
    text = ('<algo name="burst" proto="Simple" nchannels="1" nchunksperloop="6" ngpus="2" coll="allgather" '
            'inplace="0" outofplace="1" minBytes="0" maxBytes="1">\n' + "\n".join(tbs) + "\n</algo>\n")  # fmt: skip
    msccl_sim.simulate(text, capacity=None)
    with pytest.raises(msccl_sim.XmlError, match="deadlock"):
        msccl_sim.simulate(text, capacity=2)


@pytest.mark.slow
def test_many_random_schedules_pass_the_simulator() -> None:
    """400 more random schedules, larger (p up to 10, up to 5 chunks per block), in one test."""
    for seed in range(100):
        for i, collective in enumerate(msccl.COLL_NAMES):
            rng = np.random.default_rng(10_000 + 4 * seed + i)
            p, k = int(rng.integers(2, 11)), int(rng.integers(1, 6))
            schedule = random_schedule(rng, collective, p, k)
            assert check(schedule).ok
            algo = msccl.lower(schedule, limits=msccl.Limits(steps_per_threadblock=1024))
            msccl_sim.simulate(msccl.to_xml(algo), seeds=2, max_steps=1024)
