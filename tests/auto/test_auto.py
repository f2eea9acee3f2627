"""The ``auto`` portfolio: what it races, what it prunes, what it keeps and says."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import te_ccl.compiler.candidates as candidates
import te_ccl.compiler.portfolio as auto
from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.compiler.portfolio import Judge
from te_ccl.deadline import Budget, left, until
from te_ccl.errors import SolverError, SpecError
from te_ccl.spec.topology import load_topology
from te_ccl.topology.generators import ring
from te_ccl.verify.schedule_check import check_schedule

AUTO = SolveParams(backend="auto", time_limit_s=10, threads=1)
# far above what these races take, where a test asks what is raced, not what fits the time
LONG = replace(AUTO, time_limit_s=600)


def every(kind: str, n: int, size: int = 1 << 20, **kw) -> Collective:
    return Collective(CollectiveKind(kind), size, tuple(range(n)), **kw)


def first_note(s) -> str:
    return s.info.notes[0]


def favouring(prefix: str) -> Judge:
    """A judge by which schedules of backends not starting with ``prefix`` are 10× slower
    (none faster: no judge beats the chunkings' arithmetic bounds, which prune)."""
    return Judge(f"for {prefix}", lambda s: s.finish_time_s * (
        1.0 if s.info.backend.startswith(prefix) else 10.0))


@pytest.mark.parametrize("prefix, kept", [("milp", "flow model"), ("baseline", "template "),
                                          ("scale", "scale/greedy")])
def test_the_judge_decides_between_the_candidates(prefix, kept):
    s = solve(ring(8, 50e9), every("broadcast", 8, root=0), LONG, judge=favouring(prefix))
    assert s.info.backend.startswith(prefix)
    note = first_note(s)
    assert note.startswith(f"auto: kept the {kept}") and f", for {prefix}); also tried " in note
    assert note.count(": ") >= 3  # the losers and their times are in the record
    assert check_schedule(s) == []


def test_beyond_the_template_size_a_template_still_rescues_a_failed_solver(monkeypatch):
    def gives_up(*args, **kwargs):
        raise SolverError("time limit reached without a solution")

    monkeypatch.setattr(auto, "TEMPLATE_MAX_GPUS", 2)
    monkeypatch.setattr(candidates, "run_strategy", gives_up)
    s = solve(ring(8, 50e9), every("allgather", 8, 8000), SolveParams(time_limit_s=5))
    assert s.info.backend.startswith("baseline:")
    assert "flow model: time limit reached without a solution" in first_note(s)
    check_schedule(s)


def test_when_nothing_succeeds_the_solvers_reason_is_raised(monkeypatch):
    def gives_up(*args, **kwargs):
        raise SolverError("time limit reached without a solution")

    monkeypatch.setattr(auto, "TEMPLATE_MAX_GPUS", 2)
    monkeypatch.setattr(auto, "TEMPLATE_MAX_DELIVERIES", 0)
    monkeypatch.setattr(candidates, "run_strategy", gives_up)
    with pytest.raises(SolverError, match="time limit reached"):
        solve(ring(8, 50e9), every("allgather", 8, 8000), SolveParams(time_limit_s=5))


def test_a_scale_method_races_the_flow_model_up_to_sixteen_gpus():
    """torus4x4: the scale backend runs first in a share of the time; the flow model runs
    after it unless the scale schedule is already at the bound; the record names both."""
    s = solve(load_topology("torus4x4"), every("allgather", 16, 16 << 16), AUTO)
    note = first_note(s)
    assert "scale/symmetry" in note and "flow model" in note
    assert check_schedule(s) == []


def test_beyond_sixteen_gpus_the_flow_model_is_not_built():
    s = solve(load_topology("mesh8x8"), every("allgather", 64, 64 << 14), LONG)
    assert s.info.backend == "scale"
    assert "flow model: skipped (64 GPUs > 16" in first_note(s)


def test_a_schedule_at_the_bound_spares_the_other_solvers():
    """A judge that finds the scale schedule at the bound: the flow model and the templates
    are not run (up to 16 GPUs the templates only when it is at the bound itself)."""
    from te_ccl.bounds import lower_bound

    topo, c = load_topology("torus4x4"), every("allgather", 16, 16 << 16)
    bound = lower_bound(topo, c).seconds
    s = solve(topo, c, AUTO, judge=Judge("bound", lambda s: bound if s.info.backend == "scale"
                                         else 2 * bound))
    assert "flow model: skipped (scale/symmetry is within 0.5% of the lower bound" in first_note(s)
    assert "templates: skipped (scale/symmetry is at the lower bound" in first_note(s)


def test_a_horizon_bounds_the_flow_model_alone():
    s = solve(ring(8, 50e9), every("allgather", 8), SolveParams(time_limit_s=10, max_horizon=8))
    assert s.info.backend in ("milp", "lp", "rounds")
    assert not any(n.startswith("auto: kept") for n in s.info.notes)


def test_a_named_backend_races_only_chunkings():
    s = solve(ring(4, 50e9), every("allgather", 4, 4 << 20),
              SolveParams(backend="milp", time_limit_s=10), chunk_choices=(1, 2))
    assert s.info.backend == "milp"
    assert any(n.startswith("chunks auto: picked") for n in s.info.notes)
    assert not any(n.startswith("auto: kept") for n in s.info.notes)


def test_a_deadline_reached_while_judging_keeps_the_best_so_far(monkeypatch):
    monkeypatch.setattr(auto, "close_to_bound", lambda *a: None)  # the first may be at the bound
    topo = ring(4, 1e9)
    calls: list[str] = []

    def time_or_give_up(s):
        calls.append(s.info.backend)
        if len(calls) > 1:
            raise auto.TimeLimitReached("time limit of 1 s reached while lowering")
        return s.finish_time_s

    s = solve(topo, every("allgather", 4), AUTO, judge=Judge("test", time_or_give_up))
    assert check_schedule(s) == []
    assert len(calls) > 1 and s.info.backend == calls[0]
    assert "time limit of 1 s reached while lowering" in first_note(s)


def test_a_best_that_does_not_lower_does_not_spare_the_templates(monkeypatch):
    """The scale schedule does not lower (judged inf) although its prediction is at the
    bound: the templates are still timed, and one is kept."""
    real = candidates.run_strategy

    def scale_only(topology, collective, params, progress=None):
        if params.backend != "scale":
            raise SolverError("time limit reached without a solution")
        return real(topology, collective, params, progress)

    monkeypatch.setattr(candidates, "run_strategy", scale_only)
    judge = Judge("test", lambda s: math.inf if s.info.backend == "scale" else s.finish_time_s,
                  at_most=lambda s: s.finish_time_s, at_least=lambda s: s.finish_time_s)
    s = solve(ring(4, 50e9), every("allgather", 4, 4 << 20), AUTO, judge=judge)
    assert s.info.backend.startswith("baseline:")
    assert first_note(s).startswith("auto: kept the template ")


def test_up_to_sixteen_gpus_a_schedule_near_the_bound_still_races_the_templates():
    """ring4 AllGather: the scale schedule, judged 0.1% above the bound, spares the flow
    model; a template the judge finds faster is still timed and kept."""
    from te_ccl.bounds import lower_bound

    topo, c = ring(4, 50e9), every("allgather", 4, 4 << 20)
    bound = lower_bound(topo, c).seconds
    judge = Judge("test", lambda s: bound * 1.001 if s.info.backend == "scale"
                  else s.finish_time_s)
    s = solve(topo, c, LONG, judge=judge)
    note = first_note(s)
    assert "flow model: skipped (scale/" in note and "is within 0.5% of the lower bound" in note
    assert note.startswith("auto: kept the template ")


@pytest.mark.parametrize("n, timed", [(4, True), (20, False)])
def test_small_templates_are_timed_past_the_share_of_the_race(n, timed):
    """Once the race's share is over, templates are still timed up to 16 GPUs (cheap),
    not beyond (each costs seconds there)."""
    topo, c = ring(n, 50e9), every("allgather", n, n << 12)
    race = auto._Race(Judge("test", lambda s: s.finish_time_s))
    race.enter("first", build_baseline("ring", topo, c))
    auto._templates(race, topo, c, AUTO, Budget(0.0))  # the race's share is spent
    names = [t.name for t in race.trials if t.time_s is not None]
    assert any(x.startswith("template ") for x in names) is timed
    assert timed or any("no time left" in t.outcome for t in race.trials)


def test_a_deadline_while_building_a_template_keeps_the_best_so_far(monkeypatch):
    import te_ccl.baselines as baselines

    def late(*args):
        raise auto.TimeLimitReached("time limit of 1 s reached while building a template")

    topo, c = ring(4, 50e9), every("allgather", 4, 4 << 12)
    race = auto._Race(Judge("test", lambda s: s.finish_time_s))
    first = build_baseline("ring", topo, c)
    race.enter("first", first)
    monkeypatch.setattr(baselines, "build_baseline", late)
    auto._templates(race, topo, c, AUTO, Budget.of(60.0))
    assert race.winner().transfers is first.transfers
    assert any("while building a template" in t.outcome for t in race.trials)


def test_a_template_is_built_ending_before_the_time_writing_the_best_takes(monkeypatch):
    """A template of 1024 GPUs builds for seconds: the best's file, found already, keeps
    twice its estimated write from the template's deadline, so a build the deadline stops
    still leaves that file the time to be verified and written."""
    import te_ccl.baselines as baselines

    seen: list[float] = []

    def timed(*args):
        seen.append(left())
        raise auto.TimeLimitReached("time limit of 60 s reached while building a template")

    topo, c = ring(4, 50e9), every("allgather", 4, 4 << 12)
    race = auto._Race(Judge("test", lambda s: s.finish_time_s))
    first = build_baseline("ring", topo, c)
    race.enter("first", first)
    monkeypatch.setattr(auto._Race, "reserve_s", property(lambda self: 5.0))
    monkeypatch.setattr(baselines, "build_baseline", timed)
    with until(60.0):
        auto._templates(race, topo, c, AUTO, Budget.of(60.0))
    assert seen and all(x <= 60.0 - 5.0 * auto.RESERVE_MARGIN for x in seen)
    assert race.winner().transfers is first.transfers


def test_the_first_file_candidates_start_with_the_scale_method_at_one_sub_chunk():
    mesh = load_topology("mesh4x4")
    names = [name for name, _ in candidates.first_file(mesh, every("allgather", 16, 1 << 20), LONG)]
    assert names[0] == "scale/trees" and "template ring" in names
    name, build = next(candidates.first_file(mesh, every("allgather", 16, 1 << 20), LONG))
    assert build().info.subchunks == 1
    # beyond 64 GPUs too the templates follow the scale method (built only where its file
    # does not fit the runtime)
    big = load_topology("gb200-nvl72")
    names = [n for n, _ in candidates.first_file(big, every("alltoall", 72, 1 << 20), LONG)]
    assert names[0] == "scale/flow-alltoall" and "template direct" in names
    with pytest.raises(SpecError, match="rank 16"):
        next(candidates.first_file(mesh, every("allgather", 17, 1 << 20), LONG))


def test_a_tie_goes_to_the_schedule_with_fewer_transfers():
    """Every candidate judged equal: the one with the fewest transfers is kept."""
    s = solve(ring(4, 50e9), every("allgather", 4, 4 << 20), AUTO,
              judge=Judge("flat", lambda s: 1.0))
    note = first_note(s)
    assert "also tried" in note
    tried = [x for x in note.split("; ") if x.endswith(": 1 s")]
    assert tried  # the others were timed too
    from te_ccl.baselines import applicable
    sizes = [len(build_baseline(n, ring(4, 50e9), every("allgather", 4, 4 << 20)).transfers)
             for n in applicable(ring(4, 50e9), every("allgather", 4, 4 << 20))]
    assert len(s.transfers) <= min(sizes)
