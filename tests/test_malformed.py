"""Malformed `.coll` programs: collc must answer with a located `CollError`, never a Python exception.

A deterministic generator turns every ``examples/*.coll`` into hundreds of
broken variants (truncations, deleted/swapped/duplicated tokens and lines,
re-indented lines, inserted junk, odd numbers, unknown names).  Each variant is
parsed with the example's real path (so includes resolve), and when it parses,
elaborated for a few small ``p`` and checked.  The only exception allowed out
is `CollError`, with a span inside a known source that `format_error` renders
as ``file:line:col: error:`` plus the source line and a caret.  A sample also
goes through the ``collc check`` command.
"""

from __future__ import annotations

import functools
import random
import re
import shutil
import sys
import traceback
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from error_helpers import Timeout, collc_check_subprocess, deadline
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collc.cli import main as cli_main
from collc.diagnostics import CollError, format_error
from collc.elaborate import elaborate
from collc.frontend.program import PRELUDE_NAME, Program, parse_program
from collc.ir import Span
from collc.resources import data_dir
from collc.verify.check import check

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_FILES = sorted(EXAMPLES_DIR.glob("*.coll")) + sorted(EXAMPLES_DIR.glob("compression/*.coll"))
LIB_FILES = sorted((EXAMPLES_DIR / "lib").glob("*.coll"))
P_VALUES = (2, 3, 4, 8)
MIN_VARIANTS = 500
VARIANT_SECONDS = 10.0  # a single variant running longer than this is reported as a hang
CLI_SAMPLE = 30
SEED = 20240611

KEYWORDS = frozenset(
    "algorithm param where chunks include fn return proc phase let assert for in if elif else step "
    "exchange with send recv to from do pass copy reduce and or not true false mod int dims codec compress "
    "decompress".split()
)
JUNK = (
    ")", "(", ":", ",", ";", "..", "{", "}", "[", "]", "$", "@", "?", '"', "\\", "#", "=", "**", "|",
    "step", "for", "if", "else", "send", "recv", "phase", "let", "rank", "p", "0", "not", "and", "do",
    "return", "pass", "in", "to", "with", "copy", "\n", "\n  ", "\t",
)  # fmt: skip
HUGE = ("99999999999999999999", "18446744073709551616", "9223372036854775807", "0x7fffffffffffffff")
NEGATIVE = ("-1", "-7", "-9223372036854775808")
UNKNOWN_NAME = "zz_not_defined"

_TOKEN_RE = re.compile(
    r"""(?P<comment>\#[^\n]*)
      | (?P<string>"[^"\n]*")
      | (?P<number>0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)
      | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
      | (?P<op>\*\*|//|<<|>>|<=|>=|==|!=|\.\.|[-+*/%<>=|&^~(){}\[\],:;.])
      | (?P<space>[ \t\f]+|\r?\n|\\\n)
      | (?P<other>.)""",
    re.VERBOSE,
)


# --------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Variant:
    """One malformed program: ``text`` stands in for ``example`` (same folder, same path)."""

    example: Path
    kind: str  # the mutator, e.g. "delete_token"
    label: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.example.name}[{self.label}]"


def tokens(text: str) -> list[Tok]:
    """The significant tokens of ``text`` (no spaces, newlines or comments), with offsets."""
    out = []
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup or "other"
        if kind not in ("space", "comment"):
            out.append(Tok(kind, m.group(), m.start(), m.end()))
    return out


def _picks(rng: random.Random, population: int, count: int) -> list[int]:
    """``count`` distinct indices below ``population`` (fewer when there are fewer), sorted."""
    return sorted(rng.sample(range(population), min(count, population))) if population > 0 else []


