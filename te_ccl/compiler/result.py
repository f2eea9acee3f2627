"""What a compile returns and reports: :class:`CompileResult`, the ``--json`` object of
``teccl compile`` (:func:`summary`) and the notes every written file carries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler.incumbent import Improvement
from te_ccl.compiler.judge import XML_REPLAY_LIMIT, Timer, Timing
from te_ccl.report.metrics import bandwidths, buffer_summary, busbw_factor
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["CompileResult", "compile_notes", "declared_range", "rooted_notes", "summary"]

_RANGE = re.compile(rb'<algo\b[^>]*?\bminBytes="(\d+)"[^>]*?\bmaxBytes="(\d+)"')
_HEAD_BYTES = 4096  # the <algo> header is this near the start of an XML file


@dataclass(frozen=True)
class CompileResult:
    schedule: Schedule
    lower_bound_s: float
    bound_parts: dict[str, float]
    output: str | None
    extra_outputs: tuple[str, ...] = field(default=())
    min_bytes: int = 0
    max_bytes: int = 0
    timing: Timing | None = None  # None: not timed (the prediction stands)
    fabric: dict[str, Any] | None = None  # FRED switch limits (te_ccl.fred.limits)
    # the anytime compile's record (none where nothing was written): seconds from its
    # start to the first verified file, whether the time limit stopped it short of
    # writing the best schedule it found, every file it kept on the way, and whether the
    # schedule checker passed the file written (false: a first file the MSCCL verifier
    # passed, with no time left to check its schedule)
    first_file_s: float | None = None
    cut_short: bool = False
    incumbents: tuple[Improvement, ...] = ()
    schedule_checked: bool | None = None

    @property
    def finish_time_s(self) -> float:
        """What the compile reports: the replay of the lowered XML where there is one."""
        return (self.timing.finish_s if self.timing is not None
                else self.schedule.finish_time_s)

    def as_dict(self) -> dict[str, Any]:
        """Every metric of ``teccl compile --json``, under its names (the command prints
        this dict)."""
        return dict(self._metrics)

    def __getattr__(self, name: str) -> Any:
        """The ``--json`` keys that are not fields, as attributes: ``result.bound_ratio``,
        ``result.algbw_GBps``, ``result.max_buffer_bytes`` …"""
        if name.startswith("_") or "schedule" not in self.__dict__:  # unpickling, copying
            raise AttributeError(name)
        try:
            return self._metrics[name]
        except KeyError:
            raise AttributeError(f"'CompileResult' object has no attribute {name!r}") from None

    @cached_property
    def _metrics(self) -> dict[str, Any]:
        """:func:`summary` and the buffer counts, once (those walk every transfer, or count
        a lazy schedule's on their arrays without building them)."""
        return summary(self, self.schedule.topology) | buffer_summary(self.schedule)


def rooted_notes(collective: Collective) -> tuple[str, ...]:
    """What the MSCCL executor does with a rooted algorithm: it selects an algorithm by
    collective, size and buffer mode, never by root, and gather/scatter have no NCCL
    entry point in it."""
    kind = collective.kind
    if kind in (CollectiveKind.GATHER, CollectiveKind.SCATTER):
        return (f"msccl: the executor has no NCCL entry point for {kind.value}: no "
                "runtime call runs this file",)
    if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE):
        return (f"msccl: the executor selects an algorithm by collective, size and buffer "
                f"mode, not by root: in MSCCL_ALGO_DIR this root-{collective.root} "
                f"{kind.value} would also run for every other root; install it only where "
                f"every call uses root {collective.root}",)
    return ()


def declared_range(data: bytes, min_bytes: int, max_bytes: int
                   ) -> tuple[int, int, tuple[str, ...]]:
    """The sizes the written file serves, as its header declares them (MSCCL XML's
    ``minBytes``/``maxBytes``; another format: the range asked, ``min_bytes`` to
    ``max_bytes``), and a note where that is not the range asked: a file whose steps
    carry several chunks serves only sizes at which each step is one call."""
    found = _RANGE.search(data, 0, _HEAD_BYTES)
    if found is None:
        return min_bytes, max_bytes, ()
    low, high = int(found[1]), int(found[2])
    if (low, high) == (min_bytes, max_bytes):
        return low, high, ()
    return low, high, (f"msccl: the file serves {low} to {high} bytes (minBytes, maxBytes), "
                       f"not the {min_bytes} to {max_bytes or 'any'} asked: its steps carry "
                       "several chunks, which the runtime moves in one call only up to "
                       "that size",)


