"""Compression points: the syntax, the IR, the checker's findings and the error bounds it reports.

Bounds are checked against values derived by hand from the rules of docs/compression.md
(compression.md §3.3): an absolute-bound codec adds eb per lossy compression, an
idempotent one adds nothing when the data is already on its grid, a reduce adds up.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import collc
from collc.backends import tables
from collc.cli import main
from collc.codecs import parse_codec
from collc.diagnostics import CollError
from collc.frontend.program import parse_program
from collc.ir import OpKind, Schedule, schedule_from_json, schedule_to_json
from collc.verify.check import CheckReport, check

EB = 1e-3
FILE = "c.coll"


def program(collective: str, body: str, codecs: str = "codec q = ebq(eb=1e-3)\n", chunks: str = "p") -> str:
    """A program whose line 5 is the first line of ``body``."""
    return f"algorithm t : {collective}\nparam p : int where p >= 1\n{codecs}chunks {chunks}\n{body}"


def schedule_of(text: str, p: int = 4, codecs: dict[str, str] | None = None) -> Schedule:
    alg = collc.parse(text, FILE)
    if codecs:
        alg = alg.with_codecs(codecs)
    return alg.instantiate(p=p).schedule


def verify(text: str, p: int = 4, **kw: object) -> CheckReport:
    return check(schedule_of(text, p), **kw)  # type: ignore[arg-type]


def codes(report: CheckReport) -> dict[str, set[int]]:
    """Finding code -> the lines it was reported on."""
    out: dict[str, set[int]] = {}
    for f in report.findings:
        out.setdefault(f.code, set()).add(f.span.line)
    return out


RING_AG_P2P = program(
    "allgather",
    "phase a:\n"
    "  for step s in 0 .. p - 1:\n"
    "    send (rank - s) mod p to ring_next(rank) compress q\n"
    "    recv (rank - s - 1) mod p from ring_prev(rank) copy compress q\n",
)
RING_AG_ONCE = program(
    "allgather",
    "phase a:\n"
    "  compress rank with q\n"
    "  for step s in 0 .. p - 1:\n"
    "    send (rank - s) mod p to ring_next(rank)\n"
    "    recv (rank - s - 1) mod p from ring_prev(rank) copy\n"
    "  step:\n"
    "    decompress 0 .. p\n",
)
RING_RS_DOC = program(
    "reduce_scatter",
    "phase a:\n"
    "  for step s in 0 .. p - 1:\n"
    "    send (rank - s - 1) mod p to ring_next(rank) compress q\n"
    "    recv (rank - s - 2) mod p from ring_prev(rank) reduce compress q\n",
)
HOMOMORPHIC = program(
    "allreduce",
    "phase a:\n"
    "  compress 0 .. p with q\n"
    "  for step s in 0 .. p - 1:\n"
    "    send (rank - s - 1) mod p to ring_next(rank)\n"
    "    recv (rank - s - 2) mod p from ring_prev(rank) reduce\n"
    "  for step s in 0 .. p - 1:\n"
    "    send (rank - s) mod p to ring_next(rank)\n"
    "    recv (rank - s - 1) mod p from ring_prev(rank) copy\n"
    "  decompress 0 .. p\n",
    codecs="codec q = hq(eb=1e-3)\n",
)

# --------------------------------------------------------------------------
# Syntax and IR
# --------------------------------------------------------------------------


def test_codec_declarations_reach_the_ir_as_canonical_specs() -> None:
    s = schedule_of(RING_AG_P2P)
    assert s.codecs == (("q", "ebq(eb=0.001)"),)
    sends = [op for _, op in s.ops() if op.kind is OpKind.SEND]
    assert sends and all(op.codec == "ebq(eb=0.001)" for op in sends)
    assert all(op.codec == "ebq(eb=0.001)" for _, op in s.ops() if op.kind is OpKind.RECV)
    assert s.compresses()
    assert not collc.load("ring_allgather").instantiate(p=4).schedule.compresses()


def test_local_ops_name_their_own_rank_and_make_steps_of_their_own() -> None:
    s = schedule_of(RING_AG_ONCE)
    first, last = s.steps[0], s.steps[-1]
    assert {op.kind for op in first.ops} == {OpKind.COMPRESS}  # outside a step: a step of its own
    assert {op.kind for op in last.ops} == {OpKind.DECOMPRESS}  # `step:` with only a local op
    assert all(op.peer == op.rank and op.action is None for op in first.ops + last.ops)
    assert [op.chunks.ids().tolist() for op in first.ops] == [[0], [1], [2], [3]]
    assert all(op.codec == "ebq(eb=0.001)" for op in first.ops)
    assert all(op.codec is None for op in last.ops)
    assert check(s).stats.steps == 3  # local-only steps do not communicate


def test_an_exchange_codec_applies_to_both_halves() -> None:
    text = program("allreduce", "phase a:\n  exchange with rank ^ 1: send 0 compress q; recv 0 reduce\n", chunks="1")
    s = schedule_of(text, p=2)
    spec = "ebq(eb=0.001)"
    assert {(op.kind, op.codec) for _, op in s.ops()} == {(OpKind.SEND, spec), (OpKind.RECV, spec)}
    report = check(s)
    assert report.ok and report.compression is not None
    assert report.compression.lossy_hops == 1 and report.compression.error_bound == pytest.approx(EB)


def test_json_round_trip_and_versions() -> None:
    s = schedule_of(RING_AG_ONCE)
    data = schedule_to_json(s)
    assert data["version"] == 2 and data["codecs"] == {"q": "ebq(eb=0.001)"}
    local = [op for st in data["steps"] for op in st["ops"] if op["kind"] in ("compress", "decompress")]
    assert local and all(op["peer"] == op["rank"] for op in local)
    assert {op.get("codec") for op in local} == {"ebq(eb=0.001)", None}
    back = schedule_from_json(json.loads(json.dumps(data)))
    assert [(op.rank, op.kind, op.peer, op.chunks, op.action, op.codec) for _, op in back.ops()] == [
        (op.rank, op.kind, op.peer, op.chunks, op.action, op.codec) for _, op in s.ops()
    ]
    assert back.codecs == s.codecs
    assert check(back).compression == check(s).compression
    plain = schedule_to_json(collc.load("ring_allreduce").instantiate(p=4).schedule)
    assert plain["version"] == 1 and "codecs" not in plain  # readers of version 1 see no change
    with pytest.raises(ValueError, match="version"):
        schedule_from_json({**plain, "version": 99})


@pytest.mark.parametrize(
    ("text", "phrase", "line", "column"),
    [
        (program("allgather", "phase a:\n  pass\n", codecs="codec q = ebq(eb=0)\n"), "eb must be positive", 3, 11),
        (program("allgather", "phase a:\n  pass\n", codecs="codec q = nope(1)\n"), "unknown codec 'nope'", 3, 11),
        (program("allgather", "phase a:\n  pass\n", codecs="codec q = fp16\ncodec q = bf16\n"), "declared twice", 4, 1),
        (program("allgather", "phase a:\n  send 0 to 1 compress r\n"), "unknown codec 'r'", 6, 24),
        (program("allgather", "phase a:\n  compress rank with zz\n"), "unknown codec 'zz'", 6, 22),
        (program("allgather", "phase a:\n  let x = 1.5\n"), "1.5 is not an integer", 6, 11),
        (program("allgather", "phase a:\n  let x = 2e-3\n"), "codec specs", 6, 11),
    ],
)
def test_codec_errors_are_located(text: str, phrase: str, line: int, column: int) -> None:
    with pytest.raises(CollError) as info:
        parse_program(text, FILE)
    err = info.value
    assert phrase in err.message, err.message
    assert err.span is not None and (err.span.line, err.span.column) == (line, column), err.span


def test_an_included_file_may_not_declare_a_codec(tmp_path: Path) -> None:
    (tmp_path / "lib.coll").write_text("codec q = fp16\n")
    main = tmp_path / "main.coll"
    main.write_text(program("allgather", 'include "lib.coll"\nphase a:\n  pass\n', codecs=""))
    with pytest.raises(CollError, match="may not declare a codec"):
        collc.load(main)


def test_codec_overrides() -> None:
    alg = collc.parse(RING_AG_P2P, FILE)
    assert alg.codecs == {"q": "ebq(eb=0.001)"}
    other = alg.with_codecs({"q": "ebq(eb=1e-4)"})
    assert other.codecs == {"q": "ebq(eb=0.0001)"} and alg.codecs == {"q": "ebq(eb=0.001)"}
    report = other.instantiate(p=4).verify()
    assert report.compression is not None and report.compression.error_bound == pytest.approx(1e-4)
    with pytest.raises(CollError, match="unknown codec 'r'"):
        alg.with_codecs({"r": "fp16"})
    with pytest.raises(CollError, match="bad codec spec"):
        alg.with_codecs({"q": "ebq(eb=-1)"})


# --------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------


def test_reduce_of_compressed_data_needs_a_homomorphic_codec() -> None:
    doc = program(
        "allreduce",
        "phase a:\n  compress 0 with q\n  exchange with rank ^ 1: send 0; recv 0 reduce\n  decompress 0\n",
        chunks="1",
    )
    report = verify(doc, p=2)
    assert codes(report) == {"reduce-compressed": {7}}
    assert "not homomorphic" in report.findings[0].message and report.findings[0].rank in (0, 1)
    hq = verify(doc.replace("ebq(eb=1e-3)", "hq(eb=1e-3)"), p=2)
    assert hq.ok and hq.compression is not None and hq.compression.error_bound == pytest.approx(2 * EB)


def test_reduce_mixing_raw_and_compressed_data() -> None:
    mixed = program(
        "allreduce",
        "phase a:\n"
        "  step:\n"
        "    if rank == 0: compress 0 with q\n"
        "  exchange with rank ^ 1: send 0; recv 0 reduce\n"
        "  step:\n"
        "    if rank == 0: decompress 0\n",
        codecs="codec q = hq(eb=1e-3)\n",
        chunks="1",
    )
    report = verify(mixed, p=2)
    assert codes(report) == {"reduce-mixed": {8}}
    messages = " | ".join(f.message for f in report.findings)
    assert "into raw data" in messages and "raw into data compressed with hq(eb=0.001)" in messages


def test_compress_twice_decompress_raw_and_wire_compress_of_compressed_data() -> None:
    twice = RING_AG_ONCE.replace("  compress rank with q\n", "  compress rank with q\n" * 2)
    assert codes(verify(twice)) == {"compress-compressed": {7}}
    raw = RING_AG_ONCE.replace("  compress rank with q\n", "")
    report = verify(raw)
    assert codes(report) == {"decompress-raw": {10}} and "not compressed" in report.findings[0].message
    wire = program(
        "allgather",
        "phase a:\n"
        "  compress rank with q\n"
        "  for step s in 0 .. p - 1:\n"
        "    send (rank - s) mod p to ring_next(rank) compress q\n"
        "    recv (rank - s - 1) mod p from ring_prev(rank) copy compress q\n"
        "  decompress 0 .. p\n",
    )
    report = verify(wire)
    assert set(codes(report)) == {"wire-compress-compressed"} and codes(report)["wire-compress-compressed"] == {9}
    assert "forwarded as it is" in report.findings[0].message


def test_compress_of_a_slot_that_holds_nothing() -> None:
    text = RING_AG_ONCE.replace("compress rank with q", "compress 0 .. p with q")
    report = verify(text)
    assert codes(report) == {"compress-not-held": {6}}
    assert "compresses chunks {1..3} but holds no data for them" in report.findings[0].message


def test_matching_includes_the_codec() -> None:
    unmarked = RING_AG_P2P.replace("copy compress q", "copy")
    report = verify(unmarked)
    assert codes(report) == {"codec-mismatch": {8}}
    assert "compressed with ebq(eb=0.001), but rank" in report.findings[0].message
    assert "uncompressed (line 7)" in report.findings[0].message
    other = RING_AG_P2P.replace("copy compress q", "copy compress r").replace(
        "codec q = ebq(eb=1e-3)\n", "codec q = ebq(eb=1e-3)\ncodec r = ebq(eb=1e-4)\n"
    )
    report = verify(other)
    assert codes(report) == {"codec-mismatch": {9}}
    assert "receives it compressed with ebq(eb=0.0001)" in report.findings[0].message
    same_spec = other.replace("ebq(eb=1e-4)", "ebq(eb=0.001)")  # two names, one codec: they match
    assert verify(same_spec).ok


@pytest.mark.parametrize("p", [4, 34])
def test_data_beyond_the_codec_range(p: int) -> None:
    report = verify(RING_RS_DOC, p)
    if p == 4:
        assert report.ok
        return
    assert codes(report) == {"codec-range": {7}}  # partial sums of up to 33 inputs |x| <= 1; ebq: 32.25
    assert "may reach 33" in report.findings[0].message
    assert verify(RING_RS_DOC, p, input_bound=0.5).ok


def test_an_output_left_compressed() -> None:
    text = RING_AG_ONCE.replace("  step:\n    decompress 0 .. p\n", "")
    report = verify(text)
    assert codes(report) == {"compressed-output": {6, 9}}  # the op that last wrote the first such chunk
    f = report.findings[0]
    assert f.rank == 0 and f.span.line == 6
    assert "still holds chunks {0..3} compressed with ebq(eb=0.001)" in f.message
    assert (f.expected, f.actual) == ("raw", "ebq(eb=0.001)")


def test_compressed_schedules_are_deadlock_free_under_both_models() -> None:
    from collc.verify.sweep import judge

    for name, p in (("compressed_swing_bw", 6), ("homomorphic_allreduce", 4)):
        s = collc.load(name).instantiate(p=p).schedule
        assert judge(s, {"p": p}, "step").status == "ok"
        blocking = judge(s, {"p": p}, "blocking")
        # exchanges never block; the ring's send-then-receive does under rendezvous, local ops never do
        assert blocking.deadlock is not None
        assert blocking.deadlock.ok == (name == "compressed_swing_bw"), blocking.deadlock.message


# --------------------------------------------------------------------------
# Bounds, derived by hand
# --------------------------------------------------------------------------


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_p2p_ring_allgather_idempotent_against_not_idempotent(p: int) -> None:
    ebq = verify(RING_AG_P2P, p).compression
    assert ebq is not None and (ebq.lossy_hops, ebq.error_bound) == (1, pytest.approx(EB))  # forwarding is free
    zfp = check(schedule_of(RING_AG_P2P, p, {"q": "zfp(rate=8)"})).compression
    assert zfp is not None and zfp.lossy_hops == p - 1  # every hop re-compresses
    assert math.isinf(zfp.error_bound) and zfp.unbounded == ("zfp(rate=8)",)


@pytest.mark.parametrize("p", [2, 4, 7])
@pytest.mark.parametrize("spec", ["ebq(eb=1e-3)", "fwq(bits=8, block=32)", "fp16", "zfp(rate=8)", "lossless"])
def test_collective_level_allgather_is_one_lossy_hop(p: int, spec: str) -> None:
    codec = parse_codec(spec)
    report = check(schedule_of(RING_AG_ONCE, p, {"q": spec}))
    assert report.ok and report.compression is not None
    assert report.compression.lossy_hops == (1 if codec.lossy else 0)
    assert report.compression.error_bound == codec.abs_error(1.0)  # inf for zfp: unbounded


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
def test_decompress_reduce_compress_reduce_scatter_is_p_minus_1_hops(p: int) -> None:
    errors = verify(RING_RS_DOC, p).compression
    assert errors is not None
    assert errors.lossy_hops == p - 1
    assert errors.error_bound == pytest.approx((p - 1) * EB)
    assert errors.rms_error == pytest.approx(math.sqrt(p - 1) * parse_codec("ebq(eb=1e-3)").rms_error(1.0))


@pytest.mark.parametrize("p", [2, 3, 6])
def test_relative_codec_bounds_follow_the_growing_magnitude(p: int) -> None:
    bf16 = parse_codec("bf16")
    e_total, a = 0.0, 1.0  # the chain: the sender's partial sum is compressed, then the receiver adds its own
    for _ in range(p - 1):
        e = bf16.abs_error(a)
        e_total, a = e_total + e, a + e + 1.0
    errors = check(schedule_of(RING_RS_DOC, p, {"q": "bf16"})).compression
    assert errors is not None and errors.error_bound == pytest.approx(e_total, rel=1e-12)
    scaled = check(schedule_of(RING_RS_DOC, p, {"q": "bf16"}), input_bound=8.0).compression
    assert scaled is not None and scaled.error_bound == pytest.approx(8 * e_total, rel=1e-6)
    absolute = verify(RING_RS_DOC, p, input_bound=8.0).compression  # ebq does not care about magnitudes
    assert absolute is not None and absolute.error_bound == pytest.approx((p - 1) * EB)


@pytest.mark.parametrize("p", [2, 3, 8, 13])
def test_homomorphic_allreduce_is_p_eb(p: int) -> None:
    report = verify(HOMOMORPHIC, p)
    assert report.ok, report.findings
    assert report.compression is not None
    assert (report.compression.lossy_hops, report.compression.error_bound) == (p, pytest.approx(p * EB))


@pytest.mark.parametrize(
    ("name", "hops"),
    [
        ("compressed_ring_allgather_p2p", lambda p: 1),
        ("compressed_ring_allgather", lambda p: 1),
        ("compressed_ring_reduce_scatter", lambda p: p - 1),
        ("compressed_ring_allreduce", lambda p: p),
        ("homomorphic_allreduce", lambda p: p),
        ("compressed_swing_bw", lambda p: p),
    ],
)
def test_examples_report_their_documented_bounds(name: str, hops: object) -> None:
    alg = collc.load(name)
    for p in (2, 3, 8, 12):
        errors = alg.instantiate(p=p).verify().compression
        assert errors is not None
        assert errors.lossy_hops == hops(p)  # type: ignore[operator]
        assert errors.error_bound == pytest.approx(hops(p) * EB)  # type: ignore[operator]


def test_tolerance_is_a_finding_at_the_worst_slot() -> None:
    assert verify(RING_RS_DOC, 8, tolerance=7 * EB * 1.001).ok
    report = verify(RING_RS_DOC, 8, tolerance=1e-3)
    assert [f.code for f in report.findings] == ["tolerance"]
    f = report.findings[0]
    assert f.rank is not None and f.chunk is not None and f.span.line == 7  # the last lossy send on its path
    assert f"rank {f.rank}, chunk {f.chunk}" in f.message and "0.007 exceeds the tolerance 0.001" in f.message
    # a schedule without compression points has no error to bound
    assert collc.load("ring_allreduce").instantiate(p=4).verify(tolerance=0.0).ok


def test_no_compression_no_compression_report() -> None:
    report = collc.load("swing_bw").instantiate(p=8).verify()
    assert report.ok and report.compression is None


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError("collc crashed") from result.exception
    return result.exit_code, result.output


def test_cli_check_text_and_json() -> None:
    code, out = cli("check", "compressed_ring_allreduce", "-p", 8)
    assert code == 0
    assert "at most 8 lossy compression(s) per output element; worst-case error bound 0.008" in out
    code, out = cli("check", "compressed_ring_allreduce", "-p", 8, "--json")
    data = json.loads(out)
    assert (data["lossy_hops"], data["error_bound"]) == (8, pytest.approx(0.008))
    assert data["rms_error"] == pytest.approx(math.sqrt(8) * parse_codec("ebq(eb=1e-3)").rms_error(1.0))
    assert data["compression"]["codecs"] == ["ebq(eb=0.001)"] and data["compression"]["bounded"]
    code, out = cli("check", "swing_bw", "-p", 8, "--json")
    data = json.loads(out)
    assert (data["lossy_hops"], data["error_bound"], data["rms_error"], data["compression"]) == (0, 0.0, 0.0, None)
    code, out = cli("check", "compressed_ring_allgather_p2p", "-p", 6, "--codec", "q=zfp(rate=8)", "--json")
    data = json.loads(out)  # strict JSON: no Infinity
    assert code == 0 and data["error_bound"] is None and data["lossy_hops"] == 5
    assert data["compression"]["unbounded_codecs"] == ["zfp(rate=8)"] and not data["compression"]["bounded"]
    code, out = cli("check", "compressed_ring_allgather_p2p", "-p", 6, "--codec", "q=zfp(rate=8)")
    assert "unbounded" in out and "zfp(rate=8) has no sound error bound" in out


def test_cli_tolerance_exit_codes_and_codec_override() -> None:
    assert cli("check", "compressed_ring_reduce_scatter", "-p", 8, "--tolerance", "0.01")[0] == 0
    code, out = cli("check", "compressed_ring_reduce_scatter", "-p", 8, "--tolerance", "0.001")
    assert code == 1 and "exceeds the tolerance 0.001" in out
    override = ("--codec", "q=ebq(eb=5e-4)", "--tolerance", "0.0035")
    assert cli("check", "compressed_ring_reduce_scatter", "-p", 8, *override)[0] == 0
    finer = ("--codec", "q=ebq(eb=1e-4)", "--tolerance", "0.001")
    code, out = cli("check", "compressed_ring_reduce_scatter", "-p", 8, *finer)
    assert code == 1 and "beyond the 3.225 the codec encodes" in out  # partial sums up to 7, 2^14 - 1 steps
    assert cli("check", "compressed_ring_reduce_scatter", "-p", 8, *finer, "--input-bound", "0.25")[0] == 0
    code, out = cli("check", "compressed_ring_reduce_scatter", "-p", "2..10", "--tolerance", "0.005", "--json")
    data = json.loads(out)
    assert code == 1 and data["smallest_failure"]["params"]["p"] == 7  # 6 hops fit, 7 do not
    assert [r["error_bound"] for r in data["results"]][:2] == [pytest.approx(0.001), pytest.approx(0.002)]
    code, out = cli("check", "compressed_ring_reduce_scatter", "-p", 4, "--codec", "z=fp16")
    assert code == 2 and "unknown codec 'z'" in out
    code, out = cli("check", "compressed_ring_reduce_scatter", "-p", 4, "--codec", "q=ebq(eb=x)")
    assert code == 2 and "bad codec spec" in out
    code, out = cli("check", "compressed_ring_reduce_scatter", "-p", 4, "--codec", "q")
    assert code == 2 and "NAME=SPEC" in out


def test_cli_show_names_the_codecs() -> None:
    code, out = cli("show", "compressed_ring_allgather", "-p", 3)
    assert code == 0 and "codec q = ebq(eb=0.001)" in out.splitlines()[0]
    assert any(line.split()[3:4] == ["compress"] and "[ebq(eb=0.001)]" in line for line in out.splitlines())
    code, out = cli("show", "compressed_ring_allgather", "-p", 3, "--codec", "q=fp16", "--json")
    assert json.loads(out)["codecs"] == {"q": "fp16"}


# --------------------------------------------------------------------------
# The MPI targets run compression points (tests/test_mpi_compression.py runs them)
# --------------------------------------------------------------------------


def test_mpi_targets_compile_compressed_schedules(tmp_path: Path) -> None:
    inst = collc.load("compressed_ring_allreduce").instantiate(p=4)
    with pytest.raises(CollError, match="for an executor without codecs"):
        tables.from_schedule(inst.schedule)  # the tables say how chunks travel only when asked to
    t = tables.from_schedule(inst.schedule, compression=True)
    assert t.codecs == ("ebq(eb=0.001)",)
    (module,) = inst.compile("mpi-py", tmp_path / "py", build=False)
    assert "CODECS = tuple(parse_codec(spec) for spec in ['ebq(eb=0.001)'])" in module.read_text()
    tables.from_schedule(collc.load("ring_allreduce").instantiate(p=4).schedule)  # the others as before


def test_hand_built_ir_with_a_bad_codec_is_a_finding() -> None:
    s = schedule_of(RING_AG_ONCE)
    data = schedule_to_json(s)
    for op in data["steps"][0]["ops"]:
        op["codec"] = "nonsense(1)"
    report = check(schedule_from_json(data))
    assert "bad-codec" in codes(report)
