"""comb-allreduce: a 2D mesh's AllReduce summed up comb trees and broadcast back."""

from collections import Counter

import pytest

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.baselines.comb_allreduce import combs, combs_apply
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.deadline import until
from te_ccl.topology import generators as gen
from tests.baselines.replay import file_ratio


def _allreduce(n: int, size: int = 64_000_000) -> Collective:
    return Collective(K.ALLREDUCE, size, tuple(range(n)))


@pytest.mark.parametrize("dims", [[3, 3], [4, 6], [2, 5]])
def test_every_link_carries_the_same_share_each_way(dims):
    """The combs' shares of the data add up to one, and on every link, up (child to
    parent) and down, to (N - 1)/|E|: the gossip bound's rate, every link busy."""
    net = gen.mesh(dims, 1e9)
    trees = combs(net)
    assert all(len(tree) == net.ngpus - 1 for _, _, tree in trees)
    assert sum(share for share, _, _ in trees) == pytest.approx(1)
    load: Counter = Counter()
    for share, _, tree in trees:
        for child, parent in tree.items():
            load[child, parent] += share
            load[parent, child] += share
    assert set(load) == {(k.src, k.dst) for k in net.links}
    edges = len(net.links) // 2
    assert all(v == pytest.approx((net.ngpus - 1) / edges) for v in load.values())


def test_applies_to_a_mesh_allreduce_over_every_gpu_only():
    mesh = gen.mesh([4, 4], 50e9)
    assert combs_apply(mesh, _allreduce(16))
    assert applicable(mesh, _allreduce(16)).index("comb-allreduce") \
        < applicable(mesh, _allreduce(16)).index("packed")
    larger = applicable(gen.mesh([5, 5], 50e9), _allreduce(25))  # instead of packed's LP
    assert "comb-allreduce" in larger and "packed" not in larger and "packed-fine" not in larger
    for net, coll in [(gen.torus([4, 4], 50e9), _allreduce(16)),
                      (mesh, Collective(K.ALLREDUCE, 64_000_000, tuple(range(8)))),
                      (mesh, Collective(K.ALLGATHER, 64_000_000, tuple(range(16))))]:
        assert not combs_apply(net, coll)
        with pytest.raises(BaselineError):
            build_baseline("comb-allreduce", net, coll)


def test_not_built_without_the_time_to_judge_its_file():
    with until(0.5), pytest.raises(BaselineError, match="no time left"):
        build_baseline("comb-allreduce", gen.mesh([16, 16], 50e9), _allreduce(256))


def test_a_small_mesh_file_near_the_gossip_bound():
    ratio = file_ratio("comb-allreduce", gen.mesh([3, 4], 50e9, 0.5e-6),
                       _allreduce(12, 1 << 23))
    assert 1 <= ratio <= 1.10
