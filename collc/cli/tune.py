"""`collc tune`: the fastest program per message size, and one mpi-c library of them (docs/tune.md)."""

from __future__ import annotations

import json

import click

from collc import tune as tuning
from collc.cli.common import bad_value, check_output, fail_input, main, parse_sizes, write_failed
from collc.cli.network import check_fit, model_of, model_options, network_of, network_options
from collc.cli.progress import progress_bar
from collc.diagnostics import CollError
from collc.goodput import size_text


@main.command(name="tune")
@click.option("--collective", "-c", "collective_text", required=True, metavar="NAME",
              help="The collective: allreduce, allgather, reduce_scatter, broadcast, reduce, ...")  # fmt: skip
@click.option("-p", "nranks", required=True, type=click.IntRange(min=1), metavar="N", help="The number of ranks.")
@network_options(
    required=False,
    topology_help="The network between nodes, as for collc sim: ring:16, torus:4x4, fattree:16, ... "
    "[default: full:N, a link between every pair of nodes].",
)
@click.option(
    "--execution",
    type=click.Choice(["lockstep", "dataflow"]),
    default="lockstep",
    show_default=True,
    help="lockstep: a barrier between steps; dataflow: a rank sends once its data is there.",
)
@click.option("--sizes", default=tuning.DEFAULT_SIZES, show_default=True,
              help="Vector sizes, as collc sim sizes them: SIZE or a doubling LOW:HIGH.")  # fmt: skip
@model_options
@click.option(
    "--candidates",
    "candidate_items",
    multiple=True,
    metavar="FILE[,FILE...]",
    help="The programs to choose from (repeatable; files or bundled names) [default: every bundled example of "
    "the collective without compression points].",
)
@click.option("--exact", is_flag=True, help="Elaborate every step (long step loops are sampled otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Print the bands, candidates and skipped programs as JSON.")
@click.option(
    "-o",
    "--output",
    "out",
    default=None,
    type=click.Path(file_okay=False),
    help="Write one mpi-c library here that runs each band's program for its calls (as collc compile -t mpi-c).",
)
@click.option("--no-build", is_flag=True, help="With -o: write the sources and Makefile, do not compile them.")
def tune_cmd(
    collective_text: str,
    nranks: int,
    topology_text: str | None,
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
    candidate_items: tuple[str, ...],
    exact: bool,
    as_json: bool,
    out: str | None,
    no_build: bool,
) -> None:
    """Choose the fastest program at each message size (flow-level simulator) and print the bands.

    Every candidate is verified at -p first (those that fail, or whose constraints refuse p, are named and left
    out), then simulated at every size; adjacent sizes of one winner form a band.  With -o, one mpi-c library
    runs each band's program for the calls of its sizes (docs/tune.md)."""
    try:
        collective = tuning.parse_collective(collective_text)
    except CollError as err:
        raise bad_value("--collective", collective_text, err.message) from None
    topology = network_of(topology_text, node_text, placement, nranks)
    check_fit(topology, nranks, node_text)
    model = model_of(
        link_bw=link_bw, link_latency=link_latency, hop_latency=hop_latency, step_overhead=step_overhead,
        codec_bw=codec_bw, encode_bw=encode_bw, decode_bw=decode_bw, routing=routing, execution=execution,
    )  # fmt: skip
    byte_sizes = parse_sizes(sizes)
    problem = tuning.sizes_problem(collective, nranks, byte_sizes, model.itemsize)
    if problem is not None:
        raise bad_value("--sizes", sizes, problem)
    if no_build and out is None:
        raise click.UsageError("--no-build applies to -o only")
    if out is not None:
        check_output(out, "-o", folder=True)
    paths = [path.strip() for item in candidate_items for path in item.split(",") if path.strip()]
    with progress_bar("tuning", quiet=as_json) as bar:
        try:
            if not paths:
                paths = tuning.default_candidates(collective)
            bar.stage("verifying", len(paths))
            result = tuning.tune(
                collective, paths, topology, byte_sizes, model, exact=exact,
                on_verify=bar.on_progress, on_simulate=bar.on_progress,
            )  # fmt: skip
        except CollError as err:
            fail_input(err, err.sources)
    if as_json:
        click.echo(json.dumps(_json(result), indent=1))
    else:
        _print(result)
    if out is None:
        return
    try:
        files = tuning.write_library(result, out, build=not no_build)
    except CollError as err:
        fail_input(err, err.sources)
    except OSError as err:
        write_failed(out, "-o", err)
    if not as_json:
        for path in files:
            click.echo(str(path))


def _print(result: tuning.Tuning) -> None:
    first, last = result.sizes[0], result.sizes[-1]
    model = result.model
    click.echo(
        f"# {result.collective.value} at p={result.nranks} on {result.topology}: links "
        f"{model.link_bandwidth * 8 / 1e9:g} Gb/s, step overhead {model.step_overhead * 1e6:g}us, "
        f"execution {model.execution}; {len(result.sizes)} sizes {size_text(first)}.."
        f"{size_text(last)}"
    )
    names = ", ".join(c.name for c in result.candidates)
    click.echo(f"# {len(result.candidates)} candidates verified at p={result.nranks}: {names}")
    for s in result.skipped:
        where = "" if s.path == s.name else f" ({s.path})"
        click.echo(f"# skipped {s.name}{where}: {s.reason}")
    click.echo(tuning.table_text(result))
    click.echo("# calls: B is the MPI call's count times type size; ratio: the runner-up's time over the program's")


def _json(result: tuning.Tuning) -> dict[str, object]:
    limits = result.thresholds()
    bands = []
    for k, band in enumerate(result.bands):
        bands.append(
            {
                "program": band.program,
                "path": result.candidate(band.program).path,
                "sizes": list(result.sizes[band.first : band.last + 1]),
                "times_us": [t * 1e6 for t in band.times],
                "calls_from_bytes": limits[k - 1] if k > 0 else 0,
                "calls_below_bytes": limits[k] if k < len(limits) else None,
                "runner_up": band.runner_up,
                "ratios": list(band.ratios),
            }
        )
    return {
        "collective": result.collective.value,
        "nranks": result.nranks,
        "topology": result.topology,
        "candidates": [{"name": c.name, "path": c.path} for c in result.candidates],
        "skipped": [{"name": s.name, "path": s.path, "reason": s.reason} for s in result.skipped],
        "bands": bands,
    }
