"""Load a topology from YAML: a shipped name (``dgx1``) or a path to a file.

The format (documented with an example in the README)::

    name: pair                      # optional, default: the file name
    source: where the numbers come from   # required in shipped files
    description: free text
    defaults: {bandwidth: 25GB/s, latency: 0.7us, gpu_buffer: 1GB}   # all optional
    generator: {kind: torus, dims: [4, 4], bandwidth: 50GB/s}          # optional
    gpus: [g0, g1, {name: g2, buffer: 256MB}]
    switches: [{name: sw, copy: true, reduce: false, buffer: false, fred: {ports: 5, m: 3}}]
    # or {name: nvs, nvls: true}: an NVLink SHARP switch (copies and reduces, GPUs only)
    links:
      - {between: [g0, g1], bandwidth: 50GB/s, count: 2}   # both directions, 2 parallel links
      - {from: g1, to: g2, latency: 1.3us}                  # one direction, default bandwidth

Nodes of ``generator`` come first (GPU ranks), then ``gpus``; extra links may join
generated and declared nodes. Parallel links add up (:meth:`Topology.build`). Every
GPU must reach every other GPU over directed links.

>>> t = load_topology("dgx1")
>>> t.ngpus, t.link("g0", "g3").bandwidth_Bps
(8, 50000000000.0)
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx

from te_ccl.errors import InputWarning, SpecError
from te_ccl.importers import IMPORT_SUFFIXES, import_file, sniff_format
from te_ccl.outputs import check_input_file
from te_ccl.spec.fields import (
    Fields,
    as_list,
    as_name,
    as_str,
    parse_bandwidth,
    parse_size,
    parse_time,
    positive_int,
)
from te_ccl.spec.generator import BoxLoader, switch_caps, topology_from_generator
from te_ccl.spec.yamlio import LineDict, read_yaml
from te_ccl.topology.generators import fill_fred_ports
from te_ccl.topology.model import Link, Node, Topology

__all__ = ["load_topology", "shipped_topologies", "shipped_dir", "topology_from_data"]

_TOP_KEYS = ("name", "source", "description", "defaults", "generator", "gpus", "switches",
             "links")
_MAX_NESTING = 8
_MAX_PARALLEL = 1024


def shipped_dir() -> Path:
    """Directory of the shipped topology files (``topologies/`` in the repository)."""
    return Path(str(resources.files("te_ccl") / "data" / "topologies"))


def shipped_topologies() -> list[str]:
    """Names of the shipped topologies, sorted."""
    return sorted(p.stem for p in shipped_dir().glob("*.yaml"))


def _resolve(name_or_path: str, base: Path | None) -> tuple[Path, bool]:
    """(file, is_shipped) for a shipped name or a path (relative to ``base`` if given)."""
    shipped = shipped_dir() / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if base is not None and not path.is_absolute():
        path = base / path
    try:
        if "/" not in name_or_path and not name_or_path.endswith((".yaml", ".yml")) \
                and shipped.is_file():
            return shipped, True
        found = path.exists()
    except OSError as e:  # a name too long for the file system
        raise SpecError(f"cannot look at it ({e.strerror or e})", file=str(path)) from None
    if not found:
        raise SpecError(f"no shipped topology or file named {name_or_path!r} "
                        "(see `teccl topo list`)", file=str(path))
    return path, False


def load_topology(name_or_path: str) -> Topology:
    """The topology named ``name_or_path`` (shipped) or stored in that YAML file.

    Raises
    ------
    SpecError
        For any problem with the file, naming the file, line and key.
    """
    return _load(str(name_or_path), None, ())


def _load(name_or_path: str, base: Path | None, stack: tuple[Path, ...]) -> Topology:
    path, shipped = _resolve(name_or_path, base)
    check_input_file(path)  # before a dump's format is sniffed (a FIFO's open blocks)
    if not shipped and path.suffix not in (".yaml", ".yml"):
        if path.suffix in IMPORT_SUFFIXES or sniff_format(path):
            imported = import_file(path)  # a topology dump, imported on the fly
            for line in imported.report.warnings:  # its quirks, as `topo import` gives them
                warnings.warn(InputWarning(line), stacklevel=3)
            return imported.topology
    label = f"topologies/{path.name}" if shipped else str(path)
    if path.resolve() in stack or len(stack) >= _MAX_NESTING:
        raise SpecError("topology files include each other in a cycle", file=label)
    data = read_yaml(path)

    def load_box(ref: str, f: Fields, key: str) -> Topology:
        try:
            return _load(ref, path.parent, stack + (path.resolve(),))
        except SpecError as e:
            raise f.error(key, f"cannot load box {ref!r}: {e}") from None

    return topology_from_data(data, label, default_name=path.stem, require_source=shipped,
                              load_box=load_box)


def _entry(f: Fields, path: str, item: Any, line: int | None) -> Fields:
    """A node entry as a mapping: a bare name ``a`` stands for ``{name: a}``."""
    if not isinstance(item, dict):
        item = LineDict(name=item)
        item.line = line
    return Fields.of(item, f.file, path, line=line)


def _declared_nodes(f: Fields, gpu_buffer: int | None) -> list[tuple[Node, str, int | None]]:
    """(node, yaml path, line) for ``gpus`` then ``switches``."""
    out = []
    for path, item, line in f.items("gpus", []):
        g = _entry(f, path, item, line)
        g.check(required=("name",), optional=("buffer",))
        node = Node(g.get("name", as_name), buffer_bytes=g.get("buffer", parse_size, gpu_buffer))
        out.append((node, path, line))
    for path, item, line in f.items("switches", []):
        s = _entry(f, path, item, line)
        caps = switch_caps(s, extra_keys=("name",))
        out.append((caps.node(s.get("name", as_name)), path, line))
    return out


def _link_ends(f: Fields) -> list[tuple[str, str]]:
    if f.has("between"):
        if f.has("from") or f.has("to"):
            raise f.error("between", "use either between: [a, b] or from:/to:, not both")
        ends = f.get("between", as_list)
        if len(ends) != 2:
            raise f.error("between", f"expected a list of 2 node names, got {len(ends)} items")
        a, b = (f.convert("between", e, as_name) for e in ends)
        return [(a, b), (b, a)]
    if not f.has("from") and not f.has("to"):
        raise f.error(None, "missing key between (or from and to)")
    return [(f.get("from", as_name), f.get("to", as_name))]


def _links(f: Fields, names: set[str], default_bw: float | None,
           default_lat: float) -> list[Link]:
    links = []
    for path, item, line in f.items("links", []):
        k = Fields.of(item, f.file, path, line=line)
        k.check(optional=("between", "from", "to", "bandwidth", "latency", "count"))
        ends = _link_ends(k)
        bw = k.get("bandwidth", parse_bandwidth, default_bw)
        if bw is None:
            raise k.error("bandwidth", "missing key (and no defaults.bandwidth)")
        lat = k.get("latency", parse_time, default_lat)
        count = k.get("count", positive_int, 1)
        if count > _MAX_PARALLEL:
            raise k.error("count", f"expected at most {_MAX_PARALLEL} parallel links, got {count}")
        for src, dst in ends:
            for end, key in ((src, "from"), (dst, "to")):
                if end not in names:
                    raise k.error("between" if k.has("between") else key,
                                  f"unknown node {end!r}; declare it under gpus or switches")
            if src == dst:
                raise k.error("between" if k.has("between") else "to",
                              f"a link from {src!r} to itself")
            links += [Link(src, dst, bw, lat)] * count
    return links


def _check_connected(topo: Topology, f: Fields) -> None:
    if topo.ngpus < 2:
        raise f.error("gpus", f"expected at least 2 GPUs, got {topo.ngpus}")
    g = topo.graph()
    first = topo.gpus[0]
    reach = nx.descendants(g, first)
    back = nx.ancestors(g, first)
    for other in topo.gpus[1:]:
        if other not in reach:
            raise f.error("links", f"GPU {first!r} cannot reach GPU {other!r} over directed "
                                   "links; every GPU must reach every other GPU")
        if other not in back:
            raise f.error("links", f"GPU {other!r} cannot reach GPU {first!r} over directed "
                                   "links; every GPU must reach every other GPU")


def _check_nvls(topo: Topology, f: Fields) -> None:
    """NVLink SHARP's limits: a multicast group spans one NVLink domain (NVSwitch ports,
    never a NIC), so an ``nvls`` switch links only to GPUs; a communicator has one group
    per domain, so NVLS switches that share a GPU (the chips of one NVSwitch fabric)
    serve the same GPUs."""
    groups: dict[str, frozenset[str]] = {}
    for s in topo.switches:
        if not topo.node(s).nvls:
            continue
        peers = {k.dst for k in topo.out_links(s)} | {k.src for k in topo.in_links(s)}
        other = sorted(p for p in peers if not topo.node(p).is_gpu)
        if other:
            raise f.error("switches", f"nvls switch {s!r} links to switch {other[0]!r}: "
                                      "NVLink SHARP reduces within one NVLink domain, so an "
                                      "nvls switch links only to GPUs")
        groups[s] = frozenset(peers)
    for s, gpus in groups.items():
        for t, theirs in groups.items():
            if s < t and gpus & theirs and gpus != theirs:
                raise f.error("switches", f"nvls switches {s!r} and {t!r} share GPU "
                                          f"{min(gpus & theirs)!r} but not all their GPUs: "
                                          "one NVLink domain is one multicast group")


def topology_from_data(data: Any, file: str, *, default_name: str = "topology",
                       require_source: bool = False,
                       load_box: BoxLoader | None = None) -> Topology:
    """Build and validate a topology from parsed YAML ``data`` read from ``file``."""
    f = Fields.of(data, file, expect="a topology mapping (name, gpus, switches, links…)")
    f.check(optional=_TOP_KEYS)
    if not f.has("gpus") and not f.has("generator"):
        raise f.error("gpus", "missing key (give gpus, or a generator)")
    d = f.sub("defaults") if f.has("defaults") else Fields({}, file, "defaults")
    d.check(optional=("bandwidth", "latency", "gpu_buffer"))
    gpu_buffer = d.get("gpu_buffer", parse_size, None)
    base = topology_from_generator(f.sub("generator"), load_box or _no_boxes) \
        if f.has("generator") else None
    nodes = [replace(n, buffer_bytes=n.buffer_bytes or gpu_buffer) if n.is_gpu else n
             for n in (base.nodes if base else ())]
    seen = {n.name for n in nodes}
    for node, path, line in _declared_nodes(f, gpu_buffer):
        if node.name in seen:
            raise SpecError(f"duplicate node {node.name!r}", file=file, key=path, line=line)
        seen.add(node.name)
        nodes.append(node)
    nodes.sort(key=lambda n: not n.is_gpu)  # GPUs first; stable, so rank order is kept
    links = list(base.links if base else ()) + _links(
        f, seen, d.get("bandwidth", parse_bandwidth, None), d.get("latency", parse_time, 0.0))
    source = f.get("source", as_str, "")
    if require_source and not source:
        raise f.error("source", "missing key (shipped topologies must say where numbers come from)")
    topo = Topology.build(f.get("name", as_name, default_name), fill_fred_ports(nodes, links),
                          links, source=source,
                          description=f.get("description", as_str, base.description if base else ""),
                          meta=dict(base.meta) if base else {})
    _check_connected(topo, f)
    _check_nvls(topo, f)
    return topo


def _no_boxes(ref: str, f: Fields, key: str) -> Topology:
    raise f.error(key, "box references need a file context; use load_topology")
