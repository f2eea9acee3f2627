"""Lower FRED phases to the switch-configuration tables of the FRED paper (CSV and JSON).

Six tables, one CSV each, all of them also in ``tables.json`` with the fabric's
parameters (lane rate, SRAM bytes, reconfiguration time, what each switch can do):

* ``flows``: one row per flow per phase (switch, level, radix, m, phase, priority class,
  collective, operation, step/steps, flow id, input ports, output ports, reduce op,
  bytes, stream). A flow is one stripe: each of its ports carries ``bytes`` in its
  phase; ``stream`` names the chunk stream of a schedule it belongs to
  (:mod:`te_ccl.fred.from_schedule`);
* ``uswitches``: the configuration bits, one row per (µSwitch, flow) of each phase
  (element path, recursion level, stage, kind, input/output selection, mode, middle);
* ``phases``: phase, default-unicast flag (only unicast flows), start/end time (each
  phase starts with the fabric's reconfiguration time), the lower-priority phases it
  pre-empts;
* ``ports``: each switch port's neighbour, the lane of that link it is (ports are lanes,
  :mod:`te_ccl.fred.wafer`) and the lane's rate;
* ``configs``: the configuration each switch selects in each phase, i.e. the header
  index: a slot of its SRAM, shared by the phases with the same settings, or
  ``default`` (only unicast flows: routed online, no SRAM), with its encoded bytes
  (:mod:`te_ccl.fred.encoding`); a switch's SRAM use is the sum over its slots;
* ``streams``: a schedule's chunk streams (chunk, bytes, source and destination NPUs,
  the streams each waits for).

Before a file is written, the text about to be written is replayed by the independent
checker :mod:`te_ccl.verify.fred_tables`; any violation but an SRAM overflow (a
capacity finding, reported in ``fits``) is a bug and raises.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

from te_ccl.deadline import check, checked
from te_ccl.errors import SpecError, VerificationError
from te_ccl.fred.collectives import CommResult, FredPhase
from te_ccl.fred.encoding import SRAM_BYTES, encode
from te_ccl.fred.from_schedule import ChunkStream, Timeline, chunk_streams, schedule_timeline
from te_ccl.fred.limits import fabric_report, switch_buffer_bytes
from te_ccl.fred.ops import CLASSES
from te_ccl.fred.switch import FredSwitch
from te_ccl.fred.wafer import Wafer, wafer_from_topology
from te_ccl.nogc import paused_gc
from te_ccl.outputs import make_output_dir, write_atomic
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology
from te_ccl.verify.fred_tables import check_fred_tables

__all__ = ["SwitchSet", "WrittenTables", "PlannedTables", "planned_tables", "tables_of_timeline",
           "TABLES_S_PER_FLOW", "unrouted_flows",
           "TABLES", "flow_rows", "uswitch_rows", "phase_rows", "port_rows", "config_rows",
           "stream_rows", "config_sizes", "lower_to_fred_tables", "render_fred_tables",
           "write_fred_tables", "fred_tables_for"]

SCHEMA = "teccl-fred-tables/2"
LOWERING = "lowering the FRED switch tables"  # what a deadline names
FLOW_COLUMNS = ("switch", "level", "radix", "m", "phase", "priority_class", "collective",
                "operation", "step", "steps", "flow", "input_ports", "output_ports",
                "reduce_op", "bytes", "stream")
USWITCH_COLUMNS = ("switch", "phase", "element", "recursion_level", "stage", "kind", "flow",
                   "input_sel", "output_sel", "mode", "middle")
PHASE_COLUMNS = ("phase", "default_unicast", "start_s", "end_s", "priority_class", "preempts")
PORT_COLUMNS = ("switch", "port", "neighbour", "lane", "lane_Bps")
CONFIG_COLUMNS = ("switch", "phase", "config", "bytes")
STREAM_COLUMNS = ("stream", "chunk", "bytes", "sources", "destinations", "after")
# CPU seconds per flow of lowering, checking and writing a schedule's tables, with margin:
# a compile estimates its first file from its flows before routing (:func:`unrouted_flows`),
# each of which also pays for the routing, so costs more than a table's flow
TABLES_S_PER_FLOW = 4e-4
TABLES = {"flows": FLOW_COLUMNS, "uswitches": USWITCH_COLUMNS, "phases": PHASE_COLUMNS,
          "ports": PORT_COLUMNS, "configs": CONFIG_COLUMNS, "streams": STREAM_COLUMNS}


@dataclass(frozen=True)
class SwitchSet:
    """Stand-alone FRED switches (no wafer around them), e.g. for ``teccl fred route``:
    ports with no neighbour, lanes of the wafer's rate, phases with no time to change."""

    name: str
    switches: dict[str, FredSwitch]
    lane_Bps: float = 750e9
    reconfig_s: float = 0.0
    can_reduce: bool = True
    can_copy: bool = True

    def level(self, switch: str) -> str:
        return "switch"

    def port_map(self) -> dict[str, list[tuple[str, int]]]:
        return {name: [("", p) for p in range(sw.ports)] for name, sw in self.switches.items()}


