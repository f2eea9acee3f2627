"""A whole sweep: plan (what is already done), run the rest, store each point as it lands."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from te_ccl.sweep.executors import Executor
from te_ccl.sweep.points import Point
from te_ccl.sweep.store import ResultStore

__all__ = ["SweepPlan", "SweepOutcome", "plan_sweep", "run_sweep"]

OnRecord = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class SweepPlan:
    """The grid's points, the records of those already done, and those left to run
    (largest first)."""

    points: tuple[Point, ...]
    done: dict[str, dict[str, Any]]
    todo: tuple[Point, ...]


@dataclass
class SweepOutcome:
    """Records of every finished point (old and new) and where the index was written."""

    points: tuple[Point, ...]
    records: dict[str, dict[str, Any]]
    skipped: int
    index: Path | None = None
    interrupted: bool = False
    counts: Counter = field(default_factory=Counter)

    @property
    def all_ok(self) -> bool:
        return not self.interrupted and self.counts["ok"] == len(self.points)


def plan_sweep(points: list[Point], store: ResultStore, *, retry_failed: bool = False) -> SweepPlan:
    """Split ``points`` into done (a complete record with the same key) and to do."""
    done = {}
    for p in points:
        record = store.load(p)
        if record is not None and (record["status"] == "ok" or not retry_failed):
            done[p.key] = record
    todo = sorted((p for p in points if p.key not in done), key=_cost, reverse=True)
    return SweepPlan(tuple(points), done, tuple(todo))


def _cost(point: Point) -> int:
    """Rough model size (links × chunks): running big points first keeps workers busy at
    the end of a sweep instead of waiting on one long straggler."""
    return len(point.topology.links) * point.collective.nchunks


def run_sweep(plan: SweepPlan, store: ResultStore, executor: Executor, *,
              on_record: OnRecord | None = None) -> SweepOutcome:
    """Run ``plan.todo`` on ``executor``; every result is stored the moment it arrives
    (the results directory is created first if missing, :meth:`ResultStore.prepare`).

    On KeyboardInterrupt the index is still written (unfinished points as ``pending``)
    and the interrupt re-raised, after the executor has cancelled what was queued.
    """
    store.prepare()
    outcome = SweepOutcome(plan.points, dict(plan.done), skipped=len(plan.done))
    try:
        for point, result in executor.run(plan.todo):
            record = store.save(point, result)
            outcome.records[record["key"]] = record
            if on_record is not None:
                on_record(record)
    except KeyboardInterrupt:
        outcome.interrupted = True
        raise
    finally:
        outcome.counts = Counter(r["status"] for r in outcome.records.values())
        outcome.index = store.finish(list(plan.points), outcome.records)
    return outcome
