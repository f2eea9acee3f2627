"""``teccl topo list`` and ``teccl topo show``: the shipped topologies and what a topology is.

The tables are the command's data, so they go to stdout; ``--json`` prints one JSON
object instead.
"""

from __future__ import annotations

import click
from rich.table import Table

from te_ccl.cli.common import emit_json, out_console, progress_status
from te_ccl.spec.topology import load_topology, shipped_topologies
from te_ccl.topology.metrics import link_groups, summarize
from te_ccl.topology.model import Topology
from te_ccl.units import format_bandwidth, format_time

__all__ = ["topo"]


@click.group()
def topo() -> None:
    """List the shipped topologies or show one (name or YAML file)."""


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
                 "buffer": n.has_buffer, "fred_ports": n.fred_ports, "fred_m": n.fred_m}
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
        for col in ("name", "copy", "reduce", "buffer", "FRED"):
            sw.add_column(col)
        for s in d["switches"]:
            fred = f"FRED_{s['fred_m']}({s['fred_ports']})" if s["fred_m"] else "-"
            sw.add_row(s["name"], *(("yes" if s[k] else "no") for k in ("copy", "reduce", "buffer")),
                       fred)
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
