"""Unit arborescences (pipeline-units): the root's whole out-bandwidth where links differ."""

from collections import Counter

import networkx as nx
import pytest

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.baselines.arborescences import unit_arborescences
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.deadline import until
from te_ccl.spec.topology import load_topology
from te_ccl.topology import generators as gen
from tests.baselines.replay import file_ratio

DGX1 = load_topology("dgx1")


def test_dgx1_packs_six_arborescences_one_per_link_unit():
    """25 and 50 GB/s NVLinks, six 25 GB/s units into every GPU: six spanning trees, a
    50 GB/s link in at most two of them (the link-disjoint trees are four)."""
    gpus = list(DGX1.gpus)
    trees = unit_arborescences(DGX1, gpus[0], gpus)
    assert len(trees) == 6 and all(set(t) == set(gpus[1:]) for t in trees)
    for tree in trees:  # every GPU hangs from the root
        assert nx.is_arborescence(nx.DiGraph((p, c) for c, p in tree.items()))
    used = Counter((p, c) for t in trees for c, p in t.items())
    assert all(n <= DGX1.link(*k).bandwidth_Bps // 25e9 for k, n in used.items())


@pytest.mark.parametrize("n", [3, 5, 6])
def test_a_ring_packs_its_two_directions(n):
    ring = gen.ring(n, 10e9)
    gpus = list(ring.gpus)
    trees = unit_arborescences(ring, gpus[0], gpus)
    assert len(trees) == 2
    links = [(p, c) for t in trees for c, p in t.items()]
    assert len(links) == len(set(links)) == 2 * (n - 1)


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE], ids=lambda k: k.value)
def test_dgx1_file_comes_near_the_bound(kind):
    coll = Collective(kind, 16_000_000, tuple(range(8)), root=0)
    assert "pipeline-units" in applicable(DGX1, coll)
    assert 1 <= file_ratio("pipeline-units", DGX1, coll) <= 1.06


def test_not_built_where_the_disjoint_trees_are_as_many():
    torus = gen.torus([3, 3], 50e9)
    coll = Collective(K.BROADCAST, 1_000_000, tuple(range(9)), root=0)
    with pytest.raises(BaselineError, match="no more arborescences"):
        build_baseline("pipeline-units", torus, coll)


def test_not_built_without_the_time_to_judge_its_file():
    """Its file is as fine as pipeline-fine's, so it is refused where that one is."""
    coll = Collective(K.BROADCAST, 16_000_000, tuple(range(8)), root=0)
    with until(1.0), pytest.raises(BaselineError, match="no time left"):
        build_baseline("pipeline-units", DGX1, coll)
