"""The time limit reached inside each stage of a compile (model building, the scale
greedy, lowering, verifying, writing): once a file is kept the best one is written, cut
short; before any, nothing is written and the error says what a first file takes.

The clock (``time.monotonic``, the seam ``--clock-rate`` uses too) jumps a day ahead the
first time the stage's code reads it (itself or through :mod:`te_ccl.deadline`'s checks),
once the first file is kept for the stages that follow it: from then on every stage is
out of time, and the compile must end at once with what it holds."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import te_ccl.compiler.pipeline as pipeline
import te_ccl.deadline as deadline
from te_ccl.backends.base import SolveParams
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import CompileResult, Kept, compile_collective
from te_ccl.compiler.options import CompileOptions
from te_ccl.deadline import TimeLimitReached, left, until
from te_ccl.spec.topology import load_topology
from te_ccl.verify.msccl.verify import verify_msccl

LIMIT_S = 600.0  # far above the seconds these compiles take: only the jump ends them
DAY_S = 86_400.0
MIB = 1 << 20

# stage → (an AllGather whose search after the first file runs it: topology, size; where
# the stage's code lives; what the cut-short note says stopped the compile)
AFTER_FIRST_FILE = {
    # the flow model out of time, the race keeps the scale schedule, which cannot be lowered
    "building the model": ("ndv2x2", MIB, "te_ccl/model/",
                           r"the search's best, .* with 0 s left"),
    "scale greedy": ("mesh4x4", 64 * MIB, "te_ccl/backends/scale/greedy.py",
                     "reached while running the scale greedy"),
    "lowering": ("mesh4x4", 64 * MIB, "te_ccl/lower/msccl/",
                 "reached while lowering the schedule to MSCCL XML"),
    "verifying": ("mesh4x4", 64 * MIB, "te_ccl/verify/msccl/",
                  "reached while (reading|verifying) the MSCCL XML"),
}


class Jump:
    """``time.monotonic`` that runs a day ahead from the first deadline check (or other
    clock read) made by code under ``where``, once ``armed``; ``where`` None: only when
    told (:meth:`now`)."""

    def __init__(self, where: str | None, armed: bool) -> None:
        self.where, self.armed, self.offset = where, armed, 0.0
        self.real: Callable[[], float] = time.monotonic

    def __call__(self) -> float:
        if self.armed and not self.offset and self.where is not None \
                and self.where in _reader(sys._getframe(1)):
            self.now()
        return self.real() + self.offset

    def now(self) -> None:
        self.offset = DAY_S

    def on_kept(self, message: str) -> None:
        """A progress callback: arms the jump once a file is kept."""
        if isinstance(message, Kept):
            self.armed = True


def _reader(frame) -> str:
    """The file of the code that read the clock, through :mod:`te_ccl.deadline`'s checks
    (which ask for it on behalf of their caller)."""
    while frame.f_back is not None and frame.f_code.co_filename == deadline.__file__:
        frame = frame.f_back
    return frame.f_code.co_filename.replace("\\", "/")


def compile_jumping(tmp_path: Path, jump: Jump, name: str = "mesh4x4",
                    size: int = 64 * MIB) -> tuple[CompileResult, Path]:
    """An AllGather compiled inside a command's deadline, as ``teccl compile`` runs it."""
    topology, out = load_topology(name), tmp_path / "ag.xml"
    collective = Collective(CollectiveKind.ALLGATHER, size, tuple(range(topology.ngpus)))
    with until(LIMIT_S):
        result = compile_collective(topology, collective,
                                    SolveParams(time_limit_s=LIMIT_S, threads=1),
                                    CompileOptions(output=str(out)), jump.on_kept)
    return result, out


@pytest.mark.parametrize("stage", list(AFTER_FIRST_FILE))
def test_a_deadline_reached_in_a_stage_writes_the_best_file_kept(tmp_path, monkeypatch,
                                                                  stage):
    """The search's stages may stop at the deadline themselves or leave it to the next
    check (a candidate out of time gives way to the next): either way the compile ends
    cut short with the best verified file, its note naming the stage where the time ran
    out (not a check that found it gone later in the search)."""
    name, size, where, said = AFTER_FIRST_FILE[stage]
    jump = Jump(where, armed=False)
    monkeypatch.setattr(time, "monotonic", jump)
    result, out = compile_jumping(tmp_path, jump, name, size)
    assert jump.offset, f"the compile never read the clock in {where} after its first file"
    assert verify_msccl(out.read_text()).valid
    assert result.cut_short and result.incumbents
    assert result.bound_ratio == pytest.approx(min(i.ratio for i in result.incumbents))
    cut = [n for n in result.schedule.info.notes if n.startswith("anytime: cut short")]
    said = rf"cut short \(time limit of 600 s {said}\)" if said.startswith("reached") else said
    assert len(cut) == 1 and re.search(said, cut[0]), cut


