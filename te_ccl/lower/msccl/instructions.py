"""Pass 2: per-GPU instructions from the edges, and which of them can be fused.

Every GPU replays its events in time order ``order`` (the edges' times: the schedule's
replay, :mod:`~te_ccl.lower.msccl.retime`, or its epochs): arrivals at one time before
the sends that start then (the ``te_ccl.schedule`` semantics), but deliveries of chunks
the GPU does not send on after them (:func:`recv_order`). A received copy lands in the
chunk's *work* slot: its output slot when the GPU needs the chunk, else scratch (also
scratch when an in-place output slot still holds data to send, then copied at the end).
A received partial (``op="reduce"``) is added to the GPU's current value (``rrc``).
Out-of-place, a rank whose own piece belongs in its output copies ``i → o`` (``cpy``,
one step per run of consecutive slots).

Fusion: a receive whose value is next read by a send becomes ``rcs`` (copy) or
``rrcs``/``rrs`` (reduction; ``rrs`` when nothing reads the sum afterwards). A fused step
is done only once its send has left, so a fusion that would hold up another step of the
GPU is marked ``delays``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from operator import attrgetter, itemgetter
from typing import NamedTuple

from te_ccl.collective.model import Chunk
from te_ccl.deadline import checked
from te_ccl.errors import TecclError
from te_ccl.lower.msccl.buffers import Layout
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.ir import LOWERING, Op, Slot
from te_ccl.runtime_limits import MSCCL

__all__ = ["Instr", "Fusion", "recv_order", "send_order", "packed_order", "packed_ends",
           "first_receipts", "forwards", "build_instructions", "fusion_candidates",
           "apply_fusions"]

_END = 1 << 62  # order time of the final copies, after every transfer
_ARRIVAL, _SEND, _DELIVERY = 0, 1, 2  # an order's kind, after its time: at one time
_KINDS = 3  #                          arrivals, then sends, then deliveries
_ORDER = attrgetter("order")


class Instr(NamedTuple):
    """One step before thread-block assignment; ``order`` is unique per GPU.

    Named tuples (here and for :class:`Fusion`): millions of them at 1024 GPUs.
    """

    gpu: int
    op: Op
    chunk: int
    order: tuple
    src: Slot | None = None
    dst: Slot | None = None
    recv: Edge | None = None
    send: Edge | None = None
    reads: tuple[Slot, ...] = ()
    writes: tuple[Slot, ...] = ()
    cnt: int = 1  # chunks from ``src``/``dst`` on (a ``cpy`` of consecutive slots)


class Fusion(NamedTuple):
    """Receive ``recv`` and the send ``send`` that forwards its value, fused into ``op``;
    ``delays``: another step of the GPU would then start later than the schedule says
    (:func:`_waits_for_send`), so the fusion is made only where the runtime's limits
    need it."""

    recv: Instr
    send: Instr
    op: Op
    delays: bool = False


def recv_order(e: Edge) -> tuple:
    """Arrivals of an epoch come before its sends, but deliveries (``Edge.final``: not
    sent on) after them: no send waits for those, and one sharing their thread block
    would (the schedule's replay starts sends before the epoch's arrivals are in). The
    edge itself breaks ties (its ``seq`` is unique, and sharing it saves a key tuple
    per step)."""
    return (e.arrive, _DELIVERY if e.final else _ARRIVAL, e)


def send_order(e: Edge) -> tuple:
    return (e.start, _SEND, e)


def first_receipts(edges: tuple[Edge, ...]) -> dict[tuple[int, int], Edge]:
    """The edge by which each GPU first receives each chunk, keyed by (GPU, chunk).

    A fused step whose receive is not that edge writes a slot that another receive wrote
    (a partial sum, or an AllReduce's all-gather over its reduce-scatter);
    :func:`forwards` says which sends pass a received value on."""
    first: dict[tuple[int, int], Edge] = {}
    for e in checked(edges, LOWERING):
        for k in e.chunks if e.more else (e.chunk,):
            key = (e.dst, k)
            if key not in first or e.arrive < first[key].arrive:
                first[key] = e
    return first


def forwards(e: Edge, first: dict[tuple[int, int], Edge]) -> bool:
    """Does the send ``e`` pass on a value its GPU received by then (:func:`first_receipts`)?
    An AllReduce's reduce-scatter sends of a GPU's own data come before its all-gather
    receives of the same chunk, and wait for no value."""
    got = first.get((e.src, e.chunk))
    return got is not None and got.arrive <= e.start


def packed_order(order: tuple, index: int, n: int) -> int:
    """An edge's order ``(time, kind, edge)`` as an int that compares as the tuple does,
    given the edge's ``index`` among the ``n`` sorted edges: sorting and comparing ints
    runs in C, tuples that tie on time compare their edges field by field."""
    time, kind, _ = order
    return (time * _KINDS + kind) * n + index


def packed_ends(e: Edge, index: int, n: int) -> tuple[int, int]:
    """:func:`packed_order` of :func:`send_order` and :func:`recv_order` of ``e`` (the
    edge's ``index`` among the ``n`` sorted edges), without building the tuples: the
    lowering packs every edge's twice over."""
    return ((e.start * _KINDS + _SEND) * n + index,
            (e.arrive * _KINDS + (_DELIVERY if e.final else _ARRIVAL)) * n + index)


_Event = tuple[int, tuple, Edge]  # (packed order, order, edge)


def build_instructions(edges: tuple[Edge, ...], layout: Layout,
                       gpus: Iterable[int] | None = None) -> dict[int, list[Instr]]:
    """Unfused instructions of every GPU position (or of ``gpus``), sorted by ``order``."""
    wanted = list(range(layout.collective.nranks) if gpus is None else gpus)
    events: dict[int, list[_Event]] = {g: [] for g in wanted}
    n = len(edges)
    for i, e in checked(enumerate(sorted(edges)), LOWERING):
        snd, rcv = packed_ends(e, i, n)
        if (at := events.get(e.src)) is not None:
            at.append((snd, send_order(e), e))
        if (at := events.get(e.dst)) is not None:
            at.append((rcv, recv_order(e), e))
    chunks = layout.chunks
    by_key = itemgetter(0)
    return {g: _gpu_instructions(g, sorted(events.pop(g), key=by_key), layout, chunks)
            for g in checked(wanted, LOWERING, every=1)}


def _gpu_instructions(g: int, events: list[_Event], layout: Layout,
                      chunks: tuple[Chunk, ...]) -> list[Instr]:
    rank = layout.collective.ranks[g]
    home, outs = layout.homes(g), layout.outs(g)
    cur = dict(home)
    # out of place, outputs (o) and the slots read by sends (i) never overlap
    staged = _staged_chunks(events, home, outs) if layout.overwrites_inputs else set()
    out: list[Instr] = []
    for _, order, e in events:
        if e.more:  # several chunks in one step (:mod:`~te_ccl.lower.msccl.merge`)
            out.append(_several(g, order, e, cur, outs, layout))
            continue
        k = e.chunk
        if order[1] == _SEND:
            if k not in cur:
                raise TecclError(f"rank {rank} sends chunk {k} in epoch {e.start} before it "
                                 "holds it")
            held = cur[k]  # positional (src, dst, recv, send, reads): millions of them
            out.append(Instr(g, Op.SEND, k, order, held, None, None, e, (held,)))
            continue
        target = outs.get(k)
        work = layout.scratch(g, k) if target is None or k in staged else target
        if e.op == "reduce" and k in cur:
            held = cur[k]
            out.append(Instr(g, Op.RECV_REDUCE_COPY, k, order, held, work, e, None, (held,),
                             (work,)))
        else:
            out.append(Instr(g, Op.RECV, k, order, None, work, e, None, (), (work,)))
        cur[k] = work
    kept: list[tuple[int, Slot, Slot]] = []  # chunks the rank holds from the start
    last: list[Instr] = []  # copies into the output after every transfer, by chunk
    for c in chunks:
        target = outs.get(c.id)
        if target is None or cur.get(c.id) == target:
            continue
        if c.id not in cur:
            raise TecclError(f"the schedule never delivers chunk {c.id} to rank {rank}")
        if cur[c.id] == home.get(c.id):
            kept.append((c.id, cur[c.id], target))
            continue
        last.append(Instr(g, Op.COPY, c.id, (_END, 0, (c.id,)), src=cur[c.id], dst=target,
                          reads=(cur[c.id],), writes=(target,)))
    # in order without sorting them all: the first copies (time -1), the transfers (the
    # events come sorted by packed order, which compares as the order does), the last
    return sorted(_first_copies(g, kept), key=_ORDER) + out + last


def _several(g: int, order: tuple, e: Edge, cur: dict[int, Slot], outs: dict[int, Slot],
             layout: Layout) -> Instr:
    """The one step of an edge that carries several chunks, on runs of consecutive slots
    (the merge pass chose the edge so; in place, where a chunk may be staged, it merges
    nothing), ``cur`` updated with the slots received into."""
    ks = e.chunks
    if order[1] == _SEND:
        if any(k not in cur for k in ks):
            raise TecclError(f"rank {layout.collective.ranks[g]} sends chunks {ks} in epoch "
                             f"{e.start} before it holds them")
        held = _run(tuple(cur[k] for k in ks))
        return Instr(g, Op.SEND, ks[0], order, held[0], None, None, e, held, (), len(ks))
    works = _run(tuple(outs.get(k) or layout.scratch(g, k) for k in ks))
    if e.op == "reduce" and ks[0] in cur:
        held = _run(tuple(cur[k] for k in ks))
        step = Instr(g, Op.RECV_REDUCE_COPY, ks[0], order, held[0], works[0], e, None, held,
                     works, len(ks))
    else:
        step = Instr(g, Op.RECV, ks[0], order, None, works[0], e, None, (), works, len(ks))
    cur.update(zip(ks, works, strict=True))
    return step


def _run(slots: tuple[Slot, ...]) -> tuple[Slot, ...]:
    """``slots``, checked to be consecutive in one buffer (what a step of ``cnt > 1``
    reads or writes)."""
    if not all(map(_follows, slots, slots[1:])):
        raise TecclError(f"internal: a step of several chunks on slots {slots}, which are "
                         "not consecutive")
    return slots


def _first_copies(g: int, kept: list[tuple[int, Slot, Slot]]) -> list[Instr]:
    """The copies of chunks a rank holds from the start into its output (its own piece,
    out of place), before anything else: one ``cpy`` per run of slots that are
    consecutive in both buffers (its ``cnt`` below the runtime's ``MSCCL_MAX_COUNT``),
    where a step per chunk would spend the reader's elements."""
    runs: list[list[tuple[int, Slot, Slot]]] = []
    for item in sorted(kept, key=lambda x: (x[1], x[2])):
        run = runs[-1] if runs else None
        if run and len(run) < MSCCL.max_count - 1 and _follows(run[-1][1], item[1]) \
                and _follows(run[-1][2], item[2]):
            run.append(item)
        else:
            runs.append([item])
    return [Instr(g, Op.COPY, run[0][0], (-1, 0, (run[0][0],)), src=run[0][1], dst=run[0][2],
                  reads=tuple(x[1] for x in run), writes=tuple(x[2] for x in run), cnt=len(run))
            for run in runs]


def _follows(a: Slot, b: Slot) -> bool:
    return a.buf is b.buf and b.index == a.index + 1


def _staged_chunks(events: list[_Event], home: dict[int, Slot], outs: dict[int, Slot]
                   ) -> set[int]:
    """Chunks whose output slot holds another chunk still to be sent when they arrive
    (``home``, ``outs``: the GPU's :meth:`~Layout.homes` and :meth:`~Layout.outs`).

    Only in-place collectives whose input and output share slots (alltoall) have them.
    """
    last_read: dict[Slot, tuple] = {}
    first_write: dict[int, tuple] = {}
    for _, order, e in events:
        if order[1] == _SEND:
            h = home.get(e.chunk)
            if h is not None:
                last_read[h] = max(last_read.get(h, order), order)
        else:
            first_write.setdefault(e.chunk, order)
    staged = set()
    for k, order in first_write.items():
        target = outs.get(k)
        if target is not None and target != home.get(k) \
                and target in last_read and order < last_read[target]:
            staged.add(k)
    return staged


def fusion_candidates(instrs: list[Instr], layout: Layout) -> list[Fusion]:
    """Receive/send pairs of one GPU that can run as one step (same value, nothing between)."""
    touching: dict[Slot, list[Instr]] = defaultdict(list)
    received = []  # (receive, the slot it writes, its index among the slot's instructions)
    for ins in instrs:
        reads, writes = ins.reads, ins.writes
        if ins.op in _RECEIVES and len(writes) == 1:
            slot = writes[0]
            seq = touching[slot]
            received.append((ins, slot, len(seq)))
            seq.append(ins)
            for other in reads:
                if other != slot:
                    touching[other].append(ins)
            continue
        both = reads + writes
        for slot in (both if len(both) == 1 else dict.fromkeys(both)):
            touching[slot].append(ins)
    chunks = layout.chunks
    found = []
    for r, slot, i in received:
        seq = touching[slot]
        if i + 1 == len(seq):
            continue
        s = seq[i + 1]
        if s.op is not Op.SEND or s.reads != (slot,):
            continue
        if r.src is not None and r.src != slot and _touched_between(touching[r.src], r, s):
            continue
        delays = _waits_for_send(touching, r, s, seq[i + 2] if i + 2 < len(seq) else None)
        if r.op is Op.RECV:
            found.append(Fusion(r, s, Op.RECV_COPY_SEND, delays))
            continue
        later = _read_later(seq[i + 2:], slot, slot == layout.out(r.gpu, chunks[r.chunk]))
        op = Op.RECV_REDUCE_COPY_SEND if later else Op.RECV_REDUCE_SEND
        found.append(Fusion(r, s, op, delays))
    return sorted(found, key=_SEND_ORDER)


_RECEIVES = (Op.RECV, Op.RECV_REDUCE_COPY)
_SEND_ORDER = attrgetter("send.order")


def _waits_for_send(touching: dict[Slot, list[Instr]], r: Instr, s: Instr,
                    after: Instr | None) -> bool:
    """Would fusing delay another step? A fused step is done (and flags the steps that
    wait for it) only once its send has left, where the receive alone would be done on
    arrival: a step touching its slots before the send arrives would start late.
    ``after``: the step after ``s`` on the slot ``r`` writes (``s`` reads it next)."""
    arrive = s.send.arrive
    if after is not None and after.order[0] < arrive:
        return True
    for slot in r.reads:  # the slot written is the one ``after`` is on
        if slot in r.writes:
            continue
        seq = touching[slot]
        i = bisect_right(seq, s.order, key=_ORDER)
        if i < len(seq) and seq[i].order[0] < arrive:
            return True
    return False


def _touched_between(seq: list[Instr], a: Instr, b: Instr) -> bool:
    """Does an instruction of ``seq`` (sorted by order) lie strictly between ``a`` and ``b``?"""
    i = bisect_right(seq, a.order, key=_ORDER)
    return i < len(seq) and seq[i].order < b.order


def _read_later(rest: list[Instr], slot: Slot, is_output: bool) -> bool:
    """Is the slot's current value read again (or left as the GPU's result)?"""
    for x in rest:
        if slot in x.reads:
            return True
        if slot in x.writes:
            return False  # overwritten before any read
    return is_output


def apply_fusions(instrs: list[Instr], fusions: list[Fusion]) -> list[Instr]:
    """Replace each fused pair of ``instrs`` (sorted by ``order``) by one instruction at
    the send's place, which has the send's ``order``: the result stays sorted."""
    if not fusions:
        return instrs
    gone = {id(f.recv) for f in fusions}  # by identity: hashing an order hashes its edge
    fused = {id(f.send): _fuse(f) for f in fusions}
    return [fused.get(id(i), i) for i in instrs if id(i) not in gone]


_new = tuple.__new__  # an Instr without the named tuple's constructor (a million fusions)
_COPY_SEND, _REDUCE_SEND = Op.RECV_COPY_SEND, Op.RECV_REDUCE_SEND


def _fuse(f: Fusion) -> Instr:
    """The receive's value, moved and sent as the send sends it, one chunk (fields
    unpacked: faster than by name)."""
    r, s, op, _ = f
    gpu, _, chunk, _, src, dst, recv, _, reads, writes, _ = r
    _, _, _, order, _, _, _, send, _, _, _ = s
    if op is _COPY_SEND:  # received into its slot, sent from there
        src, reads = dst, ()
    elif op is _REDUCE_SEND:  # added into the local slot, sent from there
        dst, writes = src, ()
    return _new(Instr, (gpu, op, chunk, order, src, dst, recv, send, reads, writes, 1))
