"""Packed symbolic values: what a chunk holds during symbolic execution, in O(1) space.

The report's form of a value (:data:`~te_ccl.verify.msccl.layout.Value`) is a sorted tuple
of contributions ``(origin rank, index in its input)``. Adding two such tuples costs
O(ngpus), and a ring reduction at 1024 GPUs adds ~ngpus² contributions per chunk. So the
execution keeps the common case packed: ``(index, mask)`` — every contribution has the
same input index, ``mask`` has bit ``q`` set for rank ``q``, and no rank appears twice.
Anything else (several indices, a rank counted twice, garbage) stays a sorted tuple of
contributions. Each value has exactly one packed form, so equal packed forms mean equal
values.

>>> a, b = pack(((0, 3),)), pack(((2, 3),))
>>> a, add(a, b), expand(add(a, b))
((3, 1), (3, 5), ((0, 3), (2, 3)))
>>> expand(add(a, a)), add(a, GARBAGE)
(((0, 3), (0, 3)), ((-1, -1), (0, 3)))
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["Packed", "GARBAGE", "single", "pack", "expand", "add", "origins"]

Packed = tuple  # (index, rank mask) or a sorted tuple of (rank, index) contributions
GARBAGE: Packed = ((-1, -1),)  # what a never-written chunk holds (never packable)


def single(rank: int, index: int) -> Packed:
    """The value ``i[index]`` of ``rank``."""
    return (index, 1 << rank)


def _ranks(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def expand(value: Packed) -> tuple[tuple[int, int], ...]:
    """The sorted tuple of contributions of a packed value."""
    if value and value[0].__class__ is int:
        index, mask = value
        return tuple((q, index) for q in _ranks(mask))
    return value


def pack(value: tuple[tuple[int, int], ...]) -> Packed:
    """The packed form of a tuple of contributions (the inverse of :func:`expand`)."""
    ranks = [q for q, _ in value]
    indices = {k for _, k in value}
    if len(indices) == 1 and len(set(ranks)) == len(ranks) and min(ranks, default=-1) >= 0:
        index = indices.pop()
        if index >= 0:
            return (index, sum(1 << q for q in ranks))
    return tuple(sorted(value))


def add(a: Packed, b: Packed) -> Packed:
    """The value of a reduction ``a + b``."""
    if a[0].__class__ is int and b[0].__class__ is int and a[0] == b[0] and not a[1] & b[1]:
        return (a[0], a[1] | b[1])
    return tuple(sorted(expand(a) + expand(b)))


def origins(value: Packed) -> Iterator[int]:
    """Ranks that contributed to a value (-1 for garbage), with repetitions."""
    if value[0].__class__ is int:
        return _ranks(value[1])
    return (q for q, _ in value)
