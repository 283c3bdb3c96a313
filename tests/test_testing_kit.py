"""The property-testing kit `collc.testing`: its strategies keep their promises, its assertions
pass on correct schedules and fail with the verifier's message on wrong ones, and the
walk-through in docs/testing.md works as written."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import collc
from collc import testing as ct
from collc.backends.local import DTYPES, OPS
from collc.diagnostics import CollError
from collc.ir import ParamValue

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DOC = (ROOT / "docs" / "testing.md").read_text()
QUICK = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A ring allreduce whose allgather adds the incoming block instead of copying it (line 13).
BROKEN = """\
# a ring allreduce with a bug in its allgather
algorithm broken_ring : allreduce
param p : int where p >= 2
chunks p

phase reduce_scatter:
  for step s in 0 .. p - 1:
    send block((rank - s - 1) mod p, 1) to ring_next(rank)
    recv block((rank - s - 2) mod p, 1) from ring_prev(rank) reduce
phase allgather:
  for step s in 0 .. p - 1:
    send block((rank - s) mod p, 1) to ring_next(rank)
    recv block((rank - s - 1) mod p, 1) from ring_prev(rank) reduce
"""
BROKEN_LINE = 13

# Parameters with constraints that relate them, and a torus.
CONSTRAINED = """\
algorithm constrained : allreduce
param p : int where p >= 6 and p % 3 == 0
param k : int = 1 where k >= 1 and p % k == 0
param root : int = 0 where 0 <= root < p
chunks k
"""
TORUS = """\
algorithm torus_lines : allreduce
param dims : dims where len(dims) == 2
let p = prod(dims)
chunks 1

# reduce along each dimension in turn: one step, every rank with every other rank of its line
phase line0:
  step:
    for j in 1 .. dims[0]:
      send 0 to move(rank, dims, 0, j)
      recv 0 from move(rank, dims, 0, -j) reduce
phase line1:
  step:
    for j in 1 .. dims[1]:
      send 0 to move(rank, dims, 1, j)
      recv 0 from move(rank, dims, 1, -j) reduce
