"""``solve_scale``: the scale backend on a Problem as given (no sub-chunking here)."""

from __future__ import annotations

from te_ccl.backends.base import Clock, Progress, SolveParams, SolveResult
from te_ccl.backends.scale.alltoall import solve_rail_alltoall
from te_ccl.backends.scale.greedy import greedy_transfers
from te_ccl.backends.scale.torus import solve_torus
from te_ccl.errors import SolverError
from te_ccl.model.extract import prune
from te_ccl.model.problem import Problem

__all__ = ["solve_scale"]


def _greedy(problem: Problem, params: SolveParams, clock: Clock):
    if any(len(d.sources) != 1 for d in problem.demands) or problem.relay_limit:
        raise SolverError("the scale backend needs single-source chunks and no GPU buffer "
                          "limits; use --backend rounds")
    transfers = greedy_transfers(problem, [d.chunk for d in problem.demands],
                                 deadline=lambda: clock.left <= 0, seed=params.seed)
    wanted = {(d.chunk, v) for d in problem.demands for v in d.destinations}
    if any((t.chunk, t.dst) not in wanted for t in transfers):
        transfers = prune(problem, transfers)
    finish = max((t.arrive_epoch for t in transfers), default=0)
    return transfers, finish, ("greedy link–chunk assignment per epoch (random start in "
                               f"the chunk order, seed {params.seed})",)


def solve_scale(problem: Problem, params: SolveParams, clock: Clock,
                progress: Progress | None = None) -> SolveResult:
    """Torus symmetry or the rail AlltoAll when they apply, else the greedy; never proven optimal.

    Raises SolverError for switches, multi-source chunks or buffer limits (the greedy
    does not model them) and when the time limit runs out.
    """
    if problem.state.incoming or problem.state.busy:
        raise SolverError("the scale backend starts from an empty network")
    solved, method = solve_torus(problem, params, clock), "symmetry"
    if solved is None:
        solved, method = solve_rail_alltoall(problem), "rail-alltoall"
    if solved is None:
        solved, method = _greedy(problem, params, clock), "greedy"
    transfers, finish, notes = solved
    if progress:
        progress(f"scale: {method}, {len(transfers)} transfers, {finish} epochs "
                 f"({clock.elapsed:.1f} s)")
    return SolveResult(tuple(transfers), finish, False,
                       f"scale/{method}: feasible (not proven optimal)", 0, 0, notes, "scale")
