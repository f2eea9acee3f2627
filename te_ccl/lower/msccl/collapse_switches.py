"""Pass 1: collapse paths through switches into GPU-to-GPU edges (MSCCL has no switches).

A chunk's path ``GPU → switch(es) → GPU`` becomes one edge between the two GPUs, starting
when the first hop starts and arriving when the last hop arrives; the edge remembers the
switch its path enters first, since the sender's link to that switch is shared by all its
edges through the switch (:attr:`Edge.link`). A switch that copies
becomes several edges from the source GPU. A switch that adds partials (FRED) cannot be
expressed in MSCCL and is rejected. Ranks become positions in ``collective.ranks`` (the
XML's GPU ids); a path through a GPU outside the collective cannot be expressed either.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from te_ccl.deadline import check
from te_ccl.errors import RuntimeLimitError, SpecError, TecclError
from te_ccl.lower.msccl.ir import LOWERING
from te_ccl.model.epochs import ceil_tol
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology.model import Topology

__all__ = ["Edge", "collapse_switches", "with_final"]


class Edge(NamedTuple):
    """Chunk ``chunk`` sent from position ``src`` to ``dst``; sorted by start epoch first.

    ``seq`` only separates otherwise identical edges (two switch paths at the same times).
    ``via``: the topology node index of the switch the path enters first, -1 for a direct
    link; ``busy``: the epochs the chunk occupies its first link (it has left the sender
    by epoch ``start + busy``); ``final``: the receiver does not send the chunk on (a
    delivery, which no send of its epoch waits for); ``epoch``: the epoch the schedule
    starts it in (``start`` too, until :mod:`~te_ccl.lower.msccl.retime` times the edge by
    the schedule's replay). ``more``: the further chunks the edge carries in the same
    step, after ``chunk`` (:mod:`~te_ccl.lower.msccl.merge`). A named tuple, not a
    dataclass: at 1024 GPUs there are millions of edges, and tuples are built, hashed and
    compared in C.
    """

    start: int
    arrive: int
    chunk: int
    src: int
    dst: int
    seq: int
    op: str = "copy"
    via: int = -1
    busy: int = 1
    final: bool = False
    epoch: int = 0
    more: tuple[int, ...] = ()

    @property
    def chunks(self) -> tuple[int, ...]:
        """Every chunk the edge carries, in the order of its slots."""
        return (self.chunk, *self.more)

    @property
    def link(self) -> int:
        """The sender's out-link the edge leaves on (a key, unique per sender): the link
        to its first switch, else the direct link to ``dst``."""
        return self.via if self.via >= 0 else -1 - self.dst


def check_expressible(fmt: str, topology: Topology) -> None:
    """Refuse MSCCL XML (``fmt`` ``"xml"``; other formats pass) for a fabric whose switches
    reduce (:attr:`~te_ccl.topology.model.Topology.reducing_switches`): an MSCCL program
    is a list of GPU sends, receives and reductions, with no way to ask a switch to add
    what it forwards; such a fabric's schedule is written as JSON and its switch tables.
    The one answer for whoever decides to write XML, asked before solving.

    Raises
    ------
    SpecError
        If the format is XML and a switch reduces.
    """
    found = topology.reducing_switches if fmt == "xml" else ()
    if found:
        raise SpecError(f"MSCCL XML cannot express in-switch reduction (switches "
                        f"{', '.join(found[:3])}{' …' if len(found) > 3 else ''} reduce); "
                        "use --format json and --fred-tables DIR", file=topology.name,
                        key="--format")


def collapse_switches(schedule: Schedule) -> tuple[Edge, ...]:
    """The schedule's transfers as GPU-to-GPU edges between collective positions."""
    topo, transfers = schedule.topology, schedule.transfers
    if not topo.switches:  # each path is one transfer, sorted by its fields below
        return _edges(schedule, transfers, transfers, presorted=False)
    feeds = _match_switches(schedule)
    raw = [(t, transfers[j]) for i, t in enumerate(transfers) if topo.node(t.src).is_gpu
           for j in _path_ends(i, schedule, feeds)]
    raw.sort(key=lambda p: (_fields(p[0]), _fields(p[1])))
    return _edges(schedule, [f for f, _ in raw], [x for _, x in raw], presorted=True)


def _edges(schedule: Schedule, firsts: Sequence[Transfer], lasts: Sequence[Transfer],
           presorted: bool) -> tuple[Edge, ...]:
    """The edges of the paths from ``firsts[i]`` to ``lasts[i]``, numbered (``seq``) in the
    order of their transfers' fields (sorted here unless ``presorted``), in edge order.
    Column by column: at 1024 GPUs there are millions of paths."""
    topo, n = schedule.topology, len(firsts)
    if not n:
        return ()
    check(LOWERING)
    ends = {t.dst for t in firsts}
    if lasts is not firsts:  # paths through switches: their last hops' ends too
        ends |= {t.dst for t in lasts}
    names = sorted({t.src for t in firsts} | ends)
    name = {x: i for i, x in enumerate(names)}  # a name's index compares as the name does
    ops = sorted({t.op for t in lasts})
    op_of = {x: i for i, x in enumerate(ops)}

    def column(values: Iterable[int]) -> np.ndarray:
        return np.fromiter(values, dtype=np.int64, count=n)

    chunk = column(t.chunk for t in firsts)
    src = column(name[t.src] for t in firsts)
    hop = column(name[t.dst] for t in firsts)  # where the first link ends
    start = column(t.start_epoch for t in firsts)
    left = column(t.arrive_epoch for t in firsts)  # off the first link once it arrives
    if lasts is firsts:  # one transfer per path (no switches): its columns again
        arrive, dst = left, hop
    else:
        arrive = column(t.arrive_epoch for t in lasts)
        dst = column(name[t.dst] for t in lasts)
    op = column(op_of[t.op] for t in lasts)
    if not presorted:  # the fields of a single transfer, in their order
        order = np.lexsort((op, arrive, start, dst, src, chunk))
        chunk, src, hop, start, left, arrive, dst, op = (
            a[order] for a in (chunk, src, hop, start, left, arrive, dst, op))
    check(LOWERING)
    pos = {topo.gpu(r): p for p, r in enumerate(schedule.collective.ranks)}
    where = np.array([pos.get(x, -1) for x in names], dtype=np.int64)
    spos, dpos = where[src], where[dst]
    outside = np.flatnonzero((spos < 0) | (dpos < 0))
    if outside.size:
        i = int(outside[0])
        gpu = names[src[i] if spos[i] < 0 else dst[i]]
        raise TecclError(f"chunk {chunk[i]} passes through GPU {gpu}, which is not in the "
                         "collective's ranks: MSCCL cannot relay through a GPU outside the "
                         "communicator")
    index = {x.name: i for i, x in enumerate(topo.nodes)}
    via = np.where(hop == dst, -1, np.array([index[x] for x in names])[hop])
    busy = np.maximum(1, np.minimum(_link_epochs(schedule, names, src, hop), left - start))
    seq = np.arange(n, dtype=np.int64)
    order = np.lexsort((seq, dpos, spos, chunk, arrive, start))
    final = _last_send_starts(spos, chunk, start, dpos) < arrive  # as with_final
    check(LOWERING)
    return tuple(map(Edge._make, zip(
        *(a[order].tolist() for a in (start, arrive, chunk, spos, dpos, seq)),
        np.array(ops, dtype=object)[op[order]].tolist(),
        *(a[order].tolist() for a in (via, busy, final, start)), repeat((), n), strict=True)))


def _link_epochs(schedule: Schedule, names: list[str], src: np.ndarray, hop: np.ndarray
                 ) -> np.ndarray:
    """Per path, the epochs a chunk occupies its first link (``src → hop``)."""
    topo = schedule.topology
    per_epoch = schedule.chunk_bytes / schedule.epoch_s  # bandwidth of one chunk an epoch
    links, inverse = np.unique(src * len(names) + hop, return_inverse=True)
    epochs = [ceil_tol(per_epoch / topo.link(names[k // len(names)],
                                             names[k % len(names)]).bandwidth_Bps)
              for k in links.tolist()]
    return np.array(epochs, dtype=np.int64)[inverse.reshape(-1)]


def _last_send_starts(src: np.ndarray, chunk: np.ndarray, start: np.ndarray,
                      at: np.ndarray) -> np.ndarray:
    """Per path, the start of the last send of its chunk from GPU ``at`` (-1 if none),
    from every path's sender ``src`` and ``start``."""
    width = int(chunk.max()) + 1
    keys, inverse = np.unique(src * width + chunk, return_inverse=True)
    last = np.full(keys.size, -1, dtype=np.int64)
    np.maximum.at(last, inverse.reshape(-1), start)
    want = at * width + chunk
    i = np.minimum(np.searchsorted(keys, want), keys.size - 1)
    return np.where(keys[i] == want, last[i], -1)


def with_final(edges: list[Edge]) -> list[Edge]:
    """``edges`` with ``final`` set from their times: the receiver sends the chunk on at
    or after it arrives, else the edge is a delivery."""
    if not edges:
        return []
    src, dst, chunk, start, arrive = (np.array(x, dtype=np.int64) for x in zip(
        *((e.src, e.dst, e.chunk, e.start, e.arrive) for e in edges), strict=True))
    final = (_last_send_starts(src, chunk, start, dst) < arrive).tolist()
    make, i = Edge._make, _FINAL  # what ``_replace`` does, without its per-field calls
    return [make(e[:i] + (f,) + e[i + 1:]) for e, f in zip(edges, final, strict=True)]


_FINAL = Edge._fields.index("final")

# ``t``'s sort key (the dataclass order, built once per transfer instead of per compare)
_fields = attrgetter("chunk", "src", "dst", "start_epoch", "arrive_epoch", "op")


def _path_ends(i: int, schedule: Schedule, feeds: dict[int, list[int]]) -> list[int]:
    """Indices of the transfers that end a switch path starting with transfer ``i``."""
    t = schedule.transfers[i]
    if schedule.topology.node(t.dst).is_gpu:
        return [i]
    return [end for j in feeds.get(i, []) for end in _path_ends(j, schedule, feeds)]


def _match_switches(schedule: Schedule) -> dict[int, list[int]]:
    """For every transfer into a switch, the transfers out of the switch it feeds."""
    topo, transfers = schedule.topology, schedule.transfers
    ins: dict[tuple, list[int]] = defaultdict(list)
    outs: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(transfers):
        if not topo.node(t.dst).is_gpu:
            ins[(t.dst, t.chunk, t.op)].append(i)
        if not topo.node(t.src).is_gpu:
            outs[(t.src, t.chunk, t.op)].append(i)
    feeds: dict[int, list[int]] = defaultdict(list)
    for key in sorted(set(ins) | set(outs)):
        incoming = sorted(ins[key], key=lambda i: (transfers[i].arrive_epoch, transfers[i].src, i))
        outgoing = sorted(outs[key], key=lambda i: (transfers[i].start_epoch, transfers[i].dst, i))
        match = _match_reduce if key[2] == "reduce" else _match_copy
        for src, dst in match(key, incoming, outgoing, transfers):
            feeds[src].append(dst)
    return feeds


def _match_copy(key, incoming, outgoing, transfers) -> list[tuple[int, int]]:
    """Each outgoing copy is fed by the latest arrival before it (a copying switch may fan out)."""
    pairs = []
    for o in outgoing:
        start = transfers[o].start_epoch
        fed = [i for i in incoming if transfers[i].arrive_epoch <= start]
        if not fed:
            raise TecclError(f"switch {key[0]} forwards chunk {key[1]} in epoch {start} "
                             "before it arrives")
        latest = max(transfers[i].arrive_epoch for i in fed)
        pairs.append((next(i for i in fed if transfers[i].arrive_epoch == latest), o))
    return pairs


def _match_reduce(key, incoming, outgoing, transfers) -> list[tuple[int, int]]:
    """Partials pass a switch one to one; a switch that merges them cannot be lowered."""
    if len(incoming) != len(outgoing):
        raise RuntimeLimitError(f"switch {key[0]} adds partials of chunk {key[1]} "
                                f"({len(incoming)} in, {len(outgoing)} out): in-switch "
                                "reduction cannot be expressed in MSCCL XML (write JSON, or "
                                "use the FRED switch tables for such topologies)")
    for i, o in zip(incoming, outgoing, strict=True):
        if transfers[i].arrive_epoch > transfers[o].start_epoch:
            raise TecclError(f"switch {key[0]} forwards a partial of chunk {key[1]} in epoch "
                             f"{transfers[o].start_epoch} before it arrives")
    return list(zip(incoming, outgoing, strict=True))
