"""Whether every rank of an allreduce ends with the same bits of a floating-point sum or product.

Floating-point addition and multiplication are commutative (``a + b`` and ``b + a`` round alike) but not
associative: a rank's result is the tree of pairwise combinations its schedule built, and two ranks agree bit
for bit when their trees are equal up to swapping the two sides of a combination. A rank that passes on a
result another rank reduced (a ring's allgather) holds that rank's tree; ranks that each combine the whole
vector (latency-optimal schedules) may build different trees.

`mixed_orders` follows the step semantics of the per-op checker and the executors (sends read the state at
the start of the step; copies land, then each reduce combines the incoming tree with the held one) with every
slot holding its tree, hash-consed so that equal trees have equal ids; an exact comparison, no sampling. A
slot that reduces several messages in one step combines them in the order they arrive, which no schedule
fixes: its tree is new, equal only to the copies made of it.
"""

from __future__ import annotations

from collc.ir import Action, Collective, OpKind, Schedule

__all__ = ["mixed_orders"]


def mixed_orders(schedule: Schedule) -> str | None:
    """None when every rank that ends with a chunk's reduced result holds the same tree of combinations for
    it (and for collectives other than allreduce, where one rank holds each result); otherwise why not, naming
    a chunk and the ranks. A schedule with compression points is not exact anyway and is not examined."""
    if schedule.collective is not Collective.ALLREDUCE or schedule.codecs:
        return None
    p, n = schedule.nranks, schedule.nchunks
    nodes: dict[tuple[int, int], int] = {}
    state = [[r] * n for r in range(p)]  # leaf r: rank r's contribution (ids 0 .. p-1)
    next_id = p
    for step in schedule.steps:
        if any(op.kind.local for op in step.ops):
            return None  # compression points
        before = [list(row) for row in state]
        copies: dict[tuple[int, int], int] = {}
        reduces: dict[tuple[int, int], list[int]] = {}
        for op in step.ops:
            if op.kind is not OpKind.RECV:
                continue
            for c in op.chunks:
                incoming = before[op.peer][c]
                if op.action is Action.REDUCE:
                    reduces.setdefault((op.rank, c), []).append(incoming)
                else:
                    copies[(op.rank, c)] = incoming
        for (r, c), tree in copies.items():
            state[r][c] = tree
        for (r, c), trees in reduces.items():
            if len(trees) > 1:  # combined in the order they arrive: a tree of its own, equal only to its copies
                state[r][c] = next_id
                next_id += 1
                continue
            held, other = state[r][c], trees[0]
            key = (held, other) if held <= other else (other, held)
            tree = nodes.get(key)
            if tree is None:
                tree = nodes[key] = next_id
                next_id += 1
            state[r][c] = tree
    for c in range(n):
        first = state[0][c]
        for r in range(1, p):
            if state[r][c] != first:
                return (
                    f"ranks 0 and {r} combine the contributions to chunk {c} in different orders, so a "
                    "floating-point sum or product may differ between them in the last bits"
                )
    return None
