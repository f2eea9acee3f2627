"""The ``flow`` candidate: every job's demands in one flow problem, split into one
verified MSCCL file per job, judged like the other candidates by the files' replay."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import te_ccl.jobs.flow as flow_module
from te_ccl.compiler import SolveParams, forward_only
from te_ccl.errors import SolverError
from te_ccl.jobs import compile_jobs
from te_ccl.jobs.files import checked_algo, replay_together
from te_ccl.jobs.flow import (
    FINE_VARIABLES,
    MAX_GPUS,
    PIECES,
    compile_flow,
    joint_problem,
    plan_flow,
)
from te_ccl.jobs.spec import jobs_from, load_jobs
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.spec.topology import load_topology
from te_ccl.verify.schedule_check import check_schedule
from te_ccl.verify.shared_capacity import check_shared_capacity

DGX1 = load_topology("dgx1")
SHARED = {"jobs": [
    {"name": "ag", "ranks": ["g0", "g1", "g2", "g3"], "collective": "allgather", "size": "1MB"},
    {"name": "ar", "ranks": ["g1", "g0", "g5", "g4"], "collective": "allreduce", "size": "2MB",
     "weight": 2},
]}


@pytest.fixture(scope="module")
def flow():
    """The joint compile of SHARED: its solve spends its whole share of the limit (the
    MILP searches lower horizons, then better finish epochs, while time is left) on a
    smaller instance too, so the tests on it are slow."""
    jobs = jobs_from(DGX1, SHARED, None)
    params = SolveParams(time_limit_s=8)  # a first horizon in time also on a loaded machine
    return jobs, compile_flow(plan_flow(jobs, "weighted", params), "weighted", params)


@pytest.mark.slow
def test_each_job_gets_a_verified_file_of_its_own_ranks(flow):
    jobs, files = flow
    for job in jobs.jobs:
        algo = checked_algo(job, files.xml[job.name])  # raises if the verifier rejects it
        assert algo.ngpus == len(job.ranks)
    assert replay_together(jobs, {j.name: checked_algo(j, files.xml[j.name])
                                  for j in jobs.jobs}).finish_s.keys() == {"ag", "ar"}


@pytest.mark.slow
def test_the_split_schedules_pass_both_independent_checks(flow):
    jobs, files = flow
    for job in jobs.jobs:
        s = files.schedules[job.name]
        assert not check_schedule(s)
        assert s.collective.ranks == job.ranks
        gpus = {DGX1.gpu(r) for r in job.ranks}
        # a job's chunks pass through its own GPUs and switches only
        assert all(DGX1.node_by_name[n].is_gpu is False or n in gpus
                   for t in s.transfers for n in (t.src, t.dst))
    assert not check_shared_capacity(files.schedules)


@pytest.mark.slow
def test_chunks_cut_to_one_size(flow):
    _, files = flow
    # ar's 500 kB chunks (2 MB over 4 ranks) are cut to ag's 250 kB: 2 per rank
    sizes = {s.collective.chunk_bytes for s in files.schedules.values()}
    assert len(sizes) == 1


def test_too_many_gpus_is_refused_before_any_model():
    torus = load_topology("torus16x16")
    jobs = jobs_from(torus, {"jobs": [
        {"name": "a", "ranks": [str(r) for r in range(MAX_GPUS + 1)],
         "collective": "allgather", "size": "1MB"}]}, None)
    with pytest.raises(SolverError, match=f"more than the {MAX_GPUS}"):
        plan_flow(jobs, "max", SolveParams())


def _quad_pair(second: str, size: str):
    """An AllGather of 1 MB and ``second`` of ``size`` on dgx1's first four GPUs."""
    quad = ["g0", "g1", "g2", "g3"]
    return jobs_from(DGX1, {"jobs": [
        {"name": "a", "ranks": quad, "collective": "allgather", "size": "1MB"},
        {"name": "b", "ranks": quad, "collective": second, "size": size}]}, None)


