"""The ``cuda`` target: generated CUDA C++, builds of every example, and runs with and without a GPU.

Golden files: ``tests/golden/cuda/<algorithm>_p4.cu`` and ``_cuda.h`` hold the
generated sources of ring_allreduce, swing_bw, compressed_ring_allreduce and
ring_allgather (with the entry points for counts given at run time) at p=4,
compared textually.
After a deliberate change to the templates, regenerate them with

    COLLC_REGEN_GOLDEN=1 pytest tests/test_cuda.py -k golden

and review the diff.

Without a GPU (CI), every example is compiled with ``nvcc -arch=sm_90`` and
its host driver is run against ``tests/cuda/mock_cudart.c``, a CPU stand-in
for the CUDA runtime that executes the queued copies, kernels, event records
and waits in a random order allowed by CUDA's stream and event semantics, so
that a missing dependency shows up as a wrong result.  With a GPU and CuPy
(``pytest -m gpu``), the same libraries run for real through
`cuda.run_library` and `cuda.run`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from golden_files import assert_golden

import collc
from collc import collectives
from collc.backends import cuda, local, tables
from collc.codecs import CODECS, parse_codec
from collc.diagnostics import CollError
from collc.ir import Action, Collective, OpKind, Schedule
from collc.verify.check import check

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "cuda"
MOCK_SOURCE = HERE / "cuda" / "mock_cudart.c"
MOCK_CODECS = HERE / "cuda" / "mock_codecs.cpp"
MOCK_RUN = HERE / "cuda" / "mock_run.py"
REDUCE_HOST = HERE / "cuda" / "reduce_host.cu"
RUNTIME = HERE.parent / "runtime"
EXAMPLES = HERE.parent / "examples"

# Every bundled example, at a small p: (case id, example, parameters).
CASES: list[tuple[str, str, dict[str, int]]] = [
    ("ring_allreduce_k3", "ring_allreduce", {"p": 5, "k": 3}),
    ("swing_bw", "swing_bw", {"p": 6}),
    ("swing_lat", "swing_lat", {"p": 4}),
    ("swing_bw_pow2", "swing_bw_pow2", {"p": 4}),
    ("rabenseifner", "rabenseifner", {"p": 6}),
    ("recursive_doubling", "recursive_doubling", {"p": 4}),
    ("recursive_doubling_any", "recursive_doubling_any", {"p": 3}),
    ("ring_allgather_k3", "ring_allgather", {"p": 4, "k": 3}),
    ("bruck_allgather", "bruck_allgather", {"p": 5}),
    ("ring_reduce_scatter", "ring_reduce_scatter", {"p": 4}),
    ("binomial_broadcast", "binomial_broadcast", {"p": 5, "root": 1}),
    ("binomial_reduce", "binomial_reduce", {"p": 4, "root": 2}),
    ("pairwise_alltoall", "pairwise_alltoall", {"p": 4}),
    ("bruck_alltoall", "bruck_alltoall", {"p": 5}),
    ("scatter_allgather_broadcast", "scatter_allgather_broadcast", {"p": 6, "root": 4}),
    ("double_binary_tree_allreduce", "double_binary_tree_allreduce", {"p": 7}),
    ("pairwise_reduce_scatter", "pairwise_reduce_scatter", {"p": 5}),
    ("direct_allgather", "direct_allgather", {"p": 3}),
    ("recursive_doubling_allgather", "recursive_doubling_allgather", {"p": 8}),
    ("pipelined_ring_allreduce", "pipelined_ring_allreduce", {"p": 4, "k": 2}),
    ("striped_ring_allreduce", "striped_ring_allreduce", {"p": 4}),
    ("weighted_striped_ring_allreduce", "weighted_striped_ring_allreduce", {"p": 4, "share": 70}),
    ("hier_allreduce_swing", "hier_allreduce_swing", {"nodes": 2, "local": 2}),
    ("hier_allreduce_ring", "hier_allreduce_ring", {"nodes": 3, "local": 2}),
    ("hier_allgather", "hier_allgather", {"nodes": 2, "local": 3}),
    ("node_aware_allgather", "node_aware_allgather", {"nodes": 2, "local": 3}),
    ("node_aware_reduce_scatter", "node_aware_reduce_scatter", {"nodes": 3, "local": 2}),
    ("binomial_gather", "binomial_gather", {"p": 5, "root": 3}),
    ("binomial_scatter", "binomial_scatter", {"p": 6, "root": 2}),
    ("hillis_steele_scan", "hillis_steele_scan", {"p": 5}),
    ("hillis_steele_exscan", "hillis_steele_exscan", {"p": 6}),
    ("dissemination_barrier", "dissemination_barrier", {"p": 5}),
    ("trivance_allreduce", "trivance_allreduce", {"p": 9}),
    ("trivance_bw_allreduce", "trivance_bw_allreduce", {"p": 9}),
    ("pat_allgather", "pat_allgather", {"p": 5}),
    ("pat_reduce_scatter", "pat_reduce_scatter", {"p": 6}),
    ("ibing_allreduce", "ibing_allreduce", {"p": 5}),
    ("bine_allreduce", "bine_allreduce", {"p": 8}),
    ("bine_allgather", "bine_allgather", {"p": 4}),
    ("bine_reduce_scatter", "bine_reduce_scatter", {"p": 8}),
    ("bine_alltoall", "bine_alltoall", {"p": 4}),
    ("bine_broadcast", "bine_broadcast", {"p": 6, "root": 5}),
    ("bine_reduce", "bine_reduce", {"p": 7, "root": 2}),
    ("bine_gather", "bine_gather", {"p": 6, "root": 4}),
    ("bine_scatter", "bine_scatter", {"p": 6, "root": 1}),
]
CASE_IDS = [case for case, _, _ in CASES]

# Every example with compression points, and every codec with CUDA kernels: (case id, example,
# parameters, codec overrides).  Each one runs wire compression, payload forwarding or both.
CODEC_CASES: list[tuple[str, str, dict[str, int], dict[str, str]]] = [
    ("c_ring_allreduce_ebq", "compressed_ring_allreduce", {"p": 4, "k": 2}, {}),
    ("c_ring_allreduce_fwq", "compressed_ring_allreduce", {"p": 5}, {"q": "fwq(bits=8, block=64)"}),
    ("c_ring_reduce_scatter_bf16", "compressed_ring_reduce_scatter", {"p": 4}, {"q": "bf16"}),
    ("c_ring_reduce_scatter_lossless", "compressed_ring_reduce_scatter", {"p": 3}, {"q": "lossless"}),
    ("c_ring_allgather_lossless", "compressed_ring_allgather", {"p": 4}, {"q": "lossless"}),
    ("c_ring_allgather_p2p_fp16", "compressed_ring_allgather_p2p", {"p": 3}, {"q": "fp16"}),
    ("c_homomorphic_allreduce", "homomorphic_allreduce", {"p": 4}, {}),
    ("c_direct_allreduce_fwq", "compressed_direct_allreduce", {"p": 4}, {"q": "fwq(bits=8, block=32)"}),
    ("c_swing_bw", "compressed_swing_bw", {"p": 6}, {}),
    ("c_direct_reduce_scatter", "compressed_direct_reduce_scatter", {"p": 4}, {}),
]
CODEC_CASE_IDS = [case for case, _, _, _ in CODEC_CASES]

# The cases the normal suite builds and runs on the mock runtime (allreduce, alltoall, wire compression,
# payload forwarding, homomorphic sums, the start-of-step rule); the others (reduce-scatter and broadcast
# among them) run with -m slow, and all of them on a GPU (-m gpu).
FAST_CASES = ("ring_allreduce_k3", "pairwise_alltoall", "swap_allreduce",
              "c_ring_allreduce_ebq", "c_ring_allreduce_fwq", "c_homomorphic_allreduce")  # fmt: skip

# Not an example: a schedule whose correctness needs the start-of-step rule for a copied chunk
# that its receiver also sends in the same step (the message must land in scratch).
SWAP = ("swap_allreduce", str(HERE / "cuda" / "swap_allreduce.coll"), {"p": 2})

# (dtype, op) pairs every case runs with, and the counts (elements) it runs at.
MATRIX: list[tuple[str, str]] = [
    ("float32", "sum"),
    ("float64", "prod"),
    ("float16", "max"),
    ("bfloat16", "sum"),
    ("int32", "min"),
    ("int64", "prod"),
]
COUNTS = (0, 1, 5, 37, 1000, 4099)


def _schedule(name: str, params: dict[str, int], codecs: dict[str, str] | None = None) -> Schedule:
    inst = collc.load(name).with_codecs(codecs or {}).instantiate(**params)
    assert inst.verify().ok
    return inst.schedule


def _case(case: str) -> tuple[str, dict[str, int], dict[str, str]]:
    """(example, parameters, codec overrides) of a case id."""
    for cid, name, params, *codecs in [*CASES, SWAP, *CODEC_CASES]:
        if cid == case:
            return name, params, (codecs[0] if codecs else {})
    raise KeyError(case)


def _counts(schedule: Schedule) -> list[int]:
    """COUNTS, rounded to what the collective accepts (alltoall: multiples of p)."""
    p = schedule.nranks
    if schedule.collective is Collective.ALLTOALL:
        return sorted({c - c % p for c in COUNTS})
    return list(COUNTS)


def nvcc_or_skip() -> Path:
    """nvcc, or a skip saying why there is none."""
    try:
        return cuda.nvcc()
    except CollError as err:
        pytest.skip(str(err))


@dataclass(frozen=True)
class Built:
    schedule: Schedule
    out: Path
    lib: Path  # built with -cudart shared, for the mock runtime


class Libraries(dict[str, Built]):
    """Cases built with nvcc -arch=sm_90 -cudart shared: the normal suite's ahead of the tests, in parallel;
    the others (-m slow) when a test first asks for one."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def start(self, case: str) -> tuple[Schedule, Path]:
        schedule = _schedule(*_case(case))
        cuda.generate(schedule, self.root / case)
        return schedule, self.root / case

    def __missing__(self, case: str) -> Built:
        schedule, out = self.start(case)
        self[case] = Built(schedule, out, cuda.build(out, schedule, flags=("-cudart", "shared")))
        return self[case]


