"""Options that describe a network and its cost model, shared by `collc sim` and `collc viz --timeline`.

`network_options` adds ``--topology``, ``--node`` and ``--placement``; `network_of` turns them into
a topology (nodes of several ranks with ``--node``, `collc.hierarchy`).  `model_options` adds the
rates, latencies and routing of the flow-level model; `model_of` turns them into a `NetworkModel`.
A bad value is a usage error naming its option."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from collc.simulate import NetworkModel
    from collc.topology import Topology

F = TypeVar("F", bound=Callable[..., Any])

MODEL_PARAMS = (
    "link_bw", "link_latency", "hop_latency", "step_overhead", "codec_bw", "encode_bw", "decode_bw", "routing",
)  # fmt: skip
"""The parameter names `model_options` adds, in order."""


def network_options(*, required: bool, topology_help: str | None = None) -> Callable[[F], F]:
    """``--topology`` (required or not), ``--node`` and ``--placement``."""

    def add(fn: F) -> F:
        fn = click.option(
            "--placement",
            type=click.Choice(["block", "cyclic"]),
            default="block",
            show_default=True,
            help="With --node: rank r on node r // G (block) or r % N (cyclic).",
        )(fn)
        fn = click.option(
            "--node",
            "node_text",
            default=None,
            metavar="nvlink:G|pcie:G[,OPTIONS]",
            help="G ranks per node on an intra-node fabric, with NICs into --topology (docs/simulate.md).",
        )(fn)
        return click.option(
            "--topology",
            "topology_text",
            required=required,
            default=None,
            help=topology_help
            or "The network between nodes: ring:16, torus:64x64, torus:4x4x4, hyperx:8x8, fattree:16, full:16.",
        )(fn)

    return add


def model_options(fn: F) -> F:
    """The flow-level model's rates, latencies and routing (`MODEL_PARAMS`)."""
    options: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("--link-bw",), {"default": "400Gb/s", "help": "Bandwidth of every link (Gb/s or GB/s)."}),
        (("--link-latency",), {"default": "100ns", "help": "Latency of a link."}),
        (("--hop-latency",), {"default": "300ns", "help": "Processing latency per hop (router)."}),
        (("--step-overhead",), {"default": None, "help": "Software overhead per step [default: the calibrated one]."}),
        (("--codec-bw",), {"default": "100GB/s", "help": "Raw bytes a rank encodes or decodes per s."}),
        (("--encode-bw",), {"default": None, "help": "Raw bytes a rank encodes per s [default: --codec-bw]."}),
        (("--decode-bw",), {"default": None, "help": "Raw bytes a rank decodes per s [default: --codec-bw]."}),
        (("--routing",), {"type": click.Choice(["adaptive", "dor"]), "default": "adaptive",
                          "help": "adaptive: spread flows over the minimal paths; dor: one dimension-ordered path."}),
    ]  # fmt: skip
    for names, kwargs in reversed(options):
        fn = click.option(*names, show_default=kwargs["default"] is not None, **kwargs)(fn)
    return fn


def network_of(topology_text: str | None, node_text: str | None, placement: str, nranks: int | None = None) -> Topology:
    """The topology of the options.  Without ``--topology`` (where it is optional) every pair of nodes
    has a link of its own: ``full:N``, N the ``nranks`` ranks over the ranks per node."""
    from collc.hierarchy import Hierarchical, parse_node
    from collc.topologies import parse_topology

    node = None
    if node_text is not None:
        try:
            node = parse_node(node_text)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="'--node'") from None
    elif placement != "block":
        raise click.BadParameter("a placement of ranks on nodes needs --node", param_hint="'--placement'")
    if topology_text is None:
        if nranks is None:
            raise click.BadParameter("a network is needed", param_hint="'--topology'")
        per = node.ranks if node is not None else 1
        if nranks % per:
            raise click.BadParameter(
                f"{node_text!r}: {per} ranks per node do not divide the schedule's {nranks} ranks",
                param_hint="'--node'",
            )
        topology_text = f"full:{nranks // per}"
    try:
        topology = parse_topology(topology_text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'--topology'") from None
    if node is None:
        return topology
    try:
        return Hierarchical(topology, node, placement)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'--node'") from None


def check_fit(topology: Topology, nranks: int, node_text: str | None) -> None:
    """A usage error naming ``--topology`` when the topology does not hold the schedule's ranks."""
    if topology.nodes == nranks:
        return
    machines = getattr(topology, "machines", None)
    has = f"{topology.nodes} nodes" if machines is None else f"{machines} nodes of {topology.nodes // machines} ranks"
    hint = "'--topology' / '--node'" if node_text is not None else "'--topology'"
    raise click.BadParameter(f"{topology.spec} has {has}, but the schedule runs on {nranks} ranks", param_hint=hint)


def model_of(
    *, link_bw: str, link_latency: str, hop_latency: str, step_overhead: str | None, codec_bw: str,
    encode_bw: str | None, decode_bw: str | None, routing: str, execution: str = "lockstep",
) -> NetworkModel:  # fmt: skip
    """The `NetworkModel` of the `model_options`."""
    from collc import goodput
    from collc.simulate import STEP_OVERHEAD, NetworkModel

    rate, duration = goodput.parse_rate, goodput.parse_duration
    return NetworkModel(
        link_bandwidth=_unit(rate, link_bw, "--link-bw"),
        link_latency=_unit(duration, link_latency, "--link-latency"),
        hop_latency=_unit(duration, hop_latency, "--hop-latency"),
        step_overhead=STEP_OVERHEAD if step_overhead is None else _unit(duration, step_overhead, "--step-overhead"),
        codec_bandwidth=_unit(rate, codec_bw, "--codec-bw"),
        encode_bandwidth=None if encode_bw is None else _unit(rate, encode_bw, "--encode-bw"),
        decode_bandwidth=None if decode_bw is None else _unit(rate, decode_bw, "--decode-bw"),
        adaptive=routing == "adaptive",
        execution=execution,
    )


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
