"""`collc viz`: pictures of a schedule (docs/viz.md)."""

from __future__ import annotations

import re

import click

from collc.cli.common import fail_input, instance_options, load_instance, main
from collc.diagnostics import CollError


def parse_steps(text: str, nsteps: int) -> range:
    """``A..B`` (steps A to B, both included, as ``-p 2..8``), ``A..``, ``..B`` or one step ``A``."""
    m = re.fullmatch(r"\s*(\d*)\s*(?:(\.\.)\s*(\d*))?\s*", text)
    if not m or not (m.group(1) or m.group(3)) or (not m.group(2) and not m.group(1)):
        expected = "expected A..B (both included), A.., ..B or one step A"
        raise click.BadParameter(f"{text!r}: {expected}", param_hint="'--steps'")
    lo = int(m.group(1)) if m.group(1) else 0
    hi = (int(m.group(3)) + 1 if m.group(3) else nsteps) if m.group(2) else lo + 1
    if not 0 <= lo < hi <= nsteps:
        has = f"steps 0..{nsteps - 1}" if nsteps else "no steps"
        raise click.BadParameter(f"{text!r} selects no steps or steps past the end: the schedule has {has}",
                                 param_hint="'--steps'")  # fmt: skip
    return range(lo, hi)


@main.command()
@instance_options
@click.option(
    "-o", "--output", required=True, metavar="OUT.png|svg|pdf", help="The picture; its suffix picks the format."
)
@click.option("--chunk", type=int, default=None, metavar="C", help="Draw where chunk C travels instead of the steps.")
@click.option(
    "--color",
    "color_by",
    type=click.Choice(["step", "port"]),
    default=None,
    help="Arrow colour in the step view: the step [default], or the port (torus: dimension and direction; "
    "otherwise the signed distance to the peer).",
)
@click.option("--steps", "steps_text", default=None, metavar="A..B", help="Only steps A to B (also A.., ..B, or A).")
@click.option(
    "--max-panels", type=click.IntRange(1, 64), default=16, show_default=True, help="At most this many step panels."
)
@click.option("--no-merge", is_flag=True, help="A panel per step, even for consecutive steps that are alike.")
def viz(
    file: str,
    p: str | None,
    dims: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    output: str,
    chunk: int | None,
    color_by: str | None,
    steps_text: str | None,
    max_panels: int,
    no_merge: bool,
) -> None:
    """Draw a schedule's communication as a picture (PNG, SVG or PDF).

    By default one panel per step, an arrow from sender to receiver for every send (solid: the
    receiver reduces, dashed: it copies), consecutive steps that are alike up to the chunk ids
    sharing a panel, and a summary of the chunks every pair exchanged.  With --chunk C, one
    picture of every send that carries chunk C, coloured by step.  The schedule is drawn as it
    is, not verified first (a wrong schedule can be looked at too)."""
    from collc import viz as pictures

    problem = pictures.suffix_problem(output)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'-o' / '--output'")
    if chunk is not None and color_by is not None:
        raise click.UsageError("--color applies to the step view; --chunk pictures are coloured by step")
    schedule = load_instance(file, p, params, dims, codecs).schedule
    steps = parse_steps(steps_text, len(schedule.steps)) if steps_text is not None else None
    problem = pictures.chunk_problem(schedule, chunk) if chunk is not None else None
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--chunk'")
    try:
        if chunk is not None:
            picture = pictures.draw_chunk_flow(schedule, output, chunk, steps=steps)
            click.echo(f"wrote {picture.path}: chunk {chunk}, {picture.arrows} sends carry it ({picture.note})")
        else:
            picture = pictures.draw_steps(
                schedule, output, color_by="port" if color_by == "port" else "step", max_panels=max_panels,
                steps=steps, merge=not no_merge,
            )  # fmt: skip
            panels = f"{picture.panels} panel{'s' * (picture.panels != 1)}"
            click.echo(f"wrote {picture.path}: {panels}, {picture.arrows} sends drawn; {picture.note}")
    except OSError as err:
        fail_input(CollError(f"cannot write {output}: {err.strerror or err}"))
