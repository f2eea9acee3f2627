"""``teccl fred show | route | phase | collective | check | versus | evaluate``: the FRED
switch, its routing, its tables, the wafer.

Tables are the commands' data and go to stdout; ``--json`` prints one JSON object
instead. Routing conflicts are not errors: they are resolved by more phases and
reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import yaml
from rich.table import Table
from rich.tree import Tree

from te_ccl.cli.common import emit_json, err_console, out_console
from te_ccl.errors import SpecError
from te_ccl.fred import (
    Assumptions,
    Flow,
    FlowInfo,
    FredPhase,
    FredSwitch,
    Mesh,
    PhaseSplit,
    all_strategies,
    build_fred,
    check_strategy,
    compile_phase,
    draw_switch,
    evaluate,
    fabric,
    in_switch_schedule,
    load_workload,
    mean_comparison,
    parse_strategy,
    parse_sweep,
    plot_evaluation,
    route_phases,
    shipped_workloads,
    strategy_means,
    sweep_points,
)
from te_ccl.outputs import check_output_dir, check_output_file
from te_ccl.topology import generators as gen
from te_ccl.units import UnitError, parse_size

__all__ = ["fred"]


@click.group()
def fred() -> None:
    """FRED wafer-scale fabric: switch structure, flow routing, 3D-parallel evaluation."""


def _tree(sw: FredSwitch, node: Tree, depth: int) -> None:
    if sw.base:
        node.add(f"[green]{sw.base.path}[/] RD base")
        return
    extra = " + DEMUX" if sw.demux else ""
    node.add(f"input stage: {sw.r} R µSwitches{extra} ({sw.inputs[0].path} …)")
    for mid in sw.middles:
        label = f"[bold]{mid.path}[/] FRED_{mid.m}({mid.ports}), {mid.element_count} µSwitches"
        child = node.add(label)
        if depth > 1:
            _tree(mid, child, depth - 1)
    node.add(f"output stage: {sw.r} D µSwitches{' + MUX' if sw.mux else ''}")


@fred.command("show")
@click.option("--ports", "-p", type=int, default=8, show_default=True, help="Radix P.")
@click.option("--m", "m", type=int, default=3, show_default=True, help="Middle switches.")
@click.option("--name", default="fred", show_default=True, help="Root of the element paths.")
@click.option("--depth", type=int, default=2, show_default=True, help="Tree levels to print.")
@click.option("--draw", "draw", metavar="FILE", help="Save a drawing (png, svg, pdf).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def show_cmd(ports: int, m: int, name: str, depth: int, draw: str | None, as_json: bool) -> None:
    """The recursive structure of FRED_m(P)."""
    if draw:
        check_output_file(draw, key="--draw")
    sw = build_fred(ports, m, name)
    if draw:
        draw_switch(sw, draw)
    if as_json:
        emit_json({"ports": ports, "m": m, "elements": sw.element_count, "depth": sw.depth,
                   "drawing": draw, "switch": sw.to_dict()})
        return
    root = Tree(f"[bold]{name}[/] FRED_{m}({ports}): {sw.element_count} µSwitches, "
                f"depth {sw.depth}")
    _tree(sw, root, depth)
    out_console.print(root)
    if draw:
        err_console.print(f"drawing written to {draw}")


def _parse_flow(text: str, index: int) -> Flow:
    try:
        ins, outs = text.split(":")
        return Flow(f"f{index}", tuple(int(x) for x in ins.split(",")),
                    tuple(int(x) for x in outs.split(",")))
    except ValueError:
        raise SpecError(f"expected INPUTS:OUTPUTS such as 0,1,2,3:0,1,2,3, got {text!r}",
                        key="--flow") from None


def _load_phase_file(path: str) -> tuple[int | None, int | None, list[Flow]]:
    try:
        d = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise SpecError(f"cannot read ({e.strerror})", file=path) from None
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text; expected a YAML file", file=path) from None
    except yaml.YAMLError as e:
        raise SpecError(f"not YAML ({e})", file=path) from None
    if not isinstance(d, dict) or not isinstance(d.get("flows"), list):
        raise SpecError("expected a mapping with a list of flows", file=path, key="flows")
    flows = []
    for i, f in enumerate(d["flows"]):
        try:
            flows.append(Flow(str(f.get("id", f"f{i}")), tuple(int(x) for x in f["inputs"]),
                              tuple(int(x) for x in f["outputs"])))
        except (AttributeError, KeyError, TypeError, ValueError):
            raise SpecError("expected {id, inputs: [ports], outputs: [ports]}", file=path,
                            key=f"flows[{i}]") from None
    for key in ("ports", "m"):
        if d.get(key) is not None and (type(d[key]) is not int):
            raise SpecError(f"expected an integer, got {d[key]!r}", file=path, key=key)
    return d.get("ports"), d.get("m"), flows


def _split_json(split: PhaseSplit) -> list[dict[str, Any]]:
    return [{"phase": k, "colours": {f: list(c) for f, c in r.colours.items()},
             "elements": [{"element": s.element.path, "kind": s.element.kind.value,
                           "mode": s.mode, "flows": [u.flow for u in s.uses]}
                          for s in r.elements]}
            for k, r in enumerate(split.phases)]


@fred.command("route")
@click.option("--ports", "-p", type=int, help="Radix P (default: the phase file's, else 8).")
@click.option("--m", "m", type=int, help="Middle switches (default: the phase file's, else 3).")
@click.option("--flow", "flows", multiple=True, metavar="IN:OUT",
              help="A flow: input ports, colon, output ports (0,1,2,3:0,1,2,3). Repeatable.")
@click.option("--phase", "phase_file", metavar="FILE", help="YAML: {ports, m, flows: [...]}.")
@click.option("--tables", metavar="DIR", help="Write the switch tables to DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def route_cmd(ports: int | None, m: int | None, flows: tuple[str, ...], phase_file: str | None,
              tables: str | None, as_json: bool) -> None:
    """Route the flows of one phase on FRED_m(P) by conflict-graph colouring."""
    if tables:
        check_output_dir(tables, key="--tables")
    file_ports, file_m, given = _load_phase_file(phase_file) if phase_file else (None, None, [])
    given += [_parse_flow(t, len(given) + i) for i, t in enumerate(flows)]
    if not given:
        raise SpecError("give at least one --flow or a --phase file", key="--flow")
    sw = build_fred(next(p for p in (ports, file_ports, 8) if p is not None),
                    next(k for k in (m, file_m, 3) if k is not None), "switch")
    split = route_phases(sw, given)
    written = _route_tables(sw, split, tables) if tables else None
    if as_json:
        emit_json({"ports": sw.ports, "m": sw.m, "phases": len(split.phases),
                   "conflicts": list(split.conflicts), "routing": _split_json(split),
                   "tables": written})
        return
    for note in split.conflicts:
        err_console.print(f"[yellow]conflict:[/] {note}")
    for k, r in enumerate(split.phases):
        table = Table(title=f"phase {k}: FRED_{sw.m}({sw.ports})")
        for col in ("element", "kind", "mode", "flows", "middle"):
            table.add_column(col)
        for s in sorted(r.elements, key=lambda s: (s.element.level, s.element.path)):
            table.add_row(s.element.path, s.element.kind.value, s.mode,
                          " ".join(u.flow for u in s.uses),
                          " ".join("" if u.colour is None else str(u.colour) for u in s.uses))
        out_console.print(table)
        out_console.print("colours (outer level first): " + "; ".join(
            f"{f}={list(c)}" for f, c in r.colours.items()))
    if written:
        err_console.print(f"tables written to {tables}")


def _route_tables(sw: FredSwitch, split: PhaseSplit, out_dir: str) -> dict[str, Any]:
    from te_ccl.lower.fred import SwitchSet, write_fred_tables

    phases = []
    for k, r in enumerate(split.phases):
        infos = tuple(FlowInfo(sw.path, f, "custom", "MP", 0, 1, 0.0,
                               "sum" if len(f.inputs) > 1 else "none") for f in r.flows)
        phases.append(FredPhase(k, "MP", infos, {sw.path: r}, float(k), float(k + 1)))
    return write_fred_tables(phases, SwitchSet("switch", {sw.path: sw}), out_dir)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except UnitError as e:
        raise SpecError(str(e), key="--size") from None


@fred.command("phase")
@click.option("--fabric", "fabric_name", default="fred-d", show_default=True,
              help="fred-a .. fred-d or wafer-mesh (5x4 for 20 NPUs).")
@click.option("--strategy", "-s", default="MP2-DP5-PP2", show_default=True)
@click.option("--phase", "kind", type=click.Choice(["MP", "PP", "DP"]), default="DP",
              show_default=True)
@click.option("--size", default="1GB", show_default=True, help="Bytes per collective.")
@click.option("--npus", type=int, default=20, show_default=True,
              help="NPUs on the wafer (L1 switches of 4; the mesh most nearly square).")
@click.option("--tables", metavar="DIR", help="Write the FRED switch tables to DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def phase_cmd(fabric_name: str, strategy: str, kind: str, size: str, npus: int,
              tables: str | None, as_json: bool) -> None:
    """Compile one 3D-parallel phase's concurrent collectives on a fabric."""
    from te_ccl.lower.fred import write_fred_tables

    if tables:
        check_output_dir(tables, key="--tables")
    fab, strat = fabric(fabric_name, npus), parse_strategy(strategy, npus)
    result = compile_phase(fab, strat, kind, _size(size))
    if result is None:
        raise SpecError(f"{strat.name} has no {kind} phase", key="--phase")
    if tables and isinstance(fab, Mesh):
        raise SpecError("the mesh has no FRED switches", key="--tables")
    written = write_fred_tables(result.phases, fab, tables) if tables else None
    sram = _sram(result.phases)
    data = {"fabric": fab.name, "strategy": strat.name, "phase": kind,
            "collectives": len(result.ops), "time_s": result.time_s,
            "fixed_s": result.fixed_s, "injected_bytes": result.injected_bytes,
            "effective_GBps": result.effective_Bps / 1e9, "switch_phases": len(result.phases),
            "conflicts": list(result.notes), **sram, "tables": written}
    if as_json:
        emit_json(data)
    else:
        table = Table(title=f"{strat.name} {kind} phase on {fab.name}", show_header=False)
        for key, value in data.items():
            table.add_row(key, str(value))
        out_console.print(table)
    if not sram["sram_fits"]:
        err_console.print(f"warning: {fab.name}: {_sram_text(sram)} for this phase",
                          highlight=False)


