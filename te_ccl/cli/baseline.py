"""``teccl baseline KIND TOPOLOGY``: a baseline algorithm as MSCCL XML (or JSON), simulated.

KIND is a name of :data:`te_ccl.baselines.BASELINES` (``--help`` lists them). The baseline is
built in the Schedule IR, checked by the independent schedule checker, lowered by the
same MSCCL lowering as teccl's own schedules and replayed by the simulator.
"""

from __future__ import annotations

from dataclasses import replace
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
@click.option("--timeline", metavar="FILE", help="Draw the simulated per-link Gantt chart.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary on stdout.")
def baseline_cmd(kind: str, topology: str, spec: str | None, **kw) -> None:
    """Build baseline KIND (ring, ring-bidir, tree, direct, hierarchical, packed,
    packed-fine, pipeline, pipeline-fine, pipeline-boxes, pipeline-units, pipeline-torus,
    switch-trees, far-first) on TOPOLOGY."""
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
    sched, sim = (_fastest_chunking if auto else _built)(kind, topo, coll)
    if fmt == "json":
        data = sched.to_json().encode()
    else:
        from te_ccl.lower.msccl import lower_to_msccl

        data = lower_to_msccl(sched, name=f"{kind}-{coll.kind.value}-{topo.name}")
    write_atomic(output, data)
    info = sim_summary(topo, sched.collective, sim, predicted_s=sched.finish_time_s,
                       backend=sched.info.backend)
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
    for note in sched.info.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    if output != "-":
        err_console.print(f"wrote {output}", markup=False, highlight=False)


def _built(kind: str, topo: Topology, coll: Collective) -> tuple[Schedule, SimResult]:
    """Baseline ``kind`` for ``coll``, checked by the schedule checker, and its replay."""
    from te_ccl.baselines import build_baseline
    from te_ccl.errors import VerificationError
    from te_ccl.simulate import simulate_schedule
    from te_ccl.verify.schedule_check import check_schedule

    sched = build_baseline(kind, topo, coll)
    bad = check_schedule(sched)
    if bad:
        raise VerificationError(f"baseline {kind} failed the schedule check: {bad[0].message}")
    return sched, simulate_schedule(sched)


def _fastest_chunking(kind: str, topo: Topology, coll: Collective
                      ) -> tuple[Schedule, SimResult]:
    """``--chunks auto``: the baseline at each chunking of
    :func:`te_ccl.compiler.chunking.chunk_candidates`, the earliest simulated finish kept (ties:
    fewer chunks), with a note of what was tried."""
    from te_ccl.compiler import chunk_candidates

    best, tried = None, []
    for k in chunk_candidates(topo, coll):
        sched, sim = _built(kind, topo, replace(coll, chunks_per_rank=k))
        tried.append(f"{k}: {sim.finish_time_s:.4g} s")
        if best is None or sim.finish_time_s < best[1].finish_time_s * (1 - 1e-9):
            best = (sched, sim)
    sched, sim = best
    note = (f"chunks auto: picked {sched.collective.chunks_per_rank} per rank by simulated "
            f"time (tried {'; '.join(tried)})")
    return sched.with_info(notes=sched.info.notes + (note,)), sim
