"""The network every other stage reads: GPU and switch nodes joined by directed links.

A :class:`Topology` is immutable. Links are directed and unique per ordered node pair:
parallel links in the input are summed (bandwidth adds, latency is the largest) when the
topology is built, so ``(src, dst)`` names a link everywhere downstream.

GPU ranks are positions in :attr:`Topology.gpus` (declaration order), which is the
rank numbering of the MSCCL file and of the collective's ``ranks``.

>>> t = Topology.build("pair", [Node("g0"), Node("g1")],
...                    [Link("g0", "g1", 50e9, 0.7e-6), Link("g1", "g0", 50e9, 0.7e-6)])
>>> t.gpus, t.rank("g1"), t.link("g0", "g1").bandwidth_Bps
(('g0', 'g1'), 1, 50000000000.0)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property

import networkx as nx

__all__ = ["NodeKind", "Node", "Link", "Topology"]


class NodeKind(str, Enum):
    GPU = "gpu"
    SWITCH = "switch"


@dataclass(frozen=True)
class Node:
    """A GPU (endpoint with memory) or a switch (forwards within the next epoch).

    ``buffer_bytes`` caps what a GPU may hold for relaying (None: unlimited).
    ``can_copy``: a switch may multicast one incoming chunk to several links.
    ``can_reduce``: a switch may add chunks arriving on several links (FRED).
    ``has_buffer``: a switch may keep a chunk across epochs (store and forward).
    ``fred_ports``/``fred_m``: set when the switch is a FRED_m(P) (see te_ccl.fred).
    ``nvls``: the copy and reduction are NVLink SHARP's (multimem loads and stores on an
    NVSwitch): only an output that issues multimem operations drives them (see
    :func:`te_ccl.compiler.drives_in_switch`); every other output uses the switch to
    forward. An NVLS switch copies and reduces, links only to GPUs (one NVLink domain)
    and reduces at the GPUs' link bandwidth.
    """

    name: str
    kind: NodeKind = NodeKind.GPU
    buffer_bytes: int | None = None
    can_copy: bool = True
    can_reduce: bool = False
    has_buffer: bool = False
    fred_ports: int | None = None
    fred_m: int | None = None
    nvls: bool = False

    @property
    def is_gpu(self) -> bool:
        return self.kind is NodeKind.GPU


@dataclass(frozen=True)
class Link:
    """A directed link; ``bandwidth_Bps`` in bytes per second, ``latency_s`` (α) in seconds."""

    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.src, self.dst)

    def transfer_time_s(self, n_bytes: float) -> float:
        """α-β time of one message: the link is busy ``n_bytes/bandwidth``, arrival α later."""
        return n_bytes / self.bandwidth_Bps + self.latency_s


@dataclass(frozen=True)
class Topology:
    """Nodes and directed links, with where the numbers come from."""

    name: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    source: str = ""
    description: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def build(cls, name: str, nodes: Iterable[Node], links: Iterable[Link], *,
              source: str = "", description: str = "", meta: dict | None = None) -> Topology:
        """Build a topology, summing parallel links (bandwidths add, latency is the max)."""
        merged: dict[tuple[str, str], Link] = {}
        for link in links:
            old = merged.get(link.key)
            if old is None:
                merged[link.key] = link
            else:
                merged[link.key] = Link(link.src, link.dst,
                                        old.bandwidth_Bps + link.bandwidth_Bps,
                                        max(old.latency_s, link.latency_s))
        return cls(name, tuple(nodes), tuple(merged.values()), source, description, meta or {})

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def gpus(self) -> tuple[str, ...]:
        """GPU node names in rank order."""
        return tuple(n.name for n in self.nodes if n.is_gpu)

    @cached_property
    def switches(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes if not n.is_gpu)

    @cached_property
    def reducing_switches(self) -> tuple[str, ...]:
        """The switches that add the chunks they forward (FRED-B, FRED-D), which no MSCCL
        XML can drive; not NVLink SHARP switches, which MSCCL XML uses to forward."""
        return tuple(s for s in self.switches
                     if self.node(s).can_reduce and not self.node(s).nvls)

    @cached_property
    def _rank_of(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.gpus)}

    @cached_property
    def _links_by_key(self) -> dict[tuple[str, str], Link]:
        return {link.key: link for link in self.links}

    @property
    def ngpus(self) -> int:
        return len(self.gpus)

    def node(self, name: str) -> Node:
        return self.node_by_name[name]

    def rank(self, name: str) -> int:
        """Rank of GPU ``name``."""
        return self._rank_of[name]

    def gpu(self, rank: int) -> str:
        """Name of the GPU with ``rank``."""
        return self.gpus[rank]

    def link(self, src: str, dst: str) -> Link:
        return self._links_by_key[(src, dst)]

    def has_link(self, src: str, dst: str) -> bool:
        return (src, dst) in self._links_by_key

    def out_links(self, name: str) -> list[Link]:
        return list(self._links_of[0].get(name, ()))

    def in_links(self, name: str) -> list[Link]:
        return list(self._links_of[1].get(name, ()))

    @cached_property
    def _links_of(self) -> tuple[dict[str, list[Link]], dict[str, list[Link]]]:
        """Each node's out-links and in-links, in link order (one pass, not one per call)."""
        out: dict[str, list[Link]] = {}
        into: dict[str, list[Link]] = {}
        for link in self.links:
            out.setdefault(link.src, []).append(link)
            into.setdefault(link.dst, []).append(link)
        return out, into

    def graph(self) -> nx.DiGraph:
        """A fresh networkx DiGraph: node attr ``node``, edge attrs ``link``, ``bandwidth``, ``latency``."""
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.name, node=n, kind=n.kind.value)
        for link in self.links:
            g.add_edge(link.src, link.dst, link=link, bandwidth=link.bandwidth_Bps,
                       latency=link.latency_s)
        return g

    def reversed(self) -> Topology:
        """Every link turned around (for ReduceScatter as AllGather on the reversed graph)."""
        return Topology(self.name, self.nodes,
                        tuple(Link(k.dst, k.src, k.bandwidth_Bps, k.latency_s) for k in self.links),
                        self.source, self.description, self.meta)
