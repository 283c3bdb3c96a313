"""Correctness for every p: an inductive proof over the step formulas, discharged with z3.

The proof works on the `collc.verify.symbolic` model of a program (its step loops as formulas in ``p``,
``rank`` and the iteration ``i``).  The state it reasons about is the one the per-p checker tracks: which
ranks' inputs slot (rank r, chunk c) holds, written ``In(i, r, c, j)`` for "holds rank j's contribution
after i iterations of the loop".  For each loop it needs an *invariant*, a formula for ``In`` that holds
for every p; it learns one (`collc.verify.learn`) from the exact states of small instances (a short
disjunction of conjunctions of comparisons between the differences of r, c, j modulo p, the iteration and p,
or, for power-of-two p, of bit tests), then asks z3 to prove, with p, i, the ranks, the chunk and the
source all symbolic:

- the first loop's invariant at i = 0 is the collective's precondition, each loop's at its end is the
  next loop's at its start, and the last loop's at its end gives every slot the postcondition requires
  every contribution exactly once;
- one iteration takes the invariant at i to the invariant at i + 1 under the step's semantics (sends
  read the state at the start of the step, copies land first, then reductions);
- no reduction adds a contribution a slot already holds, no two copies land in one slot;
- every peer is a rank other than the sender, every chunk is in range, every receive is matched by a send
  of the same chunks and every send by a receive (and, for rooted or gathered data, a send's slot holds
  its data).

An alltoall's chunk src * p + dst is the pair (src, dst) (`_pair_set`); ops in lanes must touch disjoint
chunks of a rank (`_lane_obligations`), which makes every overlap of their steps compute what lockstep does.
Integers are unbounded, except where the program uses bit operations: there the proof is over 64-bit
integers with p < 2^31 (every size an MPI communicator can have).  A learned invariant that is not
inductive is refined with the instance z3 reports; when no proof is found the caller falls back to
checking p = 1 .. N one instance at a time (`collc.verify.sweep`), which finds the smallest failing p.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collc.elaborate.emitter import MAX_SLOTS
from collc.ir import Collective, Span
from collc.verify import learn
from collc.verify.symbolic import Model, Refusal, SymOp, evaluate, evaluate_array, member

__all__ = ["Proof", "prove", "sample_sizes"]

_ROUNDS = 3  # learn, prove, add the counterexample's instance, again
_MAX_P_DATA = 48  # largest instance whose states are learned from
_MAX_TRUTH = 1 << 30  # bytes of the atoms' truth at the (p, i, r, c, j) points learned from, at most
_BITS = 64
_P_LIMIT = MAX_SLOTS  # p x chunks <= 2^28: no instance of any program has more ranks
_COMPUTABLE = "a value can be computed (62 bits, shift counts in 0..62, exact '/', set elements in 0..2^26)"


@dataclass(frozen=True, slots=True)
class Proof:
    """The outcome: ``proved`` and how, or why not (``reason``, with a ``span`` where one applies)."""

    proved: bool
    method: str
    reason: str
    span: Span | None
    invariants: tuple[str, ...]  # one per loop, as text
    counterexample: int | None = None  # a p z3 found the program (not the invariant) wrong at


def sample_sizes(model: Model, upto: int) -> list[int]:
    """The p in 1 .. upto that satisfy the model's constraints."""
    out = []
    for p in range(1, upto + 1):
        if model.pow2 and p & (p - 1):
            continue
        if all(evaluate(c, {"p": p}) for c in model.constraints):
            out.append(p)
    return out


# --------------------------------------------------------------------------
# z3
# --------------------------------------------------------------------------


