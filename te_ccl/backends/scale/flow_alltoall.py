"""AlltoAll (any unicast demands) on any topology: max-concurrent flow, paths, list schedule.

1. **LP** (GLOP up to :data:`EXACT_LP_VARIABLES` variables, else PDLP, OR-Tools'
   first-order LP solver: 30× faster at 64 GPUs, optimum within 1e-4). One commodity per
   source, its sinks the GPUs it sends to (for unicast demands the same as one commodity
   per pair, ``N`` times smaller); on a symmetric torus one source over link orbits,
   translated (exact: averaging over translations keeps a solution optimal). Links carry
   the epoch model's ``capacity / occupancy`` chunks per epoch, so the LP optimum ``T*`` is
   the best finish the list schedule can aim for. A second solve keeps ``T ≤ T*`` and
   minimises total link time: no cycles, shortest routes among the optimal ones. Where
   those routes have a GPU take more steps (sub-chunks it receives, and its own it sends)
   than the runtime's reader holds for it, a third solve holds every GPU to that many within ``T ≤ (1 +``
   :data:`CAP_SLACK` ``)·T*``: relaying moves off the crowded GPUs.
2. **Paths.** Each source's flow is cut into paths by walking back from every sink along
   its largest inflow; pair ``(s, d)`` gets path weights summing to 1.
3. **Rounding.** The pair's ``m`` sub-chunks go ``floor(m·w)`` to each path; the leftover
   ones (largest-remainder count) each go to the path with a positive remainder whose
   busiest link is least loaded so far (ties: larger remainder), preferring paths that
   keep every GPU within the cap.
4. **List schedule** (:mod:`.flow_schedule`), epoch by epoch, longest remaining route
   first, switches without buffer forwarding in the arrival epoch.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import networkx as nx
import numpy as np

from te_ccl.backends.scale.flow_schedule import list_schedule
from te_ccl.backends.scale.grid_alltoall import grid_takes
from te_ccl.backends.scale.moves import Moves
from te_ccl.backends.scale.msccl_budget import max_subchunks, room
from te_ccl.collective.model import Collective
from te_ccl.deadline import Budget, checked
from te_ccl.errors import SolverError
from te_ccl.model.problem import Problem
from te_ccl.topology.model import Topology
from te_ccl.topology.symmetry import torus_symmetry

__all__ = ["unicast_pairs", "concurrent_flow", "flow_paths", "flow_subchunks",
           "solve_flow_alltoall"]

ROUTING = "routing the AlltoAll flows"  # what a deadline reached interrupted
CAP_SLACK = 0.02  # of T* the capped routes may add (a looser bound solves faster)
RECEIVE_SHARE = 0.975  # of a rank's elements for routed sub-chunks: the rest thread blocks
STEP_SHARE = 0.75  # the route estimate misses thread blocks and dependency nops (fc8: ~20 %)

Key = tuple[str, str]
Path = tuple[str, ...]
HOP_BUDGET = 1_500_000  # sub-chunk hops the list schedule handles in seconds
PIPELINE_TARGET = 250  # sub-chunks on an average link: fill and drain then cost ~1%
EXACT_LP_VARIABLES = 5_000
_TINY = 1e-9


def unicast_pairs(problem: Problem) -> dict[Key, list[int]] | None:
    """(source, destination) → chunk ids if every demand is one source to one other GPU."""
    out: dict[Key, list[int]] = defaultdict(list)
    for d in problem.demands:
        if len(d.sources) != 1 or len(d.destinations) != 1:
            return None
        if d.sources != d.destinations:  # a rank's piece for itself stays in place
            out[(d.sources[0], d.destinations[0])].append(d.chunk)
    return dict(out) if out else None


def concurrent_flow(topology: Topology, demand: dict[Key, float], rate: dict[Key, float],
                    time_limit_s: float = 60.0, bundles: list[list[Key]] | None = None,
                    cap: float = math.inf) -> tuple[float, dict[str, dict[Key, float]]]:
    """(T*, source → link → flow): ``demand[(s, d)]`` units routed concurrently within ``T*``
    when link ``k`` carries ``rate[k]`` units per time unit.

    ``bundles``: links whose summed flow is held to the rate of one of them (a link orbit
    under symmetry); default every link alone. ``cap``: steps a GPU may take in the
    lowered file, counted as the units it receives plus those it sends of its own (a
    relay fused into one step). Where the optimal routes take a GPU past it, a third
    pass holds every GPU to it within :data:`CAP_SLACK` of ``T*``, in at most twice the
    time the first two took (the routes stay as they were where that fails).

    >>> from te_ccl.topology.generators import ring
    >>> t = ring(3, 1e9)
    >>> T, f = concurrent_flow(t, {("g0", "g1"): 2.0}, {k.key: 1.0 for k in t.links})
    >>> round(T, 6), sorted((k, round(v, 6)) for k, v in f["g0"].items() if v > 1e-9)
    (1.0, [(('g0', 'g1'), 1.0), (('g0', 'g2'), 1.0), (('g2', 'g1'), 1.0)])
    """
    from ortools.linear_solver import pywraplp

    budget = Budget.of(time_limit_s)  # the third pass gets at most twice what the first two took
    sources = sorted({s for s, _ in demand})
    keys = [k.key for k in topology.links]
    exact = len(sources) * len(keys) <= EXACT_LP_VARIABLES
    lp = pywraplp.Solver.CreateSolver("GLOP" if exact else "PDLP")
    lp.SetTimeLimit(max(1, int(time_limit_s * 1000)))
    T = lp.NumVar(0, lp.infinity(), "T")
    f = {(s, k): lp.NumVar(0, lp.infinity(), "") for s in sources for k in keys}
    need: dict[tuple[str, str], float] = defaultdict(float)
    for (s, d), units in demand.items():
        need[(s, d)] -= units
        need[(s, s)] += units
    for s in sources:  # rows set coefficient by coefficient: the expression API is slower
        for n in topology.nodes:
            net = need.get((s, n.name), 0.0)
            row = lp.Constraint(net, net)
            for k in topology.out_links(n.name):
                row.SetCoefficient(f[(s, k.key)], 1.0)
            for k in topology.in_links(n.name):
                row.SetCoefficient(f[(s, k.key)], -1.0)
    for b in bundles or [[k] for k in keys]:
        row = lp.Constraint(-lp.infinity(), 0.0)
        row.SetCoefficient(T, -rate[b[0]])
        for s in sources:
            for k in b:
                row.SetCoefficient(f[(s, k)], 1.0)
    lp.Minimize(T)
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        raise SolverError("the concurrent-flow LP found no optimum (a pair not connected, "
                          "or the time limit)")
    best = T.solution_value()
    # second pass: the same T, least total link time (no cycles, short routes)
    T.SetUb(best * (1 + 1e-7) + _TINY)
    objective = lp.Objective()
    objective.Clear()
    for s in sources:
        for k in keys:
            objective.SetCoefficient(f[(s, k)], 1.0 / rate[k])
    objective.SetMinimization()
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        raise SolverError("the concurrent-flow LP lost its optimum in the second pass")
    flows = {s: {k: f[(s, k)].solution_value() for k in keys} for s in sources}
    if _busiest(topology, flows, demand) <= cap:
        return best, flows
    # third pass: every GPU held to the cap, a little later, least total link time
    for n in topology.gpus:
        row = lp.Constraint(-lp.infinity(), cap - need.get((n, n), 0.0))
        for s in sources:
            for k in topology.in_links(n):
                row.SetCoefficient(f[(s, k.key)], 1.0)
    T.SetUb(best * (1 + CAP_SLACK))
    lp.SetTimeLimit(max(1, int(min(budget.left(), 2 * budget.elapsed()) * 1000)))
    if lp.Solve() == pywraplp.Solver.OPTIMAL:
        flows = {s: {k: f[(s, k)].solution_value() for k in keys} for s in sources}
    return best, flows


def _busiest(topology: Topology, flows: dict[str, dict[Key, float]],
             demand: dict[Key, float]) -> float:
    """The most steps one GPU takes: units it receives plus units it sends of its own."""
    steps: dict[str, float] = defaultdict(float)
    for (s, _), units in demand.items():
        steps[s] += units
    for flow in flows.values():
        for (_, v), x in flow.items():
            steps[v] += x
    return max((steps[n] for n in topology.gpus), default=0.0)


def _walk_back(flow: dict[Key, float], into: dict[str, list[str]], s: str, d: str
               ) -> Path | None:
    """A path s → d along positive flow, taking the largest inflow at each step."""
    path, seen = [d], {d}
    while path[-1] != s:
        v = path[-1]
        u = max((u for u in into[v] if u not in seen), key=lambda u: flow[(u, v)], default=None)
        if u is None or flow[(u, v)] <= _TINY:
            return None
        path.append(u)
        seen.add(u)
    return tuple(reversed(path))


def flow_paths(topology: Topology, source: str, flow: dict[Key, float],
               demand: dict[str, float]) -> dict[str, dict[Path, float]]:
    """Sink → path → weight (summing to 1) from one source's flow with ``demand`` per sink."""
    flow = dict(flow)
    into: dict[str, list[str]] = defaultdict(list)
    for u, v in flow:
        into[v].append(u)
    out: dict[str, dict[Path, float]] = {}
    for d, units in demand.items():
        left, paths = units, defaultdict(float)
        while left > units * 1e-6:
            path = _walk_back(flow, into, source, d)
            if path is None:
                break
            x = min([left] + [flow[k] for k in zip(path, path[1:], strict=False)])
            for k in zip(path, path[1:], strict=False):
                flow[k] -= x
            paths[path] += x
            left -= x
        total = sum(paths.values())
        if not total:
            raise SolverError(f"the concurrent-flow LP routes nothing from {source} to {d}")
        out[d] = {p: w / total for p, w in paths.items()}
    return out


