"""The whole compile in one readable function: spec → solve → check → lower → verify → write.

``compile_collective`` is what ``teccl compile`` and ``teccl sweep`` run for each
algorithm; ``compile_size_library`` runs the same stages once per size range
(``--sizes``, :mod:`te_ccl.compiler.sizes`). Every output is checked before it is
written: the schedule by the independent checker, the MSCCL XML by the verifier, which
shares nothing with the solver (a first file's XML by the verifier alone, its schedule
checked once it is the file to write, in the time left: :func:`_check_kept`).

The compile is *anytime*: from the first file it verifies (a cheap candidate, lowered
and verified before the search, :func:`te_ccl.compiler.candidates.first_file`) it holds a file it can write
(:class:`~te_ccl.compiler.incumbent.Incumbent`), replaced only by a verified file that finishes
earlier; when the time limit ends, in whatever stage, the file held is written.

The artifact is the measure: candidates (chunkings, the flow schedule against the
templates) are judged, and the result is reported, by replaying the MSCCL XML each
lowers to (:class:`Timer`), the program the runtime runs. Switches only forward in it
(an MSCCL send goes to one peer), so the solve gives switches no in-switch copy or
reduction unless the output can drive them (:func:`drives_in_switch`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

from te_ccl.backends.base import Progress, SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.background import in_background, workers
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective
from te_ccl.compiler.best import (
    Usable,
    drives_in_switch,
    forward_only,
    refuse,
    solve_best,
    solve_checked,
)
from te_ccl.compiler.candidates import known as plan_only
from te_ccl.compiler.fits import check_loadable
from te_ccl.compiler.incumbent import Incumbent, Verified, describe
from te_ccl.compiler.judge import PARALLEL_FROM, Timer, Timing, check_s
from te_ccl.compiler.options import CompileOptions, check_epoch
from te_ccl.compiler.portfolio import TEMPLATE_MAX_GPUS, TIE, asked_chunking
from te_ccl.compiler.render import (
    lowerable,
    render,
    render_fitting,
    solved_again,
    tables_time_s,
    write_fred_tables,
)
from te_ccl.compiler.result import CompileResult, compile_notes, declared_range, rooted_notes
from te_ccl.compiler.sizes import SizedSchedule, compile_size_ranges, made_in_time
from te_ccl.compiler.strategy import check_input
from te_ccl.compiler.warm import first_candidates, offer_spliced, repair
from te_ccl.deadline import SHARES, TimeLimitReached, check, hurried, keeping, left, until
from te_ccl.errors import (
    RuntimeLimitError,
    SolverError,
    SpecError,
    TecclError,
    VerificationError,
)
from te_ccl.lower.msccl import check_expressible
from te_ccl.model.footprint import MAX_TRANSFERS, row_first_file_s, row_needs
from te_ccl.nogc import paused_gc
from te_ccl.outputs import check_output_file, make_output_dir, path_component, write_atomic
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology
from te_ccl.verify.schedule_check import CHECKING, check_schedule

__all__ = ["compile_collective", "compile_size_library"]


def _in_switch(options: CompileOptions, topology: Topology) -> bool:
    """Whether the compile gives switches in-switch copy and reduction: a schedule JSON
    with FRED tables, or an output that drives a switch that reduces
    (:func:`drives_in_switch`)."""
    if options.fmt == "json" and options.fred_tables is not None:
        return True
    return any(n.can_reduce and drives_in_switch(options.fmt, n)
               for n in topology.nodes if not n.is_gpu)


def compile_collective(topology: Topology, collective: Collective, params: SolveParams,
                       options: CompileOptions | None = None,
                       progress: Progress | None = None) -> CompileResult:
    """Solve, check, lower and write one algorithm; raises instead of writing a bad file.

    ``params.time_limit_s`` bounds the whole compile (:mod:`te_ccl.deadline`). With an
    output, the file written is the best verified one when the search is done or the
    limit ends (:func:`_anytime`); past the limit with no file verified yet the compile
    stops with :class:`~te_ccl.deadline.TimeLimitReached` naming the stage and what a
    first file would take, and writes nothing. Without one, the search gets
    ``SHARES.search`` of the limit. An MSCCL++ plan is compiled on the machine as a
    plan drives it (NVLS switches copy and reduce, others forward), whoever asks.
    """
    started = time.monotonic()  # the first file's time counts the checks and the bound
    before_s = max(0.0, params.time_limit_s - left())  # of the limit, before the compile
    options = options or CompileOptions()
    in_switch = _in_switch(options, topology)
    if in_switch or options.fmt == "mscclpp":  # what the output cannot drive only forwards
        topology = forward_only(topology, options.fmt)  # (an MSCCL++ plan: FRED's switches)
    timer = Timer(xml=not in_switch, options=options)
    kept: Incumbent | None = None
    extra: tuple[str, ...] = ()
    served: tuple[int, int, tuple[str, ...]] = (options.min_bytes, options.max_bytes, ())
    # no cycle collection: its passes over millions of young objects (the transfers of a
    # 1024-GPU schedule, built here) would take seconds; the few cycles a compile leaves
    # (a solver's, an exception's) are collected once it is done
    with until(params.time_limit_s), keeping(_tables_kept_s(options, params)), paused_gc():
        check_input(topology, collective)  # before the bound and any candidate is built
        check_epoch(topology, collective, params)
        usable = Usable.of(topology, in_switch)  # as the output can use it, once
        if options.fmt == "xml":  # expressible asked once: every candidate is built on usable
            check_loadable(collective, topology)
            check_expressible(options.fmt, topology)  # the fabric: usable's switches forward
            options = replace(options, expressible=True)
        bound = lower_bound(usable.topology, collective)  # no NVLS for MSCCL XML
        if options.output is None:
            schedule = solve_best(usable.topology, collective, _search(params),
                                  options.chunk_choices, progress, timer.judge, in_switch=True)
        else:
            kept = Incumbent(bound.seconds, progress, started, before_s=before_s)
            best = _anytime(topology, collective, params, options, timer, kept, usable)
            schedule, data = best.schedule, best.data
            served = declared_range(best.data, options.min_bytes, options.max_bytes)
    fabric, set_aside = None, ()
    # the tables before the file, in the time kept for them: no file without its tables,
    # the best file kept whose tables can be made in time
    if options.fred_tables is not None:
        files = kept.files[::-1] if kept else []
        tables = write_fred_tables([f.schedule for f in files] or [schedule], topology,
                                   options.fred_tables)
        extra, fabric, set_aside = tables.paths, tables.fabric, tables.notes
        if tables.chosen:
            schedule, data = files[tables.chosen].schedule, files[tables.chosen].data
            served = declared_range(data, options.min_bytes, options.max_bytes)
    if options.output is not None:
        write_atomic(options.output, data)
    notes = compile_notes(schedule, timer, usable.forwarded)
    notes += (tuple(kept.notes) if kept else ()) + set_aside
    schedule = schedule.with_info(notes=schedule.info.notes + notes + served[2])
    return CompileResult(schedule, bound.seconds, dict(bound.parts), options.output, extra,
                         served[0], served[1], timer.timing(schedule), fabric,
                         kept.first_file_s if kept else None,
                         kept is not None and kept.cut_short is not None,
                         tuple(kept.history) if kept else (),
                         kept.best.checked if kept and kept.best else None)


def compile_size_library(topology: Topology, collective: Collective, params: SolveParams,
                         low: int, high: int, out_dir: str, *, fmt: str = "xml",
                         chunk_choices: tuple[int, ...] = (),
                         progress: Progress | None = None,
                         runtime: RuntimeLimits = MSCCL) -> list[CompileResult]:
    """One algorithm per size range of ``[low, high]`` written to ``out_dir``, as MSCCL
    algorithm libraries ship them: each file's ``minBytes``/``maxBytes`` cover its range, so
    the runtime picks the one compiled for the message size at hand. Files are named
    ``TOPOLOGY-KIND[-inplace]-MIN-MAX.FMT`` (one path component: :func:`path_component`),
    so both buffer modes fit one directory; ``out_dir`` is created if missing (its parent
    is not). Each XML is lowered and verified within ``runtime``'s limits; the files are
    written once every range has one (out of time: every range made, :func:`made_in_time`)
    and every path can take it, so a compile that fails leaves no part of a library.

    Rooted collectives are refused: the runtime would pick these files by size for
    every root (and has no entry point for gather and scatter).
    """
    if rooted_notes(collective):
        raise SpecError(f"a size library of {collective.kind.value} would run for every "
                        "root (the MSCCL executor selects by collective and size, not by "
                        "root); compile one size without --sizes instead", key="--sizes")
    largest = replace(collective, size_bytes=high)  # its chunks take the most epochs
    check_input(topology, largest)  # before any range is compiled
    check_epoch(topology, largest, params)
    if fmt == "xml":
        check_loadable(collective, topology)
    check_expressible(fmt, topology)
    unit = max(replace(collective, chunks_per_rank=k).nchunks
               for k in chunk_choices or (collective.chunks_per_rank,))
    timer = Timer(options=CompileOptions(runtime=runtime))
    usable = Usable.of(topology, in_switch=False)

    def sized(c: Collective) -> Collective:
        return replace(c, size_bytes=max(unit, c.size_bytes // unit * unit))

    def compile_one(c: Collective) -> Schedule:
        c = sized(c)
        if progress:
            progress(f"compiling for {c.size_bytes} bytes")
        return solve_checked(usable.topology, c, params, chunk_choices, progress, timer.judge,
                             in_switch=True)

    def first_one(c: Collective) -> Schedule | None:
        """The first cheap candidate that builds and passes the checker; one that raises
        (over a buffer or runtime limit, refused, out of its own time) is noted on the
        schedule kept, as a compile's first file notes it, and the next one tried while
        the compile's deadline allows (past it, no file could be written)."""
        refused: list[str] = []
        for name, build in first_candidates(None, usable.topology, sized(c), params, fmt):
            check(f"building the first file from the {name}")
            try:
                schedule = build()
                if schedule is not None and not check_schedule(schedule):
                    return schedule.with_info(notes=schedule.info.notes + tuple(refused))
            except TecclError as e:
                refused.append(f"anytime: no first file from the {name} ({e})")
        return None

    mode = "-inplace" if collective.inplace else ""

    def made(item: SizedSchedule) -> tuple[CompileResult, bytes]:
        name = path_component(f"{topology.name}-{collective.kind.value}{mode}-"
                              f"{item.min_bytes}-{item.max_bytes}")
        options = CompileOptions(output=str(Path(out_dir) / f"{name}.{fmt}"), fmt=fmt,
                                 min_bytes=item.min_bytes, max_bytes=item.max_bytes, name=name,
                                 runtime=runtime)
        schedule, data = render_fitting(item.schedule, options, params, progress, timer)
        bound = lower_bound(usable.topology, schedule.collective)
        schedule = schedule.with_info(notes=schedule.info.notes
                                      + compile_notes(schedule, timer, usable.forwarded))
        return CompileResult(schedule, bound.seconds, dict(bound.parts), options.output,
                             min_bytes=item.min_bytes, max_bytes=item.max_bytes,
                             timing=timer.timing(schedule)), data

    with paused_gc():  # as in compile_collective: millions of young objects, no cycles
        ranges = compile_size_ranges(collective, low, high, compile_one, first=first_one)
        pairs, missed = made_in_time(ranges, made)
    results = [r for r, _ in pairs]
    files = [(r.output, data) for r, data in pairs]
    if missed:  # said by the last range made
        last = results[-1].schedule
        results[-1] = replace(results[-1], schedule=last.with_info(
            notes=last.info.notes + (missed,)))
    make_output_dir(out_dir)
    for path, _ in files:  # every file can be written before any is: no half library
        check_output_file(path)
    for path, data in files:
        write_atomic(path, data)
    return results


