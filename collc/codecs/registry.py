"""The codec registry: names to codec classes, the spec parser, the ``collc codecs`` table.

A spec is a codec name, optionally with parameters, keyword or positional::

    bf16    lossless    ebq(eb=1e-3)    ebq(1e-3)    fwq(bits=4, block=64)    zfp(rate=8)

``parse_codec(codec.spec) == codec`` for every codec.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from collc.codecs.base import Codec
from collc.codecs.casts import Bf16, Fp16
from collc.codecs.ebq import Ebq
from collc.codecs.fwq import Fwq
from collc.codecs.grid import Hq
from collc.codecs.lossless import Lossless
from collc.codecs.zfp import Zfp
from collc.diagnostics import shorten

__all__ = ["CODECS", "describe", "parse_codec"]

CODECS: dict[str, type[Codec]] = {cls.name: cls for cls in (Ebq, Fwq, Hq, Fp16, Bf16, Lossless, Zfp)}

_SPEC = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*", re.DOTALL)
_ARG = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*=)?\s*(\S(?:.*\S)?)?\s*", re.DOTALL)
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INT_LIMIT = 1 << 63  # integer parameters are below this in magnitude (no codec has a use for more)


def parse_codec(spec: str | Codec) -> Codec:
    """The codec a spec names, configured; a ValueError says what is wrong with a bad spec."""
    if isinstance(spec, Codec):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"a codec spec is a string such as 'ebq(eb=1e-3)', got {spec!r}")
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(f"bad codec spec {shorten(spec)!r}: expected NAME or NAME(key=value, ...)")
    name, inner = match.group(1), match.group(2)
    cls = CODECS.get(name.lower())
    if cls is None:
        raise ValueError(f"unknown codec {shorten(name)!r} (known: {', '.join(sorted(CODECS))})")
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    kwargs = _arguments(cls, fields, inner)
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in kwargs and _required(f)]  # type: ignore[arg-type]
    if missing:
        raise ValueError(f"{cls.name}: missing parameter {missing[0]!r} (e.g. {cls.example})")
    return cls(**kwargs)


def describe() -> list[dict[str, Any]]:
    """One row per codec, for ``collc codecs``: name, spec example and declared properties."""
    rows = []
    for name, cls in CODECS.items():
        rows.append(
            {
                "name": name,
                "spec": cls.example,
                "lossy": cls.lossy,
                "error_model": cls.error_model,
                "idempotent": cls.idempotent,
                "homomorphic_sum": cls.homomorphic_sum,
                "static_size": cls.static_size,
                "cuda": cls.cuda_kernels,
                "available": parse_codec(cls.example).available,
                "summary": cls.summary,
            }
        )
    return rows


def _arguments(cls: type[Codec], fields: list[str], inner: str | None) -> dict[str, int | float]:
    if inner is None or not inner.strip():
        return {}
    if not fields:
        raise ValueError(f"{cls.name} takes no parameters (spec {cls.example!r})")
    kwargs: dict[str, int | float] = {}
    for position, part in enumerate(inner.split(",")):
        arg = _ARG.fullmatch(part)
        key, text = (arg.group(1), arg.group(2)) if arg else (None, None)
        if text is None:
            raise ValueError(f"{cls.name}: empty parameter in {shorten(inner)!r}")
        if key is None:
            if kwargs.keys() - set(fields[:position]):
                raise ValueError(f"{cls.name}: a positional parameter follows a keyword one in {shorten(inner)!r}")
            if position >= len(fields):
                raise ValueError(f"{cls.name} takes {len(fields)} parameter(s) ({', '.join(fields)})")
            key = fields[position]
        if key not in fields:
            raise ValueError(f"{cls.name}: unknown parameter {shorten(key)!r} (parameters: {', '.join(fields)})")
        if key in kwargs:
            raise ValueError(f"{cls.name}: parameter {key!r} given twice")
        kwargs[key] = _number(cls.name, key, text)
    return kwargs


def _number(codec: str, key: str, text: str) -> int | float:
    """The value of a parameter's text; a number too large for any codec is an error here (Python would
    turn it into an overflow, or an int of thousands of digits, in the codec's own checks)."""
    if _INT.fullmatch(text):
        digits = text.lstrip("+-").lstrip("0")
        if len(digits) > 19 or int(text) <= -_INT_LIMIT or int(text) >= _INT_LIMIT:
            raise ValueError(f"{codec}: {key}={shorten(text)} is out of range (integers are below 2^63)")
        return int(text)
    if _FLOAT.fullmatch(text):
        value = float(text)
        if math.isinf(value):
            raise ValueError(f"{codec}: {key}={shorten(text)} is out of range (too large for a double)")
        return value
    raise ValueError(f"{codec}: {key} must be a number, got {shorten(text)!r}")


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
