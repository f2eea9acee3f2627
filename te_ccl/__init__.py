"""teccl: compile collective-communication schedules with the TE-CCL flow model on OR-Tools.

``te_ccl.compile(topology, collective, size=...)`` is the Python API (:mod:`te_ccl.api`);
it is imported on first use, so ``import te_ccl`` (and the command line) stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "compile", "CompileResult"]

if TYPE_CHECKING:
    from te_ccl.api import CompileResult, compile  # noqa: A004


def __getattr__(name: str) -> Any:
    if name in ("compile", "CompileResult"):
        from te_ccl import api

        return getattr(api, name)
    raise AttributeError(f"module 'te_ccl' has no attribute {name!r}")
