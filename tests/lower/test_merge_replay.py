"""The merge pass's replay of the file it chooses is the judge's: those bytes are not
replayed again."""

from __future__ import annotations

from dataclasses import replace

import te_ccl.compiler.judge as judge
from te_ccl.compiler.judge import Timer, lower_file, xml_replay
from te_ccl.compiler.options import CompileOptions
from te_ccl.runtime_limits import MSCCL
from tests.lower.test_merge import _line


def test_the_judge_takes_the_merge_pass_replay_of_the_file_chosen(kit, monkeypatch):
    """Where one step per chunk does not fit, the judge times the merged file by the
    replays the merge pass made, no more."""
    schedule = kit.direct(_line(2), kit.coll("alltoall", 2, chunks=300))
    small = CompileOptions(runtime=replace(MSCCL, max_elements=512))
    replays = []
    real = judge.simulate_msccl
    monkeypatch.setattr(judge, "simulate_msccl",
                        lambda *a, **k: replays.append(1) or real(*a, **k))
    lower_file(schedule, small)
    choosing = len(replays)
    timer = Timer(options=small)
    timing = timer.timing(schedule)
    assert choosing > 0 and len(replays) == 2 * choosing
    data = timer.lowered(schedule, small)
    assert data is not None and timing.xml_s == xml_replay(schedule, data)
