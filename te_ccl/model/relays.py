"""Relay buffers: the chunks a GPU with a buffer limit cannot avoid relaying, and the
relayed chunks a finished schedule leaves at each GPU.

A GPU *relays* a chunk it receives that is neither its own nor meant for it. The
runtime gives every such chunk its own scratch slot for the whole collective (MSCCL's
``s_chunks``: slots are not reused), so a relayed chunk counts against the GPU's
``buffer_bytes`` from its arrival to the end, whether or not it was already forwarded.
This is the rule of the model's relay rows (:func:`te_ccl.model.constraints.relay`),
of the independent checker and of the reported scratch bytes.

Time does not help a relay limit: a chunk that cannot reach a destination without
passing GPU ``n`` takes one of ``n``'s slots in every schedule. Such chunks are those
for which ``n`` dominates a destination in the network from the chunk's holders (every
path to it passes through ``n``), one dominator tree per set of holders.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

from te_ccl.deadline import checked
from te_ccl.errors import SolverError
from te_ccl.model.problem import Demand, Problem
from te_ccl.schedule import Schedule

__all__ = ["forced_relays", "check_relay_room", "relay_overflow"]

_ROOT = ("holders",)  # a virtual node feeding every holder of a chunk


def forced_relays(problem: Problem) -> dict[str, set[int]]:
    """GPU with a buffer limit → the chunks that cannot reach some unmet destination
    without passing it (and would count as relayed there)."""
    limited = set(problem.relay_limit)
    holding: dict[int, set[str]] = defaultdict(set)  # held at epoch 0 or under way
    for c, n in problem.state.held:
        holding[c].add(n)
    for c, n, _ in problem.state.incoming:
        holding[c].add(n)
    by_holders: dict[frozenset[str], list[Demand]] = defaultdict(list)
    for d in problem.demands:
        if holding[d.chunk] and limited - set(d.sources) - set(d.destinations):
            by_holders[frozenset(holding[d.chunk])].append(d)
    graph = nx.DiGraph(list(problem.timings))
    forced: dict[str, set[int]] = defaultdict(set)
    for holders, demands in checked(by_holders.items(), every=1):
        graph.add_edges_from((_ROOT, h) for h in holders)
        idom = nx.immediate_dominators(graph, _ROOT)
        graph.remove_node(_ROOT)
        for d in demands:
            counts = limited - set(d.sources) - set(d.destinations) - holders
            for v in set(d.destinations) - holders:
                n = idom.get(v, _ROOT)  # absent: unreachable, which the horizon bound names
                while n != _ROOT:
                    if n in counts:
                        forced[n].add(d.chunk)
                    n = idom[n]
    return dict(forced)


def check_relay_room(problem: Problem) -> None:
    """Raise :class:`SolverError` when a GPU must relay more chunks than its buffer holds."""
    if not problem.relay_limit:
        return
    already: dict[str, int] = defaultdict(int, problem.state.relayed)
    for n, chunks in sorted(forced_relays(problem).items()):
        limit = problem.relay_limit[n]
        if already[n] + len(chunks) > limit:
            raise SolverError(
                f"infeasible: {len(chunks)} chunk(s) of {problem.chunk_bytes:.6g} bytes reach "
                f"their destinations only through {n}, whose buffer "
                f"({problem.topology.node(n).buffer_bytes} bytes) holds {limit} relayed "
                f"chunk(s){f' besides the {already[n]} it already relays' if already[n] else ''}"
                " (a relayed chunk keeps its scratch slot to the end)")


def relay_overflow(schedule: Schedule) -> str | None:
    """Why ``schedule`` breaks a GPU's buffer limit (the first such GPU), else None."""
    topo = schedule.topology
    limited = {n.name for n in topo.nodes if n.is_gpu and n.buffer_bytes is not None}
    if not limited:
        return None
    chunks = {c.id: c for c in schedule.collective.chunks()}
    relayed: dict[str, set[int]] = defaultdict(set)
    for t in schedule.transfers:
        c = chunks.get(t.chunk)
        if t.dst in limited and c is not None:
            r = topo.rank(t.dst)
            if r not in c.sources and r not in c.destinations:
                relayed[t.dst].add(t.chunk)
    for n, ids in sorted(relayed.items()):
        need, limit = len(ids) * schedule.chunk_bytes, topo.node(n).buffer_bytes
        if need > limit:
            return (f"{n} relays {len(ids)} chunk(s) ({need:.6g} bytes) over its buffer "
                    f"limit of {limit} bytes")
    return None
