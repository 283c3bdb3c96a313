"""The local executor with real codecs: measured errors never exceed the verifier's bounds.

The key property: for every example with compression points, any p, element count,
data and codec the schedule verifies with, every output element is within its
slot's verified bound (plus float rounding) of the exact float64 reduction.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import collc
from collc import collectives
from collc.backends import local, local_codecs
from collc.cli import main
from collc.codecs import parse_codec
from collc.diagnostics import CollError
from collc.verify.compression import analyse

EXAMPLES = (
    "compressed_ring_allgather_p2p",
    "compressed_ring_allgather",
    "compressed_ring_reduce_scatter",
    "compressed_ring_allreduce",
    "homomorphic_allreduce",
    "compressed_swing_bw",
)
# codecs each example may use in place of its own (the homomorphic one needs a homomorphic codec)
CODECS = {
    "homomorphic_allreduce": ("hq(eb=1e-3)", "hq(eb=0.25)", "hq(eb=3e-3)"),
    "*": ("ebq(eb=1e-3)", "ebq(eb=0.05)", "fwq(bits=8, block=32)", "fwq(bits=4, block=64)", "fp16", "bf16",
          "lossless", "hq(eb=1e-2)"),
}  # fmt: skip


def run(name: str, p: int, count: int, dtype: str, seed: int, spec: str | None = None) -> local.RunResult:
    alg = collc.load(name)
    if spec is not None:
        alg = alg.with_codecs({"q": spec})
    inst = alg.instantiate(p=p)
    assert inst.verify().ok
    return inst.run(count, dtype, "sum", seed=seed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(EXAMPLES),
    p=st.integers(2, 12),
    per_rank=st.integers(1, 40),
    extra=st.integers(0, 5),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_measured_error_never_exceeds_the_verified_bound(
    name: str, p: int, per_rank: int, extra: int, dtype: str, seed: int, data: st.DataObject
) -> None:
    spec = data.draw(st.sampled_from(CODECS.get(name, CODECS["*"])), label="codec")
    blocks = collc.load(name).collective.value in ("allgather", "reduce_scatter")
    count = p * per_rank + (0 if blocks else extra)
    result = run(name, p, count, dtype, seed, spec)
    assert result.wrong == 0, (result.max_abs_error, result.error_bound)
    assert result.max_abs_error is not None and result.error_bound is not None
    assert result.max_abs_error <= result.error_bound * (1 + 1e-6) + p * 2e-7


@pytest.mark.parametrize("name", EXAMPLES)
def test_seeded_sweep_of_every_example(name: str) -> None:
    """A deterministic companion of the property test: p in {2, 3, 8, 13}, both float types."""
    for p in (2, 3, 8, 13):
        for dtype in ("float32", "float64"):
            result = run(name, p, 11 * p, dtype, seed=100 + p)
            assert result.wrong == 0
            assert result.max_abs_error is not None and result.error_bound is not None
            assert 0 < result.max_abs_error <= result.error_bound


def test_unbounded_codec_runs_and_reports_its_error() -> None:
    result = run("compressed_ring_allgather_p2p", 6, 6 * 64, "float32", 1, "zfp(rate=8)")
    assert result.wrong == 0 and result.error_bound == float("inf")
    assert result.max_abs_error is not None and 0 < result.max_abs_error < 1


def test_homomorphic_result_is_independent_of_the_order() -> None:
    """The ring's result equals decoding the exact sum of every rank's grid integers, on every rank."""
    hq = parse_codec("hq(eb=1e-3)")
    for p in (3, 8):
        schedule = collc.load("homomorphic_allreduce").instantiate(p=p).schedule
        count = 50 * p + 7
        inputs = local.make_inputs(schedule, count, "float32", seed=p)
        ints = np.stack([hq.compress(inputs[r]).view("<i4").astype(np.int64) for r in range(p)])
        total = ints.sum(axis=0).astype("<i4").view(np.uint8)
        want = hq.decompress(total, count, np.float32)
        buffers = inputs.copy()
        offsets = collectives.element_offsets(schedule.collective, p, schedule.nchunks, count)
        local_codecs.execute(schedule, buffers, "sum", offsets)
        for r in range(p):
            assert np.array_equal(buffers[r], want), r  # bit for bit, whatever the order of the additions
        exact = inputs.astype(np.float64).sum(axis=0)
        assert np.abs(want - exact).max() <= p * 1e-3


def test_collective_level_compression_beats_point_to_point_only_for_codecs_that_are_not_idempotent() -> None:
    once = run("compressed_ring_allgather", 8, 8 * 64, "float32", 5, "zfp(rate=8)")
    p2p = run("compressed_ring_allgather_p2p", 8, 8 * 64, "float32", 5, "zfp(rate=8)")
    assert once.max_abs_error is not None and p2p.max_abs_error is not None
    assert once.max_abs_error < p2p.max_abs_error  # every zfp hop adds error
    same_once = run("compressed_ring_allgather", 8, 8 * 64, "float32", 5)
    same_p2p = run("compressed_ring_allgather_p2p", 8, 8 * 64, "float32", 5)
    assert same_once.max_abs_error == same_p2p.max_abs_error  # ebq: re-compressing is free


def test_the_executor_needs_the_bounds_floats_and_sum() -> None:
    inst = collc.load("compressed_ring_allreduce").instantiate(p=4)
    with pytest.raises(ValueError, match="error_bounds"):
        local.run(inst.schedule, 40)
    with pytest.raises(CollError, match="float32 or float64"):
        inst.run(40, "int32", "sum")
    with pytest.raises(CollError, match="not prod"):
        inst.run(40, "float32", "prod")
    assert inst.run(40, "float64", "max").wrong == 0  # the bounds of a sum also bound max and min
    with pytest.raises(CollError, match="op sum"):
        collc.load("homomorphic_allreduce").instantiate(p=4).run(40, "float32", "max")
    with pytest.raises(ValueError, match="plans do not model"):
        local.plan(inst.schedule, 40)


def test_the_judge_uses_the_bounds() -> None:
    """Judged by a bound of 0, the compression error shows: every element is counted wrong."""
    inst = collc.load("compressed_ring_reduce_scatter").instantiate(p=6)
    bounds = analyse(inst.schedule, input_bound=1.0, dtype="float32").bound
    zero = local.run(inst.schedule, 60, "float32", "sum", seed=3, error_bounds=np.zeros_like(bounds))
    assert zero.wrong > 0 and zero.error_bound == 0


def test_cli_run_reports_measured_error_and_bound() -> None:
    result = CliRunner().invoke(main, ["run", "compressed_ring_reduce_scatter", "-p", "8", "--sizes", "1K:4K"])
    assert result.exit_code == 0, result.output
    assert "max|err|" in result.output and "all results within the verified error bound" in result.output
    result = CliRunner().invoke(
        main, ["run", "compressed_ring_reduce_scatter", "-p", "8", "--size", "4K", "--json", "--codec", "q=bf16"]
    )
    (row,) = json.loads(result.output)["rows"]
    assert row["wrong"] == 0 and 0 < row["max_abs_error"] <= row["error_bound"]
    bound = collc.load("compressed_ring_reduce_scatter").with_codecs({"q": "bf16"}).instantiate(p=8).verify()
    assert bound.compression is not None and row["error_bound"] == pytest.approx(bound.compression.error_bound)
    result = CliRunner().invoke(main, ["run", "compressed_ring_allgather_p2p", "-p", "4", "--size", "1K", "--json",
                                       "--codec", "q=zfp(rate=8)"])  # fmt: skip
    (row,) = json.loads(result.output)["rows"]
    assert row["error_bound"] is None and row["wrong"] == 0  # unbounded: null
    plain = json.loads(CliRunner().invoke(main, ["run", "ring_allreduce", "-p", "4", "--size", "1K", "--json"]).output)
    assert "error_bound" not in plain["rows"][0]  # no compression points: the rows are as before
