"""The joint compile: every job's algorithm planned for the links it shares with the others.

Each job is compiled by the ordinary compile (flow model, or the scale backend where
``auto`` picks it) on a *view* of the topology in which every link it shares is only
as fast as the job's share of it; its algorithm then leaves the rest of the link to the
jobs it shares it with, and routes around links others need more. Only links between
two GPUs are shared out: a switch port is its GPU's (or its box's) only way in or out
in the topologies teccl ships, so no route avoids it. The shares come from the jobs
compiled alone and replayed together (which links carry whose bytes):

``alone``     the baseline, compiled alone: each job's file that finishes first with
              the network to itself, of all compiled for it (on the whole network,
              which also gives the links they share, or on a view below);
``shares``    on each shared link, a job's share is its bytes there (× its weight
              under ``--objective weighted``) over all jobs' — so the jobs' epoch
              schedules fit the link together;
``priority``  one job keeps 3/4 of each link it shares, the others split the rest as
              ``shares`` does: under ``weighted`` the job that gains the objective
              most from going first (Smith's rule: weight / time alone), under
              ``max`` the job that finishes last when compiled alone;
``exclusive`` each shared link is kept by one job — one that needs it to connect its
              ranks, else the first of its users in that order; the others compile
              without it wherever their ranks still reach each other (their traffic
              moves to links no other job needs: rails of other NICs, other paths of
              a torus);
``flow``      no views: every job's demands in one flow problem on the shared links
              (:mod:`te_ccl.jobs.flow`), for jobs on at most
              :data:`~te_ccl.jobs.flow.MAX_GPUS` GPUs together;
``mix``       of every file made for each job (above, and the portfolio's templates),
              the set that runs best together (:mod:`te_ccl.jobs.mix`): a link is
              shared per connection, so the jobs' forms decide who gets how much of it.

Every candidate is lowered, verified and replayed together, file by file, as the
runtime runs them (:mod:`te_ccl.jobs.files`); the kept one misses the fewest deadlines
and then has the best objective — makespan (``max``: the last job's finish) or the
weighted sum of finish times (``weighted``). Where the jobs share no link the views
are the whole network and the joint compile is the compile alone.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from te_ccl.compiler import WRITE_RESERVE_S as COMPILE_RESERVE_S
from te_ccl.compiler import SolveParams, check_input, forward_only
from te_ccl.deadline import Budget, TimeLimitReached, keeping, left, until
from te_ccl.errors import RuntimeLimitError, SolverError, SpecError, VerificationError
from te_ccl.jobs.bound import JointBound, joint_bound
from te_ccl.jobs.files import checked_algo, finish_alone, replay_alone, replay_together
from te_ccl.jobs.flow import FlowPlan, compile_flow, plan_flow
from te_ccl.jobs.mix import JobFile, mix, templates
from te_ccl.jobs.spec import OBJECTIVES, Job, JobSet, objective_of, unreachable
from te_ccl.outputs import check_output_file, make_output_dir, write_atomic
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Link, Topology
from te_ccl.topology.routes import fastest_path
from te_ccl.verify.msccl.model import Algo
from te_ccl.verify.schedule_check import check_schedule
from te_ccl.verify.shared_capacity import check_shared_capacity

__all__ = ["JobOutcome", "JointResult", "compile_jobs"]

SHARE_STEPS = 8  # shares are multiples of 1/8 of a link
PRIORITY_SHARE = 0.75  # what the first job keeps of each link it shares under ``priority``
MIN_COMPILE_S = 2.0  # a candidate whose compiles would each get less is skipped
WRITE_RESERVE_S = 1.0  # of the limit, kept for replaying, checking and writing the files kept
VIEWS = ("shares", "priority", "exclusive")  # the candidates compiled on views
LOWER_SLOTS = 4  # per job, the shares of lowering its templates and forms for ``mix``
#                  (before the views: the candidate that orders the jobs on a shared link)
MIX_SLOTS = LOWER_SLOTS + 1  # and one more for the descent

Views = dict[str, dict[tuple[str, str], float]]  # job → link → fraction of its bandwidth


@dataclass(frozen=True)
class JobOutcome:
    """One job's finish times: its joint file among the others' joint files, its file
    compiled alone with the network to itself, and compiled alone among the others'."""

    job: Job
    joint_s: float
    alone_s: float
    together_s: float
    output: str | None = None

    @property
    def deadline_met(self) -> bool | None:
        return None if self.job.deadline_s is None else self.joint_s <= self.job.deadline_s


