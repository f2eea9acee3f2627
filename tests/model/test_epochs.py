"""Link timings follow the te_ccl.schedule docstring; the problem builder sets node roles."""

from __future__ import annotations

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import SpecError
from te_ccl.model import build_problem, epoch_duration, link_timing
from te_ccl.model.horizon import horizon_lower_bound
from te_ccl.topology import Link, Node, NodeKind, Topology


@pytest.mark.parametrize("bw, alpha, tau, expect", [
    (1e9, 0.0, 1e-6, (1, 1, 1)),        # exactly one chunk per epoch
    (2e9, 0.0, 1e-6, (1, 2, 1)),        # two starts per epoch
    (0.25e9, 0.0, 1e-6, (4, 1, 4)),     # four epochs per chunk
    (1e9, 2.5e-6, 1e-6, (1, 1, 4)),     # α delays the arrival, not the link
    (3e9, 0.0, 1e-6, (1, 3, 1)),
])
def test_link_timing(bw, alpha, tau, expect):
    lt = link_timing(Link("a", "b", bw, alpha), 1000, tau)
    assert (lt.occupancy, lt.capacity, lt.delay) == expect


def test_fastest_epoch_gives_one_epoch_on_the_fastest_link():
    link = Link("a", "b", 50e9, 0.7e-6)
    tau = link.transfer_time_s(1 << 20)
    lt = link_timing(link, 1 << 20, tau)
    assert (lt.occupancy, lt.capacity, lt.delay) == (1, 1, 1)


def test_epoch_policies():
    t = Topology.build("p", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 4e9)])
    assert epoch_duration(t, 4000) == pytest.approx(1e-6)
    assert epoch_duration(t, 4000, "slowest") == pytest.approx(4e-6)
    assert epoch_duration(t, 4000, 2e-6) == 2e-6
    with pytest.raises(SpecError, match="epoch"):
        epoch_duration(t, 4000, "median")


def test_node_roles_and_buffer_limits():
    nodes = [Node("g0", buffer_bytes=3000), Node("g1"),
             Node("s", NodeKind.SWITCH, can_copy=False, has_buffer=True),
             Node("r", NodeKind.SWITCH, can_copy=True, can_reduce=False)]
    links = [Link(a, b, 1e9) for a, b in [("g0", "s"), ("s", "g1"), ("g1", "r"), ("r", "g0")]]
    t = Topology.build("t", nodes, links)
    p = build_problem(t, Collective(CollectiveKind.ALLGATHER, 2000, (0, 1)))
    assert p.copy_nodes == {"g0", "g1", "r"}
    assert p.buffered_nodes == {"g0", "g1", "s"}
    assert p.relay_limit == {"g0": 3}


def test_horizon_lower_bound_counts_in_links():
    # a GPU with one incoming link of one chunk per epoch needs 5 epochs for 5 chunks
    t = Topology.build("p", [Node("a"), Node("b")], [Link("a", "b", 1e9), Link("b", "a", 1e9)])
    p = build_problem(t, Collective(CollectiveKind.ALLGATHER, 10_000, (0, 1), chunks_per_rank=5))
    assert horizon_lower_bound(p) == 5


def test_the_fastest_policys_spread_cap_never_binds_on_a_shipped_topology():
    from te_ccl.model.epochs import MAX_SPREAD
    from te_ccl.spec.topology import load_topology, shipped_topologies

    for name in shipped_topologies():
        links = load_topology(name).links
        for chunk in (1, 10**3, 10**6, 10**9):
            times = [k.transfer_time_s(chunk) for k in links]
            assert max(times) / min(times) < MAX_SPREAD, (name, chunk)


@pytest.mark.parametrize("template", ["in-switch", "ring", "hierarchical"])
@pytest.mark.parametrize("size", [8 * 512, 8 << 20])
def test_templates_place_chunks_by_the_models_link_rules(template, size):
    # Small chunks on FRED's NPU links: many fit an epoch but, behind the wire's α, only
    # one arrives within it, so one may start per epoch (the in-switch schedule started
    # eight). Every template's hop takes the model's delay, and no link starts more than
    # its capacity in any ``occupancy`` consecutive epochs.
    from collections import Counter

    from te_ccl.baselines import build_baseline
    from te_ccl.fred.in_switch import in_switch_schedule
    from te_ccl.topology import generators as gen

    topo = gen.fred("fred-b", 8)
    coll = Collective(CollectiveKind.ALLREDUCE, size, tuple(range(8)))
    s = (in_switch_schedule(topo, coll) if template == "in-switch"
         else build_baseline(template, topo, coll))
    starts = Counter((t.src, t.dst, t.start_epoch) for t in s.transfers)
    for (src, dst, e) in starts:
        lt = link_timing(topo.link(src, dst), s.chunk_bytes, s.epoch_s)
        assert sum(starts[(src, dst, e + i)] for i in range(lt.occupancy)) <= lt.capacity
    for t in s.transfers:
        lt = link_timing(topo.link(t.src, t.dst), s.chunk_bytes, s.epoch_s)
        assert t.arrive_epoch - t.start_epoch == lt.delay
    if template == "in-switch" and size < 1 << 20:
        assert max(starts.values()) == 1
