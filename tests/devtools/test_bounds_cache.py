"""Benchmark bounds: rescaled from one computation, node-cut fallback on timeout."""

import time

import pytest

from devtools.bounds_cache import Bounds, node_cut_s
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.topology import generators as gen


def test_rescaled_bound_equals_a_direct_computation():
    t = gen.torus([4, 4], 50e9, 1e-6)
    cache = Bounds()
    for size in (10**3, 10**6, 10**9):
        c = Collective(K.ALLGATHER, size, tuple(range(16)))
        got = cache.get(t, c)
        assert got.seconds == pytest.approx(lower_bound(t, c).seconds, rel=1e-9)
        assert got.kind == "exact"
    assert len(cache.cache) == 1


def _slow_bound(topology, collective):
    """A bound whose forked worker outlasts any test's limit, whatever the machine."""
    time.sleep(60)
    return lower_bound(topology, collective)


def test_timeout_falls_back_to_the_node_cut(monkeypatch):
    from devtools import bounds_cache

    monkeypatch.setattr(bounds_cache, "lower_bound", _slow_bound)
    t = gen.torus([4, 4], 50e9, 1e-6)
    c = Collective(K.ALLREDUCE, 10**9, tuple(range(16)))
    got = Bounds(time_limit_s=0.2).get(t, c)
    assert got.kind == "node-cut"
    assert got.seconds == pytest.approx(node_cut_s(t, c))
    assert got.seconds <= lower_bound(t, c).seconds * (1 + 1e-9)  # weaker, still valid
    b = Bounds(time_limit_s=0.2).get(t, Collective(K.BROADCAST, 10**9, tuple(range(16)), root=0))
    assert b.seconds is None
