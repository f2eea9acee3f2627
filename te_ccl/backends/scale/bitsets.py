"""Rows of bits as ``uint64`` words: the holding matrix of the greedy (node × chunk).

Bit ``b`` of row ``r`` is bit ``b % 64`` of word ``b // 64``. Bit order is priority
order: :func:`first_bits` returns the lowest set bit of each row, so the greedy picks
the chunk placed first.

>>> m = zeros(2, 70); set_bits(m, [0, 1], [69, 3])
>>> first_bits(m).tolist()
[69, 3]
"""

from __future__ import annotations

import numpy as np

__all__ = ["zeros", "set_bits", "clear_bits", "first_bits", "first_bits_from", "from_pairs", "nbits"]

_DEBRUIJN = 0x03F79D71B4CB0A89  # a de Bruijn sequence: (low bit × it) >> 58 is unique
_TABLE = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _TABLE[(((1 << _i) * _DEBRUIJN) & (2**64 - 1)) >> 58] = _i


def zeros(rows: int, bits: int) -> np.ndarray:
    return np.zeros((rows, (bits + 63) // 64), dtype=np.uint64)


def _word_masks(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cols = np.asarray(cols, dtype=np.int64)
    return cols >> 6, np.left_shift(np.uint64(1), (cols & 63).astype(np.uint64))


def set_bits(m: np.ndarray, rows, cols) -> None:
    """``m[rows[i], cols[i]] = 1`` for every i (repeated pairs allowed)."""
    w, bit = _word_masks(cols)
    np.bitwise_or.at(m, (np.asarray(rows, dtype=np.int64), w), bit)


def clear_bits(m: np.ndarray, rows, cols) -> None:
    w, bit = _word_masks(cols)
    np.bitwise_and.at(m, (np.asarray(rows, dtype=np.int64), w), ~bit)


def from_pairs(rows: int, bits: int, pairs_rows, pairs_cols) -> np.ndarray:
    m = zeros(rows, bits)
    set_bits(m, pairs_rows, pairs_cols)
    return m


def first_bits(m: np.ndarray) -> np.ndarray:
    """Lowest set bit of every row, −1 for empty rows."""
    nonzero = m != 0
    word = nonzero.argmax(axis=1)
    value = m[np.arange(m.shape[0]), word]
    low = value & (~value + np.uint64(1))
    with np.errstate(over="ignore"):
        pos = _TABLE[((low * np.uint64(_DEBRUIJN)) >> np.uint64(58)).astype(np.int64)]
    out = word.astype(np.int64) * 64 + pos
    out[~nonzero.any(axis=1)] = -1
    return out


def first_bits_from(m: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per row the first set bit at or after ``start[row]``, wrapping around; −1 if none.

    >>> m = zeros(2, 130); set_bits(m, [0, 0, 1], [3, 100, 3])
    >>> first_bits_from(m, np.array([50, 50])).tolist()
    [100, 3]
    """
    start = np.asarray(start, dtype=np.int64)
    word = np.arange(m.shape[1])[None, :]
    first = (start >> 6)[:, None]
    low = (np.uint64(1) << (start & 63).astype(np.uint64)) - np.uint64(1)
    keep = np.where(word > first, ~np.uint64(0), np.uint64(0)).astype(np.uint64)
    keep = np.where(word == first, ~low[:, None], keep)
    after = first_bits(m & keep)
    return np.where(after >= 0, after, first_bits(m))


def nbits(m: np.ndarray) -> np.ndarray:
    """Set bits per row."""
    return np.unpackbits(m.view(np.uint8), axis=1).sum(axis=1)