def _truncate_chars(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    cuts = {len(text) * k // 8 for k in range(1, 8)} | {rng.randrange(1, len(text)) for _ in range(3)}
    for cut in sorted(cuts):
        yield f"truncate@char{cut}", text[:cut]


def _truncate_tokens(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    for i in _picks(rng, len(toks), 8):
        yield f"truncate@after-token{i}:{toks[i].text!r}", text[: toks[i].end]


def _delete_token(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    for i in _picks(rng, len(toks), 7):
        t = toks[i]
        yield f"delete-token{i}:{t.text!r}", text[: t.start] + text[t.end :]


def _swap_tokens(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    for i in _picks(rng, len(toks) - 1, 6):
        a, b = toks[i], toks[i + 1]
        if a.text == b.text:
            continue
        swapped = text[: a.start] + b.text + text[a.end : b.start] + a.text + text[b.end :]
        yield f"swap-tokens{i}:{a.text!r}<->{b.text!r}", swapped


def _duplicate_line(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    lines = text.splitlines(keepends=True)
    code = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    for k in _picks(rng, len(code), 5):
        i = code[k]
        yield f"duplicate-line{i + 1}", "".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])


_REINDENTS: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("+1sp", lambda line: " " + line),
    ("+2sp", lambda line: "  " + line),
    ("-1sp", lambda line: line[1:] if line.startswith(" ") else " " + line),
    ("to-col1", lambda line: line.lstrip(" \t")),
    ("+tab", lambda line: "\t" + line),
    ("+sp-tab", lambda line: " \t" + line.lstrip(" ")),
)


def _reindent_line(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    lines = text.splitlines(keepends=True)
    code = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    for k in _picks(rng, len(code), 6):
        i = code[k]
        how, change = _REINDENTS[rng.randrange(len(_REINDENTS))]
        changed = change(lines[i])
        if changed != lines[i]:
            yield f"reindent-line{i + 1}:{how}", "".join([*lines[:i], changed, *lines[i + 1 :]])


def _insert_junk(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    for i in _picks(rng, len(toks), 7):
        junk = JUNK[rng.randrange(len(JUNK))]
        at = toks[i].start if rng.random() < 0.5 else toks[i].end
        pad = "" if junk.startswith(("\n", "\t")) else " "
        yield f"insert@{at}:{junk!r}", text[:at] + pad + junk + pad + text[at:]


def _replace_numbers(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    numbers = [t for t in toks if t.kind == "number"]
    for kind, choices in (("huge", HUGE), ("negative", NEGATIVE), ("zero", ("0",))):
        for k in _picks(rng, len(numbers), 3):
            t = numbers[k]
            new = choices[rng.randrange(len(choices))]
            if new != t.text:
                yield f"number@{t.start}:{t.text}->{kind}:{new}", text[: t.start] + new + text[t.end :]


def _replace_names(text: str, toks: list[Tok], rng: random.Random) -> Iterator[tuple[str, str]]:
    names = [t for t in toks if t.kind == "name" and t.text not in KEYWORDS]
    for k in _picks(rng, len(names), 6):
        t = names[k]
        yield f"name@{t.start}:{t.text}->unknown", text[: t.start] + UNKNOWN_NAME + text[t.end :]


MUTATORS: tuple[Callable[[str, list[Tok], random.Random], Iterator[tuple[str, str]]], ...] = (
    _truncate_chars,
    _truncate_tokens,
    _delete_token,
    _swap_tokens,
    _duplicate_line,
    _reindent_line,
    _insert_junk,
    _replace_numbers,
    _replace_names,
)


def variants_of(example: Path) -> list[Variant]:
    """The deterministic malformed variants of one example (seeded by its name), without duplicates."""
    text = example.read_text()
    toks = tokens(text)
    rng = random.Random(SEED ^ zlib.crc32(example.name.encode()))
    seen = {text}
    out = []
    for mutate in MUTATORS:
        for label, new in mutate(text, toks, rng):
            if new not in seen:
                seen.add(new)
                out.append(Variant(example, mutate.__name__.lstrip("_"), label, new))
    return out


@functools.cache
def all_variants() -> tuple[Variant, ...]:
    return tuple(v for example in EXAMPLE_FILES for v in variants_of(example))


# --------------------------------------------------------------------------
# Running one variant
# --------------------------------------------------------------------------


@functools.cache
def static_sources() -> dict[str, str]:
    """The texts a variant may include: the prelude and ``examples/lib`` (by resolved path)."""
    sources = {PRELUDE_NAME: (data_dir("grammar") / "prelude.coll").read_text()}
    for lib in LIB_FILES:
        sources[str(lib.resolve())] = lib.read_text()
    return sources


def error_problem(err: CollError, sources: Mapping[str, str]) -> str | None:
    """What is wrong with ``err`` as a user-facing diagnostic, or None when it is fine."""
    span = err.span
    if span is None:
        return f"CollError without a span: {err.message!r}"
    if span.file not in sources:
        return f"span in an unknown file {span.file!r}: {err.message!r}"
    if span.line < 1 or span.column < 1:
        return f"span {span} is not 1-based: {err.message!r}"
    lines = sources[span.file].splitlines()
    if span.line > max(1, len(lines)):
        return f"span {span} is past the end of the file ({len(lines)} lines): {err.message!r}"
    text = format_error(err, sources)
    if f":{span.line}:{span.column}: error:" not in text:
        return f"format_error lacks ':line:col: error:': {text!r}"
    shown = text.splitlines()
    if len(shown) < 3 or "^" not in shown[2]:
        return f"format_error lacks the source line and caret: {text!r}"
    return None


def _params(program: Program, p: int) -> dict[str, int]:
    values = {}
    if program.param("p") is not None:
        values["p"] = p
    if program.param("root") is not None:
        values["root"] = 0
    return values


def _unexpected(stage: str, exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return f"{stage}: {type(exc).__name__}: {str(exc)[:200]}{where}"


@dataclass(slots=True)
class Outcome:
    """What happened to one variant."""

    parsed: bool = False
    elaborated: int = 0  # p values that elaborated (and were checked)
    errors: int = 0  # CollErrors seen (all well-formed unless in problems)
    problems: tuple[str, ...] = ()


def exercise(text: str, file: str, p_values: tuple[int, ...] = P_VALUES) -> Outcome:
    """Parse ``text`` as ``file``, then elaborate and check it for each ``p``; collect contract violations."""
    out = Outcome()
    problems: list[str] = []
    sources = {**static_sources(), file: text}
    stage = "parse"
    try:
        with deadline(VARIANT_SECONDS):
            try:
                program = parse_program(text, file)
            except CollError as err:
                out.errors += 1
                if (problem := error_problem(err, sources)) is not None:
                    problems.append(f"parse: {problem}")
                return out
            out.parsed = True
            for p in p_values:
                stage = f"elaborate p={p}"
                try:
                    schedule = elaborate(program, _params(program, p))
                    stage = f"check p={p}"
                    check(schedule)
                except CollError as err:
                    out.errors += 1
                    if (problem := error_problem(err, program.sources)) is not None:
                        problems.append(f"{stage}: {problem}")
                    continue
                out.elaborated += 1
    except Timeout as exc:
        problems.append(f"{stage}: {exc}")
    except Exception as exc:
        problems.append(_unexpected(stage, exc))
    finally:
        out.problems = tuple(problems)
    return out


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


def test_harness_reports_foreign_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    """`exercise` would notice a non-CollError escaping, and a CollError without a usable span."""
    example = EXAMPLE_FILES[0]

    def broken(program: Program, values: Mapping[str, int]) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(sys.modules[__name__], "elaborate", broken)
    outcome = exercise(example.read_text(), str(example), p_values=(2,))
    assert len(outcome.problems) == 1
    assert "elaborate p=2: KeyError" in outcome.problems[0]

    sources = {"a.coll": "x\n"}
    assert "without a span" in str(error_problem(CollError("no span"), sources))
    assert "unknown file" in str(error_problem(CollError("m", Span("b.coll", 1, 1, 1, 2)), sources))
    assert "past the end" in str(error_problem(CollError("m", Span("a.coll", 3, 1, 3, 2)), sources))
    assert error_problem(CollError("m", Span("a.coll", 1, 1, 1, 2)), sources) is None


def test_examples_are_found() -> None:
    assert len(EXAMPLE_FILES) >= 10, EXAMPLE_FILES
    for example in EXAMPLE_FILES:
        assert exercise(example.read_text(), str(example)).problems == ()


def test_generator_is_deterministic_and_large() -> None:
    variants = all_variants()
    assert len(variants) >= MIN_VARIANTS
    assert {v.example for v in variants} == set(EXAMPLE_FILES)
    assert [v.text for v in variants_of(EXAMPLE_FILES[0])] == [
        v.text for v in variants if v.example == EXAMPLE_FILES[0]
    ]
    assert {v.kind for v in variants} == {m.__name__.lstrip("_") for m in MUTATORS}


_EXERCISED: dict[str, Outcome] = {}


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_malformed_variants_fail_cleanly(example: Path) -> None:
    """Every variant of ``example`` either works or fails with a well-located CollError."""
    failures = []
    first_text = ""
    for variant in variants_of(example):
        outcome = exercise(variant.text, str(example))
        _EXERCISED[variant.name] = outcome
        failures.extend(f"{variant.name}: {problem}" for problem in outcome.problems)
        if outcome.problems and not first_text:
            first_text = variant.text
    assert not failures, (
        f"{len(failures)} contract violation(s) (reproduce: variants_of(path), match the label):\n"
        + "\n".join(failures[:25])
        + f"\n--- text of the first failing variant ---\n{first_text[:3000]}"
    )


def test_enough_variants_were_exercised() -> None:
    """Runs after the per-example tests (file order); also exercises any that were deselected."""
    for variant in all_variants():
        if variant.name not in _EXERCISED:
            _EXERCISED[variant.name] = exercise(variant.text, str(variant.example))
    outcomes = [_EXERCISED[v.name] for v in all_variants()]
    assert len(outcomes) >= MIN_VARIANTS
    # The mix is sane: most variants are rejected, some still parse, a few still elaborate.
    assert sum(o.errors > 0 for o in outcomes) > len(outcomes) // 2
    assert sum(o.parsed for o in outcomes) >= 50
    assert sum(o.elaborated > 0 for o in outcomes) >= 20
    bad = [f"{v.name}: {pr}" for v in all_variants() for pr in _EXERCISED[v.name].problems]
    assert not bad, "\n".join(bad[:25])


@st.composite
def _stacked_mutations(draw: st.DrawFn) -> tuple[Path, str]:
    """An example with one to three mutations applied in a row."""
    example = draw(st.sampled_from(EXAMPLE_FILES))
    text = example.read_text()
    for _ in range(draw(st.integers(1, 3))):
        rng = random.Random(draw(st.integers(0, 2**32 - 1)))
        mutate = draw(st.sampled_from(MUTATORS))
        options = [new for _, new in mutate(text, tokens(text), rng)]
        if options:
            text = options[draw(st.integers(0, len(options) - 1))]
    return example, text


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_stacked_mutations())
def test_stacked_mutations_fail_cleanly(case: tuple[Path, str]) -> None:
    example, text = case
    outcome = exercise(text, str(example), p_values=(2, 5))
    assert not outcome.problems, (outcome.problems, text)


# --------------------------------------------------------------------------
# Through the CLI
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of ``examples/`` (with ``lib/``), where variants can sit next to the originals."""
    root = tmp_path_factory.mktemp("malformed") / "examples"
    shutil.copytree(EXAMPLES_DIR, root)
    return root


def _cli_sample() -> list[Variant]:
    variants = all_variants()
    stride = max(1, len(variants) // CLI_SAMPLE)
    return list(variants[::stride][:CLI_SAMPLE])


def test_cli_sample(examples_copy: Path) -> None:
    """``collc check VARIANT -p 4``: exit 0, 1 or 2; errors as ``file:line:col: error:``; no traceback."""
    sample = _cli_sample()
    assert len(sample) >= CLI_SAMPLE - 1
    runner = CliRunner()
    failures = []
    codes: dict[int, int] = {}
    for i, variant in enumerate(sample):
        path = examples_copy / f"variant_{i:02d}_{variant.example.name}"
        path.write_text(variant.text)
        result = runner.invoke(cli_main, ["check", str(path), "-p", "4"])
        codes[result.exit_code] = codes.get(result.exit_code, 0) + 1
        why = None
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            why = f"raised {type(result.exception).__name__}: {result.exception}"
        elif result.exit_code not in (0, 1, 2):
            why = f"exit code {result.exit_code}"
        elif "Traceback" in result.output:
            why = "a traceback in the output"
        elif result.exit_code == 2 and not re.match(r"^\S+:\d+:\d+: error: ", result.stderr):
            why = f"exit 2 without 'file:line:col: error:': {result.stderr[:200]!r}"
        if why is not None:
            failures.append(f"{variant.name} (as {path.name}): {why}")
    assert not failures, "\n".join(failures)
    assert codes.get(2, 0) > len(sample) // 2, codes


def test_cli_subprocess_sample(examples_copy: Path) -> None:
    """A few variants through the installed ``collc`` entry point, in fresh interpreters."""
    sample = _cli_sample()[::10][:3]
    for i, variant in enumerate(sample):
        path = examples_copy / f"proc_{i:02d}_{variant.example.name}"
        path.write_text(variant.text)
        proc = collc_check_subprocess(path)
        assert proc.returncode in (0, 1, 2), (variant.name, proc.stderr)
        assert "Traceback" not in proc.stderr, (variant.name, proc.stderr)
