"""The lower bound asks the compile's deadline: past it, each part stops with what it has
proved, so the bound is weaker but still a bound, and it is not remembered for a later
compile that has the time. The clock (``time.monotonic``) jumps a day ahead after the
bound's code has read it a given number of times; no wall-clock time is asserted."""

from __future__ import annotations

import sys
import time

import pytest

import te_ccl.bounds as bounds
import te_ccl.deadline as deadline
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import until
from te_ccl.topology.generators import mesh

DAY_S = 86_400.0
# 16×16: its AlltoAll LP is too large, so the per-source Dijkstras of link_time_s run
TOPOLOGY = mesh([16, 16], 50e9, 5e-7)
ALLTOALL = Collective(CollectiveKind.ALLTOALL, 1 << 20, tuple(range(TOPOLOGY.ngpus)))


class Jump:
    """``time.monotonic`` a day ahead once the bound's code has read it ``after`` times
    (through :mod:`te_ccl.deadline`, which reads it on its caller's behalf)."""

    def __init__(self, after: int) -> None:
        self.after, self.reads, self.real = after, 0, time.monotonic

    def __call__(self) -> float:
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename == deadline.__file__:
            frame = frame.f_back
        if frame.f_code.co_filename == bounds.__file__:
            self.reads += 1
        return self.real() + (DAY_S if self.reads > self.after else 0.0)


@pytest.fixture
def fresh():
    lower_bound.cache_clear()
    yield
    lower_bound.cache_clear()


def _bound(monkeypatch, after: int) -> tuple[bounds.Bound, int]:
    """The bound under a 600 s deadline whose clock jumps after ``after`` reads, and how
    many times the bound's code read it."""
    jump = Jump(after)
    with monkeypatch.context() as m:
        m.setattr(time, "monotonic", jump)
        with until(600.0):
            bound = lower_bound(TOPOLOGY, ALLTOALL)
    return bound, jump.reads


@pytest.mark.parametrize("after", [0, 40])
def test_a_bound_cut_short_is_a_weaker_bound_and_not_remembered(fresh, monkeypatch, after):
    cut, reads = _bound(monkeypatch, after)
    assert reads > after, "the bound never asked the deadline"
    full = lower_bound(TOPOLOGY, ALLTOALL)  # not the cut one, remembered
    assert full.seconds > 0 and full.parts["link_time_s"] > 0
    assert cut.seconds <= full.seconds
    assert all(cut.parts[k] <= v * (1 + 1e-12) for k, v in full.parts.items())
    # the per-source Dijkstras stopped: none at once, some of them after 40 reads
    assert (cut.parts["link_time_s"] == 0) == (after == 0)
    assert cut.parts["link_time_s"] < full.parts["link_time_s"]
    assert lower_bound(TOPOLOGY, ALLTOALL) is full  # the whole one is remembered


def test_a_bound_with_time_is_unchanged_by_the_checks(fresh, monkeypatch):
    whole, reads = _bound(monkeypatch, after=10**9)  # a clock that never jumps
    assert reads > 0 and whole is lower_bound(TOPOLOGY, ALLTOALL)
    lower_bound.cache_clear()
    assert lower_bound(TOPOLOGY, ALLTOALL) == whole  # the same numbers without a deadline
