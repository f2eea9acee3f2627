"""Lower bounds on a collective's finish time, for the "ratio to bound" of every compile.

Each bound is a theorem about every schedule the checker (:mod:`te_ccl.verify.schedule_check`)
accepts and about its replay (:mod:`te_ccl.simulate`). The proofs use only these facts of
that model (α semantics of :mod:`te_ccl.schedule`):

(a) a link serves its transfers one after another, each busy ``bytes/b`` (or ⌊b·τ/C⌋
    starts per epoch, the i-th arriving ≥ i·C/b after its epoch starts), so the transfers
    a link delivers by time ``T`` carry at most ``b·T`` bytes;
(b) a transfer arrives at least its link's α after it starts, and a node sends data only
    once what it depends on has arrived (in the replay's cut-through: its head, still α);
(c) a node's value of a chunk is built only from values that reached it by transfers: a
    source's data reaches a destination only along a chain of transfers;
(d) a switch that cannot reduce sends only values that arrived (unchanged); a switch that
    also cannot copy sends each arriving unit at most once.

With ``R`` the members, ``N = |R|``, ``M`` the collective's ``size_bytes``, ``B⁺(S)``
and ``B⁻(S)`` the bandwidth leaving and entering node set ``S``, the arguments (one
entry of :attr:`Bound.parts` each; the bound is the largest) are:

* ``cut_s``: bytes that must cross some node set's boundary, over its bandwidth (a, c).
  AllGather ``(M/N)·max |S∩R|/B⁺(S)`` over ``S`` leaving out a member (the chunks of
  the members in ``S`` must leave it); ReduceScatter the same with ``B⁻`` (the chunks
  owned inside need data from outside); Gather, Scatter the same with only the root
  left out; Broadcast ``M / min_v maxflow(root, v)``, Reduce reversed; AllReduce
  ``M / min_S min(B⁺(S), B⁻(S))`` over ``S`` with members inside and out: every
  element's sum needs data from both sides, so every element crosses each way — once
  suffices, wherever partials can be added, so RS + AG (which counts it ``2(N−1)/N``
  times) is not a bound.
* ``stream_s`` (Broadcast; Reduce reversed): ``M/B⁺(S)`` plus the α-distance ``D`` from
  the far ends of the links leaving ``S`` (the root's side) to the farthest member
  outside. With ``e(β)`` the earliest arrival of a transfer carrying byte ``β`` out of
  ``S``, the bytes with ``e(β) ≤ t`` are at most ``B⁺(S)·t`` (a), so some byte has
  ``e ≥ M/B⁺(S)``; its chain to that member crosses a link leaving ``S`` and then adds
  each hop's α (b, c). For Reduce, by the latest start into ``S`` per byte: some byte's
  every transfer into ``S`` starts by ``T − M/B⁻(S)``, after the far member's data
  crossed ``D``. ``S``: the root alone and the root's side of the least cut.
* ``cut_alpha_s`` (AlltoAll): ``X/B⁺(S)`` plus the least ``α_ℓ + dist_α(head(ℓ), d)``
  over links ``ℓ`` leaving ``S`` and members ``d`` outside, ``X = |S∩R|·|R∖S|·M/N`` the
  bytes that must leave ``S``; or ``X/B⁻(S)`` plus the least ``dist_α(s, tail(ℓ)) + α_ℓ``
  over links entering ``S`` and members ``s`` outside. Out: let ``e(β)`` be the earliest
  end, on a link leaving ``S``, of a transfer carrying byte ``β`` out; the bytes with
  ``e(β) ≤ t`` are at most ``B⁺(S)·t`` (a), so some byte has ``e ≥ X/B⁺(S)``. Its chain
  to its destination ``d`` last leaves ``S`` on some ``ℓ`` no earlier; each later hop
  ends at least the α of the one before after that one ends (a GPU or buffered switch
  starts it on arrival; a cut-through switch cannot let it end before its tail has
  arrived), and arrives its own α after it ends (b, c). In, by latest starts: a transfer
  on ``ℓ`` entering ``S`` with data from outside starts ≥ ``dist_α(s, tail(ℓ))`` (its
  chain's heads, α a hop) and ends by ``T − α_ℓ``, so the links entering ``S`` carry at
  most ``B⁻(S)·(T − least tail)`` of the ``X`` bytes (a). Both hold for the bytes of any
  set ``D`` of the members outside alone (``X = |S∩R|·|D|·M/N``, the least α to or from
  ``D``); besides ``D = R∖S``, ``D`` = the members at the largest α-distance (mesh 4×4 at
  64 KB: g0's 4 KB for g15 leave over 100 GB/s, 40 ns, then 6 hops of 0.5 µs). ``S``:
  each member alone, the members' rank-order prefixes, the groups of
  :func:`threshold_groups` (boxes with their switches).
* ``window_s`` (AlltoAll): for a group ``S`` (a box with its switches) and the pairs ``P``
  from ``S`` to members outside whose least ``a + c`` over the links ``ℓ`` leaving ``S``
  is at least ``θ`` (``a = dist_α(s, tail ℓ)``, ``c = α_ℓ + dist_α(head ℓ, d)``):
  ``θ + X_P / Σ_ℓ m_ℓ·b_ℓ``, ``X_P = |P|·M/N``, ``m_ℓ`` the fewer of the distinct ``a``
  and distinct ``c`` of ``P`` on ``ℓ``. A byte of ``p = (s, d)`` reaches ``d`` by a chain
  of transfers (c) that first leaves ``S`` on some ``ℓ``. Each hop starts at least the α
  of the hop before after that one starts (its head has arrived, b) and ends at least
  that α after that one ends (a GPU or buffered switch starts it on arrival; a
  cut-through switch cannot let it end before its tail has arrived); the last arrives
  its α after it ends, by ``T``. So the transfer on ``ℓ`` is busy on ``ℓ`` within
  ``[a, T − c]`` only, inside ``[a, a + T − θ]`` and ``[T − c − (T − θ), T − c]`` as
  ``a + c ≥ θ``: ``ℓ``'s transfers for ``P`` are busy inside ``m_ℓ`` intervals of
  ``T − θ`` and carry ≤ ``m_ℓ·b_ℓ·(T − θ)`` bytes (a). A transfer carrying several pairs'
  chunks lies in each one's interval; copies add no byte of ``P``; ``T < θ`` leaves
  ``P`` no interval. ``θ`` and ``m_ℓ`` do not depend on ``M``, so the bound of one ``θ``
  holds at every size (:meth:`Bound.rescaled`). hgx-h100x2 at 64 KB: a byte for a GPU
  other than its rail peer needs an NVSwitch hop before the rail (a = 1.4 µs) or after
  it (a = 0), 4.0 µs of α, and eight rails carry 224 KB in two windows each: 4.28 µs.
* ``walk_window_s`` (AlltoAll): the largest ``T`` at which a linear program shows that
  no schedule finishes by ``T``. A byte of pair ``(s, d)`` reaches ``d`` by a chain of
  transfers (c); cut at its last departure from ``s``, its first arrival at ``d`` and
  without its loops, it is a simple path ``w`` whose hops the byte crosses in order.
  Hop ``i`` on link ``ℓ`` is busy within ``[a_i, T − c_i]``, ``a_i`` the α of ``w``'s
  hops before it, ``c_i`` its own and those after it (as for ``window_s``; a loop cut
  out only narrows the real window), so ``w``'s α is under ``T``. The transfers on ``ℓ``
  whose windows lie in ``[a, T − c]`` are busy inside it and carry at most
  ``b_ℓ·(T − c − a)`` bytes (a). So the pairs' bytes spread over their simple paths of
  α under ``T`` with, for every link and every ``a`` and ``c`` of its hops' windows,
  the bytes of hops with ``a_i ≥ a`` and ``c_i ≥ c`` at most ``b_ℓ·(T − c − a)``; where
  the LP finds no such spread, no schedule finishes by ``T``. A bisection between the
  members' α-distance ``D`` and ``2D`` finds the largest such ``T`` (none where ``2D``
  has no spread either: bandwidth dominates). dgx1 at 64 KB: a far pair's byte crosses its
  first link within ``[0, T − 1.4 µs]`` and its second within ``[0.7, T − 0.7] µs``,
  and no spread of the far pairs over their two-hop paths fits both windows' links in
  under 0.32 µs: 1.72 µs, where the other parts give 1.56. A schedule of ``f·M`` (``f ≤ 1``) finishing by ``f·T`` would give a
  spread for ``M`` at ``T`` (its bytes over ``f``: each window at ``f·T`` lies in
  ``f`` times the one at ``T``), so ``f·T`` bounds ``f·M``: the part rescales down as
  proportional, never up (at 1 GB it is 0: a small size's is computed at that size).
* ``gossip_s`` (AllReduce): split the nodes into groups holding every node that can add
  (GPUs, reducing switches); say ``k`` groups hold members. Every element needs
  ``2(k−1)`` transfers into groups from outside them, the one-way gossip count: treat a
  group as one node; nodes outside groups cannot add, so they pass on values some group
  sent (d). Order the transfers by arrival and let ``x`` be the first group to hold the
  whole sum: the chains that brought it every other member group's data join all ``k``,
  so ≥ ``k−1`` transfers came before, and each of the other ``k−1`` member groups still
  lacks the sum then, so needs one more after. So ``T ≥ 2(k−1)M / Σ B⁻(group)``; where no
  node outside the groups can copy, every such transfer is a distinct send out of a
  group, and ``B⁺`` bounds it too. Groupings tried: the nodes joined by links faster
  than each link bandwidth (the first: every node alone, ``2(N−1)M`` into the GPUs).
* ``per_node_s``, ``concurrent_flow_s``, ``link_time_s`` (AlltoAll, custom): data with
  one destination each: a node's own bytes in and out, the max-concurrent-flow LP (the
  fluid optimum: copies are of no use), or its link-time relaxation (every pair's bytes
  keep the links of a path busy at least ``Σ bytes/b`` of the links' ``|L|·T``).
* ``nvls_s`` (AllReduce of every GPU, where the only switches that reduce are NVLink
  SHARP's): the GPUs' own links, with the switch as the hardware runs it. A multimem
  load-reduce by GPU ``g`` reads every member of ``g``'s group through its GPU→switch
  link and delivers the sum to ``g`` alone; a multimem store by ``g`` leaves ``g`` once
  and arrives at every member. Count, per element, the units leaving GPUs (``out``) and
  entering them (``in``). Every GPU needs the others' data, so ``in ≥ N``, and its own
  must reach them, so ``out ≥ N``. (A) If some load-reduce reads the element and
  ``out = N``, each GPU sends it once, ``g``'s one send is that read, whose result stays
  at ``g``: ``g``'s data reaches no other GPU. So ``out ≥ N+1``. (B) Without one, only
  GPUs add, and the gossip count above (every GPU a group) gives ``in ≥ 2(N−1)``. With a
  share ``f`` of the elements in (A), ``T ≥ max(M(N+f)/P, M(fN + (1−f)·2(N−1))/Q)``, ``P``
  and ``Q`` the GPUs' bandwidth out and in, least over ``f`` ∈ [0, 1]: with ``N`` GPUs at
  ``B`` each way ``M(N²−2)/(N(N−1)B)`` (f = (N−2)/(N−1)); 8 GPUs: 1.107·M/B, where a
  load-reduce and store of every element takes ``M(1+1/N)/B`` = 1.125·M/B. The schedule
  model keeps an NVLS sum in the switch (as FRED's), so a schedule's own replay may
  finish before ``nvls_s``; its MSCCL++ plan's replay (:mod:`te_ccl.simulate.plan`) may
  not.
* ``alpha_s``: the α-weighted distance between a source and a destination that need each
  other's data (b, c), the farthest such pair.

The bandwidth arguments are taken with ``max`` against ``alpha_s``, never summed: a sum
is no bound when the far pair can be served at t = 0 while the cut is busy (``stream_s``
and ``cut_alpha_s`` add only the latency after the cut's last byte). Every part is a term
proportional to ``M`` plus a fixed one (:attr:`Bound.fixed`: all of ``alpha_s``, the
tails of ``stream_s`` and ``cut_alpha_s``, ``θ`` of ``window_s``), so a bound computed at one size rescales to any other
(:meth:`Bound.rescaled`), but for ``walk_window_s``, which holds only rescaled down. None
depends on the chunking.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.topology import Link, Node, Topology
>>> t = Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> round(lower_bound(t, Collective(CollectiveKind.ALLGATHER, 2000, (0, 1))).seconds, 12)
1e-06
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx
import numpy as np

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import SHARES, left
from te_ccl.topology.model import Node, Topology
from te_ccl.topology.symmetry import automorphisms, link_moves, orbits

__all__ = ["Bound", "lower_bound", "allgather_cut_ratio", "alltoall_time", "alltoall_link_time",
           "alltoall_cut_time", "alltoall_cut_alpha", "alltoall_window", "alltoall_walk_window", "separating_cut_bandwidth", "gossip_time", "nvls_allreduce_time", "threshold_groups",
           "LP_MAX_VARIABLES"]

LP_MAX_VARIABLES = 20_000  # sources × links of the AlltoAll LP as solved (a source per orbit):
#                            GLOP's time grows faster than the size, and a larger LP would
#                            cost the first file seconds (mesh 16×16: 36 sources × 960 links)
EXACT_CUT_MAX_GPUS = 2048


@dataclass(frozen=True)
class Bound:
    """``seconds``: the bound; ``parts``: each argument's value in seconds (the bound is
    the largest); ``fixed``: the seconds of a part that do not grow with the size (all of
    ``alpha_s``, the α tails of ``stream_s`` and ``cut_alpha_s``), the rest of every part is proportional to it."""

    seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # read-only: bounds are shared
    fixed: dict[str, float] = field(default_factory=dict)

    def rescaled(self, factor: float) -> dict[str, float]:
        """The parts for ``factor`` times the size (:attr:`fixed` seconds stay); a
        ``walk_window_s`` part holds only for ``factor ≤ 1`` (module docstring).

        >>> Bound(3.0, {"cut_s": 2.0, "stream_s": 3.0, "alpha_s": 1.0},
        ...       {"stream_s": 1.0, "alpha_s": 1.0}).rescaled(2)
        {'cut_s': 4.0, 'stream_s': 5.0, 'alpha_s': 1.0}
        >>> Bound(2.0, {"walk_window_s": 2.0}).rescaled(2)  # left out: not proved above
        {}
        """
        return {k: self.fixed.get(k, 0.0) + v * factor for k, v in self.proportional.items()
                if factor <= 1 or k not in DOWN_ONLY}

    @property
    def proportional(self) -> dict[str, float]:
        """Each part less its :attr:`fixed` seconds: the seconds that grow with the size."""
        return {k: v - self.fixed.get(k, 0.0) for k, v in self.parts.items()}

    @property
    def argument(self) -> str:
        """The part that sets the bound (``cut_s``, ``gossip_s``, ``alpha_s``, …); ties
        go to the first computed, the bandwidth argument before the latency one."""
        return max(self.parts, key=self.parts.__getitem__, default="")


DOWN_ONLY = frozenset({"walk_window_s"})  # parts proved for smaller sizes only

_CUT: ContextVar[list[str] | None] = ContextVar("bound_cut", default=None)


def _out_of_time(doing: str) -> bool:
    """Whether the compile's deadline has passed: the part ``doing`` then stops with
    what it has proved (each of its terms is a bound of its own; none: 0), and the bound
    is not remembered (:func:`lower_bound`) — weaker, never unproved."""
    if left() > 0:
        return False
    cut = _CUT.get()
    if cut is not None:
        cut.append(doing)
    return True


def _members(topology: Topology, collective: Collective) -> list[str]:
    return [topology.gpu(r) for r in collective.ranks]


def _best_set(g: nx.DiGraph, members: list[str], sinks: list[str], lam: float
              ) -> tuple[float, set[str]]:
    """max over S (some sink outside) of |S∩R| − λ·B⁺(S), and the S attaining it.

    One min-cut per sink ``t``: a source feeds every member 1, links carry
    ``λ·bandwidth``, ``t`` is the sink, and the source side of the cut is ``S``. OR-Tools'
    max-flow wants integers, so capacities are scaled to use most of 62 bits (the rounding
    moves a cut by less than 1e-12 of a member's unit); the ratio of the set found is
    computed again from the floats by the caller, so rounding can only make the bound a
    hair weaker, never invalid.
    """
    from ortools.graph.python import max_flow

    names = list(g.nodes)
    index = {v: i for i, v in enumerate(names)}
    source = len(names)
    links = [(index[u], index[v], lam * bw) for u, v, bw in g.edges(data="bandwidth")]
    total = len(members) + sum(c for _, _, c in links)
    scale = float(1 << 62) / max(total, 1e-300)
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(
        np.array([u for u, _, _ in links] + [source] * len(members), dtype=np.int32),
        np.array([v for _, v, _ in links] + [index[m] for m in members], dtype=np.int32),
        np.array([round(c * scale) for _, _, c in links] + [round(scale)] * len(members),
                 dtype=np.int64))
    best, best_set, whole = 0, set(), round(scale) * len(members)
    for t in sinks:
        if flow.solve(source, index[t]) != flow.OPTIMAL:
            raise ArithmeticError(f"max-flow to {t} failed")
        value = whole - flow.optimal_flow()
        if value > best:
            best = value
            best_set = {names[i] for i in flow.get_source_side_min_cut() if i != source}
    return best / scale, best_set


def _flow_network(g: nx.DiGraph):
    """OR-Tools' max-flow on ``g`` (capacities scaled to integers as in :func:`_best_set`:
    rounding moves a flow by less than 1e-12 of its value), its node index and scale."""
    from ortools.graph.python import max_flow

    index = {v: i for i, v in enumerate(g.nodes)}
    arcs = list(g.edges(data="bandwidth"))
    scale = float(1 << 62) / max(sum(bw for _, _, bw in arcs), 1e-300)
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(np.array([index[u] for u, _, _ in arcs], dtype=np.int32),
                                np.array([index[v] for _, v, _ in arcs], dtype=np.int32),
                                np.array([round(bw * scale) for _, _, bw in arcs],
                                         dtype=np.int64))
    return flow, index, scale


def _solve(flow, index: dict[str, int], a: str, b: str) -> None:
    if flow.solve(index[a], index[b]) != flow.OPTIMAL:
        raise ArithmeticError(f"max-flow from {a} to {b} failed")


def _max_flows(g: nx.DiGraph, pairs: list[tuple[str, str]]) -> list[float]:
    """The max-flow (bandwidth) of each (source, sink) pair, by OR-Tools on one network."""
    flow, index, scale = _flow_network(g)
    out = []
    for a, b in pairs:
        _solve(flow, index, a, b)
        out.append(flow.optimal_flow() / scale)
    return out


def _least_cut(g: nx.DiGraph, source: str, sinks: list[str]) -> tuple[float, set[str]]:
    """The least max-flow from ``source`` to one of ``sinks`` and the source's side of
    that minimum cut."""
    flow, index, scale = _flow_network(g)
    least, side = math.inf, []
    for b in sinks:
        _solve(flow, index, source, b)
        if flow.optimal_flow() < least:  # the first of equal ones
            least, side = flow.optimal_flow(), flow.get_source_side_min_cut()
    names = list(g.nodes)
    return least / scale, {names[i] for i in side}


def _bandwidth(g: nx.DiGraph, node: str, incoming: bool) -> float:
    edges = g.in_edges(node, data="bandwidth") if incoming else g.out_edges(node, data="bandwidth")
    return sum(bw for _, _, bw in edges)


def _node_cut_ratio(g: nx.DiGraph, members: list[str], sinks: list[str]
                    ) -> tuple[float, set[str]]:
    """The best of the sets {v} (v a member, some sink outside; B⁺ its out-links) and
    V∖{t} (t a sink; B⁺ its in-links): a valid, cheap lower bound on the cut ratio."""
    inside = set(members)
    alone = [(1 / _bandwidth(g, v, incoming=False), v) for v in _leaving_a_sink(members, sinks)]
    but = [((len(inside) - (t in inside)) / _bandwidth(g, t, incoming=True), t) for t in sinks]
    best_alone = max(alone, key=lambda c: c[0], default=(0.0, None))
    best_but = max(but, key=lambda c: c[0], default=(0.0, None))
    if best_but[1] is not None and best_but[0] > best_alone[0]:  # build only the set kept
        return best_but[0], set(g.nodes) - {best_but[1]}
    return best_alone[0], ({best_alone[1]} if best_alone[1] is not None else set())


def _leaving_a_sink(members: list[str], sinks: list[str]) -> list[str]:
    """The members ``v`` with some sink other than ``v`` (``{v}`` leaves a sink out)."""
    distinct = set(sinks)
    return [v for v in members if len(distinct) > (v in distinct)]


def allgather_cut_ratio(topology: Topology, members: list[str], sinks: list[str] | None = None
                        ) -> tuple[float, set[str]]:
    """max |S∩R| / B⁺(S) over node sets S that hold a member and leave out a sink
    (default: any member), in seconds per byte, and a maximising S.

    Computed by Dinkelbach's method: for a ratio ``λ``, one min-cut per sink finds
    ``max |S∩R| − λ·B⁺(S)``; ``λ`` is raised to that set's ratio until no set beats it (a
    handful of rounds). Exact up to ``EXACT_CUT_MAX_GPUS`` members; beyond, the best
    single-node set or complement — still a valid lower bound, and the exact one on meshes
    and tori, where a GPU's own links are the bottleneck.
    """
    g = topology.graph()
    sinks = list(members) if sinks is None else sinks
    if len(members) > EXACT_CUT_MAX_GPUS:
        return _node_cut_ratio(g, members, sinks)
    starts = _leaving_a_sink(members, sinks)
    start = min(starts, key=lambda v: _bandwidth(g, v, incoming=False))
    lam, arg = 1 / _bandwidth(g, start, incoming=False), {start}
    for _ in range(50):
        value, s = _best_set(g, members, sinks, lam)
        if value <= 1e-9 * len(members) or not s:
            break
        lam = len(s & set(members)) / sum(bw for u, v, bw in g.edges(data="bandwidth")
                                            if u in s and v not in s)
        arg = s
    return lam, arg


ALPHA_EXACT_WORK = 2_000_000  # sources × (nodes + links): beyond, the α-distance is swept


def _alpha_distance(topology: Topology, sources: list[str], targets: list[str]) -> float:
    """The largest α-weighted distance from a source to a target: one Dijkstra per source
    while that costs at most :data:`ALPHA_EXACT_WORK`, else a sweep (the farthest target of
    a source, the farthest source of that target, …, a few times): the distance of a real
    pair, so still a valid bound (and the diameter on meshes and tori, corner to corner).
    """
    forward = _adjacency(topology.links, reverse=False)
    work = len(sources) * (len(topology.nodes) + len(topology.links))
    if work <= ALPHA_EXACT_WORK:
        worst = 0.0
        for s in sources:  # the sources' farthest so far: a bound of their own
            if _out_of_time("alpha_s"):
                break
            worst = max(worst, _farthest(forward, s, targets)[0])
        return worst
    backward = _adjacency(topology.links, reverse=True)
    worst, s = 0.0, sources[0]
    for _ in range(4):
        d, t = _farthest(forward, s, targets)
        back, s = _farthest(backward, t, sources)
        worst = max(worst, d, back)
    return worst


def _adjacency(links, *, reverse: bool) -> dict[str, list[tuple[float, str]]]:
    out: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for k in links:
        u, v = (k.dst, k.src) if reverse else (k.src, k.dst)
        out[u].append((k.latency_s, v))
    return out


def _farthest(adjacency: dict[str, list[tuple[float, str]]], s: str | set[str],
              targets: list[str]) -> tuple[float, str]:
    """(distance, node) of the target farthest from ``s`` (from the nearest of a set of
    nodes; Dijkstra); unreachable ones count as 0, as the other parts of the bound deal
    with them."""
    dist = _alpha_from(adjacency, dict.fromkeys(s if isinstance(s, set) else {s}, 0.0))
    return max((dist.get(t, 0.0), t) for t in targets)


def _alpha_from(adjacency: dict[str, list[tuple[float, str]]], seeds: dict[str, float]
                ) -> dict[str, float]:
    """The α-distance of every node the seeds reach, each seed starting at its own
    seconds (Dijkstra)."""
    dist = dict(seeds)
    heap = [(d, v) for v, d in sorted(seeds.items())]
    heapq.heapify(heap)
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for w, v in adjacency[u]:
            if d + w < dist.get(v, math.inf):
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return dist


def _orbit_lp_rows(topology: Topology, members: list[str]
                   ) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
    """For the concurrent-flow LP under a group ``G`` of the fabric's automorphisms that
    keep the members (:func:`~te_ccl.topology.symmetry.automorphisms`): one member per
    orbit of members, each orbit's size, each link's orbit (ids from 0) and each link
    orbit's size. Without symmetry every member and link is an orbit of its own."""
    gens = automorphisms(topology, members)
    index = {n.name: i for i, n in enumerate(topology.nodes)}
    node = orbits(gens, len(topology.nodes))
    first: dict[int, str] = {}
    count: Counter[int] = Counter()
    for m in members:
        first.setdefault(int(node[index[m]]), m)
        count[int(node[index[m]])] += 1
    link = orbits(link_moves(topology, gens), len(topology.links))
    return list(first.values()), [count[o] for o in first], link, np.bincount(link)


