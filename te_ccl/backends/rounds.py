"""Time-partitioned rounds: a few epochs at a time, for instances too large for one model.

Round ``r`` covers absolute epochs ``[T, T+R)`` (``R = round_epochs``). Its model is the
usual one (capacity, forwarding, receive-once) restricted to starts in the window, with
the state the earlier rounds left (held chunks, arrivals under way, link occupancy) and
without demand rows; instead CP-SAT maximises progress with a look-ahead:

    maximise Σ x[c,(u,v),t] · value(c, v) · (W − t − d_l)

``value(c, v)`` = ``N`` if ``v`` is an unmet destination of ``c`` (a delivery), plus, for
every unmet destination ``w``, how many epochs closer ``v`` is to ``w`` than the nearest
current holder of ``c`` (progress toward later deliveries); ``W − t − d_l`` rewards early
arrival. Met demands leave the problem; the rounds stop when none is left. The result is
feasible, never proven optimal.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.backends.base import Clock, Progress, SolveParams, SolveResult
from te_ccl.backends.cpsat import solve_formulation
from te_ccl.errors import SolverError
from te_ccl.model.extract import prune, to_transfers
from te_ccl.model.formulation import formulate
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.model.problem import Demand, Problem, State
from te_ccl.model.ten import TimeExpandedNetwork, distances
from te_ccl.schedule import Transfer

__all__ = ["solve_rounds"]


def _objective(problem: Problem, ten: TimeExpandedNetwork, window: int) -> dict[tuple, int]:
    n = len(problem.topology.nodes)
    max_delay = max(lt.delay for lt in problem.timings.values())
    reach = window + max_delay + 1
    values: dict[tuple[int, str], int] = {}
    for d in problem.demands:
        unmet = ten.unmet(d)
        holders = {v for (c, v) in problem.state.held if c == d.chunk}
        for w in unmet:
            to_w = distances(problem, {w: 0}, reverse=True)
            best = min((to_w.get(h, 1 << 20) for h in holders), default=1 << 20)
            for v, dist in to_w.items():
                gain = n if v == w else max(0, min(best, n) - dist)
                if gain:
                    values[(d.chunk, v)] = values.get((d.chunk, v), 0) + gain
    obj = {}
    for key in ten.x:
        c, (_, v), t = key
        value = values.get((c, v), 0)
        if value:
            obj[key] = -value * max(1, reach - t - problem.timings[key[1]].delay)
    return obj


def _advance(problem: Problem, demands: list[Demand], transfers: list[Transfer], shift: int,
             window: int) -> tuple[State, list[Demand]]:
    """State at absolute epoch ``shift + window`` after ``transfers`` (absolute epochs)."""
    end = shift + window
    held = set(problem.state.held)
    incoming, busy = [], []
    for t in transfers:
        if t.arrive_epoch <= end and problem.topology.node(t.dst).is_gpu or (
                t.arrive_epoch <= end and t.dst in problem.buffered_nodes):
            held.add((t.chunk, t.dst))
        elif t.arrive_epoch > end:
            incoming.append((t.chunk, t.dst, t.arrive_epoch - end))
        k = problem.timings[(t.src, t.dst)].occupancy
        if t.start_epoch + k > end:
            busy.append(((t.src, t.dst), t.start_epoch - end))
    relayed: dict[str, int] = defaultdict(int)
    for c, v in held:
        d = next((d for d in problem.demands if d.chunk == c), None)
        if v in problem.relay_limit and d and v not in d.sources and v not in d.destinations:
            relayed[v] += 1
    left = [d for d in demands if any((d.chunk, v) not in held for v in d.destinations)]
    return State(frozenset(held), tuple(incoming), tuple(busy), tuple(relayed.items())), left


def solve_rounds(problem: Problem, params: SolveParams, clock: Clock,
                 progress: Progress | None = None) -> SolveResult:
    """Round after round of ``params.round_epochs`` epochs until every demand is met."""
    window = max(1, params.round_epochs)
    max_delay = max(lt.delay for lt in problem.timings.values())
    reach = window + max_delay * len(problem.topology.nodes)
    demands, state = list(problem.demands), problem.state
    transfers: list[Transfer] = []
    shift, rounds, size = 0, 0, (0, 0)
    while demands:
        sub = problem.with_state(state, tuple(demands))
        expected = horizon_lower_bound(sub) // window + 1
        if clock.left <= 0:
            raise SolverError(f"time limit of {params.time_limit_s:g} s reached after "
                              f"{rounds} rounds, {len(demands)} chunk(s) still undelivered")
        form = formulate(sub, reach, start_limit=window, demands=False, receive_once=True)
        form = type(form)(form.ten, form.variables, form.rows, _objective(sub, form.ten, window))
        solved = solve_formulation(form, params, clock.left / (expected + 4),
                                   with_objective=True)
        transfers += to_transfers(sub, solved.chosen, shift)
        size = max(size, form.size)
        state, demands = _advance(problem, demands, transfers, shift, window)
        if not solved.chosen and not state.incoming and demands:
            raise SolverError(f"infeasible: round at epoch {shift} can move nothing, "
                              f"{len(demands)} chunk(s) undelivered")
        shift, rounds = shift + window, rounds + 1
        if progress:
            progress(f"round {rounds}: epochs {shift - window}-{shift - 1}, "
                     f"{len(demands)} chunk(s) still undelivered ({clock.elapsed:.1f} s)")
    kept = prune(problem, transfers)
    finish = max((t.arrive_epoch for t in kept), default=0)
    return SolveResult(tuple(kept), finish, False,
                       f"{rounds} rounds of {window} epochs (not proven optimal)",
                       size[0], size[1], (f"rounds: {rounds} × {window} epochs",))
