"""`--ranks all` for alltoall: chunk src * p + dst is the pair (src, dst), and the proof reasons about pairs
(`collc.verify.allp._pair_set`).  Every proof is compared with the per-p checker beyond the instances it learned
from; every mutant gets its smallest failing p, confirmed by the per-p checker on both sides."""

from __future__ import annotations

from pathlib import Path

import pytest

from collc.frontend.program import load_program
from collc.verify.forall import check_all_p
from collc.verify.sweep import check_instance

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PAIRWISE = """algorithm {name} : alltoall
param p : int where p >= 1
chunks p * p

fn chunk(src, dst) = src * p + dst

phase alltoall:
  for step s in 1 .. p:
    send {send} to (rank + s) mod p
    recv {recv} from (rank - s) mod p copy
"""
SEND, RECV = "chunk(rank, (rank + s) mod p)", "chunk((rank - s) mod p, rank)"


def _write(tmp_path: Path, name: str, send: str = SEND, recv: str = RECV) -> Path:
    path = tmp_path / f"{name}.coll"
    path.write_text(PAIRWISE.format(name=name, send=send, recv=recv))
    return path


def _status(path: Path, p: int) -> str:
    return check_instance(load_program(path), {"p": p}).status


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pairwise_alltoall", "bruck_alltoall"])
def test_alltoall_examples_are_proved(name: str) -> None:
    program = load_program(EXAMPLES / f"{name}.coll")
    result = check_all_p(program, {}, bound=4, solver_seconds=600)
    assert result.status == "proved", result.how
    assert all("src" in inv for inv in result.invariants)
    for p in (13, 17, 30):
        assert check_instance(program, {"p": p}).status == "ok"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "send", "recv", "p_fail"),
    [
        # the block for rank + s goes to rank + s + 1 from p = 13 on
        ("late_peer", SEND, "chunk((rank - s) mod p, rank + (1 if p > 12 and s == 2 else 0)) mod (p * p)", 13),
        # the pair's second half without `mod p`: another pair's chunk, or none, at every p > 1
        ("unreduced", "rank * p + rank + s", "(rank - s) mod p * p + rank + p - (rank - s) mod p - s", 2),
    ],
)
def test_alltoall_mutants_get_their_smallest_counterexample(
    tmp_path: Path, name: str, send: str, recv: str, p_fail: int
) -> None:
    path = _write(tmp_path, name, send, recv)
    result = check_all_p(load_program(path), {}, bound=24)
    assert result.status == "counterexample", result.how
    assert result.failure is not None and result.failure.params["p"] == p_fail
    assert _status(path, p_fail) != "ok"
    assert all(_status(path, q) == "ok" for q in range(1, p_fail))


def test_alltoall_chunks_in_other_forms_are_refused_with_the_reason(tmp_path: Path) -> None:
    """A chunk not written src * p + dst has no pair the proof can name: a correct program, not proved, checked
    up to the bound."""
    path = _write(tmp_path, "flat", "(rank + 1) * p - p + (rank + s) mod p")
    result = check_all_p(load_program(path), {}, bound=6)
    assert result.status == "checked" and result.checked == 6
    assert "alltoall chunk not written src * p + dst" in result.how


def test_a_powers_of_two_alltoall_learns_within_its_memory(tmp_path: Path) -> None:
    """Bine's alltoall, for powers of two only, would learn from p = 32 too, p^3 points a step times every atom:
    gigabytes.  The prover learns from the instances whose atoms' truth fits its bound, in a process limited to
    2 GiB of address space, and gives its answer in seconds."""
    import subprocess
    import sys

    path = str(EXAMPLES / "bine_alltoall.coll")
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from collc.frontend.program import load_program\n"
        "from collc.verify.forall import check_all_p\n"
        f"r = check_all_p(load_program({path!r}), {{}}, bound=16)\n"
        "print(r.status)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] in ("proved", "checked"), run.stdout