def _sram_text(sram: dict[str, Any]) -> str:
    from te_ccl.units import format_size

    return (f"{sram['sram_switch'] or 'no switch'} needs {format_size(sram['sram_bytes_max'])}"
            f" of configuration SRAM (has {format_size(sram['sram_limit_bytes'])})")


def _iteration_sram(ev: Any) -> dict[str, dict[str, Any]]:
    """Per FRED fabric, the configuration SRAM one iteration's phases (MP, PP, DP) need on
    the worst switch: the switches keep every phase's configuration."""
    strategy = parse_strategy(ev.strategy, ev.npus)
    lat = (ev.assumptions.wire_latency_s, ev.assumptions.uswitch_latency_s)
    out = {}
    for r in ev.results:
        fab = fabric(r.fabric, ev.npus, *lat)
        if isinstance(fab, Mesh):
            continue
        phases = [ph for kind in ("MP", "PP", "DP")
                  for ph in getattr(compile_phase(fab, strategy, kind, 1e9), "phases", ())]
        out[r.fabric] = _sram(phases)
    return out


def _sram(phases: Sequence[FredPhase]) -> dict[str, Any]:
    """The configuration SRAM the phases need on their worst switch, against its 1.5 KB
    (:mod:`te_ccl.lower.fred`: phases with equal settings share a slot)."""
    from te_ccl.fred.encoding import SRAM_BYTES
    from te_ccl.lower.fred import config_rows, config_sizes

    sizes = config_sizes(config_rows(phases))
    worst = max(sorted(sizes), key=sizes.__getitem__, default="")
    use = sizes.get(worst, 0)
    worst = worst if use else ""
    return {"sram_bytes_max": use, "sram_limit_bytes": SRAM_BYTES, "sram_switch": worst,
            "sram_fits": use <= SRAM_BYTES}