class _Z3:
    def __init__(self, bits: bool, pow2: bool) -> None:
        import z3

        self.z3, self.bits, self.pow2 = z3, bits, pow2
        mk = (lambda n: z3.BitVec(n, _BITS)) if bits else z3.Int
        self.p, self.L = mk("p"), mk("log2p")
        self.mk = mk
        self.fresh = 0  # unknowns made so far (`mod`)

    def const(self, v: int) -> Any:
        return self.z3.BitVecVal(v, _BITS) if self.bits else self.z3.IntVal(v)

    def term(self, t: Any, env: dict[str, Any]) -> Any:
        z3, kind = self.z3, t[0]
        if kind == "num":
            return self.const(t[1])
        if kind == "bool":
            return z3.BoolVal(t[1])
        if kind == "var":
            return env[t[1]]
        if kind == "log2p":
            return self.L
        if kind == "bin":
            a, b, op = self.term(t[2], env), self.term(t[3], env), t[1]
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op in ("//", "/") and self.bits and t[3][0] == "num" and t[3][1] > 0:
                return self._divide(a, t[3][1], exact=op == "/")
            if op == "//":
                if self.bits:
                    q = a / b
                    return z3.If(z3.And(z3.SRem(a, b) != 0, (a < 0) != (b < 0)), q - 1, q)
                return a / b
            if op == "/":  # exact (the safety obligation says so): truncating and floor division agree
                return a / b
            if op == "mod":
                return self.mod(a, b, t[3])
            if not self.bits:
                raise Refusal(f"the bit operation {op!r} without power-of-two p", None)
            return {"^": lambda: a ^ b, "&": lambda: a & b, "|": lambda: a | b, "<<": lambda: a << b,
                    ">>": lambda: a >> b}[op]()  # fmt: skip
        if kind == "un":
            a = self.term(t[2], env)
            if t[1] == "-":
                return -a
            if not self.bits:
                raise Refusal("'~' without power-of-two p", None)
            return ~a
        if kind == "ite":
            return z3.If(self.term(t[1], env), self.term(t[2], env), self.term(t[3], env))
        if kind == "cmp":
            a, b = self.term(t[2], env), self.term(t[3], env)
            return {"<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
                    "==": lambda: a == b, "!=": lambda: a != b}[t[1]]()  # fmt: skip
        if kind == "and":
            return z3.And(self.term(t[1], env), self.term(t[2], env))
        if kind == "or":
            return z3.Or(self.term(t[1], env), self.term(t[2], env))
        if kind == "not":
            return z3.Not(self.term(t[1], env))
        raise AssertionError(kind)

    def _divide(self, a: Any, d: int, exact: bool) -> Any:
        """``a // d`` or an exact ``a / d`` for a constant d > 0 over 64-bit integers, without a divider circuit:
        an arithmetic shift for the power of two in d, then, for an exact division, a product with the inverse of
        d's odd part modulo 2^64 (exact: the safety obligation says so); a floor division by another d stays z3's."""
        k = (d & -d).bit_length() - 1
        odd = d >> k
        if exact:
            shifted = a >> self.const(k) if k else a
            return shifted if odd == 1 else shifted * self.const(pow(odd, -1, 1 << _BITS) - (1 << _BITS))
        if odd == 1:
            return a >> self.const(k)
        q = a / self.const(d)
        return self.z3.If(self.z3.And(self.z3.SRem(a, self.const(d)) != 0, a < 0), q - 1, q)

    def mod(self, a: Any, b: Any, bt: Any) -> Any:
        z3 = self.z3
        if bt[0] == "num":
            m = abs(bt[1])
            if self.bits and m & (m - 1) == 0:  # a mod 2^k is its low k bits (two's complement)
                return a & self.const(m - 1)
            return a % b
        if self.pow2:
            return a & (self.p - 1)
        # a mod p for a in [-3p, 4p) without nonlinear arithmetic.  Beyond that, a fresh unknown: an obligation
        # proved for every value of it holds for the true remainder too (and one that needs the true remainder
        # there is simply not proved), while z3 no longer has to reason about division by a symbol.
        self.fresh += 1
        out = self.mk(f"mod{self.fresh}")
        for kk in range(3, -4, -1):
            lo, hi = self.const(kk) * b, self.const(kk + 1) * b
            out = z3.If(z3.And(lo <= a, a < hi), a - lo, out)
        return out

    def domain(self) -> list[Any]:
        """p's range, and log2(p) where the formulas use it; the program's constraints apart (`constraints`)."""
        out = [self.p >= 1, self.p <= self.const(_P_LIMIT)]
        if self.pow2:
            out += [self.L >= 0, self.L <= 30, self.p == self.const(1) << self.L]
        elif self.bits:  # L = floor(log2 p)
            one = self.const(1)
            out += [self.L >= 0, self.L <= 30, one << self.L <= self.p, self.p < one << (self.L + 1)]
        return out

    def constraints(self, model: Model) -> list[Any]:
        return [self.term(c, {"p": self.p}) for c in model.constraints]


# --------------------------------------------------------------------------
# The proof
# --------------------------------------------------------------------------


