"""Mutation operators for .coll text, and the mutants of the example library (benchmarks/mutation_harness.py).

Every ``examples/*.coll`` program, and every ``examples/lib/*.coll`` file it
includes, is mutated *as text*, one mutation per mutant (header, ``param`` and
``include`` lines and comments are left alone).  Operators:

  int-literal      n -> n+1, n-1, 0, 2
  copy<->reduce    a receive's action
  chunk-{drop,add}-{send,recv,both}
                   ``X`` -> ``((X) | {}) - {c}`` / ``(X) | {c}``, c in {0, 1, p-1}, on a send, a receive,
                   or both a send and its nearest receive (an exchange's two halves)
  peer-offset      a peer ``P`` -> ``((P) + 1) mod p``, ``((P) - 1) mod p``, ``(P) ^ 1``; ``a + d`` /
                   ``a - d`` / ``a ^ d`` inside a peer -> ``d + 1``; ``ring_next`` <-> ``ring_prev``
  loop-order       ``reversed(R)`` -> ``R``, ``for .. in R`` -> ``reversed(R)``
  range-bound      ``lo .. hi`` -> ``lo .. (hi +- 1)``
  swap-stmts       two adjacent sibling statements;  swap-phases: two phases
  delete-stmt      a statement (``pass`` when it is alone);  duplicate-stmt: a statement twice
  comparison       ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``
  mod-div          ``mod`` -> ``%``, ``//``; ``%`` -> ``mod``, ``//``; ``//`` -> ``/``, ``%``; ``/`` -> ``//``
  arith-op         ``+`` <-> ``-``, ``<<`` <-> ``>>``, ``and`` <-> ``or``, ``min`` <-> ``max``
  negate-cond      ``if C:`` -> ``if not (C):``
  chunks-decl      ``chunks E`` -> ``(E) + 1``, ``2 * (E)``
  swap-sets        ``send A; recv B`` -> ``send B; recv A`` (a send and its nearest receive)
  swap-args        ``f(a, b)`` -> ``f(b, a)``
  step-structure   ``for step`` <-> ``for``, ``step:`` -> ``if true:``
"""

from __future__ import annotations

import difflib
import random
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# ---------------------------------------------------------------------------
# A small tokenizer for .coll text
# ---------------------------------------------------------------------------

_TOKEN = re.compile(
    r"(?P<comment>#[^\n]*)"
    r'|(?P<string>"[^"\n]*")'
    r"|(?P<cont>\\[ \t\f]*\r?\n)"
    r"|(?P<nl>\r?\n)"
    r"|(?P<ws>[ \t\f]+)"
    r"|(?P<num>0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\.\.|<=|>=|==|!=|<<|>>|//|\*\*|[-+*/%<>|&^~(){}\[\],:;=])"
)
_OPEN, _CLOSE = "([{", ")]}"
_EXCLUDED_LINES = ("algorithm", "param", "include")  # first words of lines never mutated


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str  # num | name | op | string | nl
    text: str
    start: int
    end: int
    line: int  # 1-based


def tokenize(text: str) -> list[Tok]:
    """Tokens of ``text`` (comments and blanks dropped, newlines kept); ValueError on a stray character."""
    toks: list[Tok] = []
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"line {line}: cannot tokenize {text[pos : pos + 10]!r}")
        kind = m.lastgroup or ""
        if kind in ("nl", "num", "name", "op", "string"):
            toks.append(Tok(kind, m.group(), m.start(), m.end(), line))
        line += m.group().count("\n")
        pos = m.end()
    return toks


def _match(toks: Sequence[Tok], i: int) -> int:
    """Index of the bracket closing the one opened at ``toks[i]``."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text in _OPEN:
            depth += 1
        elif toks[j].text in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"line {toks[i].line}: unbalanced {toks[i].text!r}")


def _scan(toks: Sequence[Tok], i: int, stops: frozenset[str]) -> int:
    """The index of the first token at bracket depth 0 from ``i`` on that is a newline or in ``stops``."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j]
        if depth == 0 and (t.kind == "nl" or t.text in stops):
            return j
        if t.text in _OPEN:
            depth += 1
        elif t.text in _CLOSE:
            depth -= 1
    return len(toks)


def _primary_end(toks: Sequence[Tok], i: int) -> int | None:
    """One past the primary expression starting at ``toks[i]`` (a literal, a name, a call, a bracket)."""
    if i >= len(toks):
        return None
    t = toks[i]
    if t.text in _OPEN:
        return _match(toks, i) + 1
    if t.kind == "num":
        return i + 1
    if t.kind == "name" and t.text not in ("not", "and", "or", "if", "else", "in", "for"):
        if i + 1 < len(toks) and toks[i + 1].text == "(":
            return _match(toks, i + 1) + 1
        return i + 1
    return None


