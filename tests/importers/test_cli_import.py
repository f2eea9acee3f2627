"""`teccl topo import`, compose flags, and dumps given straight to other commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from te_ccl.spec.topology import load_topology

DATA = Path(__file__).parent / "data"


def test_import_writes_yaml_that_loads_back_the_same(teccl, tmp_path):
    out = tmp_path / "mi250.yaml"
    code, _, err = teccl("topo", "import", str(DATA / "rccl-topo_16p1h.xml"), "-o", str(out))
    assert code == 0 and "assumed:" in err and "gfx90a" in err
    t = load_topology(str(out))
    ref = load_topology(str(DATA / "rccl-topo_16p1h.xml"))
    assert {k.key: (k.bandwidth_Bps, k.latency_s) for k in t.links} == \
        {k.key: (k.bandwidth_Bps, k.latency_s) for k in ref.links}
    text = out.read_text()
    assert text.startswith("# Imported by `teccl topo import`") and "# assumed:" in text


@pytest.mark.parametrize("fabric, switches", [("rail", 8), ("fat-tree", 5),
                                              ("single-switch", 1)])
def test_compose_fabrics(teccl, tmp_path, fabric, switches):
    out = tmp_path / "c.yaml"
    code, _, _ = teccl("topo", "import", str(DATA / "rccl-topo_8p_940.xml"), "--nodes", "4",
                       "--fabric", fabric, "-o", str(out))
    assert code == 0
    t = load_topology(str(out))
    assert t.ngpus == 32 and len(t.switches) == switches


def test_rail_spine_and_bad_spine_bandwidth(teccl, tmp_path):
    out = tmp_path / "c.yaml"
    args = ("topo", "import", str(DATA / "rccl-topo_8p_940.xml"), "--nodes", "2", "-o", str(out))
    assert teccl(*args, "--spine-bw", "400Gbps")[0] == 0
    assert load_topology(str(out)).link("rail0", "spine").bandwidth_Bps == 50e9
    code, _, err = teccl(*args[:-2], "-o", str(tmp_path / "no.yaml"), "--spine-bw", "fast")
    assert code == 2 and "--spine-bw" in err and not (tmp_path / "no.yaml").exists()


def test_bad_node_count_and_nicless_compose_exit_2(teccl, tmp_path):
    code, _, err = teccl("topo", "import", str(DATA / "rccl-topo_8p_90a.xml"), "--nodes", "0")
    assert code == 2 and "--nodes" in err
    box = tmp_path / "box.txt"  # two NVLinked GPUs, no NIC column
    box.write_text("\tGPU0\tGPU1\tCPU Affinity\nGPU0\tX\tNV4\t0-7\nGPU1\tNV4\tX\t0-7\n")
    code, _, err = teccl("topo", "import", str(box), "--nodes", "2")
    assert code == 2 and "lists no NICs" in err, err


@pytest.mark.parametrize("content", [b"<system><cpu>", b"\x00\x01garbage", b"GPU0 GPU1\nGPU0 X\n"])
def test_bad_dump_exit_2_one_line_no_output(teccl, tmp_path, content):
    bad = tmp_path / "bad.xml"
    bad.write_bytes(content)
    out = tmp_path / "out.yaml"
    code, stdout, err = teccl("topo", "import", str(bad), "-o", str(out))
    assert code == 2 and not out.exists() and len(err.strip().splitlines()) == 1
    assert str(bad) in err and "Traceback" not in err


def test_show_and_compile_accept_a_dump(teccl, tmp_path):
    code, out, _ = teccl("topo", "show", str(DATA / "dgx1-v100-nvidia-smi-topo.txt"), "--json")
    assert code == 0 and '"ngpus": 8' in out
    xml = tmp_path / "ag.xml"
    code, _, err = teccl("compile", str(DATA / "rccl-topo_8p_940.xml"), "-c", "allgather",
                         "-s", "1MB", "-o", str(xml))
    assert code == 0 and xml.exists(), err


def test_quirks_print_one_warning_line_each_and_stay_in_the_yaml(teccl, tmp_path):
    out = tmp_path / "ncv4.yaml"
    code, _, err = teccl("topo", "import", str(DATA / "azure-ncv4-topo.xml"), "-o", str(out))
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert code == 0 and len(warnings) == 4
    assert warnings[0] == (f"warning: {DATA / 'azure-ncv4-topo.xml'}:5: <nvlink> target "
                           "'0001:00:00.0' is the GPU's own busid: link skipped")
    text = out.read_text()
    assert "# warnings:" in text and text.count("own busid: link skipped") == 4
    assert load_topology(str(out)).ngpus == 4


@pytest.mark.parametrize("command", [("topo", "show"), ("compile",)], ids=" ".join)
def test_a_dump_given_directly_prints_its_quirks_once_as_topo_import_does(teccl, tmp_path,
                                                                          command):
    dump = str(DATA / "azure-ncv4-topo.xml")
    _, _, imported = teccl("topo", "import", dump, "-o", str(tmp_path / "ncv4.yaml"))
    expected = [ln for ln in imported.splitlines() if ln.startswith("warning: ")]
    rest = ("-c", "allgather", "-s", "1MB", "-o", str(tmp_path / "ag.xml")) \
        if command == ("compile",) else ()
    code, _, err = teccl(*command, dump, *rest)
    assert code == 0, err
    assert [ln for ln in err.splitlines() if ln.startswith("warning: ")] == expected
    assert len(expected) == 4 and all(f"{dump}:" in ln for ln in expected)


def test_a_dump_loaded_by_the_library_issues_its_quirks_as_warnings():
    from te_ccl.errors import InputWarning

    dump = str(DATA / "azure-ncv4-topo.xml")
    with pytest.warns(InputWarning) as seen:
        load_topology(dump)
    assert [str(w.message).split(": ", 1)[0] for w in seen] == [f"{dump}:{n}"
                                                                for n in (5, 15, 22, 29)]


def test_cloud_file_without_gpus_imports_with_given_gpus(teccl, tmp_path):
    path, out = str(DATA / "aws-p5.48xl-static-topo.xml"), tmp_path / "p5.yaml"
    code, _, err = teccl("topo", "import", path, "-o", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--gpus N" in err
    assert not out.exists()
    code, _, err = teccl("topo", "import", path, "--gpus", "8", "--arch", "90",
                         "--nvswitch-links", "18", "-o", str(out))
    assert code == 0, err
    assert load_topology(str(out)).link("g0", "nvswitch").bandwidth_Bps == 450e9


def test_subprocess_import_to_stdout():
    r = subprocess.run([sys.executable, "-m", "te_ccl", "topo", "import",
                        str(DATA / "azure-ndv4-topo.xml")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("# Imported") and "gpus:" in r.stdout
    assert "no <gpu> element" in r.stderr
