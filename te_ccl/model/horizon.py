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

from te_ccl.errors import SolverError
from te_ccl.model.deadline import check
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
    if any(set(d.sources) | set(d.destinations) != members for d in demands):
        return 0
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
    from te_ccl.bounds import allgather_cut_ratio

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
    """A source with ``n`` partial sums to send starts the last at epoch ``s_n`` or later
    (its out-links start ``cap·ceil((s + 1)/k)`` by epoch ``s``); that partial still needs
    ``to_root`` epochs to the root and the sum its ``tail`` to the farthest destination."""
    count: Counter = Counter()
    lag: dict[str, int] = {}
    paths: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for d in problem.demands:
        r = problem.reductions.get(d.chunk)
        if r is None:
            continue
        if r.root not in paths:
            paths[r.root] = (distances(problem, {r.root: 0}, reverse=True),
                             distances(problem, {r.root: 0}))
        to_root, from_root = paths[r.root]
        tail = max((from_root[v] for v in ten.unmet(d) if v in from_root), default=0)
        for s in r.sources:
            if s != r.root and s in to_root:
                count[s] += 1
                lag[s] = min(lag.get(s, INF), to_root[s] + tail)
    lo = 0
    for v, n in count.items():
        check()
        links = [lt for lt in problem.timings.values() if lt.key[0] == v]
        s = 0
        while sum(lt.capacity * -(-(s + 1) // lt.occupancy) for lt in links) < n:
            s += 1
        lo = max(lo, s + lag[v])
    return lo