def alltoall_time(topology: Topology, members: list[str], per_pair_bytes: float) -> float | None:
    """Max-concurrent-flow LP: the least T such that every pair moves its bytes in T.

    Solved for one source ``r`` per orbit of members under a group ``G`` of the
    fabric's automorphisms (:func:`_orbit_lp_rows`), with one capacity row per link
    orbit ``O``: ``Σ_r (|Gr|/|O|)·Σ_{k∈O} f_r(k) ≤ b_O·T`` — the same T as the full LP.
    From a full solution ``F``, ``f_r = (1/|G|)·Σ_g g⁻¹·F_{g(r)}`` is a flow from ``r``
    whose row for ``O`` is the mean of the full rows of ``O``'s links; from a reduced
    solution, ``F_s`` the mean of ``g·f_r`` over the ``g`` with ``g(r) = s`` loads each
    link of ``O`` with exactly that row. So each LP's optimum is feasible in the other.
    """
    from ortools.linear_solver import pywraplp

    sources, weight, orbit, size = _orbit_lp_rows(topology, members)
    if len(sources) * len(topology.links) > LP_MAX_VARIABLES:
        return None
    scale = max(k.bandwidth_Bps for k in topology.links)  # solve in units of 1 byte, max bw 1
    lp = pywraplp.Solver.CreateSolver("GLOP")
    T = lp.NumVar(0, lp.infinity(), "T")
    f = {(s, k.key): lp.NumVar(0, lp.infinity(), "") for s in sources for k in topology.links}
    inside = set(members)
    for s in sources:  # rows built coefficient by coefficient: the expression API is slower
        for n in topology.nodes:
            net = len(members) - 1 if n.name == s else -1 if n.name in inside else 0
            coefficient: Counter[tuple[str, str]] = Counter()
            for k in topology.out_links(n.name):
                coefficient[k.key] += 1
            for k in topology.in_links(n.name):
                coefficient[k.key] -= 1
            row = lp.Constraint(net, net)
            for key, c in coefficient.items():
                row.SetCoefficient(f[(s, key)], c)
    rows: dict[int, pywraplp.Constraint] = {}
    for k, o in zip(topology.links, orbit.tolist(), strict=True):
        if o not in rows:  # the bandwidth is the same on the whole orbit
            rows[o] = lp.Constraint(-lp.infinity(), 0)
            rows[o].SetCoefficient(T, -k.bandwidth_Bps / scale)
        for s, w in zip(sources, weight, strict=True):
            rows[o].SetCoefficient(f[(s, k.key)], w / size[o])
    lp.Minimize(T)
    budget = left() * SHARES.bound_lp  # under a deadline: the compile's first file comes first
    if budget < math.inf:
        lp.SetTimeLimit(max(1, int(budget * 1000)))
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return None  # infeasible, or out of its share of the time: the cheap relaxation
    return T.solution_value() * per_pair_bytes / scale


