"""Writing a schedule: its bytes once the independent verifier accepts them
(:func:`render`), and where the MSCCL runtime cannot hold the scale backend's schedule,
the same chunking solved again with the most sub-chunks that fit (:func:`render_fitting`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import te_ccl.verify.msccl.verify as xml_verifier
from te_ccl.backends.base import Progress, SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.collective.model import Collective
from te_ccl.compiler.best import refuse, solve_best, solve_checked
from te_ccl.compiler.judge import Timer, lower_file
from te_ccl.compiler.options import CompileOptions
from te_ccl.compiler.portfolio import asked_chunking
from te_ccl.deadline import TimeLimitReached, keeping, left, slowdown
from te_ccl.errors import RuntimeLimitError, VerificationError
from te_ccl.lower.fred import (
    TABLES_S_PER_FLOW,
    WrittenTables,
    planned_tables,
    tables_of_timeline,
    unrouted_flows,
)
from te_ccl.lower.msccl import check_expressible
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.model import Algo
from te_ccl.verify.mscclpp import verify_plan
from te_ccl.verify.schedule_check import check_schedule

__all__ = ["FredTables", "lowerable", "render", "render_fitting", "solved_again", "verified_algo",
           "tables_time_s", "write_fred_tables"]


def render_fitting(schedule: Schedule, options: CompileOptions, params: SolveParams,
                   progress: Progress | None = None, timer: Timer | None = None, *,
                   fallback: bool = False) -> tuple[Schedule, bytes]:
    """The schedule written and its bytes (:func:`render`): ``schedule`` itself, or where
    the MSCCL runtime cannot hold it (:class:`RuntimeLimitError`) and the scale backend
    cut its chunks into ``k > 1`` sub-chunks, the same chunking solved again with the
    most sub-chunks that fit.

    The search halves ``k`` until a schedule fits, then bisects between that and the
    smallest failure until they are within a quarter of each other (more sub-chunks
    pipeline better, so the largest that fits is kept), or until the compile's deadline
    once one fits. Only the scale backend cuts sub-chunks, so it alone solves again.
    Where not even 1 sub-chunk per chunk fits and the backend is ``auto``, the chunking
    is raced again with whole chunks (:func:`_raced_whole`). A note records what was tried.
    ``timer`` judges the schedules solved again and hands over the XML it lowered to judge
    them (:meth:`Timer.lowered`); it then times the schedule by the XML returned
    (:meth:`Timer.replay_written`), so ``timer.timing`` is the file's. With a
    ``fallback`` (the compile holds a file already) no schedule solved again is lowered
    that cannot be in the time left (:func:`_in_time`).
    """
    timer = timer or Timer(options=options)
    schedule, data = _fitting(schedule, options, params, progress, timer, fallback)
    if options.lowered:  # the replay forked while verifying, or one now
        timer.replay_written(schedule, data)
    return schedule, data


def _fitting(schedule: Schedule, options: CompileOptions, params: SolveParams,
             progress: Progress | None, timer: Timer, fallback: bool
             ) -> tuple[Schedule, bytes]:
    """:func:`render_fitting` but for the replay of the bytes."""
    try:
        return schedule, render(schedule, options, progress=progress,
                                lowered=timer.lowered(schedule, options), timer=timer)
    except RuntimeLimitError as e:
        k = schedule.info.subchunks
        if k <= 1:
            raise
        failed, why = k, str(e)
    asked, last = asked_chunking(schedule), schedule
    fit: tuple[int, Schedule, bytes] | None = None  # (k asked for, schedule, bytes)
    tried, spent = [f"{k}: {why}"], schedule.info.solver_time_s
    while fit is None or failed - fit[0] > max(1, fit[0] // 4):
        k = failed // 2 if fit is None else (fit[0] + failed) // 2
        if fallback:  # no more sub-chunks than the time left lowers
            k = min(k, int(lowerable(last, timer) / asked.chunks_per_rank))
            if fit is not None and k <= fit[0]:
                tried.append(f"{k}: no time left")
                break
            if k < 1:
                raise TimeLimitReached(f"{left():.2g} s left, too few to solve, lower and "
                                       "verify one sub-chunk per chunk")
        if progress:
            progress(f"MSCCL cannot hold {failed} sub-chunks per chunk; trying {k}")
        try:
            again = last = solved_again(schedule, asked, k, params, progress, timer)
            refuse(check_schedule(again))
            spent += again.info.solver_time_s
            if fallback:
                _in_time(again, timer)
            fit = (k, again, render(again, options, progress=progress,
                                    lowered=timer.lowered(again, options), timer=timer))
            tried.append(f"{again.info.subchunks}: fits")
        except TimeLimitReached:
            if fit is None:
                raise
            tried.append(f"{k}: stopped at the time limit")
            break
        except RuntimeLimitError as e:
            tried.append(f"{again.info.subchunks}: {e}")
            if k <= 1:
                if strategy_for(params) != "portfolio":
                    raise RuntimeLimitError(f"{e} (even with 1 sub-chunk per chunk)") from None
                return _raced_whole(schedule.topology, asked, options, params, progress, timer,
                                    tried, spent, fallback)
            failed = k
    _, again, data = fit
    note = (f"msccl: solved again with {again.info.subchunks} sub-chunk(s) per chunk, the "
            f"most the runtime holds (tried {'; '.join(tried)})")
    return again.with_info(notes=again.info.notes + (note,), solver_time_s=spent), data


def _raced_whole(topology: Topology, asked: Collective, options: CompileOptions,
                 params: SolveParams, progress: Progress | None, timer: Timer,
                 tried: list[str], spent: float, fallback: bool) -> tuple[Schedule, bytes]:
    """``auto`` raced again on ``asked`` (and the other chunkings of ``--chunks auto``) with
    whole chunks only, where the scale backend's schedule does not fit the runtime with
    any sub-chunking (``tried``): another candidate may (each is judged by its file, and
    one that does not lower loses). ``topology`` is the scale schedule's, already the
    machine as the output drives it, so it is raced on as it is."""
    if progress:
        progress("MSCCL cannot hold the scale schedule with any sub-chunking; racing again "
                 "with whole chunks")
    again = solve_checked(topology, asked, replace(params, max_subchunks=1),
                           options.chunk_choices, progress, timer.judge, in_switch=True)
    if fallback:
        _in_time(again, timer)
    try:
        data = render(again, options, progress=progress,
                      lowered=timer.lowered(again, options), timer=timer)
    except RuntimeLimitError as e:
        raise RuntimeLimitError(f"{e} (even with 1 sub-chunk per chunk, and raced again "
                                "with whole chunks)") from None
    note = ("msccl: the scale schedule does not fit the runtime even with 1 sub-chunk per "
            f"chunk (tried {'; '.join(tried)}): raced again with whole chunks")
    return again.with_info(notes=again.info.notes + (note,),
                           solver_time_s=spent + again.info.solver_time_s), data


def solved_again(schedule: Schedule, collective: Collective, k: int, params: SolveParams,
                 progress: Progress | None, timer: Timer) -> Schedule:
    """``collective`` (a chunking ``schedule`` was raced on) solved again by the scale
    backend with at most ``k`` sub-chunks per chunk, where ``schedule`` cannot be written
    (not checked yet), with the notes of the search ``schedule`` won (what it was raced
    against). ``schedule.topology`` is already the machine as the output drives it (its
    switches forward only for MSCCL XML), so it is solved as it is."""
    again = solve_best(schedule.topology, collective,
                       replace(params, backend="scale", max_subchunks=k), (), progress,
                       timer.judge, in_switch=True)
    won = tuple(n for n in schedule.info.notes if n.startswith(("auto:", "chunks auto:")))
    return again.with_info(notes=won + again.info.notes)


def lowerable(schedule: Schedule, timer: Timer) -> float:
    """Pieces per rank (chunks times sub-chunks) of ``schedule``'s kind that can be solved
    again (about as long as it took), lowered and verified in the time left, at its pace:
    transfers grow with the pieces."""
    after = left() - schedule.info.solver_time_s
    return schedule.collective.chunks_per_rank * after / max(timer.write_s(schedule), 1e-9)


def _in_time(schedule: Schedule, timer: Timer) -> None:
    """Raise :class:`TimeLimitReached` where lowering and verifying ``schedule`` would
    not end in the time left, by the pace timed (:meth:`Timer.write_s`)."""
    need = timer.write_s(schedule)
    if need > left():
        raise TimeLimitReached(f"{left():.2g} s left, too few to lower and verify "
                               f"{len(schedule.transfers)} transfers (~{need:.2g} s)")


def render(schedule: Schedule, options: CompileOptions, *,
           progress: Progress | None = None, lowered: bytes | None = None,
           timer: Timer | None = None) -> bytes:
    """The bytes of ``options.fmt``: the Schedule JSON, or the MSCCL XML (``lowered``, when
    the schedule was lowered already with these options) once the independent verifier
    accepts it (:class:`VerificationError` if not; :class:`SpecError` on a fabric whose
    switches reduce, which MSCCL cannot express). ``timer`` replays the XML while it is
    verified (:meth:`Timer.replaying`) and hears how the verifier read it."""
    if options.fmt == "json":
        return schedule.to_json().encode()
    if options.fmt == "mscclpp":
        return _render_plan(schedule, options, progress, lowered, timer)
    if not options.expressible:
        check_expressible(options.fmt, schedule.topology)
    xml = lowered
    if xml is None:
        xml = (timer.lower(schedule, options, progress) if timer is not None
               else lower_file(schedule, options, progress))
    if progress:
        progress("verifying the MSCCL XML")
    with timer.replaying(schedule, xml) if timer is not None else nullcontext() as read:
        try:
            algo = verified_algo(schedule, xml, options.runtime, read)
        except VerificationError:
            if timer is not None:
                timer.refused(schedule)
            raise
    if timer is not None:
        timer.verified(xml, algo)
    return xml


def verified_algo(schedule: Schedule, xml: bytes, limits: RuntimeLimits = MSCCL,
                  read: Callable[[Algo], object] | None = None) -> Algo:
    """The algorithm the MSCCL XML verifier reads from ``xml``, ``schedule``'s lowered
    file, within ``limits`` (``read`` is handed its parse, as the verifier allows);
    :class:`VerificationError` naming the first error if it refuses the file: what every
    command that writes MSCCL XML checks before writing it."""
    coll = schedule.collective
    root = coll.ranks.index(coll.root) if coll.root is not None else None
    report = xml_verifier.verify_msccl(xml.decode(), root=root, read=read, limits=limits)
    if not report.valid:
        raise VerificationError(f"the lowered MSCCL XML failed verification "
                                f"({report.error_count:,} error(s)); first: {report.errors[0]}")
    return report.algo


def _render_plan(schedule: Schedule, options: CompileOptions, progress: Progress | None,
                 lowered: bytes | None, timer: Timer | None) -> bytes:
    """The MSCCL++ plan of ``schedule`` once the independent plan checker accepts it
    (:class:`VerificationError` if not); a plan ``lowered`` to judge it was checked by
    its replay already."""
    if lowered is not None:
        return lowered
    if progress:
        progress("lowering to an MSCCL++ plan")
    data = timer.lower(schedule, options) if timer is not None else lower_file(schedule, options)
    if progress:
        progress("checking the MSCCL++ plan")
    report = verify_plan(data.decode())
    if not report.valid:
        raise VerificationError(f"the lowered MSCCL++ plan failed its check "
                                f"({len(report.errors):,} error(s)); first: {report.errors[0]}")
    return data


@dataclass(frozen=True)
class FredTables:
    """The FRED switch tables written: whose (``chosen``, an index into the schedules
    offered, best first), their paths, the fabric's limits, and the better files set aside."""

    chosen: int
    paths: tuple[str, ...]
    fabric: dict[str, Any] | None
    notes: tuple[str, ...]


