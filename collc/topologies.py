"""Topologies from their text form (``ring:16``, ``torus:8x8``, ``dragonfly:h=4,g=8``, ...): the spec parser
over `collc.topology` and `collc.topology_groups`."""

from __future__ import annotations

import re

from collc.topology import FullyConnected, HyperX, Topology, Torus
from collc.topology_groups import parse_dragonfly, parse_fattree

__all__ = ["TOPOLOGY_FORMS", "parse_topology"]


TOPOLOGY_FORMS = (
    "ring:P, torus:AxB[xC...], hyperx:AxB[x...], fattree:P[,radix=K][,oversub=X], full:P, "
    "dragonfly:h=H[,g=G][,a=A][,t=T]"
)

_TEXT = re.compile(r"\s*([A-Za-z_]+)\s*:\s*([^,]*?)\s*(?:,\s*(.*?)\s*)?")


def _parse_size(kind: str, text: str, what: str) -> int:
    if not re.fullmatch(r"\d+", text):
        raise ValueError(f"{kind}: {what} must be a positive integer, got {text!r}")
    value = int(text)
    if value < 1:
        raise ValueError(f"{kind}: {what} must be at least 1, got {value}")
    return value


def _parse_dims(kind: str, text: str) -> tuple[int, ...]:
    if not text:
        raise ValueError(f"{kind}: missing dimensions (e.g. {kind}:8x8)")
    return tuple(_parse_size(kind, part.strip(), "every dimension size") for part in text.split("x"))


def parse_topology(text: str) -> Topology:
    """A topology from its text form: ``ring:16``, ``torus:64x64``, ``torus:4x4x4``,
    ``hyperx:8x8``, ``fattree:256`` (``fattree:256,radix=32``), ``full:16``, and those of
    `collc.topology_groups`: ``fattree:256,radix=32,oversub=4``, ``dragonfly:h=4,g=8``."""
    if not isinstance(text, str):
        raise ValueError(f"a topology is text such as 'torus:8x8', got {text!r}")
    match = _TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"bad topology {text!r}: expected one of {TOPOLOGY_FORMS}")
    kind, body, options = match.group(1).lower(), match.group(2), match.group(3)
    if kind == "dragonfly":  # every part is an option: dragonfly:h=4,g=8
        return parse_dragonfly(body if options is None else f"{body},{options}")
    if options is not None and kind != "fattree":
        raise ValueError(f"{kind}: takes no options, got {options!r} in {text!r}")
    if kind == "ring":
        return Torus((_parse_size(kind, body, "the number of nodes"),))
    if kind == "torus":
        return Torus(_parse_dims(kind, body))
    if kind == "hyperx":
        return HyperX(_parse_dims(kind, body))
    if kind == "full":
        return FullyConnected(_parse_size(kind, body, "the number of nodes"))
    if kind == "fattree":
        return parse_fattree(_parse_size(kind, body, "the number of nodes"), options)
    raise ValueError(f"unknown topology kind {kind!r} in {text!r}: expected one of {TOPOLOGY_FORMS}")
