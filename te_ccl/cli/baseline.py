"""``teccl baseline KIND TOPOLOGY``: a baseline algorithm as MSCCL XML (or JSON), simulated.

KIND is a name of :data:`te_ccl.baselines.BASELINES` (``--help`` lists them). The baseline is
built in the Schedule IR, checked by the independent schedule checker, lowered by the
same MSCCL lowering as teccl's own schedules, accepted by the XML verifier and timed, as a
compile is, by the replay of the file written: its XML as the runtime runs it (the
schedule's own replay misjudges what the lowering does), or for ``--format json`` the
Schedule IR's replay.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import click

from te_ccl.cli.common import (
    collective_flags,
    collective_options,
    emit_json,
    err_console,
    table_console,
)

if TYPE_CHECKING:
    from te_ccl.collective.model import Collective
    from te_ccl.schedule import Schedule
    from te_ccl.simulate.result import SimResult
    from te_ccl.topology.model import Topology

__all__ = ["baseline_cmd"]


@click.command("baseline")
@click.argument("kind", metavar="KIND")
@click.argument("topology")
@click.argument("spec", required=False, type=click.Path(dir_okay=False))
@collective_options
@click.option("-o", "--output", metavar="OUT",
              help="Output file; '-' for stdout (default TOPOLOGY-COLLECTIVE-KIND.xml).")
@click.option("--format", "fmt", type=click.Choice(["xml", "json"]), default=None,
              help="Output format (default from the file suffix, else xml).")
@click.option("--timeline", metavar="FILE",
              help="Draw the per-link Gantt chart of the replay reported.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary on stdout.")
def baseline_cmd(kind: str, topology: str, spec: str | None, **kw) -> None:
    """Build baseline KIND (ring, ring-bidir, tree, direct, hierarchical, comb-allreduce,
    packed, packed-fine, pipeline, pipeline-fine, pipeline-boxes, pipeline-hubs,
    pipeline-units, pipeline-torus, switch-trees, far-first) on TOPOLOGY.

    The time reported is the written file's replay: its MSCCL XML as the runtime runs it
    (once the XML verifier accepts it), or with --format json the schedule's."""
    from te_ccl.cli.simulate import sim_summary, sim_tables
    from te_ccl.errors import SpecError
    from te_ccl.model.footprint import check_times
    from te_ccl.outputs import check_output_file, path_component, write_atomic
    from te_ccl.spec.collective import load_collective
    from te_ccl.spec.topology import load_topology

    flags, auto = collective_flags(kw)
    topo = load_topology(topology)
    coll = load_collective(topo, spec, **flags)
    check_times(topo, coll)
    fmt = kw["fmt"] or ("json" if (kw["output"] or "").endswith(".json") else "xml")
    output = kw["output"] or path_component(f"{topo.name}-{coll.kind.value}-{kind}.{fmt}")
    if output == "-" and kw["as_json"]:
        raise SpecError("-o - and --json both want stdout; pick one", key="--output")
    check_output_file(output, key="--output")
    if kw["timeline"]:
        check_output_file(kw["timeline"], key="--timeline")
    name = f"{kind}-{coll.kind.value}-{topo.name}"
    file = _fastest_chunking(kind, topo, coll, fmt, name) if auto else \
        _written(_built(kind, topo, coll), fmt, name)
    sched, sim = file.schedule, file.sim
    write_atomic(output, file.data)
    info = sim_summary(topo, sched.collective, sim, predicted_s=sched.finish_time_s,
                       backend=sched.info.backend)
    info["measured_by"] = file.measured_by
    info["schedule_replay_s"] = file.schedule_s
    info["chunks_per_rank"] = sched.collective.chunks_per_rank
    info["notes"] = list(sched.info.notes)
    info["output"] = output
    if kw["timeline"]:
        from te_ccl.simulate.timeline import draw_timeline

        draw_timeline(sim, kw["timeline"], title=f"{kind} {coll.kind.value} on {topo.name}")
        info["timeline"] = kw["timeline"]
    if kw["as_json"]:
        emit_json(info)
        return
    console = table_console(output)
    for table in sim_tables(info, sim):
        console.print(table)
    console.print(f"timed by the {file.measured_by}; the schedule's own replay: "
                  f"{file.schedule_s:.4g} s", markup=False, highlight=False)
    for note in sched.info.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    if output != "-":
        err_console.print(f"wrote {output}", markup=False, highlight=False)


