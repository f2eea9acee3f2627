"""Hypothesis strategies for valid but unfriendly inputs: irregular topologies and collectives.

Topologies are YAML-shaped data (read by the same loader as user files): 2–12 GPUs joined
by a directed cycle in a random order (so every GPU reaches every other), plus random
one-way or two-way links of mixed bandwidth and latency, and up to two switches of any
``copy``/``reduce``/``buffer`` combination, each linked one way or both ways to some GPUs.
Collectives: every kind, both buffer modes, rank subsets, roots, custom demands, and sizes
that the chunks do not divide (down to one byte).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from te_ccl.collective.model import ROOTED, Collective, CollectiveKind, CustomDemand
from te_ccl.spec.topology import topology_from_data
from te_ccl.topology.model import Topology

__all__ = ["topologies", "collectives", "cases"]

BANDWIDTHS = ("10GB/s", "25GB/s", "50GB/s", "100GB/s")
LATENCIES = ("0us", "0.7us", "2us")
SIZES = (1, 7, 8, 1000, 4096, 65_537, 1_000_000, 64_000_000)


@st.composite
def _link(draw: st.DrawFn, a: str, b: str, both: bool | None = None) -> dict[str, Any]:
    both = draw(st.booleans()) if both is None else both
    ends = {"between": [a, b]} if both else {"from": a, "to": b}
    return {**ends, "bandwidth": draw(st.sampled_from(BANDWIDTHS)),
            "latency": draw(st.sampled_from(LATENCIES))}


@st.composite
def topology_data(draw: st.DrawFn, max_gpus: int = 12) -> dict[str, Any]:
    """YAML data of a valid topology (see the module docstring)."""
    n = draw(st.integers(2, max_gpus))
    gpus = [f"g{i}" for i in range(n)]
    order = draw(st.permutations(gpus))
    links = [draw(_link(order[i], order[(i + 1) % n])) for i in range(n)]
    pairs = [(a, b) for a in gpus for b in gpus if a != b]
    for a, b in draw(st.lists(st.sampled_from(pairs), max_size=n, unique=True)):
        links.append(draw(_link(a, b)))
    switches = []
    for s in range(draw(st.integers(0, 2))):
        name = f"sw{s}"
        flags = {k: draw(st.booleans()) for k in ("copy", "reduce", "buffer")}
        switches.append({"name": name, **flags})
        for g in draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=n, unique=True)):
            way = draw(st.sampled_from(("both", "in", "out")))
            a, b = (name, g) if way == "out" else (g, name)
            links.append(draw(_link(a, b, both=way == "both")))
    return {"name": "random", "gpus": gpus, "switches": switches, "links": links}


def topologies(max_gpus: int = 12) -> st.SearchStrategy[Topology]:
    return topology_data(max_gpus).map(lambda d: topology_from_data(d, "random.yaml"))


@st.composite
def collectives(draw: st.DrawFn, topology: Topology,
                kinds: tuple[CollectiveKind, ...] = tuple(CollectiveKind)) -> Collective:
    """A collective on ``topology``: any of ``kinds``, a rank subset of at least 2."""
    kind = draw(st.sampled_from(kinds))
    everyone = list(range(topology.ngpus))
    ranks = tuple(sorted(draw(st.one_of(
        st.just(everyone), st.lists(st.sampled_from(everyone), min_size=2, unique=True)))))
    root = draw(st.sampled_from(ranks)) if kind in ROOTED else None
    demands: tuple[CustomDemand, ...] = ()
    chunks = draw(st.integers(1, 3))
    if kind is CollectiveKind.CUSTOM:
        demands = tuple(draw(st.lists(st.builds(
            lambda s, d, k: CustomDemand(s, tuple(x for x in d if x != s) or
                                         (next(x for x in ranks if x != s),), k),
            st.sampled_from(ranks), st.lists(st.sampled_from(ranks), min_size=1, unique=True),
            st.integers(1, 2)), min_size=1, max_size=4)))
    return Collective(kind, draw(st.sampled_from(SIZES)), ranks, chunks_per_rank=chunks,
                      root=root, inplace=draw(st.booleans()), demands=demands)


@st.composite
def cases(draw: st.DrawFn, max_gpus: int = 12,
          kinds: tuple[CollectiveKind, ...] = tuple(CollectiveKind)
          ) -> tuple[Topology, Collective]:
    topology = draw(topologies(max_gpus))
    return topology, draw(collectives(topology, kinds))
