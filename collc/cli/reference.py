"""The command-line reference (docs/cli.md), rendered from the `collc` click group itself.

``python -m collc.cli.reference`` prints the markdown; ``--write`` writes it to
docs/cli.md next to this checkout's sources.  Every command of `collc.cli.main`
is listed, sorted by name (subcommands of a command group under it), with its
usage line, help text, arguments and options: each option's names, value,
default, choices and help.  The text depends only on the commands'
declarations, not on click's own help formatter, so that it reads the same with
every click version.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import click

from collc.cli.progress import DELAY_S

_UNSET: Any = getattr(click.core, "UNSET", None)  # click >= 8.3: the default of an option without one

TITLE = "# Command-line reference"
INTRO = (
    "Generated from the `collc` command itself by `python -m collc.cli.reference --write`; "
    "do not edit by hand (a test compares this file with a fresh rendering).\n\n"
    "Exit codes of every command: 0 success, 1 the schedule is wrong (or a run produced wrong "
    "elements), 2 a usage error or a mistake in the program. `FILE` is a `.coll` file or the "
    "name of a bundled example (`collc examples`). A flag is off unless given.\n\n"
    "Progress: on a terminal, `collc check`, `collc sim`, `collc run` and `collc compile -p any` draw a progress "
    "bar on stderr "
    f"while they work (a range of instances at once, anything else once it has run for {DELAY_S:g} s) and erase it "
    "when they are done, so that what they print is the same with or without it; with `--json`, or when "
    "stdout or stderr is not a terminal, there is none. The environment variable `COLLC_PROGRESS` decides "
    "otherwise: `auto` (the default), `always` (as if on a terminal, still none with `--json`) or `never`."
)


def render() -> str:
    """The markdown reference of every `collc` command."""
    from collc.cli import main

    root = click.Context(main, info_name="collc", **main.context_settings)
    out = [TITLE, "", INTRO, "", "## `collc`", ""]
    out += _usage(main, root)
    out += _help(main)
    out += _params(main, root)
    commands = _commands(main, root)
    out += ["## Commands", ""]
    out += [f"* [`{' '.join(path)}`](#{_anchor(path)}): {_first_sentence(cmd)}" for path, cmd, _ in commands]
    out.append("")
    for path, cmd, ctx in commands:
        out += [f"## `{' '.join(path)}`", ""]
        out += _usage(cmd, ctx)
        out += _help(cmd)
        out += _params(cmd, ctx)
    return "\n".join(out).rstrip("\n") + "\n"


def _commands(group: click.Group, parent: click.Context) -> list[tuple[list[str], click.Command, click.Context]]:
    """(command path, command, context) of every command below ``group``, sorted by name, depth first."""
    found = []
    for name in sorted(group.list_commands(parent)):
        cmd = group.get_command(parent, name)
        if cmd is None or cmd.hidden:
            continue
        ctx = click.Context(cmd, info_name=name, parent=parent, **cmd.context_settings)
        found.append((ctx.command_path.split(), cmd, ctx))
        if isinstance(cmd, click.Group):
            found += _commands(cmd, ctx)
    return found


def _anchor(path: list[str]) -> str:
    """The anchor GitHub gives the heading ``collc NAME`` (in backticks)."""
    return "-".join(path)


def _doc(cmd: click.Command) -> str:
    text = inspect.cleandoc(cmd.help or "")
    return text.split("\f", 1)[0].replace("\b\n", "").replace("\b", "").strip()


def _first_sentence(cmd: click.Command) -> str:
    text = " ".join((cmd.short_help or _doc(cmd)).split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _usage(cmd: click.Command, ctx: click.Context) -> list[str]:
    pieces = []
    if any(isinstance(p, click.Option) for p in cmd.get_params(ctx)):
        pieces.append("[OPTIONS]")
    for param in cmd.params:
        if isinstance(param, click.Argument):
            pieces.append(_argument_metavar(param))
    if isinstance(cmd, click.Group):
        pieces.append("COMMAND [ARGS]...")
    return ["```text", " ".join([ctx.command_path, *pieces]), "```", ""]


def _help(cmd: click.Command) -> list[str]:
    paragraphs = [" ".join(chunk.split()) for chunk in _doc(cmd).split("\n\n") if chunk.strip()]
    return [line for paragraph in paragraphs for line in (paragraph, "")]


def _argument_metavar(arg: click.Argument) -> str:
    name = arg.metavar or (arg.name or "").upper()
    if arg.nargs != 1 and not name.endswith("..."):
        name += "..."
    return name if arg.required else f"[{name}]"


def _params(cmd: click.Command, ctx: click.Context) -> list[str]:
    params = cmd.get_params(ctx)
    arguments = [p for p in params if isinstance(p, click.Argument)]
    options = [p for p in params if isinstance(p, click.Option) and not p.hidden]
    out: list[str] = []
    if arguments:
        out += ["Arguments:", ""]
        for arg in arguments:
            many = " (one or more)" if arg.nargs == -1 and arg.required else " (any number)" if arg.nargs == -1 else ""
            need = "required" if arg.required else "optional"
            out.append(f"* `{_argument_metavar(arg).strip('[]')}`: {need}{many}")
        out.append("")
    if options:
        out += ["| option | value | default | description |", "|---|---|---|---|"]
        for opt in options:
            short_first = sorted([*opt.opts, *opt.secondary_opts], key=lambda name: name.startswith("--"))
            names = ", ".join(f"`{name}`" for name in short_first)
            cells = [names, _value(opt), _default(opt), _option_help(opt)]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
    return out


def _value(opt: click.Option) -> str:
    """What the option takes: nothing for a flag, the choices, its metavar, or the type's name."""
    if opt.is_flag or opt.count:
        return ""
    kind = opt.type
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(f"`{choice}`" for choice in kind.choices)
    if opt.metavar:
        text = f"`{opt.metavar}`"
    elif isinstance(kind, click.Path):
        text = "`DIRECTORY`" if not kind.file_okay and kind.dir_okay else "`FILE`" if not kind.dir_okay else "`PATH`"
    else:
        text = f"`{_type_name(kind)}`"
    if isinstance(kind, click.IntRange | click.FloatRange):
        text += _range_text(kind)
    if opt.multiple:
        text += ", repeatable"
    return text


