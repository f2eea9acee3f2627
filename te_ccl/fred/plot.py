"""Plot an evaluation: stacked iteration-time bars per fabric, speedups on top."""

from __future__ import annotations

from pathlib import Path

from te_ccl.fred.evaluate import Evaluation
from te_ccl.outputs import pyplot, save_figure

__all__ = ["plot_evaluation"]

PARTS = (("compute_s", "compute"), ("mp_s", "MP"), ("pp_s", "PP"), ("dp_s", "DP"),
         ("io_s", "I/O"))


def plot_evaluation(ev: Evaluation, path: str | Path) -> None:
    """Save the breakdown of ``ev`` (milliseconds per fabric) to ``path``."""
    plt = pyplot()

    names = [r.fabric for r in ev.results]
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(names)
    for attr, label in PARTS:
        values = [1e3 * getattr(r, attr) for r in ev.results]
        ax.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, (r, top) in enumerate(zip(ev.results, bottom, strict=True)):
        ax.text(x, top, f"{r.speedup:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("iteration time (ms)")
    ax.set_title(f"{ev.workload}, {ev.strategy}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=150)
