"""`compile --fred-tables`: the time for the tables is kept from the end of the limit,
and the search keeps what the first file's tables take by estimate, so the file kept
always has its tables in time."""

from __future__ import annotations

import time

import pytest

import te_ccl
import te_ccl.compiler.pipeline as pipeline
import te_ccl.compiler.render as render
import te_ccl.deadline as deadline
from te_ccl.deadline import TimeLimitReached, left, slowdown, until
from te_ccl.verify.fred_tables import check_fred_tables

LIMIT_S = 3600.0
FIRST_TABLES_S = 1800.0  # the ring's tables (1,710 flows before routing) by estimate here


@pytest.fixture
def searched(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The time left when the search starts (it stops there: only the first file is
    made), on a machine as fast as its estimates."""
    seen: list[float] = []

    def search(*args: object, **kwargs: object) -> None:
        seen.append(left())
        raise TimeLimitReached("time limit reached while searching")

    monkeypatch.setattr(pipeline, "solve_best", search)
    monkeypatch.setattr(render, "slowdown", lambda: 1.0)
    return seen


def test_the_search_keeps_the_first_files_tables(searched, monkeypatch, tmp_path):
    monkeypatch.setattr(render, "TABLES_S_PER_FLOW", FIRST_TABLES_S / 1710)
    result = te_ccl.compile("fred-a", "allgather", size="1MB", output=tmp_path / "a.xml",
                            fred_tables=tmp_path / "T", time_limit_s=LIMIT_S)
    assert searched and searched[0] <= LIMIT_S - FIRST_TABLES_S
    assert result.output and (tmp_path / "a.xml").exists()
    tables = {p.name: p.read_text() for p in (tmp_path / "T").iterdir()}
    assert tables and not check_fred_tables(tables, source="T").violations


def test_the_slowdown_counts_from_the_deadline_not_from_an_idle_process(monkeypatch):
    """A process that ran long before its compile (a notebook or a server calling
    ``te_ccl.compile``) is not a slow machine: 4 s by the clock for 2 s of CPU since the
    deadline began is a slowdown of 2, whatever the process did before."""
    clock, cpu = [1000.0], [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(deadline, "cpu_s", lambda: cpu[0])
    with until(60.0):
        clock[0] += 4.0
        cpu[0] += 2.0
        assert slowdown() == 2.0
