"""Schedule → MSCCL XML: hand-built schedules, executed symbolically and compared to goldens."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from te_ccl.errors import SpecError, TecclError
from te_ccl.lower.msccl import build_program, lower_to_msccl, write_msccl
from te_ccl.schedule import Schedule, Transfer

GOLDEN = Path(__file__).parent.parent / "golden" / "msccl"


def _steps(xml: bytes) -> list[etree._Element]:
    return list(etree.fromstring(xml).iter("step"))


def _types(xml: bytes) -> set[str]:
    return {s.get("type") for s in _steps(xml)}


@pytest.mark.parametrize("inplace", [False, True])
def test_ring_allgather_uses_rcs_and_matches_golden(kit, inplace, update_golden):
    xml = lower_to_msccl(kit.ring_allgather(4, inplace))
    kit.assert_verifies(xml)
    assert _types(xml) == ({"s", "rcs", "r"} | (set() if inplace else {"cpy"}))
    golden = GOLDEN / f"ring4_allgather_{'inplace' if inplace else 'outofplace'}.xml"
    if update_golden:
        golden.write_bytes(xml)
    assert xml == golden.read_bytes()


def test_allgather_through_switch_becomes_direct_sends(kit):
    xml = lower_to_msccl(kit.star_allgather(4))
    kit.assert_verifies(xml)
    algo = etree.fromstring(xml)
    # the switch's copy to three GPUs = three sends from the source GPU, one per peer
    for gpu in algo.iter("gpu"):
        sends = [tb for tb in gpu.iter("tb") if tb.get("send") != "-1"]
        assert sorted(int(tb.get("send")) for tb in sends) == \
            [p for p in range(4) if p != int(gpu.get("id"))]


@pytest.mark.parametrize("inplace", [False, True])
def test_ring_reducescatter_fuses_reductions(kit, inplace, update_golden):
    xml = lower_to_msccl(kit.ring_reducescatter(4, inplace))
    kit.assert_verifies(xml)
    assert {"s", "rrs", "rrc"} <= _types(xml)
    golden = GOLDEN / f"ring4_reducescatter_{'inplace' if inplace else 'outofplace'}.xml"
    if update_golden:
        golden.write_bytes(xml)
    assert xml == golden.read_bytes()


@pytest.mark.parametrize("inplace", [False, True])
def test_ring_allreduce(kit, inplace):
    xml = lower_to_msccl(kit.ring_allreduce(4, inplace))
    kit.assert_verifies(xml)
    assert {"rrs", "rrcs", "rcs"} <= _types(xml)
    assert 'o_chunks="0"' in xml.decode() if inplace else 'i_chunks="4"' in xml.decode()


def test_relay_uses_scratch_and_rcs(kit):
    # alltoall on a one-way ring 0→1→2: chunk 0→2 is relayed by 1, which does not need it
    topo = kit.ring(3, both=False)
    c = kit.coll("alltoall", 3)
    hops = {(s, d): [(s + h) % 3 for h in range((d - s) % 3 + 1)] for s in range(3) for d in range(3)}
    tr = []
    for ch in c.chunks():
        (s,), (d,) = ch.sources, ch.destinations
        path = hops[(s, d)]
        tr += [Transfer(ch.id, f"g{a}", f"g{b}", i, i + 1) for i, (a, b) in enumerate(zip(path, path[1:], strict=False))]
    xml = lower_to_msccl(Schedule(topo, c, 1e-6, tuple(tr)))
    kit.assert_verifies(xml)
    rcs = [s for s in _steps(xml) if s.get("type") == "rcs"]
    assert rcs and all(s.get("dstbuf") == "s" for s in rcs)
    assert all(int(g.get("s_chunks")) == 1 for g in etree.fromstring(xml).iter("gpu"))


def test_two_transfers_on_one_link_in_one_epoch_use_two_channels(kit):
    topo = kit.ring(2)
    c = kit.coll("allgather", 2, chunks=2)
    tr = [Transfer(ch.id, f"g{ch.sources[0]}", f"g{d}", 0, 1) for ch in c.chunks() for d in ch.destinations]
    xml = lower_to_msccl(Schedule(topo, c, 1e-6, tuple(tr)))
    kit.assert_verifies(xml)
    algo = etree.fromstring(xml)
    assert algo.get("nchannels") == "2"
    for gpu in algo.iter("gpu"):
        assert sorted(tb.get("chan") for tb in gpu.iter("tb") if tb.get("send") != "-1") == ["0", "1"]


KINDS = ["allgather", "alltoall", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
         "scatter"]


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_direct_schedules_of_every_kind_execute_correctly(kit, kind, inplace):
    root = 1 if kind in ("broadcast", "reduce", "gather", "scatter") else None
    c = kit.coll(kind, 4, chunks=2, inplace=inplace, root=root)
    xml = lower_to_msccl(kit.direct(kit.full(4), c))
    kit.assert_verifies(xml)


def test_inplace_alltoall_stages_in_scratch_when_slot_is_still_needed(kit):
    # rank 1's chunk for 0 waits on its link behind 2's chunk for 0, which rank 1 relays,
    # but 0's chunk for 1 lands in that slot before: it is staged in scratch
    c = kit.coll("alltoall", 3, inplace=True)
    ids = {(ch.sources[0], ch.destinations[0]): ch.id for ch in c.chunks()}
    tr = (Transfer(ids[0, 1], "g0", "g1", 0, 1), Transfer(ids[2, 0], "g2", "g1", 0, 1),
          Transfer(ids[2, 0], "g1", "g0", 1, 2), Transfer(ids[1, 0], "g1", "g0", 3, 4),
          Transfer(ids[0, 2], "g0", "g2", 0, 1), Transfer(ids[1, 2], "g1", "g2", 0, 1),
          Transfer(ids[2, 1], "g2", "g1", 1, 2))
    xml = lower_to_msccl(Schedule(kit.ring(3), c, 1e-6, tr))
    kit.assert_verifies(xml)
    assert any(s.get("type") == "cpy" and s.get("srcbuf") == "s" for s in _steps(xml))


def test_max_steps_spreads_over_channels(kit):
    xml = lower_to_msccl(kit.ring_allgather(8), max_steps=4)
    kit.assert_verifies(xml)
    algo = etree.fromstring(xml)
    assert int(algo.get("nchannels")) > 1
    assert all(len(tb.findall("step")) <= 4 for tb in algo.iter("tb"))


def test_dependencies_have_targets_and_positions(kit):
    prog = build_program(kit.ring_allreduce(4))
    for gpu in prog.gpus:
        for tb in gpu.threadblocks:
            for pos, step in enumerate(tb.steps):
                assert step.s == pos
                if step.depid >= 0:
                    target = gpu.threadblocks[step.depid].steps[step.deps]
                    assert target.hasdep and step.depid != tb.id
            ids = [t.id for t in gpu.threadblocks]
            assert ids == list(range(len(ids)))


def test_xml_layout_follows_parser_quirks(kit):
    xml = lower_to_msccl(kit.ring_allreduce(4)).decode()
    assert xml.startswith("<algo ") and xml.endswith("</algo>\n")
    assert "\t" not in xml and "'" not in xml and "<?xml" not in xml
    for line in xml.splitlines():
        assert line.strip().startswith("<") and line.count("<") == 1
    step = next(line for line in xml.splitlines() if "<step" in line).split()
    assert [a.split("=")[0] for a in step[1:]] == ["s", "type", "srcbuf", "srcoff", "dstbuf",
                                                   "dstoff", "cnt", "depid", "deps", "hasdep"]


def test_same_schedule_same_bytes(kit, tmp_path):
    a = lower_to_msccl(kit.ring_allreduce(4))
    b = write_msccl(kit.ring_allreduce(4), tmp_path / "x.xml")
    assert a == b == (tmp_path / "x.xml").read_bytes()


def test_subset_of_ranks_uses_positions(kit):
    c = kit.coll("allgather", 3, ranks=(1, 2, 3))
    xml = lower_to_msccl(kit.direct(kit.full(4), c))
    assert 'ngpus="3"' in xml.decode()
    kit.assert_verifies(xml)


def test_relay_through_gpu_outside_the_collective_is_rejected(kit):
    c = kit.coll("allgather", 2, ranks=(0, 2))
    tr = (Transfer(0, "g0", "g1", 0, 1), Transfer(0, "g1", "g2", 1, 2), Transfer(1, "g2", "g1", 0, 1),
          Transfer(1, "g1", "g0", 1, 2))
    with pytest.raises(TecclError, match="not in the collective's ranks"):
        lower_to_msccl(Schedule(kit.ring(3), c, 1e-6, tr))


def test_switch_reduction_is_rejected(kit):
    c = kit.coll("reduce", 3, root=0)
    tr = (Transfer(0, "g1", "sw", 0, 1, "reduce"), Transfer(0, "g2", "sw", 0, 1, "reduce"),
          Transfer(0, "sw", "g0", 1, 2, "reduce"))
    with pytest.raises(TecclError, match="in-switch reduction"):
        lower_to_msccl(Schedule(kit.star(3, can_reduce=True), c, 1e-6, tr))


def test_sending_a_chunk_not_held_is_rejected(kit):
    c = kit.coll("allgather", 2)
    with pytest.raises(TecclError, match="before it holds it"):
        lower_to_msccl(Schedule(kit.ring(2), c, 1e-6, (Transfer(1, "g1", "g0", 0, 1),
                                                   Transfer(0, "g1", "g0", 1, 2))))


def test_bad_protocol_is_a_spec_error(kit):
    with pytest.raises(SpecError, match="proto"):
        lower_to_msccl(kit.ring_allgather(4), proto="LL64")


def test_more_concurrent_chunks_than_channels_share_channels(kit):
    c = kit.coll("allgather", 2, chunks=40)
    tr = [Transfer(ch.id, f"g{ch.sources[0]}", f"g{d}", 0, 1) for ch in c.chunks()
          for d in ch.destinations]
    xml = lower_to_msccl(Schedule(kit.ring(2), c, 1e-6, tuple(tr)))
    kit.assert_verifies(xml)
    assert etree.fromstring(xml).get("nchannels") == "32"
