"""Steps of several chunks (the merge pass): consecutive slots on one connection go in
one step of ``cnt > 1``, the file keeps to the runtime's limits and the verifier accepts
it; where nothing merges the bytes are those of one step per chunk."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from te_ccl.compiler.judge import lower_file, xml_replay
from te_ccl.compiler.options import CompileOptions
from te_ccl.compiler.result import declared_range
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.lower.msccl.merge import HOLD, MODES, one_call_up_to
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule, Transfer
from te_ccl.topology import Link, Node, Topology
from te_ccl.verify.msccl import verify_msccl
from tests.lower.test_lower_random import KINDS, _schedule


def _cnts(xml: bytes) -> list[int]:
    """The ``cnt`` of every send and receive step."""
    return [int(s.get("cnt")) for s in etree.fromstring(xml).iter("step")
            if s.get("type") not in ("cpy", "nop")]


def _line(n: int) -> Topology:
    """GPUs in a line, links whose latency (1 µs) outweighs a chunk (10 ns)."""
    links = [Link(f"g{i}", f"g{j}", 1e11, 1e-6) for i in range(n) for j in (i - 1, i + 1)
             if 0 <= j < n]
    return Topology.build(f"line{n}", [Node(f"g{i}") for i in range(n)], links)


def test_chunks_on_one_connection_go_in_one_step(kit):
    schedule = kit.direct(_line(2), kit.coll("allgather", 2, chunks=4))
    notes: list[str] = []
    xml = lower_to_msccl(schedule, merge=HOLD, notes=notes)
    kit.assert_verifies(xml)
    assert _cnts(xml) == [4, 4, 4, 4]  # each rank: one send, one receive
    served = one_call_up_to(MSCCL, "Simple", 8, 4)
    assert etree.fromstring(xml).get("maxBytes") == str(served)
    assert notes == [f"steps carry up to 4 chunks, which the runtime moves in one call up to "
                     f"{served} bytes: the file serves sizes up to that (maxBytes)"]
    assert MSCCL.max_allowed_count("Simple", served, 8) >= 4
    assert MSCCL.max_allowed_count("Simple", served + 8, 8) < 4


def test_the_sizes_a_merged_file_serves_are_reported_as_it_declares_them(kit):
    """``--json``'s min_bytes/max_bytes and notes are the written file's range: a merged
    file serves only sizes at which its steps are one call, whatever was asked."""
    schedule = kit.direct(_line(2), kit.coll("allgather", 2, chunks=4))
    served = one_call_up_to(MSCCL, "Simple", 8, 4)
    low, high, notes = declared_range(lower_to_msccl(schedule, merge=HOLD), 0, 0)
    assert (low, high) == (0, served)
    assert len(notes) == 1 and f"0 to {served} bytes" in notes[0]
    assert declared_range(lower_to_msccl(schedule), 0, 0) == (0, 0, ())
    assert declared_range(b'{"name": "plan"}', 1000, 2000) == (1000, 2000, ())


@pytest.mark.parametrize("mode", MODES)
def test_relayed_chunks_leave_scratch_together(kit, mode):
    """g1 relays g0's four chunks for g2 (and g2's for g0) through scratch laid out by the
    peer they go on to, and the four leave in one step. The schedule sends each on as it
    arrives: under HOLD each arrives in a step of its own; under DELAY they arrive in one
    step too, and leave when it is in."""
    topo = _line(3)
    coll = kit.coll("alltoall", 3, chunks=4)
    tr = []
    for ch in coll.chunks():
        (s,), (d,) = ch.sources, ch.destinations
        way = 1 if d > s else -1
        tr += [Transfer(ch.id, f"g{h}", f"g{h + way}", k, k + 1)
               for k, h in enumerate(range(s, d, way))]
    xml = lower_to_msccl(Schedule(topo, coll, 1e-6, tuple(tr)), merge=mode)
    kit.assert_verifies(xml)
    relay = etree.fromstring(xml).find("gpu[@id='1']")
    assert relay.get("s_chunks") == "8"
    into = [s.get("cnt") for s in relay.iter("step") if s.get("dstbuf") == "s"]
    out = [(s.get("srcoff"), s.get("cnt")) for s in relay.iter("step")
           if s.get("type") == "s" and s.get("srcbuf") == "s"]
    assert into == (["1"] * 8 if mode == HOLD else ["4", "4"])
    assert sorted(out) == [("0", "4"), ("4", "4")]


def test_nothing_to_merge_leaves_the_bytes(kit):
    schedule = kit.ring_allgather(4)
    assert all(lower_to_msccl(schedule, merge=mode) == lower_to_msccl(schedule)
               for mode in MODES)


def test_the_judge_takes_merged_steps_where_one_step_a_chunk_does_not_fit(kit):
    """300 chunks each way under a reader of 512 elements a rank: one step per chunk
    does not fit; 71 chunks a step do."""
    schedule = kit.direct(_line(2), kit.coll("alltoall", 2, chunks=300))
    small = CompileOptions(runtime=replace(MSCCL, max_elements=512))
    with pytest.raises(RuntimeLimitError):
        lower_to_msccl(schedule, runtime=small.runtime)
    xml = lower_file(schedule, small)
    assert verify_msccl(xml.decode(), limits=small.runtime).valid
    assert max(_cnts(xml)) == MSCCL.max_count - 1
    assert xml_replay(schedule, xml) > 0


def test_the_judge_leaves_a_schedule_of_sub_chunks_to_be_solved_again_with_fewer(kit):
    """Cut into sub-chunks, the same schedule is refused (render_fitting solves it again
    with fewer sub-chunks, which keeps its timing) rather than merged."""
    schedule = kit.direct(_line(2), kit.coll("alltoall", 2, chunks=300)).with_info(
        subchunks=2)
    with pytest.raises(RuntimeLimitError):
        lower_file(schedule, CompileOptions(runtime=replace(MSCCL, max_elements=512)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 1 << 30), kind=st.sampled_from(KINDS), n=st.integers(2, 7),
       chunks=st.integers(1, 4), inplace=st.booleans(), mode=st.sampled_from(MODES))
def test_random_schedules_merged_verify(seed, kind, n, chunks, inplace, mode):
    drawn = _schedule(random.Random(seed), kind, n, chunks, inplace)
    topo = drawn.topology  # its links made slow to start: chunks that travel together merge
    slow = Topology.build(topo.name, list(topo.nodes), [
        Link(x.src, x.dst, 1e11, 1e-6) for x in topo.links])
    schedule = Schedule(slow, drawn.collective, drawn.epoch_s, drawn.transfers)
    try:
        xml = lower_to_msccl(schedule, merge=mode)
    except RuntimeLimitError:  # in place, a tree that needs more channels: no file either way
        return
    report = verify_msccl(xml.decode(), root=schedule.collective.root)
    assert report.valid, [str(f) for f in report.errors][:3]


def test_a_deadline_while_merging_is_not_taken_for_a_file_that_does_not_fit(kit, monkeypatch):
    """The deadline passing in a merged lowering stops the judge (exit 3), rather than
    leaving the one-step-per-chunk file's runtime limit as the reason."""
    import te_ccl.lower.msccl as msccl_lowering
    from te_ccl.deadline import TimeLimitReached

    real = msccl_lowering.lower_to_msccl

    def out_of_time_when_merging(*args, merge=None, **kwargs):
        if merge is not None:
            raise TimeLimitReached("lowering: time limit reached")
        return real(*args, **kwargs)

    monkeypatch.setattr(msccl_lowering, "lower_to_msccl", out_of_time_when_merging)
    schedule = kit.direct(_line(2), kit.coll("alltoall", 2, chunks=300))
    with pytest.raises(TimeLimitReached):
        lower_file(schedule, CompileOptions(runtime=replace(MSCCL, max_elements=512)))
