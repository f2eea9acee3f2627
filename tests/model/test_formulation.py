"""The constraint families on tiny networks, solved by CP-SAT and checked independently."""

from __future__ import annotations

import pytest

from te_ccl.backends.base import SolveParams
from te_ccl.backends.milp import solve_milp
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.deadline import Budget
from te_ccl.errors import SolverError
from te_ccl.model import build_problem, formulate
from te_ccl.model.extract import prune, reverse_in_time
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule

P = SolveParams(backend="milp", time_limit_s=10)


def line(n: int, **gpu) -> Topology:
    nodes = [Node(f"g{i}", **gpu) for i in range(n)]
    links = []
    for i in range(n - 1):
        links += [Link(f"g{i}", f"g{i + 1}", 1e9), Link(f"g{i + 1}", f"g{i}", 1e9)]
    return Topology.build(f"line{n}", nodes, links)


def test_rows_have_one_family_each_and_variables_exist():
    p = build_problem(line(3), Collective(CollectiveKind.ALLGATHER, 3000, (0, 1, 2)))
    form = formulate(p, 2)
    assert all(k in form.variables for terms, _, _ in form.rows for k, _ in terms)
    assert all(key[1] in p.timings for key in form.ten.x)  # only existing links


def _relay_line(limit_bytes: int) -> Topology:
    nodes = [Node("g0"), Node("g1", buffer_bytes=limit_bytes), Node("g2")]
    return Topology.build("l", nodes, [Link(a, b, 1e9) for a, b in
                                       [("g0", "g1"), ("g1", "g0"), ("g1", "g2"), ("g2", "g1")]])


def test_buffer_limit_counts_relayed_chunks():
    # AlltoAll on a line: the middle GPU relays g0's chunk for g2 and g2's for g0
    coll = Collective(CollectiveKind.ALLTOALL, 3000, (0, 1, 2))
    with pytest.raises(SolverError, match="infeasible"):
        solve_milp(build_problem(_relay_line(1000), coll), P, Budget.of(10))
    topo = _relay_line(2000)
    r = solve_milp(build_problem(topo, coll), P, Budget.of(10))
    assert check_schedule(Schedule(topo, coll, 1e-6, r.transfers)) == []


def _diamond(g1_buffer: int) -> Topology:
    nodes = [Node("g0"), Node("g1", buffer_bytes=g1_buffer), Node("g2"), Node("g3")]
    pairs = [("g0", "g1"), ("g1", "g3"), ("g0", "g2"), ("g2", "g3")]
    return Topology.build("d", nodes, [Link(a, b, 1e9) for a, b in pairs]
                          + [Link(b, a, 1e9) for a, b in pairs])


def test_buffer_limit_reroutes_around_a_full_gpu():
    # g0 -> g3 through g1 (no relay room) or through g2
    topo = _diamond(0)
    coll = Collective(CollectiveKind.GATHER, 8000, (0, 1, 2, 3), chunks_per_rank=2, root=3)
    r = solve_milp(build_problem(topo, coll), P, Budget.of(10))
    own = {c.id for c in coll.chunks() if c.sources == (1,)}
    assert all(t.chunk in own for t in r.transfers if t.src == "g1")
    assert check_schedule(Schedule(topo, coll, 1e-6, r.transfers)) == []


def test_prune_drops_dead_ends_and_keeps_feeders():
    p = build_problem(line(3), Collective(CollectiveKind.BROADCAST, 1000, (0, 1, 2), root=0))
    ts = [Transfer(0, "g0", "g1", 0, 1), Transfer(0, "g1", "g2", 1, 2),
          Transfer(0, "g2", "g1", 2, 3), Transfer(0, "g1", "g0", 3, 4)]
    assert prune(p, ts) == ts[:2]


def test_reverse_in_time_keeps_delays():
    ts = reverse_in_time([Transfer(0, "a", "b", 0, 2)], 5)
    assert ts == [Transfer(0, "b", "a", 3, 5, "reduce")]


@pytest.mark.parametrize("kind, root", [("alltoall", None), ("gather", 3), ("scatter", 0)])
@pytest.mark.parametrize("backend", ["milp", "lp", "rounds"])
def test_buffer_limits_hold_for_every_backend(kind, root, backend):
    # g1 may relay two chunks of others; every backend keeps to it
    from te_ccl.compiler import solve

    coll = Collective(CollectiveKind(kind), 8000, (0, 1, 2, 3), chunks_per_rank=2, root=root)
    s = solve(_diamond(2000), coll, SolveParams(backend=backend, time_limit_s=10))
    assert check_schedule(s) == []


def test_prune_keeps_two_identical_units_through_a_switch_that_cannot_copy():
    # two units of one chunk cross g0→sw together, each feeds one send of the switch
    nodes = [Node("g0"), Node("g1"), Node("g2"), Node("sw", NodeKind.SWITCH, can_copy=False)]
    pairs = [("g0", "sw"), ("sw", "g1"), ("sw", "g2")]
    topo = Topology.build("fork", nodes, [Link(a, b, 2e9) for a, b in pairs])
    coll = Collective(CollectiveKind.BROADCAST, 1000, (0, 1, 2), root=0)  # 2 per epoch
    moves = [Transfer(0, "g0", "sw", 0, 1), Transfer(0, "g0", "sw", 0, 1),
             Transfer(0, "sw", "g1", 1, 2), Transfer(0, "sw", "g2", 1, 2)]
    kept = prune(build_problem(topo, coll), moves)
    assert kept == sorted(moves)
    assert check_schedule(Schedule(topo, coll, 1e-6, tuple(kept))) == []
