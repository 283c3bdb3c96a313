"""How `collc check` scales: every path's memory is estimated before it starts (`collc.verify.budget`), an
instance no path can hold is refused up front with the estimates and what to do instead (exit 2, never a
traceback), and the per-op checker's cost follows the work: state for the chunks the operations name only,
long runs of chunks moved with slices, the postcondition a block of chunks at a time.

No test here measures time; the refusals run under ``COLLC_MEMORY`` (the memory collc may use), so that
they do not depend on the machine.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from test_cli import EXAMPLES, cli

from collc.collectives import chunk_dest, chunk_origin, layout_error
from collc.elaborate import elaborate
from collc.frontend.program import load_program, parse_program
from collc.ir import Collective
from collc.verify import budget, columns, symmetry
from collc.verify import check as check_module
from collc.verify import sweep as sweep_module
from collc.verify.budget import MODEL, PER_OP, SYMMETRY, memory_available, plan, survey
from collc.verify.check import check
from collc.verify.findings import Collector, RunTally, fmt_ids
from collc.verify.sweep import check_instance
from collc.verify.vector import prepare

EXIT_OK, EXIT_WRONG, EXIT_INPUT = 0, 1, 2
RING = EXAMPLES / "ring_allreduce.coll"


# --------------------------------------------------------------------------
# Refusals, up front, with the estimates
# --------------------------------------------------------------------------


def test_ring_allreduce_at_the_largest_p_is_refused_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    """p = 2^17 (MAX_RANKS): 2^34 slots.  The step formulas would keep 192 GB, the symmetric path would
    elaborate 2^34 loop iterations, the per-op checker keeps state for 2^28 slots: exit 2 before any of
    them starts, with every estimate and what to do instead."""
    monkeypatch.setenv("COLLC_MEMORY", "24G")
    out = cli("check", "ring_allreduce", "-p", "131072")
    assert out.code == EXIT_INPUT, out.text
    assert out.stdout == "" and "Traceback" not in out.text
    assert "ring_allreduce p=131072 is too large to check on this machine" in out.stderr
    assert "131072 ranks x 131072 chunks make 2^34 (rank, chunk) slots" in out.stderr
    assert "24 GB of memory can be used" in out.stderr
    assert "step formulas: about 192 GB (its data-flow state, 12 bytes a slot)" in out.stderr
    assert "rank symmetry: it elaborates every rank: at least 3.4e+10 loop iterations" in out.stderr
    assert "per-op: beyond the 2^28 slots it keeps state for" in out.stderr
    assert "'collc check ring_allreduce --ranks all' proves a program for every p" in out.stderr
    assert "p up to 32768 fits from its step formulas" in out.stderr
    data = cli("check", "ring_allreduce", "-p", "131072", "--json")
    assert data.code == EXIT_INPUT and data.stderr == ""
    error = json.loads(data.stdout)
    assert error["ok"] is False and error["status"] == "error"
    assert "too large to check" in error["error"]["message"]
    assert any(note.startswith("step formulas: about 192 GB") for note in error["error"]["notes"])


def test_an_instance_no_path_fits_is_refused_with_each_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same decision at a size any machine holds, with the memory collc may use set small."""
    monkeypatch.setenv("COLLC_MEMORY", "1M")
    out = cli("check", RING, "-p", "4096")
    assert out.code == EXIT_INPUT, out.text
    assert "is too large to check on this machine: 4096 ranks x 4096 chunks make 2^24" in out.stderr
    assert "1 MB of memory can be used" in out.stderr
    for path in ("step formulas: about", "rank symmetry: about", "per-op: about"):
        assert path in out.stderr
    # the blocking model has no step-formula or symmetric path: the per-op estimate alone
    blocking = cli("check", RING, "-p", "4096", "--model", "blocking")
    assert blocking.code == EXIT_INPUT and "per-op: about" in blocking.stderr
    assert "step formulas" not in blocking.stderr and "rank symmetry" not in blocking.stderr


def test_a_range_reports_the_instance_it_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLC_MEMORY", "1M")
    out = cli("check", RING, "-p", "8,2048", "-j", "1")
    assert out.code == EXIT_INPUT, out.text
    assert "the smallest failing instance is p=2048 (1 smaller instance(s) correct)" in out.stdout
    assert "is too large to check on this machine" in out.stdout
    data = json.loads(cli("check", RING, "-p", "8,2048", "-j", "1", "--json").stdout)
    assert data["smallest_failure"]["status"] == "error"
    assert "too large" in data["smallest_failure"]["error"]["message"]
    assert data["smallest_failure"]["error"]["notes"]


def test_within_the_memory_the_instance_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLC_MEMORY", "8G")
    out = cli("check", RING, "-p", "2048")
    assert out.code == EXIT_OK, out.text
    assert "correct" in out.stdout


