"""A collective as one typed object, and the chunks (commodities) it moves.

Sizes follow nccl-tests' convention for the "size" of each collective, so algbw and
busbw are comparable with what users measure:

============== ======================================= ===================== ===========
kind           ``size_bytes`` is                       pieces (``nchunks``)   busbw factor
============== ======================================= ===================== ===========
allgather      output buffer of one rank               N · chunks            (N-1)/N
reducescatter  input buffer of one rank                N · chunks            (N-1)/N
allreduce      the buffer                              N · chunks            2(N-1)/N
alltoall       send buffer of one rank                 N · chunks            (N-1)/N
gather         output buffer at the root               N · chunks            (N-1)/N
scatter        input buffer at the root                N · chunks            (N-1)/N
broadcast      the buffer                              chunks                1
reduce         the buffer                              chunks                1
custom         one chunk is ``size_bytes / chunks``    per demand            1
============== ======================================= ===================== ===========

Each :class:`Chunk` records its buffer slots (``in_index`` in the input buffer of its
sources, ``out_index`` in the output buffer of its destinations) in units of
``chunk_bytes``: the MSCCL lowering and the verifier both use this layout.

>>> c = Collective(CollectiveKind.ALLGATHER, size_bytes=1024, ranks=(0, 1, 2, 3))
>>> c.chunk_bytes, len(c.chunks()), c.chunks()[1]
(256, 4, Chunk(id=1, sources=(1,), destinations=(0, 2, 3), reduce=False, in_index=0, out_index=1))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from te_ccl.deadline import check, checked

__all__ = ["CollectiveKind", "KINDS", "CustomDemand", "Chunk", "Collective"]


class CollectiveKind(str, Enum):
    ALLGATHER = "allgather"
    ALLTOALL = "alltoall"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    CUSTOM = "custom"


KINDS = tuple(k.value for k in CollectiveKind)
ROOTED = {CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.GATHER,
          CollectiveKind.SCATTER}
REDUCING = {CollectiveKind.REDUCESCATTER, CollectiveKind.ALLREDUCE, CollectiveKind.REDUCE}
EXPANDING = "expanding the collective into chunks"  # what a deadline reached interrupted
_PER_RANK_PIECES = {CollectiveKind.ALLGATHER, CollectiveKind.REDUCESCATTER,
                    CollectiveKind.ALLREDUCE, CollectiveKind.ALLTOALL,
                    CollectiveKind.GATHER, CollectiveKind.SCATTER}


@dataclass(frozen=True)
class CustomDemand:
    """One user-given demand: ``chunks`` pieces at rank ``source`` wanted by ``destinations``."""

    source: int
    destinations: tuple[int, ...]
    chunks: int = 1


@dataclass(frozen=True)
class Chunk:
    """One commodity. Ranks are topology ranks (not positions in ``Collective.ranks``).

    ``reduce=False``: ``sources`` (one rank) holds the data; every destination needs a copy.
    ``reduce=True``: every source holds a partial; every destination needs their sum.
    """

    id: int
    sources: tuple[int, ...]
    destinations: tuple[int, ...]
    reduce: bool
    in_index: int
    out_index: int


@dataclass(frozen=True)
class Collective:
    """What to compile: kind, size, chunking, participating ranks, root, mode, protocol."""

    kind: CollectiveKind
    size_bytes: int
    ranks: tuple[int, ...]
    chunks_per_rank: int = 1
    root: int | None = None
    inplace: bool = False
    proto: str = "Simple"
    demands: tuple[CustomDemand, ...] = ()

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    @property
    def nchunks(self) -> int:
        """How many pieces ``size_bytes`` is cut into (see the module table)."""
        if self.kind is CollectiveKind.CUSTOM:
            return self.chunks_per_rank
        if self.kind in _PER_RANK_PIECES:
            return self.nranks * self.chunks_per_rank
        return self.chunks_per_rank

    @property
    def commodities(self) -> int:
        """How many chunks :meth:`chunks` yields, without building them."""
        if self.kind is CollectiveKind.CUSTOM:
            return sum(d.chunks for d in self.demands)
        if self.kind is CollectiveKind.ALLTOALL:
            return self.nranks * self.nchunks
        return self.nchunks

    @property
    def chunk_bytes(self) -> float:
        """Bytes per chunk: exact (an int) when the chunks divide the size, else the mean.

        MSCCL algorithms do not depend on the size (the runtime divides whatever count it
        is given), so a size the chunks do not divide is planned and timed with chunks of
        the mean size, and :attr:`uneven` says so.
        """
        whole, rest = divmod(self.size_bytes, self.nchunks)
        return whole if not rest else self.size_bytes / self.nchunks

    @property
    def uneven(self) -> bool:
        """The chunks do not divide ``size_bytes`` (see :attr:`chunk_bytes`)."""
        return self.size_bytes % self.nchunks != 0

    @property
    def is_reduction(self) -> bool:
        return self.kind in REDUCING

    @property
    def busbw_factor(self) -> float:
        """nccl-tests' busbw = algbw × this factor."""
        n = self.nranks
        if self.kind is CollectiveKind.ALLREDUCE:
            return 2 * (n - 1) / n
        if self.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE, CollectiveKind.CUSTOM):
            return 1.0
        return (n - 1) / n

    def describe(self) -> str:
        root = f" root={self.root}" if self.root is not None else ""
        return f"{self.kind.value}{root} on {self.nranks} ranks, {self.chunks_per_rank} chunk(s)"

    def reduction_owners(self) -> dict[int, int]:
        """Chunk id → the rank where the chunk is summed first.

        A reduced chunk's destination; for AllReduce (ReduceScatter then AllGather) chunk
        ``i`` is summed at ``ranks[i // chunks_per_rank]`` and then copied to every rank.
        """
        if self.kind is CollectiveKind.ALLREDUCE:
            return {c.id: self.ranks[c.id // self.chunks_per_rank] for c in self.chunks()}
        return {c.id: c.destinations[0] for c in self.chunks()}

    def received(self) -> dict[int, int]:
        """Rank → how many chunks list it as a destination (ranks of none left out), as
        :meth:`chunks` would give, by arithmetic: a million chunks are not built to count.

        >>> Collective(CollectiveKind.BROADCAST, 1024, (0, 1, 2), chunks_per_rank=4, root=1).received()
        {0: 4, 2: 4}
        """
        k, n, ranks = self.chunks_per_rank, self.nranks, self.ranks
        if self.kind is CollectiveKind.CUSTOM:
            counts: Counter[int] = Counter()
            for d in self.demands:
                counts.update(dict.fromkeys((x for x in d.destinations if x != d.source), d.chunks))
            return {r: c for r, c in counts.items() if c}
        each = {CollectiveKind.ALLGATHER: (n - 1) * k, CollectiveKind.ALLTOALL: n * k,
                CollectiveKind.REDUCESCATTER: k, CollectiveKind.ALLREDUCE: n * k,
                CollectiveKind.BROADCAST: k, CollectiveKind.SCATTER: k}.get(self.kind)
        if each is not None:  # every rank (but a root, which keeps its own) alike
            skip = self.root if self.kind in ROOTED else None
            return {r: each for r in ranks if r != skip and each}
        most = k if self.kind is CollectiveKind.REDUCE else (n - 1) * k  # gather
        return {self.root: most} if most else {}

    def chunks(self) -> tuple[Chunk, ...]:
        """The commodities, numbered 0.. in a fixed order (see the module docstring)."""
        return tuple(self.iter_chunks())

    def iter_chunks(self) -> Iterator[Chunk]:
        """:meth:`chunks` one at a time (to count or stop early without building them all).
        A million of them take seconds, so the compile's deadline is checked as they come
        (per rank, or every :data:`~te_ccl.deadline.EVERY` chunks)."""
        return _CHUNK_BUILDERS[self.kind](self)


def _allgather(c: Collective):
    k = c.chunks_per_rank
    for p, r in enumerate(c.ranks):
        check(EXPANDING)
        for j in range(k):
            yield Chunk(p * k + j, (r,), tuple(x for x in c.ranks if x != r), False, j, p * k + j)


def _alltoall(c: Collective):
    k, n = c.chunks_per_rank, c.nranks
    for ps, s in enumerate(c.ranks):
        for pd, d in enumerate(c.ranks):
            check(EXPANDING)
            for j in range(k):
                yield Chunk((ps * n + pd) * k + j, (s,), (d,), False, pd * k + j, ps * k + j)


def _reducescatter(c: Collective):
    k = c.chunks_per_rank
    for p, r in enumerate(c.ranks):
        check(EXPANDING)
        for j in range(k):
            yield Chunk(p * k + j, c.ranks, (r,), True, p * k + j, j)


def _allreduce(c: Collective):
    for i in checked(range(c.nchunks), EXPANDING):
        yield Chunk(i, c.ranks, c.ranks, True, i, i)


def _broadcast(c: Collective):
    for i in checked(range(c.nchunks), EXPANDING):
        yield Chunk(i, (c.root,), tuple(x for x in c.ranks if x != c.root), False, i, i)


def _reduce(c: Collective):
    for i in checked(range(c.nchunks), EXPANDING):
        yield Chunk(i, c.ranks, (c.root,), True, i, i)


def _gather(c: Collective):
    k = c.chunks_per_rank
    for p, r in enumerate(c.ranks):
        check(EXPANDING)
        for j in range(k):
            dests = () if r == c.root else (c.root,)
            yield Chunk(p * k + j, (r,), dests, False, j, p * k + j)


def _scatter(c: Collective):
    k = c.chunks_per_rank
    for p, r in enumerate(c.ranks):
        check(EXPANDING)
        for j in range(k):
            dests = () if r == c.root else (r,)
            yield Chunk(p * k + j, (c.root,), dests, False, p * k + j, j)


def _custom(c: Collective):
    i = 0
    for d in c.demands:
        check(EXPANDING)
        for j in range(d.chunks):
            yield Chunk(i, (d.source,), tuple(x for x in d.destinations if x != d.source),
                        False, j, i)
            i += 1


_CHUNK_BUILDERS = {
    CollectiveKind.ALLGATHER: _allgather,
    CollectiveKind.ALLTOALL: _alltoall,
    CollectiveKind.REDUCESCATTER: _reducescatter,
    CollectiveKind.ALLREDUCE: _allreduce,
    CollectiveKind.BROADCAST: _broadcast,
    CollectiveKind.REDUCE: _reduce,
    CollectiveKind.GATHER: _gather,
    CollectiveKind.SCATTER: _scatter,
    CollectiveKind.CUSTOM: _custom,
}
