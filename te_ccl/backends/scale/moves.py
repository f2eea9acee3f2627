"""Transfers as parallel arrays, turned into :class:`Transfer` objects once.

At 1024 GPUs a schedule has millions of transfers; building each Python object costs
about a microsecond and sorting them (as ``reverse_in_time`` does) tens of seconds, more
than the solve. So the methods return :class:`Moves` and the caller builds the objects
once — forwards, or reversed in time for a reduction, shifted for a second phase.

>>> m = Moves(("a", "b"), *(np.array([x]) for x in (7, 0, 1, 0, 2)))
>>> m.transfers(), m.transfers(reverse_at=m.finish)
([Transfer(chunk=7, src='a', dst='b', start_epoch=0, arrive_epoch=2, op='copy')], \
[Transfer(chunk=7, src='b', dst='a', start_epoch=0, arrive_epoch=2, op='reduce')])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from te_ccl.schedule import Arrivals, LazyTransfers, Transfer, transfers_of

__all__ = ["Moves"]


@dataclass(frozen=True)
class Moves:
    """Chunk ``chunk[i]`` on link ``names[src[i]] → names[dst[i]]`` from ``start[i]`` to ``arrive[i]``."""

    names: tuple[str, ...]
    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start: np.ndarray
    arrive: np.ndarray

    def __len__(self) -> int:
        return len(self.chunk)

    @property
    def finish(self) -> int:
        return int(self.arrive.max()) if len(self) else 0

    @classmethod
    def of(cls, names: tuple[str, ...], transfers: Iterable[Transfer]) -> Moves:
        index = {n: i for i, n in enumerate(names)}
        rows = [(t.chunk, index[t.src], index[t.dst], t.start_epoch, t.arrive_epoch)
                for t in transfers]
        cols = np.array(rows, dtype=np.int64).reshape(-1, 5).T
        return cls(names, *cols)

    def lazy(self) -> LazyTransfers:
        """:meth:`transfers` forwards, built when first read."""
        return LazyTransfers(len(self), self.finish, self.transfers, self.arrivals)

    def arrivals(self) -> Arrivals:
        """:meth:`LazyTransfers.arrivals <te_ccl.schedule.LazyTransfers.arrivals>` of these
        moves: where each lands, without building transfers."""
        return self.names, self.dst, self.chunk

    def transfers(self, *, reverse_at: int | None = None, shift: int = 0) -> list[Transfer]:
        """The Transfer objects; ``reverse_at=F``: on the reversed links, played backwards
        from ``F`` as reductions (``u→v [s, a)`` becomes ``v→u [F−a, F−s)``)."""
        names = np.array(self.names, dtype=object)
        if reverse_at is None:
            cols = (names[self.src], names[self.dst], self.start + shift, self.arrive + shift)
            op = "copy"
        else:
            cols = (names[self.dst], names[self.src], reverse_at - self.arrive + shift,
                    reverse_at - self.start + shift)
            op = "reduce"
        return transfers_of(zip(self.chunk.tolist(), *(x.tolist() for x in cols),
                                strict=True), op)
