"""What every importer produces: one machine (GPUs, switches, links, NICs) and its report.

A :class:`Machine` is a single node as read from a dump. Its NICs are kept apart from
the topology: inside one node they lead nowhere, so :meth:`Machine.topology` leaves
them out, and :func:`te_ccl.importers.cluster.compose` wires them into a fabric.

The :class:`ImportReport` is the sanity report printed with every import: what was read,
what was assumed (each number the dump did not carry, with its source), what was
ignored (unknown elements and attributes, with their line) and the warnings: quirks of
real dumps (a link to the GPU itself, a device listed twice) that are skipped or read
one way rather than refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from te_ccl.errors import SpecError
from te_ccl.topology.model import Link, Node, NodeKind, Topology

__all__ = ["ImportReport", "Nic", "Machine", "switch_node"]


@dataclass
class ImportReport:
    """Lines of the sanity report, grouped; duplicates are dropped, order is kept.

    ``warnings`` are full lines (``file:line: what``): the command prints each on its
    own, and :meth:`lines` lists them only when asked (the YAML's header keeps them).
    """

    read: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, group: str, line: str) -> None:
        lines = getattr(self, group)
        if line not in lines:
            lines.append(line)

    def lines(self, *, warnings: bool = False) -> list[str]:
        groups = [("read", self.read), ("assumed", self.assumed), ("ignored", self.ignored)]
        if warnings and self.warnings:
            groups.append(("warnings", self.warnings))
        out = []
        for title, lines in groups:
            out.append(f"{title}:" + ("" if lines else " nothing"))
            out += [f"  - {line}" for line in lines]
        return out


@dataclass(frozen=True)
class Nic:
    """A network port: ``bandwidth_Bps`` to the fabric, reached from ``gpus`` over PCIe."""

    name: str
    bandwidth_Bps: float
    gpus: tuple[str, ...]
    pcie_Bps: float


def switch_node(name: str, *, copy: bool = False) -> Node:
    """A forwarding node: PCIe switches, CPUs and NICs do not copy; NVSwitch does (multicast)."""
    return Node(name, NodeKind.SWITCH, can_copy=copy, can_reduce=False, has_buffer=False)


@dataclass
class Machine:
    """One node read from a dump; ``file`` names it in errors."""

    name: str
    file: str
    source: str
    gpus: list[str] = field(default_factory=list)
    switches: list[Node] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    report: ImportReport = field(default_factory=ImportReport)
    description: str = ""

    def add_both(self, a: str, b: str, bandwidth_Bps: float, latency_s: float) -> None:
        self.links += [Link(a, b, bandwidth_Bps, latency_s), Link(b, a, bandwidth_Bps, latency_s)]

    def gpus_joined(self) -> bool:
        """Whether the links so far let every GPU reach every other GPU."""
        g = nx.DiGraph()
        g.add_nodes_from(self.gpus)
        g.add_edges_from(k.key for k in self.links)
        comp = next(c for c in nx.strongly_connected_components(g) if self.gpus[0] in c)
        return set(self.gpus) <= comp

    def topology(self) -> Topology:
        """The node as a topology (NICs left out); GPUs must reach each other."""
        used = {k.src for k in self.links} | {k.dst for k in self.links}
        nodes = [Node(g) for g in self.gpus] + [s for s in self.switches if s.name in used]
        topo = Topology.build(self.name, nodes, self.links, source=self.source,
                              description=self.description)
        check_connected(topo, self.file)
        return topo


def check_connected(topo: Topology, file: str) -> None:
    """Every GPU must reach every other GPU; a dump that fails this is refused (exit 2)."""
    if topo.ngpus < 2:
        raise SpecError(f"expected at least 2 GPUs, found {topo.ngpus}", file=file)
    g = topo.graph()
    comp = next(c for c in nx.strongly_connected_components(g) if topo.gpus[0] in c)
    lost = [x for x in topo.gpus if x not in comp]
    if lost:
        raise SpecError(f"GPU {lost[0]!r} cannot reach GPU {topo.gpus[0]!r} over the links "
                        "the file describes; expected every GPU to reach every other", file=file)
