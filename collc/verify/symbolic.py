"""A program's steps as formulas in ``p``, ``rank`` and the step variable: the input of the proof for all p.

`extract` runs a `.coll` program with ``p`` and ``rank`` left as symbols, statement by statement as the
elaborator (`collc.elaborate`) runs it for one rank: the same scopes (a phase's or a procedure's names are
locals from its first line on, a procedure never sees its caller's locals, a ``let`` in a branch or a loop
keeps its value after it, a loop variable keeps its last value), the same order of evaluation, the same types
and errors.  Where the elaborator's value depends on the path a rank takes, the model's value is a formula
that chooses by the path's conditions; where it would need a value the model cannot state exactly (a local
carried from one iteration of a step loop to the next, a set chosen by a condition, a recursion on a symbol,
compression, lanes, groups, a hierarchy, chunk weights), extraction stops with a `Refusal` naming the
construct and its place.  Expressions are evaluated by `collc.verify.symexpr`, terms live in
`collc.verify.terms`.

The result, a `Model`, holds the program's steps as step loops, each with the ops of one iteration as terms
over ``rank`` and the loop's iteration ``i`` (a ``step:`` block, or a communication statement outside a step,
is a loop of one iteration).  Every phase must therefore be made of step loops and steps whose number does not
depend on the rank; conditions on the rank or p choose the ops inside a step, and the values of locals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collc.elaborate.groups import MAX_LANE
from collc.elaborate.syntax import _assigned
from collc.frontend import ast
from collc.frontend.program import Program
from collc.ir import Action, Collective, OpKind, Schedule, Span
from collc.verify.symexpr import MAX_DEPTH, MAX_NODES, Expressions, Partial, Unknown, choose, tree_size
from collc.verify.terms import (
    FALSE,
    TRUE,
    Refusal,
    Term,
    binop,
    cmp,
    conj,
    evaluate,
    evaluate_array,
    has_bits,
    is_bool,
    is_num,
    is_set,
    ite,
    member,
    members,
    neg,
    num,
    substitute,
)

__all__ = [
    "Loop", "Model", "Refusal", "SymOp", "evaluate", "evaluate_array", "extract", "member", "members", "same_steps",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class SymOp:
    """One send or receive of every rank in one iteration, when ``guard`` holds for the rank."""

    kind: str  # send | recv
    guard: Term
    peer: Term
    chunks: Term  # a chunk set
    action: str | None  # recv: copy | reduce
    span: Span
    lane: Term | None = None  # the op's lane (``lane J:``), None: no lane


@dataclass(frozen=True, slots=True)
class Loop:
    """A step loop: iteration ``i`` (0 .. count-1) is one step; ``ops`` are formulas in rank and i."""

    phase: str
    count: Term
    ops: tuple[SymOp, ...]
    span: Span
    lets: tuple[tuple[Term, Term], ...] = ()  # (guard, value) of every `let` in the body: evaluated, must not fail


@dataclass(frozen=True, slots=True)
class Model:
    """The program with ``p`` symbolic: its loops in order, its constraints and its chunk count."""

    name: str
    collective: Collective
    pow2: bool  # the constraints say p is a power of two
    constraints: tuple[Term, ...]  # other constraints on p, as terms
    nchunks: Term
    root: Term | None
    loops: tuple[Loop, ...]
    fixed: tuple[tuple[str, int], ...]  # parameters other than p, at their values
    span: Span
    lets: tuple[tuple[Term, Term], ...] = ()  # (guard, value) outside steps, loop counts: must not fail

    def bits(self) -> bool:
        """Whether any term uses bit operations (the proof then works on machine integers)."""
        return self.pow2 or any(has_bits(t) for loop in self.loops for op in loop.ops for t in _terms(op))


def _terms(op: SymOp) -> tuple[Term, ...]:
    return (op.guard, op.peer, op.chunks)


# --------------------------------------------------------------------------
# Extraction: the statements, as the elaborator runs them
# --------------------------------------------------------------------------

_NOT_ASSIGNED = "used before it is assigned"


def _scope(body: tuple[ast.Stmt, ...], given: Mapping[str, Any]) -> dict[str, Any]:
    """The environment a phase or procedure body starts with: every name the body may assign is a local from
    its first line on (`collc.elaborate.syntax._assigned`, as the elaborator decides), not yet assigned; then
    ``given`` (``rank``, a procedure's parameters)."""
    env: dict[str, Any] = {name: Unknown(_NOT_ASSIGNED, gap=True) for name in _assigned(body)}
    env.update(given)
    return env


class _Extractor(Expressions):
    """The statements of a program, run with ``p`` and ``rank`` symbolic, as `collc.elaborate` runs them.

    Each phase and each procedure call has an environment of its own (`_scope`), changed in place by ``let``
    and by the variables of ``for`` loops, which keep their last value after the loop.  At a rank- or
    p-dependent ``if`` each branch runs on a copy and the copies are joined: a name becomes ``a if c else b``
    (`choose`).  A step loop's body is one formula in its iteration ``i``; a name it assigns is `Unknown` at
    the start of an iteration (its value there is the previous iteration's), so a body that reads it before
    assigning it is refused, and after the loop it is its value at the last iteration.
    """

    def __init__(self, program: Program) -> None:
        super().__init__(program)
        self.lane: Term | None = None  # the lane block the statements are in

    # ---- outside steps
    def phase_body(self, phase: ast.Phase, body: tuple[ast.Stmt, ...], env: dict[str, Any], loops: list[Loop]) -> None:
        for stmt in body:
            self.guard, self.in_loop = TRUE, False
            if isinstance(stmt, ast.Let):
                env[stmt.name] = self.expr(stmt.value, env)
                self.note(env[stmt.name])
            elif isinstance(stmt, ast.Pass):
                continue
            elif isinstance(stmt, ast.Assert):
                self.assertion(stmt, env)
            elif isinstance(stmt, ast.For) and stmt.is_step:
                loops.append(self.step_loop(phase, stmt, env))
            elif isinstance(stmt, ast.For):
                values = self.expr(stmt.iter, env)
                self.note(values)
                for v in _concrete(values, stmt.iter.span):
                    env[stmt.var] = num(v)
                    self.phase_body(phase, stmt.body, env, loops)
            elif isinstance(stmt, ast.StepBlock):
                loops.append(self.one_step(phase, stmt.body, env, stmt.span))
            elif isinstance(stmt, ast.Send | ast.Recv | ast.Exchange):  # a step of its own
                loops.append(self.one_step(phase, (stmt,), env, stmt.span))
            elif isinstance(stmt, ast.Do) and stmt.group is None:
                proc, local = self.enter(stmt, env)
                try:
                    self.phase_body(phase, proc.body, local, loops)
                finally:
                    self.depth -= 1
            elif isinstance(stmt, ast.If):
                self.phase_if(phase, stmt, env, loops)
            else:
                raise Refusal(f"a {_stmt_word(stmt)}", stmt.span)

    def phase_if(self, phase: ast.Phase, stmt: ast.If, env: dict[str, Any], loops: list[Loop]) -> None:
        """An ``if`` outside a step: a branch whose condition is the same at every rank and p runs as it is;
        a condition on the rank or p may only choose values (branches without steps)."""
        for k, (cond, branch) in enumerate(stmt.branches):
            c = self.condition(self.expr(cond, env), cond.span)
            self.note(c)
            if c == TRUE:
                self.phase_body(phase, branch, env, loops)
                return
            if c == FALSE:
                continue
            rest = ast.If(branches=stmt.branches[k:], orelse=stmt.orelse, span=stmt.span)
            self.if_stmt(rest, env, TRUE, None)  # refuses a step in a branch
            return
        self.phase_body(phase, stmt.orelse, env, loops)

    def enter(self, stmt: ast.Do, env: Mapping[str, Any]) -> tuple[ast.Proc, dict[str, Any]]:
        """``do proc(args)``: the procedure and its environment (its parameters and ``rank``, never the caller's
        locals); the caller leaves `depth` by one when the body is done."""
        proc = self.program.procs[stmt.proc]
        args = [self.expr(a, env) for a in stmt.args]
        for a in args:
            self.note(a)
        if self.depth >= MAX_DEPTH:
            raise Refusal(f"the recursion of {proc.name} on a symbol", stmt.span)
        self.depth += 1
        return proc, _scope(proc.body, {**dict(zip(proc.params, args, strict=True)), "rank": ("var", "rank")})

    # ---- steps
    def step_loop(self, phase: ast.Phase, node: ast.For, env: dict[str, Any]) -> Loop:
        it = node.iter
        backwards = False
        if isinstance(it, ast.Call) and it.func == "reversed" and len(it.args) == 1:
            backwards, it = True, it.args[0]
        bounds = self.expr(it, env)
        if not (isinstance(bounds, tuple) and bounds[0] == "range"):
            raise Refusal("a step loop over something other than a range lo .. hi", node.iter.span)
        self.note(bounds)
        lo, hi = bounds[1], bounds[2]
        count = binop("-", hi, lo)
        count = ite(cmp(">=", count, num(0)), count, num(0)) if not is_num(count) else num(max(count[1], 0))
        if _uses(count, "rank"):
            raise Refusal("a step loop whose number of steps depends on the rank", node.iter.span)
        i = ("var", "i")
        s = binop("-", binop("-", hi, num(1)), i) if backwards else binop("+", lo, i)
        carried = Unknown(
            f"its value from the previous iteration of the step loop at line {node.span.line} (assigned in the "
            "loop, read before it is assigned in the iteration)",
            gap=True,
        )
        local = dict(env)
        for name in _assigned(node.body):
            local[name] = carried
        local[node.var] = s
        self.outer.append((TRUE, count))
        self.inner, self.in_loop = [], True
        self.loop += 1
        ops: list[SymOp] = []
        self.step_body(node.body, local, TRUE, ops)
        self.guard, self.in_loop = TRUE, False
        last = binop("-", count, num(1)) if not is_num(count) else num(count[1] - 1)
        for name in {node.var, *_assigned(node.body)}:  # after the loop: the last iteration's value
            end = local[name]
            if isinstance(end, Partial):
                end = Partial(substitute(end.value, "i", last), substitute(end.defined, "i", last), end.reason)
            elif not isinstance(end, Unknown):
                end = substitute(end, "i", last)
            env[name] = choose(cmp(">", count, num(0)), end, env[name], name)
        return Loop(phase.name, count, tuple(ops), node.span, tuple(self.inner))

    def one_step(self, phase: ast.Phase, body: tuple[ast.Stmt, ...], env: dict[str, Any], span: Span) -> Loop:
        """A ``step:`` block (or a communication statement outside a step): one step, its lets kept after it."""
        self.inner, self.in_loop = [], True
        self.loop += 1
        ops: list[SymOp] = []
        self.step_body(body, env, TRUE, ops)
        self.guard, self.in_loop = TRUE, False
        return Loop(phase.name, num(1), tuple(ops), span, tuple(self.inner))

    def step_body(self, body: tuple[ast.Stmt, ...], env: dict[str, Any], guard: Term, ops: list[SymOp] | None) -> None:
        """Statements inside a step (``ops`` is None: a branch outside steps, where a step is refused), for
        the ranks where ``guard`` holds, changing ``env`` in place."""
        for stmt in body:
            self.guard = guard
            if isinstance(stmt, ast.Let):
                env[stmt.name] = self.expr(stmt.value, env)
                self.note(env[stmt.name])
            elif isinstance(stmt, ast.Pass):
                continue
            elif isinstance(stmt, ast.Assert):
                self.assertion(stmt, env)
            elif isinstance(stmt, ast.Send | ast.Recv | ast.Exchange):
                if ops is None:
                    raise Refusal("a condition around whole steps that depends on the rank or p", stmt.span)
                self.comm(stmt, env, guard, ops)
            elif isinstance(stmt, ast.If):
                self.if_stmt(stmt, env, guard, ops)
            elif isinstance(stmt, ast.For) and not stmt.is_step:
                values = self.expr(stmt.iter, env)
                self.note(values)
                if not is_set(values):
                    raise Refusal("a loop over something that is not a set or a range", stmt.iter.span)
                for v in _concrete(values, stmt.iter.span):
                    env[stmt.var] = num(v)
                    self.step_body(stmt.body, env, guard, ops)
                    self.guard = guard
            elif isinstance(stmt, ast.Do) and stmt.group is None:
                proc, local = self.enter(stmt, env)
                try:
                    self.step_body(proc.body, local, guard, ops)
                finally:
                    self.depth -= 1
            elif isinstance(stmt, ast.Lane) and ops is not None and self.lane is None:
                lane = self.int_(stmt.lane, env)  # the elaborator needs an int in 0 .. MAX_LANE - 1
                self.note(lane)
                self.inner.append((guard, ("holds", conj(cmp(">=", lane, num(0)), cmp("<", lane, num(MAX_LANE))))))
                self.lane = lane
                try:
                    self.step_body(stmt.body, env, guard, ops)
                finally:
                    self.lane = None
            elif ops is None and isinstance(stmt, ast.For | ast.StepBlock):
                raise Refusal("a condition around whole steps that depends on the rank or p", stmt.span)
            else:
                raise Refusal(f"a {_stmt_word(stmt)} inside a step", stmt.span)

    def if_stmt(self, stmt: ast.If, env: dict[str, Any], guard: Term, ops: list[SymOp] | None) -> None:
        """An if/elif/else chain: condition k is evaluated where the ones before it are false, each branch runs
        on a copy of ``env``, and the copies are joined into ``env``."""
        rest = guard
        outcomes: list[tuple[Term, dict[str, Any]]] = []
        for cond, branch in stmt.branches:
            if rest == FALSE:  # an earlier condition always holds: the elaborator evaluates no further
                break
            self.guard = rest
            c = self.condition(self.expr(cond, env), cond.span)
            self.note(c)
            local = dict(env)
            taken = conj(rest, c)
            if taken != FALSE:
                self.step_body(branch, local, taken, ops)
            outcomes.append((c, local))
            rest = conj(rest, neg(c))
        orelse = dict(env)
        if rest != FALSE:
            self.step_body(stmt.orelse, orelse, rest, ops)
        self.guard = guard
        for name in env:
            value = orelse[name]
            for c, local in reversed(outcomes):
                value = choose(c, local[name], value, name)
            env[name] = value

    def comm(
        self, stmt: ast.Send | ast.Recv | ast.Exchange, env: Mapping[str, Any], guard: Term, ops: list[SymOp]
    ) -> None:
        if isinstance(stmt, ast.Send):
            self.no_codec(stmt.codec, stmt.span)
            peer, chunks = self.int_(stmt.peer, env), self.chunks(stmt.chunks, env)
            ops.append(SymOp("send", guard, peer, chunks, None, stmt.span, self.lane))
        elif isinstance(stmt, ast.Recv):
            self.no_codec(stmt.codec, stmt.span)
            peer, chunks = self.int_(stmt.peer, env), self.chunks(stmt.chunks, env)
            ops.append(SymOp("recv", guard, peer, chunks, stmt.action, stmt.span, self.lane))
        else:
            self.no_codec(stmt.send_codec or stmt.recv_codec, stmt.span)
            peer = self.int_(stmt.peer, env)
            ops.append(SymOp("send", guard, peer, self.chunks(stmt.send, env), None, stmt.send_span, self.lane))
            ops.append(SymOp("recv", guard, peer, self.chunks(stmt.recv, env), stmt.action, stmt.recv_span,
                             self.lane))  # fmt: skip

    def no_codec(self, codec: ast.CodecRef | None, span: Span) -> None:
        if codec is not None:
            raise Refusal("a compressed message", span)

    def int_(self, node: ast.Expr, env: Mapping[str, Any]) -> Term:
        v = self.expr(node, env)
        if is_set(v) or is_bool(v):
            raise Refusal("a peer that is not an integer", node.span)
        return v  # type: ignore[no-any-return]

    def chunks(self, node: ast.Expr, env: Mapping[str, Any]) -> Term:
        v = self.expr(node, env)
        if is_bool(v):
            raise Refusal("chunks that are not an integer or a set", node.span)
        return v if is_set(v) else ("elts", (v,))  # type: ignore[no-any-return]


def _uses(t: Any, name: str) -> bool:
    if not isinstance(t, tuple):
        return False
    if t == ("var", name):
        return True
    return any(_uses(x, name) for x in (t[1] if t[0] == "elts" else t[1:]))


_MAX_UNROLL = 4096  # iterations of a loop that is not a step loop: the model unrolls it


def _concrete(values: Term, span: Span) -> list[int]:
    """The values a loop that is not a step loop runs over, in the elaborator's order (a range in order, a set
    ascending); a refusal when they depend on the rank or p, or are too many to unroll."""
    if values[0] == "range":
        if not (is_num(values[1]) and is_num(values[2])):
            raise Refusal("a loop (not a step loop) whose bounds depend on the rank or p", span)
        out = range(values[1][1], values[2][1])
    elif values[0] == "elts" and all(is_num(x) for x in values[1]):
        return sorted({x[1] for x in values[1]})
    else:
        raise Refusal("a loop (not a step loop) over a set that depends on the rank or p", span)
    if len(out) > _MAX_UNROLL:
        raise Refusal(f"a loop (not a step loop) of {len(out)} iterations, more than the model unrolls", span)
    return list(out)


def _stmt_word(stmt: ast.Stmt) -> str:
    words = {"Do": "do ... on a group", "Lane": "lane block", "Compress": "compress", "Decompress": "decompress"}
    name = type(stmt).__name__
    return words.get(name, name.lower())


def _conjuncts(node: ast.Expr) -> list[ast.Expr]:
    if isinstance(node, ast.BoolOp) and node.op == "and":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def extract(program: Program, values: Mapping[str, int] | None = None, free: Sequence[str] = ()) -> Model:
    """The symbolic model of ``program`` with ``p`` free, and the parameters named in ``free`` (terms ``("var",
    name)``); other parameters at ``values`` or their defaults."""
    if program.hierarchy is not None:
        raise Refusal("a hierarchy (levels of ranks)", program.hierarchy.span)
    if program.chunks.weight is not None:
        raise Refusal("chunk weights", program.chunks.span)
    values = dict(values or {})
    ex = _Extractor(program)
    constraints: list[Term] = []
    fixed: list[tuple[str, int]] = []
    p_param = program.param("p")
    if p_param is None:
        raise Refusal("a program whose p is not a parameter", program.header.span)
    for param in program.params:
        if param.type != "int":
            raise Refusal(f"the parameter {param.name} of type {param.type}", param.type_span)
        if param.name == "p":
            continue
        if param.name in free:
            ex.globals[param.name] = ("var", param.name)
            continue
        if param.name in values:
            v = values[param.name]
        elif param.default is not None:
            d = ex.expr(param.default, {})
            if not is_num(d):
                raise Refusal(f"the default of {param.name}, which depends on p", param.default.span)
            v = d[1]
        else:
            raise Refusal(f"the parameter {param.name} has no default: give it with --param", param.span)
        ex.globals[param.name] = num(v)
        fixed.append((param.name, v))
    for param in program.params:
        if param.constraint is None:
            continue
        for c in _conjuncts(param.constraint):
            if isinstance(c, ast.Call) and c.func == "is_pow2" and len(c.args) == 1 and isinstance(c.args[0], ast.Name):
                if c.args[0].id == "p":
                    ex.pow2 = True
                    continue
            term = ex.condition(ex.expr(c, {}), c.span)
            if term == FALSE:
                raise Refusal(f"the constraint of {param.name} is false", c.span)
            if term != TRUE:
                constraints.append(term)
    for let in program.lets:  # the elaborator evaluates every one of them: so must the model
        ex.globals[let.name] = ex.expr(let.value, {})
        ex.note(ex.globals[let.name])
    for a in program.asserts:
        ex.assertion(a, {})
    nchunks = ex.expr(program.chunks.count, {})
    if is_set(nchunks) or is_bool(nchunks):
        raise Refusal("a chunk count that is not an integer", program.chunks.span)
    ex.note(nchunks)
    loops: list[Loop] = []
    for phase in program.phases:
        ex.phase_body(phase, phase.body, _scope(phase.body, {"rank": ("var", "rank")}), loops)
    root = ex.globals.get("root")
    for t in [*(x for pair in ex.outer for x in pair), *(x for loop in loops for op in loop.ops for x in _terms(op)),
              *(x for loop in loops for pair in loop.lets for x in pair)]:  # fmt: skip
        if tree_size(t) > MAX_NODES:
            raise Refusal("formulas too large for the symbolic model", program.header.span)
    return Model(
        name=program.name,
        collective=program.collective,
        pow2=ex.pow2,
        constraints=tuple(constraints),
        nchunks=nchunks,
        root=root if isinstance(root, tuple) and not is_set(root) else None,
        loops=tuple(loops),
        fixed=tuple(fixed),
        span=program.header.span,
        lets=tuple(ex.outer),
    )


def same_steps(model: Model, schedule: Schedule, ranks: Sequence[int] | None = None) -> str | None:
    """None when the model's ops of ``ranks`` (default: every rank) are the (partially) elaborated schedule's,
    step by step; otherwise a message saying where they differ."""
    p = schedule.nranks
    ranks = list(range(p)) if ranks is None else list(ranks)
    spot = np.asarray(ranks, dtype=np.int64)[None, :]
    mine = []
    for loop in model.loops:
        count = evaluate(loop.count, {"p": p})
        if count == 0:
            continue
        it = np.arange(count, dtype=np.int64)[:, None]
        env: dict[str, Any] = {"p": p, "i": it, "rank": spot, "L": max(p.bit_length() - 1, 0)}
        shape = (count, spot.shape[1])
        rows = []
        for op in loop.ops:
            guard = np.broadcast_to(np.asarray(evaluate_array(op.guard, env), dtype=bool), shape)
            peer = _ints(op.peer, env, shape)
            sparse = op.chunks[0] == "where"  # every candidate a column of its own, -1 where it is not in the set
            if op.chunks[0] == "range":
                lo = _ints(op.chunks[1], env, shape)
                hi = _ints(op.chunks[2], env, shape)
                cols = None
            elif sparse:
                cols = _where_columns(op.chunks, env, shape)
            else:
                cols = [_ints(t, env, shape) for t in op.chunks[1]]
            action = (op.action or "copy") if op.kind == "recv" else None
            lane = np.full(shape, -1, dtype=np.int64) if op.lane is None else _ints(op.lane, env, shape)
            rows.append(
                (op.kind, action, guard, peer, cols, lo if cols is None else None, hi if cols is None else None,
                 sparse, lane)
            )  # fmt: skip
        for i in range(count):
            ops = []
            for kind, action, guard, peer, cols, lo, hi, sparse, lane in rows:
                for k, r in enumerate(ranks):
                    if guard[i, k]:
                        if cols is None:
                            a, b = int(lo[i, k]), int(hi[i, k])
                            bits = ((1 << b) - 1) ^ ((1 << a) - 1) if b > a >= 0 else (0 if b <= a else -1)
                        elif sparse:
                            bits = sum(1 << int(c[i, k]) for c in cols if c[i, k] >= 0)
                        else:
                            cs = [int(c[i, k]) for c in cols]
                            bits = sum(1 << c for c in set(cs)) if min(cs) >= 0 else -1
                        if bits:  # the elaborator emits no op for an empty set of chunks
                            ops.append((r, kind, int(peer[i, k]), bits, action or "", int(lane[i, k])))
            if ops:
                mine.append(sorted(ops))
    theirs = [sorted(_op_row(o, step.lane(n)) for n, o in enumerate(step.ops)) for step in schedule.steps]
    if mine != theirs:
        return f"the symbolic model and the elaborated schedule differ at p={p}"
    return None


def _ints(t: Any, env: Mapping[str, Any], shape: tuple[int, int]) -> np.ndarray:
    return np.broadcast_to(np.asarray(evaluate_array(t, env), dtype=np.int64), shape)


def _where_columns(chunks: Term, env: Mapping[str, Any], shape: tuple[int, int]) -> list[np.ndarray]:
    """A set by comprehension as columns: column x holds x where x is in the set, -1 where it is not."""
    _, name, lo_t, hi_t, cond = chunks
    lo, hi = _ints(lo_t, env, shape), _ints(hi_t, env, shape)
    out = []
    for x in range(int(lo.min(initial=0)), int(hi.max(initial=0))):
        inside = np.broadcast_to(np.asarray(evaluate_array(cond, {**env, name: x}), dtype=bool), shape)
        out.append(np.where(inside & (lo <= x) & (x < hi), x, -1))
    return out


def _op_row(o: Any, lane: int | None) -> tuple[int, str, int, int, str, int]:
    """(rank, kind, peer, chunks as bits, action, lane or -1): an elaborated op, as `same_steps` compares it."""
    ln = -1 if lane is None else lane
    if o.kind is OpKind.SEND:
        return (o.rank, "send", o.peer, o.chunks.bits, "", ln)
    action = "reduce" if o.action is Action.REDUCE else "copy" if o.action is Action.COPY else ""
    return (o.rank, "recv", o.peer, o.chunks.bits, action, ln)