def alltoall_link_time(topology: Topology, members: list[str], per_pair_bytes: float) -> float:
    """The least T in which the links can carry every pair's bytes: a byte sent over a
    path keeps each of its links busy ``1/b``, so the pairs need at least
    ``Σ per_pair_bytes · (seconds per byte of the cheapest path)`` link-seconds, and the
    links give ``T`` each. One Dijkstra per member (seconds at 1024 GPUs), where the LP
    would have millions of variables.

    >>> from te_ccl.topology.generators import ring
    >>> t = ring(4, 1.0)  # each source: 1 + 2 + 1 hops, 4 sources, 8 links
    >>> alltoall_link_time(t, t.gpus, 1.0)
    2.0
    """
    g = nx.DiGraph()
    g.add_weighted_edges_from((k.src, k.dst, 1.0 / k.bandwidth_Bps) for k in topology.links)
    total = 0.0
    for s in members:  # the sources' sums so far: a bound of their own
        if _out_of_time("link_time_s"):
            break
        dist = nx.single_source_dijkstra_path_length(g, s)
        total += sum(dist[v] for v in members if v != s)
    return total * per_pair_bytes / len(topology.links)


def _cut_part(topology: Topology, members: list[str], per_rank: float,
              sinks: list[str] | None = None) -> float:
    """``per_rank · max |S∩R| / B⁺(S)``: the chunks of the members in ``S`` must leave it."""
    if len(members) < 2:
        return 0.0
    return per_rank * allgather_cut_ratio(topology, members, sinks)[0]