def _obligations(
    zz: _Z3, model: Model, ct: learn.Contract, loops_inv: Sequence[Any]
) -> list[tuple[str, Any, Span | None]]:
    """(what, formula that must be valid, where) for every proof obligation."""
    z3 = zz.z3
    mk = zz.mk
    i, r, q, j = mk("i"), mk("r"), mk("q"), mk("j")
    p = zz.p
    nch = zz.term(model.nchunks, {"p": p})
    kk = zz.const(ct.k)
    rng = lambda x, hi: z3.And(x >= 0, x < hi)  # noqa: E731
    # the chunk: a number, or an alltoall's pair (src, dst), chunk src * p + dst
    c: Any = (mk("src"), mk("dst")) if ct.pairs else mk("c")
    c_env = {"src": c[0], "dst": c[1], "c": c[0] * p + c[1]} if ct.pairs else {"c": c}
    c_range = z3.And(rng(c[0], p), rng(c[1], p)) if ct.pairs else rng(c, nch)

    def inv(idx: int, it: Any, rr: Any, cc: Any, jj: Any, n: Any) -> Any:
        assert cc is c
        return zz.term(loops_inv[idx], {"p": p, "i": it, "rank": rr, **c_env, "j": jj, "n": n})

    unit = c[0] if ct.pairs else c / kk if ct.k > 1 else c
    if ct.reduction:
        init = j == r
        prefix = model.collective.prefix  # scans: rank r holds ranks 0 .. r + prefix - 1
        full = z3.BoolVal(True) if prefix is None else j < r + prefix
    else:
        origin = zz.const(ct.root) if model.collective in (Collective.BROADCAST, Collective.SCATTER) else unit
        init = z3.And(j == origin, r == origin)
        full = j == origin
    if model.collective in (Collective.REDUCE_SCATTER, Collective.SCATTER):
        required = r == unit
    elif model.collective in (Collective.REDUCE, Collective.GATHER):
        required = r == zz.const(ct.root or 0)
    elif model.collective is Collective.EXSCAN:
        required = r >= 1
    elif ct.pairs:
        required = r == c[1]
    else:
        required = z3.BoolVal(True)
    base = [rng(r, p), rng(q, p), c_range, rng(j, p)]
    out: list[tuple[str, Any, Span | None]] = []
    out.append(("the number of chunks is at least 1", nch >= 1, model.span))
    if ct.pairs:
        out.append(("the number of chunks is p * p", nch == p * p, model.span))
    if model.collective.rank_blocks:
        out.append((f"the number of chunks is {ct.k} * p", nch == kk * p, model.span))
    for g, t in model.lets:  # values outside steps: the elaborator computes each where its guard holds
        env_g = {"p": p, "rank": r}
        out.append((_COMPUTABLE, z3.Implies(z3.And(rng(r, p), zz.term(g, env_g)), _safe(zz, t, env_g)), model.span))
    if not model.loops:
        out.append(("the postcondition with no steps", z3.Implies(z3.And(*base, required), init == full), model.span))
        return out
    prev = None
    for idx, loop in enumerate(model.loops):
        n = zz.term(loop.count, {"p": p})
        start = inv(idx, zz.const(0), r, c, j, n)
        if prev is None:
            out.append(
                ("the invariant at the start is the precondition", z3.Implies(z3.And(*base), start == init), loop.span)
            )
        else:
            pidx, pn = prev
            end = inv(pidx, pn, r, c, j, pn)
            out.append(("one loop ends where the next starts", z3.Implies(z3.And(*base), start == end), loop.span))
        prev = (idx, n)
        dom = [*base, i >= 0, i < n]
        env_r = {"p": p, "i": i, "rank": r}
        env_q = {"p": p, "i": i, "rank": q}
        recvs = [o for o in loop.ops if o.kind == "recv"]
        sends = [o for o in loop.ops if o.kind == "send"]
        applies = {}
        peers = {}
        for o in recvs:
            g = zz.term(o.guard, env_r)
            peers[id(o)] = zz.term(o.peer, env_r)
            applies[id(o)] = z3.And(g, _inset(zz, o.chunks, env_r, c))
        for o in loop.ops:
            g = zz.term(o.guard, env_r)
            peer = zz.term(o.peer, env_r)
            out.append(
                (
                    f"the {o.kind}'s peer is another rank",
                    z3.Implies(z3.And(*dom, g), z3.And(rng(peer, p), peer != r)),
                    o.span,
                )
            )
            if ct.pairs:  # each chunk written src * p + dst with both in range: a pair of ranks
                side = z3.And(True, *(zz.term(t, env_r) for t in _pair_set(o.chunks)[1]))
                within = z3.Implies(z3.And(dom[0], *dom[4:], g), side)
            else:
                inset = _inset(zz, o.chunks, env_r, c)
                within = z3.Implies(z3.And(*dom[:2], dom[4], dom[5], g, inset), rng(c, nch))
            out.append((f"the {o.kind}'s chunks are in range", within, o.span))
        # matching: r receives chunk c from q  <=>  q sends chunk c to r
        rc = z3.Or(False, *[_to(zz, o, env_r, q, c) for o in recvs])
        sd = z3.Or(False, *[_to(zz, o, env_q, r, c) for o in sends])
        where = (recvs or sends)[0].span if (recvs or sends) else loop.span
        out.append(("every receive has its send and every send its receive", z3.Implies(z3.And(*dom), rc == sd), where))
        if not ct.reduction:
            for o in sends:
                holds = inv(idx, i, q, c, origin, n)
                cond = z3.And(*dom, zz.term(o.guard, env_q), _inset(zz, o.chunks, env_q, c))
                out.append(("a send's slot holds its data", z3.Implies(cond, holds), o.span))
        # the step
        cur = inv(idx, i, r, c, j, n)
        copies = [o for o in recvs if o.action != "reduce"]
        reduces = [o for o in recvs if o.action == "reduce"]
        after = cur
        for o in reversed(copies):
            after = z3.If(applies[id(o)], inv(idx, i, peers[id(o)], c, j, n), after)
        safety = [(g, t, loop.span) for g, t in loop.lets]
        safety += [(o.guard, t, o.span) for o in loop.ops for t in (o.peer, *_set_terms(o.chunks))]
        for g, t, where in safety:
            cond = z3.Implies(z3.And(*dom, zz.term(g, env_r)), _safe(zz, t, env_r))
            out.append((_COMPUTABLE, cond, where))
        for a_, b_ in _pairs(sends):  # check.py: duplicate-transfer
            both = z3.And(_to(zz, a_, env_r, q, c), _to(zz, b_, env_r, q, c))
            out.append(
                ("one chunk is sent twice to one peer in one step", z3.Implies(z3.And(*dom), z3.Not(both)), b_.span)
            )
        for a_, b_ in _pairs(recvs):
            both = z3.And(_to(zz, a_, env_r, q, c), _to(zz, b_, env_r, q, c))
            out.append(("one chunk is received twice from one peer", z3.Implies(z3.And(*dom), z3.Not(both)), b_.span))
        for a_ in copies:  # check.py: write-conflict
            for b_ in reduces:
                both = z3.And(applies[id(a_)], applies[id(b_)])
                out.append(("a copy and a reduction land in one slot", z3.Implies(z3.And(*dom), z3.Not(both)), b_.span))
        if not ct.reduction:  # check.py: reduce-into-empty (after the step's copies)
            held_after = inv(idx, i, r, c, origin, n)
            for o in reversed(copies):
                held_after = z3.If(applies[id(o)], inv(idx, i, peers[id(o)], c, origin, n), held_after)
            for o in reduces:
                cond = z3.Implies(z3.And(*dom, applies[id(o)]), held_after)
                out.append(("a reduction lands in a slot without data", cond, o.span))
        for a_, b_ in _pairs(copies):
            out.append(
                (
                    "two copies land in one slot",
                    z3.Implies(z3.And(*dom), z3.Not(z3.And(applies[id(a_)], applies[id(b_)]))),
                    b_.span,
                )
            )
        for o in reduces:
            incoming = z3.And(applies[id(o)], inv(idx, i, peers[id(o)], c, j, n))
            out.append(
                (
                    "a reduction adds a contribution the slot already holds",
                    z3.Implies(z3.And(*dom), z3.Not(z3.And(incoming, after))),
                    o.span,
                )
            )
        for a_, b_ in _pairs(reduces):
            both = z3.And(
                applies[id(a_)],
                applies[id(b_)],
                inv(idx, i, peers[id(a_)], c, j, n),
                inv(idx, i, peers[id(b_)], c, j, n),
            )
            out.append(("two reductions bring the same contribution", z3.Implies(z3.And(*dom), z3.Not(both)), b_.span))
        for o in reduces:
            after = z3.Or(after, z3.And(applies[id(o)], inv(idx, i, peers[id(o)], c, j, n)))
        nxt = inv(idx, i + 1, r, c, j, n)
        out.append(("one step keeps the invariant", z3.Implies(z3.And(*dom), nxt == after), loop.span))
    pidx, pn = prev  # type: ignore[misc]
    end = inv(pidx, pn, r, c, j, pn)
    out.append(("the postcondition at the end", z3.Implies(z3.And(*base, required), end == full), model.loops[-1].span))
    out += _lane_obligations(zz, model, r, c, c_range)
    return out


