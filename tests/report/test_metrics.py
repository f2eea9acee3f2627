"""Metrics: bandwidths by nccl-tests' conventions, buffers with scratch, the simulated time."""

import pytest

from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.report.metrics import bandwidths, buffer_bytes, schedule_metrics
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate import simulate_schedule
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
