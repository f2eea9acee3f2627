"""Run a benchmark suite: teccl's solver and the baselines on every case, one yardstick.

Every schedule — teccl's and each baseline's — is checked by the independent schedule
checker, lowered to MSCCL XML and the XML replayed by the simulator
(:class:`te_ccl.compiler.pipeline.Timer`); its time is that replay's finish (``xml_s``), so algbw,
busbw and the ratio to the lower bound are the artifact's and compare like with like. The
schedule's own replay (``schedule_s``) and the epoch-model prediction are kept alongside;
``xml_ratio`` = XML / schedule replay is what the lowering loses. Above
:data:`XML_REPLAY_LIMIT` transfers the time is the schedule replay, above
:data:`SIM_LIMIT` the prediction (``measured_by`` says which). teccl's schedule is the one
``teccl compile`` keeps (:func:`te_ccl.compiler.pipeline.solve_best`, over the chunkings of
``--chunks auto`` for the cases that ask); its solver time is the wall-clock time of that
whole choice, and ``picked_chunks`` the chunks per rank of the schedule kept. Schedules
longer than :data:`CHECK_EPOCHS` epochs or over :data:`SIM_LIMIT` transfers are not
checked (``checked`` says which rows were). ``bound_s`` is the case's lower bound and
``bound_by`` the argument of :mod:`te_ccl.bounds` that sets it (``cut_s``, ``alpha_s``, …).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from devtools.bounds_cache import Bounds
from devtools.suites import Case, Suite
from te_ccl.backends.base import SolveParams
from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import (
    BASE_CHUNKS,
    SIM_LIMIT,
    XML_REPLAY_LIMIT,
    CompileOptions,
    Timer,
    forward_only,
    render_fitting,
    solve_best,
)
from te_ccl.errors import TecclError
from te_ccl.report.metrics import bandwidths
from te_ccl.schedule import Schedule
from te_ccl.spec.topology import load_topology
from te_ccl.verify.schedule_check import check_schedule

__all__ = ["Row", "BenchResult", "run_case", "run_suite", "SIM_LIMIT", "XML_REPLAY_LIMIT"]

CHECK_EPOCHS = 200_000  # the checker replays epoch by epoch: beyond this, simulate only
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Row:
    """One system (``teccl`` or ``baseline:NAME``) on one case; times in seconds."""

    topology: str
    ngpus: int
    collective: str
    size_bytes: int
    chunks: int
    group: str
    system: str
    status: str = "ok"
    backend: str = ""
    solver_time_s: float | None = None
    limit_s: float | None = None
    predicted_s: float | None = None
    schedule_s: float | None = None
    xml_s: float | None = None
    xml_ratio: float | None = None
    measured_by: str = ""
    time_s: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    bound_s: float | None = None
    bound_by: str = ""
    cut_s: float | None = None
    alpha_s: float | None = None
    ratio: float | None = None
    optimal: bool | None = None
    bound_kind: str = ""
    checked: bool = False
    picked_chunks: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.time_s is not None


@dataclass
class BenchResult:
    suite: str
    rows: list[Row] = field(default_factory=list)
    elapsed_s: float = 0.0
    skipped: list[Case] = field(default_factory=list)
    planned: set[tuple[str, str, int, int]] = field(default_factory=set)


def _collective(case: Case, ngpus: int) -> Collective:
    return Collective(CollectiveKind(case.kind), case.size_bytes, tuple(range(ngpus)),
                      chunks_per_rank=case.chunks, root=case.root)


def _timed(base: Row, sched: Schedule, timer: Timer | None = None) -> Row:
    """Check, lower and replay ``sched`` (by ``timer``, which may remember the times from
    the solve); fill the row's times, bandwidths and ratio. A schedule the lowering
    refuses is a failed row: there is no file to run."""
    big = len(sched.transfers) > SIM_LIMIT
    checked = not big and sched.finish_epoch <= CHECK_EPOCHS
    if checked and (bad := check_schedule(sched)):
        return replace(base, status=f"invalid: [{bad[0].rule}] {bad[0].message}"[:160])
    timer = timer or Timer()
    # the file's replay where lowering costs seconds; the 256-1024-GPU files: make bench-xml
    timing = timer.file_timing(sched) if not big else timer.timing(sched)
    if timing.unlowerable is not None:
        return replace(base, backend=sched.info.backend, checked=checked,
                       status=f"does not lower: {timing.unlowerable}"[:160])
    t, c = timing.finish_s, sched.collective
    algbw, busbw = bandwidths(c.size_bytes, t, c.busbw_factor)
    xml_ratio = (timing.xml_s / timing.schedule_s
                 if timing.xml_s is not None and timing.schedule_s else None)
    return replace(base, backend=sched.info.backend, predicted_s=sched.finish_time_s,
                   checked=checked, picked_chunks=c.chunks_per_rank,
                   schedule_s=timing.schedule_s, xml_s=timing.xml_s, xml_ratio=xml_ratio,
                   measured_by=timing.measured_by, time_s=t, algbw_GBps=algbw,
                   busbw_GBps=busbw, ratio=t / base.bound_s if base.bound_s else None,
                   optimal=sched.info.optimal)


def run_case(case: Case, *, threads: int = 2, progress: Progress | None = None,
             bounds: Bounds | None = None) -> list[Row]:
    """teccl and (if the case asks) every applicable baseline on one case."""
    topo = load_topology(case.topology)
    coll = _collective(case, topo.ngpus)
    base = Row(topo.name, topo.ngpus, case.kind, case.size_bytes, case.chunks, case.group,
               "teccl", limit_s=case.limit_s)
    if coll.chunk_bytes <= 0:
        return [replace(base, status="size too small for the chunking")]
    bound = (bounds or Bounds()).get(topo, coll)
    base = replace(base, bound_s=bound.seconds, bound_by=bound.argument,
                   cut_s=bound.parts.get("cut_s"), alpha_s=bound.parts.get("alpha_s"),
                   bound_kind=bound.kind)
    rows = [_run_teccl(base, topo, coll, case, threads)]
    if case.baselines:
        for name in applicable(topo, coll):
            if progress:
                progress(f"{case.topology} {case.kind} {case.size_bytes} B: baseline {name}")
            row = replace(base, system=f"baseline:{name}", limit_s=None)
            try:
                rows.append(_timed(row, build_baseline(name, forward_only(topo), coll)))
            except BaselineError:
                continue  # e.g. a reduction that would need a relay through a GPU
            except Exception as e:  # noqa: BLE001 - one broken row must not end the run
                rows.append(replace(row, status=f"error: {type(e).__name__}: {e}"[:160]))
    return rows


def _run_teccl(base: Row, topo, coll: Collective, case: Case, threads: int) -> Row:
    params = SolveParams(backend=case.backend, time_limit_s=case.limit_s, threads=threads,
                         epoch=case.epoch)
    start, timer = time.monotonic(), Timer()
    try:  # what `teccl compile` keeps (--chunks auto for auto_chunks cases), checked below
        chunks = BASE_CHUNKS if case.auto_chunks else ()
        sched = solve_best(topo, coll, params, chunks, judge=timer.judge)
        if timer.timing(sched).refittable:  # as compile writes it: fewer sub-chunks
            sched, _ = render_fitting(sched, CompileOptions(chunk_choices=chunks), params,
                                      timer=timer)
    except TecclError as e:
        return replace(base, status=f"failed: {e}"[:160],
                       solver_time_s=time.monotonic() - start)
    except Exception as e:  # noqa: BLE001 - a solver bug is a row, not the end of the run
        return replace(base, status=f"error: {type(e).__name__}: {e}"[:160],
                       solver_time_s=time.monotonic() - start)
    done = replace(base, solver_time_s=time.monotonic() - start)
    try:
        return _timed(done, sched, timer)
    except TecclError as e:  # the simulator refused the schedule
        return replace(done, status=f"invalid: {e}"[:160])


def run_suite(suite: Suite, *, threads: int = 2, progress: Progress | None = None,
              budget_s: float | None = None) -> BenchResult:
    """Every case of ``suite`` in order; cases that would start after the budget are skipped."""
    budget = suite.budget_s if budget_s is None else budget_s
    result, start, bounds = BenchResult(suite.name), time.monotonic(), Bounds()
    result.planned = {(c.topology, c.kind, c.size_bytes, c.chunks) for c in suite.cases}
    for i, case in enumerate(suite.cases):
        if time.monotonic() - start > budget:
            result.skipped.append(case)
            continue
        if progress:
            progress(f"[{i + 1}/{len(suite.cases)}] {time.monotonic() - start:.0f} s: "
                     f"{case.topology} {case.kind} {case.size_bytes} B x{case.chunks} "
                     f"(limit {case.limit_s:g} s)")
        result.rows += run_case(case, threads=threads, progress=progress, bounds=bounds)
    result.elapsed_s = time.monotonic() - start
    return result