@fred.command("collective")
@click.argument("topology", default="fred-d")
@click.option("--collective", "-c", "kind", default="allreduce", show_default=True,
              type=click.Choice(["allreduce", "reducescatter", "allgather", "broadcast",
                                 "reduce", "alltoall"]))
@click.option("--size", default="1GB", show_default=True, help="Buffer size with units.")
@click.option("--ranks", default="all", show_default=True, help="all, or 0,1,2,3 / 0-7.")
@click.option("--chunks", type=int, default=1, show_default=True, help="Chunks per rank.")
@click.option("--root", type=int, help="Root rank of broadcast / reduce.")
@click.option("-o", "output", metavar="FILE", help="Write the schedule JSON (- for stdout).")
@click.option("--tables", metavar="DIR", help="Write the FRED switch tables to DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def collective_cmd(topology: str, kind: str, size: str, ranks: str, chunks: int,
                   root: int | None, output: str | None, tables: str | None,
                   as_json: bool) -> None:
    """Schedule a collective with in-switch reduction/multicast on a FRED topology."""
    from te_ccl.collective.model import Collective, CollectiveKind
    from te_ccl.lower.fred import fred_tables_for
    from te_ccl.outputs import write_atomic
    from te_ccl.spec.topology import load_topology

    if output:
        check_output_file(output, key="-o")
    if tables:
        check_output_dir(tables, key="--tables")
    topo = load_topology(topology)
    rank_list = tuple(range(topo.ngpus)) if ranks == "all" else _ranks(ranks)
    if kind in ("broadcast", "reduce") and root is None:
        root = rank_list[0]
    schedule = in_switch_schedule(topo, Collective(CollectiveKind(kind), _size(size), rank_list,
                                                   chunks, root))
    written = fred_tables_for(schedule, topo, tables) if tables else None
    if output:
        write_atomic(output, schedule.to_json())
    fin = schedule.finish_time_s
    data = {"topology": topo.name, "collective": kind, "size_bytes": _size(size),
            "ngpus": len(rank_list), "epochs": schedule.finish_epoch,
            "epoch_s": schedule.epoch_s, "finish_time_s": fin,
            "algbw_GBps": _size(size) / fin / 1e9 if fin else None,
            "transfers": len(schedule.transfers), "output": output,
            "tables": [str(p) for p in written.paths] if written else []}
    fab = written.fabric if written else None
    if as_json:
        emit_json({**data, "fabric": fab})
    elif output != "-":
        table = Table(title=f"in-switch {kind} on {topo.name}", show_header=False)
        for key, value in data.items():
            table.add_row(key, str(value))
        out_console.print(table)
    if fab and fab["warning"]:
        err_console.print(f"warning: {fab['warning']}", highlight=False)


