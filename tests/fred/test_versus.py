"""`teccl fred versus`: FRED against the mesh's best schedule and against the mesh's bound."""

from __future__ import annotations

import json

import pytest

from te_ccl.cli.fred import versus_mesh


def test_a_speedup_is_shown_against_the_mesh_schedule_and_its_bound():
    mesh, d = versus_mesh("allgather", 64_000, 8, ("fred-d",), time_limit_s=600)
    assert (mesh.fabric, d.fabric) == ("wafer-mesh4x2", "fred-d-8")
    for r in (mesh, d):
        assert r.time_s >= r.bound_s * (1 - 1e-9)
    assert d.speedup == pytest.approx(mesh.time_s / d.time_s)
    assert d.speedup_vs_bound == pytest.approx(mesh.bound_s / d.time_s)
    assert d.speedup_vs_bound <= d.speedup and mesh.speedup == 1


def test_versus_refuses_a_wafer_that_does_not_fill_its_l1_switches(teccl):
    code, out, err = teccl("fred", "versus", "--npus", "10", "--json")
    assert code == 2 and "--npus" in json.loads(out)["error"]
