"""Links too slow for any good schedule, left out before epochs are derived from latencies.

The epoch τ follows the links: ``fastest`` keeps every hop within 64 epochs of the slowest
link, and the scale backend's time grid keeps one within ``MAX_DELAY_EPOCHS``. A single
link of 10⁶ s latency among links of a microsecond then makes τ so long that the others
start millions of chunks an epoch (a time grid that large ran out of memory) and every
schedule's timing loses its resolution. Such a link is of no use: a *serial* schedule —
one delivery after another, each along the fastest route, no two sharing a link —
finishes within ``U = deliveries × W``, where ``W`` bounds the fastest route between two
ranks (through one rank: the slowest route into it plus the slowest out of it), and
anything crossing a link of latency ``α > U`` arrives after ``U``. So links with
``α > U`` are left out: the fastest schedule never needs them, and every route ``W``
counts stays (a link on the only route between two ranks has ``α ≤ W``).

GPUs with a buffer limit keep every link: a serial schedule's relays add up there.

>>> from te_ccl.collective.model import Collective, CollectiveKind
>>> from te_ccl.topology.model import Link, Node, Topology
>>> both = lambda u, v, lat=0.0: [Link(u, v, 1e9, lat), Link(v, u, 1e9, lat)]
>>> far = Topology.build("tri", [Node("a"), Node("b"), Node("c")],
...                      both("a", "b") + both("b", "c") + both("c", "a", 1e6))
>>> kept, note = without_slow_links(far, Collective(CollectiveKind.ALLGATHER, 3000, (0, 1, 2)))
>>> sorted(k.key for k in kept.links)
[('a', 'b'), ('b', 'a'), ('b', 'c'), ('c', 'b')]
>>> note
'left out 2 links slower than a whole schedule over the others: c→a, a→c (latency 1e+06 s or more; one delivery after another takes at most 2.4e-05 s)'
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from te_ccl.collective.model import Collective
from te_ccl.model.footprint import deliveries
from te_ccl.topology.model import Topology

__all__ = ["serial_finish", "without_slow_links"]

_SHOWN = 3  # links a note names


def serial_finish(topology: Topology, collective: Collective) -> float:
    """Seconds within which one delivery after another, each along the fastest route
    between the ranks (relaying through ranks and switches only), finishes; infinite
    where a rank cannot reach another that way."""
    members = {topology.gpu(r) for r in collective.ranks}
    graph = nx.DiGraph()
    chunk = collective.chunk_bytes
    graph.add_weighted_edges_from(
        (k.src, k.dst, k.transfer_time_s(chunk)) for k in topology.links
        if not ({k.src, k.dst} - members - set(topology.switches)))
    hub = topology.gpu(collective.ranks[0])
    if hub not in graph:
        return float("inf") if len(members) > 1 else 0.0
    out = nx.single_source_dijkstra_path_length(graph, hub)
    into = nx.single_source_dijkstra_path_length(graph.reverse(copy=False), hub)
    if any(m not in out or m not in into for m in members):
        return float("inf")
    return deliveries(collective) * (max(out[m] for m in members) + max(into[m] for m in members))


def without_slow_links(topology: Topology, collective: Collective
                       ) -> tuple[Topology, str | None]:
    """``topology`` without the links no fast schedule of ``collective`` uses (see the
    module docstring), and a note naming them (itself and None where there are none)."""
    times = [k.transfer_time_s(collective.chunk_bytes) for k in topology.links]
    if (not times or not deliveries(collective) or max(k.latency_s for k in topology.links)
            <= 2 * deliveries(collective) * min(times)):  # below any serial schedule's time
        return topology, None
    if any(topology.node(topology.gpu(r)).buffer_bytes is not None for r in collective.ranks):
        return topology, None
    bound = serial_finish(topology, collective)
    slow = [k for k in topology.links if k.latency_s > bound]
    if not slow:
        return topology, None
    names = ", ".join(f"{k.src}→{k.dst}" for k in slow[:_SHOWN])
    more = f" and {len(slow) - _SHOWN} more" if len(slow) > _SHOWN else ""
    note = (f"left out {len(slow)} link{'s' if len(slow) > 1 else ''} slower than a whole "
            f"schedule over the others: {names}{more} (latency "
            f"{min(k.latency_s for k in slow):.3g} s{' or more' if len(slow) > 1 else ''}; "
            f"one delivery after another takes at most {bound:.3g} s)")
    return replace(topology, links=tuple(k for k in topology.links if k.latency_s <= bound)), note
