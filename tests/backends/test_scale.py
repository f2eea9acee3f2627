"""The scale backend on small instances: every schedule passes the independent checker."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.backends.base import SolveParams
from te_ccl.backends.scale import bitsets, compile_scale, scale_method, scale_plan, solve_scale
from te_ccl.backends.scale.greedy import _first_tier
from te_ccl.backends.scale.orbit import Orbit, improve_cpsat, list_schedule
from te_ccl.backends.scale.torus import _orbit
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.deadline import Budget
from te_ccl.errors import SolverError
from te_ccl.model.problem import build_problem
from te_ccl.schedule import Schedule
from te_ccl.topology.generators import mesh, rail_optimized, star, torus
from te_ccl.topology.symmetry import torus_symmetry
from te_ccl.verify.schedule_check import check_schedule

K = CollectiveKind
# far above the second or so each solve takes: the outcome does not hang on the
# machine's speed
LIMIT_S = 600
PARAMS = SolveParams(time_limit_s=LIMIT_S, threads=1)


def _all(topo, kind: CollectiveKind, size: int = 1 << 16, **kw) -> Collective:
    return Collective(kind, size, tuple(range(topo.ngpus)), **kw)


def _assert_good(schedule: Schedule, original: Collective) -> None:
    assert check_schedule(schedule) == []
    assert schedule.finish_time_s >= lower_bound(schedule.topology, original).seconds * (1 - 1e-9)
    assert schedule.info.backend == "scale" and schedule.info.notes


@pytest.mark.parametrize("topo", [torus([4, 4], 50e9, 0.5e-6), mesh([4, 4], 50e9, 0.5e-6)],
                         ids=["torus4x4", "mesh4x4"])
@pytest.mark.parametrize("kind", [K.ALLGATHER, K.REDUCESCATTER, K.ALLREDUCE])
def test_compile_scale_is_checked_and_above_the_bound(topo, kind):
    coll = _all(topo, kind)
    s = compile_scale(topo, coll, PARAMS)
    _assert_good(s, coll)
    assert s.collective.chunks_per_rank > 1  # sub-chunked
    assert any("sub-chunking" in n for n in s.info.notes)


def test_torus_uses_symmetry_and_meets_the_orbit_bound():
    topo = torus([4, 4], 50e9, 0.5e-6)
    coll = _all(topo, K.ALLGATHER, 1 << 24)
    s = compile_scale(topo, coll, PARAMS)
    assert any("torus symmetry" in n for n in s.info.notes)
    # every link carries (N-1)·k/4 sub-chunks: the finish is that plus one link delay
    per_link = 15 * s.collective.chunks_per_rank // 4
    assert s.finish_epoch <= per_link + 2


def test_torus8x8_allgather_without_subchunks():
    topo = torus([8, 8], 50e9, 0.5e-6)
    coll = _all(topo, K.ALLGATHER, 1 << 30, chunks_per_rank=4)
    p = build_problem(topo, coll, coll.chunk_bytes / 50e9)
    r = solve_scale(p, PARAMS, Budget.of(LIMIT_S))
    s = Schedule(topo, coll, p.epoch_s, r.transfers)
    assert check_schedule(s) == [] and r.finish_epoch == s.finish_epoch
    assert r.finish_epoch == 63 + 1  # 63 sub-chunks per link, then one delay of 2


def test_mesh8x8_greedy_and_reproducible():
    topo = mesh([8, 8], 50e9, 0.5e-6)
    coll = _all(topo, K.ALLGATHER, 1 << 16, chunks_per_rank=2)
    p = build_problem(topo, coll, coll.chunk_bytes / 50e9)
    a = solve_scale(p, PARAMS, Budget.of(LIMIT_S))
    b = solve_scale(p, PARAMS, Budget.of(LIMIT_S))
    assert a.transfers == b.transfers
    assert any("greedy" in n for n in a.notes)
    assert check_schedule(Schedule(topo, coll, p.epoch_s, a.transfers)) == []


@pytest.mark.parametrize("kind", [K.BROADCAST, K.GATHER, K.SCATTER])
def test_rooted_kinds_on_a_mesh(kind):
    topo = mesh([3, 3], 50e9, 0.5e-6)
    coll = _all(topo, kind, 1 << 12, root=4)
    _assert_good(compile_scale(topo, coll, PARAMS), coll)


def test_rank_subset_relays_through_its_ranks_only():
    topo = mesh([3, 3], 50e9)
    coll = Collective(K.ALLGATHER, 1 << 12, (0, 1, 2, 5, 8))
    s = compile_scale(topo, coll, PARAMS)
    _assert_good(s, coll)
    assert {t.src for t in s.transfers} <= {topo.gpu(r) for r in coll.ranks}


def test_rail_alltoall():
    topo = rail_optimized(3, 4, 450e9, 50e9, 0.7e-6, 1.3e-6)
    coll = _all(topo, K.ALLTOALL, 1 << 28)
    s = compile_scale(topo, coll, PARAMS)
    _assert_good(s, coll)
    assert any("rail AlltoAll" in n for n in s.info.notes)
    # only the NICs limit it: within 5% of the max-concurrent-flow bound
    assert s.finish_time_s <= 1.05 * lower_bound(topo, coll).seconds


def test_other_switch_topologies_are_refused():
    topo = star(4, 50e9)
    with pytest.raises(SolverError, match="GPU-only"):
        compile_scale(topo, _all(topo, K.ALLGATHER), PARAMS)


def test_subchunk_ids_keep_their_chunk():
    topo = mesh([4, 4], 50e9)
    coll = _all(topo, K.ALLTOALL, 1 << 16, chunks_per_rank=2)
    sub, tau, k = scale_plan(topo, coll)
    assert sub.chunks_per_rank == 2 * k and tau == sub.chunk_bytes / 50e9
    old = {c.id: c for c in coll.chunks()}
    for c in sub.chunks():
        assert (c.sources, c.destinations) == (old[c.id // k].sources, old[c.id // k].destinations)


def test_orbit_list_schedule_is_feasible_and_cpsat_no_worse():
    topo = torus([4, 4], 1e9)
    p = build_problem(topo, _all(topo, K.ALLGATHER, 1 << 12, chunks_per_rank=4), "fastest")
    orb, *_ = _orbit(torus_symmetry(topo), 4, p)
    start = list_schedule(orb)
    for e, parent in enumerate(orb.parent):
        assert parent < 0 or start[e] >= start[parent] + orb.delay
    for c in set(orb.cls.tolist()):
        assert np.bincount(start[orb.cls == c]).max() <= orb.capacity
    better, _ = improve_cpsat(orb, start, 5.0)
    assert orb.lower_bound() <= orb.makespan(better) <= orb.makespan(start)


def test_orbit_with_slow_links_respects_occupancy():
    orb = Orbit(np.array([-1, -1, 0]), np.array([0, 0, 0]), delay=3, occupancy=2)
    start = list_schedule(orb)
    assert sorted(start.tolist()[:2]) == [0, 2] and start[2] >= start[0] + 3


def test_first_bits_match_numpy():
    rng = np.random.default_rng(1)
    dense = rng.random((20, 150)) < 0.05
    m = bitsets.zeros(20, 150)
    r, c = np.nonzero(dense)
    bitsets.set_bits(m, r, c)
    starts = rng.integers(0, 150, size=20)
    want = []
    for row, s in zip(dense, starts, strict=True):
        hits = [b for b in list(range(s, 150)) + list(range(s)) if row[b]]
        want.append(hits[0] if hits else -1)
    assert bitsets.first_bits_from(m, starts).tolist() == want
    assert bitsets.nbits(m).tolist() == dense.sum(axis=1).tolist()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_disjoint_tiers_narrow_as_the_masks_one_after_another(seed, ntiers):
    rng = np.random.default_rng(seed)
    links, bits = 12, 130
    tier_of = rng.integers(-1, ntiers, size=(links, bits))  # -1: in no tier
    tiers = tuple(bitsets.zeros(links, bits) for _ in range(ntiers))
    for k, tier in enumerate(tiers):
        bitsets.set_bits(tier, *np.nonzero(tier_of == k))
    cand = bitsets.zeros(8, bits)
    bitsets.set_bits(cand, *np.nonzero(rng.random((8, bits)) < 0.1))
    rows = rng.integers(0, links, size=8)
    one_after_another = cand.copy()
    for tier in tiers:
        on = one_after_another & tier[rows]
        one_after_another = np.where(on.any(axis=1, keepdims=True), on, one_after_another)
    _first_tier(cand, rows, tiers)
    assert (cand == one_after_another).all()


def test_scale_method_for_auto():
    rail = rail_optimized(2, 2, 450e9, 50e9)
    assert scale_method(rail, _all(rail, K.ALLTOALL)) == "rail-alltoall"
    assert scale_method(rail, _all(rail, K.ALLGATHER)) == "hierarchical"
    m = mesh([4, 4], 50e9)
    assert scale_method(m, _all(m, K.ALLTOALL)) == "flow-alltoall"
    assert scale_method(m, _all(m, K.BROADCAST, root=0)) == "greedy"
    assert scale_method(m, _all(m, K.ALLGATHER)) == "trees"
    assert scale_method(m, _all(m, K.REDUCESCATTER)) == "greedy"
    big = mesh([8, 8], 50e9)
    assert scale_method(big, _all(big, K.ALLGATHER)) == "greedy"
    t = torus([4, 4], 50e9)
    assert scale_method(t, _all(t, K.REDUCESCATTER)) == "symmetry"
    assert scale_method(t, Collective(K.ALLGATHER, 1 << 16, (0, 1, 2))) == "greedy"


def test_subchunking_keeps_1024_gpus_loadable_by_the_msccl_reader():
    # 1023 receives per sub-chunk factor: beyond two sub-chunks a rank's steps would not fit
    from te_ccl.runtime_limits import MSCCL
    from te_ccl.topology.generators import torus as make_torus

    topo = make_torus([32, 32], 50e9, 0.5e-6)
    for kind in (CollectiveKind.ALLGATHER, CollectiveKind.ALLREDUCE):
        c = Collective(kind, 2**30, tuple(range(1024)))
        _, _, k = scale_plan(topo, c)
        phases = 2 if kind is CollectiveKind.ALLREDUCE else 1
        assert 1 <= k and 1 + 1024 + phases * 1023 * k < MSCCL.max_elements
    small = Collective(CollectiveKind.ALLGATHER, 2**30, tuple(range(16)))
    assert scale_plan(make_torus([4, 4], 50e9, 0.5e-6), small)[2] > 2  # 16 GPUs: no cap bites


@pytest.mark.parametrize("dims, most_leaves", [([8, 8, 8], 120), ([32, 32], 64), ([8, 8], 16)])
def test_torus_tree_is_balanced_with_few_leaves(dims, most_leaves):
    # each direction carries the same number of tree edges (within one), and most nodes
    # forward (one fused MSCCL step); the least-used-direction BFS alone left 195 / 286 / 22
    from te_ccl.backends.scale.symmetry import orbit_trees, tree_leaves

    sym = torus_symmetry(torus(dims, 50e9))
    tree = orbit_trees(sym)[0]
    loads = np.bincount([c for _, c in tree], minlength=len(sym.classes))
    assert len(tree) == int(np.prod(dims)) - 1 and loads.max() - loads.min() <= 1
    assert tree_leaves(sym) <= most_leaves


def test_greedy_relays_forward_what_they_receive():
    # a link prefers chunks its source has not forwarded yet: here a chunk ends at 52
    # leaves of 255 receivers on average (63 without the preference; seeded greedy)
    topo = mesh([16, 16], 50e9, 0.5e-6)
    coll = _all(topo, K.ALLGATHER, 1 << 20, chunks_per_rank=2)
    p = build_problem(topo, coll, coll.chunk_bytes / 50e9)
    moves = solve_scale(p, PARAMS, Budget.of(LIMIT_S)).transfers
    senders: dict[int, set[str]] = {}
    receivers: dict[int, set[str]] = {}
    for t in moves:
        senders.setdefault(t.chunk, set()).add(t.src)
        receivers.setdefault(t.chunk, set()).add(t.dst)
    leaves = np.mean([len(receivers[c] - senders[c]) for c in receivers])
    assert leaves < 57


@pytest.mark.slow
def test_greedy_relays_go_straight_on_through_a_mesh():
    # a link prefers what arrived from the opposite neighbour, so that a relay's fused
    # steps pair the same receive and send peers on every MSCCL channel: 91% of the
    # interior relays forward straight on first (67% without the preference; seeded)
    topo = mesh([16, 16], 50e9, 0.5e-6)
    coll = _all(topo, K.ALLGATHER, 1 << 20, chunks_per_rank=2)
    p = build_problem(topo, coll, coll.chunk_bytes / 50e9)
    came, first = {}, {}
    for t in sorted(solve_scale(p, PARAMS, Budget.of(LIMIT_S)).transfers, key=lambda t: t.start_epoch):
        came[(t.chunk, t.dst)] = t.src
        first.setdefault((t.chunk, t.src), t.dst)

    def at(node: str) -> np.ndarray:
        return np.array(divmod(int(node[1:]), 16))

    straight = [np.array_equal(at(v) - at(u), at(u) - at(came[(c, u)]))
                for (c, u), v in first.items()
                if (c, u) in came and ((at(u) > 0) & (at(u) < 15)).all()]
    assert np.mean(straight) > 0.85


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.floats(0.1, 0.9), st.integers(0, 10_000))
def test_greedy_pairing_is_one_to_one_between_neighbours(n, density, seed):
    import networkx as nx

    from te_ccl.backends.scale.greedy import _pairing

    g = nx.gnp_random_graph(n, density, seed=seed)
    for u in g:
        ns = sorted(g[u])
        pairs = _pairing(u, ns, ns, g)
        assert len(set(pairs.values())) == len(pairs)
        assert all(v in ns and w in ns and v != w for v, w in pairs.items())
        if len(ns) >= 2:
            assert pairs  # someone forwards first


@pytest.mark.parametrize("topo", [torus([4, 4], 50e9, 0.5e-6), mesh([4, 4], 50e9, 0.5e-6)],
                         ids=["torus4x4", "mesh4x4"])
def test_an_allreduce_whose_all_gather_is_solved_in_a_forked_process_is_the_same(
        topo, monkeypatch):
    import te_ccl.backends.scale.plan as plan

    coll = _all(topo, K.ALLREDUCE)
    in_turn = compile_scale(topo, coll, PARAMS)
    forked = []
    real = plan.in_background

    def fork(fn, *args):
        forked.append(args)
        return real(fn, *args)

    monkeypatch.setattr(plan, "WORTH_FORKING", 0)
    monkeypatch.setattr(plan, "workers", lambda: 2)
    monkeypatch.setattr(plan, "in_background", fork)
    beside = compile_scale(topo, coll, PARAMS)
    assert len(forked) == 1
    assert beside.transfers == in_turn.transfers and beside.info.notes == in_turn.info.notes
    _assert_good(beside, coll)


def test_the_greedy_jumps_over_epochs_in_which_nothing_can_move():
    """Nothing moved: the next epoch is the first arrival or link freed, and the skipped
    epochs' random draws are made (the schedule is the one epoch after epoch gives)."""
    import numpy as np

    from te_ccl.backends.scale.greedy import _next_epoch

    free_at = np.array([0, 9, 30])
    assert _next_epoch(5, 1, {40: []}, free_at, None) == 6  # something moved
    assert _next_epoch(5, 0, {40: []}, free_at, None) == 9  # a link is free again
    assert _next_epoch(9, 0, {40: []}, free_at, None) == 30
    mine, ref = np.random.default_rng(1), np.random.default_rng(1)
    assert _next_epoch(30, 0, {40: []}, free_at, (mine, 8, [3, 2])) == 40
    for _ in range(31, 40):
        ref.integers(0, 8, size=3), ref.integers(0, 8, size=2)
    assert mine.integers(0, 1 << 30) == ref.integers(0, 1 << 30)


def test_a_symmetric_torus_takes_no_sub_chunks_that_do_not_pay():
    # its links are busy from the start: beyond whole sub-chunks per link, more pieces
    # only add transfers (torus 8×8 AllGather 64 MB took 12, replaying as at 4)
    from te_ccl.simulate.replay import replay_finish

    t8 = torus([8, 8], 50e9, 0.5e-6)
    assert scale_plan(t8, _all(t8, K.ALLGATHER, 64 << 20))[2] == 4
    topo = torus([4, 4], 50e9, 0.5e-6)
    few = compile_scale(topo, _all(topo, K.ALLGATHER, 1 << 30), PARAMS)
    # 48 pieces per chunk: the collective cut into 48 chunks, none cut further
    many = compile_scale(topo, _all(topo, K.ALLGATHER, 1 << 30, chunks_per_rank=48),
                         replace(PARAMS, max_subchunks=1))
    assert few.info.subchunks == 4 and len(many.transfers) == 12 * len(few.transfers)
    assert replay_finish(few) <= replay_finish(many) * (1 + 1e-4)
