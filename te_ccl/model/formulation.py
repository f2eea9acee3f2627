"""The whole model for one horizon: variables with bounds, the constraint rows, the objective.

Which forwarding family applies at a node follows its role in the problem:

=================  ==============  ===================
node               copies          does not copy
=================  ==============  ===================
has a buffer       (2) hold        (4) conserve
no buffer          (3) cut-through (5) route
=================  ==============  ===================

Objective ("deliver early", the second goal once the horizon is minimal): the sum of the
arrival epochs of all transfers, ``Σ (t + d_l)·x[c,l,t]`` (and of the partial sums
``y``) — every transfer costs, the earlier the cheaper, so redundant ones vanish and
deliveries move forward. With several jobs (``problem.weights``) each job's finish epoch
``f[j]`` (10) adds ``K·w_j·f[j]``, ``K`` the number of deliveries, so a job finishing an
epoch earlier weighs about as much as every delivery moving one epoch forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from te_ccl.deadline import checked
from te_ccl.model import constraints as cons
from te_ccl.model.problem import Problem
from te_ccl.model.ten import TimeExpandedNetwork

__all__ = ["Formulation", "formulate"]


@dataclass(frozen=True)
class Formulation:
    """``variables``: key → upper bound (lower bound 0, integer in the MILP)."""

    ten: TimeExpandedNetwork
    variables: dict[tuple, int]
    rows: list[cons.Row]
    objective: dict[tuple, int]

    @property
    def size(self) -> tuple[int, int]:
        return len(self.variables), len(self.rows)


def formulate(problem: Problem, horizon: int, objective: dict[tuple, int] | None = None, *,
              start_limit: int | None = None, demands: bool = True,
              receive_once: bool = False, ten: TimeExpandedNetwork | None = None) -> Formulation:
    """Rows (1)–(9) of :mod:`te_ccl.model.constraints` for ``problem`` over ``horizon`` epochs.

    A round of the ``rounds`` backend passes ``start_limit`` (transfers start before it),
    ``demands=False`` (its objective rewards progress instead) and ``receive_once`` (7),
    and may pass its own (pruned) ``ten``.
    """
    ten = ten or TimeExpandedNetwork(problem, horizon, start_limit)
    copies, buffered = problem.copy_nodes, problem.buffered_nodes
    rows: list[cons.Row] = []
    rows += checked(cons.capacity(ten))
    rows += checked(cons.hold(ten, lambda n: n in copies and n in buffered))
    rows += checked(cons.cut_through(ten, lambda n: n in copies and n not in buffered))
    rows += checked(cons.conserve(ten, lambda n: n not in copies and n in buffered))
    rows += checked(cons.route(ten, lambda n: n not in copies and n not in buffered))
    if demands:
        rows += checked(cons.demand(ten))
    if problem.tree or receive_once:
        rows += checked(cons.tree(ten))
    if problem.relay_limit:
        rows += checked(cons.relay(ten))
    if problem.reductions:
        rows += checked(cons.reduce(ten))
    if problem.owners and demands:
        rows += checked(cons.finish(ten))
    variables: dict[tuple, int] = {x: 1 for x in ten.transfer_keys}
    width = max((len(d.destinations) for d in problem.demands), default=1)
    upper = {"s": width, "f": ten.horizon}
    for terms, _, _ in rows:
        for key, _ in terms:
            if key not in variables:
                variables[key] = upper.get(key[0], 1)
    if objective is None:
        objective = {x: x[2] + problem.timings[x[1]].delay for x in ten.x}
        objective.update({y: y[3] + problem.timings[y[2]].delay for y in ten.y})
        deliveries = sum(len(d.destinations) for d in problem.demands) + len(problem.reductions)
        objective.update({k: deliveries * problem.weights.get(k[1], 1)
                          for k in variables if k[0] == "f"})
    else:
        objective = {k: v for k, v in objective.items() if k in variables}
    return Formulation(ten, variables, rows, objective)
