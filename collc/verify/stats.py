"""The traffic statistics of a checked schedule (`Stats`), as every checking path counts them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collc.collectives import vector_chunks
from collc.ir import Collective

__all__ = ["Stats", "bandwidth_bound", "traffic_stats"]


@dataclass(frozen=True, slots=True)
class Stats:
    """Traffic statistics (sends merged per (src, dst) pair per step)."""

    steps: int
    messages: int
    max_chunks_sent: int
    max_chunks_received: int
    max_sent_fraction: float
    max_received_fraction: float
    max_fan_out: int
    max_fan_in: int
    fan_out_per_step: tuple[int, ...] = ()  # max distinct peers a rank sends to, step by step
    fan_in_per_step: tuple[int, ...] = ()
    latency_deficiency: float = 0.0  # steps / ceil(log2 p): 1.0 is the latency lower bound
    bandwidth_deficiency: float = 0.0  # max sent fraction / the collective's lower bound
    temp_buffer_steps: int = 0  # (step, rank) pairs where a rank receives a chunk it also sends


def bandwidth_bound(collective: Collective, p: int) -> float:
    """The least fraction of the vector some rank must send (1 for p = 1, to avoid dividing by 0)."""
    if p == 1:
        return 1.0
    if collective is Collective.ALLREDUCE:
        return 2 * (p - 1) / p
    if collective in (Collective.ALLGATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL):
        return (p - 1) / p
    if collective is Collective.SCATTER:  # the root sends every block but its own
        return (p - 1) / p
    if collective is Collective.GATHER:  # every other rank sends its own block
        return 1 / p
    return 1.0


def traffic_stats(
    collective: Collective,
    p: int,
    n: int,
    *,
    steps: int,
    messages: int,
    most_sent: int,
    most_received: int,
    fan_out_steps: Sequence[int],
    fan_in_steps: Sequence[int],
    temp_buffer_steps: int,
) -> Stats:
    """`Stats` from the counts every checking path gathers (chunks, per rank; peers, per step)."""
    vector = vector_chunks(collective, p, n)
    return Stats(
        steps=steps,
        messages=messages,
        max_chunks_sent=most_sent,
        max_chunks_received=most_received,
        max_sent_fraction=most_sent / vector,
        max_received_fraction=most_received / vector,
        max_fan_out=max(fan_out_steps, default=0),
        max_fan_in=max(fan_in_steps, default=0),
        fan_out_per_step=tuple(fan_out_steps),
        fan_in_per_step=tuple(fan_in_steps),
        latency_deficiency=steps / max(1, (p - 1).bit_length()),
        bandwidth_deficiency=(most_sent / vector) / bandwidth_bound(collective, p),
        temp_buffer_steps=temp_buffer_steps,
    )