def _search(params: SolveParams) -> SolveParams:
    """The search's share of what is left of the time: ``SHARES.search``; lowering,
    verifying and writing the schedule it keeps take the rest."""
    share = min(params.time_limit_s, left()) * SHARES.search
    return replace(params, time_limit_s=max(share, MIN_SEARCH_S))


def _anytime(topology: Topology, collective: Collective, params: SolveParams,
             options: CompileOptions, timer: Timer, kept: Incumbent,
             usable: Usable) -> Verified:
    """The file to write: with ``--backend auto`` (and no ``max_horizon``), first the
    file of the cheapest candidate that lowers, fits the runtime and verifies
    (:func:`_first_file`), then the search's (:func:`_improve`) where it finishes earlier
    and can be lowered and verified in the time left. All of it ends
    :data:`WRITE_RESERVE_S` (and :data:`RESERVE_S_PER_DELIVERY` per chunk delivered) before
    the deadline, kept for writing the file and its report.

    With a previous file that file spliced comes first, and may stand
    (:func:`te_ccl.compiler.warm.offer_spliced`); the search is narrowed to its repair
    (:func:`te_ccl.compiler.warm.repair`).

    A deadline reached in any stage, or a search that fails (no schedule, none that fits
    the runtime), leaves the file kept, with a note; only with none kept yet is it an
    error, and a deadline's message then says what a first file would take.
    """
    deliveries = sum(collective.received().values())
    with keeping(WRITE_RESERVE_S + RESERVE_S_PER_DELIVERY * deliveries):
        searched, checks_s = left() > 0, kept.elapsed()  # not searched: the limit was gone
        try:
            if strategy_for(params) == "portfolio" and not offer_spliced(
                    options.previous, usable.topology, collective, options, timer, kept):
                _first_file(usable.topology, collective, params, options, timer, kept)
            search = repair(options.previous, topology, collective, params, kept)
            if search is not None and kept.best is not None and \
                    row_first_file_s(topology, collective) is not None:
                kept.notes.append(ROWS_ALONE)  # its search would only hold it twice
                search = None
            if search is not None:
                with keeping(_first_tables_s(topology, options, params, kept)):
                    _improve(usable.topology, collective, search, options, timer, kept)
        except TimeLimitReached as e:
            if kept.best is None:
                why = str(e) if searched else _no_search(kept, params, checks_s)
                needs = _first_file_needs(kept, timer, topology, collective)
                raise TimeLimitReached(f"{why}{needs}") from None
            kept.cut(str(e))
        except (SolverError, RuntimeLimitError, VerificationError) as e:
            # a TimeLimitReached is caught above
            if kept.best is None and kept.refused and not isinstance(e, VerificationError):
                refused = "".join(f"; no first file from {why}" for why in kept.refused)
                kind = RuntimeLimitError if isinstance(e, RuntimeLimitError) else SolverError
                raise kind(f"{e}{refused}") from None
            if kept.best is None:
                raise
            kept.notes.append(f"anytime: the search's file was not written ({e})")
        _keep_measured(collective, options, timer, kept)
        _check_kept(kept)
    best = kept.best
    if best is None:  # each stage keeps a file or raises: a stage that did neither found none
        raise SolverError("no candidate gave a file that fits the runtime and verifies")
    if kept.cut_short is not None:
        ratio = kept.ratio(best.finish_s)
        at = f"{ratio:.4f}× the lower bound" if ratio is not None else "its time"
        kept.notes.append(f"anytime: cut short ({kept.cut_short}); wrote the best file "
                          f"verified by then, at {at} ({best.source}, verified at "
                          f"{kept.history[-1].t_s:.3g} s)")
    return best


