"""The bytes a schedule moves, in all and over a topology's global links (docs/simulate.md).

`collc.simulate.traffic` routes every step of a schedule once, as `collc.simulate.simulate` does, and sums per
vector size: the bytes of all messages, the bytes carried summed over the links, and the same over
the topology's *global* links (`collc.topology_groups.global_link_mask`: a Dragonfly's links between
groups, an oversubscribed fat tree's links above the leaf switches).  ``simulate(...,
traffic=True)`` puts the same figures on every `collc.simulate.SimRow`.  `count_traffic` sums them from a
schedule prepared by `collc.simulate._prepare` (``prep``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Traffic", "count_traffic"]


@dataclass(frozen=True)
class Traffic:
    """The bytes a schedule moves at one vector size, each step counted as often as it stands for.

    ``sent_bytes``: the bytes of all its messages (as they travel: compressed where they are).
    ``link_bytes``: the bytes carried summed over all links (a message counts once per link it
    crosses, by its share where routing spreads it).  ``global_bytes``: the same over the
    topology's global links only; None on a topology without global links."""

    size_bytes: int
    sent_bytes: float
    link_bytes: float
    global_bytes: float | None

    @property
    def global_share(self) -> float | None:
        """Global-link bytes per byte sent: on a Dragonfly with minimal routing, the share of the
        bytes sent that cross between groups; on a fat tree a message between leaves whose lowest
        common switch is at level l counts 2(l - 1) times (up and down).  None without global links."""
        if self.global_bytes is None:
            return None
        return self.global_bytes / self.sent_bytes if self.sent_bytes > 0 else 0.0


def count_traffic(prep: Any, kind_bytes: np.ndarray, weights: np.ndarray, size: int) -> Traffic:
    """The `Traffic` of a schedule prepared with traffic (`collc.simulate._prepare`) when a message of
    kind k weighs ``kind_bytes[k]``, step i counted ``weights[i]`` times."""
    sent = spread = glob = 0.0
    for wi, plan in zip(weights, prep.plans, strict=True):
        if wi == 0 or plan.msg_kind is None or plan.msg_kind.size == 0:
            continue
        assert plan.span is not None
        sent += wi * float(kind_bytes[plan.msg_kind].sum())
        load = plan.weight * kind_bytes[plan.kind]
        spread += wi * float(load @ plan.span)
        if plan.global_span is not None:
            glob += wi * float(load @ plan.global_span)
    return Traffic(size, sent, spread, glob if prep.has_global else None)
