"""`collc sim`: goodput studies on a topology (collc.goodput over collc.simulate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import collc
from collc.cli import EXIT_INPUT, EXIT_OK, main
from collc.goodput import Entry, parse_duration, parse_entry, parse_rate, study
from collc.simulate import NetworkModel, simulate
from collc.topology import Torus

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def sim(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["sim", *args])
    return result.exit_code, result.output


def rows(*args: str) -> list[dict[str, object]]:
    code, out = sim(*args, "--json")
    assert code == EXIT_OK, out
    return json.loads(out)


def test_json_rows_hold_the_documented_fields() -> None:
    out = rows("ring_allreduce", "swing_bw", "--topology", "ring:16", "--sizes", "32B:1MiB")
    assert {r["algorithm"] for r in out} == {"ring_allreduce", "swing_bw"}
    assert len(out) == 2 * 16
    for r in out:
        assert set(r) >= {"algorithm", "size_bytes", "time_us", "goodput_gbps"}
        assert r["goodput_gbps"] == pytest.approx(r["size_bytes"] * 8 / (r["time_us"] * 1e-6) / 1e9)


def test_cli_times_equal_a_direct_simulation() -> None:
    """The CLI's figure is the simulator's time for the exact schedule with the default model."""
    out = rows("swing_bw", "--topology", "ring:16", "--sizes", "4KiB", "--exact")
    schedule = collc.load("swing_bw").instantiate(p=16).schedule
    (row,) = simulate(schedule, Torus((16,)), [4096], NetworkModel()).rows
    assert out[0]["time_us"] == pytest.approx(row.time_s * 1e6, rel=1e-12)


def test_best_of_group_is_the_faster_file_at_each_size() -> None:
    args = ("--topology", "torus:4x4", "--sizes", "32B:4MiB")
    both = rows("swing=swing_lat_torus+swing_bw_torus", *args)
    lat = {r["size_bytes"]: r["time_us"] for r in rows("swing_lat_torus", *args)}
    bw = {r["size_bytes"]: r["time_us"] for r in rows("swing_bw_torus", *args)}
    assert {r["algorithm"] for r in both} == {"swing"}
    for r in both:
        size = r["size_bytes"]
        assert r["time_us"] == pytest.approx(min(lat[size], bw[size]))
        assert r["variant"] == ("swing_lat_torus" if lat[size] <= bw[size] else "swing_bw_torus")
    # the latency-optimal variant wins small vectors, the bandwidth-optimal one large vectors
    assert both[0]["variant"] == "swing_lat_torus" and both[-1]["variant"] == "swing_bw_torus"


@pytest.mark.parametrize(
    "example, topology",
    [("ring_allreduce", "ring:64"), ("hamiltonian_torus", "torus:8x8"), ("bucket_torus", "torus:4x24")],
)
def test_sampled_long_loops_cost_what_the_exact_schedule_costs(example: str, topology: str) -> None:
    """Ring steps are all alike; bucket changes dimension mid-loop (a change the sampler runs)."""
    args = (example, "--topology", topology, "--sizes", "64B:16MiB")
    code, text = sim(*args)
    assert code == EXIT_OK and "elaborated, the others stood in for" in text, text
    sampled = {r["size_bytes"]: r["time_us"] for r in rows(*args)}
    exact = {r["size_bytes"]: r["time_us"] for r in rows(*args, "--exact")}
    for size, t in exact.items():
        assert sampled[size] == pytest.approx(t, rel=0.01), size


def test_table_and_plot(tmp_path: Path) -> None:
    png, svg = tmp_path / "g.png", tmp_path / "g.svg"
    code, out = sim(
        "ring_allreduce", "rabenseifner", "--topology", "ring:8", "--sizes", "1KiB:1MiB", "--plot", str(png)
    )
    assert code == EXIT_OK, out
    lines = [line for line in out.splitlines() if line.strip().startswith(("1KiB", "1MiB"))]
    assert len(lines) == 4  # goodput and time rows
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    code, out = sim("ring_allreduce", "--topology", "ring:8", "--sizes", "1KiB:4KiB", "--plot", str(svg))
    assert code == EXIT_OK, out
    assert "<svg" in svg.read_text()[:500] and svg.stat().st_size > 5_000


def test_swing_beats_recursive_doubling_on_a_torus_and_bucket_wins_large_vectors() -> None:
    """The paper's qualitative result on an 8x8 torus (a check of the programs and the model together)."""
    entries = [
        Entry("swing", (str(EXAMPLES / "torus/swing_lat_torus.coll"), str(EXAMPLES / "torus/swing_bw_torus.coll"))),
        Entry(
            "recdoub", (str(EXAMPLES / "torus/recdoub_lat_torus.coll"), str(EXAMPLES / "torus/recdoub_bw_torus.coll"))
        ),
        Entry("bucket", (str(EXAMPLES / "torus/bucket_torus.coll"),)),
    ]
    sizes = [32, 2 << 20, 512 << 20]
    result = study(entries, Torus((8, 8)), sizes, NetworkModel())
    for size in sizes:
        assert result.point("swing", size).time_s < result.point("recdoub", size).time_s
    assert result.point("swing", 32).time_s < result.point("bucket", 32).time_s
    assert result.point("bucket", 512 << 20).time_s < result.point("swing", 512 << 20).time_s


@pytest.mark.parametrize(
    "args, message",
    [
        (("ring_allreduce", "--topology", "ring:16", "--sizes", "6B"), "not a whole number of 4-byte elements"),
        (("swing_bw_torus", "--topology", "torus:5x5"), "violates the constraint"),
        (("swing_bw_torus", "--topology", "fattree:16"), "takes a torus shape"),
        (("ring_allreduce", "--topology", "torus:4x4x"), "--topology"),
        (("ring_allreduce", "--topology", "mesh:4"), "--topology"),
        (("nofile", "--topology", "ring:4"), "no such file"),
        (("ring_allreduce", "--topology", "ring:4", "--link-bw", "0Gb/s"), "above zero"),
        (("ring_allreduce", "--topology", "ring:4", "--hop-latency", "3 parsecs"), "not a duration"),
        (("x=", "--topology", "ring:4"), "no files"),
        (("ring_allreduce", "ring_allreduce", "--topology", "ring:4"), "two curves are named ring_allreduce"),
        (("ring_allreduce", "--topology", "ring:4", "--plot", "out.jpg"), "must be .png, .svg or .pdf"),
    ],
)
def test_bad_input_is_a_clear_error(args: tuple[str, ...], message: str) -> None:
    code, out = sim(*args)
    assert code == EXIT_INPUT, out
    assert message in out
    assert "Traceback" not in out


def test_units() -> None:
    assert parse_rate("400Gb/s") == 50e9
    assert parse_rate("50GB/s") == 50e9
    assert parse_rate("3.2Tb/s") == 400e9
    assert parse_duration("100ns") == pytest.approx(1e-7)
    assert parse_duration("0.5us") == pytest.approx(5e-7)
    for bad in ("400", "400Gbps", "fast"):
        with pytest.raises(ValueError):
            parse_rate(bad)
    assert parse_entry("a=x.coll+y.coll") == Entry("a", ("x.coll", "y.coll"))
    assert parse_entry("examples/x.coll") == Entry("", ("examples/x.coll",))
