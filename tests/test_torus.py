"""The torus algorithms of examples/torus/ against independent Python references.

The references are written here from the papers' descriptions (swing.md §1's pseudo-code for
Swing's multi-dimensional peers, the round robin over dimensions for recursive doubling, the
Hamiltonian-cycle construction), not from the `.coll` code; the schedules are read off the
elaborated ops (`collc.load(path).instantiate(dims=...).schedule`), where port c's ops are the
ones on its chunks c*p .. (c+1)*p (c for the latency-optimal programs, chunks = ports).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import collc
from collc.backends import local
from collc.ir import OpKind, Schedule

TORUS = Path(__file__).resolve().parent.parent / "examples" / "torus"

_LOADED: dict[str, collc.Algorithm] = {}
_INSTANCES: dict[tuple[str, tuple[int, ...], int | None], collc.Instance] = {}


def instance(name: str, dims: tuple[int, ...], ports: int | None = None) -> collc.Instance:
    key = (name, dims, ports)
    if key not in _INSTANCES:
        if name not in _LOADED:
            _LOADED[name] = collc.load(TORUS / f"{name}_torus.coll")
        params: dict[str, int | tuple[int, ...]] = {"dims": dims}
        if ports is not None:
            params["ports"] = ports
        _INSTANCES[key] = _LOADED[name].instantiate(**params)
    return _INSTANCES[key]


# --------------------------------------------------------------------------
# Independent references
# --------------------------------------------------------------------------


def prod(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def ceil_log2(d: int) -> int:
    return (d - 1).bit_length()


def coords(r: int, dims: tuple[int, ...]) -> list[int]:
    """Row-major, the last dimension fastest (MPI_Cart)."""
    out = []
    for d in reversed(dims):
        out.append(r % d)
        r //= d
    return out[::-1]


def rank_of(a: list[int], dims: tuple[int, ...]) -> int:
    r = 0
    for x, d in zip(a, dims, strict=True):
        r = r * d + x % d
    return r


def rho(s: int) -> int:
    return sum((-2) ** i for i in range(s + 1))


def dimension_sequence(dims: tuple[int, ...], c: int) -> list[tuple[int, int]]:
    """(dimension, step within it) of port c's steps: round robin from dimension c mod D, exhausted
    dimensions skipped (swing.md §1, the loop of its pseudo-code)."""
    D, nxt, last, out = len(dims), [0] * len(dims), c - 1, []
    while len(out) < sum(ceil_log2(d) for d in dims):
        k = (last + 1) % D
        while nxt[k] >= ceil_log2(dims[k]):
            k = (k + 1) % D
        last = k
        out.append((k, nxt[k]))
        nxt[k] += 1
    return out


def swing_schedule(r: int, dims: tuple[int, ...], c: int) -> list[int]:
    """swing.md §1's pseudo-code, as written there: port c's peers of rank r, step by step."""
    D = len(dims)
    a = coords(r, dims)
    nxt = [0] * D
    last = c - 1
    out = []
    while len(out) < sum(ceil_log2(d) for d in dims):
        k = (last + 1) % D
        while nxt[k] >= ceil_log2(dims[k]):
            k = (k + 1) % D
        last = k
        dist = rho(nxt[k])
        nxt[k] += 1
        if a[k] % 2:
            dist = -dist
        if c >= D:
            dist = -dist  # mirrored collective
        b = list(a)
        b[k] = (a[k] + dist) % dims[k]
        out.append(rank_of(b, dims))
    return out


def swing_displacement(r: int, dims: tuple[int, ...], c: int, s: int) -> tuple[int, int]:
    """(dimension, signed displacement) of port c's step s from rank r."""
    k, sigma = dimension_sequence(dims, c)[s]
    dist = rho(sigma) * (-1 if coords(r, dims)[k] % 2 else 1)
    return k, -dist if c >= len(dims) else dist


def recdoub_schedule(r: int, dims: tuple[int, ...], c: int) -> list[int]:
    out = []
    for k, sigma in dimension_sequence(dims, c):
        b = coords(r, dims)
        b[k] ^= 1 << sigma
        out.append(rank_of(b, dims))
    return out


