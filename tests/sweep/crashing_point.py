"""A collective that kills the worker process that unpickles it (a stand-in for a segfault)."""

from __future__ import annotations

import os

from te_ccl.collective.model import Collective


def _die() -> None:
    os._exit(13)


class CrashingCollective(Collective):
    def __reduce__(self):
        return (_die, ())
