"""Pass 2: the deliveries as steps on every GPU, each value in a slot written once.

Every value a GPU holds of a chunk is a *version* in its own slot: the input slot for the
rank's own data, a fresh scratch slot for each value received or summed, the output slot
for the last value a rank must hold. A slot is written once per run, so a remote put
never overwrites what a peer still reads; the only dependencies left are "read after
written", which the next pass turns into signal/wait (between GPUs) and semaphores
(between thread blocks of one GPU).

Steps carry a global order key ``(epoch, phase, ...)`` that every blocking step follows:
a wait comes after the signal it needs, a reduction after the values it adds. In-place
layouts are the exception to write-once: the final slot of a chunk may be another
chunk's input slot, so its value is written there by a local copy ordered after every
read of that input (:func:`_materialize`).

Deliveries with several sources were summed in the switch fabric: the contributors copy
their values to one scratch index, signal one of them (the *reducer*), which runs an NVLS
``glres`` over the group (a multimem load-reduce that stores the sum into every member's
scratch) and signals the receivers. A value one GPU sends that an NVLS switch copies to
several GPUs in one epoch is multicast likewise: the sender runs a ``gstore`` (a multimem
store) into every member's slot, its own included, and signals the receivers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import count

from te_ccl.collective.model import Chunk, Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.errors import TecclError
from te_ccl.lower.mscclpp.trace import Delivery, Source

__all__ = ["SUPPORTED", "Slot", "Step", "Batch", "NvlsEvent", "Program", "plan_layout",
           "build_program"]

K = CollectiveKind
SUPPORTED = (K.ALLGATHER, K.ALLREDUCE, K.REDUCESCATTER, K.ALLTOALL)
# key phases within an epoch: contributions reach the reducer, the reducer sums and
# tells the receivers, receivers take what arrived, then sends start
P_CONTRIB, P_SWITCH, P_RECEIVE, P_SEND = 0, 1, 2, 3
LAST = 1 << 30  # a key position after every chunk id


@dataclass(frozen=True, order=True)
class Slot:
    buf: str  # "i" | "o" | "s"
    index: int


@dataclass(eq=False)
class Step:
    """One operation of one GPU before thread blocks: ``name`` is the plan's op name
    (``put``, ``signal``, ``wait``, ``re``, ``copy``, ``glres``); ``after``: the steps of
    the same GPU whose results it reads (or whose reads it must not overtake)."""

    gpu: int
    key: tuple[int, ...]
    name: str
    src: tuple[Slot, ...] = ()
    dst: tuple[Slot, ...] = ()
    peer: int = -1  # put: the rank whose slot ``dst`` is; signal/wait: the peer
    batch: Batch | None = None
    event: NvlsEvent | None = None  # glres, and the copies contributing to it
    after: list[Step] = field(default_factory=list)
    anchor: Step | None = None  # a local step runs in the thread block of this one
    seq: int = 0  # creation order: breaks ties of ``key``


@dataclass(eq=False)
class Batch:
    """Puts (and local copies) of ``gpu`` for ``peer`` in one epoch phase, one signal
    after them, and the peer's one wait before it uses them."""

    gpu: int
    peer: int
    key: tuple[int, ...]
    items: list[Step] = field(default_factory=list)
    signal: Step | None = None
    wait: Step | None = None
    need: tuple[int, ...] = (1 << 40,)  # the earliest key the receiver needs it at


@dataclass(eq=False)
class NvlsEvent:
    """A sum formed in the switch fabric: ``group`` have their values at slot ``x``
    (copied to a scratch index all share unless they already are at one slot), and
    ``reducer`` runs ``glres`` into every member's slot ``y`` (their final slot when every
    member keeps the sum, else a scratch index). Or a multicast: ``reducer`` is the
    sender, the rest of ``group`` its receivers, ``x`` is ``y`` and the step a ``gstore``."""

    chunk: int
    group: tuple[int, ...]
    reducer: int
    x: Slot
    y: Slot
    glres: Step | None = None  # the glres, or a multicast's gstore
    ready: dict[int, Step] = field(default_factory=dict)  # receiver → step the sum is ready


@dataclass
class Version:
    slot: Slot
    epoch: int
    producer: Step | None  # None: the rank's input, there from the start
    readers: list[Step] = field(default_factory=list)


@dataclass
class Program:
    """Everything the thread-block pass needs."""

    collective: Collective
    nranks: int
    input_chunks: int
    output_chunks: int
    steps: dict[int, list[Step]]
    batches: list[Batch]
    events: list[NvlsEvent]
    scratch: dict[int, int]  # gpu → scratch chunks


