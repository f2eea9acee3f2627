"""The AlltoAll cut bound (rank-order prefixes) against the exact fluid optimum, and where
it stands in for the LP: mesh 16×16, whose middle rows the link-time relaxation misses."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl import bounds
from te_ccl.bounds import alltoall_cut_time, alltoall_link_time, lower_bound
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.topology.generators import mesh, torus
from tests.bounds.fluid import fluid_optimum
from tests.bounds.strategies import collectives, fabrics


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(), st.data())
def test_the_cut_never_exceeds_the_fluid_optimum(topo, data):
    c = data.draw(collectives(topo, ["alltoall"]))
    members = [topo.gpu(r) for r in c.ranks]
    cut = alltoall_cut_time(topo, members, c.size_bytes / c.nranks)
    assert cut <= fluid_optimum(topo, c) * (1 + 1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(), st.data())
def test_without_the_lp_the_bound_stays_below_the_fluid_optimum(topo, data):
    c = data.draw(collectives(topo, ["alltoall"]))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(bounds, "LP_MAX_VARIABLES", 0)
        lower_bound.cache_clear()
        b = lower_bound(topo, c)
    lower_bound.cache_clear()
    assert "concurrent_flow_s" not in b.parts
    assert b.seconds - b.fixed.get(b.argument, 0.0) <= fluid_optimum(topo, c) * (1 + 1e-9)


def test_the_middle_rows_of_a_mesh_set_its_bound():
    """Mesh 16×16, 1 B per pair at 1 B/s: 128·128 bytes over the 16 links between rows 7
    and 8, where the link-time relaxation gives 1.41× less."""
    t = mesh([16, 16], 1.0)
    assert alltoall_cut_time(t, list(t.gpus), 1.0) == pytest.approx(1024.0)
    assert alltoall_link_time(t, list(t.gpus), 1.0) < 1024 / 1.4
    b = lower_bound(t, Collective(CollectiveKind.ALLTOALL, 256, tuple(range(256))))
    assert b.argument == "cut_s" and b.seconds == pytest.approx(1024.0)


def test_on_a_torus_the_halving_cut_meets_the_link_time():
    """Every link equally loaded: neither relaxation is weaker (torus 8×8: 32·32 over 16)."""
    t = torus([8, 8], 1.0)
    cut = alltoall_cut_time(t, list(t.gpus), 1.0)
    assert cut == pytest.approx(64.0)
    assert cut == pytest.approx(alltoall_link_time(t, list(t.gpus), 1.0))


def test_the_grid_alltoall_does_not_beat_the_cut():
    """The grid plan's own list schedule on mesh 16×16 (one chunk per pair, a chunk time
    per hop), where the cut stands in for the LP."""
    from te_ccl.backends.scale.grid_alltoall import grid_plan

    t = mesh([16, 16], 1.0)
    assert grid_plan((16, 16), False, 1).finish >= alltoall_cut_time(t, list(t.gpus), 1.0)
