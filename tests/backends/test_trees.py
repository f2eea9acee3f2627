"""Packed broadcast trees of the scale backend: the packing reaches the cut bound, the
chunks follow it, and the lowered XML of DGX-1's AllGather replays near the bound."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale import compile_scale, scale_plan
from te_ccl.backends.scale.trees import _arborescence, pack_trees, solve_trees
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import Timer
from te_ccl.deadline import Budget
from te_ccl.errors import SolverError
from te_ccl.model.problem import build_problem
from te_ccl.schedule import Schedule
from te_ccl.spec.topology import load_topology
from te_ccl.topology.generators import mesh, ring
from te_ccl.verify.schedule_check import check_schedule

K = CollectiveKind
GB = 10**9
# far above the second or so each solve takes: the outcome does not hang on the
# machine's speed
LIMIT_S = 600


def _every(topo, kind: CollectiveKind, size: int, **kw) -> Collective:
    return Collective(kind, size, tuple(range(topo.ngpus)), **kw)


@pytest.mark.parametrize("name", ["dgx1", "ring8", "mesh4x4"])
def test_the_packing_reaches_the_cut_bound(name):
    topo = load_topology(name)
    c = _every(topo, K.ALLGATHER, GB)
    packing = pack_trees(build_problem(topo, c))
    assert packing.seconds == pytest.approx(lower_bound(topo, c).seconds, rel=1e-5)
    for trees in packing.trees.values():
        for _, edges in trees:  # spanning arborescences: one in-edge per non-root node
            tree = nx.DiGraph(list(edges))
            assert nx.is_arborescence(tree) and tree.number_of_nodes() == topo.ngpus


def test_dgx1_trees_are_shallow():
    """The second round keeps the rate and moves the weight to trees of few hops."""
    packing = pack_trees(build_problem(load_topology("dgx1"), _every(load_topology("dgx1"),
                                                                      K.ALLGATHER, GB)))
    depth = max(max(nx.shortest_path_length(nx.DiGraph(list(e)), s).values())
                for s, trees in packing.trees.items() for _, e in trees)
    assert depth <= 4


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.data())
def test_arborescence_is_minimal(n, data):
    """Chu–Liu/Edmonds against networkx on random complete digraphs."""
    nodes = list(range(n))
    weight = {(u, v): data.draw(st.integers(0, 9)) for u in nodes for v in nodes if u != v}
    cost, edges = _arborescence(weight, nodes, 0)
    g = nx.DiGraph()
    g.add_weighted_edges_from((u, v, w) for (u, v), w in weight.items() if v != 0)
    best = nx.minimum_spanning_arborescence(g)
    assert cost == sum(weight[e] for e in best.edges())
    tree = nx.DiGraph(list(edges))
    assert nx.is_arborescence(tree) and len(edges) == n - 1 and tree.in_degree(0) == 0


def test_an_unreachable_gpu_is_a_solver_error():
    with pytest.raises(SolverError, match="cannot be reached"):
        _arborescence({("a", "b"): 1.0}, ["a", "b", "c"], "a")


def test_only_every_gpu_broadcasting_to_all_up_to_sixteen_gpus():
    big = mesh([8, 8], 50e9)
    assert solve_trees(build_problem(big, _every(big, K.ALLGATHER, 1 << 20)), Budget.of(5)) is None
    r = ring(4, 50e9)
    some = Collective(K.ALLGATHER, 1 << 20, (0, 1, 2))
    assert solve_trees(build_problem(r, some), Budget.of(5)) is None
    alone = _every(r, K.BROADCAST, 1 << 20, root=0)
    assert solve_trees(build_problem(r, alone), Budget.of(5)) is None
    assert solve_trees(build_problem(r, _every(r, K.ALLGATHER, 1 << 20)), Budget.of(5)) is not None


@pytest.mark.parametrize("kind", [K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE])
def test_schedules_pass_the_checker(kind):
    """AllGather along the trees; reductions by the greedy (the trees' files need more
    steps per connection)."""
    topo = load_topology("dgx1")
    c = _every(topo, kind, GB)
    s = compile_scale(topo, c, SolveParams(time_limit_s=LIMIT_S, threads=1))
    assert any("broadcast trees packed" in n for n in s.info.notes) is (kind is K.ALLGATHER)
    assert check_schedule(s) == []


def test_dgx1_allgather_xml_replays_within_two_percent_of_the_bound():
    """DGX-1's doubled NVLinks: the greedy's own routes replayed at 1.047× the cut bound
    (1 GB, 86 chunks per GPU); along the packed trees the written XML is within 2%."""
    topo = load_topology("dgx1")
    c = _every(topo, K.ALLGATHER, GB)
    s = compile_scale(topo, c, SolveParams(time_limit_s=LIMIT_S, threads=1))
    assert s.info.status.startswith("scale/trees")
    timing = Timer().timing(s)
    assert timing.measured_by == "xml replay"
    assert timing.finish_s <= 1.02 * lower_bound(topo, c).seconds


def test_chunks_follow_their_trees_where_it_matters():
    """Every chunk reaches every GPU once: a forest per chunk, as reductions need."""
    topo = load_topology("dgx1")
    c = _every(topo, K.ALLGATHER, GB, chunks_per_rank=2)
    sub, tau, _ = scale_plan(topo, c)
    moves, _ = solve_trees(build_problem(topo, sub, tau), Budget.of(10))
    s = Schedule(topo, sub, tau, tuple(moves.transfers()))
    assert check_schedule(s) == []
    got = {(t.chunk, t.dst) for t in s.transfers}
    assert len(got) == len(s.transfers) == sub.nchunks * (topo.ngpus - 1)
