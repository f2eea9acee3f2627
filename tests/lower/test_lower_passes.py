"""Unit tests of single lowering passes: switch collapse, buffer layout, channels, deps."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lxml import etree

from te_ccl.collective import Collective, CollectiveKind
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.lower.msccl.buffers import buffer_layout
from te_ccl.lower.msccl.collapse_switches import collapse_switches
from te_ccl.lower.msccl.ir import Buf, Slot
from te_ccl.runtime_limits import MSCCL
from te_ccl.verify.msccl.layout import Layout as VerifierLayout

KINDS = ["allgather", "alltoall", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
         "scatter"]


def test_switch_copy_becomes_one_edge_per_destination(kit):
    edges = collapse_switches(kit.star_allgather(4))
    assert len(edges) == 12
    assert {(e.src, e.dst) for e in edges} == {(a, b) for a in range(4) for b in range(4) if a != b}
    assert all((e.start, e.arrive, e.op) == (0, 2, "copy") for e in edges)
    # a GPU's edges through the switch leave on one link, its link to the switch
    assert all(len({e.link for e in edges if e.src == g}) == 1 for g in range(4))
    assert all(e.final for e in edges)  # nobody sends a received chunk on


def test_a_direct_edge_leaves_on_its_own_link_and_knows_whether_it_is_sent_on(kit):
    edges = collapse_switches(kit.ring_allgather(4))
    assert len({e.link for e in edges if e.src == 0}) == 1  # one ring neighbour
    # every hop but the last is sent on
    assert [e.final for e in edges if e.chunk == 0] == [False, False, True]


def test_own_pieces_are_copied_to_the_output_in_one_step(kit):
    schedule = kit.direct(kit.full(3), kit.coll("allgather", 3, chunks=4))
    xml = lower_to_msccl(schedule)
    kit.assert_verifies(xml)
    for gpu in etree.fromstring(xml).iter("gpu"):
        copies = [st for st in gpu.iter("step") if st.get("type") == "cpy"]
        assert [(c.get("srcbuf"), c.get("srcoff"), c.get("cnt")) for c in copies] == \
            [("i", "0", "4")]
        assert copies[0].get("dstoff") == str(4 * int(gpu.get("id")))


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_layout_agrees_with_the_verifier(kind, inplace):
    """Every chunk's home and output slot are where the verifier puts inputs and results."""
    n, c = 3, 2
    root = 1 if kind in ("broadcast", "reduce", "gather", "scatter") else None
    coll = Collective(CollectiveKind(kind), 64 * n * c, tuple(range(n)), c, root, inplace)
    mine = buffer_layout(coll)
    theirs = VerifierLayout(kind, n, mine.nchunksperloop, inplace)
    assert theirs.problem() is None
    for p in range(n):
        initial = theirs.initial(p)
        want = theirs.expected(p, root)
        for chunk in coll.chunks():
            home, out = mine.home(p, chunk), mine.out(p, chunk)
            if home is not None:
                assert initial[(home.buf.value, home.index)] == ((p, chunk.in_index),)
            if out is not None:
                origins = {q for q, _ in want[(out.buf.value, out.index)]}
                assert origins == set(chunk.sources)
        needed = {(s.buf.value, s.index) for ch in coll.chunks()
                  if (s := mine.out(p, ch)) is not None}
        assert needed == set(want)
        assert mine.homes(p) == {ch.id: s for ch in coll.chunks()
                                 if (s := mine.home(p, ch)) is not None}
        assert mine.outs(p) == {ch.id: s for ch in coll.chunks()
                                if (s := mine.out(p, ch)) is not None}
    if inplace:  # one buffer only: o for allgather/gather, i otherwise
        grow = kind in ("allgather", "gather")
        assert (mine.i_chunks if grow else mine.o_chunks) == 0


def test_scratch_slots_are_numbered_per_gpu():
    from te_ccl.lower.msccl.buffers import compact_scratch, scratch_slot

    used = {scratch_slot(7), scratch_slot(3), Slot(Buf.OUTPUT, 0)}
    assert compact_scratch(used) == {scratch_slot(3): Slot(Buf.SCRATCH, 0),
                                     scratch_slot(7): Slot(Buf.SCRATCH, 1)}


def test_chunks_held_long_keep_fifo_depth_and_verify(kit):
    from te_ccl.lower.msccl import lower_to_msccl
    from te_ccl.schedule import Schedule, Transfer

    n, chunks, hold = 4, 40, 41
    tr = [Transfer(p * chunks + j, f"g{(p + h) % n}", f"g{(p + h + 1) % n}", j + h * hold,
                   j + h * hold + 1) for p in range(n) for j in range(chunks) for h in range(n - 1)]
    schedule = Schedule(kit.ring(n, both=False), kit.coll("allgather", n, chunks=chunks), 1e-6,
                        tuple(tr))
    xml = lower_to_msccl(schedule)  # the old lowering ran out of channels here
    kit.assert_verifies(xml)
    # a fused receive waits 40 epochs on its connection: only FIFO_SLOTS of them fit on
    # one channel at a time, so most chunks are received at arrival (``r``, then ``s``)
    steps = [st.get("type") for st in etree.fromstring(xml).iter("step")]
    assert 0 < steps.count("rcs") < steps.count("r")
    assert max(len(tb.findall("step")) for tb in etree.fromstring(xml).iter("tb")) <= 64


