"""From per-chunk trees to a Schedule: routing and greedy epoch assignment, shared by all baselines.

A baseline says, for every chunk, which GPU sends it to which GPU (:class:`ChunkPlan`):
an in-tree that sums the partials of a reduced chunk into its ``owner``, then an out-tree
that copies the chunk from the ``owner`` (its source, for copied chunks). This module
routes each GPU→GPU edge over the topology (the direct link, else the fastest path;
through switches only for reductions, since a GPU on the way would add its own partial)
and gives every hop epochs with the rules of the ``te_ccl.schedule`` docstring:

* τ = ``chunk_bytes / b_max`` (the fastest link carries one chunk per epoch; slower links
  need ``ceil(chunk/(b·τ))`` epochs per chunk), but at least half the smallest α, so that
  latency-bound (tiny) chunks do not need millions of epochs;
* a hop started in epoch ``e`` arrives at ``e + ceil((chunk/b + α)/τ)``; a link starts in one
  epoch only as many chunks as still arrive by then (they leave it one after another);
* a link starts at most ``cap`` chunks in any ``k`` consecutive epochs;
* ``in_flight`` (optional): a link has at most that many chunks under way at once (the
  sends a runtime's connections hold: tiny chunks otherwise all start in one epoch), or
  where that is fewer than a hop's epochs, one start per epoch;
* a switch without buffer forwards in the epoch the chunk arrives;
* ``aligned`` (optional): a link that needs ``k > 1`` epochs per chunk starts chunks only
  in epochs that are multiples of ``k`` (after a bufferless switch: the first such link of
  a path; the later ones follow it at fixed offsets), so that paths through bufferless
  switches, which must find every hop free at its own offset, fill the slow links' slots
  instead of leaving one-epoch holes between them (FRED's L1–L2 uplinks).

Edges are placed greedily, earliest feasible epoch first, in the order (stage, chunk):
``stage`` is the edge's step in its tree, which makes rings and trees pipeline as NCCL does.
"""

from __future__ import annotations

import functools
from bisect import bisect_left, insort
from collections import defaultdict
from dataclasses import dataclass, field

import networkx as nx

from te_ccl.collective.model import Collective
from te_ccl.deadline import checked
from te_ccl.errors import TecclError
from te_ccl.model.epochs import link_timing
from te_ccl.schedule import Schedule, SolveInfo, Transfer
from te_ccl.topology.model import Topology
from te_ccl.topology.routes import fastest_path

__all__ = ["ChunkPlan", "BaselineError", "assemble", "depth", "route", "TEMPLATE"]

TEMPLATE = "building a template"  # what a deadline reached interrupted


class BaselineError(TecclError):
    """A baseline cannot be built for this topology and collective (bad request: exit 2)."""

    exit_code = 2


class BaselineTooLarge(BaselineError):
    """A baseline that would move more chunk hops than one is built with (exit code 3, like
    a result that does not fit: the request was fine)."""

    exit_code = 3


@dataclass(frozen=True)
class ChunkPlan:
    """How one chunk moves: ``gather`` child→parent edges summing into ``owner``, then
    ``spread`` child→parent edges copying out of ``owner`` (both maps ``node -> parent``)."""

    chunk: int
    owner: str
    gather: dict[str, str] = field(default_factory=dict)
    spread: dict[str, str] = field(default_factory=dict)


def route(topology: Topology, src: str, dst: str, *, via_gpus: bool,
          graph: nx.DiGraph | None = None) -> list[str]:
    """Node path ``src … dst`` (:func:`~te_ccl.topology.routes.fastest_path`); raises
    :class:`BaselineError` saying why there is none."""
    path = fastest_path(topology, src, dst, via_gpus=via_gpus, graph=graph)
    if path is not None:
        return path
    full = graph if graph is not None else topology.graph()
    if via_gpus or not nx.has_path(full, src, dst):
        raise BaselineError(f"no path from {src} to {dst} in {topology.name} through the "
                            "ranks' GPUs and switches")
    raise BaselineError(f"{src} reaches {dst} in {topology.name} only through other GPUs, and a "
                        "reduced partial relayed through a GPU would take that GPU's own partial "
                        "twice (teccl compile sums at the GPUs on the way)")


def _height(tree: dict[str, str]) -> dict[str, int]:
    """Edges from the farthest leaf to each node of an in-tree (leaves 0)."""
    h: dict[str, int] = defaultdict(int)
    for leaf in tree:
        node, d = leaf, 0
        while node in tree:
            node, d = tree[node], d + 1
            if h[node] >= d:
                break
            h[node] = d
    return h


def depth(tree: dict[str, str], node: str) -> int:
    """Edges from ``node`` up to the root of ``tree`` (node → parent)."""
    d = 0
    while node in tree:
        node, d = tree[node], d + 1
    return d


@dataclass(frozen=True)
class _Edge:
    chunk: int
    src: str
    dst: str
    op: str
    stage: int
    after: tuple[int, ...]  # indices of edges whose arrival at src this edge waits for


