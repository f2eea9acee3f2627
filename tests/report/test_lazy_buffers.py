"""The buffer summary of a schedule whose transfers wait for a reader counts them on their
arrays: at 1024 GPUs building them would take gigabytes after the file is written."""

from __future__ import annotations

import pytest

from te_ccl.backends.scale import grid_lines
from te_ccl.backends.scale.grid_alltoall import solve_grid_alltoall
from te_ccl.backends.scale.grid_lines import METHODS, grid_lines_schedule
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.model.problem import build_problem
from te_ccl.report.metrics import buffer_summary
from te_ccl.schedule import LazyTransfers, Schedule
from te_ccl.topology.generators import mesh, torus


@pytest.mark.parametrize(("make", "dims", "k"), [(mesh, (4, 5), 1), (torus, (3, 3), 2)])
def test_a_lazy_schedule_summary_builds_nothing_and_matches_the_built_one(make, dims, k):
    topo = make(list(dims), 50e9, 5e-7)
    coll = Collective(CollectiveKind.ALLTOALL, 1 << 20, tuple(range(topo.ngpus)),
                      chunks_per_rank=k)
    moves, _ = solve_grid_alltoall(build_problem(topo, coll), min_hops=0)
    lazy = Schedule(topo, coll, 1e-6, moves.lazy())
    summary = buffer_summary(lazy)
    assert isinstance(lazy.transfers, LazyTransfers) and not lazy.transfers.built
    built = buffer_summary(Schedule(topo, coll, 1e-6, tuple(moves.transfers())))
    assert summary == built
    assert built["peak_scratch_bytes"] > 0  # the relays are counted, not only the slots


@pytest.mark.parametrize("kind", list(METHODS))
def test_the_grid_methods_lazy_summary_matches_the_built_one(kind, monkeypatch):
    """Reductions too: their transfers' arrivals are counted as the copies'."""
    monkeypatch.setattr(grid_lines, "GRID_FROM_DELIVERIES", 0)
    topo = mesh([3, 5], 50e9, 5e-7)
    coll = Collective(kind, 1 << 24, tuple(range(topo.ngpus)), chunks_per_rank=2)
    lazy = grid_lines_schedule(topo, coll)
    summary = buffer_summary(lazy)
    assert not lazy.transfers.built
    assert summary == buffer_summary(Schedule(topo, coll, lazy.epoch_s, tuple(lazy.transfers)))
