"""`collc tune`: the fastest program per message size, and one mpi-c library of several schedules.

The band choice is a pure function of a table of times (`collc.tune.choose_bands`), checked against a
brute-force pick size by size; the command runs on the bundled allreduce examples; and the library it
writes (and a three-band one built with `mpi_c.generate(bands=...)`) runs an mpi4py program through the
PMPI shim, each call on the schedule of its band (read from the shim's log) and with the numpy sum.
The runs skip without mpicc and mpiexec, as tests/test_mpi_c.py's do.
"""

from __future__ import annotations

import collections
import itertools
import random
import re
import sys
from pathlib import Path

import pytest
from test_cli import cli
from test_mpi_c import _tools, mpirun
from test_shim_ops import RAN

import collc
from collc import tune
from collc.backends import mpi_c
from collc.cli.common import parse_size
from collc.diagnostics import CollError
from collc.ir import Collective
from collc.simulate import NetworkModel

# --------------------------------------------------------------------------
# Choosing bands from a table of times
# --------------------------------------------------------------------------


def _brute_force(names: list[str], times: list[list[float]]) -> list[str]:
    """The fastest program at each size on its own (the first listed on a tie)."""
    winners = []
    for j in range(len(times[0])):
        best = 0
        for k in range(1, len(names)):
            if times[k][j] < times[best][j]:
                best = k
        winners.append(names[best])
    return winners


def _assert_bands_match(names: list[str], times: list[list[float]]) -> None:
    bands = tune.choose_bands(names, times)
    winners = _brute_force(names, times)
    # The bands cover the sizes in order, each size in the band of its own winner ...
    assert bands[0].first == 0 and bands[-1].last == len(winners) - 1
    for a, b in itertools.pairwise(bands):
        assert b.first == a.last + 1
        assert a.program != b.program  # ... and neighbours differ: every band is as long as it can be
    for band in bands:
        assert all(winners[j] == band.program for j in range(band.first, band.last + 1))
        k = names.index(band.program)
        assert band.times == tuple(times[k][band.first : band.last + 1])
        if len(names) == 1:
            assert band.runner_up is None and band.ratios == ()
            continue
        assert band.runner_up is not None and band.runner_up != band.program
        r = names.index(band.runner_up)
        assert band.ratios == tuple(times[r][j] / times[k][j] for j in range(band.first, band.last + 1))
        assert all(ratio >= 1 for ratio in band.ratios)


def test_bands_of_a_handmade_table() -> None:
    names = ["lat", "mid", "bw"]
    times = [
        [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],  # latency-optimal: best at the two smallest sizes
        [1.5, 2.5, 3.0, 5.0, 9.0, 30.0],  # best in the middle
        [3.0, 3.5, 4.0, 6.0, 8.0, 10.0],  # bandwidth-optimal: best at the two largest
    ]
    bands = tune.choose_bands(names, times)
    assert [(b.program, b.first, b.last) for b in bands] == [("lat", 0, 1), ("mid", 2, 3), ("bw", 4, 5)]
    assert bands[0].runner_up == "mid" and bands[0].ratios == (1.5, 1.25)
    assert bands[2].runner_up == "mid" and bands[2].ratios == (9.0 / 8.0, 3.0)
    _assert_bands_match(names, times)


def test_a_tie_goes_to_the_first_listed_and_does_not_split_a_band() -> None:
    names = ["a", "b"]
    times = [[1.0, 2.0, 3.0], [1.0, 1.0, 3.0]]
    bands = tune.choose_bands(names, times)
    assert [(b.program, b.first, b.last) for b in bands] == [("a", 0, 0), ("b", 1, 1), ("a", 2, 2)]
    _assert_bands_match(names, times)
    assert [(b.program, b.last) for b in tune.choose_bands(["only"], [[5.0, 6.0]])] == [("only", 1)]


