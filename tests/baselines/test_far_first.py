"""The far-first AlltoAll: valid, ahead of the direct template where latency dominates."""

from __future__ import annotations

import pytest

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler.judge import xml_replay
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.verify.schedule_check import check_schedule


def _file_s(name: str, topology: str, k: int) -> tuple[float, float]:
    topo = load_topology(topology)
    coll = Collective(CollectiveKind.ALLTOALL, 64_000, tuple(range(len(topo.gpus))),
                      chunks_per_rank=k)
    schedule = build_baseline(name, topo, coll)
    assert check_schedule(schedule) == []
    return xml_replay(schedule, lower_to_msccl(schedule)), lower_bound(topo, coll).seconds


@pytest.mark.parametrize("k", [1, 4])
def test_dgx1_small_alltoall_beats_direct_and_not_the_bound(k: int) -> None:
    far, bound = _file_s("far-first", "dgx1", k)
    direct, _ = _file_s("direct", "dgx1", k)
    assert bound <= far < direct  # far pairs' two hops first, over both routes


def test_dgx1_cuts_its_own_pieces_near_the_bound() -> None:
    far, bound = _file_s("far-first", "dgx1", 1)  # one chunk a pair asked for
    assert bound <= far <= 1.05 * bound


def test_other_machines_get_a_valid_file() -> None:
    for topology in ("ring8", "mesh4x4", "torus4x4", "dgx2", "aws-p5x2"):
        far, bound = _file_s("far-first", topology, 2)
        assert far >= bound


def test_hgx_cross_box_pairs_use_the_rail_on_either_side() -> None:
    # a switch without buffer forwards in the epoch a chunk arrives (the checker's rule)
    far, bound = _file_s("far-first", "hgx-h100x2", 1)
    direct, _ = _file_s("direct", "hgx-h100x2", 1)
    assert bound <= far < direct


def test_only_alltoall() -> None:
    topo = load_topology("dgx1")
    coll = Collective(CollectiveKind.ALLGATHER, 64_000, tuple(range(8)))
    assert "far-first" not in applicable(topo, coll)
    with pytest.raises(BaselineError, match="AlltoAll only"):
        build_baseline("far-first", topo, coll)



def test_a_deadline_during_a_finer_cut_keeps_the_cuts_made(monkeypatch):
    """The finer cuts only improve the file: the limit reached while one is placed leaves
    the coarser schedule standing instead of losing it."""
    import importlib

    from te_ccl.deadline import TimeLimitReached

    ff = importlib.import_module("te_ccl.baselines.far_first")  # the module, not its function
    calls = []

    def late(items, doing, every):  # the limit passes once the first cut is placed
        calls.append(doing)
        if len(calls) > 1:
            raise TimeLimitReached(f"time limit reached while {doing}")
        return iter(items)

    monkeypatch.setattr(ff, "checked", late)
    topo = load_topology("dgx1")
    s = ff.far_first(topo, Collective(CollectiveKind.ALLTOALL, 64_000, tuple(range(8))))
    assert s.collective.chunks_per_rank == 1 and len(calls) == 2
