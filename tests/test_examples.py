"""The example library: every example verified for every allowed p in 2..64, run on the
local executor against numpy, and mutants of the examples rejected with the right line.
The examples with compression points (examples/compression/) are verified for p in 2..16 and
run with their codecs, judged by their error bounds (more in tests/test_compression*.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import collc
from collc.backends import local
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import parse_program
from collc.verify.check import check

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.coll"))
COMPRESSION = sorted(p.stem for p in EXAMPLES.glob("compression/*.coll"))


def params_for(alg: collc.Algorithm, p: int) -> dict[str, int]:
    params = {"p": p}
    if "root" in alg.param_names:
        params["root"] = (3 * p) // 4  # a root other than 0
    return params


def allowed(alg: collc.Algorithm, p: int) -> collc.Instance | None:
    try:
        return alg.instantiate(**params_for(alg, p))
    except CollError as err:
        if "violates the constraint" in err.message:
            return None
        raise


def test_the_library_has_every_required_example() -> None:
    wanted = {
        "ring_allreduce", "ring_allgather", "ring_reduce_scatter", "recursive_doubling",
        "recursive_doubling_any", "rabenseifner", "swing_bw", "swing_lat", "binomial_broadcast",
        "binomial_reduce", "bruck_allgather", "pairwise_alltoall",
    }  # fmt: skip
    assert wanted <= set(NAMES)


# Examples whose checks grow fastest with p (k sub-chunks or stripes per rank, lanes to order, p * p blocks
# chosen by a condition): the normal suite verifies them for p up to 32, the slow one from 33 to 64.
HEAVY = ("pipelined_ring_allreduce", "striped_ring_allreduce", "weighted_striped_ring_allreduce",
         "bruck_alltoall")  # fmt: skip


# Examples for powers of two only (their constraints say so).
POW2_ONLY = ("recursive_doubling", "swing_bw_pow2", "recursive_doubling_allgather", "bine_allreduce", "bine_allgather",
             "bine_reduce_scatter", "bine_alltoall")  # fmt: skip


def _verify_range(name: str, ps: range) -> list[int]:
    alg = collc.load(EXAMPLES / f"{name}.coll")
    verified = []
    for p in ps:
        inst = allowed(alg, p)
        if inst is None:
            continue
        report = inst.verify()
        assert report.ok, f"{name} p={p}: {report.findings[0].message}"
        verified.append(p)
    return verified


@pytest.mark.parametrize("name", NAMES)
def test_example_verifies_for_every_allowed_p(name: str) -> None:
    top = 33 if name in HEAVY else 65
    verified = _verify_range(name, range(2, top))
    assert verified, f"{name} allows no p in 2..{top - 1}"
    if name in POW2_ONLY:
        assert verified == [2, 4, 8, 16, 32, 64]
    else:
        assert verified == list(range(2, top))


@pytest.mark.slow
@pytest.mark.parametrize("name", HEAVY)
def test_heavy_example_verifies_up_to_64(name: str) -> None:
    assert _verify_range(name, range(33, 65)) == list(range(33, 65))


@pytest.mark.parametrize("name", NAMES)
def test_example_runs_correctly_on_the_local_executor(name: str) -> None:
    alg = collc.load(EXAMPLES / f"{name}.coll")
    ran = 0
    for p in (2, 3, 4, 5, 8, 12, 16):
        inst = allowed(alg, p)
        if inst is None:
            continue
        count = p * p * 3 if alg.collective.value == "alltoall" else 7 * p + 3  # uneven chunks
        for dtype, op in (("float64", "sum"), ("int32", "max"), ("int64", "prod")):
            result = inst.run(count, dtype, op, seed=p)
            assert result.wrong == 0, f"{name} p={p} {dtype} {op}: {result.wrong} wrong"
        ran += 1
    assert ran >= 3


def test_the_library_has_the_compression_examples() -> None:
    wanted = {
        "compressed_ring_allgather_p2p", "compressed_ring_allgather", "compressed_ring_reduce_scatter",
        "compressed_ring_allreduce", "homomorphic_allreduce", "compressed_swing_bw",
    }  # fmt: skip
    assert wanted <= set(COMPRESSION)
    assert not set(COMPRESSION) & set(NAMES)  # usable by name: the names are unique


@pytest.mark.parametrize("name", COMPRESSION)
def test_compression_example_verifies_and_runs_within_its_bound(name: str) -> None:
    alg = collc.load(name)
    assert alg.codecs, f"{name} declares no codec"
    for p in range(2, 17):
        inst = allowed(alg, p)
        assert inst is not None, f"{name} rejects p={p}"
        report = inst.verify()
        assert report.ok, f"{name} p={p}: {report.findings[0].message}"
        assert inst.schedule.compresses() and report.compression is not None
        if p in (2, 5, 8, 16):
            count = 7 * p if alg.collective.value in ("allgather", "reduce_scatter") else 7 * p + 3
            for dtype in ("float32", "float64"):
                result = inst.run(count, dtype, "sum", seed=p)
                assert result.wrong == 0, f"{name} p={p} {dtype}: {result.wrong} outside the bound"
                assert result.max_abs_error is not None and result.error_bound is not None
                assert 0 < result.max_abs_error <= result.error_bound


def test_allreduce_result_equals_numpy_sum_directly() -> None:
    """End to end without the executor's own reference: inputs in, numpy sum out."""
    inst = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=6)
    count = 100
    inputs = local.make_inputs(inst.schedule, count, "float64", seed=3)
    buffers = inputs.copy()
    local.execute(local.plan(inst.schedule, count), buffers, "sum")
    want = inputs.sum(axis=0)
    for r in range(6):
        np.testing.assert_allclose(buffers[r], want, rtol=1e-12)


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32, 64])
def test_bandwidth_and_latency_optimality(p: int) -> None:
    """Independent figures: 2(p-1)/p of the vector for the bandwidth-optimal allreduces,
    2 log2 p steps for Swing-bw and Rabenseifner, log2 p for the latency-optimal ones."""
    lg = int(math.log2(p))
    for name, steps, sent in (
        ("swing_bw", 2 * lg, 2 * (p - 1) / p),
        ("rabenseifner", 2 * lg, 2 * (p - 1) / p),
        ("ring_allreduce", 2 * (p - 1), 2 * (p - 1) / p),
        ("swing_lat", lg, lg),
        ("recursive_doubling", lg, lg),
    ):
        report = collc.load(EXAMPLES / f"{name}.coll").instantiate(p=p).verify()
        assert report.stats.steps == steps, name
        assert report.stats.max_sent_fraction == pytest.approx(sent), name


