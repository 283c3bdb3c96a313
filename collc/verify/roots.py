"""Every root at once: a rooted program whose schedule at root R is its schedule at one root with the ranks moved.

The proof for every p (`collc.verify.allp`) works with the other parameters fixed, so a reduce or a broadcast
is proved for its default root only.  Most rooted schedules treat the root as an offset: every rank computes
its place relative to the root, ``v = (rank - root) mod p``, and names its peers back in real ranks, ``(w +
root) mod p``.  Such a schedule at root R is the one at the base root d (the default) with every rank r
renamed ``(r + R - d) mod p``, and the collective's contract (every rank's data reduced onto the root, the
root's data on every rank) is renamed the same way, so the proof at root d covers every root.

`Rotation` states it with the root left free in the symbolic model (`collc.verify.symbolic.extract` with
``free=("root",)``) and asks z3 to prove, for every p the constraints allow, every root 0 <= R < p, every
rank and every step, with ``v = (rank - (R - d)) mod p``:

- the program's constraints at R imply them at d, and the loops have the same number of steps at both;
- each op of rank ``rank`` at R applies exactly when the same op of rank ``v`` applies at d, has peer
  ``(peer_d(v) + R - d) mod p`` and the same chunks, or, where there are p chunks, the chunks moved the same
  way: ``c`` at R where ``(c - R + d) mod p`` at d (the contract of a broadcast or a reduce, every chunk from
  or to the root, is the same for every renaming of the chunks; a gather's or a scatter's chunk c belongs to
  rank c, so there the chunks must move with the ranks, and there must be p of them);
- every value the elaborator computes at R can be computed (the same safety obligations as the proof's).

The model at d that the proof runs on is the free model with R = d substituted, so the two sides are the same
ops term by term; the free model is compared with the elaborated schedules of small p at every root first,
as the proof's model is at its one root.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import Program
from collc.ir import ParamValue, Span
from collc.verify.allp import _COMPUTABLE, _Z3, _first_failure, _safe, _set_terms, _solver, sample_sizes
from collc.verify.symbolic import Loop, Model, Refusal, SymOp, extract, member, same_steps
from collc.verify.terms import num, substitute

__all__ = ["Rotation", "at", "rotation"]

_COMPARE_UPTO = 10  # p whose schedules at every root are compared with the free model


def at(model: Model, name: str, value: int) -> Model:
    """``model`` with the free parameter ``name`` set to ``value`` in every term."""
    v = num(value)

    def sub(t: Any) -> Any:
        return substitute(t, name, v)

    def op(o: SymOp) -> SymOp:
        return replace(o, guard=sub(o.guard), peer=sub(o.peer), chunks=sub(o.chunks))

    def loop(lp: Loop) -> Loop:
        lets = tuple((sub(g), sub(t)) for g, t in lp.lets)
        return replace(lp, count=sub(lp.count), ops=tuple(op(o) for o in lp.ops), lets=lets)

    return replace(
        model,
        constraints=tuple(sub(c) for c in model.constraints),
        nchunks=sub(model.nchunks),
        root=None if model.root is None else sub(model.root),
        loops=tuple(loop(lp) for lp in model.loops),
        fixed=(*model.fixed, (name, value)),
        lets=tuple((sub(g), sub(t)) for g, t in model.lets),
    )


@dataclass(frozen=True, slots=True)
class Rotation:
    """A rooted program with its root free (``free``) and at its base root (``base``, the model to prove)."""

    program: Program
    values: Mapping[str, int]
    free: Model
    base: Model
    root: int  # the base root d

    def compare(self) -> str | None:
        """The free model against the elaborated schedules of p = 1 .. 10 at every root: a message where they
        differ (or an instance does not elaborate), None where they agree."""
        for p in sample_sizes(self.base, _COMPARE_UPTO):
            for r in range(p):
                params: dict[str, ParamValue] = {**self.values, "p": p, "root": r}
                try:
                    schedule = elaborate(self.program, params)
                except CollError as err:
                    return f"p={p}, root={r} does not elaborate ({err.message})"
                problem = same_steps(at(self.free, "root", r), schedule)
                if problem is not None:
                    return f"at root {r}: {problem}"
        return None

    def prove(self, timeout_ms: int) -> tuple[bool, str, Span | None]:
        """(True, what is renamed, None) when z3 proves the schedule at every root the base's rotated (the module
        docstring), with the same chunks or, for p chunks, the chunks rotated too; else (False, why not,
        where)."""
        d = self.root
        ranks = f"every rank r moved to (r + R - {d}) mod p" if d else "every rank r moved to (r + R) mod p"
        # a gather's or a scatter's chunks belong to ranks: only the chunks moved with the ranks keep the contract,
        # so for those the moved chunks are tried at once, with every other obligation
        rank_blocks = self.free.collective.rank_blocks
        if not rank_blocks:
            failed = self._prove(timeout_ms, False)
            if failed is None:
                return True, ranks, None
            if "(its chunks)" not in failed[0]:
                return False, *failed
        # (else every other obligation holds, the chunks' come last): the chunks renamed too, if there are p of them
        moved = self._prove(timeout_ms, True, others_proved=not rank_blocks)
        if moved is None:
            return True, ranks + ", and every chunk c to " + ranks.split(" to ")[1].replace("r +", "c +"), None
        return False, *moved

    def _prove(self, timeout_ms: int, move_chunks: bool, others_proved: bool = False) -> tuple[str, Span | None] | None:
        """The first obligation z3 does not prove (what, where), or None; with ``move_chunks`` the chunks moved with
        the ranks, and only the chunks' obligations when ``others_proved`` (by the attempt with the chunks
        unmoved)."""
        import z3

        free, base = self.free, self.base
        bits = free.bits() or base.bits()
        zz = _Z3(bits, free.pow2)
        p, big_r, rank, i, c = zz.p, zz.mk("root"), zz.mk("rank"), zz.mk("i"), zz.mk("c")
        shift = big_r - zz.const(self.root)
        v = _wrap(z3, rank - shift, p)
        env_r = {"p": p, "root": big_r, "rank": rank}
        env_d = {"p": p, "rank": v}
        domain = [*zz.domain(), big_r >= 0, big_r < p, *(zz.term(t, {"p": p, "root": big_r}) for t in free.constraints)]
        checks: list[tuple[str, Any, Span | None]] = []
        chunk_checks: list[tuple[str, Any, Span | None]] = []  # last, in every loop's order
        at_d = z3.And(True, *(zz.term(t, {"p": p}) for t in base.constraints))
        checks.append(("the constraints allow the base root wherever they allow another", at_d, free.span))
        same_n = zz.term(free.nchunks, {"p": p, "root": big_r}) == zz.term(base.nchunks, {"p": p})
        checks.append(("the number of chunks is the same at every root", same_n, free.span))
        # moving the chunks, chunk c at root R is chunk (c - R + d) mod p at d: a bijection of the p chunks
        p_chunks = ("the number of chunks is p", zz.term(base.nchunks, {"p": p}) == p, free.span)
        c_d = _wrap(z3, c - shift, p) if move_chunks else c
        in_p = z3.And(rank >= 0, rank < p)
        for g, t in free.lets:
            safe = z3.Implies(z3.And(in_p, zz.term(g, env_r)), _safe(zz, t, env_r))
            checks.append((_COMPUTABLE + " at every root", safe, free.span))
        for lr, ld in zip(free.loops, base.loops, strict=True):
            n = zz.term(lr.count, {"p": p, "root": big_r})
            checks.append(("a loop has as many steps at every root", n == zz.term(ld.count, {"p": p}), lr.span))
            dom = z3.And(in_p, i >= 0, i < n)
            er, ed = {**env_r, "i": i}, {**env_d, "i": i}
            safety = [(g, t, lr.span) for g, t in lr.lets]
            safety += [(o.guard, t, o.span) for o in lr.ops for t in (o.peer, *_set_terms(o.chunks))]
            for g, t, where in safety:
                safe = z3.Implies(z3.And(dom, zz.term(g, er)), _safe(zz, t, er))
                checks.append((_COMPUTABLE + " at every root", safe, where))
            for orr, od in zip(lr.ops, ld.ops, strict=True):
                gr, gd = zz.term(orr.guard, er), zz.term(od.guard, ed)
                what = f"the {orr.kind} at root R is the base root's {orr.kind} of the rank moved by R"
                checks.append((what + " (when it applies)", z3.Implies(dom, gr == gd), orr.span))
                pd = zz.term(od.peer, ed)  # in 0 .. p-1 where the op applies: the proof at the base root says so
                moved = z3.Implies(z3.And(dom, gr, pd >= 0, pd < p), zz.term(orr.peer, er) == _wrap(z3, pd + shift, p))
                checks.append((what + " (its peer)", moved, orr.span))
            for orr, od in zip(lr.ops, ld.ops, strict=True):
                gr = zz.term(orr.guard, er)
                what = f"the {orr.kind} at root R is the base root's {orr.kind} of the rank moved by R"
                runs = (_run(orr.chunks), _run(od.chunks)) if move_chunks else (None, None)
                if runs[0] is not None and runs[1] is not None:  # two runs of residues: starts and lengths
                    (a_r, l_r), (a_d, l_d) = runs
                    diff = zz.term(a_r, er) - zz.term(a_d, ed) - shift
                    starts = z3.Or(*(diff == zz.const(k) * p for k in range(-4, 5)))
                    n_r, n_d = zz.term(l_r, er), zz.term(l_d, ed)
                    lengths = z3.Or(n_r == n_d, z3.And(n_r >= p, n_d >= p), z3.And(n_r <= 0, n_d <= 0))
                    same = z3.Implies(z3.And(dom, gr), z3.And(starts, lengths))
                    chunk_checks.append((what + " (its chunks)", same, orr.span))
                    continue
                cr = zz.term(member(("var", "c"), orr.chunks), {**er, "c": c})
                cd = zz.term(member(("var", "c"), od.chunks), {**ed, "c": c_d})
                if move_chunks:  # exactly the base's chunks (all in 0 .. p-1, its proof says), rotated
                    cd = z3.And(c >= 0, c < p, cd)
                chunk_checks.append((what + " (its chunks)", z3.Implies(z3.And(dom, gr), cr == cd), orr.span))
        if move_chunks and others_proved:  # the others held with the chunks unmoved (`prove`)
            checks = [p_chunks]
        elif move_chunks:
            checks.append(p_chunks)
        checks += chunk_checks
        solver = _solver(z3, bits)
        solver.set("timeout", timeout_ms)
        solver.add(*domain)
        failed = _first_failure(zz, solver, checks, bits, None, timeout_ms)
        if failed is None:
            return None
        what, span, pv, res = failed
        why = f"it fails at p={pv}" if res == z3.sat else f"z3 could not decide it in {timeout_ms // 1000} s"
        return f"{what}: {why}", span


def _run(chunks: Any) -> tuple[Any, Any] | None:
    """(A, L) where ``chunks`` is the run of L residues mod p from A, ``{c for c in 0 .. p if (c - A) mod p < L}``
    (a rotation, `collc.verify.symexpr`): the set moved by k is the run from A + k, so two such sets are each
    other moved when their starts differ by k modulo p and their lengths agree (or both are empty, or both all
    of 0 .. p-1).  None for other sets."""
    if chunks[0] != "where" or chunks[2] != ("num", 0) or chunks[3] != ("var", "p"):
        return None
    cond, x = chunks[4], ("var", chunks[1])
    if cond[0] != "cmp" or cond[1] != "<" or cond[2][0] != "bin" or cond[2][1] != "mod" or cond[2][3] != ("var", "p"):
        return None
    diff = cond[2][2]
    if not _plus_once(diff, x) or _mentions(cond[3], x):
        return None
    return ("un", "-", substitute(diff, x[1], ("num", 0))), cond[3]  # diff = x - A


def _plus_once(t: Any, x: Any) -> bool:
    """``t`` is x plus terms free of x: x once, reached through '+' and the left side of '-'."""
    if t == x:
        return True
    if not isinstance(t, tuple) or t[0] != "bin" or t[1] not in ("+", "-"):
        return False
    left, right = _mentions(t[2], x), _mentions(t[3], x)
    if left and not right:
        return _plus_once(t[2], x)
    return t[1] == "+" and right and not left and _plus_once(t[3], x)


def _mentions(t: Any, x: Any) -> bool:
    return t == x or (isinstance(t, tuple) and any(_mentions(y, x) for y in t[1:]))


def _wrap(z3: Any, x: Any, p: Any) -> Any:
    """``x mod p`` for x in -p .. 2p-1."""
    return z3.If(x >= p, x - p, z3.If(x < 0, x + p, x))


def rotation(program: Program, values: Mapping[str, int]) -> Rotation | None:
    """The program with its root free, when it has a root parameter the user did not set and the symbolic model
    can express it free; None otherwise (the proof is then for the one root)."""
    param = program.param("root")
    if param is None or "root" in values or not program.collective.has_root or param.type != "int":
        return None
    try:
        free = extract(program, values, free=("root",))
        d = extract(program, values)
    except Refusal:
        return None
    root = dict(d.fixed).get("root")
    if root is None:
        return None
    return Rotation(program, values, free, at(free, "root", root), root)
