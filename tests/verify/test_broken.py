"""Broken variants of the reference files, each rejected for the right reason."""

from __future__ import annotations

import pytest

from te_ccl.verify.msccl.verify import verify_msccl

from .xmltools import algo_xml, attrs, delete, edit, insert_after, locate, reference, step_line

RING = "azure_allgather_ring_8_1_1.xml"           # tb 0 of gpu g: s, rcs x6, r
TREE = "scheduler_ncv4_ar_tree_12_LL.xml"
RING_AR = "azure_allreduce_a100_ring_8_4_1.xml"


def rules(text: str, **kw) -> set[str]:
    return verify_msccl(text, **kw).rules()


def test_deleted_dependency_is_a_race_and_a_wrong_result() -> None:
    text = reference(TREE)
    assert attrs(text, (0, 12, 0))["depid"] != "-1"
    found = rules(edit(text, (0, 12, 0), depid=-1, deps=-1))
    assert {"data-race", "wrong-result"} <= found


def test_wrong_offset_is_a_wrong_result_naming_the_chunk() -> None:
    text = edit(reference(RING), (0, 0, 1), dstoff=6)
    report = verify_msccl(text)
    bad = [f for f in report.findings if f.rule == "wrong-result"]
    assert bad and bad[0].gpu == 0 and "o[7] holds nothing" in bad[0].message


def test_offset_outside_the_buffer() -> None:
    assert {"offset-range", "offset-bounds"} <= rules(edit(reference(RING), (0, 0, 1), dstoff=8))
    assert "offset-bounds" in rules(edit(reference(RING), (0, 0, 1), cnt=2))  # o[7..9)


def test_rrs_swapped_for_rcs_is_a_wrong_result() -> None:
    text = reference(RING_AR)
    key = next(k for k in locate(text) if len(k) == 3 and attrs(text, k)["type"] == "rrs")
    assert "wrong-result" in rules(edit(text, key, type="rcs"))


def test_extra_send_is_never_received() -> None:
    text = insert_after(reference(RING), (0, 0, 7), step_line(8, "s", "o", 0, "o", 0))
    report = verify_msccl(text)
    seq = [f for f in report.findings if f.rule == "connection-sequence"]
    assert seq and (seq[0].gpu, seq[0].tb, seq[0].step) == (0, 0, 8)
    assert "never received" in seq[0].message
    assert "unreceived-data" in report.rules()


def test_missing_thread_block_id() -> None:
    text = reference("azure_allgather_recursive_doubling_8_1.xml")
    last = max(k[1] for k in locate(text) if len(k) == 2 and k[0] == 0)
    report = verify_msccl(edit(text, (0, last), id=last + 1))
    missing = [f for f in report.findings if f.rule == "tb-missing"]
    assert missing and missing[0].gpu == 0 and missing[0].tb == last


def test_tab_before_tag() -> None:
    text = reference(RING).replace("\n    <tb", "\n  \t<tb", 1)
    report = verify_msccl(text)
    tab = [f for f in report.findings if f.rule == "tab-before-tag"]
    assert tab and tab[0].line == 3 and not report.valid


def test_second_peer_on_one_channel() -> None:
    text = reference("azure_alltoall_allpairs_8_1.xml")
    tbs = [k for k in locate(text) if len(k) == 2 and k[0] == 0]
    peers = [attrs(text, k)["send"] for k in tbs]
    first = next(k for k, p in zip(tbs, peers, strict=True) if p != "-1")
    other = next(k for k, p in zip(tbs, peers, strict=True) if p not in ("-1", peers[tbs.index(first)]))
    found = rules(edit(text, other, send=attrs(text, first)["send"]))
    assert "connection-unique" in found


def _long_program(n: int) -> str:
    send = [("s", "i", 0, "o", 0)] * n
    recv = [("r", "i", 0, "o", 1)] * n
    own = [("cpy", "i", 0, "o", 0)]
    gpus = {0: {"i": 1, "o": 2, "tbs": [(1, -1, 0, send), (-1, -1, 0, own)]},
            1: {"i": 1, "o": 2, "tbs": [(-1, 0, 0, recv), (-1, -1, 0, own)]}}
    return algo_xml("allgather", 2, 2, gpus).replace('o_chunks="2"', 'o_chunks="2"')


def test_65_steps_in_one_thread_block() -> None:
    report = verify_msccl(_long_program(65))
    assert {"max-steps", "step-range"} <= report.rules()
    limit = [f for f in report.findings if f.rule == "max-steps"]
    assert (limit[0].gpu, limit[0].tb) == (0, 0)
    assert verify_msccl(_long_program(64)).rules() <= {"wrong-result"}
    assert "max-steps" not in verify_msccl(_long_program(65), max_steps=128).rules()


def test_leading_zero_reads_as_octal() -> None:
    report = verify_msccl(edit(reference(RING), (0, 0, 1), dstoff="010"))
    lz = [f for f in report.findings if f.rule == "leading-zero"]
    assert lz and "reads as 8" in lz[0].message and (lz[0].gpu, lz[0].tb, lz[0].step) == (0, 0, 1)


