"""Messages in pieces (runtime/collc_exec.h): a message from COLLC_PIECE_BYTES up to COLLC_PIECES_MAX pieces'
worth travels as several, each below MPICH's eager limit.

Runs the generated mpi-c allreduce of swing_lat (each message the whole vector) and of the ring (each a p-th of
it) at vector sizes around the piece boundaries (``tests/mpi_c/pieces_allreduce.py``: a piece less one byte, a
piece, a piece and one, three and five bytes, the largest size in pieces and the first one past it), issued by
dataflow and step by step, with the default piece size and with a small one, against numpy bit for bit.  A rank
passing another count at a size in pieces is tested in tests/test_mpi_faults.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import collc
from collc.backends import mpitools
from collc.diagnostics import CollError

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "mpi_c" / "pieces_allreduce.py"
EXEC_H = HERE.parent / "runtime" / "collc_exec.h"
TIMEOUT = 300


def _define(name: str) -> int:
    found = re.search(rf"^#define {name} (\d+)$", EXEC_H.read_text(), re.M)
    assert found, name
    return int(found.group(1))


DEFAULT_PIECE = _define("COLLC_PIECE_BYTES")


def test_the_script_and_the_docs_know_the_runtime_constants() -> None:
    script = SCRIPT.read_text()
    assert f"PIECES_MAX = {_define('COLLC_PIECES_MAX')}" in script
    docs = (HERE.parent / "docs" / "mpi.md").read_text()
    assert "COLLC_PIECE_BYTES" in docs and str(DEFAULT_PIECE) in docs


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    try:
        mpitools.mpicc(), mpitools.mpiexec()
    except CollError as err:
        pytest.skip(str(err))
    root = tmp_path_factory.mktemp("pieces")
    return {name: collc.load(name).instantiate(p=4).compile("mpi-c", root / name)[-1]
            for name in ("swing_lat", "ring_allreduce")}  # fmt: skip


CASES = [
    pytest.param(name, issue, piece, marks=() if fast else pytest.mark.slow, id=f"{name}-{issue}-{piece or 'default'}")
    for name, issue, piece, fast in (
        ("swing_lat", "dataflow", 0, True),
        ("swing_lat", "steps", 0, True),
        ("ring_allreduce", "dataflow", 100, True),
        ("ring_allreduce", "steps", 100, True),
        ("swing_lat", "dataflow", 100, False),
        ("swing_lat", "steps", 100, False),
        ("ring_allreduce", "dataflow", 0, False),
        ("ring_allreduce", "steps", 0, False),
    )
]


@pytest.mark.parametrize(("name", "issue", "piece"), CASES)
def test_sizes_around_the_piece_boundaries_arrive_bit_for_bit(
    libs: dict[str, Path], name: str, issue: str, piece: int
) -> None:
    env = mpitools.mpi_env(4, {**os.environ, "COLLC_ISSUE": issue})
    env.pop("LD_PRELOAD", None)
    env.pop("COLLC_PIECE_BYTES", None)
    if piece:
        env["COLLC_PIECE_BYTES"] = str(piece)
    cmd = [str(mpitools.mpiexec()), "-n", "4", sys.executable, str(SCRIPT), str(libs[name]), name,
           str(piece or DEFAULT_PIECE)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stdout + proc.stderr[-3000:]
