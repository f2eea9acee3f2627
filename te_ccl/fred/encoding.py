"""Bit-level encoding of one phase's configuration of one FRED switch (for the 1.5 KB budget).

Elements are numbered in :meth:`FredSwitch.elements` order. With ``cb =
ceil(log2(m+1))`` bits naming a middle (0 = unused, c+1 = middle c):

* R input µSwitch: for each of its 2 inputs, the middle it goes to (2·cb bits). Two
  inputs sent to the same middle are necessarily one flow, so they are added: the
  reduce bit is implied;
* D output µSwitch: for each of its 2 outputs, the middle it takes (2·cb bits); both
  from one middle = broadcast;
* DEMUX / MUX: the middle (cb bits);
* RD base: for each output, its source: 0 none, 1 input 0, 2 input 1, 3 the sum
  (4 bits): forward, cross, reduce, broadcast, reduce-broadcast are all expressible.

A configuration is ``1`` format bit then either the **dense** form (every element's
field, in order) or the **sparse** form (16-bit count, then per configured element its
index in ``ceil(log2 E)`` bits followed by its field), whichever is shorter; the total
is rounded up to whole bytes. A switch stores one configuration per non-default
phase; the default index (all unicast, routed online) costs nothing.

>>> from te_ccl.fred.switch import build_fred
>>> from te_ccl.fred.routing import Flow, route
>>> sw = build_fred(4, 3, "s")
>>> encoded_bits(route(sw, [Flow("a", (0, 1, 2, 3), (0, 1, 2, 3))])) <= 8 * config_bytes(sw)
True
"""

from __future__ import annotations

import math

from te_ccl.fred.routing import ElementSetting, Routing
from te_ccl.fred.switch import ElementKind, FredSwitch, MicroSwitch

__all__ = ["SRAM_BYTES", "field_bits", "encoded_bits", "config_bytes", "encode"]

SRAM_BYTES = 1536  # 1.5 KB of configuration SRAM per switch (the FRED paper)


def _cb(m: int) -> int:
    return math.ceil(math.log2(m + 1))


def field_bits(element: MicroSwitch, m: int) -> int:
    """Width of one element's field in bits."""
    if element.kind is ElementKind.RD:
        return 4
    if element.kind in (ElementKind.MUX, ElementKind.DEMUX):
        return _cb(m)
    return 2 * _cb(m)


def _field(setting: ElementSetting, m: int) -> int:
    """The field value of one configured element (module docstring)."""
    kind = setting.element.kind
    cb = _cb(m)
    if kind is ElementKind.RD:
        value = 0
        for use in setting.uses:
            ins = [int(x) for x in use.input_sel.split("+")]
            src = 3 if len(ins) == 2 else ins[0] + 1
            for out in (int(x) for x in use.output_sel.split("+")):
                value |= src << (2 * out)
        return value
    if kind in (ElementKind.MUX, ElementKind.DEMUX):
        return setting.uses[0].colour + 1
    value = 0
    for use in setting.uses:
        sides = use.input_sel if kind is ElementKind.R else use.output_sel
        for side in (int(x) for x in sides.split("+")):
            value |= (use.colour + 1) << (cb * side)
    return value


_LAYOUTS: dict[tuple[str, int, int], tuple[dict[str, int], tuple[int, ...], int]] = {}


def _layout(sw: FredSwitch) -> tuple[dict[str, int], tuple[int, ...], int]:
    """Index and field width of each element of ``sw`` and the dense form's bits, built
    once per switch (a wafer's phases encode the same switches over and over)."""
    key = (sw.path, sw.ports, sw.m)
    if key not in _LAYOUTS:
        elements = list(sw.elements())
        widths = tuple(field_bits(e, sw.m) for e in elements)
        _LAYOUTS[key] = ({e.path: i for i, e in enumerate(elements)}, widths, sum(widths))
    return _LAYOUTS[key]


def encode(routing: Routing) -> tuple[int, int]:
    """``(bits, value)`` of the shorter encoding of one routed phase (module docstring)."""
    sw: FredSwitch = routing.switch
    index, widths, dense_bits = _layout(sw)
    fields = {index[s.element.path]: _field(s, sw.m) for s in routing.elements}
    ib = max(1, math.ceil(math.log2(len(widths))))
    sparse_bits = 16 + sum(ib + widths[i] for i in fields)
    if sparse_bits < dense_bits:
        sparse = len(fields)
        for i in sorted(fields):
            sparse = (((sparse << ib) | i) << widths[i]) | fields[i]
        return 1 + sparse_bits, (1 << sparse_bits) | sparse
    dense = 0
    for i, w in enumerate(widths):
        dense = (dense << w) | fields.get(i, 0)
    return 1 + dense_bits, dense


def encoded_bits(routing: Routing) -> int:
    return encode(routing)[0]


def config_bytes(switch: FredSwitch) -> int:
    """Bytes of a dense configuration of ``switch`` (the worst case of one phase)."""
    return math.ceil((1 + sum(field_bits(e, switch.m) for e in switch.elements())) / 8)
