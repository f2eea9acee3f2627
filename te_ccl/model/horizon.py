"""Cheap lower bounds on the number of epochs, where the horizon search starts.

* distance: a destination cannot hold a chunk before the sum of link delays from the
  nearest holder;
* in-capacity: destination ``v`` needs ``n_v`` chunks; link ``l`` into it can deliver at
  most ``cap_l·ceil((H − d_l + 1)/k_l)`` of them by epoch ``H``.
"""

from __future__ import annotations

from collections import Counter

from te_ccl.errors import SolverError
from te_ccl.model.problem import Problem
from te_ccl.model.ten import TimeExpandedNetwork

__all__ = ["horizon_lower_bound"]


def _deliverable(problem: Problem, node: str, horizon: int) -> int:
    total = 0
    for lt in problem.timings.values():
        if lt.key[1] == node and horizon >= lt.delay:
            total += lt.capacity * -(-(horizon - lt.delay + 1) // lt.occupancy)
    return total


def horizon_lower_bound(problem: Problem) -> int:
    ten = TimeExpandedNetwork(problem, 0)
    lo, need = 0, Counter()
    for d in problem.demands:
        unmet = ten.unmet(d)
        first = ten.earliest(d)
        for v in unmet:
            if v not in first:
                raise SolverError(f"infeasible: chunk {d.chunk} cannot reach {v} from "
                                  f"{', '.join(d.sources)} (no path)")
            lo = max(lo, first[v])
            need[v] += 1
    for v, n in need.items():
        h = lo
        while _deliverable(problem, v, h) < n:
            h += 1
        lo = h
    return lo
