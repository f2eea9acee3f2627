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
from collections.abc import Iterable
from operator import attrgetter
from typing import NamedTuple

from te_ccl.deadline import checked
from te_ccl.errors import RuntimeLimitError, TecclError
from te_ccl.lower.msccl.ir import LOWERING
from te_ccl.model.epochs import ceil_tol
from te_ccl.schedule import Schedule

__all__ = ["Edge", "collapse_switches", "with_final"]


class Edge(NamedTuple):
    """Chunk ``chunk`` sent from position ``src`` to ``dst``; sorted by start epoch first.

    ``seq`` only separates otherwise identical edges (two switch paths at the same times).
    ``via``: the topology node index of the switch the path enters first, -1 for a direct
    link; ``busy``: the epochs the chunk occupies its first link (it has left the sender
    by epoch ``start + busy``); ``final``: the receiver does not send the chunk on (a
    delivery, which no send of its epoch waits for); ``epoch``: the epoch the schedule
    starts it in (``start`` too, until :mod:`~te_ccl.lower.msccl.retime` times the edge by
    the schedule's replay). A named tuple, not a dataclass: at
    1024 GPUs there are millions of edges, and tuples are built, hashed and compared in C.
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

    @property
    def link(self) -> int:
        """The sender's out-link the edge leaves on (a key, unique per sender): the link
        to its first switch, else the direct link to ``dst``."""
        return self.via if self.via >= 0 else -1 - self.dst


def collapse_switches(schedule: Schedule) -> tuple[Edge, ...]:
    """The schedule's transfers as GPU-to-GPU edges between collective positions."""
    topo, transfers = schedule.topology, schedule.transfers
    pos = {topo.gpu(r): p for p, r in enumerate(schedule.collective.ranks)}
    if topo.switches:
        feeds = _match_switches(schedule)
        raw = [(t, transfers[j]) for i, t in enumerate(transfers) if topo.node(t.src).is_gpu
               for j in _path_ends(i, schedule, feeds)]
        raw.sort(key=lambda p: (_fields(p[0]), _fields(p[1])))
    else:  # the same order: each pair is one transfer twice
        raw = [(t, t) for t in sorted(transfers, key=_fields)]
    index = {n.name: i for i, n in enumerate(topo.nodes)}
    busy: dict[tuple[str, str], int] = {}
    per_epoch = schedule.chunk_bytes / schedule.epoch_s  # bandwidth of one chunk an epoch
    last_sent = _last_sends((pos.get(t.src), t.chunk, t.start_epoch) for t, _ in raw)
    edges = []
    for seq, (first, last) in enumerate(checked(raw, LOWERING)):
        for gpu in (first.src, last.dst):
            if gpu not in pos:
                raise TecclError(f"chunk {first.chunk} passes through GPU {gpu}, which is not in "
                                 "the collective's ranks: MSCCL cannot relay through a GPU "
                                 "outside the communicator")
        via = -1 if first is last else index[first.dst]
        key = (first.src, first.dst)
        if key not in busy:
            busy[key] = ceil_tol(per_epoch / topo.link(*key).bandwidth_Bps)
        left = min(busy[key], first.arrive_epoch - first.start_epoch)  # gone when it arrives
        dst = pos[last.dst]
        final = last_sent.get((dst, first.chunk), -1) < last.arrive_epoch  # as with_final
        edges.append(Edge(first.start_epoch, last.arrive_epoch, first.chunk, pos[first.src],
                          dst, seq, last.op, via, max(1, left), final, first.start_epoch))
    return tuple(sorted(edges))


def with_final(edges: list[Edge]) -> list[Edge]:
    """``edges`` with ``final`` set from their times: the receiver sends the chunk on at
    or after it arrives, else the edge is a delivery."""
    last_sent = _last_sends((e.src, e.chunk, e.start) for e in edges)
    make, i = Edge._make, _FINAL  # what ``_replace`` does, without its per-field calls
    return [make(e[:i] + (last_sent.get((e.dst, e.chunk), -1) < e.arrive,) + e[i + 1:])
            for e in edges]


_FINAL = Edge._fields.index("final")


def _last_sends(sends: Iterable[tuple[int | None, int, int]]) -> dict[tuple[int, int], int]:
    """(GPU, chunk) -> the start of its last send, from (GPU, chunk, start) of every send."""
    last_sent: dict[tuple[int, int], int] = {}
    for g, chunk, start in sends:
        if last_sent.get((g, chunk), -1) < start:
            last_sent[(g, chunk)] = start
    return last_sent

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
