"""Chunk-count arithmetic for ``--chunks auto``: what each chunking can at best achieve.

Every chunk a GPU must receive crosses one of its in-links, and a link carries one chunk
at a time (the simulator's rule and the epoch model's): ``n`` chunks of ``c`` bytes on a
link of bandwidth ``b`` and latency ``α`` have all arrived no earlier than ``n·c/b + α``.
Spreading the ``R`` chunks a GPU needs over its in-links as well as possible gives a lower
bound for that chunking (:func:`chunking_bounds`); cutting ever finer tends to the fluid
limit ``R·c/Σb``. The gap is quantization: on a 4×4 torus every GPU receives 15 chunks
over 4 equal links, so one chunk per rank needs ``ceil(15/4) = 4`` chunk times where the
fluid limit is 3.75 (1.067×), while four chunks per rank (60 over 4) are exact. Chunks a
GPU alone holds (a root's) or whose partial it must hand on (reductions) bound its
out-links the same way.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.spec.topology import load_topology
>>> torus = load_topology("torus4x4")
>>> ag = Collective(CollectiveKind.ALLGATHER, 2**30, tuple(range(16)))
>>> round(quantization(torus, ag, 1), 3), round(quantization(torus, ag, 4), 3)
(1.067, 1.0)
>>> chunk_candidates(torus, ag)
(1, 2, 4, 8)
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import replace
from functools import lru_cache

import networkx as nx

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.model.footprint import most_chunks
from te_ccl.topology.model import Topology

__all__ = ["BASE_CHUNKS", "MAX_CHUNKS", "chunk_candidates", "chunking_bounds", "latency_first",
           "quantization"]

BASE_CHUNKS = (1, 2, 4, 8)  # pipelining depth: always worth a try
MAX_CHUNKS = 32  # beyond, the flow models grow too large for the budgets auto shares
GOOD_ENOUGH = 1.01  # a quantization within 1 % of the fluid limit needs no finer chunking
LATENCY_BOUND = 0.9  # a floor of hops·α at least this share of the best bound: α dominates
NEAR = 1.05  # there, a chunking within 5 % of the best bound is tried before finer ones
WEIGHING = "weighing the chunkings"  # what a deadline reached interrupted

# one side of one GPU: (chunks at one chunk per rank, ((bandwidth, latency), ...))
_Need = tuple[int, tuple[tuple[float, float], ...]]


def _counts(collective: Collective) -> tuple[Counter, Counter]:
    """(chunks each rank must receive, chunks each rank must send) at one chunk per rank."""
    recv: Counter = Counter()
    send: Counter = Counter()
    for ch in checked(collective.chunks(), WEIGHING, every=256):
        sources, dests = set(ch.sources), set(ch.destinations)
        if ch.reduce:
            recv.update(r for r in dests if sources - {r})
            send.update(sources - dests)
        else:
            recv.update(dests - sources)
            if len(sources) == 1 and dests - sources:
                send.update(sources)
    return recv, send


def _needs(topology: Topology, collective: Collective) -> list[_Need]:
    recv, send = _counts(collective)
    out = []
    for rank, n in recv.items():
        links = topology.in_links(topology.gpu(rank))
        out.append((n, tuple(sorted((x.bandwidth_Bps, x.latency_s) for x in links))))
    for rank, n in send.items():
        links = topology.out_links(topology.gpu(rank))
        out.append((n, tuple(sorted((x.bandwidth_Bps, x.latency_s) for x in links))))
    return [need for need in set(out) if need[1]]


@lru_cache(maxsize=4096)
def _drain(n: int, links: tuple[tuple[float, float], ...], chunk: float) -> float:
    """Earliest time ``n`` chunks can all have crossed ``links`` (one chunk at a time each).

    Greedy: each next chunk goes to the link where it would arrive first; the arrival
    times popped are increasing, so the ``n``-th is the best possible last arrival.
    """
    heap = [(chunk / b + a, chunk / b) for b, a in links]
    heapq.heapify(heap)
    last = 0.0
    for _ in range(n):
        last, step = heapq.heappop(heap)
        heapq.heappush(heap, (last + step, step))
    return last


def _hops(topology: Topology, collective: Collective) -> int:
    """Most links any chunk must cross: a copied chunk from its nearest source, every
    partial of a reduced chunk from its own source."""
    graph, chunks = topology.graph(), collective.chunks()
    hops = {r: nx.single_source_shortest_path_length(graph, topology.gpu(r))
            for r in checked({r for ch in chunks for r in ch.sources}, WEIGHING, every=16)}
    worst = 0
    for ch in checked(chunks, WEIGHING, every=256):
        for d in ch.destinations:
            far = [hops[s].get(topology.gpu(d), 0) for s in ch.sources if s != d]
            if far and (ch.reduce or d not in ch.sources):
                worst = max(worst, max(far) if ch.reduce else min(far))
    return worst


def _bound(needs: list[_Need], hops: int, fastest: tuple[float, float], chunks: int,
           chunk: float) -> float:
    """The larger of the best spread over each GPU side's links and the longest path."""
    spread = max((_drain(n * chunks, links, chunk) for n, links in needs), default=0.0)
    return max(spread, hops * (chunk / fastest[0] + fastest[1]))