Fabric = Wafer | SwitchSet


@dataclass(frozen=True)
class WrittenTables:
    """The files written, their summary, and (for a schedule) the fabric-limits report of
    :func:`te_ccl.fred.limits.fabric_report`."""

    paths: tuple[Path, ...]
    summary: dict[str, Any]
    fabric: dict[str, Any] | None = None


def _ports(ports: Sequence[int]) -> str:
    return " ".join(str(p) for p in ports)


def _unicast(flows: Sequence[Any]) -> bool:
    return all(len(f.inputs) == 1 and len(f.outputs) == 1 for f in flows)


def flow_rows(phases: Sequence[FredPhase], wafer: Fabric) -> list[dict[str, Any]]:
    rows = []
    for ph in checked(phases, LOWERING, every=8):
        for fi in ph.flows:
            sw = wafer.switches[fi.switch]
            rows.append({"switch": fi.switch, "level": wafer.level(fi.switch),
                         "radix": sw.ports, "m": sw.m, "phase": ph.index,
                         "priority_class": fi.cls, "collective": fi.collective,
                         "operation": fi.flow.operation, "step": fi.step + 1, "steps": fi.steps,
                         "flow": fi.flow.id, "input_ports": _ports(fi.flow.inputs),
                         "output_ports": _ports(fi.flow.outputs), "reduce_op": fi.reduce_op,
                         "bytes": round(fi.bytes), "stream": fi.stream})
    return rows


def uswitch_rows(phases: Sequence[FredPhase]) -> list[dict[str, Any]]:
    rows = []
    for ph in checked(phases, LOWERING, every=8):
        for name, routing in ph.routings.items():
            for s in routing.elements:
                e = s.element
                for use in s.uses:
                    rows.append({"switch": name, "phase": ph.index, "element": e.path,
                                 "recursion_level": e.level, "stage": e.stage.value,
                                 "kind": e.kind.value, "flow": use.flow,
                                 "input_sel": use.input_sel, "output_sel": use.output_sel,
                                 "mode": s.mode,
                                 "middle": "" if use.colour is None else use.colour})
    return rows


def phase_rows(phases: Sequence[FredPhase]) -> list[dict[str, Any]]:
    """Phase table; a phase pre-empts overlapping phases of a lower priority class."""
    rows = []
    for ph in checked(phases, LOWERING, every=8):
        rank = CLASSES.index(ph.cls)
        pre = [q.index for q in phases if CLASSES.index(q.cls) > rank
               and q.start_s < ph.end_s and ph.start_s < q.end_s]
        rows.append({"phase": ph.index, "default_unicast": _unicast([fi.flow for fi in ph.flows]),
                     "start_s": ph.start_s, "end_s": ph.end_s, "priority_class": ph.cls,
                     "preempts": " ".join(map(str, pre))})
    return rows


def port_rows(wafer: Fabric) -> list[dict[str, Any]]:
    return [{"switch": name, "port": p, "neighbour": nb, "lane": lane, "lane_Bps": wafer.lane_Bps}
            for name, ports in wafer.port_map().items() for p, (nb, lane) in enumerate(ports)]


