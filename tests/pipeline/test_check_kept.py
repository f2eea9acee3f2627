"""The schedule checker on the file kept: started only when its estimate fits the time
left (it reads every transfer before it first looks at the deadline)."""

from __future__ import annotations

import pytest

import te_ccl.compiler.judge as judge
import te_ccl.compiler.pipeline as pipeline
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, compile_collective
from te_ccl.deadline import TimeLimitReached, until
from te_ccl.topology.generators import mesh
from te_ccl.verify.msccl.verify import verify_msccl

MESH = mesh([4, 4], 50e9)
AG = Collective(CollectiveKind.ALLGATHER, 64 << 20, tuple(range(16)))


def _search_cut_short(*args, **kw):
    raise TimeLimitReached("time limit of 600 s reached while searching")


@pytest.mark.parametrize("s_per_transfer", [judge.CHECK_S_PER_TRANSFER, 3600.0])
def test_the_checker_starts_only_where_its_estimate_fits(tmp_path, monkeypatch, s_per_transfer):
    started: list[int] = []
    real = pipeline.check_schedule

    def checking(schedule):
        started.append(len(schedule.transfers))
        return real(schedule)

    monkeypatch.setattr(pipeline, "solve_best", _search_cut_short)  # the first file is kept
    monkeypatch.setattr(pipeline, "check_schedule", checking)
    monkeypatch.setattr(judge, "CHECK_S_PER_TRANSFER", s_per_transfer)
    out = tmp_path / "ag.xml"
    with until(600):
        result = compile_collective(MESH, AG, SolveParams(time_limit_s=600, threads=1),
                                    CompileOptions(output=str(out)))
    fits = s_per_transfer < 1
    assert result.schedule_checked is fits and bool(started) is fits
    assert verify_msccl(out.read_text()).valid
    notes = [n for n in result.schedule.info.notes if "the schedule checker did not run" in n]
    assert bool(notes) is not fits
    assert all("s left" in n and "would take" in n for n in notes)


def test_the_estimate_counts_the_machine_slowdown(monkeypatch):
    monkeypatch.setattr(judge, "slowdown", lambda: 3.0)
    assert judge.check_s(1_000_000) == pytest.approx(3 * judge.CHECK_S_PER_TRANSFER * 1e6)
    assert judge.Timer().pace == pytest.approx(3 * judge.LOWER_S_PER_TRANSFER)
