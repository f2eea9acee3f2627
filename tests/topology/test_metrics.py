from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.topology import generators as gen
from te_ccl.topology import metrics
from te_ccl.topology.model import Link, Node, NodeKind, Topology


def test_diameters():
    r = gen.ring(8, 1e9, 1e-6)
    assert metrics.diameter_hops(r) == 4
    assert metrics.diameter_latency_s(r) == pytest.approx(4e-6)
    t = Topology.build("mixed", [Node("a"), Node("b"), Node("c")],
                       [Link("a", "b", 1e9, 1e-6), Link("b", "a", 1e9, 1e-6),
                        Link("b", "c", 1e9, 5e-6), Link("c", "b", 1e9, 5e-6),
                        Link("a", "c", 1e9, 9e-6), Link("c", "a", 1e9, 9e-6)])
    assert metrics.diameter_hops(t) == 1
    assert metrics.diameter_latency_s(t) == pytest.approx(6e-6)  # a-b-c beats a-c


@pytest.mark.parametrize("topo, expected", [
    (gen.ring(8, 50e9), 100e9),
    (gen.ring(8, 50e9, bidirectional=False), 50e9),
    (gen.fully_connected(8, 25e9), 16 * 25e9),
    (gen.mesh([4, 4], 50e9), 4 * 50e9),
    (gen.torus([4, 4], 50e9), 8 * 50e9),
    (gen.star(6, 10e9), 30e9),
    (gen.fat_tree(4, 2, 1, 10e9, uplink_bandwidth_Bps=5e9), 10e9),
])
def test_bisection_exact(topo, expected):
    b = metrics.bisection_bandwidth(topo)
    assert b.exact and b.bandwidth_Bps == pytest.approx(expected)
    assert len(b.sending_side) in (topo.ngpus // 2, topo.ngpus - topo.ngpus // 2)


def test_bisection_approx_on_large_grid():
    b = metrics.bisection_bandwidth(gen.torus([8, 8], 50e9))
    assert not b.exact and b.bandwidth_Bps == pytest.approx(16 * 50e9)
    b = metrics.bisection_bandwidth(gen.mesh([5, 4], 1e9), exact_limit=0)
    assert not b.exact and b.bandwidth_Bps == pytest.approx(5e9)  # 2|2 columns, 5 rows


@st.composite
def small_topologies(draw):
    """Random connected topologies of 3-7 GPUs and 0-2 switches, random capacities."""
    ngpu, nsw = draw(st.integers(3, 7)), draw(st.integers(0, 2))
    names = [f"g{i}" for i in range(ngpu)] + [f"s{i}" for i in range(nsw)]
    bw = st.sampled_from([1e9, 2e9, 5e9])
    links = [Link(a, b, draw(bw)) for a, b in zip(names, names[1:] + names[:1], strict=True)]
    for a, b in itertools.permutations(names, 2):
        if draw(st.integers(0, 3)) == 0:
            links.append(Link(a, b, draw(bw)))
    nodes = [Node(n) for n in names[:ngpu]] + [Node(n, NodeKind.SWITCH) for n in names[ngpu:]]
    return Topology.build("rand", nodes, links)


@settings(max_examples=60, deadline=None)
@given(small_topologies())
def test_approx_is_an_upper_bound_and_switched_agrees(t):
    exact = metrics._exact(t)
    assert metrics._approx(t).bandwidth_Bps >= exact.bandwidth_Bps - 1e-3
    if t.switches and not any(t.node(k.src).is_gpu and t.node(k.dst).is_gpu for k in t.links):
        assert metrics._exact_switched(t).bandwidth_Bps == pytest.approx(exact.bandwidth_Bps)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4), st.integers(1, 3),
       st.sampled_from([1e9, 3e9]), st.sampled_from([0.5e9, 4e9]))
def test_switched_exact_matches_enumeration_on_fat_trees(leaves, per_leaf, spines, bw, up):
    t = gen.fat_tree(leaves, per_leaf, spines, bw, uplink_bandwidth_Bps=up)
    if t.ngpus < 2:
        return
    assert metrics._exact_switched(t).bandwidth_Bps == pytest.approx(
        metrics._exact(t).bandwidth_Bps)


def test_link_groups_and_summary():
    t = gen.star(3, 10e9, 1e-6)
    assert metrics.link_groups(t) == [("gpu-switch", 10e9, 1e-6, 3), ("switch-gpu", 10e9, 1e-6, 3)]
    s = metrics.summarize(t)
    assert (s.ngpus, s.nswitches, s.nlinks, s.diameter_hops) == (3, 1, 6, 2)


def test_large_topologies_are_estimated_within_a_budget_and_say_so():
    t = gen.torus([16, 16], 50e9)
    d = metrics.diameter(t, work=1)
    assert not d.exact and d.sources == 8 and d.hops == 16   # torus: every GPU sees 8+8
    assert metrics.diameter(t).exact
    from te_ccl.spec.topology import load_topology

    ft = load_topology("ndv2x4")   # switch and GPU-GPU links: max-flow cuts
    b = metrics.bisection_bandwidth(ft, exact_limit=0, flow_work=1)
    assert not b.exact and b.candidates == 1    # the contiguous halves only
    full = metrics.bisection_bandwidth(ft, exact_limit=0)
    assert full.candidates > b.candidates and full.bandwidth_Bps <= b.bandwidth_Bps
    s = metrics.summarize(t, exact_limit=0)
    assert any("upper bound" in n for n in s.notes())


def test_topo_show_notes_the_estimates(teccl, monkeypatch, tmp_path):
    import json

    monkeypatch.setattr(metrics, "DIAMETER_WORK", 1)
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ngenerator: {kind: torus, dims: [6, 6], bandwidth: 50GB/s}\n")
    code, out, _ = teccl("topo", "show", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and data["diameter_exact"] is False
    assert any("lower bound" in n for n in data["notes"])
    code, out, _ = teccl("topo", "show", str(path))
    assert "≥ 6 hops" in out and "lower bound" in out