"""
TORUS_WITH_P = """\
algorithm torus_p : allreduce
param dims : dims
param p : int where p == prod(dims)
chunks 1
"""


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    path = tmp_path / "broken.coll"
    path.write_text(BROKEN)
    return path


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------


@QUICK
@given(st.data())
def test_rank_counts_stay_in_range_and_keep_their_kind(data: st.DataObject) -> None:
    lo = data.draw(st.integers(1, 40), label="min_p")
    hi = data.draw(st.integers(lo + 2, 70), label="max_p")
    assert lo <= data.draw(ct.rank_counts(lo, hi)) <= hi
    even = data.draw(ct.rank_counts(lo, hi, even=True))
    odd = data.draw(ct.rank_counts(lo, hi, odd=True))
    assert lo <= even <= hi and even % 2 == 0
    assert lo <= odd <= hi and odd % 2 == 1


@QUICK
@given(ct.rank_counts(pow2=True), ct.rank_counts(3, 64, pow2=True, even=True))
def test_rank_counts_pow2_draws_powers_of_two(p: int, q: int) -> None:
    assert is_pow2(p) and 1 <= p <= 64
    assert is_pow2(q) and 4 <= q <= 64


def test_rank_counts_reach_both_ends() -> None:
    assert find(ct.rank_counts(1, 64, pow2=True), lambda p: p == 64) == 64
    assert find(ct.rank_counts(5, 20, odd=True), lambda p: p >= 19) == 19
    assert find(ct.rank_counts(5, 20, even=True), lambda p: True) == 6


@pytest.mark.parametrize(
    "kwargs",
    [{"min_p": 0}, {"min_p": 9, "max_p": 8}, {"even": True, "odd": True}, {"min_p": 5, "max_p": 7, "pow2": True}],
)
def test_rank_counts_refuse_impossible_requests(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        ct.rank_counts(**kwargs)


@QUICK
@given(st.data())
def test_torus_shapes_respect_every_bound(data: st.DataObject) -> None:
    max_dims = data.draw(st.integers(1, 4), label="max_dims")
    lo = data.draw(st.integers(1, 4), label="min_side")
    hi = data.draw(st.integers(lo + 1, 9), label="max_side")
    even = data.draw(st.booleans(), label="even")
    max_nodes = data.draw(st.integers(max(lo, 2) ** 2, 300), label="max_nodes")
    shape = data.draw(ct.torus_shapes(max_dims, lo, hi, even=even, max_nodes=max_nodes), label="shape")
    assert isinstance(shape, tuple) and all(type(side) is int for side in shape)
    assert 1 <= len(shape) <= max_dims
    assert all(lo <= side <= hi for side in shape)
    assert math.prod(shape) <= max_nodes
    if even:
        assert all(side % 2 == 0 for side in shape)


def test_torus_shapes_reach_three_dimensions_and_refuse_the_impossible() -> None:
    assert len(find(ct.torus_shapes(), lambda s: len(s) == 3)) == 3
    assert find(ct.torus_shapes(min_dims=2, max_dims=2), lambda s: True) == (2, 2)
    with pytest.raises(ValueError):
        ct.torus_shapes(min_side=3, max_side=3, even=True)
    with pytest.raises(ValueError):
        ct.torus_shapes(min_dims=3, min_side=8, max_nodes=100)


@QUICK
@given(ct.dtypes(), ct.ops(), ct.element_counts(100, min_count=3, multiple_of=4))
def test_names_and_counts(dtype: str, op: str, count: int) -> None:
    assert dtype in DTYPES and op in OPS
    assert 4 <= count <= 100 and count % 4 == 0


def test_dtypes_and_ops_cover_everything() -> None:
    for name in DTYPES:
        assert find(ct.dtypes(), lambda d, name=name: d == name) == name
    for name in OPS:
        assert find(ct.ops(), lambda o, name=name: o == name) == name


@QUICK
@given(st.data(), ct.rank_counts(1, 8), ct.element_counts(20), ct.dtypes())
def test_buffers_have_the_promised_shape_and_type(data: st.DataObject, p: int, count: int, dtype: str) -> None:
    array = data.draw(ct.buffers(p, count, dtype))
    assert isinstance(array, np.ndarray)
    assert array.shape == (p, count) and array.dtype == DTYPES[dtype]
    values = array.astype(np.float64)
    assert np.isfinite(values).all()
    assert (np.abs(values) <= (100 if np.issubdtype(array.dtype, np.integer) else 1)).all()
    drawn = data.draw(ct.buffers(ct.rank_counts(2, 3), st.just(5), st.just("int32"), elements=st.just(7)))
    assert drawn.shape[0] in (2, 3) and drawn.shape[1] == 5 and (drawn == 7).all()


# --------------------------------------------------------------------------
# valid_params
# --------------------------------------------------------------------------


def accepted(alg: collc.Algorithm, params: dict[str, ParamValue]) -> bool:
    try:
        alg.instantiate(**params)
    except CollError as err:
        if "violates the constraint" in err.message:
            return False
        raise
    return True


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.coll")))
def test_valid_params_never_yields_what_an_example_rejects(name: str) -> None:
    alg = collc.load(EXAMPLES / f"{name}.coll")

    @settings(max_examples=15, deadline=None)
    @given(ct.valid_params(alg, max_p=24))
    def check(params: dict[str, ParamValue]) -> None:
        assert set(params) == set(alg.param_names)
        p = params["p"]
        assert isinstance(p, int) and 1 <= p <= 24
        assert accepted(alg, params)
        if "root" in params:
            assert 0 <= params["root"] < p  # type: ignore[operator]

    check()


def test_valid_params_finds_powers_of_two_for_recursive_doubling() -> None:
    alg = collc.load(EXAMPLES / "recursive_doubling.coll")
    seen: set[int] = set()

    @settings(max_examples=60, deadline=None)
    @given(ct.valid_params(alg))
    def check(params: dict[str, ParamValue]) -> None:
        p = params["p"]
        assert isinstance(p, int) and is_pow2(p) and p <= 64
        assert accepted(alg, params)
        seen.add(p)

    check()  # hypothesis would fail a health check if it had to reject most candidates
    assert len(seen) >= 4
    assert find(ct.valid_params("recursive_doubling"), lambda d: d["p"] >= 32)["p"] in (32, 64)


@QUICK
@given(ct.valid_params(collc.parse(CONSTRAINED, "constrained.coll"), max_p=40))
def test_valid_params_respects_related_constraints(params: dict[str, ParamValue]) -> None:
    p, k, root = params["p"], params["k"], params["root"]
    assert isinstance(p, int) and isinstance(k, int) and isinstance(root, int)
    assert 6 <= p <= 40 and p % 3 == 0
    assert k >= 1 and p % k == 0
    assert 0 <= root < p


@QUICK
@given(ct.valid_params(collc.parse(TORUS, "torus.coll"), max_p=36))
def test_valid_params_draws_torus_shapes(params: dict[str, ParamValue]) -> None:
    dims = params["dims"]
    assert isinstance(dims, tuple) and len(dims) == 2 and math.prod(dims) <= 36
    assert all(2 <= side <= 8 for side in dims)
    ct.assert_runs_correctly(collc.parse(TORUS, "torus.coll"), count=7, dtype="int64", **params)


@QUICK
@given(ct.valid_params(collc.parse(TORUS_WITH_P, "torus_p.coll"), max_p=32))
def test_valid_params_matches_p_to_the_torus(params: dict[str, ParamValue]) -> None:
    dims, p = params["dims"], params["p"]
    assert isinstance(dims, tuple) and p == math.prod(dims) <= 32


@QUICK
@given(ct.valid_params("ring_allreduce", max_p=12, k=2), ct.valid_params("ring_allreduce", p=ct.rank_counts(3, 5)))
def test_valid_params_keeps_fixed_values(fixed_k: dict[str, ParamValue], drawn_p: dict[str, ParamValue]) -> None:
    assert fixed_k["k"] == 2 and 1 <= fixed_k["p"] <= 12  # type: ignore[operator]
    assert 3 <= drawn_p["p"] <= 5 and drawn_p["k"] >= 1  # type: ignore[operator]


def test_valid_params_refuses_unknown_parameters() -> None:
    with pytest.raises(ValueError, match="no parameter q"):
        ct.valid_params("ring_allreduce", q=3)


# --------------------------------------------------------------------------
# Assertions
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "params"),
    [
        ("swing_bw", {"p": 16}),
        ("swing_bw", {"p": 7}),
        (EXAMPLES / "ring_allreduce.coll", {"p": 5, "k": 2}),
        (str(EXAMPLES / "binomial_broadcast.coll"), {"p": 6, "root": 4}),
        (collc.load(EXAMPLES / "pairwise_alltoall.coll"), {"p": 3}),
    ],
)
def test_assert_verifies_passes_on_good_examples(algorithm: object, params: dict[str, ParamValue]) -> None:
    report = ct.assert_verifies(algorithm, **params)  # type: ignore[arg-type]
    assert report.ok and report.nranks == params["p"]
    result = ct.assert_runs_correctly(algorithm, count=33, dtype="int32", op="max", **params)  # type: ignore[arg-type]
    assert result.wrong == 0


def test_assert_verifies_names_the_line_of_a_broken_program(broken: Path) -> None:
    with pytest.raises(AssertionError) as info:
        ct.assert_verifies(broken, p=4)
    message = str(info.value)
    assert message.startswith("broken_ring (allreduce) p=4: WRONG")
    assert f"{broken}:{BROKEN_LINE}:" in message
    assert "recv block((rank - s - 1) mod p, 1) from ring_prev(rank) reduce" in message  # the source line
    assert re.search(r"\[double-count\] step \d+ rank \d+ chunk \d+", message)
    assert "expected contributions {0..3}, actual" in message
    assert f"reproduce: collc.testing.assert_verifies({str(broken)!r}, p=4)" in message


def test_assert_verifies_reports_program_errors_as_assertions(broken: Path) -> None:
    with pytest.raises(AssertionError, match=r"p=1 violates the constraint p >= 2") as info:
        ct.assert_verifies(broken, p=1)
    assert f"{broken}:3:" in str(info.value)
    with pytest.raises(AssertionError, match="no such file"):
        ct.assert_verifies(broken.with_name("missing.coll"), p=4)


def test_assert_runs_correctly_catches_a_wrong_result_when_verification_is_skipped(broken: Path) -> None:
    with pytest.raises(AssertionError) as info:
        ct.assert_runs_correctly(broken, p=4, count=10, dtype="int64", verify=False)
    message = str(info.value)
    assert message.startswith("broken_ring (allreduce) p=4:") and "verification skipped" in message
    assert "wrong element(s)" in message and "count 10, dtype int64, op sum, seed 0" in message
    assert re.search(r"first wrong: rank \d+, element \d+ \(chunk \d+, elements \d+\.\.\d+\): expected -?\d+", message)
    assert "verify=False)" in message  # the reproduce line
    with pytest.raises(AssertionError, match="WRONG"):  # verified first by default
        ct.assert_runs_correctly(broken, p=4, count=10)


def test_assert_runs_correctly_passes_when_the_op_hides_the_bug(broken: Path) -> None:
    """Counting a contribution twice is harmless for max: only the verifier sees it."""
    assert ct.assert_runs_correctly(broken, p=4, op="max", verify=False).wrong == 0


@settings(max_examples=25, deadline=None)
@given(st.data(), ct.dtypes(), ct.ops(), ct.rank_counts(2, 9))
def test_assert_runs_correctly_on_drawn_inputs(data: st.DataObject, dtype: str, op: str, p: int) -> None:
    inputs = data.draw(ct.buffers(p, ct.element_counts(40), dtype))
    before = inputs.tobytes()
    result = ct.assert_runs_correctly("swing_bw", op=op, inputs=inputs, p=p)
    assert result.wrong == 0 and result.count == inputs.shape[1] and result.dtype == dtype
    assert inputs.tobytes() == before


def test_assert_runs_correctly_on_drawn_inputs_catches_the_broken_program(broken: Path) -> None:
    inputs = np.arange(4 * 6, dtype=np.int64).reshape(4, 6)
    with pytest.raises(AssertionError, match="the given inputs"):
        ct.assert_runs_correctly(broken, inputs=inputs, verify=False, p=4)
    with pytest.raises(ValueError, match="shape"):
        ct.assert_runs_correctly("swing_bw", inputs=inputs, p=5)


def test_assert_runs_correctly_details() -> None:
    alltoall = ct.assert_runs_correctly("pairwise_alltoall", count=10, dtype="float64", p=3)
    assert alltoall.count == 9  # rounded down to a multiple of p
    inst = collc.load("swing_bw").instantiate(p=6)
    assert ct.assert_verifies(inst).ok
    assert ct.assert_runs_correctly(inst, count=0).wrong == 0
    with pytest.raises(ValueError, match="Instance"):
        ct.assert_verifies(inst, p=6)


# --------------------------------------------------------------------------
# docs/testing.md
# --------------------------------------------------------------------------


def doc_files(tmp_path: Path) -> tuple[Path, Path]:
    blocks = re.findall(r"```(\w*)\n(.*?)```", DOC, flags=re.S)
    coll = next(body for lang, body in blocks if lang == "coll")
    test = next(body for lang, body in blocks if lang == "python" and "def test_" in body)
    (tmp_path / "reverse_ring.coll").write_text(coll)
    assert test.count("max_examples=40") == 2
    (tmp_path / "test_reverse_ring.py").write_text(test.replace("max_examples=40", "max_examples=10"))  # quicker
    return tmp_path / "reverse_ring.coll", tmp_path / "test_reverse_ring.py"


def run_pytest(test: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(test.parent), str(test)]
    return subprocess.run(args, cwd=test.parent, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_doc_walkthrough_passes_then_catches_the_documented_bug(tmp_path: Path) -> None:
    coll, test = doc_files(tmp_path)
    for p in (1, 2, 5, 6):
        ct.assert_verifies(coll, p=p)
    good = run_pytest(test)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "2 passed" in good.stdout

    text = coll.read_text()
    assert text.count("from ring_next(rank) copy") == 1
    coll.write_text(text.replace("from ring_next(rank) copy", "from ring_next(rank) reduce"))
    bad = run_pytest(test)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "2 failed" in bad.stdout
    assert f"{coll}:14:5: error: " in bad.stdout  # the line of the bug, as the doc shows
    assert "[double-count]" in bad.stdout
    assert "params={'p': 2, 'k': 1}" in bad.stdout  # shrunk to the smallest failing instance
    assert "first wrong: rank " in bad.stdout
