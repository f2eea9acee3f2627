"""What a compile would build, counted before it builds anything, and the most it may.

Memory grows with a schedule's transfers: the scale backend's moves, the Schedule, the
MSCCL lowering's steps and the verifier's replay each hold a record or more per transfer,
about 3.5 KB in all at the lowering's peak (mesh 32×32 AllReduce at one chunk per rank:
2,095,104 transfers, 7.35 GB). Every schedule has at least one transfer per delivery — a
copy into each destination that lacks the chunk, a partial out of each source that is not
where it is summed, and for AllReduce the sum back out — and a chunk that is never copied
(AlltoAll, Gather, Scatter) crosses every link of its route. :func:`transfers_at_least`
counts that by arithmetic and a few breadth-first searches, and :func:`check_fits` refuses
(exit 2) a compile that would exceed :data:`MAX_TRANSFERS`, naming the largest chunking
that fits, or a topology of more than :data:`MAX_GPUS` GPUs. A 2D grid's AlltoAll taken
by the row AlltoAll (:func:`by_rows`) keeps its chunk-hops as array rows instead, and is
held to :data:`MAX_ROW_HOPS`.

>>> from te_ccl.topology.generators import mesh
>>> ag = Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(16)), chunks_per_rank=4)
>>> transfers_at_least(mesh([4, 4], 50e9), ag), most_chunks(mesh([4, 4], 50e9), ag)
(960, 8738)
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import networkx as nx

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import TimeLimitReached, left, process_start, slowdown
from te_ccl.errors import SpecError
from te_ccl.runtime_limits import MSCCL
from te_ccl.topology.model import Topology

__all__ = ["MAX_GPUS", "MAX_RATE_RATIO", "MAX_SPAN_S", "MAX_TRANSFERS", "deliveries",
           "transfers_at_least", "most_chunks", "by_rows", "check_times", "check_fits", "MAX_ROW_HOPS",
           "row_hops", "row_first_file_s", "row_late", "row_needs"]

MAX_TRANSFERS = 2**21  # transfers one compile holds within 8 GB (~3.5 KB each at its peak)
MAX_ROW_HOPS = 2**25  # a row AlltoAll's (by_rows) chunk-hops at least that one compile
#                      holds: it relays up to twice as many, as array rows; higher lets
#                      its peak pass 8 GB, lower refuses 2D grids whose rows fit
ROW_S_PER_HOP = 2.2e-6  # CPU seconds a row AlltoAll's first file takes per chunk-hop relayed,
#                        from the problem to the replayed file: too low, a compile starts a
#                        file the deadline ends unwritten; too high, one that had time for
#                        its file ends at once (exit 3)
MAX_GPUS = 4096  # an MSCCL algorithm lists every GPU; the runtime reads 4096 elements a rank
MAX_RATE_RATIO = 1e6  # a slowest link's transfer spans this many of the fastest's epochs
MAX_SPAN_S = 1e6  # a schedule's times are picoseconds in 64 bits (9.2e6 s), with room
HOP_SAMPLES = 8  # sources whose hop distances stand for all of an AlltoAll's
_UNICAST = {CollectiveKind.ALLTOALL, CollectiveKind.GATHER, CollectiveKind.SCATTER}


def deliveries(collective: Collective) -> int:
    """(chunk, rank) pairs the schedule must serve, each with a transfer of its own (see
    the module docstring), by arithmetic.

    >>> deliveries(Collective(CollectiveKind.ALLREDUCE, 1 << 20, (0, 1, 2, 3)))
    24
    """
    n, k = collective.nranks, collective.chunks_per_rank
    if collective.kind is CollectiveKind.CUSTOM:
        return sum(d.chunks * sum(1 for x in d.destinations if x != d.source)
                   for d in collective.demands)
    per_rank = {CollectiveKind.ALLGATHER: n, CollectiveKind.ALLTOALL: n,
                CollectiveKind.REDUCESCATTER: n, CollectiveKind.ALLREDUCE: 2 * n}
    return per_rank.get(collective.kind, 1) * k * (n - 1)


def _mean_hops(topology: Topology, collective: Collective) -> float:
    """Mean links from a chunk's source to its destination over the GPUs taking part and
    the switches (the relays the runtime allows): from the root for Scatter, into it for
    Gather, from :data:`HOP_SAMPLES` evenly spread ranks for AlltoAll."""
    members = {topology.gpu(r) for r in collective.ranks}
    graph = topology.graph()
    graph.remove_nodes_from(set(topology.gpus) - members)
    if collective.kind is CollectiveKind.GATHER:
        graph, sources = graph.reverse(copy=False), [collective.root]
    elif collective.kind is CollectiveKind.SCATTER:
        sources = [collective.root]
    else:
        step = max(1, collective.nranks // HOP_SAMPLES)
        sources = list(collective.ranks[::step][:HOP_SAMPLES])
    hops = []
    for r in sources:
        far = nx.single_source_shortest_path_length(graph, topology.gpu(r))
        hops += [h for v, h in far.items() if v in members and h]
    return sum(hops) / len(hops) if hops else 1.0


def _behind_switches(topology: Topology, collective: Collective, reduce: bool) -> float:
    """The share of the ranks that reach every neighbour through a switch unable to copy
    into them (``reduce``: to sum what they send): each delivery to (from) one is a
    second transfer, into (out of) the switch."""
    def alone(link_node: str) -> bool:
        node = topology.node(link_node)
        return not node.is_gpu and not (node.can_reduce if reduce else node.can_copy)

    gpus = [topology.gpu(r) for r in collective.ranks]
    ends = ([[k.dst for k in topology.out_links(g)] for g in gpus] if reduce
            else [[k.src for k in topology.in_links(g)] for g in gpus])
    return sum(bool(e) and all(alone(x) for x in e) for e in ends) / max(1, len(gpus))


def transfers_at_least(topology: Topology, collective: Collective) -> int:
    """The transfers any schedule of ``collective`` on ``topology`` has, about: one per
    delivery, two where a switch that cannot copy (sum) stands between a rank and all its
    neighbours, and the mean route length where chunks are never copied."""
    pairs = deliveries(collective)
    if not pairs:
        return 0
    if collective.kind in _UNICAST:
        return round(pairs * _mean_hops(topology, collective))
    if collective.kind is CollectiveKind.ALLREDUCE:
        per = 1 + (_behind_switches(topology, collective, True)
                   + _behind_switches(topology, collective, False)) / 2
    else:
        per = 1 + _behind_switches(topology, collective, collective.is_reduction)
    return round(pairs * per)


def most_chunks(topology: Topology, collective: Collective) -> int:
    """The most chunks per rank whose transfers fit :data:`MAX_TRANSFERS` (0: not even
    one; custom collectives, whose chunks the demands fix: theirs or 0)."""
    if collective.kind is CollectiveKind.CUSTOM:
        fits = transfers_at_least(topology, collective) <= MAX_TRANSFERS
        return collective.chunks_per_rank if fits else 0
    one = transfers_at_least(topology, replace(collective, chunks_per_rank=1))
    return MAX_TRANSFERS // one if one else MAX_TRANSFERS


def by_rows(topology: Topology, collective: Collective) -> bool:
    """Does the row AlltoAll take ``collective``: an AlltoAll of every GPU in rank order,
    out of place, on a generated 2D mesh or torus whose row of chunks (one per rank of a
    row, times the chunks per pair) one step carries? That method keeps a chunk's hops
    as rows of arrays (no record each), so its compile holds up to :data:`MAX_ROW_HOPS`
    of them (:func:`transfers_at_least`; mesh 32×32: 27,459,584)."""
    meta = topology.meta or {}
    dims = tuple(meta.get("dims") or ())
    return (collective.kind is CollectiveKind.ALLTOALL and not collective.inplace
            and meta.get("generator") in ("mesh", "torus") and len(dims) == 2
            and min(dims) >= 3 and not topology.switches
            and collective.ranks == tuple(range(topology.ngpus))
            and dims[1] * collective.chunks_per_rank < MSCCL.max_count)


def row_hops(dims: tuple[int, int], wrap: bool, k: int) -> int:
    """Chunk-hops the row AlltoAll relays (:mod:`te_ccl.backends.scale.grid_blocks`), by
    arithmetic: phase A sends each column's ``d0·(d0 − 1)`` blocks of ``d1·k`` chunks the
    shortest way; phase B sends each of ``d0²`` rows per column position ``b`` a run each
    way (two where it wraps round a ring), each run whole to its farthest member.

    >>> row_hops((32, 32), False, 1), row_hops((32, 32), True, 1)
    (32505856, 22872064)
    """
    d0, d1 = dims
    line = (d0 ** 3 - d0) // 3 if not wrap else d0 * (d0 * d0 // 4)  # Σ hops over pairs
    runs = 0
    for b in range(d1):
        if not wrap:
            runs += (d1 - 1 - b) ** 2 + b ** 2
            continue
        ahead = (d1 - 1) // 2 + (d1 % 2 == 0 and b % 2 == 0)  # the antipode from even b
        for far, edge in ((ahead, d1 - 1 - b), (d1 - 1 - ahead, b)):  # ahead, back
            # a run cut where it wraps: the part to the edge, then the rest to ``far``
            runs += far * far if far <= edge else edge * edge + (far - edge) * far
    return (d1 * d1 * line + d0 * d0 * runs) * k


def row_first_file_s(topology: Topology, collective: Collective) -> tuple[int, float] | None:
    """(chunk-hops, CPU seconds) of the first file where the row AlltoAll is the only
    method one compile holds (:func:`by_rows`, more than :data:`MAX_TRANSFERS`
    transfers): its chunk-hops (:func:`row_hops`) at :data:`ROW_S_PER_HOP`; else None."""
    if not by_rows(topology, collective) or \
            transfers_at_least(topology, collective) <= MAX_TRANSFERS:
        return None
    d0, d1 = topology.meta["dims"]
    hops = row_hops((d0, d1), topology.meta["generator"] == "torus", collective.chunks_per_rank)
    return hops, hops * ROW_S_PER_HOP


def row_late(hops: int, slow: float) -> float | None:
    """Seconds by the clock a row AlltoAll's first file of ``hops`` chunk-hops takes at
    :data:`ROW_S_PER_HOP` times the slowdown ``slow``, where more than the time left; else
    None (it fits)."""
    need = hops * ROW_S_PER_HOP * slow
    return need if need > left() else None


def row_needs(hops: int) -> str:
    """What a row AlltoAll's first file of ``hops`` chunk-hops needs here, in words (the
    message of a compile out of time before it was written)."""
    cpu = hops * ROW_S_PER_HOP
    return (f"the first file (the row AlltoAll's, {hops:,} chunk-hops) needs about "
            f"{cpu * slowdown():.2g} s here ({cpu:.2g} s of CPU)")


def _first_file_in_time(topology: Topology, collective: Collective) -> None:
    """Raise :class:`TimeLimitReached` at once where the row AlltoAll's first file
    (:func:`row_first_file_s`, by the clock: times :func:`~te_ccl.deadline.slowdown`)
    takes longer than the time left, saying the limit that would hold it: building it
    would only use up the limit."""
    cost = row_first_file_s(topology, collective)
    if cost is None or (need := row_late(cost[0], slowdown())) is None:
        return
    spent = time.monotonic() - process_start()
    limit = 10 * math.ceil((spent + need) * 1.2 / 10)  # a fifth more: the load varies
    raise TimeLimitReached(
        f"{collective.kind.value} on {collective.nranks} ranks of {topology.name}: its only "
        f"file, the row AlltoAll's ({cost[0]:,} chunk-hops), takes about {cost[1]:.0f} s of "
        f"CPU to build, write and check, {need:.0f} s here at this machine's load, more than "
        f"the {left():.0f} s left; pass --time-limit {limit} or more", limit_named=True)


def check_times(topology: Topology, collective: Collective) -> None:
    """Refuse (:class:`SpecError`, exit 2) what no schedule's times can hold, before a
    compile or a baseline builds one: links more than :data:`MAX_RATE_RATIO` apart in rate
    (templates place transfers epoch by epoch of the fastest), a link's latency or the whole
    buffer of every rank on the slowest link beyond :data:`MAX_SPAN_S` (even a link no
    schedule uses has its latency timed)."""
    slowest = min((k.bandwidth_Bps for k in topology.links), default=0.0)
    fastest = max((k.bandwidth_Bps for k in topology.links), default=0.0)
    if slowest and fastest > MAX_RATE_RATIO * slowest:
        raise SpecError(f"{topology.name}'s fastest link ({fastest:g} B/s) is more than "
                        f"{MAX_RATE_RATIO:g} times its slowest ({slowest:g} B/s): epochs of "
                        "the fastest link cannot time the slowest", key="topology")
    far = max(topology.links, key=lambda k: k.latency_s, default=None)
    if far is not None and far.latency_s > MAX_SPAN_S:
        raise SpecError(f"{topology.name}'s link {far.src}→{far.dst} has a latency of "
                        f"{far.latency_s:g} s, more than the {MAX_SPAN_S:g} s a schedule's "
                        "times hold (picoseconds in 64 bits)", key="topology")
    if slowest and collective.size_bytes * collective.nranks / slowest > MAX_SPAN_S:
        raise SpecError(f"{collective.size_bytes:,} bytes on {collective.nranks} ranks over "
                        f"{topology.name}'s slowest link ({slowest:g} B/s) may take longer "
                        f"than the {MAX_SPAN_S:g} s a schedule's times hold (picoseconds in "
                        "64 bits); use a smaller size or faster links", key="size")


def check_fits(topology: Topology, collective: Collective) -> None:
    """Refuse (:class:`SpecError`, exit 2) a compile larger than one holds: links more than
    :data:`MAX_RATE_RATIO` apart in rate or times beyond :data:`MAX_SPAN_S`
    (:func:`check_times`), a topology of more than :data:`MAX_GPUS` GPUs, or more than
    :data:`MAX_TRANSFERS` transfers (:func:`transfers_at_least`), saying how many chunks per rank would fit.
    A row AlltoAll's compile (:func:`by_rows`) is held to :data:`MAX_ROW_HOPS` instead, and
    ended at once (:class:`TimeLimitReached`, exit 3) where its first file takes longer
    than the time left by estimate (:func:`row_first_file_s`).

    >>> from te_ccl.topology.generators import fully_connected
    >>> check_fits(fully_connected(8, 50e9), Collective(CollectiveKind.ALLGATHER, 1 << 30,
    ...            tuple(range(8)), chunks_per_rank=100_000))
    Traceback (most recent call last):
    ...
    te_ccl.errors.SpecError: chunks: 100000 chunks per rank would build at least 5,600,000 transfers, more than the 2,097,152 one compile holds in memory (use at most 37449 chunks per rank)
    """
    check_times(topology, collective)
    if topology.ngpus > MAX_GPUS:
        raise SpecError(f"{topology.name} has {topology.ngpus} GPUs, more than the "
                        f"{MAX_GPUS} a compile takes (an MSCCL algorithm lists every GPU, and "
                        f"the runtime reads at most {MAX_GPUS} elements per rank: a larger one "
                        "cannot load)",
                        key="topology")
    estimate = transfers_at_least(topology, collective)
    if estimate <= MAX_TRANSFERS:
        return
    if by_rows(topology, collective) and estimate <= MAX_ROW_HOPS:
        _first_file_in_time(topology, collective)
        return
    most, cap = most_chunks(topology, collective), MAX_TRANSFERS
    one = replace(collective, chunks_per_rank=1)
    if by_rows(topology, one):  # the row AlltoAll's cap, its rows within a step
        most = max(most, min(MAX_ROW_HOPS // transfers_at_least(topology, one),
                             (MSCCL.max_count - 1) // topology.meta["dims"][1]))
        cap = MAX_ROW_HOPS if by_rows(topology, collective) else cap
    if collective.kind is CollectiveKind.CUSTOM:
        key, where, fix = "demands", f"{collective.commodities} chunks", "use fewer chunks"
    elif most:
        key, where = "chunks", f"{collective.chunks_per_rank} chunks per rank"
        fix = f"use at most {most} chunks per rank"
    else:
        key, fix = "ranks", "use fewer ranks"
        where = f"{collective.kind.value} on {collective.nranks} ranks of {topology.name}"
    raise SpecError(f"{where} would build at least {estimate:,} transfers, more than the "
                    f"{cap:,} one compile holds in memory ({fix})", key=key)
