"""Rings through GPUs: the bounded Hamiltonian search, its proofs of absence, the ring baseline
on topologies with and without a ring."""

from __future__ import annotations

import importlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.baselines import build_baseline
from te_ccl.baselines.cycle import (
    NoRing,
    RingSearchGaveUp,
    hamiltonian,
    ring_cycle,
    ring_neighbours,
    why_no_cycle,
)
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology import generators as gen
from te_ccl.verify.schedule_check import check_schedule

REDUCING = [K.REDUCESCATTER, K.ALLREDUCE, K.REDUCE]
COPYING = [K.ALLGATHER, K.ALLTOALL, K.BROADCAST]


def _coll(kind: K, n: int) -> Collective:
    root = 0 if kind in (K.BROADCAST, K.REDUCE) else None
    return Collective(kind, 64 * n * n, tuple(range(n)), root=root)


def _is_ring(topo: Topology, order: list[str]) -> bool:
    """Every GPU once, each reaching the next directly or through switches only."""
    reach = ring_neighbours(topo, list(topo.gpus))
    return (sorted(order) == sorted(topo.gpus)
            and all(order[(i + 1) % len(order)] in reach[g] for i, g in enumerate(order)))


def _graph(name: str, n: int, edges: set[tuple[int, int]]) -> Topology:
    """GPUs g0..g{n-1} with a link each way on every edge."""
    links = [Link(f"g{a}", f"g{b}", 1e9) for a, b in edges] + \
            [Link(f"g{b}", f"g{a}", 1e9) for a, b in edges]
    return Topology.build(name, [Node(f"g{i}") for i in range(n)], links)


def _blobs(side: int) -> Topology:
    """Three side×side tori and two hub GPUs, each hub linked to one GPU of every torus:
    without the hubs the tori fall apart into three pieces, so no ring exists, yet no GPU
    alone cuts the graph and it is not bipartite (no cheap proof)."""
    nodes, links = [], []
    for b, i, j in itertools.product(range(3), range(side), range(side)):
        nodes.append(Node(f"b{b}.g{i}_{j}"))
        for x, y in (((i + 1) % side, j), (i, (j + 1) % side)):
            links += [Link(f"b{b}.g{i}_{j}", f"b{b}.g{x}_{y}", 1e9),
                      Link(f"b{b}.g{x}_{y}", f"b{b}.g{i}_{j}", 1e9)]
    for h in range(2):
        nodes.append(Node(f"h{h}"))
        for b in range(3):
            links += [Link(f"h{h}", f"b{b}.g{h}_0", 1e9), Link(f"b{b}.g{h}_0", f"h{h}", 1e9)]
    return Topology.build("blobs", nodes, links)


@pytest.mark.parametrize("name", ["mesh8x8", "mesh16x16", "torus8x8x8", "dgx2x2",
                                  "hgx-h100x16", "wafer-mesh5x4", "mi250"])
def test_shipped_topologies_with_a_ring_get_one(name):
    topo = load_topology(name)
    assert _is_ring(topo, ring_cycle(topo, list(topo.gpus)))


def test_a_ring_prefers_the_fastest_direct_links():
    topo = load_topology("dgx1")
    order = ring_cycle(topo, list(topo.gpus))
    fastest = max(k.bandwidth_Bps for k in topo.links)
    assert all(topo.link(a, b).bandwidth_Bps == fastest
               for a, b in zip(order, order[1:] + order[:1], strict=True))


@pytest.mark.parametrize(("topo", "reason"), [
    (gen.mesh([3, 3], 1e9), "two sides of 4 and 5 GPUs"),
    (gen.mesh([1, 4], 1e9), "has only one neighbour"),
    (gen.boxes(gen.fully_connected(3, 50e9), 2, gen.Join("direct", ("g0",), 12.5e9)),
     "passes through b0.g0"),
    (gen.ring(4, 1e9, bidirectional=False), None),
])
def test_absence_is_proven_with_a_reason(topo, reason):
    gpus = list(topo.gpus)
    found = why_no_cycle(gpus, ring_neighbours(topo, gpus))
    if reason is None:  # a one-way ring is a ring
        assert found is None and _is_ring(topo, ring_cycle(topo, gpus))
        with pytest.raises(NoRing, match="and back"):
            ring_cycle(topo, gpus, both_ways=True)
        return
    assert reason in found
    with pytest.raises(NoRing, match=reason) as e:
        ring_cycle(topo, gpus)
    assert e.value.exit_code == 2


