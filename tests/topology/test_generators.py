from __future__ import annotations

import pytest

from te_ccl.topology import generators as gen


def degree(t, node):
    return len(t.out_links(node))


def test_ring_uni_and_bi():
    bi, uni = gen.ring(5, 1e9), gen.ring(5, 1e9, bidirectional=False)
    assert len(bi.links) == 10 and len(uni.links) == 5
    assert uni.has_link("g4", "g0") and not uni.has_link("g0", "g4")


def test_fully_connected():
    t = gen.fully_connected(4, 2e9, 1e-6)
    assert all(degree(t, g) == 3 for g in t.gpus)


@pytest.mark.parametrize("dims", [[4], [3, 5], [2, 3, 4]])
def test_mesh_degrees(dims):
    t = gen.mesh(dims, 1e9)
    assert max(degree(t, g) for g in t.gpus) <= 2 * len(dims)
    assert degree(t, "g0") == sum(1 for d in dims if d > 1)
    assert t.meta["dims"] == dims


@pytest.mark.parametrize("dims", [[3, 3], [4, 5], [3, 3, 3]])
def test_torus_regular(dims):
    t = gen.torus(dims, 1e9)
    assert all(degree(t, g) == 2 * len(dims) for g in t.gpus)


def test_torus_row_major_wrap():
    t = gen.torus([4, 4], 1e9)
    assert t.has_link("g0", "g12") and t.has_link("g0", "g3") and not t.has_link("g0", "g5")


def test_star_and_fat_tree():
    s = gen.star(4, 10e9, switch=gen.SwitchCaps(reduce=True, fred_m=3))
    assert s.node("sw").can_reduce and s.node("sw").fred_ports == 4
    f = gen.fat_tree(3, 2, 2, 10e9)
    assert f.ngpus == 6 and len(f.switches) == 5
    assert f.link("leaf0", "spine0").bandwidth_Bps == 10e9  # 2 GPUs x 10 / 2 spines


def test_boxes_direct_switch_rails():
    box = gen.fully_connected(2, 10e9)
    direct = gen.boxes(box, 3, gen.Join("direct", ("g0",), 1e9))
    assert direct.has_link("b0.g0", "b2.g0") and not direct.has_link("b0.g1", "b1.g1")
    sw = gen.boxes(box, 3, gen.Join("switch", ("g0", "g1"), 1e9))
    assert len(sw.in_links("sw")) == 6 and not sw.node("sw").can_copy
    rails = gen.boxes(box, 2, gen.Join("rails", ("g0", "g1"), 1e9))
    assert rails.switches == ("rail0", "rail1")
    assert rails.has_link("b1.g1", "rail1") and not rails.has_link("b1.g1", "rail0")


def test_boxes_refresh_fred_ports():
    box = gen.star(4, 1e9, switch=gen.SwitchCaps(fred_m=3))
    t = gen.boxes(box, 2, gen.Join("switch", ("sw",), 1e9, switch=gen.SwitchCaps(fred_m=3)))
    assert t.node("b0.sw").fred_ports == 5 and t.node("sw").fred_ports == 2


def test_rail_optimized():
    t = gen.rail_optimized(2, 4, 100e9, 25e9)
    assert t.ngpus == 8 and t.switches == ("b0.sw", "b1.sw", "rail0", "rail1", "rail2", "rail3")


@pytest.mark.parametrize("call", [
    lambda: gen.ring(1, 1e9),
    lambda: gen.ring(4, 0.0),
    lambda: gen.ring(4, 1e9, -1e-6),
    lambda: gen.mesh([], 1e9),
    lambda: gen.mesh([2, 2, 2, 2], 1e9),
    lambda: gen.torus([2, 4], 1e9),
    lambda: gen.fully_connected(5000, 1e9),
    lambda: gen.boxes(gen.ring(3, 1e9), 1, gen.Join("direct", ("g0",), 1e9)),
    lambda: gen.boxes(gen.ring(3, 1e9), 2, gen.Join("bus", ("g0",), 1e9)),
    lambda: gen.boxes(gen.ring(3, 1e9), 2, gen.Join("direct", ("g9",), 1e9)),
])
def test_bad_parameters(call):
    with pytest.raises(ValueError):
        call()
