"""solve() on hand-solved instances; every schedule goes through the independent checker."""

from __future__ import annotations

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.errors import SolverError, SpecError
from te_ccl.schedule import Transfer
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule

FAST = SolveParams(backend="milp", time_limit_s=600, threads=1)  # each proves in under a second


def ring(n: int, bw: float = 50e9, alpha: float = 0.7e-6) -> Topology:
    links = []
    for i in range(n):
        j = (i + 1) % n
        links += [Link(f"g{i}", f"g{j}", bw, alpha), Link(f"g{j}", f"g{i}", bw, alpha)]
    return Topology.build(f"ring{n}", [Node(f"g{i}") for i in range(n)], links)


def star(n: int, **switch) -> Topology:
    """n GPUs around one switch without buffer."""
    links = []
    for i in range(n):
        links += [Link(f"g{i}", "sw", 1e9), Link("sw", f"g{i}", 1e9)]
    nodes = [Node(f"g{i}") for i in range(n)] + [Node("sw", NodeKind.SWITCH, **switch)]
    return Topology.build("star", nodes, links)


def pair() -> Topology:
    return Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])


def coll(kind: str, n: int, chunks: int = 1, root: int | None = None, **kw) -> Collective:
    return Collective(CollectiveKind(kind), 1 << 20, tuple(range(n)), chunks, root=root, **kw)


def checked(topo: Topology, c: Collective, params: SolveParams = FAST):
    s = solve(topo, c, params)
    assert check_schedule(s) == []
    return s


def test_pair_allgather_is_one_epoch():
    s = checked(pair(), coll("allgather", 2))
    assert s.finish_epoch == 1 and s.info.optimal
    assert set(s.transfers) == {Transfer(0, "a", "b", 0, 1), Transfer(1, "b", "a", 0, 1)}


@pytest.mark.parametrize("chunks, epochs", [(1, 4), (2, 7)])
def test_ring8_allgather_known_optimum(chunks, epochs):
    # bidirectional ring: the farthest GPU is 4 hops away; with 2 chunks every GPU needs
    # 14 chunks through 2 incoming links carrying one chunk per epoch each
    s = checked(ring(8), coll("allgather", 8, chunks))
    assert s.finish_epoch == epochs and s.info.optimal


def test_ring8_broadcast_is_eccentricity():
    s = checked(ring(8), coll("broadcast", 8, 1, root=3))
    assert s.finish_epoch == 4 and s.info.optimal


def test_star_through_non_copying_switch():
    # the switch cannot multicast: every GPU must receive 3 chunks over its single link,
    # each one forwarded by the switch in the epoch it arrives
    s = checked(star(4, can_copy=False), coll("allgather", 4))
    assert s.finish_epoch == 4 and s.info.optimal


def test_star_through_copying_switch_is_faster():
    s = checked(star(4, can_copy=True), coll("allgather", 4))
    assert s.finish_epoch == 4 and s.info.optimal  # in-link of each GPU still carries 3
    b = checked(star(4, can_copy=True), coll("broadcast", 4, root=0))
    assert b.finish_epoch == 2


def test_rank_subset_relays_through_its_own_gpus_only():
    # the runtime runs the algorithm on the ranks' GPUs alone: g4 and g5 never relay
    s = checked(ring(6), Collective(CollectiveKind.ALLGATHER, 1 << 20, (0, 1, 2, 3)))
    assert s.finish_epoch == 3
    assert {t.src for t in s.transfers} | {t.dst for t in s.transfers} == {"g0", "g1", "g2",
                                                                           "g3"}


def test_rank_subset_that_needs_outside_relays_is_refused():
    with pytest.raises(SpecError, match="rank 0 cannot reach rank 3 without relaying"):
        solve(ring(6), Collective(CollectiveKind.ALLGATHER, 1 << 20, (0, 3)))


@pytest.mark.parametrize("kind, root", [("reducescatter", None), ("allreduce", None),
                                        ("reduce", 1), ("alltoall", None), ("gather", 2),
                                        ("scatter", 0), ("broadcast", 2)])
def test_every_kind_on_a_ring(kind, root):
    checked(ring(4), coll(kind, 4, 1, root=root))


def test_reduce_through_switch_that_cannot_reduce():
    s = checked(star(3, can_copy=True, can_reduce=False), coll("reducescatter", 3))
    assert all(t.op == "reduce" for t in s.transfers)