def _lane_obligations(zz: _Z3, model: Model, r: Any, c: Any, c_range: Any) -> list[tuple[str, Any, Span | None]]:
    """Lanes (``lane J:``) let a rank's steps overlap: an op in lane J waits only for the rank's earlier ops in
    lane J and in no lane (`collc.verify.races`).  The lockstep proof holds for every such execution when no
    chunk of a rank is touched by two lanes, in any steps: the accesses of one lane are ordered by the lane's
    program order, an op in no lane is ordered with every other, so no two accesses race."""
    z3 = zz.z3
    ops = [(idx, o) for idx, loop in enumerate(model.loops) for o in loop.ops if o.lane is not None]
    out: list[tuple[str, Any, Span | None]] = []
    i1, i2, p = zz.mk("i1"), zz.mk("i2"), zz.p
    for n_a, (la, a) in enumerate(ops):
        for lb, b in ops[n_a:]:
            if a.lane == b.lane and a.lane[0] == "num":
                continue
            env_a = {"p": p, "rank": r, "i": i1}
            env_b = {"p": p, "rank": r, "i": i2}
            dom = [r >= 0, r < p, c_range, i1 >= 0, i1 < zz.term(model.loops[la].count, {"p": p}),
                   i2 >= 0, i2 < zz.term(model.loops[lb].count, {"p": p})]  # fmt: skip
            touch = z3.And(zz.term(a.guard, env_a), _inset(zz, a.chunks, env_a, c),
                           zz.term(b.guard, env_b), _inset(zz, b.chunks, env_b, c))  # fmt: skip
            other = zz.term(a.lane, env_a) != zz.term(b.lane, env_b)
            out.append(("two lanes do not touch one chunk of a rank (their steps may overlap)",
                        z3.Implies(z3.And(*dom), z3.Not(z3.And(touch, other))), b.span))  # fmt: skip
    return out


