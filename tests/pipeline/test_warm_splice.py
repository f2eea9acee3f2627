"""Compiling again after a link failure by splicing the previous file
(:mod:`te_ccl.compiler.splice`): the steps the loss does not touch are kept, the chunks
that crossed the lost link come from another neighbour, and the file verifies."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

import te_ccl
from te_ccl.background import in_background
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, Timer
from te_ccl.compiler.incumbent import Incumbent
from te_ccl.compiler.splice import QUEUED, SPLICING, WAYS, splice, step_times
from te_ccl.compiler.warm import QUALITY_GAP, offer_spliced, read_previous
from te_ccl.deadline import TimeLimitReached, until
from te_ccl.lower.msccl.to_xml import program_to_xml
from te_ccl.runtime_limits import MSCCL
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.topology.edit import TopologyEdit, edit_topology
from te_ccl.verify.msccl.reader import read_msccl
from te_ccl.verify.msccl.verify import verify_msccl

SIZE = 1 << 30  # bandwidth-bound: where a spliced file can come within 2% of the bound
LOST = ("g0", "g1")


@pytest.fixture(scope="module")
def dgx1():
    return load_topology("dgx1")


@pytest.fixture(scope="module")
def previous(tmp_path_factory, dgx1) -> str:
    """An AllGather on dgx1, compiled once for the module by the scale backend alone: the
    same file whatever the machine's load (a race cut short may keep another)."""
    path = tmp_path_factory.mktemp("splice") / "dgx1.xml"
    te_ccl.compile(dgx1, "allgather", size=SIZE, output=str(path), time_limit_s=30,
                   backend="scale")
    return str(path)


@pytest.fixture(scope="module")
def changed(dgx1):
    return edit_topology(dgx1, TopologyEdit(without_links=(":".join(LOST),),
                                            name="dgx1-changed"))


def _allgather(topology) -> Collective:
    return Collective(CollectiveKind.ALLGATHER, SIZE, tuple(range(topology.ngpus)))


def _spliced(previous, dgx1, changed, way=WAYS[0]):
    algo, coll = read_msccl(previous), _allgather(changed)
    got = splice(algo, dgx1, changed, coll, MSCCL, step_times(algo, dgx1, changed, coll), way)
    assert not isinstance(got, str), got
    return algo, got


@pytest.mark.parametrize("way", WAYS)
def test_the_spliced_file_verifies_and_sends_nothing_over_the_lost_link(previous, dgx1,
                                                                        changed, way):
    _, got = _spliced(previous, dgx1, changed, way)
    report = verify_msccl(program_to_xml(got.program).decode())
    assert report.valid, report.errors[:3]
    lost = {(LOST[0], LOST[1]), (LOST[1], LOST[0])}
    for gpu in got.program.gpus:
        for tb in gpu.threadblocks:
            for peer in (tb.send, tb.recv):
                if peer >= 0:
                    assert (changed.gpu(gpu.id), changed.gpu(peer)) not in lost


def test_steps_off_the_lost_link_are_kept_and_moves_are_few(previous, dgx1, changed):
    algo, got = _spliced(previous, dgx1, changed)
    sends = sum(1 for g in algo.gpus for tb in g.threadblocks for st in tb.steps
                if st.type == "s")
    over = sum(1 for g in algo.gpus for tb in g.threadblocks for st in tb.steps
               if st.type == "s" and {changed.gpu(g.id), changed.gpu(tb.send)} == set(LOST))
    assert over <= got.moved < sends // 4  # a local repair, not a new schedule
    # every chunk still reaches every rank, over links the network still has
    trees = {chunk: edges for chunk, _, edges in got.trees}
    assert len(trees) == algo.nchunksperloop
    for edges in trees.values():
        assert len(edges) == algo.ngpus - 1
        assert all(changed.has_link(changed.gpu(s), changed.gpu(r)) for r, s in edges)


@pytest.mark.parametrize("stands", [True, False])
def test_each_spliced_file_is_read_once_and_checked_only_where_it_stands(
        previous, changed, tmp_path, monkeypatch, stands):
    """The verifier's read of a spliced file is the replay's too; a file that does not
    stand is not checked."""
    import te_ccl.verify.msccl.verify as verifier

    reads, checks = [], []
    parse, static = verifier.parse_msccl, verifier.static_checks
    monkeypatch.setattr(verifier, "parse_msccl", lambda *a: reads.append(1) or parse(*a))
    monkeypatch.setattr(verifier, "static_checks",
                        lambda *a, **k: checks.append(1) or static(*a, **k))
    coll = _allgather(changed)
    previous_file = read_previous(previous, coll, changed, routes=False)
    monkeypatch.setattr("te_ccl.compiler.warm.xml_reader.read_msccl", None)  # no other read
    bound = lower_bound(changed, coll).seconds * (2 if stands else 0.5)  # a gap it is in
    kept = Incumbent(bound, None)
    got = offer_spliced(previous_file, changed, coll,
                        CompileOptions(output=str(tmp_path / "new.xml")), Timer(), kept)
    assert got is stands
    assert len(checks) == int(stands) and (not stands or len(reads) == 1)
    assert stands or any("spliced does not stand" in n for n in kept.notes)