def test_bands_of_random_tables_match_the_brute_force_pick() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n, m = rng.randint(1, 4), rng.randint(1, 12)
        names = [f"p{k}" for k in range(n)]
        times = [[float(rng.randint(1, 5)) for _ in range(m)] for _ in range(n)]  # small ints: many ties
        _assert_bands_match(names, times)


def test_a_malformed_table_is_refused() -> None:
    with pytest.raises(ValueError, match="every program needs a time at every size"):
        tune.choose_bands(["a", "b"], [[1.0, 2.0], [1.0]])
    with pytest.raises(ValueError, match="one row of times per program"):
        tune.choose_bands([], [])


def test_thresholds_are_in_bytes_of_the_mpi_call() -> None:
    bands = tune.choose_bands(["a", "b"], [[1.0, 1.0, 9.0], [2.0, 2.0, 1.0]])
    sizes = [1024, 2048, 4096]
    assert tune.thresholds(bands, sizes, Collective.ALLREDUCE, 8) == (4096,)
    assert tune.thresholds(bands, sizes, Collective.ALLGATHER, 8) == (512,)  # a rank's block
    assert tune.call_bytes(Collective.REDUCE_SCATTER, 3, 100) == 34  # rounded up
    assert tune.parse_collective("Reduce-Scatter") is Collective.REDUCE_SCATTER
    with pytest.raises(CollError, match="unknown collective 'allreduse'"):
        tune.parse_collective("allreduse")


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------

BROKEN = """# Recursive doubling that stops one step short: a rank misses half of the contributions.
algorithm short_doubling : allreduce
param p : int where p >= 2 and is_pow2(p)
chunks 1

phase allreduce:
  for step s in 0 .. log2(p) - 1:
    exchange with rank ^ (1 << s): send 0; recv 0 reduce
"""


def test_cli_prints_bands_and_names_the_programs_left_out(tmp_path: Path) -> None:
    res = cli("tune", "--collective", "allreduce", "-p", "8", "--topology", "ring:8", "--sizes", "32:64MiB")
    assert res.code == 0, res.text
    assert "# allreduce at p=8 on ring:8" in res.stdout
    assert "# skipped hamiltonian_torus: dims=8 violates the constraint" in res.stdout
    assert "# skipped hier_allreduce_ring: p=8 splits as nodes * local" in res.stdout
    rows = [line for line in res.stdout.splitlines() if line.startswith("  ")]
    assert rows and rows[0].split()[0].startswith("32B") and rows[-1].split()[0].endswith("64MiB")
    assert "compressed" not in res.stdout  # programs with compression points are not candidates
    broken = tmp_path / "short_doubling.coll"
    broken.write_text(BROKEN)
    res = cli("tune", "-c", "allreduce", "-p", "8", "--topology", "ring:8", "--sizes", "1K:1MiB",
              "--candidates", f"ring_allreduce,{broken}", "--candidates", "ring_allgather")  # fmt: skip
    assert res.code == 0, res.text
    assert f"# skipped short_doubling ({broken}): fails verification at p=8" in res.stdout
    assert "# skipped ring_allgather: it is allgather, not allreduce" in res.stdout
    assert "# 1 candidates verified at p=8: ring_allreduce" in res.stdout
    rows = [line.split() for line in res.stdout.splitlines() if line.startswith("  ")]
    assert rows == [["1KiB..1MiB", "all", "ring_allreduce", rows[0][3], "-", "-"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-c", "allreduse", "-p", "8"], "unknown collective 'allreduse'; the collectives are allreduce"),
        (["-c", "allreduce", "-p", "6", "--candidates", "recursive_doubling"],
         "no candidate allreduce program verifies on full:6 (recursive_doubling: p=6 violates the constraint"),
        (["-c", "allreduce", "-p", "8", "--topology", "ring:x"], "Invalid value for '--topology'"),
        (["-c", "allreduce", "-p", "4", "--topology", "ring:8"], "ring:8 has 8 nodes, but the schedule runs on 4"),
        (["-c", "allreduce", "-p", "8", "--sizes", "6:64"], "6 B is not a whole number of 4-byte elements"),
        (["-c", "allreduce", "-p", "8", "--sizes", "lots"], "Invalid value for '--sizes'"),
        (["-c", "allreduce", "-p", "8", "--candidates", "no_such_program"], "no such file: no_such_program"),
    ],
)  # fmt: skip
def test_cli_errors(args: list[str], message: str) -> None:
    res = cli("tune", *args)
    assert res.code == 2, res.text
    assert message in res.text
    assert "Traceback" not in res.text


