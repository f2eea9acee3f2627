"""A first file's AlltoAll on a mesh below the grid AlltoAll's own threshold: the grid's
groups from :data:`GRID_FIRST_FROM_HOPS` chunk-hops at any chunk size (the search then
runs the concurrent-flow routes in full), else (and on a torus) the routes as before."""

from __future__ import annotations

import pytest

import te_ccl.backends.scale.entry as entry
from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale.entry import solve_moves
from te_ccl.backends.scale.grid_alltoall import METHOD as GRID
from te_ccl.backends.scale.plan import compile_scale
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import Budget, hurried
from te_ccl.lower.msccl.grid import grid_program
from te_ccl.model.problem import build_problem
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import LazyTransfers
from te_ccl.topology.generators import mesh, torus
from te_ccl.topology.model import Topology

MESH = mesh([4, 4], 50e9, 5e-7)  # a link's latency: the time of a 25 kB chunk; 640 chunk-hops


def _method(size: int, topology: Topology = MESH) -> str:
    """The scale method of the AlltoAll of ``size`` bytes (chunks of ``size/256``)."""
    problem = build_problem(topology, Collective(CollectiveKind.ALLTOALL, size,
                                                 tuple(range(16))))
    return solve_moves(problem, SolveParams(), Budget.of(60.0))[1]


@pytest.fixture
def from_any_hops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry, "GRID_FIRST_FROM_HOPS", 0)


def test_a_first_file_takes_the_grid_where_chunks_outlast_the_latency(from_any_hops) -> None:
    with hurried() as skipped:
        assert _method(16 * 1_000_000) == GRID
    assert skipped == ["the concurrent-flow routes"]


def test_a_first_file_of_latency_bound_chunks_takes_the_grid_too(from_any_hops) -> None:
    with hurried() as skipped:
        assert _method(16 * 1_000) == GRID  # chunks of 62.5 B
    assert skipped == ["the concurrent-flow routes"]


def test_the_search_keeps_the_flow_routes(from_any_hops) -> None:
    assert _method(16 * 1_000_000) == "flow-alltoall"  # not in a hurry


def test_a_torus_keeps_its_flow_routes(from_any_hops) -> None:
    with hurried() as skipped:
        assert _method(16 * 1_000_000, torus([4, 4], 50e9, 5e-7)) != GRID
    assert skipped == []


def test_below_its_chunk_hops_a_mesh_keeps_the_flow_routes() -> None:
    with hurried() as skipped:
        assert _method(16 * 1_000_000) == "flow-alltoall"
    assert skipped == []


def test_a_grid_first_file_is_lowered_without_building_its_transfers(from_any_hops) -> None:
    coll = Collective(CollectiveKind.ALLTOALL, 16 * 1_000, tuple(range(16)))
    with hurried():
        schedule = compile_scale(MESH, coll)
    lazy = schedule.transfers
    assert isinstance(lazy, LazyTransfers)
    assert grid_program(schedule, "a", "Simple", 0, 0, MSCCL, text=True) is not None
    count, finish = len(lazy), schedule.finish_epoch
    assert not lazy.built  # the count, the finish and the file: none built them
    assert len(tuple(lazy)) == count
    assert finish == max(t.arrive_epoch for t in lazy)
    assert lazy == tuple(lazy) and hash(lazy) == hash(tuple(lazy))
