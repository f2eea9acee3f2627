"""The row AlltoAll: whole rows relayed in one step per hop, the file for grids whose
groups do not fit; it verifies, replays without deadlock and fits the runtime."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import te_ccl
from te_ccl.backends.scale import grid_alltoall, grid_blocks
from te_ccl.backends.scale.grid_alltoall import (
    METHOD,
    alltoall_elements,
    grid_hops,
    solve_grid_alltoall,
)
from te_ccl.backends.scale.grid_blocks import blocks_plan
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import pipeline
from te_ccl.deadline import TimeLimitReached, until
from te_ccl.errors import SpecError
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.model import footprint
from te_ccl.model.footprint import by_rows, check_fits, row_first_file_s, row_hops
from te_ccl.model.problem import build_problem
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule, SolveInfo
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology.generators import mesh, torus
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule


@pytest.fixture
def rows_only(monkeypatch):
    """The grid AlltoAll's groups refused, so its plan is the row AlltoAll's."""
    monkeypatch.setattr(grid_alltoall, "_plan", lambda *a: "groups refused")
    grid_alltoall._either.cache_clear()
    yield
    grid_alltoall._either.cache_clear()


# 8×8 and 9×6: more segments to a line than channels, so thread blocks take several in
# their line's shared order (on the smaller grids each segment has a channel of its own)
@pytest.mark.parametrize(("make", "dims", "k"), [(mesh, (4, 5), 1), (torus, (4, 4), 2),
                                                 (torus, (5, 3), 1), (mesh, (3, 3), 2),
                                                 (mesh, (8, 8), 1), (torus, (9, 6), 1)])
def test_the_row_file_verifies_and_replays(rows_only, make, dims, k):
    topo = make(list(dims), 50e9, 5e-7)
    coll = Collective(CollectiveKind.ALLTOALL, 1 << 20, tuple(range(topo.ngpus)),
                      chunks_per_rank=k)
    problem = build_problem(topo, coll)
    moves, notes = solve_grid_alltoall(problem, min_hops=0)
    assert notes[0].startswith("row AlltoAll")
    info = SolveInfo(backend="scale", status=f"scale/{METHOD}: feasible (not proven optimal)",
                     notes=notes)
    schedule = Schedule(topo, coll, problem.epoch_s, tuple(moves.transfers()), info)
    assert check_schedule(schedule) == []
    xml = lower_to_msccl(schedule).decode()
    assert 'type="rcs"' in xml and max(int(c) for c in re.findall(r'cnt="(\d+)"', xml)) > k
    report = verify_msccl(xml)
    assert report.valid, report.errors[:3]
    proto = re.search(r'proto="(\w+)"', xml).group(1)
    tight = verify_msccl(xml, slots=MSCCL.call_slots(proto))  # one call in flight
    assert tight.valid, tight.errors[:3]
    replayed = simulate_msccl(xml, topo, coll.size_bytes).finish_time_s
    assert replayed >= lower_bound(topo, coll).seconds * (1 - 1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("wrap", [False, True])
def test_a_1024_rank_row_plan_fits_the_reader_and_the_verifiers_buffers(wrap):
    plan = blocks_plan((32, 32), wrap, 1)
    assert not isinstance(plan, str), plan
    n = 1024
    block_rank = plan.blocks[:, 0]
    steps = np.diff(np.r_[plan.blocks[:, 4], len(plan.steps)])
    elements = 1 + n + np.bincount(block_rank, minlength=n) + np.bincount(
        block_rank, weights=steps, minlength=n)
    assert elements.max() < MSCCL.max_elements and steps.max() <= MSCCL.max_steps
    assert plan.steps[:, 5].max() < MSCCL.max_count
    assert alltoall_elements((32, 32), wrap, 1)[0] == elements.max()
    assert plan.scratch.sum() + 2 * n * n <= 8 << 20  # the verifier's model of the buffers
    # a segment carries at most twice the chunk-hops it must
    assert grid_hops((32, 32), wrap) <= plan.moves[:, 1].sum() <= 2 * grid_hops((32, 32), wrap)


def test_the_footprint_takes_a_1024_rank_grid_alltoall_by_rows_and_refuses_3d_or_wider():
    coll = Collective(CollectiveKind.ALLTOALL, 1 << 20, tuple(range(1024)))
    check_fits(mesh([32, 32], 50e9), coll)
    check_fits(torus([32, 32], 50e9), coll)
    assert by_rows(mesh([32, 32], 50e9), coll)
    assert not by_rows(mesh([32, 32], 50e9), replace(coll, chunks_per_rank=3))
    with pytest.raises(SpecError, match="more than the 33,554,432 .*use at most 1 chunks"):
        check_fits(mesh([32, 32], 50e9), replace(coll, chunks_per_rank=2))
    with pytest.raises(SpecError, match="transfers"):
        check_fits(torus([8, 8, 16], 50e9), coll)
    wide = Collective(CollectiveKind.ALLTOALL, 1 << 20, tuple(range(2048)))
    with pytest.raises(SpecError, match="transfers"):
        check_fits(mesh([32, 64], 50e9), wide)


@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize(("dims", "k"), [((3, 3), 1), ((4, 5), 2), ((5, 4), 1), ((6, 6), 1),
                                         ((5, 7), 2), ((8, 3), 1)])
def test_the_row_hops_by_arithmetic_are_the_plans(dims, k, wrap):
    assert row_hops(dims, wrap, k) == blocks_plan(dims, wrap, k).moves[:, 1].sum()


@pytest.mark.parametrize(("limit", "slow", "ends"), [(3600, 1.0, False), (60, 1.0, True),
                                                     (120, 1.0, False), (120, 2.5, True)])
def test_a_row_alltoall_whose_first_file_cannot_fit_the_time_left_ends_at_once(
        monkeypatch, limit, slow, ends):
    """mesh32x32's first file, ~72 s of CPU by its chunk-hops, at a fake slowdown."""
    monkeypatch.setattr(footprint, "slowdown", lambda: slow)
    topo = mesh([32, 32], 50e9)
    coll = Collective(CollectiveKind.ALLTOALL, 1 << 20, tuple(range(1024)))
    hops, cpu = row_first_file_s(topo, coll)
    assert hops == 32_505_856 and 60 < cpu < 120
    with until(limit):
        if not ends:
            check_fits(topo, coll)
            return
        with pytest.raises(TimeLimitReached, match=r"row AlltoAll's \(32,505,856 chunk-hops\)"
                           r".*pass --time-limit \d+ or more") as e:
            check_fits(topo, coll)
    asked = int(str(e.value).rsplit("--time-limit ", 1)[1].split()[0])
    assert asked >= cpu * slow
    with until(asked):
        check_fits(topo, coll)  # the limit it asks for holds the file, at the same slowdown


