"""The user documentation is true: its `.coll` examples work (or fail) as stated, its links resolve,
and docs/cli.md is what the CLI renders.

docs/language.md marks its examples with HTML comments, invisible when rendered:

* A ```coll block is a whole program unless the comment line right before it (blank lines
  aside) says otherwise: ``<!-- coll: WORD WORD ... -->``, where a WORD is

  - ``decls``: the block is declarations; it is checked after the three lines of `WRAPPER`;
  - ``stmts``: the block is statements; it is checked as the body of a phase after `WRAPPER`;
  - ``verify``: the program must verify (every finding is a failure);
  - ``error="TEXT"``: loading or elaborating must fail with a `CollError` whose message
    contains TEXT;
  - ``finding="TEXT"``: the program elaborates but the verifier (``model=blocking``: under that
    execution model) reports a finding whose message contains TEXT;
  - ``formatted``: with ``error``: the next ```text block is the error exactly as `collc check`
    prints it (`collc.diagnostics.format_error`);
  - ``NAME=VALUES``: parameter values, an int, a list ``2,3,8``, an inclusive range ``1..9`` or a
    torus shape ``4x4``; the program is elaborated for every combination (default ``p=4`` when it
    declares ``p``);
  - ``file=PATH``: the file name the text is parsed as, relative to the repository root (so that
    includes resolve).

* A markdown table right after ``<!-- coll-errors: decls -->`` or ``<!-- coll-errors: stmts -->``
  lists errors, one per row: the first cell is an example in backticks (one line, wrapped as
  ``decls`` or ``stmts`` above), the second the message it gives, in backticks (``...`` inside
  stands for text that varies).

Other tests: every builtin and prelude function and every keyword of the grammar is documented;
every relative link in docs/*.md and README.md leads to a file, and an anchor to a heading.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import collc
from collc.diagnostics import CollError, format_error
from collc.verify.sweep import judge

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LANGUAGE = DOCS / "language.md"
REFERENCE = (LANGUAGE, DOCS / "errors.md")  # the pages whose examples run
WRAPPER = "algorithm fragment : allreduce\nparam p : int where p >= 1\nchunks p\n"
REGEN = os.environ.get("COLLC_REGEN_GOLDEN", "") not in ("", "0")

_MARKER = re.compile(r"<!--\s*coll:(.*?)-->", re.S)
_TABLE_MARKER = re.compile(r"<!--\s*coll-errors:\s*(decls|stmts)\s*-->")


# --------------------------------------------------------------------------
# Extracting the examples
# --------------------------------------------------------------------------


@dataclass
class Example:
    line: int  # of the opening fence
    code: str
    mode: str = "program"  # program | decls | stmts
    verify: bool = False
    error: str | None = None
    finding: str | None = None
    formatted: str | None = None  # the text block that follows, for `formatted`
    model: str = "step"
    file: str = "example.coll"
    params: dict[str, list[object]] = field(default_factory=dict)
    page: str = "language.md"

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def _values(text: str) -> list[object]:
    out: list[object] = []
    for item in text.split(","):
        if "x" in item:
            out.append(tuple(int(d) for d in item.split("x")))
        elif ".." in item:
            lo, hi = item.split("..")
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(item))
    return out


def _parse_marker(text: str, example: Example) -> None:
    for word in shlex.split(text):
        key, sep, value = word.partition("=")
        if not sep:
            if key in ("decls", "stmts"):
                example.mode = key
            elif key in ("verify", "formatted"):
                setattr(example, key, "" if key == "formatted" else True)
            else:
                raise AssertionError(f"{example.name}: unknown marker word {word!r}")
        elif key in ("error", "finding", "file", "model"):
            setattr(example, key, value)
        else:
            example.params[key] = _values(value)


def _fenced(lines: list[str], start: int) -> tuple[str, int]:
    """The text of the fenced block opening at ``start``, and the index of its closing fence."""
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[start + 1 : end]) + "\n", end


def examples() -> list[Example]:
    return [example for page in REFERENCE for example in _examples(page)]


def _examples(page: Path) -> list[Example]:
    lines = page.read_text().splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        code, end = _fenced(lines, i)
        if lines[i].strip() == "```coll":
            example = Example(line=i + 1, code=code, page=page.name)
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            match = _MARKER.fullmatch(before.strip())
            if match:
                _parse_marker(match.group(1), example)
            if example.formatted is not None:
                after = next(j for j in range(end + 1, len(lines)) if lines[j].strip())
                assert lines[after].strip() == "```text", f"{example.name}: no text block after a formatted one"
                example.formatted, _ = _fenced(lines, after)
            found.append(example)
        i = end + 1
    return found


def error_rows() -> list[tuple[str, str, str, str]]:
    """(where, mode, example, message) of every row of the error tables."""
    rows = []
    for page in REFERENCE:
        rows += _error_rows(page)
    return rows


def _error_rows(page: Path) -> list[tuple[str, str, str, str]]:
    text = page.read_text()
    rows = []
    for match in _TABLE_MARKER.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        table = text[match.end() :].lstrip("\n").split("\n\n", 1)[0].splitlines()
        assert len(table) > 2 and set(table[1]) <= set("|- :"), f"{page.name}:{line}: no table after the marker"
        for k, row in enumerate(table[2:], start=line + 3):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]]
            code = [re.fullmatch(r"`(.+)`", part.strip()) for part in cells[0].split("<br>")] if cells else []
            message = re.fullmatch(r"`(.+)`", cells[1]) if len(cells) == 2 else None
            assert code and all(code) and message, f"{page.name}:{k}: a row is | `example` | `message` |"
            example = "\n".join(m.group(1).replace("\\|", "|") for m in code if m)
            rows.append((f"{page.name}:{k}", match.group(1), example, message.group(1).replace("\\|", "|")))
    return rows


def program_text(example: Example) -> str:
    if example.mode == "decls":
        return WRAPPER + example.code
    if example.mode == "stmts":
        body = "".join(f"  {line}\n" if line.strip() else "\n" for line in example.code.splitlines())
        return WRAPPER + "phase fragment:\n" + body
    return example.code


def instances(alg: collc.Algorithm, params: dict[str, list[object]]) -> list[dict[str, object]]:
    chosen = dict(params)
    if "p" not in chosen and alg.program.param("p") is not None:
        chosen["p"] = [4]
    names = sorted(chosen)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(chosen[n] for n in names))]


# --------------------------------------------------------------------------
# The examples of docs/language.md
# --------------------------------------------------------------------------

EXAMPLES = examples()


def test_the_reference_has_examples() -> None:
    assert len(EXAMPLES) >= 40
    assert sum(1 for e in EXAMPLES if e.error is not None) >= 10
    assert sum(1 for e in EXAMPLES if e.verify) >= 5
    assert len(error_rows()) >= 40


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_example(example: Example, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # file=examples/x.coll: includes resolve from examples/
    text, path = program_text(example), example.file
    if example.error is not None:
        with pytest.raises(CollError) as info:
            alg = collc.parse(text, path)
            for values in instances(alg, example.params):
                alg.instantiate(**values)  # type: ignore[arg-type]
        err = info.value
        assert example.error in err.message, f"{example.name}: {err.message}"
        if example.formatted is not None:
            sources = err.sources or collc.parse(text, path).sources
            assert format_error(err, sources) + "\n" == example.formatted, format_error(err, sources)
        return
    alg = collc.parse(text, path)
    runs = instances(alg, example.params)
    assert runs, example.name
    for values in runs:
        inst = alg.instantiate(**values)  # type: ignore[arg-type]
        if example.verify or example.finding is not None:
            result = judge(inst.schedule, values, example.model)  # type: ignore[arg-type]
            assert result.report is not None
            messages = [f.message for f in result.report.findings]
            if example.finding is None:
                assert result.status == "ok", f"{example.name} {values}: {messages[:3]}"
            else:
                assert any(example.finding in m for m in messages), f"{example.name} {values}: {messages[:3]}"


ROWS = error_rows()


@pytest.mark.parametrize(("where", "mode", "code", "message"), ROWS, ids=[r[0] for r in ROWS])
def test_error_table_row(where: str, mode: str, code: str, message: str) -> None:
    example = Example(line=0, code=code + "\n", mode=mode)
    with pytest.raises(CollError) as info:
        alg = collc.parse(program_text(example), example.file)
        alg.instantiate(p=4)
    pattern = ".*".join(re.escape(part) for part in message.split("..."))
    assert re.search(pattern, info.value.message), f"{where}: {info.value.message}"


def test_every_builtin_and_prelude_function_is_documented() -> None:
    from collc.resources import data_dir
    from collc.values import BUILTINS

    text = LANGUAGE.read_text()
    builtins = text.split("## Builtin functions", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in BUILTINS if f"`{name}(" not in builtins]
    assert not missing, f"builtins not in the 'Builtin functions' section: {missing}"
    prelude = (data_dir("grammar") / "prelude.coll").read_text()
    section = text.split("## The prelude", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"^fn (\w+)", prelude, flags=re.M)
    assert names
    missing = [name for name in names if f"`{name}(" not in section]
    assert not missing, f"prelude functions not in 'The prelude': {missing}"


def test_every_keyword_of_the_grammar_is_documented() -> None:
    from collc.resources import data_dir

    grammar = (data_dir("grammar") / "coll.lark").read_text()
    words = set(re.findall(r'"([a-z_]+)"', grammar))
    text = LANGUAGE.read_text()
    missing = sorted(w for w in words if not re.search(rf"`[^`\n]*\b{w}\b[^`\n]*`", text))
    assert not missing, f"keywords never shown in code in language.md: {missing}"
    operators = set(re.findall(r'"([=!<>.|^&+\-*/%~]+)"', grammar)) - {"="}
    missing = sorted(op for op in operators if f"`{op}`" not in text and f"`{op}`".replace("|", "\\|") not in text)
    assert not missing, f"operators not listed in language.md: {missing}"


# --------------------------------------------------------------------------
# Links
# --------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = slug(match.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    out = []
    in_code = False
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        out.extend((number, target) for target in re.findall(r"\]\(([^)\s]+)\)", line))
    return out


DOC_FILES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for number, target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{path.name}:{number}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{path.name}:{number}: {target} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def test_slugs_follow_github() -> None:
    assert slug("`collc check`") == "collc-check"
    assert slug("Steps: what a step means") == "steps-what-a-step-means"
    assert slug("`for step` loops") == "for-step-loops"
    assert slug("if / elif / else") == "if--elif--else"


# --------------------------------------------------------------------------
# docs/cli.md
# --------------------------------------------------------------------------


def test_cli_reference_is_current() -> None:
    from collc.cli.reference import reference_path, render

    text = render()
    path = reference_path()
    assert path == DOCS / "cli.md"
    if REGEN:
        path.write_text(text)
    assert path.is_file(), "docs/cli.md is missing: run python -m collc.cli.reference --write"
    assert path.read_text() == text, (
        "docs/cli.md differs from the CLI: regenerate it with python -m collc.cli.reference --write "
        "(or run the tests with COLLC_REGEN_GOLDEN=1)"
    )


def test_cli_reference_lists_every_command() -> None:
    from collc.cli import main
    from collc.cli.reference import render

    text = render()
    for name in main.commands:
        assert f"## `collc {name}`" in text, name
    for option in ("--ranks", "--model", "--backend", "--topology", "--target"):
        assert f"`{option}`" in text, option