@dataclass(frozen=True)
class JointResult:
    """What ``teccl compile --jobs`` reports: the kept candidate, each job's outcome, every
    candidate's objective and the independent checks' counts (``as_dict``: ``--json``)."""

    topology: str
    objective: str
    method: str
    outcomes: tuple[JobOutcome, ...]
    shared_links: int                   # links two jobs' alone files both use
    candidates: dict[str, float]        # method → its objective, replayed together
    checks: dict[str, int] = field(default_factory=dict)  # violations per check
    notes: tuple[str, ...] = ()
    bound: JointBound | None = None     # no set of files does better (jobs.bound)

    def value(self, which: str) -> float:
        """The objective over ``joint_s``, ``alone_s`` or ``together_s``."""
        return objective_of(self.objective, [(o.job.weight, getattr(o, which))
                                             for o in self.outcomes])

    @property
    def ratio(self) -> float:
        """Joint over compiled alone and run together (< 1: the joint compile gains)."""
        return self.value("joint_s") / self.value("together_s")

    def as_dict(self) -> dict[str, Any]:
        return {
            "topology": self.topology, "objective": self.objective, "method": self.method,
            "shared_links": self.shared_links,
            "joint": self.value("joint_s"), "alone": self.value("alone_s"),
            "together": self.value("together_s"), "ratio": self.ratio,
            "bound": None if self.bound is None else self.bound.seconds,
            "bound_resource": None if self.bound is None else self.bound.resource,
            "candidates": self.candidates, "checks": self.checks, "notes": list(self.notes),
            "jobs": [{"name": o.job.name, "collective": o.job.collective.kind.value,
                      "ranks": len(o.job.ranks), "size_bytes": o.job.collective.size_bytes,
                      "weight": o.job.weight, "deadline_s": o.job.deadline_s,
                      "deadline_met": o.deadline_met, "joint_s": o.joint_s,
                      "alone_s": o.alone_s, "together_s": o.together_s,
                      "output": o.output} for o in self.outcomes],
        }


@dataclass(frozen=True)
class _Candidate:
    """One way of compiling every job: its files, schedules (on the whole topology),
    the files as read, and each job's finish with the files replayed together."""

    method: str
    xml: dict[str, bytes]
    schedules: dict[str, Schedule]
    algos: dict[str, Algo]
    finish: dict[str, float]


def compile_jobs(jobs: JobSet, output: str | Path | None, *, objective: str = "weighted",
                 backend: str = "auto", time_limit_s: float = 60.0, threads: int = 1,
                 seed: int = 0, epoch: str | float = "fastest", max_horizon: int | None = None,
                 progress: Callable[[str], None] | None = None) -> JointResult:
    """Compile every job jointly (module docstring) and, with ``output`` (a directory,
    created if missing), write ``NAME.xml`` per job, its ranks those of the job's
    communicator. Everything ends within ``time_limit_s`` (and an outer deadline,
    :mod:`te_ccl.deadline`), :data:`WRITE_RESERVE_S` of it kept for replaying, checking
    and writing the files kept. The time is shared out as the compiles run
    (:class:`_Shares`): each job's compile is one share of what is left, ``flow`` one
    per job, ``mix`` :data:`MIX_SLOTS` per job; a share is only ever of the time left, so a stage that runs
    long leaves less to those after it, never more than the limit in all. Which
    candidates can run is known before compiling from the links the jobs' routes have in
    common (:func:`_common_links`): ``alone`` always, the views where two jobs' routes
    share a link between two GPUs, ``flow`` where they share any and
    :func:`~te_ccl.jobs.flow.plan_flow` counts a model it can solve; once the files
    compiled alone are replayed, the time kept for what they show does not apply goes to
    the rest (the views where they share no link between GPUs; where they share none,
    everything but ``alone``, whose jobs are then compiled again in the time left, each
    keeping the file that finishes first with the network to itself). A candidate whose
    share is under :data:`MIN_COMPILE_S` per compile is skipped (and noted); ``alone``
    is never skipped: each job's compile gets at least that much, or what is left.

    Raises what a compile raises for a job compiled alone, :class:`TimeLimitReached`
    (naming the job and what its first file would take) where a job has no file when the
    time ends (a candidate the compile refuses is skipped and noted instead).
    """
    if objective not in OBJECTIVES:
        raise SpecError(f"expected one of {', '.join(OBJECTIVES)}, got {objective!r}",
                        key="--objective")
    SolveParams(time_limit_s=time_limit_s)  # refused as a compile alone refuses it, not as a job's
    with until(time_limit_s):
        return _compile_jobs(jobs, output, objective, progress or (lambda _: None),
                             {"backend": backend, "threads": threads, "seed": seed,
                              "epoch": epoch, "max_horizon": max_horizon})


