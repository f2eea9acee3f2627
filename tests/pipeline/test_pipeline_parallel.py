"""At scale the checker and the written file's replay run in forked processes beside the
lowering and the verifier: the compile's outcome is the one of running them in turn."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

import te_ccl.compiler.judge as judge
import te_ccl.compiler.pipeline as pipeline
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileOptions, compile_collective
from te_ccl.errors import VerificationError
from te_ccl.topology.generators import ring
from te_ccl.verify.schedule_check import Violation

RING = ring(4, 1e9)
PARAMS = SolveParams(backend="milp", time_limit_s=20, threads=1)
AG = Collective(CollectiveKind.ALLGATHER, 1 << 20, tuple(range(4)))


def _compile(tmp_path: Path, name: str):
    out = tmp_path / name
    return compile_collective(RING, AG, PARAMS, CompileOptions(output=str(out))), out


def test_forked_checker_and_replay_give_what_running_them_in_turn_gives(tmp_path, monkeypatch):
    monkeypatch.setattr(judge, "XML_REPLAY_LIMIT", 0)  # the written file is replayed
    monkeypatch.setattr(judge, "SHARES", replace(judge.SHARES, finalist=0))  # not a finalist's, judged before
    in_turn, first = _compile(tmp_path, "in_turn.xml")
    parent, replays = os.getpid(), []
    real = judge.xml_replay

    def counting(schedule, data, algo=None):
        replays.append(os.getpid())
        return real(schedule, data, algo)

    monkeypatch.setattr(judge, "xml_replay", counting)
    for module in (pipeline, judge):
        monkeypatch.setattr(module, "PARALLEL_FROM", 0)
    for module in (pipeline, judge):
        monkeypatch.setattr(module, "workers", lambda: 2)
    forked, second = _compile(tmp_path, "forked.xml")
    assert second.read_bytes() == first.read_bytes()
    assert forked.timing == in_turn.timing and forked.timing.measured_by == "xml replay"
    assert parent not in replays  # the replay ran in the child, not here


@pytest.mark.parametrize("parallel_from", [0, 10**9])
def test_a_schedule_the_checker_refuses_is_never_written(tmp_path, monkeypatch, parallel_from):
    for module in (pipeline, judge):
        monkeypatch.setattr(module, "PARALLEL_FROM", parallel_from)
    for module in (pipeline, judge):
        monkeypatch.setattr(module, "workers", lambda: 2)
    monkeypatch.setattr(pipeline, "check_schedule",
                        lambda s: [Violation("capacity", "link a->b carries 2 chunks")])
    with pytest.raises(VerificationError, match=r"\[capacity\] link a->b carries 2 chunks"):
        _compile(tmp_path, "bad.xml")
    assert list(tmp_path.iterdir()) == []


def test_the_forked_checker_starts_before_the_lowering_at_the_lowest_priority(tmp_path,
                                                                            monkeypatch):
    """It then takes only what the lowering leaves of the cores, from its first pass on."""
    import te_ccl.lower.msccl.parallel as parallel

    events: list[str] = []
    low_priority: dict[str, bool] = {}
    real_fork, real_instructions = pipeline.in_background, parallel.build_instructions

    def fork(fn, *args, **kwargs):
        events.append(fn.__name__)
        low_priority[fn.__name__] = kwargs.get("low_priority", False)
        return real_fork(fn, *args, **kwargs)

    def instructions(*args, **kwargs):
        events.append("instructions")
        return real_instructions(*args, **kwargs)

    for module in (pipeline, judge):
        monkeypatch.setattr(module, "in_background", fork)
    monkeypatch.setattr(parallel, "build_instructions", instructions)
    for module in (pipeline, judge):
        monkeypatch.setattr(module, "PARALLEL_FROM", 0)
    for module in (pipeline, judge):
        monkeypatch.setattr(module, "workers", lambda: 2)
    _, out = _compile(tmp_path, "early.xml")
    assert out.exists() and events.count("check_schedule") == 1
    assert events.index("check_schedule") < events.index("instructions")
    # the written file's replay too gives way, to the verifier's two processes
    assert low_priority == {"check_schedule": True, "xml_replay": True}
