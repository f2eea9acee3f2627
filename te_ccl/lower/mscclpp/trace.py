"""Pass 1: which GPU sends made each value a GPU receives.

The schedule is replayed epoch by epoch with the Schedule IR's rules (arrivals of an
epoch before the sends that start in it; a bufferless switch forwards in the epoch a
chunk arrives, a buffered switch that cannot reduce queues units, a switch that reduces
merges what meets in it), but a value is not a set of ranks: it is the tuple of GPU sends
(:class:`Source`) whose data it carries. A delivery with one source is a copy between two
GPUs (a put); with several, the sends were added inside the switch fabric (an NVLS
multimem reduction in the plan).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from te_ccl.deadline import checked
from te_ccl.errors import TecclError
from te_ccl.schedule import Schedule, Transfer

__all__ = ["Source", "Delivery", "trace_deliveries"]


@dataclass(frozen=True, order=True)
class Source:
    """GPU ``gpu`` (a position in ``collective.ranks``) sends its value of the chunk as it
    is at the start of ``epoch``."""

    gpu: int
    epoch: int


@dataclass(frozen=True)
class Delivery:
    """GPU ``dst`` receives chunk ``chunk`` at ``arrive``: the sum of ``sources``, which it
    copies (``op="copy"``) or adds to its own value (``op="reduce"``); ``via``: the NVLink
    SHARP switch it comes from, if it does (one that can multicast it to several GPUs)."""

    chunk: int
    dst: int
    arrive: int
    op: str
    sources: tuple[Source, ...]
    via: str | None = None


Value = tuple[Source, ...]


def trace_deliveries(schedule: Schedule) -> list[Delivery]:
    """Every arrival at a GPU, in (epoch, chunk, receiver) order."""
    topo = schedule.topology
    pos = {topo.gpu(r): p for p, r in enumerate(schedule.collective.ranks)}
    for t in schedule.transfers:
        for end in (t.src, t.dst):
            if topo.node(end).is_gpu and end not in pos:
                raise TecclError(f"chunk {t.chunk} passes through GPU {end}, which is not in "
                                 "the collective's ranks: an MSCCL++ plan has no such rank")
    sends: dict[int, list[Transfer]] = defaultdict(list)
    arrivals: dict[int, list[tuple[Transfer, Value]]] = defaultdict(list)
    for t in schedule.transfers:
        sends[t.start_epoch].append(t)
    held: dict[tuple[str, int], Value] = {}  # buffered switches that merge
    queued: dict[tuple[str, int], list[Value]] = defaultdict(list)
    out: list[Delivery] = []
    epochs = sorted({t.start_epoch for t in schedule.transfers}
                    | {t.arrive_epoch for t in schedule.transfers})
    for epoch in checked(epochs, "lowering to an MSCCL++ plan", every=256):
        transient: dict[tuple[str, int], Value] = {}
        for t, value in sorted(arrivals.pop(epoch, []), key=lambda x: _order(x[0])):
            node = topo.node(t.dst)
            if node.is_gpu:
                via = t.src if topo.node(t.src).nvls else None
                out.append(Delivery(t.chunk, pos[t.dst], epoch, t.op, value, via))
            elif node.has_buffer and not node.can_reduce:
                queued[(t.dst, t.chunk)].append(value)
            else:
                store = held if node.has_buffer else transient
                old = store.get((t.dst, t.chunk))
                merge = old is not None and old != value and (t.op == "reduce" or node.can_reduce)
                store[(t.dst, t.chunk)] = tuple(sorted(set(old + value))) if merge else value
        for t in sorted(sends.pop(epoch, []), key=_order):
            arrivals[t.arrive_epoch].append((t, _sent(schedule, t, pos, transient, held, queued)))
    out.sort(key=lambda d: (d.arrive, d.chunk, d.dst, d.sources))
    return out


def _order(t: Transfer) -> tuple[int, str, str]:
    return (t.chunk, t.src, t.dst)


def _sent(schedule: Schedule, t: Transfer, pos: dict[str, int],
          transient: dict[tuple[str, int], Value], held: dict[tuple[str, int], Value],
          queued: dict[tuple[str, int], list[Value]]) -> Value:
    """The value transfer ``t`` carries out of its sender."""
    if t.src in pos:
        return (Source(pos[t.src], t.start_epoch),)
    key, node = (t.src, t.chunk), schedule.topology.node(t.src)
    if node.has_buffer and not node.can_reduce:
        units = queued.get(key)
        if units:
            return units[0] if node.can_copy and t.op == "copy" else units.pop(0)
    else:
        value = transient.get(key, held.get(key))
        if value is not None:
            return value
    raise TecclError(f"switch {t.src} sends chunk {t.chunk} in epoch {t.start_epoch} "
                     "without holding it")
