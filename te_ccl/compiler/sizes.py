"""One algorithm per message-size range, the way MSCCL algorithm libraries ship them.

Small messages are latency-bound (few steps win), large ones bandwidth-bound, so
``teccl compile --sizes 1KB..1GB`` splits the range at powers of 2 or 4, compiles one
schedule per range at the range's geometric middle, merges neighbouring ranges whose
schedules come out identical, and gives each its ``minBytes``/``maxBytes`` (inclusive,
non-overlapping, as the MSCCL runtime selects an algorithm when ``minBytes ≤ size ≤
maxBytes``).

>>> size_ranges(1000, 10**6, step=4)
[(1000, 1023), (1024, 4095), (4096, 16383), (16384, 65535), (65536, 262143), (262144, 1000000)]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from te_ccl.backends.base import Progress, SolveParams
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective
from te_ccl.compiler.best import Usable, solve_checked
from te_ccl.compiler.fits import check_loadable
from te_ccl.compiler.judge import Timer
from te_ccl.compiler.options import CompileOptions
from te_ccl.compiler.render import render_fitting
from te_ccl.compiler.result import CompileResult, compile_notes, rooted_notes
from te_ccl.compiler.strategy import check_input
from te_ccl.errors import SpecError
from te_ccl.nogc import paused_gc
from te_ccl.outputs import check_output_file, make_output_dir, path_component, write_atomic
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["SizedSchedule", "size_ranges", "parse_size_range", "compile_size_ranges",
           "compile_size_library"]


@dataclass(frozen=True)
class SizedSchedule:
    """A schedule compiled at ``size_bytes`` to be used for ``min_bytes ≤ size ≤ max_bytes``."""

    min_bytes: int
    max_bytes: int
    size_bytes: int
    schedule: Schedule


def parse_size_range(text: str) -> tuple[int, int]:
    """``"1KB..1GB"`` → ``(1000, 10**9)``; raises SpecError naming ``--sizes``."""
    from te_ccl.units import UnitError, parse_size

    lo, sep, hi = text.partition("..")
    try:
        if not sep:
            raise UnitError(f"expected LOW..HIGH such as 1KB..1GB, got {text!r}")
        low, high = parse_size(lo), parse_size(hi)
    except UnitError as e:
        raise SpecError(str(e), key="--sizes") from None
    if low > high:
        raise SpecError(f"expected LOW <= HIGH, got {text!r}", key="--sizes")
    return low, high


def size_ranges(low: int, high: int, *, step: int = 4) -> list[tuple[int, int]]:
    """``[low, high]`` cut at every power of ``step`` (2 or 4) inside it, bounds inclusive."""
    if step not in (2, 4):
        raise SpecError(f"expected a step of 2 or 4, got {step}", key="--sizes")
    if not 0 < low <= high:
        raise SpecError(f"expected 0 < LOW <= HIGH, got {low}..{high}", key="--sizes")
    k = math.floor(math.log(low, step)) + 1
    cuts = []
    while step**k <= high:
        cuts.append(step**k)
        k += 1
    starts = [low] + [c for c in cuts if c > low]
    ends = [s - 1 for s in starts[1:]] + [high]
    return list(zip(starts, ends, strict=True))


def _same(a: Schedule, b: Schedule) -> bool:
    return (a.collective.chunks_per_rank == b.collective.chunks_per_rank
            and a.transfers == b.transfers)


def compile_size_ranges(collective: Collective, low: int, high: int,
                        compile_one: Callable[[Collective], Schedule], *,
                        step: int = 4) -> list[SizedSchedule]:
    """Compile ``collective`` once per size range of ``[low, high]``.

    ``compile_one(collective) -> Schedule`` does the work (e.g. ``lambda c: solve(topo, c,
    params)``); each call gets ``collective`` with ``size_bytes`` set to the range's
    geometric middle. Neighbouring ranges with identical schedules (same transfers, so the
    same XML up to the byte counts) are merged into one. Lower each result with
    ``lower_to_msccl(item.schedule, min_bytes=item.min_bytes, max_bytes=item.max_bytes)``.
    """
    out: list[SizedSchedule] = []
    for lo, hi in size_ranges(low, high, step=step):
        size = max(lo, min(hi, round(math.sqrt(lo * hi))))
        sched = compile_one(replace(collective, size_bytes=size))
        if out and _same(out[-1].schedule, sched):
            out[-1] = replace(out[-1], max_bytes=hi)
        else:
            out.append(SizedSchedule(lo, hi, size, sched))
    return out


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
    written once every range has one and every path can take it, so a compile that fails
    leaves no part of a library.

    Rooted collectives are refused: the runtime would pick these files by size for
    every root (and has no entry point for gather and scatter).
    """
    if rooted_notes(collective):
        raise SpecError(f"a size library of {collective.kind.value} would run for every "
                        "root (the MSCCL executor selects by collective and size, not by "
                        "root); compile one size without --sizes instead", key="--sizes")
    check_input(topology, replace(collective, size_bytes=high))  # before any range is compiled
    if fmt == "xml":
        check_loadable(collective)
    unit = max(replace(collective, chunks_per_rank=k).nchunks
               for k in chunk_choices or (collective.chunks_per_rank,))
    timer = Timer(options=CompileOptions(runtime=runtime))
    usable = Usable.of(topology, in_switch=False)

    def compile_one(c: Collective) -> Schedule:
        c = replace(c, size_bytes=max(unit, c.size_bytes // unit * unit))
        if progress:
            progress(f"compiling for {c.size_bytes} bytes")
        return solve_checked(usable.topology, c, params, chunk_choices, progress, timer.judge,
                             in_switch=True)

    results, files = [], []
    mode = "-inplace" if collective.inplace else ""
    with paused_gc():  # as in compile_collective: millions of young objects, no cycles
        for item in compile_size_ranges(collective, low, high, compile_one):
            name = path_component(f"{topology.name}-{collective.kind.value}{mode}-"
                                  f"{item.min_bytes}-{item.max_bytes}")
            options = CompileOptions(output=str(Path(out_dir) / f"{name}.{fmt}"), fmt=fmt,
                                     min_bytes=item.min_bytes, max_bytes=item.max_bytes, name=name,
                                     runtime=runtime)
            schedule, data = render_fitting(item.schedule, options, params, progress, timer)
            files.append((options.output, data))
            bound = lower_bound(usable.topology, schedule.collective)
            schedule = schedule.with_info(notes=schedule.info.notes
                                          + compile_notes(schedule, timer, usable.forwarded))
            results.append(CompileResult(schedule, bound.seconds, dict(bound.parts),
                                         options.output, min_bytes=item.min_bytes,
                                         max_bytes=item.max_bytes, timing=timer.timing(schedule)))
    make_output_dir(out_dir)
    for path, _ in files:  # every file can be written before any is: no half library
        check_output_file(path)
    for path, data in files:
        write_atomic(path, data)
    return results