def _ranks(text: str) -> tuple[int, ...]:
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise SpecError(f"expected all, 0,1,2 or 0-7, got {text!r}", key="--ranks") from None
    return tuple(out)


@fred.command("check")
@click.argument("tables", metavar="TABLES_DIR")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.pass_context
def check_cmd(ctx: click.Context, tables: str, as_json: bool) -> None:
    """Replay switch tables (from compile --fred-tables, fred phase/route/collective
    --tables) functionally and in time; exit 1 on any violation."""
    from te_ccl.units import format_size, format_time
    from te_ccl.verify.fred_tables import check_fred_dir

    report = check_fred_dir(tables)
    if as_json:
        emit_json(report.to_dict())
    else:
        for v in report.violations:
            out_console.print(f"{v.rule:10} {v.message}", highlight=False)
        worst = max(report.sram_bytes, key=report.sram_bytes.__getitem__, default=None)
        sram = (f"; SRAM {format_size(report.sram_bytes[worst])} of "
                f"{format_size(report.sram_limit_bytes)} ({worst})" if worst else "")
        verdict = ("clean" if report.clean else
                   f"{sum(report.counts.values())} violation(s) ("
                   + ", ".join(f"{r} {n}" for r, n in sorted(report.counts.items())) + ")")
        out_console.print(f"{tables}: {verdict}: {report.phases} phases, {report.flows} flows, "
                          f"{report.streams} streams, {format_time(report.time_s)}{sram}",
                          highlight=False)
    if not report.clean:
        ctx.exit(1)


