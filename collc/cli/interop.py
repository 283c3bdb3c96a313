"""`collc export`: a schedule as MSCCL-IR XML or as the IR JSON (docs/msccl.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from collc import report
from collc.backends import msccl
from collc.cli.common import (
    EXIT_WRONG,
    bad_value,
    check_output,
    fail_input,
    instance_options,
    load_instance,
    main,
    parse_size,
    write_failed,
)
from collc.diagnostics import CollError
from collc.ir import schedule_to_json


@main.command()
@instance_options
@click.option(
    "--format", "fmt", type=click.Choice(["msccl-xml", "json"]), default="msccl-xml", show_default=True,
    help="msccl-xml: MSCCL-IR for MSCCL runtimes; json: the schedule IR (docs/ir-json.md).",
)  # fmt: skip
@click.option("-o", "--output", "out", default="-", show_default=True, help="Output file ('-': standard output).")
@click.option(
    "--proto", type=click.Choice(list(msccl.PROTOCOLS)), default="Simple", show_default=True,
    help="msccl-xml: the NCCL protocol the runtime moves the program's data with (the proto attribute).",
)  # fmt: skip
@click.option("--min-bytes", default="0", show_default=True, help="msccl-xml: smallest size the program is for.")
@click.option("--max-bytes", default="1TiB", show_default=True, help="msccl-xml: largest size the program is for.")
@click.option(
    "--max-steps", type=click.IntRange(1, 1024), default=64, show_default=True,
    help="msccl-xml: most steps per threadblock the runtime takes (RCCL: 64; microsoft/msccl: 256).",
)  # fmt: skip
def export(
    file: str,
    p: str | None,
    params: tuple[str, ...],
    codecs: tuple[str, ...],
    dims: str | None,
    fmt: str,
    out: str,
    proto: str,
    min_bytes: str,
    max_bytes: str,
    max_steps: int,
) -> None:
    """Verify a schedule, then write it for other tools: MSCCL-IR XML (allreduce, allgather,
    reduce-scatter, alltoall), or the IR as JSON."""
    low, high = parse_size(min_bytes, "--min-bytes"), parse_size(max_bytes, "--max-bytes")
    if high < low:
        raise bad_value("--max-bytes", max_bytes, f"is below --min-bytes {min_bytes} ({high} < {low} bytes)")
    if high > msccl.MAX_BYTES:
        raise bad_value("--max-bytes", max_bytes, f"is above the largest size MSCCL-IR takes ({msccl.MAX_BYTES} bytes)")
    try:
        msccl.check_options(proto, low, high)
    except CollError as err:
        fail_input(err)
    if out != "-":
        check_output(out, "-o", parents=False)
    inst = load_instance(file, p, params, dims, codecs)
    checked = inst.verify()
    if not checked.ok:
        click.echo(report.report_text(inst.schedule, checked, inst.algorithm.sources), err=True)
        sys.exit(EXIT_WRONG)
    if fmt == "json":
        text = json.dumps(schedule_to_json(inst.schedule), indent=1) + "\n"
        summary = f"{inst.schedule.algorithm}: {len(inst.schedule.steps)} steps"
    else:
        limits = msccl.Limits(steps_per_threadblock=max_steps)
        try:
            algo = msccl.lower(inst.schedule, proto=proto, min_bytes=low, max_bytes=high, limits=limits)
        except CollError as err:
            fail_input(err, inst.algorithm.sources)
        text = msccl.to_xml(algo)
        summary = _summary(algo)
    if out == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(out).write_text(text)
    except OSError as err:
        write_failed(out, "-o", err)
    click.echo(f"wrote {out}: {summary}")


def _summary(algo: msccl.Algo) -> str:
    tbs = [len(g.threadblocks) for g in algo.gpus]
    steps = algo.most_steps()
    fused = {t: algo.count(t) for t in ("rcs", "rrcs", "rrs") if algo.count(t)}
    fused_text = ", ".join(f"{n} {t}" for t, n in fused.items()) or "none"
    return (
        f"{algo.coll} on {algo.ngpus} GPUs, {algo.nchannels} channel(s), {min(tbs)}..{max(tbs)} threadblocks "
        f"per GPU, at most {steps} steps per threadblock, fused: {fused_text}"
    )
