"""`collc compile` and `collc run`: generate executors and run schedules."""

from __future__ import annotations

import json
import math
import shlex
import sys
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import click

from collc import api, netemu, report
from collc.backends import local, mpi_c
from collc.backends.cuda import Count, CudaRow
from collc.backends.mpi_cuda import TRANSPORTS, check_transport
from collc.backends.mpi_launch import MpiRow
from collc.cli import budget as memory
from collc.cli.common import (
    EXIT_OK,
    EXIT_WRONG,
    RANGE_NOTE,
    RANKS,
    bad_value,
    check_output,
    check_values,
    collect_params,
    collect_ranges,
    fail_input,
    instance_options_with,
    load_algorithm,
    load_instance,
    main,
    parse_size,
    parse_sizes,
    write_failed,
)
from collc.cli.progress import Bar, progress_bar
from collc.collectives import busbw_factor, count_error, counts_count, layout_error
from collc.diagnostics import CollError
from collc.goodput import size_text
from collc.ir import Collective, Schedule
from collc.verify.check import CheckReport
from collc.verify.sweep import parse_int_spec

OFFERED_TRANSPORTS = tuple(t for t in TRANSPORTS if t != "nccl")
"""The transports --transport offers: those mpi-cuda implements (an NCCL transport is not among them)."""

TRANSPORT_HELP = (
    "mpi-cuda: how messages travel: auto (CUDA IPC between the ranks of a host, MPI between hosts), ipc (every "
    "rank on one host), mpi (CUDA-aware MPI, or staged through pinned host memory)."
)

RANGE_TARGETS = ("mpi-c",)
"""The targets -p N..M compiles for: one library holding the schedule of every p."""

ANY_TARGETS = ("mpi-c", "mpi-cuda")
"""The targets that take -p any."""

COMPILE_RANKS_HELP = (
    "The number of ranks. --target mpi-c also takes several: a range or list as for collc check (3..8, "
    f"pow2:2..64, 4,6,12; {RANGE_NOTE}), one library for all of them; mpi-c and mpi-cuda take 'any': one library "
    "for every p (--verify-ranks)."
)


@main.command(name="compile")
@instance_options_with(COMPILE_RANKS_HELP, "N|RANGE|any")
@click.option(
    "--target",
    "-t",
    required=True,
    type=click.Choice(list(api.TARGETS)),
    help="What to generate (docs/mpi.md, docs/cuda.md).",
)
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option(
    "--no-build", is_flag=True, help="mpi-c, cuda, mpi-cuda: write the sources and Makefile, do not compile them."
)
@click.option("--transport", default="auto", metavar="|".join(OFFERED_TRANSPORTS), show_default=True,
              help=TRANSPORT_HELP)  # fmt: skip
@click.option(
    "--small",
    "small_file",
    default=None,
    metavar="FILE",
    help="mpi-c: a second schedule (same collective, same -p) for small calls, e.g. a latency-optimal one.",
)
@click.option(
    "--small-below",
    default=None,
    metavar="SIZE",
    help=f"mpi-c with --small: calls of fewer bytes (count x type size) run it [default: "
    f"{mpi_c.SMALL_BELOW // 1024}KiB; COLLC_SMALL_BYTES overrides it at run time].",
)
@click.option(
    "--verify-ranks",
    "verify_ranks",
    default=None,
    metavar="SPEC",
    help=f"-p any: the communicator sizes the library serves, each verified at compile time: ranks as for collc "
    f"check -p (2..1024, pow2:2..16384, 4,6,12; {RANGE_NOTE}), or 'all' to prove every p (as collc check --ranks "
    f"all). Any other "
    f"size goes to the MPI library (mpi-c) or fails (mpi-cuda), with the reason [default: 1..{api.ANY_P_VERIFIED}].",
)
@click.option(
    "--exact",
    is_flag=True,
    help="mpi-c: floating-point MPI_SUM and MPI_PROD, whose last bits depend on the order of the operations, go to "
    "the MPI library's own algorithm (COLLC_SHIM_EXACT=0 turns it off at run time; docs/mpi.md).",
)
def compile_cmd(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    target: str,
    out: str,
    no_build: bool,
    transport: str,
    small_file: str | None,
    small_below: str | None,
    verify_ranks: str | None,
    exact: bool,
) -> None:
    """Verify a schedule, then generate its executor (and build it, for mpi-c, cuda and mpi-cuda).

    mpi-c takes several rank counts (-p 3..8: one library holding each one's schedule); mpi-c and mpi-cuda take
    -p any (one library that computes the schedule of the communicator's size at its first call, for the sizes
    verified at compile time: --verify-ranks; docs/mpi.md, docs/mpi-cuda.md)."""
    _check_transport(target, transport)
    below = _small_options(target, small_file, small_below)
    if exact and target != "mpi-c":
        raise click.UsageError(f"--exact applies to the mpi-c target only, not {target}")
    check_output(out, "-o", folder=True)
    try:
        _compile(file, p, params, codecs, dims, target, out, no_build, small_file, below, verify_ranks, exact)
    except OSError as err:
        write_failed(out, "-o", err)


