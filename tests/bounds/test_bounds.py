"""Lower bounds: hand-computed values, and on random small topologies every schedule the
solver produces passes the independent checker and takes at least the bound."""

from __future__ import annotations

import itertools
import re

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl import bounds
from te_ccl.bounds import allgather_cut_ratio, alltoall_link_time, alltoall_time, lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.deadline import TimeLimitReached
from te_ccl.errors import SolverError, SpecError
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule


def ring(n: int, bw: float = 1e9) -> Topology:
    links = []
    for i in range(n):
        j = (i + 1) % n
        links += [Link(f"g{i}", f"g{j}", bw), Link(f"g{j}", f"g{i}", bw)]
    return Topology.build(f"ring{n}", [Node(f"g{i}") for i in range(n)], links)


def coll(kind: str, n: int, size: int = 8 << 20, root=None) -> Collective:
    return Collective(CollectiveKind(kind), size, tuple(range(n)), root=root)


def test_ring_allgather_cut_is_half_the_ring():
    # S = 7 consecutive GPUs of ring8 leaves on 2 links: (M/8)·7/(2b)
    b = lower_bound(ring(8), coll("allgather", 8))
    assert b.parts["cut_s"] == pytest.approx((8 << 20) / 8 * 7 / 2e9)


def test_cut_ratio_matches_brute_force():
    t = Topology.build("x", [Node(f"g{i}") for i in range(4)],
                       [Link("g0", "g1", 3e9), Link("g1", "g2", 1e9), Link("g2", "g3", 2e9),
                        Link("g3", "g0", 1e9), Link("g1", "g0", 1e9), Link("g2", "g1", 2e9),
                        Link("g3", "g2", 1e9), Link("g0", "g3", 2e9)])
    names = list(t.gpus)
    best = 0.0
    for r in range(1, 4):
        for s in itertools.combinations(names, r):
            out = sum(k.bandwidth_Bps for k in t.links if k.src in s and k.dst not in s)
            best = max(best, len(s) / out)
    assert allgather_cut_ratio(t, names)[0] == pytest.approx(best)


def test_allreduce_on_the_wafer_mesh_counts_gossip_not_reducescatter_plus_allgather():
    """5×4 mesh, M/(2b) = 667 µs at a corner: every GPU receives 38/20 M on average over
    62 links (817 µs, the bound); RS + AG (1,266.7 µs) is beaten by summing on trees."""
    from te_ccl.topology.generators import mesh

    m = mesh([5, 4], 1.5e12)
    b = lower_bound(m, coll("allreduce", 20, size=2_000_000_000))
    assert b.parts["cut_s"] == pytest.approx(2e9 / 3e12)
    assert b.seconds == b.parts["gossip_s"] == pytest.approx(38 * 2e9 / (62 * 1.5e12))
    assert b.argument == "gossip_s"


def test_gather_and_scatter_cut_every_group_off_from_the_root():
    """Two rings of three joined by one slow link: the far ring's three chunks cross it."""
    nodes = [Node(f"g{i}") for i in range(6)]
    links = [Link("g2", "g3", 1e8), Link("g3", "g2", 1e8)]
    for base in (0, 3):
        for i in range(3):
            a, b = f"g{base + i}", f"g{base + (i + 1) % 3}"
            links += [Link(a, b, 1e9), Link(b, a, 1e9)]
    t = Topology.build("two-rings", nodes, links)
    for kind in ("gather", "scatter"):
        b = lower_bound(t, coll(kind, 6, size=6_000_000, root=0))
        assert b.parts["cut_s"] == pytest.approx(3 * 1_000_000 / 1e8), kind


def test_custom_latency_counts_only_the_pairs_that_exchange_data():
    """A custom demand between neighbours on a long line pays one hop of α, not the
    diameter; its per-node part is the chunk over the one link in."""
    from te_ccl.collective import CustomDemand
    from te_ccl.topology.generators import mesh

    t = mesh([5], 1e9, 1e-6)
    c = Collective(CollectiveKind.CUSTOM, 1000, (0, 1, 2, 3, 4), 1,
                   demands=(CustomDemand(0, (1,)),))
    b = lower_bound(t, c)
    assert b.parts["alpha_s"] == pytest.approx(1e-6)
    assert b.parts["per_node_s"] == pytest.approx(1000 / 1e9)


def test_alltoall_flow_bound_on_a_ring():
    # ring4, 1 GB/s each way: each pair moves M/4; total hop-bytes 4·(1+1+2)·M/4 over 8 links
    b = lower_bound(ring(4), coll("alltoall", 4, size=4_000_000))
    assert b.parts["concurrent_flow_s"] == pytest.approx(4 * 4 * 1_000_000 / 8 / 1e9)
    assert b.seconds >= b.parts["per_node_s"]


