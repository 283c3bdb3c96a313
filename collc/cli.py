"""The `collc` command line.  Exit codes: 0 ok, 1 the schedule is wrong, 2 usage or input error."""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from collc import api, report
from collc.backends import local
from collc.backends.cuda import CudaRow
from collc.backends.mpi_launch import MpiRow
from collc.collectives import busbw_factor, count_error
from collc.diagnostics import CollError, format_error
from collc.ir import Collective, ParamValue, Schedule
from collc.verify.deadlock import MODELS
from collc.verify.sweep import SweepResult, judge, parameter_sets, parse_dims_spec, parse_int_spec, sweep

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
        fail_input(err, _sources_of(err, file))
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


def _sources_of(err: CollError, file: str) -> dict[str, str]:
    return err.sources


# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="collc")
def main() -> None:
    """collc: write a collective once, prove it for every rank count, run it."""


@main.command()
@instance_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--show", "shown", default=5, show_default=True, type=click.IntRange(min=1), help="Findings to print.")
@click.option(
    "--model", default="step", show_default=True, type=click.Choice(MODELS), help="Execution model for deadlocks."
)
@click.option("--keep-going", is_flag=True, help="Check every instance of a range, not only up to the first failure.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes for ranges.")
@click.option("--trace", "trace", type=click.IntRange(min=0), default=None, metavar="CHUNK", help="History of a chunk.")
@click.option(
    "--input-bound",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="A",
    help="Compression: the inputs' magnitude bound |x| <= A that error bounds assume.",
)
@click.option(
    "--tolerance",
    default=None,
    type=click.FloatRange(min=0),
    metavar="T",
    help="Compression: fail when the worst-case error bound of an output exceeds T.",
)
def check(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    as_json: bool,
    shown: int,
    model: str,
    keep_going: bool,
    jobs: int | None,
    trace: int | None,
    input_bound: float,
    tolerance: float | None,
) -> None:
    """Verify a schedule, or every instance of a range: matching, deadlock, data flow, postcondition,
    compression points and their error bound."""
    instances = parameter_sets(collect_ranges(p, params, dims))
    alg = load_algorithm(file, codecs)
    if len(instances) == 1:
        try:
            schedule = alg.instantiate(**instances[0]).schedule
        except CollError as err:
            fail_input(err, alg.sources)
        if trace is not None:
            try:
                click.echo(report.trace_text(schedule, trace))
            except ValueError as err:
                raise click.BadParameter(str(err), param_hint="--trace") from None
            sys.exit(EXIT_OK)
        result = judge(schedule, instances[0], model, input_bound=input_bound, tolerance=tolerance)
        assert result.report is not None
        if as_json:
            click.echo(json.dumps(report.report_json(schedule, result.report, result.deadlock), indent=2))
        else:
            click.echo(report.report_text(schedule, result.report, alg.sources, shown))
        sys.exit(EXIT_OK if result.status == "ok" else EXIT_WRONG)
    if trace is not None:
        raise click.UsageError("--trace needs a single instance (one value of each parameter)")
    limits = {"input_bound": input_bound, "tolerance": tolerance}
    outcome = _sweep_with_progress(alg, instances, model, keep_going, jobs, quiet=as_json, limits=limits)
    if as_json:
        click.echo(json.dumps(report.sweep_json(alg, outcome), indent=2))
    else:
        click.echo(report.sweep_text(alg, outcome, shown))
    first = outcome.failures[0] if outcome.failures else None
    sys.exit(EXIT_OK if first is None else EXIT_INPUT if first.status == "error" else EXIT_WRONG)