def _slots(zz: _Z3, model: Model) -> list[Any]:
    """The proof's claim is for p x chunks <= 2^28 (the slots an instance may have): the largest p whose
    instance fits, P, found by evaluating the chunk count, bounds p once z3 proves that every p above P (up
    to 2^28) has more slots; none when it does not."""
    z3 = zz.z3

    def fits(p: int) -> bool:
        try:
            return p * evaluate(model.nchunks, {"p": p}) <= _P_LIMIT
        except (ArithmeticError, ValueError, KeyError):
            return True  # not computable there: no bound from it

    if fits(_P_LIMIT):
        return []
    top = 1
    while fits(top * 2):
        top *= 2
    for step in (1 << k for k in range(top.bit_length(), -1, -1)):
        if top + step < _P_LIMIT and fits(top + step):
            top += step
    solver = _solver(z3, zz.bits)
    solver.set("timeout", 10_000)
    p, nch = zz.p, zz.term(model.nchunks, {"p": zz.p})
    solver.add(*zz.domain(), p > zz.const(top), nch >= 0, nch <= zz.const(_P_LIMIT), p * nch <= zz.const(_P_LIMIT))
    if solver.check() != z3.unsat:
        return []
    return [p <= zz.const(top)]


def _points(model: Model, sizes: Sequence[int]) -> int:
    """The (p, i, r, c, j) points `learn.data` makes of the states of these p."""
    out = 0
    for p in sizes:
        steps = sum(evaluate(loop.count, {"p": p}) + 1 for loop in model.loops)
        out += steps * p * p * evaluate(model.nchunks, {"p": p})
    return out


def _set_terms(chunks: Any) -> tuple[Any, ...]:
    if chunks[0] == "range":
        return (chunks[1], chunks[2])
    if chunks[0] == "where":  # its bounds, and the set itself for its condition (`_safe`)
        return (chunks[2], chunks[3], chunks)
    return tuple(chunks[1])


def _safe(zz: _Z3, t: Any, env: dict[str, Any]) -> Any:
    """The elaborator can compute ``t``: every shift count in 0..62, every sum, difference, product and shift within
    62 bits, every exact division '/' exact (both branches of a condition, so possibly stricter than the
    elaborator)."""
    z3 = zz.z3
    conds: list[Any] = []
    limit = zz.const(1 << 62)

    def walk(x: Any) -> None:
        if not isinstance(x, tuple) or x[0] in ("num", "bool", "var", "log2p"):
            return
        if x[0] == "holds":  # computable, and true
            walk(x[1])
            conds.append(zz.term(x[1], env))
            return
        if x[0] == "where":  # {v for v in lo .. hi if cond}: cond is evaluated for every v in the range
            _, name, lo, hi, cond = x
            pair = _as_pair(cond, ("var", name)) if lo == ("num", 0) and hi == ("bin", "*", _P, _P) else None
            if pair is not None:  # v = src * p + dst for every src, dst in 0 .. p-1: the pair's form is exact
                sv, dv = zz.mk(f"{name}.src"), zz.mk(f"{name}.dst")
                inside = z3.And(sv >= 0, sv < zz.p, dv >= 0, dv < zz.p)
                conds.append(z3.Implies(inside, _safe(zz, pair, {**env, "src": sv, "dst": dv})))
                return
            v = zz.mk(name)
            inside = z3.And(zz.term(lo, env) <= v, v < zz.term(hi, env))
            conds.append(z3.Implies(inside, _safe(zz, cond, {**env, name: v})))
            return
        for y in x[1:]:
            walk(y)
        if (x[0] == "un" and x[1] == "-") or (x[0] == "bin" and x[1] in ("+", "-")):  # 62 bits, as `evaluate` says
            v = zz.term(x, env)
            conds.append(z3.And(v > -limit, v < limit))
            return
        if x[0] != "bin" or x[1] not in ("<<", ">>", "*", "/"):
            return
        a, b = zz.term(x[2], env), zz.term(x[3], env)
        if x[1] == "/":  # the elaborator refuses an inexact '/'
            conds.append(z3.SRem(a, b) == 0 if zz.bits else a % b == 0)
        if x[1] in ("<<", ">>"):
            conds.append(z3.And(b >= 0, b <= 62))
        if x[1] == "*" and zz.bits:
            conds.append(z3.And(z3.BVMulNoOverflow(a, b, True), z3.BVMulNoUnderflow(a, b)))
        if x[1] == "<<" and zz.bits:
            conds.append((a << b) >> b == a)
        if x[1] in ("*", "<<"):
            v = zz.term(x, env)
            conds.append(z3.And(v > -limit, v < limit))

    walk(t)
    return z3.And(True, *conds)