def test_fifo_depth_refuses_a_message_beyond_the_connection_depth():
    from te_ccl.lower.msccl.channels import _Conn, _conn_fits

    def at(time: int, kind: int) -> int:  # an order packed as the pass packs (time, kind)
        return 2 * time + kind

    for depth in (2, 8):
        conn = _Conn([at(t, 1) for t in range(depth)], [at(100 + t, 0) for t in range(depth)])
        assert not _conn_fits(conn, at(depth, 1), at(200, 0), depth)  # depth still in flight
        assert _conn_fits(conn, at(101, 1), at(200, 0), depth)        # the first was received
        assert not _conn_fits(conn, at(50, 1), at(99, 0), depth)      # received before an earlier
    early = _Conn([at(0, 1), at(10, 1)], [at(1, 0), at(11, 0)])
    assert _conn_fits(early, at(5, 1), at(6, 0), 2)
    assert not _conn_fits(early, at(5, 1), at(12, 0), 2)
    # a third message sent before the first is received fits 8 slots, not 2
    two = _Conn([at(0, 1), at(1, 1)], [at(10, 0), at(11, 0)])
    assert _conn_fits(two, at(2, 1), at(12, 0), 8) and not _conn_fits(two, at(2, 1), at(12, 0), 2)


def test_spread_keeps_waited_thread_blocks_nameable_by_depid():
    from te_ccl.lower.msccl.channels import spread_channels
    from te_ccl.lower.msccl.collapse_switches import Edge

    # six peers send 600 chunks each into GPU 0: 32 channels would give it 192 receiving
    # thread blocks that its sends wait for, but depid names only 128
    edges = tuple(Edge(t, t + 1, t, p, 0, p * 1000 + t) for p in range(1, 7) for t in range(600))
    assert spread_channels(edges, 64, False) == 128 // 6
    assert spread_channels(edges[:10], 64, False) == 1  # a light load stays on one channel


def test_spread_with_reductions_counts_sending_thread_blocks_as_waited_for():
    from te_ccl.lower.msccl.channels import spread_channels
    from te_ccl.lower.msccl.collapse_switches import Edge

    # a 4-neighbour GPU 0 receiving and sending 600 partials per neighbour: its reductions
    # wait for earlier sends too, but fused steps pair receiving and sending thread blocks:
    # max(4, 4) + 2 per channel share the 128 nameable thread blocks
    edges = tuple(Edge(t, t + 1, t, a, b, i * 1000 + t, "reduce")
                  for i, (a, b) in enumerate([(p, 0) for p in range(1, 5)] + [(0, p) for p in range(1, 5)])
                  for t in range(600))
    assert spread_channels(edges, 64, True) == 128 // 6
    assert spread_channels(edges, 64, False) == 32  # copies: only receiving ones are waited for


def test_channel_pass_refuses_a_129th_waited_thread_block():
    from te_ccl.lower.msccl.channels import _State, _steps_fit

    state = _State(budget=64, spread=4, sends_waited=False, depth=2)
    state.gpus[0].sides[0].recvs[1] = 1
    state.gpus[0].waited = 128
    assert _steps_fit([(0, 1, None)], [], 0, state)      # a receive joins its thread block
    assert not _steps_fit([(0, 2, None)], [], 0, state)  # a new receive peer needs one more
    assert _steps_fit([(0, None, 2)], [], 0, state)      # sending ones are not waited for
    state.sends_waited = True                            # unless reductions (or in-place
                                                         # receives) wait for sends
    assert not _steps_fit([(0, None, 2)], [], 0, state)


def test_a_step_reserves_a_nop_only_where_it_waits_for_a_value_received_before():
    from te_ccl.lower.msccl.channels import _order_keys, _place, _State
    from te_ccl.lower.msccl.collapse_switches import Edge
    from te_ccl.lower.msccl.instructions import first_receipts

    # an AllReduce's GPU 0 sends its own part of chunk 5 to 1 (reduce-scatter), receives
    # the reduced chunk 5 back and forwards it to 2 (all-gather): only the forward waits
    # for a received value and for the link's previous send, one nop
    own, back, forward = Edge(0, 1, 5, 0, 1, 0), Edge(10, 11, 5, 1, 0, 1), Edge(20, 21, 5, 0, 2, 2)
    again = Edge(30, 31, 5, 0, 2, 3)
    edges = (own, back, forward, again)
    ends, hold = _order_keys(edges, set())
    state = _State(64, 1, True, 2, received=first_receipts(edges), ends=ends, hold=hold)
    chan = {}
    for e in (own, back, forward):
        _place([e], [], 0, state, chan)
    sends = state.gpus[0].sides[0].sends
    assert sends[1] == 1 and sends[2] == 2
    state.timed = False  # a file without link-order waits reserves none
    _place([again], [], 0, state, chan)
    assert sends[2] == 3