def test_plan_orders_the_paths_and_says_why_one_is_left_out() -> None:
    ring = load_program(RING)
    sized = survey(ring, {"p": 2048})
    assert sized is not None
    assert (sized.p, sized.n, sized.collective) == (2048, 2048, Collective.ALLREDUCE)
    assert sized.ops == 2 * 2 * 2047 * 2048  # a send and a receive in each of 2(p - 1) steps, every rank
    assert sized.iterations >= 2 * 2047 * 2048
    roomy = plan(sized, symbolic=True, reduces=True, step_model=True, symmetry_min_slots=0, budget=1 << 40)
    assert roomy.paths == (MODEL, SYMMETRY, PER_OP) and not roomy.why_not
    assert roomy.estimates[MODEL] >= 2048 * 2048 * 12
    tight = plan(sized, symbolic=True, reduces=True, step_model=True, symmetry_min_slots=0, budget=1 << 20)
    assert tight.paths == () and set(tight.why_not) == {MODEL, SYMMETRY, PER_OP}
    error = tight.refusal(ring, {"p": 2048}, file="ring.coll")
    assert error.span is None and "'collc check ring.coll --ranks all'" in error.notes[-1]
    handed = tight.refusal(ring, {"p": 2048}, handed="step formulas")
    assert "the step formulas did not show it correct, and the per-op checker" in handed.message


def test_memory_available_honours_collc_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLC_MEMORY", "3G")
    assert memory_available() == (3 << 30, "COLLC_MEMORY")
    assert budget.memory_budget() == 3 << 30
    monkeypatch.setenv("COLLC_MEMORY", "512MiB")
    assert memory_available()[0] == 512 << 20
    monkeypatch.delenv("COLLC_MEMORY")
    got, why = memory_available()
    assert got > 0 and why in ("available", "left to this cgroup", "assumed")
    assert budget.memory_budget() <= got


def test_symmetric_batches_shrink_to_the_memory_given() -> None:
    """A batch of ranks holds their elaborated operations: with little memory it holds fewer ranks (down to
    one shift), and the verdict and statistics are the same."""
    swing = load_program(EXAMPLES / "swing_bw.coll")
    roomy = symmetry.check_symmetric(swing, {"p": 64}, min_slots=0)
    tight = symmetry.check_symmetric(swing, {"p": 64}, min_slots=0, memory=1)
    seen: list[tuple[int, int]] = []
    symmetry.check_symmetric(swing, {"p": 64}, min_slots=0, memory=1, on_progress=lambda d, t: seen.append((d, t)))
    assert roomy is not None and tight is not None
    assert tight[1] == roomy[1] and tight[2] == roomy[2]
    assert seen[-1] == (32, 32)  # 64 ranks in batches of 2 (the shift)


# --------------------------------------------------------------------------
# The cost follows the work
# --------------------------------------------------------------------------

ONE_STEP = """\
algorithm one_step : {collective}
param p : int where p == 2
{root}chunks 1 << 20

phase only:
  step:
    send {chunks} to 1 - rank
    recv {chunks} from 1 - rank {action}
"""


def _one_step(collective: str, chunks: str, action: str) -> str:
    root = "param root : int = 0 where 0 <= root < p\n" if collective in ("broadcast", "reduce") else ""
    return ONE_STEP.format(collective=collective, root=root, chunks=chunks, action=action)