# --------------------------------------------------------------------------
# Libraries, run through the shim
# --------------------------------------------------------------------------

SCRIPT = """
import sys
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
for count in map(int, sys.argv[1:]):
    mine = ((np.arange(count, dtype=np.int64) * (comm.rank + 3)) % 2001 - 1000).astype(np.int32)
    want = sum(((np.arange(count, dtype=np.int64) * (r + 3)) % 2001 - 1000) for r in range(comm.size))
    got = np.full(count, -7, dtype=np.int32)
    comm.Allreduce(mine, got, op=MPI.SUM)
    assert (got == want.astype(np.int32)).all(), count
comm.Barrier()
if comm.rank == 0:
    print("ok")
"""


def _run(lib: Path, counts: list[int], tmp_path: Path, **env: str) -> collections.Counter:
    """Run the mpi4py allreduce at ``counts`` (int32) on 4 ranks through ``lib``: (algorithm, count) of every
    call the shim logged."""
    script = tmp_path / "allreduce.py"
    script.write_text(SCRIPT)
    run = mpirun(4, [sys.executable, str(script), *map(str, counts)], preload=str(lib),
                 env={"COLLC_SHIM_LOG": "1", **env})  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr[-4000:]
    return collections.Counter((algorithm, int(count)) for _, algorithm, _, _, count, *_ in RAN.findall(run.stderr))


def test_the_tuned_library_runs_each_band_through_the_shim(tmp_path: Path) -> None:
    _tools()
    out = tmp_path / "lib"
    res = cli("tune", "-c", "allreduce", "-p", "4", "--topology", "ring:4", "--sizes", "64:64MiB",
              "--candidates", "swing_lat,rabenseifner", "-o", out)  # fmt: skip
    assert res.code == 0, res.text
    bands = re.findall(r"^  \S+\s+(B < \S+|B >= \S+)\s+(\w+)", res.stdout, re.M)
    assert [program for _, program in bands] == ["swing_lat", "rabenseifner"], res.stdout
    threshold = parse_size(bands[0][0].removeprefix("B < "))
    assert bands[1][0] == f"B >= {bands[0][0].removeprefix('B < ')}"
    lib = out / "libcollc_rabenseifner.so"
    assert str(lib) in res.stdout and lib.is_file()
    small, large = 16, threshold // 2  # int32: 64 B, below any threshold here; twice the threshold
    ran = _run(lib, [small, large], tmp_path)
    assert ran == collections.Counter({("swing_lat", small): 4, ("rabenseifner", large): 4})


def _verified(name: str) -> collc.Instance:
    inst = collc.load(name).instantiate(p=4)
    assert inst.verify().ok
    return inst


