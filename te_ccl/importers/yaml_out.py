"""Write a topology as a YAML file that :func:`te_ccl.spec.topology.load_topology` reads back.

The sanity report goes at the top as comments, so the file says where every number
came from. Numbers are written so that they parse back to the same float; a link
whose reverse has the same bandwidth and latency is written once as ``between``.

>>> from te_ccl.topology.generators import ring
>>> text = topology_yaml(ring(3, 25e9, 0.7e-6), ["read: a ring"])
>>> from te_ccl.spec.yamlio import parse_yaml
>>> from te_ccl.spec.topology import topology_from_data
>>> topology_from_data(parse_yaml(text, "x.yaml"), "x.yaml").link("g0", "g1").bandwidth_Bps
25000000000.0
"""

from __future__ import annotations

import json

from te_ccl.topology.model import Node, Topology
from te_ccl.units import parse_bandwidth, parse_time

__all__ = ["topology_yaml"]


def _exact(value: float, units: tuple[tuple[float, str], ...], parse) -> str:
    for scale, unit in units:
        text = repr(value / scale).removesuffix(".0") + unit
        if parse(text) == value:
            return text
    return repr(value) + units[-1][1]


def _bw(x: float) -> str:
    return _exact(x, ((1e9, "GB/s"), (1e6, "MB/s"), (1.0, "B/s")), parse_bandwidth)


def _lat(x: float) -> str:
    if x == 0:
        return "0s"
    return _exact(x, ((1e-6, "us"), (1e-9, "ns"), (1.0, "s")), parse_time)


def _q(name: str) -> str:
    return json.dumps(name)  # a JSON string is a valid YAML flow scalar


def _gpu(node: Node) -> str:
    """A GPU entry: its name, with its relay buffer where it has a limit."""
    if node.buffer_bytes is None:
        return _q(node.name)
    return f"{{name: {_q(node.name)}, buffer: {node.buffer_bytes}B}}"


def topology_yaml(topo: Topology, comments: list[str]) -> str:
    """YAML text of ``topo``, with ``comments`` (the sanity report) as a header."""
    out = [f"# {c}" if c else "#" for c in comments]
    out += [f"name: {_q(topo.name)}",
            f"source: {_q(topo.source or 'imported')}",
            f"description: {_q(topo.description or topo.name)}",
            "gpus: [" + ", ".join(_gpu(topo.node(g)) for g in topo.gpus) + "]"]
    switches = [topo.node(s) for s in topo.switches]
    if switches:
        out.append("switches:")
        out += [f"  - {{name: {_q(s.name)}, copy: {str(s.can_copy).lower()}, "
                f"reduce: {str(s.can_reduce).lower()}, buffer: {str(s.has_buffer).lower()}"
                + (f", fred: {{ports: {s.fred_ports}, m: {s.fred_m}}}" if s.fred_m else "")
                + (", nvls: true" if s.nvls else "") + "}" for s in switches]
    out.append("links:")
    done: set[tuple[str, str]] = set()
    for k in topo.links:
        if k.key in done:
            continue
        done.add(k.key)
        back = topo.has_link(k.dst, k.src) and topo.link(k.dst, k.src)
        tail = f"bandwidth: {_bw(k.bandwidth_Bps)}, latency: {_lat(k.latency_s)}"
        if back and back.bandwidth_Bps == k.bandwidth_Bps and back.latency_s == k.latency_s:
            done.add(back.key)
            out.append(f"  - {{between: [{_q(k.src)}, {_q(k.dst)}], {tail}}}")
        else:
            out.append(f"  - {{from: {_q(k.src)}, to: {_q(k.dst)}, {tail}}}")
    return "\n".join(out) + "\n"