@pytest.mark.parametrize("stands", [True, False])
def test_a_splice_s_schedule_built_beside_its_verification_is_the_one_built_after(
        previous, dgx1, changed, tmp_path, monkeypatch, stands):
    """Built in a forked process while the file is verified (from ``BESIDE_FROM`` tree
    edges), the splice's schedule is the one the compile builds itself; a splice whose
    replay does not stand stops the process it forked and leaves none behind."""
    import te_ccl.compiler.warm as warm

    forks = []
    monkeypatch.setattr(warm, "workers", lambda: 2)  # a second core, where it runs or not
    monkeypatch.setattr(warm, "in_background",
                        lambda *a, **kw: forks.append(a) or in_background(*a, **kw))
    before = _children()
    coll = _allgather(changed)
    previous_file = read_previous(previous, coll, changed, routes=False)
    # a bound it stands against, or one its busiest link is just within the gap of (so its
    # file is replayed, beside the forked build) but its replay is not
    bound = lower_bound(changed, coll).seconds * 2 if stands else \
        _spliced(previous, dgx1, changed, QUEUED)[1].busiest_s / (1 + QUALITY_GAP) * (1 + 1e-9)
    got = []
    for beside in (1 << 62, 0):  # never forked, always forked
        monkeypatch.setattr(warm, "BESIDE_FROM", beside)
        kept = Incumbent(bound, None)
        assert offer_spliced(previous_file, changed, coll,
                             CompileOptions(output=str(tmp_path / "new.xml")), Timer(),
                             kept) is stands
        assert bool(forks) is (beside == 0)
        got.append(kept.best.schedule.transfers if stands else None)
        assert not stands or kept.best.schedule.topology is changed  # not a child's copy
    assert got[0] == got[1]
    assert _children() <= before  # every process it forked was reaped (a zombie is listed)


def _children() -> set[int]:
    """This process's children (reaped ones are gone; those other tests in the same worker
    left are in ``before`` too), from Linux's /proc; empty elsewhere."""
    lists = list(Path("/proc/self/task").glob("*/children"))  # none without that kernel file
    return {int(pid) for children in lists for pid in children.read_text().split()}


def test_the_busiest_link_bounds_the_replay(previous, dgx1, changed):
    _, got = _spliced(previous, dgx1, changed)
    data = program_to_xml(got.program).decode()
    assert simulate_msccl(data, changed, SIZE).finish_time_s >= got.busiest_s


def test_other_collectives_and_gpus_gone_are_not_spliced(previous, dgx1, changed):
    algo = read_msccl(previous)
    coll = Collective(CollectiveKind.ALLREDUCE, SIZE, tuple(range(8)))
    assert "not spliced" in splice(algo, dgx1, changed, coll, MSCCL, [], 0.0)
    fewer = edit_topology(dgx1, TopologyEdit(without_gpus=("g7",), name="dgx1-seven"))
    got = read_previous(previous, _allgather(fewer), fewer)
    assert got.algo is None  # the ranks changed: the compile goes on without a splice


@pytest.mark.slow  # two compiles of a 1 GiB file
def test_the_compile_from_the_previous_file_writes_the_splice_only_where_it_stands(
        previous, changed, tmp_path):
    """Where the splice replays within the gap it is the only file (no search); else it
    is not kept and the scale repair compiles; either way the file written is within the
    gap of the bound (so of any compile from scratch) and verifies."""
    out = tmp_path / "again.xml"
    res = te_ccl.compile(changed, "allgather", size=SIZE, output=str(out),
                         previous=previous, time_limit_s=30)
    sources = [i.source for i in res.incumbents]
    notes = " ".join(res.schedule.info.notes)
    if "spliced stands" in notes:
        assert sources == ["first file: template previous-spliced, 86 chunk(s) per rank"]
    else:
        assert "spliced does not stand" in notes
        assert not any("previous-spliced" in s for s in sources)
    assert res.measured_by == "xml replay"
    assert res.bound_ratio <= 1 + QUALITY_GAP
    assert verify_msccl(str(out)).valid


def test_a_file_that_uses_no_link_lost_is_kept_as_it_is(previous, dgx1):
    slower = edit_topology(dgx1, TopologyEdit(scale_links=(("g0:g1", 0.5),),
                                              name="dgx1-slower"))
    algo, coll = read_msccl(previous), _allgather(slower)
    got = splice(algo, dgx1, slower, coll, MSCCL, step_times(algo, dgx1, slower, coll),
                 WAYS[0])
    assert not isinstance(got, str) and got.moved == 0
    again = read_msccl(program_to_xml(got.program).decode())
    def steps(a):  # what the runtime runs: each step's fields, not its line in the file
        return [[[st[:10] for st in tb.steps] for tb in g.threadblocks] for g in a.gpus]

    assert steps(again) == steps(algo)