def write_fred_tables(schedules: Sequence[Schedule], topology: Topology, out_dir: str
                      ) -> FredTables:
    """The FRED switch tables of the best of ``schedules`` (the files a compile kept, best
    first) whose tables can be made in the time left, written to ``out_dir``.

    They are made after the compile's search, in the time it kept for them
    (``SHARES.tables``), and before its file. The last schedule (the compile's first
    file, the cheapest to route) is routed first and its tables' cost estimated from its
    flows (:meth:`PlannedTables.estimate_s`, CPU seconds, by the clock times
    :func:`~te_ccl.deadline.slowdown`, as every estimate here); each better one is estimated from its
    streams (:func:`unrouted_flows`), then routed and estimated again, and written, in
    the time left but that (:func:`_tables_in_time`), and set aside where its estimate does not
    fit or its tables run out of time. The last one's tables are tried whatever their
    estimate: only when they too run out of time does the deadline end the compile
    (:class:`TimeLimitReached`, nothing written), saying how long they would take."""
    start, kept_s = time.monotonic(), left()
    notes: list[str] = []
    flows = unrouted_flows(schedules[-1], topology)  # what they take, if even routing is late
    try:
        last = planned_tables(schedules[-1], topology)
        flows, reserve = last.flows, last.estimate_s() * slowdown()
        for i, schedule in enumerate(schedules[:-1]):
            try:
                with keeping(reserve):
                    written = _tables_in_time(schedule, topology, Path(out_dir))
            except TimeLimitReached as e:
                notes.append(f"fred: a better file set aside, its switch tables would not be "
                             f"made in time ({e}); wrote the tables of the next one")
                continue
            return _written(i, written, notes)
        return _written(len(schedules) - 1,
                        tables_of_timeline(schedules[-1], last, Path(out_dir)), notes)
    except TimeLimitReached as e:
        spent = time.monotonic() - start
        raise TimeLimitReached(f"{e}, after {spent:.2g} s of the {kept_s:.2g} s kept for the "
                               "FRED switch tables; the tables of the cheapest file kept "
                               f"(~{flows:,} flows) take ~{flows * TABLES_S_PER_FLOW:.2g} s of "
                               f"CPU (~{_by_clock_s(flows):.2g} s on this "
                               "machine now): they need a longer limit; nothing was written"
                               ) from None


