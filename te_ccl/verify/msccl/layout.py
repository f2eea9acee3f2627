"""What each collective means in MSCCL's buffers: aliasing, initial data and expected results.

Chunk ``k`` of every buffer covers elements ``[k·S, (k+1)·S)`` with
``S = count·mult / nchunksperloop`` (mult = ngpus for allgather, reducescatter and
alltoall, else 1; msccl-xml.md). So with ``n = nchunksperloop``, ``N = ngpus`` and ``c``
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
``(origin rank, index in its input)``; reductions concatenate them.

>>> lay = Layout("allgather", ngpus=2, nchunksperloop=2, inplace=True)
>>> lay.slot(1, "i", 0), lay.initial(1)
(('o', 1), {('o', 1): ((1, 0),)})
>>> lay.expected(0, root=None)
{('o', 0): ((0, 0),), ('o', 1): ((1, 0),)}
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Layout", "Slot", "Value", "SUPPORTED", "ROOTED", "GARBAGE"]

Slot = tuple[str, int]
Value = tuple[tuple[int, int], ...]
GARBAGE: Value = ((-1, -1),)  # what a never-written chunk holds

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
        if not self.inplace:
            return (buf, index)
        if self.coll in _INPUT_IN_OUTPUT:
            return ("o", index + rank * self.c) if buf == "i" else (buf, index)
        if self.coll in _OUTPUT_IN_INPUT:
            return ("i", index + rank * self.c) if buf == "o" else (buf, index)
        return ("i", index) if buf == "o" else (buf, index)

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
        return {self.slot(rank, "i", k): ((rank, k),) for k in range(self._inputs())}

    def expected(self, rank: int, root: int | None) -> dict[Slot, Value]:
        """Output chunk -> the value it must hold at the end (empty: nothing required)."""
        n, c, everyone = self.nchunksperloop, self.c, range(self.ngpus)
        if self.coll in ROOTED and root is None:
            return {}
        if self.coll in ("reduce", "gather") and rank != root:
            return {}
        want: dict[int, Value]
        if self.coll in ("allgather", "gather"):
            want = {q * c + j: ((q, j),) for q in everyone for j in range(c)}
        elif self.coll == "alltoall":
            want = {q * c + j: ((q, rank * c + j),) for q in everyone for j in range(c)}
        elif self.coll in ("allreduce", "reduce"):
            want = {k: tuple((q, k) for q in everyone) for k in range(n)}
        elif self.coll == "reducescatter":
            want = {j: tuple((q, rank * c + j) for q in everyone) for j in range(c)}
        elif self.coll == "broadcast":
            want = {k: ((root, k),) for k in range(n)}
        else:  # scatter
            want = {j: ((root, rank * c + j),) for j in range(c)}
        return {self.slot(rank, "o", k): v for k, v in want.items()}

    def root_candidates(self, final: dict[int, dict[Slot, Value]]) -> list[int]:
        """Ranks that act as the root in the executed program (see ``infer_root``).

        Broadcast/scatter: ranks whose input reaches another rank's output. Reduce/gather:
        ranks whose output holds another rank's input.
        """
        span = self.ngpus * self.c if self.coll == "gather" else (
            self.c if self.coll == "scatter" else self.nchunksperloop)
        found = set()
        for rank, mem in final.items():
            for k in range(span):
                for origin, _ in mem.get(self.slot(rank, "o", k)) or ():
                    if origin not in (rank, -1):
                        found.add(origin if self.coll in ("broadcast", "scatter") else rank)
        return sorted(found)
