"""The edit a splice makes of the previous file (:mod:`te_ccl.compiler.splice`).

:class:`Edit` holds the file as steps (:mod:`te_ccl.compiler.splice_steps`) with what
each rank holds and from whom, takes the sends off the lost links, gives up what must
be served again, and, once a subclass has chosen a sender for every receive lost
(:meth:`Edit._reroute`), rewires the waits so that nothing waits for a step removed
and every read waits for its slot's writer, and writes the program.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat

from te_ccl.collective.model import Collective
from te_ccl.compiler.splice_steps import NoSplice, Step, Tb, latest, nop, read_steps, to_program
from te_ccl.lower.msccl.ir import Program
from te_ccl.runtime_limits import RuntimeLimits
from te_ccl.topology.model import Topology
from te_ccl.verify.msccl.model import READS_SRC, RECVS, SENDS, Algo

__all__ = ["Edit", "Move", "Spliced", "Tree", "SEARCH"]

SEARCH = 64  # steps looked through for an order a read keeps (:meth:`Edit._after`)

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
class Move:
    """A receive served from another sender: ``k`` sends to ``b`` the chunks of ``new``
    (replacing ``old``) once ``got`` (the steps that give ``k`` them, the latest at
    ``when``) are done."""

    k: int
    b: int
    when: float
    new: Step
    got: list[Step]
    old: Step


class Edit:
    """One splice: the file as mutable thread blocks, what is lost and given up, the
    moves, the program. A subclass's :meth:`_reroute` gives every receive in ``work``
    a sender (:meth:`_assign`)."""

    def __init__(self, algo: Algo, before: Topology, after: Topology, collective: Collective,
                 limits: RuntimeLimits, done: list[float]) -> None:
        self.algo, self.limits = algo, limits
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
        writer, parent, readers, first_read = \
            self.writer, self.parent, self.readers, self.first_read
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                for st in tb.steps:
                    for x in st.writes():
                        writer[rank, x] = st
                        parent[rank, x] = tb.recv if st.op in RECVS else rank
                    for x in st.reads():
                        readers[rank, x].append(st)
                        if first_read.get((rank, x), st.t) >= st.t:
                            first_read[rank, x] = st.t
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
        self.moves: dict[tuple[int, int], list[Move]] = defaultdict(list)  # by link
        self.users: dict[Step, list[Move]] = defaultdict(list)  # moves a step gives chunks
        self.new: dict[Step, Step] = {}  # a receive removed -> the one that replaces it

    def run(self) -> Spliced:
        if not self.lost:  # the file as it is: nothing to move
            return Spliced(to_program(self.algo, self.tbs), self._trees(), 0,
                           self._busiest_s())
        for rank, tbs in self.tbs.items():
            for tb in tbs:
                if (rank, tb.send) in self.lost:
                    self._unsend(tb)
        self._reroute()
        self._rewire()
        longest = max(len(tb.steps) for tbs in self.tbs.values() for tb in tbs)
        if longest > self.limits.max_steps:
            raise NoSplice(f"a thread block would have {longest} steps, over the runtime's "
                            f"{self.limits.max_steps}")
        for rank, tbs in self.tbs.items():
            index = {id(tb): i for i, tb in enumerate(tbs)}
            waited = max((index[id(st.dep.tb)] for tb in tbs for st in tb.steps
                          if st.dep is not None), default=0)
            if len(tbs) > self.limits.max_threadblocks or waited > self.limits.max_depid:
                raise NoSplice(f"rank {rank} would have {len(tbs)} thread blocks, more than "
                               "the runtime runs or a wait can name")
        return Spliced(to_program(self.algo, self.tbs), self._trees(),
                       sum(map(len, self.moves.values())), self._busiest_s())

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

    def _reroute(self) -> None:
        """Give every receive in ``work`` a sender (:meth:`_assign`)."""
        raise NotImplementedError

    def _passed_on(self, b: int, slots: range, when: float) -> list[Step] | None:
        """The steps of rank ``b`` that read ``slots`` by ``when``, to give up if the
        chunks arrive then (:meth:`_assign`); None where one does not just pass them on
        (only a send is given up and its receive served again)."""
        late = [r for x in slots for r in self.readers[b, x]
                if r not in self.removed and r.t <= when]
        return None if any(r.op not in ("s", "rcs") for r in late) else late

    def _assign(self, rv: Step, k: int, when: float, got: list[Step], late: list[Step]
                ) -> None:
        """``k`` sends ``rv``'s chunks to its rank once ``got`` are done (``when``: its
        receive's time); ``late``, the steps of that rank that passed them on before
        then, are given up and their receives served again."""
        b, slots = rv.tb.rank, rv.writes()
        self.load[k, b] += rv.cnt
        for x in slots:
            self.parent[b, x] = k
        new = Step("r", rv.src, rv.dst, rv.cnt, when, rv.tb)
        self.new[rv] = new
        for x in slots:
            self.writer[b, x] = new
        move = Move(k, b, when, new, list(dict.fromkeys(got)), rv)
        self.moves[k, b].append(move)
        for w in move.got:
            self.users[w].append(move)
        for r in late:  # b passed the chunk on before it has it now
            self._give_up(r)

    def _give_up(self, r: Step) -> None:
        """``r``, a step passing a chunk on, is dropped: its receive is served again."""
        self.removed.add(r)
        self.load[r.tb.rank, r.tb.send] -= r.cnt
        self._lose(self.received[r])

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
        removed, writer = self.removed, self.writer
        for st in tb.steps:
            if st in removed:
                continue
            paced = st.dep
            if paced is not None and (paced in removed or paced.op == "nop"):
                paced = stands(paced)  # most waits stand as they are: no call
            deps = [paced] if paced is not None else []
            if st.op == "s" or st.op in READS_SRC:
                deps += [w for w in map(writer.get, zip(repeat(rank), st.reads()))
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

    def _add(self, k: int, b: int, moves: list[Move]) -> None:
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