def _tables_kept_s(options: CompileOptions, params: SolveParams) -> float:
    """Seconds kept from the whole compile for its FRED tables (``SHARES.tables`` of the
    limit), counted back from the deadline: they are made after it, before its file."""
    return SHARES.tables * params.time_limit_s if options.fred_tables is not None else 0.0


def _first_tables_s(topology: Topology, options: CompileOptions, params: SolveParams,
                    kept: Incumbent) -> float:
    """Seconds the search keeps for the first file's FRED tables (:func:`tables_time_s`)
    beyond those kept for tables already: the tables of the file kept last are made
    whatever their estimate, so a search that ran to the deadline would leave them none."""
    if kept.best is None or options.fred_tables is None:
        return 0.0
    return max(0.0, tables_time_s(kept.best.schedule, topology) - _tables_kept_s(options, params))


def _keep_measured(collective: Collective, options: CompileOptions, timer: Timer,
                   kept: Incumbent) -> None:
    """Keep the fastest file judging measured (lowered and replayed, :meth:`Timer.measured`)
    that finishes earlier than the file kept, once it passes the checker and the
    verifier: the file the search meant to write may not be written (over a runtime
    limit, refused by the verifier, or slower as a file than the schedule replay that
    judged it), and a compile writes the best verified file it has, not its first.
    A file refused, or that cannot be verified in the time left, gives way to the next
    one; out of time, the file kept stands."""
    for finish_s, schedule, data in timer.measured(collective):
        if kept.best is None or finish_s >= kept.best.finish_s * (1 - TIE):
            return  # not kept (Incumbent.offer)
        if kept.holds(schedule) or timer.write_s(schedule) > left():
            continue  # kept already, or not verified in the time left
        try:
            with _checked_alongside(schedule):
                render(schedule, options, lowered=data, timer=timer)
        except TimeLimitReached as e:
            kept.cut(str(e))
            return
        except (VerificationError, RuntimeLimitError) as e:
            kept.notes.append(f"anytime: the measured file of the {describe(schedule)} "
                              f"was not kept ({e})")
            continue
        if _offer(kept, schedule, data, timer, "measured"):
            return