def test_swing_nonpow2_block_counts_match_the_paper() -> None:
    """swing.md §3: per-step block counts p=12 -> [6, 2, 2, 1], p=10 -> [2, 4, 2, 1] (rank 0's sends)."""
    for p, want in ((12, [6, 2, 2, 1]), (10, [2, 4, 2, 1])):
        s = collc.load(EXAMPLES / "swing_bw.coll").instantiate(p=p).schedule
        counts = [
            len(op.chunks) for step in s.steps if step.phase == "reduce_scatter"
            for op in step.ops if op.rank == 0 and op.kind.value == "send"
        ]  # fmt: skip
        assert counts == want


# --------------------------------------------------------------------------
# Mutants: each must fail the check, naming the mutated line
# --------------------------------------------------------------------------

MUTANTS = [
    # (example, regex to find the line, replacement, p)
    ("swing_bw", r"exchange with peer\(rank, s\): send blocks\(rank, s\); recv blocks\(peer\(rank, s\), s\) reduce",
     "exchange with peer(rank, s): send blocks(rank, s); recv blocks(peer(rank, s), s) copy", 8),
    ("swing_bw", r"send blocks\(peer\(rank, s\), s\); recv blocks\(rank, s\) copy",
     "send blocks(peer(rank, s), s) - {0}; recv blocks(rank, s) - {0} copy", 8),
    ("swing_bw", r"exchange with peer\(rank, s\): send blocks\(rank, s\);",
     "exchange with (rank + 1) mod p: send blocks(rank, s);", 8),
    ("recursive_doubling", r"exchange with rank \^ \(1 << s\)", "exchange with rank ^ (1 << (s // 2))", 8),
    ("rabenseifner", r"recv give\(rank, s\) copy", "recv give(rank, s) reduce", 8),
    # the bug is in a `let`; the finding points at the receive that never brings the block
    ("bruck_allgather", r"let n = min\(d, p - d\)", "let n = min(d, p - d - 1)", 6, r"recv run"),
    ("binomial_reduce", r"recv 0 from real\(v \+ d\) reduce", "recv 0 from real(v + d) copy", 8),
    ("pairwise_alltoall", r"for step s in 1 \.\. p:", "for step s in 2 .. p:", 5, r"recv chunk"),
    ("scatter_allgather_broadcast", r"recv blocks\(v, v \+ d\) from", "recv blocks(v, v + d - 1) from", 6,
     r"send blocks\("),
    ("double_binary_tree_allreduce", r"recv t from rank_at\(t, parent\(x\)\) copy",
     "recv t from rank_at(t, parent(x)) reduce", 6),
    ("bruck_alltoall", r"moves\(c, k\)\} from", "moves(c, k) and c != 1} from", 2, r"send \{"),
    ("pairwise_reduce_scatter", r"recv rank from \(rank - s\) mod p reduce", "recv rank from (rank - s) mod p copy", 5),
    ("direct_allgather", r"recv \(rank - s\) mod p from", "recv (rank + s) mod p from", 5),
    ("recursive_doubling_allgather", r"recv window\(rank \^ \(1 << s\), s\)", "recv window(rank, s)", 8),
    ("binomial_gather", r"elif v % \(2 \* d\) == 0 and v \+ d < p:", "elif v % (2 * d) == 0 and v + d < p - 1:", 6,
     r"send \{"),
    ("binomial_scatter", r"let d = 1 << \(ceil_log2\(p\) - 1 - s\)", "let d = 1 << s", 6, r"send \{"),
    ("hillis_steele_scan", r"recv 0 from rank - d reduce", "recv 0 from rank - d copy", 4),
    ("hillis_steele_exscan", r"recv 0 from rank - 1 copy", "recv 0 from rank - 1 reduce", 4),
    ("dissemination_barrier", r"mod p < \(1 << s\)\}", "mod p < (1 << s) and c != 0}", 4, r"recv seen"),
    ("bine_gather", r"send subtree\(v, m\) to", "send subtree(v, m + 1) to", 6),
    # the scatter in the reduce's order; the finding points at the send of a subtree not yet received
    ("bine_scatter", r"let m = n - 1 - t", "let m = t", 6, r"send subtree\("),
]  # fmt: skip


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m[0]}:{m[1][:30]}")
def test_mutated_example_fails_with_its_line(mutant: tuple) -> None:  # type: ignore[type-arg]
    name, pattern, replacement, p, *reported = mutant
    path = EXAMPLES / f"{name}.coll"
    text = path.read_text()
    match = re.search(pattern, text)
    assert match, pattern
    where = re.search(reported[0], text) if reported else match
    assert where, reported
    line = text.count("\n", 0, where.start()) + 1
    mutant = text[: match.start()] + replacement + text[match.end() :]
    program = parse_program(mutant, str(path))
    params = {"p": p, **({"root": 1} if program.param("root") else {})}
    report = check(elaborate(program, params))
    assert not report.ok
    lines = {f.span.line for f in report.findings}
    assert line in lines, f"expected a finding on line {line}, got {sorted(lines)}: {report.findings[0].message}"


