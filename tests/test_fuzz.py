"""The front-end fuzzer (tests/coll_fuzz.py) in the suite: random, mutated and pathological `.coll` inputs
through parse, elaboration and the verifier, each ending in a located diagnostic or a report, never in a
traceback or a hang; correct programs in random equivalent forms must verify.

The fast run takes the quick stress inputs only; the slow one (``-m slow``) runs ten thousand inputs with the
stress inputs that take collc seconds.  Both use a fixed seed: a failure names the input that caused it.
"""

from __future__ import annotations

from collections import Counter

import coll_fuzz
import pytest


def _failures_text(outcomes: list[coll_fuzz.Outcome]) -> str:
    lines = []
    for out in outcomes:
        if out.status == "failure":
            case = out.case
            lines.append(f"[{case.kind} {case.origin} {dict(case.params)} {out.stage}] {out.detail}")
            lines.append("    " + repr(case.text[:400]))
    return "\n".join(lines)


def _check(outcomes: list[coll_fuzz.Outcome]) -> Counter[tuple[str, str]]:
    failures = [out for out in outcomes if out.status == "failure"]
    assert not failures, f"{len(failures)} input(s) failed:\n{_failures_text(failures)}"
    counts = Counter((out.case.kind, out.status) for out in outcomes)
    # every kind of input was made, and the inputs reach every stage: refused, elaborated and verified
    for kind in ("grammar", "mutated", "template", "stress"):
        assert counts[kind, "accepted"] + counts[kind, "rejected"] > 0, counts
    assert counts["template", "rejected"] == 0 and counts["template", "accepted"] > 0
    assert counts["mutated", "accepted"] > 0 and counts["mutated", "rejected"] > 0
    assert counts["grammar", "rejected"] > 0 and counts["stress", "rejected"] > 0
    stages = Counter(out.stage for out in outcomes if out.status == "rejected")
    assert stages["parse"] > 0 and stages["elaborate"] > 0, stages
    return counts


def test_fuzz_quick() -> None:
    outcomes = coll_fuzz.run(560, seed=coll_fuzz.SEED, quick=True)
    assert len(outcomes) == 560
    _check(outcomes)


@pytest.mark.slow
def test_fuzz_long() -> None:
    outcomes = coll_fuzz.run(10_000, seed=coll_fuzz.SEED + 1)
    assert len(outcomes) == 10_000
    counts = _check(outcomes)
    assert counts["template", "accepted"] > 1000
