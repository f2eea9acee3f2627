"""Solver schedules and baselines on the shipped topologies (≤ 16 GPUs) lower to XML the
independent verifier accepts, in both modes; and every single-step mutation is caught.

Solves are cached per (topology, kind) and reused for both modes (the schedule does not
depend on the mode, only the buffer layout does). The topologies of more than 8 GPUs and
alltoall (whose MILP takes its whole time limit) are marked slow.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest
from lxml import etree

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, SolveParams, render_fitting, solve
from te_ccl.errors import RuntimeLimitError, SolverError
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.schedule import Schedule
from te_ccl.spec.topology import load_topology
from te_ccl.verify.msccl import verify_msccl

SMALL = ("dgx1", "ring8", "fc8")
LARGE = ("ndv2x2", "dgx2", "mi250", "mesh4x4", "torus4x4")
KINDS = ("allgather", "alltoall", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
         "scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
TIME_LIMIT_S = 5.0


def _collective(topo: str, kind: str, inplace: bool) -> Collective:
    n = load_topology(topo).ngpus
    return Collective(CollectiveKind(kind), 1 << 20, tuple(range(n)), 1,
                      0 if kind in ROOTED else None, inplace)


@cache
def _solved(topo: str, kind: str, backend: str = "auto",
            time_limit_s: float = TIME_LIMIT_S) -> Schedule | str:
    """The solver's schedule, or why it has none within the time limit."""
    try:
        return solve(load_topology(topo), _collective(topo, kind, False),
                     SolveParams(backend=backend, time_limit_s=time_limit_s, threads=1))
    except SolverError as e:
        return str(e)


# templates whose file the lowering may refuse for the runtime's limits (the switch trees'
# Reduce can need more waited-for thread blocks than a depid names); the compile lowers
# every candidate before it keeps one, so such a file is dropped, never written
MAY_NOT_FIT = {"switch-trees"}


def _lowered_or_refused(schedule: Schedule, inplace: bool) -> bytes | None:
    """``_verified``, or None where a template of :data:`MAY_NOT_FIT` is refused for the
    runtime's limits."""
    try:
        return _verified(schedule, inplace)
    except RuntimeLimitError:
        if schedule.info.backend.removeprefix("baseline:") not in MAY_NOT_FIT:
            raise
        return None


def _verified(schedule: Schedule, inplace: bool) -> bytes:
    """The schedule's XML in that mode, as the compile writes it: with the most sub-chunks
    per chunk the runtime holds (a scale schedule may be solved again with fewer)."""
    moded = replace(schedule, collective=replace(schedule.collective, inplace=inplace))
    if schedule.info.subchunks > 1:
        _, xml = render_fitting(moded, CompileOptions(), SolveParams(time_limit_s=TIME_LIMIT_S))
    else:
        xml = lower_to_msccl(moded)
    report = verify_msccl(xml.decode(), root=schedule.collective.root)
    assert report.valid, [f"{f.rule}: {f.message}" for f in report.errors][:5]
    return xml


def _cases():
    for topo in SMALL + LARGE:
        for kind in KINDS:
            slow = topo in LARGE or kind == "alltoall"
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(topo, kind, id=f"{topo}-{kind}", marks=marks)


@pytest.mark.parametrize("inplace", [False, True], ids=["outofplace", "inplace"])
@pytest.mark.parametrize(("topo", "kind"), list(_cases()))
def test_solver_schedule_lowers_to_verified_xml(topo, kind, inplace):
    schedule = _solved(topo, kind)
    if isinstance(schedule, str):
        pytest.skip(f"solver: {schedule}")
    _lowered_or_refused(schedule, inplace)


@pytest.mark.parametrize("topo", [*SMALL, *(pytest.param(t, marks=pytest.mark.slow)
                                              for t in LARGE)])
def test_every_baseline_lowers_to_verified_xml(topo):
    topology = load_topology(topo)
    lowered = 0
    for kind in KINDS:
        for inplace in (False, True):
            coll = _collective(topo, kind, inplace)
            for name in applicable(topology, coll):
                try:
                    schedule = build_baseline(name, topology, coll)
                except BaselineError:
                    continue
                lowered += _lowered_or_refused(schedule, inplace) is not None
    assert lowered >= 2 * len(KINDS)


def _mutants(xml: bytes):
    """Every step changed once: a data step moves nothing (cnt 0), a nop loses its dependency."""
    for i, step in enumerate(etree.fromstring(xml).iter("step")):
        root = etree.fromstring(xml)
        mutant = list(root.iter("step"))[i]
        if step.get("type") == "nop":
            mutant.set("depid", "-1")
            mutant.set("deps", "-1")
        else:
            mutant.set("cnt", "0")
        yield i, step.get("type"), etree.tostring(root, pretty_print=True).decode()


@pytest.mark.parametrize(("topo", "kind", "inplace"), [
    ("dgx1", "allreduce", False), ("dgx1", "allgather", False), ("ring8", "reducescatter", True),
    ("fc8", "gather", True)])
def test_mutating_any_step_is_caught(topo, kind, inplace):
    # whole chunks: few steps to mutate; the MILP proves them in about a second
    schedule = _solved(topo, kind, backend="milp", time_limit_s=600)
    assert not isinstance(schedule, str), schedule
    xml = _verified(schedule, inplace)
    missed = [(i, t) for i, t, text in _mutants(xml)
              if verify_msccl(text, root=schedule.collective.root).valid]
    assert not missed
