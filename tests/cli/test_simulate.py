"""`teccl simulate` and `teccl baseline` through the CLI (exit codes, JSON, files)."""

import json
import subprocess
import sys

import pytest


@pytest.fixture
def ring_xml(teccl, tmp_path):
    out = tmp_path / "ring.xml"
    code, stdout, _ = teccl("baseline", "ring", "ring8", "-c", "allgather", "-s", "8MB",
                            "-o", str(out), "--json")
    assert code == 0, stdout
    return out, json.loads(stdout)


def test_baseline_writes_verified_xml_and_reports_the_simulation(ring_xml, teccl):
    out, info = ring_xml
    assert out.read_text().startswith("<algo")
    assert info["backend"] == "baseline:ring" and info["collective"] == "allgather"
    assert info["finish_time_s"] <= info["predicted_s"]
    assert info["algbw_GBps"] == pytest.approx(8e6 / info["finish_time_s"] / 1e9)
    assert info["bound_ratio"] >= 1.0
    code, stdout, _ = teccl("verify", str(out))
    assert code == 0


def test_simulate_xml_matches_the_baseline_and_draws_a_timeline(ring_xml, teccl, tmp_path):
    out, info = ring_xml
    png = tmp_path / "t.png"
    code, stdout, _ = teccl("simulate", "ring8", str(out), "--size", "8MB", "--json",
                            "--timeline", str(png))
    assert code == 0
    sim = json.loads(stdout)
    assert sim["finish_time_s"] == pytest.approx(info["finish_time_s"], rel=1e-9)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert {x["src"] for x in sim["links"]} <= {f"g{i}" for i in range(8)}


def test_simulate_json_schedule(teccl, tmp_path):
    out = tmp_path / "s.json"
    code, _, _ = teccl("baseline", "direct", "fc8", "-c", "alltoall", "-s", "1MB", "-o", str(out))
    assert code == 0
    code, stdout, err = teccl("simulate", "fc8", str(out))
    assert code == 0 and "finish time" in err and stdout == ""


def test_simulate_bad_inputs_exit_2(teccl, tmp_path):
    xml = tmp_path / "x.xml"
    xml.write_text("<algo/>")
    code, _, err = teccl("simulate", "ring8", str(xml))
    assert code == 2 and "--size" in err
    code, _, err = teccl("simulate", "ring8", str(tmp_path / "missing.json"))
    assert code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, _, err = teccl("simulate", "ring8", str(bad))
    assert code == 2 and "schema" in err
    code, _, err = teccl("baseline", "butterfly", "ring8", "-c", "allgather", "-s", "1MB",
                         "-o", str(tmp_path / "b.xml"))
    assert code == 2 and "unknown baseline" in err and not (tmp_path / "b.xml").exists()


def test_subprocess_baseline_to_stdout():
    proc = subprocess.run([sys.executable, "-m", "te_ccl", "baseline", "tree", "dgx1", "-c",
                           "broadcast", "--root", "0", "-s", "1MB", "-o", "-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("<algo") and 'coll="broadcast"' in proc.stdout
