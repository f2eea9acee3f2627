"""The direct template paced to what a runtime's connections hold."""

from __future__ import annotations

from collections import Counter

import pytest

from te_ccl.baselines.direct import direct
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.topology import generators as gen
from te_ccl.verify.schedule_check import check_schedule

MESH = gen.mesh([4, 4], 50e9, 1e-6)
SCATTER = Collective(K.SCATTER, 1000, tuple(range(16)), root=0)


def most_in_flight(schedule) -> int:
    """The most chunks under way on one link in one epoch."""
    under_way = Counter((t.src, t.dst, e) for t in schedule.transfers
                        for e in range(t.start_epoch, t.arrive_epoch))
    return max(under_way.values())


@pytest.mark.parametrize("n", [3, 4, 8])  # a hop takes 3 epochs here
def test_in_flight_caps_the_chunks_under_way_on_a_link(n):
    schedule = direct(MESH, SCATTER, in_flight=n)
    check_schedule(schedule)
    assert most_in_flight(direct(MESH, SCATTER)) > n >= most_in_flight(schedule)
