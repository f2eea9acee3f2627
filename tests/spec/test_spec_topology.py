"""The topology loader: format features and where errors point."""

from __future__ import annotations

import pytest

from te_ccl.errors import SpecError
from te_ccl.spec.topology import load_topology, topology_from_data
from te_ccl.spec.yamlio import parse_yaml


def load_text(text: str, tmp_path, name: str = "t.yaml"):
    f = tmp_path / name
    f.write_text(text)
    return load_topology(str(f))


def test_bidirectional_directed_count_and_defaults(tmp_path):
    t = load_text("""
name: demo
defaults: {bandwidth: 10GB/s, latency: 2us, gpu_buffer: 1MiB}
gpus: [a, b, {name: c, buffer: 4KB}]
links:
  - {between: [a, b], count: 3}
  - {from: b, to: c, bandwidth: 100Gbps, latency: 0.5us}
  - {from: c, to: a}
""", tmp_path)
    assert t.name == "demo" and t.gpus == ("a", "b", "c")
    assert t.link("a", "b").bandwidth_Bps == 30e9 and t.link("b", "a").latency_s == 2e-6
    assert t.link("b", "c").bandwidth_Bps == 12.5e9 and t.link("b", "c").latency_s == 5e-7
    assert not t.has_link("c", "b")
    assert t.node("a").buffer_bytes == 2**20 and t.node("c").buffer_bytes == 4000


def test_name_defaults_to_file_stem(tmp_path):
    t = load_text("gpus: [a, b]\nlinks: [{between: [a, b], bandwidth: 1GB/s}]\n", tmp_path,
                  "my-net.yaml")
    assert t.name == "my-net" and t.source == ""


def test_switch_capabilities_and_fred(tmp_path):
    t = load_text("""
gpus: [a, b, c]
switches:
  - plain
  - {name: f, copy: false, reduce: true, buffer: true, fred: {m: 3}}
links:
  - {between: [a, plain], bandwidth: 1GB/s}
  - {between: [b, f], bandwidth: 1GB/s}
  - {between: [c, f], bandwidth: 1GB/s}
  - {between: [plain, f], bandwidth: 1GB/s}
""", tmp_path)
    plain, f = t.node("plain"), t.node("f")
    assert plain.can_copy and not plain.can_reduce and not plain.has_buffer
    assert plain.fred_m is None
    assert not f.can_copy and f.can_reduce and f.has_buffer
    assert (f.fred_m, f.fred_ports) == (3, 3)  # ports default to its neighbour count


def test_generator_plus_extra_nodes(tmp_path):
    t = load_text("""
generator: {kind: ring, n: 4, bandwidth: 1GB/s}
gpus: [extra]
links: [{between: [extra, g0], bandwidth: 2GB/s}]
""", tmp_path)
    assert t.gpus == ("g0", "g1", "g2", "g3", "extra")
    assert t.link("g0", "extra").bandwidth_Bps == 2e9


def test_boxes_by_relative_path_and_inline_generator(tmp_path):
    (tmp_path / "box.yaml").write_text(
        "gpus: [x, y]\nlinks: [{between: [x, y], bandwidth: 5GB/s}]\n")
    t = load_text("""
generator:
  kind: boxes
  box: box.yaml
  count: 3
  join: {kind: switch, nodes: [x], bandwidth: 1GB/s, switch: {copy: true}}
""", tmp_path, "top.yaml")
    assert t.ngpus == 6 and t.node("sw").can_copy
    t2 = load_text("""
generator:
  kind: boxes
  box: {kind: fully_connected, n: 2, bandwidth: 5GB/s}
  count: 2
  join: {kind: rails, nodes: [g0, g1], bandwidth: 1GB/s}
""", tmp_path, "top2.yaml")
    assert t2.switches == ("rail0", "rail1") and not t2.node("rail0").can_copy


def test_box_cycle_is_a_spec_error(tmp_path):
    (tmp_path / "a.yaml").write_text(
        "generator: {kind: boxes, box: a.yaml, count: 2, "
        "join: {kind: direct, nodes: [g0], bandwidth: 1GB/s}}\n")
    with pytest.raises(SpecError, match="cycle"):
        load_topology(str(tmp_path / "a.yaml"))


def test_bad_box_reference(tmp_path):
    with pytest.raises(SpecError, match=r"generator\.box: cannot load box 'nope.yaml'"):
        load_text("generator: {kind: boxes, box: nope.yaml, count: 2, "
                  "join: {kind: direct, nodes: [g0], bandwidth: 1GB/s}}\n", tmp_path)


def test_join_node_must_exist(tmp_path):
    with pytest.raises(SpecError, match="join node 'zz' is not a node"):
        load_text("generator: {kind: boxes, box: dgx1, count: 2, "
                  "join: {kind: direct, nodes: [zz], bandwidth: 1GB/s}}\n", tmp_path)


@pytest.mark.parametrize("text, fragment", [
    ("gpus: [a, b]\nlinks: [{between: [a, b, c], bandwidth: 1GB/s}]\n", "list of 2 node names"),
    ("gpus: [a, b]\nlinks: [{between: [a, a], bandwidth: 1GB/s}]\n", "to itself"),
    ("gpus: [a, b]\nlinks: [{between: [a, b], from: a, bandwidth: 1GB/s}]\n", "not both"),
    ("gpus: [a, b]\nlinks: [{bandwidth: 1GB/s}]\n", "missing key between"),
    ("gpus: [a, b]\nlinks: [{from: a, bandwidth: 1GB/s}]\n", "links[0].to: missing key"),
    ("gpus: [a]\n", "at least 2 GPUs"),
    ("gpus: [a, b]\nswitches: [{name: s, fred: {m: 1}}]\n", "m >= 2"),
    ("gpus: [a, b]\nswitches: [{name: s, copy: maybe}]\n", "expected true or false"),
    ("gpus: [a, {nam: b}]\n", "gpus[1].nam: unknown key"),
    ("gpus: [a, [b]]\n", "t.yaml:1: gpus[1].name: expected a node name"),
    ("gpus: [a, b]\ndefaults: {bandwidth: 1GB/s, color: red}\n", "defaults.color"),
    ("generator: {kind: ring, n: 1, bandwidth: 1GB/s}\n", "n >= 2"),
    ("generator: {kind: ring, n: 4}\n", "generator.bandwidth: missing key"),
    ("generator: {kind: fully_connected, n: 100000, bandwidth: 1GB/s}\n", "too many"),
    ("gpus: [a, b]\nlinks: [{between: [a, b], bandwidth: 1GB/s, count: 10000000000}]\n",
     "at most 1024 parallel links"),
])
def test_errors(tmp_path, text, fragment):
    with pytest.raises(SpecError) as exc:
        load_text(text, tmp_path)
    assert fragment in str(exc.value) and exc.value.exit_code == 2
    assert "\n" not in str(exc.value)


def test_shipped_files_must_state_source():
    data = parse_yaml("gpus: [a, b]\nlinks: [{between: [a, b], bandwidth: 1GB/s}]\n", "s.yaml")
    with pytest.raises(SpecError, match="source: missing key"):
        topology_from_data(data, "s.yaml", require_source=True)


def test_error_carries_file_key_line(tmp_path):
    with pytest.raises(SpecError) as exc:
        load_text("gpus: [a, b]\nlinks:\n  - between: [a, b]\n    bandwidth: fast\n", tmp_path)
    e = exc.value
    assert e.file.endswith("t.yaml") and e.key == "links[0].bandwidth" and e.line == 4