def _first_file(topology: Topology, collective: Collective, params: SolveParams,
                options: CompileOptions, timer: Timer, kept: Incumbent) -> None:
    """Keep the file of the first of the portfolio's cheap candidates that builds,
    passes the checker (where :func:`_gated` runs it), lowers within the runtime's
    limits and verifies
    (:func:`te_ccl.compiler.warm.first_candidates`: with ``options.previous``, its routes
    first); one that does not is noted and the next one tried. Where every candidate
    overflows the runtime at one chunk per rank beyond :data:`TEMPLATE_MAX_GPUS` GPUs,
    the search has nothing coarser to try (its scale method cuts more sub-chunks, and it
    builds no template there): :class:`RuntimeLimitError` with their reasons, at once."""
    search = _search(params)
    overflows: list[str] = []  # of the candidates refused (kept.refused)
    candidates = first_candidates(options.previous, topology, collective, search,
                                  options.fmt)
    for name, build in candidates:
        kept.tell(f"first file: trying the {name}")
        skipped: list[str] = []
        schedule = _build_first(name, build, kept, skipped)
        if schedule is None:
            continue
        kept.trying(schedule)
        try:
            with _gated(schedule, options):
                data = render(schedule, options, progress=kept.tell, timer=timer)
        except (TimeLimitReached, VerificationError, SpecError):
            raise
        except TecclError as e:  # MSCCL cannot express or hold it: the next candidate
            kept.refuse(name, e)
            if isinstance(e, RuntimeLimitError):
                overflows.append(f"the {name}: {e}")
            continue
        _offer_first(kept, schedule, data, timer, options)
        if skipped:  # the search runs the method in full, not taking this for its run
            kept.hurried = True
            kept.notes.append(f"anytime: the first file was built without {', '.join(skipped)}")
        _nearer_first(candidates, options, timer, kept)
        return
    if overflows and len(overflows) == len(kept.refused) and \
            collective.chunks_per_rank == 1 and topology.ngpus > TEMPLATE_MAX_GPUS:
        raise RuntimeLimitError(f"no file fits the runtime ({'; '.join(overflows)}), and at "
                                f"{topology.ngpus} GPUs and one chunk per rank teccl has no "
                                "coarser candidate")


