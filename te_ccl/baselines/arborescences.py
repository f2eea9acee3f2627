"""Spanning arborescences from a root that together use its whole out-bandwidth.

Edmonds' theorem: a network whose every GPU is ``k`` link units from the root (unit: the
greatest common divisor of the links' bandwidths, a link of two units is two parallel
links) has ``k`` spanning arborescences from the root sharing no unit, so a Broadcast
cut into ``k`` shares flows at ``k`` units, the min-cut rate, the bound's. The
link-disjoint trees of :mod:`te_ccl.baselines.disjoint` give one tree per link out of
the root, each at the rate of its slowest link: on DGX-1 (25 and 50 GB/s NVLinks, 150
GB/s out of each GPU) four trees at 25 GB/s, two thirds of the rate.

They are grown by Lovász's proof of the theorem: an arborescence takes, shallowest first,
an edge into a GPU it does not reach yet whose unit the others can spare (every GPU
stays ``k − 1`` units from the root without it: a max-flow per GPU), which one always is.
"""

from __future__ import annotations

import functools
import math

import networkx as nx

from te_ccl.baselines.plan import TEMPLATE, BaselineError
from te_ccl.deadline import check
from te_ccl.topology.model import Topology

__all__ = ["MAX_UNITS", "unit_arborescences"]

MAX_UNITS = 12  # link units out of the root beyond which they are not packed
MAX_GPUS = 32  # GPUs beyond which not either: a max-flow per GPU per edge tried

Tree = dict[str, str]  # node -> parent


def unit_arborescences(topology: Topology, root: str, members: list[str],
                       more_than: int = 0) -> list[Tree]:
    """``k`` spanning out-trees of ``members`` from ``root`` over direct member-to-member
    links, no link carrying more trees than its units (module docstring); raises
    :class:`BaselineError` where a GPU is not reached, the root has more than
    :data:`MAX_UNITS` units, there are more than :data:`MAX_GPUS` GPUs or ``k`` is not
    above ``more_than`` (checked before the trees are grown: a max-flow per GPU per edge
    tried).

    >>> from te_ccl.topology.generators import ring
    >>> [sorted(t.items()) for t in unit_arborescences(ring(3, 1.0), "g0", ["g0", "g1", "g2"])]
    [[('g1', 'g0'), ('g2', 'g1')], [('g1', 'g2'), ('g2', 'g0')]]
    """
    if len(members) > MAX_GPUS:
        raise BaselineError(f"the arborescences are packed for up to {MAX_GPUS} GPUs")
    inside = set(members)
    links = [k for k in topology.links
             if k.src in inside and k.dst in inside and k.dst != root and k.src != k.dst]
    unit = functools.reduce(math.gcd, (round(k.bandwidth_Bps) for k in links), 0)
    if not unit:
        raise BaselineError(f"{root} has no direct link to another of the collective's GPUs "
                            f"in {topology.name}")
    units = {(k.src, k.dst): round(k.bandwidth_Bps) // unit for k in links}
    count = _reach(units, root, members)
    if count < 1 or count > MAX_UNITS:
        raise BaselineError(f"no arborescences in {topology.name}: every GPU is {count} link "
                            f"units from {root}, where 1 to {MAX_UNITS} are packed")
    if count <= more_than:
        raise BaselineError(f"no more arborescences than {more_than} from {root} in "
                            f"{topology.name}")
    order = {v: i for i, v in enumerate(members)}
    trees = []
    for t in range(count):
        tree: Tree = {}
        level = {root: 0}
        while len(level) < len(members):
            check(TEMPLATE)
            edges = sorted(((level[u], order[v], u, v) for (u, v), n in units.items()
                            if n and u in level and v not in level))
            for *_, u, v in edges:
                units[(u, v)] -= 1
                if _reach(units, root, members) >= count - t - 1:
                    tree[v], level[v] = u, level[u] + 1
                    break
                units[(u, v)] += 1
            else:
                raise BaselineError(f"no arborescence {t + 1} of {count} from {root} in "
                                    f"{topology.name}")
        trees.append(tree)
    return trees


def _reach(units: dict[tuple[str, str], int], root: str, members: list[str]) -> int:
    """The fewest link units from ``root`` to a member (its max-flow to the nearest)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(members)
    graph.add_edges_from((u, v, {"capacity": n}) for (u, v), n in units.items() if n)
    return min(int(nx.maximum_flow_value(graph, root, v)) for v in members if v != root)
