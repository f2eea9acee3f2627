"""The time-expanded network: which transfer variables exist for a horizon of ``H`` epochs.

``x[c, l, t] ∈ {0, 1}``: chunk ``c`` starts on link ``l = (u, v)`` in epoch ``t`` and is
held at ``v`` from epoch ``t + d_l``. Only useful variables exist:

* ``t ≥ earliest(c, u)`` — the fewest epochs (sum of link delays) for ``c`` to reach ``u``;
* ``t + d_l + to_dest(c, v) ≤ H`` — from ``v`` it can still reach an unmet destination;
* never into a node that holds ``c`` at epoch 0, never out of the only destination of ``c``;
* never into or out of a node barred to ``c``'s job (:meth:`Problem.barred_for`).

A chunk with a :class:`~te_ccl.model.problem.Reduction` also has partial-sum transfers
``y[c, l, t]`` (keys ``("y", c, l, t)``) from its sources toward its root, only on links
that bring a partial closer to the root (and its ``x`` only on links that carry the sum
farther from it: no detours, which keeps an AllReduce model about half the size), never
out of the root, ending early enough for the sum to reach every destination by ``H``, and
completion variables ``z[c, t]`` (keys ``("z", c, t)``: the root holds the sum from
epoch ``t``), which count as arrivals of ``c`` at the root for the forwarding rows.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.model.problem import build_problem
>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("line", [Node("a"), Node("b"), Node("c")],
...     [Link("a", "b", 1e9), Link("b", "a", 1e9), Link("b", "c", 1e9), Link("c", "b", 1e9)])
>>> p = build_problem(topo, Collective(CollectiveKind.BROADCAST, 1000, (0, 1, 2), root=0))
>>> sorted(TimeExpandedNetwork(p, 2).x)
[(0, ('a', 'b'), 0), (0, ('a', 'b'), 1), (0, ('b', 'c'), 1)]
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from functools import cached_property

from te_ccl.deadline import checked
from te_ccl.errors import SolverError
from te_ccl.model.problem import Demand, Problem

__all__ = ["TimeExpandedNetwork", "XKey", "YKey", "distances"]

XKey = tuple[int, tuple[str, str], int]
YKey = tuple[str, int, tuple[str, str], int]
INF = 1 << 30
MAX_VARIABLES = 5_000_000  # ~1 GB of Python keys and rows: beyond, refuse rather than swap


def distances(problem: Problem, starts: dict[str, int], *, reverse: bool = False,
              avoid: frozenset[str] = frozenset()) -> dict[str, int]:
    """Fewest epochs from ``starts`` (node → start epoch) to every node along link delays,
    passing through no node of ``avoid`` (one may be reached, or start)."""
    out_edges = defaultdict(list)
    for (u, v), lt in problem.timings.items():
        if reverse:
            u, v = v, u
        out_edges[u].append((v, lt.delay))
    best = dict(starts)
    heap = [(t, n) for n, t in starts.items()]
    heapq.heapify(heap)
    while heap:
        t, n = heapq.heappop(heap)
        if t > best.get(n, INF) or (n in avoid and n not in starts):
            continue
        for v, d in out_edges[n]:
            if t + d < best.get(v, INF):
                best[v] = t + d
                heapq.heappush(heap, (t + d, v))
    return best


class TimeExpandedNetwork:
    """Variable keys and arrival sums of ``problem`` for ``horizon`` epochs (0 … H)."""

    def __init__(self, problem: Problem, horizon: int, start_limit: int | None = None,
                 slack: int = 0) -> None:
        self.problem = problem
        self.horizon = horizon
        self.start_limit = horizon if start_limit is None else start_limit
        self.slack = slack
        self.x: list[XKey] = []
        self.y: list[YKey] = []
        self.completion: dict[int, range] = {}
        for d in checked(problem.demands):
            self.x.extend(self._chunk_vars(d))
            if d.chunk in problem.reductions:
                self.y.extend(self._reduce_vars(d))
            if len(self.x) + len(self.y) > MAX_VARIABLES:
                raise SolverError(f"the model at horizon {horizon} would have more than "
                                  f"{MAX_VARIABLES} transfer variables (the most one model "
                                  "may hold); use fewer chunks or a coarser --epoch")

    def unmet(self, d: Demand) -> tuple[str, ...]:
        """Destinations that neither hold the chunk nor have it under way."""
        coming = {n for c, n, _ in self.problem.state.incoming if c == d.chunk}
        return tuple(v for v in d.destinations
                     if not self.problem.holds(d.chunk, v) and v not in coming)

    def earliest(self, d: Demand) -> dict[str, int]:
        p = self.problem
        starts = {n: 0 for (c, n) in p.state.held if c == d.chunk}
        for c, n, t in p.state.incoming:
            if c == d.chunk and t < starts.get(n, INF):
                starts[n] = t
        r = p.reductions.get(d.chunk)
        if r is not None:
            starts[r.root] = self._earliest_sum(r.sources, r.root)
        return distances(p, starts)

    def _earliest_sum(self, sources: tuple[str, ...], root: str) -> int:
        """The first epoch the root can hold the sum: every partial must reach it."""
        to_root = distances(self.problem, {root: 0}, reverse=True)
        return max((to_root.get(s, INF) for s in sources if s != root), default=0)

    def _reduce_vars(self, d: Demand) -> list[YKey]:
        """Partial-sum transfers of a reduced chunk, and its completion epochs at the root."""
        p, r = self.problem, self.problem.reductions[d.chunk]
        unmet = self.unmet(d)
        from_root = distances(p, {r.root: 0})
        tail = max((from_root.get(v, INF) for v in unmet), default=0)
        done = range(self._earliest_sum(r.sources, r.root), self.horizon - tail + 1)
        self.completion[d.chunk] = done
        first = distances(p, dict.fromkeys(r.sources, 0))
        barred = p.barred_for(d.chunk)  # partials move closer to the root on allowed paths
        to_root = distances(p, {r.root: 0}, reverse=True, avoid=barred)
        out = []
        for key, lt in p.timings.items():
            u, v = key
            if u == r.root or u not in first or to_root.get(v, INF) >= to_root.get(u, INF):
                continue
            if u in barred or v in barred:
                continue
            last = done.stop - 1 - lt.delay - to_root[v]
            out.extend(("y", d.chunk, key, t) for t in range(first[u], last + 1))
        return out

    def _chunk_vars(self, d: Demand) -> list[XKey]:
        p, H = self.problem, self.horizon
        unmet = self.unmet(d)
        if not unmet:
            return []
        first = self.earliest(d)
        to_dest = distances(p, {v: 0 for v in unmet}, reverse=True)
        lone = d.destinations[0] if len(d.destinations) == 1 else None
        out = []
        away = (distances(p, {p.reductions[d.chunk].root: 0})
                if d.chunk in p.reductions else None)
        barred = p.barred_for(d.chunk)
        for key, lt in p.timings.items():
            u, v = key
            if p.holds(d.chunk, v) or u == lone or u not in first or v not in to_dest:
                continue
            if u in barred or v in barred:
                continue
            if away is not None and away.get(v, INF) <= away.get(u, INF):
                continue
            last = H - lt.delay - to_dest[v]
            # a window of starts (rounds): switches without buffer may forward up to
            # ``slack`` epochs past it, so what enters them leaves in the same round
            cut = self.start_limit - 1 + self.slack
            if v not in p.buffered_nodes:
                last = min(last, cut - lt.delay)
            last = min(last, self.start_limit - 1 if u in p.buffered_nodes else cut)
            out.extend((d.chunk, key, t) for t in range(first[u], last + 1))
        return out

    @property
    def transfer_keys(self) -> list:
        """Every transfer variable: copies ``x``, then partial sums ``y``."""
        return self.x + self.y

    @cached_property
    def arrivals(self) -> dict[tuple[int, str, int], list[XKey]]:
        """(chunk, node, epoch) → the x variables arriving there then."""
        out: dict[tuple[int, str, int], list] = defaultdict(list)
        for key in self.x:
            c, (u, v), t = key
            out[(c, v, t + self.problem.timings[(u, v)].delay)].append(key)
        for c, done in self.completion.items():
            root = self.problem.reductions[c].root
            for t in done:
                out[(c, root, t)].append(("z", c, t))
        return out

    @cached_property
    def pending(self) -> dict[tuple[int, str, int], int]:
        """(chunk, node, epoch) → arrivals already under way from earlier rounds."""
        out: dict[tuple[int, str, int], int] = defaultdict(int)
        for c, n, t in self.problem.state.incoming:
            out[(c, n, t)] += 1
        return out

    @cached_property
    def sends(self) -> dict[tuple[int, str, int], list[XKey]]:
        """(chunk, node, epoch) → the x variables leaving the node then."""
        out: dict[tuple[int, str, int], list[XKey]] = defaultdict(list)
        for key in self.x:
            c, (u, _), t = key
            out[(c, u, t)].append(key)
        return out

    @cached_property
    def per_link(self) -> dict[tuple[str, str], dict[int, list[XKey]]]:
        """link → epoch → the transfer variables (x and y) starting on it then."""
        out: dict[tuple[str, str], dict[int, list]] = defaultdict(lambda: defaultdict(list))
        for key in self.x:
            out[key[1]][key[2]].append(key)
        for key in self.y:
            out[key[2]][key[3]].append(key)
        return out

    @cached_property
    def sender_nodes(self) -> dict[int, dict[str, range]]:
        """chunk → node → the epochs in which it may send the chunk (nodes that send it at all)."""
        span: dict[int, dict[str, tuple[int, int]]] = defaultdict(dict)
        for c, (u, _), t in self.x:
            lo, hi = span[c].get(u, (INF, -1))
            span[c][u] = (min(lo, t), max(hi, t))
        return {c: {u: range(lo, hi + 1) for u, (lo, hi) in d.items()} for c, d in span.items()}