def _build_first(name: str, build: Callable[[], Schedule | None], kept: Incumbent,
                 skipped: list[str]) -> Schedule | None:
    """The schedule of first-file candidate ``name``, built soon rather than good (what it
    skips is added to ``skipped``: the search improves on it); None where it does not
    apply here after all (noted as refused)."""
    try:
        with hurried() as skips:
            schedule = build()
    except (TimeLimitReached, VerificationError):
        raise
    except TecclError as e:
        kept.refuse(name, e)
        return None
    skipped.extend(skips)
    return schedule


def _nearer_first(candidates: Iterator[tuple[str, Callable[[], Schedule | None]]],
                  options: CompileOptions, timer: Timer, kept: Incumbent) -> None:
    """Where the first file is more than :data:`FIRST_FILE_GAP` times the bound (a ring
    whose ranks span boxes sends every chunk over the slow links between them), build
    the cheap candidates after it (quick to build, by :func:`first_candidates`) and
    lower them in the order of their schedules' predicted finish, those predicted
    earlier than the file kept that can be written in the time left, until one's file
    is kept: a short limit may end while the search is on its first, slow candidate,
    leaving the first file as the one written. The prediction is not the file: one
    refused, or whose file is no faster, gives way to the next, with a note: a first
    candidate whose lowering the runtime refuses would otherwise leave the far file."""
    best = kept.best
    ratio = kept.ratio(best.finish_s) if best is not None else None
    if ratio is None or ratio <= FIRST_FILE_GAP:
        return
    built = sorted((s for name, build in candidates
                    if (s := _build_first(name, build, kept, [])) is not None),
                   key=lambda s: s.finish_time_s)
    for schedule in built:
        if schedule.finish_time_s >= kept.best.finish_s * (1 - TIE) or \
                timer.write_s(schedule) > left():
            continue
        kept.tell(f"first file: lowering the {describe(schedule)}, predicted "
                  f"{schedule.finish_time_s / kept.best.finish_s:.2g}× the file kept")
        try:
            with _gated(schedule, options):
                data = render(schedule, options, progress=kept.tell, timer=timer)
        except TimeLimitReached:
            raise
        except TecclError as e:
            kept.notes.append(f"anytime: the first file's {describe(schedule)} was not "
                              f"kept ({e})")
            continue
        if _offer_first(kept, schedule, data, timer, options):
            return
        kept.notes.append(f"anytime: the first file's {describe(schedule)} was not kept "
                          "(its file is no faster than the file kept)")


