"""``teccl baseline KIND TOPOLOGY``: a baseline algorithm as MSCCL XML (or JSON), simulated.

KIND is ``ring``, ``ring-bidir``, ``tree``, ``direct`` or ``hierarchical``. The baseline is
built in the Schedule IR, checked by the independent schedule checker, lowered by the
same MSCCL lowering as teccl's own schedules and replayed by the simulator.
"""

from __future__ import annotations

import click

from te_ccl.cli.common import collective_flags, collective_options, emit_json, err_console

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
    """Build baseline KIND (ring, ring-bidir, tree, direct, hierarchical) on TOPOLOGY."""
    from te_ccl.baselines import build_baseline
    from te_ccl.cli.simulate import sim_summary, sim_tables
    from te_ccl.errors import SpecError, VerificationError
    from te_ccl.outputs import write_atomic
    from te_ccl.simulate import simulate_schedule
    from te_ccl.spec.collective import load_collective
    from te_ccl.spec.topology import load_topology
    from te_ccl.verify.schedule_check import check_schedule

    flags = collective_flags(kw)
    topo = load_topology(topology)
    coll = load_collective(topo, spec, **flags)
    fmt = kw["fmt"] or ("json" if (kw["output"] or "").endswith(".json") else "xml")
    output = kw["output"] or f"{topo.name}-{coll.kind.value}-{kind}.{fmt}"
    if output == "-" and kw["as_json"]:
        raise SpecError("-o - and --json both want stdout; pick one", key="--output")
    sched = build_baseline(kind, topo, coll)
    bad = check_schedule(sched)
    if bad:
        raise VerificationError(f"baseline {kind} failed the schedule check: {bad[0].message}")
    sim = simulate_schedule(sched)
    if fmt == "json":
        data = sched.to_json().encode()
    else:
        from te_ccl.lower.msccl import lower_to_msccl

        data = lower_to_msccl(sched, name=f"{kind}-{coll.kind.value}-{topo.name}")
    write_atomic(output, data)
    info = sim_summary(topo, coll, sim, predicted_s=sched.finish_time_s,
                       backend=sched.info.backend)
    info["output"] = output
    if kw["timeline"]:
        from te_ccl.simulate.timeline import draw_timeline

        draw_timeline(sim, kw["timeline"], title=f"{kind} {coll.kind.value} on {topo.name}")
        info["timeline"] = kw["timeline"]
    if kw["as_json"]:
        emit_json(info)
    elif output != "-":
        for table in sim_tables(info, sim):
            err_console.print(table)
        err_console.print(f"wrote {output}")
