"""Pre- and postconditions of each collective, and the chunk and element layout.

Every collective is described by two per-chunk tables over the logical chunk
space ``0 .. nchunks``:

``origin[c]``
    who contributes chunk ``c`` initially: ``EVERY`` (-1) when every rank holds
    its own contribution to ``c`` (reducing collectives, allgather of nothing),
    otherwise the one rank that holds it (allgather: the block's owner;
    broadcast: the root; alltoall: the source).

``dest[c]``
    who must hold chunk ``c`` at the end: ``EVERY`` when every rank must,
    otherwise the one rank that must (reduce-scatter: the block's owner;
    reduce: the root; alltoall: the destination).

Precondition: slot (r, c) holds exactly the contribution of r to chunk c when
``origin[c]`` is EVERY or r, and nothing otherwise.
Postcondition: for every slot (r, c) with ``dest[c]`` EVERY or r, the slot holds
every rank's contribution exactly once when ``origin[c]`` is EVERY, or exactly
the contribution of ``origin[c]`` otherwise.

Chunk space (see docs/ir-json.md): allreduce, reduce, broadcast,
reduce-scatter: ``nchunks`` pieces of the vector, reduce-scatter leaving rank
r owning ``[r*k, (r+1)*k)`` with ``k = nchunks / p``; allgather: rank r
contributes ``[r*k, (r+1)*k)``; alltoall: chunk ``(src*p + dst)*k + j``;
gather: rank r contributes ``[r*k, (r+1)*k)`` and the root must hold them all;
scatter: the root holds every chunk and rank r must end with ``[r*k, (r+1)*k)``;
scan and exscan: ``nchunks`` pieces of the vector, every rank contributing to each, where rank r must end
with the reduction of ranks ``0 .. r`` (scan) or ``0 .. r-1`` (exscan, rank 0 exempt): `contributors`;
barrier: an allgather of one flag block per rank, so that no rank leaves before every rank has come.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from collc.ir import Collective

EVERY = -1


def layout_error(collective: Collective, nranks: int, nchunks: int) -> str | None:
    """Why ``nchunks`` does not fit the collective on ``nranks`` ranks, or None."""
    if nranks < 1:
        return f"the number of ranks must be at least 1, got {nranks}"
    if nchunks < 1:
        return f"the number of chunks must be at least 1, got {nchunks}"
    if collective.rank_blocks and nchunks % nranks:
        return (
            f"{collective.value} needs a number of chunks divisible by p "
            f"(each rank owns nchunks/p chunks); got nchunks={nchunks}, p={nranks}"
        )
    if collective is Collective.ALLTOALL and nchunks % (nranks * nranks):
        return (
            f"alltoall needs a number of chunks divisible by p*p "
            f"(chunk (src*p + dst)*k + j); got nchunks={nchunks}, p={nranks}"
        )
    return None


def chunks_per_rank(collective: Collective, nranks: int, nchunks: int) -> int:
    """k: chunks per owned block (allgather, reduce-scatter) or per (src, dst) pair (alltoall)."""
    if collective is Collective.ALLTOALL:
        return nchunks // (nranks * nranks)
    if collective.rank_blocks:
        return nchunks // nranks
    return nchunks


def vector_chunks(collective: Collective, nranks: int, nchunks: int) -> int:
    """The chunks of "the vector" that traffic statistics are fractions of: a rank's send buffer for alltoall
    (``nchunks / p``), the whole buffer otherwise (at least 1)."""
    return max(1, nchunks // nranks if collective is Collective.ALLTOALL else nchunks)


def chunk_origin(collective: Collective, nranks: int, nchunks: int, root: int | None) -> np.ndarray:
    """``origin[c]`` for every chunk (see the module docstring)."""
    k = chunks_per_rank(collective, nranks, nchunks)
    ids = np.arange(nchunks, dtype=np.int64)
    if collective in (Collective.ALLGATHER, Collective.GATHER, Collective.BARRIER):
        return ids // k
    if collective is Collective.ALLTOALL:
        return ids // (nranks * k)
    if collective in (Collective.BROADCAST, Collective.SCATTER):
        return np.full(nchunks, _root(root), dtype=np.int64)
    return np.full(nchunks, EVERY, dtype=np.int64)


def chunk_dest(collective: Collective, nranks: int, nchunks: int, root: int | None) -> np.ndarray:
    """``dest[c]`` for every chunk (see the module docstring)."""
    k = chunks_per_rank(collective, nranks, nchunks)
    ids = np.arange(nchunks, dtype=np.int64)
    if collective in (Collective.REDUCE_SCATTER, Collective.SCATTER):
        return ids // k
    if collective is Collective.ALLTOALL:
        return (ids // k) % nranks
    if collective in (Collective.REDUCE, Collective.GATHER):
        return np.full(nchunks, _root(root), dtype=np.int64)
    return np.full(nchunks, EVERY, dtype=np.int64)


def contributors(collective: Collective, nranks: int, rank: int) -> int:
    """How many ranks, from rank 0 on, a reducing collective's ``rank`` must hold the contributions of at the
    end: all of them, or ``rank + 1`` (scan), or ``rank`` (exscan, where 0 means rank 0 need hold nothing)."""
    prefix = collective.prefix
    return nranks if prefix is None else rank + prefix


def _root(root: int | None) -> int:
    if root is None:
        raise ValueError("this collective needs a root")
    return root


def initially_held(origin: np.ndarray, rank: int) -> np.ndarray:
    """Boolean mask of the chunks ``rank`` holds before the first step."""
    return (origin == EVERY) | (origin == rank)


def finally_required(dest: np.ndarray, rank: int) -> np.ndarray:
    """Boolean mask of the chunks ``rank`` must hold after the last step."""
    return (dest == EVERY) | (dest == rank)


# --------------------------------------------------------------------------
# Elements
# --------------------------------------------------------------------------


def logical_count(collective: Collective, nranks: int, count: int) -> int:
    """Elements in the logical chunk space for a per-rank vector of ``count`` elements.

    ``count`` is the size a user gives: the whole vector for allreduce, reduce,
    broadcast and reduce-scatter (the input), the whole gathered output for
    allgather, and the whole send buffer (``p`` blocks) for alltoall, whose
    logical space holds every rank's send buffer, hence ``p * count``.
    """
    if collective is Collective.ALLTOALL:
        return count * nranks
    return count


def count_error(collective: Collective, nranks: int, count: int) -> str | None:
    if count < 0:
        return f"the element count must be non-negative, got {count}"
    if collective is Collective.ALLTOALL and count % nranks:
        return f"alltoall needs an element count divisible by p={nranks} (equal blocks per destination), got {count}"
    return None


MAX_TOTAL_WEIGHT = 1 << 32
"""The most the chunk weights of a schedule may add up to: offsets then take no more than 64-bit
arithmetic in the C and CUDA runtimes (see `weighted_offset`)."""


def weighted_offset(elems: int, prefix: int, total_weight: int) -> int:
    """Where a chunk starts in a group of ``elems`` elements cut by weights: ``floor(elems * prefix / total_weight)``.

    ``prefix`` is the sum of the weights of the group's chunks before it, ``total_weight`` that of
    all the group's chunks.  This is the one definition every executor follows; the runtimes
    compute it without overflow as ``q * prefix + (r * prefix) // total_weight`` with
    ``elems = q * total_weight + r``, exact since ``r * prefix < total_weight ** 2 <= 2**64``.
    """
    return elems * prefix // total_weight


def chunk_prefix(weights: Sequence[int]) -> tuple[int, ...]:
    """Prefix sums of chunk weights: ``(0, w0, w0 + w1, ...)``, ``len(weights) + 1`` of them."""
    out = [0]
    for w in weights:
        out.append(out[-1] + int(w))
    return tuple(out)


def chunk_offsets(total: int, nchunks: int, groups: int = 1, weights: Sequence[int] | None = None) -> np.ndarray:
    """Element offsets ``off[0..nchunks]`` of the chunks of a ``total``-element space.

    The space is cut into ``groups`` equal groups (``total`` must divide), and
    each group's ``nchunks/groups`` chunks split it so that the first ones hold
    one element more than the rest when it does not divide evenly.  Alltoall
    uses ``groups = p*p``: every (src, dst) block is split on its own.

    With ``weights`` (one int >= 1 per chunk), chunk c of group g instead starts
    ``weighted_offset(total/groups, W(g, c), W(g))`` elements into its group,
    W(g, c) the weights of the group's chunks before c and W(g) all of the group's.
    """
    per_group_chunks = nchunks // groups
    offsets = np.zeros(nchunks + 1, dtype=np.int64)
    if weights is not None:
        return _weighted_offsets(total, nchunks, groups, weights)
    base, extra = divmod(total // groups, per_group_chunks)
    sizes = np.full(per_group_chunks, base, dtype=np.int64)
    sizes[:extra] += 1
    np.cumsum(np.tile(sizes, groups), out=offsets[1:])
    return offsets


def _weighted_offsets(total: int, nchunks: int, groups: int, weights: Sequence[int]) -> np.ndarray:
    """`chunk_offsets` with weights: `weighted_offset` for every chunk, in exact uint64 arithmetic."""
    if len(weights) != nchunks:
        raise ValueError(f"{len(weights)} chunk weights for {nchunks} chunks")
    prefix = np.asarray(chunk_prefix(weights), dtype=np.uint64) if nchunks else np.zeros(1, np.uint64)
    if min(weights, default=1) < 1 or int(prefix[-1]) > MAX_TOTAL_WEIGHT:
        raise ValueError(f"chunk weights must be >= 1 and add up to at most {MAX_TOTAL_WEIGHT}")
    k = nchunks // groups
    elems = total // groups
    starts = prefix[0:nchunks:k]
    before = prefix[:-1].reshape(groups, k) - starts[:, None]  # each chunk's group-relative prefix
    weight = (prefix[k::k] - starts)[:, None]  # each group's total weight
    q, r = np.uint64(elems) // weight, np.uint64(elems) % weight
    within = q * before + (r * before) // weight  # == elems * before // weight, without overflow
    offsets = np.empty(nchunks + 1, dtype=np.int64)
    offsets[:-1] = (within.astype(np.int64) + (np.arange(groups, dtype=np.int64) * elems)[:, None]).ravel()
    offsets[-1] = groups * elems
    return offsets


def element_groups(collective: Collective, nranks: int, count: int) -> int:
    """How many equal groups the element space is cut into before it is cut into chunks.

    Alltoall: every (src, dst) block on its own (p*p groups).  Allgather and
    reduce-scatter: every rank's block on its own (p groups) whenever ``count``
    divides by p, so that rank r's block is elements ``[r*count/p,
    (r+1)*count/p)`` as in MPI; otherwise the whole vector (1 group).  The
    other collectives cut the whole vector.
    """
    if collective is Collective.ALLTOALL:
        return nranks * nranks
    if collective.rank_blocks and count % nranks == 0:
        return nranks
    return 1


def element_offsets(
    collective: Collective, nranks: int, nchunks: int, count: int, weights: Sequence[int] | None = None
) -> np.ndarray:
    """Chunk offsets in the logical element space of a ``count``-element collective (``weights``: the
    schedule's chunk weights, None for chunks as equal as possible)."""
    groups = element_groups(collective, nranks, count)
    return chunk_offsets(logical_count(collective, nranks, count), nchunks, groups, weights)


VCOUNT_COLLECTIVES: tuple[Collective, ...] = (Collective.ALLGATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL)
"""The collectives whose counts may be given at run time (MPI's allgatherv, reduce_scatter, alltoallv)."""


def counts_error(collective: Collective, nranks: int, counts: Sequence[int]) -> str | None:
    """Why ``counts`` cannot cut a ``collective`` on ``nranks`` ranks, or None: p counts (allgather,
    reduce-scatter: rank r's block) or p*p (alltoall: what rank s sends rank d at ``s*p + d``), none negative."""
    if collective not in VCOUNT_COLLECTIVES:
        return (
            f"counts given per rank cut the blocks of an allgather, a reduce_scatter or an alltoall; a "
            f"{collective.value} has no per-rank blocks"
        )
    want = nranks * nranks if collective is Collective.ALLTOALL else nranks
    if len(counts) != want:
        shape = f"p*p = {want} (what rank s sends rank d at s*p + d)" if want != nranks else f"p = {want}"
        return f"a {collective.value} on {nranks} ranks takes {shape} counts, got {len(counts)}"
    negative = [i for i, c in enumerate(counts) if c < 0]
    if negative:
        return f"counts must be non-negative: count {negative[0]} is {counts[negative[0]]}"
    return None


def counts_count(collective: Collective, counts: Sequence[int]) -> int:
    """The element count a call with ``counts`` given at run time stands for, as ``count`` does for the
    equal-block collective (`logical_count`): the sum of the counts, per rank (on average) for an alltoall,
    whose p*p counts are what each rank sends."""
    per = math.isqrt(len(counts)) if collective is Collective.ALLTOALL else 1
    return sum(int(c) for c in counts) // max(1, per)


def counts_offsets(collective: Collective, nranks: int, nchunks: int, counts: Sequence[int]) -> np.ndarray:
    """Chunk offsets in the logical element space of a call whose counts are given at run time.

    A schedule is verified on chunks whatever their sizes, so the equal-block collective's schedule runs any
    counts once its chunks are cut by them: block b (rank b's block, or the (src, dst) block ``b = src*p + dst``
    of an alltoall) holds ``counts[b]`` elements, cut into its ``k`` chunks as equal as possible (the first
    ones one element longer), blocks end to end in order.  This is the cut of every executor (the mpi-c
    runtime's ``collc_vblocks``, mpi-py's ``allgatherv``); ValueError when `counts_error` says why not.
    """
    error = counts_error(collective, nranks, counts)
    if error is not None:
        raise ValueError(error)
    blocks = len(counts)
    k = nchunks // blocks
    base = np.asarray(counts, dtype=np.int64) // k
    extra = np.asarray(counts, dtype=np.int64) % k
    sizes = base[:, None] + (np.arange(k, dtype=np.int64)[None, :] < extra[:, None])
    offsets = np.zeros(blocks * k + 1, dtype=np.int64)
    np.cumsum(sizes.ravel(), out=offsets[1:])
    return offsets


def busbw_factor(collective: Collective, nranks: int) -> float:
    """nccl-tests' bus bandwidth factor: busbw = algbw * factor."""
    p = nranks
    if collective is Collective.ALLREDUCE:
        return 2 * (p - 1) / p
    if collective.rank_blocks or collective is Collective.ALLTOALL:
        return (p - 1) / p
    return 1.0