# --------------------------------------------------------------------------
# Hierarchical examples (examples/hierarchical/): nodes x local ranks
# --------------------------------------------------------------------------

HIERARCHICAL = sorted(p.stem for p in EXAMPLES.glob("hierarchical/*.coll"))


def test_the_library_has_the_hierarchical_examples() -> None:
    assert {
        "hier_allreduce_swing", "hier_allreduce_ring", "hier_allgather", "node_aware_allgather",
        "node_aware_reduce_scatter",
    } <= set(HIERARCHICAL)  # fmt: skip
    assert not set(HIERARCHICAL) & (set(NAMES) | set(COMPRESSION))  # usable by name


@pytest.mark.parametrize("name", HIERARCHICAL)
def test_hierarchical_example_verifies_over_nodes_and_local(name: str) -> None:
    alg = collc.load(EXAMPLES / "hierarchical" / f"{name}.coll")
    verified = []
    for nodes in range(1, 7):
        for local_ in range(1, 5):
            try:
                inst = alg.instantiate(nodes=nodes, local=local_)
            except CollError as err:
                assert "violates the constraint" in err.message
                continue
            assert inst.schedule.nranks == nodes * local_
            report = inst.verify()
            assert report.ok, f"{name} nodes={nodes} local={local_}: {report.findings[0].message}"
            verified.append((nodes, local_))
    wanted_nodes = {1, 2, 4, 6} if name == "hier_allreduce_swing" else set(range(1, 7))
    assert {n for n, _ in verified} == wanted_nodes and {lc for _, lc in verified} == set(range(1, 5))