def _fastest(topology: Topology) -> tuple[float, float]:
    """(largest bandwidth, smallest latency): what a hop takes at the least."""
    return (max((x.bandwidth_Bps for x in topology.links), default=1.0),
            min((x.latency_s for x in topology.links), default=0.0))


@lru_cache(maxsize=16)
def _profile(topology: Topology, collective: Collective) -> tuple[list[_Need], int,
                                                                 tuple[float, float]]:
    """What the bounds need of a topology and collective, at one chunk per rank (cached:
    the chunking loop asks for it several times, and on 1024 GPUs it takes a second)."""
    return _needs(topology, collective), _hops(topology, collective), _fastest(topology)


def chunking_bounds(topology: Topology, collective: Collective,
                    ks: list[int]) -> dict[int, float]:
    """Seconds no schedule of ``collective`` at ``k`` chunks per rank can beat, for each
    of ``ks``: the slowest GPU side's best spread of its chunks over its links (see the
    module docstring), or the most hops a chunk needs, each at least ``chunk/b + α`` of
    the fastest link. Custom collectives (whose chunks do not scale with ``k``): 0.
    """
    if collective.kind is CollectiveKind.CUSTOM:
        return dict.fromkeys(ks, 0.0)
    needs, hops, fastest = _profile(topology, replace(collective, chunks_per_rank=1))
    per_rank = collective.size_bytes / collective.nchunks * collective.chunks_per_rank
    return {k: _bound(needs, hops, fastest, k, per_rank / k) for k in ks}


def _ratios(topology: Topology, collective: Collective, ks: list[int]) -> dict[int, float]:
    """:func:`chunking_bounds` over their limit for ever finer chunks."""
    needs, hops, fastest = _profile(topology, replace(collective, chunks_per_rank=1))
    per_rank = collective.size_bytes / collective.nchunks * collective.chunks_per_rank
    fluid = max((n * per_rank / sum(b for b, _ in links) + min(a for _, a in links)
                 for n, links in needs), default=0.0)
    floor = max(fluid, hops * fastest[1])
    bounds = chunking_bounds(topology, collective, ks)
    return {k: b / floor if floor > 0 else 1.0 for k, b in bounds.items()}


def latency_first(topology: Topology, collective: Collective,
                  bounds: dict[int, float]) -> int | None:
    """Where latency dominates (the most hops a chunk needs, at the least α each, make up
    :data:`LATENCY_BOUND` of the best of ``bounds``), the fewest chunks per rank whose
    bound is within :data:`NEAR` of the best: finer chunkings can gain little more there
    and cost the most to solve and lower (tried first, they would take a short limit and
    leave a slower file), so ``auto`` tries this one first. None where bandwidth matters.
    """
    if collective.kind is CollectiveKind.CUSTOM or not bounds:
        return None
    _, hops, fastest = _profile(topology, replace(collective, chunks_per_rank=1))
    best = min(bounds.values())
    if hops * fastest[1] < LATENCY_BOUND * best:
        return None
    return min(k for k, b in bounds.items() if b <= NEAR * best)


def quantization(topology: Topology, collective: Collective, k: int) -> float:
    """The bound at ``k`` chunks per rank over its limit for ever finer chunks (1: exact)."""
    return _ratios(topology, collective, [k])[k]


def _divides(collective: Collective, k: int) -> bool:
    return collective.size_bytes % replace(collective, chunks_per_rank=k).nchunks == 0


def chunk_candidates(topology: Topology, collective: Collective,
                     base: tuple[int, ...] = BASE_CHUNKS) -> tuple[int, ...]:
    """``base`` plus, when none of it quantizes within 1 % of the fluid limit, the
    smallest chunking up to :data:`MAX_CHUNKS` that divides the size and does (else the
    one that comes closest); none whose transfers would not fit the compile's memory
    (:func:`~te_ccl.model.footprint.most_chunks`; at least one chunk per rank stays).
    Custom collectives keep ``base``.

    dgx1 AllGather: every GPU receives 7 chunks over links of 1, 1, 2 and 2 units, so
    6 chunks per rank are exact (42 over 6 units); of 1 GB (10⁹ bytes, not divisible by
    48) 20 per rank come within 0.7 %.
    """
    if collective.kind is CollectiveKind.CUSTOM:
        return tuple(sorted(set(base)))
    most = max(1, most_chunks(topology, collective))
    base = tuple(k for k in base if k <= most) or (1,)
    ratio = _ratios(topology, collective, [k for k in range(1, min(MAX_CHUNKS, most) + 1)
                                           if k in base or _divides(collective, k)])
    if any(ratio[k] <= GOOD_ENOUGH for k in base if k in ratio):
        return tuple(sorted(set(base)))
    extra = [k for k in sorted(ratio) if k not in base]
    fine = [k for k in extra if ratio[k] <= GOOD_ENOUGH]
    pick = fine[:1] or sorted(extra, key=lambda k: (ratio[k], k))[:1]
    best_base = min((ratio[k] for k in base if k in ratio), default=float("inf"))
    return tuple(sorted(set(base) | {k for k in pick if ratio[k] < best_base}))
