"""Property tests of three bundled allreduces with `collc.testing` (run by CI: pytest collects examples/).

For random valid parameters (p up to 64, and ring's chunks per block k) each
algorithm must verify, take the number of steps and send the share of the
vector its design promises, and produce numpy's result on the local executor
for a random element type, reduction op and element count.  See docs/testing.md.
"""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import collc
from collc import testing as ct
from collc.backends.local import DTYPES
from collc.ir import ParamValue

HERE = Path(__file__).resolve().parent
SWING = collc.load(HERE / "swing_bw.coll")
RING = collc.load(HERE / "ring_allreduce.coll")
RABENSEIFNER = collc.load(HERE / "rabenseifner.coll")

PROPERTY = settings(max_examples=20, deadline=None)


def log2_floor(p: int) -> int:
    return p.bit_length() - 1


@PROPERTY
@given(params=ct.valid_params(SWING, max_p=64), dtype=ct.dtypes(), op=ct.ops(), count=ct.element_counts(2048))
def test_swing_bw(params: dict[str, ParamValue], dtype: str, op: str, count: int) -> None:
    p = params["p"]
    assert isinstance(p, int) and 2 <= p <= 64
    inst = SWING.instantiate(**params)  # elaborated once, checked twice
    stats = ct.assert_verifies(inst).stats
    assert stats.steps == 2 * math.ceil(math.log2(p - p % 2))
    assert math.isclose(stats.max_sent_fraction, 2 * (p - 1) / p)  # bandwidth-optimal
    assert ct.assert_runs_correctly(inst, count=count, dtype=dtype, op=op, verify=False).wrong == 0


@PROPERTY
@given(params=ct.valid_params(RING, max_p=64), dtype=ct.dtypes(), op=ct.ops(), count=ct.element_counts(2048))
def test_ring_allreduce(params: dict[str, ParamValue], dtype: str, op: str, count: int) -> None:
    p = params["p"]
    assert isinstance(p, int) and 1 <= p <= 64 and params["k"] >= 1
    inst = RING.instantiate(**params)  # elaborated once, checked twice
    stats = ct.assert_verifies(inst).stats
    assert stats.steps == 2 * (p - 1)
    assert math.isclose(stats.max_sent_fraction, 2 * (p - 1) / p, abs_tol=1e-12)
    ct.assert_runs_correctly(inst, count=count, dtype=dtype, op=op, verify=False)


@PROPERTY
@given(params=ct.valid_params(RABENSEIFNER, max_p=64), dtype=ct.dtypes(), op=ct.ops(), count=ct.element_counts(2048))
def test_rabenseifner(params: dict[str, ParamValue], dtype: str, op: str, count: int) -> None:
    p = params["p"]
    assert isinstance(p, int)
    q = 1 << log2_floor(p)
    folds = p != q  # the ranks above q fold in before and out after
    inst = RABENSEIFNER.instantiate(**params)  # elaborated once, checked twice
    stats = ct.assert_verifies(inst).stats
    assert stats.steps == 2 * log2_floor(q) + 2 * folds
    assert math.isclose(stats.max_sent_fraction, 2 * (q - 1) / q + folds, abs_tol=1e-12)
    ct.assert_runs_correctly(inst, count=count, dtype=dtype, op=op, verify=False)


@settings(max_examples=10, deadline=None)
@given(data=st.data(), dtype=ct.dtypes(), op=ct.ops())
def test_swing_bw_on_drawn_buffers(data: st.DataObject, dtype: str, op: str) -> None:
    """Inputs drawn by hypothesis (zeros, subnormals, extremes of the range) instead of seeded random data."""
    params = data.draw(ct.valid_params(SWING, max_p=16), label="params")
    p = params["p"]
    assert isinstance(p, int)
    inputs = data.draw(ct.buffers(p, ct.element_counts(64, min_count=1), dtype), label="inputs")
    assert inputs.shape[0] == p and inputs.dtype == DTYPES[dtype]
    before = inputs.tobytes()
    result = ct.assert_runs_correctly(SWING, op=op, inputs=inputs, **params)
    assert result.count == inputs.shape[1] and result.dtype == dtype
    assert inputs.tobytes() == before  # the kit works on a copy
