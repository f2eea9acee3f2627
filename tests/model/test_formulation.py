"""The constraint families on tiny networks, solved by CP-SAT and checked independently."""

from __future__ import annotations

import pytest

from te_ccl.backends.base import Clock, SolveParams
from te_ccl.backends.cpsat import solve_milp
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import SolverError
from te_ccl.model import build_problem, formulate
from te_ccl.model.extract import prune, reverse_in_time
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology import Link, Node, Topology
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
    # AllGather of the two end GPUs: the middle GPU must relay both chunks
    coll = Collective(CollectiveKind.ALLGATHER, 2000, (0, 2))
    with pytest.raises(SolverError, match="infeasible"):
        solve_milp(build_problem(_relay_line(1000), coll), P, Clock(10))
    topo = _relay_line(2000)
    r = solve_milp(build_problem(topo, coll), P, Clock(10))
    assert check_schedule(Schedule(topo, coll, 1e-6, r.transfers)) == []


def test_buffer_limit_reroutes_around_a_full_gpu():
    # two routes g0 -> g3: through g1 (no relay room) or through g2
    nodes = [Node("g0"), Node("g1", buffer_bytes=0), Node("g2"), Node("g3")]
    pairs = [("g0", "g1"), ("g1", "g3"), ("g0", "g2"), ("g2", "g3")]
    topo = Topology.build("d", nodes, [Link(a, b, 1e9) for a, b in pairs]
                          + [Link(b, a, 1e9) for a, b in pairs])
    coll = Collective(CollectiveKind.ALLGATHER, 4000, (0, 3), chunks_per_rank=2)
    r = solve_milp(build_problem(topo, coll), P, Clock(10))
    assert "g1" not in {t.dst for t in r.transfers}
    assert check_schedule(Schedule(topo, coll, 1e-6, r.transfers)) == []


def test_prune_drops_dead_ends_and_keeps_feeders():
    p = build_problem(line(3), Collective(CollectiveKind.BROADCAST, 1000, (0, 1, 2), root=0))
    ts = [Transfer(0, "g0", "g1", 0, 1), Transfer(0, "g1", "g2", 1, 2),
          Transfer(0, "g2", "g1", 2, 3), Transfer(0, "g1", "g0", 3, 4)]
    assert prune(p, ts) == ts[:2]


def test_reverse_in_time_keeps_delays():
    ts = reverse_in_time([Transfer(0, "a", "b", 0, 2)], 5)
    assert ts == [Transfer(0, "b", "a", 3, 5, "reduce")]


@pytest.mark.parametrize("kind", ["allreduce", "alltoall", "reducescatter"])
@pytest.mark.parametrize("backend", ["milp", "lp", "rounds"])
def test_buffer_limits_hold_for_every_backend(kind, backend):
    # g1 may relay one chunk; AllReduce relays in both phases and must count both
    from te_ccl.solve import solve

    nodes = [Node("g0"), Node("g1", buffer_bytes=2000), Node("g2"), Node("g3")]
    pairs = [("g0", "g1"), ("g1", "g3"), ("g0", "g2"), ("g2", "g3")]
    topo = Topology.build("d", nodes, [Link(a, b, 1e9) for a, b in pairs]
                          + [Link(b, a, 1e9) for a, b in pairs])
    coll = Collective(CollectiveKind(kind), 8000, (0, 3), chunks_per_rank=2)
    s = solve(topo, coll, SolveParams(backend=backend, time_limit_s=10))
    assert check_schedule(s) == []
