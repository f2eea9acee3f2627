"""The previous file spliced onto a network that lost links (``teccl compile --from``).

A link went down: the previous MSCCL file still holds every step the loss does not
touch (a file that uses no link lost, or a network whose links only slowed, is kept as
it is). Splicing keeps them and moves only what crossed a lost link: each receive of a
chunk over it is taken instead from another neighbour of the receiver that holds the
chunk (not through the receiver itself), on a thread block of its own on a free
channel, the sender waiting for the step that gave it the chunk. Nothing is lowered
again, so a recompile costs reading, splicing, verifying and replaying one file.

The steps are placed by the previous file's replay on the network it was written for
(the time each step was done): a new send goes in that order, and a receiver that
passed a chunk on before the new sender had it gives up that send too (its receiver is
served the same way), so every new wait points forward in that replay's time, as every
kept one does, and the file cannot deadlock. A read whose order came through a step
removed waits for the writer of its slot explicitly. Each receiver's incoming links are
then evened out: receives over a link loaded past its share move to one below its share
that holds the chunk in time (:data:`BALANCE_ROUNDS`).

Only AllGather and Broadcast (a send carries chunks of the result, the same slots on
every rank), out of or in place, on the same ranks, are spliced; anything else (a
relay through scratch, a chunk no neighbour holds in time, a thread block that would
outgrow the runtime's steps) leaves the compile as without it. The verifier checks the
spliced file in full and the replay times it, like any file the compile writes.
The file as steps to edit, and the program they make, are
:mod:`te_ccl.compiler.splice_steps`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat

from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler.splice_steps import NoSplice, Step, Tb, latest, nop, read_steps, to_program
from te_ccl.deadline import check
from te_ccl.lower.msccl.ir import Program
from te_ccl.runtime_limits import RuntimeLimits
from te_ccl.simulate.msccl import prepared, replay
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.model import READS_SRC, RECVS, SENDS, Algo

__all__ = ["Spliced", "splice", "step_times", "SPLICED_KINDS", "SPLICING", "BALANCE_ROUNDS", "SEARCH",
           "WEIGHTS"]

SPLICED_KINDS = (CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST)
SEARCH = 64  # steps looked through for an order a read keeps (:meth:`_Splice._after`)
SPLICING = "splicing the previous file"  # the stage a deadline names
BALANCE_ROUNDS = 4  # passes moving receives off a receiver's overloaded incoming links
WEIGHTS = (0.02, 0.01, 0.0)  # how much a sender's holding the chunk earlier counts
#   against its link's load (a second until it holds it as this many seconds of load):
#   the choice of senders is greedy, so each weight makes another file; they are tried
#   in turn by the caller, which replays each, until one is close enough to the bound

Tree = tuple[int, int, tuple[tuple[int, int], ...]]  # chunk, owner, (receiver, sender)…


@dataclass(frozen=True)
class Spliced:
    """The spliced program, each chunk's tree in it (for the schedule that reports its
    routes), how many receives moved, and its busiest direct link's seconds of sending
    (a link carries one message at a time: no replay of the file ends sooner)."""

    program: Program
    trees: tuple[Tree, ...]
    moved: int
    busiest_s: float


@dataclass(eq=False)
class _Move:
    """A receive served from another sender: ``k`` sends to ``b`` the chunks of ``new``
    (replacing ``old``) once ``got`` (the steps that give ``k`` them, the latest at
    ``when``) are done."""

    k: int
    b: int
    when: float
    new: Step
    got: list[Step]
    old: Step


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
           limits: RuntimeLimits, times: list[float], early: float) -> Spliced | str:
    """``algo``, written for ``collective`` on ``before`` (``times``:
    :func:`step_times`), spliced onto ``after``, which lacks some of ``before``'s links,
    with the weight ``early`` (:data:`WEIGHTS`); or why not, as a sentence."""
    if collective.kind not in SPLICED_KINDS:
        return f"a {collective.kind.value} file is not spliced"
    if algo.ngpus != collective.nranks or len({g.id for g in algo.gpus}) != algo.ngpus:
        return "the file's ranks are not the collective's"
    try:
        return _Splice(algo, before, after, collective, limits, times, early).run()
    except NoSplice as e:
        return str(e)


class _Splice:
    """One splice: the file as mutable thread blocks, the moves, the program."""

    def __init__(self, algo: Algo, before: Topology, after: Topology, collective: Collective,
                 limits: RuntimeLimits, done: list[float], early: float) -> None:
        self.algo, self.limits, self.early = algo, limits, early
        self.chunk_bytes = collective.size_bytes / algo.nchunksperloop
        self.names = [after.gpu(r) for r in collective.ranks]
        self.owner_of = (lambda x: collective.ranks.index(collective.root)) \
            if collective.root is not None else (lambda x: x // (algo.nchunksperloop
                                                                 // algo.ngpus))
        self.tbs, self.received = read_steps(algo, done)
        self.sent_by = {r: s for s, r in self.received.items()}
        self.writer: dict[tuple[int, int], Step] = {}
        self.parent: dict[tuple[int, int], int] = {}  # (rank, slot) -> rank it came from
        self.first_read: dict[tuple[int, int], float] = {}
        self.readers: dict[tuple[int, int], list[Step]] = defaultdict(list)
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                for st in tb.steps:
                    for x in st.writes():
                        self.writer[rank, x] = st
                        self.parent[rank, x] = tb.recv if st.op in RECVS else rank
                    for x in st.reads():
                        self.readers[rank, x].append(st)
                        self.first_read[rank, x] = min(self.first_read.get((rank, x), st.t),
                                                       st.t)
        self.bandwidth = {(x.src, x.dst): x.bandwidth_Bps for x in after.links}
        self.lost = {(r, tb.send) for r, tbs in self.tbs.items() for tb in tbs
                     if tb.send >= 0 and before.has_link(self.names[r], self.names[tb.send])
                     and not after.has_link(self.names[r], self.names[tb.send])}
        self.load: dict[tuple[int, int], float] = defaultdict(float)  # chunks per link
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                if tb.send >= 0 and (rank, tb.send) not in self.lost:
                    self.load[rank, tb.send] += sum(st.cnt for st in tb.steps if st.op in SENDS)
        self.removed: set[Step] = set()
        self.work: list[Step] = []  # receives to serve from another sender
        self.moves: dict[tuple[int, int], list[_Move]] = defaultdict(list)  # by link
        self.users: dict[Step, list[_Move]] = defaultdict(list)  # moves a step gives chunks
        self.new: dict[Step, Step] = {}  # a receive removed -> the one that replaces it

    def run(self) -> Spliced:
        if not self.lost:  # the file as it is: nothing to move
            return Spliced(to_program(self.algo, self.tbs), self._trees(), 0, self._busiest_s())
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                if (rank, tb.send) in self.lost:
                    self._unsend(tb)
        self._serve()
        for _ in range(BALANCE_ROUNDS):
            if not self._balance():
                break
            self._serve()
        self._rewire()
        longest = max(len(tb.steps) for tbs in self.tbs.values() for tb in tbs)
        if longest > self.limits.max_steps:
            raise NoSplice(f"a thread block would have {longest} steps, over the runtime's "
                            f"{self.limits.max_steps}")
        return Spliced(to_program(self.algo, self.tbs), self._trees(), sum(map(len, self.moves.values())),
                       self._busiest_s())

    def _link(self, a: int, b: int) -> float | None:
        return self.bandwidth.get((self.names[a], self.names[b]))

    def _unsend(self, tb: Tb) -> None:
        """Take the sends of ``tb`` off its lost link (a receive-copy-send keeps its
        receive); their receives are served again."""
        for st in tb.steps:
            if st.op not in SENDS:
                continue
            if st.op == "rcs":
                st.op = "r"
            elif st.op == "s":
                self.removed.add(st)
            else:
                raise NoSplice(f"rank {tb.rank} sends a {st.op} step over a lost link")
            self._lose(self.received[st])
        if not any(st.op in SENDS for st in tb.steps):
            tb.send = -1

    def _lose(self, rv: Step) -> None:
        """Serve ``rv`` from another sender; a receive that passes its chunk on (rcs)
        loses that send, whose receiver is served again too."""
        while True:
            if rv.op not in ("r", "rcs") or rv.dst is None or rv.dst[0] != "o":
                raise NoSplice(f"rank {rv.tb.rank} receives over a lost link into a "
                                f"{rv.op} step that does not write the result")
            self.removed.add(rv)
            self.work.append(rv)
            self._undo(rv)
            if rv.op != "rcs":
                return
            self.load[rv.tb.rank, rv.tb.send] -= rv.cnt
            rv = self.received[rv]

    def _undo(self, w: Step) -> None:
        """``w`` no longer gives its chunks when the moves that waited for it were placed:
        they are served again (and so are the moves that waited for theirs)."""
        todo = [w]
        while todo:
            for move in self.users.pop(todo.pop(), ()):
                moves = self.moves[move.k, move.b]
                if move in moves:
                    moves.remove(move)
                    self.load[move.k, move.b] -= move.new.cnt
                    for x in move.new.writes():  # no chunk from it until served again
                        self.writer[move.b, x] = move.old
                    self.work.append(move.old)
                    todo.append(move.new)

    def _below(self, k: int, b: int, x: int) -> bool:
        """Does ``k`` get slot ``x`` through ``b``?"""
        seen = set()
        while k != b:
            p = self.parent.get((k, x))
            if p is None or p == k or k in seen:
                return False
            seen.add(k)
            k = p
        return True

    def _holds(self, k: int, b: int, slots: range) -> list[Step] | None:
        """The steps that give ``k`` the chunks of ``slots`` (not through ``b``), if it
        gets them all."""
        got = []
        for x in slots:
            w = self.writer.get((k, x))
            if w is None or w in self.removed or self._below(k, b, x):
                return None
            got.append(w)
        return got

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
                late = [r for x in slots for r in self.readers[b, x]
                        if r not in self.removed and r.t <= when]
                if any(r.op not in ("s", "rcs") for r in late):
                    continue
                cost = (self.load[k, b] + rv.cnt) * self.chunk_bytes / bw + self.early * when
                if best is None or cost < best[0]:
                    best = (cost, k, when, got, late)
            if best is None:
                raise NoSplice(f"no neighbour of rank {b} holds slots "
                                f"{slots.start}..{slots.stop - 1} in time")
            _, k, when, got, late = best
            self.load[k, b] += rv.cnt
            for x in slots:
                self.parent[b, x] = k
            new = Step("r", rv.src, rv.dst, rv.cnt, when, rv.tb)
            self.new[rv] = new
            for x in slots:
                self.writer[b, x] = new
            move = _Move(k, b, when, new, list(dict.fromkeys(got)), rv)
            self.moves[k, b].append(move)
            for w in move.got:
                self.users[w].append(move)
            for r in late:  # b passed the chunk on before it has it now
                self.removed.add(r)
                self.load[b, r.tb.send] -= r.cnt
                self._lose(self.received[r])

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

    def _rewire(self) -> None:
        """Drop the steps removed, point what waited for them at the latest of what they
        waited for (their dependency, the step before them), add the moves' thread
        blocks, and make every read wait for its slot's writer where the thread block's
        order or what it waits for does not already say so."""
        stands = self._waits_now()  # of the file's steps, before the moves' are added
        for (k, b), moves in sorted(self.moves.items()):
            self._add(k, b, sorted(moves, key=lambda m: m.when))
        fresh = set(self.new.values())
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                self._repoint(rank, tb, stands, fresh)
            self.tbs[rank] = [tb for tb in tbs if tb.steps]
        self._order_reads()

    def _waits_now(self) -> Callable[[Step | None], Step | None]:
        """What waiting for a step means once the steps removed and the nops are gone."""
        before: dict[Step, Step | None] = {}
        for tbs in self.tbs.values():
            for tb in tbs:
                for i, st in enumerate(tb.steps):
                    before[st] = tb.steps[i - 1] if i else None
        memo: dict[Step, Step | None] = {}

        def stands(x: Step | None) -> Step | None:
            """What waiting for ``x`` means now: ``x``, or for a step removed or a nop
            (nops publish no flag), the latest of what it waited for (its dependency,
            the step before it). AllGather and Broadcast write each slot once, so such
            a wait only paces the file (the order a read needs is its slot's writer's,
            which the last pass keeps): one wait is enough."""
            def kept(y: Step | None) -> bool:
                return y is None or (y not in self.removed and y.op != "nop")

            todo = [x]
            while todo:  # without recursion: chains of steps removed can be long
                y = todo[-1]
                if kept(y) or y in memo:
                    todo.pop()
                    continue
                pending = [z for z in (y.dep, before[y]) if not kept(z) and z not in memo]
                if pending:
                    todo.extend(pending)
                    continue
                todo.pop()
                waits = [z if kept(z) else memo[z] for z in (y.dep, before[y])]
                memo[y] = max((z for z in waits if z is not None), key=lambda z: z.t,
                              default=None)
            return x if kept(x) else memo[x]

        return stands

    def _repoint(self, rank: int, tb: Tb, stands: Callable[[Step | None], Step | None],
                 fresh: set[Step]) -> None:
        """``tb``'s steps without those removed, each waiting for what its wait
        ``stands`` for and, for a read, the ``fresh`` receives (of the moves) that write
        its slots, through nops where it waits for more than one step; a peer none of
        its steps uses any more is dropped."""
        out: list[Step] = []
        for st in tb.steps:
            if st in self.removed:
                continue
            paced = stands(st.dep)
            deps = [paced] if paced is not None else []
            if st.op == "s" or st.op in READS_SRC:
                deps += [w for w in map(self.writer.get, zip(repeat(rank), st.reads()))
                         if w in fresh]
            if len(deps) > 1:
                deps = sorted(latest(deps), key=lambda d: d.t)
            deps = [d for d in deps if d.tb is not tb]
            if st.op == "nop" and not deps:
                continue
            if not deps and out and out[-1].op == "nop":
                deps = [out.pop().dep]
            out.extend(nop(d, tb) for d in deps[:-1])
            st.dep = deps[-1] if deps else None
            out.append(st)
        tb.steps = out
        if not any(st.op in SENDS for st in tb.steps):
            tb.send = -1  # no connection over a link that is gone
        if not any(st.op in RECVS for st in tb.steps):
            tb.recv = -1

    def _order_reads(self) -> None:
        """Make every read wait for its slot's writer where its thread block's order or
        what it waits for does not already say so (its wait, else a nop before it)."""
        prior = {st: tb.steps[i - 1] if i else None for tbs in self.tbs.values()
                 for tb in tbs for i, st in enumerate(tb.steps)}
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                out = []
                for st in tb.steps:
                    for x in st.reads():
                        w = self.writer.get((rank, x))
                        if w is None or w.tb is tb or self._after(w, st, prior):
                            continue
                        if st.dep is None:
                            st.dep = w
                        else:
                            out.append(nop(w, tb))
                    out.append(st)
                tb.steps = out

    def _after(self, w: Step, st: Step, prior: dict[Step, Step | None]) -> bool:
        """Does ``st`` wait for ``w`` through what it waits for, the steps before it and
        the sends its receives take (looked for among steps done no earlier than ``w``
        in the previous replay, at most :data:`SEARCH` of them; beyond, not known)?"""
        seen, todo = {st}, [st]
        while todo and len(seen) <= SEARCH:
            x = todo.pop()
            for p in (x.dep, prior.get(x), self.sent_by.get(x) if x.op in RECVS else None):
                if p is w:
                    return True
                if p is not None and p not in seen and p.t >= w.t and p not in self.removed:
                    seen.add(p)
                    todo.append(p)
        return False

    def _add(self, k: int, b: int, moves: list[_Move]) -> None:
        """The thread blocks of the moves from ``k`` to ``b``, in the order their chunks
        are at ``k``, on channels that connection does not use yet, at most
        ``max_steps`` steps each."""
        used = {tb.chan for tb in self.tbs[k] if tb.send == b} | \
            {tb.chan for tb in self.tbs[b] if tb.recv == k}
        free = (c for c in range(self.limits.max_channels) if c not in used)
        sender = receiver = None
        for move in moves:
            when, rv, got = move.when, move.new, move.got
            if sender is None or len(sender.steps) + len(got) > self.limits.max_steps:
                chan = next(free, None)
                if chan is None:
                    raise NoSplice(f"no free channel from rank {k} to rank {b}")
                sender, receiver = Tb(k, b, -1, chan), Tb(b, -1, k, chan)
                self.tbs[k].append(sender)
                self.tbs[b].append(receiver)
            sender.steps.extend(nop(w, sender) for w in got[:-1])
            send = Step("s", rv.dst, rv.dst, rv.cnt, when, sender)
            send.dep = got[-1]
            sender.steps.append(send)
            self.sent_by[rv] = send
            rv.tb = receiver
            receiver.steps.append(rv)

    def _busiest_s(self) -> float:
        """Seconds the busiest direct link spends sending the spliced file's chunks."""
        sent: dict[tuple[int, int], int] = defaultdict(int)
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                if tb.send >= 0:
                    sent[rank, tb.send] += sum(st.cnt for st in tb.steps if st.op in SENDS)
        return max((n * self.chunk_bytes / bw for (a, b), n in sent.items()
                    if (bw := self._link(a, b))), default=0.0)

    def _trees(self) -> tuple[Tree, ...]:
        """Each chunk's tree: which rank each rank has it from now."""
        edges: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for (rank, x), sender in self.parent.items():
            if sender != rank:
                edges[x].append((rank, sender))
        return tuple((x, self.owner_of(x), tuple(sorted(e))) for x, e in sorted(edges.items()))