def tables_time_s(schedule: Schedule, topology: Topology) -> float:
    """Seconds ``schedule``'s FRED tables take by estimate before they are routed, by the
    clock: their flows (:func:`unrouted_flows`) at :data:`TABLES_S_PER_FLOW` CPU seconds
    each, times the machine's :func:`~te_ccl.deadline.slowdown`. The compile keeps them
    from its search for its first file, whose tables are the last resort of
    :func:`write_fred_tables`."""
    return _by_clock_s(unrouted_flows(schedule, topology))


def _by_clock_s(flows: int) -> float:
    """Seconds the tables of ``flows`` flows take by estimate, by the clock:
    :data:`TABLES_S_PER_FLOW` CPU seconds each, times :func:`~te_ccl.deadline.slowdown`."""
    return flows * TABLES_S_PER_FLOW * slowdown()


def _tables_in_time(schedule: Schedule, topology: Topology, out_dir: Path
                    ) -> WrittenTables:
    """The tables of ``schedule`` written, unless they are estimated
    (:func:`unrouted_flows`, then :meth:`PlannedTables.estimate_s`) to take longer than
    the time left (:class:`TimeLimitReached`, as when they run out of it)."""
    flows = unrouted_flows(schedule, topology)
    if (need := _by_clock_s(flows)) > left():
        raise TimeLimitReached(f"~{need:.2g} s for ~{flows:,} flows before routing, "
                               f"{left():.2g} s left")
    planned = planned_tables(schedule, topology)
    if (need := planned.estimate_s() * slowdown()) > left():
        raise TimeLimitReached(f"~{need:.2g} s for {planned.flows:,} flows, "
                               f"{left():.2g} s left")
    return tables_of_timeline(schedule, planned, out_dir)


def _written(chosen: int, written: WrittenTables, notes: list[str]) -> FredTables:
    return FredTables(chosen, tuple(str(p) for p in written.paths), written.fabric, tuple(notes))