def _compile_jobs(jobs: JobSet, output: str | Path | None, objective: str,
                  say: Callable[[str], None], solve: dict[str, Any]) -> JointResult:
    """:func:`compile_jobs` under its deadline."""
    for job in jobs.jobs:  # as a compile alone checks it, before any model is built
        with _naming(jobs, job):
            check_input(jobs.topology, job.collective)
        if output is not None and Path(output).is_dir():  # no file half the jobs' way
            check_output_file(_job_path(output, job), key="--output")
    common = _common_links(jobs)
    plan: FlowPlan | str = "the jobs' routes share no link"  # the flow's cut, or why not
    if common:
        try:
            plan = plan_flow(jobs, objective, SolveParams(backend=solve["backend"],
                                                          epoch=solve["epoch"]))
        except SolverError as e:
            plan = str(e)
    viewed = bool(_between_gpus(jobs, common))
    flows = not isinstance(plan, str)
    n = len(jobs.jobs)
    shares = _Shares(n * (1 + len(VIEWS) * viewed + flows + MIX_SLOTS * bool(common)))
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="teccl-jobs-") as tmp:
        compiled: dict[tuple, JobFile] = {}  # (job, its view) → its compile

        def run(method: str, views: Views, floor: bool = False,
                cache: dict[tuple, JobFile] = compiled) -> dict[str, JobFile]:
            say(f"compiling the jobs ({method})")
            with keeping(WRITE_RESERVE_S):
                return _files(jobs, method, views, solve, Path(tmp), cache, shares, floor)

        # every job needs its file alone: replayed in the whole limit, not cut for the others
        whole: Views = {j.name: {} for j in jobs.jobs}
        first = _candidate("alone", run("alone", whole, True), {})
        first_alone = replay_alone(jobs, first.algos)
        shared = replay_together(jobs, first.algos)
        # the routes met, the files do not: the time kept for views, flow and mix is free
        if viewed and not _between_gpus(jobs, shared.shared_links):
            shares.drop(n * len(VIEWS))
        if common and not shared.shared_links:  # only alone applies: it gets the time left
            shares.drop(shares.slots - n)
            if shares.short(n) is None:
                again: dict[tuple, JobFile] = {}
                try:
                    run("alone, again", whole, cache=again)
                except (TimeLimitReached, SolverError, VerificationError,
                        RuntimeLimitError) as e:
                    notes.append(f"alone: compiled once ({e})")
                first = _faster_alone(jobs, compiled, first_alone, again)
                shared = replay_together(jobs, first.algos)
        first = replace(first, finish=shared.finish_s)
        # the mix's files first: the candidates that order the jobs on a shared link
        made: dict[str, dict[str, JobFile]] = {j.name: {} for j in jobs.jobs}
        viewing = _views(jobs, shared.link_bytes, shared.shared_links, objective,
                         first_alone, shared.finish_s)
        if shared.shared_links:
            say("lowering the jobs' templates and forms (mix)")
            away = {name: _view(jobs.topology, lost)
                    for name, lost in viewing.get("exclusive", {}).items() if lost}
            order = _order(jobs, objective, first_alone, shared.finish_s)
            with keeping(WRITE_RESERVE_S):
                # the job the order puts last yields to all: its yielding forms first
                made = templates(jobs, Budget.of(shares.take(LOWER_SLOTS * n)), away=away,
                                 yielding=order[-1:])
        kept = []
        for method, views in viewing.items():
            short = shares.short(n)
            if short is not None:
                notes.append(f"{method}: not compiled ({short})")
                continue
            try:
                files = run(method, views)
                with keeping(WRITE_RESERVE_S):
                    kept.append(_candidate(method, files, replay_together(
                        jobs, {name: f.algo for name, f in files.items()}).finish_s))
            except (SolverError, VerificationError, RuntimeLimitError) as e:
                notes.append(f"{method}: not compiled ({e})")
        if shared.shared_links:
            say("compiling the jobs (flow)")
            try:
                if isinstance(plan, str):
                    raise SolverError(plan)
                short = shares.short(n)
                if short is not None:
                    raise SolverError(short)
                with keeping(WRITE_RESERVE_S):
                    kept.append(_flow(jobs, plan, objective, SolveParams(
                        **solve, time_limit_s=shares.take(n)), notes))
            except (SolverError, VerificationError, RuntimeLimitError) as e:
                notes.append(f"flow: not compiled ({e})")
        try:
            with keeping(WRITE_RESERVE_S):
                alone, alone_s = _best_alone(jobs, compiled, first_alone, made)
            if any(alone.algos[n] is not first.algos[n] for n in alone.algos):
                shared = replay_together(jobs, alone.algos)  # else replayed above
        except TimeLimitReached as e:
            notes.append(f"alone: the files compiled on the whole network ({e})")
            alone, alone_s = first, first_alone
        alone = replace(alone, finish=shared.finish_s)
        kept.insert(0, alone)

        def score(finish: Mapping[str, float]) -> tuple[int, float]:
            return _missed(jobs, finish), _value(jobs, objective, finish)

        if shared.shared_links:
            say("combining the jobs' files (mix)")
            try:
                with keeping(WRITE_RESERVE_S):
                    kept.append(_mixed(jobs, kept, compiled, made, score,
                                       Budget.of(shares.take(n))))
            except TimeLimitReached as e:
                notes.append(f"mix: not compiled ({e})")
    best = min(kept, key=lambda c: score(c.finish))
    written = _write(jobs, best, output)
    outcomes = tuple(JobOutcome(j, best.finish[j.name], alone_s[j.name],
                                alone.finish[j.name], written.get(j.name))
                     for j in jobs.jobs)
    return JointResult(jobs.topology.name, objective, best.method, outcomes,
                       len(shared.shared_links),
                       {c.method: _value(jobs, objective, c.finish) for c in kept},
                       _checks(jobs, best), tuple(notes), joint_bound(jobs, objective))


