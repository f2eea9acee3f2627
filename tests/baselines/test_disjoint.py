"""The pipeline template: link-disjoint trees from the root, pipelined near the bound."""

import pytest

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.baselines.disjoint import box_trees, disjoint_trees
from te_ccl.bounds import lower_bound
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import generators as gen
from te_ccl.verify.msccl.reader import read_msccl
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule

MESH = gen.mesh([6, 6], 50e9, 0.5e-6)
TORUS = gen.torus([4, 4], 50e9, 0.5e-6)


def _file_ratio(topology, coll) -> float:
    """The pipeline's schedule checked, lowered to a valid file, whose replay over the bound
    is returned."""
    schedule = build_baseline("pipeline", topology, coll)
    assert check_schedule(schedule) == []
    data = lower_to_msccl(schedule).decode()
    assert verify_msccl(data).valid
    replay = simulate_msccl(read_msccl(data), topology, coll.size_bytes).finish_time_s
    return replay / lower_bound(topology, coll).seconds


def _depth(tree, v):
    d = 0
    while v in tree:
        v, d = tree[v], d + 1
    return d


@pytest.mark.parametrize(("topology", "count", "depth"), [(MESH, 2, 10), (TORUS, 4, 5)],
                         ids=["mesh6x6", "torus4x4"])
def test_one_tree_per_root_link_spanning_sharing_no_link_and_shallow(topology, count, depth):
    gpus = list(topology.gpus)
    trees = disjoint_trees(topology, gpus[0], gpus)
    assert len(trees) == count
    links = [(p, c) for tree in trees for c, p in tree.items()]
    assert len(links) == len(set(links)) == count * (len(gpus) - 1)
    assert all(set(tree) == set(gpus[1:]) for tree in trees)
    # a mesh corner's trees reach the far corner in its distance, a torus's within a hop more
    assert max(_depth(tree, v) for tree in trees for v in tree) == depth


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE, K.GATHER, K.SCATTER],
                         ids=lambda k: k.value)
def test_rooted_collectives_pipeline_near_the_bound_in_a_valid_file(kind):
    coll = Collective(kind, 16_000_000, tuple(range(9)), root=0)
    assert 1 <= _file_ratio(gen.mesh([3, 3], 50e9, 0.5e-6), coll) <= 1.05


def test_a_root_behind_a_switch_without_boxes_is_refused():
    star = gen.star(8, 450e9, 0.7e-6)
    coll = Collective(K.BROADCAST, 1_000_000, tuple(range(8)), root=0)
    assert "pipeline" not in applicable(star, coll)
    with pytest.raises(BaselineError, match="no direct link"):
        build_baseline("pipeline", star, coll)


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE], ids=lambda k: k.value)
def test_boxes_on_rails_stream_a_share_down_every_rail(kind):
    """Four GPUs a box behind a switch, a rail per GPU: the root's box sends a share over
    each rail, and its own share through each of its three peers in turn."""
    rails = gen.rail_optimized(2, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    gpus = list(rails.gpus)
    shares = box_trees(rails, gpus[0], gpus)
    trees = [t for _, t in shares]
    assert len(trees) == 3 + 3 and sum(w for w, _ in shares) == pytest.approx(4)
    assert all(set(t) == set(gpus[1:]) for t in trees)
    coll = Collective(kind, 16_000_000, tuple(range(8)), root=0)
    assert 1 <= _file_ratio(rails, coll) <= 1.10


def test_the_fine_pipeline_takes_as_many_pieces_as_the_time_left_holds(monkeypatch):
    import te_ccl.baselines.disjoint as disjoint

    mesh = gen.mesh([8, 8], 50e9, 0.5e-6)
    coll = Collective(K.BROADCAST, 64_000_000, tuple(range(64)), root=0)
    assert build_baseline("pipeline", mesh, coll).collective.chunks_per_rank == 20_000 // 63
    monkeypatch.setattr(disjoint, "left", lambda: 5.0)  # 8,333 hops: not worth building
    with pytest.raises(BaselineError, match="time left"):
        build_baseline("pipeline-fine", mesh, coll)
    monkeypatch.setattr(disjoint, "left", lambda: 40.0)  # 66,666 hops: 1,058 pieces of 63
    assert build_baseline("pipeline-fine", mesh, coll).collective.chunks_per_rank == 1024