def _to(zz: _Z3, o: SymOp, env: dict[str, Any], other: Any, c: Any) -> Any:
    """Op ``o`` of the rank in ``env`` applies, with ``other`` as its peer, to chunk ``c`` (a pair (src, dst) for
    an alltoall)."""
    return zz.z3.And(zz.term(o.guard, env), zz.term(o.peer, env) == other, _inset(zz, o.chunks, env, c))


def _inset(zz: _Z3, chunks: Any, env: dict[str, Any], c: Any) -> Any:
    """Chunk ``c`` is in the set ``chunks``: ``c`` a z3 value, or an alltoall's pair (src, dst) (`_pair_set`)."""
    if isinstance(c, tuple):
        return zz.term(_pair_set(chunks)[0], {**env, "src": c[0], "dst": c[1]})
    return zz.term(member(("var", "c"), chunks), {**env, "c": c})


def _split(t: Any) -> tuple[Any, Any] | None:
    """(a, b) where the term ``t`` is written ``a * p + b`` (or ``p * a + b``, ``b + a * p``, ``a * p``)."""

    def times_p(x: Any) -> Any:
        if x[0] == "bin" and x[1] == "*":
            if x[3] == ("var", "p"):
                return x[2]
            if x[2] == ("var", "p"):
                return x[3]
        return None

    if times_p(t) is not None:
        return times_p(t), ("num", 0)
    if t[0] == "bin" and t[1] == "+":
        for x, y in ((t[2], t[3]), (t[3], t[2])):
            if times_p(x) is not None:
                return times_p(x), y
    return None


def _pair_set(chunks: Any) -> tuple[Any, list[Any]]:
    """An alltoall's chunk set as a condition on the pair (src, dst) of chunk ``src * p + dst``, and the
    conditions that make it exact: each element written ``a * p + b`` with a and b in 0 .. p-1 (then it is the
    pair (a, b)), a range ``a * p + b1 .. a * p + b2`` with 0 <= b1 <= b2 <= p (the pairs (a, b1 .. b2-1))."""
    src, dst, p, zero = ("var", "src"), ("var", "dst"), ("var", "p"), ("num", 0)
    inside = lambda x, hi: ("and", ("cmp", "<=", zero, x), ("cmp", "<", x, hi))  # noqa: E731
    if chunks[0] == "elts":
        cond, side = ("bool", False), []
        for t in chunks[1]:
            ab = _split(t)
            if ab is None:
                raise Refusal("an alltoall chunk not written src * p + dst", None)
            a, b = ab
            cond = ("or", cond, ("and", ("cmp", "==", src, a), ("cmp", "==", dst, b)))
            side += [inside(a, p), inside(b, p)]
        return cond, side
    if chunks[0] == "range":
        lo, hi = _split(chunks[1]), _split(chunks[2])
        if lo is None or hi is None or lo[0] != hi[0]:
            raise Refusal("an alltoall chunk range not written a * p + b1 .. a * p + b2", None)
        (a, b1), (_, b2) = lo, hi
        cond = ("and", ("cmp", "==", src, a), ("and", ("cmp", "<=", b1, dst), ("cmp", "<", dst, b2)))
        side = [inside(a, p), ("cmp", "<=", zero, b1), ("cmp", "<=", b1, b2), ("cmp", "<=", b2, p)]
        return cond, side
    if chunks[0] == "where" and chunks[2] == zero and chunks[3] == ("bin", "*", p, p):
        x = ("var", chunks[1])
        cond = _as_pair(chunks[4], x)
        if cond is not None:
            return cond, []
    raise Refusal("an alltoall chunk set given by a condition on other than c // p and c mod p", None)


_P = ("var", "p")


def _as_pair(t: Any, x: Any) -> Any:
    """``t`` with ``x // p`` written src and ``x mod p`` dst (exact for x = src * p + dst, both in 0 .. p-1);
    None if ``x`` is used otherwise."""
    if not isinstance(t, tuple):
        return t
    if t == x:
        return None
    if t[0] == "bin" and t[2] == x and t[3] == ("var", "p") and t[1] in ("//", "mod"):
        return ("var", "src") if t[1] == "//" else ("var", "dst")
    if t[0] in ("num", "bool", "var", "log2p"):
        return t
    if t[0] == "elts":
        parts = [_as_pair(y, x) for y in t[1]]
        return None if any(y is None for y in parts) else ("elts", tuple(parts))
    if t[0] == "where" and ("var", t[1]) == x:
        return None
    parts = [_as_pair(y, x) for y in t[1:]]
    return None if any(y is None for y in parts) else (t[0], *parts)


def _pairs(xs: list[Any]) -> list[tuple[Any, Any]]:
    return [(a, b) for n_, a in enumerate(xs) for b in xs[n_ + 1 :]]


