"""Lower bounds on a collective's finish time, for the "ratio to bound" of every compile.

Formulas (PRODUCT.md "Lower bounds"), with ``R`` the participating GPUs, ``N = |R|``,
``M`` the collective's ``size_bytes`` and ``B⁺(S)`` the bandwidth leaving node set ``S``:

* AllGather: ``(M/N) · max_{S ⊉ R, S∩R ≠ ∅} |S∩R| / B⁺(S)`` (the ForestColl cut bound),
  computed exactly by Dinkelbach's method: for a ratio ``λ``, one min-cut per excluded GPU
  ``t`` finds ``max |S∩R| − λ·B⁺(S)``; ``λ`` is raised to that set's ratio until no set
  beats it (a handful of rounds; OR-Tools' max-flow, under a second at 1024 GPUs).
  Beyond 2048 GPUs the best single-node set or complement is used: a valid bound, equal
  to the exact one on meshes and tori.
* ReduceScatter: the same on the reversed graph; AllReduce: RS + AG where only the
  members combine partials. Where some other node can (a switch with ``reduce``, as on
  FRED, or a GPU outside the collective) a reduced stream crosses a cut once, and RS + AG
  is no bound (FRED-D: each NPU sends and receives M once, RS + AG counts it
  ``2(N−1)/N`` times); the bound is then the largest of RS, AG and the separating cut:
  every element's sum depends on both sides of any cut ``S`` with members on each, so
  ``M`` bytes cross it each way: ``M / min_S min(B⁺(S), B⁻(S))``, the least max-flow
  between two members (:func:`separating_cut_bandwidth`).
* AlltoAll: the max-concurrent-flow LP (GLOP; commodities aggregated per source, which is
  exact) when it has ≤ 200k variables, else the link-time bound (every pair's bytes keep
  the links of their cheapest path busy, ``Σ bytes/b``, shared by all links: equal to the
  LP on a torus) and the per-node ``(N−1)M/(N·min(B_in, B_out))``.
* Broadcast from ``r``: ``M / min_v maxflow(r, v)``; Reduce: the same reversed.
  Gather/Scatter: the root receives (sends) ``(N−1)M/N`` through its own links.
* Latency: every bound is at least the α-weighted distance the data must travel
  (α-diameter over ``R``, α-eccentricity of the root). The two are combined with ``max``,
  not a sum: a sum is not a valid bound in general (the far pair may be served at t=0
  while the cut is busy).

α semantics: those of :mod:`te_ccl.schedule` (α delays arrival, links are busy ``bytes/b``).

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.topology import Link, Node, Topology
>>> t = Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> round(lower_bound(t, Collective(CollectiveKind.ALLGATHER, 2000, (0, 1))).seconds, 12)
1e-06
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx
import numpy as np

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.topology.model import Topology

__all__ = ["Bound", "lower_bound", "allgather_cut_ratio", "alltoall_time", "alltoall_link_time",
           "reduces_outside_members", "separating_cut_bandwidth"]

_LP_MAX_VARIABLES = 200_000
EXACT_CUT_MAX_GPUS = 2048


@dataclass(frozen=True)
class Bound:
    """``seconds``: the bound; ``parts``: each ingredient in seconds (and the cut size)."""

    seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # read-only: bounds are shared


def _members(topology: Topology, collective: Collective) -> list[str]:
    return [topology.gpu(r) for r in collective.ranks]


def _best_set(g: nx.DiGraph, members: list[str], lam: float) -> tuple[float, set[str]]:
    """max over S (some member outside) of |S∩R| − λ·B⁺(S), and the S attaining it.

    One min-cut per excluded member ``t``: a source feeds every member 1, links carry
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
    for t in members:
        if flow.solve(source, index[t]) != flow.OPTIMAL:
            raise ArithmeticError(f"max-flow to {t} failed")
        value = whole - flow.optimal_flow()
        if value > best:
            best = value
            best_set = {names[i] for i in flow.get_source_side_min_cut() if i != source}
    return best / scale, best_set