def _broadcast_parts(topology: Topology, root: str, members: list[str], size: float
                     ) -> tuple[dict[str, float], dict[str, float]]:
    """The parts and their fixed seconds (:attr:`Bound.fixed`). ``cut_s``: ``M / min_v
    maxflow(root, v)``, every byte crosses every cut between them; ``stream_s``: ``M /
    B⁺(S)`` and then the α-distance from the far ends of the links leaving ``S`` to the
    farthest member outside (its fixed tail), for ``S`` the root alone and the root's side
    of that least cut (the module docstring)."""
    others = [v for v in members if v != root]
    if not others:
        return {}, {}
    g = topology.graph()
    cut, side = _least_cut(g, root, others)
    adjacency = _adjacency(topology.links, reverse=False)
    stream, tail = 0.0, 0.0
    for inside in ({root}, side):
        heads = {v for u in inside for _, v in g.out_edges(u) if v not in inside}
        bandwidth = sum(bw for u in inside for _, v, bw in g.out_edges(u, data="bandwidth")
                        if v not in inside)
        outside = [v for v in others if v not in inside]
        if heads and outside and bandwidth > 0:
            d = _farthest(adjacency, heads, outside)[0]
            if size / bandwidth + d > stream:
                stream, tail = size / bandwidth + d, d
    return {"cut_s": size / cut, "stream_s": stream}, {"stream_s": tail}


