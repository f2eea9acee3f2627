"""A size range whose search has no schedule in its share takes the first cheap candidate
that builds: one that raises any of the compile's errors (over a runtime limit, refused,
out of time) is noted and the next one tried, as a compile's first file does."""

from __future__ import annotations

import time

import pytest

import te_ccl.compiler.pipeline as pipeline
from te_ccl.backends.base import SolveParams
from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.deadline import TimeLimitReached, left, until
from te_ccl.errors import RuntimeLimitError, SolverError, VerificationError
from te_ccl.spec.topology import load_topology

ERRORS = (RuntimeLimitError("over the runtime's 32 channels"),
          VerificationError("the checker refused it"),
          TimeLimitReached("time limit of 60 s reached while building it"))


def _raising(error: Exception):
    def build():
        raise error
    return build


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_a_first_candidate_that_raises_is_noted_and_the_next_one_kept(
        tmp_path, monkeypatch, error):
    def no_search(*args, **kw):
        raise TimeLimitReached("time limit of 1 s reached while searching")

    def candidates(previous, topology, collective, params, fmt="xml"):
        yield "failing template", _raising(error)
        yield "template ring", lambda: build_baseline("ring", topology, collective)

    monkeypatch.setattr(pipeline, "solve_checked", no_search)
    monkeypatch.setattr(pipeline, "first_candidates", candidates)
    topology = load_topology("ring8")
    collective = Collective(CollectiveKind.ALLGATHER, 4096, tuple(range(8)))
    with until(600):
        [result] = pipeline.compile_size_library(topology, collective,
                                                 SolveParams(time_limit_s=600), 1024, 4096,
                                                 str(tmp_path / "lib"))
    notes = result.schedule.info.notes
    assert any(f"no first file from the failing template ({error})" in n for n in notes)
    assert any("the first cheap candidate kept" in n for n in notes)
    assert (tmp_path / "lib").is_dir()


def test_a_range_whose_every_candidate_raises_has_no_file(tmp_path, monkeypatch):
    def no_search(*args, **kw):
        raise TimeLimitReached("time limit of 1 s reached while searching")

    monkeypatch.setattr(pipeline, "solve_checked", no_search)
    monkeypatch.setattr(pipeline, "first_candidates",
                        lambda *a, **kw: iter([("failing template", _raising(ERRORS[1]))]))
    topology = load_topology("ring8")
    collective = Collective(CollectiveKind.ALLGATHER, 4096, tuple(range(8)))
    with until(600), pytest.raises(SolverError, match="while searching"):
        pipeline.compile_size_library(topology, collective, SolveParams(time_limit_s=600),
                                      1024, 4096, str(tmp_path / "lib"))


def test_no_candidate_is_built_past_the_compiles_deadline(tmp_path, monkeypatch):
    """A candidate that ran the compile's time out ends the library there: the next one
    is not built (no file could be written past the deadline)."""
    built: list[str] = []

    def no_search(*args, **kw):
        raise TimeLimitReached("time limit of 1 s reached while searching")

    def out_of_time():
        while left() > 0:
            time.sleep(0.01)
        raise TimeLimitReached("time limit of 1 s reached while building it")

    def candidates(previous, topology, collective, params, fmt="xml"):
        yield "slow template", out_of_time
        yield "template ring", lambda: built.append("ring")

    monkeypatch.setattr(pipeline, "solve_checked", no_search)
    monkeypatch.setattr(pipeline, "first_candidates", candidates)
    topology = load_topology("ring8")
    collective = Collective(CollectiveKind.ALLGATHER, 4096, tuple(range(8)))
    with until(1.0), pytest.raises(TimeLimitReached):
        pipeline.compile_size_library(topology, collective, SolveParams(time_limit_s=1),
                                      1024, 4096, str(tmp_path / "lib"))
    assert built == []
