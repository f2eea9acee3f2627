"""3D parallelism ``MPa-DPb-PPc`` on the 20 NPUs: placement, groups, phase collectives.

Placement (the paper's): MP groups on consecutive NPUs, then PP, then DP, i.e. the
NPU of (mp index i, pp stage p, dp replica d) is ``i + a·(p + c·d)``. Each strategy
phase runs its collectives concurrently:

* ``MP``: an All-Reduce in every MP group;
* ``DP``: an All-Reduce in every DP group;
* ``PP``: a send from every NPU of stage p to the same MP index / replica of stage p+1.

>>> s = parse_strategy("MP2-DP5-PP2")
>>> s.groups("MP")[:2], s.groups("DP")[0]
([(0, 1), (2, 3)], (0, 4, 8, 12, 16))
>>> s.phase_ops("PP", 1000)[0].pairs[:2]
((0, 2), (1, 3))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from te_ccl.errors import SpecError
from te_ccl.fred.collectives import CommResult, fred_candidates
from te_ccl.fred.mesh import Mesh, compile_mesh
from te_ccl.fred.ops import CollectiveOp
from te_ccl.fred.wafer import Wafer

__all__ = ["Strategy", "parse_strategy", "all_strategies", "PHASES", "compile_phase",
           "phase_candidates"]

PHASES = ("MP", "PP", "DP")
_TOKEN = re.compile(r"(MP|DP|PP)(\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Strategy:
    mp: int = 1
    dp: int = 1
    pp: int = 1

    @property
    def npus(self) -> int:
        return self.mp * self.dp * self.pp

    @property
    def name(self) -> str:
        return f"MP{self.mp}-DP{self.dp}-PP{self.pp}"

    def rank(self, i: int, p: int, d: int) -> int:
        return i + self.mp * (p + self.pp * d)

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """The rank groups of ``MP`` or ``DP`` (stage pairs for ``PP`` are in :meth:`phase_ops`)."""
        a, b, c = self.mp, self.dp, self.pp
        if kind == "MP":
            return [tuple(self.rank(i, p, d) for i in range(a)) for d in range(b)
                    for p in range(c)]
        if kind == "DP":
            return [tuple(self.rank(i, p, d) for d in range(b)) for p in range(c)
                    for i in range(a)]
        raise SpecError(f"no groups for phase {kind!r}", key="phase")

    def phase_ops(self, kind: str, size_bytes: float) -> list[CollectiveOp]:
        """The concurrent collectives of phase ``kind`` (empty when its degree is 1)."""
        if kind == "PP":
            pairs = tuple((self.rank(i, p, d), self.rank(i, p + 1, d))
                          for d in range(self.dp) for p in range(self.pp - 1)
                          for i in range(self.mp))
            return [CollectiveOp("sendrecv", (), size_bytes, pairs=pairs, cls="PP",
                                 label="PP:sendrecv")] if pairs else []
        if kind not in ("MP", "DP"):
            raise SpecError(f"unknown phase {kind!r}; expected MP, PP or DP", key="phase")
        return [CollectiveOp("allreduce", g, size_bytes, cls=kind, label=f"{kind}:allreduce{g[0]}")
                for g in self.groups(kind) if len(g) > 1]


def parse_strategy(text: str, npus: int = 20) -> Strategy:
    """``MP2-DP5-PP2`` (any order, missing degrees are 1) whose product is ``npus``."""
    degrees = {"MP": 1, "DP": 1, "PP": 1}
    for token in text.strip().split("-"):
        m = _TOKEN.match(token.strip())
        if not m or int(m[2]) < 1:
            raise SpecError(f"expected tokens like MP2-DP5-PP2, got {text!r}", key="strategy")
        degrees[m[1].upper()] = int(m[2])
    s = Strategy(degrees["MP"], degrees["DP"], degrees["PP"])
    if s.npus != npus:
        raise SpecError(f"{text}: MP·DP·PP = {s.npus}, expected {npus}", key="strategy")
    return s


def all_strategies(npus: int = 20) -> list[Strategy]:
    """Every (MP, DP, PP) with MP·DP·PP = ``npus``."""
    divs = [d for d in range(1, npus + 1) if npus % d == 0]
    return [Strategy(a, b, npus // (a * b)) for a in divs for b in divs
            if (npus // a) % b == 0]


def compile_phase(fabric: Wafer | Mesh, strategy: Strategy, kind: str,
                  size_bytes: float) -> CommResult | None:
    """Compile the concurrent collectives of one phase on a FRED wafer or the mesh."""
    return min(phase_candidates(fabric, strategy, kind, size_bytes), key=lambda r: r.time_s,
               default=None)


def phase_candidates(fabric: Wafer | Mesh, strategy: Strategy, kind: str,
                     size_bytes: float) -> list[CommResult]:
    """Every way the phase's collectives can run (:func:`fred_candidates`; one on the
    mesh); none when the phase is absent."""
    ops = strategy.phase_ops(kind, size_bytes)
    if not ops:
        return []
    if isinstance(fabric, Mesh):
        return [compile_mesh(fabric, ops)]
    return fred_candidates(fabric, ops)
