"""Property tests of the tutorial's bidirectional ring allreduce (docs/tutorial.md).

For random valid parameters (p up to 32, k chunks per block) the schedule must
verify, take 2(p - 1) steps, send the bandwidth-optimal 2(p - 1)/p of the vector
per rank, use both directions of every ring link at every step, and produce
numpy's result on the local executor for a random element type, op and count.
"""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings

import collc
from collc import testing as ct
from collc.ir import OpKind, ParamValue

ALG = collc.load(Path(__file__).with_name("bidir_ring_allreduce.coll"))


@settings(max_examples=25, deadline=None)
@given(params=ct.valid_params(ALG, max_p=32), dtype=ct.dtypes(), op=ct.ops(), count=ct.element_counts(2048))
def test_verifies_and_runs(params: dict[str, ParamValue], dtype: str, op: str, count: int) -> None:
    p = params["p"]
    assert isinstance(p, int)
    inst = ALG.instantiate(**params)  # elaborated once, verified and run
    stats = ct.assert_verifies(inst).stats
    assert stats.steps == 2 * (p - 1)
    assert math.isclose(stats.max_sent_fraction, 2 * (p - 1) / p, abs_tol=1e-12)
    ct.assert_runs_correctly(inst, count=count, dtype=dtype, op=op, verify=False)


@settings(max_examples=25, deadline=None)
@given(params=ct.valid_params(ALG, max_p=32, p=ct.rank_counts(3, 32)))
def test_both_directions_carry_a_block_at_every_step(params: dict[str, ParamValue]) -> None:
    p, k = params["p"], params["k"]
    assert isinstance(p, int) and isinstance(k, int)
    for step in ALG.instantiate(**params).schedule.steps:
        for rank in range(p):
            sent = {op.peer: len(op.chunks) for op in step.ops if op.rank == rank and op.kind is OpKind.SEND}
            assert sent == {(rank + 1) % p: k, (rank - 1) % p: k}, (step.index, rank, sent)
