"""Differential testing of the verifier against the local executor, on mutants of the example library.

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

Each mutant is elaborated for a few parameter values (p in {2, 3, 4, 5, 6, 8}
as the *original* program allows, roots 0, p // 2 and p - 1 when it declares a
root, k = 2 at p = 3 and 4 when it declares k), and the verifier's verdict
(``check(schedule).ok``) is compared with the local executor's outcome on random
data, distinct per rank, with every chunk at least 3 elements long (uneven sizes):

* verifier accepts, executor right (int64 sum and float64 max)  -> agree
* verifier rejects, executor wrong                              -> agree
* verifier accepts, executor wrong                              -> FALSE ACCEPT
* verifier rejects with a structural, matching or hazard finding the executor
  does not model (HAZARD_CODES), executor right                 -> rejected for a hazard (agreement)
* verifier rejects on data flow only (postcondition, double count, lost data),
  executor right, and still right on two more runs (float64 sum,
  int64 sum with values near 2**40)                             -> FALSE REJECT

Mutants that do not parse or elaborate (`collc.CollError`) are counted as
"bad input" per instance and take no part in the agreement rate.  Any other
exception raised by collc is a "crash" (a collc bug) and is listed.  A false
accept whose schedule reduces a chunk twice from the same peer in one step is
tagged with the known collc bug `DUPLICATE_REDUCE_BUG`.

    python benchmarks/mutation_harness.py                    # every mutant, 2 workers
    python benchmarks/mutation_harness.py --limit 200 --seed 7 --jobs 1
    python benchmarks/mutation_harness.py --ranks 7,9,12,16  # other rank counts
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import multiprocessing
import os
import platform
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import numpy as np

from collc.backends import local
from collc.diagnostics import CollError
from collc.elaborate import elaborate
from collc.frontend.program import Program, parse_program
from collc.ir import Action, ChunkSet, Collective, OpKind, ParamValue, Schedule
from collc.verify import check as check_module
from collc.verify.check import CheckReport, check

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
P_VALUES: tuple[int, ...] = (2, 3, 4, 5, 6, 8)
EXTRA_PARAM_P: tuple[int, ...] = (3, 4)  # p values at which a declared extra int parameter (k) also gets 2
MUTANT_TIMEOUT_S = 60

# ---------------------------------------------------------------------------
# Finding codes: which rejections are hazards the executor does not model
# ---------------------------------------------------------------------------

# Findings about the data a rank ends with: the executor sees these on random data.
DATA_CODES: frozenset[str] = frozenset({"postcondition", "double-count", "lost-data"})
# Structural, matching and hazard findings (the brief's list, plus the ill-formed-schedule codes).
LISTED_HAZARD_CODES: frozenset[str] = frozenset(
    {
        "layout",
        "root-out-of-range",
        "rank-out-of-range",
        "peer-out-of-range",
        "peer-is-self",
        "chunk-out-of-range",
        "recv-without-action",
        "send-with-action",
        "unmatched-send",
        "unmatched-recv",
        "duplicate-transfer",
        "write-conflict",
        "send-not-held",
        "reduce-into-empty",
    }
)
_HAZARD_WORDS = re.compile(r"deadlock|hazard|race|cycle|conflict|unmatched|blocking")


def classify_codes(codes: Iterable[str]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(hazard, data, unclassified) codes among ``codes``; unclassified ones are treated as data codes."""
    hazard, data, other = set(), set(), set()
    for code in codes:
        if code in LISTED_HAZARD_CODES or _HAZARD_WORDS.search(code):
            hazard.add(code)
        elif code in DATA_CODES:
            data.add(code)
        else:
            other.add(code)
    return frozenset(hazard), frozenset(data), frozenset(other)


HAZARD_CODES, DATA_CODES_NOW, UNCLASSIFIED_CODES = classify_codes(check_module.CODES)

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


# ---------------------------------------------------------------------------
# Parameter values
# ---------------------------------------------------------------------------

Params = dict[str, ParamValue]


