"""The ``mix`` candidate of the joint compile: of every file made for each job, the set
that runs best together.

A link is shared per connection in the co-simulation (:mod:`te_ccl.simulate.cosim`):
the messages waiting for it take turns. So how much of a shared link a job gets while
the others send depends on its algorithm's form, not only on its bytes: a hierarchical
AllGather crosses a box's NIC on a few connections and leaves most of it to a job that
crosses on many; a job whose box-local phase comes first meets the NIC late. Which set
of forms gains is a property of the jobs together, so the candidates are the files
already made for each job (compiled alone, on the views, by the flow model) and the
portfolio's templates (:func:`templates`, lowered as a compile lowers them), and the
set is found by coordinate descent on the objective of the files replayed together
(:func:`mix`): each job in turn tries its files with the others' fixed and keeps one
that improves the objective, until a pass improves nothing or the time is spent.

Every template file also counts for the ``alone`` baseline (a compile alone could have
written it): a form that is faster alone is no gain of the joint compile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.compiler import CompileOptions, SolveParams, render_fitting
from te_ccl.deadline import Budget
from te_ccl.errors import RuntimeLimitError, SolverError, VerificationError
from te_ccl.jobs.files import checked_algo, replay_together
from te_ccl.jobs.spec import JobSet
from te_ccl.schedule import Schedule
from te_ccl.verify.msccl.model import Algo

__all__ = ["JobFile", "templates", "mix"]

MIX_PASSES = 3  # passes of the descent at most (each tries every file of every job)


@dataclass(frozen=True)
class JobFile:
    """One file made for a job: its bytes, its schedule (on the whole topology) and the
    algorithm as the verifier read it."""

    xml: bytes
    schedule: Schedule
    algo: Algo


def templates(jobs: JobSet, budget: Budget) -> dict[str, dict[str, JobFile]]:
    """Each job's templates (:func:`~te_ccl.baselines.applicable` on the whole topology)
    as verified files, by template name; those that do not apply, that the runtime
    cannot hold or that the verifier rejects are left out, as are those not reached in
    ``budget``. The jobs take turns, one template each, in the portfolio's order, so a
    short budget leaves every job its first templates rather than the last jobs none."""
    out: dict[str, dict[str, JobFile]] = {j.name: {} for j in jobs.jobs}
    params = SolveParams(time_limit_s=max(budget.left(), 0.1))
    names = {j.name: applicable(jobs.topology, j.collective) for j in jobs.jobs}
    for turn in range(max(map(len, names.values()), default=0)):
        for job in jobs.jobs:
            if turn >= len(names[job.name]):
                continue
            if budget.spent:
                return out
            name = names[job.name][turn]
            try:
                built = build_baseline(name, jobs.topology, job.collective)
                schedule, xml = render_fitting(built, CompileOptions(), params)
                out[job.name][name] = JobFile(
                    xml, replace(schedule, topology=jobs.topology), checked_algo(job, xml))
            except (BaselineError, SolverError, VerificationError, RuntimeLimitError):
                continue
    return out


def mix(jobs: JobSet, pool: Mapping[str, Sequence[JobFile]], start: Mapping[str, JobFile],
        score: Callable[[Mapping[str, float]], tuple[int, float]], budget: Budget
        ) -> tuple[dict[str, JobFile], dict[str, float]]:
    """The files of ``pool`` (per job), one per job, whose replay together has the least
    ``score`` (deadlines missed, objective) that coordinate descent from ``start`` finds
    in ``budget``; and their finishes together."""
    current = dict(start)
    finish = replay_together(jobs, {n: f.algo for n, f in current.items()}).finish_s
    best = score(finish)
    for _ in range(MIX_PASSES):
        improved = False
        for job in jobs.jobs:
            for f in pool[job.name]:
                if f is current[job.name] or budget.spent:
                    continue
                trial = current | {job.name: f}
                got = replay_together(jobs, {n: g.algo for n, g in trial.items()}).finish_s
                if score(got) < best:
                    current, finish, best, improved = trial, got, score(got), True
        if not improved or budget.spent:
            break
    return current, finish