@dataclass(frozen=True)
class Versus:
    """One fabric's best schedule for a collective and its bound, and its speedups over the
    mesh: ``speedup`` against the mesh's best schedule, ``speedup_vs_bound`` against the
    mesh's lower bound (no mesh schedule beats it: the speedup over any is at least that)."""

    fabric: str
    backend: str
    time_s: float
    bound_s: float
    speedup: float
    speedup_vs_bound: float


def versus_mesh(kind: str, size_bytes: int, npus: int = 20,
                variants: Sequence[str] = tuple(gen.FRED_VARIANTS), *,
                time_limit_s: float = 20.0) -> list[Versus]:
    """The wafer mesh, then each FRED variant (:mod:`te_ccl.topology.generators`, with
    their assumed latencies): the best schedule ``compile`` finds within the time limit,
    timed as compile times it (the MSCCL XML's replay, or the schedule's where switches
    reduce), and its lower bound (:func:`te_ccl.bounds.lower_bound`)."""
    from te_ccl.api import compile

    try:
        topologies = [gen.wafer_mesh(npus)] + [gen.fred(v, npus) for v in variants]
    except ValueError as e:
        raise SpecError(str(e), key="--npus") from None
    runs = []
    for topo in topologies:
        result = compile(topo, kind, size=size_bytes, time_limit_s=time_limit_s,
                         fmt="json" if topo.reducing_switches else "xml")
        runs.append((topo.name, result.schedule.info.backend, result.finish_time_s,
                     result.lower_bound_s))
    _, _, mesh_s, mesh_bound_s = runs[0]
    return [Versus(name, backend, t, bound, mesh_s / t, mesh_bound_s / t)
            for name, backend, t, bound in runs]


@fred.command("versus")
@click.option("--collective", "-c", "kind", default="allreduce", show_default=True,
              type=click.Choice(["allreduce", "reducescatter", "allgather", "broadcast",
                                 "reduce", "alltoall"]))
@click.option("--size", "-s", default="1GB", show_default=True, help="Buffer size with units.")
@click.option("--npus", type=int, default=20, show_default=True,
              help="NPUs on the wafer (L1 switches of 4; the mesh most nearly square).")
@click.option("--time-limit", type=float, default=20.0, show_default=True,
              help="Seconds for each fabric's compile.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def versus_cmd(kind: str, size: str, npus: int, time_limit: float, as_json: bool) -> None:
    """One collective compiled on the wafer mesh and on FRED-A..D (teccl topo gen): each
    FRED speedup against the mesh's best schedule and against the mesh's lower bound."""
    from te_ccl.units import format_time

    rows = versus_mesh(kind, _size(size), npus, time_limit_s=time_limit)
    if as_json:
        emit_json({"collective": kind, "size_bytes": _size(size), "npus": npus,
                   "fabrics": [asdict(r) for r in rows]})
        return
    table = Table(title=f"{kind} {size} on {npus} NPUs: best schedule teccl finds "
                        f"({time_limit:g} s each) and lower bound",
                  caption="speedup: the mesh's schedule ÷ this one; vs bound: the mesh's "
                          "bound ÷ this one (FRED's speedup over any mesh schedule is at least "
                          "that)")
    for col in ("fabric", "kept", "time", "bound", "speedup", "vs bound"):
        table.add_column(col, justify="left" if col in ("fabric", "kept") else "right")
    for r in rows:
        table.add_row(r.fabric, r.backend, format_time(r.time_s), format_time(r.bound_s),
                      f"{r.speedup:.2f}x", f"{r.speedup_vs_bound:.2f}x")
    out_console.print(table)


@fred.command("evaluate")
@click.option("--workload", "-w", required=True, help="resnet152, transformer17b, gpt3, "
              "transformer1t, all, or a YAML file.")
@click.option("--strategy", "-s", help="MPa-DPb-PPc, or all (every one the workload "
              "admits); default: the workload's.")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=v1,v2",
              help="Evaluate at each value of an assumption (efficiency, peak_flops, "
              "global_batch, microbatches, dp_overlap, backward, precision_bytes). Repeatable.")
@click.option("--npus", type=int, default=20, show_default=True,
              help="NPUs on the wafer (L1 switches of 4; the mesh most nearly square).")
