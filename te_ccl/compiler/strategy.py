"""Run one strategy: a flow model (``milp``, ``lp``, ``rounds``, or for ``auto`` the one
the model's size suits) or the ``scale`` backend, on checked input.

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

Which strategy ``--backend auto`` runs, and against what, is :mod:`te_ccl.compiler.portfolio`'s call.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from te_ccl.backends.base import Clock, Progress, SolveParams, SolveResult
from te_ccl.backends.select import check_size, run_backend, strategy_for
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import until
from te_ccl.errors import SpecError
from te_ccl.model.epochs import epoch_duration
from te_ccl.model.extract import reverse_in_time
from te_ccl.model.footprint import check_fits
from te_ccl.model.outliers import without_slow_links
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

__all__ = ["check_input", "run_strategy", "MAX_COMMODITIES"]

MAX_COMMODITIES = 2**21  # chunks one compile routes (a 1024-GPU AlltoAll has 2**20)


_ACCEPTED: list[tuple[Topology, Collective]] = []  # the last input accepted


def check_input(topology: Topology, collective: Collective) -> None:
    """Refuse input no strategy can compile (:class:`SpecError`), before anything large is
    built. The compile asks once at its start; the portfolio and ``solve``, which may
    also be called alone, ask again, and the pair accepted last (the same topology
    object, an equal collective) passes at once."""
    if _ACCEPTED and _ACCEPTED[0][0] is topology and _ACCEPTED[0][1] == collective:
        return
    for r in collective.ranks:
        if not 0 <= r < topology.ngpus:
            raise SpecError(f"rank {r} is not in topology {topology.name!r} "
                            f"({topology.ngpus} GPUs)", key="ranks")
    if collective.chunk_bytes <= 0:
        raise SpecError(f"size {collective.size_bytes} bytes is too small for "
                        f"{collective.nchunks} chunks", key="size")
    check_fits(topology, collective)  # before building anything large
    if collective.commodities > MAX_COMMODITIES:
        raise SpecError(f"{collective.commodities} chunks to route; at most {MAX_COMMODITIES} "
                        "fit one compile (use fewer chunks)", key="chunks")
    _check_reach(topology, collective)
    _usable_links(topology, collective)  # read with the input, before any strategy starts
    _ACCEPTED[:] = [(topology, collective)]


def _check_reach(topology: Topology, collective: Collective) -> None:
    """Every chunk can reach its destinations relaying through the ranks' GPUs and
    switches only: the runtime runs the algorithm on the ranks' GPUs alone."""
    members = members_of(topology, collective)
    outside = set(topology.gpus) - members
    if not outside:
        return  # unreachable ranks are the topology's fault: the solver names the chunk
    graph = topology.graph()
    graph.remove_nodes_from(outside)
    component = {n: i for i, part in enumerate(nx.strongly_connected_components(graph))
                 for n in part}
    if len({component[m] for m in members}) == 1:
        return
    reach: dict[str, set[str]] = {}
    for c in collective.chunks():
        for s in c.sources:
            a = topology.gpu(s)
            for d in c.destinations:
                b = topology.gpu(d)
                if a != b and b not in reach.setdefault(a, nx.descendants(graph, a)):
                    raise SpecError(
                        f"rank {s} cannot reach rank {d} without relaying through a GPU "
                        f"outside the ranks ({', '.join(sorted(outside)[:3])}"
                        f"{', …' if len(outside) > 3 else ''}); the runtime runs the "
                        "algorithm on the ranks' GPUs only", key="ranks")


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
                     clock: Clock, progress: Progress | None) -> tuple[SolveResult, float]:
    allreduce = collective.kind is CollectiveKind.ALLREDUCE
    if allreduce and any(n.can_reduce and n.can_copy for n in topology.nodes if not n.is_gpu):
        joint = allreduce_problem(topology, collective, params.epoch)
        result = run_backend(joint, params, clock, progress)
        return replace(result, notes=result.notes + (
            "solved as one problem: partials summed in forward time where a switch reduces, "
            "the sum multicast from there",)), joint.epoch_s
    owner = collective.reduction_owners()
    problem = _reduction_problem(topology, collective, owner, params)
    first = run_backend(problem, params, Clock(clock.left / 2) if allreduce else clock, progress)
    f1 = first.finish_epoch
    reduced = reverse_in_time(first.transfers, f1)
    if not allreduce:
        result = replace(first, transfers=tuple(reduced),
                         notes=first.notes + ("solved as the reversed fan-out on the reversed "
                                              "topology, played backwards in time",))
        return result, problem.epoch_s
    second = run_backend(_gather_problem(topology, collective, owner, problem.epoch_s),
                         params, clock, progress)
    shifted = tuple(replace(t, start_epoch=t.start_epoch + f1, arrive_epoch=t.arrive_epoch + f1)
                    for t in second.transfers)
    merged = _merge(first, second, tuple(reduced) + shifted, f1 + second.finish_epoch)
    # the sum of two minimal phases is not proven minimal for the whole AllReduce
    return replace(merged, optimal=False), problem.epoch_s


def run_strategy(topology: Topology, collective: Collective, params: SolveParams,
                 progress: Progress | None = None) -> Schedule:
    """The schedule of ``params.backend`` (``auto``: the flow model, its solver picked by
    the model's size) for input :func:`check_input` accepted, within its time limit, on
    the links a fast schedule may use (:func:`without_slow_links`)."""
    with until(params.time_limit_s):
        usable, left_out = _usable_links(topology, collective)
        if strategy_for(params) == "scale":
            from te_ccl.backends.scale import compile_scale

            schedule = compile_scale(usable, collective, params, progress)
        else:
            schedule = _flow_model(usable, collective, params, progress)
    if left_out is None:
        return schedule
    return replace(schedule, topology=topology).with_info(notes=schedule.info.notes + (left_out,))


_USABLE: list[tuple[Topology, Collective, tuple[Topology, str | None]]] = []  # the last


def _usable_links(topology: Topology, collective: Collective) -> tuple[Topology, str | None]:
    """:func:`without_slow_links` once per compile: the portfolio runs several strategies
    on one topology and chunking, and the pair seen last (the same topology object, an
    equal collective) gets the links found then."""
    if _USABLE and _USABLE[0][0] is topology and _USABLE[0][1] == collective:
        return _USABLE[0][2]
    _USABLE[:] = [(topology, collective, without_slow_links(topology, collective))]
    return _USABLE[0][2]


def _flow_model(topology: Topology, collective: Collective, params: SolveParams,
                progress: Progress | None) -> Schedule:
    check_size(collective.commodities, len(topology.links))  # before building anything
    clock = Clock(params.time_limit_s)
    if collective.is_reduction:
        result, epoch_s = _solve_reduction(topology, collective, params, clock, progress)
    else:
        problem = build_problem(topology, collective, params.epoch)
        result, epoch_s = run_backend(problem, params, clock, progress), problem.epoch_s
    info = SolveInfo(backend=result.backend,
                     solver_time_s=round(clock.elapsed, 4), optimal=result.optimal,
                     status=result.status, variables=result.variables,
                     constraints=result.constraints, notes=result.notes)
    return Schedule(topology, collective, epoch_s, tuple(sorted(result.transfers)), info)
