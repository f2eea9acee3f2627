"""``teccl simulate TOPOLOGY SCHEDULE``: replay a schedule (JSON) or MSCCL XML with α-β costs.

The replay shares no arithmetic with the solver (``te_ccl.simulate``). It reports the
finish time, algbw/busbw, the ratio to the lower bound, per-GPU completion and per-link
busy time; ``--timeline FILE.png|svg`` draws a per-link Gantt chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from te_ccl.cli.common import emit_json, err_console
from te_ccl.errors import SpecError
from te_ccl.simulate.result import SimResult
from te_ccl.units import UnitError, format_bandwidth, format_size, format_time, parse_size

__all__ = ["simulate_cmd", "sim_summary", "sim_tables"]


@click.command("simulate")
@click.argument("topology")
@click.argument("schedule", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--size", "-s", metavar="SIZE",
              help="Buffer size for an MSCCL XML input (nccl-tests' size, e.g. 1GB).")
@click.option("--timeline", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Draw a per-link Gantt chart to FILE (.png, .svg or .pdf).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def simulate_cmd(topology: str, schedule: Path, size: str | None, timeline: Path | None,
                 as_json: bool) -> None:
    """Replay SCHEDULE (teccl JSON or MSCCL XML) on TOPOLOGY with link contention."""
    from te_ccl.spec.topology import load_topology

    topo = load_topology(topology)
    if _is_json(schedule):
        info, sim = _simulate_json(topo, _json_text(schedule), str(schedule), size)
    else:
        info, sim = _simulate_xml(topo, schedule, str(schedule), size)
    if timeline is not None:
        from te_ccl.simulate.timeline import draw_timeline

        draw_timeline(sim, timeline, title=f"{info['collective']} on {topo.name}")
        info["timeline"] = str(timeline)
    if as_json:
        emit_json(info)
    else:
        for table in sim_tables(info, sim):
            err_console.print(table)


def _is_json(path: Path) -> bool:
    """A teccl schedule (JSON object) rather than MSCCL XML, judged from the first bytes
    (anything else, binary or UTF-16 included, goes to the XML reader, which says why)."""
    try:
        with open(path, "rb") as f:
            return f.read(4096).lstrip().startswith(b"{")
    except OSError as e:
        raise SpecError(f"cannot read the file ({e.strerror})", file=str(path)) from None


def _json_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"not UTF-8 text (byte {e.start})", file=str(path)) from None


def _simulate_json(topo, text: str, file: str, size: str | None) -> tuple[dict, SimResult]:
    from te_ccl.schedule import Schedule
    from te_ccl.simulate import simulate_schedule

    if size is not None:
        raise SpecError("--size applies to MSCCL XML; a schedule carries its size", key="--size")
    sched = Schedule.from_json(text, topo, file=file)
    sim = simulate_schedule(sched)
    return sim_summary(topo, sched.collective, sim, predicted_s=sched.finish_time_s,
                       backend=sched.info.backend), sim


def _simulate_xml(topo, path: Path, file: str, size: str | None) -> tuple[dict, SimResult]:
    from te_ccl.collective.model import KINDS, Collective, CollectiveKind
    from te_ccl.simulate.msccl import simulate_msccl
    from te_ccl.verify.msccl.reader import read_msccl_lenient

    if size is None:
        raise SpecError("an MSCCL XML input needs --size (the collective's buffer size)",
                        key="--size")
    try:
        nbytes = parse_size(size)
    except UnitError as e:
        raise SpecError(str(e), key="--size") from None
    algo, warnings = read_msccl_lenient(path)
    for warning in warnings:
        err_console.print(f"warning: {warning}", markup=False, highlight=False)
    sim = simulate_msccl(algo, topo, nbytes)
    coll = None  # rooted collectives: the root is not in the file, so no bound
    if algo.coll in KINDS and algo.coll not in ("broadcast", "reduce", "gather", "scatter"):
        coll = Collective(CollectiveKind(algo.coll), nbytes, tuple(range(algo.ngpus)))
    return sim_summary(topo, coll, sim, backend=f"msccl:{algo.name}", size_bytes=nbytes,
                       kind=algo.coll), sim


def sim_summary(topo, collective, sim: SimResult, *, predicted_s: float | None = None,
                backend: str = "", size_bytes: int | None = None,
                kind: str | None = None) -> dict[str, Any]:
    """The ``--json`` object of a simulation (also used by ``teccl baseline``)."""
    from te_ccl.bounds import lower_bound
    from te_ccl.report.metrics import bandwidths

    size = size_bytes if size_bytes is not None else collective.size_bytes
    factor = collective.busbw_factor if collective is not None else 1.0
    algbw, busbw = bandwidths(size, sim.finish_time_s, factor)
    bound = lower_bound(topo, collective).seconds if collective is not None else None
    return {
        "topology": topo.name,
        "collective": kind or collective.kind.value,
        "ngpus": collective.nranks if collective is not None else topo.ngpus,
        "size_bytes": size,
        "backend": backend,
        "finish_time_s": sim.finish_time_s,
        "predicted_s": predicted_s,
        "algbw_GBps": algbw,
        "busbw_GBps": busbw,
        "lower_bound_s": bound,
        "bound_ratio": sim.finish_time_s / bound if bound else None,
        **sim.to_dict(),
    }


def sim_tables(info: dict[str, Any], sim: SimResult, top_links: int = 12) -> list[Table]:
    """Rich tables for people: the summary, per-GPU completion, the busiest links."""
    head = Table(title=f"simulated {info['collective']} on {info['topology']} "
                       f"({format_size(info['size_bytes'])})", show_header=False)
    rows = [("finish time", format_time(info["finish_time_s"])),
            ("algbw / busbw", f"{format_bandwidth((info['algbw_GBps'] or 0) * 1e9)} / "
                              f"{format_bandwidth((info['busbw_GBps'] or 0) * 1e9)}")]
    if info.get("predicted_s") is not None:
        rows.append(("predicted (epochs)", format_time(info["predicted_s"])))
    if info.get("bound_ratio"):
        rows.append(("ratio to bound", f"{info['bound_ratio']:.3f} "
                                       f"(bound {format_time(info['lower_bound_s'])})"))
    for k, v in rows:
        head.add_row(k, v)
    gpus = Table("GPU", "done at", title="per-GPU completion")
    for g, t in sim.gpu_finish_s.items():
        gpus.add_row(g, format_time(t))
    links = Table("link", "chunks", "busy", "utilisation", title=f"busiest links (top {top_links})")
    for u in sorted(sim.links, key=lambda u: -u.busy_s)[:top_links]:
        links.add_row(f"{u.src}→{u.dst}", str(u.transfers), format_time(u.busy_s),
                      f"{u.utilisation:.0%}")
    return [head, gpus, links]