@click.option("--plot", metavar="FILE", help="Save a stacked-bar plot of the breakdown "
              "(one workload, strategy and assumption set).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def evaluate_cmd(workload: str, strategy: str | None, sweeps: tuple[str, ...], npus: int,
                 plot: str | None, as_json: bool) -> None:
    """Iteration time, exposed communication and speedup of workloads: FRED variants vs the
    mesh, with every assumption printed and the paper's figures alongside."""
    if plot:
        check_output_file(plot, key="--plot")
    names = shipped_workloads() if workload == "all" else [workload]
    points = sweep_points(Assumptions(), [parse_sweep(x) for x in sweeps])
    runs = []
    for name in names:
        w = load_workload(name)
        strategies = ([x.name for x in _admitted(w, all_strategies(npus))]
                      if strategy == "all" else [strategy])
        runs += [(label, evaluate(w, st, assumptions=a, npus=npus)) for st in strategies
                 for label, a in points]
    single_means = (_single_means(w, runs[0][1])
                    if len(runs) == 1 and strategy != "all" else [])
    if plot:
        if len(runs) != 1:
            raise SpecError("--plot draws one evaluation: give one workload and strategy "
                            "and no --sweep", key="--plot")
        plot_evaluation(runs[0][1], plot)
    means = _means(runs) if strategy == "all" else []
    if as_json:
        if len(runs) == 1:
            emit_json({**runs[0][1].to_dict(), "paper_strategy_mean": single_means,
                       "sram": _iteration_sram(runs[0][1]), "plot": plot})
        else:
            emit_json({"evaluations": [{"sweep": label, **ev.to_dict()} for label, ev in runs],
                       "strategy_means": means})
        return
    if len(runs) == 1:
        _breakdown_table(runs[0][1])
        for line in _mean_lines(single_means):
            out_console.print(line, highlight=False)
    else:
        _summary_table(runs, Assumptions())
    for m in means:
        cuts = ", ".join(f"{f} {v['exposed_comm_reduction']:.2f}x (÷ its bound "
                         f"{v['exposed_comm_reduction_vs_mesh_bound']:.2f}x)"
                         for f, v in m["fabrics"].items() if not f.startswith("wafer-mesh"))
        where = " ".join(x for x in (m["workload"], m["sweep"]) if x)
        out_console.print(f"{where}: mean over {m['strategies']} strategies, exposed "
                          f"communication ÷ the mesh's: {cuts}", highlight=False)
        for line in _mean_lines(m["comparison"]):
            out_console.print(f"{where}: {line}", highlight=False)
    if plot:
        err_console.print(f"plot written to {plot}")


