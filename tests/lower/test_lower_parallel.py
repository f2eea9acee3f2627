"""At scale the per-GPU passes (thread blocks, dependencies, XML) run in forked processes:
the bytes are those of running every GPU in turn, whatever part a GPU falls in."""

from __future__ import annotations

import os

import pytest

import te_ccl.lower.msccl.parallel as parallel
import te_ccl.lower.msccl.passes as passes
from te_ccl.errors import SpecError
from te_ccl.lower.msccl import lower_to_msccl


def _forking(monkeypatch, n: int) -> None:
    monkeypatch.setattr(passes, "FORK_FROM", 0)
    monkeypatch.setattr(passes, "workers", lambda: n)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("inplace", [False, True])
def test_forked_parts_give_the_bytes_of_one_pass(kit, monkeypatch, n, inplace):
    schedule = kit.ring_allgather(8, inplace)
    in_turn = lower_to_msccl(schedule, max_steps=4)
    _forking(monkeypatch, n)
    assert lower_to_msccl(schedule, max_steps=4) == in_turn


def test_a_forked_part_over_the_step_budget_reruns_the_channels_as_in_turn(kit, monkeypatch):
    real = parallel.lower_gpu

    def tight(g, *args):
        budget = args[4]
        if g == 5 and budget > 40:  # GPU 5 falls in a forked part
            raise parallel.NopOverflow(budget - 40)
        return real(g, *args)

    monkeypatch.setattr(parallel, "lower_gpu", tight)
    schedule = kit.ring_allgather(8)
    in_turn = lower_to_msccl(schedule)
    _forking(monkeypatch, 2)
    assert lower_to_msccl(schedule) == in_turn


@pytest.mark.parametrize("forks", [1, 2])
def test_the_budget_is_cut_once_by_the_worst_excess_of_any_gpu(kit, monkeypatch, forks):
    real, budgets = parallel.lower_gpu, []

    def over(g, *args):
        budget = args[4]
        budgets.append(budget)
        excess = {1: budget - 50, 6: budget - 40}.get(g, 0)  # GPU 6 is the worst
        if excess > 0:
            raise parallel.NopOverflow(excess)
        return real(g, *args)

    monkeypatch.setattr(parallel, "lower_gpu", over)
    if forks > 1:
        _forking(monkeypatch, forks)
    lower_to_msccl(kit.ring_allgather(8))
    assert sorted(set(budgets), reverse=True) == [60, 40]  # one rerun, at the worst's budget


@pytest.mark.parametrize("n", [2, 3])
def test_forked_fusion_search_gives_the_fusions_of_one_pass(kit, n):
    from te_ccl.lower.msccl.buffers import buffer_layout
    from te_ccl.lower.msccl.collapse_switches import collapse_switches
    from te_ccl.lower.msccl.ir import Op

    schedule = kit.ring_allreduce(8)
    layout = buffer_layout(schedule.collective)
    edges = collapse_switches(schedule)
    (base, in_turn), (forked_base, forked) = (parallel.instructions_and_fusions(edges, layout, 1),
                                              parallel.instructions_and_fusions(edges, layout, n))
    assert in_turn and {f.op for f in in_turn} > {Op.RECV_COPY_SEND}
    assert forked_base == base and forked == in_turn
    # the instructions themselves, as the channel pass and apply_fusions know them
    kept = {id(ins) for seq in forked_base.values() for ins in seq}
    assert all(id(f.recv) in kept and id(f.send) in kept for f in forked)


def test_a_lowering_in_a_child_process_gives_its_bytes_notes_and_progress(kit, monkeypatch):
    schedule = kit.ring_allreduce(8)
    heard_here: list[str] = []
    notes_here: list[str] = []
    here = lower_to_msccl(schedule, max_steps=8, progress=heard_here.append, notes=notes_here)
    real, parent = passes.told, os.getpid()

    def says_where(fn, hear, *args):  # the lowering, saying first where it runs
        def where(tell, *inner):
            tell(f"in the parent: {os.getpid() == parent}")
            return fn(tell, *inner)

        return real(where, hear, *args)

    monkeypatch.setattr(passes, "told", says_where)
    monkeypatch.setattr(passes, "CHILD_FROM", 0)
    heard: list[str] = []
    notes: list[str] = []
    data = lower_to_msccl(schedule, max_steps=8, progress=heard.append, notes=notes)
    assert data == here and notes == notes_here
    assert heard == ["in the parent: False", *heard_here]


def test_a_lowering_in_a_child_process_raises_what_it_would_raise_here(kit, monkeypatch):
    schedule = kit.ring_allgather(8)
    with pytest.raises(SpecError) as here:
        lower_to_msccl(schedule, proto="Fast")
    monkeypatch.setattr(passes, "CHILD_FROM", 0)
    with pytest.raises(SpecError) as there:
        lower_to_msccl(schedule, proto="Fast")
    assert str(there.value) == str(here.value) and there.value.key == "proto"


@pytest.mark.parametrize("forks", [1, 2, 3, 4])
def test_parts_cover_the_gpus_in_order_and_the_first_is_the_largest(forks):
    for n in range(40):
        parts = parallel.deal(list(range(n)), forks)
        assert len(parts) == forks
        assert [g for part in parts for g in part] == list(range(n))
        assert len(parts[0]) >= max(len(part) for part in parts)


