"""`teccl topo edit`: links removed or slowed, GPUs removed, and the bad input refused."""

from __future__ import annotations

import pytest

from te_ccl.errors import SpecError
from te_ccl.spec.topology import load_topology
from te_ccl.topology.edit import TopologyEdit, edit_topology, parse_scale
from te_ccl.topology.generators import ring


def test_a_colon_b_removes_both_directions_and_a_arrow_b_one():
    t = load_topology("dgx1")
    both = edit_topology(t, TopologyEdit(without_links=("g0:g1",)))
    assert not both.has_link("g0", "g1") and not both.has_link("g1", "g0")
    one = edit_topology(t, TopologyEdit(without_links=("g0>g1",)))
    assert not one.has_link("g0", "g1") and one.has_link("g1", "g0")
    assert len(both.links) == len(t.links) - 2 and len(one.links) == len(t.links) - 1


def test_scale_multiplies_bandwidth_and_keeps_latency():
    t = load_topology("dgx1")
    out = edit_topology(t, TopologyEdit(scale_links=(("g0:g3", 0.5),)))
    assert out.link("g0", "g3").bandwidth_Bps == t.link("g0", "g3").bandwidth_Bps / 2
    assert out.link("g3", "g0").latency_s == t.link("g3", "g0").latency_s
    assert out.link("g0", "g1") == t.link("g0", "g1")


def test_without_gpu_drops_its_links_and_renumbers_ranks_and_meta():
    t = load_topology("torus4x4")
    out = edit_topology(t, TopologyEdit(without_gpus=("g5",)))
    assert out.ngpus == 15 and "g5" not in out.gpus and out.rank("g6") == 5
    assert not any("g5" in k.key for k in out.links)
    assert out.meta == {}  # no longer a torus: no symmetry claims


@pytest.mark.parametrize("edit, key, words", [
    (TopologyEdit(without_links=("g0:g9",)), "--without-link", "unknown node 'g9'"),
    (TopologyEdit(without_links=("g0:g5",)), "--without-link", "no link between"),
    (TopologyEdit(without_links=("g0-g1",)), "--without-link", "NODE:NODE"),
    (TopologyEdit(scale_links=(("g0>g5", 2.0),)), "--scale-link", "no link from"),
    (TopologyEdit(without_gpus=("g8",)), "--without-gpu", "expected a GPU"),
])
def test_unknown_nodes_and_links_are_refused(edit, key, words):
    with pytest.raises(SpecError) as e:
        edit_topology(load_topology("dgx1"), edit)
    assert e.value.key == key and words in str(e.value)


def test_an_edit_that_disconnects_a_gpu_is_refused():
    with pytest.raises(SpecError, match="disconnects the network"):
        edit_topology(ring(4, 25e9), TopologyEdit(without_links=("g0:g1", "g2:g3")))
    with pytest.raises(SpecError, match="disconnects"):  # the middle of a line
        edit_topology(ring(4, 25e9, bidirectional=False), TopologyEdit(without_gpus=("g1",)))


@pytest.mark.parametrize("text", ["g0:g1", "g0:g1=0", "g0:g1=-1", "g0:g1=x", "=0.5",
                                  "g0:g1=inf"])
def test_bad_scale_factors(text):
    with pytest.raises(SpecError, match="FACTOR"):
        parse_scale(text)


def test_cli_writes_a_topology_that_loads(teccl, tmp_path):
    out = tmp_path / "dgx1-down.yaml"
    code, _, err = teccl("topo", "edit", "dgx1", "--without-link", "g0:g1", "--scale-link",
                         "g2>g3=0.5", "-o", str(out))
    assert code == 0 and "30 directed links" in err
    t = load_topology(str(out))
    assert t.name == "dgx1-down" and not t.has_link("g1", "g0")
    assert t.link("g2", "g3").bandwidth_Bps == load_topology("dgx1").link("g2", "g3").bandwidth_Bps / 2
    assert "Derived by `teccl topo edit` from dgx1" in out.read_text()


def test_cli_keeps_fred_switches_and_gpu_buffers(teccl, tmp_path):
    out = tmp_path / "fred.yaml"
    base = load_topology("fred-a")
    gpu = base.gpus[-1]
    code, _, _ = teccl("topo", "edit", "fred-a", "--without-gpu", gpu, "-o", str(out))
    assert code == 0
    t = load_topology(str(out))
    fred = [n for n in t.nodes if n.fred_m]
    assert fred and len(fred) == len([n for n in base.nodes if n.fred_m])


@pytest.mark.parametrize("args, words", [
    (["--without-link", "g0:g9"], "unknown node 'g9'"),
    (["--without-gpu", "g9"], "expected a GPU"),
    ([], "nothing to change"),
])
def test_cli_bad_input_is_one_line_and_exit_2(teccl, args, words):
    code, out, err = teccl("topo", "edit", "dgx1", *args)
    assert code == 2 and out == "" and words in err and len(err.strip().splitlines()) == 1
