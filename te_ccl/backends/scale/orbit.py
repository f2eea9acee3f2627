"""Schedule one source's broadcast trees with a per-class link budget (the orbit problem).

Edges are (chunk ``j``, tree edge) pairs; an edge may start once its parent edge has
delivered (``start(parent) + delay``); each direction class starts at most ``capacity``
edges in any ``occupancy`` consecutive epochs (translated copies of the schedule share the
physical links exactly so, see :mod:`te_ccl.backends.scale.symmetry`). Goal: the smallest
makespan ``max(start + delay)``.

:func:`list_schedule` is highest-level-first list scheduling (the ready edge with the
longest path of delays below it goes first); :func:`improve_cpsat` hands the same problem
to CP-SAT (intervals, one cumulative per class, precedences), hinted with the list schedule,
when the list schedule misses the simple lower bound.

>>> import numpy as np
>>> orb = Orbit(parent=np.array([-1, 0, -1]), cls=np.array([0, 0, 1]), delay=2)
>>> list_schedule(orb).tolist(), orb.makespan(list_schedule(orb)), orb.lower_bound()
([0, 2, 0], 4, 4)
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from te_ccl.deadline import check

__all__ = ["Orbit", "list_schedule", "improve_cpsat"]

ORBIT = "scheduling the torus orbit"  # what a deadline reached interrupted


@dataclass(frozen=True)
class Orbit:
    """Edges as arrays: ``parent`` index (−1 at the root), direction ``cls``; uniform links."""

    parent: np.ndarray
    cls: np.ndarray
    delay: int
    capacity: int = 1
    occupancy: int = 1

    def heights(self) -> np.ndarray:
        """Epochs from an edge's start to the last delivery below it (parents precede children)."""
        h = np.full(len(self.parent), self.delay, dtype=np.int64)
        for e in range(len(self.parent) - 1, -1, -1):
            p = self.parent[e]
            if p >= 0:
                h[p] = max(h[p], h[e] + self.delay)
        return h

    def lower_bound(self) -> int:
        counts = np.bincount(self.cls)
        per_class = int(((-(-counts // self.capacity)) - 1).max()) * self.occupancy + self.delay
        return max(per_class, int(self.heights().max()))

    def makespan(self, start: np.ndarray) -> int:
        return int((start + self.delay).max())


def list_schedule(orb: Orbit) -> np.ndarray:
    """Start epoch of every edge by highest-level-first list scheduling per class."""
    height = orb.heights()
    children: dict[int, list[int]] = defaultdict(list)
    release: dict[int, list[int]] = defaultdict(list)
    for e, p in enumerate(orb.parent.tolist()):
        (children[p] if p >= 0 else release[0]).append(e)
    ready: dict[int, list[tuple[int, int]]] = defaultdict(list)
    free_at = defaultdict(int)
    start = np.full(len(orb.parent), -1, dtype=np.int64)
    left, t = len(orb.parent), 0
    while left:
        check(ORBIT)
        for e in release.pop(t, ()):
            heapq.heappush(ready[int(orb.cls[e])], (-int(height[e]), e))
        for c, heap in ready.items():
            if free_at[c] > t:
                continue
            took = min(orb.capacity, len(heap))
            for _ in range(took):
                _, e = heapq.heappop(heap)
                start[e] = t
                release[t + orb.delay].extend(children[e])
            left -= took
            if took:
                free_at[c] = t + orb.occupancy
        t += 1
    return start


def improve_cpsat(orb: Orbit, hint: np.ndarray, time_limit_s: float, threads: int = 1,
                  seed: int = 0) -> tuple[np.ndarray, bool]:
    """CP-SAT on the orbit problem from ``hint``: (best starts, proven optimal)."""
    from ortools.sat.python import cp_model  # a second to import (pandas): only when used

    horizon = orb.makespan(hint)
    m = cp_model.CpModel()
    s = [m.NewIntVar(0, horizon - orb.delay, f"s{e}") for e in range(len(orb.parent))]
    by_class: dict[int, list] = defaultdict(list)
    for e, p in enumerate(orb.parent.tolist()):
        if p >= 0:
            m.Add(s[e] >= s[p] + orb.delay)
        by_class[int(orb.cls[e])].append(
            m.NewFixedSizeIntervalVar(s[e], orb.occupancy, f"i{e}"))
        m.AddHint(s[e], int(hint[e]))
    for intervals in by_class.values():
        if orb.capacity == 1:
            m.AddNoOverlap(intervals)
        else:
            m.AddCumulative(intervals, [1] * len(intervals), orb.capacity)
    span = m.NewIntVar(orb.lower_bound(), horizon, "makespan")
    m.AddMaxEquality(span, [x + orb.delay for x in s])
    m.Minimize(span)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, time_limit_s)
    solver.parameters.num_workers = threads
    solver.parameters.random_seed = seed
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return hint, False
    best = np.array([solver.Value(x) for x in s], dtype=np.int64)
    if orb.makespan(best) > orb.makespan(hint):
        return hint, False
    return best, status == cp_model.OPTIMAL