@dataclass
class _Shares:
    """The time left, shared out over the compiles still to run (``slots``: a job's
    compile is one, ``flow`` one per job, ``mix`` :data:`MIX_SLOTS`): a share is the
    time left (:func:`~te_ccl.deadline.left`) over the slots not yet run, so time a stage
    leaves unused goes to those after it, and time it overruns is theirs to lose."""

    slots: int

    def take(self, n: int = 1) -> float:
        """The seconds of ``n`` slots, which are no longer to run."""
        share = left() * n / max(self.slots, n)
        self.drop(n)
        return share

    def drop(self, n: int) -> None:
        """``n`` slots are not to run (a compile already made, candidates that do not
        apply): their time goes to those still to run."""
        self.slots = max(0, self.slots - n)

    def short(self, n: int) -> str | None:
        """Why a candidate of ``n`` compiles does not run (its ``n`` slots are then
        dropped): each would get less than :data:`MIN_COMPILE_S`; None where it runs."""
        each = left() / max(self.slots, n)
        if each >= MIN_COMPILE_S:
            return None
        self.drop(n)
        return (f"{each:.2g} s of the time left for each of its compiles, less than "
                f"{MIN_COMPILE_S:g} s")


def _common_links(jobs: JobSet) -> set[tuple[str, str]]:
    """Links on the routes of two jobs or more: a job's file sends between its own GPUs,
    each send over the route the replay takes (:func:`~te_ccl.topology.routes.fastest_path`),
    so jobs without one in common share no link whatever their files."""
    topology = jobs.topology
    graph = topology.graph()
    seen: dict[tuple[str, str], int] = {}
    for job in jobs.jobs:
        names = [topology.gpu(r) for r in job.ranks]
        mine = set()
        for u in names:
            for v in names:
                if u != v:
                    path = fastest_path(topology, u, v, graph=graph) or []
                    mine.update(zip(path, path[1:], strict=False))
        for key in mine:
            seen[key] = seen.get(key, 0) + 1
    return {key for key, n in seen.items() if n > 1}


