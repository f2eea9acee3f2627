"""Per-link Gantt chart of a simulation (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

from te_ccl.errors import SpecError
from te_ccl.outputs import pyplot, save_figure
from te_ccl.simulate.result import SimResult

__all__ = ["draw_timeline"]

_FORMATS = {".png", ".svg", ".pdf"}


def draw_timeline(result: SimResult, path: str | Path, *, title: str = "") -> Path:
    """Draw one row per used link, one bar per chunk (busy time; a thin tail for α).

    The file is written to a temporary name and renamed, so a failure leaves no partial
    output. The format follows the suffix (``.png``, ``.svg`` or ``.pdf``).
    """
    path = Path(path)
    if path.suffix.lower() not in _FORMATS:
        raise SpecError(f"expected a .png, .svg or .pdf file name, got {path.name!r}",
                        key="--timeline")
    plt = pyplot()
    from matplotlib.collections import LineCollection, PolyCollection

    links = sorted({(iv.src, iv.dst) for iv in result.intervals})
    row = {k: i for i, k in enumerate(links)}
    labels = sorted({iv.label for iv in result.intervals})
    cmap = plt.get_cmap("tab20")
    colour = {lab: cmap(i % 20) for i, lab in enumerate(labels)}
    scale, unit = _time_unit(max(result.finish_time_s, result.last_arrival_s))
    fig, ax = plt.subplots(figsize=(10, max(2.0, 0.28 * len(links) + 1.2)))
    bars, colours, tails = [], [], []  # one artist for all bars, one for all tails
    for iv in result.intervals:
        y, x0, x1 = row[(iv.src, iv.dst)], iv.start_s * scale, iv.end_s * scale
        bars.append([(x0, y - 0.35), (x1, y - 0.35), (x1, y + 0.35), (x0, y + 0.35)])
        colours.append(colour[iv.label])
        if iv.arrive_s > iv.end_s:
            tails.append([(x1, y), (iv.arrive_s * scale, y)])
    ax.add_collection(PolyCollection(bars, facecolors=colours, edgecolors="black",
                                     linewidths=0.3))
    ax.add_collection(LineCollection(tails, colors="grey", linewidths=0.6))
    ax.autoscale_view()
    ax.set_ylim(len(links) - 0.5, -0.5)  # the first link on top
    ax.set_yticks(range(len(links)), [f"{s}→{d}" for s, d in links], fontsize=7)
    ax.set_xlabel(f"time ({unit})")
    ax.axvline(result.finish_time_s * scale, color="red", lw=0.8, ls="--")
    ax.set_title(title or f"finish {result.finish_time_s * scale:.4g} {unit}")
    fig.tight_layout()
    return save_figure(fig, path)


def _time_unit(span_s: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "us")):
        if span_s * scale >= 1:
            return scale, unit
    return 1e9, "ns"
