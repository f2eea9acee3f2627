"""The schedule a compile keeps before it writes it: solved on the machine as the output
can drive it (:func:`forward_only`, built once per compile as :class:`Usable`), judged
by its file (:func:`solve_best`), and refused unless the independent checker passes it
(:func:`solve_checked`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from te_ccl.backends.base import Progress, SolveParams
from te_ccl.collective.model import Collective
from te_ccl.compiler.judge import Timer
from te_ccl.compiler.solve import Judge, Known, solve
from te_ccl.errors import VerificationError
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Node, Topology
from te_ccl.verify.schedule_check import check_schedule

__all__ = ["Usable", "drives_in_switch", "forward_only", "refuse", "solve_best", "solve_checked"]


def drives_in_switch(fmt: str, node: Node) -> bool:
    """Whether an output of format ``fmt`` can make switch ``node`` copy and reduce: the
    schedule JSON can (it is the program of a FRED fabric, and the schedule an MSCCL++
    plan is written from), an MSCCL++ plan on NVLink SHARP switches (multimem loads and
    stores), MSCCL XML never (each of its sends goes to one peer)."""
    return fmt == "json" or (fmt == "mscclpp" and node.nvls)


def forward_only(topology: Topology, fmt: str = "xml") -> Topology:
    """``topology`` whose switches that ``fmt`` cannot drive (:func:`drives_in_switch`)
    neither copy nor reduce (itself if none changes): by default what an MSCCL program
    can use, since each of its sends goes to one peer."""
    return _forwarding(topology, fmt) if _undriven(topology, fmt) else topology


def _undriven(topology: Topology, fmt: str) -> bool:
    """Whether a switch of ``topology`` copies or reduces where ``fmt`` cannot drive it."""
    return any((n.can_copy or n.can_reduce) and not drives_in_switch(fmt, n)
               for n in topology.nodes if not n.is_gpu)


def _forwarding(topology: Topology, fmt: str) -> Topology:
    nodes = tuple(n if n.is_gpu or drives_in_switch(fmt, n)
                  else replace(n, can_copy=False, can_reduce=False) for n in topology.nodes)
    return replace(topology, nodes=nodes)


@dataclass(frozen=True)
class Usable:
    """The machine a compile solves on, built once per compile: ``topology`` with every
    switch forwarding only unless the output drives in-switch copy and reduction
    (:meth:`of`'s ``in_switch``); ``forwarded``: whether a switch had to give them up
    (the written file's notes say so)."""

    topology: Topology
    forwarded: bool

    @classmethod
    def of(cls, topology: Topology, in_switch: bool) -> Usable:
        if in_switch or not _undriven(topology, "xml"):
            return cls(topology, forwarded=False)
        return cls(_forwarding(topology, "xml"), forwarded=True)


def solve_best(topology: Topology, collective: Collective, params: SolveParams,
               chunk_choices: tuple[int, ...] = (), progress: Progress | None = None,
               judge: Judge | None = None, in_switch: bool = False,
               known: Known = ()) -> Schedule:
    """What ``teccl compile`` keeps before checking it: ``solve`` judged by ``judge`` (a
    :class:`Timer`'s, by default a fresh one: the replay of the lowered XML), over the
    chunkings of :func:`te_ccl.compiler.chunking.chunk_candidates` when ``chunk_choices`` is given
    (``--chunks auto``), ``known`` candidates among them. Switches only forward unless
    ``in_switch``."""
    if not in_switch:
        topology = forward_only(topology)
    return solve(topology, collective, params, progress, judge=judge or Timer().judge,
                 chunk_choices=chunk_choices, known=known)


def solve_checked(topology: Topology, collective: Collective, params: SolveParams,
                   chunk_choices: tuple[int, ...], progress: Progress | None,
                   judge: Judge, in_switch: bool = False) -> Schedule:
    """:func:`solve_best`, refused (:func:`refuse`) unless the independent schedule
    checker passes it: nothing is lowered or written from a schedule it rejects."""
    schedule = solve_best(topology, collective, params, chunk_choices, progress, judge,
                          in_switch)
    refuse(check_schedule(schedule))
    return schedule


def refuse(violations: list) -> None:
    """Raise :class:`VerificationError` for the schedule checker's ``violations``."""
    if violations:
        first = violations[0]
        raise VerificationError(f"schedule check failed ({len(violations)} violation(s)); "
                                f"first: [{first.rule}] {first.message}")
