"""`collc sim`: predicted goodput on a network (docs/simulate.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from collc import api
from collc.cli.common import (
    bad_value,
    check_output,
    fail_input,
    main,
    parse_param_item,
    parse_param_value,
    parse_sizes,
    write_failed,
)
from collc.cli.network import model_of, model_options, network_of, network_options
from collc.cli.progress import ProgressFn, progress_bar
from collc.diagnostics import CollError
from collc.ir import ParamValue
from collc.viz import suffix_problem

if TYPE_CHECKING:
    from collc import goodput
    from collc.simulate import NetworkModel
    from collc.topology import Topology
    from collc.traffic import Traffic


@main.command()
@click.argument("entries", nargs=-1, required=True, metavar="FILE|NAME=FILE+FILE...")
@network_options(required=True)
@click.option(
    "--execution",
    type=click.Choice(["lockstep", "dataflow"]),
    default="lockstep",
    show_default=True,
    help="lockstep: a barrier between steps; dataflow: a rank sends once its data is there.",
)
@click.option("--sizes", default="32B:512MiB", show_default=True, help="Vector sizes: SIZE or a doubling LOW:HIGH.")
@model_options
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Another parameter of the programs.")
@click.option("--exact", is_flag=True, help="Elaborate every step (long step loops are sampled otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Rows of algorithm, variant, size_bytes, time_us, goodput_gbps.")
@click.option(
    "--plot",
    "plot_path",
    default=None,
    metavar="OUT.png|svg|pdf",
    help="Draw the goodput curves (after the table is printed); the suffix picks the format.",
)
@click.option(
    "--yscale",
    type=click.Choice(["auto", "linear", "log"]),
    default="auto",
    show_default=True,
    help="The goodput axis of --plot: auto is log where the goodputs span more than two decades (as small sizes "
    "next to large ones do), linear otherwise.",
)
@click.option(
    "--traffic",
    "show_traffic",
    is_flag=True,
    help="Also give the bytes each curve puts on the topology's global links (a dragonfly's links between groups, "
    "an oversubscribed fat tree's links above the leaf switches) and their share of the bytes sent: a third table, "
    "or global_bytes and sent_bytes in the JSON rows.",
)
@click.option(
    "--no-check",
    is_flag=True,
    help="Simulate without verifying the programs first (each is checked at the simulated instance, as collc check "
    "does, and one that fails is named in a warning line before the table).",
)
def sim(
    entries: tuple[str, ...],
    topology_text: str,
    node_text: str | None,
    placement: str,
    execution: str,
    sizes: str,
    link_bw: str,
    link_latency: str,
    hop_latency: str,
    step_overhead: str | None,
    codec_bw: str,
    encode_bw: str | None,
    decode_bw: str | None,
    routing: str,
    params: tuple[str, ...],
    exact: bool,
    as_json: bool,
    plot_path: str | None,
    yscale: str,
    show_traffic: bool,
    no_check: bool,
) -> None:
    """Predict goodput on a network with the flow-level simulator (docs/simulate.md).

    Each FILE is one curve; NAME=FILE+FILE plots, at each size, the best of the files
    (a latency- and a bandwidth-optimal variant, as the Swing paper does)."""
    from collc import goodput

    topology = network_of(topology_text, node_text, placement)
    model = model_of(
        link_bw=link_bw,
        link_latency=link_latency,
        hop_latency=hop_latency,
        step_overhead=step_overhead,
        codec_bw=codec_bw,
        encode_bw=encode_bw,
        decode_bw=decode_bw,
        routing=routing,
        execution=execution,
    )
    byte_sizes = parse_sizes(sizes)
    if show_traffic:
        from collc.topology_groups import global_link_mask

        if global_link_mask(topology) is None:
            raise click.BadParameter(
                f"{topology.spec} has no global links: --traffic counts the bytes on a dragonfly's links between "
                "groups (dragonfly:h=H[,g=G]) or an oversubscribed fat tree's links above the leaves "
                "(fattree:P,radix=K,oversub=X)",
                param_hint="'--traffic'",
            )
    try:
        parsed = [goodput.parse_entry(e) for e in entries]
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'FILE'") from None
    extra = _extra_params(params, [path for entry in parsed for path in entry.files])
    problem = suffix_problem(plot_path) if plot_path is not None else None
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--plot'")
    if plot_path is not None:
        check_output(plot_path, "--plot")
    elif click.get_current_context().get_parameter_source("yscale") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--yscale applies to --plot only")
    failures: list[goodput.Failure] = []
    with progress_bar("simulating", quiet=as_json) as bar:
        try:
            if not no_check:
                bar.stage("verifying", sum(len(entry.files) for entry in parsed))
                failures = goodput.verify(parsed, topology, extra, on_progress=bar.on_progress)
                bar.stage("simulating", 0)
            result = goodput.study(parsed, topology, byte_sizes, model, extra, exact=exact, on_progress=bar.on_progress)
            counted = None
            if show_traffic:
                bar.stage("counting traffic", sum(len(entry.files) for entry in parsed))
                counted = _traffic(parsed, topology, byte_sizes, model, extra, exact, bar.on_progress)
        except CollError as err:
            fail_input(err, err.sources)
    for failure in failures:
        click.echo(failure.line(), err=True)
    _print(result, topology, model, execution, link_bw, link_latency, hop_latency, routing, as_json, counted)
    if plot_path is not None:
        try:
            goodput.plot(result, plot_path, yscale=yscale)
        except CollError as err:
            fail_input(err)
        except OSError as err:
            write_failed(plot_path, "--plot", err)
        if not as_json:
            click.echo(f"# wrote {plot_path}")


_Counted = dict[tuple[str, str], dict[int, "Traffic"]]
"""The traffic of every (curve, program) at every size."""


def _traffic(
    entries: list[goodput.Entry], topology: Topology, sizes: list[int], model: NetworkModel,
    extra: dict[str, ParamValue], exact: bool, on_progress: ProgressFn | None,
) -> _Counted:  # fmt: skip
    """The traffic of every program of the entries (elaborated again, as the study does)."""
    from collc import goodput
    from collc.simulate import traffic

    out: _Counted = {}
    done, total = 0, sum(len(entry.files) for entry in entries)
    for entry in entries:
        for path in entry.files:
            schedule, weights = goodput.schedule_for(path, topology, extra, exact or model.execution == "dataflow")
            try:
                rows = traffic(schedule, topology, sizes, model, weights)
            except ValueError as err:
                raise CollError(f"{path}: {err}") from None
            out[(entry.name or schedule.algorithm, schedule.algorithm)] = {t.size_bytes: t for t in rows}
            done += 1
            if on_progress is not None:
                on_progress(done, total)
    return out


def _bytes_text(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}B"


def _traffic_text(result: goodput.Study, topology: Topology, counted: _Counted) -> str:
    """The global-link bytes per size and curve (of the program that gave the curve's time), and their share."""
    from collc import goodput

    names = result.names()
    width = max(18, *(len(n) + 2 for n in names))
    network = getattr(topology, "network", topology)
    what = getattr(network, "global_what", "global links")
    lines = [
        f"# bytes on global links ({what}), then the global bytes per byte sent:",
        f"# {'size':>8}" + "".join(f"{n:>{width}}" for n in names),
    ]
    for size in result.sizes:
        cells = []
        for name in names:
            t = counted[(name, result.point(name, size).variant)][size]
            cells.append(f"{_bytes_text(t.global_bytes or 0.0)} {t.global_share or 0.0:.3f}")
        lines.append(f"  {goodput.size_text(size):>8}" + "".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def _print(
    result: goodput.Study, topology: Topology, model: NetworkModel, execution: str, link_bw: str, link_latency: str,
    hop_latency: str, routing: str, as_json: bool, counted: _Counted | None = None,
) -> None:  # fmt: skip
    """The tables (or the JSON rows) of a study, with the traffic where it was counted."""
    from collc import goodput

    if as_json:
        rows: list[dict[str, object]] = []
        for p in result.points:
            row: dict[str, object] = {"algorithm": p.algorithm, "variant": p.variant, "size_bytes": p.size_bytes,
                                      "time_us": p.time_s * 1e6, "goodput_gbps": p.goodput_gbps}  # fmt: skip
            if counted is not None:
                t = counted[(p.algorithm, p.variant)][p.size_bytes]
                row.update(global_bytes=t.global_bytes, sent_bytes=t.sent_bytes)
            rows.append(row)
        click.echo(json.dumps(rows, indent=1))
        return
    machines = getattr(topology, "machines", None)
    where = f"{topology.nodes} nodes" if machines is None else f"{topology.nodes} ranks on {machines} nodes"
    click.echo(
        f"# {topology.name}: {where}, links {link_bw}, link latency {link_latency}, "
        f"hop latency {hop_latency}, step overhead {model.step_overhead * 1e6:g}us, routing {routing}"
        + ("" if execution == "lockstep" else f", execution {execution}")
    )
    for v in result.variants:
        sampled = "" if v.elaborated == v.steps else f" ({v.elaborated} elaborated, the others stood in for)"
        click.echo(f"# {v.entry}: {v.algorithm}, {v.steps} steps{sampled}, {v.seconds:.1f} s")
    click.echo(goodput.table_text(result))
    if counted is not None:
        click.echo(_traffic_text(result, topology, counted))


def _extra_params(items: tuple[str, ...], files: list[str]) -> dict[str, ParamValue]:
    """``--param NAME=VALUE`` options: each must be a parameter of some program, and fit it where it is one."""
    given = []
    for item in items:
        name, text = parse_param_item(item)
        given.append((item, name, parse_param_value(text, item=item)))
    algorithms = []
    for path in files:
        try:
            algorithms.append(api.load(path))
        except CollError as err:
            fail_input(err, err.sources)
    for item, name, value in given:
        takers = [alg for alg in algorithms if name in alg.param_names]
        if not takers:
            names = "; ".join(f"{alg.name}: {', '.join(alg.param_names) or 'none'}" for alg in algorithms)
            raise bad_value("--param", item, f"no program takes a parameter {name} ({names})")
        for alg in takers:
            problem = alg.param_problem(name, value)
            if problem is not None:
                raise bad_value("--param", item, f"{alg.name}: {problem}")
    return {name: value for _, name, value in given}
