"""The Bine programs (examples/bine_*.coll, De Sensi et al., "Bine trees", SC'25).

Each program is verified at several p; its peers and block sets are compared with a model of the
Bine formulas written here from the definitions (negabinary digits by repeated division by -2, the
butterfly peer r +- rho(s) with rho(s) = sum of (-2)^i for i <= s, libbine's recursive block bitmaps,
its remapped rank nu(r), the tree partner root + nb2b(nb(v) ^ (2^(m+1) - 1)), the subtree below each
tree edge, and libbine's gather_bine range arithmetic); and mutated copies of the programs, with a
wrong peer or block set, are rejected by the verifier.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

import collc
from collc.diagnostics import CollError
from collc.ir import OpKind, Schedule

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BUTTERFLIES = ("bine_allreduce", "bine_allgather", "bine_reduce_scatter", "bine_alltoall")
TREES = ("bine_broadcast", "bine_reduce", "bine_gather", "bine_scatter")
PEER_PS = (4, 8, 16, 32)


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------


def to_negabinary(value: int) -> int:
    """The base -2 digits of ``value`` as the bits of an int (bit i is the digit of (-2)^i)."""
    digits, i = 0, 0
    while value != 0:
        digit = value % 2
        digits |= digit << i
        value = (value - digit) // -2
        i += 1
    return digits


def from_negabinary(digits: int) -> int:
    return sum((-2) ** i for i in range(digits.bit_length()) if (digits >> i) & 1)


def rho(s: int) -> int:
    """The paper's rho(s) = sum_{i <= s} (-2)^i: 1, -1, 3, -5, 11, ..."""
    return sum((-2) ** i for i in range(s + 1))


def butterfly_peer(r: int, s: int, p: int) -> int:
    """pi(r, s): r + rho(s) from an even r, r - rho(s) from an odd one, modulo p."""
    return (r + rho(s)) % p if r % 2 == 0 else (r - rho(s)) % p


@cache
def reached(r: int, s: int, p: int) -> frozenset[int]:
    """libbine's get_indexes(r, s): the peer of r at step s and every rank it reaches in steps s + 1 ..."""
    steps = p.bit_length() - 1
    if s >= steps:
        return frozenset()
    out: set[int] = set()

    def follow(x: int, t: int) -> None:
        for u in range(t, steps):
            y = butterfly_peer(x, u, p)
            out.add(y)
            follow(y, u + 1)

    q = butterfly_peer(r, s, p)
    out.add(q)
    follow(q, s + 1)
    return frozenset(out)


def nu(r: int, p: int) -> int:
    """libbine's remap_rank: the bit-reversed Gray code of the n-digit negabinary of r (odd r) or -r
    (even r), moved by p into the range of n digits."""
    n = p.bit_length() - 1
    y = r if r % 2 == 1 else -r
    (digits,) = [to_negabinary(c) for c in (y - p, y, y + p) if to_negabinary(c) < p]
    gray = digits ^ (digits >> 1)
    return int(format(gray, f"0{n}b")[::-1], 2) if n else 0


def tree_edges(p: int, root: int) -> list[set[tuple[int, int]]]:
    """The Bine broadcast tree of SC'25 §7 (p a power of two), step by step from mask 2^(n-1) down to 1:
    every rank that has the data sends it to root + nb2b(nb(v) ^ (2^(m+1) - 1)), v = rank - root
    mod p; a rank receives at the first step where its lowest m + 1 digits are equal."""
    n = p.bit_length() - 1
    have = {root}
    steps = []
    for m in reversed(range(n)):
        mask = (2 << m) - 1
        edges = set()
        for r in sorted(have):
            v = to_negabinary((r - root) % p)
            edges.add((r, (root + from_negabinary(v ^ mask)) % p))
        receivers = {r for r in range(p) if r not in have and to_negabinary((r - root) % p) & mask in (0, mask)}
        assert {b for _, b in edges} == receivers  # the model is a tree: one sender per receiver
        have |= receivers
        steps.append(edges)
    assert have == set(range(p))
    return steps


Message = tuple[int, int, frozenset[int]]  # (sender, receiver, blocks)


