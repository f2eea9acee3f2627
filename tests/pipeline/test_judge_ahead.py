"""Above XML_REPLAY_LIMIT transfers the judge screens by the schedule replay; a candidate
whose schedule replay beats the best file so far has its own file lowered and replayed
wherever it could still be written, so the judge's number is that file's replay, not a
margin over another file. The pace and the deadline are set
by hand, so nothing depends on the machine's speed."""

from __future__ import annotations

import pytest

import te_ccl.compiler.judge as judge
from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler.judge import Timer, xml_replay
from te_ccl.deadline import until
from te_ccl.simulate.replay import replay_finish
from te_ccl.topology.generators import ring

RING = ring(8, 50e9, 1e-6)
GATHER = Collective(CollectiveKind.ALLGATHER, 1 << 24, tuple(range(8)))


@pytest.fixture
def screened(monkeypatch):
    """Every schedule counts as over the XML replay limit."""
    monkeypatch.setattr(judge, "XML_REPLAY_LIMIT", 0)


def test_a_candidate_ahead_of_the_best_file_is_timed_by_its_own_file(screened):
    timer = Timer()
    slow = build_baseline("ring", RING, GATHER)
    fast = build_baseline("ring-bidir", RING, GATHER)
    with until(1000):
        slow_s = timer.judge(slow)  # the first: a finalist, lowered at the default pace
        assert timer.timing(slow).file_s == slow_s
        n = len(fast.transfers)
        # lowering and replaying it: 480 s, over SHARES.finalist of the ~1000 s left;
        # writing it (verifying too): 640 s, within them
        timer.paced(judge.PACE_MIN_TRANSFERS, 400 / n * judge.PACE_MIN_TRANSFERS)
        assert timer.pace * n * (1 + judge.REPLAY_SHARE) > judge.SHARES.finalist * 1000
        assert timer.write_n(n, lowered=False) < 990
        assert replay_finish(fast) < slow_s  # the schedule replay the judge screens by
        seconds = timer.judge(fast)
    data = timer.lowered(fast, timer.options)
    assert data is not None
    assert timer.timing(fast).file_s == seconds == xml_replay(fast, data)
    assert seconds < slow_s