def _offer_first(kept: Incumbent, schedule: Schedule, data: bytes, timer: Timer,
                 options: CompileOptions) -> bool:
    """:func:`_offer` a first file, ``data`` of ``schedule`` (lowered: timed by its own
    replay), gated as :func:`_gated` gated it."""
    if options.lowered:
        timer.replay_written(schedule, data, schedule_replay=False)
    return _offer(kept, schedule, data, timer, "first file", _verifier_alone(options))


def _offer(kept: Incumbent, schedule: Schedule, data: bytes, timer: Timer, stage: str,
           unchecked: bool = False) -> bool:
    """Offer ``kept`` the verified file ``data`` of ``schedule`` at its time by the best
    measure there is (a replay the deadline stopped cuts the compile short, and the
    epoch model's prediction times the file); ``unchecked``: the schedule checker has
    not run on it (:func:`_gated`)."""
    try:
        timing = timer.timing(schedule)
    except TimeLimitReached as e:  # the schedule's replay, where nothing replayed its file
        timing = Timing(schedule.finish_time_s, unreplayed=str(e))
    if timing.unreplayed is not None:
        kept.cut(timing.unreplayed)
    source = f"{stage}: {describe(schedule)}"
    if timing.file_s is None and timer.files:  # the ratio shown is not the file's
        source += f" (the {timing.measured_by}'s prediction, not the file's replay)"
    if not kept.offer(schedule, data, timing.finish_s, source, checked=not unchecked):
        return False
    # written already: the search keeps no time for it; a finalist must beat its file's
    # replay, if it has one (not the prediction standing for a replay out of time)
    timer.kept(schedule, timing.file_s)
    return True


def _no_search(kept: Incumbent, params: SolveParams, checks_s: float) -> str:
    """Why a compile ended before its search began, ``checks_s`` after the compile did:
    what used up the limit (the stage whose check raised only found it gone)."""
    limit = params.time_limit_s
    if kept.before_s >= limit:
        return (f"the time limit of {limit:g} s was used up before the search began "
                f"(start-up, imports and reading the input took all of it)")
    rest = ", and the rest is kept for writing the file" \
        if kept.before_s + checks_s < limit else ""
    return (f"the time limit of {limit:g} s was used up before the search began "
            f"(start-up, imports and reading the input took {kept.before_s:.2g} s of it, "
            f"checking the input and its bound {checks_s:.2g} s{rest})")


ROWS_ALONE = ("anytime: no search after the row AlltoAll's file: no other method fits one "
              "compile's memory at this size, and the search beside the file kept would "
              "pass 8 GB")


