"""The anytime compile: a verified file from the first cheap candidate on, replaced only
by a better verified one, and the best written whatever stage the time limit ends in."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

import te_ccl.compiler.candidates as candidates
import te_ccl.compiler.judge as judge
import te_ccl.compiler.pipeline as pipeline
import te_ccl.compiler.result as compile_result
import te_ccl.lower.msccl as lowering
import te_ccl.verify.msccl.verify as verifying
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, CompileResult, Kept, compile_collective
from te_ccl.deadline import TimeLimitReached
from te_ccl.errors import RuntimeLimitError, SolverError, VerificationError
from te_ccl.topology.generators import mesh
from te_ccl.verify.msccl.verify import verify_msccl

MESH = mesh([4, 4], 50e9)
AG = Collective(CollectiveKind.ALLGATHER, 64 << 20, tuple(range(16)))
PARAMS = SolveParams(time_limit_s=600, threads=1)  # far above the seconds a compile takes
LATE = TimeLimitReached("time limit of 60 s reached while doing the stage")


def compile_to(tmp_path: Path, params: SolveParams = PARAMS,
               progress: Callable[[str], None] | None = None) -> tuple[CompileResult, Path]:
    out = tmp_path / "ag.xml"
    return compile_collective(MESH, AG, params, CompileOptions(output=str(out)), progress), out


def after_first(real: Callable, error: Exception) -> Callable:
    """``real`` for its first call (the first file's), then ``error`` on every other."""
    calls: list[int] = []

    def patched(*args, **kw):
        calls.append(1)
        if len(calls) > 1:
            raise error
        return real(*args, **kw)

    return patched


def raising(error: Exception) -> Callable:
    def patched(*args, **kw):
        raise error

    return patched


def no_finalist(monkeypatch: pytest.MonkeyPatch) -> None:
    """No schedule's file is judged as a finalist's: none is within a margin of minus all
    of a file, and none has a share of the time left to be lowered in."""
    monkeypatch.setattr(judge, "FINALIST_MARGIN", -1.0)
    monkeypatch.setattr(judge, "SHARES", replace(judge.SHARES, finalist=0.0))


def sources(result: CompileResult) -> list[str]:
    return [i.source.split(":")[0] for i in result.incumbents]


def test_the_search_improves_on_the_first_file_and_reports_both(tmp_path):
    result, out = compile_to(tmp_path)
    assert verify_msccl(out.read_text()).valid
    assert sources(result) == ["first file", "search"]
    first, last = result.incumbents
    assert 0 <= result.first_file_s == first.t_s <= last.t_s
    assert first.ratio > last.ratio >= 1
    assert last.ratio == pytest.approx(result.finish_time_s / result.lower_bound_s)
    assert not result.cut_short


@pytest.mark.parametrize("stage", ["search", "checking", "lowering", "verifying"])
def test_a_deadline_in_a_stage_after_the_first_file_writes_the_first_file(
        tmp_path, monkeypatch, stage):
    """The search's schedule is lowered and verified after the race (it judges by the
    schedule replay here), so each stage's deadline comes after the first file's."""
    for module in (compile_result, judge):
        monkeypatch.setattr(module, "XML_REPLAY_LIMIT", 0)
    no_finalist(monkeypatch)
    if stage == "search":  # the first file is not searched for: the search's first call
        monkeypatch.setattr(pipeline, "solve_best", raising(LATE))
    elif stage == "checking":  # the independent checker, before the search's file is
        # lowered (the first file's XML is gated by the verifier alone)
        monkeypatch.setattr(pipeline, "check_schedule", raising(LATE))
    elif stage == "lowering":
        monkeypatch.setattr(lowering, "lower_to_msccl", after_first(lowering.lower_to_msccl, LATE))
    else:
        monkeypatch.setattr(verifying, "verify_msccl", after_first(verifying.verify_msccl, LATE))
    result, out = compile_to(tmp_path)
    assert verify_msccl(out.read_text()).valid
    assert sources(result) == ["first file"] and result.cut_short
    note = next(n for n in result.schedule.info.notes if n.startswith("anytime: cut short"))
    assert "doing the stage" in note and "× the lower bound" in note
    # the first file's schedule is checked before it is written, while time is left
    assert result.schedule_checked is (stage != "checking")


def test_a_deadline_while_replaying_keeps_the_verified_file_it_times(tmp_path, monkeypatch):
    """The search's file is verified when its replay runs out of time: it is the one
    written, timed by its schedule, and the compile says it was cut short."""
    for module in (compile_result, judge):
        monkeypatch.setattr(module, "XML_REPLAY_LIMIT", 0)
    no_finalist(monkeypatch)
    monkeypatch.setattr(judge, "xml_replay", after_first(judge.xml_replay, LATE))
    result, out = compile_to(tmp_path)
    assert verify_msccl(out.read_text()).valid
    assert sources(result) == ["first file", "search"] and result.cut_short
    assert result.timing.measured_by == "schedule replay"


@pytest.mark.slow
def test_a_runtime_limit_in_the_searchs_file_falls_back_to_the_first_file(tmp_path,
                                                                         monkeypatch):
    """No schedule after the first lowers (every sub-chunking and the whole-chunk race
    overflow the runtime): the first file is written, exit 0, with a note why."""
    full = RuntimeLimitError("cannot keep at most 64 steps per thread block within 32 channels")
    monkeypatch.setattr(lowering, "lower_to_msccl", after_first(lowering.lower_to_msccl, full))
    result, out = compile_to(tmp_path)
    assert verify_msccl(out.read_text()).valid
    assert sources(result) == ["first file"] and not result.cut_short
    assert any(n.startswith("anytime: the search's file was not written") and "32 channels" in n
               for n in result.schedule.info.notes)


def test_a_search_schedule_of_another_chunking_that_does_not_fit_gives_way(tmp_path,
                                                                          monkeypatch):
    """The search keeps 2 chunks per rank, whose files the runtime cannot hold at any
    sub-chunking (nor any file of more than one chunk per rank, such as the doubled
    rings' of the race with whole chunks): the chunking asked for is solved again by the
    scale backend and its file, faster than the first one, is written."""
    real_solve, real_lower = pipeline.solve_best, lowering.lower_to_msccl

    def search(topology, collective, params, chunk_choices=(), progress=None, judge=None,
               in_switch=False, known=()):
        if known:  # the search proper (solving again passes none)
            collective = replace(collective, chunks_per_rank=2)
        return real_solve(topology, collective, params, chunk_choices, progress, judge,
                          in_switch)

    def lower(schedule, **kw):
        if schedule.collective.chunks_per_rank // schedule.info.subchunks != 1:
            raise RuntimeLimitError("cannot keep at most 64 steps per thread block")
        return real_lower(schedule, **kw)

    def no_flow_model(topology, collective, params, progress=None):
        if params.backend == "auto":  # the race's flow model: it would take the search's time
            raise SolverError("time limit reached without a solution")
        return real_run(topology, collective, params, progress)

    real_run = candidates.run_strategy
    monkeypatch.setattr(pipeline, "solve_best", search)
    monkeypatch.setattr(lowering, "lower_to_msccl", lower)
    monkeypatch.setattr(candidates, "run_strategy", no_flow_model)
    result, out = compile_to(tmp_path)
    assert verify_msccl(out.read_text()).valid
    assert sources(result) == ["first file", "search"]
    s = result.schedule
    assert s.collective.chunks_per_rank == s.info.subchunks > 1  # 1 chunk per rank, cut
    assert any("does not fit the runtime" in n and "solved again with" in n
               for n in s.info.notes)


def test_a_search_too_slow_to_lower_in_time_is_not_started(tmp_path, monkeypatch):
    """At a pace where the search's file cannot be lowered in the time left, the first
    file is written, cut short, and no lowering of the search's file begins."""
    for module in (compile_result, judge):
        monkeypatch.setattr(module, "XML_REPLAY_LIMIT", 0)
    monkeypatch.setattr(judge.Timer, "pace", property(lambda self: 3600.0))
    lowered: list[int] = []
    real = lowering.lower_to_msccl
    monkeypatch.setattr(lowering, "lower_to_msccl",
                        lambda s, **kw: lowered.append(len(s.transfers)) or real(s, **kw))
    result, out = compile_to(tmp_path)
    assert verify_msccl(out.read_text()).valid
    assert len(lowered) == 1 and sources(result) == ["first file"] and result.cut_short
    assert any("needs ~" in n and "to lower and verify" in n for n in result.schedule.info.notes)


def test_progress_shows_the_file_kept(tmp_path):
    said: list[str] = []
    result, _ = compile_to(tmp_path, progress=said.append)
    kept = [m for m in said if "file kept:" in m]
    assert kept and "× the bound, first file: " in kept[0]
    assert any("search: " in m for m in kept)
    # each file kept is told once as it is kept (a pipe prints those at once)
    assert [m for m in said if isinstance(m, Kept)] == [
        f"file kept: {i.ratio:.4f}× the bound, {i.source}" for i in result.incumbents]


def test_a_chosen_backend_has_no_first_file(tmp_path):
    result, out = compile_to(tmp_path, SolveParams(backend="scale", time_limit_s=600))
    assert sources(result) == ["search"] and verify_msccl(out.read_text()).valid


def test_without_an_output_nothing_is_kept():
    result = compile_collective(MESH, AG, PARAMS)
    assert (result.first_file_s, result.cut_short, result.incumbents) == (None, False, ())
    assert result.schedule_checked is None


def test_a_first_file_is_verified_alone_and_its_schedule_checked_before_it_is_written(
        tmp_path, monkeypatch):
    """The MSCCL verifier alone gates the first file; the checker runs on its schedule
    once it is the file to write (the search cut short here)."""
    events: list[str] = []

    def checking(schedule):
        events.append("check")
        return real(schedule)

    real = pipeline.check_schedule
    monkeypatch.setattr(pipeline, "solve_best", raising(LATE))
    monkeypatch.setattr(pipeline, "check_schedule", checking)
    result, out = compile_to(tmp_path,
                             progress=lambda m: isinstance(m, Kept) and events.append("kept"))
    assert events == ["kept", "check"] and result.schedule_checked is True
    assert verify_msccl(out.read_text()).valid


def test_a_first_file_the_checker_refuses_is_not_written(tmp_path, monkeypatch):
    from te_ccl.verify.schedule_check import Violation

    monkeypatch.setattr(pipeline, "solve_best", raising(LATE))
    monkeypatch.setattr(pipeline, "check_schedule",
                        lambda schedule: [Violation("demand", "rank 0 lacks chunk 1")])
    with pytest.raises(VerificationError, match="schedule check failed"):
        compile_to(tmp_path)
    assert not (tmp_path / "ag.xml").exists()


@pytest.mark.slow
def test_the_json_summary_reports_the_anytime_record(teccl, tmp_path):
    out = tmp_path / "ag.xml"
    code, stdout, err = teccl("compile", "mesh4x4", "-c", "allgather", "-s", "1MiB",
                              "-o", str(out), "--json")
    assert code == 0, err
    info = json.loads(stdout)
    assert info["first_file_s"] == info["incumbents"][0]["t_s"] >= 0
    assert info["cut_short"] is False and info["schedule_checked"] is True
    assert {tuple(sorted(i)) for i in info["incumbents"]} == {("ratio", "source", "t_s")}
    assert info["incumbents"][-1]["ratio"] == pytest.approx(info["bound_ratio"])


def test_a_limit_too_short_for_any_file_says_what_one_would_take(teccl, tmp_path):
    """256 GPUs in a second: a verified file, or exit 3 with an estimate and no file."""
    out = tmp_path / "ag.xml"
    code, _, err = teccl("compile", "mesh16x16", "-c", "allgather", "-s", "64MiB",
                         "--time-limit", "1", "-o", str(out))
    if code == 0:
        assert verify_msccl(out.read_text()).valid
    else:
        assert code == 3 and not out.exists() and len(err.strip().splitlines()) == 1
        assert re.search(r"time limit of 1 s (reached while|was used up before)", err), err
        assert re.search(r"(needs|takes) about [0-9.e+]+ s .*here", err)



def test_the_first_file_skips_the_torus_cp_sat_the_search_runs(monkeypatch):
    """The first candidate is built in a hurry: the torus orbit's list schedule alone (its
    CP-SAT takes up to 20 s); outside a hurry the CP-SAT runs where the list schedule
    misses the orbit's bound (torus 8×8, one chunk: 18 epochs for 17)."""
    import te_ccl.backends.scale.torus as torus
    from te_ccl.backends.scale import compile_scale
    from te_ccl.deadline import hurried
    from te_ccl.spec.topology import load_topology

    calls: list[int] = []
    real = torus.improve_cpsat
    monkeypatch.setattr(torus, "improve_cpsat",
                        lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    topo = load_topology("torus8x8")
    coll = Collective(CollectiveKind.ALLGATHER, 64 << 20, tuple(range(64)))
    params = SolveParams(backend="scale", time_limit_s=3, max_subchunks=1)
    with hurried() as skipped:
        compile_scale(topo, coll, params)
    assert skipped == ["the torus orbit's CP-SAT"] and not calls
    compile_scale(topo, coll, params)
    assert calls == [1]


def _overflow(*args, **kwargs):
    raise RuntimeLimitError("rank position 3 receives too many chunks")


def test_out_of_time_without_a_file_names_the_candidates_refused(tmp_path, monkeypatch):
    """The message says why each first candidate gave no file, and estimates no first
    file from a candidate that cannot be one."""
    monkeypatch.setattr(pipeline, "render", _overflow)
    monkeypatch.setattr(pipeline, "repair", lambda *args: (_ for _ in ()).throw(LATE))
    with pytest.raises(TimeLimitReached) as caught:
        compile_to(tmp_path)
    message = str(caught.value)
    assert "; no file from the scale/" in message and "receives too many chunks" in message
    assert "no other schedule was built in time" in message


def test_every_first_candidate_overflowing_at_one_chunk_ends_the_compile_at_once(
        tmp_path, monkeypatch):
    """Beyond the templates' scale, with nothing coarser than one chunk per rank, the
    search could only cut more sub-chunks: exit 3 with the reasons, no search."""
    monkeypatch.setattr(pipeline, "render", _overflow)
    monkeypatch.setattr(pipeline, "TEMPLATE_MAX_GPUS", 8)
    monkeypatch.setattr(pipeline, "repair", lambda *args: pytest.fail("searched"))
    with pytest.raises(RuntimeLimitError, match=r"no file fits the runtime \(the scale/.*"
                                                 r"too many chunks.*no coarser candidate"):
        compile_to(tmp_path)


def test_a_rooted_collectives_first_template_is_the_direct_one():
    """A gather's direct template sends each chunk once along a shortest path; a ring
    relays it through every rank (N²/2 transfers): the first file tries direct first."""
    from te_ccl.compiler.candidates import first_file

    gather = Collective(CollectiveKind.GATHER, 16 << 10, tuple(range(16)), root=0)
    names = [name for name, _ in first_file(MESH, gather, PARAMS)]
    assert names[0] == "template direct" and "template ring" in names[1:]
    assert [name for name, _ in first_file(MESH, AG, PARAMS)][1] != "template direct"


def test_a_search_failing_without_a_file_says_why_each_first_candidate_gave_none(
        tmp_path, monkeypatch):
    from te_ccl.errors import SolverError

    monkeypatch.setattr(pipeline, "render", _overflow)
    monkeypatch.setattr(pipeline, "solve_best",
                        lambda *args: (_ for _ in ()).throw(SolverError("no schedule")))
    with pytest.raises(SolverError, match=r"^no schedule; no first file from the scale/.*"
                                          r"too many chunks"):
        compile_to(tmp_path)


def test_a_deadline_in_the_schedule_replay_keeps_the_verified_file(tmp_path, monkeypatch):
    """The schedule replay times a schedule JSON: out of time there, the verified file is
    written all the same, kept at the epoch model's time, and the compile was cut short."""
    import te_ccl.simulate.replay as replay
    from te_ccl.deadline import left

    real = replay.replay_finish

    def late(schedule):  # out of time while the compile's deadline holds
        if left() < float("inf"):
            raise LATE
        return real(schedule)

    monkeypatch.setattr(replay, "replay_finish", late)
    monkeypatch.setattr(pipeline, "solve_best", raising(LATE))  # and no search after it
    out = tmp_path / "ag.json"
    result = compile_collective(MESH, AG, PARAMS, CompileOptions(output=str(out), fmt="json"))
    assert json.loads(out.read_text())["transfers"] and result.cut_short
    assert sources(result) == ["first file"]
    assert result.incumbents[0].ratio == pytest.approx(
        result.schedule.finish_time_s / result.lower_bound_s)


def test_a_rooted_first_file_over_the_channels_is_paced_until_it_fits(tmp_path, monkeypatch):
    """Mesh 16×16 Scatter 1 KB: the direct template starts 128 tiny chunks at once on
    each of the root's links, more than 32 channels hold; a paced one is the first file."""
    from te_ccl.baselines.direct import direct
    from te_ccl.compiler.candidates import first_file
    from te_ccl.spec.topology import load_topology

    topology = load_topology("mesh16x16")
    scatter = Collective(CollectiveKind.SCATTER, 1000, tuple(range(256)), root=0)
    names = [name for name, _ in first_file(topology, scatter, PARAMS)]
    assert names[:3] == ["template direct", "template direct (64 in flight per link)",
                         "template direct (32 in flight per link)"]
    monkeypatch.setattr(pipeline, "repair", lambda *args: None)  # the first file only
    # one chunk a step: with steps of several chunks the direct template fits unpaced
    monkeypatch.setattr(judge, "MERGE_UP_TO", -1)
    out = tmp_path / "scatter.xml"
    result = compile_collective(topology, scatter, PARAMS, CompileOptions(output=str(out)))
    assert result.schedule.info.backend == "baseline:direct"
    assert result.schedule.finish_time_s > direct(topology, scatter).finish_time_s  # paced
    assert verify_msccl(out.read_text()).valid
