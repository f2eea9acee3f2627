"""`teccl topo list/show` and every bad topology input, through main()'s error mapping."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from te_ccl.spec.topology import shipped_topologies


def test_list_json_names_every_shipped_topology(teccl):
    code, out, _ = teccl("topo", "list", "--json")
    assert code == 0
    names = [t["name"] for t in json.loads(out)["topologies"]]
    assert names == shipped_topologies()
    for required in ("dgx1", "ndv2x2", "ndv2x4", "dgx2", "dgx2x2", "mi250", "ring8", "fc8",
                     "mesh4x4", "torus4x4", "mesh8x8", "torus8x8", "mesh16x16", "torus16x16",
                     "mesh32x32", "torus32x32", "torus8x8x8", "rail8x8", "fred-a", "fred-b",
                     "fred-c", "fred-d", "wafer-mesh5x4"):
        assert required in names


def test_list_table(teccl):
    code, out, _ = teccl("topo", "list")
    assert code == 0 and "dgx1" in out and "wafer-mesh5x4" in out


def test_show_json_dgx1(teccl):
    code, out, _ = teccl("topo", "show", "dgx1", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["topology"] == "dgx1" and d["ngpus"] == 8 and d["nlinks"] == 32
    assert d["diameter_hops"] == 2
    assert d["bisection_Bps"] == pytest.approx(150e9) and d["bisection_exact"] is True
    groups = {(g["bandwidth_Bps"], g["count"]) for g in d["link_groups"]}
    assert groups == {(25e9, 16), (50e9, 16)}
    assert "whitepaper" in d["source"]


def test_show_table_names_bisection_and_source(teccl):
    code, out, _ = teccl("topo", "show", "ndv2x4")
    assert code == 0
    assert "bisection" in out and "(approx)" in out and "TE-CCL" in out


def test_show_file(teccl, tmp_path):
    f = tmp_path / "pair.yaml"
    f.write_text("gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 10GB/s}\n")
    code, out, _ = teccl("topo", "show", str(f), "--json")
    assert code == 0 and json.loads(out)["topology"] == "pair"


GOOD = "gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 10GB/s, latency: 1us}\n"

# (file text, fragments the one-line message must contain)
BAD = {
    "unknown key": ("gpus: [a, b]\nlinkz: []\n", ["x.yaml:2", "linkz", "unknown key"]),
    "unknown link key": ("gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwith: 1GB/s}\n",
                         ["x.yaml:3", "links[0].bandwith", "unknown key", "bandwidth"]),
    "missing key": ("gpus: [a, b]\nlinks:\n  - {between: [a, b]}\n",
                    ["x.yaml:3", "links[0].bandwidth", "missing key"]),
    "missing gpus": ("links: []\n", ["gpus", "missing key"]),
    "wrong type": ("gpus: 5\n", ["x.yaml:1", "gpus", "expected a list"]),
    "wrong type count": ("gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 1GB/s, "
                         "count: two}\n", ["links[0].count", "expected an integer"]),
    "bad unit": ("gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 50GB}\n",
                 ["links[0].bandwidth", "expected a bandwidth with a unit"]),
    "bad time unit": ("gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 1GB/s, "
                      "latency: 3 parsecs}\n", ["links[0].latency", "expected a time"]),
    "negative bandwidth": ("gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: -5GB/s}\n",
                           ["links[0].bandwidth", "positive bandwidth"]),
    "zero bandwidth": ("gpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 0GB/s}\n",
                       ["links[0].bandwidth", "positive bandwidth"]),
    "unknown node": ("gpus: [a, b]\nlinks:\n  - {from: a, to: c, bandwidth: 1GB/s}\n",
                     ["x.yaml:3", "links[0].to", "unknown node 'c'"]),
    "duplicate node": ("gpus: [a, b, a]\n", ["x.yaml:1", "gpus[2]", "duplicate node 'a'"]),
    "duplicate switch": ("gpus: [a, b]\nswitches:\n  - a\n", ["switches[0]", "duplicate node"]),
    "not connected": ("gpus: [a, b]\nlinks:\n  - {from: a, to: b, bandwidth: 1GB/s}\n",
                      ["links", "'b' cannot reach GPU 'a'"]),
    "islands": ("gpus: [a, b, c, d]\nlinks:\n  - {between: [a, b], bandwidth: 1GB/s}\n"
                "  - {between: [c, d], bandwidth: 1GB/s}\n", ["cannot reach GPU 'c'"]),
    "empty file": ("", ["x.yaml", "file is empty"]),
    "only a comment": ("# nothing here\n", ["file is empty"]),
    "syntax error": ("gpus: [a, b\nlinks:\n  - {between: [a, b], bandwidth: 1GB/s}\n",
                     ["x.yaml:", "YAML syntax error"]),
    "not a mapping": ("- a\n- b\n", ["x.yaml:1", "expected a topology mapping"]),
    "bad generator": ("generator: {kind: torus, dims: [2, 2], bandwidth: 1GB/s}\n",
                      ["generator", "dimensions must be integers >= 3"]),
    "unknown generator": ("generator: {kind: hypercube, n: 8}\n",
                          ["generator.kind", "expected one of"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_topology_exit_2_one_line(teccl, tmp_path, case):
    text, fragments = BAD[case]
    f = tmp_path / "x.yaml"
    f.write_text(text)
    code, out, err = teccl("topo", "show", str(f))
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("teccl: error: ")
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def test_syntax_error_line_number(teccl, tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("name: t\ngpus: [a, b]\nsource: x: y\n")
    code, _, err = teccl("topo", "show", str(f))
    assert code == 2 and f"{f}:3: YAML syntax error: mapping values are not allowed" in err


def test_unclosed_bracket_names_where_it_opened(teccl, tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("name: t\ngpus: [a, b]\nlinks:\n  - {between: [a, b], bandwidth: 1GB/s\n"
                 "  - foo\n")
    code, _, err = teccl("topo", "show", str(f))
    assert code == 2 and f"{f}:6:" in err and "started at line 4" in err


def test_good_file_is_accepted(teccl, tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text(GOOD)
    assert teccl("topo", "show", str(f))[0] == 0


def test_missing_file_and_unknown_name(teccl):
    code, _, err = teccl("topo", "show", "no-such-topology")
    assert code == 2 and "no shipped topology or file named 'no-such-topology'" in err


def test_real_subprocess_bad_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(BAD["negative bandwidth"][0])
    exe = Path(sys.executable).with_name("teccl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "te_ccl.cli.main"]
    proc = subprocess.run(cmd + ["topo", "show", str(f)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "links[0].bandwidth" in lines[0]
