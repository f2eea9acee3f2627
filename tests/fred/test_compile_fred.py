"""`teccl compile` on FRED wafers: auto weighs the in-switch schedule, XML is refused where
switches reduce, the switch tables are written for the schedule compile chose."""

from __future__ import annotations

import json

import pytest

from te_ccl.api import compile
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.fred.in_switch import in_switch_candidate
from te_ccl.fred.limits import switch_buffer_bytes
from te_ccl.schedule import Schedule
from te_ccl.spec.topology import load_topology


def test_xml_on_a_reducing_fabric_is_refused_before_solving(teccl, tmp_path):
    out = tmp_path / "a.xml"
    code, _, err = teccl("compile", "fred-d", "-c", "allreduce", "-s", "1MB", "-o", str(out))
    assert code == 2 and "MSCCL XML cannot express in-switch reduction" in err
    assert "fred-d" in err and "--format" in err and not out.exists()
    code, _, err = teccl("compile", "fred-b", "-c", "allgather", "-s", "1MB", "--format", "xml")
    assert code == 2 and err.count("\n") == 1


@pytest.mark.parametrize("backend", [
    pytest.param(["--backend", "rounds", "--chunks", "1"], id="rounds"),
    pytest.param([], id="auto", marks=pytest.mark.slow),
])
def test_compile_reduces_in_the_switches_and_writes_their_tables(teccl, tmp_path, backend):
    """Whichever candidate wins (the flow model's one-problem AllReduce or the in-switch
    template), it reduces in the switches: no schedule that only forwards reaches 3 TB/s.
    The rounds solve in one chunk reaches the bound on its own, whatever the machine's load;
    auto races the in-switch schedule before the flow model and the finest trees, whose
    building could otherwise take the limit on a busy machine (it passes at --clock-rate 3);
    its compile takes seconds, so it runs with the slow tests."""
    code, out, err = teccl("compile", "fred-d", "-c", "allreduce", "-s", "20MB", *backend,
                           "--time-limit", "120", "-o", str(tmp_path / "s.json"),
                           "--fred-tables", str(tmp_path / "t"), "--json")
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
    assert all(tables["fits"].values())
    # the switch limits: the configurations fit the SRAM; the switches have no buffer and
    # the schedule holds no chunk in one from an epoch into the next (no warning); the
    # tables stream each NPU's 20 MB once at 3 TB/s plus 5.5 ns a phase change
    fabric = d["fabric"]
    assert fabric["sram_fits"] and 0 < fabric["sram_bytes_max"] <= fabric["sram_limit_bytes"]
    assert fabric["buffer_fits"] and fabric["fits"] and fabric["buffer_bytes_max"] == 0
    assert fabric["warning"] is None and "warning:" not in err
    assert fabric["tables_time_s"] == pytest.approx(
        20e6 / 3e12 + fabric["phases"] * 4096 / 750e9)
    code, out, _ = teccl("fred", "check", str(tmp_path / "t"))
    assert code == 0 and "clean" in out


def _sram_reported(teccl, fabric: dict, tables) -> None:
    """The worst switch's SRAM is the largest, against 1.5 KB, and `teccl fred check`
    replays the tables clean and finds the same."""
    assert fabric["sram_limit_bytes"] == 1536
    assert 0 < fabric["sram_bytes_max"] == max(
        s["sram_bytes"] for s in fabric["switches"].values())
    assert fabric["sram_fits"] == (fabric["sram_bytes_max"] <= 1536)
    code, out, _ = teccl("fred", "check", str(tables), "--json")
    report = json.loads(out)
    assert code == 0 and report["clean"]
    assert report["sram_bytes"][fabric["sram_switch"]] == fabric["sram_bytes_max"]


@pytest.mark.slow
def test_a_generated_32_npu_wafer_compiles_with_its_sram_reported(teccl, tmp_path):
    path, tables = tmp_path / "fred-d-32.yaml", tmp_path / "t"
    assert teccl("topo", "gen", "fred-d", "--npus", "32", "-o", str(path))[0] == 0
    code, out, _ = teccl("compile", str(path), "-c", "allreduce", "-s", "1MB",
                         "--backend", "rounds", "--time-limit", "20",
                         "-o", str(tmp_path / "s.json"), "--fred-tables", str(tables), "--json")
    assert code == 0
    d = json.loads(out)
    assert d["ngpus"] == 32 and d["bound_ratio"] >= 1 - 1e-9
    assert len(d["fabric"]["switches"]) == 32 // 4 + 1
    _sram_reported(teccl, d["fabric"], tables)


@pytest.mark.slow
def test_a_generated_64_npu_wafer_runs_in_switch_with_its_sram_reported(teccl, tmp_path):
    """FRED-B of 64 NPUs: its L2, FRED_3(32), holds the largest configuration."""
    path, tables = tmp_path / "fred-b-64.yaml", tmp_path / "t"
    assert teccl("topo", "gen", "fred-b", "--npus", "64", "-o", str(path))[0] == 0
    code, out, _ = teccl("fred", "collective", str(path), "-c", "allreduce", "--size", "1MB",
                         "--tables", str(tables), "--json")
    assert code == 0
    fabric = json.loads(out)["fabric"]
    assert len(fabric["switches"]) == 64 // 4 + 1 and fabric["sram_switch"] == "L2"
    _sram_reported(teccl, fabric, tables)


def test_topo_gen_refuses_a_wafer_that_does_not_fill_its_l1_switches(teccl):
    code, _, err = teccl("topo", "gen", "fred-a", "--npus", "30")
    assert code == 2 and err.count("\n") == 1 and "--npus" in err


def test_the_in_switch_candidate_needs_switches_that_reduce():
    c = Collective(CollectiveKind.ALLREDUCE, 20 * 4096, tuple(range(20)))
    assert in_switch_candidate(load_topology("fred-c"), c) is None
    assert in_switch_candidate(load_topology("dgx2"), c) is None
    assert in_switch_candidate(load_topology("fred-d"), c).info.backend == "fred-in-switch"


@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_the_flow_model_holds_nothing_in_a_switch_without_buffer(kind):
    """Rules (3) and (5) of the flow model: a switch without buffer forwards each chunk in
    the epoch it arrives, so TE-CCL's buffer metric is 0 in every FRED switch."""
    result = compile("fred-b", kind, size="1MB", ranks="0,1,4,5", backend="milp",
                     time_limit_s=20, fmt="json")
    s = result.schedule
    assert any(not s.topology.node(t.src).is_gpu for t in s.transfers)
    assert set(switch_buffer_bytes(s, s.topology.switches).values()) == {0}
