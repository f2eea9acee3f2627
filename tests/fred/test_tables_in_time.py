"""`compile --fred-tables` in the time kept for the tables: the best kept file whose tables
can be made in time, else a cheaper one; exit 3 only when none can, and nothing written."""

from __future__ import annotations

import pytest

import te_ccl.compiler.render as render
from te_ccl.api import _collective, _topology
from te_ccl.baselines import BASELINES
from te_ccl.compiler.best import forward_only
from te_ccl.deadline import TimeLimitReached, until
from te_ccl.schedule import Schedule
from te_ccl.verify.fred_tables import check_fred_tables


@pytest.fixture(scope="module")
def kept() -> tuple[Schedule, Schedule]:
    """fred-a AllGather 1 MB: the hierarchical file (costly tables), then the ring's."""
    topo = _topology("fred-a")
    coll = _collective(topo, "allgather", None, size="1MB", chunks=1, ranks=None, root=None,
                       inplace=False, proto="Simple")
    usable = forward_only(topo, "xml")
    return BASELINES["hierarchical"](usable, coll), BASELINES["ring"](usable, coll)


def _clean(out) -> None:
    report = check_fred_tables({p.name: p.read_text() for p in out.iterdir()}, source=str(out))
    assert not report.violations


def test_a_better_file_whose_tables_do_not_fit_gives_way_to_the_next(kept, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr(render, "TABLES_S_PER_FLOW", 3600.0)  # no better file fits
    with until(3600.0):
        tables = render.write_fred_tables(kept, _topology("fred-a"), str(tmp_path / "T"))
    assert tables.chosen == 1 and len(tables.notes) == 1
    assert "set aside" in tables.notes[0] and "before routing" in tables.notes[0]
    _clean(tmp_path / "T")


class _Unrouted:
    """The costly file's plan, its routing skipped: its tables are never made here."""

    flows = 0

    def estimate_s(self) -> float:
        return 0.0


def test_a_better_file_whose_tables_run_out_of_time_gives_way_to_the_next(kept, tmp_path,
                                                                          monkeypatch):
    routed, made, calls = render.planned_tables, render.tables_of_timeline, []

    def plan(schedule, topology):
        return _Unrouted() if schedule is kept[0] else routed(schedule, topology)

    def late(schedule, *args):  # the better file's tables meet the deadline
        calls.append(schedule)
        if schedule is kept[0]:
            raise TimeLimitReached("time limit reached while lowering the FRED switch tables")
        return made(schedule, *args)

    monkeypatch.setattr(render, "planned_tables", plan)
    monkeypatch.setattr(render, "tables_of_timeline", late)
    with until(3600.0):
        tables = render.write_fred_tables(kept, _topology("fred-a"), str(tmp_path / "T"))
    assert tables.chosen == 1 and calls == list(kept)
    assert "while lowering" in tables.notes[0]
    _clean(tmp_path / "T")


def test_tables_past_the_deadline_exit_with_their_estimate_and_write_nothing(kept, tmp_path):
    with until(0.0), pytest.raises(TimeLimitReached) as e:
        render.write_fred_tables(kept[1:], _topology("fred-a"), str(tmp_path / "T"))
    assert "flows) take ~" in str(e.value) and "nothing was written" in str(e.value)
    assert not (tmp_path / "T").exists()


@pytest.mark.slow
def test_a_generous_limit_writes_the_file_and_tables_fred_check_accepts(teccl, tmp_path):
    tables, xml = tmp_path / "T", tmp_path / "o.xml"
    code, _, err = teccl("compile", "fred-a", "-c", "allgather", "-s", "1MB", "--time-limit",
                         "40", "-o", str(xml), "--fred-tables", str(tables))
    assert code == 0, err
    assert xml.read_text().startswith("<algo")
    code, out, err = teccl("fred", "check", str(tables))
    assert code == 0 and "clean" in out, out + err
