"""Collectives and 3D-parallel phases on the FRED wafer and the mesh: published figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.errors import SpecError
from te_ccl.fred.collectives import compile_fred, in_switch_collectives
from te_ccl.fred.mesh import WAFER_MESH, compile_mesh
from te_ccl.fred.ops import CollectiveOp
from te_ccl.fred.strategy import PHASES, all_strategies, compile_phase, parse_strategy
from te_ccl.fred.wafer import VARIANTS, wafer_from_topology
from te_ccl.spec.topology import load_topology

D = 1e9
WAFER = tuple(range(20))


def _bw(result) -> float:
    """Effective bandwidth per NPU in GB/s, leaving out the time that does not scale with
    the bytes (the switch phases' reconfiguration, 5.5 ns each, and the latency), which the
    published figures do not count."""
    return result.injected_bytes / (result.time_s - result.fixed_s) / 1e9


def test_every_in_switch_phase_costs_one_reconfiguration_and_its_path_latency():
    w = VARIANTS["fred-d"]
    r = compile_fred(w, [CollectiveOp("allreduce", WAFER, D)])
    assert w.reconfig_s == pytest.approx(4096 / 750e9)
    # NPU → L1 → L2 → L1 → NPU: 4 wires of 5 ns, FRED_3(32) twice (9 stages) and
    # FRED_3(80) (13 stages) at 0.5 ns a stage
    path = w.path_latency_s(WAFER, WAFER)
    assert path == pytest.approx(4 * 5e-9 + (9 + 13 + 9) * 0.5e-9)
    assert r.fixed_s == pytest.approx(len(r.phases) * (w.reconfig_s + path))
    assert r.time_s == pytest.approx(D / 3e12 + r.fixed_s, rel=1e-12)
    assert [ph.end_s - ph.start_s for ph in r.phases] == pytest.approx(
        [D / 3e12 + w.reconfig_s + path] * len(r.phases))


def test_latency_makes_small_collectives_more_than_proportionally_slow():
    """1 MB takes longer than 1 GB / 1000 on every fabric: each collective pays its path
    latency (and the switches their reconfiguration) whatever its size."""
    for fab in (WAFER_MESH, *VARIANTS.values()):
        big, small = (compile_phase(fab, parse_strategy("MP20"), "MP", size)
                      for size in (D, D / 1000))
        assert small.time_s > big.time_s / 1000 and small.fixed_s == big.fixed_s > 0


@pytest.mark.parametrize("variant,expected,tol", [
    ("fred-a", 1875, 0.06), ("fred-b", 1500, 1e-9), ("fred-c", 3000, 1e-9),
    ("fred-d", 3000, 1e-9)])
def test_wafer_wide_allreduce_effective_bandwidth(variant, expected, tol):
    r = compile_fred(VARIANTS[variant], [CollectiveOp("allreduce", WAFER, D)])
    assert _bw(r) == pytest.approx(expected, rel=tol)
    assert not r.notes


def test_in_switch_allreduce_sends_half_the_traffic():
    b = compile_fred(VARIANTS["fred-b"], [CollectiveOp("allreduce", WAFER, D)])
    c = compile_fred(VARIANTS["fred-c"], [CollectiveOp("allreduce", WAFER, D)])
    assert b.injected_bytes == pytest.approx(D)
    assert c.injected_bytes == pytest.approx(2 * 19 / 20 * D)
    d = compile_fred(VARIANTS["fred-d"], [CollectiveOp("allreduce", WAFER, D)])
    assert D / _bw(d) == pytest.approx(c.injected_bytes / _bw(c) * 20 / 38)


def test_mesh_figures():
    assert _bw(compile_mesh(WAFER_MESH, [CollectiveOp("allreduce", WAFER, D)])) == \
        pytest.approx(1500)
    assert WAFER_MESH.io_factor == pytest.approx(750 / 1152)
    assert round(WAFER_MESH.io_factor, 2) == 0.65


@pytest.mark.parametrize("fabric,expected", [
    (WAFER_MESH, 750), (VARIANTS["fred-a"], 375), (VARIANTS["fred-c"], 3000),
    (VARIANTS["fred-d"], 3000)])
def test_dp_phase_of_mp2_dp5_pp2(fabric, expected):
    r = compile_phase(fabric, parse_strategy("MP2-DP5-PP2"), "DP", D)
    assert len(r.ops) == 4
    assert _bw(r) == pytest.approx(expected)


@pytest.mark.parametrize("variant", ["fred-b", "fred-d"])
def test_every_strategy_routes_without_conflict(variant):
    strategies = all_strategies()
    assert len(strategies) == 18
    for s in strategies:
        for kind in PHASES:
            r = compile_phase(VARIANTS[variant], s, kind, D)
            if r is not None:
                assert r.notes == (), (s.name, kind)
                assert r.phases


def test_placement_and_groups():
    s = parse_strategy("PP2-MP2-DP5")
    assert s.name == "MP2-DP5-PP2"
    assert s.groups("MP")[0] == (0, 1)
    assert s.groups("DP")[0] == (0, 4, 8, 12, 16)
    pairs = s.phase_ops("PP", 1)[0].pairs
    assert (0, 2) in pairs and len(pairs) == 10
    for bad in ("MP3-DP7", "XX20", "MP0-DP20"):
        with pytest.raises(SpecError):
            parse_strategy(bad)


@pytest.mark.parametrize("kind,steps", [("reducescatter", 20), ("allgather", 20),
                                        ("broadcast", 1), ("reduce", 1), ("alltoall", 19)])
def test_serial_flows_become_phases(kind, steps):
    root = 3 if kind in ("broadcast", "reduce") else None
    op = CollectiveOp(kind, WAFER, D, root=root)
    assert len(op.steps()) == steps
    r = in_switch_collectives(VARIANTS["fred-d"], [op])
    assert len(r.phases) >= steps and not r.notes
    assert {fi.step for ph in r.phases for fi in ph.flows} == set(range(steps))
    assert r.time_s > 0


def test_reduce_scatter_in_switch_time_and_the_faster_ring():
    w = VARIANTS["fred-d"]
    op = CollectiveOp("reducescatter", WAFER, D)
    # 20 serial reduces of D/20, each striped over the 4 NPU lanes of 750 GB/s
    streams = in_switch_collectives(w, [op])
    assert streams.time_s == pytest.approx(D / 3e12 + streams.fixed_s)
    assert streams.fixed_s == pytest.approx(20 * (w.reconfig_s + w.path_latency_s(WAFER, WAFER)))
    # a ring sends 19/20 of D from each NPU: FRED-D's switches forward it, as FRED-C's do
    best = compile_fred(w, [op])
    assert best.time_s == compile_fred(VARIANTS["fred-c"], [op]).time_s
    assert best.time_s == pytest.approx(19 / 20 * D / 3e12 + best.fixed_s)
    # as fast by the bytes, the hierarchical ring pays fewer latencies than the flat ring's
    # 19 steps through the L2: 3 steps within each L1, then 4 between them
    assert best.fixed_s == pytest.approx(len(best.phases) * w.reconfig_s
                                         + 3 * w.path_latency_s((0,), (1,))
                                         + 4 * w.path_latency_s((0,), (4,)))


def test_pipeline_traffic_counts_uplink_lanes_per_direction():
    """PP20: stage 3 → 4 comes down into L1.1 while stage 7 → 8 goes up out of it; each
    direction has FRED-B's 2 uplink lanes, so the 4 stripes of each take 2 rounds."""
    w = VARIANTS["fred-b"]
    s = parse_strategy("MP1-DP1-PP20")
    streams = in_switch_collectives(w, s.phase_ops("PP", D))
    assert len(streams.phases) == 2
    assert streams.time_s == pytest.approx(D / 1.5e12 + streams.fixed_s)
    assert streams.fixed_s == pytest.approx(2 * (w.reconfig_s + w.path_latency_s((0,), (4,))))
    assert compile_phase(w, s, "PP", D).time_s <= compile_phase(VARIANTS["fred-a"], s, "PP",
                                                                D).time_s


_pairs = st.lists(st.tuples(st.integers(0, 19), st.integers(0, 19)).filter(
    lambda p: p[0] != p[1]), min_size=1, max_size=12, unique=True)


@st.composite
def _patterns(draw) -> list[CollectiveOp]:
    """Concurrent collectives on disjoint groups of the wafer, and point-to-point sends."""
    ranks = draw(st.permutations(WAFER))
    sizes = draw(st.lists(st.integers(2, 8), min_size=1, max_size=4))
    kinds = draw(st.lists(st.sampled_from(["allreduce", "reducescatter", "allgather",
                                           "broadcast", "reduce", "alltoall"]),
                          min_size=len(sizes), max_size=len(sizes)))
    ops, at = [], 0
    for n, kind in zip(sizes, kinds, strict=True):
        group = tuple(sorted(ranks[at:at + n]))
        at += n
        if len(group) > 1:
            root = group[0] if kind in ("broadcast", "reduce") else None
            ops.append(CollectiveOp(kind, group, draw(st.sampled_from([1e6, 1e9])), root=root))
    if draw(st.booleans()):
        ops.append(CollectiveOp("sendrecv", (), 1e9, pairs=tuple(draw(_pairs)), cls="PP"))
    return ops or [CollectiveOp("allreduce", WAFER, D)]


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(ops=_patterns())
def test_reducing_switches_never_lose_to_forwarding_ones(ops):
    """FRED-B contains FRED-A's hardware (FRED-D FRED-C's): on every traffic pattern it
    is at least as fast."""
    for with_, without in (("fred-b", "fred-a"), ("fred-d", "fred-c")):
        assert compile_fred(VARIANTS[with_], ops).time_s <= \
            compile_fred(VARIANTS[without], ops).time_s


def test_shipped_topologies_give_the_variants():
    for name, w in VARIANTS.items():
        got = wafer_from_topology(load_topology(name))
        assert (got.uplink_Bps, got.in_switch, got.npu_Bps, got.n_l1) == \
            (w.uplink_Bps, w.in_switch, w.npu_Bps, 5)
    with pytest.raises(SpecError):
        wafer_from_topology(load_topology("wafer-mesh5x4"))


@pytest.mark.parametrize("topo_name", ["fred-b", "fred-d"])
@pytest.mark.parametrize("kind,root,chunks", [
    ("allreduce", None, 1), ("reducescatter", None, 1), ("allgather", None, 1),
    ("broadcast", 3, 4), ("reduce", 5, 2), ("alltoall", None, 1)])
def test_in_switch_schedule_passes_the_independent_checker(topo_name, kind, root, chunks):
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.fred.in_switch import in_switch_schedule
    from te_ccl.verify.schedule_check import check_schedule

    topo = load_topology(topo_name)
    coll = Collective(CollectiveKind(kind), 8 * 10**6, tuple(range(8)), chunks, root)
    s = in_switch_schedule(topo, coll)
    assert check_schedule(s) == []
    reduced_at_switch = [t for t in s.transfers if t.op == "reduce" and t.dst.startswith("L")]
    assert bool(reduced_at_switch) == coll.is_reduction


def test_in_switch_schedule_needs_reducing_switches():
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.fred.in_switch import in_switch_schedule

    with pytest.raises(SpecError):
        in_switch_schedule(load_topology("fred-c"),
                           Collective(CollectiveKind.ALLREDUCE, 1000, (0, 1)))


def test_mesh_model_matches_the_shipped_mesh():
    topo = load_topology("wafer-mesh5x4")
    shipped = {(topo.rank(k.src), topo.rank(k.dst)) for k in topo.links}
    model = {(a, b) for a in WAFER for b in WAFER
             if a != b and len(WAFER_MESH.xy_path(a, b)) == 1}
    assert shipped == model
    assert {k.bandwidth_Bps for k in topo.links} == {WAFER_MESH.link_Bps}


def test_every_strategy_routes_with_one_port_per_npu():
    # the port-level view: L1 = FRED_3(8) (4 NPUs + 4 uplinks), L2 = FRED_3(20)
    from te_ccl.fred.wafer import Wafer

    w = Wafer("port-level", 12e12, True, lane_Bps=3e12)
    assert (w.l1_ports, w.l2_ports) == (8, 20)
    for s in all_strategies():
        for kind in PHASES:
            r = compile_phase(w, s, kind, D)
            assert r is None or r.notes == (), (s.name, kind)
