"""auto races the packed trees before the scale backend's reduce-scatter + all-gather
where that composition cannot reach the AllReduce bound (meshes, lines), after it elsewhere."""

import pytest

import te_ccl.baselines
import te_ccl.compiler.portfolio as portfolio
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.compiler import SolveParams, solve
from te_ccl.topology import generators as gen

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
def test_packed_trees_race_before_the_scale_backend_on_a_mesh(monkeypatch, topology, first):
    calls: list[str] = []
    build, run = te_ccl.baselines.build_baseline, portfolio.run_strategy

    def spy_build(name, *args):
        calls.append(name)
        return build(name, *args)

    def spy_run(topo, coll, params, progress=None):
        calls.append(params.backend)
        return run(topo, coll, params, progress)

    monkeypatch.setattr(te_ccl.baselines, "build_baseline", spy_build)
    monkeypatch.setattr(portfolio, "run_strategy", spy_run)
    coll = Collective(K.ALLREDUCE, 64_000_000, tuple(range(topology.ngpus)))
    solve(topology, coll, SolveParams(time_limit_s=5, threads=1))
    assert "scale" in calls and "packed" in calls
    assert (calls.index("packed") < calls.index("scale")) is first
