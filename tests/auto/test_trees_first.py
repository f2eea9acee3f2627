"""auto races the packed trees before the scale backend's reduce-scatter + all-gather
where that composition cannot reach the AllReduce bound (meshes, lines), after it elsewhere;
and a Broadcast's or Reduce's pipelined trees before it beyond TEMPLATE_MAX_GPUS."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import te_ccl.baselines
import te_ccl.compiler.portfolio as portfolio
from te_ccl.baselines import BaselineError
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.compiler import SolveParams, solve
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate import simulate_schedule
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import generators as gen
from te_ccl.verify.msccl.reader import read_msccl
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule
from tests.bounds.strategies import collectives, fabrics

MESH = gen.mesh([3, 3], 50e9, 1e-6)
RING = gen.ring(6, 50e9, 1e-6)


@pytest.mark.parametrize(("topology", "kind", "short"), [
    (MESH, K.ALLREDUCE, True), (gen.mesh([4], 50e9, 1e-6), K.ALLREDUCE, True),
    (RING, K.ALLREDUCE, False), (MESH, K.ALLGATHER, False)], ids=["mesh", "line", "ring", "ag"])
def test_composition_short_where_rs_plus_ag_exceeds_the_allreduce_bound(topology, kind, short):
    coll = Collective(kind, 64_000_000, tuple(range(topology.ngpus)))
    assert portfolio._composition_short(topology, coll) is short


@pytest.mark.parametrize(("topology", "first"), [(MESH, True), (RING, False)],
                         ids=["mesh", "ring"])
def test_packed_trees_race_before_the_scale_backend_on_a_mesh(spied, topology, first):
    calls = spied(give_up=("auto",))  # the flow model's time does not enter the order
    coll = Collective(K.ALLREDUCE, 64_000_000, tuple(range(topology.ngpus)))
    solve(topology, coll, SolveParams(time_limit_s=600, threads=1))
    assert "scale" in calls and "packed" in calls
    assert (calls.index("packed") < calls.index("scale")) is first
    if first:  # the finer trees next, still before the scale backend
        assert calls.index("packed") < calls.index("packed-fine") < calls.index("scale")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(max_gpus=5), st.data())
def test_the_trees_files_replay_no_faster_than_the_allreduce_bound(topo, data):
    """What auto now keeps on meshes and lines: the packed trees' AllReduce passes the
    checker, lowers to a valid file, and neither it nor its replay beats the bound."""
    coll = data.draw(collectives(topo, ["allreduce"], size_per_chunk=2_000_000))
    name = data.draw(st.sampled_from(["packed", "packed-fine"]))
    try:
        s = te_ccl.baselines.build_baseline(name, topo, coll)
    except BaselineError:  # no switch-only route between some pair, or no finer pieces
        return
    assert check_schedule(s) == []
    try:
        text = lower_to_msccl(s).decode()
    except RuntimeLimitError:  # auto judges such a file unlowerable and keeps another
        return
    assert verify_msccl(text).valid
    bound = lower_bound(topo, coll).seconds * (1 - 1e-9)
    assert simulate_schedule(s).finish_time_s >= bound
    replay = simulate_msccl(read_msccl(text), topo, coll.size_bytes, ranks=coll.ranks)
    assert replay.finish_time_s >= bound



@pytest.mark.parametrize(("side", "kind", "first"), [
    (9, K.BROADCAST, True), (9, K.REDUCE, True), (8, K.BROADCAST, False)],
    ids=["81-broadcast", "81-reduce", "64-broadcast"])
def test_large_broadcast_races_its_trees_before_the_scale_backend(spied, side, kind, first):
    """Beyond TEMPLATE_MAX_GPUS a Broadcast's (Reduce's) scale file is far from the bound:
    the pipelined trees go first and get the time its search would take."""
    torus = gen.torus([side, side], 50e9, 1e-6)
    calls = spied(give_up=("scale", "auto"))  # the order alone, not the solvers' time
    solve(torus, Collective(kind, 1_000_000, tuple(range(side * side)), root=0),
          SolveParams(time_limit_s=600, threads=1))
    assert (calls.index("pipeline") < calls.index("scale")) is first


def test_large_mesh_allreduce_races_its_combs_before_the_scale_backend(spied):
    """Beyond TEMPLATE_MAX_GPUS a mesh's AllReduce races the comb trees before the scale
    backend's reduce-scatter + all-gather (1.9x the bound at 256 GPUs)."""
    calls = spied(give_up=("scale", "auto"))  # the order alone, not the solvers' time
    solve(gen.mesh([9, 9], 50e9, 1e-6), Collective(K.ALLREDUCE, 1_000_000, tuple(range(81))),
          SolveParams(time_limit_s=600, threads=1))
    assert calls.index("comb-allreduce") < calls.index("scale")
