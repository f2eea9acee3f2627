"""Pass 1b: time the edges by the schedule's replay instead of its epochs.

The runtime runs an MSCCL file as soon as data, thread blocks and connections allow, and
so does the schedule's replay (:mod:`te_ccl.simulate.replay`) that the file is measured
against; neither waits for epochs. The epoch model rounds every hop up to whole epochs
(a hop of ``chunk/b + α`` takes ``ceil((chunk/b + α)/τ)`` epochs), so where α and
``chunk/b`` differ in size the replay runs far ahead of the epochs, and unevenly: on a
link whose hop the epochs round up little (a slow, high-α link) more chunks are in
flight at once in the replay than its epochs say, and a send the epochs place after an
arrival may start before it. The passes that follow decide thread-block order, fusion
and channels (how many sends a connection holds at once) by comparing edge times, so
they are given the replay's: each edge's ``start``, ``busy`` and ``arrive`` become
integer picoseconds of the replay (the first link's start and end, the last link's
arrival), and ``final`` is recomputed on them.

The data a GPU sends must stay the schedule's. The replay starts a send only once what
it carries has arrived, so a relay holds a copied chunk before it sends it on and a sum
holds every partial the schedule adds before the send; a partial the schedule adds
after a send could still arrive before it in the replay. Where the replay's order of a
GPU's events on a reduced chunk differs from the schedule's (or a relay would send a
chunk before holding it, or a switch path is matched to hops that do not follow each
other), the epochs are kept for the whole schedule. Above
:data:`REPLAY_UP_TO` transfers the replay costs more than the lowering and the epochs
are kept too.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.errors import VerificationError
from te_ccl.lower.msccl.collapse_switches import Edge, with_final
from te_ccl.schedule import Schedule
from te_ccl.simulate.engine import TaskTimes
from te_ccl.simulate.replay import replay_times

__all__ = ["REPLAY_UP_TO", "replay_timed"]

REPLAY_UP_TO = 100_000  # transfers: the schedule replay's own limit in the pipeline
TICKS_PER_S = 10 ** 12  # edge times in picoseconds


def replay_timed(edges: tuple[Edge, ...], schedule: Schedule) -> tuple[Edge, ...]:
    """``edges`` timed by the schedule's replay (sorted), or as given where the replay
    cannot stand in for the epochs (see the module docstring)."""
    if not edges or len(schedule.transfers) > REPLAY_UP_TO:
        return edges
    try:
        times = replay_times(schedule)[1]
    except VerificationError:  # the schedule does not replay: the verifier will say why
        return edges
    pairs = _transfers_of(edges, schedule)
    if any(times[last].start_s < times[first].start_s or
           times[last].arrive_s < times[first].end_s for first, last in pairs):
        return edges  # a switch path matched to hops that do not follow each other
    timed = with_final([_timed(e, times[first], times[last])
                         for e, (first, last) in zip(edges, pairs, strict=True)])
    if not _same_data(edges, timed, schedule):
        return edges
    return tuple(sorted(timed))


def _timed(e: Edge, first: TaskTimes, last: TaskTimes) -> Edge:
    """``e`` timed by the replay of its ``first`` and ``last`` hop (what ``_replace``
    does, without its per-field calls: tens of thousands of edges at 64 GPUs)."""
    start = round(first.start_s * TICKS_PER_S)
    busy = max(1, round(first.end_s * TICKS_PER_S) - start)
    arrive = max(start + busy, round(last.arrive_s * TICKS_PER_S))
    return _make((start, arrive) + e[2:_BUSY] + (busy,) + e[_BUSY + 1:])


_make, _BUSY = Edge._make, Edge._fields.index("busy")


def _transfers_of(edges: tuple[Edge, ...], schedule: Schedule) -> list[tuple[int, int]]:
    """(first, last) transfer index of each edge: the hop leaving its sender and the hop
    reaching its receiver (the same transfer on a direct link; through a switch, the hop
    out of the edge's first switch if there is one, else out of any switch). Identical
    edges take identical transfers in turn."""
    topo, coll = schedule.topology, schedule.collective
    gpu = [topo.gpu(r) for r in coll.ranks]
    firsts: dict[tuple, list[int]] = defaultdict(list)
    lasts: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(schedule.transfers):
        firsts[(t.chunk, t.src, t.dst, t.start_epoch)].append(i)
        if not topo.node(t.src).is_gpu:
            lasts[(t.chunk, t.src, t.dst, t.arrive_epoch)].append(i)
            lasts[(t.chunk, None, t.dst, t.arrive_epoch)].append(i)
    seen: dict[tuple, int] = defaultdict(int)
    out = []
    for e in edges:
        hop = gpu[e.dst] if e.via < 0 else topo.nodes[e.via].name
        key = (e.chunk, gpu[e.src], hop, e.start, e.arrive)
        n = seen[key]
        seen[key] += 1
        f = firsts[key[:4]]
        first = f[n % len(f)]
        if e.via < 0:
            out.append((first, first))
            continue
        k = lasts.get((e.chunk, hop, gpu[e.dst], e.arrive)) or \
            lasts[(e.chunk, None, gpu[e.dst], e.arrive)]
        out.append((first, k[n % len(k)]))
    return out


def _before(recv: Edge, send: Edge) -> bool:
    """Does a GPU take in ``recv`` before it sends ``send`` (arrivals first on a tie but
    deliveries, as :func:`~te_ccl.lower.msccl.instructions.recv_order` orders them)?"""
    return recv.arrive < send.start or (recv.arrive == send.start and not recv.final)


def _key(recv: Edge) -> tuple:
    """Where a GPU takes in ``recv`` among its receives (the edge's ``seq`` is unique)."""
    return (recv.arrive, recv.final, recv.start, recv.src, recv.seq)


def _same_data(old: tuple[Edge, ...], new: list[Edge], schedule: Schedule) -> bool:
    """Does every GPU send what the schedule says on the new times? A relay holds a copied
    chunk before each send of it; on a reduced chunk, each send follows the same
    receives, and receives that overwrite (copies) and add (partials) keep their order."""
    chunks = {c.id: c for c in schedule.collective.chunks()}
    pos = {r: p for p, r in enumerate(schedule.collective.ranks)}
    events: dict[tuple[int, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for j, e in enumerate(old):
        events[(e.src, e.chunk)][0].append(j)
        events[(e.dst, e.chunk)][1].append(j)
    for (g, k), (snd, rcv) in events.items():
        chunk = chunks[k]
        if not chunk.reduce:
            if g in {pos[r] for r in chunk.sources}:
                continue
            if any(not any(_before(new[r], new[s]) for r in rcv) for s in snd):
                return False
            continue
        for s in snd:
            for r in rcv:
                if _before(old[r], old[s]) != _before(new[r], new[s]):
                    return False
        for a in rcv:
            for b in rcv:
                if old[a].op != old[b].op and (_key(old[a]) < _key(old[b])) != (
                        _key(new[a]) < _key(new[b])):
                    return False
    return True