def separating_cut_bandwidth(topology: Topology, members: list[str]) -> float:
    """``min_S min(B⁺(S), B⁻(S))`` over node sets ``S`` with members inside and outside:
    the least max-flow from one member to another. Every such ``S`` separates
    ``members[0]`` from some other member in one direction or the other, so the max-flows
    between ``members[0]`` and each other member, both ways, cover them all. Beyond
    ``EXACT_CUT_MAX_GPUS`` members, the least bandwidth into or out of one member: no
    smaller than the exact value, so the bound it gives stays valid.

    >>> from te_ccl.topology.generators import ring
    >>> separating_cut_bandwidth(ring(4, 1.0), list(ring(4, 1.0).gpus))
    2.0
    """
    g, first = topology.graph(), members[0]
    if len(members) > EXACT_CUT_MAX_GPUS:
        return min(min(_bandwidth(g, v, incoming=False), _bandwidth(g, v, incoming=True))
                   for v in members)
    return min(_max_flows(g, [p for v in members[1:] for p in ((first, v), (v, first))]))


def _adds(node: Node) -> bool:
    """GPUs add what they receive; a switch only if it can reduce."""
    return node.is_gpu or node.can_reduce


def _copies(node: Node) -> bool:
    """Whether the checker lets ``node`` send one arriving value more than once: GPUs, a
    switch that can copy, and a buffered switch that can reduce (it keeps what arrives,
    as a GPU does)."""
    return node.is_gpu or node.can_copy or (node.has_buffer and node.can_reduce)


GOSSIP_GROUPINGS = 32  # link bandwidths tried as thresholds, at most (evenly spread)


def _threshold_partitions(topology: Topology) -> list[list[set[str]]]:
    """For link bandwidths ``β`` (every one, or :data:`GOSSIP_GROUPINGS` spread over them
    where a measured fabric has more), the nodes joined by links faster than ``β`` (either
    way), in groups: a box, a rack, a wafer's switch with its NPUs. The first is every
    node alone."""
    speeds = sorted({k.bandwidth_Bps for k in topology.links}, reverse=True)
    if len(speeds) > GOSSIP_GROUPINGS:
        step = (len(speeds) - 1) / (GOSSIP_GROUPINGS - 1)
        speeds = [speeds[round(i * step)] for i in range(GOSSIP_GROUPINGS)]
    links = sorted(topology.links, key=lambda k: -k.bandwidth_Bps)
    parent = {n.name: n.name for n in topology.nodes}

    def root(v: str) -> str:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    out, i = [], 0
    for beta in speeds:
        while i < len(links) and links[i].bandwidth_Bps > beta:
            parent[root(links[i].src)] = root(links[i].dst)
            i += 1
        groups: dict[str, set[str]] = defaultdict(set)
        for v in parent:
            groups[root(v)].add(v)
        out.append(list(groups.values()))
    return out


def threshold_groups(topology: Topology) -> list[set[str]]:
    """Every group of more than one node of :func:`_threshold_partitions`, once: boxes,
    racks — node sets whose links out are slower than those inside."""
    seen: dict[frozenset[str], set[str]] = {}
    for groups in _threshold_partitions(topology):
        for g in groups:
            if len(g) > 1:
                seen.setdefault(frozenset(g), g)
    return list(seen.values())


def gossip_time(topology: Topology, members: list[str], size: float) -> float:
    """AllReduce: the gossip count over groups of nodes (module docstring, ``gossip_s``),
    the best over the groupings of :func:`_threshold_partitions`.

    On a ring or a fully connected fabric this is RS + AG's value; on a line it is less:

    >>> from te_ccl.topology.generators import mesh, ring
    >>> (gossip_time(ring(4, 1.0), ["g0", "g1", "g2", "g3"], 1.0),
    ...  gossip_time(mesh([3], 1.0), ["g0", "g1", "g2"], 1.0))
    (0.75, 1.0)
    """
    nodes, inside = topology.node_by_name, set(members)
    best = 0.0
    for groups in _threshold_partitions(topology):
        parts = [p for p in groups if any(_adds(nodes[v]) for v in p)]
        k = sum(1 for p in parts if p & inside)
        if k < 2:
            continue
        part_of = {v: i for i, p in enumerate(parts) for v in p}
        crossing = [x for x in topology.links if part_of.get(x.src) != part_of.get(x.dst)]
        need = 2 * (k - 1) * size
        best = max(best, need / sum(x.bandwidth_Bps for x in crossing if x.dst in part_of))
        if not any(_copies(nodes[v]) for v in nodes if v not in part_of):
            best = max(best, need / sum(x.bandwidth_Bps for x in crossing if x.src in part_of))
    return best


