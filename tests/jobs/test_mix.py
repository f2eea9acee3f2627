"""The mix candidate's search: coordinate descent over each job's files, replayed together."""

from types import SimpleNamespace

import pytest

import te_ccl.jobs.mix as mix_module
from te_ccl.deadline import Budget, TimeLimitReached
from te_ccl.jobs.mix import JobFile, mix

JOBS = SimpleNamespace(jobs=[SimpleNamespace(name="a"), SimpleNamespace(name="b")])


def _files(name: str, n: int) -> list[JobFile]:
    return [JobFile(f"{name}{i}".encode(), None, f"{name}{i}") for i in range(n)]


def _replaying(table: dict[tuple[str, str], tuple[float, float]], seen: list):
    """A replay whose finishes (a, b) are looked up by the pair of files."""
    def replay(_jobs, algos):
        seen.append((algos["a"], algos["b"]))
        a, b = table[(algos["a"], algos["b"])]
        return SimpleNamespace(finish_s={"a": a, "b": b})
    return replay


def _score(finish):
    return 0, finish["a"] + 2 * finish["b"]


def test_descent_keeps_what_improves_until_a_pass_improves_nothing(monkeypatch):
    a, b = _files("a", 2), _files("b", 2)
    # a1 alone is worse (a0 b0 → a1 b0), but with b1 it is the best pair
    table = {("a0", "b0"): (5, 5), ("a1", "b0"): (6, 5), ("a0", "b1"): (5, 4),
             ("a1", "b1"): (3, 3)}
    seen: list = []
    monkeypatch.setattr(mix_module, "replay_together", _replaying(table, seen))
    chosen, finish = mix(JOBS, {"a": a, "b": b}, {"a": a[0], "b": b[0]}, {"a": 5, "b": 5},
                         _score, Budget.of(60))
    assert (chosen["a"].algo, chosen["b"].algo) == ("a1", "b1")
    assert finish == {"a": 3, "b": 3}


def test_no_time_left_keeps_the_start(monkeypatch):
    a, b = _files("a", 2), _files("b", 2)
    seen: list = []
    monkeypatch.setattr(mix_module, "replay_together",
                        _replaying({("a0", "b0"): (5, 5)}, seen))
    chosen, _ = mix(JOBS, {"a": a, "b": b}, {"a": a[0], "b": b[0]}, {"a": 5, "b": 5},
                    _score, Budget.of(0))
    assert (chosen["a"].algo, chosen["b"].algo) == ("a0", "b0") and not seen


def test_the_deadline_in_a_replay_keeps_the_best_set_so_far(monkeypatch):
    a, b = _files("a", 3), _files("b", 1)
    table = {("a1", "b0"): (4, 4)}
    seen: list = []
    replay = _replaying(table, seen)

    def until_a2(jobs, algos):
        if algos["a"] == "a2":
            raise TimeLimitReached("time limit of 1 s reached while replaying")
        return replay(jobs, algos)

    monkeypatch.setattr(mix_module, "replay_together", until_a2)
    chosen, finish = mix(JOBS, {"a": a, "b": b}, {"a": a[0], "b": b[0]}, {"a": 5, "b": 5},
                         _score, Budget.of(60))
    assert chosen["a"].algo == "a1" and finish == {"a": 4, "b": 4}


def test_forms_cut_a_rank_into_powers_of_two_chunks_of_about_the_slices_asked():
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.jobs.mix import FORMS, cut_to
    from te_ccl.runtime_limits import MSCCL

    ag = Collective(CollectiveKind.ALLGATHER, 64_000_000, tuple(range(32)))
    slice_ = MSCCL.slice_bytes("Simple")
    for slices in FORMS.values():
        k = cut_to(ag, slices).chunks_per_rank
        assert k & (k - 1) == 0
        assert slices * slice_ / 2 ** 0.5 <= ag.size_bytes / 32 / k <= slices * slice_ * 2 ** 0.5
    tiny = Collective(CollectiveKind.ALLGATHER, 1024, tuple(range(4)))
    assert cut_to(tiny, 1 / 16).chunks_per_rank == 1


