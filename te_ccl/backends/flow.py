"""The flow model as a candidate: problem → backend → :class:`~te_ccl.schedule.Schedule`.

Non-reducing collectives (AllGather, Broadcast, AlltoAll, Gather, Scatter, custom) are
solved directly. Reductions reuse them backwards (TE-CCL; docs/model.md "Reductions"):

* ReduceScatter = AllGather on the reversed topology, played backwards in time: where
  the AllGather copied a chunk, the ReduceScatter adds partials (``op="reduce"``); the
  reversed problem is a tree (each node receives once) and switches copy only where they
  can reduce.
* Reduce = Broadcast reversed in the same way.
* AllReduce = ReduceScatter (chunk ``i`` summed at rank ``ranks[i // chunks_per_rank]``)
  then AllGather of the sums, its epochs shifted to start when the first phase ends;
  where a switch reduces and copies (FRED), one problem instead
  (:func:`te_ccl.model.problem.allreduce_problem`): partials summed in forward time into
  the switch, the sum multicast from there, the two overlapping across chunks.
"""

from __future__ import annotations

from dataclasses import replace

from te_ccl.backends.base import Progress, SolveParams, SolveResult
from te_ccl.backends.select import check_size, run_backend
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import SHARES, Budget
from te_ccl.model.epochs import epoch_duration
from te_ccl.model.extract import reverse_in_time
from te_ccl.model.problem import (
    Demand,
    Problem,
    allreduce_problem,
    build_problem,
    make_problem,
    members_of,
)
from te_ccl.schedule import Schedule, SolveInfo
from te_ccl.topology.model import Topology

__all__ = ["solve_flow"]


def solve_flow(topology: Topology, collective: Collective, params: SolveParams,
               progress: Progress | None = None) -> Schedule:
    """The flow model's schedule of checked input, its solver ``params.backend`` (``auto``:
    picked by the model's size, :func:`~te_ccl.backends.select.choose_backend`), within
    ``params.time_limit_s``."""
    check_size(collective.commodities, len(topology.links))  # before building anything
    budget = Budget.of(params.time_limit_s)
    if collective.is_reduction:
        result, epoch_s = _solve_reduction(topology, collective, params, budget, progress)
    else:
        problem = build_problem(topology, collective, params.epoch)
        result, epoch_s = run_backend(problem, params, budget, progress), problem.epoch_s
    info = SolveInfo(backend=result.backend,
                     solver_time_s=round(budget.elapsed(), 4), optimal=result.optimal,
                     status=result.status, variables=result.variables,
                     constraints=result.constraints, notes=result.notes)
    return Schedule(topology, collective, epoch_s, tuple(sorted(result.transfers)), info)


def _reduction_problem(topology: Topology, collective: Collective, owner: dict[int, int],
                       params: SolveParams) -> Problem:
    """The reversed fan-out whose time reversal sums chunk ``i`` at rank ``owner[i]``."""
    rev = topology.reversed()
    demands = []
    for c in collective.chunks():
        root = owner[c.id]
        dests = tuple(topology.gpu(r) for r in c.sources if r != root)
        if dests:
            demands.append(Demand(c.id, (topology.gpu(root),), dests))
    chunk = collective.chunk_bytes
    return make_problem(rev, chunk, tuple(demands), tree=True,
                        epoch_s=epoch_duration(topology, chunk, params.epoch),
                        members=members_of(topology, collective))


def _gather_problem(topology: Topology, collective: Collective, owner: dict[int, int],
                    epoch_s: float) -> Problem:
    """AllReduce's second phase: chunk ``i`` from ``owner[i]`` to every other rank.

    Both phases relay through the ranks' GPUs only, each of which is a destination of
    every chunk, so no chunk counts against a GPU's relay buffer in either phase.
    """
    demands = tuple(Demand(c.id, (topology.gpu(owner[c.id]),),
                           tuple(topology.gpu(r) for r in c.destinations if r != owner[c.id]))
                    for c in collective.chunks())
    return make_problem(topology, collective.chunk_bytes, demands, epoch_s=epoch_s,
                        members=members_of(topology, collective))


def _merge(a: SolveResult, b: SolveResult, transfers: tuple, finish: int) -> SolveResult:
    backend = a.backend if a.backend == b.backend else f"{a.backend}+{b.backend}"
    return SolveResult(transfers, finish, a.optimal and b.optimal,
                       f"reduce-scatter: {a.status} | all-gather: {b.status}",
                       a.variables + b.variables, a.constraints + b.constraints,
                       tuple(f"phase 1: {n}" for n in a.notes)
                       + tuple(f"phase 2: {n}" for n in b.notes), backend)


def _solve_reduction(topology: Topology, collective: Collective, params: SolveParams,
                     budget: Budget, progress: Progress | None) -> tuple[SolveResult, float]:
    allreduce = collective.kind is CollectiveKind.ALLREDUCE
    if allreduce and any(n.can_reduce and n.can_copy for n in topology.nodes if not n.is_gpu):
        joint = allreduce_problem(topology, collective, params.epoch)
        result = run_backend(joint, params, budget, progress)
        return replace(result, notes=result.notes + (
            "solved as one problem: partials summed in forward time where a switch reduces, "
            "the sum multicast from there",)), joint.epoch_s
    owner = collective.reduction_owners()
    problem = _reduction_problem(topology, collective, owner, params)
    share = Budget.of(budget.left() * SHARES.reduction) if allreduce else budget
    first = run_backend(problem, params, share, progress)
    f1 = first.finish_epoch
    reduced = reverse_in_time(first.transfers, f1)
    if not allreduce:
        result = replace(first, transfers=tuple(reduced),
                         notes=first.notes + ("solved as the reversed fan-out on the reversed "
                                              "topology, played backwards in time",))
        return result, problem.epoch_s
    second = run_backend(_gather_problem(topology, collective, owner, problem.epoch_s),
                         params, budget, progress)
    shifted = tuple(replace(t, start_epoch=t.start_epoch + f1, arrive_epoch=t.arrive_epoch + f1)
                    for t in second.transfers)
    merged = _merge(first, second, tuple(reduced) + shifted, f1 + second.finish_epoch)
    # the sum of two minimal phases is not proven minimal for the whole AllReduce
    return replace(merged, optimal=False), problem.epoch_s
