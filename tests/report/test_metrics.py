"""Metrics (bandwidths, buffers with scratch) and size ranges."""

import pytest

from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.errors import SpecError
from te_ccl.report.metrics import bandwidths, buffer_bytes, schedule_metrics
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate import simulate_schedule
from te_ccl.sizes import compile_size_ranges, parse_size_range, size_ranges
from te_ccl.topology import generators as gen


def test_busbw_follows_nccl_tests():
    assert bandwidths(8 * 10**9, 1.0, 2 * 7 / 8) == (8.0, 14.0)
    assert bandwidths(10, 0.0, 1.0) == (None, None)


def test_relay_counts_as_scratch():
    t = gen.ring(3, 1e9, bidirectional=False)  # g0 -> g1 -> g2 -> g0
    c = Collective(K.BROADCAST, 3000, (0, 1, 2), root=0)
    s = Schedule(t, c, 1e-6, (Transfer(0, "g0", "g1", 0, 3), Transfer(0, "g1", "g2", 3, 6)))
    assert buffer_bytes(s) == {"g0": 3000, "g1": 3000, "g2": 3000}
    # gather to g2 through g1: g1 relays g0's chunk (scratch) besides its own slot
    g = Collective(K.GATHER, 3000, (0, 1, 2), root=2)
    s = Schedule(t, g, 1e-6, (Transfer(0, "g0", "g1", 0, 1), Transfer(0, "g1", "g2", 1, 2),
                              Transfer(1, "g1", "g2", 2, 3)))
    assert buffer_bytes(s) == {"g0": 1000, "g1": 2000, "g2": 3000}


def test_metrics_use_the_simulated_time_when_given():
    t = gen.ring(4, 50e9, 1e-6)
    s = build_baseline("ring", t, Collective(K.ALLGATHER, 4 * 10**6, (0, 1, 2, 3)))
    sim = simulate_schedule(s)
    m = schedule_metrics(s, sim=sim, bound_s=sim.finish_time_s / 2)
    assert m.time_s == sim.finish_time_s and m.predicted_s == s.finish_time_s
    assert m.bound_ratio == pytest.approx(2.0)
    assert m.busbw_GBps == pytest.approx(m.algbw_GBps * 3 / 4)
    assert m.to_dict()["max_buffer_bytes"] == 4 * 10**6


def test_size_ranges_cover_without_overlap():
    r = size_ranges(1000, 10**9, step=4)
    assert r[0][0] == 1000 and r[-1][1] == 10**9
    assert all(b[0] == a[1] + 1 for a, b in zip(r, r[1:], strict=False))
    assert all(lo & (lo - 1) == 0 for lo, _ in r[1:])  # powers of two (of four)
    assert size_ranges(5, 7, step=2) == [(5, 7)]
    assert parse_size_range("1KB..1MB") == (1000, 10**6)
    with pytest.raises(SpecError, match="--sizes"):
        parse_size_range("1MB..1KB")
    with pytest.raises(SpecError):
        size_ranges(1, 10, step=3)


def test_compile_size_ranges_merges_identical_schedules():
    t = gen.ring(4, 50e9, 1e-6)
    coll = Collective(K.ALLGATHER, 4000, (0, 1, 2, 3))
    seen = []

    small = build_baseline("direct", t, coll).transfers
    large = build_baseline("ring", t, coll).transfers

    def compile_one(c):  # one algorithm below 64 KiB, another above
        seen.append(c.size_bytes)
        return Schedule(t, c, 1e-6, small if c.size_bytes < 65536 else large)

    out = compile_size_ranges(coll, 1000, 10**6, compile_one, step=4)
    assert len(seen) == 6 and all(1000 <= s <= 10**6 for s in seen)
    assert [(o.min_bytes, o.max_bytes) for o in out] == [(1000, 65535), (65536, 10**6)]
    assert out[1].schedule.collective.size_bytes == seen[4]