def _first_file_needs(kept: Incumbent, timer: Timer, topology: Topology,
                      collective: Collective) -> str:
    """What the message of a compile out of time without a file adds: the candidates
    refused and why, and about how long a first file takes here. A row AlltoAll's cost
    is known by its method (:func:`~te_ccl.model.footprint.row_first_file_s`: its
    chunk-hops). Else lowering (or, where nothing is lowered,
    checking) and verifying it take the pace timed (else the default pace) per transfer,
    never less than one pass: of the candidate under way, after the time it took to
    build it; else of one transfer per chunk and rank receiving it, the fewest any file
    has."""
    refused = "".join(f"; no file from {why}" for why in kept.refused)
    rows = row_first_file_s(topology, collective)
    if rows is not None:
        return f"{refused}; {row_needs(rows[0])}"
    attempt = kept.attempt
    if attempt is not None:
        n = len(attempt.transfers)
        need = kept.attempt_s + max(timer.write_s(attempt), timer.pace * n)
        return (f"{refused}; the first file ({describe(attempt)}, {n} transfers) needs "
                f"about {need:.2g} s here")
    n = sum(collective.received().values())
    need = max(timer.write_n(n, lowered=False), timer.pace * n)
    return (f"{refused}; no {'other ' if refused else ''}schedule was built in time, and a "
            f"first file (at least {n} transfers, one per chunk delivered) needs about "
            f"{need:.2g} s more to lower and verify here")


def _improve(topology: Topology, collective: Collective, params: SolveParams,
             options: CompileOptions, timer: Timer, kept: Incumbent) -> None:
    """Search (the file kept is one of the candidates, :func:`solve_best`'s ``known``,
    unless it was built in a hurry: then the search runs its method in full),
    and keep the search's schedule where it is not the file kept, finishes earlier by
    the judge and is lowered and verified in the time left. A scale schedule that cannot
    be in the time left, or (of another chunking) does not fit the runtime, gives way to
    the chunking asked for solved again by the scale backend (:func:`_rescaled`); else
    the file kept stands."""
    search = _search(params)
    known = (((kept.best.source, kept.best.schedule),)
             if kept.best is not None and not kept.hurried else ())
    held = {kept.best.schedule.info.backend} if kept.best is not None else set()
    known += tuple((name, s) for name, s in plan_only(topology, collective, options.fmt, search)
                   if s.info.backend not in held)  # a first file may be the plan already
    schedule = solve_best(topology, collective, search, options.chunk_choices, kept.tell,
                          timer.judge, True, known)  # topology: the machine usable already
    if kept.holds(schedule):
        kept.renamed(schedule)
        return
    if kept.best is not None:
        if timer.judge(schedule) >= kept.best.finish_s:
            return
        need = timer.write_s(schedule) if options.lowered else 0.0
        if need > left():
            why = f"needs ~{need:.2g} s to lower and verify, with {left():.2g} s left"
            kept.cut(f"the search's best, {describe(schedule)}, {why}")
            schedule = _rescaled(schedule, collective, kept, search, timer, why)
            if schedule is None:
                return
    try:
        with _checked_alongside(schedule):
            schedule, data = render_fitting(schedule, options, search, kept.tell, timer,
                                            fallback=kept.best is not None)
    except RuntimeLimitError as e:
        if kept.best is None or asked_chunking(schedule) == collective:
            raise  # solved again with fewer sub-chunks already
        again = _rescaled(schedule, collective, kept, search, timer,
                          f"does not fit the runtime ({e})")
        if again is None:
            raise
        with _checked_alongside(again):
            schedule, data = render_fitting(again, options, search, kept.tell, timer,
                                            fallback=True)
    if not _offer(kept, schedule, data, timer, "search"):
        kept.notes.append(f"anytime: the search's file ({describe(schedule)}) did not "
                          "finish earlier than the file kept")


def _rescaled(schedule: Schedule, collective: Collective, kept: Incumbent,
              params: SolveParams, timer: Timer, why: str) -> Schedule | None:
    """Where the search's best, a scale ``schedule``, cannot be written (``why``):
    ``collective`` (the chunking asked for) solved again by the scale backend with at
    most as many pieces per rank (chunks times sub-chunks) as the time left once solved
    again lowers at ``schedule``'s pace (transfers grow with pieces), if that makes more
    than one piece of a chunk and finishes earlier than the file kept, with a note; else
    None."""
    fewer = int(lowerable(schedule, timer) / collective.chunks_per_rank)
    if schedule.info.backend != "scale" or fewer < 2:
        return None
    kept.tell(f"the search's best {why}; solving again with at most {fewer} sub-chunks "
              "per chunk")
    again = solved_again(schedule, collective, fewer, params, kept.tell, timer)
    if timer.write_s(again) > left() or timer.judge(again) >= kept.best.finish_s:
        return None
    return again.with_info(notes=again.info.notes + (
        f"anytime: the search's best, {describe(schedule)}, {why}: solved again with "
        f"{again.info.subchunks} sub-chunks per chunk",))