@dataclass(frozen=True)
class PlanLayout:
    """MSCCL++'s buffers for one collective (its DSL's conventions): chunk counts, where
    a rank's own data is and where each chunk must end."""

    collective: Collective

    @property
    def input_chunks(self) -> int:
        c = self.collective
        return c.chunks_per_rank if c.kind is K.ALLGATHER else c.nchunks

    @property
    def output_chunks(self) -> int:
        c = self.collective
        return c.chunks_per_rank if c.kind is K.REDUCESCATTER else c.nchunks

    def home(self, chunk: Chunk) -> Slot:
        c = self.collective
        if c.kind is K.ALLGATHER and c.inplace:
            return Slot("o", chunk.out_index)
        return Slot("i", chunk.in_index)

    def final(self, chunk: Chunk) -> Slot:
        c = self.collective
        if not c.inplace or c.kind is K.ALLGATHER:
            return Slot("o", chunk.out_index)
        return Slot("i", chunk.in_index if c.kind is K.REDUCESCATTER else chunk.out_index)

    def holders(self, chunk: Chunk) -> tuple[int, ...]:
        """The ranks that must end with the chunk: its destinations, and for AllGather
        its source too (MSCCL++'s output holds every rank's part)."""
        c = self.collective
        extra = chunk.sources if c.kind is K.ALLGATHER else ()
        return tuple(sorted({c.ranks.index(r) for r in (*chunk.destinations, *extra)}))


def _cast_key(d: Delivery) -> tuple:
    """Deliveries of one multicast: one value, from one switch, in one epoch."""
    return (d.chunk, d.sources, d.via, d.arrive)


def plan_layout(collective: Collective) -> PlanLayout:
    """The layout, refusing what an MSCCL++ plan cannot express."""
    if collective.kind not in SUPPORTED:
        names = ", ".join(k.value for k in SUPPORTED)
        raise TecclError(f"MSCCL++ execution plans cover {names}; not {collective.kind.value}")
    return PlanLayout(collective)