def _round(pairs: dict[Key, list[int]], weights: dict[Key, dict[Path, float]],
           rate: dict[Key, float], gpus: frozenset[str], cap: float
           ) -> list[tuple[int, Path]]:
    """(chunk, path) for every sub-chunk: proportional floors, leftovers load-aware, away
    from a path that would take a GPU past ``cap`` steps (sub-chunks in and own ones out)
    where another does not."""
    load: dict[Key, float] = defaultdict(float)
    steps: dict[str, int] = defaultdict(int)
    for (s, _), chunks in pairs.items():
        steps[s] += len(chunks)
    plan: dict[Key, list[Path]] = {}
    rest: dict[Key, dict[Path, float]] = {}

    def take(p: Path) -> None:
        for k in zip(p, p[1:], strict=False):
            load[k] += 1 / rate[k]
            steps[k[1]] += 1

    def over(p: Path) -> bool:
        return any(steps[v] >= cap for v in p[1:] if v in gpus)

    for pair, chunks in checked(pairs.items(), ROUTING, every=256):
        quota = {p: len(chunks) * w for p, w in weights[pair].items()}
        plan[pair] = [p for p, q in quota.items() for _ in range(math.floor(q + _TINY))]
        rest[pair] = {p: q - math.floor(q + _TINY) for p, q in quota.items()
                      if q - math.floor(q + _TINY) > _TINY}
        for p in plan[pair]:
            take(p)
    for pair in sorted(rest, key=lambda x: len(rest[x])):
        options = rest[pair]
        while len(plan[pair]) < len(pairs[pair]) and options:
            p = min(options, key=lambda p: (over(p), max(load[k] + 1 / rate[k] for k in
                                                         zip(p, p[1:], strict=False)),
                                            -options[p]))
            del options[p]
            plan[pair].append(p)
            take(p)
        heaviest = max(weights[pair], key=weights[pair].get)  # float noise left a gap
        plan[pair] += [heaviest] * (len(pairs[pair]) - len(plan[pair]))
    return [(c, p) for pair, chunks in pairs.items() for c, p in zip(chunks, plan[pair],
                                                                        strict=True)]


