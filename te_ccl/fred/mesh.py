"""The baseline: the same 20 NPUs on a 5×4 2D mesh with X-Y routing (the FRED paper).

Rank ``r`` sits at row ``r // 4``, column ``r % 4`` (row ``k`` = the NPUs of FRED's
L1 ``k``). Each direction of each mesh link carries ``link_Bps`` (750 GB/s = 3 TB/s
over 4 ports). Collectives are NPU algorithms, timed by the fluid bound of their link
loads (chunks pipelined; each link direction carries its bytes at ``link_Bps``):

* a group filling a rectangle runs **hierarchical 2D rings with two chunks in opposite
  orders**: a share ``f`` of the data does rows then columns, the rest columns then
  rows, ``f`` chosen to balance row and column links (this is what lets a wafer-wide
  All-Reduce use two of the four ports of every NPU at once);
* any other group runs a **logical ring** in snake order, each hop X-Y routed;
* Broadcast/Reduce: a pipelined chain in snake order; All-to-All and send/recv:
  direct X-Y unicasts.

A ring on a line uses every link in both directions once (the wrap hop runs back
along the line), so one ring per row or column runs at the full link rate.

Latency: each hop is one wire and one router (:func:`te_ccl.topology.generators.wafer_mesh`);
a ring costs a hop latency times its longest edge's hops per dependent step, a chain the
hops of all its edges (pipeline fill), unicasts their longest path.

I/O: with 4N channels of P bytes/s entering an N×N mesh at its edges, links need
``(2N−1)·P`` (the FRED paper); I/O runs at ``min(1, link_Bps / ((2N−1)·P))`` of line rate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from te_ccl.fred.collectives import CommResult
from te_ccl.fred.ops import CollectiveOp
from te_ccl.topology.generators import (
    FRED_LANE_BPS,
    USWITCH_LATENCY_S,
    WIRE_LATENCY_S,
    fred_stages,
    wafer_shape,
)

__all__ = ["Mesh", "WAFER_MESH", "wafer_mesh", "compile_mesh", "mesh_loads"]

Link = tuple[tuple[int, int], tuple[int, int]]


@dataclass(frozen=True)
class Mesh:
    name: str = "wafer-mesh5x4"
    rows: int = 5
    cols: int = 4
    link_Bps: float = FRED_LANE_BPS
    io_controllers: int = 18
    io_Bps: float = 128e9
    wire_latency_s: float = WIRE_LATENCY_S
    uswitch_latency_s: float = USWITCH_LATENCY_S

    @property
    def hop_latency_s(self) -> float:
        """A wire and a router: a 5-port crossbar timed as FRED_3(5)'s µSwitch stages."""
        return self.wire_latency_s + fred_stages(5) * self.uswitch_latency_s

    def coord(self, rank: int) -> tuple[int, int]:
        return divmod(rank, self.cols)

    @property
    def io_factor(self) -> float:
        """Fraction of I/O line rate the mesh sustains ((2N−1)·P rule, N = longer side)."""
        n = max(self.rows, self.cols)
        return min(1.0, self.link_Bps / ((2 * n - 1) * self.io_Bps))

    def xy_path(self, a: int, b: int) -> list[Link]:
        """Directed links from rank ``a`` to ``b``: along the row (X) first, then the column."""
        (ra, ca), (rb, cb) = self.coord(a), self.coord(b)
        hops: list[Link] = []
        r, c = ra, ca
        while c != cb:
            step = 1 if cb > c else -1
            hops.append(((r, c), (r, c + step)))
            c += step
        while r != rb:
            step = 1 if rb > r else -1
            hops.append(((r, c), (r + step, c)))
            r += step
        return hops


WAFER_MESH = Mesh()


def wafer_mesh(npus: int = 20) -> Mesh:
    """The mesh baseline for a wafer of ``npus`` NPUs
    (:func:`te_ccl.topology.generators.wafer_shape`: most nearly square, I/O controllers on
    its perimeter), e.g. ``wafer-mesh8x5`` for 40."""
    rows, cols = wafer_shape(npus)
    return Mesh(f"wafer-mesh{rows}x{cols}", rows, cols, io_controllers=2 * (rows + cols))


def _add_ring(mesh: Mesh, loads: dict, order: Sequence[int], per_edge: float,
              wrap: bool = True) -> int:
    """Add the ring's (or chain's) loads; returns its longest edge in hops."""
    pairs = list(zip(order, order[1:], strict=False))
    if wrap and len(order) > 1:
        pairs.append((order[-1], order[0]))
    longest = 0
    for a, b in pairs:
        path = mesh.xy_path(a, b)
        longest = max(longest, len(path))
        for link in path:
            loads[link] += per_edge
    return longest


