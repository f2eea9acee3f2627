"""What each collective means in MSCCL's buffers: aliasing, initial data and expected results.

Chunk ``k`` of every buffer covers elements ``[k·S, (k+1)·S)`` with
``S = count·mult / nchunksperloop`` (mult = ngpus for allgather, reducescatter and
alltoall, else 1: the runtime's rule). So with ``n = nchunksperloop``, ``N = ngpus`` and ``c``
chunks per rank:

============== ====== ======================================== ===========================
coll           c      result (rank r; sums over all ranks q)   in-place aliasing
============== ====== ======================================== ===========================
allgather      n/N    o[q·c+j] = i[j] of q                     i[j] ≡ o[r·c+j]
alltoall       n/N    o[q·c+j] = i[r·c+j] of q                 o ≡ i
allreduce      n      o[k] = Σ_q i[k] of q                     o ≡ i
reducescatter  n/N    o[j] = Σ_q i[r·c+j] of q                 o[j] ≡ i[r·c+j]
broadcast      n      o[k] = i[k] of root                      o ≡ i
reduce         n      o[k] (root only) = Σ_q i[k] of q         o ≡ i
gather         n      o[q·c+j] (root only) = i[j] of q         i[j] ≡ o[r·c+j]
scatter        n      o[j] = i[r·c+j] of root                  o[j] ≡ i[r·c+j]
============== ====== ======================================== ===========================

The aliasing is how the runtime decides "in-place" (``sendbuff == recvbuff``, or
``sendbuff == recvbuff + rank·count`` for allgather/gather, the reverse for
reducescatter/scatter) and matches msccl-tools: in-place AllReduce uses only ``i``,
in-place AllGather only ``o``. A value is a sorted tuple of contributions
``(origin rank, index in its input)``; reductions concatenate them. The ``*_packed``
methods give the same values in the execution's packed form (:mod:`.values`).

>>> lay = Layout("allgather", ngpus=2, nchunksperloop=2, inplace=True)
>>> lay.slot(1, "i", 0), lay.initial(1)
(('o', 1), {('o', 1): ((1, 0),)})
>>> lay.expected(0, root=None)
{('o', 0): ((0, 0),), ('o', 1): ((1, 0),)}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from te_ccl.verify.msccl.values import GARBAGE, Packed, expand, origins, single

__all__ = ["Layout", "Slot", "Value", "SUPPORTED", "ROOTED", "GARBAGE"]

Slot = tuple[str, int]
Value = tuple[tuple[int, int], ...]

SUPPORTED = ("allgather", "alltoall", "allreduce", "reducescatter", "broadcast", "reduce",
             "gather", "scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
_PER_RANK = ("allgather", "alltoall", "reducescatter")      # c = n / N
_INPUT_IN_OUTPUT = ("allgather", "gather")                  # i[j] ≡ o[r·c+j]
_OUTPUT_IN_INPUT = ("reducescatter", "scatter")             # o[j] ≡ i[r·c+j]


@dataclass(frozen=True)
class Layout:
    """Buffer layout of one collective in one mode (in-place or out-of-place)."""

    coll: str
    ngpus: int
    nchunksperloop: int
    inplace: bool

    @property
    def c(self) -> int:
        """Chunks per rank (see the table)."""
        return self.nchunksperloop // self.ngpus if self.coll in _PER_RANK else self.nchunksperloop

    def problem(self) -> str | None:
        """Why this layout cannot be checked, or None."""
        if self.coll not in SUPPORTED:
            return f"coll={self.coll!r} has no fixed result to check"
        if self.ngpus <= 0 or self.nchunksperloop <= 0:
            return f"ngpus={self.ngpus}, nchunksperloop={self.nchunksperloop}"
        if self.coll in _PER_RANK and self.nchunksperloop % self.ngpus:
            return f"nchunksperloop={self.nchunksperloop} is not a multiple of ngpus={self.ngpus}"
        return None

    def slot(self, rank: int, buf: str, index: int) -> Slot:
        """The memory a buffer chunk really is (in-place buffers overlap)."""
        target, shift = self.alias(rank, buf)
        return (target, index + shift)

    def alias(self, rank: int, buf: str) -> tuple[str, int]:
        """``(buffer, shift)``: chunk ``k`` of ``buf`` is chunk ``k + shift`` of ``buffer``."""
        if self.inplace:
            if self.coll in _INPUT_IN_OUTPUT:
                return ("o", rank * self.c) if buf == "i" else (buf, 0)
            if self.coll in _OUTPUT_IN_INPUT:
                return ("i", rank * self.c) if buf == "o" else (buf, 0)
            return ("i", 0) if buf == "o" else (buf, 0)
        return (buf, 0)

    def _inputs(self) -> int:
        return self.c if self.coll in _INPUT_IN_OUTPUT else (
            self.ngpus * self.c if self.coll in ("alltoall", "scatter") else self.nchunksperloop)

    def capacity(self) -> dict[str, int]:
        """Chunks the user's send/recv buffers really have (``i``/``o``; scratch is sized
        from ``s_chunks``). Larger ``i_chunks``/``o_chunks`` let steps touch other memory."""
        n, big = self.nchunksperloop, self.ngpus * self.c
        sizes = {"allgather": (self.c, big), "gather": (self.c, big), "alltoall": (big, big),
                 "reducescatter": (big, self.c), "scatter": (big, self.c)}
        i, o = sizes.get(self.coll, (n, n))
        return {"i": i, "o": o}

    def initial(self, rank: int) -> dict[Slot, Value]:
        """Every rank's input data (the root's is the one that matters for rooted ones)."""
        return {s: expand(v) for s, v in self.initial_packed(rank).items()}

    def initial_packed(self, rank: int) -> dict[Slot, Packed]:
        """:meth:`initial` in packed form."""
        return {self.slot(rank, "i", k): single(rank, k) for k in range(self._inputs())}

    def expected(self, rank: int, root: int | None) -> dict[Slot, Value]:
        """Output chunk -> the value it must hold at the end (empty: nothing required)."""
        return {s: expand(v) for s, v in self.expected_packed(rank, root).items()}

    def expected_packed(self, rank: int, root: int | None) -> dict[Slot, Packed]:
        """:meth:`expected` in packed form (O(1) per chunk even for full reductions)."""
        target, first, want = self.expected_run(rank, root)
        return {(target, first + k): v for k, v in enumerate(want)}

    def expected_run(self, rank: int, root: int | None) -> tuple[str, int, list[Packed]]:
        """:meth:`expected_packed` as consecutive chunks of one buffer: the buffer, the
        first chunk and the values (a list shared between ranks where they agree: not
        to be modified)."""
        target, shift = self.alias(rank, "o")
        if self.coll in ROOTED and root is None:
            return target, shift, []
        if self.coll in ("reduce", "gather") and rank != root:
            return target, shift, []
        if self.coll in ("allgather", "gather", "allreduce", "reduce"):
            return target, shift, self._everyones
        n, c, everyone = self.nchunksperloop, self.c, range(self.ngpus)
        full = (1 << self.ngpus) - 1
        want: list[Packed]
        if self.coll == "alltoall":
            want = [single(q, rank * c + j) for q in everyone for j in range(c)]
        elif self.coll == "reducescatter":
            want = [(rank * c + j, full) for j in range(c)]
        elif self.coll == "broadcast":
            want = [single(root, k) for k in range(n)]
        else:  # scatter
            want = [single(root, rank * c + j) for j in range(c)]
        return target, shift, want

    @cached_property
    def _everyones(self) -> list[Packed]:
        """The output that is the same on every rank (all-gather, gather, all-reduce,
        reduce), built once."""
        if self.coll in ("allgather", "gather"):
            want = [single(q, j) for q in range(self.ngpus) for j in range(self.c)]
        else:
            full = (1 << self.ngpus) - 1
            want = [(k, full) for k in range(self.nchunksperloop)]
        return want

    def root_candidates(self, final: Callable[[int, Slot], Packed | None]) -> list[int]:
        """Ranks that act as the root in the executed program (``final(rank, slot)`` is the
        packed value a chunk holds at the end).

        Broadcast/scatter: ranks whose input reaches another rank's output. Reduce/gather:
        ranks whose output holds another rank's input.
        """
        span = self.ngpus * self.c if self.coll == "gather" else (
            self.c if self.coll == "scatter" else self.nchunksperloop)
        found = set()
        for rank in range(self.ngpus):
            for k in range(span):
                value = final(rank, self.slot(rank, "o", k))
                for origin in origins(value) if value else ():
                    if origin not in (rank, -1):
                        found.add(origin if self.coll in ("broadcast", "scatter") else rank)
        return sorted(found)
