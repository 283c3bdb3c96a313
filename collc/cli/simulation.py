"""`collc sim`: predicted goodput on a network (docs/simulate.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import click

from collc import api
from collc.cli.common import (
    bad_value,
    fail_input,
    main,
    parse_param_item,
    parse_param_value,
    parse_sizes,
)
from collc.cli.progress import progress_bar
from collc.diagnostics import CollError
from collc.ir import ParamValue
from collc.viz import suffix_problem


@main.command()
@click.argument("entries", nargs=-1, required=True, metavar="FILE|NAME=FILE+FILE...")
@click.option(
    "--topology",
    "topology_text",
    required=True,
    help="The network between nodes: ring:16, torus:64x64, torus:4x4x4, hyperx:8x8, fattree:16, full:16.",
)
@click.option(
    "--node",
    "node_text",
    default=None,
    metavar="nvlink:G|pcie:G[,OPTIONS]",
    help="G ranks per node on an intra-node fabric, with NICs into --topology (docs/simulate.md).",
)
@click.option(
    "--placement",
    type=click.Choice(["block", "cyclic"]),
    default="block",
    show_default=True,
    help="With --node: rank r on node r // G (block) or r % N (cyclic).",
)
@click.option(
    "--execution",
    type=click.Choice(["lockstep", "dataflow"]),
    default="lockstep",
    show_default=True,
    help="lockstep: a barrier between steps; dataflow: a rank sends once its data is there.",
)
@click.option("--sizes", default="32B:512MiB", show_default=True, help="Vector sizes: SIZE or a doubling LOW:HIGH.")
@click.option("--link-bw", default="400Gb/s", show_default=True, help="Bandwidth of every link (Gb/s or GB/s).")
@click.option("--link-latency", default="100ns", show_default=True, help="Latency of a link.")
@click.option("--hop-latency", default="300ns", show_default=True, help="Processing latency per hop (router).")
@click.option("--step-overhead", default=None, help="Software overhead per step [default: the calibrated one].")
@click.option("--codec-bw", default="100GB/s", show_default=True, help="Raw bytes a rank encodes or decodes per s.")
@click.option("--encode-bw", default=None, help="Raw bytes a rank encodes per s [default: --codec-bw].")
@click.option("--decode-bw", default=None, help="Raw bytes a rank decodes per s [default: --codec-bw].")
@click.option(
    "--routing", type=click.Choice(["adaptive", "dor"]), default="adaptive", show_default=True,
    help="adaptive: spread flows over the minimal paths; dor: one dimension-ordered path.",
)  # fmt: skip
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Another parameter of the programs.")
@click.option("--exact", is_flag=True, help="Elaborate every step (long step loops are sampled otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Rows of algorithm, variant, size_bytes, time_us, goodput_gbps.")
@click.option("--plot", "plot_path", default=None, metavar="OUT.png|svg|pdf", help="Draw the goodput curves.")
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
) -> None:
    """Predict goodput on a network with the flow-level simulator (docs/simulate.md).

    Each FILE is one curve; NAME=FILE+FILE plots, at each size, the best of the files
    (a latency- and a bandwidth-optimal variant, as the Swing paper does)."""
    from collc import goodput
    from collc.hierarchy import Hierarchical, parse_node
    from collc.simulate import STEP_OVERHEAD, NetworkModel
    from collc.topology import parse_topology

    try:
        topology = parse_topology(topology_text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'--topology'") from None
    if node_text is not None:
        try:
            topology = Hierarchical(topology, parse_node(node_text), placement)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="'--node'") from None
    elif placement != "block":
        raise click.BadParameter("a placement of ranks on nodes needs --node", param_hint="'--placement'")
    model = NetworkModel(
        link_bandwidth=_unit(goodput.parse_rate, link_bw, "--link-bw"),
        link_latency=_unit(goodput.parse_duration, link_latency, "--link-latency"),
        hop_latency=_unit(goodput.parse_duration, hop_latency, "--hop-latency"),
        step_overhead=STEP_OVERHEAD if step_overhead is None
        else _unit(goodput.parse_duration, step_overhead, "--step-overhead"),
        codec_bandwidth=_unit(goodput.parse_rate, codec_bw, "--codec-bw"),
        encode_bandwidth=None if encode_bw is None else _unit(goodput.parse_rate, encode_bw, "--encode-bw"),
        decode_bandwidth=None if decode_bw is None else _unit(goodput.parse_rate, decode_bw, "--decode-bw"),
        adaptive=routing == "adaptive",
        execution=execution,
    )  # fmt: skip
    byte_sizes = parse_sizes(sizes)
    try:
        parsed = [goodput.parse_entry(e) for e in entries]
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'FILE'") from None
    extra = _extra_params(params, [path for entry in parsed for path in entry.files])
    problem = suffix_problem(plot_path) if plot_path is not None else None
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--plot'")
    with progress_bar("simulating", quiet=as_json) as bar:
        try:
            result = goodput.study(parsed, topology, byte_sizes, model, extra, exact=exact, on_progress=bar.on_progress)
        except CollError as err:
            fail_input(err, err.sources)
    if plot_path is not None:
        try:
            goodput.plot(result, plot_path, peak_gbps=topology.peak_bandwidth(model.link_bandwidth) * 8 / 1e9)
        except CollError as err:
            fail_input(err)
    if as_json:
        rows = [
            {"algorithm": p.algorithm, "variant": p.variant, "size_bytes": p.size_bytes,
             "time_us": p.time_s * 1e6, "goodput_gbps": p.goodput_gbps}
            for p in result.points
        ]  # fmt: skip
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
    if plot_path is not None:
        click.echo(f"# wrote {plot_path}")


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


def _unit(parse: Callable[[str], float], text: str, option: str) -> float:
    """A rate or duration option; a rate must be above zero, a duration at least zero."""
    try:
        value = parse(text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint=f"'{option}'") from None
    rate = text.strip().endswith("/s")
    if not math.isfinite(value) or value < 0 or (rate and value == 0):
        least = "above" if rate else "at least"
        raise click.BadParameter(f"{text!r} must be finite and {least} zero", param_hint=f"'{option}'")
    return value
