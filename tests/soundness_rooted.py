"""Rooted programs for the soundness campaign with the root left free (`soundness_gen`, ``--family roots``):
binomial broadcasts and reduces whose instances take a different root at every p, so that the proof for
every root (`collc.verify.roots`: the schedule at root R is the base root's rotated) is judged at roots other
than the one it proved.  Planted faults may depend on the root (`ROOT_TRIGGERS`) or on the real rank, which a
rotation does not move with the root."""

from __future__ import annotations

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