@dataclass(frozen=True)
class Builds:
    libs: Libraries
    reduce_host: Path  # tests/cuda/reduce_host.cu


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    """The normal suite's cases generated and built, and the host kernel harness, in parallel."""
    nvcc = nvcc_or_skip()
    root = tmp_path_factory.mktemp("cuda")
    libs = Libraries(root)
    jobs = {case: libs.start(case) for case in FAST_CASES}
    harness = root / "reduce_host"
    harness_cmd = [str(nvcc), "-O2", "-arch=sm_90", "-I", str(RUNTIME), "-o", str(harness), str(REDUCE_HOST)]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        host = pool.submit(subprocess.run, harness_cmd, capture_output=True, text=True)
        futures = {
            case: pool.submit(cuda.build, out, schedule, flags=("-cudart", "shared"))
            for case, (schedule, out) in jobs.items()
        }
        libs.update({case: Built(jobs[case][0], jobs[case][1], f.result()) for case, f in futures.items()})
        compiled = host.result()
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return Builds(libs, harness)


def _slow_unless_fast(cases: list[str]) -> list[object]:
    return [case if case in FAST_CASES else pytest.param(case, marks=pytest.mark.slow) for case in cases]


@pytest.fixture(scope="module")
def built(builds: Builds) -> dict[str, Built]:
    return builds.libs