def nvls_allreduce_time(topology: Topology, members: list[str], size: float) -> float | None:
    """AllReduce of every GPU on NVLink SHARP as the hardware runs it (module docstring,
    ``nvls_s``); None where it does not apply (no NVLS switch reduces, another switch
    reduces, or a GPU is not a member).

    >>> from te_ccl.spec.topology import load_topology
    >>> t = load_topology("dgx-h100")
    >>> round(nvls_allreduce_time(t, list(t.gpus), 1.0) * 450e9, 4)  # (N²−2)/(N(N−1)), N = 8
    1.1071
    """
    switches = [topology.node(s) for s in topology.switches]
    if (not any(s.nvls and s.can_reduce for s in switches)
            or topology.reducing_switches
            or set(members) != set(topology.gpus) or len(members) < 2):
        return None
    n, g = len(members), topology.graph()
    out = sum(_bandwidth(g, v, incoming=False) for v in members)
    into = sum(_bandwidth(g, v, incoming=True) for v in members)
    a0, a1 = n * size / out, (n + 1) * size / out  # out-links, no element / every one in (A)
    b0, b1 = 2 * (n - 1) * size / into, n * size / into  # in-links likewise
    if a0 >= b0:
        return a0
    if a1 <= b1:
        return b1
    f = (b0 - a0) / ((a1 - a0) + (b0 - b1))  # where the rising and falling lines cross
    return a0 + f * (a1 - a0)


def _per_node_part(topology: Topology, into: Counter[str], out: Counter[str]) -> float:
    """The bytes each node must receive or send, over its own links."""
    g = topology.graph()
    return max([b / _bandwidth(g, v, incoming=True) for v, b in into.items()]
               + [b / _bandwidth(g, v, incoming=False) for v, b in out.items()], default=0.0)


def _custom_parts(topology: Topology, collective: Collective) -> dict[str, float]:
    """Each destination receives every chunk it wants, each source sends each of its
    chunks once; the latency of the farthest (source, destination) pair. Counted per
    demand (its chunks are alike), not chunk by chunk."""
    into: Counter[str] = Counter()
    out: Counter[str] = Counter()
    targets: dict[str, set[str]] = defaultdict(set)
    for demand in collective.demands:
        src = topology.gpu(demand.source)
        wanted = [topology.gpu(d) for d in demand.destinations if d != demand.source]
        if not wanted or not demand.chunks:
            continue
        nbytes = demand.chunks * collective.chunk_bytes
        out[src] += nbytes
        targets[src].update(wanted)
        for d in wanted:
            into[d] += nbytes
    alpha = max((_alpha_distance(topology, [s], sorted(ts)) for s, ts in targets.items()),
                default=0.0)
    return {"per_node_s": _per_node_part(topology, into, out), "alpha_s": alpha}


def alltoall_cut_time(topology: Topology, members: list[str], per_pair_bytes: float) -> float:
    """The largest ``|S|·|R∖S|·per_pair_bytes / min(B⁺(S), B⁻(S))`` over ``S`` the first
    ``k`` members: each of ``S`` sends each member outside it ``per_pair_bytes``, all over
    the links leaving ``S``, and receives as much over those entering it. Any ``S`` gives a valid bound; prefixes in rank order are the halving cuts of the
    generated meshes and tori and the box cuts of machines numbered box by box, and
    cost one pass over the links. On a mesh it stands where the LP is too large and the
    link-time relaxation is weaker (mesh 16×16: the middle rows' 16 links).

    >>> from te_ccl.topology.generators import mesh
    >>> alltoall_cut_time(mesh([4], 1.0), ["g0", "g1", "g2", "g3"], 1.0)  # 2·2 over 1 link
    4.0
    """
    inside: set[str] = set()
    out_bw = in_bw = best = 0.0
    n, least = len(members), 1e-9 * max((k.bandwidth_Bps for k in topology.links), default=0.0)
    for k, v in enumerate(members[:-1], 1):
        for link in topology.out_links(v):
            if link.dst in inside:
                in_bw -= link.bandwidth_Bps
            else:
                out_bw += link.bandwidth_Bps
        for link in topology.in_links(v):
            if link.src in inside:
                out_bw -= link.bandwidth_Bps
            else:
                in_bw += link.bandwidth_Bps
        inside.add(v)
        if min(out_bw, in_bw) > least:  # none: a pair that cannot be served, no bound
            best = max(best, k * (n - k) * per_pair_bytes / min(out_bw, in_bw))
    return best


def _bandwidth_parts(topology: Topology, collective: Collective) -> dict[str, float]:
    """The parts of a kind whose bandwidth arguments have no fixed seconds (all but
    Broadcast and Reduce: :func:`_broadcast_parts`)."""
    K = CollectiveKind
    members, kind, n = _members(topology, collective), collective.kind, collective.nranks
    size, rev = float(collective.size_bytes), topology.reversed()
    root = topology.gpu(collective.root) if collective.root is not None else None
    if n < 2:
        return {}
    if kind is K.ALLGATHER:
        return {"cut_s": _cut_part(topology, members, size / n)}
    if kind is K.REDUCESCATTER:
        return {"cut_s": _cut_part(rev, members, size / n)}
    if kind is K.ALLREDUCE:
        parts = {"cut_s": size / separating_cut_bandwidth(topology, members),
                 "gossip_s": gossip_time(topology, members, size)}
        nvls = nvls_allreduce_time(topology, members, size)
        return parts if nvls is None else parts | {"nvls_s": nvls}
    if kind is K.GATHER:
        return {"cut_s": _cut_part(topology, members, size / n, [root])}
    if kind is K.SCATTER:
        return {"cut_s": _cut_part(rev, members, size / n, [root])}
    # AlltoAll: each member sends M/N to and receives M/N from every other member
    each = Counter({v: size * (n - 1) / n for v in members})
    parts = {"per_node_s": _per_node_part(topology, each, each)}
    flow = alltoall_time(topology, members, size / n)
    if flow is not None:
        parts["concurrent_flow_s"] = flow
    else:  # the LP is too large: its weaker, cheap relaxations
        parts["link_time_s"] = alltoall_link_time(topology, members, size / n)
        parts["cut_s"] = alltoall_cut_time(topology, members, size / n)
    return parts


def alpha_nearest(adjacency: dict[str, list[tuple[float, str]]], seeds: dict[str, float],
             targets: set[str]) -> float:
    """The α-distance from the nearest seed (each starting at its own seconds) to the
    nearest target (Dijkstra, stopped at the first target reached); inf if none is."""
    dist = dict(seeds)
    heap = [(d, v) for v, d in seeds.items()]
    heapq.heapify(heap)
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        if u in targets:
            return d
        for w, v in adjacency[u]:
            if d + w < dist.get(v, math.inf):
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return math.inf


