"""Rings through GPUs: a Hamiltonian cycle found by a bounded search, or why there is none.

A ring sends every chunk from each GPU to the next, and a reduced partial must not pass
through another GPU on the way (that GPU would add its own partial again), so consecutive
GPUs are linked directly or through switches only (:func:`ring_neighbours`): on a
switchless topology the ring is a GPU-to-GPU cycle, on a switched one it may cross
switches between GPUs. Such a cycle is NP-hard to find in general, so :func:`hamiltonian`
is a depth-first search with Warnsdorff's rule (fewest onward choices first) that cuts
branches leaving a GPU without a way in or out, stopped after a number of steps. When it
finds none, :func:`why_no_cycle` looks for the proofs that none exists (a GPU with fewer
than two neighbours, GPUs that cannot reach each other, a GPU every path between two
others passes, two sides of unequal size with every link between them), so a refusal
says why wherever a proof is cheap.
"""

from __future__ import annotations

from collections.abc import Iterator

import networkx as nx

from te_ccl.baselines.plan import BaselineError
from te_ccl.topology.model import Topology

__all__ = ["NoRing", "RingSearchGaveUp", "RING_SEARCH_WORK", "hamiltonian", "ring_cycle",
           "ring_neighbours", "why_no_cycle"]

RING_SEARCH_WORK = 2_000_000
"""The search's bound per graph tried, in GPUs added to or taken off the path plus GPUs
visited checking that the rest can still be reached (a fraction of a second): a ring
through a 1024-GPU torus takes about 600,000."""


class NoRing(BaselineError):
    """No ring through the GPUs exists (exit code 2: the topology cannot run it)."""


class RingSearchGaveUp(NoRing):
    """The bounded search found no ring and proved none impossible (exit code 3, like a
    solver giving up)."""

    exit_code = 3


def ring_neighbours(topology: Topology, gpus: list[str]) -> dict[str, list[str]]:
    """GPUs each GPU reaches by a direct link (listed first) or through switches only."""
    members, out = set(gpus), {}
    for g in gpus:
        direct = list(dict.fromkeys(k.dst for k in topology.out_links(g) if k.dst in members))
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


class _Search:
    """The state of :func:`hamiltonian`'s depth-first search: the path from the start and,
    for each GPU off it, how many ways in (predecessors off the path, or its end) and out
    (successors off the path, or its start) it still has. A GPU left with none, a start
    left without a way back, or GPUs the end can no longer reach make a dead branch.
    ``onward`` (successors off the path) is also Warnsdorff's count."""

    def __init__(self, gpus: list[str], adj: dict[str, list[str]]) -> None:
        self.n, self.adj, self.start = len(gpus), adj, gpus[0]
        self.pos = {g: i for i, g in enumerate(gpus)}
        self.pred: dict[str, list[str]] = {g: [] for g in gpus}
        for u in gpus:
            for v in adj[u]:
                self.pred[v].append(u)
        self.back = set(self.pred[self.start])  # the GPUs that can close the ring
        self.ways_in = {g: len(self.pred[g]) for g in gpus}
        self.onward = {g: len(adj[g]) - (self.start in adj[g]) for g in gpus}
        self.path, self.on = [self.start], {self.start}
        self.work = 0  # steps and GPUs visited checking reach: what the budget bounds

    def options(self, x: str) -> Iterator[str]:
        """Next GPUs after ``x``, Warnsdorff's way: fewest onward choices first."""
        cand = [v for v in self.adj[x] if v not in self.on]
        return iter(sorted(cand, key=lambda v: (self.onward[v], self.pos[v])))

    def extend(self, v: str) -> bool:
        """Append ``v``; False if that leaves no cycle to complete (then :meth:`retract`)."""
        u, on = self.path[-1], self.on
        self.path.append(v)
        on.add(v)
        for w in self.adj[u]:
            self.ways_in[w] -= 1
        for w in self.pred[v]:
            self.onward[w] -= 1
        if len(self.path) == self.n:
            return v in self.back
        return (all(self.ways_in[w] for w in self.adj[u] if w not in on)
                and all(self.onward[w] or w in self.back for w in self.pred[v] if w not in on)
                and any(w not in on for w in self.back) and self.reaches_all(v))

    def reaches_all(self, v: str) -> bool:
        """The path can still go on from ``v`` to every GPU off it."""
        seen, todo, left = {v}, [v], self.n - len(self.path)
        while todo and len(seen) <= left:
            for w in self.adj[todo.pop()]:
                if w not in self.on and w not in seen:
                    seen.add(w)
                    todo.append(w)
        self.work += len(seen)
        return len(seen) > left

    def retract(self) -> None:
        v = self.path.pop()
        self.on.discard(v)
        for w in self.adj[self.path[-1]]:
            self.ways_in[w] += 1
        for w in self.pred[v]:
            self.onward[w] += 1