def _means(runs: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """:func:`strategy_means` per workload and sweep point."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for label, ev in runs:
        groups.setdefault((ev.workload, label), []).append(ev)
    return [{"workload": w, "sweep": label, "strategies": len(evs), "paper": evs[0].paper,
             "fabrics": strategy_means(evs), "comparison": mean_comparison(evs)}
            for (w, label), evs in groups.items()]


def _single_means(w: Any, ev: Any) -> list[dict[str, Any]]:
    """:func:`mean_comparison` over every strategy workload ``w`` admits, under ``ev``'s
    assumptions: what the paper's strategy-averaged figures compare with (none when it
    publishes none, as off the paper's wafer size)."""
    if all(c["comparable"] for c in ev.comparison()):
        return []
    return mean_comparison([evaluate(w, s.name, assumptions=ev.assumptions, npus=ev.npus)
                            for s in _admitted(w, all_strategies(ev.npus))])


def _admitted(w: Any, strategies: list[Any]) -> list[Any]:
    out = []
    for s in strategies:
        try:
            check_strategy(w, s.mp, s.pp)
        except SpecError:
            continue
        out.append(s)
    return out


_SHORT = {"speedup": "", "exposed_comm_reduction": "exp÷"}


def _footer(assumptions: Any) -> str:
    return "assumptions: " + "; ".join(assumptions.lines())


def _paper_lines(ev: Any) -> list[str]:
    return [f"{c['fabric']} {c['metric']}: predicted {c['predicted']:.2f}, paper "
            f"{c['paper']:.2f} ({c['ratio']:.2f}x the paper)" if c["comparable"] else
            f"{c['fabric']} {c['metric']}: {c['predicted']:.2f} under {ev.strategy} alone, "
            f"not comparable with the paper's {c['paper']:.2f} (a mean over strategies)"
            for c in ev.comparison()]


def _mean_lines(comparison: list[dict[str, Any]]) -> list[str]:
    return [f"{c['fabric']} {c['metric']}: mean over {len(c['strategies'])} strategies "
            f"({', '.join(c['strategies'])}) {c['predicted']:.2f}, paper {c['paper']:.2f} "
            f"({c['ratio']:.2f}x the paper)" for c in comparison]


def _breakdown_table(ev: Any) -> None:
    from te_ccl.fred.encoding import SRAM_BYTES
    from te_ccl.units import format_size

    table = Table(title=f"{ev.workload}, {ev.strategy} on {ev.npus} NPUs, global batch "
                        f"{ev.global_batch:g}: iteration time (ms)",
                  caption=_footer(ev.assumptions))
    cols = ("fabric", "compute", "MP", "PP", "DP", "I/O", "iteration", "exposed",
            "speedup", "exp÷", "MP GB/s", "PP GB/s", "DP GB/s")
    for col in cols:
        table.add_column(col, justify="left" if col == "fabric" else "right")
    for r in ev.results:
        ms = [f"{1e3 * x:.3f}" for x in (r.compute_s, r.mp_s, r.pp_s, r.dp_s, r.io_s,
                                        r.iteration_s, r.exposed_comm_s)]
        bw = [f"{r.phase_GBps[k]:.0f}" if r.phase_GBps[k] else "-" for k in ("MP", "PP", "DP")]
        table.add_row(r.fabric, *ms, f"{r.speedup:.2f}x", f"{r.exposed_comm_reduction:.2f}x",
                      *bw)
    out_console.print(table)
    out_console.print("against the mesh at its phases' lower bounds, speedup (exposed "
                      "communication ÷): " + ", ".join(
                          f"{r.fabric} {r.speedup_vs_mesh_bound:.2f}x "
                          f"({r.exposed_comm_reduction_vs_mesh_bound:.2f}x)"
                          for r in ev.results), highlight=False)
    sram = _iteration_sram(ev)
    out_console.print("configuration SRAM of an iteration's phases, worst switch: " + ", ".join(
        f"{name} {format_size(x['sram_bytes_max'])} ({x['sram_switch'] or '-'})"
        for name, x in sram.items()) + f" of {format_size(SRAM_BYTES)}", highlight=False)
    for name, x in sram.items():
        if not x["sram_fits"]:
            err_console.print(f"warning: {name}: {_sram_text(x)} for {ev.strategy}",
                              highlight=False)
    for line in _paper_lines(ev):
        out_console.print(line)


def _summary_table(runs: list[tuple[str, Any]], defaults: Any) -> None:
    """One row per run; the footer gives the default assumptions, which the sweep column
    overrides."""
    fabrics = [r.fabric for r in runs[0][1].results]  # the mesh first: 1x, and its bound
    table = Table(title="speedup over the mesh (exposed communication ÷ the mesh's); after "
                        "≥, the same against the mesh's lower bound",
                  caption=_footer(defaults)
                  + " (the sweep column overrides)")
    for col in ("workload", "strategy", "sweep", *fabrics, "paper"):
        table.add_column(col, justify="left" if col in ("workload", "strategy", "sweep",
                                                        "paper") else "right")
    for label, ev in runs:
        cells = [f"{r.speedup:.2f}x ({r.exposed_comm_reduction:.2f}x) ≥ "
                 f"{r.speedup_vs_mesh_bound:.2f}x ({r.exposed_comm_reduction_vs_mesh_bound:.2f}x)"
                 for r in map(ev.result, fabrics)]
        table.add_row(ev.workload, ev.strategy, label or "-", *cells,
                      " ".join(f"{_SHORT[c['metric']]}{c['fabric'][-1].upper()} {c['paper']:g}"
                               + ("" if c["comparable"] else " (strategy mean)")
                               for c in ev.comparison()))
    out_console.print(table)
