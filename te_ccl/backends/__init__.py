"""Solver backends, all on OR-Tools.

Leaf adapters run one formulation on one solver: :mod:`.cpsat` (CP-SAT) and
:mod:`.linear` (GLOP, PDLP, HiGHS). Strategies on top take a
:class:`~te_ccl.model.problem.Problem` and return a :class:`~te_ccl.backends.base.SolveResult`:
:mod:`.milp` (horizon search), :mod:`.lp` (fractional flows), :mod:`.rounds` (rolling
windows) and :mod:`.scale` (256+ GPUs); :mod:`.base` names them (``FLOW_SOLVERS``,
``BACKENDS``) and :mod:`.select` picks one for ``auto``; :mod:`.flow` takes a topology and collective through the flow
model to a :class:`~te_ccl.schedule.Schedule`. Modules are imported when chosen, so
loading the CLI stays fast.
"""
