"""What a simulation reports: finish time, per-GPU completion, per-link busy time."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from te_ccl.simulate.engine import Task, TaskTimes

__all__ = ["finish_of", "LinkUse", "Interval", "SimResult", "summarise"]


@dataclass(frozen=True)
class Interval:
    """One chunk on one link: busy ``[start_s, end_s)``, held at the far end from ``arrive_s``."""

    src: str
    dst: str
    label: str
    start_s: float
    end_s: float
    arrive_s: float


@dataclass(frozen=True)
class LinkUse:
    src: str
    dst: str
    transfers: int
    busy_s: float
    utilisation: float  # busy time / finish time


@dataclass(frozen=True)
class SimResult:
    """``finish_time_s``: the collective's time — the last GPU has its whole demand *and*
    every transfer has arrived (the MSCCL kernel returns only when every thread block is
    done, so a transfer no GPU needed still counts); ``gpu_finish_s``: when each GPU has
    its demand; ``last_arrival_s``: when the last transfer arrives."""

    finish_time_s: float
    last_arrival_s: float
    gpu_finish_s: dict[str, float]
    links: tuple[LinkUse, ...]
    intervals: tuple[Interval, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "finish_time_s": self.finish_time_s,
            "last_arrival_s": self.last_arrival_s,
            "gpu_finish_s": dict(self.gpu_finish_s),
            "links": [{"src": u.src, "dst": u.dst, "transfers": u.transfers,
                       "busy_s": u.busy_s, "utilisation": u.utilisation} for u in self.links],
        }


def finish_of(tasks: list[Task], times: list[TaskTimes],
              gpu_finish_s: dict[str, float]) -> tuple[float, float]:
    """``(finish, last arrival)``: the last GPU done or the last transfer in, the later."""
    last = max((tt.arrive_s for task, tt in zip(tasks, times, strict=True) if task.link),
               default=0.0)
    return max(max(gpu_finish_s.values(), default=0.0), last), last


def summarise(tasks: list[Task], times: list[TaskTimes],
              gpu_finish_s: dict[str, float]) -> SimResult:
    """Fold task times into a :class:`SimResult` (busy time and utilisation per link)."""
    finish, last = finish_of(tasks, times, gpu_finish_s)
    busy: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    moves = [(task, tt) for task, tt in zip(tasks, times, strict=True) if task.link is not None]
    for task, tt in moves:
        busy[task.link] += tt.end_s - tt.start_s
        count[task.link] += 1
    span = finish
    links = tuple(LinkUse(k[0], k[1], count[k], busy[k], busy[k] / span if span else 0.0)
                  for k in sorted(busy))
    intervals = tuple(Interval(task.link[0], task.link[1], task.label, tt.start_s, tt.end_s,
                               tt.arrive_s) for task, tt in moves)
    return SimResult(finish, last, gpu_finish_s, links, intervals)
