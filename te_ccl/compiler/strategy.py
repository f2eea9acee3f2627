"""Run one strategy: a flow model (``milp``, ``lp``, ``rounds``, or for ``auto`` the one
the model's size suits) or the ``scale`` backend, on checked input.

The flow model's run (problem → backend → schedule, reductions played backwards) is
:func:`te_ccl.backends.flow.solve_flow`; the ``scale`` backend's is
:func:`te_ccl.backends.scale.compile_scale`: both take ``(topology, collective, params)``
and return a :class:`~te_ccl.schedule.Schedule`. This module checks the input both get
and the links they may use.

Which strategy ``--backend auto`` runs, and against what, is :mod:`te_ccl.compiler.portfolio`'s call.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from te_ccl.backends.base import Progress, SolveParams
from te_ccl.backends.flow import solve_flow
from te_ccl.backends.scale import compile_scale
from te_ccl.backends.select import strategy_for
from te_ccl.collective.model import Collective
from te_ccl.deadline import until
from te_ccl.errors import SpecError
from te_ccl.model.footprint import check_fits
from te_ccl.model.outliers import without_slow_links
from te_ccl.model.problem import members_of
from te_ccl.schedule import Schedule
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
    usable_links(topology, collective)  # read with the input, before any strategy starts
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


def run_strategy(topology: Topology, collective: Collective, params: SolveParams,
                 progress: Progress | None = None) -> Schedule:
    """The schedule of ``params.backend`` (``auto``: the flow model, its solver picked by
    the model's size) for input :func:`check_input` accepted, within its time limit, on
    the links a fast schedule may use (:func:`without_slow_links`)."""
    with until(params.time_limit_s):
        usable, left_out = usable_links(topology, collective)
        if strategy_for(params) == "scale":
            schedule = compile_scale(usable, collective, params, progress)
        else:
            schedule = solve_flow(usable, collective, params, progress)
    if left_out is None:
        return schedule
    return replace(schedule, topology=topology).with_info(notes=schedule.info.notes + (left_out,))


_USABLE: list[tuple[Topology, Collective, tuple[Topology, str | None]]] = []  # the last


def usable_links(topology: Topology, collective: Collective) -> tuple[Topology, str | None]:
    """:func:`without_slow_links` once per compile: the portfolio runs several strategies
    on one topology and chunking, and the pair seen last (the same topology object, an
    equal collective) gets the links found then."""
    if _USABLE and _USABLE[0][0] is topology and _USABLE[0][1] == collective:
        return _USABLE[0][2]
    _USABLE[:] = [(topology, collective, without_slow_links(topology, collective))]
    return _USABLE[0][2]
