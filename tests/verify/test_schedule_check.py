"""The independent schedule checker: accepts correct schedules, names every broken rule."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.collective import Collective, CollectiveKind, CustomDemand
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule

TAU = 1e-6  # 1000-byte chunks on 1 GB/s links: one epoch per chunk


def ring(n: int, bw: float = 1e9) -> Topology:
    nodes = [Node(f"g{i}") for i in range(n)]
    links = [Link(f"g{i}", f"g{(i + 1) % n}", bw) for i in range(n)]
    return Topology.build(f"ring{n}", nodes, links)


def ring_allgather(n: int) -> Schedule:
    """Unidirectional ring AllGather: chunk r moves one hop per epoch for n-1 epochs."""
    coll = Collective(CollectiveKind.ALLGATHER, 1000 * n, tuple(range(n)))
    transfers = tuple(Transfer(r, f"g{(r + e) % n}", f"g{(r + e + 1) % n}", e, e + 1)
                      for r in range(n) for e in range(n - 1))
    return Schedule(ring(n), coll, TAU, transfers)


def ring_reducescatter(n: int) -> Schedule:
    """Ring ReduceScatter: the partial of chunk d starts at d+1 and accumulates towards d."""
    coll = Collective(CollectiveKind.REDUCESCATTER, 1000 * n, tuple(range(n)))
    transfers = tuple(Transfer(d, f"g{(d + 1 + e) % n}", f"g{(d + 2 + e) % n}", e, e + 1, "reduce")
                      for d in range(n) for e in range(n - 1))
    return Schedule(ring(n), coll, TAU, transfers)


def rules(s: Schedule) -> set[str]:
    return {v.rule for v in check_schedule(s)}


def test_ring_allgather_and_reducescatter_are_correct():
    assert check_schedule(ring_allgather(5)) == []
    assert check_schedule(ring_reducescatter(5)) == []


def test_missing_link_and_early_arrival():
    s = ring_allgather(4)
    bad = replace(s, transfers=s.transfers + (Transfer(0, "g0", "g2", 0, 1),))
    assert "link" in rules(bad)
    early = replace(s, transfers=(replace(s.transfers[0], arrive_epoch=0),) + s.transfers[1:])
    assert "timing" in rules(early)


def test_capacity_one_chunk_per_epoch():
    s = ring_allgather(4)
    # chunk 1 also sent by g0 in epoch 1 while g0 forwards chunk 3: two starts on g0->g1.
    extra = Transfer(1, "g1", "g2", 0, 1)
    assert "capacity" in rules(replace(s, transfers=s.transfers + (extra,)))


def test_slow_link_busy_several_epochs():
    topo = Topology.build("slow", [Node("a"), Node("b")], [Link("a", "b", 0.5e9), Link("b", "a", 0.5e9)])
    coll = Collective(CollectiveKind.BROADCAST, 2000, (0, 1), chunks_per_rank=2, root=0)
    ok = (Transfer(0, "a", "b", 0, 2), Transfer(1, "a", "b", 2, 4))
    assert check_schedule(Schedule(topo, coll, TAU, ok)) == []
    overlap = (Transfer(0, "a", "b", 0, 2), Transfer(1, "a", "b", 1, 3))
    assert rules(Schedule(topo, coll, TAU, overlap)) == {"capacity"}


def test_send_before_holding():
    s = ring_allgather(4)
    late = [replace(t, start_epoch=t.start_epoch + 1, arrive_epoch=t.arrive_epoch + 1)
            if t.chunk == 0 and t.start_epoch == 0 else t for t in s.transfers]
    # chunk 0 now reaches g1 at epoch 2 but g1 still forwards it at epoch 1
    assert "hold" in rules(replace(s, transfers=tuple(late)))


def test_double_counted_reduction():
    s = ring_reducescatter(4)
    extra = Transfer(0, "g1", "g2", 3, 4, "reduce")
    assert "double" in rules(replace(s, transfers=s.transfers + (extra,)))


def test_reduce_op_on_copy_chunk_is_rejected():
    s = ring_allgather(3)
    bad = (replace(s.transfers[0], op="reduce"),) + s.transfers[1:]
    assert "chunk" in rules(replace(s, transfers=bad))


def star(can_copy: bool) -> Topology:
    nodes = [Node("g0"), Node("g1"), Node("g2"), Node("sw", NodeKind.SWITCH, can_copy=can_copy)]
    links = [Link(f"g{i}", "sw", 1e9) for i in range(3)] + [Link("sw", f"g{i}", 1e9) for i in range(3)]
    return Topology.build("star", nodes, links)


def test_switch_without_buffer_forwards_in_arrival_epoch_and_copies_only_if_allowed():
    coll = Collective(CollectiveKind.BROADCAST, 1000, (0, 1, 2), root=0)
    copy = (Transfer(0, "g0", "sw", 0, 1), Transfer(0, "sw", "g1", 1, 2), Transfer(0, "sw", "g2", 1, 2))
    assert check_schedule(Schedule(star(True), coll, TAU, copy)) == []
    assert "switch" in rules(Schedule(star(False), coll, TAU, copy))
    held_over = (Transfer(0, "g0", "sw", 0, 1), Transfer(0, "sw", "g1", 1, 2),
                 Transfer(0, "sw", "g2", 2, 3))
    assert "hold" in rules(Schedule(star(True), coll, TAU, held_over))


def test_buffer_limit_counts_relayed_chunks():
    topo = Topology.build("line", [Node("a"), Node("b", buffer_bytes=500), Node("c")],
                          [Link("a", "b", 1e9), Link("b", "c", 1e9), Link("c", "b", 1e9),
                           Link("b", "a", 1e9)])
    coll = Collective(CollectiveKind.CUSTOM, 1000, (0, 1, 2), chunks_per_rank=1,
                      demands=(CustomDemand(0, (2,)),))
    s = Schedule(topo, coll, TAU, (Transfer(0, "a", "b", 0, 1), Transfer(0, "b", "c", 1, 2)))
    assert rules(s) == {"buffer"}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 6), data=st.data())
def test_any_single_mutation_of_a_correct_schedule_is_caught_or_harmless(n, data):
    """Dropping a transfer always breaks AllGather on a ring; shifting arrival earlier breaks timing."""
    s = ring_allgather(n)
    i = data.draw(st.integers(0, len(s.transfers) - 1))
    dropped = s.transfers[:i] + s.transfers[i + 1:]
    assert rules(replace(s, transfers=dropped)) & {"hold", "demand"}
    t = s.transfers[i]
    earlier = s.transfers[:i] + (replace(t, arrive_epoch=t.start_epoch),) + s.transfers[i + 1:]
    assert "timing" in rules(replace(s, transfers=earlier))


def test_buffered_switch_without_reduce_forwards_each_partial_once():
    nodes = [Node("g0"), Node("g1"), Node("g2"),
             Node("sw", NodeKind.SWITCH, can_copy=False, has_buffer=True)]
    links = [Link(f"g{i}", "sw", 1e9) for i in range(3)] + [Link("sw", f"g{i}", 1e9) for i in range(3)]
    topo = Topology.build("bstar", nodes, links)
    coll = Collective(CollectiveKind.REDUCE, 1000, (0, 1, 2), root=0)
    ok = (Transfer(0, "g1", "sw", 0, 1, "reduce"), Transfer(0, "g2", "sw", 0, 1, "reduce"),
          Transfer(0, "sw", "g0", 1, 2, "reduce"), Transfer(0, "sw", "g0", 2, 3, "reduce"))
    assert check_schedule(Schedule(topo, coll, TAU, ok)) == []
    # a third forward has no unit left to send
    extra = ok + (Transfer(0, "sw", "g0", 3, 4, "reduce"),)
    assert "hold" in rules(Schedule(topo, coll, TAU, extra))


def test_every_rank_that_lacks_a_chunk_is_named_before_or_after_one_that_holds_it_whole():
    """Chunk 0 reaches ranks 1 and 2 (one value, copied on), not rank 3; chunk 1 reaches
    every rank but rank 0, the first one looked at."""
    s = ring_allgather(4)
    cut = tuple(t for t in s.transfers
                if (t.chunk, t.dst) not in {(0, "g3"), (0, "g0"), (1, "g0")})
    named = [v.message for v in check_schedule(replace(s, transfers=cut)) if v.rule == "demand"]
    assert named == ["rank 3 (g3) lacks chunk 0 at the end (holds nothing)",
                     "rank 0 (g0) lacks chunk 1 at the end (holds nothing)"]