def _mesh_allreduce():
    from te_ccl.api import compile as compile_

    return compile_("mesh4x4", "allreduce", size="1MB", chunks=1, backend="scale").schedule


def test_the_halves_split_connections_and_give_up_only_fusions_that_turn_back(monkeypatch):
    """Every edge is in the half of its direction (to a higher or a lower GPU position),
    and a fusion stays a candidate of its half unless its two edges go different ways;
    no halves where more than HALVES_GIVE_UP of the fusions would turn (at 16 GPUs, a
    quarter of them change direction: every chain turns within 4 hops) and a rank would
    then need more than HALVES_ROOM of the reader's room (none here)."""
    from te_ccl.lower.msccl.buffers import buffer_layout
    from te_ccl.lower.msccl.collapse_switches import collapse_switches
    from te_ccl.lower.msccl.instructions import build_instructions, fusion_candidates

    schedule = _mesh_allreduce()
    edges = collapse_switches(schedule)
    layout = buffer_layout(schedule.collective)
    instrs = build_instructions(edges, layout)
    fusions = [f for g in sorted(instrs) for f in fusion_candidates(instrs[g], layout)]
    turning = [f for f in fusions
               if (f.recv.recv.dst > f.recv.recv.src) != (f.send.send.dst > f.send.send.src)]
    assert parallel.split_halves(edges, fusions, 16, 0) is None  # below HALVES_FROM edges
    monkeypatch.setattr(parallel, "HALVES_FROM", 0)
    assert len(turning) > parallel.HALVES_GIVE_UP * len(fusions)
    assert parallel.split_halves(edges, fusions, 16, 0) is None
    monkeypatch.setattr(parallel, "HALVES_GIVE_UP", 1.0)
    halves = parallel.split_halves(edges, fusions, 16, 0)
    assert halves is not None
    (higher, up), (lower, down) = halves
    assert sorted(higher + lower) == sorted(edges)
    assert all(e.dst > e.src for e in higher) and all(e.dst < e.src for e in lower)
    assert all(f.recv.recv.dst > f.recv.recv.src and f.send.send.dst > f.send.send.src
               for f in up)
    assert all(f.recv.recv.dst < f.recv.recv.src and f.send.send.dst < f.send.send.src
               for f in down)
    assert len(up) + len(down) + len(turning) == len(fusions)
    assert parallel.split_halves(higher, up, 16, 0) is None  # one direction only: nothing to split


def test_halves_that_give_up_many_fusions_only_where_every_rank_keeps_room(monkeypatch):
    """More than HALVES_GIVE_UP of the fusions turning is no reason to run whole where
    every rank's steps, counted as its edges in and out less its fusions inside the
    halves, stay within HALVES_ROOM of the reader's room; above, it runs whole."""
    import math
    from collections import Counter

    from te_ccl.lower.msccl.buffers import buffer_layout
    from te_ccl.lower.msccl.collapse_switches import collapse_switches
    from te_ccl.lower.msccl.instructions import build_instructions, fusion_candidates

    schedule = _mesh_allreduce()
    edges = collapse_switches(schedule)
    layout = buffer_layout(schedule.collective)
    instrs = build_instructions(edges, layout)
    fusions = [f for g in sorted(instrs) for f in fusion_candidates(instrs[g], layout)]
    monkeypatch.setattr(parallel, "HALVES_FROM", 0)
    steps = Counter(e.src for e in edges) + Counter(e.dst for e in edges)
    steps.subtract(f.recv.gpu for f in fusions
                   if (f.recv.recv.dst > f.recv.recv.src) == (f.send.send.dst > f.send.send.src))
    most = max(steps.values())
    room = math.ceil(most / parallel.HALVES_ROOM)  # the fewest steps that hold it
    assert parallel.split_halves(edges, fusions, 16, room) is not None
    assert parallel.split_halves(edges, fusions, 16, room - 2) is None


def test_channels_found_in_halves_give_a_verified_file_that_keeps_the_timing(kit, monkeypatch):
    """The two halves run at once, each with half of the thread blocks a GPU may have
    waited for; the file they make is valid and replays as the schedule does."""
    from te_ccl.runtime_limits import MSCCL
    from te_ccl.simulate.msccl import simulate_msccl
    from te_ccl.simulate.replay import simulate_schedule

    schedule = _mesh_allreduce()
    calls: list[int] = []
    real = parallel.assign_channels

    def assign(edges, *args, **kwargs):
        calls.append(kwargs.get("waitable", MSCCL.max_depid + 1))
        return real(edges, *args, **kwargs)

    monkeypatch.setattr(parallel, "assign_channels", assign)
    monkeypatch.setattr(parallel, "HALVES_FROM", 0)
    monkeypatch.setattr(parallel, "HALVES_GIVE_UP", 1.0)  # at 16 GPUs a quarter turn
    xml = lower_to_msccl(schedule)
    assert calls == [(MSCCL.max_depid + 1) // 2]  # the other half's call is in its process
    kit.assert_verifies(xml)
    lowered = simulate_msccl(xml.decode(), schedule.topology, schedule.collective.size_bytes)
    assert lowered.finish_time_s <= 1.01 * simulate_schedule(schedule).finish_time_s
