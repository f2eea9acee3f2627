"""Pipelined fixed trees (the MILP's first incumbent) for fan-out problems."""

from __future__ import annotations

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.model import build_problem
from te_ccl.model.extract import prune, to_transfers
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.model.trees import pipelined_trees
from te_ccl.schedule import Schedule
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule


def star(n: int, copy: bool) -> Topology:
    nodes = [Node(f"g{i}") for i in range(n)] + [Node("sw", NodeKind.SWITCH, can_copy=copy)]
    links = [Link(f"g{i}", "sw", 1e9) for i in range(n)] + [Link("sw", f"g{i}", 1e9)
                                                            for i in range(n)]
    return Topology.build("star", nodes, links)


def test_allgather_through_a_copying_switch_is_valid():
    topo = star(4, copy=True)
    coll = Collective(CollectiveKind.ALLGATHER, 4000, (0, 1, 2, 3))
    problem = build_problem(topo, coll)
    keys = pipelined_trees(problem)
    assert keys is not None
    moves = prune(problem, to_transfers(problem, keys))
    assert check_schedule(Schedule(topo, coll, problem.epoch_s, tuple(moves))) == []
    # the switch multicasts a chunk in its arrival epoch and every pair of chunks shares
    # a destination: four different epochs, the last chunk arriving two later
    assert max(t.arrive_epoch for t in moves) == 5 >= horizon_lower_bound(problem)


def test_no_trees_where_a_switch_would_have_to_copy():
    coll = Collective(CollectiveKind.ALLGATHER, 4000, (0, 1, 2, 3))
    assert pipelined_trees(build_problem(star(4, copy=False), coll)) is None