def test_a_fused_reduction_into_a_slot_written_before_reserves_a_nop():
    from te_ccl.lower.msccl.channels import _order_keys, _place, _State
    from te_ccl.lower.msccl.instructions import first_receipts

    # GPU 0 reduces chunk 0 from 1 (plain), then from 2 fused into its send to 3: that
    # step waits for the other thread block's write and for the link's previous send
    (into, out), fused = _relay(0, 2, 3, 4)
    first = _relay(0, 1, 9, 2)[0][0]  # GPU 1's part of the same chunk, received earlier
    first = first._replace(chunk=into.chunk)
    edges = (first, into, out)
    ends, hold = _order_keys(edges, {id(fused.send.send)})
    state = _State(64, 1, True, 2, received=first_receipts(edges), ends=ends, hold=hold)
    chan = {}
    _place([first], [], 0, state, chan)
    _place([into, out], [fused], 0, state, chan)
    assert state.gpus[0].sides[0].sends[3] == 2  # the fused step's send and its nop
    alone = _State(64, 1, True, 2, received=first_receipts((into, out)), ends=ends, hold=hold)
    _place([into, out], [fused], 0, alone, {})
    assert alone.gpus[0].sides[0].sends[3] == 1  # the only receive: no wait, no nop


def _relay(g: int, a: int, b: int, t: int):
    """A fusion candidate: GPU ``g`` receives a chunk from ``a`` at ``t`` and forwards it to ``b``."""
    from te_ccl.lower.msccl.collapse_switches import Edge
    from te_ccl.lower.msccl.instructions import Fusion, Instr
    from te_ccl.lower.msccl.ir import Op

    into, out = Edge(t, t + 1, t, a, g, 2 * t), Edge(t + 1, t + 2, t, g, b, 2 * t + 1)
    return (into, out), Fusion(Instr(g, Op.RECV, t, (t + 1, 0, into), recv=into),
                               Instr(g, Op.SEND, t, (t + 1, 1, out), send=out), Op.RECV_COPY_SEND)


def test_channel_plan_keeps_the_preferred_pairing_open():
    from te_ccl.lower.msccl.channels import HOT_OPEN_EVERY, _pairing, _pairs_open, _plan, _State

    # GPU 0 forwards six chunks from 1 to 2 (straight on) and one from 1 to 3 (a turn)
    relays = [_relay(0, 1, 2, t) for t in range(6)] + [_relay(0, 1, 3, 6)]
    edges = tuple(e for pair, _ in relays for e in pair)
    state = _State(budget=64, spread=4, sends_waited=False, depth=2)
    state.plan = _plan(edges, [f for _, f in relays], frozenset())
    straight, turn = relays[0][1], relays[-1][1]
    assert state.plan.send_of[(0, 1)] == 2 and state.plan.hot == {0}
    c = next(c for c in range(4) if c % HOT_OPEN_EVERY)
    assert _pairs_open([_pairing(straight)], c, state)
    assert not _pairs_open([_pairing(turn)], c, state)  # would take 1 from the preferred 1 → 2
    assert _pairs_open([_pairing(turn)], 0, state)      # a hot GPU's reserved channel takes any
    state.gpus[0].sides[c].pair_send[2] = 4  # once 2 is paired otherwise on c,
    assert _pairs_open([_pairing(turn)], c, state)      # the turn blocks nothing preferred there


def test_ranks_over_the_reader_limit_rerun_the_channel_pass_in_their_favour(kit,
                                                                            channel_passes):
    import te_ccl.lower.msccl.passes as passes
    from te_ccl.errors import RuntimeLimitError

    schedule = kit.ring_allreduce(4)
    passes.lower_to_msccl(schedule)
    assert [(p.favour, p.timed) for p in channel_passes] == [(frozenset(), True)]
    runtime = replace(MSCCL, max_elements=6)  # <algo>, 4 <gpu>s and one more each
    channel_passes.clear()
    with pytest.raises(RuntimeLimitError, match="more than 6 XML elements"):
        passes.lower_to_msccl(schedule, runtime=runtime)  # no file the reader would refuse
    # every rank is over: favouring them all would favour none, so every fusion and no
    # link order at once
    assert [(p.favour, p.timed) for p in channel_passes] == [(frozenset(), True),
                                                             (frozenset(), False)]


def test_channel_pass_gets_the_protocols_depth_and_counts_sending_thread_blocks(kit,
                                                                                channel_passes):
    schedule = kit.ring_allgather(4)
    for proto in ("Simple", "LL128", "LL"):
        lower_to_msccl(schedule, proto=proto)
    # a send may wait for the previous send to its peer on another channel (link order)
    assert [(p.sends_waited, p.depth) for p in channel_passes] == [(True, 2), (True, 8),
                                                                   (True, 8)]
