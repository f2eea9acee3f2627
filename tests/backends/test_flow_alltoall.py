"""The scale backend's concurrent-flow AlltoAll: checked schedules near the LP optimum."""

from __future__ import annotations

import math
from collections import Counter

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import te_ccl
from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale import compile_scale, flow_alltoall, scale_method
from te_ccl.backends.scale.flow_alltoall import (
    PIPELINE_TARGET,
    _torus_weights,
    concurrent_flow,
    flow_paths,
    flow_subchunks,
    solve_flow_alltoall,
    unicast_pairs,
)
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import Budget
from te_ccl.model.problem import build_problem
from te_ccl.schedule import Schedule
from te_ccl.topology.generators import Join, SwitchCaps, boxes, mesh, ring, star, torus
from te_ccl.topology.model import Link, Node, NodeKind, Topology
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule

# far above the second or so each solve takes: the outcome does not hang on the
# machine's speed
LIMIT_S = 600
PARAMS = SolveParams(backend="scale", time_limit_s=LIMIT_S, threads=1)


def _a2a(topo: Topology, size: int = 1 << 20) -> Collective:
    return Collective(CollectiveKind.ALLTOALL, size, tuple(range(topo.ngpus)))


def _compiled(topo: Topology, coll: Collective) -> Schedule:
    s = compile_scale(topo, coll, PARAMS)
    assert s.info.status.startswith("scale/flow-alltoall"), s.info.status
    assert check_schedule(s) == []
    return s


def _flow_bound(topo: Topology, coll: Collective, s: Schedule) -> float:
    """The concurrent-flow bound for the bytes ``s`` moves (sub-chunks round the size down)."""
    moved = s.collective.chunk_bytes * s.collective.nchunks
    return lower_bound(topo, coll).parts["concurrent_flow_s"] * moved / coll.size_bytes


def _ratio(topo: Topology, coll: Collective) -> float:
    s = _compiled(topo, coll)
    return s.finish_time_s / _flow_bound(topo, coll, s)


def test_auto_offers_it_for_alltoall_off_rails_without_buffer_limits() -> None:
    assert scale_method(mesh([3, 3], 1e9), _a2a(mesh([3, 3], 1e9))) == "flow-alltoall"
    limited = mesh([2, 2], 1e9)
    limited = Topology.build("lim", [Node(n.name, n.kind, buffer_bytes=1 << 20)
                                     for n in limited.nodes], limited.links)
    assert scale_method(limited, _a2a(limited)) is None


def test_lp_splits_a_ring_pair_over_both_ways() -> None:
    t = ring(4, 1e9)
    rate = {k.key: 1.0 for k in t.links}
    T, flows = concurrent_flow(t, {("g0", "g2"): 4.0}, rate)
    assert T == pytest.approx(2.0)
    paths = flow_paths(t, "g0", flows["g0"], {"g2": 4.0})["g2"]
    assert sorted(paths) == [("g0", "g1", "g2"), ("g0", "g3", "g2")]
    assert sum(paths.values()) == pytest.approx(1.0)


def test_torus_orbit_lp_matches_the_per_source_lp() -> None:
    t = torus([3, 3], 1e9)
    rate = {k.key: 1.0 for k in t.links}
    demand = {(u, v): 2.0 for u in t.gpus for v in t.gpus if u != v}
    full, _ = concurrent_flow(t, demand, rate)
    orbit = _torus_weights(t, demand, rate, 30.0)
    assert orbit is not None and orbit[0] == pytest.approx(full, rel=1e-6)
    weights = orbit[1]
    assert set(weights) == set(demand)
    for (u, v), paths in weights.items():
        assert all(p[0] == u and p[-1] == v for p in paths)
        assert all(t.has_link(a, b) for p in paths for a, b in zip(p, p[1:], strict=False))
        assert sum(paths.values()) == pytest.approx(1.0)


def test_unicast_pairs_rejects_multicast_demands() -> None:
    t = ring(3, 1e9)
    assert unicast_pairs(build_problem(t, Collective(CollectiveKind.ALLGATHER, 3000,
                                                     (0, 1, 2)))) is None
    pairs = unicast_pairs(build_problem(t, _a2a(t, 9000)))
    assert pairs is not None and len(pairs) == 6


@pytest.mark.parametrize("topo", [ring(6, 1e9, 1e-6), mesh([3, 3], 1e9), torus([4, 4], 2e9)],
                         ids=["ring6", "mesh3x3", "torus4x4"])
def test_gpu_grids_land_near_the_flow_bound(topo: Topology) -> None:
    assert _ratio(topo, _a2a(topo, 16 << 20)) < 1.02


def test_bufferless_switch_forwards_in_the_arrival_epoch() -> None:
    topo = star(5, 1e9, switch=SwitchCaps(copy=False, reduce=False, buffer=False))
    s = _compiled(topo, _a2a(topo))
    into = {(t.chunk, t.dst): t.arrive_epoch for t in s.transfers if t.dst == "sw"}
    assert all(t.start_epoch == into[(t.chunk, "sw")] for t in s.transfers if t.src == "sw")


