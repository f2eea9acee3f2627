"""What ``--backend auto`` tries, in one place: the portfolio.

For each chunking (the collective's own; with ``--chunks auto`` also those of
:func:`te_ccl.compiler.chunking.chunk_candidates`, most promising first), the candidates
(each from the registry, :mod:`te_ccl.compiler.candidates`) are:

1. the **scale** backend, where one of its methods fits
   (:func:`te_ccl.backends.scale.scale_method`). It runs alone where one flow model is
   out of reach (beyond :data:`SCALE_MIN_GPUS` GPUs) or lands far from its bound
   (AlltoAll: 1.1–1.7× on meshes and tori even at 16 GPUs), else first, in
   ``SHARES.scale`` of the time (``SHARES.trees`` for packed trees): its sub-chunks
   pipeline, which whole chunks cannot;
2. the **flow model** (:func:`te_ccl.compiler.strategy.run_strategy`, its solver picked by the
   model's size), in the time left but ``SHARES.templates`` of it; it proves
   optimality where sub-chunks do not pay;
3. the **templates** (ring, tree, direct, hierarchical, packed, and on FRED wafers whose
   switches reduce and copy the in-switch schedule; those of :data:`EARLY_TEMPLATES`
   before the flow model), up to :data:`TEMPLATE_MAX_GPUS`
   GPUs (beyond, :data:`LARGE_TEMPLATES` early for a rooted collective,
   :data:`LARGE_ALLREDUCE` before the scale backend for a mesh's AllReduce, and all of them
   where it has at most :data:`CHEAP_DELIVERIES` deliveries; for a Broadcast or Reduce
   before the scale backend), and at any size when
   nothing else produced a schedule: ``auto`` never fails
   where a template succeeds. Once there is a schedule, none starts after the time limit.
   Where the flow model is large by counting (:data:`FLOW_QUICK_PAIRS`), the templates
   are cheap (:data:`CHEAP_DELIVERIES`) and the best so far is more than :data:`NEAR_GAP`
   from the bound, all the templates are raced before the flow model: a short limit is
   not spent on the model while a template is near the bound. So too for a rooted
   collective whose whole chunks cannot come within :data:`NEAR_GAP` of the bound (its
   chunking's arithmetic bound, :func:`te_ccl.compiler.chunking.chunking_bounds`): the
   templates cut their own pieces, the flow model cannot. The flow model is not run
   where the best so far is within :data:`BOUND_GAP` of that arithmetic bound.

A candidate that relays more through a GPU than its buffer limit holds
(:func:`te_ccl.model.relays.relay_overflow`) is not kept: the templates ignore the limits.

The time limit is the caller's (``params.time_limit_s``) or the compile's deadline
(:mod:`te_ccl.deadline`), whichever ends first; judging a candidate counts, and a deadline
reached while judging ends the race with the best so far.

Bounds prune: a chunking whose arithmetic bound cannot beat the best time by
:data:`SKIP_GAIN` is not solved; no solver runs once a schedule is within
:data:`BOUND_GAP` of the collective's lower bound, nor, beyond :data:`SCALE_MIN_GPUS` GPUs
(where timing one costs seconds), a template; a template whose cheap lower estimate
(``Judge.at_least``) cannot beat the best is not timed. Up to :data:`SCALE_MIN_GPUS` GPUs
the templates that can beat the best are timed unless it is at the bound: a template may
be closer still (mesh 4×4 AllGather 1 GB: the bidirectional rings replay at 1.0008× the
bound, the scale schedule at 1.003×). Every schedule is judged once by
the :class:`Judge` the caller passes (the compile's is the replay of the lowered MSCCL
XML), and the winner carries a note listing every trial.

The runtime's limits enter the candidates up front: the scale backend cuts no more
sub-chunks than the runtime loads (:mod:`te_ccl.backends.scale.msccl_budget`).

A compile makes its first file before the race from the registry's cheap candidates
(:func:`te_ccl.compiler.candidates.first_file`); the race takes such schedules, and the
plan's of :func:`te_ccl.compiler.candidates.known`, as ``known`` ones: judged once, by the
same judge, before any chunking's race (they are built already, so judging them is all
they cost, and a race cut short by the deadline still weighs them), then entered first as
trials of their chunking's race and not solved again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cache

import te_ccl.backends.scale as scale_backend
from te_ccl.backends.base import Progress, SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.baselines import BaselineError
from te_ccl.baselines.comb_allreduce import combs_apply
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler.candidates import (
    FLOW,
    TEMPLATE_MAX_DELIVERIES,
    Candidate,
    Known,
    backend,
    deliveries,
    scale,
    templates,
)
from te_ccl.compiler.chunking import chunk_candidates, chunking_bounds, latency_first
from te_ccl.deadline import SHARES, Budget, TimeLimitReached, keeping, left, until
from te_ccl.errors import SolverError, SpecError
from te_ccl.model.relays import relay_overflow
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["Judge", "PREDICTED", "Trial", "asked_chunking", "choose", "Known",
           "SCALE_MIN_GPUS", "TEMPLATE_MAX_GPUS", "TIE", "close_to_bound"]

SCALE_MIN_GPUS = 16  # beyond, one flow model is out of reach (mesh 8×8 AllGather: ~460k
#                      transfer variables); up to it, it proves optimality in seconds
MIN_FLOW_S = 1.0  # the flow model gets at least this after the scale backend
TEMPLATE_MAX_GPUS = 64  # beyond, building every template costs more than it can win
BOUND_GAP = 0.005  # within this of the lower bound, another solver cannot win enough to run
MIN_SHARE_S = 0.2  # below this a chunking is not worth starting
SKIP_GAIN = 0.02  # a chunking must be able to beat the best so far by this to be solved
TIE = 1e-9  # relative: a later candidate must beat the best by more, or tie it with fewer
#             transfers, to replace it
RESERVE_MARGIN = 2.0  # a template is built ending this × the time writing the best takes
#                      before the deadline: that estimate's pace was timed on another file
EARLY_TEMPLATES = ("comb-allreduce", "packed", "pipeline", "in-switch")  # raced before the
# flow model: built in a second or two, their pipelined trees land near the bound where the
# flow model's whole chunks and the scale backend's ReduceScatter + AllGather do not (mesh4x4
# AllReduce 1 GB: 1.07× against 1.5×); where switches reduce, the in-switch schedule reaches
# it, before the finest trees can take the search's time to build (fred-d AllReduce 20 MB)
NEAR_GAP = 0.03  # a best farther than this from the bound races the cheap templates before
#                  a costly flow model, which would take the rest of a short limit
FLOW_QUICK_PAIRS = 512  # chunk-link pairs up to which the flow model is small (ring8 AllGather:
#                         128, dgx1 AllReduce: 256); beyond (dgx2x2 AllGather on 16 ranks:
#                         1280), a short limit's share may end before it has a schedule
CHEAP_DELIVERIES = 6_000  # (chunk, destination) pairs up to which the templates go first:
#                           building and lowering one grows with them, and beyond this the
#                           templates would take the flow model's share of a short limit
LARGE_TEMPLATES = ("pipeline", "pipeline-fine", "pipeline-torus", "switch-trees")  # raced
# for a rooted collective beyond TEMPLATE_MAX_GPUS: built in seconds at any size, where the
# scale backend's file is far from the bound (mesh16x16 Broadcast 64 MB: 31×); the torus's
# finer pieces where there is time to judge their file; the switch trees only behind one
# switch (GB200 NVL72)
LARGE_ALLREDUCE = ("comb-allreduce",)  # raced for an AllReduce beyond TEMPLATE_MAX_GPUS whose
# RS + AG is far above its bound, before the scale backend's RS + AG:
# a mesh's combs take every link at the bound's rate, no LP to solve


def _unknown(schedule: Schedule) -> float | None:
    return None


def _free(schedule: Schedule) -> float:
    return 0.0


@dataclass(frozen=True)
class Judge:
    """How ``auto`` compares candidate schedules: ``time(schedule)`` in seconds, named
    ``what`` in the notes. The default is the epoch model's own prediction; the pipeline
    passes the replay of the lowered MSCCL XML, the yardstick the compile reports and the
    benchmark uses (this module does not import it: the solver stays independent of the
    checks). A candidate that cannot be lowered takes ``inf`` and loses to any other.

    ``at_most`` / ``at_least``: cheap bounds of ``time(schedule)`` when known (else None),
    which spare timing a schedule whose place in the comparison they already settle.
    ``write_s``: the seconds writing ``schedule`` out would take (lowering, verifying,
    replaying the file): the search keeps that much of its time for the best so far.
    """

    what: str
    time: Callable[[Schedule], float]
    at_most: Callable[[Schedule], float | None] = _unknown
    at_least: Callable[[Schedule], float | None] = _unknown
    write_s: Callable[[Schedule], float] = _free

    def __call__(self, schedule: Schedule) -> float:
        return self.time(schedule)


PREDICTED = Judge("epoch model", *(lambda s: s.finish_time_s,) * 3)


@dataclass(frozen=True)
class Trial:
    """One candidate of the portfolio: what it was and how it fared (``time_s`` None: it
    produced no schedule or was not timed, ``outcome`` says why)."""

    name: str
    time_s: float | None = None
    outcome: str = ""

    def __str__(self) -> str:
        if self.time_s is None:
            return f"{self.name}: {self.outcome}"
        shown = f"{self.time_s:.4g} s" if self.time_s < math.inf else "does not lower"
        return f"{self.name}: {shown}"


Verdict = float | SolverError  # a candidate's judged time, or why it has none
Judged = tuple[tuple[str, Schedule, Verdict], ...]  # known candidates, each judged once


def _verdict(judge: Judge, schedule: Schedule) -> Verdict:
    """``schedule``'s time by ``judge``, or why it is not kept: it relays more through a
    GPU than its buffer holds (the templates do not plan around buffer limits), or the
    deadline came while judging it (judging is part of the search)."""
    over = relay_overflow(schedule)
    if over is not None:
        return SolverError(f"breaks a buffer limit: {over}")
    try:
        return judge(schedule)
    except TimeLimitReached as e:
        return e


@dataclass
class _Race:
    """The candidates of one chunking so far: every trial, the best (its index in
    ``trials``), the solvers' time and the last solver error."""

    judge: Judge
    trials: list[Trial] = field(default_factory=list)
    best: tuple[Schedule, int] | None = None
    spent_s: float = 0.0
    error: SolverError | None = None
    cut: TimeLimitReached | None = None  # the first deadline a candidate met: where time ran out

    @property
    def best_s(self) -> float | None:
        return self.trials[self.best[1]].time_s if self.best is not None else None

    @property
    def reserve_s(self) -> float:
        """The time kept from the search to write the best so far."""
        return self.judge.write_s(self.best[0]) if self.best is not None else 0.0

    def enter(self, name: str, schedule: Schedule, verdict: Verdict | None = None) -> None:
        """Take ``schedule`` as a trial, judged now unless its ``verdict`` is given."""
        t = _verdict(self.judge, schedule) if verdict is None else verdict
        if isinstance(t, TimeLimitReached):  # judging is part of the search: keep the best
            self.fail(name, t)
            return
        if isinstance(t, SolverError):  # a buffer limit: a solver's reason, if any, says more
            self.trials.append(Trial(name, outcome=str(t)))
            self.error = self.error or SolverError(f"{name}: {t}")
            return
        self.trials.append(Trial(name, t))
        if self.best is None or t < self.best_s * (1 - TIE) or (
                t <= self.best_s * (1 + TIE)
                and len(schedule.transfers) < len(self.best[0].transfers)):
            # a tie goes to the smaller schedule: its file is written and loaded faster
            # (fc8 AllGather 1 MB: the direct template's 56 transfers, not 5208 sub-chunks)
            self.best = (schedule, len(self.trials) - 1)

    def fail(self, name: str, error: SolverError) -> None:
        self.trials.append(Trial(name, outcome=str(error)))
        self.error = error
        if isinstance(error, TimeLimitReached):
            self.cut = self.cut or error

    def skip(self, name: str, why: str) -> None:
        self.trials.append(Trial(name, outcome=f"skipped ({why})"))

    def winner(self) -> Schedule:
        """The best schedule, its first note naming it and every other trial."""
        if self.best is None:
            raise self.cut or self.error or SolverError("no strategy applies to this collective")
        schedule, i = self.best
        note = f"auto: kept the {self.trials[i].name} ({self.best_s:.4g} s, {self.judge.what})"
        others = [str(x) for j, x in enumerate(self.trials) if j != i]
        if others:
            note += f"; also tried {'; '.join(others)}"
        return schedule.with_info(notes=(note,) + schedule.info.notes,
                                  solver_time_s=round(self.spent_s, 4))


