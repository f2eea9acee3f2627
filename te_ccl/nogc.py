"""Pause Python's cycle collector around passes that allocate millions of objects.

The lowering, the checkers and the replays build millions of small tuples, lists and
dicts but no garbage cycles (reference counting frees them). Each automatic collection
rescans every live object, so with the cycle collector on, these passes ran up to 4×
slower and grew superlinearly with the size of the schedule. A whole compile
(:mod:`te_ccl.compiler.pipeline`) runs paused too: its schedule's millions of transfers are
built outside those passes, and live through all of them.

>>> import gc
>>> with paused_gc():
...     gc.isenabled()
False
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside (restored on the way out, also when nested)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
