"""Topologies: the :class:`Topology` graph and the generators that build common fabrics."""

from te_ccl.topology.model import Link, Node, NodeKind, Topology

__all__ = ["Link", "Node", "NodeKind", "Topology"]
