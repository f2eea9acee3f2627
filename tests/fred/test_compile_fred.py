"""`teccl compile` on FRED wafers: auto weighs the in-switch schedule, XML is refused where
switches reduce, the switch tables are written for the schedule compile chose."""

from __future__ import annotations

import json

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.fred.in_switch import in_switch_candidate
from te_ccl.schedule import Schedule
from te_ccl.spec.topology import load_topology


def test_xml_on_a_reducing_fabric_is_refused_before_solving(teccl, tmp_path):
    out = tmp_path / "a.xml"
    code, _, err = teccl("compile", "fred-d", "-c", "allreduce", "-s", "1MB", "-o", str(out))
    assert code == 2 and "MSCCL XML cannot express in-switch reduction" in err
    assert "fred-d" in err and "--format" in err and not out.exists()
    code, _, err = teccl("compile", "fred-b", "-c", "allgather", "-s", "1MB", "--format", "xml")
    assert code == 2 and err.count("\n") == 1


def test_compile_reduces_in_the_switches_and_writes_their_tables(teccl, tmp_path):
    """Whichever candidate wins (the flow model's one-problem AllReduce or the in-switch
    template), it reduces in the switches: no schedule that only forwards reaches 3 TB/s."""
    code, out, _ = teccl("compile", "fred-d", "-c", "allreduce", "-s", "20MB", "--time-limit",
                         "5", "-o", str(tmp_path / "s.json"), "--fred-tables",
                         str(tmp_path / "t"), "--json")
    assert code == 0
    d = json.loads(out)
    assert d["measured_by"] == "schedule replay" and d["bound_ratio"] >= 1 - 1e-9
    # each NPU sends and receives the buffer once at 3 TB/s: within 10 % of 3 TB/s
    assert 20e6 / d["finish_time_s"] > 0.9 * 3e12
    text = (tmp_path / "s.json").read_text()
    assert json.loads(text)["solve"]["backend"] == d["backend"]
    topo = load_topology("fred-d")
    written = Schedule.from_json(text, topo)
    assert any(t.op == "reduce" and not topo.node(t.dst).is_gpu for t in written.transfers)
    tables = json.loads((tmp_path / "t" / "tables.json").read_text())
    assert tables["fits"]


def test_the_in_switch_candidate_needs_switches_that_reduce():
    c = Collective(CollectiveKind.ALLREDUCE, 20 * 4096, tuple(range(20)))
    assert in_switch_candidate(load_topology("fred-c"), c) is None
    assert in_switch_candidate(load_topology("dgx2"), c) is None
    assert in_switch_candidate(load_topology("fred-d"), c).info.backend == "fred-in-switch"
