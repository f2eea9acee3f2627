"""What a compile is asked to write: the output, its format and name, the size range it
serves, and the chunkings worth trying.

>>> CompileOptions(output="ring.xml", chunk_choices=(1, 2)).fmt
'xml'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from te_ccl.compiler.warm import Previous

__all__ = ["CompileOptions", "FORMATS"]

FORMATS = ("xml", "json")


@dataclass(frozen=True)
class CompileOptions:
    """Where and how to write: ``output`` None writes nothing, ``"-"`` writes stdout.

    ``chunk_choices``: chunks-per-rank values to try, plus the chunkings whose arithmetic
    fits the topology (:func:`te_ccl.compiler.chunking.chunk_candidates`); the time limit is shared
    among them and the fastest schedule by :class:`Timer` wins, ties going to fewer chunks.
    Empty: the collective's own. ``previous``: the file of an earlier compile whose
    routes make the first file (:mod:`te_ccl.compiler.warm`).
    """

    output: str | None = None
    fmt: str = "xml"
    min_bytes: int = 0
    max_bytes: int = 0
    name: str | None = None
    fred_tables: str | None = None
    chunk_choices: tuple[int, ...] = ()
    previous: Previous | None = None
