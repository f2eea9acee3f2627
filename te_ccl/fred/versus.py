"""FRED against its mesh baseline, one collective at a time, both ways honestly.

Every fabric (the wafer mesh and FRED-A..D of :mod:`te_ccl.topology.generators`, with
their assumed latencies) gets the best schedule ``teccl compile`` finds for the
collective within the time limit, timed as compile times it (the replay of the MSCCL XML,
or of the schedule where switches reduce), and its lower bound
(:func:`te_ccl.bounds.lower_bound`). A FRED variant's speedup is shown against both:

* ``speedup``: the mesh's best schedule / this fabric's: what teccl can do on each today;
* ``speedup_vs_bound``: the mesh's lower bound / this fabric's schedule: no mesh schedule
  finishes before its bound, so FRED's speedup over any mesh schedule is at least this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from te_ccl.topology import generators as gen

__all__ = ["Versus", "versus_mesh"]


@dataclass(frozen=True)
class Versus:
    """One fabric's best schedule and bound for the collective, and its speedups."""

    fabric: str
    backend: str
    time_s: float
    bound_s: float
    speedup: float
    speedup_vs_bound: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def versus_mesh(kind: str, size_bytes: int, npus: int = 20,
                variants: Sequence[str] = tuple(gen.FRED_VARIANTS), *,
                time_limit_s: float = 20.0) -> list[Versus]:
    """The mesh first, then each FRED variant (module docstring).

    Raises
    ------
    SpecError
        A wafer size the generators refuse, or a collective or size ``compile`` refuses.
    """
    from te_ccl.api import compile  # the compile pipeline imports te_ccl.fred
    from te_ccl.errors import SpecError
    from te_ccl.lower.fred import reducing_switches

    try:
        topologies = [gen.wafer_mesh(npus)] + [gen.fred(v, npus) for v in variants]
    except ValueError as e:
        raise SpecError(str(e), key="--npus") from None
    runs = []
    for topo in topologies:
        result = compile(topo, kind, size=size_bytes, time_limit_s=time_limit_s,
                         fmt="json" if reducing_switches(topo) else "xml")
        runs.append((topo.name, result.schedule.info.backend, result.finish_time_s,
                     result.lower_bound_s))
    _, _, mesh_s, mesh_bound_s = runs[0]
    return [Versus(name, backend, t, bound, mesh_s / t, mesh_bound_s / t)
            for name, backend, t, bound in runs]
