"""Base algorithms of the soundness campaign (`soundness_gen`) for gather, scatter, scan, exscan and barrier:

* ``gather`` and ``scatter``: binomial trees and linear (one rank a step) schedules with the root left free
  (``p_kind`` ``rooted``: another root at every p), k chunks per block now and then.  Their sites give the
  faults of a rooted schedule: a wrong subtree bound, a block off by one, a peer or a rank not rotated with
  the root (``v - d`` for ``real(v - d)``), chunks not moved with the root (``v <= x < v + d`` for
  ``v <= vrank(x) < v + d``), each where a planted trigger holds (from some p on, at some root, at a rank
  near the end);
* ``scan``: the Hillis-Steele inclusive scan and two exclusive scans (the inclusive one then a shift, or a
  shift then the inclusive one over ranks 1 ..), written with shifted step variables now and then.  Their
  sites: a receive that copies instead of reducing, a step that does not run, a shift from the wrong rank, a
  distance that makes a contribution counted twice;
* ``barrier``: the dissemination barrier (flag sets as comprehensions or rotations) and a ring of flags.

`FAMILIES` names them for ``benchmarks/soundness.py --family``; `make_program` and `run_program` are
`soundness_gen`'s, with these families.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import soundness_programs
from soundness_programs import Base, Ctx, Generated, Lines, Site, _pair, _steps

if TYPE_CHECKING:  # soundness_gen imports this module (through soundness_families)
    import soundness_gen as sg


def _site(key: str, e0: str, faults: tuple[str, ...], const: bool = False, stepfree: bool = False,
          pure: bool = False) -> Site:  # fmt: skip
    """A site of a step body: ``stepfree`` when ``e0`` reads neither the step variable nor a step's locals,
    ``pure`` when it reads only rank, p, the step variable and globals."""
    return Site(key, e0, faults, None, const, stepfree, pure)


def _two(c: Ctx, level: int, first: Lines, second: Lines) -> None:
    """Two blocks of lines (levels relative to ``level``), now and then the second first."""
    for d, text in first + second if c.rng.random() < 0.6 else second + first:
        c.add(level + d, text)


def _rooted_header(c: Ctx, name: str, coll: str) -> tuple[Lines, tuple[tuple[str, int], ...], str]:
    """The header of a rooted block collective, its fixed parameters and the chunks of the block of rank r
    (``{b}`` in the returned pattern)."""
    header = [(0, f"algorithm {name} : {coll}"), (0, "param p : int where p >= 1"),
              (0, "param root : int = 0 where 0 <= root < p")]  # fmt: skip
    fixed: tuple[tuple[str, int], ...] = ()
    if c.rng.random() < 0.3:
        header += [(0, "param k : int = 1 where k >= 1"), (0, "chunks k * p")]
        fixed = (("k", c.rng.choice((1, 2, 3))),)
        block = c.rng.choice(("({b}) * k .. ({b}) * k + k", "{{x for x in 0 .. k * p if x // k == {b}}}"))
    else:
        header.append((0, "chunks p"))
        block = c.rng.choice(("{b}", "{{{b}}}", "{{x for x in 0 .. p if x == {b}}}"))
    c.targets[c.TOP] += [(0, "fn vrank(r) = (r - root) mod p"), (0, "fn real(v) = (v + root) mod p"),
                         (0, f"fn block(r) = {block.format(b='r')}")]  # fmt: skip
    per = "x // k" if fixed else "x"
    span = "k * p" if fixed else "p"
    c.targets[c.TOP].append((0, f"fn subtree(lo, hi) = {{x for x in 0 .. {span} if lo <= vrank({per}) < hi}}"))
    return header, fixed, per


def _tree_sets(c: Ctx, key: str, level: int, s: str, per: str, span: str, lo: str, hi: str) -> str:
    """The chunks of the ranks lo .. hi relative to the root, through a site whose faults are chunks not moved
    with the root and a bound off by one."""
    e0 = f"subtree({lo}, {hi})"
    unmoved = f"{{x for x in 0 .. {span} if {lo} <= {per} < {hi}}}"
    faults = (unmoved, f"subtree({lo}, {hi} + 1)", f"subtree({lo} + 1, {hi})")
    return c.use(_site(key, e0, faults), level, s)


def _binomial(c: Ctx, scatter: bool) -> Base:
    coll = "scatter" if scatter else "gather"
    header, fixed, per = _rooted_header(c, f"binomial_{coll}", coll)
    span = "k * p" if fixed else "p"

    def body(level: int, s: str) -> None:
        e0 = f"1 << (ceil_log2(p) - 1 - {s})" if scatter else f"1 << {s}"
        far = f"2 << (ceil_log2(p) - 1 - {s})" if scatter else f"2 << {s}"
        d = c.use(_site("dist", e0, (far, f"({e0}) + 1"), pure=True), level, s)
        c.add(level, f"let d = {d}")
        c.add(level, "let v = vrank(rank)")
        bound = c.use(_site("bound", "v + d", ("v + d + 1", "v + 2 * d", "v + d - 1")), level, s)
        up = c.use(_site("parent", "real(v - d)", ("v - d", "(v - d) mod p", "real(v - d - 1)")), level, s)
        down = c.use(_site("child", "real(v + d)", ("v + d", "real(v + d + 1)", "(v + d) mod p")), level, s)
        if scatter:
            sent = _tree_sets(c, "sent", level, s, per, span, "v + d", "v + 2 * d")
            got = _tree_sets(c, "got", level, s, per, span, "v", "v + d")
            c.add(level, f"if v % (2 * d) == 0 and {bound} < p:")
            c.add(level + 1, f"send {sent} to {down}")
            c.add(level, "elif v % (2 * d) == d:")
            c.add(level + 1, f"recv {got} from {up} copy")
        else:
            sent = _tree_sets(c, "sent", level, s, per, span, "v", bound)
            got = _tree_sets(c, "got", level, s, per, span, "v + d", "v + 2 * d")
            c.add(level, "if v % (2 * d) == d:")
            c.add(level + 1, f"send {sent} to {up}")
            c.add(level, "elif v % (2 * d) == 0 and v + d < p:")
            c.add(level + 1, f"recv {got} from {down} copy")

    c.phase_start(coll)
    c.loop(1, c.f.var(), _steps(c, "0", "ceil_log2(p)"), "ceil_log2(p) - 1", body)
    return header, f"binomial_{coll}", "rooted", fixed


def _linear(c: Ctx, scatter: bool) -> Base:
    """One rank a step: at step s the rank s after the root (relative) sends its block to the root (gather) or
    gets it from the root (scatter)."""
    coll = "scatter" if scatter else "gather"
    header, fixed, _ = _rooted_header(c, f"linear_{coll}", coll)
    shifted = c.rng.random() < 0.5

    def body(level: int, s: str) -> None:
        at = f"{s} + 1" if shifted else s
        w = c.use(_site("who", f"real({at})", (at, f"real({at} + 1)", f"({at} - root) mod p"), pure=True), level, s)
        c.add(level, f"let w = {w}")
        own = c.use(_site("own", "block(rank)", ("block(rank + 1)", "block(vrank(rank))", "block((rank + 1) mod p)"),
                          stepfree=True, pure=True), level, s)  # fmt: skip
        theirs = c.use(_site("theirs", "block(w)", (f"block({at})", "block(w - 1)", "block(w + 1)")), level, s)
        boss = c.use(_site("boss", "root", ("0", "(root + 1) mod p", "real(1)"), stepfree=True, pure=True), level, s)
        if scatter:
            _two(c, level, [(0, f"if rank == {boss}:"), (1, f"send {theirs} to w")],
                 [(0, "if rank == w:"), (1, f"recv {own} from root copy")])  # fmt: skip
        else:
            _two(c, level, [(0, "if rank == w:"), (1, f"send {own} to {boss}")],
                 [(0, "if rank == root:"), (1, f"recv {theirs} from w copy")])  # fmt: skip

    c.phase_start(coll)
    lo, hi = ("0", "p - 1") if shifted else ("1", "p")
    c.loop(1, c.f.var(), _steps(c, lo, hi), "p - 2" if shifted else "p - 1", body)
    return header, f"linear_{coll}", "rooted", fixed


def gather(c: Ctx) -> Base:
    """A binomial or a linear gather to the root ``root``, not fixed by the campaign."""
    return _binomial(c, False) if c.rng.random() < 0.55 else _linear(c, False)


def scatter(c: Ctx) -> Base:
    """A binomial or a linear scatter from the root ``root``, not fixed by the campaign."""
    return _binomial(c, True) if c.rng.random() < 0.55 else _linear(c, True)


def scan(c: Ctx) -> Base:
    """Hillis-Steele: an inclusive scan, or an exclusive one (the inclusive scan then a shift by one rank, or the
    shift first and the inclusive scan over ranks 1 .. p-1)."""
    rng = c.rng
    kind = rng.choice(("scan", "scan", "exscan_last", "exscan_first"))
    coll = "scan" if kind == "scan" else "exscan"
    header = [(0, f"algorithm hs_{kind} : {coll}"), (0, "param p : int where p >= 1")]
    fixed: tuple[tuple[str, int], ...] = ()
    if rng.random() < 0.3:
        header += [(0, "param k : int = 1 where k >= 1"), (0, "chunks k")]
        fixed = (("k", rng.choice((1, 2))),)
        every = rng.choice(("0 .. k", "{x for x in 0 .. k}"))
    else:
        header.append((0, f"chunks {rng.choice(('1', '2'))}"))
        every = "0 .. 2" if header[-1][1] == "chunks 2" else rng.choice(("0", "{0}", "0 .. 1"))
    base = "1" if kind == "exscan_first" else "0"  # the first rank of the scan
    offset = rng.random() < 0.4  # the step variable runs 1 .. L and d = 2^(s - 1)
    split = rng.random() < 0.5  # the receive's action is chosen by a flag

    def step(level: int, s: str) -> None:
        e0 = f"1 << ({s} - 1)" if offset else f"1 << {s}"
        twice = f"max(1, ({e0}) - 1)"
        d = c.use(_site("dist", e0, (twice, f"({e0}) + 1", f"2 * ({e0})"), pure=True), level, s)
        c.add(level, f"let d = {d}")
        on = c.use(_site("on", "1", ("0",), const=True, stepfree=True, pure=True), level, s)
        send_if = "rank + d < p" if base == "0" else "rank >= 1 and rank + d < p"
        recv_if = "rank >= d + 1" if base == "1" else "rank >= d"
        frm = c.use(_site("from", "rank - d", ("rank - d - 1", "rank - 2 * d", "rank + d")), level, s)
        send: Lines = [(0, f"if {on} == 1 and {send_if}:"), (1, f"send {every} to rank + d")]
        recv: Lines = [(0, f"if {on} == 1 and {recv_if}:")]
        if split:
            cp = c.use(_site("copy", "0", ("1",), const=True, stepfree=True, pure=True), level, s)
            recv += [(1, f"if {cp} == 1:"), (2, f"recv {every} from {frm} copy"), (1, "else:"),
                     (2, f"recv {every} from {frm} reduce")]  # fmt: skip
        else:
            recv.append((1, f"recv {every} from {frm} reduce"))
        _two(c, level, send, recv)

    def shift(level: int, t: str) -> None:
        e = c.use(_site("shift", "1", ("2", "0"), const=True, stepfree=True, pure=True), level, t)
        frm = c.use(_site("shift_from", f"rank - {e}", (f"rank - {e} - 1", f"rank - {e} + 1", "0")), level, t)
        _two(c, level, [(0, f"if rank + {e} < p:"), (1, f"send {every} to rank + {e}")],
             [(0, f"if rank >= {e}:"), (1, f"recv {every} from {frm} copy")])  # fmt: skip

    if kind == "exscan_first":
        c.phase_start("shift")
        c.loop(1, "sh", "0 .. 1", "0", shift)
    c.phase_start("scan")
    steps = _steps(c, "1", "ceil_log2(p) + 1") if offset else _steps(c, "0", "ceil_log2(p)")
    c.loop(1, c.f.var(), steps, "ceil_log2(p)" if offset else "ceil_log2(p) - 1", step)
    if kind == "exscan_last":
        c.phase_start("shift")
        c.loop(1, "sh", "0 .. 1", "0", shift)
    return header, f"hs_{kind}", "any", fixed


def barrier(c: Ctx) -> Base:
    """The dissemination barrier (ceil(log2 p) steps), or a ring of flags (p - 1 steps)."""
    rng = c.rng
    header = [(0, "algorithm dissem : barrier"), (0, "param p : int where p >= 1"), (0, "chunks p")]
    if rng.random() < 0.7:
        seen = rng.choice(("{c for c in 0 .. p if (r - c) mod p < n}", "{(r - i) mod p for i in 0 .. min(n, p)}"))
        c.targets[c.TOP].append((0, f"fn seen(r, n) = {seen}"))

        def body(level: int, s: str) -> None:
            d = c.use(_site("dist", f"1 << {s}", (f"2 << {s}", f"(1 << {s}) + 1"), pure=True), level, s)
            c.add(level, f"let d = {d}")
            held = c.use(_site("held", "d", ("d + 1", "2 * d", "d - 1")), level, s)
            to = c.use(_site("to", "(rank + d) mod p", ("(rank + d + 1) mod p", "(rank - d) mod p", "rank + d")),
                       level, s)  # fmt: skip
            frm = c.use(_site("from", "(rank - d) mod p", ("(rank - d - 1) mod p", "(rank + d) mod p")), level, s)
            _pair(c, level, f"send seen(rank, {held}) to {to}", f"recv seen({frm}, d) from {frm} copy")

        c.phase_start("barrier")
        c.loop(1, c.f.var(), _steps(c, "0", "ceil_log2(p)"), "ceil_log2(p) - 1", body)
        return header, "dissemination_barrier", "any", ()

    sets = rng.random() < 0.5  # every flag seen so far, or only the newest (a ring allgather of the flags)

    def ring(level: int, s: str) -> None:
        to, frm = c.f.nxt(), c.f.prv()
        nxt = c.use(_site("to", to, ("(rank + 2) mod p", "(rank - 1) mod p"), stepfree=True, pure=True), level, s)
        if sets:
            n = c.use(_site("held", f"{s} + 1", (f"{s} + 2", f"{s}", "1"), pure=True), level, s)
            _pair(c, level, f"send {{(rank - i) mod p for i in 0 .. {n}}} to {nxt}",
                  f"recv {{(rank - 1 - i) mod p for i in 0 .. {s} + 1}} from {frm} copy")  # fmt: skip
        else:
            off = c.use(_site("newest", "0", ("1", "-1", "2"), const=True, stepfree=True, pure=True), level, s)
            _pair(c, level, f"send {c.f.mod(f'rank - {s} - {off}')} to {nxt}",
                  f"recv {c.f.mod(f'rank - {s} - 1')} from {frm} copy")  # fmt: skip

    c.phase_start("barrier")
    c.loop(1, c.f.var(), _steps(c, "0", "p - 1"), "p - 2", ring)
    return header, "ring_barrier", "any", ()


FAMILIES: dict[str, tuple[Callable[[Ctx], Base], ...]] = {
    "gather": (gather,),
    "scatter": (scatter,),
    "scan": (scan,),
    "barrier": (barrier,),
    "newcoll": (gather, scatter, scan, barrier),
}


def rooted_blocks(c: Ctx) -> Base:
    """A gather or a scatter (the mixed campaign's draw)."""
    return gather(c) if c.rng.random() < 0.5 else scatter(c)


def prefix_or_barrier(c: Ctx) -> Base:
    """A scan, an exscan or a barrier (the mixed campaign's draw)."""
    return scan(c) if c.rng.random() < 0.6 else barrier(c)


EXTRA = (rooted_blocks, prefix_or_barrier)  # drawn in the mixed campaign (`soundness_families.EXTRA`)


def make_program(seed: int, index: int, options: sg.Options) -> Generated:
    """Program ``index`` of campaign ``seed``: one of `FAMILIES`'s for ``options.family``, else
    `soundness_gen.make_program`'s."""
    import soundness_gen as sg

    only = FAMILIES.get(options.family)
    if only is None:
        return sg.make_program(seed, index, options)
    rng = sg.program_rng(seed, index)
    family = rng.choice(only)
    return soundness_programs.generate(rng, rng.random() < options.planted, family)


def run_program(index: int, seed: int, options: sg.Options) -> sg.Result:
    """`soundness_gen.run_program` with `make_program`."""
    import soundness_gen as sg

    program = make_program(seed, index, options)
    rng = random.Random(sg.program_rng(seed, index).random() + index)
    return sg.run_generated(program, rng, options, sg.Result(index, seed, program))
