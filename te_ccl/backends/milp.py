"""MILP strategy on CP-SAT: horizon search for the minimal finish epoch, then deliver early.

1. An incumbent finishing at ``U``: pipelined fixed trees (:mod:`te_ccl.model.trees`),
   alone when they meet the lower bound or the problem sums partials in forward time,
   else the earlier of them and a quick run of the ``rounds`` backend (≤ 50 % of the
   time limit). Between the lower bound of :mod:`te_ccl.model.horizon` and ``U``,
   bisect, asking CP-SAT whether horizon ``H`` is feasible (no objective: infeasibility
   proofs are fast). Without an incumbent, gallop up from the lower bound (H, H+1, H+3,
   H+7, …) first. The finish epoch is *proven* minimal when every smaller horizon was
   proven infeasible.
2. At the minimal horizon, minimise the deliver-early objective of
   :mod:`te_ccl.model.formulation` for at most a quarter of the time limit (at least 1 s,
   never past it): HiGHS (through OR-Tools) for half of that — it often proves this
   objective in about a second where CP-SAT does not — then CP-SAT hinted with the best
   solution so far.
"""

from __future__ import annotations

from te_ccl.backends.base import Progress, SolveParams, SolveResult
from te_ccl.backends.cpsat import Solved, solve_formulation
from te_ccl.backends.linear import solve_relaxation
from te_ccl.backends.rounds import solve_rounds
from te_ccl.deadline import SHARES, Budget
from te_ccl.errors import SolverError
from te_ccl.model.extract import prune, to_transfers
from te_ccl.model.formulation import formulate
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.model.problem import Problem
from te_ccl.model.trees import pipelined_trees

__all__ = ["solve_milp", "horizon_search"]

# above this many variables, building the HiGHS model in Python costs more than it saves
HIGHS_MAX_VARIABLES = 20_000


def _incumbent(problem: Problem, params: SolveParams, budget: Budget) -> Solved | None:
    """A quick schedule as an upper bound on the horizon (None if there is none): the
    pipelined trees of :mod:`te_ccl.model.trees`, kept at once when they meet the epoch
    lower bound, else the earlier of them and a rounds run (which keeps no partial sums,
    so not for a forward-time reduction)."""
    keys = pipelined_trees(problem)
    finish = max((k[-1] + problem.timings[k[-2]].delay for k in keys), default=0) \
        if keys is not None else None
    if finish is not None and (problem.reductions or finish <= horizon_lower_bound(problem)):
        return _solved(problem, keys, finish)
    if problem.reductions:
        return None
    try:
        r = solve_rounds(problem, params, Budget.of(SHARES.incumbent * budget.left()))
    except SolverError:
        return None if finish is None else _solved(problem, keys, finish)
    if finish is not None and finish < r.finish_epoch:
        return _solved(problem, keys, finish)
    return _solved(problem, [(t.chunk, (t.src, t.dst), t.start_epoch) for t in r.transfers],
                   r.finish_epoch)


def _solved(problem: Problem, keys: list[tuple], finish: int) -> Solved | None:
    """``keys`` as a solution of the model at horizon ``finish`` (None if one is missing)."""
    form = formulate(problem, finish)
    known = set(form.ten.transfer_keys)
    if any(k not in known for k in keys):
        return None
    chosen = tuple(keys)
    return Solved("feasible", chosen, dict.fromkeys(chosen, 1), form)


