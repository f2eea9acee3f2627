"""The candidates ``auto`` races and a first file tries, in order, for a handful of inputs:
recorded before the candidates moved into one registry, so the move changes none of them
(since: a rooted collective whose whole chunks cannot come near the bound races the
templates before the flow model, no flow model runs where its chunks cannot win, and the
far-first template is raced for AlltoAll after direct).

Every candidate the race times is judged here by its epoch-model prediction with no cheap
bound (each template is timed, none skipped by an estimate), under a limit far above what
the race takes, so the order depends on the input alone, not on the machine."""

from __future__ import annotations

import re

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.compiler.candidates import known
from te_ccl.compiler.portfolio import Judge
from te_ccl.compiler.warm import first_candidates
from te_ccl.schedule import Schedule
from te_ccl.spec.topology import load_topology
from te_ccl.topology.model import Topology

_KEPT = re.compile(r"auto: kept the (.+?) \(")

CASES = {  # (topology, kind, size, root, format) -> (kept, also tried, judged, first file)
    "ring8-allgather": (("ring8", CollectiveKind.ALLGATHER, 1048576, None, "xml"), (
        "scale/trees",
        ["flow model", "template ring", "template ring-bidir", "template direct"],
        ["scale", "baseline:ring", "baseline:ring-bidir", "baseline:direct"],
        ["scale/trees", "template ring", "template ring-bidir", "template direct",
        "template in-switch"])),
    "dgx1-allreduce": (("dgx1", CollectiveKind.ALLREDUCE, 1048576, None, "xml"), (
        "scale/greedy",
        ["template packed", "flow model", "template ring", "template ring-bidir",
        "template tree"],
        ["scale", "baseline:packed", "milp", "baseline:ring", "baseline:ring-bidir",
        "baseline:tree"],
        ["scale/greedy", "template ring", "template ring-bidir", "template tree",
        "template direct", "template packed", "template packed-fine", "template in-switch"])),
    "hgx2-broadcast": (("hgx-h100x2", CollectiveKind.BROADCAST, 1048576, 0, "xml"), (
        "template pipeline",
        ["template packed", "template ring", "template ring-bidir", "template tree",
        "template direct", "template hierarchical", "flow model"],
        ["baseline:pipeline", "baseline:packed", "baseline:ring", "baseline:ring-bidir",
        "baseline:tree", "baseline:direct", "baseline:hierarchical", "milp"],
        ["template direct", "template direct (64 in flight per link)",
        "template direct (32 in flight per link)", "template direct (16 in flight per link)",
        "template direct (8 in flight per link)", "template pipeline",
        "template pipeline-fine", "template packed", "template ring", "template ring-bidir",
        "template tree", "template hierarchical", "template packed-fine",
        "template in-switch"])),
    "mesh4x4-alltoall": (("mesh4x4", CollectiveKind.ALLTOALL, 1048576, None, "xml"), (
        "scale/flow-alltoall",
        ["flow model", "template ring", "template ring-bidir", "template direct",
        "template far-first"],
        ["scale", "baseline:ring", "baseline:ring-bidir", "baseline:direct",
        "baseline:far-first"],
        ["scale/flow-alltoall", "template ring", "template ring-bidir", "template direct",
        "template far-first", "template in-switch"])),
    "boxes-allreduce-mscclpp": (("boxes2x2", CollectiveKind.ALLREDUCE, 1048576, None, "mscclpp"), (
        "scale/hierarchical",
        ["template box plan", "template packed", "flow model", "template ring",
        "template ring-bidir", "template tree", "template hierarchical"],
        ["box-plan", "scale", "baseline:packed", "milp", "baseline:ring",
        "baseline:ring-bidir", "baseline:tree", "baseline:hierarchical"],
        ["template box plan", "scale/hierarchical", "template ring", "template ring-bidir",
        "template tree", "template direct", "template hierarchical", "template packed",
        "template packed-fine", "template in-switch"])),
    "boxes-allreduce-xml": (("boxes2x2", CollectiveKind.ALLREDUCE, 1048576, None, "xml"), (
        "scale/hierarchical",
        ["template packed", "flow model", "template ring", "template ring-bidir",
        "template tree", "template hierarchical"],
        ["scale", "baseline:packed", "milp", "baseline:ring", "baseline:ring-bidir",
        "baseline:tree", "baseline:hierarchical"],
        ["scale/hierarchical", "template ring", "template ring-bidir", "template tree",
        "template direct", "template hierarchical", "template packed", "template packed-fine",
        "template in-switch"])),
    "dgx1-gather": (("dgx1", CollectiveKind.GATHER, 65536, 0, "xml"), (
        "template direct",
        ["template pipeline", "template packed", "template ring", "template ring-bidir",
        "flow model"],
        ["baseline:pipeline", "baseline:packed", "baseline:ring", "baseline:ring-bidir",
        "baseline:direct", "milp"],
        ["template direct", "template direct (64 in flight per link)",
        "template direct (32 in flight per link)", "template direct (16 in flight per link)",
        "template direct (8 in flight per link)", "template ring", "template ring-bidir",
        "template pipeline", "template pipeline-fine", "template packed",
        "template packed-fine", "template in-switch"])),
    "mesh8x8-allgather": (("mesh8x8", CollectiveKind.ALLGATHER, 1048576, None, "xml"), (
        "scale/greedy",
        ["flow model", "template ring", "template ring-bidir", "template direct"],
        ["scale", "baseline:ring", "baseline:ring-bidir", "baseline:direct"],
        ["scale/greedy", "template ring", "template ring-bidir", "template direct",
        "template in-switch"])),
}


def _topology(name: str, boxes: Topology) -> Topology:
    return boxes if name == "boxes2x2" else load_topology(name)


def _record(topology: Topology, collective: Collective, fmt: str):
    judged: list[str] = []

    def time(schedule: Schedule) -> float:
        judged.append(schedule.info.backend)
        return schedule.finish_time_s

    params = SolveParams(time_limit_s=600)
    schedule = solve(topology, collective, params,
                     judge=Judge("prediction", time), known=known(topology, collective, fmt, params))
    note = schedule.info.notes[0]
    rest = note.partition("; also tried ")[2]
    tried = [part.partition(": ")[0] for part in rest.split("; ")] if rest else []
    first = [name for name, _ in first_candidates(None, topology, collective, SolveParams(),
                                                  fmt)]
    return _KEPT.match(note).group(1), tried, judged, first


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_candidates_in_the_same_order(case, boxes):
    (topo, kind, size, root, fmt), expected = CASES[case]
    topology = _topology(topo, boxes)
    collective = Collective(kind, size, tuple(range(topology.ngpus)), root=root)
    assert _record(topology, collective, fmt) == expected
