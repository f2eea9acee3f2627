"""fastest_path: the direct link, the fastest path by 1/b + α, switches-only, none."""

from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.topology.routes import fastest_path


def _topo() -> Topology:
    nodes = [Node("a"), Node("b"), Node("c"), Node("s", NodeKind.SWITCH), Node("lone")]
    links = [Link("a", "b", 1e9), Link("b", "c", 1e9), Link("a", "s", 1e8), Link("s", "c", 1e8)]
    return Topology.build("t", nodes, links)


def test_direct_link_first_then_the_fastest_path():
    t = _topo()
    assert fastest_path(t, "a", "b") == ["a", "b"]
    assert fastest_path(t, "a", "c") == ["a", "b", "c"]  # 2 ns/B through b, 20 ns/B via s


def test_switches_only_and_no_path():
    t = _topo()
    assert fastest_path(t, "a", "c", via_gpus=False) == ["a", "s", "c"]
    assert fastest_path(t, "c", "a") is None
    assert fastest_path(t, "a", "lone") is None
