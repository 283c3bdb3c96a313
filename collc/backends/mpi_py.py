"""The ``mpi-py`` target: a self-contained SPMD Python module over mpi4py and numpy.

`generate` renders ``codegen/mpi_py/module.py.j2`` with the step tables of a
verified schedule (`collc.backends.tables`).  The module needs only mpi4py and
numpy at run time, so it can be copied to a cluster without collc.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2

from collc import collectives
from collc.backends import tables
from collc.ir import Collective, Schedule, params_text
from collc.resources import data_dir

__all__ = ["generate", "module_name"]


def module_name(algorithm: str) -> str:
    """The generated module's name: ``collc_<algorithm>`` made a Python identifier."""
    return "collc_" + re.sub(r"\W", "_", algorithm)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("codegen") / "mpi_py")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _lines(lines: tuple[str, ...]) -> str:
    """``a.coll:3, 7; lib/b.coll:12``: source lines grouped by file, file names without folders."""
    by_file: dict[str, list[str]] = {}
    for text in lines:
        file, _, line = text.rpartition(":")
        by_file.setdefault(Path(file).name, []).append(line)
    return "; ".join(f"{file}:{', '.join(nums)}" for file, nums in by_file.items())


def _run(r: tables.Run, codecs: dict[str, int] | None) -> tuple[int, ...] | tuple[int, int, bool, int, bool]:
    """(lo, hi, reduce), and with codecs (lo, hi, reduce, codec index or -1, payload)."""
    if codecs is None:
        return (r.lo, r.hi, r.reduce)
    return (r.lo, r.hi, r.reduce, -1 if r.codec is None else codecs[r.codec], r.payload)


def _send(m: tables.Message, codecs: dict[str, int] | None) -> tuple[Any, ...]:
    return (m.peer, tuple(_run(r, codecs) for r in m.runs))


def _recv(m: tables.Message, codecs: dict[str, int] | None) -> tuple[Any, ...]:
    return (m.peer, tuple(_run(r, codecs) for r in m.runs), m.direct)


def _local(op: tables.LocalRun, codecs: dict[str, int]) -> tuple[int, int, int, bool]:
    return (op.lo, op.hi, codecs[op.codec], op.decompress)


_VCOUNTS = (Collective.ALLGATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL)


def context(schedule: Schedule) -> dict[str, Any]:
    """The template's data: everything is computed here, the template only lays it out."""
    t = tables.from_schedule(schedule, compression=True)
    codecs = {spec: k for k, spec in enumerate(t.codecs)} if schedule.compresses() else None
    infos = {s.index: s for s in t.steps}
    ranks = []
    for rank, steps in enumerate(t.ranks):
        rows = []
        for rs in steps:
            info = infos[rs.step]
            local = "" if codecs is None else ", " + repr(tuple(_local(op, codecs) for op in rs.local))
            rows.append(
                {
                    "step": rs.step,
                    "sends": repr(tuple(_send(m, codecs) for m in rs.sends)),
                    "recvs": repr(tuple(_recv(m, codecs) for m in rs.recvs)),
                    "local": local,
                    "phase": info.phase,
                    "lines": _lines(info.lines),
                }
            )
        ranks.append({"rank": rank, "steps": rows})
    return {
        "codecs": list(t.codecs),
        "algorithm": t.algorithm,
        "module": module_name(t.algorithm),
        "collective": t.collective.value,
        "nranks": t.nranks,
        "nchunks": t.nchunks,
        "root": t.root,
        "chunk_prefix": None if t.chunk_weights is None else repr(collectives.chunk_prefix(t.chunk_weights)),
        # counts given at run time (allgatherv, reduce_scatter_v, alltoallv) cut the chunks of plain schedules
        "vcounts": t.collective in _VCOUNTS and not t.codecs and t.chunk_weights is None,
        "source": Path(t.source).name,
        "params": params_text(t.params),
        "phases": [{"name": ph.name, "first": ph.first, "last": ph.last, "lines": _lines(ph.lines)} for ph in t.phases],
        "ranks": ranks,
    }


def render(schedule: Schedule) -> str:
    text = _environment().get_template("module.py.j2").render(**context(schedule))
    return text.rstrip() + "\n"


def generate(schedule: Schedule, out_dir: Path) -> list[Path]:
    """Write ``collc_<algorithm>.py`` for a verified ``schedule`` into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{module_name(schedule.algorithm)}.py"
    path.write_text(render(schedule))
    return [path]