@pytest.fixture(scope="module")
def mock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/cuda/mock_cudart.c as libcudart.so.13."""
    out = tmp_path_factory.mktemp("mock")
    version_script = out / "cudart.map"
    version_script.write_text("libcudart.so.13 { global: *; };\n")
    lib = out / "libmock_cudart.so"
    warn = ["-O2", "-Wall", "-Wextra", "-Werror", "-fPIC"]
    codecs = out / "mock_codecs.o"
    compile_codecs = ["c++", "-std=c++17", *warn, "-ffp-contract=off", "-fno-strict-aliasing", "-I", str(RUNTIME)]
    compile_codecs += ["-c", "-o", str(codecs), str(MOCK_CODECS)]
    cmd = ["cc", *warn, "-shared", "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={version_script}"]
    cmd += ["-o", str(lib), str(MOCK_SOURCE), str(codecs), "-lstdc++", "-lm"]
    for command in (compile_codecs, cmd):
        proc = subprocess.run(command, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return lib


def mock_run(
    mock: Path, b: Built, name: str, params: dict[str, int], cases: list[dict], codecs: dict[str, str] | None = None
) -> list[dict]:
    """Run ``cases`` on the mock runtime in a subprocess; one result per case."""
    args = [sys.executable, str(MOCK_RUN), str(mock), str(b.lib), name, json.dumps(params), json.dumps(cases)]
    args.append(json.dumps(codecs or {}))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


# --------------------------------------------------------------------------
# Generated text
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ring_allreduce", "swing_bw", "compressed_ring_allreduce", "ring_allgather"])
def test_golden(name: str, tmp_path: Path) -> None:
    schedule = _schedule(name, {"p": 4})
    cuda.generate(schedule, tmp_path)
    cu_name, h_name = cuda.source_names(schedule)
    for generated, suffix in ((cu_name, ".cu"), (h_name, "_cuda.h")):
        assert_golden(tmp_path / generated, GOLDEN / f"{name}_p4{suffix}")


def test_generated_files(tmp_path: Path) -> None:
    schedule = _schedule("binomial_reduce", {"p": 5, "root": 3})
    files = cuda.generate(schedule, tmp_path / "out")
    names = {f.name for f in files}
    assert names == {"collc_binomial_reduce.cu", "collc_binomial_reduce_cuda.h", "Makefile", *cuda.RUNTIME_HEADERS}
    text = (tmp_path / "out" / "collc_binomial_reduce.cu").read_text()
    assert "binomial_reduce.coll:" in text and str(EXAMPLES) not in text
    assert "static int phase_reduce(struct collc_cuda_ctx *ctx)" in text
    assert 'extern "C" int collc_binomial_reduce_cuda_run(' in text
    assert "COLLC_CUDA_COLL_REDUCE," in text
    header = (tmp_path / "out" / "collc_binomial_reduce_cuda.h").read_text()
    assert "#define COLLC_BINOMIAL_REDUCE_CUDA_ROOT 3" in header


def ir_facts(schedule: Schedule) -> set[tuple[int, int, int, int, str]]:
    """(step, src, dst, chunk, action) straight from the IR's ops (local ops move nothing)."""
    facts = set()
    for step in schedule.steps:
        for op in step.ops:
            for c in op.chunks.ids().tolist():
                if op.kind.local:
                    continue
                if op.kind is OpKind.SEND:
                    facts.add((step.index, op.rank, op.peer, c, "send"))
                else:
                    facts.add((step.index, op.peer, op.rank, c, "reduce" if op.action is Action.REDUCE else "copy"))
    return facts


