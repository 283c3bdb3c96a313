"""`collc viz`: pictures of a schedule (docs/viz.md)."""

from __future__ import annotations

import re

import click
from click.core import ParameterSource

from collc.cli.common import (
    RANGE_NOTE,
    check_output,
    instance_options,
    load_instance,
    main,
    parse_size,
    write_failed,
)
from collc.cli.network import MODEL_PARAMS, check_fit, model_of, model_options, network_of, network_options


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
    "--timeline",
    is_flag=True,
    help="Draw the messages of a dataflow simulation over time, one track per rank, instead of the steps.",
)
@click.option(
    "--color",
    "color_by",
    type=click.Choice(["step", "port", "level"]),
    default=None,
    help="Arrow (or bar) colour: the step [default], the port (step view; torus: dimension and direction, "
    "otherwise the signed distance to the peer), or the level crossed, within a node or between nodes "
    "[default with --node].",
)
@click.option(
    "--steps",
    "steps_text",
    default=None,
    metavar="A..B",
    help=f"Only steps A to B (also A.., ..B, or A; {RANGE_NOTE}).",
)
@click.option(
    "--max-panels", type=click.IntRange(1, 64), default=16, show_default=True, help="At most this many step panels."
)
@click.option("--no-merge", is_flag=True, help="A panel per step, even for consecutive steps that are alike.")
@network_options(
    required=False,
    topology_help="With --timeline: the network between nodes, as for collc sim [default: full:N, a link between "
    "every pair of the N nodes].",
)
@click.option(
    "--size", "size_text", default="1MiB", show_default=True, metavar="SIZE", help="With --timeline: the vector size."
)
@model_options
def viz(
    file: str,
    p: str | None,
    dims: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    output: str,
    chunk: int | None,
    timeline: bool,
    color_by: str | None,
    steps_text: str | None,
    max_panels: int,
    no_merge: bool,
    topology_text: str | None,
    node_text: str | None,
    placement: str,
    size_text: str,
    **model: str | None,
) -> None:
    """Draw a schedule's communication as a picture (PNG, SVG or PDF).

    By default one panel per step, an arrow from sender to receiver for every send (solid: the
    receiver reduces, dashed: it copies), consecutive steps that are alike up to the chunk ids
    sharing a panel, and a summary of the chunks every pair exchanged.  With --chunk C, one
    picture of every send that carries chunk C, coloured by step.  With --node, the ranks are
    grouped by node and the arrows coloured by the level they cross.  With --timeline, the
    messages of a dataflow simulation (as collc sim --execution dataflow) over time, one track per
    rank, so that steps that overlap show.  The schedule is drawn as it is, not verified first (a
    wrong schedule can be looked at too)."""
    from collc import viz as pictures
    from collc.hierarchy import Hierarchical

    problem = pictures.suffix_problem(output)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'-o' / '--output'")
    check_output(output, "-o")
    _check_combination(chunk, timeline, color_by, node_text)
    schedule = load_instance(file, p, params, dims, codecs).schedule
    steps = parse_steps(steps_text, len(schedule.steps)) if steps_text is not None else None
    problem = pictures.chunk_problem(schedule, chunk) if chunk is not None else None
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--chunk'")
    topology = None
    if timeline or node_text is not None or topology_text is not None or placement != "block":
        topology = network_of(topology_text, node_text, placement, schedule.nranks)
        check_fit(topology, schedule.nranks, node_text)
    hierarchy = topology if isinstance(topology, Hierarchical) else None
    color = color_by if color_by is not None else "level" if hierarchy is not None else "step"
    try:
        if timeline:
            size = parse_size(size_text, "--size")
            try:
                picture = pictures.draw_timeline(
                    schedule, output, topology=topology, size_bytes=size, model=model_of(**model),  # type: ignore[arg-type]
                    color_by="level" if color == "level" else "step", steps=steps,
                )  # fmt: skip
            except ValueError as err:  # the size does not fit the collective
                raise click.BadParameter(f"{size_text!r}: {err}", param_hint="'--size'") from None
            overlap = f"{picture.overlapping} bars overlap an earlier bar of their track"
            click.echo(f"wrote {picture.path}: {picture.note}; {overlap}; done at {picture.time * 1e6:.4g} us")
        elif chunk is not None:
            picture = pictures.draw_chunk_flow(schedule, output, chunk, steps=steps, hierarchy=hierarchy)
            click.echo(f"wrote {picture.path}: chunk {chunk}, {picture.arrows} sends carry it ({picture.note})")
        else:
            shown = pictures.draw_steps(
                schedule, output, color_by=color, max_panels=max_panels,  # type: ignore[arg-type]
                steps=steps, merge=not no_merge, hierarchy=hierarchy,
            )  # fmt: skip
            panels = f"{shown.panels} panel{'s' * (shown.panels != 1)}"
            click.echo(f"wrote {shown.path}: {panels}, {shown.arrows} sends drawn; {shown.note}")
    except OSError as err:
        write_failed(output, "-o", err)


def _timeline_only(command: click.Command) -> click.Command:
    """Say in the help of the network model's options that they matter with --timeline only (the step and chunk
    views do not simulate; `_check_combination` refuses them there)."""
    for param in command.params:
        if isinstance(param, click.Option) and param.name in MODEL_PARAMS and param.help:
            param.help = f"With --timeline: {param.help[0].lower()}{param.help[1:]}"
    return command


_timeline_only(viz)


def _check_combination(chunk: int | None, timeline: bool, color_by: str | None, node_text: str | None) -> None:
    """Options that do not go together, or that another one's view ignores: a usage error naming them."""
    ctx = click.get_current_context()

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)

    if chunk is not None and timeline:
        raise click.UsageError("--chunk and --timeline are two different pictures: give one of them")
    if chunk is not None and color_by is not None:
        raise click.UsageError("--color applies to the step view and --timeline; --chunk pictures are coloured by step")
    if color_by == "level" and node_text is None:
        raise click.BadParameter("the level a message crosses needs ranks on nodes (--node)", param_hint="'--color'")
    if timeline and color_by == "port":
        raise click.BadParameter("a timeline is coloured by step or level, not port", param_hint="'--color'")
    if timeline:
        for name, option in (("max_panels", "--max-panels"), ("no_merge", "--no-merge")):
            if given(name):
                raise click.UsageError(f"{option} applies to the step view, not to --timeline")
    else:
        for name in ("size_text", *MODEL_PARAMS):
            if given(name):
                option = "--size" if name == "size_text" else "--" + name.replace("_", "-")
                raise click.UsageError(f"{option} applies to --timeline only")