def _jobs(topology: str, *jobs: tuple[str, list[str], str, str]):
    """Jobs on a shipped topology, each as (name, ranks, collective, size)."""
    from te_ccl.jobs.spec import jobs_from
    from te_ccl.spec.topology import load_topology

    return jobs_from(load_topology(topology), {"jobs": [
        {"name": n, "ranks": r, "collective": c, "size": s} for n, r, c, s in jobs]}, None)


def test_templates_are_verified_files_of_each_job_in_turn():
    from te_ccl.jobs.mix import templates

    jobs = _jobs("dgx1", ("ag", ["g0", "g1", "g2", "g3"], "allgather", "1MB"),
                 ("ar", ["g1", "g0", "g5", "g4"], "allreduce", "2MB"))
    made = templates(jobs, Budget.of(60))
    assert made["ag"] and made["ar"]
    for files in made.values():
        assert all(f.algo.ngpus == 4 and f.schedule.topology is jobs.topology
                   for f in files.values())
    assert templates(jobs, Budget.of(0)) == {"ag": {}, "ar": {}}


def test_a_job_across_boxes_gets_its_taking_form_first_and_its_yielding_form_last():
    from te_ccl.jobs.mix import _builds
    from te_ccl.jobs.spec import jobs_from
    from te_ccl.spec.topology import load_topology

    ranks = [f"b{b}.g{g}" for b in range(2) for g in range(8)]
    jobs = jobs_from(load_topology("ndv2x4"), {"jobs": [
        {"name": "pair", "ranks": ranks, "collective": "allreduce", "size": "64MB"},
        {"name": "box", "ranks": ranks[:8], "collective": "allgather", "size": "64MB"}]},
        None)
    pair, box = ([n for n, _ in _builds(jobs, j)] for j in jobs.jobs)
    assert pair[:2] == ["hierarchical, taking", "packed, taking"]
    assert pair[-2:] == ["hierarchical, yielding", "packed, yielding"]
    assert "hierarchical" in pair and "packed-fine" in pair
    assert not any(n.startswith("hierarchical") for n in box)  # one box, and no packed
    assert not any(n.endswith(("taking", "yielding")) for n in box)  # AllGather: no forms


def test_the_packed_form_keeps_the_cut_asked_for_and_only_broadcast_and_allreduce():
    from te_ccl.baselines import BaselineError
    from te_ccl.baselines.packed import packed_as_cut
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.spec.topology import load_topology

    dgx1 = load_topology("dgx1")
    ar = Collective(CollectiveKind.ALLREDUCE, 1 << 20, (0, 1, 2, 3), chunks_per_rank=2)
    assert packed_as_cut(dgx1, ar).collective.chunks_per_rank == 2
    with pytest.raises(BaselineError, match="not allgather"):
        packed_as_cut(dgx1, ar.__class__(CollectiveKind.ALLGATHER, 1 << 20, (0, 1, 2, 3)))


def test_a_job_that_can_route_around_others_gets_its_forms_on_that_view_too():
    from te_ccl.jobs.joint import _view
    from te_ccl.jobs.mix import _builds

    everyone = [f"b{b}.g{g}" for b in range(2) for g in range(16)]
    jobs = _jobs("dgx2x2", ("all", everyone, "allgather", "64MB"),
                 ("half", everyone[:8] + everyone[16:24], "allgather", "64MB"))
    nics = {(f"b{a}.g{g}", f"b{1 - a}.g{g}"): 0.0 for a in (0, 1) for g in (0, 2, 4, 6)}
    away = _view(jobs.topology, nics)
    names = [n for n, _ in _builds(jobs, jobs.jobs[0], away)]
    assert names[:3] == ["hierarchical, taking", "hierarchical, sharing",
                         "hierarchical, taking, away"]
    assert "hierarchical, yielding, away" in names and names[-1] == "hierarchical, yielding"
    build = dict(_builds(jobs, jobs.jobs[0], away))["hierarchical, taking, away"]
    used = {(t.src, t.dst) for t in build().transfers}
    assert used and not used & set(nics)  # the lost NICs carry none of its sends
    assert not any(n.endswith("away") for n, _ in _builds(jobs, jobs.jobs[1]))