def test_infeasible_horizon_is_a_solver_error():
    with pytest.raises(SolverError, match="infeasible.*horizon 3 epochs"):
        solve(ring(8), coll("allgather", 8), SolveParams(backend="milp", max_horizon=3))


def test_rank_outside_topology_is_a_spec_error():
    with pytest.raises(SpecError, match="rank 9"):
        solve(ring(4), Collective(CollectiveKind.ALLGATHER, 1024, (0, 9)), FAST)


def test_time_limit_without_solution_is_a_solver_error():
    from te_ccl.spec.topology import load_topology

    mesh = load_topology("mesh4x4")
    with pytest.raises(SolverError, match="time limit"):
        solve(mesh, coll("allgather", 16, 2), SolveParams(backend="milp", time_limit_s=0.02))


def test_unreachable_destination_is_infeasible():
    t = Topology.build("oneway", [Node("a"), Node("b")], [Link("a", "b", 1e9)])
    with pytest.raises(SolverError, match="infeasible: chunk 1 cannot reach a"):
        solve(t, coll("allgather", 2), FAST)


def test_custom_demands():
    from te_ccl.collective import CustomDemand

    c = Collective(CollectiveKind.CUSTOM, 3000, (0, 1, 2, 3), 3,
                   demands=(CustomDemand(0, (2, 3), 2), CustomDemand(3, (1,), 1)))
    s = checked(ring(4), c)
    assert {t.chunk for t in s.transfers} == {0, 1, 2}


def test_solve_info_is_filled():
    s = checked(ring(4), coll("allgather", 4))
    info = s.info
    assert info.backend == "milp" and info.variables > 0 and info.constraints > 0
    assert info.solver_time_s > 0 and "proven minimal" in info.status


def test_progress_reports_the_horizon_search():
    seen: list[str] = []
    s = solve(star(4, can_copy=False), coll("allgather", 4), FAST, progress=seen.append)
    assert seen[0].startswith("horizon lower bound 3 epochs")
    assert "horizon 3: infeasible" in seen[1]  # the incumbent's 4 epochs are then minimal
    assert s.info.optimal and s.finish_epoch == 4


def test_slowest_epoch_policy_uses_fewer_epochs():
    links = [Link("a", "b", 4e9), Link("b", "a", 4e9), Link("b", "c", 1e9), Link("c", "b", 1e9)]
    t = Topology.build("mixed", [Node("a"), Node("b"), Node("c")], links)
    c = Collective(CollectiveKind.ALLGATHER, 3 << 20, (0, 1, 2))
    fast = checked(t, c)
    slow = checked(t, c, SolveParams(backend="milp", time_limit_s=600, epoch="slowest"))
    assert slow.finish_epoch < fast.finish_epoch
    assert slow.epoch_s > fast.epoch_s



@pytest.mark.parametrize(("backend", "max_horizon", "runs"), [
    ("auto", None, "portfolio"), ("auto", 40, "flow"), ("scale", None, "scale"),
    ("scale", 40, "scale"), ("milp", None, "flow"), ("lp", 40, "flow"), ("rounds", None, "flow"),
])
def test_what_runs_is_decided_in_one_place(backend, max_horizon, runs):
    from te_ccl.backends.select import strategy_for

    assert strategy_for(SolveParams(backend=backend, max_horizon=max_horizon)) == runs


def test_the_links_a_fast_schedule_may_use_are_found_once_per_chunking(monkeypatch):
    # the portfolio runs the scale backend and the flow model on one topology: the slow
    # links are looked for once
    import te_ccl.compiler.strategy as strategy

    real, seen = strategy.without_slow_links, []

    def counting(topology, collective):
        seen.append(collective)
        return real(topology, collective)

    monkeypatch.setattr(strategy, "without_slow_links", counting)
    topo = Topology.build("ring4", [Node(f"g{i}") for i in range(4)],
                          [Link(f"g{i}", f"g{(i + d) % 4}", 1e9, 1e-6)
                           for i in range(4) for d in (1, 3)])
    s = solve(topo, Collective(CollectiveKind.ALLGATHER, 4 << 20, tuple(range(4))),
              SolveParams(time_limit_s=10, threads=1))
    assert check_schedule(s) == [] and len(seen) == len(set(seen)) >= 1
