"""``teccl topo list|show|import|calibrate|edit``: shipped topologies, real machines,
measurements, and a network changed by a failure.

The tables and the written YAML are the command's data, so they go to stdout (or
``-o``); the import's sanity report goes to stderr. ``--json`` prints one JSON
object instead of a table.
"""

from __future__ import annotations

import click
from rich.table import Table

from te_ccl.cli.common import emit_json, out_console, progress_status
from te_ccl.errors import SpecError
from te_ccl.outputs import check_output_file, path_component, write_atomic
from te_ccl.spec.topology import load_topology, shipped_topologies
from te_ccl.topology.metrics import link_groups, summarize
from te_ccl.topology.model import Topology
from te_ccl.units import format_bandwidth, format_time

__all__ = ["topo"]


@click.group()
def topo() -> None:
    """List, show, import (NCCL XML, nvidia-smi, rocm-smi), calibrate or edit topologies."""


def _overview(t: Topology) -> dict:
    return {"name": t.name, "ngpus": t.ngpus, "nswitches": len(t.switches),
            "nlinks": len(t.links), "description": t.description, "source": t.source}


@topo.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def list_command(as_json: bool) -> None:
    """Every shipped topology with its size."""
    rows = [_overview(load_topology(name)) for name in shipped_topologies()]
    if as_json:
        emit_json({"topologies": rows})
        return
    table = Table(title="shipped topologies (teccl topo show NAME)")
    for col in ("name", "GPUs", "switches", "links", "description"):
        table.add_column(col, justify="right" if col in ("GPUs", "switches", "links") else "left")
    for r in rows:
        table.add_row(r["name"], str(r["ngpus"]), str(r["nswitches"]), str(r["nlinks"]),
                      r["description"])
    out_console.print(table)


def _show_data(t: Topology) -> dict:
    with progress_status(f"measuring {t.name} ({t.ngpus} GPUs)…") as progress:
        s = summarize(t, progress=progress)
    switches = [{"name": n.name, "copy": n.can_copy, "reduce": n.can_reduce,
                 "buffer": n.has_buffer, "fred_ports": n.fred_ports, "fred_m": n.fred_m,
                 "nvls": n.nvls}
                for n in t.nodes if not n.is_gpu]
    return {
        "topology": t.name, **{k: v for k, v in _overview(t).items() if k != "name"},
        "gpus": list(t.gpus), "switches": switches,
        "link_groups": [{"kind": kind, "bandwidth_Bps": bw, "latency_s": lat, "count": c}
                        for kind, bw, lat, c in link_groups(t)],
        "diameter_hops": s.diameter_hops, "diameter_latency_s": s.diameter_latency_s,
        "bisection_Bps": s.bisection.bandwidth_Bps, "bisection_exact": s.bisection.exact,
        "diameter_exact": s.diameter_exact, "notes": s.notes(),
        "links": [{"src": k.src, "dst": k.dst, "bandwidth_Bps": k.bandwidth_Bps,
                   "latency_s": k.latency_s} for k in t.links],
    }