def _compile(
    file: str, p: str | None, params: tuple[str, ...], codecs: tuple[str, ...], dims: str | None, target: str,
    out: str, no_build: bool, small_file: str | None, below: int, verify_ranks: str | None, exact: bool,
) -> None:  # fmt: skip
    if p is not None and p.strip() == "any":
        _compile_any_p(file, target, params, dims, codecs, out, no_build, small_file, verify_ranks, exact)
        return
    if verify_ranks is not None:
        raise click.UsageError("--verify-ranks applies to -p any only (-p N verifies the schedule of N)")
    several = p is not None and len(collect_ranges(p, (), None)["p"]) > 1
    if several and target in RANGE_TARGETS:
        _compile_sizes(file, p, params, dims, codecs, out, no_build, small_file, below, exact)  # type: ignore[arg-type]
        return
    if several:
        count = len(collect_ranges(p, (), None)["p"])
        raise click.BadParameter(
            f"collc compile --target {target} takes one rank count, got {p!r} ({count} values): a range is for "
            f"--target {' or '.join(RANGE_TARGETS)} (one library for every p of it), -p any for "
            f"{' and '.join(ANY_TARGETS)}; 'collc check FILE -p {p}' checks a range",
            param_hint=RANKS,
        )
    inst = load_instance(file, p, params, dims, codecs)
    checked = inst.verify()
    if not checked.ok:
        click.echo(report.report_text(inst.schedule, checked, inst.algorithm.sources), err=True)
        sys.exit(EXIT_WRONG)
    small = None
    if small_file is not None:
        small = load_instance(small_file, str(inst.nranks), ())
        checked = small.verify()
        if not checked.ok:
            click.echo(report.report_text(small.schedule, checked, small.algorithm.sources), err=True)
            sys.exit(EXIT_WRONG)
    try:
        files = inst.compile(target, out, build=not no_build, verify=False, small=small, small_below=below, exact=exact)
    except CollError as err:
        fail_input(err, {**inst.algorithm.sources, **(small.algorithm.sources if small is not None else {})})
    for path in files:
        click.echo(str(path))