def subtree_messages(p: int, root: int, collective: str) -> list[set[Message]]:
    """The gather or scatter on the tree above: the tree of tree_edges on q = the largest power of two
    <= p (relative to the root), with node v >= q hung below v - q; every edge carries the blocks of
    the ranks below its lower end, found by walking the tree.  The scatter goes from the root down
    (the extra ranks last), the gather from the leaves up (the extra ranks first)."""
    q = 1 << (p.bit_length() - 1)
    steps = tree_edges(q, 0) if q > 1 else []
    children: dict[int, list[int]] = defaultdict(list)
    for edges in steps:
        for a, b in edges:
            children[a].append(b)
    for v in range(q, p):
        children[v - q].append(v)

    def below(v: int) -> frozenset[int]:
        return frozenset({(v + root) % p}).union(*(below(c) for c in children[v]))

    def real(v: int) -> int:
        return (v + root) % p

    down = [{(real(a), real(b), below(b)) for a, b in edges} for edges in steps]
    extra = [{(real(v - q), real(v), below(v)) for v in range(q, p)}] if p > q else []
    if collective == "scatter":
        return down + extra
    return [{(b, a, blk) for a, b, blk in edges} for edges in reversed(down + extra)]


def libbine_gather(p: int, root: int) -> tuple[list[set[Message]], list[set[Message]]]:
    """libbine's gather_bine (p a power of two), step by step: the ranges each rank sends and the ranges
    each receiver stores the message at.  A rank holds the blocks [lo, hi] (modulo p, in rank order)
    and grows the range by mask blocks at a time, above for an even rank, below for an odd one, the
    side alternating from step to step; its partner is root + nb2b(nb(v) ^ (2 * mask - 1))."""
    lo, hi = list(range(p)), list(range(p))
    up = [r % 2 == 0 for r in range(p)]
    done = [False] * p
    sent: list[set[Message]] = []
    stored: list[set[Message]] = []
    mask = 1
    while mask < p:
        out, into = set(), set()
        for r in range(p):
            if done[r]:
                continue
            d = to_negabinary((r - root) % p)
            partner = (root + from_negabinary(d ^ (2 * mask - 1))) % p
            low = d & (4 * mask - 1)
            if low not in (0, 4 * mask - 1) or (2 * mask >= p and r != root):
                out.add((r, partner, frozenset((lo[r] + i) % p for i in range((hi[r] - lo[r]) % p + 1))))
                done[r] = True
                continue
            if up[r]:
                got = frozenset((hi[r] + 1 + i) % p for i in range(mask))
                hi[r] = (hi[r] + mask) % p
            else:
                got = frozenset((lo[r] - 1 - i) % p for i in range(mask))
                lo[r] = (lo[r] - mask) % p
            into.add((partner, r, got))
            up[r] = not up[r]
        sent.append(out)
        stored.append(into)
        mask *= 2
    return sent, stored


# --------------------------------------------------------------------------
# Reading a schedule
# --------------------------------------------------------------------------


def sends(schedule: Schedule, index: int) -> dict[int, tuple[int, frozenset[int]]]:
    """Every rank's one send of step ``index``: rank -> (peer, chunks)."""
    out: dict[int, tuple[int, frozenset[int]]] = {}
    for op in schedule.steps[index].ops:
        if op.kind is OpKind.SEND:
            assert op.rank not in out, f"rank {op.rank} sends twice in step {index}"
            out[op.rank] = (op.peer, frozenset(op.chunks))
    return out


def messages(schedule: Schedule) -> list[set[Message]]:
    """Every step's sends as (sender, receiver, blocks), the empty steps left out."""
    out = []
    for step in schedule.steps:
        got = {(op.rank, op.peer, frozenset(op.chunks)) for op in step.ops if op.kind is OpKind.SEND}
        if got:
            out.append(got)
    return out


def instance(name: str, **params: int) -> collc.Instance:
    return collc.load(EXAMPLES / f"{name}.coll").instantiate(**params)


def blocks(ranks: frozenset[int], k: int) -> frozenset[int]:
    return frozenset(c * k + j for c in ranks for j in range(k))


# --------------------------------------------------------------------------
# (a) verification
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUTTERFLIES)
def test_butterfly_verifies_at_powers_of_two(name: str) -> None:
    for p in (1, 2, 4, 8, 16, 32):
        report = instance(name, p=p).verify()
        assert report.ok, f"{name} p={p}: {report.findings[0].message}"
    for k in (2, 3) if name != "bine_alltoall" else ():  # chunks per block
        report = instance(name, p=8, k=k).verify()
        assert report.ok, f"{name} p=8 k={k}: {report.findings[0].message}"


@pytest.mark.parametrize("name", BUTTERFLIES)
def test_butterfly_refuses_other_p_by_its_constraint(name: str) -> None:
    with pytest.raises(CollError, match=r"p=6 violates the constraint is_pow2\(p\)"):
        instance(name, p=6)