def _type_name(kind: click.ParamType) -> str:
    if isinstance(kind, click.IntRange) or kind is click.INT:
        return "INTEGER"
    if isinstance(kind, click.FloatRange) or kind is click.FLOAT:
        return "FLOAT"
    return "TEXT" if kind is click.STRING else kind.name.upper()


def _range_text(kind: click.IntRange | click.FloatRange) -> str:
    bounds = []
    if kind.min is not None:
        bounds.append(f"{'>' if kind.min_open else '>='} {kind.min}")
    if kind.max is not None:
        bounds.append(f"{'<' if kind.max_open else '<='} {kind.max}")
    return f" ({', '.join(bounds)})" if bounds else ""


def _default(opt: click.Option) -> str:
    if opt.required:
        return "required"
    default: Any = opt.default
    if opt.is_flag or opt.count or default is None or default is _UNSET or callable(default):
        return ""
    if isinstance(default, tuple | list):
        return ", ".join(f"`{v}`" for v in default)
    return f"`{default}`"


def _option_help(opt: click.Option) -> str:
    return " ".join((opt.help or "").split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_path() -> Path:
    """docs/cli.md of this checkout."""
    return Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _main(argv: list[str]) -> int:
    if argv not in ([], ["--write"]):
        print("usage: python -m collc.cli.reference [--write]", file=sys.stderr)
        return 2
    text = render()
    if argv == ["--write"]:
        path = reference_path()
        if not (path.parents[1] / "pyproject.toml").is_file():
            root = path.parents[1]
            print(f"error: --write updates docs/cli.md of a collc checkout; {root} is not one", file=sys.stderr)
            return 2
        path.write_text(text)
        print(f"wrote {path}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
