"""What a compile is asked to write: the output, its format and name, the size range it
serves, and the chunkings worth trying.

>>> CompileOptions(output="ring.xml", chunk_choices=(1, 2)).fmt
'xml'
>>> output_format("dgx1-allreduce.mscclpp.json", None, [])
'mscclpp'
>>> CompileOptions(fmt="mscclpp").lowered, CompileOptions(fmt="json").lowered
(True, False)
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from te_ccl.backends.base import SolveParams
from te_ccl.backends.select import strategy_for
from te_ccl.collective.model import Collective
from te_ccl.compiler.strategy import usable_links
from te_ccl.errors import SpecError
from te_ccl.lower.mscclpp import SUPPORTED
from te_ccl.model.epochs import epoch_duration
from te_ccl.model.problem import link_timings, members_of
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.topology.model import Topology

if TYPE_CHECKING:
    from te_ccl.compiler.warm import Previous

__all__ = ["CompileOptions", "FORMATS", "check_epoch", "check_plan_kind", "output_format"]

FORMATS = ("xml", "json", "mscclpp")


def output_format(output: str | None, asked: str | None,
                  reducing_switches: Collection[str]) -> str:
    """The format a compile writes, decided once for the CLI and the API: the one
    ``asked``, else the output's name (``.mscclpp.json``: an MSCCL++ plan; ``.json``: the
    schedule JSON; ``.xml``: MSCCL XML), else MSCCL XML — or the schedule JSON on a fabric
    whose switches reduce (FRED's: ``reducing_switches``), which no MSCCL XML can drive."""
    if asked is not None:
        return asked
    name = Path(output).name if output else ""
    if name.endswith(".mscclpp.json"):
        return "mscclpp"
    if name.endswith(".json"):
        return "json"
    return "json" if reducing_switches and not name.endswith(".xml") else "xml"


def check_plan_kind(kind: str, proto: str, *, file: str | None = None, key: str = "fmt"
                    ) -> None:
    """Refuse, before solving, a collective no MSCCL++ plan is written for: a ``kind`` the
    plan writer does not cover (``key``: where the kind was asked for), or a protocol
    other than Simple, the one it writes (LL would be ignored)."""
    if kind not in {k.value for k in SUPPORTED}:
        names = ", ".join(k.value for k in SUPPORTED)
        raise SpecError(f"{kind} has no MSCCL++ execution plan (MSCCL++ execution plans "
                        f"cover {names})", file=file, key=key)
    if proto != "Simple":
        raise SpecError(f"MSCCL++ plans are written with the Simple protocol; not {proto}",
                        file=file, key="proto")


def check_epoch(topology: Topology, collective: Collective, params: SolveParams) -> None:
    """Refuse, before the compile starts, an ``--epoch`` the flow model cannot use for
    ``collective`` (its own chunking, on the links it solves on): no policy, not
    positive, beyond the span a schedule's times hold, or so short that a hop takes more
    epochs than a model holds. The flow model refuses it too, but only when the search
    reaches it, after a first file may be written; the scale backend does not read it."""
    if strategy_for(params) == "scale":
        return
    epoch_s = epoch_duration(topology, collective.chunk_bytes, params.epoch)
    if isinstance(params.epoch, str):
        return  # a policy's epochs fit every hop (:func:`epoch_duration`)
    links = usable_links(topology, collective)[0]  # found once: the search reads it too
    link_timings(links, collective.chunk_bytes, epoch_s, members_of(topology, collective))


@dataclass(frozen=True)
class CompileOptions:
    """Where and how to write: ``output`` None writes nothing, ``"-"`` writes stdout.

    ``chunk_choices``: chunks-per-rank values to try, plus the chunkings whose arithmetic
    fits the topology (:func:`te_ccl.compiler.chunking.chunk_candidates`); the time limit is shared
    among them and the fastest schedule by :class:`Timer` wins, ties going to fewer chunks.
    Empty: the collective's own. ``previous``: the file of an earlier compile whose
    routes make the first file (:mod:`te_ccl.compiler.warm`). ``runtime``: whose executor
    loads the XML (the MSCCL executor's limits, or RCCL's): the lowering keeps to them and
    the verifier checks them. ``expressible``: MSCCL XML can express the machine every
    schedule rendered with these options is built on, decided once by the compile
    (:func:`~te_ccl.compiler.pipeline.compile_collective`); False, rendering asks of each
    schedule.
    """

    output: str | None = None
    fmt: str = "xml"
    min_bytes: int = 0
    max_bytes: int = 0
    name: str | None = None
    fred_tables: str | None = None
    chunk_choices: tuple[int, ...] = ()
    previous: Previous | None = None
    runtime: RuntimeLimits = MSCCL
    expressible: bool = False

    @property
    def lowered(self) -> bool:
        """Whether the output is a program lowered from the schedule (MSCCL XML, an MSCCL++
        plan), which is verified, and replayed as its runtime runs it, before it is kept."""
        return self.fmt in ("xml", "mscclpp")
