"""The previous file spliced onto a network that lost links (``teccl compile --from``).

A link went down: the previous MSCCL file still holds every step the loss does not
touch (a file that uses no link lost, or a network whose links only slowed, is kept as
it is). Splicing keeps them and moves only what crossed a lost link: each receive of a
chunk over it is taken instead from another neighbour of the receiver that holds the
chunk (not through the receiver itself), on a thread block of its own on a free
channel, the sender waiting for the step that gave it the chunk. Nothing is lowered
again, so a recompile costs reading, splicing, verifying and replaying one file.

The steps are placed by the previous file's replay on the network it was written for
(the time each step was done), so every new wait points forward in that replay's time,
as every kept one does, and the file cannot deadlock; a receiver that passed a chunk on
before it has it anew gives up that send too (its receiver is served the same way).
Senders are chosen one of two ways (:data:`WAYS`, tried in turn by the caller, which
replays each):

- queued (:class:`_Queued`): each link a queue behind the file's own sends on it; every
  pass-on of a chunk lost is given up at once, down its tree, and the receives are
  placed earliest arrival first, so a GPU that gets a chunk anew early passes it on.
  A file whose links are busy until it ends (a torus's) needs this: its chunks anew
  arrive after it, and the GPUs beside the receiver must get them first;
- weighted (:class:`_Weighted`): the neighbour whose link stays least loaded, a weight
  on holding the chunk earlier breaking near ties, then each receiver's incoming links
  evened out (:data:`BALANCE_ROUNDS`).

Only AllGather and Broadcast (a send carries chunks of the result, the same slots on
every rank), out of or in place, on the same ranks, are spliced; anything else (a
relay through scratch, a chunk no neighbour holds in time, a thread block that would
outgrow the runtime's steps) leaves the compile as without it. The verifier checks the
spliced file in full and the replay times it, like any file the compile writes.
The edit itself (what is lost, given up, moved; the waits rewired) is
:mod:`te_ccl.compiler.splice_edit`; the file as steps, :mod:`te_ccl.compiler.splice_steps`.
"""

from __future__ import annotations

import heapq
import math
from itertools import count

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler.splice_edit import Edit, Spliced, Tree
from te_ccl.compiler.splice_steps import NoSplice, Step
from te_ccl.deadline import check
from te_ccl.runtime_limits import RuntimeLimits
from te_ccl.simulate.msccl import prepared, replay
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.model import SENDS, Algo

__all__ = ["Spliced", "Tree", "splice", "step_times", "SPLICED_KINDS", "SPLICING",
           "BALANCE_ROUNDS", "QUEUED", "WAYS"]

SPLICED_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST)
SPLICING = "splicing the previous file"  # the stage a deadline names
BALANCE_ROUNDS = 4  # passes moving receives off a receiver's overloaded incoming links
QUEUED = None  # the way of :class:`_Queued`
WAYS: tuple[float | None, ...] = (QUEUED, 0.02, 0.01, 0.0)  # tried in turn: queued,
#   then weighted, each number how much a sender's holding the chunk earlier counts
#   against its link's load (a second until it holds it as this many seconds of load);
#   the choice of senders is greedy, so each way makes another file


def step_times(algo: Algo, before: Topology, after: Topology, collective: Collective
               ) -> list[float]:
    """When each step of ``algo`` (in file order) is done in its replay on ``before``,
    the network it was written for (``collective``'s ranks are ``after``'s GPUs): the
    order the splice keeps. Where ``after`` has every link of ``before`` nothing moves,
    and the times are not needed (zeros)."""
    if all(after.has_link(x.src, x.dst) for x in before.links):
        return [0.0] * algo.nsteps
    ranks = [before.gpus.index(after.gpu(r)) for r in collective.ranks]
    flat, chunk_bytes = prepared(algo, before, collective.size_bytes, None, ranks)
    return replay(flat, chunk_bytes, False)[1]


