"""The verifier's fast paths agree with its exact slow ones, and catch broken large-style files.

Fast paths under test: the line-based reader (vs the general tokenizer), one transmission
per step (vs the kernel's general grouping), per-GPU local clocks (vs the exact search
of the recorded happens-before graph alone), packed values and flat memory (via the
findings on mutated files).
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.verify.msccl.hb import HappensBefore
from te_ccl.verify.msccl.kernel import _grouped, transmissions
from te_ccl.verify.msccl.reader import parse_msccl, parse_text
from te_ccl.verify.msccl.verify import verify_msccl

from .synthetic import ring_allgather
from .test_semantics import VALID
from .xmltools import REFERENCE, algo_xml, delete, edit, locate

_RING = "\n".join(ring_allgather(8, 2, 4)) + "\n"
_FILES = ["azure_allgather_ring_8_1_1.xml", "azure_allreduce_a100_ring_8_4_1.xml",
          "azure_allreduce_1step_4_1.xml", "azure_hierarchical_allreduce_2_4_1.xml"]
_RECV = re.compile(r'type="(r|rcs|rrc|rrs|rrcs)"')
_SENDRECV = re.compile(r'type="(s|r|rcs|rrc|rrs|rrcs)"')


def _sources() -> list[str]:
    texts = [VALID[k] for k in sorted(VALID)] + [_RING]
    if REFERENCE.is_dir():
        texts += [(REFERENCE / "generated" / name).read_text() for name in _FILES]
    return texts


SOURCES = _sources()


@contextmanager
def _graph_only():
    """Answer every ordering question by searching the recorded graph (no local clocks)."""
    def ordered(self, b, other, node):
        return other == b or self.reaches(other, node, self.last[b])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HappensBefore, "ordered", ordered)
        yield


@st.composite
def mutations(draw) -> tuple[str, str, str]:
    """(kind, original, mutated): drop a step, swap two receives, change a cnt, drop a
    dependency, or move an offset."""
    text = draw(st.sampled_from(SOURCES))
    lines = text.split("\n")
    steps = [i for i, line in enumerate(lines) if "<step " in line]
    kind = draw(st.sampled_from(["drop", "swap", "cnt", "nodep", "offset"]))
    i = draw(st.sampled_from(steps))
    if kind == "drop":
        del lines[i]
    elif kind == "swap":
        pairs = [j for j in steps if j + 1 in steps and _RECV.search(lines[j])
                 and _RECV.search(lines[j + 1])]
        if pairs:
            j = draw(st.sampled_from(pairs))
            a, b = (re.search(r' s="\d+"', lines[k]).group() for k in (j, j + 1))
            lines[j], lines[j + 1] = lines[j + 1].replace(b, a, 1), lines[j].replace(a, b, 1)
    elif kind == "cnt":
        lines[i] = re.sub(r'cnt="\d+"', f'cnt="{draw(st.integers(0, 3))}"', lines[i])
    elif kind == "nodep":
        lines[i] = re.sub(r'depid="-?\d+" deps="-?\d+"', 'depid="-1" deps="-1"', lines[i])
    else:
        key = draw(st.sampled_from(["srcoff", "dstoff"]))
        lines[i] = re.sub(rf'{key}="(\d+)"', lambda m: f'{key}="{int(m.group(1)) + 1}"',
                          lines[i])
    return kind, text, "\n".join(lines)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutation_findings_do_not_depend_on_the_fast_paths(case) -> None:
    _kind, _original, mutated = case
    fast = parse_msccl(mutated)
    assert fast == parse_text(mutated)
    for tb in (t for g in fast[0].gpus for t in g.threadblocks):
        assert transmissions(tb) == _grouped(tb)
    report = verify_msccl(mutated)
    with _graph_only():
        exact = verify_msccl(mutated)
    assert report.findings == exact.findings and report.notes == exact.notes


@contextmanager
def _clocks_checked():
    """Every order the local clocks claim is checked against a search of the graph."""
    real = HappensBefore.ordered

    def ordered(self, b, other, node):
        if other != b and self.clock[b][self.local[other]] >= node:
            assert self.reaches(other, node, self.last[b]), (b, other, node)
        return real(self, b, other, node)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HappensBefore, "ordered", ordered)
        yield


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_the_local_clocks_claim_no_order_the_graph_lacks(case) -> None:
    """Clocks shared copy-on-write with their publications must never see a later
    change of their publisher."""
    with _clocks_checked():
        verify_msccl(case[2])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutation_of_a_transfer_is_rejected(case) -> None:
    kind, original, mutated = case
    report = verify_msccl(mutated)
    if mutated == original:
        assert report.valid
        return
    changed = [a for a, b in zip(original.split("\n"), mutated.split("\n"), strict=False)
               if a != b]
    if kind == "drop" and _SENDRECV.search(changed[0]):
        assert not report.valid
    if kind == "cnt" and _SENDRECV.search(changed[0]):
        assert "connection-sequence" in report.rules()
    if kind == "swap" and len({re.search(r'dstoff="-?\d+"', c).group() for c in changed}) > 1:
        assert not report.valid  # the data lands in each other's chunks


def test_synthetic_ring_is_valid_and_a_dropped_dependency_races() -> None:
    assert verify_msccl(_RING).findings == ()
    where = next(k for k in locate(_RING) if len(k) == 3 and k[1] % 2 == 1 and
                 'depid="-1"' not in _RING.split("\n")[locate(_RING)[k]])
    report = verify_msccl(edit(_RING, where, depid=-1, deps=-1))
    assert {"data-race", "uninitialized-read"} <= report.rules()  # it sends before the data came
    race = next(f for f in report.errors if f.rule == "data-race")
    named = f"tb {where[1]} step {where[2]},"   # reported at the send or at the receive
    assert race.gpu == where[0] and ((race.tb, race.step) == where[1:] or named in race.message)


def _round_trip(forward: bool) -> str:
    """GPU 0 writes o[0] twice from two thread blocks; only the trip through GPU 1 (which
    forwards o[0] back, or without ``forward`` sends its own chunk first) orders them."""
    own = ("s", "o", 1, "o", -1)
    g1_steps = [("cpy", "i", 0, "o", 1)] + ([("rcs", "o", -1, "o", 0), own] if forward else
                                            [own, ("r", "o", -1, "o", 0)])
    g0 = {"i": 1, "o": 2, "tbs": [(1, -1, 0, [("cpy", "i", 0, "o", 0), ("s", "o", 0, "o", -1)]),
                                  (-1, 1, 0, [("r", "o", -1, "o", 0), ("r", "o", -1, "o", 1)])]}
    g1 = {"i": 1, "o": 2, "tbs": [(0, 0, 0, g1_steps)]}
    return algo_xml("allgather", 2, 2, {0: g0, 1: g1})


def test_ordering_through_another_gpu_counts() -> None:
    report = verify_msccl(_round_trip(forward=True))
    assert report.findings == (), [f.message for f in report.findings]


def test_without_the_round_trip_the_writes_race() -> None:
    report = verify_msccl(_round_trip(forward=False))
    races = [f for f in report.findings if f.rule == "data-race"]
    assert races and races[0].gpu == 0 and "o[0]" in races[0].message


def test_file_with_a_quirk_is_read_by_the_general_reader() -> None:
    text = delete(_RING.replace('dstoff="5"', 'dstoff="05"', 1), (7, 0, 0))
    algo, found = parse_msccl(text)
    assert [f.rule for f in found] == ["leading-zero"]
    assert (algo, found) == parse_text(text)


def test_one_to_one_thread_blocks_take_the_short_path_to_the_same_program() -> None:
    tbs = [t for text in SOURCES for g in parse_msccl(text)[0].gpus for t in g.threadblocks]
    assert any(all(s.type not in ("nop", "re") for s in t.steps) for t in tbs)
    for tb in tbs:
        assert transmissions(tb) == _grouped(tb)


def test_huge_declared_buffers_cost_nothing() -> None:
    big = re.sub(r's_chunks="\d+"', 's_chunks="400000000"', _RING)
    assert big != _RING
    assert verify_msccl(big).findings == ()


def test_the_verifier_stops_at_the_compiles_deadline(monkeypatch):
    import te_ccl.verify.msccl.execute as execute
    from te_ccl.deadline import TimeLimitReached, until

    with until(0.0), pytest.raises(TimeLimitReached, match="while reading the MSCCL XML"):
        verify_msccl(_RING)
    monkeypatch.setattr(execute, "CHECK_EVERY", 1)
    algo, _ = parse_msccl(_RING)
    with until(0.0), pytest.raises(TimeLimitReached, match="while verifying the MSCCL XML"):
        execute.execute(algo, None)
    with until(3600.0):
        assert verify_msccl(_RING).valid