@pytest.mark.parametrize("name", HIERARCHICAL)
def test_hierarchical_example_runs_correctly_on_the_local_executor(name: str) -> None:
    alg = collc.load(EXAMPLES / "hierarchical" / f"{name}.coll")
    for nodes, local_ in ((2, 3), (4, 2), (6, 1), (1, 5)):
        inst = alg.instantiate(nodes=nodes, local=local_)
        p = nodes * local_
        for dtype, op in (("float64", "sum"), ("int32", "max"), ("int64", "prod")):
            result = inst.run(7 * p + 3, dtype, op, seed=p)  # uneven chunks
            assert result.wrong == 0, f"{name} nodes={nodes} local={local_} {dtype} {op}: {result.wrong} wrong"


HIERARCHICAL_MUTANTS = [
    # (example, regex to find the line, replacement): each must fail the check at nodes=3 local=2, naming the line
    ("node_aware_allgather", r"recv rank_at\(\(n - j\) mod nodes, \(l - s - 1\) mod local\)",
     "recv rank_at((n - j) mod nodes, (l - s) mod local)"),
    ("node_aware_allgather", r"for step s in 0 \.\. nodes - 1:", "for step s in 0 .. nodes - 2:"),
    ("node_aware_reduce_scatter", r"from rank_at\(\(n - 1\) mod nodes, l\) reduce",
     "from rank_at((n - 1) mod nodes, l) copy"),
    ("node_aware_reduce_scatter", r"let s = t // nodes", "let s = t mod nodes"),
]  # fmt: skip


@pytest.mark.parametrize("mutant", HIERARCHICAL_MUTANTS, ids=lambda m: f"{m[0]}:{m[1][:30]}")
def test_mutated_hierarchical_example_fails(mutant: tuple[str, str, str]) -> None:
    name, pattern, replacement = mutant
    path = EXAMPLES / "hierarchical" / f"{name}.coll"
    text = path.read_text()
    match = re.search(pattern, text)
    assert match, pattern
    program = parse_program(text[: match.start()] + replacement + text[match.end() :], str(path))
    report = check(elaborate(program, {"nodes": 3, "local": 2}))
    assert not report.ok
    assert all(f.span.file == str(path) for f in report.findings)
