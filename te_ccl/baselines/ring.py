"""NCCL-style rings, uni- and bi-directional, for every collective kind.

The ring order is a Hamiltonian cycle of the participating GPUs over direct links (or,
failing that, over switch-only paths) found by a budgeted depth-first search with
Warnsdorff's rule; without one, rank order joined by shortest paths. Copied chunks walk
the ring from their source until every destination has them; reduced chunks are summed
along the ring into an owner (spread over the ranks) and, for AllReduce, walk on from it:
the classic (N−1)-step ReduceScatter + AllGather ring. The bi-directional ring halves the
chunks and sends every other one the other way round (single-destination chunks take the
shorter way).
"""

from __future__ import annotations

from dataclasses import replace

from te_ccl.baselines.plan import ChunkPlan, assemble
from te_ccl.collective.model import Chunk, Collective
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["ring_order", "walk", "ring", "ring_bidir", "doubled"]


def _neighbours(topology: Topology, gpus: list[str]) -> dict[str, list[str]]:
    """GPUs each GPU reaches by a direct link (listed first) or through switches only."""
    members, out = set(gpus), {}
    for g in gpus:
        direct = [k.dst for k in topology.out_links(g) if k.dst in members]
        seen, frontier, via = {g}, [g], []
        while frontier:
            nxt = []
            for x in frontier:
                for k in topology.out_links(x):
                    if k.dst in seen:
                        continue
                    seen.add(k.dst)
                    if not topology.node(k.dst).is_gpu:
                        nxt.append(k.dst)
                    elif x != g and k.dst in members:
                        via.append(k.dst)
            frontier = nxt
        out[g] = direct + [v for v in via if v not in direct]
    return out


def _hamiltonian(gpus: list[str], adj: dict[str, list[str]], budget: int) -> list[str] | None:
    n = len(gpus)
    if n <= 2:
        return list(gpus)
    start, path, on = gpus[0], [gpus[0]], {gpus[0]}
    pos = {g: i for i, g in enumerate(gpus)}

    def options(x: str) -> list[str]:  # Warnsdorff: fewest onward choices first
        cand = [v for v in adj[x] if v not in on]
        return sorted(cand, key=lambda v: (sum(w not in on for w in adj[v]), pos[v]))

    stack = [iter(options(start))]
    while stack and budget > 0:
        budget -= 1
        v = next(stack[-1], None)
        if v is None:
            stack.pop()
            on.discard(path.pop())
            continue
        path.append(v)
        on.add(v)
        if len(path) == n:
            if start in adj[v]:
                return path
            on.discard(path.pop())
            continue
        stack.append(iter(options(v)))
    return None


def ring_order(topology: Topology, gpus: list[str], *, budget: int = 50_000) -> list[str]:
    """A cycle through ``gpus``, else ``gpus`` as given.

    Tried in turn: direct links of the highest bandwidth only (NCCL's rings over doubled
    NVLinks), then of each lower bandwidth, then any link or switch-only path.
    """
    gpus = list(gpus)
    adj = _neighbours(topology, gpus)
    members = set(gpus)
    speeds = sorted({k.bandwidth_Bps for g in gpus for k in topology.out_links(g)
                     if k.dst in members}, reverse=True)
    for speed in speeds:
        fast = {g: [k.dst for k in topology.out_links(g)
                    if k.dst in members and k.bandwidth_Bps >= speed] for g in gpus}
        if cycle := _hamiltonian(gpus, fast, budget):
            return cycle
    return _hamiltonian(gpus, adj, budget) or gpus


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
    order = ring_order(topology, [topology.gpu(r) for r in collective.ranks])
    plans = []
    for chunk in collective.chunks():
        step = -1 if bidir and chunk.id % 2 else 1
        if bidir and len(chunk.destinations) == 1 and not chunk.reduce:
            src, dst = (order.index(topology.gpu(x)) for x in (chunk.sources[0],
                                                                 chunk.destinations[0]))
            step = 1 if (dst - src) % len(order) <= len(order) // 2 else -1
        owner = owner_of(topology, chunk) if chunk.reduce else None
        plans.append(ring_plan(topology, chunk, order, step, owner))
    return assemble("ring-bidir" if bidir else "ring", topology, collective, plans)


def ring(topology: Topology, collective: Collective) -> Schedule:
    """Uni-directional ring (NCCL's ring algorithm)."""
    return _ring(topology, collective, False)


def ring_bidir(topology: Topology, collective: Collective) -> Schedule:
    """Bi-directional ring: twice the chunks, alternate chunks go the other way."""
    return _ring(topology, doubled(collective), True)