def compile_notes(schedule: Schedule, timer: Timer, forwarded: bool) -> tuple[str, ...]:
    """The notes every written file of ``schedule`` carries: what the runtime does with a
    rooted one, whether its switches were made to forward only (``forwarded``:
    :attr:`~te_ccl.compiler.best.Usable.forwarded`), and what timed it where it is not
    its file's replay."""
    notes = rooted_notes(schedule.collective)
    if forwarded:
        notes += ("msccl: switches only forward (an MSCCL send goes to one peer), so the "
                  "solve used no in-switch copy or reduction",)
        topology = schedule.topology
        nvls = [s for s in topology.switches if topology.node(s).nvls]
        if nvls:
            notes += (f"nvls: switch {nvls[0]}{' and others' if len(nvls) > 1 else ''} "
                      "reduces and multicasts (NVLink SHARP); an MSCCL++ plan "
                      "(--format mscclpp) drives it",)
    timing = timer.timing(schedule)
    if timing.unlowerable is not None:
        notes += (f"timed by the {timing.measured_by}: the MSCCL lowering fails "
                  f"({timing.unlowerable})",)
    elif timing.unreplayed is not None:
        notes += (f"timed by the {timing.measured_by}: the written file's replay stopped "
                  f"({timing.unreplayed})",)
    elif timing.file_s is None and timer.files:
        notes += (f"timed by the {timing.measured_by}: no file was written, and the XML "
                  f"replay of {len(schedule.transfers)} transfers (over {XML_REPLAY_LIMIT}) "
                  "is kept for the written file",)
    elif not timer.files:
        notes += (f"timed by the {timing.measured_by}: switches may copy and reduce here "
                  "(FRED, NVLink SHARP), which MSCCL XML cannot express",)
    return notes


def summary(result: CompileResult, topology: Topology) -> dict[str, Any]:
    """The ``--json`` object of ``teccl compile`` (keys fixed by README.md's contract).

    ``finish_time_s`` (and the bandwidths and ratio from it) is the replay of the lowered
    MSCCL XML or MSCCL++ plan, what the runtime runs; ``measured_by`` says so (``xml
    replay``, ``plan replay``), or names the fallback
    (``schedule replay`` above :data:`XML_REPLAY_LIMIT` transfers or for an output that
    is not lowered, ``epoch model`` above :data:`SIM_LIMIT`); ``file_replayed``: whether
    it is the written XML's or plan's replay (false: the fallback's prediction, or a
    schedule JSON written). ``predicted_s`` is the
    epoch model's prediction and ``schedule_replay_s`` the replay of the schedule itself.
    ``first_file_s``, ``cut_short``, ``incumbents`` and ``schedule_checked`` are the
    anytime compile's record (:class:`CompileResult`; None, false, empty and None where
    no file was written).
    """
    s, c = result.schedule, result.schedule.collective
    timing = result.timing or Timing(s.finish_time_s)
    finish, bound = timing.finish_s, result.lower_bound_s
    algbw, busbw = bandwidths(c.size_bytes, finish, busbw_factor(s))
    return {
        "topology": topology.name,
        "collective": c.kind.value,
        "ngpus": c.nranks,
        "size_bytes": c.size_bytes,
        "chunks_per_rank": c.chunks_per_rank,
        "inplace": c.inplace,
        "backend": s.info.backend,
        "solver_time_s": round(s.info.solver_time_s, 4),
        "epochs": s.finish_epoch,
        "epoch_s": s.epoch_s,
        "finish_time_s": finish,
        "measured_by": timing.measured_by,
        "file_replayed": timing.file_s is not None,
        "algbw_GBps": algbw,
        "busbw_GBps": busbw,
        "lower_bound_s": bound,
        "bound_ratio": finish / bound if bound > 0 else None,
        "predicted_s": timing.predicted_s,
        "schedule_replay_s": timing.schedule_s,
        "optimal": s.info.optimal,
        "status": s.info.status,
        "variables": s.info.variables,
        "constraints": s.info.constraints,
        "notes": list(s.info.notes),
        "transfers": len(s.transfers),
        "min_bytes": result.min_bytes,
        "max_bytes": result.max_bytes,
        "output": result.output,
        "extra_outputs": list(result.extra_outputs),
        "fabric": result.fabric,
        "first_file_s": (round(result.first_file_s, 3) if result.first_file_s is not None
                         else None),
        "cut_short": result.cut_short,
        "incumbents": [i.to_json() for i in result.incumbents],
        "schedule_checked": result.schedule_checked,
    }
