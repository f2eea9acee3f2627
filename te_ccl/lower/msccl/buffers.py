"""Buffer layout: where each chunk lives in the ``i``, ``o`` and ``s`` buffers of each rank.

Out-of-place, a chunk's sources hold it at ``i[in_index]`` and its destinations need it
at ``o[out_index]`` (``Collective.chunks()``). In-place, the runtime passes one buffer:

* allgather and gather use only ``o``: input chunk ``j`` of the rank at position ``p``
  is ``o[p·c + j]`` (``i_chunks = 0``), as NCCL's in-place allgather;
* every other collective uses only ``i``: output chunk ``j`` of reducescatter/scatter
  at position ``p`` is ``i[p·c + j]``, otherwise ``i[out_index]`` (``o_chunks = 0``).

``nchunksperloop`` is the count the runtime divides into chunks (``count × mult``, mult
= ngpus for allgather, reducescatter and alltoall). Scratch slots are first named by
chunk id (:func:`scratch_slot`) and numbered 0.. per GPU at the end (:func:`compact_scratch`).

>>> from te_ccl.collective import Collective, CollectiveKind
>>> lay = buffer_layout(Collective(CollectiveKind.ALLGATHER, 1024, (0, 1, 2, 3), inplace=True))
>>> lay.i_chunks, lay.o_chunks, lay.nchunksperloop
(0, 4, 4)
>>> chunk = lay.collective.chunks()[2]
>>> lay.home(2, chunk), lay.out(2, chunk), lay.out(0, chunk)
(Slot(buf=<Buf.OUTPUT: 'o'>, index=2), Slot(buf=<Buf.OUTPUT: 'o'>, index=2), Slot(buf=<Buf.OUTPUT: 'o'>, index=2))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from te_ccl.collective.model import Chunk, Collective, CollectiveKind
from te_ccl.deadline import checked
from te_ccl.errors import SpecError
from te_ccl.lower.msccl.ir import LOWERING, Buf, Op, Slot

if TYPE_CHECKING:
    from te_ccl.lower.msccl.instructions import Instr

__all__ = ["Layout", "buffer_layout", "scratch_slot", "compact_scratch", "resolve_slots",
           "ResolvedSlots", "SlotPair"]

K = CollectiveKind
_GROW = {K.ALLGATHER, K.GATHER}            # output is N× the input
_SHRINK = {K.REDUCESCATTER, K.SCATTER}     # input is N× the output
_MULT_N = {K.ALLGATHER, K.REDUCESCATTER, K.ALLTOALL}


@dataclass(frozen=True)
class Layout:
    """Buffer sizes and chunk slots of one collective; positions index ``collective.ranks``.

    ``scratch_order``: per (position, chunk id), the rank of the chunk among the scratch
    slots of that GPU, where :mod:`~te_ccl.lower.msccl.merge` lays them out so that
    chunks moved in one step are adjacent; else scratch goes in chunk order."""

    collective: Collective
    scratch_order: dict[tuple[int, int], int] | None = field(default=None, compare=False,
                                                             hash=False, repr=False)

    @cached_property
    def _pos(self) -> dict[int, int]:
        return {r: p for p, r in enumerate(self.collective.ranks)}

    @cached_property
    def chunks(self) -> tuple[Chunk, ...]:
        """The collective's chunks, built once (``Collective.chunks`` builds them per call)."""
        return self.collective.chunks()

    @cached_property
    def _sources(self) -> tuple[bytearray, ...]:
        return self._masks("sources")

    @cached_property
    def _destinations(self) -> tuple[bytearray, ...]:
        return self._masks("destinations")

    def _masks(self, field: str) -> tuple[bytearray, ...]:
        """Per chunk id, a byte per position: 1 where the rank is in the chunk's ``field``.

        ``rank in chunk.destinations`` scans a tuple of up to N ranks; at 1024 GPUs the
        N × chunks lookups of a lowering would cost billions of comparisons.
        """
        masks = []
        for c in self.chunks:
            mask = bytearray(self.collective.nranks)
            for r in getattr(c, field):
                mask[self._pos[r]] = 1
            masks.append(mask)
        return tuple(masks)

    @property
    def _c(self) -> int:
        return self.collective.chunks_per_rank

    @property
    def _logical_in(self) -> int:
        return self._c if self.collective.kind in _GROW else self.collective.nchunks

    @property
    def _logical_out(self) -> int:
        return self._c if self.collective.kind in _SHRINK else self.collective.nchunks

    @property
    def i_chunks(self) -> int:
        if self.collective.inplace and self.collective.kind in _GROW:
            return 0
        return self._logical_in

    @property
    def o_chunks(self) -> int:
        if self.collective.inplace and self.collective.kind not in _GROW:
            return 0
        return self._logical_out

    @property
    def overwrites_inputs(self) -> bool:
        """In place, every kind but allgather and gather receives into the input buffer,
        so a receive (or the copy of a staged chunk) may overwrite a value still to be
        sent and waits for that send."""
        return self.collective.inplace and self.collective.kind not in _GROW

    @property
    def nchunksperloop(self) -> int:
        kind = self.collective.kind
        if kind in _MULT_N or kind in (K.ALLREDUCE, K.BROADCAST, K.REDUCE):
            return self.collective.nchunks
        return self._c  # gather/scatter: the runtime's count is one rank's piece

    def scratch(self, pos: int, chunk_id: int) -> Slot:
        """The placeholder scratch slot of ``chunk_id`` on the rank at ``pos``
        (:func:`compact_scratch` numbers it)."""
        if self.scratch_order is None:
            return scratch_slot(chunk_id)
        return Slot(Buf.SCRATCH, self.scratch_order[(pos, chunk_id)])

    def home(self, pos: int, chunk: Chunk) -> Slot | None:
        """Where the rank at ``pos`` holds ``chunk`` at the start (None: not a source)."""
        return self._slot(pos, chunk, 0)

    def out(self, pos: int, chunk: Chunk) -> Slot | None:
        """Where the rank at ``pos`` must hold ``chunk`` at the end (None: not needed)."""
        return self._slot(pos, chunk, 1)

    def _slot(self, pos: int, chunk: Chunk, which: int) -> Slot | None:
        """:meth:`home` (``which`` 0) or :meth:`out` (1)."""
        if not self._by_position[which][pos][chunk.id]:
            return None
        moving = self._moving_slots[which]
        if moving is None:
            return self._fixed_slots[which][chunk.id][1]
        buf, index = moving
        return Slot(buf, pos * self._c + index(chunk))

    def homes(self, pos: int) -> dict[int, Slot]:
        """:meth:`home` of every chunk the rank at ``pos`` holds at the start, by chunk id.
        Every GPU's instructions need all of them (a million slots at 1024 GPUs), so the
        slots that do not depend on the position are built once."""
        return self._slots_at(pos, 0)

    def outs(self, pos: int) -> dict[int, Slot]:
        """:meth:`out` of every chunk the rank at ``pos`` needs at the end, by chunk id."""
        return self._slots_at(pos, 1)

    def _slots_at(self, pos: int, which: int) -> dict[int, Slot]:
        """:meth:`homes` (``which`` 0) or :meth:`outs` (1) of the rank at ``pos``."""
        mask = self._by_position[which][pos]
        moving = self._moving_slots[which]
        if moving is None:
            return dict(compress(self._fixed_slots[which], mask))
        buf, index = moving
        base = pos * self._c
        return {c.id: Slot(buf, base + index(c)) for c in compress(self.chunks, mask)}

    @cached_property
    def _moving_slots(self) -> tuple[tuple[Buf, Callable[[Chunk], int]] | None, ...]:
        """For home and output slots, (buffer, chunk index) where the slot moves with the
        rank's position (in place: allgather and gather inputs, reducescatter and scatter
        outputs), else None."""
        inplace, kind = self.collective.inplace, self.collective.kind
        return ((Buf.OUTPUT, attrgetter("in_index")) if inplace and kind in _GROW else None,
                (Buf.INPUT, attrgetter("out_index")) if inplace and kind in _SHRINK else None)

    @cached_property
    def _fixed_slots(self) -> tuple[tuple[tuple[int, Slot], ...], tuple[tuple[int, Slot], ...]]:
        """(chunk id, home slot) and (chunk id, output slot) of every chunk, where they do
        not depend on the rank's position."""
        out = Buf.OUTPUT if not self.collective.inplace or self.collective.kind in _GROW \
            else Buf.INPUT
        return (tuple((c.id, Slot(Buf.INPUT, c.in_index)) for c in self.chunks),
                tuple((c.id, Slot(out, c.out_index)) for c in self.chunks))

    @cached_property
    def _by_position(self) -> tuple[list[bytes], list[bytes]]:
        """Per position, a byte per chunk id: 1 where the rank is a source of the chunk, and
        where it needs the chunk at the end: a destination, or a source that keeps its own
        piece in its output (allgather, broadcast's root, the root's own piece of gather and
        scatter, which lists no destination)."""
        if not self.chunks:
            return [b""] * self.collective.nranks, [b""] * self.collective.nranks
        sources = np.array(self._sources, dtype=np.uint8)
        needed = np.array(self._destinations, dtype=np.uint8)
        kind = self.collective.kind
        keeps = np.array([not c.reduce and (kind in (K.ALLGATHER, K.BROADCAST) or (
            kind in (K.GATHER, K.SCATTER) and not c.destinations)) for c in self.chunks])
        needed |= sources * keeps[:, None].astype(np.uint8)
        return ([row.tobytes() for row in sources.T],
                [row.tobytes() for row in needed.T])


