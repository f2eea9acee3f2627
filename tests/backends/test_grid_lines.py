"""The grid AllGather, ReduceScatter and AllReduce: files of whole groups moved in one
step that verify, replay without deadlock and never below the bound, fit the runtime by
the same arithmetic the plan is refused by, and are the first file only where one step
per chunk and hop is too many transfers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import te_ccl
from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale import grid_lines
from te_ccl.backends.scale.grid_lines import (
    METHODS,
    grid_lines_schedule,
    grid_lines_takes,
    lines_elements,
    lines_plan,
)
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler.warm import first_candidates
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology.generators import mesh, torus
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule

KINDS = list(METHODS)
GRIDS = [(mesh, (4, 4), 1, False), (torus, (4, 4), 1, True), (mesh, (3, 5), 2, False),
         (mesh, (2, 2, 2), 2, True), (torus, (3, 3, 3), 1, False), (torus, (3, 4), 1, True)]


def _coll(kind: CollectiveKind, topo: Topology, k: int = 1, inplace: bool = False,
          size: int = 1 << 24) -> Collective:
    return Collective(kind, size, tuple(range(topo.ngpus)), chunks_per_rank=k,
                      inplace=inplace)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("make", "dims", "k", "inplace"), GRIDS)
def test_the_file_verifies_and_replays_no_faster_than_the_bound(kind, make, dims, k, inplace,
                                                                monkeypatch):
    monkeypatch.setattr(grid_lines, "GRID_FROM_DELIVERIES", 0)
    topo = make(list(dims), 50e9, 5e-7)
    coll = _coll(kind, topo, k, inplace)
    schedule = grid_lines_schedule(topo, coll)
    assert schedule is not None and schedule.info.status.startswith(f"scale/{METHODS[kind]}:")
    assert schedule.info.backend == "grid"  # the search still solves the scale backend's
    assert check_schedule(schedule) == []
    xml = lower_to_msccl(schedule).decode()
    report = verify_msccl(xml)
    assert report.valid, report.errors[:3]
    assert f'cnt="{math.prod(dims[1:]) * k}"' in xml  # a whole group in one step
    replayed = simulate_msccl(xml, topo, coll.size_bytes).finish_time_s
    assert replayed >= lower_bound(topo, coll).seconds * (1 - 1e-9)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("make", "dims", "k", "inplace"),
                         GRIDS + [(mesh, (16, 16), 1, False), (torus, (8, 8, 8), 1, True),
                                  (mesh, (7,), 3, False)])
def test_the_arithmetic_counts_the_elements_of_the_busiest_rank(kind, make, dims, k, inplace):
    """Exactly for an AllGather; at least as many for the reductions (a step whose waits
    an earlier step of its thread block covered gets no nop in the plan)."""
    wrap = make is torus
    plan = lines_plan(kind, dims, wrap, k, inplace)
    n = math.prod(dims)
    block_rank = plan.blocks[:, 0]
    step_rank = block_rank[np.searchsorted(plan.blocks[:, 4], np.arange(len(plan.steps)),
                                           side="right") - 1]
    elements = 1 + n + np.bincount(block_rank, minlength=n) + np.bincount(step_rank, minlength=n)
    counted, rank = lines_elements(kind, dims, wrap, k, inplace)
    if kind is CollectiveKind.ALLGATHER:
        assert (counted, rank) == (int(elements.max()), int(elements.argmax()))
    else:
        assert int(elements.max()) <= counted <= int(elements.max()) * 1.3


@pytest.mark.parametrize("kind", KINDS)
def test_a_group_over_a_step_or_ranks_over_the_reader_are_refused_with_the_reason(kind):
    assert "more than a step carries" in lines_plan(kind, (8, 8), True, 9, False)
    assert "more than a step carries" in lines_plan(kind, (5, 5, 5), False, 3, False)
    assert "XML elements" in lines_plan(kind, (64, 64), False, 1, False)
    big = torus([5, 5, 5], 1e9)
    assert not grid_lines_takes(big, _coll(kind, big, 3))


@pytest.mark.parametrize("kind", KINDS)
def test_it_is_the_first_candidate_only_for_large_grids(kind):
    def names(topo: Topology, coll: Collective) -> list[str]:
        return [name for name, _ in first_candidates(None, topo, coll, SolveParams())]

    big = torus([32, 32], 50e9)
    assert names(big, _coll(kind, big))[0] == f"scale/{METHODS[kind]}"
    for small in (torus([16, 16], 50e9), mesh([16, 16], 50e9)):
        assert f"scale/{METHODS[kind]}" not in names(small, _coll(kind, small))
    cube = torus([8, 8, 8], 50e9)  # an AllReduce moves its chunks twice
    taken = f"scale/{METHODS[kind]}" in names(cube, _coll(kind, cube))
    assert taken == (kind is CollectiveKind.ALLREDUCE)


def test_other_collectives_are_not_taken():
    big = torus([32, 32], 50e9)
    assert not grid_lines_takes(big, _coll(CollectiveKind.ALLTOALL, big))


@pytest.mark.slow
def test_a_torus32x32_allgather_compile_writes_a_verified_grid_file_first(tmp_path):
    out = tmp_path / "a.xml"
    result = te_ccl.compile("torus32x32", "allgather", size="64MB", output=str(out))
    assert result.incumbents[0].source.startswith("first file: scale/grid-allgather")
    assert verify_msccl(out.read_text()).valid


@pytest.mark.parametrize("kind", KINDS)
def test_the_file_is_lowered_without_building_the_transfers(kind, monkeypatch):
    monkeypatch.setattr(grid_lines, "GRID_FROM_DELIVERIES", 0)
    topo = mesh([3, 5], 50e9, 5e-7)
    schedule = grid_lines_schedule(topo, _coll(kind, topo, 2))
    lazy = schedule.transfers
    xml = lower_to_msccl(schedule)
    count, finish = len(lazy), schedule.finish_epoch
    assert not lazy.built  # the file, the count and the finish: none built them
    assert len(tuple(lazy)) == count and finish == max(t.arrive_epoch for t in lazy)
    assert lower_to_msccl(schedule) == xml