def _between_gpus(jobs: JobSet, links: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The links of ``links`` between two GPUs: the only ones shared out by views (module
    docstring)."""
    gpus = set(jobs.topology.gpus)
    return [k for k in links if k[0] in gpus and k[1] in gpus]


def _value(jobs: JobSet, objective: str, finish: Mapping[str, float]) -> float:
    return objective_of(objective, [(j.weight, finish[j.name]) for j in jobs.jobs])


def _missed(jobs: JobSet, finish: Mapping[str, float]) -> int:
    return sum(1 for j in jobs.jobs if j.deadline_s is not None and finish[j.name] > j.deadline_s)


@contextmanager
def _naming(jobs: JobSet, job: Job) -> Iterator[None]:
    """A job's input refused (:class:`SpecError`) names the jobs file and the job."""
    try:
        yield
    except SpecError as e:
        raise SpecError(f"job {job.name!r}: {e.reason}", file=jobs.file, key=e.key) from None


def _files(jobs: JobSet, method: str, views: Views, solve: dict, tmp: Path,
           compiled: dict[tuple, JobFile], shares: _Shares, floor: bool) -> dict[str, JobFile]:
    """Every job compiled on its view, once per view (``compiled`` holds those done), each
    in its share of the time left (with ``floor``, at least :data:`MIN_COMPILE_S` or an
    even split of what is left among the compiles still to run, whichever is less, past
    the compile's own reserve for writing); files
    verified (by the compile, and again here for the job's communicator). Jobs of one
    collective on the same ranks and view share one compile: their files are the same."""
    import te_ccl

    by_name = {j.name: j for j in jobs.jobs}
    made = {(by_name[name].collective, view): (name, view) for name, view in compiled}
    keys = {j.name: (j.name, tuple(sorted(views[j.name].items()))) for j in jobs.jobs}
    to_make = {(j.collective, keys[j.name][1]) for j in jobs.jobs} - set(made)
    for job in jobs.jobs:
        key = keys[job.name]
        twin = made.setdefault((job.collective, key[1]), key)
        if twin in compiled:
            compiled[key] = compiled[twin]
            shares.drop(1)
            continue
        share = shares.take()
        if floor:  # a compile keeps its writing's reserve from its search (mostly unspent
            # by a small job): a first file's search gets its floor on top of that reserve
            share = max(share, COMPILE_RESERVE_S + min(MIN_COMPILE_S, left() / len(to_make)))
        to_make.discard((job.collective, key[1]))
        path = tmp / f"{method}-{job.name}.xml"
        with _naming(jobs, job), _out_of_time(job):
            if left() <= 0:  # the limit spent, or under the reserve: not the job's input
                raise TimeLimitReached("no time left for its compile")
            # MSCCL XML drives no switch: a job's switches forward (reducing ones too)
            result = te_ccl.compile(forward_only(_view(jobs.topology, views[job.name])),
                                    job.collective, output=path, fmt="xml",
                                    time_limit_s=share, **solve)
        data = path.read_bytes()
        compiled[key] = JobFile(data, replace(result.schedule, topology=jobs.topology),
                                checked_algo(job, data))
    return {j.name: compiled[(j.name, tuple(sorted(views[j.name].items())))]
            for j in jobs.jobs}


def _faster_alone(jobs: JobSet, compiled: dict[tuple, JobFile], first_alone: dict[str, float],
                  again: Mapping[tuple, JobFile]) -> _Candidate:
    """The files compiled on the whole network (in ``compiled``, ``first_alone`` their
    finishes alone), each replaced, there too, by its job's file compiled ``again`` where
    that finishes first alone."""
    for (name, view), f in again.items():
        t = finish_alone(jobs, next(j for j in jobs.jobs if j.name == name), f.algo)
        if t < first_alone[name]:
            compiled[(name, view)], first_alone[name] = f, t
    return _candidate("alone", {j.name: compiled[(j.name, ())] for j in jobs.jobs}, {})


def _candidate(method: str, files: Mapping[str, JobFile], finish: dict[str, float]
               ) -> _Candidate:
    """The candidate of ``files`` (per job), which finish at ``finish`` together."""
    return _Candidate(method, {n: f.xml for n, f in files.items()},
                      {n: f.schedule for n, f in files.items()},
                      {n: f.algo for n, f in files.items()}, finish)


@contextmanager
def _out_of_time(job: Job) -> Iterator[None]:
    """A job's compile out of time without a file names the job (the compile's message
    says what its first file would take)."""
    try:
        yield
    except TimeLimitReached as e:
        raise TimeLimitReached(f"job {job.name!r}: {e}") from None


def _flow(jobs: JobSet, plan: FlowPlan, objective: str, params: SolveParams,
          notes: list[str]) -> _Candidate:
    """The ``flow`` candidate: the files of one joint flow problem, replayed together."""
    files = compile_flow(plan, objective, params)
    notes.extend(files.notes)
    algos = {j.name: checked_algo(j, files.xml[j.name]) for j in jobs.jobs}
    schedules = {n: replace(s, topology=jobs.topology) for n, s in files.schedules.items()}
    return _Candidate("flow", files.xml, schedules, algos,
                      replay_together(jobs, algos).finish_s)


def _mixed(jobs: JobSet, kept: list[_Candidate], compiled: Mapping[tuple, JobFile],
           made: Mapping[str, Mapping[str, JobFile]],
           score: Callable[[Mapping[str, float]], tuple[int, float]],
           budget: Budget) -> _Candidate:
    """The ``mix`` candidate (:mod:`te_ccl.jobs.mix`): from the best candidate so far,
    each job's file chosen among every file made for it."""
    pool: dict[str, dict[bytes, JobFile]] = {j.name: {} for j in jobs.jobs}
    for name, files in made.items():  # first: the forms, which order the jobs
        for f in files.values():
            pool[name].setdefault(f.xml, f)
    for (name, _), f in compiled.items():
        pool[name].setdefault(f.xml, f)
    for c in kept:
        for name in c.xml:
            pool[name].setdefault(c.xml[name], JobFile(c.xml[name], c.schedules[name],
                                                       c.algos[name]))
    start = min(kept, key=lambda c: score(c.finish))
    chosen, finish = mix(jobs, {n: list(p.values()) for n, p in pool.items()},
                         {n: pool[n][start.xml[n]] for n in pool}, start.finish, score,
                         budget)
    return _Candidate("mix", {n: f.xml for n, f in chosen.items()},
                      {n: f.schedule for n, f in chosen.items()},
                      {n: f.algo for n, f in chosen.items()}, finish)


def _best_alone(jobs: JobSet, compiled: Mapping[tuple, JobFile], whole: Mapping[str, float],
                made: Mapping[str, Mapping[str, JobFile]]
                ) -> tuple[_Candidate, dict[str, float]]:
    """The baseline: each job's file that finishes first with the network to itself,
    of every file made for it (compiled on the whole network or a view, or a template
    in ``made``: each is a file a compile alone could write), and those finishes.
    Taking each job's best keeps a compile that landed better by chance on one view, or
    a template faster alone, from counting as a gain of the joint compile. ``whole``: the finishes, already replayed, of the files compiled on
    the whole network."""
    by_name = {j.name: j for j in jobs.jobs}
    best: dict[str, tuple[float, JobFile]] = {}
    files = [(name, whole[name] if not view else None, c) for (name, view), c in compiled.items()]
    files += [(name, None, c) for name, cs in made.items() for c in cs.values()]
    for name, known, c in files:
        t = known if known is not None else finish_alone(jobs, by_name[name], c.algo)
        if name not in best or t < best[name][0]:
            best[name] = (t, c)
    mine = {n: c for n, (_, c) in best.items()}
    return (_Candidate("alone", {n: c.xml for n, c in mine.items()},
                       {n: c.schedule for n, c in mine.items()},
                       {n: c.algo for n, c in mine.items()}, {}),
            {n: t for n, (t, _) in best.items()})


def _view(topology: Topology, share: Mapping[tuple[str, str], float]) -> Topology:
    """``topology`` with each link in ``share`` that fraction as fast (share 0: gone)."""
    if not share:
        return topology
    links = tuple(Link(k.src, k.dst, k.bandwidth_Bps * share.get(k.key, 1.0), k.latency_s)
                  for k in topology.links if share.get(k.key, 1.0) > 0)
    return Topology(topology.name, topology.nodes, links, topology.source,
                    topology.description, topology.meta)


def _views(jobs: JobSet, link_bytes: Mapping[str, Mapping[tuple[str, str], float]],
           shared: list[tuple[str, str]], objective: str,
           alone: Mapping[str, float], together: Mapping[str, float]) -> dict[str, Views]:
    """The ``shares``, ``priority`` and ``exclusive`` views (module docstring)."""
    weight = {j.name: (j.weight if objective == "weighted" else 1.0) for j in jobs.jobs}

    def split(names: list[str], key: tuple[str, str], total: float) -> dict[str, float]:
        demand = {n: link_bytes[n].get(key, 0.0) * weight[n] for n in names}
        whole = sum(demand.values())
        return {n: _quantized(total * d / whole) for n, d in demand.items() if d > 0}

    names = [j.name for j in jobs.jobs]
    shared = _between_gpus(jobs, shared)
    if not shared:
        return {}
    order = _order(jobs, objective, alone, together)
    first = order[0]
    shares: Views = {n: {} for n in names}
    priority: Views = {n: {} for n in names}
    for key in shared:
        for n, s in split(names, key, 1.0).items():
            shares[n][key] = s
        users = [n for n in names if link_bytes[n].get(key, 0.0) > 0]
        rest = [n for n in users if n != first]
        if first in users:
            priority[first][key] = PRIORITY_SHARE
        for n, s in split(rest, key, 1.0 - PRIORITY_SHARE if first in users else 1.0).items():
            priority[n][key] = s
    return dict(zip(VIEWS, (shares, priority, _exclusive(jobs, link_bytes, shared, order)),
                    strict=True))


def _order(jobs: JobSet, objective: str, alone: Mapping[str, float],
           together: Mapping[str, float]) -> list[str]:
    """The jobs, the one to go first on the links they share first: under ``weighted``
    by Smith's rule (weight / time alone, the greatest first), under ``max`` the job
    that finishes last together first."""
    if objective == "max":
        return [j.name for j in sorted(jobs.jobs, key=lambda j: -together[j.name])]
    return [j.name for j in sorted(jobs.jobs, key=lambda j: -j.weight / alone[j.name])]


def _exclusive(jobs: JobSet, link_bytes: Mapping[str, Mapping[tuple[str, str], float]],
               shared: list[tuple[str, str]], order: list[str]) -> Views:
    """Each shared link kept by one of its users: the first in ``order`` whose ranks no
    longer reach each other without it, else the first in ``order``; the others lose it
    wherever their ranks still reach each other without it (so their traffic moves to
    links no one else needs, or shares the link still)."""
    by_name = {j.name: j for j in jobs.jobs}
    views: Views = {n: {} for n in order}

    def loses(name: str, key: tuple[str, str]) -> bool:
        trial = views[name] | {key: 0.0}
        return unreachable(_view(jobs.topology, trial), by_name[name].ranks) is None

    for key in shared:
        users = [n for n in order if link_bytes[n].get(key, 0.0) > 0]
        keeper = next((n for n in users if not loses(n, key)), users[0])
        for n in users:
            if n != keeper and loses(n, key):
                views[n] = views[n] | {key: 0.0}
    return views


def _quantized(share: float) -> float:
    """``share`` down to a multiple of 1/:data:`SHARE_STEPS`, at least one step: views of
    a few distinct speeds keep the solvers' epochs coarse."""
    return max(1, int(share * SHARE_STEPS)) / SHARE_STEPS


def _checks(jobs: JobSet, best: _Candidate) -> dict[str, int]:
    """Violations of the kept schedules: each job's own (the schedule checker on the
    whole topology) and across jobs (shared capacity). ``alone`` schedules were made for
    the whole network each, so where links are shared they may exceed them together;
    that is what the other candidates plan for."""
    own = sum(len(check_schedule(best.schedules[j.name])) for j in jobs.jobs)
    return {"schedule": own, "shared_capacity": len(check_shared_capacity(best.schedules))}


def _write(jobs: JobSet, best: _Candidate, output: str | Path | None) -> dict[str, str]:
    if output is None:
        return {}
    make_output_dir(output, key="--output")
    written = {}
    for job in jobs.jobs:
        path = _job_path(output, job)
        write_atomic(path, best.xml[job.name])
        written[job.name] = str(path)
    return written


def _job_path(output: str | Path, job: Job) -> Path:
    return Path(output) / f"{job.name}.xml"
