"""FRED switch phases of a solved Schedule: what each switch must do in each epoch.

A Schedule (:mod:`te_ccl.schedule`) moves chunks through bufferless switches: what
arrives at a switch in epoch ``e`` leaves in epoch ``e``. For every switch and epoch,
the chunks crossing it become flows: the inputs are the neighbours sending the chunk in
(several with ``op="reduce"`` or several senders = an in-switch reduction), the
outputs the neighbours it is sent to (several = an in-switch multicast). A neighbour's
k-th flow in a direction in that epoch takes lane ``k`` of the link (ports are lanes,
:mod:`te_ccl.fred.wafer`); when a link has fewer lanes than flows, the epoch is split
into sub-phases. Each (epoch, sub-phase) is then routed like any other phase.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.fred.collectives import FlowInfo, FredPhase, routed_phases
from te_ccl.fred.routing import Flow
from te_ccl.fred.wafer import Wafer
from te_ccl.schedule import Schedule

__all__ = ["phases_from_schedule"]


def _port(wafer: Wafer, switch: str, neighbour: str, lane: int, topo_rank) -> int:
    if switch == wafer.l2_name:
        return wafer.l2_port(wafer.l1_names.index(neighbour), lane)
    if neighbour == wafer.l2_name:
        return wafer.uplink_port(lane)
    return wafer.npu_port(topo_rank(neighbour), lane)


def _lanes(wafer: Wafer, switch: str, neighbour: str) -> int:
    if switch == wafer.l2_name or neighbour == wafer.l2_name:
        return wafer.uplink_lanes
    return wafer.npu_lanes


def phases_from_schedule(schedule: Schedule, wafer: Wafer, cls: str = "MP") -> list[FredPhase]:
    """Routed switch phases, one or more per epoch in which some switch forwards a chunk."""
    topo = schedule.topology
    ins: dict[tuple[int, str, int], list] = defaultdict(list)
    outs: dict[tuple[int, str, int], list] = defaultdict(list)
    for t in schedule.transfers:
        if t.dst in wafer.switches:
            ins[(t.arrive_epoch, t.dst, t.chunk)].append(t)
        if t.src in wafer.switches:
            outs[(t.start_epoch, t.src, t.chunk)].append(t)
    by_epoch: dict[int, list[tuple[int, FlowInfo]]] = defaultdict(list)
    used: dict[tuple[int, str, str, str], int] = defaultdict(int)
    coll = schedule.collective
    for key in sorted(set(ins) & set(outs)):
        epoch, switch, chunk = key
        sub = 0
        ports = {"in": [], "out": []}
        for side, transfers in (("in", ins[key]), ("out", outs[key])):
            for t in transfers:
                nb = t.src if side == "in" else t.dst
                k = used[(epoch, switch, nb, side)]
                used[(epoch, switch, nb, side)] += 1
                n = _lanes(wafer, switch, nb)
                sub = max(sub, k // n)
                ports[side].append(_port(wafer, switch, nb, k % n, topo.rank))
        reduce = len(ports["in"]) > 1 or any(t.op == "reduce" for t in ins[key])
        flow = Flow(f"c{chunk}.e{epoch}", tuple(ports["in"]), tuple(ports["out"]))
        op = ("allreduce" if len(flow.outputs) > 1 else "reduce") if len(flow.inputs) > 1 \
            else ("multicast" if len(flow.outputs) > 1 else "unicast")
        by_epoch[epoch].append((sub, FlowInfo(switch, flow, coll.kind.value, op, cls, 0, 1,
                                              schedule.chunk_bytes, "sum" if reduce else "none")))
    phases: list[FredPhase] = []
    for epoch in sorted(by_epoch):
        for sub in sorted({s for s, _ in by_epoch[epoch]}):
            infos = [fi for s, fi in by_epoch[epoch] if s == sub]
            routed, _ = routed_phases(wafer, infos, len(phases), epoch * schedule.epoch_s,
                                      schedule.epoch_s, cls, split_span=True)
            phases.extend(routed)
    return phases