def _sweep_with_progress(
    alg: api.Algorithm,
    instances: list[dict[str, ParamValue]],
    model: str,
    keep_going: bool,
    jobs: int | None,
    quiet: bool,
    limits: dict[str, Any],
) -> SweepResult:
    if quiet or not sys.stderr.isatty():
        return sweep(alg.program, instances, model=model, jobs=jobs, keep_going=keep_going, **limits)
    console = Console(stderr=True)
    with Progress(
        TextColumn("checking {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(alg.name, total=len(instances))
        return sweep(
            alg.program,
            instances,
            model=model,
            jobs=jobs,
            keep_going=keep_going,
            progress=lambda _: bar.advance(task),
            **limits,
        )


@main.command()
@instance_options
@click.option("--json", "as_json", is_flag=True, help="Print the schedule IR as JSON (docs/ir-json.md).")
@click.option("--rank", "only_rank", type=int, default=None, help="Show only this rank's operations.")
def show(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    as_json: bool,
    only_rank: int | None,
) -> None:
    """Print a schedule step by step (or its IR as JSON)."""
    inst = load_instance(file, p, params, dims, codecs)
    s = inst.schedule
    if as_json:
        click.echo(json.dumps(inst.to_json()))
        return
    click.echo(
        f"{s.algorithm} ({s.collective.value}) {report.params_text(s.params)}: {s.nranks} ranks, {s.nchunks} chunks, "
        f"{len(s.steps)} steps" + "".join(f"; codec {name} = {spec}" for name, spec in s.codecs)
    )
    width = 10 if s.compresses() else 4  # room for "decompress"
    header = f"{'step':>5}  {'phase':<16} {'rank':>5}  {'op':<{width}} {'peer':>5}  {'action':<6} {'line':>5}  chunks"
    click.echo(header)
    click.echo("-" * len(header))
    for step in s.steps:
        for op in step.ops:
            if only_rank is not None and op.rank != only_rank:
                continue
            action = op.action.value if op.action is not None else ""
            peer = "" if op.kind.local else str(op.peer)
            codec = f"  [{op.codec}]" if op.codec is not None else ""
            click.echo(
                f"{step.index:>5}  {step.phase[:16]:<16} {op.rank:>5}  {op.kind.value:<{width}} {peer:>5}  "
                f"{action:<6} {op.span.line:>5}  {op.chunks}{codec}"
            )


@main.command(name="compile")
@instance_options
@click.option(
    "--target",
    "-t",
    required=True,
    type=click.Choice(list(api.TARGETS)),
    help="What to generate (docs/mpi.md, docs/cuda.md).",
)
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--no-build", is_flag=True, help="mpi-c, cuda: write the sources and Makefile, do not compile them.")
def compile_cmd(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    target: str,
    out: str,
    no_build: bool,
) -> None:
    """Verify a schedule, then generate its executor (and build it, for mpi-c and cuda)."""
    inst = load_instance(file, p, params, dims, codecs)
    checked = inst.verify()
    if not checked.ok:
        click.echo(report.report_text(inst.schedule, checked, inst.algorithm.sources), err=True)
        sys.exit(EXIT_WRONG)
    try:
        files = inst.compile(target, out, build=not no_build, verify=False)
    except CollError as err:
        fail_input(err, inst.algorithm.sources)
    for path in files:
        click.echo(str(path))


@main.command()
@instance_options
@click.option("--size", default=None, help="Vector size in bytes (e.g. 4MiB).")
@click.option("--sizes", default=None, help="A doubling sweep LOW:HIGH (e.g. 8:64MiB).")
@click.option("--dtype", default="float32", type=click.Choice(sorted(local.DTYPES)), show_default=True)
@click.option("--op", "redop", default="sum", type=click.Choice(list(local.OPS)), show_default=True)
@click.option(
    "--backend",
    default="local",
    type=click.Choice(list(api.BACKENDS)),
    show_default=True,
    help="local: numpy in this process; mpi: p processes running the generated mpi-py module; mpi-c: the C "
    "library; cuda: the generated CUDA executor, p virtual ranks on the GPU(s).",
)
@click.option("--iters", default=1, type=click.IntRange(min=1), show_default=True, help="Timed iterations per size.")
@click.option("--warmup", default=0, type=click.IntRange(min=0), show_default=True, help="MPI: untimed iterations.")
@click.option(
    "--timeout",
    default=60.0,
    type=click.FloatRange(min=0.1),
    show_default=True,
    help="MPI: kill the job when it makes no progress for this many seconds.",
)
@click.option(
    "--workdir",
    default=None,
    type=click.Path(file_okay=False),
    help="MPI: folder for the generated code and the ranks' status files (default: a temporary one).",
)
@click.option("--mpiexec-args", default="", metavar="ARGS", help="MPI: extra mpiexec arguments, e.g. '-f hosts'.")
@click.option("--no-check", is_flag=True, help="Run without verifying the schedule first.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def run(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    size: str | None,
    sizes: str | None,
    dtype: str,
    redop: str,
    backend: str,
    iters: int,
    warmup: int,
    timeout: float,
    workdir: str | None,
    mpiexec_args: str,
    no_check: bool,
    as_json: bool,
) -> None:
    """Verify, then run a schedule on random data, validating against numpy (nccl-tests style rows)."""
    if size is not None and sizes is not None:
        raise click.UsageError("give --size or --sizes, not both")
    byte_sizes = parse_sizes(sizes) if sizes is not None else [parse_size(size or "4MiB")]
    inst = load_instance(file, p, params, dims, codecs)
    s = inst.schedule
    if not no_check:
        checked = inst.verify()
        if not checked.ok:
            click.echo(report.report_text(s, checked, inst.algorithm.sources), err=True)
            sys.exit(EXIT_WRONG)
    itemsize = local.DTYPES[dtype].itemsize
    counts = []
    for nbytes in byte_sizes:
        count = nbytes // itemsize
        if count_error(s.collective, s.nranks, count) is not None or (backend != "local" and _needs_blocks(s)):
            count -= count % s.nranks  # equal blocks per rank
        counts.append(count)
    rows = []
    try:
        if backend == "local":
            for count in counts:
                rows.append(_row(s, inst.run(count, dtype, redop, backend=backend, iters=iters)))
        elif backend == "cuda":
            results = inst.run_cuda(counts, dtype, redop, iters=iters, warmup=warmup, verify=False, workdir=workdir)
            rows = [_mpi_row(s, dtype, redop, r) for r in results]
        else:
            results = inst.run_mpi(
                counts,
                dtype,
                redop,
                backend=backend,
                iters=iters,
                warmup=warmup,
                timeout=timeout,
                verify=False,
                workdir=workdir,
                mpiexec_args=tuple(shlex.split(mpiexec_args)),
            )
            rows = [_mpi_row(s, dtype, redop, r) for r in results]
    except CollError as err:
        fail_input(err)
    if as_json:
        payload = {
            "algorithm": s.algorithm,
            "collective": s.collective.value,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in s.params},
            "nranks": s.nranks,
            "backend": backend,
            "rows": rows,
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(_rows_text(s, backend, rows))
    sys.exit(EXIT_WRONG if any(r["wrong"] for r in rows) else EXIT_OK)


def _needs_blocks(s: Schedule) -> bool:
    return s.collective in (Collective.ALLGATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL)


def _row(s: Schedule, result: local.RunResult) -> dict[str, Any]:
    seconds = result.time_us * 1e-6
    algbw = result.nbytes / seconds / 1e9 if seconds > 0 else 0.0
    row: dict[str, Any] = {
        "size_bytes": result.nbytes,
        "count": result.count,
        "dtype": result.dtype,
        "op": result.op if s.collective.reduces else "none",
        "root": s.root if s.root is not None else -1,
        "time_us": result.time_us,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * busbw_factor(s.collective, s.nranks),
        "wrong": result.wrong,
    }
    if result.error_bound is not None:  # compression points: measured error and verified bound (null: unbounded)
        row["max_abs_error"] = _finite(result.max_abs_error)
        row["error_bound"] = _finite(result.error_bound)
    return row


def _finite(value: float | None) -> float | None:
    """JSON has no infinity: an unbounded (or infinite) figure is null."""
    return value if value is not None and math.isfinite(value) else None


def _mpi_row(s: Schedule, dtype: str, op: str, r: MpiRow | CudaRow) -> dict[str, Any]:
    errors = (r.max_abs_error, r.error_bound) if isinstance(r, CudaRow) else (None, None)
    result = local.RunResult(
        s.algorithm, s.nranks, r.count, r.size_bytes, dtype, op, r.iters, r.avg_us, r.wrong, *errors
    )
    row = _row(s, result)
    row.update(min_us=r.min_us, max_us=r.max_us, iters=r.iters)
    return row


def _rows_text(s: Schedule, backend: str, rows: list[dict[str, Any]]) -> str:
    mpi = backend != "local"
    ranks = f", {s.nranks} virtual ranks on GPU" if backend == "cuda" else f", {s.nranks} MPI processes" if mpi else ""
    extra = f" {'min(us)':>10} {'max(us)':>10} {'iters':>6}" if mpi else ""
    lossy = any("error_bound" in r for r in rows)
    if lossy:
        extra += f" {'max|err|':>10} {'bound':>10}"
    out = [
        f"# collc run: {s.algorithm} ({s.collective.value}) {report.params_text(s.params)}, backend {backend}{ranks}",
        f"# {'size':>12} {'count':>12} {'type':>8} {'redop':>6} {'root':>5} {'time(us)':>12} "
        f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}{extra}",
    ]
    for r in rows:
        more = f" {r['min_us']:>10.1f} {r['max_us']:>10.1f} {r['iters']:>6}" if mpi else ""
        if lossy:
            more += f" {_figure(r.get('max_abs_error'), 'inf'):>10} {_figure(r.get('error_bound'), 'unbounded'):>10}"
        out.append(
            f"  {r['size_bytes']:>12} {r['count']:>12} {r['dtype']:>8} {r['op']:>6} {r['root']:>5} "
            f"{r['time_us']:>12.1f} {r['algbw_gbps']:>12.3f} {r['busbw_gbps']:>12.3f} {r['wrong']:>7}{more}"
        )
    wrong = sum(r["wrong"] for r in rows)
    right = "all results within the verified error bound" if lossy else "all results correct"
    out.append(f"# {right if wrong == 0 else f'{wrong} wrong element(s)'}")
    if lossy:
        out.append(
            "# compression: max|err| is measured against the exact float64 reduction, bound is the verifier's "
            "(inputs |x| <= 1); an element is wrong when its error exceeds its bound plus rounding"
        )
    return "\n".join(out)


def _figure(value: float | None, infinite: str) -> str:
    return infinite if value is None else f"{value:.3g}"


@main.command()
@click.argument("entries", nargs=-1, required=True, metavar="FILE|NAME=FILE+FILE...")
@click.option("--topology", "topology_text", required=True, help="ring:16, torus:64x64, torus:4x4x4, hyperx:8x8, ...")
@click.option("--sizes", default="32B:512MiB", show_default=True, help="Vector sizes: SIZE or a doubling LOW:HIGH.")
@click.option("--link-bw", default="400Gb/s", show_default=True, help="Bandwidth of every link (Gb/s or GB/s).")
@click.option("--link-latency", default="100ns", show_default=True, help="Latency of a link.")
@click.option("--hop-latency", default="300ns", show_default=True, help="Processing latency per hop (router).")
@click.option("--step-overhead", default=None, help="Software overhead per step [default: the calibrated one].")
@click.option("--codec-bw", default="100GB/s", show_default=True, help="Raw bytes a rank encodes or decodes per s.")
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
    sizes: str,
    link_bw: str,
    link_latency: str,
    hop_latency: str,
    step_overhead: str | None,
    codec_bw: str,
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
    from collc.simulate import STEP_OVERHEAD, NetworkModel
    from collc.topology import parse_topology

    try:
        topology = parse_topology(topology_text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--topology") from None
    model = NetworkModel(
        link_bandwidth=_unit(goodput.parse_rate, link_bw, "--link-bw"),
        link_latency=_unit(goodput.parse_duration, link_latency, "--link-latency"),
        hop_latency=_unit(goodput.parse_duration, hop_latency, "--hop-latency"),
        step_overhead=STEP_OVERHEAD if step_overhead is None
        else _unit(goodput.parse_duration, step_overhead, "--step-overhead"),
        codec_bandwidth=_unit(goodput.parse_rate, codec_bw, "--codec-bw"),
        adaptive=routing == "adaptive",
    )  # fmt: skip
    extra = {}
    for item in params:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected NAME=VALUE", param_hint="--param")
        extra[name.strip()] = parse_param_value(value)
    try:
        parsed = [goodput.parse_entry(e) for e in entries]
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="FILE") from None
    if plot_path is not None and not goodput.plot_suffix_ok(plot_path):
        raise click.BadParameter(f"{plot_path}: the picture must be .png, .svg or .pdf", param_hint="--plot")
    try:
        result = goodput.study(parsed, topology, parse_sizes(sizes), model, extra, exact=exact)
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
    click.echo(
        f"# {topology.name}: {topology.nodes} nodes, links {link_bw}, link latency {link_latency}, "
        f"hop latency {hop_latency}, step overhead {model.step_overhead * 1e6:g}us, routing {routing}"
    )
    for v in result.variants:
        sampled = "" if v.elaborated == v.steps else f" ({v.elaborated} elaborated, the others stood in for)"
        click.echo(f"# {v.entry}: {v.algorithm}, {v.steps} steps{sampled}, {v.seconds:.1f} s")
    click.echo(goodput.table_text(result))
    if plot_path is not None:
        click.echo(f"# wrote {plot_path}")


def _unit(parse: Callable[[str], float], text: str, option: str) -> float:
    """A rate or duration option; a rate must be above zero, a duration at least zero."""
    try:
        value = parse(text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint=option) from None
    rate = text.strip().endswith("/s")
    if not math.isfinite(value) or value < 0 or (rate and value == 0):
        least = "above" if rate else "at least"
        raise click.BadParameter(f"{text!r} must be finite and {least} zero", param_hint=option)
    return value


@main.command()
def examples() -> None:
    """List the bundled example algorithms (usable by name in place of a FILE); those with
    compression points (examples/compression/), then those for tori (examples/torus/), come last."""
    paths = api.list_examples()
    width = max((len(path.stem) for path in paths), default=0)
    for path in paths:
        first = ""
        for line in path.read_text().splitlines():
            if line.startswith("#"):
                first = line.lstrip("# ").strip()
                break
        click.echo(f"{path.stem:<{max(26, width)}} {first}")


@main.command(name="codecs")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def codecs_cmd(as_json: bool) -> None:
    """List the codecs a schedule can compress with, and their properties (docs/codecs.md)."""
    from collc.codecs import describe

    rows = describe()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    yes = {True: "yes", False: "no"}
    header = f"{'codec':<10} {'example':<22} {'lossy':<6} {'error':<11} {'idempotent':<11} {'homomorphic':<12} "
    header += f"{'static size':<12} {'cuda':<5} available"
    click.echo(header)
    for r in rows:
        click.echo(
            f"{r['name']:<10} {r['spec']:<22} {yes[r['lossy']]:<6} {r['error_model']:<11} {yes[r['idempotent']]:<11} "
            f"{yes[r['homomorphic_sum']]:<12} {yes[r['static_size']]:<12} {yes[r['cuda']]:<5} {yes[r['available']]}"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
