"""The switch timeline of a solved Schedule: chunk streams, striped over lanes, in phases.

A Schedule (:mod:`te_ccl.schedule`) times transfers store-and-forward, epoch by epoch: a
chunk reaches a switch in one transfer and leaves it in the next. A FRED switch buffers
packets, not chunks (:mod:`te_ccl.fred.wafer`), so its tables stream data cut-through.
This module keeps what the schedule does — which switch receives which chunk from whom,
adds it and sends it to whom, in which order — and times it as the switches can:

* a **stream** is one chunk's tree through the switches: the switch *visits* (a switch
  receiving the chunk in an epoch and forwarding it in that epoch, the schedule's
  bufferless rule) joined by their switch-to-switch transfers, from its source NPUs to its
  destination NPUs. Data passes all its visits without stopping, so they hold their flows
  at the same time;
* ports are lanes: **stripe** k of a stream takes a lane of a directed link for each of
  its tree's transfers on it, and is one flow on each switch it visits (its input lanes
  added, the sum sent on its output lanes);
* **phases** follow one another. At the start of each, the streams whose predecessors are
  done (the streams delivering their chunk to one of their source NPUs) take, in the
  schedule's order, as many stripes as the free lanes of their links allow, at most the
  lanes of the narrowest. Each switch's flows are routed on FRED_m(P); a routing conflict
  gives back the last stripe of the latest stream involved. A phase lasts the wafer's
  reconfiguration time plus the time its first stream needs to finish plus the path
  latency of its longest stream (:meth:`Wafer.path_latency_s`), and no stripe carries
  more than a lane's rate times the part after the reconfiguration.

The tables' time is their own: shorter than the schedule's where the schedule stores a
chunk hop by hop, longer where streams that overlap in the schedule's epochs (a switch
holding one chunk while it receives the next) compete for lanes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from te_ccl.deadline import check
from te_ccl.errors import VerificationError
from te_ccl.fred.collectives import FlowInfo, FredPhase
from te_ccl.fred.routing import Flow, Routing, RoutingConflict, route_once
from te_ccl.fred.wafer import Wafer
from te_ccl.schedule import Schedule, Transfer

ROUTING = "routing the FRED switch tables' phases"  # what a deadline names

__all__ = ["Visit", "ChunkStream", "Timeline", "chunk_streams", "schedule_timeline"]

Link = tuple[str, str]


@dataclass(frozen=True)
class Visit:
    """A switch receiving ``ins`` of a chunk in ``epoch`` and forwarding it as ``outs``."""

    switch: str
    epoch: int
    ins: tuple[Transfer, ...]
    outs: tuple[Transfer, ...]


@dataclass(frozen=True)
class ChunkStream:
    """One chunk's tree of switch visits; ``after`` names the streams it waits for."""

    id: str
    chunk: int
    bytes: int
    visits: tuple[Visit, ...]
    sources: tuple[str, ...]
    destinations: tuple[str, ...]
    after: tuple[str, ...]

    @cached_property
    def links(self) -> dict[Link, tuple[Transfer, ...]]:
        """The transfers of the tree on each directed link (a stripe takes one lane of the
        link for each)."""
        out: dict[Link, tuple[Transfer, ...]] = {}
        for t in dict.fromkeys(t for v in self.visits for t in (*v.ins, *v.outs)):
            out[(t.src, t.dst)] = (*out.get((t.src, t.dst), ()), t)
        return out


@dataclass(frozen=True)
class Timeline:
    phases: tuple[FredPhase, ...]
    streams: tuple[ChunkStream, ...]

    @property
    def time_s(self) -> float:
        return self.phases[-1].end_s if self.phases else 0.0