def _torus_weights(topology: Topology, demand: dict[Key, float], rate: dict[Key, float],
                   time_limit_s: float) -> tuple[float, dict[Key, dict[Path, float]]] | None:
    """(T*, pair → path weights) on a symmetric torus with equal demands, else None.

    Averaging any solution over the translations keeps it optimal, so one source's flow
    is enough: link ``e`` then carries the flow source 0 puts on every link of ``e``'s
    orbit (same direction), and each pair's paths are source 0's, translated.
    """
    sym = torus_symmetry(topology)
    if sym is None or len(demand) != len(sym.names) * (len(sym.names) - 1) or len(
            set(demand.values())) != 1:
        return None
    names, n = sym.names, sym.dims[0]
    coords = np.array(list(itertools.product(*(range(d) for d in sym.dims))), dtype=np.int64)
    where = {name: coords[i] for i, name in enumerate(names)}
    orbits: dict[tuple[int, ...], list[Key]] = defaultdict(list)
    for k in topology.links:
        orbits[tuple((where[k.dst] - where[k.src]) % n)].append(k.key)
    src, units = names[0], next(iter(demand.values()))
    sinks = {d: units for d in names[1:]}
    best, flows = concurrent_flow(topology, {(src, d): units for d in sinks}, rate,
                                  time_limit_s, list(orbits.values()))
    paths = flow_paths(topology, src, flows[src], sinks)
    index = {name: i for i, name in enumerate(names)}
    weights: dict[Key, dict[Path, float]] = {}
    for i, s in enumerate(names):
        moved = sym.rank(coords + coords[i])
        for d, w in paths.items():
            weights[(s, names[moved[index[d]]])] = {
                tuple(names[moved[index[v]]] for v in p): x for p, x in w.items()}
    return best, weights


