"""Property: random tree schedules with random delays on random graphs lower to XML the
verifier accepts (relays, multicast, reductions, channel and thread-block sharing)."""

from __future__ import annotations

import random

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.lower.msccl import StepsExhausted, lower_to_msccl
from te_ccl.lower.msccl.channels import ChannelsExhausted
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.msccl import verify_msccl

KINDS = ["allgather", "alltoall", "broadcast", "gather", "scatter", "reducescatter", "reduce",
         "allreduce"]


def _topology(rng: random.Random, n: int) -> Topology:
    """A random connected graph of GPUs plus a copying switch ``sw`` linked to all of them."""
    g = nx.connected_watts_strogatz_graph(n, 2, 0.5, seed=rng.randrange(1 << 30)) if n > 3 \
        else nx.path_graph(n)
    links = [Link(f"g{a}", f"g{b}", 1e9) for u, v in g.edges for a, b in ((u, v), (v, u))]
    links += [Link(f"g{i}", "sw", 1e9) for i in range(n)] + \
        [Link("sw", f"g{i}", 1e9) for i in range(n)]
    return Topology.build("rand", [Node(f"g{i}") for i in range(n)]
                          + [Node("sw", NodeKind.SWITCH)], links)


def _hop(rng, chunk, u, v, start, op, via_switch: dict) -> list[Transfer]:
    """u → v directly, or through the switch (one upload per (u, epoch): the switch copies)."""
    arrive = start + 1 + rng.randrange(2)
    key = (u, start)
    if op == "reduce" or rng.random() < 0.5:
        return [Transfer(chunk, f"g{u}", f"g{v}", start, arrive, op)]
    up = [] if key in via_switch else [Transfer(chunk, f"g{u}", "sw", start, start + 1, op)]
    via_switch[key] = True
    return up + [Transfer(chunk, "sw", f"g{v}", start + 1, arrive + 1, op)]


def _tree(rng: random.Random, topo: Topology, root: int) -> list[tuple[int, int]]:
    """(parent, child) edges of a random spanning tree grown from ``root``."""
    seen, frontier, edges = {root}, [root], []
    while frontier:
        u = frontier.pop(rng.randrange(len(frontier)))
        for link in sorted(topo.out_links(f"g{u}"), key=lambda _: rng.random()):
            if link.dst == "sw":
                continue
            v = topo.rank(link.dst)
            if v not in seen:
                seen.add(v)
                edges.append((u, v))
                frontier.append(v)
    return edges


def _fan_out(rng, topo, chunk, root, t0) -> list[Transfer]:
    have, out, via_switch = {root: t0}, [], {}
    for u, v in _tree(rng, topo, root):
        hop = _hop(rng, chunk, u, v, have[u] + rng.randrange(3), "copy", via_switch)
        have[v] = hop[-1].arrive_epoch
        out += hop
    return out


def _fan_in(rng, topo, chunk, root) -> tuple[list[Transfer], int]:
    """Partials flow up a random tree to ``root``; returns the transfers and the finish."""
    edges = _tree(rng, topo, root)
    ready = {v: 0 for v in range(topo.ngpus)}
    out = []
    for u, v in reversed(edges):  # children before parents
        start = ready[v] + rng.randrange(3)
        arrive = start + 1 + rng.randrange(2)
        ready[u] = max(ready[u], arrive)
        out.append(Transfer(chunk, f"g{v}", f"g{u}", start, arrive, "reduce"))
    return out, ready[root]


def _schedule(rng: random.Random, kind: str, n: int, chunks: int, inplace: bool) -> Schedule:
    topo = _topology(rng, n)
    root = rng.randrange(n) if kind in ("broadcast", "gather", "scatter", "reduce") else None
    coll = Collective(CollectiveKind(kind), 64 * n * chunks, tuple(range(n)), chunks, root,
                      inplace)
    tr: list[Transfer] = []
    for ch in coll.chunks():
        if not ch.reduce:
            tr += [t for t in _fan_out(rng, topo, ch.id, ch.sources[0], 0)
                   if ch.destinations]
            continue
        owner = ch.destinations[0] if kind != "allreduce" else rng.randrange(n)
        up, done = _fan_in(rng, topo, ch.id, owner)
        tr += up
        if kind == "allreduce":
            tr += _fan_out(rng, topo, ch.id, owner, done)
    return Schedule(topo, coll, 1e-6, tuple(tr))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 1 << 30), kind=st.sampled_from(KINDS), n=st.integers(2, 7),
       chunks=st.integers(1, 2), inplace=st.booleans(), max_steps=st.sampled_from([8, 64]))
def test_random_tree_schedules_verify(seed, kind, n, chunks, inplace, max_steps):
    schedule = _schedule(random.Random(seed), kind, n, chunks, inplace)
    try:
        xml = lower_to_msccl(schedule, max_steps=max_steps)
    except (ChannelsExhausted, StepsExhausted):
        # a tight step limit may need more than 32 channels, or a step waiting on many
        # thread blocks may need more nops than the limit allows
        assert max_steps < 64
        return
    report = verify_msccl(xml.decode(), root=schedule.collective.root)
    assert report.valid, [str(f) for f in report.errors][:3]