def splice(algo: Algo, before: Topology, after: Topology, collective: Collective,
           limits: RuntimeLimits, times: list[float], way: float | None) -> Spliced | str:
    """``algo``, written for ``collective`` on ``before`` (``times``:
    :func:`step_times`), spliced onto ``after``, which lacks some of ``before``'s links,
    the way ``way`` (:data:`WAYS`); or why not, as a sentence."""
    if collective.kind not in SPLICED_KINDS:
        return f"a {collective.kind.value} file is not spliced"
    if algo.ngpus != collective.nranks or len({g.id for g in algo.gpus}) != algo.ngpus:
        return "the file's ranks are not the collective's"
    args = (algo, before, after, collective, limits, times)
    try:
        return (_Queued(*args) if way is QUEUED else _Weighted(*args, way)).run()
    except NoSplice as e:
        return str(e)


class _Weighted(Edit):
    """Senders by their links' load, the weight ``early`` on holding the chunk sooner."""

    def __init__(self, algo: Algo, before: Topology, after: Topology, collective: Collective,
                 limits: RuntimeLimits, done: list[float], early: float) -> None:
        super().__init__(algo, before, after, collective, limits, done)
        self.early = early

    def _reroute(self) -> None:
        self._serve()
        for _ in range(BALANCE_ROUNDS):
            if not self._balance():
                break
            self._serve()

    def _serve(self) -> None:
        """Give each receive lost a sender: the neighbour whose link to the receiver stays
        least loaded (the weight ``early`` breaks near ties); steps of the receiver that
        pass the chunk on before that sender has it are given up, their receives served
        too."""
        while self.work:
            check(SPLICING)  # each receive looks at every GPU: a large file takes a while
            rv = self.work.pop()
            b, slots = rv.tb.rank, range(rv.dst[1], rv.dst[1] + rv.cnt)
            best = None
            for k in range(self.algo.ngpus):
                bw = self._link(k, b) if k != b else None
                got = self._holds(k, b, slots) if bw else None
                if got is None:
                    continue
                when = math.nextafter(max(w.t for w in got), math.inf)  # strictly after
                late = self._passed_on(b, slots, when)
                if late is None:
                    continue
                cost = (self.load[k, b] + rv.cnt) * self.chunk_bytes / bw + self.early * when
                if best is None or cost < best[0]:
                    best = (cost, k, when, got, late)
            if best is None:
                raise NoSplice(f"no neighbour of rank {b} holds slots "
                                f"{slots.start}..{slots.stop - 1} in time")
            _, k, when, got, late = best
            self._assign(rv, k, when, got, late)

    def _balance(self) -> bool:
        """Move receives over a link loaded past its share of the receiver's incoming
        bandwidth (latest first) to a link below it whose sender holds the chunk before
        the receiver passes it on; True if any moved."""
        moved = False
        for b in sorted({b for _, b in self.moves}):
            check(SPLICING)
            ins = [k for k in range(self.algo.ngpus) if k != b and self._link(k, b)]
            share = sum(self.load[k, b] for k in ins) / sum(self._link(k, b) for k in ins)
            for k in sorted(ins, key=lambda k: -self.load[k, b] / self._link(k, b)):
                excess = self.load[k, b] - share * self._link(k, b)
                if excess < 1:
                    break
                olds = [st for tb in self.tbs[b] if tb.recv == k for st in tb.steps
                        if st not in self.removed and st.op == "r" and st.dst[0] == "o"]
                for rv in sorted(olds, key=lambda st: -st.t):
                    if excess < 1:
                        break
                    sd = self.sent_by[rv]
                    if sd.op != "s" or not self._elsewhere(rv, k, b, share, ins):
                        continue
                    self.removed.add(sd)
                    self.load[k, b] -= rv.cnt
                    excess -= rv.cnt
                    self._lose(rv)
                    moved = True
        return moved

    def _elsewhere(self, rv: Step, k: int, b: int, share: float, ins: list[int]) -> bool:
        """Can another neighbour below its share send ``rv``'s chunks before ``b`` first
        passes them on?"""
        slots = range(rv.dst[1], rv.dst[1] + rv.cnt)
        need = min(self.first_read.get((b, x), float("inf")) for x in slots)
        for k2 in ins:
            if k2 == k or self.load[k2, b] + rv.cnt > share * self._link(k2, b):
                continue
            got = self._holds(k2, b, slots)
            if got is not None and max(w.t for w in got) < need:
                return True
        return False