def _visits(schedule: Schedule, wafer: Wafer) -> list[Visit]:
    """The visits of ``schedule``'s transfers through the switches.

    A reduced chunk's arrivals are added into one flow. Otherwise a switch that copies
    forwards one arrival to all its destinations, and one that does not forwards each
    arrival once (in order). An arrival a switch does not forward carries nothing the
    tables need, nor does a transfer into such an arrival: both are left out.
    """
    transfers = schedule.transfers
    switches = set(wafer.switches)
    ins: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    outs: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for i, t in enumerate(transfers):
        if t.dst in switches:
            ins[(t.dst, t.chunk, t.arrive_epoch)].append(i)
        if t.src in switches:
            outs[(t.src, t.chunk, t.start_epoch)].append(i)
    groups: list[tuple[str, int, list[int], list[int]]] = []
    for key in sorted(set(ins) & set(outs)):
        arriving = sorted(ins[key], key=lambda i: (transfers[i].start_epoch, transfers[i].src))
        if any(transfers[i].op == "reduce" for i in arriving):
            groups.append((key[0], key[2], arriving, outs[key]))
        elif wafer.can_copy:
            groups.append((key[0], key[2], arriving[:1], outs[key]))
        else:
            groups += [(key[0], key[2], [a], [o]) for a, o in zip(arriving, outs[key],
                                                                  strict=False)]
    while True:  # drop what feeds a dropped arrival, until nothing changes
        kept = {i for _, _, a, _ in groups for i in a}
        trimmed = [(sw, e, a, [i for i in o if transfers[i].dst not in switches or i in kept])
                   for sw, e, a, o in groups]
        trimmed = [g for g in trimmed if g[3]]
        if trimmed == groups:
            break
        groups = trimmed
    return [Visit(sw, e, tuple(transfers[i] for i in a), tuple(transfers[i] for i in o))
            for sw, e, a, o in groups]


def chunk_streams(schedule: Schedule, wafer: Wafer) -> list[ChunkStream]:
    """The streams of ``schedule``, in its order (first transfer, then chunk)."""
    visits = _visits(schedule, wafer)
    entering = {t: k for k, v in enumerate(visits) for t in v.ins}
    parent = list(range(len(visits)))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for k, v in enumerate(visits):
        for t in v.outs:
            if t in entering:
                parent[root(entering[t])] = root(k)
    trees: dict[int, list[Visit]] = defaultdict(list)
    for k, v in enumerate(visits):
        trees[root(k)].append(v)
    switches = set(wafer.switches)
    raw = []
    for vs in trees.values():
        ins = [t for v in vs for t in v.ins if t.src not in switches]
        outs = [t for v in vs for t in v.outs if t.dst not in switches]
        first = min(t.start_epoch for v in vs for t in (*v.ins, *v.outs))
        raw.append((first, vs[0].ins[0].chunk, vs[0].switch, tuple(vs), ins, outs))
    raw.sort(key=lambda x: x[:3])
    delivered: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for i, (_, chunk, _, _, _, outs) in enumerate(raw):
        for t in outs:
            delivered[(t.dst, chunk)].append((t.arrive_epoch, i))
    rank = {name: r for r, name in enumerate(wafer.npu_names)}
    size = math.ceil(schedule.chunk_bytes)
    streams = []
    for i, (_, chunk, _, vs, ins, outs) in enumerate(raw):
        after = sorted({j for t in ins for e, j in delivered[(t.src, chunk)]
                        if e <= t.start_epoch and j != i})
        streams.append(ChunkStream(
            f"s{i}", chunk, size, vs,
            tuple(sorted({t.src for t in ins}, key=rank.__getitem__)),
            tuple(sorted({t.dst for t in outs}, key=rank.__getitem__)),
            tuple(f"s{j}" for j in after)))
    return streams


Stripe = dict[Transfer, int]  # the lane each transfer of the tree takes


