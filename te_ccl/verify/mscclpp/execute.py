"""Symbolic execution of every thread block of every rank, with vector clocks.

Buffers hold symbolic values: a sorted tuple of the input pieces summed into them
(``(rank, unit)``; a copy keeps the tuple, a reduction concatenates, so adding a piece
twice shows). Units are chunks cut into the thread-block groups' slices. Blocks run one
op at a time in any order that respects what blocks: a ``wait`` needs one more signal on
the paired channel than it has consumed, ``sem_acquire`` a release, ``barrier`` every
block it names, a packet read (LL) a packet written to the slot. When nothing can run
and some block has ops left, the plan deadlocks in every order (each blocking op only
waits for counts that never fall), and the blocked ops are reported.

Races: every op advances its block's vector clock; signals, releases, barriers and
packets carry clocks to whoever they release. A read of a slot whose last write does
not happen before it, or a write over a read or write that does not, is a race: a run
of the plan may see other data than this execution did.

Assumptions, stated: a ``pipeline`` runs its ops once over the whole range (its
iterations repeat the same ops on slices); a port-channel put has landed when a later
signal on the channel is waited for (the proxy keeps the order); ``flush`` only waits
for the sender's own puts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from te_ccl.deadline import check
from te_ccl.verify.mscclpp.model import SIGNALS, WAITS, Op, Plan, Ref

__all__ = ["Outcome", "execute"]

Value = tuple[tuple[int, int], ...]
Loc = tuple[int, str, int]  # rank, buffer, unit


@dataclass
class Outcome:
    memory: dict[Loc, Value]
    errors: list[str] = field(default_factory=list)
    ops_run: int = 0


@dataclass
class _Thread:
    gpu: int
    block: int
    ops: list[Op]
    index: int
    pc: int = 0
    arrived: bool = False  # at the barrier it stands at


class _Machine:
    def __init__(self, plan: Plan, alias, initial: dict[Loc, Value]) -> None:
        self.plan, self.alias = plan, alias
        self.L = plan.tbg_parts
        self.memory: dict[Loc, Value] = dict(initial)
        self.errors: list[str] = []
        self.threads = [_Thread(g.id, b.id, _flat(b.ops), 0) for g in plan.gpus for b in g.blocks]
        for i, t in enumerate(self.threads):
            t.index = i
        n = len(self.threads)
        self.clock = [np.zeros(n, dtype=np.int64) for _ in range(n)]
        self.inbox: dict[tuple, list[np.ndarray]] = defaultdict(list)  # channel → signal clocks
        self.taken: dict[tuple, int] = defaultdict(int)
        self.sems: dict[tuple[int, int], list[np.ndarray]] = defaultdict(list)
        self.sem_taken: dict[tuple[int, int], int] = defaultdict(int)
        acquires: dict[tuple[int, int], int] = defaultdict(int)
        for t in self.threads:
            for op in t.ops:
                for s in op.semaphores if op.name == "sem_acquire" else ():
                    acquires[(t.gpu, s)] += 1
        for g in plan.gpus:
            for s, init in enumerate(g.semaphores):
                # credits past one more than are acquired change no verdict (the semaphore
                # ends above zero either way), and a huge initial value is not held
                credits = min(init, acquires[(g.id, s)] + 1)
                self.sems[(g.id, s)] = [np.zeros(n, dtype=np.int64) for _ in range(credits)]
        self.barriers: dict[tuple[int, int], list[np.ndarray]] = defaultdict(list)
        self.passed: dict[tuple[int, int, int], int] = defaultdict(int)
        self.written: dict[Loc, tuple[int, int, Op]] = {}  # thread, its clock, the op
        self.reads: dict[Loc, list[tuple[int, int, Op]]] = defaultdict(list)
        self.packets: dict[Loc, np.ndarray] = {}
        self.raced: set[Loc] = set()

    # slots -------------------------------------------------------------------------------
    def units(self, ref: Ref, rank: int | None = None) -> list[Loc]:
        """The locations of ``ref`` (on ``rank``, for a switch ref's member)."""
        total = ref.size * self.L
        lo = ref.index * self.L + ref.part * total // ref.parts
        hi = ref.index * self.L + (ref.part + 1) * total // ref.parts
        r = ref.rank if rank is None else rank
        return [self.alias((r, ref.buf, u)) for u in range(lo, hi)]

    def read(self, t: _Thread, op: Op, locs: list[Loc]) -> list[Value | None]:
        me = self.clock[t.index]
        out = []
        for loc in locs:
            w = self.written.get(loc)
            if w is not None and me[w[0]] < w[1] and loc not in self.raced:
                self.raced.add(loc)
                self.errors.append(f"race: {op.where()} reads {_loc(loc)}, written by {w[2].where()} "
                                   "with nothing ordering the two")
            self.reads[loc].append((t.index, int(me[t.index]), op))
            out.append(self.memory.get(loc))
        return out

    def write(self, t: _Thread, op: Op, locs: list[Loc], values: list[Value | None]) -> None:
        me = self.clock[t.index]
        for loc, v in zip(locs, values, strict=True):
            before = [self.written[loc]] if loc in self.written else []
            for who in before + self.reads.get(loc, []):
                if who[0] != t.index and me[who[0]] < who[1] and loc not in self.raced:
                    self.raced.add(loc)
                    self.errors.append(f"race: {op.where()} writes {_loc(loc)}, which {who[2].where()} "
                                       "accesses with nothing ordering the two")
            self.written[loc] = (t.index, int(me[t.index]), op)
            self.reads.pop(loc, None)
            if v is None:
                self.memory.pop(loc, None)
            else:
                self.memory[loc] = v

    def join(self, t: _Thread, other: np.ndarray) -> None:
        np.maximum(self.clock[t.index], other, out=self.clock[t.index])

    # blocking ----------------------------------------------------------------------------
    def blocked(self, t: _Thread, op: Op) -> str | None:
        """Why ``op`` cannot run now (None: it can)."""
        if op.name in WAITS:
            for peer, k in op.pairs:
                key = (peer, t.gpu, op.channel_type, k)
                if len(self.inbox[key]) <= self.taken[key]:
                    return (f"waits for signal {self.taken[key] + 1} on its {op.channel_type} "
                            f"channel from rank {peer}, which sends {len(self.inbox[key])}")
        if op.name == "sem_acquire":
            need: dict[int, int] = defaultdict(int)
            for s in op.semaphores:
                need[s] += 1
            for s, n in need.items():
                if len(self.sems[(t.gpu, s)]) < self.sem_taken[(t.gpu, s)] + n:
                    return f"acquires semaphore {s}, released {len(self.sems[(t.gpu, s)])} times"
        if op.name == "barrier" and op.barrier is not None:
            bid, n = op.barrier
            gen = self.passed[(t.gpu, bid, t.index)]
            if len(self.barriers[(t.gpu, bid)]) < (gen + 1) * n:
                return f"waits at barrier {bid} for {n} blocks"
        if self.plan.protocol == "LL":
            for ref in op.packet_reads():
                for loc in self.units(ref):
                    if loc not in self.packets:
                        return f"reads packets of {_loc(loc)}, which nothing writes"
        return None

    def step(self, t: _Thread, op: Op) -> None:
        self.clock[t.index][t.index] += 1
        me = self.clock[t.index]
        name = op.name
        if name in WAITS:
            for peer, k in op.pairs:
                key = (peer, t.gpu, op.channel_type, k)
                self.join(t, self.inbox[key][self.taken[key]])
                self.taken[key] += 1
        elif name == "sem_acquire":
            for s in op.semaphores:
                self.join(t, self.sems[(t.gpu, s)][self.sem_taken[(t.gpu, s)]])
                self.sem_taken[(t.gpu, s)] += 1
        elif name == "barrier" and op.barrier is not None:
            bid, n = op.barrier
            gen = self.passed[(t.gpu, bid, t.index)]
            for c in self.barriers[(t.gpu, bid)][gen * n:(gen + 1) * n]:
                self.join(t, c)
            self.passed[(t.gpu, bid, t.index)] += 1
        if self.plan.protocol == "LL":
            for ref in op.packet_reads():
                for loc in self.units(ref):
                    self.join(t, self.packets[loc])
        self.data(t, op)
        me = self.clock[t.index]
        if name in SIGNALS:
            for peer, k in op.pairs:
                self.inbox[(t.gpu, peer, op.channel_type, k)].append(me.copy())
        elif name == "sem_release":
            for s in op.semaphores:
                self.sems[(t.gpu, s)].append(me.copy())

    def arrive_barrier(self, t: _Thread, op: Op) -> None:
        if op.barrier is not None:
            self.barriers[(t.gpu, op.barrier[0])].append(self.clock[t.index].copy())

    # data --------------------------------------------------------------------------------
    def data(self, t: _Thread, op: Op) -> None:
        name = op.name
        if name in ("put", "pws", "pwsf", "ppkt", "get", "copy", "cpkt", "upkt", "rppkt"):
            for i, dst in enumerate(op.dst):
                src = op.src[i] if i < len(op.src) else op.src[0] if op.src else None
                if src is None:
                    self.errors.append(f"{op.where()}: no source for destination {i}")
                    continue
                self.move(t, op, [src], dst, packet=name in ("ppkt", "cpkt", "rppkt"))
        elif name in ("re", "res", "rre", "rres", "repkt", "respkt", "recpkt", "recspkt"):
            if not op.src or not op.dst:
                self.errors.append(f"{op.where()}: a reduction needs sources and a destination")
                return
            local_out = 2 if name in ("recpkt", "recspkt") else 1
            result = self.sum(t, op, op.src)
            if result is None:
                return
            for i, dst in enumerate(op.dst):
                packet = (name in ("recpkt", "recspkt") and i == 1) or (i >= local_out and name.endswith("pkt"))
                self.store(t, op, dst, result, packet)
        elif name == "glres":
            if op.src and op.dst:
                group = op.src[0].group
                parts = [Ref(m, op.src[0].buf, op.src[0].index, op.src[0].size, op.src[0].part,
                             op.src[0].parts) for m in group]
                result = self.sum(t, op, parts)
                if result is not None:
                    for m in op.dst[0].group:
                        self.store(t, op, _on(op.dst[0], m), result, False)
        elif name in ("gstore", "gstorepkt"):
            if op.src and op.dst:
                values = self.read(t, op, self.units(op.src[0]))
                for m in op.dst[0].group:
                    self.store(t, op, _on(op.dst[0], m), values, name == "gstorepkt")

    def move(self, t: _Thread, op: Op, srcs: list[Ref], dst: Ref, packet: bool) -> None:
        values = self.read(t, op, self.units(srcs[0]))
        self.store(t, op, dst, values, packet)

    def sum(self, t: _Thread, op: Op, refs: list[Ref]) -> list[Value | None] | None:
        columns = [self.read(t, op, self.units(r)) for r in refs]
        if len({len(c) for c in columns}) != 1:
            self.errors.append(f"{op.where()}: its buffers differ in size")
            return None
        out: list[Value | None] = []
        for row in zip(*columns, strict=True):
            if any(v is None for v in row):
                out.append(None)
            else:
                out.append(tuple(sorted(x for v in row for x in v)))
        return out

    def store(self, t: _Thread, op: Op, dst: Ref, values: list[Value | None], packet: bool) -> None:
        locs = self.units(dst)
        if len(locs) != len(values):
            self.errors.append(f"{op.where()}: source and destination differ in size")
            return
        self.write(t, op, locs, values)
        if packet:
            for loc in locs:
                self.packets[loc] = self.clock[t.index].copy()

    # the run -----------------------------------------------------------------------------
    def run(self) -> int:
        ran = 0
        progress = True
        while progress:
            progress = False
            for t in self.threads:
                check("checking the MSCCL++ plan")
                while t.pc < len(t.ops):
                    op = t.ops[t.pc]
                    if op.name == "barrier" and not t.arrived:
                        self.arrive_barrier(t, op)
                        t.arrived = True
                    if self.blocked(t, op) is not None:
                        break
                    self.step(t, op)
                    t.arrived = False
                    t.pc += 1
                    ran += 1
                    progress = True
        stuck = [t for t in self.threads if t.pc < len(t.ops)]
        for t in stuck[:5]:
            op = t.ops[t.pc]
            self.errors.append(f"deadlock: {op.where()} {self.blocked(t, op)}")
        if len(stuck) > 5:
            self.errors.append(f"deadlock: {len(stuck) - 5} more blocks stuck")
        if not stuck:
            self.leftovers()
        return ran

    def leftovers(self) -> None:
        """Every signal waited for and every release acquired: what is left would release
        the next run's waits early."""
        for (src, dst, ctype, k), sent in sorted(self.inbox.items()):
            if len(sent) != self.taken[(src, dst, ctype, k)]:
                self.errors.append(f"rank {src} signals its {ctype} channel to rank {dst} "
                                   f"{len(sent)} time(s); rank {dst} waits "
                                   f"{self.taken[(src, dst, ctype, k)]}")
        for (gpu, s), rel in sorted(self.sems.items()):
            if len(rel) != self.sem_taken[(gpu, s)]:
                init = self.plan.gpus[gpu].semaphores[s]
                self.errors.append(f"rank {gpu} semaphore {s} ends at "
                                   f"{len(rel) - self.sem_taken[(gpu, s)]}, not its initial {init}")


def _flat(ops: list[Op]) -> list[Op]:
    out = []
    for op in ops:
        out.extend(op.inner if op.name == "pipeline" else [op])
    return out


def _on(ref: Ref, rank: int) -> Ref:
    return Ref(rank, ref.buf, ref.index, ref.size, ref.part, ref.parts)


def _loc(loc: Loc) -> str:
    return f"rank {loc[0]} {loc[1]}[unit {loc[2]}]"


def execute(plan: Plan, alias, initial: dict[Loc, Value]) -> Outcome:
    """Run ``plan`` from ``initial`` memory; ``alias`` maps a location to the one it
    shares memory with (in-place buffers)."""
    m = _Machine(plan, alias, initial)
    ran = m.run()
    return Outcome(m.memory, m.errors, ran)
