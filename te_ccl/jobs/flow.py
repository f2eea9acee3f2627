"""The ``flow`` candidate of the joint compile: every job's demands in one flow problem.

The TE-CCL demands of all jobs share the links' capacity in one time-expanded model
(:func:`te_ccl.model.problem.merge_problems`). A job's chunks are relayed by its own GPUs
and the switches only, since its MSCCL file holds its ranks alone. The model must be
small enough for one MILP: :func:`plan_flow` counts it from the jobs, without building
it, and refuses a larger one and instances of more than :data:`MAX_GPUS` GPUs, so the
joint compile knows before compiling anything whether the candidate can run;
:func:`compile_flow` builds the one model it solves. The solver first finds the least horizon in which
every job finishes (the makespan), then minimises the jobs' finish epochs, each weighted by its
weight under ``--objective weighted`` and by 1 under ``max``, with delivering early as
the tie-break: at that horizon under ``max``, and under ``weighted`` at a quarter more
(:data:`WEIGHTED_SLACK`), so a heavy job may finish earlier at a longer makespan.
Rounds, which solve larger models of one collective, are not used: they carry no partial
sums, and on jobs of many chunks they need more than the candidate's share of the time
for files slower than the jobs compiled alone.

The joint schedule is split per job (its own chunks, numbered as its own collective),
each checked by the schedule checker and all together by the shared-capacity check,
then lowered to MSCCL XML as a compile alone lowers it. The files are then judged like
every other candidate's, replayed together (:mod:`te_ccl.jobs.files`): the epoch
model's times play no part.

One model has one chunk size: every job is cut to the smallest chunk of all jobs, or to
a half, quarter or eighth of it (:data:`PIECES`, the finest whose model stays within
:data:`FINE_VARIABLES` at the jobs' makespan bound), more chunks per rank, as the compile
alone pipelines with ``--chunks auto``; a job whose chunk is not a whole number of them
is refused. One count (:func:`_count`) decides the cut, the chunk-link pairs one model
holds (:func:`~te_ccl.backends.select.check_size`) and whether one MILP solves it
(:func:`~te_ccl.backends.select.backend_for`, the rule ``auto`` applies to one
collective).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from te_ccl.backends.base import FLOW_SOLVERS, Progress, SolveResult
from te_ccl.backends.cpsat import solve_formulation
from te_ccl.backends.milp import horizon_search
from te_ccl.backends.select import backend_for, check_size
from te_ccl.collective.model import Collective
from te_ccl.compiler import CompileOptions, SolveParams, forward_only, render_fitting
from te_ccl.deadline import SHARES, Budget
from te_ccl.errors import SolverError, SpecError, VerificationError
from te_ccl.jobs.bound import joint_bound
from te_ccl.jobs.spec import JobSet
from te_ccl.model.epochs import epoch_duration
from te_ccl.model.extract import prune, split_by_job, to_transfers
from te_ccl.model.formulation import formulate
from te_ccl.model.problem import (
    Problem,
    allreduce_problem,
    build_problem,
    members_of,
    merge_problems,
)
from te_ccl.schedule import Schedule, SolveInfo
from te_ccl.topology.model import Topology
from te_ccl.verify.schedule_check import check_schedule
from te_ccl.verify.shared_capacity import check_shared_capacity

__all__ = ["MAX_GPUS", "FlowPlan", "FlowFiles", "plan_flow", "joint_problem", "compile_flow"]

MAX_GPUS = 32  # GPUs in all jobs together that the joint model solves in a compile's time
WEIGHT_STEPS = 8  # integer weights: the lightest job weighs this many
WEIGHTED_SLACK = 0.25  # under ``weighted``: the horizon the minimal makespan's plus this share
PIECES = (8, 4, 2, 1)  # the smallest job chunk cut into this many, finest first
FINE_VARIABLES = 4_000  # a finer cut only while its model stays this small


@dataclass(frozen=True)
class FlowPlan:
    """What the joint problem will be, counted before it is built: each job's collective
    cut to one chunk size, its weight in the objective, and the model's size."""

    topology: Topology
    collectives: dict[str, Collective]
    weights: dict[str, float]
    epoch: str | float
    variables: int  # transfer variables at the jobs' makespan bound (:func:`_count`)

    def problem(self) -> tuple[Problem, dict[str, int]]:
        """The joint problem and each job's chunk offset in it (SolverError if none)."""
        try:
            return joint_problem(self.topology, self.collectives, self.weights, self.epoch)
        except (SolverError, SpecError) as e:
            raise SolverError(f"no joint model: {e}") from None


@dataclass(frozen=True)
class FlowFiles:
    """Each job's schedule (on the topology as the lowering drives it) and its XML."""

    schedules: dict[str, Schedule]
    xml: dict[str, bytes]
    notes: tuple[str, ...]


def _common_chunks(jobs: JobSet, pieces: int = 1) -> dict[str, Collective]:
    """Each job's collective cut to chunks of the smallest job chunk / ``pieces``
    (SolverError where that does not divide a job's chunk)."""
    base = min(j.collective.chunk_bytes for j in jobs.jobs)
    out = {}
    for j in jobs.jobs:
        coll = j.collective
        k, rest = divmod(coll.chunk_bytes * pieces, base)
        whole = not rest and k == int(k)  # k is a float where the chunks do not divide the size
        cut = replace(coll, chunks_per_rank=coll.chunks_per_rank * int(k))
        if not whole or cut.chunk_bytes * pieces != base:
            raise SolverError(f"job {j.name!r}'s chunks of {coll.chunk_bytes} bytes are not "
                              f"a whole number of {base / pieces:g} bytes (the smallest job "
                              f"chunk / {pieces})")
        out[j.name] = cut
    return out


