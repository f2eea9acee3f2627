"""The façade: ``solve(topology, collective, params) -> Schedule``.

It runs what :func:`te_ccl.backends.select.strategy_for` decides: the backend given,
``milp``, ``lp``, ``rounds`` or ``scale`` (its candidate in the registry,
:func:`te_ccl.compiler.candidates.backend`),
or for ``auto`` the portfolio of :mod:`te_ccl.compiler.portfolio` (scale backend, flow
model and templates raced, judged by ``judge``); with a ``max_horizon`` ``auto`` runs the
flow model alone, the one strategy the horizon bounds.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> s = solve(topo, Collective(CollectiveKind.ALLREDUCE, 2000, (0, 1)),
...           SolveParams(backend="milp", time_limit_s=5))
>>> s.finish_epoch, sorted((t.start_epoch, t.src, t.dst, t.op) for t in s.transfers)
(2, [(0, 'a', 'b', 'reduce'), (0, 'b', 'a', 'reduce'), (1, 'a', 'b', 'copy'), (1, 'b', 'a', 'copy')])
"""

from __future__ import annotations

from te_ccl.backends.base import Progress, SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.collective.model import Collective
from te_ccl.compiler.candidates import Known, backend
from te_ccl.compiler.portfolio import PREDICTED, Judge, choose
from te_ccl.compiler.strategy import check_input
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["solve", "SolveParams", "Judge", "Known", "PREDICTED"]


def solve(topology: Topology, collective: Collective, params: SolveParams | None = None,
          progress: Progress | None = None, judge: Judge = PREDICTED,
          chunk_choices: tuple[int, ...] = (), known: Known = ()) -> Schedule:
    """Compile ``collective`` on ``topology`` into a schedule (see the module docstring).

    ``chunk_choices``: chunks-per-rank values also raced (``--chunks auto``), each
    chunking solved by the backend given; ``known``: schedules of ``auto``'s candidates
    built already (:func:`te_ccl.compiler.portfolio.choose`).

    Raises
    ------
    SpecError
        ranks outside the topology, a size the chunking cannot divide.
    SolverError
        infeasible within the maximum horizon, or the time limit reached without a solution.
    """
    params = params or SolveParams()
    check_input(topology, collective)
    if strategy_for(params) == "portfolio" or chunk_choices:
        schedule = choose(topology, collective, params, judge, chunk_choices, progress, known)
    else:
        schedule = backend(params.backend).build(topology, collective, params, progress)
    if not collective.uneven:
        return schedule
    return schedule.with_info(notes=schedule.info.notes + (
        f"size: {collective.size_bytes} bytes do not divide into {collective.nchunks} chunks; "
        f"planned and timed with chunks of {collective.chunk_bytes:.6g} bytes on average (the "
        "runtime divides the count it is given)",))
