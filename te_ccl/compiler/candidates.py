"""Every candidate of the compile behind one signature, in one registry.

A :class:`Candidate` builds a schedule as ``build(topology, collective, params)`` (None:
it does not apply after all) and says where it is offered: ``applies(topology,
collective, fmt)``, the output format an input as the topology is, so a candidate only one
format can write is simply not offered under another. :data:`CANDIDATES` holds them all:

- ``--backend NAME``'s runs (:func:`backend`), one for each name of
  :data:`te_ccl.backends.base.BACKENDS` (the list ``--help`` shows without loading a
  solver): the flow model (``auto``: its solver picked by size; each of
  :data:`~te_ccl.backends.base.FLOW_SOLVERS`) and the ``scale`` backend;
- the race's solvers: the scale backend (:func:`te_ccl.backends.scale.scale_method`
  names its trial) and the flow model;
- the templates of :data:`te_ccl.baselines.BASELINES` and the in-switch schedule;
- the grid method, a first file only where a file of one step per chunk and hop is too
  many transfers (:func:`~te_ccl.backends.scale.grid_lines.grid_lines_takes`);
- the MSCCL++ box plan, under ``--format mscclpp`` only: its build is the stand-in
  schedule the plan lowering replaces (:func:`te_ccl.lower.mscclpp.box_candidate`),
  built in milliseconds, so a first file tries it before any other and the race
  judges it before any other (:func:`known`).

``order`` places a candidate among those offered: the box plan, the grid method, the
scale method, the templates (in the order :func:`te_ccl.baselines.applicable` gives for
the input), the in-switch schedule. ``first``: a compile's first file tries it
(:func:`first_file`). When the race runs the scale backend, the flow model and the
templates is :mod:`te_ccl.compiler.portfolio`'s call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Literal, Protocol

import te_ccl.baselines as baselines
from te_ccl.backends.base import BACKENDS, Progress, SolveParams
from te_ccl.backends.scale import scale_method
from te_ccl.backends.scale.grid_lines import METHODS as GRID_METHODS
from te_ccl.backends.scale.grid_lines import grid_lines_schedule, grid_lines_takes
from te_ccl.baselines.direct import direct
from te_ccl.collective.model import Collective
from te_ccl.compiler.strategy import check_input, run_strategy
from te_ccl.errors import SolverError
from te_ccl.fred import in_switch_candidate
from te_ccl.lower.mscclpp import box_candidate
from te_ccl.model.relays import relay_overflow
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["CANDIDATES", "Candidate", "FLOW", "Known", "TEMPLATE_MAX_DELIVERIES", "backend",
           "deliveries", "first_file", "known", "offered", "scale", "templates"]

Kind = Literal["backend", "flow", "scale", "template", "grid", "plan"]
Known = tuple[tuple[str, Schedule], ...]  # schedules built already, each with its trial name

# (chunk, destination) pairs beyond which the templates take minutes to place hop by hop
# (a 64-GPU AllGather at 32 chunks per rank has 129k)
TEMPLATE_MAX_DELIVERIES = 300_000
PACED_TRIES = 4  # paced direct templates of a rooted first file, halving what is in flight


class Build(Protocol):
    """How a candidate is built: its schedule of the input (None: it does not apply after
    all); ``progress`` hears a solver's steps, a template ignores it."""

    def __call__(self, topology: Topology, collective: Collective, params: SolveParams,
                 progress: Progress | None = None) -> Schedule | None: ...


def _always(topology: Topology, collective: Collective, fmt: str) -> bool:
    return True


@dataclass(frozen=True)
class Candidate:
    """One candidate: ``name`` in the registry, ``kind``, how it is built, where it is
    offered, whether a first file tries it and its ``order`` among those offered."""

    name: str
    kind: Kind
    build: Build
    applies: Callable[[Topology, Collective, str], bool] = _always
    first: bool = False
    order: int = 0

    def trial(self, topology: Topology, collective: Collective) -> str:
        """The name the race's notes give it (a scale or grid method's by its method)."""
        if self.kind == "scale":
            return f"scale/{scale_method(topology, collective)}"
        if self.kind == "grid":
            return f"scale/{GRID_METHODS[collective.kind]}"
        return f"template {self.name}" if self.kind in ("template", "plan") else self.name