def test_alltoall_link_time_is_the_lp_on_a_torus_and_stands_in_where_the_lp_is_too_big(monkeypatch):
    """On a torus every link is equally loaded by shortest paths, so the link-time
    relaxation meets the concurrent-flow LP; elsewhere it stays below it. torus 16×16
    (without its symmetry the LP would have 262k variables): the per-node bound alone is
    8× too weak."""
    from te_ccl.spec.topology import load_topology

    for name, tight in (("torus4x4", True), ("mesh4x4", False), ("dgx1", False)):
        t = load_topology(name)
        lp, link = alltoall_time(t, t.gpus, 1e6), alltoall_link_time(t, t.gpus, 1e6)
        assert link <= lp * (1 + 1e-9)
        assert (link == pytest.approx(lp, rel=1e-6)) is tight, name
    t16 = load_topology("torus16x16")
    monkeypatch.setattr(bounds, "automorphisms", lambda *_: [])
    lower_bound.cache_clear()
    b = lower_bound(t16, coll("alltoall", 256, size=1 << 30))
    lower_bound.cache_clear()
    assert "concurrent_flow_s" not in b.parts
    # the bandwidth term the bound rescales with (the cut with its α tail only adds α)
    assert max(b.proportional.values()) == pytest.approx(b.parts["link_time_s"])
    assert b.parts["link_time_s"] > 7.9 * b.parts["per_node_s"]


def test_broadcast_maxflow_and_latency():
    t = Topology.build("l", [Node("a"), Node("b"), Node("c")],
                       [Link("a", "b", 1e9, 1e-6), Link("b", "c", 1e9, 2e-6)])
    b = lower_bound(t, coll("broadcast", 3, size=1000, root=0))
    assert b.parts["cut_s"] == pytest.approx(1e-6)
    assert b.parts["alpha_s"] == pytest.approx(3e-6)


@st.composite
def small_topology(draw):
    n = draw(st.integers(2, 4))
    links = [Link(f"g{i}", f"g{(i + 1) % n}", draw(st.sampled_from([1e9, 2e9, 5e8])),
                  draw(st.sampled_from([0.0, 1e-7, 2e-6]))) for i in range(n)]  # a ring: connected
    for i, j in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                              max_size=4)):
        if i != j:
            links.append(Link(f"g{i}", f"g{j}", draw(st.sampled_from([1e9, 3e9]))))
    nodes = [Node(f"g{i}", buffer_bytes=draw(st.sampled_from([None, None, 4000])))
             for i in range(n)]
    if draw(st.booleans()):  # a switch joined to some GPUs, with random abilities
        copy, reduce, buffer = (draw(st.booleans()) for _ in range(3))
        nodes.append(Node("sw", NodeKind.SWITCH, can_copy=copy, can_reduce=reduce,
                          has_buffer=buffer))
        for i in draw(st.sets(st.integers(0, n - 1), min_size=1)):
            links += [Link(f"g{i}", "sw", 2e9, 1e-7), Link("sw", f"g{i}", 2e9, 1e-7)]
    return Topology.build("random", nodes, links)


def _relays_more_than_it_holds(topo: Topology, c: Collective, error: str) -> bool:
    """The GPU the error names cuts off more chunks of others than its buffer holds."""
    found = re.search(r"^infeasible: .* only through (\S+), whose buffer", error)
    if found is None:
        return False
    gpu = found.group(1)
    cut, rank = topo.graph(), topo.rank(gpu)
    cut.remove_nodes_from({gpu} | set(topo.gpus) - {topo.gpu(r) for r in c.ranks})
    cut_off = [k for k in c.chunks() if rank not in k.sources + k.destinations and any(
        not nx.has_path(cut, topo.gpu(k.sources[0]), topo.gpu(d)) for d in k.destinations)]
    return len(cut_off) * c.chunk_bytes > topo.node(gpu).buffer_bytes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topology(), st.sampled_from(["allgather", "alltoall", "reducescatter",
                                          "broadcast", "allreduce"]),
       st.integers(1, 2), st.sampled_from(["milp", "rounds", "lp"]), st.data())
def test_random_schedules_pass_the_checker_and_respect_the_bound(topo, kind, chunks, backend,
                                                                 data):
    n = topo.ngpus
    ranks = tuple(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=2))))
    c = Collective(CollectiveKind(kind), len(ranks) * chunks * 1000, ranks, chunks,
                   root=ranks[0] if kind == "broadcast" else None)
    try:
        s = solve(topo, c, SolveParams(backend=backend, time_limit_s=10))
    except SpecError as e:  # the ranks cannot reach each other without the other GPUs
        assert "without relaying through a GPU outside the ranks" in str(e)
        return
    except TimeLimitReached:  # a loaded machine: no schedule to judge
        return
    except SolverError as e:  # more chunks can pass only one GPU than its buffer holds
        assert _relays_more_than_it_holds(topo, c, str(e))
        return
    assert check_schedule(s) == []
    assert s.finish_time_s >= lower_bound(topo, c).seconds * (1 - 1e-9)


