"""The continuous-time replay: contention, slow links, switches, reductions, errors."""

import pytest

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.errors import VerificationError
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate import Task, chain_length, run, simulate_schedule
from te_ccl.simulate.replay import replay_finish
from te_ccl.topology import Link, Node, NodeKind, Topology

US = 1e-6


def topo(links, gpus, switches=(), buffer=False):
    nodes = [Node(g) for g in gpus] + [Node(s, NodeKind.SWITCH, has_buffer=buffer)
                                       for s in switches]
    return Topology.build("t", nodes, [Link(*x) for x in links])


def close(a, b):
    return a == pytest.approx(b, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("buffer,finish", [(False, 2), (True, 3)])
def test_shared_link_serialises_chunks_through_a_switch(buffer, finish):
    # a -> s -> b and c -> s -> b share s->b: the second chunk waits for the first. A
    # switch without buffer forwards a's chunk as it comes in (s->b busy 0-1 us, then c's
    # 1-2 us); one that buffers forwards it once it is in (1-2 us, then c's 2-3 us).
    t = topo([("a", "s", 1e9), ("c", "s", 1e9), ("s", "b", 1e9)], "abc", ["s"], buffer)
    coll = Collective(CollectiveKind.GATHER, 3000, (0, 1, 2), root=1)
    sched = Schedule(t, coll, US, (
        Transfer(0, "a", "s", 0, 1), Transfer(0, "s", "b", 1, 2),
        Transfer(2, "c", "s", 1, 2), Transfer(2, "s", "b", 2, 3)))
    r = simulate_schedule(sched)
    assert close(r.finish_time_s, finish * US) and close(r.gpu_finish_s["b"], finish * US)
    assert close(r.gpu_finish_s["a"], 0.0)
    use = {(u.src, u.dst): u for u in r.links}
    assert use[("s", "b")].transfers == 2 and close(use[("s", "b")].busy_s, 2 * US)
    assert close(use[("s", "b")].utilisation, 2 / finish)
    assert r.finish_time_s <= sched.finish_time_s + 1e-15


def test_cut_through_is_held_by_the_slower_link_and_delayed_by_alpha():
    # a -> s at 1 GB/s (α 1 us), s -> b at 2 GB/s (α 0.5 us): the head reaches s at 1 us
    # and goes on at once, but the tail leaves s only once in (1 us busy + α = 2 us):
    # arrival max over links of (start + size/b) + Σα = max(0 + 1, 0 + 0.5) + 1 + 0.5 =
    # 2.5 us, where store-and-forward takes 1 + 1 + 0.5 + 0.5 = 3 us.
    t = topo([("a", "s", 1e9, US), ("s", "b", 2e9, 0.5 * US)], "ab", ["s"])
    times = run(t, [Task(("a", "s"), 1000), Task(("s", "b"), 1000, after_all=(0,),
                                                   through=True)])
    assert close(times[1].start_s, 1 * US) and close(times[1].end_s, 2 * US)
    assert close(times[1].arrive_s, 2.5 * US)


def test_link_order_is_the_schedules_not_arrival_order():
    # c's chunk is ready first but the schedule puts a's chunk first on s->b.
    t = topo([("a", "s", 1e9, 2 * US), ("c", "s", 1e9), ("s", "b", 1e9)], "abc", ["s"])
    coll = Collective(CollectiveKind.GATHER, 3000, (0, 1, 2), root=1)
    sched = Schedule(t, coll, US, (
        Transfer(0, "a", "s", 0, 3), Transfer(0, "s", "b", 3, 4),
        Transfer(2, "c", "s", 3, 4), Transfer(2, "s", "b", 4, 5)))
    r = simulate_schedule(sched)
    first = [iv for iv in r.intervals if (iv.src, iv.dst) == ("s", "b")]
    assert [iv.label for iv in sorted(first, key=lambda iv: iv.start_s)] == ["c0", "c2"]
    assert close(r.finish_time_s, 4 * US)  # c0 on s->b 2-3 us (cut-through), c2 3-4 us


def test_dynamic_order_serves_first_ready():
    t = topo([("a", "b", 1e9)], "ab")
    times = run(t, [Task(("a", "b"), 1000, after_all=(1,)), Task(("a", "b"), 500)])
    assert close(times[1].start_s, 0) and close(times[0].start_s, 0.5 * US)
    assert close(times[0].arrive_s, 1.5 * US)


def test_multi_epoch_slow_link_and_alpha():
    # a->b: 4 us busy + 0.5 us alpha (5 epochs of 1 us); b->c: 1 us.
    t = topo([("a", "b", 0.25e9, 0.5 * US), ("b", "c", 1e9)], "abc")
    coll = Collective(CollectiveKind.BROADCAST, 2000, (0, 1, 2), chunks_per_rank=2, root=0)
    sched = Schedule(t, coll, US, (
        Transfer(0, "a", "b", 0, 5), Transfer(1, "a", "b", 4, 9),
        Transfer(0, "b", "c", 5, 6), Transfer(1, "b", "c", 9, 10)))
    r = simulate_schedule(sched)
    assert close(r.gpu_finish_s["b"], 8.5 * US) and close(r.finish_time_s, 9.5 * US)
    assert close({(u.src, u.dst): u for u in r.links}[("a", "b")].busy_s, 8 * US)
    L = chain_length(sched)
    assert L == 3
    assert sched.finish_time_s - L * US < r.finish_time_s <= sched.finish_time_s


def test_reduce_waits_for_every_earlier_partial():
    # a and c reduce into x (c's link is slow), x forwards the sum to root r.
    t = topo([("a", "x", 1e9), ("c", "x", 1e9, 3 * US), ("x", "r", 1e9)], "acxr")
    coll = Collective(CollectiveKind.REDUCE, 1000, (0, 1, 2, 3), root=3)
    sched = Schedule(t, coll, US, (
        Transfer(0, "a", "x", 0, 1, "reduce"), Transfer(0, "c", "x", 0, 4, "reduce"),
        Transfer(0, "x", "r", 4, 5, "reduce")))
    r = simulate_schedule(sched)
    assert close(r.finish_time_s, 5 * US)
    assert close([iv for iv in r.intervals if iv.src == "x"][0].start_s, 4 * US)


def test_allreduce_ring_copy_phase_completes_on_copy():
    # 2-rank allreduce: reduce into b, copy back to a.
    t = topo([("a", "b", 1e9, 1 * US), ("b", "a", 1e9, 1 * US)], "ab")
    coll = Collective(CollectiveKind.ALLREDUCE, 1000, (0, 1), chunks_per_rank=1)
    assert coll.nchunks == 2
    sched = Schedule(t, coll, US, (
        Transfer(0, "a", "b", 0, 2, "reduce"), Transfer(0, "b", "a", 2, 4),
        Transfer(1, "b", "a", 0, 2, "reduce"), Transfer(1, "a", "b", 2, 4)))
    r = simulate_schedule(sched)  # 500-byte chunks: 0.5 us busy + 1 us alpha per hop
    assert close(r.gpu_finish_s["a"], 3 * US) and close(r.gpu_finish_s["b"], 3 * US)


def test_sending_before_holding_is_reported():
    t = topo([("a", "b", 1e9), ("b", "c", 1e9)], "abc")
    coll = Collective(CollectiveKind.BROADCAST, 1000, (0, 1, 2), root=0)
    sched = Schedule(t, coll, US, (Transfer(0, "b", "c", 0, 1), Transfer(0, "a", "b", 0, 1)))
    with pytest.raises(VerificationError, match="before it holds it"):
        simulate_schedule(sched)


def test_missing_delivery_and_missing_link_are_reported():
    t = topo([("a", "b", 1e9)], "abc")
    coll = Collective(CollectiveKind.BROADCAST, 1000, (0, 1, 2), root=0)
    with pytest.raises(VerificationError, match="never receives"):
        simulate_schedule(Schedule(t, coll, US, (Transfer(0, "a", "b", 0, 1),)))
    with pytest.raises(VerificationError, match="no link"):
        simulate_schedule(Schedule(t, coll, US, (Transfer(0, "a", "c", 0, 1),)))


def test_cyclic_dependencies_deadlock():
    t = topo([("a", "b", 1e9), ("b", "a", 1e9)], "ab")
    with pytest.raises(VerificationError, match="deadlocked"):
        run(t, [Task(("a", "b"), 1, after_all=(1,)), Task(("b", "a"), 1, after_all=(0,))])


def test_a_transfer_nobody_needed_still_counts_in_the_finish():
    # b has chunk 0 after the first send; the second send over the same link is redundant,
    # but the program (the MSCCL kernel) ends only when it is done too.
    t = topo([("a", "b", 1e9)], "ab")
    coll = Collective(CollectiveKind.BROADCAST, 1000, (0, 1), root=0)
    sched = Schedule(t, coll, US, (Transfer(0, "a", "b", 0, 1), Transfer(0, "a", "b", 1, 2)))
    r = simulate_schedule(sched)
    assert close(r.gpu_finish_s["b"], 1 * US)
    assert close(r.last_arrival_s, 2 * US) and close(r.finish_time_s, 2 * US)


def test_replay_finish_is_the_replays_finish_without_its_summary():
    t = topo([("a", "b", 1e9)], "ab")
    coll = Collective(CollectiveKind.BROADCAST, 1000, (0, 1), root=0)
    sched = Schedule(t, coll, US, (Transfer(0, "a", "b", 0, 1), Transfer(0, "a", "b", 1, 2)))
    assert replay_finish(sched) == simulate_schedule(sched).finish_time_s
    ring = topo([("a", "b", 1e9, 1 * US), ("b", "a", 1e9, 1 * US)], "ab")
    ar = Collective(CollectiveKind.ALLREDUCE, 1000, (0, 1), chunks_per_rank=1)
    sched = Schedule(ring, ar, US, (
        Transfer(0, "a", "b", 0, 2, "reduce"), Transfer(0, "b", "a", 2, 4),
        Transfer(1, "b", "a", 0, 2, "reduce"), Transfer(1, "a", "b", 2, 4)))
    assert replay_finish(sched) == simulate_schedule(sched).finish_time_s
