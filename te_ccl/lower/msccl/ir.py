"""The MSCCL program IR: what ``to_xml`` prints, one record per XML element.

Enum values are the XML tokens (as msccl-tools prints them); they are string enums, so
formatting a member prints its value.
Offsets and counts are in chunks, as the runtime reads them (docs/verify.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from te_ccl.runtime_limits import MSCCL

__all__ = ["Op", "Buf", "Slot", "Step", "Threadblock", "Gpu", "Program", "NO_PEER",
           "MAX_ELEMENTS", "LOWERING"]

NO_PEER = -1
LOWERING = "lowering the schedule to MSCCL XML"  # what a deadline reached interrupted
MAX_ELEMENTS = MSCCL.max_elements  # re-exported for the scale backend's budget


class Op(StrEnum):
    SEND = "s"
    RECV = "r"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_SEND = "rrs"
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_COPY_SEND = "rrcs"
    COPY = "cpy"
    REDUCE = "re"
    NOP = "nop"

    @property
    def sends(self) -> bool:
        return self in _SENDS

    @property
    def receives(self) -> bool:
        return self in _RECVS


_SENDS = {Op.SEND, Op.RECV_COPY_SEND, Op.RECV_REDUCE_SEND, Op.RECV_REDUCE_COPY_SEND}
_RECVS = {Op.RECV, Op.RECV_COPY_SEND, Op.RECV_REDUCE_SEND, Op.RECV_REDUCE_COPY,
          Op.RECV_REDUCE_COPY_SEND}


class Buf(StrEnum):
    INPUT = "i"
    OUTPUT = "o"
    SCRATCH = "s"


class Slot(NamedTuple):
    """One chunk-sized slot of a GPU buffer (a named tuple: hashed millions of times)."""

    buf: Buf
    index: int


class Step(NamedTuple):
    """One ``<step>``; ``depid``/``deps`` name a thread block and step on the same GPU.

    A named tuple, as :class:`Slot`: a frozen dataclass took twice as long to build,
    and there are millions of steps at 1024 GPUs.
    """

    s: int
    op: Op
    src: Slot | None
    dst: Slot | None
    cnt: int = 1
    depid: int = -1
    deps: int = -1
    hasdep: bool = False


@dataclass(frozen=True)
class Threadblock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: tuple[Threadblock, ...]


@dataclass(frozen=True)
class Program:
    """The ``<algo>`` element. ``max_bytes=0`` means no upper limit."""

    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: bool
    min_bytes: int
    max_bytes: int
    gpus: tuple[Gpu, ...]
    notes: tuple[str, ...] = ()  # where the file cannot keep the schedule's timing