def _dense(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-op checker as it was: state for every chunk, every message through index arrays."""
    monkeypatch.setattr(check_module, "touched", lambda schedule: None)
    monkeypatch.setattr(check_module, "move_runs", lambda *args: False)


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "broadcast", "reduce", "reduce_scatter"])
@pytest.mark.parametrize("action", ["copy", "reduce"])
def test_a_program_that_names_two_chunks_keeps_state_for_two(
    collective: str, action: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2^20 chunks at p = 2, one step that moves chunks 0 and 1: two columns of state; the chunks no op
    touches fail or pass by the layout alone, and the report is the dense checker's, word for word."""
    schedule = elaborate(parse_program(_one_step(collective, "{0, 1}", action)), {"p": 2})
    assert columns.touched(schedule) is not None and columns.touched(schedule).tolist() == [0, 1]  # type: ignore[union-attr]
    fp = check_module._Fingerprint(schedule, Collector(20), True, None, columns.touched(schedule))
    assert fp.state.shape == (2, 2)
    lean = check(schedule)
    _dense(monkeypatch)
    assert check(schedule) == lean


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "broadcast", "reduce_scatter"])
@pytest.mark.parametrize("chunks", ["0 .. (1 << 20)", "0 .. (1 << 19)", "(1 << 19) .. (1 << 20)"])
def test_long_runs_move_with_slices_and_report_the_same(
    collective: str, chunks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    action = "copy" if collective in ("allgather", "broadcast") else "reduce"
    schedule = elaborate(parse_program(_one_step(collective, chunks, action)), {"p": 2})
    moved: list[bool] = []
    real = columns.move_runs
    monkeypatch.setattr(check_module, "move_runs", lambda *args: moved.append(real(*args)) or moved[-1])
    lean = check(schedule)
    _dense(monkeypatch)
    assert check(schedule) == lean
    # a rank that sends what it does not hold (allgather, broadcast) goes through the index arrays, which name it
    assert moved == [collective in ("allreduce", "reduce_scatter")]


def test_the_one_step_program_of_2_26_chunks_checks_from_two_columns(tmp_path: Path) -> None:
    """The issue's program: 2^26 chunks at p = 2, two of them moved; state for two columns, the 2^26 - 2
    others decided by the layout, and the report lists them in runs."""
    text = _one_step("allreduce", "{0, 1}", "reduce").replace("1 << 20", "1 << 26")
    schedule = elaborate(parse_program(text), {"p": 2})
    cols = columns.touched(schedule)
    assert cols is not None and cols.tolist() == [0, 1]
    path = tmp_path / "one_step.coll"
    path.write_text(text)
    out = cli("check", path, "-p", "2", "--show", "9")
    assert out.code == EXIT_WRONG, out.text
    n = 1 << 26
    assert f"{n - 10} more chunks fail the postcondition (not traced): {{10..{n - 1}}}" in out.stdout
    assert "holds the contributions of ranks {0} for chunk 2, expected {0..1}" in out.stdout
    data = json.loads(cli("check", path, "-p", "2", "--json").stdout)
    assert [f["chunk"] for f in data["findings"][:8]] == list(range(2, 10))


def test_layout_is_the_collectives_layout() -> None:
    for collective in Collective:
        for p, n in ((1, 1), (2, 4), (3, 9), (4, 16), (5, 10)):
            if layout_error(collective, p, n) is not None:
                continue
            root = 1 % p if collective.has_root else None
            ids = np.arange(n)
            origin, dest = columns.layout(collective, p, n, root, ids)
            assert origin.tolist() == chunk_origin(collective, p, n, root).tolist(), (collective, p, n)
            assert dest.tolist() == chunk_dest(collective, p, n, root).tolist(), (collective, p, n)
            assert columns.layout(collective, p, n, root, ids[::-2])[0].tolist() == origin[::-2].tolist()


def test_run_tally_reads_as_fmt_ids() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 300))
        flags = rng.random(n) < rng.random()
        keep = int(rng.integers(0, 10))
        tally = RunTally(keep)
        cuts = sorted({0, n, *(int(x) for x in rng.integers(0, n, size=4))})
        for a, b in itertools.pairwise(cuts):
            tally.add_flags(a, flags[a:b])
        ids = np.flatnonzero(flags)
        assert tally.first == ids[:keep].tolist()
        assert tally.count == max(0, ids.size - keep)
        if ids.size > keep:
            assert tally.rest_text() == fmt_ids(ids[keep:])


def test_check_instance_runs_within_the_memory_it_is_given() -> None:
    ring = load_program(RING)
    model = prepare(ring, {})
    assert model is not None
    assert check_instance(ring, {"p": 2048}, symbolic=model, memory=1 << 33).status == "ok"
    refused = check_instance(ring, {"p": 2048}, symbolic=model, memory=1 << 20)
    assert refused.status == "error" and refused.error is not None
    assert "too large to check" in refused.error.message


def test_no_path_left_but_one_that_hands_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance only the step formulas fit, wrong at one rank: they leave it to the per-op checker, which
    does not fit either: exit 2, saying so (not a verdict of either kind)."""
    (tmp_path / "lib").mkdir()
    library = (EXAMPLES / "lib" / "ring.coll").read_text()
    copy = "recv block((rank - s - 1) mod p, k) from ring_prev(rank) copy"
    assert copy in library
    (tmp_path / "lib" / "ring.coll").write_text(library.replace(copy, copy.replace("copy", "reduce")))
    path = tmp_path / "ring.coll"
    path.write_text(RING.read_text())
    monkeypatch.setattr(budget, "per_op_bytes", lambda s: 1 << 50)
    monkeypatch.setattr(budget, "symmetry_bytes", lambda s, b: 1 << 50)
    monkeypatch.setenv("COLLC_MEMORY", "8G")
    out = cli("check", path, "-p", "2048")
    assert out.code == EXIT_INPUT, out.text
    assert "the step formulas did not show it correct, and the per-op checker" in out.stderr


def test_out_of_memory_is_exit_2_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should an estimate fall short and memory run out all the same, `collc check` says so (exit 2)."""

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(sweep_module, "check", exhausted)
    out = cli("check", RING, "-p", "4")
    assert out.code == EXIT_INPUT, out.text
    assert "collc check ran out of memory" in out.stderr and "Traceback" not in out.text
    data = cli("check", RING, "-p", "4", "--json")
    assert data.code == EXIT_INPUT and "ran out of memory" in json.loads(data.stdout)["error"]["message"]
