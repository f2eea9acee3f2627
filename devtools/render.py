"""Benchmark outputs: results.csv, results.md (markdown summary), algbw-vs-size plots, rich tables."""

from __future__ import annotations

import csv
import io
import os
import platform
from collections import defaultdict
from dataclasses import asdict, fields
from pathlib import Path

from rich.table import Table

from devtools import provenance
from devtools.runner import SIM_LIMIT, BenchResult, Row
from devtools.targets import TACOS_RATIOS, Anchor, Target, anchors, evaluate_targets
from te_ccl.outputs import pyplot, save_figure, write_atomic
from te_ccl.units import format_size, format_time

__all__ = ["BOUND_ARGUMENTS", "write_outputs", "results_csv", "results_markdown", "draw_plots",
           "targets_table", "results_table"]

# The parts of te_ccl.bounds.Bound, in one line each for the legend (proofs: docs/model.md)
BOUND_ARGUMENTS: dict[str, str] = {
    "cut_s": "the bytes that must cross the boundary of a set of nodes, over its bandwidth "
             "(Broadcast, Reduce: the root's least max-flow; AllReduce: the least cut "
             "between two members, each way; `node-cut`: one GPU's links)",
    "stream_s": "Broadcast, Reduce: the bytes leaving the root's side of a cut over its "
                "bandwidth, then the α-distance from that cut to the farthest GPU",
    "gossip_s": "AllReduce: 2(k−1) transfers of every element into the k groups of nodes "
                "that can add, over the bandwidth into (or out of) the groups",
    "per_node_s": "AlltoAll, custom: the bytes each node sends and receives, over its own links",
    "concurrent_flow_s": "AlltoAll: the max-concurrent-flow LP, the fluid optimum",
    "link_time_s": "AlltoAll where that LP is too large: every pair's bytes keep the links of "
                   "its cheapest path busy, shared by all links",
    "cut_alpha_s": "AlltoAll: the pairs' bytes leaving (entering) a set of nodes over its "
                   "bandwidth, then the least α from that cut on to a GPU outside (into it)",
    "window_s": "AlltoAll: the pairs leaving a box whose routes out take at least θ of α cross "
                "each link out in a few windows of the time less θ, so their bytes over those "
                "windows' bandwidth, plus θ",
    "walk_window_s": "AlltoAll: the largest time by which a linear program shows the pairs' "
                     "bytes cannot spread over their simple paths of α under it, each hop "
                     "busy only inside the window its path's α leaves it",
    "alpha_s": "latency: the α-weighted distance of the farthest source and destination "
               "that exchange data",
}


def _size(n: int) -> str:
    for scale, unit in ((10**9, "GB"), (10**6, "MB"), (10**3, "KB")):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return format_size(n)


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _bound(r: Row) -> str:
    """The bound's time and the argument that sets it, and how it was found if not exactly."""
    if r.bound_s is None:
        return r.bound_kind or "—"
    how = f" ({r.bound_kind})" if r.bound_kind not in ("", "exact") else ""
    return f"{format_time(r.bound_s)} `{r.bound_by}`{how}"


def _bound_legend() -> list[str]:
    return (["#### Bound arguments", "",
             "The bound is the largest of these lower bounds; the `bound` columns name the "
             "one that sets it (`bound_by` in results.csv; proofs in docs/model.md).", ""]
            + [f"* `{name}`: {meaning}" for name, meaning in BOUND_ARGUMENTS.items()])


def results_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    names = [f.name for f in fields(Row)]
    w = csv.DictWriter(buf, names, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in asdict(r).items()})
    return buf.getvalue()


def _md_table(head: list[str], body: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(row) + " |" for row in body])


