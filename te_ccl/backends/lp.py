"""LP backend: fractional flows (GLOP), decomposed into one path per chunk, re-timed greedily.

1. Every demand becomes one commodity per destination and nobody copies (a pure
   multi-commodity flow: exact for AlltoAll/Gather/Scatter, a copy-free upper bound for
   multicast demands).
2. One LP (GLOP) at a horizon 25 % above the epoch lower bound (doubled while
   infeasible) minimises the deliver-early objective, which pulls every flow early.
3. Each commodity follows its *widest* time-expanded path (largest bottleneck flow;
   waiting at buffered nodes is free). Chunks are not split: the chunking stays the
   user's, the LP only chooses routes and an order.
4. Paths are re-timed in LP arrival order: each segment between buffered nodes starts at
   the first epoch where all its links have room (a switch without buffer forwards in
   the arrival epoch), so the schedule obeys capacities exactly; it may end later than
   the LP horizon, which is a lower bound only for copy-free demands.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from te_ccl.backends.base import Progress, SolveParams, SolveResult
from te_ccl.backends.linear import solve_relaxation
from te_ccl.backends.milp import solve_milp
from te_ccl.backends.rounds import solve_rounds
from te_ccl.deadline import Budget, checked
from te_ccl.errors import SolverError
from te_ccl.model.extract import prune
from te_ccl.model.formulation import Formulation, formulate
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.model.problem import Demand, Problem, State
from te_ccl.schedule import Transfer

__all__ = ["solve_lp", "flow_problem"]

# the LP horizon: this much above the epoch lower bound, plus one
HORIZON_SLACK = 1.25


def flow_problem(problem: Problem) -> tuple[Problem, dict[int, int]]:
    """One copy-free commodity per (chunk, destination); returns it and commodity → chunk."""
    demands, chunk_of = [], {}
    for d in problem.demands:
        for v in d.destinations:
            if not problem.holds(d.chunk, v):
                chunk_of[len(demands)] = d.chunk
                demands.append(Demand(len(demands), d.sources, (v,)))
    held = frozenset((i, s) for i, d in enumerate(demands) for s in d.sources)
    flows = replace(problem, demands=tuple(demands), copy_nodes=frozenset(),
                    state=State(held=held))
    return flows, chunk_of


def _flows_by(flows: Problem, params: SolveParams, budget: Budget,
              progress: Progress | None) -> tuple[Formulation, dict]:
    """One LP with the deliver-early objective at a horizon a little above the lower bound
    (doubled while infeasible): the objective already pulls every flow early, and one solve
    is much cheaper than a search over horizons for large AlltoAll models."""
    lo = horizon_lower_bound(flows)
    cap = params.max_horizon or max(4 * lo + 8, 16)
    h = min(cap, math.ceil(lo * HORIZON_SLACK) + 1)
    while True:
        form = formulate(flows, h)
        status, values, _ = solve_relaxation(form, budget.left(), with_objective=True)
        if progress:
            progress(f"LP horizon {h}: {status} ({form.size[0]} vars, {budget.elapsed():.2f} s)")
        if status == "optimal":
            return form, values
        if status == "unknown":
            raise SolverError(f"time limit of {params.time_limit_s:g} s reached without a "
                              f"solution (LP at horizon {h} epochs)")
        if h >= cap:
            raise SolverError(f"infeasible: no flow within the maximum horizon {cap} epochs")
        h = min(cap, 2 * h)


def _widest_path(flows: Problem, form: Formulation, values: dict, c: int) -> list[tuple]:
    """The x keys of commodity ``c``'s widest time-expanded path (bottleneck, then earliest)."""
    d = flows.demands[c]
    src, dst = d.sources[0], d.destinations[0]
    width: dict[tuple[str, int], float] = {}
    back: dict[tuple[str, int], tuple | None] = {}
    moves = sorted((k for k in form.ten.x if k[0] == c and values.get(k, 0) > 1e-6),
                   key=lambda k: k[2])
    best_at: dict[str, tuple[float, int]] = {src: (float("inf"), 0)}
    for key in moves:
        _, (u, v), t = key
        if u == src:
            w_u, at_u = float("inf"), (u, t)
        elif u in flows.buffered_nodes:
            w, e = best_at.get(u, (0.0, -1))
            if e < 0 or e > t:
                continue
            w_u, at_u = w, (u, e)
        else:
            w_u, at_u = width.get((u, t), 0.0), (u, t)
        w = min(w_u, values[key])
        arrive = (v, t + flows.timings[(u, v)].delay)
        if w > width.get(arrive, 0.0):
            width[arrive], back[arrive] = w, (key, at_u)
            if v in flows.buffered_nodes and w > best_at.get(v, (0.0, -1))[0]:
                best_at[v] = (w, arrive[1])
    ends = [(w, -e) for (n, e), w in width.items() if n == dst]
    if not ends:
        raise SolverError(f"internal: LP flow of commodity {c} does not reach {dst}")
    w, e = max(ends)
    path, at = [], (dst, -e)
    while at in back:
        key, at = back[at]
        path.append(key)
    return path[::-1]