def direct_messages(facts: set[tuple[int, int, int, int, str]]) -> set[tuple[int, int, int]]:
    """(step, src, dst) of the messages that may land in place: only copies, of chunks dst does not send then.

    The tables' rule without its single-run condition (which only MPI's contiguous receives need).
    """
    sent: dict[tuple[int, int], set[int]] = {}
    for step, src, _, c, action in facts:
        if action == "send":
            sent.setdefault((step, src), set()).add(c)
    ok: dict[tuple[int, int, int], bool] = {}
    for step, src, dst, c, action in facts:
        if action != "send":
            fits = action == "copy" and c not in sent.get((step, dst), set())
            ok[(step, src, dst)] = ok.get((step, src, dst), True) and fits
    return {key for key, fits in ok.items() if fits}


_ARRAY = re.compile(
    r"static const struct collc_cuda_(run|msg|step|local) (\w+)_(?:runs|msgs|steps|locals)\[\] = \{\n(.*?)\n\};",
    re.S,
)
_ROW = re.compile(r"^\s*\{ ([^}]*) \},", re.M)


@dataclass
class SourceTables:
    """What the tables of a generated .cu say, read back out of its text."""

    facts: set[tuple[int, int, int, int, str]]  # (step, src, dst, chunk, send | copy | reduce)
    direct: set[tuple[int, int, int]]  # (step, src, dst) of the direct messages
    wire: set[tuple[int, int, int, int, str]]  # (step, src, dst, chunk, codec) compressed on the wire
    payload: set[tuple[int, int, int, int, str]]  # (step, src, dst, chunk, codec) forwarded as payloads
    local: set[tuple[int, int, int, str]]  # (step, rank, chunk, compress | decompress)


def _covers(steps: list[list[str]], rows: list[list[str]], first: int, count: int) -> None:
    """The step table covers ``rows`` exactly, in order, each row in its step."""
    assert [r for row in steps for r in range(int(row[first]), int(row[first]) + int(row[count]))] == list(
        range(len(rows))
    )
    for row in steps:
        assert {rows[r][0] for r in range(int(row[first]), int(row[first]) + int(row[count]))} <= {row[0]}


def source_tables(text: str) -> SourceTables:
    """Read the tables back out of a generated .cu."""
    arrays: dict[tuple[str, str], list[list[str]]] = {}
    for kind, phase, body in _ARRAY.findall(text):
        arrays[(kind, phase)] = [[cell.strip() for cell in row.split(",")] for row in _ROW.findall(body)]
    names = (
        re.findall(r'^    "([^"]*)",$', text.split("codec_names[] = {", 1)[1].split("};")[0], re.M)
        if ("codec_names[] = {" in text)
        else []
    )
    out = SourceTables(set(), set(), set(), set(), set())
    for (kind, phase), rows in arrays.items():
        steps = arrays[("step", phase)]
        if kind == "local":
            _covers(steps, rows, 3, 4)
            for step, rank, lo, hi, what, _codec in rows:
                verb = "decompress" if what == "COLLC_CUDA_DECOMPRESS" else "compress"
                out.local.update((int(step), int(rank), c, verb) for c in range(int(lo), int(hi)))
        if kind != "msg":
            continue
        runs = arrays[("run", phase)]
        _covers(steps, rows, 1, 2)
        for step, src, dst, landing, first_run, nruns in rows:
            s, a, b = int(step), int(src), int(dst)
            if landing == "COLLC_CUDA_DIRECT":
                out.direct.add((s, a, b))
            for lo, hi, action, how, codec, _fuse in runs[int(first_run) : int(first_run) + int(nruns)]:
                act = "reduce" if action == "COLLC_CUDA_REDUCE" else "copy"
                for c in range(int(lo), int(hi)):
                    out.facts.add((s, a, b, c, "send"))
                    out.facts.add((s, a, b, c, act))
                    if how == "COLLC_CUDA_WIRE":
                        out.wire.add((s, a, b, c, names[int(codec)]))
                    elif how == "COLLC_CUDA_PAYLOAD":
                        out.payload.add((s, a, b, c, names[int(codec)]))
    return out