def candidate_params(program: Program, p_values: Sequence[int] = P_VALUES) -> list[Params]:
    """p in ``p_values``; roots 0, p // 2 and p - 1 when declared; another int parameter = 2 at p in (3, 4)."""
    names = [p.name for p in program.params]
    extras = [p.name for p in program.params if p.name not in ("p", "root") and p.type == "int"]
    out: list[Params] = []
    for p in p_values:
        roots = sorted({0, p // 2, p - 1}) if "root" in names else [None]
        for root in roots:
            params: Params = {"p": p}
            if root is not None:
                params["root"] = root
            out.append(params)
        if p in EXTRA_PARAM_P:
            for name in extras:
                out.append({"p": p, name: 2})
    return out


def count_for(schedule: Schedule) -> int:
    """An element count that gives every chunk at least 3 elements, in uneven sizes where it can."""
    n, p = schedule.nchunks, schedule.nranks
    if schedule.collective is Collective.ALLTOALL:
        k = max(1, n // (p * p))
        return p * (3 * k + max(1, k // 2))
    return 3 * n + max(1, n // 2)


# ---------------------------------------------------------------------------
# Running one instance
# ---------------------------------------------------------------------------

AGREE_ACCEPT = "agree-accept"
AGREE_REJECT = "agree-reject"
HAZARD = "hazard-reject"
FALSE_ACCEPT = "FALSE-ACCEPT"
FALSE_REJECT = "FALSE-REJECT"
BAD_INPUT = "bad-input"
CRASH = "crash"
TIMEOUT = "timeout"
CATEGORIES = (AGREE_ACCEPT, AGREE_REJECT, HAZARD, FALSE_ACCEPT, FALSE_REJECT, BAD_INPUT, CRASH, TIMEOUT)


@dataclass(frozen=True, slots=True)
class Outcome:
    params: Params
    category: str
    wrong: int = 0  # wrong elements found by the executor (-1: the executor refused the schedule)
    codes: tuple[str, ...] = ()
    detail: str = ""
    retried: bool = False  # the data-flow rejection was confirmed only by the extra runs
    same: bool = False  # the schedule is the original program's (same ops, chunks and root)
    known: str = ""  # for a false accept: the known collc bug that explains it, if any


@dataclass(slots=True)
class MutantResult:
    mutant: Mutant
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0


class _Timeout(BaseException):
    """Raised by SIGALRM: a mutant ran too long (a BaseException so that collc cannot swallow it)."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout()


def _run(schedule: Schedule, count: int, dtype: str, op: str, seed: int) -> int:
    return local.run(schedule, count, dtype=dtype, op=op, seed=seed).wrong


def _run_large_ints(schedule: Schedule, count: int, seed: int) -> int:
    """int64 sum with values up to 2**40 in magnitude (no cancellation, no wrapping for p <= 2**20)."""
    inputs = local.make_inputs(schedule, count, "int64", seed, op="sum")
    held = inputs != local.INT_POISON
    rng = np.random.default_rng(seed ^ 0xB16)
    inputs[held] = rng.integers(1 << 39, 1 << 40, size=int(held.sum()), dtype=np.int64) * rng.choice(
        np.array([-1, 1], dtype=np.int64), size=int(held.sum())
    )
    buffers = inputs.copy()
    local.execute(local.plan(schedule, count), buffers, "sum")
    values, mask = local.expected(schedule, inputs, "sum")
    return local.count_wrong(
        buffers, values, mask, "int64", "sum", schedule.nranks, reduces=schedule.collective.reduces
    )


def executor_wrong(schedule: Schedule, count: int, seed: int, *, extra: bool = False) -> tuple[int, str]:
    """Wrong elements over the primary runs (int64 sum, float64 max), or the two extra runs; -1 if refused."""
    runs: tuple[Callable[[], int], ...]
    if extra:
        runs = (
            lambda: _run(schedule, count, "float64", "sum", seed + 2),
            lambda: _run_large_ints(schedule, count, seed + 3),
        )
    else:
        runs = (
            lambda: _run(schedule, count, "int64", "sum", seed),
            lambda: _run(schedule, count, "float64", "max", seed + 1),
        )
    total = 0
    for run in runs:
        try:
            total += run()
        except ValueError as err:  # the executor refuses an ill-formed schedule
            return -1, str(err)
    return total, ""


def instance_seed(mutant_key: str, params: Params, seed: int) -> int:
    return (zlib.crc32(f"{mutant_key}|{sorted(params.items())}".encode()) ^ (seed * 0x9E3779B1)) & 0x7FFFFFFF


DUPLICATE_REDUCE_BUG = "duplicate-reduce"
"""Known collc bug: two receive ops of one rank from one peer in one step that both reduce the same chunk.
The verifier merges a step's receives per (src, dst) pair into one set, so it counts the chunk once; the
local executor applies every receive op, so it reduces the chunk twice (a double count) -- and the
verifier accepts the schedule."""


def duplicate_reduces(schedule: Schedule) -> list[str]:
    """Where a rank reduces a chunk received from the same peer twice in one step (see DUPLICATE_REDUCE_BUG)."""
    out = []
    for st in schedule.steps:
        seen: dict[tuple[int, int], int] = {}
        for op in st.ops:
            if op.kind is not OpKind.RECV or op.action is not Action.REDUCE:
                continue
            key = (op.rank, op.peer)
            twice = seen.get(key, 0) & op.chunks.bits
            if twice:
                out.append(f"step {st.index}: rank {op.rank} from rank {op.peer}, chunks {ChunkSet(twice)}")
            seen[key] = seen.get(key, 0) | op.chunks.bits
    return out


def judge(schedule: Schedule, seed: int, verifier: Callable[[Schedule], CheckReport] = check) -> Outcome:
    """Compare the verifier with the executor on one elaborated schedule."""
    params: Params = dict(schedule.params)
    report = verifier(schedule)
    codes = tuple(sorted({f.code for f in report.findings}))
    count = count_for(schedule)
    wrong, refused = executor_wrong(schedule, count, seed)
    if report.ok:
        if wrong == 0:
            return Outcome(params, AGREE_ACCEPT)
        detail = refused or f"{wrong} wrong elements (count={count}, int64 sum + float64 max, seed={seed})"
        dups = duplicate_reduces(schedule)
        known = ""
        if dups:
            known = DUPLICATE_REDUCE_BUG
            detail += f"; duplicate reduces: {'; '.join(dups[:3])}"
        return Outcome(params, FALSE_ACCEPT, wrong, codes, detail, known=known)
    if wrong != 0:
        return Outcome(params, AGREE_REJECT, wrong, codes)
    hazard, _, _ = classify_codes(codes)
    if hazard:
        return Outcome(params, HAZARD, 0, codes)
    wrong2, refused2 = executor_wrong(schedule, count, seed, extra=True)
    if wrong2 != 0:
        return Outcome(params, AGREE_REJECT, wrong2, codes, refused2, retried=True)
    detail = "; ".join(f"{f.code}: {f.message}" for f in report.findings[:3])
    return Outcome(params, FALSE_REJECT, 0, codes, detail)


# ---------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------

_WORKDIR: Path | None = None
_SEED = 0
_P_VALUES: tuple[int, ...] = P_VALUES


def _init_worker(workdir: str, seed: int, p_values: tuple[int, ...]) -> None:
    global _WORKDIR, _SEED, _P_VALUES
    _WORKDIR = Path(workdir) / f"w{os.getpid()}"
    _SEED = seed
    if p_values != _P_VALUES:
        _P_VALUES = p_values
        _PARAMS_CACHE.clear()
        _ORIGINALS.clear()
    if not _WORKDIR.exists():
        shutil.copytree(EXAMPLES, _WORKDIR / "examples")


def _parse(mutant: Mutant) -> Program:
    """Parse the mutant; a mutated library file is written into this worker's copy of examples/."""
    assert _WORKDIR is not None
    prog_path = ROOT / mutant.program
    if mutant.file == mutant.program:
        return parse_program(mutant.text, str(prog_path))
    copy = _WORKDIR / mutant.program
    lib = _WORKDIR / mutant.file
    original = (ROOT / mutant.file).read_text()
    lib.write_text(mutant.text)
    try:
        return parse_program(prog_path.read_text(), str(copy))
    finally:
        lib.write_text(original)


_PARAMS_CACHE: dict[str, list[Params]] = {}
_ORIGINALS: dict[tuple[str, str], object] = {}


def signature(schedule: Schedule) -> object:
    """The schedule without source locations: what the verifier and the executor see."""
    steps = tuple(
        tuple(sorted((op.rank, op.kind.value, op.peer, op.chunks.bits, op.action and op.action.value) for op in st.ops))
        for st in schedule.steps
    )
    return (schedule.collective, schedule.nranks, schedule.nchunks, schedule.root, steps)


def params_of(program_rel: str) -> list[Params]:
    """The parameter values the original program accepts (and verifies and runs correctly for)."""
    got = _PARAMS_CACHE.get(program_rel)
    if got is None:
        path = ROOT / program_rel
        original = parse_program(path.read_text(), str(path))
        got = []
        for params in candidate_params(original, _P_VALUES):
            try:
                elaborate(original, params)
            except CollError as err:
                if "violates the constraint" in err.message:
                    continue
                raise
            got.append(params)
            _ORIGINALS[program_rel, repr(sorted(params.items()))] = signature(elaborate(original, params))
        _PARAMS_CACHE[program_rel] = got
    return got


def evaluate(mutant: Mutant) -> MutantResult:
    """Every instance of one mutant (worker entry point)."""
    result = MutantResult(mutant)
    start = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(MUTANT_TIMEOUT_S)
    plist = params_of(mutant.program)
    try:
        try:
            program = _parse(mutant)
        except CollError as err:
            result.outcomes = [Outcome(p, BAD_INPUT, detail=err.message) for p in plist]
            return result
        except Exception as err:
            result.outcomes = [Outcome(p, CRASH, detail=_crash_text(err, "parse")) for p in plist]
            return result
        for params in plist:
            try:
                schedule = elaborate(program, params)
            except CollError as err:
                result.outcomes.append(Outcome(params, BAD_INPUT, detail=err.message))
                continue
            except Exception as err:
                result.outcomes.append(Outcome(params, CRASH, detail=_crash_text(err, "elaborate")))
                continue
            try:
                outcome = judge(schedule, instance_seed(mutant.key, params, _SEED))
            except Exception as err:
                outcome = Outcome(params, CRASH, detail=_crash_text(err, "check/run"))
            same = _ORIGINALS.get((mutant.program, repr(sorted(params.items())))) == signature(schedule)
            result.outcomes.append(dataclasses.replace(outcome, same=same))
    except _Timeout:
        done = len(result.outcomes)
        result.outcomes += [Outcome(p, TIMEOUT, detail=f"over {MUTANT_TIMEOUT_S} s") for p in plist[done:]]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        result.seconds = time.perf_counter() - start
    return result


def _crash_text(err: BaseException, stage: str) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
    return f"{stage}: {type(err).__name__}: {err} (at {where})"


def run_all(mutants: Sequence[Mutant], jobs: int, seed: int, p_values: Sequence[int] = P_VALUES) -> list[MutantResult]:
    """Evaluate every mutant, in ``jobs`` worker processes (inline when jobs is 1)."""
    init = (tuple(p_values),)
    with tempfile.TemporaryDirectory(prefix="collc-mut-") as workdir:
        if jobs <= 1:
            _init_worker(workdir, seed, *init)
            return [evaluate(m) for m in mutants]
        ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        with ctx.Pool(jobs, initializer=_init_worker, initargs=(workdir, seed, *init)) as pool:
            return list(pool.imap(evaluate, mutants, chunksize=4))


# ---------------------------------------------------------------------------
# Summary and report
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class Summary:
    mutants: int = 0
    elaborating: int = 0  # mutants that elaborate for at least one parameter set
    all_bad: int = 0  # mutants rejected as bad input for every parameter set
    killed: int = 0  # elaborating mutants the verifier rejects for at least one parameter set
    equivalent: int = 0  # elaborating mutants whose every schedule is the original's
    instances: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    retried: int = 0
    accepted_changed: int = 0  # instances the verifier accepts whose schedule is not the original's
    per_operator: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    operators: set[str] = field(default_factory=set)
    false_accepts: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    false_rejects: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    crashes: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    timeouts: list[tuple[Mutant, Outcome]] = field(default_factory=list)
    hazard_codes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def unexplained_false_accepts(self) -> list[tuple[Mutant, Outcome]]:
        """False accepts that no known collc bug explains."""
        return [(m, o) for m, o in self.false_accepts if not o.known]

    @property
    def compared(self) -> int:
        return sum(self.counts[c] for c in (AGREE_ACCEPT, AGREE_REJECT, HAZARD, FALSE_ACCEPT, FALSE_REJECT))

    @property
    def agree(self) -> int:
        return sum(self.counts[c] for c in (AGREE_ACCEPT, AGREE_REJECT, HAZARD))

    @property
    def rate(self) -> float:
        return self.agree / self.compared if self.compared else 1.0


def summarize(results: Sequence[MutantResult]) -> Summary:
    s = Summary()
    for r in results:
        m = r.mutant
        s.mutants += 1
        s.operators.add(m.operator)
        op = s.per_operator[m.operator]
        op["mutants"] += 1
        cats = [o.category for o in r.outcomes]
        if any(c != BAD_INPUT for c in cats):
            s.elaborating += 1
            op["elaborating"] += 1
            if all(o.same for o in r.outcomes if o.category != BAD_INPUT):
                s.equivalent += 1
                op["equivalent"] += 1
        elif cats:
            s.all_bad += 1
        if any(c in (AGREE_REJECT, HAZARD, FALSE_REJECT) for c in cats):
            s.killed += 1
            op["killed"] += 1
        for o in r.outcomes:
            s.instances += 1
            op["instances"] += 1
            s.counts[o.category] += 1
            op[o.category] += 1
            s.retried += o.retried
            s.accepted_changed += o.category == AGREE_ACCEPT and not o.same
            if o.category == HAZARD:
                s.hazard_codes.update(c for c in o.codes if c in classify_codes(o.codes)[0])
            target = {
                FALSE_ACCEPT: s.false_accepts,
                FALSE_REJECT: s.false_rejects,
                CRASH: s.crashes,
                TIMEOUT: s.timeouts,
            }
            if o.category in target:
                target[o.category].append((m, o))
    return s


_COLUMNS = (
    ("mutants", "mutants"),
    ("elaborating", "elab."),
    ("equivalent", "same sched."),
    ("instances", "instances"),
    (AGREE_ACCEPT, "agree ok"),
    (AGREE_REJECT, "agree wrong"),
    (HAZARD, "hazard"),
    (FALSE_ACCEPT, "false acc."),
    (FALSE_REJECT, "false rej."),
    (BAD_INPUT, "bad input"),
    (CRASH, "crash"),
    (TIMEOUT, "timeout"),
)


def table(s: Summary) -> str:
    """A Markdown table, one row per operator and a total."""
    head = "| operator | " + " | ".join(title for _, title in _COLUMNS) + " | agreement |"
    rule = "|---|" + "---:|" * (len(_COLUMNS) + 1)
    rows = [head, rule]

    def row(name: str, c: Counter[str]) -> str:
        compared = sum(c[k] for k in (AGREE_ACCEPT, AGREE_REJECT, HAZARD, FALSE_ACCEPT, FALSE_REJECT))
        agree = sum(c[k] for k in (AGREE_ACCEPT, AGREE_REJECT, HAZARD))
        rate = f"{100 * agree / compared:.2f}%" if compared else "–"
        return f"| {name} | " + " | ".join(str(c[k]) for k, _ in _COLUMNS) + f" | {rate} |"

    total: Counter[str] = Counter()
    for name in sorted(s.per_operator):
        rows.append(row(name, s.per_operator[name]))
        total.update(s.per_operator[name])
    rows.append(row("**total**", total))
    return "\n".join(rows)


def _fmt_params(params: Params) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def report(s: Summary, *, limit: int = 20) -> str:
    lines = [
        table(s),
        "",
        f"mutants: {s.mutants} ({s.elaborating} elaborate for at least one parameter set, {s.all_bad} rejected as "
        f"bad input for all, {s.killed} rejected by the verifier for at least one, {s.equivalent} elaborating to "
        f"the original schedules for every parameter set)",
        f"instances: {s.instances}; compared {s.compared}; agree {s.agree} "
        f"(verifier accepts and executor right {s.counts[AGREE_ACCEPT]}, verifier rejects and executor wrong "
        f"{s.counts[AGREE_REJECT]} [{s.retried} of them seen wrong only by the extra runs], rejected for a hazard "
        f"{s.counts[HAZARD]}; {s.accepted_changed} accepted instances differ from the original schedule); "
        f"false accepts {s.counts[FALSE_ACCEPT]} ({s.counts[FALSE_ACCEPT] - len(s.unexplained_false_accepts)} of them "
        f"the known {DUPLICATE_REDUCE_BUG} bug, {len(s.unexplained_false_accepts)} unexplained; in "
        f"{len({m.key for m, _ in s.false_accepts})} mutants); false rejects {s.counts[FALSE_REJECT]}",
        f"bad input (instances): {s.counts[BAD_INPUT]}; crashes: {s.counts[CRASH]}; timeouts: {s.counts[TIMEOUT]}",
        f"agreement rate: {100 * s.rate:.3f}% ({s.agree}/{s.compared})",
        f"hazard codes behind 'rejected for a hazard': {dict(s.hazard_codes.most_common())}",
        f"codes treated as hazards: {', '.join(sorted(HAZARD_CODES))}",
    ]
    if UNCLASSIFIED_CODES:
        lines.append(
            f"codes neither hazard nor known data codes (treated as data): {', '.join(sorted(UNCLASSIFIED_CODES))}"
        )
    for title, items in (
        ("FALSE ACCEPTS", s.false_accepts),
        ("FALSE REJECTS", s.false_rejects),
        ("CRASHES", s.crashes),
        ("TIMEOUTS", s.timeouts),
    ):
        if not items:
            continue
        lines += ["", f"=== {title} ({len(items)}) ==="]
        for m, o in items[:limit]:
            lines += [
                f"--- {m.key} [{m.operator}] {m.program} ({m.file}:{m.line}: {m.description}) {_fmt_params(o.params)}",
                f"    codes={list(o.codes)} wrong={o.wrong} {o.detail}",
                diff(m).rstrip(),
            ]
        if len(items) > limit:
            lines.append(f"... and {len(items) - limit} more")
    return "\n".join(lines)


def harness(limit: int | None = None, seed: int = 0, jobs: int = 2, p_values: Sequence[int] = P_VALUES) -> Summary:
    """Generate, select and run the mutants; the summary of the run."""
    start = time.perf_counter()
    mutants = select(generate_mutants(), limit, seed)
    summary = summarize(run_all(mutants, jobs, seed, p_values))
    summary.seconds = time.perf_counter() - start
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="mutants to run (round-robin over operators)")
    ap.add_argument("--seed", type=int, default=0, help="sampling and data seed (default 0)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--show", type=int, default=20, help="disagreements listed per kind (default 20)")
    ap.add_argument(
        "--ranks",
        default=",".join(map(str, P_VALUES)),
        help="comma-separated p values, filtered by each program's constraints (default %(default)s)",
    )
    args = ap.parse_args(argv)
    p_values = tuple(int(x) for x in args.ranks.split(",") if x.strip())
    start = time.perf_counter()
    everything = generate_mutants()
    mutants = select(everything, args.limit, args.seed)
    print(
        f"{len(everything)} distinct mutants generated from {len(list(EXAMPLES.glob('*.coll')))} programs; "
        f"running {len(mutants)} with {args.jobs} job(s), seed {args.seed}, p in {{{', '.join(map(str, p_values))}}}",
        flush=True,
    )
    results = run_all(mutants, args.jobs, args.seed, p_values)
    summary = summarize(results)
    summary.seconds = time.perf_counter() - start
    print(report(summary, limit=args.show))
    print(
        f"\nwall time {summary.seconds:.1f} s; {platform.machine()} {platform.system()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )
    bad = summary.counts[FALSE_ACCEPT] + summary.counts[FALSE_REJECT] + summary.counts[CRASH]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