def test_slow_uplinks_through_a_bufferless_switch() -> None:
    box = star(3, 8e9, switch=SwitchCaps(copy=True), name="box")
    topo = boxes(box, 3, Join("switch", ("g0",), 2e9, 1e-6,
                              switch=SwitchCaps(copy=False, reduce=False, buffer=False)))
    assert _ratio(topo, _a2a(topo, 9 << 20)) < 1.05


def test_mixed_slow_links_on_a_bufferless_switch_do_not_stall() -> None:
    """Slow in-links whose delays differ modulo their occupancy share no start grid."""
    nodes = [Node(f"g{i}") for i in range(4)] + [
        Node("sw", NodeKind.SWITCH, can_copy=False, has_buffer=False)]
    links = [Link("g0", "g1", 8e9), Link("g1", "g0", 8e9)]
    for i, lat in enumerate((0.0, 3e-6, 5e-6, 1e-6)):
        links += [Link(f"g{i}", "sw", 2e9, lat), Link("sw", f"g{i}", 2e9 if i % 2 else 1e9, lat)]
    topo = Topology.build("mixed", nodes, links)
    _compiled(topo, _a2a(topo, 3 << 20))


def test_busiest_gpu_stays_inside_the_msccl_element_limit() -> None:
    """ndv2x4-like: every box's traffic is relayed by its GPU 0 (the pipeline wants more)."""
    box = star(8, 50e9, switch=SwitchCaps(copy=True), name="box")
    topo = boxes(box, 4, Join("switch", ("g0",), 12.5e9,
                              switch=SwitchCaps(copy=False, reduce=False, buffer=False)))
    s = _compiled(topo, _a2a(topo, 1 << 30))
    steps = Counter(x for t in s.transfers for x in (t.src, t.dst) if topo.node(x).is_gpu)
    assert s.collective.chunks_per_rank > 1
    assert flow_subchunks(topo, _a2a(topo, 1 << 30), 10**9) < math.ceil(
        PIPELINE_TARGET * len(topo.links) / (len(topo.gpus) ** 2 * 3))  # the limit binds
    assert max(steps.values()) <= 4096


@st.composite
def _topologies(draw) -> Topology:
    """A random strongly connected graph of 3–6 GPUs, maybe with a bufferless switch."""
    n = draw(st.integers(3, 6))
    names = [f"g{i}" for i in range(n)]
    edges = {(names[i], names[(i + 1) % n]) for i in range(n)}  # a ring keeps it connected
    edges |= set(draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(names)),
                               max_size=8)))
    nodes = [Node(x) for x in names]
    if draw(st.booleans()):
        nodes.append(Node("sw", NodeKind.SWITCH, can_copy=False, has_buffer=draw(st.booleans())))
        attached = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        edges |= {(g, "sw") for g in attached} | {("sw", g) for g in attached}
    bw = st.sampled_from([1e9, 2e9, 5e9])
    links = [Link(u, v, draw(bw), draw(st.sampled_from([0.0, 1e-6])))
             for u, v in sorted(edges) if u != v]
    topo = Topology.build("random", nodes, links)
    assert nx.is_strongly_connected(topo.graph())
    return topo


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=_topologies(), size=st.sampled_from([6000, 1 << 16, 3 << 20]))
def test_random_topologies_give_checked_schedules(topo: Topology, size: int) -> None:
    coll = _a2a(topo, size)
    s = _compiled(topo, coll)
    assert s.finish_time_s >= _flow_bound(topo, coll, s) * (1 - 1e-9)


def _steps(transfers) -> int:
    """The most steps one GPU takes: sub-chunks it receives and its own it sends."""
    into = Counter(t.dst for t in transfers)
    held = {(t.chunk, t.dst) for t in transfers}
    own = Counter(t.src for t in transfers if (t.chunk, t.src) not in held)
    return max(into[g] + own[g] for g in into)


def test_the_runtime_cap_leaves_routes_alone_where_it_does_not_bind() -> None:
    t = mesh([4, 4], 1e9)
    p = build_problem(t, _a2a(t))
    default, _ = solve_flow_alltoall(p, Budget.of(LIMIT_S))
    free, _ = solve_flow_alltoall(p, Budget.of(LIMIT_S), cap=math.inf)
    assert default.transfers() == free.transfers()


def test_a_tight_cap_balances_relaying_and_the_file_verifies(tmp_path, monkeypatch) -> None:
    """On the LP's own routes the centre of a 4×4 mesh takes 75 steps (60 sub-chunks in,
    15 of its own out); held to 68 (1088 in the file, at 16 sub-chunks a chunk) the
    routes go round it, and the file is valid."""
    t = mesh([4, 4], 1e9)
    p = build_problem(t, _a2a(t))
    assert _steps(solve_flow_alltoall(p, Budget.of(LIMIT_S))[0].transfers()) == 75
    held, notes = solve_flow_alltoall(p, Budget.of(LIMIT_S), cap=68)
    assert _steps(held.transfers()) <= 68 and "cap of 68" in notes[0]
    monkeypatch.setattr(flow_alltoall, "room", lambda nranks, share: 1088)
    out = tmp_path / "a.xml"
    result = te_ccl.compile(t, _a2a(t, 256), backend="scale", output=out,
                            time_limit_s=LIMIT_S)
    assert any("cap of 1,088" in n for n in result.schedule.info.notes)
    assert _steps(result.schedule.transfers) < 1100 < 1200  # rounding may add one or two
    assert verify_msccl(out).valid
