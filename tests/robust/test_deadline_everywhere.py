"""Every stage that can run long before a schedule exists asks the compile's one deadline
(:mod:`te_ccl.deadline`): expanding the collective into chunks, weighing chunkings,
building the model, each scale method, the templates. Each test turns the other stages'
checks off where they would answer first, so that a stage which stopped asking fails."""

from __future__ import annotations

from dataclasses import replace

import pytest

import te_ccl.collective.model as collective_model
from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale.comb import solve_comb
from te_ccl.backends.scale.entry import solve_moves
from te_ccl.backends.scale.plan import scale_plan
from te_ccl.baselines import applicable, build_baseline
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import chunk_candidates
from te_ccl.deadline import Budget, TimeLimitReached, until
from te_ccl.errors import SolverError
from te_ccl.model.formulation import formulate
from te_ccl.model.problem import build_problem
from te_ccl.spec.topology import load_topology


def _all(topo, kind: str, size: int = 1 << 20) -> Collective:
    root = 0 if kind in ("broadcast", "reduce", "gather", "scatter") else None
    return Collective(CollectiveKind(kind), size, tuple(range(topo.ngpus)), root=root)


@pytest.fixture
def expanding_freely(monkeypatch):
    """Chunks are expanded without looking at the clock: the stage under test must."""
    monkeypatch.setattr(collective_model, "check", lambda doing: None)
    monkeypatch.setattr(collective_model, "checked", lambda items, doing: items)


@pytest.mark.parametrize("kind", [k.value for k in CollectiveKind if k.value != "custom"])
def test_expanding_the_chunks_stops_at_the_deadline(kind):
    coll = _all(load_topology("dgx1"), kind)
    with until(0.0), pytest.raises(TimeLimitReached,
                                   match="while expanding the collective into chunks"):
        coll.chunks()


def test_a_solver_clock_never_runs_past_the_deadline():
    with until(0.5):
        assert Budget.of(60.0).left() <= 0.5
    assert Budget.of(60.0).left() > 0.5  # the deadline ended with its block (however slow the machine)


def test_weighing_chunkings_stops_at_the_deadline(expanding_freely):
    topo = load_topology("dgx1")
    coll = _all(topo, "allgather", 987_654_321 * 8)  # a size no earlier call cached
    with until(0.0), pytest.raises(TimeLimitReached, match="weighing the chunkings"):
        chunk_candidates(topo, coll)


@pytest.mark.parametrize("name, kind", [("dgx1", "allgather"), ("mesh4x4", "alltoall")])
def test_building_the_model_stops_at_the_deadline(expanding_freely, name, kind):
    topo = load_topology(name)
    problem = build_problem(topo, _all(topo, kind))
    with until(0.0), pytest.raises(TimeLimitReached, match="building the model"):
        formulate(problem, 8)


@pytest.mark.parametrize("name, kind, method", [
    ("mesh8x8", "allgather", "greedy"),
    ("mesh4x4", "allgather", "trees"),
    ("torus4x4", "allgather", "symmetry"),
    ("hgx-h100x2", "allgather", "hierarchical"),
    ("mesh4x4", "alltoall", "flow-alltoall"),
    ("rail8x8", "alltoall", "rail-alltoall"),
])
def test_every_scale_method_stops_at_the_deadline(expanding_freely, name, kind, method):
    topo = load_topology(name)
    sub, tau, _ = scale_plan(topo, _all(topo, kind))
    problem = build_problem(topo, sub, tau)
    solve_moves(problem, SolveParams(time_limit_s=60), Budget.of(60))  # it does apply
    with until(0.0), pytest.raises(SolverError, match="time limit"):
        solve_moves(problem, SolveParams(time_limit_s=60), Budget.of(60))


def test_comb_trees_stop_at_the_deadline(expanding_freely):
    topo = load_topology("mesh4x4")
    problem = build_problem(topo, replace(_all(topo, "allgather"), chunks_per_rank=4))
    assert solve_comb(problem) is not None
    with until(0.0), pytest.raises(TimeLimitReached, match="building comb trees"):
        solve_comb(problem)


@pytest.mark.parametrize("name, kind", [("direct", "allgather"), ("tree", "broadcast"),
                                        ("hierarchical", "allgather")])
def test_the_templates_stop_at_the_deadline(expanding_freely, name, kind):
    topo = load_topology("hgx-h100x2")
    coll = _all(topo, kind)
    assert name in applicable(topo, coll)  # (a built one is kept: build none before)
    with until(0.0), pytest.raises(TimeLimitReached, match="building a template"):
        build_baseline(name, topo, coll)
