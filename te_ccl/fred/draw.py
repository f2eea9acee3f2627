"""Draw a FRED_m(P) with matplotlib: µSwitches as boxes, wires between stages.

Each recursion level adds an input column on the left and an output column on the
right; the m middles are stacked vertically in between. R elements are blue, D
orange, RD green, MUX/DEMUX grey. With a :class:`~te_ccl.fred.routing.Routing`,
elements used by a flow are labelled with their mode.
"""

from __future__ import annotations

from pathlib import Path

from te_ccl.fred.routing import Routing
from te_ccl.fred.switch import FredSwitch, MicroSwitch
from te_ccl.outputs import pyplot, save_figure

__all__ = ["layout", "draw_switch"]

COLOURS = {"R": "#8fb8de", "D": "#f4b183", "RD": "#a9d18e", "MUX": "#cccccc",
           "DEMUX": "#cccccc"}


def _width(sw: FredSwitch) -> int:
    return 1 if sw.base else 2 + _width(sw.middles[0])


def _port_element(sw: FredSwitch, port: int, side: str) -> MicroSwitch:
    """The element of ``sw`` that serves ``port`` on the input or output side."""
    if sw.base:
        return sw.base
    i = sw.element_of_port(port)
    if i == sw.r:
        return sw.demux if side == "in" else sw.mux
    return (sw.inputs if side == "in" else sw.outputs)[i]


def layout(sw: FredSwitch, x0: float = 0.0, y0: float = 0.0, height: float = 1.0,
           pos: dict | None = None, wires: list | None = None) -> tuple[dict, list]:
    """Positions ``path -> (x, y, half height)`` and wires ``(path, path)`` of every element."""
    pos = {} if pos is None else pos
    wires = [] if wires is None else wires
    if sw.base:
        pos[sw.base.path] = (x0, y0 + height / 2, 0.3 * height)
        return pos, wires
    first = [*sw.inputs, *([sw.demux] if sw.demux else [])]
    last = [*sw.outputs, *([sw.mux] if sw.mux else [])]
    x_out = x0 + _width(sw) - 1
    for col, x in ((first, x0), (last, x_out)):
        for k, e in enumerate(col):
            pos[e.path] = (x, y0 + height * (k + 0.5) / len(col), 0.3 * height / len(col))
    band = height / sw.m
    for c, mid in enumerate(sw.middles):
        layout(mid, x0 + 1, y0 + c * band, band, pos, wires)
        for k, (a, b) in enumerate(zip(first, last, strict=True)):
            wires.append((a.path, _port_element(mid, k, "in").path))
            wires.append((_port_element(mid, k, "out").path, b.path))
    return pos, wires


def draw_switch(sw: FredSwitch, path: str | Path, routing: Routing | None = None) -> None:
    """Save a drawing of ``sw`` (and the modes of ``routing``) to ``path`` (png, svg, pdf)."""
    plt = pyplot()

    pos, wires = layout(sw)
    elements = {e.path: e for e in sw.elements()}
    modes = {s.element.path: s.mode for s in routing.elements} if routing else {}
    width = _width(sw)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * width), max(4, 0.25 * len(pos) ** 0.5 * 6)))
    for a, b in wires:
        (xa, ya, _), (xb, yb, _) = pos[a], pos[b]
        ax.plot([xa, xb], [ya, yb], color="#999999", lw=0.5, zorder=1)
    for p, (x, y, box) in pos.items():
        e = elements[p]
        ax.add_patch(plt.Rectangle((x - 0.3, y - box), 0.6, 2 * box, zorder=2,
                                   facecolor=COLOURS[e.kind.value], edgecolor="black", lw=0.5))
        label = e.kind.value + (f"\n{modes[p]}" if p in modes else "")
        ax.text(x, y, label, ha="center", va="center", fontsize=6, zorder=3)
    ax.set_xlim(-0.6, width - 0.4)
    ax.set_ylim(0, 1)
    ax.axis("off")
    ax.set_title(f"{sw.path}: FRED_{sw.m}({sw.ports}), {len(pos)} µSwitches")
    fig.tight_layout()
    save_figure(fig, path, dpi=150)