def test_a_library_of_three_bands_and_its_run_time_thresholds(tmp_path: Path) -> None:
    _tools()
    ring, rd, lat = (_verified(n).schedule for n in ("ring_allreduce", "recursive_doubling", "swing_lat"))
    files = mpi_c.generate(ring, tmp_path / "lib", bands=[mpi_c.Band(rd, 64), mpi_c.Band(lat, 4096)])
    main = (tmp_path / "lib" / "collc_ring_allreduce.c").read_text()
    assert "64 <= B < 4096  collc_ring_allreduce_band1_schedule  swing_lat.coll" in main
    assert ".small = &collc_ring_allreduce_band1_schedule," in main and ".small_below = 4096," in main
    assert [f.name for f in files[:3]] == ["collc_ring_allreduce.c", "collc_ring_allreduce_band0.c",
                                           "collc_ring_allreduce_band1.c"]  # fmt: skip
    lib = mpi_c.build(tmp_path / "lib", ring)
    counts = [4, 100, 2000]  # 16 B, 400 B, 8000 B
    assert _run(lib, counts, tmp_path) == collections.Counter(
        {("recursive_doubling", 4): 4, ("swing_lat", 100): 4, ("ring_allreduce", 2000): 4}
    )
    moved = _run(lib, counts, tmp_path, COLLC_BAND_BYTES="500,10000")
    assert moved == collections.Counter(
        {("recursive_doubling", 4): 4, ("recursive_doubling", 100): 4, ("swing_lat", 2000): 4}
    )
    lowest = _run(lib, counts, tmp_path, COLLC_SMALL_BYTES="0")
    assert lowest == collections.Counter({("swing_lat", 4): 4, ("swing_lat", 100): 4, ("ring_allreduce", 2000): 4})


def test_bad_bands_are_refused(tmp_path: Path) -> None:
    ring, rd, lat = (_verified(n).schedule for n in ("ring_allreduce", "recursive_doubling", "swing_lat"))
    with pytest.raises(CollError, match="the band thresholds must ascend: 64 bytes after 4096"):
        mpi_c.generate(ring, tmp_path, bands=[mpi_c.Band(rd, 4096), mpi_c.Band(lat, 64)])
    with pytest.raises(CollError, match="bands 0 and 1 both run swing_lat"):
        mpi_c.generate(ring, tmp_path, bands=[mpi_c.Band(lat, 64), mpi_c.Band(lat, 4096)])
    with pytest.raises(CollError, match="a small-message schedule or bands of schedules, not both"):
        mpi_c.generate(ring, tmp_path, small=rd, bands=[mpi_c.Band(lat, 64)])
    assert not list(tmp_path.iterdir())  # nothing written


def _handmade(collective: Collective, p: int, sizes: list[int], programs: list[str]) -> tune.Tuning:
    """A tuning whose band k is ``programs[k]`` at ``sizes[k]`` (times made up)."""
    candidates = tuple(tune.Candidate(name, name, {"p": p}) for name in dict.fromkeys(programs))
    names = [c.name for c in candidates]
    times = tuple(tuple(1.0 if programs[j] == name else 2.0 for j in range(len(sizes))) for name in names)
    bands = tune.choose_bands(names, times)
    assert [b.program for b in bands] == programs
    return tune.Tuning(collective, p, f"full:{p}", NetworkModel(), tuple(sizes), candidates, (), times, bands)


def test_a_band_no_call_reaches_is_dropped_from_the_library(tmp_path: Path) -> None:
    # Allgather calls count a rank's block: 12 B, 16 B and 24 B vectors on 12 ranks are calls of 1, 2 and 2 bytes,
    # so the middle band has no call of its own.
    programs = ["bruck_allgather", "direct_allgather", "ring_allgather"]
    result = _handmade(Collective.ALLGATHER, 12, [12, 16, 24], programs)
    assert result.thresholds() == (2, 2)
    files = tune.write_library(result, tmp_path, build=False)
    assert [f.name for f in files[:2]] == ["collc_ring_allgather.c", "collc_ring_allgather_small.c"]
    main = (tmp_path / "collc_ring_allgather.c").read_text()
    assert ".small_below = 2," in main and "direct_allgather" not in main


def test_an_alltoall_library_of_several_bands_is_refused(tmp_path: Path) -> None:
    result = _handmade(Collective.ALLTOALL, 4, [64, 128], ["bruck_alltoall", "pairwise_alltoall"])
    with pytest.raises(CollError, match="an alltoall library holds one schedule, and the bands choose bruck_alltoall"):
        tune.write_library(result, tmp_path, build=False)
    assert not list(tmp_path.iterdir())