@main.command()
@instance_options_with("The number of ranks (one; 'collc check' takes ranges).", "N")
@click.option("--size", default="4MiB", show_default=True, metavar="SIZE", help="Vector size in bytes, e.g. 64K, 4MiB.")
@click.option(
    "--sizes", default=None, metavar="LOW:HIGH", help="A doubling sweep instead of --size, e.g. 8:64MiB (up to HIGH)."
)
@click.option(
    "--dtype", default="float32", type=click.Choice(sorted(local.DTYPES)), show_default=True, help="The element type."
)
@click.option(
    "--op", "redop", default="sum", type=click.Choice(list(local.OPS)), show_default=True,
    help="The reduction (collectives that reduce).",
)  # fmt: skip
@click.option(
    "--backend",
    default="local",
    type=click.Choice(list(api.BACKENDS)),
    show_default=True,
    help="local: numpy in this process; mpi (or mpi-py): p processes running the generated mpi-py module; mpi-c: "
    "the C library; cuda: the generated CUDA executor, p virtual ranks on the GPU(s); mpi-cuda: p MPI processes, one "
    "per visible GPU (sharing GPUs when there are fewer).",
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
@click.option(
    "--network",
    "network_text",
    default=None,
    metavar="HOSTS[xRATE][,latency=TIME][,shape=SHAPE]",
    help="mpi, mpi-py, mpi-c: run the ranks on HOSTS emulated hosts on this machine (network namespaces; needs "
    "root), p/HOSTS ranks per host sharing memory, MPI between hosts over TCP on links shaped to RATE (10gbit, "
    "100mbit, 10Gb/s) with TIME added from host to host, wired as SHAPE (star: one switch, the default; ring; "
    "torus:AxB); e.g. 4x10gbit,latency=5us or 8x1gbit,shape=torus:2x4 (docs/network.md).",
)
@click.option("--transport", default="auto", metavar="|".join(OFFERED_TRANSPORTS), show_default=True,
              help=TRANSPORT_HELP)  # fmt: skip
@click.option(
    "--max-memory",
    default=None,
    metavar="SIZE",
    help="local: the most the buffers of every rank and the elaborated schedule may take together [default: 4GiB]; "
    "mpi, mpi-py, mpi-c: the most the ranks' buffers (an input and a result each) may take together [default: this "
    "machine's memory, none with --mpiexec-args]. A size that needs more is refused before anything runs.",
)
@click.option(
    "--counts",
    "counts_text",
    default=None,
    metavar="N,N,...",
    help="local, cuda, mpi-cuda: counts given at run time, instead of --size: an allgatherv's or a "
    "reduce-scatter's p element counts (rank r's block), or an alltoallv's p*p (what rank s sends rank d, row s), "
    "cutting the schedule's chunks as the mpi-c library's MPI_Allgatherv, MPI_Reduce_scatter and MPI_Alltoallv "
    "do (docs/mpi.md).",
)
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
    network_text: str | None,
    transport: str,
    max_memory: str | None,
    counts_text: str | None,
    no_check: bool,
    as_json: bool,
) -> None:
    """Verify, then run a schedule on random data, validating against numpy (nccl-tests style rows)."""
    _check_transport(backend, transport)
    ctx = click.get_current_context()
    if sizes is not None and ctx.get_parameter_source("size") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give --size or --sizes, not both")
    itemsize = local.DTYPES[dtype].itemsize
    counts = _counts_of(counts_text, backend, sizes is not None or ctx.get_parameter_source("size") is not
                        click.core.ParameterSource.DEFAULT)  # fmt: skip
    if counts is not None:
        option, given = "--counts", counts_text or ""
        byte_sizes = [0]  # set once the collective is known
    else:
        option, given = ("--sizes", sizes) if sizes is not None else ("--size", size)
        byte_sizes = parse_sizes(given, option) if sizes is not None else [parse_size(given, option)]
    if 0 < byte_sizes[0] < itemsize:  # sizes are rounded down to whole elements, but not to none
        raise bad_value(option, given, f"{byte_sizes[0]} bytes is less than one {itemsize}-byte {dtype} element")
    try:
        launcher_args = tuple(shlex.split(mpiexec_args))
    except ValueError as err:
        raise bad_value(
            "--mpiexec-args", mpiexec_args, f"{str(err).lower()} (the text is split as a shell would)"
        ) from None
    network = _network_of(network_text, backend)
    budget = memory.budget_of(max_memory, backend, elsewhere=bool(launcher_args))
    if workdir is not None:
        check_output(workdir, "--workdir", folder=True)
    values = collect_params(p, params, dims)
    alg = load_algorithm(file, codecs)
    check_values(alg, {name: [value] for name, value in values.items()}, p, params, dims)
    if counts is not None:  # the size the counts stand for (what one rank sends, for an alltoall)
        byte_sizes = [counts_count(alg.collective, counts) * itemsize]
    buffers = nranks = 0
    if budget is not None:
        nranks = memory.nranks_of(alg, values)
        buffers = memory.check_buffers(alg, nranks, byte_sizes, dtype, backend, iters, budget, option, given)
    with progress_bar(f"elaborating {alg.name}", quiet=as_json) as bar:
        if backend == "local" and budget is not None:
            local_budget = budget

            def retry(beside: int, text: str) -> int:
                bar.close()
                return memory.check_buffers(
                    alg, nranks, byte_sizes, dtype, backend, iters, local_budget, option, given, beside, text
                )

            inst = memory.elaborate_local(alg, values, nranks, buffers, budget, retry)
        else:
            try:
                inst = alg.instantiate(**values)
            except CollError as err:
                fail_input(err, alg.sources)
        s = inst.schedule
        checked: CheckReport | None = None
        if not no_check:
            bar.stage(f"verifying {s.algorithm}", len(s.steps))
            checked = inst.verify(on_progress=bar.on_progress)
        cluster = _cluster_of(network, network_text, s.nranks)
        if checked is None or checked.ok:
            settings = _Settings(dtype, redop, backend, iters, warmup, timeout, workdir, launcher_args, transport,
                                 budget.limit if budget is not None else None, counts=counts)  # fmt: skip
            try:
                with nullcontext() if cluster is None else _started(cluster, bar):
                    if cluster is not None:
                        settings = replace(
                            settings, launcher_args=(*cluster.mpiexec_args, *launcher_args),
                            mpiexec_prefix=tuple(cluster.mpiexec_prefix), env=cluster.env(),
                        )  # fmt: skip
                    bar.stage(f"running {s.algorithm}", len(byte_sizes))
                    rows = _run_rows(inst, byte_sizes, settings, bar)
            except OSError as err:
                write_failed(workdir or err.filename or "the work folder", "--workdir", err)
            except CollError as err:  # the emulated cluster could not start
                fail_input(err, inst.algorithm.sources)
    if checked is not None and not checked.ok:
        click.echo(report.report_text(s, checked, inst.algorithm.sources), err=True)
        sys.exit(EXIT_WRONG)
    if as_json:
        payload = {
            "algorithm": s.algorithm,
            "collective": s.collective.value,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in s.params},
            "nranks": s.nranks,
            "backend": backend,
            **({} if cluster is None else {"network": network_text, "ranks_per_host": cluster.ranks_per_host}),
            "rows": rows,
        }
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(_rows_text(s, backend, rows, "" if cluster is None else cluster.describe()))
    sys.exit(EXIT_WRONG if any(r["wrong"] for r in rows) else EXIT_OK)