def _alltoall_sets(topology: Topology, members: list[str]) -> list[set[str]]:
    """The node sets :func:`alltoall_cut_alpha` tries: each member alone, the prefixes of
    the members in rank order, and the groups of :func:`threshold_groups` (boxes with
    their switches) holding members but not all."""
    sets = [{v} for v in members] + [set(members[:k]) for k in range(2, len(members))]
    inside = set(members)
    return sets + [g for g in threshold_groups(topology) if g & inside and not inside <= g]


def alltoall_cut_alpha(topology: Topology, members: list[str], per_pair_bytes: float
                       ) -> tuple[float, float]:
    """AlltoAll's ``cut_alpha_s`` (module docstring) and its fixed tail: the best over
    :func:`_alltoall_sets` of ``X/B⁺(S)`` plus the least α from a link leaving ``S`` on to
    a member outside, or ``X/B⁻(S)`` plus the least α from a member outside through a link
    entering ``S``, ``X = |S∩R|·|R∖S|·per_pair_bytes``; or the same for the bytes of the
    farthest members outside alone. Sets are taken by their bandwidth term, largest
    first, while the Dijkstras cost at most :data:`ALPHA_EXACT_WORK`.

    >>> from te_ccl.topology import Link, Node, Topology
    >>> t = Topology.build("pair", [Node("a"), Node("b")],
    ...                    [Link("a", "b", 1e9, 1e-6), Link("b", "a", 1e9, 1e-6)])
    >>> alltoall_cut_alpha(t, ["a", "b"], 1000)  # 1 µs on the link, then its α
    (2e-06, 1e-06)
    """
    inside_r = set(members)
    forward = _adjacency(topology.links, reverse=False)
    backward = _adjacency(topology.links, reverse=True)
    rows = []
    for s in _alltoall_sets(topology, members):  # each set's argument is a bound alone
        if _out_of_time("cut_alpha_s"):
            break
        outs = [k for v in s for k in topology.out_links(v) if k.dst not in s]
        ins = [k for v in s for k in topology.in_links(v) if k.src not in s]
        x = len(s & inside_r) * len(inside_r - s) * per_pair_bytes
        for links, head, adjacency in ((outs, "dst", forward), (ins, "src", backward)):
            bandwidth = sum(k.bandwidth_Bps for k in links)
            if bandwidth > 0:
                rows.append((x / bandwidth, links, head, adjacency, s))
    rows.sort(key=lambda r: -r[0])
    best, tail = 0.0, 0.0
    work, step = 0, len(topology.nodes) + len(topology.links)
    for proportional, links, head, adjacency, s in rows:
        if work > ALPHA_EXACT_WORK or _out_of_time("cut_alpha_s"):
            break
        work += 2 * step
        seeds: dict[str, float] = {}
        for k in links:
            v = getattr(k, head)
            seeds[v] = min(seeds.get(v, math.inf), k.latency_s)
        d = alpha_nearest(adjacency, seeds, inside_r - s)
        if d < math.inf and proportional + d > best:
            best, tail = proportional + d, d
        far, many = _farthest_seeded(adjacency, seeds, inside_r - s)  # their bytes alone
        if many and proportional * many / len(inside_r - s) + far > best:
            best, tail = proportional * many / len(inside_r - s) + far, far
    return best, tail


WINDOW_WORK = 200_000  # pairs × links leaving a group that window_s weighs at most


def alltoall_window(topology: Topology, members: list[str], per_pair_bytes: float
                    ) -> tuple[float, float]:
    """AlltoAll's ``window_s`` (module docstring) and its fixed part ``θ``: the best over
    the groups of :func:`threshold_groups` holding members but not all, and the least
    ``a + c`` thresholds ``θ`` of their pairs, while the pairs × links weighed stay within
    :data:`WINDOW_WORK`.

    >>> from te_ccl.spec.topology import load_topology
    >>> hgx = load_topology("hgx-h100x2")
    >>> [round(x * 1e6, 3) for x in alltoall_window(hgx, hgx.gpus, 4000)]
    [4.28, 4.0]
    """
    inside_r = set(members)
    forward = _adjacency(topology.links, reverse=False)
    backward = _adjacency(topology.links, reverse=True)
    best, tail, work = 0.0, 0.0, 0
    for group in threshold_groups(topology):
        if _out_of_time("window_s"):
            break
        sources, dests = sorted(group & inside_r), sorted(inside_r - group)
        links = [k for v in group for k in topology.out_links(v) if k.dst not in group]
        work += len(sources) * len(dests) * len(links)
        if not sources or not dests or not links or work > WINDOW_WORK:
            continue
        a = [_alpha_from(backward, {k.src: 0.0}) for k in links]  # a[ℓ][s]
        c = [_alpha_from(forward, {k.dst: k.latency_s}) for k in links]  # c[ℓ][d]
        least = {(s, d): min(a[i].get(s, math.inf) + c[i].get(d, math.inf)
                             for i in range(len(links))) for s in sources for d in dests}
        for theta in sorted({x for x in least.values() if x < math.inf}):
            pairs = [p for p, x in least.items() if theta <= x < math.inf]
            rate = sum(k.bandwidth_Bps * min(
                len({a[i][s] for s, d in pairs if s in a[i] and d in c[i]}),
                len({c[i][d] for s, d in pairs if s in a[i] and d in c[i]}))
                for i, k in enumerate(links))
            if rate > 0 and theta + len(pairs) * per_pair_bytes / rate > best:
                best, tail = theta + len(pairs) * per_pair_bytes / rate, theta
    return best, tail


WALK_HOPS = 20_000  # hops of the members' short routes walk_window_s weighs at most:
#                     beyond, the part is left out (its LP is solved WALK_STEPS times)
WALK_STEPS = 16  # bisection steps between the α-distance and twice it
WALK_PATHS = 20_000  # partial paths the route search walks at most: few members far apart
#                      in a large fabric have more short paths that reach none of them
#                      than a compile can walk (a 12×12 switch mesh, two GPUs at corners)

_Route = tuple[int, float, tuple[tuple[tuple[str, str], float], ...]]  # pair, α, (link, a)


def _short_routes(topology: Topology, members: list[str], budget: float) -> list[_Route] | None:
    """Every simple path from a member to another whose α adds up to less than
    ``budget``: its pair's index, its α and each hop's (link, α of the hops before it);
    None beyond :data:`WALK_HOPS` hops in all or :data:`WALK_PATHS` paths walked."""
    inside = set(members)
    pair = {(s, d): i for i, (s, d) in enumerate((s, d) for s in members for d in members
                                                  if s != d)}
    routes: list[_Route] = []
    hops = walked = 0
    for s in members:
        stack: list[tuple[str, float, frozenset[str], tuple]] = [(s, 0.0, frozenset({s}), ())]
        while stack:
            v, spent, seen, path = stack.pop()
            for k in topology.out_links(v):
                total = spent + k.latency_s
                if total >= budget or k.dst in seen:
                    continue
                walk = (*path, (k.key, spent))
                if k.dst in inside:
                    hops += len(walk)
                    if hops > WALK_HOPS:
                        return None
                    routes.append((pair[(s, k.dst)], total, walk))
                walked += 1
                if walked > WALK_PATHS:
                    return None
                stack.append((k.dst, total, seen | {k.dst}, walk))
    return routes