@pytest.mark.parametrize(
    ("name", "params"),
    [(n, p) for _, n, p in CASES] + [("swing_bw", {"p": 12}), ("ring_allreduce", {"p": 7}), ("swing_lat", {"p": 16})],
)
def test_generated_tables_are_the_verified_schedule(name: str, params: dict[str, int], tmp_path: Path) -> None:
    schedule = _schedule(name, params)
    cuda.generate(schedule, tmp_path)
    got = source_tables((tmp_path / cuda.source_names(schedule)[0]).read_text())
    assert got.facts == ir_facts(schedule)
    assert got.direct == direct_messages(ir_facts(schedule))
    assert not got.wire and not got.payload and not got.local
    t = tables.from_schedule(schedule)
    assert got.direct >= {
        (rs.step, m.peer, r) for r, steps in enumerate(t.ranks) for rs in steps for m in rs.recvs if m.direct
    }


@pytest.mark.parametrize("case", CODEC_CASE_IDS)
def test_generated_codec_tables_are_the_verified_schedule(case: str, tmp_path: Path) -> None:
    """Compressed schedules: the same facts, plus how each chunk travels and the local ops, against the IR."""
    schedule = _schedule(*_case(case))
    cuda.generate(schedule, tmp_path)
    got = source_tables((tmp_path / cuda.source_names(schedule)[0]).read_text())
    assert got.facts == ir_facts(schedule)
    wire, local = set(), set()
    for step in schedule.steps:
        for op in step.ops:
            for c in op.chunks.ids().tolist():
                if op.kind is OpKind.SEND and op.codec is not None:
                    wire.add((step.index, op.rank, op.peer, c, op.codec))
                elif op.kind.local:
                    local.add((step.index, op.rank, c, op.kind.value))
    assert got.wire == wire  # a send names a codec exactly when the sender compresses on the wire
    assert got.local == local
    # a payload is forwarded by a send that names no codec, of a chunk its sender compressed before
    compressed_before = {(rank, c) for step, rank, c, what in local if what == "compress"}
    for step, src, dst, c, _codec in got.payload:
        assert ((step, src, dst, c, "send") in got.facts and (src, c) in compressed_before) or any(
            f[2] == src and f[3] == c and f[0] < step for f in got.payload
        )
    assert not {f[:4] for f in got.payload} & {f[:4] for f in got.wire} and not got.direct


def test_swap_lands_in_scratch() -> None:
    """The copy into rank 0 at step 0 overwrites a chunk rank 0 sends in that step: not direct."""
    _, name, params = SWAP
    (copy, reduce) = cuda.step_messages(tables.from_schedule(_schedule(name, params)))[0]
    assert (copy.src, copy.dst, copy.direct, reduce.direct) == (1, 0, False, False)


def test_messages_are_sorted_by_receiver() -> None:
    """The runtime lays out each receiver's scratch messages end to end, in table order."""
    t = tables.from_schedule(_schedule("swing_bw", {"p": 12}))
    for msgs in cuda.step_messages(t).values():
        assert [(m.dst, m.src) for m in msgs] == sorted((m.dst, m.src) for m in msgs)


def test_every_example_is_covered() -> None:
    """CASES holds every example without compression points, CODEC_CASES every one with them."""
    plain, compressed = set(), set()
    hierarchical = sorted(EXAMPLES.glob("hierarchical/*.coll"))
    for path in sorted(EXAMPLES.glob("*.coll")) + sorted(EXAMPLES.glob("compression/*.coll")) + hierarchical:
        params = {"nodes": 2, "local": 2} if path in hierarchical else {"p": 4}
        schedule = collc.load(str(path)).instantiate(**params).schedule
        (compressed if schedule.compresses() else plain).add(path.stem)
    assert {name for _, name, _ in CASES} == plain
    assert {name for _, name, _, _ in CODEC_CASES} == compressed
    kinds = {parse_codec(codecs.get("q", "ebq(eb=1e-3)")).name for _, _, _, codecs in CODEC_CASES}
    assert kinds | {"hq"} == {name for name, cls in CODECS.items() if cls.cuda_kernels}


