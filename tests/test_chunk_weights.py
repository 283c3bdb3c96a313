"""Chunk weights (``chunks N weight(c) = EXPR``): the language, the IR, the offsets of every executor.

The offsets are checked against a brute force over fractions; the executors against numpy (local,
mpi-py, mpi-c runs) and against Python's offsets (the generated mpi-py module's, the mpi-c library's
and the CUDA library's layout entry points, bit for bit).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import random
import sys
import types
import unittest.mock
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from test_cuda import Built, mock, mock_run  # noqa: F401  (mock: the CPU stand-in's fixture)

import collc
from collc import collectives
from collc.backends import cuda, mpi_py, msccl
from collc.backends.csource import prefix_lines
from collc.diagnostics import CollError
from collc.ir import Collective, schedule_from_json, schedule_to_json
from collc.simulate import NetworkModel, simulate
from collc.topology import Torus

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WEIGHTED = EXAMPLES / "weighted_striped_ring_allreduce.coll"


def brute_offsets(total: int, weights: list[int], groups: int) -> list[int]:
    """Offsets by the definition: chunk j of group g starts at g*E + floor(E * W_j / W), in exact fractions."""
    k = len(weights) // groups
    elems = total // groups
    out = []
    for g in range(groups):
        ws = weights[g * k : (g + 1) * k]
        for j in range(k):
            out.append(g * elems + int(Fraction(elems * sum(ws[:j]), sum(ws)) // 1))
    return [*out, total]


def weighted_variant(example: str, weight: str) -> collc.Algorithm:
    """A bundled example with ``weight(c) = <weight>`` added to its chunks declaration."""
    path = EXAMPLES / f"{example}.coll"
    lines = path.read_text().splitlines()
    text = "\n".join(f"{line} weight(c) = {weight}" if line.startswith("chunks ") else line for line in lines)
    return collc.parse(text + "\n", str(path))


# --------------------------------------------------------------------------
# Offsets
# --------------------------------------------------------------------------


def test_offsets_match_a_brute_force_over_fractions() -> None:
    rng = random.Random(7)
    cases = 0
    for _ in range(400):
        groups = rng.choice([1, 1, 2, 3, 4, 9])
        k = rng.randint(1, 6)
        big = rng.random() < 0.2
        weights = [rng.randint(1, 2**20 if big else 9) for _ in range(groups * k)]
        elems = rng.choice([0, 1, 2, 7, 1000, rng.randint(0, 10**6), rng.randint(0, 2**62 // groups)])
        total = elems * groups
        got = collectives.chunk_offsets(total, groups * k, groups, weights)
        assert got.tolist() == brute_offsets(total, weights, groups), (total, weights, groups)
        cases += 1
    # the extremes: weights adding up to 2^32, a count near 2^63
    weights = [1, 2**32 - 3, 2]
    total = 2**63 - 5
    assert collectives.chunk_offsets(total, 3, 1, weights).tolist() == brute_offsets(total, weights, 1)
    assert cases == 400


def test_weighted_offset_is_the_one_definition() -> None:
    for elems, before, weight in [(10, 3, 4), (2**63 - 1, 2**32 - 1, 2**32), (0, 0, 5), (7, 7, 7)]:
        assert collectives.weighted_offset(elems, before, weight) == int(Fraction(elems * before, weight) // 1)


def test_without_weights_the_equal_layout_is_unchanged() -> None:
    off = collectives.chunk_offsets(10, 4, 1)
    assert off.tolist() == [0, 3, 6, 8, 10]  # the first count mod n chunks one longer
    assert collectives.chunk_offsets(10, 4, 1, None).tolist() == off.tolist()


def test_element_offsets_follow_weights_per_group() -> None:
    weights = [1, 3] * 3  # allgather, p=3, k=2: every rank's block cut 1:3
    off = collectives.element_offsets(Collective.ALLGATHER, 3, 6, 12, weights)
    assert off.tolist() == [0, 1, 4, 5, 8, 9, 12]
    off = collectives.element_offsets(Collective.ALLGATHER, 3, 6, 13, weights)  # one group: 13 * W_j / 12
    assert off.tolist() == brute_offsets(13, weights, 1)


def test_bad_weight_lists_are_refused() -> None:
    with pytest.raises(ValueError, match="2 chunk weights for 3 chunks"):
        collectives.chunk_offsets(10, 3, 1, [1, 2])
    with pytest.raises(ValueError, match=">= 1"):
        collectives.chunk_offsets(10, 2, 1, [0, 2])
    with pytest.raises(ValueError, match="at most"):
        collectives.chunk_offsets(10, 2, 1, [2**32, 1])


# --------------------------------------------------------------------------
# The language and the IR
# --------------------------------------------------------------------------


def test_the_example_records_its_weights_and_verifies() -> None:
    alg = collc.load(WEIGHTED)
    for p in range(1, 9):
        for share in (1, 50, 70, 99):
            inst = alg.instantiate(p=p, share=share)
            assert inst.verify().ok, (p, share)
            assert inst.schedule.chunk_weights == (share,) * p + (100 - share,) * p
    plain = collc.load("striped_ring_allreduce").instantiate(p=4).schedule
    assert plain.chunk_weights is None


def test_ir_json_round_trip_and_version() -> None:
    s = collc.load(WEIGHTED).instantiate(p=3, share=80).schedule
    data = schedule_to_json(s)
    assert data["version"] == 3 and data["chunk_weights"] == [80, 80, 80, 20, 20, 20]
    assert schedule_from_json(json.loads(json.dumps(data))) == schedule_from_json(data)
    assert schedule_from_json(data).chunk_weights == s.chunk_weights
    plain = schedule_to_json(collc.load("ring_allreduce").instantiate(p=3).schedule)
    assert plain["version"] == 1 and "chunk_weights" not in plain
    with pytest.raises(ValueError, match="chunk_weights"):
        schedule_from_json({**data, "chunk_weights": [1, 0, 1, 1, 1, 1]})


HEADER = "algorithm w : allreduce\nparam p : int where p >= 1\n"
BODY = "phase a: pass\n"


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ("c", "the weight of chunk 0 is 0; a chunk's weight must be an int >= 1"),
        ("c - 5", "the weight of chunk 0 is -5; a chunk's weight must be an int >= 1"),
        ("c == 0", r"the weight of chunk 0 must be an int, not a bool \(true\)"),
        ("{c}", r"the weight of chunk 0 must be an int, not a set \(\{0\}\)"),
        ("2 ** 31", "the chunk weights add up to more than 2\\^32"),
        ("1 // (1 - c)", "division by zero"),
    ],
)
def test_bad_weights_are_errors_at_the_expression(weight: str, message: str) -> None:
    text = f"{HEADER}chunks 4 weight(c) = {weight}\n{BODY}"
    with pytest.raises(CollError, match=message) as info:
        collc.parse(text, "w.coll").instantiate(p=2)
    span = info.value.span
    assert span is not None and (span.file, span.line, span.column) == ("w.coll", 3, 22), span


@pytest.mark.parametrize(
    ("decl", "message", "where"),
    [
        ("chunks 4 weight(rank) = 1", "'rank' is reserved", "w.coll:3:17"),
        ("chunks 4 weight(c) = d", "unknown name 'd'", "w.coll:3:22"),
        ("chunks 4 weight(c) = rank", "'rank' is only defined inside phases", "w.coll:3:22"),
        ("chunks 4 weight c = 1", r"unexpected .c.; expected .\(.", "w.coll:3:17"),
    ],
)
def test_weight_declaration_errors(decl: str, message: str, where: str) -> None:
    with pytest.raises(CollError, match=message) as info:
        collc.parse(f"{HEADER}{decl}\n{BODY}", "w.coll").instantiate(p=2)
    span = info.value.span
    assert span is not None and f"{span.file}:{span.line}:{span.column}" == where, span


def test_weight_sees_parameters_constants_and_functions() -> None:
    text = f"{HEADER}let two = 2\nfn f(x) = x + two\nchunks p weight(c) = f(c) * p\n{BODY}"
    assert collc.parse(text).instantiate(p=3).schedule.chunk_weights == (6, 9, 12)


def test_weight_remains_a_name_elsewhere() -> None:
    text = f"{HEADER}let weight = 3\nchunks weight weight(c) = weight + c\n{BODY}"
    assert collc.parse(text).instantiate(p=1).schedule.chunk_weights == (3, 4, 5)


def test_msccl_export_refuses_weights() -> None:
    s = collc.load(WEIGHTED).instantiate(p=4).schedule
    with pytest.raises(CollError, match=r"declares chunk weights .* MSCCL-IR cuts a buffer into equal chunks"):
        msccl.lower(s)


# --------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------

VARIANTS = [  # (example, weight, params): layouts where the chunk sizes decide who holds what
    ("ring_allgather", "c % 3 + 1", {"k": 2}),
    ("ring_reduce_scatter", "5 if c % 2 == 0 else 1", {"k": 2}),
    ("pairwise_alltoall", "c % 4 + 1", {}),
]


@pytest.mark.parametrize("p", [3, 4, 5])
def test_local_runs_match_numpy(p: int) -> None:
    counts = [0, 1, 7, 1000]
    inst = collc.load(WEIGHTED).instantiate(p=p, share=73)
    for count in counts:
        assert inst.run(count, "float64").wrong == 0
    for example, weight, params in VARIANTS:
        inst = weighted_variant(example, weight).instantiate(p=p, **params)
        assert inst.verify().ok
        for count in counts:
            if inst.schedule.collective is Collective.ALLTOALL:
                count *= p
            elif inst.schedule.collective is not Collective.ALLREDUCE:
                count = count - count % p
            assert inst.run(count, "float64").wrong == 0, (example, p, count)


def test_simulated_bytes_follow_the_weights() -> None:
    """A step's time on a ring is its largest message: with shares 80:20 the stripes' messages are 4:1."""
    alg = collc.load(WEIGHTED)
    model = NetworkModel(step_overhead=0.0, link_latency=0.0, hop_latency=0.0)
    size = 4 * 1000 * 100
    for share in (50, 80):
        s = alg.instantiate(p=4, share=share).schedule
        for execution in ("lockstep", "dataflow"):
            sim = simulate(s, Torus((4,)), [size], dataclasses.replace(model, execution=execution))
            # 2 * (p - 1) steps, each moving one chunk of the bigger stripe: share% of the vector / p
            biggest = size * max(share, 100 - share) / 100 / 4
            assert sim.times[0] == pytest.approx(6 * biggest / model.link_bandwidth), (share, execution)


def test_generated_mpi_py_module_cuts_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    for inst in (
        collc.load(WEIGHTED).instantiate(p=5, share=61),
        weighted_variant("pairwise_alltoall", "c % 4 + 1").instantiate(p=3),
    ):
        s = inst.schedule
        monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=unittest.mock.MagicMock()))
        module = types.ModuleType("generated_weights")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        exec(compile(mpi_py.render(s), "generated.py", "exec"), module.__dict__)
        chunk_offsets = module.chunk_offsets
        for count in [0, 1, 7, 1000, 3 * 2**40 + 3, 2**61 - 1]:
            if s.collective is Collective.ALLTOALL:
                count -= count % s.nranks
            want = collectives.element_offsets(s.collective, s.nranks, s.nchunks, count, s.chunk_weights)
            assert chunk_offsets(count) == want.tolist()


def _c_layout(lib_path: Path, ident: str, suffix: str, s: collc.ir.Schedule, counts: list[int]) -> None:
    lib = ctypes.CDLL(str(lib_path))
    layout = getattr(lib, f"collc_{ident}{suffix}_layout")
    layout.argtypes = [ctypes.c_int64, ctypes.c_void_p]
    for count in counts:
        out = np.zeros(s.nchunks + 1, dtype=np.int64)
        assert layout(count, out.ctypes.data) == s.nchunks
        want = collectives.element_offsets(s.collective, s.nranks, s.nchunks, count, s.chunk_weights)
        np.testing.assert_array_equal(out, want, err_msg=f"count={count}")


LAYOUT_COUNTS = [0, 1, 2, 7, 12, 1000, 100003, 2**33 + 5, 2**62 + 11]


def test_mpi_c_layout_is_bit_equal_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    inst = collc.load(WEIGHTED).instantiate(p=3, share=71)
    inst.compile("mpi-c", tmp_path / "c")
    (lib,) = (tmp_path / "c").glob("libcollc_*.so")
    _c_layout(lib, inst.schedule.algorithm, "", inst.schedule, LAYOUT_COUNTS)
    rows = inst.run_mpi([0, 1, 7, 1000], "float64", "sum", backend="mpi-c", timeout=60)
    assert [(r.impl, r.wrong) for r in rows] == [("mpi-c", 0)] * 4


def test_mpi_py_run_matches_numpy() -> None:
    pytest.importorskip("mpi4py")
    inst = weighted_variant("ring_allgather", "c % 3 + 1").instantiate(p=3, k=2)
    rows = inst.run_mpi([0, 3, 9, 999], "float32", "sum", timeout=60)
    assert [r.wrong for r in rows] == [0] * 4


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mpi-py", "mpi-c"])
@pytest.mark.parametrize("p", [3, 4, 5])
def test_mpi_runs_every_layout(backend: str, p: int) -> None:
    runs = [(collc.load(WEIGHTED).instantiate(p=p, share=37), [0, 1, 7, 1000])]
    for example, weight, params in VARIANTS:
        inst = weighted_variant(example, weight).instantiate(p=p, **params)
        runs.append((inst, [c * p for c in (0, 1, 7, 1000)]))
    for inst, counts in runs:
        rows = inst.run_mpi(counts, "float64", "sum", backend=backend, timeout=60)
        assert [r.wrong for r in rows] == [0] * len(counts), inst.schedule.algorithm


@pytest.mark.slow
@pytest.mark.parametrize("example", [v[0] for v in VARIANTS])
def test_mpi_c_layout_of_every_collective(example: str, tmp_path: Path) -> None:
    params = dict(next(v[2] for v in VARIANTS if v[0] == example))
    weight = next(v[1] for v in VARIANTS if v[0] == example)
    inst = weighted_variant(example, weight).instantiate(p=4, **params)
    inst.compile("mpi-c", tmp_path / "c")
    (lib,) = (tmp_path / "c").glob("libcollc_*.so")
    counts = LAYOUT_COUNTS
    if inst.schedule.collective is Collective.ALLTOALL:  # the logical space is p times the count
        counts = [c - c % 4 for c in LAYOUT_COUNTS if c < 2**60]
    _c_layout(lib, inst.schedule.algorithm, "", inst.schedule, counts)


@pytest.mark.slow
def test_cuda_driver_on_the_mock_runtime(mock: Path, tmp_path: Path) -> None:  # noqa: F811 (test_cuda.mock)
    """nvcc builds the cuda target of the weighted example; its host driver runs on the CPU stand-in of the
    CUDA runtime (tests/cuda/mock_cudart.c): results against numpy, the layout bit for bit Python's."""
    try:
        cuda.nvcc()
    except CollError as err:
        pytest.skip(str(err))
    params = {"p": 3, "share": 71}
    s = collc.load(WEIGHTED).instantiate(**params).schedule
    cuda.generate(s, tmp_path / "cu")
    built = Built(s, tmp_path / "cu", cuda.build(tmp_path / "cu", s, flags=("-cudart", "shared")))
    cases = [{"dtype": "float32", "op": "sum", "count": n, "seed": n, "devices": None} for n in (0, 1, 7, 1000)]
    cases.append({"dtype": "float64", "op": "max", "count": 1001, "seed": 3, "devices": [0, 1, 0]})
    results = mock_run(mock, built, str(WEIGHTED), params, cases)
    assert len(results) == len(cases)
    for case, result in zip(cases, results, strict=True):
        assert "error" not in result and result["wrong"] == 0 and result["layout_ok"], (case, result)


@pytest.mark.slow
def test_mpi_cuda_builds(tmp_path: Path) -> None:
    from collc.backends import mpi_cuda

    try:
        cuda.nvcc()
    except CollError as err:
        pytest.skip(str(err))
    inst = collc.load(WEIGHTED).instantiate(p=3, share=71)
    inst.compile("mpi-cuda", tmp_path / "mc")
    assert any((tmp_path / "mc").glob("libcollc_*_mpicuda.so"))
    text = next((tmp_path / "mc").glob("*_mpicuda.cu")).read_text()
    assert "chunk_prefix" in text and mpi_cuda is not None


def test_prefix_lines() -> None:
    assert prefix_lines(None) == ()
    assert prefix_lines((1, 2, 3), per_line=2) == ("0ull, 1ull", "3ull, 6ull")
