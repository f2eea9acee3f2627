"""Time-partitioned rounds: a few epochs at a time, for instances too large for one model.

Round ``r`` covers absolute epochs ``[T, T+R)`` (``R = round_epochs``, by default the
longest link occupancy: 1 when every link moves a chunk per epoch). Its model is the
usual one (capacity, forwarding, receive-once) restricted to starts in the window, with
the state the earlier rounds left (held chunks, arrivals under way, link occupancy) and
without demand rows; instead CP-SAT maximises progress with a look-ahead:

    maximise Σ x[c,(u,v),t] · value(c, (u, v)) · (W − t − d_l)

``value(c, (u, v))`` sums over the unmet destinations ``w`` of ``c``: ``N`` if ``v = w``
(a delivery), else, if the link lies on a shortest path from the chunk's origin to ``w``,
how many epochs closer to ``w`` it brings the chunk (progress toward later deliveries;
detours that relay through other bottlenecks earn nothing); ``W − t − d_l`` rewards
early arrival. Met demands leave the problem; the rounds stop when none is left. The
result is feasible, never proven optimal. A round whose model finds no solution in its
time slice moves nothing (the schedule stays valid) until the time limit.

To keep each round small, a link only gets variables for the ``max(8, 3 × (chunks it can
carry in the window))`` chunks of highest value to it (candidate pruning); links out of a
switch without buffer keep every chunk that may enter the switch.

Rounds carry no partial sums from one round to the next: an AllReduce solved as one
problem (partials summed in forward time) takes the pipelined trees of
:mod:`te_ccl.model.trees` instead.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import networkx as nx
import numpy as np

from te_ccl.backends.base import Progress, SolveParams, SolveResult
from te_ccl.backends.cpsat import solve_formulation
from te_ccl.deadline import Budget, checked
from te_ccl.errors import SolverError
from te_ccl.model.extract import prune, to_transfers
from te_ccl.model.formulation import formulate
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.model.problem import Demand, Problem, State
from te_ccl.model.ten import TimeExpandedNetwork, distances
from te_ccl.model.trees import pipelined_trees
from te_ccl.schedule import Transfer

__all__ = ["solve_rounds"]

# no round may take more than this fraction of the time limit (the first rounds cannot
# know how many will follow: the epoch lower bound is weak for cut-limited instances)
FIRST_ROUNDS = 20
# per link and round, only chunks ranked in the top CANDIDATES × capacity get variables
CANDIDATES = 3
MIN_CANDIDATES = 8


Gains = tuple[list[str], list[tuple[str, str]], dict[tuple[str, ...], np.ndarray]]


def _gains(problem: Problem, full: frozenset[str] = frozenset()) -> Gains:
    """Per chunk origin ``S``, destination ``w`` and link ``l = (u, v)``: ``N`` if ``v = w``,
    else the epochs ``l`` brings a chunk closer to ``w`` if ``l`` lies on a shortest path
    from ``S`` to ``w`` (detours through other bottlenecks earn nothing), else 0. Where
    ``w`` can be reached without relaying through a GPU of ``full`` (its relay buffer is),
    only such paths count: the relay rows refuse the others, and a round would stall."""
    n = len(problem.topology.nodes)
    dests = sorted({v for d in problem.demands for v in d.destinations})
    links = sorted(problem.timings)
    far = 1 << 20
    to = {w: distances(problem, {w: 0}, reverse=True) for w in dests}
    around = {w: distances(problem, {w: 0}, reverse=True, avoid=full - {w})
              for w in dests} if full else to
    out = {}
    for origin in checked(sorted({d.sources for d in problem.demands}), every=1):
        starts = dict.fromkeys(origin, 0)
        every = distances(problem, starts)
        avoiding = distances(problem, starts, avoid=full) if full else every
        g = np.zeros((len(dests), len(links)), dtype=np.int64)
        for i, w in enumerate(dests):
            frm, to_w = (avoiding, around[w]) if w in avoiding else (every, to[w])
            best = frm.get(w, far)
            for j, (u, v) in enumerate(links):
                on_path = frm.get(u, far) + problem.timings[(u, v)].delay + to_w.get(v, far) == best
                # a chunk a full GPU already relays leaves it on any link towards w
                g[i, j] = n if v == w else (to_w.get(u, far) - to_w.get(v, far)) * (
                    on_path or u in full)
        out[origin] = g
    return dests, links, out


def _objective(problem: Problem, ten: TimeExpandedNetwork, window: int,
               gains: Gains) -> dict[tuple, int]:
    """Coefficients ``−value(c, l) · (W − t − d_l)`` of the round objective (minimised)."""
    dests, links, g = gains
    row = {w: i for i, w in enumerate(dests)}
    col = {link: j for j, link in enumerate(links)}
    value: dict[int, np.ndarray] = {}
    for d in problem.demands:
        wants = np.zeros(len(dests), dtype=np.int64)
        for w in ten.unmet(d):
            wants[row[w]] = 1
        value[d.chunk] = wants @ g[d.sources]  # per link
    reach = window + max(lt.delay for lt in problem.timings.values()) + 1
    obj = {}
    for key in checked(ten.x):
        c, link, t = key
        v = int(value[c][col[link]])
        if v > 0:
            obj[key] = -v * max(1, reach - t - problem.timings[link].delay)
    return obj


def _candidates(ten: TimeExpandedNetwork, objective: dict[tuple, int], window: int) -> None:
    """Per link, keep the transfers of its best ``max(MIN_CANDIDATES, CANDIDATES × room)``
    chunks; a link out of a switch without buffer also keeps every chunk that may enter it."""
    p = ten.problem
    best: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    for key, value in objective.items():
        c, link, _ = key
        best[link][c] = min(value, best[link].get(c, 0))
    keep: dict[tuple[str, str], set[int]] = {}
    for link, values in best.items():
        lt = p.timings[link]
        room = max(MIN_CANDIDATES, CANDIDATES * lt.capacity * -(-window // lt.occupancy))
        keep[link] = set(sorted(values, key=lambda c: (values[c], c))[:room])
    entering: dict[str, set[int]] = defaultdict(set)
    for (_, v), chunks in keep.items():
        if v not in p.buffered_nodes:
            entering[v] |= chunks
    for (u, v) in p.timings:
        if u not in p.buffered_nodes:
            keep[(u, v)] = keep.get((u, v), set()) | entering[u]
    ten.x = [k for k in ten.x if k[0] in keep.get(k[1], ())]


def _advance(problem: Problem, demands: list[Demand], transfers: list[Transfer], shift: int,
             window: int) -> tuple[State, list[Demand]]:
    """State at absolute epoch ``shift + window`` after ``transfers`` (absolute epochs)."""
    end = shift + window
    held = set(problem.state.held)
    incoming, busy = [], []
    stores = problem.buffered_nodes - problem.copy_nodes - set(problem.topology.gpus)
    units: Counter = Counter()  # a switch that stores but cannot copy holds units, not a copy
    for t in transfers:
        if t.dst in stores and t.arrive_epoch <= end:
            units[(t.chunk, t.dst)] += 1
        elif t.arrive_epoch <= end and t.dst in problem.buffered_nodes:
            held.add((t.chunk, t.dst))
        elif t.arrive_epoch > end and t.dst in problem.buffered_nodes:
            incoming.append((t.chunk, t.dst, t.arrive_epoch - end))
        if t.src in stores:
            units[(t.chunk, t.src)] -= 1
        k = problem.timings[(t.src, t.dst)].occupancy
        if t.start_epoch + k > end:
            busy.append(((t.src, t.dst), t.start_epoch - end))
    # units still stored arrive again, in the next round's epoch 0
    incoming += [(c, n, 0) for (c, n), left in sorted(units.items()) for _ in range(left)]
    # a relayed chunk takes its slot from the round it is sent in: under way counts too
    relayed: dict[str, set[int]] = defaultdict(set)
    by_chunk = {d.chunk: d for d in problem.demands}
    for c, v in [*held, *((c, v) for c, v, _ in incoming)]:
        d = by_chunk[c]
        if v in problem.relay_limit and v not in d.sources and v not in d.destinations:
            relayed[v].add(c)
    left = [d for d in demands if any((d.chunk, v) not in held for v in d.destinations)]
    return State(frozenset(held), tuple(incoming), tuple(busy),
                 tuple((v, len(cs)) for v, cs in relayed.items())), left


def _switch_chain(problem: Problem) -> int:
    """Nodes on the longest shortest path through switches without buffer (0 if none)."""
    g = problem.topology.graph().subgraph(
        n.name for n in problem.topology.nodes if n.name not in problem.buffered_nodes)
    if not g.number_of_nodes():
        return 0
    return 1 + max(max(nx.single_source_shortest_path_length(g, n).values()) for n in g)


def _unmet_pairs(problem: Problem, demands: list[Demand], state: State) -> int:
    return sum(1 for d in demands for v in d.destinations if (d.chunk, v) not in state.held)


def solve_rounds(problem: Problem, params: SolveParams, budget: Budget,
                 progress: Progress | None = None) -> SolveResult:
    """Round after round of ``params.round_epochs`` epochs until every demand is met."""
    if problem.reductions:
        return _trees(problem)
    window = params.round_epochs or max(lt.occupancy for lt in problem.timings.values())
    max_delay = max(lt.delay for lt in problem.timings.values())
    reach = window + max_delay * len(problem.topology.nodes)
    slack = max_delay * _switch_chain(problem)
    demands, state = list(problem.demands), problem.state
    gains, blocked = _gains(problem), frozenset()
    idle, patience = 0, max_delay + max(lt.occupancy for lt in problem.timings.values())
    transfers: list[Transfer] = []
    shift, rounds, size = 0, 0, (0, 0)
    pairs = _unmet_pairs(problem, demands, state)
    rate = None  # (chunk, destination) pairs delivered per round so far
    while demands:
        sub = problem.with_state(state, tuple(demands))
        expected = horizon_lower_bound(sub) // window + 1
        if rate:
            expected = max(expected, -(-_unmet_pairs(problem, demands, state) // rate))
        round_s = min(budget.left() / (expected + 4), params.time_limit_s / FIRST_ROUNDS)
        if budget.spent:
            raise SolverError(f"time limit of {params.time_limit_s:g} s reached after "
                              f"{rounds} rounds, {len(demands)} chunk(s) still undelivered")
        ten = TimeExpandedNetwork(sub, reach, window, slack)
        objective = _objective(sub, ten, window, gains)
        _candidates(ten, objective, window)
        form = formulate(sub, reach, objective, ten=ten, demands=False, receive_once=True)
        solved = solve_formulation(form, params, round_s, with_objective=True)
        if solved.status == "unknown":  # not even the empty round found: give it more time
            solved = solve_formulation(form, params, min(budget.left(), 4 * round_s),
                                       with_objective=True)
        if solved.status == "unknown" and budget.spent:
            raise SolverError(f"time limit of {params.time_limit_s:g} s reached: the round at "
                              f"epoch {shift} found no solution; try a longer limit")
        transfers += to_transfers(sub, solved.chosen, shift)
        size = max(size, form.size)
        state, demands = _advance(problem, demands, transfers, shift, window)
        full = frozenset(v for v, k in state.relayed if k >= problem.relay_limit[v])
        if full != blocked:  # a GPU's relay buffer filled: route the others around it
            gains, blocked = _gains(problem, full), full
        stuck = solved.status != "unknown" and not solved.chosen and not state.incoming
        idle = idle + window if stuck else 0
        if idle > patience:  # links free again, nothing under way, still nothing moves
            raise SolverError(f"infeasible: from epoch {shift - idle + window} on nothing can "
                              f"move, {len(demands)} chunk(s) undelivered")
        shift, rounds = shift + window, rounds + 1
        rate = max(1, (pairs - _unmet_pairs(problem, demands, state)) // rounds)
        if progress:
            progress(f"round {rounds}: epochs {shift - window}-{shift - 1}, "
                     f"{len(demands)} chunk(s) still undelivered ({budget.elapsed():.1f} s)")
    kept = prune(problem, transfers)
    finish = max((t.arrive_epoch for t in kept), default=0)
    return SolveResult(tuple(kept), finish, False,
                       f"{rounds} rounds of {window} epochs (not proven optimal)",
                       size[0], size[1], (f"rounds: {rounds} × {window} epochs",))


def _trees(problem: Problem) -> SolveResult:
    """Rounds keep no partial sums between rounds: a forward-time reduction takes the
    pipelined fixed trees of :mod:`te_ccl.model.trees` instead."""
    keys = pipelined_trees(problem)
    if keys is None:
        raise SolverError("infeasible for rounds: the partial sums would meet at a switch "
                          "that cannot add them; use the milp backend")
    kept = prune(problem, to_transfers(problem, keys))
    finish = max((t.arrive_epoch for t in kept), default=0)
    return SolveResult(tuple(kept), finish, False, "pipelined trees (not proven optimal)",
                       notes=("rounds: partial sums summed along pipelined fixed trees",))
