"""`collc codecs` lists every codec with the properties the codec objects declare."""

from __future__ import annotations

import json

from click.testing import CliRunner

from collc.cli import main
from collc.codecs import CODECS, parse_codec


def test_codecs_table_lists_every_codec() -> None:
    out = CliRunner().invoke(main, ["codecs"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split()[:3] == ["codec", "example", "lossy"]
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(CODECS)


def test_codecs_json_matches_the_codec_objects() -> None:
    out = CliRunner().invoke(main, ["codecs", "--json"])
    assert out.exit_code == 0, out.output
    for row in json.loads(out.output):
        codec = parse_codec(row["spec"])
        assert codec.name == row["name"]
        assert (codec.lossy, codec.idempotent, codec.homomorphic_sum, codec.static_size) == (
            row["lossy"],
            row["idempotent"],
            row["homomorphic_sum"],
            row["static_size"],
        )
    lossless = next(r for r in json.loads(out.output) if r["name"] == "lossless")
    assert lossless["lossy"] is False and lossless["error_model"] == "none"
