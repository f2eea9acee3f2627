"""The hierarchical AllReduce that sums and multicasts in box switches (NVLink SHARP, FRED)."""

from __future__ import annotations

import pytest

from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale import compile_scale
from te_ccl.backends.scale.hierarchical import box_fabric, rail_slots, solve_in_switch_allreduce
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import forward_only
from te_ccl.topology.generators import Join, SwitchCaps, boxes, star
from te_ccl.topology.model import Topology
from te_ccl.verify.schedule_check import check_schedule

PARAMS = SolveParams(time_limit_s=30, threads=1)


def _rails(nboxes: int, per_box: int, caps: SwitchCaps) -> Topology:
    """HGX-like: boxes of GPUs on a switch with ``caps``, GPU k of each box on rail k
    (no α: at the few MB a fast test compiles, the α of a cross-and-spread path would
    weigh more than the pipelining measured here)."""
    box = star(per_box, 450e9, switch=caps, name="box")
    return boxes(box, nboxes, Join("rails", tuple(f"g{i}" for i in range(per_box)), 50e9))


def _allreduce(topo: Topology, size: int) -> Collective:
    return Collective(CollectiveKind.ALLREDUCE, size, tuple(range(topo.ngpus)))


@pytest.mark.parametrize("caps, nboxes, size, within", [
    pytest.param(SwitchCaps(nvls=True), 2, 2 << 20, 1.15, id="nvls"),
    pytest.param(SwitchCaps(reduce=True, fred_m=1), 2, 2 << 20, 1.15, id="fred"),
    pytest.param(SwitchCaps(nvls=True), 3, 1 << 20, 2.0, id="nvls-3-boxes",
                 marks=pytest.mark.slow)])
def test_allreduce_sums_in_the_box_switches_near_the_bound(caps, nboxes, size, within):
    topo = _rails(nboxes, 4, caps)
    coll = _allreduce(topo, size)
    s = compile_scale(topo, coll, PARAMS)
    assert check_schedule(s) == []
    assert any(n.startswith("hierarchical in-switch") for n in s.info.notes)
    sums = {t.dst for t in s.transfers if t.op == "reduce" and not topo.node(t.dst).is_gpu}
    assert sums == set(box_fabric(topo).switches)  # every box adds, no rail switch does
    moved = s.collective.chunk_bytes * s.collective.nchunks
    bound = lower_bound(topo, _allreduce(topo, moved)).seconds
    assert bound * (1 - 1e-9) <= s.finish_time_s <= within * bound


def test_only_where_the_output_drives_the_switch():
    """MSCCL XML cannot drive NVLink SHARP: the compile hands this method a forwarding
    topology, on which it steps aside; an MSCCL++ plan keeps the switch's sums."""
    topo = _rails(2, 4, SwitchCaps(nvls=True))
    coll = _allreduce(topo, 1 << 20)
    assert solve_in_switch_allreduce(forward_only(topo, "xml"), coll, 1e-6) is None
    assert solve_in_switch_allreduce(forward_only(topo, "mscclpp"), coll, 1e-6) is not None


def test_other_fabrics_and_kinds_step_aside():
    topo = _rails(2, 4, SwitchCaps(nvls=True))
    ag = Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(topo.ngpus)))
    assert solve_in_switch_allreduce(topo, ag, 1e-6) is None
    some = Collective(CollectiveKind.ALLREDUCE, 1 << 20, (0, 1, 2))
    assert solve_in_switch_allreduce(topo, some, 1e-6) is None
    nics = boxes(star(4, 450e9, switch=SwitchCaps(nvls=True), name="box"), 2,
                 Join("direct", ("g0", "g2"), 50e9))
    assert not rail_slots(box_fabric(nics))  # two NICs of four: not slot to slot
    assert solve_in_switch_allreduce(nics, _allreduce(nics, 1 << 20), 1e-6) is None