@settings(max_examples=60, deadline=None)
@given(small_topology(), st.data())
def test_cut_ratio_and_max_flows_match_brute_force(topo, data):
    """The OR-Tools min-cuts and max-flows on integer-scaled capacities find the same
    optimum as enumerating every node set (switch included), with every member or only
    a root left out; the single-node stand-in never exceeds it."""
    names = list(topo.gpus)
    members = sorted(data.draw(st.sets(st.sampled_from(names), min_size=2)))
    nodes = [n.name for n in topo.nodes]

    def out_bw(s):
        return sum(k.bandwidth_Bps for k in topo.links if k.src in s and k.dst not in s)

    sets = [set(s) for r in range(1, len(nodes)) for s in itertools.combinations(nodes, r)]
    ratios = [len(s & set(members)) / out_bw(s) for s in sets
              if s & set(members) and not set(members) <= s and out_bw(s) > 0]
    assert allgather_cut_ratio(topo, members)[0] == pytest.approx(max(ratios), rel=1e-9)
    assert bounds._node_cut_ratio(topo.graph(), members, members)[0] <= max(ratios) * (1 + 1e-9)
    sink = members[-1]  # a Gather's root: only sets without it
    rooted = [len(s & set(members)) / out_bw(s) for s in sets
              if s & set(members) and sink not in s and out_bw(s) > 0]
    assert allgather_cut_ratio(topo, members, [sink])[0] == pytest.approx(max(rooted), rel=1e-9)
    assert bounds._node_cut_ratio(topo.graph(), members, [sink])[0] <= max(rooted) * (1 + 1e-9)
    root, other = members[0], members[1]
    cut = min(out_bw(s) for s in sets if root in s and other not in s)
    assert bounds._max_flows(topo.graph(), [(root, other)])[0] == pytest.approx(cut, rel=1e-9)


def test_alpha_sweep_finds_the_mesh_diameter(monkeypatch):
    from te_ccl.topology.generators import mesh

    t = mesh((8, 8), 1e9, 1e-6)
    members = list(t.gpus)
    exact = bounds._alpha_distance(t, members, members)
    monkeypatch.setattr(bounds, "ALPHA_EXACT_WORK", 0)
    assert bounds._alpha_distance(t, members, members) == pytest.approx(exact)
    assert exact == pytest.approx(14e-6)


def test_gossip_groupings_beyond_the_cap_are_spread_over_the_bandwidths(monkeypatch):
    """A measured fabric with many link speeds tries a few of them as thresholds: a subset
    of the groupings, so a bound no larger, still starting from every node alone."""
    from te_ccl.topology.generators import mesh

    speeds = iter(1e9 + 1e6 * i for i in range(100))
    m = mesh([4, 4], 1e9)
    t = Topology.build("measured", m.nodes, [Link(k.src, k.dst, next(speeds)) for k in m.links])
    members = list(t.gpus)
    full = bounds.gossip_time(t, members, 1e9)
    monkeypatch.setattr(bounds, "GOSSIP_GROUPINGS", 4)
    groupings = bounds._threshold_partitions(t)
    assert len(groupings) == 4 and all(len(g) == 1 for g in groupings[0])
    assert 0 < bounds.gossip_time(t, members, 1e9) <= full


@pytest.mark.parametrize("kind", ["broadcast", "reduce"])
def test_a_rooted_stream_pays_the_cut_then_the_latency_past_it(kind):
    """From an end of a line of four (1 GB/s, 1 µs a link): the last byte to leave the
    root arrives at g1 after M/b, and has two more links to g3 (Reduce: reversed)."""
    from te_ccl.topology import generators as gen

    line = gen.mesh([4], 1e9, 1e-6)
    b = lower_bound(line, coll(kind, 4, 10**6, root=0))
    assert b.parts["cut_s"] == pytest.approx(1e-3)
    assert b.parts["stream_s"] == pytest.approx(1e-3 + 2e-6)
    assert b.fixed["stream_s"] == pytest.approx(2e-6) and b.argument == "stream_s"
    assert b.rescaled(2)["stream_s"] == pytest.approx(2e-3 + 2e-6)
    # a pipeline of 122 pieces (8 KB each: two more to fill the line) replays near it
    from te_ccl.baselines import build_baseline
    from te_ccl.simulate import simulate_schedule

    replay = simulate_schedule(build_baseline("pipeline", line, coll(kind, 4, 10**6, root=0)))
    assert b.seconds <= replay.finish_time_s <= 1.02 * b.seconds