def test_a_deadline_reached_before_any_file_writes_nothing_and_says_what_one_takes(
        tmp_path, monkeypatch):
    """Out of time while the input is expanded into chunks, before any file is kept: the
    compile writes nothing and says what a first file would take."""
    jump = Jump("te_ccl/collective/", armed=True)
    monkeypatch.setattr(time, "monotonic", jump)
    with pytest.raises(TimeLimitReached) as caught:
        compile_jumping(tmp_path, jump)
    message = str(caught.value)
    assert "time limit of 600 s reached while expanding the collective into chunks" in message
    assert re.search(r"a first file .* needs about [0-9.e+-]+ s more to lower and verify",
                     message)
    assert not list(tmp_path.iterdir())


def test_a_limit_used_up_before_the_compile_says_so_and_what_a_first_file_needs(tmp_path):
    """A command's limit spent on start-up and imports before the compile began (the
    deadline started a second before it ran out, as a process's start counts): the
    message says the limit was gone before the search, not the stage whose check found
    it gone, and the first file's estimate is not 0 s though FRED's in-switch schedules
    lower to no MSCCL XML the compile could time."""
    topology = load_topology("fred-d")
    collective = Collective(CollectiveKind.ALLREDUCE, 20_000_000, tuple(range(topology.ngpus)))
    options = CompileOptions(output=str(tmp_path / "ar.json"), fmt="json",
                             fred_tables=str(tmp_path / "tables"))
    with until(2.0, since=time.monotonic() - 3.0), pytest.raises(TimeLimitReached) as caught:
        compile_collective(topology, collective, SolveParams(time_limit_s=2.0, threads=1),
                           options)
    message = str(caught.value)
    assert message.startswith("the time limit of 2 s was used up before the search began "
                              "(start-up, imports and reading the input took all of it)")
    need = re.search(r"a first file .* needs about ([0-9.e+-]+) s more", message)
    assert need and float(need.group(1)) > 0, message
    assert not list(tmp_path.iterdir())


def test_a_deadline_reached_while_writing_still_writes_the_file(tmp_path, monkeypatch):
    """Writing is never cut: the time it takes was kept from the search."""
    jump = Jump(None, armed=False)
    real = pipeline.write_atomic

    def late(path, data):
        jump.now()
        assert left() == 0  # the command's deadline has passed
        real(path, data)

    monkeypatch.setattr(time, "monotonic", jump)
    monkeypatch.setattr(pipeline, "write_atomic", late)
    result, out = compile_jumping(tmp_path, jump)
    assert jump.offset and verify_msccl(out.read_text()).valid
    assert not result.cut_short


def test_a_first_file_kept_with_no_time_left_is_written_without_starting_the_checker(
        tmp_path, monkeypatch):
    """The limit gone once the first file (gated by the verifier alone) is kept: the
    checker is not started (it would read every transfer before its first deadline
    check); the file is written, its schedule not checked, with a note saying so."""
    jump = Jump(None, armed=False)
    started: list[float] = []
    real = pipeline.check_schedule

    def checking(schedule):
        started.append(left())
        return real(schedule)

    monkeypatch.setattr(time, "monotonic", jump)
    monkeypatch.setattr(pipeline, "check_schedule", checking)
    topology, out = load_topology("mesh4x4"), tmp_path / "ag.xml"
    collective = Collective(CollectiveKind.ALLGATHER, 64 * MIB, tuple(range(topology.ngpus)))
    with until(LIMIT_S):
        result = compile_collective(topology, collective,
                                    SolveParams(time_limit_s=LIMIT_S, threads=1),
                                    CompileOptions(output=str(out)),
                                    lambda m: isinstance(m, Kept) and jump.now())
    assert 0.0 not in started
    assert result.schedule_checked is False and verify_msccl(out.read_text()).valid
    assert any("the schedule checker did not run" in n for n in result.schedule.info.notes)