def config_rows(phases: Sequence[FredPhase]) -> list[dict[str, Any]]:
    """The configuration each switch selects in each phase: phases with the same encoded
    settings share an SRAM slot (numbered in order of first use)."""
    slots: dict[str, dict[tuple[int, int], int]] = defaultdict(dict)
    rows = []
    for ph in checked(phases, LOWERING, every=8):
        for name, routing in ph.routings.items():
            if _unicast(routing.flows):
                rows.append({"switch": name, "phase": ph.index, "config": "default", "bytes": 0})
                continue
            bits, value = encode(routing)
            slot = slots[name].setdefault((bits, value), len(slots[name]))
            rows.append({"switch": name, "phase": ph.index, "config": slot,
                         "bytes": -(-bits // 8)})
    return rows


def config_sizes(configs: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Bytes of SRAM each switch needs: its distinct configurations."""
    slots: dict[str, dict[Any, int]] = defaultdict(dict)
    for row in configs:
        slots[row["switch"]][row["config"]] = row["bytes"]
    return {name: sum(b for slot, b in s.items() if slot != "default")
            for name, s in sorted(slots.items())}


def stream_rows(streams: Sequence[ChunkStream]) -> list[dict[str, Any]]:
    return [{"stream": s.id, "chunk": s.chunk, "bytes": s.bytes, "sources": " ".join(s.sources),
             "destinations": " ".join(s.destinations), "after": " ".join(s.after)}
            for s in streams]


def lower_to_fred_tables(phases: Sequence[FredPhase], wafer: Fabric,
                         streams: Sequence[ChunkStream] = ()) -> dict[str, Any]:
    """The tables, the fabric's parameters and the SRAM use, as one JSON-ready dict."""
    check(LOWERING)
    configs = config_rows(phases)
    check(LOWERING)
    sizes = {name: 0 for name in wafer.switches} | config_sizes(configs)
    return {"schema": SCHEMA, "fabric": wafer.name, "sram_bytes": SRAM_BYTES,
            "reconfig_s": wafer.reconfig_s,
            "switches": {name: {"level": wafer.level(name), "radix": sw.ports, "m": sw.m,
                                "reduce": wafer.can_reduce, "copy": wafer.can_copy}
                         for name, sw in wafer.switches.items()},
            "config_bytes": sizes,
            "fits": {name: n <= SRAM_BYTES for name, n in sizes.items()},
            "flows": flow_rows(phases, wafer), "uswitches": uswitch_rows(phases),
            "phases": phase_rows(phases), "ports": port_rows(wafer), "configs": configs,
            "streams": stream_rows(streams)}


def _csv(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """The rows as CSV, cells in ``columns``' order (every row has every column; a
    ``csv.DictWriter`` would check each row's keys in Python)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(map(itemgetter(*columns), checked(rows, LOWERING)))
    return buf.getvalue()


def render_fred_tables(tables: dict[str, Any]) -> dict[str, str]:
    """File name → text of every table file (``tables.json`` last)."""
    files = {f"{name}.csv": _csv(tables[name], cols) for name, cols in TABLES.items()}
    files["tables.json"] = json.dumps(tables)
    return files


def write_fred_tables(phases: Sequence[FredPhase], wafer: Fabric, out_dir: str | Path,
                      streams: Sequence[ChunkStream] = ()) -> dict[str, Any]:
    """Check, then write every table file atomically into ``out_dir`` (created if missing,
    its parent not: :func:`make_output_dir`).

    Returns a summary: paths written, phases, flows, config bytes per switch and fits.

    Raises
    ------
    VerificationError
        If the independent checker finds a violation other than an SRAM overflow.
    """
    with paused_gc():  # the rows' objects hold no cycles: a collection would only cost
        return _checked_and_written(phases, wafer, Path(out_dir), streams)


def _checked_and_written(phases: Sequence[FredPhase], wafer: Fabric, out_dir: Path,
                         streams: Sequence[ChunkStream]) -> dict[str, Any]:
    """:func:`write_fred_tables`' work."""
    tables = lower_to_fred_tables(phases, wafer, streams)
    check(LOWERING)
    files = render_fred_tables(tables)
    try:
        report = check_fred_tables(files, source=str(out_dir))
    except SpecError as e:
        raise VerificationError(f"the FRED tables about to be written do not parse: {e}") from None
    bugs = [v for v in report.violations if v.rule != "sram"]
    if bugs:
        raise VerificationError(f"FRED tables fail {len(bugs)} check(s): {bugs[0].message}")
    check("checking the FRED switch tables")  # the last look: none is written late
    out = make_output_dir(out_dir)
    for name, text in files.items():
        write_atomic(out / name, text)
    return {"output": [str(out / n) for n in files], "phases": len(tables["phases"]),
            "flows": len(tables["flows"]), "config_bytes": tables["config_bytes"],
            "fits": all(tables["fits"].values()), "sram_bytes": SRAM_BYTES,
            "time_s": report.time_s}


def fred_tables_for(schedule_or_phases: Schedule | CommResult | Sequence[FredPhase],
                    topology: Topology, out_dir: str | Path) -> WrittenTables:
    """Write the FRED switch tables of a compiled schedule (``teccl compile --fred-tables``).

    ``schedule_or_phases`` is a solved :class:`~te_ccl.schedule.Schedule` on a FRED
    topology (its chunk streams striped over lanes in phases,
    :func:`te_ccl.fred.from_schedule.schedule_timeline`; the result carries the fabric
    limits of :func:`te_ccl.fred.limits.fabric_report`), a
    :class:`~te_ccl.fred.collectives.CommResult` from
    :func:`~te_ccl.fred.collectives.compile_fred`, or its phases.

    Raises
    ------
    SpecError
        If ``topology`` is not a two-level FRED wafer.
    VerificationError
        If the tables fail the independent checker (:func:`write_fred_tables`).
    """
    if not isinstance(schedule_or_phases, Schedule):
        wafer = wafer_from_topology(topology)
        phases = list(schedule_or_phases.phases if isinstance(schedule_or_phases, CommResult)
                      else schedule_or_phases)
        summary = write_fred_tables(phases, wafer, out_dir)
        return WrittenTables(tuple(Path(p) for p in summary["output"]), summary)
    return tables_of_timeline(schedule_or_phases, planned_tables(schedule_or_phases, topology),
                              out_dir)


@dataclass(frozen=True)
class PlannedTables:
    """A schedule's routed FRED phases (its timeline), before its tables are lowered:
    enough to say what lowering, checking and writing them will cost
    (:meth:`estimate_s`)."""

    wafer: Wafer
    timeline: Timeline

    @property
    def flows(self) -> int:
        return sum(len(ph.flows) for ph in self.timeline.phases)

    def estimate_s(self) -> float:
        """Seconds of CPU the tables' lowering, check and writing take, from their flows
        (:data:`TABLES_S_PER_FLOW`): the rows of every table grow with them."""
        return self.flows * TABLES_S_PER_FLOW


def unrouted_flows(schedule: Schedule, topology: Topology) -> int:
    """The flows ``schedule``'s tables would have if each chunk stream moved in one phase
    on every lane its links give it alone: an estimate from counts, before the routing
    (:func:`schedule_timeline`, itself about as costly per flow as the tables), of the
    tables' flows (:meth:`PlannedTables.estimate_s`). Streams that share lanes move in
    more phases, with more flows in all. Not cut by the deadline: it is what a message
    out of time says the tables would take, and costs a fraction of the routing."""
    wafer = wafer_from_topology(topology)
    with paused_gc():
        return sum(len(s.visits) * min(wafer.lanes(*link) // len(ts)
                                       for link, ts in s.links.items())
                   for s in chunk_streams(schedule, wafer))


def planned_tables(schedule: Schedule, topology: Topology) -> PlannedTables:
    """``schedule``'s phases routed on ``topology``'s wafer (:func:`schedule_timeline`)."""
    wafer = wafer_from_topology(topology)
    with paused_gc():
        return PlannedTables(wafer, schedule_timeline(schedule, wafer))


def tables_of_timeline(schedule: Schedule, planned: PlannedTables, out_dir: str | Path
                       ) -> WrittenTables:
    """:func:`fred_tables_for` of a schedule whose phases are routed (``planned``)."""
    wafer, timeline = planned.wafer, planned.timeline
    summary = write_fred_tables(timeline.phases, wafer, out_dir, timeline.streams)
    limits = {name: wafer.channel_buffer_bytes * sw.ports for name, sw in wafer.switches.items()}
    fabric = fabric_report(wafer.name, summary["config_bytes"],
                           switch_buffer_bytes(schedule, wafer.switches), limits,
                           tables_time_s=timeline.time_s, phases=len(timeline.phases),
                           streams=len(timeline.streams))
    return WrittenTables(tuple(Path(p) for p in summary["output"]), summary, fabric)
