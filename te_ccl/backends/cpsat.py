"""CP-SAT adapter: one :class:`~te_ccl.model.formulation.Formulation` in, a solution out.

A leaf: the strategies (:mod:`~te_ccl.backends.milp`, :mod:`~te_ccl.backends.rounds`)
build formulations and call :func:`solve_formulation`; nothing here knows about them.

Determinism: a fixed ``random_seed``; with several workers ``interleave_search`` makes
the search sequential-equivalent, so the same inputs and seed give the same schedule
unless a time limit cuts a search short.
"""


from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from te_ccl.backends.base import SolveParams
from te_ccl.deadline import Budget, checked
from te_ccl.errors import SolverError
from te_ccl.model.formulation import Formulation

__all__ = ["solve_formulation", "Solved"]

_FEASIBLE = (cp_model.OPTIMAL, cp_model.FEASIBLE)


@dataclass(frozen=True)
class Solved:
    status: str  # "optimal" | "feasible" | "infeasible" | "unknown"
    chosen: tuple  # transfer keys (x, then y) equal to 1
    values: dict  # every variable's value (for hints)
    form: Formulation


def _build(form: Formulation, with_objective: bool, hint: dict | None):
    model = cp_model.CpModel()
    var = {k: model.new_bool_var("") if ub == 1 else model.new_int_var(0, ub, "")
           for k, ub in form.variables.items()}
    for terms, lo, hi in checked(form.rows):
        expr = cp_model.LinearExpr.weighted_sum([var[k] for k, _ in terms], [c for _, c in terms])
        if lo is not None and hi is not None:
            model.add_linear_constraint(expr, lo, hi)
        elif hi is not None:
            model.add(expr <= hi)
        else:
            model.add(expr >= lo)
    if with_objective:
        keys = list(form.objective)
        model.minimize(cp_model.LinearExpr.weighted_sum([var[k] for k in keys],
                                                         [form.objective[k] for k in keys]))
    for k, v in (hint or {}).items():
        if k in var:
            model.add_hint(var[k], v)
    return model, var


def solve_formulation(form: Formulation, params: SolveParams, time_s: float, *,
                      with_objective: bool = False, hint: dict | None = None) -> Solved:
    """Run CP-SAT on one formulation for at most ``time_s`` seconds, building included."""
    share = Budget.of(time_s)  # building the model counts too
    model, var = _build(form, with_objective, hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, share.left())
    solver.parameters.num_workers = params.threads
    solver.parameters.random_seed = params.seed
    if params.threads > 1 and params.deterministic:
        solver.parameters.interleave_search = True
    code = solver.solve(model)
    if code not in _FEASIBLE:
        name = "infeasible" if code == cp_model.INFEASIBLE else "unknown"
        if code == cp_model.MODEL_INVALID:
            raise SolverError(f"internal: CP-SAT rejected the model: {model.validate()}")
        return Solved(name, (), {}, form)
    values = {k: solver.value(v) for k, v in var.items()}
    chosen = tuple(k for k in form.ten.transfer_keys if values[k])
    status = "optimal" if code == cp_model.OPTIMAL else "feasible"
    return Solved(status, chosen, values, form)


