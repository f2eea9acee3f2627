"""Cheap lower bounds on the number of epochs, where the horizon search starts.

* distance: a destination cannot hold a chunk before the sum of link delays from the
  nearest holder;
* in-capacity: destination ``v`` needs ``n_v`` chunks; link ``l`` into it can deliver at
  most ``cap_l·ceil((H − d_l + 1)/k_l)`` of them by epoch ``H``;
* partial sums (chunks reduced in forward time): a source's last partial starts no
  earlier than its out-links allow, then travels to the root, and the sum on to the
  farthest destination;
* cut (fresh AllGather- or Broadcast-shaped problems): since ``d_l ≥ k_l`` a link delivers
  at most ``H·cap_l/k_l`` chunks by epoch ``H``, so ``H ≥ c·|S∩R| / rate⁺(S)`` for every
  node set ``S`` leaving out a member (the cut bound of :mod:`te_ccl.bounds` with rates in
  chunks per epoch), and ``H ≥ n / min_v maxflow(root, v)`` for a broadcast of ``n`` chunks.
"""

from __future__ import annotations

import math
from collections import Counter

import networkx as nx

from te_ccl.bounds import allgather_cut_ratio
from te_ccl.deadline import check
from te_ccl.errors import SolverError
from te_ccl.model.problem import Problem
from te_ccl.model.ten import INF, TimeExpandedNetwork, distances
from te_ccl.topology.model import Link, Topology

__all__ = ["horizon_lower_bound"]


def _deliverable(problem: Problem, node: str, horizon: int) -> int:
    total = 0
    for lt in problem.timings.values():
        if lt.key[1] == node and horizon >= lt.delay:
            total += lt.capacity * -(-(horizon - lt.delay + 1) // lt.occupancy)
    return total


def _rates(problem: Problem) -> Topology:
    links = [Link(u, v, lt.capacity / lt.occupancy) for (u, v), lt in problem.timings.items()]
    return Topology.build("rates", problem.topology.nodes, links)


def _cut_bound(problem: Problem) -> int:
    """The cut bound in epochs when every chunk starts at one member and all others want it."""
    demands, state = problem.demands, problem.state
    if not demands or state.incoming or state.busy or any(len(d.sources) != 1 for d in demands):
        return 0
    members = set(demands[0].sources) | set(demands[0].destinations)
    if len(members) < 2 or any(set(d.sources) | set(d.destinations) != members
                               for d in demands):
        return 0  # (a Reduce's demands have no destination: its root holds the sum)
    if any(n not in d.sources for d in demands for (c, n) in state.held if c == d.chunk):
        return 0
    counts = Counter(d.sources[0] for d in demands)
    rates = _rates(problem)
    if len(counts) == 1:
        (root, n), = counts.items()
        g = rates.graph()
        flow = min(nx.maximum_flow_value(g, root, v, capacity="bandwidth")
                   for v in members - {root})
        return _ceil(n / flow)
    if set(counts) != members:
        return 0
    ratio, _ = allgather_cut_ratio(rates, sorted(members))
    return _ceil(min(counts.values()) * ratio)


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9)


def horizon_lower_bound(problem: Problem) -> int:
    ten = TimeExpandedNetwork(problem, 0)
    lo, need = 0, Counter()
    for d in problem.demands:
        unmet = ten.unmet(d)
        first = ten.earliest(d)
        for v in unmet:
            if v not in first:
                raise SolverError(f"infeasible: chunk {d.chunk} cannot reach {v} from "
                                  f"{', '.join(d.sources)} (no path)")
            lo = max(lo, first[v])
            need[v] += 1
    for v, n in need.items():
        check()
        h = lo
        while _deliverable(problem, v, h) < n:
            h += 1
        lo = h
    return max(lo, _cut_bound(problem), _partials_bound(problem, ten))


def _partials_bound(problem: Problem, ten: TimeExpandedNetwork) -> int:
    """Partial sums must leave every node set ``S`` that holds a source but not the root.

    For ``S`` the cone of a node ``v`` (``v`` and every node whose paths to the root all
    pass through ``v``; a lone GPU is its own cone): with ``n`` chunks to get out, the last
    leaves no earlier than epoch ``s_n`` (a link out of ``S`` whose tail a partial reaches
    at ``e`` at the earliest starts ``cap·ceil((s − e + 1)/k)`` by epoch ``s``), then needs
    ``d + to_root`` to the root and the sum its ``tail`` to the farthest destination.
    """
    by_root: dict[str, list[tuple[frozenset[str], tuple[str, ...]]]] = {}
    for d in problem.demands:
        r = problem.reductions.get(d.chunk)
        if r is not None:
            by_root.setdefault(r.root, []).append((frozenset(r.sources), ten.unmet(d)))
    out_links: dict[str, list] = {}
    for (u, _), lt in problem.timings.items():
        out_links.setdefault(u, []).append(lt)
    lo = 0
    for root, chunks in by_root.items():
        to_root = distances(problem, {root: 0}, reverse=True)
        from_root = distances(problem, {root: 0})
        tail = min(max((from_root.get(v, 0) for v in unmet), default=0) for _, unmet in chunks)
        for v in to_root:
            check()
            if v == root:
                continue
            cone = _cone(problem, root, v)
            inside = set().union(*(sources & cone for sources, _ in chunks))
            n = sum(1 for sources, _ in chunks if sources & cone)
            links = [lt for u in cone for lt in out_links.get(u, ()) if lt.key[1] not in cone]
            if not n or not links:
                continue
            lag = min(lt.delay + to_root.get(lt.key[1], INF) for lt in links)
            # a link out of the cone starts no partial before one can reach its tail
            first = distances(problem, dict.fromkeys(inside, 0))
            opens = [(lt, first.get(lt.key[0], INF)) for lt in links]
            s = 0
            while sum(lt.capacity * -(-(s - e + 1) // lt.occupancy) for lt, e in opens
                      if s >= e) < n:
                s += 1
            lo = max(lo, s + lag + tail)
    return lo


def _cone(problem: Problem, root: str, v: str) -> frozenset[str]:
    """``v`` and the nodes that cannot reach ``root`` without passing through ``v``."""
    into: dict[str, list[str]] = {}
    for (a, b) in problem.timings:
        into.setdefault(b, []).append(a)
    seen, todo = {root}, [root]
    while todo:
        for a in into.get(todo.pop(), ()):
            if a != v and a not in seen:
                seen.add(a)
                todo.append(a)
    nodes = {n for link in problem.timings for n in link}
    return frozenset(nodes - seen)