MIN_SEARCH_S = 1e-3  # a search's share past the deadline (it stops at its first check)
WRITE_RESERVE_S = 0.3  # kept from the search and the files it improves on, for writing the
#                        file kept and its report (the bytes are ready: only the write is left)
RESERVE_S_PER_DELIVERY = 1.5e-6  # and per chunk delivered: the passes of a large lowering
#                                  look at the clock seconds apart (1024 GPUs: ~1.6 s more)
FIRST_FILE_GAP = 2.0  # a first file beyond this × the bound: the other cheap candidates are
#                      built, and the one predicted fastest lowered too (_nearer_first)


def _verifier_alone(options: CompileOptions) -> bool:
    """Whether a first file is gated by the MSCCL XML verifier alone, the schedule
    checker left for the end (:func:`_check_kept`): the verifier checks the file the
    runtime runs, sharing nothing with the solver, and the checker beside it would take
    a share of the first file's time. Not where the tables of FRED switches are made
    from the schedule."""
    return options.fmt == "xml" and options.fred_tables is None


def _gated(schedule: Schedule, options: CompileOptions) -> AbstractContextManager[None]:
    """What gates a first file's lowering and verifying besides the verifier: nothing
    where it is left alone (:func:`_verifier_alone`), else the checker
    (:func:`_checked_alongside`)."""
    return nullcontext() if _verifier_alone(options) else _checked_alongside(schedule)


def _check_kept(kept: Incumbent) -> None:
    """Run the schedule checker on the file kept where it is a first file the verifier
    alone passed (:func:`_gated`): one the checker refuses is not written
    (:class:`VerificationError`); with no time left for it by estimate
    (:func:`~te_ccl.compiler.judge.check_s`: it reads every transfer before it looks at
    the deadline), the file is written unchecked, with a note (``schedule_checked`` false
    in ``--json``)."""
    best = kept.best
    if best is None or best.checked:
        return
    if (n := len(best.schedule.transfers)) > MAX_TRANSFERS:  # a record each: out of memory
        kept.notes.append(f"anytime: the schedule checker did not run on the file written "
                          f"({n:,} transfers, more than the {MAX_TRANSFERS:,} it holds in "
                          "memory); the MSCCL XML verifier passed it")
        return
    try:
        check(CHECKING)
        if (need := check_s(len(best.schedule.transfers))) > left():
            raise TimeLimitReached(f"it would take ~{need:.2g} s, {left():.2g} s left")
        refuse(check_schedule(best.schedule))
    except TimeLimitReached as e:
        kept.notes.append(f"anytime: the schedule checker did not run on the file written "
                          f"({e}); the MSCCL XML verifier passed it")
        return
    kept.passed_checker()


@contextmanager
def _checked_alongside(schedule: Schedule) -> Iterator[None]:
    """Run the body (lowering and verifying the file) once the independent checker has
    passed ``schedule``, or from :data:`PARALLEL_FROM` transfers while it checks in a
    forked process (:mod:`te_ccl.background`) at the lowest priority: it takes what the
    body leaves of the cores (the lowering's passes on one core, the wait for the slower
    of two halves), so it runs beside the lowering rather than after it, and at the
    compile's priority once the body is done (:meth:`~te_ccl.background.Background.hurry`:
    other work on the machine would starve it). A schedule the checker refuses raises
    :class:`VerificationError` even where the body failed too: that failure would only
    follow from it. Out of time, the check is dropped."""
    if len(schedule.transfers) < PARALLEL_FROM or workers() < 2:
        refuse(check_schedule(schedule))
        yield
        return
    job = in_background(check_schedule, schedule, low_priority=True, doing=CHECKING)
    try:
        yield
    except (TimeLimitReached, KeyboardInterrupt):
        job.cancel()
        raise
    except BaseException:
        refuse(job.result())
        raise
    job.hurry()
    refuse(job.result())
