"""More base algorithms for the soundness campaign (`soundness_gen`), beside `soundness_programs`' own:

* ``rooted`` (``--family roots``): binomial broadcasts and reduces with the root left free, whose instances
  take a different root at every p, so that the proof for every root (`collc.verify.roots`: the schedule at
  root R is the base root's rotated) is judged at roots other than the one it proved.  Planted faults may
  depend on the root (`soundness_programs.ROOT_TRIGGERS`) or on the real rank, which a rotation does not move
  with the root;
* ``rabenseifner``: recursive halving and doubling over windows ``r // (q >> s)`` and their set difference;
* ``bruck_alltoall``: Bruck's alltoall, blocks chosen by a condition on ``c // p`` and ``c mod p``;
* gather, scatter, scan, exscan and barrier (`soundness_newcoll`, ``--family gather|scatter|scan|barrier|newcoll``).
"""

from __future__ import annotations

from collections.abc import Callable

from soundness_newcoll import EXTRA as NEWCOLL
from soundness_programs import Base, Ctx, Site, _steps


def rooted(c: Ctx) -> Base:
    """A binomial broadcast or reduce at the root ``root`` (default 0), not fixed by the campaign."""
    rng = c.rng
    reduce = rng.random() < 0.5
    coll = "reduce" if reduce else "broadcast"
    header = [(0, f"algorithm binomial_{coll} : {coll}"), (0, "param p : int where p >= 1"),
              (0, "param root : int = 0 where 0 <= root < p"), (0, "chunks 1")]  # fmt: skip
    c.targets[c.TOP] += [(0, "fn vrank(r) = (r - root) mod p"), (0, "fn real(v) = (v + root) mod p")]

    def broadcast(level: int, s: str) -> None:
        d = c.use(Site("dist", f"1 << {s}", (f"2 << {s}", f"(1 << {s}) + 1"), None, False, False, True), level, s)
        c.add(level, f"let d = {d}")
        c.add(level, "let v = vrank(rank)")
        to = c.use(Site("to", "real(v + d)", ("real(v + d + 1)", "(v + d) mod p", "real(v + 2 * d)"), None, False,
                        False, False), level, s)  # fmt: skip
        frm = c.use(Site("from", "real(v - d)", ("(v - d) mod p", "real(v - d - 1)"), None, False, False, False),
                    level, s)  # fmt: skip
        c.add(level, "if v < d and v + d < p:")
        c.add(level + 1, f"send 0 to {to}")
        c.add(level, "elif d <= v < 2 * d:")
        c.add(level + 1, f"recv 0 from {frm} copy")

    def reduction(level: int, s: str) -> None:
        d = c.use(Site("dist", f"1 << {s}", (f"2 << {s}", f"(1 << {s}) + 1"), None, False, False, True), level, s)
        c.add(level, f"let d = {d}")
        c.add(level, "let v = vrank(rank)")
        to = c.use(Site("to", "real(v - d)", ("(v - d) mod p", "real(v - d + 1)", "real(v - 2 * d)"), None, False,
                        False, False), level, s)  # fmt: skip
        frm = c.use(Site("from", "real(v + d)", ("(v + d) mod p", "real(v + d + 1)"), None, False, False, False),
                    level, s)  # fmt: skip
        c.add(level, "if v % (2 * d) == d:")
        c.add(level + 1, f"send 0 to {to}")
        c.add(level, "elif v % (2 * d) == 0 and v + d < p:")
        c.add(level + 1, f"recv 0 from {frm} reduce")

    c.phase_start(coll)
    c.loop(1, c.f.var(), _steps(c, "0", "ceil_log2(p)"), "ceil_log2(p) - 1", reduction if reduce else broadcast)
    return header, f"binomial_{coll}_roots", "rooted", ()