def _max_flows(g: nx.DiGraph, pairs: list[tuple[str, str]]) -> list[float]:
    """The max-flow (bandwidth) of each (source, sink) pair, by OR-Tools on one network:
    capacities scaled to integers as in :func:`_best_set` (rounding moves a flow by less
    than 1e-12 of its value)."""
    from ortools.graph.python import max_flow

    index = {v: i for i, v in enumerate(g.nodes)}
    arcs = list(g.edges(data="bandwidth"))
    scale = float(1 << 62) / max(sum(bw for _, _, bw in arcs), 1e-300)
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(np.array([index[u] for u, _, _ in arcs], dtype=np.int32),
                                np.array([index[v] for _, v, _ in arcs], dtype=np.int32),
                                np.array([round(bw * scale) for _, _, bw in arcs],
                                         dtype=np.int64))
    out = []
    for a, b in pairs:
        if flow.solve(index[a], index[b]) != flow.OPTIMAL:
            raise ArithmeticError(f"max-flow from {a} to {b} failed")
        out.append(flow.optimal_flow() / scale)
    return out


def _node_cut_ratio(g: nx.DiGraph, members: list[str]) -> tuple[float, set[str]]:
    """The best of the sets {v} and V∖{v} (v in R): a valid, cheap lower bound on the cut ratio."""
    nodes = set(g.nodes)
    best, arg = 0.0, set()
    for v in members:
        into = sum(bw for _, _, bw in g.in_edges(v, data="bandwidth"))
        out = sum(bw for _, _, bw in g.out_edges(v, data="bandwidth"))
        for ratio, s in (((len(members) - 1) / into, nodes - {v}), (1 / out, {v})):
            if ratio > best:
                best, arg = ratio, s
    return best, arg


def allgather_cut_ratio(topology: Topology, members: list[str]) -> tuple[float, set[str]]:
    """max |S∩R| / B⁺(S) over S ⊉ R with S∩R ≠ ∅ (seconds per byte), and a maximising S.

    Exact up to ``EXACT_CUT_MAX_GPUS`` members (each Dinkelbach round is one min-cut per
    member); beyond, the best single-node set or complement — still a valid lower bound,
    and the exact one on meshes and tori, where a GPU's own in-links are the bottleneck.
    """
    g = topology.graph()
    if len(members) > EXACT_CUT_MAX_GPUS:
        return _node_cut_ratio(g, members)
    out_bw = {v: sum(bw for _, _, bw in g.out_edges(v, data="bandwidth")) for v in members}
    start = max(members, key=lambda v: 1 / out_bw[v] if out_bw[v] else float("inf"))
    lam, arg = 1 / out_bw[start], {start}
    for _ in range(50):
        value, s = _best_set(g, members, lam)
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
        return max(_farthest(forward, s, targets)[0] for s in sources)
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


