"""Dataflow issue in the mpi-c library: the dependencies it is given, and runs that would catch a wrong one.

* The dependency tables of the generated C (read back out of the file) are held to a
  brute-force computation from the IR: per rank, the messages (step, send or receive, peer,
  chunks), and the order they impose (the transitive closure of the listed dependencies)
  equals the order the schedule's semantics requires: every pair of messages of a rank that
  touch a common chunk, one of them a receive, in table order.
* Runs: the pipelined ring (the schedule whose steps overlap), Swing and others at several
  rank counts, against numpy, and bit for bit against the same library run step by step
  (``COLLC_ISSUE=steps``).
* A library with a dependency deleted from its tables computes wrong results (and the
  brute-force check rejects its tables), while the same library run step by step is right:
  the dependencies are what keeps dataflow issue correct.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import collc
from collc.backends import dataflow, mpi_c, mpitools, tables
from collc.collectives import chunk_dest, chunk_origin, finally_required, initially_held
from collc.diagnostics import CollError
from collc.ir import Collective, OpKind, Schedule

HERE = Path(__file__).resolve().parent
PIPELINED = HERE.parent / "benchmarks" / "data" / "pipelined_ring_allreduce.coll"
FLOW_SCRIPT = HERE / "mpi_c" / "flow_allreduce.py"
DRIVER = HERE / "mpi_c" / "driver.c"
TIMEOUT = 180

Msg = tuple[int, bool, int, int]  # step, send, peer, chunk bits


def _schedule(name: str | Path, **params: int) -> Schedule:
    inst = collc.load(str(name)).instantiate(**params)
    assert inst.verify().ok
    return inst.schedule


def _tools() -> tuple[Path, Path]:
    try:
        return mpitools.mpicc(), mpitools.mpiexec()
    except CollError as err:
        pytest.skip(str(err))


# --------------------------------------------------------------------------
# The brute-force reference, from the IR
# --------------------------------------------------------------------------


def ir_messages(schedule: Schedule, rank: int) -> list[Msg]:
    """The rank's messages from the IR's ops: per step, sends by peer, then receives by peer, chunks merged."""
    out: list[Msg] = []
    for step in schedule.steps:
        sends: dict[int, int] = {}
        recvs: dict[int, int] = {}
        for op in step.ops:
            if op.kind is OpKind.SEND and op.rank == rank:
                sends[op.peer] = sends.get(op.peer, 0) | op.chunks.bits
            elif op.kind is OpKind.RECV and op.rank == rank:
                recvs[op.peer] = recvs.get(op.peer, 0) | op.chunks.bits
        out += [(step.index, True, peer, bits) for peer, bits in sorted(sends.items()) if bits]
        out += [(step.index, False, peer, bits) for peer, bits in sorted(recvs.items()) if bits]
    return out


def required_order(msgs: Sequence[Msg]) -> list[int]:
    """``before[j]``: bitset of the messages that must be done before message j, by the semantics alone."""
    before = [0] * len(msgs)
    for j, (_, send_j, _, bits_j) in enumerate(msgs):
        for i in range(j):
            _, send_i, _, bits_i = msgs[i]
            if bits_i & bits_j and not (send_i and send_j):
                before[j] |= 1 << i
    return before


def closure(direct: Sequence[int]) -> list[int]:
    """Transitive closure of ``direct`` (bitsets of earlier indices), in index order."""
    out: list[int] = []
    for j, bits in enumerate(direct):
        total = bits
        for i in range(j):
            if bits >> i & 1:
                total |= out[i]
        out.append(total)
    return out


# --------------------------------------------------------------------------
# The tables of a generated C file
# --------------------------------------------------------------------------


def _array(text: str, name: str) -> str:
    m = re.search(rf"{re.escape(name)}\[(?:NRANKS)?\] = \{{\n(.*?)\n\}};", text, re.S)
    assert m, name
    return re.sub(r"/\*.*?\*/", "", m.group(1))


def c_messages(source: str, nranks: int) -> list[list[tuple[Msg, tuple[int, ...]]]]:
    """Per rank, its messages as the generated C lists them for dataflow issue, with their dependencies."""
    phases = re.findall(
        r"\{ (\w+)_msgs, \1_runs, \1_ranks, \1_deps \}", _array(source, "static const struct collc_flow flow")
    )
    per_rank: list[list[tuple[Msg, tuple[int, ...]]]] = [[] for _ in range(nranks)]
    for ph in phases:
        runs = [
            (int(lo), int(hi)) for lo, hi in re.findall(r"\{ (\d+), (\d+), COLLC_\w+", _array(source, f"{ph}_runs"))
        ]
        rows = re.findall(
            r"\{ (-?\d+), (COLLC_\w+),\s+(-?\d+), (\d+), (\d+), (\d+), (\d+) \}", _array(source, f"{ph}_msgs")
        )
        deps = [int(x) for x in re.findall(r"-?\d+", _array(source, f"{ph}_deps"))]
        assert deps[-1] == -1
        spans = [tuple(map(int, s)) for s in re.findall(r"\{ (\d+), (\d+) \}", _array(source, f"{ph}_ranks"))]
        for rank, (first, n) in enumerate(spans):
            for step, kind, peer, first_run, nruns, first_dep, ndeps in rows[first : first + n]:
                bits = 0
                for lo, hi in runs[int(first_run) : int(first_run) + int(nruns)]:
                    bits |= ((1 << (hi - lo)) - 1) << lo
                msg = (int(step), kind == "COLLC_SEND", int(peer), bits)
                per_rank[rank].append((msg, tuple(deps[int(first_dep) : int(first_dep) + int(ndeps)])))
    return per_rank


def check_tables(schedule: Schedule, source: str) -> list[str]:
    """What is wrong with the dependency tables of ``source`` against the brute force (empty: nothing)."""
    return check_listed(schedule, c_messages(source, schedule.nranks))


def check_listed(schedule: Schedule, per_rank: list[list[tuple[Msg, tuple[int, ...]]]]) -> list[str]:
    """What is wrong with each rank's (message, dependencies) rows, read from generated tables, against the
    messages of the IR and the order the brute force requires (empty: nothing)."""
    problems = []
    for rank, listed in enumerate(per_rank):
        msgs = ir_messages(schedule, rank)
        if [m for m, _ in listed] != msgs:
            problems.append(f"rank {rank}: the messages differ from the IR's")
            continue
        direct = []
        for j, (_, deps) in enumerate(listed):
            assert all(0 <= d < j for d in deps), (rank, j, deps)  # earlier messages only
            direct.append(sum(1 << d for d in set(deps)))
        got, want = closure(direct), closure(required_order(msgs))
        for j in range(len(msgs)):
            if got[j] != want[j]:
                missing = [i for i in range(j) if (want[j] & ~got[j]) >> i & 1]
                extra = [i for i in range(j) if (got[j] & ~want[j]) >> i & 1]
                problems.append(f"rank {rank} #{j}: missing {missing}, needless {extra}")
    return problems


CASES: list[tuple[str, str | Path, dict[str, int]]] = [
    ("ring_allreduce", "ring_allreduce", {"p": 4}),
    ("ring_allreduce_k3", "ring_allreduce", {"p": 5, "k": 3}),
    ("pipelined_ring_p3", PIPELINED, {"p": 3}),
    ("pipelined_ring_p6_k2", PIPELINED, {"p": 6, "k": 2}),
    ("swing_bw_p8", "swing_bw", {"p": 8}),
    ("swing_lat_p8", "swing_lat", {"p": 8}),
    ("rabenseifner", "rabenseifner", {"p": 8}),
    ("recursive_doubling_any", "recursive_doubling_any", {"p": 6}),
    ("bruck_allgather", "bruck_allgather", {"p": 5}),
    ("ring_reduce_scatter", "ring_reduce_scatter", {"p": 4}),
    ("binomial_broadcast", "binomial_broadcast", {"p": 6, "root": 2}),
    ("binomial_reduce", "binomial_reduce", {"p": 5, "root": 1}),
    ("pairwise_alltoall", "pairwise_alltoall", {"p": 4}),
    ("swing_bw_torus", "swing_bw_torus", {"dims": (4, 4)}),  # type: ignore[dict-item]
]


@pytest.mark.parametrize(("case", "name", "params"), CASES, ids=[c[0] for c in CASES])
def test_dependency_tables_match_brute_force(
    case: str, name: str | Path, params: dict[str, int], tmp_path: Path
) -> None:
    schedule = _schedule(name, **params)
    mpi_c.generate(schedule, tmp_path)
    source = (tmp_path / mpi_c.source_names(schedule)[0]).read_text()
    assert check_tables(schedule, source) == []


def test_pipelined_ring_overlaps_its_steps() -> None:
    """Not every dependency is the previous step: the pipelined ring sends sub-chunk j+1 before j arrives."""
    schedule = _schedule(PIPELINED, p=4, k=4)
    ops = dataflow.rank_ops(tables.from_schedule(schedule), 0)
    first_steps = [op for op in ops if op.send and op.step < 4]
    assert len(first_steps) == 4 and all(op.deps == () for op in first_steps)  # block rank-1's sub-chunks, held
    later = [op for op in ops if op.send and 4 <= op.step < 8]
    assert [ops[op.deps[0]].step for op in later] == [0, 1, 2, 3]  # each waits for one receive, 4 steps back


def test_flow_scratch_has_room_for_two_busiest_steps() -> None:
    for name, params in (("swing_bw", {"p": 8}), ("bruck_allgather", {"p": 5}), ("ring_allreduce", {"p": 4})):
        t = tables.from_schedule(_schedule(name, **params))
        for steps in t.ranks:
            most = max((dataflow.step_scratch(rs) for rs in steps), default=0)
            assert dataflow.flow_scratch(steps) >= 2 * most
            assert dataflow.flow_scratch(steps) <= (dataflow.SCRATCH_WINDOW + 1) * most


def _missing_dependency(schedule: Schedule, source: str) -> str:
    """``source`` with the dependencies of every reduce-scatter send deleted (the send no longer waits for the
    receive that reduced into its chunk)."""

    def drop(m: re.Match[str]) -> str:
        return f"{m.group(1)}, 0 }}"

    head, sep, tail = source.partition("static const struct collc_msg reduce_scatter_msgs[] = {")
    body, end, rest = tail.partition("\n};")
    body = re.sub(r"(\{ \d+, COLLC_SEND,\s+\d+, \d+, \d+, \d+), [1-9]\d* \}", drop, body)
    return head + sep + body + end + rest


# --------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------


def _mpirun(nranks: int, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    _, mpiexec = _tools()
    full_env = mpitools.mpi_env(nranks, {**os.environ, **env})
    full_env.pop("LD_PRELOAD", None)
    return subprocess.run([str(mpiexec), "-n", str(nranks), *command], env=full_env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip


def _flow_results(lib: Path, schedule: Schedule, out: Path, issue: str) -> list[dict[str, np.ndarray]]:
    out.mkdir()
    cmd = [sys.executable, str(FLOW_SCRIPT), str(lib), schedule.algorithm, str(out)]
    proc = _mpirun(schedule.nranks, cmd, {"COLLC_ISSUE": issue})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr[-3000:]
    results = []
    for rank in range(schedule.nranks):
        with np.load(out / f"rank{rank}.npz") as data:
            results.append({k: data[k] for k in data.files})
    return results


RUNS = [
    ("pipelined_ring_p3", PIPELINED, {"p": 3}),
    ("pipelined_ring_lanes_p4", "pipelined_ring_allreduce", {"p": 4}),
    ("pipelined_ring_p6_k3", PIPELINED, {"p": 6, "k": 3}),
    ("swing_bw_p4", "swing_bw", {"p": 4}),
    ("rabenseifner_p4", "rabenseifner", {"p": 4}),
    ("recursive_doubling_any_p3", "recursive_doubling_any", {"p": 3}),
]
FAST_RUNS = ("pipelined_ring_lanes_p4", "recursive_doubling_any_p3")  # the others: -m slow


@pytest.mark.parametrize(
    ("case", "name", "params"),
    [pytest.param(*run, marks=() if run[0] in FAST_RUNS else pytest.mark.slow) for run in RUNS],
    ids=[c[0] for c in RUNS],
)
def test_dataflow_matches_numpy_and_the_step_by_step_run(
    case: str, name: str | Path, params: dict[str, int], tmp_path: Path
) -> None:
    """Random inputs against numpy on every rank, and the same bits as the step-by-step order."""
    _tools()
    schedule = _schedule(name, **params)
    mpi_c.generate(schedule, tmp_path / "lib")
    lib = mpi_c.build(tmp_path / "lib", schedule)
    flow = _flow_results(lib, schedule, tmp_path / "flow", "dataflow")
    steps = _flow_results(lib, schedule, tmp_path / "steps", "steps")
    for rank, (a, b) in enumerate(zip(flow, steps, strict=True)):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].tobytes() == b[key].tobytes(), (rank, key)


def _driver(tmp_path: Path) -> Path:
    mpicc, _ = _tools()
    out = tmp_path / "driver"
    cmd = [str(mpicc), "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(DRIVER)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=TIMEOUT)
    return out


def test_a_missing_dependency_gives_wrong_data_and_is_caught(tmp_path: Path) -> None:
    _tools()
    schedule = _schedule(PIPELINED, p=4, k=2)
    mpi_c.generate(schedule, tmp_path / "lib")
    c_file = tmp_path / "lib" / mpi_c.source_names(schedule)[0]
    planted = _missing_dependency(schedule, c_file.read_text())
    assert planted != c_file.read_text()
    problems = check_tables(schedule, planted)
    assert problems and all("missing" in p for p in problems), problems
    c_file.write_text(planted)
    lib = mpi_c.build(tmp_path / "lib", schedule)
    driver = _driver(tmp_path)
    preload = ["-genv", "LD_PRELOAD", str(lib)]
    wrong = _mpirun(4, [*preload, str(driver), "allreduce", "--quick"], {})
    assert wrong.returncode != 0 and "FAIL allreduce" in wrong.stderr, wrong.stdout + wrong.stderr[-2000:]
    right = _mpirun(4, [*preload, str(driver), "allreduce", "--quick"], {"COLLC_ISSUE": "steps"})
    assert right.returncode == 0 and re.search(r"cases per rank, 0 failures", right.stdout), right.stderr[-2000:]


def test_an_unknown_issue_order_is_noted(tmp_path: Path) -> None:
    _tools()
    schedule = _schedule("ring_allreduce", p=3)
    mpi_c.generate(schedule, tmp_path / "lib")
    lib = mpi_c.build(tmp_path / "lib", schedule)
    driver = _driver(tmp_path)
    proc = _mpirun(3, ["-genv", "LD_PRELOAD", str(lib), str(driver), "allreduce", "--quick"], {"COLLC_ISSUE": "eager"})
    assert proc.returncode == 0 and re.search(r"cases per rank, 0 failures", proc.stdout), proc.stderr[-2000:]
    assert "collc: COLLC_ISSUE=eager is neither dataflow nor steps; dataflow" in proc.stderr


def test_waiting_ranks_poll_and_yield(tmp_path: Path) -> None:
    """A waiting rank polls (MPI_Testsome, MPI_Test) and yields its core between polls (sched_yield): MPICH's
    MPI_Waitsome spins without ever yielding, which with ranks outnumbering cores kept the rank being waited for
    off its core for whole scheduler slices (the dataflow order ran 0.03-1.0x of MPICH over TCP, RESULTS.md).
    The library must not call it (benchmarks/network.py measures the effect; no timing here)."""
    _tools()
    schedule = _schedule("ring_allreduce", p=5)
    mpi_c.generate(schedule, tmp_path / "lib")
    lib = mpi_c.build(tmp_path / "lib", schedule)
    symbols = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True, check=True)
    called = {line.split()[-1].split("@")[0] for line in symbols.stdout.splitlines() if line.strip()}
    assert {"PMPI_Testsome", "sched_yield"} <= called, sorted(called)
    assert not called & {"PMPI_Waitsome", "PMPI_Waitany", "MPI_Waitsome"}, sorted(called)


# --------------------------------------------------------------------------
# Reading the input in place (dataflow.input_reads)
# --------------------------------------------------------------------------

EXAMPLES = HERE.parent / "examples"
READS_CASES = [
    (EXAMPLES / f"{name}.coll", p)
    for name in (
        "ring_allreduce", "rabenseifner", "swing_bw", "swing_lat", "recursive_doubling_any", "ring_reduce_scatter",
        "pairwise_reduce_scatter", "ring_allgather", "direct_allgather",
    )
    for p in ((2, 3, 5, 8) if name == "swing_bw" else (1, 2, 3, 5, 8))  # swing_bw needs p >= 2
] + [
    (PIPELINED, 4), (EXAMPLES / "hierarchical" / "hier_allreduce_ring.coll", 0), (EXAMPLES / "bruck_allgather.coll", 3),
    (EXAMPLES / "hierarchical" / "node_aware_allgather.coll", 0),
    (EXAMPLES / "hierarchical" / "node_aware_reduce_scatter.coll", 0), (EXAMPLES / "binomial_reduce.coll", 6),
]  # fmt: skip


def _reads_schedule(path: Path, p: int) -> Schedule:
    alg = collc.load(str(path))
    params = {"nodes": 2, "local": 3} if "nodes" in alg.param_names else {"p": p}
    if "root" in alg.param_names:
        params["root"] = p // 2
    return _schedule(path, **params)


def run_with_input_reads(
    t: tables.Tables, reads: dataflow.InputReads, inputs: Sequence[np.ndarray], poison: float = np.nan
) -> list[np.ndarray]:
    """Executes the tables step by step in numpy the way the runtime does with ``reads``: work buffers start as
    ``poison``, fresh sends read the input, a fresh reduce writes input + received, and the listed copies come
    last (the runtime makes them while the first messages travel: nothing may read them before)."""
    p = t.nranks
    work = [np.full_like(x, poison) for x in inputs]
    cursor = [0] * p
    by_step = [{rs.step: rs for rs in steps} for steps in t.ranks]
    for step in sorted({rs.step for steps in t.ranks for rs in steps}):
        sent: dict[tuple[int, int], np.ndarray] = {}
        recv_flags: dict[int, list[tuple[bool, ...]]] = {}
        for r in range(p):  # every send reads the buffers as they were at the start of the step
            rs = by_step[r].get(step)
            if rs is None:
                continue
            for m in rs.sends:
                flags = reads.fresh[r][cursor[r]]
                cursor[r] += 1
                parts = [(inputs[r] if f else work[r])[run.lo : run.hi] for run, f in zip(m.runs, flags, strict=True)]
                sent[r, m.peer] = np.concatenate(parts)
            recv_flags[r] = []
            for _ in rs.recvs:
                recv_flags[r].append(reads.fresh[r][cursor[r]])
                cursor[r] += 1
        for r in range(p):
            rs = by_step[r].get(step)
            if rs is None:
                continue
            for m, flags in zip(rs.recvs, recv_flags[r], strict=True):
                data, at = sent[m.peer, r], 0
                for run, fresh in zip(m.runs, flags, strict=True):
                    got = data[at : at + run.hi - run.lo]
                    at += run.hi - run.lo
                    if not run.reduce:
                        work[r][run.lo : run.hi] = got
                    elif fresh:
                        work[r][run.lo : run.hi] = inputs[r][run.lo : run.hi] + got
                    else:
                        work[r][run.lo : run.hi] += got
    for r in range(p):
        for lo, hi in reads.copy[r]:
            work[r][lo:hi] = inputs[r][lo:hi]
    return work


def _inputs(schedule: Schedule, rng: np.random.Generator, lo: int, hi: int) -> list[np.ndarray]:
    """Each rank's input, chunk by chunk (small integers, so that sums are exact in any order); NaN in the chunks
    a rank does not hold at the start (an allgather's other blocks)."""
    origin = chunk_origin(schedule.collective, schedule.nranks, schedule.nchunks, schedule.root)
    out = []
    for r in range(schedule.nranks):
        x = rng.integers(lo, hi, size=(schedule.nchunks, 3)).astype(np.float64)
        x[~initially_held(origin, r)] = np.nan
        out.append(x)
    return out


def _outputs_match_numpy(schedule: Schedule, work: Sequence[np.ndarray], inputs: Sequence[np.ndarray]) -> bool:
    """Each rank's output chunks equal numpy's sum of the inputs (an allgather: each block's owner's input)."""
    total = np.nansum(inputs, axis=0)
    dest = chunk_dest(schedule.collective, schedule.nranks, schedule.nchunks, schedule.root)
    return all(
        np.array_equal(work[r][finally_required(dest, r)], total[finally_required(dest, r)])
        for r in range(schedule.nranks)
    )


@pytest.mark.parametrize(("path", "p"), READS_CASES, ids=[f"{c[0].stem}_p{c[1]}" for c in READS_CASES])
def test_input_reads_give_the_reduction_without_copying_the_input(path: Path, p: int) -> None:
    """Work buffers poisoned with NaN, not the input: every read of a chunk no receive wrote must go to the input,
    and every fresh read must see the input unchanged, or the result differs from numpy's sum."""
    schedule = _reads_schedule(path, p)
    t = tables.from_schedule(schedule)
    reads = dataflow.input_reads(t)
    assert reads is not None
    inputs = _inputs(schedule, np.random.default_rng(7), -8, 9)
    work = run_with_input_reads(t, reads, inputs)
    assert _outputs_match_numpy(schedule, work, inputs)
    copied = sum(hi - lo for segs in reads.copy for lo, hi in segs)
    if schedule.nranks == 1 or schedule.collective is Collective.ALLGATHER:
        assert copied == schedule.nchunks  # the inputs that no receive brings: all, or every rank's own block
    else:
        assert copied == 0  # every output chunk is written by a receive: nothing is copied
        assert any(f for steps in reads.fresh for op in steps for f in op)


@pytest.mark.parametrize("flip", ["send", "reduce"])
def test_a_wrong_input_read_gives_wrong_data(flip: str) -> None:
    """The numpy run above has teeth: one flag flipped (a send of a reduced chunk from the input, or a reduce into
    a written chunk as if it were fresh) gives a result other than numpy's."""
    schedule = _schedule("ring_allreduce", p=4) if flip == "send" else _schedule("rabenseifner", p=8)
    t = tables.from_schedule(schedule)
    reads = dataflow.input_reads(t)
    assert reads is not None
    ops = dataflow.rank_ops(t, 1)
    inputs = _inputs(schedule, np.random.default_rng(3), 1, 9)
    index = next(  # the first op of its kind that reads a chunk a receive wrote
        i
        for i, op in enumerate(ops)
        if op.send == (flip == "send") and not any(reads.fresh[1][i]) and (op.send or t_reduces(t, 1, i))
    )
    fresh = list(reads.fresh)
    rank1 = list(fresh[1])
    rank1[index] = tuple(True for _ in rank1[index])
    fresh[1] = tuple(rank1)
    wrong = dataflow.InputReads(tuple(fresh), reads.copy)
    assert _outputs_match_numpy(schedule, run_with_input_reads(t, reads, inputs), inputs)
    assert not _outputs_match_numpy(schedule, run_with_input_reads(t, wrong, inputs, poison=0.0), inputs)


def t_reduces(t: tables.Tables, rank: int, index: int) -> bool:
    """Whether op ``index`` of ``rank`` (table order) is a receive with a reduce run."""
    msgs = [m for rs in t.ranks[rank] for m in (*rs.sends, *rs.recvs)]
    return any(r.reduce for r in msgs[index].runs)


def test_input_reads_refuse_a_run_that_mixes_fresh_and_written_chunks() -> None:
    rs = [
        tables.RankStep(0, (), (tables.Message(1, (tables.Run(0, 1, reduce=True),)),)),
        tables.RankStep(1, (tables.Message(1, (tables.Run(0, 2),)),), ()),
    ]
    t = tables.from_schedule(_schedule("ring_allreduce", p=2))
    mixed = tables.Tables(**{**{f: getattr(t, f) for f in t.__dataclass_fields__}, "ranks": (tuple(rs), ())})
    assert dataflow.input_reads(mixed) is None
    bruck = tables.from_schedule(_schedule("bruck_allgather", p=5))
    assert dataflow.input_reads(bruck) is None  # its windows hold its own block and received ones
    broadcast = tables.from_schedule(_schedule("binomial_broadcast", p=4, root=1))
    assert dataflow.input_reads(broadcast) is None  # its buffer is its input and its output
