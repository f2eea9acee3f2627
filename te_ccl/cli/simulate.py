"""``teccl simulate [TOPOLOGY] SCHEDULE``: replay a schedule (JSON), an MSCCL++ execution
plan (JSON with ``gpus``) or MSCCL XML with α-β costs.

The replay shares no arithmetic with the solver (``te_ccl.simulate``). It reports the
finish time, algbw/busbw, the ratio to the lower bound, per-GPU completion and per-link
busy time; ``--timeline FILE.png|svg`` draws a per-link Gantt chart.

An MSCCL XML file is first checked by the verifier: a file it finds wrong or deadlocked
is refused (exit 1, its first error), since the time of a file that cannot run means
nothing. A file teccl wrote names its topology and compiled size (a comment after the
``<algo>`` line), so ``teccl simulate FILE.xml`` needs neither; arguments override them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from te_ccl.cli.common import emit_json, err_console, out_console
from te_ccl.errors import SpecError, VerificationError
from te_ccl.outputs import check_input_file
from te_ccl.simulate.result import SimResult
from te_ccl.units import UnitError, format_bandwidth, format_size, format_time, parse_size

__all__ = ["simulate_cmd", "sim_summary", "sim_tables"]



@click.command("simulate")
@click.argument("first", metavar="[TOPOLOGY]")
@click.argument("second", metavar="SCHEDULE", required=False)
@click.option("--size", "-s", metavar="SIZE",
              help="Buffer size for an MSCCL XML input (nccl-tests' size, e.g. 1GB; default: "
                   "the size a teccl file was compiled for).")
@click.option("--timeline", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Draw a per-link Gantt chart to FILE (.png, .svg or .pdf).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--jobs", metavar="FILE", help="Replay every job of FILE at once on TOPOLOGY's "
              "shared links: SCHEDULE is then the directory of the jobs' NAME.xml files.")
@click.option("--objective", type=click.Choice(["max", "weighted"]), default="weighted",
              show_default=True, help="With --jobs: the makespan or the weighted sum of "
              "the jobs' finish times.")
def simulate_cmd(first: str, second: str | None, size: str | None, timeline: Path | None,
                 as_json: bool, jobs: str | None, objective: str) -> None:
    """Replay SCHEDULE (teccl JSON or MSCCL XML) on TOPOLOGY with link contention.

    TOPOLOGY may be left out for an XML file teccl wrote (it names its topology)."""
    if jobs is not None:
        _simulate_jobs(first, second, jobs, objective, as_json, size or timeline)
        return
    if timeline is not None:
        from te_ccl.outputs import check_output_file

        check_output_file(timeline, key="--timeline")
    topology, schedule = (first, Path(second)) if second is not None else (None, Path(first))
    check_input_file(schedule)
    try:
        with open(schedule, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise SpecError(f"cannot read the file ({e.strerror or e})", file=str(schedule)) from None
    if head.lstrip().startswith(b"{"):  # a teccl schedule; anything else goes to the XML
        topo, info, sim = _simulate_json(topology, schedule, size)  # reader, which says why
    else:
        topo, info, sim = _simulate_xml(topology, schedule, size, timeline is not None)
    if timeline is not None:
        from te_ccl.simulate.timeline import draw_timeline

        draw_timeline(sim, timeline, title=f"{info['collective']} on {topo.name}")
        info["timeline"] = str(timeline)
    if as_json:
        emit_json(info)
    else:
        for table in sim_tables(info, sim):
            out_console.print(table)


def _simulate_jobs(topology: str, directory: str | None, jobs_file: str, objective: str,
                   as_json: bool, other: object) -> None:
    """``--jobs``: the jobs' files replayed together and alone (:mod:`te_ccl.jobs`)."""
    from te_ccl.jobs import load_jobs
    from te_ccl.jobs.files import simulate_jobs
    from te_ccl.jobs.summary import jobs_table
    from te_ccl.spec.topology import load_topology

    if other:
        raise SpecError("the jobs file gives each job's size; --size and --timeline do not "
                        "go with it", key="--jobs")
    info = simulate_jobs(load_jobs(load_topology(topology), jobs_file), directory, objective)
    if as_json:
        emit_json(info)
    else:
        out_console.print(jobs_table(info))


