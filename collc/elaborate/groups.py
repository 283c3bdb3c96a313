"""Sub-groups and lanes: ``do proc(...) on GROUP`` and ``lane J:`` blocks.

``do proc(args) on GROUP`` runs a procedure on a group of ranks renumbered
0 .. len(GROUP) - 1: inside it ``rank`` is the current rank's position in the
group and ``p`` the group's size, so that a library procedure written for all
ranks (a ring, Swing) runs unchanged on a node or across nodes.  The procedure
is compiled by a compiler of its own for each group size (functions that use
``p`` are memoised per size), and the ops it emits are renumbered back: their
rank and peer, group positions, become the members' ranks.

``lane J:`` inside a step puts the ops of its body in lane J (`collc.ir.Step.lanes`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from collc.diagnostics import CollError
from collc.elaborate.emitter import _Emitter
from collc.ir import Span
from collc.values import LangError, Value, a_type, iterate

MAX_LANE = 1 << 20


def group_members(group: Value, emitter: _Emitter, span: Span) -> tuple[int, ...]:
    """The ranks of a group, in order: distinct ranks of the current numbering, the current rank among them."""
    members: list[int] = []
    try:
        values = list(iterate(group, "group"))
    except LangError as err:
        raise CollError(f"the group of a 'do ... on' must be a set, range or tuple of ranks: {err}", span) from None
    seen: set[int] = set()
    for v in values:
        if type(v) is not int:
            raise CollError(f"a group holds ranks (ints), not {a_type(v)}", span)
        if not 0 <= v < emitter.nranks:
            where = f"(at rank {emitter.rank})"
            raise CollError(f"rank {v} of the group is out of range 0..{emitter.nranks - 1} {where}", span)
        if v in seen:
            raise CollError(f"rank {v} is in the group twice (at rank {emitter.rank})", span)
        seen.add(v)
        members.append(v)
    if emitter.rank not in seen:
        shown = _show(members)
        raise CollError(f"rank {emitter.rank} runs 'do ... on' a group it is not in: {shown}", span)
    return tuple(members)


def _show(members: list[int] | tuple[int, ...]) -> str:
    text = ", ".join(map(str, members[:12]))
    return "(" + text + (", ..." if len(members) > 12 else "") + ")"


def run_on(compiler: Any, name: str, args: tuple[Value, ...], group: Value, span: Span, group_span: Span) -> None:
    """``do name(args) on group`` for the current rank (``compiler``: the `_Compiler` running it)."""
    emitter = compiler.emitter
    members = group_members(group, emitter, group_span)
    sub = compiler.group_compiler(len(members))
    rank, nranks, start = emitter.rank, emitter.nranks, emitter.counter
    marks = {c: len(ops) for c, ops in emitter.ops.items() if c >= start}
    emitter.rank, emitter.nranks = members.index(rank), len(members)
    try:
        sub.procs[name](args, span)
    except CollError as err:
        note = f"in {name} on the group {_show(members)}, where rank {rank} is rank {emitter.rank} of {len(members)}"
        raise CollError(err.message, err.span, (*err.notes, note)) from None
    finally:
        emitter.rank, emitter.nranks = rank, nranks
    lanes = emitter.lanes
    for counter in range(start, emitter.counter + 1):
        ops = emitter.ops.get(counter)
        if ops is None:
            continue
        for i in range(marks.get(counter, 0), len(ops)):
            op = ops[i]
            new = dataclasses.replace(op, rank=members[op.rank], peer=members[op.peer])
            if lanes:
                lane = lanes.pop(id(op), None)
                if lane is not None:
                    lanes[id(new)] = lane
            ops[i] = new


def enter_lane(emitter: _Emitter, lane: Value, span: Span) -> None:
    """Open lane ``lane`` in the current step (the statement after the lane's body closes it)."""
    if emitter.in_step is None:
        raise CollError("a lane is part of a step: put it inside a 'step:' block or a 'for step' loop", span)
    if emitter.lane is not None:
        raise CollError(f"lanes do not nest (lane {emitter.lane} is open)", span)
    if type(lane) is not int or not 0 <= lane < MAX_LANE:
        shown = str(lane) if type(lane) is int else a_type(lane)
        raise CollError(f"a lane is an int in 0..{MAX_LANE - 1}, got {shown}", span)
    emitter.lane = lane