def horizon_search(problem: Problem, params: SolveParams, budget: Budget,
                   progress: Progress | None = None, incumbent: Solved | None = None
                   ) -> tuple[Solved, bool, list[str]]:
    """The smallest feasible horizon: (its solution, proven minimal?, notes).

    Without an incumbent: gallop up from the lower bound, then bisect. With one (a
    schedule finishing at ``U``): bisect between the lower bound and ``U``.
    """
    lo = horizon_lower_bound(problem)
    cap = params.max_horizon or max(4 * lo + 8, 16)
    if lo > cap:
        raise SolverError(f"infeasible: the demands need at least {lo} epochs, "
                          f"more than the maximum horizon {cap} epochs")
    notes = [f"horizon lower bound {lo} epochs"]
    tried: dict[int, Solved] = {}
    if incumbent is not None and incumbent.form.ten.horizon <= cap:
        tried[incumbent.form.ten.horizon] = incumbent
        notes.append(f"incumbent: {incumbent.form.ten.horizon} epochs")
    if progress:
        progress("; ".join(notes) + f" ({budget.elapsed():.2f} s)")

    def attempt(h: int) -> bool:
        form = formulate(problem, h)
        s = solve_formulation(form, params, budget.left())
        tried[h] = s
        if progress:
            nv, nc = form.size
            progress(f"horizon {h}: {s.status} ({nv} vars, {nc} rows, {budget.elapsed():.2f} s)")
        return s.status in ("optimal", "feasible")

    if tried:
        best = min(tried)
    else:
        best, step = lo, 1
        while not attempt(best):
            if budget.spent:
                raise SolverError(f"time limit of {params.time_limit_s:g} s reached without a "
                                  f"solution (last horizon tried: {best} epochs)")
            if best >= cap:
                raise SolverError(f"infeasible: no schedule within the maximum horizon {cap} "
                                  "epochs")
            best, step = min(cap, best + step), step * 2
    low = max((k for k in tried if k < best), default=lo - 1)
    while best - low > 1 and budget.left() > 0:
        mid = (low + best) // 2
        try:
            feasible = attempt(mid)
        except SolverError as e:  # the deadline passed while building: keep the best
            notes.append(f"horizon {mid}: {e}")
            break
        best, low = (mid, low) if feasible else (best, mid)
    proven = all(k in tried and tried[k].status == "infeasible" for k in range(lo, best))
    notes.append(f"finish epoch {best} " + ("proven minimal" if proven else "not proven minimal"))
    return tried[best], proven, notes


def _polish(first: Solved, params: SolveParams, budget: float) -> Solved:
    """Deliver early at the minimal horizon: HiGHS for half the budget (it often proves
    these objectives fast), then CP-SAT hinted with the best solution so far."""
    form = first.form
    status, values = "skipped", None
    if len(form.variables) <= HIGHS_MAX_VARIABLES:
        status, values, _ = solve_relaxation(form, budget / 2, with_objective=True,
                                             solver="HIGHS", integer=True)
    highs = None
    if values is not None:
        values = {k: round(v) for k, v in values.items()}
        highs = Solved(status, tuple(k for k in form.ten.transfer_keys if values[k]), values,
                       form)
        if status == "optimal":
            return highs
    cp = solve_formulation(form, params, budget / 2, with_objective=True,
                           hint=(highs or first).values)
    if cp.status in ("optimal", "feasible"):
        return cp
    return highs or first


def solve_milp(problem: Problem, params: SolveParams, budget: Budget,
               progress: Progress | None = None, *, incumbent: bool = True) -> SolveResult:
    """Minimal finish epoch (horizon search), then deliver early in the time left."""
    start = _incumbent(problem, params, budget) if incumbent else None
    first, proven, notes = horizon_search(problem, params, budget, progress, start)
    best, status = first, "finish proven minimal" if proven else "finish not proven minimal"
    if budget.left() > 0.05:
        try:
            best = _polish(first, params,
                           min(budget.left(), max(1.0, SHARES.polish * params.time_limit_s)))
        except SolverError:  # the deadline passed while building: keep the minimal horizon's
            best = first
        status += "; deliver-early " + ("optimal" if best.status == "optimal"
                                        else "not proven optimal (time limit)")
    transfers = prune(problem, to_transfers(problem, best.chosen))
    finish = max((t.arrive_epoch for t in transfers), default=0)
    nv, nc = best.form.size
    return SolveResult(tuple(transfers), finish, proven and finish == best.form.ten.horizon,
                       status, nv, nc, tuple(notes))