def _depths(tree: dict[str, str]) -> dict[str, int]:
    """:func:`depth` of every node of ``tree`` and of its root, each path walked once."""
    d: dict[str, int] = {}
    for node in tree:
        path = []
        while node in tree and node not in d:
            path.append(node)
            node = tree[node]
        at = d.setdefault(node, 0)
        for n in reversed(path):
            at += 1
            d[n] = at
    return d


def _edges(plans: list[ChunkPlan]) -> list[_Edge]:
    """Every plan's edges, each tree's children sorted by their stage once: the pipelined
    templates give thousands of chunks the same tree object."""
    edges: list[_Edge] = []
    spreads: dict[int, list[tuple[str, str, int]]] = {}  # id(tree) -> (child, parent, depth)
    for p in checked(plans, TEMPLATE, every=256):
        height = _height(p.gather)
        into: dict[str, list[int]] = defaultdict(list)
        for child in sorted(p.gather, key=lambda n: height[n]):
            into[p.gather[child]].append(len(edges))
            edges.append(_Edge(p.chunk, child, p.gather[child], "reduce", height[child],
                               tuple(into[child])))
        base = height[p.owner] + 1 if p.gather else 0
        order = spreads.get(id(p.spread))
        if order is None:
            d = _depths(p.spread)
            order = spreads[id(p.spread)] = sorted(
                ((c, u, d[c]) for c, u in p.spread.items()), key=lambda x: x[2])
        for child, parent, down in order:
            into[child] = [len(edges)]
            edges.append(_Edge(p.chunk, parent, child, "copy", base + down - 1,
                               tuple(into[parent])))
    return edges


