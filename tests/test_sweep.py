"""Checking ranges of instances, shrinking to the smallest failure, deadlocks, traces and hazards."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import collc
from collc.cli import main as cli_main
from collc.frontend.program import load_program
from collc.verify.deadlock import check_blocking
from collc.verify.sweep import parameter_sets, parse_dims_spec, parse_int_spec, sweep
from collc.verify.trace import trace_chunk

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(cli_main, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("16", [16]),
        ("2..6", [2, 3, 4, 5, 6]),
        ("pow2:2..64", [2, 4, 8, 16, 32, 64]),
        ("pow2:3..16384", [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]),
        ("even:2..9", [2, 4, 6, 8]),
        ("odd:2..9", [3, 5, 7, 9]),
        ("4,6,12", [4, 6, 12]),
        ("2..4,10,pow2:16..32", [2, 3, 4, 10, 16, 32]),
    ],
)
def test_int_specs(spec: str, want: list[int]) -> None:
    assert parse_int_spec(spec) == want


@pytest.mark.parametrize("bad", ["", "2..", "x", "5..2", "pow3:2..4", "1,,2"])
def test_bad_int_specs(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_int_spec(bad)


def test_dims_specs_and_products() -> None:
    assert parse_dims_spec("4x4,8x8,4x4x4") == [(4, 4), (8, 8), (4, 4, 4)]
    sets = parameter_sets({"root": [1, 0], "p": [8, 4]})
    assert sets == [{"p": 4, "root": 0}, {"p": 4, "root": 1}, {"p": 8, "root": 0}, {"p": 8, "root": 1}]


def test_sweep_counts_skipped_instances() -> None:
    program = load_program(EXAMPLES / "recursive_doubling.coll")
    outcome = sweep(program, [{"p": p} for p in range(2, 17)], jobs=1)
    assert outcome.ok and outcome.checked == 4 and outcome.skipped == 11


def test_cli_sweep_of_swing_passes_in_parallel() -> None:
    code, out = run_cli("check", EXAMPLES / "swing_bw.coll", "--ranks", "even:2..128", "--jobs", "2")
    assert code == 0, out
    assert "correct for every instance" in out and "64 instance(s) checked" in out


def _planted(tmp_path: Path) -> tuple[Path, int]:
    """Swing-bw without the non-power-of-two dedup: wrong from p=6 on, right for powers of two."""
    text = (EXAMPLES / "swing_bw.coll").read_text()
    old = "fn blocks(r, s) = swing_blocks_n(r, s, L, n)"
    assert old in text
    line = text[: text.index(old)].count("\n") + 1
    path = tmp_path / "swing_nodedup.coll"
    path.write_text(text.replace(old, "fn blocks(r, s) = swing_send_n(r, s, L, n)"))
    return path, line


def test_planted_bug_is_shrunk_to_the_smallest_p(tmp_path: Path) -> None:
    path, _ = _planted(tmp_path)
    code, out = run_cli("check", path, "--ranks", "even:2..64", "--jobs", "2")
    assert code == 1, out
    assert "smallest failing instance is p=6" in out
    assert "2 smaller instance(s) correct" in out  # p = 2 and 4 pass
    assert re.search(rf"{re.escape(str(path))}:\d+:\d+: error:", out)
    code, out = run_cli("check", path, "--ranks", "even:2..64", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and data["smallest_failure"]["params"] == {"p": 6}
    assert data["smallest_failure"]["findings"][0]["code"] in ("double-count", "postcondition")


def test_keep_going_lists_every_failure(tmp_path: Path) -> None:
    path, _ = _planted(tmp_path)
    code, out = run_cli("check", path, "--ranks", "even:2..16", "--keep-going", "--json")
    data = json.loads(out)
    assert code == 1
    failing = [r["params"]["p"] for r in data["results"] if r["status"] == "wrong"]
    assert failing == [6, 10, 12, 14]  # every even p that is not a power of two


def test_evaluation_error_in_a_sweep_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "peer.coll"
    path.write_text(
        "algorithm t : allreduce\nparam p : int\nchunks 1\nphase a:\n  for step s in 0 .. log2(p):\n"
        "    exchange with rank ^ (1 << s) if p < 6 else rank + p: send 0; recv 0 reduce\n"
    )
    code, out = run_cli("check", path, "--ranks", "2,4,6,8")
    assert code == 2, out
    assert "smallest failing instance is p=6" in out and "out of range" in out


def test_blocking_model_finds_the_ring_cycle() -> None:
    inst = collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=5)
    report = check_blocking(inst.schedule)
    assert not report.ok and report.blocked == 5
    assert sorted(w.rank for w in report.cycle) == [0, 1, 2, 3, 4]  # every rank sends first: a full cycle
    code, out = run_cli("check", EXAMPLES / "ring_allreduce.coll", "-p", "5", "--model", "blocking")
    assert code == 1 and "deadlock under blocking execution" in out and "back to the first" in out


@pytest.mark.parametrize("name", ["swing_bw", "recursive_doubling", "rabenseifner"])
def test_exchange_based_schedules_do_not_deadlock_when_blocking(name: str) -> None:
    for p in (2, 4, 8):
        assert check_blocking(collc.load(EXAMPLES / f"{name}.coll").instantiate(p=p).schedule).ok


def test_pairwise_alltoall_with_separate_sends_deadlocks_when_blocking() -> None:
    """Every rank sends to r + s before receiving from r - s: rendezvous sends wait in a cycle."""
    report = check_blocking(collc.load(EXAMPLES / "pairwise_alltoall.coll").instantiate(p=4).schedule)
    assert not report.ok and report.cycle and all(w.kind == "send" for w in report.cycle)


def test_rank_programs_of_different_lengths(tmp_path: Path) -> None:
    """Rank 0 has one more step than the others: it waits for a message that never comes."""
    path = tmp_path / "longer.coll"
    path.write_text(
        "algorithm t : allreduce\nparam p : int = 2\nchunks 1\nphase a:\n"
        "  exchange with rank ^ 1: send 0; recv 0 reduce\n"
        "  if rank == 0: recv 0 from 1 reduce\n"
    )
    code, out = run_cli("check", path, "-p", "2")
    assert code == 1 and "does not send" in out and "longer.coll:6:" in out
    code, out = run_cli("check", path, "-p", "2", "--model", "blocking")
    assert code == 1 and "rank 1, which has finished its program" in out


def test_trace_follows_one_chunk() -> None:
    inst = collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=4)
    events, final = trace_chunk(inst.schedule, 2)
    assert final == ["{0..3}"] * 4
    assert len(events) == 2 * (4 - 1)  # three reduce hops, three copy hops
    assert [e.action for e in events] == ["reduce"] * 3 + ["copy"] * 3
    code, out = run_cli("check", EXAMPLES / "ring_allreduce.coll", "-p", "4", "--trace", "2")
    assert code == 0 and "history of chunk 2" in out
    assert len(re.findall(r"\breduce\s+\d", out)) == 3


def test_hazard_and_deficiency_statistics() -> None:
    rd = collc.load(EXAMPLES / "recursive_doubling.coll").instantiate(p=8).verify().stats
    assert rd.temp_buffer_steps == 8 * 3  # every rank sends and receives the whole vector every step
    assert rd.latency_deficiency == 1.0 and rd.bandwidth_deficiency == pytest.approx(3 / (2 * 7 / 8))
    ring = collc.load(EXAMPLES / "ring_allreduce.coll").instantiate(p=8).verify().stats
    assert ring.temp_buffer_steps == 0 and ring.bandwidth_deficiency == pytest.approx(1.0)
    assert ring.fan_out_per_step == (1,) * 14


TORUS = """algorithm torus_rd : allreduce
param dims : dims where len(dims) == 2 and is_pow2(dims[0]) and is_pow2(dims[1])
let p = prod(dims)
chunks 1
phase rows:
  for step s in 0 .. log2(dims[1]):
    let c = coords(rank, dims)
    exchange with rank_of((c[0], c[1] ^ (1 << s)), dims): send 0; recv 0 reduce
phase columns:
  for step s in 0 .. log2(dims[0]):
    let c = coords(rank, dims)
    exchange with rank_of((c[0] ^ (1 << s), c[1]), dims): send 0; recv 0 reduce
"""


def test_torus_shapes_are_swept_with_dims(tmp_path: Path) -> None:
    path = tmp_path / "torus.coll"
    path.write_text(TORUS)
    code, out = run_cli("check", path, "--dims", "2x2,4x4,2x8,8x4,3x4", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["checked"] == 4 and data["skipped"] == 1
    assert [r["params"]["dims"] for r in data["results"] if r["status"] == "ok"] == [[2, 2], [2, 8], [4, 4], [8, 4]]