def _per_topology(rows: list[Row]) -> list[str]:
    """One table per topology: sizes down, systems across, algbw GB/s (ratio to bound)."""
    out: list[str] = []
    by_topo: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.group == "suite":
            by_topo[r.topology].append(r)
    for topo, rs in by_topo.items():
        systems = ["teccl"] + sorted({r.system for r in rs} - {"teccl"})
        out += [f"### {topo} ({rs[0].ngpus} GPUs)", ""]
        body = []
        for key in sorted({(r.collective, r.size_bytes) for r in rs}):
            cell = {r.system: r for r in rs if (r.collective, r.size_bytes) == key}
            body.append([key[0], _size(key[1]), _bound(next(iter(cell.values())))] + [
                (f"{cell[s].algbw_GBps:.3g} ({cell[s].ratio:.2f})" if cell[s].ok else "fail")
                if s in cell else "" for s in systems])
        out += _md_table(["collective", "size", "bound"]
                         + [s.replace("baseline:", "") for s in systems], body)
        out += ["", f"![algbw vs size on {topo}](plots/{topo}.png)", ""]
    return out


def _scale(rows: list[Row]) -> list[str]:
    body = []
    for r in rows:
        if r.group != "scale" or r.system != "teccl":
            continue
        tacos = TACOS_RATIOS.get(r.topology) if r.collective == "allgather" else None
        body.append([r.topology, r.collective, str(r.ngpus), _num(r.solver_time_s, "{:.1f}"),
                     _num(r.ratio) if r.ok else r.status.replace("|", "/"),
                     _num(r.predicted_s / r.bound_s if r.ok and r.bound_s else None),
                     _bound(r), _num(tacos)])
    return _md_table(["instance", "collective", "GPUs", "solver s", "ratio",
                      "ratio (epochs)", "bound", "TACOS ratio"], body)


def _defaults(rows: list[Row]) -> list[str]:
    """The defaults matrix, a row per compile: wall time, first file, final ratio."""
    body = [[r.topology, r.collective, _size(r.size_bytes), _num(r.solver_time_s, "{:.1f}"),
             _num(r.first_file_s, "{:.2f}"), _num(r.ratio),
             "cut short" if r.cut_short else r.status.replace("|", "/")]
            for r in rows if r.group == "defaults"]
    if not body:
        return []
    return (["", "#### Defaults: `teccl compile TOPOLOGY -c KIND -s SIZE -o FILE`", ""]
            + _md_table(["topology", "collective", "size", "wall s", "first file s",
                         "ratio", "status"], body))


def results_markdown(result: BenchResult, targets: list[Target], anchor_rows: list[Anchor]) -> str:
    met = sum(t.met for t in targets)
    lines = [
        f"Suite `{result.suite}`: {len({(r.topology, r.collective, r.size_bytes, r.chunks) for r in result.rows})} "
        f"distinct cases, {len(result.rows)} schedules in {result.elapsed_s / 60:.1f} min on "
        f"{os.cpu_count()} cores ({platform.python_implementation()} {platform.python_version()}); "
        f"{len(result.skipped)} case(s) skipped for the time budget.",
        "Every time is the replay of the lowered MSCCL XML (α-β with link contention, "
        "thread blocks and connections as the runtime runs them; above "
        f"{SIM_LIMIT:,} transfers the epoch-model prediction; `measured_by` and "
        "`xml_ratio` = XML / schedule replay in results.csv); schedules up to 200k "
        "epochs and 100k transfers passed the independent schedule checker (`checked` in "
        "results.csv); ratio = time / lower bound (`bound`: its time and the argument that "
        "sets it, see the legend; `node-cut`: one GPU's cut where the exact bound takes "
        "over 30 s); algbw = size / time (GB/s, nccl-tests).",
        "", f"#### Targets: {met} met, {len(targets) - met} short", "",
    ]
    lines += _md_table(["target", "measured", "goal", "status"],
                       [[t.name, t.measured.replace("|", "/"), t.goal,
                         "met" if t.met else "**short**"] for t in targets])
    lines += ["", "#### Anchors: NDv2 ×2 AllGather algbw (GB/s)", ""]
    sizes = sorted({a.size_bytes for a in anchor_rows})
    systems = list(dict.fromkeys(a.system for a in anchor_rows))
    cell = {(a.system, a.size_bytes): a for a in anchor_rows}

    def show(a: Anchor | None) -> str:
        note = f" ({a.note})" if a is not None and a.note else ""
        return _num(a.algbw_GBps if a else None, "{:.3g}") + note

    lines += _md_table(["system"] + [_size(s) for s in sizes],
                       [[s] + [show(cell.get((s, z))) for z in sizes] for s in systems])
    lines += [""] + _bound_legend()
    lines += ["", "#### Scale (1 GiB)", ""] + _scale(result.rows)
    lines += ["", "#### Results per topology: algbw GB/s (ratio to bound)", ""]
    lines += _per_topology(result.rows)
    lines += _defaults(result.rows)
    return "\n".join(lines) + "\n"


