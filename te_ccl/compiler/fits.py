"""Whether a collective fits the MSCCL runtime at all, checked before anything is solved:
arithmetic on the chunks a rank receives and, for an AlltoAll, the links they cross."""

from __future__ import annotations

from te_ccl.backends.scale.grid import grid_shape
from te_ccl.backends.scale.grid_alltoall import alltoall_elements
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import TimeLimitReached, check
from te_ccl.errors import RuntimeLimitError
from te_ccl.model.footprint import row_first_file_s, row_needs
from te_ccl.runtime_limits import MSCCL
from te_ccl.topology.model import Topology

__all__ = ["check_loadable", "hop_sum"]


def check_loadable(collective: Collective, topology: Topology | None = None) -> None:
    """Refuse, before solving, a collective no MSCCL algorithm of the runtime can hold:
    each chunk a rank receives is part of one of its steps (at most ``MSCCL.max_count − 1``
    chunks a step), and a rank holds at most ``MSCCL.max_elements`` steps and thread blocks.
    With the ``topology``, also an AlltoAll that no file teccl writes can hold
    (:func:`_check_relays`).

    >>> check_loadable(Collective(CollectiveKind.ALLGATHER, 8 << 20, tuple(range(8)),
    ...                           chunks_per_rank=100_000))
    Traceback (most recent call last):
    ...
    te_ccl.errors.RuntimeLimitError: no MSCCL algorithm of 100000 chunks per rank loads: rank 0 receives 700000 chunks, at least 9860 steps of at most 71 chunks, more than the 4096 elements the runtime reads per rank (use fewer chunks)
    """
    per_step = MSCCL.max_count - 1
    if topology is not None:
        _check_relays(collective, topology)
    if collective.commodities * (collective.nranks - 1) <= per_step * MSCCL.max_elements:
        return  # even one rank receiving every chunk fits
    received = collective.received()
    rank, most = max(received.items(), key=lambda x: (x[1], -x[0]))
    if -(-most // per_step) > MSCCL.max_elements:
        raise RuntimeLimitError(
            f"no MSCCL algorithm of {collective.chunks_per_rank} chunks per rank loads: rank "
            f"{rank} receives {most} chunks, at least {-(-most // per_step)} steps of at most "
            f"{per_step} chunks, more than the {MSCCL.max_elements} elements the runtime reads "
            "per rank (use fewer chunks)")


def _check_relays(collective: Collective, topology: Topology) -> None:
    """Refuse an AlltoAll on a GPU-only topology that no file teccl writes can hold, by
    arithmetic. On a generated mesh or torus (every rank, out of place) the grid AlltoAll
    relays groups of chunks in one step each: it fits where its busiest rank's steps and
    thread blocks do (:func:`~te_ccl.backends.scale.grid_alltoall.alltoall_elements`; where
    its groups overflow, whole rows relayed).
    Elsewhere, and where that does not fit, the lowering gives every chunk a rank receives
    a step of its own (only local copies are merged), so some rank has at least the
    average of the links the chunks cross on their shortest paths (:func:`hop_sum`) as
    steps, beside its thread blocks, within the runtime reader's ``max_elements`` less
    the ``<algo>`` and the ``<gpu>``s."""
    if collective.kind is not CollectiveKind.ALLTOALL or topology.switches:
        return
    n, k = collective.nranks, collective.chunks_per_rank
    room = MSCCL.step_room(n)
    if k * (n - 1) ** 2 <= room:
        return  # no pair is more than n - 1 links apart: fits without measuring
    shape = grid_shape(topology)
    grid = ""
    if shape is not None and not collective.inplace and collective.ranks == tuple(range(n)):
        try:  # counted on the row AlltoAll's plan, where the groups' overflow
            need, rank = alltoall_elements(*shape, k)
        except TimeLimitReached as e:  # say what the file that plan starts needs
            rows = row_first_file_s(topology, collective)
            if rows is None:
                raise
            raise TimeLimitReached(f"{e}; {row_needs(rows[0])}") from None
        if need <= MSCCL.max_elements:
            return
        grid = (f"; the grid AlltoAll, which relays groups of chunks in one step each, "
                f"needs {need:,} elements on rank position {rank}")
    hops = k * hop_sum(topology, collective.ranks, enough=(room + 1) * n // k)
    if -(-hops // n) > room:
        raise RuntimeLimitError(
            f"no MSCCL file teccl writes holds this AlltoAll of {n} ranks: its chunks cross "
            f"at least {hops:,} links (shortest paths), so some rank receives at least "
            f"{-(-hops // n):,} chunks, each a step of its own in a file of one step per chunk "
            f"and link, more than the {room:,} steps the runtime's reader holds per rank "
            f"({MSCCL.max_elements} elements less the <algo>, the {n} <gpu>s and a thread "
            f"block){grid}; a topology with fewer hops between GPUs (or fewer ranks) fits")


def hop_sum(topology: Topology, ranks: tuple[int, ...], enough: int | None = None) -> int:
    """The sum over ordered pairs of ``ranks`` (GPU indices) of the fewest links from one
    to the other, on a GPU-only topology: one breadth-first search from every rank at
    once, a level per pass over the links (a second at 1024 GPUs), or the partial sum once
    it exceeds ``enough``. Unreachable pairs count 0 (the input checks refuse them first).

    >>> from te_ccl.topology.generators import mesh
    >>> hop_sum(mesh([2, 2], 1e9), (0, 1, 2, 3))  # 8 neighbour pairs, 4 diagonal ones
    16
    """
    import numpy as np

    index = {g: i for i, g in enumerate(topology.gpus)}
    src = np.array([index[link.src] for link in topology.links], dtype=np.int64)
    dst = np.array([index[link.dst] for link in topology.links], dtype=np.int64)
    order = np.argsort(dst, kind="stable")
    src, dst = src[order], dst[order]
    starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]]) if len(dst) else dst
    rows = np.array(ranks, dtype=np.int64)
    reached = np.zeros((len(rows), len(index)), dtype=bool)
    reached[np.arange(len(rows)), rows] = True
    frontier, counted = reached.copy(), np.zeros(len(index), dtype=bool)
    counted[rows] = True
    total, hops = 0, 0
    while len(starts) and frontier.any():
        check("measuring the AlltoAll's hops")
        hops += 1
        hit = np.zeros_like(frontier)
        hit[:, dst[starts]] = np.logical_or.reduceat(frontier[:, src], starts, axis=1)
        frontier = hit & ~reached
        reached |= frontier
        total += hops * int(frontier[:, counted].sum())
        if enough is not None and total > enough:
            break
    return total