def _simulate_json(topology: str | None, path: Path, size: str | None):
    from te_ccl.schedule import Schedule
    from te_ccl.simulate import simulate_schedule
    from te_ccl.spec.topology import load_topology

    file = str(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or "not UTF-8 text"
        raise SpecError(f"cannot read the file ({why})", file=file) from None
    if '"gpus"' in text and '"schema"' not in text:
        return _simulate_plan(topology, file, text, size)
    if size is not None:
        raise SpecError("--size applies to MSCCL XML; a schedule carries its size", key="--size")
    if topology is None:
        raise SpecError("a JSON schedule needs its TOPOLOGY: teccl simulate TOPOLOGY FILE",
                        file=file)
    topo = load_topology(topology)
    sched = Schedule.from_json(text, topo, file=file)
    try:
        sim = simulate_schedule(sched)
    except VerificationError as e:  # a send the topology cannot carry, or out of order
        raise VerificationError(f"{file}: not simulated on {topo.name}: {e}") from None
    return topo, sim_summary(topo, sched.collective, sim, predicted_s=sched.finish_time_s,
                             backend=sched.info.backend), sim


def _simulate_plan(topology: str | None, file: str, text: str, size: str | None):
    """An MSCCL++ execution plan: checked, then replayed (:mod:`te_ccl.simulate.plan`)."""
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.lower.mscclpp import SUPPORTED
    from te_ccl.simulate.plan import simulate_plan
    from te_ccl.spec.topology import load_topology
    from te_ccl.verify.mscclpp import plan_json

    if topology is None or size is None:
        raise SpecError("an MSCCL++ plan names neither its topology nor its size: "
                        "teccl simulate TOPOLOGY FILE --size SIZE", file=file)
    try:
        nbytes = parse_size(size)
    except UnitError as e:
        raise SpecError(str(e), key="--size") from None
    data = plan_json(text, file)
    topo = load_topology(topology)
    try:
        sim = simulate_plan(data, topo, nbytes)
    except VerificationError as e:
        raise VerificationError(f"{file}: {e}") from None
    kind, n = data.get("collective"), len(data.get("gpus", []))
    coll = (Collective(CollectiveKind(kind), nbytes, tuple(range(n)))
            if kind in {k.value for k in SUPPORTED} else None)
    return topo, sim_summary(topo, coll, sim, backend=f"mscclpp:{data.get('name')}",
                             size_bytes=nbytes, kind=kind), sim


def _simulate_xml(topology: str | None, path: Path, size: str | None, intervals: bool):
    from te_ccl.collective.model import KINDS, Collective, CollectiveKind
    from te_ccl.simulate.msccl import read_provenance, simulate_msccl
    from te_ccl.spec.topology import load_topology
    from te_ccl.verify.msccl.reader import LEGACY_RULES
    from te_ccl.verify.msccl.verify import verify_msccl

    file = str(path)
    made = read_provenance(path)
    if size is not None:
        try:
            nbytes = parse_size(size)
        except UnitError as e:
            raise SpecError(str(e), key="--size") from None
    elif made is not None:
        nbytes = made[1]
    else:
        raise SpecError("the file does not name its size (no teccl comment after <algo>): "
                        "pass --size", file=file, key="--size")
    if topology is None and made is None:
        raise SpecError("the file does not name its topology (no teccl comment after "
                        "<algo>): teccl simulate TOPOLOGY FILE", file=file)
    try:
        topo = load_topology(topology if topology is not None else made[0])
    except SpecError as e:
        if topology is not None:
            raise
        raise SpecError(f"compiled for topology {made[0]!r}, which cannot be loaded ({e}): "
                        "pass the topology", file=file) from None
    report = verify_msccl(path)
    errors = [f for f in report.errors if f.rule not in LEGACY_RULES]
    if report.algo is None or errors:
        first = (errors or report.errors)[0]
        count = report.error_count - sum(report.counts.get(rule, 0) for rule in LEGACY_RULES)
        more = f" (and {count - 1:,} more: teccl verify {file})" if count > 1 else ""
        raise VerificationError(f"{file}: not simulated, the verifier rejects it: "
                                f"{first.where()}: {first.rule}: {first.message}{more}")
    if report.errors:
        err_console.print(f"warning: {file}: msccl-tools' older format (no minBytes/maxBytes/"
                          "outofplace): the executor refuses it, simulated anyway; `teccl verify "
                          f"{file} --upgrade -o NEW.xml` writes the executor's format",
                          highlight=False, soft_wrap=True)
    algo = report.algo
    if algo.ngpus != topo.ngpus:
        raise SpecError(f"the algorithm has {algo.ngpus} GPUs but topology {topo.name} has "
                        f"{topo.ngpus}", file=file, key="ngpus")
    sim = simulate_msccl(algo, topo, nbytes, intervals=intervals or None)
    coll = None  # rooted collectives: the root is not in the file, so no bound
    if algo.coll in KINDS and algo.coll not in ("broadcast", "reduce", "gather", "scatter"):
        coll = Collective(CollectiveKind(algo.coll), nbytes, tuple(range(algo.ngpus)))
    return topo, sim_summary(topo, coll, sim, backend=f"msccl:{algo.name}", size_bytes=nbytes,
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
