"""Independent checker of the Schedule IR: does a schedule do what its collective asks?

It shares no arithmetic with the solver: from the topology, the chunk size and the epoch
duration alone it recomputes what every link can carry (the rules of the
``te_ccl.schedule`` docstring) and replays the transfers epoch by epoch, tracking for every
(node, chunk) the set of ranks whose data it holds (a partial sum for reductions), as a
bitmask (bit ``r`` for rank ``r``): at 1024 GPUs a set of ranks is an int of 128 bytes.

Rules (the ``rule`` field of each :class:`Violation`):

``link``        every transfer uses an existing link;
``chunk``       the chunk id and op exist (``reduce`` only for reduced chunks);
``timing``      the i-th chunk a link starts in one epoch (by arrival) has
                ``arrive_epoch ≥ start_epoch + ceil((i·chunk_bytes/b + α)/τ)``;
``capacity``    ≤ ``floor(b·τ/chunk_bytes)`` starts per epoch, or one chunk at a time
                (each busy ``ceil(chunk_bytes/(b·τ))`` epochs) on slower links;
``hold``        the sender holds the chunk when it sends (a switch without buffer only
                in the epoch it arrives);
``switch``      a switch copies only if it can copy, merges partials only if it can reduce;
``double``      a reduction never adds the same rank's data twice;
``buffer``      relayed chunks at a GPU fit in its buffer limit;
``demand``      every destination ends with the whole chunk (every source's data).

The transfers are read once into arrays: the link, chunk, timing and capacity rules are
array passes, and the replay is one loop over the sends and arrivals in the order the
rules above take them (at 1024 GPUs, two million transfers in a few seconds).

Within a compile's deadline (:mod:`te_ccl.deadline`) it stops once that passes: a
compile that holds a file already writes that one rather than wait for the check.

>>> from te_ccl.collective import Collective, CollectiveKind
>>> from te_ccl.schedule import Schedule, Transfer
>>> from te_ccl.topology import Link, Node, Topology
>>> topo = Topology.build("pair", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
>>> coll = Collective(CollectiveKind.ALLGATHER, 2000, (0, 1))
>>> check_schedule(Schedule(topo, coll, 1e-6, (Transfer(0, "a", "b", 0, 1),)))
[Violation(rule='demand', message='rank 0 (a) lacks chunk 1 at the end (holds nothing)')]
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from te_ccl.collective.model import Chunk
from te_ccl.deadline import check
from te_ccl.nogc import paused_gc
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Node

__all__ = ["Violation", "check_schedule"]

_EPS = 1e-9
CHECKING = "checking the schedule"  # the stage a compile's deadline names
_EVERY = 1 << 16  # replay events between two looks at the deadline
_OPS = {"copy": 0, "reduce": 1}
_FIELDS = attrgetter("chunk", "src", "dst", "start_epoch", "arrive_epoch", "op")


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str


def _floor(x: float) -> int:
    return math.floor(x + _EPS * max(1.0, abs(x)))


def _ceil(x: np.ndarray) -> np.ndarray:
    return np.ceil(x - _EPS * np.maximum(1.0, np.abs(x))).astype(np.int64)


@dataclass(frozen=True)
class _Table:
    """The schedule's transfers as columns, a row per transfer in its order: node
    indices (into ``names``) and chunk positions (into ``chunks``), −1 where unknown;
    op codes (:data:`_OPS`, −1: neither); the link of each known pair (into ``links``)."""

    names: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    src: np.ndarray
    dst: np.ndarray
    chunk: np.ndarray
    start: np.ndarray
    arrive: np.ndarray
    op: np.ndarray
    has_link: np.ndarray
    link: np.ndarray
    bandwidth: np.ndarray  # by link
    latency: np.ndarray


def _table(s: Schedule) -> _Table:
    topo = s.topology
    names = tuple(n.name for n in topo.nodes)
    chunks = s.collective.chunks()
    ids = {name: i for i, name in enumerate(names)}
    at = {c.id: i for i, c in enumerate(chunks)}
    columns = tuple(zip(*map(_FIELDS, s.transfers), strict=True)) or ((),) * 6
    check(CHECKING)
    chunk, src, dst, start, arrive, op = columns

    def index(of: dict, xs: tuple) -> np.ndarray:
        return np.array([of.get(x, -1) for x in xs], dtype=np.int64)

    src_i, dst_i, chunk_i, op_i = index(ids, src), index(ids, dst), index(at, chunk), index(_OPS, op)
    n = len(names)
    pairs = sorted({ids[x.src] * n + ids[x.dst] for x in topo.links})
    links = [topo.link(names[p // n], names[p % n]) for p in pairs]
    codes = np.array(pairs + [-1], dtype=np.int64)  # −1: the row of no link
    code = np.where((src_i >= 0) & (dst_i >= 0), src_i * n + dst_i, -2)
    link = np.minimum(np.searchsorted(codes[:-1], code), len(pairs))
    check(CHECKING)
    return _Table(names, chunks, src_i, dst_i, chunk_i, np.array(start, dtype=np.int64),
                  np.array(arrive, dtype=np.int64), op_i, codes[link] == code, link,
                  np.array([x.bandwidth_Bps for x in links] + [1.0]),
                  np.array([x.latency_s for x in links] + [0.0]))


def check_schedule(schedule: Schedule) -> list[Violation]:
    """All violations of ``schedule`` (empty when it is correct)."""
    out: list[Violation] = []
    with paused_gc():
        t = _table(schedule)
        linked = _check_static(schedule, t, out)
        groups = _Groups(t, linked)
        _check_capacity(schedule, t, linked, groups, out)
        _replay(schedule, t, _check_arrivals(schedule, t, linked, groups, out), out)
    return out


def _check_static(s: Schedule, t: _Table, out: list[Violation]) -> np.ndarray:
    """Links, chunk ids and ops; returns the rows on real links with a valid chunk and op."""
    reduces = np.array([c.reduce for c in t.chunks] + [False])  # [-1]: an unknown chunk
    chunk_ok = (t.chunk >= 0) & (t.op >= 0) & ~((t.op == 1) & ~reduces[t.chunk])
    bad = ~t.has_link | ~chunk_ok | (t.start < 0)
    for i in np.flatnonzero(bad).tolist():
        x = s.transfers[i]
        if not t.has_link[i]:
            out.append(Violation("link", f"{x}: no link {x.src} -> {x.dst}"))
        elif not chunk_ok[i]:
            out.append(Violation("chunk", f"{x}: unknown chunk or op {x.op!r} not allowed for it"))
        else:
            out.append(Violation("timing", f"{x}: starts before epoch 0"))
    return np.flatnonzero(~bad)


class _Groups:
    """The rows ``linked`` by link and start epoch, each group in order of arrival (ties
    in the schedule's order): ``order`` (positions in ``linked``), the group of each,
    where each group begins in ``order``, and its first row in the schedule; the first
    row of each link."""

    def __init__(self, t: _Table, linked: np.ndarray) -> None:
        link, start = t.link[linked], t.start[linked]
        self.order = np.lexsort((t.arrive[linked], start, link))
        lo, so = link[self.order], start[self.order]
        new = np.ones(len(lo), dtype=bool)
        new[1:] = (lo[1:] != lo[:-1]) | (so[1:] != so[:-1])
        self.begins = np.flatnonzero(new)
        self.group = np.cumsum(new) - 1
        self.first = np.minimum.reduceat(linked[self.order], self.begins) if len(lo) else \
            np.zeros(0, dtype=np.int64)
        self.link_first = np.full(len(t.bandwidth), -1, dtype=np.int64)
        links, at = np.unique(link, return_index=True)
        self.link_first[links] = linked[at]
        check(CHECKING)


def _check_arrivals(s: Schedule, t: _Table, linked: np.ndarray, g: _Groups,
                    out: list[Violation]) -> np.ndarray:
    """The i-th chunk a link starts in an epoch leaves after i·C/b and arrives α later.
    Returns the rows that keep to it, group by group (in order of each group's first row)."""
    rows = linked[g.order]
    link = t.link[rows]
    i = np.arange(len(rows)) - g.begins[g.group] + 1 if len(rows) else np.zeros(0, np.int64)
    need = np.maximum(1, _ceil((i * s.chunk_bytes / t.bandwidth[link] + t.latency[link])
                               / s.epoch_s))
    late = t.arrive[rows] < t.start[rows] + need
    by_group = np.argsort(g.first[g.group], kind="stable")
    for j in by_group[late[by_group]].tolist():
        x = s.transfers[rows[j]]
        out.append(Violation("timing", f"{x}: as chunk {i[j]} started on {x.src}->{x.dst} in "
                                       f"its epoch it needs {need[j]} epoch(s) from start to "
                                       f"arrival"))
    check(CHECKING)
    return rows[by_group[~late[by_group]]]


def _check_capacity(s: Schedule, t: _Table, linked: np.ndarray, g: _Groups,
                    out: list[Violation]) -> None:
    per_epoch = t.bandwidth * s.epoch_s / s.chunk_bytes
    fast = per_epoch >= 1 - _EPS
    found: list[tuple[int, int, str]] = []  # (link's first row, order within it, message)
    if len(g.begins):
        rows = linked[g.order]
        count = np.diff(np.append(g.begins, len(rows)))
        link = t.link[rows[g.begins]]
        cap = np.array([_floor(x) if f else 0 for x, f in zip(per_epoch.tolist(), fast.tolist(),
                                                             strict=True)], dtype=np.int64)
        for k in np.flatnonzero(fast[link] & (count > cap[link])).tolist():
            x = s.transfers[rows[g.begins[k]]]
            found.append((g.link_first[link[k]], g.first[k],
                          f"link {x.src}->{x.dst} starts {count[k]} chunks in epoch "
                          f"{x.start_epoch}, capacity {cap[link[k]]}"))
    slow = linked[~fast[t.link[linked]]]
    if len(slow):
        rows = slow[np.lexsort((t.start[slow], t.link[slow]))]
        link, start = t.link[rows], t.start[rows]
        busy = {k: math.ceil((1 / x) - _EPS * max(1.0, abs(1 / x)))
                for k, x in enumerate(per_epoch.tolist()) if not fast[k]}
        for j in np.flatnonzero(link[1:] == link[:-1]).tolist():
            b = busy[link[j]]
            if start[j + 1] < start[j] + b:
                a, c = s.transfers[rows[j]], s.transfers[rows[j + 1]]
                found.append((g.link_first[link[j]], j,
                              f"link {a.src}->{a.dst} busy {b} epochs per chunk: chunks "
                              f"{a.chunk} (epoch {a.start_epoch}) and {c.chunk} (epoch "
                              f"{c.start_epoch}) overlap"))
    out.extend(Violation("capacity", m) for *_, m in sorted(found, key=lambda f: f[:2]))
    check(CHECKING)


class _Masks(dict[tuple[int, ...], int]):
    """The bitmask of a set of ranks (bit ``r`` for rank ``r``), made once per set."""

    def __missing__(self, ranks: tuple[int, ...]) -> int:
        mask = 0
        for r in ranks:
            mask |= 1 << r
        self[ranks] = mask
        return mask


def _ranks(mask: int) -> list[int]:
    """The ranks of a bitmask, in order."""
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def _events(t: _Table, rows: np.ndarray) -> tuple[list[int], list[int]]:
    """(epoch, event) of every send and arrival of ``rows`` in the order the replay takes
    them: an epoch's arrivals, then its sends, each by chunk id, sender and receiver
    name (ties: sends by arrival, arrivals by start, then the schedule's order). An event
    ``j < len(rows)`` is the send of ``rows[j]``, ``len(rows) + j`` its arrival."""
    m, n = len(rows), len(t.names)
    if not m:
        return [], []
    ids = np.array([c.id for c in t.chunks])
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    name_rank = np.empty(n, dtype=np.int64)
    name_rank[sorted(range(n), key=t.names.__getitem__)] = np.arange(n)
    start, arrive = t.start[rows], t.arrive[rows]
    pair = (id_rank[t.chunk[rows]] * n + name_rank[t.src[rows]]) * n + name_rank[t.dst[rows]]
    epoch = np.concatenate((start * 2 + 1, arrive * 2))
    order = _lexsort(np.concatenate((rows, rows)), np.concatenate((arrive, start)),
                     np.concatenate((pair, pair)), epoch)
    return (epoch[order] >> 1).tolist(), order.tolist()


def _lexsort(*keys: np.ndarray) -> np.ndarray:
    """``np.lexsort(keys)`` (last key primary) of non-negative keys, those whose product
    of ranges fits in 62 bits merged into one (fewer, faster passes)."""
    merged, span = [keys[-1]], int(keys[-1].max()) + 1
    for k in reversed(keys[:-1]):
        width = int(k.max()) + 1
        if span * width < 1 << 62:
            merged[-1] = merged[-1] * width + k
            span *= width
        else:
            merged.append(k)
            span = width
    return np.lexsort(merged[::-1])


def _replay(s: Schedule, t: _Table, rows: np.ndarray, out: list[Violation]) -> None:
    """Epoch by epoch: arrivals of the epoch first, then the sends that start in it. What
    a node holds of a chunk is keyed ``node · chunks + chunk`` (positions)."""
    topo, chunks, names, ts = s.topology, t.chunks, t.names, s.transfers
    nodes = [topo.node(x) for x in names]
    k, m = len(chunks), len(rows)
    ids = {x: i for i, x in enumerate(names)}
    gpu = {r: ids[x] for r, x in enumerate(topo.gpus)}
    masks = _Masks()
    held: dict[int, int] = {}
    for p, c in enumerate(chunks):
        whole = 0 if c.reduce else masks[c.sources]
        for r in c.sources:
            held[gpu[r] * k + p] = 1 << r if c.reduce else whole
    queueing = [_queues(x) for x in nodes]
    keeping = [x.is_gpu or x.has_buffer for x in nodes]
    src, dst = t.src[rows], t.dst[rows]
    send_key, recv_key = (src * k + t.chunk[rows]).tolist(), (dst * k + t.chunk[rows]).tolist()
    src, dst, reduce = src.tolist(), dst.tolist(), (t.op[rows] == 1).tolist()
    fanout = _fanout(t, rows, nodes)
    values: list[int | None] = [None] * m
    transient: dict[int, int] = {}
    queued: dict[int, list[int]] = defaultdict(list)
    epoch = -1
    for n, (e, x) in enumerate(zip(*_events(t, rows), strict=True)):
        if e != epoch:
            out.extend(fanout.pop(epoch, ()))
            epoch, transient = e, {}
        if not n % _EVERY:
            check(CHECKING)
        if x < m:  # a send
            key = send_key[x]
            if not queueing[src[x]]:
                value = transient.get(key, held.get(key)) if transient else held.get(key)
            elif units := queued.get(key):
                # a partial is forwarded once (copying it would count it twice); whole
                # chunks may be copied
                value = units[0] if nodes[src[x]].can_copy and not reduce[x] else units.pop(0)
            else:
                value = None
            if value is None:
                y = ts[rows[x]]
                out.append(Violation("hold", f"{y}: {y.src} does not hold chunk {y.chunk} "
                                             f"in epoch {e}"))
            values[x] = value
            continue
        x -= m  # an arrival
        value, key, to = values[x], recv_key[x], dst[x]
        if value is None:
            continue
        if queueing[to]:
            queued[key].append(value)
            continue
        keeps = keeping[to]
        store = held if keeps else transient
        old = store.get(key)
        if keeps or old is None or old == value:
            merge = reduce[x]
        elif nodes[to].can_reduce:
            merge = True
        else:
            y = ts[rows[x]]
            out.append(Violation("switch", f"{y}: switch {y.dst} cannot reduce, but two "
                                           f"different partials of chunk {y.chunk} arrive in "
                                           f"one epoch"))
            continue
        if merge and old is not None:
            if old & value:
                y = ts[rows[x]]
                out.append(Violation("double", f"{y}: ranks {_ranks(old & value)} would be "
                                               f"added twice into chunk {y.chunk} at {y.dst}"))
                continue
            store[key] = old | value
        else:
            store[key] = value
    out.extend(fanout.pop(epoch, ()))
    _check_buffers(s, t, held, out)
    _check_demands(s, t, held, gpu, masks, out)


def _queues(node) -> bool:
    """A buffered switch that cannot reduce keeps each arriving unit apart (flow conservation)."""
    return not node.is_gpu and node.has_buffer and not node.can_reduce


def _fanout(t: _Table, rows: np.ndarray, nodes: list[Node]) -> dict[int, list[Violation]]:
    """By epoch: a switch that cannot copy (nor buffer) sends each arriving chunk on at
    most as many links as it came in."""
    limited = np.array([not x.is_gpu and not x.can_copy and not x.has_buffer for x in nodes])
    out: dict[int, list[Violation]] = defaultdict(list)
    if not limited.any():
        return out
    chunk = t.chunk[rows]
    into = limited[t.dst[rows]]
    ins = Counter(zip(t.arrive[rows][into].tolist(), t.dst[rows][into].tolist(),
                      chunk[into].tolist(), strict=True))
    outs: dict[int, Counter] = defaultdict(Counter)
    sent = limited[t.src[rows]]
    for e, sw, c in zip(t.start[rows][sent].tolist(), t.src[rows][sent].tolist(),
                        chunk[sent].tolist(), strict=True):
        outs[e][(sw, c)] += 1
    for e, counts in outs.items():
        for (sw, c), n in counts.items():
            if n > ins[(e, sw, c)]:
                out[e].append(Violation("switch", f"switch {t.names[sw]} cannot copy but sends "
                                                  f"chunk {t.chunks[c].id} {n} times in epoch "
                                                  f"{e} after {ins[(e, sw, c)]} arrival(s)"))
    return out


def _check_buffers(s: Schedule, t: _Table, held: dict[int, int], out: list[Violation]) -> None:
    """Chunks a GPU holds that are neither its own nor meant for it count against its buffer."""
    topo, k = s.topology, len(t.chunks)
    limited = {i for i, x in enumerate(t.names)
               if topo.node(x).is_gpu and topo.node(x).buffer_bytes is not None}
    relayed: Counter[str] = Counter()
    for key in held if limited else ():
        node, p = divmod(key, k)
        if node in limited:
            c, r = t.chunks[p], topo.rank(t.names[node])
            if r not in c.sources and r not in c.destinations:
                relayed[t.names[node]] += 1
    for node, n in relayed.items():
        limit = topo.node(node).buffer_bytes
        if n * s.chunk_bytes > limit:
            out.append(Violation("buffer", f"{node} relays {n} chunks ({n * s.chunk_bytes} bytes) "
                                           f"over its buffer limit of {limit} bytes"))


def _check_demands(s: Schedule, t: _Table, held: dict[int, int], gpu: dict[int, int],
                   masks: _Masks, out: list[Violation]) -> None:
    topo, k = s.topology, len(t.chunks)
    for p, c in enumerate(t.chunks):
        want = masks[c.sources]
        for r in c.destinations:
            have = held.get(gpu[r] * k + p)
            if have != want:
                what = "nothing" if have is None else f"data of ranks {_ranks(have)}"
                out.append(Violation("demand", f"rank {r} ({topo.gpu(r)}) lacks chunk {c.id} "
                                               f"at the end (holds {what})"))
