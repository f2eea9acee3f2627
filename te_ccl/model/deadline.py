"""The wall-clock deadline of the solve under way, checked while models are built.

Building a time-expanded model is pure Python and can take longer than solving it, so a
time limit must count it: :func:`te_ccl.solve.solve` sets the deadline for everything it
runs (:func:`until`), the loops that build models call :func:`check` as they go, and the
solvers get only the time still left (:func:`left`).

>>> with until(3600.0):
...     check()
...     0 < left() <= 3600
True
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from te_ccl.errors import SolverError

__all__ = ["until", "check", "left", "checked"]

T = TypeVar("T")
_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("deadline", default=None)
EVERY = 4096  # items between two clock reads in :func:`checked`


@contextmanager
def until(limit_s: float) -> Iterator[None]:
    """Everything run inside must end within ``limit_s`` seconds from now (an outer,
    earlier deadline still holds)."""
    now = time.monotonic()
    outer = _DEADLINE.get()
    end = now + limit_s if outer is None else min(outer[0], now + limit_s)
    token = _DEADLINE.set((end, limit_s if outer is None else outer[1]))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def left() -> float:
    """Seconds until the deadline (infinite without one)."""
    d = _DEADLINE.get()
    return float("inf") if d is None else max(0.0, d[0] - time.monotonic())


def check() -> None:
    """Raise :class:`SolverError` once the deadline has passed."""
    d = _DEADLINE.get()
    if d is not None and time.monotonic() > d[0]:
        raise SolverError(f"time limit of {d[1]:g} s reached while building the model")


def checked(items: Iterable[T]) -> Iterator[T]:
    """``items``, checking the deadline every :data:`EVERY` of them."""
    for i, item in enumerate(items):
        if i % EVERY == 0:
            check()
        yield item
