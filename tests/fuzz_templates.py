"""Correct collective algorithms, each written in a random one of many equivalent forms (for `coll_fuzz`).

A template is an algorithm known to be correct (rings, recursive doubling,
binomial trees, pairwise exchange, Swing, a compressed ring); `random_template`
writes one out choosing, independently, among equivalent spellings of every
part: ``x mod p`` or ``(x + 2 * p) % p`` or a helper function, a chunk as an
int, a one-element set, a range or a block, ``for step`` or a ``step:`` block
in a plain loop, statements inline or in a procedure, a send/receive pair or an
``exchange``, constants in ``let``, redundant brackets, names, indentation
(spaces or tabs), comments, blank lines, CRLF line ends, lines continued
inside brackets or after a backslash.  Every form must elaborate and verify:
a finding on one is a bug (in collc, or in the template).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from collc.ir import ParamValue

Template = tuple[str, dict[str, ParamValue], str]


@dataclass
class _Writer:
    """Lines of a program at indentation levels, rendered in a random style."""

    rng: random.Random
    lines: list[tuple[int, str]] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)  # top-level fn definitions, emitted before the phases
    counter: int = 0

    def add(self, level: int, text: str) -> None:
        self.lines.append((level, text))

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}" if self.rng.random() < 0.5 else f"{stem}_{self.counter}"

    def render(self) -> str:
        rng = self.rng
        unit = rng.choice(("  ", "    ", "\t", "   "))
        out: list[str] = []
        for level, text in self.lines:
            if rng.random() < 0.08:
                out.append("")
            if rng.random() < 0.08:
                out.append(unit * level + "# " + rng.choice(("a comment", "step by step", "ok: (x) [y] {z}")))
            line = unit * level + text
            if rng.random() < 0.1:
                line += rng.choice(("  # note", "\t# trailing", " #"))
            out.append(line)
        text = "\n".join(out) + "\n"
        if rng.random() < 0.15:
            text = text.replace("\n", "\r\n")
        elif rng.random() < 0.05:
            text = text.replace("\n", "\r")
        return text


# --------------------------------------------------------------------------
# Equivalent spellings
# --------------------------------------------------------------------------


class _Forms:
    """Random equivalent spellings of expressions; helper functions go to ``w.helpers``."""

    def __init__(self, w: _Writer) -> None:
        self.w, self.rng = w, w.rng
        self._wrap: str | None = None

    def paren(self, e: str) -> str:
        r = self.rng.random()
        if r < 0.15:
            return f"({e})"
        if r < 0.2:
            return f"(\n{e}\n)" if "\n" not in e and self.rng.random() < 0.3 else f"(({e}))"
        return e

    def mod(self, e: str) -> str:
        """``e mod p`` for ``-2p <= e``."""
        choice = self.rng.randrange(5)
        if choice == 0:
            return f"({e}) mod p"
        if choice == 1:
            return f"({e} + 2 * p) % p"
        if choice == 2:
            return f"(({e}) % p + p) % p"
        if choice == 3:
            if self._wrap is None:
                self._wrap = self.w.fresh("wrap")
                self.w.helpers.append(f"fn {self._wrap}(x) = x mod p")
            return f"{self._wrap}({e})"
        return f"(p + p + ({e})) mod p"

    def nxt(self) -> str:
        return self.rng.choice(
            ("ring_next(rank)", "(rank + 1) mod p", "(rank + 1) % p", "0 if rank == p - 1 else rank + 1",
             self.mod("rank + 1"))
        )  # fmt: skip

    def prv(self) -> str:
        return self.rng.choice(
            ("ring_prev(rank)", "(rank - 1) mod p", "(rank + p - 1) % p", "p - 1 if rank == 0 else rank - 1",
             self.mod("rank - 1"))
        )  # fmt: skip

    def chunk(self, e: str, k: str | None) -> str:
        """The chunks of block ``e``: chunk ``e`` when ``k`` is None, else chunks ``e*k .. (e+1)*k``."""
        if k is None:
            return self.rng.choice((e, f"{{{e}}}", f"{self.paren(e)} .. {self.paren(e)} + 1", f"set({e})",
                                    f"block({e}, 1)", f"{{c for c in 0 .. p if c == {self.paren(e)}}}"))  # fmt: skip
        b = self.paren(e)
        return self.rng.choice(
            (f"block({e}, {k})", f"{b} * {k} .. ({b} + 1) * {k}", f"{{c for c in {b} * {k} .. ({b} + 1) * {k}}}",
             f"shift(0 .. {k}, {b} * {k})", f"set({b} * {k} .. {b} * {k} + {k})")
        )  # fmt: skip

    def steps(self, lo: str, hi: str) -> str:
        """The values ``lo .. hi`` (ascending)."""
        return self.rng.choice(
            (f"{lo} .. {hi}", f"range({lo}, {hi})", f"{lo} .. ({hi})", f"reversed(reversed({lo} .. {hi}))",
             f"tuple({lo} .. {hi})")
        )  # fmt: skip

    def var(self) -> str:
        return self.rng.choice(("s", "i", "t", "stage", "k_", self.w.fresh("v")))


def _loop(w: _Writer, f: _Forms, level: int, var: str, values: str, body: Callable[[int], None]) -> None:
    """A loop of steps: ``for step``, or a plain loop around a ``step:`` block."""
    if w.rng.random() < 0.7:
        w.add(level, f"for step {var} in {values}:")
        body(level + 1)
    else:
        w.add(level, f"for {var} in {values}:")
        w.add(level + 1, "step:")
        body(level + 2)


def _pair(w: _Writer, level: int, send: str, recv: str) -> None:
    """A send and a receive of one step, in either order."""
    first, second = (send, recv) if w.rng.random() < 0.6 else (recv, send)
    w.add(level, first)
    w.add(level, second)


def _header(w: _Writer, name: str, collective: str, constraint: str, chunks: str, extra: tuple[str, ...] = ()) -> None:
    rng = w.rng
    w.add(0, f"algorithm {name} : {collective}")
    if rng.random() < 0.7:
        w.add(0, f"param p : int where {constraint}")
    else:
        w.add(0, "param p : int")
        w.add(0, f'assert {constraint}, "p does not fit"')
    for line in extra:
        w.add(0, line)
    w.add(0, f"chunks {chunks}")


def _finish(w: _Writer, header_len: int) -> str:
    lines = w.lines
    w.lines = lines[:header_len] + [(0, h) for h in w.helpers] + lines[header_len:]
    return w.render()


# --------------------------------------------------------------------------
# The algorithms
# --------------------------------------------------------------------------


def _ring_body(w: _Writer, f: _Forms, level: int, var: str, k: str | None, reduce: bool) -> None:
    """One ring step: reduce-scatter (send block r-s-1, reduce block r-s-2) or allgather (r-s, r-s-1)."""
    a, b = ("1", "2") if reduce else ("0", "1")
    send_block = f.chunk(f.mod(f"rank - {var} - {a}" if a != "0" else f"rank - {var}"), k)
    recv_block = f.chunk(f.mod(f"rank - {var} - {b}"), k)
    nxt, prv = f.nxt(), f.prv()
    if w.rng.random() < 0.3:
        n, q = w.fresh("to"), w.fresh("frm")
        w.add(level, f"let {n} = {nxt}")
        w.add(level, f"let {q} = {prv}")
        nxt, prv = n, q
    action = "reduce" if reduce else "copy"
    _pair(w, level, f"send {send_block} to {nxt}", f"recv {recv_block} from {prv} {action}")


def _ring_phase(w: _Writer, f: _Forms, name: str, k: str | None, reduce: bool) -> None:
    var = f.var()
    values = f.steps("0", "p - 1")
    if w.rng.random() < 0.3:  # through a procedure
        proc = w.fresh("ring_part")
        arg = w.fresh("n")
        w.add(0, f"proc {proc}({arg}):")
        _loop(w, f, 1, var, values.replace("p - 1", arg), lambda lv: _ring_body(w, f, lv, var, k, reduce))
        w.add(0, f"phase {name}:")
        w.add(1, f"do {proc}(p - 1)")
    else:
        w.add(0, f"phase {name}:")
        _loop(w, f, 1, var, values, lambda lv: _ring_body(w, f, lv, var, k, reduce))


def ring(rng: random.Random, kind: str) -> Template:
    w = _Writer(rng)
    f = _Forms(w)
    use_k = rng.random() < 0.4
    k = "k" if use_k else None
    collective = {"ag": "allgather", "rs": "reduce_scatter", "ar": "allreduce"}[kind]
    extra = ("param k : int = 2 where k >= 1",) if use_k else ()
    _header(w, f"ring_{kind}", collective, rng.choice(("p >= 1", "1 <= p", "p > 0")), "k * p" if use_k else "p", extra)
    header_len = len(w.lines)
    if kind in ("rs", "ar"):
        _ring_phase(w, f, "reduce_scatter", k, True)
    if kind in ("ag", "ar"):
        _ring_phase(w, f, "allgather", k, False)
    params: dict[str, ParamValue] = {"p": rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 12))}
    if use_k and rng.random() < 0.5:
        params["k"] = rng.choice((1, 2, 3))
    return _finish(w, header_len), params, f"ring_{kind}"


def recursive_doubling(rng: random.Random) -> Template:
    w = _Writer(rng)
    f = _Forms(w)
    constraint = rng.choice(("is_pow2(p)", "p >= 1 and is_pow2(p)", "p == 1 << log2(p)", "popcount(p) == 1"))
    chunks = rng.choice(("1", "2", "4"))
    _header(w, "recdoub", "allreduce", constraint, chunks)
    header_len = len(w.lines)
    var = f.var()
    everything = (
        rng.choice(("0 .. " + chunks, "set(0 .. " + chunks + ")", "{c for c in 0 .. " + chunks + "}"))
        if (chunks != "1")
        else rng.choice(("0", "{0}", "0 .. 1"))
    )
    dist = rng.choice((f"1 << {var}", f"2 ** {var}", f"pow2_floor(1 << {var})"))
    peer = rng.choice(
        (f"rank ^ ({dist})", f"rank + ({dist}) if rank & ({dist}) == 0 else rank - ({dist})",
         f"(rank ^ ({dist})) mod p")
    )  # fmt: skip
    w.add(0, "phase allreduce:")

    def body(level: int) -> None:
        nonlocal peer
        if rng.random() < 0.3:
            name = w.fresh("partner")
            w.add(level, f"let {name} = {peer}")
            peer = name
        if rng.random() < 0.5:
            w.add(level, f"exchange with {peer}: send {everything}; recv {everything} reduce")
        else:
            _pair(w, level, f"send {everything} to {peer}", f"recv {everything} from {peer} reduce")

    _loop(w, f, 1, var, f.steps("0", "log2(p)"), body)
    return _finish(w, header_len), {"p": rng.choice((1, 2, 4, 8, 16))}, "recursive_doubling"


def binomial(rng: random.Random, kind: str) -> Template:
    """Binomial broadcast (``bc``) or reduce (``rd``) from any root."""
    w = _Writer(rng)
    f = _Forms(w)
    collective = "broadcast" if kind == "bc" else "reduce"
    root_decl = rng.choice(
        ("param root : int = 0 where 0 <= root < p", "param root : int = 0 where root >= 0 and root < p")
    )
    _header(w, f"binomial_{kind}", collective, "p >= 1", "1", (root_decl,))
    header_len = len(w.lines)
    vrank, real = w.fresh("vrank"), w.fresh("real")
    w.helpers.append(f"fn {vrank}(r) = {f.mod('r - root')}")
    w.helpers.append(f"fn {real}(v) = {f.mod('v + root')}")
    var = f.var()
    w.add(0, f"phase {collective}:")

    def body(level: int) -> None:
        d, v = w.fresh("d"), w.fresh("v")
        w.add(level, f"let {d} = {rng.choice((f'1 << {var}', f'2 ** {var}'))}")
        w.add(level, f"let {v} = {vrank}(rank)")
        if kind == "bc":
            w.add(level, f"if {v} < {d} and {v} + {d} < p:")
            w.add(level + 1, f"send {rng.choice(('0', '{0}'))} to {real}({v} + {d})")
            w.add(level, rng.choice((f"elif {d} <= {v} < 2 * {d}:", f"elif {v} >= {d} and {v} < {d} * 2:")))
            w.add(level + 1, f"recv 0 from {real}({v} - {d}) copy")
        else:
            w.add(level, f"if {v} % (2 * {d}) == {d}:")
            w.add(level + 1, f"send 0 to {real}({v} - {d})")
            w.add(level, f"elif {v} % (2 * {d}) == 0 and {v} + {d} < p:")
            w.add(level + 1, f"recv {rng.choice(('0', '{0}'))} from {real}({v} + {d}) reduce")
        if rng.random() < 0.3:
            w.add(level, "else:")
            w.add(level + 1, "pass")

    _loop(w, f, 1, var, f.steps("0", "ceil_log2(p)"), body)
    p = rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 11))
    return _finish(w, header_len), {"p": p, "root": rng.randrange(p)}, f"binomial_{kind}"


def pairwise_alltoall(rng: random.Random) -> Template:
    w = _Writer(rng)
    f = _Forms(w)
    _header(w, "pairwise", "alltoall", "p >= 1", rng.choice(("p * p", "p ** 2")))
    header_len = len(w.lines)
    cid = w.fresh("cid")
    w.helpers.append(f"fn {cid}(src, dst) = {rng.choice(('src * p + dst', 'dst + p * src'))}")
    var = f.var()
    w.add(0, "phase alltoall:")

    def body(level: int) -> None:
        to, frm = f.mod(f"rank + {var}"), f.mod(f"rank - {var}")
        _pair(w, level, f"send {cid}(rank, {to}) to {to}", f"recv {cid}({frm}, rank) from {frm} copy")

    _loop(w, f, 1, var, f.steps("1", "p"), body)
    return _finish(w, header_len), {"p": rng.choice((1, 2, 3, 4, 5, 8))}, "pairwise_alltoall"


def direct_allgather(rng: random.Random) -> Template:
    """Every rank sends its block straight to every other, one distance per step."""
    w = _Writer(rng)
    f = _Forms(w)
    _header(w, "direct", "allgather", "p >= 1", "p")
    header_len = len(w.lines)
    var = f.var()
    w.add(0, "phase allgather:")

    def body(level: int) -> None:
        to, frm = f.mod(f"rank + {var}"), f.mod(f"rank - {var}")
        _pair(w, level, f"send {f.chunk('rank', None)} to {to}", f"recv {f.chunk(frm, None)} from {frm} copy")

    _loop(w, f, 1, var, f.steps("1", "p"), body)
    return _finish(w, header_len), {"p": rng.choice((1, 2, 3, 4, 6, 9))}, "direct_allgather"


def swing_even(rng: random.Random) -> Template:
    w = _Writer(rng)
    f = _Forms(w)
    _header(w, "swing_even", "allreduce", rng.choice(("p >= 2 and p % 2 == 0", "p % 2 == 0 and p > 0")), "p")
    L = rng.choice(("L", "nsteps"))
    w.add(0, f"let {L} = ceil_log2(p)")
    header_len = len(w.lines)
    var = f.var()
    w.add(0, "phase reduce_scatter:")
    _loop(
        w, f, 1, var, f.steps("0", L),
        lambda lv: w.add(lv, f"exchange with swing_peer(rank, {var}): send swing_blocks(rank, {var}); "
                             f"recv swing_blocks(swing_peer(rank, {var}), {var}) reduce"),
    )  # fmt: skip
    w.add(0, "phase allgather:")
    _loop(
        w, f, 1, var, rng.choice((f"reversed(0 .. {L})", f"range({L} - 1, -1, -1)")),
        lambda lv: w.add(lv, f"exchange with swing_peer(rank, {var}): send swing_blocks(swing_peer(rank, {var}), "
                             f"{var}); recv swing_blocks(rank, {var}) copy"),
    )  # fmt: skip
    return _finish(w, header_len), {"p": rng.choice((2, 4, 6, 8, 10, 16))}, "swing_even"


def compressed_ring(rng: random.Random) -> Template:
    w = _Writer(rng)
    f = _Forms(w)
    spec = rng.choice(("ebq(eb=1e-3)", "ebq(1e-3)", "ebq(eb=0.001)", "ebq( eb = 1E-3 )", "fp16", "bf16",
                       "fwq(bits=8, block=64)", "lossless", "ebq(eb=.5e-2,)"))  # fmt: skip
    name = rng.choice(("q", "cq", "codec1"))
    _header(w, "cring", "allgather", "p >= 1", "p", (f"codec {name} = {spec}",))
    header_len = len(w.lines)
    var = f.var()
    w.add(0, "phase allgather:")

    def body(level: int) -> None:
        send = f"send {f.chunk(f.mod(f'rank - {var}'), None)} to {f.nxt()} compress {name}"
        recv = f"recv {f.chunk(f.mod(f'rank - {var} - 1'), None)} from {f.prv()} copy compress {name}"
        _pair(w, level, send, recv)

    _loop(w, f, 1, var, f.steps("0", "p - 1"), body)
    return _finish(w, header_len), {"p": rng.choice((1, 2, 3, 4, 5, 8))}, "compressed_ring"


TEMPLATES: tuple[Callable[[random.Random], Template], ...] = (
    lambda rng: ring(rng, "ag"),
    lambda rng: ring(rng, "rs"),
    lambda rng: ring(rng, "ar"),
    recursive_doubling,
    lambda rng: binomial(rng, "bc"),
    lambda rng: binomial(rng, "rd"),
    pairwise_alltoall,
    direct_allgather,
    swing_even,
    compressed_ring,
)


def random_template(rng: random.Random) -> Template:
    """A correct program in a random form: its text, parameter values, and the algorithm's name."""
    return rng.choice(TEMPLATES)(rng)