@dataclass(frozen=True, slots=True)
class _Settings:
    """How `collc run` runs each size (its options)."""

    dtype: str
    redop: str
    backend: str
    iters: int
    warmup: int
    timeout: float
    workdir: str | None
    launcher_args: tuple[str, ...]
    transport: str
    max_bytes: int | None  # the buffers' budget (local, MPI)
    mpiexec_prefix: tuple[str, ...] = ()  # what mpiexec runs under (an emulated cluster's namespace)
    env: dict[str, str] | None = None  # the ranks' environment (an emulated cluster's MPI settings)
    counts: tuple[int, ...] | None = None  # counts given at run time (api.COUNTS_BACKENDS)


def _counts_of(text: str | None, backend: str, sized: bool) -> tuple[int, ...] | None:
    """The counts of ``--counts`` (None when not given); a usage error naming the option when they are not
    non-negative integers, come with --size or --sizes, or are asked of a backend not in `api.COUNTS_BACKENDS`."""
    if text is None:
        return None
    if sized:
        raise click.UsageError("give --size (or --sizes) or --counts, not both")
    if backend not in api.COUNTS_BACKENDS:
        where = ", ".join(api.COUNTS_BACKENDS)
        raise bad_value("--counts", text, f"counts given per rank run on the backends {where}, not {backend}; the "
                        "mpi-c library and mpi-py take them at run time (docs/mpi.md)")  # fmt: skip
    counts = []
    for i, part in enumerate(text.split(",")):
        try:
            value = int(part.strip())
        except ValueError:
            raise bad_value("--counts", text, f"count {i} ({part.strip()!r}) is not an integer") from None
        if value < 0:
            raise bad_value("--counts", text, f"count {i} is negative ({value})")
        counts.append(value)
    return tuple(counts)


