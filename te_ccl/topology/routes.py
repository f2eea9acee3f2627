"""The path a send takes when its two ends share no link.

A runtime's send between two GPUs without a direct link goes through the fabric the
way its transport routes it: the fastest path, each hop costing ``1/b + α``. Both the
schedules that route sends (the templates) and the replays that time a file need this,
so it belongs to the topology rather than to either.

>>> from te_ccl.topology.generators import ring
>>> fastest_path(ring(4, 50e9), "g0", "g2")
['g0', 'g1', 'g2']
"""

from __future__ import annotations

import networkx as nx

from te_ccl.topology.model import Topology

__all__ = ["fastest_path"]


def fastest_path(topology: Topology, src: str, dst: str, *, via_gpus: bool = True,
                 graph: nx.DiGraph | None = None) -> list[str] | None:
    """Node path ``src … dst``: the direct link, else the fastest path, through switches
    only unless ``via_gpus``; None where there is none. ``graph``: ``topology.graph()``,
    if the caller keeps it across calls."""
    if topology.has_link(src, dst):
        return [src, dst]
    full = graph if graph is not None else topology.graph()
    g = full if via_gpus else full.subgraph(
        [x for x in full if not full.nodes[x]["node"].is_gpu or x in (src, dst)])
    try:
        return nx.shortest_path(g, src, dst,
                                weight=lambda u, v, d: 1.0 / d["bandwidth"] + d["latency"])
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return None
