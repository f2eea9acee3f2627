"""``--chunks auto`` at sizes where latency dominates: the fewest chunks near the best
bound are tried right after the collective's own."""

from __future__ import annotations

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler.chunking import chunking_bounds, latency_first
from te_ccl.compiler.portfolio import _trial_order
from te_ccl.spec.topology import load_topology


def _alltoall(size: int) -> Collective:
    return Collective(CollectiveKind.ALLTOALL, size, tuple(range(16)))


def test_mesh4x4_small_alltoall_tries_four_chunks_before_finer() -> None:
    mesh = load_topology("mesh4x4")
    coll = _alltoall(64_000)
    bounds = chunking_bounds(mesh, coll, [2, 4, 8, 16])
    assert latency_first(mesh, coll, bounds) == 4
    assert [c.chunks_per_rank for c, _ in _trial_order(mesh, coll, (1, 2, 4, 8))][:2] == [1, 4]


def test_bandwidth_bound_sizes_keep_the_bound_order() -> None:
    mesh = load_topology("mesh4x4")
    coll = _alltoall(64_000_000)
    assert latency_first(mesh, coll, chunking_bounds(mesh, coll, [2, 4, 8, 16])) is None
