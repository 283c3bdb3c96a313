"""The ``mpi-c`` target for any communicator size (``collc compile --target mpi-c -p any``).

Instead of the step tables of one p, the library carries the program: `anyp_translate` turns
its phases, procedures and functions into C, and at the first call on a communicator of p
ranks the calling rank runs them for itself (``runtime/collc_anyp.h``) and gets the tables
`collc.backends.tables` would build from the verified schedule of that p; the step executor
(``runtime/collc_exec.h``) runs them.  `generate` writes ``collc_<algorithm>.c`` (the program,
the table builder's entry and the MPI entry points), ``collc_<algorithm>.h`` and a Makefile;
`build` compiles them with mpicc (`mpi_c.build`).

A library serves only the communicator sizes its `Coverage` names: those verified at compile
time (or all of them up to the all-p proof's limit); the generated file embeds them as runs
of sizes, and ``runtime/collc_cover.h`` sends a call on a communicator of another size to
PMPI with the reason, before any table is built.

`anyp_tables` reads the tables a built library computes for one p (its debugging entry point
``collc_<algorithm>_anyp_tables``, called through ctypes without MPI) as `RankTables`, in the
terms of `collc.backends.tables`, for comparison with the Python tables.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from collc.backends import mpi_c, tables
from collc.backends.anyp_translate import CFunction, refusal, translate
from collc.backends.csource import Sources, c_ident, c_string, run_compiler, write_sources
from collc.backends.mpitools import mpicc
from collc.diagnostics import CollError
from collc.frontend.program import Program
from collc.ir import Collective, ParamValue

__all__ = [
    "AnypPlan",
    "Coverage",
    "RankTables",
    "anyp_prefix",
    "anyp_tables",
    "build",
    "check_supported",
    "generate",
    "library_path",
]

RUNTIME_HEADERS: tuple[str, ...] = (
    *mpi_c.RUNTIME_HEADERS,
    "collc_avalue.h",
    "collc_anyp_rows.h",
    "collc_cover.h",
    "collc_anyp.h",
)


@dataclass(frozen=True, slots=True)
class Coverage:
    """The communicator sizes an any-p library serves: ``runs`` of sizes ``lo..hi`` (both included, ascending,
    disjoint), all of them verified one by one at compile time (``verified``: those the constraints allow, every one
    correct; the constraints exclude the rest, and the program refuses them at run time), or, with ``proved`` (how the
    proof went), every p up to the all-p proof's limit."""

    runs: tuple[tuple[int, int], ...]
    verified: tuple[int, ...] = ()
    proved: str = ""

    @classmethod
    def of_sizes(cls, sizes: Sequence[int], verified: Sequence[int]) -> Coverage:
        """The coverage of the rank counts ``sizes`` checked one by one, ``verified`` of them correct."""
        runs: list[tuple[int, int]] = []
        for p in sorted(set(sizes)):
            if runs and runs[-1][1] == p - 1:
                runs[-1] = (runs[-1][0], p)
            else:
                runs.append((p, p))
        return cls(tuple(runs), tuple(sorted(verified)))

    def __contains__(self, p: object) -> bool:
        return isinstance(p, int) and any(lo <= p <= hi for lo, hi in self.runs)

    def text(self, most: int = 8) -> str:
        """The sizes as runs, ``1..64`` or ``2, 4, 8..16`` (at most ``most`` runs shown, then ``...`` and the last)."""
        shown = [f"{lo}..{hi}" if hi > lo + 1 else f"{lo}, {hi}" if hi > lo else str(lo) for lo, hi in self.runs]
        if len(shown) > most:
            shown = [*shown[: most - 1], "...", shown[-1]]
        return ", ".join(shown)

    def how(self) -> str:
        """Which sizes are served and how they were covered, for a comment or a message."""
        if self.proved:
            return f"every p up to {self.runs[-1][1]} the constraints allow, proved for all p ({self.proved})"
        sizes = sum(hi - lo + 1 for lo, hi in self.runs)
        text = f"p = {self.text()}, each verified at compile time"
        if len(self.verified) == sizes:
            return text
        allowed = Coverage.of_sizes(self.verified, ()).text() if self.verified else "none"
        return f"{text} (the constraints allow {allowed} of them)"


@dataclass(frozen=True, slots=True)
class GlobalRow:
    name: str
    ident: str