def _network_of(text: str | None, backend: str) -> netemu.Network | None:
    """The emulated cluster ``--network`` asks for; a usage error naming the option when it is malformed or the
    backend is not one that runs on it."""
    if text is None:
        return None
    if backend not in api.MPI_BACKENDS:
        raise bad_value("--network", text, f"an emulated cluster runs the backends {', '.join(api.MPI_BACKENDS)}, "
                        f"not {backend}")  # fmt: skip
    try:
        return netemu.parse_network(text)
    except ValueError as err:
        raise bad_value("--network", text, str(err)) from None


def _cluster_of(network: netemu.Network | None, text: str | None, nranks: int) -> netemu.Cluster | None:
    """The emulated cluster (not started) of ``--network``: the schedule's ranks over its hosts, in blocks (a
    usage error naming the option when they do not divide)."""
    if network is None:
        return None
    if nranks % network.hosts:
        raise bad_value(
            "--network", text or network.text(),
            f"{network.hosts} hosts do not divide the schedule's {nranks} ranks (each host runs as many ranks)",
        )  # fmt: skip
    return netemu.Cluster.of(network, nranks // network.hosts)


def _started(cluster: netemu.Cluster, bar: Bar) -> netemu.Cluster:
    """``cluster``, to be entered (started) in a ``with``, the bar saying so."""
    bar.stage(f"starting {cluster.describe()}", 1)
    return cluster


def _run_rows(inst: api.Instance, byte_sizes: list[int], run: _Settings, bar: Bar) -> list[dict[str, Any]]:
    """The rows of `collc run`, one per size, on ``run.backend`` (``bar`` counts the sizes done, or on the local
    backend the steps planned and run of each size)."""
    s = inst.schedule
    dtype, redop, backend, iters = run.dtype, run.redop, run.backend, run.iters
    itemsize = local.DTYPES[dtype].itemsize
    counts: list[Count] = []
    for nbytes in byte_sizes:
        count = nbytes // itemsize
        if count_error(s.collective, s.nranks, count) is not None or (backend != "local" and _needs_blocks(s)):
            count -= count % s.nranks  # equal blocks per rank
        counts.append(count)
    if run.counts is not None:
        counts = [list(run.counts)]
    rows = []
    try:
        if backend == "local":
            _check_matching(inst, bar)
            for i, (nbytes, count) in enumerate(zip(byte_sizes, counts, strict=True)):
                which = f" ({i + 1}/{len(counts)})" if len(counts) > 1 else ""
                bar.stage(f"running {s.algorithm} at {size_text(nbytes)}{which}", 2 * len(s.steps))
                rows.append(_row(s, _run_local(s, 0 if run.counts is not None else int(count), run, bar)))  # type: ignore[arg-type]
        elif backend == "cuda":
            results = inst.run_cuda(
                counts, dtype, redop, iters=iters, warmup=run.warmup, verify=False, workdir=run.workdir,
                on_progress=bar.on_progress,
            )  # fmt: skip
            rows = [_mpi_row(s, dtype, redop, r) for r in results]
        elif backend == "mpi-cuda":
            gpu_rows = inst.run_mpi_cuda(
                counts, dtype, redop, iters=iters, warmup=run.warmup, timeout=run.timeout, verify=False,
                workdir=run.workdir, mpiexec_args=run.launcher_args, transport=run.transport,
            )  # fmt: skip
            rows = [_mpi_row(s, dtype, redop, r) | {"transport": r.transport} for r in gpu_rows]
        else:
            results = inst.run_mpi(
                counts, dtype, redop, backend=backend, iters=iters, warmup=run.warmup, timeout=run.timeout,
                verify=False, workdir=run.workdir, mpiexec_args=run.launcher_args, on_progress=bar.on_progress,
                env=run.env, mpiexec_prefix=run.mpiexec_prefix,
            )  # fmt: skip
            rows = [_mpi_row(s, dtype, redop, r) for r in results]
    except CollError as err:
        fail_input(err, inst.algorithm.sources)
    return rows


def _check_matching(inst: api.Instance, bar: Bar) -> None:
    """Exit 1 when sends and receives disagree: the schedule is wrong (an MPI run fails on it too)."""
    try:
        local.check_matching(inst.schedule)
    except local.MismatchError as err:
        from collc.diagnostics import format_error

        bar.close()
        click.echo(format_error(CollError(err.message, err.span, err.notes), inst.algorithm.sources), err=True)
        sys.exit(EXIT_WRONG)


def _run_local(s: Schedule, count: int, run: _Settings, bar: Bar) -> local.RunResult:
    """One size on the local backend, within the budget, its steps counted on ``bar``."""
    bounds = None
    if run.counts is None and s.compresses() and layout_error(s.collective, s.nranks, s.nchunks) is None:
        from collc.verify.compression import analyse

        bounds = analyse(s, input_bound=1.0, dtype=run.dtype).bound
    try:
        return local.run(
            s, count, run.dtype, run.redop, iters=run.iters, max_bytes=run.max_bytes or local.DEFAULT_MAX_BYTES,
            error_bounds=bounds, checked=True, on_progress=bar.on_progress, counts=run.counts,
        )  # fmt: skip
    except ValueError as err:
        raise CollError(str(err)) from None


def _compile_sizes(
    file: str,
    p: str,
    params: tuple[str, ...],
    dims: str | None,
    codecs: tuple[str, ...],
    out: str,
    no_build: bool,
    small_file: str | None,
    below: int,
    exact: bool,
) -> None:
    """``collc compile --target mpi-c -p 3..8``: one library for every rank count the constraints allow."""
    ranks = collect_ranges(p, (), None)["p"]
    values = collect_params(None, params, dims)
    alg = load_algorithm(file, codecs)
    check_values(alg, {"p": ranks, **{name: [value] for name, value in values.items()}}, p, params, dims)
    small = load_algorithm(small_file, ()) if small_file is not None else None
    sources = {**alg.sources, **(small.sources if small is not None else {})}
    try:
        files, compiled = alg.compile_library(
            ranks, out, params=values, small=small, small_below=below, build=not no_build, exact=exact
        )
    except CollError as err:
        fail_input(err, sources)
    for path in files:
        click.echo(str(path))
    left = [r for r in ranks if r not in compiled]
    excluded = f" ({', '.join(map(str, left))} excluded by the constraints)" if left else ""
    click.echo(f"# {alg.name}: one library for p = {', '.join(map(str, compiled))}{excluded}", err=True)


def _compile_any_p(
    file: str,
    target: str,
    params: tuple[str, ...],
    dims: str | None,
    codecs: tuple[str, ...],
    out: str,
    no_build: bool,
    small_file: str | None,
    verify_ranks: str | None,
    exact: bool,
) -> None:
    """``collc compile --target mpi-c|mpi-cuda -p any``: one library for the communicator sizes it covers."""
    if target not in ("mpi-c", "mpi-cuda"):
        raise click.UsageError(f"-p any applies to the mpi-c and mpi-cuda targets only, not {target}")
    if small_file is not None:
        raise click.UsageError("-p any takes no --small schedule")
    ranks = _verify_ranks(verify_ranks)
    values = collect_params(None, params, dims)
    alg = load_algorithm(file, codecs)
    what = "proving" if ranks == "all" else "verifying"
    try:
        with progress_bar(f"{what} {alg.name} for -p any") as bar:
            files, coverage = alg.compile_any_p(
                out, target=target, params=values, verify_ranks=ranks, build=not no_build,
                on_progress=bar.on_progress, exact=exact,
            )  # fmt: skip
    except CollError as err:
        fail_input(err, alg.sources)
    for path in files:
        click.echo(str(path))
    other = "goes to the MPI library" if target == "mpi-c" else "fails"
    click.echo(f"# {alg.name}: one library for any p: it serves {coverage.how()}; a communicator of another "
               f"size {other}, with the reason", err=True)  # fmt: skip


def _verify_ranks(text: str | None) -> list[int] | str:
    """``--verify-ranks``: the rank counts to verify (1 .. `api.ANY_P_VERIFIED` by default), or ``"all"``."""
    if text is None:
        return list(range(1, api.ANY_P_VERIFIED + 1))
    if text.strip().lower() == "all":
        return "all"
    try:
        ranks = parse_int_spec(text)
    except ValueError as err:
        raise bad_value("--verify-ranks", text, str(err)) from None
    if ranks[0] < 1:
        raise bad_value("--verify-ranks", text, f"rank counts start at 1, not {ranks[0]}")
    return ranks


def _small_options(target: str, small_file: str | None, small_below: str | None) -> int:
    """The small-message threshold in bytes; a usage error for --small(-below) where they do not apply."""
    if small_file is None:
        if small_below is not None:
            raise click.UsageError("--small-below needs --small FILE (the schedule for small calls)")
        return mpi_c.SMALL_BELOW
    if target != "mpi-c":
        raise click.UsageError(f"--small applies to the mpi-c target only, not {target}")
    if small_below is None:
        return mpi_c.SMALL_BELOW
    return parse_size(small_below, "--small-below")


def _check_transport(target: str, transport: str) -> None:
    """--transport names how mpi-cuda moves messages: auto, ipc or mpi (nccl is refused with the reason)."""
    if transport == "auto":
        return
    if transport not in TRANSPORTS:
        raise bad_value("--transport", transport, f"is not a transport (mpi-cuda has {', '.join(OFFERED_TRANSPORTS)})")
    if target != "mpi-cuda":
        fail_input(CollError(f"--transport {transport} applies to the mpi-cuda target only, not {target}"))
    try:
        check_transport(transport)
    except CollError as err:
        fail_input(err)


def _needs_blocks(s: Schedule) -> bool:
    return s.collective.rank_blocks or s.collective is Collective.ALLTOALL


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
    result = local.RunResult(
        s.algorithm, s.nranks, r.count, r.size_bytes, dtype, op, r.iters, r.avg_us, r.wrong, r.max_abs_error,
        r.error_bound,
    )  # fmt: skip
    row = _row(s, result)
    row.update(min_us=r.min_us, max_us=r.max_us, iters=r.iters)
    if isinstance(r, MpiRow) and r.wire_bytes >= 0:
        row["wire_bytes"] = r.wire_bytes  # every rank's sends of one call together, compressed payloads at their size
    return row


def _rows_text(s: Schedule, backend: str, rows: list[dict[str, Any]], where: str = "") -> str:
    mpi = backend != "local"
    ranks = f", {s.nranks} virtual ranks on GPU" if backend == "cuda" else f", {s.nranks} MPI processes" if mpi else ""
    if backend == "mpi-cuda":
        ranks += " on GPUs"
    if where:
        ranks += f" on {where}"
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
    if rows and rows[0].get("transport"):
        out.append(f"# transport: {rows[0]['transport']}")
    if lossy:
        out.append(
            "# compression: max|err| is measured against the exact float64 reduction, bound is the verifier's "
            "(inputs |x| <= 1); an element is wrong when its error exceeds its bound plus rounding"
        )
    return "\n".join(out)


def _figure(value: float | None, infinite: str) -> str:
    return infinite if value is None else f"{value:.3g}"
