"""NCCL-style rings, uni- and bi-directional, for every collective kind.

The ring order is a Hamiltonian cycle of the participating GPUs whose consecutive GPUs are
linked directly or through switches only (:mod:`te_ccl.baselines.cycle`). Without one, a
collective that reduces is refused with the reason (a partial relayed through a GPU would
take that GPU's own partial twice); one that only copies follows rank order joined by
shortest paths, relaying through GPUs, and says so in a note. Copied chunks walk
the ring from their source until every destination has them; reduced chunks are summed
along the ring into an owner (spread over the ranks) and, for AllReduce, walk on from it:
the classic (N−1)-step ReduceScatter + AllGather ring. The bi-directional ring halves the
chunks and sends every other one the other way round (single-destination chunks take the
shorter way).
"""

from __future__ import annotations

from dataclasses import replace

from te_ccl.baselines.cycle import NoRing, ring_cycle
from te_ccl.baselines.plan import BaselineTooLarge, ChunkPlan, assemble
from te_ccl.collective.model import Chunk, Collective
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["ring_order", "walk", "ring", "ring_bidir", "doubled"]

MAX_RING_HOPS = 4_000_000
"""Chunk hops (each chunk's walk round the ring, twice for a reduction) a ring is built
with: about 1.5 GB of transfers. A ring AllReduce on 1024 GPUs needs 2 million; a ring
AlltoAll on N GPUs about N³/2, past it from 256 GPUs on (and past the MSCCL runtime's
limits from 64 on)."""


def ring_order(topology: Topology, gpus: list[str]) -> list[str]:
    """A ring through ``gpus`` (:func:`~te_ccl.baselines.cycle.ring_cycle`), else ``gpus``
    as given: an order for baselines that only want neighbours next to each other."""
    try:
        return ring_cycle(topology, gpus)
    except NoRing:
        return list(gpus)


def walk(order: list[str], start: str, step: int, need: set[str]) -> list[str]:
    """Nodes visited going round ``order`` from ``start`` by ``step`` until ``need`` is covered.

    >>> walk(["a", "b", "c", "d"], "c", 1, {"a"})
    ['c', 'd', 'a']
    """
    i, path, need = order.index(start), [start], set(need) - {start}
    while need:
        i = (i + step) % len(order)
        path.append(order[i])
        need.discard(order[i])
    return path


def _chain(path: list[str]) -> dict[str, str]:
    """``path[0] → path[1] → …`` as a node → parent map for a spread (copy) tree."""
    return {path[i + 1]: path[i] for i in range(len(path) - 1)}


def ring_plan(topology: Topology, chunk: Chunk, order: list[str], step: int,
              owner: str | None = None) -> ChunkPlan:
    """One chunk on the ring going ``step`` (+1 or -1); ``owner`` sums a reduced chunk."""
    gpu = topology.gpu
    dests = {gpu(r) for r in chunk.destinations}
    if not chunk.reduce:
        src = gpu(chunk.sources[0])
        return ChunkPlan(chunk.id, src, spread=_chain(walk(order, src, step, dests)))
    assert owner is not None
    back = walk(order, owner, -step, {gpu(r) for r in chunk.sources})
    gather = {back[i]: back[i - 1] for i in range(1, len(back))}
    return ChunkPlan(chunk.id, owner, gather, _chain(walk(order, owner, step, dests)))


def owner_of(topology: Topology, chunk: Chunk) -> str:
    """Where a reduced chunk is summed: its destination, or one spread by chunk id."""
    d = chunk.destinations
    return topology.gpu(d[chunk.id % len(d)])


def doubled(collective: Collective) -> Collective:
    """The collective cut into twice as many chunks (one half per direction or tree)."""
    return replace(collective, chunks_per_rank=2 * collective.chunks_per_rank)


def _ring(topology: Topology, collective: Collective, bidir: bool) -> Schedule:
    gpus = [topology.gpu(r) for r in collective.ranks]
    hops = collective.commodities * (len(gpus) - 1) * (2 if collective.is_reduction else 1)
    if hops > MAX_RING_HOPS:
        raise BaselineTooLarge(f"a ring {collective.kind.value} of {collective.commodities:,} "
                               f"chunks on {len(gpus)} GPUs moves up to {hops:,} chunk hops, "
                               f"more than the {MAX_RING_HOPS:,} a baseline is built with")
    try:
        order, notes = ring_cycle(topology, gpus, both_ways=bidir), ()
    except NoRing as e:
        if collective.is_reduction:
            raise type(e)(f"{e}; a reduction cannot relay through a GPU (teccl compile, "
                          "or baseline hierarchical on boxes, needs no ring)") from None
        order, notes = gpus, (f"{e}; rank order joined by shortest paths instead, relaying "
                              "through GPUs",)
    plans = []
    for chunk in collective.chunks():
        step = -1 if bidir and chunk.id % 2 else 1
        if bidir and len(chunk.destinations) == 1 and not chunk.reduce:
            src, dst = (order.index(topology.gpu(x)) for x in (chunk.sources[0],
                                                                 chunk.destinations[0]))
            step = 1 if (dst - src) % len(order) <= len(order) // 2 else -1
        owner = owner_of(topology, chunk) if chunk.reduce else None
        plans.append(ring_plan(topology, chunk, order, step, owner))
    schedule = assemble("ring-bidir" if bidir else "ring", topology, collective, plans)
    return schedule.with_info(notes=schedule.info.notes + notes) if notes else schedule


def ring(topology: Topology, collective: Collective) -> Schedule:
    """Uni-directional ring (NCCL's ring algorithm)."""
    return _ring(topology, collective, False)


def ring_bidir(topology: Topology, collective: Collective) -> Schedule:
    """Bi-directional ring: twice the chunks, alternate chunks go the other way."""
    return _ring(topology, doubled(collective), True)