def test_step_number_not_equal_to_position() -> None:
    report = verify_msccl(edit(reference(RING), (3, 0, 2), s=5))
    pos = [f for f in report.findings if f.rule == "step-position"]
    assert pos and (pos[0].gpu, pos[0].tb, pos[0].step) == (3, 0, 2)


def test_count_mismatch_on_a_connection() -> None:
    text = reference("azure_alltoall_allpairs_8_1.xml")
    key = next(k for k in locate(text) if len(k) == 3 and attrs(text, k)["type"] == "s")
    found = rules(edit(text, key, cnt=2))
    assert "connection-sequence" in found


def test_receive_before_send_on_a_cycle_deadlocks() -> None:
    steps0 = [("r", "i", 0, "o", 1), ("s", "i", 0, "o", 0)]
    steps1 = [("r", "i", 0, "o", 0), ("s", "i", 0, "o", 1)]
    gpus = {0: {"i": 1, "o": 2, "tbs": [(1, 1, 0, steps0)]},
            1: {"i": 1, "o": 2, "tbs": [(0, 0, 0, steps1)]}}
    report = verify_msccl(algo_xml("allgather", 2, 2, gpus))
    dead = [f for f in report.findings if f.rule == "deadlock"]
    assert {(f.gpu, f.tb, f.step) for f in dead} == {(0, 0, 0), (1, 0, 0)}
    assert dead[0].message.startswith("r0/tb0/s0 waits for data from r1 on channel 0 "
                                      "(connection empty) <- r1/tb0/s0 waits for data from r0")


@pytest.mark.parametrize("slots, deadlock", [(32, True), (36, False)])
def test_full_fifo_blocks_the_sender(slots: int, deadlock: bool) -> None:
    # both GPUs send 9 messages before receiving any: 9 Simple calls of 4 slots each
    sends = [("s", "i", 0, "o", 0)] * 9
    gpus = {g: {"i": 1, "o": 2, "tbs": [(1 - g, 1 - g, 0, sends + [("r", "i", 0, "o", 1 - g)] * 9),
                                         (-1, -1, 0, [("cpy", "i", 0, "o", g)])]}
            for g in (0, 1)}
    found = rules(algo_xml("allgather", 2, 2, gpus), slots=slots)
    assert ("deadlock" in found) == deadlock
    assert found <= {"deadlock"}


def test_missing_gpu_and_dependency_on_missing_step() -> None:
    text = reference(RING)
    assert "gpu-ids" in rules(text.replace('<gpu id="7"', '<gpu id="8"', 1))
    assert "dependency-target" in rules(edit(text, (0, 0, 3), depid=0, deps=40))
    assert "dependency-flag" in rules(edit(text, (0, 0, 3), depid=0, deps=1))


def test_step_deleted_from_a_ring() -> None:
    found = rules(delete(reference(RING), (2, 0, 3)))
    assert {"connection-sequence", "step-position", "deadlock"} <= found


def test_every_single_offset_change_of_a_ring_is_caught() -> None:
    text = reference(RING)
    for key in (k for k in locate(text) if len(k) == 3 and k[2] > 0):
        off = int(attrs(text, key)["dstoff"])
        assert not verify_msccl(edit(text, key, dstoff=(off + 1) % 8)).valid, key


def test_nop_without_dependency_shifts_the_kernel_step_counter() -> None:
    # the kernel skips a dependency-less nop when counting, so tb 0 publishes step 1 as 0
    nop = ("nop", "i", -1, "o", -1, 0)
    g0 = {"i": 1, "o": 2, "tbs": [(1, -1, 0, [nop, ("s", "i", 0, "o", 0, 1, -1, -1, 1)]),
                                  (-1, -1, 0, [("cpy", "i", 0, "o", 0, 1, 0, 1, 0)])]}
    g1 = {"i": 1, "o": 2, "tbs": [(-1, 0, 0, [("r", "i", 0, "o", 0)]),
                                  (-1, -1, 0, [("cpy", "i", 0, "o", 1)])]}
    report = verify_msccl(algo_xml("allgather", 2, 2, {0: g0, 1: g1}))
    assert "nop-dependency" in report.rules()
    dead = [f for f in report.findings if f.rule == "deadlock"]
    assert dead and (dead[0].gpu, dead[0].tb) == (0, 1) and "its flag is 0" in dead[0].message


def test_too_many_sending_thread_blocks_on_one_channel() -> None:
    idle = [(p, -1, 0, []) for p in range(1, 34)]
    gpus = {0: {"i": 1, "o": 34, "tbs": idle}}
    gpus.update({g: {"i": 1, "o": 34, "tbs": []} for g in range(1, 34)})
    report = verify_msccl(algo_xml("allgather", 34, 34, gpus))
    bad = [f for f in report.findings if f.rule == "tbs-per-channel"]
    assert [(f.gpu, f.tb) for f in bad] == [(0, 32)]
