"""Baselines: valid schedules (independent checker), known closed forms, ring orders."""

import pytest

from te_ccl.baselines import BASELINES, BaselineError, applicable, build_baseline
from te_ccl.baselines.ring import ring_order
from te_ccl.collective import Collective
from te_ccl.collective import CollectiveKind as K
from te_ccl.simulate import simulate_schedule
from te_ccl.topology import generators as gen
from te_ccl.verify.schedule_check import check_schedule

ALL_KINDS = [K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE, K.ALLTOALL, K.BROADCAST, K.REDUCE,
             K.GATHER, K.SCATTER]


def coll(kind, n, size=8 * 2**10, chunks=1):
    root = 1 if kind in (K.BROADCAST, K.REDUCE, K.GATHER, K.SCATTER) else None
    return Collective(kind, size, tuple(range(n)), chunks_per_rank=chunks, root=root)


TOPOLOGIES = {
    "ring6": gen.ring(6, 50e9, 1e-6),
    "fc4": gen.fully_connected(4, 25e9, 0.5e-6),
    "star5": gen.star(5, 100e9, 0.2e-6),
    "mesh2x3": gen.mesh([2, 3], 50e9, 0.5e-6),
    "boxes": gen.boxes(gen.fully_connected(3, 50e9, 0.7e-6), 2,
                       gen.Join("direct", ("g0",), 12.5e9, 1.3e-6)),
}


@pytest.mark.parametrize("tname", sorted(TOPOLOGIES))
@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_every_applicable_baseline_passes_the_checker(tname, kind):
    topo = TOPOLOGIES[tname]
    c = coll(kind, topo.ngpus)
    built = 0
    for name in applicable(topo, c):
        try:
            s = build_baseline(name, topo, c)
        except BaselineError as e:  # reductions needing a GPU relay are refused, not wrong,
            # and finer packed trees where the size holds no more pieces
            assert any(x in str(e) for x in ("only through other GPUs", "no ring through",
                                             "no finer pieces", "no more arborescences"))
            continue
        built += 1
        assert check_schedule(s) == [], (name, check_schedule(s)[:3])
        sim = simulate_schedule(s)
        assert 0 < sim.finish_time_s <= s.finish_time_s * (1 + 1e-9)
        assert s.info.backend == f"baseline:{name}"
    assert built >= 1


def test_ring_allgather_matches_the_nccl_formula():
    n, bw, alpha, size = 8, 50e9, 1e-6, 8 * 2**20
    s = build_baseline("ring", gen.ring(n, bw, alpha), coll(K.ALLGATHER, n, size))
    expect = (n - 1) * (alpha + size / n / bw)
    assert simulate_schedule(s).finish_time_s == pytest.approx(expect, rel=1e-9)


def test_bidirectional_ring_halves_the_bandwidth_term():
    n, bw, size = 8, 50e9, 8 * 2**20
    t = gen.ring(n, bw)
    uni = simulate_schedule(build_baseline("ring", t, coll(K.ALLGATHER, n, size))).finish_time_s
    bi = simulate_schedule(build_baseline("ring-bidir", t, coll(K.ALLGATHER, n, size)))
    assert bi.finish_time_s == pytest.approx(uni / 2, rel=1e-9)


def test_ring_allreduce_is_twice_the_allgather():
    n, t = 6, gen.ring(6, 50e9, 1e-6)
    ag = simulate_schedule(build_baseline("ring", t, coll(K.ALLGATHER, n, 6 * 2**20)))
    ar = simulate_schedule(build_baseline("ring", t, coll(K.ALLREDUCE, n, 6 * 2**20)))
    assert ar.finish_time_s == pytest.approx(2 * ag.finish_time_s, rel=1e-9)


def test_ring_order_is_a_hamiltonian_cycle_over_direct_links():
    t = gen.mesh([4, 4], 50e9)
    order = ring_order(t, list(t.gpus))
    assert sorted(order) == sorted(t.gpus)
    assert all(t.has_link(order[i], order[(i + 1) % 16]) for i in range(16))


def test_tree_is_only_for_rooted_and_allreduce():
    t = TOPOLOGIES["fc4"]
    assert "tree" not in applicable(t, coll(K.ALLGATHER, 4))
    with pytest.raises(BaselineError, match="double binary tree"):
        build_baseline("tree", t, coll(K.ALLGATHER, 4))


def test_tree_broadcast_is_logarithmic_on_a_switch():
    n = 16
    t = gen.star(n, 100e9, 1e-6)
    s = build_baseline("tree", t, coll(K.BROADCAST, n, 1024))
    sim = simulate_schedule(s).finish_time_s
    ring = simulate_schedule(build_baseline("ring", t, coll(K.BROADCAST, n, 1024)))
    assert sim < ring.finish_time_s / 2  # depth ~log2(16) vs 15 hops


def test_hierarchical_needs_boxes_and_crosses_once_per_chunk():
    with pytest.raises(BaselineError, match="no boxes"):
        build_baseline("hierarchical", TOPOLOGIES["fc4"], coll(K.ALLGATHER, 4))
    t = TOPOLOGIES["boxes"]
    s = build_baseline("hierarchical", t, coll(K.ALLGATHER, 6))
    cross = [x for x in s.transfers if x.src.split(".")[0] != x.dst.split(".")[0]]
    assert len(cross) == 6  # every chunk crosses the IB link exactly once


def test_unknown_baseline_is_a_usage_error():
    with pytest.raises(BaselineError, match="unknown baseline") as e:
        build_baseline("butterfly", TOPOLOGIES["fc4"], coll(K.ALLGATHER, 4))
    assert e.value.exit_code == 2
    assert set(BASELINES) == {"ring", "ring-bidir", "tree", "direct", "hierarchical",
                              "comb-allreduce", "packed", "packed-fine", "pipeline",
                              "pipeline-fine", "pipeline-boxes",
                              "pipeline-hubs", "pipeline-units", "pipeline-torus",
                              "switch-trees", "far-first"}


@pytest.mark.parametrize("kind", [K.BROADCAST, K.ALLGATHER], ids=lambda k: k.value)
@pytest.mark.parametrize("name", ["tree", "ring", "ring-bidir", "direct"])
def test_copies_relayed_through_a_gpu_cross_each_link_once(name, kind):
    # boxes joined by one link between their g0s: every tree/ring edge between the boxes
    # routes through it, but each chunk needs to cross it only once
    topo, c = TOPOLOGIES["boxes"], coll(kind, TOPOLOGIES["boxes"].ngpus)
    if name not in applicable(topo, c):
        pytest.skip(f"{name} does not apply to {kind.value}")
    s = build_baseline(name, topo, c)
    hops = [(t.chunk, t.src, t.dst) for t in s.transfers if t.op == "copy"]
    assert len(hops) == len(set(hops))
    assert check_schedule(s) == []