def _routable(problem: Problem) -> Topology:
    """``problem``'s topology with only the links it may use (a rank subset's)."""
    topo = problem.topology
    if len(problem.timings) == len(topo.links):
        return topo
    return Topology.build(topo.name, topo.nodes,
                          [k for k in topo.links if k.key in problem.timings])


def _weights(problem: Problem, demand: dict[Key, float], rate: dict[Key, float], budget: Budget,
             cap: float) -> tuple[float, dict[Key, dict[Path, float]], str]:
    """(T*, pair → path weights, how): the torus orbit LP if it applies, else per source,
    with each GPU held to ``cap`` steps (the runtime's reader holds that many for it)
    where the optimal routes exceed it."""
    topology = _routable(problem)
    on_torus = _torus_weights(topology, demand, rate, budget.left())
    if on_torus is not None:
        return (*on_torus, "one source on the torus orbit, translated")
    best, flows = concurrent_flow(topology, demand, rate, budget.left(), cap=cap)
    most = _busiest(topology, flows, demand)
    held = (f", busiest GPU {most:,.0f} steps for a cap of {cap:,.0f}"
            if most > cap * (1 - 1e-3) else "")
    weights: dict[Key, dict[Path, float]] = {}
    for s, flow in checked(flows.items(), ROUTING, every=1):
        sinks = {d: u for (x, d), u in demand.items() if x == s}
        weights.update({(s, d): w for d, w in
                        flow_paths(topology, s, flow, sinks).items()})
    return best, weights, f"{len(flows)} per-source commodities{held}"


