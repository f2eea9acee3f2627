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
from itertools import repeat
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
_OPS = {"copy": 0, "reduce": 1}


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
    """The transfers of ``s`` read once, a column at a time."""
    topo = s.topology
    names = tuple(n.name for n in topo.nodes)
    chunks = s.collective.chunks()
    ids = {name: i for i, name in enumerate(names)}
    at = {c.id: i for i, c in enumerate(chunks)}
    ts = s.transfers

    def column(field: str, of: dict | None = None) -> np.ndarray:
        values = map(attrgetter(field), ts)
        if of is not None:  # the index of each value, −1 for one not in ``of``
            values = map(of.get, values, repeat(-1))
        return np.fromiter(values, dtype=np.int64, count=len(ts))

    src_i, dst_i, chunk_i, op_i = column("src", ids), column("dst", ids), \
        column("chunk", at), column("op", _OPS)
    start, arrive = column("start_epoch"), column("arrive_epoch")
    check(CHECKING)
    n = len(names)
    pairs = sorted({ids[x.src] * n + ids[x.dst] for x in topo.links})
    links = [topo.link(names[p // n], names[p % n]) for p in pairs]
    codes = np.array(pairs + [-1], dtype=np.int64)  # −1: the row of no link
    code = np.where((src_i >= 0) & (dst_i >= 0), src_i * n + dst_i, -2)
    link = np.minimum(np.searchsorted(codes[:-1], code), len(pairs))
    check(CHECKING)
    return _Table(names, chunks, src_i, dst_i, chunk_i, start, arrive, op_i,
                  codes[link] == code, link,
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
        self.order = _lexsort(t.arrive[linked], start, link) if len(linked) else linked
        lo, so, rows = link[self.order], start[self.order], linked[self.order]
        new_link = np.ones(len(lo), dtype=bool)
        new_link[1:] = lo[1:] != lo[:-1]
        new = new_link.copy()
        new[1:] |= so[1:] != so[:-1]
        self.begins = np.flatnonzero(new)
        self.group = np.cumsum(new) - 1
        self.link_first = np.full(len(t.bandwidth), -1, dtype=np.int64)
        self.first = np.zeros(0, dtype=np.int64)
        if len(lo):
            self.first = np.minimum.reduceat(rows, self.begins)
            at = np.flatnonzero(new_link)
            self.link_first[lo[at]] = np.minimum.reduceat(rows, at)
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


def _lexsort(*keys: np.ndarray) -> np.ndarray:
    """``np.lexsort(keys)`` (last key primary), the keys whose product of ranges fits in
    62 bits merged into one (fewer, faster passes)."""
    keys = tuple(k - k.min() for k in keys)
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


@dataclass(frozen=True)
class _Events:
    """The sends and the arrivals of the rows that keep to the timing rules, each in the
    order the replay takes them within an epoch (by chunk id, sender and receiver name;
    ties: sends by arrival, arrivals by start, then the schedule's order), as columns:
    the row (into the table), the node and the key (``node · chunks + chunk position``)
    it takes from or adds to, whether it reduces; an arrival's ``send``: its send's
    position. ``epochs``: every epoch with an event, and where its sends and arrivals
    begin and end."""

    send_row: np.ndarray
    send_node: np.ndarray
    send_key: np.ndarray
    send_reduces: np.ndarray
    arrive_row: np.ndarray
    arrive_node: np.ndarray
    arrive_key: np.ndarray
    arrive_reduces: np.ndarray
    send: np.ndarray
    epochs: list[tuple[int, int, int, int, int]]


def _events(t: _Table, rows: np.ndarray) -> _Events:
    m, n, k = len(rows), len(t.names), len(t.chunks)
    ids = np.array([c.id for c in t.chunks])
    id_rank = np.empty(k, dtype=np.int64)
    id_rank[np.argsort(ids, kind="stable")] = np.arange(k)
    name_rank = np.empty(n, dtype=np.int64)
    name_rank[sorted(range(n), key=t.names.__getitem__)] = np.arange(n)
    start, arrive, chunk = t.start[rows], t.arrive[rows], t.chunk[rows]
    src, dst, reduces = t.src[rows], t.dst[rows], t.op[rows] == 1
    pair = (id_rank[chunk] * n + name_rank[src]) * n + name_rank[dst]
    sends = _lexsort(rows, arrive, pair, start) if m else rows
    arrivals = _lexsort(rows, start, pair, arrive) if m else rows
    position = np.empty(m, dtype=np.int64)
    position[sends] = np.arange(m)
    check(CHECKING)
    at_start, at_arrival = start[sends], arrive[arrivals]
    epochs = np.union1d(_distinct(at_start), _distinct(at_arrival))
    bounds = (np.searchsorted(at_arrival, epochs), np.searchsorted(at_arrival, epochs, "right"),
              np.searchsorted(at_start, epochs), np.searchsorted(at_start, epochs, "right"))
    return _Events(rows[sends], src[sends], src[sends] * k + chunk[sends], reduces[sends],
                   rows[arrivals], dst[arrivals], dst[arrivals] * k + chunk[arrivals],
                   reduces[arrivals], position[arrivals],
                   list(zip(epochs.tolist(), *(b.tolist() for b in bounds), strict=True)))


def _distinct(x: np.ndarray) -> np.ndarray:
    """The distinct values of sorted ``x``."""
    return x[np.append(True, x[1:] != x[:-1])] if len(x) else x


@dataclass
class _State:
    """What the nodes hold in the replay, keyed ``node · chunks + chunk position``:
    ``held`` by GPUs and buffered switches, ``transient``: by bufferless switches in the
    current epoch only, ``queued``: the units a queueing switch keeps apart; ``values``:
    the value each send (by position) carries, None where its sender held nothing;
    ``queues``, ``keeps``: by node, whether it is a queueing switch, whether it keeps
    what arrives (a GPU or a buffered switch)."""

    held: dict[int, int]
    transient: dict[int, int]
    queued: dict[int, list[int]]
    values: list[int | None]
    queues: list[bool]
    keeps: list[bool]


def _replay(s: Schedule, t: _Table, rows: np.ndarray, out: list[Violation]) -> None:
    """Epoch by epoch: arrivals of the epoch first, then the sends that start in it."""
    topo, chunks, names = s.topology, t.chunks, t.names
    nodes = [topo.node(x) for x in names]
    k = len(chunks)
    ids = {x: i for i, x in enumerate(names)}
    gpu = {r: ids[x] for r, x in enumerate(topo.gpus)}
    masks = _Masks()
    state = _State({}, {}, defaultdict(list), [None] * len(rows),
                   [_queues(x) for x in nodes], [x.is_gpu or x.has_buffer for x in nodes])
    for p, c in enumerate(chunks):
        whole = 0 if c.reduce else masks[c.sources]
        for r in c.sources:
            state.held[gpu[r] * k + p] = 1 << r if c.reduce else whole
    fanout = _fanout(t, rows, nodes)
    ev = _events(t, rows)
    for e, a0, a1, s0, s1 in ev.epochs:
        check(CHECKING)
        state.transient = {}
        if a1 > a0:
            _arrive(s, ev, a0, a1, nodes, state, out)
        if s1 > s0:
            _send(s, ev, e, s0, s1, nodes, state, out)
        out.extend(fanout.pop(e, ()))
    _check_buffers(s, t, state.held, out)
    _check_demands(s, t, state.held, gpu, masks, out)


def _send(s: Schedule, ev: _Events, epoch: int, s0: int, s1: int, nodes: list[Node],
          state: _State, out: list[Violation]) -> None:
    """The values the sends ``s0:s1`` (of ``epoch``) carry: what the sender holds, a
    queueing switch its oldest unit (kept only when copied)."""
    keys, senders = ev.send_key[s0:s1].tolist(), ev.send_node[s0:s1].tolist()
    held, transient, queued = state.held, state.transient, state.queued
    if transient or any(state.queues) and any(state.queues[x] for x in set(senders)):
        values = []
        for key, x, reduces in zip(keys, senders, ev.send_reduces[s0:s1].tolist(), strict=True):
            if not state.queues[x]:
                values.append(transient.get(key, held.get(key)))
            elif units := queued.get(key):
                # a partial is forwarded once (copying it would count it twice); whole
                # chunks may be copied
                values.append(units[0] if nodes[x].can_copy and not reduces else units.pop(0))
            else:
                values.append(None)
    else:
        values = list(map(held.get, keys))
    state.values[s0:s1] = values
    if None in values:
        for i, value in enumerate(values):
            if value is None:
                y = s.transfers[ev.send_row[s0 + i]]
                out.append(Violation("hold", f"{y}: {y.src} does not hold chunk {y.chunk} "
                                             f"in epoch {epoch}"))


def _arrive(s: Schedule, ev: _Events, a0: int, a1: int, nodes: list[Node], state: _State,
            out: list[Violation]) -> None:
    """Apply the arrivals ``a0:a1`` (of one epoch): GPUs and buffered switches keep what
    arrives, queueing switches keep each unit apart, bufferless switches hold it in
    this epoch only (``state.transient``)."""
    held, transient, queued, values = state.held, state.transient, state.queued, state.values
    queues, keeps = state.queues, state.keeps
    for i, (sent, key, to, merge) in enumerate(zip(
            ev.send[a0:a1].tolist(), ev.arrive_key[a0:a1].tolist(),
            ev.arrive_node[a0:a1].tolist(), ev.arrive_reduces[a0:a1].tolist(), strict=True)):
        value = values[sent]
        if value is None:
            continue
        if queues[to]:
            queued[key].append(value)
            continue
        store = held if keeps[to] else transient
        old = store.get(key)
        if not (store is held or old is None or old == value):
            if not nodes[to].can_reduce:
                y = s.transfers[ev.arrive_row[a0 + i]]
                out.append(Violation("switch", f"{y}: switch {y.dst} cannot reduce, but two "
                                               f"different partials of chunk {y.chunk} "
                                               f"arrive in one epoch"))
                continue
            merge = True
        if merge and old is not None:
            if old & value:
                y = s.transfers[ev.arrive_row[a0 + i]]
                out.append(Violation("double", f"{y}: ranks {_ranks(old & value)} would be "
                                               f"added twice into chunk {y.chunk} at {y.dst}"))
                continue
            store[key] = old | value
        else:
            store[key] = value


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