def _farthest(adjacency: dict[str, list[tuple[float, str]]], s: str,
              targets: list[str]) -> tuple[float, str]:
    """(distance, node) of the target farthest from ``s`` (Dijkstra); unreachable ones
    count as 0, as the other parts of the bound deal with them."""
    dist, heap = {s: 0.0}, [(0.0, s)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for w, v in adjacency[u]:
            if d + w < dist.get(v, math.inf):
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return max((dist.get(t, 0.0), t) for t in targets)


def alltoall_time(topology: Topology, members: list[str], per_pair_bytes: float) -> float | None:
    """Max-concurrent-flow LP: the least T such that every pair moves its bytes in T."""
    from ortools.linear_solver import pywraplp

    if len(members) * len(topology.links) > _LP_MAX_VARIABLES:
        return None
    scale = max(k.bandwidth_Bps for k in topology.links)  # solve in units of 1 byte, max bw 1
    lp = pywraplp.Solver.CreateSolver("GLOP")
    T = lp.NumVar(0, lp.infinity(), "T")
    f = {(s, k.key): lp.NumVar(0, lp.infinity(), "") for s in members for k in topology.links}
    for s in members:
        for n in topology.nodes:
            net = (sum(f[(s, k.key)] for k in topology.out_links(n.name))
                   - sum(f[(s, k.key)] for k in topology.in_links(n.name)))
            if n.name == s:
                lp.Add(net == len(members) - 1)
            elif n.name in members:
                lp.Add(net == -1)
            else:
                lp.Add(net == 0)
    for k in topology.links:
        lp.Add(sum(f[(s, k.key)] for s in members) <= k.bandwidth_Bps / scale * T)
    lp.Minimize(T)
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return None
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
    for s in members:
        dist = nx.single_source_dijkstra_path_length(g, s)
        total += sum(dist[v] for v in members if v != s)
    return total * per_pair_bytes / len(topology.links)


def _ag_part(topology: Topology, members: list[str], per_rank: float) -> float:
    if len(members) < 2:
        return 0.0
    return per_rank * allgather_cut_ratio(topology, members)[0]


def _broadcast_part(topology: Topology, root: str, members: list[str], size: float) -> float:
    flows = _max_flows(topology.graph(), [(root, v) for v in members if v != root])
    return size / min(flows) if flows else 0.0


def _node_part(topology: Topology, node: str, size: float, incoming: bool) -> float:
    links = topology.in_links(node) if incoming else topology.out_links(node)
    return size / sum(k.bandwidth_Bps for k in links)


def reduces_outside_members(topology: Topology, members: list[str]) -> bool:
    """Whether a node other than the members can combine partials: a reducing switch,
    or a GPU that is not in the collective (GPUs add what they receive)."""
    inside = set(members)
    return any(n.can_reduce if not n.is_gpu else n.name not in inside
               for n in topology.nodes)


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
        return min(min(sum(bw for _, _, bw in g.out_edges(v, data="bandwidth")),
                       sum(bw for _, _, bw in g.in_edges(v, data="bandwidth")))
                   for v in members)
    return min(_max_flows(g, [p for v in members[1:] for p in ((first, v), (v, first))]))


def _symmetric(topology: Topology) -> bool:
    """Every link ``u → v`` has a twin ``v → u`` of the same bandwidth and latency."""
    links = sorted((k.src, k.dst, k.bandwidth_Bps, k.latency_s) for k in topology.links)
    return links == sorted((v, u, b, a) for u, v, b, a in links)


def _allreduce_part(topology: Topology, members: list[str], size: float) -> dict[str, float]:
    """RS + AG where only members reduce; else the largest of RS, AG and the separating cut."""
    n = len(members)
    ag = _ag_part(topology, members, size / n)
    # the reversed graph of a fabric whose links all come in equal pairs is the same graph
    rs = ag if _symmetric(topology) else _ag_part(topology.reversed(), members, size / n)
    if n < 2 or not reduces_outside_members(topology, members):
        return {"cut_s": rs + ag}
    return {"cut_s": max(rs, ag),
            "separating_cut_s": size / separating_cut_bandwidth(topology, members)}


@lru_cache(maxsize=16)
def lower_bound(topology: Topology, collective: Collective) -> Bound:
    """The best of the bandwidth and latency bounds for ``collective`` on ``topology``
    (remembered: a compile asks for it while searching and again for its report)."""
    K = CollectiveKind
    members, kind, n = _members(topology, collective), collective.kind, collective.nranks
    size, rev = float(collective.size_bytes), topology.reversed()
    root = topology.gpu(collective.root) if collective.root is not None else None
    parts: dict[str, float] = {}
    if kind is K.ALLGATHER:
        parts["cut_s"] = _ag_part(topology, members, size / n)
    elif kind is K.REDUCESCATTER:
        parts["cut_s"] = _ag_part(rev, members, size / n)
    elif kind is K.ALLREDUCE:
        parts.update(_allreduce_part(topology, members, size))
    elif kind is K.ALLTOALL:
        node = max(_node_part(topology, v, size * (n - 1) / n, inc)
                   for v in members for inc in (True, False)) if n > 1 else 0.0
        parts["per_node_s"] = node
        flow = alltoall_time(topology, members, size / n) if n > 1 else None
        if flow is not None:
            parts["concurrent_flow_s"] = flow
        elif n > 1:  # the LP is too large: its weaker, cheap relaxation
            parts["link_time_s"] = alltoall_link_time(topology, members, size / n)
    elif kind in (K.BROADCAST, K.REDUCE):
        parts["maxflow_s"] = _broadcast_part(topology if kind is K.BROADCAST else rev,
                                             root, members, size)
    elif kind in (K.GATHER, K.SCATTER) and n > 1:
        parts["root_links_s"] = _node_part(topology, root, size * (n - 1) / n,
                                           kind is K.GATHER)
    sources = [root] if root is not None and kind is not K.REDUCE else members
    targets = [root] if kind in (K.REDUCE, K.GATHER) else members
    if kind is K.REDUCE or kind is K.GATHER:
        sources = members
    parts["alpha_s"] = _alpha_distance(topology, sources, targets)
    return Bound(max(parts.values(), default=0.0), parts)