def hamiltonian(gpus: list[str], adj: dict[str, list[str]],
                budget: int) -> tuple[list[str] | None, int]:
    """A cycle through every GPU along ``adj`` (successor lists), from ``gpus[0]``, and the
    work spent; ``(None, work < budget)`` means the whole search space held none.

    Cutting a dead branch never drops a cycle, so the cycle found is the first in
    Warnsdorff's order, whatever the budget: the same ring on every run and machine.
    """
    if len(gpus) <= 2:
        return list(gpus), 0
    s = _Search(gpus, adj)
    stack = [s.options(s.start)]
    while stack and s.work < budget:
        s.work += 1
        v = next(stack[-1], None)
        if v is None:
            stack.pop()
            if stack:
                s.retract()
        elif not s.extend(v):
            s.retract()
        elif len(s.path) == s.n:
            return s.path, s.work
        else:
            stack.append(s.options(v))
    return None, s.work


def why_no_cycle(gpus: list[str], adj: dict[str, list[str]]) -> str | None:
    """A short proof that no cycle through every GPU follows ``adj``, or None."""
    g = nx.DiGraph()
    g.add_nodes_from(gpus)
    g.add_edges_from((u, v) for u in gpus for v in adj[u])
    for x in gpus:
        if not g.out_degree(x):
            return f"{x} reaches no other GPU directly or through switches only"
        if not g.in_degree(x):
            return f"no other GPU reaches {x} directly or through switches only"
    if not nx.is_strongly_connected(g):
        groups = sorted((sorted(c, key=gpus.index) for c in nx.strongly_connected_components(g)),
                        key=lambda c: gpus.index(c[0]))
        return (f"{groups[0][0]} and {groups[1][0]} do not reach each other both ways without "
                f"passing through another GPU ({len(groups)} such groups)")
    if len(gpus) < 3:
        return None
    u = g.to_undirected()
    for x in gpus:
        if u.degree(x) < 2:
            return f"{x} has only one neighbour, {next(iter(u[x]))}"
    cut = next(iter(sorted(nx.articulation_points(u), key=gpus.index)), None)
    if cut is not None:
        rest = u.subgraph(y for y in gpus if y != cut)
        a, b = sorted((min(c, key=gpus.index) for c in nx.connected_components(rest)),
                      key=gpus.index)[:2]
        return f"every path between {a} and {b} passes through {cut}"
    if nx.is_bipartite(u):
        side, other = nx.bipartite.sets(u)
        if len(side) != len(other):
            small, big = sorted((len(side), len(other)))
            return (f"its links join two sides of {small} and {big} GPUs, and a ring "
                    "alternates between the sides")
    return None


def ring_cycle(topology: Topology, gpus: list[str], *, both_ways: bool = False,
               budget: int = RING_SEARCH_WORK) -> list[str]:
    """A ring through ``gpus``: consecutive GPUs linked directly or through switches only
    (with ``both_ways``, in both directions, for rings that send both ways round).

    Tried in turn: direct links of the highest bandwidth only (NCCL's rings over doubled
    NVLinks), then of each lower bandwidth, then any link or switch-only path. Without a
    ring, raises :class:`NoRing` with the proof that none exists (looked for only then:
    on a thousand GPUs behind one switch it takes seconds), else
    :class:`RingSearchGaveUp`.
    """
    gpus = list(gpus)
    if len(gpus) < 2:
        return gpus
    adj = ring_neighbours(topology, gpus)
    reach = {x: set(adj[x]) for x in gpus}
    if both_ways:
        adj = {x: [v for v in adj[x] if x in reach[v]] for x in gpus}
        reach = {x: set(adj[x]) for x in gpus}
    members = set(gpus)
    speeds = sorted({k.bandwidth_Bps for x in gpus for k in topology.out_links(x)
                     if k.dst in members}, reverse=True)
    tiers = [{x: list(dict.fromkeys(k.dst for k in topology.out_links(x)
                                    if k.dst in reach[x] and k.bandwidth_Bps >= speed))
              for x in gpus} for speed in speeds]
    for tier in [*tiers, adj]:
        cycle, used = hamiltonian(gpus, tier, budget)
        if cycle is not None:
            return cycle
    where = (f"no ring through the {len(gpus)} GPUs of {topology.name} (each linked to the "
             f"next{' and back' if both_ways else ''} directly or through switches only)")
    reason = why_no_cycle(gpus, adj)
    if reason is None and used < budget:
        reason = "none exists (every order of them searched)"
    if reason is not None:
        raise NoRing(f"{where}: {reason}")
    raise RingSearchGaveUp(f"{where} found by a search bounded at {budget:,} steps (none "
                           "proven impossible either)")
