"""AllGather-shaped problems on a torus by symmetry: one orbit schedule, translated.

Applies when every GPU is the single source of the same number of chunks and each chunk
is wanted by every other GPU (AllGather, and the reversed fan-out behind ReduceScatter /
AllReduce, which on a torus is again a torus). See :mod:`te_ccl.backends.scale.symmetry`.
The orbit's list schedule is improved by CP-SAT where it misses the orbit's bound, except
for a compile's first file (:func:`te_ccl.deadline.hurried`: up to 20 s of CP-SAT).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale.moves import Moves
from te_ccl.backends.scale.orbit import ORBIT, Orbit, improve_cpsat, list_schedule
from te_ccl.backends.scale.symmetry import orbit_trees
from te_ccl.deadline import SHARES, Budget, checked, skipping
from te_ccl.model.problem import Problem
from te_ccl.topology.symmetry import TorusSymmetry, torus_symmetry, translate

__all__ = ["chunks_by_source", "solve_torus"]


def chunks_by_source(problem: Problem) -> dict[str, list[int]] | None:
    """Source → its chunk ids, if the demands are AllGather-shaped (else None)."""
    gpus = set(problem.topology.gpus)
    out: dict[str, list[int]] = defaultdict(list)
    for d in problem.demands:
        if len(d.sources) != 1 or set(d.destinations) != gpus - {d.sources[0]}:
            return None
        out[d.sources[0]].append(d.chunk)
    if set(out) != gpus or len({len(v) for v in out.values()}) != 1:
        return None
    return dict(out)


def _orbit(sym: TorusSymmetry, per_source: int, problem: Problem
           ) -> tuple[Orbit, np.ndarray, np.ndarray, np.ndarray]:
    """The orbit problem: chunk ``j`` of source 0 down tree ``j mod |G|``."""
    trees = orbit_trees(sym)
    n = sym.dims[0]
    parents, tails, classes, which = [], [], [], []
    for j in checked(range(per_source), ORBIT, every=1):
        base = len(parents)
        head_index: dict[tuple[int, ...], int] = {}
        for i, (tail, ci) in enumerate(trees[j % len(trees)]):
            parents.append(head_index.get(tail, -1 - base) + base)
            head = tuple((a + b) % n for a, b in zip(tail, sym.classes[ci], strict=True))
            head_index[head] = i
            tails.append(tail)
            classes.append(ci)
            which.append(j)
    lt = next(iter(problem.timings.values()))
    orb = Orbit(np.array(parents), np.array(classes), lt.delay, lt.capacity, lt.occupancy)
    return orb, np.array(tails, dtype=np.int64), np.array(classes), np.array(which)


def solve_torus(problem: Problem, params: SolveParams, budget: Budget
                ) -> tuple[Moves, tuple[str, ...]] | None:
    """(moves, notes), or None when the symmetry does not apply."""
    sym = torus_symmetry(problem.topology)
    owned = chunks_by_source(problem)
    if sym is None or owned is None or problem.relay_limit:
        return None
    per_source = len(next(iter(owned.values())))
    orb, tails, cls, which = _orbit(sym, per_source, problem)
    start = list_schedule(orb)
    lb, found = orb.lower_bound(), orb.makespan(start)
    how = "list schedule"
    if found > lb and budget.left() > 1 and not skipping("the torus orbit's CP-SAT"):
        start, proven = improve_cpsat(orb, start, min(budget.left() * SHARES.torus_orbit, 20.0), params.threads,
                                      params.seed)
        how = f"CP-SAT ({'optimal' if proven else 'time limit'}) from a list schedule"
    finish = orb.makespan(start)
    u, v = translate(sym, tails, cls)
    rank = {name: r for r, name in enumerate(sym.names)}
    chunk = np.zeros((len(sym.names), per_source), dtype=np.int64)
    for src, ids in owned.items():
        chunk[rank[src]] = ids
    starts = np.tile(start, len(sym.names))
    moves = Moves(sym.names, chunk[:, which].ravel(), u.ravel(), v.ravel(), starts,
                  starts + orb.delay)
    notes = (f"torus symmetry: one source's {per_source} chunk(s) on {len(sym.group)} rotated "
             f"shortest-path trees, orbit of {len(orb.parent)} edges scheduled by {how}: "
             f"{finish} epochs (orbit lower bound {lb}), translated to {len(sym.names)} sources",)
    return moves, notes