def prove(
    model: Model,
    on_note: Callable[[str], None] | None = None,
    timeout_ms: int = 60000,
    deadline: float | None = None,
) -> Proof:
    """Try to prove ``model`` correct for every p its constraints allow: z3 spends at most ``timeout_ms`` on
    each obligation, and the whole proof ends by ``deadline`` (a `time.monotonic` value) with "no answer"."""
    note = on_note or (lambda _: None)
    clock = _Clock(deadline)
    try:
        import z3
    except ImportError:
        return Proof(False, "", "the z3-solver package is not installed", None, ())
    ct = learn.contract(model)
    bits = model.bits()
    sizes = [p for p in sample_sizes(model, 64) if p >= 1]
    data_p = [p for p in sizes if p <= (16 if model.pow2 else 9)]
    extra = [p for p in sizes if p > data_p[-1]][:1] if data_p else []
    data_p += extra
    if not data_p:
        return Proof(False, "", "no p up to 64 satisfies the constraints", model.span, ())
    if ct.pairs:  # every chunk set must name pairs of ranks (`_pair_set` refuses the others): before learning
        for loop in model.loops:
            for o in loop.ops:
                try:
                    _pair_set(o.chunks)
                except Refusal as err:
                    raise Refusal(err.reason, o.span) from None
    atoms = learn.atoms(bits, ct.unit, ct.root, ct.pairs)
    while len(data_p) > 2 and len(atoms) * _points(model, data_p) > _MAX_TRUTH:  # (alltoall: p^3 points a step)
        data_p.pop()  # learn from the smaller instances only
    zz = _Z3(bits, model.pow2)
    states: dict[int, list[np.ndarray]] = {}
    found: int | None = None  # the last instance z3 found an obligation false at
    for _round in range(_ROUNDS):
        for p in data_p:
            if clock.out():
                return clock.no_answer(model)
            if p not in states:
                try:
                    got = learn.states(model, ct, p)
                except Refusal as err:  # a value the elaborator cannot compute there either (an inexact '/')
                    return Proof(False, "", f"{err.reason} at p={p}", err.span or model.span, (), counterexample=p)
                if got is None:
                    return Proof(False, "", f"an op is out of range at p={p}", model.span, (), counterexample=p)
                states[p] = got
        invs = []
        for idx, loop in enumerate(model.loops):
            env, labels = learn.data({p: s[idx] for p, s in states.items()}, loop)
            truth = np.stack([np.broadcast_to(evaluate_array(a, env), labels.shape) for a in atoms])
            terms = learn.learn(atoms, truth, labels)
            if terms is not None:
                invs.append(learn.dnf(atoms, learn.simplest(atoms, truth, terms)))
                continue
            split = learn.split(atoms, truth, labels, learn.splits(ct), env)  # one formula per stripe of the chunks
            if split is None:  # (after an instance z3 found: the program may be wrong there, which is checked)
                return Proof(False, "", f"no invariant of the learned form fits step loop {idx + 1}",
                             loop.span, (), counterexample=found)  # fmt: skip
            invs.append(split)
        texts = tuple(_show(t) for t in invs)
        note(f"invariants from p in {data_p}: " + "; ".join(texts))
        if clock.out():
            return clock.no_answer(model, texts)
        solver = _solver(z3, bits)
        solver.set("timeout", timeout_ms)
        try:
            solver.add(*zz.domain())  # the constraints must evaluate at every p, before they are assumed
            evaluable = [("a constraint can be evaluated", _safe(zz, c, {"p": zz.p}), model.span)
                         for c in model.constraints]  # fmt: skip
            obligations = _obligations(zz, model, ct, invs)
        except z3.Z3Exception as err:  # a term z3 cannot type (an int used as a condition, say)
            return Proof(False, "", f"the step formulas do not translate to z3 ({err})", model.span, texts)
        failed = _first_failure(zz, solver, evaluable, bits, clock, timeout_ms)
        if failed is None:
            solver.add(*zz.constraints(model), *_slots(zz, model))
            failed = _first_failure(zz, solver, obligations, bits, clock, timeout_ms)
        if failed == "deadline" or (failed is not None and failed[3] != z3.sat and clock.out()):
            return clock.no_answer(model, texts)
        if failed is None:
            arith = "64-bit integers" if bits else "integers"
            how = (f"induction over the steps of {len(model.loops)} loop(s), invariants learned from p in "
                   f"{data_p[0]}..{data_p[-1]} and proved with z3 ({arith}, every p up to 2^28 with p x chunks <= "
                   "2^28, the most (rank, chunk) slots an instance can have)")  # fmt: skip
            if ct.pairs:
                how += "; an alltoall's chunk src * p + dst as the pair (src, dst)"
            if any(o.lane is not None for loop in model.loops for o in loop.ops):
                how += "; lanes: no two lanes touch one chunk of a rank, so every overlap of their steps agrees"
            return Proof(True, how, "", None, texts)
        what, span, pv, res = failed
        retry = pv is not None and pv <= _MAX_P_DATA and pv not in data_p and pv in sample_sizes(model, pv)
        retry = retry and len(atoms) * _points(model, [*data_p, pv]) <= _MAX_TRUTH  # (alltoall: p^3 points a step)
        if res == z3.sat and retry:
            note(f"not proved ({what}) at p={pv}: learning from p={pv} too")
            data_p.append(pv)
            data_p.sort()
            found = pv
            continue
        about = " for the learned invariant" if "invariant" in what or "postcondition" in what else ""
        why = (f"z3 could not decide it in {timeout_ms // 1000} s (--solver-time)" if res != z3.sat
               else f"it fails at p={pv}{about}")  # fmt: skip
        return Proof(False, "", f"{what}: {why}", span, texts, counterexample=pv if res == z3.sat else None)
    return Proof(False, "", "the learned invariants were not inductive", model.span, (), counterexample=found)


