"""One GPU's chunks during symbolic execution: values, last writer, readers, race checks.

Chunks live in flat arrays: buffer ``i``, ``o`` and ``s`` are consecutive regions (each
as large as the steps and the input data reach), and an aliased buffer (in-place,
:meth:`.Layout.alias`) is an offset into another region, so a chunk is one integer and
costs a few bytes plus its (shared) packed value. Race
detection follows FastTrack: the last writer of each chunk and the readers since, as
``(block, node, step)``; an access is checked against them with
:class:`~.hb.HappensBefore`. Readers are recorded only while a later step will still
write the chunk (the write counts are known from the program), so chunks that are
written once and then only read (all of AllGather) keep no reader lists.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence

import numpy as np

from te_ccl.verify.msccl.hb import HappensBefore
from te_ccl.verify.msccl.kernel import Transmission
from te_ccl.verify.msccl.layout import Layout, Slot
from te_ccl.verify.msccl.model import BUFFERS, READS_SRC, WRITES_DST, Gpu
from te_ccl.verify.msccl.values import GARBAGE, Packed

__all__ = ["Memory", "Report"]

# report(block, step position, kind, detail) with kind "uninitialized-read" or "data-race"
Report = Callable[[int, int, str, str], None]


def _reach(programs: Sequence[list[Transmission]]
           ) -> tuple[dict[str, int], list[tuple[str, int, int]]]:
    """Per buffer, one past the last chunk the programs touch (declared sizes may be far
    larger, and a fused ``re`` with a larger last ``cnt`` reaches past its own step's),
    and the ``(buffer, offset, cnt)`` each write covers: one pass over the programs."""
    end: dict[str, int] = {}
    writes: list[tuple[str, int, int]] = []
    get, wrote = end.get, writes.append
    for program in programs:
        for steps, _, _, _, _ in program:   # unpacked: faster than by name
            _, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, _, _, _, _, _ = steps[0]
            if len(steps) > 1:  # a fused re: the last step's cnt from each step's source
                cnt = steps[-1].cnt
                srcoff = max(sub.srcoff for sub in steps)
            if kind in WRITES_DST:
                wrote((dstbuf, dstoff, cnt))
                if dstoff + cnt > get(dstbuf, -1):
                    end[dstbuf] = dstoff + cnt
            if kind in READS_SRC and srcoff + cnt > get(srcbuf, -1):
                end[srcbuf] = srcoff + cnt
    return {buf: max(reach, 0) for buf, reach in end.items()}, writes


def _write_counts(writes: list[tuple[str, int, int]], offsets: dict[str, int],
                  total: int) -> array:
    """How many of ``writes`` (``(buffer, offset, cnt)``, inside the memory: the bounds
    rules stop the run before any write outside) cover each of the ``total`` chunks."""
    if not writes:
        return array("i", [0]) * total
    bufs, offs, cnts = zip(*writes, strict=True)
    count = np.array(cnts, np.int64)
    first = np.fromiter(map(offsets.__getitem__, bufs), np.int64, len(writes)) + offs
    # every covered chunk: each write's first chunk repeated cnt times, plus 0..cnt-1
    chunks = np.repeat(first - np.cumsum(count) + count, count) + np.arange(count.sum())
    return array("i", np.bincount(chunks, minlength=total).astype(np.int32).tobytes())


class Memory:
    """The chunks of GPU ``gpu.id``; ``tb_ids[b]`` names block ``b`` in findings."""

    def __init__(self, gpu: Gpu, layout: Layout, programs: Sequence[list[Transmission]],
                 hb: HappensBefore, tb_ids: list[int], report: Report) -> None:
        self.gpu = gpu.id
        alias = {buf: layout.alias(gpu.id, buf) for buf in BUFFERS}
        sizes = dict.fromkeys(BUFFERS, 0)
        reach, writes = _reach(programs)
        for buf, end in reach.items():
            target, shift = alias[buf]
            sizes[target] = max(sizes[target], shift + end)
        initial = layout.initial_packed(gpu.id)
        for target, k in initial:
            sizes[target] = max(sizes[target], k + 1)
        self.bases = {"i": 0, "o": sizes["i"], "s": sizes["i"] + sizes["o"]}
        self.sizes = sizes
        self.offsets = {buf: self.bases[t] + shift for buf, (t, shift) in alias.items()}
        total = sum(sizes.values())
        self.values: list[Packed | None] = [None] * total
        for (target, k), value in initial.items():
            self.values[self.bases[target] + k] = value
        self.wblock = array("i", [-1]) * total
        self.wnode = array("i", [-1]) * total
        self.wpos = array("i", [0]) * total
        self.left = _write_counts(writes, self.offsets, total)  # writes still to come
        self.readers: dict[int, dict[int, tuple[int, int]]] = {}
        self.raced: set[int] = set()
        self.hb, self.tb_ids, self.report = hb, tb_ids, report
        self.last = hb.last   # each block's current node

    # --- lookups for the report ----------------------------------------------------------
    def index(self, slot: Slot) -> int | None:
        buf, k = slot
        return self.bases[buf] + k if buf in self.bases and 0 <= k < self.sizes[buf] else None

    def value(self, slot: Slot) -> Packed | None:
        """The packed value a chunk holds (None: never written, no input); called for
        every output chunk, so :meth:`index` is written out."""
        buf, k = slot
        if buf in self.bases and 0 <= k < self.sizes[buf]:
            return self.values[self.bases[buf] + k]
        return None

    def holds(self, buf: str, first: int, want: list[Packed]) -> bool:
        """Whether the chunks of ``buf`` from ``first`` on hold ``want`` (False also
        when they lie outside the memory: :meth:`value` tells chunk by chunk)."""
        if buf not in self.bases or first < 0 or first + len(want) > self.sizes[buf]:
            return False
        start = self.bases[buf] + first
        return self.values[start:start + len(want)] == want

    def writer(self, slot: Slot) -> tuple[int, int, int] | None:
        """``(gpu, tb id, step)`` of the chunk's last writer."""
        i = self.index(slot)
        if i is None or self.wblock[i] < 0:
            return None
        return (self.gpu, self.tb_ids[self.wblock[i]], self.wpos[i])

    def name(self, i: int) -> str:
        buf = next(b for b in BUFFERS if 0 <= i - self.bases[b] < self.sizes[b])
        return f"{buf}[{i - self.bases[buf]}]"

    # --- accesses -------------------------------------------------------------------------
    def read(self, b: int, pos: int, i: int) -> Packed:
        """Block ``b`` (step ``pos``) reads chunk ``i``."""
        value = self.values[i]
        if value is None:
            self.report(b, pos, "uninitialized-read", f"reads {self.name(i)}, which holds no data")
            value = GARBAGE
        w = self.wblock[i]
        if w >= 0 and w != b and i not in self.raced and not self.hb.ordered(b, w, self.wnode[i]):
            self._race(b, pos, i, "read", w, self.wpos[i], "wrote")
        if self.left[i]:
            readers = self.readers.get(i)
            if readers is None:
                readers = self.readers[i] = {}
            readers[b] = (self.last[b], pos)
        return value

    def write(self, b: int, pos: int, i: int, value: Packed) -> None:
        """Block ``b`` (step ``pos``) writes ``value`` into chunk ``i``."""
        readers = self.readers.pop(i, None) if self.readers else None
        w = self.wblock[i]
        if (w >= 0 or readers) and i not in self.raced:
            if w >= 0 and w != b and not self.hb.ordered(b, w, self.wnode[i]):
                self._race(b, pos, i, "write", w, self.wpos[i], "wrote")
            for r, (node, rpos) in (readers or {}).items():
                if i in self.raced:
                    break
                if r != b and not self.hb.ordered(b, r, node):
                    self._race(b, pos, i, "write", r, rpos, "read")
        self.values[i] = value
        self.wblock[i] = b
        self.wnode[i] = self.last[b]
        self.wpos[i] = pos
        self.left[i] -= 1

    # --- runs of chunks at once, where no finding can arise -----------------------------
    def readable(self, b: int, first: int, cnt: int) -> bool:
        """Whether :meth:`read` of chunks ``first..first+cnt-1`` by block ``b`` would
        report nothing: each holds data and was last written by no block, by ``b``, or
        all by one block whose last write to them is ordered before."""
        end = first + cnt
        return (0 <= first and end <= len(self.values) and None not in self.values[first:end]
                and self._ordered_writes(b, first, end))

    def writable(self, b: int, first: int, cnt: int) -> bool:
        """Whether :meth:`write` of those chunks would report nothing, as for
        :meth:`readable`, and no block but ``b`` has read them since their last write."""
        end = first + cnt
        if first < 0 or end > len(self.values):
            return False
        readers = self.readers
        if readers:
            for i in range(first, end):
                r = readers.get(i)
                if r is not None and (len(r) > 1 or b not in r):
                    return False
        return self._ordered_writes(b, first, end)

    def _ordered_writes(self, b: int, first: int, end: int) -> bool:
        writers = set(self.wblock[first:end])
        writers.discard(-1)
        writers.discard(b)
        if not writers:
            return True
        if len(writers) > 1 or min(self.wblock[first:end]) < 0 or b in self.wblock[first:end]:
            return False
        # one writer: its latest write among them ordered before orders them all
        return self.hb.ordered(b, writers.pop(), max(self.wnode[first:end]))

    def read_run(self, b: int, pos: int, first: int, cnt: int) -> list[Packed]:
        """:meth:`read` of ``cnt`` chunks from ``first`` on, once :meth:`readable`."""
        end = first + cnt
        left = self.left
        if any(left[first:end]):
            readers, mark = self.readers, (self.last[b], pos)
            for i in range(first, end):
                if left[i]:
                    r = readers.get(i)
                    if r is None:
                        r = readers[i] = {}
                    r[b] = mark
        return self.values[first:end]

    def write_run(self, b: int, pos: int, first: int, values: list[Packed]) -> None:
        """:meth:`write` of ``values`` into the chunks from ``first`` on, once
        :meth:`writable`."""
        n = len(values)
        end = first + n
        readers = self.readers
        if readers:
            for i in range(first, end):
                readers.pop(i, None)
        self.values[first:end] = values
        self.wblock[first:end] = array("i", [b]) * n
        self.wnode[first:end] = array("i", [self.last[b]]) * n
        self.wpos[first:end] = array("i", [pos]) * n
        self.left[first:end] = array("i", [k - 1 for k in self.left[first:end]])

    def _race(self, b: int, pos: int, i: int, access: str, other: int, other_pos: int,
              other_access: str) -> None:
        self.raced.add(i)
        self.report(b, pos, "data-race", f"{access} of {self.name(i)} is unordered with tb "
                    f"{self.tb_ids[other]} step {other_pos}, which {other_access} it")
