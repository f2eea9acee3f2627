"""Pass 1c (asked for with ``merge``): edges that carry several chunks in one step.

A step of ``cnt = c`` moves ``c`` chunks of consecutive slots in one call where the
buffer is small (one message, one latency, one slot of its connection), and as ``c``
one-chunk calls where it is large. One step per chunk per hop spends a latency and a
connection slot on every chunk, and one of the 64 steps a thread block may hold: a
relay that carries a whole box's AlltoAll over one link runs out of steps or waits
for its connection's two slots, chunk after chunk.

Per connection (sender, receiver, first switch), edges that follow each other in the
connection's send order, with the same operation, whose chunks are read from
consecutive slots on the sender and land in consecutive slots on the receiver, become
one edge (``Edge.more``) that starts when its last chunk would and arrives when its
last chunk would. A step carries at most as many chunks as the runtime puts in one
call at the largest size the file serves (``most``), so that it is one call there: it
takes one slot of its connection, as a one-chunk step does, and the channel pass's
rule that keeps the file from hanging holds as it is; a file for no upper size gets
the largest size at which its steps are single calls as its ``maxBytes``
(:func:`one_call_up_to`). A chunk waits for the last one of its step less than
:data:`WAIT_LATENCIES` times the step's latency (what it saves), and never where the
wait would reorder what its GPUs do with the chunk: nothing writes it on the sender
and no other partial reaches the receiver in between. Two modes (:data:`MODES`) differ
in what the receiver does with a chunk meanwhile: under :data:`HOLD` it sends nothing
on before the step arrives (the schedule's times stand); under :data:`DELAY` a copy
it relays may join too, and what the receiver sends it on by leaves that much later
(a relay's inputs merge, the schedule's times move by the waits).

Where the slots come from: a chunk received into scratch gets its slot in the order
of (the peer it is sent on to, when), so chunks that leave together sit together;
inputs and outputs stay where the collective puts them. In place, where a received
chunk may be staged behind one still to be sent, nothing is merged.

Whether the file is faster so is for its replay to say (``te_ccl.compiler.judge``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict

from te_ccl.deadline import checked
from te_ccl.lower.msccl.buffers import Layout
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.ir import LOWERING, Slot
from te_ccl.runtime_limits import RuntimeLimits

__all__ = ["DELAY", "HOLD", "MODES", "WAIT_LATENCIES", "merged_edges", "one_call_up_to"]

HOLD, DELAY = "hold", "delay"
MODES = (HOLD, DELAY)

WAIT_LATENCIES = 1.0  # the longest a chunk waits for the last chunk of its step, in the
#                       step's latency (arrival less the end of its first link): the
#                       latency a one-chunk step of its own would pay again

_NOWHERE = Slot(None, -2)  # type: ignore[arg-type]  # a chunk a GPU does not hold


def merged_edges(edges: tuple[Edge, ...], layout: Layout, most: int, mode: str = HOLD,
                 wait: float = WAIT_LATENCIES) -> tuple[tuple[Edge, ...], Layout]:
    """``edges`` with runs of at most ``most`` chunks merged into edges of several
    chunks (sorted), and the layout whose scratch order keeps each run's slots
    consecutive; as given where nothing merges. ``mode``: one of :data:`MODES`."""
    if layout.overwrites_inputs or len(edges) < 2 or most < 2:
        return edges, layout
    slots = _Slots(edges, layout, relayed=mode == DELAY)
    groups: list[list[Edge]] = []
    open_at: dict[tuple, int] = {}  # (connection, next slots) → its group
    ready: dict[tuple[int, int], int] = {}  # (GPU, chunk) → when its steps brought it
    sent: dict[tuple[int, int], int] = {}  # (GPU, chunk) → its first send since then
    for e in checked(edges, LOWERING):  # sorted by start: each connection's send order
        ends = _ends(e, slots)
        e = _later(e, ready)
        conn = (e.src, e.dst, e.via)
        at = open_at.pop((conn, *ends), None)
        if at is None or not _joins(groups[at], e, slots, wait, sent):
            at = len(groups)
            groups.append([e])
        else:
            groups[at].append(e)
        sent.setdefault((e.src, e.chunk), e.start)
        sent.pop((e.dst, e.chunk), None)
        group = groups[at]
        arrive = max(m.arrive for m in group)
        for m in group:
            key = (m.dst, m.chunk)
            ready[key] = max(ready.get(key, 0), arrive)
        if len(group) < most and ends[0].buf is not None:
            open_at[(conn, *map(_after, ends))] = at
    if len(groups) == len(edges):
        return edges, layout
    return tuple(sorted(_merged(g) for g in groups)), slots.layout


def _later(e: Edge, ready: dict[tuple[int, int], int]) -> Edge:
    """``e`` leaving once its sender has its chunk (under :data:`DELAY`, after the step
    that brought it)."""
    late = ready.get((e.src, e.chunk), 0) - e.start
    return e if late <= 0 else e._replace(start=e.start + late, arrive=e.arrive + late)


class _Slots:
    """Where each GPU holds each chunk, and when it sends and receives it."""

    def __init__(self, edges: tuple[Edge, ...], layout: Layout, relayed: bool) -> None:
        self.relayed = relayed  # a copy sent on may wait for its step (:data:`DELAY`)
        chunks = layout.chunks
        self.sends: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.recvs: dict[tuple[int, int], list[int]] = defaultdict(list)
        first_in: dict[tuple[int, int], Edge] = {}
        first_out: dict[tuple[int, int], Edge] = {}
        for e in edges:  # sorted by start
            self.sends[(e.src, e.chunk)].append(e.start)
            self.recvs[(e.dst, e.chunk)].append(e.arrive)
            first_out.setdefault((e.src, e.chunk), e)
            got = first_in.get((e.dst, e.chunk))
            if got is None or e.arrive < got.arrive:
                first_in[(e.dst, e.chunk)] = e
        for times in (*self.sends.values(), *self.recvs.values()):
            times.sort()
        order: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
        for (g, k), e in first_in.items():
            if layout.out(g, chunks[k]) is None:  # relayed through scratch
                order[g].append(_scratch_key(e, first_out.get((g, k))))
        self.layout = Layout(layout.collective, {
            (g, key[-1]): i for g, keys in order.items() for i, key in enumerate(sorted(keys))})
        self._chunks = chunks

    def work(self, g: int, k: int) -> Slot:
        """Where GPU ``g`` receives chunk ``k``."""
        lay = self.layout
        return lay.out(g, self._chunks[k]) or lay.scratch(g, k)

    def held(self, g: int, k: int, at: int, sending: bool) -> Slot:
        """Where GPU ``g`` holds chunk ``k`` at time ``at``: received by then (an arrival
        at the time of a send comes before it), else its input."""
        times = self.recvs.get((g, k), ())
        got = (bisect_right if sending else bisect_left)(times, at) > 0
        if got:
            return self.work(g, k)
        return self.layout.home(g, self._chunks[k]) or _NOWHERE

    def quiet(self, e: Edge, start: int, arrive: int) -> bool:
        """Can ``e`` leave at ``start`` and arrive at ``arrive`` instead: nothing writes its
        chunk on its sender in between, and on its receiver nothing touches it from its
        own arrival on (another partial at the same time would make the order of the two,
        hence the slot each adds to, a tie), but for sending a copy on where it may wait?"""
        if start > e.start and _within(self.recvs.get((e.src, e.chunk), ()), e.start, start):
            return False
        k = (e.dst, e.chunk)
        recvs = self.recvs[k]
        if bisect_right(recvs, arrive) - bisect_left(recvs, e.arrive) > 1:
            return False
        return arrive == e.arrive or (self.relayed and e.op != "reduce") or not _within(
            self.sends.get(k, ()), e.arrive - 1, arrive)


def _latency(e: Edge) -> int:
    """An edge's time in flight: its arrival less the end of its first link."""
    return max(0, e.arrive - e.start - e.busy)