def test_codec_without_kernels_is_refused(tmp_path: Path) -> None:
    schedule = _schedule("compressed_ring_allgather", {"p": 3}, {"q": "zfp(rate=8)"})
    with pytest.raises(CollError, match=r"zfp\(rate=8\) has no CUDA kernels"):
        cuda.generate(schedule, tmp_path / "zfp")
    assert not (tmp_path / "zfp").exists()


def test_tables_without_codecs_refuse_compression() -> None:
    schedule = _schedule("compressed_ring_allreduce", {"p": 3})
    with pytest.raises(CollError, match="for an executor without codecs"):
        tables.from_schedule(schedule)


# --------------------------------------------------------------------------
# Builds (nvcc, no GPU needed)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("case", _slow_unless_fast(CASE_IDS))
def test_every_example_builds(built: dict[str, Built], case: str) -> None:
    assert built[case].lib.is_file()


def test_library_builds_and_links(tmp_path: Path) -> None:
    """The default build (static CUDA runtime) links and loads without a GPU; layout and scratch sizes are collc's."""
    nvcc_or_skip()
    schedule = _schedule("swing_bw", {"p": 6})
    cuda.generate(schedule, tmp_path)
    lib = cuda.Library(cuda.build(tmp_path, schedule), schedule)
    assert lib.path == cuda.library_path(tmp_path, schedule)
    messages = cuda.step_messages(tables.from_schedule(schedule))
    for count in (0, 7, 1000):
        off = collectives.element_offsets(schedule.collective, 6, schedule.nchunks, count)
        assert lib.layout(count).tolist() == off.tolist()
        need = [0] * 6  # the most bytes each rank receives through scratch in one step
        for msgs in messages.values():
            step = [0] * 6
            for m in msgs:
                if not m.direct:
                    step[m.dst] += sum(int(off[r.hi] - off[r.lo]) for r in m.runs) * 2
            need = [max(a, b) for a, b in zip(need, step, strict=True)]
        assert [lib.scratch_bytes(count, "float16", r) for r in range(6)] == need
    assert max(need) > 0
    with pytest.raises(CollError, match="count must be >= 0"):
        lib.layout(-1)
    with pytest.raises(CollError, match="bad argument: count must be >= 0"):
        lib.run([0] * 6, -5, "float32", "sum")


def test_build_errors(tmp_path: Path) -> None:
    nvcc_or_skip()
    schedule = _schedule("ring_allreduce", {"p": 4})
    with pytest.raises(CollError, match="generate the sources first"):
        cuda.build(tmp_path / "nothing", schedule)
    cuda.generate(schedule, tmp_path)
    source = tmp_path / cuda.source_names(schedule)[0]
    source.write_text(source.read_text().replace("NRANKS,\n", "NRANKS\n", 1))
    with pytest.raises(CollError, match=r"nvcc failed on .*collc_ring_allreduce\.cu"):
        cuda.build(tmp_path, schedule)


def test_no_gpu_is_a_clear_error() -> None:
    try:
        cuda.cupy_module()
    except CollError as err:
        assert str(err).startswith("the cuda backend needs a GPU and cupy")
        with pytest.raises(CollError, match="needs a GPU and cupy"):
            cuda.run(_schedule("ring_allreduce", {"p": 4}), [16])
    else:
        pytest.skip("a GPU is available")


def test_compressed_runs_need_the_verifiers_bounds() -> None:
    """The backend judges a compressed result by error bounds its caller passes (the API: the verifier's)."""
    schedule = _schedule("compressed_ring_allreduce", {"p": 3})
    with pytest.raises(CollError, match=r"has compression points: .* of shape \(3, 3\); got none"):
        cuda.run(schedule, [16])
    with pytest.raises(CollError, match=r"of shape \(3, 3\); got shape \(3, 2\)"):
        cuda.run(schedule, [16], error_bounds=np.zeros((3, 2)))


