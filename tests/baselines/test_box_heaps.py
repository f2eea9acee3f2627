"""The pipeline's boxes in two binary heaps (pipeline-boxes): logarithmic depth in boxes,
every rail into and out of a box carrying one share; and every box a hub (pipeline-hubs):
two box hops from the root's box, each part on one rail."""

from collections import defaultdict

import pytest

from te_ccl.baselines import BaselineError, applicable, build_baseline
from te_ccl.baselines.disjoint import box_trees, hub_trees, pipeline
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import generators as gen
from te_ccl.verify.msccl.reader import read_msccl
from te_ccl.verify.msccl.verify import verify_msccl
from te_ccl.verify.schedule_check import check_schedule


def _box(gpu: str) -> str:
    return gpu.split(".")[0]


def _crossings(tree: dict[str, str], v: str) -> int:
    n = 0
    while v in tree:
        n += _box(v) != _box(tree[v])
        v = tree[v]
    return n


def test_the_heaps_are_shallow_and_load_every_rail_once():
    """Seven boxes of four GPUs: a share crosses at most three rails to any GPU (the
    chain crosses six), and no GPU sends or takes more than one share over its rail."""
    rails = gen.rail_optimized(7, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    gpus = list(rails.gpus)
    fanned = box_trees(rails, gpus[0], gpus, fanned=True)
    chained = box_trees(rails, gpus[0], gpus)
    assert all(set(t) == set(gpus[1:]) for _, t in fanned)
    assert sum(w for w, _ in fanned) == pytest.approx(4)
    assert max(_crossings(t, v) for _, t in fanned for v in t) == 3
    assert max(_crossings(t, v) for _, t in chained for v in t) == 6
    out: dict[str, float] = defaultdict(float)
    into: dict[str, float] = defaultdict(float)
    for w, tree in fanned:
        for c, p in tree.items():
            if _box(c) != _box(p):
                out[p] += w
                into[c] += w
    assert max(out.values()) == pytest.approx(1) and max(into.values()) == pytest.approx(1)


@pytest.mark.parametrize("kind", [K.BROADCAST, K.REDUCE], ids=lambda k: k.value)
def test_the_heaps_file_is_faster_than_the_chains_on_eight_boxes(kind):
    rails = gen.rail_optimized(8, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = Collective(kind, 16_000_000, tuple(range(32)), root=0)
    finish = {}
    for fanned in (False, True):
        schedule = pipeline(rails, coll, 8000, box_fan=1 if kind is K.REDUCE else None,
                            fanned=fanned)
        assert check_schedule(schedule) == []
        data = lower_to_msccl(schedule).decode()
        assert verify_msccl(data).valid
        finish[fanned] = simulate_msccl(read_msccl(data), rails, coll.size_bytes).finish_time_s
    assert finish[True] < finish[False]


def test_the_box_heaps_need_three_boxes_and_a_root_without_direct_links():
    coll = Collective(K.BROADCAST, 1_000_000, tuple(range(4)), root=0)
    with pytest.raises(BaselineError, match="more than two boxes"):
        build_baseline("pipeline-boxes", gen.rail_optimized(2, 2, 450e9, 50e9), coll)
    with pytest.raises(BaselineError, match="more than two boxes"):
        build_baseline("pipeline-boxes", gen.ring(4, 50e9), coll)


def test_the_box_heaps_are_offered_after_the_finer_chain():
    rails = gen.rail_optimized(4, 2, 450e9, 50e9)
    names = applicable(rails, Collective(K.REDUCE, 1_000_000, tuple(range(8)), root=0))
    assert names.index("pipeline-boxes") == names.index("pipeline-fine") + 1
    assert "pipeline-boxes" not in applicable(
        rails, Collective(K.GATHER, 1_000_000, tuple(range(8)), root=0))


def test_the_hubs_are_two_box_hops_deep_and_keep_each_part_on_its_rail():
    """Five boxes of four GPUs on rails: a tree per rail and other box, every GPU at most
    two rail crossings from the root, every crossing between GPUs of the same rail, and
    every rail into a box carrying as many parts as every other."""
    rails = gen.rail_optimized(5, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    gpus = list(rails.gpus)
    trees = hub_trees(rails, gpus[0], gpus)
    assert len(trees) == 4 * 4
    assert all(set(t) == set(gpus[1:]) for t in trees)
    assert max(_crossings(t, v) for t in trees for v in t) == 2
    into: dict[str, int] = defaultdict(int)
    for tree in trees:
        for c, p in tree.items():
            if _box(c) != _box(p):
                assert c.split(".")[1] == p.split(".")[1]
                into[c] += 1
    assert len(into) == 4 * 4 and len(set(into.values())) == 1


def test_the_hubs_file_is_verified_and_not_slower_than_the_heaps_on_four_boxes():
    rails = gen.rail_optimized(4, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = Collective(K.BROADCAST, 2_000_000, tuple(range(16)), root=0)
    finish = {}
    for name in ("pipeline-boxes", "pipeline-hubs"):
        schedule = build_baseline(name, rails, coll)
        assert check_schedule(schedule) == []
        data = lower_to_msccl(schedule).decode()
        assert verify_msccl(data).valid
        finish[name] = simulate_msccl(read_msccl(data), rails, coll.size_bytes).finish_time_s
    assert finish["pipeline-hubs"] <= finish["pipeline-boxes"]


def test_the_hubs_are_offered_for_a_broadcast_on_rails_only():
    """Before the generic finer chain, so the time its file would take goes to them."""
    rails = gen.rail_optimized(4, 2, 450e9, 50e9)
    cast = applicable(rails, Collective(K.BROADCAST, 1_000_000, tuple(range(8)), root=0))
    assert cast.index("pipeline-hubs") == cast.index("pipeline") + 1
    assert cast.index("pipeline-fine") == cast.index("pipeline-hubs") + 1
    assert cast.index("pipeline-boxes") == cast.index("pipeline-fine") + 1
    reduce = Collective(K.REDUCE, 1_000_000, tuple(range(8)), root=0)
    assert "pipeline-hubs" not in applicable(rails, reduce)
    with pytest.raises(BaselineError, match="no hub trees"):
        build_baseline("pipeline-hubs", rails, reduce)


def test_the_hubs_of_a_root_alone_in_its_box_leave_from_the_root():
    """One rank per box: the root is its box's only gateway and sends each hub's part
    itself, no GPU of its box to hand it to."""
    rails = gen.rail_optimized(4, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = Collective(K.BROADCAST, 2_000_000, (0, 4, 8, 12), root=0)
    schedule = build_baseline("pipeline-hubs", rails, coll)
    assert check_schedule(schedule) == []
    assert verify_msccl(lower_to_msccl(schedule).decode()).valid
