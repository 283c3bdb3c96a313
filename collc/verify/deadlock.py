"""Deadlock freedom of a schedule under an execution model.

Two models (docs/verifier.md):

``step`` (what collc's executors do)
    Ranks run the steps in order.  In a step a rank posts all its receives
    and sends without blocking, then waits for all of them; a message carries
    its step index as the tag.  A rank blocks forever exactly when, in some
    step, it waits for a message its peer never sends in that step (or its
    peer waits for one it never receives).  Ranks whose programs have
    different lengths are fine as long as everything matches.

``blocking``
    Every rank runs its operations in program order with *blocking*
    rendezvous semantics, like ``MPI_Ssend`` and ``MPI_Recv``: a send
    completes only when the peer is at the matching receive.  A send directly
    followed by a receive from the same peer in the same step (what
    ``exchange`` writes) is one ``MPI_Sendrecv``, whose halves complete in any
    order.  A program that is correct under ``step`` can deadlock here (a ring
    where every rank sends first); the checker reports the wait-for cycle.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from collc.ir import OpKind, Schedule, Span

MODELS = ("step", "blocking")


@dataclass(frozen=True, slots=True)
class Wait:
    """One blocked rank: what it is stuck on."""

    rank: int
    step: int
    kind: str  # send | recv | sendrecv | done
    peer: int | None
    span: Span | None


@dataclass(frozen=True, slots=True)
class DeadlockReport:
    model: str
    ok: bool
    message: str
    cycle: tuple[Wait, ...]  # the wait-for cycle, or the chain ending at a rank that can never help
    blocked: int  # ranks that never finish


@dataclass(slots=True)
class _Action:
    """A blocking operation of one rank: one send, one receive, or a sendrecv (both halves)."""

    step: int
    send: tuple[int, int] | None  # (peer, chunk bits)
    recv: tuple[int, int] | None
    span: Span
    send_done: bool = False
    recv_done: bool = False

    @property
    def done(self) -> bool:
        return (self.send is None or self.send_done) and (self.recv is None or self.recv_done)

    def kind(self) -> str:
        return "sendrecv" if self.send and self.recv else "send" if self.send else "recv"

    def peer(self) -> int:
        half = self.send or self.recv
        assert half is not None
        return half[0]


def _programs(schedule: Schedule) -> list[list[_Action]]:
    progs: list[list[_Action]] = [[] for _ in range(schedule.nranks)]
    for step in schedule.steps:
        ops = step.ops
        i = 0
        while i < len(ops):
            op = ops[i]
            if not 0 <= op.rank < schedule.nranks or op.kind.local:  # local ops never block
                i += 1
                continue
            nxt = ops[i + 1] if i + 1 < len(ops) else None
            half = (op.peer, op.chunks.bits)
            if (
                op.kind is OpKind.SEND
                and nxt is not None
                and nxt.rank == op.rank
                and nxt.kind is OpKind.RECV
                and nxt.peer == op.peer
            ):
                progs[op.rank].append(_Action(step.index, half, (nxt.peer, nxt.chunks.bits), op.span))
                i += 2
                continue
            if op.kind is OpKind.SEND:
                progs[op.rank].append(_Action(step.index, half, None, op.span))
            else:
                progs[op.rank].append(_Action(step.index, None, half, op.span))
            i += 1
    return progs


def check_blocking(schedule: Schedule) -> DeadlockReport:
    """Simulate rendezvous execution in program order; report the wait-for cycle if it sticks."""
    p = schedule.nranks
    progs = _programs(schedule)
    pos = [0] * p
    queue = deque(r for r in range(p) if progs[r])
    while queue:
        a = queue.popleft()
        if pos[a] >= len(progs[a]):
            continue
        act = progs[a][pos[a]]
        progressed = False
        for sending in (True, False):
            half = act.send if sending else act.recv
            if half is None or (act.send_done if sending else act.recv_done):
                continue
            b, bits = half
            other = progs[b][pos[b]] if 0 <= b < p and pos[b] < len(progs[b]) else None
            if other is None or other.step != act.step:
                continue
            if sending and other.recv == (a, bits) and not other.recv_done:
                act.send_done = other.recv_done = True
            elif not sending and other.send == (a, bits) and not other.send_done:
                act.recv_done = other.send_done = True
            else:
                continue
            progressed = True
            _advance(b, progs, pos, queue)
        if progressed:
            _advance(a, progs, pos, queue)
    blocked = [r for r in range(p) if pos[r] < len(progs[r])]
    if not blocked:
        return DeadlockReport("blocking", True, "no deadlock: every rank runs to the end", (), 0)
    chain = _wait_chain(blocked[0], progs, pos)
    return DeadlockReport("blocking", False, _describe(chain, len(blocked)), tuple(chain), len(blocked))


def _advance(r: int, progs: list[list[_Action]], pos: list[int], queue: deque[int]) -> None:
    moved = False
    while pos[r] < len(progs[r]) and progs[r][pos[r]].done:
        pos[r] += 1
        moved = True
    if moved or pos[r] < len(progs[r]):
        queue.append(r)


def _wait_chain(start: int, progs: list[list[_Action]], pos: list[int]) -> list[Wait]:
    """Follow who-waits-for-whom from ``start`` until a rank repeats (a cycle) or one has finished."""
    chain: list[Wait] = []
    seen: dict[int, int] = {}
    r = start
    while r not in seen:
        seen[r] = len(chain)
        if not 0 <= r < len(progs) or pos[r] >= len(progs[r]):
            chain.append(Wait(r, -1, "done", None, None))
            return chain
        act = progs[r][pos[r]]
        pending = act.send if act.send is not None and not act.send_done else act.recv
        assert pending is not None
        chain.append(Wait(r, act.step, act.kind(), pending[0], act.span))
        r = pending[0]
    return chain[seen[r] :]


def _describe(chain: list[Wait], blocked: int) -> str:
    parts = []
    for w in chain:
        if w.kind == "done":
            parts.append(f"rank {w.rank}, which has finished its program")
        else:
            where = f" (line {w.span.line})" if w.span is not None else ""
            parts.append(f"rank {w.rank} blocked in {w.kind} with rank {w.peer} at step {w.step}{where}")
    closing = " -> back to the first" if chain and chain[-1].kind != "done" else ""
    return f"deadlock under blocking execution ({blocked} ranks stuck): " + " -> ".join(parts) + closing


def check_step(schedule: Schedule, unmatched: int) -> DeadlockReport:
    """Under the step model a deadlock is exactly an unmatched operation (found by the checker)."""
    if unmatched == 0:
        return DeadlockReport("step", True, "no deadlock: every operation of every step is matched", (), 0)
    return DeadlockReport(
        "step",
        False,
        f"deadlock under step execution: {unmatched} operation(s) wait for a partner that never comes "
        "(see the unmatched-send / unmatched-recv findings)",
        (),
        unmatched,
    )
