"""The checker replays each form of switch configuration once (the phases of a schedule
repeat a few patterns on every switch): a switch of a form already found clean is not
replayed again, and one whose rows break the pattern, however late, is."""

from __future__ import annotations

import te_ccl.verify.fred_tables as checker
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.fred.from_schedule import schedule_timeline
from te_ccl.fred.in_switch import in_switch_schedule
from te_ccl.fred.wafer import wafer_from_topology
from te_ccl.lower.fred import lower_to_fred_tables, render_fred_tables
from te_ccl.spec.topology import load_topology


def test_a_form_found_clean_is_not_replayed_again_and_a_late_break_is_found():
    topo = load_topology("fred-d")
    schedule = in_switch_schedule(topo, Collective(CollectiveKind.ALLREDUCE, 20_000_000,
                                                   tuple(range(topo.ngpus))))
    wafer = wafer_from_topology(topo)
    timeline = schedule_timeline(schedule, wafer)
    tables = lower_to_fred_tables(timeline.phases, wafer, timeline.streams)
    report = checker.check_fred_tables(render_fred_tables(tables))
    configured = {(r["switch"], r["phase"]) for r in tables["uswitches"]}
    assert report.clean and 0 < report.replayed < len(configured)

    # the last row of the last phase carries another flow's name: its switch's form is
    # new, replayed, and the stranger's data found
    last = tables["uswitches"][-1]
    last["flow"] = next(r["flow"] for r in tables["uswitches"]
                        if (r["switch"], r["phase"]) == (last["switch"], last["phase"])
                        and r["flow"] != last["flow"])
    found = checker.check_fred_tables(render_fred_tables(tables))
    assert found.replayed > report.replayed
    assert found.counts.get("route", 0) >= 1
    assert any(f"{last['switch']} phase {last['phase']}" in v.message
               for v in found.violations if v.rule == "route")