def hamiltonian_next(i: int, j: int, k: int, h: int) -> tuple[int, int]:
    """The construction of hamiltonian_torus.coll's header: H1 goes right except at j = d(i), where it goes
    down; H2 (h = 1) is its transpose."""
    if h == 1:
        j2, i2 = hamiltonian_next(j, i, k, 0)
        return i2, j2
    d = (-1 - i) % k
    return (i, (j + 1) % k) if j != d else ((i + 1) % k, j)


def port_peers(schedule: Schedule, step: int, per_port: int) -> dict[tuple[int, int], int]:
    """(rank, port) -> the peer it sends to at ``step``; port = chunk // per_port."""
    out: dict[tuple[int, int], int] = {}
    for op in schedule.steps[step].ops:
        if op.kind is OpKind.SEND:
            ports = {c // per_port for c in op.chunks}
            for port in ports:
                assert (op.rank, port) not in out, f"rank {op.rank} sends twice on port {port}"
                out[op.rank, port] = op.peer
    return out


# --------------------------------------------------------------------------
# Swing's peers
# --------------------------------------------------------------------------


def test_reference_matches_the_paper_figures() -> None:
    """swing.md §1: node 0's step-0 peers on 4x4 are 4, 1 (plain) and 12, 3 (mirrored); on 2x4 the
    last step of every port runs on the long dimension."""
    assert [swing_schedule(0, (4, 4), c)[0] for c in range(4)] == [4, 1, 12, 3]
    for c in range(4):
        assert dimension_sequence((2, 4), c)[-1][0] == 1
    assert [rho(s) for s in range(6)] == [1, -1, 3, -5, 11, -21]


@pytest.mark.parametrize("name", ["swing_bw", "swing_lat"])
def test_node0_step0_peers_on_4x4(name: str) -> None:
    inst = instance(name, (4, 4))
    per_port = 16 if name == "swing_bw" else 1
    peers = port_peers(inst.schedule, 0, per_port)
    assert [peers[0, c] for c in range(4)] == [4, 1, 12, 3]


def test_last_step_of_every_port_on_2x4_runs_on_the_long_dimension() -> None:
    dims = (2, 4)
    sched = instance("swing_bw", dims).schedule
    L = 3
    last = port_peers(sched, L - 1, 8)
    for r in range(8):
        for c in range(4):
            a, b = coords(r, dims), coords(last[r, c], dims)
            assert a[0] == b[0] and a[1] != b[1], (r, c)


SWING_SHAPES = [(4, 4), (2, 4), (2, 8), (4, 16), (4, 4, 4), (6, 6), (10, 10), (2, 4, 8), (8,), (6,)]


@pytest.mark.parametrize("dims", SWING_SHAPES, ids=lambda d: "x".join(map(str, d)))
def test_swing_peers_equal_the_pseudo_code(dims: tuple[int, ...]) -> None:
    """Every rank, port and step, in the reduce-scatter and (reversed) in the allgather."""
    p, ports = prod(dims), 2 * len(dims)
    L = sum(ceil_log2(d) for d in dims)
    sched = instance("swing_bw", dims).schedule
    assert len(sched.steps) == 2 * L and sched.nchunks == ports * p
    want = {(r, c): swing_schedule(r, dims, c) for r in range(p) for c in range(ports)}
    for s in range(L):
        for step in (s, 2 * L - 1 - s):
            got = port_peers(sched, step, p)
            assert got == {key: peers[s] for key, peers in want.items()}, (dims, step)
    lat = instance("swing_lat", dims).schedule if all(d & (d - 1) == 0 for d in dims) else None
    if lat is not None:  # powers of two: no folding, the steps are Swing's
        for s in range(L):
            assert port_peers(lat, s, 1) == {key: peers[s] for key, peers in want.items()}


@pytest.mark.parametrize("dims", [(4, 4), (8, 8), (4, 4, 4), (6, 6)], ids=lambda d: "x".join(map(str, d)))
def test_ports_never_share_a_link_direction_on_square_tori(dims: tuple[int, ...]) -> None:
    """At every step the 2D ports of a node use 2D distinct (dimension, direction) pairs.

    From the reference: the signed displacements.  From the schedule's ops: the direction of a
    move is the sign of its shorter way round; a move of exactly d/2 (6x6, third step in a
    dimension: rho = 3) goes equally far both ways, so there at most two ports may share the
    dimension and any others must not take the same direction."""
    p, D = prod(dims), len(dims)
    L = sum(ceil_log2(d) for d in dims)
    for r in range(p):
        for s in range(L):
            used = [swing_displacement(r, dims, c, s) for c in range(2 * D)]
            assert len({(k, dist > 0) for k, dist in used}) == 2 * D, (r, s, used)
    sched = instance("swing_bw", dims).schedule
    for s in range(L):
        peers = port_peers(sched, s, p)
        for r in range(p):
            per_dim: dict[int, list[str]] = defaultdict(list)
            for c in range(2 * D):
                a, b = coords(r, dims), coords(peers[r, c], dims)
                (k,) = [k for k in range(D) if a[k] != b[k]]
                delta = (b[k] - a[k]) % dims[k]
                per_dim[k].append("+" if 2 * delta < dims[k] else "-" if 2 * delta > dims[k] else "either")
            for k, dirs in per_dim.items():
                fixed = [d for d in dirs if d != "either"]
                assert len(dirs) <= 2 and len(set(fixed)) == len(fixed), (r, s, k, dirs)


@pytest.mark.parametrize("dims", [(4, 4), (8, 8), (2, 8), (4, 4, 4)], ids=lambda d: "x".join(map(str, d)))
def test_swing_blocks_halve_step_by_step(dims: tuple[int, ...]) -> None:
    """Powers of two: |S(r, s)| = p / 2^(s+1) on every port (swing.md §2)."""
    p = prod(dims)
    sched = instance("swing_bw", dims).schedule
    L = sum(ceil_log2(d) for d in dims)
    for s in range(L):
        sizes = {len(op.chunks) for op in sched.steps[s].ops}
        assert sizes == {p >> (s + 1)}, (s, sizes)


@pytest.mark.parametrize(
    ("dims", "ports"),
    [((4, 4), 4), ((8, 8), 4), ((6, 6), 4), ((10, 10), 4), ((4, 4, 4), 6), ((2, 8), 1), ((6,), 2), ((4, 4), 3)],
    ids=str,
)
def test_swing_bw_sends_2n_p_minus_1_over_p_from_every_rank(dims: tuple[int, ...], ports: int) -> None:
    """Every rank, not just the busiest, sends and receives 2(p-1)/p of the vector."""
    p = prod(dims)
    sched = instance("swing_bw", dims, ports).schedule
    sent, received = np.zeros(p, dtype=np.int64), np.zeros(p, dtype=np.int64)
    for step in sched.steps:
        for op in step.ops:
            (sent if op.kind is OpKind.SEND else received)[op.rank] += len(op.chunks)
    vector = ports * p
    assert np.all(sent * p == 2 * (p - 1) * vector) and np.all(received == sent)
    stats = instance("swing_bw", dims, ports).verify().stats
    assert stats.max_sent_fraction == pytest.approx(2 * (p - 1) / p)
    assert stats.steps == 2 * sum(ceil_log2(d) for d in dims)


# --------------------------------------------------------------------------
# Recursive doubling
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dims", [(4, 4), (2, 8), (4, 2, 8)], ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("ports", [1, 4])
def test_recursive_doubling_peers(dims: tuple[int, ...], ports: int) -> None:
    p = prod(dims)
    L = sum(ceil_log2(d) for d in dims)
    want = {(r, c): recdoub_schedule(r, dims, c) for r in range(p) for c in range(ports)}
    lat = instance("recdoub_lat", dims, ports).schedule
    bw = instance("recdoub_bw", dims, ports).schedule
    for s in range(L):
        expected = {key: peers[s] for key, peers in want.items()}
        assert port_peers(lat, s, 1) == expected
        assert port_peers(bw, s, p) == expected
        assert port_peers(bw, 2 * L - 1 - s, p) == expected
        # distance doubling: the largest halves go to the nearest neighbour first
        assert {len(op.chunks) for op in bw.steps[s].ops} == {p >> (s + 1)}
    assert recdoub_schedule(0, (4, 4), 0)[:2] == [4, 1]  # dimension 0 first, then 1


# --------------------------------------------------------------------------
# Hamiltonian rings
# --------------------------------------------------------------------------


@pytest.mark.parametrize("k", [3, 4, 5, 6, 8])
def test_hamiltonian_cycles_are_edge_disjoint_and_visit_every_node(k: int) -> None:
    p = k * k
    # the reference construction
    cycles = []
    for h in (0, 1):
        order, node = [], (0, 0)
        for _ in range(p):
            order.append(node)
            node = hamiltonian_next(*node, k, h)
        assert node == (0, 0) and len(set(order)) == p  # a cycle through all k*k nodes
        for x, (i, j) in enumerate(order):  # the positions the program uses
            assert x == (i * k + (j + i) % k if h == 0 else j * k + (i + j) % k)
        cycles.append({frozenset((order[x], order[(x + 1) % p])) for x in range(p)})
    assert all(len(c) == p for c in cycles) and not cycles[0] & cycles[1]
    # the schedule's rings, read off its first step: ring c sends chunks c*p .. (c+1)*p
    sched = instance("hamiltonian", (k, k)).schedule
    succ = port_peers(sched, 0, p)
    for c in range(4):
        nxt = {r: succ[r, c] for r in range(p)}
        seen, r = set(), 0
        for _ in range(p):
            seen.add(r)
            i, j = divmod(r, k)
            ni, nj = divmod(nxt[r], k)
            assert ((ni - i) % k, (nj - j) % k) in ((0, 1), (1, 0), (0, k - 1), (k - 1, 0))  # a torus link
            r = nxt[r]
        assert r == 0 and len(seen) == p
        edges = {frozenset((divmod(r, k), divmod(nxt[r], k))) for r in range(p)}
        assert edges == cycles[c % 2]
        if c < 2:
            assert all(hamiltonian_next(*divmod(r, k), k, c) == divmod(nxt[r], k) for r in range(p))
        else:  # the same cycle backwards
            assert all(succ[nxt[r], c - 2] == r for r in range(p))


# --------------------------------------------------------------------------
# Bucket
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dims", [(4, 4), (3, 5), (2, 3, 4)], ids=lambda d: "x".join(map(str, d)))
def test_bucket_rings_run_dimension_after_dimension(dims: tuple[int, ...]) -> None:
    """Sub-collective c moves one hop along dimension (c + j) mod D, + for c < D and - after, for
    d_k - 1 steps of round j; the allgather takes the rounds in reverse."""
    p, D = prod(dims), len(dims)
    sched = instance("bucket", dims).schedule
    T = sum(d - 1 for d in dims)
    assert len(sched.steps) == 2 * T and sched.nchunks == 2 * D * p
    for c in range(2 * D):
        order = [(c + j) % D for j in range(D)]
        rs = [k for k in order for _ in range(dims[k] - 1)]
        ag = [k for k in reversed(order) for _ in range(dims[k] - 1)]
        for step, k in enumerate(rs + ag):
            peers = port_peers(sched, step, p)
            for r in range(p):
                b = coords(r, dims)
                b[k] += 1 if c < D else -1
                assert peers[r, c] == rank_of(b, dims), (c, step, r)


def test_bucket_is_bandwidth_optimal() -> None:
    stats = instance("bucket", (3, 5)).verify().stats
    assert stats.max_sent_fraction == pytest.approx(2 * 14 / 15)


# --------------------------------------------------------------------------
# The verifier and the local executor
# --------------------------------------------------------------------------

VERIFIED = [
    ("swing_bw", (4, 4), None),
    ("swing_bw", (2, 2), None),
    ("swing_bw", (2, 8), None),
    ("swing_bw", (6, 6), None),
    ("swing_bw", (4, 4, 4), None),
    ("swing_bw", (8,), None),
    ("swing_bw", (6,), 1),
    ("swing_bw", (4, 4), 1),
    ("swing_bw", (2, 6), 3),
    ("swing_lat", (4, 4), None),
    ("swing_lat", (6, 6), None),
    ("swing_lat", (3, 5), 1),
    ("swing_lat", (2, 4, 8), None),
    ("swing_lat", (6,), None),
    ("recdoub_lat", (4, 4), None),
    ("recdoub_lat", (2, 4, 8), 6),
    ("recdoub_bw", (4, 4), None),
    ("recdoub_bw", (4, 16), 4),
    ("recdoub_bw", (2, 4, 8), None),
    ("bucket", (4, 4), None),
    ("bucket", (3, 5), None),
    ("bucket", (2, 7), None),
    ("bucket", (2, 3, 4), None),
    ("bucket", (5,), None),
    ("hamiltonian", (3, 3), None),
    ("hamiltonian", (4, 4), None),
    ("hamiltonian", (5, 5), None),
]


@pytest.mark.parametrize(("name", "dims", "ports"), VERIFIED, ids=str)
def test_the_verifier_accepts(name: str, dims: tuple[int, ...], ports: int | None) -> None:
    report = instance(name, dims, ports).verify()
    assert report.ok, report.findings[0].message


@pytest.mark.parametrize(
    ("name", "dims"),
    [("swing_bw", (10, 10)), ("swing_bw", (8, 8)), ("swing_lat", (10, 10)), ("recdoub_bw", (8, 8)),
     ("bucket", (8, 8)), ("bucket", (3, 3, 3)), ("hamiltonian", (8, 8)), ("hamiltonian", (7, 7))],
    ids=str,
)  # fmt: skip
def test_the_verifier_accepts_larger_shapes(name: str, dims: tuple[int, ...]) -> None:
    report = instance(name, dims).verify()
    assert report.ok, report.findings[0].message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "dims"),
    [("swing_bw", (32, 32)), ("swing_bw", (16, 16, 4)), ("swing_bw", (12, 20)), ("swing_lat", (12, 20)),
     ("recdoub_bw", (32, 32)), ("bucket", (16, 16)), ("bucket", (5, 6, 7)), ("hamiltonian", (16, 16))],
    ids=str,
)  # fmt: skip
def test_the_verifier_accepts_large_shapes(name: str, dims: tuple[int, ...]) -> None:
    """About 20 s in all (the Hamiltonian rings on 16x16: 510 steps, a million ops)."""
    report = collc.load(TORUS / f"{name}_torus.coll").instantiate(dims=dims).verify()
    assert report.ok, report.findings[0].message


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("swing_bw", {"dims": (3, 4)}),
        ("swing_bw", {"dims": (4, 4), "ports": 5}),
        ("swing_bw", {"dims": (4, 4), "ports": 0}),
        ("recdoub_bw", {"dims": (6, 4)}),
        ("recdoub_lat", {"dims": (4, 4), "ports": 5}),
        ("hamiltonian", {"dims": (4, 8)}),
        ("hamiltonian", {"dims": (2, 2)}),
        ("bucket", {"dims": (1, 4)}),
    ],
    ids=str,
)
def test_the_constraints(name: str, params: dict[str, object]) -> None:
    alg = collc.load(TORUS / f"{name}_torus.coll")
    with pytest.raises(collc.CollError, match="violates the constraint"):
        alg.instantiate(**params)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "dims"),
    [("swing_bw", (4, 4)), ("swing_bw", (6, 2)), ("swing_lat", (6, 6)), ("recdoub_bw", (2, 8)),
     ("bucket", (3, 4)), ("hamiltonian", (4, 4))],
    ids=str,
)  # fmt: skip
def test_the_local_executor_sums_like_numpy(name: str, dims: tuple[int, ...]) -> None:
    inst = instance(name, dims)
    p, count = inst.nranks, 1000 + 7
    inputs = local.make_inputs(inst.schedule, count, "float64", seed=p)
    buffers = inputs.copy()
    local.execute(local.plan(inst.schedule, count), buffers, "sum")
    want = inputs.sum(axis=0)
    for r in range(p):
        np.testing.assert_allclose(buffers[r], want, rtol=1e-12)
    assert inst.run(count, "int64", "sum", seed=1).wrong == 0
