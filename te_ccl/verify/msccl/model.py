"""Typed, immutable view of an MSCCL XML algorithm, as the runtime reads it (docs/verify.md).

Numbers hold the value the runtime's ``strtol(..., 0)`` yields (``010`` is 8). A missing
attribute of a ``gpu``/``tb``/``step`` gets the default listed in :data:`DEFAULTS` (and a
finding from the reader); ``min_bytes``/``max_bytes`` are ``None`` when absent, as in the
legacy format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Step", "Threadblock", "Gpu", "Algo", "STEP_TYPES", "BUFFERS", "SENDS", "RECVS",
           "READS_SRC", "WRITES_DST", "DEFAULTS"]

# type -> (sends, receives), as the runtime's primitives run them
STEP_TYPES: dict[str, tuple[bool, bool]] = {
    "s": (True, False), "r": (False, True), "rcs": (True, True), "rrs": (True, True),
    "rrc": (False, True), "rrcs": (True, True), "cpy": (False, False), "re": (False, False),
    "nop": (False, False),
}
SENDS = frozenset(t for t, (s, _) in STEP_TYPES.items() if s)
RECVS = frozenset(t for t, (_, r) in STEP_TYPES.items() if r)
READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})   # what the kernel reads
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})  # what the kernel writes
BUFFERS = ("i", "o", "s")

DEFAULTS: dict[str, dict[str, int | str]] = {
    "gpu": {"id": -1, "i_chunks": 0, "o_chunks": 0, "s_chunks": 0},
    "tb": {"id": -1, "send": -1, "recv": -1, "chan": 0},
    "step": {"s": -1, "type": "nop", "srcbuf": "i", "srcoff": -1, "dstbuf": "o", "dstoff": -1,
             "cnt": 0, "depid": -1, "deps": -1, "hasdep": 0},
}


class Step(NamedTuple):
    """One ``<step>``; ``position`` is its index in the thread block, ``line`` its line.

    A named tuple rather than a dataclass: files have millions of steps and a tuple is
    built ~5x faster.
    """

    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    position: int = 0
    line: int = 0

    @property
    def sends(self) -> bool:
        return self.type in SENDS

    @property
    def receives(self) -> bool:
        return self.type in RECVS


@dataclass(frozen=True)
class Threadblock:
    """One ``<tb>``: a single send peer and recv peer (-1 none) on channel ``chan``."""

    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]
    line: int = 0


@dataclass(frozen=True)
class Gpu:
    """One ``<gpu>`` with its buffer sizes in chunks."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[Threadblock, ...]
    line: int = 0

    def chunks(self, buf: str) -> int:
        """Declared chunk count of buffer ``i``, ``o`` or ``s``."""
        if buf == "o":
            return self.o_chunks
        if buf == "i":
            return self.i_chunks
        if buf == "s":
            return self.s_chunks
        raise KeyError(buf)


@dataclass(frozen=True)
class Algo:
    """The ``<algo>`` element and everything under it, in file order."""

    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int
    min_bytes: int | None
    max_bytes: int | None
    gpus: tuple[Gpu, ...]
    source: str = "<string>"

    def gpu(self, rank: int) -> Gpu | None:
        """The first ``<gpu>`` with this id (what the runtime of that rank loads)."""
        return next((g for g in self.gpus if g.id == rank), None)

    @property
    def nthreadblocks(self) -> int:
        return sum(len(g.threadblocks) for g in self.gpus)

    @property
    def nsteps(self) -> int:
        return sum(len(t.steps) for g in self.gpus for t in g.threadblocks)
