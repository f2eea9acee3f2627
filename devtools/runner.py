"""Run a benchmark suite: teccl's solver and the baselines on every case, one yardstick.

Every schedule — teccl's and each baseline's — is checked by the independent schedule
checker, lowered to MSCCL XML and the XML replayed by the simulator
(:class:`te_ccl.compiler.judge.Timer`); its time is that replay's finish (``xml_s``), so algbw,
busbw and the ratio to the lower bound are the artifact's and compare like with like. The
schedule's own replay (``schedule_s``) and the epoch-model prediction are kept alongside;
``xml_ratio`` = XML / schedule replay is what the lowering loses. Above
:data:`XML_REPLAY_LIMIT` transfers the time is the schedule replay, above
:data:`SIM_LIMIT` the prediction (``measured_by`` says which). teccl's schedule is the one
``teccl compile`` keeps (:func:`te_ccl.compiler.best.solve_best`, over the chunkings of
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
    Kept,
    Timer,
    forward_only,
    render_fitting,
    solve_best,
)
from te_ccl.deadline import cpu_s
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
    first_file_s: float | None = None  # defaults rows: the compile's first verified file
    exit_code: int = 0  # defaults rows: what ``teccl compile`` would exit with
    cut_short: bool = False  # defaults rows: the limit ended the search (a file was written)
    cpu_s: float | None = None  # defaults rows: CPU seconds of the compile and what it forked

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
    base = Row(topo.name, topo.ngpus, case.kind, case.size_bytes, case.chunks, case.group,
               "teccl", limit_s=case.limit_s)
    if case.group == "defaults":  # the compile's own bound and choices, as a user runs it:
        # in a process of its own (forked), so no row inherits what an earlier one left
        from te_ccl.background import in_background

        return [in_background(_run_compile, base, topo, case, case.first_file_only).result()]
    coll = _collective(case, topo.ngpus)
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


class _FirstFile(Exception):  # noqa: N818 - not an error: the row's compile is done
    """A compile run to its first file only has it: its time and ratio."""

    def __init__(self, kept: Kept) -> None:
        self.kept = kept


def _stop_at_first(message: str) -> None:
    if isinstance(message, Kept):
        raise _FirstFile(message)


def _run_compile(base: Row, topo, case: Case, first_only: bool = False) -> Row:
    """``teccl compile`` with its defaults (the time limit the case's) into a scratch
    file: the row of the file written (its replay, first-file time) or of the exit.
    ``first_only`` stops the compile at its first verified file (its ratio is the
    row's): whether the limit gives a file at all, in a fraction of the time."""
    import tempfile

    import te_ccl

    fmt = "json" if topo.reducing_switches else "xml"  # as teccl compile picks
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="teccl-defaults-") as tmp:
        try:
            res = te_ccl.compile(topo, case.kind, size=case.size_bytes, root=case.root,
                                 time_limit_s=case.limit_s, output=f"{tmp}/out.{fmt}", fmt=fmt,
                                 progress=_stop_at_first if first_only else None)
        except _FirstFile as e:
            first = e.kept.improvement
            return replace(base, status="first file", solver_time_s=time.monotonic() - start,
                           ratio=first.ratio, first_file_s=first.t_s, cpu_s=cpu_s())
        except TecclError as e:
            return replace(base, status=f"exit {e.exit_code}: {e}"[:240],
                           exit_code=e.exit_code, solver_time_s=time.monotonic() - start,
                           cpu_s=cpu_s())
        except Exception as e:  # noqa: BLE001 - a crash is a row (exit 70), not the end
            return replace(base, status=f"error: {type(e).__name__}: {e}"[:240],
                           exit_code=70, solver_time_s=time.monotonic() - start)
    t, c = res.finish_time_s, res.schedule.collective
    return replace(base, bound_s=res.lower_bound_s, solver_time_s=time.monotonic() - start, backend=res.backend,
                   time_s=t, ratio=res.bound_ratio, measured_by=res.measured_by,
                   algbw_GBps=res.algbw_GBps, busbw_GBps=res.busbw_GBps,
                   picked_chunks=c.chunks_per_rank, first_file_s=res.first_file_s,
                   optimal=res.optimal, cut_short=res.cut_short, cpu_s=cpu_s())


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