def _names(names: list[str], limit: int = 12) -> str:
    if len(names) <= limit:
        return " ".join(names)
    return " ".join(names[: limit // 2]) + f" … ({len(names)} in all) … " + \
        " ".join(names[-2:])


def _print_show(d: dict) -> None:
    console = out_console
    bis = format_bandwidth(d["bisection_Bps"]) + ("" if d["bisection_exact"] else " (approx)")
    low = "" if d["diameter_exact"] else "≥ "
    summary = Table(title=f"{d['topology']}: {d['description']}", show_header=False)
    summary.add_column(style="bold")
    summary.add_column()
    for key, value in (("GPUs", f"{d['ngpus']}: {_names(d['gpus'])}"),
                       ("switches", str(d["nswitches"])), ("directed links", str(d["nlinks"])),
                       ("diameter", f"{low}{d['diameter_hops']} hops, "
                                    f"{low}{format_time(d['diameter_latency_s'])} (alpha)"),
                       ("bisection", bis), ("source", d["source"] or "-")):
        summary.add_row(key, value)
    if d["notes"]:
        summary.caption = "; ".join(d["notes"])
    console.print(summary)
    if d["switches"]:
        sw = Table(title="switches")
        for col in ("name", "copy", "reduce", "buffer", "NVLS", "FRED"):
            sw.add_column(col)
        for s in d["switches"]:
            fred = f"FRED_{s['fred_m']}({s['fred_ports']})" if s["fred_m"] else "-"
            sw.add_row(s["name"], *(("yes" if s[k] else "no")
                                    for k in ("copy", "reduce", "buffer", "nvls")), fred)
        console.print(sw)
    groups = Table(title="directed links by bandwidth")
    for col in ("kind", "bandwidth", "latency", "count"):
        groups.add_column(col, justify="right" if col != "kind" else "left")
    for g in d["link_groups"]:
        groups.add_row(g["kind"], format_bandwidth(g["bandwidth_Bps"]),
                       format_time(g["latency_s"]), str(g["count"]))
    console.print(groups)


@topo.command("show")
@click.argument("topology")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def show_command(topology: str, as_json: bool) -> None:
    """Nodes, links grouped by bandwidth, diameter and bisection bandwidth of TOPOLOGY."""
    data = _show_data(load_topology(topology))
    if as_json:
        emit_json(data)
    else:
        _print_show(data)


_WAFERS = ("fred-a", "fred-b", "fred-c", "fred-d", "wafer-mesh")


@topo.command("gen")
@click.argument("kind", type=click.Choice(_WAFERS))
@click.option("--npus", type=int, default=20, show_default=True,
              help="NPUs on the wafer (FRED: L1 switches of 4, at least two).")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Topology YAML to write; '-' for stdout.")
def gen_command(kind: str, npus: int, output: str) -> None:
    """A FRED wafer (fred-a .. fred-d) or its 2D-mesh baseline of --npus NPUs, as a
    topology YAML whose `generator:` key builds it (with the assumed wire and µSwitch
    latencies); every command that takes a topology accepts the file."""
    from te_ccl.topology import generators as gen

    check_output_file(output, key="--output")
    try:
        topology = gen.wafer_mesh(npus) if kind == "wafer-mesh" else gen.fred(kind, npus)
    except ValueError as e:
        raise SpecError(str(e), key="--npus") from None
    spec = (f"{{kind: wafer_mesh, npus: {npus}}}" if kind == "wafer-mesh" else
            f"{{kind: fred, variant: {kind}, npus: {npus}}}")
    write_atomic(output, f"name: {topology.name}\n"
                         f"source: >-\n  FRED (Rashidi et al., ISCA 2025) wafer at "
                         f"{npus} NPUs, by `teccl topo gen {kind} --npus {npus}`; wire and "
                         f"µSwitch latencies assumed (the paper gives none).\n"
                         f"description: {topology.description}\n"
                         f"generator: {spec}\n")
    click.echo(f"{topology.name}: {topology.ngpus} GPUs, {len(topology.switches)} switches, "
               f"{len(topology.links)} directed links", err=True)


@topo.command("import")
@click.argument("file")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Topology YAML to write; '-' for stdout.")
@click.option("--arch", metavar="GEN", help="GPU generation when the dump does not say (or "
              "says wrongly): an sm number (80, 90) or a gfx target (gfx90a, gfx942).")
@click.option("--nvswitch-links", type=int, metavar="N", help="For XML that lists no NVLinks "
              "(cloud NCCL_TOPO_FILEs): every GPU has N NVLinks to an NVSwitch (needs --arch).")
@click.option("--gpus", type=int, metavar="N", help="For XML that lists no GPUs (cloud "
              "NCCL_TOPO_FILEs): the machine has N GPUs, spread over its CPUs (needs --arch).")
@click.option("--nic-bw", metavar="BW", help="Network rate of every NIC port (e.g. 200Gbps), "
              "for dumps that do not give it.")
@click.option("--nodes", type=int, default=1, show_default=True,
              help="Compose this many copies of the node through their NICs.")
@click.option("--fabric", type=click.Choice(["rail", "fat-tree", "single-switch"]),
              default="rail", show_default=True, help="How --nodes copies are joined.")
@click.option("--spine-bw", metavar="BW", help="Spine bandwidth per leaf or rail (e.g. "
              "400Gbps); fat-tree default: full bisection; rail default: no spine.")
@click.option("--name", metavar="NAME", help="Topology name (default: the file's stem).")
def import_command(file: str, output: str, arch: str | None, nvswitch_links: int | None,
                   gpus: int | None, nic_bw: str | None, nodes: int, fabric: str,
                   spine_bw: str | None, name: str | None) -> None:
    """Turn a topology dump into a topology YAML, with a sanity report on stderr.

    FILE is NCCL/RCCL topology XML (NCCL_TOPO_DUMP_FILE, a cloud NCCL_TOPO_FILE),
    `nvidia-smi topo -m` or `rocm-smi --showtopo` output. Every command that takes a
    topology also accepts such a file directly. Quirks of the dump that are skipped
    rather than refused print one warning line each.
    """
    from dataclasses import replace

    from te_ccl.importers import ImportOptions, import_file
    from te_ccl.importers.yaml_out import topology_yaml
    from te_ccl.spec.topology import topology_from_data
    from te_ccl.spec.yamlio import parse_yaml
    from te_ccl.units import UnitError, parse_bandwidth

    check_output_file(output, key="--output")

    def bandwidth(text: str | None, key: str) -> float | None:
        try:
            return parse_bandwidth(text) if text else None
        except UnitError as e:
            raise SpecError(str(e), key=key) from None

    result = import_file(file, ImportOptions(
        arch=arch, nvswitch_links=nvswitch_links, gpus=gpus,
        nic_Bps=bandwidth(nic_bw, "--nic-bw"),
        nodes=nodes, fabric=fabric, spine_Bps=bandwidth(spine_bw, "--spine-bw")))
    topo = replace(result.topology, name=name) if name else result.topology
    report = result.report.lines()
    text = topology_yaml(topo, [f"Imported by `teccl topo import` from {file} "
                                f"({result.format}).", "Sanity report:"]
                         + result.report.lines(warnings=True))
    topology_from_data(parse_yaml(text, output), output)  # what we write must load back
    write_atomic(output, text)
    for warning in result.report.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"{topo.name}: {topo.ngpus} GPUs, {len(topo.switches)} switches, "
               f"{len(topo.links)} directed links", err=True)
    for line in report:
        click.echo(line, err=True)


@topo.command("calibrate")
@click.argument("topology")
@click.argument("measurements", nargs=-1, required=True)
@click.option("-c", "--collective", metavar="KIND", help="allreduce, allgather, reducescatter, "
              "alltoall or sendrecv, for files whose name or header does not say.")
@click.option("--algorithm", metavar="ALGO", help="NCCL's algorithm: ring (default) or tree "
              "for allreduce; direct for alltoall; p2p for sendrecv.")
@click.option("--ranks", type=int, metavar="N", help="Ranks of the runs, when the output "
              "does not list them (ranks 0..N-1 of TOPOLOGY).")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Calibrated topology YAML; '-' for stdout.")
def calibrate_command(topology: str, measurements: tuple[str, ...], collective: str | None,
                      algorithm: str | None, ranks: int | None, output: str) -> None:
    """Fit alpha and beta of TOPOLOGY's links from nccl-tests MEASUREMENTS.

    Each file is the output of all_reduce_perf, all_gather_perf, reduce_scatter_perf,
    alltoall_perf or sendrecv_perf run on the machine. The written topology carries the
    fitted numbers and, in comments, each fit's residuals.
    """
    from dataclasses import replace

    from te_ccl.importers.yaml_out import topology_yaml
    from te_ccl.topology.calibrate import ALGORITHMS, apply_fit, fit_table
    from te_ccl.topology.nccl_tests import read_nccl_tests
    from te_ccl.units import format_bandwidth, format_time

    check_output_file(output, key="--output")
    topo = load_topology(topology)
    if collective is not None and collective not in ALGORITHMS:
        raise SpecError(f"expected one of {', '.join(ALGORITHMS)}, got {collective!r}",
                        key="--collective")
    notes = [f"Calibrated by `teccl topo calibrate` from {topo.name} and nccl-tests output.",
             "Fits (T = steps*alpha + factor*S/beta, least squares in relative error):"]
    for path in measurements:
        table = read_nccl_tests(path)
        kind = table.collective or collective
        if kind is None:
            raise SpecError("cannot tell which collective ran; expected -c KIND or a file "
                            "name such as all_reduce_perf.txt", file=path)
        algo = algorithm or ALGORITHMS[kind][0]
        n = table.nranks or ranks
        if n is None:
            raise SpecError("the output lists no ranks; expected --ranks N", file=path)
        fit = fit_table(table, kind, algo, n)
        topo, applied = apply_fit(topo, fit, n)
        notes += [f"  - {path}: {kind} ({algo}) on {n} ranks, {fit.samples} samples: alpha "
                  f"{format_time(fit.alpha_s)} per step, beta {format_bandwidth(fit.beta_Bps)}; "
                  f"relative residuals rms {fit.rms_rel:.2%}, max {fit.max_rel:.2%}",
                  f"    set {applied.links} {applied.kind} links to "
                  f"{format_bandwidth(applied.bandwidth_Bps)}, "
                  f"{format_time(applied.latency_s)} each"]
        notes += [f"    skipped {s}" for s in table.skipped]
    topo = replace(topo, source=f"{topo.source} Calibrated from nccl-tests output: "
                                f"{', '.join(measurements)}.".strip())
    text = topology_yaml(topo, notes)
    write_atomic(output, text)
    for line in notes[1:]:
        click.echo(line, err=True)


@topo.command("edit")
@click.argument("topology")
@click.option("--without-link", "without_links", multiple=True, metavar="A:B",
              help="Remove the links between nodes A and B (both directions; A>B: only "
                   "from A to B). Repeatable.")
@click.option("--scale-link", "scale_links", multiple=True, metavar="A:B=FACTOR",
              help="Multiply the bandwidth of the links between A and B (A>B: one "
                   "direction) by FACTOR > 0. Repeatable.")
@click.option("--without-gpu", "without_gpus", multiple=True, metavar="GPU",
              help="Remove a GPU and its links (the ranks after it move down). Repeatable.")
@click.option("-o", "--output", default="-", show_default=True, metavar="OUT",
              help="Topology YAML to write; '-' for stdout.")
@click.option("--name", metavar="NAME", help="Topology name (default: OUT's stem, or "
              "TOPOLOGY's name with -edited).")
def edit_command(topology: str, without_links: tuple[str, ...], scale_links: tuple[str, ...],
                 without_gpus: tuple[str, ...], output: str, name: str | None) -> None:
    """Derive a topology from TOPOLOGY with links removed or slowed and GPUs removed.

    What the network looks like after a failure, for `teccl compile --from`. Every GPU
    left must still reach every other one.
    """
    from pathlib import Path

    from te_ccl.importers.yaml_out import topology_yaml
    from te_ccl.spec.topology import topology_from_data
    from te_ccl.spec.yamlio import parse_yaml
    from te_ccl.topology.edit import TopologyEdit, edit_topology, parse_scale

    check_output_file(output, key="--output")
    base = load_topology(topology)
    if not (without_links or scale_links or without_gpus):
        raise SpecError("nothing to change; expected --without-link, --scale-link or "
                        "--without-gpu")
    if name is not None and path_component(name) != name:  # files teccl writes name it
        raise SpecError(f"expected letters, digits and . _ + - (not starting with . or -), "
                        f"got {name!r}", key="--name")
    if name is not None and len(name) > 128:  # TOPOLOGY-COLLECTIVE-….xml within 255 bytes
        raise SpecError(f"expected at most 128 characters, got {len(name):,}", key="--name")
    name = name or path_component(Path(output).stem if output != "-" else f"{base.name}-edited")
    edit = TopologyEdit(without_links, tuple(parse_scale(s) for s in scale_links),
                        without_gpus, name)
    topo = edit_topology(base, edit)
    changes = ([f"without link {s}" for s in without_links]
               + [f"link {s} at {f}× its bandwidth" for s, f in edit.scale_links]
               + [f"without GPU {g}" for g in without_gpus])
    text = topology_yaml(topo, [f"Derived by `teccl topo edit` from {base.name}: "
                                + "; ".join(changes) + "."])
    topology_from_data(parse_yaml(text, output), output)  # what we write must load back
    write_atomic(output, text)
    click.echo(f"{topo.name}: {topo.ngpus} GPUs, {len(topo.switches)} switches, "
               f"{len(topo.links)} directed links (was {base.ngpus}, {len(base.switches)}, "
               f"{len(base.links)})", err=True)
