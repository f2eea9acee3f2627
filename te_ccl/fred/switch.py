"""FRED_m(P): a P-port switch built recursively from 2-port µSwitches (the FRED paper, "The switch").

* Even P = 2r: r input µSwitches → m middle switches FRED_m(r) → r output µSwitches.
* Odd P = 2r+1: the same for 2r ports; port 2r enters through a DEMUX and leaves
  through a MUX reaching all m middles, which are FRED_m(r+1).
* FRED_m(2) is one 2×2 RD µSwitch (reduce and broadcast).

Input µSwitches are R elements (they may add their two inputs), output µSwitches are D
elements (they may copy one input to both outputs). Port ``p < 2r`` enters input
µSwitch ``p // 2`` on side ``p % 2`` and leaves output µSwitch ``p // 2``; inside middle
``c`` the port of input µSwitch ``i`` is ``i`` (and the DEMUX's is ``r``).

Element paths name the recursion: ``L1.2/mid1/in0`` is input µSwitch 0 of middle 1 of
switch ``L1.2``.

>>> sw = build_fred(4, 3, "s")
>>> [e.path for e in sw.elements()][:3]
['s/in0', 's/in1', 's/mid0/base']
>>> sw.element_count, sw.depth
(7, 2)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from te_ccl.errors import SpecError

__all__ = ["ElementKind", "Stage", "MicroSwitch", "FredSwitch", "build_fred", "MAX_ELEMENTS"]

MAX_ELEMENTS = 1 << 20  # µSwitches of one FRED switch teccl builds: each is an object in
#                         memory, so this bounds a build's memory (FRED_3(4096) has 877,543)


class ElementKind(StrEnum):
    R = "R"
    D = "D"
    RD = "RD"
    MUX = "MUX"
    DEMUX = "DEMUX"


class Stage(StrEnum):
    INPUT = "input"
    OUTPUT = "output"
    BASE = "base"
    MUX = "mux"
    DEMUX = "demux"


@dataclass(frozen=True)
class MicroSwitch:
    """One configurable element; ``index`` is its position within its stage."""

    path: str
    kind: ElementKind
    stage: Stage
    level: int
    index: int


@dataclass(frozen=True)
class FredSwitch:
    """A FRED_m(P) (sub)network; exactly one of ``base`` / (``inputs``, ``middles``) is set."""

    path: str
    ports: int
    m: int
    level: int
    inputs: tuple[MicroSwitch, ...] = ()
    outputs: tuple[MicroSwitch, ...] = ()
    middles: tuple[FredSwitch, ...] = ()
    demux: MicroSwitch | None = None
    mux: MicroSwitch | None = None
    base: MicroSwitch | None = None

    @property
    def r(self) -> int:
        """Number of 2-port input (and output) µSwitches at this level."""
        return self.ports // 2

    @property
    def odd(self) -> bool:
        return self.ports % 2 == 1

    @property
    def depth(self) -> int:
        """Recursion levels including this one (FRED_m(2) has depth 1)."""
        return 1 if self.base else 1 + self.middles[0].depth

    @property
    def element_count(self) -> int:
        return sum(1 for _ in self.elements())

    def elements(self) -> Iterator[MicroSwitch]:
        """All µSwitches, input stage first, then the middles in order, then the output stage."""
        if self.base:
            yield self.base
            return
        yield from self.inputs
        if self.demux:
            yield self.demux
        for mid in self.middles:
            yield from mid.elements()
        yield from self.outputs
        if self.mux:
            yield self.mux

    def element_of_port(self, port: int) -> int:
        """Index of the input (or output) element serving ``port``; ``r`` means DEMUX/MUX."""
        if not 0 <= port < self.ports:
            raise SpecError(f"port {port} outside 0..{self.ports - 1} of {self.path}", key="port")
        return port // 2 if port < 2 * self.r else self.r

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "ports": self.ports, "m": self.m,
                             "level": self.level}
        if self.base:
            d["base"] = _element_dict(self.base)
            return d
        d["inputs"] = [_element_dict(e) for e in self.inputs]
        d["outputs"] = [_element_dict(e) for e in self.outputs]
        if self.demux:
            d["demux"] = _element_dict(self.demux)
            d["mux"] = _element_dict(self.mux)
        d["middles"] = [mid.to_dict() for mid in self.middles]
        return d


def _element_dict(e: MicroSwitch) -> dict[str, Any]:
    return {"path": e.path, "kind": e.kind.value, "stage": e.stage.value, "level": e.level}


def _element_count(ports: int, m: int) -> int:
    """:attr:`FredSwitch.element_count` of FRED_m(``ports``), by arithmetic (before building)."""
    if ports == 2:
        return 1
    r, odd = ports // 2, ports % 2
    return 2 * r + 2 * odd + m * _element_count(r + odd, m)


def build_fred(ports: int, m: int = 3, name: str = "fred", level: int = 0) -> FredSwitch:
    """Build FRED_m(``ports``) with element paths rooted at ``name``.

    Raises
    ------
    SpecError
        If ``ports < 2`` or ``m < 2``.
    """
    if ports < 2:
        raise SpecError(f"a FRED switch needs at least 2 ports, got {ports}", key="ports")
    if m < 2:
        raise SpecError(f"a FRED switch needs m >= 2 middle switches, got {m}", key="m")
    if level == 0 and (count := _element_count(ports, m)) > MAX_ELEMENTS:
        raise SpecError(f"FRED_{m}({ports}) has {count:,} µSwitches, more than the "
                        f"{MAX_ELEMENTS:,} teccl builds (use fewer ports or middle switches)",
                        key="ports")
    if ports == 2:
        base = MicroSwitch(f"{name}/base", ElementKind.RD, Stage.BASE, level, 0)
        return FredSwitch(name, 2, m, level, base=base)
    r = ports // 2
    inputs = tuple(MicroSwitch(f"{name}/in{i}", ElementKind.R, Stage.INPUT, level, i)
                   for i in range(r))
    outputs = tuple(MicroSwitch(f"{name}/out{i}", ElementKind.D, Stage.OUTPUT, level, i)
                    for i in range(r))
    odd = ports % 2 == 1
    sub = r + 1 if odd else r
    middles = tuple(build_fred(sub, m, f"{name}/mid{c}", level + 1) for c in range(m))
    demux = MicroSwitch(f"{name}/demux", ElementKind.DEMUX, Stage.DEMUX, level, r) if odd else None
    mux = MicroSwitch(f"{name}/mux", ElementKind.MUX, Stage.MUX, level, r) if odd else None
    return FredSwitch(name, ports, m, level, inputs, outputs, middles, demux, mux)
