"""No schedule beats its lower bound, replayed by the simulator (the yardstick compile
reports against the bound): every candidate auto weighs on the reducing FRED wafers,
sampled templates on every shipped topology the templates cover, and the flow backends on
small collectives of shipped topologies."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.bounds import lower_bound, separating_cut_bandwidth
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.compiler.portfolio import TEMPLATE_MAX_GPUS
from te_ccl.errors import SolverError, SpecError
from te_ccl.fred.in_switch import in_switch_candidate
from te_ccl.schedule import Schedule
from te_ccl.simulate import simulate_schedule
from te_ccl.spec.topology import load_topology, shipped_topologies
from te_ccl.topology import Link, Node, NodeKind, Topology

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
COVERED = [n for n in shipped_topologies() if load_topology(n).ngpus <= TEMPLATE_MAX_GPUS]


def collective(kind: str, ranks: tuple[int, ...], chunk_bytes: int = 4096) -> Collective:
    root = ranks[0] if kind in ("broadcast", "reduce") else None
    return Collective(CollectiveKind(kind), len(ranks) * chunk_bytes, ranks, root=root)


def assert_not_below_bound(schedule: Schedule) -> None:
    bound = lower_bound(schedule.topology, schedule.collective)
    simulated = simulate_schedule(schedule).finish_time_s
    assert simulated >= bound.seconds * (1 - 1e-9), (schedule.info.backend, simulated,
                                                     bound.parts)


def candidates(topo: Topology, c: Collective) -> list[str]:
    """What auto weighs against the flow schedule: the templates, and the in-switch
    schedule where the switches reduce and copy."""
    return applicable(topo, c) + (["in-switch"] if in_switch_candidate(topo, c) else [])


def build(name: str, topo: Topology, c: Collective) -> Schedule | None:
    if name == "in-switch":
        return in_switch_candidate(topo, c)
    try:
        return build_baseline(name, topo, c)
    except BaselineError:
        return None


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "broadcast",
                                  "reduce"])
@pytest.mark.parametrize("name", ["fred-b", pytest.param("fred-d", marks=pytest.mark.slow)])
def test_no_candidate_beats_the_bound_on_a_reducing_fabric(name, kind):
    topo = load_topology(name)
    c = collective(kind, tuple(range(topo.ngpus)))
    names = candidates(topo, c)
    assert "in-switch" in names
    for template in names:
        s = build(template, topo, c)
        if s is not None:
            assert_not_below_bound(s)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(COVERED), st.sampled_from(KINDS), st.data())
def test_no_template_beats_the_bound_on_a_shipped_topology(name, kind, data):
    topo = load_topology(name)
    c = collective(kind, tuple(range(topo.ngpus)))
    names = candidates(topo, c)
    if kind == "alltoall":  # the rings relay every pair's chunk: slow to replay, never best
        names = [x for x in names if not x.startswith("ring")]
    s = build(data.draw(st.sampled_from(names)), topo, c)
    if s is not None:
        assert_not_below_bound(s)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([n for n in COVERED if load_topology(n).ngpus <= 20]),
       st.sampled_from(["allgather", "reducescatter", "allreduce", "broadcast"]),
       st.sampled_from(["milp", "rounds", "lp"]), st.data())
def test_no_flow_schedule_beats_the_bound_on_a_shipped_topology(name, kind, backend, data):
    topo = load_topology(name)
    ranks = tuple(sorted(data.draw(st.sets(st.integers(0, topo.ngpus - 1), min_size=2,
                                           max_size=3))))
    try:
        s = solve(topo, collective(kind, ranks), SolveParams(backend=backend, time_limit_s=5))
    except (SolverError, SpecError):
        return  # gave up within the time limit, or a subset that cannot relay inside itself
    assert_not_below_bound(s)


def star(n: int, reduce: bool) -> Topology:
    nodes = [Node(f"g{i}") for i in range(n)] + [
        Node("sw", NodeKind.SWITCH, can_copy=True, can_reduce=reduce)]
    links = [x for i in range(n) for x in (Link(f"g{i}", "sw", 1e9), Link("sw", f"g{i}", 1e9))]
    return Topology.build("star", nodes, links)


def test_a_reduced_stream_crosses_a_cut_once():
    # a reducing star: each GPU sends and receives M once, so the bound is M/b; a star
    # that only copies adds nothing: every GPU's partials arrive from other GPUs, 2(N−1)·M
    # bytes into the N GPUs, ReduceScatter + AllGather's 2(N−1)/N·M/b
    c = collective("allreduce", (0, 1, 2, 3), chunk_bytes=1 << 20)
    reducing = lower_bound(star(4, True), c)
    assert reducing.seconds == pytest.approx(c.size_bytes / 1e9)
    plain = lower_bound(star(4, False), c)
    assert plain.seconds == pytest.approx(2 * 3 / 4 * c.size_bytes / 1e9)
    assert plain.argument == "gossip_s"


def test_a_gpu_outside_the_collective_reduces_too():
    # the star's hub as a GPU that takes no part: it adds the partials it relays, so each
    # member sends and receives M once
    topo = Topology.build("hub", [Node(f"g{i}") for i in range(5)],
                          [x for i in range(1, 5)
                           for x in (Link(f"g{i}", "g0", 1e9), Link("g0", f"g{i}", 1e9))])
    assert separating_cut_bandwidth(topo, list(topo.gpus[1:])) == pytest.approx(1e9)
    c = collective("allreduce", (1, 2, 3, 4), chunk_bytes=1 << 20)
    assert lower_bound(topo, c).seconds == pytest.approx(c.size_bytes / 1e9)


def test_the_separating_cut_beyond_the_exact_limit_is_a_single_member(monkeypatch):
    import te_ccl.bounds as bounds

    # two reducing stars joined by a thin trunk: the exact cut is the trunk
    nodes = [Node(f"g{i}") for i in range(4)] + [
        Node(s, NodeKind.SWITCH, can_reduce=True) for s in ("a", "b")]
    links = [Link("a", "b", 1e8), Link("b", "a", 1e8)] + [
        x for i in range(4) for x in (Link(f"g{i}", "ab"[i // 2], 1e9),
                                      Link("ab"[i // 2], f"g{i}", 1e9))]
    topo = Topology.build("two", nodes, links)
    assert separating_cut_bandwidth(topo, list(topo.gpus)) == pytest.approx(1e8)
    monkeypatch.setattr(bounds, "EXACT_CUT_MAX_GPUS", 2)  # weaker, still a valid bound
    assert separating_cut_bandwidth(topo, list(topo.gpus)) == pytest.approx(1e9)
