"""The scale backend's hierarchical method on small box fabrics: checked, simulated, near the bound."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale import compile_scale, scale_method, scale_plan
from te_ccl.backends.scale.hierarchical import Port, box_fabric
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.schedule import Schedule
from te_ccl.simulate import simulate_schedule
from te_ccl.topology.generators import Join, SwitchCaps, boxes, mesh, rail_optimized, star
from te_ccl.topology.model import Topology
from te_ccl.verify.schedule_check import check_schedule

K = CollectiveKind
PARAMS = SolveParams(time_limit_s=30, threads=1)
KINDS = [K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE]


def _all(topo: Topology, kind: CollectiveKind, size: int) -> Collective:
    return Collective(kind, size, tuple(range(topo.ngpus)))


def _direct(nboxes: int, per_box: int, nics: tuple[str, ...], copy: bool = True) -> Topology:
    """dgx2x2-like: boxes on a switch, some GPUs cabled straight to their twin in each other box."""
    box = star(per_box, 150e9, 0.7e-6, switch=SwitchCaps(copy=copy), name="box")
    return boxes(box, nboxes, Join("direct", nics, 12.5e9, 1.3e-6))


def _compiled(topo: Topology, coll: Collective) -> Schedule:
    s = compile_scale(topo, coll, PARAMS)
    assert check_schedule(s) == []
    assert any(n.startswith(("hierarchical", "reduce-scatter: hierarchical")) for n in s.info.notes)
    assert s.info.status.startswith("scale/hierarchical")
    moved = s.collective.chunk_bytes * s.collective.nchunks  # sub-chunks round the size down
    assert s.finish_time_s >= lower_bound(topo, _all(topo, coll.kind, moved)).seconds * (1 - 1e-9)
    return s


def test_fabric_of_a_rail_cluster():
    f = box_fabric(rail_optimized(2, 3, 450e9, 50e9))
    assert f.boxes == (("b0.g0", "b0.g1", "b0.g2"), ("b1.g0", "b1.g1", "b1.g2"))
    assert f.ports[(1, 0)] == tuple(Port(f"b1.g{i}", f"rail{i}", f"b0.g{i}") for i in range(3))


def test_fabric_of_direct_links_and_refusals():
    f = box_fabric(_direct(2, 4, ("g0", "g2")))
    assert f.ports[(0, 1)] == (Port("b0.g0", None, "b1.g0"), Port("b0.g2", None, "b1.g2"))
    assert box_fabric(star(4, 50e9)) is None  # one box: no metadata, nothing to join
    assert box_fabric(mesh([4, 4], 50e9)) is None


def test_scale_method_registers_the_hierarchy():
    topo = rail_optimized(3, 2, 450e9, 50e9)
    for kind in KINDS:
        assert scale_method(topo, _all(topo, kind, 1 << 20)) == "hierarchical"
    assert scale_method(topo, _all(topo, K.ALLTOALL, 1 << 20)) == "rail-alltoall"
    assert scale_method(topo, Collective(K.BROADCAST, 1 << 20, tuple(range(6)), root=0)) is None
    assert scale_method(topo, Collective(K.ALLGATHER, 1 << 20, (0, 1, 2))) is None


@pytest.mark.parametrize("kind", KINDS)
def test_rail_cluster_near_the_cut_bound(kind):
    topo = rail_optimized(3, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = _all(topo, kind, 1 << 28)
    s = _compiled(topo, coll)
    bound = lower_bound(topo, coll).seconds
    assert s.finish_time_s <= 1.03 * bound
    sim = simulate_schedule(s).finish_time_s
    assert 0.97 * s.finish_time_s <= sim <= s.finish_time_s * (1 + 1e-9)


@pytest.mark.parametrize("kind", [K.ALLGATHER, K.ALLREDUCE])
def test_boxes_on_one_network_switch_near_the_cut_bound(kind):
    """aws-p4d/p5-like: every GPU's NIC on one switch, so each exit has a port to every
    GPU of the other box; the exits must not all queue on the same entry link."""
    box = star(4, 300e9, 0.7e-6, switch=SwitchCaps(copy=True, reduce=False), name="box")
    topo = boxes(box, 2, Join("switch", ("g0", "g1", "g2", "g3"), 6.25e9, 1.3e-6))
    coll = _all(topo, kind, 1 << 28)
    s = _compiled(topo, coll)
    assert s.finish_time_s <= 1.03 * lower_bound(topo, coll).seconds


def test_small_sizes_are_not_subchunked_and_meet_the_alpha_bound():
    topo = rail_optimized(3, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = _all(topo, K.ALLGATHER, 1200)
    assert scale_plan(topo, coll)[2] == 1
    s = _compiled(topo, coll)
    alpha = lower_bound(topo, coll).parts["alpha_s"]  # 2 NIC hops + 2 NVSwitch hops
    assert alpha == pytest.approx(4.0e-6)
    assert s.finish_time_s <= 1.01 * alpha


@pytest.mark.parametrize("kind", KINDS)
def test_direct_links_relay_through_the_nic_gpus(kind):
    topo = _direct(2, 4, ("g0", "g2"))
    coll = _all(topo, kind, 1 << 26)
    s = _compiled(topo, coll)
    assert s.finish_time_s <= 1.05 * lower_bound(topo, coll).seconds
    if kind is K.ALLGATHER:  # the odd GPUs' chunks leave through the even GPUs' links
        assert any(t.src == "b0.g0" and t.dst == "b1.g0" and t.chunk // s.collective
                   .chunks_per_rank == 1 for t in s.transfers)


def test_box_switch_that_cannot_copy_gets_unicasts():
    topo = _direct(2, 3, ("g0",), copy=False)
    s = _compiled(topo, _all(topo, K.ALLGATHER, 1 << 16))
    assert any("unicast" in n for n in s.info.notes)
    into_switch = {(t.chunk, t.start_epoch) for t in s.transfers if t.dst.endswith(".sw")}
    assert len(into_switch) == sum(t.dst.endswith(".sw") for t in s.transfers)


@st.composite
def fabrics(draw) -> Topology:
    nboxes, per_box = draw(st.integers(2, 3)), draw(st.integers(2, 4))
    fast = draw(st.sampled_from([100e9, 450e9]))
    nic = draw(st.sampled_from([12.5e9, 50e9, 100e9]))
    alpha = draw(st.sampled_from([0.0, 0.7e-6]))
    if draw(st.booleans()):
        return rail_optimized(nboxes, per_box, fast, nic, alpha, 2 * alpha)
    names = [f"g{i}" for i in range(per_box)]
    nics = draw(st.lists(st.sampled_from(names), min_size=1, max_size=per_box, unique=True))
    box = star(per_box, fast, alpha, switch=SwitchCaps(copy=draw(st.booleans())), name="box")
    join = draw(st.sampled_from(["direct", "switch"]))  # cabled twins, or one network switch
    return boxes(box, nboxes, Join(join, tuple(sorted(nics)), nic, alpha))


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=fabrics(), kind=st.sampled_from(KINDS),
       size=st.sampled_from([1000, 1 << 16, 1 << 22]))
def test_random_box_fabrics_pass_the_checker(topo, kind, size):
    coll = _all(topo, kind, size)
    assert scale_method(topo, coll) == "hierarchical"
    _compiled(topo, coll)


def test_subchunks_keep_the_msccl_reader_within_its_limit():
    from te_ccl.backends.scale.hierarchical import hierarchical_subchunks
    from te_ccl.backends.scale.msccl_budget import XML_SHARE
    from te_ccl.runtime_limits import MSCCL

    topo = rail_optimized(8, 8, 450e9, 50e9, 0.7e-6, 1.3e-6)
    for kind, phases in ((K.ALLGATHER, 1), (K.ALLREDUCE, 2)):
        k = hierarchical_subchunks(topo, _all(topo, kind, 10**9), 10**6)
        assert 10 <= k and 2 * 63 * k * phases <= XML_SHARE * MSCCL.max_elements
    dgx = _direct(2, 16, tuple(f"g{i}" for i in range(0, 16, 2)))
    k = hierarchical_subchunks(dgx, _all(dgx, K.ALLGATHER, 10**9), 10**6)
    # a NIC GPU receives 31 and roots 3 chunks per rank: 31 + 3·15 + 2 steps each
    assert (31 + 3 * 15 + 2) * k <= XML_SHARE * MSCCL.max_elements
