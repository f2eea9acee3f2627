"""The AlltoAll concurrent-flow LP by symmetry: one source per orbit of members and a row
per link orbit give the same T as the full LP, on tori, meshes, rail and box fabrics and
random circulant and random fabrics, and every symmetry used is an automorphism."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import te_ccl.bounds as bounds
from te_ccl.bounds import alltoall_time
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology.generators import (
    Join,
    boxes,
    fat_tree,
    fully_connected,
    mesh,
    rail_optimized,
    ring,
    star,
    torus,
)
from te_ccl.topology.symmetry import (
    automorphisms,
    link_moves,
    orbits,
)
from tests.bounds.strategies import BANDWIDTHS, LATENCIES, fabrics


def _per_dimension(t: Topology) -> Topology:
    """``t`` (a generated grid) with the links of axis ``a`` at ``(1 + 2a)`` times the bandwidth."""
    dims = t.meta["dims"]

    def axis(src: str, dst: str) -> int:
        a, b = (np.unravel_index(t.gpus.index(x), dims) for x in (src, dst))
        return next(i for i in range(len(dims)) if a[i] != b[i])

    return replace(t, links=tuple(replace(k, bandwidth_Bps=k.bandwidth_Bps * (1 + 2 * axis(k.src, k.dst)))
                                  for k in t.links))


def _skewed(t: Topology) -> Topology:
    """One link of ``t`` at twice the bandwidth: the symmetries that move it are lost."""
    return replace(t, links=(replace(t.links[0], bandwidth_Bps=2 * t.links[0].bandwidth_Bps),
                             *t.links[1:]))


def _full(t: Topology, members: list[str]) -> float | None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(bounds, "automorphisms", lambda *_: [])
        m.setattr(bounds, "LP_MAX_VARIABLES", 10**6)
        return alltoall_time(t, members, 1e6)


def _is_automorphism(t: Topology, perm: np.ndarray, members: list[str]) -> bool:
    """Checked apart from the module: nodes to nodes of the same kind, links onto links
    of the same bandwidth and latency, members onto members."""
    name = [n.name for n in t.nodes]
    moved = {n.name: name[int(perm[i])] for i, n in enumerate(t.nodes)}
    if sorted(moved.values()) != sorted(name):
        return False
    if any(replace(t.node(a), name="") != replace(t.node(b), name="") for a, b in moved.items()):
        return False
    links = {k.key: (k.bandwidth_Bps, k.latency_s) for k in t.links}
    return ({(moved[u], moved[v]): x for (u, v), x in links.items()} == links
            and {moved[m] for m in members} == set(members))


def _equal(t: Topology, members: list[str] | None = None) -> tuple[int, int]:
    """Assert the reduced LP equals the full one and every generator is an automorphism;
    the number of sources and of link orbits the reduced LP had."""
    members = list(t.gpus) if members is None else members
    gens = automorphisms(t, members)
    assert all(_is_automorphism(t, g, members) for g in gens)
    sources, weight, link, size = bounds._orbit_lp_rows(t, members)
    assert sum(weight) == len(members) and sum(size) == len(t.links)
    reduced, full = alltoall_time(t, members, 1e6), _full(t, members)
    assert (reduced is None) == (full is None)
    if full is not None:
        assert reduced == pytest.approx(full, rel=1e-9)
    return len(sources), len(size)


@pytest.mark.parametrize("t", [torus([3, 3], 1e9), torus([3, 5], 1e9), torus([6], 1e9),
                               torus([3, 3, 3], 5e10),
                               pytest.param(torus([4, 4, 4], 5e10), marks=pytest.mark.slow),
                               pytest.param(torus([8, 8], 1e9), marks=pytest.mark.slow),
                               _per_dimension(torus([3, 5], 1e9)),
                               _per_dimension(torus([4, 3, 3], 1e9))],
                         ids=lambda t: t.name + ("-per-dim" if len({k.bandwidth_Bps for k in t.links}) > 1 else ""))
def test_on_a_torus_one_source(t: Topology) -> None:
    assert _equal(t)[0] == 1


@pytest.mark.parametrize("t, sources", [
    (mesh([3, 3], 1e9), 3), (mesh([4, 4], 1e9), 3), (mesh([6, 6], 1e9, 1e-6), 6),
    (mesh([4, 6], 1e9), 6), (mesh([5], 1e9), 3), (mesh([2, 3, 4], 1e9), 4),
    (_per_dimension(mesh([4, 4], 1e9)), 4),
    pytest.param(mesh([8, 8], 5e10, 5e-7), 10, marks=pytest.mark.slow)],
    ids=["3x3", "4x4", "6x6", "4x6", "5", "2x3x4", "4x4-per-dim", "8x8"])
def test_on_a_mesh_a_source_per_orbit(t: Topology, sources: int) -> None:
    """A square's eight reflections and rotations, a rectangle's four reflections."""
    assert _equal(t)[0] == sources


@pytest.mark.parametrize("t", [
    rail_optimized(3, 4, 450e9, 50e9, 7e-7, 1.3e-6), rail_optimized(4, 2, 450e9, 50e9),
    boxes(fully_connected(3, 1e9), 3, Join("switch", ("g0", "g1"), 5e8)),
    boxes(ring(4, 1e9), 3, Join("direct", ("g0",), 5e8)),
    star(5, 1e9), fully_connected(4, 1e9), ring(5, 1e9), fat_tree(3, 2, 2, 1e9, 1e-6)],
    ids=["rail3x4", "rail4x2", "boxes-switch", "boxes-direct", "star", "fc4", "ring5",
         "fat-tree"])
def test_on_boxes_rails_and_switches(t: Topology) -> None:
    _equal(t)


def test_a_fabric_numbered_group_by_group_without_saying_so() -> None:
    """A fat tree's generator names no leaves: the two-factor shapes of the rank order
    find its leaf and in-leaf permutations all the same (switches moved with them)."""
    assert _equal(fat_tree(3, 2, 2, 1e9, 1e-6))[0] == 1


def test_rails_and_boxes_move_every_gpu_onto_every_other() -> None:
    """A rail fabric's box and rail permutations (switches moved with them) leave one
    orbit of GPUs and one per kind of link."""
    t = rail_optimized(3, 4, 450e9, 50e9, 7e-7, 1.3e-6)
    assert _equal(t) == (1, 4)


@pytest.mark.parametrize("t", [_skewed(torus([3, 4], 1e9)), _skewed(mesh([4, 4], 1e9)),
                               _skewed(rail_optimized(3, 3, 4e9, 1e9))],
                         ids=["torus", "mesh", "rail"])
def test_an_odd_link_keeps_only_the_symmetries_that_fix_it(t: Topology) -> None:
    sources, _ = _equal(t)
    assert sources > 1


@pytest.mark.parametrize("t, members", [(torus([3, 3], 1e9), 4), (mesh([4, 4], 1e9), 5),
                                        (rail_optimized(3, 3, 4e9, 1e9), 3)])
def test_members_a_subset_keep_only_the_symmetries_that_keep_them(t: Topology, members: int
                                                                  ) -> None:
    _equal(t, list(t.gpus[:members]))


@st.composite
def _circulants(draw) -> Topology:
    """GPU ``i`` linked to ``i + d`` for a few random offsets ``d``, each offset at its own
    bandwidth and latency: the shifts are automorphisms; the ring ``d = 1`` joins all."""
    n = draw(st.integers(3, 7))
    offsets = {1} | draw(st.sets(st.integers(2, n - 1), max_size=2))
    kind = {d: (draw(BANDWIDTHS), draw(LATENCIES)) for d in offsets}
    links = [Link(f"g{i}", f"g{(i + d) % n}", *kind[d]) for i in range(n) for d in offsets]
    return Topology.build(f"circulant{n}", [Node(f"g{i}") for i in range(n)], links)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_circulants())
def test_random_circulants(t: Topology) -> None:
    assert _equal(t)[0] == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabrics(max_gpus=6), st.data())
def test_random_fabrics(t: Topology, data: st.DataObject) -> None:
    members = data.draw(st.sets(st.sampled_from(t.gpus), min_size=2))
    _equal(t, [g for g in t.gpus if g in members])


def test_orbits_are_the_parts_the_generators_join() -> None:
    swap, shift = np.array([1, 0, 2, 3, 4]), np.array([0, 1, 3, 4, 2])
    assert orbits([], 3).tolist() == [0, 1, 2]
    assert orbits([swap, shift], 5).tolist() == [0, 0, 1, 1, 1]



@pytest.mark.parametrize("t", [mesh([4, 4], 1e9), rail_optimized(3, 2, 4e9, 1e9),
                               fat_tree(2, 2, 2, 1e9)], ids=["mesh", "rail", "fat-tree"])
def test_link_moves_are_the_generators_on_the_links(t: Topology) -> None:
    gens = automorphisms(t, t.gpus)
    name = [n.name for n in t.nodes]
    where = {x: i for i, x in enumerate(name)}
    for g, moved in zip(gens, link_moves(t, gens), strict=True):
        for k, j in zip(t.links, moved.tolist(), strict=True):
            assert t.links[j].key == (name[int(g[where[k.src]])], name[int(g[where[k.dst]])])
