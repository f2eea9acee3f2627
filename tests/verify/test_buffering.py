"""The verifier runs the runtime's connection buffering: NCCL_STEPS slots, 4 per Simple
call and 1 per LL/LL128 call, one call per chunk for large messages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.runtime_limits import MSCCL
from te_ccl.verify.msccl.execute import buffering
from te_ccl.verify.msccl.reader import parse_msccl
from te_ccl.verify.msccl.verify import verify_msccl

from .xmltools import algo_xml, reference


def exchange(sends: int, cnt: int = 1, proto: str = "Simple", max_bytes: int = 0) -> str:
    """Two GPUs each send ``sends`` messages of ``cnt`` chunks before receiving any."""
    gpus = {g: {"i": cnt, "o": 2 * cnt,
                "tbs": [(1 - g, 1 - g, 0, [("s", "i", 0, "o", g * cnt, cnt)] * sends
                         + [("r", "i", 0, "o", (1 - g) * cnt, cnt)] * sends),
                        (-1, -1, 0, [("cpy", "i", 0, "o", g * cnt, cnt)])]}
            for g in (0, 1)}
    return algo_xml("allgather", 2, 2 * cnt, gpus, proto=proto, max_bytes=max_bytes)


def deadlocks(text: str, **kw) -> bool:
    found = verify_msccl(text, **kw).rules()
    assert found <= {"deadlock"}, found
    return "deadlock" in found


@pytest.mark.parametrize("proto, holds", [("Simple", 2), ("LL", 8), ("LL128", 8)])
def test_a_connection_holds_the_runtimes_sends_per_protocol(proto: str, holds: int) -> None:
    assert holds == MSCCL.outstanding_sends(proto)
    assert not deadlocks(exchange(holds, proto=proto))
    assert deadlocks(exchange(holds + 1, proto=proto))


def test_deadlocks_only_at_depth_two() -> None:
    """Three sends in flight each way: fine with eight slots a send, a hang with two."""
    assert not deadlocks(exchange(3, proto="LL"))
    assert not deadlocks(exchange(3), slots=8 * MSCCL.call_slots("Simple"))
    assert deadlocks(exchange(3))


def test_the_data_free_check_finds_the_same_deadlocks() -> None:
    """``buffering`` (waits, calls and flags only) agrees with the full execution."""
    for sends in (2, 3):
        algo, _ = parse_msccl(exchange(sends))
        found = {f.rule for f in buffering(algo) if f.severity == "error"}
        assert ("deadlock" in found) == deadlocks(exchange(sends))


def test_the_deadlock_names_its_cycle() -> None:
    report = verify_msccl(exchange(3))
    first = report.errors[0]
    assert first.rule == "deadlock" and (first.gpu, first.tb, first.step) == (0, 0, 2)
    assert first.message.startswith(
        "r0/tb0/s2 waits to send to r1 on channel 0 (connection full: 2 call(s) unreceived) "
        "<- r1/tb0/s2 waits to send to r0 on channel 0 (connection full: 2 call(s) unreceived) "
        "<- r0/tb0/s2")


def test_a_step_of_several_chunks_is_one_call_per_chunk() -> None:
    # one send of 3 chunks needs 12 slots under Simple: it waits for the receiver
    assert deadlocks(exchange(1, cnt=3))
    assert not deadlocks(exchange(1, cnt=2))
    assert "s0 call 3/3" in verify_msccl(exchange(1, cnt=3)).errors[0].message
    assert not deadlocks(exchange(1, cnt=8, proto="LL"))


def test_a_long_step_streams_to_a_waiting_receiver() -> None:
    """cnt 5 is 20 slots: more than a connection has, fine when the receiver drains it."""
    gpus = {0: {"i": 5, "o": 10, "tbs": [(1, -1, 0, [("s", "i", 0, "o", 0, 5)]),
                                         (-1, 1, 0, [("r", "i", 0, "o", 5, 5)]),
                                         (-1, -1, 0, [("cpy", "i", 0, "o", 0, 5)])]},
            1: {"i": 5, "o": 10, "tbs": [(-1, 0, 0, [("r", "i", 0, "o", 0, 5)]),
                                         (0, -1, 0, [("s", "i", 0, "o", 5, 5)]),
                                         (-1, -1, 0, [("cpy", "i", 0, "o", 5, 5)])]}}
    assert not deadlocks(algo_xml("allgather", 2, 10, gpus))


def test_max_bytes_lets_the_runtime_put_chunks_in_one_call() -> None:
    # 8 chunks per loop: up to 8 MiB a chunk is at most 1 MiB and a call carries 2 chunks
    assert deadlocks(exchange(1, cnt=4))
    assert not deadlocks(exchange(1, cnt=4, max_bytes=8 << 20))
    assert deadlocks(exchange(1, cnt=4, max_bytes=(8 << 20) + 1))


def test_recursive_doubling_reference_hangs_above_8_mib() -> None:
    """msccl-tools' recursive doubling AllGather sends 4 chunks each way before receiving:
    four calls of four slots against eight, once a chunk exceeds 1 MiB."""
    text = reference("azure_allgather_recursive_doubling_8_1.xml")
    assert 'maxBytes="0"' in text
    assert deadlocks(text)
    assert not deadlocks(text.replace('maxBytes="0"', f'maxBytes="{8 << 20}"', 1))
    assert not deadlocks(text.replace('proto="Simple"', 'proto="LL128"', 1))


@st.composite
def programs(draw) -> str:
    """Two GPUs, one thread block each way, sends and receives in a random order with
    matching cnt sequences on both connections."""
    cnts = [draw(st.lists(st.integers(1, 3), min_size=1, max_size=5)) for _ in (0, 1)]
    gpus = {}
    for g in (0, 1):
        ops = [("s", c) for c in cnts[g]] + [("r", c) for c in cnts[1 - g]]
        order = draw(st.permutations(range(len(ops))))
        steps, sent, got = [], 0, 0
        for k in order:  # keep the sends and the receives in their own order
            kind, _ = ops[k]
            c = cnts[g][sent] if kind == "s" else cnts[1 - g][got]
            sent, got = sent + (kind == "s"), got + (kind == "r")
            steps.append((kind, "i", 0, "o", 0 if kind == "s" else 3, c))
        gpus[g] = {"i": 3, "o": 6, "tbs": [(1 - g, 1 - g, 0, steps)]}
    proto = draw(st.sampled_from(["Simple", "LL"]))
    return algo_xml("allgather", 2, 6, gpus, proto=proto)


@settings(max_examples=60, deadline=None)
@given(programs(), st.integers(1, 12), st.integers(0, 12))
def test_more_slots_never_turn_a_passing_file_into_a_deadlock(text: str, slots: int,
                                                              more: int) -> None:
    def dead(n: int) -> bool:
        return "deadlock" in verify_msccl(text, slots=n).rules()

    if not dead(slots):
        assert not dead(slots + more)
    if dead(slots + more):
        assert dead(slots)


@settings(max_examples=60, deadline=None)
@given(programs(), st.sampled_from([0, 6 << 20, 12 << 20, 24 << 20]))
def test_a_smaller_max_bytes_never_turns_a_passing_file_into_a_deadlock(text: str,
                                                                         max_bytes: int) -> None:
    """A smaller message carries more chunks a call: never more calls on a connection."""
    def dead(limit: int) -> bool:
        bounded = text.replace('maxBytes="0"', f'maxBytes="{limit}"', 1)
        return "deadlock" in verify_msccl(bounded).rules()

    if not dead(max_bytes):
        assert not dead(max_bytes // 2 if max_bytes else 12 << 20)
