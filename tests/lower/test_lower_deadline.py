"""The lowering observes the compile's deadline and tells what it is doing."""

from __future__ import annotations

import pytest

from te_ccl.deadline import TimeLimitReached, until
from te_ccl.errors import SolverError
from te_ccl.lower.msccl import lower_to_msccl


def test_a_passed_deadline_stops_the_lowering_with_exit_3(kit):
    with until(0.0), pytest.raises(TimeLimitReached, match="reached while lowering") as e:
        lower_to_msccl(kit.ring_allgather(4))
    assert isinstance(e.value, SolverError) and e.value.exit_code == 3


def test_a_deadline_left_lets_it_finish_with_the_same_bytes(kit):
    with until(3600.0):
        inside = lower_to_msccl(kit.ring_allreduce(4))
    assert inside == lower_to_msccl(kit.ring_allreduce(4))


def test_progress_hears_each_pass(kit):
    heard: list[str] = []
    lower_to_msccl(kit.ring_allgather(4), progress=heard.append)
    assert any("edges" in m for m in heard) and any("channels" in m for m in heard)
    assert any("thread blocks of GPU 0 of 4" in m for m in heard)
    assert all(m.startswith("lowering: ") for m in heard)