def test_an_exhausted_search_proves_absence_and_a_bounded_one_gives_up():
    small, large = _blobs(3), _blobs(6)
    with pytest.raises(NoRing, match="every order of them searched") as e:
        ring_cycle(small, list(small.gpus))
    assert e.value.exit_code == 2
    with pytest.raises(RingSearchGaveUp, match="bounded at 5,000 steps") as e:
        ring_cycle(large, list(large.gpus), budget=5_000)
    assert e.value.exit_code == 3


def _reference(gpus, adj):
    """The first cycle of the same depth-first order, without cutting branches."""
    n, start, pos = len(gpus), gpus[0], {g: i for i, g in enumerate(gpus)}

    def go(path, on):
        if len(path) == n:
            return list(path) if start in adj[path[-1]] else None
        cand = sorted((v for v in adj[path[-1]] if v not in on),
                      key=lambda v: (sum(w not in on for w in adj[v]), pos[v]))
        for v in cand:
            if found := go([*path, v], on | {v}):
                return found
        return None

    return go([start], {start})


@st.composite
def digraphs(draw):
    n = draw(st.integers(3, 7))
    arcs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                        .filter(lambda a: a[0] != a[1]), max_size=n * (n - 1)))
    gpus = [f"g{i}" for i in range(n)]
    return gpus, {g: [f"g{b}" for a, b in sorted(arcs) if f"g{a}" == g] for g in gpus}


@settings(max_examples=300, deadline=None)
@given(digraphs())
def test_cutting_branches_finds_the_same_first_cycle_and_proofs_are_sound(graph):
    gpus, adj = graph
    expect = _reference(gpus, adj)
    found, _ = hamiltonian(gpus, adj, 10**6)
    assert found == expect
    if expect is not None:
        assert why_no_cycle(gpus, adj) is None


def test_the_budget_bounds_the_work():
    topo = _blobs(6)
    gpus = list(topo.gpus)
    found, work = hamiltonian(gpus, ring_neighbours(topo, gpus), 20_000)
    assert found is None and 20_000 <= work < 20_000 + 2 * len(gpus)


@pytest.mark.parametrize("kind", REDUCING + COPYING, ids=lambda k: k.value)
@pytest.mark.parametrize("name", ["ring", "ring-bidir"])
def test_rings_on_a_switchless_mesh_reduce_without_relays(name, kind):
    topo = gen.mesh([4, 6], 50e9, 1e-6)
    s = build_baseline(name, topo, _coll(kind, topo.ngpus))
    assert check_schedule(s) == []
    gpus = set(topo.gpus)
    assert all(t.src in gpus and t.dst in gpus and topo.has_link(t.src, t.dst)
               for t in s.transfers)


@pytest.mark.parametrize("kind", REDUCING + COPYING, ids=lambda k: k.value)
def test_ring_on_ndv2x2_copies_by_relays_and_refuses_reductions_with_the_reason(kind):
    topo = load_topology("ndv2x2")
    coll = _coll(kind, topo.ngpus)
    if kind in REDUCING:
        with pytest.raises(NoRing, match="every path between .* passes through b0.g0") as e:
            build_baseline("ring", topo, coll)
        assert e.value.exit_code == 2 and "\n" not in str(e.value)
        return
    s = build_baseline("ring", topo, coll)
    assert check_schedule(s) == []
    assert any("relaying through GPUs" in note for note in s.info.notes)


def test_a_ring_too_large_to_build_is_refused_before_building(monkeypatch):
    from te_ccl.baselines.plan import BaselineTooLarge

    topo = gen.torus([4, 4], 50e9)
    ring_module = importlib.import_module("te_ccl.baselines.ring")  # not the function
    monkeypatch.setattr(ring_module, "MAX_RING_HOPS", 16 * 16 * 15 - 1)
    with pytest.raises(BaselineTooLarge, match="moves up to 3,840 chunk hops") as e:
        build_baseline("ring", topo, _coll(K.ALLTOALL, 16))
    assert e.value.exit_code == 3
    assert check_schedule(build_baseline("ring", topo, _coll(K.ALLGATHER, 16))) == []


def test_the_largest_shipped_rings_but_alltoall_fit_the_bound():
    from te_ccl.baselines.ring import MAX_RING_HOPS

    n = 1024  # an AllReduce: each chunk summed round the ring, then spread round it
    assert n * (n - 1) * 2 <= MAX_RING_HOPS < 256 * 256 * 255