def plan_flow(jobs: JobSet, objective: str, params: SolveParams) -> FlowPlan:
    """The joint problem's cut: the finest of :data:`PIECES` whose model fits
    :data:`FINE_VARIABLES` (the coarsest otherwise), counted, not built.

    Raises :class:`SolverError` where the flow candidate cannot run: more than
    :data:`MAX_GPUS` GPUs, chunks of no common size, more chunk-link pairs than one model
    holds, a model too large for one MILP (but under ``--backend milp``), or another
    backend of the flow model asked for.
    """
    gpus = len({r for j in jobs.jobs for r in j.ranks})
    if gpus > MAX_GPUS:
        raise SolverError(f"{gpus} GPUs in the jobs, more than the {MAX_GPUS} the joint "
                          "flow model solves in a compile's time")
    if params.backend in FLOW_SOLVERS and params.backend != "milp":
        raise SolverError(f"the joint model needs one MILP (--backend {params.backend})")
    topology = forward_only(jobs.topology)
    weights = {j.name: (j.weight if objective == "weighted" else 1.0) for j in jobs.jobs}
    makespan_s = joint_bound(jobs, "max").seconds
    for pieces in PIECES:
        try:
            collectives = _common_chunks(jobs, pieces)
            count = _count(topology, collectives, params.epoch, makespan_s)
        except (SolverError, SpecError) as e:
            if pieces > 1:
                continue
            raise SolverError(f"no joint model: {e}") from None
        if count.variables <= FINE_VARIABLES or pieces == 1:
            break
    check_size(count.chunks, count.links)
    if params.backend != "milp":
        backend, why = backend_for(count.variables, count.single,
                                   f"{count.epochs} epochs of the jobs' makespan bound")
        if backend != "milp":
            raise SolverError(f"the joint model needs one MILP ({why})")
    return FlowPlan(topology, collectives, weights, params.epoch, count.variables)


@dataclass(frozen=True)
class _Size:
    """A joint model's size, counted from the jobs: chunks that go somewhere (every
    chunk of a reduction), links, epochs, and whether every chunk has one destination."""

    chunks: int
    links: int
    epochs: int
    single: bool

    @property
    def variables(self) -> int:
        """Transfer variables: chunk-link pairs per epoch times the epochs."""
        return self.chunks * self.links * self.epochs


def _count(topology: Topology, collectives: dict[str, Collective], epoch: str | float,
           makespan_s: float) -> _Size:
    """The joint model's size (:class:`_Size`, the pairs of
    :attr:`~te_ccl.model.problem.Problem.size`) at the epochs of the jobs' makespan bound
    (:func:`~te_ccl.jobs.bound.joint_bound`).

    >>> from te_ccl.collective.model import CollectiveKind
    >>> from te_ccl.topology.generators import ring
    >>> r = ring(4, 50e9)
    >>> ag = Collective(CollectiveKind.ALLGATHER, 1 << 20, (0, 1, 2, 3))
    >>> _count(r, {"a": ag}, "fastest", 3.5 * epoch_duration(r, ag.chunk_bytes)).variables
    128
    """
    moving = [chunk for c in collectives.values() for chunk in c.chunks()
              if chunk.destinations or c.is_reduction]
    single = (not any(c.is_reduction for c in collectives.values())
              and all(len(chunk.destinations) == 1 for chunk in moving))
    tau = epoch_duration(topology, next(iter(collectives.values())).chunk_bytes, epoch)
    return _Size(len(moving), len(topology.links), math.ceil(makespan_s / tau), single)


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


def _solve(problem: Problem, params: SolveParams, budget: Budget, objective: str,
           progress: Progress | None) -> SolveResult:
    """The joint schedule: the least makespan, then the jobs' weighted finish epochs in
    the time left."""
    first, proven, notes = horizon_search(problem, params, budget, progress)
    horizon = first.form.ten.horizon
    if objective == "weighted":
        horizon += max(1, round(WEIGHTED_SLACK * horizon))
    best = first
    if budget.left() > 0.05:
        again = solve_formulation(formulate(problem, horizon), params, budget.left(),
                                  with_objective=True, hint=first.values)
        if again.status in ("optimal", "feasible"):
            best = again
    transfers = prune(problem, to_transfers(problem, best.chosen))
    finish = max((t.arrive_epoch for t in transfers), default=0)
    nv, nc = best.form.size
    status = (f"least makespan {first.form.ten.horizon} epochs"
              f"{' (proven)' if proven else ''}; finish epochs {best.status} "
              f"at horizon {best.form.ten.horizon}")
    return SolveResult(tuple(transfers), finish, False, status, nv, nc, tuple(notes), "milp")


def compile_flow(plan: FlowPlan, objective: str, params: SolveParams,
                 progress: Progress | None = None) -> FlowFiles:
    """Every job's file from the joint flow problem of ``plan`` (module docstring).

    Raises :class:`SolverError` without a schedule in the time,
    :class:`VerificationError` where a check rejects a schedule, and what the lowering
    raises for a file the runtime cannot hold.
    """
    (problem, offsets), collectives = plan.problem(), plan.collectives
    topology = problem.topology
    budget = Budget.of(SHARES.job_solve * params.time_limit_s)
    result = _solve(problem, params, budget, objective, progress)
    info = SolveInfo(backend=result.backend, solver_time_s=round(budget.elapsed(), 4),
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
