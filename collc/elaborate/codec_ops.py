"""Compression points in elaboration: the codec table of a program, codec overrides, local ops.

A program declares codecs in its header (``codec q = ebq(eb=1e-3)``); statements
name them (``send A to P compress q``, ``compress A with q``).  The IR carries
each codec as its canonical spec (`collc.codecs.Codec.spec`), so that a
schedule means the same without its program.  ``collc check/run/show --codec
q=SPEC`` replaces a declaration (`override_codecs`) before elaboration.

``compress`` and ``decompress`` are local ops: like a send, one outside a
``step:`` block is a step of its own; inside one, they apply at the start of
the step (before its sends read the buffer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache

from collc.codecs import Codec, parse_codec
from collc.diagnostics import CollError
from collc.elaborate.emitter import _Emitter
from collc.frontend import ast
from collc.frontend.program import Program, check_codec_spec
from collc.ir import ChunkSet, OpKind, Span, make_op
from collc.values import Value

__all__ = ["codec", "codec_table", "emit_local", "override_codecs"]


@cache
def codec(spec: str) -> Codec:
    """The configured codec of a spec (an IR op's ``codec``), parsed once per process."""
    return parse_codec(spec)


def codec_table(program: Program) -> dict[str, str]:
    """Declared codec name -> canonical spec (what the IR's ops carry)."""
    return {name: codec(decl.spec).spec for name, decl in program.codecs.items()}


def override_codecs(program: Program, overrides: Mapping[str, str]) -> Program:
    """``program`` with the named codec declarations replaced by other specs (``--codec q=SPEC``)."""
    if not overrides:
        return program
    codecs = dict(program.codecs)
    for name, spec in overrides.items():
        decl = codecs.get(name)
        if decl is None:
            known = ", ".join(sorted(codecs)) or "none"
            raise CollError(f"unknown codec {name!r} for {program.name} (its codecs: {known})", program.header.span)
        check_codec_spec(spec, None)
        codecs[name] = ast.CodecDecl(name, spec, decl.span, decl.spec_span)
    return dataclasses.replace(program, codecs=codecs)


def emit_local(emitter: _Emitter, kind: OpKind, chunks: Value, spec: str | None, span: Span) -> None:
    """A COMPRESS or DECOMPRESS op of the current rank, in the open step or in a step of its own."""
    cset = chunks if type(chunks) is ChunkSet else emitter.chunks(chunks, span)
    rank = emitter.rank
    if cset.bits.bit_length() > emitter.nchunks:
        raise CollError(
            f"chunk {cset.max()} is out of range 0..{emitter.nchunks - 1} (at rank {rank}, {kind.value})", span
        )
    if not cset.bits:
        if emitter.in_step is None:
            emitter.open_step(span)
            emitter.close_step()
        return
    op = make_op(rank, kind, rank, cset, None, span, spec)
    if emitter.lane is not None:
        emitter.lanes[id(op)] = emitter.lane
    if emitter.in_step is not None:
        if emitter.current is None:
            emitter.current = emitter.ops.setdefault(emitter.counter, [])
        emitter.current.append(op)
    else:
        emitter.open_step(span)
        emitter.ops.setdefault(emitter.counter, []).append(op)
        emitter.close_step()