def _allocate(wafer: Wafer, ready: Sequence[ChunkStream]) -> dict[str, list[Stripe]]:
    """Stripes of the ready streams in order, each taking the lowest free lanes."""
    free: dict[Link, list[int]] = {}
    out: dict[str, list[Stripe]] = {}
    for s in ready:
        for link in s.links:
            if link not in free:
                free[link] = list(range(wafer.lanes(*link)))
        n = min(len(free[link]) // len(ts) for link, ts in s.links.items())
        if n:
            out[s.id] = [{t: free[link].pop(0) for link, ts in s.links.items() for t in ts}
                         for _ in range(n)]
    return out


def _flows(wafer: Wafer, s: ChunkStream, k: int, lanes: Stripe, kind: str
           ) -> list[FlowInfo]:
    """The flows of stripe ``k`` of ``s``: one on each switch it visits (bytes set later)."""
    out = []
    for v in s.visits:
        ins = tuple(wafer.port(v.switch, t.src, lanes[t]) for t in v.ins)
        outs = tuple(wafer.port(v.switch, t.dst, lanes[t]) for t in v.outs)
        out.append(FlowInfo(v.switch, Flow(f"{s.id}.e{v.epoch}.l{k}", ins, outs), kind, "MP",
                            0, 1, 0, "sum" if len(ins) > 1 else "none", s.id))
    return out


def _route(wafer: Wafer, stripes: dict[str, list[Stripe]],
           flows: dict[str, list[list[FlowInfo]]], order: dict[str, int]
           ) -> dict[str, Routing]:
    """Route every switch; on a conflict drop the last stripe of the latest stream in it."""
    while True:
        check(ROUTING)
        by_switch: dict[str, list[Flow]] = defaultdict(list)
        for sid in stripes:
            for stripe_flows in flows[sid][:len(stripes[sid])]:
                for fi in stripe_flows:
                    by_switch[fi.switch].append(fi.flow)
        try:
            return {sw: route_once(wafer.switches[sw], fl) for sw, fl in by_switch.items()}
        except RoutingConflict as conflict:
            sid = max({f.split(".")[0] for f in conflict.flows}, key=order.__getitem__)
            if len(stripes) == 1 and len(stripes[sid]) == 1:
                raise VerificationError(f"one lane of stream {sid} alone does not route: "
                                        f"{conflict}") from None
            stripes[sid].pop()
            if not stripes[sid]:
                del stripes[sid]


def schedule_timeline(schedule: Schedule, wafer: Wafer) -> Timeline:
    """The streams of ``schedule`` and their routed phases (module docstring).

    Raises
    ------
    VerificationError
        If no stream can move while some remain (a dependency cycle: never expected of a
        schedule whose transfers go forward in time), or one lane of a stream alone does
        not route (a chunk crossing one switch more than m times at once).
    """
    streams = chunk_streams(schedule, wafer)
    order = {s.id: i for i, s in enumerate(streams)}
    remaining = {s.id: s.bytes for s in streams}
    done: set[str] = set()
    kind = schedule.collective.kind.value
    phases: list[FredPhase] = []
    t = 0.0
    while len(done) < len(streams):
        check(ROUTING)
        ready = [s for s in streams if s.id not in done and all(a in done for a in s.after)]
        stripes = _allocate(wafer, ready)
        if not stripes:
            raise VerificationError(f"{len(streams) - len(done)} stream(s) of the schedule "
                                    "wait for each other")
        flows = {s.id: [_flows(wafer, s, k, lanes, kind) for k, lanes in
                        enumerate(stripes[s.id])] for s in ready if s.id in stripes}
        routings = _route(wafer, stripes, flows, order)
        per_lane = min(-(-remaining[sid] // len(st)) for sid, st in stripes.items())
        infos: list[FlowInfo] = []
        for sid, st in stripes.items():
            carried = min(remaining[sid], per_lane * len(st))
            remaining[sid] -= carried
            if not remaining[sid]:
                done.add(sid)
            base, extra = divmod(carried, len(st))
            for k in range(len(st)):
                infos += [replace(fi, bytes=base + (k < extra)) for fi in flows[sid][k]]
        latency = max(wafer.path_latency_s([wafer.rank_of(n) for n in s.sources],
                                           [wafer.rank_of(n) for n in s.destinations])
                      for s in ready if s.id in stripes)
        end = t + wafer.reconfig_s + latency + per_lane / wafer.lane_Bps
        phases.append(FredPhase(len(phases), "MP", tuple(infos), routings, t, end))
        t = end
    return Timeline(tuple(phases), tuple(streams))
