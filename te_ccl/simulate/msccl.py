"""Replay an MSCCL XML algorithm as the executor runs it, on a topology's links (α-β).

The file is read by the verifier's reader (:func:`te_ccl.verify.msccl.reader.read_msccl`);
rank ``r`` of the file is GPU ``topology.gpus[ranks[r]]`` (``ranks`` defaults to every
GPU of the topology, in order). The model (docs/verify.md, "The replay"):

* each thread block runs its steps in order: a step starts once the previous step of its
  thread block is done and its dependency (``depid``/``deps``) is done;
* a receiving step (``r``, ``rcs``, ``rrc``, ``rrs``, ``rrcs``) then waits for its message
  to have arrived: the k-th receive on a connection ``(channel, sender, receiver)`` takes
  the k-th send on it. A step that receives and sends (``rcs``, ``rrs``, ``rrcs``) of
  several calls forwards call by call, as the executor's loop over a step's calls does:
  it starts once the message's first call has arrived, and its own message cannot leave
  its first link before each call has arrived plus the time of it and the calls after it
  there (the cut-through rule of ``Links.put``). A call is taken to arrive when the rest
  of the message still had to cross the last link at its full rate (never earlier than
  it can have); a step that only receives, then a separate send, stores and forwards;
* a sending step then waits for a free slot of its connection. A connection holds
  ``MSCCL.outstanding_sends(proto, cnt, per_call)`` sends whose receiving step is not done
  (2 under Simple, 8 under LL and LL128, fewer for a step of several calls but at least
  one: a send of more calls than the connection holds streams as it is received); a call
  carries ``per_call`` chunks, the executor's ``maxAllowedCount`` at the replayed size
  (1 at large sizes, where a step of ``cnt`` chunks is ``cnt`` calls); the receiving
  step's completion frees the slot;
* the message, ``cnt`` chunks of ``size_bytes / nchunksperloop`` bytes each, takes the
  route to its peer (``size_bytes`` is the collective's, nccl-tests style; for gather and
  scatter, whose executor count is one rank's piece, a chunk is ``size_bytes / ngpus /
  nchunksperloop``) (the direct link, else the fastest path). A link serves messages first come, first
  served, busy ``bytes / b``; the message is at the far end ``α`` after it leaves. A
  switch without buffer forwards cut-through: the message goes on as soon as its head has
  arrived and the next link is free, and cannot leave that link before its tail has
  arrived (if the next link is busy the head waits in the switch: virtual cut-through).
  A switch that buffers (``buffer: true``) and a GPU on the way store and forward;
* the step is done when its message has left the first link; local copies, reductions
  and ``nop`` take no time.

The link model and the event queue are the engine's (:mod:`te_ccl.simulate.engine`, as
for schedules and plans); the steps are flat per-step lists (no object per step or
message): at 1024 GPUs a file has millions of steps.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from te_ccl.deadline import check
from te_ccl.errors import SpecError, VerificationError
from te_ccl.nogc import paused_gc
from te_ccl.runtime_limits import MSCCL, PROTOCOLS
from te_ccl.simulate.engine import Events, Links
from te_ccl.simulate.result import Interval, LinkUse, SimResult
from te_ccl.topology.model import Topology
from te_ccl.topology.routes import fastest_path
from te_ccl.verify.msccl.model import RECVS, SENDS, Algo, Step
from te_ccl.verify.msccl.reader import read_msccl

__all__ = ["simulate_msccl", "read_provenance", "INTERVALS_UP_TO", "Flat", "prepared", "replay"]

INTERVALS_UP_TO = 100_000  # link uses kept for a timeline by default (a chart of more is a blur)
CHECK_EVERY = 1 << 16  # events between two looks at the compile's deadline
_REPLAYING = "replaying the MSCCL XML"

_DONE, _HOP, _ARRIVE, _LEFT = 0, 1, 2, 3
_FIRST = 1 << 2 | _ARRIVE  # the first call of a message its receiver forwards call by call
_PROVENANCE = re.compile(r"\s*<!-- teccl: topology=(\S+) size_bytes=([0-9]+) -->\s*")


def read_provenance(path_or_text: str | Path) -> tuple[str, int] | None:
    """``(topology name, size in bytes)`` from the comment teccl writes after ``<algo …>``.

    Only the first lines are read (the comment is the second line of a teccl file).

    >>> read_provenance('<algo name="x">\\n<!-- teccl: topology=dgx1 size_bytes=1024 -->\\n')
    ('dgx1', 1024)
    """
    if isinstance(path_or_text, str) and "<" in path_or_text:
        lines = path_or_text.split("\n", 3)[:3]
    else:
        try:
            with open(path_or_text, encoding="utf-8", errors="replace") as f:
                lines = [f.readline(4096) for _ in range(3)]
        except OSError:
            return None
    for line in lines[1:]:
        m = _PROVENANCE.fullmatch(line)
        if m:
            return m.group(1), int(m.group(2))
    return None


class Flat:
    """The algorithm as flat lists indexed by a global step id (file order)."""

    def __init__(self, algo: Algo, topology: Topology, ranks: Sequence[int], proto: str,
                 per_call: int = 1) -> None:
        self.algo, self.topo, self.ranks = algo, topology, ranks
        self.per_call = per_call          # chunks one primitive call carries (maxAllowedCount)
        self.tb_first: list[int] = []     # global id of each thread block's first step
        self.tb_where: list[tuple[int, int]] = []  # (rank, tb id)
        self.tb_conn: list[tuple[int, int, int]] = []  # (chan, send peer, recv peer)
        self.nsteps = 0
        self.nxt: list[int] = []          # next step of the thread block, -1 at its end
        self.dep: list[int] = []          # step waited for (depid/deps), -1
        self.rmsg: list[int] = []         # send step whose message this step receives, -1
        self.rstep: list[int] = []        # receive step of this step's message, -1
        self.slot: list[int] = []         # receive step that frees this send's slot, -1
        self.path: list[int] = []         # index into ``paths`` of a send, -1
        self.cnt: dict[int, int] = {}     # cnt of each send
        self.streams: dict[int, float] = {}  # send → its call's size, if its receiving
        #                                      step forwards call by call
        self.paths: list[tuple[int, ...]] = []
        self.link_keys: list[tuple[str, str]] = []
        self._link_index: dict[tuple[str, str], int] = {}
        self._graph = None
        self._build(proto)

    def where(self, i: int) -> tuple[int, int, int]:
        """``(rank, tb id, step position)`` of global step ``i``."""
        t = bisect_right(self.tb_first, i) - 1
        rank, tb = self.tb_where[t]
        return rank, tb, i - self.tb_first[t]

    def label(self, i: int) -> str:
        rank, tb, pos = self.where(i)
        return f"r{rank}/tb{tb}/s{pos}"

    def _build(self, proto: str) -> None:
        gpus, seen = [], set()
        for gpu in self.algo.gpus:
            if gpu.id in seen:
                continue  # the runtime of a rank loads the first <gpu> with its id
            seen.add(gpu.id)
            if not 0 <= gpu.id < len(self.ranks):
                raise VerificationError(f"<gpu id=\"{gpu.id}\"> is not a rank of this "
                                        f"{len(self.ranks)}-GPU algorithm")
            gpus.append(gpu)
        n = sum(len(tb.steps) for gpu in gpus for tb in gpu.threadblocks)
        self.nsteps = n
        self.nxt = list(range(1, n + 1))
        self.dep, self.rmsg, self.rstep, self.slot, self.path = ([-1] * n for _ in range(5))
        sends: dict[tuple[int, int, int], list[int]] = {}
        recvs: dict[tuple[int, int, int], list[int]] = {}
        route_of: dict[tuple[int, int], int] = {}
        fused: set[int] = set()  # steps that receive and send in more than one call
        nxt, dep, path, cnt = self.nxt, self.dep, self.path, self.cnt
        first = 0
        for gpu in gpus:
            check(_REPLAYING)
            base = {}
            for tb in gpu.threadblocks:
                base[tb.id] = (first, len(tb.steps))
                self.tb_first.append(first)
                self.tb_where.append((gpu.id, tb.id))
                self.tb_conn.append((tb.chan, tb.send, tb.recv))
                first += len(tb.steps)
                if tb.steps:
                    nxt[first - 1] = -1
            for tb in gpu.threadblocks:
                t0 = base[tb.id][0]
                out = into = None
                for i, st in enumerate(tb.steps, t0):
                    kind = st.type
                    if st.depid >= 0:
                        dep[i] = self._dep(gpu.id, tb.id, st, base)
                    if kind in SENDS:
                        if out is None:
                            peer = self._peer(gpu.id, tb.id, st, tb.send, "send")
                            out = sends.setdefault((tb.chan, gpu.id, peer), [])
                            key = (gpu.id, peer)
                            if key not in route_of:
                                route_of[key] = self._route(*key)
                            route = route_of[key]
                        out.append(i)
                        path[i] = route
                        cnt[i] = st.cnt
                    if kind in RECVS:
                        if into is None:
                            peer = self._peer(gpu.id, tb.id, st, tb.recv, "receive")
                            into = recvs.setdefault((tb.chan, peer, gpu.id), [])
                        into.append(i)
                        if kind in SENDS and st.cnt > self.per_call:
                            fused.add(i)
        self._match(sends, recvs, proto)
        self.streams = {self.rmsg[r]: self.per_call for r in fused}

    def _dep(self, rank: int, tb: int, st: Step, base: dict[int, tuple[int, int]]) -> int:
        first, count = base.get(st.depid, (0, 0))
        if not 0 <= st.deps < count:
            raise VerificationError(f"rank {rank} thread block {tb} step {st.position} depends "
                                    f"on missing step {st.deps} of thread block {st.depid}")
        return first + st.deps

    def _peer(self, rank: int, tb: int, st: Step, peer: int, what: str) -> int:
        if not 0 <= peer < len(self.ranks) or peer == rank:
            raise VerificationError(f"rank {rank} thread block {tb} step {st.position} has no "
                                    f"{what} peer (the thread block says {peer})")
        return peer

    def _route(self, src: int, dst: int) -> int:
        topo = self.topo
        u, v = topo.gpu(self.ranks[src]), topo.gpu(self.ranks[dst])
        if not topo.has_link(u, v) and self._graph is None:
            self._graph = topo.graph()
        path = fastest_path(topo, u, v, graph=self._graph)
        if path is None:
            raise VerificationError(f"rank {src} ({u}) cannot reach rank {dst} ({v}) in "
                                    f"{topo.name}: no path through its links")
        index = self._link_index
        hops = []
        for key in zip(path, path[1:], strict=False):
            if key not in index:
                index[key] = len(self.link_keys)
                self.link_keys.append(key)
            hops.append(index[key])
        self.paths.append(tuple(hops))
        return len(self.paths) - 1

    def _match(self, sends: dict[tuple[int, int, int], list[int]],
               recvs: dict[tuple[int, int, int], list[int]], proto: str) -> None:
        """The k-th receive on a connection takes the k-th send; the slot of each send."""
        rmsg, rstep, slot, cnt = self.rmsg, self.rstep, self.slot, self.cnt
        # a send of more calls than the connection holds streams: it starts once the
        # sends before it are received, and its own receive drains it
        depth_of = {c: max(1, MSCCL.outstanding_sends(proto, c, self.per_call))
                    for c in set(cnt.values())}
        for conn in sorted(sends.keys() | recvs.keys()):
            out, into = sends.get(conn, []), recvs.get(conn, [])
            if len(out) != len(into):
                chan, src, dst = conn
                raise VerificationError(f"rank {dst} receives {len(into)} message(s) from rank "
                                        f"{src} on channel {chan}, {len(out)} sent")
            for k, (s, r) in enumerate(zip(out, into, strict=True)):
                rmsg[r] = s
                rstep[s] = r
                depth = depth_of[cnt[s]]
                if k >= depth:
                    slot[s] = into[k - depth]


def replay(flat: Flat, chunk_bytes: float, record: bool | None,
           pieces: Sequence[float] | None = None) -> tuple[SimResult, list[float]]:
    """Run the steps on the engine's links and events (see the module docstring); the
    result and when each step was done (a co-simulation splits the steps by communicator).

    ``pieces`` (per step, in the units of ``cnt × chunk_bytes``): each message goes over
    each link of its route as pieces of at most that size, a piece put on the link once
    the one before has left it, so the messages that wait for a link take turns piece by
    piece instead of one holding it for the whole message (:mod:`~te_ccl.simulate.cosim`).
    A piece goes on at the next hop once its head is there (cut-through) or it has
    arrived, and cannot leave that link before its tail has arrived; the message has
    arrived with its last piece, and its step is done once that has left the first link.

    Event codes are ``step << 12 | hop << 2 | kind``: a send's first link ends (``_DONE``),
    its message (a piece) reaches the node of hop ``hop`` (``_HOP``) or its peer
    (``_ARRIVE``; with hop 1, ``_FIRST``: its first call), a piece leaves the link of hop
    ``hop`` (``_LEFT``); at one time the earlier step goes first. Between events, ``todo``
    holds the steps to take as far as they go at ``now`` and, as ``~step``, the steps done
    at ``now`` (one loop, no call per step that sends nothing: at 1024 GPUs there are
    millions).
    """
    if any(len(p) >= 1 << 10 for p in flat.paths):
        raise SpecError("a route of 1024 hops or more", key="topology")
    links = Links(flat.topo, flat.link_keys, chunk_bytes)
    put, lat, cut = links.put, links.latency, links.cut
    nxt, dep, rmsg, rstep, slot, path, cnt, paths = (
        flat.nxt, flat.dep, flat.rmsg, flat.rstep, flat.slot, flat.path, flat.cnt, flat.paths)
    nsteps = flat.nsteps
    if record is None:
        record = sum(len(paths[path[i]]) for i in cnt) <= INTERVALS_UP_TO
    used: list[tuple[int, int, float, float, float]] = []  # (link, step, start, end, arrive)
    done = [-1.0] * nsteps
    arrived = [-1.0] * nsteps   # of the message a send step puts on its route
    tail: dict[int, float] = {}  # when a message's tail reaches the node of its next hop
    stage = [-1] * nsteps       # -1 not reached, 0 dependency, 1 message, 2 slot, 3 running
    waiters: dict[int, list[int]] = {}
    events = Events()
    push, pop = events.push, events.pop
    streams, per_unit = flat.streams, links.per_unit
    due: dict[int, float] = {}   # when a streamed message arrives (its last call)
    held: dict[int, float] = {}  # relaying step → its message's tail leaves its first link

    def land(i: int, k: int, end: float) -> None:
        """Message ``i`` leaves its last link ``k`` at ``end`` and arrives ``α`` later;
        if its receiver forwards call by call, the event is its first call's arrival, as
        the rest of it could at the latest have crossed ``k`` at full rate."""
        a = end + lat[k]
        if i in streams:
            c = cnt[i]
            due[i] = a
            first = a - (c - min(c, streams[i])) * per_unit[k]
            push(first if first > events.now else events.now, i << 12 | _FIRST)
        else:
            push(a, i << 12 | _ARRIVE)

    def hop(i: int, h: int, now: float, behind: float) -> None:
        """Put message ``i`` on hop ``h`` of its route at ``now`` (its head is there; its
        tail at ``behind``)."""
        hops = paths[path[i]]
        k = hops[h]
        start, end = put(k, now, cnt[i], behind)
        a = lat[k]
        if record:
            used.append((k, i, start, end, end + a))
        if h + 1 == len(hops):
            land(i, k, end)
        else:
            tail[i] = end + a
            push((start if cut[k] else end) + a, i << 12 | (h + 1) << 2 | _HOP)
        if not h:
            push(end, i << 12 | _DONE)

    if pieces is not None:  # pieces start at their tails' arrival, not the message's
        hop, left = _by_pieces(paths, path, cnt, pieces, put, lat, cut, push, land, used,
                               record)

    ends = flat.tb_first[1:] + [nsteps]
    todo = [first for first, end in zip(flat.tb_first, ends, strict=True) if first < end]
    todo.reverse()
    now = last = 0.0
    count = 0
    while True:
        while todo:
            i = todo.pop()
            if i < 0:  # step ~i is done
                i = ~i
                done[i] = now
                j = nxt[i]
                if j >= 0:
                    todo.append(j)
                ws = waiters.pop(i, None)
                if ws:
                    todo.extend(ws)
                continue
            st = stage[i]
            if st <= 0:
                d = dep[i]
                if d >= 0 and done[d] < 0:
                    stage[i] = 0
                    waiters.setdefault(d, []).append(i)
                    continue
            if st <= 1:
                m = rmsg[i]
                if m >= 0 and arrived[m] < 0:
                    stage[i] = 1
                    continue
            if st <= 2:
                w = slot[i]
                if w >= 0 and done[w] < 0:
                    stage[i] = 2
                    waiters.setdefault(w, []).append(i)
                    continue
            stage[i] = 3
            if path[i] < 0:  # done at once (inlined: most steps of a file)
                done[i] = now
                j = nxt[i]
                if j >= 0:
                    todo.append(j)
                ws = waiters.pop(i, None)
                if ws:
                    todo.extend(ws)
                continue
            hop(i, 0, now, held.pop(i, 0.0) if held else 0.0)
        code = pop()
        if code < 0:
            break
        now = events.now
        count += 1
        if not count % CHECK_EVERY:
            check(_REPLAYING)
        i, kind = code >> 12, code & 3
        if kind == _DONE:
            todo.append(~i)
        elif kind == _ARRIVE:
            r = rstep[i]
            if code & _FIRST == _FIRST:  # the step starts on its first call
                arrived[i] = now
                a = due.pop(i)
                if a > last:
                    last = a
                held[r] = a + _relay_tail(cnt[r], streams[i], per_unit[paths[path[i]][-1]],
                                          per_unit[paths[path[r]][0]])
            else:
                arrived[i] = last = now
            if stage[r] == 1:
                todo.append(r)
        elif kind == _LEFT:
            left(i, code >> 2 & 1023, now)
        else:
            hop(i, code >> 2 & 1023, now, tail.get(i, 0.0))  # none kept by pieces
    return _result(flat, done, used, links, stage, last), done


def _relay_tail(c: float, per_call: float, into: float, out: float) -> float:
    """How long after its message's last call arrived a step forwarding ``c`` chunks
    call by call is done with them, at ``into`` and ``out`` seconds a chunk on the link in
    and its link out. Call ``j`` arrives at the latest as the calls after it still had to
    come in, and leaves with those after it: the bound is linear in ``j``, so the last
    call or the one before it decides (the first is the relay's full-rate start)."""
    last = c - (c - 1) // per_call * per_call
    return last * out + max(0.0, per_call * out - last * into)


def _by_pieces(paths: list[tuple[int, ...]], path: list[int], cnt: dict[int, float],
               pieces: Sequence[float], put: Callable, lat: list[float], cut: list[bool],
               push: Callable, land: Callable, used: list, record: bool
               ) -> tuple[Callable[[int, int, float, float], None],
                          Callable[[int, int, float], None]]:
    """``replay``'s ``hop`` and ``left`` when messages move in pieces: ``hop(i, h, …)``
    is message ``i`` starting (``h`` 0; its last piece cannot leave the first link before
    the tail ``hop`` is given) or the head of its next piece reaching hop ``h``;
    ``left(i, h, now)`` its piece leaving the link of hop ``h``."""
    ready: dict[int, int] = {}      # (message, hop) → pieces whose head is at the hop
    tails: dict[int, deque[float]] = {}  # … and when their tails arrive there
    sent: dict[int, int] = {}       # (message, hop) → pieces put on its link
    busy: set[int] = set()          # (message, hop) with a piece on its link
    count: dict[int, int] = {}      # message → its pieces
    lead: dict[int, float] = {}     # message → when its tail reaches its first link

    def start(i: int, h: int, now: float) -> None:
        key = i << 10 | h
        hops = paths[path[i]]
        k, n, q = hops[h], count[i], sent.get(key, 0)
        ready[key] -= 1
        sent[key] = q + 1
        busy.add(key)
        behind = tails[key].popleft() if h else lead.pop(i, 0.0) if q == n - 1 else 0.0
        piece = pieces[i]
        amount = piece if q < n - 1 else cnt[i] - piece * (n - 1)
        begin, end = put(k, now, amount, behind)
        a = lat[k]
        if record:
            used.append((k, i, begin, end, end + a))
        push(end, i << 12 | h << 2 | _LEFT)
        if h + 1 < len(hops):
            tails.setdefault(key + 1, deque()).append(end + a)
            push((begin if cut[k] else end) + a, i << 12 | (h + 1) << 2 | _HOP)
        elif q == n - 1:
            land(i, k, end)
        if not h and q == n - 1:
            push(end, i << 12 | _DONE)

    def hop(i: int, h: int, now: float, behind: float) -> None:
        key = i << 10 | h
        if h:
            ready[key] += 1
        else:
            if behind:
                lead[i] = behind
            count[i] = n = max(1, math.ceil(cnt[i] / pieces[i]))
            ready[key] = n
            for j in range(1, len(paths[path[i]])):
                ready[key + j] = 0
        if key not in busy:
            start(i, h, now)

    def left(i: int, h: int, now: float) -> None:
        key = i << 10 | h
        busy.discard(key)
        if ready[key]:
            start(i, h, now)

    return hop, left


def _result(flat: Flat, done: list[float], used: list[tuple[int, int, float, float, float]],
            links: Links, stage: list[int], last: float) -> SimResult:
    """The :class:`SimResult` of a finished loop, or the deadlock as a VerificationError."""
    if -1.0 in done:
        _deadlock(flat, done, stage)
    topo, nsteps = flat.topo, flat.nsteps
    gpu_finish = {topo.gpu(flat.ranks[r]): 0.0 for r in sorted({w[0] for w in flat.tb_where})}
    ends = flat.tb_first[1:] + [nsteps]
    for (rank, _), first, end in zip(flat.tb_where, flat.tb_first, ends, strict=True):
        if first < end:
            name = topo.gpu(flat.ranks[rank])
            gpu_finish[name] = max(gpu_finish[name], done[end - 1])
    finish = max(max(gpu_finish.values(), default=0.0), last)
    busy, uses, keys = links.busy, links.uses, links.keys
    uses_out = tuple(LinkUse(*key, uses[j], busy[j], busy[j] / finish if finish else 0.0)
                     for j, key in sorted(enumerate(keys), key=lambda e: e[1]) if uses[j])
    intervals = tuple(Interval(*keys[k], flat.label(i), s, e, a)
                      for k, i, s, e, a in used)
    return SimResult(finish, last, gpu_finish, uses_out, intervals)


def _deadlock(flat: Flat, done: list[float], stage: list[int]) -> None:
    """Raise the deadlock, naming a step that waits and what for: one that waits for a
    slot if any (the cause when the connections' buffering closes the cycle)."""
    stuck = [i for i, t in enumerate(done) if t < 0]
    rank_of = {2: 0, 0: 1, 1: 2}  # slot, dependency, message, then never reached
    i = min(stuck, key=lambda j: (rank_of.get(stage[j], 3), j))
    rank, tb, pos = flat.where(i)
    chan, send, recv = flat.tb_conn[bisect_right(flat.tb_first, i) - 1]
    if stage[i] == 0:
        _, dtb, dpos = flat.where(flat.dep[i])
        why = f"waits for step {dpos} of thread block {dtb}"
    elif stage[i] == 1:
        why = f"waits for a message from rank {recv} on channel {chan}"
    elif stage[i] == 2:
        why = (f"waits for a free slot of its connection to rank {send} on channel {chan} "
               f"(every slot holds a send rank {send} has not received)")
    else:
        why = "is never reached"
    raise VerificationError(f"the replay deadlocks: {len(stuck)} step(s) never run, e.g. rank "
                            f"{rank} thread block {tb} step {pos} {why}")


def simulate_msccl(path_or_algo: str | Path | Algo, topology: Topology, size_bytes: int, *,
                   proto: str | None = None, ranks: Sequence[int] | None = None,
                   intervals: bool | None = None) -> SimResult:
    """Replay an MSCCL algorithm (file, XML text or parsed) for a ``size_bytes`` collective.

    ``proto`` (default: the file's) sets the connections' slots; ``ranks`` are the
    topology ranks the file's ranks run on (default: all of them, in order);
    ``intervals`` keeps every link use for a timeline (default: up to
    :data:`INTERVALS_UP_TO` of them).

    Raises
    ------
    SpecError
        The file's GPU count differs from ``ranks`` (or the topology's), or its protocol
        or ``nchunksperloop`` is not one the runtime runs.
    VerificationError
        The file cannot run: unmatched sends and receives, a missing dependency or peer,
        or a deadlock (the message names a waiting step).
    """
    with paused_gc():
        algo = path_or_algo if isinstance(path_or_algo, Algo) else read_msccl(path_or_algo)
        flat, chunk_bytes = prepared(algo, topology, size_bytes, proto, ranks)
        return replay(flat, chunk_bytes, intervals)[0]


def prepared(algo: Algo, topology: Topology, size_bytes: int, proto: str | None,
              ranks: Sequence[int] | None) -> tuple[Flat, float]:
    """The checked algorithm as flat lists, and the bytes of one of its chunks (see
    :func:`simulate_msccl` for what is refused)."""
    if ranks is None:
        if algo.ngpus != topology.ngpus:
            raise SpecError(f"the algorithm has {algo.ngpus} GPUs, topology "
                            f"{topology.name} {topology.ngpus}", file=algo.source,
                            key="ngpus")
        ranks = range(topology.ngpus)
    elif len(ranks) != algo.ngpus or not all(0 <= r < topology.ngpus for r in ranks):
        raise SpecError(f"the algorithm has {algo.ngpus} GPUs; expected as many ranks of "
                        f"topology {topology.name}", file=algo.source, key="ranks")
    proto = proto or algo.proto
    if proto not in PROTOCOLS:
        raise SpecError(f"expected one of {', '.join(PROTOCOLS)}, got {proto!r}",
                        file=algo.source, key="proto")
    if algo.nchunksperloop <= 0:
        raise SpecError("nchunksperloop must be positive", file=algo.source,
                        key="nchunksperloop")
    per_rank_count = algo.coll in ("gather", "scatter")
    count_bytes = size_bytes / algo.ngpus if per_rank_count else size_bytes
    per_call = MSCCL.max_allowed_count(proto, math.ceil(count_bytes), algo.nchunksperloop)
    return Flat(algo, topology, ranks, proto, per_call), count_bytes / algo.nchunksperloop