@dataclass(frozen=True, slots=True)
class AnypPlan:
    """What the any-p templates render."""

    algorithm: str
    ident: str
    collective: str
    collective_enum: str
    mpi_name: str
    api_name: str
    source: str
    params: str
    cover_runs: tuple[tuple[int, int], ...]  # the sizes the library serves (`Coverage`)
    cover_text: str
    cover_proved: bool
    cover_how: str  # for the file's comment
    root: int
    files: tuple[str, ...]
    globals: tuple[GlobalRow, ...]
    fns: tuple[str, ...]
    prototypes: tuple[str, ...]
    functions: tuple[CFunction, ...]
    instance: tuple[str, ...]
    phases: tuple[str, ...]
    sources: tuple[str, ...]
    file_name: str
    runtime_headers: tuple[str, ...]
    cflags: str
    sanitize_flags: str
    nranks: str = "any"
    exact: bool = False  # floating-point MPI_SUM and MPI_PROD go to PMPI (mpi_c.generate's ``exact``)
    agree_runs: tuple[tuple[int, int], ...] = ()  # the sizes whose ranks combine in one order (`agreeing_sizes`)
    agree_text: str = ""
    agree_how: str = ""  # for the file's comment
    mixed_text: str = '""'  # a C string: why a floating-point sum goes to PMPI at the other sizes


def check_supported(program: Program, params: Mapping[str, ParamValue]) -> None:
    """CollError at the first construct any-p compilation does not support, or for a missing parameter."""
    problem = refusal(program, params)
    if problem is not None:
        raise problem


def plan(
    program: Program,
    params: Mapping[str, ParamValue],
    coverage: Coverage,
    *,
    exact: bool = False,
    agree: Coverage | None = None,
) -> AnypPlan:
    """The data the templates render for ``program`` with the compile-time ``params`` (p excluded), serving the
    sizes of ``coverage``; ``agree``: those whose ranks combine a floating-point sum in one order (`_agreement`)."""
    if not coverage.runs:
        raise CollError(f"{program.name}: an any-p library that serves no communicator size")
    check_supported(program, params)
    sources = Sources(program.path)
    t = translate(program, params, sources)
    ident = c_ident(program.name)
    given_root = params.get("root")
    root = given_root if program.collective.has_root and type(given_root) is int else -1
    shown = ", ".join(f"{k}={v}" for k, v in params.items())
    return AnypPlan(
        algorithm=program.name,
        ident=ident,
        collective=program.collective.value,
        collective_enum=f"COLLC_COLL_{program.collective.name}",
        mpi_name=mpi_c.MPI_NAMES[program.collective],
        api_name=mpi_c.API_NAMES[program.collective],
        source=sources.label(program.path),
        params=f"p=any{', ' + shown if shown else ''}",
        cover_runs=coverage.runs,
        cover_text=coverage.text(),
        cover_proved=bool(coverage.proved),
        cover_how=_comment(coverage.how()),
        root=root,
        files=t.files,
        globals=tuple(GlobalRow(name, c_ident(name)) for name in t.globals),
        fns=tuple(c_ident(name) for name in t.fns),
        prototypes=t.prototypes,
        functions=t.functions,
        instance=t.instance,
        phases=t.phases,
        sources=(f"collc_{ident}.c",),
        file_name=f"collc_{ident}.c",
        runtime_headers=RUNTIME_HEADERS,
        cflags=" ".join(mpi_c.CFLAGS),
        sanitize_flags=" ".join(mpi_c.SANITIZE_FLAGS),
        exact=exact,
        **_agreement(program, coverage, agree),
    )


ORDER_ANALYSED = 64
"""The largest p at which an any-p library's order of combination is analysed (`collc.backends.order`)."""


def _agreement(program: Program, coverage: Coverage, agree: Coverage | None) -> dict[str, object]:
    """The template's fields for the sizes ``agree`` whose ranks combine a floating-point sum in one order (the
    caller elaborates and analyses them: `collc.api`); None: not analysed, so every size of an allreduce goes to
    PMPI for such sums (other collectives reduce each result at one rank: every size agrees)."""
    if program.collective is not Collective.ALLREDUCE:
        return {"agree_runs": coverage.runs, "agree_text": coverage.text(), "agree_how": "every size"}
    text = agree.text() if agree is not None and agree.runs else "none"
    why = (
        f"its ranks may combine the contributions in different orders at this p (they are checked to combine in "
        f"one order at p = {text}, up to {ORDER_ANALYSED})"
    )
    return {
        "agree_runs": agree.runs if agree is not None else (),
        "agree_text": text,
        "agree_how": f"p = {text}",
        "mixed_text": c_string(why),
    }


def _comment(text: str) -> str:
    """``text`` safe inside a C comment."""
    return text.replace("*/", "* /")


def library_path(out_dir: Path, program: Program) -> Path:
    return Path(out_dir) / f"libcollc_{c_ident(program.name)}.so"


def build(out_dir: Path, program: Program, *, cflags: Sequence[str] = ()) -> Path:
    """Compile the generated folder with mpicc into ``libcollc_<algorithm>.so`` (CollError with the compiler's
    output on failure)."""
    out_dir = Path(out_dir).resolve()
    source = out_dir / f"collc_{c_ident(program.name)}.c"
    lib = library_path(out_dir, program)
    command = [str(mpicc()), *mpi_c.CFLAGS, *mpi_c.extra_cflags(), *cflags]
    command += ["-I", str(out_dir), "-o", str(lib), str(source), "-lm"]
    run_compiler(command, out_dir, source)
    return lib


