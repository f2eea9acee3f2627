"""One algorithm per message-size range, the way MSCCL algorithm libraries ship them.

Small messages are latency-bound (few steps win), large ones bandwidth-bound, so
``teccl compile --sizes 1KB..1GB`` splits the range at powers of 2 or 4, compiles one
schedule per range at the range's geometric middle, merges neighbouring ranges whose
schedules come out identical, and gives each its ``minBytes``/``maxBytes`` (inclusive,
non-overlapping, as the MSCCL runtime selects an algorithm when ``minBytes ≤ size ≤
maxBytes``). A time limit is the whole library's: each range's search gets an even share
of the time left (``SHARES.ranges`` of it; lowering and verifying the files get the
rest), so a range that ends early leaves its time to those after it; one whose search has
no schedule in its share takes the first cheap candidate that builds. Out of time while
the files are made, the library keeps the ranges made (:func:`made_in_time`).

>>> size_ranges(1000, 10**6, step=4)
[(1000, 1023), (1024, 4095), (4096, 16383), (16384, 65535), (65536, 262143), (262144, 1000000)]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from te_ccl.collective.model import Collective
from te_ccl.deadline import SHARES, Budget, TimeLimitReached, left, until
from te_ccl.errors import SpecError
from te_ccl.schedule import Schedule
from te_ccl.units import UnitError, parse_size

__all__ = ["SizedSchedule", "size_ranges", "parse_size_range", "compile_size_ranges",
           "made_in_time"]

T = TypeVar("T")


@dataclass(frozen=True)
class SizedSchedule:
    """A schedule compiled at ``size_bytes`` to be used for ``min_bytes ≤ size ≤ max_bytes``
    (None where none was had in time: ``why``)."""

    min_bytes: int
    max_bytes: int
    size_bytes: int
    schedule: Schedule | None
    why: str = ""


def parse_size_range(text: str) -> tuple[int, int]:
    """``"1KB..1GB"`` → ``(1000, 10**9)``; raises SpecError naming ``--sizes``."""
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
                        compile_one: Callable[[Collective], Schedule], *, step: int = 4,
                        first: Callable[[Collective], Schedule | None] | None = None
                        ) -> list[SizedSchedule]:
    """Compile ``collective`` once per size range of ``[low, high]``.

    ``compile_one(collective) -> Schedule`` does the work (e.g. ``lambda c: solve(topo, c,
    params)``); each call gets ``collective`` with ``size_bytes`` set to the range's
    geometric middle. Neighbouring ranges with identical schedules (same transfers, so the
    same XML up to the byte counts) are merged into one. Lower each result with
    ``lower_to_msccl(item.schedule, min_bytes=item.min_bytes, max_bytes=item.max_bytes)``.
    Each call runs in an even share of what is left of ``SHARES.ranges`` of the time;
    where it runs out, ``first(collective)`` (a cheap schedule, or None) stands in for
    it, so one slow range does not cost the library; without one the range has no
    schedule, and the deadline's error, naming it, says why (:func:`made_in_time`).
    """
    out: list[SizedSchedule] = []
    ranges = size_ranges(low, high, step=step)
    searches = Budget.of(left() * SHARES.ranges)  # endless without a deadline
    for i, (lo, hi) in enumerate(ranges):
        size = max(lo, min(hi, round(math.sqrt(lo * hi))))
        share = searches.left() / (len(ranges) - i)
        try:
            with until(share):
                sched = compile_one(replace(collective, size_bytes=size))
        except TimeLimitReached as e:
            cheap = first(replace(collective, size_bytes=size)) if first else None
            if cheap is None:
                out.append(SizedSchedule(lo, hi, size, None, (
                    f"size range {lo}..{hi} bytes ({i + 1} of {len(ranges)}, {share:.2g} s "
                    f"of the time left): {e}")))
                continue
            sched = cheap.with_info(notes=cheap.info.notes + (
                f"size range {lo}..{hi}: its search had no schedule in its {share:.2g} s; "
                "the first cheap candidate kept",))
        if out and out[-1].schedule is not None and _same(out[-1].schedule, sched):
            out[-1] = replace(out[-1], max_bytes=hi)
        else:
            out.append(SizedSchedule(lo, hi, size, sched))
    return out


def made_in_time(items: list[SizedSchedule], make: Callable[[SizedSchedule], T]
                 ) -> tuple[list[T], str | None]:
    """``make(item)`` (its file lowered and verified) for each range with a schedule, in
    turn while the deadline allows, and a note naming the ranges without a file (None:
    every range has one).

    A library is loadable in part: the runtime loads each file on its own and runs the
    algorithm whose ``minBytes..maxBytes`` holds a call's size, and for a size no file
    holds, NCCL's (RCCL's) own. So ranges the time ran out on are left to the runtime
    rather than losing the ranges made, or stretching a file compiled for other sizes
    over them. Without any file the deadline's error, naming the first range without
    one, ends the compile."""
    made: list[T] = []
    missed: list[SizedSchedule] = []
    for i, item in enumerate(items):
        if item.schedule is None:
            missed.append(item)
            continue
        try:
            made.append(make(item))
        except TimeLimitReached as e:  # the deadline: no range after it is made either
            why = (f"size range {item.min_bytes}..{item.max_bytes} bytes ({i + 1} of "
                   f"{len(items)}): {e}")
            missed += [replace(m, why=m.why or why) for m in items[i:]]
            break
    if not missed:
        return made, None
    if not made:
        raise TimeLimitReached(missed[0].why)
    spans = ", ".join(f"{m.min_bytes}..{m.max_bytes}" for m in missed)
    return made, (f"anytime: {missed[0].why}; wrote {len(made)} of {len(items)} size ranges, "
                  f"not {spans} bytes (the runtime runs its own algorithm at those sizes; "
                  "--time-limit SECONDS allows more)")
