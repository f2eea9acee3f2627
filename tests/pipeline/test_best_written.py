"""The race's winner is written where its file is the best: judged without its file (no
time to lower it then), it keeps the verdict that won the race when the search asks
again after a later candidate's file was judged, rather than standing behind that file
and leaving the compile to write the slower one."""

from __future__ import annotations

import pytest

import te_ccl.compiler.judge as judge
import te_ccl.compiler.pipeline as pipeline
import te_ccl.simulate.replay as replay
from te_ccl.backends.base import SolveParams
from te_ccl.baselines import direct, ring, ring_bidir
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions
from te_ccl.compiler.incumbent import Incumbent
from te_ccl.compiler.judge import Timer
from te_ccl.compiler.render import render
from te_ccl.deadline import until
from te_ccl.topology.generators import mesh

MESH = mesh([4, 4], 50e9)
AG = Collective(CollectiveKind.ALLGATHER, 64 << 20, tuple(range(16)))
PARAMS = SolveParams(time_limit_s=600, threads=1)
WINNER_LEFT_S = 1e-3  # far less than lowering a file of the winner's 240 transfers takes


def test_a_winner_judged_before_a_later_file_is_still_lowered_and_written(tmp_path,
                                                                          monkeypatch):
    first, later, winner = ring(MESH, AG), ring_bidir(MESH, AG), direct(MESH, AG)
    # the replays, by schedule: the winner's schedule replay beats every file, and its
    # own file does too; the later candidate's file beats the first file by less than
    # the judge's margin, so standing behind it the winner would not beat the first file
    schedule_s = {id(first.transfers): 1.0, id(later.transfers): 0.97,
                  id(winner.transfers): 0.5}
    file_s = {id(first.transfers): 1.0, id(later.transfers): 0.97,
              id(winner.transfers): 0.6}
    monkeypatch.setattr(judge, "XML_REPLAY_LIMIT", 0)  # every candidate judged as at scale
    real = replay.replay_finish
    monkeypatch.setattr(replay, "replay_finish",
                        lambda s: schedule_s.get(id(s.transfers)) or real(s))
    monkeypatch.setattr(judge, "xml_replay",
                        lambda s, data, algo=None: file_s[id(s.transfers)])
    options = CompileOptions(output=str(tmp_path / "x.xml"))
    timer = Timer(options=options)
    kept = Incumbent(bound_s=0.4)
    assert pipeline._offer_first(kept, first, render(first, options, timer=timer), timer,
                                 options)

    def race(*args, **kwargs):
        """The race: the winner judged first (no file judged yet) where too little time
        is left to lower its file, then the later candidate, whose file is judged; the
        winner beats it."""
        with until(WINNER_LEFT_S):
            won = timer.judge(winner)
        assert timer.timing(winner).file_s is None
        assert won < timer.judge(later) and timer.timing(later).file_s is not None
        return winner

    monkeypatch.setattr(pipeline, "solve_best", race)
    monkeypatch.setattr(pipeline, "plan_only", lambda *args: ())
    pipeline._improve(MESH, AG, PARAMS, options, timer, kept)
    pipeline._keep_measured(AG, options, timer, kept)
    assert kept.best is not None and kept.best.schedule.transfers is winner.transfers
    assert kept.best.finish_s == pytest.approx(0.6)  # its file's replay, not its schedule's
    assert [i.source.split(":")[0] for i in kept.history] == ["first file", "search"]
