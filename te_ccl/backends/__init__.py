"""Solver backends, all on OR-Tools: ``cpsat`` (MILP), ``lp`` (GLOP flows), ``rounds``.

Each takes a :class:`~te_ccl.model.problem.Problem` and returns a
:class:`~te_ccl.backends.base.SolveResult`; :mod:`te_ccl.backends.select` picks one
(``auto``). Modules are imported lazily so that loading the CLI stays fast.
"""