def test_splicing_stops_at_the_deadline(previous, dgx1, changed):
    """Past the compile's deadline the splice stops, naming its stage, rather than run on."""
    algo, coll = read_msccl(previous), _allgather(changed)
    times = step_times(algo, dgx1, changed, coll)
    with pytest.raises(TimeLimitReached, match=SPLICING), \
            until(1.0, since=time.monotonic() - 10.0):  # a deadline passed already
        splice(algo, dgx1, changed, coll, MSCCL, times, WAYS[0])


def test_a_previous_file_that_does_not_run_is_not_spliced(previous, changed, tmp_path):
    """A file whose sends and receives do not match (a receive removed by hand) has no
    replay to order a splice by: the compile goes on without it, with a note."""
    bad = _without_a_receive(previous, tmp_path)
    coll = _allgather(changed)
    kept = Incumbent(lower_bound(changed, coll).seconds, None)
    assert not offer_spliced(read_previous(str(bad), coll, changed), changed, coll,
                             CompileOptions(output=str(tmp_path / "new.xml")), Timer(), kept)
    assert any("is not spliced (its replay fails" in n for n in kept.notes)


def test_a_previous_file_that_does_not_run_is_not_spliced_onto_slower_links(previous, dgx1,
                                                                            tmp_path):
    """Where no link is lost nothing is replayed first: the splice itself refuses it."""
    slower = edit_topology(dgx1, TopologyEdit(scale_links=(("g0:g1", 0.5),),
                                              name="dgx1-slower"))
    algo, coll = read_msccl(str(_without_a_receive(previous, tmp_path))), _allgather(slower)
    got = splice(algo, dgx1, slower, coll, MSCCL, step_times(algo, dgx1, slower, coll),
                 WAYS[0])
    assert got == "its sends and receives do not match on a connection"
    text = Path(previous).read_text()
    wait = re.search(r'depid="\d+" deps="\d+"', text)  # a wait for a step not there
    bad = tmp_path / "bad-dep.xml"
    bad.write_text(text[:wait.start()] + 'depid="0" deps="9999"' + text[wait.end():])
    algo = read_msccl(str(bad))
    got = splice(algo, dgx1, slower, coll, MSCCL, step_times(algo, dgx1, slower, coll),
                 WAYS[0])
    assert isinstance(got, str) and "waits for step 9999" in got


def _without_a_receive(previous: str, tmp_path: Path) -> Path:
    """The previous file with its first receive removed, as a hand edit might."""
    text = Path(previous).read_text()
    receive = re.search(r'\n\s*<step [^>]*type="r"[^>]*/>', text)
    bad = tmp_path / "bad.xml"
    bad.write_text(text[:receive.start()] + text[receive.end():])
    return bad


@pytest.mark.slow  # a 64-GPU compile
def test_on_a_torus_the_queued_way_stands_where_the_weighted_ones_do_not(tmp_path):
    """A torus's file keeps every link busy until it ends: a chunk that crossed the lost
    link arrives anew after that, so the queued way (its pass-ons served anew, earliest
    arrival first) stands within the gap, the weighted ones (senders by load) not."""
    torus = load_topology("torus8x8")
    path = tmp_path / "torus.xml"
    te_ccl.compile(torus, "allgather", size=SIZE, output=str(path), time_limit_s=60,
                   backend="scale")  # as the previous file: the same whatever the load
    cut = edit_topology(torus, TopologyEdit(without_links=("g0:g1",), name="torus-cut"))
    algo, coll = read_msccl(str(path)), _allgather(cut)
    times, bound = step_times(algo, torus, cut, coll), lower_bound(cut, coll).seconds
    ratio = {}
    for way in (QUEUED, WAYS[1]):
        got = splice(algo, torus, cut, coll, MSCCL, times, way)
        assert not isinstance(got, str), got
        data = program_to_xml(got.program).decode()
        assert verify_msccl(data).valid
        ratio[way] = simulate_msccl(data, cut, SIZE).finish_time_s / bound
    assert ratio[QUEUED] <= 1 + QUALITY_GAP < ratio[WAYS[1]]


@pytest.mark.parametrize("way", WAYS)
def test_a_splice_whose_waits_name_thread_blocks_past_the_runtime_s_is_refused(
        previous, dgx1, changed, way):
    """A wait names its thread block in 8 bits: a splice that would need more (its new
    thread blocks come after the file's) is refused with a reason, not written."""
    algo, coll = read_msccl(previous), _allgather(changed)
    few = replace(MSCCL, max_depid=8)
    got = splice(algo, dgx1, changed, coll, few, step_times(algo, dgx1, changed, coll), way)
    assert isinstance(got, str) and "thread blocks" in got
