"""``--backend``: what runs (:func:`strategy_for`, the one place that decides), and for the
flow model which solver (``auto``: by size, :func:`choose_backend`), and why."""

from __future__ import annotations

import importlib
from dataclasses import replace

from te_ccl.backends.base import FLOW_SOLVERS, Progress, SolveParams, SolveResult
from te_ccl.deadline import Budget
from te_ccl.errors import SolverError
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.model.problem import Problem
from te_ccl.model.relays import check_relay_room

__all__ = ["strategy_for", "run_backend", "choose_backend", "backend_for", "MILP_MAX_VARIABLES",
           "LP_MAX_VARIABLES", "MAX_CHUNK_LINKS", "check_size"]

# CP-SAT proves minimal horizons quickly up to roughly this many transfer variables
# (torus 4×4 AllGather, 2 chunks: ~25k; mesh 8×8, 1 chunk: 330k does not finish).
MILP_MAX_VARIABLES = 60_000
# GLOP needs > 60 s on the time-expanded LPs of mesh4x4 AlltoAll (~130k variables);
# HiGHS and PDLP are no better there (dgx2 AlltoAll, 185k: HiGHS > 60 s, PDLP 27 s)
LP_MAX_VARIABLES = 30_000
# chunk-link pairs of one problem: each round of ``rounds`` builds variables for all of
# them (a 64-GPU mesh AlltoAll at one chunk per rank has 917k)
MAX_CHUNK_LINKS = 1_000_000
# copy-free demands: CP-SAT proves the minimal horizon quickly only on tiny models
TINY_VARIABLES = 5_000


def strategy_for(params: SolveParams) -> str:
    """What a compile with ``params`` runs: ``portfolio`` (``auto``: the scale backend, the
    flow model and the templates raced, :mod:`te_ccl.compiler.portfolio`), ``scale``, or
    ``flow``, the flow model (its solver ``params.backend``, or under ``auto`` picked by
    size). A ``max_horizon`` bounds the flow model alone, so ``auto`` with one runs it."""
    if params.backend == "scale":
        return "scale"
    if params.backend == "auto" and params.max_horizon is None:
        return "portfolio"
    return "flow"


def choose_backend(problem: Problem) -> tuple[str, str]:
    """(backend, reason) for ``auto`` from the model size at the horizon lower bound.

    Copy-free demands (AlltoAll, Gather, Scatter, single-destination custom) are hard for
    CP-SAT beyond tiny sizes but route well as LP flows; multicast demands need the MILP.
    """
    h = max(1, horizon_lower_bound(problem))
    single = all(len(d.destinations) == 1 for d in problem.demands) and not problem.tree
    return backend_for(problem.size * h, single, f"the horizon lower bound {h}")


def backend_for(estimate: int, single: bool, at: str) -> tuple[str, str]:
    """(backend, reason) for ``auto`` for a model of ``estimate`` transfer variables
    (counted ``at`` some horizon); ``single``: every chunk has one destination."""
    milp_max = TINY_VARIABLES if single else MILP_MAX_VARIABLES
    at = f"~{estimate} transfer variables at {at}"
    if estimate <= milp_max:
        return "milp", f"auto: milp, {at} ≤ {milp_max}"
    if single and estimate <= LP_MAX_VARIABLES:
        return "lp", (f"auto: lp, {at} ≤ {LP_MAX_VARIABLES} and every chunk has one "
                      "destination (no copies needed)")
    return "rounds", f"auto: rounds, {at}: too large for one model"


def check_size(chunks: int, links: int) -> None:
    """Refuse (:class:`SolverError`) a model of more than :data:`MAX_CHUNK_LINKS` pairs."""
    if chunks * links > MAX_CHUNK_LINKS:
        raise SolverError(f"{chunks} chunks on {links} links make {chunks * links} chunk-link "
                          f"pairs; one model holds at most {MAX_CHUNK_LINKS} (use fewer chunks)")


def run_backend(problem: Problem, params: SolveParams, budget: Budget,
                progress: Progress | None = None) -> SolveResult:
    """Solve ``problem`` with the backend of ``params`` (``auto`` decides by size)."""
    check_size(len(problem.demands), len(problem.timings))
    check_relay_room(problem)  # no horizon helps a GPU that must relay more than it holds
    if params.max_horizon is not None:  # refused before any model is built
        lo = horizon_lower_bound(problem)
        if lo > params.max_horizon:
            raise SolverError(f"infeasible: the demands need at least {lo} epochs, more than "
                              f"the maximum horizon {params.max_horizon} epochs")
    name, notes = params.backend, ()
    if name == "auto":
        name, why = choose_backend(problem)
        notes = (why,)
        if progress:
            progress(why)
    module, attr = FLOW_SOLVERS[name].split(":")
    run = getattr(importlib.import_module(module), attr)
    result = run(problem, params, budget, progress)
    if params.max_horizon is not None and result.finish_epoch > params.max_horizon:
        raise SolverError(f"infeasible: {name} found no schedule within the maximum horizon "
                          f"{params.max_horizon} epochs (it needs {result.finish_epoch})")
    return replace(result, backend=name, notes=notes + result.notes)