@pytest.mark.parametrize("name", TREES)
def test_tree_verifies_for_every_p_and_root(name: str) -> None:
    for p in range(1, 13):
        for root in range(p):
            report = instance(name, p=p, root=root).verify()
            assert report.ok, f"{name} p={p} root={root}: {report.findings[0].message}"
    for p, root in ((16, 11), (32, 5), (33, 32), (48, 17)):
        report = instance(name, p=p, root=root).verify()
        assert report.ok, f"{name} p={p} root={root}: {report.findings[0].message}"


@pytest.mark.parametrize("name", BUTTERFLIES + TREES)
def test_runs_correctly_on_the_local_executor(name: str) -> None:
    params = {"p": 8, "root": 6} if name in TREES else {"p": 8}
    assert instance(name, **params).run(count=8 * 125).wrong == 0


# --------------------------------------------------------------------------
# (b) peers and block sets against the model
# --------------------------------------------------------------------------


@pytest.mark.parametrize("p", PEER_PS)
def test_reduce_scatter_matches_the_bitmaps(p: int) -> None:
    k = 2
    schedule = instance("bine_reduce_scatter", p=p, k=k).schedule
    n = p.bit_length() - 1
    assert len(schedule.steps) == n
    for s in range(n):  # distance-doubling: rho(0), rho(1), ...
        got = sends(schedule, s)
        for r in range(p):
            peer, chunks = got[r]
            assert peer == butterfly_peer(r, s, p)
            assert chunks == blocks(reached(r, s, p), k)
            # the natural-layout set is libbine's remapped window, read back: nu(c) shares its
            # top s + 1 bits with nu(peer)
            top = n - 1 - s
            assert reached(r, s, p) == {c for c in range(p) if nu(c, p) >> top == nu(peer, p) >> top}


@pytest.mark.parametrize("p", PEER_PS)
def test_allgather_matches_the_bitmaps(p: int) -> None:
    schedule = instance("bine_allgather", p=p).schedule
    n = p.bit_length() - 1
    assert len(schedule.steps) == n
    for i in range(n):  # distance-halving: rho(n - 1) first, as allgather_bine_block_by_block
        s = n - 1 - i
        got = sends(schedule, i)
        for r in range(p):
            peer, chunks = got[r]
            assert peer == butterfly_peer(r, s, p)
            assert chunks == reached(peer, s, p)  # get_indexes(remote, step)
            assert len(chunks) == 1 << i


@pytest.mark.parametrize("p", PEER_PS)
def test_allreduce_is_the_two_halves(p: int) -> None:
    schedule = instance("bine_allreduce", p=p).schedule
    n = p.bit_length() - 1
    assert [st.phase for st in schedule.steps] == ["reduce_scatter"] * n + ["allgather"] * n
    for i in range(2 * n):
        s = i if i < n else 2 * n - 1 - i
        got = sends(schedule, i)
        for r in range(p):
            peer, chunks = got[r]
            assert peer == butterfly_peer(r, s, p)
            assert chunks == (reached(r, s, p) if i < n else reached(peer, s, p))


@pytest.mark.parametrize("p", PEER_PS)
def test_alltoall_moves_blocks_as_libbine(p: int) -> None:
    """libbine's alltoall_bine: at step s every rank sends the blocks it holds whose destination's
    remapped rank shares its top s + 1 bits with the peer's; a block is (source, destination)."""
    schedule = instance("bine_alltoall", p=p).schedule
    n = p.bit_length() - 1
    assert len(schedule.steps) == n
    held = {r: {(r, d) for d in range(p)} for r in range(p)}
    for s in range(n):
        got = sends(schedule, s)
        top = n - 1 - s
        moves = {}
        for r in range(p):
            peer = butterfly_peer(r, s, p)
            moves[r] = {(a, d) for a, d in held[r] if nu(d, p) >> top == nu(peer, p) >> top}
            assert len(moves[r]) == p // 2
            assert got[r] == (peer, frozenset(a * p + d for a, d in moves[r]))
        for r in range(p):
            held[r] -= moves[r]
            held[butterfly_peer(r, s, p)] |= moves[r]
    assert all(held[r] == {(a, r) for a in range(p)} for r in range(p))