def test_a_job_no_form_template_fits_gets_forms_from_the_compile():
    from te_ccl.jobs.mix import FORMS, _compiled, cut_to

    jobs = _jobs("torus4x4", ("row", ["0", "1", "2", "3"], "allgather", "8MB"),
                 ("ar", ["0", "1", "4", "5"], "allreduce", "8MB"))
    forms = dict(_compiled(jobs, jobs.jobs[0], Budget.of(30)))
    assert list(forms) == ["compiled, taking", "compiled, yielding"]
    schedule = forms["compiled, yielding"]()
    cut = cut_to(jobs.jobs[0].collective, FORMS["yielding"]).chunks_per_rank
    assert cut > 1 and schedule.collective.chunks_per_rank >= cut  # a template may cut finer
    assert not _compiled(jobs, jobs.jobs[1], Budget.of(30))  # packed fits an AllReduce


def test_a_compiled_form_with_more_chunks_than_a_compile_holds_is_left_out():
    from te_ccl.errors import SolverError
    from te_ccl.jobs.mix import _compiled

    # 64 GB on four GPUs cut to sixteenths of a slice: over 3M transfers, which the
    # compile refuses as bad input; the job's own input was fine, so only the form goes
    jobs = _jobs("torus4x4", ("row", ["0", "1", "2", "3"], "allgather", "64GB"),
                 ("ar", ["0", "1", "4", "5"], "allreduce", "8MB"))
    with pytest.raises(SolverError, match="chunks per rank"):
        dict(_compiled(jobs, jobs.jobs[0], Budget.of(30)))["compiled, yielding"]()


def test_a_form_cut_finer_than_a_compile_holds_is_not_built():
    from te_ccl.jobs.mix import _builds

    # 1 GB a rank in sixteenths of a slice: 16,384 chunks per rank, about 3.9M transfers
    gpus = [f"b{b}.g{g}" for b in range(2) for g in range(8)]
    jobs = _jobs("ndv2x4", ("ag", gpus, "allgather", "16GB"),
                 ("ar", gpus[8:], "allreduce", "1MB"))
    names = [n for n, _ in _builds(jobs, jobs.jobs[0])]
    assert "hierarchical, sharing" in names and "hierarchical, yielding" not in names


def test_a_job_expected_to_yield_gets_its_yielding_forms_first_around_the_others_first():
    from te_ccl.jobs.joint import _view
    from te_ccl.jobs.mix import _builds

    everyone = [f"b{b}.g{g}" for b in range(2) for g in range(16)]
    jobs = _jobs("dgx2x2", ("all", everyone, "allgather", "64MB"),
                 ("half", everyone[:8] + everyone[16:24], "allgather", "64MB"))
    away = _view(jobs.topology, {(f"b{a}.g{g}", f"b{1 - a}.g{g}"): 0.0
                                 for a in (0, 1) for g in range(8)})
    names = [n for n, _ in _builds(jobs, jobs.jobs[0], away, yields=True)]
    assert names[:5] == ["hierarchical, taking", "hierarchical, yielding, away",
                         "hierarchical, yielding", "hierarchical, sharing, away",
                         "hierarchical, sharing"]
    assert names[-1] == "hierarchical, taking, away"
    assert sorted(names) == sorted(n for n, _ in _builds(jobs, jobs.jobs[0], away))


def test_smiths_rule_puts_the_heavy_job_fast_alone_first():
    from te_ccl.jobs.joint import _order
    from te_ccl.jobs.spec import jobs_from
    from te_ccl.spec.topology import load_topology

    job = {"ranks": ["g0", "g1"], "collective": "allgather", "size": "1MB"}
    jobs = jobs_from(load_topology("dgx1"), {"jobs": [
        {"name": "a"} | job, {"name": "b", "weight": 2} | job]}, None)
    assert _order(jobs, "weighted", {"a": 1.0, "b": 1.5}, {}) == ["b", "a"]  # 2/1.5 > 1/1
    assert _order(jobs, "weighted", {"a": 1.0, "b": 3.0}, {}) == ["a", "b"]
    assert _order(jobs, "max", {}, {"a": 2.0, "b": 1.0}) == ["a", "b"]
