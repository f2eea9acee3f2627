"""The time limit is the whole compile's: the search gets its share, the XML judged is the
XML written, the written file is what the compile reports, and a deadline reached before
writing leaves no file."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

import te_ccl.compiler.candidates as candidates
import te_ccl.compiler.judge as judge
import te_ccl.compiler.portfolio as auto
import te_ccl.lower.msccl as lowering
import te_ccl.verify.msccl.reader as reader
import te_ccl.verify.msccl.verify as verifying
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, compile_collective
from te_ccl.deadline import SHARES, TimeLimitReached, check, left
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology.generators import ring
from te_ccl.verify.msccl.reader import read_msccl

RING = ring(4, 1e9)


def allgather(size: int = 1 << 20) -> Collective:
    return Collective(CollectiveKind.ALLGATHER, size, tuple(range(4)))


def test_each_schedule_is_lowered_once_and_the_judged_xml_is_written(tmp_path: Path,
                                                                      monkeypatch):
    lowered: Counter[int] = Counter()
    real = lowering.lower_to_msccl

    def counting(schedule, **kw):
        lowered[id(schedule.transfers)] += 1
        return real(schedule, **kw)

    monkeypatch.setattr(lowering, "lower_to_msccl", counting)
    monkeypatch.setattr(auto, "close_to_bound", lambda *a: None)  # a first at the bound spares the rest
    out = tmp_path / "ag.xml"
    result = compile_collective(RING, allgather(), SolveParams(time_limit_s=20, threads=1),
                                CompileOptions(output=str(out)))
    assert len(lowered) >= 2  # auto judged several candidates by their XML
    assert set(lowered.values()) == {1}  # ... and wrote the kept one without lowering it again
    assert result.timing.measured_by == "xml replay"


def test_the_search_gets_its_share_of_the_time_limit(monkeypatch):
    seen: list[float] = []
    real = candidates.run_strategy

    def recording(topology, collective, params, progress=None):
        seen.append(min(params.time_limit_s, left()))
        return real(topology, collective, params, progress)

    monkeypatch.setattr(candidates, "run_strategy", recording)
    compile_collective(RING, allgather(), SolveParams(time_limit_s=20, threads=1))
    assert seen and max(seen) <= 20 * SHARES.search


def test_a_schedule_judged_without_its_xml_reports_the_written_files_replay(
        tmp_path: Path, monkeypatch):
    monkeypatch.setattr(judge, "XML_REPLAY_LIMIT", 0)  # judged by the schedule replay
    monkeypatch.setattr(judge, "SHARES", replace(judge.SHARES, finalist=0))  # no finalist's file either,
    monkeypatch.setattr(judge, "FINALIST_MARGIN", -1.0)  # not even one whose replay beats the kept file
    reads: list[str] = []
    real = reader.read_msccl
    monkeypatch.setattr(reader, "read_msccl", lambda text: reads.append(text) or real(text))
    out = tmp_path / "ag.xml"
    result = compile_collective(RING, allgather(), SolveParams(time_limit_s=20, threads=1),
                                CompileOptions(output=str(out)))
    assert result.timing.measured_by == "xml replay"
    assert reads == []  # the replay took the file as the verifier read it
    replay = simulate_msccl(read_msccl(out.read_text()), RING, 1 << 20).finish_time_s
    assert result.finish_time_s == pytest.approx(replay)


def test_a_deadline_reached_while_verifying_writes_nothing(tmp_path: Path, monkeypatch):
    def slow(xml, **kw):
        while left() > 0:  # a verifier that outlasts the compile's time
            time.sleep(0.01)
        check("verifying the MSCCL XML")

    monkeypatch.setattr(verifying, "verify_msccl", slow)
    out = tmp_path / "ag.xml"
    params = SolveParams(backend="milp", time_limit_s=2, threads=1)
    with pytest.raises(TimeLimitReached, match="time limit of 2 s reached while verifying"):
        compile_collective(RING, allgather(), params, CompileOptions(output=str(out)))
    assert list(tmp_path.iterdir()) == []
