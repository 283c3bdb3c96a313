"""Shared pieces of the command line: the `main` group, exit codes, option parsing, loading programs.

Exit codes: 0 ok, 1 the schedule is wrong, 2 usage or input error."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from collc import api
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


def parse_size(text: str) -> int:
    """``4MiB``, ``64K``, ``1000`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise click.BadParameter(f"{text!r} is not a size (examples: 8, 64K, 4MiB, 1GiB)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_sizes(text: str) -> list[int]:
    """``8:64MiB`` -> 8, 16, ..., 64 MiB (doubling); a single size -> [size]."""
    if ":" not in text:
        return [parse_size(text)]
    lo_text, hi_text = text.split(":", 1)
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if lo < 1 or hi < lo:
        raise click.BadParameter(f"{text!r}: need 1 <= low <= high")
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def parse_param_value(text: str) -> ParamValue:
    """``16`` -> 16; ``4x4`` -> (4, 4)."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"\d+(x\d+)+", text):
        return tuple(int(d) for d in text.split("x"))
    raise click.BadParameter(f"{text!r} is neither an int nor torus dimensions like 4x4")


def collect_ranges(p: str | None, params: tuple[str, ...], dims: str | None) -> dict[str, list[ParamValue]]:
    """Parameter values from the command line: single values, ranges and lists (see parse_int_spec)."""
    ranges: dict[str, list[ParamValue]] = {}
    try:
        if p is not None:
            ranks = parse_int_spec(p)
            if ranks and ranks[0] < 1:
                raise ValueError(f"the number of ranks must be at least 1, got {ranks[0]}")
            ranges["p"] = list(ranks)
        if dims is not None:
            ranges["dims"] = list(parse_dims_spec(dims))
    except ValueError as err:
        hint = "-p/--ranks" if p and "dims" not in ranges else "--dims"
        raise click.BadParameter(str(err), param_hint=hint) from None
    for item in params:
        if "=" not in item:
            raise click.BadParameter(f"{item!r}: expected NAME=VALUE", param_hint="--param")
        name, value = (part.strip() for part in item.split("=", 1))
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise click.BadParameter(f"{name!r} is not a parameter name", param_hint="--param")
        try:
            if re.fullmatch(r"\d+(x\d+)+(,\d+(x\d+)*)*", value):
                ranges[name] = list(parse_dims_spec(value))
            else:
                ranges[name] = list(parse_int_spec(value))
        except ValueError as err:
            raise click.BadParameter(f"{name}={value}: {err}", param_hint="--param") from None
    return ranges


def collect_params(p: str | None, params: tuple[str, ...], dims: str | None = None) -> dict[str, ParamValue]:
    """Exactly one value per parameter (for commands that work on one instance)."""
    values: dict[str, ParamValue] = {}
    for name, options in collect_ranges(p, params, dims).items():
        if len(options) != 1:
            raise click.UsageError(f"this command takes one value of {name}, got {len(options)}; use 'collc check'")
        values[name] = options[0]
    return values


def parse_codec_options(items: tuple[str, ...]) -> dict[str, str]:
    """``--codec q=ebq(eb=1e-4)`` options -> {"q": "ebq(eb=1e-4)"} (the specs are checked on loading)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        name, spec = name.strip(), spec.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", name) or not spec:
            raise click.BadParameter(f"{item!r}: expected NAME=SPEC, e.g. q=ebq(eb=1e-4)", param_hint="--codec")
        out[name] = spec
    return out


def instance_options(fn: F) -> F:
    fn = click.option(
        "--codec",
        "codecs",
        multiple=True,
        metavar="NAME=SPEC",
        help="Replace a declared codec, e.g. q=ebq(eb=1e-4) (docs/compression.md).",
    )(fn)
    fn = click.option(
        "--param", "params", multiple=True, metavar="NAME=SPEC", help="Another parameter (a value, range or list)."
    )(fn)
    fn = click.option("--dims", default=None, metavar="SHAPES", help="Torus shapes, e.g. 4x4 or 4x4,8x8 (dims).")(fn)
    fn = click.option(
        "-p", "--ranks", "p", default=None, metavar="SPEC", help="Ranks: 16, 2..64, pow2:2..1024, even:2..512, 4,6,12."
    )(fn)
    fn = click.argument("file")(fn)
    return fn


def fail_input(err: CollError, sources: dict[str, str] | None = None) -> NoReturn:
    click.echo(format_error(err, sources or {}), err=True)
    sys.exit(EXIT_INPUT)


def load_algorithm(file: str, codecs: tuple[str, ...] = ()) -> api.Algorithm:
    overrides = parse_codec_options(codecs)
    try:
        alg = api.load(file)
    except CollError as err:
        fail_input(err, err.sources)
    try:
        return alg.with_codecs(overrides)
    except CollError as err:
        fail_input(CollError(f"--codec: {err.message}", None, err.notes), alg.sources)


def load_instance(
    file: str, p: str | None, params: tuple[str, ...], dims: str | None = None, codecs: tuple[str, ...] = ()
) -> api.Instance:
    values = collect_params(p, params, dims)
    alg = load_algorithm(file, codecs)
    try:
        return alg.instantiate(**values)
    except CollError as err:
        fail_input(err, alg.sources)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="collc")
def main() -> None:
    """collc: write a collective once, prove it for every rank count, run it."""
