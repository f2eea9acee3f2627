"""The best verified file of a compile so far, and how it got there.

A compile under a time limit keeps every file it has verified (lowered, passed by the
independent verifier, timed by its replay) only while none finishes earlier: from the
first cheap candidate's file on, the compile always holds one it can write, and when
the limit ends, in whatever stage, it writes that one (:func:`te_ccl.compiler.pipeline.compile_collective`).
The history of the files kept is what ``teccl compile --json`` reports as ``incumbents``.

>>> kept = Incumbent(bound_s=1.0)
>>> kept.offer("schedule", b"<algo/>", 1.25, "first file: template ring")
True
>>> kept.offer("other", b"<algo/>", 1.5, "search: scale/greedy")  # slower: not kept
False
>>> kept.best.source, [(i.source, i.ratio) for i in kept.history]
('first file: template ring', [('first file: template ring', 1.25)])
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from te_ccl.compiler.portfolio import TIE, asked_chunking

if TYPE_CHECKING:
    from te_ccl.schedule import Schedule

__all__ = ["Improvement", "Incumbent", "Kept", "Verified", "describe"]


@dataclass(frozen=True)
class Improvement:
    """A file kept: seconds from the compile's start to its verification, the candidate
    it came from, and its finish time over the lower bound (None without a bound)."""

    t_s: float
    source: str
    ratio: float | None

    def to_json(self) -> dict[str, Any]:
        return {"t_s": round(self.t_s, 3), "source": self.source, "ratio": self.ratio}


class Kept(str):
    """A progress message that says a better file is kept (``file kept: RATIO× the
    bound, SOURCE``; the :class:`Improvement` as ``improvement``): a terminal's status
    line shows it like any message, and a pipe gets it as a line of its own at once
    (``teccl compile``), not only at the next periodic line."""

    improvement: Improvement

    def __new__(cls, text: str, improvement: Improvement) -> Kept:
        told = super().__new__(cls, text)
        told.improvement = improvement
        return told


@dataclass(frozen=True)
class Verified:
    """A file that can be written: the schedule, its bytes (verified), its finish time
    by the best measure there is, where it came from, and whether the schedule checker
    passed it too (a first file's MSCCL XML is gated by the verifier alone: the compile
    checks its schedule once it is still the file kept at the end)."""

    schedule: Schedule
    data: bytes
    finish_s: float
    source: str
    checked: bool = True


@dataclass
class Incumbent:
    """The file a compile would write now (``best``) and the history of the files kept.

    ``progress`` hears every message of the compile with the file kept appended (its
    ratio to the bound and source), so a terminal's status line and the plain progress
    lines of a pipe show it as it improves. ``cut_short`` says why the compile stopped
    before it had written the best schedule it found (None: it did not); ``notes`` what
    the compile tried past the file kept.
    """

    bound_s: float
    progress: Callable[[str], None] | None = None
    started: float = field(default_factory=lambda: time.monotonic())  # read at call time, as the deadline reads it
    history: list[Improvement] = field(default_factory=list)
    cut_short: str | None = None
    notes: list[str] = field(default_factory=list)
    attempt: Schedule | None = None  # the candidate being made a file while none is kept
    attempt_s: float = 0.0  # when it was built
    refused: list[str] = field(default_factory=list)  # candidates that gave no file, and why
    hurried: bool = False  # the first file skipped an improvement (deadline.hurried)
    files: list[Verified] = field(default_factory=list)  # every file kept, the first first
    before_s: float = 0.0  # of the time limit, spent before the compile began (start-up)

    @property
    def best(self) -> Verified | None:
        """The file kept: the last of :attr:`files` (None before the first)."""
        return self.files[-1] if self.files else None

    def trying(self, schedule: Schedule) -> None:
        """``schedule`` is being lowered and verified (what a first file takes is
        estimated from it, if the time runs out first)."""
        self.attempt, self.attempt_s = schedule, self.elapsed()

    def refuse(self, name: str, why: Exception) -> None:
        """Candidate ``name`` gave no first file (``why``): noted, and no longer what a
        first file is estimated from."""
        self.notes.append(f"anytime: no first file from the {name} ({why})")
        self.refused.append(f"the {name}: {why}")
        self.attempt = None

    def ratio(self, finish_s: float) -> float | None:
        return finish_s / self.bound_s if self.bound_s > 0 else None

    def offer(self, schedule: Schedule, data: bytes, finish_s: float, source: str,
              checked: bool = True) -> bool:
        """Keep this verified file if it finishes earlier than the one kept (by more
        than the race's :data:`~te_ccl.compiler.portfolio.TIE`)."""
        if self.best is not None and finish_s >= self.best.finish_s * (1 - TIE):
            return False
        self.files.append(Verified(schedule, data, finish_s, source, checked))
        self.history.append(Improvement(self.elapsed(), source, self.ratio(finish_s)))
        if self.progress is not None:
            self.progress(Kept(self.shown(), self.history[-1]))
        return True

    def holds(self, schedule: Schedule) -> bool:
        """Is ``schedule`` (notes aside) the one kept?"""
        return self.best is not None and schedule.transfers is self.best.schedule.transfers

    def renamed(self, schedule: Schedule) -> None:
        """The kept file's schedule is ``schedule`` (the same transfers, with the notes of
        the search that kept it too)."""
        assert self.best is not None and self.holds(schedule)
        self.files[-1] = replace(self.files[-1], schedule=schedule)

    def passed_checker(self) -> None:
        """The schedule checker passed the file kept."""
        assert self.best is not None
        self.files[-1] = replace(self.files[-1], checked=True)

    def cut(self, why: str) -> None:
        """The time limit stopped the compile short of writing the best it found."""
        self.cut_short = self.cut_short or why

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def first_file_s(self) -> float | None:
        return self.history[0].t_s if self.history else None

    def shown(self) -> str:
        """The file kept, in a few words."""
        if self.best is None:
            return "no file yet"
        r = self.ratio(self.best.finish_s)
        at = f"{r:.4f}× the bound" if r is not None else f"{self.best.finish_s:.4g} s"
        return f"file kept: {at}, {self.best.source}"

    def tell(self, message: str) -> None:
        """``message`` to ``progress``, with the file kept."""
        if self.progress is not None:
            self.progress(f"{message} [{self.shown()}]" if self.best is not None else message)


def describe(schedule: Schedule) -> str:
    """Where a schedule came from, in a few words: its method, chunks and sub-chunks."""
    info = schedule.info
    if info.backend.startswith("baseline:"):
        what = f"template {info.backend.removeprefix('baseline:')}"
    elif info.backend in ("scale", "grid"):
        what = info.status.split(":")[0]
    else:
        what = f"{info.backend} solve"
    k = info.subchunks
    chunks = f"{asked_chunking(schedule).chunks_per_rank} chunk(s) per rank"
    return f"{what}, {chunks}" + (f" × {k} sub-chunks" if k > 1 else "")