def choose(topology: Topology, collective: Collective, params: SolveParams, judge: Judge,
           chunk_choices: tuple[int, ...] = (), progress: Progress | None = None,
           known: Known = ()) -> Schedule:
    """The fastest schedule by ``judge`` among the portfolio's candidates (see the module
    docstring) for each chunking of ``chunk_choices`` (none: the collective's own), with
    a note of what was tried. ``known``: candidates built already (a first file's, the
    plan's of :func:`te_ccl.compiler.candidates.known`), judged once before any race, its
    time counted in the limit, then raced with the others of their chunking.

    Raises
    ------
    SolverError
        no candidate produced a schedule (the last solver's reason).
    """
    judged: Judged = ()
    if known and strategy_for(params) == "portfolio":  # a single backend races nothing
        budget = Budget.of(params.time_limit_s)
        judged = tuple((name, s, _verdict(judge, s)) for name, s in known)
        rest = params.time_limit_s - budget.elapsed()
        params = replace(params, time_limit_s=max(MIN_SHARE_S, rest))
    if chunk_choices:
        return _best_chunking(topology, collective, params, chunk_choices, progress, judge,
                              judged)
    return _race(topology, collective, params, judge, progress, judged)


def asked_chunking(schedule: Schedule) -> Collective:
    """The collective ``schedule`` was asked for, before the scale backend cut its
    chunks into sub-chunks."""
    c, k = schedule.collective, schedule.info.subchunks
    return replace(c, chunks_per_rank=c.chunks_per_rank // k)


def _known_here(known: Judged, collective: Collective) -> Judged:
    """The ``known`` schedules of this chunking (whatever their sub-chunks)."""
    return tuple(k for k in known if asked_chunking(k[1]) == collective)


def _race(topology: Topology, collective: Collective, params: SolveParams, judge: Judge,
          progress: Progress | None, known: Judged = ()) -> Schedule:
    """The portfolio on one chunking (the given backend alone when it is not ``auto``, or
    when a ``max_horizon`` bounds the flow model). A ``known`` scale schedule of the
    sub-chunking the scale backend would cut stands for its run."""
    if strategy_for(params) != "portfolio":
        return backend(params.backend).build(topology, collective, params, progress)
    race = _Race(judge)
    with _first_cut(race):
        _portfolio(race, topology, collective, params, progress, _known_here(known, collective))
        return race.winner()


def _portfolio(race: _Race, topology: Topology, collective: Collective, params: SolveParams,
               progress: Progress | None, known: Judged) -> None:
    """Race the portfolio's candidates of one chunking into ``race`` (the module
    docstring says in which order and which are pruned), ``known`` ones first."""
    budget = Budget.of(params.time_limit_s)
    for name, schedule, verdict in known:
        race.enter(name, schedule, verdict)
    method, flow_skip = _scale_and_flow(topology, collective)
    bound = cache(lambda: lower_bound(topology, collective).seconds)  # once, if at all
    own = collective.chunks_per_rank  # the flow model's chunks, whole
    whole = cache(lambda: chunking_bounds(topology, collective, [own])[own])
    templates = _templates_raced(topology, collective)
    early = EARLY_TEMPLATES if topology.ngpus <= TEMPLATE_MAX_GPUS else LARGE_TEMPLATES \
        if collective.root is not None else LARGE_ALLREDUCE \
        if combs_apply(topology, collective) else ()

    # a Broadcast or Reduce beyond TEMPLATE_MAX_GPUS: the scale backend's file is far from
    # the bound, so the finer trees get the time its search takes
    streamed = early == LARGE_TEMPLATES \
        and collective.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
    combed = early == LARGE_ALLREDUCE  # so large that packed's LP is not raced
    trees_first = streamed or ((templates or combed) and _composition_short(topology, collective))
    if trees_first:  # then the finer trees, whose larger file is lowered if time is left
        _race_early(race, topology, collective, params, budget, bound, early)
        if not combed:
            _race_early(race, topology, collective, params, budget, bound, ("packed-fine",))
    if method is not None and not _scale_known(topology, collective, params,
                                               (s for _, s, _ in known)):
        first = SHARES.trees if method == "trees" else SHARES.scale
        share = params.time_limit_s * (first if flow_skip is None else 1.0)
        _run(race, scale(), topology, collective, replace(params, time_limit_s=share),
             progress)
    if not trees_first:
        _race_early(race, topology, collective, params, budget, bound, early)
    flow_skip = flow_skip or close_to_bound(race, bound) or _chunks_short(race, whole)
    templates_first = flow_skip is None and templates and (
        flow_costly(topology, collective) or (collective.root is not None and
                                              whole() > bound() * (1 + NEAR_GAP))) \
        and deliveries(collective) <= CHEAP_DELIVERIES and \
        close_to_bound(race, bound, NEAR_GAP) is None
    if templates_first:  # judged before the flow model, which keeps its share of the rest
        _templates(race, topology, collective, params, budget)
        flow_skip = close_to_bound(race, bound) or _chunks_short(race, whole)
    if flow_skip is not None:
        race.skip(FLOW, flow_skip)
    else:
        share = (budget.left() - race.reserve_s) * (1 - SHARES.templates if templates else 1)
        if race.best is not None and share < MIN_FLOW_S:
            race.skip(FLOW, f"no time left (writing the best takes ~{race.reserve_s:.3g} s)")
        else:
            _run(race, backend("auto"), topology, collective,
                 replace(params, time_limit_s=max(MIN_FLOW_S, share)), progress)
    close = close_to_bound(race, bound, BOUND_GAP if topology.ngpus > SCALE_MIN_GPUS else TIE)
    if close is not None:
        race.skip("templates", close)
    elif templates or race.best is None:
        _templates(race, topology, collective, params, budget)


def _race_early(race: _Race, topology: Topology, collective: Collective, params: SolveParams,
                budget: Budget, bound: Callable[[], float], only: tuple[str, ...]) -> None:
    """Race the templates ``only`` ahead of the others, in the budget left (pipeline-fine
    cuts as many pieces as time allows): none beyond :data:`TEMPLATE_MAX_DELIVERIES`
    (chunk, destination) pairs, nor once the best is close to the ``bound``."""
    if only and deliveries(collective) <= TEMPLATE_MAX_DELIVERIES and \
            close_to_bound(race, bound) is None:
        with until(budget.left()):
            _templates(race, topology, collective, params, budget, only=only)


def _templates_raced(topology: Topology, collective: Collective) -> bool:
    """Are all the templates raced: up to :data:`TEMPLATE_MAX_GPUS` GPUs, or beyond for a
    rooted collective of at most :data:`CHEAP_DELIVERIES` (chunk, destination) pairs,
    whose templates are few transfers but for the pipelined and packed trees, which cut
    their own pieces: there a tree pipelines what the direct template sends through one
    switch port at a time."""
    return topology.ngpus <= TEMPLATE_MAX_GPUS or (
        collective.root is not None and deliveries(collective) <= CHEAP_DELIVERIES)


def _chunks_short(race: _Race, whole: Callable[[], float]) -> str | None:
    """Why the flow model cannot win enough to run (the best so far is within
    :data:`BOUND_GAP` of its chunking's arithmetic bound, ``whole()``, or below: it moves
    whole chunks), else None."""
    if race.best is None:
        return None
    floor = whole()
    if race.best_s > floor * (1 + BOUND_GAP):
        return None
    return (f"its chunks cannot finish before {floor:.4g} s, and the "
            f"{race.trials[race.best[1]].name} is within {BOUND_GAP:.1%} of that")


def flow_costly(topology: Topology, collective: Collective) -> bool:
    """Is the flow model large by counting: more than :data:`FLOW_QUICK_PAIRS` chunk-link
    pairs, each a transfer variable per epoch?"""
    return collective.commodities * len(topology.links) > FLOW_QUICK_PAIRS


def _composition_short(topology: Topology, collective: Collective) -> bool:
    """Is ``collective`` an AllReduce whose reduce-scatter + all-gather bound (what the scale
    backend composes) is :data:`SKIP_GAIN` above its own bound? Then the packed trees,
    which reduce and broadcast along spanning trees, are raced before the scale backend,
    while there is time to lower and replay their file (mesh 8×8 AllReduce 64 MB: the
    composition is 1.75× the bound; raced after the scale search, the trees' file was not
    lowered in time and lost by the judge's margin)."""
    if collective.kind is not CollectiveKind.ALLREDUCE:
        return False
    rs, ag = (lower_bound(topology, replace(collective, kind=k)).seconds
              for k in (CollectiveKind.REDUCESCATTER, CollectiveKind.ALLGATHER))
    return rs + ag > lower_bound(topology, collective).seconds * (1 + SKIP_GAIN)


def _scale_known(topology: Topology, collective: Collective, params: SolveParams,
                 known: Iterable[Schedule]) -> bool:
    """Is a ``known`` schedule the one the scale backend would solve (its sub-chunking)?"""
    scaled = [s.collective for s in known if s.info.backend == "scale"]
    return bool(scaled) and \
        scale_backend.scale_plan(topology, collective, params.max_subchunks)[0] in scaled


def _scale_and_flow(topology: Topology, collective: Collective) -> tuple[str | None, str | None]:
    """The scale method that fits (None if none does) and why the flow model is not run
    (None: it runs)."""
    method = scale_backend.scale_method(topology, collective)
    if method == "flow-alltoall":
        return method, ("AlltoAll routed by the concurrent-flow LP lands within ~1% of its "
                        "bound at any size, where the time-expanded model does not")
    if method is not None and topology.ngpus > SCALE_MIN_GPUS:
        return method, f"{topology.ngpus} GPUs > {SCALE_MIN_GPUS}: one model would be too large"
    return method, None


def close_to_bound(race: _Race, lower: Callable[[], float], gap: float = BOUND_GAP) -> str | None:
    """Why no further solver or template can win enough to run (the best is within
    ``gap`` of ``lower()``, the lower bound), else None."""
    if race.best is None:
        return None
    bound = lower()
    if bound > 0 and race.best_s <= bound * (1 + gap):
        within = f"within {gap:.1%} of" if gap >= 0.001 else "at"
        return f"{race.trials[race.best[1]].name} is {within} the lower bound {bound:.4g} s"
    return None


@contextmanager
def _first_cut(race: _Race) -> Iterator[None]:
    """A deadline reached in the race after a candidate met one (its build, judging or
    file, caught so the race keeps its best) is told as that first one: the time ran
    out there, not in the check that raised last."""
    try:
        yield
    except TimeLimitReached as e:
        raise (race.cut or e) from None


def _run(race: _Race, candidate: Candidate, topology: Topology, collective: Collective,
         params: SolveParams, progress: Progress | None) -> None:
    name = candidate.trial(topology, collective)
    if progress:
        progress(f"auto: trying the {name}")
    try:
        schedule = candidate.build(topology, collective, params, progress)
    except SolverError as e:
        race.fail(name, e)
        return
    except SpecError as e:  # a scale method that does not take this input after all
        if candidate.kind != "scale":
            raise  # the input is wrong for the flow model: the user's to fix
        race.fail(name, SolverError(str(e)))
        return
    race.spent_s += schedule.info.solver_time_s
    race.enter(name, schedule)


def _templates(race: _Race, topology: Topology, collective: Collective, params: SolveParams,
               budget: Budget, only: tuple[str, ...] | None = None) -> None:
    """Race the templates (the in-switch schedule where the fabric has one), timing only
    those that can beat the best so far (by ``at_least``); none beyond
    :data:`TEMPLATE_MAX_DELIVERIES` (chunk, destination) pairs, none past the compile's
    deadline (less the time writing the best takes), and once there is a best, none once
    the race's ``budget`` is spent (the flow model left them ``SHARES.templates``
    of it) beyond :data:`SCALE_MIN_GPUS` GPUs: up to it a template is built and
    timed in well under a second, and on a loaded machine judging the scale schedule
    alone can use up the share (mesh 4×4 AllGather 1 GB at a 10 s limit).

    The templates are built in the Schedule IR with the same α semantics, so their times
    compare directly with the solvers'. ``only``: those templates alone, as
    :data:`EARLY_TEMPLATES` are raced before the flow model.
    """
    if deliveries(collective) > TEMPLATE_MAX_DELIVERIES:
        race.skip("templates", f"over {TEMPLATE_MAX_DELIVERIES} (chunk, destination) pairs")
        return
    # a best that does not lower (judged inf) bounds nothing, whatever its prediction
    lowers = race.best is not None and race.best_s < math.inf
    at_most = race.judge.at_most(race.best[0]) if lowers else None
    entered = {t.name for t in race.trials}  # a known template is not built again
    for template in templates(topology, collective, only):
        name = template.trial(topology, collective)
        if name in entered:
            continue
        late = topology.ngpus > SCALE_MIN_GPUS and budget.spent
        if left() <= race.reserve_s or (race.best is not None and late):
            race.skip(name, "no time left")
            continue
        try:
            # a template of 1024 GPUs builds for seconds: the best's file keeps its time
            with keeping(race.reserve_s * RESERVE_MARGIN):
                schedule = template.build(topology, collective, params)
        except BaselineError:
            continue
        except TimeLimitReached as e:  # building is part of the search: keep the best so far
            race.fail(name, e)
            return
        if schedule is None:
            continue
        limit = min((x for x in (at_most, race.best_s) if x is not None), default=None)
        floor = race.judge.at_least(schedule)
        if limit is not None and floor is not None and floor >= limit * (1 - TIE):
            race.skip(name, f"cannot finish before {limit:.4g} s")
            continue
        race.enter(name, schedule)


def _trial_order(topology: Topology, collective: Collective,
                 choices: tuple[int, ...]) -> list[tuple[Collective, float]]:
    """The chunkings to try, each with the time it cannot beat, in trial order: the
    collective's own first (the templates' chunking, so ``auto`` is never slower than a
    template), then the most promising by their arithmetic bound (within 1 %: fewer
    chunks first), where latency dominates the fewest chunks near the best bound before
    them (:func:`te_ccl.compiler.chunking.latency_first`).

    The time ``k`` cannot beat is the bound at ``2k``: the ring-bidir and tree templates
    halve their chunks.
    """
    ks = chunk_candidates(topology, collective, choices)
    own = collective.chunks_per_rank
    fits = [k for k in ks if collective.size_bytes % replace(collective, chunks_per_rank=k)
            .nchunks == 0 and k != own]
    bounds = chunking_bounds(topology, collective, sorted({own, *fits} | {2 * own}
                                                          | {2 * k for k in fits}))
    low = min(bounds.values()) or 1.0
    near = latency_first(topology, collective, {k: bounds[k] for k in fits})
    fits.sort(key=lambda k: (k != near, round(bounds[k] / low, 2), k))
    return [(replace(collective, chunks_per_rank=k), bounds[2 * k]) for k in [own, *fits]]


def _best_chunking(topology: Topology, collective: Collective, params: SolveParams,
                   choices: tuple[int, ...], progress: Progress | None,
                   judge: Judge, known: Judged = ()) -> Schedule:
    """Race the chunkings of :func:`_trial_order` (those that divide the size, and the
    collective's own); keep the fastest by ``judge`` (ties: the earlier tried), or a
    ``known`` one, judged already and the best so far from the start, whatever its
    chunking and whether its chunking's race runs.

    Each may take half the time still left (the last one all of it): the most promising,
    tried first, get the most (dgx1 AllGather 1 GB: the rounds solve of 20 chunks per
    rank needs ~4 s of a 10 s limit to land within 1 %, which an equal sixth did not
    give it), and what a quick solve leaves over goes to the later ones. A chunking whose
    arithmetic bound is not :data:`SKIP_GAIN` below the best time so far is skipped: it
    cannot win by enough to pay for its solve.
    """
    candidates = _trial_order(topology, collective, tuple(sorted(set(choices))))
    budget = Budget.of(params.time_limit_s)
    best = _best_known(judge, known)
    tried: list[str] = []
    spent = 0.0
    last_error: SolverError | None = None
    for i, (c, bound) in enumerate(candidates):
        k = c.chunks_per_rank
        rest = budget.left() - (judge.write_s(best[0]) if best else 0.0)
        if best is not None and (bound >= best[1] * (1 - SKIP_GAIN) or rest < MIN_SHARE_S):
            why = f"bound {bound:.4g} s" if rest >= MIN_SHARE_S else "no time left"
            tried.append(f"{k}: skipped ({why})")
            continue
        if progress:
            progress(f"trying {k} chunk(s) per rank")
        share = replace(params, time_limit_s=max(MIN_SHARE_S, rest / min(2, len(candidates) - i)))
        try:
            s = _race(topology, c, share, judge, progress, known)
        except SolverError as e:
            tried.append(f"{k}: {e}")
            last_error = e
            continue
        spent += s.info.solver_time_s
        t = judge(s)
        tried.append(f"{k}: {t:.4g} s" if t < math.inf else f"{k}: does not lower")
        if best is None or t < best[1] * (1 - TIE) or s.transfers is best[0].transfers:
            best = (s, t)  # a known one's race, if run, notes what it was up against
    if best is None:
        raise last_error or SolverError("no strategy applies to this collective")
    s = best[0]
    note = (f"chunks auto: picked {s.collective.chunks_per_rank} per rank by {judge.what} "
            f"(tried {'; '.join(tried)})")
    return s.with_info(notes=s.info.notes + (note,), solver_time_s=spent)


def _best_known(judge: Judge, known: Judged) -> tuple[Schedule, float] | None:
    """The fastest of the ``known`` schedules (any chunking) with its time, noted as
    :meth:`_Race.winner` notes a race's, or None where none was judged."""
    race = _Race(judge)
    for name, schedule, verdict in known:
        race.enter(name, schedule, verdict)
    return (race.winner(), race.best_s) if race.best is not None else None