def _is_binary(toks: Sequence[Tok], i: int) -> bool:
    """Whether the operator at ``toks[i]`` is binary (follows an operand)."""
    if i == 0:
        return False
    prev = toks[i - 1]
    if prev.text in _CLOSE:
        return True
    return prev.kind in ("num", "name") and prev.text not in ("and", "or", "not", "in", "if", "else", "return")


# ---------------------------------------------------------------------------
# Mutations of one file's text
# ---------------------------------------------------------------------------

Edit = tuple[int, int, str]  # replace text[start:end] with the string


@dataclass(frozen=True, slots=True)
class FileMutation:
    operator: str
    line: int
    description: str
    edits: tuple[Edit, ...]


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    out = text
    for start, end, repl in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + repl + out[end:]
    return out


@dataclass(frozen=True, slots=True)
class _Site:
    """A send's or receive's chunk expression (token range) and, for receives, the action token."""

    kind: str  # send | recv
    lo: int
    hi: int
    action: int | None
    decl: int  # index of the top-level declaration it belongs to


class _FileInfo:
    """The tokens of one file with what the mutation operators need: lines, sites, statements."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.lines = text.split("\n")
        first: dict[int, Tok] = {}
        for t in self.toks:
            if t.kind != "nl":
                first.setdefault(t.line, t)
        self.first = first
        self.excluded_lines = {ln for ln, t in first.items() if t.text in _EXCLUDED_LINES}
        self.indent = {ln: len(self.lines[ln - 1]) - len(self.lines[ln - 1].lstrip(" \t")) for ln in first}
        # top-level declaration index of every code line
        decl, self.decl_of = -1, {}
        for ln in sorted(first):
            if self.indent[ln] == 0:
                decl += 1
            self.decl_of[ln] = decl
        self.sends: list[_Site] = []
        self.recvs: list[_Site] = []
        self.peers: list[tuple[int, int]] = []  # token ranges of peer expressions
        self._find_sites()

    def ok(self, tok: Tok) -> bool:
        return tok.line not in self.excluded_lines

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        return self.toks[lo].start, self.toks[hi - 1].end

    def src(self, lo: int, hi: int) -> str:
        a, b = self.span(lo, hi)
        return self.text[a:b]

    def _find_sites(self) -> None:
        toks = self.toks
        for i, t in enumerate(toks):
            if t.kind != "name" or not self.ok(t):
                continue
            if t.text == "send":
                hi = _scan(toks, i + 1, frozenset({"to", ";"}))
                self.sends.append(_Site("send", i + 1, hi, None, self.decl_of[t.line]))
                if hi < len(toks) and toks[hi].text == "to":
                    self.peers.append((hi + 1, _scan(toks, hi + 1, frozenset())))
            elif t.text == "recv":
                hi = _scan(toks, i + 1, frozenset({"from", "copy", "reduce"}))
                action = hi
                if hi < len(toks) and toks[hi].text == "from":
                    action = _scan(toks, hi + 1, frozenset({"copy", "reduce"}))
                    self.peers.append((hi + 1, action))
                act = action if action < len(toks) and toks[action].text in ("copy", "reduce") else None
                self.recvs.append(_Site("recv", i + 1, hi, act, self.decl_of[t.line]))
            elif t.text == "exchange" and i + 1 < len(toks) and toks[i + 1].text == "with":
                self.peers.append((i + 2, _scan(toks, i + 2, frozenset({":"}))))

    def pairs(self) -> list[tuple[int, int]]:
        """(send index, recv index): every receive with the nearest send of the same declaration."""
        out: set[tuple[int, int]] = set()
        for r_index, recv in enumerate(self.recvs):
            line = self.toks[recv.lo].line
            near = [
                (abs(self.toks[snd.lo].line - line), s_index)
                for s_index, snd in enumerate(self.sends)
                if snd.decl == recv.decl
            ]
            if near:
                out.add((min(near)[1], r_index))
        return sorted(out)

    # ---- statements (inside phases, procs and fn blocks)
    def statements(self) -> list[tuple[int, int, int, int]]:
        """(first line, end line exclusive, indent, parent line) of every nested statement, in order.

        A statement runs from its line through its nested lines (and its elif/else clauses) up to its
        last code line; comment and blank lines after it are not part of it.
        """
        code = sorted(self.first)
        out = []
        for k, ln in enumerate(code):
            ind = self.indent[ln]
            if ind == 0 or self.first[ln].text in ("elif", "else") or ln in self.excluded_lines:
                continue
            last = ln
            for ln2 in code[k + 1 :]:
                ind2 = self.indent[ln2]
                if ind2 < ind or (ind2 == ind and self.first[ln2].text not in ("elif", "else")):
                    break
                last = ln2
            parent = next(x for x in reversed(code[:k]) if self.indent[x] < ind)
            out.append((ln, last + 1, ind, parent))
        return out

    def block_text(self, a: int, b: int) -> str:
        """Lines a .. b-1 (1-based), with a trailing newline when the file has one after them."""
        return "".join(line + "\n" for line in self.lines[a - 1 : b - 1])

    def line_offset(self, ln: int) -> int:
        return sum(len(line) + 1 for line in self.lines[: ln - 1])

    def second_word(self, ln: int) -> str:
        """The second name on line ``ln`` (a phase's name)."""
        words = [t.text for t in self.toks if t.line == ln and t.kind == "name"]
        return words[1] if len(words) > 1 else "?"


def _int_literals(fi: _FileInfo) -> Iterator[FileMutation]:
    for t in fi.toks:
        if t.kind != "num" or not fi.ok(t):
            continue
        v = int(t.text, 0)
        seen = {v}
        for nv in (v + 1, v - 1, 0, 2):
            if nv in seen:
                continue
            seen.add(nv)
            repl = str(nv) if nv >= 0 else f"({nv})"
            yield FileMutation("int-literal", t.line, f"{t.text} -> {repl}", ((t.start, t.end, repl),))


def _actions(fi: _FileInfo) -> Iterator[FileMutation]:
    for site in fi.recvs:
        if site.action is None:
            continue
        t = fi.toks[site.action]
        other = "reduce" if t.text == "copy" else "copy"
        yield FileMutation("copy<->reduce", t.line, f"{t.text} -> {other}", ((t.start, t.end, other),))


CHUNK_IDS: tuple[str, ...] = ("0", "1", "p - 1")  # the chunk dropped or added


def _chunk_edits(fi: _FileInfo, site: _Site, drop: bool, c: str) -> Edit:
    a, b = fi.span(site.lo, site.hi)
    x = fi.text[a:b]
    return (a, b, f"(({x}) | {{}}) - {{{c}}}" if drop else f"({x}) | {{{c}}}")


def _chunks(fi: _FileInfo) -> Iterator[FileMutation]:
    pairs = fi.pairs()
    for drop in (True, False):
        word = "drop" if drop else "add"
        for c in CHUNK_IDS:
            for side, sites in (("send", fi.sends), ("recv", fi.recvs)):
                for site in sites:
                    if site.hi <= site.lo:
                        continue
                    edit = _chunk_edits(fi, site, drop, c)
                    line = fi.toks[site.lo].line
                    desc = f"{side} {fi.src(site.lo, site.hi)} -> {edit[2]}"
                    yield FileMutation(f"chunk-{word}-{side}", line, desc, (edit,))
            for s_index, r_index in sorted(pairs):
                s, r = fi.sends[s_index], fi.recvs[r_index]
                if s.hi <= s.lo or r.hi <= r.lo:
                    continue
                edits = (_chunk_edits(fi, s, drop, c), _chunk_edits(fi, r, drop, c))
                line = fi.toks[s.lo].line
                desc = f"send {fi.src(s.lo, s.hi)} and recv {fi.src(r.lo, r.hi)}: {word} {{{c}}} on both"
                yield FileMutation(f"chunk-{word}-both", line, desc, edits)


def _peers(fi: _FileInfo) -> Iterator[FileMutation]:
    toks = fi.toks
    for lo, hi in fi.peers:
        if hi <= lo:
            continue
        a, b = fi.span(lo, hi)
        x = fi.text[a:b]
        line = toks[lo].line
        for repl in (f"(({x}) + 1) mod p", f"(({x}) - 1) mod p", f"({x}) ^ 1"):
            yield FileMutation("peer-offset", line, f"peer {x} -> {repl}", ((a, b, repl),))
        for i in range(lo, hi):
            if toks[i].text in ("+", "-", "^") and _is_binary(toks, i):
                end = _primary_end(toks, i + 1)
                if end is None or end > hi:
                    continue
                c, d = fi.span(i + 1, end)
                operand = fi.text[c:d]
                desc = f"peer {x}: {toks[i].text} {operand} -> {toks[i].text} ({operand} + 1)"
                yield FileMutation("peer-offset", line, desc, ((c, d, f"({operand} + 1)"),))
    for t in toks:
        if t.text in ("ring_next", "ring_prev") and fi.ok(t):
            other = "ring_prev" if t.text == "ring_next" else "ring_next"
            yield FileMutation("peer-offset", t.line, f"{t.text} -> {other}", ((t.start, t.end, other),))


def _order(fi: _FileInfo) -> Iterator[FileMutation]:
    toks = fi.toks
    for i, t in enumerate(toks):
        if not fi.ok(t):
            continue
        if t.text == "reversed" and i + 1 < len(toks) and toks[i + 1].text == "(":
            j = _match(toks, i + 1)
            inner = fi.src(i + 2, j)
            a, b = t.start, toks[j].end
            yield FileMutation("loop-order", t.line, f"{fi.text[a:b]} -> {inner}", ((a, b, inner),))
        elif t.text == "for" and fi.first.get(t.line) is t:
            k = i + 1
            while k < len(toks) and toks[k].text != "in":
                k += 1
            end = _scan(toks, k + 1, frozenset({":"}))
            if end <= k + 1 or toks[k + 1].text == "reversed":
                continue
            a, b = fi.span(k + 1, end)
            x = fi.text[a:b]
            yield FileMutation("loop-order", t.line, f"in {x} -> in reversed({x})", ((a, b, f"reversed({x})"),))
    stmts = fi.statements()
    for x, (a, b, ind, parent) in enumerate(stmts):
        nxt = next((t for t in stmts[x + 1 :] if t[2] == ind and t[3] == parent), None)
        if nxt is None:
            continue
        c, d = nxt[0], nxt[1]
        first, second = fi.block_text(a, b), fi.block_text(c, d)
        oa, oc = fi.line_offset(a), fi.line_offset(c)
        edits = ((oa, oa + len(first), second), (oc, oc + len(second), first))
        yield FileMutation("swap-stmts", a, f"swap lines {a}-{b - 1} and {c}-{d - 1}", edits)
    # phases
    code = sorted(fi.first)
    phases: list[tuple[int, int]] = []
    for k, ln in enumerate(code):
        if fi.indent[ln] == 0 and fi.first[ln].text == "phase":
            end = next((ln2 for ln2 in code[k + 1 :] if fi.indent[ln2] == 0), len(fi.lines) + 1)
            phases.append((ln, end))
    for x in range(len(phases)):
        for y in range(x + 1, len(phases)):
            (a, b), (c, d) = phases[x], phases[y]
            pa, pb = fi.block_text(a, b), fi.block_text(c, d)
            oa, oc = fi.line_offset(a), fi.line_offset(c)
            edits = ((oa, oa + len(pa), pb), (oc, oc + len(pb), pa))
            name_a, name_b = fi.second_word(a), fi.second_word(c)
            yield FileMutation("swap-phases", a, f"swap phases {name_a} and {name_b}", edits)


def _range_bounds(fi: _FileInfo) -> Iterator[FileMutation]:
    """``lo .. hi`` -> ``lo .. (hi + 1)`` / ``(hi - 1)``, on the first primary of ``hi``."""
    toks = fi.toks
    for i, t in enumerate(toks):
        if t.text != ".." or not fi.ok(t):
            continue
        end = _primary_end(toks, i + 1)
        if end is None:
            continue
        a, b = fi.span(i + 1, end)
        x = fi.text[a:b]
        for d in ("+ 1", "- 1"):
            yield FileMutation("range-bound", t.line, f".. {x} -> .. ({x} {d})", ((a, b, f"({x} {d})"),))


def _delete(fi: _FileInfo) -> Iterator[FileMutation]:
    stmts = fi.statements()
    for a, b, ind, parent in stmts:
        siblings = sum(1 for t in stmts if t[2] == ind and t[3] == parent)
        off = fi.line_offset(a)
        body = fi.block_text(a, b)
        repl = "" if siblings > 1 else " " * ind + "pass\n"
        yield FileMutation("delete-stmt", a, f"delete lines {a}-{b - 1}", ((off, off + len(body), repl),))


def _duplicate(fi: _FileInfo) -> Iterator[FileMutation]:
    for a, b, _, _ in fi.statements():
        off = fi.line_offset(a)
        body = fi.block_text(a, b)
        yield FileMutation("duplicate-stmt", a, f"duplicate lines {a}-{b - 1}", ((off, off, body),))


_COMPARE = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_DIVMOD = {"mod": ("%", "//"), "%": ("mod", "//"), "//": ("/", "%"), "/": ("//",)}
_ARITH = {"+": ("-",), "-": ("+",), "<<": (">>",), ">>": ("<<",), "and": ("or",), "or": ("and",)}


def _operators(fi: _FileInfo) -> Iterator[FileMutation]:
    toks = fi.toks
    for i, t in enumerate(toks):
        if not fi.ok(t):
            continue
        if t.kind == "op" and t.text in _COMPARE:
            yield FileMutation(
                "comparison", t.line, f"{t.text} -> {_COMPARE[t.text]}", ((t.start, t.end, _COMPARE[t.text]),)
            )
        if t.text in _DIVMOD and (t.kind == "op" or t.text == "mod"):
            for other in _DIVMOD[t.text]:
                repl = f" {other} " if other == "mod" else other
                yield FileMutation("mod-div", t.line, f"{t.text} -> {other}", ((t.start, t.end, repl),))
        if t.text in _ARITH and (t.kind == "op" or t.text in ("and", "or")):
            if t.text in ("+", "-") and not _is_binary(toks, i):
                continue
            for other in _ARITH[t.text]:
                yield FileMutation("arith-op", t.line, f"{t.text} -> {other}", ((t.start, t.end, other),))
        if t.text in ("min", "max") and i + 1 < len(toks) and toks[i + 1].text == "(":
            other = "max" if t.text == "min" else "min"
            yield FileMutation("arith-op", t.line, f"{t.text} -> {other}", ((t.start, t.end, other),))


def _conditions(fi: _FileInfo) -> Iterator[FileMutation]:
    toks = fi.toks
    for i, t in enumerate(toks):
        if t.text in ("if", "elif") and fi.first.get(t.line) is t and fi.ok(t):
            end = _scan(toks, i + 1, frozenset({":"}))
            if end <= i + 1:
                continue
            a, b = fi.span(i + 1, end)
            x = fi.text[a:b]
            yield FileMutation("negate-cond", t.line, f"{t.text} {x} -> {t.text} not ({x})", ((a, b, f"not ({x})"),))


def _swap_sets(fi: _FileInfo) -> Iterator[FileMutation]:
    """Exchange the chunk sets of a send and its receive (``send A; recv B`` -> ``send B; recv A``)."""
    for s_index, r_index in fi.pairs():
        snd, rcv = fi.sends[s_index], fi.recvs[r_index]
        if snd.hi <= snd.lo or rcv.hi <= rcv.lo:
            continue
        (a, b), (c, d) = fi.span(snd.lo, snd.hi), fi.span(rcv.lo, rcv.hi)
        x, y = fi.text[a:b], fi.text[c:d]
        if x != y:
            desc = f"send {x} <-> recv {y}"
            yield FileMutation("swap-sets", fi.toks[snd.lo].line, desc, ((a, b, y), (c, d, x)))


def _swap_args(fi: _FileInfo) -> Iterator[FileMutation]:
    """``f(a, b)`` -> ``f(b, a)`` for adjacent arguments of every call."""
    toks = fi.toks
    for i, t in enumerate(toks):
        if t.kind != "name" or not fi.ok(t) or i + 1 >= len(toks) or toks[i + 1].text != "(":
            continue
        if i > 0 and toks[i - 1].text in ("fn", "proc"):
            continue  # a definition, not a call
        close = _match(toks, i + 1)
        args: list[tuple[int, int]] = []
        lo = i + 2
        while lo < close:
            hi = _scan(toks, lo, frozenset({",", ")"}))
            hi = min(hi, close)
            args.append((lo, hi))
            lo = hi + 1
        for k in range(len(args) - 1):
            (a0, a1), (b0, b1) = args[k], args[k + 1]
            if a1 <= a0 or b1 <= b0:
                continue
            (a, b), (c, d) = fi.span(a0, a1), fi.span(b0, b1)
            x, y = fi.text[a:b], fi.text[c:d]
            if x != y:
                desc = f"{t.text}(.. {x}, {y} ..) -> ({y}, {x})"
                yield FileMutation("swap-args", t.line, desc, ((a, b, y), (c, d, x)))


def _step_structure(fi: _FileInfo) -> Iterator[FileMutation]:
    """``for step s in`` <-> ``for s in``, and a ``step:`` block -> ``if true:`` (its ops in separate steps)."""
    toks = fi.toks
    for i, t in enumerate(toks):
        if not fi.ok(t) or fi.first.get(t.line) is not t or fi.indent.get(t.line, 0) == 0:
            continue
        if t.text == "for" and i + 1 < len(toks):
            nxt = toks[i + 1]
            if nxt.text == "step":
                yield FileMutation("step-structure", t.line, "for step -> for", ((t.start, nxt.end, "for"),))
            else:
                yield FileMutation("step-structure", t.line, "for -> for step", ((t.start, t.end, "for step"),))
        elif t.text == "step" and i + 1 < len(toks) and toks[i + 1].text == ":":
            yield FileMutation("step-structure", t.line, "step: -> if true:", ((t.start, t.end, "if true"),))


def _chunks_decl(fi: _FileInfo) -> Iterator[FileMutation]:
    toks = fi.toks
    for i, t in enumerate(toks):
        if t.text == "chunks" and fi.first.get(t.line) is t:
            end = _scan(toks, i + 1, frozenset())
            if end == i + 2 and toks[i + 1].kind == "num":
                continue  # a literal: the int-literal operator covers it
            a, b = fi.span(i + 1, end)
            x = fi.text[a:b]
            for repl in (f"({x}) + 1", f"2 * ({x})"):
                yield FileMutation("chunks-decl", t.line, f"chunks {x} -> chunks {repl}", ((a, b, repl),))


GENERATORS = (
    _int_literals,
    _actions,
    _chunks,
    _peers,
    _order,
    _range_bounds,
    _delete,
    _duplicate,
    _operators,
    _conditions,
    _chunks_decl,
    _swap_sets,
    _swap_args,
    _step_structure,
)


def file_mutations(text: str) -> list[FileMutation]:
    """Every single-point mutation of a file's text, in a fixed order."""
    fi = _FileInfo(text)
    out: list[FileMutation] = []
    for gen in GENERATORS:
        out.extend(gen(fi))
    return out


# ---------------------------------------------------------------------------
# Mutants of the example library
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mutant:
    """One mutated program: ``file`` (the program itself or a library file it includes) rewritten."""

    key: str  # program:file:line:index, stable across runs
    program: str  # examples/NAME.coll, relative to the repository root
    file: str  # the mutated file, relative to the repository root
    operator: str
    line: int
    description: str
    text: str  # the mutated text of ``file``


def _includes(text: str) -> list[str]:
    return re.findall(r'^\s*include\s+"([^"]+)"', text, flags=re.M)


def _rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def generate_mutants(examples: Path = EXAMPLES) -> list[Mutant]:
    """Every distinct mutant of every example program and of the library files it includes."""
    mutants: list[Mutant] = []
    seen: set[tuple[str, str, str]] = set()
    cache: dict[Path, list[FileMutation]] = {}
    for prog in sorted(examples.glob("*.coll")):
        text = prog.read_text()
        files = [prog] + [(prog.parent / inc).resolve() for inc in _includes(text)]
        for path in files:
            original = path.read_text()
            muts = cache.get(path)
            if muts is None:
                muts = cache[path] = file_mutations(original)
            for index, fm in enumerate(muts):
                new = apply_edits(original, fm.edits)
                ident = (_rel(prog), _rel(path), new)
                if new == original or ident in seen:
                    continue
                seen.add(ident)
                key = f"{prog.stem}:{path.name}:{fm.line}:{index}"
                mutants.append(Mutant(key, _rel(prog), _rel(path), fm.operator, fm.line, fm.description, new))
    return mutants


def select(mutants: Sequence[Mutant], limit: int | None, seed: int) -> list[Mutant]:
    """All mutants, or ``limit`` of them drawn round-robin over the operators (deterministic in ``seed``)."""
    if limit is None or limit >= len(mutants):
        return list(mutants)
    rng = random.Random(seed)
    groups: dict[str, list[Mutant]] = defaultdict(list)
    for m in mutants:
        groups[m.operator].append(m)
    for g in groups.values():
        rng.shuffle(g)
    chosen: list[Mutant] = []
    order = sorted(groups)
    while len(chosen) < limit:
        for op in order:
            if groups[op] and len(chosen) < limit:
                chosen.append(groups[op].pop())
    return chosen


def diff(mutant: Mutant) -> str:
    original = (ROOT / mutant.file).read_text().splitlines(keepends=True)
    new = mutant.text.splitlines(keepends=True)
    return "".join(difflib.unified_diff(original, new, mutant.file, mutant.file + " (mutant)", n=1))
