"""Shared pieces of the command line: the `main` group, exit codes, option parsing, loading programs.

Exit codes: 0 ok, 1 the schedule is wrong, 2 usage or input error."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from collc import api
from collc.cli import progress
from collc.diagnostics import CollError, format_error
from collc.ir import ParamValue
from collc.verify.sweep import parse_dims_spec, parse_int_spec

EXIT_OK, EXIT_WRONG, EXIT_INPUT = 0, 1, 2
F = TypeVar("F", bound=Callable[..., Any])

# --------------------------------------------------------------------------
# Argument parsing helpers
# --------------------------------------------------------------------------

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 10**6,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 10**9,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 10**12,
    "tib": 1 << 40,
}


def option_hint(*names: str) -> str:
    """How click names an option in its errors: ``'-p' / '--ranks'``."""
    return " / ".join(f"'{name}'" for name in names)


RANKS = option_hint("-p", "--ranks")

RANGE_NOTE = "a..b includes b here, while a .. b in a .coll program stops before b"
"""What every help text that takes a range says about its end."""


def bad_value(option: str, text: str, why: str) -> click.BadParameter:
    """``Invalid value for '--sizes': '1K:foo': ...``: an option's error names the option and the value it got
    (``why`` starting with "is " reads on from the value: ``'x' is not a size``)."""
    if why.startswith(repr(text)):  # the reason names the value already
        message = why
    else:
        message = f"{text!r} {why}" if why.startswith("is ") else f"{text!r}: {why}"
    return click.BadParameter(message, param_hint=option if option.startswith("'") else f"'{option}'")


def parse_size(text: str, option: str = "--size") -> int:
    """``4MiB``, ``64K``, ``1000`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise bad_value(option, text, "is not a size (examples: 8, 64K, 4MiB, 1GiB)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_sizes(text: str, option: str = "--sizes") -> list[int]:
    """``8:64MiB`` -> 8, 16, ..., 64 MiB (doubling); a single size -> [size]."""
    if ":" not in text:
        return [parse_size(text, option)]
    lo_text, hi_text = text.split(":", 1)
    lo, hi = _size_or_none(lo_text), _size_or_none(hi_text)
    if lo is None or hi is None:
        bad = lo_text if lo is None else hi_text
        raise bad_value(option, text, f"{bad.strip()!r} is not a size (a sweep is LOW:HIGH, e.g. 8:64MiB)")
    if lo < 1 or hi < lo:
        raise bad_value(option, text, f"a sweep LOW:HIGH needs 1 <= LOW <= HIGH, got {lo} and {hi} bytes")
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def _size_or_none(text: str) -> int | None:
    try:
        return parse_size(text)
    except click.BadParameter:
        return None


def parse_param_value(text: str, option: str = "--param", item: str | None = None) -> ParamValue:
    """``16`` -> 16; ``4x4`` -> (4, 4).  Errors name ``item`` (the whole ``NAME=VALUE``) when given."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"\d+(x\d+)+", text):
        return tuple(int(d) for d in text.split("x"))
    if item is None:
        raise bad_value(option, text, "is neither an int nor torus dimensions like 4x4")
    raise bad_value(option, item, f"{text!r} is neither an int nor torus dimensions like 4x4")


def parse_param_item(item: str, option: str = "--param") -> tuple[str, str]:
    """``NAME=VALUE`` -> (name, value text)."""
    name, sep, value = (part.strip() for part in item.partition("="))
    if not sep:
        raise bad_value(option, item, "expected NAME=VALUE, e.g. root=2")
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise bad_value(option, item, f"{name!r} is not a parameter name")
    if not value:
        raise bad_value(option, item, f"no value after {name}=")
    return name, value


def _ranks(p: str) -> list[int]:
    try:
        ranks = parse_int_spec(p)
    except ValueError as err:
        raise bad_value(RANKS, p, str(err)) from None
    if ranks and ranks[0] < 1:
        raise bad_value(RANKS, p, f"the number of ranks must be at least 1, got {ranks[0]}")
    return ranks


def _shapes(text: str, option: str) -> list[tuple[int, ...]]:
    try:
        shapes = parse_dims_spec(text)
    except ValueError as err:
        raise bad_value(option, text, str(err)) from None
    for shape in shapes:
        if min(shape) < 1:
            shown = "x".join(map(str, shape))
            raise bad_value(option, text, f"every dimension of a torus is at least 1, got {shown}")
    return shapes


def collect_ranges(p: str | None, params: tuple[str, ...], dims: str | None) -> dict[str, list[ParamValue]]:
    """Parameter values from the command line: single values, ranges and lists (see parse_int_spec)."""
    ranges: dict[str, list[ParamValue]] = {}
    if p is not None:
        ranges["p"] = list(_ranks(p))
    if dims is not None:
        ranges["dims"] = list(_shapes(dims, "--dims"))
    for item in params:
        name, value = parse_param_item(item)
        if name in ranges:
            raise bad_value("--param", item, f"{name} is given twice (also by {option_of(name, p, dims)})")
        if re.fullmatch(r"\d+(x\d+)+(,\d+(x\d+)*)*", value):
            ranges[name] = list(_shapes(value, "--param"))
            continue
        try:
            ranges[name] = list(parse_int_spec(value))
        except ValueError as err:
            raise bad_value("--param", item, str(err)) from None
    return ranges


def option_of(name: str, p: str | None, dims: str | None) -> str:
    """The option that gave parameter ``name`` its values, as click names it in errors."""
    if name == "p" and p is not None:
        return RANKS
    if name == "dims" and dims is not None:
        return "'--dims'"
    return "'--param'"


def _given(name: str, p: str | None, params: tuple[str, ...], dims: str | None) -> str:
    """The text the command line gave for parameter ``name``."""
    if name == "p" and p is not None:
        return p
    if name == "dims" and dims is not None:
        return dims
    return next(item for item in params if item.partition("=")[0].strip() == name)


def collect_params(p: str | None, params: tuple[str, ...], dims: str | None = None) -> dict[str, ParamValue]:
    """Exactly one value per parameter (for commands that work on one instance, unlike `collc check`)."""
    values: dict[str, ParamValue] = {}
    command = click.get_current_context(silent=True)
    verb = f"collc {command.info_name}" if command is not None and command.info_name else "this command"
    for name, options in collect_ranges(p, params, dims).items():
        if len(options) != 1:
            given, origin = _given(name, p, params, dims), option_of(name, p, dims)
            what = {RANKS: "one rank count", "'--dims'": "one torus shape"}.get(origin, f"one value of {name}")
            flag = {RANKS: "-p", "'--dims'": "--dims"}.get(origin, "--param")
            raise click.BadParameter(
                f"{verb} takes {what}, got {given!r} ({len(options)} values); "
                f"'collc check FILE {flag} {given}' checks a range",
                param_hint=origin,
            )
        values[name] = options[0]
    return values


def parse_codec_options(items: tuple[str, ...]) -> dict[str, str]:
    """``--codec q=ebq(eb=1e-4)`` options -> {"q": "ebq(eb=1e-4)"} (the specs are checked on loading)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        name, spec = name.strip(), spec.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", name) or not spec:
            raise bad_value("--codec", item, "expected NAME=SPEC, e.g. q=ebq(eb=1e-4)")
        out[name] = spec
    return out


def _parameter_options(fn: F, ranges: bool, ranks_help: str | None = None, ranks_metavar: str | None = None) -> F:
    fn = click.option(
        "--codec",
        "codecs",
        multiple=True,
        metavar="NAME=SPEC",
        help="Replace a declared codec, e.g. q=ebq(eb=1e-4) (docs/compression.md).",
    )(fn)
    if ranges:
        param_help, dims_help = (
            f"Another parameter (a value, range or list; {RANGE_NOTE}).",
            "Torus shapes, e.g. 4x4 or 4x4,8x8 (dims).",
        )
        default_ranks_help = f"Ranks: 16, 2..64, pow2:2..1024, even:2..512, 4,6,12, or all ({RANGE_NOTE})."
    else:
        param_help, dims_help = "Another parameter (one value).", "The torus shape, e.g. 4x4 (dims)."
        default_ranks_help = "The number of ranks (one; 'collc check' takes ranges)."
    metavar = ("NAME=SPEC", "SHAPES", "SPEC") if ranges else ("NAME=VALUE", "SHAPE", "N")
    fn = click.option("--param", "params", multiple=True, metavar=metavar[0], help=param_help)(fn)
    fn = click.option("--dims", default=None, metavar=metavar[1], help=dims_help)(fn)
    fn = click.option(
        "-p", "--ranks", "p", default=None, metavar=ranks_metavar or metavar[2], help=ranks_help or default_ranks_help
    )(fn)
    fn = click.argument("file")(fn)
    return fn


def instance_options_with(ranks_help: str, ranks_metavar: str) -> Callable[[F], F]:
    """`instance_options` with another help text (and metavar) for -p: a command that also takes ranges."""

    def add(fn: F) -> F:
        return _parameter_options(fn, ranges=False, ranks_help=ranks_help, ranks_metavar=ranks_metavar)

    return add


def instance_options(fn: F) -> F:
    """FILE, -p, --dims, --param, --codec for a command that works on one instance."""
    return _parameter_options(fn, ranges=False)


def range_options(fn: F) -> F:
    """FILE, -p, --dims, --param, --codec where each may give a range of values (collc check)."""
    return _parameter_options(fn, ranges=True)


# --------------------------------------------------------------------------
# Output paths
# --------------------------------------------------------------------------


def output_problem(path: str | Path, *, folder: bool = False, parents: bool = True) -> str | None:
    """Why ``path`` cannot be written, or None when it can: a file there (a folder, with ``folder``), made
    with its missing parent folders when ``parents``.  The nearest existing folder is probed by making and
    removing a temporary folder in it, so that nothing is left behind."""
    target = Path(path)
    if target.exists():
        if folder and not target.is_dir():
            return f"{target} is a file, not a folder" if target.is_file() else f"{target} is not a folder"
        if not folder and target.is_dir():
            return f"{target} is a folder"
        if not folder:
            return None if os.access(target, os.W_OK) else f"{target} is not writable"
        return _probe(target)
    start = target if folder else target.parent
    nearest = start
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        return f"{nearest} is a file, not a folder" if nearest.is_file() else f"{nearest} is not a folder"
    if nearest != start and not parents:
        return f"there is no folder {start}"
    return _probe(nearest)


def _probe(folder: Path) -> str | None:
    try:
        made = tempfile.mkdtemp(prefix=".collc-probe-", dir=folder)
    except OSError as err:
        return f"nothing can be made in {folder} ({err.strerror or err})"
    os.rmdir(made)
    return None


def check_output(path: str | Path, option: str, *, folder: bool = False, parents: bool = True) -> None:
    """Exit 2 with ``cannot write PATH (OPTION): why`` unless `output_problem` finds none."""
    problem = output_problem(path, folder=folder, parents=parents)
    if problem is not None:
        fail_input(CollError(f"cannot write {path} ({option}): {problem}"))


def write_failed(path: str | Path, option: str, err: OSError) -> NoReturn:
    """Exit 2 for an output that could not be written after all: the file and the system's reason."""
    where = f"{err.filename}: " if err.filename and str(err.filename) != str(path) else ""
    fail_input(CollError(f"cannot write {path} ({option}): {where}{err.strerror or err}"))


def fail_input(err: CollError, sources: dict[str, str] | None = None) -> NoReturn:
    progress.hide()
    click.echo(format_error(err, sources or {}), err=True)
    sys.exit(EXIT_INPUT)


def load_algorithm(
    file: str,
    codecs: tuple[str, ...] = (),
    fail: Callable[[CollError, dict[str, str]], NoReturn] = fail_input,
) -> api.Algorithm:
    """The program with its ``--codec`` overrides; a program that does not load goes to ``fail`` (default: the
    diagnostic on stderr, exit 2)."""
    overrides = parse_codec_options(codecs)
    try:
        alg = api.load(file)
    except CollError as err:
        fail(err, err.sources)
    for name, spec in overrides.items():  # one at a time, so that an error names its --codec option
        try:
            alg.with_codecs({name: spec})
        except CollError as err:
            raise bad_value("--codec", f"{name}={spec}", err.message) from None
    return alg.with_codecs(overrides)


def check_values(
    alg: api.Algorithm,
    ranges: dict[str, list[ParamValue]],
    p: str | None,
    params: tuple[str, ...],
    dims: str | None,
) -> None:
    """Every given value fits its parameter (known name, int or shape) and no parameter lacks one:
    checked before anything is elaborated or verified.  Constraints are left to each instance."""
    for name, values in ranges.items():
        for value in values:
            problem = alg.param_problem(name, value)
            if problem is not None:
                raise click.BadParameter(
                    f"{_given(name, p, params, dims)!r}: {problem}", param_hint=option_of(name, p, dims)
                )
    try:
        alg.check_given(ranges)
    except CollError as err:
        fail_input(err, alg.sources)


def load_instance(
    file: str, p: str | None, params: tuple[str, ...], dims: str | None = None, codecs: tuple[str, ...] = ()
) -> api.Instance:
    values = collect_params(p, params, dims)
    alg = load_algorithm(file, codecs)
    check_values(alg, {name: [value] for name, value in values.items()}, p, params, dims)
    try:
        return alg.instantiate(**values)
    except CollError as err:
        fail_input(err, alg.sources)


class _Commands(click.Group):
    """The `collc` group: its help lists every command with its first sentence whole, not cut at a width."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, first_sentence(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def first_sentence(cmd: click.Command) -> str:
    """The first sentence of a command's help (its short help when it has one), on one line."""
    text = cmd.short_help or (cmd.help or "").split("\f", 1)[0].split("\n\n", 1)[0]
    text = " ".join(text.replace("\b", "").split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="collc")
def main() -> None:
    """collc: write a collective once, prove it for every rank count, run it."""