@dataclass(frozen=True)
class _File:
    """A baseline's file: its schedule, the bytes written, their replay (``sim``) and the
    schedule's own replay (``schedule_s``; the same for the Schedule IR's JSON)."""

    schedule: Schedule
    data: bytes
    sim: SimResult
    schedule_s: float
    measured_by: str


def _built(kind: str, topo: Topology, coll: Collective) -> Schedule:
    """Baseline ``kind`` for ``coll``, checked by the schedule checker."""
    from te_ccl.baselines import build_baseline
    from te_ccl.errors import VerificationError
    from te_ccl.verify.schedule_check import check_schedule

    sched = build_baseline(kind, topo, coll)
    bad = check_schedule(sched)
    if bad:
        raise VerificationError(f"baseline {kind} failed the schedule check: {bad[0].message}")
    return sched


def _written(sched: Schedule, fmt: str, name: str) -> _File:
    """``sched`` as the file of ``fmt`` and the replay of that file: the Schedule IR's
    JSON replays as the schedule; the MSCCL XML, lowered as a compile lowers its
    schedule (:func:`te_ccl.compiler.lower_file`: within the runtime's limits, steps
    carrying several chunks where one a chunk does not fit), once the verifier accepts it
    (:class:`VerificationError` if not, as a compile's), is replayed as the verifier read
    it, as the compile's judge replays it (:func:`te_ccl.compiler.xml_replay`), keeping
    the whole replay for the tables and the timeline."""
    from te_ccl.simulate import simulate_schedule

    schedule_sim = simulate_schedule(sched)
    if fmt == "json":
        return _File(sched, sched.to_json().encode(), schedule_sim,
                     schedule_sim.finish_time_s, "schedule replay")
    from te_ccl.compiler import CompileOptions, lower_file, verified_algo
    from te_ccl.simulate.msccl import simulate_msccl

    data = lower_file(sched, CompileOptions(name=name))
    c = sched.collective
    sim = simulate_msccl(verified_algo(sched, data), sched.topology, c.size_bytes, ranks=c.ranks)
    return _File(sched, data, sim, schedule_sim.finish_time_s, "xml replay")


def _fastest_chunking(kind: str, topo: Topology, coll: Collective, fmt: str,
                      name: str) -> _File:
    """``--chunks auto``: the baseline at each chunking of
    :func:`te_ccl.compiler.chunking.chunk_candidates`, each written (:func:`_written`), the
    earliest replay of its file kept (ties: fewer chunks), with a note of what was tried.
    A chunking whose XML the verifier refuses is passed over; if all are, the first
    refusal stands."""
    from te_ccl.compiler import chunk_candidates
    from te_ccl.errors import VerificationError

    best: _File | None = None
    tried: list[str] = []
    refusal: VerificationError | None = None
    for k in chunk_candidates(topo, coll):
        sched = _built(kind, topo, replace(coll, chunks_per_rank=k))
        try:
            file = _written(sched, fmt, name)
        except VerificationError as e:
            refusal = refusal or e
            tried.append(f"{k}: refused by the verifier")
            continue
        tried.append(f"{k}: {file.sim.finish_time_s:.4g} s")
        if best is None or file.sim.finish_time_s < best.sim.finish_time_s * (1 - 1e-9):
            best = file
    if best is None:
        raise refusal
    sched = best.schedule
    note = (f"chunks auto: picked {sched.collective.chunks_per_rank} per rank by the "
            f"{best.measured_by} of each file (tried {'; '.join(tried)})")
    sched = sched.with_info(notes=sched.info.notes + (note,))
    return replace(best, schedule=sched,
                   data=sched.to_json().encode() if fmt == "json" else best.data)