def generate(
    program: Program,
    out_dir: Path,
    params: Mapping[str, ParamValue],
    coverage: Coverage,
    *,
    exact: bool = False,
    agree: Coverage | None = None,
) -> list[Path]:
    """Write the any-p library's sources, header, Makefile and runtime headers into ``out_dir``; the library serves
    the sizes of ``coverage``; ``exact`` as for `mpi_c.generate`, ``agree`` as for `plan`."""
    data = plan(program, params, coverage, exact=exact, agree=agree)
    out_dir = Path(out_dir)
    header = f"collc_{data.ident}.h"
    files = [(data.file_name, "collc_anyp.c.j2"), (header, "collc_anyp.h.j2"), ("Makefile", "Makefile.j2")]
    return write_sources(out_dir, mpi_c._environment(), [(n, t, {"plan": data}) for n, t in files], RUNTIME_HEADERS)


# --------------------------------------------------------------------------
# Reading a built library's tables (tests, debugging)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankTables:
    """The tables a library computes for one rank: its messages by raw step counter, its scratch need, and for
    dataflow issue what each message waits for (indices of its earlier messages in table order: per step its sends,
    then its receives) and the scratch space of the run."""

    steps: tuple[tables.RankStep, ...]
    scratch: int
    max_messages: int
    deps: tuple[tuple[int, ...], ...]
    flow_scratch: int
    segments: tuple[tuple[int, int], ...] = ()  # alltoall: the chunk runs the rank touches (mpi_c's segments)


def _dump(library: Path, algorithm: str, p: int, rank: int) -> str:
    lib = ctypes.CDLL(str(library))
    fn = getattr(lib, f"collc_{c_ident(algorithm)}_anyp_tables")
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int64]
    fn.restype = ctypes.c_int
    cap = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = fn(p, rank, buf, cap)
        if n < 0:
            raise CollError(buf.value.decode())
        if n <= cap:
            return buf.raw[:n].decode()
        cap = n + 1


def anyp_tables(library: Path, algorithm: str, p: int) -> tuple[int, list[RankTables]]:
    """The number of chunks and every rank's tables that ``library`` computes for ``p`` ranks; CollError with the
    library's message when the program fails at that p."""
    return _parse(_dump(library, algorithm, p, -1), p)


def anyp_prefix(library: Path, algorithm: str, p: int) -> tuple[int, ...] | None:
    """The prefix sums of the chunk weights ``library`` computes for ``p`` ranks (None without weights)."""
    for line in _dump(library, algorithm, p, 0).splitlines()[1:2]:
        parts = line.split()
        if parts[0] == "prefix":
            return tuple(int(x) for x in parts[1:])
    return None


def _parse(text: str, p: int) -> tuple[int, list[RankTables]]:
    lines = text.splitlines()
    nchunks = int(lines[0].split()[1])
    msgs: list[dict[int, tuple[list[tables.Message], list[tables.Message]]]] = [{} for _ in range(p)]
    extra: list[dict[str, int]] = [{} for _ in range(p)]
    deps: list[list[tuple[int, ...]]] = [[] for _ in range(p)]
    segments: list[tuple[tuple[int, int], ...]] = [() for _ in range(p)]
    for line in lines[1:]:
        parts = line.split()
        if parts[0] == "prefix":  # the chunk weights (anyp_prefix)
            continue
        rank = int(parts[0])
        if parts[1] in ("scratch", "max_messages", "flow_scratch"):
            extra[rank][parts[1]] = int(parts[2])
            continue
        if parts[1] == "segments":
            segments[rank] = tuple((int(a), int(b)) for a, _, b in (x.partition("-") for x in parts[2:]))
            continue
        step, kind, peer = int(parts[1]), parts[2], int(parts[3])
        assert parts[-2] == "after", line
        deps[rank].append(() if parts[-1] == "-" else tuple(int(d) for d in parts[-1].split(",")))
        runs = []
        for item in parts[4:-2]:
            span, _, action = item.partition(":")
            lo, _, hi = span.partition("-")
            runs.append(tables.Run(int(lo), int(hi), action == "r"))
        sends, recvs = msgs[rank].setdefault(step, ([], []))
        if kind == "send":
            sends.append(tables.Message(peer, tuple(runs)))
        else:
            recvs.append(tables.Message(peer, tuple(runs), kind == "direct"))
    out = []
    for rank in range(p):
        steps = tuple(tables.RankStep(s, tuple(a), tuple(b)) for s, (a, b) in sorted(msgs[rank].items()))
        out.append(
            RankTables(
                steps,
                extra[rank].get("scratch", 0),
                extra[rank].get("max_messages", 0),
                tuple(deps[rank]),
                extra[rank].get("flow_scratch", 0),
                segments[rank],
            )
        )
    return nchunks, out
