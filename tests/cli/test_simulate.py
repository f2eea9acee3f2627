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
    assert code == 0 and "finish time" in stdout and err == ""
    code, _, err = teccl("simulate", str(out))
    assert code == 2 and "TOPOLOGY" in err and len(err.strip().splitlines()) == 1


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


def _with_provenance(path, topology, size):
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, f"  <!-- teccl: topology={topology} size_bytes={size} -->\n")
    out = path.with_name("made.xml")
    out.write_text("".join(lines))
    return out


def test_simulate_takes_topology_and_size_from_the_files_comment(ring_xml, teccl):
    out, info = ring_xml
    made = _with_provenance(out, "ring8", 8_000_000)
    code, stdout, _ = teccl("simulate", str(made), "--json")
    assert code == 0
    sim = json.loads(stdout)
    assert sim["topology"] == "ring8" and sim["size_bytes"] == 8_000_000
    assert sim["finish_time_s"] == pytest.approx(info["finish_time_s"], rel=1e-9)
    code, stdout, _ = teccl("simulate", "ring8", str(made), "--size", "16MB", "--json")
    assert code == 0 and json.loads(stdout)["size_bytes"] == 16_000_000
    bare = out.with_name("bare.xml")  # no comment: neither topology nor size is known
    bare.write_text("".join(line for line in out.read_text().splitlines(keepends=True)
                            if "<!-- teccl:" not in line))
    code, _, err = teccl("simulate", str(bare))
    assert code == 2 and "--size" in err and len(err.strip().splitlines()) == 1
    code, _, err = teccl("simulate", str(_with_provenance(out, "nosuchtopo", 1)))
    assert code == 2 and "nosuchtopo" in err and len(err.strip().splitlines()) == 1


def test_simulate_refuses_xml_the_verifier_rejects(ring_xml, teccl, tmp_path):
    out, _ = ring_xml
    lines = out.read_text().splitlines(keepends=True)
    recv = next(i for i, line in enumerate(lines) if 'type="r"' in line)
    lines[recv] = lines[recv].replace('type="r"', 'type="nop"')  # a message nobody takes
    bad = tmp_path / "bad.xml"
    bad.write_text("".join(lines))
    code, stdout, err = teccl("simulate", "ring8", str(bad), "--size", "8MB", "--json")
    assert code == 1 and "not simulated" in err
    assert json.loads(stdout) == {"error": err.strip().removeprefix("teccl: error: "), "exit": 1}


def test_simulate_refuses_a_deadlock_at_the_real_slots(teccl, tmp_path):
    # AllGather on 2 GPUs, 3 chunks each: one thread block per rank sends its three, then
    # receives the peer's; under Simple each third send waits for the peer's first receive.
    def steps(g):
        own, other = [3 * g + k for k in range(3)], [3 * (1 - g) + k for k in range(3)]
        return "".join(f'<step s="{s}" type="{t}" srcbuf="o" srcoff="{c}" dstbuf="o" '
                       f'dstoff="{c}" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n'
                       for s, (t, c) in enumerate([("s", c) for c in own] +
                                                  [("r", c) for c in other]))
    gpus = "".join(f'<gpu id="{g}" i_chunks="0" o_chunks="6" s_chunks="0">\n'
                   f'<tb id="0" send="{1 - g}" recv="{1 - g}" chan="0">\n{steps(g)}</tb>\n'
                   "</gpu>\n" for g in (0, 1))
    xml = tmp_path / "d.xml"
    xml.write_text('<algo name="d" proto="Simple" nchannels="1" nchunksperloop="6" ngpus="2" '
                   'coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="0">\n'
                   f"{gpus}</algo>\n")
    code, stdout, err = teccl("simulate", str(_pair(tmp_path)), str(xml), "-s", "6KB", "--json")
    assert code == 1 and "deadlock" in err and json.loads(stdout)["exit"] == 1, err
    code, stdout, _ = teccl("simulate", str(_pair(tmp_path)),
                            str(_rewrite(xml, 'proto="Simple"', 'proto="LL"')), "-s", "6KB",
                            "--json")
    assert code == 0 and json.loads(stdout)["finish_time_s"] > 0


def _rewrite(path, old, new):
    out = path.with_name("rewritten.xml")
    out.write_text(path.read_text().replace(old, new))
    return out


def _pair(tmp_path):
    topo = tmp_path / "pair.yaml"
    topo.write_text("name: pair\nsource: test\ngenerator: {kind: ring, n: 2, bandwidth: 1GB/s}\n")
    return topo


def test_simulate_refuses_a_file_for_another_gpu_count(ring_xml, teccl):
    out, _ = ring_xml
    code, stdout, err = teccl("simulate", "dgx2", str(out), "-s", "8MB")
    assert code == 2 and stdout == "" and "8 GPUs but topology dgx2 has 16" in err
    assert len(err.strip().splitlines()) == 1


def test_simulate_runs_the_legacy_format_with_a_warning(teccl, tmp_path):
    out = tmp_path / "ring.xml"
    code, stdout, _ = teccl("baseline", "ring", "ring8", "-c", "allgather", "-s", "8MB",
                            "--inplace", "-o", str(out), "--json")
    assert code == 0
    head, rest = out.read_text().split("\n", 1)
    for attr in (' outofplace="0"', ' minBytes="0"', ' maxBytes="0"'):
        head = head.replace(attr, "")
    legacy = tmp_path / "legacy.xml"
    legacy.write_text(head + "\n" + rest)
    code, stdout, err = teccl("simulate", "ring8", str(legacy), "-s", "8MB", "--json")
    assert code == 0 and "legacy" in err
    assert json.loads(stdout)["finish_time_s"] == pytest.approx(
        json.loads(teccl("simulate", "ring8", str(out), "-s", "8MB", "--json")[1])
        ["finish_time_s"])
