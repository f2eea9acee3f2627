"""`teccl fred show | route | phase | evaluate` through main()'s error mapping."""

from __future__ import annotations

import json

import pytest


def test_show_json_and_draw(teccl, tmp_path):
    png = tmp_path / "f.png"
    code, out, _ = teccl("fred", "show", "--ports", "8", "--m", "3", "--json", "--draw", str(png))
    assert code == 0
    d = json.loads(out)
    assert d["elements"] == 29 and d["switch"]["middles"][1]["path"] == "fred/mid1"
    assert png.stat().st_size > 0
    code, out, _ = teccl("fred", "show", "--ports", "5")
    assert code == 0 and "DEMUX" in out


def test_route_reports_the_split_of_an_odd_cycle(teccl, tmp_path):
    flows = ["--flow", "1,2:0", "--flow", "3,4:2", "--flow", "5,0:4"]
    code, out, _ = teccl("fred", "route", "-p", "6", "--m", "2", *flows, "--json",
                         "--tables", str(tmp_path / "t"))
    assert code == 0
    d = json.loads(out)
    assert d["phases"] == 2 and d["conflicts"]
    assert (tmp_path / "t" / "uswitches.csv").exists()
    code, out, _ = teccl("fred", "route", "-p", "6", "--m", "3", *flows, "--json")
    assert json.loads(out)["phases"] == 1


def test_route_phase_file_and_bad_flows(teccl, tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("ports: 4\nm: 3\nflows:\n  - {id: ar, inputs: [0,1,2,3], outputs: [0,1,2,3]}\n")
    code, out, _ = teccl("fred", "route", "--phase", str(f), "--json")
    assert code == 0 and json.loads(out)["routing"][0]["colours"]["ar"] == [0]
    code, _, err = teccl("fred", "route", "--flow", "0,1-2")
    assert code == 2 and "--flow" in err
    code, _, err = teccl("fred", "route", "-p", "4", "--flow", "0:1", "--flow", "0:2")
    assert code == 2 and "port 0" in err


def test_phase_and_evaluate(teccl, tmp_path):
    code, out, _ = teccl("fred", "phase", "--fabric", "fred-c", "--phase", "DP", "--json")
    assert code == 0 and json.loads(out)["effective_GBps"] == pytest.approx(3000, rel=1e-3)
    code, out, _ = teccl("fred", "phase", "--fabric", "fred-d", "--tables", str(tmp_path / "t"),
                         "--json")
    assert code == 0 and json.loads(out)["tables"]["fits"]
    plot = tmp_path / "p.png"
    code, out, _ = teccl("fred", "evaluate", "-w", "resnet152", "--json", "--plot", str(plot))
    assert code == 0 and plot.exists()
    d = json.loads(out)
    fabrics = {f["fabric"]: f for f in d["fabrics"]}
    assert fabrics["fred-d"]["speedup"] > fabrics["fred-c"]["speedup"] > 1
    assert d["assumptions"]["efficiency"] == 0.5 and d["paper"]
    code, _, err = teccl("fred", "evaluate", "-w", "resnet152", "-s", "MP3-DP7")
    assert code == 2


def test_evaluate_all_with_a_sweep_prints_its_assumptions(teccl):
    code, out, _ = teccl("fred", "evaluate", "-w", "all", "--sweep", "efficiency=0.25,0.5",
                         "--json")
    assert code == 0
    runs = json.loads(out)["evaluations"]
    assert len(runs) == 8 and {r["sweep"] for r in runs} == {"efficiency=0.25",
                                                             "efficiency=0.5"}
    assert {r["assumptions"]["efficiency"] for r in runs} == {0.25, 0.5}
    code, out, _ = teccl("fred", "evaluate", "-w", "transformer17b")
    assert code == 0 and "assumptions: peak_flops" in " ".join(out.split())
    assert "fred-d exposed_comm_reduction: mean over 12 strategies" in out
    code, _, err = teccl("fred", "evaluate", "-w", "gpt3", "--sweep", "speed=1")
    assert code == 2 and "--sweep" in err
    code, _, err = teccl("fred", "evaluate", "-w", "all", "--plot", "x.png")
    assert code == 2 and "--plot" in err


def test_collective_writes_schedule_and_tables(teccl, tmp_path):
    out_json = tmp_path / "s.json"
    code, out, _ = teccl("fred", "collective", "fred-b", "-c", "allreduce", "--size", "8MB",
                         "--ranks", "0-7", "-o", str(out_json), "--tables", str(tmp_path / "t"),
                         "--json")
    assert code == 0
    d = json.loads(out)
    assert d["ngpus"] == 8 and len(d["tables"]) == 7
    assert d["fabric"]["phases"] >= 1 and d["fabric"]["sram_fits"]
    code, out, _ = teccl("fred", "check", str(tmp_path / "t"))
    assert code == 0 and "clean" in out
    assert json.loads(out_json.read_text())["schema"] == "teccl-schedule/1"
    code, _, err = teccl("fred", "collective", "fred-a")
    assert code == 2 and "reduce" in err
    code, _, _ = teccl("fred", "collective", "fred-d", "--ranks", "0-40")
    assert code == 2


def test_evaluate_every_strategy_reports_the_mean_exposed_communication_cut(teccl):
    code, out, _ = teccl("fred", "evaluate", "-w", "resnet152", "-s", "all", "--json")
    assert code == 0
    d = json.loads(out)
    assert [e["strategy"] for e in d["evaluations"]] == ["MP1-DP1-PP20", "MP1-DP2-PP10",
                                                         "MP1-DP4-PP5", "MP1-DP5-PP4",
                                                         "MP1-DP10-PP2", "MP1-DP20-PP1"]
    mean = d["strategy_means"][0]
    cuts = [next(f for f in e["fabrics"] if f["fabric"] == "fred-d")["exposed_comm_reduction"]
            for e in d["evaluations"]]
    assert mean["strategies"] == 6
    assert mean["fabrics"]["fred-d"]["exposed_comm_reduction"] == pytest.approx(sum(cuts) / 6)


def test_a_phase_whose_configuration_overflows_the_sram_is_reported(teccl):
    """FRED-D of 64 NPUs: the DP phase of MP2-DP16-PP2 routes 32 All-Reduces of 16 NPUs
    through the L2 at once, 3.35 KB of settings against its 1.5 KB."""
    args = ("fred", "phase", "--fabric", "fred-d", "--npus", "64", "-s", "MP2-DP16-PP2")
    code, out, err = teccl(*args, "--phase", "DP", "--json")
    d = json.loads(out)
    assert code == 0 and d["sram_switch"] == "L2" and not d["sram_fits"]
    assert d["sram_bytes_max"] > d["sram_limit_bytes"] == 1536
    assert err.startswith("warning: fred-d: L2 needs") and err.count("\n") == 1
    code, out, err = teccl(*args, "--phase", "MP", "--json")
    assert code == 0 and json.loads(out)["sram_fits"] and not err