class _Links:
    """Starts per link and epoch; ``free(link, t)``: one more start keeps every window legal."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.starts: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))

    def free(self, link: tuple[str, str], t: int) -> bool:
        lt, s = self.problem.timings[link], self.starts[link]
        k = lt.occupancy
        return all(sum(s.get(e, 0) for e in range(w, w + k)) < lt.capacity
                   for w in range(t - k + 1, t + 1))

    def take(self, link: tuple[str, str], t: int) -> None:
        self.starts[link][t] += 1


def _retime(flows: Problem, path: list[tuple], links: _Links, chunk: int) -> list[Transfer]:
    """Schedule ``path`` as early as capacities allow, segment by segment."""
    out, ready, i = [], 0, 0
    while i < len(path):
        seg = [path[i][1]]
        while flows.timings[seg[-1]].key[1] not in flows.buffered_nodes:
            i += 1
            seg.append(path[i][1])
        i += 1
        offsets, off = [], 0
        for link in seg:
            offsets.append(off)
            off += flows.timings[link].delay
        start = ready
        while not all(links.free(link, start + o) for link, o in zip(seg, offsets, strict=True)):
            start += 1
        for link, o in zip(seg, offsets, strict=True):
            links.take(link, start + o)
            out.append(Transfer(chunk, link[0], link[1], start + o,
                                start + o + flows.timings[link].delay))
        ready = start + off
    return out


def solve_lp(problem: Problem, params: SolveParams, budget: Budget,
             progress: Progress | None = None) -> SolveResult:
    """LP routes and order, whole chunks, capacity-exact greedy timing (module docstring)."""
    if problem.reductions:
        result = solve_milp(problem, params, budget, progress)
        return replace(result, notes=("lp cannot carry partial sums as flows: used milp",)
                       + result.notes)
    # a GPU with a buffer limit relays a commodity (one destination) it neither sends nor
    # receives: also a chunk it is one of several destinations of, which it keeps anyway
    relays = any(n not in d.sources and n != v for d in problem.demands
                 for v in d.destinations if not problem.holds(d.chunk, v)
                 for n in problem.relay_limit)
    if problem.tree or relays:
        why = "a reduction's tree" if problem.tree else "GPU buffer limits (whole chunks)"
        result = solve_rounds(problem, params, budget, progress)
        return replace(result, notes=(f"lp cannot keep {why}: used rounds",) + result.notes)
    horizon_lower_bound(problem)  # unreachable destinations: a SolverError naming the chunk
    flows, chunk_of = flow_problem(problem)
    form, values = _flows_by(flows, params, budget, progress)
    paths = {c: _widest_path(flows, form, values, c) for c in chunk_of}
    order = sorted(paths, key=lambda c: (sum(k[2] for k in paths[c][-1:]), c))
    links, transfers = _Links(flows), []
    for c in checked(order, every=64):
        transfers += _retime(flows, paths[c], links, chunk_of[c])
    kept = prune(problem, transfers)
    finish = max((t.arrive_epoch for t in kept), default=0)
    nv, nc = form.size
    return SolveResult(tuple(kept), finish, False,
                       f"LP at horizon {form.ten.horizon} epochs; rounded and re-timed to {finish}",
                       nv, nc, (f"LP flows: {len(chunk_of)} commodities, one path each, "
                                "re-timed greedily",))
