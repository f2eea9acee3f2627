"""The previous file as steps a splice edits, and back (:mod:`te_ccl.compiler.splice`).

A step here is mutable: what it waits for is another step (not a thread block's index),
and it carries the time the previous file's replay had it done, the order the splice
keeps. :func:`read_steps` turns the file's thread blocks into these, pairing each send
with its receive; :func:`to_program` writes the edited thread blocks as the lowering's
IR, numbering steps and waits again.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.lower.msccl.ir import Buf, Gpu, Op, Program, Slot, Threadblock
from te_ccl.lower.msccl.ir import Step as IrStep
from te_ccl.verify.msccl.model import READS_SRC, RECVS, SENDS, WRITES_DST, Algo

__all__ = ["NoSplice", "Step", "Tb", "latest", "nop", "read_steps", "to_program"]

_OPS = {op.value: op for op in Op}  # the file's step types as the lowering's IR names them
_BUFS = {buf.value: buf for buf in Buf}


class NoSplice(Exception):
    """Why this file is not spliced (the compile goes on without it)."""


class Step:
    """A step of the file being spliced: its fields, what it waits for (a step, None) and
    when the previous file's replay had it done."""

    __slots__ = ("op", "src", "dst", "cnt", "dep", "t", "tb")

    def __init__(self, op: str, src: tuple[str, int] | None, dst: tuple[str, int] | None,
                 cnt: int, t: float, tb: Tb) -> None:
        self.op, self.src, self.dst, self.cnt, self.t, self.tb = op, src, dst, cnt, t, tb
        self.dep: Step | None = None

    def reads(self) -> range:
        """The output slots the step reads (none if it reads no output slot)."""
        src = self.src
        return range(src[1], src[1] + self.cnt) if src is not None and src[0] == "o" \
            and self.op in READS_SRC else range(0)

    def writes(self) -> range:
        """The output slots the step writes."""
        dst = self.dst
        return range(dst[1], dst[1] + self.cnt) if dst is not None and dst[0] == "o" \
            and self.op in WRITES_DST else range(0)


class Tb:
    """A thread block being spliced: peers, channel, steps."""

    __slots__ = ("rank", "send", "recv", "chan", "steps")

    def __init__(self, rank: int, send: int, recv: int, chan: int) -> None:
        self.rank, self.send, self.recv, self.chan = rank, send, recv, chan
        self.steps: list[Step] = []


def read_steps(algo: Algo, done: list[float]
               ) -> tuple[dict[int, list[Tb]], dict[Step, Step]]:
    """Each rank's thread blocks of ``algo`` as steps (``done``: when each step, in file
    order, was done in the previous replay), and the receive of each send."""
    tbs_of: dict[int, list[Tb]] = {}
    order: list[Step] = []
    when = iter(done)
    for gpu in algo.gpus:
        tbs = tbs_of[gpu.id] = [Tb(gpu.id, tb.send, tb.recv, tb.chan)
                                for tb in gpu.threadblocks]
        for tb, src in zip(tbs, gpu.threadblocks, strict=True):
            tb.steps = [Step(st.type, None if st.srcoff < 0 else (st.srcbuf, st.srcoff),
                             None if st.dstoff < 0 else (st.dstbuf, st.dstoff), st.cnt,
                             next(when), tb) for st in src.steps]
            order += tb.steps
        for tb, src in zip(tbs, gpu.threadblocks, strict=True):
            for step, st in zip(tb.steps, src.steps, strict=True):
                if st.depid >= 0:
                    step.dep = _waited(tbs, st.depid, st.deps, gpu.id)
    return tbs_of, _matched(algo, order)


def _waited(tbs: list[Tb], depid: int, deps: int, rank: int) -> Step:
    """The step a step of rank ``rank`` waits for (a file whose rank has no such step
    was not written by a lowering, and is not spliced)."""
    if depid >= len(tbs) or not 0 <= deps < len(tbs[depid].steps):
        raise NoSplice(f"a step of rank {rank} waits for step {deps} of its thread block "
                       f"{depid}, which it does not have")
    return tbs[depid].steps[deps]


def _matched(algo: Algo, order: list[Step]) -> dict[Step, Step]:
    """The receive of each send (``order``: the steps in file order): the k-th receive
    on a connection (channel, sender, receiver) takes its k-th send."""
    sends: dict[tuple[int, int, int], list[Step]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[Step]] = defaultdict(list)
    i = 0
    for gpu in algo.gpus:
        for tb in gpu.threadblocks:
            for st in tb.steps:
                if st.type in SENDS:
                    sends[tb.chan, gpu.id, tb.send].append(order[i])
                if st.type in RECVS:
                    recvs[tb.chan, tb.recv, gpu.id].append(order[i])
                i += 1
    if any(len(out) != len(recvs.get(conn, ())) for conn, out in sends.items()):
        raise NoSplice("its sends and receives do not match on a connection")
    return {s: r for conn, out in sends.items() for s, r in zip(out, recvs[conn], strict=True)}


def to_program(algo: Algo, tbs_of: dict[int, list[Tb]]) -> Program:
    """The thread blocks ``tbs_of`` (per rank of ``algo``) as the lowering's program:
    steps and waits numbered in their thread blocks, a step's ``hasdep`` set where
    another waits for it; ``algo``'s name, protocol, chunks and buffers."""
    ids: dict[Step | None, tuple[int, int]] = {None: (-1, -1)}
    waited: set[Step | None] = set()
    slots: dict[tuple[str, int] | None, Slot | None] = {None: None}
    for tbs in tbs_of.values():
        for t, tb in enumerate(tbs):
            for i, st in enumerate(tb.steps):
                ids[st] = (t, i)
                waited.add(st.dep)
                for where in (st.src, st.dst):
                    if where not in slots:
                        slots[where] = Slot(_BUFS[where[0]], where[1])
    make = IrStep._make  # no keyword handling: the steps of 256 GPUs are many
    gpus = []
    for gpu in algo.gpus:
        tbs = tuple(Threadblock(t, tb.send, tb.recv, tb.chan, tuple(
            make((i, _OPS[st.op], slots[st.src], slots[st.dst], st.cnt, *ids[st.dep],
                  st in waited)) for i, st in enumerate(tb.steps)))
            for t, tb in enumerate(tbs_of[gpu.id]))
        gpus.append(Gpu(gpu.id, gpu.i_chunks, gpu.o_chunks, gpu.s_chunks, tbs))
    a = algo
    nchannels = 1 + max(tb.chan for tbs in tbs_of.values() for tb in tbs)
    return Program(a.name, a.proto, nchannels, a.nchunksperloop, a.ngpus, a.coll,
                   bool(a.inplace), a.min_bytes or 0, a.max_bytes or 0, tuple(gpus))


def latest(steps: list[Step]) -> list[Step]:
    """The latest step of each thread block among ``steps`` (it implies the others)."""
    last: dict[int, Step] = {}
    for st in steps:
        key = id(st.tb)
        if key not in last or st.t > last[key].t:
            last[key] = st
    return list(last.values())


def nop(dep: Step, tb: Tb) -> Step:
    """A step of ``tb`` that only waits for ``dep``."""
    step = Step("nop", None, None, 0, dep.t, tb)
    step.dep = dep
    return step
