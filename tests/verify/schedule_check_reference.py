"""The schedule checker as it was before its array passes, kept as the oracle its
equality test compares the checker with (same violations, in the same order)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from te_ccl.deadline import check, checked
from te_ccl.nogc import paused_gc
from te_ccl.schedule import Schedule, Transfer

__all__ = ["check_schedule"]

_EPS = 1e-9
CHECKING = "checking the schedule"  # the stage a compile's deadline names


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str


def _ceil(x: float) -> int:
    return math.ceil(x - _EPS * max(1.0, abs(x)))


def _floor(x: float) -> int:
    return math.floor(x + _EPS * max(1.0, abs(x)))


def check_schedule(schedule: Schedule) -> list[Violation]:
    """All violations of ``schedule`` (empty when it is correct)."""
    out: list[Violation] = []
    with paused_gc():
        linked = _check_static(schedule, out)
        _check_capacity(schedule, linked, out)
        _replay(schedule, _check_arrivals(schedule, linked, out), out)
    return out


def _check_static(s: Schedule, out: list[Violation]) -> list[Transfer]:
    """Links, chunk ids and ops; returns the transfers on real links with a valid chunk and op."""
    chunks = {c.id: c for c in s.collective.chunks()}
    topo = s.topology
    valid = []
    for t in checked(s.transfers, CHECKING):
        if not topo.has_link(t.src, t.dst):
            out.append(Violation("link", f"{t}: no link {t.src} -> {t.dst}"))
            continue
        chunk = chunks.get(t.chunk)
        if chunk is None or t.op not in ("copy", "reduce") or (t.op == "reduce" and not chunk.reduce):
            out.append(Violation("chunk", f"{t}: unknown chunk or op {t.op!r} not allowed for it"))
            continue
        if t.start_epoch < 0:
            out.append(Violation("timing", f"{t}: starts before epoch 0"))
            continue
        valid.append(t)
    return valid


def _check_arrivals(s: Schedule, transfers: list[Transfer], out: list[Violation]) -> list[Transfer]:
    """The i-th chunk a link starts in an epoch leaves after i·C/b and arrives α later."""
    batches: dict[tuple[str, str, int], list[Transfer]] = defaultdict(list)
    for t in checked(transfers, CHECKING):
        batches[(t.src, t.dst, t.start_epoch)].append(t)
    valid = []
    chunk_bytes, epoch_s, links = s.chunk_bytes, s.epoch_s, {}
    for (src, dst, _), batch in checked(batches.items(), CHECKING):
        link = links.get((src, dst)) or links.setdefault((src, dst), s.topology.link(src, dst))
        if len(batch) > 1:
            batch.sort(key=lambda t: t.arrive_epoch)
        for i, t in enumerate(batch, start=1):
            need = _ceil((i * chunk_bytes / link.bandwidth_Bps + link.latency_s) / epoch_s)
            if t.arrive_epoch < t.start_epoch + max(1, need):
                out.append(Violation("timing", f"{t}: as chunk {i} started on {src}->{dst} in "
                                               f"its epoch it needs {max(1, need)} epoch(s) from "
                                               f"start to arrival"))
                continue
            valid.append(t)
    return valid


def _check_capacity(s: Schedule, transfers: list[Transfer], out: list[Violation]) -> None:
    per_link: dict[tuple[str, str], list[Transfer]] = defaultdict(list)
    for t in checked(transfers, CHECKING):
        per_link[(t.src, t.dst)].append(t)
    for key, ts in checked(per_link.items(), CHECKING, every=1):
        link = s.topology.link(*key)
        per_epoch = link.bandwidth_Bps * s.epoch_s / s.chunk_bytes
        if per_epoch >= 1 - _EPS:
            cap = _floor(per_epoch)
            for epoch, n in Counter(t.start_epoch for t in ts).items():
                if n > cap:
                    out.append(Violation("capacity", f"link {key[0]}->{key[1]} starts {n} chunks "
                                                     f"in epoch {epoch}, capacity {cap}"))
        else:
            busy = _ceil(1 / per_epoch)
            ordered = sorted(ts, key=lambda t: t.start_epoch)
            for a, b in zip(ordered, ordered[1:], strict=False):
                if b.start_epoch < a.start_epoch + busy:
                    out.append(Violation("capacity", f"link {key[0]}->{key[1]} busy {busy} epochs "
                                                     f"per chunk: chunks {a.chunk} (epoch "
                                                     f"{a.start_epoch}) and {b.chunk} (epoch "
                                                     f"{b.start_epoch}) overlap"))


def _replay(s: Schedule, transfers: list[Transfer], out: list[Violation]) -> None:
    """Epoch by epoch: arrivals of the epoch first, then the sends that start in it."""
    topo, coll = s.topology, s.collective
    chunks = {c.id: c for c in coll.chunks()}
    held: dict[tuple[str, int], int] = {}
    for c in chunks.values():
        whole = 0 if c.reduce else _mask(c.sources)
        for r in c.sources:
            held[(topo.gpu(r), c.id)] = 1 << r if c.reduce else whole
    queued: dict[tuple[str, int], list[int]] = defaultdict(list)
    arrivals: dict[int, list[tuple[Transfer, int]]] = defaultdict(list)
    sends: dict[int, list[Transfer]] = defaultdict(list)
    for t in transfers:
        sends[t.start_epoch].append(t)
    switch_in: dict[int, Counter] = defaultdict(Counter)
    switch_out: dict[int, Counter] = defaultdict(Counter)
    switches = set(topo.switches)
    queueing = frozenset(n.name for n in topo.nodes if _queues(n))  # looked up per transfer
    keeping = frozenset(n.name for n in topo.nodes if n.is_gpu or n.has_buffer)
    for t in transfers:
        if t.dst in switches:
            switch_in[t.arrive_epoch][(t.dst, t.chunk)] += 1
        if t.src in switches:
            switch_out[t.start_epoch][(t.src, t.chunk)] += 1
    epochs = sorted({t.start_epoch for t in transfers} | {t.arrive_epoch for t in transfers})
    for epoch in epochs:
        check(CHECKING)
        transient = _arrive(s, arrivals.pop(epoch, []), held, queued, queueing, keeping, out)
        for t in sorted(sends.pop(epoch, []), key=lambda t: (t.chunk, t.src, t.dst)):
            value = _take(s, t, transient, held, queued, queueing)
            if value is None:
                out.append(Violation("hold", f"{t}: {t.src} does not hold chunk {t.chunk} "
                                             f"in epoch {epoch}"))
                continue
            arrivals[t.arrive_epoch].append((t, value))
        _check_switch_fanout(s, epoch, switch_in.pop(epoch, Counter()),
                             switch_out.pop(epoch, Counter()), out)
    _check_buffers(s, held, chunks, out)
    _check_demands(s, held, chunks, out)


def _mask(ranks) -> int:
    """The bitmask of a set of ranks."""
    mask = 0
    for r in ranks:
        mask |= 1 << r
    return mask


def _ranks(mask: int) -> list[int]:
    """The ranks of a bitmask, in order."""
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def _queues(node) -> bool:
    """A buffered switch that cannot reduce keeps each arriving unit apart (flow conservation)."""
    return not node.is_gpu and node.has_buffer and not node.can_reduce



def _take(s: Schedule, t: Transfer, transient, held, queued, queueing: frozenset[str]
          ) -> int | None:
    """The value ``t`` sends: a queued switch (in ``queueing``) forwards its oldest unit
    (kept only when copied)."""
    key = (t.src, t.chunk)
    if t.src not in queueing:
        return transient.get(key, held.get(key))
    node = s.topology.node(t.src)
    units = queued.get(key)
    if not units:
        return None
    # a partial is forwarded once (copying it would count it twice); whole chunks may be copied
    return units[0] if node.can_copy and t.op == "copy" else units.pop(0)


def _arrive(s: Schedule, batch: list[tuple[Transfer, int]], held: dict[tuple[str, int], int],
            queued: dict[tuple[str, int], list[int]], queueing: frozenset[str],
            keeping: frozenset[str], out: list[Violation]) -> dict[tuple[str, int], int]:
    """Apply one epoch's arrivals; returns what bufferless switches hold in this epoch only
    (``queueing``: the switches that keep units apart; ``keeping``: GPUs and buffered
    switches, which hold what arrives)."""
    transient: dict[tuple[str, int], int] = {}
    topo = s.topology
    for t, value in sorted(batch, key=lambda x: (x[0].chunk, x[0].src, x[0].dst)):
        key = (t.dst, t.chunk)
        if t.dst in queueing:
            queued[key].append(value)
            continue
        keeps = t.dst in keeping
        store = held if keeps else transient
        old = store.get(key)
        if keeps or old is None or old == value:
            merge = t.op == "reduce"
        elif topo.node(t.dst).can_reduce:
            merge = True
        else:
            out.append(Violation("switch", f"{t}: switch {t.dst} cannot reduce, but two different "
                                           f"partials of chunk {t.chunk} arrive in one epoch"))
            continue
        if merge and old is not None:
            if old & value:
                out.append(Violation("double", f"{t}: ranks {_ranks(old & value)} would be added "
                                               f"twice into chunk {t.chunk} at {t.dst}"))
                continue
            store[key] = old | value
        else:
            store[key] = value
    return transient


def _check_switch_fanout(s: Schedule, epoch: int, ins: Counter, outs: Counter,
                         out: list[Violation]) -> None:
    """A switch that cannot copy sends each arriving chunk on at most as many links as it came in."""
    for (sw, chunk), n in outs.items():
        node = s.topology.node(sw)
        if not node.can_copy and not node.has_buffer and n > ins[(sw, chunk)]:
            out.append(Violation("switch", f"switch {sw} cannot copy but sends chunk {chunk} "
                                           f"{n} times in epoch {epoch} after {ins[(sw, chunk)]} "
                                           f"arrival(s)"))


def _check_buffers(s, held, chunks, out) -> None:
    """Chunks a GPU holds that are neither its own nor meant for it count against its buffer."""
    topo = s.topology
    relayed: Counter[str] = Counter()
    for (node, cid) in held:
        n = topo.node(node)
        if n.is_gpu and n.buffer_bytes is not None:
            c, r = chunks[cid], topo.rank(node)
            if r not in c.sources and r not in c.destinations:
                relayed[node] += 1
    for node, n in relayed.items():
        limit = topo.node(node).buffer_bytes
        if n * s.chunk_bytes > limit:
            out.append(Violation("buffer", f"{node} relays {n} chunks ({n * s.chunk_bytes} bytes) "
                                           f"over its buffer limit of {limit} bytes"))


def _check_demands(s, held, chunks, out) -> None:
    topo = s.topology
    for c in chunks.values():
        want = _mask(c.sources)
        for r in c.destinations:
            name = topo.gpu(r)
            have = held.get((name, c.id))
            if have != want:
                what = "nothing" if have is None else f"data of ranks {_ranks(have)}"
                out.append(Violation("demand", f"rank {r} ({name}) lacks chunk {c.id} at the end "
                                               f"(holds {what})"))