def _solver(name: str, topology: Topology, collective: Collective, params: SolveParams,
            progress: Progress | None = None) -> Schedule:
    """The run of ``--backend name`` (``auto``: the flow model, its solver by size)."""
    return run_strategy(topology, collective, replace(params, backend=name), progress)


def _template(name: str, topology: Topology, collective: Collective, params: SolveParams,
              progress: Progress | None = None) -> Schedule:
    return baselines.build_baseline(name, topology, collective)


def _applicable(name: str, topology: Topology, collective: Collective, fmt: str) -> bool:
    return name in baselines.applicable(topology, collective)


def _in_switch(topology: Topology, collective: Collective, params: SolveParams,
               progress: Progress | None = None) -> Schedule | None:
    return in_switch_candidate(topology, collective)


def _grid(topology: Topology, collective: Collective, params: SolveParams,
          progress: Progress | None = None) -> Schedule | None:
    return grid_lines_schedule(topology, collective)


def _grid_takes(topology: Topology, collective: Collective, fmt: str) -> bool:
    return grid_lines_takes(topology, collective)


def _scales(topology: Topology, collective: Collective, fmt: str) -> bool:
    return scale_method(topology, collective) is not None


def _box_plan(topology: Topology, collective: Collective, params: SolveParams,
              progress: Progress | None = None) -> Schedule | None:
    return box_candidate(topology, collective)


def _mscclpp(topology: Topology, collective: Collective, fmt: str) -> bool:
    return fmt == "mscclpp"


FLOW = "flow model"


def _backend(name: str) -> Candidate:
    """The run of ``--backend name`` as a candidate: the scale backend, else the flow model
    (``auto``: its solver by size)."""
    if name == "scale":
        return Candidate("scale", "scale", partial(_solver, name), _scales, first=True, order=2)
    return Candidate(FLOW if name == "auto" else name, "flow", partial(_solver, name))


_BACKENDS = {name: _backend(name) for name in BACKENDS}  # every --backend, by its name
CANDIDATES: tuple[Candidate, ...] = (
    Candidate("box plan", "plan", _box_plan, _mscclpp, first=True, order=0),
    Candidate("grid", "grid", _grid, _grid_takes, first=True, order=1),
    *_BACKENDS.values(),
    *(Candidate(name, "template", partial(_template, name), partial(_applicable, name),
                first=True, order=3) for name in baselines.BASELINES),
    Candidate("in-switch", "template", _in_switch, first=True, order=4),
)


def backend(name: str) -> Candidate:
    """The candidate ``--backend name`` runs alone (``auto``: the flow model)."""
    return _BACKENDS[name]


def scale() -> Candidate:
    """The scale backend, as the race runs it."""
    return backend("scale")


def offered(topology: Topology, collective: Collective, fmt: str = "xml",
            kinds: tuple[Kind, ...] = ("plan", "grid", "scale", "template")
            ) -> list[Candidate]:
    """The candidates of ``kinds`` that apply to this input, in their order (templates as
    :func:`te_ccl.baselines.applicable` orders them)."""
    names = baselines.applicable(topology, collective)
    rank = {name: i for i, name in enumerate(names)}
    chosen = [c for c in CANDIDATES
              if c.kind in kinds and c.applies(topology, collective, fmt)]
    return sorted(chosen, key=lambda c: (c.order, rank.get(c.name, 0)))


def templates(topology: Topology, collective: Collective,
              only: tuple[str, ...] | None = None) -> list[Candidate]:
    """The templates that apply, in order (the in-switch schedule among them where the
    fabric has one); ``only``: those named alone."""
    return [c for c in offered(topology, collective, kinds=("template",))
            if only is None or c.name in only]