def _scratch_key(into: Edge, out: Edge | None) -> tuple[int, int, int, int]:
    """Where a relayed chunk goes in its GPU's scratch: beside the chunks that share its
    slower connection, in or out (there merging saves the most), in time order there."""
    if out is not None and _latency(out) >= _latency(into):
        return (0, out.dst, out.start, into.chunk)
    return (1, into.src, into.arrive, into.chunk)


def _within(times: list[int] | tuple, low: int, high: int) -> bool:
    """Is a time of ``times`` (sorted) in ``(low, high]``?"""
    return bisect_right(times, high) > bisect_right(times, low)


def _ends(e: Edge, slots: _Slots) -> tuple[Slot, Slot, Slot]:
    """The slots an edge reads on its sender, writes on its receiver, and adds to there
    (a partial: the receiver's value, ``_NOWHERE`` for a copy)."""
    held = slots.held(e.dst, e.chunk, e.arrive, False) if e.op == "reduce" else _NOWHERE
    return (slots.held(e.src, e.chunk, e.start, True), slots.work(e.dst, e.chunk), held)


def one_call_up_to(runtime: RuntimeLimits, proto: str, nchunksperloop: int, cnt: int) -> int:
    """The largest size in bytes at which the runtime moves ``cnt`` chunks in one call
    (:meth:`~te_ccl.runtime_limits.RuntimeLimits.max_allowed_count`: a chunk of at most
    ``call_bytes // cnt``)."""
    return runtime.call_bytes(proto) // cnt * nchunksperloop


def _after(slot: Slot) -> Slot:
    """The slot after ``slot`` (``_NOWHERE`` stays)."""
    return slot if slot.buf is None else Slot(slot.buf, slot.index + 1)


def _joins(group: list[Edge], e: Edge, slots: _Slots, wait: float,
           sent: dict[tuple[int, int], int]) -> bool:
    """May ``e``, whose slots follow the group's, join ``group`` (the same operation, the
    wait within bounds, every chunk's GPUs undisturbed by the later times, none of its
    chunks sent on before the group would now bring it)?"""
    first = group[0]
    if e.op != first.op or e.start - first.start >= wait * _latency(first):
        return False
    arrive = max(e.arrive, max(m.arrive for m in group))
    return all(slots.quiet(m, e.start, arrive)
               and sent.get((m.dst, m.chunk), arrive) >= arrive for m in (*group, e))


def _merged(group: list[Edge]) -> Edge:
    """One edge for ``group``: it leaves with its last chunk and arrives with the last."""
    if len(group) == 1:
        return group[0]
    first = group[0]
    start = max(m.start for m in group)
    return first._replace(start=start, arrive=max(m.arrive for m in group),
                          busy=max(1, max(m.start + m.busy for m in group) - start),
                          final=all(m.final for m in group),
                          more=tuple(m.chunk for m in group[1:]))
