"""Every shipped topology loads, is connected, and has the numbers its source states."""

from __future__ import annotations

import networkx as nx
import pytest

from te_ccl.spec.topology import load_topology, shipped_topologies
from te_ccl.topology.metrics import bisection_bandwidth

GB = 1e9


def out_bw(t, node):
    return sum(k.bandwidth_Bps for k in t.out_links(node))


def in_bw(t, node):
    return sum(k.bandwidth_Bps for k in t.in_links(node))


@pytest.mark.parametrize("name", shipped_topologies())
def test_loads_connected_with_source(name):
    t = load_topology(name)
    assert t.name == name and t.source and t.description
    g = t.graph()
    scc = next(c for c in nx.strongly_connected_components(g) if t.gpus[0] in c)
    assert set(t.gpus) <= scc
    assert all(k.bandwidth_Bps > 0 and k.latency_s >= 0 for k in t.links)


def test_dgx1_hybrid_cube_mesh():
    t = load_topology("dgx1")
    assert t.ngpus == 8 and not t.switches
    for g in t.gpus:  # 6 NVLinks x 25 GB/s each way
        assert out_bw(t, g) == pytest.approx(150 * GB) and in_bw(t, g) == pytest.approx(150 * GB)
    doubles = {frozenset(k.key) for k in t.links if k.bandwidth_Bps == 50 * GB}
    assert doubles == {frozenset(p) for p in [("g0", "g3"), ("g0", "g4"), ("g1", "g2"),
                                              ("g1", "g5"), ("g2", "g3"), ("g4", "g7"),
                                              ("g5", "g6"), ("g6", "g7")]}
    assert {k.bandwidth_Bps for k in t.links} == {25 * GB, 50 * GB}
    assert all(k.latency_s == pytest.approx(0.7e-6) for k in t.links)
    assert len(t.links) == 2 * 16  # 16 connected pairs, 24 NVLinks in all


def _inter_box(t):
    return [k for k in t.links if k.src.split(".")[0] != k.dst.split(".")[0]]


def test_ndv2x2_one_ib_link_each_way():
    t = load_topology("ndv2x2")
    assert t.ngpus == 16
    ib = _inter_box(t)
    assert sorted(k.key for k in ib) == [("b0.g0", "b1.g0"), ("b1.g0", "b0.g0")]
    assert all(k.bandwidth_Bps == 12.5 * GB and k.latency_s == pytest.approx(1.3e-6) for k in ib)
    b = bisection_bandwidth(t)
    assert b.exact and b.bandwidth_Bps == pytest.approx(12.5 * GB)


def test_ndv2x4_switch_uplinks():
    t = load_topology("ndv2x4")
    assert t.ngpus == 32 and t.switches == ("sw",)
    sw = t.node("sw")
    assert not sw.can_copy and not sw.has_buffer and not sw.can_reduce
    assert sorted(k.src for k in t.in_links("sw")) == [f"b{i}.g0" for i in range(4)]
    assert {k.bandwidth_Bps for k in t.in_links("sw") + t.out_links("sw")} == {12.5 * GB}
    assert len(t.out_links("sw")) == 4


def test_dgx2_and_dgx2x2():
    t = load_topology("dgx2")
    assert t.ngpus == 16 and t.switches == ("sw",)
    assert all(out_bw(t, g) == 150 * GB for g in t.gpus)
    t2 = load_topology("dgx2x2")
    assert t2.ngpus == 32
    ib = _inter_box(t2)
    assert len(ib) == 16 and {k.bandwidth_Bps for k in ib} == {12.5 * GB}  # 8 x 100 Gb/s


def test_mi250():
    t = load_topology("mi250")
    assert t.ngpus == 16
    for g in t.gpus:  # 4 links to the sibling GCD + 3 external, 50 GB/s each
        assert out_bw(t, g) == pytest.approx(350 * GB)
    assert t.link("gcd0", "gcd1").bandwidth_Bps == 200 * GB


@pytest.mark.parametrize("name, gpus, links", [
    ("ring8", 8, 16), ("fc8", 8, 56), ("mesh4x4", 16, 48), ("torus4x4", 16, 64),
    ("mesh8x8", 64, 224), ("torus8x8", 64, 256), ("mesh16x16", 256, 960),
    ("torus16x16", 256, 1024), ("mesh32x32", 1024, 3968), ("torus32x32", 1024, 4096),
    ("torus8x8x8", 512, 3072), ("wafer-mesh5x4", 20, 62),
])
def test_direct_connect_sizes(name, gpus, links):
    t = load_topology(name)
    assert (t.ngpus, len(t.links), len(t.switches)) == (gpus, links, 0)


def test_tacos_link_numbers():
    for name in ("mesh4x4", "torus8x8", "torus8x8x8"):
        t = load_topology(name)
        assert {(k.bandwidth_Bps, k.latency_s) for k in t.links} == {(50 * GB, 0.5e-6)}


def test_rail8x8():
    t = load_topology("rail8x8")
    assert t.ngpus == 64 and len(t.switches) == 16
    for b in range(8):
        for k in range(8):
            g = f"b{b}.g{k}"
            assert t.link(g, f"rail{k}").bandwidth_Bps == 50 * GB  # 400 Gb/s NIC
            assert t.link(g, f"b{b}.sw").bandwidth_Bps == 450 * GB
    assert all(len(t.in_links(f"rail{k}")) == 8 for k in range(8))


@pytest.mark.parametrize("variant, up, collectives", [
    ("a", 1.5e12, False), ("b", 1.5e12, True), ("c", 12e12, False), ("d", 12e12, True)])
def test_fred(variant, up, collectives):
    t = load_topology(f"fred-{variant}")
    assert t.ngpus == 20 and len(t.switches) == 6
    for n in t.nodes:
        if not n.is_gpu:
            assert (n.can_copy, n.can_reduce, n.fred_m, n.fred_ports) == (
                collectives, collectives, 3, 5)
    for g in t.gpus:
        assert out_bw(t, g) == 3e12 and in_bw(t, g) == 3e12
    for j in range(5):
        assert t.link(f"L1.{j}", "L2").bandwidth_Bps == up == t.link("L2", f"L1.{j}").bandwidth_Bps
        assert len(t.in_links(f"L1.{j}")) == 5


def test_wafer_bisection_matches_paper():
    # paper: 3.75 TB/s for the 5x4 mesh; FRED-C/D 30 TB/s (exact over whole-NPU splits)
    assert bisection_bandwidth(load_topology("wafer-mesh5x4")).bandwidth_Bps == pytest.approx(3.75e12)
    assert bisection_bandwidth(load_topology("fred-c")).bandwidth_Bps == pytest.approx(30e12)
    # FRED-A: the paper's 3.75 TB/s splits an L1 fractionally; whole NPUs give 9 TB/s
    assert bisection_bandwidth(load_topology("fred-a")).bandwidth_Bps == pytest.approx(9e12)
