"""Random small fabrics for the bound properties: 2–5 GPUs with random link bandwidths and
latencies, a one-way ring through every GPU (so every GPU reaches every other) plus a few
random links, and optionally one switch of random abilities joined to some GPUs."""

from __future__ import annotations

from hypothesis import strategies as st

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.topology import Link, Node, NodeKind, Topology

BANDWIDTHS = st.sampled_from([5e8, 1e9, 2e9, 3e9])
LATENCIES = st.sampled_from([0.0, 1e-7, 2e-6])
ROOTED = {"broadcast", "reduce", "gather", "scatter"}


@st.composite
def fabrics(draw, max_gpus: int = 5, switch: bool = True) -> Topology:
    n = draw(st.integers(2, max_gpus))
    links = [Link(f"g{i}", f"g{(i + 1) % n}", draw(BANDWIDTHS), draw(LATENCIES))
             for i in range(n)]
    for i, j in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                              max_size=4)):
        if i != j:
            links.append(Link(f"g{i}", f"g{j}", draw(BANDWIDTHS), draw(LATENCIES)))
    nodes = [Node(f"g{i}") for i in range(n)]
    if switch and draw(st.booleans()):
        copy, reduce, buffer = (draw(st.booleans()) for _ in range(3))
        nodes.append(Node("sw", NodeKind.SWITCH, can_copy=copy, can_reduce=reduce,
                          has_buffer=buffer))
        for i in sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))):
            bw, lat = draw(BANDWIDTHS), draw(LATENCIES)
            links += [Link(f"g{i}", "sw", bw, lat), Link("sw", f"g{i}", bw, lat)]
    return Topology.build("random", nodes, links)


@st.composite
def collectives(draw, topology: Topology, kinds: list[str], chunks: int = 1,
                size_per_chunk: int = 125_000) -> Collective:
    """A collective of one of ``kinds`` on at least two of the topology's GPUs."""
    kind = draw(st.sampled_from(kinds))
    ranks = tuple(sorted(draw(st.sets(st.integers(0, topology.ngpus - 1), min_size=2))))
    root = draw(st.sampled_from(ranks)) if kind in ROOTED else None
    pieces = chunks if kind in ("broadcast", "reduce") else chunks * len(ranks)
    return Collective(CollectiveKind(kind), pieces * size_per_chunk, ranks, chunks, root=root)
