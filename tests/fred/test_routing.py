"""Routing by conflict-graph colouring: modes, odd cycles, port use, phase splits."""

from __future__ import annotations

import random

import pytest

from te_ccl.errors import SpecError
from te_ccl.fred.routing import Flow, RoutingConflict, _colourings, route, route_phases
from te_ccl.fred.switch import build_fred

# A triangle in the conflict graph: A and B share in1, B and C share in2, C and A in0.
ODD_CYCLE = [Flow("A", (1, 2), (0,)), Flow("B", (3, 4), (2,)), Flow("C", (5, 0), (4,))]


def test_allreduce_reduces_in_input_stage_and_broadcasts_in_output_stage():
    r = route(build_fred(8, 3, "s"), [Flow("ar", tuple(range(8)), tuple(range(8)))])
    modes = {s.element.path: s.mode for s in r.elements}
    assert all(modes[f"s/in{i}"] == "reduce" for i in range(4))
    assert all(modes[f"s/out{i}"] == "broadcast" for i in range(4))
    assert "reduce-broadcast" in modes.values()
    assert len(r.colours["ar"]) == 2  # one middle per non-base level


def test_odd_cycle_conflicts_with_m2_and_routes_with_m3():
    with pytest.raises(RoutingConflict) as exc:
        route(build_fred(6, 2, "x"), ODD_CYCLE)
    assert exc.value.path == "x" and set(exc.value.flows) == {"A", "B", "C"}
    split = route_phases(build_fred(6, 2, "x"), ODD_CYCLE)
    assert len(split.phases) == 2 and "split into 2 phases" in split.conflicts[0]
    assert sorted(f.id for r in split.phases for f in r.flows) == ["A", "B", "C"]
    r = route(build_fred(6, 3, "x"), ODD_CYCLE)
    assert sorted(c[0] for c in r.colours.values()) == [0, 1, 2]


def test_flows_sharing_a_microswitch_get_different_colours():
    r = route(build_fred(6, 3, "x"), ODD_CYCLE)
    for s in r.elements:
        colours = [u.colour for u in s.uses if u.colour is not None]
        assert len(colours) == len(set(colours))


@pytest.mark.parametrize("p", [4, 5, 8, 11, 16, 20])
@pytest.mark.parametrize("m", [2, 3])
def test_any_permutation_of_unicasts_routes(p, m):
    rng = random.Random(p * 10 + m)
    for _ in range(5):
        dst = list(range(p))
        rng.shuffle(dst)
        r = route(build_fred(p, m), [Flow(f"u{i}", (i,), (dst[i],)) for i in range(p)])
        assert len(r.flows) == p


def test_each_port_at_most_one_input_and_one_output():
    sw = build_fred(4, 3)
    with pytest.raises(SpecError, match="port 1 is the input"):
        route(sw, [Flow("a", (0, 1), (0,)), Flow("b", (1,), (2,))])
    with pytest.raises(SpecError, match="output"):
        route(sw, [Flow("a", (0,), (3,)), Flow("b", (1,), (3,))])
    with pytest.raises(SpecError, match="outside"):
        route(sw, [Flow("a", (0,), (4,))])
    with pytest.raises(SpecError, match="used twice"):
        route(sw, [Flow("a", (0,), (1,)), Flow("a", (2,), (3,))])
    # a port may be one flow's input and another flow's output
    route(sw, [Flow("a", (0,), (1,)), Flow("b", (1,), (0,))])


def test_odd_port_goes_through_demux_and_mux():
    r = route(build_fred(5, 3, "s"), [Flow("io", (4,), (0, 1, 2, 3))])
    kinds = {s.element.kind.value: s.mode for s in r.elements}
    assert kinds["DEMUX"] == "forward" and kinds["D"] == "broadcast"


def test_phases_of_one_port_pattern_are_the_same_under_any_flow_ids():
    sw = build_fred(6, 2, "x")
    renamed = [Flow(f"{f.id.lower()}!", f.inputs, f.outputs) for f in ODD_CYCLE]
    first, again = route_phases(sw, ODD_CYCLE), route_phases(sw, renamed)
    name = {f.id: g.id for f, g in zip(ODD_CYCLE, renamed, strict=True)}
    assert len(again.phases) == len(first.phases) == 2
    for a, b in zip(first.phases, again.phases, strict=True):
        assert [name[f.id] for f in a.flows] == [f.id for f in b.flows]
        assert {name[k]: v for k, v in a.colours.items()} == b.colours
        assert [(e.element, e.mode, [(name[u.flow], u.input_sel, u.output_sel, u.colour)
                                     for u in e.uses]) for e in a.elements] == \
               [(e.element, e.mode, [(u.flow, u.input_sel, u.output_sel, u.colour)
                                     for u in e.uses]) for e in b.elements]
    assert all(i in again.conflicts[0] for i in ("a!", "b!", "c!"))
    assert "A" not in again.conflicts[0].split(":")[1]


def test_a_phase_of_thousands_of_flows_is_coloured():
    """The L2 of a 256-NPU FRED-D, FRED_3(1024), can carry over a thousand flows in a phase,
    more than Python's recursion limit: the colouring backtracks with its own stack. A path
    of 5000 conflicting flows takes two middles, alternating."""
    path = [{i - 1, i + 1} & set(range(5000)) for i in range(5000)]
    colours = next(_colourings(path, 3))
    assert all(colours[i] != colours[i + 1] for i in range(4999)) and set(colours) == {0, 1}