@pytest.mark.parametrize("p", PEER_PS)
def test_broadcast_tree_matches_the_paper(p: int) -> None:
    n = p.bit_length() - 1
    for root in sorted({0, 1, p // 2 + 1, p - 1}):
        schedule = instance("bine_broadcast", p=p, root=root).schedule
        model = tree_edges(p, root)
        assert len(schedule.steps) == n
        for t in range(n):
            assert {(r, peer) for r, (peer, _) in sends(schedule, t).items()} == model[t]
            # a tree edge at mask 2^m is the sender's butterfly edge at step m, relative to the root
            m = n - 1 - t
            for a, b in model[t]:
                assert (butterfly_peer((a - root) % p, m, p) + root) % p == b


@pytest.mark.parametrize("p", PEER_PS)
def test_reduce_tree_is_the_broadcast_tree_reversed(p: int) -> None:
    n = p.bit_length() - 1
    for root in sorted({0, 3 % p, p - 1}):
        schedule = instance("bine_reduce", p=p, root=root).schedule
        model = tree_edges(p, root)
        assert len(schedule.steps) == n
        for m in range(n):  # the leaves first: mask 1, 2, 4, ...
            edges = {(r, peer) for r, (peer, _) in sends(schedule, m).items()}
            assert edges == {(b, a) for a, b in model[n - 1 - m]}


def is_run(ranks: frozenset[int], p: int) -> bool:
    """Whether the ranks are consecutive modulo p (one range, possibly wrapping past p - 1)."""
    return any(ranks == {(a + i) % p for i in range(len(ranks))} for a in ranks)


@pytest.mark.parametrize("p", (4, 6, 8, 12, 16))
def test_gather_and_scatter_carry_the_subtree_of_each_edge(p: int) -> None:
    for root in sorted({0, 1, p // 2 + 1, p - 1}):
        for collective in ("gather", "scatter"):
            model = subtree_messages(p, root, collective)
            assert len(model) == (p - 1).bit_length()  # ceil(log2 p) steps
            assert messages(instance(f"bine_{collective}", p=p, root=root).schedule) == model
            for k in (2, 3):  # a block is chunks c*k .. (c+1)*k
                want = [{(a, b, blocks(blk, k)) for a, b, blk in step} for step in model]
                assert messages(instance(f"bine_{collective}", p=p, root=root, k=k).schedule) == want
            if p & (p - 1) == 0:  # a subtree is a run of ranks: libbine sends it as one range (two if wrapped)
                assert all(is_run(blk, p) for step in model for _, _, blk in step)


@pytest.mark.parametrize("p", (4, 6, 8, 12, 16))
def test_scatter_is_the_gather_reversed(p: int) -> None:
    for root in (0, p - 1):
        gather = messages(instance("bine_gather", p=p, root=root).schedule)
        scatter = messages(instance("bine_scatter", p=p, root=root).schedule)
        assert scatter == [{(b, a, blk) for a, b, blk in step} for step in reversed(gather)]


@pytest.mark.parametrize("p", (4, 8, 16))
def test_gather_matches_libbine_at_even_roots(p: int) -> None:
    """gather_bine's ranges are our subtrees when the root is even.  Its growth side follows the parity
    of the rank rather than of its distance from the root, so at an odd root a receiver stores the
    sender's blocks at other positions: same edges, blocks misplaced (the message sizes agree)."""
    for root in range(p):
        sent, stored = libbine_gather(p, root)
        ours = messages(instance("bine_gather", p=p, root=root).schedule)
        assert [{(a, b) for a, b, _ in step} for step in sent] == [{(a, b) for a, b, _ in step} for step in ours]
        if root % 2 == 0:
            assert sent == stored == ours
        else:
            assert stored != ours


def test_model_agrees_with_the_papers_numbers() -> None:
    assert [rho(s) for s in range(6)] == [1, -1, 3, -5, 11, -21]
    assert all(from_negabinary(to_negabinary(v)) == v for v in range(-100, 100))
    assert to_negabinary(rho(4)) == 0b11111
    assert [nu(r, 8) for r in range(8)] == [0, 4, 6, 1, 3, 7, 5, 2]
    assert [nu(r, 16) for r in range(16)] == [0, 8, 12, 2, 5, 14, 9, 7, 3, 11, 15, 1, 6, 13, 10, 4]


# --------------------------------------------------------------------------
# (c) planted faults
# --------------------------------------------------------------------------

MUTANTS = [
    # an odd rank steps the wrong way: the peers no longer pair up
    ("bine_allgather", "else (r - rho(s)) mod p", "else (r + rho(s)) mod p", "unmatched-send"),
    # every block set one step late (consistent on both sides): blocks never reach their owner
    ("bine_reduce_scatter", "((4 << s) - 1)) == (2 << s)", "((4 << s) - 1)) == (4 << s)", "postcondition"),
    # the receive names the rank's own block set instead of the peer's
    ("bine_reduce_scatter", "recv blocks(q, s) reduce", "recv blocks(rank, s) reduce", "unmatched-send"),
    # the allgather half in the reduce-scatter's order
    ("bine_allreduce", "for step s in reversed(0 .. n):", "for step s in 0 .. n:", "postcondition"),
    # twice as many sources assumed present: blocks sent before they arrive
    ("bine_alltoall", "< (1 << s)", "< (2 << s)", "send-not-held"),
    # a binomial partner (v + 2^m) instead of the negabinary one
    ("bine_broadcast", "value(negabinary(v) ^ ((2 << m) - 1)) mod q", "(v + (1 << m)) mod q", "unmatched-send"),
    # a node that should still be waiting sends
    ("bine_broadcast", "if run(d, m + 2):", "if run(d, m + 1):", "unmatched-send"),
    # a node sends one step early
    ("bine_reduce", "elif run(d, m + 1):", "elif run(d, m):", "unmatched-send"),
    # the gather's sender names the subtree it will have one step later: more than the receiver expects
    ("bine_gather", "send subtree(v, m) to", "send subtree(v, m + 1) to", "unmatched-send"),
    # the gather in the broadcast's order: the subtrees are sent before they are gathered
    ("bine_gather", "for step m in 0 .. n:", "for step m in reversed(0 .. n):", "send-not-held"),
    # subtrees one digit too wide, on both sides: a sender passes on blocks it has not received
    ("bine_gather", ">> m == negabinary(v) >> m}", ">> m == negabinary(v) >> (m + 1)}", "send-not-held"),
    # the scatter in the reduce's order: the leaves send first
    ("bine_scatter", "let m = n - 1 - t", "let m = t", "send-not-held"),
    # the receiver expects the subtree it had one step earlier
    ("bine_scatter", "recv subtree(v, m) from", "recv subtree(v, m + 1) from", "unmatched-recv"),
    # subtrees one digit too wide, on both sides: at a power of two a rank's own block goes astray
    ("bine_scatter", ">> m == negabinary(v) >> m}", ">> m == negabinary(v) >> (m + 1)}", "postcondition"),
]

# Faults in the fold of p - q ranks onto the tree, seen only when p is not a power of two.
FOLD_MUTANTS = [
    # rank v = q keeps its block: the node before it waits for nothing
    ("bine_gather", "if v >= q:", "if v > q:", "unmatched-recv"),
    # the folded rank's block received as a sum into an empty slot
    ("bine_gather", "real(v + q) copy", "real(v + q) reduce", "reduce-into-empty"),
    # the node hands the extra rank its own block instead of the extra rank's
    ("bine_scatter", "send block(v + q) to", "send block(v) to", "unmatched-send"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m[0]}:{m[3]}")
def test_planted_fault_is_reported(mutant: tuple[str, str, str, str]) -> None:
    name, old, new, code = mutant
    text = (EXAMPLES / f"{name}.coll").read_text()
    assert text.count(old) == 1, f"{name}: the text to mutate is not there once: {old!r}"
    alg = collc.parse(text.replace(old, new), file=f"{name}.coll")
    for p in (8, 16):
        params = {"p": p, "root": 3} if name in TREES else {"p": p}
        report = alg.instantiate(**params).verify()
        assert not report.ok, f"{name} p={p}: the mutant {new!r} verifies"
        assert report.findings[0].code == code, report.findings[0].message


@pytest.mark.parametrize("mutant", FOLD_MUTANTS, ids=lambda m: f"{m[0]}:{m[3]}")
def test_planted_fold_fault_is_reported_off_powers_of_two(mutant: tuple[str, str, str, str]) -> None:
    name, old, new, code = mutant
    text = (EXAMPLES / f"{name}.coll").read_text()
    assert text.count(old) == 1, f"{name}: the text to mutate is not there once: {old!r}"
    alg = collc.parse(text.replace(old, new), file=f"{name}.coll")
    assert alg.instantiate(p=8, root=3).verify().ok  # the fold is empty at a power of two
    for p, root in ((6, 1), (12, 5)):
        report = alg.instantiate(p=p, root=root).verify()
        assert not report.ok, f"{name} p={p}: the mutant {new!r} verifies"
        assert report.findings[0].code == code, report.findings[0].message