class _Builder:
    def __init__(self, collective: Collective, deliveries: list[Delivery]) -> None:
        self.layout = plan_layout(collective)
        self.coll = collective
        self.n = collective.nranks
        self.chunks = {c.id: c for c in collective.chunks()}
        self.steps: dict[int, list[Step]] = defaultdict(list)
        self.seq = count()
        self.batches: dict[tuple[int, int, int, int], Batch] = {}
        self.versions: dict[tuple[int, int], list[Version]] = {}
        self.events: dict[tuple[int, tuple[Source, ...]], NvlsEvent] = {}
        self.deliveries = deliveries
        sums = {(d.chunk, d.sources) for d in deliveries if len(d.sources) > 1}
        fanout: dict[tuple, list[int]] = defaultdict(list)
        for d in deliveries:
            if len(d.sources) == 1 and d.via is not None:
                fanout[_cast_key(d)].append(d.dst)
        # multicasts: a value one switch copies to several GPUs at once, each its own slot
        self.casts = {k: (2 * len(sums) + i, tuple(dsts))
                      for i, (k, dsts) in enumerate((k, v) for k, v in fanout.items()
                                                    if len(v) > 1)}
        self.cast_events: dict[tuple, NvlsEvent] = {}
        self.scratch = dict.fromkeys(range(self.n), 2 * len(sums) + len(self.casts))
        self.left = Counter((d.dst, d.chunk) for d in deliveries)
        self.occupant: dict[tuple[int, Slot], int] = {}
        for c in self.chunks.values():
            for r in c.sources:
                p = collective.ranks.index(r)
                slot = self.layout.home(c)
                self.versions[(p, c.id)] = [Version(slot, -1, None)]
                self.occupant[(p, slot)] = c.id

    # slots and steps --------------------------------------------------------------------
    def fresh(self, gpu: int) -> Slot:
        self.scratch[gpu] += 1
        return Slot("s", self.scratch[gpu] - 1)

    def step(self, gpu: int, key: tuple[int, ...], name: str, **kw) -> Step:
        s = Step(gpu, key, name, seq=next(self.seq), **kw)
        self.steps[gpu].append(s)
        return s

    def version_at(self, gpu: int, chunk: int, epoch: int) -> Version:
        chain = self.versions.get((gpu, chunk), [])
        seen = [v for v in chain if v.epoch <= epoch]
        if not seen:
            raise TecclError(f"rank {self.coll.ranks[gpu]} sends chunk {chunk} in epoch "
                             f"{epoch} before it holds it")
        return seen[-1]

    def read(self, step: Step, version: Version) -> None:
        version.readers.append(step)
        if version.producer is not None:
            step.after.append(version.producer)

    def batch(self, gpu: int, peer: int, epoch: int, phase: int) -> Batch:
        k = (gpu, peer, epoch, phase)
        b = self.batches.get(k)
        if b is None:
            b = self.batches[k] = Batch(gpu, peer, (epoch, phase))
            b.signal = self.step(gpu, (epoch, phase, LAST, peer), "signal", peer=peer, batch=b)
            b.wait = self.step(peer, (1 << 40,), "wait", peer=gpu, batch=b)
        return b

    def deliver_to(self, b: Batch, item: Step | None, recv_key: tuple[int, ...],
                   made: Step | None = None) -> Step:
        """Add ``item`` to batch ``b`` (or, with no item, the step that ``made`` what the
        receiver reads in place: its signal follows it); the receiver's wait moves up to
        ``recv_key``."""
        if item is not None:
            item.batch = b
            b.items.append(item)
        if item is not None or made is not None:
            b.signal.after.append(item or made)
        b.need = min(b.need, recv_key)
        return b.wait

    # the passes ---------------------------------------------------------------------------
    def target(self, d: Delivery, chunk: Chunk) -> Slot:
        """Where the value a delivery makes lands: the final slot when it is the last value
        the rank holds and nothing else lives there, else a fresh scratch slot."""
        final = self.layout.final(chunk)
        last = self.left[(d.dst, d.chunk)] == 0
        if last and d.dst in self.layout.holders(chunk) and (d.dst, final) not in self.occupant:
            return final
        return self.fresh(d.dst)

    def deliver(self, d: Delivery) -> None:
        chunk = self.chunks[d.chunk]
        old = self.versions.get((d.dst, d.chunk), [])
        self.left[(d.dst, d.chunk)] -= 1
        adds = d.op == "reduce" and bool(old)
        if len(d.sources) == 1 and _cast_key(d) not in self.casts:
            src = d.sources[0]
            v = self.version_at(src.gpu, d.chunk, src.epoch)
            into = self.fresh(d.dst) if adds else self.target(d, chunk)
            put = self.step(src.gpu, (src.epoch, P_SEND, d.chunk, d.dst), "put",
                            src=(v.slot,), dst=(into,), peer=d.dst)
            self.read(put, v)
            ready = self.deliver_to(self.batch(src.gpu, d.dst, src.epoch, P_SEND), put,
                                    (d.arrive, P_RECEIVE, -1, src.gpu))
        else:
            into, ready = self.from_switch(d)
        received = Version(into, d.arrive, ready)
        if adds:
            prev = old[-1]
            re = self.step(d.dst, (d.arrive, P_RECEIVE, d.chunk, LAST), "re",
                           src=(prev.slot, into), dst=(self.target(d, chunk),), anchor=ready)
            self.read(re, prev)
            self.read(re, received)
            received = Version(re.dst[0], d.arrive, re)
        self.versions.setdefault((d.dst, d.chunk), []).append(received)

    def from_switch(self, d: Delivery) -> tuple[Slot, Step]:
        """A sum made in the switch fabric reaches ``d.dst``: the slot it lands in and the
        step after which it is there."""
        ev = self.event(d)
        y = ev.y
        if d.dst in ev.group:
            if d.dst == ev.reducer:
                return y, ev.glres
            b = self.batch(ev.reducer, d.dst, ev.glres.key[0], P_SWITCH)
            return y, self.deliver_to(b, None, (d.arrive, P_RECEIVE, -1, ev.reducer), ev.glres)
        into = self.fresh(d.dst)
        put = self.step(ev.reducer, (ev.glres.key[0], P_SWITCH, d.chunk, d.dst), "put",
                        src=(y,), dst=(into,), peer=d.dst, after=[ev.glres])
        b = self.batch(ev.reducer, d.dst, ev.glres.key[0], P_SWITCH)
        return into, self.deliver_to(b, put, (d.arrive, P_RECEIVE, -1, ev.reducer))

    def multicast(self, d: Delivery) -> NvlsEvent:
        """The ``gstore`` of the value ``d`` brings, into a slot all its receivers share:
        their final slot where each keeps it there and the sender is to hold it there too
        (out of place), else a scratch index of their own."""
        key = _cast_key(d)
        ev = self.cast_events.get(key)
        if ev is not None:
            return ev
        index, receivers = self.casts[key]
        src = d.sources[0]
        group = tuple(sorted({src.gpu, *receivers}))
        chunk = self.chunks[d.chunk]
        v = self.version_at(src.gpu, d.chunk, src.epoch)
        final = self.layout.final(chunk)
        holders = self.layout.holders(chunk)
        keeps = (not self.coll.inplace and src.gpu in holders and v.slot != final
                 and self.left[(src.gpu, d.chunk)] == 0
                 and self.versions[(src.gpu, d.chunk)][-1] is v  # the sender's last value
                 and all(m in holders and (m, final) not in self.occupant
                         and self.left[(m, d.chunk)] == (0 if m == d.dst else 1)
                         for m in receivers))
        y = final if keeps else Slot("s", index)
        ev = self.cast_events[key] = NvlsEvent(d.chunk, group, src.gpu, y, y)
        ev.glres = self.step(src.gpu, (src.epoch, P_SEND, d.chunk, -1), "gstore", src=(v.slot,),
                             dst=(y,), event=ev)
        self.read(ev.glres, v)
        if keeps:  # the sender's own copy is made: nothing left to materialize
            self.versions[(src.gpu, d.chunk)].append(Version(y, src.epoch, ev.glres))
        return ev

    def event(self, d: Delivery) -> NvlsEvent:
        if len(d.sources) == 1:
            return self.multicast(d)
        k = (d.chunk, d.sources)
        ev = self.events.get(k)
        if ev is not None:
            return ev
        gpus = [s.gpu for s in d.sources]
        if len(set(gpus)) != len(gpus):
            raise TecclError(f"two values of chunk {d.chunk} from one GPU are added in a "
                             "switch: an NVLS group has each rank once")
        group = tuple(sorted(gpus))
        i = len(self.events)
        values = {s.gpu: self.version_at(s.gpu, d.chunk, s.epoch) for s in d.sources}
        shared = {v.slot for v in values.values()}
        inplace = self.coll.inplace
        x = shared.pop() if len(shared) == 1 and not inplace else Slot("s", 2 * i)
        y = self.final_for_all(d, group) or Slot("s", 2 * i + 1)
        # reducers in turn: a reducer's links carry its sums into and out of the switch
        ev = self.events[k] = NvlsEvent(d.chunk, group, group[i % len(group)], x, y)
        t = d.arrive
        ev.glres = self.step(ev.reducer, (t, P_SWITCH, d.chunk, -1), "glres",
                             src=(x,), dst=(y,), event=ev)
        for s in d.sources:  # a value is offered as soon as the contributor has it
            v = values[s.gpu]
            made = v.producer
            if v.slot != x:
                made = self.step(s.gpu, (v.epoch, P_SEND, d.chunk, ev.reducer), "copy",
                                 src=(v.slot,), dst=(x,), event=ev)
                self.read(made, v)
            else:
                v.readers.append(ev.glres)
            if s.gpu == ev.reducer:
                if made is not None:
                    ev.glres.after.append(made)
            else:
                b = self.batch(s.gpu, ev.reducer, v.epoch, P_SEND)
                item = made if made is not None and made.name == "copy" else None
                ev.glres.after.append(self.deliver_to(b, item, (t, P_CONTRIB, -1, s.gpu),
                                                      made))
        return ev

    def final_for_all(self, d: Delivery, group: tuple[int, ...]) -> Slot | None:
        """The final slot, where the sum can be stored straight into every member: each
        member receives it as its last value of the chunk and must keep it there, and
        nothing else lives there (out of place)."""
        chunk = self.chunks[d.chunk]
        final = self.layout.final(chunk)
        same = [x for x in self.deliveries if x.chunk == d.chunk and x.sources == d.sources]
        ok = (not self.coll.inplace and sorted(x.dst for x in same) == list(group)
              and all(x.op == "copy" or not self.versions.get((x.dst, x.chunk))
                      for x in same)
              and all(m in self.layout.holders(chunk) for m in group)
              and all(self.left[(m, d.chunk)] == (0 if m == d.dst else 1) for m in group))
        return final if ok else None

    def finish(self) -> None:
        """Every holder's last value in its final slot (:func:`_materialize`)."""
        for c in self.chunks.values():
            final = self.layout.final(c)
            for p in self.layout.holders(c):
                chain = self.versions.get((p, c.id))
                if not chain:
                    raise TecclError(f"rank {self.coll.ranks[p]} never receives chunk {c.id}")
                last = chain[-1]
                if last.slot != final:
                    self._materialize(p, c.id, last, final)

    def _materialize(self, gpu: int, chunk: int, last: Version, final: Slot) -> None:
        """Copy ``last`` into ``final`` after every read of what the slot held."""
        occupant = self.occupant.get((gpu, final))
        readers = self.versions[(gpu, occupant)][0].readers if occupant is not None else []
        keys = [last.producer.key if last.producer else (-1,)] + [r.key for r in readers]
        copy = self.step(gpu, max(keys) + (LAST,), "copy", src=(last.slot,), dst=(final,),
                         anchor=last.producer)
        self.read(copy, last)
        copy.after.extend(readers)


def build_program(collective: Collective, deliveries: list[Delivery]) -> Program:
    """The steps of every GPU for ``deliveries`` (from :func:`trace_deliveries`)."""
    b = _Builder(collective, deliveries)
    for d in checked(deliveries, "lowering to an MSCCL++ plan", every=1024):
        b.deliver(d)
    b.finish()
    return Program(collective, b.n, b.layout.input_chunks, b.layout.output_chunks,
                   dict(b.steps), list(b.batches.values()),
                   [*b.events.values(), *b.cast_events.values()],
                   b.scratch)