def known(topology: Topology, collective: Collective, fmt: str, params: SolveParams) -> Known:
    """The candidates only a plan can be, built for the race to enter from the start
    (judged even where the time left gives the templates none)."""
    built = ((c.trial(topology, collective), c.build(topology, collective, params))
             for c in offered(topology, collective, fmt, kinds=("plan",)))
    return tuple((name, s) for name, s in built if s is not None)


def first_file(topology: Topology, collective: Collective, params: SolveParams,
               fmt: str = "xml") -> Iterator[tuple[str, Callable[[], Schedule | None]]]:
    """The cheap candidates of a compile's first file in format ``fmt``, cheapest first,
    each a trial name and the function that builds it (None: it does not apply): the
    plan where ``fmt`` takes one, the grid method where it takes the input, the scale
    method at one sub-chunk per chunk (its fewest transfers: the plan's budget keeps even
    1024 GPUs within the runtime's limits at that), then
    the templates (and the in-switch schedule) where building them is quick
    (:data:`TEMPLATE_MAX_DELIVERIES`). A template is built only where every candidate
    before it gave no file, so where the race does not build them (a ring AlltoAll of
    72 GPUs takes a minute), they cost nothing while the scale method's file fits the
    runtime, and are the file where it does not. A candidate that breaks a buffer limit
    raises :class:`SolverError`. Bad input raises :class:`SpecError` first."""
    check_input(topology, collective)
    one = replace(params, max_subchunks=1)
    for c in offered(topology, collective, fmt, kinds=("plan", "grid", "scale")):
        build = c.build if c.kind == "grid" else partial(_within_buffers, c.build)
        yield c.trial(topology, collective), partial(build, topology, collective, one)
    if deliveries(collective) > TEMPLATE_MAX_DELIVERIES:
        return
    for c in _cheapest_first(templates(topology, collective), collective):
        yield c.trial(topology, collective), partial(_within_buffers, c.build, topology,
                                                     collective, params)
        if c.name == "direct" and collective.root is not None:
            yield from _paced_direct(topology, collective)


def _paced_direct(topology: Topology, collective: Collective
                  ) -> Iterator[tuple[str, Callable[[], Schedule | None]]]:
    """The direct template with fewer chunks under way on a link at once, halving from
    what the runtime's connections hold (its channels times the sends one holds): tiny
    chunks all start in one epoch, more than the file's channels can take in turn
    (mesh 16×16 Scatter 1 KB: 128 on each of the root's links). Tried only where the
    unpaced one does not fit; :data:`PACED_TRIES` of them, each slower than the last."""
    held = MSCCL.max_channels * max(1, MSCCL.outstanding_sends(collective.proto))
    for n in sorted({max(1, held >> k) for k in range(PACED_TRIES)}, reverse=True):
        yield f"template direct ({n} in flight per link)", partial(
            _within_buffers, partial(_paced, n), topology, collective, None)


def _paced(in_flight: int, topology: Topology, collective: Collective,
           params: SolveParams | None, progress: Progress | None = None) -> Schedule:
    return direct(topology, collective, in_flight)


def _cheapest_first(found: list[Candidate], collective: Collective) -> list[Candidate]:
    """The templates ``found`` in the order a first file tries them: for a rooted
    collective the direct one first, which sends each chunk once along a shortest path
    where a ring relays it through every rank (torus 32×32 Gather: 16,384 transfers
    against the ring's 523,776, and it finishes 32× earlier)."""
    if collective.root is None:
        return found
    return sorted(found, key=lambda c: c.name != "direct")


def _within_buffers(build: Build, topology: Topology, collective: Collective,
                    params: SolveParams | None) -> Schedule | None:
    """``build``'s schedule, refused if it relays more through a GPU than its buffer holds."""
    schedule = build(topology, collective, params)
    over = relay_overflow(schedule) if schedule is not None else None
    if over is not None:
        raise SolverError(f"breaks a buffer limit: {over}")
    return schedule


def deliveries(collective: Collective) -> int:
    """(chunk, destination) pairs, by arithmetic (no chunk is built)."""
    return sum(collective.received().values())
