"""Mutated examples and pathological inputs for the fuzzer (`coll_fuzz`).

`mutated_case` takes a bundled example (``examples/**/*.coll``) and applies one
to four random text mutations: token deletions, duplications, swaps and
replacements, numbers turned into boundary values, lines deleted, duplicated,
swapped or re-indented, line ends changed (CRLF, a lone CR), stray characters,
truncation, lines spliced in from another example, deep nesting around an
operand.  The result keeps the example's path, so its includes still resolve.

`stress_case` makes inputs aimed at collc's limits: nesting thousands of levels
deep, runaway loops and step loops, unbounded recursion, huge numbers and
codec parameters, long names and codec specs, odd line ends and bytes.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

from collc.ir import ParamValue

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

_TOKEN = re.compile(
    r"\r\n|\n|\r|[ \t]+|#[^\n]*|\"[^\"\n]*\"|[A-Za-z_][A-Za-z_0-9]*|0[xX][0-9a-fA-F]+|0[bB][01]+"
    r"|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\*\*|//|<<|>>|<=|>=|==|!=|\.\.|."
)
KEYWORDS = (
    "algorithm", "param", "where", "chunks", "codec", "include", "fn", "return", "proc", "phase", "let", "assert",
    "for", "step", "in", "if", "elif", "else", "exchange", "with", "send", "recv", "to", "from", "copy", "reduce",
    "compress", "decompress", "do", "pass", "and", "or", "not", "mod", "true", "false", "rank", "p", "root",
)  # fmt: skip
OPERATORS = (
    "+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "~", "==", "!=", "<", "<=", ">", ">=", "..",
    "(", ")", "[", "]", "{", "}", ",", ":", ";", "=", ".", "\\", "$", "@", "'", '"', "`", "!", "?",
)  # fmt: skip
BOUNDARY_NUMBERS = (
    "0", "1", "2", "-1", "63", "64", str(1 << 17), str((1 << 17) + 1), str((1 << 26) + 1), str(1 << 31),
    str(1 << 63), str((1 << 64) + 1), "1" + "0" * 40, "9" * 5000, "0x" + "f" * 40, "0b" + "1" * 70,
    "1e-3", "1e400", "1.5",
)  # fmt: skip
STRAY = ("\x00", "\ufeff", "é", "λ", "\t", "\x0c", "\x0b", "\u2028", "\u00a0", "\\", '"', "#", "\r")
SHAPES: tuple[tuple[int, ...], ...] = ((2, 2), (4, 4), (2, 3), (4,), (3,), (2, 2, 2), (1, 4), (4, 2))


def scratch_file() -> str:
    """The name generated inputs are parsed under: a file next to the examples (that need not exist), so that
    ``include "lib/ring.coll"`` resolves."""
    return str(EXAMPLES / "fuzz_input.coll")


def random_params(rng: random.Random, torus: bool = False) -> dict[str, ParamValue]:
    """Parameter values for an input (the harness drops those the program does not declare)."""
    params: dict[str, ParamValue] = {}
    if rng.random() < 0.93:
        params["p"] = rng.choice((1, 2, 3, 4, 4, 5, 6, 8, 8, 12, 16))
    else:
        params["p"] = rng.choice((0, -1, 64, (1 << 17) + 1, 1 << 64))
    if torus or rng.random() < 0.2:
        params["dims"] = rng.choice(SHAPES) if rng.random() < 0.95 else rng.choice((0, 5, (0, 2), (1 << 20, 1 << 20)))
    if rng.random() < 0.2:
        params["root"] = rng.choice((0, 1, 2, 3, -1, 99))
    if rng.random() < 0.2:
        params["k"] = rng.choice((1, 2, 3, 0, -2))
    return params


@cache
def example_files() -> tuple[Path, ...]:
    return tuple(sorted(p for p in EXAMPLES.rglob("*.coll") if "lib" not in p.parts))


@cache
def _text(path: Path) -> str:
    return path.read_text()


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _solid(toks: list[str]) -> list[int]:
    """The indices of the tokens that are not spaces, line ends or comments."""
    return [i for i, t in enumerate(toks) if t.strip() and not t.startswith("#")]


# --------------------------------------------------------------------------
# Mutations: text -> text
# --------------------------------------------------------------------------


def _token_mutation(rng: random.Random, text: str) -> str:
    toks = tokens(text)
    solid = _solid(toks)
    if not solid:
        return text + rng.choice(KEYWORDS)
    i = rng.choice(solid)
    choice = rng.randrange(6)
    if choice == 0:
        toks[i] = ""
    elif choice == 1:
        toks[i] = toks[i] + " " + toks[i]
    elif choice == 2:
        j = solid[min(solid.index(i) + 1, len(solid) - 1)]
        toks[i], toks[j] = toks[j], toks[i]
    elif choice == 3:
        toks[i] = rng.choice(KEYWORDS)
    elif choice == 4:
        toks[i] = rng.choice(OPERATORS)
    else:
        toks[i] = toks[rng.choice(solid)]
    return "".join(toks)


def _number_mutation(rng: random.Random, text: str) -> str:
    toks = tokens(text)
    numbers = [i for i, t in enumerate(toks) if t[:1].isdigit()]
    if not numbers:
        return _token_mutation(rng, text)
    i = rng.choice(numbers)
    n = toks[i]
    toks[i] = rng.choice((*BOUNDARY_NUMBERS, f"({n} + 1)", f"({n} - 1)", f"(2 * {n})", f"-{n}"))
    return "".join(toks)


def _line_mutation(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    choice = rng.randrange(6)
    if choice == 0:
        del lines[i]
    elif choice == 1:
        lines.insert(i, lines[i])
    elif choice == 2:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif choice == 3:
        lines[i] = rng.choice((" ", "  ", "\t", "   ", "        ")) + lines[i]
    elif choice == 4:
        lines[i] = lines[i].lstrip()
    else:
        other = _text(rng.choice(example_files())).split("\n")
        lines.insert(i, rng.choice(other))
    return "\n".join(lines)


def _line_end_mutation(rng: random.Random, text: str) -> str:
    end = rng.choice(("\r\n", "\r", "\n\r", "\n\n"))
    if rng.random() < 0.5:
        return text.replace("\n", end)
    at = [m.start() for m in re.finditer("\n", text)]
    if not at:
        return text + end
    k = rng.choice(at)
    return text[:k] + end + text[k + 1 :]


def _stray_mutation(rng: random.Random, text: str) -> str:
    k = rng.randrange(len(text) + 1)
    return text[:k] + rng.choice(STRAY) + text[k:]


def _truncate(rng: random.Random, text: str) -> str:
    return text[: rng.randrange(len(text) + 1)]


def _nest_mutation(rng: random.Random, text: str) -> str:
    """Deep nesting around one operand: brackets, unary operators, a long operator chain."""
    toks = tokens(text)
    operands = [i for i, t in enumerate(toks) if t[:1].isdigit() or (t[:1].isalpha() and t not in KEYWORDS)]
    if not operands:
        return text
    i = rng.choice(operands)
    depth = rng.choice((30, 200, 1000, 3000))
    a = toks[i]
    form = rng.randrange(5)
    if form == 0:
        toks[i] = "(" * depth + a + ")" * depth
    elif form == 1:
        toks[i] = "-" * depth + a
    elif form == 2:
        toks[i] = " + ".join([a] * depth)
    elif form == 3:
        toks[i] = "{" * depth + a + "}" * depth
    else:
        toks[i] = "not " * depth + a
    return "".join(toks)


MUTATIONS: tuple[tuple[Callable[[random.Random, str], str], float], ...] = (
    (_token_mutation, 5),
    (_number_mutation, 3),
    (_line_mutation, 3),
    (_line_end_mutation, 1),
    (_stray_mutation, 1),
    (_truncate, 0.5),
    (_nest_mutation, 0.4),
)


def mutate(rng: random.Random, text: str, count: int) -> str:
    funcs, weights = zip(*MUTATIONS, strict=True)
    for _ in range(count):
        text = rng.choices(funcs, weights)[0](rng, text)
    return text


def mutated_case(rng: random.Random):  # type: ignore[no-untyped-def]  # -> coll_fuzz.Case
    from coll_fuzz import Case

    path = rng.choice(example_files())
    text = mutate(rng, _text(path), rng.choice((1, 1, 1, 2, 2, 3, 4)))
    params = random_params(rng, torus="torus" in path.parts)
    return Case("mutated", text, str(path), params, origin=path.name)


# --------------------------------------------------------------------------
# Pathological inputs
# --------------------------------------------------------------------------

HEAD = "algorithm t : allreduce\nparam p : int where p >= 1\nchunks p\n"


def _deep_expression(rng: random.Random, size: str) -> str:
    depth = rng.choice(
        {"quick": (100, 600, 2600), "full": (100, 1000, 2400, 2600, 6000), "heavy": (50000, 200000)}[size]
    )
    inner = rng.choice(
        (
            "(" * depth + "1" + ")" * depth,
            "-" * depth + "1",
            "~" * depth + "1",
            "not " * depth + "true",
            "{" * depth + "1" + "}" * depth,
            " + ".join(["1"] * depth),
            " ** ".join(["1"] * depth),
            "x" + "[0]" * depth,
            "f(" * depth + "1" + ")" * depth,
            "1 if true else " * depth + "1",
        )
    )
    return HEAD + f"let x = {inner}\nphase a:\n  pass\n"


def _deep_blocks(rng: random.Random, size: str) -> str:
    depth = rng.choice((20, 50, 100) if size == "quick" else (50, 100, 200, 500, 1300))
    lines = [HEAD.rstrip("\n"), "phase a:"]
    for d in range(depth):
        lines.append("  " * (d + 1) + rng.choice(("if true:", "for i in 0 .. 1:", "if rank >= 0:")))
    lines.append("  " * (depth + 1) + "pass")
    return "\n".join(lines) + "\n"


def _runaway(rng: random.Random, size: str) -> str:
    """Loops a wrong bound makes endless: beyond what one loop may run over (refused at once), or step loops
    that reach the limit on steps (2^20) within seconds (not in ``quick`` runs)."""
    n = rng.choice(("(1 << 26) + 1", "1 << 40", "10 ** 30", "(1 << 63) - 1"))
    quick = (
        f"phase a:\n  for step s in 0 .. {n}:\n    pass\n",
        f"phase a:\n  for i in 0 .. {n}:\n    pass\n",
        f"let x = sum(i for i in 0 .. {n})\nphase a:\n  pass\n",
        f"let x = len({{i for i in 0 .. {n}}})\nphase a:\n  pass\n",
        f"let x = {{i for i in 0 .. 3}} | {{{n}}}\nphase a:\n  pass\n",
    )
    if size == "quick" or rng.random() < 0.7:
        return HEAD + rng.choice(quick)
    body = rng.choice(
        (
            f"phase a:\n  for step s in 0 .. {n}:\n    pass\n",
            "phase a:\n  for step s in 0 .. (1 << 20) + 1:\n    pass\n",
            "phase a:\n  for step s in 0 .. 1 << 24:\n    if s == 0:\n      send 0 to (rank + 1) mod p\n"
            "      recv 0 from (rank - 1) mod p copy\n",
            f"phase a:\n  for i in 0 .. {n}:\n    pass\n",
            "phase a:\n  for i in 0 .. 1 << 13:\n    for step j in 0 .. 1 << 13:\n      pass\n",
            "phase a:\n  for i in 0 .. 1 << 25:\n    step:\n      pass\n",
            "phase a:\n  for i in 0 .. 1 << 21:\n    send 0 to (rank + 1) mod p\n",
            f"let x = sum(i for i in 0 .. {n})\nphase a:\n  pass\n",
            f"let x = len({{i for i in 0 .. {n}}})\nphase a:\n  pass\n",
            f"let x = {{i for i in 0 .. 3}} | {{{n}}}\nphase a:\n  pass\n",
        )
    )
    return HEAD + body


def _slow_limits(rng: random.Random, size: str) -> str:
    """Programs that reach collc's limit on loop iterations (2^26 in all) only after running them all: tens
    of seconds, not an endless loop."""
    body = rng.choice(
        (
            "phase a:\n  for i in 0 .. 4096:\n    for j in 0 .. 4096:\n      for k in 0 .. 1 << 20:\n        pass\n",
            "let x = sum(i for i in 0 .. (1 << 26) - 1)\nphase a:\n  pass\n",
            "let x = len({i for i in 0 .. (1 << 26) - 1})\nphase a:\n  pass\n",
            "phase a:\n  for i in 0 .. (1 << 26) - 1:\n    pass\n",
        )
    )
    return HEAD + body


def _recursion(rng: random.Random, size: str) -> str:
    fn = rng.choice(
        (
            "fn f(x) = f(x + 1)",
            "fn f(x) = f(x) + 1",
            "fn f(x) = g(x)\nfn g(x) = f(x)",
            "fn f(x) = 0 if x == 0 else f(x - 1) + f(x - 1)",
            "fn f(x) = 0 if x <= 0 else 1 + f(x - 1)",
            "fn f(x):\n  let y = f(x + 1)\n  return y",
            "proc q(x):\n  do q(x + 1)\nfn f(x) = x",
        )
    )
    arg = rng.choice(("1", "300", "399", "400", "5000", "60", "1 << 40"))
    use = rng.choice(
        (f"let v = f({arg})\nphase a:\n  pass\n", f"phase a:\n  let v = f({arg})\n", "phase a:\n  do q(0)\n")
    )
    return HEAD + fn + "\n" + use


def _numbers(rng: random.Random, size: str) -> str:
    expr = rng.choice(
        (
            "9" * 5000,
            "2 ** 2 ** 2 ** 2 ** 2",
            "2 ** 64",
            "(1 << 63) * 2",
            "1 << (1 << 40)",
            "1 >> (1 << 70)",
            "-(1 << 63) - 1",
            "(1 << 62) + (1 << 62)",
            "10 ** 30 // 3",
            "(-1) ** (1 << 62)",
            "abs(-(1 << 63))",
            "{1 << 30}",
            "{0 .. 1 << 30}",
            "shift({1}, 1 << 40)",
            "bitreverse(1, 1 << 40)",
            "bitreverse(1, -1)",
            "range(0, 10, 0)",
            "popcount(-1)",
            "log2(0)",
            "ceil_log2(-5)",
            "coords(1 << 40, (2, 2))",
            "rank_of((1, 1), (0, 2))",
            "move(0, (2, 2), 5, 1)",
            "prod(i for i in 1 .. 100)",
            "min({})",
            "(1, 2)[1 << 70]",
            "(1, 2)[-1]",
            "1 // 0",
            "1 mod 0",
            "0 ** -1",
        )
    )
    where = rng.randrange(3)
    if where == 0:
        return HEAD + f"let x = {expr}\nphase a:\n  pass\n"
    if where == 1:
        return HEAD.replace("chunks p", f"chunks {expr}") + "phase a:\n  pass\n"
    return HEAD + f"phase a:\n  send {expr} to (rank + 1) mod p\n  recv 0 from (rank - 1) mod p copy\n"


def _codecs(rng: random.Random, size: str) -> str:
    spec = rng.choice(
        (
            "ebq(eb=1e400)",
            "ebq(eb=1e-400)",
            "ebq(eb=" + "9" * 400 + ")",
            "ebq(eb=" + "9" * 5000 + ")",
            "ebq(eb=" + "9" * 400 + ".0)",
            "fwq(bits=" + "9" * 30 + ", block=64)",
            "fwq(bits=4, block=" + "9" * 30 + ")",
            "fwq(bits=1e400, block=64)",
            "fwq(bits=4.5, block=64)",
            "fwq(bits=-4, block=-64)",
            "zfp(rate=1e308)",
            "zfp(rate=" + "9" * 40 + ")",
            "hq(" + "9" * 40 + ")",
            "ebq(" + ", ".join(["1e-3"] * 2000) + ")",
            "ebq(eb=1e-3, " * 1 + "x=" + "y" * 3000 + ")",
            "nosuchcodec" + "x" * 3000,
            "lossless(1)",
            "bf16(eb=1)",
        )
    )
    return (
        "algorithm t : allgather\nparam p : int where p >= 1\nchunks p\n"
        f"codec q = {spec}\n"
        "phase a:\n  for step s in 0 .. p - 1:\n"
        "    send (rank - s) mod p to ring_next(rank) compress q\n"
        "    recv (rank - s - 1) mod p from ring_prev(rank) copy compress q\n"
    )


def _text_forms(rng: random.Random, size: str) -> str:
    base = _text(EXAMPLES / "ring_allreduce.coll")
    choice = rng.randrange(9)
    if choice == 0:
        return base.replace("\n", "\r")
    if choice == 1:
        return base.replace("\n", "\r\n")
    if choice == 2:
        return "\ufeff" + base
    if choice == 3:
        return base.replace("k * p", "k * p\x00")
    if choice == 4:
        return ""
    if choice == 5:
        return "# only a comment\n" * rng.choice((1, 1000))
    if choice == 6:
        return base.replace("ring_allreduce :", "r" + "x" * 100000 + " :")
    if choice == 7:
        return base + "let " + "y" * 50000 + " = 1\n"
    return base.replace("\n", "\n\r")


def _many(rng: random.Random, size: str) -> str:
    n = rng.choice({"quick": (100, 300), "full": (300, 1000, 2000), "heavy": (20000, 50000)}[size])
    kind = rng.randrange(3)
    if kind == 0:
        return HEAD + "".join(f"let c{i} = {i}\n" for i in range(n)) + "phase a:\n  pass\n"
    if kind == 1:
        return HEAD + "".join(f"fn f{i}(x) = x + {i}\n" for i in range(n)) + "phase a:\n  pass\n"
    return HEAD + "let c0 = 1\n" + "".join(f"let c{i + 1} = c{i} + 1\n" for i in range(n)) + "phase a:\n  pass\n"


STRESS: tuple[Callable[[random.Random, str], str], ...] = (
    _deep_expression,
    _deep_blocks,
    _runaway,
    _recursion,
    _numbers,
    _codecs,
    _text_forms,
    _many,
)
HEAVY: tuple[Callable[[random.Random, str], str], ...] = (_slow_limits, _deep_expression, _many)
SIZES = ("quick", "full", "heavy")


def stress_case(rng: random.Random, size: str = "full"):  # type: ignore[no-untyped-def]  # -> coll_fuzz.Case
    """A pathological input.  ``quick`` ones are refused (or accepted) within a second or so, ``full`` ones
    include those collc needs a few seconds for (a million steps before the limit on steps), ``heavy`` ones
    take it tens of seconds (2^26 loop iterations before the limit on them, 200000-level nesting)."""
    from coll_fuzz import Case

    make = rng.choice(HEAVY if size == "heavy" else STRESS)
    params = {"p": rng.choice((1, 2, 4, 8))}
    kind = "heavy" if size == "heavy" else "stress"
    return Case(kind, make(rng, size), scratch_file(), params, origin=make.__name__.lstrip("_"))