def solve_flow_alltoall(problem: Problem, budget: Budget, seed: int = 0,
                        cap: float | None = None) -> tuple[Moves, tuple[str, ...]] | None:
    """(moves, notes), or None when the demands are not unicast or GPUs have buffer limits.

    ``cap``: steps a GPU may take (sub-chunks it receives and its own it sends); by default
    :data:`RECEIVE_SHARE` of the steps the runtime's reader holds per rank (the rounding
    to whole sub-chunks may add a few).
    """
    pairs = unicast_pairs(problem)
    if pairs is None or problem.relay_limit:
        return None
    rate = {k: lt.chunks_per_epoch for k, lt in problem.timings.items()}
    demand = {pair: float(len(c)) for pair, c in pairs.items()}
    if cap is None:
        cap = room(problem.topology.ngpus, RECEIVE_SHARE)
    best, weights, how = _weights(problem, demand, rate, budget, cap)
    assignment = _round(pairs, weights, rate, frozenset(problem.topology.gpus), cap)
    moves = list_schedule(problem, assignment, budget, seed)
    npaths = sum(len(w) for w in weights.values())
    notes = (f"max-concurrent-flow LP ({how}): {best:.1f} epochs; {npaths} paths for "
             f"{len(pairs)} pairs, {len(assignment)} sub-chunks list-scheduled in "
             f"{moves.finish} epochs",)
    return moves, notes


def flow_subchunks(topology: Topology, collective: Collective, max_transfers: int) -> int:
    """Sub-chunks per chunk: about PIPELINE_TARGET on an average link, within HOP_BUDGET hops
    and within the steps the MSCCL runtime can load for the busiest GPU (:func:`max_subchunks`),
    each at least one α long (:func:`_worth_pipelining`).

    Routes are estimated by shortest paths (the LP's second pass prefers those); a GPU
    counts one step per sub-chunk it sends or receives, two per sub-chunk it relays.
    Where the grid AlltoAll takes the collective (:func:`grid_takes`), one: its groups are
    whole elements, which more pieces only make larger.
    """
    if grid_takes(topology, collective):
        return 1
    g = topology.graph()
    ranks = set(topology.gpu(r) for r in collective.ranks)
    hops, steps = 0, defaultdict(int)
    for s in checked(ranks, ROUTING, every=16):
        for v, path in nx.single_source_shortest_path(g, s).items():
            if v in ranks and v != s:
                hops += len(path) - 1
                for x in path:
                    steps[x] += 1 if x in (s, v) else 2
    gpus = set(topology.gpus)
    busiest = max((n for x, n in steps.items() if x in gpus), default=0)
    if not hops:
        return 1
    per = collective.chunks_per_rank
    want = math.ceil(PIPELINE_TARGET * len(topology.links) / (hops * per))
    room = min(min(HOP_BUDGET, max_transfers) // (hops * per),
               max_subchunks(topology.ngpus, busiest * per, STEP_SHARE))
    biggest = collective.size_bytes // collective.nchunks
    return max(1, min(want, room, biggest, _worth_pipelining(topology, collective)))


def _worth_pipelining(topology: Topology, collective: Collective) -> int:
    """Sub-chunks no shorter than one α on the fastest link: below that, a hop costs its
    latency whatever the size, and more pieces only add steps (64 KB on fc8: one piece).

    >>> from te_ccl.collective.model import CollectiveKind
    >>> from te_ccl.topology.generators import fully_connected
    >>> c = Collective(CollectiveKind.ALLTOALL, 64_000, tuple(range(8)))
    >>> _worth_pipelining(fully_connected(8, 25e9, 0.5e-6), c)
    1
    """
    alpha = min((x.latency_s for x in topology.links if x.latency_s > 0), default=0.0)
    if not alpha:
        return collective.chunk_bytes
    fastest = max(x.bandwidth_Bps for x in topology.links)
    return max(1, int(collective.chunk_bytes / (fastest * alpha)))
