"""From ``FORK_FROM`` steps the data and the race check run in a forked process, along
the order the scheduler fires the transmissions in: the report is the one of running
them here, for valid files, deadlocks, races, wrong results and rooted files alike."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

import te_ccl.verify.msccl.execute as execute
from te_ccl.verify.msccl.layout import Layout
from te_ccl.verify.msccl.reader import parse_msccl
from te_ccl.verify.msccl.verify import Report, verify_msccl

from .test_buffering import exchange
from .test_scale import _RING, _round_trip, mutations
from .xmltools import edit, insert_after, reference, reference_files, step_line

TREE = "scheduler_ncv4_ar_tree_12_LL.xml"
RING = "azure_allgather_ring_8_1_1.xml"
CASES = {  # name: (the text, built in the test, verify_msccl's options, a rule it finds)
    "deadlock at depth 2": (lambda: exchange(3), {}, "deadlock"),
    "deadlock with 4 slots": (lambda: exchange(2), {"slots": 4}, "deadlock"),
    "no deadlock with 32 slots": (lambda: exchange(5), {"slots": 32}, None),
    "race through another GPU": (lambda: _round_trip(forward=False), {}, "data-race"),
    "ordered through another GPU": (lambda: _round_trip(forward=True), {}, None),
    "synthetic ring": (lambda: _RING, {}, None),
    # these read the reference files (skipped without ../shared beside the repository)
    "race": (lambda: edit(reference(TREE), (0, 12, 0), depid=-1, deps=-1), {}, "data-race"),
    "wrong result": (lambda: edit(reference(RING), (0, 0, 1), dstoff=6), {}, "wrong-result"),
    "unreceived": (lambda: insert_after(reference(RING), (0, 0, 7),
                                        step_line(8, "s", "o", 0, "o", 0)),
                   {}, "unreceived-data"),
    "not executed": (lambda: edit(reference(RING), (0, 0, 1), type="zz"), {}, "step-type"),
}


def _outcome(report: Report) -> tuple:
    return (report.findings, report.executed, report.root, report.root_inferred,
            report.notes)


def _both(text: str, monkeypatch, **kwargs) -> tuple[tuple, tuple]:
    monkeypatch.setattr(execute, "workers", lambda: 2)
    monkeypatch.setattr(execute, "FORK_FROM", 10**9)
    here = _outcome(verify_msccl(text, **kwargs))
    monkeypatch.setattr(execute, "FORK_FROM", 0)
    forks: list[int] = []
    real = execute.streamed

    def counted(*args):
        forks.append(1)
        return real(*args)

    monkeypatch.setattr(execute, "streamed", counted)
    forked = _outcome(verify_msccl(text, **kwargs))
    assert forks or not here[1]  # an executed file forked
    return here, forked


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_forked_run_reports_what_a_run_here_reports(name, monkeypatch):
    build, kwargs, rule = CASES[name]
    here, forked = _both(build(), monkeypatch, **kwargs)
    assert forked == here
    assert ({f.rule for f in here[0]} == set()) if rule is None else \
        rule in {f.rule for f in here[0]}


@pytest.mark.parametrize("k", range(12))
def test_reference_files_fork_to_the_same_report(k, monkeypatch):
    here, forked = _both(reference_files()[k].read_text(), monkeypatch)
    assert forked == here


@settings(max_examples=30, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutations())
def test_mutated_files_fork_to_the_same_report(monkeypatch, case):
    here, forked = _both(case[2], monkeypatch)
    assert forked == here


def test_the_data_runs_in_another_process_and_only_its_judgement_comes_back():
    algo, _ = parse_msccl(_RING)
    layout = Layout(algo.coll, algo.ngpus, algo.nchunksperloop, bool(algo.inplace))
    pid, completed = execute.judged(algo, layout, lambda run: (os.getpid(), run.completed),
                                    fork=True)
    assert pid != os.getpid() and completed
    assert execute.judged(algo, layout, lambda run: os.getpid(), fork=False) == os.getpid()


def test_a_data_process_that_dies_is_done_again_here(monkeypatch):
    """Killed (out of memory, say), it leaves no result: the data runs here on the order
    kept, from the thread blocks' steps (the scheduler has replaced its own copy)."""
    build, kwargs, rule = CASES["race through another GPU"]
    text = build()
    parent, real, again = os.getpid(), execute.streamed, []

    def dying(produce, consume):  # the data process dies as it starts on the order
        def consume_or_die(items):
            if os.getpid() != parent:
                os._exit(1)
            again.append(True)
            return consume(items)

        return real(produce, consume_or_die)

    here, _ = _both(text, monkeypatch, **kwargs)
    monkeypatch.setattr(execute, "streamed", dying)
    assert _outcome(verify_msccl(text, **kwargs)) == here and rule in {f.rule for f in here[0]}
    assert again == [True]  # forked, died, and done again here
