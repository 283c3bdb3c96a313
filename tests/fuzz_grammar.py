"""Random `.coll` text derived from the grammar itself (``grammar/coll.lark``).

The generator reads the rules of collc's LALR parser (lark has already expanded
``?``, ``*`` and ``+`` into plain alternatives) and derives random sentences
from them: at each nonterminal an alternative is picked at random while the
derivation is shallow and its budget lasts, and the cheapest alternative (the
one reaching terminals soonest) afterwards, so every sentence is finite.
Terminals come from pools chosen by where they occur (a collective name after
``algorithm x :``, a codec name in a codec spec, names the prelude defines in
expressions), so that a fair share of the sentences get past the name checks
and into elaboration.  ``_NL``, ``_INDENT`` and ``_DEDENT`` become line ends
and indentation when the tokens are rendered.

Most sentences of the grammar are still rejected by the checks after parsing,
as they should be; what matters is that every one ends in a located diagnostic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

from lark import Lark
from lark.grammar import NonTerminal, Rule, Terminal

from collc.frontend.parse import _parser

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall")
PARAM_TYPES = ("int", "dims")
CODEC_NAMES = ("ebq", "fwq", "hq", "fp16", "bf16", "lossless", "zfp")
CODEC_KEYS = ("eb", "bits", "block", "rate", "levels")
VALUE_NAMES = ("p", "rank", "root", "k", "dims", "s", "i", "x", "r", "n", "L")
FUNCTION_NAMES = (
    "log2", "ceil_log2", "is_pow2", "abs", "min", "max", "len", "sum", "prod", "union", "all", "any", "set",
    "shift", "tuple", "reversed", "range", "bitreverse", "popcount", "coords", "rank_of", "move",
    "ring_next", "ring_prev", "block", "pow2_floor", "swing_rho", "swing_peer", "swing_blocks", "f", "g",
)  # fmt: skip
FLOATS = ("1e-3", "0.5", ".25", "3.", "1e308", "1e400", "1e-400", "2.5e-2", "7e0")
NUMBERS = ("0", "1", "2", "3", "4", "7", "8", "16", "0x10", "0b101", "00")
BIG_NUMBERS = (str(1 << 20), str((1 << 26) + 1), str(1 << 63), str(1 << 64), "1" + "0" * 30)
STRINGS = ('"lib/ring.coll"', '"lib/fold.coll"', '"no such file.coll"', '"a message"', '""')

# Relative weights of some alternatives (by their first symbol), where uniform choice would waste the
# sentences on declarations that end the program early (a second ``chunks``) or say little.
WEIGHTS: dict[str, dict[str, float]] = {
    "decl": {"phase_decl": 6, "fn_decl": 3, "let_stmt": 2, "proc_decl": 2, "chunks_decl": 0.2, "include_decl": 0.3,
             "param_decl": 0.5, "codec_decl": 1, "assert_stmt": 0.5},
    "stmt": {"for_stmt": 3, "if_stmt": 1.5, "step_stmt": 1},
    "simple_stmt": {"exchange_stmt": 3, "send_stmt": 3, "recv_stmt": 3, "let_stmt": 2, "pass_stmt": 0.3},
}  # fmt: skip

MAX_DEPTH = 40
BUDGET = 260  # symbols expanded freely before the generator turns to the cheapest alternatives


@dataclass(frozen=True, slots=True)
class _Grammar:
    rules: dict[str, tuple[Rule, ...]]
    cost: dict[str, int]  # the fewest tokens a nonterminal derives


@cache
def _grammar() -> _Grammar:
    parser: Lark = _parser()
    rules: dict[str, list[Rule]] = {}
    for rule in parser.rules:
        rules.setdefault(rule.origin.name, []).append(rule)
    cost: dict[str, int] = {}
    changed = True
    while changed:  # least fixpoint of cost(A) = min over alternatives of the sum of their symbols' costs
        changed = False
        for name, alts in rules.items():
            for rule in alts:
                parts = [cost.get(s.name) if isinstance(s, NonTerminal) else 1 for s in rule.expansion]
                if any(c is None for c in parts):
                    continue
                c = sum(x for x in parts if x is not None)
                if c < cost.get(name, 1 << 30):
                    cost[name] = c
                    changed = True
    return _Grammar({k: tuple(v) for k, v in rules.items()}, cost)


def _rule_cost(g: _Grammar, rule: Rule) -> int:
    return sum(g.cost[s.name] if isinstance(s, NonTerminal) else 1 for s in rule.expansion)


class _Deriver:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.g = _grammar()
        self.budget = BUDGET
        self.tokens: list[tuple[str, str]] = []

    def derive(self, symbol: str, depth: int) -> None:
        alts = self.g.rules[symbol]
        if depth >= MAX_DEPTH or self.budget <= 0:
            best = min(_rule_cost(self.g, r) for r in alts)
            rule = self.rng.choice([r for r in alts if _rule_cost(self.g, r) == best])
        elif symbol.startswith("__") or symbol in ("program", "library"):
            # repetitions (lark's helper rules for * and +) and the top: favour the longer alternatives
            longest = max(len(r.expansion) for r in alts)
            long_alts = [r for r in alts if len(r.expansion) == longest]
            rule = self.rng.choice(long_alts if self.rng.random() < 0.6 else alts)
        elif symbol in WEIGHTS:
            table = WEIGHTS[symbol]
            weights = [table.get(r.expansion[0].name, 1.0) if r.expansion else 1.0 for r in alts]
            rule = self.rng.choices(alts, weights)[0]
        else:
            # a chain rule (``?arith: term | arith "+" term``) mostly passes through, so that expressions
            # stay readable instead of nesting every operator of the precedence ladder
            chain = [r for r in alts if len(r.expansion) == 1 and isinstance(r.expansion[0], NonTerminal)]
            rule = self.rng.choice(chain if chain and self.rng.random() < 0.8 else alts)
        self.budget -= 1
        for position, sym in enumerate(rule.expansion):
            if isinstance(sym, Terminal):
                self.tokens.append((sym.name, self.terminal(sym.name, rule, position)))
            else:
                self.derive(sym.name, depth + 1)

    def terminal(self, name: str, rule: Rule, position: int) -> str:
        rng, origin = self.rng, rule.origin.name
        if name == "NAME":
            if origin == "header":
                return rng.choice(COLLECTIVES) if position == 3 and rng.random() < 0.9 else rng.choice(VALUE_NAMES)
            if origin == "param_decl" and position == 3:
                return rng.choice(PARAM_TYPES) if rng.random() < 0.9 else "float"
            if origin == "codec_spec":
                return rng.choice(CODEC_NAMES)
            if origin == "codec_arg":
                return rng.choice(CODEC_KEYS)
            if origin in ("call", "gencall", "do_stmt", "fn_expr", "fn_block", "proc_decl"):
                return rng.choice(FUNCTION_NAMES)
            return rng.choice(VALUE_NAMES)
        if name == "NUMBER":
            return rng.choice(BIG_NUMBERS) if rng.random() < 0.05 else rng.choice(NUMBERS)
        if name == "FLOAT":
            return rng.choice(FLOATS)
        if name == "STRING":
            return rng.choice(STRINGS)
        if name == "ACTION":
            return rng.choice(("copy", "reduce"))
        if name == "_NL":
            return "\n" if rng.random() < 0.9 else "  # a comment\n"
        if name in ("_INDENT", "_DEDENT"):
            return ""
        pattern = _grammar_terminals().get(name)
        if pattern is None:
            raise KeyError(f"the fuzz generator has no values for terminal {name}; teach it (tests/fuzz_grammar.py)")
        return pattern


@cache
def _grammar_terminals() -> dict[str, str]:
    """The terminals that are fixed strings (keywords, operators, brackets)."""
    return {t.name: t.pattern.value for t in _parser().terminals if t.pattern.type == "str"}


def render(tokens: list[tuple[str, str]], indent_unit: str = "  ") -> str:
    """Token texts joined by spaces, with line ends for _NL and indentation for _INDENT/_DEDENT."""
    out: list[str] = []
    level = 0
    at_line_start = True
    for kind, text in tokens:
        if kind == "_NL":
            out.append(text)
            at_line_start = True
        elif kind == "_INDENT":
            level += 1
        elif kind == "_DEDENT":
            level = max(0, level - 1)
        else:
            if at_line_start:
                out.append(indent_unit * level)
                at_line_start = False
            else:
                out.append(" ")
            out.append(text)
    return "".join(out)


HEADERS = (
    "algorithm g : allreduce\nparam p : int where p >= 1\nchunks p\n",
    "algorithm g : allgather\nparam p : int\nchunks p\nlet L = ceil_log2(p)\n",
    "algorithm g : broadcast\nparam p : int\nparam root : int = 0\nchunks 1\n",
    "algorithm g : alltoall\nparam p : int\nchunks p * p\n",
    "algorithm g : reduce_scatter\nparam p : int\nparam k : int = 1\nchunks k * p\n",
)


def random_program(rng: random.Random) -> str:
    """A random sentence of the grammar: a whole program, or declarations after a fixed, valid header
    (so that the random part is what the checks and the elaborator see)."""
    deriver = _Deriver(rng)
    if rng.random() < 0.3:
        deriver.derive("program", 0)
        prefix = ""
    else:
        deriver.derive("library", 0)
        prefix = rng.choice(HEADERS)
    return prefix + render(deriver.tokens, rng.choice(("  ", "    ", "\t")))
