"""Collectives on a FRED wafer: switch flows per phase, routed, and timed.

In-switch variants (FRED-B/D) run every collective as streams (:mod:`te_ccl.fred.ops`):
each stream is **striped** over the NPU lanes (stripe ``s`` uses lane ``s`` of every
NPU), and a stripe crossing L1 switches takes one uplink lane up at each L1 with sources
and one down at each L1 with destinations (each direction of a link has its lanes).
Stripes are packed first fit into **rounds** limited by the free NPU and uplink lanes; each
round is a switch phase: the flows of every switch are routed on FRED_m(P)
(:func:`te_ccl.fred.routing.route_phases`) and a conflict splits the round into more
phases, each lasting the wafer's reconfiguration time plus ``stripe bytes / lane_Bps``
plus the latency of the longest path among its streams (:meth:`Wafer.path_latency_s`).
A stripe becomes, per switch:

* one flow on its L1 when all its ranks sit on one L1;
* otherwise an up flow (local sources → uplink lane, reduced in the L1), an L2 flow
  (the L1 lanes with sources → the L1 lanes with destinations, reduced and multicast
  in the L2) and a down flow (uplink lane → local destinations, multicast in the L1).

Endpoint variants (FRED-A/C) cannot reduce or copy in a switch: collectives run as
NPU algorithms, timed by the fluid bound of their link loads (every link carries its
bytes at its bandwidth, chunks pipelined) plus the reconfiguration of each of their switch
phases plus a path latency per dependent step (a ring's steps, a chain's hops):
All-Reduce / Reduce-Scatter / All-Gather as
the better of a flat ring and a hierarchical ring (intra-L1, then one ring over the L1s
whose traffic is spread over the L1's NPUs), Broadcast/Reduce as a pipelined chain,
All-to-All and send/recv as direct unicasts. Their switch phases are the unicast flows
of the flat ring / chain / unicast steps, timed as the switches run them (the fluid time
is the collective's, not the tables'). In-switch variants run these NPU algorithms where
they are faster than the streams: their switches may also just forward.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from te_ccl.fred.ops import CLASSES, CollectiveOp, Stream
from te_ccl.fred.routing import Flow, Routing, route_phases
from te_ccl.fred.wafer import Wafer

__all__ = ["FlowInfo", "FredPhase", "CommResult", "compile_fred", "fred_candidates",
           "in_switch_collectives",
           "endpoint_collectives", "endpoint_loads", "routed_phases"]


@dataclass(frozen=True)
class FlowInfo:
    """A routed flow with what the flow table needs about it; ``stream`` names the
    chunk stream of a schedule it is a stripe of (:mod:`te_ccl.fred.from_schedule`)."""

    switch: str
    flow: Flow
    collective: str
    cls: str
    step: int
    steps: int
    bytes: float
    reduce_op: str
    stream: str = ""


@dataclass(frozen=True)
class FredPhase:
    """One switch configuration (its index is the packet-header configuration index)."""

    index: int
    cls: str
    flows: tuple[FlowInfo, ...]
    routings: dict[str, Routing]
    start_s: float
    end_s: float
    default_unicast: bool = False


@dataclass(frozen=True)
class CommResult:
    """Concurrent collectives on one fabric: time, bytes one NPU injects, phases;
    ``fixed_s`` is the part of ``time_s`` the bytes do not scale (latency, reconfiguration)."""

    fabric: str
    ops: tuple[CollectiveOp, ...]
    time_s: float
    injected_bytes: float
    phases: tuple[FredPhase, ...] = ()
    notes: tuple[str, ...] = ()
    link_loads: dict = field(default_factory=dict, compare=False)
    fixed_s: float = 0.0

    @property
    def effective_Bps(self) -> float:
        """Bytes one NPU injects per second (the FRED paper's "effective bandwidth per NPU")."""
        return self.injected_bytes / self.time_s if self.time_s > 0 else 0.0


@dataclass
class _Item:
    op: int
    stream: Stream
    stripe: int
    up: dict[int, int]  # L1 with sources → the uplink lane the stripe goes up on
    down: dict[int, int]  # L1 with destinations → the uplink lane it comes down on


def compile_fred(wafer: Wafer, ops: Sequence[CollectiveOp], start_s: float = 0.0) -> CommResult:
    """Phases, flows and time of ``ops`` running concurrently on ``wafer``.

    Where switches reduce and copy (FRED-B/D) the in-switch streams run, unless the NPU
    algorithms of FRED-A/C are faster: a switch that reduces can also just forward, so
    FRED-B is never slower than FRED-A, nor FRED-D than FRED-C.
    """
    return min(fred_candidates(wafer, ops, start_s), key=lambda r: r.time_s)


def fred_candidates(wafer: Wafer, ops: Sequence[CollectiveOp], start_s: float = 0.0
                    ) -> list[CommResult]:
    """The ways ``ops`` can run on ``wafer``: the in-switch streams first where switches
    reduce and copy, then the NPU algorithms (their switches only forward). Which is faster
    depends on the size: the streams pay a reconfiguration and a path latency per phase."""
    endpoint = endpoint_collectives(wafer, ops, start_s)
    return [in_switch_collectives(wafer, ops, start_s), endpoint] if wafer.in_switch \
        else [endpoint]


def in_switch_collectives(wafer: Wafer, ops: Sequence[CollectiveOp], start_s: float = 0.0
                          ) -> CommResult:
    """``ops`` as streams reduced and multicast in the switches (module docstring)."""
    ops = tuple(ops)
    steps = [op.steps() for op in ops]
    phases, time_s, notes, fixed_s = _build_phases(wafer, ops, steps, start_s)
    injected: dict[int, float] = defaultdict(float)
    for op_steps in steps:
        for step in op_steps:
            for s in step:
                for r in s.sources:
                    injected[r] += s.bytes
    return CommResult(wafer.name, ops, time_s, max(injected.values(), default=0.0),
                      tuple(phases), tuple(notes), fixed_s=fixed_s)


def endpoint_collectives(wafer: Wafer, ops: Sequence[CollectiveOp], start_s: float = 0.0
                         ) -> CommResult:
    """``ops`` as NPU algorithms whose switches only forward (module docstring)."""
    ops = tuple(ops)
    loads: dict[tuple[str, int], float] = defaultdict(float)
    latency_s = 0.0
    for op in ops:
        op_loads, op_latency = endpoint_loads(wafer, op)
        latency_s = max(latency_s, op_latency)
        for key, b in op_loads.items():
            loads[key] += b
    fluid_s = max((b / _bandwidth(wafer, key) for key, b in loads.items()), default=0.0)
    phases, _, notes, _ = _build_phases(wafer, ops, [_endpoint_steps(op) for op in ops],
                                        start_s)
    fixed_s = len(phases) * wafer.reconfig_s + latency_s
    return CommResult(wafer.name, ops, fluid_s + fixed_s,
                      max((b for (kind, _), b in loads.items() if kind == "up"), default=0.0),
                      tuple(phases), tuple(notes), dict(loads), fixed_s)


def _build_phases(wafer: Wafer, ops: tuple[CollectiveOp, ...], steps: list[list[list[Stream]]],
                  start_s: float) -> tuple[list[FredPhase], float, list[str], float]:
    """Stripe, pack into rounds, route; returns the phases, their time, the conflicts and
    the part of the time spent reconfiguring and in latency."""
    nsteps = max((len(s) for s in steps), default=0)
    rounds: list[tuple[int, list[_Item]]] = []
    for j in range(nsteps):
        items = [_Item(i, st, lane, {}, {}) for i, op_steps in enumerate(steps)
                 if j < len(op_steps) for st in op_steps[j] for lane in range(wafer.npu_lanes)]
        rounds.extend((j, rnd) for rnd in _pack(wafer, items))
    phases: list[FredPhase] = []
    notes: list[str] = []
    t, fixed_s = start_s, 0.0
    for j, rnd in rounds:
        infos = [fi for it in rnd for fi in _flows_of(wafer, ops, it, j, nsteps)]
        cls = min((ops[it.op].cls for it in rnd), key=CLASSES.index)
        fixed = wafer.reconfig_s + max(wafer.path_latency_s(it.stream.sources,
                                                            it.stream.destinations)
                                       for it in rnd)
        dur = fixed + max(it.stream.bytes for it in rnd) / wafer.npu_lanes / wafer.lane_Bps
        routed, conflicts = routed_phases(wafer, infos, len(phases), t, dur, cls)
        phases.extend(routed)
        notes.extend(conflicts)
        t = routed[-1].end_s
        fixed_s += len(routed) * fixed
    return phases, t - start_s, notes, fixed_s


def routed_phases(wafer: Wafer, infos: Sequence[FlowInfo], first: int, start_s: float,
                  span_s: float, cls: str) -> tuple[list[FredPhase], list[str]]:
    """Route one round's flows on every switch; a conflict adds phases, each lasting
    ``span_s`` (the time stretches). Returns the phases (indices from ``first``) and the
    conflict reports.
    """
    by_switch: dict[str, list[Flow]] = defaultdict(list)
    for fi in infos:
        by_switch[fi.switch].append(fi.flow)
    splits = {sw: route_phases(wafer.switches[sw], fl) for sw, fl in by_switch.items()}
    count = max((len(s.phases) for s in splits.values()), default=1)
    phases = []
    for k in range(count):
        routed = {sw: s.phases[k] for sw, s in splits.items() if k < len(s.phases)}
        mine = {(sw, f.id) for sw, r in routed.items() for f in r.flows}
        phases.append(FredPhase(first + k, cls,
                                tuple(fi for fi in infos if (fi.switch, fi.flow.id) in mine),
                                routed, start_s + k * span_s, start_s + (k + 1) * span_s))
    return phases, [c for s in splits.values() for c in s.conflicts]


def _pack(wafer: Wafer, items: list[_Item]) -> list[list[_Item]]:
    """First fit of stripes into rounds. A stripe takes its lane of each source NPU's link
    up and each destination NPU's link down (one stripe each a round); one crossing L1
    switches also goes up on one uplink lane of each L1 with sources and down on one of
    each L1 with destinations, each direction of an L1 lending ``uplink_lanes`` a round."""
    rounds: list[tuple[list[_Item], dict[tuple, int]]] = []
    for it in items:
        src = {wafer.l1_of(r) for r in it.stream.sources}
        dst = {wafer.l1_of(r) for r in it.stream.destinations}
        lanes = ([("up", k) for k in sorted(src)] + [("down", k) for k in sorted(dst)]
                 if len(src | dst) > 1 else [])
        npus = [("send", r, it.stripe) for r in it.stream.sources] + \
               [("receive", r, it.stripe) for r in it.stream.destinations]
        fits = (r for r in rounds if all(r[1].get(d, 0) < wafer.uplink_lanes for d in lanes)
                and not any(d in r[1] for d in npus))
        members, used = next(fits, None) or ([], {})
        if not members:
            rounds.append((members, used))
        for d in lanes:
            (it.up if d[0] == "up" else it.down)[d[1]] = used.get(d, 0)
            used[d] = used.get(d, 0) + 1
        used.update(dict.fromkeys(npus, 1))
        members.append(it)
    return [members for members, _ in rounds]


def _flows_of(wafer: Wafer, ops: tuple[CollectiveOp, ...], it: _Item, step: int,
              nsteps: int) -> list[FlowInfo]:
    """The per-switch flows of one stripe (module docstring)."""
    op, s = ops[it.op], it.stream
    fid = f"o{it.op}.s{step}.{s.sources[0]}-{s.destinations[0]}.l{it.stripe}"
    src: dict[int, list[int]] = defaultdict(list)
    dst: dict[int, list[int]] = defaultdict(list)
    for r in s.sources:
        src[wafer.l1_of(r)].append(wafer.npu_port(r, it.stripe))
    for r in s.destinations:
        dst[wafer.l1_of(r)].append(wafer.npu_port(r, it.stripe))
    flows: list[tuple[str, Flow]] = []
    if not it.up:
        (k,) = set(src) | set(dst)
        flows.append((wafer.l1_names[k], Flow(fid, tuple(src[k]), tuple(dst[k]))))
    else:
        for k, lane in sorted(it.up.items()):
            flows.append((wafer.l1_names[k], Flow(f"{fid}.up", tuple(src[k]),
                                                  (wafer.uplink_port(lane),))))
        for k, lane in sorted(it.down.items()):
            flows.append((wafer.l1_names[k], Flow(f"{fid}.down", (wafer.uplink_port(lane),),
                                                  tuple(dst[k]))))
        flows.append((wafer.l2_name, Flow(fid, tuple(wafer.l2_port(k, u) for k, u in it.up.items()),
                                          tuple(wafer.l2_port(k, d) for k, d in it.down.items()))))
    byt = s.bytes / wafer.npu_lanes
    reduce_op = "sum" if len(s.sources) > 1 else "none"
    return [FlowInfo(sw, f, op.name, op.cls, step, nsteps, byt,
                     reduce_op if len(f.inputs) > 1 else "none") for sw, f in flows]


# Endpoint (FRED-A/C) fluid model ----------------------------------------------------------
def _bandwidth(wafer: Wafer, key: tuple[str, int]) -> float:
    return wafer.npu_Bps if key[0] in ("up", "down") else wafer.uplink_Bps


def _unicast(wafer: Wafer, loads: dict, a: int, b: int, n_bytes: float) -> None:
    loads[("up", a)] += n_bytes
    loads[("down", b)] += n_bytes
    if wafer.l1_of(a) != wafer.l1_of(b):
        loads[("l1up", wafer.l1_of(a))] += n_bytes
        loads[("l1down", wafer.l1_of(b))] += n_bytes


def _ring_edges(ranks: Sequence[int], wrap: bool = True) -> list[tuple[int, int]]:
    edges = list(zip(ranks, ranks[1:], strict=False))
    return edges + [(ranks[-1], ranks[0])] if wrap else edges


def _hierarchical(wafer: Wafer, op: CollectiveOp, factor: float) -> tuple[dict, float]:
    """Intra-L1 ring, then one ring over the L1s spread over each L1's members: link loads
    and latency."""
    loads: dict = defaultdict(float)
    groups: dict[int, list[int]] = defaultdict(list)
    for r in op.ranks:
        groups[wafer.l1_of(r)].append(r)
    nk, d = len(groups), op.size_bytes
    for k, members in groups.items():
        n = len(members)
        inter = factor * (nk - 1) / nk * d / n
        for r in members:
            for kind in ("up", "down"):
                loads[(kind, r)] += factor * (n - 1) / n * d + inter
        loads[("l1up", k)] += factor * (nk - 1) / nk * d
        loads[("l1down", k)] += factor * (nk - 1) / nk * d
    local = max(len(m) for m in groups.values())
    firsts = [m[0] for m in groups.values()]
    latency = (op.ring_steps(local) * wafer.path_latency_s(firsts[:1], firsts[:1])
               + op.ring_steps(nk) * wafer.path_latency_s(firsts[:1], firsts[-1:]))
    return loads, latency


def endpoint_loads(wafer: Wafer, op: CollectiveOp) -> tuple[dict[tuple[str, int], float], float]:
    """Bytes per link of ``op`` run by the NPUs (no in-switch help) and the latency of its
    dependent steps, for the algorithm that finishes first."""
    factor = {"allreduce": 2.0, "reducescatter": 1.0, "allgather": 1.0}.get(op.kind)
    candidates = []
    if factor is not None:
        ring: dict = defaultdict(float)
        edges = _ring_edges(op.ranks)
        for a, b in edges:
            _unicast(wafer, ring, a, b, factor * (op.n - 1) / op.n * op.size_bytes)
        hop = max(wafer.path_latency_s((a,), (b,)) for a, b in edges)
        candidates = [(ring, op.ring_steps(op.n) * hop), _hierarchical(wafer, op, factor)]
    else:
        loads: dict = defaultdict(float)
        latency = 0.0
        for step in _endpoint_steps(op):
            hops = [wafer.path_latency_s(s.sources, s.destinations) for s in step]
            for s in step:
                _unicast(wafer, loads, s.sources[0], s.destinations[0], s.bytes)
            # a pipelined chain fills hop after hop; unicasts of a step run side by side
            latency += sum(hops) if op.kind in ("broadcast", "reduce") else max(hops)
        candidates = [(loads, latency)]
    return min(candidates, key=lambda c: c[1] + max(b / _bandwidth(wafer, k)
                                                    for k, b in c[0].items()))


def _endpoint_steps(op: CollectiveOp) -> list[list[Stream]]:
    """Unicast steps of the endpoint algorithm (flat ring, chain, or the op's own)."""
    if op.kind in ("allreduce", "reducescatter", "allgather"):
        per = op.endpoint_injected_bytes()
        return [[Stream((a,), (b,), per) for a, b in _ring_edges(op.ranks)]]
    if op.kind in ("broadcast", "reduce"):
        order = [op.root, *(r for r in op.ranks if r != op.root)]
        if op.kind == "reduce":
            order.reverse()
        return [[Stream((a,), (b,), op.size_bytes) for a, b in _ring_edges(order, wrap=False)]]
    return op.steps()

