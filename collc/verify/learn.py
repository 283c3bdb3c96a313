"""Learning the invariants of the proof for every p (`collc.verify.allp`) from small instances.

`states` runs a symbolic model at a concrete p exactly: for every step loop, which ranks' contributions each
slot (rank r, chunk c) holds before each iteration and after the last.  `atoms` lists the comparisons an
invariant may be made of (differences of r, c, j modulo p, the iteration and p; for k * p chunks the stripe
c mod p, c < p; for an alltoall the pair (src, dst) of a chunk; for power-of-two p or bit operations, bit
tests of high and low bits, the folding onto the largest power of two, a rank's subtree below its lowest set
bit, a value's lowest bits, and Swing's negabinary distances); `learn`
finds a short disjunction of conjunctions of them that is true exactly at the points where slot (r, c) holds
rank j's contribution after i iterations, and `simplest` trades each atom for the smallest one true at the
same points; `split` learns one formula per stripe where no single one fits.  What is learned is only a
guess: `collc.verify.allp` proves it, or refines it, or gives up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from collc.ir import Collective
from collc.verify.symbolic import Loop, Model, Refusal, evaluate, evaluate_array, members

__all__ = ["Contract", "atoms", "contract", "data", "dnf", "learn", "simplest", "states"]

_MAX_TERMS = 8  # disjuncts of a learned invariant
_MAX_ATOMS = 5  # comparisons per disjunct

# --------------------------------------------------------------------------
# Concrete states of the model (what the invariants are learned from)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Contract:
    k: int  # chunks per rank of the contract (allgather, reduce-scatter: nchunks = k * p), else 1
    unit: int  # nchunks / p where that is a fixed number (the invariants' block of c is c // unit), else 1
    reduction: bool  # origin EVERY: each rank contributes to every chunk
    root: int | None
    pairs: bool = False  # alltoall: chunk c is the pair (src, dst) = (c // p, c mod p), one chunk per pair


def contract(model: Model) -> Contract:
    ks = {evaluate(model.nchunks, {"p": p}) / p for p in (2, 4, 8, 16)}
    multiple = len(ks) == 1 and float(next(iter(ks))).is_integer() and next(iter(ks)) >= 1
    unit = int(next(iter(ks))) if multiple else 1
    k = 1
    if model.collective.rank_blocks:
        if not multiple:
            raise Refusal("a chunk count that is not a fixed multiple of p", model.span)
        k = unit
    col = model.collective
    if col is Collective.ALLTOALL:
        if any(evaluate(model.nchunks, {"p": p}) != p * p for p in (2, 3, 4, 8, 16)):
            raise Refusal("an alltoall with other than p * p chunks (one per pair of ranks)", model.span)
        return Contract(1, 1, False, None, pairs=True)
    root = None
    if col.has_root:
        if model.root is None or model.root[0] != "num":
            raise Refusal("a root that is not a fixed number", model.span)
        root = model.root[1]
    reduction = col.reduces
    return Contract(k, unit, reduction, root)


def initial(ct: Contract, col: Collective, p: int, nchunks: int) -> np.ndarray:
    state = np.zeros((p, nchunks, p), dtype=bool)  # [r, c, j]
    for c in range(nchunks):
        if ct.reduction:
            state[np.arange(p), c, np.arange(p)] = True
        else:
            origin = ct.root if col in (Collective.BROADCAST, Collective.SCATTER) else c // (p if ct.pairs else ct.k)
            if origin is not None and origin < p:
                state[origin, c, origin] = True
    return state


def ops_at(loop: Loop, p: int, i: int) -> list[tuple[int, str, int, frozenset[int], str | None]]:
    out = []
    for r in range(p):
        env = {"p": p, "rank": r, "i": i}
        for op in loop.ops:
            if evaluate(op.guard, env):
                out.append((r, op.kind, evaluate(op.peer, env), frozenset(members(op.chunks, env)), op.action))
    return out


def states(model: Model, ct: Contract, p: int) -> list[np.ndarray] | None:
    """Per loop, the states before each iteration and after the last ([n+1, r, c, j]); None if ill-formed."""
    nchunks = evaluate(model.nchunks, {"p": p})
    state = initial(ct, model.collective, p, nchunks)
    out = []
    for loop in model.loops:
        n = evaluate(loop.count, {"p": p})
        seq = [state]
        for i in range(n):
            new = state.copy()
            ops = ops_at(loop, p, i)
            for _r, kind, q, chunks, _ in ops:
                if kind == "recv" and not (0 <= q < p and all(0 <= c < nchunks for c in chunks)):
                    return None
            for r, kind, q, chunks, action in ops:
                if kind == "recv" and action != "reduce":
                    for c in chunks:
                        new[r, c] = state[q, c]
            for r, kind, q, chunks, action in ops:
                if kind == "recv" and action == "reduce":
                    for c in chunks:
                        new[r, c] |= state[q, c]
            state = new
            seq.append(state)
        out.append(np.stack(seq))
    return out


# --------------------------------------------------------------------------
# Atoms and learning
# --------------------------------------------------------------------------

_V = {name: ("var", name) for name in ("p", "i", "rank", "c", "j", "n", "src", "dst")}


def features(bits: bool, k: int, root: int | None, pairs: bool = False) -> list[Any]:
    r, c, j, i, p = _V["rank"], _V["c"], _V["j"], _V["i"], _V["p"]
    unit = c if k == 1 else ("bin", "//", c, ("num", k))
    base = {"r": r, "u": unit, "j": j}
    if pairs:  # an alltoall's chunk is the pair (src, dst)
        base = {"r": r, "u": _V["src"], "d": _V["dst"], "j": j}
    elif k > 1:  # k * p chunks may also be k stripes of p blocks: block c mod p of stripe c // p (c < p: 0)
        base["s"] = ("bin", "mod", c, p)
    feats: list[Any] = [i, p, _V["n"], *base.values(), *([c] if k > 1 and not pairs else [])]
    for a in base:
        for b in base:
            if a != b:
                feats.append(("bin", "mod", ("bin", "-", base[a], base[b]), p))
    if root:  # distances from the root
        for x in (r, j):
            feats.append(("bin", "mod", ("bin", "-", x, ("num", root)), p))
    if bits:  # the largest power of two <= p, where schedules fold the ranks beyond it
        feats.append(_POW2_FLOOR)
    return feats


_POW2_FLOOR = ("bin", "<<", ("num", 1), ("log2p",))
_NEGABINARY = ("num", 0xAAAAAAAA)  # ((y + M) ^ M) is y in base -2, for |y| < 2^30


def swing_leaves(x: Any, y: Any) -> Any:
    """2^s for the step s at which rank x sends block y in Swing's reduce-scatter on Q = 2^floor(log2 p) ranks
    (Q/2 for y = x): s + 1 is the number of lowest digits of `swing_distance` equal to the lowest one, so with
    those digits turned to 0 and Q added, the lowest set bit is 2^(s+1)."""
    mask = ("bin", "-", _POW2_FLOOR, ("num", 1))
    d = swing_distance(x, y)
    odd = ("cmp", "==", ("bin", "&", d, ("num", 1)), ("num", 1))
    z = ("bin", "|", ("ite", odd, ("bin", "^", d, mask), d), _POW2_FLOOR)
    return ("bin", ">>", ("bin", "&", z, ("un", "-", z)), ("num", 1))


def swing_distance(x: Any, y: Any) -> Any:
    """The negabinary digits of the distance from rank x to rank y on the ring of Q = 2^floor(log2 p) ranks,
    mirrored for odd x: ``nb((y - x) mod Q)`` for even x, ``nb((x - y) mod Q)`` for odd x (y taken mod Q).

    Swing's peers are x + rho(s) for even x and x - rho(s) for odd x, rho(s) = 1, -1, 3, -5, 11, ... (the
    negabinary repunits), so after s steps of exchanges x holds exactly the ranks y whose distance has s
    negabinary digits: this feature below 2^s.
    """
    mask = ("bin", "-", _POW2_FLOOR, ("num", 1))
    vy = ("bin", "&", y, mask)
    even = ("cmp", "==", ("bin", "&", x, ("num", 1)), ("num", 0))
    dist = ("ite", even, ("bin", "-", vy, x), ("bin", "-", x, vy))
    return ("bin", "&", ("bin", "^", ("bin", "+", dist, _NEGABINARY), _NEGABINARY), mask)


def atoms(bits: bool, k: int, root: int | None = None, pairs: bool = False) -> list[Any]:
    feats = features(bits, k, root, pairs)
    zero = ("num", 0)
    atoms: list[Any] = []
    for f in feats:
        for o in range(-2, 3):
            atoms.append(("cmp", "==", f, ("num", o)))
            atoms.append(("cmp", "<=", f, ("num", o)))
    for f in feats:
        for g in feats:
            if f is g:
                continue
            for o in range(-2, 3):
                rhs = g if o == 0 else ("bin", "+", g, ("num", o))
                atoms.append(("cmp", "<=", f, rhs))
                atoms.append(("cmp", "==", f, rhs))
    if bits:
        i = _V["i"]
        shifted = [("bin", "<<", ("num", 1), i), ("bin", "<<", ("num", 1), ("bin", "+", i, ("num", 1)))]
        for f in feats[3:]:
            for g in shifted:
                atoms.append(("cmp", "<", f, g))
                atoms.append(("cmp", ">=", f, g))
    if bits and pairs:  # x is y's lowest bits (y mod 2^k for some k): where a block routed bit by bit has been
        diffs = [f for f in feats if f[0] == "bin" and f[1] == "mod"]
        for x in diffs:
            for y in diffs:
                if x is not y and x[2][3] == y[2][3]:  # distances from the same point
                    xor = ("bin", "^", x, y)
                    atoms.append(("cmp", "<", x, ("bin", "&", xor, ("un", "-", xor))))
    if bits and not pairs:
        r, j, i = _V["rank"], _V["j"], _V["i"]
        unit = _V["c"] if k == 1 else ("bin", "//", _V["c"], ("num", k))
        folded = ("bin", "&", j, ("bin", "-", _POW2_FLOOR, ("num", 1)))  # j's rank after folding onto 2^L
        down = ("bin", "-", _V["n"], i)  # a loop that halves from the top: the bits still to go
        for x, y in ((r, j), (r, unit), (j, unit), (r, folded)):
            for sh in (i, ("bin", "+", i, ("num", 1)), ("bin", "-", ("log2p",), i), down):
                atoms.append(("cmp", "==", ("bin", ">>", ("bin", "^", x, y), sh), zero))  # the high bits agree
            for sh in (i, ("bin", "-", ("log2p",), i)):  # the low bits agree (recursive halving, from the top)
                low = ("bin", "-", ("bin", "<<", ("num", 1), sh), ("num", 1))
                atoms.append(("cmp", "==", ("bin", "&", ("bin", "^", x, y), low), zero))
        for x in (r, unit):  # the low bits are zero: the ranks a tree has reached from the top
            for sh in (i, down):
                atoms.append(("cmp", "==", ("bin", "&", x, ("bin", "-", ("bin", "<<", ("num", 1), sh), ("num", 1))),
                              zero))  # fmt: skip
        for y in (j, folded):  # y agrees with r below the highest bit where c leaves r (halving: what r kept)
            xy = ("bin", "^", r, y)
            atoms.append(("cmp", "<", ("bin", "^", r, unit), ("bin", "&", xy, ("un", "-", xy))))
        for x, y in ((r, j), (r, unit)):  # Swing's contribution sets
            for sh in (i, ("bin", "+", i, ("num", 1))):
                atoms.append(("cmp", "<", swing_distance(x, y), ("bin", "<<", ("num", 1), sh)))
        lowbit = ("bin", "&", r, ("un", "-", r))  # a binomial tree's subtree below r: r's lowest set bit
        atoms.append(("cmp", "<", ("bin", "^", r, j), lowbit))
        atoms.append(("cmp", "<", ("bin", "^", r, unit), lowbit))
        leave = swing_leaves(r, unit)  # Swing's blocks: the partial sums a rank keeps of those it sent
        atoms.append(("cmp", "<", swing_distance(r, j), leave))
        for sh in (i, ("bin", "-", ("log2p",), i)):
            atoms.append(("cmp", ">=", leave, ("bin", "<<", ("num", 1), sh)))
    del zero
    return atoms


def data(seqs: dict[int, np.ndarray], loop: Loop) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Points (p, i, r, c, j, n) and labels of one loop's states at the sampled p."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("p", "i", "rank", "c", "j", "n", "L", "src", "dst")}
    labels = []
    for p, seq in seqs.items():
        n1, _, nch, _ = seq.shape
        i, r, c, j = np.meshgrid(np.arange(n1), np.arange(p), np.arange(nch), np.arange(p), indexing="ij")
        for name, arr in (("i", i), ("rank", r), ("c", c), ("j", j)):
            cols[name].append(arr.ravel().astype(np.int64))
        size = i.size
        cols["p"].append(np.full(size, p, dtype=np.int64))
        cols["n"].append(np.full(size, n1 - 1, dtype=np.int64))
        cols["L"].append(np.full(size, max(p.bit_length() - 1, 0), dtype=np.int64))
        cols["src"].append(cols["c"][-1] // p)  # an alltoall's chunk as a pair (src, dst)
        cols["dst"].append(cols["c"][-1] % p)
        labels.append(seq.ravel())
    return {k: np.concatenate(v) for k, v in cols.items()}, np.concatenate(labels)


def learn(atoms: list[Any], truth: np.ndarray, labels: np.ndarray) -> list[list[int]] | None:
    """A DNF over ``atoms`` (indices) true exactly on ``labels``; None if none small enough is found."""
    pos, neg = labels, ~labels
    uncovered = pos.copy()
    terms: list[list[int]] = []
    while uncovered.any():
        if len(terms) == _MAX_TERMS:
            return None
        cur = np.ones_like(labels)
        chosen: list[int] = []
        while (cur & neg).any():
            if len(chosen) == _MAX_ATOMS:
                return None
            pc = (truth & (cur & uncovered)).sum(axis=1).astype(np.float64)
            nc = (truth & (cur & neg)).sum(axis=1).astype(np.float64)
            p0, n0 = float((cur & uncovered).sum()), float((cur & neg).sum())
            with np.errstate(divide="ignore", invalid="ignore"):
                gain = pc * (np.log2(pc / (pc + nc)) - math.log2(p0 / (p0 + n0)))
            gain[(pc == 0) | (nc >= n0)] = -np.inf
            best = int(np.argmax(gain))
            if gain[best] == -np.inf:
                return None
            chosen.append(best)
            cur &= truth[best]
        # drop atoms the term does not need
        for a in list(chosen):
            rest = [b for b in chosen if b != a]
            mask = np.ones_like(labels)
            for b in rest:
                mask &= truth[b]
            if rest and not (mask & neg).any():
                chosen = rest
        mask = np.ones_like(labels)
        for b in chosen:
            mask &= truth[b]
        terms.append(chosen)
        uncovered &= ~mask
    return terms


def splits(ct: Contract) -> list[Any]:
    """Conditions that cut the chunks in parts a schedule may treat apart, each with an invariant of its own: the
    first stripe of p blocks where there are k * p chunks (lanes, striped rings)."""
    return [("cmp", "<", _V["c"], _V["p"])] if ct.unit > 1 and not ct.pairs else []


def split(atoms: list[Any], truth: np.ndarray, labels: np.ndarray, cuts: list[Any], env: dict[str, np.ndarray]) -> Any:
    """``(cut and inv1) or (not cut and inv2)`` with inv1, inv2 learned on each side of one of ``cuts`` (at the
    points ``env``); None if no cut gives both sides an invariant."""
    for cut in cuts:
        side = np.broadcast_to(np.asarray(evaluate_array(cut, env), dtype=bool), labels.shape)
        parts = []
        for mask in (side, ~side):
            terms = learn(atoms, truth[:, mask], labels[mask])
            if terms is None:
                break
            parts.append(dnf(atoms, simplest(atoms, truth[:, mask], terms)))
        if len(parts) == 2:
            return ("or", ("and", cut, parts[0]), ("and", ("not", cut), parts[1]))
    return None


def size(t: Any) -> int:
    return 1 + sum(size(x) for x in t[1:] if isinstance(x, tuple)) if isinstance(t, tuple) else 0


def simplest(atoms: list[Any], truth: np.ndarray, terms: list[list[int]]) -> list[list[int]]:
    """``terms`` with each atom replaced by the smallest atom true at exactly the same points (``r == j`` rather
    than ``(r - j) mod p == 0``): the same fit to the data, and formulas z3 finds easier."""
    by_row: dict[bytes, int] = {}
    for a in sorted({a for term in terms for a in term}):
        by_row.setdefault(np.packbits(truth[a]).tobytes(), a)
    best = dict(by_row)
    for b in sorted(range(len(atoms)), key=lambda x: size(atoms[x])):
        key = np.packbits(truth[b]).tobytes()
        if key in by_row and size(atoms[b]) < size(atoms[best[key]]):
            best[key] = b
    swap = {a: best[np.packbits(truth[a]).tobytes()] for term in terms for a in term}
    return [[swap[a] for a in term] for term in terms]


def dnf(atoms: list[Any], terms: list[list[int]]) -> Any:
    out: Any = ("bool", False)
    for term in terms:
        t: Any = ("bool", True)
        for a in term:
            t = atoms[a] if t == ("bool", True) else ("and", t, atoms[a])
        out = t if out == ("bool", False) else ("or", out, t)
    return out