def test_rows_too_long_for_a_step_or_a_line_get_the_reason():
    assert "more than a step carries" in blocks_plan((4, 72), False, 1)
    assert "2D grids" in blocks_plan((4, 4, 4), False, 1)


def test_no_search_runs_after_a_row_alltoalls_first_file(monkeypatch, tmp_path):
    """Where only the row AlltoAll fits memory (faked on a small mesh), the file kept is
    its first, with a note, and no search runs beside it."""
    monkeypatch.setattr(pipeline, "row_first_file_s", lambda t, c: (1, 0.0))
    monkeypatch.setattr(pipeline, "_improve", lambda *a: pytest.fail("the search ran"))
    result = te_ccl.compile("mesh4x4", "alltoall", size="64KB", time_limit_s=30,
                            output=tmp_path / "a.xml")
    assert pipeline.ROWS_ALONE in result.schedule.info.notes


@pytest.mark.parametrize(("dims", "slow", "ends"), [((32, 32), 3.0, True),
                                                    ((32, 32), 1.0, False),
                                                    ((4, 4), 1000.0, False)])
def test_the_row_plan_is_not_started_where_its_file_cannot_fit_the_time_left(
        monkeypatch, dims, slow, ends):
    """mesh32x32's row file is ~72 s of CPU: at a fake slowdown of 3 it cannot fit 100 s;
    a grid whose groups hold it in memory is never refused by the estimate."""
    monkeypatch.setattr(grid_alltoall, "slowdown", lambda: slow)
    with until(100):
        if ends:
            with pytest.raises(TimeLimitReached, match="cannot be planned and written"):
                grid_alltoall._rows_in_time(dims, False, 1)
        else:
            grid_alltoall._rows_in_time(dims, False, 1)


def test_rows_whose_buffers_the_verifier_cannot_model_get_the_reason(monkeypatch):
    """A row file whose buffers the verifier cannot model (torus16x64's reach 8,978,208
    chunks) is refused as a plan, not built, lowered and then refused by the verifier
    (faked on a small grid)."""
    blocks_plan.cache_clear()
    reach = 2 * 20 * 20 + blocks_plan((4, 5), False, 1).scratch.sum()
    monkeypatch.setattr(grid_blocks, "MAX_REACH", reach - 1)
    blocks_plan.cache_clear()
    try:
        assert f"reach {reach:,} chunks" in blocks_plan((4, 5), False, 1)
    finally:
        blocks_plan.cache_clear()
