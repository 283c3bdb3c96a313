"""`collc check` on schedules that compress: the traffic raw and on the wire.

The reference is worked out here from `collc show --json` alone: a rank's slots are
raw until a `compress` op (or a receive of a compressed payload) makes them
compressed, and a send travels compressed when it names a codec or reads a compressed
slot; a compressed chunk weighs the codec's declared worst-case size of a large float32
message over its raw size.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from test_cli import EXAMPLES, cli, cli_json

from collc.codecs import parse_codec

COMPRESSION = sorted((EXAMPLES / "compression").glob("*.coll"))
LARGE = 1 << 20  # elements of a large message


def declared_ratio(spec: str) -> float:
    return parse_codec(spec).max_compressed_bytes(LARGE) / (4 * LARGE)


def wire_traffic(ir: dict[str, Any]) -> tuple[list[float], list[float], list[int]]:
    """Per rank: chunks sent on the wire (compressed ones weighted), received likewise, and sent raw."""
    p, n = ir["nranks"], ir["nchunks"]
    codec_of: list[list[str | None]] = [[None] * n for _ in range(p)]  # the slot's codec, None: raw
    sent, received, raw = [0.0] * p, [0.0] * p, [0] * p
    for step in ir["steps"]:
        for op in step["ops"]:  # local ops apply first
            if op["kind"] in ("compress", "decompress"):
                for c in op["chunks"]:
                    codec_of[op["rank"]][c] = op.get("codec") if op["kind"] == "compress" else None
        before = [row[:] for row in codec_of]  # every send reads the buffer as it is now
        pair: dict[tuple[int, int], dict[int, str | None]] = defaultdict(dict)
        for op in step["ops"]:
            if op["kind"] == "send":
                for c in op["chunks"]:
                    pair[op["rank"], op["peer"]].setdefault(c, op.get("codec") or before[op["rank"]][c])
        for (src, dst), chunks in pair.items():
            weight = sum(1.0 if codec is None else declared_ratio(codec) for codec in chunks.values())
            sent[src] += weight
            received[dst] += weight
            raw[src] += len(chunks)
        for op in step["ops"]:  # receives land: a forwarded payload stays compressed, a wire one arrives raw
            if op["kind"] == "recv":
                for c in op["chunks"]:
                    codec = None if op.get("codec") else before[op["peer"]][c]
                    if op["action"] == "copy" or codec is not None:
                        codec_of[op["rank"]][c] = codec
    return sent, received, raw


def vector(ir: dict[str, Any]) -> int:
    return max(1, ir["nchunks"] // ir["nranks"] if ir["collective"] == "alltoall" else ir["nchunks"])


CASES = [(path, p, codec) for path in COMPRESSION for p in (4, 6) for codec in (None, "q=fp16")]


@pytest.mark.parametrize(
    ("path", "p", "codec"), CASES, ids=[f"{c[0].stem}-p{c[1]}-{c[2] or 'declared'}" for c in CASES]
)
def test_check_reports_raw_and_on_wire_traffic(path: Path, p: int, codec: str | None) -> None:
    if codec is not None and "homomorphic" in path.name:
        codec = None  # a homomorphic reduce needs its homomorphic codec
    extra = ("--codec", codec) if codec else ()
    ir = cli_json("show", path, "-p", p, *extra)
    report = cli_json("check", path, "-p", p, *extra)
    assert report["ok"], report["findings"]
    sent, received, raw = wire_traffic(ir)
    whole = vector(ir)
    assert report["stats"]["max_sent_fraction"] == pytest.approx(max(raw) / whole)
    wire = report["compression"]["wire"]
    assert wire["max_sent_fraction"] == pytest.approx(max(sent) / whole)
    assert wire["max_received_fraction"] == pytest.approx(max(received) / whole)
    assert wire["max_sent_fraction"] < report["stats"]["max_sent_fraction"] or "homomorphic" in path.name
    text = cli("check", path, "-p", p, *extra).stdout
    raw_text = f"{report['stats']['max_sent_fraction']:.4g} of the vector sent"
    wire_text = f"{wire['max_sent_fraction']:.4g} and {wire['max_received_fraction']:.4g} on the wire"
    assert raw_text in text and wire_text in text, text


def test_declared_ratios_of_common_codecs() -> None:
    """The weights, by hand: ebq's sign bitmap and 14 bit-planes per block of 32, fp16's 2 bytes, hq's int32."""
    assert declared_ratio("ebq(eb=1e-3)") == pytest.approx((1 + 32 * 15 / 8) / 128)
    assert declared_ratio("fp16") == 0.5 and declared_ratio("bf16") == 0.5
    assert declared_ratio("hq(eb=1e-3)") == 1.0


def test_collective_level_compression_forwards_compressed_bytes() -> None:
    """The ring allgather compresses each block once and forwards it: every chunk on the wire is compressed,
    though no send names a codec."""
    ir = cli_json("show", "compressed_ring_allgather", "-p", 8)
    assert not any(op.get("codec") for step in ir["steps"] for op in step["ops"] if op["kind"] == "send")
    report = cli_json("check", "compressed_ring_allgather", "-p", 8)
    assert report["stats"]["max_sent_fraction"] == pytest.approx(7 / 8)
    assert report["compression"]["wire"]["max_sent_fraction"] == pytest.approx(7 / 8 * 61 / 128)


def test_a_schedule_without_compression_has_one_traffic_figure() -> None:
    out = cli("check", "ring_allreduce", "-p", 8)
    assert "of the vector sent and 1.75 received;" in out.stdout and "on the wire" not in out.stdout
    assert cli_json("check", "ring_allreduce", "-p", 8)["compression"] is None
