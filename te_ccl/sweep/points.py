"""A grid expanded into points: one fully loaded compile each, keyed by a content hash.

Every point is validated here, in the parent process, so a typo in ``GRID.yaml`` stops
the sweep before any solve (exit 2) rather than failing hundreds of points on a cluster.
A point carries the loaded :class:`Topology` and :class:`Collective` (not file names),
so a Ray worker on another node needs neither the grid nor the topology files.

The key hashes what determines the output — the topology's nodes and links, the
collective, the solver parameters, the size range, the output format and the teccl
version — so a
resumed sweep skips exactly the points whose result cannot have changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from te_ccl import __version__
from te_ccl.backends.base import SolveParams
from te_ccl.collective.model import Collective
from te_ccl.errors import SpecError
from te_ccl.lower.msccl import check_expressible
from te_ccl.outputs import path_component
from te_ccl.spec.collective import load_collective
from te_ccl.spec.topology import load_topology, shipped_topologies
from te_ccl.sweep.grid import CollectiveEntry, Grid, SizeRange
from te_ccl.topology.model import Topology

__all__ = ["FORMATS", "Point", "expand_grid", "point_key"]

# what a point writes: MSCCL XML, or an MSCCL++ execution plan (its file suffix)
FORMATS = {"xml": "xml", "mscclpp": "json"}


@dataclass(frozen=True)
class Point:
    """One algorithm to compile; ``name`` is its deterministic file stem (one safe path
    component, whatever the topology's name); ``fmt``: a key of :data:`FORMATS`."""

    key: str
    name: str
    size: SizeRange
    params: SolveParams
    topology: Topology = field(repr=False)
    collective: Collective = field(repr=False)
    fmt: str = "xml"

    @property
    def file_name(self) -> str:
        return f"{self.name}.{FORMATS[self.fmt]}"

    @property
    def group(self) -> tuple:
        """Points that compete for the same messages at runtime (one wins per group)."""
        c = self.collective
        return (self.topology.name, c.kind.value, c.root, c.ranks, c.inplace,
                self.size.min_bytes, self.size.max_bytes)

    def inputs(self) -> dict[str, Any]:
        """The point's axes as flat, CSV-friendly values."""
        c = self.collective
        min_bytes, max_bytes = self.size.xml_bounds
        return {
            "topology": self.topology.name, "collective": c.kind.value,
            "root": c.root, "ranks": " ".join(map(str, c.ranks)), "ngpus": c.nranks,
            "size_bytes": c.size_bytes, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "chunks": c.chunks_per_rank, "inplace": c.inplace, "proto": c.proto,
            "backend": self.params.backend, "time_limit_s": self.params.time_limit_s,
            "format": self.fmt,
        }


def point_key(topology: Topology, collective: Collective, params: SolveParams,
              size: SizeRange, fmt: str = "xml") -> str:
    """SHA-256 (hex) of everything that determines a point's output, teccl version included."""
    content = {
        "teccl": __version__,
        "topology": {"nodes": [dataclasses.asdict(n) for n in topology.nodes],
                     "links": [dataclasses.asdict(link) for link in topology.links]},
        "collective": dataclasses.asdict(collective),
        "params": dataclasses.asdict(params),
        "xml_bounds": size.xml_bounds,
        "format": fmt,
    }
    text = json.dumps(content, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def expand_grid(grid: Grid, fmt: str = "xml") -> list[Point]:
    """All points of ``grid`` in file order (topology, collective, size, chunks, inplace,
    proto, backend), each writing ``fmt``; raises SpecError naming the grid file and key
    of the first bad one."""
    _check_format(grid, fmt)
    topologies = [_topology(grid, i, ref) for i, ref in enumerate(grid.topologies)]
    names = [path_component(t.name) for t in topologies]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise SpecError(f"another topology's name also makes the directory name "
                            f"{name!r}; algorithm directories are per topology name",
                            file=grid.file, key=f"topologies[{i}]")
    for topo in topologies:  # each point would fail alike: refused once, before any compile
        check_expressible(fmt, topo)
    points: list[Point] = []
    seen: dict[str, str] = {}
    for topo in topologies:
        for entry in grid.collectives:
            first = len(points)
            for size in grid.sizes:
                for chunks in grid.chunks:
                    for inplace in grid.inplace:
                        for proto in grid.protos:
                            coll = _collective(grid, topo, entry, size, chunks, inplace, proto)
                            points += [_point(grid, topo, coll, size, b, fmt)
                                       for b in grid.backends]
            _refuse_duplicates(grid, points[first:], entry, seen)
    return points


def _check_format(grid: Grid, fmt: str) -> None:
    """Every collective of the grid can be written as ``fmt`` (plans cover fewer kinds)."""
    from te_ccl.compiler import check_plan_kind

    if fmt not in FORMATS:
        raise SpecError(f"expected one of {', '.join(FORMATS)}, got {fmt!r}", key="--format")
    if fmt != "mscclpp":
        return
    for entry in grid.collectives:
        for proto in grid.protos:
            check_plan_kind(entry.kind, proto, file=grid.file, key=entry.key)


def _refuse_duplicates(grid: Grid, points: list[Point], entry: CollectiveEntry,
                       seen: dict[str, str]) -> None:
    """Two collective entries that mean the same thing would write the same files."""
    for p in points:
        if seen.setdefault(p.key, entry.key) != entry.key:
            raise SpecError(f"the same collective as {seen[p.key]}", file=grid.file,
                            key=entry.key)


def _point(grid: Grid, topo: Topology, coll: Collective, size: SizeRange, backend: str,
           fmt: str) -> Point:
    params = SolveParams(backend=backend, time_limit_s=grid.time_limit_s, threads=1,
                         seed=grid.seed, epoch=grid.epoch, max_horizon=grid.max_horizon)
    key = point_key(topo, coll, params, size, fmt)
    parts = [topo.name, coll.kind.value]
    if coll.root is not None:
        parts.append(f"root{coll.root}")
    if coll.nranks != topo.ngpus:
        parts.append(f"n{coll.nranks}")
    parts += ["ip" if coll.inplace else "oop", size.label, f"c{coll.chunks_per_rank}",
              coll.proto, backend, key[:8]]
    return Point(key, path_component("-".join(parts)), size, params, topo, coll, fmt)


def _topology(grid: Grid, index: int, ref: str) -> Topology:
    """A shipped name, or a path relative to the grid file."""
    local = grid.base_dir / ref
    if ref in shipped_topologies() and not local.is_file():
        return load_topology(ref)
    path = local if not Path(ref).is_absolute() else Path(ref)
    if not path.is_file():
        raise SpecError(f"no shipped topology or file named {ref!r} (see `teccl topo list`)",
                        file=grid.file, key=f"topologies[{index}]")
    return load_topology(str(path))


def _grid_key(flag: str, entry: CollectiveEntry, size: SizeRange) -> str:
    """Where a value that ``load_collective`` refused (named by its flag) came from."""
    if flag in ("root", "ranks"):
        return f"{entry.key}.{flag}"
    return {"collective": entry.key, "size": size.key}.get(flag, flag)


def _collective(grid: Grid, topo: Topology, entry: CollectiveEntry, size: SizeRange,
                chunks: int, inplace: bool, proto: str) -> Collective:
    flags = {"collective": entry.kind, "size": size.at_bytes, "chunks": chunks,
             "ranks": entry.ranks, "root": entry.root, "inplace": inplace, "proto": proto}
    try:
        return load_collective(topo, None, **{k: v for k, v in flags.items() if v is not None})
    except SpecError as e:
        flag = (e.key or "").removeprefix("--")
        raise SpecError(f"{e.reason} (topology {topo.name})", file=grid.file,
                        key=_grid_key(flag, entry, size)) from None
