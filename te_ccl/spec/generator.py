"""The ``generator:`` section of a topology file: a call of :mod:`te_ccl.topology.generators`.

Each kind maps YAML keys to a generator's keyword arguments and a converter; whether a
key is required is read from the generator's signature (no default → required), so the
YAML schema and the Python API cannot drift apart.

>>> from te_ccl.spec.yamlio import parse_yaml
>>> g = parse_yaml("kind: torus\\ndims: [4, 4]\\nbandwidth: 50GB/s\\nlatency: 0.5us", "x.yaml")
>>> topology_from_generator(Fields.of(g, "x.yaml", "generator"), lambda ref, f, key: None).ngpus
16
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from te_ccl.spec.fields import (
    Fields,
    as_bool,
    as_list,
    as_name,
    as_str,
    parse_bandwidth,
    parse_time,
    positive_int,
)
from te_ccl.topology import generators as gen
from te_ccl.topology.model import Topology

__all__ = ["switch_caps", "topology_from_generator", "BoxLoader"]

# load_topology for a box reference: (name or path, the Fields holding it, key) -> Topology
BoxLoader = Callable[[str, Fields, str], Topology]


def _fred(f: Fields) -> dict[str, int]:
    f.check(optional=("ports", "m"))
    m = f.get("m", positive_int, 3)
    ports = f.get("ports", positive_int, None)
    if m < 2:
        raise f.error("m", "expected m >= 2 middle switches (FRED uses 3)")
    if ports is not None and ports < 2:
        raise f.error("ports", "expected at least 2 ports")
    return {"fred_m": m, "fred_ports": ports}


_PLAIN = gen.SwitchCaps()
_NO_COPY = gen.SwitchCaps(copy=False)


def switch_caps(f: Fields, extra_keys: tuple[str, ...] = (),
                default: gen.SwitchCaps = _PLAIN) -> gen.SwitchCaps:
    """Switch capabilities ``copy``, ``reduce``, ``buffer``, ``fred: {ports, m}``, ``nvls`` of
    mapping ``f``. ``nvls: true`` (NVLink SHARP) copies and reduces: it refuses ``copy`` or
    ``reduce`` false, and a FRED switch."""
    f.check(optional=extra_keys + ("copy", "reduce", "buffer", "fred", "nvls"))
    fred = _fred(f.sub("fred")) if f.has("fred") else {}
    nvls = f.get("nvls", as_bool, False)
    if nvls:
        for key in ("copy", "reduce"):
            if not f.get(key, as_bool, True):
                raise f.error(key, "an nvls (NVLink SHARP) switch copies and reduces; "
                                   f"drop {key}: false or nvls: true")
        if fred:
            raise f.error("nvls", "a switch is either NVLink SHARP (nvls) or FRED (fred), "
                                  "not both")
    return gen.SwitchCaps(copy=f.get("copy", as_bool, default.copy) or nvls,
                          reduce=f.get("reduce", as_bool, default.reduce) or nvls,
                          buffer=f.get("buffer", as_bool, default.buffer), nvls=nvls, **fred)


def _dims(value: Any) -> list[int]:
    dims = [positive_int(d) for d in as_list(value)]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"expected 1 to 3 dimensions, got {len(dims)}")
    return dims


def _names(value: Any) -> tuple[str, ...]:
    names = tuple(as_name(v) for v in as_list(value))
    if not names:
        raise ValueError("expected at least one node name")
    return names


def _join(f: Fields) -> gen.Join:
    f.check(required=("kind", "nodes", "bandwidth"), optional=("latency", "switch"))
    kind = f.get("kind", as_str)
    if kind not in ("direct", "switch", "rails"):
        raise f.error("kind", f"expected direct, switch or rails, got {kind!r}")
    caps = switch_caps(f.sub("switch"), default=_NO_COPY) if f.has("switch") else _NO_COPY
    return gen.Join(kind, f.get("nodes", _names), f.get("bandwidth", parse_bandwidth),
                    f.get("latency", parse_time, 0.0), caps)


def _spec(func: Callable, **keys: tuple[str, Callable]) -> tuple[Callable, dict]:
    return func, keys


_BW = ("bandwidth_Bps", parse_bandwidth)
_LAT = ("latency_s", parse_time)
# kind -> (generator, {yaml key: (keyword argument, converter)}); "box"/"join"/"switch"
# converters that need the loader are resolved in _argument.
_KINDS: dict[str, tuple[Callable, dict]] = {
    "ring": _spec(gen.ring, n=("n", positive_int), bandwidth=_BW, latency=_LAT,
                  bidirectional=("bidirectional", as_bool)),
    "fully_connected": _spec(gen.fully_connected, n=("n", positive_int), bandwidth=_BW,
                             latency=_LAT),
    "mesh": _spec(gen.mesh, dims=("dims", _dims), bandwidth=_BW, latency=_LAT),
    "torus": _spec(gen.torus, dims=("dims", _dims), bandwidth=_BW, latency=_LAT),
    "star": _spec(gen.star, n=("n", positive_int), bandwidth=_BW, latency=_LAT,
                  switch=("switch", None)),
    "fat_tree": _spec(gen.fat_tree, leaves=("leaves", positive_int),
                      gpus_per_leaf=("gpus_per_leaf", positive_int),
                      spines=("spines", positive_int), bandwidth=_BW, latency=_LAT,
                      uplink_bandwidth=("uplink_bandwidth_Bps", parse_bandwidth),
                      switch=("switch", None)),
    "boxes": _spec(gen.boxes, box=("box", None), count=("count", positive_int),
                   join=("join", None)),
    "fred": _spec(gen.fred, variant=("variant", as_str), npus=("npus", positive_int),
                  npus_per_l1=("npus_per_l1", positive_int),
                  wire_latency=("wire_latency_s", parse_time),
                  uswitch_latency=("uswitch_latency_s", parse_time)),
    "wafer_mesh": _spec(gen.wafer_mesh, npus=("npus", positive_int),
                        wire_latency=("wire_latency_s", parse_time),
                        uswitch_latency=("uswitch_latency_s", parse_time)),
    "rail_optimized": _spec(gen.rail_optimized, boxes=("nboxes", positive_int),
                            gpus_per_box=("gpus_per_box", positive_int),
                            nvlink_bandwidth=("nvlink_bandwidth_Bps", parse_bandwidth),
                            nic_bandwidth=("nic_bandwidth_Bps", parse_bandwidth),
                            latency=_LAT, nic_latency=("nic_latency_s", parse_time)),
}


def _argument(f: Fields, key: str, convert: Callable | None, load_box: BoxLoader) -> Any:
    if convert is not None:
        return f.get(key, convert)
    if key == "switch":
        return switch_caps(f.sub("switch"))
    if key == "join":
        return _join(f.sub("join"))
    value = f.data[key]  # "box": a topology name/path or an inline generator mapping
    if isinstance(value, str):
        return load_box(value, f, key)
    return topology_from_generator(f.sub(key, expect="a topology name or a generator mapping"),
                                   load_box)


def topology_from_generator(f: Fields, load_box: BoxLoader) -> Topology:
    """Run the generator described by mapping ``f`` (``kind`` plus that kind's keys)."""
    kind = f.get("kind", as_str)
    if kind not in _KINDS:
        raise f.error("kind", f"expected one of: {', '.join(_KINDS)}, got {kind!r}")
    func, keys = _KINDS[kind]
    params = inspect.signature(func).parameters
    required = tuple(k for k, (arg, _) in keys.items()
                     if params[arg].default is inspect.Parameter.empty)
    f.check(required=("kind",) + required,
            optional=("name",) + tuple(k for k in keys if k not in required))
    kwargs = {arg: _argument(f, key, convert, load_box)
              for key, (arg, convert) in keys.items() if f.has(key)}
    if f.has("name"):
        kwargs["name"] = f.get("name", as_name)
    try:
        return func(**kwargs)
    except ValueError as e:
        raise f.error(None, str(e)) from None
