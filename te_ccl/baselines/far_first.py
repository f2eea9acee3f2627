"""Far-first AlltoAll: an α-β list schedule for sizes where latency dominates.

At small sizes a pair's time is its hops' α, so an AlltoAll ends when its farthest pairs'
data has arrived; the direct template sends every pair at once and the far pairs' relays
queue behind near traffic. Here the
farthest pairs' chunks are placed first, the pairs' ``i``-th chunks in turn, each on the
one of its pair's fewest-hop routes that delivers it earliest (so a pair's chunks spread
over its routes: hgx-h100x2's cross-box pairs take the rail before the NVSwitch hop or
after it, so a rail carries while the other pairs' chunks are still in their box); the
nearer pairs' chunks then fill what the links have left.

Placing is the epoch model's (``te_ccl.schedule``): a link is busy ``ceil(c/(b·τ))``
epochs per chunk, a chunk arrives ``ceil((c/b + α)/τ)`` epochs after it starts, and it
takes the earliest free slot once its sender holds it; ``τ`` is a :data:`FINE` th of the
fastest link's chunk time, so that rounding α up to whole epochs costs little. A greedy
order lets early chunks take the routes that later ones needed: :data:`ROUNDS` times, the
chunks that arrived last move to the front of the order and the placing is redone; the
earliest finish is kept (fewer rounds where there are many chunks: :data:`PLACEMENTS`).

A pair's data whole crosses each hop of its route in one piece, so a relay waits for all
of it; the template also cuts each pair's chunks into :data:`PIECES` and keeps the
earliest finish, so that a far pair's data goes over several routes and its relays
forward the first pieces while the later ones still arrive.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import replace
from itertools import islice

import networkx as nx

from te_ccl.baselines.plan import TEMPLATE, BaselineError
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import TimeLimitReached, checked
from te_ccl.schedule import Schedule, SolveInfo, transfers_of
from te_ccl.topology.model import Topology

__all__ = ["far_first", "FAR_FIRST_MAX_GPUS"]

FAR_FIRST_MAX_GPUS = 32  # beyond, the rounds cost more than a compile's templates get
MAX_ROUTES = 4  # fewest-hop routes weighed per pair: dgx1's far pairs have two
FINE = 8  # epochs per chunk time of the fastest link
ROUNDS = 24  # placings, each with the last arrivals of the one before moved first
PIECES = (1, 2, 4, 8)  # each pair's chunks cut into as many: where α dominates, a far
#                        pair's data split over its routes and pipelined through its relay
#                        ends sooner (dgx1 at 64 KB: docs/model.md, walk_window_s)
MAX_PIECES = 8  # chunks a pair at most, cut here or asked for
MAX_CUT = 1024  # chunks in all at most where cut here: the lowering's work grows with
#                  them (mesh 4x4 in eight pieces a pair would be 1,920)
LINK_MOST = 96  # transfers on one link at most where cut here: the lowering cannot fit
#                 many more into a link's channels (ndv2x2's one IB link at 256: none)
GAIN = 0.01  # a finer cut is kept where it ends at least this share sooner
PLACEMENTS = 12_000  # chunks placed over all rounds at most: a round's cost grows with the
#                      chunks, so many chunks get fewer rounds

_Hop = tuple[str, str, int, int]  # (src, dst, start epoch, arrive epoch)
_Piece = tuple[tuple[str, str], int]  # (pair, its i-th chunk)


class _Slots:
    """Each link's busy epochs as sorted disjoint ``[start, end)`` intervals, and what a
    chunk needs of a link: (busy epochs, epochs until it arrives)."""

    def __init__(self, topology: Topology, chunk_bytes: int, tau: float) -> None:
        self.rule = {(x.src, x.dst): (math.ceil(chunk_bytes / (x.bandwidth_Bps * tau) - 1e-9),
                                      math.ceil((chunk_bytes / x.bandwidth_Bps + x.latency_s)
                                                / tau - 1e-9))
                     for x in topology.links}
        self.bufferless = {n.name for n in topology.nodes if not n.is_gpu and not n.has_buffer}
        self.starts: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.ends: dict[tuple[str, str], list[int]] = defaultdict(list)

    def start(self, link: tuple[str, str], ready: int) -> int:
        """The first epoch from ``ready`` at which the link is free for one chunk."""
        k, starts, ends = self.rule[link][0], self.starts[link], self.ends[link]
        i = bisect_right(ends, ready)  # the first interval ending after ready
        t = ready
        while i < len(starts) and starts[i] < t + k:
            t, i = max(t, ends[i]), i + 1
        return t

    def walk(self, path: list[str], ready: int = 0) -> list[_Hop]:
        """The hops of ``path`` placed as early as the links allow (not taken yet); a
        switch without buffer sends on in the epoch a chunk arrives, so where that link
        is busy the chunk leaves its GPU later."""
        while True:
            hops, t = [], ready
            for u, v in zip(path, path[1:], strict=False):
                start = self.start((u, v), t)
                if hops and start != t and u in self.bufferless:
                    break
                t = start + self.rule[(u, v)][1]
                hops.append((u, v, start, t))
            else:
                return hops
            ready = hops[0][2] + start - t  # the whole path later by the switch's wait

    def take(self, hops: list[_Hop]) -> None:
        for u, v, t, _ in hops:
            at = bisect_right(self.starts[(u, v)], t)
            self.starts[(u, v)].insert(at, t)
            self.ends[(u, v)].insert(at, t + self.rule[(u, v)][0])


def far_first(topology: Topology, collective: Collective) -> Schedule:
    """The far-first AlltoAll (module docstring), each pair's chunks cut into each of
    :data:`PIECES` (up to :data:`MAX_PIECES` a pair, :data:`MAX_CUT` in all and
    :data:`LINK_MOST` on a link), a finer cut kept where it ends :data:`GAIN` sooner; raises
    :class:`BaselineError` for any other collective or beyond :data:`FAR_FIRST_MAX_GPUS`
    ranks."""
    if collective.kind is not CollectiveKind.ALLTOALL:
        raise BaselineError("the far-first template is for AlltoAll only")
    if collective.nranks > FAR_FIRST_MAX_GPUS:
        raise BaselineError(f"the far-first template takes up to {FAR_FIRST_MAX_GPUS} ranks")
    k, pairs = collective.chunks_per_rank, collective.nranks * (collective.nranks - 1)
    best = _far_first(topology, collective)
    for f in PIECES[1:]:
        if k * f > MAX_PIECES or pairs * k * f > MAX_CUT:
            break
        try:
            cut = _far_first(topology, replace(collective, chunks_per_rank=k * f))
        except TimeLimitReached:  # the cuts made stand: a finer one only improves them
            break
        if max(Counter((x.src, x.dst) for x in cut.transfers).values(), default=0) > LINK_MOST:
            break
        if cut.finish_time_s < (1 - GAIN) * best.finish_time_s:
            best = cut
    return best


def _far_first(topology: Topology, collective: Collective) -> Schedule:
    graph = topology.graph()
    graph.remove_nodes_from(set(topology.gpus) - {topology.gpu(r) for r in collective.ranks})
    tau = collective.chunk_bytes / max(x.bandwidth_Bps for x in topology.links) / FINE
    pairs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ch in collective.chunks():
        src, dst = topology.gpu(ch.sources[0]), topology.gpu(ch.destinations[0])
        if src != dst:
            pairs[(src, dst)].append(ch.id)
    routes = {p: _routes(graph, *p) for p in pairs}
    order = sorted(((p, i) for p in pairs for i in range(len(pairs[p]))),
                   key=lambda x: (-len(routes[x[0]][0]), x[1], x[0]))
    best: dict[_Piece, list[_Hop]] = {}
    best_last = math.inf
    rounds = max(1, min(ROUNDS, PLACEMENTS // max(1, len(order))))
    for _ in checked(range(rounds), TEMPLATE, every=1):  # a round places many chunks
        placed = _place(topology, collective.chunk_bytes, tau, order, routes)
        last = max(h[-1][3] for h in placed.values())
        if last < best_last:
            best, best_last = placed, last
        late = [x for x in order if placed[x][-1][3] == last]
        order = late + [x for x in order if placed[x][-1][3] != last]
    rows = [(pairs[p][i], u, v, t, a) for (p, i), hops in best.items()
            for u, v, t, a in hops]
    info = SolveInfo(backend="baseline:far-first", status="heuristic")
    return Schedule(topology, collective, tau, tuple(transfers_of(sorted(rows))), info)


def _place(topology: Topology, chunk_bytes: int, tau: float, order: list[_Piece],
           routes: dict[tuple[str, str], list[list[str]]]) -> dict[_Piece, list[_Hop]]:
    """Each piece's hops, placed in ``order`` on the route that delivers it first."""
    slots = _Slots(topology, chunk_bytes, tau)
    placed = {}
    for piece in order:
        hops = min((slots.walk(r) for r in routes[piece[0]]), key=lambda h: h[-1][3])
        slots.take(hops)
        placed[piece] = hops
    return placed


def _routes(graph: nx.DiGraph, src: str, dst: str) -> list[list[str]]:
    """Up to :data:`MAX_ROUTES` of the fewest-hop paths ``src … dst``."""
    try:
        return list(islice(nx.all_shortest_paths(graph, src, dst), MAX_ROUTES))
    except nx.NetworkXNoPath:
        raise BaselineError(f"no route from {src} to {dst}") from None
