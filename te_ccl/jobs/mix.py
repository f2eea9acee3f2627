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

A job's *forms* (:data:`FORMS`) are its hierarchical and packed templates
(:data:`FORM_TEMPLATES`, where they apply) cut into messages of one slice, a quarter
and a sixteenth of one: the messages waiting for a shared link take turns a slice
at most each, so a job of whole-slice messages takes most of the link while one of
small messages yields it. Which job should go first is a property of the jobs together
(under ``weighted``, roughly the heavy job that is fast alone: Smith's rule), so each job
gets every form and the descent chooses. A job that can route around links another job
needs (the joint compile's ``exclusive`` view, ``away``) also gets its forms built on
that view: on dgx2x2 a job on every GPU then crosses between boxes on the NICs the
other job's GPUs lack, and yields it the switch ports they share. The forms of the job
expected to yield to all the others (the one the joint compile's order puts last:
Smith's rule under ``weighted``) are lowered
yielding right after its cheap taking forms, on that view first: where
the time for lowering runs out, the sets the descent most often keeps
there — the others' own files or taking forms, that job yielding around them — are
there to try. A job no form
template fits (a block of a torus) gets the ordinary compile's file cut as the taking and
yielding forms instead.

Every template file also counts for the ``alone`` baseline (a compile alone could have
written it): a form that is faster alone is no gain of the joint compile.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.baselines.hierarchical import hierarchical_as_cut
from te_ccl.baselines.packed import packed_as_cut
from te_ccl.collective.model import Collective
from te_ccl.compiler import CompileOptions, SolveParams, forward_only, render_fitting
from te_ccl.deadline import SHARES, Budget, TimeLimitReached, until
from te_ccl.errors import RuntimeLimitError, SolverError, SpecError, VerificationError
from te_ccl.jobs.files import checked_algo, replay_together
from te_ccl.jobs.spec import Job, JobSet
from te_ccl.model.footprint import most_chunks
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.model import Algo

__all__ = ["JobFile", "templates", "mix"]

MIX_PASSES = 3  # passes of the descent at most (each tries every file of every job)
FORMS = {"taking": 1.0, "sharing": 1 / 4, "yielding": 1 / 16}  # messages, in Simple slices
FORM_TEMPLATES = {"hierarchical": hierarchical_as_cut, "packed": packed_as_cut}


@dataclass(frozen=True)
class JobFile:
    """One file made for a job: its bytes, its schedule (on the whole topology) and the
    algorithm as the verifier read it."""

    xml: bytes
    schedule: Schedule
    algo: Algo


def templates(jobs: JobSet, budget: Budget, away: Mapping[str, Topology] | None = None,
              yielding: Collection[str] = ()) -> dict[str, dict[str, JobFile]]:
    """Each job's templates (:func:`~te_ccl.baselines.applicable` on the whole topology)
    and forms, in :func:`_builds`' order, as verified files, by name; those that do not
    apply, that the runtime cannot hold or that the verifier rejects are left out, as are
    those not reached or not finished in ``budget``. ``away``: per job, a view of the
    topology without the links it leaves to others, on which its forms are built too;
    ``yielding``: the jobs whose yielding forms come first (:func:`_builds`). The
    jobs take turns, one file each, in the portfolio's order, so a short budget leaves
    every job its forms and first templates rather than the last jobs none; in each turn
    the jobs not ``yielding`` go first, since a yielding form (the finest cut) can take
    the whole budget to lower."""
    out: dict[str, dict[str, JobFile]] = {j.name: {} for j in jobs.jobs}
    params = SolveParams(time_limit_s=max(budget.left(), 0.1))
    names = {j.name: applicable(jobs.topology, j.collective) for j in jobs.jobs}  # once
    builds = {j.name: _builds(jobs, j, (away or {}).get(j.name), j.name in yielding,
                              names[j.name])
              + _compiled(jobs, j, budget, j.name in yielding, names[j.name])
              for j in jobs.jobs}
    order = sorted(jobs.jobs, key=lambda j: j.name in yielding)  # the cheap taking forms first
    for turn in range(max(map(len, builds.values()), default=0)):
        for job in order:
            if turn >= len(builds[job.name]):
                continue
            if budget.spent:
                return out
            name, build = builds[job.name][turn]
            try:
                with until(budget.left()):  # a large cut ends with the share, not the compile
                    schedule, xml = render_fitting(build(), CompileOptions(), params)
                    out[job.name][name] = JobFile(
                        xml, replace(schedule, topology=jobs.topology), checked_algo(job, xml))
            except (BaselineError, SolverError, VerificationError, RuntimeLimitError):
                continue
    return out


def _compiled(jobs: JobSet, job: Job, budget: Budget, yields: bool = False,
              names: Sequence[str] | None = None
              ) -> list[tuple[str, Callable[[], Schedule]]]:
    """Where no form template applies (a block of a torus): the job's taking and yielding
    forms made by the ordinary compile (flow or scale), its chunks cut as the form's
    (the yielding one first where the job ``yields``); lowered after the templates, since
    each compile may take half the budget left."""
    names = applicable(jobs.topology, job.collective) if names is None else names
    if set(FORM_TEMPLATES) & set(names):
        return []
    order = ("yielding", "taking") if yields else ("taking", "yielding")
    return [(f"compiled, {form}", functools.partial(
        _compile_cut, jobs.topology, cut_to(job.collective, FORMS[form]), budget))
        for form in order]


def _compile_cut(topology: Topology, collective: Collective, budget: Budget) -> Schedule:
    """The compile's schedule of ``collective`` in its own chunks, in ``SHARES.job_form``
    of the budget left. A cut the compile refuses (more transfers than one compile holds:
    the job's input was taken, only the form's chunks are too many) leaves the form out,
    as no file in its share does."""
    import te_ccl  # the public compile, a layer above this package

    try:
        return te_ccl.compile(forward_only(topology), collective,
                              chunks=collective.chunks_per_rank,
                              time_limit_s=max(budget.left() * SHARES.job_form, 0.1)).schedule
    except (TimeLimitReached, SpecError) as e:
        raise SolverError(str(e)) from None


def _builds(jobs: JobSet, job: Job, away: Topology | None = None, yields: bool = False,
            names: Sequence[str] | None = None
            ) -> list[tuple[str, Callable[[], Schedule]]]:
    """What :func:`templates` lowers for ``job``: its taking and sharing forms first
    (candidates only the jobs together can tell apart), then its forms on ``away``, then
    each template's build, then its yielding forms (the templates' own fine cuts already
    yield much of a link, and these cuts are the slowest to lower). A job that ``yields``
    has its yielding and sharing forms right after its taking ones (cheap to lower: a
    fast file even where its compile's was slow), each on ``away`` before the whole
    network, and its taking forms on ``away`` last."""
    if names is None:  # the templates that apply to the job on the whole topology
        names = applicable(jobs.topology, job.collective)
    forms = _forms(jobs.topology, job.collective, "", names)
    moved = {} if away is None else _forms(away, job.collective, ", away",
                                           applicable(away, job.collective))
    built = [(n, functools.partial(build_baseline, n, jobs.topology, job.collective))
             for n in names]
    if yields:
        then = [b for form in ("yielding", "sharing") for b in moved.get(form, []) + forms[form]]
        return forms["taking"] + then + built + moved.get("taking", [])
    return forms["taking"] + forms["sharing"] + sum(moved.values(), []) + built + \
        forms["yielding"]


def _forms(topology: Topology, collective: Collective, tag: str, names: Sequence[str]
           ) -> dict[str, list[tuple[str, Callable[[], Schedule]]]]:
    """Per form, the builds of the form templates that apply on ``topology`` (of
    ``names``, those :func:`applicable` gives there); none for a cut with more transfers
    than a compile holds (:func:`most_chunks`), which would take the memory a compile is
    refused at."""
    most = most_chunks(topology, collective)
    cuts = {form: cut_to(collective, slices) for form, slices in FORMS.items()}
    return {form: [(f"{name}, {form}{tag}", functools.partial(build, topology, cut))
                   for name, build in FORM_TEMPLATES.items()
                   if name in names and cut.chunks_per_rank <= most]
            for form, cut in cuts.items()}


def cut_to(collective: Collective, slices: float) -> Collective:
    """``collective`` cut into chunks of about ``slices`` Simple slices each: a power of
    two chunks per rank, at least one."""
    whole = collective.chunk_bytes * collective.chunks_per_rank  # a rank's bytes
    per = whole / (slices * MSCCL.slice_bytes("Simple"))
    return replace(collective, chunks_per_rank=2 ** max(0, round(math.log2(max(per, 1)))))


def mix(jobs: JobSet, pool: Mapping[str, Sequence[JobFile]], start: Mapping[str, JobFile],
        finish: Mapping[str, float], score: Callable[[Mapping[str, float]], tuple[int, float]],
        budget: Budget) -> tuple[dict[str, JobFile], dict[str, float]]:
    """The files of ``pool`` (per job), one per job, whose replay together has the least
    ``score`` (deadlines missed, objective) that coordinate descent from ``start`` (which
    finish at ``finish`` together) finds in ``budget``, or before the compile's deadline
    stops a replay; and their finishes together."""
    current, finish = dict(start), dict(finish)
    best = score(finish)
    try:
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
    except TimeLimitReached:  # the best set so far is a candidate all the same
        pass
    return current, finish
