"""Generated source for statements: `_Code`, which adds statements to `_ExprCode`.

Lets, assertions, loops and conditionals become straight-line code like
expressions do.  Steps are opened and closed inline (falling back to
`_Emitter.open_step` for the checks), and a send or receive whose peer and
chunks are valid is appended to the open step inline; anything else goes to
`_Emitter.emit`.  Compress and decompress ops go to
`collc.elaborate.codec_ops.emit_local`; ``do proc(...)`` calls the compiled
procedure.
"""

from __future__ import annotations

from collc.elaborate.codec_ops import emit_local
from collc.elaborate.expr_code import _ExprCode
from collc.elaborate.groups import enter_lane, run_on
from collc.elaborate.scope import Scope
from collc.elaborate.syntax import _check_literals
from collc.frontend import ast
from collc.ir import Action, OpKind, Span


class _Code(_ExprCode):
    """The source of one generated Python function that may run statements (every generated function is one).

    A statement block, a procedure or phase body, or a function body (its lets
    and assertions) is written in order, each statement's expressions through
    `_ExprCode`; a block or statement too large to inline is a function of its
    own, called on the same environment.
    """

    # -------------------------------------------------------- statements
    def block(self, body: tuple[ast.Stmt, ...], local: Scope) -> None:
        start = len(self.lines)
        for s in body:
            self.stmt(s, local)
        if len(self.lines) == start:
            self.line("pass")

    def stmt(self, node: ast.Stmt, local: Scope) -> None:
        if self.full():
            self.line(f"{self.value(self.compiler.stmt(node, local))}(env)")
            return
        self.size += 1
        getattr(self, "_s_" + type(node).__name__)(node, local)

    def _s_Let(self, node: ast.Let, local: Scope) -> None:
        self.line(f"env[{node.name!r}] = {self.expr(node.value, local)}")

    def _s_Assert(self, node: ast.Assert, local: Scope) -> None:
        c = self.expr(node.cond, local)
        with self.nested(f"if {c} is not True:"):
            self.line(f"{self.value(self.compiler.assertion_failure(node, local))}(env, {c})")

    def _s_Pass(self, node: ast.Pass, local: Scope) -> None:
        self.line("pass")

    def _s_For(self, node: ast.For, local: Scope) -> None:
        values, v, left = self.expr(node.iter, local), self.temp(), self.temp()
        emitter, span = self.value(self.compiler.emitter), self.value(node.span)
        if node.is_step and self.compiler.emitter.sampler is not None:
            # a long step loop runs only some iterations, each at its own step counter
            sampler, c = self.value(self.compiler.emitter.sampler), self.temp()
            self.raise_at(f"{sampler}.loop({emitter}, {values}, {span})", f"{v}_runs", node.iter.span)
            with self.nested(f"for {c}, {v} in {v}_runs[0]:"):
                self.line(f"{emitter}.counter = {c}")
                self.loop_body(node, v, left, local)
            self.line(f"{emitter}.counter = {v}_runs[1]")
            return
        if node.is_step:  # evaluated once: its size counts the loop's steps before it runs
            self.raise_at(values, f"{v}_all", node.iter.span)
            self.line(f"{emitter}.reserve_steps({v}_all, {span})")
            values = f"{v}_all"
        self.raise_at(f'iterate({values}, "for loop")', f"{v}_values", node.iter.span)
        with self.nested(f"for {v} in {v}_values:"):
            self.loop_body(node, v, left, local)

    def loop_body(self, node: ast.For, v: str, left: str, local: Scope) -> None:
        """One iteration of a for loop: the iteration budget, the loop variable, the body (a step of its own
        for ``for step``)."""
        emitter, span = self.value(self.compiler.emitter), self.value(node.span)
        self.line(f"{left} = {emitter}.iterations_left - 1")
        self.line(f"{emitter}.iterations_left = {left}")
        with self.nested(f"if {left} < 0:"):
            self.line(f"{emitter}.spend(0, {span})")
        self.line(f"env[{node.var!r}] = {v}")
        if node.is_step:
            self.open_step(node.span)
        self.block(node.body, local)
        if node.is_step:
            self.close_step()

    def _s_If(self, node: ast.If, local: Scope) -> None:
        self._branches(node, local, 0)

    def _branches(self, node: ast.If, local: Scope, k: int) -> None:
        """Branch k of an if/elif/else chain, and the ones after it."""
        if k == len(node.branches):
            self.block(node.orelse, local)
            return
        if k > 0 and self.full():  # the rest of a long chain: a function of its own
            rest = ast.If(branches=node.branches[k:], orelse=node.orelse, span=node.span)
            self.line(f"{self.value(self.compiler.stmt(rest, local))}(env)")
            return
        cond, body = node.branches[k]
        c = self.expr(cond, local)
        known = type(cond) is ast.Compare  # a comparison is a bool
        with self.nested(f"if {c}:" if known else f"if {c} is True:"):
            self.block(body, local)
        with self.nested("else:" if known else f"elif {c} is False:"):
            self._branches(node, local, k + 1)
        if not known:
            with self.nested("else:"):
                self.line(f"_bool({c}, {self.value(cond.span)}, 'condition')")

    def _s_StepBlock(self, node: ast.StepBlock, local: Scope) -> None:
        self.open_step(node.span)
        self.block(node.body, local)
        self.close_step()

    def _s_Lane(self, node: ast.Lane, local: Scope) -> None:
        e, lane = self.value(self.compiler.emitter), self.expr(node.lane, local)
        self.line(f"{self.value(enter_lane)}({e}, {lane}, {self.value(node.lane.span)})")
        self.block(node.body, local)
        self.line(f"{e}.lane = None")

    def open_step(self, span: Span) -> None:
        """`_Emitter.open_step`, inline when the step is known to be in this phase (from another rank)."""
        e, known = self.value(self.compiler.emitter), self.temp()
        self.line(f"{known} = {self.value(self.compiler.emitter.phase_of)}.get({e}.counter)")
        with self.nested(f"if {e}.in_step is None and {known} is not None and {known}[0] == {e}.phase:"):
            self.line(f"{e}.in_step = {self.value(span)}")
            self.line(f"{e}.current = None")
        with self.nested("else:"):
            self.line(f"{e}.open_step({self.value(span)})")

    def close_step(self) -> None:
        """`_Emitter.close_step`, inline."""
        e = self.value(self.compiler.emitter)
        self.line(f"{e}.in_step = {e}.current = None")
        self.line(f"{e}.counter += 1")

    def emit(
        self,
        kind: OpKind,
        peer: str,
        chunks: str,
        action: Action | None,
        span: Span,
        peer_span: Span | None,
        codec: ast.CodecRef | None = None,
    ) -> None:
        """A valid peer, in a step, with a valid non-empty chunk set: the op goes straight to the step's list.
        Anything else goes to `_Emitter.emit`, which does the same or raises the error (peer errors first)."""
        compiler = self.compiler
        spec = compiler.codecs[codec.name] if codec is not None else None
        e, k, a, s, c = (self.value(v) for v in (compiler.emitter, kind, action, span, spec))
        ps = self.value(peer_span) if peer_span is not None else "None"
        in_step = "" if peer_span is not None else f" and {e}.in_step is not None"  # an exchange opened one
        in_step += f" and {e}.lane is None"  # an op in a lane takes the slow path, which records the lane
        cs, current, op = self.temp(), self.temp(), self.temp()
        with self.nested(f"if type({peer}) is int and 0 <= {peer} < {e}.nranks and {peer} != {e}.rank{in_step}:"):
            with self.nested(f"if type({chunks}) is ChunkSet:"):
                self.line(f"{cs} = {chunks}")
            with self.nested(f"elif type({chunks}) is Range and {chunks}.step == 1:"):  # the shared set, if made
                self.line(f"{cs} = {self.value(compiler.emitter.sets)}.get(({chunks}.lo, {chunks}.hi))")
                with self.nested(f"if {cs} is None:"):
                    self.line(f"{cs} = {e}.chunks({chunks}, {s})")
            with self.nested("else:"):
                self.line(f"{cs} = {e}.chunks({chunks}, {s})")
            with self.nested(f"if 0 < {cs}.bits.bit_length() <= {e}.nchunks:"):
                self.line(f"{current} = {e}.current")
                with self.nested(f"if {current} is None:"):
                    self.line(f"{current} = {e}.current = {e}.ops.setdefault({e}.counter, [])")
                self.line(f"{op} = _new_op({'Op' if spec is None else 'CodecOp'})")
                for field_, v in (("rank", f"{e}.rank"), ("kind", k), ("peer", peer), ("chunks", cs)):
                    self.line(f"_op_{field_}({op}, {v})")
                self.line(f"_op_action({op}, {a})")
                self.line(f"_op_span({op}, {s})")
                if spec is not None:
                    self.line(f"_op_codec({op}, {c})")
                self.line(f"{current}.append({op})")
            with self.nested("else:"):
                self.line(f"{e}.emit({k}, {peer}, {cs}, {a}, {s}, {ps}, {c})")
        with self.nested("else:"):
            self.line(f"{e}.emit({k}, {peer}, {chunks}, {a}, {s}, {ps}, {c})")

    def _s_Send(self, node: ast.Send, local: Scope) -> None:
        _check_literals(node.chunks)  # compiled first, then the peer: its compile error comes first
        peer, chunks = self.expr(node.peer, local), self.expr(node.chunks, local)
        self.emit(OpKind.SEND, peer, chunks, None, node.span, None, node.codec)

    def _s_Recv(self, node: ast.Recv, local: Scope) -> None:
        _check_literals(node.chunks)  # compiled first, then the peer: its compile error comes first
        peer, chunks = self.expr(node.peer, local), self.expr(node.chunks, local)
        self.emit(OpKind.RECV, peer, chunks, Action(node.action), node.span, None, node.codec)

    def _s_Compress(self, node: ast.Compress, local: Scope) -> None:
        self.local_op(OpKind.COMPRESS, node.chunks, self.compiler.codecs[node.codec.name], node.span, local)

    def _s_Decompress(self, node: ast.Decompress, local: Scope) -> None:
        self.local_op(OpKind.DECOMPRESS, node.chunks, None, node.span, local)

    def local_op(self, kind: OpKind, chunks: ast.Expr, spec: str | None, span: Span, local: Scope) -> None:
        """`emit_local`: a compress or decompress op (rare enough for a call per op)."""
        cs = self.expr(chunks, local)
        e, k, c, s = (self.value(v) for v in (self.compiler.emitter, kind, spec, span))
        self.line(f"{self.value(emit_local)}({e}, {k}, {cs}, {c}, {s})")

    def _s_Exchange(self, node: ast.Exchange, local: Scope) -> None:
        peer, outer = self.expr(node.peer, local), self.temp()
        emitter = self.value(self.compiler.emitter)
        self.line(f"{outer} = {emitter}.in_step is None")
        with self.nested(f"if {outer}:"):
            self.open_step(node.span)
        send_codec, recv_codec = node.send_codec or node.recv_codec, node.recv_codec or node.send_codec
        send = self.expr(node.send, local)
        self.emit(OpKind.SEND, peer, send, None, node.send_span, node.peer.span, send_codec)
        recv = self.expr(node.recv, local)
        self.emit(OpKind.RECV, peer, recv, Action(node.action), node.recv_span, node.peer.span, recv_codec)
        with self.nested(f"if {outer}:"):
            self.close_step()

    def _s_Do(self, node: ast.Do, local: Scope) -> None:
        args = [self.expr(a, local) for a in node.args]
        if node.group is not None:
            group, run, compiler = self.expr(node.group, local), self.value(run_on), self.value(self.compiler)
            spans = f"{self.value(node.span)}, {self.value(node.group.span)}"
            self.line(f"{run}({compiler}, {node.proc!r}, ({''.join(a + ', ' for a in args)}), {group}, {spans})")
            return
        proc = self.value(self.compiler.procs)
        self.line(f"{proc}[{node.proc!r}](({''.join(a + ', ' for a in args)}), {self.value(node.span)})")
