"""AllReduce as one problem: partial sums meet in forward time at a root that reduces
(a switch with ``reduce: true`` where one exists) and the sum is multicast from there;
every schedule is checked by the independent schedule checker."""

from __future__ import annotations

from dataclasses import replace

import pytest

from te_ccl.backends.base import SolveParams
from te_ccl.backends.lp import solve_lp
from te_ccl.backends.milp import solve_milp
from te_ccl.backends.rounds import solve_rounds
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.deadline import Budget
from te_ccl.errors import SolverError
from te_ccl.model.extract import prune, to_transfers
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.model.problem import allreduce_problem
from te_ccl.model.trees import pipelined_trees
from te_ccl.schedule import Schedule
from te_ccl.simulate import simulate_schedule
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule

P = SolveParams(backend="milp", time_limit_s=20)


def _switch(name: str, reduce: bool, buffer: bool = False) -> Node:
    return Node(name, NodeKind.SWITCH, can_copy=True, can_reduce=reduce, has_buffer=buffer)


def star(n: int, reduce: bool) -> Topology:
    nodes = [Node(f"g{i}") for i in range(n)] + [_switch("sw", reduce)]
    links = [Link(f"g{i}", "sw", 1e9) for i in range(n)] + [Link("sw", f"g{i}", 1e9)
                                                            for i in range(n)]
    return Topology.build("star", nodes, links)


def two_level(reduce: bool) -> Topology:
    """Two L1 switches of two GPUs under one L2, every link alike (FRED-B's thin uplinks)."""
    nodes = [Node(f"g{i}") for i in range(4)] + [_switch(s, reduce) for s in ("a", "b", "top")]
    pairs = [("g0", "a"), ("g1", "a"), ("g2", "b"), ("g3", "b"), ("a", "top"), ("b", "top")]
    links = [Link(u, v, 1e9) for u, v in pairs] + [Link(v, u, 1e9) for u, v in pairs]
    return Topology.build("tree", nodes, links)


def _solve(topo: Topology, n: int) -> tuple[Schedule, int, bool]:
    coll = Collective(CollectiveKind.ALLREDUCE, 1000 * n, tuple(range(n)))
    problem = allreduce_problem(topo, coll)
    result = solve_milp(problem, P, Budget.of(P.time_limit_s))
    return Schedule(topo, coll, problem.epoch_s, result.transfers), result.finish_epoch, \
        result.optimal


def test_partials_meet_in_the_reducing_switch_and_the_sum_is_multicast():
    schedule, finish, optimal = _solve(star(4, reduce=True), 4)
    assert check_schedule(schedule) == []
    # each GPU sends every chunk once and receives it once: 4 sends, one hop back
    assert (finish, optimal) == (5, True)
    ups = [t for t in schedule.transfers if t.dst == "sw"]
    assert len(ups) == 16 and all(t.op == "reduce" for t in ups)
    for c in range(4):  # a switch without buffer adds what arrives in one epoch
        assert len({t.start_epoch for t in ups if t.chunk == c}) == 1
    assert all(t.op == "copy" for t in schedule.transfers if t.src == "sw")


def test_the_optimum_needs_the_switch_to_reduce():
    _, with_reduce, _ = _solve(star(4, reduce=True), 4)
    schedule, without, _ = _solve(star(4, reduce=False), 4)
    assert check_schedule(schedule) == []
    assert without > with_reduce
    # the in-switch schedule is rejected where the switch cannot add partials
    moved = replace(_solve(star(4, reduce=True), 4)[0], topology=star(4, reduce=False))
    assert "switch" in {v.rule for v in check_schedule(moved)}


def test_two_level_tree_reduces_on_the_way_up():
    schedule, finish, optimal = _solve(two_level(reduce=True), 4)
    assert check_schedule(schedule) == []
    assert (finish, optimal) == (7, True)  # chunk 3 leaves at 3, four hops to its ranks
    up = [t for t in schedule.transfers if t.dst == "top"]
    assert len(up) == 8 and all(t.op == "reduce" for t in up)  # one sum per L1 and chunk
    slow, finish_without, _ = _solve(two_level(reduce=False), 4)
    assert check_schedule(slow) == [] and finish_without > finish


@pytest.mark.parametrize("topo", [star(4, True), two_level(True)], ids=["star", "tree"])
def test_lower_bound_is_the_optimum_here(topo):
    coll = Collective(CollectiveKind.ALLREDUCE, 4000, (0, 1, 2, 3))
    _, finish, _ = _solve(topo, 4)
    assert horizon_lower_bound(allreduce_problem(topo, coll)) == finish


def test_root_is_a_gpu_without_reducing_switches():
    coll = Collective(CollectiveKind.ALLREDUCE, 4000, (0, 1, 2, 3))
    roots = {r.root for r in allreduce_problem(star(4, False), coll).reductions.values()}
    assert roots == {"g0", "g1", "g2", "g3"}
    roots = {r.root for r in allreduce_problem(two_level(True), coll).reductions.values()}
    assert roots == {"top"}


def test_lp_hands_partial_sums_to_the_milp_and_rounds_to_fixed_trees():
    topo = star(3, reduce=True)
    coll = Collective(CollectiveKind.ALLREDUCE, 3000, (0, 1, 2))
    problem = allreduce_problem(topo, coll)
    result = solve_lp(problem, P, Budget.of(10))
    assert "used milp" in result.notes[0]
    assert check_schedule(Schedule(topo, coll, problem.epoch_s, result.transfers)) == []
    result = solve_rounds(problem, P, Budget.of(10))
    assert "pipelined" in result.status
    assert check_schedule(Schedule(topo, coll, problem.epoch_s, result.transfers)) == []
    with pytest.raises(SolverError, match="use the milp backend"):
        solve_rounds(allreduce_problem(star(3, reduce=False), coll), P, Budget.of(10))


def test_pipelined_trees_are_a_valid_schedule_or_none():
    coll = Collective(CollectiveKind.ALLREDUCE, 4000, (0, 1, 2, 3))
    for topo in (star(4, True), two_level(True)):
        problem = allreduce_problem(topo, coll)
        keys = pipelined_trees(problem)
        assert keys is not None
        moves = prune(problem, to_transfers(problem, keys))
        assert check_schedule(Schedule(topo, coll, problem.epoch_s, tuple(moves))) == []
    # partials of one chunk would meet in a switch that cannot add them
    assert pipelined_trees(allreduce_problem(star(4, False), coll)) is None


@pytest.mark.parametrize("topo", [star(4, True), two_level(True), two_level(False)],
                         ids=["star", "tree", "tree-no-reduce"])
def test_replayed_schedule_does_not_beat_the_bound(topo):
    schedule, _, _ = _solve(topo, 4)
    bound = lower_bound(schedule.topology, schedule.collective).seconds
    assert simulate_schedule(schedule).finish_time_s >= bound * (1 - 1e-9)
