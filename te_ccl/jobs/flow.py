"""The ``flow`` candidate of the joint compile: every job's demands in one flow problem.

The TE-CCL demands of all jobs share the links' capacity in one time-expanded model
(:func:`te_ccl.model.problem.merge_problems`). A job's chunks are relayed by its own GPUs
and the switches only, since its MSCCL file holds its ranks alone. The solver first finds
the least horizon in which every job finishes (the makespan), then at that horizon
minimises the jobs' finish epochs, each weighted by its weight under ``--objective
weighted`` and by 1 under ``max``, with delivering early as the tie-break. A weighted
optimum that needs a longer makespan is not searched for.

The joint schedule is split per job (its own chunks, numbered as its own collective),
each checked by the schedule checker and all together by the shared-capacity check,
then lowered to MSCCL XML as a compile alone lowers it. The files are then judged like
every other candidate's, replayed together (:mod:`te_ccl.jobs.files`): the epoch
model's times play no part.

Jobs of different chunk sizes are cut to the smallest one (more chunks per rank) where
it divides theirs; one model must have one chunk size. Instances of more than
:data:`MAX_GPUS` GPUs are refused: the model would not solve in a compile's time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from te_ccl.backends.base import Clock, Progress
from te_ccl.backends.select import STRATEGIES, run_backend
from te_ccl.collective.model import Collective
from te_ccl.compiler import CompileOptions, SolveParams, forward_only, render_fitting
from te_ccl.errors import SolverError, SpecError, VerificationError
from te_ccl.jobs.spec import JobSet
from te_ccl.model.extract import split_by_job
from te_ccl.model.problem import Problem, allreduce_problem, build_problem, merge_problems, members_of
from te_ccl.schedule import Schedule, SolveInfo
from te_ccl.topology.model import Topology
from te_ccl.verify.schedule_check import check_schedule
from te_ccl.verify.shared_capacity import check_shared_capacity

__all__ = ["MAX_GPUS", "FlowFiles", "flow_gpus", "joint_problem", "compile_flow"]

MAX_GPUS = 32  # GPUs in all jobs together that the joint model solves in a compile's time
WEIGHT_STEPS = 8  # integer weights: the lightest job weighs this many


@dataclass(frozen=True)
class FlowFiles:
    """Each job's schedule (on the topology as the lowering drives it) and its XML."""

    schedules: dict[str, Schedule]
    xml: dict[str, bytes]
    notes: tuple[str, ...]


def flow_gpus(jobs: JobSet) -> int:
    """GPUs used by any job."""
    return len({r for j in jobs.jobs for r in j.ranks})


def _common_chunks(jobs: JobSet) -> dict[str, Collective]:
    """Each job's collective cut to the smallest chunk of all jobs (SolverError where it
    does not divide a job's)."""
    base = min(j.collective.chunk_bytes for j in jobs.jobs)
    out = {}
    for j in jobs.jobs:
        coll = j.collective
        k, rest = divmod(coll.chunk_bytes, base)
        cut = replace(coll, chunks_per_rank=coll.chunks_per_rank * k)
        if rest or cut.chunk_bytes != base:
            raise SolverError(f"job {j.name!r}'s chunks of {coll.chunk_bytes} bytes are not "
                              f"a whole number of the smallest job chunk ({base} bytes)")
        out[j.name] = cut
    return out


def joint_problem(topology: Topology, collectives: dict[str, Collective],
                  weights: dict[str, float], epoch: str | float = "fastest"
                  ) -> tuple[Problem, dict[str, int]]:
    """The merged problem of every job (one chunk size) and each job's chunk offset.

    A reducing job is one problem with its partials summed in forward time
    (:func:`~te_ccl.model.problem.allreduce_problem`), so its reduction and the others'
    traffic share the links in one model.
    """
    parts = {}
    for name, coll in collectives.items():
        solo = allreduce_problem if coll.is_reduction else build_problem
        parts[name] = solo(topology, coll, epoch)
    barred = {name: frozenset(topology.gpus) - members_of(topology, coll)
              for name, coll in collectives.items()}
    light = min(weights.values())
    ints = {name: max(1, round(WEIGHT_STEPS * w / light)) for name, w in weights.items()}
    return merge_problems(parts, barred, ints)


def compile_flow(jobs: JobSet, objective: str, params: SolveParams,
                 progress: Progress | None = None) -> FlowFiles:
    """Every job's file from one joint flow problem (module docstring).

    Raises :class:`SolverError` for an instance too large or without a schedule in the
    time, :class:`VerificationError` where a check rejects a schedule, and what the
    lowering raises for a file the runtime cannot hold.
    """
    gpus = flow_gpus(jobs)
    if gpus > MAX_GPUS:
        raise SolverError(f"{gpus} GPUs in the jobs, more than the {MAX_GPUS} the joint "
                          "flow model solves in a compile's time")
    topology = forward_only(jobs.topology)
    collectives = _common_chunks(jobs)
    weights = {j.name: (j.weight if objective == "weighted" else 1.0) for j in jobs.jobs}
    try:
        problem, offsets = joint_problem(topology, collectives, weights, params.epoch)
    except SpecError as e:
        raise SolverError(f"no joint model: {e}") from None
    backend = params.backend if params.backend in STRATEGIES else "auto"
    clock = Clock(params.time_limit_s)
    result = run_backend(problem, replace(params, backend=backend), clock, progress)
    info = SolveInfo(backend=result.backend, solver_time_s=round(clock.elapsed, 4),
                     optimal=result.optimal, status=result.status,
                     variables=result.variables, constraints=result.constraints,
                     notes=result.notes)
    schedules = {name: Schedule(topology, collectives[name], problem.epoch_s, tuple(ts), info)
                 for name, ts in split_by_job(problem, result.transfers, offsets).items()}
    for name, s in schedules.items():
        wrong = check_schedule(s)
        if wrong:
            raise VerificationError(f"job {name!r}'s part of the joint schedule: {wrong[0]}")
    over = check_shared_capacity(schedules)
    if over:
        raise VerificationError(f"the joint schedule overloads a shared link: {over[0]}")
    xml = {}
    for name, s in schedules.items():
        schedules[name], xml[name] = render_fitting(s, CompileOptions(), params, progress)
    note = (f"flow: one model of {len(problem.demands)} chunks, {result.variables} variables "
            f"({result.backend}; {result.status}), finish epoch {result.finish_epoch} of "
            f"{problem.epoch_s:.3g} s")
    return FlowFiles(schedules, xml, (note,))