def buffer_layout(collective: Collective) -> Layout:
    """The layout of ``collective``; custom demands have no MSCCL collective."""
    if collective.kind is K.CUSTOM:
        raise SpecError("custom demands have no MSCCL collective type; write the schedule "
                        "as JSON (-o FILE.json or --format json)", key="--format")
    return Layout(collective)


def scratch_slot(chunk_id: int) -> Slot:
    """A placeholder scratch slot for ``chunk_id``; :func:`compact_scratch` numbers it."""
    return Slot(Buf.SCRATCH, chunk_id)


def compact_scratch(used: set[Slot]) -> dict[Slot, Slot]:
    """Number the placeholder scratch slots of one GPU 0.. in chunk order."""
    scratch = sorted(s for s in used if s.buf is Buf.SCRATCH)
    return {s: Slot(Buf.SCRATCH, i) for i, s in enumerate(scratch)}


SlotPair = tuple[Slot | None, Slot | None]
_SEND, _RECV = Op.SEND, Op.RECV


@dataclass(frozen=True)
class ResolvedSlots:
    """Where each instruction's printed ``src``/``dst`` point, computed on demand.

    Scratch placeholders are numbered per GPU. As msccl-tools writes them, an ``s``
    names the receiver's destination slot and an ``r`` the sender's source slot, so the
    only cross-GPU facts kept are one slot per edge end (not a pair per instruction:
    at 1024 GPUs that table alone took gigabytes), keyed by ``id(edge)`` (hashing an
    edge reads all its fields).
    """

    scratch: dict[int, dict[Slot, Slot]]
    sent_from: dict[int, Slot | None]
    lands_in: dict[int, Slot | None]

    def printed(self, g: int, ins: Instr) -> SlotPair:
        fix = self.scratch[g].get  # a slot not renumbered (or None) prints as itself
        op = ins.op
        if op is _SEND:
            return fix(ins.src, ins.src), self.lands_in[id(ins.send)]
        if op is _RECV:
            return self.sent_from[id(ins.recv)], fix(ins.dst, ins.dst)
        return fix(ins.src, ins.src), fix(ins.dst, ins.dst)

    def s_chunks(self, g: int) -> int:
        return len(self.scratch[g])


def resolve_slots(instrs: dict[int, list[Instr]]) -> ResolvedSlots:
    """Number every GPU's scratch slots and record the slot at each end of every edge."""
    slots = ResolvedSlots({}, {}, {})
    sent_from, lands_in = slots.sent_from, slots.lands_in
    for g, seq in checked(instrs.items(), LOWERING, every=64):
        used = {x for i in seq for x in (i.src, i.dst, *i.reads, *i.writes) if x is not None}
        slots.scratch[g] = compact_scratch(used)
    for g, seq in instrs.items():
        fix = slots.scratch[g].get
        for i in seq:
            if i.send is not None:
                src = i.src if i.src is not None else i.dst
                sent_from[id(i.send)] = fix(src, src)
            if i.recv is not None:
                lands_in[id(i.recv)] = fix(i.dst, i.dst)
    return slots