class _Queued(Edit):
    """Earliest arrival, each link a queue: a receive's arrival over a link is after its
    sender holds the chunk, after the file's last send on that link and the receives
    placed on it before, and no sooner than the link's whole load at its bandwidth."""

    def __init__(self, algo: Algo, before: Topology, after: Topology, collective: Collective,
                 limits: RuntimeLimits, done: list[float]) -> None:
        super().__init__(algo, before, after, collective, limits, done)
        self.last: dict[tuple[int, int], Step] = {}  # the file's last send on each link
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                link = (rank, tb.send)
                if tb.send < 0 or link in self.lost:
                    continue
                for st in tb.steps:
                    if st.op in SENDS and (link not in self.last or st.t > self.last[link].t):
                        self.last[link] = st
        self.free = {link: st.t for link, st in self.last.items()}  # when each link is free
        rank = {name: r for r, name in enumerate(self.names)}
        pairs = sorted((rank[a], rank[b]) for (a, b), bw in self.bandwidth.items()
                       if a in rank and b in rank and a != b and bw)  # the direct links
        self.ins: list[list[int]] = [[] for _ in self.names]
        self.outs: list[list[int]] = [[] for _ in self.names]
        for k, b in pairs:
            self.ins[b].append(k)
            self.outs[k].append(b)

    def _reroute(self) -> None:
        """Every pass-on of a chunk lost given up (:meth:`_cut_off`), then, earliest
        arrival first, each receive placed on the link it arrives over soonest; a chunk
        placed is offered to the receiver's neighbours still waiting for it."""
        self._cut_off()
        heap: list[tuple[float, int, int, Step]] = []
        pending: dict[tuple[int, int], Step] = {}  # (rank, slot) -> its receive to place
        order = count()

        def offer(k: int, rv: Step) -> None:
            got = self._arrival(k, rv)
            if got is not None:
                heapq.heappush(heap, (got[0], next(order), k, rv))

        def take() -> None:
            while self.work:
                rv = self.work.pop()
                for x in rv.writes():
                    pending[rv.tb.rank, x] = rv
                for k in self.ins[rv.tb.rank]:
                    offer(k, rv)

        take()
        while heap:
            check(SPLICING)
            when, _, k, rv = heapq.heappop(heap)
            b, slots = rv.tb.rank, rv.writes()
            if pending.get((b, slots.start)) is not rv:
                continue  # placed already
            now = self._arrival(k, rv)
            if now is None:
                continue
            if now[0] > when:  # the link took others meanwhile
                heapq.heappush(heap, (now[0], next(order), k, rv))
                continue
            when, got = now
            late = self._passed_on(b, slots, when)
            if late is None:
                continue
            for x in slots:
                del pending[b, x]
            self.free[k, b] = when
            self._assign(rv, k, when, got, late)
            take()
            for y in self.outs[b]:
                for waiting in {pending[y, x] for x in slots if (y, x) in pending}:
                    offer(b, waiting)
        if pending:
            b, x = next(iter(pending))
            raise NoSplice(f"no neighbour of rank {b} holds slot {x} in time")

    def _cut_off(self) -> None:
        """Give up every step that passes on a chunk whose receive is lost, and so on down
        its tree: a chunk received anew arrives once the links before it are free, after
        the receiver passed it on in the file where those links are busy until its end."""
        todo = list(self.work)
        while todo:
            rv = todo.pop()
            b = rv.tb.rank
            for x in rv.writes():
                for r in self.readers[b, x]:
                    if r not in self.removed and r.op in ("s", "rcs"):
                        mark = len(self.work)
                        self._give_up(r)
                        todo.extend(self.work[mark:])

    def _arrival(self, k: int, rv: Step) -> tuple[float, list[Step]] | None:
        """When ``rv``'s chunks would arrive from ``k`` (None: ``k`` is no neighbour or
        does not hold them but through the receiver), and the steps the send waits for:
        the file's last send on the link, then those that give ``k`` the chunks."""
        b = rv.tb.rank
        bw = self._link(k, b) if k != b else None
        got = self._holds(k, b, rv.writes()) if bw else None
        if got is None:
            return None
        last = self.last.get((k, b))
        if last is not None and last not in self.removed:
            got = [last, *got]
        took = rv.cnt * self.chunk_bytes / bw
        return max(max(w.t for w in got) + took, self.free.get((k, b), 0.0) + took,
                   (self.load[k, b] + rv.cnt) * self.chunk_bytes / bw), got