def test_chunk_sizes_that_do_not_divide_are_refused():
    with pytest.raises(SolverError, match="whole number"):
        plan_flow(_quad_pair("allgather", "600kB"), "max", SolveParams())


def test_a_model_not_for_one_milp_is_refused():
    jobs = _quad_pair("allreduce", "1MB")
    assert plan_flow(jobs, "max", SolveParams(backend="milp")).problem()[0].reductions
    with pytest.raises(SolverError, match="needs one MILP"):
        plan_flow(jobs, "max", SolveParams(backend="rounds"))
    dgx2x2 = load_topology("dgx2x2")
    gpus = [f"b{b}.g{i}" for b in range(2) for i in range(16)]
    big = jobs_from(dgx2x2, {"jobs": [
        {"name": "all", "ranks": gpus, "collective": "allgather", "size": "64MB"},
        {"name": "half", "ranks": gpus[:8] + gpus[16:24], "collective": "allgather",
         "size": "64MB"}]}, None)
    with pytest.raises(SolverError, match="needs one MILP"):
        plan_flow(big, "weighted", SolveParams())



def _cut_each_built(jobs, objective: str) -> float:
    """Chunk bytes of the cut the joint problem took when every cut was built in turn,
    finest first: the first whose model at the horizon's lower bound fits."""
    base = min(j.collective.chunk_bytes for j in jobs.jobs)
    weights = {j.name: j.weight if objective == "weighted" else 1.0 for j in jobs.jobs}
    for pieces in PIECES:
        cut = {j.name: replace(j.collective, chunks_per_rank=j.collective.chunks_per_rank
                               * round(j.collective.chunk_bytes * pieces / base))
               for j in jobs.jobs}
        problem, _ = joint_problem(forward_only(DGX1), cut, weights)
        if pieces == 1 or problem.size * horizon_lower_bound(problem) <= FINE_VARIABLES:
            return problem.chunk_bytes
    raise AssertionError("unreachable")


@pytest.mark.parametrize("jobs", [
    _quad_pair("allgather", "1MB"), _quad_pair("allreduce", "1MB"),
    _quad_pair("allgather", "4MB"), _quad_pair("broadcast", "1MB"),
    _quad_pair("reducescatter", "2MB"), jobs_from(DGX1, SHARED, None),
    load_jobs(DGX1, Path(__file__).parent / "dgx1-jobs.yaml")],
    ids=["ag+ag", "ag+ar", "ag+ag4MB", "ag+bcast", "ag+rs", "shared", "dgx1-jobs"])
def test_the_cut_counted_before_building_is_the_one_building_each_took(jobs, monkeypatch):
    built = []

    def joint(*args, **kw):
        built.append(args)
        return joint_problem(*args, **kw)

    monkeypatch.setattr(flow_module, "joint_problem", joint)
    plan = plan_flow(jobs, "max", SolveParams())
    assert not built  # planning counts; the flow candidate builds
    problem, _ = plan.problem()
    assert len(built) == 1
    assert problem.chunk_bytes == _cut_each_built(jobs, "max")
    assert plan.variables % problem.size == 0  # one count: the problem's pairs × epochs


def test_too_many_chunk_link_pairs_are_refused_when_planning(monkeypatch):
    import te_ccl.backends.select as select

    monkeypatch.setattr(flow_module, "joint_problem", None)  # never built
    monkeypatch.setattr(select, "MAX_CHUNK_LINKS", 100)
    with pytest.raises(SolverError, match="chunk-link pairs"):
        plan_flow(jobs_from(DGX1, SHARED, None), "max", SolveParams())


@pytest.mark.slow
def test_compile_jobs_races_the_flow_candidate():
    jobs = jobs_from(DGX1, SHARED, None)
    result = compile_jobs(jobs, None, time_limit_s=40)
    assert "flow" in result.candidates or any(n.startswith("flow:") for n in result.notes)
    assert result.checks["schedule"] == 0
