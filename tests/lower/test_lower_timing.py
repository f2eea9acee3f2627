"""The lowered file runs as the schedule says: at the runtime's real buffering (no deadlock
at the protocol's depth) and with the schedule's timing (its XML replay equals the
schedule's replay)."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace

import pytest
from lxml import etree

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.lower.msccl import build_program, lower_to_msccl
from te_ccl.lower.msccl.buffers import buffer_layout
from te_ccl.lower.msccl.collapse_switches import collapse_switches
from te_ccl.lower.msccl.instructions import build_instructions, fusion_candidates
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.simulate.replay import simulate_schedule
from te_ccl.verify.msccl.reader import read_msccl
from te_ccl.verify.msccl.verify import verify_msccl


def _replays(schedule: Schedule, xml: bytes) -> tuple[float, float]:
    algo = read_msccl(xml.decode())
    sim = simulate_msccl(algo, schedule.topology, schedule.collective.size_bytes)
    return simulate_schedule(schedule).finish_time_s, sim.finish_time_s


def _relay_then_own(kit) -> Schedule:
    """GPU 1 relays chunk 0 to GPU 2 and sends its own chunk there in the same epoch,
    the relay first: two channels on one link, and the link must keep that order."""
    tr = [Transfer(0, "g0", "g1", 0, 1), Transfer(0, "g1", "g2", 1, 2),
          Transfer(1, "g1", "g2", 1, 2), Transfer(1, "g1", "g0", 0, 1),
          Transfer(2, "g2", "g0", 0, 1), Transfer(2, "g2", "g1", 0, 1)]
    return Schedule(kit.full(3), kit.coll("allgather", 3), 1e-6, tuple(tr))


def test_sends_on_one_link_keep_the_schedules_order_across_channels(kit):
    schedule = _relay_then_own(kit)
    xml = lower_to_msccl(schedule)
    assert etree.fromstring(xml).get("nchannels") == "2"
    kit.assert_verifies(xml)
    sched, lowered = _replays(schedule, xml)
    # free-running thread blocks would send GPU 1's own chunk first (it is ready at 0)
    assert lowered == pytest.approx(sched)


def _forward_twice(kit) -> Schedule:
    """GPU 1 receives chunk 0 in epoch 0 and forwards it to GPUs 2 and 3 in epoch 3."""
    tr = [Transfer(0, "g0", "g1", 0, 1), Transfer(0, "g1", "g2", 3, 4),
          Transfer(0, "g1", "g3", 3, 4)]
    tr += [Transfer(p, f"g{p}", f"g{q}", 0, 1) for p in (1, 2, 3) for q in range(4) if q != p]
    return Schedule(kit.full(4), kit.coll("allgather", 4), 1e-6, tuple(tr))


def test_a_fusion_that_would_hold_up_another_send_is_not_made(kit):
    schedule = _forward_twice(kit)
    layout = buffer_layout(schedule.collective)
    base = build_instructions(collapse_switches(schedule), layout)
    found = fusion_candidates(base[1], layout)
    # fused with the first forward, the second would wait until the first has left
    assert [f.delays for f in found] == [True]
    xml = lower_to_msccl(schedule)
    assert "rcs" not in {st.get("type") for st in etree.fromstring(xml).iter("step")}
    kit.assert_verifies(xml)
    sched, lowered = _replays(schedule, xml)
    assert lowered == pytest.approx(sched)


def _elements(gpu, nranks: int) -> int:
    """What one rank costs the runtime's reader: ``<algo>``, every ``<gpu>``, its thread
    blocks and steps."""
    return 1 + nranks + sum(1 + len(tb.steps) for tb in gpu.threadblocks)


def test_ranks_over_the_element_limit_fuse_anyway_and_say_so(kit):
    import te_ccl.lower.msccl.passes as passes

    schedule = _forward_twice(kit)
    program = build_program(schedule)
    assert program.notes == ()
    runtime = replace(MSCCL, max_elements=_elements(program.gpus[1], 4) - 1)
    notes: list[str] = []
    xml = passes.lower_to_msccl(schedule, notes=notes, runtime=runtime)
    assert "rcs" in {st.get("type") for st in etree.fromstring(xml).iter("step")}
    assert len(notes) == 1 and "1 such fusion(s)" in notes[0]


@pytest.mark.parametrize("inplace", [False, True])
def test_ring8_alltoall_runs_at_two_slots_under_simple(inplace):
    """teccl's own ring8 AlltoAll 1 MB deadlocked when connections hold two sends."""
    from te_ccl.compiler import SolveParams, solve
    from te_ccl.spec.collective import load_collective
    from te_ccl.spec.topology import load_topology

    topo = load_topology("ring8")
    coll = load_collective(topo, None, collective="alltoall", size="1MB", inplace=inplace)
    schedule = solve(topo, coll, SolveParams(time_limit_s=20))
    simple = lower_to_msccl(schedule)
    assert verify_msccl(simple.decode()).valid  # the runtime's Simple buffering: 2 sends
    sched, lowered = _replays(schedule, simple)
    assert lowered == pytest.approx(sched, rel=1e-3)
    # lowered for LL (8 slots) the same schedule keeps more messages in flight on a
    # connection, so it needs fewer thread blocks
    ll = lower_to_msccl(schedule, proto="LL")
    assert verify_msccl(ll.decode()).valid  # LL: 8 sends
    tbs = [sum(1 for _ in etree.fromstring(x).iter("tb")) for x in (ll, simple)]
    assert tbs[0] < tbs[1]


