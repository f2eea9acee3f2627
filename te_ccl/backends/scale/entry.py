"""``solve_scale``: the scale backend on a Problem as given (no sub-chunking here)."""

from __future__ import annotations

from typing import Literal

from te_ccl.backends.base import Progress, SolveParams, SolveResult
from te_ccl.backends.scale.alltoall import solve_rail_alltoall
from te_ccl.backends.scale.comb import solve_comb
from te_ccl.backends.scale.flow_alltoall import solve_flow_alltoall
from te_ccl.backends.scale.greedy import greedy_transfers
from te_ccl.backends.scale.grid import grid_shape
from te_ccl.backends.scale.grid_alltoall import METHOD as GRID
from te_ccl.backends.scale.grid_alltoall import solve_grid_alltoall
from te_ccl.backends.scale.hierarchical import solve_hierarchical
from te_ccl.backends.scale.moves import Moves
from te_ccl.backends.scale.torus import solve_torus
from te_ccl.backends.scale.trees import solve_trees
from te_ccl.deadline import Budget, in_hurry, skipping
from te_ccl.errors import SolverError
from te_ccl.model.extract import prune
from te_ccl.model.problem import Problem

__all__ = ["solve_moves", "solve_scale", "TREES_GAIN", "GRID_FIRST_FROM_HOPS"]

Routes = Literal["trees", "comb", "greedy"]
TREES_GAIN = 0.01  # the packed trees must beat the greedy by this to be kept
GRID_FIRST_FROM_HOPS = 10_000  # chunk-hops from which a mesh's first file is the grid's:
#                               below, the flow routes' file has few steps to lower and
#                               verify (mesh 4×4: 640 chunk-hops; 8×8: 21,504)


def _greedy(problem: Problem, params: SolveParams, budget: Budget) -> tuple[Moves, tuple[str, ...]]:
    if any(len(d.sources) != 1 for d in problem.demands) or problem.relay_limit:
        raise SolverError("the scale backend needs single-source chunks and no GPU buffer "
                          "limits; use --backend rounds")
    moves = greedy_transfers(problem, [d.chunk for d in problem.demands],
                             deadline=lambda: budget.spent, seed=params.seed)
    wanted = {(d.chunk, v) for d in problem.demands for v in d.destinations}
    names = moves.names
    if any((c, names[v]) not in wanted for c, v in zip(moves.chunk.tolist(), moves.dst.tolist(),
                                                       strict=True)):
        moves = Moves.of(names, prune(problem, moves.transfers()))
    return moves, ("greedy link–chunk assignment per epoch (random start in the chunk "
                   f"order, seed {params.seed})",)


def _grid_first(problem: Problem) -> tuple[Moves, tuple[str, ...]] | None:
    """For a compile's first file (:func:`~te_ccl.deadline.hurried`) on a mesh, the grid
    AlltoAll also below :data:`~te_ccl.backends.scale.grid_alltoall.GRID_FROM_HOPS` (from
    :data:`GRID_FIRST_FROM_HOPS`), at any chunk size: its groups lower and verify in a
    fraction of the time of the concurrent-flow routes' steps (on a mesh, one LP source
    per GPU and long routes), and the search that follows runs those routes in full.
    Where a chunk takes less than a link's latency its relays cost the file more than
    the flow routes' do (a first file further from the bound, not the search's). A torus
    keeps its flow routes (one source over the translation orbits, a short lowering),
    which its grid file does not match."""
    if not in_hurry():
        return None
    shape = grid_shape(problem.topology)
    if shape is None or shape[1]:
        return None
    solved = solve_grid_alltoall(problem, GRID_FIRST_FROM_HOPS)
    return solved if solved is not None and skipping("the concurrent-flow routes") else None


def _trees_or_greedy(problem: Problem, params: SolveParams, budget: Budget
                     ) -> tuple[tuple[Moves, tuple[str, ...]], str]:
    """The packed trees where they apply and finish :data:`TREES_GAIN` earlier than the
    greedy's own routes, else the greedy: tree routes pair a relay's receive and send
    peers less often, so their MSCCL files need more steps per connection (dgx1
    AllReduce 1 MB at 2 chunks per GPU: 32 sub-chunks no longer fit, where they do for
    the greedy) and a tie goes to the greedy."""
    packed = solve_trees(problem, budget)
    greedy = _greedy(problem, params, budget)
    if packed is not None and packed[0].finish < greedy[0].finish * (1 - TREES_GAIN):
        return packed, "trees"
    return greedy, "greedy"


def solve_moves(problem: Problem, params: SolveParams, budget: Budget,
                progress: Progress | None = None, *, routes: Routes = "trees"
                ) -> tuple[Moves, str, tuple[str, ...]]:
    """(moves, method, notes): torus symmetry, the rail AlltoAll, the box hierarchy, the
    grid AlltoAll (mesh or torus, where one step per chunk and hop is too many), the
    concurrent-flow paths (unicast demands) when they apply, else by ``routes``: the
    greedy's own routes (``"greedy"``); up to :data:`~te_ccl.backends.scale.trees.MAX_GPUS`
    GPUs, packed broadcast trees where they beat it (``"trees"``,
    :func:`_trees_or_greedy`); comb trees on a 2D mesh (``"comb"``,
    :mod:`~te_ccl.backends.scale.comb`).

    Raises SolverError for switches, multi-source chunks or buffer limits (the greedy
    does not model them) and when the time limit runs out.
    """
    if problem.state.incoming or problem.state.busy:
        raise SolverError("the scale backend starts from an empty network")
    solved, method = solve_torus(problem, params, budget), "symmetry"
    if solved is None:
        solved, method = solve_rail_alltoall(problem), "rail-alltoall"
    if solved is None:
        solved, method = solve_hierarchical(problem), "hierarchical"
    if solved is None:
        solved, method = solve_grid_alltoall(problem), GRID
    if solved is None:
        solved, method = _grid_first(problem), GRID
    if solved is None:
        solved, method = solve_flow_alltoall(problem, budget, params.seed), "flow-alltoall"
    if solved is None and routes == "comb":
        solved, method = solve_comb(problem, lambda: budget.spent), "comb"
    if solved is None and routes == "trees":
        solved, method = _trees_or_greedy(problem, params, budget)
    if solved is None:
        solved, method = _greedy(problem, params, budget), "greedy"
    moves, notes = solved
    if progress:
        progress(f"scale: {method}, {len(moves)} transfers, {moves.finish} epochs "
                 f"({budget.elapsed():.1f} s)")
    return moves, method, notes


def solve_scale(problem: Problem, params: SolveParams, budget: Budget,
                progress: Progress | None = None) -> SolveResult:
    """The backend signature: :func:`solve_moves` as a SolveResult (never proven optimal)."""
    moves, method, notes = solve_moves(problem, params, budget, progress)
    return SolveResult(tuple(moves.transfers()), moves.finish, False,
                       f"scale/{method}: feasible (not proven optimal)", 0, 0, notes, "scale")
