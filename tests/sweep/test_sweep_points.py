"""Point expansion: product order, deterministic names, content keys that change with inputs."""

from __future__ import annotations

import dataclasses

import pytest

from te_ccl.sweep import points as points_mod
from te_ccl.sweep.grid import load_grid
from te_ccl.sweep.points import expand_grid, point_key

GRID = """\
topologies: [ring8, fc8]
collectives: [allgather, {collective: broadcast, root: 0}]
sizes: [32KB, 1MB]
chunks: [1, 2]
inplace: [false, true]
"""


def test_points_are_the_product_in_file_order(grid_file):
    pts = expand_grid(load_grid(grid_file(GRID)))
    assert len(pts) == 2 * 2 * 2 * 2 * 2
    first = pts[0]
    assert (first.topology.name, first.collective.kind.value, first.size.at_bytes,
            first.collective.chunks_per_rank, first.collective.inplace) == \
        ("ring8", "allgather", 32_000, 1, False)
    assert pts[1].collective.inplace and pts[2].collective.chunks_per_rank == 2
    assert pts[-1].topology.name == "fc8"
    assert len({p.name for p in pts}) == len(pts)
    assert len({p.key for p in pts}) == len(pts)
    assert all(p.params.threads == 1 for p in pts)


def test_names_and_keys_are_stable_across_loads(grid_file, tmp_path):
    a = expand_grid(load_grid(grid_file(GRID, "a.yaml")))
    b = expand_grid(load_grid(grid_file(GRID, "b.yaml")))
    assert [(p.name, p.key) for p in a] == [(p.name, p.key) for p in b]


def test_size_range_becomes_xml_bounds(grid_file):
    pts = expand_grid(load_grid(grid_file(GRID)))
    small, large = pts[0], pts[4]
    assert small.size.xml_bounds == (0, 999_999)
    assert large.size.xml_bounds == (1_000_000, 0)  # maxBytes 0: no upper limit
    assert "0-1MB" in small.name and "1MB+" in large.name


@pytest.mark.parametrize("change", ["params", "collective", "range", "topology"])
def test_key_changes_with_every_input(grid_file, change):
    p = expand_grid(load_grid(grid_file(GRID)))[0]
    topo, coll, params, size = p.topology, p.collective, p.params, p.size
    if change == "params":
        params = dataclasses.replace(params, seed=1)
    elif change == "collective":
        coll = dataclasses.replace(coll, proto="LL")
    elif change == "range":
        size = dataclasses.replace(size, max_bytes=2_000_000)
    else:
        link = dataclasses.replace(topo.links[0], latency_s=topo.links[0].latency_s + 1e-6)
        topo = dataclasses.replace(topo, links=(link, *topo.links[1:]))
    assert point_key(p.topology, p.collective, p.params, p.size) == p.key
    assert point_key(topo, coll, params, size) != p.key


def test_key_changes_with_the_teccl_version(grid_file, monkeypatch):
    p = expand_grid(load_grid(grid_file(GRID)))[0]
    monkeypatch.setattr(points_mod, "__version__", "99.0")
    assert point_key(p.topology, p.collective, p.params, p.size) != p.key


def test_xml_on_a_fabric_whose_switches_reduce_is_refused_before_any_point(grid_file):
    from te_ccl.errors import SpecError

    grid = load_grid(grid_file("topologies: [fred-b]\ncollectives: [allreduce]\nsizes: [1MB]\n"))
    with pytest.raises(SpecError, match="cannot express in-switch reduction"):
        expand_grid(grid, "xml")
    assert expand_grid(grid, "mscclpp")  # a plan drives no FRED switch: its points stand