def _rectangle(mesh: Mesh, ranks: Sequence[int]) -> tuple[list[int], list[int]] | None:
    rows = sorted({mesh.coord(r)[0] for r in ranks})
    cols = sorted({mesh.coord(r)[1] for r in ranks})
    if len(rows) * len(cols) != len(set(ranks)):
        return None
    return rows, cols


def _two_d(mesh: Mesh, rows: list[int], cols: list[int], d: float, factor: float,
           rows_first: bool) -> dict:
    """Loads of hierarchical rings over the rectangle, one dimension after the other."""
    loads: dict = defaultdict(float)
    at = lambda r, c: r * mesh.cols + c  # noqa: E731
    nr, nc = len(rows), len(cols)
    first, second = ((nc, nr) if rows_first else (nr, nc))
    lines_a = [[at(r, c) for c in cols] for r in rows] if rows_first else \
              [[at(r, c) for r in rows] for c in cols]
    lines_b = [[at(r, c) for r in rows] for c in cols] if rows_first else \
              [[at(r, c) for c in cols] for r in rows]
    for line in lines_a:
        if first > 1:
            _add_ring(mesh, loads, line, factor * (first - 1) / first * d)
    for line in lines_b:
        if second > 1:
            _add_ring(mesh, loads, line, factor * (second - 1) / second * d / first)
    return loads


def _balanced(load_x: dict, load_y: dict, link_Bps: float) -> dict:
    """The mix f·X + (1−f)·Y with the smallest maximum link load (ternary search on f)."""
    keys = set(load_x) | set(load_y)
    worst = lambda f: max(f * load_x.get(k, 0) + (1 - f) * load_y.get(k, 0) for k in keys)  # noqa: E731
    lo, hi = 0.0, 1.0
    for _ in range(100):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (lo, b) if worst(a) <= worst(b) else (a, hi)
    f = (lo + hi) / 2
    return {k: f * load_x.get(k, 0) + (1 - f) * load_y.get(k, 0) for k in keys}


def _snake(mesh: Mesh, ranks: Sequence[int]) -> list[int]:
    def key(r: int) -> tuple[int, int]:
        row, col = mesh.coord(r)
        return (row, col if row % 2 == 0 else -col)
    return sorted(ranks, key=key)


def mesh_loads(mesh: Mesh, op: CollectiveOp) -> tuple[dict, float]:
    """Bytes per directed mesh link of ``op`` and the latency of its steps (module docstring)."""
    loads: dict = defaultdict(float)
    factor = {"allreduce": 2.0, "reducescatter": 1.0, "allgather": 1.0}.get(op.kind)
    d, hop = op.size_bytes, mesh.hop_latency_s
    if factor is not None:
        rect = _rectangle(mesh, op.ranks)
        if rect is not None:
            rows, cols = rect
            # a ring on a line of k runs k-1 steps whose longest edge (the wrap) is k-1 hops
            latency = sum(op.ring_steps(k) * (k - 1) * hop for k in (len(rows), len(cols)))
            return _balanced(_two_d(mesh, rows, cols, d, factor, True),
                             _two_d(mesh, rows, cols, d, factor, False), mesh.link_Bps), latency
        longest = _add_ring(mesh, loads, _snake(mesh, op.ranks), factor * (op.n - 1) / op.n * d)
        return loads, op.ring_steps(op.n) * longest * hop
    if op.kind in ("broadcast", "reduce"):
        order = _snake(mesh, op.ranks)
        _add_ring(mesh, loads, order, d, wrap=False)
        hops = sum(len(mesh.xy_path(a, b)) for a, b in zip(order, order[1:], strict=False))
        return loads, hops * hop
    latency = 0.0
    for step in op.steps():
        longest = 0
        for s in step:
            path = mesh.xy_path(s.sources[0], s.destinations[0])
            longest = max(longest, len(path))
            for link in path:
                loads[link] += s.bytes
        latency += longest * hop
    return loads, latency


def compile_mesh(mesh: Mesh, ops: Sequence[CollectiveOp]) -> CommResult:
    """Time of ``ops`` running concurrently on the mesh: the fluid bound of all link loads
    plus the latency of the slowest op's steps."""
    loads: dict = defaultdict(float)
    latency_s = 0.0
    for op in ops:
        op_loads, op_latency = mesh_loads(mesh, op)
        latency_s = max(latency_s, op_latency)
        for link, b in op_loads.items():
            loads[link] += b
    time_s = max(loads.values(), default=0.0) / mesh.link_Bps + latency_s
    injected = max((op.endpoint_injected_bytes() for op in ops), default=0.0)
    return CommResult(mesh.name, tuple(ops), time_s, injected, link_loads=dict(loads),
                      fixed_s=latency_s)
