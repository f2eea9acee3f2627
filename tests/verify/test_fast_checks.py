"""The verifier's shortcuts give what the plain procedures give.

* The symbolic run wakes a block only on the event that can meet the condition it stopped
  at; its transmissions fire in the order of a plain scheduler that visits every unfinished
  block in index order, sweep after sweep, until none moves.
* The parser's and the unchecked rules test each step against an all-clear condition
  first; the findings equal those of running every check on every step.
* Orphan waits are looked for only where a nop's wait can reach a step without one.
* Thread blocks without reductions or unknown types are grouped into transmissions in one
  pass; the transmissions equal the general grouping's.
* The writes still to come per chunk are counted in one numpy pass; the counts equal a
  count chunk by chunk.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.runtime_limits import MSCCL
from te_ccl.verify.msccl import runtime_rules, static_rules
from te_ccl.verify.msccl.execute import _Machine
from te_ccl.verify.msccl.findings import Findings
from te_ccl.verify.msccl.kernel import _grouped, orphan_waits, transmissions
from te_ccl.verify.msccl.layout import Layout
from te_ccl.verify.msccl.memory import _write_counts
from te_ccl.verify.msccl.model import RECVS, SENDS, STEP_TYPES, Algo, Step, Threadblock
from te_ccl.verify.msccl.reader import parse_msccl

from .test_buffering import exchange
from .test_scale import mutations


def _plain_order(algo: Algo, depth: int) -> list[int]:
    """Block indices in firing order under the plain scheduler (no maxBytes)."""
    blocks = [(g.id, tb) for g in algo.gpus for tb in g.threadblocks]
    programs = [transmissions(tb) for _, tb in blocks]
    index = {}
    for i, (gpu, tb) in enumerate(blocks):
        index.setdefault((gpu, tb.id), i)
    queued: dict[tuple[int, int, int], int] = {}
    messages: dict[tuple[int, int, int], int] = {}
    pc, call, flag = [0] * len(blocks), [0] * len(blocks), [-1] * len(blocks)
    order: list[int] = []
    moved = True
    while moved:
        moved = False
        for i, (gpu, tb) in enumerate(blocks):
            while pc[i] < len(programs[i]):
                t = programs[i][pc[i]]
                recv = (tb.recv, gpu, tb.chan) if t.type in RECVS and tb.recv >= 0 else None
                send = (gpu, tb.send, tb.chan) if t.type in SENDS and tb.send >= 0 else None
                targets = [(index.get((gpu, d)), v) for d, v in t.deps]
                if call[i] == 0 and any(j is None or flag[j] < v for j, v in targets):
                    break
                if (t.type in RECVS and recv is None) or (t.type in SENDS and send is None):
                    break
                calls = MSCCL.step_calls(t.cnt) if recv or send else 0
                while call[i] < calls:
                    if ((recv and not queued.get(recv)) or
                            (send and queued.get(send, 0) >= depth)):
                        break
                    if recv:
                        queued[recv] -= 1
                    if send:
                        queued[send] = queued.get(send, 0) + 1
                    call[i] += 1
                    moved = True
                if call[i] < calls or (recv and not messages.get(recv)):
                    break
                if recv:
                    messages[recv] -= 1
                if send:
                    messages[send] = messages.get(send, 0) + 1
                if t.hasdep:
                    flag[i] = t.flag
                order.append(i)
                pc[i] += 1
                call[i] = 0
                moved = True
    return order


def _machine_order(algo: Algo, slots: int) -> list[int]:
    order: list[int] = []
    _Machine(algo, slots).run(order.extend)
    return order


def _checkable(text: str) -> Algo | None:
    """The algorithm if the symbolic run may execute it (no error that blocks it)."""
    from te_ccl.verify.msccl.findings import RULES

    algo, found = parse_msccl(text)
    found += runtime_rules.runtime_checks(algo) + static_rules.static_checks(algo)
    if any(f.severity == "error" and RULES[f.rule].blocks_execution for f in found):
        return None
    if algo.max_bytes or Layout(algo.coll, algo.ngpus, algo.nchunksperloop,
                                 bool(algo.inplace)).problem():
        return None
    return algo


def test_deadlocking_exchange_fires_in_the_plain_order() -> None:
    for sends in (2, 3, 5):
        for slots in (4, 8, 32):
            algo = _checkable(exchange(sends))
            assert algo is not None
            depth = slots // MSCCL.call_slots(algo.proto)
            assert _machine_order(algo, slots) == _plain_order(algo, depth)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(), st.sampled_from([4, 8, 16]))
def test_mutated_files_fire_in_the_plain_order(case, slots: int) -> None:
    algo = _checkable(case[2])
    if algo is None:
        return
    depth = slots // MSCCL.call_slots(algo.proto)
    assert _machine_order(algo, slots) == _plain_order(algo, depth)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_all_clear_steps_are_those_without_findings(case) -> None:
    algo, _ = parse_msccl(case[2])
    for gpu in algo.gpus:
        tbs = {t.id: t for t in gpu.threadblocks}
        for tb in gpu.threadblocks:
            for nsend, nrecv in ((0, 0), (MSCCL.max_peers, MSCCL.max_peers)):
                fast = runtime_rules._tb_steps(gpu, tb, MSCCL.max_steps, nsend, nrecv, MSCCL)
                slow = [f for s in tb.steps for f in runtime_rules._step(
                    gpu, tb, s, MSCCL.max_steps, nsend, nrecv, orphan_waits(tb), MSCCL)]
                assert fast == Findings() + slow
        fast = static_rules._steps(algo, gpu, MSCCL.max_steps)
        slow = [f for tb in gpu.threadblocks for s in tb.steps
                for f in static_rules._step(gpu, tbs, tb, s)]
        fast.counts.pop("max-steps", None)
        assert [f for f in fast if f.rule != "max-steps"] == list(Findings() + slow)
        assert fast.counts == (Findings() + slow).counts


_KINDS = sorted(STEP_TYPES) + ["bogus"]


@st.composite
def threadblocks(draw, kinds: list[str] = _KINDS) -> Threadblock:
    """Short thread blocks of any step types (or of ``kinds``), with and without
    dependencies, whose reductions often share a destination (so that they fuse)."""
    n = draw(st.integers(0, 10))
    steps = []
    for pos in range(n):
        depid = draw(st.sampled_from([-1, -1, 0, 1]))
        steps.append(Step(pos, draw(st.sampled_from(kinds)), "i", draw(st.integers(0, 2)),
                          "o", draw(st.integers(0, 1)), draw(st.integers(0, 2)), depid,
                          0 if depid >= 0 else -1, draw(st.integers(0, 1)), pos, pos))
    return Threadblock(0, -1, -1, 0, tuple(steps))


@settings(max_examples=300, deadline=None)
@given(threadblocks())
def test_orphan_waits_match_the_grouping(tb: Threadblock) -> None:
    assert orphan_waits(tb) == {t.first.position for t in _grouped(tb) if t.orphan_wait}


@settings(max_examples=300, deadline=None)
@given(st.one_of(threadblocks(), threadblocks(sorted(set(STEP_TYPES) - {"re"}))))
def test_transmissions_match_the_grouping(tb: Threadblock) -> None:
    assert transmissions(tb) == _grouped(tb)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ios"), st.integers(0, 6), st.integers(0, 4)),
                max_size=12))
def test_write_counts_match_a_count_chunk_by_chunk(writes: list[tuple[str, int, int]]) -> None:
    offsets = {"i": 0, "o": 10, "s": 3}   # "s" overlaps "i" and "o", as an alias would
    plain = [0] * 20
    for buf, off, cnt in writes:
        for k in range(offsets[buf] + off, offsets[buf] + off + cnt):
            plain[k] += 1
    assert list(_write_counts(writes, offsets, 20)) == plain
