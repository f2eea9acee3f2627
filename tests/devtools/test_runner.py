"""The bench's teccl row is what `teccl compile` keeps: --chunks auto for the suite rows."""

from __future__ import annotations

import pytest

import devtools.runner as bench
from devtools.suites import MB, Case, suite
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import BASE_CHUNKS
from te_ccl.spec.topology import load_topology


@pytest.mark.parametrize("auto, choices", [(True, BASE_CHUNKS), (False, ())])
def test_teccl_row_goes_through_the_pipeline(monkeypatch, auto, choices):
    seen = []
    real = bench.solve_best

    def spy(topology, collective, params, chunk_choices=(), progress=None, judge=None):
        seen.append(chunk_choices)
        return real(topology, collective, params, chunk_choices, progress, judge)

    monkeypatch.setattr(bench, "solve_best", spy)
    case = Case("ring8", "allgather", MB, limit_s=5, baselines=False, auto_chunks=auto)
    (row,) = bench.run_case(case, threads=1)
    assert seen == [choices]
    assert row.ok and row.checked and row.chunks == 1 and row.picked_chunks >= 1
    assert row.measured_by == "xml replay" and row.xml_s == row.time_s
    assert row.ratio >= 1 - 1e-9 and row.xml_ratio == row.xml_s / row.schedule_s
    exact = lower_bound(load_topology("ring8"), Collective(CollectiveKind.ALLGATHER, MB,
                                                           tuple(range(8))))
    assert row.bound_s == pytest.approx(exact.seconds) and row.bound_by == exact.argument


def test_teccl_row_reports_the_time_its_choice_was_judged_by(monkeypatch):
    """The bench does not lower and replay the kept schedule again: the timer remembers it."""
    import te_ccl.compiler.judge as judge

    replays = []
    real = judge.xml_replay

    def counting(schedule, data, *rest, **options):
        replays.append(schedule.transfers)
        return real(schedule, data, *rest, **options)

    monkeypatch.setattr(judge, "xml_replay", counting)
    case = Case("ring8", "allgather", MB, limit_s=5, baselines=False)
    (row,) = bench.run_case(case, threads=1)
    assert row.ok and row.xml_s == row.time_s and replays
    assert len(replays) == len({id(t) for t in replays})  # each schedule replayed once


@pytest.mark.slow
def test_auto_row_records_the_chunking_it_picked():
    case = Case("ring8", "broadcast", 8 * MB, limit_s=5, root=0, auto_chunks=True)
    rows = bench.run_case(case, threads=1)
    mine, others = rows[0], [r for r in rows[1:] if r.ok]
    assert mine.picked_chunks > 2  # a pipelined broadcast, not one chunk
    assert all(mine.time_s <= r.time_s * (1 + 1e-9) for r in others)


def test_suite_rows_use_auto_chunking_and_solver_target_rows_keep_theirs():
    cases = suite("default").cases
    assert all(c.auto_chunks for c in cases if c.group == "suite")
    assert not any(c.auto_chunks for c in cases if c.group in ("target", "scale"))
