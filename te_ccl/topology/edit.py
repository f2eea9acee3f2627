"""Derive a topology from another: links removed or slowed, GPUs removed.

What a network looks like after a failure (a link down, a NIC running at half rate, a
GPU gone), so a schedule can be compiled again for it (``teccl compile --from``). Links
are named by their end nodes: ``a:b`` means every link between ``a`` and ``b`` (both
directions), ``a>b`` only the link from ``a`` to ``b``. Removing a GPU removes its
links; a switch left without links goes too. The result must still let every GPU reach
every other one.

The derived topology keeps no generator facts (``meta``: dims, boxes): a torus without a
link is no longer a torus, and methods that rely on the symmetry must not assume it.

>>> from te_ccl.topology.generators import ring
>>> t = edit_topology(ring(4, 25e9, 0.7e-6), TopologyEdit(
...     scale_links=(("g0:g1", 0.5),), without_links=("g2>g3",)))
>>> t.link("g0", "g1").bandwidth_Bps, t.link("g1", "g0").bandwidth_Bps, t.has_link("g2", "g3")
(12500000000.0, 12500000000.0, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from te_ccl.errors import SpecError
from te_ccl.topology.model import Link, Topology
from te_ccl.units import MIN_BANDWIDTH_BPS

__all__ = ["TopologyEdit", "edit_topology", "parse_scale"]


@dataclass(frozen=True)
class TopologyEdit:
    """The changes, as the user named them: ``without_links`` and the link names of
    ``scale_links`` are ``a:b`` or ``a>b``; ``scale_links`` pairs them with a bandwidth
    factor (> 0)."""

    without_links: tuple[str, ...] = ()
    scale_links: tuple[tuple[str, float], ...] = ()
    without_gpus: tuple[str, ...] = ()
    name: str | None = None


def parse_scale(text: str) -> tuple[str, float]:
    """``c:d=0.5`` → ``("c:d", 0.5)``; the factor multiplies the links' bandwidth.

    >>> parse_scale("g0:g1=0.25")
    ('g0:g1', 0.25)
    """
    name, eq, factor = text.rpartition("=")
    try:
        value = float(factor) if eq else 0.0
    except ValueError:
        value = 0.0
    if not name or not value > 0 or value == float("inf"):
        raise SpecError(f"expected LINK=FACTOR with a factor > 0 (such as g0:g1=0.5), got "
                        f"{text!r}", key="--scale-link")
    return name, value


def _keys(topo: Topology, text: str, flag: str) -> list[tuple[str, str]]:
    """The directed links ``text`` names in ``topo`` (``a:b`` both ways, ``a>b`` one)."""
    one_way = ">" in text
    a, sep, b = text.partition(">" if one_way else ":")
    if not sep or not a or not b:
        raise SpecError(f"expected a link as NODE:NODE (both directions) or NODE>NODE (one), "
                        f"got {text!r}", key=flag)
    for end in (a, b):
        if end not in topo.node_by_name:
            raise SpecError(f"unknown node {end!r} in {text!r}; expected a node of "
                            f"{topo.name} (teccl topo show {topo.name})", key=flag)
    keys = [k for k in ((a, b),) + (() if one_way else ((b, a),)) if topo.has_link(*k)]
    if not keys:
        raise SpecError(f"{topo.name} has no link {'from' if one_way else 'between'} {a!r} "
                        f"{'to' if one_way else 'and'} {b!r}", key=flag)
    return keys


def edit_topology(topo: Topology, edit: TopologyEdit) -> Topology:
    """``topo`` with ``edit`` applied; :class:`SpecError` (naming the flag) for a node or
    link it does not have, or a result in which some GPU cannot reach another."""
    for gpu in edit.without_gpus:
        if gpu not in topo.node_by_name or not topo.node(gpu).is_gpu:
            raise SpecError(f"expected a GPU of {topo.name}, got {gpu!r}", key="--without-gpu")
        if edit.without_gpus.count(gpu) > 1:  # a slip for another GPU, most likely
            raise SpecError(f"expected each GPU once, got {gpu!r} twice", key="--without-gpu")
    removed = {k for text in edit.without_links for k in _keys(topo, text, "--without-link")}
    factor: dict[tuple[str, str], float] = {}
    for text, f in edit.scale_links:
        for k in _keys(topo, text, "--scale-link"):
            factor[k] = factor.get(k, 1.0) * f
    for (a, b), f in factor.items():
        if not MIN_BANDWIDTH_BPS <= topo.link(a, b).bandwidth_Bps * f < math.inf:
            raise SpecError(f"the link {a}>{b} at {f:g}x its bandwidth is not a rate a "
                            "topology holds (finite, at least 1B/s)", key="--scale-link")
    gone = set(edit.without_gpus)
    links = [Link(k.src, k.dst, k.bandwidth_Bps * factor.get(k.key, 1.0), k.latency_s)
             for k in topo.links
             if k.key not in removed and k.src not in gone and k.dst not in gone]
    ends = {n for k in links for n in k.key}
    nodes = [n for n in topo.nodes if n.name not in gone and (n.is_gpu or n.name in ends)]
    out = Topology.build(edit.name or topo.name, nodes, links, source=topo.source,
                         description=topo.description)
    _check_connected(out, edit)
    return out


def _check_connected(topo: Topology, edit: TopologyEdit) -> None:
    """Every GPU reaches every other one, or a :class:`SpecError` naming the pair."""
    what = ("--without-gpu" if edit.without_gpus and not edit.without_links
            else "--without-link" if not edit.without_gpus else "--without-link/--without-gpu")
    if topo.ngpus < 2:
        raise SpecError(f"expected at least 2 GPUs left, got {topo.ngpus}", key=what)
    g = topo.graph()
    first = topo.gpus[0]
    reach, back = nx.descendants(g, first), nx.ancestors(g, first)
    for other in topo.gpus[1:]:
        for src, dst, ok in ((first, other, other in reach), (other, first, other in back)):
            if not ok:
                raise SpecError(f"the edit disconnects the network: GPU {src!r} can no "
                                f"longer reach GPU {dst!r}", key=what)
