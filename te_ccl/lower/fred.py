"""Lower FRED phases to the switch-configuration tables of fred.md (CSV and JSON).

Three tables:

* ``flows``: one row per flow per phase (switch, level, radix, m, phase = header
  configuration index, priority class, collective, operation, step/steps, flow id,
  input ports, output ports, reduce op, bytes);
* ``uswitches``: the configuration bits, one row per (µSwitch, flow) of each phase
  (element path, recursion level, stage, kind, input/output selection, mode, middle);
* ``phases``: phase, default-unicast flag (only unicast flows: the default header index,
  routed online, no SRAM), start/end time, the lower-priority phases it pre-empts.

Checks (:func:`check_phases`, fred.md "Checks"): each port is at most one flow's input
and one flow's output per phase; colours < m; flows sharing a µSwitch have different
colours; reduce only when both inputs are one flow, broadcast only when both outputs
are; the encoded configurations of each switch fit in 1.5 KB (reported per switch in
``config_bytes``; an overflow is reported, not raised, since it is a capacity finding).
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from te_ccl.errors import SpecError, VerificationError
from te_ccl.fred.collectives import CommResult, FredPhase
from te_ccl.fred.encoding import SRAM_BYTES, encoded_bits
from te_ccl.fred.from_schedule import phases_from_schedule
from te_ccl.fred.ops import CLASSES
from te_ccl.fred.routing import check_ports
from te_ccl.fred.switch import FredSwitch
from te_ccl.fred.wafer import Wafer, wafer_from_topology
from te_ccl.outputs import make_output_dir, write_atomic
from te_ccl.schedule import Schedule
from te_ccl.topology.model import Topology

__all__ = ["reducing_switches", "check_msccl_can_express", "SwitchSet", "flow_rows", "uswitch_rows", "phase_rows", "check_phases", "config_sizes",
           "lower_to_fred_tables", "write_fred_tables", "fred_tables_for"]

SCHEMA = "teccl-fred-tables/1"
FLOW_COLUMNS = ("switch", "level", "radix", "m", "phase", "priority_class", "collective",
                "operation", "step", "steps", "flow", "input_ports", "output_ports",
                "reduce_op", "bytes")
USWITCH_COLUMNS = ("switch", "phase", "element", "recursion_level", "stage", "kind", "flow",
                   "input_sel", "output_sel", "mode", "middle")
PHASE_COLUMNS = ("phase", "default_unicast", "start_s", "end_s", "priority_class", "preempts")


def reducing_switches(topology: Topology) -> list[str]:
    """The switches of ``topology`` that add the chunks they forward (FRED-B, FRED-D)."""
    return [s for s in topology.switches if topology.node(s).can_reduce]


def check_msccl_can_express(topology: Topology) -> None:
    """Refuse MSCCL XML for a fabric whose switches reduce: an MSCCL program is a list of
    GPU sends, receives and reductions, with no way to ask a switch to add what it
    forwards; the schedule of such a fabric is written as JSON and its switch tables.

    Raises
    ------
    SpecError
        If a switch of ``topology`` reduces.
    """
    found = reducing_switches(topology)
    if found:
        raise SpecError(f"MSCCL XML cannot express in-switch reduction (switches "
                        f"{', '.join(found[:3])}{' …' if len(found) > 3 else ''} reduce); "
                        "use --format json and --fred-tables DIR", file=topology.name,
                        key="--format")


@dataclass(frozen=True)
class SwitchSet:
    """Stand-alone FRED switches (no wafer around them), e.g. for ``teccl fred route``."""

    name: str
    switches: dict[str, FredSwitch]

    def level(self, switch: str) -> str:
        return "switch"


Fabric = Wafer | SwitchSet


def _ports(ports: Sequence[int]) -> str:
    return " ".join(str(p) for p in ports)


def _is_unicast(phase: FredPhase) -> bool:
    return all(len(fi.flow.inputs) == 1 and len(fi.flow.outputs) == 1 for fi in phase.flows)


def flow_rows(phases: Sequence[FredPhase], wafer: Fabric) -> list[dict[str, Any]]:
    rows = []
    for ph in phases:
        for fi in ph.flows:
            sw = wafer.switches[fi.switch]
            rows.append({"switch": fi.switch, "level": wafer.level(fi.switch),
                         "radix": sw.ports, "m": sw.m, "phase": ph.index,
                         "priority_class": fi.cls, "collective": fi.collective,
                         "operation": fi.operation, "step": fi.step + 1, "steps": fi.steps,
                         "flow": fi.flow.id, "input_ports": _ports(fi.flow.inputs),
                         "output_ports": _ports(fi.flow.outputs), "reduce_op": fi.reduce_op,
                         "bytes": round(fi.bytes)})
    return rows


def uswitch_rows(phases: Sequence[FredPhase]) -> list[dict[str, Any]]:
    rows = []
    for ph in phases:
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
    for ph in phases:
        rank = CLASSES.index(ph.cls)
        pre = [q.index for q in phases if CLASSES.index(q.cls) > rank
               and q.start_s < ph.end_s and ph.start_s < q.end_s]
        rows.append({"phase": ph.index, "default_unicast": _is_unicast(ph),
                     "start_s": ph.start_s, "end_s": ph.end_s, "priority_class": ph.cls,
                     "preempts": " ".join(map(str, pre))})
    return rows


def config_sizes(phases: Sequence[FredPhase]) -> dict[str, int]:
    """Bytes of SRAM each switch needs: its encoded non-default phase configurations."""
    bits: dict[str, int] = defaultdict(int)
    for ph in phases:
        if _is_unicast(ph):
            continue
        for name, routing in ph.routings.items():
            bits[name] += encoded_bits(routing)
    return {name: -(-b // 8) for name, b in sorted(bits.items())}


def check_phases(phases: Sequence[FredPhase]) -> list[str]:
    """Every violated routing check, as one line each (empty when all hold)."""
    problems: list[str] = []
    for ph in phases:
        for name, routing in ph.routings.items():
            where = f"phase {ph.index} {name}"
            try:
                check_ports(routing.switch.ports, routing.flows)
            except SpecError as e:
                problems.append(f"{where}: {e.reason}")
            for fid, colours in routing.colours.items():
                if any(not 0 <= c < routing.switch.m for c in colours):
                    problems.append(f"{where}: flow {fid} colour outside 0..{routing.switch.m - 1}")
            for s in routing.elements:
                problems.extend(f"{where} {s.element.path}: {p}" for p in _element_problems(s))
    return problems


def _element_problems(s) -> list[str]:
    flows = [u.flow for u in s.uses]
    out = []
    colours = [u.colour for u in s.uses if u.colour is not None]
    if len(set(colours)) < len(colours):
        out.append(f"flows {', '.join(flows)} share the µSwitch with one colour")
    merged_in = any("+" in u.input_sel for u in s.uses)
    merged_out = any("+" in u.output_sel for u in s.uses)
    if "reduce" in s.mode and not (len(s.uses) == 1 and merged_in):
        out.append(f"mode {s.mode} but the inputs are not one flow")
    if "broadcast" in s.mode and not (len(s.uses) == 1 and merged_out):
        out.append(f"mode {s.mode} but the outputs are not one flow")
    return out


def lower_to_fred_tables(phases: Sequence[FredPhase], wafer: Fabric) -> dict[str, Any]:
    """The three tables, the checks and the SRAM use, as one JSON-ready dict.

    Raises
    ------
    VerificationError
        If a routing check fails (never expected from :mod:`te_ccl.fred.routing`).
    """
    problems = check_phases(phases)
    if problems:
        raise VerificationError(f"FRED tables fail {len(problems)} check(s): {problems[0]}")
    sizes = config_sizes(phases)
    return {"schema": SCHEMA, "fabric": wafer.name, "sram_bytes": SRAM_BYTES,
            "config_bytes": sizes,
            "fits": {name: n <= SRAM_BYTES for name, n in sizes.items()},
            "flows": flow_rows(phases, wafer), "uswitches": uswitch_rows(phases),
            "phases": phase_rows(phases)}


def _csv(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_fred_tables(phases: Sequence[FredPhase], wafer: Fabric,
                      out_dir: str | Path) -> dict[str, Any]:
    """Write ``flows.csv``, ``uswitches.csv``, ``phases.csv`` and ``tables.json`` atomically
    into ``out_dir`` (created if missing, its parent not: :func:`make_output_dir`).

    Returns a summary: paths written, phases, flows, config bytes per switch and fits.
    """
    tables = lower_to_fred_tables(phases, wafer)
    out = make_output_dir(out_dir)
    files = {"flows.csv": _csv(tables["flows"], FLOW_COLUMNS),
             "uswitches.csv": _csv(tables["uswitches"], USWITCH_COLUMNS),
             "phases.csv": _csv(tables["phases"], PHASE_COLUMNS),
             "tables.json": json.dumps(tables, indent=1)}
    for name, text in files.items():
        write_atomic(out / name, text)
    return {"output": [str(out / n) for n in files], "phases": len(tables["phases"]),
            "flows": len(tables["flows"]), "config_bytes": tables["config_bytes"],
            "fits": all(tables["fits"].values()), "sram_bytes": SRAM_BYTES}


def fred_tables_for(schedule_or_phases: Schedule | CommResult | Sequence[FredPhase],
                    topology: Topology, out_dir: str | Path) -> list[Path]:
    """Write the FRED switch tables of a compiled schedule (``teccl compile --fred-tables``).

    ``schedule_or_phases`` is a solved :class:`~te_ccl.schedule.Schedule` on a FRED
    topology (each epoch's switch crossings become phases,
    :func:`te_ccl.fred.from_schedule.phases_from_schedule`), a
    :class:`~te_ccl.fred.collectives.CommResult` from
    :func:`~te_ccl.fred.collectives.compile_fred`, or its phases. Writes ``flows.csv``,
    ``uswitches.csv``, ``phases.csv`` and ``tables.json`` into ``out_dir`` (atomically,
    each file) and returns their paths.

    Raises
    ------
    SpecError
        If ``topology`` is not a two-level FRED wafer.
    VerificationError
        If a routed phase fails a table check.
    """
    wafer = wafer_from_topology(topology)
    if isinstance(schedule_or_phases, Schedule):
        phases = phases_from_schedule(schedule_or_phases, wafer)
    elif isinstance(schedule_or_phases, CommResult):
        phases = list(schedule_or_phases.phases)
    else:
        phases = list(schedule_or_phases)
    summary = write_fred_tables(phases, wafer, out_dir)
    return [Path(p) for p in summary["output"]]