def _walk_feasible(topology: Topology, npairs: int, routes: list[_Route],
                   per_pair_bytes: float, T: float) -> bool | None:
    """Can the routes with α under ``T`` carry every pair's bytes, each link's bytes of
    windows inside ``[a, T − c]`` within ``b·(T − c − a)``? (:func:`alltoall_walk_window`);
    None where the LP did not solve in its share of the time."""
    from ortools.linear_solver import pywraplp

    lp = pywraplp.Solver.CreateSolver("GLOP")
    share = lp.NumVar(0, 1, "s")  # of every pair's bytes, carried
    rows = [lp.Constraint(0, 0) for _ in range(npairs)]
    for row in rows:
        row.SetCoefficient(share, -1)
    hops: dict[tuple[str, str], list[tuple[float, float, pywraplp.Variable]]] = defaultdict(list)
    for p, alpha, walk in routes:
        if alpha >= T:
            continue
        y = lp.NumVar(0, 1, "")
        rows[p].SetCoefficient(y, 1)
        for key, a in walk:
            hops[key].append((a, alpha - a, y))
    for key, on in hops.items():
        b = topology.link(*key).bandwidth_Bps
        for a in {x for x, _, _ in on}:
            for c in {x for _, x, _ in on}:
                if T - c - a <= 0:
                    continue  # no window lies in an empty interval
                row = lp.Constraint(-lp.infinity(), b * (T - c - a) / per_pair_bytes)
                for x, z, y in on:
                    if x >= a and z >= c:
                        row.SetCoefficient(y, 1)
    lp.Maximize(share)
    budget = left() * SHARES.bound_lp / WALK_STEPS
    if budget < math.inf:
        lp.SetTimeLimit(max(1, int(budget * 1000)))
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return share.solution_value() >= 1 - 1e-6


def alltoall_walk_window(topology: Topology, members: list[str], per_pair_bytes: float,
                         above: float = 0.0) -> float:
    """AlltoAll's ``walk_window_s`` (module docstring): the largest ``T`` found by
    bisection between the members' α-distance ``D`` (or ``above``, a bound known
    already, if larger) and ``2D`` at which the routes with α under ``T`` cannot carry
    every pair's bytes; 0 where they cannot at ``2D`` either (bandwidth dominates), can at the
    start (nothing to add: one LP solved, not a bisection's), there are more routes
    than :data:`WALK_HOPS` hops or paths to walk than :data:`WALK_PATHS`, no α between
    the members, or no time to solve.

    >>> from te_ccl.spec.topology import load_topology
    >>> dgx1 = load_topology("dgx1")  # 1.4 µs of α, then 0.32 µs for the far pairs
    >>> round(alltoall_walk_window(dgx1, dgx1.gpus, 8000) * 1e6, 3)
    1.72
    """
    npairs = len(members) * (len(members) - 1)
    if not 0 < npairs <= WALK_HOPS:
        return 0.0  # a route a pair at least: too many
    lo = _alpha_distance(topology, members, members)
    hi = 2 * lo
    if hi <= 0:
        return 0.0
    routes = _short_routes(topology, members, hi)
    if routes is None:
        return 0.0
    lo = max(lo, above)
    if lo >= hi or _walk_feasible(topology, npairs, routes, per_pair_bytes, lo) is not False:
        return 0.0  # nothing above what is known
    if not _walk_feasible(topology, npairs, routes, per_pair_bytes, hi):
        return 0.0  # bandwidth dominates: the other parts speak (and this one rescales)
    for _ in range(WALK_STEPS):
        mid = (lo + hi) / 2
        feasible = _walk_feasible(topology, npairs, routes, per_pair_bytes, mid)
        if feasible is None:
            break
        lo, hi = (lo, mid) if feasible else (mid, hi)
    return lo


def _farthest_seeded(adjacency: dict[str, list[tuple[float, str]]], seeds: dict[str, float],
                     targets: set[str]) -> tuple[float, int]:
    """(the largest α-distance from the seeds to a target they reach, how many targets
    are that far); (0, 0) if they reach none. Targets within rounding of the farthest
    count with it, so the distance given is the least of theirs (never more than each)."""
    dist = _alpha_from(adjacency, seeds)
    reached = [dist[v] for v in targets if v in dist]
    if not reached:
        return 0.0, 0
    far = max(reached)
    counted = [x for x in reached if x >= far * (1 - 1e-12)]
    return min(counted), len(counted)


class _CutShort(Exception):
    """A bound the deadline cut short: returned, never remembered (an exception is not
    cached), so a later compile with time computes it whole."""

    def __init__(self, bound: Bound) -> None:
        super().__init__()
        self.bound = bound


def lower_bound(topology: Topology, collective: Collective) -> Bound:
    """The best of the bandwidth and latency bounds for ``collective`` on ``topology``
    (remembered: a compile asks for it while searching and again for its report). Past
    the compile's deadline each part stops with what it has proved: still a lower
    bound, weaker, and not remembered."""
    try:
        return _remembered(topology, collective)
    except _CutShort as cut:
        return cut.bound


@lru_cache(maxsize=16)
def _remembered(topology: Topology, collective: Collective) -> Bound:
    """:func:`lower_bound` whole, remembered; :class:`_CutShort` where the deadline cut it."""
    cut: list[str] = []
    token = _CUT.set(cut)
    try:
        bound = _compute(topology, collective)
    finally:
        _CUT.reset(token)
    if cut:
        raise _CutShort(bound)
    return bound


lower_bound.cache_clear = _remembered.cache_clear  # type: ignore[attr-defined]


def _compute(topology: Topology, collective: Collective) -> Bound:
    """The parts of :func:`lower_bound` and the largest."""
    K = CollectiveKind
    kind = collective.kind
    if kind is K.CUSTOM:
        parts = _custom_parts(topology, collective)
        return Bound(max(parts.values()), parts)
    members = _members(topology, collective)
    root = [topology.gpu(collective.root)] if collective.root is not None else []
    if kind in (K.BROADCAST, K.REDUCE):
        parts, fixed = _broadcast_parts(topology if kind is K.BROADCAST else topology.reversed(),
                                        root[0], members, float(collective.size_bytes))
    else:
        parts, fixed = _bandwidth_parts(topology, collective), {}
    if kind is K.ALLTOALL and len(members) > 1:
        parts["cut_alpha_s"], fixed["cut_alpha_s"] = alltoall_cut_alpha(
            topology, members, collective.size_bytes / len(members))
        parts["window_s"], fixed["window_s"] = alltoall_window(
            topology, members, collective.size_bytes / len(members))
        parts["walk_window_s"] = alltoall_walk_window(
            topology, members, collective.size_bytes / len(members), max(parts.values()))
    sources = root if kind in (K.BROADCAST, K.SCATTER) else members
    targets = root if kind in (K.REDUCE, K.GATHER) else members
    parts["alpha_s"] = fixed["alpha_s"] = _alpha_distance(topology, sources, targets)
    return Bound(max(parts.values()), parts, fixed)
