"""Comb trees on 2D meshes: their shape, their routes in the greedy, and where the plan takes them."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale import compile_scale, plan
from te_ccl.backends.scale.comb import comb_edges, mesh_shape, solve_comb
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.model.problem import build_problem
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology.generators import mesh
from te_ccl.verify.msccl import verify_msccl
from te_ccl.verify.schedule_check import check_schedule

K = CollectiveKind


def _all(topo: Topology, kind: CollectiveKind, size: int = 1 << 20, **kw) -> Collective:
    return Collective(kind, size, tuple(range(topo.ngpus)), **kw)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 6), data=st.data())
def test_comb_spans_the_grid_with_consistent_heights(rows, cols, data):
    source = (data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1)))
    column_first = data.draw(st.booleans())
    edges = comb_edges((rows, cols), source, column_first)
    into = Counter(b for _, b, _ in edges)
    cells = {(r, c) for r in range(rows) for c in range(cols)}
    assert set(into) == cells - {source} and max(into.values(), default=1) == 1
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b, _ in edges)
    below: dict = {}
    for a, _, h in edges:
        below.setdefault(a, []).append(h)
    for _, b, h in edges:  # a cell's height is one more than its deepest child's
        assert h == (1 + max(below[b]) if b in below else 0)
    spine = [b for _, b, _ in edges if b[1 if column_first else 0] == source[1 if column_first else 0]]
    assert len(spine) == (rows if column_first else cols) - 1


def test_mesh_shape_checks_the_links_not_just_the_name():
    m = mesh([3, 4], 1e9)
    assert mesh_shape(m) == (3, 4)
    dropped = Topology.build("m", list(m.nodes), [k for k in m.links if (k.src, k.dst) != ("g0", "g1")],
                             meta=dict(m.meta))
    assert mesh_shape(dropped) is None
    ring = Topology.build("r", [Node("g0"), Node("g1")], [Link("g0", "g1", 1e9), Link("g1", "g0", 1e9)])
    assert mesh_shape(ring) is None


def test_solve_comb_keeps_to_the_combs_and_branches_evenly():
    topo = mesh([8, 8], 50e9, 0.5e-6)
    coll = _all(topo, K.ALLGATHER, 1 << 30, chunks_per_rank=2)
    p = build_problem(topo, coll, coll.chunk_bytes / 50e9)
    moves, notes = solve_comb(p)
    gpus = topo.gpus
    owner = {d.chunk: d.sources[0] for d in p.demands}
    own_index = {c: sorted(x for x, s in owner.items() if s == owner[c]).index(c) for c in owner}
    sends: Counter = Counter()
    for t in moves.transfers():
        r, c = divmod(gpus.index(owner[t.chunk]), 8)
        comb = {(gpus[a[0] * 8 + a[1]], gpus[b[0] * 8 + b[1]])
                for a, b, _ in comb_edges((8, 8), (r, c), (r + c + own_index[t.chunk]) % 2 == 0)}
        assert (t.src, t.dst) in comb
        sends[(t.src, t.chunk)] += 1
    # sends beyond one per chunk (a fused relay's): only on a spine, at most 3 per chunk
    # (2 for a spine cell's rib, 3 at the source), and a rank is on the spine of the 16
    # chunks of its row or column that go its way (the greedy's own routes: up to 51)
    extra = Counter()
    for (g, _), n in sends.items():
        extra[g] += n - 1
    assert max(extra.values()) <= 3 * 16
    bound = lower_bound(topo, coll).seconds / p.epoch_s
    assert moves.finish <= 1.03 * bound and "comb trees" in notes[0]


def test_solve_comb_declines_what_is_not_a_mesh_broadcast():
    from te_ccl.topology.generators import torus
    topo = torus([3, 3], 1e9)
    assert solve_comb(build_problem(topo, _all(topo, K.ALLGATHER))) is None
    m = mesh([3, 3], 1e9)
    bcast = Collective(K.BROADCAST, 1 << 20, tuple(range(9)), root=0)
    assert solve_comb(build_problem(m, bcast)) is None


def test_the_plan_takes_combs_only_for_an_allreduce_the_reader_cannot_hold():
    big = mesh([32, 32], 50e9, 0.5e-6)
    assert plan.crowded(big, _all(big, K.ALLREDUCE, 1 << 30))
    assert not plan.crowded(big, _all(big, K.ALLGATHER, 1 << 30))
    assert not plan.crowded(big, _all(big, K.REDUCESCATTER, 1 << 30))
    small = mesh([16, 16], 50e9, 0.5e-6)
    assert not plan.crowded(small, _all(small, K.ALLREDUCE, 1 << 30, chunks_per_rank=2))


@pytest.mark.parametrize("kind", [K.ALLREDUCE])
def test_a_comb_allreduce_is_checked_lowered_and_verified(monkeypatch, kind):
    # the plan takes combs at 1024 GPUs; forced here on 4×4, the whole path still holds
    monkeypatch.setattr(plan, "crowded", lambda topology, sub: True)
    topo = mesh([4, 4], 50e9, 0.5e-6)
    coll = _all(topo, kind, 1 << 24)
    s = compile_scale(topo, coll, SolveParams(time_limit_s=30, threads=1))
    assert check_schedule(s) == []
    assert any("comb trees" in n for n in s.info.notes)
    # a ReduceScatter then an AllGather: near the sum of their bounds (AllReduce's own
    # bound is lower: a mesh can sum along trees)
    phases = sum(lower_bound(topo, _all(topo, k, 1 << 24)).seconds
                 for k in (K.REDUCESCATTER, K.ALLGATHER))
    assert s.finish_time_s <= 1.05 * phases
    report = verify_msccl(lower_to_msccl(s).decode())
    assert report.valid, [f.message for f in report.errors][:3]


def test_scale_method_names_the_combs_for_auto():
    big = mesh([32, 32], 50e9, 0.5e-6)
    assert plan.scale_method(big, _all(big, K.ALLREDUCE, 1 << 30)) == "comb"
    assert plan.scale_method(big, _all(big, K.ALLGATHER, 1 << 30)) == "greedy"
