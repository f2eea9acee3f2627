"""Benchmark bounds: rescaled from one computation (AlltoAll: at its own size), node-cut
fallback on timeout."""

import time
from dataclasses import replace

import pytest

from devtools.bounds_cache import Bounds, node_cut_s
from te_ccl.bounds import Bound, lower_bound
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


def test_the_argument_is_chosen_at_each_size_as_lower_bound_chooses_it():
    """α sets a small AllGather's bound and the cut a large one's, from one cached entry."""
    t = gen.torus([4, 4], 50e9, 1e-6)
    cache = Bounds()
    got = {}
    for size in (10**3, 10**9):
        c = Collective(K.ALLGATHER, size, tuple(range(16)))
        got[size] = cache.get(t, c).argument
        assert got[size] == lower_bound(t, c).argument
    assert got == {10**3: "alpha_s", 10**9: "cut_s"} and len(cache.cache) == 1
    ring = gen.ring(4, 1e9)
    c = Collective(K.ALLREDUCE, 10**9, tuple(range(4)))
    assert cache.get(ring, c).argument == "gossip_s"  # 0.75 s over the cut's 0.5 s


def test_two_fabrics_of_one_name_do_not_share_a_bound():
    slow, fast = gen.ring(4, 1e9), gen.ring(4, 4e9)
    assert slow.name == fast.name
    cache = Bounds()
    c = Collective(K.ALLGATHER, 10**9, tuple(range(4)))
    assert cache.get(slow, c).seconds == pytest.approx(4 * cache.get(fast, c).seconds)


def test_the_node_cut_of_an_allreduce_is_a_cut_of_the_same_formula():
    """On a ring one GPU's links are the least separating cut: the stand-in is exact there."""
    t = gen.ring(4, 1e9)
    c = Collective(K.ALLREDUCE, 10**9, tuple(range(4)))
    assert node_cut_s(t, c) == pytest.approx(lower_bound(t, c).parts["cut_s"])


def test_a_small_alltoall_is_graded_against_the_bound_the_compile_reports():
    """dgx1 AlltoAll of 64 kB: ``walk_window_s`` (0 at 1 GB, where the others are
    computed) sets the bound, so it is computed at the row's own size."""
    from te_ccl.spec.topology import load_topology

    dgx1 = load_topology("dgx1")
    cache = Bounds()
    small = Collective(K.ALLTOALL, 64_000, tuple(range(8)))
    got, exact = cache.get(dgx1, small), lower_bound(dgx1, small)
    assert got.seconds == pytest.approx(exact.seconds, rel=1e-9)
    assert got.argument == exact.argument == "walk_window_s"
    large = lower_bound(dgx1, replace(small, size_bytes=10**9))
    rescaled = Bound(0.0, large.parts, large.fixed).rescaled(64_000 / 10**9)
    assert max(rescaled.values()) < got.seconds  # the weaker bound a rescaling would give
    cache.get(dgx1, replace(small, size_bytes=10**9))
    assert len(cache.cache) == 2  # one entry per size
