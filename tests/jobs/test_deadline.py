"""The joint compile's time: shared out of what is left, never past the deadline; a
candidate whose compiles would each get less than the floor is skipped, and a job with
no file when the time ends is exit 3 naming it. A fake clock stands for the wall clock
(each stub compile spends the limit it is given), so what is asserted is what was tried."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import te_ccl
import te_ccl.jobs.joint as joint
from te_ccl.baselines import applicable, build_baseline
from te_ccl.compiler import CompileOptions, SolveParams, render_fitting
from te_ccl.deadline import TimeLimitReached
from te_ccl.errors import SolverError
from te_ccl.jobs import load_jobs
from te_ccl.spec.topology import load_topology

SHARED = """jobs:
  - {name: a, ranks: [g0, g1, g2, g3], collective: allgather, size: 1MB}
  - {name: b, ranks: [g0, g1, g5, g4], collective: allreduce, size: 2MB}
"""
SLOTS = 2 * (1 + len(joint.VIEWS) + 1 + joint.MIX_SLOTS)  # SHARED's: alone, views, flow, mix


class Clock:
    """Seconds spent of ``limit``: a stub compile spends all it is given, never more than
    is left (the real deadline stops it there)."""

    def __init__(self, limit: float) -> None:
        self.limit, self.now = limit, 0.0
        self.compiles: list[tuple[str, float, float]] = []  # (job, its limit, left then)

    def left(self) -> float:
        return max(0.0, self.limit - self.now)

    def compile(self, topology, collective, *, time_limit_s, output=None, **_):
        if output is None:  # a form made by the compile (mix): within the templates' budget
            raise SolverError("no compiled forms in these tests")
        name = Path(output).stem.split("-", 1)[1]
        self.compiles.append((name, time_limit_s, self.left()))
        self.now += min(time_limit_s, self.left())
        built = build_baseline(applicable(topology, collective)[0], topology, collective)
        schedule, xml = render_fitting(built, CompileOptions(), SolveParams())
        Path(output).write_bytes(xml)
        return SimpleNamespace(schedule=schedule)


@pytest.fixture
def clock(monkeypatch, request):
    c = Clock(request.param)
    monkeypatch.setattr(joint, "left", c.left)
    monkeypatch.setattr(te_ccl, "compile", c.compile)
    return c


def _compile(tmp_path: Path):
    (tmp_path / "jobs.yaml").write_text(SHARED)
    return joint.compile_jobs(load_jobs(load_topology("dgx1"), tmp_path / "jobs.yaml"), None,
                              time_limit_s=600)


@pytest.mark.parametrize("clock", [40.0], indirect=True)
def test_compiles_share_what_is_left_and_end_by_the_limit(clock, tmp_path, monkeypatch):
    def no_flow(*_):
        raise SolverError("not in this test")

    monkeypatch.setattr(joint, "plan_flow", no_flow)  # its solve is real time, not the clock's
    _compile(tmp_path)
    assert len(clock.compiles) > 2  # the views ran too
    for _, limit, left in clock.compiles:
        assert limit <= left
    assert clock.now <= clock.limit


@pytest.mark.parametrize("clock", [9.0], indirect=True)
def test_a_short_limit_skips_the_candidates_below_the_floor_rather_than_run_over(
        clock, tmp_path):
    result = _compile(tmp_path)
    # alone is never skipped: each job gets the floor (9 s over 12 compiles is 0.75 s), and
    # the compile's reserve for writing its file on top
    first = joint.MIN_COMPILE_S + joint.COMPILE_RESERVE_S
    assert clock.compiles == [("a", first, 9.0), ("b", first, 9.0 - first)]
    skipped = [n for n in result.notes if f"less than {joint.MIN_COMPILE_S:g} s" in n]
    assert {n.split(":")[0] for n in skipped} >= {"shares", "priority", "exclusive"}
    assert clock.now <= clock.limit


@pytest.mark.parametrize("clock", [1.0], indirect=True)
def test_a_job_without_a_file_in_time_is_exit_3_naming_it(clock, monkeypatch, tmp_path,
                                                            teccl):
    def late(*_, time_limit_s, **__):
        raise TimeLimitReached("time limit of 1 s reached while lowering to MSCCL XML; the "
                               "first file (template ring) needs about 3 s here")

    monkeypatch.setattr(te_ccl, "compile", late)
    (tmp_path / "jobs.yaml").write_text(SHARED)
    code, _, err = teccl("compile", "dgx1", "--jobs", str(tmp_path / "jobs.yaml"), "-o",
                         str(tmp_path / "out"), "--time-limit", "1")
    assert code == 3
    assert "job 'a': time limit of 1 s reached" in err and "needs about 3 s" in err
    assert "--time-limit SECONDS allows more" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("clock", [3.0], indirect=True)
def test_a_limit_under_the_floor_splits_what_is_left_among_the_jobs(clock, tmp_path):
    result = _compile(tmp_path)
    # each search gets its part of what is left, the compile's reserve for writing on top
    reserve = joint.COMPILE_RESERVE_S
    assert clock.compiles == [("a", 1.5 + reserve, 3.0), ("b", 1.2 + reserve, 1.2)]
    assert result.method in ("alone", "mix") and clock.now <= clock.limit


@pytest.mark.parametrize("clock", [60.0], indirect=True)
def test_views_whose_files_share_no_link_between_gpus_leave_their_time_to_flow_and_mix(
        clock, tmp_path, monkeypatch):
    """The routes meet between GPUs, the files compiled alone only on a link to a switch:
    no view runs, and the time kept for the views goes to ``flow`` and ``mix``."""
    real = joint.replay_together
    given: dict[str, float] = {}

    def through_a_switch(jobs, algos):
        r = real(jobs, algos)
        return SimpleNamespace(finish_s=r.finish_s, link_bytes=r.link_bytes,
                               shared_links=[("sw", "g0")])

    def flow(_plan, _objective, params):
        given["flow"] = params.time_limit_s
        raise SolverError("not in this test")

    def made(jobs, budget, away=None, yielding=()):
        given["mix"] = budget.left()
        return {j.name: {} for j in jobs.jobs}

    def no_mix(*_):
        raise TimeLimitReached("not in this test")

    monkeypatch.setattr(joint, "replay_together", through_a_switch)
    monkeypatch.setattr(joint, "plan_flow", lambda *_: object())  # a model it can solve
    monkeypatch.setattr(joint, "compile_flow", flow)
    monkeypatch.setattr(joint, "templates", made)
    monkeypatch.setattr(joint, "mix", no_mix)
    result = _compile(tmp_path)
    assert [name for name, _, _ in clock.compiles] == ["a", "b"]  # alone only: no view
    # per job, a slot each for alone, three views and flow, and mix's (its lowering's and
    # one for the descent): each job's compile one of them all
    assert [limit for _, limit, _ in clock.compiles] == pytest.approx([60 / SLOTS] * 2)
    rest = clock.left()
    # (the fake clock stands still while the forms are lowered: Budget runs on real time)
    # the lowering's slots of flow's and mix's alone, not of the views' too
    assert given["mix"] == pytest.approx(rest * joint.LOWER_SLOTS / (1 + joint.MIX_SLOTS),
                                         rel=0.05)
    assert given["flow"] == pytest.approx(rest / 2)  # 2 of the last 4
    assert result.method == "alone" and clock.now <= clock.limit


@pytest.mark.parametrize("clock", [60.0], indirect=True)
def test_files_that_share_no_link_leave_the_time_left_to_compiling_them_again(
        clock, tmp_path, monkeypatch):
    """The routes meet, the files compiled alone share no link: no other candidate
    applies, and each job is compiled again in its share of the time left."""
    real = joint.replay_together

    def apart(jobs, algos):
        r = real(jobs, algos)
        return SimpleNamespace(finish_s=r.finish_s, link_bytes=r.link_bytes, shared_links=[])

    def never(*_):
        raise AssertionError("no candidate but alone applies")

    monkeypatch.setattr(joint, "replay_together", apart)
    monkeypatch.setattr(joint, "plan_flow", lambda *_: object())
    for name in ("compile_flow", "templates", "mix"):
        monkeypatch.setattr(joint, name, never)
    result = _compile(tmp_path)
    rest = 60 - 2 * 60 / SLOTS  # each job's first compile had one of every candidate's slots
    assert [name for name, _, _ in clock.compiles] == ["a", "b", "a", "b"]
    assert [limit for _, limit, _ in clock.compiles] == pytest.approx(
        [60 / SLOTS, 60 / SLOTS, rest / 2, rest / 2])
    assert result.method == "alone" and not result.notes and clock.now <= clock.limit

