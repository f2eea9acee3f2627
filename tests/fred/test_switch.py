"""FRED_m(P): recursive structure, element kinds and paths, drawing."""

from __future__ import annotations

import pytest

from te_ccl.errors import SpecError
from te_ccl.fred.draw import layout
from te_ccl.fred.switch import ElementKind, Stage, build_fred


def _expected_elements(p: int, m: int) -> int:
    if p == 2:
        return 1
    r = p // 2
    if p % 2:
        return 2 * r + 2 + m * _expected_elements(r + 1, m)
    return 2 * r + m * _expected_elements(r, m)


@pytest.mark.parametrize("p", range(2, 26))
@pytest.mark.parametrize("m", [2, 3, 4])
def test_element_count_follows_the_recursion(p, m):
    sw = build_fred(p, m)
    assert sw.element_count == _expected_elements(p, m)
    paths = [e.path for e in sw.elements()]
    assert len(paths) == len(set(paths))


def test_even_and_odd_rules():
    even = build_fred(8, 3, "L1.2")
    assert [mid.ports for mid in even.middles] == [4, 4, 4]
    assert even.demux is None and even.mux is None
    odd = build_fred(7, 3, "s")
    assert [mid.ports for mid in odd.middles] == [4, 4, 4]
    assert odd.demux.kind is ElementKind.DEMUX and odd.mux.kind is ElementKind.MUX
    three = build_fred(3, 3)
    assert three.r == 1 and [mid.ports for mid in three.middles] == [2, 2, 2]
    assert all(mid.base.kind is ElementKind.RD for mid in three.middles)


def test_kinds_sit_in_their_stages_and_paths_name_the_recursion():
    sw = build_fred(8, 3, "L1.2")
    by_path = {e.path: e for e in sw.elements()}
    assert by_path["L1.2/mid1/in0"].kind is ElementKind.R
    assert by_path["L1.2/mid1/in0"].level == 1
    assert by_path["L1.2/out3"].kind is ElementKind.D
    assert by_path["L1.2/mid2/mid0/base"].stage is Stage.BASE
    for e in sw.elements():
        expected = {Stage.INPUT: ElementKind.R, Stage.OUTPUT: ElementKind.D,
                    Stage.BASE: ElementKind.RD}.get(e.stage)
        if expected:
            assert e.kind is expected


def test_port_to_element():
    sw = build_fred(7, 3)
    assert [sw.element_of_port(p) for p in range(7)] == [0, 0, 1, 1, 2, 2, 3]
    with pytest.raises(SpecError):
        sw.element_of_port(7)


@pytest.mark.parametrize("ports,m", [(1, 3), (0, 3), (4, 1)])
def test_bad_sizes(ports, m):
    with pytest.raises(SpecError):
        build_fred(ports, m)


def test_to_dict_and_layout_cover_every_element():
    sw = build_fred(9, 3, "x")
    d = sw.to_dict()
    assert d["ports"] == 9 and len(d["middles"]) == 3 and "demux" in d
    pos, wires = layout(sw)
    assert set(pos) == {e.path for e in sw.elements()}
    assert all(a in pos and b in pos for a, b in wires)
    # every input element wires to each middle once per port it carries
    assert sum(1 for a, _ in wires if a == "x/in0") == 3