def rabenseifner(c: Ctx) -> Base:
    """Rabenseifner's allreduce for any p: fold onto q = pow2_floor(p), halve, double, unfold."""
    header = [(0, "algorithm rabenseifner : allreduce"), (0, "param p : int where p >= 1"), (0, "chunks q")]
    c.targets[c.TOP] += [(0, "let q = pow2_floor(p)"), (0, "let n = log2(q)"),
                         (0, "fn window(r, s) = (r // (q >> s)) * (q >> s) .. (r // (q >> s) + 1) * (q >> s)"),
                         (0, "fn keep(r, s) = window(r, s + 1)"),
                         (0, "fn give(r, s) = window(r, s) - keep(r, s)")]  # fmt: skip
    with c.into(c.defs()):
        for name, first, second in (
            ("fold", "send 0 .. q to rank - q", "recv 0 .. q from rank + q reduce"),
            ("unfold", "recv 0 .. q from rank - q copy", "send 0 .. q to rank + q"),
        ):
            c.add(0, f"proc {name}():")
            c.add(1, "step:")
            c.add(2, "if rank >= q:")
            c.add(3, first)
            c.add(2, "elif rank < p - q:")
            c.add(3, second)

    def part(reduce: bool) -> Callable[[int, str], None]:
        def body(level: int, s: str) -> None:
            peer = c.use(Site("peer" if reduce else "peer_ag", f"rank ^ (q >> ({s} + 1))",
                              (f"rank ^ (q >> {s})", f"(rank + (q >> ({s} + 1))) mod q"), None, False, False, True),
                         level, s)  # fmt: skip
            mine, theirs = ("give", "keep") if reduce else ("keep", "give")
            sent = c.use(Site("sent" if reduce else "sent_ag", f"{mine}(rank, {s})", (f"{theirs}(rank, {s})",
                              f"window(rank, {s})"), None, False, False, True), level, s)  # fmt: skip
            c.add(level, "if rank < q:")
            action = "reduce" if reduce else "copy"
            c.add(level + 1, f"exchange with {peer}: send {sent}; recv {theirs}(rank, {s}) {action}")

        return body

    c.phase_start("fold")
    c.add(1, "do fold()")
    c.phase_start("reduce_scatter")
    c.loop(1, c.f.var(), _steps(c, "0", "n"), "n - 1", part(True))
    c.phase_start("allgather")
    c.loop(1, c.f.var(), "reversed(0 .. n)", "0", part(False))
    c.phase_start("unfold")
    c.add(1, "do unfold()")
    return header, "rabenseifner", "any", ()


def bruck_alltoall(c: Ctx) -> Base:
    """Bruck's alltoall: at step k a block at distance t from its destination moves by 2^k when bit k of t is
    set; the blocks a rank holds and sends are comprehensions over c // p and c mod p."""
    header = [(0, "algorithm bruck_alltoall : alltoall"), (0, "param p : int where p >= 1"), (0, "chunks p * p")]
    c.targets[c.TOP] += [(0, "fn dist(c) = (c mod p - c // p) mod p"),
                         (0, "fn at(c, k) = (c // p + dist(c) mod (1 << k)) mod p"),
                         (0, "fn moves(c, k) = (dist(c) >> k) mod 2 == 1")]  # fmt: skip

    def body(level: int, k: str) -> None:
        d = c.use(Site("dist", f"1 << {k}", (f"2 << {k}", f"(1 << {k}) + 1"), None, False, False, True), level, k)
        c.add(level, f"let d = {d}")
        to = c.use(Site("to", "(rank + d) mod p", ("(rank + d + 1) mod p", "(rank - d) mod p"), None, False, False,
                        False), level, k)  # fmt: skip
        frm = c.use(Site("from", "(rank - d) mod p", ("(rank - d - 1) mod p", "(rank + d) mod p"), None, False,
                         False, False), level, k)  # fmt: skip
        c.add(level, f"send {{c for c in 0 .. p * p if at(c, {k}) == rank and moves(c, {k})}} to {to}")
        c.add(level, f"recv {{c for c in 0 .. p * p if at(c, {k}) == {frm} and moves(c, {k})}} from {frm} copy")

    c.phase_start("alltoall")
    c.loop(1, c.f.var(), _steps(c, "0", "ceil_log2(p)"), "ceil_log2(p) - 1", body)
    return header, "bruck_alltoall", "a2a", ()


EXTRA = (rooted, rabenseifner, bruck_alltoall, *NEWCOLL)  # drawn now and then in the mixed campaign too