_COLOURS = {"teccl": "black", "baseline:ring": "tab:blue", "baseline:ring-bidir": "tab:cyan",
            "baseline:tree": "tab:green", "baseline:direct": "tab:orange",
            "baseline:hierarchical": "tab:purple"}


def draw_plots(rows: list[Row], out_dir: Path) -> list[Path]:
    """One PNG per topology: algbw vs size, one panel per collective, one line per system."""
    plt = pyplot()

    by_topo: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.group == "suite" and r.ok:
            by_topo[r.topology].append(r)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for topo, rs in by_topo.items():
        kinds = sorted({r.collective for r in rs})
        fig, axes = plt.subplots(1, len(kinds), figsize=(4 * len(kinds), 3.4), squeeze=False)
        for ax, kind in zip(axes[0], kinds, strict=True):
            for system in sorted({r.system for r in rs if r.collective == kind}):
                pts = sorted((r.size_bytes, r.algbw_GBps) for r in rs
                             if r.collective == kind and r.system == system)
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3, color=_COLOURS.get(system),
                        lw=2.2 if system == "teccl" else 1, label=system.replace("baseline:", ""))
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(kind)
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("algbw (GB/s)")
        handles = {h.get_label(): h for ax in axes[0] for h in ax.get_lines()}
        axes[0][-1].legend(handles.values(), handles.keys(), fontsize=7)
        fig.suptitle(f"{topo}: algbw of the replayed XML")
        fig.tight_layout()
        written.append(save_figure(fig, out_dir / f"{topo}.png", dpi=90))
    return written


def targets_table(targets: list[Target]) -> Table:
    t = Table("target", "measured", "goal", "status", title="targets")
    for x in targets:
        t.add_row(x.name, x.measured, x.goal,
                  "[green]met[/]" if x.met else "[red]short[/]")
    return t


def results_table(rows: list[Row]) -> Table:
    t = Table("topology", "collective", "size", "system", "solver", "time", "algbw GB/s",
              "ratio", "bound by", "XML/sched", title="results")
    for r in rows:
        t.add_row(r.topology, r.collective, _size(r.size_bytes),
                  r.system.replace("baseline:", ""),
                  format_time(r.solver_time_s) if r.solver_time_s is not None else "",
                  format_time(r.time_s) if r.ok else r.status[:40],
                  _num(r.algbw_GBps, "{:.3g}"), _num(r.ratio), r.bound_by, _num(r.xml_ratio))
    return t


def write_outputs(result: BenchResult, out_dir: str | Path,
                  header: dict | None = None) -> dict[str, Path]:
    """Write results.csv, results.md and plots/*.png under ``out_dir`` (created); the run's
    ``header`` (:mod:`devtools.provenance`) is results.md's first line."""
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    targets = evaluate_targets(result.rows, result.planned or None)
    write_atomic(out / "results.csv", results_csv(result.rows))
    write_atomic(out / "results.md", provenance.line(header) + "\n\n"
                 + results_markdown(result, targets, anchors(result.rows)))
    draw_plots(result.rows, out / "plots")
    return {"csv": out / "results.csv", "markdown": out / "results.md", "plots": out / "plots"}