class _Links:
    """Epoch bookkeeping of every link: starts per epoch, occupancy, capacity, delay.

    Besides the starts per epoch, each link keeps its *full* epochs sorted and a
    skip pointer from each full epoch towards the next free one (a union-find with path
    halving), so the earliest start that fits jumps over whole busy runs: a ring AlltoAll
    on 64 GPUs places 258k hops on links busy for thousands of epochs.
    """

    def __init__(self, topology: Topology, chunk_bytes: int, tau: float,
                 aligned: bool = False, in_flight: int | None = None) -> None:
        self.topo, self.tau, self.c = topology, tau, chunk_bytes
        self.aligned, self.in_flight = aligned, in_flight
        self.passing: set[tuple[str, int, int]] = set()  # (switch, chunk, epoch)
        self.occ: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
        self.full: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.skip: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)

    @functools.cache  # noqa: B019 - one small cache per schedule being built
    def rule(self, u: str, v: str) -> tuple[int, int, int]:
        """``(k, cap, delay)``: at most ``cap`` starts in any ``k`` epochs; arrival after
        ``delay`` (the model's epoch link rules, :func:`~te_ccl.model.epochs.link_timing`)."""
        timing = link_timing(self.topo.link(u, v), self.c, self.tau)
        cap = timing.capacity
        if self.in_flight is not None and timing.occupancy == 1:  # starts within one delay
            cap = max(1, min(cap, self.in_flight // max(1, timing.delay)))
        return timing.occupancy, cap, timing.delay

    def blocked(self, u: str, v: str, e: int) -> int | None:
        """The last full epoch in ``[e, e+k)`` (None: a chunk may start at ``e``).

        Each start fills ``k`` epochs; with ``k > 1`` the capacity is one, so "at most
        ``cap`` starts in any ``k`` consecutive epochs" is "every epoch below ``cap``".
        """
        full = self.full[(u, v)]
        i = bisect_left(full, e + self.rule(u, v)[0]) - 1
        return full[i] if i >= 0 and full[i] >= e else None

    def fits(self, u: str, v: str, e: int) -> bool:
        return self.blocked(u, v, e) is None

    def next_fit(self, u: str, v: str, e: int) -> int:
        """The earliest start ``≥ e`` (a multiple of ``k`` if aligned) whose ``k`` epochs are
        all below capacity."""
        k, full = self.rule(u, v)[0], self.full[(u, v)]
        while True:
            e = self._free_from((u, v), e)
            if self.aligned and e % k:
                e += k - e % k
                continue
            i = bisect_left(full, e)
            if i == len(full) or full[i] >= e + k:
                return e
            e = full[i]  # a busy run inside the window: skip past it

    def _free_from(self, key: tuple[str, str], e: int) -> int:
        skip = self.skip[key]
        while e in skip:
            nxt = skip[e]
            if nxt in skip:
                skip[e] = nxt = skip[nxt]  # path halving
            e = nxt
        return e

    def _take(self, key: tuple[str, str], t0: int) -> None:
        k, cap, _ = self.rule(*key)
        occ = self.occ[key]
        for i in range(t0, t0 + k):
            occ[i] = occ.get(i, 0) + 1
            if occ[i] == cap:
                insort(self.full[key], i)
                self.skip[key][i] = i + 1

    def _try(self, path: list[str], e: int,
             chunk: int) -> tuple[list[tuple[str, str, int, int]], int]:
        """Hops from epoch ``e`` (the sender may wait; bufferless switches may not), or
        ``([], skip)`` with how far to move ``e`` when a bufferless hop is blocked. A switch
        passes one piece of a chunk per epoch (two partials would merge in it)."""
        hops, t, free = [], e, not self.aligned  # free: no grid to meet (any more)
        for u, v in zip(path, path[1:], strict=False):
            node, k = self.topo.node(u), self.rule(u, v)[0]
            if hops and not node.is_gpu and not node.has_buffer:
                if (u, chunk, t) in self.passing:
                    return [], 1
                if not self.fits(u, v, t) or (not free and t % k):
                    return [], max(1, self.next_fit(u, v, t) - t)
            else:
                t = self.next_fit(u, v, t)
            free = free or k > 1  # later slow hops follow the first at fixed offsets
            arrive = t + self.rule(u, v)[2]
            hops.append((u, v, t, arrive))
            t = arrive
        return hops, 0

    def place(self, path: list[str], ready: int, chunk: int) -> list[tuple[str, str, int, int]]:
        """Hops of ``path`` from the earliest epoch ≥ ``ready`` (greedy) that fits every hop."""
        e = ready
        while True:
            hops, skip = self._try(path, e, chunk)
            if hops:
                for u, _, t0, _ in hops[1:]:
                    self.passing.add((u, chunk, t0))
                for u, v, t0, _ in hops:
                    self._take((u, v), t0)
                return hops
            e += max(1, skip)


def _from_nearest_copy(path: list[str], ready: int, chunk: int,
                       held: dict[tuple[str, int], int]) -> tuple[list[str], int]:
    """Start a copy's route at the last GPU on it that an earlier route already brought the
    chunk to (``held``): sending the same chunk over the same links again would only repeat work
    (NCCL's trees cross a box boundary once per chunk, not once per tree edge).

    >>> _from_nearest_copy(["a", "g", "b"], 3, 0, {("g", 0): 5})
    (['g', 'b'], 5)
    >>> _from_nearest_copy(["a", "g", "b"], 3, 0, {})
    (['a', 'g', 'b'], 3)
    """
    for k in range(len(path) - 2, 0, -1):
        at = held.get((path[k], chunk))
        if at is not None:
            return path[k:], max(ready, at)
    return path, ready


def assemble(name: str, topology: Topology, collective: Collective,
             plans: list[ChunkPlan], *, chunk_major: bool = False,
             aligned: bool = False, in_flight: int | None = None) -> Schedule:
    """Route and time the plans' edges; the Schedule's ``info.backend`` is ``baseline:NAME``.
    ``chunk_major``: place each plan's whole tree before the next plan's, in the order of
    ``plans`` (first come, first served), not by (stage, chunk). ``aligned``: slow links
    start chunks on their ``k``-epoch grid, ``in_flight`` caps the chunks under way on a
    link (module docstring)."""
    b_max = max(link.bandwidth_Bps for link in topology.links)
    alphas = [link.latency_s for link in topology.links if link.latency_s > 0]
    tau = max(collective.chunk_bytes / b_max, min(alphas, default=0.0) / 2)
    links = _Links(topology, collective.chunk_bytes, tau, aligned, in_flight)
    edges = _edges(plans)
    arrive: dict[int, int] = {}
    moves: list[tuple[int, str, str, int, int, str]] = []  # Transfer fields, sorted as tuples
    paths: dict[tuple[str, str, bool], list[str]] = {}
    graph = topology.graph()  # relays through the ranks' GPUs and switches only
    graph.remove_nodes_from(set(topology.gpus) - {topology.gpu(r) for r in collective.ranks})
    held: dict[tuple[str, int], int] = {}  # (GPU, chunk) -> epoch a copy arrives there
    turn = {p.chunk: k for k, p in enumerate(plans)}

    def order(i: int) -> tuple[int, int, int]:
        e = edges[i]
        return (turn[e.chunk], e.stage, i) if chunk_major else (e.stage, e.chunk, i)

    for i in checked(sorted(range(len(edges)), key=order), TEMPLATE, every=256):
        e = edges[i]
        key = (e.src, e.dst, e.op == "copy")
        if key not in paths:
            paths[key] = route(topology, e.src, e.dst, via_gpus=key[2], graph=graph)
        path, ready = paths[key], max((arrive[j] for j in e.after), default=0)
        if e.op == "copy":
            if (e.dst, e.chunk) in held:  # an earlier route already left a copy there
                arrive[i] = held[(e.dst, e.chunk)]
                continue
            path, ready = _from_nearest_copy(path, ready, e.chunk, held)
        hops = links.place(path, ready, e.chunk)
        moves += [(e.chunk, u, v, t, a, e.op) for u, v, t, a in hops]
        if e.op == "copy":
            for _, v, _, a in hops:
                if topology.node(v).is_gpu:
                    held[(v, e.chunk)] = min(a, held.get((v, e.chunk), a))
        arrive[i] = hops[-1][3]
    info = SolveInfo(backend=f"baseline:{name}", status="heuristic")
    return Schedule(topology, collective, tau, tuple(Transfer(*m) for m in sorted(moves)), info)