class _Clock:
    """The proof's deadline (none: no limit)."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline, self.start = deadline, time.monotonic()

    def out(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def left_ms(self, timeout_ms: int) -> int:
        """The time z3 may spend on the next obligation: ``timeout_ms``, or less to keep the deadline."""
        if self.deadline is None:
            return timeout_ms
        return max(1, min(timeout_ms, int(1000 * (self.deadline - time.monotonic()))))

    def no_answer(self, model: Model, invariants: tuple[str, ...] = ()) -> Proof:
        spent = round(time.monotonic() - self.start)
        return Proof(False, "", f"z3 gave no answer in {spent} s (--time-limit)", model.span, invariants)


def _first_failure(
    zz: _Z3,
    solver: Any,
    checks: Sequence[tuple[str, Any, Span | None]],
    bits: bool,
    clock: _Clock | None = None,
    timeout_ms: int = 60000,
) -> Any:
    """The first of ``checks`` (what, formula that must be valid, where) the solver does not prove, as (what,
    where, the smallest p it fails at or None, z3's result), or None when it proves them all; "deadline" when
    the clock ran out first."""
    z3 = zz.z3
    for what, formula, span in checks:
        if clock is not None:
            if clock.out():
                return "deadline"
            solver.set("timeout", clock.left_ms(timeout_ms))
        solver.push()
        solver.add(z3.Not(formula))
        res = solver.check()
        if res == z3.unsat:
            solver.pop()
            continue
        pv = _smallest_p(zz, solver, bits) if res == z3.sat else None
        solver.pop()
        return (what, span, pv, res)
    return None


def _solver(z3: Any, bits: bool) -> Any:
    """z3's solver for the obligations: over 64-bit integers, straight to a SAT problem (simplify, solve the
    equations, bit-blast: several times faster than the default solver on Swing's negabinary formulas)."""
    if bits:
        return z3.Then("simplify", "solve-eqs", "bit-blast", "sat").solver()
    return z3.Solver()


def _smallest_p(zz: _Z3, solver: Any, bits: bool) -> int:
    """The smallest p for which the solver's (satisfiable) assertions hold, by bisection."""
    z3 = zz.z3

    def value() -> int:
        val = solver.model().eval(zz.p, model_completion=True)
        return int(val.as_signed_long() if bits else val.as_long())

    lo, hi = 1, value()
    while lo < hi:
        mid = (lo + hi) // 2
        solver.push()
        solver.add(zz.p <= zz.const(mid))
        if solver.check() == z3.sat:
            hi = min(mid, value())
        else:
            lo = mid + 1
        solver.pop()
    return hi


def _show(t: Any) -> str:
    kind = t[0]
    if kind in ("num", "bool"):
        return str(t[1]).lower() if kind == "bool" else str(t[1])
    if kind == "var":
        return {"rank": "r"}.get(t[1], t[1])
    if kind == "log2p":
        return "log2(p)"
    if kind == "bin":
        if t[1] == "+" and t[3][0] == "num" and t[3][1] < 0:
            return f"({_show(t[2])} - {-t[3][1]})"
        return f"({_show(t[2])} {t[1]} {_show(t[3])})"
    if kind == "cmp":
        return f"{_show(t[2])} {t[1]} {_show(t[3])}"
    if kind == "and":  # an `or` inside an `and` (a stripe's invariant) in parentheses
        return " and ".join(f"({_show(x)})" if x[0] == "or" else _show(x) for x in t[1:])
    if kind == "or":
        return f"{_show(t[1])} or {_show(t[2])}"
    if kind == "not":
        return f"not ({_show(t[1])})" if t[1][0] in ("and", "or", "cmp") else f"not {_show(t[1])}"
    if kind == "un":
        return f"{t[1]}{_show(t[2])}"
    if kind == "ite":
        return f"({_show(t[2])} if {_show(t[1])} else {_show(t[3])})"
    return str(t)
