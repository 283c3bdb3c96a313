"""Ranks on nodes, for pictures: where each node's ranks are drawn and which level a message crosses.

A `collc.hierarchy.Hierarchical` topology puts G ranks on each of N nodes (block or cyclic
placement, `Hierarchical.place`).  A message between two ranks of one node crosses the node's
fabric (``intra``: NVLink or PCIe); one between nodes leaves through a NIC into the network
(``inter``).  `node_positions` draws the nodes round a circle, each node's ranks side by side in
the order of their local index, ``NODE_GAP`` empty rank places between two nodes.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from collc.hierarchy import Hierarchical

Level = Literal["intra", "inter"]
LEVELS: tuple[Level, ...] = ("intra", "inter")
LEVEL_COLORS: dict[str, str] = {"intra": "#1f77b4", "inter": "#d62728"}
"""The colour of each level in pictures: blue inside a node, red between nodes."""
NODE_GAP = 1.0
"""Empty rank places on the circle between the last rank of a node and the first of the next."""


def hop_level(hierarchy: Hierarchical, sender: int, receiver: int) -> Level:
    """``intra`` when both ranks live on one node, else ``inter``."""
    nodes, _ = hierarchy.place(np.array([sender, receiver]))
    return "intra" if nodes[0] == nodes[1] else "inter"


def level_label(hierarchy: Hierarchical, level: str) -> str:
    """The legend's words for a level: ``within a node (nvlink)``, ``between nodes (NIC, network)``."""
    if level == "intra":
        return f"within a node ({hierarchy.node.fabric})"
    return "between nodes (NIC, network)"


def node_members(hierarchy: Hierarchical) -> list[list[int]]:
    """The ranks of every node, in the order of their local index."""
    ranks = np.arange(hierarchy.nodes)
    node, local = hierarchy.place(ranks)
    out: list[list[int]] = [[] for _ in range(hierarchy.machines)]
    for r in ranks[np.lexsort((local, node))].tolist():
        out[int(node[r])].append(r)
    return out


def rank_slots(hierarchy: Hierarchical) -> tuple[np.ndarray, float]:
    """The place of every rank round the circle, in rank places, and the number of places (the gaps
    between nodes included)."""
    node, local = hierarchy.place(np.arange(hierarchy.nodes))
    per = hierarchy.node.ranks + NODE_GAP
    return node * per + local, hierarchy.machines * per


def slot_angle(slot: np.ndarray | float, total: float) -> np.ndarray:
    """The angle (radians) of a place on the circle: place 0 at the top, clockwise."""
    return math.pi / 2 - 2 * math.pi * np.asarray(slot, dtype=float) / total


def node_positions(hierarchy: Hierarchical) -> np.ndarray:
    """Where each rank is drawn: an (nranks, 2) array of x, y on the unit circle, grouped by node."""
    slots, total = rank_slots(hierarchy)
    angle = slot_angle(slots, total)
    return np.stack([np.cos(angle), np.sin(angle)], axis=1)


def check_fit(hierarchy: Hierarchical, nranks: int) -> None:
    """A ValueError when the nodes do not hold exactly the schedule's ranks."""
    if hierarchy.nodes != nranks:
        raise ValueError(
            f"{hierarchy.spec}: {hierarchy.machines} nodes of {hierarchy.node.ranks} ranks hold {hierarchy.nodes} "
            f"ranks, but the schedule runs on {nranks}"
        )
