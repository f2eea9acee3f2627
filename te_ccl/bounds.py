"""Lower bounds on a collective's finish time, for the "ratio to bound" of every compile.

Formulas (PRODUCT.md "Lower bounds"), with ``R`` the participating GPUs, ``N = |R|``,
``M`` the collective's ``size_bytes`` and ``B⁺(S)`` the bandwidth leaving node set ``S``:

* AllGather: ``(M/N) · max_{S ⊉ R, S∩R ≠ ∅} |S∩R| / B⁺(S)`` (the ForestColl cut bound),
  computed exactly by Dinkelbach's method: for a ratio ``λ``, one min-cut per excluded GPU
  ``t`` finds ``max |S∩R| − λ·B⁺(S)``; ``λ`` is raised to that set's ratio until no set
  beats it (a handful of rounds). Beyond 256 GPUs (minutes of min-cuts) the best
  single-node set or complement is used: a valid bound, equal to the exact one on the
  shipped meshes and tori.
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

from dataclasses import dataclass, field

import networkx as nx

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.topology.model import Topology

__all__ = ["Bound", "lower_bound", "allgather_cut_ratio", "alltoall_time", "alltoall_link_time",
           "reduces_outside_members", "separating_cut_bandwidth"]

_LP_MAX_VARIABLES = 200_000
EXACT_CUT_MAX_GPUS = 256


@dataclass(frozen=True)
class Bound:
    """``seconds``: the bound; ``parts``: each ingredient in seconds (and the cut size)."""

    seconds: float
    parts: dict[str, float] = field(default_factory=dict)


def _members(topology: Topology, collective: Collective) -> list[str]:
    return [topology.gpu(r) for r in collective.ranks]


def _best_set(g: nx.DiGraph, members: list[str], lam: float) -> tuple[float, set[str]]:
    """max over S (some member outside) of |S∩R| − λ·B⁺(S), and the S attaining it."""
    best, best_set = 0.0, set()
    for t in members:
        h = nx.DiGraph()
        for u, v, bw in g.edges(data="bandwidth"):
            h.add_edge(u, v, capacity=lam * bw)
        for v in members:
            h.add_edge("__s", v, capacity=1.0)
        h.add_edge(t, "__t")  # no capacity attribute: infinite
        cut, (side, _) = nx.minimum_cut(h, "__s", "__t")
        value = len(members) - cut
        if value > best + 1e-12:
            best, best_set = value, side - {"__s"}
    return best, best_set


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


def _alpha_distance(topology: Topology, sources: list[str], targets: list[str]) -> float:
    g = topology.graph()
    worst = 0.0
    for s in sources:
        dist = nx.single_source_dijkstra_path_length(g, s, weight="latency")
        worst = max(worst, max(dist.get(t, 0.0) for t in targets))
    return worst


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
    g = topology.graph()
    flows = [nx.maximum_flow_value(g, root, v, capacity="bandwidth") for v in members if v != root]
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
    return min(nx.maximum_flow_value(g, a, b, capacity="bandwidth")
               for v in members[1:] for a, b in ((first, v), (v, first)))


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


def lower_bound(topology: Topology, collective: Collective) -> Bound:
    """The best of the bandwidth and latency bounds for ``collective`` on ``topology``."""
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
