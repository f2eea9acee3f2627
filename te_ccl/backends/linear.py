"""Linear-solver adapter (OR-Tools' ``pywraplp``: GLOP, PDLP, HiGHS) for one formulation.

A leaf like :mod:`~te_ccl.backends.cpsat`: the LP strategy uses it for fractional flows,
the MILP strategy for HiGHS's deliver-early polish.
"""

from __future__ import annotations

from ortools.linear_solver import pywraplp

from te_ccl.deadline import Budget, checked
from te_ccl.model.formulation import Formulation

__all__ = ["solve_relaxation"]


def solve_relaxation(form: Formulation, time_s: float, *, with_objective: bool,
                     solver: str = "GLOP", integer: bool = False
                     ) -> tuple[str, dict | None, float | None]:
    """(status, values, objective) of ``form`` with continuous variables, or integer ones
    with ``integer=True`` (status "optimal" or "feasible"). ``solver``: GLOP, PDLP, HIGHS."""
    lp = pywraplp.Solver.CreateSolver(solver)
    lp.SuppressOutput()
    if solver == "HIGHS":  # keeps HiGHS's banner off stdout (where --json goes)
        lp.SetSolverSpecificParametersAsString("output_flag=false")
    share = Budget.of(time_s)  # building the model counts too
    var = {k: lp.IntVar(0, ub, "") if integer else lp.NumVar(0, ub, "")
           for k, ub in form.variables.items()}
    for terms, lo, hi in checked(form.rows):
        ct = lp.RowConstraint(-lp.infinity() if lo is None else lo,
                              lp.infinity() if hi is None else hi, "")
        for k, c in terms:
            ct.SetCoefficient(var[k], ct.GetCoefficient(var[k]) + c)
    objective = lp.Objective()
    if with_objective:
        for k, c in form.objective.items():
            objective.SetCoefficient(var[k], c)
    objective.SetMinimization()
    lp.SetTimeLimit(int(max(0.01, share.left()) * 1000))
    code = lp.Solve()
    if code == pywraplp.Solver.INFEASIBLE:
        return "infeasible", None, None
    if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return "unknown", None, None
    status = "optimal" if code == pywraplp.Solver.OPTIMAL else "feasible"
    return status, {k: v.solution_value() for k, v in var.items()}, objective.Value()
