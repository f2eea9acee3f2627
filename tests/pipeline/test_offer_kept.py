"""A file offered and kept is the mark a finalist must beat only by its own replay: where
that replay ran out of time, the prediction standing for it is no file's time."""

from __future__ import annotations

import pytest

import te_ccl.compiler.pipeline as pipeline
from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import Timer
from te_ccl.compiler.incumbent import Incumbent
from te_ccl.compiler.judge import Timing
from te_ccl.deadline import TimeLimitReached
from te_ccl.spec.topology import load_topology


def _offered(monkeypatch, timing) -> list[float | None]:
    """What the timer is told of the file kept, the schedule's timing being ``timing()``."""
    topology = load_topology("ring8")
    schedule = build_baseline("ring", topology, Collective(
        CollectiveKind.ALLGATHER, 1 << 16, tuple(range(8))))
    timer, told = Timer(), []
    monkeypatch.setattr(timer, "timing", lambda s: timing())
    monkeypatch.setattr(timer, "kept", lambda s, finish_s: told.append(finish_s))
    assert pipeline._offer(Incumbent(bound_s=1e-6), schedule, b"<algo/>", timer, "first file")
    return told


def test_a_file_whose_replay_ran_out_is_kept_without_a_time(monkeypatch):
    def out_of_time() -> Timing:
        raise TimeLimitReached("time limit of 1 s reached while replaying")

    assert _offered(monkeypatch, out_of_time) == [None]
    assert _offered(monkeypatch, lambda: Timing(1e-3, schedule_s=2e-3)) == [None]


def test_a_replayed_file_is_kept_at_its_replay(monkeypatch):
    assert _offered(monkeypatch, lambda: Timing(1e-3, xml_s=2e-3)) == [pytest.approx(2e-3)]
