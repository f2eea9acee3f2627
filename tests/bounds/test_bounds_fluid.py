"""Every bandwidth argument of the lower bound against the fluid optimum over tree
schedules (tests/bounds/fluid.py, brute force and GLOP): none may exceed it, and where
copies and sums are of no use (AlltoAll, Gather, Scatter) the bound is that optimum."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.topology.generators import mesh, ring
from tests.bounds.fluid import fluid_optimum
from tests.bounds.strategies import collectives, fabrics

KINDS = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
         "scatter", "alltoall"]
EXACT = {"alltoall", "gather", "scatter"}


def bandwidth_parts(topology: Topology, collective: Collective) -> dict[str, float]:
    """Each part's bandwidth term: the fluid optimum has no latency (``Bound.fixed``)."""
    b = lower_bound(topology, collective)
    return {k: v - b.fixed.get(k, 0.0) for k, v in b.parts.items() if k != "alpha_s"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(), st.data())
def test_no_argument_exceeds_the_fluid_optimum(topo, data):
    c = data.draw(collectives(topo, KINDS))
    fluid = fluid_optimum(topo, c)
    parts = bandwidth_parts(topo, c)
    for name, value in parts.items():
        assert value <= fluid * (1 + 1e-6), (name, value, fluid)
    if c.kind.value in EXACT:
        assert max(parts.values()) == pytest.approx(fluid, rel=1e-6)


def test_the_line_of_three_allreduce_bound_is_its_optimum():
    """Sum at the middle GPU and copy back: each end sends and receives M once."""
    c = Collective(CollectiveKind.ALLREDUCE, 3_000_000, (0, 1, 2))
    line = mesh([3], 1e9)
    assert fluid_optimum(line, c) == pytest.approx(3e-3)
    assert lower_bound(line, c).seconds == pytest.approx(3e-3)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_the_ring_allreduce_bound_is_its_optimum(n):
    """Gossip over single GPUs: 2(N−1)·M bytes over the 2N links, RS + AG's value."""
    c = Collective(CollectiveKind.ALLREDUCE, n * 1_000_000, tuple(range(n)))
    bound = lower_bound(ring(n, 1e9), c)
    assert bound.argument == "gossip_s"
    assert bound.seconds == pytest.approx((n - 1) * n * 1e6 / (n * 1e9))
    assert bound.seconds == pytest.approx(fluid_optimum(ring(n, 1e9), c))


def boxes(reduce: bool) -> Topology:
    """Two pairs of GPUs, each pair on a fast switch, the switches joined by a slow link."""
    nodes = [Node(f"g{i}") for i in range(4)] + [
        Node(s, NodeKind.SWITCH, can_copy=False, can_reduce=reduce) for s in ("a", "b")]
    links = [Link("a", "b", 1e9), Link("b", "a", 1e9)] + [
        x for i in range(4) for x in (Link(f"g{i}", "ab"[i // 2], 4e9),
                                      Link("ab"[i // 2], f"g{i}", 4e9))]
    return Topology.build("boxes", nodes, links)


def test_gossip_between_boxes_when_the_switches_only_forward():
    """The boxes as two groups: every element crosses the slow link each way (the cut) —
    and with forwarding switches that is also the gossip count between the boxes, 2·M over
    the 2 links into them. The fluid optimum agrees."""
    c = Collective(CollectiveKind.ALLREDUCE, 4_000_000, (0, 1, 2, 3))
    for reduce in (False, True):
        bound = lower_bound(boxes(reduce), c)
        assert bound.seconds == pytest.approx(4e-3)
        assert bound.seconds == pytest.approx(fluid_optimum(boxes(reduce), c))