def test_compiled_file_passes_the_verifier_at_two_slots_as_a_subprocess(tmp_path):
    out = tmp_path / "ring8.xml"
    run = [sys.executable, "-m", "te_ccl"]
    compiled = subprocess.run(run + ["compile", "ring8", "-c", "alltoall", "-s", "1MB",
                                     "--inplace", "-o", str(out), "--json"],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    verified = subprocess.run(run + ["verify", str(out)],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_two_boxes_on_one_network_switch_keep_the_schedules_timing(kit, kind):
    """Every GPU sends to all its mates through one link into the box switch, and to
    every GPU of the other box through one link into the network switch: a link
    shared by many peers, which must carry their sends in the schedule's order (sends
    ready at once, each waiting only for the previous one to its own peer, went out
    first come first served: the XML replayed 1.78× the schedule's AllGather)."""
    from te_ccl.compiler import SolveParams, forward_only, solve
    from te_ccl.topology.generators import Join, boxes, star

    box = star(4, 300e9, 0.7e-6)
    topo = forward_only(boxes(box, 2, Join("switch", box.gpus, 6.25e9, 1.3e-6)))
    coll = Collective(CollectiveKind(kind), 1 << 26, tuple(range(8)))
    schedule = solve(topo, coll, SolveParams(backend="scale", time_limit_s=20, max_subchunks=4))
    assert schedule.info.subchunks == 4
    xml = lower_to_msccl(schedule)
    kit.assert_verifies(xml)
    sched, lowered = _replays(schedule, xml)
    assert lowered <= 1.01 * sched


@pytest.mark.slow
def test_an_edge_that_fits_no_channel_on_time_gets_a_file_that_says_so():
    """On a 4x4 mesh AllReduce at 16 steps per thread block, some edge fits no channel
    while every relayed send keeps its link-order wait (its nop). Cut into sub-chunks,
    the schedule is refused (the compile solves it again with fewer); as the only
    schedule there is, it is lowered with every fusion, link order kept only where a
    rank's thread blocks still fit, and the file says so."""
    from te_ccl.api import compile as compile_
    from te_ccl.errors import RuntimeLimitError

    schedule = compile_("mesh4x4", "allreduce", size="1MB", chunks=1, backend="scale").schedule
    assert schedule.info.subchunks > 1
    with pytest.raises(RuntimeLimitError, match="cannot keep at most 16 steps"):
        lower_to_msccl(schedule, max_steps=16)
    only = replace(schedule, info=replace(schedule.info, subchunks=1))
    notes: list[str] = []
    xml = lower_to_msccl(only, max_steps=16, notes=notes)
    assert verify_msccl(xml.decode()).valid
    assert notes and "does not keep the schedule's timing to fit at most 16 steps" in notes[0]
    unordered = re.search(r"on (\d+) of 16 ranks links serve sends in the order they come",
                          notes[0])
    assert unordered and int(unordered.group(1)) < 16  # the others keep their links' order
    assert max(len(tb.steps) for g in read_msccl(xml.decode()).gpus for tb in g.threadblocks) <= 16


@pytest.mark.parametrize("max_steps", [20, 12])
def test_the_channel_pass_counts_the_nops_of_reductions_and_runs_once(channel_passes,
                                                                     max_steps):
    """A 4x4 mesh ReduceScatter at a tight step limit: a fused step that reduces into a slot
    another thread block wrote, and every send passing a received value on, wait for the
    link's previous send too (a nop each). Counted in the channel pass and where a fusion
    pairing is split, they leave no thread block over the limit, so the pass runs once and
    the file keeps the schedule's timing."""
    from te_ccl.api import compile as compile_

    schedule = compile_("mesh4x4", "reducescatter", size="1MB", chunks=1,
                        backend="scale").schedule
    channel_passes.clear()  # the compile's own lowering at the runtime's limits
    notes: list[str] = []
    xml = lower_to_msccl(schedule, max_steps=max_steps, notes=notes)
    assert len(channel_passes) == 1 and not notes
    assert verify_msccl(xml.decode()).valid
    sched, lowered = _replays(schedule, xml)
    assert lowered <= 1.01 * sched


def test_a_rank_still_over_the_element_limit_when_favoured_gets_every_fusion(kit,
                                                                             channel_passes):
    """GPU 1 alone is over: the channel pass is rerun in its favour, then with every
    fusion on every GPU; a rank over even then gets no file."""
    import te_ccl.lower.msccl.passes as passes
    from te_ccl.errors import RuntimeLimitError

    schedule = _forward_twice(kit)
    sizes = {g.id: _elements(g, 4) for g in build_program(schedule).gpus}
    assert sizes[1] - 3 >= max(n for g, n in sizes.items() if g != 1)
    channel_passes.clear()
    with pytest.raises(RuntimeLimitError, match="rank position 1, even with every fusion"):
        passes.lower_to_msccl(schedule, runtime=replace(MSCCL, max_elements=sizes[1] - 3))
    assert [(p.favour, p.timed) for p in channel_passes] == [
        (frozenset(), True), (frozenset({1}), True), (frozenset(), False)]


def test_a_rank_over_the_element_limit_by_its_link_order_nops_gives_up_only_those(
        channel_passes):
    """A 4x4 mesh ReduceScatter whose largest rank is one element over the reader's limit,
    with nops for its links' order. Cut into sub-chunks, the schedule is refused (the
    compile solves it again with fewer, keeping the links' order). As the only schedule
    there is, that rank alone sends in the order its values come, the channel pass runs
    once and the file says which ranks gave up the order."""
    import te_ccl.lower.msccl.passes as passes
    from te_ccl.api import compile as compile_
    from te_ccl.errors import RuntimeLimitError

    cut = compile_("mesh4x4", "reducescatter", size="1MB", chunks=1, backend="scale").schedule
    assert cut.info.subchunks > 1
    schedule = replace(cut, info=replace(cut.info, subchunks=1))
    gpus = build_program(schedule).gpus
    sizes = {g.id: _elements(g, 16) for g in gpus}
    top = max(sizes.values())
    nops = {g.id: sum(st.op.name == "NOP" for tb in g.threadblocks for st in tb.steps)
            for g in gpus}
    assert all(nops[g] for g, n in sizes.items() if n == top)
    runtime = replace(MSCCL, max_elements=top - 1)
    with pytest.raises(RuntimeLimitError, match="fewer sub-chunks per chunk would fit"):
        passes.lower_to_msccl(cut, runtime=runtime)
    channel_passes.clear()
    notes: list[str] = []
    xml = passes.lower_to_msccl(schedule, notes=notes, runtime=runtime)
    over = sum(n == top for n in sizes.values())
    assert len(channel_passes) == 1
    assert notes == [f"on {over} of 16 ranks links serve sends in the order they come, not "
                     "the schedule's (the file may run slower than the schedule) to fit the "
                     f"runtime's reader limit of {top - 1} elements"]
    assert max(_elements(g, 16) for g in read_msccl(xml.decode()).gpus) <= top - 1
    assert verify_msccl(xml.decode()).valid
