"""A torus's link-disjoint trees, one per root link, a hop deeper than its diameter (two
where its sides are odd)."""

import pytest

from te_ccl.baselines.disjoint import disjoint_trees
from te_ccl.baselines.grid_trees import torus_trees
from te_ccl.baselines.plan import depth
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.topology import generators as gen
from tests.baselines.replay import file_ratio


@pytest.mark.parametrize(("dims", "root", "extra"),
                         [([4, 4], 0, 1), ([6, 6], 7, 1), ([8, 8], 0, 1), ([5, 5], 12, 2),
                          ([3, 3, 3], 13, 2), ([4, 4, 4], 5, 1)],
                         ids=["4x4", "6x6-g7", "8x8", "5x5-g12", "3x3x3-g13", "4x4x4-g5"])
def test_trees_span_share_no_link_start_on_every_root_link_near_the_diameter(dims, root, extra):
    net = gen.torus(dims, 50e9, 0.5e-6)
    gpus, origin = list(net.gpus), net.gpus[root]
    trees = torus_trees(net, origin, gpus)
    assert trees is not None and len(trees) == 2 * len(dims)
    links = [(p, c) for tree in trees for c, p in tree.items()]
    assert len(links) == len(set(links)) and all(net.has_link(p, c) for p, c in links)
    assert all(set(tree) == set(gpus) - {origin} for tree in trees)
    assert sorted(c for p, c in links if p == origin) == sorted(
        k.dst for k in net.out_links(origin))
    diameter = sum(d // 2 for d in dims)
    assert max(depth(tree, v) for tree in trees for v in tree) <= diameter + extra


def test_shallower_than_the_trees_grown_layer_by_layer():
    net = gen.torus([8, 8], 50e9, 0.5e-6)
    gpus = list(net.gpus)
    grown = max(depth(t, v) for t in disjoint_trees(net, gpus[0], gpus) for v in t)
    shallow = max(depth(t, v) for t in torus_trees(net, gpus[0], gpus) for v in t)
    assert shallow == 9 < grown


@pytest.mark.parametrize("net", [gen.mesh([4, 4], 50e9), gen.torus([4, 6], 50e9),
                                 gen.ring(8, 50e9)], ids=["mesh", "unequal-sides", "ring"])
def test_none_where_the_network_is_no_torus_of_equal_sides(net):
    assert torus_trees(net, net.gpus[0], list(net.gpus)) is None


def test_none_where_only_some_gpus_take_part():
    net = gen.torus([4, 4], 50e9)
    assert torus_trees(net, net.gpus[0], list(net.gpus[:8])) is None


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE, K.GATHER, K.SCATTER],
                         ids=lambda k: k.value)
def test_the_pipeline_down_them_is_near_the_bound_in_a_valid_file(kind):
    net = gen.torus([4, 4], 50e9, 0.5e-6)
    coll = Collective(kind, 16_000_000, tuple(range(16)), root=5)
    assert 1 <= file_ratio("pipeline", net, coll) <= 1.06