def _operands(dtype: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two vectors of ``dtype`` with the values that test an op: NaN, ±inf, ±0, overflow, wrap-around."""
    rng = np.random.default_rng(DTYPE_SEED[dtype])
    dt = local.DTYPES[dtype]
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        a, b = (rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True) for _ in range(2))
        a[:4], b[:4] = [info.min, info.max, -1, 0], [-1, 1, info.min, info.max]
        return a, b
    a, b = (rng.standard_normal(n) * 4 for _ in range(2))
    a[:8] = [np.nan, 1.0, np.inf, -np.inf, -0.0, 0.0, 300.0, 1e-30]
    b[:8] = [1.0, np.nan, 2.0, np.inf, 0.0, -0.0, 300.0, 1e-30]
    return a.astype(dt), b.astype(dt)


DTYPE_SEED = {name: i for i, name in enumerate(cuda.DTYPES)}


@pytest.mark.parametrize("dtype", list(cuda.DTYPES))
def test_kernel_code_on_the_host(builds: Builds, tmp_path: Path, dtype: str) -> None:
    """The kernels' element loop, run on the CPU for every op: numpy's results, whatever the alignment and grid."""
    n = 1003
    a, b = _operands(dtype, n)
    np.concatenate([a, b]).tofile(tmp_path / "in.bin")
    for op, ufunc in zip(cuda.OPS, (np.add, np.multiply, np.maximum, np.minimum), strict=True):
        args = [str(builds.reduce_host), str(cuda.DTYPES[dtype]), str(cuda.OPS[op]), str(n)]
        proc = subprocess.run(
            [*args, str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], capture_output=True, text=True
        )
        assert proc.returncode == 0, (op, proc.stderr)
        got = np.fromfile(tmp_path / "out.bin", dtype=a.dtype)
        with np.errstate(all="ignore"):
            want = ufunc(a, b)
        if np.issubdtype(a.dtype, np.integer):
            assert got.tolist() == want.tolist(), op
        else:  # values, not bits: NaN payloads and the sign of a zero max/min may differ
            assert np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True), op


# --------------------------------------------------------------------------
# The host driver on the mock CUDA runtime
# --------------------------------------------------------------------------


def _mock_cases(schedule: Schedule) -> list[dict]:
    p = schedule.nranks
    counts = _counts(schedule)
    cases = []
    matrix = MATRIX
    if schedule.compresses():  # float32; hq payloads add, so that schedule runs with sum only
        adds = cuda.adds_payloads(tables.from_schedule(schedule, compression=True))
        matrix = [("float32", op) for op in (["sum"] if adds else ["sum", "max", "min"])]
    for i, (dtype, op) in enumerate(matrix):
        for j, count in enumerate(counts):
            devices = [r % 2 for r in range(p)] if (i + j) % 2 else None
            cases.append({"dtype": dtype, "op": op, "count": count, "seed": 10 * i + j, "devices": devices})
    # Scratch space from the caller.
    own = "float32" if schedule.compresses() else "int32"
    cases += [{"dtype": own, "op": "sum", "count": c, "seed": 50, "devices": None, "own_scratch": True} for c in counts]
    # The same size under many orders of the queued work.
    cases += [
        {"dtype": "float32", "op": "sum", "count": 999 - 999 % p, "seed": 100 + s, "devices": None} for s in range(8)
    ]
    return cases


@pytest.mark.parametrize("case", _slow_unless_fast([*CASE_IDS, SWAP[0], *CODEC_CASE_IDS]))
def test_driver_on_mock_runtime(built: dict[str, Built], mock: Path, case: str) -> None:
    """Every case, dtype, op and size, on one and two devices, under random valid orders of the queued work.

    Compressed schedules: bit for bit the numpy executor's result, within the verifier's bound.
    """
    name, params, codecs = _case(case)
    b = built[case]
    cases = _mock_cases(b.schedule)
    results = mock_run(mock, b, name, params, cases, codecs)
    assert len(results) == len(cases)
    for spec, result in zip(cases, results, strict=True):
        assert "error" not in result, (spec, result)
        assert result["wrong"] == 0 and result["layout_ok"], (spec, result)
        lossy = b.schedule.compresses() and parse_codec(b.schedule.codecs[0][1]).lossy
        if lossy and spec["count"] >= 4 * b.schedule.nchunks:  # the codec's error shows
            assert result["max_abs_error"] > 0, (spec, result)
        if b.schedule.collective.reduces and spec["count"] >= b.schedule.nchunks:
            assert result["launches"] > 0, (spec, result)
        if spec["devices"] is not None and spec["count"] >= b.schedule.nchunks:
            assert result["peer_copies"] > 0, (spec, result)


def test_codec_refusal_on_mock_runtime(mock: Path, tmp_path: Path) -> None:
    """A value the codec cannot encode (|x| <= 1 is beyond ebq(eb=1e-5)'s grid) is reported after the run."""
    codecs = {"q": "ebq(eb=1e-5)"}
    schedule = collc.load("compressed_ring_allgather").with_codecs(codecs).instantiate(p=3).schedule
    assert not schedule_ok(schedule)  # the verifier says so too (codec-range)
    cuda.generate(schedule, tmp_path)
    b = Built(schedule, tmp_path, cuda.build(tmp_path, schedule, flags=("-cudart", "shared")))
    ok = {"dtype": "float32", "op": "sum", "count": 0, "seed": 1, "devices": None}
    bad = {"dtype": "float32", "op": "sum", "count": 300, "seed": 1, "devices": None}
    wrong_op = {"dtype": "float64", "op": "sum", "count": 30, "seed": 1, "devices": None}
    results = mock_run(mock, b, "compressed_ring_allgather", {"p": 3}, [ok, bad, wrong_op], codecs)
    assert "error" not in results[0]
    assert "a codec refused a value: rank 0, element 2: ebq(eb=1e-5) cannot encode" in results[1]["error"]
    assert "runs on float32 data" in results[2]["error"]


def schedule_ok(schedule: Schedule) -> bool:
    return check(schedule).ok


def test_driver_rejects_bad_arguments_on_mock_runtime(built: dict[str, Built], mock: Path) -> None:
    bad = [{"dtype": "float32", "op": "sum", "count": 8, "seed": 1, "devices": [0, 1, 2, 0, 1]}]
    (result,) = mock_run(mock, built["ring_allreduce_k3"], "ring_allreduce", {"p": 5, "k": 3}, bad)
    assert "bad argument: device_of_rank[2] = 2: there are 2 device(s)" in result["error"]


def test_count_zero_takes_null_buffers_on_mock_runtime(built: dict[str, Built], mock: Path) -> None:
    """An empty call moves nothing, so NULL buffers (CuPy's pointer for an empty array) are fine; with data not."""
    cases = [{"dtype": "float32", "op": "sum", "count": count, "seed": 1, "devices": None, "null_buffers": True}
             for count in (0, 8)]  # fmt: skip
    empty, full = mock_run(mock, built["ring_allreduce_k3"], "ring_allreduce", {"p": 5, "k": 3}, cases)
    assert "error" not in empty, empty
    assert "bad argument: buffers[0] is NULL" in full["error"]


# --------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cupy() -> Iterator[ModuleType]:
    try:
        yield cuda.cupy_module()
    except CollError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def gpu_libs(cupy: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, cuda.Library]:
    """Every case built for this GPU (static CUDA runtime), in parallel."""
    root = tmp_path_factory.mktemp("cuda_gpu")
    arch = cuda.gpu_arch(0)
    jobs = {}
    for case, name, params in CASES:
        schedule = _schedule(name, params)
        cuda.generate(schedule, root / case)
        jobs[case] = schedule
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        futures = {case: pool.submit(cuda.build, root / case, s, arch=arch) for case, s in jobs.items()}
        return {case: cuda.Library(f.result(), jobs[case]) for case, f in futures.items()}


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASE_IDS)
@pytest.mark.parametrize(("dtype", "op"), MATRIX, ids=[f"{d}-{o}" for d, o in MATRIX])
def test_gpu_matches_numpy(gpu_libs: dict[str, cuda.Library], case: str, dtype: str, op: str) -> None:
    lib = gpu_libs[case]
    rows = cuda.run_library(lib, _counts(lib.schedule), dtype, op, iters=2, seed=7)
    assert [r.wrong for r in rows] == [0] * len(rows), rows


@pytest.mark.gpu
def test_gpu_run_end_to_end(cupy: ModuleType) -> None:
    schedule = _schedule("swing_bw", {"p": 8})
    rows = cuda.run(schedule, [1 << 20, 12345], "float32", "sum", iters=3)
    assert [r.wrong for r in rows] == [0, 0]
    assert all(0 < r.min_us <= r.avg_us <= r.max_us for r in rows)
    assert rows[0].size_bytes == 4 << 20


@pytest.mark.gpu
def test_gpu_several_devices(cupy: ModuleType, gpu_libs: dict[str, cuda.Library]) -> None:
    ndev = cupy.cuda.runtime.getDeviceCount()
    if ndev < 2:
        pytest.skip("one GPU: the multi-device path runs on the mock runtime only")
    for case in ("ring_allreduce_k3", "pairwise_alltoall", "binomial_broadcast"):
        lib = gpu_libs[case]
        devices = [r % ndev for r in range(lib.schedule.nranks)]
        rows = cuda.run_library(lib, _counts(lib.schedule), "float32", "sum", devices=devices)
        assert [r.wrong for r in rows] == [0] * len(rows)


@pytest.mark.gpu
def test_gpu_unaligned_chunks(gpu_libs: dict[str, cuda.Library]) -> None:
    """Counts whose chunks start off 16-byte boundaries take the kernels' scalar paths."""
    lib = gpu_libs["ring_allreduce_k3"]
    rows = cuda.run_library(lib, [(1 << 16) + 3, 4097], "float16", "sum", seed=3)
    assert [r.wrong for r in rows] == [0, 0]
